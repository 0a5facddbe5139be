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
    /// Bumped (under the `clients` lock) whenever a limiter joins: an
    /// advance reads the list again only when this moved.
    private let version = Atomic<UInt64>(0)

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
            version.add(1, ordering: .releasing)
        }
    }

    /// The clock's live limiters, and the `version` they were read at.
    private func liveClients() -> (clients: [any ManualClockClient], version: UInt64) {
        clients.withLock { list in
            list.removeAll { $0.client == nil }
            return (list.compactMap { $0.client }, version.load(ordering: .relaxed))
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
    ///
    /// The list of limiters is read once, and again only when a limiter
    /// joined meanwhile (a handler may create one on this clock): `version`
    /// says so, without the lock. A limiter closed or gone meanwhile stays
    /// in the list read, held until this returns, with no deadline (its
    /// link reports none once released). With one limiter, each round asks
    /// it alone.
    private func fire(through limit: UInt64) {
        var (live, seen) = liveClients()
        while true {
            if version.load(ordering: .acquiring) != seen { (live, seen) = liveClients() }
            let client: any ManualClockClient
            let deadline: UInt64
            if live.count == 1 {
                client = live[0]
                guard let next = client.nextDeadline, next <= limit else {
                    // (a limiter that joined during this ask: look again)
                    if version.load(ordering: .acquiring) != seen { continue }
                    return
                }
                deadline = next
            } else {
                var earliest: (client: any ManualClockClient, deadline: UInt64)?
                for client in live {
                    if let deadline = client.nextDeadline, deadline <= limit,
                        earliest == nil || deadline < earliest!.deadline
                    {
                        earliest = (client, deadline)
                    }
                }
                guard let found = earliest else {
                    if version.load(ordering: .acquiring) != seen { continue }
                    return
                }
                (client, deadline) = found
            }
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
