import CSluice
import CSluiceFleet
import Sluice

/// Throttle, audit or debounce shared by a fleet of processes through
/// Redis: a burst of calls that starts on one server and goes on on another
/// is one burst, and each emission is delivered to one worker of the fleet,
/// at least once, with a generation.
///
/// ```swift
/// let hooks = try FleetTimedLimiter<String>(
///     .debounce(interval: .seconds(2), maxWait: .seconds(30)),
///     configuration: FleetConfiguration(url: "redis://10.0.0.5:6379"))
/// // any process, on every edit:
/// _ = try await hooks.submit("rev-42", for: "doc-7")
/// // the workers (any of the processes):
/// try await hooks.run { delivery in
///     try await sendWebhook(document: delivery.key, revision: delivery.value, generation: delivery.generation)
/// }
/// ```
///
/// The semantics are the local ``Sluice/Limiter``'s (docs/semantics.md),
/// on Redis's clock: a call's value either is emitted at once (a leading
/// edge: the call's ``FleetSubmission/Outcome/emitted(generation:)``, the
/// caller does the work), or waits in Redis until its deadline, or is
/// dropped, and a value that replaces a waiting one hands that one back
/// (``FleetSubmission/replaced``). What falls due is claimed by a worker
/// (``run(_:)`` or ``deliveries(batch:maxInHand:poll:)``) and leased to it
/// until it acknowledges; an emission whose worker died or hung is delivered
/// again after ``Options/lease`` (docs/fleet.md, "Throttle, audit and
/// debounce across the fleet", states what is guaranteed).
///
/// Values are ``FleetPayload``s (`String`, `[UInt8]`, or your `Codable`
/// types). Keys are strings; every process of the fleet uses the same Redis,
/// ``FleetConfiguration/prefix``, policy and ``Options/partitions``.
/// Every method may be called from any task.
public final class FleetTimedLimiter<Value: FleetPayload>: @unchecked Sendable {
    // @unchecked: the C limiter is thread-safe (on a loop); `worker` is
    // guarded by `state`, the handle's fields by its own lock.

    /// What a ``FleetTimedLimiter`` keeps, and for how long.
    public struct Options: Sendable {
        /// Partitions the keys are spread over, 1 to 4096, the same in every
        /// process (`nil`: 1, or 16 on a Redis Cluster, whose nodes then
        /// share the work). A claim works on one partition.
        public var partitions: Int? = nil
        /// How long a worker holds a delivery before it may be delivered
        /// again (the at-least-once bound on a crashed worker).
        public var lease: Duration = .seconds(30)
        /// How long a partition's key states outlive their latest
        /// deadline, and an unacknowledged delivery lives, in Redis:
        /// nothing stays forever after a crash.
        public var retention: Duration = .seconds(86_400)
        /// Largest value in bytes (``FleetPayload/fleetBytes()``), up to 64 MiB.
        public var maxValueBytes: Int = 64 * 1024
        /// How long an operation waits for Redis.
        public var timeout: Duration = .seconds(1)

        /// The defaults.
        public init() {}
    }

    /// The policy: throttle, audit or debounce.
    public let policy: LimiterPolicy
    let handle: TimedHandle
    private let manualTime: Bool
    private let maxValueBytes: Int
    private let state = Locked(Worker())

    private struct Worker {
        var box: WorkerBox<Value>? = nil
    }

