#if NIO
import Foundation
import NIOCore
import NIOEmbedded
import NIOPosix
import Synchronization
import Testing

@testable import Sluice
@testable import SluiceCLI
import SluiceNIO

/// NIO's clock is an Int64 of nanoseconds: traces past it cannot run on a NIO loop.
private let nioLimitMilliseconds = UInt64(Int64.max) / 1_000_000

/// Every vector of Tests/Vectors with an expected output.
private func expectedVectors() -> [String] {
    VectorPaths.traces().filter {
        FileManager.default.fileExists(atPath: String($0.dropLast(".trace".count)) + ".expected")
    }
}

/// The NIO engine (`LimiterScheduler.eventLoop`) on an `EmbeddedEventLoop`:
/// manual time, tasks run on the caller's thread inside `advanceTime`.
struct EmbeddedLoopEngine: ManualTimeEngine, @unchecked Sendable {
    let loop = EmbeddedEventLoop()
    var scheduler: LimiterScheduler { .eventLoop(loop) }
    var now: LimiterInstant { LimiterInstant(nanoseconds: loop.now.uptimeNanoseconds) }
    func advanceTime(to instant: LimiterInstant) async {
        loop.advanceTime(to: .uptimeNanoseconds(min(instant.nanoseconds, UInt64(Int64.max))))
    }
    func runAll() async { loop.advanceTime(to: .uptimeNanoseconds(UInt64(Int64.max))) }
    func finish() async throws { try await loop.shutdownGracefully() }
}

/// The NIO engine on a `NIOAsyncTestingEventLoop`: manual time, tasks run on
/// the loop's own thread while the test awaits `advanceTime`.
struct AsyncTestingLoopEngine: ManualTimeEngine {
    let loop = NIOAsyncTestingEventLoop()
    var scheduler: LimiterScheduler { .eventLoop(loop) }
    var now: LimiterInstant { LimiterInstant(nanoseconds: loop.now.uptimeNanoseconds) }
    func advanceTime(to instant: LimiterInstant) async {
        await loop.advanceTime(to: .uptimeNanoseconds(min(instant.nanoseconds, UInt64(Int64.max))))
    }
    func runAll() async { await loop.advanceTime(to: .uptimeNanoseconds(UInt64(Int64.max))) }
    func finish() async throws {
        // First let the loop run what calls from this thread queued (a limiter's
        // deinit cancels its wake-up: the promise is failed by a task queued on
        // the loop); shutting down at once would drop that task and leave the
        // promise unfulfilled.
        await loop.run()
        await loop.shutdownGracefully()
    }
}

/// A host that counts the wake-ups a limiter schedules and cancels.
final class CountingHost: LimiterTimerHost {
    let inner: EventLoopTimerHost
    let scheduled = Atomic<Int>(0)
    let cancelled = Atomic<Int>(0)
    init(_ loop: any EventLoop) { inner = EventLoopTimerHost(loop) }
    var nowNanoseconds: UInt64 { inner.nowNanoseconds }
    func scheduleWakeUp(at deadline: UInt64, _ body: @escaping @Sendable () -> Void) -> any LimiterWakeUp {
        scheduled.add(1, ordering: .relaxed)
        return Counted(wakeUp: inner.scheduleWakeUp(at: deadline, body), host: self)
    }
    struct Counted: LimiterWakeUp {
        let wakeUp: any LimiterWakeUp
        let host: CountingHost
        func cancel() {
            host.cancelled.add(1, ordering: .relaxed)
            wakeUp.cancel()
        }
    }
}

/// Runs a behaviour case, then shuts the loop down even when the case threw
/// (a NIO test loop freed with tasks still scheduled stops the process).
func run(_ test: BehaviourCase, on engine: some ManualTimeEngine) async {
    do {
        try await test.body(engine)
    } catch {
        Issue.record(error, "\(test.name)")
    }
    do {
        try await engine.finish()
    } catch {
        Issue.record(error, "shutting the loop down")
    }
}

@Suite("NIO engine")
struct NIOEngineTests {
    @Test("there are vectors to run") func vectorsExist() {
        #expect(expectedVectors().count >= 60)
        for family in ["throttle-", "debounce-", "audit-", "rate-"] {
            #expect(expectedVectors().contains { ($0 as NSString).lastPathComponent.hasPrefix(family) }, "\(family)")
        }
    }

    /// The behaviour suite of Behaviour/ (also run on the manual clock by
    /// SluiceTests), on both NIO loops with manual time.
    @Test("behaviour on an EmbeddedEventLoop", arguments: Behaviour.cases)
    func behaviourEmbedded(_ test: BehaviourCase) async throws {
        let engine = EmbeddedLoopEngine()
        await run(test, on: engine)
    }

    @Test("behaviour on a NIOAsyncTestingEventLoop", arguments: Behaviour.cases)
    func behaviourAsyncTesting(_ test: BehaviourCase) async throws {
        let engine = AsyncTestingLoopEngine()
        await run(test, on: engine)
    }

