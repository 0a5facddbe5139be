import CSluice
import CSluiceLoop
import Dispatch

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// One event of the core, as the manual engine buffers it.
@usableFromInline
struct CoreEventRecord {
    @usableFromInline var kind: sluice_event_kind_t
    @usableFromInline var token: UInt64
    @usableFromInline var at: UInt64

    @inlinable
    init(kind: sluice_event_kind_t, token: UInt64, at: UInt64) {
        self.kind = kind
        self.token = token
        self.at = at
    }
}

/// The non-generic face of a limiter's storage that the C event callbacks
/// can reach (a C function pointer cannot capture generic context).
///
/// The manual engine's core calls back inside a call made under the
/// storage's lock: the callback only appends the event to `coreEvents`, and
/// the (specialized) generic code that made the call handles the events
/// right after it returns, still under the lock. (Handing each event to a
/// specialized closure from the callback instead was measured: no cheaper,
/// since a closure call costs what the buffering saves.) The loop engine's
/// events come from the loop thread and are dispatched through
/// ``loopEvent(_:)``.
@usableFromInline
class CoreEventTarget: @unchecked Sendable {
    /// Events of the manual engine's current core call (the first
    /// `coreEventCount` of a buffer of `coreEventCapacity`), guarded by the
    /// storage's lock. A manually managed buffer, reset by its count: the
    /// callback and the handling run on every submit that supersedes a value,
    /// and an array's uniqueness checks and `removeAll` cost as much as the
    /// work itself. Appending does not allocate in steady state.
    @exclusivity(unchecked) @usableFromInline
    final var coreEvents: UnsafeMutablePointer<CoreEventRecord>
    @exclusivity(unchecked) @usableFromInline
    final var coreEventCount = 0
    @exclusivity(unchecked) @usableFromInline
    final var coreEventCapacity = 4

    /// Entry points specialized for the storage's Key and Value, when the
    /// limiter was created from code that could specialize them (see
    /// ``SpecializedHandlers``); `nil` otherwise.
    @usableFromInline
    final let handlers: SpecializedHandlers?

    @usableFromInline
    init(handlers: SpecializedHandlers?) {
        self.handlers = handlers
        coreEvents = .allocate(capacity: coreEventCapacity)
    }

    deinit {
        // CoreEventRecord is trivial: nothing to deinitialize.
        coreEvents.deallocate()
    }

    /// Appends an event of the manual engine's current core call.
    @inline(__always)
    final func appendCoreEvent(_ record: CoreEventRecord) {
        if coreEventCount == coreEventCapacity { growCoreEvents() }
        (coreEvents + coreEventCount).initialize(to: record)
        coreEventCount &+= 1
    }

    /// Doubles the event buffer (a core call reported more events than ever).
    final func growCoreEvents() {
        let capacity = coreEventCapacity * 2
        let events = UnsafeMutablePointer<CoreEventRecord>.allocate(capacity: capacity)
        events.moveInitialize(from: coreEvents, count: coreEventCount)
        coreEvents.deallocate()
        coreEvents = events
        coreEventCapacity = capacity
    }

    /// Handles one event of a loop limiter (loop engine): called by the C
    /// loop layer outside its locks and outside the storage's lock, on the
    /// loop thread (or on a caller's thread when it delivers itself).
    func loopEvent(_ event: UnsafePointer<sluice_event_t>) {
        preconditionFailure("abstract")
    }

    /// The C callback of a core limiter: `user` is an unretained `CoreEventTarget`.
    static let coreCallback: sluice_event_fn = { user, event in
        guard let user, let event else { return }
        // The target is alive (the call that caused the event holds it): no
        // retain and release for each event.
        Unmanaged<CoreEventTarget>.fromOpaque(user)._withUnsafeGuaranteedRef {
            $0.appendCoreEvent(
                CoreEventRecord(kind: event.pointee.kind, token: event.pointee.token, at: event.pointee.at))
        }
    }

    /// The C callback of a loop limiter: `user` is a retained `CoreEventTarget`
    /// (released after `sluice_mt_free()`).
    static let loopCallback: sluice_event_fn = { user, event in
        guard let user, let event else { return }
        let target = Unmanaged<CoreEventTarget>.fromOpaque(user).takeUnretainedValue()
        if let handlers = target.handlers {
            handlers.loopEvent(target, event)
        } else {
            target.loopEvent(event)
        }
    }
}

