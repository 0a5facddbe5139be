import CSluice

/// A keyed rate limiter that only decides: `check` says at once whether a
/// call is admitted — with what is left of the key's quota — or dropped —
/// with when to retry. No values, no handler, no delivery: the shape a
/// server needs in front of a request.
///
/// ```swift
/// let limiter = try RateLimiter<String>(limit: 100, per: .seconds(60))
///
/// func respond(to request: Request) throws -> Response {
///     let decision = try limiter.check(request.apiKey)
///     guard decision.isAdmitted else {
///         return Response(status: 429, headers: RateLimitHeaders(limiter.policy, decision)!.fields)
///     }
///     return handle(request)
/// }
/// ```
///
/// The policy is ``LimiterPolicy/rate(limit:per:burst:)``: each key may make
/// `limit` calls per `per` on average, and up to `burst` at once (the limit
/// by default); a call that weighs `cost` units counts `cost` calls, admitted
/// whole or not at all (see `docs/semantics.md`). Keys are exact (any
/// ``LimiterKey``).
///
/// **Threads**: call it from any thread, concurrently. On a loop (the
/// default, ``LimiterScheduler/default``) the C loop layer shards keys over
/// locks, so checks on different keys mostly run in parallel, and time is
/// the system's monotonic clock. On a ``ManualLimiterClock``, time moves only
/// when the clock is advanced — for tests. Nothing is ever delivered, so no
/// code of yours runs on the limiter's threads.
///
/// - Complexity: `check` and `quota` are O(1) on average, and do not
///   allocate for a key that already has state.
public final class RateLimiter<Key: LimiterKey>: Sendable {
    @usableFromInline let engine: any LimiterEngine
    /// The loop limiter itself when the engine is a ``LoopEngine`` (`nil` on
    /// any other engine): ``check(_:cost:)`` calls it from the caller's own
    /// code, inlined and specialized for the key type, without the engine's
    /// dynamic dispatch (`sluice_mt_submit_with_options`). The engine owns it
    /// and frees it in `deinit`.
    @usableFromInline let loopLimiter: CLoopLimiter?
    /// The policy (a rate policy). A limiter of plans: the first quota of
    /// its default plan (the first plan) when it was created.
    public let policy: LimiterPolicy
    /// The plans: those given, or for a limiter of one policy a plan
    /// "default" of one quota "default" (the policy).
    let planState: PlanState

    /// Creates a rate limiter from a rate policy.
    ///
    /// - Parameters:
    ///   - policy: a ``LimiterPolicy/rate(limit:per:burst:)`` policy.
    ///   - scheduler: where time comes from (the default loop by default).
    ///   - maxKeys: a cap on keys with state, at least 1 (`nil` for none); a new key past
    ///     it is refused with ``LimiterError/full``. A key whose quota is whole
    ///     again has no state.
    /// - Throws: ``LimiterError/invalidArgument`` for a policy that is not
    ///   rate or invalid, ``LimiterError/outOfRange``, ``LimiterError/outOfMemory``.
    public init(
        _ policy: LimiterPolicy, scheduler: LimiterScheduler = .default, maxKeys: Int? = nil
    ) throws(LimiterError) {
        guard policy.isRate else {
            throw LimiterError(.invalidArgument, reason: "A RateLimiter needs a rate policy, not \(policy).")
        }
        self.policy = policy
        planState = PlanState(PlanDirectory(single: policy))
        do {
            let config = try LimiterStorage<Key, Never>.coreConfig(
                policy: policy, maxKeys: maxKeys, tick: nil, seed: nil)
            let engine = try scheduler.makeEngine(
                EngineSetup(config: config, reportImmediate: false, reportDrops: false, shards: 0, sink: .none))
            self.engine = engine
            loopLimiter = (engine as? LoopEngine)?.limiter
        } catch {
            throw LimiterError.explaining(error, policy: policy, maxKeys: maxKeys)
        }
    }

