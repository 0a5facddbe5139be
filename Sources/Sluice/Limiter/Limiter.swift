import CSluice

/// Where a limiter's time comes from and who runs its timers.
///
/// - ``default``: the library's own event loop (``LimiterLoop/shared``), on
///   the system's monotonic clock: no setup.
/// - ``loop(_:)``: a ``LimiterLoop`` — one of your own, or attached to a
///   libevent `event_base` your program runs.
/// - ``manual(_:)``: a ``ManualLimiterClock``: time moves only when the
///   clock is advanced, and timers fire inside `advance` — exact and
///   repeatable, for tests and simulations.
///
/// The same code runs on all of them; only who moves time differs.
public struct LimiterScheduler: Sendable {
    enum Kind: Sendable {
        case manual(ManualLimiterClock)
        case loop(LimiterLoop)
    }

    let kind: Kind

    /// The library's default loop (``LimiterLoop/shared``), started on first use.
    public static var `default`: LimiterScheduler {
        LimiterScheduler(kind: .loop(.shared))
    }

    /// Runs the limiter on an event loop: calls from any thread, deadlines
    /// fired and timer emissions delivered on the loop thread.
    ///
    /// - Parameter loop: the loop.
    /// - Returns: the scheduler.
    public static func loop(_ loop: LimiterLoop) -> LimiterScheduler {
        LimiterScheduler(kind: .loop(loop))
    }

    /// Runs the limiter on a manual clock: time moves only when `clock` is
    /// advanced, and timers fire inside its `advance` calls.
    ///
    /// - Parameter clock: the clock; any number of limiters may share it.
    /// - Returns: the scheduler.
    public static func manual(_ clock: ManualLimiterClock) -> LimiterScheduler {
        LimiterScheduler(kind: .manual(clock))
    }
}

/// A keyed throttle, audit, debounce or rate limiter for Swift values.
///
/// Every key has its own state machine, following one ``LimiterPolicy``
/// (the specification is `docs/semantics.md`). Each submitted value gets a
/// ``LimiterDecision`` at once — emitted now, scheduled, or dropped — and
/// every emission, immediate or later, reaches the ``LimiterDelivery``:
///
/// ```swift
/// let clock = ManualLimiterClock()
/// let saves = try Limiter<UUID, Document>(
///     .debounce(interval: .seconds(1), maxWait: .seconds(5)),
///     scheduler: .manual(clock)
/// ) { id, document in store.save(document, id) }
///
/// try saves.submit(draft, for: draft.id)   // .scheduled(at: …)
/// ```
///
/// **Keys** are exact: any ``LimiterKey`` — integers (the allocation-free
/// fast path), `String`, `Substring`, `UUID`, `[UInt8]`, or your own type
/// with an exact identity. Two keys share state only when their identities
/// are equal.
///
/// **Values** stay in Swift; the C core only sees tokens. Every value is
/// accounted for exactly once: emitted (delivered), dropped (superseded,
/// suppressed or cancelled), or discarded (pending when the limiter closes
/// without draining). A dropped or discarded value is released at that
/// moment, inside the call that dropped it — unless the delivery is
/// ``LimiterDelivery/events(_:)``, which sees it first. With `combine`, a
/// superseded value is folded into the newer one instead of being dropped.
///
/// **Threads**: a limiter is `Sendable`; call it from any thread. On a loop
/// (the default), calls on different keys mostly run in parallel (the C
/// loop layer shards keys over locks) and timers fire on the loop thread;
/// on a ``ManualLimiterClock`` calls are serialised by a lock. Deliveries
/// happen outside every lock, one at a time, in the order the limiter
/// emitted: each key's values in order, whichever threads call (on a loop,
/// the loop thread delivers every emission, also a value emitted at once by
/// a `submit` made on another thread; see ``LimiterDelivery``).
/// `combine` runs under the limiter's lock and must not call the limiter
/// (on a loop, a limiter with `combine` serialises its calls so that folds
/// follow the core's order exactly); a value's `deinit` must not call the
/// limiter that drops it.
///
/// **Lifetime**: releasing the last reference closes the limiter with
/// discard: pending values are released, and a stream delivery finishes.
///
/// - Complexity: `submit`, `flush`, `cancel` and `pending` are O(1) on
///   average in the number of keys. In steady state a submit on an existing
///   integer key with a trivial value does not allocate.
public final class Limiter<Key: LimiterKey, Value: Sendable>: Sendable {
    /// The decision type, ``LimiterDecision``.
    public typealias Decision = LimiterDecision
    /// The type delivered to a stream, ``LimiterEmission``.
    public typealias Emission = LimiterEmission<Key, Value>
    /// The type delivered to an events handler, ``LimiterEvent``.
    public typealias Event = LimiterEvent<Key, Value>