    /// Every vector with an expected output, replayed (the shared `LimiterReplay`)
    /// on an EmbeddedEventLoop and on a NIOAsyncTestingEventLoop: per key the
    /// same lines in order, as a multiset equal.
    @Test("vector on NIO loops with manual time", arguments: expectedVectors())
    func vector(path: String) async throws {
        let base = String(path.dropLast(".trace".count))
        let expected = try String(contentsOfFile: base + ".expected", encoding: .utf8)
            .split(separator: "\n", omittingEmptySubsequences: true).map(String.init)
        let trace = try Trace(parsing: [UInt8](Data(contentsOf: URL(fileURLWithPath: path))))
        // Skipped: times past NIO's clock (Int64 ns, about 292 years).
        let outputTimes = expected.compactMap { UInt64($0.split(separator: " ").first ?? "") }
        guard (trace.steps.map(\.time) + outputTimes).allSatisfy({ $0 < nioLimitMilliseconds }) else { return }
        let embedded = EmbeddedLoopEngine()
        compareVectorOutput(
            actual: try await LimiterReplay(trace).run(on: embedded), expected: expected,
            name: path + " (EmbeddedEventLoop)")
        try await embedded.finish()
        let asyncTesting = AsyncTestingLoopEngine()
        compareVectorOutput(
            actual: try await LimiterReplay(trace).run(on: asyncTesting), expected: expected,
            name: path + " (NIOAsyncTestingEventLoop)")
        try await asyncTesting.finish()
    }

    @Test("a deadline that moves later keeps the scheduled task; a wake-up with nothing due re-arms")
    func rearmOnlyWhenEarlier() throws {
        let loop = EmbeddedEventLoop()
        let host = CountingHost(loop)
        let out = Mutex<[(String, Int, UInt64)]>([])
        let limiter = try Limiter<String, Int>(.debounce(interval: .milliseconds(100)), scheduler: .external(host)) {
            key, value in out.withLock { $0.append((key, value, loop.now.uptimeNanoseconds)) }
        }
        // 50 calls 1 ms apart: the key's deadline moves from 100 ms to 149 ms,
        // always later than the task armed at 100 ms: one task, never cancelled.
        for i in 0..<50 {
            try limiter.submit(i, for: "a")
            loop.advanceTime(by: .milliseconds(1))
        }
        #expect(host.scheduled.load(ordering: .relaxed) == 1)
        #expect(host.cancelled.load(ordering: .relaxed) == 0)
        // At 100 ms the task runs with nothing due and arms the next deadline
        // (the timer wheel may report an earlier slot first): a few tasks, not 50.
        loop.advanceTime(to: .uptimeNanoseconds(148_999_999))
        #expect(out.withLock { $0.isEmpty }, "never early")
        #expect(host.scheduled.load(ordering: .relaxed) <= 3)
        loop.advanceTime(to: .uptimeNanoseconds(149_000_000))
        #expect(out.withLock { $0.map(\.1) } == [49])
        #expect(out.withLock { $0.map(\.2) } == [149_000_000], "at its exact deadline")
        #expect(host.cancelled.load(ordering: .relaxed) == 0)
        // Nothing pending: no task comes back.
        let idle = host.scheduled.load(ordering: .relaxed)
        loop.advanceTime(by: .seconds(10))
        #expect(host.scheduled.load(ordering: .relaxed) == idle)
        try limiter.submit(1, for: "b")  // armed at its deadline
        try limiter.submit(2, for: "c")  // the same deadline: nothing new
        #expect(host.scheduled.load(ordering: .relaxed) == idle + 1)
        try limiter.close(drain: true)
        #expect(out.withLock { $0.map(\.1).sorted() } == [1, 2, 49], "close(drain) emits the pending values")
        try loop.syncShutdownGracefully()
    }

    @Test(
        "real NIO loops: calls from every loop of the group, emissions on the limiter's loop, never early",
        .timeLimit(.minutes(1)))
    func realLoop() async throws {
        let group = MultiThreadedEventLoopGroup(numberOfThreads: 2)
        let loop = group.next()
        let other = group.next()
        let delivered = Mutex<[(Int, Bool, UInt64)]>([])
        // 1 s windows: the five submits coalesce on any machine but a badly
        // stalled one, which the test measures (then it checks order and
        // "never early" only).
        let limiter = try Limiter<String, Int>(.debounce(interval: .seconds(1)), scheduler: .eventLoop(loop)) {
            _, value in
            delivered.withLock { $0.append((value, loop.inEventLoop, NIODeadline.now().uptimeNanoseconds)) }
        }
        // Submitted from the other loop's thread. called[i]: the time read just
        // before submit i, so value i's deadline is at least 1 s after it; and
        // the time after the last, to tell whether the five fell in one window.
        let (called, after) = try await other.submit { () -> ([UInt64], UInt64) in
            var called: [UInt64] = []
            for i in 0..<5 {
                called.append(NIODeadline.now().uptimeNanoseconds)
                _ = try? limiter.submit(i, for: "doc")
            }
            return (called, NIODeadline.now().uptimeNanoseconds)
        }.get()
        let giveUp = ContinuousClock.now + .seconds(30)
        while delivered.withLock({ $0.last?.0 != 4 }) && ContinuousClock.now < giveUp {
            try await Task.sleep(for: .milliseconds(10))
        }
        let got = delivered.withLock { $0 }
        if after - called[0] < 1_000_000_000 {
            #expect(got.map(\.0) == [4])
        } else {
            print("note: real NIO loops: the submits spanned \(after - called[0]) ns, more than the 1 s window")
        }
        #expect(got.last?.0 == 4 && got.map(\.0) == got.map(\.0).sorted(), "the last value last, in call order")
        for (value, onLoop, at) in got {
            #expect(onLoop, "delivered on the limiter's loop")
            #expect(at >= called[value] + 1_000_000_000, "value \(value) never early")
        }
        try await limiter.close(drain: true)
        try await group.shutdownGracefully()
    }
}
#endif
