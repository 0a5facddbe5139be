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
    /// does for each, with one lock round and one core call for the batch
    /// (on a manual clock, one per group of ``manualBatchGroup`` calls, all
    /// at the time read once for the batch), and writes each call's return
    /// code to `results[i]` and, when it is 0, its decision to
    /// `decisions[i]` (`list.count` of each; see ``batchResult(_:_:)``);
    /// returns after the lock is released and the outbox delivered.
    /// Inlinable (specialized for Key and Value in the caller); the buffers
    /// are temporary allocations, on the stack for the usual batch sizes.
    @inlinable
    func submitMany(
        _ list: UnsafeBufferPointer<(Value, Key)>, cost: UInt64, decisions: UnsafeMutablePointer<sluice_decision_t>,
        results: UnsafeMutablePointer<Int32>
    ) {
        checkNotCombining()
        if list.isEmpty { return }
        if let manual {
            manual.pointee.engine._withUnsafeGuaranteedRef {
                submitManyManual($0, list, cost: cost, decisions: decisions, results: results)
            }
            return
        }
        let n = list.count
        withBatchKeys(list) { keys in
            withUnsafeTemporaryAllocation(of: sluice_call_t.self, capacity: n) { callBuffer in
                let calls = callBuffer.baseAddress!
                for i in 0..<n {
                    (calls + i).initialize(to: sluice_call_t(key: keys.key(i), token: 0, cost: cost))
                    (decisions + i).initialize(to: sluice_decision_t())
                    (results + i).initialize(to: 0)
                }
                let engine = self.engine!
                if loopCounts {
                    // Counted once for the batch, without the lock (see ``loopHeld``).
                    countInOnLoop(n)
                    for i in 0..<n { calls[i].token = Self.token(of: list[i].0) }
                } else {
                    lock.lock()
                    for i in 0..<n { calls[i].token = hold(list[i].1, list[i].0) }
                    lock.unlock()
                }
                // (not a manual engine: called without `lock`)
                engine.submitMany(calls, count: n, decisions: decisions, results: results)
                lock.lock()
                var unreported = 0
                for i in 0..<n where results[i] < 0 || (decisions[i].kind == SLUICE_DROPPED && !observesDrops) {
                    // Not taken, or dropped without a report: released here.
                    if loopCounts {
                        unreported += 1
                    } else {
                        release(calls[i].token)
                    }
                }
                if unreported > 0 { countOut(unreported) }
                let mustDrain = claimDrain()
                lock.unlock()
                if mustDrain { deliverOutbox() }
            }
        }
    }

    /// A batched call's result, as ``Limiter/submit(_:for:)`` returns or
    /// throws it, from its return code and (when 0) its decision.
    @inlinable @inline(__always)
    static func batchResult(
        _ rc: Int32, _ decision: UnsafePointer<sluice_decision_t>
    ) -> Result<LimiterDecision, LimiterError> {
        if rc < 0 { return .failure(LimiterError(rawValue: rc)) }
        switch decision.pointee.kind {
        case SLUICE_EMITTED: return .success(.emitted)
        case SLUICE_SCHEDULED: return .success(.scheduled(at: LimiterInstant(nanoseconds: decision.pointee.at)))
        default: return .success(.dropped(retryAt: LimiterInstant(nanoseconds: decision.pointee.at)))
        }
    }

    /// Calls per core call of a batch on a manual clock (the core hashes and
    /// prefetches a group of 32 calls at a time): the group's calls are in
    /// ``batchCallBuffer()`` (allocated once), its decisions and bookkeeping
    /// fit the stack allocations of `withUnsafeTemporaryAllocation` (at
    /// most 1 KiB each), so a batch allocates nothing.
    @inlinable
    static var manualBatchGroup: Int { 32 }

    /// With `lock` held: the calls of one group of a batch on a manual clock
    /// (``manualBatchGroup`` of them; 48 bytes each, more than
    /// `withUnsafeTemporaryAllocation` places on the stack), allocated on
    /// the first batch. A batch fills and reads it within one critical
    /// section, so one buffer serves every batch.
    @inlinable @inline(__always)
    func batchCallBuffer() -> UnsafeMutablePointer<sluice_call_t> {
        if let batchCalls { return batchCalls }
        return allocateBatchCalls()
    }

    @usableFromInline @inline(never)
    func allocateBatchCalls() -> UnsafeMutablePointer<sluice_call_t> {
        let calls = UnsafeMutablePointer<sluice_call_t>.allocate(capacity: Self.manualBatchGroup)
        calls.initialize(repeating: sluice_call_t(), count: Self.manualBatchGroup)
        batchCalls = calls
        return calls
    }

    /// ``submitMany(_:cost:into:)`` on a manual clock: under the lock, each
    /// group of calls goes to the core in one
    /// ``ManualEngine/submitManyCollecting(calls:count:now:decisions:results:ends:)``,
    /// its events collected and then recorded here, specialized, each call's
    /// events before its own immediate decision, exactly as
    /// ``submit(_:for:cost:)`` records them for one call. The value slots
    /// those events name are read first, all together, so that their cache
    /// misses overlap.
    @inlinable
    func submitManyManual(
        _ engine: ManualEngine, _ list: UnsafeBufferPointer<(Value, Key)>, cost: UInt64,
        decisions allDecisions: UnsafeMutablePointer<sluice_decision_t>, results allResults: UnsafeMutablePointer<Int32>
    ) {
        let n = list.count
        let group = Swift.min(n, Self.manualBatchGroup)
        var byteCount = 0
        if !Key._sluiceIntegerIdentity {  // (integer keys have no bytes: a constant)
            for item in list {
                item.1.withCoreKey { if $0.kind != SLUICE_KEY_U64 { byteCount += $0.len } }
            }
        }
        // Byte keys are copied, so that they stay valid for their core call.
        withUnsafeTemporaryAllocation(of: UInt8.self, capacity: Swift.max(byteCount, 1)) { bytes in
            do {
                do {
                    do {
                        withUnsafeTemporaryAllocation(of: Int.self, capacity: group) { endBuffer in
                            withUnsafeTemporaryAllocation(of: UInt64.self, capacity: 2 * group) { deferredBuffer in
                                let ends = endBuffer.baseAddress!
                                let state = engine.state
                                var offset = 0
                                lock.lock()
                                let calls = batchCallBuffer()
                                let now = engine.clock.nowNanoseconds
                                // Unobserved drops of trivial values: their tokens
                                // kept by the callback, their slots freed together
                                // after each core call.
                                // (A compact limiter's callback counts them out itself.)
                                let deferring =
                                    !compact && quietDrops && SlotTable<Key, Value>.isTrivial
                                    && state.pointee.trivialSlots != nil
                                if deferring {
                                    state.pointee.deferred = deferredBuffer.baseAddress!
                                    state.pointee.deferredCapacity = 2 * group
                                    state.pointee.deferredCount = 0
                                }
                                var base = 0
                                // Read once (set in init; the loop's stores could alias them).
                                let compact = self.compact
                                let countsHeld = compact && !emitOnly
                                while base < n {
                                    let m = Swift.min(group, n - base)
                                    let decisions = allDecisions + base
                                    let results = allResults + base
                                    for j in 0..<m {
                                        let item = list[base &+ j]
                                        let key: sluice_key_t = item.1.withCoreKey { k in
                                            guard k.kind != SLUICE_KEY_U64, k.len > 0, let p = k.bytes else { return k }
                                            let at = bytes.baseAddress! + offset
                                            at.initialize(from: p.assumingMemoryBound(to: UInt8.self), count: k.len)
                                            offset += k.len
                                            return sluice_key_bytes(UnsafeRawPointer(at), k.len)
                                        }
                                        // hold(_:_:), with the mode read once
                                        let token: UInt64
                                        if compact {
                                            token = Self.token(of: item.0)
                                        } else {
                                            token = slots.insert(key: item.1, value: item.0)
                                        }
                                        (calls + j).initialize(to: sluice_call_t(key: key, token: token, cost: cost))
                                        // (decisions[j] is written by the core for a call that
                                        // succeeds, and read only then)
                                    }
                                    if countsHeld { slots.count &+= m }
                                    engine.submitManyCollecting(
                                        calls: calls, count: m, now: now, decisions: decisions, results: results,
                                        ends: ends)
                                    if deferring, state.pointee.deferredCount > 0 {
                                        slots.discardTogether(
                                            deferredBuffer.baseAddress!, count: state.pointee.deferredCount)
                                        state.pointee.deferredCount = 0
                                    }
                                    recordBatchLocked(
                                        engine, calls: calls, count: m, now: now, decisions: decisions,
                                        results: results,
                                        ends: ends)
                                    base += m
                                }
                                if deferring {
                                    state.pointee.deferred = nil
                                    state.pointee.deferredCapacity = 0
                                }
                                let mustDrain = claimDrain()
                                lock.unlock()
                                if mustDrain { deliverOutbox() }
                            }
                        }
                    }
                }
            }
        }
    }

    /// With `lock` held, after a collecting batch on the manual engine:
    /// records the core's events and each call's immediate decision in the
    /// order of single calls (call i's events, then its emission or reported
    /// drop), and releases the values not taken, as ``submit(_:for:cost:)``
    /// does for each call.
    @inlinable @inline(__always)
    func recordBatchLocked(
        _ engine: ManualEngine, calls: UnsafePointer<sluice_call_t>, count n: Int, now: UInt64,
        decisions: UnsafePointer<sluice_decision_t>, results: UnsafePointer<Int32>, ends: UnsafePointer<Int>
    ) {
        let events = engine.collected
        let eventCount = engine.collectedCount
        if eventCount == 0 {
            // No event (the everyday batch on live keys, and every batch of
            // an emit-only limiter that fired nothing): each call's own
            // decision only: nothing to do for a kept value, the others out
            // of line.
            for i in 0..<n where results[i] != 0 || decisions[i].kind != SLUICE_SCHEDULED {
                recordDecisionOutOfLine(i, calls: calls, now: now, decisions: decisions, results: results)
            }
            return
        }
        if !compact && eventCount > 1 { slots.touch(events, count: eventCount) }
        var k = 0
        for i in 0..<n {
            let end = ends[i]
            while k < end {
                let event = events[k]
                if event.kind == SLUICE_EVENT_DROP && quietDrops {
                    release(event.token)  // superseded or dropped, unobserved: released here
                } else {
                    recordLocked(event)
                }
                k &+= 1
            }
            recordDecisionLocked(i, calls: calls, now: now, decisions: decisions, results: results)
        }
        engine.collectedCount = 0
    }

    /// ``recordDecisionLocked(_:calls:now:decisions:results:)``, out of line.
    @inlinable @inline(never)
    func recordDecisionOutOfLine(
        _ i: Int, calls: UnsafePointer<sluice_call_t>, now: UInt64, decisions: UnsafePointer<sluice_decision_t>,
        results: UnsafePointer<Int32>
    ) {
        recordDecisionLocked(i, calls: calls, now: now, decisions: decisions, results: results)
    }

    /// With `lock` held: call i of a batch group (its events recorded):
    /// records its emission or reported drop, and releases its value if not
    /// taken.
    @inlinable @inline(__always)
    func recordDecisionLocked(
        _ i: Int, calls: UnsafePointer<sluice_call_t>, now: UInt64, decisions: UnsafePointer<sluice_decision_t>,
        results: UnsafePointer<Int32>
    ) {
        let token = calls[i].token
        guard results[i] == 0 else {
            release(token)  // not taken: released here
            return
        }
        let kind = decisions[i].kind
        if kind == SLUICE_EMITTED {
            recordLocked(
                EngineEvent(kind: SLUICE_EVENT_EMIT, token: token, at: now, successor: nil, key: calls[i].key.u64))
        } else if kind == SLUICE_DROPPED {
            if observesDrops {
                recordLocked(
                    EngineEvent(kind: SLUICE_EVENT_DROP, token: token, at: now, successor: nil, key: calls[i].key.u64))
            } else {
                release(token)  // dropped without a report: released here
            }
        }
    }
}

