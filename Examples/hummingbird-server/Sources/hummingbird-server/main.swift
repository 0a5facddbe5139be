// hummingbird-server: Sluice's rate-limit middleware and a debounced endpoint
// on Hummingbird 2 (docs/servers.md).
//
//   GET /           "hello CLIENT": a quota of --limit requests per --per seconds per
//                   client (the X-Client-Id header when present, else the client address;
//                   X-Forwarded-For/Forwarded only from --trust-proxy addresses).
//                   429 + Retry-After + problem+json beyond it; RateLimit-Policy and
//                   RateLimit on every answer.
//   PUT /docs/ID    a new version of a document: saved once a burst of PUTs on that ID
//                   has been quiet for --debounce-ms (a debounce per document, on a
//                   NIO event loop); 202.
//   GET /docs/ID    "saves=N content=LAST" (404 before the first save).
//
// Every save prints "saved ID CONTENT" on stdout. On SIGTERM/SIGINT the server stops
// taking requests, then the limiters are drained (pending saves are made), then it exits.
// The command line and the document store are shared with Examples/vapor-server
// (Examples/server-support); what is left here is the Hummingbird wiring.
import ExampleServerSupport
import HTTPTypes
import Hummingbird
import NIOCore
import Logging
import NIOPosix
import ServiceLifecycle
import Sluice
import SluiceHTTP
import SluiceHummingbird
import SluiceMetrics
import SluiceNIO

/// A request context that knows the client's address.
struct ClientContext: RequestContext, RemoteAddressRequestContext {
    var coreContext: CoreRequestContextStorage
    let remoteAddress: SocketAddress?
    init(source: ApplicationRequestContextSource) {
        coreContext = .init(source: source)
        remoteAddress = source.channel.remoteAddress
    }
}

let options = ServerOptions.parse(Array(CommandLine.arguments.dropFirst()), program: "hummingbird-server")
var logger = Logger(label: "hummingbird-server")
logger.logLevel = .notice

let clientID = HTTPField.Name("X-Client-Id")!
let forwarded: ForwardedHeaders = options.trustedProxies.isEmpty ? .ignore : .trust(options.trustedProxies)

// The quota: a local RateLimiter.
// Its clock and timers are a NIO event loop of the server's group (SluiceNIO): no thread
// of Sluice's own. (--quota-on-sluice-loop: Sluice's default loop instead, for comparison.)
let quota = try RateLimiter<String>(
    limit: options.limit, per: options.perDuration,
    scheduler: options.quotaOnSluiceLoop ? .default : .eventLoop(MultiThreadedEventLoopGroup.singleton.next()),
    maxKeys: 1_000_000)
// The debounced saves: a Limiter whose timers are tasks of a NIO event loop.
let store = DocumentStore()
let saves = try Limiter<String, String>(
    .debounce(interval: .milliseconds(options.debounceMilliseconds)),
    scheduler: .eventLoop(MultiThreadedEventLoopGroup.singleton.next()), maxKeys: 100_000
) { id, content in store.save(id, content) }

let router = Router(context: ClientContext.self)
let limited = router.group()
if !options.noLimit {
    limited.add(
        middleware: RateLimitMiddleware<ClientContext>(quota, shadow: options.shadow) { request, context in
            request.headers[clientID]
                ?? RateLimitMiddleware<ClientContext>.clientAddress(request, context, forwarded)
        })
}
limited.get("/") { request, context -> String in
        let client = request.headers[clientID]
            ?? RateLimitMiddleware<ClientContext>.clientAddress(request, context, forwarded) ?? "?"
        return "hello \(client)\n"
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

let app = Application(
    router: router,
    configuration: .init(address: .hostname(options.host, port: options.port), serverName: nil),
    onServerRunning: { channel in
        say("listening on \(channel.localAddress?.description ?? "?")")
    },
    logger: logger)
// The limiters first: the group stops its services in reverse order, so the server
// stops taking requests before the limiters are drained.
let limiters = LimiterService([.limiter("saves", saves), .rateLimiter("quota", quota)], logger: logger)
let group = ServiceGroup(
    configuration: .init(services: [limiters, app], gracefulShutdownSignals: [.sigterm, .sigint], logger: logger))
try await group.run()
say("stopped")
