import Foundation
import SluiceHTTP
import Testing

@testable import Sluice

/// Plans on a `Limiter` with the rate policy (`Limiter(plans:)`,
/// `submit(_:for:plan:cost:)`, `quota(for:plan:cost:)`, `update(plans:)`):
/// the decisions of `RateLimiter`'s plans, with values emitted or dropped.
///
/// Numbers by hand (GCRA, docs/semantics.md): a quota of `limit` per `per`
/// has the emission interval T = per / limit; a call of cost n at t moves
/// the key's mark (TAT) from max(TAT, t) to max(TAT, t) + n·T and is
/// admitted when that is at most burst·T ahead of t; remaining =
/// ⌊(burst·T − (TAT − t)) / T⌋. A key that changes plan keeps its consumed
/// units: TAT' = t + (TAT − t)·T'/T, quota by quota matched by name.
@Suite("Limiter plans")
struct LimiterPlanTests {
    /// second: 2 per 1 s (T = 0.5 s, burst 2); hour: 3 per 3600 s (T = 1200 s, burst 3).
    static let pro = RatePlan(
        "pro",
        quotas: [
            .init("second", limit: 2, per: .seconds(1)),
            .init("hour", limit: 3, per: .seconds(3600)),
        ])

    /// `close()` without waiting (in an async function `close()` names the
    /// overload that waits until everything held is delivered).
    static func closeWithoutWaiting<Value>(_ limiter: Limiter<Int, Value>) throws {
        try limiter.close()
    }

    func ms(_ milliseconds: Int) -> LimiterInstant { LimiterInstant(nanoseconds: UInt64(milliseconds) * 1_000_000) }
    func s(_ seconds: Int) -> LimiterInstant { ms(seconds * 1000) }

    /// What a limiter delivered: each event's kind and value, in order.
    final class Log<Value: Sendable>: Sendable {
        private let events = Locked<[(kind: LimiterEvent<Int, Value>.Kind, value: Value)]>([])
        func add(_ event: LimiterEvent<Int, Value>) { events.withLock { $0.append((event.kind, event.value)) } }
        func values(_ kind: LimiterEvent<Int, Value>.Kind) -> [Value] {
            events.withLock { $0.filter { $0.kind == kind }.map(\.value) }
        }
    }

    /// The storages a plan call goes through on a manual clock: values in
    /// slots (String values) whose drops are observed (events) or not (a
    /// handler: a refused value is released by the submit itself), compact
    /// values whose drops are observed, and emit-only (compact values, a
    /// handler: the core reports emissions only).
    enum Storage: CaseIterable {
        case slots, slotsQuiet, compactObserved, emitOnly
    }

