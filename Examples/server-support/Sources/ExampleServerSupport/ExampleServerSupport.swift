// What the example servers share, framework aside (see Package.swift).
import Foundation
import NIOCore
import Synchronization

/// The example servers' command line (the same flags for both).
public struct ServerOptions: Sendable {
    public var host = "127.0.0.1"
    public var port = 8080
    /// The quota: `limit` requests per `per` seconds per client.
    public var limit = 10
    public var per = 60.0
    /// The quiet time of the debounced saves.
    public var debounceMilliseconds = 500
    /// Proxies whose `X-Forwarded-For` / `Forwarded` are believed.
    public var trustedProxies: Set<String> = []
    /// Decide, count and add the fields, never reject.
    public var shadow = false
    /// `GET /` without the middleware (the baseline of the wrk comparison).
    public var noLimit = false
    /// The quota's limiter on Sluice's own loop instead of a NIO event loop (for comparison).
    public var quotaOnSluiceLoop = false

    /// Against hostile clients (docs/servers.md, "What the server must do itself"):
    /// a connection with no request in progress is closed after `idleTimeout` seconds
    /// (longer than a load balancer's usual 60 s pool timeout, so that it closes first);
    public var idleTimeout = 75.0
    /// a request's head must be complete `headerTimeout` seconds after its first byte;
    public var headerTimeout = 10.0
    /// from a complete head to the end of its response, at most `requestTimeout` seconds;
    public var requestTimeout = 60.0
    /// at most `maxConnections` open at once: a new one beyond is closed at once (about
    /// 50 KB of memory each were measured with idle connections, and each needs a file
    /// descriptor: keep it below `ulimit -n`).
    public var maxConnections = 4096

    /// The quota's period.
    public var perDuration: Duration { .nanoseconds(Int64(per * 1_000_000_000)) }

    /// `seconds` as a NIO time amount.
    public static func timeAmount(_ seconds: Double) -> TimeAmount { .nanoseconds(Int64(seconds * 1_000_000_000)) }

    public static func usage(_ program: String) -> String {
        """
        usage: \(program) [--host ADDR] [--port PORT] [--limit N] [--per SECONDS] [--debounce-ms MS]
               [--trust-proxy ADDR]... [--shadow] [--no-limit] [--quota-on-sluice-loop]
               [--idle-timeout SECONDS] [--header-timeout SECONDS] [--request-timeout SECONDS]
               [--max-connections N]
        (defaults: --idle-timeout 75 --header-timeout 10 --request-timeout 60 --max-connections 4096)
        """
    }

    /// Parses `arguments` (without the program name); on a bad one, prints why and
    /// the usage on stderr and exits with status 2.
    public static func parse(_ arguments: [String], program: String) -> ServerOptions {
        var options = ServerOptions()
        var rest = arguments[...]
        func fail(_ message: String) -> Never {
            FileHandle.standardError.write(Data("\(program): \(message)\n\(usage(program))\n".utf8))
            exit(2)
        }
        func value(_ flag: String) -> String {
            guard let value = rest.popFirst() else { fail("\(flag) needs a value") }
            return value
        }
        func seconds(_ flag: String) -> Double {
            guard let seconds = Double(value(flag)), seconds > 0, seconds <= 86_400 else {
                fail("\(flag) must be a number of seconds in (0, 86400]")
            }
            return seconds
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
            case "--idle-timeout": options.idleTimeout = seconds(flag)
            case "--header-timeout": options.headerTimeout = seconds(flag)
            case "--request-timeout": options.requestTimeout = seconds(flag)
            case "--max-connections":
                guard let n = Int(value(flag)), n >= 1 else { fail("--max-connections must be an integer >= 1") }
                options.maxConnections = n
            case "--trust-proxy": options.trustedProxies.insert(value(flag))
            case "--shadow": options.shadow = true
            case "--no-limit": options.noLimit = true
            case "--quota-on-sluice-loop": options.quotaOnSluiceLoop = true
            case "--help", "-h":
                print(usage(program))
                exit(0)
            default: fail("unknown argument \(flag)")
            }
        }
        return options
    }
}

/// Writes a line to stdout at once (unbuffered: a test reads it while the server runs).
public func say(_ line: String) {
    FileHandle.standardOutput.write(Data((line + "\n").utf8))
}

/// The documents of the debounced endpoint: how many saves, and the last content.
public final class DocumentStore: Sendable {
    private let documents = Mutex<[String: (saves: Int, content: String)]>([:])

    public init() {}

    /// Records a save and prints `saved ID CONTENT`.
    public func save(_ id: String, _ content: String) {
        documents.withLock { $0[id] = (($0[id]?.saves ?? 0) + 1, content) }
        say("saved \(id) \(content)")
    }

    /// The document's saves and last content, or `nil` before its first save.
    public func get(_ id: String) -> (saves: Int, content: String)? { documents.withLock { $0[id] } }
}
