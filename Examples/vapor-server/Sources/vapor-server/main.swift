// vapor-server: Sluice's rate-limit middleware and a debounced endpoint on Vapor 4
// (docs/servers.md) — the same routes and answers as Examples/hummingbird-server:
//
//   GET /           "hello CLIENT": --limit requests per --per seconds per client
//                   (X-Client-Id when present, else the client address); 429 +
//                   Retry-After + problem+json beyond; RateLimit-Policy and RateLimit.
//                   An X-Client-Id sent twice or not of visible ASCII: 400.
//   PUT /docs/ID    saved once a burst of PUTs on ID is quiet for --debounce-ms; 202.
//   GET /docs/ID    "saves=N content=LAST" (404 before the first save).
//   GET /api        "hello KEY (PLAN)": two plans of two windows each (free: 2 a second
//                   and 5 a minute; pro: 10 a second and 100 a minute) per API key
//                   (X-API-Key, else the client address); a key that starts with "pro-"
//                   is on pro, any other request on free. 429 + Retry-After + a
//                   quota-exceeded problem naming the refusing windows.
//
// Every save prints "saved ID CONTENT". On SIGTERM/SIGINT the server stops, then the
// debounce limiter is drained (pending saves are made) before the process exits.
// Against hostile clients: --idle-timeout, --header-timeout, --request-timeout and
// --max-connections, the connection guard of server-support as Hummingbird's example has
// it. Vapor 4's own HTTPServer has no hook into its channel pipeline or accept loop for
// them, so the application is served by GuardedServer (GuardedServer.swift), a server of
// this example's own on Vapor's public API and NIO.
//
// The command line and the document store are shared with Examples/hummingbird-server
// (Examples/server-support); what is left here is the Vapor wiring.
import ExampleServerSupport
import NIOCore
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
// Vapor's HTTPServer replaced by GuardedServer (GuardedServer.swift): the same answers,
// with a header timeout and a connection cap, which Vapor's server has no hook for.
let server = GuardedServer(
    application: app,
    configuration: .init(
        host: options.host, port: options.port,
        idleTimeout: ServerOptions.timeAmount(options.idleTimeout),
        headerTimeout: ServerOptions.timeAmount(options.headerTimeout),
        requestTimeout: ServerOptions.timeAmount(options.requestTimeout),
        maxConnections: options.maxConnections))
app.servers.use { _ in server }
let forwarded: ForwardedHeaders = options.trustedProxies.isEmpty ? .ignore : .trust(options.trustedProxies)

// The quota's clock and timers: one of Vapor's event loops (SluiceNIO), no thread of
// Sluice's own. (--quota-on-sluice-loop: Sluice's default loop instead, for comparison: a
// decision then wakes that thread, about 30% fewer requests per second in
// docs/servers.md's runs.)
let quota = try RateLimiter<String>(
    limit: options.limit, per: options.perDuration,
    scheduler: options.quotaOnSluiceLoop ? .default : .eventLoop(app.eventLoopGroup.next()), maxKeys: 1_000_000)
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
    scheduler: options.quotaOnSluiceLoop ? .default : .eventLoop(app.eventLoopGroup.next()), maxKeys: 1_000_000)
/// The plan of a request to /api: "pro" for an API key that starts with "pro-" (standing
/// for a look-up in your accounts), else nil (the limiter's first plan, "free").
func plan(of request: Request) -> String? {
    (try? RateLimitMiddleware.clientID(request, field: "X-API-Key"))?.hasPrefix("pro-") == true ? "pro" : nil
}
let store = DocumentStore()
// The debounced saves: timers are tasks of one of Vapor's event loops.
let saves = try Limiter<String, String>(
    .debounce(interval: .milliseconds(options.debounceMilliseconds)),
    scheduler: .eventLoop(app.eventLoopGroup.next()), maxKeys: 100_000
) { id, content in store.save(id, content) }
app.lifecycle.use(DrainOnShutdown(saves: saves))

// --no-limit: the same route without the middleware (the baseline for wrk). The key:
// X-Client-Id by the rule of SluiceHTTP's ClientID, else the client address.
let limited: any RoutesBuilder =
    options.noLimit
    ? app
    : app.grouped(
        RateLimitMiddleware(quota, clientIDField: "X-Client-Id", forwardedHeaders: forwarded, shadow: options.shadow))
limited.get { request in
    // (With --no-limit an id the middleware would refuse is shown as "?".)
    let client = try? RateLimitMiddleware.clientKey(request, clientIDField: "X-Client-Id", forwarded)
    return "hello \(client ?? "?")\n"
}
// /api: keyed by X-API-Key (by the rule of ClientID), else the client address; the
// request's plan from its key.
app.grouped(
    RateLimitMiddleware(apiPlans, clientIDField: "X-API-Key", forwardedHeaders: forwarded, shadow: options.shadow)
        .plan { plan(of: $0) }
).get("api") { request in
    let client = try? RateLimitMiddleware.clientKey(request, clientIDField: "X-API-Key", forwarded)
    return "hello \(client ?? "?") (\(plan(of: request) ?? "free"))\n"
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
