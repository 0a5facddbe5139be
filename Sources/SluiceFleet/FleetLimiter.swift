import CSluice
import CSluiceFleet
import Sluice

/// A rate limiter whose quotas a fleet of servers shares through Redis,
/// with the surface of ``Sluice/RateLimiter``: `check`, `quota(for:)`,
/// `reset`, `statistics`, `close()`, `Int` costs and ``Sluice/LimiterInstant``
/// times.
///
/// ```swift
/// var configuration = FleetConfiguration()
/// configuration.host = "10.0.0.5"
/// configuration.prefix = "api"
/// let api = try FleetLimiter<String>(.rate(limit: 100, per: .seconds(60)), configuration: configuration)
/// let decision = try await api.check("client-42")
/// if !decision.isAdmitted { /* 429, Retry-After: decision.retryAfterSeconds */ }
/// ```
///
/// Every process with the same Redis, prefix and policy draws from the same
/// quota: each decision is made atomically in Redis, exactly as the local
/// ``Sluice/RateLimiter`` would make it. Certain drops are answered from a
/// local cache without a round trip. When Redis cannot decide in time (down,
/// unreachable, refusing), the configuration's failure policy answers, and
/// the decision's ``Sluice/RateDecision/source`` says so, with the cause:
/// the middleware answers such decisions as failures, and metrics count them.
///
/// Calls are `async`: each waits for its answer, at most the configured
/// timeout. A cancelled task's call throws ``Sluice/LimiterError/cancelled``
/// at once (its request may still be decided in Redis). Times are on the
/// local loops' clock (``Sluice/LimiterLoop/now``), whatever Redis's clock
/// says.
///
/// With `String` keys it is a ``Sluice/RateDecider``, so the Hummingbird and
/// Vapor middleware, `RateLimitGate` and SluiceMetrics take it like a local
/// limiter.
public final class FleetLimiter<Key: LimiterKey>: @unchecked Sendable {
    // @unchecked: the C limiter is thread-safe; `closed` and `finalStats`
    // are guarded by `state`.

    /// The rate policy (with plans: the first quota of the first plan).
    public let policy: LimiterPolicy
    /// The loop it runs on (kept alive as long as the limiter).
    public let loop: LimiterLoop
    let fleet: OpaquePointer
    let manualTime: Bool
    private let fallsBackLocally: Bool
    let state = Locked(State())
    /// A limiter of plans: its table (`nil` for one policy). Taken after
    /// `state` when both are.
    let planTable: Locked<FleetPlanTable>?

    struct State {
        var closed = false
        var finalStats: sluice_fleet_stats_t? = nil
    }

    /// Creates a fleet limiter and starts connecting (without waiting: calls
    /// made before the connection is up wait for it, within their timeout).
    ///
    /// - Parameters:
    ///   - policy: a rate policy, ``Sluice/LimiterPolicy/rate(limit:per:burst:)``.
    ///   - configuration: where Redis is and what to do when it cannot decide.
    ///   - loop: the event loop it runs on, beside local limiters (the
    ///     library's shared loop by default): no thread of its own.
    /// - Throws: ``Sluice/LimiterError/invalidArgument`` or
    ///   ``Sluice/LimiterError/outOfRange`` for a policy that is not rate or
    ///   an option that breaks a rule (the ``Sluice/LimiterError/reason``
    ///   names it), ``Sluice/LimiterError/outOfMemory``.
    public convenience init(
        _ policy: LimiterPolicy, configuration: FleetConfiguration = FleetConfiguration(),
        loop: LimiterLoop = .shared
    ) throws(LimiterError) {
        try self.init(policy: policy, plans: nil, configuration: configuration, loop: loop)
    }

