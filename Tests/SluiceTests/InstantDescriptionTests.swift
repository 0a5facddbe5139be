import Testing

@testable import Sluice

/// How instants and decisions print: seconds with six decimals, the clock
/// named, waits counted from the decision (issue 21, 3.5).
@Suite("Instant and decision descriptions")
struct InstantDescriptionTests {
    @Test("an instant prints as seconds with six decimals on the limiter clock")
    func instants() {
        #expect(LimiterInstant(nanoseconds: 0).description == "0.000000s on the limiter clock")
        #expect(LimiterInstant(nanoseconds: 1_500_000_000).description == "1.500000s on the limiter clock")
        // The issue's example, t+32m59.628459767s: plain seconds, the nanoseconds cut off.
        #expect(LimiterInstant(nanoseconds: 1_979_628_459_767).description == "1979.628459s on the limiter clock")
        #expect(LimiterInstant(nanoseconds: 7_205_000_000_001).description == "7205.000000s on the limiter clock")
        #expect(LimiterInstant(nanoseconds: 999).description == "0.000000s on the limiter clock")
        #expect(LimiterInstant(nanoseconds: 1_000).description == "0.000001s on the limiter clock")
        #expect(LimiterInstant(nanoseconds: .max).description == "18446744073.709551s on the limiter clock")
    }

    @Test("a limiter decision names its instant the same way")
    func limiterDecisions() throws {
        let t = LimiterInstant(nanoseconds: 1_500_000_000)
        #expect(LimiterDecision.emitted.description == "emitted")
        #expect(LimiterDecision.scheduled(at: t).description == "scheduled(at: 1.500000s on the limiter clock)")
        #expect(LimiterDecision.dropped(retryAt: t).description == "dropped(retryAt: 1.500000s on the limiter clock)")

        // A real decision on a manual clock: the limiter clock is the manual clock's time.
        let clock = ManualLimiterClock()
        clock.advance(by: .milliseconds(250))
        let limiter = try Limiter<String, Int>(.debounce(interval: .seconds(1)), scheduler: .manual(clock)) { _, _ in }
        #expect("\(try limiter.submit(1, for: "a"))" == "scheduled(at: 1.250000s on the limiter clock)")
        #expect("\(limiter.now)" == "0.250000s on the limiter clock")
    }

    @Test("a rate decision prints its waits from the decision, then when it was made")
    func rateDecisions() throws {
        let clock = ManualLimiterClock()
        let quota = try RateLimiter<String>(limit: 2, per: .seconds(1), scheduler: .manual(clock))
        clock.advance(by: .milliseconds(100))
        #expect(
            "\(try quota.check("k"))" == "admitted(remaining: 1, full in 0.500000s; at 0.100000s on the limiter clock)")
        #expect(
            "\(try quota.check("k"))" == "admitted(remaining: 0, full in 1.000000s; at 0.100000s on the limiter clock)")
        clock.advance(by: .milliseconds(150))
        #expect(
            "\(try quota.check("k"))"
                == "dropped(retry in 0.350000s, full in 0.850000s; at 0.250000s on the limiter clock)")
        #expect(
            "\(try quota.check("k", cost: 3))"
                == "dropped(never: the cost is above the burst; at 0.250000s on the limiter clock)")
    }

    @Test("durations between instants print with a sign")
    func signedSeconds() {
        let a = LimiterInstant(nanoseconds: 2_000_000_000)
        let b = LimiterInstant(nanoseconds: 1_000_000_000)
        #expect(LimiterInstant.seconds(from: b, to: a) == "1.000000s")
        #expect(LimiterInstant.seconds(from: a, to: b) == "-1.000000s")
        #expect(LimiterInstant.seconds(from: a, to: a) == "0.000000s")
    }
}
