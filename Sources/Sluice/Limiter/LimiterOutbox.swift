/// The delivery side of a limiter's storage: events waiting to be
/// delivered, in the order the limiter produced them, and the state of the
/// one thread delivering them. Guarded by the storage's lock; deliveries
/// themselves run outside it.
@usableFromInline
struct LimiterOutbox<Event> {
    @usableFromInline var events = RingBuffer<Event>()
    /// A thread is delivering (only one at a time, in outbox order).
    @usableFromInline var draining = false
    /// The delivery was finished (a closed limiter delivered everything).
    @usableFromInline var finished = false
    /// Waiters of `close() async`, resumed once finished.
    @usableFromInline var finishWaiters: [CheckedContinuation<Void, Never>] = []

    @usableFromInline init() {}

    /// Whether the caller must deliver now: there is work (events, or a
    /// finish once `holdsNothing` after close) and nobody else is delivering.
    /// A `true` makes the caller the delivering thread.
    @inlinable
    mutating func claim(closedAndEmpty: Bool) -> Bool {
        guard !draining, !events.isEmpty || (closedAndEmpty && !finished) else { return false }
        draining = true
        return true
    }

    /// What the delivering thread does next.
    @usableFromInline
    enum Next {
        case deliver(Event)
        case finish([CheckedContinuation<Void, Never>])
        case done
    }

    /// The delivering thread's next step; ends the drain when there is none.
    @inlinable
    mutating func next(closedAndEmpty: Bool) -> Next {
        if let event = events.popFirst() { return .deliver(event) }
        draining = false
        if closedAndEmpty && !finished {
            finished = true
            defer { finishWaiters = [] }
            return .finish(finishWaiters)
        }
        return .done
    }
}
