import BenchReport
import CBench
import Foundation

/// The whole suite: every case in a child process of its own (a clean heap
/// for the memory readings, and no Dispatch threads or timers left over from
/// another implementation), run one after the other so the ratios are taken
/// in one run, on one machine state.
public enum Suite {
    public static let rowPrefix = "ROW "

    public struct Options: Sendable {
        public var quick: Bool
        public var executable: String
        public var output: URL
        public var scenarios: Set<String>?
        public var impls: Set<String>?
        public var timeout: Double

        public init(
            quick: Bool, executable: String, output: URL, scenarios: Set<String>?, impls: Set<String>?,
            timeout: Double
        ) {
            self.quick = quick
            self.executable = executable
            self.output = output
            self.scenarios = scenarios
            self.impls = impls
            self.timeout = timeout
        }
    }

    public static func run(_ o: Options) throws -> BenchResults {
        let cases = Plan.cases(quick: o.quick, scenarios: o.scenarios, impls: o.impls)
        let start = Date()
        let load0 = loadAverage()
        log(
            "sluice-bench: \(cases.count) cases\(o.quick ? " (quick)" : ""), one process each; load average \(load0.map { String(format: "%.2f", $0) } ?? "?")"
        )
        var rows: [Row] = []
        for (i, c) in cases.enumerated() {
            let label = "[\(Format.pad("\(i + 1)", String(cases.count).count, right: true))/\(cases.count)] \(c)"
            log(label + " …", newline: false)
            let t0 = Date()
            let result = spawn(c, o)
            let dt = Date().timeIntervalSince(t0)
            switch result {
            case let .success(caseRows):
                rows += caseRows
                let summary = caseRows.map { r -> String in
                    switch r.scenario {
                    case "memory": "\(Format.bytes(r.bytes_per_key)) B/key"
                    case "lateness": "p99 \(Format.us(r.lateness_us?.p99)) µs"
                    default: "\(Format.ns(r.ns_per_op)) \(Metric.unit(r.scenario))"
                    }
                }.joined(separator: ", ")
                log(" \(summary) (\(String(format: "%.1f", dt)) s)")
            case let .failure(failure):
                let message = failure.message
                log(" FAILED (\(String(format: "%.1f", dt)) s): \(message)")
                var r = Row(scenario: c.scenario, impl: c.impl, keys: c.keys, threads: c.threads)
                r.note = "failed: \(message)"
                rows.append(r)
            }
        }
        let results = BenchResults(
            date: ISO8601DateFormatter().string(from: start), quick: o.quick, machine: machine(),
            loadavgStart: load0, loadavgEnd: loadAverage(), durationSeconds: Date().timeIntervalSince(start),
            rows: medians(rows))
        try results.write(to: o.output)
        return results
    }

    /// The rows of a case run several times (`Plan.runs`) as one: the run
    /// with the median value (`Metric.value`), its note naming every run's.
    /// A case with a failed run is that failed row (a failure is never
    /// hidden by a median); rows of a case run once pass as they are, in
    /// their first order.
    static func medians(_ rows: [Row]) -> [Row] {
        struct Case: Hashable {
            let scenario: String, impl: String, keys: Int, threads: Int, workload: String?
            init(_ r: Row) {
                (scenario, impl, keys, threads, workload) = (r.scenario, r.impl, r.keys, r.threads, r.workload)
            }
        }
        var runs: [Case: [Row]] = [:]
        var order: [Case] = []
        for r in rows {
            let c = Case(r)
            if runs[c] == nil { order.append(c) }
            runs[c, default: []].append(r)
        }
        return order.map { c in
            let all = runs[c]!
            guard all.count > 1 else { return all[0] }
            if let failed = all.first(where: { $0.note?.hasPrefix("failed") ?? false }) { return failed }
            let value = { (r: Row) in Metric.value(r) ?? .infinity }
            let sorted = all.sorted { value($0) < value($1) }
            var row = sorted[(sorted.count - 1) / 2]
            let figures = all.map { Format.ns(Metric.value($0)) }
            let median = "median of \(all.count) runs (\(figures.joined(separator: ", ")))"
            row.note = row.note.map { "\($0); \(median)" } ?? median
            return row
        }
    }

    struct Failure: Error { let message: String }