    /// A fleet limiter of plans: several quotas per key, the client's plan
    /// named by each call (``check(_:plan:cost:at:)``), exactly as a local
    /// ``Sluice/RateLimiter`` of plans decides (docs/fleet.md, "Plans").
    ///
    /// A key's state in Redis holds each quota's name and numbers, so every
    /// process may have its own table while plans roll out, and a key called
    /// under another plan, or after ``update(plans:fallback:)``, keeps its
    /// consumed units, converted by quota name. Every quota of a key lives in
    /// one Redis key, so in one hash slot.
    ///
    /// ```swift
    /// let plans = [
    ///     RatePlan("free", quotas: [.init("second", limit: 2, per: .seconds(1)), .init("hour", limit: 100, per: .seconds(3600))]),
    ///     RatePlan("pro", quotas: [.init("second", limit: 20, per: .seconds(1)), .init("hour", limit: 5000, per: .seconds(3600))]),
    /// ]
    /// let api = try FleetLimiter<String>(plans: plans, configuration: FleetConfiguration(url: "redis://10.0.0.5:6379"))
    /// let decision = try await api.check("client-42", plan: "pro")
    /// ```
    ///
    /// - Parameters:
    ///   - plans: the table, the default plan first (``Sluice/RatePlan/validate(_:maxQuotas:)``'s rules).
    ///   - fallback: with ``FleetConfiguration/FailurePolicy/local(_:)`` (whose policy must
    ///     then be `nil`), the local limiter's plans: the same names in the same order,
    ///     typically each quota divided by the number of processes (`nil`: `plans`).
    ///   - configuration: as for ``init(_:configuration:loop:)``.
    ///   - loop: as for ``init(_:configuration:loop:)``.
    /// - Throws: as ``init(_:configuration:loop:)``; an invalid table is
    ///   ``Sluice/LimiterError/invalidArgument`` or ``Sluice/LimiterError/outOfRange``
    ///   naming the plan, the quota and the rule.
    public convenience init(
        plans: [RatePlan], fallback: [RatePlan]? = nil, configuration: FleetConfiguration = FleetConfiguration(),
        loop: LimiterLoop = .shared
    ) throws(LimiterError) {
        try self.init(
            policy: plans.first?.quotas.first?.policy ?? .rate(limit: 1, per: .seconds(1)),
            plans: (plans, fallback), configuration: configuration, loop: loop)
    }

    /// Both: one policy, or a table of plans (and the fallback's).
    private init(
        policy: LimiterPolicy, plans: ([RatePlan], [RatePlan]?)?, configuration: FleetConfiguration,
        loop: LimiterLoop
    ) throws(LimiterError) {
        var c = try cConfig(policy: policy, configuration)
        var tables: (CPlanTable, CPlanTable?)? = nil
        if let plans {
            tables = try FleetPlanTable.cTables(plans.0, fallback: plans.1, configuration: configuration)
            c.policy = sluice_rate_plans()
        }
        var out: OpaquePointer?
        let prefix = Array(configuration.prefix.utf8)  // its bytes (a NUL inside is kept): the C side copies them
        let rc = try FleetPlanTable.withTables(tables) { (plans, fallback) throws(LimiterError) -> Int32 in
            c.plans = plans
            c.fallback_plans = fallback
            return configuration.host.withCString { host in
                withOptionalCString(configuration.url) { url in
                    prefix.withUnsafeBytes { prefix in
                        c.host = host
                        c.url = url
                        c.prefix = prefix.baseAddress
                        c.prefix_len = prefix.count
                        return sluice_fleet_new_on_loop(&out, loop.cHandle, &c)
                    }
                }
            }
        }
        guard rc == 0, let out else { throw LimiterError(rawValue: rc) }
        fleet = out
        self.loop = loop
        self.policy = policy
        planTable = plans.map { Locked(FleetPlanTable($0.0)) }
        manualTime = configuration.manualTime
        if case .local = configuration.onFailure { fallsBackLocally = true } else { fallsBackLocally = false }
    }

    /// A fleet limiter of `limit` calls per `per`, with bursts of up to `burst` calls.
    ///
    /// - Parameters:
    ///   - limit: calls per period, at least 1.
    ///   - per: the period.
    ///   - burst: the most calls at once (`nil`: `limit`).
    ///   - configuration: as for ``init(_:configuration:loop:)``.
    ///   - loop: as for ``init(_:configuration:loop:)``.
    /// - Throws: as ``init(_:configuration:loop:)``.
    public convenience init(
        limit: Int, per: Duration, burst: Int? = nil, configuration: FleetConfiguration = FleetConfiguration(),
        loop: LimiterLoop = .shared
    ) throws(LimiterError) {
        try self.init(.rate(limit: limit, per: per, burst: burst ?? limit), configuration: configuration, loop: loop)
    }

    deinit {
        shutDown()
    }

    /// Closes the limiter: every call not answered yet is answered with
    /// ``Sluice/LimiterError/closed``, the connection is closed, and later
    /// calls throw ``Sluice/LimiterError/closed``. Releasing the limiter
    /// closes it too.
    ///
    /// - Throws: ``Sluice/LimiterError/closed`` if it was already closed.
    public func close() throws(LimiterError) {
        guard shutDown() else { throw .closed }
    }

    /// Whether the limiter is closed.
    public var isClosed: Bool { state.withLock { $0.closed } }