    @usableFromInline let storage: LimiterStorage<Key, Value>

    /// The policy every key follows.
    public var policy: LimiterPolicy { storage.policy }

    /// The current time of the limiter's clock.
    public var now: LimiterInstant { LimiterInstant(nanoseconds: storage.now) }

    /// Creates a limiter.
    ///
    /// - Parameters:
    ///   - policy: what every key follows; checked here.
    ///   - scheduler: where time comes from and who runs the timers.
    ///   - maxKeys: a cap on keys with state (`nil`, the default, for none).
    ///     A new key past the cap is refused with ``LimiterError/full``;
    ///     keys with state are never evicted.
    ///   - tick: the resolution of the timer wheel (`nil` for 1 ms). A timer
    ///     runs at most one tick after its deadline, never before; reported
    ///     times are always the exact deadlines.
    ///   - combine: folds a superseded pending value into the newer one
    ///     (`combine(older, newer)`) instead of dropping it — for example to
    ///     collect a window's events into one array. With `combine`, a
    ///     throttle window keeps the fold of its values in call order,
    ///     whatever its `pick`. Runs under the limiter's lock: it must not
    ///     call the limiter.
    ///   - delivery: where emissions go (see ``LimiterDelivery``).
    /// - Throws: ``LimiterError/invalidArgument`` or ``LimiterError/outOfRange``
    ///   for an invalid policy or option, ``LimiterError/outOfMemory``.
    @inlinable
    public convenience init(
        _ policy: LimiterPolicy,
        scheduler: LimiterScheduler = .default,
        maxKeys: Int? = nil,
        tick: Duration? = nil,
        combine: (@Sendable (Value, Value) -> Value)? = nil,
        delivery: LimiterDelivery<Key, Value>
    ) throws(LimiterError) {
        // @inlinable, so that the handlers are specialized in the caller.
        try self.init(
            policy, scheduler: scheduler, maxKeys: maxKeys, tick: tick, combine: combine, delivery: delivery,
            seed: nil, handlers: LimiterStorage<Key, Value>.makeHandlers())
    }

    /// The designated initializer; `seed` fixes the core's hash key (tests
    /// and trace runs only, for a repeatable order between keys); `handlers`
    /// are the storage's entry points specialized for Key and Value.
    @usableFromInline
    init(
        _ policy: LimiterPolicy, scheduler: LimiterScheduler, maxKeys: Int?, tick: Duration?,
        combine: (@Sendable (Value, Value) -> Value)?, delivery: LimiterDelivery<Key, Value>,
        seed: (UInt64, UInt64)?, handlers: SpecializedHandlers? = nil
    ) throws(LimiterError) {
        let engine: LimiterStorage<Key, Value>.Engine =
            switch scheduler.kind {
            case let .manual(clock): .manual(clock)
            case let .loop(loop): .loop(loop)
            }
        storage = try LimiterStorage(
            policy: policy, engine: engine, maxKeys: maxKeys, tick: tick, shards: nil, combine: combine,
            delivery: delivery, seed: seed, handlers: handlers)
    }

