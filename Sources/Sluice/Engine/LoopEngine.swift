import CSluice
import CSluiceLoop
import Dispatch

/// The loop engine: a loop limiter (`sluice_mt_t`) on a ``LimiterLoop``.
/// Time is the system's monotonic clock; the loop thread fires deadlines
/// and delivers every event, in each key's order (the C layer shards keys
/// over locks, so calls on different keys run in parallel). Events arrive
/// in batches (the C layer's `on_events`, up to `SLUICE_MT_EVENTS_MAX` at a
/// time), which the sink records under one lock and delivers in one drain
/// (``EngineSink/handleMany``).
///
/// Ownership: the C limiter's `user` pointer is the sink, retained: the loop
/// may deliver after the last reference to the limiter is gone (a free
/// requested inside a callback is finished by the loop); ``shutdown()``
/// releases it once `sluice_mt_free()` has returned.
@usableFromInline
final class LoopEngine: LimiterEngine, @unchecked Sendable {
    // @unchecked: every stored property is a `let`; the C object is thread-safe.
    let loop: LimiterLoop
    @usableFromInline let limiter: CLoopLimiter
    private let sink: Unmanaged<EngineSink>

    init(loop: LimiterLoop, setup: EngineSetup) throws(LimiterError) {
        self.loop = loop
        var config = setup.config
        // Events come in batches (`on_events`): the sink records a batch
        // under one lock and delivers it in one drain. `on_event` is then
        // never called by the C layer.
        config.on_event = nil
        let onEvents: sluice_mt_events_fn = { user, events, count in
            guard let user, let events else { return }
            let sink = Unmanaged<EngineSink>.fromOpaque(user)
            sink._withUnsafeGuaranteedRef { sink in
                let outer = sink.deliveringThread.exchange(currentThreadID(), ordering: .relaxed)
                sink.handleMany(events, count)
                sink.deliveringThread.store(outer, ordering: .relaxed)
            }
        }
        let sink = Unmanaged.passRetained(setup.sink)
        config.user = sink.toOpaque()
        var flags: UInt32 = 0
        if setup.reportImmediate { flags |= SLUICE_MT_REPORT_EMITTED.rawValue }
        if setup.reportDrops { flags |= SLUICE_MT_REPORT_DROPPED.rawValue }
        if setup.coarseClock { flags |= SLUICE_MT_COARSE_CLOCK.rawValue }
        do {
            limiter = try CLoopLimiter.make(
                &config, loop: loop.cLoop, shards: setup.shards, flags: sluice_mt_flag_t(rawValue: flags),
                onEvents: onEvents)
        } catch {
            sink.release()
            throw error
        }
        self.sink = sink
    }

    /// Thread-safe by itself; its events come from the loop thread.
    @usableFromInline
    var runsUnderCallerLock: Bool { false }

    @usableFromInline
    var now: UInt64 { CLoop.now }

    @inlinable
    func submit(_ key: sluice_key_t, token: UInt64, cost: UInt64, into decision: inout sluice_decision_t) -> Int32 {
        limiter.submit(key, token: token, cost: cost, into: &decision)
    }

    @usableFromInline
    func quota(_ key: sluice_key_t, cost: UInt64, into quota: inout sluice_quota_t) -> Int32 {
        limiter.quota(key, cost: cost, into: &quota)
    }

    @usableFromInline
    func submitPlan(
        _ key: sluice_key_t, token: UInt64, cost: UInt64, plan: UInt32, into decision: inout sluice_decision_t,
        detail: inout sluice_plan_detail_t
    ) -> Int32 {
        // The C layer reports the token as its flags ask (SLUICE_MT_REPORT_*).
        limiter.submitPlan(key, token: token, cost: cost, plan: plan, into: &decision, detail: &detail)
    }

    @usableFromInline
    func quotaPlan(
        _ key: sluice_key_t, cost: UInt64, plan: UInt32, into quota: inout sluice_quota_t,
        detail: inout sluice_plan_detail_t
    ) -> Int32 {
        limiter.quotaPlan(key, cost: cost, plan: plan, into: &quota, detail: &detail)
    }

    @usableFromInline
    func setPlans(_ plans: UnsafePointer<sluice_plans_t>) -> Int32 { limiter.setPlans(plans) }

    @usableFromInline
    func planIndex(_ name: String, into index: inout UInt32) -> Int32 { limiter.planIndex(name, into: &index) }

    /// `sluice_mt_submit_many`: one lock per shard per group of calls.
    @usableFromInline
    func submitMany(
        _ calls: UnsafePointer<sluice_call_t>, count: Int, decisions: UnsafeMutablePointer<sluice_decision_t>,
        results: UnsafeMutablePointer<Int32>
    ) {
        _ = sluice_mt_submit_many(limiter.handle, calls, count, decisions, results)
    }

    @usableFromInline
    func flush(_ key: sluice_key_t) -> Int32 { limiter.flush(key) }
    @usableFromInline
    func cancel(_ key: sluice_key_t) -> Int32 { limiter.cancel(key) }
    @usableFromInline
    func pending(_ key: sluice_key_t) -> Int32 { limiter.pending(key) }
    @usableFromInline
    func close(_ mode: sluice_close_mode_t) -> Int32 { limiter.close(mode) }
    @usableFromInline
    func stats() -> sluice_stats_t { limiter.stats().core }
    @usableFromInline
    func checkInvariants() -> Int32 { 0 }

    @usableFromInline
    func shutdown() {
        let insideOwnDelivery =
            sink._withUnsafeGuaranteedRef { $0.deliveringThread.load(ordering: .relaxed) } == currentThreadID()
        if insideOwnDelivery {
            // Released from inside its own delivery on the loop thread: free
            // from another thread, which waits for this callback to return (a
            // free from inside a callback would be finished later by the
            // loop, after the sink could be gone).
            DispatchQueue.global().async { self.free() }
        } else {
            free()
        }
    }

    /// Frees the C limiter (which reports what is still pending as
    /// discarded, on this thread), then releases the C side's reference.
    private func free() {
        limiter.free()
        sink.release()
    }
}
