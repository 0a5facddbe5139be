import CSluice
import CSluiceFleet
import Sluice

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// Who made a fleet decision.
public enum FleetSource: Sendable, Equatable {
    /// The script in Redis: the fleet-wide decision.
    case redis
    /// A certain drop answered locally from the TAT cache (no round trip).
    case cache
    /// The failure policy, because Redis could not decide: the reason
    /// (``Sluice/LimiterError/notConnected``, ``Sluice/LimiterError/timedOut``
    /// or ``Sluice/LimiterError/badReply``).
    case failure(LimiterError)
}

/// How a ``FleetLimiter`` connects and what it does when Redis cannot decide.
public struct FleetConfiguration: Sendable {
    /// What to do when Redis cannot decide in time.
    public enum FailurePolicy: Sendable {
        /// Drop the call, telling it to retry after `retryAfter`.
        case closed(retryAfter: Duration = .seconds(1))
        /// Admit the call.
        case open
        /// Decide with a local limiter of this rate policy (`nil`: the fleet's
        /// own policy); typically the fleet's rate divided by the number of processes.
        case local(LimiterPolicy?)
    }

    /// Redis host, not empty (a numeric address is best: name resolution blocks).
    public var host: String = "127.0.0.1"
    /// Redis port, 1 to 65535.
    public var port: Int = 6379
    /// Key prefix, 1 to 256 bytes of UTF-8: Redis keys are `{prefix:...}`.
    /// Give each policy its own.
    public var prefix: String = "sluice"
    /// Per-request timeout, more than zero.
    public var timeout: Duration = .milliseconds(50)
    /// The failure policy.
    public var onFailure: FailurePolicy = .closed()
    /// Entries of the local cache of certain drops, at least 1 (`nil`: no cache).
    public var cacheSlots: Int? = 4096
    /// How long a cache entry is trusted, more than zero.
    public var cacheTTL: Duration = .seconds(1)
    /// Use the time passed with each request instead of Redis's clock (tests, traces).
    public var manualTime: Bool = false
    /// Most calls and quota reads decided by one script run, 1 to 1024
    /// (requests queued together are sent as one batch, decided in order).
    /// 1 for Redis Cluster: a batch names keys of different hash slots.
    public var maxBatch: Int = 32

    /// A configuration with the defaults (127.0.0.1:6379, 50 ms timeout, fail closed).
    public init() {}
}

/// Counters of a ``FleetLimiter``.
public struct FleetStats: Sendable {
    /// Calls, quota reads and cancels accepted.
    public var calls, quotas, cancels: UInt64
    /// Call decisions made by Redis.
    public var redisAdmitted, redisDropped: UInt64
    /// Certain drops answered from the cache.
    public var cacheDropped: UInt64
    /// Call decisions made by the failure policy, and among them by the local fallback.
    public var failureAdmitted, failureDropped, fallbackAdmitted, fallbackDropped: UInt64
    /// Requests answered by their timeout / at once because Redis was unavailable.
    public var timeouts, unavailable: UInt64
    /// Invalid replies, NOSCRIPT resends, connections made and lost.
    public var badReplies, noscript, connects, disconnects: UInt64
    /// Script runs sent to Redis (each decides a batch of calls and quota reads).
    public var batches: UInt64
}

private func durationNs(_ d: Duration) -> UInt64 {
    let (s, a) = d.components
    if s < 0 { return 0 }
    return UInt64(s) &* 1_000_000_000 &+ UInt64(a / 1_000_000_000)
}

/// The C form of a rate policy; `option` names it in errors ("policy",
/// "onFailure: .local(…)"): a policy that is not rate, or a rate policy that
/// breaks a rule, is refused with a reason naming the option and the rule.
private func ratePolicy(_ p: LimiterPolicy, option: String) throws(LimiterError) -> sluice_policy_t {
    guard let r = p.rateLimit else {
        throw LimiterError(
            .invalidArgument,
            reason: "Invalid \(option): a FleetLimiter takes a rate policy (.rate(limit:per:burst:)), not \(p).")
    }
    if let problem = p.problem {
        throw LimiterError(problem.code, reason: "Invalid \(option): \(problem.sentence)")
    }
    try p.validate()  // the core's check (the reason above covers every refusal it makes)
    let per = durationNs(r.per)
    return sluice_rate(UInt64(r.limit), Int64(clamping: per), UInt64(r.burst))
}