    /// Creates the limiter and starts connecting (calls made before the
    /// connection is up wait for it, within the timeout).
    ///
    /// - Parameters:
    ///   - policy: ``Sluice/LimiterPolicy/throttle(interval:leading:trailing:pick:)``,
    ///     ``Sluice/LimiterPolicy/audit(interval:)`` or
    ///     ``Sluice/LimiterPolicy/debounce(interval:leading:trailing:maxWait:)``.
    ///   - configuration: where Redis is (``FleetConfiguration/url``, or
    ///     ``FleetConfiguration/host`` and ``FleetConfiguration/port``), the
    ///     ``FleetConfiguration/prefix`` naming the namespace, and
    ///     ``FleetConfiguration/manualTime`` for tests. Its timeout, failure
    ///     policy, cache and clock belong to ``FleetLimiter`` and are not used.
    ///   - options: lease, retention, partitions, value size, timeout.
    ///   - loop: the event loop it runs on (the library's shared loop by default).
    /// - Throws: ``Sluice/LimiterError/invalidArgument`` or
    ///   ``Sluice/LimiterError/outOfRange`` naming the option and the rule,
    ///   ``Sluice/LimiterError/malformedInput`` for a bad URL,
    ///   ``Sluice/LimiterError/tlsFailed`` for TLS files that cannot be loaded.
    public init(
        _ policy: LimiterPolicy, configuration: FleetConfiguration = FleetConfiguration(),
        options: Options = Options(), loop: LimiterLoop = .shared
    ) throws(LimiterError) {
        if policy.rateLimit != nil {
            throw LimiterError(
                .invalidArgument,
                reason: "A FleetTimedLimiter takes throttle, audit or debounce; a rate policy is FleetLimiter's.")
        }
        if let problem = policy.problem { throw LimiterError(problem.code, reason: problem.sentence) }
        var c = sluice_fleet_timed_config_t()
        c.policy = try policy.cPolicy()
        if let p = options.partitions {
            guard (1...4096).contains(p) else { throw Self.invalid("partitions", p, "it must be 1 to 4096") }
            c.partitions = UInt32(p)
        }
        c.lease_ns = try Self.positiveNs("lease", options.lease)
        c.timeout_ns = try Self.positiveNs("timeout", options.timeout)
        c.retain_ms = max(1, try Self.positiveNs("retention", options.retention) / 1_000_000)
        guard (1...(64 << 20)).contains(options.maxValueBytes) else {
            throw Self.invalid("maxValueBytes", options.maxValueBytes, "it must be 1 to 64 MiB")
        }
        c.max_value = options.maxValueBytes
        c.manual_time = configuration.manualTime
        let url = configuration.url ?? "redis://\(configuration.host):\(configuration.port)"
        var why = [CChar](repeating: 0, count: 256)
        if sluice_fleet_check_url(url, &why, why.count) != 0 {
            throw LimiterError(.malformedInput, reason: "Invalid FleetConfiguration.url: \(text(of: why)).")
        }
        let prefix = Array(configuration.prefix.utf8)
        guard (1...256).contains(prefix.count) else {
            throw Self.invalid("prefix", "\(prefix.count) bytes", "it must be 1 to 256 bytes of UTF-8")
        }
        var out: OpaquePointer?
        let rc = url.withCString { u in
            prefix.withUnsafeBytes { p in
                c.url = u
                c.prefix = p.baseAddress
                c.prefix_len = p.count
                return sluice_fleet_timed_new_on_loop(&out, loop.cHandle, &c)
            }
        }
        guard rc == 0, let out else { throw LimiterError(rawValue: rc) }
        handle = TimedHandle(out, loop: loop)
        self.policy = policy
        manualTime = configuration.manualTime
        maxValueBytes = options.maxValueBytes
    }

    deinit {
        handle.free()
    }

    // MARK: - Calls

    /// Hands `value` to the limiter for `key`, now (or, in manual-time mode, at `time`).
    ///
    /// - Parameters:
    ///   - value: the value.
    ///   - key: the key.
    ///   - time: manual-time mode only: the call's time.
    /// - Returns: what happened to the value, and the waiting value it replaced.
    /// - Throws: ``Sluice/LimiterError/outOfRange`` for a value above
    ///   ``Options/maxValueBytes``, ``Sluice/LimiterError/closed`` once the
    ///   namespace was closed (``closeFleet(drain:)``) or the limiter shut
    ///   down, the connection's error when Redis did not answer in time
    ///   (the value was then not taken: call again, or hand it elsewhere).
    public func submit(
        _ value: Value, for key: String, at time: LimiterInstant? = nil
    ) async throws(LimiterError) -> FleetSubmission<Value> {
        let bytes: [UInt8]
        do { bytes = try value.fleetBytes() } catch {
            throw LimiterError(.invalidArgument, reason: "The value could not be written as bytes: \(error).")
        }
        guard bytes.count <= maxValueBytes else {
            throw LimiterError(
                .outOfRange,
                reason: "The value is \(bytes.count) bytes, above this limiter's maxValueBytes (\(maxValueBytes)).")
        }
        let now = try callTime(time)
        let a = try await handle.request { t, fn, user in
            key.withKeyBytes { k in
                bytes.withUnsafeBytes { v in sluice_fleet_timed_call(t, k, v.baseAddress, v.count, now, fn, user) }
            }
        }
        let onto = Onto(now: a.now, local: manualTime ? nil : a.local)
        let outcome: FleetSubmission<Value>.Outcome
        switch a.kind {
        case SLUICE_EMITTED: outcome = .emitted(generation: a.generation)
        case SLUICE_DROPPED: outcome = .dropped(busyUntil: onto(a.at))
        default: outcome = .scheduled(at: onto(a.at))
        }
        return FleetSubmission(outcome: outcome, replaced: a.dropped.flatMap { try? Value(fleetBytes: $0) })
    }

    /// Emits `key`'s waiting value now, if there is one (it becomes a
    /// delivery, ready for a worker); either way the key goes idle.
    ///
    /// - Parameters:
    ///   - key: the key.
    ///   - time: manual-time mode only.
    /// - Returns: whether a value was waiting.
    /// - Throws: as ``submit(_:for:at:)``.
    @discardableResult
    public func flush(_ key: String, at time: LimiterInstant? = nil) async throws(LimiterError) -> Bool {
        try await keyOp(key, time, sluice_fleet_timed_flush).had
    }

