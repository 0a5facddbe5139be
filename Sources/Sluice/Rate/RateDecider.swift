/// Something that decides about rate-limited calls: one call of a key that
/// weighs `cost` units, admitted or dropped now, as a ``RateDecision``.
///
/// ``RateLimiter`` with `String` keys conforms (the local limiter); so does
/// `SluiceFleet`'s `FleetLimiter` (one quota shared by a fleet of servers
/// through Redis). The server middleware (SluiceHummingbird, SluiceVapor,
/// through SluiceHTTP's `RateLimitGate`) takes any `RateDecider`, and
/// ``RateLimitHeaders`` formats the decision of any of them the same way.
public protocol RateDecider: Sendable {
    /// The rate policy the decisions follow (for the `RateLimit-Policy` header).
    var policy: LimiterPolicy { get }

    /// Decides about one call of `key` that weighs `cost` units, now.
    ///
    /// - Parameters:
    ///   - key: the client's key.
    ///   - cost: units, at least 1.
    /// - Returns: the decision.
    /// - Throws: when no decision can be made (``LimiterError/full`` at the
    ///   key cap, ``LimiterError/keyTooLong``, a fleet's failure, …).
    func check(_ key: String, cost: Int) async throws -> RateDecision
}

extension RateLimiter: RateDecider where Key == String {}
