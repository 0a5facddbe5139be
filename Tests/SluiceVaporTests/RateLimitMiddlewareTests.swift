#if Vapor
import Foundation
import Sluice
import SluiceHTTP
import SluiceVapor
import Testing
import Vapor
import VaporTesting

@Suite("Vapor rate-limit middleware")
struct RateLimitMiddlewareTests {
    /// 2 per 10 s (one unit back every 5 s), on a manual clock: values by hand.
    @Test("admits the quota, then 429 with Retry-After, RateLimit fields and a problem body; shadow never rejects")
    func quota() async throws {
        for shadow in [false, true] {
            let clock = ManualLimiterClock()
            let limiter = try RateLimiter<String>(limit: 2, per: .seconds(10), scheduler: .manual(clock))
            try await withApp { app in
                app.grouped(
                    RateLimitMiddleware(
                        limiter, shadow: shadow, cost: { Int($0.headers.first(name: "X-Cost") ?? "") ?? 1 },
                        key: { $0.headers.first(name: "X-Client-Id") })
                ).get { _ in "ok" }
                let a: HTTPHeaders = ["X-Client-Id": "a"]
                try await app.testing().test(.GET, "/", headers: a) { response in
                    #expect(response.status == .ok)
                    #expect(response.headers.first(name: "RateLimit-Policy") == "\"default\";q=2;w=10")
                    #expect(response.headers.first(name: "RateLimit") == "\"default\";r=1;t=5")
                }
                try await app.testing().test(.GET, "/", headers: a) { response in
                    #expect(response.headers.first(name: "RateLimit") == "\"default\";r=0;t=10")
                }
                try await app.testing().test(.GET, "/", headers: a) { response in
                    #expect(response.headers.first(name: "RateLimit") == "\"default\";r=0;t=10")
                    if shadow {
                        #expect(response.status == .ok)
                        #expect(response.headers.first(name: "Retry-After") == nil)
                    } else {
                        #expect(response.status == .tooManyRequests)
                        #expect(response.headers.first(name: "Retry-After") == "5")
                        #expect(response.headers.first(name: "Content-Type") == "application/problem+json")
                        let body =
                            try JSONSerialization.jsonObject(with: Data(response.body.readableBytesView))
                            as? [String: Any]
                        #expect(body?["status"] as? Int == 429)
                        #expect(body?["title"] as? String == "Too Many Requests")
                        #expect(body?["type"] as? String == "about:blank")
                    }
                }
                clock.advance(by: .seconds(5))
                try await app.testing().test(.GET, "/", headers: ["X-Client-Id": "a", "X-Cost": "2"]) { response in
                    #expect(response.status == (shadow ? .ok : .tooManyRequests))
                }
                try await app.testing().test(.GET, "/", headers: a) { response in
                    #expect(response.status == .ok)
                }
                try await app.testing().test(.GET, "/") { response in
                    #expect(response.status == .ok)
                    #expect(response.headers.first(name: "RateLimit") == nil, "no key: not limited")
                }
            }
            #expect(limiter.statistics.admitted == 3)
            #expect(limiter.statistics.dropped == 2)
        }
    }

    /// A handler that throws: the answer ErrorMiddleware makes of the error keeps
    /// its status, reason and headers, and carries both fields.
    @Test(
        "an error thrown by the handler is answered with the RateLimit fields", arguments: ["abort", "custom", "plain"])
    func thrownError(kind: String) async throws {
        let clock = ManualLimiterClock()
        let limiter = try RateLimiter<String>(limit: 2, per: .seconds(10), scheduler: .manual(clock))
        try await withApp { app in
            app.grouped(RateLimitMiddleware(limiter, key: { $0.headers.first(name: "X-Client-Id") }))
                .get { _ -> String in
                    switch kind {
                    case "abort": throw Abort(.notFound, headers: ["X-Own": "kept"], reason: "no such thing")
                    case "custom": throw TeapotError()
                    default: throw PlainError()
                    }
                }
            for expected in ["\"default\";r=1;t=5", "\"default\";r=0;t=10"] {
                try await app.testing().test(.GET, "/", headers: ["X-Client-Id": "a"]) { response in
                    #expect(response.headers.first(name: "RateLimit-Policy") == "\"default\";q=2;w=10")
                    #expect(response.headers.first(name: "RateLimit") == expected)
                    #expect(response.headers["RateLimit"].count == 1)
                    let reason =
                        (try? JSONSerialization.jsonObject(with: Data(response.body.readableBytesView))
                        as? [String: Any])?["reason"] as? String
                    switch kind {
                    case "abort":
                        #expect(response.status == .notFound)
                        #expect(response.headers.first(name: "X-Own") == "kept")
                        #expect(reason == "no such thing")
                    case "custom":
                        #expect(response.status.code == 418)
                        #expect(response.headers.first(name: "X-Teapot") == "yes")
                        #expect(reason == "short and stout")
                    default:
                        #expect(response.status == .internalServerError)
                    }
                }
            }
            try await app.testing().test(.GET, "/", headers: ["X-Client-Id": "a"]) { response in
                #expect(response.status == .tooManyRequests)
                #expect(response.headers.first(name: "Retry-After") == "5")
            }
        }
    }

