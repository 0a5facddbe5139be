import CSluice
import Synchronization

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// A named list of rate quotas that must all admit a call: "10 per second
/// and 1000 per hour". A ``RateLimiter`` created with
/// ``RateLimiter/init(plans:scheduler:maxKeys:maxQuotas:)`` holds a table
/// of plans ("free", "pro", a customer's override), and each call names the
/// plan of its key.
///
/// ```swift
/// let free = RatePlan("free", quotas: [.init("second", limit: 1, per: .seconds(1), burst: 3)])
/// let pro = RatePlan(
///     "pro",
///     quotas: [
///         .init("second", limit: 10, per: .seconds(1)),
///         .init("hour", limit: 1000, per: .seconds(3600)),
///     ])
/// let limiter = try RateLimiter<String>(plans: [free, pro])
/// let decision = try limiter.check("customer-7", plan: "pro")
/// print(decision.refusedQuotas)  // [] when admitted
/// ```
///
/// The rules (`docs/semantics.md`, "Several quotas on one key" and
/// "Plans"):
///
/// - A call is admitted only when every quota of its plan admits it, and
///   then it is charged to them all. A refused call changes nothing.
/// - A key that changes plan (or whose plan ``RateLimiter/update(plans:)``
///   changed) keeps the units it consumed, quota by quota matched by
///   name, converted to the new quota's period; a quota the old plan lacks
///   starts whole.
///
/// Names are 1 to 32 characters of `A-Z a-z 0-9 _ . -`, distinct within a
/// table (plans) or a plan (quotas). A table has 1 to 65 536 plans, a plan 1
/// to 8 quotas. Each quota's numbers follow ``LimiterPolicy/rate(limit:per:burst:)``.
public struct RatePlan: Hashable, Sendable, CustomStringConvertible {
    /// One quota of a plan: at most `limit` calls per `per` on average, up to
    /// `burst` at once, under a name that identifies it in headers
    /// (`RateLimit-Policy`), problem bodies and plan changes.
    public struct Quota: Hashable, Sendable {
        /// The quota's name, unique within its plan.
        public var name: String
        /// Calls per period, 1 to 10^12.
        public var limit: Int
        /// The period (the window in `RateLimit-Policy`'s `w`).
        public var per: Duration
        /// Calls admitted at once, 1 to 10^12; `nil` for `limit`.
        public var burst: Int?

        /// A quota.
        ///
        /// - Parameters:
        ///   - name: 1 to 32 characters of `A-Z a-z 0-9 _ . -`.
        ///   - limit: calls per period, at least 1.
        ///   - per: the period, at least one nanosecond.
        ///   - burst: calls admitted at once (`nil`: `limit`).
        public init(_ name: String, limit: Int, per: Duration, burst: Int? = nil) {
            self.name = name
            self.limit = limit
            self.per = per
            self.burst = burst
        }

        /// The quota's numbers as a rate policy.
        public var policy: LimiterPolicy { .rate(limit: limit, per: per, burst: burst) }
    }

    /// The plan's name, unique within its table.
    public var name: String
    /// The quotas, in the order decisions report them.
    public var quotas: [Quota]

    /// A plan.
    ///
    /// - Parameters:
    ///   - name: 1 to 32 characters of `A-Z a-z 0-9 _ . -`.
    ///   - quotas: 1 to 8 quotas with distinct names.
    public init(_ name: String, quotas: [Quota]) {
        self.name = name
        self.quotas = quotas
    }

    /// `pro: second 10/1.0 seconds (burst 30), hour 1000/3600.0 seconds`.
    public var description: String {
        let list = quotas.map { q in
            "\(q.name) \(q.limit)/\(q.per)" + (q.burst.map { " (burst \($0))" } ?? "")
        }
        return "\(name): " + list.joined(separator: ", ")
    }

