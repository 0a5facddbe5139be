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
    }
}
