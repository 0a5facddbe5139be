import CSluice
import Synchronization

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// Everything a ``Limiter`` holds, split by concern:
///
/// - **state**: this class — the engine (``LimiterEngine``), `closed`, and
///   `combine`;
/// - **value slots**: ``SlotTable``, the Swift values by token (the core only
///   sees tokens);
/// - **delivery**: ``LimiterOutbox`` (events waiting, in order) and
///   ``LimiterDelivery`` (where they go).
///
/// The storage's mode (``mode``, a ``StorageMode`` set once in init) names
/// in one value the engine and how it is called, where the values are
/// (slots or compact) and what a drop does; ``compact``, ``emitOnly``,
/// ``observesDrops`` and ``quietDrops`` read it.
///
/// One flow for every engine, in one of two lock disciplines the engine
/// chooses (``LimiterEngine/runsUnderCallerLock``):
///
/// - an engine whose events arrive inside its calls (manual) runs under
///   `lock`: a submit stores the value, calls the core, records the events
///   and acts on the decision in one critical section;
/// - a thread-safe engine (loop) is called without `lock` (its thread
///   records events taking `lock`): a submit takes `lock` to store the value
///   (before the core can report its token; a compact value is counted in
///   ``loopHeld`` instead, without `lock`), calls the engine, then takes
///   `lock` again to act on the decision — on a loop engine only when the
///   value is left to the submit (a failed call, a drop without a report):
///   otherwise an event reports it, and the loop thread that records the
///   event delivers it.
/// The engine reports every emission through ``record(_:)``
/// (`reportImmediate`), in each key's order, so the decision of an emitted
/// value is informational; a value dropped at once is released by the
/// submit itself, unless the delivery observes drops (then its DROP event,
/// in order, releases it).
///
/// `combine`: a DROP event naming a successor (the core's `has_successor`)
/// is a value superseded by that newer one, still held: the older value is
/// folded into it. No Swift bookkeeping, no global lock: calls stay sharded.
///
/// Compact mode (``compact``): for integer keys that the built-in integer
/// types lend (``LimiterKey/_sluiceIntegerIdentity``), trivially copyable
/// values of at most 8 bytes and no `combine`, the token is the value's
/// bits and an event's key is rebuilt from the key the core hands with it:
/// no slot is taken or freed (a submit that supersedes a value touches no
/// memory of the superseded one). `slots` then holds no entry, and its
/// `count` is the number of values held, kept as the slot table keeps it:
/// +1 per value handed to the core, −1 when its fate is recorded. On a loop
/// (``loopCounts``) the count is ``loopHeld`` instead, an atomic counter
/// that a submit raises without the lock: the submit then takes no lock of
/// its own around the core's call, whose shard lock orders the count
/// before the loop thread can report the value.
///
/// Emit-only (``emitOnly``): a compact limiter on a manual clock whose
/// drops nobody observes creates its core with `emit_only`: the core reports
/// emissions only, and a superseded, cancelled or discarded value is only
/// counted in the core's statistics (a compact value owns nothing, so it
/// needs no release). The submit path then runs no callback for a value it
/// supersedes. `slots.count` is not kept: the values held are the core's
/// pending tokens (``heldValues`` reads them), and a closed limiter holds
/// nothing once its core is closed (``coreClosed``).
///
/// Concurrency: every stored `var` is guarded by `lock`. Deliveries run
/// outside the lock, one thread at a time, in outbox order.
@usableFromInline
final class LimiterStorage<Key: LimiterKey, Value: Sendable>: @unchecked Sendable {
    @usableFromInline typealias Event = LimiterEvent<Key, Value>

    @usableFromInline let lock = PosixLock(biased: true)
    /// Set once, right after init (the engine's sink refers to this object).
    /// Keeps the engine alive; the calls that depend on the engine's kind go
    /// through ``mode``.
    @exclusivity(unchecked) @usableFromInline var engine: (any LimiterEngine)!
    /// How this storage runs (see ``StorageMode``). Set once, in init.
    @exclusivity(unchecked) @usableFromInline var mode = StorageMode.unset
    @usableFromInline let combine: (@Sendable (Value, Value) -> Value)?
    /// The thread running `combine`, or 0: a call from inside `combine` is
    /// detected instead of deadlocking.
    @usableFromInline let combiningThread = Atomic<UInt>(0)
    /// The core was closed (emit-only: it holds no value any more). Guarded
    /// by `lock`; set in the critical section of the core's close.
    @exclusivity(unchecked) @usableFromInline var coreClosed = false
    /// The calls of one group of a batch on a manual clock, or nil before
    /// the first (see `batchCallBuffer()`). Guarded by `lock`.
    @exclusivity(unchecked) @usableFromInline var batchCalls: UnsafeMutablePointer<sluice_call_t>? = nil

    /// The values held by a compact limiter on a loop (``loopCounts``):
    /// raised once before the core's call (no lock), lowered when the
    /// value's fate is recorded or when the core did not take it.
    @usableFromInline let loopHeld = Atomic<Int>(0)
    /// `closed`, readable without the lock: set with it (under the lock),
    /// sequentially consistent with ``loopHeld``'s last decrement (see
    /// ``countOutOnLoop()``).
    @usableFromInline let closedFlag = Atomic<Bool>(false)

    // Guarded by `lock`.
    @exclusivity(unchecked) @usableFromInline var slots = SlotTable<Key, Value>()
    @exclusivity(unchecked) @usableFromInline var outbox = LimiterOutbox<Event>()
    @exclusivity(unchecked) @usableFromInline var closed = false

