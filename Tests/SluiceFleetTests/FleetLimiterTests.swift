import CSluice
import Testing

import Sluice
import SluiceFleet

private func config(port: Int, prefix: String) -> FleetConfiguration {
    var c = FleetConfiguration()
    c.port = port
    c.prefix = prefix
    c.timeout = .seconds(30)  // generous: a slow reply on a loaded machine is not a fault here
    return c
}

/// The same calls through a fleet limiter (manual time) and a local
/// RateLimiter on a manual clock: the decisions must be equal.
private struct Twin {
    let fleet: FleetLimiter<String>
    let local: RateLimiter<String>
    let clock = ManualLimiterClock()

    init(port: Int, prefix: String, policy: LimiterPolicy) throws {
        var c = config(port: port, prefix: prefix)
        c.manualTime = true
        // Cache entries are trusted for this long in wall-clock time: with
        // the default 1 s, a loaded machine between two calls let an entry
        // expire and a drop expected from the cache came from Redis.
        c.cacheTTL = .seconds(60)
        fleet = try FleetLimiter(policy, configuration: c)
        local = try RateLimiter<String>(policy, scheduler: .manual(clock))
    }

    /// One call on both at `now` (ns, never earlier than the last); returns
    /// the fleet's decision and source after checking it equals the local
    /// one (but for the source: the fleet's may be its cache).
    func call(
        _ key: String, cost: Int = 1, now: UInt64,
        sourceLocation: SourceLocation = #_sourceLocation
    ) async throws
        -> (decision: RateDecision, source: RateDecision.Source, local: RateDecision)
    {
        if now > clock.now.nanoseconds { clock.advance(to: LimiterInstant(nanoseconds: now)) }
        let fleetDecision = try await fleet.check(key, cost: cost, at: LimiterInstant(nanoseconds: now))
        let localDecision = try local.check(key, cost: cost)
        var same = fleetDecision
        same.source = .limiter
        #expect(same == localDecision, "\(key) cost \(cost) at \(now)", sourceLocation: sourceLocation)
        return (fleetDecision, fleetDecision.source, localDecision)
    }
}