/// A refused option of a ``FleetConfiguration``: its name, value and rule.
private func invalid(_ option: String, _ value: Any, _ rule: String) -> LimiterError {
    LimiterError(.invalidArgument, reason: "Invalid FleetConfiguration.\(option) (\(value)): \(rule).")
}

/// A positive duration option in nanoseconds, at most 10^18 (about 31.7 years).
private func positiveNs(_ option: String, _ d: Duration) throws(LimiterError) -> UInt64 {
    guard d > .zero else { throw invalid(option, d, "it must be more than zero") }
    guard d <= .nanoseconds(1_000_000_000_000_000_000) else {
        throw LimiterError(
            .outOfRange,
            reason:
                "Invalid FleetConfiguration.\(option) (\(d)): it may be at most 10^18 nanoseconds (about 31.7 years).")
    }
    return max(1, durationNs(d))
}

/// The C configuration of `configuration` (without host and prefix, which
/// the caller points at), after checking every option: a value the C layer
/// would silently replace by its default (a zero port, timeout or TTL, an
/// empty prefix) or clamp (cache slots, batch size) is refused, with a
/// reason naming the option and the rule.
private func cConfig(
    policy: LimiterPolicy, _ configuration: FleetConfiguration
) throws(LimiterError)
    -> sluice_fleet_config_t
{
    var c = sluice_fleet_config_t()
    c.policy = try ratePolicy(policy, option: "policy")
    guard !configuration.host.isEmpty else {
        throw invalid("host", "\"\"", "it must name the Redis server (a numeric address is best)")
    }
    guard (1...65535).contains(configuration.port) else {
        throw invalid("port", configuration.port, "it must be 1 to 65535")
    }
    let prefixBytes = configuration.prefix.utf8.count
    guard (1...256).contains(prefixBytes) else {
        throw invalid("prefix", "\(prefixBytes) bytes", "it must be 1 to 256 bytes of UTF-8")
    }
    c.port = Int32(configuration.port)
    c.timeout_ns = try positiveNs("timeout", configuration.timeout)
    c.manual_time = configuration.manualTime
    if let slots = configuration.cacheSlots {
        guard slots >= 1 else { throw invalid("cacheSlots", slots, "it must be at least 1, or nil for no cache") }
        c.cache_slots = slots
    } else {
        c.cache_slots = Int(bitPattern: UInt.max)  // SIZE_MAX: no cache
    }
    c.cache_ttl_ns = try positiveNs("cacheTTL", configuration.cacheTTL)
    guard (1...1024).contains(configuration.maxBatch) else {
        throw invalid("maxBatch", configuration.maxBatch, "it must be 1 to 1024")
    }
    c.max_batch = configuration.maxBatch
    switch configuration.onFailure {
    case .closed(let retry):
        c.on_failure = SLUICE_FLEET_FAIL_CLOSED
        c.closed_retry_ns = try positiveNs("onFailure: .closed(retryAfter:)", retry)
    case .open:
        c.on_failure = SLUICE_FLEET_FAIL_OPEN
    case .local(let p):
        c.on_failure = SLUICE_FLEET_FAIL_LOCAL
        if let p {
            c.fallback_policy = try ratePolicy(p, option: "onFailure: .local policy")
        }
    }
    return c
}

/// One pending request: resumes its continuation with the C result.
private final class Pending {
    let resume: (sluice_fleet_result_t) -> Void
    init(_ resume: @escaping (sluice_fleet_result_t) -> Void) { self.resume = resume }
}

private let fleetCallback: sluice_fleet_fn = { user, result in
    guard let user, let result else { return }
    let pending = Unmanaged<Pending>.fromOpaque(user).takeRetainedValue()
    pending.resume(result.pointee)
}

private func source(_ r: sluice_fleet_result_t) -> FleetSource {
    switch r.source {
    case SLUICE_FLEET_SOURCE_CACHE: return .cache
    case SLUICE_FLEET_SOURCE_FAILURE: return .failure(LimiterError(rawValue: r.cause))
    default: return .redis
    }
}

/// Moves a result's times onto the clock its Swift instants are on: with
/// `local` (the event loops' `CLOCK_MONOTONIC` read when the answer came),
/// the result's own time `now` becomes `local` and every other time keeps
/// its exact distance to it; without (manual-time mode), times stay the
/// caller's.
private struct Onto {
    let now: UInt64
    let local: UInt64?

    func callAsFunction(_ t: UInt64) -> LimiterInstant {
        guard let local else { return LimiterInstant(nanoseconds: t) }
        if t >= now {
            let (sum, carry) = local.addingReportingOverflow(t - now)
            return LimiterInstant(nanoseconds: carry ? .max : sum)
        }
        return LimiterInstant(nanoseconds: local >= now - t ? local - (now - t) : 0)
    }
}