    let policy: LimiterPolicy
    /// The plans of a rate limiter (those given, or for one rate policy a
    /// plan "default" of one quota "default"); `nil` for the other
    /// policies, which have none.
    let planState: PlanState?
    /// Last: its size is not known at compile time (a resilient
    /// `AsyncStream.Continuation`), which would make every later field's
    /// offset a run-time value.
    @usableFromInline let delivery: LimiterDelivery<Key, Value>

    /// Creates the storage and its engine.
    ///
    /// - Parameters:
    ///   - policy: the policy (with `plans`: the default plan's first quota,
    ///     ``PlanSetup/policy``).
    ///   - plans: the checked plans of a limiter of plans (`nil`: `policy`
    ///     alone). The core is then created with the table, as
    ///     ``RateLimiter`` creates it (``PlanSetup/configuring(_:_:)``).
    ///   - makeSink: makes the engine's sink for this storage; called
    ///     from `@inlinable` code so that its closures are specialized for Key
    ///     and Value (unspecialized generic code spends most of an event
    ///     looking up type metadata).
    init(
        policy: LimiterPolicy, plans: PlanSetup? = nil, scheduler: LimiterScheduler, maxKeys: Int?, tick: Duration?,
        shards: Int?, combine: (@Sendable (Value, Value) -> Value)?, delivery: LimiterDelivery<Key, Value>,
        seed: (UInt64, UInt64)?, makeSink: (LimiterStorage) -> EngineSink
    ) throws(LimiterError) {
        self.policy = policy
        self.delivery = delivery
        self.combine = combine
        if let plans {
            planState = PlanState(plans.directory)
        } else {
            planState = policy.isRate ? PlanState(PlanDirectory(single: policy)) : nil
        }
        let observesDrops = delivery.observesDrops
        var config: sluice_config_t
        do {
            config = try Self.coreConfig(policy: policy, maxKeys: maxKeys, tick: tick, seed: seed)
        } catch {
            throw LimiterError.explaining(error, policy: policy, maxKeys: maxKeys, tick: tick)
        }
        if combine != nil && config.policy.kind == SLUICE_THROTTLE {
            // With combine a window keeps the fold of its values in call
            // order, whichever value `pick` would keep: the core keeps the
            // newest token, which receives the fold.
            config.policy.pick = SLUICE_PICK_LATEST
        }
        var nshards: UInt32 = 0
        if let shards {
            guard shards >= 1, shards <= 1024 else { throw .invalidArgument }
            nshards = UInt32(shards)
        }
        let emitOnly = StorageMode.emitOnly(
            compactTypes: Self.compactTypes, combines: combine != nil, observesDrops: observesDrops)
        let engine: any LimiterEngine
        do {
            let setup = EngineSetup(
                config: config, reportImmediate: true, reportDrops: observesDrops, shards: nshards,
                sink: makeSink(self), callerLock: lock, emitOnly: emitOnly)
            if let plans {
                engine = try plans.configuring(config) { (config) throws(LimiterError) -> any LimiterEngine in
                    var setup = setup
                    setup.config = config
                    return try scheduler.makeEngine(setup)
                }
            } else {
                engine = try scheduler.makeEngine(setup)
            }
        } catch {
            throw LimiterError.explaining(error, policy: policy, maxKeys: maxKeys, tick: tick)
        }
        self.engine = engine
        mode = StorageMode(
            engine: engine, compactTypes: Self.compactTypes, combines: combine != nil, observesDrops: observesDrops)
        if case .manual(let state) = mode.kind, mode.drops == .quiet, SlotTable<Key, Value>.isTrivial {
            state.pointee.trivialSlots = slots.header  // the callback frees a quiet drop's slot
        }
    }

    deinit {
        batchCalls?.deallocate()  // trivial
    }

    /// Whether `Key` and `Value` allow compact mode: integer keys rebuilt
    /// from their identity, trivially copyable values of at most 8 bytes
    /// (a constant in specialized code).
    @inlinable
    static var compactTypes: Bool {
        Key._sluiceIntegerIdentity && _isPOD(Value.self) && MemoryLayout<Value>.size <= 8
            && MemoryLayout<Value>.alignment <= 8
    }

    /// Values travel in their tokens and keys in the core's events: no
    /// value slots (see the class comment). Folds to `false` in code
    /// specialized for types that do not allow it.
    @inlinable
    var compact: Bool { Self.compactTypes && mode.kind.compact }

    /// The core reports emissions only (see the class comment). Folds to
    /// `false` where ``compact`` does.
    @inlinable
    var emitOnly: Bool {
        guard Self.compactTypes, case .emitOnly = mode.kind else { return false }
        return true
    }

    /// Compact on a loop engine: the values held are counted in
    /// ``loopHeld`` (see the class comment). Folds to `false` where
    /// ``compact`` does.
    @inlinable
    var loopCounts: Bool {
        guard Self.compactTypes, case .loopCompact = mode.kind else { return false }
        return true
    }

    /// The manual engine's state, when the engine is a manual one (it runs
    /// under `lock`).
    @inlinable
    var manual: UnsafeMutablePointer<ManualEngineState>? {
        switch mode.kind {
        case .emitOnly(let state), .manualCompact(let state), .manual(let state): return state
        case .loopCompact, .loop, .external: return nil
        }
    }

    /// The delivery observes drops (``LimiterDelivery/observesDrops``).
    @inlinable
    var observesDrops: Bool { mode.drops == .observed }

    /// Neither `combine` nor ``observesDrops``: a DROP event only releases
    /// its value.
    @inlinable
    var quietDrops: Bool { mode.drops == .quiet }

    /// A compact token: the value's bytes, zero-padded.
    @inlinable @inline(__always)
    static func token(of value: Value) -> UInt64 {
        var bits: UInt64 = 0
        withUnsafeMutableBytes(of: &bits) { $0.storeBytes(of: value, as: Value.self) }
        return bits
    }

