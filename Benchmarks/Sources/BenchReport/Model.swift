import Foundation

/// The file `Benchmarks/results/latest.json` (schema "sluice-bench/1").
///
/// Required by the schema: `schema`, `machine`, `quick`, `rows`, and in each
/// row `scenario`, `impl`, `keys`, `threads`, `ops`, `ns_per_op`,
/// `bytes_per_key` (number or null) and `lateness_us` (`{"p50","p99","max"}`
/// or null). The other fields are additions a reader may ignore.
public struct BenchResults: Codable, Sendable {
    public static let schemaName = "sluice-bench/1"

    public var schema: String
    public var date: String
    public var quick: Bool
    public var machine: Machine
    /// Load average (1 min) at the start and at the end of the run.
    public var loadavg_start: Double?
    public var loadavg_end: Double?
    /// Wall time of the whole run, seconds.
    public var duration_s: Double?
    public var rows: [Row]

    public init(
        date: String, quick: Bool, machine: Machine, loadavgStart: Double?, loadavgEnd: Double?,
        durationSeconds: Double?, rows: [Row]
    ) {
        self.schema = Self.schemaName
        self.date = date
        self.quick = quick
        self.machine = machine
        self.loadavg_start = loadavgStart
        self.loadavg_end = loadavgEnd
        self.duration_s = durationSeconds
        self.rows = rows
    }

    public static func load(from url: URL) throws -> BenchResults {
        let data = try Data(contentsOf: url)
        let results = try JSONDecoder().decode(BenchResults.self, from: data)
        guard results.schema == schemaName else {
            throw ReportError.badSchema(results.schema)
        }
        return results
    }

    /// The file that keeps the newest full run on this run's machine kind.
    public func kindFile(besides latest: URL) -> URL {
        latest.deletingLastPathComponent().appendingPathComponent("\(machine.kind).json")
    }

    /// The newest full runs of the other machine kinds kept beside `latest`
    /// (`KIND.json`), in the order of their kinds' names.
    public func otherKinds(besides latest: URL) -> [(results: BenchResults, url: URL)] {
        let dir = latest.deletingLastPathComponent()
        let names = (try? FileManager.default.contentsOfDirectory(atPath: dir.path)) ?? []
        return names.filter { $0.hasSuffix(".json") && $0 != latest.lastPathComponent }.sorted()
            .compactMap { name in
                let url = dir.appendingPathComponent(name)
                guard let other = try? BenchResults.load(from: url), other.machine.kind != machine.kind,
                    name == "\(other.machine.kind).json"
                else { return nil }
                return (other, url)
            }
    }

    public func write(to url: URL) throws {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.prettyPrinted, .withoutEscapingSlashes, .sortedKeys]
        var data = try encoder.encode(self)
        data.append(0x0A)
        try FileManager.default.createDirectory(
            at: url.deletingLastPathComponent(), withIntermediateDirectories: true)
        try data.write(to: url, options: .atomic)
    }
}

public enum ReportError: Error, CustomStringConvertible {
    case badSchema(String)
    public var description: String {
        switch self {
        case let .badSchema(s): "unknown schema \"\(s)\" (expected \"\(BenchResults.schemaName)\")"
        }
    }
}

/// The machine the figures were measured on.
public struct Machine: Codable, Sendable {
    public var cpu: String
    public var cores: Int
    public var memory_bytes: UInt64
    public var os: String
    public var kernel: String
    public var swift: String
    public var c_compiler: String
    public var libevent: String

    public init(
        cpu: String, cores: Int, memoryBytes: UInt64, os: String, kernel: String, swift: String, cCompiler: String,
        libevent: String
    ) {
        self.cpu = cpu
        self.cores = cores
        self.memory_bytes = memoryBytes
        self.os = os
        self.kernel = kernel
        self.swift = swift
        self.c_compiler = cCompiler
        self.libevent = libevent
    }

    /// The machine kind a full run is filed under (`Benchmarks/results/KIND.json`,
    /// beside `latest.json`): "amd-epyc", "intel-xeon", or else the CPU model in
    /// lower case, its words joined by dashes.
    public var kind: String {
        if cpu.contains("EPYC") { return "amd-epyc" }
        if cpu.contains("Xeon") { return "intel-xeon" }
        let words = cpu.lowercased().split { !($0.isLetter || $0.isNumber) }
        return words.isEmpty ? "unknown" : words.joined(separator: "-")
    }

