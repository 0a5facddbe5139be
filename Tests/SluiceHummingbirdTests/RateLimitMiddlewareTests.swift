#if Hummingbird
import Foundation
import HTTPTypes
import Hummingbird
import NIOCore
import HummingbirdTesting
import Sluice
@testable import SluiceHTTP
import SluiceHummingbird
import Testing

let clientID = HTTPField.Name("X-Client-Id")!
let costField = HTTPField.Name("X-Cost")!
let rateLimitField = HTTPField.Name("RateLimit")!
let ratePolicyField = HTTPField.Name("RateLimit-Policy")!
let retryAfterField = HTTPField.Name("Retry-After")!
let xffField = HTTPField.Name("X-Forwarded-For")!

/// An application whose GET / is limited by `middleware`.
func app(_ middleware: RateLimitMiddleware<BasicRequestContext>) -> some ApplicationProtocol {
    let router = Router()
    router.add(middleware: middleware)
    router.get("/") { _, _ in "ok" }
    return Application(responder: router.buildResponder())
}

/// Keyed on X-Client-Id, cost from X-Cost.
func headerKeyed(_ limiter: RateLimiter<String>, shadow: Bool = false) -> RateLimitMiddleware<BasicRequestContext> {
    RateLimitMiddleware(
        limiter, shadow: shadow,
        cost: { request, _ in request.headers[costField].flatMap { Int($0) } ?? 1 },
        key: { request, _ in request.headers[clientID] })
}

@Suite("Hummingbird rate-limit middleware")
struct RateLimitMiddlewareTests {
    /// 2 per 10 s (one unit back every 5 s), on a manual clock: values by hand.
    @Test("admits the quota, then 429 with Retry-After, RateLimit fields and a problem body")
    func quota() async throws {
        let clock = ManualLimiterClock()
        let limiter = try RateLimiter<String>(limit: 2, per: .seconds(10), scheduler: .manual(clock))
        try await app(headerKeyed(limiter)).test(.router) { client in
            let a: HTTPFields = [clientID: "a"]
            try await client.execute(uri: "/", method: .get, headers: a) { response in
                #expect(response.status == .ok)
                #expect(String(buffer: response.body) == "ok")
                #expect(response.headers[ratePolicyField] == "\"default\";q=2;w=10")
                #expect(response.headers[rateLimitField] == "\"default\";r=1;t=5")
                #expect(response.headers[retryAfterField] == nil)
            }
            try await client.execute(uri: "/", method: .get, headers: a) { response in
                #expect(response.status == .ok)
                #expect(response.headers[rateLimitField] == "\"default\";r=0;t=10")
            }
            try await client.execute(uri: "/", method: .get, headers: a) { response in
                #expect(response.status == .tooManyRequests)
                #expect(response.headers[retryAfterField] == "5")
                #expect(response.headers[rateLimitField] == "\"default\";r=0;t=10")
                #expect(response.headers[ratePolicyField] == "\"default\";q=2;w=10")
                #expect(response.headers[.contentType] == "application/problem+json")
                let body =
                    try JSONSerialization.jsonObject(with: Data(String(buffer: response.body).utf8)) as? [String: Any]
                #expect(body?["type"] as? String == "about:blank")
                #expect(body?["title"] as? String == "Too Many Requests")
                #expect(body?["status"] as? Int == 429)
                #expect((body?["detail"] as? String)?.contains("retry after 5 seconds") == true)
            }
            // Another client has its own quota.
            try await client.execute(uri: "/", method: .get, headers: [clientID: "b"]) { response in
                #expect(response.status == .ok)
            }
            clock.advance(by: .milliseconds(4_999))
            try await client.execute(uri: "/", method: .get, headers: a) { response in
                #expect(response.status == .tooManyRequests)
                #expect(response.headers[retryAfterField] == "1")
            }
            clock.advance(by: .milliseconds(1))
            try await client.execute(uri: "/", method: .get, headers: a) { response in
                #expect(response.status == .ok)
                #expect(response.headers[rateLimitField] == "\"default\";r=0;t=10")
            }
            // No key: not limited.
            for _ in 0..<5 {
                try await client.execute(uri: "/", method: .get) { response in
                    #expect(response.status == .ok)
                    #expect(response.headers[rateLimitField] == nil)
                }
            }
        }
        #expect(limiter.statistics.admitted == 4)
        #expect(limiter.statistics.dropped == 2)
    }

