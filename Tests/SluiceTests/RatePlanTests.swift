import Foundation
import SluiceHTTP
import Testing

@testable import Sluice

/// Several quotas per key and plans (`RatePlan`, `RateLimiter(plans:)`).
///
/// Numbers by hand (GCRA, docs/semantics.md): a quota of `limit` per `per`
/// has the emission interval T = per / limit; a call of cost n at t moves
/// the key's mark from max(mark, t) to max(mark, t) + n·T and is admitted
/// when that is at most burst·T ahead of t; remaining = ⌊(burst·T − (mark −
/// t)) / T⌋. A key that changes plan keeps its consumed units: mark' = t +
/// (mark − t)·T'/T, quota by quota matched by name.
@Suite("Rate plans")
struct RatePlanTests {
    /// second: 2 per 1 s (T = 0.5 s, burst 2); hour: 3 per 3600 s (T = 1200 s, burst 3).
    static let pro = RatePlan(
        "pro",
        quotas: [
            .init("second", limit: 2, per: .seconds(1)),
            .init("hour", limit: 3, per: .seconds(3600)),
        ])

    func ms(_ milliseconds: Int) -> LimiterInstant { LimiterInstant(nanoseconds: UInt64(milliseconds) * 1_000_000) }
    func s(_ seconds: Int) -> LimiterInstant { ms(seconds * 1000) }

    @Test("a call is admitted only when every quota admits it, and a refused call changes nothing")
    func allOrNothing() throws {
        let clock = ManualLimiterClock()
        let limiter = try RateLimiter<String>(plans: [Self.pro], scheduler: .manual(clock))

        // t = 0: two calls pass both quotas.
        let first = try limiter.check("k", plan: "pro")
        #expect(first.outcome == .admitted(remaining: 1))  // min(second 1, hour 2)
        #expect(first.fullAt == s(1200))  // max(second 0.5 s, hour 1200 s)
        #expect(first.plan == "pro" && first.refusedQuotas.isEmpty)
        #expect(first.quotas.map(\.remaining) == [1, 2])
        let second = try limiter.check("k", plan: "pro")
        #expect(second.outcome == .admitted(remaining: 0))
        #expect(second.quotas.map(\.remaining) == [0, 1])
        #expect(second.quotas.map(\.fullAt) == [s(1), s(2400)])

        // A third at 0: "second" refuses (mark 1.5 s > 0 + 1 s), "hour" would admit.
        let third = try limiter.check("k", plan: "pro")
        #expect(third.outcome == .dropped(retryAt: ms(500)))
        #expect(third.refusedQuotas == ["second"])
        #expect(third.quotas.map(\.refused) == [true, false])
        #expect(third.quotas.map(\.retryAt) == [ms(500), s(0)])
        #expect(third.retryAfterSeconds == 1)
        // Nothing was charged to "hour" by the refused call.
        let read = try limiter.quota(for: "k", plan: "pro")
        #expect(read.quotas.map(\.remaining) == [0, 1])
        #expect(read.remaining == 0 && read.fullAt == s(2400))
        #expect(read.quotas.map(\.refused) == [true, false])

        // At 1 s both admit; "hour" is then empty.
        clock.advance(to: s(1))
        let fourth = try limiter.check("k", plan: "pro")
        #expect(fourth.outcome == .admitted(remaining: 0))
        #expect(fourth.quotas.map(\.remaining) == [1, 0])
        #expect(fourth.quotas.map(\.fullAt) == [ms(1500), s(3600)])

        // A fifth at 1 s: "hour" refuses (mark 4800 s > 1 s + 3600 s) until 1200 s; "second" is untouched.
        let fifth = try limiter.check("k", plan: "pro")
        #expect(fifth.outcome == .dropped(retryAt: s(1200)))
        #expect(fifth.refusedQuotas == ["hour"])
        #expect(fifth.retryAfterSeconds == 1199)
        #expect(try limiter.quota(for: "k", plan: "pro").quotas.map(\.remaining) == [1, 0])

        // Cost 2 at 1 s: both refuse; the overall retry is the latest, 2400 s.
        let heavy = try limiter.check("k", plan: "pro", cost: 2)
        #expect(heavy.refusedQuotas == ["second", "hour"])
        #expect(heavy.quotas.map(\.retryAt) == [ms(1500), s(2400)])
        #expect(heavy.retryAt == s(2400))

        // Cost 3 on a fresh key: above "second"'s burst, never; "hour" alone would admit.
        let never = try limiter.check("fresh", plan: "pro", cost: 3)
        #expect(never.isNeverAdmitted)
        #expect(never.refusedQuotas == ["second"])
        #expect(never.quotas.map(\.retryAt) == [nil, s(1)])
        #expect(try limiter.quota(for: "fresh", plan: "pro").quotas.map(\.remaining) == [2, 3])

        let stats = limiter.statistics
        #expect(stats.admitted == 3 && stats.dropped == 4)
    }

