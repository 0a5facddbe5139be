import BenchReport
import Foundation
import CBench
import Histogram

/// One case of the plan: a scenario (a "fire" case also yields the memory
/// row), an implementation, a size, a thread count.
public struct PlannedCase: Sendable, CustomStringConvertible {
    public var scenario: String
    public var impl: String
    public var keys: Int
    public var threads: Int
    /// Which of the case's runs this is (0 for a case run once; see `Plan.runs`).
    public var round: Int

    public init(scenario: String, impl: String, keys: Int, threads: Int, round: Int = 0) {
        self.scenario = scenario
        self.impl = impl
        self.keys = keys
        self.threads = threads
        self.round = round
    }

    public var description: String {
        let name = scenario == "fire" && impl != "floor" ? "fire+memory" : scenario
        let run = round > 0 ? " (run \(round + 1))" : ""
        return "\(name) \(Format.keys(keys))\(threads > 1 ? " ×\(threads) threads" : "") \(impl)\(run)"
    }
}

/// What runs, at which sizes, with which parameters.
public enum Plan {
    static let dispatchImpls: Set<String> = ["dispatch-naive", "dispatch-tuned"]

    static func sizes(_ scenario: String, quick: Bool) -> [Int] {
        if quick {
            switch scenario {
            case "threads": return [1000, 100_000]
            default: return [1000, 100_000]
            }
        }
        switch scenario {
        case "throttle-hot", "debounce-rearm", "fire": return [1000, 100_000, 1_000_000, 10_000_000]
        case "lateness": return [1000, 100_000, 1_000_000]
        case "spray": return [1000, 100_000, 1_000_000]
        case "threads": return [1000, 100_000]
        case "quotas": return [1000, 100_000, 1_000_000]
        default: return []
        }
    }

    /// Whether `impl` runs `scenario` at `keys` keys.
    static func applies(_ scenario: String, _ impl: String, keys: Int) -> Bool {
        if impl == "floor" { return ["throttle-hot", "debounce-rearm", "fire", "threads"].contains(scenario) }
        if Names.batchImpls.contains(impl) { return ["throttle-hot", "debounce-rearm"].contains(scenario) }
        if impl == "sluice-c-coarse" { return scenario == "threads" }
        // quotas: sluice-c (three quotas), sluice-c-1q (one) and dispatch-tuned (three GCRA states).
        if scenario == "quotas" { return Names.quotasImpls.contains(impl) }
        if impl == "sluice-c-1q" { return false }
        if dispatchImpls.contains(impl) {
            // Dispatch baselines stop at 1M keys (a timer source per key); lateness at 100k.
            if keys > 1_000_000 { return false }
            if scenario == "lateness" && keys > 100_000 { return false }
        }
        return true
    }

    /// How many times a full run runs each case of `scenario` at `keys`, the
    /// report keeping the median (Suite.medians): three for the per-call
    /// scenarios up to 1M keys, whose single runs swing by 2× on a shared
    /// machine, and for fire and lateness up to 100k keys (a p99 of 1,000
    /// deliveries is their tenth worst: one scheduling hiccup); once for the
    /// rest (their time goes into setting up millions of keys; the fleet's
    /// cases take their own median of three) and in a quick run.
    static func runs(_ scenario: String, keys: Int, quick: Bool) -> Int {
        if quick { return 1 }
        if ["throttle-hot", "debounce-rearm", "threads", "quotas"].contains(scenario) {
            return keys <= 1_000_000 ? 3 : 1
        }
        if ["fire", "lateness"].contains(scenario) { return keys <= 100_000 ? 3 : 1 }
        return 1
    }

    /// The scenarios the runner schedules ("memory" comes with "fire").
    public static let runScenarios = [
        "throttle-hot", "debounce-rearm", "fire", "lateness", "spray", "threads", "quotas", "fleet", "fleet-debounce",
    ]

