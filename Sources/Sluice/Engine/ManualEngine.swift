import CSluice

/// The manual engine: a core limiter (`sluice_limiter_t`) on a
/// ``ManualLimiterClock``. Time moves only when the clock is advanced; the
/// clock fires this engine's timers inside `advance`, at their exact
/// deadlines. Calls are serialised by one lock — the caller's (a limiter's
/// storage lock, which the caller holds around each call) or the engine's
/// own — and events are delivered inside the call that caused them, on its
/// thread, under that lock.
///
/// Ownership: the core's `user` pointer is this engine's ``state`` (which
/// names the engine, unretained): the core calls back only during a call
/// made through this engine.
@usableFromInline
final class ManualEngine: LimiterEngine, @unchecked Sendable {
    // @unchecked: `core` is set once in init; `sink` and the core are
    // guarded by `lock`.
    @usableFromInline let clock: ManualLimiterClock
    private let lock: PosixLock
    /// The caller holds `lock` around every call (see ``runsUnderCallerLock``).
    @usableFromInline
    let runsUnderCallerLock: Bool
    /// The core (`nil` once shut down), kept in ``state``.
    @inlinable
    var core: CLimiter? {
        get { state.pointee.core }
        set { state.pointee.core = newValue }
    }
    /// What the event callback and a limiter's submit path use (the core's
    /// `user` pointer), at a fixed address; freed in deinit.
    @usableFromInline let state: UnsafeMutablePointer<ManualEngineState>
    /// Cleared by shutdown(): the sink holds the storage, which holds this engine.
    private var sink: EngineSink?
    /// `sink`, unretained, for the event callback: read with no retain and
    /// release per event. Set and cleared with `sink` (under `lock`).
    private var sinkRef: Unmanaged<EngineSink>?
    /// What the clock holds, weakly: a weak reference to the engine itself
    /// would give it a side table, making every retain of it on the submit
    /// path several times slower. Holds the engine until shutdown().
    private var link: ClockLink!
    private let reportImmediate: Bool
    private let reportDrops: Bool

    init(clock: ManualLimiterClock, setup: EngineSetup) throws(LimiterError) {
        self.clock = clock
        lock = setup.callerLock ?? PosixLock(biased: true)
        runsUnderCallerLock = setup.callerLock != nil
        sink = setup.sink
        sinkRef = Unmanaged.passUnretained(setup.sink)
        reportImmediate = setup.reportImmediate
        reportDrops = setup.reportDrops
        state = .allocate(capacity: 1)
        state.initialize(
            to: ManualEngineState(
                fast: false, collecting: false, count: 0, capacity: 4, events: .allocate(capacity: 4), core: nil,
                clock: Unmanaged.passUnretained(clock)))
        var config = setup.config
        config.start_ns = clock.nowNanoseconds
        if setup.emitOnly { config.emit_only = true }
        config.on_event = { user, event in
            guard let user, let event else { return }
            let state = user.assumingMemoryBound(to: ManualEngineState.self)
            // A limiter's single submit (see `LimiterStorage.submitManual`):
            // kept for it, nothing else to check.
            if state.pointee.collecting {  // a limiter's submit or batch (submitManyCollecting)
                if event.pointee.kind == SLUICE_EVENT_DROP {
                    // (A compact limiter whose drops nobody observes is
                    // emit-only: its core reports no drop.)
                    // A value dropped (superseded) that nobody observes, in a
                    // table of trivial values: its slot freed here.
                    if let slots = state.pointee.trivialSlots {
                        if let deferred = state.pointee.deferred,
                            state.pointee.deferredCount < state.pointee.deferredCapacity
                        {
                            // A batch: freed after its core call, the slots read together.
                            deferred[state.pointee.deferredCount] = event.pointee.token
                            state.pointee.deferredCount &+= 1
                            return
                        }
                        if slots.pointee.releaseTrivial(event.pointee.token) { return }
                    }
                }
                if state.pointee.fast, state.pointee.count < state.pointee.capacity {
                    (state.pointee.events + state.pointee.count).initialize(to: EngineEvent(event))
                    state.pointee.count &+= 1
                    return
                }
            }
            state.pointee.engine._withUnsafeGuaranteedRef { $0.handleEvent(event) }
        }
        config.user = UnsafeMutableRawPointer(state)
        core = try CLimiter.make(&config)
        state.pointee.engine = Unmanaged.passUnretained(self)
        link = ClockLink(self)
        clock.register(link)
    }

