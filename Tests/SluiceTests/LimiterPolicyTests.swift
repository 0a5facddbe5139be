import Testing

@testable import Sluice

@Suite("LimiterPolicy")
struct LimiterPolicyTests {
    // MARK: Duration conversion

    @Test("durations convert to exact nanoseconds")
    func exactConversion() throws {
        #expect(try LimiterPolicy.nanoseconds(.zero) == 0)
        #expect(try LimiterPolicy.nanoseconds(.nanoseconds(1)) == 1)
        #expect(try LimiterPolicy.nanoseconds(.milliseconds(100)) == 100_000_000)
        #expect(try LimiterPolicy.nanoseconds(.seconds(3)) == 3_000_000_000)
        #expect(try LimiterPolicy.nanoseconds(.microseconds(7)) == 7_000)
        // A Double 0.1 is slightly above 0.1: rounding gives exactly 100 ms.
        #expect(try LimiterPolicy.nanoseconds(.seconds(0.1)) == 100_000_000)
        #expect(try LimiterPolicy.nanoseconds(.milliseconds(1_000_000_000_000)) == 1_000_000_000_000_000_000)
    }

    @Test("sub-nanosecond parts round to the nearest nanosecond, halves up")
    func rounding() throws {
        let halfNanosecond: Int64 = 500_000_000  // attoseconds
        #expect(try LimiterPolicy.nanoseconds(Duration(secondsComponent: 0, attosecondsComponent: 1)) == 0)
        #expect(
            try LimiterPolicy.nanoseconds(Duration(secondsComponent: 0, attosecondsComponent: halfNanosecond - 1)) == 0)
        #expect(try LimiterPolicy.nanoseconds(Duration(secondsComponent: 0, attosecondsComponent: halfNanosecond)) == 1)
        #expect(
            try LimiterPolicy.nanoseconds(Duration(secondsComponent: 2, attosecondsComponent: 999_999_999_999_999_999))
                == 3_000_000_000)
    }

    @Test("negative durations are invalid, even below a nanosecond")
    func negative() {
        #expect(throws: LimiterError.invalidArgument) { try LimiterPolicy.nanoseconds(.nanoseconds(-1)) }
        #expect(throws: LimiterError.invalidArgument) { try LimiterPolicy.nanoseconds(.seconds(-5)) }
        #expect(throws: LimiterError.invalidArgument) {
            try LimiterPolicy.nanoseconds(Duration(secondsComponent: 0, attosecondsComponent: -1))
        }
        #expect(throws: LimiterError.invalidArgument) {
            try LimiterPolicy.nanoseconds(Duration(secondsComponent: Int64.min, attosecondsComponent: 0))
        }
    }

    @Test("durations above 10^18 ns are out of range, never an overflow")
    func tooLarge() throws {
        let max = LimiterPolicy.maxNanoseconds
        #expect(max == 1_000_000_000_000_000_000)
        #expect(try LimiterPolicy.nanoseconds(.nanoseconds(max)) == max)
        #expect(throws: LimiterError.outOfRange) { try LimiterPolicy.nanoseconds(.nanoseconds(max + 1)) }
        #expect(throws: LimiterError.outOfRange) { try LimiterPolicy.nanoseconds(.nanoseconds(Int64.max)) }
        // Seconds whose product by 10^9 overflows Int64.
        #expect(throws: LimiterError.outOfRange) { try LimiterPolicy.nanoseconds(.seconds(Int64.max)) }
        #expect(throws: LimiterError.outOfRange) {
            try LimiterPolicy.nanoseconds(
                Duration(secondsComponent: 9_223_372_036, attosecondsComponent: 999_999_999_999_999_999))
        }
        // Just below the limit, with a fraction that rounds up to it.
        #expect(
            try LimiterPolicy.nanoseconds(
                Duration(secondsComponent: 999_999_999, attosecondsComponent: 999_999_999_500_000_000)) == max)
    }

    // MARK: Validation

    static let invalid: [(String, LimiterPolicy)] = [
        ("throttle negative interval", .throttle(interval: .milliseconds(-1))),
        ("throttle without edges", .throttle(interval: .milliseconds(100), leading: false, trailing: false)),
        ("audit negative interval", .audit(interval: .nanoseconds(-1))),
        ("debounce negative interval", .debounce(interval: .seconds(-1))),
        ("debounce without edges", .debounce(interval: .milliseconds(100), leading: false, trailing: false)),
        ("debounce maxWait below interval", .debounce(interval: .milliseconds(100), maxWait: .milliseconds(99))),
        ("debounce negative maxWait", .debounce(interval: .milliseconds(100), maxWait: .milliseconds(-1))),
        ("rate limit 0", .rate(limit: 0, per: .seconds(1))),
        ("rate negative limit", .rate(limit: -3, per: .seconds(1))),
        ("rate per 0", .rate(limit: 10, per: .zero)),
        ("rate negative per", .rate(limit: 10, per: .seconds(-1))),
        ("rate burst 0", .rate(limit: 10, per: .seconds(1), burst: 0)),
        ("rate negative burst", .rate(limit: 10, per: .seconds(1), burst: -1)),
    ]

    static let outOfRange: [(String, LimiterPolicy)] = [
        ("throttle interval too large", .throttle(interval: .seconds(1_000_000_001))),
        ("audit interval overflowing Int64 ns", .audit(interval: .seconds(Int64.max))),
        ("debounce maxWait too large", .debounce(interval: .seconds(1), maxWait: .seconds(2_000_000_000))),
        ("rate per too large", .rate(limit: 1, per: .seconds(1_000_000_001))),
        ("rate limit too large", .rate(limit: 1_000_000_000_001, per: .seconds(1))),
        ("rate burst too large", .rate(limit: 1, per: .seconds(1), burst: 1_000_000_000_001)),
    ]

    static let valid: [(String, LimiterPolicy)] = [
        ("throttle pass-through", .throttle(interval: .zero)),
        ("throttle leading only", .throttle(interval: .milliseconds(1), trailing: false)),
        ("throttle trailing only, pick first", .throttle(interval: .milliseconds(1), leading: false, pick: .first)),
        ("audit", .audit(interval: .seconds(1))),
        ("audit at the limit", .audit(interval: .seconds(1_000_000_000))),
        ("debounce", .debounce(interval: .milliseconds(100))),
        ("debounce maxWait equal to interval", .debounce(interval: .milliseconds(100), maxWait: .milliseconds(100))),
        ("debounce leading only", .debounce(interval: .milliseconds(100), leading: true, trailing: false)),
        ("rate", .rate(limit: 10, per: .seconds(1))),
        ("rate with burst", .rate(limit: 3, per: .milliseconds(7), burst: 1)),
        ("rate at the limits", .rate(limit: 1_000_000_000_000, per: .nanoseconds(1), burst: 1_000_000_000_000)),
    ]

    @Test("invalid configurations throw invalidArgument", arguments: invalid)
    func invalidConfigurations(name: String, policy: LimiterPolicy) {
        #expect(throws: LimiterError.invalidArgument, "validate(): \(name)") { try policy.validate() }
        #expect(throws: LimiterError.invalidArgument, "limiter: \(name)") {
            _ = try Limiter<Int, Int>(policy, scheduler: .manual(ManualLimiterClock())) { _, _ in }
        }
    }

    @Test("out-of-range configurations throw outOfRange", arguments: outOfRange)
    func outOfRangeConfigurations(name: String, policy: LimiterPolicy) {
        #expect(throws: LimiterError.outOfRange, "validate(): \(name)") { try policy.validate() }
        #expect(throws: LimiterError.outOfRange, "limiter: \(name)") {
            _ = try Limiter<Int, Int>(policy, scheduler: .manual(ManualLimiterClock())) { _, _ in }
        }
    }

    @Test("valid configurations create a limiter", arguments: valid)
    func validConfigurations(name: String, policy: LimiterPolicy) throws {
        try policy.validate()
        _ = try Limiter<Int, Int>(policy, scheduler: .manual(ManualLimiterClock())) { _, _ in }
    }

    @Test("a tick above one second is refused by the core")
    func badTick() {
        #expect(throws: LimiterError.invalidArgument) {
            _ = try Limiter<Int, Int>(
                .audit(interval: .seconds(1)), scheduler: .manual(ManualLimiterClock()),
                tick: .nanoseconds(1_000_000_001), delivery: .handler { _, _ in })
        }
    }

    // MARK: Errors

    @Test("errors describe themselves with sluice_strerror")
    func errorDescriptions() {
        let all: [LimiterError] = [
            .outOfMemory, .busy, .invalidArgument, .full, .outOfRange, .keyTooLong, .closed, .corrupted,
        ]
        #expect(Set(all.map(\.rawValue)).count == all.count)
        for error in all {
            #expect(error.rawValue < 0)
            #expect(!error.description.isEmpty)
            #expect(error.description != "unknown error", "\(error.rawValue)")
        }
        #expect(Set(all.map(\.description)).count == all.count)
        #expect(LimiterError(rawValue: -9999).description.contains("-9999"))
    }
}
