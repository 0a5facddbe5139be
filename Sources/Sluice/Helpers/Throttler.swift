import Dispatch

/// The work a ``Throttler`` or ``Debouncer`` runs.
public typealias LimitedWork = @Sendable () -> Void

/// A single-key limiter of work, shared by ``Throttler`` and ``Debouncer``.
///
/// The work closures are the limiter's values: a superseded closure is
/// released at once, a pending one when the helper is cancelled or
/// deallocated. The limiter's delivery runs the work (on the target queue if
/// there is one) and holds no reference to the helper, so a helper never
/// keeps itself alive: releasing it discards its pending work.
struct SingleKeyLimiter: Sendable {
    private static let key: UInt8 = 0
    let limiter: Limiter<UInt8, LimitedWork>

    init(_ policy: LimiterPolicy, queue: DispatchQueue?, scheduler: LimiterScheduler) throws(LimiterError) {
        let delivery: LimiterDelivery<UInt8, LimitedWork> =
            if let queue { .queue(queue) { _, work in work() } } else { .handler { _, work in work() } }
        limiter = try Limiter(policy, scheduler: scheduler, delivery: delivery)
    }

    @discardableResult
    func call(_ work: @escaping LimitedWork) -> LimiterDecision {
        do {
            return try limiter.submit(work, for: Self.key)
        } catch {
            // One integer key on a limiter that is never closed: no error is possible.
            preconditionFailure("Sluice: a single-key limiter refused a call: \(error)")
        }
    }

    func flush() -> Bool { (try? limiter.flush(Self.key)) ?? false }
    func cancel() -> Bool { (try? limiter.cancel(Self.key)) ?? false }
    var isPending: Bool { (try? limiter.pending(Self.key)) ?? false }
}

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
public final class Throttler: Sendable {
    private let core: SingleKeyLimiter

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
        core = try SingleKeyLimiter(
            .throttle(interval: interval, leading: leading, trailing: trailing), queue: queue, scheduler: scheduler)
    }

    /// Offers work: it runs now, later (replacing any work already waiting),
    /// or not at all, as the throttle decides.
    ///
    /// - Parameter work: the work.
    /// - Returns: what happened to it: ``LimiterDecision/emitted`` (it ran
    ///   or was queued now), ``LimiterDecision/scheduled(at:)``, or
    ///   ``LimiterDecision/dropped(retryAt:)`` (with `trailing: false`).
    @discardableResult
    public func call(_ work: @escaping @Sendable () -> Void) -> LimiterDecision {
        core.call(work)
    }

    /// Runs the waiting work now, and ends the interval: the next call runs
    /// at once (when `leading`).
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
public final class Debouncer: Sendable {
    private let core: SingleKeyLimiter

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
        core = try SingleKeyLimiter(
            .debounce(interval: interval, leading: leading, trailing: trailing, maxWait: maxWait),
            queue: queue, scheduler: scheduler)
    }

    /// Offers work: it runs now (leading edge), later once calls stop
    /// (replacing any work already waiting), or not at all.
    ///
    /// - Parameter work: the work.
    /// - Returns: what happened to it (see ``LimiterDecision``).
    @discardableResult
    public func call(_ work: @escaping @Sendable () -> Void) -> LimiterDecision {
        core.call(work)
    }

    /// Runs the waiting work now, and ends the burst.
    ///
    /// - Returns: whether work was waiting.
    @discardableResult
    public func flush() -> Bool { core.flush() }

    /// Discards the waiting work, and ends the burst.
    ///
    /// - Returns: whether work was waiting.
    @discardableResult
    public func cancel() -> Bool { core.cancel() }

    /// Whether work waits to run.
    public var isPending: Bool { core.isPending }
}