    /// The event callback's general path (out of line: the single submit's
    /// collecting path is inlined in the callback).
    @inline(never)
    private func handleEvent(_ event: UnsafePointer<sluice_event_t>) {
        if collecting {  // the caller records it
            if batchEnds != nil { markBatchReturned() }  // a batch: which call it belongs to
            return collect(EngineEvent(event))
        }
        if batch != nil { reportBatchReturned() }  // submitMany: calls that returned first
        report(EngineEvent(event))
    }

    deinit {
        core?.free()
        state.pointee.events.deallocate()  // EngineEvent is trivial
        fireBuffer?.deallocate()  // sluice_emission_t is trivial
        state.deallocate()  // trivial
    }

    @usableFromInline
    var now: UInt64 { clock.nowNanoseconds }

    // MARK: - The caller's fast path

    /// While `true` (set by a caller holding the caller's lock around one
    /// core call, see `LimiterStorage.submit`), the core's events are kept
    /// in `collected` for that caller to record, specialized for its key
    /// and value types, instead of going through the sink's closures.
    @inlinable
    var collecting: Bool {
        get { state.pointee.collecting }
        set { state.pointee.collecting = newValue }
    }
    /// The events kept while `collecting`: the first `collectedCount` of a
    /// buffer of `collectedCapacity` (grown when a call reports more).
    @inlinable
    var collected: UnsafeMutablePointer<EngineEvent> {
        get { state.pointee.events }
        set { state.pointee.events = newValue }
    }
    @inlinable
    var collectedCount: Int {
        get { state.pointee.count }
        set { state.pointee.count = newValue }
    }
    private var collectedCapacity: Int {
        get { state.pointee.capacity }
        set { state.pointee.capacity = newValue }
    }

    /// Keeps an event for the collecting caller.
    @inline(__always)
    private func collect(_ event: EngineEvent) {
        if collectedCount == collectedCapacity { growCollected() }
        (collected + collectedCount).initialize(to: event)
        collectedCount &+= 1
    }

    /// Doubles the buffer of kept events (a call reported more than ever).
    @inline(never)
    private func growCollected() {
        let capacity = collectedCapacity * 2
        let events = UnsafeMutablePointer<EngineEvent>.allocate(capacity: capacity)
        events.moveInitialize(from: collected, count: collectedCount)
        collected.deallocate()
        collected = events
        collectedCapacity = capacity
    }

    /// The core, for the collecting caller (`nil` once shut down).
    @inlinable
    var coreForCaller: CLimiter? { core }

    /// Hands an event to the sink, with `lock` held.
    @inline(__always)
    private func report(_ event: EngineEvent) {
        guard let sinkRef else { return }
        sinkRef._withUnsafeGuaranteedRef { sink in
            if runsUnderCallerLock { sink.recordHeld(event) } else { sink.record(event) }
        }
    }

    /// Runs `body` under the lock: taken here, or already held by the caller.
    @inline(__always)
    private func serialized<R>(_ body: () -> R) -> R {
        if runsUnderCallerLock { return body() }
        return lock.withLock(body)
    }

    /// Runs `body` on the core, serialised (`closed` when shut down).
    @inline(__always)
    private func withCore(_ body: (CLimiter, UInt64) -> Int32) -> Int32 {
        serialized {
            guard let core else { return LimiterError.closed.rawValue }
            return body(core, clock.nowNanoseconds)
        }
    }

    @usableFromInline
    func submit(_ key: sluice_key_t, token: UInt64, cost: UInt64, into decision: inout sluice_decision_t) -> Int32 {
        serialized {
            guard let core else { return LimiterError.closed.rawValue }
            let now = clock.nowNanoseconds
            let rc = core.submit(key, token: token, cost: cost, now: now, into: &decision)
            guard rc == 0 else { return rc }
            reportDecided(decision, token: token, key: key, now: now)
            return rc
        }
    }