/// A fleet result as the local limiter's decision type, its instants on the
/// local clock (see ``FleetLimiter/call(_:cost:now:)``).
private func rateDecision(_ r: sluice_fleet_result_t, local: UInt64?) -> RateDecision {
    let d = r.decision
    let admitted = d.kind == SLUICE_EMITTED
    let at = max(r.now, admitted ? d.at : r.now)
    let onto = Onto(now: r.now, local: local)
    let outcome: RateDecision.Outcome =
        admitted
        ? .admitted(remaining: Int(clamping: d.remaining))
        : .dropped(retryAt: d.at == UInt64.max ? nil : onto(max(d.at, at)))
    return RateDecision(outcome: outcome, at: onto(at), fullAt: onto(max(d.full, at)))
}

/// A fleet quota read as the local limiter's quota type, on the local clock.
private func rateQuota(_ r: sluice_fleet_result_t, local: UInt64?) -> RateQuota {
    let q = r.quota
    let onto = Onto(now: r.now, local: local)
    return RateQuota(
        at: onto(r.now), burst: Int(clamping: q.burst),
        remaining: Int(clamping: q.remaining),
        fullAt: onto(max(q.full, r.now)),
        retryAt: q.retry == UInt64.max ? nil : onto(max(q.retry, r.now)))
}

/// A rate limiter shared by a fleet of processes through Redis.
///
/// Each decision is made atomically in Redis by one Lua script following the
/// local rate semantics exactly (weighted calls and quota reads included), on
/// the Redis server's clock, so every process using the same Redis, prefix
/// and policy draws from one quota per key. A certain drop is answered
/// locally without a round trip. When Redis cannot answer within the timeout
/// the failure policy decides. See docs/fleet.md.
///
/// It is a ``RateDecider``: its decisions are ``RateDecision``s like the
/// local ``RateLimiter``'s, so ``RateLimitHeaders`` and the server middleware
/// take it unchanged.
///
/// The limiter runs its own libevent loop on a thread of its own
/// (`sluice_fleet_start`); every method may be called from any task or thread.
///
/// The instants of its decisions are on the local event loops' clock, the
/// clock of ``now`` (and of ``Sluice/LimiterLoop/now``): `at` is when the
/// answer arrived, and `retryAt` and `fullAt` keep their exact distance to
/// it, so a decision prints, compares and waits like a local limiter's (see
/// ``call(_:cost:now:)``). In manual-time mode they are on the caller's
/// clock, the `now` passed with each request.
///
/// A configuration it cannot use is refused when it is created, with a
/// ``Sluice/LimiterError`` whose reason names the option and the rule:
/// `FleetLimiter(policy: .throttle(interval: .seconds(1)))` throws "Invalid
/// policy: a FleetLimiter takes a rate policy (.rate(limit:per:burst:)), not
/// throttle(…)."
///
/// ```swift
/// var config = FleetConfiguration()
/// config.prefix = "api"
/// let fleet = try FleetLimiter(policy: .rate(limit: 100, per: .seconds(1), burst: 20),
///                              configuration: config)
/// let decision = try await fleet.call("user:42")   // a RateDecision
/// if !decision.isAdmitted {
///     /* 429, with RateLimitHeaders(fleet.policy, decision)!.fields */
/// }
/// ```
public final class FleetLimiter: RateDecider, @unchecked Sendable {
    /// The rate policy the decisions follow.
    public let policy: LimiterPolicy
    private let fleet: OpaquePointer
    private let manualTime: Bool
    private let stateLock = PosixLock()
    private var closed = false
    private var freed = false
    private var finalStats = sluice_fleet_stats_t()

    /// Creates a limiter and starts connecting (without waiting).
    ///
    /// - Parameters:
    ///   - policy: a ``LimiterPolicy/rate(limit:per:burst:)`` policy.
    ///   - configuration: where Redis is and how to fail.
    /// - Throws: ``Sluice/LimiterError/invalidArgument`` (or
    ///   ``Sluice/LimiterError/outOfRange``) with a ``Sluice/LimiterError/reason``
    ///   naming the option and the rule, for a policy that is not a valid rate
    ///   policy or an option out of its range (see ``FleetConfiguration``);
    ///   another ``Sluice/LimiterError`` when the limiter cannot be created.
    public init(policy: LimiterPolicy, configuration: FleetConfiguration = FleetConfiguration()) throws(LimiterError) {
        var c = try cConfig(policy: policy, configuration)
        var out: OpaquePointer?
        let prefix = Array(configuration.prefix.utf8)  // its bytes (a NUL inside is kept): the C side copies them
        let rc = configuration.host.withCString { host in
            prefix.withUnsafeBytes { prefix in
                c.host = host
                c.prefix = prefix.baseAddress
                c.prefix_len = prefix.count
                return sluice_fleet_start(&out, &c)
            }
        }
        guard rc == 0, let out else { throw LimiterError(rawValue: rc) }
        self.fleet = out
        self.policy = policy
        self.manualTime = configuration.manualTime
    }