    /// fleet: the workload is named by the key count (10,000 keys "mixed", 4 keys "abuse").
    public static func fleetWorkload(keys: Int) -> String { keys <= 16 ? "abuse" : "mixed" }
    /// fleet, "mixed-paced": the offered load of the open-loop latency case, as a share of
    /// the saturation throughput the same implementation reached on "mixed" in the same run.
    public static let fleetOfferedShare = 0.5
    /// fleet, "mixed-paced": the seconds of calls it offers (a quarter in a quick run).
    public static let fleetPacedSeconds = 1.0
    /// fleet-debounce: the key space the hot window walks over.
    public static let fleetDebounceKeys = 100_000

    public static func cases(quick: Bool, scenarios: Set<String>? = nil, impls: Set<String>? = nil) -> [PlannedCase] {
        var out: [PlannedCase] = []
        for scenario in runScenarios where scenarios?.contains(scenario) ?? true {
            if scenario == Names.fleetScenario {
                // a real redis-server is started per case: no server, no fleet cases
                guard redisServerInstalled() else { continue }
                for keys in [10_000, 4] {
                    for impl in Names.fleetImpls where impls?.contains(impl) ?? true {
                        // TLS is measured on the mixed keys only (its goal compares them)
                        // TLS and three quotas are measured on the mixed keys only (their goals compare them)
                        if (impl == "sluice-redis-tls" || impl == "sluice-redis-3q") && keys <= 16 { continue }
                        out.append(PlannedCase(scenario: scenario, impl: impl, keys: keys, threads: 1))
                    }
                }
                continue
            }
            if scenario == Names.fleetDebounceScenario {
                guard redisServerInstalled() else { continue }
                for impl in Names.fleetDebounceImpls where impls?.contains(impl) ?? true {
                    out.append(PlannedCase(scenario: scenario, impl: impl, keys: fleetDebounceKeys, threads: 1))
                }
                continue
            }
            for keys in sizes(scenario, quick: quick) {
                for threads in ["threads", "quotas"].contains(scenario) ? [1, 2] : [1] {
                    // the implementations in turn, run after run: a slow spell of the
                    // machine falls on all of them alike
                    for round in 0..<runs(scenario, keys: keys, quick: quick) {
                        for impl in Names.impls where impls?.contains(impl) ?? true {
                            if applies(scenario, impl, keys: keys) {
                                out.append(
                                    PlannedCase(
                                        scenario: scenario, impl: impl, keys: keys, threads: threads, round: round))
                            }
                        }
                    }
                }
            }
        }
        return out
    }

    /// Whether `redis-server` is on the PATH (the fleet scenario needs it).
    static func redisServerInstalled() -> Bool {
        let path = ProcessInfo.processInfo.environment["PATH"] ?? "/usr/bin:/bin"
        return path.split(separator: ":").contains {
            FileManager.default.isExecutableFile(atPath: "\($0)/redis-server")
        }
    }

    public static func params(_ c: PlannedCase, quick: Bool) -> CaseParams {
        var p = CaseParams(
            scenario: c.scenario, impl: c.impl, keys: c.keys, threads: c.threads, ops: 1, budget: 0, interval: 0,
            spread: 0, cap: 10_000, quick: quick)
        switch c.scenario {
        case "throttle-hot", "debounce-rearm":
            p.ops = quick ? 1_000_000 : 4_000_000
            p.budget = quick ? 0.25 : 0.8
            p.interval = 60 * sec
        case "fire":
            p.ops = c.keys
            p.interval = 2 * sec  // sluice: after the one-second spread of submissions
        case "lateness":
            p.interval = 1 * sec
            p.spread = max(500 * ms, UInt64(c.keys) * 1000)  // at most 1M submits per second
        case "spray":
            p.ops = 1
        case "threads":
            p.ops = 1 << 20
            p.budget = quick ? 0.25 : 1.0
        case "quotas":
            // one thread: the core on the manual clock, as throttle-hot; two: the loop, as threads
            p.ops = c.threads > 1 ? 1 << 20 : quick ? 1_000_000 : 4_000_000
            p.budget = c.threads > 1 ? (quick ? 0.25 : 1.0) : (quick ? 0.25 : 0.8)
        default:
            break
        }
        return p
    }
}