    /// The value of a compact token.
    @inlinable @inline(__always)
    static func value(of token: UInt64) -> Value {
        withUnsafeBytes(of: token) { $0.load(as: Value.self) }
    }

    /// With the lock held: keeps a value for the core and returns its token
    /// (compact: counts it). On a loop (``loopCounts``) also without it.
    @inlinable @inline(__always)
    func hold(_ key: Key, _ value: Value) -> UInt64 {
        if Self.compactTypes && emitOnly { return Self.token(of: value) }  // (emit-only is compact)
        if loopCounts {
            countInOnLoop(1)
            return Self.token(of: value)
        }
        if compact {
            slots.count &+= 1
            return Self.token(of: value)
        }
        return slots.insert(key: key, value: value)
    }

    /// With the lock held: releases a held token's value (compact: counts it out).
    @inlinable @inline(__always)
    func release(_ token: UInt64) {
        if compact {
            if emitOnly { return }
            countOut(1)
            return
        }
        slots.discard(token)
    }

    /// Counts in `n` values about to be handed to a loop engine's core
    /// (``loopCounts``), with or without the lock.
    @inlinable @inline(__always)
    func countInOnLoop(_ n: Int) {
        loopHeld.wrappingAdd(n, ordering: .relaxed)
    }

    /// Counts out one value of a compact limiter on a loop (``loopCounts``)
    /// that the core did not take or dropped without a report, without the
    /// lock; returns whether that may have finished a closed limiter (it
    /// left nothing held, and the limiter is closed), which the caller then
    /// claims under the lock. Sequentially consistent, as the closing
    /// thread's store of ``closedFlag`` and its read of ``loopHeld``
    /// (``holdsNothing``): either this call sees the limiter closed, or the
    /// closing thread sees this decrement. (On x86-64 the same
    /// instructions as relaxed ones.)
    @inlinable @inline(__always)
    func countOutOnLoop() -> Bool {
        let held = loopHeld.wrappingSubtract(1, ordering: .sequentiallyConsistent).oldValue
        if held < 1 { staleToken() }
        return held == 1 && closedFlag.load(ordering: .sequentiallyConsistent)
    }

    /// With the lock held: counts out `n` compact values (not emit-only).
    @inlinable @inline(__always)
    func countOut(_ n: Int) {
        if loopCounts {
            // Each was counted in before the core's call that took it, and
            // that call happened before its report: never below zero.
            if loopHeld.wrappingSubtract(n, ordering: .relaxed).oldValue < n { staleToken() }
            return
        }
        if slots.count < n { staleToken() }
        slots.count &-= n
    }

    /// With the lock held: takes the key and value of an event's token.
    @inlinable @inline(__always)
    func take(_ event: EngineEvent) -> (key: Key, value: Value) {
        if compact {
            if !emitOnly { countOut(1) }
            return (Key._sluiceKey(integerIdentity: event.key), Self.value(of: event.token))
        }
        return slots.remove(event.token)
    }