    /// Reports a token the core emitted or dropped at once, as asked
    /// (`reportImmediate`, `reportDrops`), with `lock` held: here, under
    /// the lock, so that it is ordered with the key's other events exactly
    /// as a loop orders them.
    @inline(__always)
    private func reportDecided(_ decision: sluice_decision_t, token: UInt64, key: sluice_key_t, now: UInt64) {
        if decision.kind == SLUICE_EMITTED, reportImmediate {
            report(EngineEvent(kind: SLUICE_EVENT_EMIT, token: token, at: now, successor: nil, key: key.u64))
        } else if decision.kind == SLUICE_DROPPED, reportDrops {
            report(EngineEvent(kind: SLUICE_EVENT_DROP, token: token, at: now, successor: nil, key: key.u64))
        }
    }

    /// The batch `submitMany` is making (guarded by `lock`).
    private var batch:
        (
            calls: UnsafePointer<sluice_call_t>, decisions: UnsafeMutablePointer<sluice_decision_t>,
            results: UnsafeMutablePointer<Int32>, count: Int, done: Int, now: UInt64
        )?
    /// A result no call returns: marks a call of the batch still running.
    private static let running: Int32 = 1

    /// Reports the immediate decisions of the batch's calls that have
    /// returned and are not reported yet, in order (with `lock` held): a
    /// core event met during call i comes after calls 0..<i, as with single
    /// calls.
    private func reportBatchReturned() {
        guard var b = batch else { return }
        while b.done < b.count, b.results[b.done] != Self.running {
            let i = b.done
            b.done += 1
            guard b.results[i] == 0 else { continue }
            let token = b.calls[i].token
            if b.decisions[i].kind == SLUICE_EMITTED, reportImmediate {
                report(
                    EngineEvent(
                        kind: SLUICE_EVENT_EMIT, token: token, at: b.now, successor: nil, key: b.calls[i].key.u64))
            } else if b.decisions[i].kind == SLUICE_DROPPED, reportDrops {
                report(
                    EngineEvent(
                        kind: SLUICE_EVENT_DROP, token: token, at: b.now, successor: nil, key: b.calls[i].key.u64))
            }
        }
        batch = b
    }

    /// `sluice_limiter_submit_many`, each call's immediate emission or drop
    /// reported (when asked) at the point its call returned.
    @usableFromInline
    func submitMany(
        _ calls: UnsafePointer<sluice_call_t>, count: Int, decisions: UnsafeMutablePointer<sluice_decision_t>,
        results: UnsafeMutablePointer<Int32>
    ) {
        serialized {
            guard let core else {
                for i in 0..<count { results[i] = LimiterError.closed.rawValue }
                return
            }
            let now = clock.nowNanoseconds
            for i in 0..<count { results[i] = Self.running }
            batch = (calls, decisions, results, count, 0, now)
            _ = sluice_limiter_submit_many(core.handle, calls, count, now, decisions, results)
            reportBatchReturned()
            batch = nil
        }
    }

    /// While a collecting batch runs (``submitManyCollecting(calls:count:now:decisions:results:ends:)``):
    /// `ends[i]` receives the number of events collected up to the end of
    /// call i, for the `batchDone` calls known to have returned, out of
    /// `batchCount`, whose results are in `batchResults` (guarded by `lock`).
    @exclusivity(unchecked) private var batchEnds: UnsafeMutablePointer<Int>?
    @exclusivity(unchecked) private var batchResults: UnsafeMutablePointer<Int32>?
    @exclusivity(unchecked) private var batchDone = 0
    @exclusivity(unchecked) private var batchCount = 0

    /// Notes the calls of the collecting batch that have returned (their
    /// results are no longer `running`): the events collected so far belong
    /// to them or to earlier calls.
    @inline(__always)
    private func markBatchReturned() {
        guard let ends = batchEnds, let results = batchResults else { return }
        var done = batchDone
        while done < batchCount, results[done] != Self.running {
            ends[done] = collectedCount
            done &+= 1
        }
        batchDone = done
    }

