import Sluice

/// The framework-free part of the rate-limit middleware: asks a
/// ``RateDecider`` about a request and says what to answer — the headers for
/// every response, and, on a drop, a 429 with `Retry-After` and a problem
/// details body (RFC 9457, `application/problem+json`).
///
/// The Hummingbird and Vapor middleware are thin adapters over this type.
///
/// A fleet limiter whose Redis cannot decide answers by its failure policy;
/// such a decision is never presented as quota. It is reported to
/// ``failureObserver`` with its cause, and answered as the fleet decided:
/// failing open lets the request through without `RateLimit` fields (no
/// quota was read), failing closed answers 503 (not 429) with the fleet's
/// `Retry-After` and a problem body. A decision of the fleet's local
/// fallback limiter is a real (per-server) quota: answered like any other,
/// and reported too.
public struct RateLimitGate: Sendable {
    /// What to do when the decider cannot decide (the key cap is reached,
    /// the key is too long, a fleet is unreachable, …).
    public enum FailureMode: Sendable, Hashable {
        /// Answer 503 (431 for a key over the limiter's key size), with a
        /// problem details body.
        case reject
        /// Let the request through without rate-limit headers.
        case allow
    }

    /// The decider (a ``Sluice/RateLimiter`` by default in the adapters).
    public let decider: any RateDecider
    /// The policy's name in `RateLimit-Policy` and `RateLimit`.
    public var policyName: String
    /// Shadow mode: decide, count and add `RateLimit-Policy` and `RateLimit`,
    /// but never reject (and send no `Retry-After`).
    public var shadow: Bool
    /// What to do when no decision can be made.
    public var onFailure: FailureMode
    /// Called for every failure to decide (for a log line; see
    /// SluiceMetrics), and for every decision a fleet limiter made without
    /// Redis (with its cause).
    public var failureObserver: (@Sendable (_ key: String, _ error: any Error) -> Void)?
    /// The `RateLimit-Policy` value (the same for every answer: made once), or
    /// `nil` when the decider's policy is not a rate policy.
    public let ratePolicyValue: String?
    /// The start of every `RateLimit` value, `"NAME";r=`, as UTF-8.
    let rateLimitPrefix: [UInt8]
    /// The decider when it is the local limiter: asked directly (a synchronous
    /// call, no existential async call per request).
    let local: RateLimiter<String>?

    /// A gate.
    ///
    /// - Parameters:
    ///   - decider: what decides.
    ///   - policyName: the name in the `RateLimit*` fields (`"default"`).
    ///   - shadow: never reject (decisions are still made and counted, headers added).
    ///   - onFailure: ``FailureMode/reject`` by default.
    ///   - failureObserver: told about every failure to decide.
    public init(
        _ decider: any RateDecider, policyName: String = "default", shadow: Bool = false,
        onFailure: FailureMode = .reject,
        failureObserver: (@Sendable (_ key: String, _ error: any Error) -> Void)? = nil
    ) {
        self.decider = decider
        self.policyName = policyName
        self.shadow = shadow
        self.onFailure = onFailure
        self.failureObserver = failureObserver
        // RateLimitHeaders formats the fields; a quota read gives the policy's once.
        let fields = RateLimitHeaders(
            decider.policy,
            RateQuota(
                at: LimiterInstant(nanoseconds: 0), burst: 1, remaining: 1, fullAt: LimiterInstant(nanoseconds: 0),
                retryAt: nil), name: policyName)
        ratePolicyValue = fields?.ratePolicy
        // "NAME";r=1;t=0 -> "NAME";r=
        rateLimitPrefix =
            fields.map { fields in
                let value = fields.rateLimit
                let head = value[..<value.lastIndex(of: ";")!]
                return Array(head[..<head.lastIndex(of: ";")!].utf8) + Array(";r=".utf8)
            } ?? []
        local = decider as? RateLimiter<String>
    }

