import CSluice
import CSluiceFleet
import Sluice

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// Why Redis could not decide, or why a request failed.
public enum FleetError: Error, Sendable, Equatable {
    /// No connection to Redis (down, refused, reconnecting).
    case notConnected
    /// Redis did not answer within the timeout.
    case timedOut
    /// Redis answered something that is not a valid answer.
    case badReply
    /// The limiter was closed before the request was answered.
    case closed
    /// Another Sluice error code (see `sluice_fleet_strerror`).
    case code(Int32)

    init(code: Int32) {
        switch code {
        case Int32(SLUICE_FLEET_ENOTCONN.rawValue): self = .notConnected
        case Int32(SLUICE_FLEET_ETIMEDOUT.rawValue): self = .timedOut
        case Int32(SLUICE_FLEET_EPROTO.rawValue): self = .badReply
        case Int32(SLUICE_ECLOSED.rawValue): self = .closed
        default: self = .code(code)
        }
    }
}

/// Who made a fleet decision.
public enum FleetSource: Sendable, Equatable {
    /// The script in Redis: the fleet-wide decision.
    case redis
    /// A certain drop answered locally from the TAT cache (no round trip).
    case cache
    /// The failure policy, because Redis could not decide (the reason).
    case failure(FleetError)
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

    /// Redis host (a numeric address is best: name resolution blocks).
    public var host: String = "127.0.0.1"
    /// Redis port.
    public var port: Int = 6379
    /// Key prefix: Redis keys are `{prefix:...}`. Give each policy its own.
    public var prefix: String = "sluice"
    /// Per-request timeout.
    public var timeout: Duration = .milliseconds(50)
    /// The failure policy.
    public var onFailure: FailurePolicy = .closed()
    /// Entries of the local cache of certain drops (`nil`: no cache).
    public var cacheSlots: Int? = 4096
    /// How long a cache entry is trusted.
    public var cacheTTL: Duration = .seconds(1)
    /// Use the time passed with each request instead of Redis's clock (tests, traces).
    public var manualTime: Bool = false
    /// Most calls and quota reads decided by one script run (requests queued
    /// together are sent as one batch, decided in order). 1 for Redis Cluster:
    /// a batch names keys of different hash slots.
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

private func ratePolicy(_ p: LimiterPolicy) throws(LimiterError) -> sluice_policy_t {
    try p.validate()
    guard let r = p.rateLimit else { throw LimiterError.invalidArgument } // not a rate policy
    let per = durationNs(r.per)
    return sluice_rate(UInt64(r.limit), Int64(clamping: per), UInt64(r.burst))
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
    case SLUICE_FLEET_SOURCE_FAILURE: return .failure(FleetError(code: r.cause))
    default: return .redis
    }
}

/// A fleet result as the local limiter's decision type. Times are those of the
/// decision's clock (see ``FleetLimiter``).
private func rateDecision(_ r: sluice_fleet_result_t) -> RateDecision {
    let d = r.decision
    let admitted = d.kind == SLUICE_EMITTED
    let at = max(r.now, admitted ? d.at : r.now)
    let outcome: RateDecision.Outcome = admitted
        ? .admitted(remaining: Int(clamping: d.remaining))
        : .dropped(retryAt: d.at == UInt64.max ? nil : LimiterInstant(nanoseconds: max(d.at, at)))
    return RateDecision(outcome: outcome, at: LimiterInstant(nanoseconds: at),
                        fullAt: LimiterInstant(nanoseconds: max(d.full, at)))
}