    /// `sluice_limiter_submit_many` for a caller holding the caller's lock
    /// (a limiter's storage, see `LimiterStorage.submitMany`): the core's
    /// events are collected, not reported, and `ends[i]` tells how many of
    /// them came before the end of call i (events `ends[i - 1]..<ends[i]`
    /// came during call i). Immediate decisions are not reported: the
    /// caller records them, after call i's events. The caller reads
    /// `collected` and resets `collectedCount`. Every call fails with
    /// `closed` once shut down.
    @usableFromInline
    func submitManyCollecting(
        calls: UnsafePointer<sluice_call_t>, count: Int, now: UInt64,
        decisions: UnsafeMutablePointer<sluice_decision_t>,
        results: UnsafeMutablePointer<Int32>, ends: UnsafeMutablePointer<Int>
    ) {
        guard let core else {
            for i in 0..<count {
                results[i] = LimiterError.closed.rawValue
                ends[i] = collectedCount
            }
            return
        }
        for i in 0..<count { results[i] = Self.running }
        batchResults = results
        batchCount = count
        batchDone = 0
        batchEnds = ends
        collecting = true
        _ = sluice_limiter_submit_many(core.handle, calls, count, now, decisions, results)
        collecting = false
        for i in batchDone..<count { ends[i] = collectedCount }
        batchEnds = nil
        batchResults = nil
    }

    @usableFromInline
    func quota(_ key: sluice_key_t, cost: UInt64, into quota: inout sluice_quota_t) -> Int32 {
        serialized {
            guard let core else { return LimiterError.closed.rawValue }
            return core.quota(key, cost: cost, now: clock.nowNanoseconds, into: &quota)
        }
    }

    @usableFromInline
    func submitPlan(
        _ key: sluice_key_t, token: UInt64, cost: UInt64, plan: UInt32, into decision: inout sluice_decision_t,
        detail: inout sluice_plan_detail_t
    ) -> Int32 {
        serialized {
            guard let core else { return LimiterError.closed.rawValue }
            let now = clock.nowNanoseconds
            let rc = core.submitPlan(
                key, token: token, cost: cost, plan: plan, now: now, into: &decision, detail: &detail)
            guard rc == 0 else { return rc }
            reportDecided(decision, token: token, key: key, now: now)
            return rc
        }
    }

    @usableFromInline
    func quotaPlan(
        _ key: sluice_key_t, cost: UInt64, plan: UInt32, into quota: inout sluice_quota_t,
        detail: inout sluice_plan_detail_t
    ) -> Int32 {
        serialized {
            guard let core else { return LimiterError.closed.rawValue }
            return core.quotaPlan(key, cost: cost, plan: plan, now: clock.nowNanoseconds, into: &quota, detail: &detail)
        }
    }

    @usableFromInline
    func setPlans(_ plans: UnsafePointer<sluice_plans_t>) -> Int32 { withCore { core, _ in core.setPlans(plans) } }

    @usableFromInline
    func planIndex(_ name: String, into index: inout UInt32) -> Int32 {
        serialized {
            guard let core else { return LimiterError.closed.rawValue }
            return core.planIndex(name, into: &index)
        }
    }

    @usableFromInline
    func flush(_ key: sluice_key_t) -> Int32 { withCore { $0.flush(key, now: $1) } }
    @usableFromInline
    func cancel(_ key: sluice_key_t) -> Int32 { withCore { $0.cancel(key, now: $1) } }
    @usableFromInline
    func pending(_ key: sluice_key_t) -> Int32 { withCore { $0.pending(key, now: $1) } }
    @usableFromInline
    func close(_ mode: sluice_close_mode_t) -> Int32 { withCore { $0.close(mode, now: $1) } }

    @usableFromInline
    func stats() -> sluice_stats_t {
        serialized { core?.stats() ?? sluice_stats_t() }
    }

