import CSluice
import CSluiceLoop

/// The loop limiter, `sluice_mt_t` (`sluice_loop.h`): each C call wrapped
/// once, nothing added. Thread-safe like the C object (keys sharded over
/// locks); its events arrive on the loop thread.
@usableFromInline
struct CLoopLimiter: @unchecked Sendable {
    // @unchecked: a handle to a thread-safe C object.
    @usableFromInline let handle: OpaquePointer

    /// `sluice_mt_new_with_options` (`onEvents`: the batch event callback, or nil).
    static func make(
        _ config: inout sluice_config_t, loop: CLoop, shards: UInt32, flags: sluice_mt_flag_t,
        onEvents: sluice_mt_events_fn? = nil
    ) throws(LimiterError) -> CLoopLimiter {
        var options = sluice_mt_options_t()
        options.nshards = shards
        options.flags = flags.rawValue
        options.on_events = onEvents
        var limiter: OpaquePointer?
        try LimiterError.check(sluice_mt_new_with_options(&limiter, loop.handle, &config, &options))
        guard let limiter else { throw .outOfMemory }
        return CLoopLimiter(handle: limiter)
    }

    /// `sluice_mt_free` (reports what is still pending as discarded, on this thread).
    func free() { sluice_mt_free(handle) }

    /// `sluice_mt_submit_u64` or `sluice_mt_submit` for a call of cost 1,
    /// `sluice_mt_submit_with_options` otherwise.
    @inlinable
    func submit(_ key: sluice_key_t, token: UInt64, cost: UInt64, into decision: inout sluice_decision_t) -> Int32 {
        if cost != 1 {
            var options = sluice_mt_submit_options_t()
            options.cost = cost
            return sluice_mt_submit_with_options(handle, key, token, &options, &decision)
        }
        if key.kind == SLUICE_KEY_U64 { return sluice_mt_submit_u64(handle, key.u64, token, &decision) }
        return sluice_mt_submit(handle, key, token, &decision)
    }

    /// `sluice_mt_quota`.
    func quota(_ key: sluice_key_t, cost: UInt64, into quota: inout sluice_quota_t) -> Int32 {
        var options = sluice_mt_submit_options_t()
        options.cost = cost
        return sluice_mt_quota(handle, key, &options, &quota)
    }

    /// `sluice_mt_flush`.
    func flush(_ key: sluice_key_t) -> Int32 { sluice_mt_flush(handle, key) }
    /// `sluice_mt_cancel`.
    func cancel(_ key: sluice_key_t) -> Int32 { sluice_mt_cancel(handle, key) }
    /// `sluice_mt_pending`.
    func pending(_ key: sluice_key_t) -> Int32 { sluice_mt_pending(handle, key) }
    /// `sluice_mt_close`.
    func close(_ mode: sluice_close_mode_t) -> Int32 { sluice_mt_close(handle, mode) }

    /// `sluice_mt_stats`.
    func stats() -> sluice_mt_stats_t {
        var stats = sluice_mt_stats_t()
        _ = sluice_mt_stats(handle, &stats)
        return stats
    }
}