    /// Frees the C limiter once; false when it was already freed.
    @discardableResult
    private func shutDown() -> Bool {
        let first = state.withLock { state -> Bool in
            if state.closed { return false }
            state.closed = true
            var stats = sluice_fleet_stats_t()
            sluice_fleet_stats(fleet, &stats)
            state.finalStats = stats
            return true
        }
        // Freed on the loop thread, this thread waiting; what is left is
        // answered there (outside the lock: the answers' continuations may
        // run code that reads state).
        if first { sluice_fleet_free(fleet) }
        return first
    }

    /// Decides about one call of `key` that weighs `cost` units, now (or, in
    /// manual-time mode, at `time`).
    ///
    /// - Parameters:
    ///   - key: the key.
    ///   - cost: the units the call weighs, 1 to 10^12.
    ///   - time: manual-time mode only (``FleetConfiguration/manualTime``):
    ///     the call's time on the caller's clock, never earlier than the
    ///     previous call's on the key.
    /// - Returns: the decision; its ``Sluice/RateDecision/source`` says
    ///   whether Redis, the local cache, the fallback limiter or the failure
    ///   policy made it.
    /// - Throws: ``Sluice/LimiterError/outOfRange`` for a bad cost,
    ///   ``Sluice/LimiterError/invalidArgument`` for a time that does not fit
    ///   the mode, ``Sluice/LimiterError/keyTooLong``,
    ///   ``Sluice/LimiterError/closed``, ``Sluice/LimiterError/cancelled``.
    public func check(
        _ key: Key, cost: Int = 1, at time: LimiterInstant? = nil
    ) async throws(LimiterError)
        -> RateDecision
    {
        let cost = try Self.validCost(cost)
        let now = try callTime(time)
        let answer = try await request(key) { fleet, k, user in
            sluice_fleet_call(fleet, k, cost, now, fleetCallback, user)
        }
        return decision(answer)
    }

    /// Reads a key's quota without changing it (always a round trip).
    ///
    /// - Parameters:
    ///   - key: the key.
    ///   - cost: the cost ``Sluice/RateQuota/retryAt`` is computed for (1 by default).
    ///   - time: manual-time mode only: the read's time.
    /// - Returns: the quota.
    /// - Throws: as ``check(_:cost:at:)``; a read Redis cannot answer throws
    ///   its cause (``Sluice/LimiterError/notConnected``,
    ///   ``Sluice/LimiterError/timedOut``, …): no failure policy applies to
    ///   a read.
    public func quota(
        for key: Key, cost: Int = 1, at time: LimiterInstant? = nil
    ) async throws(LimiterError)
        -> RateQuota
    {
        let cost = try Self.validCost(cost)
        let now = try callTime(time)
        let answer = try await request(key) { fleet, k, user in
            sluice_fleet_quota(fleet, k, cost, now, fleetCallback, user)
        }
        return try quota(answer)
    }

    /// The Swift quota of a quota read's answer, on the local clock.
    func quota(_ answer: Answer) throws(LimiterError) -> RateQuota {
        let result = answer.result
        if result.source == SLUICE_FLEET_SOURCE_FAILURE { throw LimiterError(rawValue: result.cause) }
        let q = result.quota
        let onto = clock(of: answer)
        return RateQuota(
            at: onto(result.now), burst: Int(clamping: q.burst), remaining: Int(clamping: q.remaining),
            fullAt: onto(max(q.full, result.now)),
            retryAt: q.retry == CPolicy.never ? nil : onto(max(q.retry, result.now)))
    }

    /// Forgets a key's history fleet-wide: its next call has the whole burst.
    ///
    /// - Parameters:
    ///   - key: the key.
    ///   - time: manual-time mode only: the reset's time.
    /// - Throws: as ``check(_:cost:at:)``; when Redis could not confirm the
    ///   reset, its cause (the local cache and fallback forgot the key anyway).
    public func reset(_ key: Key, at time: LimiterInstant? = nil) async throws(LimiterError) {
        let now = try callTime(time)
        let answer = try await request(key) { fleet, k, user in
            sluice_fleet_cancel(fleet, k, now, fleetCallback, user)
        }
        if answer.result.status != 0 { throw LimiterError(rawValue: answer.result.status) }
    }

    /// The limiter's clock: the local loops' (``Sluice/LimiterLoop/now``).
    public var now: LimiterInstant { LimiterLoop.now }

    /// Whether the limiter has a working connection to Redis now (for a
    /// health check).
    public var isConnected: Bool {
        state.withLock { $0.closed ? false : sluice_fleet_connected(fleet) }
    }