@Suite("FleetLimiter")
struct FleetLimiterTests {
    @Test("decisions equal the local RateLimiter's, from Redis and the cache; quota, cancel (manual time)", .needsRedis)
    func decisions() async throws {
        let redis = try await RedisServer.start()
        defer { withExtendedLifetime(redis) {} }  // the server outlives the test's limiters
        let twin = try Twin(
            port: redis.port, prefix: "swift-manual",
            policy: .rate(limit: 2, per: .seconds(1), burst: 2))
        let fleet = twin.fleet
        defer { try? fleet.close() }
        let a = try await twin.call("k", now: 0)
        #expect(a.source == .limiter && a.decision.isAdmitted && a.decision.remaining == 1)
        #expect(a.decision.fullAt == LimiterInstant(nanoseconds: 500_000_000))
        let b = try await twin.call("k", now: 0)
        #expect(
            b.decision.isAdmitted && b.decision.remaining == 0
                && b.decision.fullAt == LimiterInstant(nanoseconds: 1_000_000_000))
        let d = try await twin.call("k", now: 1)
        #expect(
            !d.decision.isAdmitted && d.source == .cache
                && d.decision.retryAt == LimiterInstant(nanoseconds: 500_000_000))
        #expect(d.decision.retryAfter == .nanoseconds(499_999_999))
        let big = try await twin.call("k", cost: 3, now: 2)
        #expect(big.decision.isNeverAdmitted)
        // a drop Redis decides (the cache knows nothing of "j" yet)
        _ = try await twin.call("j", cost: 2, now: 3)
        let j = try await twin.call("j", now: 4)
        #expect(!j.decision.isAdmitted && j.source == .cache)
        let q = try await fleet.quota(for: "k", at: LimiterInstant(nanoseconds: 250_000_000))
        let lq = try twin.local.quota(for: "k")
        twin.clock.advance(to: LimiterInstant(nanoseconds: 250_000_000))
        let lq2 = try twin.local.quota(for: "k")
        #expect(lq.burst == 2)
        #expect(q == lq2, "fleet \(q) local \(lq2)")
        try await fleet.reset("k", at: LimiterInstant(nanoseconds: 300_000_000))
        try twin.local.reset("k")
        let e = try await twin.call("k", now: 300_000_001)
        #expect(e.decision.isAdmitted && e.source == .limiter)
        let s = fleet.fleetStatistics
        #expect(s.calls == 7 && s.cacheDropped >= 2 && s.resets == 1)
        let local = fleet.statistics
        #expect(local.admitted == Int(s.redisAdmitted) && local.dropped == Int(s.redisDropped + s.cacheDropped))
        #expect(local.failures == 0 && local.admitted == 4, "\(local)")
    }

    @Test("a random mix of keys, costs and times: every decision equals the local one", .needsRedis)
    func randomTwin() async throws {
        let redis = try await RedisServer.start()
        defer { withExtendedLifetime(redis) {} }  // the server outlives the test's limiters
        let twin = try Twin(
            port: redis.port, prefix: "swift-random",
            policy: .rate(limit: 5, per: .milliseconds(100), burst: 3))
        defer { try? twin.fleet.close() }
        var rng = SystemRandomNumberGenerator()
        var now: UInt64 = 1_000
        var admitted = 0, dropped = 0
        for _ in 0..<400 {
            now += UInt64.random(in: 0...15_000_000, using: &rng)
            let key = "r\(Int.random(in: 0..<4, using: &rng))"
            let cost = Int.random(in: 1...4, using: &rng)
            let r = try await twin.call(key, cost: cost, now: now)
            if r.decision.isAdmitted { admitted += 1 } else { dropped += 1 }
        }
        #expect(admitted > 20 && dropped > 20)  // both paths exercised
    }

    @Test("RateLimitHeaders gives the same fields for the fleet's decisions as for the local ones", .needsRedis)
    func headers() async throws {
        let redis = try await RedisServer.start()
        defer { withExtendedLifetime(redis) {} }  // the server outlives the test's limiters
        let policy = LimiterPolicy.rate(limit: 3, per: .seconds(2), burst: 3)
        let twin = try Twin(port: redis.port, prefix: "swift-headers", policy: policy)
        defer { try? twin.fleet.close() }
        let times: [UInt64] = [0, 0, 0, 1, 10_000_000, 700_000_000, 1_400_000_000, 1_400_000_001, 5_000_000_000]
        var sawRetry = false, sawNever = false, sawRemaining = false
        for (i, t) in times.enumerated() {
            let cost = i == 3 ? 5 : 1  // one call above the burst: no Retry-After
            let r = try await twin.call("h", cost: cost, now: t)
            let fleetFields = RateLimitHeaders(twin.fleet.policy, r.decision, name: "api")!
            let localFields = RateLimitHeaders(twin.local.policy, r.local, name: "api")!
            #expect(fleetFields == localFields, "call \(i): \(fleetFields) vs \(localFields)")
            #expect(fleetFields.fields.map(\.name) == localFields.fields.map(\.name))
            #expect(fleetFields.fields.map(\.value) == localFields.fields.map(\.value))
            if fleetFields.retryAfter != nil { sawRetry = true }
            if r.decision.isNeverAdmitted { sawNever = true }
            if r.decision.remaining > 0 { sawRemaining = true }
        }
        #expect(sawRetry && sawNever && sawRemaining)
    }

    @Test("a FleetLimiter is a RateDecider (server time)", .needsRedis)
    func decider() async throws {
        let redis = try await RedisServer.start()
        defer { withExtendedLifetime(redis) {} }  // the server outlives the test's limiters
        // Two calls per hour: one back every 30 min, so that no refill comes
        // between the three calls however long a loaded machine (a
        // ThreadSanitizer run beside 120 other tests on two cores) takes to
        // make them; with one per 30 s, a stall of 30 s made one.
        let decider: any RateDecider = try FleetLimiter<String>(
            .rate(limit: 2, per: .seconds(3600), burst: 2),
            configuration: config(port: redis.port, prefix: "swift-decider"))
        defer { try? decider.close() }
        let before = LimiterLoop.now
        let first = try await decider.check("c", cost: 1)
        let second = try await decider.check("c", cost: 1)
        let third = try await decider.check("c", cost: 1)
        let after = LimiterLoop.now
        #expect(first.isAdmitted && first.remaining == 1)
        #expect(second.isAdmitted && second.remaining == 0)
        // The instants are on the local loops' clock (not Redis's Unix time):
        // each decision's `at` is when its answer came.
        for decision in [first, second, third] {
            #expect(before <= decision.at && decision.at <= after, "\(decision) not in [\(before), \(after)]")
        }
        #expect((decider as? FleetLimiter<String>)?.now ?? .init(nanoseconds: 0) >= after)
        // Server time: the third call waits until the first one's time plus
        // one emission interval (30 min); on the local clock that is exact to
        // within the difference of the two answers' latencies (a loaded
        // machine may take seconds). Its Retry-After counts from its own
        // time, which a loaded machine may make some seconds later.
        let retryAt = try #require(third.retryAt)
        #expect(!third.isAdmitted)
        let skew = retryAt.duration(to: first.at.advanced(by: .seconds(1800)))
        #expect(skew > .seconds(-600) && skew < .seconds(600), "\(skew)")
        #expect(third.description.hasPrefix("dropped(retry in 1"), "\(third)")
        // (a drop the cache could prove says so)
        let tail = third.source == .cache ? "; at \(third.at); from the cache)" : "; at \(third.at))"
        #expect(third.description.hasSuffix(tail) && third.description.contains(" on the limiter clock"), "\(third)")
        let seconds = try #require(third.retryAfterSeconds)
        #expect((1...1800).contains(seconds))
        #expect(seconds > 1800 - 600)  // not an interval counted from elsewhere
        #expect(RateLimitHeaders(decider.policy, third)?.retryAfter == String(seconds))
        await #expect(throws: LimiterError.outOfRange) { _ = try await decider.check("c", cost: 0) }
    }

    @Test("server time, concurrent callers: never more than the burst at once", .needsRedis)
    func concurrent() async throws {
        let redis = try await RedisServer.start()
        defer { withExtendedLifetime(redis) {} }  // the server outlives the test's limiters
        // One call back every 6 min: the 200 calls never see a refill, however
        // long a loaded machine takes to make them (with 6 s, it could).
        let fleet = try FleetLimiter<UInt64>(
            .rate(limit: 10, per: .seconds(3600), burst: 10),
            configuration: config(port: redis.port, prefix: "swift-concurrent"))
        defer { try? fleet.close() }
        let admitted = try await withThrowingTaskGroup(of: Bool.self) { group in
            for _ in 0..<200 { group.addTask { try await fleet.check(7).isAdmitted } }
            var n = 0
            for try await ok in group where ok { n += 1 }
            return n
        }
        let stats = fleet.fleetStatistics
        #expect(admitted == 10, "\(stats)")
        #expect(stats.batches >= 1 && stats.batches <= 200, "\(stats)")
    }

    @Test("nothing listening: the failure policy answers")
    func failure() async throws {
        var c = FleetConfiguration()
        c.port = 1  // nothing listens on port 1
        // A refused connection answers at once (notConnected); a short request
        // timeout could end first on a loaded machine (timedOut).
        c.timeout = .seconds(30)
        c.onFailure = .open
        let open = try FleetLimiter<String>(.rate(limit: 1, per: .seconds(1)), configuration: c)
        let a = try await open.check("x")
        #expect(a.isAdmitted && a.source == .failurePolicy(.notConnected) && a.failure == .notConnected)
        #expect(open.statistics.failures == 1 && open.statistics.admitted == 1)
        #expect(!open.isConnected)
        try open.close()
        #expect(throws: LimiterError.closed) { try open.close() }
        await #expect(throws: LimiterError.closed) { try await open.check("x") }

        c.onFailure = .closed(retryAfter: .seconds(2))
        let closed = try FleetLimiter<String>(.rate(limit: 1, per: .seconds(1)), configuration: c)
        defer { try? closed.close() }
        let b = try await closed.check("x")
        #expect(!b.isAdmitted && b.retryAfter == .seconds(2) && b.retryAfterSeconds == 2)
        #expect(b.source == .failurePolicy(.notConnected))

        c.onFailure = .local(nil)
        let local = try FleetLimiter<String>(.rate(limit: 1, per: .seconds(60)), configuration: c)
        defer { try? local.close() }
        let started = ContinuousClock.now
        let first = try await local.check("x")
        let second = try await local.check("x")
        // the retry is 60 s after the first call, from the second: whole
        // seconds rounded up, so 60 unless a loaded machine spent a second or
        // more between the calls (then no earlier than that allows)
        let between = Int((ContinuousClock.now - started).components.seconds)
        #expect(first.isAdmitted && first.source == .fallback(.notConnected))
        #expect(!second.isAdmitted && second.source == .fallback(.notConnected))
        #expect((60 - between...60).contains(second.retryAfterSeconds ?? 0), "\(second)")
        #expect(local.statistics.failures == 2)
    }

    @Test("a failure-policy answer is on the local clock too, its retry exact")
    func failureOnLocalClock() async throws {
        var c = FleetConfiguration()
        c.port = 1  // nothing listens on port 1
        // A refused connection answers at once (notConnected); a short request
        // timeout could end first on a loaded machine (timedOut).
        c.timeout = .seconds(30)
        c.onFailure = .closed(retryAfter: .milliseconds(1500))
        let fleet = try FleetLimiter<String>(.rate(limit: 1, per: .seconds(1)), configuration: c)
        defer { try? fleet.close() }
        let before = fleet.now
        let d = try await fleet.check("x")
        #expect(before <= d.at && d.at <= fleet.now, "\(d)")
        #expect(d.retryAt == d.at.advanced(by: .milliseconds(1500)))
        #expect(
            d.description
                == "dropped(retry in 1.500000s; at \(d.at); by the failure policy: \(LimiterError.notConnected))")
    }

    @Test("only rate policies: the error names the policy and the rule")
    func policy() {
        do {
            _ = try FleetLimiter<String>(.throttle(interval: .seconds(1)))
            Issue.record("a throttle policy was accepted")
        } catch {
            #expect(error == .invalidArgument)
            #expect(
                "\(error)".hasPrefix(
                    "Invalid policy: a FleetLimiter takes a rate policy (.rate(limit:per:burst:)), not throttle("),
                "\(error)")
            #expect(error.errorDescription == "\(error)")
        }
    }

    /// Configurations that break one rule each, and words the reason must
    /// contain: the option and the rule.
    static let badConfigurations: [(String, LimiterPolicy, @Sendable (inout FleetConfiguration) -> Void, [String])] = [
        ("rate limit 0", .rate(limit: 0, per: .seconds(1)), { _ in }, ["Invalid policy", "limit (0)", "at least 1"]),
        (
            "burst too large", .rate(limit: 1, per: .seconds(1), burst: 2_000_000_000_000), { _ in },
            ["Invalid policy", "burst", "10^12"]
        ),
        (
            "empty host", .rate(limit: 1, per: .seconds(1)), { $0.host = "" },
            ["FleetConfiguration.host", "Redis server"]
        ),
        ("port 0", .rate(limit: 1, per: .seconds(1)), { $0.port = 0 }, ["FleetConfiguration.port (0)", "1 to 65535"]),
        ("port 70000", .rate(limit: 1, per: .seconds(1)), { $0.port = 70_000 }, ["port (70000)", "1 to 65535"]),
        (
            "empty prefix", .rate(limit: 1, per: .seconds(1)), { $0.prefix = "" },
            ["prefix (0 bytes)", "1 to 256 bytes"]
        ),
        (
            "long prefix", .rate(limit: 1, per: .seconds(1)), { $0.prefix = String(repeating: "p", count: 257) },
            ["prefix (257 bytes)", "1 to 256 bytes"]
        ),
        (
            "zero timeout", .rate(limit: 1, per: .seconds(1)), { $0.timeout = .zero },
            ["FleetConfiguration.timeout", "more than zero"]
        ),
        (
            "cacheSlots 0", .rate(limit: 1, per: .seconds(1)), { $0.cacheSlots = 0 },
            ["cacheSlots (0)", "at least 1", "nil for no cache"]
        ),
        (
            "negative cache TTL", .rate(limit: 1, per: .seconds(1)), { $0.cacheTTL = .seconds(-1) },
            ["cacheTTL", "more than zero"]
        ),
        ("maxBatch 0", .rate(limit: 1, per: .seconds(1)), { $0.maxBatch = 0 }, ["maxBatch (0)", "1 to 1024"]),
        (
            "local clock with manual time", .rate(limit: 1, per: .seconds(1)),
            {
                $0.clock = .local
                $0.manualTime = true
            }, ["FleetConfiguration.clock (.local)", "manualTime"]
        ),
        ("maxBatch 2000", .rate(limit: 1, per: .seconds(1)), { $0.maxBatch = 2000 }, ["maxBatch (2000)", "1 to 1024"]),
        (
            "closed retry 0", .rate(limit: 1, per: .seconds(1)), { $0.onFailure = .closed(retryAfter: .zero) },
            ["onFailure: .closed(retryAfter:)", "more than zero"]
        ),
        (
            "local throttle", .rate(limit: 1, per: .seconds(1)),
            { $0.onFailure = .local(.throttle(interval: .seconds(1))) },
            ["Invalid onFailure: .local policy", "rate policy", "throttle("]
        ),
        (
            "local rate 0", .rate(limit: 1, per: .seconds(1)),
            { $0.onFailure = .local(.rate(limit: 0, per: .seconds(1))) },
            ["Invalid onFailure: .local policy", "limit (0)"]
        ),
    ]

    @Test("a refused configuration names the option and the rule", arguments: badConfigurations.indices)
    func configurationReasons(_ index: Int) {
        let (name, policy, change, words) = Self.badConfigurations[index]
        var c = FleetConfiguration()
        c.port = 1  // never reached: the check comes first
        change(&c)
        do {
            let fleet = try FleetLimiter<String>(policy, configuration: c)
            try? fleet.close()
            Issue.record("\(name): accepted")
        } catch {
            #expect(error == .invalidArgument || error == .outOfRange, "\(name): \(error.rawValue)")
            let reason = error.reason ?? ""
            for word in words {
                #expect(reason.contains(word), "\(name): \(reason)")
            }
            #expect(error.description == reason && reason.hasSuffix("."), "\(name): \(error)")
        }
    }

    @Test("the defaults and the edges of each range are accepted")
    func configurationEdges() throws {
        for change in [
            { (_: inout FleetConfiguration) in },
            { $0.cacheSlots = nil }, { $0.cacheSlots = 1 }, { $0.maxBatch = 1 }, { $0.maxBatch = 1024 },
            { $0.prefix = String(repeating: "é", count: 128) }, { $0.port = 65_535 },
            { $0.onFailure = .local(nil) }, { $0.clock = .local },
            { $0.onFailure = .local(.rate(limit: 1, per: .seconds(2))) },
        ] as [(inout FleetConfiguration) -> Void] {
            var c = FleetConfiguration()
            c.port = 1
            change(&c)
            let fleet = try FleetLimiter<String>(.rate(limit: 1, per: .seconds(1)), configuration: c)
            try fleet.close()
        }
    }

    @Test("a limiter closed right after it was created stops its loop thread", .timeLimit(.minutes(2)))
    func closeAtOnce() throws {
        // sluice_fleet_free() used to break the loop with event_base_loopbreak(),
        // which a loop thread that had not entered event_base_loop() yet lost:
        // the join then waited forever.
        var c = FleetConfiguration()
        c.port = 1
        for _ in 0..<200 {
            let fleet = try FleetLimiter<String>(.rate(limit: 1, per: .seconds(1)), configuration: c)
            try fleet.close()
        }
    }

    @Test("the fleet's errors are LimiterErrors of the one list, each a sentence")
    func errorSentences() {
        let fleet: [(LimiterError, Int32)] = [
            (.notConnected, SLUICE_ENOTCONN.rawValue), (.timedOut, SLUICE_ETIMEDOUT.rawValue),
            (.badReply, SLUICE_EPROTO.rawValue), (.closed, SLUICE_ECLOSED.rawValue),
        ]
        for (error, code) in fleet {
            #expect(error.rawValue == code)
            #expect(LimiterError.allCases.contains(error))
            let text = error.description
            #expect(text.first?.isUppercase == true && text.hasSuffix("."), "\(text)")
            #expect("\(error)" == text)
        }
    }
}