    /// The most quotas in one plan (`SLUICE_PLAN_QUOTAS_MAX`).
    public static let maxQuotas = Int(SLUICE_PLAN_QUOTAS_MAX)
    /// The most plans in one table (`SLUICE_PLANS_MAX`).
    public static let maxPlans = Int(SLUICE_PLANS_MAX)
    /// The longest plan or quota name, in characters (`SLUICE_PLAN_NAME_MAX`).
    public static let maxNameLength = Int(SLUICE_PLAN_NAME_MAX)

    /// Checks a table of plans without creating a limiter.
    ///
    /// - Parameters:
    ///   - plans: the table, the default plan first.
    ///   - maxQuotas: the most quotas a plan may have (`nil`: the most of
    ///     any plan given), as ``RateLimiter/init(plans:scheduler:maxKeys:maxQuotas:)`` takes it.
    /// - Throws: ``LimiterError/invalidArgument`` or
    ///   ``LimiterError/outOfRange``, whose ``LimiterError/reason`` names the
    ///   plan, the quota and the rule.
    public static func validate(_ plans: [RatePlan], maxQuotas: Int? = nil) throws(LimiterError) {
        _ = try table(plans, maxQuotas: maxQuotas)
    }

    /// The C table of `plans`, checked: first in Swift (for a sentence in
    /// the API's words), then by the core (`sluice_plans_check`), which
    /// decides.
    package static func table(_ plans: [RatePlan], maxQuotas: Int?) throws(LimiterError) -> CPlanTable {
        if let problem = problem(in: plans, maxQuotas: maxQuotas) {
            throw LimiterError(problem.code, reason: problem.sentence)
        }
        let table = try CPlanTable(plans, maxQuotas: maxQuotas ?? 0)
        let (code, message) = table.check()
        if code < 0 {
            throw LimiterError(LimiterError(rawValue: code), reason: "Invalid plans: \(message).")
        }
        return table
    }

    /// Whether `name` is 1 to 32 characters of `A-Z a-z 0-9 _ . -` (the
    /// core's rule, `sluice_plan_name_valid`).
    static func isValidName(_ name: String) -> Bool { CPlans.isValidName(name) }

    /// The first rule a table breaks, with its code and a sentence naming
    /// the plan and the quota, or `nil`.
    static func problem(in plans: [RatePlan], maxQuotas: Int?) -> (code: LimiterError, sentence: String)? {
        func invalid(_ sentence: String) -> (code: LimiterError, sentence: String) {
            (.invalidArgument, "Invalid plans: \(sentence)")
        }
        func badName(_ what: String, _ name: String) -> (code: LimiterError, sentence: String) {
            invalid(
                "\(what) name \"\(name)\" must be 1 to \(maxNameLength) characters of A-Z, a-z, 0-9, '_', '.' and '-'."
            )
        }
        if plans.isEmpty { return invalid("a limiter needs at least one plan.") }
        if plans.count > maxPlans {
            return (.outOfRange, "Invalid plans: \(plans.count) plans; a limiter may have at most \(maxPlans).")
        }
        if let maxQuotas, maxQuotas < 1 || maxQuotas > Self.maxQuotas {
            return (
                .outOfRange,
                "Invalid maxQuotas (\(maxQuotas)): it must be 1 to \(Self.maxQuotas), or nil for the most quotas of any plan."
            )
        }
        var planNames = Set<String>()
        for plan in plans {
            guard isValidName(plan.name) else { return badName("plan", plan.name) }
            guard planNames.insert(plan.name).inserted else {
                return invalid("the plan name \"\(plan.name)\" is used twice.")
            }
            let most = maxQuotas ?? Self.maxQuotas
            guard !plan.quotas.isEmpty, plan.quotas.count <= most else {
                return invalid("plan \"\(plan.name)\" has \(plan.quotas.count) quotas; a plan needs 1 to \(most).")
            }
            var quotaNames = Set<String>()
            for quota in plan.quotas {
                guard isValidName(quota.name) else { return badName("plan \"\(plan.name)\": quota", quota.name) }
                guard quotaNames.insert(quota.name).inserted else {
                    return invalid("the quota name \"\(quota.name)\" is used twice in plan \"\(plan.name)\".")
                }
                if let p = quota.policy.problem {
                    return (p.code, "Invalid plans: plan \"\(plan.name)\", quota \"\(quota.name)\": \(p.sentence)")
                }
            }
        }
        return nil
    }
}

