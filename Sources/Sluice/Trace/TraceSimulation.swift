
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

extension Trace {
    /// Runs the trace through a ``Limiter`` on a ``ManualLimiterClock`` — the
    /// Swift layer end to end, as `sluice simulate` does — and returns what the
    /// limiter did, one ``TraceOutput`` per line of output.
    ///
    /// The limiter's keys and values are the trace's strings; its delivery is
    /// ``LimiterDelivery/events(_:)``, so every value's fate (emit, drop,
    /// discard) becomes a line at the time the limiter reports. A step at
    /// `TIME` ms runs with the clock at `TIME` ms; before it, the clock
    /// advances there, firing every deadline on the way at its exact time.
    /// After the last step, unless it is `close`, time runs on until no
    /// deadline is left. The hash key is the C runner's fixed one, so the
    /// order between keys at one instant matches `sluice-trace`.
    ///
    /// The output agrees with ``run(options:)`` (the core driven directly):
    /// the same lines per key, in the same order.
    ///
    /// - Parameter observe: called with each output line as it happens (for
    ///   example to print while running); the returned array holds them too.
    /// - Returns: the output lines, in the order they happened.
    /// - Throws: ``TraceRunError`` when the limiter misbehaved (a value
    ///   reported twice or never, an error from a valid step).
    public func simulate(observe: (@Sendable (TraceOutput) -> Void)? = nil) throws(TraceRunError) -> [TraceOutput] {
        try simulate(observe: observe, stepDelay: nil)
    }

    /// ``simulate(observe:)`` with each step delayed by `stepDelay(index)`
    /// nanoseconds (tests: a trace whose outcome changes under such delays
    /// depends on sub-millisecond timing, which a real-time run cannot
    /// reproduce).
    func simulate(
        observe: (@Sendable (TraceOutput) -> Void)?, stepDelay: ((Int) -> UInt64)?
    ) throws(TraceRunError) -> [TraceOutput] {
        let clock = ManualLimiterClock()
        let log = Locked<[TraceOutput]>([])
        let record: @Sendable (TraceOutput) -> Void = { line in
            log.withLock { $0.append(line) }
            observe?(line)
        }
        let limiter: Limiter<String, String>
        do {
            limiter = try Limiter(
                policy, scheduler: .manual(clock), maxKeys: nil, tick: .milliseconds(1), combine: nil,
                delivery: .events { event in
                    record(TraceOutput(time: event.at.nanoseconds / 1_000_000, key: event.key, kind: .init(event)))
                },
                seed: Trace.runnerSeed)
        } catch {
            throw TraceRunError(line: 0, reason: "creating the limiter failed for a valid policy: \(error)")
        }

        var calls = 0
        var closed = false
        var lastTime: UInt64 = 0
        for (index, step) in steps.enumerated() {
            let line = step.line
            if closed { throw TraceRunError(line: line, reason: "a step after close") }
            if step.time < lastTime { throw TraceRunError(line: line, reason: "time goes backwards") }
            lastTime = step.time
            let (t, overflow) = step.time.multipliedReportingOverflow(by: 1_000_000)
            if overflow { throw TraceRunError(line: line, reason: "time \(step.time) ms does not fit in ns") }
            clock.advance(to: LimiterInstant(nanoseconds: t + (stepDelay?(index) ?? 0)))
            do throws(LimiterError) {
                switch step.action {
                case let .call(key, value):
                    calls += 1
                    try limiter.submit(value, for: key)
                case let .cancel(key):
                    try limiter.cancel(key)
                case let .flush(key):
                    try limiter.flush(key)
                case let .pending(key):
                    let yes = try limiter.pending(key)
                    record(TraceOutput(time: step.time, key: key, kind: .pending(yes)))
                case let .close(mode):
                    try limiter.close(drain: mode == .drain)
                    closed = true
                }
            } catch {
                throw TraceRunError(line: line, reason: "\(step.action) failed: \(error)")
            }
        }
        if !closed { clock.runUntilIdle() }

        let output = log.withLock { $0 }
        let reported = output.count { if case .pending = $0.kind { false } else { true } }
        if reported != calls {
            throw TraceRunError(line: 0, reason: "\(calls) call(s) but \(reported) emit/drop/discard line(s)")
        }
        return output
    }
}

