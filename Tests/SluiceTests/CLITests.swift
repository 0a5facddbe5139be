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

    func simulate(_ file: String, realtime: Bool = false, timeline: Bool = false, svg: String? = nil) async -> RunResult
    {
        let out = Locked<[String]>([])
        let err = Locked<[String]>([])
        let status = await SimulateRun(
            options: SimulateOptions(file: file, realtime: realtime, timeline: timeline, svgPath: svg)
        ).execute(out: { line in out.withLock { $0.append(line) } }, err: { line in err.withLock { $0.append(line) } })
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
        // The dropped value is marked under its own call (at 0), not under b's.
        #expect(lines.contains("A drop  a"))
    }

    @Test("--svg writes the picture")
    func svg() async throws {
        let out = FileManager.default.temporaryDirectory.appendingPathComponent("sluice-cli-\(UUID()).svg")
        defer { try? FileManager.default.removeItem(at: out) }
        let result = await simulate(
            VectorPaths.traces().first { $0.hasSuffix("throttle-keys-interleaved.trace") }!,
            svg: out.path)
        #expect(result.status == 0)
        #expect(!result.out.isEmpty, "the lines are still printed")
        let svg = try String(contentsOf: out, encoding: .utf8)
        #expect(svg.hasPrefix("<svg xmlns=\"http://www.w3.org/2000/svg\""))
        #expect(svg.hasSuffix("</svg>\n"))
        #expect(svg.components(separatedBy: "<circle").count - 1 == 7 + 6, "7 calls, 6 emissions")
        #expect(svg.contains("<title>drop b2 at 90 ms</title>"))
        // The cross of a dropped value sits under that value's call.
        let dropped = try #require(
            svg.components(separatedBy: "\n").first { $0.contains("<title>drop b2 at 90 ms</title>") })
        let call = try #require(svg.components(separatedBy: "\n").first { $0.contains("<title>call b2 at ") })
        let crossX = Double(dropped.split(separator: "M")[1].split(separator: " ")[0])! + 5
        let callX = Double(call.split(separator: "cx=\"")[1].split(separator: "\"")[0])!
        #expect(abs(crossX - callX) < 0.2, "cross at \(crossX), call at \(callX)")
    }

    @Test("the command line parses")
    func parsing() throws {
        #expect(
            try Arguments.parse(["simulate", "--timeline", "--svg", "x.svg", "t.trace"])
                == .simulate(SimulateOptions(file: "t.trace", timeline: true, svgPath: "x.svg")))
        #expect(
            try Arguments.parse(["simulate", "--realtime", "--width=120", "-"])
                == .simulate(SimulateOptions(file: "-", realtime: true, width: 120)))
        #expect(
            try Arguments.parse(["simulate", "--", "--odd-name"]) == .simulate(SimulateOptions(file: "--odd-name")))
        guard case .help = try Arguments.parse(["--help"]) else { Issue.record("--help"); return }
        guard case .help = try Arguments.parse(["simulate", "-h"]) else { Issue.record("simulate -h"); return }
        #expect(try Arguments.parse(["--version"]) == .version)
    }

    @Test(
        "a bad command line names the problem and shows the usage",
        arguments: [
            ([], "missing subcommand"),
            (["frobnicate"], "unknown subcommand 'frobnicate'"),
            (["simulate"], "missing FILE (a trace file, or - for standard input)"),
            (["simulate", "a", "b"], "unexpected argument 'b' (one FILE only)"),
            (["simulate", "--width", "3", "t"], "'--width' must be at least 40"),
            (["simulate", "--width", "wide", "t"], "'--width' needs a whole number, not 'wide'"),
            (["simulate", "t", "--svg"], "missing value for '--svg'"),
            (["simulate", "--timeline", "--timeline", "t"], "'--timeline' given twice"),
            (["simulate", "--timeline=yes", "t"], "'--timeline' takes no value"),
            (["simulate", "--color", "t"], "unknown option '--color'"),
        ])
    func usageErrors(arguments: [String], message: String) async {
        #expect(throws: UsageError.self) { try Arguments.parse(arguments) }
        do {
            _ = try Arguments.parse(arguments)
        } catch {
            #expect(error.message == message)
            #expect(error.description.hasPrefix("error: \(message)\nUSAGE: sluice"))
        }
        let err = Locked<[String]>([])
        let status = await SluiceCommand.run(
            arguments, out: { _ in }, err: { line in err.withLock { $0.append(line) } })
        #expect(status == 64)
        #expect(err.withLock { $0 }.first?.hasPrefix("error: \(message)") == true)
    }

    @Test("--help prints the usage on standard output, status 0")
    func help() async {
        let out = Locked<[String]>([])
        let status = await SluiceCommand.run(
            ["simulate", "--help"], out: { line in out.withLock { $0.append(line) } }, err: { _ in })
        #expect(status == 0)
        #expect(out.withLock { $0 }.first?.hasPrefix("USAGE: sluice simulate") == true)
    }

    @Test("a v2 trace (cost= and quota) prints its exact lines")
    func costAndQuota() async throws {
        let v2 = VectorPaths.traces().filter { path in
            FileManager.default.fileExists(atPath: String(path.dropLast(6)) + ".expected")
                && ((try? String(contentsOfFile: path, encoding: .utf8))?.contains(" quota ") ?? false)
        }
        let path = try #require(v2.first, "no v2 vector with a quota line")
        let expected = try String(contentsOfFile: String(path.dropLast(6)) + ".expected", encoding: .utf8)
            .split(separator: "\n").map(String.init)
        let result = await simulate(path)
        #expect(result.status == 0 && result.out.sorted() == expected.sorted())
    }

    /// Two v3 traces (several quotas; plans and a plan change) with their
    /// expected lines, inline: the exact order of one key's lines, quota
    /// lines per quota included (the vectors are compared per key, sorted).
    static let v3Traces: [(name: String, trace: String, expected: String)] = [
        (
            "rate-plans",
            """
            # a key moves from the free plan to pro: what it consumed stays consumed
            plan free
            policy rate limit=1 per=1000 burst=3 name=second
            plan pro
            policy rate limit=10 per=1000 burst=30 name=second
            policy rate limit=10000 per=86400000 name=day
            0 call A a1 plan=free
            0 call A a2 plan=free
            0 call A a3 plan=free
            0 call A a4 plan=free
            0 call A a5 plan=pro
            0 quota A plan=pro
            0 quota A plan=free
            """,
            """
            0 emit A a1
            0 emit A a2
            0 emit A a3
            0 drop A a4
            0 emit A a5
            0 quota A remaining=26 full=8640 retry=0
            0 quota A policy=second remaining=26 full=400 retry=0
            0 quota A policy=day remaining=9999 full=8640 retry=0
            0 quota A remaining=0 full=4000 retry=2000
            """
        ),
        (
            "rate-several-quotas",
            """
            # 5 per second and 20 per minute for each key; a refused call charges neither quota
            policy rate limit=5 per=1000 name=second
            policy rate limit=20 per=60000 burst=8 name=minute
            0 call A a1 cost=4
            0 call A a2 cost=2
            0 quota A
            400 call A a3 cost=2
            400 quota A cost=3
            """,
            """
            0 emit A a1
            0 drop A a2
            0 quota A remaining=1 full=12000 retry=0
            0 quota A policy=second remaining=1 full=800 retry=0
            0 quota A policy=minute remaining=4 full=12000 retry=0
            400 emit A a3
            400 quota A remaining=1 full=18000 retry=3000
            400 quota A policy=second remaining=1 full=1200 retry=800
            400 quota A policy=minute remaining=2 full=18000 retry=3000
            """
        ),
    ]

    @Test("a v3 trace of plans: its exact lines, every quota's own quota lines")
    func plans() async throws {
        for v3 in Self.v3Traces {
            let file = FileManager.default.temporaryDirectory.appendingPathComponent("sluice-cli-\(UUID()).trace")
            try v3.trace.write(to: file, atomically: true, encoding: .utf8)
            defer { try? FileManager.default.removeItem(at: file) }
            let result = await simulate(file.path)
            #expect(result.status == 0 && result.err.isEmpty, "\(v3.name): \(result.err)")
            #expect(
                result.out == v3.expected.split(separator: "\n").map(String.init), "\(v3.name): one key, exact order")
            #expect(result.out.contains { $0.contains(" policy=") }, "\(v3.name): per-quota lines")
        }
    }

    @Test("--timeline and --svg under plans name every quota of every plan and each call's plan")
    func plansTimeline() async throws {
        let file = FileManager.default.temporaryDirectory.appendingPathComponent("sluice-cli-\(UUID()).trace")
        let svgFile = FileManager.default.temporaryDirectory.appendingPathComponent("sluice-cli-\(UUID()).svg")
        try """
        plan free
        policy rate limit=1 per=1000 burst=2 name=second
        plan pro
        policy rate limit=10 per=1000 burst=20 name=second
        policy rate limit=100 per=60000 name=minute
        0 call A a1 plan=free
        0 call A a2 plan=free
        0 call A a3 plan=free
        10 call A b1 plan=pro
        """.write(to: file, atomically: true, encoding: .utf8)
        defer {
            try? FileManager.default.removeItem(at: file)
            try? FileManager.default.removeItem(at: svgFile)
        }
        let result = await simulate(file.path, timeline: true, svg: svgFile.path)
        #expect(result.status == 0 && result.err.isEmpty)
        let lines = result.out.joined(separator: "\n").split(separator: "\n").map(String.init)
        #expect(
            lines.first
                == "plans: free: second 1/1.0 seconds (burst 2); pro: second 10/1.0 seconds (burst 20), "
                + "minute 100/60.0 seconds (burst 100)")
        #expect(lines.contains("        plan free: a1 a2 a3; plan pro: b1"))
        // a3 is refused by free's burst of 2; b1 passes under pro.
        #expect(lines.contains { $0.hasPrefix("A drop") })
        let svg = try String(contentsOf: svgFile, encoding: .utf8)
        #expect(svg.contains("minute 100/60.0 seconds"))
        #expect(svg.contains("<title>call b1 at 10 ms, plan pro</title>"))
        #expect(svg.contains("<title>drop a3 at 0 ms</title>"))
    }

    @Test("--realtime prints the same lines per key, never early", .enabled(if: !isThreadSanitized))
    func realtime() async throws {
        let path = VectorPaths.traces().first { $0.hasSuffix("audit-spec-example.trace") }!
        let exact = await simulate(path)
        var last: RunResult?
        var leastLate = Int.max  // of the tries with the right lines, in ms
        for _ in 0..<5 {
            let result = try await RealtimeGate.shared.run { await simulate(path, realtime: true) }
            last = result
            let got = result.out.map { $0.split(separator: " ") }
            let want = exact.out.map { $0.split(separator: " ") }
            guard got.map({ $0.dropFirst() }) == want.map({ $0.dropFirst() }) else { continue }
            for (g, w) in zip(got, want) {
                #expect(Int(g[0])! >= Int(w[0])!, "never early: \(g) vs \(w)")
            }
            let late = zip(got, want).map { Int($0[0])! - Int($1[0])! }.max() ?? 0
            if late <= 15 { return }
            leastLate = min(leastLate, late)
        }
        // A busy machine the whole time: the right lines, never early, and
        // late only as much as a stall makes them (a bound on a lost timer).
        if leastLate <= 2_000 {
            print("note: --realtime: no try within 15 ms; one had the right lines, at most \(leastLate) ms late")
            return
        }
        Issue.record("real-time output too far from \(exact.out): \(last?.out ?? [])")
    }
}