    /// The kind as the report names it: "AMD EPYC", "Intel Xeon", or the CPU model.
    public var kindName: String {
        switch kind {
        case "amd-epyc": "AMD EPYC"
        case "intel-xeon": "Intel Xeon"
        default: cpu
        }
    }
}

/// Lateness percentiles in microseconds.
public struct Lateness: Codable, Sendable {
    public var p50: Double
    public var p99: Double
    public var max: Double

    public init(p50: Double, p99: Double, max: Double) {
        self.p50 = p50
        self.p99 = p99
        self.max = max
    }
}

/// One measurement.
public struct Row: Codable, Sendable {
    public var scenario: String
    public var impl: String
    public var keys: Int
    public var threads: Int
    public var ops: Int
    public var ns_per_op: Double?
    public var bytes_per_key: Double?
    public var lateness_us: Lateness?
    // Additions (optional for readers).
    /// Process CPU time (all threads) per operation.
    public var cpu_ns_per_op: Double?
    /// Wall time per operation (the calling thread's view).
    public var wall_ns_per_op: Double?
    /// memory: RSS delta per key once every key fired and went idle.
    public var idle_bytes_per_key: Double?
    /// spray: peak RSS growth during the spray.
    public var peak_rss_bytes: Double?
    /// spray: the key cap, and the calls it refused.
    public var cap: Int?
    public var refused: Int?
    /// lateness: the distribution, as [percentile, microseconds] pairs.
    public var lateness_cdf_us: [[Double]]?
    /// lateness: deliveries before their deadline (must be 0).
    public var early: Int?
    /// fleet: the workload ("mixed" or "abuse").
    public var workload: String?
    /// fleet: admissions beyond what the quota allows (burst + elapsed/T per key; must be 0).
    public var over_admitted: Int?
    /// fleet and quotas: calls admitted; fleet: calls Redis could not decide (timeouts, errors).
    public var admitted: Int?
    public var failures: Int?
    /// fleet: the load. Closed loop ("mixed", "abuse"): `in_flight` calls
    /// outstanding (sluice-redis) or connections each with one blocking call
    /// (redis-per-call), as fast as they go; open loop ("mixed-paced"):
    /// `offered_per_s` calls per second, latency counted from each call's due time.
    public var in_flight: Int?
    public var offered_per_s: Double?
    /// fleet: the redis-server's CPU time per call, and the script runs (EVALSHA) it made.
    public var redis_cpu_ns_per_op: Double?
    public var script_runs: Int?
    /// fleet-debounce: the emissions delivered, the emissions the calls' Redis times
    /// imply (a call not followed on its key within the interval), the expected values
    /// never delivered and the values delivered that were not expected (superseded, or
    /// twice): both must be 0; the distinct keys called; the redis-server's CPU time
    /// per emission (per call: redis_cpu_ns_per_op).
    public var emissions: Int?
    public var emissions_expected: Int?
    public var emissions_missing: Int?
    public var emissions_unexpected: Int?
    public var keys_called: Int?
    public var redis_cpu_ns_per_emission: Double?
    /// Wall time of the case (setup included), seconds.
    public var case_s: Double?
    public var note: String?

    public init(scenario: String, impl: String, keys: Int, threads: Int = 1, ops: Int = 0) {
        self.scenario = scenario
        self.impl = impl
        self.keys = keys
        self.threads = threads
        self.ops = ops
    }

    enum CodingKeys: String, CodingKey {
        case scenario, impl, keys, threads, ops, ns_per_op, bytes_per_key, lateness_us
        case cpu_ns_per_op, wall_ns_per_op, idle_bytes_per_key, peak_rss_bytes, cap, refused, lateness_cdf_us, early,
            case_s, note
        case workload, over_admitted, admitted, failures, in_flight, offered_per_s, redis_cpu_ns_per_op,
            script_runs  // fleet
        case emissions, emissions_expected, emissions_missing, emissions_unexpected, keys_called,
            redis_cpu_ns_per_emission  // fleet-debounce
    }

