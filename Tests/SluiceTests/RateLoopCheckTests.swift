import Foundation
import Testing

@testable import Sluice

/// `RateLimiter.check` on a loop calls the loop limiter from the caller's
/// own (inlined, specialized) code through `sluice_mt_submit_with_options`,
/// and builds the decision itself; on a
/// manual clock it goes through the engine. These tests hold the loop path
/// to the engine path: the same random sequence of keys and costs, on the
/// loop and on a manual clock, must give the same decisions.
///
/// The policy admits one unit per 15 minutes (burst 6): while a test runs
/// (seconds, even under a sanitizer) no unit comes back, so on the real
/// clock every admission, drop and `remaining` is the manual clock's, and
/// the waits (`retryAt - at`, `fullAt - at`) differ from the manual clock's
/// only by the time elapsed since the key's first call.
@Suite("RateLimiter.check on a loop")
struct RateLoopCheckTests {
    let policy = LimiterPolicy.rate(limit: 4, per: .seconds(3600), burst: 6)

    /// A key lent as an integer by a type of the user's (not one of the
    /// built-in integer types).
    struct Tenant: LimiterKey {
        var id: UInt64
        func withLimiterKeyIdentity<Result>(_ body: (LimiterKeyIdentity) -> Result) -> Result {
            body(.integer(id))
        }
    }

    /// One call of the sequence: a key index and a cost (bad costs included).
    struct Call {
        var key: Int
        var cost: Int
    }

    static func calls(seed: UInt64, count: Int, keys: Int) -> [Call] {
        var random = SeededRandom(state: seed)  // (DifferentialSupport.swift)
        return (0..<count).map { _ in
            let r = random.next(100)
            // Mostly cost 1; some 2 and 3; some above the burst (never
            // admitted); a few out of range (0, negative, above 10^12).
            let cost =
                r < 70 ? 1 : r < 80 ? 2 : r < 88 ? 3 : r < 93 ? 7 : r < 95 ? 0 : r < 97 ? -5 : 1_000_000_000_001
            return Call(key: random.next(keys), cost: cost)
        }
    }

    /// What a decision or error says, with its waits relative to `at`.
    struct Seen: CustomStringConvertible {
        var error: LimiterError?
        var admitted = false
        var remaining = 0
        var never = false
        var retryAfter: Duration?
        var fullAfter: Duration = .zero
        var retryAfterSeconds: Int?

        init(_ result: Result<RateDecision, LimiterError>) {
            switch result {
            case let .failure(error): self.error = error
            case let .success(d):
                admitted = d.isAdmitted
                remaining = d.remaining
                never = d.isNeverAdmitted
                retryAfter = d.retryAfter
                retryAfterSeconds = d.retryAfterSeconds
                fullAfter = d.at.duration(to: d.fullAt)
                #expect(d.at <= d.fullAt)
                if let retryAt = d.retryAt { #expect(retryAt > d.at, "a drop's retry is later than the call") }
            }
        }

        var description: String {
            if let error { return "error \(error.rawValue)" }
            return
                "admitted \(admitted) remaining \(remaining) never \(never) retryAfter \(String(describing: retryAfter)) fullAfter \(fullAfter)"
        }
    }

    static func run<K: LimiterKey>(
        _ limiter: RateLimiter<K>, _ calls: [Call], key: (Int) -> K
    ) -> [Seen] {
        calls.map { call in
            Seen(Result { () throws(LimiterError) in try limiter.check(key(call.key), cost: call.cost) })
        }
    }

    /// Compares a loop run with the manual clock's run of the same calls.
    static func expectSame(_ loop: [Seen], _ manual: [Seen], elapsed: Duration, _ label: String) {
        #expect(loop.count == manual.count)
        for (i, (l, m)) in zip(loop, manual).enumerated() {
            let same =
                l.error == m.error && l.admitted == m.admitted && l.remaining == m.remaining && l.never == m.never
                && (l.retryAfter == nil) == (m.retryAfter == nil)
            #expect(same, "\(label) call \(i): loop \(l) vs manual \(m)")
            guard same else { return }
            // On the loop time moved by at most `elapsed` since the key's
            // first call: its waits are shorter by that much at most.
            if let lw = l.retryAfter, let mw = m.retryAfter {
                #expect(lw <= mw && mw - lw <= elapsed, "\(label) call \(i): retry after \(lw) vs \(mw)")
            }
            #expect(
                l.fullAfter <= m.fullAfter && m.fullAfter - l.fullAfter <= elapsed,
                "\(label) call \(i): full after \(l.fullAfter) vs \(m.fullAfter)")
        }
    }