    static func spawn(_ c: PlannedCase, _ o: Options) -> Result<[Row], Failure> {
        let p = Process()
        p.executableURL = URL(fileURLWithPath: o.executable)
        p.arguments = ["case", c.scenario, c.impl, "\(c.keys)", "\(c.threads)"] + (o.quick ? ["--quick"] : [])
        let out = Pipe()
        let err = Pipe()
        p.standardOutput = out
        p.standardError = err
        do { try p.run() } catch { return .failure(Failure(message: "cannot start \(o.executable): \(error)")) }
        let timer = DispatchSource.makeTimerSource()
        timer.setEventHandler { if p.isRunning { p.terminate() } }
        timer.schedule(deadline: .now() + o.timeout)
        timer.activate()
        // Read both pipes to the end (stderr on another thread, so neither fills up).
        nonisolated(unsafe) var errData = Data()
        let errDone = DispatchSemaphore(value: 0)
        Thread.detachNewThread {
            errData = err.fileHandleForReading.readDataToEndOfFile()
            errDone.signal()
        }
        let outData = out.fileHandleForReading.readDataToEndOfFile()
        p.waitUntilExit()
        errDone.wait()
        timer.cancel()
        let text = String(decoding: outData, as: UTF8.self)
        var rows: [Row] = []
        for line in text.split(separator: "\n") where line.hasPrefix(rowPrefix) {
            if let row = try? JSONDecoder().decode(Row.self, from: Data(line.dropFirst(rowPrefix.count).utf8)) {
                rows.append(row)
            }
        }
        if p.terminationReason == .uncaughtSignal || p.terminationStatus != 0 || rows.isEmpty {
            let stderr = String(decoding: errData, as: UTF8.self).split(separator: "\n").suffix(3).joined(
                separator: " | ")
            let why =
                p.terminationReason == .uncaughtSignal
                ? "signal \(p.terminationStatus)" : "status \(p.terminationStatus)"
            return .failure(Failure(message: "\(why)\(stderr.isEmpty ? "" : ": \(stderr)")"))
        }
        return .success(rows)
    }

    static func log(_ s: String, newline: Bool = true) {
        FileHandle.standardError.write(Data((s + (newline ? "\n" : "")).utf8))
    }

    // MARK: - Machine

    static func loadAverage() -> Double? {
        guard let s = try? String(contentsOfFile: "/proc/loadavg", encoding: .utf8) else { return nil }
        return s.split(separator: " ").first.flatMap { Double($0) }
    }

    static func machine() -> Machine {
        func read(_ path: String) -> String { (try? String(contentsOfFile: path, encoding: .utf8)) ?? "" }
        let cpuinfo = read("/proc/cpuinfo")
        let cpu =
            cpuinfo.split(separator: "\n").first { $0.hasPrefix("model name") }
            .map { $0.split(separator: ":", maxSplits: 1).last.map { $0.trimmingCharacters(in: .whitespaces) } ?? "" }
            ?? "unknown"
        let memKB =
            read("/proc/meminfo").split(separator: "\n").first { $0.hasPrefix("MemTotal:") }
            .flatMap { $0.split(separator: " ").dropFirst().first.flatMap { UInt64($0) } } ?? 0
        let os =
            read("/etc/os-release").split(separator: "\n").first { $0.hasPrefix("PRETTY_NAME=") }
            .map { String($0.dropFirst("PRETTY_NAME=".count)).trimmingCharacters(in: CharacterSet(charactersIn: "\"")) }
            ?? "Linux"
        var uts = utsname()
        uname(&uts)
        let kernel = withUnsafeBytes(of: &uts.release) { String(decoding: $0.prefix { $0 != 0 }, as: UTF8.self) }
        let arch = withUnsafeBytes(of: &uts.machine) { String(decoding: $0.prefix { $0 != 0 }, as: UTF8.self) }
        return Machine(
            cpu: cpu, cores: ProcessInfo.processInfo.activeProcessorCount, memoryBytes: memKB * 1024, os: os,
            kernel: "\(kernel) \(arch)", swift: swiftVersion(), cCompiler: String(cString: cb_cc_version()),
            libevent: String(cString: cb_libevent_version()))
    }

    static func swiftVersion() -> String {
        let p = Process()
        p.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        p.arguments = ["swift", "--version"]
        let out = Pipe()
        p.standardOutput = out
        p.standardError = Pipe()
        guard (try? p.run()) != nil else { return compiledWith }
        let data = out.fileHandleForReading.readDataToEndOfFile()
        p.waitUntilExit()
        let line = String(decoding: data, as: UTF8.self).split(separator: "\n").first.map(String.init)
        return line ?? compiledWith
    }

    static var compiledWith: String {
        #if compiler(>=6.3)
        "Swift 6.3+"
        #else
        "Swift < 6.3"
        #endif
    }
}
