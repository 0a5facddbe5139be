import CSluice
import Foundation
import CSluiceTrace
import Sluice

/// A parsed conformance trace: the trace library's `sluice_trace_t`
/// (`sluice_trace.h`), each C call wrapped once. The library is the one
/// parser and runner of the format (docs/trace-format.md); this type only
/// converts.
///
/// Immutable after parsing; any thread may read or run it.
final class Trace: @unchecked Sendable {
    // @unchecked: the C trace is never changed after parsing.
    private let handle: OpaquePointer

    /// One input line after the policy.
    struct Step: Hashable, Sendable {
        enum Verb: Hashable, Sendable {
            case call(value: String, cost: UInt64)
            case quota(cost: UInt64)
            case cancel, flush, pending
            case close(drain: Bool)
        }

        /// The 1-based input line.
        var line: Int
        /// TIME, in ms.
        var time: UInt64
        var verb: Verb
        /// KEY (empty for close).
        var key: String
        /// A `cost=` field was written.
        var hasCost = false
        /// call and quota under a table of plans (format v3): the plan's
        /// name (the first plan when no `plan=` was written); `nil` otherwise.
        var plan: String? = nil
    }

    /// The policy, as a Swift policy: under a table of plans, the first
    /// quota of the first plan (see ``plans``).
    let policy: LimiterPolicy
    /// The trace's table of plans of rate quotas (format v3: `plan` lines,
    /// or several quotas forming one plan named "default"), in order; empty
    /// for a trace of one policy.
    let plans: [RatePlan]
    /// The steps, in order.
    let steps: [Step]

    /// Parses a whole trace (`sluice_trace_parse`).
    ///
    /// - Parameter bytes: the input.
    /// - Throws: ``TraceSyntaxError`` with the library's exact message.
    init(parsing bytes: [UInt8]) throws(TraceSyntaxError) {
        var trace: OpaquePointer?
        var error = sluice_trace_error_t()
        let rc = bytes.withUnsafeBufferPointer { buffer in
            buffer.withMemoryRebound(to: CChar.self) {
                sluice_trace_parse($0.baseAddress, $0.count, &trace, &error)
            }
        }
        guard rc == SLUICE_OK.rawValue, let trace else {
            let message = withUnsafeBytes(of: &error.message) {
                String(cString: $0.bindMemory(to: CChar.self).baseAddress!)
            }
            throw TraceSyntaxError(line: error.line, message: message.isEmpty ? "error: \(Self.describe(rc))" : message)
        }
        handle = trace
        let cPolicy = sluice_trace_policy(trace)
        guard let policy = LimiterPolicy(core: cPolicy) else {
            sluice_trace_free(trace)
            throw TraceSyntaxError(line: 0, message: "error: unknown policy kind")
        }
        self.policy = policy
        let plans = Self.plans(of: trace)
        self.plans = plans
        var steps: [Step] = []
        let count = sluice_trace_step_count(trace)
        steps.reserveCapacity(count)
        for index in 0..<count {
            var step = sluice_trace_step_t()
            guard sluice_trace_step(trace, index, &step) == SLUICE_OK.rawValue else { continue }
            let key = Self.string(step.key, step.key_len)
            let verb: Step.Verb =
                switch step.verb {
                case SLUICE_TRACE_CALL: .call(value: Self.string(step.value, step.value_len), cost: step.cost)
                case SLUICE_TRACE_QUOTA: .quota(cost: step.cost)
                case SLUICE_TRACE_CANCEL: .cancel
                case SLUICE_TRACE_FLUSH: .flush
                case SLUICE_TRACE_PENDING: .pending
                default: .close(drain: step.close_mode == SLUICE_CLOSE_DRAIN)
                }
            var plan: String? = nil
            if case .call = verb, plans.indices.contains(Int(step.plan)) { plan = plans[Int(step.plan)].name }
            if case .quota = verb, plans.indices.contains(Int(step.plan)) { plan = plans[Int(step.plan)].name }
            steps.append(
                Step(line: step.line, time: step.time_ms, verb: verb, key: key, hasCost: step.has_cost, plan: plan))
        }
        self.steps = steps
    }

    deinit {
        sluice_trace_free(handle)
    }

    /// `sluice_trace_plans`, as Swift plans: empty for a trace of one policy.
    private static func plans(of trace: OpaquePointer) -> [RatePlan] {
        guard let table = sluice_trace_plans(trace)?.pointee, let cPlans = table.plans else { return [] }
        return (0..<table.nplans).map { p in
            let plan = cPlans[p]
            let quotas: [RatePlan.Quota] = (0..<plan.nquotas).map { q in
                let quota = plan.quotas[q]
                return RatePlan.Quota(
                    quota.name.map { String(cString: $0) } ?? "",
                    limit: Int(quota.limit), per: .nanoseconds(quota.per_ns),
                    burst: quota.burst == 0 ? nil : Int(quota.burst))
            }
            return RatePlan(plan.name.map { String(cString: $0) } ?? "", quotas: quotas)
        }
    }

    /// Options of a run.
    struct RunOptions: Sendable {
        /// Run the core's invariant checker after every step and advance.
        var checkInvariants = false
        /// Hash keys with a random seed (only the order of different keys'
        /// lines at one instant may change).
        var randomSeed = false
    }