    @usableFromInline
    func checkInvariants() -> Int32 { withCore { core, _ in core.check() } }

    @usableFromInline
    func shutdown() {
        serialized {
            // Closed by the limiter first: nothing pending, no event can come.
            core?.free()
            core = nil
            sinkRef = nil
            sink = nil
        }
        link.release()
    }

    // MARK: - For the clock (through ClockLink)

    var nextDeadline: UInt64? {
        // Called by the clock, never by the caller: the lock is taken here.
        let deadline = lock.withLock { core?.nextDeadline ?? .max }
        return deadline == .max ? nil : deadline
    }

    func fire(through now: UInt64) {
        guard runsUnderCallerLock else {
            let sink = lock.withLock { () -> EngineSink? in
                _ = core?.advance(to: now)
                return self.sink
            }
            sink?.deliver()
            return
        }
        // A limiter's engine: in rounds of at most `fireBatch` timers, the
        // core writing their emissions into an array (no callback per
        // event), each round recorded in one critical section and delivered
        // before the next (the outbox stays small, whatever the number of
        // timers due). A round the sink takes directly (`claimDirect`) is
        // delivered from the array itself, without recording it.
        while true {
            var direct: UnsafeMutablePointer<sluice_emission_t>?
            var directCount = 0
            let (sink, more) = lock.withLock { () -> (EngineSink?, Bool) in
                guard let core, let sinkRef else { return (self.sink, false) }
                return (self.sink, fireRound(core, now: now, sinkRef, direct: &direct, count: &directCount))
            }
            if let direct, let sink {
                sink.deliverDirect.unsafelyUnwrapped(direct, directCount)
                // The array fills the next round (it is warm). A fire from
                // the handler meanwhile used an array of its own: one is kept.
                lock.withLock {
                    if fireBuffer == nil { fireBuffer = direct } else { direct.deallocate() }
                }
                sink.finishDirect.unsafelyUnwrapped()
            } else {
                sink?.deliver()
            }
            if !more { return }
        }
    }

    /// The array the core writes a fire round's emissions into
    /// (`fireBatch` long), allocated at the first fire; `nil` while a direct
    /// round is delivered from it (then a fire from the handler allocates
    /// another). Guarded by `lock`.
    @exclusivity(unchecked) private var fireBuffer: UnsafeMutablePointer<sluice_emission_t>?
    /// The timers of one round of a fire, and the length of its array.
    private static let fireBatch = 512

    /// One round of a fire, with the caller's lock held (the storage's):
    /// advances the core by at most `fireBatch` timers with
    /// `sluice_limiter_advance_into`, which writes their emissions into
    /// ``fireBuffer`` instead of calling the event callback per event (the
    /// same emissions, in the same order), and has the sink record them in
    /// order with its `recordManyHeld`, in the same critical section: no
    /// closure call and no lock round trip per event. Returns whether timers
    /// due at `now` may be left.
    ///
    /// Between rounds the lock is free and the round's events are
    /// delivered: a handler that calls the limiter meanwhile finds the
    /// timers still due at `now` as a call always does, run first for the
    /// key it names (so each key's values keep their order).
    /// When the sink takes the round's emissions directly (its
    /// `claimDirect`, for a limiter whose recording of them only fills the
    /// outbox), they are not recorded: `direct` receives the array and
    /// `count` their number, for the caller to deliver from once the lock is
    /// released and to put back afterwards.
    private func fireRound(
        _ core: CLimiter, now: UInt64, _ sink: Unmanaged<EngineSink>,
        direct: inout UnsafeMutablePointer<sluice_emission_t>?, count: inout Int
    ) -> Bool {
        let buffer = fireBuffer ?? .allocate(capacity: Self.fireBatch)
        fireBuffer = nil
        var written = 0
        let handled = core.advance(
            to: now, maxTimers: Self.fireBatch, into: buffer, capacity: Self.fireBatch, count: &written)
        if written != 0 {
            if sink._withUnsafeGuaranteedRef({ $0.claimDirect?() ?? false }) {
                direct = buffer
                count = written
                return handled >= Self.fireBatch
            }
            sink._withUnsafeGuaranteedRef { $0.recordManyHeld(buffer, written) }
        }
        fireBuffer = buffer
        return handled >= Self.fireBatch
    }
}

