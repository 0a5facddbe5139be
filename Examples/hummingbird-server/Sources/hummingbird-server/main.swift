// hummingbird-server: Sluice's rate-limit middleware and a debounced endpoint
// on Hummingbird 2 (docs/servers.md).
//
//   GET /           "hello CLIENT": a quota of --limit requests per --per seconds per
//                   client (the X-Client-Id header when present, else the client address;
//                   X-Forwarded-For/Forwarded only from --trust-proxy addresses). An
//                   X-Client-Id sent twice or not of visible ASCII: 400 (docs/servers.md).
//                   429 + Retry-After + problem+json beyond it; RateLimit-Policy and
//                   RateLimit on every answer.
//   PUT /docs/ID    a new version of a document: saved once a burst of PUTs on that ID
//                   has been quiet for --debounce-ms (a debounce per document, on a
//                   NIO event loop); 202.
//   GET /docs/ID    "saves=N content=LAST" (404 before the first save).
//   GET /api        "hello KEY (PLAN)": two plans of two windows each (free: 2 a second
//                   and 5 a minute; pro: 10 a second and 100 a minute) per API key (the
//                   X-API-Key header, else the client address). A key that starts with
//                   "pro-" is on pro (standing for a look-up in your accounts), any other
//                   request on free. 429 + Retry-After + a quota-exceeded problem naming
//                   the refusing windows (violated-policies); RateLimit-Policy and RateLimit
//                   list both windows of the plan.
//
// Against hostile clients: --idle-timeout (Hummingbird's own), --header-timeout,
// --request-timeout and --max-connections (the connection guard of server-support,
// installed by GuardedHTTP1Channel below).
//
// Every save prints "saved ID CONTENT" on stdout. On SIGTERM/SIGINT the server stops
// taking requests, then the limiters are drained (pending saves are made), then it exits.
// The command line and the document store are shared with Examples/vapor-server
// (Examples/server-support); what is left here is the Hummingbird wiring.
import ExampleServerSupport
import HTTPTypes
import Hummingbird
import HummingbirdCore
import NIOCore
import Logging
import ServiceLifecycle
import Sluice
import SluiceHTTP
import SluiceHummingbird
import SluiceMetrics
import SluiceNIO

/// Hummingbird's HTTP/1 server with the connection guard of server-support: a connection
/// beyond the cap is closed at once; a request head must be complete `headerTimeout`
/// after its first byte, and its response ended `requestTimeout` after the head.
struct GuardedHTTP1Channel: ServerChildChannel {
    let http1: HTTP1Channel
    let cap: ConnectionCap
    let headerTimeout: TimeAmount
    let requestTimeout: TimeAmount

    func setup(channel: any Channel, logger: Logger) -> EventLoopFuture<HTTP1Channel.Value> {
        http1.setup(channel: channel, logger: logger).flatMapThrowing { value in
            try cap.admit(channel)
            try HTTPTimeouts.install(on: channel, headerTimeout: headerTimeout, requestTimeout: requestTimeout)
            return value
        }
    }

    func handle(value: HTTP1Channel.Value, logger: Logger) async {
        await http1.handle(value: value, logger: logger)
    }
}

let options = ServerOptions.parse(Array(CommandLine.arguments.dropFirst()), program: "hummingbird-server")
var logger = Logger(label: "hummingbird-server")
logger.logLevel = .notice

let clientID = HTTPField.Name("X-Client-Id")!
typealias Middleware = RateLimitMiddleware<ClientAddressContext>
let forwarded: ForwardedHeaders = options.trustedProxies.isEmpty ? .ignore : .trust(options.trustedProxies)

// The quota: a local RateLimiter.
// Its clock and timers are one of the server's own event loops (Hummingbird's default
// group; SluiceNIO): no thread of Sluice's own. (--quota-on-sluice-loop: Sluice's default
// loop instead, for comparison: a decision then wakes that thread, about 30% fewer
// requests per second in docs/servers.md's runs.)
let serverLoops = EventLoopGroupProvider.singleton.eventLoopGroup
let quota = try RateLimiter<String>(
    limit: options.limit, per: options.perDuration,
    scheduler: options.quotaOnSluiceLoop ? .default : .eventLoop(serverLoops.next()),
    maxKeys: 1_000_000)