    /// Why the limiter has no working connection to Redis, when it has none
    /// (refused, unreachable, credentials or TLS refused, …): the error,
    /// whose ``Sluice/LimiterError/reason`` is the connection's own sentence
    /// (never a password); `nil` when the last (re)connection succeeded.
    /// For health checks and logs.
    public var connectionProblem: LimiterError? {
        state.withLock { state -> LimiterError? in
            if state.closed { return .closed }
            var message = [CChar](repeating: 0, count: 512)
            let code = sluice_fleet_last_error(fleet, &message, message.count)
            guard code != 0 else { return nil }
            let sentence = text(of: message)
            return sentence.isEmpty
                ? LimiterError(rawValue: code) : LimiterError(LimiterError(rawValue: code), reason: sentence)
        }
    }

    /// The decisions made, in the terms of a local limiter: admitted and
    /// dropped (by Redis, the cache, the fallback or the failure policy),
    /// and ``Sluice/LimiterStatistics/failures``, those Redis could not make.
    public var statistics: LimiterStatistics {
        let s = rawStatistics
        return LimiterStatistics(
            admitted: Int(clamping: s.redis_admitted &+ s.failure_admitted),
            dropped: Int(clamping: s.redis_dropped &+ s.cache_dropped &+ s.failure_dropped),
            failures: Int(clamping: s.failure_admitted &+ s.failure_dropped))
    }

    /// Every counter of the fleet limiter: requests, sources, failures,
    /// connections, batches.
    public var fleetStatistics: FleetStatistics { FleetStatistics(rawStatistics) }

    private var rawStatistics: sluice_fleet_stats_t {
        state.withLock { state in
            if let final = state.finalStats { return final }
            var s = sluice_fleet_stats_t()
            sluice_fleet_stats(fleet, &s)
            return s
        }
    }

    // MARK: - Requests

    static func validCost(_ cost: Int) throws(LimiterError) -> UInt64 {
        guard cost >= 1, cost <= CPolicy.rateMax else { throw CPolicy.badCost(cost) }
        return UInt64(cost)
    }

    /// The C `now` of a request: the caller's time in manual-time mode, 0 otherwise.
    func callTime(_ time: LimiterInstant?) throws(LimiterError) -> UInt64 {
        switch (manualTime, time) {
        case let (true, time?): return time.nanoseconds
        case (false, nil): return 0
        case (true, nil):
            throw LimiterError(
                .invalidArgument,
                reason:
                    "A FleetLimiter in manual-time mode (FleetConfiguration.manualTime) needs each call's time (at:).")
        case (false, _?):
            throw LimiterError(
                .invalidArgument,
                reason: "A call's time (at:) is for manual-time mode only; this FleetLimiter uses Redis's clock.")
        }
    }

    /// Sends one request and waits for its answer, or for the task's
    /// cancellation (then ``Sluice/LimiterError/cancelled`` at once).
    func request(
        _ key: Key, _ send: (OpaquePointer, sluice_key_t, UnsafeMutableRawPointer) -> Int32
    ) async throws(LimiterError) -> Answer {
        let pending = Pending()
        let fleet = self.fleet
        let result: Result<Answer, LimiterError> = await withTaskCancellationHandler {
            await withCheckedContinuation { continuation in
                guard pending.wait(continuation) else { return }  // cancelled already
                let user = Unmanaged.passRetained(pending).toOpaque()
                // Under the state lock: the limiter cannot be freed during the C call.
                let rc = state.withLock { state -> Int32 in
                    if state.closed { return Int32(SLUICE_ECLOSED.rawValue) }
                    return key.withLimiterKeyIdentity { id -> Int32 in
                        switch id {
                        case .integer(let v): return send(fleet, sluice_key_u64(v), user)
                        case .bytes(let b): return send(fleet, sluice_key_bytes(b.baseAddress, b.count), user)
                        }
                    }
                }
                if rc != 0 {
                    Unmanaged<Pending>.fromOpaque(user).release()
                    pending.finish(.failure(LimiterError(rawValue: rc)))
                }
            }
        } onCancel: {
            pending.finish(.failure(.cancelled))
        }
        let answer = try result.get()
        let r = answer.result
        if r.status != 0 && r.op != SLUICE_FLEET_CANCEL { throw LimiterError(rawValue: r.status) }
        return answer
    }

