#if Hummingbird
import HTTPTypes
import Hummingbird
import NIOCore
import NIOHTTP1
import Sluice
import SluiceHTTP

/// Hummingbird 2 middleware that applies a rate quota per client key.
///
/// For each request it takes a key (a closure on the request: an API key
/// header, the user, a route parameter; the client address by default) and
/// a cost (1 unless configured), asks the ``Sluice/RateDecider`` — a
/// ``Sluice/RateLimiter`` by default, on the local machine — and:
///
/// - admitted: calls the next responder and adds `RateLimit-Policy` and
///   `RateLimit` to its response;
/// - dropped: answers `429 Too Many Requests` with `Retry-After`, the same
///   two fields and an RFC 9457 problem details body
///   (`application/problem+json`: `type`, `title`, `status`, `detail`);
/// - in shadow mode, decides, counts and adds the fields, but never rejects;
/// - when no decision can be made (the limiter's key cap, a key over 1024
///   bytes): 503 (431 for the key), or lets the request through with
///   ``SluiceHTTP/RateLimitGate/FailureMode/allow``.
///
/// Under a limiter of plans (``Sluice/RateLimiter/init(plans:scheduler:maxKeys:maxQuotas:)``),
/// ``plan(_:)`` names each request's plan: the fields then list every quota
/// of it and a refusal is a `quota-exceeded` problem. ``exempting(_:)``
/// lets some requests through unlimited (health checks, internal callers),
/// ``costs(_:)`` charges by route. The address keys mask an IPv6 client to
/// its /64 (``SluiceHTTP/ClientAddressKey``; `ipv6PrefixLength`).
///
/// A request whose key closure returns `nil` is not limited; one that throws
/// ``SluiceHTTP/InvalidClientID`` is answered `400 Bad Request` with a problem
/// body. Keying by the client address needs a context that knows it
/// (`RemoteAddressRequestContext`): ``ClientAddressContext`` is one, ready to
/// use. A key closure works with any context.
///
/// ```swift
/// import Hummingbird
/// import SluiceNIO
///
/// let router = Router(context: ClientAddressContext.self)
/// let limiter = try RateLimiter<String>(
///     limit: 100, per: .seconds(60),
///     scheduler: .eventLoop(EventLoopGroupProvider.singleton.eventLoopGroup.next()))  // the server's loops
/// router.add(middleware: RateLimitMiddleware(limiter))                 // per client address
/// router.add(middleware: RateLimitMiddleware(limiter, clientIDField: "X-Api-Key"))
///                                                                      // per API key, else per address
/// router.add(middleware: RateLimitMiddleware(limiter) { request, _ in
///     request.headers[.authorization]                                   // any key of your own
/// })
/// ```
public struct RateLimitMiddleware<Context: RequestContext>: RouterMiddleware {
    /// The key of a request (`nil`: not limited; throwing
    /// ``SluiceHTTP/InvalidClientID``: answered 400).
    public typealias KeyFunction = @Sendable (Request, Context) throws -> String?
    /// The cost of a request, in units of the quota.
    public typealias CostFunction = @Sendable (Request, Context) -> Int
    /// The plan of a request (`nil`: the limiter's first plan, or its one policy).
    public typealias PlanFunction = @Sendable (Request, Context) -> String?
    /// Whether a request goes through unlimited (no decision, no fields).
    public typealias ExemptFunction = @Sendable (Request, Context) -> Bool

    /// The decisions and answers, framework-free.
    public let gate: RateLimitGate
    @usableFromInline let key: KeyFunction
    @usableFromInline var cost: CostFunction?
    @usableFromInline var planOf: PlanFunction?
    @usableFromInline var exempt: ExemptFunction?
    /// The `RateLimit-Policy` field, the same on every answer: made (and
    /// validated) once.
    @usableFromInline let policyField: HTTPField?

