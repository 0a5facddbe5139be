import Foundation
import Testing

@testable import Sluice
@testable import SluiceCLI

/// Runs every conformance vector of Tests/Vectors through the trace library
/// (the one parser and runner, in C), and replays it through the Swift
/// `Limiter<String, String>` on a manual clock (`LimiterReplay`, shared with
/// the NIO engine's tests: Behaviour/).
///
/// - `NAME.trace` + `NAME.expected`: the output must match. Lines of one key
///   must be equal and in the same order; between different keys at the same
///   instant the order is unspecified, so the whole output is compared as a
///   multiset.
/// - `NAME.trace` + `NAME.expected-error`: parsing must fail with exactly the
///   line of `NAME.expected-error` (`error: line N: REASON`).
@Suite("Conformance vectors")
struct VectorTests {
    @Test("there are vectors to run")
    func vectorsExist() {
        #expect(VectorPaths.traces().count >= 100, "no *.trace under \(VectorPaths.projectVectors.path)")
    }

    @Test("vector", arguments: VectorPaths.traces())
    func vector(path: String) async throws {
        let base = String(path.dropLast(".trace".count))
        let input = try [UInt8](Data(contentsOf: URL(fileURLWithPath: path)))
        let fm = FileManager.default

        if fm.fileExists(atPath: base + ".expected-error") {
            let expected = try String(contentsOfFile: base + ".expected-error", encoding: .utf8)
                .trimmingCharacters(in: .newlines)
            do {
                let trace = try Trace(parsing: input)
                Issue.record("parsed, but expected \(expected); steps: \(trace.steps.count)")
            } catch {
                #expect(error.message == expected)
            }
            return
        }

        guard fm.fileExists(atPath: base + ".expected") else {
            Issue.record("\(path) has neither .expected nor .expected-error")
            return
        }
        let expected = try String(contentsOfFile: base + ".expected", encoding: .utf8)
            .split(separator: "\n", omittingEmptySubsequences: true)
            .map(String.init)

        let trace = try Trace(parsing: input)
        let actual = try trace.run(options: .init(checkInvariants: true)).map(\.text)
        compare(actual: actual, expected: expected, name: path)

        // The hash seed must not matter beyond the order of different keys.
        let randomSeeded = try trace.run(options: .init(randomSeed: true)).map(\.text)
        compare(actual: randomSeeded, expected: expected, name: path + " (random seed)")

        // The Swift layer end to end: Limiter<String, String> on a manual clock.
        let replayed = try await LimiterReplay(trace).run()
        compare(actual: replayed, expected: expected, name: path + " (Limiter, manual clock)")
    }

    /// The same vectors on the real loop and clock, through the trace
    /// library's real-time runner: each key's lines in the same order, each
    /// delivered never early and at most 15 ms late — or, when a busy
    /// machine makes every try later or different, one try with the right
    /// lines at most 2 s late (a bound on a lost timer, not on speed: the
    /// benchmarks measure lateness).
    @Test(
        "vector in real time", .enabled(if: !isThreadSanitized), .timeLimit(.minutes(1)),
        arguments: VectorPaths.traces().filter {
            FileManager.default.fileExists(atPath: String($0.dropLast(".trace".count)) + ".expected")
        })
    func realtimeVector(path: String) async throws {
        let trace = try Trace(parsing: [UInt8](Data(contentsOf: URL(fileURLWithPath: path))))
        // Long traces would make the suite slow: real time is for short ones.
        guard let last = trace.steps.last, last.time <= 2_000 else { return }
        let expected = try trace.run()
        // Only traces whose outcome does not hang on exact timing (a call
        // exactly at a deadline, a rate boundary hit exactly).
        guard try await Self.isRobustInRealTime(trace, expected: expected) else { return }
        // A busy machine can make a run late (never early), and a step it
        // delays can change a decision: try up to 5 times.
        var problems: [String] = []
        var leastLate = UInt64.max  // of the tries with the right lines, in ms
        for _ in 0..<5 {
            let actual = try await RealtimeGate.shared.run { try await trace.runRealtimeDetached() }
            let result = checkRealtime(actual: actual, expected: expected)
            for problem in result.early { Issue.record("\(path): \(problem)") }
            if !result.early.isEmpty { return }
            if result.wrong.isEmpty {
                if result.late.isEmpty { return }
                leastLate = min(leastLate, result.worstLate)
            }
            problems = result.wrong + result.late
        }
        if leastLate <= 2_000 {
            print(
                "note: \(path): no try on time; one had the right lines, at most \(leastLate) ms late (a busy machine)")
            return
        }
        for problem in problems { Issue.record("\(path): \(problem)") }
    }

