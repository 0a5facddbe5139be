import CSluice
import Foundation
import Testing

import Sluice
import SluiceFleet
import SluiceHTTP

private let free = RatePlan(
    "free",
    quotas: [.init("second", limit: 1, per: .seconds(1), burst: 2), .init("hour", limit: 10, per: .seconds(3600))])
private let pro = RatePlan(
    "pro",
    quotas: [
        .init("second", limit: 10, per: .seconds(1)), .init("minute", limit: 100, per: .seconds(60)),
        .init("hour", limit: 1000, per: .seconds(3600)),
    ])

private func config(port: Int, prefix: String, manual: Bool = true) -> FleetConfiguration {
    var c = FleetConfiguration()
    c.port = port
    c.prefix = prefix
    c.timeout = .seconds(30)  // generous: a slow reply on a loaded machine is not a fault here
    c.manualTime = manual
    c.cacheTTL = .seconds(60)
    return c
}

@Suite("FleetLimiter with plans")
struct FleetPlanTests {
    @Test("calls and reads under plans equal the local RateLimiter's, across plan changes and updates", .needsRedis)
    func twin() async throws {
        let redis = try await RedisServer.start()
        defer { withExtendedLifetime(redis) {} }
        let fleet = try FleetLimiter<String>(plans: [free, pro], configuration: config(port: redis.port, prefix: "sp"))
        defer { try? fleet.close() }
        let clock = ManualLimiterClock()
        let local = try RateLimiter<String>(plans: [free, pro], scheduler: .manual(clock))
        #expect(fleet.plans == [free, pro] && fleet.planNames == ["free", "pro"])

        var sources: [RateDecision.Source] = []
        func call(_ key: String, _ plan: String, cost: Int = 1, at ms: UInt64) async throws -> RateDecision {
            let t = LimiterInstant(nanoseconds: ms * 1_000_000)
            if t > clock.now { clock.advance(to: t) }
            let f = try await fleet.check(key, plan: plan, cost: cost, at: t)
            let l = try local.check(key, plan: plan, cost: cost)
            sources.append(f.source)
            var same = f
            same.source = .limiter
            if f.source == .cache {
                // a certain drop from a lower bound: the local limiter drops too
                #expect(!f.isAdmitted && !l.isAdmitted, "\(key) \(plan) at \(ms)")
            } else {
                #expect(same == l, "\(key) \(plan) at \(ms): fleet \(f) local \(l)")
                #expect(f.quotas == l.quotas && f.refusedQuotas == l.refusedQuotas)
            }
            return f
        }
        let a = try await call("k", "free", at: 0)
        #expect(a.isAdmitted && a.plan == "free" && a.quotas.map(\.name) == ["second", "hour"])
        #expect(a.quotas.map(\.remaining) == [1, 9])
        _ = try await call("k", "free", at: 0)
        let refused = try await call("k", "free", at: 10)
        #expect(!refused.isAdmitted && refused.refusedQuotas == ["second"])
        // upgrade: the units used stay used, converted by quota name
        let up = try await call("k", "pro", cost: 3, at: 20)
        #expect(up.isAdmitted && up.quotas.count == 3)
        // downgrade again: converted back, refused
        let down = try await call("k", "free", at: 30)
        #expect(!down.isAdmitted)
        for ms in stride(from: UInt64(100), through: 4000, by: 350) {
            _ = try await call(ms % 700 == 100 ? "k" : "j", ms % 3 == 0 ? "pro" : "free", cost: Int(ms % 4) + 1, at: ms)
        }
        // quota reads: overall and each quota's figures equal the local ones
        let t = LimiterInstant(nanoseconds: 4_100_000_000)
        clock.advance(to: t)
        for plan in ["free", "pro"] {
            let fq = try await fleet.quota(for: "k", plan: plan, cost: 2, at: t)
            let lq = try local.quota(for: "k", plan: plan, cost: 2)
            #expect(fq == lq, "\(plan): fleet \(fq) local \(lq)")
            #expect(fq.quotas.count == (plan == "free" ? 2 : 3))
        }
        // a new table at run time: the second quota of free doubles; keys keep their units
        let free2 = RatePlan(
            "free",
            quotas: [
                .init("second", limit: 2, per: .seconds(1), burst: 4), .init("hour", limit: 10, per: .seconds(3600)),
            ])
        try fleet.update(plans: [free2, pro])
        try local.update(plans: [free2, pro])
        #expect(fleet.plans == [free2, pro])
        for ms in stride(from: UInt64(4200), through: 6000, by: 150) {
            _ = try await call(ms % 300 == 0 ? "k" : "j", ms % 450 == 0 ? "pro" : "free", at: ms)
        }
        #expect(sources.contains(.limiter))
    }

