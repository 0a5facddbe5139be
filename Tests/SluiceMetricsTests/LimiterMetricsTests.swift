#if Metrics
import Logging
import MetricsTestKit
import ServiceLifecycle
import Sluice
import SluiceMetrics
import Synchronization
import Testing

@Suite("Limiter metrics and lifecycle")
struct LimiterMetricsTests {
    @Test("counters grow by what the limiter's counters grew; gauges follow live keys and pending values")
    func countersAndGauges() throws {
        let clock = ManualLimiterClock()
        let emitted = Mutex<[String]>([])
        let debounce = try Limiter<String, Int>(.debounce(interval: .milliseconds(100)), scheduler: .manual(clock)) {
            key, value in emitted.withLock { $0.append("\(key)=\(value)") }
        }
        let rate = try RateLimiter<String>(limit: 1, per: .seconds(1), scheduler: .manual(clock), maxKeys: 1)
        let factory = TestMetrics()
        let metrics = LimiterMetrics([.limiter("saves", debounce), .rateLimiter("api", rate)], factory: factory)
        func counter(_ label: String, _ name: String) throws -> Int64 {
            try factory.expectCounter(label, [("limiter", name)]).totalValue
        }
        func gauge(_ label: String, _ name: String) throws -> Double? {
            try factory.expectGauge(label, [("limiter", name)]).lastValue
        }

        try debounce.submit(1, for: "a")
        try debounce.submit(2, for: "a")  // supersedes 1: a drop
        try debounce.submit(3, for: "b")
        _ = try rate.check("x")
        _ = try rate.check("x")  // dropped
        #expect(throws: LimiterError.full) { try rate.check("y") }  // refused at the cap
        metrics.poll()
        #expect(try counter("sluice_dropped_total", "saves") == 1)
        #expect(try gauge("sluice_live_keys", "saves") == 2)
        #expect(try gauge("sluice_pending_values", "saves") == 2)
        #expect(try counter("sluice_admitted_total", "api") == 1)
        #expect(try counter("sluice_dropped_total", "api") == 1)
        #expect(try counter("sluice_refused_at_cap_total", "api") == 1)

        clock.advance(by: .milliseconds(100))
        metrics.poll()
        metrics.poll()  // a second poll adds nothing
        #expect(emitted.withLock { $0.sorted() } == ["a=2", "b=3"])
        #expect(try counter("sluice_emitted_later_total", "saves") == 2)
        #expect(try counter("sluice_dropped_total", "saves") == 1)
        #expect(try gauge("sluice_pending_values", "saves") == 0)
        #expect(try counter("sluice_refused_at_cap_total", "api") == 1)
    }

    @Test("a rate limiter has no series that could never move: emitted later, discarded, pending")
    func rateLimiterSeries() throws {
        let clock = ManualLimiterClock()
        let rate = try RateLimiter<String>(limit: 1, per: .seconds(1), scheduler: .manual(clock))
        let rateValues = try Limiter<String, Int>(.rate(limit: 1, per: .seconds(1)), scheduler: .manual(clock)) {
            _, _ in
        }
        let debounce = try Limiter<String, Int>(.debounce(interval: .seconds(1)), scheduler: .manual(clock)) { _, _ in }
        let factory = TestMetrics()
        let metrics = LimiterMetrics(
            [.rateLimiter("api", rate), .limiter("uploads", rateValues), .limiter("saves", debounce)], factory: factory)
        _ = try rate.check("x")
        try rateValues.submit(1, for: "x")
        try debounce.submit(1, for: "x")
        metrics.poll()
        for name in ["api", "uploads"] {
            let dimensions = [("limiter", name)]
            for label in ["sluice_emitted_later_total", "sluice_discarded_total"] {
                #expect(factory.counters(label: label, dimensions: dimensions).isEmpty, "\(name): \(label)")
            }
            #expect(factory.recorders(label: "sluice_pending_values", dimensions: dimensions).isEmpty, "\(name)")
            #expect(try factory.expectCounter("sluice_admitted_total", dimensions).totalValue == 1, "\(name)")
            #expect(try factory.expectGauge("sluice_live_keys", dimensions).lastValue == 1, "\(name)")
            _ = try factory.expectCounter("sluice_dropped_total", dimensions)
            _ = try factory.expectCounter("sluice_refused_at_cap_total", dimensions)
        }
        let saves = [("limiter", "saves")]
        #expect(try factory.expectGauge("sluice_pending_values", saves).lastValue == 1)
        _ = try factory.expectCounter("sluice_emitted_later_total", saves)
        _ = try factory.expectCounter("sluice_discarded_total", saves)
        #expect(ObservedLimiter.rateLimiter("api", rate).decidesOnly)
        #expect(ObservedLimiter.limiter("uploads", rateValues).decidesOnly)
        #expect(!ObservedLimiter.limiter("saves", debounce).decidesOnly)
    }

