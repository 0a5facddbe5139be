import CSluiceFleet

/// Every counter of a ``FleetLimiter``: requests, who decided, failures,
/// connections and batches (``FleetLimiter/statistics`` gives the same
/// decisions in a local limiter's terms).
public struct FleetStatistics: Hashable, Sendable {
    /// Calls, quota reads and resets accepted.
    public var calls, quotas, resets: UInt64
    /// Call decisions made by Redis.
    public var redisAdmitted, redisDropped: UInt64
    /// Certain drops answered from the local cache.
    public var cacheDropped: UInt64
    /// Call decisions made without Redis (fallback limiter or failure
    /// policy), and among them by the local fallback limiter.
    public var failureAdmitted, failureDropped, fallbackAdmitted, fallbackDropped: UInt64
    /// Requests answered by their timeout / at once because Redis was unavailable.
    public var timeouts, unavailable: UInt64
    /// Invalid replies, NOSCRIPT resends, connections made and lost.
    public var badReplies, noscript, connects, disconnects: UInt64
    /// Script runs sent to Redis (each decides a batch of calls and quota reads).
    public var batches: UInt64
    /// Requests waiting for Redis now.
    public var inFlight: UInt64
    /// Requests whose key held a value that is not the limiter's state
    /// (``Sluice/LimiterError/badStoredValue``).
    public var badValues: UInt64
    /// Error replies by class: refused credentials
    /// (``Sluice/LimiterError/authenticationFailed``), a missing ACL
    /// permission (``Sluice/LimiterError/permissionDenied``), Redis out of
    /// memory (``Sluice/LimiterError/redisOutOfMemory``), a node that takes
    /// no writes (``Sluice/LimiterError/readOnly``), any other error
    /// (``Sluice/LimiterError/redisError``).
    public var authErrors, permissionErrors, outOfMemoryErrors, readOnlyErrors, otherErrors: UInt64

    init(_ s: sluice_fleet_stats_t) {
        calls = s.calls
        quotas = s.quotas
        resets = s.cancels
        redisAdmitted = s.redis_admitted
        redisDropped = s.redis_dropped
        cacheDropped = s.cache_dropped
        failureAdmitted = s.failure_admitted
        failureDropped = s.failure_dropped
        fallbackAdmitted = s.fallback_admitted
        fallbackDropped = s.fallback_dropped
        timeouts = s.timeouts
        unavailable = s.unavailable
        badReplies = s.bad_replies
        noscript = s.noscript
        connects = s.connects
        disconnects = s.disconnects
        batches = s.batches
        inFlight = s.in_flight
        badValues = s.bad_values
        authErrors = s.auth_errors
        permissionErrors = s.noperm_errors
        outOfMemoryErrors = s.oom_errors
        readOnlyErrors = s.readonly_errors
        otherErrors = s.redis_errors
    }
}
