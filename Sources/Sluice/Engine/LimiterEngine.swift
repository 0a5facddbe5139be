import CSluice
import Synchronization

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// What runs a limiter's core: **who moves time** (a manual clock advanced
/// by the program, the loop layer's monotonic clock and timers, …) and
/// **where the core's events are delivered** (inside the call that caused
/// them, on a loop thread, …). ``Limiter`` and ``RateLimiter`` are written
/// once against this protocol; each ``LimiterScheduler`` makes one engine per
/// limiter.
///
/// Contract, for every engine:
///
/// - The operations may be called from any thread, concurrently; the engine
///   serialises what its C object needs.
/// - Every token handed to ``submit(_:token:cost:into:)`` that the decision
///   does not settle is reported exactly once to the ``EngineSink``'s
///   `record`, in each key's order. With `reportImmediate`, a token emitted
///   at once is reported too (an EMIT at the call's time, queued behind the
///   key's older events); with `reportDrops`, so is a token dropped at once.
/// - `record` may be called while the engine holds its own locks (and, when
///   ``runsUnderCallerLock``, with the caller's lock held), so it must not
///   call the engine; `deliver` is called with no engine lock held,
///   after the events of a timer (the operations' callers deliver
///   themselves after an operation). An engine that delivers events from
///   a thread of its own, outside its locks, calls `handle` (record, then
///   deliver on that thread).
/// - After ``shutdown()`` returns (or, when it is called from inside the
///   engine's own delivery, once the engine has finished it), no event comes.
@usableFromInline
protocol LimiterEngine: AnyObject, Sendable {
    /// Whether the caller holds the lock it gave in ``EngineSetup/callerLock``
    /// around every call, and the engine records events under it (an
    /// engine whose events arrive inside its calls, such as the manual one:
    /// then a limiter's value bookkeeping and the core call share one
    /// critical section). `false`: the engine is thread-safe by itself and
    /// must be called without that lock held.
    var runsUnderCallerLock: Bool { get }
    /// The engine's current time, in ns.
    var now: UInt64 { get }
    /// Submits a token (`sluice_limiter_submit_cost` semantics).
    func submit(_ key: sluice_key_t, token: UInt64, cost: UInt64, into decision: inout sluice_decision_t) -> Int32
    /// Submits a batch of tokens at one time (`sluice_limiter_submit_many`
    /// semantics): `results[i]` and `decisions[i]` are what `submit` would
    /// give for call i, the calls made in order. A default (one `submit` per
    /// call) is in Limiter+Batch.swift.
    func submitMany(
        _ calls: UnsafePointer<sluice_call_t>, count: Int, decisions: UnsafeMutablePointer<sluice_decision_t>,
        results: UnsafeMutablePointer<Int32>)
    /// Reads a rate key's quota now.
    func quota(_ key: sluice_key_t, cost: UInt64, into quota: inout sluice_quota_t) -> Int32
    /// Decides about a rate call under a plan, now, with each quota's
    /// figures (`sluice_limiter_submit_plan` semantics). The token is
    /// reported as ``submit(_:token:cost:into:)`` reports it: with
    /// `reportImmediate` an EMIT when admitted, with `reportDrops` a DROP
    /// when refused (a ``RateLimiter`` asks for neither and passes 0; a
    /// ``Limiter`` of plans passes its value's token).
    func submitPlan(
        _ key: sluice_key_t, token: UInt64, cost: UInt64, plan: UInt32, into decision: inout sluice_decision_t,
        detail: inout sluice_plan_detail_t
    ) -> Int32
    /// Reads a rate key's quota under a plan now (`sluice_limiter_quota_plan`).
    func quotaPlan(
        _ key: sluice_key_t, cost: UInt64, plan: UInt32, into quota: inout sluice_quota_t,
        detail: inout sluice_plan_detail_t
    ) -> Int32
    /// Replaces the plans (`sluice_limiter_set_plans`).
    func setPlans(_ plans: UnsafePointer<sluice_plans_t>) -> Int32
    /// A plan's index by name (`sluice_limiter_plan_index`).
    func planIndex(_ name: String, into index: inout UInt32) -> Int32
    /// Flushes a key (1: a value was emitted).
    func flush(_ key: sluice_key_t) -> Int32
    /// Cancels a key (1: a value was dropped).
    func cancel(_ key: sluice_key_t) -> Int32
    /// Whether a key holds a pending value (1 or 0).
    func pending(_ key: sluice_key_t) -> Int32
    /// Closes: pending values are emitted (drain) or reported as discarded.
    func close(_ mode: sluice_close_mode_t) -> Int32
    /// The core's counters (summed over shards).
    func stats() -> sluice_stats_t
    /// Runs the core's invariant checker where the engine can (0 otherwise).
    func checkInvariants() -> Int32
    /// Frees the C object; what is still pending is reported as discarded.
    func shutdown()
}

