import CSluice

/// What a limiter decided about one submitted value, returned at once by
/// ``Limiter/submit(_:for:)``.
///
/// Whatever the decision, the value is accounted for exactly once: an
/// emitted value reaches the delivery (now, or at the scheduled time), and a
/// dropped value is released before `submit` returns. A scheduled value may
/// still be superseded, flushed, cancelled or discarded before its time.
public enum LimiterDecision: Hashable, Sendable, CustomStringConvertible {
    /// Emitted now: the value is delivered (to the handler, the stream or the
    /// queue) as part of this call.
    case emitted
    /// Kept, to be emitted at `at` unless superseded, flushed or cancelled first.
    case scheduled(at: LimiterInstant)
    /// Not emitted and not kept: the value was released before `submit`
    /// returned.
    ///
    /// For ``LimiterPolicy/rate(limit:per:burst:)``, `retryAt` is the earliest
    /// instant at which a call on this key would be admitted (never early:
    /// rounded up to the nanosecond) — what a `Retry-After` header needs. For
    /// the other policies it is the end of the window or wait that
    /// suppressed the call.
    case dropped(retryAt: LimiterInstant)

    /// `emitted`, `scheduled(at: …)` or `dropped(retryAt: …)`, the instant
    /// in seconds on the limiter clock (see ``LimiterInstant/description``):
    /// for example `scheduled(at: 1979.628459s on the limiter clock)`. To
    /// see how far away it is, take ``Limiter/now``'s
    /// ``LimiterInstant/duration(to:)`` to it.
    public var description: String {
        switch self {
        case .emitted: "emitted"
        case let .scheduled(at): "scheduled(at: \(at))"
        case let .dropped(retryAt): "dropped(retryAt: \(retryAt))"
        }
    }
}

/// A value a limiter emitted: do the work for `key` with `value` now.
public struct LimiterEmission<Key, Value> {
    /// The key.
    public var key: Key
    /// The value (with ``Limiter`` `combine`, the fold of the superseded values).
    public var value: Value
    /// When it was emitted by the specification: the exact deadline for a
    /// timer emission (the loop may run it up to one tick later), otherwise
    /// the instant of the call that emitted it.
    public var at: LimiterInstant

    /// Creates an emission.
    ///
    /// - Parameters:
    ///   - key: the key.
    ///   - value: the value.
    ///   - at: when it was emitted.
    public init(key: Key, value: Value, at: LimiterInstant) {
        self.key = key
        self.value = value
        self.at = at
    }
}

extension LimiterEmission: Sendable where Key: Sendable, Value: Sendable {}

/// Something a limiter did with a value: emitted it, dropped it or discarded it.
///
/// Delivered to a ``LimiterDelivery/events(_:)`` handler, which sees every
/// value exactly once — the way trace runners and audit logs need it.
public struct LimiterEvent<Key, Value> {
    /// What happened to the value.
    public enum Kind: Hashable, Sendable {
        /// The value was emitted: do the work.
        case emitted
        /// The value will never be emitted: superseded, suppressed by a window
        /// or a quota, or cancelled.
        case dropped
        /// The value was pending when the limiter closed without draining (or
        /// was released).
        case discarded
    }

    /// What happened.
    public var kind: Kind
    /// The key.
    public var key: Key
    /// The value.
    public var value: Value
    /// When it happened by the specification: the exact deadline for a timer
    /// emission, otherwise the instant of the call that caused it.
    public var at: LimiterInstant

    /// Creates an event.
    ///
    /// - Parameters:
    ///   - kind: what happened.
    ///   - key: the key.
    ///   - value: the value.
    ///   - at: when it happened.
    public init(kind: Kind, key: Key, value: Value, at: LimiterInstant) {
        self.kind = kind
        self.key = key
        self.value = value
        self.at = at
    }
}

extension LimiterEvent: Sendable where Key: Sendable, Value: Sendable {}

