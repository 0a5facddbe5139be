import Dispatch
import Foundation
import Testing

@testable import Sluice

/// Limiters on the real event loop (the C loop layer, `sluice_loop.h`).
/// Timing assertions are generous: order and never-early are exact, lateness
/// only bounded loosely, because the machine may be busy.
@Suite("Limiter on the event loop", .serialized)
struct LoopLimiterTests {
    @Test("the default loop: immediate emissions on the caller, timer emissions on the loop, never early")
    func defaultLoop() async throws {
        let times = Locked<[(value: Int, at: LimiterInstant, deliveredAt: LimiterInstant, loopThread: Bool)]>([])
        let limiter = try Limiter<String, Int>(.throttle(interval: .milliseconds(30)), delivery: .events { event in
            guard event.kind == .emitted else { return }
            let entry = (event.value, event.at, LimiterLoop.now, LimiterLoop.shared.isLoopThread)
            times.withLock { $0.append(entry) }
        })
        let start = limiter.now
        #expect(try limiter.submit(1, for: "a") == .emitted)
        #expect(times.withLock { $0.map(\.value) } == [1], "delivered before submit returned")
        let decision = try limiter.submit(2, for: "a")
        guard case let .scheduled(at) = decision else {
            Issue.record("expected scheduled, got \(decision)")
            return
        }
        #expect(at >= start.advanced(by: .milliseconds(30)))
        #expect(await eventually { times.withLock { $0.count } == 2 })
        let second = times.withLock { $0[1] }
        #expect(second.value == 2)
        #expect(second.at == at, "reported at its exact deadline")
        #expect(second.deliveredAt >= at, "never early")
        #expect(second.loopThread, "timer emissions are delivered on the loop thread")
        #expect(second.deliveredAt <= at.advanced(by: .milliseconds(500)))
        try await limiter.close()
    }

    @Test("a loop of one's own, released after its limiters")
    func ownLoop() async throws {
        let out = Recorder<Int, Int>()
        var loop: LimiterLoop? = try LimiterLoop()
        weak let weakLoop = loop
        var limiter: Limiter<Int, Int>? = try Limiter(.debounce(interval: .milliseconds(5)), scheduler: .loop(loop!),
                                                      handler: out.handler)
        loop = nil
        try limiter!.submit(1, for: 1)
        try limiter!.submit(2, for: 1)
        #expect(await eventually { out.count == 1 })
        #expect(out.values == [2])
        #expect(weakLoop != nil, "the limiter keeps its loop")
        limiter = nil
        #expect(await eventually { weakLoop == nil })
    }

    @Test("concurrent submitters on the loop: every value accounted for once, all released")
    func concurrentSubmitters() async throws {
        let tracker = LifetimeTracker()
        let counts = Locked<[LimiterEvent<Int, Tracked>.Kind: Int]>([:])
        let limiter = try Limiter<Int, Tracked>(
            .debounce(interval: .milliseconds(2), maxWait: .milliseconds(5)),
            delivery: .events { e in counts.withLock { $0[e.kind, default: 0] += 1 } })
        let threads = 4
        let perThread = 3_000
        await withTaskGroup(of: Void.self) { group in
            for t in 0..<threads {
                group.addTask {
                    for i in 0..<perThread {
                        _ = try! limiter.submit(tracker.make(t * perThread + i), for: (i * 7 + t) % 32)
                        if i % 100 == 0 { _ = try! limiter.pending(i % 32) }
                        if i % 700 == 0 { try! limiter.cancel(i % 32) }
                        if i % 900 == 0 { try! limiter.flush(i % 32) }
                    }
                }
            }
        }
        try await limiter.close(drain: true)
        #expect(counts.withLock { $0.values.reduce(0, +) } == threads * perThread)
        #expect(counts.withLock { $0[.discarded] } == nil)
        #expect(counts.withLock { $0[.emitted] ?? 0 } > 0)
        #expect(limiter.storage.heldValues == 0)
        #expect(tracker.alive == 0)
    }

    @Test("combine on the loop folds every superseded value exactly once, also from many threads")
    func combineOnLoop() async throws {
        let out = Recorder<Int, [Int]>()
        let limiter = try Limiter<Int, [Int]>(
            .audit(interval: .milliseconds(20)), combine: { $0 + $1 }, handler: out.handler)
        for i in 0..<50 { try limiter.submit([i], for: 1) }
        #expect(await eventually { out.count >= 1 })
        // All within one window on a quiet machine; in order within each emission anyway.
        let first = out.values.flatMap { $0 }
        #expect(first == first.sorted())

        await withTaskGroup(of: Void.self) { group in
            for t in 0..<4 {
                group.addTask {
                    for i in 0..<500 { _ = try! limiter.submit([1_000 + t * 500 + i], for: 2 + i % 3) }
                }
            }
        }
        try await limiter.close(drain: true)
        let all = out.values.flatMap { $0 }
        #expect(all.count == 50 + 2_000)
        #expect(Set(all).count == all.count, "no value twice")
        #expect(limiter.storage.heldValues == 0)
    }

    @Test("a limiter released inside its own delivery on the loop thread")
    func releasedInsideHandler() async throws {
        let tracker = LifetimeTracker()
        let box = Locked<Limiter<Int, Tracked>?>(nil)
        let delivered = Locked<Int>(0)
        let limiter = try Limiter<Int, Tracked>(.debounce(interval: .milliseconds(5))) { key, _ in
            delivered.withLock { $0 += 1 }
            if key == 1 { box.withLock { $0 = nil } }  // the last reference goes away here
        }
        try limiter.submit(tracker.make(1), for: 1)
        try limiter.submit(tracker.make(2), for: 2)
        try limiter.submit(tracker.make(3), for: 3)
        box.withLock { $0 = limiter }
        _ = consume limiter
        #expect(await eventually { tracker.alive == 0 })
        #expect(delivered.withLock { $0 } >= 1)
    }

    @Test("a stream on the loop finishes after close")
    func streamOnLoop() async throws {
        let (limiter, emissions) = try Limiter<String, Int>.makeStream(.debounce(interval: .milliseconds(5)))
        try limiter.submit(1, for: "x")
        try limiter.submit(2, for: "y")
        try limiter.submit(3, for: "x")
        Task {
            try? await Task.sleep(for: .milliseconds(30))
            try? await limiter.close()
        }
        var got: [String: [Int]] = [:]
        for await e in emissions { got[e.key, default: []].append(e.value) }
        #expect(got == ["x": [3], "y": [2]])
    }

    @Test("rate on the loop: Retry-After from the real clock")
    func rateOnLoop() throws {
        let limiter = try Limiter<String, Int>(.rate(limit: 1, per: .seconds(10))) { _, _ in }
        #expect(try limiter.submit(1, for: "client") == .emitted)
        guard case let .dropped(retryAt) = try limiter.submit(2, for: "client") else {
            Issue.record("expected a drop")
            return
        }
        let wait = limiter.now.duration(to: retryAt)
        #expect(wait > .seconds(9) && wait <= .seconds(10))
    }
}

