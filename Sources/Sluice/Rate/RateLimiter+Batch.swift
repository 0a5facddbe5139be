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
    /// // admitted, admitted, dropped, admitted
    /// ```
    ///
    /// - Parameter keys: the keys, in the order of the calls.
    /// - Returns: one result per key, in order; a failed call
    ///   (``LimiterError/full``, ``LimiterError/keyTooLong``,
    ///   ``LimiterError/closed``…) does not stop the others.
    /// - Complexity: O(n) on average.
    public func check<S: Sequence<Key>>(contentsOf keys: S) -> [Result<RateDecision, LimiterError>] {
        let list = Array(keys)
        return checkMany(list.count, keys: list, costs: { _ in 1 })
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
    public func check<S: Sequence<(Key, Int)>>(contentsOf calls: S) -> [Result<RateDecision, LimiterError>] {
        let list = Array(calls)
        let keys = list.map(\.0)
        return checkMany(list.count, keys: keys, costs: { list[$0].1 })
    }

    private func checkMany(_ n: Int, keys: [Key], costs: (Int) -> Int) -> [Result<RateDecision, LimiterError>] {
        if n == 0 { return [] }
        // Calls with a bad cost fail alone, as check(_:cost:) would; the
        // others go to the core.
        var index = [Int]()
        index.reserveCapacity(n)
        var out = [Result<RateDecision, LimiterError>?](repeating: nil, count: n)
        for i in 0..<n {
            let cost = costs(i)
            if cost >= 1, cost <= CPolicy.rateMax { index.append(i) } else { out[i] = .failure(CPolicy.badCost(cost)) }
        }
        let m = index.count
        if m > 0 {
            let batch = BatchKeys(index.lazy.map { keys[$0] })
            var decisions = [sluice_decision_t](repeating: sluice_decision_t(), count: m)
            var results = [Int32](repeating: 0, count: m)
            let engine = self.engine
            let now = engine.now
            batch.withCalls(token: { _ in 0 }, cost: { UInt64(costs(index[$0])) }) { calls in
                decisions.withUnsafeMutableBufferPointer { d in
                    results.withUnsafeMutableBufferPointer { r in
                        engine.submitMany(calls.baseAddress!, count: m, decisions: d.baseAddress!, results: r.baseAddress!)
                    }
                }
            }
            for j in 0..<m {
                out[index[j]] =
                    results[j] < 0
                    ? .failure(LimiterError(rawValue: results[j])) : .success(RateDecision(decisions[j], now: now))
            }
        }
        return out.map { $0! }
    }
}
