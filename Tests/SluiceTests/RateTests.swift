import Foundation
import Testing

@testable import Sluice

/// Rate quotas: weighted calls, the quota read, the decision-only
/// `RateLimiter`, the HTTP header fields, and the counters.
///
/// Numbers by hand (GCRA, docs/semantics.md): `rate(limit: 2, per: 1 s)`
/// admits one call every T = 0.5 s on average, burst 2. A fresh key's
/// first call leaves 1 and makes the burst whole again at 0.5 s; the second
/// leaves 0, whole at 1 s; a third at 0 is dropped until 0.5 s.
@Suite("Rate quotas")
struct RateTests {
    let policy = LimiterPolicy.rate(limit: 2, per: .seconds(1))

    @Test("RateLimiter refuses other policies, and a closed limiter")
    func misuse() throws {
        #expect(throws: LimiterError.invalidArgument) {
            _ = try RateLimiter<Int>(.throttle(interval: .seconds(1)), scheduler: .manual(ManualLimiterClock()))
        }
        let limiter = try RateLimiter<Int>(policy, scheduler: .manual(ManualLimiterClock()))
        try limiter.close()
        #expect(throws: LimiterError.closed) { try limiter.check(1) }
    }

    @Test("RateLimiter on the default loop, from many threads: exactly the burst is admitted")
    func onLoop() async throws {
        let limiter = try RateLimiter<Int>(limit: 100, per: .seconds(3600), burst: 100)
        let start = limiter.now
        let admitted = Locked(0)
        await withTaskGroup(of: Void.self) { group in
            for _ in 0..<4 {
                group.addTask {
                    for _ in 0..<50 {
                        if (try? limiter.check(7))?.isAdmitted == true { admitted.withLock { $0 += 1 } }
                    }
                }
            }
        }
        #expect(admitted.withLock { $0 } == 100)
        let dropped = try limiter.check(7)
        // One call back T = 36 s after the first admitted call, which came
        // between `start` and this check. (Not "more than 35 s from now":
        // the tasks may start seconds apart on a loaded machine.)
        let retryAt = try #require(dropped.retryAt)
        #expect(
            retryAt >= start.advanced(by: .seconds(36)) && retryAt <= dropped.at.advanced(by: .seconds(36)),
            "one call back 36 s after the first admission")
        let wait = try #require(dropped.retryAfter)
        let seconds = try #require(dropped.retryAfterSeconds)
        #expect(wait > .zero && wait <= .seconds(36))
        #expect(.seconds(seconds - 1) < wait && wait <= .seconds(seconds), "Retry-After: the wait rounded up")
        let stats = limiter.statistics
        #expect(stats.admitted == 100 && stats.dropped == 101 && stats.liveKeys == 1)
        #expect(try limiter.quota(for: 7).remaining == 0)
    }

    @Test("Limiter.submit(_:for:cost:) and quota(for:) on a rate policy; other policies refuse a cost")
    func limiterCost() throws {
        let clock = ManualLimiterClock()
        let out = Recorder<String, Int>()
        let limiter = try Limiter<String, Int>(policy, scheduler: .manual(clock), handler: out.handler)
        #expect(try limiter.submit(1, for: "a", cost: 2).outcome == .admitted(remaining: 0))
        #expect(try limiter.submit(2, for: "a", cost: 1).outcome == .dropped(retryAt: instant(500)))
        #expect(try limiter.submit(3, for: "a", cost: 5).isNeverAdmitted)
        #expect(out.values == [1])
        #expect(try limiter.quota(for: "a").fullAt == instant(1000))
        let throttle = try Limiter<String, Int>(
            .throttle(interval: .seconds(1)), scheduler: .manual(clock), handler: out.handler)
        #expect(throws: LimiterError.invalidArgument) { try throttle.submit(1, for: "a", cost: 1) }
        #expect(throws: LimiterError.invalidArgument) { try throttle.quota(for: "a") }
    }

    // MARK: - Header fields

    @Test("header fields by hand: Retry-After rounds up, at least 1; t rounds up; 0 means none")
    func headers() throws {
        let policy = LimiterPolicy.rate(limit: 100, per: .seconds(60))
        let at = instant(1000)
        func dropped(after ns: UInt64) -> RateDecision {
            RateDecision(
                outcome: .dropped(retryAt: at.advanced(by: .nanoseconds(Int64(ns)))), at: at,
                fullAt: at.advanced(by: .seconds(60)))
        }
        let justOver = try #require(RateLimitHeaders(policy, dropped(after: 1_000_000_001)))
        #expect(justOver.retryAfter == "2", "1.000000001 s -> 2")
        #expect(justOver.rateLimit == "\"default\";r=0;t=60")
        #expect(justOver.ratePolicy == "\"default\";q=100;w=60")
        #expect(RateLimitHeaders(policy, dropped(after: 2_000_000_000))?.retryAfter == "2", "exactly 2 s -> 2")
        #expect(RateLimitHeaders(policy, dropped(after: 1))?.retryAfter == "1", "1 ns -> 1")
        #expect(RateLimitHeaders(policy, dropped(after: 0))?.retryAfter == "1", "a drop says at least 1")

        let whole = RateDecision(outcome: .admitted(remaining: 99), at: at, fullAt: at)
        let admitted = try #require(RateLimitHeaders(policy, whole, name: "api"))
        #expect(admitted.retryAfter == nil, "admitted: no Retry-After")
        #expect(admitted.rateLimit == "\"api\";r=99;t=0")
        #expect(admitted.fields.map(\.name) == ["RateLimit-Policy", "RateLimit"])
        let partly = RateDecision(
            outcome: .admitted(remaining: 98), at: at, fullAt: at.advanced(by: .milliseconds(1200)))
        #expect(RateLimitHeaders(policy, partly)?.rateLimit == "\"default\";r=98;t=2", "1.2 s -> 2")

        let never = RateDecision(outcome: .dropped(retryAt: nil), at: at, fullAt: at)
        #expect(RateLimitHeaders(policy, never)?.retryAfter == nil, "never admitted: no Retry-After")
        #expect(RateLimitHeaders(policy, never)?.fields.first?.name == "RateLimit-Policy")
        #expect(
            RateLimitHeaders(policy, dropped(after: 5))?.fields.map(\.name) == [
                "Retry-After", "RateLimit-Policy", "RateLimit",
            ])

        // Windows in whole seconds, rounded up; names as structured-field strings.
        #expect(RateLimitHeaders(.rate(limit: 5, per: .milliseconds(500)), whole)?.ratePolicy == "\"default\";q=5;w=1")
        #expect(RateLimitHeaders(.rate(limit: 5, per: .milliseconds(1500)), whole)?.ratePolicy == "\"default\";q=5;w=2")
        #expect(RateLimitHeaders(policy, whole, name: "a\"b\\c\u{e9}")?.ratePolicy == "\"a\\\"b\\\\c?\";q=100;w=60")
        #expect(RateLimitHeaders(.throttle(interval: .seconds(1)), whole) == nil, "not a rate policy")
        // From a quota read: no Retry-After.
        let quota = RateQuota(at: at, burst: 100, remaining: 3, fullAt: at.advanced(by: .seconds(58)), retryAt: at)
        #expect(
            RateLimitHeaders(policy, quota)?.fields.map(\.value) == ["\"default\";q=100;w=60", "\"default\";r=3;t=58"])
    }

    @Test("the headers of a real check")
    func headersOfCheck() throws {
        let clock = ManualLimiterClock()
        let limiter = try RateLimiter<String>(limit: 10, per: .seconds(10), burst: 2, scheduler: .manual(clock))
        _ = try limiter.check("c", cost: 2)
        let headers = try #require(RateLimitHeaders(limiter.policy, try limiter.check("c"), name: "c"))
        #expect(headers.retryAfter == "1")
        #expect(headers.ratePolicy == "\"c\";q=10;w=10")
        #expect(headers.rateLimit == "\"c\";r=0;t=2")
    }

    // MARK: - Counters

    @Test("Limiter counters: admitted, scheduled, emittedLater, dropped, discarded, refusedAtCap, liveKeys")
    func counters() throws {
        let clock = ManualLimiterClock()
        let out = Recorder<Int, String>()
        let limiter = try Limiter<Int, String>(
            .throttle(interval: .milliseconds(100)), scheduler: .manual(clock), maxKeys: 1, handler: out.handler)
        try limiter.submit("a", for: 1)  // admitted (leading)
        try limiter.submit("b", for: 1)  // scheduled
        try limiter.submit("c", for: 1)  // scheduled; b dropped (superseded)
        #expect(throws: LimiterError.full) { try limiter.submit("x", for: 2) }
        var stats = limiter.statistics
        #expect(stats.admitted == 1 && stats.scheduled == 2 && stats.dropped == 1 && stats.emittedLater == 0)
        #expect(stats.liveKeys == 1 && stats.pendingValues == 1 && stats.refusedAtCap == 1)
        clock.advance(to: instant(100))  // c emitted later; the window runs to 200
        try limiter.submit("d", for: 1)  // scheduled
        try limiter.close(drain: false)  // d discarded
        stats = limiter.statistics
        #expect(stats.admitted == 1 && stats.scheduled == 3 && stats.emittedLater == 1)
        #expect(stats.dropped == 1 && stats.discarded == 1 && stats.refusedAtCap == 1)
        #expect(stats.scheduled == stats.emittedLater + 1 + stats.discarded, "every scheduled value once more")
        #expect(out.values == ["a", "c"])
    }

    @Test("counters on the loop are summed over the shards")
    func loopCounters() async throws {
        // A long interval: nothing fires before the counters are read, however
        // slow the machine (a 5 ms debounce fired first under TSan in CI);
        // close(drain: true) then emits all 64 at once.
        let (limiter, emissions) = try Limiter<Int, Int>.makeStream(.debounce(interval: .seconds(60)))
        for key in 0..<64 { try limiter.submit(key, for: key) }
        #expect(limiter.statistics.scheduled == 64 && limiter.statistics.liveKeys == 64)
        try await limiter.close(drain: true)
        var count = 0
        for await _ in emissions { count += 1 }
        #expect(count == 64)
        let stats = limiter.statistics
        #expect(stats.emittedLater == 64 && stats.admitted == 0 && stats.dropped == 0)
    }
}

/// Nothing a limiter creates outlives it (the engine, its clock link, the
/// storage and the sink refer to each other until shutdown).
@Suite("Lifetime")
struct LifetimeTests {
    @Test("a released limiter frees its storage, on a manual clock and on a loop")
    func storageFreed() throws {
        let clock = ManualLimiterClock()
        for scheduler in [LimiterScheduler.manual(clock), .default] {
            weak var storage: LimiterStorage<Int, Int>?
            do {
                let limiter = try Limiter<Int, Int>(.debounce(interval: .seconds(1)), scheduler: scheduler) { _, _ in }
                try limiter.submit(1, for: 1)
                storage = limiter.storage
                #expect(storage != nil)
            }
            #expect(storage == nil)
        }
        clock.runUntilIdle()  // the clock no longer reaches the freed engine
    }
}