extension Trace {
    /// Runs the trace through a ``Limiter`` on a real event loop and clock,
    /// as `sluice simulate --realtime` does: each step is performed when its
    /// time has come (never before), and each output line carries the time,
    /// in whole milliseconds since the run started (rounded down), at which
    /// it was actually delivered.
    ///
    /// The lines of each key are those of ``simulate(observe:)``, in the
    /// same order; each is delivered no earlier than the specified time, and
    /// late by the loop's latency (typically below 2 ms with the library's
    /// precise timers). After the last step, unless it is `close`, the run
    /// waits until the limiter holds no value, then closes it.
    ///
    /// - Parameters:
    ///   - loop: the loop (``LimiterLoop/shared`` by default).
    ///   - observe: called with each output line as it is delivered.
    /// - Returns: the output lines, in the order they were delivered.
    /// - Throws: ``TraceRunError`` when the limiter misbehaved (an error from
    ///   a valid step, or a value never reported).
    public func simulateRealtime(
        on loop: LimiterLoop = .shared, observe: (@Sendable (TraceOutput) -> Void)? = nil
    ) async throws(TraceRunError) -> [TraceOutput] {
        let log = Locked<[TraceOutput]>([])
        let start = LimiterLoop.now.nanoseconds + 1_000_000
        let record: @Sendable (String, TraceOutput.Kind) -> Void = { key, kind in
            let elapsed = LimiterLoop.now.nanoseconds &- start
            let line = TraceOutput(time: elapsed / 1_000_000, key: key, kind: kind)
            log.withLock { $0.append(line) }
            observe?(line)
        }
        let limiter: Limiter<String, String>
        do {
            limiter = try Limiter(
                policy, scheduler: .loop(loop), maxKeys: nil, tick: .milliseconds(1), combine: nil,
                delivery: .events { event in record(event.key, .init(event)) },
                seed: nil)
        } catch {
            throw TraceRunError(line: 0, reason: "creating the limiter failed for a valid policy: \(error)")
        }

        var calls = 0
        var closed = false
        for step in steps {
            let line = step.line
            if closed { throw TraceRunError(line: line, reason: "a step after close") }
            let (offset, overflow) = step.time.multipliedReportingOverflow(by: 1_000_000)
            if overflow { throw TraceRunError(line: line, reason: "time \(step.time) ms does not fit in ns") }
            await sleep(untilMonotonic: start &+ offset)
            do throws(LimiterError) {
                switch step.action {
                case let .call(key, value):
                    calls += 1
                    try limiter.submit(value, for: key)
                case let .cancel(key):
                    try limiter.cancel(key)
                case let .flush(key):
                    try limiter.flush(key)
                case let .pending(key):
                    let yes = try limiter.pending(key)
                    record(key, .pending(yes))
                case let .close(mode):
                    try await limiter.close(drain: mode == .drain)
                    closed = true
                }
            } catch {
                throw TraceRunError(line: line, reason: "\(step.action) failed: \(error)")
            }
        }
        if !closed {
            // Let time run on until every value has been reported.
            while limiter.storage.heldValues > 0 {
                try? await Task.sleep(for: .milliseconds(2))
            }
            try? await limiter.close(drain: true)
        }

        let output = log.withLock { $0 }
        let reported = output.count { if case .pending = $0.kind { false } else { true } }
        if reported != calls {
            throw TraceRunError(line: 0, reason: "\(calls) call(s) but \(reported) emit/drop/discard line(s)")
        }
        return output
    }
}

/// Sleeps until `CLOCK_MONOTONIC` reaches `deadline` (ns), never returning early.
private func sleep(untilMonotonic deadline: UInt64) async {
    let now = LimiterLoop.now.nanoseconds
    if deadline > now + 2_000_000 {
        // Most of the wait without holding a thread; the rest precisely.
        try? await Task.sleep(for: .nanoseconds(Int64(deadline - now - 1_000_000)))
    }
    while LimiterLoop.now.nanoseconds < deadline {
        var remaining = timespec()
        let left = deadline &- LimiterLoop.now.nanoseconds
        guard left < UInt64(Int64.max) else { break }
        remaining.tv_sec = Int(left / 1_000_000_000)
        remaining.tv_nsec = Int(left % 1_000_000_000)
        nanosleep(&remaining, nil)
    }
}

extension TraceOutput.Kind {
    /// The output line's kind for a limiter event: `emit`, `drop` or `discard`.
    init(_ event: LimiterEvent<String, String>) {
        self = switch event.kind {
        case .emitted: .emit(value: event.value)
        case .dropped: .drop(value: event.value)
        case .discarded: .discard(value: event.value)
        }
    }
}