    /// Drops `key`'s waiting value, if there is one, and returns it; the key
    /// goes idle.
    ///
    /// - Parameters:
    ///   - key: the key.
    ///   - time: manual-time mode only.
    /// - Returns: the value that was waiting, or `nil`.
    /// - Throws: as ``submit(_:for:at:)``.
    @discardableResult
    public func cancel(_ key: String, at time: LimiterInstant? = nil) async throws(LimiterError) -> Value? {
        try await keyOp(key, time, sluice_fleet_timed_cancel).dropped.flatMap { try? Value(fleetBytes: $0) }
    }

    /// Whether a value of `key` waits to be emitted.
    ///
    /// - Parameters:
    ///   - key: the key.
    ///   - time: manual-time mode only.
    /// - Returns: whether a value waits.
    /// - Throws: as ``submit(_:for:at:)``.
    public func isPending(_ key: String, at time: LimiterInstant? = nil) async throws(LimiterError) -> Bool {
        try await keyOp(key, time, sluice_fleet_timed_pending).had
    }

    /// Closes the namespace for the whole fleet: every process's later calls
    /// throw ``Sluice/LimiterError/closed``; due deadlines fire, then every
    /// waiting value is emitted now (`drain`: workers deliver them) or
    /// handed back (returned).
    ///
    /// Not for one process's shutdown: that is ``shutdown()``.
    ///
    /// - Parameters:
    ///   - drain: emit the waiting values (`true`) or hand them back.
    ///   - time: manual-time mode only.
    /// - Returns: the values handed back (discard), with their keys.
    /// - Throws: the connection's error.
    @discardableResult
    public func closeFleet(
        drain: Bool, at time: LimiterInstant? = nil
    ) async throws(LimiterError)
        -> [(key: String, value: Value)]
    {
        let now = try callTime(time)
        let a = try await handle.request { t, fn, user in
            sluice_fleet_timed_close(t, drain ? SLUICE_CLOSE_DRAIN : SLUICE_CLOSE_DISCARD, now, fn, user)
        }
        return a.discarded.compactMap { d in (try? Value(fleetBytes: d.value)).map { (d.key, $0) } }
    }

    // MARK: - Workers

    /// Makes this process a worker and hands it every emission that falls
    /// due, as a sequence: do each one's work, then
    /// ``FleetDelivery/acknowledge()`` it.
    ///
    /// When the sequence's consumer stops (the task is cancelled, or the
    /// loop leaves), the worker stops and hands back every delivery it
    /// holds, so that the other workers take them over at once.
    ///
    /// - Parameters:
    ///   - batch: deliveries claimed per round trip, 1 to 1024.
    ///   - maxInHand: most deliveries held unacknowledged; no more are
    ///     claimed meanwhile.
    ///   - poll: the longest a partition goes unclaimed: a deadline another
    ///     process set is delivered within this (plus a round trip).
    /// - Returns: the deliveries.
    /// - Throws: ``Sluice/LimiterError/invalidArgument`` when this limiter
    ///   is (or was) a worker already, or in manual-time mode.
    public func deliveries(
        batch: Int = 64, maxInHand: Int = 1024, poll: Duration = .milliseconds(100)
    ) throws(LimiterError) -> AsyncStream<FleetDelivery<Value>> {
        guard (1...1024).contains(batch) else { throw Self.invalid("batch", batch, "it must be 1 to 1024") }
        guard maxInHand >= 1 else { throw Self.invalid("maxInHand", maxInHand, "it must be at least 1") }
        let pollNs = try Self.positiveNs("poll", poll)
        let (stream, continuation) = AsyncStream.makeStream(of: FleetDelivery<Value>.self)
        let box = WorkerBox<Value>(continuation: continuation, handle: handle)
        try state.withLock { (s: inout Worker) throws(LimiterError) in
            guard s.box == nil else {
                throw LimiterError(.invalidArgument, reason: "This FleetTimedLimiter is a worker already.")
            }
            s.box = box
        }
        var w = sluice_fleet_timed_worker_t()
        w.handler = timedHandler
        w.user = Unmanaged.passUnretained(box).toOpaque()  // kept by `state` as long as the limiter
        w.poll_ns = pollNs
        w.batch = batch
        w.max_in_hand = maxInHand
        let rc = handle.withLimiter { t in sluice_fleet_timed_start(t, &w) }
        guard rc == 0 else {
            continuation.finish()
            throw LimiterError(rawValue: rc)
        }
        let handle = self.handle
        continuation.onTermination = { _ in handle.stop() }
        return stream
    }