    /// What to do with one request.
    public struct Verdict: Sendable {
        /// The decision (`nil` when none could be made).
        public var decision: RateDecision?
        /// `Retry-After` (on a drop; never in shadow mode), or `nil`.
        public var retryAfter: String?
        /// `RateLimit-Policy`, or `nil` (no decision, or not a rate policy).
        public var ratePolicy: String?
        /// `RateLimit`, or `nil`.
        public var rateLimit: String?
        /// Header fields to put on the response, whatever it is, in this order:
        /// `Retry-After`, `RateLimit-Policy`, `RateLimit`.
        public var headers: [(name: String, value: String)] {
            var fields: [(name: String, value: String)] = []
            if let retryAfter { fields.append(("Retry-After", retryAfter)) }
            if let ratePolicy { fields.append(("RateLimit-Policy", ratePolicy)) }
            if let rateLimit { fields.append(("RateLimit", rateLimit)) }
            return fields
        }
        /// When set, answer this instead of handling the request.
        public var rejection: Rejection?
    }

    /// An answer that replaces the handler's.
    public struct Rejection: Sendable {
        /// 429, 431 or 503.
        public var status: Int
        /// The problem details body (UTF-8 JSON).
        public var body: String
        /// Its media type, `application/problem+json`.
        public var contentType: String { "application/problem+json" }
    }

    /// Decides about a request of `key` weighing `cost`.
    ///
    /// - Parameters:
    ///   - key: the client's key.
    ///   - cost: units (1 by default; below 1 counts as 1).
    /// - Returns: what to answer.
    public func evaluate(key: String, cost: Int = 1) async -> Verdict {
        let decision: RateDecision
        do {
            if let local {
                decision = try local.check(key, cost: max(1, cost))
            } else {
                decision = try await decider.check(key, cost: max(1, cost))
            }
        } catch {
            return failed(key: key, error: error)
        }
        switch decision.source {
        case .limiter, .cache:
            return verdict(decision)
        case let .fallback(cause):
            failureObserver?(key, cause)
            return verdict(decision)
        case let .failurePolicy(cause):
            failureObserver?(key, cause)
            return undecided(decision)
        }
    }

    /// Decides about a request of `key` under the plan named `plan` (a
    /// limiter of plans, ``Sluice/RateLimiter/init(plans:scheduler:maxKeys:maxQuotas:)``):
    /// the fields list every quota of the plan (``Sluice/RateLimitHeaders/init(_:)-(RateDecision)``),
    /// and a drop is answered 429 with the draft's `quota-exceeded` problem
    /// naming the quotas that refused (``quotaExceededProblem(detail:violatedPolicies:)``).
    ///
    /// Plans need a decider of plans (``Sluice/RatePlanDecider``: the local
    /// limiter, or a fleet limiter made with plans): with another, no
    /// decision is made, and the failure is handled as ``onFailure`` says
    /// (so is an unknown plan, ``Sluice/LimiterError/unknownPlan``). A fleet
    /// decision made by its failure policy is answered as
    /// ``evaluate(key:cost:)`` answers one.
    ///
    /// - Parameters:
    ///   - key: the client's key.
    ///   - plan: the name of the client's plan.
    ///   - cost: units (1 by default; below 1 counts as 1).
    /// - Returns: what to answer.
    public func evaluate(key: String, plan: String, cost: Int = 1) async -> Verdict {
        let decision: RateDecision
        do {
            if let local {
                decision = try local.check(key, plan: plan, cost: max(1, cost))
            } else if let plans = decider as? any RatePlanDecider {
                decision = try await plans.check(key, plan: plan, cost: max(1, cost))
            } else {
                throw LimiterError(
                    .invalidArgument,
                    reason: "Plans need a RatePlanDecider (a RateLimiter<String>, or a FleetLimiter<String> made "
                        + "with plans); this gate's decider is \(type(of: decider)).")
            }
        } catch {
            return failed(key: key, error: error)
        }
        switch decision.source {
        case .limiter, .cache:
            return planVerdict(decision)
        case let .fallback(cause):
            failureObserver?(key, cause)
            return planVerdict(decision)
        case let .failurePolicy(cause):
            failureObserver?(key, cause)
            return undecided(decision)
        }
    }