/// Runs one case in this process and returns its rows.
public enum CaseRunner {
    public static func run(_ c: PlannedCase, quick: Bool) throws -> [Row] {
        if Names.fleetImpls.contains(c.impl) {
            return try runFleet(c, quick: quick)
        }
        if Names.fleetDebounceImpls.contains(c.impl) {
            return try runFleetDebounce(c, quick: quick)
        }
        let p = Plan.params(c, quick: quick)
        let w = Workload(keys: c.keys, ops: p.ops)
        let t0 = cb_now()
        if c.scenario == "fire" {
            // `fire` times one pass, so at 1k keys a process's first-time costs
            // (code and data paged in, lazy symbol binding, the runtime's type
            // metadata, the allocator's first arenas) would be a large share of
            // it, unlike in a server that has been firing timers for a while.
            // Every implementation fires 512 keys once, untimed, first.
            var warm = c
            warm.keys = 512
            let wp = Plan.params(warm, quick: quick)
            _ = try measure(warm, wp, Workload(keys: warm.keys, ops: wp.ops))
        }
        let measured = try measure(c, p, w)
        let elapsed = Double(cb_now() - t0) / 1e9
        var rows: [Row] = []
        for scenario in Names.scenarios {
            guard let m = measured[scenario] else { continue }
            rows.append(row(scenario, c, p, m, elapsed))
        }
        return rows
    }

    /// The implementation's measurements of the case's scenario.
    static func measure(_ c: PlannedCase, _ p: CaseParams, _ w: Workload) throws -> [String: Measured] {
        switch c.impl {
        case "sluice-c", "sluice-c-batch", "sluice-c-coarse", "sluice-c-1q", "libevent-timers", "floor":
            return try runC(c, p, w)
        case "sluice-swift":
            return try SluiceSwiftScenarios.run(p, w)
        case "sluice-swift-batch":
            return try SluiceSwiftScenarios.runBatch(p, w)
        case "dispatch-naive":
            return DispatchScenarios.run(DispatchNaive.self, p, w)
        case "dispatch-tuned":
            return DispatchScenarios.run(DispatchTuned.self, p, w)
        default:
            throw CaseError.unknown("implementation \(c.impl)")
        }
    }

    enum CaseError: Error, CustomStringConvertible {
        case unknown(String)
        case failed(String)
        var description: String {
            switch self {
            case let .unknown(s): "unknown \(s)"
            case let .failed(s): s
            }
        }
    }

    /// The fleet scenario: the C driver starts its own redis-server, runs the
    /// calls and reports throughput, call latency and over-admission.
    ///
    /// "mixed" and "abuse" are closed loops (as fast as they go: throughput,
    /// and the latency at saturation); the mixed case is run once more as an
    /// open loop, "mixed-paced", offered half of the decisions per second
    /// the implementation's closed loop just reached (the latency of a busy
    /// server that is not saturated; each implementation at half its own).
    static func runFleet(_ c: PlannedCase, quick: Bool) throws -> [Row] {
        guard c.scenario == Names.fleetScenario else { throw CaseError.unknown("scenario \(c.scenario) for \(c.impl)") }
        let workload = Plan.fleetWorkload(keys: c.keys)
        let sluice = c.impl.hasPrefix("sluice-redis")
        let inFlight = sluice ? 256 : 4
        // the cluster's cases make fewer calls (each case also starts or empties the
        // cluster, and runs three times), to keep the scenario's added time within a minute
        let cluster = c.impl.hasSuffix("-cluster")
        let calls: UInt64 = quick ? 10_000 : cluster ? 20_000 : 50_000
        var rows = [try fleetMedian(c, workload: workload, calls: calls, inFlight: inFlight, rate: 0)]
        // the paced latency: not for three quotas (their goal is Redis CPU), nor for
        // redis-per-call on the cluster (the cluster's latency goal is sluice-redis's alone)
        if workload == "mixed" && c.impl != "sluice-redis-3q" && c.impl != "redis-per-call-cluster",
            let perDecision = rows[0].ns_per_op, perDecision > 0
        {
            let rate = (Plan.fleetOfferedShare * 1e9 / perDecision).rounded()
            let seconds = Plan.fleetPacedSeconds * (quick ? 0.25 : 1)
            let pacedCalls = UInt64(min(max(rate * seconds, 2_000), 200_000))
            rows.append(
                try fleetMedian(c, workload: "mixed-paced", calls: pacedCalls, inFlight: inFlight, rate: rate))
        }
        return rows
    }

