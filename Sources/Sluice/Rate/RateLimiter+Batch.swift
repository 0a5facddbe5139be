import CSluice

extension RateLimiter {
    /// Checks many calls at once, one per key, each of cost 1, and returns
    /// their decisions in order.
    ///
    /// The result is exactly that of calling ``check(_:cost:)`` for each key
    /// in order, at one instant (a key that appears several times counts
    /// each time), but the keys go to the core in one call: hashed first,
    /// their state fetched ahead, the lock taken once (on a loop, each
    /// shard's lock once per group of calls).
    ///
    /// ```swift
    /// let limiter = try RateLimiter<String>(limit: 2, per: .seconds(1))
    /// let decisions = limiter.check(contentsOf: ["a", "a", "a", "b"])
    /// print(try decisions.map { try $0.get().isAdmitted })   // [true, true, false, true]
    /// ```
    ///
    /// - Parameter keys: the keys, in the order of the calls.
    /// - Returns: one result per key, in order; a failed call
    ///   (``LimiterError/full``, ``LimiterError/keyTooLong``,
    ///   ``LimiterError/closed``…) does not stop the others.
    /// - Complexity: O(n) on average.
    @inlinable
    public func check<S: Sequence<Key>>(contentsOf keys: S) -> [Result<RateDecision, LimiterError>] {
        checkMany(ContiguousArray(keys.lazy.map { ($0, 1) }))
    }

    /// Checks many weighted calls at once and returns their decisions in
    /// order: exactly what ``check(_:cost:)`` gives for each (key, cost)
    /// pair in order, at one instant, in one call into the core.
    ///
    /// - Parameter calls: (key, cost) pairs in the order of the calls; a
    ///   cost below 1 or above 10^12 fails that call alone with
    ///   ``LimiterError/outOfRange``.
    /// - Returns: one result per pair, in order.
    /// - Complexity: O(n) on average.
    @inlinable
    public func check<S: Sequence<(Key, Int)>>(contentsOf calls: S) -> [Result<RateDecision, LimiterError>] {
        checkMany(ContiguousArray(calls))
    }

    /// Whether `cost` is accepted (1 to 10^12, as ``check(_:cost:)``).
    @usableFromInline
    static func costIsValid(_ cost: Int) -> Bool { cost >= 1 && cost <= CPolicy.rateMax }

    /// The error ``check(_:cost:)`` throws for a bad cost.
    @usableFromInline
    static func badCost(_ cost: Int) -> LimiterError { CPolicy.badCost(cost) }

    /// The Swift decision of a core decision (``check(_:cost:)``'s conversion).
    @usableFromInline
    static func decision(_ d: sluice_decision_t, now: UInt64) -> RateDecision { RateDecision(d, now: now) }

    /// The body of both batch checks: calls with a bad cost fail alone (as
    /// ``check(_:cost:)`` would), the others go to the core in one call.
    @inlinable
    func checkMany(_ list: ContiguousArray<(Key, Int)>) -> [Result<RateDecision, LimiterError>] {
        let n = list.count
        if n == 0 { return [] }
        // The results are written in place (no append, no uniqueness check per call).
        return [Result<RateDecision, LimiterError>](unsafeUninitializedCapacity: n) { buffer, initialized in
            let out = buffer.baseAddress!
            withBatchCalls(list.lazy.map(\.0), cost: { i in UInt64(clamping: list[i].1) }) {
                calls, decisions, results in
                // Bad costs never reach the core: the good calls are packed first.
                var m = 0
                for i in 0..<n where Self.costIsValid(list[i].1) {
                    calls[m] = calls[i]
                    m += 1
                }
                if m > 0 { engine.submitMany(calls, count: m, decisions: decisions, results: results) }
                var j = 0
                for i in 0..<n {
                    let cost = list[i].1
                    guard Self.costIsValid(cost) else {
                        (out + i).initialize(to: .failure(Self.badCost(cost)))
                        continue
                    }
                    (out + i).initialize(
                        to: results[j] < 0
                            ? .failure(LimiterError(rawValue: results[j]))
                            : .success(Self.decision(decisions[j], now: decisions[j].now)))
                    j += 1
                }
            }
            initialized = n
        }
    }
}

/// Calls `body` with the batch's calls (token 0, each call's cost from
/// `cost`), zeroed decisions and results, all in temporary allocations (on
/// the stack when small); byte keys are copied so that every key stays valid
/// for the whole C call.
@inlinable
func withBatchCalls<Key: LimiterKey, C: Collection<Key>>(
    _ keys: C, cost: (Int) -> UInt64,
    _ body: (UnsafeMutablePointer<sluice_call_t>, UnsafeMutablePointer<sluice_decision_t>, UnsafeMutablePointer<Int32>)
        -> Void
) {
    let n = keys.count
    var byteCount = 0
    for key in keys { key.withCoreKey { if $0.kind != SLUICE_KEY_U64 { byteCount += $0.len } } }
    withUnsafeTemporaryAllocation(of: sluice_call_t.self, capacity: n) { calls in
        withUnsafeTemporaryAllocation(of: sluice_decision_t.self, capacity: n) { decisions in
            withUnsafeTemporaryAllocation(of: Int32.self, capacity: n) { results in
                withUnsafeTemporaryAllocation(of: UInt8.self, capacity: max(byteCount, 1)) { bytes in
                    var offset = 0
                    var i = 0
                    for key in keys {
                        let cKey: sluice_key_t = key.withCoreKey { k in
                            guard k.kind != SLUICE_KEY_U64, k.len > 0, let p = k.bytes else { return k }
                            let at = bytes.baseAddress! + offset
                            at.initialize(from: p.assumingMemoryBound(to: UInt8.self), count: k.len)
                            offset += k.len
                            return sluice_key_bytes(UnsafeRawPointer(at), k.len)
                        }
                        (calls.baseAddress! + i).initialize(to: sluice_call_t(key: cKey, token: 0, cost: cost(i)))
                        (decisions.baseAddress! + i).initialize(to: sluice_decision_t())
                        (results.baseAddress! + i).initialize(to: 0)
                        i += 1
                    }
                    body(calls.baseAddress!, decisions.baseAddress!, results.baseAddress!)
                }
            }
        }
    }
}
