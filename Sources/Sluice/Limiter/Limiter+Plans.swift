import CSluice

/// Plans on a ``Limiter`` with the rate policy: several quotas per key,
/// chosen per call from a table of named plans, as on ``RateLimiter``
/// (see ``RatePlan``), with values delivered as every rate limiter
/// delivers them: an admitted value is emitted at once, a refused one is
/// dropped at once, and nothing is ever pending.
extension Limiter {
    /// Creates a rate limiter of several quotas per key and plans: each
    /// call names its key's plan (``submit(_:for:plan:cost:)-(_,_,String,_)``),
    /// and its value is emitted only when every quota of that plan admits
    /// it; otherwise it is dropped, and no quota is charged.
    ///
    /// ```swift
    /// let (events, emissions) = try Limiter<String, Event>.makeStream(plans: [
    ///     RatePlan("free", quotas: [
    ///         .init("second", limit: 2, per: .seconds(1)),
    ///         .init("minute", limit: 5, per: .seconds(60)),
    ///     ]),
    ///     RatePlan("pro", quotas: [
    ///         .init("second", limit: 10, per: .seconds(1)),
    ///         .init("minute", limit: 100, per: .seconds(60)),
    ///     ]),
    /// ])
    /// Task { for await emission in emissions { print("event of", emission.key) } }
    /// let decision = try events.submit(event, for: "customer-7", plan: "free")
    /// print(decision.refusedQuotas)  // [] when admitted
    /// ```
    ///
    /// The limiter's ``policy`` is the default plan's first quota. The
    /// calls without a plan (``submit(_:for:)``, ``submit(_:for:cost:)``,
    /// ``quota(for:cost:)``, the batches) use the first plan, the default.
    ///
    /// - Parameters:
    ///   - plans: 1 to 65 536 plans with distinct names, the default first.
    ///   - scheduler: where time comes from (the default loop by default).
    ///   - maxKeys: a cap on keys with state, at least 1 (`nil` for none);
    ///     a new key past it is refused with ``LimiterError/full``.
    ///   - maxQuotas: the most quotas a plan may ever have, 1 to 8, fixed
    ///     for the limiter's life (``update(plans:)`` may not exceed it);
    ///     `nil`: the most quotas of any plan given.
    ///   - delivery: where emissions go (see ``LimiterDelivery``).
    /// - Throws: ``LimiterError/invalidArgument`` or ``LimiterError/outOfRange``
    ///   for an invalid table (the ``LimiterError/reason`` names the plan,
    ///   the quota and the rule) or option, ``LimiterError/outOfMemory``.
    @inlinable
    public convenience init(
        plans: [RatePlan],
        scheduler: LimiterScheduler = .default,
        maxKeys: Int? = nil,
        maxQuotas: Int? = nil,
        delivery: LimiterDelivery<Key, Value>
    ) throws(LimiterError) {
        // @inlinable, so that the handlers are specialized in the caller.
        try self.init(
            plans: plans, scheduler: scheduler, maxKeys: maxKeys, maxQuotas: maxQuotas, delivery: delivery,
            seed: nil, makeSink: { LimiterStorage.makeSink($0) })
    }

    /// Creates a rate limiter of plans that calls `handler` for every
    /// emission (see ``init(plans:scheduler:maxKeys:maxQuotas:delivery:)``
    /// and ``LimiterDelivery/handler(_:)``).
    ///
    /// - Parameters:
    ///   - plans: 1 to 65 536 plans with distinct names, the default first.
    ///   - scheduler: where time comes from (the default loop by default).
    ///   - maxKeys: a cap on keys with state, at least 1 (`nil` for none).
    ///   - maxQuotas: the most quotas a plan may ever have, 1 to 8 (`nil`:
    ///     the most quotas of any plan given).
    ///   - handler: receives the key and the value of every emission.
    /// - Throws: as ``init(plans:scheduler:maxKeys:maxQuotas:delivery:)``.
    @inlinable
    public convenience init(
        plans: [RatePlan],
        scheduler: LimiterScheduler = .default,
        maxKeys: Int? = nil,
        maxQuotas: Int? = nil,
        handler: @escaping @Sendable (Key, Value) -> Void
    ) throws(LimiterError) {
        try self.init(
            plans: plans, scheduler: scheduler, maxKeys: maxKeys, maxQuotas: maxQuotas, delivery: .handler(handler))
    }

