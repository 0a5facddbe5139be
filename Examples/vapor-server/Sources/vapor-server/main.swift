// vapor-server: Sluice's rate-limit middleware and a debounced endpoint on Vapor 4
// (docs/servers.md) — the same routes and answers as Examples/hummingbird-server:
//
//   GET /           "hello CLIENT": --limit requests per --per seconds per client
//                   (X-Client-Id when present, else the client address); 429 +
//                   Retry-After + problem+json beyond; RateLimit-Policy and RateLimit.
//   PUT /docs/ID    saved once a burst of PUTs on ID is quiet for --debounce-ms; 202.
//   GET /docs/ID    "saves=N content=LAST" (404 before the first save).
//
// Every save prints "saved ID CONTENT". On SIGTERM/SIGINT the server stops, then the
// debounce limiter is drained (pending saves are made) before the process exits.
// The command line and the document store are shared with Examples/hummingbird-server
// (Examples/server-support); what is left here is the Vapor wiring.
import ExampleServerSupport
import Sluice
import SluiceHTTP
import SluiceNIO
import SluiceVapor
import Vapor

/// Drains the debounce limiter when the application shuts down.
struct DrainOnShutdown: LifecycleHandler {
    let saves: Limiter<String, String>
    func shutdownAsync(_ application: Application) async {
        try? await saves.close(drain: true)
    }
}

let options = ServerOptions.parse(Array(CommandLine.arguments.dropFirst()), program: "vapor-server")
// Vapor's own command-line parsing is not used: it would read our flags.
let app = try await Application.make(Environment(name: "production", arguments: ["vapor-server"]))
app.logger.logLevel = .notice
app.http.server.configuration.hostname = options.host
app.http.server.configuration.port = options.port
let forwarded: ForwardedHeaders = options.trustedProxies.isEmpty ? .ignore : .trust(options.trustedProxies)

// The quota's clock and timers: one of Vapor's event loops (SluiceNIO), no thread of
// Sluice's own. (--quota-on-sluice-loop: Sluice's default loop instead, for comparison.)
let quota = try RateLimiter<String>(
    limit: options.limit, per: options.perDuration,
    scheduler: options.quotaOnSluiceLoop ? .default : .eventLoop(app.eventLoopGroup.next()), maxKeys: 1_000_000)
let store = DocumentStore()
// The debounced saves: timers are tasks of one of Vapor's event loops.
let saves = try Limiter<String, String>(
    .debounce(interval: .milliseconds(options.debounceMilliseconds)),
    scheduler: .eventLoop(app.eventLoopGroup.next()), maxKeys: 100_000
) { id, content in store.save(id, content) }
app.lifecycle.use(DrainOnShutdown(saves: saves))

@Sendable func client(_ request: Request) -> String? {
    request.headers.first(name: "X-Client-Id") ?? SluiceRateLimitMiddleware.clientAddress(request, forwarded)
}
// --no-limit: the same route without the middleware (the baseline for wrk).
let limited: any RoutesBuilder =
    options.noLimit ? app : app.grouped(SluiceRateLimitMiddleware(quota, shadow: options.shadow, key: client))
limited.get { request in
    "hello \(client(request) ?? "?")\n"
}
app.put("docs", ":id") { request -> HTTPStatus in
    let id = try request.parameters.require("id")
    do {
        try saves.submit(request.body.string ?? "", for: id)
    } catch let error as LimiterError where error == .full {
        throw Abort(.serviceUnavailable, reason: "too many documents pending")
    }
    return .accepted
}
app.get("docs", ":id") { request -> String in
    let id = try request.parameters.require("id")
    guard let document = store.get(id) else { throw Abort(.notFound) }
    return "saves=\(document.saves) content=\(document.content)\n"
}

do {
    try await app.execute()
} catch {
    app.logger.report(error: error)
    try? await app.asyncShutdown()
    throw error
}
try await app.asyncShutdown()
say("stopped")
