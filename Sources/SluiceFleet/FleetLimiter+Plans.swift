import CSluice
import CSluiceFleet
import Sluice

extension FleetLimiter {
    /// The plans, in the limiter's order (the first is the default); empty
    /// for a limiter of one policy.
    public var plans: [RatePlan] { planTable?.withLock { $0.plans } ?? [] }

    /// Decides about one call of `key` under the plan named `plan`, now (or,
    /// in manual-time mode, at `time`): admitted only when every quota of
    /// the plan admits it, and then charged to them all, in one script run;
    /// a refused call changes nothing.
    ///
    /// The decision's overall figures combine the quotas' (the least
    /// remaining, the latest full, the latest retry); each quota's own are in
    /// ``Sluice/RateDecision/quotas`` and the quotas that refused in
    /// ``Sluice/RateDecision/refusedQuotas`` (empty for a decision of the
    /// failure policy, fail open or closed, which read no quota).
    ///
    /// - Parameters:
    ///   - key: the key.
    ///   - plan: the plan's name.
    ///   - cost: the units the call weighs, 1 to 10^12.
    ///   - time: manual-time mode only: the call's time.
    /// - Returns: the decision.
    /// - Throws: ``Sluice/LimiterError/unknownPlan``,
    ///   ``Sluice/LimiterError/invalidArgument`` on a limiter without plans,
    ///   and what ``check(_:cost:at:)`` throws.
    public func check(
        _ key: Key, plan: String, cost: Int = 1, at time: LimiterInstant? = nil
    ) async throws(LimiterError) -> RateDecision {
        let (answer, chosen) = try await planRequest(key, plan: plan, cost: cost, time: time, quota: false)
        var decision = decision(answer)
        decision.plan = chosen.name
        decision.quotas = figures(answer, plan: chosen)
        return decision
    }

    /// Reads a key's quotas under the plan named `plan` without changing
    /// them (always a round trip): the overall figures, and each quota's in
    /// ``Sluice/RateQuota/quotas``.
    ///
    /// - Parameters:
    ///   - key: the key.
    ///   - plan: the plan's name.
    ///   - cost: the cost the retry times are computed for (1 by default).
    ///   - time: manual-time mode only: the read's time.
    /// - Returns: the quota.
    /// - Throws: as ``check(_:plan:cost:at:)``; a read Redis cannot answer
    ///   throws its cause.
    public func quota(
        for key: Key, plan: String, cost: Int = 1, at time: LimiterInstant? = nil
    ) async throws(LimiterError) -> RateQuota {
        let (answer, chosen) = try await planRequest(key, plan: plan, cost: cost, time: time, quota: true)
        var quota = try quota(answer)
        quota.plan = chosen.name
        quota.quotas = figures(answer, plan: chosen)
        return quota
    }

    /// Replaces the plans while the limiter runs, all or nothing: calls made
    /// from then on use the new table; each key keeps its consumption,
    /// converted by quota name at its next call (in Redis, so every process
    /// sees it). The local cache forgets what the old table taught.
    ///
    /// - Parameters:
    ///   - plans: the new table.
    ///   - fallback: the fallback limiter's new plans (fail local; `nil`: `plans`).
    /// - Throws: ``Sluice/LimiterError/invalidArgument`` (also on a limiter
    ///   without plans) or ``Sluice/LimiterError/outOfRange`` naming the
    ///   rule an invalid table breaks (nothing changed);
    ///   ``Sluice/LimiterError/closed``.
    public func update(plans: [RatePlan], fallback: [RatePlan]? = nil) throws(LimiterError) {
        guard let planTable else { throw Self.noPlans }
        let table = try RatePlan.table(plans, maxQuotas: nil)
        let fallbackTable = try fallback.map { (f) throws(LimiterError) in try RatePlan.table(f, maxQuotas: nil) }
        if let fallback { try FleetPlanTable.checkSameNames(plans, fallback) }
        let fleet = self.fleet
        try state.withLock { (state) throws(LimiterError) in
            if state.closed { throw .closed }
            try planTable.withLock { (current) throws(LimiterError) in
                let rc = try FleetPlanTable.withTables((table, fallbackTable)) { (p, f) throws(LimiterError) in
                    sluice_fleet_set_plans(fleet, p, f)
                }
                guard rc == 0 else { throw LimiterError(rawValue: rc) }
                current = FleetPlanTable(plans)
            }
        }
    }

    // MARK: - Plan requests

    static var noPlans: LimiterError {
        LimiterError(
            .invalidArgument,
            reason: "This FleetLimiter has no plans; make it with FleetLimiter(plans:configuration:) to name plans.")
    }

