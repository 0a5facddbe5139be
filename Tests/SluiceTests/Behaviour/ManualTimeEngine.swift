// The engines with manual time that the behaviour suite and the conformance
// replay run on (the NIO ones in NIOEngineTests.swift, with the NIO trait).
import Sluice

/// An engine whose time moves only when a test says so, for the behaviour
/// suite (BehaviourCases.swift) and the conformance replay (LimiterReplay.swift):
/// Sluice's ``ManualLimiterClock``; a NIO `EmbeddedEventLoop` and a
/// `NIOAsyncTestingEventLoop` (NIOEngineTests.swift, with the NIO trait).
///
/// The clock starts at 0. `advanceTime(to:)` runs every deadline up to that instant,
/// in deadline order, with the clock at each deadline while it runs.
protocol ManualTimeEngine: Sendable {
    /// The scheduler to create limiters with.
    var scheduler: LimiterScheduler { get }
    /// The engine's time.
    var now: LimiterInstant { get }
    /// Moves time to `instant` (never backwards), running what is due on the way.
    func advanceTime(to instant: LimiterInstant) async
    /// Runs every pending deadline.
    func runAll() async
    /// Releases the engine (shuts a loop down).
    func finish() async throws
}

extension ManualTimeEngine {
    func advanceTime(by duration: Duration) async {
        let nanoseconds =
            UInt64(duration.components.seconds) * 1_000_000_000
            + UInt64(duration.components.attoseconds / 1_000_000_000)
        await advanceTime(to: LimiterInstant(nanoseconds: now.nanoseconds + nanoseconds))
    }
}

extension ManualLimiterClock: ManualTimeEngine {
    var scheduler: LimiterScheduler { .manual(self) }
    // Names of their own: an async `advance` here would be preferred over the
    // clock's own in every async test.
    func advanceTime(to instant: LimiterInstant) async { advance(to: instant) }
    func runAll() async { runUntilIdle() }
    func finish() async throws {}
}