    /// Runs the trace on a manual clock, exactly (`sluice_trace_run`).
    ///
    /// - Parameters:
    ///   - options: the options.
    ///   - observe: receives each line as it is produced, on this thread.
    /// - Returns: every output line, in order.
    /// - Throws: ``TraceRunError`` (a bug in Sluice, or out of memory).
    func run(
        options: RunOptions = RunOptions(), observe: ((TraceLine) -> Void)? = nil
    ) throws(TraceRunError)
        -> [TraceLine]
    {
        var cOptions = sluice_trace_run_options_t()
        cOptions.check_invariants = options.checkInvariants
        cOptions.random_seed = options.randomSeed
        return try collect(cOptions, observe: observe) { sluice_trace_run(handle, $0, $1) }
    }

    /// Runs the trace on the real clock and a real loop
    /// (`sluice_trace_run_realtime`): steps at their real times, lines as
    /// they are delivered. Blocks the calling thread for the length of the
    /// trace: call it from a thread of its own (see ``runRealtimeDetached(observe:)``).
    func runRealtime(observe: ((TraceLine) -> Void)? = nil) throws(TraceRunError) -> [TraceLine] {
        try collect(sluice_trace_run_options_t(), observe: observe) { sluice_trace_run_realtime(handle, $0, $1) }
    }

    /// ``runRealtime(observe:)`` on a thread of its own, so that no thread
    /// of Swift's cooperative pool blocks while the trace waits for its times.
    func runRealtimeDetached(
        observe: (@Sendable (TraceLine) -> Void)? = nil
    ) async throws(TraceRunError)
        -> [TraceLine]
    {
        let result: Result<[TraceLine], TraceRunError> = await withCheckedContinuation { continuation in
            let thread = Thread {
                do throws(TraceRunError) {
                    continuation.resume(returning: .success(try self.runRealtime(observe: observe)))
                } catch {
                    continuation.resume(returning: .failure(error))
                }
            }
            thread.start()
        }
        return try result.get()
    }

    private final class Collector {
        var lines: [TraceLine] = []
        let observe: ((TraceLine) -> Void)?
        init(observe: ((TraceLine) -> Void)?) { self.observe = observe }
    }

    private func collect(
        _ options: sluice_trace_run_options_t, observe: ((TraceLine) -> Void)?,
        _ run: (UnsafePointer<sluice_trace_run_options_t>, UnsafeMutablePointer<sluice_trace_run_result_t>) -> Int32
    ) throws(TraceRunError) -> [TraceLine] {
        let collector = Collector(observe: observe)
        var options = options
        options.user = Unmanaged.passUnretained(collector).toOpaque()
        options.on_output = { user, line in
            guard let user, let line else { return }
            let collector = Unmanaged<Collector>.fromOpaque(user).takeUnretainedValue()
            let copy = TraceLine(line.pointee)
            collector.lines.append(copy)
            collector.observe?(copy)
        }
        var result = sluice_trace_run_result_t()
        let rc = withExtendedLifetime(collector) { run(&options, &result) }
        guard rc == SLUICE_OK.rawValue else {
            let message = withUnsafeBytes(of: &result.message) {
                String(cString: $0.bindMemory(to: CChar.self).baseAddress!)
            }
            throw TraceRunError(message: message.isEmpty ? Self.describe(rc) : message)
        }
        return collector.lines
    }

    /// `sluice_strerror`: the sentence of the one error list.
    static func describe(_ status: Int32) -> String {
        String(cString: sluice_strerror(status))
    }

    static func string(_ bytes: UnsafePointer<CChar>?, _ count: Int) -> String {
        guard let bytes, count > 0 else { return "" }
        return String(decoding: UnsafeRawBufferPointer(start: bytes, count: count), as: UTF8.self)
    }
}

/// One output line of a run (`sluice_trace_output_t`), copied.
struct TraceLine: Hashable, Sendable, CustomStringConvertible {
    enum Kind: Hashable, Sendable {
        case emit, drop, discard, pending(Bool), quota
    }

    var kind: Kind
    /// TIME, in ms (real-time runs: when it was delivered).
    var time: UInt64
    /// The step it concerns: the call for emit, drop and discard.
    var step: Int
    var key: String
    /// emit, drop, discard: the call's VALUE.
    var value: String?
    /// drop: the step of the call that took this value's place, if any.
    var successorStep: Int?
    /// quota, one quota of several (format v3): its name (`policy=NAME`);
    /// `nil` on the overall line and on every other line.
    var policyName: String?
    /// The exact line the tool prints.
    var text: String

    init(_ line: sluice_trace_output_t) {
        switch line.kind {
        case SLUICE_TRACE_OUT_EMIT: kind = .emit
        case SLUICE_TRACE_OUT_DROP: kind = .drop
        case SLUICE_TRACE_OUT_DISCARD: kind = .discard
        case SLUICE_TRACE_OUT_PENDING: kind = .pending(line.yes)
        default: kind = .quota
        }
        time = line.time_ms
        step = line.step
        key = Trace.string(line.key, line.key_len)
        value = line.value == nil ? nil : Trace.string(line.value, line.value_len)
        successorStep = line.has_successor ? line.successor_step : nil
        policyName = line.policy_name.map { String(cString: $0) }
        text = Trace.string(line.text, line.text_len)
    }

    var description: String { text }
}

/// A malformed trace.
struct TraceSyntaxError: Error, Hashable, Sendable, CustomStringConvertible {
    /// The 1-based line (0 for "out of memory").
    var line: Int
    /// The exact text the tool prints: `error: line N: REASON`.
    var message: String
    var description: String { message }
}

/// A run that failed: a bug in Sluice (or out of memory), never the trace's fault.
struct TraceRunError: Error, Hashable, Sendable, CustomStringConvertible {
    var message: String
    var description: String { message }
}
