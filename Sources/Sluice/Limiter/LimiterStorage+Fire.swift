import CSluice

/// The storage's side of a manual engine's timers (`ManualEngine.fire`):
/// the emissions of a clock advance arrive in rounds (the core writes them
/// into the engine's array, `sluice_limiter_advance_into`), recorded in one
/// specialized loop under the lock the engine holds (the storage's) and the
/// outbox delivered with one pass over its buffer, or, for an emit-only
/// limiter with a handler, delivered straight from the array.
extension LimiterStorage {
    /// With the lock held: records the emissions of a fire round in order,
    /// exactly as ``recordLocked(_:)`` one at a time, with room in the
    /// outbox made once for the round (the sink's `recordManyHeld`). A
    /// timer reports nothing but emissions.
    @inlinable
    func recordManyLocked(_ emissions: UnsafePointer<sluice_emission_t>, count: Int) {
        guard count > 0 else { return }
        if combine != nil {
            // (the general path; an emission folds into nothing)
            for i in 0..<count { recordLocked(EngineEvent(emission: emissions[i])) }
            return
        }
        if compact {
            // Every emission gives up one held value (``take(_:)``, counted
            // here for the round); the key and value are in the emission.
            if !emitOnly {
                if slots.count < count { staleToken() }
                slots.count &-= count
            }
            outbox.events.appendEach(count) { i -> Event? in
                let emission = emissions[i]
                return Event(
                    kind: .emitted, key: Key._sluiceKey(integerIdentity: emission.key),
                    value: Self.value(of: emission.token), at: LimiterInstant(nanoseconds: emission.at))
            }
            return
        }
        outbox.events.appendEach(count) { i -> Event? in
            let emission = emissions[i]
            let entry = slots.remove(emission.token)
            return Event(
                kind: .emitted, key: entry.key, value: entry.value, at: LimiterInstant(nanoseconds: emission.at))
        }
    }

    /// With the lock held, for a manual engine's fire (the sink's
    /// `claimDirect`): whether the emissions the engine just collected may
    /// skip the outbox and be delivered straight from its buffer. Only for an
    /// emit-only limiter (compact, nobody observing drops: recording its
    /// events changes nothing but the outbox) delivering to a handler, open,
    /// with nothing waiting in the outbox and nobody delivering (so these
    /// events come next, in order). `true` makes the caller the delivering
    /// thread: events recorded meanwhile (a handler's own calls) wait in the
    /// outbox for its ``deliverOutbox()``, which ends the drain.
    @inlinable
    func claimDirectLocked() -> Bool {
        guard Self.compactTypes && emitOnly, delivery.handlerBody != nil, !closed,
            outbox.events.isEmpty, !outbox.draining
        else { return false }
        outbox.draining = true
        return true
    }

    /// Delivers a fire round's emissions straight from the engine's buffer,
    /// in order, without the lock, after ``claimDirectLocked()`` returned
    /// `true`: what ``recordManyLocked(_:count:)`` then ``deliverOutbox()``
    /// would hand to the handler. The caller finishes with ``deliverOutbox()``.
    @inlinable
    func deliverDirect(_ emissions: UnsafePointer<sluice_emission_t>, count: Int) {
        guard let body = delivery.handlerBody else { return }
        for i in 0..<count {
            let emission = emissions[i]
            body(Key._sluiceKey(integerIdentity: emission.key), Self.value(of: emission.token))
        }
    }
}

// Bulk operations of `RingBuffer` (defined in SlotTable.swift), inlinable so
// that they are specialized for the element type: growing the buffer by
// `append` runs unspecialized generic code, several hundred instructions
// per element moved.
extension RingBuffer {
    /// Makes room for `n` more elements (doubling, as `append` grows).
    @inlinable
    mutating func reserveRoom(_ n: Int) {
        let needed = count + n
        let old = storage.count
        guard needed > old else { return }
        var capacity = Swift.max(8, old * 2)
        while capacity < needed { capacity *= 2 }
        var grown = [Element?](repeating: nil, count: capacity)
        let count = self.count
        var index = head
        grown.withUnsafeMutableBufferPointer { to in
            storage.withUnsafeMutableBufferPointer { from in
                for i in 0..<count {
                    to[i] = from[index].take()
                    index += 1
                    if index == old { index = 0 }
                }
            }
        }
        storage = grown
        head = 0
    }

    /// Appends, in order, the non-nil results of `make(i)` for `i` in
    /// `0..<n`: room made once, one access to the buffer for all of them.
    @inlinable
    mutating func appendEach(_ n: Int, _ make: (Int) -> Element?) {
        reserveRoom(n)
        let capacity = storage.count
        var tail = head + count
        if tail >= capacity { tail -= capacity }
        var added = 0
        storage.withUnsafeMutableBufferPointer { buffer in
            for i in 0..<n {
                guard let element = make(i) else { continue }
                buffer[tail] = element
                tail += 1
                if tail == capacity { tail = 0 }
                added += 1
            }
        }
        count += added
    }

    /// Removes every element, handing each to `body` in order (what a loop
    /// of `popFirst` does, with one access to the buffer). `body` must not
    /// reach this buffer (a delivery batch is the draining thread's own).
    @inlinable
    mutating func drain(_ body: (Element) -> Void) {
        let n = count
        guard n > 0 else { return }
        let capacity = storage.count
        var index = head
        storage.withUnsafeMutableBufferPointer { buffer in
            for _ in 0..<n {
                let element = buffer[index].take().unsafelyUnwrapped
                index += 1
                if index == capacity { index = 0 }
                body(element)
            }
        }
        head = 0
        count = 0
    }
}

// The delivery loop of `LimiterStorage.deliverOutbox`: the common target (a
// handler) read once per batch, the others and the finish out of line, so
// that the loop's code needs no metadata of the resilient types they use
// (`AsyncStream.Continuation`, `CheckedContinuation`), which a first call
// would otherwise instantiate.
extension LimiterDelivery {
    /// Delivers every event of `batch`, in order, emptying it (on the
    /// draining thread, without the limiter's lock).
    @inlinable
    func deliverAll(_ batch: inout RingBuffer<LimiterEvent<Key, Value>>) {
        if let body = handlerBody {
            batch.drain { event in
                if event.kind == .emitted { body(event.key, event.value) }
            }
            return
        }
        deliverAllOther(&batch)
    }

    /// ``deliverAll(_:)`` for the targets other than a handler.
    @inlinable @inline(never)
    func deliverAllOther(_ batch: inout RingBuffer<LimiterEvent<Key, Value>>) {
        batch.drain { deliver($0) }
    }

    /// ``finish()``, then resumes the waiters of `close() async`.
    @inlinable @inline(never)
    func finish(resuming waiters: [CheckedContinuation<Void, Never>]) {
        finish()
        for waiter in waiters { waiter.resume() }
    }
}