    /// Runs a fleet case three times (a fresh redis-server each time; a cluster is
    /// started once per case and emptied between runs) and keeps
    /// the median run: by ns_per_op for a closed loop, by p99 latency for an
    /// open loop. The shared machine's load swings a lot between seconds; the
    /// median of three is less at its mercy than one run, for both
    /// implementations alike. over_admitted is the largest of the three.
    static func fleetMedian(
        _ c: PlannedCase, workload: String, calls: UInt64, inFlight: Int, rate: Double
    ) throws -> Row {
        var runs: [Row] = []
        for _ in 0..<3 {
            runs.append(try fleetRow(c, workload: workload, calls: calls, inFlight: inFlight, rate: rate))
        }
        let key: (Row) -> Double = rate > 0 ? { $0.lateness_us?.p99 ?? .infinity } : { $0.ns_per_op ?? .infinity }
        var row = runs.sorted { key($0) < key($1) }[1]
        row.over_admitted = runs.compactMap(\.over_admitted).max()
        row.case_s = runs.compactMap(\.case_s).reduce(0, +)
        row.note =
            (row.note ?? "")
            + "; median of 3 runs (\(rate > 0 ? "p99 µs" : "ns/op"): \(runs.map { String(Int(key($0).rounded())) }.joined(separator: ", ")))"
        return row
    }

    static func fleetRow(_ c: PlannedCase, workload: String, calls: UInt64, inFlight: Int, rate: Double) throws -> Row {
        var p = cb_fleet_params_t()
        let sluice = c.impl.hasPrefix("sluice-redis")
        p.impl = sluice ? 0 : 1
        p.tls = c.impl == "sluice-redis-tls" ? 1 : 0
        p.quotas = c.impl == "sluice-redis-3q" ? 3 : 0
        let cluster = c.impl.hasSuffix("-cluster")
        p.cluster = cluster ? 1 : 0
        p.workload = workload == "abuse" ? 1 : 0
        p.calls = calls
        p.pool = Int32(inFlight)
        p.rate = rate
        var r = cb_fleet_result_t()
        let t0 = cb_now()
        let rc = cb_fleet(&p, &r)
        let note = withUnsafeBytes(of: r.note) { String(decoding: $0.prefix { $0 != 0 }, as: UTF8.self) }
        if rc != 0 { throw CaseError.failed(note.isEmpty ? "the fleet driver failed" : note) }
        var row = Row(scenario: c.scenario, impl: c.impl, keys: c.keys, threads: 1, ops: Int(r.ops))
        row.workload = workload
        row.ns_per_op = r.ns_per_op
        row.wall_ns_per_op = r.ns_per_op
        row.lateness_us = Lateness(p50: r.p50_us, p99: r.p99_us, max: r.max_us)
        row.over_admitted = Int(r.over_admitted)
        row.admitted = Int(r.admitted)
        row.failures = Int(r.failures)
        row.script_runs = Int(r.script_runs)
        if r.redis_cpu_ns_per_op > 0 { row.redis_cpu_ns_per_op = r.redis_cpu_ns_per_op }
        if rate > 0 { row.offered_per_s = rate } else { row.in_flight = inFlight }
        row.case_s = Double(cb_now() - t0) / 1e9
        let load =
            rate > 0
            ? "open loop, \(Int(rate)) calls/s offered by 4 threads (latency from each call's due time; ns_per_op is 1/rate)"
            : sluice ? "closed loop, 256 calls in flight" : "closed loop, 4 calls in flight"
        let how =
            cluster
            ? (sluice
                ? "3-primary Redis Cluster (redis+cluster://): one pipelined connection per primary, one batch per node (keys of many slots, up to 32 per EVALSHA), certain drops answered locally"
                    + (rate > 0 ? ", on its own loop thread; " : "; ")
                : "3-primary Redis Cluster: blocking EVALSHA per call to the key's primary (CRC16 slot, CLUSTER SLOTS map), 4 threads with a connection to each primary; ")
            : (sluice
                ? "one pipelined connection, calls batched (up to 32 per EVALSHA), certain drops answered locally"
                    + (rate > 0 ? ", on its own loop thread; " : "; ")
                : "blocking EVALSHA per call, 4 connections (one thread each); ")
        row.note = how + load
        return row
    }

