import CSluice

extension RateLimiter {
    /// The plans, in the limiter's order (the first is the default). A
    /// limiter of one policy has one plan, "default", whose one quota,
    /// "default", is the policy.
    public var plans: [RatePlan] { planState.plans }

    /// Resolves a plan's name once, for calls that skip the lookup
    /// (``check(_:plan:cost:)-(_,RatePlanHandle,_)``).
    ///
    /// - Parameter name: the plan's name.
    /// - Returns: the plan's handle.
    /// - Throws: ``LimiterError/unknownPlan``.
    public func plan(named name: String) throws(LimiterError) -> RatePlanHandle {
        try planState.handle(named: name)
    }

    /// Decides about one call of `key` under the plan named `plan`, now:
    /// admitted only when every quota of the plan admits it, and then
    /// charged to them all; a refused call changes nothing.
    ///
    /// The decision's overall figures (``RateDecision/remaining``,
    /// ``RateDecision/fullAt``, a drop's ``RateDecision/retryAt``) combine
    /// the quotas' (the least, the latest, the latest); each quota's own are
    /// in ``RateDecision/quotas``, and the quotas that refused in
    /// ``RateDecision/refusedQuotas``. A key last charged under another
    /// plan keeps its consumed units, quota by quota matched by name.
    ///
    /// - Parameters:
    ///   - key: the key.
    ///   - plan: the plan's name (looked up in a table kept by the limiter;
    ///     ``plan(named:)`` resolves it once).
    ///   - cost: the units the call weighs (1 by default), 1 to 10^12.
    /// - Returns: the decision, with each quota's figures.
    /// - Throws: ``LimiterError/unknownPlan``, and what ``check(_:cost:)`` throws.
    public func check(_ key: Key, plan: String, cost: Int = 1) throws(LimiterError) -> RateDecision {
        try submitPlan(key, cost: cost, plan: .name(plan))
    }

    /// ``check(_:plan:cost:)-(_,String,_)`` with a plan resolved by
    /// ``plan(named:)`` (resolved again by name after ``update(plans:)``).
    ///
    /// - Parameters:
    ///   - key: the key.
    ///   - plan: the plan's handle.
    ///   - cost: the units the call weighs (1 by default), 1 to 10^12.
    /// - Returns: the decision, with each quota's figures.
    /// - Throws: as ``check(_:plan:cost:)-(_,String,_)``.
    public func check(_ key: Key, plan: RatePlanHandle, cost: Int = 1) throws(LimiterError) -> RateDecision {
        try submitPlan(key, cost: cost, plan: .handle(plan))
    }

    /// A plan check: the core call under the plan lock, held shared (see ``PlanState``).
    private func submitPlan(_ key: Key, cost: Int, plan: PlanReference) throws(LimiterError) -> RateDecision {
        guard cost >= 1, cost <= CPolicy.rateMax else { throw CPolicy.badCost(cost) }
        let engine = self.engine
        return try planState.decide(plan) { index, decision, detail in
            key.withCoreKey {
                engine.submitPlan($0, token: 0, cost: UInt64(cost), plan: index, into: &decision, detail: &detail)
            }
        }
    }

    /// Reads a key's quota under a plan now without changing it: the overall
    /// figures, and each quota's in ``RateQuota/quotas`` (``RateQuotaFigures/refused``:
    /// the quota would refuse a call of `cost` now). A key charged under
    /// another plan is read as converted, and stays as it was.
    ///
    /// - Parameters:
    ///   - key: the key.
    ///   - plan: the plan's name.
    ///   - cost: the cost `retryAt` is computed for (1 by default).
    /// - Returns: the quota.
    /// - Throws: ``LimiterError/unknownPlan``, and what ``quota(for:cost:)`` throws.
    public func quota(for key: Key, plan: String, cost: Int = 1) throws(LimiterError) -> RateQuota {
        try quotaPlan(key, cost: cost, plan: .name(plan))
    }

    /// ``quota(for:plan:cost:)-(_,String,_)`` with a plan resolved by
    /// ``plan(named:)``.
    ///
    /// - Parameters:
    ///   - key: the key.
    ///   - plan: the plan's handle.
    ///   - cost: the cost `retryAt` is computed for (1 by default).
    /// - Returns: the quota.
    /// - Throws: as ``quota(for:plan:cost:)-(_,String,_)``.
    public func quota(for key: Key, plan: RatePlanHandle, cost: Int = 1) throws(LimiterError) -> RateQuota {
        try quotaPlan(key, cost: cost, plan: .handle(plan))
    }

    /// A plan quota read: the core call under the plan lock, held shared.
    private func quotaPlan(_ key: Key, cost: Int, plan: PlanReference) throws(LimiterError) -> RateQuota {
        guard cost >= 1, cost <= CPolicy.rateMax else { throw CPolicy.badCost(cost) }
        let engine = self.engine
        return try planState.read(plan) { index, quota, detail in
            key.withCoreKey { engine.quotaPlan($0, cost: UInt64(cost), plan: index, into: &quota, detail: &detail) }
        }
    }

    /// Replaces the plans while the limiter runs: add or remove plans,
    /// change a quota's numbers, add or remove quotas. Keys keep their
    /// state, converted at their next call quota by quota, by name. All or
    /// nothing: on error the old plans stay. Calls under a plan wait for
    /// the replacement (calls without a plan do not); a call sees the old
    /// plans or the new ones, never a mix.
    ///
    /// Plan indices change (handles from ``plan(named:)`` are resolved
    /// again by name); the first plan is the new default.
    ///
    /// - Parameter plans: the new table (no plan with more quotas than the
    ///   limiter's `maxQuotas`).
    /// - Throws: ``LimiterError/invalidArgument`` or
    ///   ``LimiterError/outOfRange`` for an invalid table (the reason says
    ///   why) or a limiter created without plans, ``LimiterError/outOfMemory``,
    ///   ``LimiterError/closed``.
    public func update(plans: [RatePlan]) throws(LimiterError) {
        let engine = self.engine
        try planState.update(plans, limiter: "rate limiter", createWith: "RateLimiter(plans:)") {
            engine.setPlans($0)
        }
    }

    /// The core's index of the plan `name` (`sluice_*_plan_index`): Swift
    /// keeps its own table, which this checks in tests.
    func coreIndex(ofPlan name: String) throws(LimiterError) -> Int {
        var index: UInt32 = 0
        try LimiterError.check(engine.planIndex(name, into: &index))
        return Int(index)
    }
}