    @Test(
        "a value is emitted only when every quota admits it; a refused one is dropped and charges nothing",
        arguments: Storage.allCases)
    func allOrNothing(storage: Storage) throws {
        let clock = ManualLimiterClock()
        let slotLog = Log<String>()
        let compactLog = Log<Int>()
        let handled = Recorder<Int, Int>()
        let tracker = LifetimeTracker()
        let trackedOut = Recorder<Int, Tracked>()
        // One scenario, submitted through whichever limiter `storage` names.
        let submit: (Int, Int) throws(LimiterError) -> RateDecision
        let quota: () throws(LimiterError) -> RateQuota
        let statistics: () -> LimiterStatistics
        let held: () -> Int
        switch storage {
        case .slots:
            let limiter = try Limiter<Int, String>(
                plans: [Self.pro], scheduler: .manual(clock), delivery: .events { slotLog.add($0) })
            #expect(!limiter.storage.compact)
            submit = { (v, cost) throws(LimiterError) in try limiter.submit("v\(v)", for: 1, plan: "pro", cost: cost) }
            quota = { () throws(LimiterError) in try limiter.quota(for: 1, plan: "pro") }
            statistics = { limiter.statistics }
            held = { limiter.storage.heldValues }
        case .slotsQuiet:
            let limiter = try Limiter<Int, Tracked>(
                plans: [Self.pro], scheduler: .manual(clock), handler: trackedOut.handler)
            #expect(!limiter.storage.compact)
            submit = { (v, cost) throws(LimiterError) in
                try limiter.submit(tracker.make(v), for: 1, plan: "pro", cost: cost)
            }
            quota = { () throws(LimiterError) in try limiter.quota(for: 1, plan: "pro") }
            statistics = { limiter.statistics }
            held = { limiter.storage.heldValues }
        case .compactObserved:
            let limiter = try Limiter<Int, Int>(
                plans: [Self.pro], scheduler: .manual(clock), delivery: .events { compactLog.add($0) })
            #expect(limiter.storage.compact && !limiter.storage.emitOnly)
            submit = { (v, cost) throws(LimiterError) in try limiter.submit(v, for: 1, plan: "pro", cost: cost) }
            quota = { () throws(LimiterError) in try limiter.quota(for: 1, plan: "pro") }
            statistics = { limiter.statistics }
            held = { limiter.storage.heldValues }
        case .emitOnly:
            let limiter = try Limiter<Int, Int>(plans: [Self.pro], scheduler: .manual(clock), handler: handled.handler)
            #expect(limiter.storage.emitOnly)
            let handle = try limiter.plan(named: "pro")
            submit = { (v, cost) throws(LimiterError) in try limiter.submit(v, for: 1, plan: handle, cost: cost) }
            quota = { () throws(LimiterError) in try limiter.quota(for: 1, plan: handle) }
            statistics = { limiter.statistics }
            held = { limiter.storage.heldValues }
        }
        func emitted() -> [Int] {
            switch storage {
            case .slots: slotLog.values(.emitted).map { Int($0.dropFirst())! }
            case .slotsQuiet: trackedOut.values.map(\.id)
            case .compactObserved: compactLog.values(.emitted)
            case .emitOnly: handled.values
            }
        }

        // t = 0: two calls pass both quotas, and are emitted at once.
        let first = try submit(1, 1)
        #expect(first.outcome == .admitted(remaining: 1))  // min(second 1, hour 2)
        #expect(first.fullAt == s(1200))  // max(second 0.5 s, hour 1200 s)
        #expect(first.plan == "pro" && first.refusedQuotas.isEmpty)
        #expect(first.quotas.map(\.remaining) == [1, 2])
        #expect(emitted() == [1])
        let second = try submit(2, 1)
        #expect(second.outcome == .admitted(remaining: 0))
        #expect(second.quotas.map(\.remaining) == [0, 1])
        #expect(second.quotas.map(\.fullAt) == [s(1), s(2400)])

        // A third at 0: "second" refuses (TAT 1.5 s > 0 + 1 s), "hour" would admit.
        let third = try submit(3, 1)
        #expect(third.outcome == .dropped(retryAt: ms(500)))
        #expect(third.refusedQuotas == ["second"])
        #expect(third.quotas.map(\.refused) == [true, false])
        #expect(third.quotas.map(\.retryAt) == [ms(500), s(0)])
        #expect(emitted() == [1, 2])
        // Nothing was charged to "hour" by the refused call.
        let read = try quota()
        #expect(read.quotas.map(\.remaining) == [0, 1])
        #expect(read.remaining == 0 && read.fullAt == s(2400))

        // At 1 s both admit; "hour" is then empty.
        clock.advance(to: s(1))
        let fourth = try submit(4, 1)
        #expect(fourth.outcome == .admitted(remaining: 0))
        #expect(fourth.quotas.map(\.remaining) == [1, 0])
        // A fifth: "hour" refuses until 1200 s (TAT 4800 s − 3600 s); "second" is not charged.
        let fifth = try submit(5, 1)
        #expect(fifth.outcome == .dropped(retryAt: s(1200)))
        #expect(fifth.refusedQuotas == ["hour"])
        #expect(fifth.retryAfterSeconds == 1199)
        #expect(try quota().quotas.map(\.remaining) == [1, 0])
        // Cost 2: both refuse; the overall retry is the latest, 2400 s.
        let heavy = try submit(6, 2)
        #expect(heavy.refusedQuotas == ["second", "hour"])
        #expect(heavy.quotas.map(\.retryAt) == [ms(1500), s(2400)])
        #expect(heavy.retryAt == s(2400))

        #expect(emitted() == [1, 2, 4])
        switch storage {
        case .slots: #expect(slotLog.values(.dropped) == ["v3", "v5", "v6"])
        case .compactObserved: #expect(compactLog.values(.dropped) == [3, 5, 6])
        case .slotsQuiet:  // released by the submits that refused them
            #expect(tracker.releasedIDs == [3, 5, 6] && tracker.alive == 3)
        case .emitOnly: break  // nobody observes drops
        }
        let stats = statistics()
        #expect(stats.admitted == 3 && stats.dropped == 3)
        #expect(held() == 0, "a rate limiter holds no value")
    }