    /// Whether delays of up to 15 ms per step leave every key's lines as
    /// they are: only then can a real-time run be compared with the exact
    /// one. (Replayed through the Swift Limiter, which can delay steps.)
    static func isRobustInRealTime(_ trace: Trace, expected: [TraceLine]) async throws -> Bool {
        let want = Dictionary(grouping: expected.map(\.text), by: { Self.field($0, 2) })
            .mapValues { $0.map { Self.dropTime($0) } }
        for seed: UInt64 in 1...4 {
            var rng = SplitMix64(seed: seed)
            let delays = trace.steps.map { _ in UInt64.random(in: 0..<15_000_000, using: &rng) }
            let delayed = try await LimiterReplay(trace, stepDelay: { delays[$0] }).run()
            let got = Dictionary(grouping: delayed, by: { Self.field($0, 2) }).mapValues {
                $0.map { Self.dropTime($0) }
            }
            guard got == want else { return false }
        }
        return true
    }

    static func field(_ line: String, _ index: Int) -> String {
        let fields = line.split(separator: " ")
        return fields.count > index ? String(fields[index]) : ""
    }

    static func dropTime(_ line: String) -> String {
        line.split(separator: " ").dropFirst().joined(separator: " ")
    }

    @Test("enough vectors are checked in real time")
    func realtimeCoverage() async throws {
        var robust: [String] = []
        for path in VectorPaths.traces()
        where FileManager.default.fileExists(
            atPath: String(path.dropLast(".trace".count)) + ".expected")
        {
            let trace = try Trace(parsing: [UInt8](Data(contentsOf: URL(fileURLWithPath: path))))
            guard let last = trace.steps.last, last.time <= 2_000 else { continue }
            if try await Self.isRobustInRealTime(trace, expected: trace.run()) { robust.append(path) }
        }
        #expect(robust.count >= 10, "only \(robust.count) vectors can be checked in real time")
    }

    /// Compares a real-time run with the exact one: per key, the same lines
    /// in the same order, each at its time or up to 15 ms later. Returns the
    /// lines delivered early (always a bug), the keys whose lines differ and
    /// the lines more than 15 ms late (which a busy machine can cause), and
    /// the largest lateness of a matching line, in ms.
    func checkRealtime(
        actual: [TraceLine], expected: [TraceLine]
    )
        -> (early: [String], wrong: [String], late: [String], worstLate: UInt64)
    {
        var early: [String] = []
        var wrong: [String] = []
        var late: [String] = []
        var worstLate: UInt64 = 0
        let actualByKey = Dictionary(grouping: actual, by: \.key)
        let expectedByKey = Dictionary(grouping: expected, by: \.key)
        if Set(actualByKey.keys) != Set(expectedByKey.keys) { wrong.append("keys differ") }
        for (key, lines) in expectedByKey {
            let got = actualByKey[key] ?? []
            if got.map({ Self.dropTime($0.text) }) != lines.map({ Self.dropTime($0.text) }) {
                wrong.append("key \(key): \(got.map(\.text)) instead of \(lines.map(\.text))")
                continue
            }
            for (a, e) in zip(got, lines) {
                if a.time < e.time { early.append("\(a) is earlier than \(e)") }
                if a.time > e.time { worstLate = max(worstLate, a.time - e.time) }
                if a.time > e.time + 15 { late.append("\(a) is more than 15 ms after \(e)") }
            }
        }
        return (early, wrong, late, worstLate)
    }

    /// Compares output lines per key in order, and as a multiset (Behaviour/LimiterReplay.swift).
    func compare(actual: [String], expected: [String], name: String) {
        compareVectorOutput(actual: actual, expected: expected, name: name)
    }
}
