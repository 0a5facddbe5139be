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
#if canImport(Hummingbird)
import Foundation
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
import Synchronization

struct Options {
    var host = "127.0.0.1"
    var port = 8080
    var limit = 10
    var per = 60.0
    var debounceMilliseconds = 500
    var trustedProxies: Set<String> = []
    var shadow = false
    var noLimit = false
    var quotaOnSluiceLoop = false

    static let usage = """
        usage: hummingbird-server [--host ADDR] [--port PORT] [--limit N] [--per SECONDS]
                                  [--debounce-ms MS] [--trust-proxy ADDR]... [--shadow] [--no-limit] [--quota-on-sluice-loop]
        """

    static func parse(_ arguments: [String]) -> Options {
        var options = Options()
        var rest = arguments[...]
        func fail(_ message: String) -> Never {
            FileHandle.standardError.write(Data("hummingbird-server: \(message)\n\(usage)\n".utf8))
            exit(2)
        }
        func value(_ flag: String) -> String {
            guard let value = rest.popFirst() else { fail("\(flag) needs a value") }
            return value
        }
        while let flag = rest.popFirst() {
            switch flag {
            case "--host": options.host = value(flag)
            case "--port":
                guard let port = Int(value(flag)), (0...65535).contains(port) else { fail("bad --port") }
                options.port = port
            case "--limit":
                guard let limit = Int(value(flag)), limit >= 1 else { fail("--limit must be an integer >= 1") }
                options.limit = limit
            case "--per":
                guard let per = Double(value(flag)), per > 0, per <= 86_400 * 365 else { fail("bad --per") }
                options.per = per
            case "--debounce-ms":
                guard let ms = Int(value(flag)), ms >= 1 else { fail("--debounce-ms must be >= 1") }
                options.debounceMilliseconds = ms
            case "--trust-proxy": options.trustedProxies.insert(value(flag))
            case "--shadow": options.shadow = true
            case "--no-limit": options.noLimit = true  // GET / without the middleware (for wrk)
            case "--quota-on-sluice-loop": options.quotaOnSluiceLoop = true  // Sluice's own loop (for wrk)
            case "--help", "-h":
                print(usage)
                exit(0)
            default: fail("unknown argument \(flag)")
            }
        }
        return options
    }
}

/// A request context that knows the client's address.
struct ClientContext: RequestContext, RemoteAddressRequestContext {
    var coreContext: CoreRequestContextStorage
    let remoteAddress: SocketAddress?
    init(source: ApplicationRequestContextSource) {
        coreContext = .init(source: source)
        remoteAddress = source.channel.remoteAddress
    }
}

/// Saved documents: how many saves, and the last content.
/// Writes a line to stdout at once (unbuffered: a test reads it while the server runs).
func say(_ line: String) {
    FileHandle.standardOutput.write(Data((line + "\n").utf8))
}

final class DocumentStore: Sendable {
    private let documents = Mutex<[String: (saves: Int, content: String)]>([:])
    func save(_ id: String, _ content: String) {
        documents.withLock { $0[id] = (($0[id]?.saves ?? 0) + 1, content) }
        say("saved \(id) \(content)")
    }
    func get(_ id: String) -> (saves: Int, content: String)? { documents.withLock { $0[id] } }
}

let options = Options.parse(Array(CommandLine.arguments.dropFirst()))
var logger = Logger(label: "hummingbird-server")
logger.logLevel = .notice

let clientID = HTTPField.Name("X-Client-Id")!
let forwarded: ForwardedHeaders = options.trustedProxies.isEmpty ? .ignore : .trust(options.trustedProxies)

// The quota: a local RateLimiter.
// Its clock and timers are a NIO event loop of the server's group (SluiceNIO): no thread
// of Sluice's own. (--quota-on-sluice-loop: Sluice's default loop instead, for comparison.)
let quota = try RateLimiter<String>(
    limit: options.limit, per: .nanoseconds(Int64(options.per * 1_000_000_000)),
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
#else
print("hummingbird-server: built without Hummingbird (the Sluice package's Hummingbird trait is off)")
#endif