    @Test("integer, user-integer, String and composite keys on the loop decide as the engine path on a manual clock")
    func differential() throws {
        let loop = try LimiterLoop()
        let clock = ManualLimiterClock()
        clock.advance(to: LimiterInstant(nanoseconds: 1_000_000_000))
        let keyCount = 12
        for seed: UInt64 in [1, 2, 3] {
            let calls = Self.calls(seed: seed, count: 400, keys: keyCount)
            let manual = try RateLimiter<UInt64>(policy, scheduler: .manual(clock))
            #expect(manual.loopLimiter == nil, "a manual clock goes through the engine")
            let expected = Self.run(manual, calls) { UInt64($0) &* 0x1_0000_0001 }
            #expect(expected.contains { $0.admitted } && expected.contains { !$0.admitted && $0.error == nil })
            #expect(expected.contains { $0.never } && expected.contains { $0.error == .outOfRange })

            let u64 = try RateLimiter<UInt64>(policy, scheduler: .loop(loop))
            let start = u64.now  // the loop's clock, as every loop limiter's
            #expect(u64.loopLimiter != nil, "a loop takes the inlined path")
            let u64Seen = Self.run(u64, calls) { UInt64($0) &* 0x1_0000_0001 }
            let int = try RateLimiter<Int>(policy, scheduler: .loop(loop))
            let intSeen = Self.run(int, calls) { Int(bitPattern: UInt($0) &* 0x1_0000_0001) }
            let tenant = try RateLimiter<Tenant>(policy, scheduler: .loop(loop))
            let tenantSeen = Self.run(tenant, calls) { Tenant(id: UInt64($0) &* 0x1_0000_0001) }
            let string = try RateLimiter<String>(policy, scheduler: .loop(loop))
            let stringSeen = Self.run(string, calls) { "client-\($0)" }
            let composite = try RateLimiter<CompositeKey>(policy, scheduler: .loop(loop))
            let compositeSeen = Self.run(composite, calls) { CompositeKey("route", $0) }
            let elapsed = start.duration(to: u64.now)

            Self.expectSame(u64Seen, expected, elapsed: elapsed, "UInt64 seed \(seed)")
            Self.expectSame(intSeen, expected, elapsed: elapsed, "Int seed \(seed)")
            Self.expectSame(tenantSeen, expected, elapsed: elapsed, "Tenant seed \(seed)")
            Self.expectSame(stringSeen, expected, elapsed: elapsed, "String seed \(seed)")
            Self.expectSame(compositeSeen, expected, elapsed: elapsed, "CompositeKey seed \(seed)")

            // The counters agree too: every admitted and dropped call counted once.
            let want = manual.statistics
            for stats in [u64.statistics, string.statistics, composite.statistics] {
                #expect(stats.admitted == want.admitted && stats.dropped == want.dropped)
                #expect(stats.liveKeys == want.liveKeys && stats.liveKeys == keyCount)
            }
            // The inlined check and quota(for:) read the same state.
            for k in 0..<keyCount {
                let a = try u64.quota(for: UInt64(k) &* 0x1_0000_0001)
                let b = try string.quota(for: "client-\(k)")
                let c = try manual.quota(for: UInt64(k) &* 0x1_0000_0001)
                #expect(a.remaining == c.remaining && b.remaining == c.remaining, "key \(k)")
            }
        }
    }