/// The entry points of a ``LimiterStorage`` that C callbacks and the manual
/// clock call, as closures created in code specialized for the limiter's Key
/// and Value (the `@inlinable` initializers of ``Limiter``). Reached through
/// the class hierarchy instead, they would run as unspecialized generic code,
/// several times slower (type metadata lookups, value-witness copies).
@usableFromInline
struct SpecializedHandlers: Sendable {
    @usableFromInline let loopEvent: @Sendable (CoreEventTarget, UnsafePointer<sluice_event_t>) -> Void
    @usableFromInline let fire: @Sendable (CoreEventTarget, UInt64) -> Void

    @inlinable
    init(
        loopEvent: @escaping @Sendable (CoreEventTarget, UnsafePointer<sluice_event_t>) -> Void,
        fire: @escaping @Sendable (CoreEventTarget, UInt64) -> Void
    ) {
        self.loopEvent = loopEvent
        self.fire = fire
    }
}

/// A lock taken around whole calls of a loop-engine limiter with `combine`,
/// so that the Swift record of each key's newest pending value follows the
/// core's order exactly.
@usableFromInline
final class SerialLock: Sendable {
    @usableFromInline let lock = PosixLock()
    init() {}
}

/// Everything a ``Limiter`` holds: the C limiter, the Swift values by token,
/// and the outbox of deliveries.
///
/// Two engines:
///
/// - **manual**: a single-threaded core limiter (`sluice.h`) on a
///   ``ManualLimiterClock``. Every core call is made under `lock`, and the
///   core's events arrive inside those calls (lock held).
/// - **loop**: a loop limiter (`sluice_loop.h`), thread-safe itself. Core
///   calls are made *without* `lock` (the loop thread takes its own locks and
///   then ours to deliver events: holding ours across a C call could
///   deadlock). A submit therefore takes `lock` twice: to store the value
///   before the core can report its token, and to act on the decision.
///   The loop limiter is created with `SLUICE_MT_REPORT_EMITTED` (and
///   `SLUICE_MT_REPORT_DROPPED` for an events delivery): a value emitted at
///   once is reported through the loop callback too, queued behind the
///   older events of its key, so deliveries follow each key's order
///   whichever thread submitted. The decision is then informational: the
///   value stays in `slots` until its event arrives. A value dropped at once
///   is released by the submit itself, unless the delivery observes drops
///   (then its DROP event, in order, releases it).
///
/// Concurrency: every stored `var` is guarded by `lock`. Deliveries run
/// outside the lock, one thread at a time (`draining`), in outbox order.
///
/// Ownership: the manual core's `user` pointer is this object, unretained:
/// the core calls back only during a call made through this object, or from
/// `sluice_limiter_free()` in `deinit` after ``shutdown()`` closed it, when
/// nothing can be reported. The loop limiter's `user` pointer is this object
/// *retained*, because the loop may deliver after the last `Limiter`
/// reference is gone (a free requested inside a callback is finished by the
/// loop); ``shutdown()`` releases it once `sluice_mt_free()` has returned.
@usableFromInline
final class LimiterStorage<Key: LimiterKey, Value: Sendable>: CoreEventTarget, ManualClockClient,
    @unchecked Sendable
{
    // The hot path (submit and what it calls) is @inlinable so that it is
    // specialized for the caller's Key and Value: unspecialized generic code
    // spends most of a submit looking up type metadata.
    @usableFromInline typealias Event = LimiterEvent<Key, Value>

    enum Engine {
        case manual(ManualLimiterClock)
        case loop(LimiterLoop)
    }

    // Stored properties are laid out in declaration order, and a property
    // whose size is unknown at compile time (`delivery`: its stream case
    // holds a resilient `AsyncStream.Continuation`) makes the offsets of
    // every property after it run-time values, read from the class metadata
    // on each access. The hot path's properties therefore come first, and
    // `delivery` last.

    @usableFromInline let lock: PosixLock
    /// `lock`'s mutex (`lock` owns it), locked directly on the submit path:
    /// one load less than going through `lock`.
    @usableFromInline let mutex: UnsafeMutablePointer<pthread_mutex_t>
    /// The C limiter: `sluice_limiter_t *` (manual) or `sluice_mt_t *` (loop).
    /// Set once in init.
    @exclusivity(unchecked) @usableFromInline var handle: OpaquePointer?
    /// The manual engine's clock, unretained (`clock` keeps it alive), for
    /// the submit path: reading the strong reference cost every submit a
    /// retain and a release of the clock. `nil` on a loop.
    @usableFromInline let unretainedClock: Unmanaged<ManualLimiterClock>?
    @usableFromInline let observesDrops: Bool
    @usableFromInline let combine: (@Sendable (Value, Value) -> Value)?
    /// Loop engine with `combine` only.
    @usableFromInline let serial: SerialLock?

    // Guarded by `lock`, so the dynamic exclusivity checks of class
    // properties (a measurable part of a submit) are not needed.
    @exclusivity(unchecked) @usableFromInline var slots = SlotTable<Key, Value>()
    @exclusivity(unchecked) @usableFromInline var outbox = RingBuffer<Event>()
    /// The manual engine's decision buffer for `sluice_limiter_submit`: a
    /// stored property rather than a local, whose address passed to C would
    /// cost every submit a stack-protector check.
    @exclusivity(unchecked) @usableFromInline var coreDecision = sluice_decision_t()
    @exclusivity(unchecked) @usableFromInline var draining = false
    @exclusivity(unchecked) @usableFromInline var closed = false
    @exclusivity(unchecked) @usableFromInline var finished = false
    @exclusivity(unchecked) @usableFromInline var finishWaiters: [CheckedContinuation<Void, Never>] = []
    /// Loop engine with `combine`: each key's newest pending token, the
    /// token that superseded each pending token, and tokens cancelled while
    /// pending (their DROP is not a supersession).
    @exclusivity(unchecked) @usableFromInline var newestPending: [CoreKey: UInt64] = [:]
    @exclusivity(unchecked) @usableFromInline var successor: [UInt64: UInt64] = [:]
    @exclusivity(unchecked) @usableFromInline var cancelledTokens: Set<UInt64> = []
    /// Loop engine: the thread delivering a C callback of this limiter, if any.
    @exclusivity(unchecked) @usableFromInline var callbackThread: pthread_t?

    /// The manual engine's clock (nil on a loop).
    @usableFromInline let clock: ManualLimiterClock?
    let policy: LimiterPolicy
    let engine: Engine
    /// Last: see the note on layout above.
    @usableFromInline let delivery: LimiterDelivery<Key, Value>

    init(
        policy: LimiterPolicy, engine: Engine, maxKeys: Int?, tick: Duration?, shards: Int?,
        combine: (@Sendable (Value, Value) -> Value)?, delivery: LimiterDelivery<Key, Value>,
        seed: (UInt64, UInt64)? = nil, handlers: SpecializedHandlers? = nil
    ) throws(LimiterError) {
        let lock = PosixLock()
        self.lock = lock
        self.mutex = lock.mutex
        self.policy = policy
        self.engine = engine
        self.delivery = delivery
        self.observesDrops = delivery.observesDrops
        self.combine = combine
        switch engine {
        case let .manual(clock):
            self.clock = clock
            self.unretainedClock = Unmanaged.passUnretained(clock)
            self.serial = nil
        case .loop:
            self.clock = nil
            self.unretainedClock = nil
            self.serial = combine == nil ? nil : SerialLock()
        }
        super.init(handlers: handlers)

        var config = sluice_config_t()
        config.policy = try policy.cPolicy()
        if combine != nil && config.policy.kind == SLUICE_THROTTLE {
            // With combine a window keeps the fold of its values in call
            // order, whichever value `pick` would keep: the core keeps the
            // newest token, which receives the fold.
            config.policy.pick = SLUICE_PICK_LATEST
        }
        if let maxKeys {
            guard maxKeys >= 0 else { throw .invalidArgument }
            config.max_keys = UInt64(maxKeys)
        }
        if let tick {
            let ns = try LimiterPolicy.nanoseconds(tick)
            guard ns > 0 else { throw .invalidArgument }
            config.tick_ns = UInt64(ns)
        }
        if let seed {
            config.fixed_seed = true
            config.seed = (seed.0, seed.1)
        }
        var limiter: OpaquePointer?
        switch engine {
        case let .manual(clock):
            config.start_ns = clock.nowNanoseconds
            config.on_event = CoreEventTarget.coreCallback
            config.user = Unmanaged.passUnretained(self as CoreEventTarget).toOpaque()
            try LimiterError.check(sluice_limiter_new(&limiter, &config))
            handle = limiter
            clock.register(self)
        case let .loop(loop):
            var nshards: UInt32 = 0
            if let shards {
                guard shards >= 1, shards <= Int(SLUICE_MT_SHARDS_MAX) else { throw .invalidArgument }
                nshards = UInt32(shards)
            }
            config.on_event = CoreEventTarget.loopCallback
            let user = Unmanaged.passRetained(self as CoreEventTarget)
            config.user = user.toOpaque()
            // Every emission through the callback, in per-key order (and
            // every drop, when the delivery sees drops): see the class doc.
            var options = sluice_mt_options_t()
            options.nshards = nshards
            options.flags = (observesDrops ? SLUICE_MT_REPORT_ALL : SLUICE_MT_REPORT_EMITTED).rawValue
            let rc = sluice_mt_new_with_options(&limiter, loop.handle, &config, &options)
            if rc < 0 {
                user.release()
                throw LimiterError(rawValue: rc)
            }
            handle = limiter
        }
    }

    deinit {
        if case .manual = engine {
            // shutdown() closed it: nothing pending, no event can come.
            sluice_limiter_free(handle)
        }
        // Loop engine: freed by shutdown(), which held this object until then.
    }

    var isManual: Bool {
        if case .manual = engine { return true }
        return false
    }

    // MARK: - Operations

    /// The current time of the engine's clock, in ns.
    var now: UInt64 {
        if let clock { return clock.nowNanoseconds }
        return sluice_clock_now()
    }

    @inlinable
    func submit(_ value: Value, for key: Key) throws(LimiterError) -> LimiterDecision {
        if let clock = unretainedClock {
            return try manualSubmit(value, for: key, clock: clock)
        }
        if let serial {
            return try serial.lock.withLock { () throws(LimiterError) in try loopSubmit(value, for: key) }
        }
        return try loopSubmit(value, for: key)
    }

    @inlinable
    func manualSubmit(_ value: Value, for key: Key, clock: Unmanaged<ManualLimiterClock>) throws(LimiterError)
        -> LimiterDecision
    {
        // `lock` taken directly rather than through `withLock`: the hot path
        // of every limiter on a manual clock. Nothing between lock and unlock
        // throws.
        pthread_mutex_lock(mutex)
        let now = clock._withUnsafeGuaranteedRef { $0.nowNanoseconds }
        let token = slots.insert(key: key, value: value)
        coreDecision = sluice_decision_t()
        let rc = key.withCoreKey { sluice_limiter_submit(handle, $0, token, now, &coreDecision) }
        if coreEventCount != 0 { processCoreEvents(submitting: token) }
        let result = settle(token, rc: rc, decision: coreDecision, key: key, now: now)
        let mustDrain = claimDrain()
        pthread_mutex_unlock(mutex)
        if mustDrain { drain() }
        return try result.get()
    }

    @inlinable
    func loopSubmit(_ value: Value, for key: Key) throws(LimiterError) -> LimiterDecision {
        // With combine (serialised by `serial`), the token is recorded as its
        // key's newest pending value, and as the successor of the previous
        // one, *before* the core sees it: the loop may report the superseded
        // value before this thread learns the decision.
        let coreKey = serial == nil ? nil : CoreKey(key: key)
        let (token, previous) = lock.withLock { () -> (UInt64, UInt64?) in
            let token = slots.insert(key: key, value: value)
            guard let coreKey else { return (token, nil) }
            var previous = newestPending.updateValue(token, forKey: coreKey)
            // A previous value already reported cannot be superseded.
            if let older = previous, !slots.contains(older) { previous = nil }
            if let previous { successor[previous] = token }
            return (token, previous)
        }
        var decision = sluice_decision_t()
        let rc = key.withCoreKey { sluice_mt_submit(handle, $0, token, &decision) }
        let (result, mustDrain) = lock.withLock { () -> (Result<LimiterDecision, LimiterError>, Bool) in
            if let coreKey, rc < 0 || decision.kind != SLUICE_SCHEDULED {
                // Not pending, so it superseded nothing: undo the records
                // (unless the loop already delivered this token's event,
                // which removed them).
                if newestPending[coreKey] == token {
                    if let previous, slots.contains(previous) {
                        newestPending[coreKey] = previous
                    } else {
                        newestPending.removeValue(forKey: coreKey)
                    }
                }
                if let previous, successor[previous] == token { successor.removeValue(forKey: previous) }
            }
            let result = settleLoop(token, rc: rc, decision: decision)
            return (result, claimDrain())
        }
        if mustDrain { drain() }
        return try result.get()
    }

    /// With the lock held: acts on a loop submit's outcome. The loop reports
    /// an emitted token, and a dropped one when the delivery observes drops,
    /// through its callback, in the key's order (it may have done so
    /// already): the value is left to that event.
    @inlinable
    func settleLoop(_ token: UInt64, rc: Int32, decision: sluice_decision_t) -> Result<LimiterDecision, LimiterError> {
        if rc < 0 {
            _ = slots.remove(token)  // not taken: released here
            return .failure(LimiterError(rawValue: rc))
        }
        switch decision.kind {
        case SLUICE_EMITTED:
            return .success(.emitted)
        case SLUICE_SCHEDULED:
            return .success(.scheduled(at: LimiterInstant(nanoseconds: decision.at)))
        default:
            if !observesDrops { _ = slots.remove(token) }  // not reported by the loop: released now
            return .success(.dropped(retryAt: LimiterInstant(nanoseconds: decision.at)))
        }
    }

    /// With the lock held: acts on a submit's outcome.
    @inlinable
    func settle(
        _ token: UInt64, rc: Int32, decision: sluice_decision_t, key: Key, now: UInt64
    ) -> Result<LimiterDecision, LimiterError> {
        if rc < 0 {
            _ = slots.remove(token)  // not taken: released here
            return .failure(LimiterError(rawValue: rc))
        }
        switch decision.kind {
        case SLUICE_EMITTED:
            let entry = slots.remove(token)
            outbox.append(Event(kind: .emitted, key: entry.key, value: entry.value, at: .init(nanoseconds: now)))
            return .success(.emitted)
        case SLUICE_SCHEDULED:
            return .success(.scheduled(at: LimiterInstant(nanoseconds: decision.at)))
        default:
            let entry = slots.remove(token)
            if observesDrops {
                outbox.append(Event(kind: .dropped, key: entry.key, value: entry.value, at: .init(nanoseconds: now)))
            }
            return .success(.dropped(retryAt: LimiterInstant(nanoseconds: decision.at)))
        }
    }

    /// What ``keyOperation(_:_:)`` does.
    enum KeyOperation {
        case flush, cancel, pending
    }

    /// Runs flush, cancel or pending on a key.
    func keyOperation(_ key: Key, _ operation: KeyOperation) throws(LimiterError) -> Bool {
        let rc: Int32
        let mustDrain: Bool
        if let clock {
            (rc, mustDrain) = lock.withLock {
                let now = clock.nowNanoseconds
                let rc = key.withCoreKey { cKey in
                    switch operation {
                    case .flush: sluice_limiter_flush(handle, cKey, now)
                    case .cancel: sluice_limiter_cancel(handle, cKey, now)
                    case .pending: sluice_limiter_pending(handle, cKey, now)
                    }
                }
                processCoreEvents(submitting: nil)
                return (rc, claimDrain())
            }
        } else {
            func call() -> Int32 {
                if operation == .cancel, serial != nil {
                    lock.withLock {
                        if let token = newestPending[CoreKey(key: key)] { cancelledTokens.insert(token) }
                    }
                }
                return key.withCoreKey { cKey in
                    switch operation {
                    case .flush: sluice_mt_flush(handle, cKey)
                    case .cancel: sluice_mt_cancel(handle, cKey)
                    case .pending: sluice_mt_pending(handle, cKey)
                    }
                }
            }
            rc = if let serial { serial.lock.withLock { call() } } else { call() }
            mustDrain = lock.withLock { claimDrain() }
        }
        if mustDrain { drain() }
        return try LimiterError.check(rc) == 1
    }

    func close(drain drainValues: Bool) throws(LimiterError) {
        let mode = drainValues ? SLUICE_CLOSE_DRAIN : SLUICE_CLOSE_DISCARD
        let rc: Int32
        let mustDrain: Bool
        if let clock {
            (rc, mustDrain) = lock.withLock {
                let rc = sluice_limiter_close(handle, clock.nowNanoseconds, mode)
                processCoreEvents(submitting: nil)
                if rc == 0 { closed = true }
                return (rc, claimDrain())
            }
        } else {
            rc = sluice_mt_close(handle, mode)
            mustDrain = lock.withLock {
                if rc == 0 { closed = true }
                return claimDrain()
            }
        }
        if mustDrain { drain() }
        try LimiterError.check(rc)
    }

    /// Waits until a closed limiter has delivered everything (every value
    /// it held has been reported, and the delivery finished).
    func waitUntilFinished() async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let done = lock.withLock {
                if finished { return true }
                finishWaiters.append(continuation)
                return false
            }
            if done { continuation.resume() }
        }
    }

    /// Called by ``Limiter``'s `deinit`: closes with discard if still open
    /// (pending values are released), frees a loop limiter, and finishes the
    /// delivery.
    func shutdown() {
        if isManual {
            do {
                try close(drain: false)
            } catch {
                // Already closed.
            }
            return
        }
        let insideOwnCallback = lock.withLock { () -> Bool in
            guard let thread = callbackThread else { return false }
            return pthread_equal(thread, pthread_self()) != 0
        }
        if insideOwnCallback {
            // The limiter is being released from inside its own delivery on
            // the loop thread: free it from another thread, which waits for
            // this callback to return (a free from inside a callback would be
            // finished later by the loop, after this object could be gone).
            DispatchQueue.global().async { self.freeLoopLimiter() }
        } else {
            freeLoopLimiter()
        }
    }

    /// Loop engine: frees the C limiter (which discards and reports what is
    /// still pending, on this thread), then releases the C side's reference.
    func freeLoopLimiter() {
        lock.withLock { closed = true }
        sluice_mt_free(handle)
        Unmanaged.passUnretained(self as CoreEventTarget).release()
        let mustDrain = lock.withLock { claimDrain() }
        if mustDrain { drain() }
    }

    var isClosed: Bool {
        lock.withLock { closed }
    }

    /// Counters of the core.
    func stats() -> sluice_stats_t {
        if isManual {
            return lock.withLock {
                var stats = sluice_stats_t()
                _ = sluice_limiter_stats(handle, &stats)
                return stats
            }
        }
        var stats = sluice_mt_stats_t()
        _ = sluice_mt_stats(handle, &stats)
        return stats.core
    }

    /// Values held by the Swift side (pending values).
    var heldValues: Int {
        lock.withLock { slots.count }
    }

    /// Runs the core's invariant checker (tests; manual engine only).
    func checkInvariants() throws(LimiterError) {
        guard isManual else { return }
        let rc = lock.withLock { sluice_limiter_check(handle) }
        try LimiterError.check(rc)
    }

    // MARK: - ManualClockClient (manual engine)

    var nextDeadline: UInt64? {
        let deadline = lock.withLock { sluice_limiter_next_deadline(handle) }
        return deadline == .max ? nil : deadline
    }

    func fire(through now: UInt64) {
        if let handlers {
            handlers.fire(self, now)
        } else {
            fireSpecialized(through: now)
        }
    }

    @inlinable
    func fireSpecialized(through now: UInt64) {
        let mustDrain = lock.withLock {
            _ = sluice_limiter_advance(handle, now, 0)
            processCoreEvents(submitting: nil)
            return claimDrain()
        }
        if mustDrain { drain() }
    }

    // MARK: - Events

    /// With the lock held: handles the events the manual engine's last core
    /// call buffered, in order. During a submit (`submitting` is its token),
    /// a DROP of another token is a value superseded by the submitted one,
    /// which `combine` folds into it.
    @inlinable @inline(__always)
    func processCoreEvents(submitting: UInt64?) {
        // Handling an event never reports another (combine and a value's
        // deinit must not call the limiter), so the buffer is stable here:
        // its base and count are read once.
        let events = coreEvents
        let count = coreEventCount
        var i = 0
        if let combine, let newer = submitting {
            while i < count {
                let event = events[i]
                i += 1
                if event.kind == SLUICE_EVENT_DROP, newer != event.token {
                    let older = slots.remove(event.token)
                    slots.update(newer) { combine(older.value, $0) }
                    continue
                }
                record(event.kind, token: event.token, at: event.at)
            }
        } else {
            // Nothing to fold (the common case): a tight loop.
            while i < count {
                let event = events[i]
                i += 1
                record(event.kind, token: event.token, at: event.at)
            }
        }
        coreEventCount = 0
    }

    override func loopEvent(_ event: UnsafePointer<sluice_event_t>) {
        handleLoopEvent(event)
    }

    /// The entry points specialized for this Key and Value; call from
    /// `@inlinable` code so that the closures are specialized too.
    @inlinable
    static func makeHandlers() -> SpecializedHandlers {
        SpecializedHandlers(
            loopEvent: { target, event in
                unsafeDowncast(target, to: LimiterStorage<Key, Value>.self).handleLoopEvent(event)
            },
            fire: { target, now in
                unsafeDowncast(target, to: LimiterStorage<Key, Value>.self).fireSpecialized(through: now)
            })
    }

    @inlinable
    func handleLoopEvent(_ event: UnsafePointer<sluice_event_t>) {
        let mustDrain = lock.withLock {
            let token = event.pointee.token
            callbackThread = pthread_self()
            if serial != nil {
                let key = CoreKey(event.pointee.key)
                let wasCancelled = cancelledTokens.remove(token) != nil
                let newer = successor.removeValue(forKey: token)
                if newestPending[key] == token { newestPending.removeValue(forKey: key) }
                if event.pointee.kind == SLUICE_EVENT_DROP, !wasCancelled, let combine, let newer,
                   slots.contains(newer)
                {
                    // Superseded by `newer` (events of one key come in order,
                    // so `newer` is still held): fold it in.
                    let older = slots.remove(token)
                    slots.update(newer) { combine(older.value, $0) }
                    return claimDrain()
                }
            }
            record(event.pointee.kind, token: token, at: event.pointee.at)
            return claimDrain()
        }
        if mustDrain { drain() }
        lock.withLock { callbackThread = nil }
    }

    /// With the lock held: moves a reported token's value to the outbox, or
    /// releases it (a value not handed to the outbox is released here, at
    /// the moment the core gave it up).
    @inlinable
    func record(_ kind: sluice_event_kind_t, token: UInt64, at: UInt64) {
        let entry = slots.remove(token)
        let at = LimiterInstant(nanoseconds: at)
        switch kind {
        case SLUICE_EVENT_EMIT:
            outbox.append(Event(kind: .emitted, key: entry.key, value: entry.value, at: at))
        case SLUICE_EVENT_DROP:
            if observesDrops { outbox.append(Event(kind: .dropped, key: entry.key, value: entry.value, at: at)) }
        default:
            if observesDrops { outbox.append(Event(kind: .discarded, key: entry.key, value: entry.value, at: at)) }
        }
    }

    // MARK: - Delivery

    /// With the lock held: whether the caller must drain the outbox now
    /// (there is work and nobody else is draining).
    @inlinable
    func claimDrain() -> Bool {
        guard !draining, !outbox.isEmpty || (closed && !finished && slots.count == 0) else { return false }
        draining = true
        return true
    }

    @usableFromInline
    enum Next {
        case deliver(Event)
        case finish([CheckedContinuation<Void, Never>])
        case done
    }

    /// Delivers the outbox in order, without the lock, until it is empty;
    /// finishes the delivery once a closed limiter holds nothing more.
    @inlinable
    func drain() {
        while true {
            let next = lock.withLock { () -> Next in
                if let event = outbox.popFirst() { return .deliver(event) }
                draining = false
                if closed && !finished && slots.count == 0 {
                    finished = true
                    defer { finishWaiters = [] }
                    return .finish(finishWaiters)
                }
                return .done
            }
            switch next {
            case let .deliver(event):
                delivery.deliver(event)
            case let .finish(waiters):
                delivery.finish()
                for waiter in waiters { waiter.resume() }
                return
            case .done:
                return
            }
        }
    }
}