    /// Creates a limiter that calls `handler` for every emission, on the
    /// thread that caused it (see ``LimiterDelivery/handler(_:)``).
    ///
    /// - Parameters:
    ///   - policy: what every key follows; checked here.
    ///   - scheduler: where time comes from and who runs the timers.
    ///   - maxKeys: a cap on keys with state (`nil` for none).
    ///   - combine: folds a superseded value into the newer one (see
    ///     ``init(_:scheduler:maxKeys:tick:combine:delivery:)``).
    ///   - handler: receives the key and the value of every emission.
    /// - Throws: ``LimiterError/invalidArgument`` or ``LimiterError/outOfRange``
    ///   for an invalid policy or option, ``LimiterError/outOfMemory``.
    @inlinable
    public convenience init(
        _ policy: LimiterPolicy,
        scheduler: LimiterScheduler = .default,
        maxKeys: Int? = nil,
        combine: (@Sendable (Value, Value) -> Value)? = nil,
        handler: @escaping @Sendable (Key, Value) -> Void
    ) throws(LimiterError) {
        try self.init(policy, scheduler: scheduler, maxKeys: maxKeys, combine: combine, delivery: .handler(handler))
    }

    /// Creates a limiter together with an `AsyncStream` of its emissions.
    ///
    /// The stream finishes once the limiter is closed (after the values a
    /// draining close emits) or released.
    ///
    /// ```swift
    /// let (limiter, emissions) = try Limiter<Int, Event>.makeStream(
    ///     .throttle(interval: .seconds(1)), scheduler: scheduler)
    /// Task { for await emission in emissions { await send(emission.value) } }
    /// ```
    ///
    /// - Parameters:
    ///   - policy: what every key follows; checked here.
    ///   - scheduler: where time comes from and who runs the timers.
    ///   - maxKeys: a cap on keys with state (`nil` for none).
    ///   - bufferingPolicy: the stream's buffer (unbounded by default; a
    ///     bounded buffer drops emissions the consumer did not take in time).
    ///   - combine: folds a superseded value into the newer one (see
    ///     ``init(_:scheduler:maxKeys:tick:combine:delivery:)``).
    /// - Returns: the limiter and its emissions.
    /// - Throws: ``LimiterError/invalidArgument`` or ``LimiterError/outOfRange``
    ///   for an invalid policy or option, ``LimiterError/outOfMemory``.
    @inlinable
    public static func makeStream(
        _ policy: LimiterPolicy,
        scheduler: LimiterScheduler = .default,
        maxKeys: Int? = nil,
        bufferingPolicy: AsyncStream<Emission>.Continuation.BufferingPolicy = .unbounded,
        combine: (@Sendable (Value, Value) -> Value)? = nil
    ) throws(LimiterError) -> (limiter: Limiter, emissions: AsyncStream<Emission>) {
        let (stream, continuation) = AsyncStream<Emission>.makeStream(bufferingPolicy: bufferingPolicy)
        do {
            let limiter = try Limiter(
                policy, scheduler: scheduler, maxKeys: maxKeys, combine: combine,
                delivery: LimiterDelivery(target: .stream(continuation)))
            return (limiter, stream)
        } catch {
            continuation.finish()
            throw error
        }
    }

    deinit {
        storage.shutdown()
    }

    /// Submits a value for a key and returns the decision at once.
    ///
    /// Deadlines of this key that are due fire first, so the result never
    /// depends on whether the timer or the call ran first. An emitted value
    /// (``LimiterDecision/emitted``) is delivered in its key's order: on a
    /// ``ManualLimiterClock`` as part of this call (unless another thread is
    /// delivering at that moment: it then delivers this value next); on a
    /// loop by the loop thread, before this call returns when it is made on
    /// the loop thread, shortly after otherwise (after any older value of the
    /// key still on its way). A dropped value is released before this call
    /// returns — except with an ``LimiterDelivery/events(_:)`` delivery on a
    /// loop, where the loop delivers the drop, in order, and then releases it.
    ///
    /// - Parameters:
    ///   - value: the value.
    ///   - key: the key.
    /// - Returns: ``LimiterDecision/emitted``, ``LimiterDecision/scheduled(at:)``
    ///   or ``LimiterDecision/dropped(retryAt:)``.
    /// - Throws: ``LimiterError/closed`` after ``close(drain:)-580w1``,
    ///   ``LimiterError/keyTooLong`` for a byte key over 1024 bytes,
    ///   ``LimiterError/full`` for a new key past `maxKeys`,
    ///   ``LimiterError/outOfMemory``. The value was not taken (it is released).
    /// - Complexity: O(1) on average.
    @inlinable
    @discardableResult
    public func submit(_ value: Value, for key: Key) throws(LimiterError) -> Decision {
        try storage.submit(value, for: key)
    }