    /// The core configuration of a limiter (also used by ``RateLimiter``);
    /// errors without their explanation (see ``LimiterError/explaining(_:policy:maxKeys:tick:)``).
    static func coreConfig(
        policy: LimiterPolicy, maxKeys: Int?, tick: Duration?, seed: (UInt64, UInt64)?
    ) throws(LimiterError) -> sluice_config_t {
        var config = sluice_config_t()
        config.policy = try policy.cPolicy()
        if let maxKeys {
            // 0 is the core's "no cap": in Swift that is nil, and 0 is refused.
            guard maxKeys >= 1 else { throw .invalidArgument }
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
        return config
    }

    /// The sink of a storage, specialized where this is inlined.
    @inlinable
    static func makeSink(_ storage: LimiterStorage) -> EngineSink {
        EngineSink(
            record: { storage.record($0) }, recordHeld: { storage.recordLocked($0) },
            deliver: { storage.deliverIfNeeded() }, handle: { storage.handle($0) },
            handleMany: { storage.handleMany($0, count: $1) },
            recordManyHeld: { storage.recordManyLocked($0, count: $1) },
            claimDirect: { storage.claimDirectLocked() }, deliverDirect: { storage.deliverDirect($0, count: $1) },
            finishDirect: { storage.deliverOutbox() })
    }

    /// Runs an engine call: under `lock` when the engine runs under it
    /// (then also claiming the delivery in the same critical section),
    /// without it otherwise. Returns the call's result and whether the
    /// caller must deliver the outbox.
    @inlinable @inline(__always)
    func engineCall<R>(_ body: (any LimiterEngine) -> R) -> (R, mustDrain: Bool) {
        let engine = self.engine!
        if manual != nil {  // runs under `lock`
            lock.lock()
            let result = body(engine)
            let mustDrain = claimDrain()
            lock.unlock()
            return (result, mustDrain)
        }
        let result = body(engine)
        lock.lock()
        let mustDrain = claimDrain()
        lock.unlock()
        return (result, mustDrain)
    }

    // MARK: - Operations

    /// The current time of the engine's clock, in ns.
    var now: UInt64 { engine.now }  // an atomic read or the clock: no lock

    /// Stops a call made from inside `combine` (it would deadlock).
    @inlinable @inline(__always)
    func checkNotCombining() {
        if combine != nil, combiningThread.load(ordering: .relaxed) == currentThreadID() {
            preconditionFailure(
                "Sluice: `combine` called the limiter it folds values for; combine runs under the limiter's lock and must not call it"
            )
        }
    }

    /// Submits a value. An emit-only limiter's everyday call (the value
    /// kept, no event: ``submitEmitOnly(_:for:cost:_:)``) is inlined into
    /// the caller, a few dozen instructions around the core's, in few
    /// blocks (so that the inliner takes it in large callers too);
    /// everything else is out of line.
    @inlinable @inline(__always)
    func submit(_ value: Value, for key: Key, cost: UInt64) throws(LimiterError) -> sluice_decision_t {
        switch mode.kind {
        case .emitOnly(let state) where Self.compactTypes:
            return try submitEmitOnly(value, for: key, cost: cost, state)
        case .loopCompact(let loop), .loop(let loop):
            return try submitEngine(value, for: key, cost: cost, loop: loop)
        default:
            return try submitOther(value, for: key, cost: cost)
        }
    }

    /// ``submit(_:for:cost:)`` of a cost of 1, reduced to what
    /// ``Limiter/submit(_:for:)`` reports: returned in two registers, where
    /// a whole `sluice_decision_t` is returned in a buffer on the caller's
    /// stack, which would cost the caller (into which this is inlined) a
    /// stack protector.
    @inlinable @inline(__always)
    func submitBrief(_ value: Value, for key: Key) throws(LimiterError) -> DecisionBrief {
        if case .emitOnly(let state) = mode.kind, Self.compactTypes {
            let decision = try submitEmitOnly(value, for: key, cost: 1, state)
            return DecisionBrief(kind: decision.kind, at: decision.at)
        }
        return try submitBriefOutOfLine(value, for: key)
    }

    /// ``submitBrief(_:for:)`` for every limiter that is not emit-only.
    @inlinable @inline(never)
    func submitBriefOutOfLine(_ value: Value, for key: Key) throws(LimiterError) -> DecisionBrief {
        let decision: sluice_decision_t
        switch mode.kind {
        case .loopCompact(let loop), .loop(let loop):
            decision = try submitEngine(value, for: key, cost: 1, loop: loop)
        default:
            decision = try submitOther(value, for: key, cost: 1)
        }
        return DecisionBrief(kind: decision.kind, at: decision.at)
    }

    /// ``submit(_:for:cost:)`` for every limiter that is not emit-only.
    @inlinable @inline(never)
    func submitOther(_ value: Value, for key: Key, cost: UInt64) throws(LimiterError) -> sluice_decision_t {
        // (A loop is taken by submit(_:for:cost:) already.)
        switch mode.kind {
        case .manual(let state), .manualCompact(let state), .emitOnly(let state):
            return try submitManual(value, for: key, cost: cost, state)
        case .loopCompact(let loop), .loop(let loop):
            return try submitEngine(value, for: key, cost: cost, loop: loop)
        case .external:
            return try submitEngine(value, for: key, cost: cost, loop: nil)
        }
    }

    /// ``submitManual(_:for:cost:_:)`` for an emit-only limiter (compact,
    /// no `combine`, nobody observing drops), the everyday call inline: the
    /// value is its token (nothing to hold or count), and a call that keeps
    /// it and reports no event records and claims nothing. Anything else
    /// (events, an emission or drop at once, a failure, a closed limiter)
    /// is finished out of line by ``finishSubmit(_:token:rc:kind:now:_:)``.
    @inlinable @inline(__always)
    func submitEmitOnly(
        _ value: Value, for key: Key, cost: UInt64, _ engine: UnsafeMutablePointer<ManualEngineState>
    ) throws(LimiterError) -> sluice_decision_t {
        let token = Self.token(of: value)
        let byBias = lock.lockTellingHow()
        guard let core = engine.pointee.core else { try finishSubmitClosed(key, token: token, engine) }
        let now = engine.pointee.clock._withUnsafeGuaranteedRef { $0.nowNanoseconds }
        engine.pointee.fast = true
        engine.pointee.collecting = true
        let rc = key.withCoreKey { core.submit($0, token: token, cost: cost, now: now, into: &engine.pointee.decision) }
        engine.pointee.fast = false
        engine.pointee.collecting = false
        let decision = engine.pointee.decision  // (read under the lock, which the core's writes happened under)
        // count == 0 && rc == 0 && kind == SLUICE_SCHEDULED, in one test
        if (engine.pointee.count | Int(rc) | Int(decision.kind.rawValue ^ SLUICE_SCHEDULED.rawValue)) == 0 {
            lock.unlock(byBias: byBias)
            return decision
        }
        try finishSubmit(key, token: token, rc: rc, kind: decision.kind, now: now, engine)
        return decision
    }

    /// The rest of ``submitEmitOnly(_:for:cost:_:)``, with the lock held
    /// (released here): ``finishSubmitLocked(_:token:rc:kind:now:_:)``
    /// unless the core is gone, then the delivery. Throws for a negative
    /// `rc`. (The submit's errors are thrown here and in
    /// ``finishSubmitClosed(_:token:_:)``, out of line: a throw keeps the
    /// error on the thrower's stack, which would cost the submit's caller
    /// a stack protector.)
    @inlinable @inline(never)
    func finishSubmit(
        _ key: Key, token: UInt64, rc: Int32, kind: sluice_decision_kind_t, now: UInt64,
        _ engine: UnsafeMutablePointer<ManualEngineState>
    ) throws(LimiterError) {
        if engine.pointee.core != nil { finishSubmitLocked(key, token: token, rc: rc, kind: kind, now: now, engine) }
        let mustDrain = claimDrain()
        lock.unlock()
        if mustDrain { deliverOutbox() }
        if rc < 0 { throw LimiterError(rawValue: rc) }
    }

    /// ``submitEmitOnly(_:for:cost:_:)`` on a shut-down engine, with the
    /// lock held (released here): the call throws ``LimiterError/closed``
    /// (an emit-only limiter's value is its token: nothing was held for it).
    @inlinable @inline(never)
    func finishSubmitClosed(
        _ key: Key, token: UInt64, _ engine: UnsafeMutablePointer<ManualEngineState>
    ) throws(LimiterError) -> Never {
        try finishSubmit(key, token: token, rc: LimiterError.closed.rawValue, kind: SLUICE_DROPPED, now: 0, engine)
        preconditionFailure("finishSubmit returned for a closed limiter")
    }

    /// ``submit(_:for:cost:)`` on a loop engine (`loop`) or an external one
    /// (`nil`, called through `engine`).
    @inlinable @inline(never)
    func submitEngine(
        _ value: Value, for key: Key, cost: UInt64, loop: Unmanaged<LoopEngine>?
    ) throws(LimiterError) -> sluice_decision_t {
        checkNotCombining()
        var decision = sluice_decision_t()
        let rc: Int32
        let mustDrain: Bool
        let token: UInt64
        if loopCounts {
            token = hold(key, value)  // counted without the lock (see ``loopHeld``)
        } else {
            lock.lock()
            token = hold(key, value)
            lock.unlock()
        }
        if let loop {
            rc = loop._withUnsafeGuaranteedRef { engine in
                key.withCoreKey { engine.submit($0, token: token, cost: cost, into: &decision) }
            }
            if rc == 0 && (decision.kind != SLUICE_DROPPED || observesDrops) {
                // The token is the loop's now (an event will report it, and
                // whoever records an event claims its delivery): nothing to
                // release, nothing to claim.
                return decision
            }
            if loopCounts {
                // Not taken, or dropped without a report: counted out
                // without the lock, unless that leaves a closed limiter
                // holding nothing (its delivery may then finish: claimed
                // under the lock, as after a recorded event). Otherwise a
                // value still held has an event to come, whose recording
                // claims, or the closing thread claims after this.
                if countOutOnLoop() {
                    lock.lock()
                    mustDrain = claimDrain()
                    lock.unlock()
                    if mustDrain { deliverOutbox() }
                }
                try LimiterError.check(rc)
                return decision
            }
        } else {
            let engine = self.engine!
            rc = key.withCoreKey { engine.submit($0, token: token, cost: cost, into: &decision) }
        }
        lock.lock()
        if rc < 0 || (decision.kind == SLUICE_DROPPED && !observesDrops) {
            // Not taken, or dropped without a report: released here.
            release(token)
        }
        mustDrain = claimDrain()
        lock.unlock()
        if mustDrain { deliverOutbox() }
        try LimiterError.check(rc)
        return decision
    }

    /// ``submit(_:for:cost:)`` on a manual engine: the hot path of a limiter
    /// on a ``ManualLimiterClock``, one specialized critical section. The
    /// core is called directly; its events are collected by the engine's
    /// callback and recorded here (a superseded value that nobody observes
    /// is released on the spot), then the immediate decision is reported as
    /// `ManualEngine.submit` reports it (reportImmediate, and reportDrops =
    /// observesDrops).
    @inlinable @inline(__always)
    func submitManual(
        _ value: Value, for key: Key, cost: UInt64, _ engine: UnsafeMutablePointer<ManualEngineState>
    ) throws(LimiterError) -> sluice_decision_t {
        if combine != nil { checkNotCombining() }
        var decision = sluice_decision_t()
        let rc: Int32
        var mustDrain = false
        let byBias = lock.lockTellingHow()
        let token = hold(key, value)
        if let core = engine.pointee.core {
            let now = engine.pointee.clock._withUnsafeGuaranteedRef { $0.nowNanoseconds }
            engine.pointee.fast = true
            engine.pointee.collecting = true
            rc = key.withCoreKey { core.submit($0, token: token, cost: cost, now: now, into: &decision) }
            engine.pointee.fast = false
            engine.pointee.collecting = false
            // count != 0 || rc != 0 || kind != SLUICE_SCHEDULED, in one test
            if (engine.pointee.count | Int(rc) | Int(decision.kind.rawValue ^ SLUICE_SCHEDULED.rawValue)) != 0 {
                // Events (due timers, superseded values reported), an
                // emission or a drop at once, or a failure: out of line, so
                // that the everyday call (a value kept, nothing else) keeps
                // its few values in registers.
                finishSubmitLocked(key, token: token, rc: rc, kind: decision.kind, now: now, engine)
                mustDrain = claimDrain()
            }
            // Otherwise this call recorded nothing: no delivery to claim
            // (whoever records an event tries to claim its delivery).
        } else {
            rc = LimiterError.closed.rawValue
            release(token)
            mustDrain = claimDrain()
        }
        lock.unlock(byBias: byBias)
        if mustDrain { deliverOutbox() }
        if rc < 0 { throw LimiterError(rawValue: rc) }
        return decision
    }

    /// The rest of ``submitManual(_:for:cost:_:)`` under the lock, when the
    /// core reported events or did not keep the value: records the events
    /// the callback collected (a superseded value that nobody observes is
    /// released on the spot), then the call's own emission or reported
    /// drop, and releases a value dropped unobserved or not taken.
    @inlinable @inline(never)
    func finishSubmitLocked(
        _ key: Key, token: UInt64, rc: Int32, kind: sluice_decision_kind_t, now: UInt64,
        _ engine: UnsafeMutablePointer<ManualEngineState>
    ) {
        let count = engine.pointee.count
        if count != 0 {
            let events = engine.pointee.events
            let quietDrops = self.quietDrops  // (the mode read once)
            for i in 0..<count {
                let event = events[i]
                if quietDrops && event.kind == SLUICE_EVENT_DROP {
                    release(event.token)  // superseded or dropped, unobserved: released here
                } else {
                    recordLocked(event)
                }
            }
            engine.pointee.count = 0
        }
        guard rc >= 0 else {
            release(token)  // not taken
            return
        }
        // compact: the key of the immediate event
        let keyBits: UInt64 = compact ? key.withCoreKey { $0.u64 } : 0
        if kind == SLUICE_EMITTED {
            recordLocked(EngineEvent(kind: SLUICE_EVENT_EMIT, token: token, at: now, successor: nil, key: keyBits))
        } else if kind == SLUICE_DROPPED {
            if observesDrops {
                recordLocked(EngineEvent(kind: SLUICE_EVENT_DROP, token: token, at: now, successor: nil, key: keyBits))
            } else {
                release(token)  // dropped without a report: released here
            }
        }
    }

    /// What ``keyOperation(_:_:)`` does.
    enum KeyOperation {
        case flush, cancel, pending
    }

    /// Runs flush, cancel or pending on a key.
    func keyOperation(_ key: Key, _ operation: KeyOperation) throws(LimiterError) -> Bool {
        checkNotCombining()
        let (rc, mustDrain) = engineCall { engine in
            key.withCoreKey { cKey in
                switch operation {
                case .flush: engine.flush(cKey)
                case .cancel: engine.cancel(cKey)
                case .pending: engine.pending(cKey)
                }
            }
        }
        if mustDrain { deliverOutbox() }
        return try LimiterError.check(rc) == 1
    }

    /// Reads a rate key's quota.
    func quota(_ key: Key, cost: UInt64) throws(LimiterError) -> sluice_quota_t {
        checkNotCombining()
        let ((rc, quota), mustDrain) = engineCall { engine in
            var quota = sluice_quota_t()
            let rc = key.withCoreKey { engine.quota($0, cost: cost, into: &quota) }
            return (rc, quota)
        }
        if mustDrain { deliverOutbox() }
        try LimiterError.check(rc)
        return quota
    }

    // MARK: - Plans

    /// Submits a value under the plan of index `plan` (resolved by the
    /// caller, which holds the plan lock shared: see ``PlanState``), as
    /// ``submitEngine(_:for:cost:loop:)`` submits it on any engine: the
    /// value held before the core call, released here when not taken or
    /// dropped unobserved; otherwise the engine reports it (an EMIT, or an
    /// observed DROP) like any immediate decision.
    ///
    /// Nothing is delivered here: the caller delivers when `mustDrain`,
    /// after giving up the plan lock (a delivery runs the user's code,
    /// which may call the limiter, even ``Limiter/update(plans:)``).
    ///
    /// - Returns: the core's result (0 or a negative `SLUICE_E*`), and
    ///   whether the caller must deliver the outbox.
    func submitPlan(
        _ value: Value, for key: Key, cost: UInt64, plan: UInt32, into decision: inout sluice_decision_t,
        detail: inout sluice_plan_detail_t
    ) -> (rc: Int32, mustDrain: Bool) {
        checkNotCombining()
        let engine = self.engine!
        let underLock = manual != nil  // a manual engine runs under `lock`
        lock.lock()
        let token = hold(key, value)
        if !underLock { lock.unlock() }
        let rc = key.withCoreKey {
            engine.submitPlan($0, token: token, cost: cost, plan: plan, into: &decision, detail: &detail)
        }
        let reported = rc == 0 && (decision.kind != SLUICE_DROPPED || observesDrops)
        if !underLock {
            // On a loop the token is the loop's once reported (whoever
            // records its event claims the delivery): nothing to do here.
            if reported, case .loop = mode.kind { return (rc, false) }
            if reported, case .loopCompact = mode.kind { return (rc, false) }
            lock.lock()
        }
        if !reported { release(token) }  // not taken, or dropped without a report
        let mustDrain = claimDrain()
        lock.unlock()
        return (rc, mustDrain)
    }

    /// Reads a rate key's quota under the plan of index `plan` (the
    /// caller holds the plan lock shared, and delivers when `mustDrain`
    /// after giving it up, as after ``submitPlan(_:for:cost:plan:into:detail:)``).
    func quotaPlan(
        _ key: Key, cost: UInt64, plan: UInt32, into quota: inout sluice_quota_t, detail: inout sluice_plan_detail_t
    ) -> (rc: Int32, mustDrain: Bool) {
        checkNotCombining()
        return engineCall { engine in
            key.withCoreKey { engine.quotaPlan($0, cost: cost, plan: plan, into: &quota, detail: &detail) }
        }
    }

    /// Replaces the core's plans (the caller holds the plan lock
    /// exclusive, and delivers when `mustDrain` after giving it up).
    func setPlans(_ plans: UnsafePointer<sluice_plans_t>) -> (rc: Int32, mustDrain: Bool) {
        checkNotCombining()
        return engineCall { $0.setPlans(plans) }
    }

    /// The core's index of the plan `name` (tests: Swift keeps its own table).
    func coreIndex(ofPlan name: String) throws(LimiterError) -> Int {
        var index: UInt32 = 0
        let (rc, mustDrain) = engineCall { $0.planIndex(name, into: &index) }
        if mustDrain { deliverOutbox() }
        try LimiterError.check(rc)
        return Int(index)
    }

    func close(drain drainValues: Bool) throws(LimiterError) {
        checkNotCombining()
        let (rc, eventsToDeliver) = engineCall {
            closeCore($0, drainValues ? SLUICE_CLOSE_DRAIN : SLUICE_CLOSE_DISCARD)
        }
        if eventsToDeliver { deliverOutbox() }
        let mustDrain = lock.withLock {
            if rc == 0 {
                closed = true
                closedFlag.store(true, ordering: .sequentiallyConsistent)
            }
            return claimDrain()
        }
        if mustDrain { deliverOutbox() }
        try LimiterError.check(rc)
    }

    /// Waits until a closed limiter has delivered everything (every value
    /// it held has been reported, and the delivery finished).
    func waitUntilFinished() async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let done = lock.withLock {
                if outbox.finished { return true }
                outbox.finishWaiters.append(continuation)
                return false
            }
            if done { continuation.resume() }
        }
    }

    /// Called by the owner's `deinit`: closes with discard if still open
    /// (pending values are released), frees the engine's C object, and
    /// finishes the delivery.
    func shutdown() {
        let wasOpen = lock.withLock { () -> Bool in
            defer {
                closed = true
                closedFlag.store(true, ordering: .sequentiallyConsistent)
            }
            return !closed
        }
        if wasOpen, engineCall({ closeCore($0, SLUICE_CLOSE_DISCARD) }).mustDrain { deliverOutbox() }
        if engineCall({ engine in
            engine.shutdown()
            if emitOnly { coreClosed = true }  // no core, no value held
        }).mustDrain {
            deliverOutbox()
        }
        deliverIfNeeded()
    }

    /// Closes the engine's core (in ``engineCall(_:)``: under `lock` on a
    /// manual engine) and notes it (``coreClosed``).
    func closeCore(_ engine: any LimiterEngine, _ mode: sluice_close_mode_t) -> Int32 {
        let rc = engine.close(mode)
        if rc == 0 && emitOnly { coreClosed = true }  // emit-only engines run under `lock`
        return rc
    }

    var isClosed: Bool {
        lock.withLock { closed }
    }

    /// Counters of the core.
    func stats() -> sluice_stats_t {
        let (stats, mustDrain) = engineCall { $0.stats() }
        if mustDrain { deliverOutbox() }
        return stats
    }

    /// Values held by the Swift side (pending values); emit-only: the
    /// core's pending tokens (which hold them).
    var heldValues: Int {
        if emitOnly {
            let (stats, mustDrain) = engineCall { $0.stats() }
            if mustDrain { deliverOutbox() }
            return Int(stats.pending)
        }
        if loopCounts { return loopHeld.load(ordering: .relaxed) }
        return lock.withLock { slots.count }
    }

    /// With the lock held: whether no value is held any more (see
    /// ``heldValues``): emit-only, once the core is closed.
    @inlinable @inline(__always)
    var holdsNothing: Bool {
        if emitOnly { return coreClosed }
        return loopCounts ? loopHeld.load(ordering: .sequentiallyConsistent) == 0 : slots.count == 0
    }

    /// Runs the core's invariant checker (tests; manual engine only).
    func checkInvariants() throws(LimiterError) {
        let (rc, mustDrain) = engineCall { $0.checkInvariants() }
        if mustDrain { deliverOutbox() }
        try LimiterError.check(rc)
    }

    // MARK: - Events

    /// Records one event of the engine (any thread; the engine may hold its
    /// own lock), taking `lock` (see ``recordLocked(_:)``).
    @inlinable
    func record(_ event: EngineEvent) {
        lock.lock()
        recordLocked(event)
        lock.unlock()
    }

    /// Records one event and delivers the outbox, claimed in the same
    /// critical section (see ``EngineSink/handle``).
    @inlinable
    func handle(_ event: EngineEvent) {
        lock.lock()
        recordLocked(event)
        let mustDrain = claimDrain()
        lock.unlock()
        if mustDrain { deliverOutbox() }
    }

    /// Records a batch of C events in order in one critical section, then
    /// delivers the outbox, claimed in that same critical section (see
    /// ``EngineSink/handleMany``): what ``handle(_:)`` does per event, with
    /// one lock round trip for the batch.
    @inlinable
    func handleMany(_ events: UnsafePointer<sluice_event_t>, count: Int) {
        lock.lock()
        for i in 0..<count { recordLocked(EngineEvent(events + i)) }
        let mustDrain = claimDrain()
        lock.unlock()
        if mustDrain { deliverOutbox() }
    }

    /// With the lock held: records one event of the engine — moves the
    /// token's value to the outbox, folds it into its successor
    /// (`combine`), or releases it, at the moment the core gave it up.
    @inlinable @inline(__always)
    func recordLocked(_ event: EngineEvent) {
        if let combine, let newer = event.successor, slots.contains(newer) {
            let older = slots.remove(event.token)
            combiningThread.store(currentThreadID(), ordering: .relaxed)
            slots.update(newer) { combine(older.value, $0) }
            combiningThread.store(0, ordering: .relaxed)
            return
        }
        let entry = take(event)
        let at = LimiterInstant(nanoseconds: event.at)
        switch event.kind {
        case SLUICE_EVENT_EMIT:
            outbox.events.append(Event(kind: .emitted, key: entry.key, value: entry.value, at: at))
        case SLUICE_EVENT_DROP:
            if observesDrops {
                outbox.events.append(Event(kind: .dropped, key: entry.key, value: entry.value, at: at))
            }
        default:
            if observesDrops {
                outbox.events.append(Event(kind: .discarded, key: entry.key, value: entry.value, at: at))
            }
        }
    }

    // MARK: - Delivery

    /// With the lock held: whether the caller must deliver the outbox now.
    @inlinable @inline(__always)
    func claimDrain() -> Bool {
        outbox.claim(closedAndEmpty: closed && holdsNothing)
    }

    /// Delivers the outbox if nobody else is delivering it (an engine's
    /// `deliver`).
    @inlinable
    func deliverIfNeeded() {
        if lock.withLock({ claimDrain() }) { deliverOutbox() }
    }

    /// Delivers the outbox in order, without the lock, until it is empty;
    /// finishes the delivery once a closed limiter holds nothing more. Only
    /// for the caller that claimed the drain (``claimDrain()``). Each lock
    /// round trip takes every event waiting (``LimiterOutbox/next(closedAndEmpty:into:)``);
    /// events recorded meanwhile wait for the next one.
    @inlinable
    func deliverOutbox() {
        var batch = RingBuffer<Event>()
        while true {
            lock.lock()
            let next = outbox.next(closedAndEmpty: closed && holdsNothing, into: &batch)
            lock.unlock()
            switch next {
            case .deliver:
                delivery.deliverAll(&batch)  // LimiterStorage+Fire.swift
            case let .finish(waiters):
                delivery.finish(resuming: waiters)
                return
            case .done:
                return
            }
        }
    }
}

