/// The HTTP header fields of a rate decision, framework-free: put
/// ``fields`` on the response with whatever HTTP library you use.
///
/// - `Retry-After` (RFC 9110), on a drop only: the wait in whole seconds,
///   rounded up, at least 1. Absent when admitted, and when the call can
///   never be admitted (its cost exceeds the burst: no wait helps).
/// - `RateLimit-Policy` and `RateLimit` (IETF draft-ietf-httpapi-ratelimit-headers),
///   as structured-field strings: `"NAME";q=LIMIT;w=WINDOW` (the policy's
///   limit per its period, in whole seconds, rounded up, at least 1) and
///   `"NAME";r=REMAINING;t=SECONDS` (cost-1 calls still admitted now, and
///   the seconds until the whole burst is back, rounded up; 0 when it is).
///
/// ```swift
/// let limiter = try RateLimiter<String>(limit: 100, per: .seconds(60))
///
/// func respond(to request: Request) throws -> Response {
///     let decision = try limiter.check(request.apiKey)
///     var response = decision.isAdmitted ? handle(request) : Response(status: 429)
///     let headers = RateLimitHeaders(limiter.policy, decision)!   // nil only for a policy other than rate
///     for (name, value) in headers.fields { response.headers.append((name, value)) }
///     return response
/// }
/// ```
public struct RateLimitHeaders: Hashable, Sendable {
    /// The value of `Retry-After`, or `nil` when the field is not sent.
    public var retryAfter: String?
    /// The value of `RateLimit-Policy`.
    public var ratePolicy: String
    /// The value of `RateLimit`.
    public var rateLimit: String

    /// The fields to send, in this order: `Retry-After` (on a drop),
    /// `RateLimit-Policy`, `RateLimit`.
    public var fields: [(name: String, value: String)] {
        var fields: [(name: String, value: String)] = []
        if let retryAfter { fields.append(("Retry-After", retryAfter)) }
        fields.append(("RateLimit-Policy", ratePolicy))
        fields.append(("RateLimit", rateLimit))
        return fields
    }

    /// The header fields of a decision.
    ///
    /// - Parameters:
    ///   - policy: the limiter's policy; `nil` is returned for a policy that
    ///     is not ``LimiterPolicy/rate(limit:per:burst:)``.
    ///   - decision: the decision of ``RateLimiter/check(_:cost:)`` or
    ///     ``Limiter/submit(_:for:cost:)``.
    ///   - name: the policy's name in the structured fields (`"default"` by
    ///     default); `"` and `\` are escaped, other characters outside
    ///     printable ASCII become `?`.
    public init?(_ policy: LimiterPolicy, _ decision: RateDecision, name: String = "default") {
        guard let rate = policy.rateLimit else { return nil }
        let item = Self.string(name)
        ratePolicy = "\(item);q=\(rate.limit);w=\(Self.windowSeconds(rate.per))"
        rateLimit = "\(item);r=\(decision.remaining);t=\(decision.secondsUntilFull)"
        retryAfter = decision.retryAfterSeconds.map(String.init)
    }

    /// The header fields of a quota read before a call (no `Retry-After`).
    ///
    /// - Parameters:
    ///   - policy: the limiter's policy (`nil` is returned when not rate).
    ///   - quota: the quota of ``RateLimiter/quota(for:cost:)`` or ``Limiter/quota(for:cost:)``.
    ///   - name: the policy's name (see ``init(_:_:name:)``).
    public init?(_ policy: LimiterPolicy, _ quota: RateQuota, name: String = "default") {
        guard let rate = policy.rateLimit else { return nil }
        let item = Self.string(name)
        ratePolicy = "\(item);q=\(rate.limit);w=\(Self.windowSeconds(rate.per))"
        rateLimit = "\(item);r=\(quota.remaining);t=\(quota.secondsUntilFull)"
        retryAfter = nil
    }

    /// The header fields of a decision under a plan
    /// (``RateLimiter/check(_:plan:cost:)-(_,String,_)``): one list member per quota of
    /// the plan, in the plan's order, each named by its quota.
    ///
    /// - `RateLimit-Policy`: `"second";q=10;w=1, "hour";q=1000;w=3600`
    ///   (each quota's limit and window in whole seconds, rounded up, at
    ///   least 1).
    /// - `RateLimit`: `"second";r=9;t=1, "hour";r=999;t=4` (each quota's
    ///   remaining cost-1 calls and seconds until its whole burst is back).
    /// - `Retry-After`, on a drop: the overall wait (when every quota would
    ///   admit the call), in whole seconds rounded up, at least 1; absent
    ///   when the call can never be admitted.
    ///
    /// - Parameter decision: a decision with per-quota figures; `nil` is
    ///   returned for one without (a call without a plan: use
    ///   ``init(_:_:name:)-(LimiterPolicy,RateDecision,String)``).
    public init?(_ decision: RateDecision) {
        guard !decision.quotas.isEmpty else { return nil }
        ratePolicy = Self.policyList(decision.quotas)
        rateLimit = Self.limitList(decision.quotas)
        retryAfter = decision.retryAfterSeconds.map(String.init)
    }

    /// The header fields of a quota read under a plan
    /// (``RateLimiter/quota(for:plan:cost:)-(_,String,_)``): as ``init(_:)-(RateDecision)``,
    /// without `Retry-After`.
    ///
    /// - Parameter quota: a read with per-quota figures (`nil` is returned
    ///   for one without).
    public init?(_ quota: RateQuota) {
        guard !quota.quotas.isEmpty else { return nil }
        ratePolicy = Self.policyList(quota.quotas)
        rateLimit = Self.limitList(quota.quotas)
        retryAfter = nil
    }

    /// `RateLimit-Policy` of several quotas: `"NAME";q=LIMIT;w=SECONDS, …`.
    static func policyList(_ quotas: [RateQuotaFigures]) -> String {
        quotas.map { "\(string($0.name));q=\($0.limit);w=\($0.windowSeconds)" }.joined(separator: ", ")
    }

    /// `RateLimit` of several quotas: `"NAME";r=REMAINING;t=SECONDS, …`.
    static func limitList(_ quotas: [RateQuotaFigures]) -> String {
        quotas.map { "\(string($0.name));r=\($0.remaining);t=\($0.secondsUntilFull)" }.joined(separator: ", ")
    }

    /// A period in whole seconds, rounded up, at least 1.
    static func windowSeconds(_ duration: Duration) -> Int {
        let (seconds, attoseconds) = duration.components
        return max(1, Int(seconds) + (attoseconds > 0 ? 1 : 0))
    }

    /// A structured-field string (RFC 9651 sf-string): between double
    /// quotes, `"` and `\` escaped with a backslash, the other printable
    /// ASCII characters (space to `~`) as they are, and any other character
    /// (which an sf-string cannot hold) replaced by `?`.
    static func string(_ text: String) -> String {
        var out = "\""
        for scalar in text.unicodeScalars {
            switch scalar {
            case "\"", "\\": out += "\\" + String(scalar)
            case " "..."~": out.unicodeScalars.append(scalar)
            default: out += "?"
            }
        }
        return out + "\""
    }
}