    @Test("each quota's figures: name, limit, window, burst, remaining, full, retry")
    func figures() throws {
        let clock = ManualLimiterClock()
        let plan = RatePlan(
            "p",
            quotas: [
                .init("burst", limit: 4, per: .seconds(1), burst: 8),  // T = 250 ms
                .init("minute", limit: 60, per: .seconds(60)),  // T = 1 s, burst 60
            ])
        let limiter = try RateLimiter<Int>(plans: [plan], scheduler: .manual(clock))
        clock.advance(to: s(10))
        let d = try limiter.check(1, plan: "p", cost: 3)
        #expect(d.at == s(10))
        #expect(
            d.quotas == [
                RateQuotaFigures(
                    name: "burst", limit: 4, window: .seconds(1), burst: 8, at: s(10), remaining: 5,
                    fullAt: ms(10_750), retryAt: s(10), refused: false),
                RateQuotaFigures(
                    name: "minute", limit: 60, window: .seconds(60), burst: 60, at: s(10), remaining: 57,
                    fullAt: s(13), retryAt: s(10), refused: false),
            ])
        #expect(d.quotas.map(\.secondsUntilFull) == [1, 3])
        #expect(d.quotas.map(\.windowSeconds) == [1, 60])
        #expect(d.remaining == 5 && d.fullAt == s(13))