    /// Creates a rate limiter of plans together with an `AsyncStream` of
    /// its emissions (see ``init(plans:scheduler:maxKeys:maxQuotas:delivery:)``
    /// and ``makeStream(_:scheduler:maxKeys:bufferingPolicy:combine:)``).
    ///
    /// - Parameters:
    ///   - plans: 1 to 65 536 plans with distinct names, the default first.
    ///   - scheduler: where time comes from (the default loop by default).
    ///   - maxKeys: a cap on keys with state, at least 1 (`nil` for none).
    ///   - maxQuotas: the most quotas a plan may ever have, 1 to 8 (`nil`:
    ///     the most quotas of any plan given).
    ///   - bufferingPolicy: the stream's buffer (unbounded by default).
    /// - Returns: the limiter and its emissions; the stream finishes once
    ///   the limiter is closed or released.
    /// - Throws: as ``init(plans:scheduler:maxKeys:maxQuotas:delivery:)``.
    @inlinable
    public static func makeStream(
        plans: [RatePlan],
        scheduler: LimiterScheduler = .default,
        maxKeys: Int? = nil,
        maxQuotas: Int? = nil,
        bufferingPolicy: AsyncStream<Emission>.Continuation.BufferingPolicy = .unbounded
    ) throws(LimiterError) -> (limiter: Limiter, emissions: AsyncStream<Emission>) {
        let (stream, continuation) = AsyncStream<Emission>.makeStream(bufferingPolicy: bufferingPolicy)
        do {
            let limiter = try Limiter(
                plans: plans, scheduler: scheduler, maxKeys: maxKeys, maxQuotas: maxQuotas,
                delivery: LimiterDelivery(target: .stream(continuation)))
            return (limiter, stream)
        } catch {
            continuation.finish()
            throw error
        }
    }

    /// The plans, in the limiter's order (the first is the default). A
    /// limiter of one rate policy has one plan, "default", whose one quota,
    /// "default", is the policy; a limiter of any other policy has none.
    public var plans: [RatePlan] { storage.planState?.plans ?? [] }

    /// Resolves a plan's name once, for calls that skip the lookup
    /// (``submit(_:for:plan:cost:)-(_,_,RatePlanHandle,_)``).
    ///
    /// - Parameter name: the plan's name.
    /// - Returns: the plan's handle.
    /// - Throws: ``LimiterError/unknownPlan``; ``LimiterError/invalidArgument``
    ///   when the policy is not rate.
    public func plan(named name: String) throws(LimiterError) -> RatePlanHandle {
        try planState().handle(named: name)
    }

    /// Submits a value of `key` under the plan named `plan`, weighing
    /// `cost` units, and returns the decision at once: admitted only when
    /// every quota of the plan admits it — then charged to them all, and
    /// the value emitted, as ``submit(_:for:cost:)`` emits it — or refused,
    /// changing no quota, and the value dropped (released before this call
    /// returns, unless the delivery observes drops).
    ///
    /// The decision's overall figures (``RateDecision/remaining``,
    /// ``RateDecision/fullAt``, a drop's ``RateDecision/retryAt``) combine
    /// the quotas' (the least, the latest, the latest); each quota's own are
    /// in ``RateDecision/quotas``, and the quotas that refused in
    /// ``RateDecision/refusedQuotas``. A key last charged under another
    /// plan keeps its consumed units, quota by quota matched by name
    /// (`docs/semantics.md`, "Plans").
    ///
    /// ```swift
    /// let free = RatePlan("free", quotas: [
    ///     .init("second", limit: 2, per: .seconds(1)),
    ///     .init("minute", limit: 5, per: .seconds(60)),
    /// ])
    /// let events = try Limiter<UserID, Event>(plans: [free]) { user, event in
    ///     print("event of", user)
    /// }
    /// let decision = try events.submit(event, for: user, plan: "free")
    /// if !decision.isAdmitted {
    ///     print("refused by", decision.refusedQuotas, "retry in", decision.retryAfterSeconds ?? 0, "s")
    /// }
    /// ```
    ///
    /// - Parameters:
    ///   - value: the value.
    ///   - key: the key.
    ///   - plan: the plan's name (looked up in a table kept by the limiter;
    ///     ``plan(named:)`` resolves it once).
    ///   - cost: the units the call weighs (1 by default), 1 to 10^12.
    /// - Returns: the decision, with each quota's figures.
    /// - Throws: ``LimiterError/unknownPlan`` (nothing changed: the limiter
    ///   stays usable); ``LimiterError/invalidArgument`` when the policy is
    ///   not rate; ``LimiterError/outOfRange`` for a bad cost; and the
    ///   errors of ``submit(_:for:)``. The value was not taken (it is released).
    @discardableResult
    public func submit(_ value: Value, for key: Key, plan: String, cost: Int = 1) throws(LimiterError) -> RateDecision {
        try submitPlan(value, for: key, cost: cost, plan: .name(plan))
    }

