#if Vapor
import Sluice
import SluiceHTTP
import Vapor

/// Vapor 4 middleware that applies a rate quota per client key — the same
/// decisions and answers as SluiceHummingbird's (``SluiceHTTP/RateLimitGate``):
///
/// - admitted: the next responder's response, with `RateLimit-Policy` and `RateLimit`;
/// - dropped: `429 Too Many Requests` with `Retry-After`, the same fields and an
///   RFC 9457 problem details body (`application/problem+json`);
/// - shadow mode: decides, counts and adds the fields, but never rejects;
/// - no decision possible (key cap, key over 1024 bytes): 503 (431), or through
///   with ``SluiceHTTP/RateLimitGate/FailureMode/allow``.
///
/// The key is a closure on the request (`nil`: not limited; throwing
/// ``SluiceHTTP/InvalidClientID``: answered `400 Bad Request` with a problem
/// body); ``init(_:clientIDField:forwardedHeaders:policyName:shadow:onFailure:failureObserver:cost:ipv6PrefixLength:)``
/// keys on a client id field (an API key) by the rule of ``SluiceHTTP/ClientID``,
/// else on the client address. The default is the client address: the TCP peer's (`request.remoteAddress`), or — only
/// with ``SluiceHTTP/ForwardedHeaders/trust(_:)`` and a request from a listed
/// proxy — the address in `Forwarded` / `X-Forwarded-For`. (Vapor's own
/// `peerAddress` believes `X-Forwarded-For` from anyone: it is not used.)
///
/// Under a limiter of plans (``Sluice/RateLimiter/init(plans:scheduler:maxKeys:maxQuotas:)``),
/// ``plan(_:)`` names each request's plan: the fields then list every quota
/// of it and a refusal is a `quota-exceeded` problem. ``exempting(_:)``
/// lets some requests through unlimited (health checks, internal callers),
/// ``costs(_:)`` charges by route. The address keys mask an IPv6 client to
/// its /64 (``SluiceHTTP/ClientAddressKey``; `ipv6PrefixLength`).
///
/// ```swift
/// import SluiceNIO
///
/// // On one of the server's own event loops: no thread of Sluice's.
/// let limiter = try RateLimiter<String>(limit: 100, per: .seconds(60), scheduler: .eventLoop(app.eventLoopGroup.next()))
/// app.grouped(RateLimitMiddleware(limiter)).get("api") { _ in "ok" }                // per client address
/// app.grouped(RateLimitMiddleware(limiter, clientIDField: "X-Api-Key")).get("v2") { _ in "ok" }
///                                                                                  // per API key, else address
/// ```
public struct RateLimitMiddleware: AsyncMiddleware {
    /// The key of a request (`nil`: not limited; throwing
    /// ``SluiceHTTP/InvalidClientID``: answered 400).
    public typealias KeyFunction = @Sendable (Request) throws -> String?
    /// The cost of a request, in units of the quota.
    public typealias CostFunction = @Sendable (Request) -> Int
    /// The plan of a request (`nil`: the limiter's first plan, or its one policy).
    public typealias PlanFunction = @Sendable (Request) -> String?
    /// Whether a request goes through unlimited (no decision, no fields).
    public typealias ExemptFunction = @Sendable (Request) -> Bool

    /// The decisions and answers, framework-free.
    public let gate: RateLimitGate
    let key: KeyFunction
    var cost: CostFunction?
    var planOf: PlanFunction?
    var exempt: ExemptFunction?