    @Test("each quota's figures, and the headers of a Limiter's plan decision")
    func figuresAndHeaders() throws {
        let clock = ManualLimiterClock()
        let plan = RatePlan(
            "p",
            quotas: [
                .init("burst", limit: 4, per: .seconds(1), burst: 8),  // T = 250 ms
                .init("minute", limit: 60, per: .seconds(60)),  // T = 1 s, burst 60
            ])
        let out = Recorder<Int, String>()
        let limiter = try Limiter<Int, String>(plans: [plan], scheduler: .manual(clock), handler: out.handler)
        clock.advance(to: s(10))
        let d = try limiter.submit("x", for: 1, plan: "p", cost: 3)
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
        #expect(d.remaining == 5 && d.fullAt == s(13))
        let admitted = try #require(RateLimitHeaders(d))
        #expect(admitted.ratePolicy == #""burst";q=4;w=1, "minute";q=60;w=60"#)
        #expect(admitted.rateLimit == #""burst";r=5;t=1, "minute";r=57;t=3"#)
        #expect(admitted.retryAfter == nil)

        // Cost 6 now: "burst" refuses (TAT 10.75 s + 1.5 s > 10 s + 2 s) until 10.25 s.
        let refused = try limiter.submit("y", for: 1, plan: "p", cost: 6)
        #expect(refused.outcome == .dropped(retryAt: ms(10_250)))
        #expect(refused.refusedQuotas == ["burst"])
        let headers = try #require(RateLimitHeaders(refused))
        #expect(headers.retryAfter == "1")
        #expect(headers.ratePolicy == #""burst";q=4;w=1, "minute";q=60;w=60"#)
        #expect(headers.rateLimit == #""burst";r=5;t=1, "minute";r=57;t=3"#)
        // The read says the same without charging.
        let q = try limiter.quota(for: 1, plan: "p", cost: 6)
        #expect(q.plan == "p" && q.quotas.map(\.refused) == [true, false])
        #expect(q.retryAt == ms(10_250) && q.remaining == 5 && q.burst == 8)
        #expect(out.values == ["x"])
        #expect(limiter.storage.heldValues == 0, "the refused value was released")
    }