    /// ``submit(_:for:plan:cost:)-(_,_,String,_)`` with a plan resolved by
    /// ``plan(named:)`` (resolved again by name after ``update(plans:)``).
    ///
    /// - Parameters:
    ///   - value: the value.
    ///   - key: the key.
    ///   - plan: the plan's handle.
    ///   - cost: the units the call weighs (1 by default), 1 to 10^12.
    /// - Returns: the decision, with each quota's figures.
    /// - Throws: as ``submit(_:for:plan:cost:)-(_,_,String,_)``.
    @discardableResult
    public func submit(
        _ value: Value, for key: Key, plan: RatePlanHandle, cost: Int = 1
    ) throws(LimiterError) -> RateDecision {
        try submitPlan(value, for: key, cost: cost, plan: .handle(plan))
    }

    /// Reads a key's quota under a plan now without changing it: the overall
    /// figures, and each quota's in ``RateQuota/quotas``
    /// (``RateQuotaFigures/refused``: the quota would refuse a call of
    /// `cost` now). A key charged under another plan is read as converted,
    /// and stays as it was.
    ///
    /// - Parameters:
    ///   - key: the key.
    ///   - plan: the plan's name.
    ///   - cost: the cost ``RateQuota/retryAt`` is computed for (1 by default).
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
    ///   - cost: the cost ``RateQuota/retryAt`` is computed for (1 by default).
    /// - Returns: the quota.
    /// - Throws: as ``quota(for:plan:cost:)-(_,String,_)``.
    public func quota(for key: Key, plan: RatePlanHandle, cost: Int = 1) throws(LimiterError) -> RateQuota {
        try quotaPlan(key, cost: cost, plan: .handle(plan))
    }

    /// Replaces the plans while the limiter runs: add or remove plans,
    /// change a quota's numbers, add or remove quotas. Keys keep their
    /// state, converted at their next call quota by quota, by name. All or
    /// nothing: on error the old plans stay. Calls under a plan wait for
    /// the replacement (calls without a plan do not); a call sees the old
    /// plans or the new ones, never a mix.
    ///
    /// Plan indices change (handles from ``plan(named:)`` are resolved
    /// again by name); the first plan is the new default. ``policy`` stays
    /// what it was at creation.
    ///
    /// - Parameter plans: the new table (no plan with more quotas than the
    ///   limiter's `maxQuotas`).
    /// - Throws: ``LimiterError/invalidArgument`` or
    ///   ``LimiterError/outOfRange`` for an invalid table (the reason says
    ///   why) or a limiter created without plans, ``LimiterError/outOfMemory``,
    ///   ``LimiterError/closed``.
    public func update(plans: [RatePlan]) throws(LimiterError) {
        let storage = self.storage
        var mustDrain = false
        // Delivered after the plan lock is given up (a delivery runs the
        // user's code, which may call this limiter).
        defer { if mustDrain { storage.deliverOutbox() } }
        try planState().update(plans, limiter: "limiter", createWith: "Limiter(plans:)") {
            let result = storage.setPlans($0)
            mustDrain = result.mustDrain
            return result.rc
        }
    }

    /// The plans, or the error of a limiter whose policy is not rate.
    private func planState() throws(LimiterError) -> PlanState {
        guard let planState = storage.planState else {
            throw LimiterError(
                .invalidArgument,
                reason:
                    "Plans need a rate limiter, not \(storage.policy): create the limiter with Limiter(plans:) or a rate policy."
            )
        }
        return planState
    }

    /// A submit under a plan: the core call under the plan lock, held
    /// shared; the delivery after it (see ``LimiterStorage/submitPlan(_:for:cost:plan:into:detail:)``).
    private func submitPlan(
        _ value: Value, for key: Key, cost: Int, plan: PlanReference
    ) throws(LimiterError) -> RateDecision {
        let planState = try planState()
        guard cost >= 1, cost <= CPolicy.rateMax else { throw CPolicy.badCost(cost) }
        let storage = self.storage
        var mustDrain = false
        defer { if mustDrain { storage.deliverOutbox() } }
        return try planState.decide(plan) { index, decision, detail in
            let result = storage.submitPlan(
                value, for: key, cost: UInt64(cost), plan: index, into: &decision, detail: &detail)
            mustDrain = result.mustDrain
            return result.rc
        }
    }

    /// A quota read under a plan (as ``submitPlan(_:for:cost:plan:)``).
    private func quotaPlan(_ key: Key, cost: Int, plan: PlanReference) throws(LimiterError) -> RateQuota {
        let planState = try planState()
        guard cost >= 1, cost <= CPolicy.rateMax else { throw CPolicy.badCost(cost) }
        let storage = self.storage
        var mustDrain = false
        defer { if mustDrain { storage.deliverOutbox() } }
        return try planState.read(plan) { index, quota, detail in
            let result = storage.quotaPlan(key, cost: UInt64(cost), plan: index, into: &quota, detail: &detail)
            mustDrain = result.mustDrain
            return result.rc
        }
    }

    /// The core's index of the plan `name` (tests: Swift keeps its own table).
    func coreIndex(ofPlan name: String) throws(LimiterError) -> Int {
        try storage.coreIndex(ofPlan: name)
    }
}