    /// Middleware keyed by a closure.
    ///
    /// - Parameters:
    ///   - decider: what decides (a `RateLimiter<String>`, or any ``Sluice/RateDecider``).
    ///   - policyName: the name in the `RateLimit*` fields.
    ///   - shadow: decide, count and add headers, but never reject.
    ///   - onFailure: what to answer when no decision can be made.
    ///   - failureObserver: told about each failure to decide.
    ///   - cost: the cost of a request (`nil`: 1).
    ///   - key: the key of a request (`nil`: not limited; throwing
    ///     ``SluiceHTTP/InvalidClientID``: 400).
    public init(
        _ decider: any RateDecider, policyName: String = "default", shadow: Bool = false,
        onFailure: RateLimitGate.FailureMode = .reject,
        failureObserver: (@Sendable (String, any Error) -> Void)? = nil,
        cost: CostFunction? = nil, key: @escaping KeyFunction
    ) {
        gate = RateLimitGate(
            decider, policyName: policyName, shadow: shadow, onFailure: onFailure, failureObserver: failureObserver)
        self.key = key
        self.cost = cost
    }

    /// Middleware keyed by the client address (see the type's description).
    ///
    /// - Parameters:
    ///   - decider: what decides.
    ///   - forwardedHeaders: ``SluiceHTTP/ForwardedHeaders/ignore`` (the default) or the trusted proxies.
    ///   - policyName: the name in the `RateLimit*` fields.
    ///   - shadow: never reject.
    ///   - onFailure: what to answer when no decision can be made.
    ///   - failureObserver: told about each failure to decide.
    ///   - cost: the cost of a request (`nil`: 1).
    ///   - ipv6PrefixLength: the bits of an IPv6 client address keyed on
    ///     (``SluiceHTTP/ClientAddressKey``): 64 by default, 128 for the whole address.
    public init(
        _ decider: any RateDecider, forwardedHeaders: ForwardedHeaders = .ignore, policyName: String = "default",
        shadow: Bool = false, onFailure: RateLimitGate.FailureMode = .reject,
        failureObserver: (@Sendable (String, any Error) -> Void)? = nil, cost: CostFunction? = nil,
        ipv6PrefixLength: Int = ClientAddressKey.defaultIPv6PrefixLength
    ) {
        self.init(
            decider, policyName: policyName, shadow: shadow, onFailure: onFailure, failureObserver: failureObserver,
            cost: cost
        ) { request in
            Self.clientAddress(request, forwardedHeaders).map {
                ClientAddressKey.key($0, ipv6PrefixLength: ipv6PrefixLength)
            }
        }
    }

    /// Middleware keyed by a client id sent in the field `clientIDField` (an
    /// API key, `X-Client-Id`), else — field absent or empty — by the client
    /// address. The id follows the rule of ``SluiceHTTP/ClientID``: a field sent
    /// twice or with anything but visible ASCII is answered 400.
    ///
    /// - Parameters:
    ///   - decider: what decides.
    ///   - clientIDField: the name of the field with the client's id.
    ///   - forwardedHeaders: ``SluiceHTTP/ForwardedHeaders/ignore`` (the default) or the trusted proxies.
    ///   - policyName: the name in the `RateLimit*` fields.
    ///   - shadow: never reject.
    ///   - onFailure: what to answer when no decision can be made.
    ///   - failureObserver: told about each failure to decide.
    ///   - cost: the cost of a request (`nil`: 1).
    ///   - ipv6PrefixLength: the bits of an IPv6 client address keyed on when
    ///     there is no id (``SluiceHTTP/ClientAddressKey``): 64 by default.
    public init(
        _ decider: any RateDecider, clientIDField: String, forwardedHeaders: ForwardedHeaders = .ignore,
        policyName: String = "default", shadow: Bool = false, onFailure: RateLimitGate.FailureMode = .reject,
        failureObserver: (@Sendable (String, any Error) -> Void)? = nil, cost: CostFunction? = nil,
        ipv6PrefixLength: Int = ClientAddressKey.defaultIPv6PrefixLength
    ) {
        self.init(
            decider, policyName: policyName, shadow: shadow, onFailure: onFailure, failureObserver: failureObserver,
            cost: cost
        ) { request in
            try Self.clientID(request, field: clientIDField)
                ?? Self.clientAddress(request, forwardedHeaders).map {
                    ClientAddressKey.key($0, ipv6PrefixLength: ipv6PrefixLength)
                }
        }
    }