/// A plan of a ``RateLimiter`` resolved once by
/// ``RateLimiter/plan(named:)``: a call with it skips looking the name up.
/// It stays valid across ``RateLimiter/update(plans:)``: a handle made
/// before an update (or by another limiter) is resolved again by name, and
/// throws ``LimiterError/unknownPlan`` if the plan is gone.
public struct RatePlanHandle: Hashable, Sendable {
    /// The plan's name.
    public let name: String
    /// Its index in the limiter's table when resolved.
    let index: UInt32
    /// The table's generation when resolved.
    let generation: UInt64
}

/// One quota's figures in a plan decision (``RateDecision/quotas``) or a
/// quota read (``RateQuota/quotas``).
public struct RateQuotaFigures: Hashable, Sendable {
    /// The quota's name.
    public var name: String
    /// Its limit: calls per window (`RateLimit-Policy`'s `q`).
    public var limit: Int
    /// Its window, the period (`RateLimit-Policy`'s `w`).
    public var window: Duration
    /// Its burst: the most cost-1 calls it admits at once.
    public var burst: Int
    /// When the figures were read (the decision's or the read's instant).
    public var at: LimiterInstant
    /// Cost-1 calls this quota would admit now (after an admitted call: after it).
    public var remaining: Int
    /// When this quota's whole burst is back (`at` when it is).
    public var fullAt: LimiterInstant
    /// When a call of the asked cost would pass this quota (`at` when it
    /// would now, or did), or `nil` when never (the cost exceeds its burst).
    public var retryAt: LimiterInstant?
    /// Whether this quota refused the call (a decision), or would refuse a
    /// call of the asked cost now (a quota read).
    public var refused: Bool

    /// Creates figures.
    public init(
        name: String, limit: Int, window: Duration, burst: Int, at: LimiterInstant, remaining: Int,
        fullAt: LimiterInstant, retryAt: LimiterInstant?, refused: Bool
    ) {
        self.name = name
        self.limit = limit
        self.window = window
        self.burst = burst
        self.at = at
        self.remaining = remaining
        self.fullAt = fullAt
        self.retryAt = retryAt
        self.refused = refused
    }

    /// From the core's figures of quota `name`, read at `now`.
    init(_ q: sluice_quota_figures_t, name: String, now: UInt64, refused: Bool) {
        self.name = name
        limit = Int(clamping: q.limit)
        window = .nanoseconds(Int64(clamping: q.per_ns))
        burst = Int(clamping: q.burst)
        at = LimiterInstant(nanoseconds: now)
        remaining = Int(clamping: q.remaining)
        fullAt = LimiterInstant(nanoseconds: max(q.full, now))
        retryAt = q.retry == CPolicy.never ? nil : LimiterInstant(nanoseconds: max(q.retry, now))
        self.refused = refused
    }

    /// Whole seconds, rounded up, until this quota's whole burst is back (0
    /// when it is): `RateLimit`'s `t`.
    public var secondsUntilFull: Int {
        LimiterInstant.secondsRoundedUp(from: at, to: fullAt)
    }

    /// Whole seconds, rounded up, in this quota's window, at least 1:
    /// `RateLimit-Policy`'s `w`.
    public var windowSeconds: Int { RateLimitHeaders.windowSeconds(window) }
}

