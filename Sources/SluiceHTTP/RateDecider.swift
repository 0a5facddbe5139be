import Sluice

/// What the server middleware (SluiceHummingbird, SluiceVapor) asks for a
/// decision: one call of a key that weighs `cost` units, admitted or dropped
/// now. ``Sluice/RateLimiter`` with `String` keys conforms (the local limiter,
/// the default); a limiter shared by a fleet of servers can conform too and
/// plug into the same middleware.
public protocol RateDecider: Sendable {
    /// The rate policy the decisions follow (for the `RateLimit-Policy` header).
    var policy: LimiterPolicy { get }

    /// Decides about one call of `key` that weighs `cost` units, now.
    ///
    /// - Parameters:
    ///   - key: the client's key.
    ///   - cost: units, at least 1.
    /// - Returns: the decision.
    /// - Throws: when no decision can be made (``Sluice/LimiterError/full`` at
    ///   the key cap, ``Sluice/LimiterError/keyTooLong``, a fleet's failure, …).
    func check(_ key: String, cost: Int) async throws -> RateDecision
}

extension RateLimiter: RateDecider where Key == String {}