    /// Sends a call or quota read under `plan`, resolved and sent under the
    /// table's lock (an update between the two cannot change what the index
    /// means). Returns the answer and the plan it was made under.
    private func planRequest(
        _ key: Key, plan: String, cost: Int, time: LimiterInstant?, quota: Bool
    ) async throws(LimiterError) -> (Answer, RatePlan) {
        guard let planTable else { throw Self.noPlans }
        let cost = try Self.validCost(cost)
        let now = try callTime(time)
        let chosen = Locked<RatePlan?>(nil)
        let answer = try await request(key) { fleet, k, user in
            planTable.withLock { table -> Int32 in
                guard let index = table.index[plan] else { return Int32(SLUICE_ENOPLAN.rawValue) }
                chosen.withLock { $0 = table.plans[Int(index)] }
                return quota
                    ? sluice_fleet_quota_plan(fleet, k, index, cost, now, fleetCallback, user)
                    : sluice_fleet_call_plan(fleet, k, index, cost, now, fleetCallback, user)
            }
        }
        guard let plan = chosen.withLock({ $0 }) else { throw .unknownPlan }
        return (answer, plan)
    }

    /// Each quota's figures of an answer under `plan`, on the local clock
    /// (none when the failure policy answered without reading a quota).
    private func figures(_ answer: Answer, plan: RatePlan) -> [RateQuotaFigures] {
        let detail = answer.result.detail
        let onto = clock(of: answer)
        let now = answer.result.now
        let n = min(Int(detail.nquotas), plan.quotas.count)
        return withUnsafeBytes(of: detail.quotas) { raw in
            let q = raw.bindMemory(to: sluice_quota_figures_t.self)
            return (0..<n).map { j in
                let f = q[j]
                return RateQuotaFigures(
                    name: plan.quotas[j].name, limit: Int(clamping: f.limit),
                    window: .nanoseconds(Int64(clamping: f.per_ns)), burst: Int(clamping: f.burst), at: onto(now),
                    remaining: Int(clamping: f.remaining), fullAt: onto(max(f.full, now)),
                    retryAt: f.retry == CPolicy.never ? nil : onto(max(f.retry, now)),
                    refused: detail.refused & (1 << UInt32(j)) != 0)
            }
        }
    }
}

extension FleetLimiter: RatePlanDecider where Key == String {
    /// The names of ``plans``, the default first (empty without plans).
    public var planNames: [String] { plans.map(\.name) }

    /// ``check(_:plan:cost:at:)`` now (the ``Sluice/RatePlanDecider`` requirement).
    ///
    /// - Parameters:
    ///   - key: the key.
    ///   - plan: the plan's name.
    ///   - cost: units, 1 to 10^12.
    /// - Returns: the decision.
    /// - Throws: as ``check(_:plan:cost:at:)``.
    public func check(_ key: String, plan: String, cost: Int) async throws(LimiterError) -> RateDecision {
        try await check(key, plan: plan, cost: cost, at: nil)
    }
}

/// A fleet limiter's table of plans as Swift sees it: the plans, and their
/// indices by name (the C limiter's indices).
struct FleetPlanTable: Sendable {
    let plans: [RatePlan]
    let index: [String: UInt32]

    init(_ plans: [RatePlan]) {
        self.plans = plans
        var index: [String: UInt32] = [:]
        for (i, p) in plans.enumerated() { index[p.name] = UInt32(i) }
        self.index = index
    }

    /// The C tables of a limiter of plans and its fallback, checked.
    static func cTables(
        _ plans: [RatePlan], fallback: [RatePlan]?, configuration: FleetConfiguration
    ) throws(LimiterError) -> (CPlanTable, CPlanTable?) {
        if case .local(let policy?) = configuration.onFailure {
            throw LimiterError(
                .invalidArgument,
                reason:
                    "Invalid FleetConfiguration.onFailure (.local(\(policy))): a FleetLimiter of plans falls back on "
                    + "plans; use .local(nil), and FleetLimiter(plans:fallback:) for other numbers.")
        }
        let table = try RatePlan.table(plans, maxQuotas: nil)
        guard let fallback else { return (table, nil) }
        try checkSameNames(plans, fallback)
        return (table, try RatePlan.table(fallback, maxQuotas: nil))
    }

    /// The fallback's plans must be the plans', by name and in order.
    static func checkSameNames(_ plans: [RatePlan], _ fallback: [RatePlan]) throws(LimiterError) {
        guard plans.map(\.name) == fallback.map(\.name) else {
            throw LimiterError(
                .invalidArgument,
                reason: "Invalid fallback plans: they must name the same plans in the same order ("
                    + "\(plans.map(\.name)) and \(fallback.map(\.name))).")
        }
    }

    /// `body` with pointers to the tables (NULL for none).
    static func withTables<R>(
        _ tables: (CPlanTable, CPlanTable?)?,
        _ body: (UnsafePointer<sluice_plans_t>?, UnsafePointer<sluice_plans_t>?) throws(LimiterError) -> R
    ) throws(LimiterError) -> R {
        guard let (table, fallback) = tables else { return try body(nil, nil) }
        return try table.withTable { (p) throws(LimiterError) -> R in
            guard let fallback else { return try body(p, nil) }
            return try fallback.withTable { (f) throws(LimiterError) -> R in try body(p, f) }
        }
    }
}