    /// The fleet-debounce scenario (cbench_fleet_debounce.h): 2 submitting and 2
    /// worker processes, a redis-server of the driver's own. Debounce of 50 ms
    /// (trailing); a hot window of 250 keys walks over the 100,000: each
    /// submitter makes 4,000 calls in a window, so a key gets about 32 calls from
    /// the two processes while its window is hot (a few hundred ms at these
    /// rates: a call every ~8 ms, each re-arming the pending deadline), then goes
    /// quiet and emits its last value once. Closed loop for `seconds`; three runs
    /// (one with --quick), the median by calls/s kept.
    ///
    /// Each side at its best setting on this machine (swept by hand with the
    /// CB_FD_* variables): sluice-fleet-timed with 32 calls in flight per
    /// submitter and 1 partition (8–256 in flight and 4 partitions gave fewer
    /// calls/s, and deeper pipelines a later delivery); redis-delayed-job with
    /// 4 connections per submitter (2 and 8 gave fewer calls/s).
    static func runFleetDebounce(_ c: PlannedCase, quick: Bool) throws -> [Row] {
        guard c.scenario == Names.fleetDebounceScenario else {
            throw CaseError.unknown("scenario \(c.scenario) for \(c.impl)")
        }
        let n = quick ? 1 : 3
        var runs: [Row] = []
        for _ in 0..<n { runs.append(try fleetDebounceRow(c, seconds: quick ? 1.5 : 4)) }
        let key: (Row) -> Double = { $0.ns_per_op ?? .infinity }
        var row = runs.sorted { key($0) < key($1) }[n / 2]
        row.emissions_missing = runs.compactMap(\.emissions_missing).max()
        row.emissions_unexpected = runs.compactMap(\.emissions_unexpected).max()
        row.case_s = runs.compactMap(\.case_s).reduce(0, +)
        if n > 1 {
            let per = runs.map {
                "\(Int((1e9 / key($0)).rounded())) calls/s, p99 \(Int(($0.lateness_us?.p99 ?? 0).rounded())) µs"
            }
            row.note = (row.note ?? "") + "; median of \(n) runs by calls/s (\(per.joined(separator: "; ")))"
        }
        return [row]
    }