    deinit {
        close()
    }

    /// Stops the loop thread and frees the limiter: requests not answered yet
    /// fail with ``Sluice/LimiterError/closed``; later requests throw it. Idempotent.
    public func close() {
        stateLock.lock()
        if closed {
            stateLock.unlock()
            return
        }
        closed = true
        sluice_fleet_stats(fleet, &finalStats)
        freed = true
        stateLock.unlock()
        sluice_fleet_free(fleet) /* stops and joins the loop thread, answers what is left */
    }

    private func submit<K: LimiterKey>(
        _ key: K, _ body: (sluice_key_t, UnsafeMutableRawPointer) -> Int32,
        _ pending: Pending
    ) -> Int32 {
        let user = Unmanaged.passRetained(pending).toOpaque()
        stateLock.lock()
        defer { stateLock.unlock() }
        if closed {
            Unmanaged<Pending>.fromOpaque(user).release()
            return Int32(SLUICE_ECLOSED.rawValue)
        }
        let rc = key.withLimiterKeyIdentity { id -> Int32 in
            switch id {
            case .integer(let v): return body(sluice_key_u64(v), user)
            case .bytes(let b): return body(sluice_key_bytes(b.baseAddress, b.count), user)
            }
        }
        if rc != 0 { Unmanaged<Pending>.fromOpaque(user).release() }
        return rc
    }

    /// Asks whether a call of `cost` units on `key` is admitted.
    ///
    /// The decision is the local rate limiter's type, so ``RateLimitHeaders``
    /// and the server middleware read it unchanged. Its instants are on the
    /// local event loops' clock (``now``), whoever decided: `at` is when the
    /// answer arrived, and `retryAt` and `fullAt` are as far from it as the
    /// decider said (Redis on its clock, the cache on its estimate of it, the
    /// failure policy on the local wall clock), so a wait is never shorter
    /// than the decider's. Two decisions' instants agree to within the time
    /// their answers took. In manual-time mode they are on the caller's
    /// clock: the `now` passed in. To know who decided, use
    /// ``decide(_:cost:now:)``.
    ///
    /// - Parameters:
    ///   - key: the key.
    ///   - cost: the units the call weighs (1 to 10^12).
    ///   - now: manual-time mode only: the call's time in ns.
    /// - Returns: the decision (from Redis, the cache or the failure policy).
    /// - Throws: ``Sluice/LimiterError/closed`` after ``close()``, or another
    ///   ``Sluice/LimiterError`` for an invalid key or cost.
    public func call<K: LimiterKey>(
        _ key: K, cost: UInt64 = 1, now: UInt64 = 0
    ) async throws(LimiterError) -> RateDecision {
        try await decide(key, cost: cost, now: now).decision
    }

    /// As ``call(_:cost:now:)``, and says who decided: Redis, the local cache
    /// of certain drops, or the failure policy (with the reason).
    ///
    /// - Parameters:
    ///   - key: the key.
    ///   - cost: the units the call weighs (1 to 10^12).
    ///   - now: manual-time mode only: the call's time in ns.
    /// - Returns: the decision and its source.
    /// - Throws: as ``call(_:cost:now:)``.
    public func decide<K: LimiterKey>(
        _ key: K, cost: UInt64 = 1, now: UInt64 = 0
    ) async throws(LimiterError)
        -> (decision: RateDecision, source: FleetSource)
    {
        let manualTime = self.manualTime
        let result: Result<(decision: RateDecision, source: FleetSource), LimiterError> =
            await withCheckedContinuation { cont in
                let pending = Pending { r in
                    if r.status != 0 { cont.resume(returning: .failure(LimiterError(rawValue: r.status))); return }
                    let local = manualTime ? nil : LimiterLoop.now.nanoseconds
                    cont.resume(returning: .success((rateDecision(r, local: local), source(r))))
                }
                let rc = submit(
                    key,
                    { k, user in
                        sluice_fleet_call(fleet, k, cost, now, fleetCallback, user)
                    }, pending)
                if rc != 0 { cont.resume(returning: .failure(LimiterError(rawValue: rc))) }
            }
        return try result.get()
    }