    /// The same rule as Hummingbird's (SluiceHTTP's ClientID): the strings are the ones
    /// Vapor makes of the bytes (invalid UTF-8 becomes U+FFFD).
    @Test("client ids: trimmed, empty is absent, U+FFFD / control / non-ASCII / comma / twice answered 400")
    func clientIDRule() async throws {
        let limiter = try RateLimiter<String>(limit: 2, per: .seconds(3600))
        try await withApp { app in
            app.grouped(
                RateLimitMiddleware(limiter) { request in
                    try RateLimitMiddleware.clientID(request, field: "X-Client-Id")
                }
            ).get { _ in "ok" }
            try await app.testing().test(.GET, "/", headers: ["X-Client-Id": " a\t"]) {
                #expect($0.status == .ok)
                #expect($0.headers.first(name: "RateLimit") == "\"default\";r=1;t=1800")
            }
            try await app.testing().test(.GET, "/", headers: ["X-Client-Id": "a"]) {
                #expect($0.headers.first(name: "RateLimit") == "\"default\";r=0;t=3600")
            }
            try await app.testing().test(.GET, "/", headers: ["X-Client-Id": "  "]) {
                #expect($0.status == .ok)
                #expect($0.headers.first(name: "RateLimit") == nil, "empty: no id")
            }
            let refused: [(String, String)] = [
                ("\u{FFFD}", "is not valid UTF-8"), ("café", "not ASCII"), ("a\tb", "control character"),
                ("a b", "a space"),
                ("dup1, dup2", "comma"),
            ]
            for (value, reason) in refused {
                try await app.testing().test(.GET, "/", headers: ["X-Client-Id": value]) { response in
                    #expect(response.status == .badRequest, "\(value)")
                    #expect(response.headers.first(name: "Content-Type") == "application/problem+json")
                    #expect(response.body.string.contains(reason), "\(value): \(response.body.string)")
                }
            }
            let twice = HTTPHeaders([("X-Client-Id", "dup1"), ("X-Client-Id", "dup2")])
            try await app.testing().test(.GET, "/", headers: twice) { response in
                #expect(response.status == .badRequest)
                #expect(response.body.string.contains("X-Client-Id field is sent more than once"))
            }
        }
        #expect(limiter.statistics.liveKeys == 1, "only \"a\" became a key")
    }

    @Test("clientIDField: the id, else the peer address (running server)")
    func clientIDElseAddress() async throws {
        let limiter = try RateLimiter<String>(limit: 1, per: .seconds(3600))
        try await withApp { app in
            app.grouped(RateLimitMiddleware(limiter, clientIDField: "X-Client-Id")).get { request in
                try RateLimitMiddleware.clientKey(request, clientIDField: "X-Client-Id") ?? "?"
            }
            let tester = try app.testing(method: .running(hostname: "127.0.0.1", port: 0))
            try await tester.test(.GET, "/") {
                #expect($0.status == .ok)
                #expect($0.body.string == "127.0.0.1")
            }
            try await tester.test(.GET, "/", headers: ["X-Client-Id": " "]) {
                #expect($0.status == .tooManyRequests, "an empty id is the address's quota")
            }
            try await tester.test(.GET, "/", headers: ["X-Client-Id": "k1"]) {
                #expect($0.status == .ok)
                #expect($0.body.string == "k1")
            }
        }
    }