    /// Creates a rate limiter: at most `limit` calls per `per` for each key,
    /// on average, and up to `burst` at once.
    ///
    /// - Parameters:
    ///   - limit: calls per period, at least 1.
    ///   - per: the period.
    ///   - burst: calls admitted at once (`nil`: `limit`).
    ///   - scheduler: where time comes from (the default loop by default).
    ///   - maxKeys: a cap on keys with state, at least 1 (`nil` for none).
    /// - Throws: as ``init(_:scheduler:maxKeys:)``.
    public convenience init(
        limit: Int, per: Duration, burst: Int? = nil, scheduler: LimiterScheduler = .default, maxKeys: Int? = nil
    ) throws(LimiterError) {
        try self.init(.rate(limit: limit, per: per, burst: burst), scheduler: scheduler, maxKeys: maxKeys)
    }

    /// Creates a rate limiter of several quotas per key and plans: each call
    /// names its key's plan, and is admitted only when every quota of that
    /// plan admits it (see ``RatePlan``).
    ///
    /// ```swift
    /// let limiter = try RateLimiter<String>(plans: [
    ///     RatePlan("free", quotas: [.init("second", limit: 1, per: .seconds(1), burst: 3)]),
    ///     RatePlan("pro", quotas: [
    ///         .init("second", limit: 10, per: .seconds(1), burst: 30),
    ///         .init("day", limit: 10_000, per: .seconds(86_400)),
    ///     ]),
    /// ])
    /// let decision = try limiter.check("customer-7", plan: "pro")
    /// ```
    ///
    /// ``check(_:cost:)`` without a plan, the batch checks and
    /// ``quota(for:cost:)`` use the first plan, the default.
    ///
    /// - Parameters:
    ///   - plans: 1 to 65 536 plans with distinct names, the default first.
    ///   - scheduler: where time comes from (the default loop by default).
    ///   - maxKeys: a cap on keys with state, at least 1 (`nil` for none).
    ///   - maxQuotas: the most quotas a plan may ever have, 1 to 8, fixed
    ///     for the limiter's life: each key's state holds this many quotas
    ///     (8 bytes each; 16 in a block of the key's own under a plan with
    ///     a quota whose burst × period reaches 2^64 ns), and
    ///     ``update(plans:)`` may not exceed it.
    ///     `nil`: the most quotas of any plan given.
    /// - Throws: ``LimiterError/invalidArgument`` or ``LimiterError/outOfRange``
    ///   for an invalid table (the ``LimiterError/reason`` names the plan,
    ///   the quota and the rule), ``LimiterError/outOfMemory``.
    public init(
        plans: [RatePlan], scheduler: LimiterScheduler = .default, maxKeys: Int? = nil, maxQuotas: Int? = nil
    ) throws(LimiterError) {
        let setup = try PlanSetup(plans, maxQuotas: maxQuotas)
        if let problem = LimiterError.problem(maxKeys: maxKeys) {
            throw LimiterError(problem.code, reason: problem.sentence)
        }
        policy = setup.policy
        planState = PlanState(setup.directory)
        var config = sluice_config_t()
        if let maxKeys { config.max_keys = UInt64(maxKeys) }
        let engine = try setup.configuring(config) { (config) throws(LimiterError) -> any LimiterEngine in
            try scheduler.makeEngine(
                EngineSetup(config: config, reportImmediate: false, reportDrops: false, shards: 0, sink: .none))
        }
        self.engine = engine
        loopLimiter = (engine as? LoopEngine)?.limiter
    }

    deinit {
        _ = engine.close(SLUICE_CLOSE_DISCARD)
        engine.shutdown()
    }