/// What a rate limiter decided about one call that weighs a cost:
/// admitted whole, or dropped whole. Returned by ``RateLimiter/check(_:cost:)``
/// and ``Limiter/submit(_:for:cost:)``.
///
/// ```swift
/// let limiter = try RateLimiter<String>(limit: 10, per: .seconds(1))
///
/// func respond(to request: Request) throws -> Response {
///     let decision = try limiter.check(request.apiKey)
///     if let seconds = decision.retryAfterSeconds {
///         return Response(status: 429, headers: [(name: "Retry-After", value: String(seconds))])
///     }
///     return handle(request)
/// }
/// ```
public struct RateDecision: Hashable, Sendable, CustomStringConvertible {
    /// Admitted or dropped.
    public enum Outcome: Hashable, Sendable {
        /// Admitted: the call counted against the quota; `remaining` cost-1
        /// calls would still be admitted now.
        case admitted(remaining: Int)
        /// Dropped: nothing counted. `retryAt` is the earliest instant a call
        /// of the same cost would be admitted (rounded up to the nanosecond,
        /// never early), or `nil` when never: the cost exceeds the burst.
        case dropped(retryAt: LimiterInstant?)
    }

    /// Who made a decision. A local limiter's decisions all come from its
    /// own state; a fleet limiter's may come from elsewhere when Redis
    /// cannot decide.
    public enum Source: Hashable, Sendable {
        /// The limiter's quota: a local limiter's state, or the fleet's
        /// script in Redis (the fleet-wide decision).
        case limiter
        /// A fleet limiter's local cache of certain drops (no round trip):
        /// always a drop, which Redis would also have made.
        case cache
        /// A fleet limiter's local fallback limiter, because Redis could not
        /// decide (the cause): a real quota, but this server's alone.
        case fallback(LimiterError)
        /// A fleet limiter's failure policy (fail open or closed), because
        /// Redis could not decide (the cause): no quota was consulted, so
        /// `remaining` and `fullAt` mean nothing.
        case failurePolicy(LimiterError)
    }

    /// Admitted or dropped.
    public var outcome: Outcome
    /// When the decision was made (the limiter's clock).
    public var at: LimiterInstant
    /// When the key's whole burst is available again (`at` when it already is).
    public var fullAt: LimiterInstant
    /// Who made it (``Source/limiter`` for every local decision).
    public var source: Source
    /// The plan and its quotas' figures, boxed: a decision without a plan
    /// (every call of ``RateLimiter/check(_:cost:)``) carries one `nil`
    /// reference, and grows by one word.
    @usableFromInline var planFigures: RatePlanFigures? = nil

    /// The plan the call was decided under (`check(_:plan:cost:)` of
    /// ``RateLimiter``), or `nil` for a call without a plan.
    public var plan: String? {
        get { planFigures?.plan }
        set { planFigures = RatePlanFigures.make(plan: newValue, quotas: quotas) }
    }
    /// Each quota of the plan, in the plan's order, with its own figures
    /// (empty for a call without a plan). The overall figures above are
    /// theirs combined: ``remaining`` the least, ``fullAt`` the latest, a
    /// drop's ``retryAt`` the latest (`nil` when any is).
    public var quotas: [RateQuotaFigures] {
        get { planFigures?.quotas ?? [] }
        set { planFigures = RatePlanFigures.make(plan: plan, quotas: newValue) }
    }

    /// The names of the quotas that refused the call (empty when admitted,
    /// and for a call without a plan): the `violated-policies` of a
    /// `quota-exceeded` problem.
    public var refusedQuotas: [String] {
        quotas.filter(\.refused).map(\.name)
    }

    /// Creates a decision.
    ///
    /// - Parameters:
    ///   - outcome: admitted or dropped.
    ///   - at: when it was made.
    ///   - fullAt: when the whole burst is back.
    ///   - source: who made it (the limiter by default).
    public init(outcome: Outcome, at: LimiterInstant, fullAt: LimiterInstant, source: Source = .limiter) {
        self.outcome = outcome
        self.at = at
        self.fullAt = fullAt
        self.source = source
    }