    @Test("on the loop: equal strings are one key, an integer is never a byte key, the errors are the engine's")
    func keysAndErrors() throws {
        let loop = try LimiterLoop()
        let strings = try RateLimiter<String>(.rate(limit: 1, per: .seconds(3600), burst: 2), scheduler: .loop(loop))
        // Precomposed and decomposed "café": Swift says equal, so one quota.
        #expect(try strings.check("caf\u{E9}").remaining == 1)
        #expect(try strings.check("cafe\u{301}").remaining == 0)
        #expect(try strings.check("caf\u{E9}").isAdmitted == false)
        #expect(try strings.check("cafe").isAdmitted, "a different string is a different key")
        // The byte key "7" and the integer key 7 do not share state.
        let bytes = try RateLimiter<[UInt8]>(.rate(limit: 1, per: .seconds(3600), burst: 1), scheduler: .loop(loop))
        #expect(try bytes.check(Array("7".utf8)).isAdmitted)
        #expect(try bytes.check(Array("7".utf8)).isAdmitted == false)
        #expect(try bytes.check(Array(repeating: 0x41, count: 1024)).isAdmitted, "1024 bytes is a key")
        #expect(throws: LimiterError.keyTooLong) { try bytes.check(Array(repeating: 0x41, count: 1025)) }
        #expect(throws: LimiterError.keyTooLong) { try strings.check(String(repeating: "x", count: 1025)) }
        let mixed = try RateLimiter<Tenant>(.rate(limit: 1, per: .seconds(3600), burst: 1), scheduler: .loop(loop))
        #expect(try mixed.check(Tenant(id: 0x37)).isAdmitted)
        let composite = try RateLimiter<CompositeKey>(
            .rate(limit: 1, per: .seconds(3600), burst: 1), scheduler: .loop(loop))
        #expect(try composite.check(CompositeKey("a", 1)).isAdmitted)
        #expect(try composite.check(CompositeKey("a", 1)).isAdmitted == false)
        #expect(try composite.check(CompositeKey("a", 2)).isAdmitted)
        #expect(try composite.check(CompositeKey(1, "a")).isAdmitted, "the parts' order matters")

        // Bad costs, the cap, and a closed limiter: the inlined path throws
        // what the engine path throws.
        #expect(CPolicy.rateMax == 1_000_000_000_000, "check(_:cost:) tests this bound inline, as a literal")
        let capped = try RateLimiter<UInt64>(policy, scheduler: .loop(loop), maxKeys: 3)
        for cost in [0, -1, Int.min, 1_000_000_000_001, Int.max] {
            #expect(throws: LimiterError.outOfRange) { try capped.check(1, cost: cost) }
        }
        #expect(try capped.check(1, cost: 1_000_000_000_000).isNeverAdmitted, "10^12 is a valid cost, above the burst")
        for k: UInt64 in 1...3 { #expect(try capped.check(k).isAdmitted) }
        #expect(throws: LimiterError.full) { try capped.check(4) }
        #expect(try capped.check(2).isAdmitted, "a key with state is not refused at the cap")
        try capped.reset(1)
        #expect(try capped.check(1).remaining == 5, "reset forgets the key's history")
        try capped.close()
        #expect(throws: LimiterError.closed) { try capped.check(1) }
        #expect(throws: LimiterError.closed) { try capped.check(1, cost: 2) }
        #expect(throws: LimiterError.outOfRange) { try capped.check(1, cost: 0) }
        try strings.close()
        #expect(throws: LimiterError.closed) { try strings.check("cafe") }
    }
}

@Suite("The coarse clock on a loop")
struct CoarseClockTests {
    /// Reads CLOCK_MONOTONIC_COARSE, the clock the limiter reads.
    static func coarseNow() -> UInt64 {
        var ts = timespec()
        clock_gettime(CLOCK_MONOTONIC_COARSE, &ts)
        return UInt64(ts.tv_sec) * 1_000_000_000 + UInt64(ts.tv_nsec)
    }

    @Test("decisions are stamped by the coarse clock and exact at the time they report")
    func stamped() throws {
        // One call an hour: nothing refills while the test runs.
        let limiter = try RateLimiter<UInt64>(
            limit: 1, per: .seconds(3600), scheduler: .loop(.shared, clock: .coarse))
        let before = Self.coarseNow()
        let first = try limiter.check(7)
        let after = LimiterLoop.now.nanoseconds
        #expect(first.isAdmitted)
        #expect(first.at.nanoseconds >= before && first.at.nanoseconds <= after, "\(first)")
        // Never past a coarse reading taken after the call: the precise
        // clock would be, but for a tick falling between the two readings.
        #expect(first.at.nanoseconds <= Self.coarseNow(), "\(first)")
        let second = try limiter.check(7)
        #expect(!second.isAdmitted)
        // The retry counts from the first call's reported time.
        #expect(second.retryAt == first.at.advanced(by: .seconds(3600)), "\(first) \(second)")
        let quota = try limiter.quota(for: 8)
        #expect(quota.at.nanoseconds <= LimiterLoop.now.nanoseconds && quota.remaining == 1)
    }
}