/// How a ``LimiterStorage`` runs, chosen once in its init: which engine it
/// calls and how, where its values are (``Kind``), and what a DROP event
/// does (``Drops``). The combinations that occur:
///
/// | kind             | engine                      | values  | drops                    |
/// |------------------|-----------------------------|---------|--------------------------|
/// | `manual`         | manual, called under `lock` | slots   | observed, folded, quiet  |
/// | `manualCompact`  | manual, called under `lock` | compact | observed                 |
/// | `emitOnly`       | manual, called under `lock` | compact | quiet                    |
/// | `loopCompact`    | loop, called without `lock` | compact | observed, quiet          |
/// | `loop`           | loop, called without `lock` | slots   | observed, folded, quiet  |
/// | `external`       | any other, through `engine` | slots   | observed, folded, quiet  |
///
/// Compact needs an engine whose every event names its key (manual or
/// loop), types that allow it (``LimiterStorage/compactTypes``) and no
/// `combine` (so its drops are never `folded`); a compact limiter on a
/// manual engine whose drops are quiet is always emit-only. The one
/// initializer derives both parts from the same facts, so no other
/// combination is made.
///
/// Two fields rather than one enum with the drops in its payloads: each
/// hot test then reads one byte (the kind's tag, or `drops`), where a
/// payload would take a switch first. The payloads are unretained
/// (`engine` keeps the engine alive), so reading the mode retains nothing.
@usableFromInline
struct StorageMode {
    /// Which engine, called how, and where the values are. The order of the
    /// cases is their tags' (a byte of their own: a state pointer has no
    /// spare bits to share): manual is 0–2, compact 1–3, emit-only 2, a
    /// loop 3–4, so that each test is one comparison.
    @usableFromInline
    enum Kind {
        /// A manual engine (its state), values in slots.
        case manual(UnsafeMutablePointer<ManualEngineState>)
        /// A manual engine, compact values (drops observed).
        case manualCompact(UnsafeMutablePointer<ManualEngineState>)
        /// A manual engine whose core reports emissions only: compact
        /// values, drops quiet (see the storage's class comment).
        case emitOnly(UnsafeMutablePointer<ManualEngineState>)
        /// A loop engine, compact values.
        case loopCompact(Unmanaged<LoopEngine>)
        /// A loop engine, values in slots. Every event of a loop engine
        /// goes through the sink's `handle`/`handleMany`, which record and
        /// claim the delivery in one critical section: a submit that leaves
        /// no value to release has nothing to do under `lock` after the call.
        case loop(Unmanaged<LoopEngine>)
        /// Any other engine (an external host), values in slots.
        case external

