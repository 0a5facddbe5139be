import Dispatch

/// Runs work at most once per interval: the first call at once (leading
/// edge), and the last call of the interval when it ends (trailing edge).
///
/// ```swift
/// let progress = try Throttler(interval: .milliseconds(250))
/// for await chunk in download {          // your AsyncSequence of chunks
///     let received = chunk.offset
///     progress.call { print("received \(received) bytes") }
/// }
/// ```
///
/// For work that touches main-actor state (UI code), use
/// ``MainActorThrottler``: its work is a `@MainActor` closure.
///
/// Runs of the work are always at least `interval` apart (the spec's
/// throttle: a trailing run opens the next interval, without drift). With
/// both edges on, a single call runs once, at once.
///
/// The throttler holds the pending work only: releasing the throttler
/// cancels it (the closure is released without running), and the throttler
/// is never kept alive by its own pending work. Capture `self` weakly in the
/// work to let the owner go first.
///
/// Thread-safe: call it from any thread. Without a queue, on a loop (the
/// default) every run happens on the loop thread — a leading run right after
/// `call` returns — so runs keep their order; on a manual clock, on the
/// thread that caused the run. With a queue, on the queue.
public final class Throttler: WorkLimiter, @unchecked Sendable {
    // @unchecked: restated from WorkLimiter (no stored property of its own).
    /// Creates a throttler.
    ///
    /// - Parameters:
    ///   - interval: the shortest time between two runs.
    ///   - leading: run the call that starts an interval at once (default `true`).
    ///   - trailing: run the last call of an interval when it ends (default `true`).
    ///   - queue: where the work runs (`nil`, the default, for the thread
    ///     that caused the run: the loop thread on a loop, the thread that
    ///     called or advanced the clock on a manual clock). For main-actor
    ///     code, see ``MainActorThrottler`` and ``MainActorDebouncer``.
    ///   - scheduler: where time comes from and who runs the timers.
    /// - Throws: ``LimiterError/invalidArgument`` when neither edge is on or
    ///   the interval is negative, ``LimiterError/outOfRange`` when it is too long.
    public init(
        interval: Duration, leading: Bool = true, trailing: Bool = true, queue: DispatchQueue? = nil,
        scheduler: LimiterScheduler = .default
    ) throws(LimiterError) {
        try super.init(
            .throttle(interval: interval, leading: leading, trailing: trailing), queue: queue, scheduler: scheduler)
    }
}

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
public final class MainActorThrottler: MainActorWorkLimiter {
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
        try super.init(
            .throttle(interval: interval, leading: leading, trailing: trailing), scheduler: scheduler)
    }
}
