import CSluice
import Foundation
import Testing

@testable import Sluice

@Suite("Errors")
struct ErrorTests {
    @Test("every error describes itself in a sentence, in Swift's words", arguments: LimiterError.allCases)
    func sentences(_ error: LimiterError) {
        let text = error.description
        #expect(!text.isEmpty)
        #expect(text.first?.isUppercase == true && text.hasSuffix("."), "\(text)")
        #expect(!text.contains("SLUICE_"), "no C names in Swift messages: \(text)")
        #expect(!text.contains("Unknown"), "\(error.rawValue) is a known code")
        #expect("\(error)" == text)
        #expect(String(describing: error as any Error) == text)
        // Bridged to Foundation, the error still says what happened.
        let bridged = (error as any Error).localizedDescription
        #expect(bridged == text)
        #expect(!bridged.contains("could not be completed"))
        #expect(error.errorDescription == text)
        #expect(error.reason == nil)
        #expect(LimiterError(rawValue: error.rawValue) == error)
    }

    @Test("the C core's list of error codes and LimiterError agree, both ways")
    func cListAgrees() {
        let codes = (0..<sluice_error_count()).map { Int32(sluice_error_code($0)) }
        #expect(codes.contains(0), "the C list starts with success")
        let failures = codes.filter { $0 != 0 }
        #expect(Set(failures).count == failures.count, "C codes are distinct")
        for code in failures {
            let error = LimiterError(rawValue: code)
            #expect(
                LimiterError.allCases.contains(error),
                "C code \(code) (\(String(cString: sluice_strerror(code)))) has no LimiterError member")
            #expect(!error.description.isEmpty && !error.description.hasPrefix("Unknown"), "\(code)")
        }
        for error in LimiterError.allCases {
            #expect(failures.contains(error.rawValue), "LimiterError \(error.rawValue) is not a C code")
        }
    }

    @Test("the key-length message states the core's limit in bytes")
    func keyLengthInBytes() {
        #expect(LimiterError.keyTooLong.description.contains("\(SLUICE_KEY_MAX) bytes"))
    }

    @Test("an unknown code says so, with the code")
    func unknownCode() {
        let error = LimiterError(rawValue: -9999)
        #expect(error.description.contains("-9999"))
        #expect(!LimiterError.allCases.contains(error))
    }

    @Test("errors compare by code, so a reason does not stop a catch clause matching")
    func comparisonIgnoresReason() {
        let explained = LimiterError(.invalidArgument, reason: "Invalid thing.")
        #expect(explained == .invalidArgument)
        #expect(explained.hashValue == LimiterError.invalidArgument.hashValue)
        #expect(explained.description == "Invalid thing.")
        #expect((explained as any Error).localizedDescription == "Invalid thing.")
        var caught = false
        do { throw explained } catch LimiterError.invalidArgument { caught = true } catch {}
        #expect(caught)
    }

    /// Configurations that break one rule each, the option the message must
    /// name, and words of the rule.
    static let badPolicies: [(LimiterPolicy, [String])] = [
        (.throttle(interval: .milliseconds(-1)), ["throttle", "interval", "negative"]),
        (.throttle(interval: .seconds(1), leading: false, trailing: false), ["throttle", "leading", "trailing"]),
        (.audit(interval: .seconds(-3)), ["audit", "interval", "negative"]),
        (.audit(interval: .seconds(40 * 365 * 86_400)), ["audit", "interval", "10^18"]),
        (.debounce(interval: .seconds(1), leading: false, trailing: false), ["debounce", "leading", "trailing"]),
        (
            .debounce(interval: .seconds(1), maxWait: .milliseconds(500)),
            ["maxWait (0.5 seconds)", "interval (1.0 seconds)"]
        ),
        (.debounce(interval: .seconds(1), maxWait: .seconds(-1)), ["maxWait", "negative"]),
        (.rate(limit: 0, per: .seconds(1)), ["rate", "limit (0)", "at least 1"]),
        (.rate(limit: 2_000_000_000_000, per: .seconds(1)), ["limit", "10^12"]),
        (.rate(limit: 10, per: .zero), ["per", "nanosecond"]),
        (.rate(limit: 10, per: .seconds(1), burst: 0), ["burst (0)", "at least 1"]),
        (.rate(limit: 10, per: .seconds(1), burst: 2_000_000_000_000), ["burst", "10^12"]),
    ]

    @Test("a refused policy names the option and the rule, with the core's code", arguments: badPolicies)
    func policyReasons(_ policy: LimiterPolicy, _ words: [String]) {
        var thrown: LimiterError?
        do { try policy.validate() } catch { thrown = error }
        guard let thrown else {
            Issue.record("the core accepted \(policy)")
            return
        }
        let explained = LimiterError.explaining(thrown, policy: policy)
        #expect(explained == thrown, "the explanation keeps the core's code (\(thrown.rawValue)) for \(policy)")
        let reason = explained.reason ?? ""
        for word in words {
            #expect(reason.contains(word), "\(policy): \(reason)")
        }
        #expect(explained.description == reason)
        #expect(!reason.contains("SLUICE_") && !reason.contains("_ns"), "\(reason)")
    }

    @Test("creating a limiter with a bad option throws the explained error (as the README shows)")
    func limiterCreationExplains() {
        do {
            _ = try Limiter<String, Int>(
                .debounce(interval: .seconds(1), maxWait: .milliseconds(500)), scheduler: .manual(ManualLimiterClock())
            ) { _, _ in }
            Issue.record("a maxWait below the interval was accepted")
        } catch {
            #expect(error == .invalidArgument)
            #expect(
                "\(error)".hasPrefix(
                    "Invalid debounce policy: maxWait (0.5 seconds) is shorter than interval (1.0 seconds); "),
                "\(error)")
        }
        do {
            _ = try RateLimiter<String>(limit: 0, per: .seconds(1), scheduler: .manual(ManualLimiterClock()))
            Issue.record("a limit of 0 was accepted")
        } catch {
            #expect(error.reason?.contains("limit (0)") == true, "\(error)")
        }
    }

    @Test("valid policies have no problem to explain")
    func validPolicies() throws {
        for policy: LimiterPolicy in [
            .throttle(interval: .zero), .audit(interval: .seconds(1)),
            .debounce(interval: .seconds(1), maxWait: .seconds(1)), .rate(limit: 1, per: .nanoseconds(1), burst: 1),
        ] {
            try policy.validate()
            #expect(policy.problem == nil)
            #expect(LimiterError.explaining(.invalidArgument, policy: policy).reason == nil)
        }
        #expect(
            LimiterError.explaining(.closed, policy: .rate(limit: 0, per: .seconds(1))).reason == nil,
            "only configuration errors are explained")
    }

    @Test("maxKeys and tick: invalid values are refused and named")
    func optionReasons() {
        let policy = LimiterPolicy.throttle(interval: .seconds(1))
        for (maxKeys, tick, words) in [
            (-1, nil, ["maxKeys (-1)", "nil for no cap"]),
            (0, nil, ["maxKeys (0)", "at least 1", "nil for no cap"]),
            (nil, Duration.zero, ["tick", "more than zero"]),
            (nil, Duration.seconds(2), ["tick (2.0 seconds)", "one second"]),
        ] as [(Int?, Duration?, [String])] {
            let error = LimiterError.explaining(.invalidArgument, policy: policy, maxKeys: maxKeys, tick: tick)
            for word in words {
                #expect(error.description.contains(word), "\(error)")
            }
            #expect(throws: LimiterError.invalidArgument) {
                try Limiter<Int, Int>(
                    policy, scheduler: .manual(ManualLimiterClock()), maxKeys: maxKeys, tick: tick,
                    delivery: .handler { _, _ in })
            }
        }
        // nil is "no cap"; 1 is the smallest cap.
        #expect(LimiterError.problem(maxKeys: nil) == nil)
        #expect(LimiterError.problem(maxKeys: 1) == nil)
    }

    @Test("maxKeys: 0 is refused, naming maxKeys, by every limiter that takes it (it used to mean no cap)")
    func maxKeysZero() throws {
        let clock = ManualLimiterClock()
        func expectRefused(_ what: String, _ body: () throws -> Void) {
            do {
                try body()
                Issue.record("\(what): maxKeys 0 was accepted")
            } catch {
                #expect(error as? LimiterError == .invalidArgument, "\(what)")
                #expect(
                    "\(error)" == "Invalid maxKeys (0): it must be at least 1, or nil for no cap on keys.",
                    "\(what): \(error)")
            }
        }
        expectRefused("Limiter, handler") {
            _ = try Limiter<String, Int>(.throttle(interval: .seconds(1)), scheduler: .manual(clock), maxKeys: 0) {
                _, _ in
            }
        }
        expectRefused("Limiter, delivery") {
            _ = try Limiter<Int, Int>(
                .debounce(interval: .seconds(1)), scheduler: .manual(clock), maxKeys: 0, delivery: .handler { _, _ in })
        }
        expectRefused("Limiter.makeStream") {
            _ = try Limiter<Int, Int>.makeStream(.audit(interval: .seconds(1)), scheduler: .manual(clock), maxKeys: 0)
        }
        expectRefused("RateLimiter, policy") {
            _ = try RateLimiter<String>(.rate(limit: 1, per: .seconds(1)), scheduler: .manual(clock), maxKeys: 0)
        }
        expectRefused("RateLimiter, limit per") {
            _ = try RateLimiter<String>(limit: 1, per: .seconds(1), scheduler: .manual(clock), maxKeys: 0)
        }
        expectRefused("RateLimiter on a loop") {
            _ = try RateLimiter<String>(limit: 1, per: .seconds(1), maxKeys: 0)
        }
        // A cap of 1 is a cap: the second key is refused.
        let one = try RateLimiter<String>(limit: 1, per: .seconds(1), scheduler: .manual(clock), maxKeys: 1)
        _ = try one.check("a")
        #expect(throws: LimiterError.full) { try one.check("b") }
    }
}
