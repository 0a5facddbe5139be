/// The delivery side of a limiter's storage: events waiting to be
/// delivered, in the order the limiter produced them, and the state of the
/// one thread delivering them. Guarded by the storage's lock; deliveries
/// themselves run outside it.
@usableFromInline
struct LimiterOutbox<Event> {
    @usableFromInline var events = RingBuffer<Event>()
    /// The delivering thread's empty buffer, kept between drains so that
    /// taking the events (``next(closedAndEmpty:into:)``) allocates nothing.
    @usableFromInline var spare = RingBuffer<Event>()
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
        /// Deliver the events just moved into the caller's batch, in order.
        case deliver
        case finish([CheckedContinuation<Void, Never>])
        case done
    }

    /// The delivering thread's next step; ends the drain when there is none.
    /// `batch` is the caller's buffer, empty (the previous batch delivered):
    /// it takes every waiting event at once, by swapping buffers (one lock
    /// round trip for all of them, nothing allocated); the buffers end up
    /// as `events` and ``spare`` when the drain ends.
    @inlinable
    mutating func next(closedAndEmpty: Bool, into batch: inout RingBuffer<Event>) -> Next {
        if !events.isEmpty {
            // `events` gets an empty buffer with room: the caller's (the
            // batch it just delivered) or, on a drain's first step, the spare.
            if batch.storage.isEmpty { swap(&batch, &spare) }
            swap(&batch, &events)
            return .deliver
        }
        if spare.storage.isEmpty { swap(&batch, &spare) }
        draining = false
        if closedAndEmpty && !finished {
            finished = true
            defer { finishWaiters = [] }
            return .finish(finishWaiters)
        }
        return .done
    }
}