/// The plan part of a ``RateDecision`` or a ``RateQuota``: the plan's name
/// and each quota's figures, in one immutable box, so that a decision
/// without a plan carries a single `nil` reference (the single-quota
/// `check` builds its decision inline: one word more, no allocation).
@usableFromInline
final class RatePlanFigures: Hashable, Sendable {
    let plan: String?
    let quotas: [RateQuotaFigures]

    init(plan: String?, quotas: [RateQuotaFigures]) {
        self.plan = plan
        self.quotas = quotas
    }

    /// The box of `plan` and `quotas`, or `nil` when both are empty.
    static func make(plan: String?, quotas: [RateQuotaFigures]) -> RatePlanFigures? {
        plan == nil && quotas.isEmpty ? nil : RatePlanFigures(plan: plan, quotas: quotas)
    }

    @usableFromInline
    static func == (lhs: RatePlanFigures, rhs: RatePlanFigures) -> Bool {
        lhs === rhs || (lhs.plan == rhs.plan && lhs.quotas == rhs.quotas)
    }

    @usableFromInline
    func hash(into hasher: inout Hasher) {
        hasher.combine(plan)
        hasher.combine(quotas)
    }
}

/// The figures of every quota of a plan, from a core detail.
///
/// - Parameters:
///   - detail: the core's detail.
///   - plan: the plan it describes.
///   - now: the instant of the decision or read.
/// - Returns: one entry per quota, in the plan's order.
func quotaFigures(_ detail: sluice_plan_detail_t, plan: RatePlan, now: UInt64) -> [RateQuotaFigures] {
    let n = min(Int(detail.nquotas), plan.quotas.count, RatePlan.maxQuotas)
    return withUnsafeBytes(of: detail.quotas) { raw in
        let quotas = raw.bindMemory(to: sluice_quota_figures_t.self)
        return (0..<n).map { i in
            RateQuotaFigures(
                quotas[i], name: plan.quotas[i].name, now: now, refused: detail.refused & (1 << UInt32(i)) != 0)
        }
    }
}

/// The last generation given to a table of plans, by any limiter.
private let planGenerations = Atomic<UInt64>(0)

/// A rate limiter's table of plans as Swift sees it: the plans in the
/// core's order and their indices by name, with the table's generation:
/// unique to this table of this limiter (every table of every limiter gets
/// a new one), so a ``RatePlanHandle`` resolved by another limiter, or
/// before an update, is resolved again by name.
struct PlanDirectory: Sendable {
    let plans: [RatePlan]
    let indices: [String: UInt32]
    let generation: UInt64
    /// Whether the limiter was created with plans (`false`: one plan
    /// "default" of one quota "default", which cannot be updated).
    let hasPlans: Bool
    /// The most quotas a plan of this limiter may have (fixed at creation).
    let maxQuotas: Int

    init(_ plans: [RatePlan], hasPlans: Bool, maxQuotas: Int) {
        self.plans = plans
        self.maxQuotas = maxQuotas
        var indices: [String: UInt32] = [:]
        for (i, plan) in plans.enumerated() { indices[plan.name] = UInt32(i) }
        self.indices = indices
        generation = planGenerations.wrappingAdd(1, ordering: .relaxed).newValue
        self.hasPlans = hasPlans
    }

    /// The index of `name`, or ``LimiterError/unknownPlan`` naming the plans.
    func index(of name: String) throws(LimiterError) -> UInt32 {
        guard let index = indices[name] else {
            let names = plans.prefix(8).map { "\"\($0.name)\"" }.joined(separator: ", ")
            throw LimiterError(
                .unknownPlan,
                reason:
                    "The rate limiter has no plan named \"\(name)\"; its plans are \(names)\(plans.count > 8 ? ", …" : "")."
            )
        }
        return index
    }
}

