import CSluice

extension RateLimiter {
    /// The plans, in the limiter's order (the first is the default). A
    /// limiter of one policy has one plan, "default", whose one quota,
    /// "default", is the policy.
    public var plans: [RatePlan] {
        // `reading` throws only what its body throws.
        (try? planState.reading { $0.plans }) ?? []
    }

    /// Resolves a plan's name once, for calls that skip the lookup
    /// (``check(_:plan:cost:)-(_,RatePlanHandle,_)``).
    ///
    /// - Parameter name: the plan's name.
    /// - Returns: the plan's handle.
    /// - Throws: ``LimiterError/unknownPlan``.
    public func plan(named name: String) throws(LimiterError) -> RatePlanHandle {
        try planState.reading { (d) throws(LimiterError) in
            RatePlanHandle(name: name, index: try d.index(of: name), generation: d.generation)
        }
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
        guard cost >= 1, cost <= CPolicy.rateMax else { throw CPolicy.badCost(cost) }
        return try planState.reading { (d) throws(LimiterError) in
            try submitPlan(key, cost: cost, index: try d.index(of: plan), directory: d)
        }
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
        guard cost >= 1, cost <= CPolicy.rateMax else { throw CPolicy.badCost(cost) }
        return try planState.reading { (d) throws(LimiterError) in
            let index = d.generation == plan.generation ? plan.index : try d.index(of: plan.name)
            return try submitPlan(key, cost: cost, index: index, directory: d)
        }
    }

    /// The core call of a plan check (the plan lock held shared).
    private func submitPlan(
        _ key: Key, cost: Int, index: UInt32, directory: PlanDirectory
    ) throws(LimiterError) -> RateDecision {
        var decision = sluice_decision_t()
        var detail = sluice_plan_detail_t()
        let engine = self.engine
        let rc = key.withCoreKey {
            engine.submitPlan($0, cost: UInt64(cost), plan: index, into: &decision, detail: &detail)
        }
        try LimiterError.check(rc)
        var result = RateDecision(decision, now: decision.now)
        let plan = directory.plans[Int(index)]
        result.planFigures = RatePlanFigures(
            plan: plan.name, quotas: quotaFigures(detail, plan: plan, now: result.at.nanoseconds))
        return result
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
        guard cost >= 1, cost <= CPolicy.rateMax else { throw CPolicy.badCost(cost) }
        return try planState.reading { (d) throws(LimiterError) in
            let index = try d.index(of: plan)
            var quota = sluice_quota_t()
            var detail = sluice_plan_detail_t()
            let engine = self.engine
            let rc = key.withCoreKey {
                engine.quotaPlan($0, cost: UInt64(cost), plan: index, into: &quota, detail: &detail)
            }
            try LimiterError.check(rc)
            var result = RateQuota(quota, now: quota.now)
            let plan = d.plans[Int(index)]
            result.planFigures = RatePlanFigures(
                plan: plan.name, quotas: quotaFigures(detail, plan: plan, now: quota.now))
            return result
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
        try planState.writing { (d) throws(LimiterError) -> PlanDirectory in
            guard d.hasPlans else {
                throw LimiterError(
                    .invalidArgument,
                    reason:
                        "This rate limiter was created with one policy, not plans: create it with RateLimiter(plans:) to update its plans."
                )
            }
            // The limiter's maxQuotas: a plan with more quotas is refused here, by name.
            let table = try RatePlan.table(plans, maxQuotas: d.maxQuotas)
            let engine = self.engine
            try LimiterError.check(try table.withTable { engine.setPlans($0) })
            return PlanDirectory(plans, hasPlans: true, maxQuotas: d.maxQuotas)
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