    static func fleetDebounceRow(_ c: PlannedCase, seconds: Double) throws -> Row {
        var p = cb_fleet_debounce_params_t()
        let sluice = c.impl == "sluice-fleet-timed"
        p.impl = sluice ? 0 : 1
        p.keys = Int32(c.keys)
        p.window = 250
        p.per_window = 4000
        p.seconds = seconds
        p.in_flight = sluice ? 32 : 4
        p.interval_ns = 50 * ms
        p.poll_ns = 10 * ms
        p.partitions = 1
        var r = cb_fleet_debounce_result_t()
        let t0 = cb_now()
        let rc = cb_fleet_debounce(&p, &r)
        let note = withUnsafeBytes(of: r.note) { String(decoding: $0.prefix { $0 != 0 }, as: UTF8.self) }
        if rc != 0 { throw CaseError.failed(note.isEmpty ? "the fleet-debounce driver failed" : note) }
        var row = Row(scenario: c.scenario, impl: c.impl, keys: c.keys, threads: 1, ops: Int(r.calls))
        row.workload = "rearm"
        row.ns_per_op = r.calls_per_s > 0 ? 1e9 / r.calls_per_s : nil
        row.wall_ns_per_op = row.ns_per_op
        row.lateness_us = r.late_samples > 0 ? Lateness(p50: r.p50_us, p99: r.p99_us, max: r.max_us) : nil
        row.failures = Int(r.failures)
        row.script_runs = Int(r.claims)
        row.emissions = Int(r.emissions)
        row.emissions_expected = Int(r.expected)
        row.emissions_missing = Int(r.missing)
        row.emissions_unexpected = Int(r.unexpected)
        row.keys_called = Int(r.keys_called)
        if r.redis_cpu_ns_per_call > 0 { row.redis_cpu_ns_per_op = r.redis_cpu_ns_per_call }
        if r.redis_cpu_ns_per_emission > 0 { row.redis_cpu_ns_per_emission = r.redis_cpu_ns_per_emission }
        row.in_flight = Int(p.in_flight)
        row.case_s = Double(cb_now() - t0) / 1e9
        let how =
            sluice
            ? "2 submitters, each a fleet timed limiter with \(p.in_flight) calls in flight (closed loop); 2 workers (sluice_fleet_timed_start, \(p.partitions) partitions, batch 64, poll 10 ms), handler acks at once"
            : "2 submitters, each \(p.in_flight) threads with a connection and one blocking EVALSHA (upsert with dedup key, extend + replace) per call; 2 workers, each one connection: claim script (64 due jobs to active with a lease) pipelined with the last batch's ack, sleep to the earliest due (poll 10 ms)"
        row.note =
            how
            + "; \(String(format: "%.1f", seconds)) s of calls, \(r.emissions) emissions (\(r.expected) expected), lateness over the \(r.late_samples) due while the submitters ran"
            + (note.isEmpty ? "" : "; " + note)
        return row
    }

    static func scenarioCode(_ s: String) -> cb_scenario_t {
        switch s {
        case "throttle-hot": CB_THROTTLE_HOT
        case "debounce-rearm": CB_DEBOUNCE_REARM
        case "fire": CB_FIRE
        case "lateness": CB_LATENESS
        case "spray": CB_SPRAY
        case "quotas": CB_QUOTAS
        default: CB_THREADS
        }
    }