/// A batch's keys as the core takes them: integer keys as they are, byte
/// keys copied into one temporary buffer so that all stay valid for the
/// whole batch.
@usableFromInline
struct BatchKeys {
    @usableFromInline let keys: UnsafeMutablePointer<sluice_key_t>

    @inlinable
    init(_ keys: UnsafeMutablePointer<sluice_key_t>) { self.keys = keys }

    @inlinable @inline(__always)
    func key(_ i: Int) -> sluice_key_t { keys[i] }
}

/// Calls `body` with the keys of a batch (see ``BatchKeys``), in temporary
/// allocations.
@inlinable
func withBatchKeys<Value, Key: LimiterKey, R>(
    _ list: UnsafeBufferPointer<(Value, Key)>, _ body: (BatchKeys) -> R
) -> R {
    let n = list.count
    var byteCount = 0
    for item in list {
        item.1.withCoreKey { if $0.kind != SLUICE_KEY_U64 { byteCount += $0.len } }
    }
    return withUnsafeTemporaryAllocation(of: sluice_key_t.self, capacity: n) { keyBuffer in
        withUnsafeTemporaryAllocation(of: UInt8.self, capacity: Swift.max(byteCount, 1)) { bytes in
            let keys = keyBuffer.baseAddress!
            var offset = 0
            for i in 0..<n {
                let key: sluice_key_t = list[i].1.withCoreKey { k in
                    guard k.kind != SLUICE_KEY_U64, k.len > 0, let p = k.bytes else { return k }
                    let at = bytes.baseAddress! + offset
                    at.initialize(from: p.assumingMemoryBound(to: UInt8.self), count: k.len)
                    offset += k.len
                    return sluice_key_bytes(UnsafeRawPointer(at), k.len)
                }
                (keys + i).initialize(to: key)
            }
            return body(BatchKeys(keys))
        }
    }
}