    /// Emits the key's pending value now and returns the key to idle, with
    /// its timer disarmed: the key's next call is a leading edge. For rate,
    /// does nothing.
    ///
    /// - Parameter key: the key.
    /// - Returns: whether a value was pending (and is now emitted).
    /// - Throws: ``LimiterError/closed``, ``LimiterError/keyTooLong``.
    @discardableResult
    public func flush(_ key: Key) throws(LimiterError) -> Bool {
        try storage.keyOperation(key, .flush)
    }

    /// Drops the key's pending value (released now) and returns the key to
    /// idle, with its timer disarmed. For rate, forgets the key's history:
    /// the key has a fresh quota.
    ///
    /// - Parameter key: the key.
    /// - Returns: whether a value was pending (and is now dropped).
    /// - Throws: ``LimiterError/closed``, ``LimiterError/keyTooLong``.
    @discardableResult
    public func cancel(_ key: Key) throws(LimiterError) -> Bool {
        try storage.keyOperation(key, .cancel)
    }

    /// Whether a value of the key waits to be emitted later. An open window
    /// with nothing pending is not pending; rate keys never are.
    ///
    /// - Parameter key: the key.
    /// - Returns: `true` when a value is pending.
    /// - Throws: ``LimiterError/closed``, ``LimiterError/keyTooLong``.
    public func pending(_ key: Key) throws(LimiterError) -> Bool {
        try storage.keyOperation(key, .pending)
    }

    /// Closes the limiter: every pending value is emitted now (`drain: true`)
    /// or discarded and released (`drain: false`); afterwards every call
    /// throws ``LimiterError/closed`` and a stream delivery finishes.
    ///
    /// - Parameter drain: emit the pending values (`true`, the default) or
    ///   discard them.
    /// - Throws: ``LimiterError/closed`` if the limiter was already closed.
    public func close(drain: Bool = true) throws(LimiterError) {
        try storage.close(drain: drain)
    }

    /// Closes the limiter (see ``close(drain:)-580w1``) and waits until every
    /// value it held is delivered or released — on a loop, the loop thread
    /// delivers them — and, for a ``LimiterDelivery/queue(_:_:)`` delivery,
    /// until the queue ran them.
    ///
    /// - Parameter drain: emit the pending values (`true`, the default) or
    ///   discard them.
    /// - Throws: ``LimiterError/closed`` if the limiter was already closed.
    public func close(drain: Bool = true) async throws(LimiterError) {
        try storage.close(drain: drain)
        await storage.waitUntilFinished()
        if case let .queue(queue, _) = storage.delivery.target {
            await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                queue.async { continuation.resume() }
            }
        }
    }

    /// Whether ``close(drain:)-580w1`` was called.
    public var isClosed: Bool { storage.isClosed }

    /// Counters of the limiter.
    public var statistics: LimiterStatistics {
        let stats = storage.stats()
        return LimiterStatistics(
            keys: Int(stats.live_keys), pendingValues: Int(stats.pending), memoryBytes: Int(stats.memory_bytes),
            refusedKeys: Int(stats.full_refusals))
    }
}

/// Counters of a ``Limiter``, read by ``Limiter/statistics``.
public struct LimiterStatistics: Hashable, Sendable {
    /// Keys with state (not idle).
    public var keys: Int
    /// Keys holding a pending value.
    public var pendingValues: Int
    /// Bytes allocated by the C core for this limiter (not counting the Swift values).
    public var memoryBytes: Int
    /// New keys refused because of `maxKeys`.
    public var refusedKeys: Int
}
