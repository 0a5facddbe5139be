/// Where a limiter's time comes from and who runs its timers: the engine
/// a limiter runs on.
///
/// - ``default``: the library's own event loop (``LimiterLoop/shared``), on
///   the system's monotonic clock: no setup.
/// - ``loop(_:)``: a ``LimiterLoop`` — one of your own, or attached to a
///   libevent `event_base` your program runs; ``loop(_:clock:)`` with the
///   coarse clock, cheaper to read at the kernel tick's precision.
/// - ``manual(_:)``: a ``ManualLimiterClock``: time moves only when the
///   clock is advanced, and timers fire inside `advance` — exact and
///   repeatable, for tests and simulations.
///
/// The same code runs on all of them; only who moves time, and on which
/// thread emissions are delivered, differ.
public struct LimiterScheduler: Sendable {
    /// Makes the engine of one limiter.
    let makeEngine: @Sendable (EngineSetup) throws(LimiterError) -> any LimiterEngine

    /// The library's default loop (``LimiterLoop/shared``), started on first use.
    public static var `default`: LimiterScheduler {
        .loop(.shared)
    }

    /// Runs the limiter on an event loop: calls from any thread, deadlines
    /// fired and emissions delivered on the loop thread.
    ///
    /// - Parameter loop: the loop.
    /// - Returns: the scheduler.
    public static func loop(_ loop: LimiterLoop) -> LimiterScheduler {
        .loop(loop, clock: .precise)
    }

    /// The clock the calls on a loop read.
    public enum Clock: Sendable, Hashable {
        /// The monotonic clock, read at each call (the default).
        case precise
        /// The monotonic clock at the kernel tick's resolution (1 to 10 ms):
        /// a few ns to read instead of 20 to 30 ns, never ahead of the
        /// precise clock, at most a tick behind it. Decisions stay exact at
        /// the time they report; a window opened by a call may end up to a
        /// tick earlier than the precise clock would put it (docs/semantics.md,
        /// "The clock"). For limits much coarser than a tick.
        case coarse
    }

    /// Runs the limiter on an event loop, with its calls reading `clock`.
    ///
    /// - Parameters:
    ///   - loop: the loop.
    ///   - clock: the clock calls read (``Clock/precise`` or ``Clock/coarse``).
    /// - Returns: the scheduler.
    public static func loop(_ loop: LimiterLoop, clock: Clock) -> LimiterScheduler {
        LimiterScheduler { (setup: EngineSetup) throws(LimiterError) -> any LimiterEngine in
            var setup = setup
            setup.coarseClock = clock == .coarse
            return try LoopEngine(loop: loop, setup: setup)
        }
    }

    /// Runs the limiter on a manual clock: time moves only when `clock` is
    /// advanced, and timers fire inside its `advance` calls, on the thread
    /// that advances it.
    ///
    /// - Parameter clock: the clock; any number of limiters may share it.
    /// - Returns: the scheduler.
    public static func manual(_ clock: ManualLimiterClock) -> LimiterScheduler {
        LimiterScheduler { (setup: EngineSetup) throws(LimiterError) -> any LimiterEngine in
            try ManualEngine(clock: clock, setup: setup)
        }
    }
}