    /// Why the limiter could not decide from its quota, when it could not:
    /// the cause of a ``Source/fallback(_:)`` or ``Source/failurePolicy(_:)``
    /// decision; `nil` otherwise.
    public var failure: LimiterError? {
        switch source {
        case .limiter, .cache: nil
        case let .fallback(cause), let .failurePolicy(cause): cause
        }
    }

    /// From a core decision made at `now`: `at` is the call's time, never
    /// before `now`; a drop's `retryAt` is `nil` when never (`SLUICE_NEVER`).
    /// Inlinable, so that ``RateLimiter/check(_:cost:)``, inlined into its
    /// caller, builds the decision in place.
    @inlinable
    init(_ decision: sluice_decision_t, now: UInt64) {
        let admitted = decision.kind == SLUICE_EMITTED
        let at = admitted ? max(now, decision.at) : now
        self.init(
            outcome: admitted
                ? .admitted(remaining: Int(clamping: decision.remaining))
                : .dropped(retryAt: decision.at == UInt64.max ? nil : LimiterInstant(nanoseconds: decision.at)),
            at: LimiterInstant(nanoseconds: at), fullAt: LimiterInstant(nanoseconds: max(decision.full, at)))
    }

    /// Whether the call was admitted.
    public var isAdmitted: Bool {
        if case .admitted = outcome { return true }
        return false
    }

    /// Cost-1 calls still admitted now (0 when dropped).
    public var remaining: Int {
        if case let .admitted(remaining) = outcome { return remaining }
        return 0
    }

    /// Dropped: the earliest instant to retry; `nil` when admitted, or when
    /// a retry can never succeed (the cost exceeds the burst: see ``isNeverAdmitted``).
    public var retryAt: LimiterInstant? {
        if case let .dropped(retryAt) = outcome { return retryAt }
        return nil
    }

    /// Whether the call was dropped because its cost exceeds the burst: no
    /// retry of it can ever be admitted.
    public var isNeverAdmitted: Bool {
        if case .dropped(nil) = outcome { return true }
        return false
    }

    /// Dropped: how long to wait before retrying (``retryAt`` minus ``at``);
    /// `nil` when admitted or never admitted.
    public var retryAfter: Duration? {
        retryAt.map { at.duration(to: $0) }
    }

    /// Dropped: the wait in whole seconds, rounded up and at least 1 — the
    /// value of an HTTP `Retry-After` header; `nil` when admitted or never
    /// admitted.
    public var retryAfterSeconds: Int? {
        retryAt.map { max(1, LimiterInstant.secondsRoundedUp(from: at, to: $0)) }
    }

    /// Whole seconds, rounded up, until the whole burst is back (0 when it is).
    public var secondsUntilFull: Int {
        LimiterInstant.secondsRoundedUp(from: at, to: fullAt)
    }