    /// The plan a request names none of is decided under: the decider's
    /// first plan (`"default"` for a local limiter of one policy), or `nil`
    /// with a decider without plans. The middleware's `plan` closures fall
    /// back on it, so that the fields list that plan's quotas.
    public var firstPlan: String? {
        if let local { return local.plans.first?.name }
        return (decider as? any RatePlanDecider)?.planNames.first
    }

    /// The verdict of a decision under a plan.
    func planVerdict(_ decision: RateDecision) -> Verdict {
        var verdict = Verdict(decision: decision, rejection: nil)
        if let fields = RateLimitHeaders(decision) {
            verdict.ratePolicy = fields.ratePolicy
            verdict.rateLimit = fields.rateLimit
            if !shadow { verdict.retryAfter = fields.retryAfter }
        }
        guard !decision.isAdmitted, !shadow else { return verdict }
        let refused = decision.refusedQuotas
        let names = refused.map { "'\($0)'" }.joined(separator: ", ")
        let quotas = "quota\(refused.count == 1 ? "" : "s") \(names)"
        let detail: String
        if let seconds = decision.retryAfterSeconds {
            detail =
                "The rate limit for this client is reached (\(quotas)); retry after \(seconds) second\(seconds == 1 ? "" : "s")."
        } else {
            detail =
                "The request costs more than \(quotas) admit\(refused.count == 1 ? "s" : "") at once; it can never be admitted."
        }
        verdict.rejection = Rejection(
            status: 429, body: Self.quotaExceededProblem(detail: detail, violatedPolicies: refused))
        return verdict
    }

    /// The `type` of the `quota-exceeded` problem
    /// (draft-ietf-httpapi-ratelimit-headers, "Problem Types").
    public static let quotaExceededType = "https://iana.org/assignments/http-problem-types#quota-exceeded"

    /// A `quota-exceeded` problem details object (RFC 9457 and
    /// draft-ietf-httpapi-ratelimit-headers): status 429, and the
    /// `violated-policies` member, the names of the quotas that refused the
    /// request (as in `RateLimit-Policy`).
    ///
    /// ```swift
    /// let body = RateLimitGate.quotaExceededProblem(detail: "Retry after 2 seconds.", violatedPolicies: ["second"])
    /// // {"type":"https://iana.org/assignments/http-problem-types#quota-exceeded",
    /// //  "title":"Request cannot be satisfied as assigned quota has been exceeded",
    /// //  "status":429,"detail":"Retry after 2 seconds.","violated-policies":["second"]}
    /// ```
    ///
    /// - Parameters:
    ///   - detail: a sentence for the client.
    ///   - violatedPolicies: the names of the quotas that refused.
    /// - Returns: the JSON text (UTF-8; `application/problem+json`).
    public static func quotaExceededProblem(detail: String, violatedPolicies: [String]) -> String {
        let policies = violatedPolicies.map(json).joined(separator: ",")
        return "{\"type\":\(json(quotaExceededType)),"
            + "\"title\":\"Request cannot be satisfied as assigned quota has been exceeded\","
            + "\"status\":429,\"detail\":\(json(detail)),\"violated-policies\":[\(policies)]}"
    }

    /// The verdict of a decision made by a fleet's failure policy: no quota
    /// was read, so no `RateLimit` fields; admitted (fail open) goes
    /// through, dropped (fail closed) is a 503 with the fleet's retry.
    func undecided(_ decision: RateDecision) -> Verdict {
        if decision.isAdmitted || shadow { return Verdict(decision: decision, rejection: nil) }
        let seconds = decision.retryAfterSeconds ?? 1
        return Verdict(
            decision: decision, retryAfter: String(seconds),
            rejection: Rejection(
                status: 503,
                body: Self.problem(
                    status: 503, title: "Service Unavailable",
                    detail:
                        "The rate limiter cannot reach its shared store; retry after \(seconds) second\(seconds == 1 ? "" : "s")."
                )))
    }