    /// Runs this process as a worker until the task is cancelled: each
    /// emission that falls due goes to `handler`, and is acknowledged when it
    /// returns, or handed back for another attempt when it throws.
    /// Cancelling the task stops the worker and hands back what it holds.
    ///
    /// - Parameter handler: the work of one delivery.
    /// - Throws: as ``deliveries(batch:maxInHand:poll:)``.
    public func run(_ handler: @Sendable (FleetDelivery<Value>) async throws -> Void) async throws(LimiterError) {
        for await delivery in try deliveries() {
            do {
                try await handler(delivery)
                try? await delivery.acknowledge()  // a refusal: another attempt holds it
            } catch {
                try? await delivery.release()
            }
        }
    }

    /// Stops this process's part: a worker hands back every delivery it
    /// holds, and operations not answered yet throw
    /// ``Sluice/LimiterError/closed``. The namespace and the other
    /// processes go on. Releasing the limiter does the same.
    public func shutdown() async {
        await handle.stopAndWait()
        handle.free()
    }

    /// Counters of this process.
    public var statistics: FleetTimedStatistics { handle.statistics }

    // MARK: - Helpers

    private func keyOp(
        _ key: String, _ time: LimiterInstant?,
        _ op:
            @escaping (OpaquePointer?, sluice_key_t, UInt64, sluice_fleet_timed_fn?, UnsafeMutableRawPointer?) ->
            Int32
    ) async throws(LimiterError) -> TimedAnswer {
        let now = try callTime(time)
        return try await handle.request { t, fn, user in key.withKeyBytes { k in op(t, k, now, fn, user) } }
    }

    private func callTime(_ time: LimiterInstant?) throws(LimiterError) -> UInt64 {
        switch (manualTime, time) {
        case let (true, time?): return time.nanoseconds
        case (false, nil): return 0
        case (true, nil):
            throw LimiterError(
                .invalidArgument, reason: "A FleetTimedLimiter in manual-time mode needs each call's time (at:).")
        case (false, _?):
            throw LimiterError(
                .invalidArgument,
                reason: "A call's time (at:) is for manual-time mode only; this limiter uses Redis's clock.")
        }
    }

    private static func invalid(_ option: String, _ value: Any, _ rule: String) -> LimiterError {
        LimiterError(.invalidArgument, reason: "Invalid FleetTimedLimiter option \(option) (\(value)): \(rule).")
    }

    private static func positiveNs(_ option: String, _ d: Duration) throws(LimiterError) -> UInt64 {
        guard d > .zero else { throw invalid(option, d, "it must be more than zero") }
        let (s, a) = d.components
        guard s < 17_000_000_000 else {
            throw LimiterError(.outOfRange, reason: "Invalid FleetTimedLimiter option \(option) (\(d)): too long.")
        }
        return max(1, UInt64(s) * 1_000_000_000 + UInt64(a / 1_000_000_000))
    }
}

/// What happened to a value handed to a ``FleetTimedLimiter``.
public struct FleetSubmission<Value: FleetPayload>: Sendable {
    /// The value's fate.
    public enum Outcome: Sendable, Hashable {
        /// Emitted now (a leading edge): do the work. Its generation, as a
        /// delivery's.
        case emitted(generation: UInt64)
        /// Not emitted and not kept: the key is busy until then.
        case dropped(busyUntil: LimiterInstant)
        /// Waits in Redis, to be emitted then unless replaced; a worker
        /// delivers it.
        case scheduled(at: LimiterInstant)
    }

    /// The value's fate.
    public var outcome: Outcome
    /// The waiting value this call replaced: dropped, never emitted.
    public var replaced: Value?
}

/// Counters of one process's ``FleetTimedLimiter``.
public struct FleetTimedStatistics: Hashable, Sendable {
    /// Claims sent, deliveries handed to this process (redeliveries
    /// included) and of those the later attempts.
    public var claims, delivered, redelivered: UInt64
    /// Acknowledgements taken, and refused (a later attempt held the delivery).
    public var acknowledged, acknowledgementsRefused: UInt64
    /// Deliveries held now, not acknowledged yet.
    public var inHand: UInt64
    /// Operations Redis did not answer (timeouts, connection, errors).
    public var failures: UInt64
    /// Deliveries whose value this process could not read
    /// (``FleetPayload/init(fleetBytes:)`` threw): acknowledged, not handed on.
    public var undecodable: UInt64
    /// Script runs sent to Redis: calls and acknowledgements go several to a
    /// run under load, so this grows slower than the operations.
    public var scriptRuns: UInt64
}

extension String {
    /// The string's UTF-8 bytes as a C byte key.
    fileprivate func withKeyBytes<R>(_ body: (sluice_key_t) -> R) -> R {
        var s = self
        return s.withUTF8 { body(sluice_key_bytes($0.baseAddress, $0.count)) }
    }
}