    /// The outcome with its waits counted from the decision, in seconds
    /// with six decimals, then when it was made (see
    /// ``LimiterInstant/description``):
    ///
    /// - `admitted(remaining: 4, full in 0.200000s; at 1979.628459s on the limiter clock)`
    /// - `dropped(retry in 0.500000s, full in 1.000000s; at 1979.628459s on the limiter clock)`
    /// - `dropped(never: the cost is above the burst; at 1979.628459s on the limiter clock)`
    ///
    /// A decision not made from the limiter's quota says who made it and why:
    /// `dropped(retry in 1.000000s; at 1979.628459s on the limiter clock; by
    /// the failure policy: No connection to Redis (down, refused, or
    /// reconnecting).)`.
    public var description: String {
        let full = LimiterInstant.seconds(from: at, to: fullAt)
        let what: String
        switch (outcome, source) {
        case let (.admitted, .failurePolicy(cause)):
            return "admitted(at \(at); by the failure policy: \(cause))"
        case let (.dropped(retryAt?), .failurePolicy(cause)):
            return
                "dropped(retry in \(LimiterInstant.seconds(from: at, to: retryAt)); at \(at); by the failure policy: \(cause))"
        case let (.admitted(remaining), _):
            what = "admitted(remaining: \(remaining), full in \(full); at \(at)"
        case let (.dropped(retryAt?), _):
            what = "dropped(retry in \(LimiterInstant.seconds(from: at, to: retryAt)), full in \(full); at \(at)"
        case (.dropped(nil), _):
            what = "dropped(never: the cost is above the burst; at \(at)"
        }
        switch source {
        case .limiter, .failurePolicy: return what + ")"
        case .cache: return what + "; from the cache)"
        case let .fallback(cause): return what + "; by the local fallback: \(cause))"
        }
    }
}

/// A rate key's quota at one instant, read by ``Limiter/quota(for:cost:)``
/// and ``RateLimiter/quota(for:cost:)`` without changing it.
public struct RateQuota: Hashable, Sendable {
    /// When it was read.
    public var at: LimiterInstant
    /// The policy's burst: the most cost-1 calls admitted at once.
    public var burst: Int
    /// Cost-1 calls that would be admitted now, one after another (0 to `burst`).
    public var remaining: Int
    /// When the whole burst is available again (`at` when it already is).
    public var fullAt: LimiterInstant
    /// The earliest instant a call of the asked cost would be admitted (`at`
    /// when now), or `nil` when never: the cost exceeds the burst.
    public var retryAt: LimiterInstant?
    /// The plan and its quotas' figures (boxed, as in ``RateDecision``).
    var planFigures: RatePlanFigures? = nil

    /// The plan read (``RateLimiter/quota(for:plan:cost:)-(_,String,_)``), or `nil`.
    public var plan: String? {
        get { planFigures?.plan }
        set { planFigures = RatePlanFigures.make(plan: newValue, quotas: quotas) }
    }
    /// Each quota of the plan with its own figures, in the plan's order
    /// (empty for a read without a plan). The overall figures above are
    /// theirs combined: ``remaining`` the least, ``fullAt`` the latest,
    /// ``retryAt`` the latest (`nil` when any is), ``burst`` the least.
    public var quotas: [RateQuotaFigures] {
        get { planFigures?.quotas ?? [] }
        set { planFigures = RatePlanFigures.make(plan: plan, quotas: newValue) }
    }

    /// Creates a quota.
    public init(at: LimiterInstant, burst: Int, remaining: Int, fullAt: LimiterInstant, retryAt: LimiterInstant?) {
        self.at = at
        self.burst = burst
        self.remaining = remaining
        self.fullAt = fullAt
        self.retryAt = retryAt
    }

    /// From the core's quota read at `now`.
    init(_ quota: sluice_quota_t, now: UInt64) {
        at = LimiterInstant(nanoseconds: now)
        burst = Int(clamping: quota.burst)
        remaining = Int(clamping: quota.remaining)
        fullAt = LimiterInstant(nanoseconds: max(quota.full, now))
        retryAt = quota.retry == CPolicy.never ? nil : LimiterInstant(nanoseconds: max(quota.retry, now))
    }

    /// Whole seconds, rounded up, until the whole burst is back (0 when it is).
    public var secondsUntilFull: Int {
        LimiterInstant.secondsRoundedUp(from: at, to: fullAt)
    }
}