        // The read: cost 6 would pass "burst" only at 10.25 s (mark 10.75 + 1.5 − 2 s).
        let q = try limiter.quota(for: 1, plan: "p", cost: 6)
        #expect(q.plan == "p" && q.at == s(10))
        #expect(q.quotas.map(\.retryAt) == [ms(10_250), s(10)])
        #expect(q.quotas.map(\.refused) == [true, false])
        #expect(q.retryAt == ms(10_250) && q.remaining == 5 && q.burst == 8)
    }

    @Test("a key that changes plan keeps the units it consumed, quota by quota by name")
    func planChangeKeepsConsumption() throws {
        let clock = ManualLimiterClock()
        // free: hour 10 per 3600 s (T = 360 s); pro: second 2 per 1 s, hour 100 per 3600 s (T = 36 s).
        let free = RatePlan("free", quotas: [.init("hour", limit: 10, per: .seconds(3600))])
        let pro = RatePlan(
            "pro",
            quotas: [.init("second", limit: 2, per: .seconds(1)), .init("hour", limit: 100, per: .seconds(3600))])
        let limiter = try RateLimiter<String>(plans: [free, pro], scheduler: .manual(clock))
        for _ in 0..<5 { #expect(try limiter.check("k", plan: "free").isAdmitted) }
        #expect(try limiter.quota(for: "k", plan: "free").remaining == 5)  // mark 1800 s

        // Read under pro (a peek): 5 units of 100 consumed (mark 180 s), "second" fresh.
        let peek = try limiter.quota(for: "k", plan: "pro")
        #expect(peek.quotas.map(\.remaining) == [2, 95])
        #expect(peek.quotas.map(\.name) == ["second", "hour"])
        // The peek stored nothing: still 5 left under free.
        #expect(try limiter.quota(for: "k", plan: "free").remaining == 5)

        // Upgrade: the call is charged under pro, after the conversion (mark 180 + 36 s).
        let up = try limiter.check("k", plan: "pro")
        #expect(up.isAdmitted && up.plan == "pro")
        #expect(up.quotas.map(\.remaining) == [1, 94])
        #expect(up.quotas.map(\.fullAt) == [ms(500), s(216)])
        #expect(up.fullAt == s(216))

        // Back to free: 6 units consumed (mark 2160 s), 4 left; "second" forgotten.
        let down = try limiter.check("k", plan: "free")
        #expect(down.outcome == .admitted(remaining: 3))
        #expect(down.quotas.map(\.fullAt) == [s(2520)])
        #expect(try limiter.quota(for: "k", plan: "pro").quotas.map(\.remaining) == [2, 93])
    }

    @Test("update(plans:) at run time: numbers change, consumption stays, handles follow names")
    func updateAtRunTime() throws {
        let clock = ManualLimiterClock()
        let basic = RatePlan("basic", quotas: [.init("hour", limit: 10, per: .seconds(3600))])
        let gold = RatePlan("gold", quotas: [.init("hour", limit: 50, per: .seconds(3600))])
        let limiter = try RateLimiter<String>(plans: [basic, gold], scheduler: .manual(clock))
        let handle = try limiter.plan(named: "basic")
        let goldHandle = try limiter.plan(named: "gold")
        #expect(handle.name == "basic")
        for _ in 0..<5 { #expect(try limiter.check("k", plan: handle).isAdmitted) }  // mark 1800 s
        #expect(try limiter.coreIndex(ofPlan: "gold") == 1)

        // basic doubles (T 360 s → 180 s) and moves behind a new default plan.
        let basic2 = RatePlan("basic", quotas: [.init("hour", limit: 20, per: .seconds(3600))])
        let trial = RatePlan("trial", quotas: [.init("hour", limit: 1, per: .seconds(3600))])
        try limiter.update(plans: [trial, basic2])
        #expect(limiter.plans == [trial, basic2])
        #expect(try limiter.coreIndex(ofPlan: "basic") == 1)
        // 5 units consumed of 20 (mark 900 s); this call makes 6: 14 left.
        let after = try limiter.check("k", plan: handle)
        #expect(after.outcome == .admitted(remaining: 14))
        #expect(after.quotas.first?.limit == 20)
        // A read by handle, resolved again by name after the update.
        #expect(try limiter.quota(for: "k", plan: handle).quotas.map(\.remaining) == [14])
        #expect(throws: LimiterError.unknownPlan) { try limiter.quota(for: "k", plan: goldHandle) }
        #expect(try limiter.check("k", plan: "basic").outcome == .admitted(remaining: 13))
        // The default plan (no plan named) is now trial.
        #expect(try limiter.check("other").outcome == .admitted(remaining: 0))
        #expect(try limiter.check("other").isAdmitted == false)

        // A removed plan: by name and by handle.
        #expect(throws: LimiterError.unknownPlan) { try limiter.check("k", plan: "gold") }
        #expect(throws: LimiterError.unknownPlan) { try limiter.check("k", plan: goldHandle) }

        // An invalid table is refused whole; the plans stay.
        do {
            try limiter.update(plans: [basic2, basic2])
            Issue.record("a table with a plan twice was taken")
        } catch {
            #expect(error == .invalidArgument)
            #expect(error.reason?.contains("\"basic\" is used twice") == true, "\(error)")
        }
        #expect(limiter.plans == [trial, basic2])
        // More quotas than the limiter's maxQuotas (1 here: the most of the plans given).
        let two = RatePlan(
            "basic",
            quotas: [.init("hour", limit: 20, per: .seconds(3600)), .init("day", limit: 99, per: .seconds(86400))])
        do {
            try limiter.update(plans: [two])
            Issue.record("a plan over maxQuotas was taken")
        } catch {
            #expect(error == .invalidArgument)
            #expect(error.reason?.contains("1 to 1") == true, "\(error)")
        }
        #expect(try limiter.check("k", plan: "basic").outcome == .admitted(remaining: 12))

        // With room for them, quotas can be added; "day" starts whole.
        let roomy = try RateLimiter<String>(plans: [basic], scheduler: .manual(clock), maxQuotas: 2)
        _ = try roomy.check("k", plan: "basic")
        try roomy.update(plans: [two])
        let added = try roomy.check("k", plan: "basic")
        #expect(added.quotas.map(\.name) == ["hour", "day"])
        #expect(added.quotas.map(\.remaining) == [18, 98])

        // A handle of another limiter is resolved by name there.
        let fresh = try limiter.plan(named: "basic")  // index 1 here, 0 there
        let swapped = try RateLimiter<String>(plans: [basic, gold], scheduler: .manual(clock))
        #expect(try swapped.check("x", plan: fresh).quotas.first?.limit == 10)
        #expect(try swapped.check("x", plan: try swapped.plan(named: "gold")).quotas.first?.limit == 50)

        // A limiter of one policy has no plans to update.
        let single = try RateLimiter<String>(limit: 5, per: .seconds(1), scheduler: .manual(clock))
        #expect(throws: LimiterError.invalidArgument) { try single.update(plans: [basic]) }
    }

    @Test("an unknown plan is refused with unknownPlan, naming the plans")
    func unknownPlan() throws {
        let limiter = try RateLimiter<String>(plans: [Self.pro], scheduler: .manual(ManualLimiterClock()))
        do {
            _ = try limiter.check("k", plan: "platinum")
            Issue.record("an unknown plan was taken")
        } catch {
            #expect(error == .unknownPlan)
            #expect(error.reason?.contains("\"platinum\"") == true && error.reason?.contains("\"pro\"") == true)
        }
        #expect(throws: LimiterError.unknownPlan) { try limiter.quota(for: "k", plan: "platinum") }
        #expect(throws: LimiterError.unknownPlan) { try limiter.plan(named: "platinum") }
        #expect(throws: LimiterError.outOfRange) { try limiter.check("k", plan: "pro", cost: 0) }
        #expect(LimiterError.unknownPlan.rawValue == -2)
        // Nothing was charged by the refused calls.
        #expect(try limiter.quota(for: "k", plan: "pro").quotas.map(\.remaining) == [2, 3])
    }

    @Test("invalid tables name the plan, the quota and the rule")
    func validation() {
        func reason(_ plans: [RatePlan], maxQuotas: Int? = nil) -> (LimiterError, String)? {
            do {
                try RatePlan.validate(plans, maxQuotas: maxQuotas)
                return nil
            } catch {
                return (error, error.reason ?? "")
            }
        }
        let q = RatePlan.Quota("second", limit: 1, per: .seconds(1))
        #expect(reason([])?.1.contains("at least one plan") == true)
        #expect(reason([RatePlan("a b", quotas: [q])])?.1.contains("plan name \"a b\"") == true)
        #expect(reason([RatePlan("", quotas: [q])])?.0 == .invalidArgument)
        #expect(reason([RatePlan("é", quotas: [q])])?.0 == .invalidArgument)
        #expect(reason([RatePlan(String(repeating: "x", count: 33), quotas: [q])])?.0 == .invalidArgument)
        #expect(reason([RatePlan(String(repeating: "x", count: 32), quotas: [q])]) == nil)
        #expect(reason([RatePlan("a-Z_0.9", quotas: [q])]) == nil)
        #expect(reason([RatePlan("p", quotas: [q]), RatePlan("p", quotas: [q])])?.1.contains("used twice") == true)
        #expect(reason([RatePlan("p", quotas: [])])?.1.contains("has 0 quotas") == true)
        let nine = (0..<9).map { RatePlan.Quota("q\($0)", limit: 1, per: .seconds(1)) }
        #expect(reason([RatePlan("p", quotas: nine)])?.1.contains("has 9 quotas") == true)
        #expect(reason([RatePlan("p", quotas: Array(nine.prefix(8)))]) == nil)
        #expect(reason([RatePlan("p", quotas: [q, q])])?.1.contains("quota name \"second\" is used twice") == true)
        #expect(reason([RatePlan("p", quotas: [.init("b c", limit: 1, per: .seconds(1))])])?.0 == .invalidArgument)
        let zero = reason([RatePlan("p", quotas: [.init("s", limit: 0, per: .seconds(1))])])
        #expect(zero?.0 == .invalidArgument && zero?.1.contains("plan \"p\", quota \"s\"") == true)
        #expect(zero?.1.contains("limit (0)") == true)
        #expect(reason([RatePlan("p", quotas: [.init("s", limit: 1, per: .zero)])])?.0 == .invalidArgument)
        #expect(
            reason([RatePlan("p", quotas: [.init("s", limit: 1, per: .seconds(1), burst: 0)])])?.0 == .invalidArgument)
        #expect(
            reason([RatePlan("p", quotas: [.init("s", limit: 2_000_000_000_000, per: .seconds(1))])])?.0 == .outOfRange)
        #expect(reason([RatePlan("p", quotas: [q])], maxQuotas: 0)?.0 == .outOfRange)
        #expect(reason([RatePlan("p", quotas: [q])], maxQuotas: 9)?.0 == .outOfRange)
        #expect(
            reason([RatePlan("p", quotas: [q, .init("hour", limit: 1, per: .seconds(3600))])], maxQuotas: 1) != nil)
    }

    @Test("a limiter of one policy answers for its one plan, \"default\"")
    func singlePolicyAsPlan() throws {
        let limiter = try RateLimiter<String>(limit: 2, per: .seconds(1), scheduler: .manual(ManualLimiterClock()))
        #expect(
            limiter.plans == [RatePlan("default", quotas: [.init("default", limit: 2, per: .seconds(1), burst: 2)])])
        let d = try limiter.check("k", plan: "default")
        #expect(d.outcome == .admitted(remaining: 1))
        #expect(d.quotas.map(\.name) == ["default"] && d.quotas.first?.limit == 2)
        // The call without a plan shares the key's state, and reports no quotas.
        let plain = try limiter.check("k")
        #expect(plain.outcome == .admitted(remaining: 0) && plain.quotas.isEmpty && plain.plan == nil)
        #expect(throws: LimiterError.unknownPlan) { try limiter.check("k", plan: "pro") }
    }

    @Test("plans on the default loop: both quotas decide")
    func onLoop() throws {
        let limiter = try RateLimiter<Int>(plans: [
            RatePlan(
                "p", quotas: [.init("a", limit: 3, per: .seconds(3600)), .init("b", limit: 2, per: .seconds(7200))])
        ])
        #expect(try limiter.check(1, plan: "p").isAdmitted)
        #expect(try limiter.check(1, plan: "p").isAdmitted)
        let third = try limiter.check(1, plan: "p")
        #expect(!third.isAdmitted && third.refusedQuotas == ["b"])
        #expect(try limiter.quota(for: 1, plan: "p").quotas.map(\.remaining) == [1, 0])
        #expect(try limiter.coreIndex(ofPlan: "p") == 0)
        try limiter.update(plans: [RatePlan("p", quotas: [.init("b", limit: 4, per: .seconds(7200))])])
        // "b" doubled: 2 units of 4 used; "a" forgotten.
        #expect(try limiter.check(1, plan: "p").outcome == .admitted(remaining: 1))
    }

    // MARK: - Headers and answers

    @Test("RateLimit-Policy, RateLimit and Retry-After list every quota of the plan")
    func headers() throws {
        let clock = ManualLimiterClock()
        let limiter = try RateLimiter<String>(plans: [Self.pro], scheduler: .manual(clock))
        clock.advance(to: ms(250))
        let first = try #require(RateLimitHeaders(try limiter.check("k", plan: "pro")))
        #expect(first.ratePolicy == #""second";q=2;w=1, "hour";q=3;w=3600"#)
        // second: mark 0.75 s → r 1, t ⌈0.5 s⌉ = 1; hour: mark 1200.25 s → r 2, t 1200.
        #expect(first.rateLimit == #""second";r=1;t=1, "hour";r=2;t=1200"#)
        #expect(first.retryAfter == nil)
        #expect(first.fields.map(\.name) == ["RateLimit-Policy", "RateLimit"])
        _ = try limiter.check("k", plan: "pro")
        let dropped = try #require(RateLimitHeaders(try limiter.check("k", plan: "pro")))
        // second: mark 1.25 s, retry at 0.75 s: 0.5 s → 1; hour: mark 2400.25 s.
        #expect(dropped.retryAfter == "1")
        #expect(dropped.rateLimit == #""second";r=0;t=1, "hour";r=1;t=2400"#)
        #expect(dropped.fields.map(\.name) == ["Retry-After", "RateLimit-Policy", "RateLimit"])
        let read = try #require(RateLimitHeaders(try limiter.quota(for: "k", plan: "pro")))
        #expect(read.rateLimit == dropped.rateLimit && read.retryAfter == nil)
        // A decision without a plan has no per-quota figures.
        let single = try RateLimiter<String>(limit: 1, per: .seconds(1), scheduler: .manual(clock))
        #expect(RateLimitHeaders(try single.check("k")) == nil)
        // Windows round up to whole seconds, at least 1.
        #expect(RateLimitHeaders.windowSeconds(.milliseconds(1500)) == 2)
        #expect(RateLimitHeaders.windowSeconds(.milliseconds(1)) == 1)
        #expect(RateLimitHeaders.windowSeconds(.seconds(86400)) == 86400)
    }

    @Test("Retry-After under plans is the overall retry, the latest quota's, in whole seconds rounded up")
    func retryAfterIsTheLatest() throws {
        let clock = ManualLimiterClock()
        let limiter = try RateLimiter<String>(plans: [Self.pro], scheduler: .manual(clock))
        clock.advance(to: ms(250))
        _ = try limiter.check("k", plan: "pro")  // second mark 0.75 s, hour 1200.25 s
        _ = try limiter.check("k", plan: "pro")  // second 1.25 s, hour 2400.25 s
        clock.advance(to: ms(1300))
        #expect(try limiter.check("k", plan: "pro").isAdmitted)  // second 1.8 s, hour 3600.25 s
        // "second" would admit (2.3 s ≤ 1.3 + 1 s); "hour" refuses (4800.25 s > 3601.3 s) until
        // 1200.25 s: 1198.95 s from now, 1199 whole seconds.
        let refused = try limiter.check("k", plan: "pro")
        #expect(refused.refusedQuotas == ["hour"])
        #expect(refused.retryAt == ms(1_200_250) && refused.retryAfterSeconds == 1199)
        let headers = try #require(RateLimitHeaders(refused))
        #expect(headers.retryAfter == "1199")
        #expect(headers.ratePolicy == #""second";q=2;w=1, "hour";q=3;w=3600"#)
        // Nothing charged: second mark 1.8 s (r 1, t ⌈0.5⌉), hour 3600.25 s (r 0, t ⌈3598.95⌉).
        #expect(headers.rateLimit == #""second";r=1;t=1, "hour";r=0;t=3599"#)
    }

    @Test("a decision's plan figures are a value: a copy changed alone, equal by contents")
    func planFiguresAreValues() throws {
        let clock = ManualLimiterClock()
        let limiter = try RateLimiter<String>(plans: [Self.pro], scheduler: .manual(clock))
        let a = try limiter.check("a", plan: "pro")
        let b = try limiter.check("b", plan: "pro")
        #expect(a == b && a.hashValue == b.hashValue, "two boxes, equal contents")
        var copy = a
        copy.quotas[0].remaining = 99
        copy.plan = "other"
        #expect(a.quotas[0].remaining == 1 && a.plan == "pro", "the original's box is untouched")
        #expect(copy.quotas[0].remaining == 99 && copy.plan == "other" && copy != a)
        // Emptied, it equals a decision without a plan.
        copy.plan = nil
        copy.quotas = []
        let plain = RateDecision(outcome: a.outcome, at: a.at, fullAt: a.fullAt)
        #expect(copy == plain && copy.refusedQuotas.isEmpty)
        var quota = try limiter.quota(for: "a", plan: "pro")
        let read = quota
        quota.quotas.removeLast()
        #expect(read.quotas.count == 2 && quota.quotas.count == 1 && quota.plan == "pro")
    }

    @Test("structured-field strings: quoted, with \" and \\ escaped and non-ASCII replaced")
    func sfString() {
        #expect(RateLimitHeaders.string("hour") == #""hour""#)
        #expect(RateLimitHeaders.string(#"a"b\c"#) == #""a\"b\\c""#)
        #expect(RateLimitHeaders.string("é\n~ ") == #""??~ ""#)
        #expect(RateLimitHeaders.string("") == #""""#)
        // Every header above parses back as a list of (string, params).
        let parsed = StructuredList.parse(#""second";q=2;w=1, "hour";q=3;w=3600"#)
        #expect(parsed?.map(\.name) == ["second", "hour"])
        #expect(parsed?.map { $0.params["q"] } == [2, 3])
        #expect(parsed?.map { $0.params["w"] } == [1, 3600])
        #expect(StructuredList.parse(#""a\"b\\c";r=1"#)?.first?.name == #"a"b\c"#)
    }

    @Test("the gate under plans: every quota in the fields, a 429 quota-exceeded problem naming the refusers")
    func gate() async throws {
        let clock = ManualLimiterClock()
        let limiter = try RateLimiter<String>(plans: [Self.pro], scheduler: .manual(clock))
        let gate = RateLimitGate(limiter)
        #expect(gate.firstPlan == "pro", "what the middleware decides a request of no plan under")
        let single = try RateLimiter<String>(limit: 1, per: .seconds(1), scheduler: .manual(clock))
        #expect(RateLimitGate(single).firstPlan == "default")
        let ok = await gate.evaluate(key: "k", plan: "pro")
        #expect(ok.rejection == nil && ok.retryAfter == nil)
        #expect(ok.ratePolicy == #""second";q=2;w=1, "hour";q=3;w=3600"#)
        #expect(ok.rateLimit == #""second";r=1;t=1, "hour";r=2;t=1200"#)
        _ = await gate.evaluate(key: "k", plan: "pro")
        let refused = await gate.evaluate(key: "k", plan: "pro")
        let rejection = try #require(refused.rejection)
        #expect(rejection.status == 429 && rejection.contentType == "application/problem+json")
        #expect(refused.retryAfter == "1")
        #expect(refused.headers.map(\.name) == ["Retry-After", "RateLimit-Policy", "RateLimit"])
        let body = try #require(
            try JSONSerialization.jsonObject(with: Data(rejection.body.utf8)) as? [String: Any])
        #expect(body["type"] as? String == "https://iana.org/assignments/http-problem-types#quota-exceeded")
        #expect(body["status"] as? Int == 429)
        #expect(body["violated-policies"] as? [String] == ["second"])
        #expect((body["detail"] as? String)?.contains("'second'") == true)
        #expect(body["title"] as? String == "Request cannot be satisfied as assigned quota has been exceeded")

        // Shadow: decided and counted, never rejected, no Retry-After.
        let shadow = RateLimitGate(limiter, shadow: true)
        let passed = await shadow.evaluate(key: "k", plan: "pro")
        #expect(passed.rejection == nil && passed.retryAfter == nil && passed.rateLimit != nil)

        // An unknown plan: no decision; a 503 problem (or through, with .allow).
        let seen = Locked<[String]>([])
        let observed = RateLimitGate(limiter, failureObserver: { key, _ in seen.withLock { $0.append(key) } })
        let unknown = await observed.evaluate(key: "k", plan: "gold")
        #expect(unknown.rejection?.status == 503 && unknown.decision == nil)
        #expect(seen.withLock { $0 } == ["k"])
        let unknownRejection = try #require(unknown.rejection)
        let unknownBody = try #require(
            try JSONSerialization.jsonObject(with: Data(unknownRejection.body.utf8)) as? [String: Any])
        #expect(unknownBody["status"] as? Int == 503)
        let allowed = await RateLimitGate(limiter, onFailure: .allow).evaluate(key: "k", plan: "gold")
        #expect(allowed.rejection == nil)

        // The problem body alone, escaped.
        #expect(
            RateLimitGate.quotaExceededProblem(detail: "a\"b", violatedPolicies: ["x", "y"])
                == #"{"type":"https://iana.org/assignments/http-problem-types#quota-exceeded","title":"Request cannot be satisfied as assigned quota has been exceeded","status":429,"detail":"a\"b","violated-policies":["x","y"]}"#
        )
    }

    @Test("the gate refuses plans on a decider without plans")
    func gateNeedsLocal() async {
        struct Remote: RateDecider {
            let policy = LimiterPolicy.rate(limit: 1, per: .seconds(1))
            func check(_ key: String, cost: Int) async throws(LimiterError) -> RateDecision { throw .closed }
            var statistics: LimiterStatistics { LimiterStatistics(admitted: 0, dropped: 0, failures: 0) }
            func close() throws(LimiterError) {}
        }
        let verdict = await RateLimitGate(Remote()).evaluate(key: "k", plan: "pro")
        #expect(verdict.rejection?.status == 503 && verdict.decision == nil)
    }
}

