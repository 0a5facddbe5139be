import Dispatch

/// Runs work once calls have stopped for an interval: a burst of calls runs
/// only its last work (trailing edge), or only its first (leading edge), or
/// both.
///
/// ```swift
/// let autosave = try Debouncer(interval: .seconds(1), maxWait: .seconds(10))
/// func documentChanged(_ document: Document) {
///     autosave.call { store.save(document, id: document.id) }   // store: a Sendable store
/// }
/// ```
///
/// For work that touches main-actor state (UI code), use
/// ``MainActorDebouncer``: its work is a `@MainActor` closure.
///
/// With `maxWait`, waiting work runs at the latest `maxWait` after the
/// burst began, even while calls keep coming.
///
/// The debouncer holds the pending work only: releasing the debouncer
/// cancels it (the closure is released without running), and the debouncer
/// is never kept alive by its own pending work.
///
/// Thread-safe: call it from any thread. Without a queue, on a loop (the
/// default) every run happens on the loop thread, in order; on a manual
/// clock, on the thread that caused the run. With a queue, on the queue.
public final class Debouncer: WorkLimiter, @unchecked Sendable {
    // @unchecked: restated from WorkLimiter (no stored property of its own).
    /// Creates a debouncer.
    ///
    /// - Parameters:
    ///   - interval: the quiet time after which the waiting work runs.
    ///   - leading: run the first call of a burst at once (default `false`).
    ///   - trailing: run the last call of a burst once it is quiet (default `true`).
    ///   - maxWait: the longest that work waits while calls keep coming, at
    ///     least `interval` (`nil`, the default, for no limit).
    ///   - queue: where the work runs (`nil`, the default, for the thread
    ///     that caused the run: the loop thread on a loop, the thread that
    ///     called or advanced the clock on a manual clock). For main-actor
    ///     code, see ``MainActorThrottler`` and ``MainActorDebouncer``.
    ///   - scheduler: where time comes from and who runs the timers.
    /// - Throws: ``LimiterError/invalidArgument`` when neither edge is on, a
    ///   duration is negative or `maxWait` is below `interval`;
    ///   ``LimiterError/outOfRange`` when a duration is too long.
    public init(
        interval: Duration, leading: Bool = false, trailing: Bool = true, maxWait: Duration? = nil,
        queue: DispatchQueue? = nil, scheduler: LimiterScheduler = .default
    ) throws(LimiterError) {
        try super.init(
            .debounce(interval: interval, leading: leading, trailing: trailing, maxWait: maxWait),
            queue: queue, scheduler: scheduler)
    }
}

/// A ``Debouncer`` for code isolated to the main actor: the work is a
/// `@MainActor` closure and always runs on the main actor (through the main
/// queue), asynchronously after the decision.
///
/// ```swift
/// @MainActor final class Editor {
///     private let autosave = try! MainActorDebouncer(interval: .seconds(1), maxWait: .seconds(10))
///     func textChanged() { autosave.call { [weak self] in self?.save() } }
///     func save() { /* … */ }
/// }
/// ```
@MainActor
public final class MainActorDebouncer: MainActorWorkLimiter {
    /// Creates a debouncer whose work runs on the main actor.
    ///
    /// - Parameters:
    ///   - interval: the quiet time after the last call.
    ///   - leading: run the first call of a burst at once (default `false`).
    ///   - trailing: run the last call once calls stop (default `true`).
    ///   - maxWait: the longest a call may wait (`nil` for no bound).
    ///   - scheduler: where time comes from and who runs the timers.
    /// - Throws: as ``Debouncer/init(interval:leading:trailing:maxWait:queue:scheduler:)``.
    public init(
        interval: Duration, leading: Bool = false, trailing: Bool = true, maxWait: Duration? = nil,
        scheduler: LimiterScheduler = .default
    ) throws(LimiterError) {
        try super.init(
            .debounce(interval: interval, leading: leading, trailing: trailing, maxWait: maxWait),
            scheduler: scheduler)
    }
}