extension SlotTable {
    /// Releases held tokens (``discard(_:)`` for each), after reading all
    /// their slots first, together, so that the cache misses overlap.
    @inlinable @inline(__always)
    mutating func discardTogether(_ tokens: UnsafePointer<UInt64>, count: Int) {
        if used > 8192 {
            for k in 0..<count where slot(of: tokens[k]) == nil { staleToken() }
        }
        for k in 0..<count { discard(tokens[k]) }
    }

    /// Checks that every event's token is held, reading all their slots
    /// first, together, so that their cache misses overlap before the
    /// events are recorded one by one (each event is a token's fate: its
    /// token is held until it is recorded). Only for a table larger than
    /// the caches near the CPU: a small one is there already.
    @inlinable @inline(__always)
    func touch(_ events: UnsafePointer<EngineEvent>, count: Int) {
        guard used > 8192 else { return }
        for k in 0..<count where slot(of: events[k].token) == nil { staleToken() }
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
    /// print(try decisions.map { try $0.get() })   // [emitted, scheduled(at: 1.000000s on the limiter clock), emitted]
    /// ```
    ///
    /// - Parameter items: (value, key) pairs, in the order of the calls.
    /// - Returns: one result per pair, in order.
    /// - Complexity: O(n) on average.
    @inlinable
    @discardableResult
    public func submit<S: Sequence<(Value, Key)>>(contentsOf items: S) -> [Result<Decision, LimiterError>] {
        let list = ContiguousArray(items)
        return list.withUnsafeBufferPointer { list in
            let n = list.count
            if n == 0 { return [] }
            return withUnsafeTemporaryAllocation(of: sluice_decision_t.self, capacity: n) { decisionBuffer in
                withUnsafeTemporaryAllocation(of: Int32.self, capacity: n) { resultBuffer in
                    let decisions = decisionBuffer.baseAddress!, results = resultBuffer.baseAddress!
                    storage.submitMany(list, cost: 1, decisions: decisions, results: results)
                    return [Result<Decision, LimiterError>](unsafeUninitializedCapacity: n) { out, initialized in
                        for i in 0..<n {
                            (out.baseAddress.unsafelyUnwrapped + i).initialize(
                                to: LimiterStorage<Key, Value>.batchResult(results[i], decisions + i))
                        }
                        initialized = n
                    }
                }
            }
        }
    }

    /// Submits many values at once, each for its key, and calls `body` with
    /// each call's position and result, in order, without allocating the
    /// array of results that ``submit(contentsOf:)`` returns.
    ///
    /// The calls are exactly those of ``submit(contentsOf:)`` (and of
    /// ``submit(_:for:)`` for each pair in order, at one instant). `body`
    /// runs after the whole batch was submitted and its emissions were
    /// handed to the delivery, outside the limiter's lock (it may call the
    /// limiter), once per pair in order. The pairs are copied once into a
    /// contiguous buffer unless `items` is already an array.
    ///
    /// ```swift
    /// let clock = ManualLimiterClock()
    /// let limiter = try Limiter<String, Int>(
    ///     .throttle(interval: .seconds(1)), scheduler: .manual(clock), handler: { key, value in print(key, value) })
    /// var emitted = 0
    /// limiter.submit(contentsOf: [(1, "a"), (2, "a"), (3, "b")]) { _, result in
    ///     if case .success(.emitted) = result { emitted += 1 }
    /// }
    /// print(emitted)   // 2
    /// ```
    ///
    /// - Parameters:
    ///   - items: (value, key) pairs, in the order of the calls.
    ///   - body: receives the position of each pair in `items` and its
    ///     result (a failed call's value was not taken).
    /// - Complexity: O(n) on average.
    @inlinable
    public func submit<S: Sequence<(Value, Key)>>(
        contentsOf items: S, _ body: (Int, Result<Decision, LimiterError>) -> Void
    ) {
        // The closure captures the storage unretained (it runs within this
        // call, which holds `self` and so the storage): capturing `self`
        // would retain and release it, two atomic operations per batch.
        let storage = Unmanaged.passUnretained(self.storage)
        let run = { (list: UnsafeBufferPointer<(Value, Key)>) in
            if list.isEmpty { return }
            withUnsafeTemporaryAllocation(of: sluice_decision_t.self, capacity: list.count) { decisionBuffer in
                withUnsafeTemporaryAllocation(of: Int32.self, capacity: list.count) { resultBuffer in
                    let decisions = decisionBuffer.baseAddress!, results = resultBuffer.baseAddress!
                    storage._withUnsafeGuaranteedRef {
                        $0.submitMany(list, cost: 1, decisions: decisions, results: results)
                    }
                    for i in 0..<list.count {
                        body(i, LimiterStorage<Key, Value>.batchResult(results[i], decisions + i))
                    }
                }
            }
        }
        if let done: Void = items.withContiguousStorageIfAvailable(run) { return done }
        ContiguousArray(items).withUnsafeBufferPointer(run)
    }
}
