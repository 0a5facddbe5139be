import Dispatch
import Foundation
import Testing

@testable import Sluice

@Suite("Throttler and Debouncer")
struct HelperTests {
    /// Collects which works ran, in order.
    final class Runs: Sendable {
        private let list = Locked<[Int]>([])
        func work(_ id: Int) -> @Sendable () -> Void { { self.list.withLock { $0.append(id) } } }
        var ids: [Int] { list.withLock { $0 } }
    }

    @Test("throttler: leading at once, the last call of the interval at its end")
    func throttler() throws {
        let clock = ManualLimiterClock()
        let runs = Runs()
        let throttler = try Throttler(interval: .milliseconds(100), scheduler: .manual(clock))
        #expect(throttler.call(runs.work(1)) == .emitted)
        #expect(runs.ids == [1])
        clock.advance(by: .milliseconds(10))
        #expect(throttler.call(runs.work(2)) == .scheduled(at: instant(100)))
        throttler.call(runs.work(3))
        #expect(throttler.isPending)
        clock.advance(to: instant(100))
        #expect(runs.ids == [1, 3])
        clock.advance(to: instant(150))
        throttler.call(runs.work(4))  // inside the window opened by the trailing run
        clock.runUntilIdle()
        #expect(runs.ids == [1, 3, 4])
        // The run at 200 opened a window, which ends idle at 300.
        #expect(clock.now == instant(300))
    }