    /// The verdict when no decision could be made.
    func failed(key: String, error: any Error) -> Verdict {
        failureObserver?(key, error)
        do {
            if shadow || onFailure == .allow { return Verdict(decision: nil, rejection: nil) }
            if let error = error as? LimiterError, error == .keyTooLong {
                return Verdict(
                    decision: nil,
                    rejection: Rejection(
                        status: 431,
                        body: Self.problem(
                            status: 431, title: "Request Header Fields Too Large",
                            detail: "The client key is longer than the rate limiter accepts.")))
            }
            return Verdict(
                decision: nil, retryAfter: "1",
                rejection: Rejection(
                    status: 503,
                    body: Self.problem(
                        status: 503, title: "Service Unavailable",
                        detail: "The rate limiter cannot take this client now; retry later.")))
        }
    }

    /// The verdict of a decision.
    func verdict(_ decision: RateDecision) -> Verdict {
        // The fields of RateLimitHeaders, the policy's made once (see init).
        var verdict = Verdict(decision: decision, rejection: nil)
        if let ratePolicyValue {
            verdict.ratePolicy = ratePolicyValue
            verdict.rateLimit = rateLimitValue(remaining: decision.remaining, seconds: decision.secondsUntilFull)
            // In shadow mode the request goes through: no Retry-After on its answer.
            if !shadow, let seconds = decision.retryAfterSeconds { verdict.retryAfter = String(seconds) }
        }
        guard !decision.isAdmitted, !shadow else {
            return verdict
        }
        let detail: String
        if let seconds = decision.retryAfterSeconds {
            detail =
                "The rate limit for this client is reached; retry after \(seconds) second\(seconds == 1 ? "" : "s")."
        } else {
            detail = "The request costs more than the rate limit admits at once; it can never be admitted."
        }
        verdict.rejection = Rejection(
            status: 429, body: Self.problem(status: 429, title: "Too Many Requests", detail: detail))
        return verdict
    }

    /// `"NAME";r=REMAINING;t=SECONDS`, written into one new string (no
    /// interpolation, no intermediate strings).
    func rateLimitValue(remaining: Int, seconds: Int) -> String {
        let prefix = rateLimitPrefix
        return String(unsafeUninitializedCapacity: prefix.count + 2 * 20 + 3) { buffer in
            var at = 0
            for byte in prefix {
                buffer[at] = byte
                at += 1
            }
            at = Self.writeDecimal(remaining, into: buffer, at: at)
            for byte in ";t=".utf8 {
                buffer[at] = byte
                at += 1
            }
            return Self.writeDecimal(seconds, into: buffer, at: at)
        }
    }

    /// Writes `value` (negative values as 0) in decimal at `at`; returns the end.
    static func writeDecimal(_ value: Int, into buffer: UnsafeMutableBufferPointer<UInt8>, at start: Int) -> Int {
        var value = UInt64(max(0, value))
        var digits: (UInt64, UInt64, UInt64) = (0, 0, 0)  // 24 bytes: up to 20 digits, written backwards
        var count = 0
        withUnsafeMutableBytes(of: &digits) { scratch in
            repeat {
                scratch[23 - count] = UInt8(truncatingIfNeeded: 48 + value % 10)
                value /= 10
                count += 1
            } while value != 0
            for i in 0..<count { buffer[start + i] = scratch[24 - count + i] }
        }
        return start + count
    }

    /// An RFC 9457 problem details object (`type` is `about:blank`: the
    /// status code says it all).
    public static func problem(status: Int, title: String, detail: String) -> String {
        "{\"type\":\"about:blank\",\"title\":\(json(title)),\"status\":\(status),\"detail\":\(json(detail))}"
    }

    /// A JSON string literal.
    static func json(_ text: String) -> String {
        var out = "\""
        for scalar in text.unicodeScalars {
            switch scalar {
            case "\"": out += "\\\""
            case "\\": out += "\\\\"
            case "\n": out += "\\n"
            case "\r": out += "\\r"
            case "\t": out += "\\t"
            case _ where scalar.value < 0x20:
                let hex = String(scalar.value, radix: 16)
                out += "\\u" + String(repeating: "0", count: 4 - hex.count) + hex
            default: out.unicodeScalars.append(scalar)
            }
        }
        return out + "\""
    }
}
