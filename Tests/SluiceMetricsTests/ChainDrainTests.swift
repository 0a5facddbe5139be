#if Metrics
import Logging
import MetricsTestKit
import ServiceLifecycle
import Sluice
import SluiceMetrics
import Synchronization
import Testing

/// "Debounce, but at most every 30 s": a debounce whose handler submits to a
/// throttle. LimiterService drains in the order given, each limiter after the
/// previous one's drained values were delivered, so nothing is lost at
/// shutdown (docs/semantics.md, "Chains").
@Suite("Limiter chains at shutdown")
struct ChainDrainTests {
    /// A debounce (2 s) feeding a throttle (30 s) on one manual clock; saves
    /// and refused hand-offs are recorded with the clock's time.
    /// Lines recorded from handlers.
    final class Record: Sendable {
        private let lines = Mutex<[String]>([])
        func append(_ line: String) { lines.withLock { $0.append(line) } }
        var all: [String] { lines.withLock { $0 } }
    }

    struct Chain {
        let clock = ManualLimiterClock()
        let saved = Record()
        let refused = Record()
        let saves: Limiter<String, Int>
        let quiet: Limiter<String, Int>

        init() throws {
            let clock = self.clock
            let saved = self.saved
            let refused = self.refused
            let saves = try Limiter<String, Int>(.throttle(interval: .seconds(30)), scheduler: .manual(clock)) {
                id, version in
                saved.append("\(id)=\(version)@\(clock.now.nanoseconds / 1_000_000_000)s")
            }
            self.saves = saves
            quiet = try Limiter<String, Int>(.debounce(interval: .seconds(2)), scheduler: .manual(clock)) {
                id, version in
                do { try saves.submit(version, for: id) } catch {
                    refused.append("\(id)=\(version): \(error)")
                }
            }
        }

        func advance(toSeconds seconds: Int64) {
            clock.advance(to: LimiterInstant(nanoseconds: UInt64(seconds) * 1_000_000_000))
        }

        /// The timeline of docs/semantics.md, stopped at 25 s: a1' saved at 3,
        /// a3 kept by the throttle for 33, b1 waiting in the debounce.
        func run() throws {
            try quiet.submit(1, for: "a")
            advance(toSeconds: 1)
            try quiet.submit(11, for: "a")  // a1'
            advance(toSeconds: 10)  // quiet at 3: saved at once
            try quiet.submit(2, for: "a")
            advance(toSeconds: 20)  // quiet at 12: kept for 33
            try quiet.submit(3, for: "a")
            advance(toSeconds: 23)  // quiet at 22: replaces 2, kept for 33
            try quiet.submit(1, for: "b")  // waits in the debounce until 25
            advance(toSeconds: 24)
        }
    }

    @Test("the timeline of docs/semantics.md: saves 30 s apart, each the latest quiet value")
    func timeline() throws {
        let chain = try Chain()
        try chain.run()
        #expect(chain.saved.all == ["a=11@3s"])  // saved at its quiet moment, 3 s
        chain.advance(toSeconds: 40)
        #expect(chain.saved.all == ["a=11@3s", "b=1@25s", "a=3@33s"])
        #expect(chain.saves.statistics.dropped == 1, "a=2 was replaced by a=3")
    }

    @Test("LimiterService drains the chain upstream first: every key's latest value is saved once")
    func drainInOrder() async throws {
        let chain = try Chain()
        try chain.run()
        let service = LimiterService(
            [.limiter("quiet", chain.quiet), .limiter("saves", chain.saves)],
            metrics: LimiterMetrics([], factory: TestMetrics()), logger: Logger(label: "test"))
        await service.drain()
        // b=1 (drained by the debounce) is saved at once by the idle throttle
        // key; a=3 (kept by the throttle) by the throttle's drain.
        #expect(chain.saved.all == ["a=11@3s", "b=1@24s", "a=3@24s"])
        #expect(chain.refused.all.isEmpty)
        #expect(chain.quiet.isClosed && chain.saves.isClosed)
    }

    @Test("the other order loses what the debounce drains: the throttle is closed already")
    func drainInWrongOrder() async throws {
        let chain = try Chain()
        try chain.run()
        let service = LimiterService(
            [.limiter("saves", chain.saves), .limiter("quiet", chain.quiet)],
            metrics: LimiterMetrics([], factory: TestMetrics()), logger: Logger(label: "test"))
        await service.drain()
        #expect(chain.saved.all == ["a=11@3s", "a=3@24s"])
        #expect(chain.refused.all == ["b=1: The limiter is closed: it takes no more values."])
    }

    @Test("a graceful shutdown of the service group drains the chain in order")
    func shutdownThroughGroup() async throws {
        let chain = try Chain()
        try chain.run()
        let logger = Logger(label: "test")
        let service = LimiterService(
            [.limiter("quiet", chain.quiet), .limiter("saves", chain.saves)],
            metrics: LimiterMetrics([], factory: TestMetrics()), logger: logger)
        let group = ServiceGroup(configuration: .init(services: [service], logger: logger))
        try await withThrowingTaskGroup(of: Void.self) { tasks in
            tasks.addTask { try await group.run() }
            await group.triggerGracefulShutdown()
            try await tasks.waitForAll()
        }
        #expect(chain.saved.all == ["a=11@3s", "b=1@24s", "a=3@24s"])
        #expect(chain.refused.all.isEmpty)
    }

    @Test("a stream consumed by a task that submits: the drain waits for the task before closing the next limiter")
    func streamConsumer() async throws {
        let clock = ManualLimiterClock()
        let saved = Mutex<[String]>([])
        let refused = Mutex<[String]>([])
        let saves = try Limiter<String, Int>(.throttle(interval: .seconds(30)), scheduler: .manual(clock)) {
            id, version in saved.withLock { $0.append("\(id)=\(version)") }
        }
        let (quiet, emissions) = try Limiter<String, Int>.makeStream(
            .debounce(interval: .seconds(2)), scheduler: .manual(clock))
        let consumer = Task {
            for await emission in emissions {
                // Async work before the hand-off: without waiting for this
                // task, the drain would close `saves` first.
                try? await Task.sleep(for: .milliseconds(20))
                do { try saves.submit(emission.value, for: emission.key) } catch {
                    refused.withLock { $0.append("\(emission.key)=\(emission.value): \(error)") }
                }
            }
        }
        try quiet.submit(1, for: "a")
        try quiet.submit(2, for: "b")
        try quiet.submit(3, for: "c")
        let service = LimiterService(
            [.limiter("quiet", quiet, consumer: consumer), .limiter("saves", saves)],
            metrics: LimiterMetrics([], factory: TestMetrics()), logger: Logger(label: "test"))
        await service.drain()
        #expect(saved.withLock { $0.sorted() } == ["a=1", "b=2", "c=3"])
        #expect(refused.withLock { $0 }.isEmpty)
    }
}
#endif
