// The behaviour suite that runs on every engine with manual time: Sluice's
// manual clock (SluiceTests/BehaviourOnManualClock.swift) and the NIO engine on
// an EmbeddedEventLoop and a NIOAsyncTestingEventLoop (NIOEngineTests.swift). The
// bodies are written once, here, against `ManualTimeEngine`.
import Foundation
import Testing

@testable import Sluice

/// One test of the behaviour suite: a name and a body run on a fresh engine.
struct BehaviourCase: Sendable, CustomTestStringConvertible {
    let name: String
    let body: @Sendable (any ManualTimeEngine) async throws -> Void
    var testDescription: String { name }

    init(_ name: String, _ body: @escaping @Sendable (any ManualTimeEngine) async throws -> Void) {
        self.name = name
        self.body = body
    }
}

enum Behaviour {
    /// Every case, in a stable order (test arguments).
    static let cases: [BehaviourCase] = limiterCases + rateCases

    static let limiterCases: [BehaviourCase] = [
        BehaviourCase("throttle: decisions, and every emission reaches the handler in order") { engine in
            let out = Recorder<String, Int>()
            let limiter = try Limiter<String, Int>(
                .throttle(interval: .milliseconds(100)), scheduler: engine.scheduler, handler: out.handler)
            #expect(try limiter.submit(1, for: "a") == .emitted)
            #expect(out.values == [1], "an emitted-now value is delivered before submit returns")
            await engine.advanceTime(by: .milliseconds(50))
            #expect(try limiter.submit(2, for: "a") == .scheduled(at: instant(100)))
            #expect(try limiter.submit(3, for: "a") == .scheduled(at: instant(100)))
            #expect(try limiter.pending("a"))
            #expect(try !limiter.pending("b"))
            await engine.advanceTime(by: .milliseconds(49))
            #expect(out.values == [1])
            await engine.advanceTime(by: .milliseconds(1))
            #expect(out.values == [1, 3])
            #expect(engine.now == instant(100))
            #expect(limiter.policy == .throttle(interval: .milliseconds(100)))
            #expect(limiter.now == instant(100))
            try await limiter.close()
        },
        BehaviourCase("audit and throttle(leading: false) differ as the spec says") { engine in
            for (policy, expected, start) in [
                (LimiterPolicy.audit(interval: .milliseconds(100)), [100, 220], 0),
                (.throttle(interval: .milliseconds(100), leading: false), [100, 200], 1000),
            ] {
                let times = Locked<[LimiterInstant]>([])
                await engine.advanceTime(to: instant(UInt64(start)))
                let limiter = try Limiter<Int, String>(
                    policy, scheduler: engine.scheduler,
                    delivery: .events { event in
                        if event.kind == .emitted { times.withLock { $0.append(event.at) } }
                    })
                try limiter.submit("a", for: 1)
                await engine.advanceTime(to: instant(UInt64(start + 50)))
                try limiter.submit("b", for: 1)
                await engine.advanceTime(to: instant(UInt64(start + 120)))
                try limiter.submit("c", for: 1)
                await engine.advanceTime(to: instant(UInt64(start + 500)))
                #expect(times.withLock { $0 } == expected.map { instant(UInt64(start + $0)) }, "\(policy)")
                try await limiter.close()
            }
        },
        BehaviourCase("debounce with maxWait emits at least every maxWait") { engine in
            let out = Recorder<Int, Int>()
            let limiter = try Limiter<Int, Int>(
                .debounce(interval: .milliseconds(100), maxWait: .milliseconds(250)), scheduler: engine.scheduler,
                delivery: .events { if $0.kind == .emitted { out.add($0.key, $0.value, at: $0.at) } })
            for t in stride(from: 0, through: 300, by: 50) {
                await engine.advanceTime(to: instant(UInt64(t)))
                _ = try limiter.submit(t, for: 7)
            }
            await engine.runAll()
            #expect(out.all.map(\.value) == [200, 300])
            #expect(out.all.map(\.at) == [instant(250), instant(400)])
            try await limiter.close()
        },
        BehaviourCase("rate: decided at once; a drop tells when to retry") { engine in
            let out = Recorder<UInt64, Int>()
            let limiter = try Limiter<UInt64, Int>(
                .rate(limit: 2, per: .milliseconds(100)), scheduler: engine.scheduler, handler: out.handler)
            #expect(try limiter.submit(1, for: 9) == .emitted)
            #expect(try limiter.submit(2, for: 9) == .emitted)
            await engine.advanceTime(to: instant(10))
            let decision = try limiter.submit(3, for: 9)
            #expect(decision == .dropped(retryAt: instant(50)))
            if case let .dropped(retryAt) = decision {
                #expect(limiter.now.duration(to: retryAt) == .milliseconds(40))
            }
            await engine.advanceTime(to: instant(50))
            #expect(try limiter.submit(4, for: 9) == .emitted)
            #expect(out.values == [1, 2, 4])
            #expect(try !limiter.pending(9))
            #expect(try !limiter.flush(9))
            try await limiter.close()
        },
        BehaviourCase("flush emits now, cancel drops now; close drains; calls after close throw") { engine in
            let events = Locked<[String]>([])
            let limiter = try Limiter<String, String>(
                .debounce(interval: .seconds(1)), scheduler: engine.scheduler,
                delivery: .events { event in
                    events.withLock {
                        $0.append("\(event.at.nanoseconds / 1_000_000) \(event.kind) \(event.key) \(event.value)")
                    }
                })
            try limiter.submit("a", for: "A")
            try limiter.submit("b", for: "B")
            try limiter.submit("c", for: "C")
            await engine.advanceTime(to: instant(10))
            #expect(try limiter.flush("A"))
            #expect(try !limiter.flush("A"))
            #expect(try limiter.cancel("B"))
            #expect(try !limiter.cancel("B"))
            #expect(!limiter.isClosed)
            try await limiter.close()
            #expect(limiter.isClosed)
            #expect(events.withLock { $0 } == ["10 emitted A a", "10 dropped B b", "10 emitted C c"])
            #expect(throws: LimiterError.closed) { try limiter.submit("d", for: "A") }
            #expect(throws: LimiterError.closed) { try limiter.flush("A") }
            #expect(throws: LimiterError.closed) { try limiter.pending("A") }
            #expect(throws: LimiterError.closed) { try limiter.close() }
            // Nothing comes later.
            await engine.advanceTime(to: instant(5_000))
            #expect(events.withLock { $0.count } == 3)
        },
        BehaviourCase("close(drain: false) hands pending values back as discarded") { engine in
            let kinds = Locked<[LimiterEvent<Int, Int>.Kind]>([])
            let limiter = try Limiter<Int, Int>(
                .audit(interval: .seconds(1)), scheduler: engine.scheduler,
                delivery: .events { e in kinds.withLock { $0.append(e.kind) } })
            try limiter.submit(1, for: 1)
            try limiter.submit(2, for: 2)
            try await limiter.close(drain: false)
            #expect(kinds.withLock { $0 } == [.discarded, .discarded])
        },
        BehaviourCase("a call from inside the handler is handled after the emission and respects the window") {
            engine in
            let decisions = Locked<[LimiterDecision]>([])
            let out = Recorder<Int, Int>()
            let box = Locked<Limiter<Int, Int>?>(nil)
            let limiter = try Limiter<Int, Int>(.throttle(interval: .milliseconds(100)), scheduler: engine.scheduler) {
                key, value in
                out.add(key, value)
                if value == 2, let limiter = box.withLock({ $0 }) {
                    decisions.withLock { $0.append(try! limiter.submit(3, for: key)) }
                }
            }
            box.withLock { $0 = limiter }
            defer { box.withLock { $0 = nil } }
            try limiter.submit(1, for: 1)
            await engine.advanceTime(to: instant(10))
            try limiter.submit(2, for: 1)
            await engine.advanceTime(to: instant(100))
            #expect(decisions.withLock { $0 } == [.scheduled(at: instant(200))])
            await engine.runAll()
            #expect(out.values == [1, 2, 3])
            try await limiter.close()
        },
        BehaviourCase("combine folds superseded values into the newer one (audit, throttle, debounce)") { engine in
            var start: UInt64 = 0
            for policy in [
                LimiterPolicy.audit(interval: .milliseconds(100)),
                .throttle(interval: .milliseconds(100), leading: false),
                .throttle(interval: .milliseconds(100), leading: false, pick: .first),
                .debounce(interval: .milliseconds(100)),
            ] {
                let out = Recorder<String, [Int]>()
                let limiter = try Limiter<String, [Int]>(
                    policy, scheduler: engine.scheduler, combine: { $0 + $1 }, handler: out.handler)
                for i in 1...5 {
                    await engine.advanceTime(to: instant(start + UInt64(i * 10)))
                    try limiter.submit([i], for: "k")
                }
                start += 1_000
                await engine.advanceTime(to: instant(start))
                #expect(out.values == [[1, 2, 3, 4, 5]], "\(policy)")
                try await limiter.close()
            }
        },
        BehaviourCase("combine with a leading edge: the window after the leading value folds its values") { engine in
            let out = Recorder<Int, [Int]>()
            let limiter = try Limiter<Int, [Int]>(
                .throttle(interval: .milliseconds(100)), scheduler: engine.scheduler, combine: { $0 + $1 },
                handler: out.handler)
            for i in 0..<6 {
                await engine.advanceTime(to: instant(UInt64(i * 40)))
                try limiter.submit([i], for: 1)
            }
            await engine.runAll()
            // 0 leads; 1, 2 fold and emit at 100; 3, 4 at 200; 5 at 300.
            #expect(out.values == [[0], [1, 2], [3, 4], [5]])
            try await limiter.close()
        },
        BehaviourCase("combine does not resurrect a cancelled value") { engine in
            let tracker = LifetimeTracker()
            let out = Recorder<Int, [Tracked]>()
            let limiter = try Limiter<Int, [Tracked]>(
                .audit(interval: .milliseconds(100)), scheduler: engine.scheduler, combine: { $0 + $1 },
                handler: out.handler)
            try limiter.submit([tracker.make(1)], for: 1)
            try limiter.submit([tracker.make(2)], for: 1)
            #expect(tracker.alive == 2, "folded, not released")
            #expect(try limiter.cancel(1))
            #expect(tracker.alive == 0, "the fold is released when cancelled")
            try limiter.submit([tracker.make(3)], for: 1)
            await engine.runAll()
            #expect(out.values.map { $0.map(\.id) } == [[3]])
            try await limiter.close()
        },
        BehaviourCase("stream delivery: every emission, then the stream finishes at close") { engine in
            let (limiter, emissions) = try Limiter<String, Int>.makeStream(
                .throttle(interval: .milliseconds(100)), scheduler: engine.scheduler)
            try limiter.submit(1, for: "a")
            try limiter.submit(2, for: "a")
            try limiter.submit(3, for: "b")
            await engine.advanceTime(to: instant(100))
            try limiter.submit(4, for: "a")
            try await limiter.close()
            var got: [String] = []
            for await emission in emissions {
                got.append("\(emission.at.nanoseconds / 1_000_000) \(emission.key) \(emission.value)")
            }
            #expect(got == ["0 a 1", "0 b 3", "100 a 2", "100 a 4"])
        },
        BehaviourCase("values dropped by a window, by a quota and at close(discard) are released at once") { engine in
            let tracker = LifetimeTracker()
            let noTrailing = try Limiter<Int, Tracked>(
                .throttle(interval: .milliseconds(100), trailing: false), scheduler: engine.scheduler
            ) { _, _ in }
            try noTrailing.submit(tracker.make(1), for: 1)
            #expect(try noTrailing.submit(tracker.make(2), for: 1) == .dropped(retryAt: instant(100)))
            #expect(tracker.alive == 0)

            let rate = try Limiter<Int, Tracked>(.rate(limit: 1, per: .seconds(1)), scheduler: engine.scheduler) {
                _, _ in
            }
            try rate.submit(tracker.make(3), for: 1)
            #expect(try rate.submit(tracker.make(4), for: 1) == .dropped(retryAt: instant(1000)))
            #expect(tracker.alive == 0)

            let audit = try Limiter<String, Tracked>(.audit(interval: .seconds(1)), scheduler: engine.scheduler) {
                _, _ in
            }
            for i in 5..<25 { try audit.submit(tracker.make(i), for: "k\(i)") }
            #expect(tracker.alive == 20)
            #expect(audit.storage.heldValues == 20)
            try await audit.close(drain: false)
            #expect(tracker.alive == 0)
            #expect(audit.storage.heldValues == 0)
            try await noTrailing.close()
            try await rate.close()
        },
        BehaviourCase("the events delivery sees drops before releasing them") { engine in
            let tracker = LifetimeTracker()
            let seen = Locked<[String]>([])
            let limiter = try Limiter<Int, Tracked>(
                .debounce(interval: .milliseconds(10)), scheduler: engine.scheduler,
                delivery: .events { e in
                    seen.withLock { $0.append("\(e.kind) \(e.value.id)") }
                })
            try limiter.submit(tracker.make(1), for: 1)
            try limiter.submit(tracker.make(2), for: 1)
            #expect(tracker.isReleased(1))
            await engine.runAll()
            #expect(seen.withLock { $0 } == ["dropped 1", "emitted 2"])
            #expect(tracker.alive == 0)
            try await limiter.close()
        },
    ]