/// Counters of a limiter, read by ``Limiter/statistics`` and
/// ``RateLimiter/statistics``: what it holds now, and totals since it was
/// created, for a server to graph.
///
/// Every value handed in counts once in ``admitted`` or ``scheduled`` (or
/// in ``dropped`` when dropped at its call); a scheduled one counts once
/// more, later, in exactly one of ``emittedLater``, ``dropped`` or
/// ``discarded``.
public struct LimiterStatistics: Hashable, Sendable {
    /// Keys with state now. For ``LimiterPolicy/rate(limit:per:burst:)``
    /// this includes keys that have fully recovered (idle) but whose memory
    /// is not freed yet: rate state expires lazily, without a timer per key
    /// (a few idle keys are freed as new keys come, all of them by the
    /// loop's periodic sweep, and one before a new key would be refused at
    /// the key cap).
    public var liveKeys: Int
    /// Keys holding a pending value now.
    public var pendingValues: Int
    /// Bytes allocated by the C core for this limiter now (not counting the
    /// Swift values).
    public var memoryBytes: Int
    /// Calls emitted (admitted) at once.
    public var admitted: Int
    /// Calls kept for later.
    public var scheduled: Int
    /// Scheduled values emitted later (by a timer, a flush or a draining close).
    public var emittedLater: Int
    /// Values dropped: at their call (suppressed, or over a rate quota),
    /// superseded, or cancelled.
    public var dropped: Int
    /// Values discarded by a close without drain (or the limiter's release).
    public var discarded: Int
    /// New keys refused because of `maxKeys`.
    public var refusedAtCap: Int
    /// Key indexes that switched from the fast hash to SipHash-1-3 because
    /// probes grew long (0 or 1; for a sharded loop limiter, the number of
    /// shards). Random keys essentially never cause it: a non-zero value is
    /// a sign of keys crafted to collide, which the switch defeated.
    public var hashFallbacks: Int
    /// Calls a fleet limiter answered without Redis, by its fallback limiter
    /// or its failure policy, because Redis could not decide (also counted
    /// in ``admitted`` or ``dropped``). Always 0 for a local limiter.
    public var failures: Int = 0

    /// Keys with state (the former name of ``liveKeys``).
    public var keys: Int { liveKeys }
    /// New keys refused because of `maxKeys` (the former name of ``refusedAtCap``).
    public var refusedKeys: Int { refusedAtCap }

    init(_ stats: sluice_stats_t) {
        liveKeys = Int(clamping: stats.live_keys)
        pendingValues = Int(clamping: stats.pending)
        memoryBytes = Int(clamping: stats.memory_bytes)
        admitted = Int(clamping: stats.admitted)
        scheduled = Int(clamping: stats.scheduled)
        emittedLater = Int(clamping: stats.emitted_later)
        dropped = Int(clamping: stats.dropped)
        discarded = Int(clamping: stats.discarded)
        refusedAtCap = Int(clamping: stats.full_refusals)
        hashFallbacks = Int(clamping: stats.hash_fallbacks)
    }

    /// The statistics of a limiter that keeps no keys locally (a fleet
    /// limiter): its decisions and failures.
    ///
    /// - Parameters:
    ///   - admitted: calls admitted.
    ///   - dropped: calls dropped.
    ///   - failures: calls answered without the shared quota.
    package init(admitted: Int, dropped: Int, failures: Int) {
        liveKeys = 0
        pendingValues = 0
        memoryBytes = 0
        self.admitted = admitted
        scheduled = 0
        emittedLater = 0
        self.dropped = dropped
        discarded = 0
        refusedAtCap = 0
        hashFallbacks = 0
        self.failures = failures
    }
}

/// The kind and time of a core decision: what ``Limiter/submit(_:for:)``
/// reports, small enough to be returned in registers (see
/// `LimiterStorage.submitBrief`).
@usableFromInline
struct DecisionBrief {
    /// The decision's kind.
    @usableFromInline var kind: sluice_decision_kind_t
    /// Its time: the scheduled emission, or when to retry a drop.
    @usableFromInline var at: UInt64

    @inlinable
    init(kind: sluice_decision_kind_t, at: UInt64) {
        self.kind = kind
        self.at = at
    }
}
