import CSluice

/// The core limiter, `sluice_limiter_t` (`sluice.h`): each C call wrapped
/// once, nothing added. Single-threaded like the C object: the caller
/// serialises every call (the manual engine holds its lock).
///
/// Return codes are passed through (`Int32`, 0 or a negative `SLUICE_E*`)
/// so that the hot path does not throw; ``LimiterError/check(_:)`` converts.
@usableFromInline
struct CLimiter: @unchecked Sendable {
    // @unchecked: a handle; the owner serialises access.
    @usableFromInline let handle: OpaquePointer

    /// `sluice_limiter_new`.
    static func make(_ config: inout sluice_config_t) throws(LimiterError) -> CLimiter {
        var limiter: OpaquePointer?
        try LimiterError.check(sluice_limiter_new(&limiter, &config))
        guard let limiter else { throw .outOfMemory }
        return CLimiter(handle: limiter)
    }

    /// `sluice_limiter_free`.
    func free() { sluice_limiter_free(handle) }

    /// `sluice_limiter_submit_cost`; `sluice_limiter_submit` for a cost of
    /// 1 (the same call, whose key preparation the C compiler inlines: ~20
    /// instructions fewer per call), `sluice_limiter_submit_u64` for an
    /// integer key and a cost of 1 (no 32-byte key passed in memory; the
    /// key's kind is a constant where this is specialized for a key type).
    @inlinable
    func submit(
        _ key: sluice_key_t, token: UInt64, cost: UInt64, now: UInt64, into decision: inout sluice_decision_t
    ) -> Int32 {
        if cost == 1 {
            if key.kind == SLUICE_KEY_U64 { return sluice_limiter_submit_u64(handle, key.u64, token, now, &decision) }
            return sluice_limiter_submit(handle, key, token, now, &decision)
        }
        return sluice_limiter_submit_cost(handle, key, token, cost, now, &decision)
    }

    /// `sluice_limiter_quota`.
    func quota(_ key: sluice_key_t, cost: UInt64, now: UInt64, into quota: inout sluice_quota_t) -> Int32 {
        sluice_limiter_quota(handle, key, cost, now, &quota)
    }

    /// `sluice_limiter_flush`.
    func flush(_ key: sluice_key_t, now: UInt64) -> Int32 { sluice_limiter_flush(handle, key, now) }
    /// `sluice_limiter_cancel`.
    func cancel(_ key: sluice_key_t, now: UInt64) -> Int32 { sluice_limiter_cancel(handle, key, now) }
    /// `sluice_limiter_pending`.
    func pending(_ key: sluice_key_t, now: UInt64) -> Int32 { sluice_limiter_pending(handle, key, now) }
    /// `sluice_limiter_close`.
    func close(_ mode: sluice_close_mode_t, now: UInt64) -> Int32 { sluice_limiter_close(handle, now, mode) }
    /// `sluice_limiter_advance` (every due timer).
    func advance(to now: UInt64) -> Int64 { sluice_limiter_advance(handle, now, 0) }
    /// `sluice_limiter_advance_into`: at most `maxTimers` timers (0: no
    /// bound), their emissions written to `out[0..<count]` (at most
    /// `capacity`) instead of reported to the event callback. Returns the
    /// timers handled, or a negative `SLUICE_E*`.
    @inlinable
    func advance(
        to now: UInt64, maxTimers: Int, into out: UnsafeMutablePointer<sluice_emission_t>, capacity: Int,
        count: inout Int
    ) -> Int64 {
        sluice_limiter_advance_into(handle, now, maxTimers, out, capacity, &count)
    }
    /// `sluice_limiter_next_deadline` (`UInt64.max`: none).
    var nextDeadline: UInt64 { sluice_limiter_next_deadline(handle) }

    /// `sluice_limiter_stats`.
    func stats() -> sluice_stats_t {
        var stats = sluice_stats_t()
        _ = sluice_limiter_stats(handle, &stats)
        return stats
    }

    /// `sluice_limiter_check` (the core's invariant checker).
    func check() -> Int32 { sluice_limiter_check(handle) }
}
