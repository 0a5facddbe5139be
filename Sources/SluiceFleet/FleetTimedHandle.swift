import CSluice
import CSluiceFleet
import Sluice

/// The C timed limiter of a ``FleetTimedLimiter``, shared with its
/// deliveries: every C call goes through it, under its lock, so that the
/// limiter is never freed during one.
final class TimedHandle: @unchecked Sendable {
    // @unchecked: `state` guards the pointer; the C limiter is thread-safe.
    private let state: Locked<State>
    /// Kept alive as long as the C limiter that runs on it.
    let loop: LimiterLoop

    private struct State {
        var limiter: OpaquePointer?
        var final = sluice_fleet_timed_stats_t()
        var undecodable: UInt64 = 0
    }

    init(_ limiter: OpaquePointer, loop: LimiterLoop) {
        state = Locked(State(limiter: limiter))
        self.loop = loop
    }

    deinit {
        free()
    }

    /// `body` with the C limiter, or `SLUICE_ECLOSED` once it was freed.
    func withLimiter(_ body: (OpaquePointer) -> Int32) -> Int32 {
        state.withLock { s in
            guard let t = s.limiter else { return Int32(SLUICE_ECLOSED.rawValue) }
            return body(t)
        }
    }

    /// Frees the C limiter once (on its loop thread, this thread waiting):
    /// what is waiting is answered ``Sluice/LimiterError/closed``.
    func free() {
        let t = state.withLock { s -> OpaquePointer? in
            guard let t = s.limiter else { return nil }
            sluice_fleet_timed_stats(t, &s.final)
            s.limiter = nil
            return t
        }
        // outside the lock: the answers it gives may call in (and find it closed)
        if let t { sluice_fleet_timed_free(t) }
    }

    /// Sends one operation and waits for its answer (all of a close's batches).
    func request(
        _ send: (OpaquePointer, sluice_fleet_timed_fn, UnsafeMutableRawPointer) -> Int32
    ) async throws(LimiterError) -> TimedAnswer {
        let pending = TimedPending()
        let result: Result<TimedAnswer, LimiterError> = await withCheckedContinuation { continuation in
            pending.continuation = continuation
            let user = Unmanaged.passRetained(pending).toOpaque()
            let rc = withLimiter { t in send(t, timedCallback, user) }
            if rc != 0 {
                Unmanaged<TimedPending>.fromOpaque(user).release()
                continuation.resume(returning: .failure(LimiterError(rawValue: rc)))
            }
        }
        let answer = try result.get()
        if answer.status != 0 { throw LimiterError(rawValue: answer.status) }
        return answer
    }

    /// An acknowledgement or release of a delivery.
    func lease(_ op: sluice_fleet_timed_op_t, _ d: sluice_fleet_delivery_t) async throws(LimiterError) {
        var d = d
        _ = try await request { t, fn, user in
            op == SLUICE_FLEET_TIMED_ACK
                ? sluice_fleet_timed_ack(t, &d, fn, user) : sluice_fleet_timed_release(t, &d, fn, user)
        }
    }

    /// Stops the worker (its deliveries handed back), without waiting.
    func stop() {
        _ = withLimiter { t in sluice_fleet_timed_stop(t, nil, nil) }
    }

    /// Stops the worker and waits until its deliveries were handed back
    /// (at once when it is no worker).
    func stopAndWait() async {
        _ = try? await request { t, fn, user in sluice_fleet_timed_stop(t, fn, user) }
    }

    /// An undecodable delivery: acknowledged (never handed on) and counted.
    func acknowledgeUndecodable(_ d: UnsafePointer<sluice_fleet_delivery_t>) {
        _ = withLimiter { t in sluice_fleet_timed_ack(t, d, nil, nil) }
        state.withLock { $0.undecodable += 1 }
    }

    var statistics: FleetTimedStatistics {
        state.withLock { s in
            var c = s.final
            if let t = s.limiter { sluice_fleet_timed_stats(t, &c) }
            return FleetTimedStatistics(
                claims: c.claims, delivered: c.delivered, redelivered: c.redelivered, acknowledged: c.acked,
                acknowledgementsRefused: c.ack_refused, inHand: c.in_hand, failures: c.failures,
                undecodable: s.undecodable, scriptRuns: c.runs)
        }
    }
}

