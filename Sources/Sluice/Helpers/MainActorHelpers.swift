import Dispatch

/// A ``Throttler`` for code isolated to the main actor (UI code): the work
/// is a `@MainActor` closure and always runs on the main actor (through the
/// main queue), so it may touch main-actor state directly, with no `await`
/// and no `Task`.
///
/// ```swift
/// @MainActor final class SearchModel {
///     private let throttler = try! MainActorThrottler(interval: .milliseconds(300))
///     private(set) var results: [String] = []
///     func queryChanged(_ text: String) {
///         throttler.call { [weak self] in self?.results = search(text) }
///     }
/// }
/// ```
///
/// Every run happens on the main actor, asynchronously after the decision
/// (a leading run as soon as the main queue gets to it, after `call`
/// returns). The timers run on the scheduler's thread (the default loop's);
/// only the work crosses to the main actor.
@MainActor
public final class MainActorThrottler {
    private let core: SingleKeyLimiter

    /// Creates a throttler whose work runs on the main actor.
    ///
    /// - Parameters:
    ///   - interval: the shortest time between two runs.
    ///   - leading: run the call that starts an interval (default `true`).
    ///   - trailing: run the last call of an interval when it ends (default `true`).
    ///   - scheduler: where time comes from and who runs the timers.
    /// - Throws: as ``Throttler/init(interval:leading:trailing:queue:scheduler:)``.
    public init(
        interval: Duration, leading: Bool = true, trailing: Bool = true, scheduler: LimiterScheduler = .default
    ) throws(LimiterError) {
        core = try SingleKeyLimiter(
            .throttle(interval: interval, leading: leading, trailing: trailing), queue: .main, scheduler: scheduler)
    }

    /// Offers work; it runs on the main actor now (queued), later, or not at
    /// all, as the throttle decides (see ``Throttler/call(_:)``).
    ///
    /// - Parameter work: the work, isolated to the main actor.
    /// - Returns: what happened to it.
    @discardableResult
    public func call(_ work: @escaping @MainActor @Sendable () -> Void) -> LimiterDecision {
        core.call { MainActor.assumeIsolated(work) }
    }

    /// Runs the waiting work now (queued on the main actor), and ends the interval.
    ///
    /// - Returns: whether work was waiting.
    @discardableResult
    public func flush() -> Bool { core.flush() }

    /// Discards the waiting work, and ends the interval.
    ///
    /// - Returns: whether work was waiting.
    @discardableResult
    public func cancel() -> Bool { core.cancel() }

    /// Whether work waits to run at the end of the interval.
    public var isPending: Bool { core.isPending }
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
public final class MainActorDebouncer {
    private let core: SingleKeyLimiter

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
        core = try SingleKeyLimiter(
            .debounce(interval: interval, leading: leading, trailing: trailing, maxWait: maxWait),
            queue: .main, scheduler: scheduler)
    }

    /// Offers work; it runs on the main actor once calls have stopped for
    /// the interval (see ``Debouncer/call(_:)``).
    ///
    /// - Parameter work: the work, isolated to the main actor.
    /// - Returns: what happened to it.
    @discardableResult
    public func call(_ work: @escaping @MainActor @Sendable () -> Void) -> LimiterDecision {
        core.call { MainActor.assumeIsolated(work) }
    }

    /// Runs the waiting work now (queued on the main actor).
    ///
    /// - Returns: whether work was waiting.
    @discardableResult
    public func flush() -> Bool { core.flush() }

    /// Discards the waiting work.
    ///
    /// - Returns: whether work was waiting.
    @discardableResult
    public func cancel() -> Bool { core.cancel() }

    /// Whether work waits to run.
    public var isPending: Bool { core.isPending }
}
