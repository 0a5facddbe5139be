import CSluice

/// A source of time and timers outside Sluice — an event loop your program
/// already runs (a SwiftNIO `EventLoop`, say) — that a limiter can run on
/// through ``LimiterScheduler/external(_:)``, with no thread of Sluice's own.
///
/// The limiter asks for at most one wake-up at a time: it schedules one at
/// its next deadline, and cancels it and schedules a new one only when that
/// deadline moves earlier. A wake-up that comes when nothing is due (the
/// deadline moved later) is harmless: the limiter schedules the next one.
///
/// Requirements:
/// - ``nowNanoseconds`` is a monotonic clock in nanoseconds that never goes
///   backwards, readable from any thread.
/// - ``scheduleWakeUp(at:_:)`` may be called from any thread; it runs `body`
///   once, on the host's own thread, when ``nowNanoseconds`` has reached
///   `deadline` (a deadline already passed runs as soon as it can). The
///   limiter's timers fire, and its emissions are delivered, inside `body`.
public protocol LimiterTimerHost: Sendable {
    /// The host's current time, in nanoseconds on a monotonic clock.
    var nowNanoseconds: UInt64 { get }

    /// Runs `body` once, when the host's time reaches `deadline`.
    ///
    /// - Parameters:
    ///   - deadline: when, in nanoseconds on the clock of ``nowNanoseconds``.
    ///   - body: what to run, on the host's thread.
    /// - Returns: a handle that cancels the wake-up (a cancel after `body`
    ///   ran, or while it runs, does nothing).
    func scheduleWakeUp(at deadline: UInt64, _ body: @escaping @Sendable () -> Void) -> any LimiterWakeUp
}

/// A wake-up scheduled by a ``LimiterTimerHost``.
public protocol LimiterWakeUp: Sendable {
    /// Cancels the wake-up if it has not run yet (from any thread).
    func cancel()
}

extension LimiterScheduler {
    /// Runs the limiter on a ``LimiterTimerHost``: time is the host's clock,
    /// deadlines fire and emissions are delivered in the host's wake-ups, on
    /// its thread; calls come from any thread (serialised by a lock).
    ///
    /// - Parameter host: the host (one wake-up at a time per limiter).
    /// - Returns: the scheduler.
    public static func external(_ host: any LimiterTimerHost) -> LimiterScheduler {
        LimiterScheduler { (setup: EngineSetup) throws(LimiterError) -> any LimiterEngine in
            try ExternalEngine(host: host, setup: setup)
        }
    }
}

/// The engine of ``LimiterScheduler/external(_:)``: a core limiter
/// (`sluice_limiter_t`) whose time is the host's clock and whose timers are
/// the host's wake-ups. Calls are serialised by the engine's lock; events
/// of a call are delivered by the call's thread (as on the manual engine),
/// events of a deadline inside the host's wake-up.
///
/// One wake-up is armed at a time, at the core's next deadline; after each
/// operation the engine re-arms only when the next deadline moved earlier
/// than the armed one. Each wake-up carries a generation number, so that a
/// cancelled one that runs anyway does nothing.
final class ExternalEngine: LimiterEngine, @unchecked Sendable {
    // @unchecked: `core`, `sink`, `armed*` are guarded by `lock`.
    private let host: any LimiterTimerHost
    private let lock = PosixLock()
    private var core: CLimiter?
    /// Cleared by shutdown(): the sink holds the storage, which holds this engine.
    private var sink: EngineSink?
    private let reportImmediate: Bool
    private let reportDrops: Bool
    /// The armed wake-up: its deadline, generation and handle.
    private var armedDeadline = UInt64.max
    private var armedGeneration: UInt64 = 0
    private var armedWakeUp: (any LimiterWakeUp)?

    init(host: any LimiterTimerHost, setup: EngineSetup) throws(LimiterError) {
        self.host = host
        sink = setup.sink
        reportImmediate = setup.reportImmediate
        reportDrops = setup.reportDrops
        var config = setup.config
        config.start_ns = host.nowNanoseconds
        config.on_event = { user, event in
            guard let user, let event else { return }
            Unmanaged<ExternalEngine>.fromOpaque(user)._withUnsafeGuaranteedRef {
                $0.sink?.record(EngineEvent(event))
            }
        }
        config.user = Unmanaged.passUnretained(self).toOpaque()
        core = try CLimiter.make(&config)
    }

    deinit {
        armedWakeUp?.cancel()
        core?.free()
    }

    var now: UInt64 { host.nowNanoseconds }