extension LimiterEngine {
    /// By default an engine serialises itself and is called without the
    /// caller's lock.
    var runsUnderCallerLock: Bool { false }
}

/// One event of the core, as an engine hands it to its sink.
@usableFromInline
struct EngineEvent {
    @usableFromInline var kind: sluice_event_kind_t
    @usableFromInline var token: UInt64
    @usableFromInline var at: UInt64
    /// DROP only: the token that took this one's place (a supersession), or `nil`.
    @usableFromInline var successor: UInt64?
    /// The key's integer (`sluice_key_t.u64`; 0 for a byte key or when not
    /// given): a limiter that keeps no value slots rebuilds the key from it.
    @usableFromInline var key: UInt64

    @inlinable
    init(kind: sluice_event_kind_t, token: UInt64, at: UInt64, successor: UInt64?, key: UInt64 = 0) {
        self.kind = kind
        self.token = token
        self.at = at
        self.successor = successor
        self.key = key
    }

    /// Copies a C event.
    @inlinable
    init(_ event: UnsafePointer<sluice_event_t>) {
        kind = event.pointee.kind
        token = event.pointee.token
        at = event.pointee.at
        successor =
            event.pointee.kind == SLUICE_EVENT_DROP && event.pointee.has_successor
            ? event.pointee.successor : nil
        key = event.pointee.key.u64
    }
}

/// Where an engine delivers: two closures made by the limiter's storage in
/// code specialized for its Key and Value (see ``LimiterStorage``).
@usableFromInline
final class EngineSink: Sendable {
    /// Records one event (takes the storage's lock; must not call the engine).
    @usableFromInline let record: @Sendable (EngineEvent) -> Void
    /// Records one event with the caller's lock already held: for an engine
    /// that runs under it (``LimiterEngine/runsUnderCallerLock``).
    @usableFromInline let recordHeld: @Sendable (EngineEvent) -> Void
    /// Delivers what recorded events left in the outbox (no engine lock held).
    @usableFromInline let deliver: @Sendable () -> Void
    /// Records one event and delivers (no engine lock held): `record` and
    /// `deliver` with the delivery claimed in the same critical section as
    /// the record, so that an event recorded by a loop thread is delivered
    /// by that thread, never by a caller that happens to look at the outbox.
    @usableFromInline let handle: @Sendable (EngineEvent) -> Void
    /// `handle` for a batch of C events, in order (a loop's `on_events`):
    /// all of them recorded in one critical section, then delivered in one
    /// drain. Without it at init, one `handle` per event.
    @usableFromInline let handleMany: @Sendable (UnsafePointer<sluice_event_t>, Int) -> Void
    /// `recordHeld` for a manual engine's timers (see `ManualEngine.fire`):
    /// the emissions of one fire round (`sluice_limiter_advance_into`), in
    /// order, in the critical section the caller holds: one specialized loop
    /// instead of a closure call per event. Without it at init, one
    /// `recordHeld` per emission.
    @usableFromInline let recordManyHeld: @Sendable (UnsafePointer<sluice_emission_t>, Int) -> Void
    /// With the caller's lock held, for a manual engine's fire: whether the
    /// events just collected may be handed to the delivery straight from the
    /// engine's buffer (`deliverDirect`) instead of being recorded. `true`
    /// makes the caller the delivering thread, which then calls
    /// `deliverDirect` and `finishDirect`, without the lock. `nil`: never.
    @usableFromInline let claimDirect: (@Sendable () -> Bool)?
    /// Delivers a fire round's emissions, in order, straight from the
    /// engine's buffer (no lock held; after a `claimDirect` that returned `true`).
    @usableFromInline let deliverDirect: (@Sendable (UnsafePointer<sluice_emission_t>, Int) -> Void)?
    /// Ends a direct delivery: delivers what was recorded meanwhile, then
    /// gives up the delivery (no lock held).
    @usableFromInline let finishDirect: (@Sendable () -> Void)?
    /// The thread inside a delivery of this sink by a loop, or 0.
    let deliveringThread = Atomic<UInt>(0)