    /// ``RateDecider``: decides about one call of `key` weighing `cost` units
    /// now (server time): ``call(_:cost:now:)``.
    ///
    /// - Parameters:
    ///   - key: the client's key.
    ///   - cost: units, 1 to 10^12.
    /// - Returns: the decision.
    /// - Throws: a ``Sluice/LimiterError`` (``Sluice/LimiterError/closed`` after ``close()``,
    ///   ``Sluice/LimiterError/outOfRange`` for a cost out of range).
    public func check(_ key: String, cost: Int = 1) async throws(LimiterError) -> RateDecision {
        guard cost >= 1 else { throw LimiterError.outOfRange }
        return try await call(key, cost: UInt64(cost))
    }

    /// Reads a key's quota without changing it (always asks Redis), as the
    /// local limiter's quota type (instants on the local clock, as
    /// ``call(_:cost:now:)``).
    ///
    /// - Parameters:
    ///   - key: the key.
    ///   - cost: the cost to compute `retryAt` for.
    ///   - now: manual-time mode only: the time in ns.
    /// - Returns: the quota.
    /// - Throws: as ``call(_:cost:now:)``.
    public func quota<K: LimiterKey>(
        _ key: K, cost: UInt64 = 1, now: UInt64 = 0
    ) async throws(LimiterError) -> RateQuota {
        let manualTime = self.manualTime
        let result: Result<RateQuota, LimiterError> = await withCheckedContinuation { cont in
            let pending = Pending { r in
                if r.status != 0 { cont.resume(returning: .failure(LimiterError(rawValue: r.status))); return }
                let local = manualTime ? nil : LimiterLoop.now.nanoseconds
                cont.resume(returning: .success(rateQuota(r, local: local)))
            }
            let rc = submit(
                key,
                { k, user in
                    sluice_fleet_quota(fleet, k, cost, now, fleetCallback, user)
                }, pending)
            if rc != 0 { cont.resume(returning: .failure(LimiterError(rawValue: rc))) }
        }
        return try result.get()
    }

    /// Forgets a key's history fleet-wide (a fresh quota).
    ///
    /// - Parameters:
    ///   - key: the key.
    ///   - now: manual-time mode only: the time in ns.
    /// - Throws: the reason when Redis could not confirm it (the local cache
    ///   and fallback forgot the key anyway), or ``Sluice/LimiterError/closed``.
    public func cancel<K: LimiterKey>(_ key: K, now: UInt64 = 0) async throws(LimiterError) {
        let result: Result<Void, LimiterError> = await withCheckedContinuation { cont in
            let pending = Pending { r in
                cont.resume(returning: r.status == 0 ? .success(()) : .failure(LimiterError(rawValue: r.status)))
            }
            let rc = submit(
                key,
                { k, user in
                    sluice_fleet_cancel(fleet, k, now, fleetCallback, user)
                }, pending)
            if rc != 0 { cont.resume(returning: .failure(LimiterError(rawValue: rc))) }
        }
        try result.get()
    }

    /// The current time of the clock its decisions' instants are on: the
    /// event loops' `CLOCK_MONOTONIC` (``Sluice/LimiterLoop/now``), for
    /// example to wait until a decision's `retryAt`:
    /// `fleet.now.duration(to: retryAt)`. (In manual-time mode the instants
    /// are on the caller's clock instead.)
    public var now: LimiterInstant { LimiterLoop.now }

    /// The limiter's counters.
    public var stats: FleetStats {
        var s = sluice_fleet_stats_t()
        stateLock.lock()
        if freed { s = finalStats } else { sluice_fleet_stats(fleet, &s) }
        stateLock.unlock()
        return FleetStats(
            calls: s.calls, quotas: s.quotas, cancels: s.cancels,
            redisAdmitted: s.redis_admitted, redisDropped: s.redis_dropped, cacheDropped: s.cache_dropped,
            failureAdmitted: s.failure_admitted, failureDropped: s.failure_dropped,
            fallbackAdmitted: s.fallback_admitted, fallbackDropped: s.fallback_dropped,
            timeouts: s.timeouts, unavailable: s.unavailable, badReplies: s.bad_replies,
            noscript: s.noscript, connects: s.connects, disconnects: s.disconnects, batches: s.batches)
    }
}