    /// Numbers by hand (GCRA): `rate(limit: 2, per: 1 s)` admits one call every
    /// 0.5 s on average, burst 2.
    static let rateCases: [BehaviourCase] = [
        BehaviourCase("RateLimiter.check: remaining, fullAt, retryAt by hand") { engine in
            let limiter = try RateLimiter<String>(.rate(limit: 2, per: .seconds(1)), scheduler: engine.scheduler)
            let first = try limiter.check("a")
            #expect(first.outcome == .admitted(remaining: 1))
            #expect(first.at == instant(0) && first.fullAt == instant(500))
            #expect(first.retryAt == nil && first.retryAfter == nil && first.retryAfterSeconds == nil)
            #expect(first.secondsUntilFull == 1)
            let second = try limiter.check("a")
            #expect(second.outcome == .admitted(remaining: 0) && second.fullAt == instant(1000))
            let third = try limiter.check("a")
            #expect(third.outcome == .dropped(retryAt: instant(500)))
            #expect(!third.isAdmitted && third.remaining == 0 && third.fullAt == instant(1000))
            #expect(third.retryAfter == .milliseconds(500))
            #expect(third.retryAfterSeconds == 1, "0.5 s rounds up to 1")
            // A dropped call changed nothing: at 0.5 s one call is admitted again.
            await engine.advanceTime(to: instant(499))
            #expect(try !limiter.check("a").isAdmitted)
            await engine.advanceTime(to: instant(500))
            #expect(try limiter.check("a").outcome == .admitted(remaining: 0))
            // Keys are independent.
            #expect(try limiter.check("b").outcome == .admitted(remaining: 1))
            #expect(limiter.statistics.admitted == 4)
            #expect(limiter.statistics.dropped == 2)
        },
        BehaviourCase("a weighted call is admitted whole or not at all; above the burst it is never admitted") {
            engine in
            let limiter = try RateLimiter<Int>(.rate(limit: 2, per: .seconds(1)), scheduler: engine.scheduler)
            let two = try limiter.check(1, cost: 2)
            #expect(two.outcome == .admitted(remaining: 0) && two.fullAt == instant(1000))
            await engine.advanceTime(to: instant(400))
            let one = try limiter.check(1)
            #expect(one.outcome == .dropped(retryAt: instant(500)))
            #expect(one.retryAfter == .milliseconds(100) && one.retryAfterSeconds == 1)
            let never = try limiter.check(2, cost: 3)
            #expect(never.outcome == .dropped(retryAt: nil))
            #expect(never.isNeverAdmitted && never.retryAfter == nil && never.retryAfterSeconds == nil)
            #expect(try limiter.check(2).outcome == .admitted(remaining: 1), "the never-admitted call counted nothing")
            #expect(throws: LimiterError.outOfRange) { try limiter.check(3, cost: 0) }
        },
        BehaviourCase("quota reads without changing anything") { engine in
            let limiter = try RateLimiter<String>(.rate(limit: 2, per: .seconds(1)), scheduler: engine.scheduler)
            await engine.advanceTime(to: instant(100))
            let fresh = try limiter.quota(for: "k")
            #expect(
                fresh
                    == RateQuota(at: instant(100), burst: 2, remaining: 2, fullAt: instant(100), retryAt: instant(100)))
            #expect(fresh.secondsUntilFull == 0)
            _ = try limiter.check("k", cost: 2)
            let spent = try limiter.quota(for: "k", cost: 2)
            #expect(spent.remaining == 0 && spent.fullAt == instant(1100) && spent.retryAt == instant(1100))
            #expect(try limiter.quota(for: "k").retryAt == instant(600))
            #expect(try limiter.quota(for: "k", cost: 3).retryAt == nil, "never: above the burst")
            #expect(try limiter.quota(for: "k") == limiter.quota(for: "k"), "a read changes nothing")
            try limiter.reset("k")
            #expect(try limiter.quota(for: "k").remaining == 2)
        },
    ]
}