    @Test("a key that changes plan keeps its consumed units: TAT' = t + (TAT − t)·T'/T")
    func planChangeKeepsConsumption() throws {
        let clock = ManualLimiterClock()
        // free: hour 10 per 3600 s (T = 360 s); pro: second 2 per 1 s, hour 100 per 3600 s (T = 36 s).
        let free = RatePlan("free", quotas: [.init("hour", limit: 10, per: .seconds(3600))])
        let pro = RatePlan(
            "pro",
            quotas: [.init("second", limit: 2, per: .seconds(1)), .init("hour", limit: 100, per: .seconds(3600))])
        let out = Recorder<String, Int>()
        let limiter = try Limiter<String, Int>(plans: [free, pro], scheduler: .manual(clock), handler: out.handler)
        // Five calls at 0 under free: TAT 5 · 360 = 1800 s.
        for v in 1...5 { #expect(try limiter.submit(v, for: "k", plan: "free").isAdmitted) }
        clock.advance(to: s(600))
        // At 600 s: TAT − t = 1200 s, 3⅓ units of 10 consumed; 6 left.
        #expect(try limiter.quota(for: "k", plan: "free").remaining == 6)

        // Read under pro (a peek): TAT' = 600 + 1200 · 36/360 = 720 s, so
        // ⌊(3600 − 120) / 36⌋ = 96 left of 100; "second" is fresh.
        let peek = try limiter.quota(for: "k", plan: "pro")
        #expect(peek.quotas.map(\.name) == ["second", "hour"])
        #expect(peek.quotas.map(\.remaining) == [2, 96])
        #expect(peek.quotas.map(\.fullAt) == [s(600), s(720)])
        // The peek stored nothing: still 6 left under free, TAT 1800 s.
        #expect(try limiter.quota(for: "k", plan: "free").fullAt == s(1800))

        // Upgrade: charged under pro after the conversion: TAT' 720 + 36 = 756 s,
        // ⌊(3600 − 156) / 36⌋ = 95 left; "second" TAT 600.5 s.
        let up = try limiter.submit(6, for: "k", plan: "pro")
        #expect(up.isAdmitted && up.plan == "pro")
        #expect(up.quotas.map(\.remaining) == [1, 95])
        #expect(up.quotas.map(\.fullAt) == [ms(600_500), s(756)])
        #expect(up.outcome == .admitted(remaining: 1) && up.fullAt == s(756))

        // Back to free: TAT = 600 + 156 · 360/36 = 2160 s, then + 360 = 2520 s:
        // ⌊(3600 − 1920) / 360⌋ = 4 left; "second" is forgotten.
        let down = try limiter.submit(7, for: "k", plan: "free")
        #expect(down.outcome == .admitted(remaining: 4))
        #expect(down.quotas.map(\.fullAt) == [s(2520)])
        // And under pro again (a peek): TAT' = 600 + 1920 · 36/360 = 792 s: 94 left; "second" whole.
        #expect(try limiter.quota(for: "k", plan: "pro").quotas.map(\.remaining) == [2, 94])
        #expect(out.values == [1, 2, 3, 4, 5, 6, 7])
    }

    @Test("update(plans:) at run time: numbers change, consumption stays, handles follow names")
    func updateAtRunTime() throws {
        let clock = ManualLimiterClock()
        let basic = RatePlan("basic", quotas: [.init("hour", limit: 10, per: .seconds(3600))])
        let gold = RatePlan("gold", quotas: [.init("hour", limit: 50, per: .seconds(3600))])
        let out = Recorder<String, Int>()
        let limiter = try Limiter<String, Int>(plans: [basic, gold], scheduler: .manual(clock), handler: out.handler)
        #expect(limiter.policy == .rate(limit: 10, per: .seconds(3600)))
        let handle = try limiter.plan(named: "basic")
        let goldHandle = try limiter.plan(named: "gold")
        for v in 0..<5 { #expect(try limiter.submit(v, for: "k", plan: handle).isAdmitted) }  // TAT 1800 s
        #expect(try limiter.coreIndex(ofPlan: "gold") == 1)

        // basic doubles (T 360 s → 180 s) and moves behind a new default plan.
        let basic2 = RatePlan("basic", quotas: [.init("hour", limit: 20, per: .seconds(3600))])
        let trial = RatePlan("trial", quotas: [.init("hour", limit: 1, per: .seconds(3600))])
        try limiter.update(plans: [trial, basic2])
        #expect(limiter.plans == [trial, basic2])
        #expect(try limiter.coreIndex(ofPlan: "basic") == 1)
        // TAT' = 0 + 1800 · 180/360 = 900 s; this call makes it 1080 s: 14 left.
        let after = try limiter.submit(5, for: "k", plan: handle)
        #expect(after.outcome == .admitted(remaining: 14))
        #expect(after.quotas.first?.limit == 20)
        #expect(try limiter.submit(6, for: "k", plan: "basic").outcome == .admitted(remaining: 13))
        #expect(try limiter.quota(for: "k", plan: handle).remaining == 13)
        // The default plan (no plan named) is now trial: one call an hour.
        #expect(try limiter.submit(7, for: "other") == .emitted)
        #expect(try limiter.submit(8, for: "other") == .dropped(retryAt: s(3600)))
        #expect(try limiter.submit(9, for: "other", cost: 1).retryAt == s(3600))

        // A removed plan: by name and by handle.
        #expect(throws: LimiterError.unknownPlan) { try limiter.submit(10, for: "k", plan: "gold") }
        #expect(throws: LimiterError.unknownPlan) { try limiter.submit(10, for: "k", plan: goldHandle) }
        #expect(throws: LimiterError.unknownPlan) { try limiter.quota(for: "k", plan: goldHandle) }

        // An invalid table is refused whole; the plans stay.
        do {
            try limiter.update(plans: [basic2, basic2])
            Issue.record("a table with a plan twice was taken")
        } catch {
            #expect(error == .invalidArgument)
            #expect(error.reason?.contains("\"basic\" is used twice") == true, "\(error)")
        }
        #expect(limiter.plans == [trial, basic2])
        // More quotas than the limiter's maxQuotas (1: the most of the plans given).
        let two = RatePlan(
            "basic",
            quotas: [.init("hour", limit: 20, per: .seconds(3600)), .init("day", limit: 99, per: .seconds(86400))])
        #expect(throws: LimiterError.invalidArgument) { try limiter.update(plans: [two]) }
        #expect(try limiter.submit(11, for: "k", plan: "basic").outcome == .admitted(remaining: 12))
        #expect(out.values == [0, 1, 2, 3, 4, 5, 6, 7, 11])

        // With room for them, quotas can be added; "day" starts whole.
        let roomy = try Limiter<String, Int>(
            plans: [basic], scheduler: .manual(clock), maxQuotas: 2, handler: out.handler)
        try roomy.submit(0, for: "k", plan: "basic")
        try roomy.update(plans: [two])
        let added = try roomy.submit(0, for: "k", plan: "basic")
        #expect(added.quotas.map(\.name) == ["hour", "day"])
        #expect(added.quotas.map(\.remaining) == [18, 98])

        // A limiter of one rate policy has its plan "default", and no plans to update.
        let single = try Limiter<String, Int>(
            .rate(limit: 2, per: .seconds(1)), scheduler: .manual(clock), handler: out.handler)
        #expect(single.plans.map(\.name) == ["default"])
        #expect(try single.submit(0, for: "k", plan: "default").outcome == .admitted(remaining: 1))
        // The calls without a plan share the key's state.
        #expect(try single.submit(0, for: "k", cost: 1).outcome == .admitted(remaining: 0))
        #expect(try single.submit(0, for: "k", plan: "default").refusedQuotas == ["default"])
        do {
            try single.update(plans: [basic])
            Issue.record("a limiter of one policy took plans")
        } catch {
            #expect(error == .invalidArgument)
            #expect(error.reason?.contains("Limiter(plans:)") == true, "\(error)")
        }
    }

    @Test("update(plans:) from the delivery of an emission: delivered outside the plan lock")
    func updateFromDelivery() throws {
        let clock = ManualLimiterClock()
        let basic = RatePlan("basic", quotas: [.init("hour", limit: 10, per: .seconds(3600))])
        let more = RatePlan("basic", quotas: [.init("hour", limit: 20, per: .seconds(3600))])
        final class Box: @unchecked Sendable { var limiter: Limiter<Int, Int>? }
        let box = Box()
        let updated = Locked(false)
        box.limiter = try Limiter<Int, Int>(plans: [basic], scheduler: .manual(clock)) { _, _ in
            // On a manual clock the submit that emitted delivers here, inside
            // its own call: after the plan lock is given up.
            try? box.limiter?.update(plans: [more])
            _ = try? box.limiter?.quota(for: 1, plan: "basic")
            updated.withLock { $0 = true }
        }
        let limiter = try #require(box.limiter)
        // On another thread, bounded: a delivery under the plan lock would
        // deadlock there (the update waits for the submit's own read lock).
        let decision = Locked<RateDecision?>(nil)
        let done = DispatchSemaphore(value: 0)
        DispatchQueue.global().async {
            decision.withLock { $0 = try? limiter.submit(1, for: 1, plan: "basic") }
            done.signal()
        }
        guard done.wait(timeout: .now() + 20) == .success else {
            Issue.record("the submit whose delivery updates the plans did not return")
            return
        }
        #expect(decision.withLock { $0 }?.outcome == .admitted(remaining: 9))
        #expect(updated.withLock { $0 })
        #expect(limiter.plans == [more])
        box.limiter = nil
    }

    @Test("an unknown plan is refused with unknownPlan, releases the value, and leaves the limiter usable")
    func unknownPlan() throws {
        let clock = ManualLimiterClock()
        let tracker = LifetimeTracker()
        let out = Recorder<String, Tracked>()
        let limiter = try Limiter<String, Tracked>(plans: [Self.pro], scheduler: .manual(clock), handler: out.handler)
        do {
            try limiter.submit(tracker.make(1), for: "k", plan: "platinum")
            Issue.record("an unknown plan was taken")
        } catch {
            #expect(error == .unknownPlan)
            #expect(error.reason?.contains("\"platinum\"") == true && error.reason?.contains("\"pro\"") == true)
        }
        #expect(tracker.isReleased(1) && out.count == 0)
        #expect(throws: LimiterError.unknownPlan) { try limiter.quota(for: "k", plan: "platinum") }
        #expect(throws: LimiterError.unknownPlan) { try limiter.plan(named: "platinum") }
        #expect(throws: LimiterError.outOfRange) { try limiter.submit(tracker.make(2), for: "k", plan: "pro", cost: 0) }
        #expect(tracker.isReleased(2))
        // Nothing was charged, and the limiter goes on.
        #expect(try limiter.quota(for: "k", plan: "pro").quotas.map(\.remaining) == [2, 3])
        #expect(try limiter.submit(tracker.make(3), for: "k", plan: "pro").outcome == .admitted(remaining: 1))
        #expect(out.values.map(\.id) == [3])
        try limiter.close()
        #expect(throws: LimiterError.closed) { try limiter.submit(tracker.make(4), for: "k", plan: "pro") }
        #expect(tracker.isReleased(4))
        #expect(limiter.statistics.admitted == 1 && limiter.statistics.dropped == 0)
    }

    @Test("plans need the rate policy: any other refuses them with a reason")
    func otherPolicies() throws {
        let clock = ManualLimiterClock()
        let limiter = try Limiter<Int, Int>(.throttle(interval: .seconds(1)), scheduler: .manual(clock)) { _, _ in }
        #expect(limiter.plans.isEmpty)
        do {
            try limiter.submit(1, for: 1, plan: "default")
            Issue.record("a throttle took a plan")
        } catch {
            #expect(error == .invalidArgument)
            #expect(error.reason?.contains("rate") == true, "\(error)")
        }
        #expect(throws: LimiterError.invalidArgument) { try limiter.quota(for: 1, plan: "default") }
        #expect(throws: LimiterError.invalidArgument) { try limiter.plan(named: "default") }
        #expect(throws: LimiterError.invalidArgument) { try limiter.update(plans: [Self.pro]) }
        // An invalid table names the rule.
        do {
            _ = try Limiter<Int, Int>(plans: [Self.pro, Self.pro], scheduler: .manual(clock)) { _, _ in }
            Issue.record("a table with a plan twice was taken")
        } catch {
            #expect(error == .invalidArgument && error.reason?.contains("used twice") == true)
        }
        #expect(throws: LimiterError.invalidArgument) {
            try Limiter<Int, Int>(plans: [Self.pro], scheduler: .manual(clock), maxKeys: 0) { _, _ in }
        }
    }

    /// A timer host whose time is moved by hand; a rate limiter arms no
    /// wake-up (nothing is ever pending), so none is run.
    final class StillHost: LimiterTimerHost {
        let time = Locked<UInt64>(0)
        var nowNanoseconds: UInt64 { time.withLock { $0 } }
        struct NoWakeUp: LimiterWakeUp { func cancel() {} }
        func scheduleWakeUp(at deadline: UInt64, _ body: @escaping @Sendable () -> Void) -> any LimiterWakeUp {
            NoWakeUp()
        }
    }

    @Test("on a timer host (the external engine): the same decisions, values emitted and dropped")
    func onTimerHost() throws {
        let host = StillHost()
        let log = Log<String>()
        let limiter = try Limiter<Int, String>(
            plans: [Self.pro], scheduler: .external(host), delivery: .events { log.add($0) })
        #expect(try limiter.submit("a", for: 1, plan: "pro").quotas.map(\.remaining) == [1, 2])
        #expect(try limiter.submit("b", for: 1, plan: "pro").outcome == .admitted(remaining: 0))
        let third = try limiter.submit("c", for: 1, plan: "pro")
        #expect(third.outcome == .dropped(retryAt: ms(500)) && third.refusedQuotas == ["second"])
        host.time.withLock { $0 = 1_000_000_000 }  // 1 s
        #expect(try limiter.submit("d", for: 1, plan: "pro").quotas.map(\.remaining) == [1, 0])
        #expect(try limiter.submit("e", for: 1, plan: "pro").refusedQuotas == ["hour"])
        #expect(try limiter.quota(for: 1, plan: "pro").quotas.map(\.remaining) == [1, 0])
        try limiter.update(plans: [RatePlan("pro", quotas: [.init("hour", limit: 6, per: .seconds(3600))])])
        // "hour" doubled: TAT' = 1 + (3600 − 1) · 600/1200 s = 1800.5 s; +600 s: ⌊(3600 − 2399.5) / 600⌋ = 2 left.
        #expect(try limiter.submit("f", for: 1, plan: "pro").outcome == .admitted(remaining: 2))
        #expect(log.values(.emitted) == ["a", "b", "d", "f"])
        #expect(log.values(.dropped) == ["c", "e"])
        #expect(limiter.storage.heldValues == 0)
    }

    @Test(
        "on the loop: every admitted value is emitted, every refused one dropped, nothing lost at close",
        .timeLimit(.minutes(1)))
    func onLoopNothingLost() async throws {
        // Long windows: the loop's real clock cannot give a unit back during the test.
        let plan = RatePlan(
            "p", quotas: [.init("a", limit: 3, per: .seconds(3600)), .init("b", limit: 2, per: .seconds(7200))])
        let dropped = Locked<[Int]>([])
        let (limiter, emissions) = try Limiter<Int, Int>.makeStream(plans: [plan])
        var admitted: [Int] = []
        var refused: [Int] = []
        for v in 0..<40 {
            let decision = try limiter.submit(v, for: v % 4, plan: "p")
            if decision.isAdmitted { admitted.append(v) } else { refused.append(v) }
            if v % 4 == 3 && v / 4 == 2 { #expect(decision.refusedQuotas == ["b"]) }
        }
        // Each of 4 keys: "b" admits 2 of its 10.
        #expect(admitted == [0, 1, 2, 3, 4, 5, 6, 7])
        #expect(try limiter.quota(for: 1, plan: "p").quotas.map(\.remaining) == [1, 0])
        // Closed without waiting: a value the limiter kept would hold the
        // stream open for ever, so first wait (bounded) until none is held.
        try Self.closeWithoutWaiting(limiter)
        guard await eventually(timeout: .seconds(20), { limiter.storage.heldValues == 0 }) else {
            Issue.record("values still held after close: \(limiter.storage.heldValues)")
            return
        }
        var emitted: [Int] = []
        for await emission in emissions {
            #expect(emission.key == emission.value % 4)
            emitted.append(emission.value)
        }
        #expect(emitted.sorted() == admitted)
        #expect(limiter.storage.heldValues == 0)
        let stats = limiter.statistics
        #expect(stats.admitted == 8 && stats.dropped == 32)

        // With a delivery that observes drops: each refused value is reported once.
        let emittedToo = Locked<[Int]>([])
        let observed = try Limiter<Int, Int>(
            plans: [plan],
            delivery: .events { event in
                switch event.kind {
                case .emitted: emittedToo.withLock { $0.append(event.value) }
                case .dropped: dropped.withLock { $0.append(event.value) }
                case .discarded: Issue.record("a rate limiter discarded \(event.value)")
                }
            })
        for v in 0..<10 { try observed.submit(v, for: 0, plan: "p") }
        try Self.closeWithoutWaiting(observed)
        #expect(await eventually(timeout: .seconds(20)) { observed.storage.heldValues == 0 })
        #expect(await eventually(timeout: .seconds(20)) { dropped.withLock { $0.count } == 8 })
        #expect(emittedToo.withLock { $0 } == [0, 1])
        #expect(dropped.withLock { $0 } == Array(2..<10))
        #expect(observed.storage.heldValues == 0)
        _ = refused
    }
}