    static func runC(_ c: PlannedCase, _ p: CaseParams, _ w: Workload) throws -> [String: Measured] {
        var params = w.cParams(p)
        var r = cb_result_t()
        let code = scenarioCode(c.scenario)
        let rc: Int32 =
            switch c.impl {
            case "sluice-c":
                { () -> Int32 in
                    params.quotas = Int32(CB_QUOTA_COUNT)
                    return cb_sluice_c(code, &params, &r)
                }()
            case "sluice-c-1q":
                { () -> Int32 in
                    params.quotas = 1
                    return cb_sluice_c(code, &params, &r)
                }()
            case "sluice-c-coarse":
                { () -> Int32 in
                    params.coarse_clock = 1
                    return cb_sluice_c(code, &params, &r)
                }()
            case "sluice-c-batch": cb_sluice_c_batch(code, &params, &r)
            case "libevent-timers": cb_libevent(code, &params, &r)
            default: cb_floor(code, &params, &r)
            }
        defer { cb_result_free(&r) }
        var m = Measured(r)
        if c.impl == "floor" && c.threads == 1 && cb_floor_independent() > 0 {
            m.note = String(format: "independent accesses, overlapped by the CPU: %.2f ns", cb_floor_independent())
        }
        if rc != 0 { m.note = "the C driver reported a failure (\(rc)); delivered \(r.delivered) of \(c.keys)" }
        if c.scenario == "fire" {
            var fire = m
            fire.bytesPerKey = nil
            fire.idleBytesPerKey = nil
            if c.impl == "floor" { return ["fire": fire] }
            var memory = Measured()
            memory.ops = c.keys
            memory.bytesPerKey = m.bytesPerKey
            memory.idleBytesPerKey = m.idleBytesPerKey
            return ["fire": fire, "memory": memory]
        }
        return [c.scenario: m]
    }

    static func row(_ scenario: String, _ c: PlannedCase, _ p: CaseParams, _ m: Measured, _ elapsed: Double) -> Row {
        var row = Row(scenario: scenario, impl: c.impl, keys: c.keys, threads: c.threads, ops: m.ops)
        row.case_s = elapsed
        row.note = m.note
        switch scenario {
        case "memory":
            row.bytes_per_key = m.bytesPerKey
            row.idle_bytes_per_key = m.idleBytesPerKey
        case "lateness":
            let samples = m.lateness ?? []
            row.early = m.early
            if !samples.isEmpty {
                var h = Histogram<UInt64>(highestTrackableValue: 3_600 * sec, numberOfSignificantValueDigits: .three)
                for s in samples { _ = h.record(max(s, 1)) }
                let us = { (v: UInt64) in Double(v) / 1000 }
                row.lateness_us = Lateness(
                    p50: us(h.valueAtPercentile(50)), p99: us(h.valueAtPercentile(99)), max: us(h.max))
                row.lateness_cdf_us = [0, 10, 25, 50, 75, 90, 95, 99, 99.9, 99.99, 100].map {
                    [$0, us($0 == 100 ? h.max : $0 == 0 ? h.min : h.valueAtPercentile($0))]
                }
            }
        case "spray":
            row.ns_per_op = m.cpuNsPerOp ?? m.nsPerOp
            row.cpu_ns_per_op = m.cpuNsPerOp
            row.wall_ns_per_op = m.nsPerOp
            row.bytes_per_key = m.bytesPerKey
            row.peak_rss_bytes = m.peakRSS
            row.cap = p.cap
            row.refused = m.refused
        case "threads":
            // Throughput: wall time of the whole run over the calls of all threads.
            row.ns_per_op = m.nsPerOp
            row.cpu_ns_per_op = m.cpuNsPerOp
            row.wall_ns_per_op = m.nsPerOp
        case "quotas":
            // One thread: process CPU time per call (as throttle-hot), and the RSS growth per key
            // of the setup; two threads: wall time per call (throughput, as threads).
            row.ns_per_op = c.threads > 1 ? m.nsPerOp : m.cpuNsPerOp ?? m.nsPerOp
            row.cpu_ns_per_op = m.cpuNsPerOp
            row.wall_ns_per_op = m.nsPerOp
            row.bytes_per_key = m.bytesPerKey
            row.admitted = m.admitted
        default:
            // The process's CPU time (all threads): on a shared machine a
            // descheduled process does not count, and work that an
            // implementation hands to other threads (Dispatch's timer manager
            // and queue) does.
            row.ns_per_op = m.cpuNsPerOp ?? m.nsPerOp
            row.cpu_ns_per_op = m.cpuNsPerOp
            row.wall_ns_per_op = m.nsPerOp
        }
        return row
    }
}