    @Test("throttler options: trailing only, leading only; flush and cancel")
    func throttlerOptions() throws {
        let clock = ManualLimiterClock()
        let runs = Runs()
        let trailingOnly = try Throttler(interval: .milliseconds(100), leading: false, scheduler: .manual(clock))
        trailingOnly.call(runs.work(1))
        trailingOnly.call(runs.work(2))
        #expect(runs.ids.isEmpty)
        #expect(trailingOnly.flush())
        #expect(runs.ids == [2])
        #expect(!trailingOnly.flush())

        let leadingOnly = try Throttler(interval: .milliseconds(100), trailing: false, scheduler: .manual(clock))
        leadingOnly.call(runs.work(3))
        #expect(leadingOnly.call(runs.work(4)) == .dropped(retryAt: instant(100)))
        trailingOnly.call(runs.work(5))
        #expect(trailingOnly.cancel())
        clock.runUntilIdle()
        #expect(runs.ids == [2, 3])
        #expect(throws: LimiterError.invalidArgument) {
            try Throttler(interval: .seconds(1), leading: false, trailing: false, scheduler: .manual(clock))
        }
    }

    @Test("debouncer: a burst runs its last work once it is quiet; maxWait bounds the wait")
    func debouncer() throws {
        let clock = ManualLimiterClock()
        let runs = Runs()
        let debouncer = try Debouncer(
            interval: .milliseconds(100), maxWait: .milliseconds(250),
            scheduler: .manual(clock))
        for i in 0..<10 {
            clock.advance(to: instant(UInt64(i * 50)))
            debouncer.call(runs.work(i))
        }
        // Calls every 50 ms: maxWait runs the work of 200 at 250 and that of 450 at 500.
        clock.runUntilIdle()
        #expect(runs.ids == [4, 9])
        #expect(!debouncer.isPending)

        let leading = try Debouncer(
            interval: .milliseconds(100), leading: true, trailing: true,
            scheduler: .manual(clock))
        let before = runs.ids.count
        leading.call(runs.work(100))
        leading.call(runs.work(101))
        clock.runUntilIdle()
        #expect(Array(runs.ids[before...]) == [100, 101])
        #expect(throws: LimiterError.invalidArgument) {
            try Debouncer(interval: .seconds(2), maxWait: .seconds(1), scheduler: .manual(clock))
        }
    }

    @Test("releasing a helper cancels its pending work and releases the closure; no retain cycle")
    func deallocationCancels() throws {
        let clock = ManualLimiterClock()
        let runs = Runs()
        let tracker = LifetimeTracker()
        weak var weakThrottler: Throttler?
        weak var weakDebouncer: Debouncer?
        do {
            let throttler = try Throttler(interval: .seconds(1), scheduler: .manual(clock))
            let debouncer = try Debouncer(interval: .seconds(1), scheduler: .manual(clock))
            weakThrottler = throttler
            weakDebouncer = debouncer
            throttler.call(runs.work(1))
            let captured1 = tracker.make(1)
            let captured2 = tracker.make(2)
            // The work captures the helper itself, weakly, as a user would.
            throttler.call { [weak throttler] in
                _ = (captured1, throttler); runs.work(2)()
            }
            debouncer.call { [weak debouncer] in
                _ = (captured2, debouncer); runs.work(3)()
            }
            #expect(throttler.isPending && debouncer.isPending)
        }
        #expect(weakThrottler == nil)
        #expect(weakDebouncer == nil)
        #expect(tracker.alive == 0, "pending closures released")
        clock.runUntilIdle()
        #expect(runs.ids == [1], "pending work never runs")
    }

    @Test("a target queue runs the work there")
    func targetQueue() async throws {
        let clock = ManualLimiterClock()
        let queue = DispatchQueue(label: "sluice.test.helpers")
        let key = DispatchSpecificKey<Int>()
        queue.setSpecific(key: key, value: 42)
        let onQueue = Locked<[Bool]>([])
        let debouncer = try Debouncer(
            interval: .milliseconds(10), leading: true, queue: queue,
            scheduler: .manual(clock))
        for _ in 0..<3 {
            debouncer.call { onQueue.withLock { $0.append(DispatchQueue.getSpecific(key: key) == 42) } }
        }
        clock.runUntilIdle()
        await withCheckedContinuation { c in queue.async { c.resume() } }
        #expect(onQueue.withLock { $0 } == [true, true])
    }

    @Test(
        "in real time on the default loop: order kept, never early", .enabled(if: !isThreadSanitized),
        .timeLimit(.minutes(1)))
    func realTime() async throws {
        try await RealtimeGate.shared.run {
            let runs = Locked<[(id: Int, at: LimiterInstant)]>([])
            // 2 s windows: the five calls below land inside one on any
            // machine but a badly stalled one, which the test measures.
            let debouncer = try Debouncer(interval: .seconds(2))
            let throttler = try Throttler(interval: .seconds(2))
            let start = LimiterLoop.now
            var called: [LimiterInstant] = []
            for i in 0..<5 {
                called.append(LimiterLoop.now)
                debouncer.call { runs.withLock { $0.append((i, LimiterLoop.now)) } }
                throttler.call { runs.withLock { $0.append((100 + i, LimiterLoop.now)) } }
            }
            let oneBurst = insideOneWindow(start, LimiterLoop.now, .seconds(2), "helpers in real time")
            // The last call of each is always run (nothing supersedes it).
            #expect(await eventually { runs.withLock { $0.contains { $0.id == 4 } && $0.contains { $0.id == 104 } } })
            let got = runs.withLock { $0 }
            if oneBurst {
                #expect(got.map(\.id).sorted() == [4, 100, 104])
            }
            for run in got {
                // Never early: a debounced run comes 2 s after its own call at the
                // soonest; a throttled one at its call or at a window's end.
                let call = called[run.id % 100]
                #expect(run.at >= call, "run \(run.id) before its call")
                if run.id < 100 { #expect(run.at >= call.advanced(by: .seconds(2)), "run \(run.id) early") }
            }
            let throttled = got.filter { $0.id >= 100 }.map(\.id)
            #expect(throttled == throttled.sorted() && throttled.last == 104, "throttled runs in call order")
            let debounced = got.filter { $0.id < 100 }.map(\.id)
            #expect(debounced == debounced.sorted() && debounced.last == 4, "debounced runs in call order")
        }
    }
}
