import Synchronization

/// A clock that only moves when told to: limiters on it decide exactly and
/// repeatably, which is what tests, simulations and trace runs need.
///
/// Create limiters on it with ``LimiterScheduler/manual(_:)``; each limiter
/// starts at the clock's current time. ``advance(by:)`` and ``advance(to:)``
/// fire every deadline up to the new time, each at its own time and in time
/// order across all the clock's limiters, and deliver the emissions on the
/// calling thread before returning. ``runUntilIdle()`` lets time run on until
/// no deadline is left.
///
/// ```swift
/// let clock = ManualLimiterClock()
/// let limiter = try Limiter<String, Int>(
///     .debounce(interval: .milliseconds(100)), scheduler: .manual(clock)
/// ) { key, value in print(key, value) }
/// try limiter.submit(1, for: "a")
/// clock.advance(by: .milliseconds(100))   // prints "a 1"
/// ```
///
/// The clock starts at ``LimiterInstant`` zero and never goes backwards. It
/// is `Sendable`: ``now`` may be read from any thread; advance it from one
/// thread at a time.
public final class ManualLimiterClock: Sendable {
    @usableFromInline let nanoseconds = Atomic<UInt64>(0)
    private let clients = Locked<[WeakClient]>([])

    /// Creates a clock at ``LimiterInstant`` zero.
    public init() {}

    /// The clock's current time.
    public var now: LimiterInstant {
        LimiterInstant(nanoseconds: nowNanoseconds)
    }

    /// Moves the clock forward by `duration`, firing every deadline on the way.
    ///
    /// - Parameter duration: how far to move; a negative duration does nothing.
    public func advance(by duration: Duration) {
        advance(to: now.advanced(by: duration))
    }

    /// Moves the clock to `instant`, firing every deadline up to and
    /// including it, each at its own time: a limiter's timer due at `d` runs
    /// with the clock at `d`, and the emissions are delivered before this
    /// call returns. An instant earlier than ``now`` fires what is due at
    /// ``now`` and leaves the clock where it is.
    ///
    /// - Parameter instant: the new time.
    public func advance(to instant: LimiterInstant) {
        fire(through: instant.nanoseconds)
        raise(to: instant.nanoseconds)
    }

    /// Lets time run on until no deadline is left on any of the clock's
    /// limiters, firing each at its own time.
    ///
    /// - Returns: the clock's time afterwards (the last deadline fired, or
    ///   ``now`` when nothing was armed).
    @discardableResult
    public func runUntilIdle() -> LimiterInstant {
        fire(through: .max)
        return now
    }

    // MARK: - For limiters

    /// The current time in ns.
    @inlinable
    var nowNanoseconds: UInt64 {
        nanoseconds.load(ordering: .acquiring)
    }

    /// Adds a limiter; the clock keeps only a weak reference.
    func register(_ client: any ManualClockClient) {
        clients.withLock { list in
            list.removeAll { $0.client == nil }
            list.append(WeakClient(client: client))
        }
    }

    /// Sets the time to `t` unless it is already later.
    private func raise(to t: UInt64) {
        var current = nanoseconds.load(ordering: .relaxed)
        while current < t {
            let (exchanged, original) = nanoseconds.compareExchange(
                expected: current, desired: t, successOrdering: .acquiringAndReleasing, failureOrdering: .relaxed)
            if exchanged { return }
            current = original
        }
    }

    /// Fires deadlines `<= limit` in time order, across all limiters.
    private func fire(through limit: UInt64) {
        while true {
            let live = clients.withLock { list in
                list.removeAll { $0.client == nil }
                return list.compactMap { $0.client }
            }
            var earliest: (client: any ManualClockClient, deadline: UInt64)?
            for client in live {
                if let deadline = client.nextDeadline, deadline <= limit,
                   earliest == nil || deadline < earliest!.deadline {
                    earliest = (client, deadline)
                }
            }
            guard let (client, deadline) = earliest else { return }
            raise(to: deadline)
            client.fire(through: max(deadline, nowNanoseconds))
        }
    }
}

/// A limiter driven by a ``ManualLimiterClock``.
protocol ManualClockClient: AnyObject, Sendable {
    /// When the limiter next has timer work, in ns (a lower bound of its
    /// earliest deadline), or `nil` when nothing is armed.
    var nextDeadline: UInt64? { get }
    /// Fires the limiter's deadlines due at `now` and delivers the emissions.
    func fire(through now: UInt64)
}

private struct WeakClient: Sendable {
    weak var client: (any ManualClockClient)?
}