    @Test("a cost from the request counts that many units; above the burst: 429 without Retry-After")
    func cost() async throws {
        let clock = ManualLimiterClock()
        let limiter = try RateLimiter<String>(limit: 4, per: .seconds(4), scheduler: .manual(clock))
        try await app(headerKeyed(limiter)).test(.router) { client in
            try await client.execute(uri: "/", method: .get, headers: [clientID: "a", costField: "3"]) { response in
                #expect(response.status == .ok)
                #expect(response.headers[rateLimitField] == "\"default\";r=1;t=3")
            }
            try await client.execute(uri: "/", method: .get, headers: [clientID: "a", costField: "2"]) { response in
                #expect(response.status == .tooManyRequests)
                #expect(response.headers[retryAfterField] == "1")
            }
            try await client.execute(uri: "/", method: .get, headers: [clientID: "b", costField: "5"]) { response in
                #expect(response.status == .tooManyRequests)
                #expect(response.headers[retryAfterField] == nil)
                #expect(String(buffer: response.body).contains("never be admitted"))
            }
        }
    }

    @Test("shadow mode decides, counts and adds the fields, but never rejects")
    func shadow() async throws {
        let clock = ManualLimiterClock()
        let limiter = try RateLimiter<String>(limit: 1, per: .seconds(1), scheduler: .manual(clock))
        try await app(headerKeyed(limiter, shadow: true)).test(.router) { client in
            for expected in ["\"default\";r=0;t=1", "\"default\";r=0;t=1", "\"default\";r=0;t=1"] {
                try await client.execute(uri: "/", method: .get, headers: [clientID: "a"]) { response in
                    #expect(response.status == .ok)
                    #expect(response.headers[rateLimitField] == expected)
                    #expect(response.headers[retryAfterField] == nil)
                }
            }
        }
        #expect(limiter.statistics.admitted == 1)
        #expect(limiter.statistics.dropped == 2)
    }