    /// This middleware, deciding each request under the plan `plan` names
    /// (a limiter of plans; `nil`: the limiter's first plan,
    /// ``SluiceHTTP/RateLimitGate/firstPlan``). An unknown
    /// plan is a failure to decide (503, or through with
    /// ``SluiceHTTP/RateLimitGate/FailureMode/allow``).
    ///
    /// ```swift
    /// import Vapor
    ///
    /// let limiter = try RateLimiter<String>(plans: [
    ///     RatePlan("free", quotas: [.init("hour", limit: 100, per: .seconds(3600))]),
    ///     RatePlan("pro", quotas: [.init("second", limit: 10, per: .seconds(1)),
    ///                              .init("hour", limit: 10_000, per: .seconds(3600))]),
    /// ])
    /// app.grouped(
    ///     RateLimitMiddleware(limiter, clientIDField: "X-Api-Key")
    ///         .plan { request in request.headers.first(name: "X-Plan") ?? "free" }
    ///         .exempting { request in request.url.path == "/health" }
    /// ).get("api") { _ in "ok" }
    /// ```
    public func plan(_ plan: @escaping PlanFunction) -> Self {
        var copy = self
        copy.planOf = plan
        return copy
    }

    /// This middleware, letting the requests `exempt` says yes to through
    /// unlimited: not counted, no `RateLimit` fields.
    public func exempting(_ exempt: @escaping ExemptFunction) -> Self {
        var copy = self
        copy.exempt = exempt
        return copy
    }

    /// This middleware, charging each request the cost of its path in
    /// `routes` (``SluiceHTTP/RouteCosts``) instead of its cost closure.
    public func costs(_ routes: RouteCosts) -> Self {
        var copy = self
        copy.cost = { request in routes.cost(path: request.url.path) }
        return copy
    }

    /// The client id in the field `name` by the rule of ``SluiceHTTP/ClientID``
    /// (every occurrence of the field is looked at: sent twice, it is refused).
    ///
    /// - Returns: the id, or `nil` when the field is absent or empty.
    /// - Throws: ``SluiceHTTP/InvalidClientID`` (answered 400 when thrown by a key closure).
    public static func clientID(_ request: Request, field name: String) throws(InvalidClientID) -> String? {
        try ClientID.parse(request.headers[name], field: name)
    }

    /// The key of ``init(_:clientIDField:forwardedHeaders:policyName:shadow:onFailure:failureObserver:cost:ipv6PrefixLength:)``
    /// without its mask: the id in `clientIDField`, else the client address.
    public static func clientKey(
        _ request: Request, clientIDField: String, _ forwardedHeaders: ForwardedHeaders = .ignore
    ) throws(InvalidClientID) -> String? {
        try clientID(request, field: clientIDField) ?? clientAddress(request, forwardedHeaders)
    }

    /// The client address of a request, unmasked (see the type's description).
    public static func clientAddress(_ request: Request, _ forwardedHeaders: ForwardedHeaders) -> String? {
        let peer = request.remoteAddress?.ipAddress
        guard case .trust = forwardedHeaders else { return peer }
        return forwardedHeaders.clientAddress(
            peer: peer, forwarded: request.headers["Forwarded"], xForwardedFor: request.headers["X-Forwarded-For"])
    }

    /// Decides about `request` (see ``RateLimitMiddleware``): exempt, not
    /// keyed, admitted (the next responder's response with the fields) or
    /// refused (the gate's rejection).
    public func respond(to request: Request, chainingTo next: any AsyncResponder) async throws -> Response {
        if let exempt, exempt(request) { return try await next.respond(to: request) }
        let key: String?
        do {
            key = try self.key(request)
        } catch let error as InvalidClientID {
            return Self.response(error.rejection, fields: [])
        }
        guard let key else { return try await next.respond(to: request) }
        let units = cost?(request) ?? 1
        let verdict: RateLimitGate.Verdict
        if let planOf, let plan = planOf(request) ?? gate.firstPlan {
            verdict = await gate.evaluate(key: key, plan: plan, cost: units)
        } else {
            verdict = await gate.evaluate(key: key, cost: units)
        }
        if let rejection = verdict.rejection {
            return Self.response(rejection, fields: verdict.headers)
        }
        let response: Response
        do {
            response = try await next.respond(to: request)
        } catch {
            // The answer ErrorMiddleware makes of the error carries the fields too.
            throw Self.addingFields(verdict, to: error, environment: request.application.environment)
        }
        if let value = verdict.ratePolicy { response.headers.replaceOrAdd(name: "RateLimit-Policy", value: value) }
        if let value = verdict.rateLimit { response.headers.replaceOrAdd(name: "RateLimit", value: value) }
        return response
    }

