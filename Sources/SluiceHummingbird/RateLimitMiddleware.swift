#if Hummingbird
import HTTPTypes
import Hummingbird
import NIOCore
import Sluice
import SluiceHTTP

/// Hummingbird 2 middleware that applies a rate quota per client key.
///
/// For each request it takes a key (a closure on the request: an API key
/// header, the user, a route parameter; the client address by default) and
/// a cost (1 unless configured), asks the ``SluiceHTTP/RateDecider`` — a
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
/// A request whose key closure returns `nil` is not limited.
///
/// ```swift
/// let limiter = try RateLimiter<String>(limit: 100, per: .seconds(60))
/// router.add(middleware: RateLimitMiddleware(limiter))            // per client address
/// router.add(middleware: RateLimitMiddleware(limiter) { request, _ in
///     request.headers[.authorization]                              // per API key
/// })
/// ```
public struct RateLimitMiddleware<Context: RequestContext>: RouterMiddleware {
    /// The key of a request (`nil`: not limited).
    public typealias KeyFunction = @Sendable (Request, Context) -> String?
    /// The cost of a request, in units of the quota.
    public typealias CostFunction = @Sendable (Request, Context) -> Int

    /// The decisions and answers, framework-free.
    public let gate: RateLimitGate
    @usableFromInline let key: KeyFunction
    @usableFromInline let cost: CostFunction?

    /// Middleware keyed by a closure.
    ///
    /// - Parameters:
    ///   - decider: what decides (a `RateLimiter<String>`, or any ``SluiceHTTP/RateDecider``).
    ///   - policyName: the name in the `RateLimit*` fields.
    ///   - shadow: decide, count and add headers, but never reject.
    ///   - onFailure: what to answer when no decision can be made.
    ///   - failureObserver: told about each failure to decide (a log line).
    ///   - cost: the cost of a request (`nil`: 1).
    ///   - key: the key of a request (`nil`: not limited).
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

    // @inlinable: specialized for the application's Context in its module
    // (no generic metadata look-ups per request).
    @inlinable
    public func handle(
        _ request: Request, context: Context, next: (Request, Context) async throws -> Response
    ) async throws -> Response {
        guard let key = key(request, context) else { return try await next(request, context) }
        let verdict = await gate.evaluate(key: key, cost: cost?(request, context) ?? 1)
        var fields = HTTPFields()
        if let value = verdict.retryAfter { fields.append(HTTPField(name: .retryAfter, value: value)) }
        if let value = verdict.ratePolicy { fields.append(HTTPField(name: .rateLimitPolicy, value: value)) }
        if let value = verdict.rateLimit { fields.append(HTTPField(name: .rateLimit, value: value)) }
        if let rejection = verdict.rejection {
            fields.append(HTTPField(name: .contentType, value: rejection.contentType))
            return Response(
                status: HTTPResponse.Status(code: rejection.status), headers: fields,
                body: ResponseBody(byteBuffer: ByteBuffer(string: rejection.body)))
        }
        var response = try await next(request, context)
        response.headers.append(contentsOf: fields)
        return response
    }
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
    public init(
        _ decider: any RateDecider, forwardedHeaders: ForwardedHeaders = .ignore, policyName: String = "default",
        shadow: Bool = false, onFailure: RateLimitGate.FailureMode = .reject,
        failureObserver: (@Sendable (String, any Error) -> Void)? = nil, cost: CostFunction? = nil
    ) {
        self.init(
            decider, policyName: policyName, shadow: shadow, onFailure: onFailure, failureObserver: failureObserver,
            cost: cost
        ) { request, context in
            Self.clientAddress(request, context, forwardedHeaders)
        }
    }

    /// The client address of a request (see ``init(_:forwardedHeaders:policyName:shadow:onFailure:failureObserver:cost:)``).
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

extension HTTPField.Name {
    static let forwarded = HTTPField.Name("Forwarded")!
    static let xForwardedFor = HTTPField.Name("X-Forwarded-For")!
    @usableFromInline static let rateLimitPolicy = HTTPField.Name("RateLimit-Policy")!
    @usableFromInline static let rateLimit = HTTPField.Name("RateLimit")!
}
#endif
