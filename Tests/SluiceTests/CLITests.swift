import Foundation
import Testing

@testable import Sluice
@testable import SluiceCLI

/// `sluice simulate`, run in-process.
@Suite("sluice simulate")
struct CLITests {
    /// Output of one in-process run.
    struct RunResult {
        var status: Int32
        var out: [String]
        var err: [String]
    }

    func simulate(_ file: String, realtime: Bool = false, timeline: Bool = false, svg: String? = nil) async -> RunResult {
        let out = Locked<[String]>([])
        let err = Locked<[String]>([])
        let status = await SimulateRun(file: file, realtime: realtime, timeline: timeline, svgPath: svg)
            .execute(out: { line in out.withLock { $0.append(line) } }, err: { line in err.withLock { $0.append(line) } })
        return RunResult(status: status, out: out.withLock { $0 }, err: err.withLock { $0 })
    }

    @Test("prints exactly the trace-format output of every vector", arguments: VectorPaths.traces())
    func vectors(path: String) async throws {
        let base = String(path.dropLast(".trace".count))
        let result = await simulate(path)
        if FileManager.default.fileExists(atPath: base + ".expected-error") {
            let expected = try String(contentsOfFile: base + ".expected-error", encoding: .utf8)
                .trimmingCharacters(in: .newlines)
            #expect(result.status == 2)
            #expect(result.out.isEmpty, "nothing on stdout for a malformed trace")
            #expect(result.err == [expected])
            return
        }
        let expected = try String(contentsOfFile: base + ".expected", encoding: .utf8)
            .split(separator: "\n").map(String.init)
        #expect(result.status == 0)
        #expect(result.err.isEmpty)
        // Per key in order; between keys at one instant the order is free.
        func byKey(_ lines: [String]) -> [String: [String]] {
            Dictionary(grouping: lines) { String($0.split(separator: " ")[2]) }
        }
        #expect(byKey(result.out) == byKey(expected))
        #expect(result.out.sorted() == expected.sorted())
    }

    @Test("an unreadable input: error on stderr, status 2")
    func unreadable() async {
        let result = await simulate("/nonexistent/trace")
        #expect(result.status == 2)
        #expect(result.out.isEmpty)
        #expect(result.err.count == 1 && result.err[0].hasPrefix("error: cannot read /nonexistent/trace: "))
    }

    @Test("--timeline draws calls, emissions and drops per key on a time axis")
    func timeline() async throws {
        let file = FileManager.default.temporaryDirectory.appendingPathComponent("sluice-cli-\(UUID()).trace")
        try """
            policy audit interval=100
            0 call A a
            50 call A b
            120 call A c
            """.write(to: file, atomically: true, encoding: .utf8)
        defer { try? FileManager.default.removeItem(at: file) }
        let result = await simulate(file.path, timeline: true)
        #expect(result.status == 0)
        let text = result.out.joined(separator: "\n")
        let lines = text.split(separator: "\n").map(String.init)
        #expect(lines[0] == "audit(interval: 0.1 seconds)")
        #expect(lines[1].hasPrefix("1 column = 5 ms"))
        // Columns of 5 ms after an 8-column label: a at 0, b at 50, c at 120; b out at 100, c at 220.
        #expect(lines.contains("A in    a         b             c"))
        #expect(lines.contains("A out                       b                       c"))
        #expect(lines.contains("A drop            a"))
    }

    @Test("--svg writes the picture")
    func svg() async throws {
        let out = FileManager.default.temporaryDirectory.appendingPathComponent("sluice-cli-\(UUID()).svg")
        defer { try? FileManager.default.removeItem(at: out) }
        let result = await simulate(VectorPaths.traces().first { $0.hasSuffix("throttle-keys-interleaved.trace") }!,
                                    svg: out.path)
        #expect(result.status == 0)
        #expect(!result.out.isEmpty, "the lines are still printed")
        let svg = try String(contentsOf: out, encoding: .utf8)
        #expect(svg.hasPrefix("<svg xmlns=\"http://www.w3.org/2000/svg\""))
        #expect(svg.hasSuffix("</svg>\n"))
        #expect(svg.components(separatedBy: "<circle").count - 1 == 7 + 6, "7 calls, 6 emissions")
        #expect(svg.contains("<title>drop b2 at 90 ms</title>"))
    }

    @Test("the command line parses")
    func parsing() throws {
        let command = try SluiceCommand.parseAsRoot(["simulate", "--timeline", "--svg", "x.svg", "t.trace"])
        let simulate = try #require(command as? Simulate)
        #expect(simulate.file == "t.trace" && simulate.timeline && simulate.svgPath == "x.svg" && !simulate.realtime)
        #expect(throws: (any Error).self) { try SluiceCommand.parseAsRoot(["simulate"]) }
        #expect(throws: (any Error).self) { try SluiceCommand.parseAsRoot(["simulate", "--width", "3", "t"]) }
    }

    @Test("--realtime prints the same lines per key, never early", .enabled(if: !isThreadSanitized))
    func realtime() async throws {
        let path = VectorPaths.traces().first { $0.hasSuffix("audit-spec-example.trace") }!
        let exact = await simulate(path)
        var last: RunResult?
        for _ in 0..<3 {
            let result = try await RealtimeGate.shared.run { await simulate(path, realtime: true) }
            last = result
            let got = result.out.map { $0.split(separator: " ") }
            let want = exact.out.map { $0.split(separator: " ") }
            guard got.map({ $0.dropFirst() }) == want.map({ $0.dropFirst() }) else { continue }
            for (g, w) in zip(got, want) {
                #expect(Int(g[0])! >= Int(w[0])!, "never early: \(g) vs \(w)")
            }
            if zip(got, want).allSatisfy({ Int($0[0])! <= Int($1[0])! + 15 }) { return }
        }
        Issue.record("real-time output too far from \(exact.out): \(last?.out ?? [])")
    }
}