// The plans of /api: a RateLimiter of plans, each of two windows that must both admit
// a request (a refused request is charged to neither).
let apiPlans = try RateLimiter<String>(
    plans: [
        RatePlan(
            "free",
            quotas: [.init("second", limit: 2, per: .seconds(1)), .init("minute", limit: 5, per: .seconds(60))]),
        RatePlan(
            "pro",
            quotas: [.init("second", limit: 10, per: .seconds(1)), .init("minute", limit: 100, per: .seconds(60))]),
    ],
    scheduler: options.quotaOnSluiceLoop ? .default : .eventLoop(serverLoops.next()),
    maxKeys: 1_000_000)
let apiKey = HTTPField.Name("X-API-Key")!
/// The plan of a request to /api: "pro" for an API key that starts with "pro-", else
/// nil (the limiter's first plan, "free"). An invalid key is answered 400 by the
/// middleware before this matters.
func plan(of request: Request) -> String? {
    (try? Middleware.clientID(request, field: apiKey))?.hasPrefix("pro-") == true ? "pro" : nil
}
// The debounced saves: a Limiter whose timers are tasks of a NIO event loop.
let store = DocumentStore()
let saves = try Limiter<String, String>(
    .debounce(interval: .milliseconds(options.debounceMilliseconds)),
    scheduler: .eventLoop(serverLoops.next()), maxKeys: 100_000
) { id, content in store.save(id, content) }

let router = Router(context: ClientAddressContext.self)
let limited = router.group()
if !options.noLimit {
    // X-Client-Id by the rule of SluiceHTTP's ClientID, else the client address.
    limited.add(
        middleware: Middleware(quota, clientIDField: "X-Client-Id", forwardedHeaders: forwarded, shadow: options.shadow)
    )
}
limited.get("/") { request, context -> String in
    // (With --no-limit an id the middleware would refuse is shown as "?".)
    let client = try? Middleware.clientKey(request, context, clientIDField: clientID, forwarded)
    return "hello \(client ?? "?")\n"
}
// /api: keyed by X-API-Key (by the rule of ClientID), else the client address; the
// request's plan from its key.
let api = router.group("api")
api.add(
    middleware: Middleware(apiPlans, clientIDField: "X-API-Key", forwardedHeaders: forwarded, shadow: options.shadow)
        .plan { request, _ in plan(of: request) })
api.get { request, context -> String in
    let client = try? Middleware.clientKey(request, context, clientIDField: apiKey, forwarded)
    return "hello \(client ?? "?") (\(plan(of: request) ?? "free"))\n"
}
router.put("/docs/:id") { request, context -> Response in
    let id = try context.parameters.require("id")
    let body = try await request.body.collect(upTo: 64 * 1024)
    do {
        try saves.submit(String(buffer: body), for: id)
    } catch let error as LimiterError where error == .full {
        throw HTTPError(.serviceUnavailable, message: "too many documents pending")
    }
    return Response(status: .accepted)
}
router.get("/docs/:id") { _, context -> String in
    let id = try context.parameters.require("id")
    guard let document = store.get(id) else { throw HTTPError(.notFound) }
    return "saves=\(document.saves) content=\(document.content)\n"
}

let cap = ConnectionCap(limit: options.maxConnections)
let server = HTTPServerBuilder { responder in
    GuardedHTTP1Channel(
        http1: HTTP1Channel(
            responder: responder, configuration: .init(idleTimeout: ServerOptions.timeAmount(options.idleTimeout))),
        cap: cap, headerTimeout: ServerOptions.timeAmount(options.headerTimeout),
        requestTimeout: ServerOptions.timeAmount(options.requestTimeout))
}
let app = Application(
    router: router,
    server: server,
    configuration: .init(address: .hostname(options.host, port: options.port), serverName: nil),
    onServerRunning: { channel in
        say("listening on \(channel.localAddress?.description ?? "?")")
    },
    logger: logger)
// The limiters first: the group stops its services in reverse order, so the server
// stops taking requests before the limiters are drained.
let limiters = LimiterService(
    [.limiter("saves", saves), .rateLimiter("quota", quota), .rateLimiter("plans", apiPlans)], logger: logger)
let group = ServiceGroup(
    configuration: .init(services: [limiters, app], gracefulShutdownSignals: [.sigterm, .sigint], logger: logger))
try await group.run()
say("stopped")