    @Test("a decider with a shared store (a fleet limiter): its failures have their own series; drained by closing")
    func sharedStoreDecider() async throws {
        let decider = StoreDecider()
        let factory = TestMetrics()
        let observed = ObservedLimiter.rateDecider("fleet", decider)
        #expect(observed.decidesOnly && observed.sharedStore)
        #expect(!ObservedLimiter.rateLimiter("api", try RateLimiter<String>(limit: 1, per: .seconds(1))).sharedStore)
        let metrics = LimiterMetrics([observed], factory: factory)
        decider.record(admitted: 5, dropped: 2, failures: 3)
        metrics.poll()
        let dimensions = [("limiter", "fleet")]
        #expect(try factory.expectCounter("sluice_admitted_total", dimensions).totalValue == 5)
        #expect(try factory.expectCounter("sluice_dropped_total", dimensions).totalValue == 2)
        #expect(try factory.expectCounter("sluice_failures_total", dimensions).totalValue == 3)
        #expect(factory.recorders(label: "sluice_pending_values", dimensions: dimensions).isEmpty)
        decider.record(admitted: 6, dropped: 2, failures: 7)
        metrics.poll()
        #expect(try factory.expectCounter("sluice_failures_total", dimensions).totalValue == 7)
        let service = LimiterService([observed], metrics: metrics)
        await service.drain()
        #expect(decider.closed)
    }

    @Test("by default the service's metrics lag the limiters by about a second, not ten", .timeLimit(.minutes(1)))
    func pollLag() async throws {
        let rate = try RateLimiter<String>(limit: 100, per: .seconds(1))
        let factory = TestMetrics()
        let logger = Logger(label: "test")
        let service = LimiterService(
            [.rateLimiter("api", rate)], metrics: LimiterMetrics([.rateLimiter("api", rate)], factory: factory),
            logger: logger)
        #expect(service.pollInterval == .seconds(1))
        let group = ServiceGroup(configuration: .init(services: [service], logger: logger))
        func admitted() -> Int64 {
            factory.counters(label: "sluice_admitted_total", dimensions: [("limiter", "api")]).first?.totalValue ?? 0
        }
        try await withThrowingTaskGroup(of: Void.self) { tasks in
            tasks.addTask { try await group.run() }
            // The first poll comes at once (it records the gauge); a check
            // after it shows at the next one.
            func polled() -> Bool {
                factory.recorders(label: "sluice_live_keys", dimensions: [("limiter", "api")]).first?.lastValue != nil
            }
            let start = ContinuousClock.now
            while !polled(), ContinuousClock.now - start < .seconds(20) {
                try await Task.sleep(for: .milliseconds(5))
            }
            #expect(polled())
            _ = try rate.check("x")
            let checked = ContinuousClock.now
            // Generous for a loaded machine, yet well under the old 10 s interval.
            while admitted() == 0, ContinuousClock.now - checked < .seconds(6) {
                try await Task.sleep(for: .milliseconds(10))
            }
            let lag = ContinuousClock.now - checked
            #expect(admitted() == 1, "the check did not show within \(lag)")
            await group.triggerGracefulShutdown()
            try await tasks.waitForAll()
        }
    }

    @Test("graceful shutdown of the service group drains the limiters: no pending value is lost")
    func drainOnShutdown() async throws {
        let emitted = Mutex<[String]>([])
        let debounce = try Limiter<String, Int>(.debounce(interval: .seconds(3600))) { key, value in
            emitted.withLock { $0.append("\(key)=\(value)") }
        }
        let factory = TestMetrics()
        let logger = Logger(label: "test")
        let service = LimiterService(
            [.limiter("saves", debounce)], metrics: LimiterMetrics([.limiter("saves", debounce)], factory: factory),
            pollInterval: .milliseconds(10), logger: logger)
        let group = ServiceGroup(configuration: .init(services: [service], logger: logger))
        try debounce.submit(1, for: "a")
        try debounce.submit(2, for: "b")
        try await withThrowingTaskGroup(of: Void.self) { tasks in
            tasks.addTask { try await group.run() }
            try await Task.sleep(for: .milliseconds(50))
            #expect(emitted.withLock { $0.isEmpty }, "nothing is due for an hour")
            await group.triggerGracefulShutdown()
            try await tasks.waitForAll()
        }
        #expect(emitted.withLock { $0.sorted() } == ["a=1", "b=2"])
        #expect(debounce.isClosed)
        #expect(try factory.expectCounter("sluice_emitted_later_total", [("limiter", "saves")]).totalValue == 2)
    }
}
/// A decider whose counters the test sets, standing for a fleet limiter.
private final class StoreDecider: RateDecider {
    private let state = Mutex<(statistics: LimiterStatistics, closed: Bool)>(
        (LimiterStatistics.zero(), false))
    let policy = LimiterPolicy.rate(limit: 1, per: .seconds(1))

    func record(admitted: Int, dropped: Int, failures: Int) {
        state.withLock {
            $0.statistics.admitted = admitted
            $0.statistics.dropped = dropped
            $0.statistics.failures = failures
        }
    }

    var closed: Bool { state.withLock { $0.closed } }
    var statistics: LimiterStatistics { state.withLock { $0.statistics } }
    func check(_ key: String, cost: Int) async throws(LimiterError) -> RateDecision { throw .notConnected }
    func close() throws(LimiterError) { state.withLock { $0.closed = true } }
}

extension LimiterStatistics {
    /// All counters 0 (read from a fresh rate limiter).
    fileprivate static func zero() -> LimiterStatistics {
        (try? RateLimiter<String>(limit: 1, per: .seconds(1)).statistics)!
    }
}
#endif