/// The plans of a rate limiter, under a reader-writer lock: plan calls hold
/// it shared from the name's lookup to the end of the core call (so that
/// an index always names the plan Swift resolved), and
/// ``RateLimiter/update(plans:)`` holds it exclusive around the core's
/// replacement. Calls without a plan never take it.
final class PlanState: @unchecked Sendable {
    // @unchecked: `directory` is read under the lock shared, written under it exclusive.
    private var directory: PlanDirectory
    private let lock: UnsafeMutablePointer<pthread_rwlock_t>

    init(_ directory: PlanDirectory) {
        self.directory = directory
        lock = .allocate(capacity: 1)
        lock.initialize(to: pthread_rwlock_t())
        #if canImport(Glibc)
        // glibc prefers readers by default: under a steady stream of plan
        // calls an update could wait for ever. Writers first (calls wait for
        // an update that waits; none takes the lock twice).
        var attributes = pthread_rwlockattr_t()
        pthread_rwlockattr_init(&attributes)
        pthread_rwlockattr_setkind_np(&attributes, Int32(PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP))
        pthread_rwlock_init(lock, &attributes)
        pthread_rwlockattr_destroy(&attributes)
        #else
        pthread_rwlock_init(lock, nil)  // Darwin: writers are not starved
        #endif
    }

    deinit {
        pthread_rwlock_destroy(lock)
        lock.deallocate()
    }

    /// Runs `body` with the directory, the lock held shared.
    func reading<R>(_ body: (PlanDirectory) throws(LimiterError) -> R) throws(LimiterError) -> R {
        pthread_rwlock_rdlock(lock)
        defer { pthread_rwlock_unlock(lock) }
        return try body(directory)
    }

    /// Runs `body` with the directory, the lock held exclusive; `body`
    /// returns the new directory.
    func writing(_ body: (PlanDirectory) throws(LimiterError) -> PlanDirectory) throws(LimiterError) {
        pthread_rwlock_wrlock(lock)
        defer { pthread_rwlock_unlock(lock) }
        directory = try body(directory)
    }
}

// MARK: - What every limiter of plans shares

/// The plan a call names: by name, or by a handle from `plan(named:)`.
enum PlanReference {
    case name(String)
    case handle(RatePlanHandle)
}

extension PlanDirectory {
    /// The directory of a limiter of one rate policy: a plan "default" of
    /// one quota "default", the policy (which cannot be updated).
    init(single policy: LimiterPolicy) {
        let numbers = policy.rateLimit!
        self.init(
            [
                RatePlan(
                    "default", quotas: [.init("default", limit: numbers.limit, per: numbers.per, burst: numbers.burst)])
            ],
            hasPlans: false, maxQuotas: 1)
    }

    /// The index of the plan `reference` names: a handle of this table
    /// without a lookup, any other by name.
    func index(of reference: PlanReference) throws(LimiterError) -> UInt32 {
        switch reference {
        case .name(let name): return try index(of: name)
        case .handle(let handle):
            return handle.generation == generation ? handle.index : try index(of: handle.name)
        }
    }
}

/// A table of plans checked for a new limiter: the core's table, Swift's
/// directory and the policy the limiter reports (the default plan's first
/// quota). ``RateLimiter`` and ``Limiter`` are created from one.
struct PlanSetup {
    let table: CPlanTable
    let directory: PlanDirectory
    let policy: LimiterPolicy

    /// Checks `plans` (see ``RatePlan/table(_:maxQuotas:)``).
    ///
    /// - Throws: ``LimiterError/invalidArgument`` or
    ///   ``LimiterError/outOfRange`` naming the plan, the quota and the rule.
    init(_ plans: [RatePlan], maxQuotas: Int?) throws(LimiterError) {
        table = try RatePlan.table(plans, maxQuotas: maxQuotas)
        directory = PlanDirectory(plans, hasPlans: true, maxQuotas: maxQuotas ?? plans.map(\.quotas.count).max()!)
        policy = plans[0].quotas[0].policy
    }