    /// Decides about one call of `key` that weighs `cost` units, now.
    ///
    /// An admitted call counts against the key's quota; a dropped one changes
    /// nothing. A cost above the burst is never admitted: it is dropped with
    /// ``RateDecision/retryAt`` `nil`.
    ///
    /// On a loop, the call is inlined into the caller: the key's identity,
    /// the loop limiter's C call (which reads the clock once) and the
    /// decision, nothing else; a failure is thrown out of line.
    ///
    /// - Parameters:
    ///   - key: the key (a client, a tenant, a route, …).
    ///   - cost: the units the call weighs (1 by default), 1 to 10^12.
    /// - Returns: admitted (with `remaining` and `fullAt`) or dropped (with
    ///   `retryAt`, `retryAfter` and `retryAfterSeconds`).
    /// - Throws: ``LimiterError/outOfRange`` for a bad cost,
    ///   ``LimiterError/keyTooLong`` for a byte key over 1024 bytes,
    ///   ``LimiterError/full`` for a new key past `maxKeys`,
    ///   ``LimiterError/outOfMemory``, ``LimiterError/closed`` after ``close()``.
    @inlinable @inline(__always)
    public func check(_ key: Key, cost: Int = 1) throws(LimiterError) -> RateDecision {
        var decision = sluice_decision_t()
        // 1 ... 10^12 (CPolicy.rateMax), tested as one unsigned comparison.
        if let loop = loopLimiter, UInt(bitPattern: cost &- 1) < 1_000_000_000_000 {
            let rc = key.withCoreKey { loop.submit($0, token: 0, cost: UInt64(cost), into: &decision) }
            if rc < 0 { throw Self.failure(rc) }
        } else {
            try checkEngine(key, cost: cost, into: &decision)
        }
        // One RateDecision, made here from the core's: the caller sees its
        // source (`.limiter`) and plan (none) as constants, and destroys it
        // without a call (two paths returning a RateDecision each would meet
        // with unknown payloads, released per call).
        return RateDecision(decision, now: decision.now)
    }

    /// ``check(_:cost:)`` on an engine other than a loop, and a bad cost:
    /// the core's decision, in `decision`.
    @usableFromInline @inline(never)
    func checkEngine(_ key: Key, cost: Int, into decision: inout sluice_decision_t) throws(LimiterError) {
        guard cost >= 1, cost <= CPolicy.rateMax else { throw CPolicy.badCost(cost) }
        let engine = self.engine
        let rc = key.withCoreKey { engine.submit($0, token: 0, cost: UInt64(cost), into: &decision) }
        try LimiterError.check(rc)
    }

    /// The error of a failed core call (out of line: the caller's inlined
    /// ``check(_:cost:)`` keeps only the call).
    @usableFromInline @inline(never)
    static func failure(_ rc: Int32) -> LimiterError { LimiterError(rawValue: rc) }

    /// Reads a key's quota now without changing it (for a `RateLimit` header
    /// before the call is made, or a dashboard).
    ///
    /// - Parameters:
    ///   - key: the key.
    ///   - cost: the cost ``RateQuota/retryAt`` is computed for (1 by default).
    /// - Returns: the quota.
    /// - Throws: ``LimiterError/outOfRange``, ``LimiterError/keyTooLong``,
    ///   ``LimiterError/closed``.
    public func quota(for key: Key, cost: Int = 1) throws(LimiterError) -> RateQuota {
        guard cost >= 1, cost <= CPolicy.rateMax else { throw CPolicy.badCost(cost) }
        var quota = sluice_quota_t()
        let engine = self.engine
        let rc = key.withCoreKey { engine.quota($0, cost: UInt64(cost), into: &quota) }
        try LimiterError.check(rc)
        return RateQuota(quota, now: quota.now)
    }

    /// Forgets a key's history: its next call has the whole burst.
    ///
    /// - Parameter key: the key.
    /// - Throws: ``LimiterError/keyTooLong``, ``LimiterError/closed``.
    public func reset(_ key: Key) throws(LimiterError) {
        let engine = self.engine
        try LimiterError.check(key.withCoreKey { engine.cancel($0) })
    }

    /// Closes the limiter: every later call throws ``LimiterError/closed``.
    ///
    /// - Throws: ``LimiterError/closed`` if it was already closed.
    public func close() throws(LimiterError) {
        try LimiterError.check(engine.close(SLUICE_CLOSE_DISCARD))
    }

    /// The current time of the limiter's clock.
    public var now: LimiterInstant { LimiterInstant(nanoseconds: engine.now) }

    /// Counters: ``LimiterStatistics/admitted`` and
    /// ``LimiterStatistics/dropped`` calls, keys with state, memory.
    public var statistics: LimiterStatistics { LimiterStatistics(engine.stats()) }
}