    /// Arms a wake-up at the core's next deadline when there is one earlier
    /// than the armed one. Under the lock.
    private func rearmLocked() {
        guard let core else { return }
        let next = core.nextDeadline
        guard next < armedDeadline else { return }
        armedWakeUp?.cancel()
        armedGeneration &+= 1
        armedDeadline = next
        let generation = armedGeneration
        armedWakeUp = host.scheduleWakeUp(at: next) { [weak self] in
            self?.wake(generation)
        }
    }

    /// A wake-up ran: fires what is due and delivers, then arms the next one.
    private func wake(_ generation: UInt64) {
        let sink = lock.withLock { () -> EngineSink? in
            guard generation == armedGeneration, let core else { return nil }
            armedWakeUp = nil
            armedDeadline = .max
            _ = core.advance(to: host.nowNanoseconds)
            rearmLocked()
            return self.sink
        }
        sink?.deliver()
    }

    @inline(__always)
    private func withCore(_ body: (CLimiter, UInt64) -> Int32) -> Int32 {
        lock.withLock {
            guard let core else { return LimiterError.closed.rawValue }
            let rc = body(core, host.nowNanoseconds)
            rearmLocked()
            return rc
        }
    }

    func submit(_ key: sluice_key_t, token: UInt64, cost: UInt64, into decision: inout sluice_decision_t) -> Int32 {
        lock.withLock {
            guard let core else { return LimiterError.closed.rawValue }
            let now = host.nowNanoseconds
            let rc = core.submit(key, token: token, cost: cost, now: now, into: &decision)
            guard rc == 0 else { return rc }
            reportDecided(decision, token: token, now: now)
            rearmLocked()
            return rc
        }
    }

    /// Reports a token the core emitted or dropped at once, as asked
    /// (`reportImmediate`, `reportDrops`). Under the lock.
    private func reportDecided(_ decision: sluice_decision_t, token: UInt64, now: UInt64) {
        if decision.kind == SLUICE_EMITTED, reportImmediate {
            sink?.record(EngineEvent(kind: SLUICE_EVENT_EMIT, token: token, at: now, successor: nil))
        } else if decision.kind == SLUICE_DROPPED, reportDrops {
            sink?.record(EngineEvent(kind: SLUICE_EVENT_DROP, token: token, at: now, successor: nil))
        }
    }

    func quota(_ key: sluice_key_t, cost: UInt64, into quota: inout sluice_quota_t) -> Int32 {
        lock.withLock {
            guard let core else { return LimiterError.closed.rawValue }
            return core.quota(key, cost: cost, now: host.nowNanoseconds, into: &quota)
        }
    }

    func submitPlan(
        _ key: sluice_key_t, token: UInt64, cost: UInt64, plan: UInt32, into decision: inout sluice_decision_t,
        detail: inout sluice_plan_detail_t
    ) -> Int32 {
        lock.withLock {
            guard let core else { return LimiterError.closed.rawValue }
            let now = host.nowNanoseconds
            let rc = core.submitPlan(
                key, token: token, cost: cost, plan: plan, now: now, into: &decision, detail: &detail)
            guard rc == 0 else { return rc }
            reportDecided(decision, token: token, now: now)
            return rc
        }
    }

    func quotaPlan(
        _ key: sluice_key_t, cost: UInt64, plan: UInt32, into quota: inout sluice_quota_t,
        detail: inout sluice_plan_detail_t
    ) -> Int32 {
        lock.withLock {
            guard let core else { return LimiterError.closed.rawValue }
            return core.quotaPlan(key, cost: cost, plan: plan, now: host.nowNanoseconds, into: &quota, detail: &detail)
        }
    }

    func setPlans(_ plans: UnsafePointer<sluice_plans_t>) -> Int32 { withCore { core, _ in core.setPlans(plans) } }

    func planIndex(_ name: String, into index: inout UInt32) -> Int32 {
        lock.withLock {
            guard let core else { return LimiterError.closed.rawValue }
            return core.planIndex(name, into: &index)
        }
    }

    func flush(_ key: sluice_key_t) -> Int32 { withCore { $0.flush(key, now: $1) } }
    func cancel(_ key: sluice_key_t) -> Int32 { withCore { $0.cancel(key, now: $1) } }
    func pending(_ key: sluice_key_t) -> Int32 { withCore { $0.pending(key, now: $1) } }
    func close(_ mode: sluice_close_mode_t) -> Int32 { withCore { $0.close(mode, now: $1) } }

    func stats() -> sluice_stats_t {
        lock.withLock { core?.stats() ?? sluice_stats_t() }
    }

    func checkInvariants() -> Int32 { lock.withLock { core?.check() ?? 0 } }

    func shutdown() {
        lock.withLock {
            armedWakeUp?.cancel()
            armedWakeUp = nil
            armedDeadline = .max
            armedGeneration &+= 1
            core?.free()
            core = nil
            sink = nil
        }
    }
}