    /// Runs `body` with `config` made a configuration of plans (the core's
    /// `sluice_rate_plans()` policy, and this table, valid during `body`:
    /// the core copies it).
    func configuring<R>(
        _ config: sluice_config_t, _ body: (sluice_config_t) throws(LimiterError) -> R
    ) throws(LimiterError) -> R {
        var config = config
        config.policy = sluice_rate_plans()
        return try table.withTable { (table) throws(LimiterError) -> R in
            config.plans = table
            return try body(config)
        }
    }
}

extension PlanState {
    /// A handle of the plan `name` (`plan(named:)`).
    func handle(named name: String) throws(LimiterError) -> RatePlanHandle {
        try reading { (d) throws(LimiterError) in
            RatePlanHandle(name: name, index: try d.index(of: name), generation: d.generation)
        }
    }

    /// A call under a plan: resolves `plan`, and with the lock held shared
    /// runs `call`, the core call of the plan's index (returns its result,
    /// 0 or a negative `SLUICE_E*`); then makes the decision with each
    /// quota's figures.
    func decide(
        _ plan: PlanReference, _ call: (UInt32, inout sluice_decision_t, inout sluice_plan_detail_t) -> Int32
    ) throws(LimiterError) -> RateDecision {
        try reading { (d) throws(LimiterError) in
            let index = try d.index(of: plan)
            var decision = sluice_decision_t()
            var detail = sluice_plan_detail_t()
            try LimiterError.check(call(index, &decision, &detail))
            var result = RateDecision(decision, now: decision.now)
            let plan = d.plans[Int(index)]
            result.planFigures = RatePlanFigures(
                plan: plan.name, quotas: quotaFigures(detail, plan: plan, now: decision.now))
            return result
        }
    }

    /// A quota read under a plan: as ``decide(_:_:)``, for the core's read.
    func read(
        _ plan: PlanReference, _ call: (UInt32, inout sluice_quota_t, inout sluice_plan_detail_t) -> Int32
    ) throws(LimiterError) -> RateQuota {
        try reading { (d) throws(LimiterError) in
            let index = try d.index(of: plan)
            var quota = sluice_quota_t()
            var detail = sluice_plan_detail_t()
            try LimiterError.check(call(index, &quota, &detail))
            var result = RateQuota(quota, now: quota.now)
            let plan = d.plans[Int(index)]
            result.planFigures = RatePlanFigures(
                plan: plan.name, quotas: quotaFigures(detail, plan: plan, now: quota.now))
            return result
        }
    }

    /// Replaces the plans (`update(plans:)`): checks the table against the
    /// limiter's `maxQuotas`, then with the lock held exclusive runs
    /// `replace`, the core's replacement (0 or a negative `SLUICE_E*`).
    ///
    /// - Parameters:
    ///   - plans: the new table.
    ///   - limiter: what the limiter is called in the error of a limiter
    ///     created with one policy ("rate limiter").
    ///   - createWith: how to create it with plans, for that error
    ///     ("RateLimiter(plans:)").
    ///   - replace: the core call.
    func update(
        _ plans: [RatePlan], limiter: String, createWith: String,
        _ replace: (UnsafePointer<sluice_plans_t>) -> Int32
    ) throws(LimiterError) {
        try writing { (d) throws(LimiterError) -> PlanDirectory in
            guard d.hasPlans else {
                throw LimiterError(
                    .invalidArgument,
                    reason:
                        "This \(limiter) was created with one policy, not plans: create it with \(createWith) to update its plans."
                )
            }
            // The limiter's maxQuotas: a plan with more quotas is refused here, by name.
            let table = try RatePlan.table(plans, maxQuotas: d.maxQuotas)
            try LimiterError.check(table.withTable { replace($0) })
            return PlanDirectory(plans, hasPlans: true, maxQuotas: d.maxQuotas)
        }
    }

    /// The plans, in the limiter's order.
    var plans: [RatePlan] {
        // `reading` throws only what its body throws.
        (try? reading { $0.plans }) ?? []
    }
}
