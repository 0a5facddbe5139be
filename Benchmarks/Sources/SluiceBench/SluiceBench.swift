import ArgumentParser
import BenchReport
import BenchSuite
import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// `sluice-bench`: Sluice next to pure-Dispatch baselines, libevent's own
/// timers and the hardware's floor, in one run.
@main
struct SluiceBench: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "sluice-bench",
        abstract:
            "Sluice's benchmark suite: sluice-c, sluice-swift, dispatch-naive, dispatch-tuned, libevent-timers, floor.",
        subcommands: [Run.self, Case.self, Report.self, HotPathsCommand.self],
        defaultSubcommand: Run.self)
}

/// Paths of the source tree this binary was built from (the defaults).
enum Paths {
    static let benchmarks = URL(fileURLWithPath: #filePath)
        .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
    static let repo = benchmarks.deletingLastPathComponent()
    static let results = benchmarks.appendingPathComponent("results/latest.json")
    static let markdown = repo.appendingPathComponent("docs/benchmarks.md")
    static let charts = repo.appendingPathComponent("docs/charts")

    static var executable: String {
        (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe")) ?? CommandLine.arguments[0]
    }
}

struct Run: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Run the suite (each case in its own process), print the table and write the JSON.")

    @Flag(help: "Reduced sizes (keys up to 100k) and shorter measurements.")
    var quick = false

    @Option(help: "Where to write the results (schema sluice-bench/1).")
    var output: String = Paths.results.path

    @Option(name: .customLong("scenario"), help: "Run only this scenario (repeatable; memory comes with fire).")
    var scenarios: [String] = []

    @Option(name: .customLong("impl"), help: "Run only this implementation (repeatable).")
    var impls: [String] = []

    @Option(help: "Seconds after which a case is stopped.")
    var timeout: Double = 240

    @Flag(help: "Also regenerate docs/benchmarks.md and docs/charts/ from the results.")
    var report = false

    func validate() throws {
        for s in scenarios where !Plan.runScenarios.contains(s) {
            throw ValidationError("unknown scenario \(s); one of \(Plan.runScenarios.joined(separator: ", "))")
        }
        for i in impls where !(Names.impls + Names.fleetImpls + Names.fleetDebounceImpls).contains(i) {
            throw ValidationError(
                "unknown implementation \(i); one of \((Names.impls + Names.fleetImpls + Names.fleetDebounceImpls).joined(separator: ", "))"
            )
        }
    }

    func run() throws {
        let results = try Suite.run(
            .init(
                quick: quick, executable: Paths.executable, output: URL(fileURLWithPath: output),
                scenarios: scenarios.isEmpty ? nil : Set(scenarios), impls: impls.isEmpty ? nil : Set(impls),
                timeout: timeout))
        print("")
        print(results.table())
        print("Goals (ratios inside this run):")
        print(results.goalsText())
        print("")
        print(
            "results: \(output)  (\(String(format: "%.0f", results.duration_s ?? 0)) s; load average \(results.loadavg_start.map { String(format: "%.2f", $0) } ?? "?") → \(results.loadavg_end.map { String(format: "%.2f", $0) } ?? "?"))"
        )
        // A whole run at full sizes also stands for its machine kind: the
        // report keeps one table per kind (docs/benchmarks.md).
        if !quick && scenarios.isEmpty && impls.isEmpty {
            let kindFile = results.kindFile(besides: URL(fileURLWithPath: output))
            try results.write(to: kindFile)
            print("results of this machine kind (\(results.machine.kindName)): \(kindFile.path)")
        }
        if report {
            try ReportGenerator(results: results, jsonPath: output).write(
                markdown: Paths.markdown, charts: Paths.charts)
            print("report: \(Paths.markdown.path), \(Paths.charts.path)/")
        }
        let failed = results.rows.filter { $0.note?.hasPrefix("failed") ?? false }
        if !failed.isEmpty {
            print("\(failed.count) case(s) failed")
            throw ExitCode(1)
        }
    }
}

struct Case: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Run one case in this process and print its rows (used by `run`).")

    @Argument var scenario: String
    @Argument var impl: String
    @Argument var keys: Int
    @Argument var threads: Int = 1
    @Flag var quick = false

    func run() throws {
        let rows = try CaseRunner.run(
            PlannedCase(scenario: scenario, impl: impl, keys: keys, threads: threads), quick: quick)
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.withoutEscapingSlashes, .sortedKeys]
        for row in rows {
            let data = try encoder.encode(row)
            print(Suite.rowPrefix + String(decoding: data, as: UTF8.self))
        }
        fflush(nil)
        // Leave without tearing down millions of timers: the process ends here.
        Glibc.exit(0)
    }
}

struct Report: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Turn the results JSON into docs/benchmarks.md and the SVG charts in docs/charts/.")

    @Option(help: "The results to read.")
    var input: String = Paths.results.path

    @Option(help: "The markdown page to write.")
    var markdown: String = Paths.markdown.path

    @Option(help: "The folder of the SVG charts.")
    var charts: String = Paths.charts.path

    @Flag(help: "Print the table and the goals too.")
    var table = false

    func run() throws {
        let results = try BenchResults.load(from: URL(fileURLWithPath: input))
        try ReportGenerator(results: results, jsonPath: input)
            .write(markdown: URL(fileURLWithPath: markdown), charts: URL(fileURLWithPath: charts))
        if table {
            print(results.table())
            print(results.goalsText())
        }
        print("wrote \(markdown) and \(charts)/*.svg from \(input)")
    }
}

struct HotPathsCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "hotpaths",
        abstract: "Call one Swift per-call path in a loop, for callgrind (docs/benchmarks.md, atomic operations).")

    @Argument(help: "One of \(HotPaths.names.joined(separator: ", ")).")
    var path: String
    @Option(help: "Calls to make.")
    var calls = 100_000
    @Option(help: "Keys, each used once before.")
    var keys = 1000

    func validate() throws {
        guard HotPaths.names.contains(path) else {
            throw ValidationError("unknown path \(path); one of \(HotPaths.names.joined(separator: ", "))")
        }
    }

    func run() throws {
        print("\(path): \(try HotPaths.drive(path, calls: calls, keys: keys)) of \(calls) calls succeeded")
    }
}