        /// Values travel in their tokens (the storage's ``LimiterStorage/compact``).
        @inlinable
        var compact: Bool {
            switch self {
            case .emitOnly, .manualCompact, .loopCompact: return true
            case .loop, .manual, .external: return false
            }
        }
    }

    /// What a DROP event (a value superseded, dropped or discarded) does.
    @usableFromInline
    enum Drops: UInt8 {
        /// The delivery observes drops: the event is recorded for it (after
        /// `combine`, if any, folded a superseded value into its successor).
        case observed
        /// Nobody observes drops, and `combine` folds a superseded value
        /// into its successor; any other dropped value is released.
        case folded
        /// Neither: a DROP event only releases its value.
        case quiet
    }

    @usableFromInline let kind: Kind
    @usableFromInline let drops: Drops

    private init(_ kind: Kind, _ drops: Drops) {
        self.kind = kind
        self.drops = drops
    }

    /// The mode before the engine exists (replaced at the end of init).
    static var unset: StorageMode { StorageMode(.external, .quiet) }

    /// Whether the core is to report emissions only (`EngineSetup.emitOnly`,
    /// which only a manual engine honours): compact values and quiet drops.
    static func emitOnly(compactTypes: Bool, combines: Bool, observesDrops: Bool) -> Bool {
        compactTypes && !combines && !observesDrops
    }

    /// The mode of a storage on `engine` (made with
    /// ``emitOnly(compactTypes:combines:observesDrops:)``'s answer).
    init(engine: any LimiterEngine, compactTypes: Bool, combines: Bool, observesDrops: Bool) {
        let drops: Drops = observesDrops ? .observed : combines ? .folded : .quiet
        // Compact on the engines whose every event names its key.
        let compact = compactTypes && !combines
        if let manual = engine as? ManualEngine {
            // Given the storage's lock, a manual engine runs under it.
            precondition(manual.runsUnderCallerLock)
            let state = manual.state
            if Self.emitOnly(compactTypes: compactTypes, combines: combines, observesDrops: observesDrops) {
                self.init(.emitOnly(state), drops)
            } else {
                self.init(compact ? .manualCompact(state) : .manual(state), drops)
            }
        } else if let loop = engine as? LoopEngine {
            let loop = Unmanaged.passUnretained(loop)
            self.init(compact ? .loopCompact(loop) : .loop(loop), drops)
        } else {
            self.init(.external, drops)
        }
    }
}