    @Test("at the key cap: 503 problem (or through with .allow), and the observer is told")
    func keyCap() async throws {
        let clock = ManualLimiterClock()
        let limiter = try RateLimiter<String>(limit: 1, per: .seconds(60), scheduler: .manual(clock), maxKeys: 1)
        let failures = FailureLog()
        let middleware = RateLimitMiddleware<BasicRequestContext>(
            limiter, failureObserver: { key, error in failures.add(key, error) },
            key: { request, _ in request.headers[clientID] })
        try await app(middleware).test(.router) { client in
            try await client.execute(uri: "/", method: .get, headers: [clientID: "a"]) { #expect($0.status == .ok) }
            try await client.execute(uri: "/", method: .get, headers: [clientID: "b"]) { response in
                #expect(response.status == .serviceUnavailable)
                #expect(response.headers[.contentType] == "application/problem+json")
                #expect(String(buffer: response.body).contains("\"status\":503"))
            }
            let long = String(repeating: "x", count: 2_000)
            try await client.execute(uri: "/", method: .get, headers: [clientID: long]) { response in
                #expect(response.status.code == 431)
            }
        }
        #expect(failures.entries() == ["b: full", "\(String(repeating: "x", count: 2_000)): keyTooLong"])
        let allowing = RateLimitMiddleware<BasicRequestContext>(limiter, onFailure: .allow) { request, _ in
            request.headers[clientID]
        }
        try await app(allowing).test(.router) { client in
            try await client.execute(uri: "/", method: .get, headers: [clientID: "c"]) { response in
                #expect(response.status == .ok)
                #expect(response.headers[rateLimitField] == nil)
            }
        }
        #expect(limiter.statistics.refusedAtCap == 2)
    }

    @Test("keyed by client address on a live server; X-Forwarded-For only from a trusted proxy")
    func clientAddress() async throws {
        for trusted in [false, true] {
            let limiter = try RateLimiter<String>(limit: 1, per: .seconds(3600))
            let router = Router(context: ClientAddressContext.self)
            router.add(
                middleware: RateLimitMiddleware(
                    limiter, forwardedHeaders: trusted ? .trust(["127.0.0.1", "::1"]) : .ignore))
            router.get("/") { _, _ in "ok" }
            let app = Application(router: router, configuration: .init(address: .hostname("127.0.0.1", port: 0)))
            try await app.test(.live) { client in
                try await client.execute(uri: "/", method: .get, headers: [xffField: "203.0.113.1"]) {
                    #expect($0.status == .ok)
                }
                try await client.execute(uri: "/", method: .get, headers: [xffField: "203.0.113.2"]) {
                    // Untrusted: both are 127.0.0.1 (the second is refused); trusted: two clients.
                    #expect($0.status == (trusted ? .ok : .tooManyRequests))
                }
                try await client.execute(
                    uri: "/", method: .get, headers: [xffField: "203.0.113.1, 127.0.0.1"]
                ) {
                    #expect($0.status == .tooManyRequests)  // trusted: 203.0.113.1 again
                }
            }
        }
    }

    @Test(
        "plan(_:), exempting(_:) and costs(_:): every quota of the plan, a quota-exceeded 429, exempt and costed routes"
    )
    func plansExemptionsAndCosts() async throws {
        let clock = ManualLimiterClock()
        let plans = [
            RatePlan("free", quotas: [.init("hour", limit: 2, per: .seconds(3600))]),
            RatePlan(
                "pro",
                quotas: [.init("second", limit: 2, per: .seconds(1)), .init("hour", limit: 100, per: .seconds(3600))]),
        ]
        let limiter = try RateLimiter<String>(plans: plans, scheduler: .manual(clock))
        let planField = HTTPField.Name("X-Plan")!
        let middleware = RateLimitMiddleware<BasicRequestContext>(limiter) { request, _ in request.headers[clientID] }
            .plan { request, _ in request.headers[planField] }
            .exempting { request, _ in request.uri.path == "/health" }
            .costs(RouteCosts(["/search": 2]))
        let router = Router()
        router.add(middleware: middleware)
        router.get("/") { _, _ in "ok" }
        router.get("/health") { _, _ in "up" }
        router.get("/search") { _, _ in "found" }
        try await Application(responder: router.buildResponder()).test(.router) { client in
            let pro: HTTPFields = [clientID: "p", planField: "pro"]
            try await client.execute(uri: "/", method: .get, headers: pro) { response in
                #expect(response.status == .ok)
                #expect(response.headers[ratePolicyField] == #""second";q=2;w=1, "hour";q=100;w=3600"#)
                #expect(response.headers[rateLimitField] == #""second";r=1;t=1, "hour";r=99;t=36"#)
            }
            // /search costs 2: "second" has 1 left, so it refuses; "hour" would admit.
            try await client.execute(uri: "/search", method: .get, headers: pro) { response in
                #expect(response.status == .tooManyRequests)
                #expect(response.headers[retryAfterField] == "1")
                let body =
                    try JSONSerialization.jsonObject(with: Data(String(buffer: response.body).utf8)) as? [String: Any]
                #expect(body?["type"] as? String == RateLimitGate.quotaExceededType)
                #expect(body?["violated-policies"] as? [String] == ["second"])
            }
            // The health check is never limited and carries no fields.
            for _ in 0..<5 {
                try await client.execute(uri: "/health", method: .get, headers: pro) { response in
                    #expect(response.status == .ok && response.headers[rateLimitField] == nil)
                }
            }
            // No X-Plan: the first plan, free (one quota).
            try await client.execute(uri: "/search", method: .get, headers: [clientID: "f"]) { response in
                #expect(response.status == .ok)
                #expect(response.headers[ratePolicyField] == #""hour";q=2;w=3600"#)
                #expect(response.headers[rateLimitField] == #""hour";r=0;t=3600"#)
            }
            // An unknown plan: no decision, 503.
            try await client.execute(uri: "/", method: .get, headers: [clientID: "g", planField: "gold"]) {
                #expect($0.status == .serviceUnavailable)
            }
        }
    }

    @Test("address keys mask IPv6 to /64 by default, to the prefix given otherwise")
    func ipv6Prefix() async throws {
        for prefix in [64, 128] {
            let limiter = try RateLimiter<String>(limit: 1, per: .seconds(3600))
            let router = Router(context: ClientAddressContext.self)
            router.add(
                middleware: RateLimitMiddleware(
                    limiter, forwardedHeaders: .trust(["127.0.0.1"]), ipv6PrefixLength: prefix))
            router.get("/") { _, _ in "ok" }
            let app = Application(router: router, configuration: .init(address: .hostname("127.0.0.1", port: 0)))
            try await app.test(.live) { client in
                try await client.execute(uri: "/", method: .get, headers: [xffField: "2001:db8:1:2::1"]) {
                    #expect($0.status == .ok)
                }
                // Another address of the same /64: the same client unless keyed on all 128 bits.
                try await client.execute(uri: "/", method: .get, headers: [xffField: "2001:db8:1:2::99"]) {
                    #expect($0.status == (prefix == 64 ? .tooManyRequests : .ok))
                }
                // Another /64: always another client.
                try await client.execute(uri: "/", method: .get, headers: [xffField: "2001:db8:1:3::1"]) {
                    #expect($0.status == .ok)
                }
            }
        }
    }

    /// The rule of SluiceHTTP's ClientID through the middleware: the strings are the
    /// ones Hummingbird makes of the bytes (invalid UTF-8 becomes U+FFFD).
    @Test("client ids: trimmed, empty is absent, U+FFFD / control / non-ASCII / comma / twice answered 400")
    func clientIDRule() async throws {
        let limiter = try RateLimiter<String>(limit: 2, per: .seconds(3600))
        let middleware = RateLimitMiddleware<BasicRequestContext>(limiter) { request, _ in
            try RateLimitMiddleware<BasicRequestContext>.clientID(request, field: clientID)
        }
        try await app(middleware).test(.router) { client in
            // " a " and "a" are one client: its second request has 0 left.
            try await client.execute(uri: "/", method: .get, headers: [clientID: " a\t"]) {
                #expect($0.status == .ok)
                #expect($0.headers[rateLimitField] == "\"default\";r=1;t=1800")
            }
            try await client.execute(uri: "/", method: .get, headers: [clientID: "a"]) {
                #expect($0.headers[rateLimitField] == "\"default\";r=0;t=3600")
            }
            // Empty after trimming: no id (this key closure: not limited).
            try await client.execute(uri: "/", method: .get, headers: [clientID: "  "]) {
                #expect($0.status == .ok)
                #expect($0.headers[rateLimitField] == nil)
            }
            let refused: [(String, String)] = [
                ("\u{FFFD}", "is not valid UTF-8"), ("caf\u{FFFD}", "is not valid UTF-8"),
                ("café", "not ASCII"), ("a\tb", "control character"), ("a b", "a space"),
                ("dup1, dup2", "comma"),
            ]
            for (value, reason) in refused {
                try await client.execute(uri: "/", method: .get, headers: [clientID: value]) { response in
                    #expect(response.status == .badRequest, "\(value)")
                    #expect(response.headers[.contentType] == "application/problem+json")
                    #expect(response.headers[rateLimitField] == nil)
                    let body =
                        try JSONSerialization.jsonObject(with: Data(String(buffer: response.body).utf8))
                        as? [String: Any]
                    #expect(body?["status"] as? Int == 400)
                    #expect((body?["detail"] as? String)?.contains(reason) == true, "\(value): \(body ?? [:])")
                }
            }
            var twice = HTTPFields()
            twice.append(HTTPField(name: clientID, value: "dup1"))
            twice.append(HTTPField(name: clientID, value: "dup2"))
            try await client.execute(uri: "/", method: .get, headers: twice) { response in
                #expect(response.status == .badRequest)
                #expect(String(buffer: response.body).contains("X-Client-Id field is sent more than once"))
            }
        }
        #expect(limiter.statistics.liveKeys == 1, "only \"a\" became a key")
    }

    @Test("ClientID.parse: the rule, value by value")
    func clientIDParse() throws {
        #expect(try ClientID.parse([], field: "X") == nil)
        #expect(try ClientID.parse([" \t "], field: "X") == nil)
        #expect(try ClientID.parse([" key-1_~! "], field: "X") == "key-1_~!")
        #expect(throws: InvalidClientID(field: "X", reason: "is sent more than once")) {
            try ClientID.parse(["a", "a"], field: "X")
        }
        #expect(throws: InvalidClientID(field: "X", reason: "contains a control character")) {
            try ClientID.parse(["a\u{0}b"], field: "X")
        }
    }

    /// ClientAddressContext and the id-else-address key on a live server: an empty or
    /// absent id is the address's quota; a real id has its own.
    @Test("clientIDField: the id, else the client address (live, ClientAddressContext)")
    func clientIDElseAddress() async throws {
        let limiter = try RateLimiter<String>(limit: 1, per: .seconds(3600))
        let router = Router(context: ClientAddressContext.self)
        router.add(middleware: RateLimitMiddleware(limiter, clientIDField: "X-Client-Id"))
        router.get("/") { request, context in
            try RateLimitMiddleware<ClientAddressContext>.clientKey(request, context, clientIDField: clientID) ?? "?"
        }
        let app = Application(router: router, configuration: .init(address: .hostname("127.0.0.1", port: 0)))
        try await app.test(.live) { client in
            try await client.execute(uri: "/", method: .get) {
                #expect($0.status == .ok)
                #expect(String(buffer: $0.body) == "127.0.0.1")
            }
            try await client.execute(uri: "/", method: .get, headers: [clientID: " "]) {
                #expect($0.status == .tooManyRequests, "an empty id is the address's quota")
            }
            try await client.execute(uri: "/", method: .get, headers: [clientID: "k1"]) {
                #expect($0.status == .ok)
                #expect(String(buffer: $0.body) == "k1")
            }
        }
    }

    /// A handler that throws: the answer Hummingbird makes of the error keeps its
    /// status and body and carries both fields (the error's own headers kept).
    @Test(
        "an error thrown by the handler is answered with the RateLimit fields", arguments: ["http", "custom", "plain"])
    func thrownError(kind: String) async throws {
        let clock = ManualLimiterClock()
        let limiter = try RateLimiter<String>(limit: 2, per: .seconds(10), scheduler: .manual(clock))
        let router = Router()
        router.add(middleware: headerKeyed(limiter))
        router.get("/") { _, _ -> String in
            switch kind {
            case "http":
                throw HTTPError(.notFound, headers: [HTTPField.Name("X-Own")!: "kept"], message: "no such thing")
            case "custom": throw TeapotError()
            default: throw PlainError()
            }
        }
        try await Application(responder: router.buildResponder()).test(.router) { client in
            for expected in ["\"default\";r=1;t=5", "\"default\";r=0;t=10"] {
                try await client.execute(uri: "/", method: .get, headers: [clientID: "a"]) { response in
                    #expect(response.headers[ratePolicyField] == "\"default\";q=2;w=10")
                    #expect(response.headers[rateLimitField] == expected)
                    #expect(response.headers[values: rateLimitField].count == 1)
                    switch kind {
                    case "http":
                        #expect(response.status == .notFound)
                        #expect(response.headers[HTTPField.Name("X-Own")!] == "kept")
                        #expect(String(buffer: response.body).contains("no such thing"))
                    case "custom":
                        #expect(response.status.code == 418)
                        #expect(response.headers[HTTPField.Name("X-Teapot")!] == "yes")
                        #expect(String(buffer: response.body) == "short and stout")
                    default:
                        #expect(response.status == .internalServerError)
                    }
                }
            }
            // The third is refused before the handler: the 429 as usual.
            try await client.execute(uri: "/", method: .get, headers: [clientID: "a"]) { response in
                #expect(response.status == .tooManyRequests)
                #expect(response.headers[retryAfterField] == "5")
            }
        }
    }

    @Test("forwarding headers: parsing and trust")
    func forwardedParsing() {
        let trust = ForwardedHeaders.trust(["10.0.0.1", "10.0.0.2"])
        #expect(
            ForwardedHeaders.ignore.clientAddress(peer: "10.0.0.1", forwarded: [], xForwardedFor: ["1.2.3.4"])
                == "10.0.0.1")
        #expect(trust.clientAddress(peer: "9.9.9.9", forwarded: [], xForwardedFor: ["1.2.3.4"]) == "9.9.9.9")
        #expect(
            trust.clientAddress(peer: "10.0.0.1", forwarded: [], xForwardedFor: ["1.2.3.4, 5.6.7.8, 10.0.0.2"])
                == "5.6.7.8")
        #expect(
            trust.clientAddress(peer: "10.0.0.1", forwarded: [], xForwardedFor: ["1.2.3.4", "5.6.7.8:99"]) == "5.6.7.8")
        #expect(trust.clientAddress(peer: "10.0.0.1", forwarded: [], xForwardedFor: ["10.0.0.2"]) == "10.0.0.2")
        #expect(trust.clientAddress(peer: "10.0.0.1", forwarded: [], xForwardedFor: []) == "10.0.0.1")
        #expect(
            trust.clientAddress(
                peer: "10.0.0.1",
                forwarded: ["for=192.0.2.60;proto=http;by=203.0.113.43, for=\"[2001:db8:cafe::17]:4711\""],
                xForwardedFor: ["6.6.6.6"]) == "2001:db8:cafe::17")
        #expect(
            trust.clientAddress(peer: "10.0.0.1", forwarded: ["For=\"192.0.2.43:47011\""], xForwardedFor: [])
                == "192.0.2.43")
    }

    @Test(
        "the RateLimit value is written without interpolation, digits exact up to Int.max; the policy field made once")
    func rateLimitValue() throws {
        let limiter = try RateLimiter<String>(limit: 5, per: .seconds(7), scheduler: .manual(ManualLimiterClock()))
        for name in ["default", "a-much-longer-policy-name"] {
            let gate = RateLimitGate(limiter, policyName: name)
            #expect(gate.ratePolicyValue == "\"\(name)\";q=5;w=7")
            for (r, t) in [(0, 0), (9, 10), (10, 9), (1_234_567_890, Int.max), (Int.max, 1)] {
                #expect(gate.rateLimitValue(remaining: r, seconds: t) == "\"\(name)\";r=\(r);t=\(t)")
            }
            #expect(gate.rateLimitValue(remaining: -3, seconds: -1) == "\"\(name)\";r=0;t=0")
        }
    }

    @Test("problem details escape JSON")
    func problemJSON() throws {
        let text = RateLimitGate.problem(status: 429, title: "a\"b", detail: "c\\d\n\u{1}")
        let object = try JSONSerialization.jsonObject(with: Data(text.utf8)) as? [String: Any]
        #expect(object?["title"] as? String == "a\"b")
        #expect(object?["detail"] as? String == "c\\d\n\u{1}")
    }
}

/// An error that makes its own answer (418, a header, a body).
struct TeapotError: HTTPResponseError {
    var status: HTTPResponse.Status { .init(code: 418) }
    func response(from request: Request, context: some RequestContext) throws -> Response {
        Response(
            status: status, headers: [HTTPField.Name("X-Teapot")!: "yes"],
            body: ResponseBody(byteBuffer: ByteBuffer(string: "short and stout")))
    }
}

/// An error Hummingbird knows nothing about (a 500).
struct PlainError: Error {}

final class FailureLog: Sendable {
    private let lines = Mutex<[String]>([])
    func add(_ key: String, _ error: any Error) {
        let name =
            switch error as? LimiterError {
            case .full?: "full"
            case .keyTooLong?: "keyTooLong"
            default: "\(error)"
            }
        lines.withLock { $0.append("\(key): \(name)") }
    }
    func entries() -> [String] { lines.withLock { $0 } }
}

import Synchronization
#endif