/// A minimal RFC 9651 List parser for the tests: members that are
/// sf-strings with integer parameters (what the RateLimit fields hold).
enum StructuredList {
    struct Member {
        var name: String
        var params: [String: Int]
    }

    static func parse(_ text: String) -> [Member]? {
        var chars = Array(text.unicodeScalars)[...]
        var members: [Member] = []
        func skipSpaces() { while chars.first == " " { chars.removeFirst() } }
        while true {
            skipSpaces()
            guard chars.popFirst() == "\"" else { return nil }
            var name = ""
            while true {
                guard let c = chars.popFirst() else { return nil }
                if c == "\"" { break }
                if c == "\\" {
                    guard let e = chars.popFirst(), e == "\"" || e == "\\" else { return nil }
                    name.unicodeScalars.append(e)
                } else {
                    guard c.value >= 0x20 && c.value < 0x7F else { return nil }
                    name.unicodeScalars.append(c)
                }
            }
            var params: [String: Int] = [:]
            while chars.first == ";" {
                chars.removeFirst()
                var key = ""
                while let c = chars.first, c != "=" {
                    key.unicodeScalars.append(c)
                    chars.removeFirst()
                }
                guard chars.popFirst() == "=", !key.isEmpty else { return nil }
                var digits = ""
                while let c = chars.first, ("0"..."9").contains(c) {
                    digits.unicodeScalars.append(c)
                    chars.removeFirst()
                }
                guard let value = Int(digits) else { return nil }
                params[key] = value
            }
            members.append(Member(name: name, params: params))
            skipSpaces()
            if chars.isEmpty { return members }
            guard chars.popFirst() == "," else { return nil }
        }
    }
}
