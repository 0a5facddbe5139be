// The conformance replay, on the manual clock and, with the NIO trait, on an
// EmbeddedEventLoop and a NIOAsyncTestingEventLoop (NIOEngineTests.swift).
import Foundation
import Testing

@testable import Sluice
@testable import SluiceCLI

/// Replays a parsed trace through the Swift `Limiter<String, String>` on an
/// engine with manual time (1 ms tick) and prints the lines the format
/// specifies: a test of the Swift layer against the vectors (the trace tool
/// itself runs the C runner).
struct LimiterReplay {
    let trace: Trace
    var stepDelay: ((Int) -> UInt64)?

    init(_ trace: Trace, stepDelay: ((Int) -> UInt64)? = nil) {
        self.trace = trace
        self.stepDelay = stepDelay
    }

    /// The output lines, on Sluice's manual clock.
    func run() async throws -> [String] {
        try await run(on: ManualLimiterClock())
    }

    /// The output lines, on `engine` (whose clock must start at 0).
    func run(on engine: some ManualTimeEngine) async throws -> [String] {
        if !trace.plans.isEmpty { return try await runPlans(on: engine) }
        let log = Locked<[String]>([])
        let record: @Sendable (String) -> Void = { line in log.withLock { $0.append(line) } }
        let limiter = try Limiter<String, String>(
            trace.policy, scheduler: engine.scheduler, maxKeys: nil, tick: .milliseconds(1), combine: nil,
            delivery: .events { event in
                let verb =
                    switch event.kind {
                    case .emitted: "emit"
                    case .dropped: "drop"
                    case .discarded: "discard"
                    }
                record("\(event.at.nanoseconds / 1_000_000) \(verb) \(event.key) \(event.value)")
            },
            seed: (0x736C_7569_6365_2D74, 0x7472_6163_652D_7632), makeSink: { LimiterStorage.makeSink($0) })
        func ms(_ instant: LimiterInstant?) -> String {
            guard let instant else { return "never" }
            let ns = instant.nanoseconds
            return String(ns / 1_000_000 + (ns % 1_000_000 == 0 ? 0 : 1))
        }
        var closed = false
        for (index, step) in trace.steps.enumerated() {
            await engine.advanceTime(to: LimiterInstant(nanoseconds: step.time * 1_000_000 + (stepDelay?(index) ?? 0)))
            switch step.verb {
            case let .call(value, cost):
                if cost == 1 && !step.hasCost {
                    try limiter.submit(value, for: step.key)
                } else {
                    try limiter.submit(value, for: step.key, cost: Int(cost))
                }
            case let .quota(cost):
                let quota = try limiter.quota(for: step.key, cost: Int(cost))
                record(
                    "\(step.time) quota \(step.key) remaining=\(quota.remaining) full=\(ms(quota.fullAt)) retry=\(ms(quota.retryAt))"
                )
            case .cancel:
                try limiter.cancel(step.key)
            case .flush:
                try limiter.flush(step.key)
            case .pending:
                let yes = try limiter.pending(step.key)
                record("\(step.time) pending \(step.key) \(yes ? "yes" : "no")")
            case let .close(drain):
                try await limiter.close(drain: drain)
                closed = true
            }
        }
        if !closed {
            await engine.runAll()
            // Whatever is left (nothing, if the engine ran every deadline) is
            // not part of the output: discarded silently.
            let lines = log.withLock { $0 }
            try await limiter.close(drain: false)
            return lines
        }
        return log.withLock { $0 }
    }
}

extension LimiterReplay {
    /// A trace of plans (format v3) through `RateLimiter<String>(plans:)`:
    /// each call under its plan (`check(_:plan:cost:)`), each quota line
    /// read under its plan, with a line per quota when the plan has several.
    func runPlans(on engine: some ManualTimeEngine) async throws -> [String] {
        let limiter = try RateLimiter<String>(plans: trace.plans, scheduler: engine.scheduler)
        func ms(_ instant: LimiterInstant?) -> String {
            guard let instant else { return "never" }
            let ns = instant.nanoseconds
            return String(ns / 1_000_000 + (ns % 1_000_000 == 0 ? 0 : 1))
        }
        var lines: [String] = []
        for (index, step) in trace.steps.enumerated() {
            await engine.advanceTime(to: LimiterInstant(nanoseconds: step.time * 1_000_000 + (stepDelay?(index) ?? 0)))
            let plan = try #require(step.plan, "line \(step.line): a step of a trace of plans names its plan")
            switch step.verb {
            case let .call(value, cost):
                let decision = try limiter.check(step.key, plan: plan, cost: Int(cost))
                lines.append("\(step.time) \(decision.isAdmitted ? "emit" : "drop") \(step.key) \(value)")
            case let .quota(cost):
                let quota = try limiter.quota(for: step.key, plan: plan, cost: Int(cost))
                lines.append(
                    "\(step.time) quota \(step.key) remaining=\(quota.remaining) full=\(ms(quota.fullAt)) retry=\(ms(quota.retryAt))"
                )
                if quota.quotas.count > 1 {
                    for figures in quota.quotas {
                        lines.append(
                            "\(step.time) quota \(step.key) policy=\(figures.name) remaining=\(figures.remaining) "
                                + "full=\(ms(figures.fullAt)) retry=\(ms(figures.retryAt))")
                    }
                }
            case .close:
                try limiter.close()
            default:
                Issue.record("line \(step.line): \(step.verb) is not replayed on a limiter of plans")
            }
        }
        try? limiter.close()
        return lines
    }
}

/// Conformance output comparison: lines of one key equal and in the same
/// order; between different keys at one instant the order is unspecified, so
/// the whole output is compared as a multiset; times never go backwards.
func compareVectorOutput(actual: [String], expected: [String], name: String) {
    func field(_ line: String, _ index: Int) -> String {
        let fields = line.split(separator: " ")
        return fields.count > index ? String(fields[index]) : ""
    }
    func byKey(_ lines: [String]) -> [String: [String]] {
        Dictionary(grouping: lines) { field($0, 2) }
    }
    #expect(byKey(actual) == byKey(expected), "per-key output of \(name)")
    #expect(actual.sorted() == expected.sorted(), "output of \(name) as a multiset")
    let times = actual.compactMap { UInt64($0.split(separator: " ").first ?? "") }
    #expect(times == times.sorted(), "output of \(name) is not in time order")
}
