import CSluice

/// A keyed throttle, audit, debounce or rate limiter for Swift values.
///
/// Every key has its own state machine, following one ``LimiterPolicy``
/// (the specification is `docs/semantics.md`). The simplest way to use one
/// is the ordered `AsyncSequence` of its emissions: submit values from
/// anywhere, and consume what the limiter lets through, in order, in one
/// task:
///
/// ```swift
/// import Foundation
/// import Sluice
///
/// let (saves, emissions) = try Limiter<UUID, Document>.makeStream(
///     .debounce(interval: .seconds(1), maxWait: .seconds(5)))
///
/// Task {
///     for await emission in emissions {        // each key's values in order
///         store.save(emission.value, id: emission.key)
///     }
/// }
///
/// try saves.submit(draft, for: draft.id)      // .scheduled(at: …)
/// ```
///
/// Each submitted value gets a ``LimiterDecision`` at once — emitted now,
/// scheduled, or dropped — and every emission, immediate or later, reaches
/// the ``LimiterDelivery``: the stream above, or a handler, a dispatch queue,
/// or every event (emitted, dropped, discarded). For a server that only
/// needs a yes or no per request, ``RateLimiter`` decides without values.
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
/// A limiter of built-in integer keys (`Int`, `UInt64`, `Int32`…) and
/// trivially copyable values of at most 8 bytes (`Int`, `Double`, a small
/// struct of integers), without `combine`, keeps no table of values at all:
/// the value travels in the core's token and the key comes back with each
/// event, so a call that supersedes a pending value touches no memory of it.
///
/// **Threads**: a limiter is `Sendable`; call it from any thread. Where
/// emissions are delivered depends on the scheduler:
///
/// - on a loop (the default), the loop thread delivers every emission —
///   also a value emitted at once by a `submit` made on another thread,
///   shortly after that call — and calls on different keys mostly run in
///   parallel (the C loop layer shards keys over locks), with or without
///   `combine`;
/// - on a ``ManualLimiterClock``, the thread that called (`submit`, `flush`,
///   `close`) or advanced the clock delivers, before that call returns
///   (unless another thread is delivering at that moment: it then delivers
///   these values next).
///
/// Deliveries happen outside every lock, one at a time, in the order the
/// limiter emitted: each key's values in order, whichever threads call. A
/// ``LimiterDelivery/queue(_:_:)`` delivery runs the handler on the queue; a
/// stream's consumer runs wherever its task runs. `combine` runs under the
/// limiter's lock and must not call the same limiter (a precondition stops
/// the process with a message instead of deadlocking); a value's `deinit`
/// must not call the limiter that drops it.
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
    ///   - maxKeys: a cap on keys with state, at least 1 (`nil`, the default, for none; 0 is refused).
    ///     A new key past the cap is refused with ``LimiterError/full``;
    ///     keys with state are never evicted.
    ///   - tick: the resolution of the timer wheel (`nil` for the engine's
    ///     default: 1 ms on a manual clock, 10 µs on a loop). A timer
    ///     runs at most one tick after its deadline, never before; reported
    ///     times are always the exact deadlines.
    ///   - combine: folds a superseded pending value into the newer one
    ///     (`combine(older, newer)`) instead of dropping it — for example to
    ///     collect a window's events into one array. With `combine`, a
    ///     throttle window keeps the fold of its values in call order,
    ///     whatever its `pick`. Runs under the limiter's lock, on the thread
    ///     that caused the fold (the loop thread on a loop): it must not call
    ///     this limiter (checked by a precondition).
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
            seed: nil, makeSink: { LimiterStorage.makeSink($0) })
    }

    /// The designated initializer; `seed` fixes the core's hash key (tests
    /// only, for a repeatable order between keys); `makeSink` makes the
    /// engine's sink in code specialized for Key and Value.
    @usableFromInline
    init(
        _ policy: LimiterPolicy, scheduler: LimiterScheduler, maxKeys: Int?, tick: Duration?,
        combine: (@Sendable (Value, Value) -> Value)?, delivery: LimiterDelivery<Key, Value>,
        seed: (UInt64, UInt64)?, makeSink: (LimiterStorage<Key, Value>) -> EngineSink
    ) throws(LimiterError) {
        storage = try LimiterStorage(
            policy: policy, scheduler: scheduler, maxKeys: maxKeys, tick: tick, shards: nil, combine: combine,
            delivery: delivery, seed: seed, makeSink: makeSink)
    }

    /// The designated initializer of a limiter of plans (see
    /// ``init(plans:scheduler:maxKeys:maxQuotas:delivery:)``); `seed` and
    /// `makeSink` as above.
    @usableFromInline
    init(
        plans: [RatePlan], scheduler: LimiterScheduler, maxKeys: Int?, maxQuotas: Int?,
        delivery: LimiterDelivery<Key, Value>, seed: (UInt64, UInt64)?,
        makeSink: (LimiterStorage<Key, Value>) -> EngineSink
    ) throws(LimiterError) {
        let setup = try PlanSetup(plans, maxQuotas: maxQuotas)
        storage = try LimiterStorage(
            policy: setup.policy, plans: setup, scheduler: scheduler, maxKeys: maxKeys, tick: nil, shards: nil,
            combine: nil, delivery: delivery, seed: seed, makeSink: makeSink)
    }

    /// Creates a limiter that calls `handler` for every emission, on the
    /// thread that caused it (see ``LimiterDelivery/handler(_:)``).
    ///
    /// - Parameters:
    ///   - policy: what every key follows; checked here.
    ///   - scheduler: where time comes from and who runs the timers.
    ///   - maxKeys: a cap on keys with state, at least 1 (`nil` for none).
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
    /// let (limiter, emissions) = try Limiter<UserID, Event>.makeStream(.throttle(interval: .seconds(1)))
    /// Task { for await emission in emissions { await upload([emission.value], for: emission.key) } }
    /// try limiter.submit(event, for: user)
    /// ```
    ///
    /// - Parameters:
    ///   - policy: what every key follows; checked here.
    ///   - scheduler: where time comes from and who runs the timers.
    ///   - maxKeys: a cap on keys with state, at least 1 (`nil` for none).
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
    @inlinable @inline(__always)
    @discardableResult
    public func submit(_ value: Value, for key: Key) throws(LimiterError) -> Decision {
        let decision = try storage.submitBrief(value, for: key)
        switch decision.kind {
        case SLUICE_EMITTED: return .emitted
        case SLUICE_SCHEDULED: return .scheduled(at: LimiterInstant(nanoseconds: decision.at))
        default: return .dropped(retryAt: LimiterInstant(nanoseconds: decision.at))
        }
    }

    /// Submits a value that weighs `cost` units of a rate key's quota (bytes,
    /// rows, a batch of n) and returns the rate decision at once: admitted
    /// whole (emitted now, with what is left of the quota) or dropped whole
    /// (released before this call returns, with when to retry).
    ///
    /// A cost above the policy's burst is not an error: it can never be
    /// admitted, so it is dropped with ``RateDecision/retryAt`` `nil`.
    ///
    /// - Parameters:
    ///   - value: the value.
    ///   - key: the key.
    ///   - cost: the units the call weighs, at least 1.
    /// - Returns: the decision, with `remaining`, `fullAt` and `retryAt`.
    /// - Throws: ``LimiterError/invalidArgument`` when the policy is not
    ///   ``LimiterPolicy/rate(limit:per:burst:)``, ``LimiterError/outOfRange``
    ///   for a cost below 1 or above 10^12, and the errors of
    ///   ``submit(_:for:)``. The value was not taken (it is released).
    @discardableResult
    public func submit(_ value: Value, for key: Key, cost: Int) throws(LimiterError) -> RateDecision {
        guard storage.policy.isRate else { throw CPolicy.costNeedsRate(storage.policy) }
        guard cost >= 1, cost <= CPolicy.rateMax else { throw CPolicy.badCost(cost) }
        let decision = try storage.submit(value, for: key, cost: UInt64(cost))
        return RateDecision(decision, now: decision.now)
    }

    /// Reads a rate key's quota now, without changing it (a key with no
    /// history has its whole burst).
    ///
    /// - Parameters:
    ///   - key: the key.
    ///   - cost: the cost ``RateQuota/retryAt`` is computed for (1 for a plain call).
    /// - Returns: the quota.
    /// - Throws: ``LimiterError/invalidArgument`` when the policy is not
    ///   rate, ``LimiterError/outOfRange`` for a bad cost,
    ///   ``LimiterError/closed``, ``LimiterError/keyTooLong``.
    public func quota(for key: Key, cost: Int = 1) throws(LimiterError) -> RateQuota {
        guard storage.policy.isRate else { throw CPolicy.costNeedsRate(storage.policy) }
        guard cost >= 1, cost <= CPolicy.rateMax else { throw CPolicy.badCost(cost) }
        let quota = try storage.quota(key, cost: UInt64(cost))
        return RateQuota(quota, now: quota.now)
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

    /// Counters of the limiter (see ``LimiterStatistics``).
    public var statistics: LimiterStatistics {
        LimiterStatistics(storage.stats())
    }
}
