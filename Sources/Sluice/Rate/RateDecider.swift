/// Something that decides about rate-limited calls: one call of a key that
/// weighs `cost` units, admitted or dropped now, as a ``RateDecision``.
///
/// ``RateLimiter`` with `String` keys conforms (the local limiter); so does
/// `SluiceFleet`'s `FleetLimiter` with `String` keys (quotas shared by a
/// fleet of servers through Redis). The server middleware (SluiceHummingbird,
/// SluiceVapor, through SluiceHTTP's `RateLimitGate`) takes any
/// `RateDecider`, ``RateLimitHeaders`` formats the decision of any of them
/// the same way, and SluiceMetrics observes any of them.
public protocol RateDecider: Sendable {
    /// The rate policy the decisions follow (for the `RateLimit-Policy` header).
    var policy: LimiterPolicy { get }

    /// Decides about one call of `key` that weighs `cost` units, now.
    ///
    /// A decision the limiter could not make from its quota (a fleet
    /// limiter whose Redis cannot answer) says so in its
    /// ``RateDecision/source``.
    ///
    /// - Parameters:
    ///   - key: the client's key.
    ///   - cost: units, 1 to 10^12.
    /// - Returns: the decision.
    /// - Throws: when no decision can be made: ``LimiterError/outOfRange``
    ///   for a bad cost, ``LimiterError/full`` at the key cap,
    ///   ``LimiterError/keyTooLong``, ``LimiterError/closed``,
    ///   ``LimiterError/cancelled`` (a fleet call whose task was cancelled).
    func check(_ key: String, cost: Int) async throws(LimiterError) -> RateDecision

    /// The decider's counters (for metrics).
    var statistics: LimiterStatistics { get }

    /// Closes the decider: later calls throw ``LimiterError/closed``.
    ///
    /// - Throws: ``LimiterError/closed`` if it was already closed.
    func close() throws(LimiterError)
}

extension RateLimiter: RateDecider where Key == String {}

/// A ``RateDecider`` with a table of plans: each call names the plan of its
/// client, and the decision carries each quota's figures
/// (``RateDecision/quotas``) and the quotas that refused
/// (``RateDecision/refusedQuotas``).
///
/// ``RateLimiter`` with `String` keys conforms (a limiter of one policy has
/// one plan, `"default"`); so does `SluiceFleet`'s `FleetLimiter` with
/// `String` keys made with plans. SluiceHTTP's `RateLimitGate` and the
/// middleware's `plan` option take any of them.
public protocol RatePlanDecider: RateDecider {
    /// The names of the plans, the default (the first) first.
    var planNames: [String] { get }

    /// Decides about one call of `key` under the plan named `plan`, now:
    /// admitted only when every quota of the plan admits it.
    ///
    /// - Parameters:
    ///   - key: the client's key.
    ///   - plan: the plan's name.
    ///   - cost: units, 1 to 10^12.
    /// - Returns: the decision, with each quota's figures.
    /// - Throws: ``LimiterError/unknownPlan``, and what
    ///   ``RateDecider/check(_:cost:)`` throws.
    func check(_ key: String, plan: String, cost: Int) async throws(LimiterError) -> RateDecision
}

extension RateLimiter: RatePlanDecider where Key == String {
    /// The names of ``plans``, the default first.
    public var planNames: [String] { plans.map(\.name) }
}