    @inlinable
    init(
        record: @escaping @Sendable (EngineEvent) -> Void, recordHeld: @escaping @Sendable (EngineEvent) -> Void,
        deliver: @escaping @Sendable () -> Void, handle: @escaping @Sendable (EngineEvent) -> Void,
        handleMany: (@Sendable (UnsafePointer<sluice_event_t>, Int) -> Void)? = nil,
        recordManyHeld: (@Sendable (UnsafePointer<sluice_emission_t>, Int) -> Void)? = nil,
        claimDirect: (@Sendable () -> Bool)? = nil,
        deliverDirect: (@Sendable (UnsafePointer<sluice_emission_t>, Int) -> Void)? = nil,
        finishDirect: (@Sendable () -> Void)? = nil
    ) {
        self.claimDirect = deliverDirect != nil && finishDirect != nil ? claimDirect : nil
        self.deliverDirect = deliverDirect
        self.finishDirect = finishDirect
        self.record = record
        self.recordHeld = recordHeld
        self.deliver = deliver
        self.handle = handle
        self.handleMany =
            handleMany ?? { events, count in
                for i in 0..<count { handle(EngineEvent(events + i)) }
            }
        self.recordManyHeld =
            recordManyHeld ?? { emissions, count in
                for i in 0..<count { recordHeld(EngineEvent(emission: emissions[i])) }
            }
    }

    /// A sink that ignores events (a decision-only limiter has none).
    static let none = EngineSink(record: { _ in }, recordHeld: { _ in }, deliver: {}, handle: { _ in })
}

/// What an engine is made from.
@usableFromInline
struct EngineSetup {
    /// The core configuration (policy, max_keys, tick, seed); `on_event`,
    /// `user` and `start_ns` are the engine's to set.
    var config: sluice_config_t
    /// Report tokens emitted at once through the sink too.
    var reportImmediate: Bool
    /// Report tokens dropped at once through the sink too.
    var reportDrops: Bool
    /// Loop engines: the number of shards (0 for the default).
    var shards: UInt32
    var sink: EngineSink
    /// The caller's lock, for an engine that can run under it (see
    /// ``LimiterEngine/runsUnderCallerLock``); `nil`: the engine serialises
    /// itself.
    var callerLock: PosixLock?
    /// Manual engines only (others ignore it): create the core with
    /// `emit_only`, which reports no DROP or DISCARD event (a compact
    /// limiter whose drops nobody observes: see `LimiterStorage.emitOnly`).
    var emitOnly = false
    /// Loop engines only: calls read the coarse clock (`SLUICE_MT_COARSE_CLOCK`).
    var coarseClock = false
}

/// An identifier of the calling thread, never 0.
@inlinable
func currentThreadID() -> UInt {
    #if canImport(Darwin)
    UInt(bitPattern: pthread_self())
    #else
    UInt(pthread_self())
    #endif
}
