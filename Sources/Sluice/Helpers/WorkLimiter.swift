import Dispatch

/// The work a ``Throttler`` or ``Debouncer`` runs.
public typealias LimitedWork = @Sendable () -> Void

/// What ``Throttler`` and ``Debouncer`` share: a limiter of one key whose
/// values are work closures, run by its delivery.
///
/// A superseded closure is released at once, a pending one when the helper
/// is cancelled or deallocated. The delivery runs the work (on the target
/// queue if there is one) and holds no reference to the helper, so a helper
/// never keeps itself alive: releasing it discards its pending work.
///
/// Create a ``Throttler`` or a ``Debouncer``; this class has no public
/// initializer.
public class WorkLimiter: @unchecked Sendable {
    // @unchecked: a class open to its two subclasses cannot be checked; its
    // one stored property is an immutable Sendable limiter.
    private static let key: UInt8 = 0
    private let limiter: Limiter<UInt8, LimitedWork>

    init(_ policy: LimiterPolicy, queue: DispatchQueue?, scheduler: LimiterScheduler) throws(LimiterError) {
        let delivery: LimiterDelivery<UInt8, LimitedWork> =
            if let queue { .queue(queue) { _, work in work() } } else { .handler { _, work in work() } }
        limiter = try Limiter(policy, scheduler: scheduler, delivery: delivery)
    }

    /// Offers work: it runs now, later (replacing any work already
    /// waiting), or not at all, as the throttle or debounce decides.
    ///
    /// - Parameter work: the work.
    /// - Returns: what happened to it: ``LimiterDecision/emitted`` (it ran
    ///   or was queued now), ``LimiterDecision/scheduled(at:)``, or
    ///   ``LimiterDecision/dropped(retryAt:)`` (a throttle with
    ///   `trailing: false`).
    @discardableResult
    public func call(_ work: @escaping LimitedWork) -> LimiterDecision {
        do {
            return try limiter.submit(work, for: Self.key)
        } catch {
            // One integer key on a limiter that is never closed: no error is possible.
            preconditionFailure("Sluice: a single-key limiter refused a call: \(error)")
        }
    }

    /// Runs the waiting work now, and ends the throttle's interval or the
    /// debounce's burst: the next call starts a new one.
    ///
    /// - Returns: whether work was waiting.
    @discardableResult
    public func flush() -> Bool { (try? limiter.flush(Self.key)) ?? false }

    /// Discards the waiting work, and ends the interval or the burst.
    ///
    /// - Returns: whether work was waiting.
    @discardableResult
    public func cancel() -> Bool { (try? limiter.cancel(Self.key)) ?? false }

    /// Whether work waits to run.
    public var isPending: Bool { (try? limiter.pending(Self.key)) ?? false }
}

/// What ``MainActorThrottler`` and ``MainActorDebouncer`` share: a
/// ``WorkLimiter`` whose work is a `@MainActor` closure, run on the main
/// actor through the main queue, asynchronously after the decision.
///
/// Create a ``MainActorThrottler`` or a ``MainActorDebouncer``; this class
/// has no public initializer.
@MainActor
public class MainActorWorkLimiter {
    private let core: WorkLimiter

    init(_ policy: LimiterPolicy, scheduler: LimiterScheduler) throws(LimiterError) {
        core = try WorkLimiter(policy, queue: .main, scheduler: scheduler)
    }

    /// Offers work; it runs on the main actor now (queued), later, or not
    /// at all, as the throttle or debounce decides (see ``WorkLimiter/call(_:)``).
    ///
    /// - Parameter work: the work, isolated to the main actor.
    /// - Returns: what happened to it.
    @discardableResult
    public func call(_ work: @escaping @MainActor @Sendable () -> Void) -> LimiterDecision {
        core.call { MainActor.assumeIsolated(work) }
    }

    /// Runs the waiting work now (queued on the main actor), and ends the
    /// interval or the burst.
    ///
    /// - Returns: whether work was waiting.
    @discardableResult
    public func flush() -> Bool { core.flush() }

    /// Discards the waiting work, and ends the interval or the burst.
    ///
    /// - Returns: whether work was waiting.
    @discardableResult
    public func cancel() -> Bool { core.cancel() }

    /// Whether work waits to run.
    public var isPending: Bool { core.isPending }
}
