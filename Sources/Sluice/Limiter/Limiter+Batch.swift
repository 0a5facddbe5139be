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

/// The keys of a batch copied into one buffer, so that every `sluice_key_t`
/// of the batch stays valid for the whole C call (a key's own bytes are only
/// lent inside `withCoreKey`).
struct BatchKeys {
    private var bytes: [UInt8] = []
    /// Per key: nil for a byte key (its bytes are at `spans`), else the integer.
    private var integers: [UInt64?] = []
    private var spans: [(offset: Int, length: Int)] = []

    init<Key: LimiterKey, S: Sequence<Key>>(_ keys: S) {
        for key in keys {
            key.withCoreKey { cKey in
                if cKey.kind == SLUICE_KEY_U64 {
                    integers.append(cKey.u64)
                    spans.append((0, 0))
                } else {
                    integers.append(nil)
                    spans.append((bytes.count, cKey.len))
                    if cKey.len > 0, let p = cKey.bytes {
                        bytes.append(contentsOf: UnsafeRawBufferPointer(start: p, count: cKey.len))
                    }
                }
            }
        }
    }

    var count: Int { integers.count }

    /// Calls `body` with the batch's calls (tokens and costs from the
    /// closures), valid only inside `body`.
    func withCalls<R>(
        token: (Int) -> UInt64, cost: (Int) -> UInt64, _ body: (UnsafeBufferPointer<sluice_call_t>) -> R
    ) -> R {
        bytes.withUnsafeBufferPointer { all in
            var calls = [sluice_call_t]()
            calls.reserveCapacity(count)
            for i in 0..<count {
                let key: sluice_key_t
                if let u = integers[i] {
                    key = sluice_key_u64(u)
                } else {
                    let start = spans[i].length > 0 ? UnsafeRawPointer(all.baseAddress! + spans[i].offset) : nil
                    key = sluice_key_bytes(start, spans[i].length)
                }
                calls.append(sluice_call_t(key: key, token: token(i), cost: cost(i)))
            }
            return calls.withUnsafeBufferPointer(body)
        }
    }
}

extension LimiterStorage {
    /// Submits values in order at one time: what ``submit(_:for:cost:)``
    /// does for each, with one lock round and one core call for the batch.
    /// Returns each call's result code and decision.
    func submitMany(_ items: [(value: Value, key: Key)], cost: UInt64) -> [(rc: Int32, decision: sluice_decision_t)] {
        checkNotCombining()
        let n = items.count
        if n == 0 { return [] }
        let keys = BatchKeys(items.lazy.map(\.key))
        var decisions = [sluice_decision_t](repeating: sluice_decision_t(), count: n)
        var results = [Int32](repeating: 0, count: n)
        var tokens = [UInt64](repeating: 0, count: n)
        let engine = self.engine!
        pthread_mutex_lock(lock.mutex)
        for i in 0..<n { tokens[i] = slots.insert(key: items[i].key, value: items[i].value) }
        let run = {
            keys.withCalls(token: { tokens[$0] }, cost: { _ in cost }) { calls in
                decisions.withUnsafeMutableBufferPointer { d in
                    results.withUnsafeMutableBufferPointer { r in
                        engine.submitMany(calls.baseAddress!, count: n, decisions: d.baseAddress!, results: r.baseAddress!)
                    }
                }
            }
        }
        if serial {
            run()
        } else {
            pthread_mutex_unlock(lock.mutex)
            run()
            pthread_mutex_lock(lock.mutex)
        }
        for i in 0..<n where results[i] < 0 || (decisions[i].kind == SLUICE_DROPPED && !observesDrops) {
            // Not taken, or dropped without a report: released here.
            _ = slots.remove(tokens[i])
        }
        let mustDrain = claimDrain()
        pthread_mutex_unlock(lock.mutex)
        if mustDrain { deliverOutbox() }
        return (0..<n).map { (results[$0], decisions[$0]) }
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
    /// let limiter = try Limiter<String, Int>(.throttle(.seconds(1)), clock: ManualLimiterClock())
    /// let decisions = limiter.submit(contentsOf: [(1, "a"), (2, "a"), (3, "b")])
    /// // [.success(.emitted), .success(.scheduled(at: …)), .success(.emitted)]
    /// ```
    ///
    /// - Parameter items: (value, key) pairs, in the order of the calls.
    /// - Returns: one result per pair, in order.
    /// - Complexity: O(n) on average.
    @discardableResult
    public func submit<S: Sequence<(Value, Key)>>(contentsOf items: S) -> [Result<Decision, LimiterError>] {
        let list = items.map { (value: $0.0, key: $0.1) }
        return storage.submitMany(list, cost: 1).map { rc, decision in
            if rc < 0 { return .failure(LimiterError(rawValue: rc)) }
            switch decision.kind {
            case SLUICE_EMITTED: return .success(.emitted)
            case SLUICE_SCHEDULED: return .success(.scheduled(at: LimiterInstant(nanoseconds: decision.at)))
            default: return .success(.dropped(retryAt: LimiterInstant(nanoseconds: decision.at)))
            }
        }
    }
}