extension EngineEvent {
    /// The EMIT event an emission of `sluice_limiter_advance_into` stands for.
    @inlinable
    init(emission: sluice_emission_t) {
        self.init(kind: SLUICE_EVENT_EMIT, token: emission.token, at: emission.at, successor: nil, key: emission.key)
    }
}

/// The clock's handle on a manual engine: registered (weakly) with the
/// clock in the engine's place, it holds the engine until the engine shuts
/// down, then lets the clock forget both.
private final class ClockLink: ManualClockClient, @unchecked Sendable {
    // @unchecked: `engine` is guarded by `lock`.
    private let lock = PosixLock()
    private var engine: ManualEngine?

    init(_ engine: ManualEngine) { self.engine = engine }

    /// Drops the engine (its shutdown): the clock no longer reaches it.
    func release() { lock.withLock { engine = nil } }

    private var current: ManualEngine? { lock.withLock { engine } }

    var nextDeadline: UInt64? { current?.nextDeadline }

    func fire(through now: UInt64) { current?.fire(through: now) }
}

/// The state a manual engine shares with the core's event callback (whose
/// `user` pointer it is) and with its limiter's submit path
/// (`LimiterStorage.submitManual`), at a fixed address: they read it with
/// no hop through the engine object. Guarded by the engine's lock.
@usableFromInline
struct ManualEngineState {
    /// A limiter's single submit is collecting (with `collecting`): the
    /// callback appends while there is room, nothing else to check.
    @usableFromInline var fast: Bool
    /// The core's events are kept in `events` for the caller (see
    /// ``ManualEngine/collecting``).
    @usableFromInline var collecting: Bool
    /// Events kept: the first `count` of `capacity`.
    @usableFromInline var count: Int
    @usableFromInline var capacity: Int
    @usableFromInline var events: UnsafeMutablePointer<EngineEvent>
    /// The core (`nil` once shut down).
    @usableFromInline var core: CLimiter?
    /// The engine's clock (the engine holds it).
    @usableFromInline var clock: Unmanaged<ManualLimiterClock>
    /// The engine (set once the engine is initialized).
    @usableFromInline var engine: Unmanaged<ManualEngine>!
    /// Set by a limiter whose drops nobody observes (no `combine`, no
    /// drop events) and whose keys and values are trivially copyable: while
    /// `collecting`, the callback frees a dropped value's slot in this table
    /// itself instead of keeping the event (a token it does not find held
    /// is kept, for the caller to catch).
    @usableFromInline var trivialSlots: UnsafeMutablePointer<SlotTableHeader>?
    /// While a limiter's batch runs with `trivialSlots` (see
    /// `LimiterStorage.submitManyManual`): the tokens of those dropped
    /// values, kept (the first `deferredCount` of `deferredCapacity`) for the
    /// batch to free after its core call, reading their slots together so
    /// that the cache misses overlap, instead of one at a time here.
    @usableFromInline var deferred: UnsafeMutablePointer<UInt64>? = nil
    @usableFromInline var deferredCount = 0
    @usableFromInline var deferredCapacity = 0
    /// The decision of an emit-only limiter's single submit
    /// (`LimiterStorage.submitEmitOnly`), written by the core and read
    /// under the limiter's lock. Here rather than on the caller's stack: a
    /// stack buffer whose address goes to C gives the caller, into which
    /// the submit is inlined, a stack protector and the buffer's zeroing.
    @usableFromInline var decision = sluice_decision_t()

    @usableFromInline
    init(
        fast: Bool, collecting: Bool, count: Int, capacity: Int, events: UnsafeMutablePointer<EngineEvent>,
        core: CLimiter?, clock: Unmanaged<ManualLimiterClock>
    ) {
        self.fast = fast
        self.collecting = collecting
        self.count = count
        self.capacity = capacity
        self.events = events
        self.core = core
        self.clock = clock
    }
}
