import CSluice

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

// Batched submission: many values handed to the core in one call
// (`sluice_limiter_submit_many` / `sluice_mt_submit_many`), with exactly the
// results of one call per value, in order.

extension LimiterEngine {
    /// The default batch: one ``submit(_:token:cost:into:)`` per call, in order.
    func submitMany(
        _ calls: UnsafePointer<sluice_call_t>, count: Int, decisions: UnsafeMutablePointer<sluice_decision_t>,
        results: UnsafeMutablePointer<Int32>
    ) {
        for i in 0..<count {
            results[i] = submit(calls[i].key, token: calls[i].token, cost: calls[i].cost, into: &decisions[i])
        }
    }
}

extension LimiterStorage {
    /// Submits values in order at one time: what ``submit(_:for:cost:)``
    /// does for each, with one lock round and one core call for the batch,
    /// then calls `body` with each call's result code and decision, in order.
    /// Inlinable (specialized for Key and Value in the caller); the calls,
    /// decisions, results and the copied key bytes live in temporary
    /// allocations (on the stack when small).
    @inlinable
    func submitMany<S: Sequence<(Value, Key)>>(
        _ items: S, cost: UInt64, _ body: (Int32, sluice_decision_t) -> Void
    ) {
        checkNotCombining()
        let list = ContiguousArray(items)
        let n = list.count
        if n == 0 { return }
        var byteCount = 0
        for item in list {
            item.1.withCoreKey { if $0.kind != SLUICE_KEY_U64 { byteCount += $0.len } }
        }
        withUnsafeTemporaryAllocation(of: sluice_call_t.self, capacity: n) { calls in
            withUnsafeTemporaryAllocation(of: sluice_decision_t.self, capacity: n) { decisions in
                withUnsafeTemporaryAllocation(of: Int32.self, capacity: n) { results in
                    withUnsafeTemporaryAllocation(of: UInt8.self, capacity: max(byteCount, 1)) { bytes in
                        // Every key as the core takes it, byte keys copied so
                        // that all stay valid for the one C call.
                        var offset = 0
                        for i in 0..<n {
                            let key: sluice_key_t = list[i].1.withCoreKey { k in
                                guard k.kind != SLUICE_KEY_U64, k.len > 0, let p = k.bytes else { return k }
                                let at = bytes.baseAddress! + offset
                                at.initialize(from: p.assumingMemoryBound(to: UInt8.self), count: k.len)
                                offset += k.len
                                return sluice_key_bytes(UnsafeRawPointer(at), k.len)
                            }
                            (calls.baseAddress! + i).initialize(to: sluice_call_t(key: key, token: 0, cost: cost))
                            (decisions.baseAddress! + i).initialize(to: sluice_decision_t())
                            (results.baseAddress! + i).initialize(to: 0)
                        }
                        let engine = self.engine!
                        lock.lock()
                        for i in 0..<n { calls[i].token = slots.insert(key: list[i].1, value: list[i].0) }
                        if serial {
                            engine.submitMany(
                                calls.baseAddress!, count: n, decisions: decisions.baseAddress!,
                                results: results.baseAddress!)
                        } else {
                            lock.unlock()
                            engine.submitMany(
                                calls.baseAddress!, count: n, decisions: decisions.baseAddress!,
                                results: results.baseAddress!)
                            lock.lock()
                        }
                        for i in 0..<n where results[i] < 0 || (decisions[i].kind == SLUICE_DROPPED && !observesDrops) {
                            // Not taken, or dropped without a report: released here.
                            _ = slots.remove(calls[i].token)
                        }
                        let mustDrain = claimDrain()
                        lock.unlock()
                        if mustDrain { deliverOutbox() }
                        for i in 0..<n { body(results[i], decisions[i]) }
                    }
                }
            }
        }
    }
}

extension Limiter {
    /// Submits many values at once, each for its key, and returns their
    /// decisions in order.
    ///
    /// The result is exactly that of calling ``submit(_:for:)`` for each
    /// pair in order, at one instant (the same key may appear several times:
    /// each call sees what the previous ones did), but the values go to the
    /// core in one call: their keys are hashed first and the core's memory
    /// for them is fetched ahead, and the limiter's lock is taken once (on a
    /// loop, each shard's lock once per group of calls). Emitted values are
    /// delivered in each key's order, as for single calls.
    ///
    /// A call that fails (``LimiterError/full``, ``LimiterError/keyTooLong``,
    /// ``LimiterError/closed``…) does not stop the others: its slot in the
    /// result holds the error, and its value was not taken.
    ///
    /// ```swift
    /// let clock = ManualLimiterClock()
    /// let limiter = try Limiter<String, Int>(
    ///     .throttle(interval: .seconds(1)), scheduler: .manual(clock), handler: { key, value in print(key, value) })
    /// let decisions = limiter.submit(contentsOf: [(1, "a"), (2, "a"), (3, "b")])   // prints "a 1", "b 3"
    /// print(try decisions.map { try $0.get() })   // [emitted, scheduled(at: t+1s), emitted]
    /// ```
    ///
    /// - Parameter items: (value, key) pairs, in the order of the calls.
    /// - Returns: one result per pair, in order.
    /// - Complexity: O(n) on average.
    @inlinable
    @discardableResult
    public func submit<S: Sequence<(Value, Key)>>(contentsOf items: S) -> [Result<Decision, LimiterError>] {
        var out = [Result<Decision, LimiterError>]()
        out.reserveCapacity(items.underestimatedCount)
        storage.submitMany(items, cost: 1) { rc, decision in
            if rc < 0 {
                out.append(.failure(LimiterError(rawValue: rc)))
                return
            }
            switch decision.kind {
            case SLUICE_EMITTED: out.append(.success(.emitted))
            case SLUICE_SCHEDULED: out.append(.success(.scheduled(at: LimiterInstant(nanoseconds: decision.at))))
            default: out.append(.success(.dropped(retryAt: LimiterInstant(nanoseconds: decision.at))))
            }
        }
        return out
    }
}
