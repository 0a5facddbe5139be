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
#if canImport(Vapor)
import Foundation
import Sluice
import SluiceHTTP
import SluiceNIO
import SluiceVapor
import Synchronization
import Vapor

struct Options {
    var host = "127.0.0.1"
    var port = 8080
    var limit = 10
    var per = 60.0
    var debounceMilliseconds = 500
    var trustedProxies: Set<String> = []
    var shadow = false

    static let usage = """
        usage: vapor-server [--host ADDR] [--port PORT] [--limit N] [--per SECONDS]
                            [--debounce-ms MS] [--trust-proxy ADDR]... [--shadow]
        """

    static func parse(_ arguments: [String]) -> Options {
        var options = Options()
        var rest = arguments[...]
        func fail(_ message: String) -> Never {
            FileHandle.standardError.write(Data("vapor-server: \(message)\n\(usage)\n".utf8))
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
            case "--help", "-h":
                print(usage)
                exit(0)
            default: fail("unknown argument \(flag)")
            }
        }
        return options
    }
}

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

/// Drains the debounce limiter when the application shuts down.
struct DrainOnShutdown: LifecycleHandler {
    let saves: Limiter<String, String>
    func shutdownAsync(_ application: Application) async {
        try? await saves.close(drain: true)
    }
}

let options = Options.parse(Array(CommandLine.arguments.dropFirst()))
// Vapor's own command-line parsing is not used: it would read our flags.
let app = try await Application.make(Environment(name: "production", arguments: ["vapor-server"]))
app.logger.logLevel = .notice
app.http.server.configuration.hostname = options.host
app.http.server.configuration.port = options.port
let forwarded: ForwardedHeaders = options.trustedProxies.isEmpty ? .ignore : .trust(options.trustedProxies)

// The quota's clock and timers: one of Vapor's event loops (SluiceNIO), no thread of Sluice's own.
let quota = try RateLimiter<String>(
    limit: options.limit, per: .nanoseconds(Int64(options.per * 1_000_000_000)),
    scheduler: .eventLoop(app.eventLoopGroup.next()), maxKeys: 1_000_000)
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
app.grouped(SluiceRateLimitMiddleware(quota, shadow: options.shadow, key: client)).get { request in
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
#else
print("vapor-server: built without Vapor (the Sluice package's Vapor trait is off)")
#endif