    /// Middleware keyed by a closure.
    ///
    /// - Parameters:
    ///   - decider: what decides (a `RateLimiter<String>`, or any ``Sluice/RateDecider``).
    ///   - policyName: the name in the `RateLimit*` fields.
    ///   - shadow: decide, count and add headers, but never reject.
    ///   - onFailure: what to answer when no decision can be made.
    ///   - failureObserver: told about each failure to decide (a log line).
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
        policyField = gate.ratePolicyValue.map { HTTPField(name: .rateLimitPolicy, value: $0) }
    }

    /// This middleware, deciding each request under the plan `plan` names
    /// (a limiter of plans; `nil`: the limiter's first plan,
    /// ``SluiceHTTP/RateLimitGate/firstPlan``). An unknown
    /// plan is a failure to decide (503, or through with
    /// ``SluiceHTTP/RateLimitGate/FailureMode/allow``).
    ///
    /// ```swift
    /// import Hummingbird
    ///
    /// let limiter = try RateLimiter<String>(plans: [
    ///     RatePlan("free", quotas: [.init("hour", limit: 100, per: .seconds(3600))]),
    ///     RatePlan("pro", quotas: [.init("second", limit: 10, per: .seconds(1)),
    ///                              .init("hour", limit: 10_000, per: .seconds(3600))]),
    /// ])
    /// let planOfKey = ["key-of-a-pro": "pro"]  // your accounts
    /// let router = Router()
    /// router.add(
    ///     middleware: RateLimitMiddleware<BasicRequestContext>(limiter) { request, _ in
    ///         request.headers[.authorization]
    ///     }
    ///     .plan { request, _ in request.headers[.authorization].flatMap { planOfKey[$0] } }  // nil: "free"
    ///     .exempting { request, _ in request.uri.path == "/health" })
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
        copy.cost = { request, _ in routes.cost(path: request.uri.path) }
        return copy
    }

    // @inlinable: specialized for the application's Context in its module
    // (no generic metadata look-ups per request).
    /// Decides about `request` (see ``RateLimitMiddleware``): exempt, not
    /// keyed, admitted (the next responder's response with the fields) or
    /// refused (the gate's rejection).
    @inlinable
    public func handle(
        _ request: Request, context: Context, next: (Request, Context) async throws -> Response
    ) async throws -> Response {
        if let exempt, exempt(request, context) { return try await next(request, context) }
        let key: String?
        do {
            key = try self.key(request, context)
        } catch let error as InvalidClientID {
            return Self.response(error.rejection, fields: HTTPFields())
        }
        guard let key else { return try await next(request, context) }
        let units = cost?(request, context) ?? 1
        let verdict: RateLimitGate.Verdict
        if let planOf, let plan = planOf(request, context) ?? gate.firstPlan {
            verdict = await gate.evaluate(key: key, plan: plan, cost: units)
        } else {
            verdict = await gate.evaluate(key: key, cost: units)
        }
        if let rejection = verdict.rejection {
            return Self.response(rejection, fields: fields(verdict))
        }
        var response: Response
        do {
            response = try await next(request, context)
        } catch {
            // The answer the framework makes of the error carries the fields too.
            throw Self.addingFields(fields(verdict), to: error)
        }
        // Straight into the response's fields (no HTTPFields of our own to copy).
        if let value = verdict.retryAfter { response.headers.append(HTTPField(name: .retryAfter, value: value)) }
        if let field = policyField(verdict) { response.headers.append(field) }
        if let value = verdict.rateLimit { response.headers.append(HTTPField(name: .rateLimit, value: value)) }
        return response
    }

    /// The answer of a rejection: its status, `fields`, its media type and body.
    @usableFromInline
    static func response(_ rejection: RateLimitGate.Rejection, fields: HTTPFields) -> Response {
        var fields = fields
        fields.append(HTTPField(name: .contentType, value: rejection.contentType))
        return Response(
            status: HTTPResponse.Status(code: rejection.status), headers: fields,
            body: ResponseBody(byteBuffer: ByteBuffer(string: rejection.body)))
    }

    /// The client id in the field `name` by the rule of ``SluiceHTTP/ClientID``
    /// (every occurrence of the field is looked at: sent twice, it is refused).
    ///
    /// - Returns: the id, or `nil` when the field is absent or empty.
    /// - Throws: ``SluiceHTTP/InvalidClientID`` (answered 400 when thrown by a key closure).
    public static func clientID(_ request: Request, field name: HTTPField.Name) throws(InvalidClientID) -> String? {
        try ClientID.parse(request.headers[values: name], field: name.rawName)
    }

    /// The verdict's fields: `Retry-After`, `RateLimit-Policy`, `RateLimit` (those it has).
    @usableFromInline
    func fields(_ verdict: RateLimitGate.Verdict) -> HTTPFields {
        var fields = HTTPFields()
        if let value = verdict.retryAfter { fields.append(HTTPField(name: .retryAfter, value: value)) }
        if let field = policyField(verdict) { fields.append(field) }
        if let value = verdict.rateLimit { fields.append(HTTPField(name: .rateLimit, value: value)) }
        return fields
    }

    /// The verdict's `RateLimit-Policy`: the one made at init, or a plan's
    /// own list of quotas.
    @usableFromInline
    func policyField(_ verdict: RateLimitGate.Verdict) -> HTTPField? {
        guard let value = verdict.ratePolicy else { return nil }
        if let policyField, value == policyField.value { return policyField }
        return HTTPField(name: .rateLimitPolicy, value: value)
    }

    /// `error`, made to answer with `fields` too: an `HTTPError` with the fields
    /// added to its own (its type kept), `NIOHTTP1.HTTPParserError` unchanged (the
    /// server closes the connection: there is no answer), any other error wrapped
    /// in a ``RateLimitFieldsError``.
    @usableFromInline
    static func addingFields(_ fields: HTTPFields, to error: any Error) -> any Error {
        if fields.isEmpty || error is HTTPParserError { return error }
        if var httpError = error as? HTTPError {
            httpError.headers.append(contentsOf: fields)
            return httpError
        }
        return RateLimitFieldsError(error, fields: fields)
    }
}