    @Test("errors name the problem and leave the limiter usable", .needsRedis)
    func errors() async throws {
        let redis = try await RedisServer.start()
        defer { withExtendedLifetime(redis) {} }
        let fleet = try FleetLimiter<String>(plans: [free, pro], configuration: config(port: redis.port, prefix: "se"))
        defer { try? fleet.close() }
        let t = LimiterInstant(nanoseconds: 1_000_000_000)
        await #expect(throws: LimiterError.unknownPlan) { _ = try await fleet.check("k", plan: "gold", at: t) }
        await #expect(throws: LimiterError.unknownPlan) { _ = try await fleet.quota(for: "k", plan: "gold", at: t) }
        #expect(throws: LimiterError.invalidArgument) {
            try fleet.update(plans: [free, RatePlan("pro", quotas: [])])
        }
        #expect(throws: LimiterError.invalidArgument) { try fleet.update(plans: [free, pro], fallback: [pro, free]) }
        #expect(fleet.plans == [free, pro], "unchanged after refused updates")
        #expect(try await fleet.check("k", plan: "pro", at: t).isAdmitted)

        // a limiter of one policy has no plans
        let one = try FleetLimiter<String>(
            .rate(limit: 1, per: .seconds(1)), configuration: config(port: redis.port, prefix: "se1"))
        defer { try? one.close() }
        #expect(one.plans.isEmpty)
        do {
            _ = try await one.check("k", plan: "free", at: t)
            Issue.record("a plan call on a limiter without plans")
        } catch {
            #expect(error == .invalidArgument && error.reason?.contains("no plans") == true, "\(error)")
        }
        // a fallback policy with plans: refused, naming the option
        var c = config(port: redis.port, prefix: "se2")
        c.onFailure = .local(.rate(limit: 1, per: .seconds(1)))
        do {
            _ = try FleetLimiter<String>(plans: [free], configuration: c)
            Issue.record("a fallback policy with plans")
        } catch {
            #expect(error == .invalidArgument && error.reason?.contains("onFailure") == true, "\(error)")
        }
    }

    @Test("the gate and the headers take a fleet limiter of plans (server time)", .needsRedis)
    func gate() async throws {
        let redis = try await RedisServer.start()
        defer { withExtendedLifetime(redis) {} }
        let slow = RatePlan(
            "slow",
            // an hour, not a minute: three calls on a starved test pool (TSan)
            // can be tens of seconds apart, and must not see the quota refill
            quotas: [.init("hour", limit: 2, per: .seconds(3600)), .init("day", limit: 100, per: .seconds(86400))])
        let fleet = try FleetLimiter<String>(
            plans: [slow], configuration: config(port: redis.port, prefix: "sg", manual: false))
        defer { try? fleet.close() }
        let gate = RateLimitGate(fleet)
        #expect(gate.firstPlan == "slow")
        let first = await gate.evaluate(key: "c", plan: "slow")
        #expect(first.rejection == nil)
        #expect(first.ratePolicy == #""hour";q=2;w=3600, "day";q=100;w=86400"#)
        _ = await gate.evaluate(key: "c", plan: "slow")
        let refused = await gate.evaluate(key: "c", plan: "slow")
        let rejection = try #require(refused.rejection)
        #expect(rejection.status == 429)
        let body = try #require(try JSONSerialization.jsonObject(with: Data(rejection.body.utf8)) as? [String: Any])
        #expect(body["violated-policies"] as? [String] == ["hour"])
        let retry = try #require(refused.retryAfter.flatMap(Int.init))
        #expect((1...3600).contains(retry))
        let unknown = await gate.evaluate(key: "c", plan: "gold")
        #expect(unknown.rejection?.status == 503 && unknown.decision == nil)
    }
}