    @Test("keyed by the peer address on a running server; X-Forwarded-For only from a trusted proxy")
    func clientAddress() async throws {
        for trusted in [false, true] {
            let limiter = try RateLimiter<String>(limit: 1, per: .seconds(3600))
            try await withApp { app in
                app.grouped(
                    RateLimitMiddleware(limiter, forwardedHeaders: trusted ? .trust(["127.0.0.1", "::1"]) : .ignore)
                ).get { _ in "ok" }
                let tester = try app.testing(method: .running(hostname: "127.0.0.1", port: 0))
                try await tester.test(.GET, "/", headers: ["X-Forwarded-For": "203.0.113.1"]) {
                    #expect($0.status == .ok)
                }
                try await tester.test(.GET, "/", headers: ["X-Forwarded-For": "203.0.113.2"]) {
                    #expect($0.status == (trusted ? .ok : .tooManyRequests))
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
        try await withApp { app in
            let limited = app.grouped(
                RateLimitMiddleware(limiter) { $0.headers.first(name: "X-Client-Id") }
                    .plan { $0.headers.first(name: "X-Plan") }
                    .exempting { $0.url.path == "/health" }
                    .costs(RouteCosts(["/search": 2])))
            limited.get { _ in "ok" }
            limited.get("health") { _ in "up" }
            limited.get("search") { _ in "found" }
            let pro: HTTPHeaders = ["X-Client-Id": "p", "X-Plan": "pro"]
            try await app.testing().test(.GET, "/", headers: pro) { response in
                #expect(response.status == .ok)
                #expect(response.headers.first(name: "RateLimit-Policy") == #""second";q=2;w=1, "hour";q=100;w=3600"#)
                #expect(response.headers.first(name: "RateLimit") == #""second";r=1;t=1, "hour";r=99;t=36"#)
            }
            // /search costs 2: "second" has 1 left, so it refuses; "hour" would admit.
            try await app.testing().test(.GET, "/search", headers: pro) { response in
                #expect(response.status == .tooManyRequests)
                #expect(response.headers.first(name: "Retry-After") == "1")
                let body = try JSONSerialization.jsonObject(with: Data(response.body.string.utf8)) as? [String: Any]
                #expect(body?["type"] as? String == RateLimitGate.quotaExceededType)
                #expect(body?["violated-policies"] as? [String] == ["second"])
            }
            // The health check is never limited and carries no fields.
            for _ in 0..<5 {
                try await app.testing().test(.GET, "/health", headers: pro) { response in
                    #expect(response.status == .ok && response.headers.first(name: "RateLimit") == nil)
                }
            }
            // No X-Plan: the first plan, free (one quota).
            try await app.testing().test(.GET, "/search", headers: ["X-Client-Id": "f"]) { response in
                #expect(response.status == .ok)
                #expect(response.headers.first(name: "RateLimit-Policy") == #""hour";q=2;w=3600"#)
                #expect(response.headers.first(name: "RateLimit") == #""hour";r=0;t=3600"#)
            }
            // An unknown plan: no decision, 503.
            try await app.testing().test(.GET, "/", headers: ["X-Client-Id": "g", "X-Plan": "gold"]) {
                #expect($0.status == .serviceUnavailable)
            }
        }
    }

    @Test("address keys mask IPv6 to /64 by default, to the prefix given otherwise")
    func ipv6Prefix() async throws {
        for prefix in [64, 128] {
            let limiter = try RateLimiter<String>(limit: 1, per: .seconds(3600))
            try await withApp { app in
                app.grouped(
                    RateLimitMiddleware(limiter, forwardedHeaders: .trust(["127.0.0.1"]), ipv6PrefixLength: prefix)
                ).get { _ in "ok" }
                let tester = try app.testing(method: .running(hostname: "127.0.0.1", port: 0))
                try await tester.test(.GET, "/", headers: ["X-Forwarded-For": "2001:db8:1:2::1"]) {
                    #expect($0.status == .ok)
                }
                // Another address of the same /64: the same client unless keyed on all 128 bits.
                try await tester.test(.GET, "/", headers: ["X-Forwarded-For": "2001:db8:1:2::99"]) {
                    #expect($0.status == (prefix == 64 ? .tooManyRequests : .ok))
                }
                // Another /64: always another client.
                try await tester.test(.GET, "/", headers: ["X-Forwarded-For": "2001:db8:1:3::1"]) {
                    #expect($0.status == .ok)
                }
            }
        }
    }
}

/// An AbortError of its own (418, a header, a reason).
struct TeapotError: AbortError {
    var status: HTTPResponseStatus { .init(statusCode: 418) }
    var reason: String { "short and stout" }
    var headers: HTTPHeaders { ["X-Teapot": "yes"] }
}

/// An error Vapor knows nothing about (a 500).
struct PlainError: Error {}
#endif