/// An error thrown by the responder after ``RateLimitMiddleware``, with the
/// rate-limit fields that the answer made of it must carry.
///
/// Its answer is the underlying error's (an `HTTPResponseError`'s own response)
/// with the fields added; for any other error, `500 Internal Server Error` with
/// no body, as Hummingbird answers an error it does not know, and the fields.
/// (An `HTTPError` is not wrapped: the fields are added to its `headers`.)
public struct RateLimitFieldsError: HTTPResponseError, CustomStringConvertible {
    /// The error the responder threw.
    public let underlying: any Error
    /// The fields added to its answer (`RateLimit-Policy`, `RateLimit`).
    public let fields: HTTPFields

    /// Wraps `underlying`.
    ///
    /// - Parameters:
    ///   - underlying: the error thrown by the next responder.
    ///   - fields: the fields its answer carries besides its own.
    public init(_ underlying: any Error, fields: HTTPFields) {
        self.underlying = underlying
        self.fields = fields
    }

    /// The underlying error's status, or 500.
    public var status: HTTPResponse.Status {
        (underlying as? any HTTPResponseError)?.status ?? .internalServerError
    }

    /// The underlying error's answer (or a bare 500) with ``fields`` added.
    public func response(from request: Request, context: some RequestContext) throws -> Response {
        var response: Response
        if let error = underlying as? any HTTPResponseError {
            response = try error.response(from: request, context: context)
        } else {
            response = Response(status: .internalServerError, body: .init())
        }
        response.headers.append(contentsOf: fields)
        return response
    }

    /// The underlying error's description (for logs).
    public var description: String { String(describing: underlying) }
}