    /// The answer of a rejection: its status, `fields`, its media type and body.
    static func response(_ rejection: RateLimitGate.Rejection, fields: [(name: String, value: String)]) -> Response {
        var headers = HTTPHeaders()
        for (name, value) in fields { headers.add(name: name, value: value) }
        headers.add(name: .contentType, value: rejection.contentType)
        return Response(
            status: HTTPResponseStatus(statusCode: rejection.status), headers: headers,
            body: .init(string: rejection.body))
    }

    /// `error`, made to answer with the verdict's fields too: an `Abort` with the
    /// fields in its `headers` (its type kept), any other error wrapped in a
    /// ``RateLimitFieldsError``.
    static func addingFields(
        _ verdict: RateLimitGate.Verdict, to error: any Error, environment: Environment
    ) -> any Error {
        guard verdict.ratePolicy != nil || verdict.rateLimit != nil else { return error }
        if var abort = error as? Abort {
            if let value = verdict.ratePolicy { abort.headers.replaceOrAdd(name: "RateLimit-Policy", value: value) }
            if let value = verdict.rateLimit { abort.headers.replaceOrAdd(name: "RateLimit", value: value) }
            return abort
        }
        return RateLimitFieldsError(error, verdict: verdict, environment: environment)
    }
}

/// An error thrown by the responder after ``RateLimitMiddleware``, with
/// the rate-limit fields that the answer made of it must carry.
///
/// It is an `AbortError` with the underlying error's status, reason and headers
/// when that is an `AbortError`; otherwise 500 with the reason Vapor's default
/// `ErrorMiddleware` would give (a `DebuggableError`'s reason; else "Something
/// went wrong." in release, the error's description otherwise). In both cases
/// `RateLimit-Policy` and `RateLimit` are added to ``headers``. (An `Abort` is not
/// wrapped: the fields are added to its own `headers`.)
public struct RateLimitFieldsError: AbortError, CustomStringConvertible {
    /// The error the responder threw.
    public let underlying: any Error
    /// The status of the answer.
    public let status: HTTPResponseStatus
    /// The reason in the answer's body.
    public let reason: String
    /// The underlying error's headers with `RateLimit-Policy` and `RateLimit`.
    public let headers: HTTPHeaders

    /// Wraps `underlying`.
    ///
    /// - Parameters:
    ///   - underlying: the error thrown by the next responder.
    ///   - verdict: the decision whose fields the answer carries.
    ///   - environment: the application's (release: a 500's reason is not shown).
    public init(_ underlying: any Error, verdict: RateLimitGate.Verdict, environment: Environment) {
        self.underlying = underlying
        var headers: HTTPHeaders
        if let abort = underlying as? any AbortError {
            (status, reason, headers) = (abort.status, abort.reason, abort.headers)
        } else if let debuggable = underlying as? any DebuggableError {
            (status, reason, headers) = (.internalServerError, debuggable.reason, [:])
        } else {
            status = .internalServerError
            reason = environment.isRelease ? "Something went wrong." : String(describing: underlying)
            headers = [:]
        }
        if let value = verdict.ratePolicy { headers.replaceOrAdd(name: "RateLimit-Policy", value: value) }
        if let value = verdict.rateLimit { headers.replaceOrAdd(name: "RateLimit", value: value) }
        self.headers = headers
    }

    /// The underlying error's description (for logs).
    public var description: String { String(describing: underlying) }
}
#endif