    public func encode(to encoder: any Encoder) throws {
        var c = encoder.container(keyedBy: CodingKeys.self)
        try c.encode(scenario, forKey: .scenario)
        try c.encode(impl, forKey: .impl)
        try c.encode(keys, forKey: .keys)
        try c.encode(threads, forKey: .threads)
        try c.encode(ops, forKey: .ops)
        // The schema's fields are always present, null when they do not apply.
        try c.encode(ns_per_op.map(Row.round), forKey: .ns_per_op)
        try c.encode(bytes_per_key.map(Row.round), forKey: .bytes_per_key)
        try c.encode(lateness_us, forKey: .lateness_us)
        try c.encodeIfPresent(cpu_ns_per_op.map(Row.round), forKey: .cpu_ns_per_op)
        try c.encodeIfPresent(wall_ns_per_op.map(Row.round), forKey: .wall_ns_per_op)
        try c.encodeIfPresent(idle_bytes_per_key.map(Row.round), forKey: .idle_bytes_per_key)
        try c.encodeIfPresent(peak_rss_bytes, forKey: .peak_rss_bytes)
        try c.encodeIfPresent(cap, forKey: .cap)
        try c.encodeIfPresent(refused, forKey: .refused)
        try c.encodeIfPresent(lateness_cdf_us, forKey: .lateness_cdf_us)
        try c.encodeIfPresent(early, forKey: .early)
        try c.encodeIfPresent(case_s.map(Row.round), forKey: .case_s)
        try c.encodeIfPresent(note, forKey: .note)
        try c.encodeIfPresent(workload, forKey: .workload)
        try c.encodeIfPresent(over_admitted, forKey: .over_admitted)
        try c.encodeIfPresent(admitted, forKey: .admitted)
        try c.encodeIfPresent(failures, forKey: .failures)
        try c.encodeIfPresent(in_flight, forKey: .in_flight)
        try c.encodeIfPresent(offered_per_s, forKey: .offered_per_s)
        try c.encodeIfPresent(redis_cpu_ns_per_op.map(Row.round), forKey: .redis_cpu_ns_per_op)
        try c.encodeIfPresent(script_runs, forKey: .script_runs)
        try c.encodeIfPresent(emissions, forKey: .emissions)
        try c.encodeIfPresent(emissions_expected, forKey: .emissions_expected)
        try c.encodeIfPresent(emissions_missing, forKey: .emissions_missing)
        try c.encodeIfPresent(emissions_unexpected, forKey: .emissions_unexpected)
        try c.encodeIfPresent(keys_called, forKey: .keys_called)
        try c.encodeIfPresent(redis_cpu_ns_per_emission.map(Row.round), forKey: .redis_cpu_ns_per_emission)
    }

    /// Three significant decimals are plenty for noisy timings.
    static func round(_ x: Double) -> Double {
        guard x.isFinite else { return x }
        return (x * 1000).rounded() / 1000
    }
}

/// The names used in the JSON, in display order.
public enum Names {
    public static let scenarios = [
        "throttle-hot", "debounce-rearm", "fire", "memory", "lateness", "spray", "threads", "quotas",
    ]
    public static let impls = [
        "sluice-c", "sluice-swift", "dispatch-naive", "dispatch-tuned", "libevent-timers", "floor",
        "sluice-c-batch", "sluice-swift-batch", "sluice-c-coarse", "sluice-c-1q",
    ]
    /// quotas: the implementations that run it (sluice-c-1q: sluice-c with one quota).
    public static let quotasImpls: Set<String> = ["sluice-c", "sluice-c-1q", "dispatch-tuned"]
    /// Implementations that submit in batches (`submit_many`, `submit(contentsOf:)`):
    /// throttle-hot and debounce-rearm only.
    public static let batchImpls: Set<String> = ["sluice-c-batch", "sluice-swift-batch"]
    /// The fleet scenario (a real redis-server) and its implementations: kept
    /// apart from the lists above, which the report's tables and charts follow.
    /// "-cluster": the same against a 3-primary Redis Cluster the driver starts.
    public static let fleetScenario = "fleet"
    public static let fleetImpls = [
        "sluice-redis", "redis-per-call", "sluice-redis-tls", "sluice-redis-3q", "sluice-redis-cluster",
        "redis-per-call-cluster",
    ]
    /// The fleet-debounce scenario (issue 26): debounce across 2 submitting and 2
    /// worker processes through a real redis-server; Sluice's fleet timed limiter
    /// beside a BullMQ-style delayed job with a dedup key.
    public static let fleetDebounceScenario = "fleet-debounce"
    public static let fleetDebounceImpls = ["sluice-fleet-timed", "redis-delayed-job"]
}