extension RateLimitMiddleware where Context: RemoteAddressRequestContext {
    /// Middleware keyed by the client address: the TCP peer's, or — only
    /// with ``SluiceHTTP/ForwardedHeaders/trust(_:)`` and a request from a
    /// listed proxy — the address the proxies put in `Forwarded` or
    /// `X-Forwarded-For`. A request with no known address is not limited.
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
        ) { request, context in
            Self.clientAddress(request, context, forwardedHeaders)
                .map { ClientAddressKey.key($0, ipv6PrefixLength: ipv6PrefixLength) }
        }
    }

    /// Middleware keyed by a client id sent in the field `clientIDField` (an
    /// API key, `X-Client-Id`), else — field absent or empty — by the client
    /// address. The id follows the rule of ``SluiceHTTP/ClientID``: a field sent
    /// twice or with anything but visible ASCII is answered 400.
    ///
    /// - Parameters:
    ///   - decider: what decides.
    ///   - clientIDField: the name of the field with the client's id (a valid
    ///     field name: an invalid one is a programming error and traps).
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
        guard let clientIDField = HTTPField.Name(clientIDField) else {
            preconditionFailure("not a valid header field name: \(clientIDField)")
        }
        self.init(
            decider, policyName: policyName, shadow: shadow, onFailure: onFailure, failureObserver: failureObserver,
            cost: cost
        ) { request, context in
            try Self.clientID(request, field: clientIDField)
                ?? Self.clientAddress(request, context, forwardedHeaders).map {
                    ClientAddressKey.key($0, ipv6PrefixLength: ipv6PrefixLength)
                }
        }
    }

    /// The key of ``init(_:clientIDField:forwardedHeaders:policyName:shadow:onFailure:failureObserver:cost:ipv6PrefixLength:)``
    /// without its mask: the id in `clientIDField`, else the client address.
    public static func clientKey(
        _ request: Request, _ context: Context, clientIDField: HTTPField.Name,
        _ forwardedHeaders: ForwardedHeaders = .ignore
    ) throws(InvalidClientID) -> String? {
        try clientID(request, field: clientIDField) ?? clientAddress(request, context, forwardedHeaders)
    }

    /// The client address of a request, unmasked (see ``init(_:forwardedHeaders:policyName:shadow:onFailure:failureObserver:cost:ipv6PrefixLength:)``).
    public static func clientAddress(
        _ request: Request, _ context: Context, _ forwardedHeaders: ForwardedHeaders
    ) -> String? {
        let peer = context.remoteAddress?.ipAddress
        guard case .trust = forwardedHeaders else { return peer }
        return forwardedHeaders.clientAddress(
            peer: peer, forwarded: request.headers[values: .forwarded],
            xForwardedFor: request.headers[values: .xForwardedFor])
    }
}

/// A request context that knows the client's address (the TCP peer's): what
/// ``RateLimitMiddleware`` needs to key requests by client address.
///
/// ```swift
/// import Hummingbird
///
/// let router = Router(context: ClientAddressContext.self)
/// ```
public struct ClientAddressContext: RequestContext, RemoteAddressRequestContext {
    /// Hummingbird's storage of the context.
    public var coreContext: CoreRequestContextStorage
    /// The TCP peer's address (`nil` when unknown).
    public let remoteAddress: SocketAddress?

    /// The context of a request arriving on `source`'s channel.
    public init(source: ApplicationRequestContextSource) {
        coreContext = .init(source: source)
        remoteAddress = source.channel.remoteAddress
    }
}

extension HTTPField.Name {
    static let forwarded = HTTPField.Name("Forwarded")!
    static let xForwardedFor = HTTPField.Name("X-Forwarded-For")!
    @usableFromInline static let rateLimitPolicy = HTTPField.Name("RateLimit-Policy")!
    @usableFromInline static let rateLimit = HTTPField.Name("RateLimit")!
}
#endif