/// A fleet quota read as the local limiter's quota type.
private func rateQuota(_ r: sluice_fleet_result_t) -> RateQuota {
    let q = r.quota
    return RateQuota(at: LimiterInstant(nanoseconds: r.now), burst: Int(clamping: q.burst),
                     remaining: Int(clamping: q.remaining),
                     fullAt: LimiterInstant(nanoseconds: max(q.full, r.now)),
                     retryAt: q.retry == UInt64.max ? nil : LimiterInstant(nanoseconds: max(q.retry, r.now)))
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
    private let stateLock = UnsafeMutablePointer<pthread_mutex_t>.allocate(capacity: 1)
    private var closed = false
    private var freed = false
    private var finalStats = sluice_fleet_stats_t()

    /// Creates a limiter and starts connecting (without waiting).
    ///
    /// - Parameters:
    ///   - policy: a ``LimiterPolicy/rate(limit:per:burst:)`` policy.
    ///   - configuration: where Redis is and how to fail.
    /// - Throws: ``LimiterError`` for a policy that is not a valid rate policy,
    ///   or when the limiter cannot be created.
    public init(policy: LimiterPolicy, configuration: FleetConfiguration = FleetConfiguration()) throws(LimiterError) {
        let cPolicy = try ratePolicy(policy)
        var c = sluice_fleet_config_t()
        c.policy = cPolicy
        c.port = Int32(configuration.port)
        c.timeout_ns = durationNs(configuration.timeout)
        c.manual_time = configuration.manualTime
        c.cache_slots = configuration.cacheSlots.map { max(1, $0) } ?? Int(bitPattern: UInt.max) // SIZE_MAX: none
        c.cache_ttl_ns = durationNs(configuration.cacheTTL)
        c.max_batch = max(1, configuration.maxBatch)
        switch configuration.onFailure {
        case .closed(let retry):
            c.on_failure = SLUICE_FLEET_FAIL_CLOSED
            c.closed_retry_ns = max(1, durationNs(retry))
        case .open:
            c.on_failure = SLUICE_FLEET_FAIL_OPEN
        case .local(let p):
            c.on_failure = SLUICE_FLEET_FAIL_LOCAL
            if let p {
                c.fallback_policy = try ratePolicy(p)
            }
        }
        var out: OpaquePointer?
        let rc = configuration.host.withCString { host in
            configuration.prefix.withCString { prefix in
                c.host = host
                c.prefix = UnsafeRawPointer(prefix)
                c.prefix_len = strlen(prefix)
                return sluice_fleet_start(&out, &c)
            }
        }
        guard rc == 0, let out else { throw LimiterError(rawValue: rc) }
        self.fleet = out
        self.policy = policy
        pthread_mutex_init(stateLock, nil)
    }

    deinit {
        close()
        stateLock.deallocate()
    }

    /// Stops the loop thread and frees the limiter: requests not answered yet
    /// fail with ``FleetError/closed``; later requests throw it. Idempotent.
    public func close() {
        pthread_mutex_lock(stateLock)
        if closed {
            pthread_mutex_unlock(stateLock)
            return
        }
        closed = true
        sluice_fleet_stats(fleet, &finalStats)
        freed = true
        pthread_mutex_unlock(stateLock)
        sluice_fleet_free(fleet) /* stops and joins the loop thread, answers what is left */
    }

    private func submit<K: LimiterKey>(_ key: K, _ body: (sluice_key_t, UnsafeMutableRawPointer) -> Int32,
                                       _ pending: Pending) -> Int32 {
        let user = Unmanaged.passRetained(pending).toOpaque()
        pthread_mutex_lock(stateLock)
        defer { pthread_mutex_unlock(stateLock) }
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
    /// decision's clock: the Redis server's (Unix time, ns), the caller's
    /// `now` in manual-time mode, or the local wall clock for a failure-policy
    /// answer. To know who decided, use ``decide(_:cost:now:)``.
    ///
    /// - Parameters:
    ///   - key: the key.
    ///   - cost: the units the call weighs (1 to 10^12).
    ///   - now: manual-time mode only: the call's time in ns.
    /// - Returns: the decision (from Redis, the cache or the failure policy).
    /// - Throws: ``FleetError/closed`` after ``close()``, or another
    ///   ``FleetError`` for an invalid key or cost.
    public func call<K: LimiterKey>(_ key: K, cost: UInt64 = 1, now: UInt64 = 0) async throws(FleetError) -> RateDecision {
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
    public func decide<K: LimiterKey>(_ key: K, cost: UInt64 = 1, now: UInt64 = 0) async throws(FleetError)
        -> (decision: RateDecision, source: FleetSource) {
        let result: Result<(decision: RateDecision, source: FleetSource), FleetError> =
            await withCheckedContinuation { cont in
                let pending = Pending { r in
                    if r.status != 0 { cont.resume(returning: .failure(FleetError(code: r.status))); return }
                    cont.resume(returning: .success((rateDecision(r), source(r))))
                }
                let rc = submit(key, { k, user in
                    sluice_fleet_call(fleet, k, cost, now, fleetCallback, user)
                }, pending)
                if rc != 0 { cont.resume(returning: .failure(FleetError(code: rc))) }
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
    /// - Throws: a ``FleetError`` (``FleetError/closed`` after ``close()``,
    ///   ``FleetError/code(_:)`` for a cost out of range).
    public func check(_ key: String, cost: Int = 1) async throws(FleetError) -> RateDecision {
        guard cost >= 1 else { throw FleetError.code(Int32(SLUICE_ERANGE.rawValue)) }
        return try await call(key, cost: UInt64(cost))
    }

    /// Reads a key's quota without changing it (always asks Redis), as the
    /// local limiter's quota type (instants on the decision's clock, as
    /// ``call(_:cost:now:)``).
    ///
    /// - Parameters:
    ///   - key: the key.
    ///   - cost: the cost to compute `retryAt` for.
    ///   - now: manual-time mode only: the time in ns.
    /// - Returns: the quota.
    /// - Throws: as ``call(_:cost:now:)``.
    public func quota<K: LimiterKey>(_ key: K, cost: UInt64 = 1, now: UInt64 = 0) async throws(FleetError) -> RateQuota {
        let result: Result<RateQuota, FleetError> = await withCheckedContinuation { cont in
            let pending = Pending { r in
                if r.status != 0 { cont.resume(returning: .failure(FleetError(code: r.status))); return }
                cont.resume(returning: .success(rateQuota(r)))
            }
            let rc = submit(key, { k, user in
                sluice_fleet_quota(fleet, k, cost, now, fleetCallback, user)
            }, pending)
            if rc != 0 { cont.resume(returning: .failure(FleetError(code: rc))) }
        }
        return try result.get()
    }

    /// Forgets a key's history fleet-wide (a fresh quota).
    ///
    /// - Parameters:
    ///   - key: the key.
    ///   - now: manual-time mode only: the time in ns.
    /// - Throws: the reason when Redis could not confirm it (the local cache
    ///   and fallback forgot the key anyway), or ``FleetError/closed``.
    public func cancel<K: LimiterKey>(_ key: K, now: UInt64 = 0) async throws(FleetError) {
        let result: Result<Void, FleetError> = await withCheckedContinuation { cont in
            let pending = Pending { r in
                cont.resume(returning: r.status == 0 ? .success(()) : .failure(FleetError(code: r.status)))
            }
            let rc = submit(key, { k, user in
                sluice_fleet_cancel(fleet, k, now, fleetCallback, user)
            }, pending)
            if rc != 0 { cont.resume(returning: .failure(FleetError(code: rc))) }
        }
        try result.get()
    }

    /// The limiter's counters.
    public var stats: FleetStats {
        var s = sluice_fleet_stats_t()
        pthread_mutex_lock(stateLock)
        if freed { s = finalStats } else { sluice_fleet_stats(fleet, &s) }
        pthread_mutex_unlock(stateLock)
        return FleetStats(
            calls: s.calls, quotas: s.quotas, cancels: s.cancels,
            redisAdmitted: s.redis_admitted, redisDropped: s.redis_dropped, cacheDropped: s.cache_dropped,
            failureAdmitted: s.failure_admitted, failureDropped: s.failure_dropped,
            fallbackAdmitted: s.fallback_admitted, fallbackDropped: s.fallback_dropped,
            timeouts: s.timeouts, unavailable: s.unavailable, badReplies: s.bad_replies,
            noscript: s.noscript, connects: s.connects, disconnects: s.disconnects, batches: s.batches)
    }
}
