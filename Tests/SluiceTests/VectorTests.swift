import Foundation
import Testing

@testable import Sluice

/// Runs every conformance vector (Tests/Vectors and, when present,
/// ../shared/vectors) through the Swift parser and runner.
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
        #expect(!VectorPaths.traces().isEmpty, "no *.trace under \(VectorPaths.projectVectors.path)")
    }

    @Test("vector", arguments: VectorPaths.traces())
    func vector(path: String) throws {
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
        let actual = try trace.run(options: .init(checkInvariants: true)).map(\.description)
        compare(actual: actual, expected: expected, name: path)

        // The hash seed must not matter beyond the order of different keys.
        let randomSeeded = try trace.run(options: .init(randomSeed: true)).map(\.description)
        compare(actual: randomSeeded, expected: expected, name: path + " (random seed)")
    }

    /// Compares output lines per key in order, and as a multiset.
    func compare(actual: [String], expected: [String], name: String) {
        func byKey(_ lines: [String]) -> [String: [String]] {
            Dictionary(grouping: lines) { line in
                let fields = line.split(separator: " ")
                return fields.count > 2 ? String(fields[2]) : ""
            }
        }
        #expect(byKey(actual) == byKey(expected), "per-key output of \(name)")
        #expect(actual.sorted() == expected.sorted(), "output of \(name) as a multiset")
        // Time order overall.
        let times = actual.compactMap { UInt64($0.split(separator: " ").first ?? "") }
        #expect(times == times.sorted(), "output of \(name) is not in time order")
    }
}