    /// The Swift decision of a call's answer, on the local clock.
    func decision(_ answer: Answer) -> RateDecision {
        let r = answer.result
        let d = r.decision
        let admitted = d.kind == SLUICE_EMITTED
        let at = max(r.now, admitted ? d.at : r.now)
        let onto = clock(of: answer)
        let source: RateDecision.Source
        switch r.source {
        case SLUICE_FLEET_SOURCE_CACHE: source = .cache
        case SLUICE_FLEET_SOURCE_FAILURE:
            let cause = LimiterError(rawValue: r.cause)
            source = fallsBackLocally ? .fallback(cause) : .failurePolicy(cause)
        default: source = .limiter
        }
        let outcome: RateDecision.Outcome =
            admitted
            ? .admitted(remaining: Int(clamping: d.remaining))
            : .dropped(retryAt: d.at == CPolicy.never ? nil : onto(max(d.at, at)))
        return RateDecision(outcome: outcome, at: onto(at), fullAt: onto(max(d.full, at)), source: source)
    }

    /// Maps an answer's times onto the local clock: they count from the
    /// answer's `now` (Redis's clock, or the failure policy's local real
    /// time), which is the local clock's reading when the answer came. In
    /// manual-time mode times are the caller's, unchanged.
    func clock(of answer: Answer) -> Onto {
        Onto(now: answer.result.now, local: manualTime ? nil : answer.local)
    }
}

extension FleetLimiter: RateDecider where Key == String {
    /// Decides about one call of `key` that weighs `cost` units, now (the
    /// ``Sluice/RateDecider`` requirement): ``check(_:cost:at:)`` without a time.
    ///
    /// - Parameters:
    ///   - key: the key.
    ///   - cost: units, 1 to 10^12.
    /// - Returns: the decision.
    /// - Throws: as ``check(_:cost:at:)``.
    public func check(_ key: String, cost: Int) async throws(LimiterError) -> RateDecision {
        try await check(key, cost: cost, at: nil)
    }
}

/// The answer to one request, and the local clock's reading when it came.
struct Answer {
    var result: sluice_fleet_result_t
    var local: UInt64
}

/// A request waiting for its answer: resumed exactly once, by the C
/// callback (on the fleet's loop thread) or by the task's cancellation,
/// whichever comes first.
private final class Pending: @unchecked Sendable {
    // @unchecked: every field is guarded by `lock`.
    private let lock = Locked(Slot())

    private struct Slot {
        var continuation: CheckedContinuation<Result<Answer, LimiterError>, Never>?
        var done: Result<Answer, LimiterError>?
    }

    /// Keeps the continuation; false (having resumed it) when the request
    /// was already finished (cancelled before it was sent).
    func wait(_ continuation: CheckedContinuation<Result<Answer, LimiterError>, Never>) -> Bool {
        let done = lock.withLock { slot -> Result<Answer, LimiterError>? in
            if let done = slot.done { return done }
            slot.continuation = continuation
            return nil
        }
        if let done { continuation.resume(returning: done) }
        return done == nil
    }

    /// Resumes the waiting task with `result`, unless it was resumed already.
    func finish(_ result: Result<Answer, LimiterError>) {
        let continuation = lock.withLock {
            slot -> CheckedContinuation<Result<Answer, LimiterError>, Never>? in
            if slot.done != nil { return nil }
            slot.done = result
            defer { slot.continuation = nil }
            return slot.continuation
        }
        continuation?.resume(returning: result)
    }
}

/// The C callback of every request: the answer, to its `Pending`.
let fleetCallback: sluice_fleet_fn = { user, result in
    guard let user, let result else { return }
    // The local clock is read here, as the answer comes (on the loop
    // thread), not when the waiting task runs again, which may be later.
    let answer = Answer(result: result.pointee, local: LimiterLoop.now.nanoseconds)
    Unmanaged<Pending>.fromOpaque(user).takeRetainedValue().finish(.success(answer))
}

/// Times of an answer, counted from its `now`, onto the local clock.
struct Onto {
    let now: UInt64
    let local: UInt64?

    func callAsFunction(_ t: UInt64) -> LimiterInstant {
        guard let local else { return LimiterInstant(nanoseconds: t) }
        if t >= now {
            let (sum, carry) = local.addingReportingOverflow(t - now)
            return LimiterInstant(nanoseconds: carry ? .max : sum)
        }
        return LimiterInstant(nanoseconds: local >= now - t ? local - (now - t) : 0)
    }
}

/// `body` with `string` as a C string, or with NULL for `nil`.
private func withOptionalCString<R>(_ string: String?, _ body: (UnsafePointer<CChar>?) -> R) -> R {
    guard let string else { return body(nil) }
    return string.withCString { body($0) }
}