/// What Swift keeps of one answer: copies of the bytes the C answer points at.
struct TimedAnswer: Sendable {
    var status: Int32 = 0
    var kind = SLUICE_SCHEDULED
    var at: UInt64 = 0
    var now: UInt64 = 0
    var generation: UInt64 = 0
    var dropped: [UInt8]? = nil
    var had = false
    var discarded: [(key: String, value: [UInt8])] = []
    /// The local clock when the answer came (times count from `now`).
    var local: UInt64 = 0
}

/// An operation waiting for its answer; a close gathers its batches.
private final class TimedPending: @unchecked Sendable {
    // @unchecked: written by the loop thread only, after the submitting
    // thread handed it over (through the C call).
    var continuation: CheckedContinuation<Result<TimedAnswer, LimiterError>, Never>?
    var gathered = TimedAnswer()
}

/// The key of a delivery, as a string (an integer key, from a C process, in decimal).
func keyString(_ k: sluice_key_t) -> String {
    if k.kind == SLUICE_KEY_U64 { return String(k.u64) }
    guard let p = k.bytes else { return "" }
    return String(decoding: UnsafeRawBufferPointer(start: p, count: k.len), as: UTF8.self)
}

private func bytes(_ p: UnsafeRawPointer?, _ n: Int) -> [UInt8] {
    guard let p, n > 0 else { return [] }
    return Array(UnsafeRawBufferPointer(start: p, count: n))
}

/// The C callback of every operation.
private let timedCallback: sluice_fleet_timed_fn = { user, result in
    guard let user, let r = result?.pointee else { return }
    let pending = Unmanaged<TimedPending>.fromOpaque(user).takeUnretainedValue()
    var a = pending.gathered
    for i in 0..<r.n_discarded {
        let d = r.discarded[i]
        a.discarded.append((keyString(d.key), bytes(d.value, d.value_len)))
    }
    pending.gathered = a
    if r.op == SLUICE_FLEET_TIMED_CLOSE && r.status == 0 && r.had { return }  // more batches come
    a.status = r.status
    a.kind = r.decision.kind
    a.at = r.decision.at
    a.now = r.decision.now
    a.generation = r.generation
    if let p = r.dropped { a.dropped = bytes(p, r.dropped_len) }
    a.had = r.had
    a.local = LimiterLoop.now.nanoseconds
    let continuation = pending.continuation
    Unmanaged<TimedPending>.fromOpaque(user).release()
    continuation?.resume(returning: .success(a))
}

/// A worker's deliveries, from the C handler (loop thread) to the stream.
class AnyWorkerBox: @unchecked Sendable {
    func deliver(_ d: UnsafePointer<sluice_fleet_delivery_t>) {}
}

final class WorkerBox<Value: FleetPayload>: AnyWorkerBox, @unchecked Sendable {
    // @unchecked: used by the loop thread only (the continuation is Sendable).
    let continuation: AsyncStream<FleetDelivery<Value>>.Continuation
    let handle: TimedHandle

    init(continuation: AsyncStream<FleetDelivery<Value>>.Continuation, handle: TimedHandle) {
        self.continuation = continuation
        self.handle = handle
    }

    override func deliver(_ p: UnsafePointer<sluice_fleet_delivery_t>) {
        let d = p.pointee
        guard let value = try? Value(fleetBytes: bytes(d.value, d.value_len)) else {
            handle.acknowledgeUndecodable(p)
            return
        }
        let delivery = FleetDelivery(
            key: keyString(d.key), value: value, generation: d.generation, attempt: Int(d.attempt),
            emittedAt: d.at, partition: d.partition, limiter: handle)
        if case .terminated = continuation.yield(delivery) {
            // nobody takes it any more: back to the fleet at once
            var c = p.pointee
            _ = handle.withLimiter { t in sluice_fleet_timed_release(t, &c, nil, nil) }
        }
    }
}

/// The C handler of a worker.
let timedHandler: sluice_fleet_timed_handler_fn = { user, delivery in
    guard let user, let delivery else { return }
    Unmanaged<AnyWorkerBox>.fromOpaque(user).takeUnretainedValue().deliver(delivery)
}
