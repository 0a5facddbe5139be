import Foundation

/// Writes docs/benchmarks.md and docs/charts/*.svg from a results file.
public struct ReportGenerator {
    public var results: BenchResults
    /// The results file, as the page names it.
    public var jsonPath: String
    /// Tables only, under smaller headings, without descriptions or charts: how
    /// the page shows the run of another machine kind.
    var compact = false

    public init(results: BenchResults, jsonPath: String) {
        self.results = results
        self.jsonPath = jsonPath
    }

    static let colors: [String: String] = [
        "sluice-c": "#1f77b4", "sluice-swift": "#ff7f0e", "dispatch-naive": "#d62728",
        "dispatch-tuned": "#9467bd", "libevent-timers": "#2ca02c", "floor": "#7f7f7f", "sluice-c-coarse": "#17becf",
    ]

    public func write(markdown: URL, charts: URL) throws {
        let fm = FileManager.default
        try fm.createDirectory(at: charts, withIntermediateDirectories: true)
        try fm.createDirectory(at: markdown.deletingLastPathComponent(), withIntermediateDirectories: true)
        var written: Set<String> = []
        for (name, svg) in chartFiles() {
            try svg.write(to: charts.appendingPathComponent(name), atomically: true, encoding: .utf8)
            written.insert(name)
        }
        // Charts of an earlier run that this one does not have.
        for old in (try? fm.contentsOfDirectory(atPath: charts.path)) ?? []
        where old.hasSuffix(".svg") && !written.contains(old) {
            try? fm.removeItem(at: charts.appendingPathComponent(old))
        }
        let rel = relativePath(from: markdown.deletingLastPathComponent(), to: charts)
        let notesURL = URL(fileURLWithPath: jsonPath).deletingLastPathComponent().appendingPathComponent("notes.md")
        let notes = try? String(contentsOf: notesURL, encoding: .utf8)
        let others = results.otherKinds(besides: URL(fileURLWithPath: jsonPath))
        try page(chartsDir: rel, notes: notes, others: others).write(to: markdown, atomically: true, encoding: .utf8)
    }

    func relativePath(from base: URL, to target: URL) -> String {
        let b = base.standardizedFileURL.pathComponents, t = target.standardizedFileURL.pathComponents
        var i = 0
        while i < b.count && i < t.count && b[i] == t[i] { i += 1 }
        return (Array(repeating: "..", count: b.count - i) + t[i...]).joined(separator: "/")
    }

    // MARK: - Charts

    func series(_ scenario: String, threads: Int = 1, value: (Row) -> Double?) -> [LineChart.Series] {
        Names.impls.compactMap { impl in
            let pts = results.rows.filter { $0.scenario == scenario && $0.impl == impl && $0.threads == threads }
                .compactMap { r in value(r).map { (x: Double(r.keys), y: $0) } }
            guard !pts.isEmpty else { return nil }
            return LineChart.Series(
                name: impl, color: Self.colors[impl] ?? "#000", points: pts, dashed: impl == "floor")
        }
    }

    func chartFiles() -> [(String, String)] {
        var out: [(String, String)] = []
        let titles = [
            "throttle-hot": "throttle-hot: submit on existing keys (leading throttle, random order)",
            "debounce-rearm": "debounce-rearm: every call pushes a live deadline later",
            "fire": "fire: due timers fired and delivered",
            "spray": "spray: unique keys past a 10k key cap",
        ]
        for scenario in ["throttle-hot", "debounce-rearm", "fire", "spray"] {
            let s = series(scenario) { $0.ns_per_op }
            guard !s.isEmpty else { continue }
            let chart = LineChart(
                title: titles[scenario]!, xLabel: "keys",
                yLabel: scenario == "fire" ? "ns per delivered emission" : "ns per call",
                series: s)
            out.append(("\(scenario).svg", chart.svg()))
        }
        let mem = series("memory") { $0.bytes_per_key }
        if !mem.isEmpty {
            out.append(
                (
                    "memory.svg",
                    LineChart(
                        title: "memory: resident bytes per pending key", xLabel: "pending keys",
                        yLabel: "bytes per key",
                        series: mem
                    ).svg()
                ))
        }
        // threads: throughput (M calls/s) at 1 and 2 threads, per key count.
        for keys in Set(results.rows.filter { $0.scenario == "threads" }.map(\.keys)).sorted() {
            let s: [LineChart.Series] = Names.impls.compactMap { impl in
                let pts = results.rows.filter { $0.scenario == "threads" && $0.impl == impl && $0.keys == keys }
                    .compactMap { r in r.ns_per_op.map { (x: Double(r.threads), y: 1e3 / $0) } }
                return pts.isEmpty
                    ? nil : .init(name: impl, color: Self.colors[impl] ?? "#000", points: pts, dashed: impl == "floor")
            }
            guard !s.isEmpty else { continue }
            var chart = LineChart(
                title: "threads: submit throughput, \(Format.keys(keys)) keys split between the threads",
                xLabel: "threads", yLabel: "million calls per second", series: s)
            chart.logX = false
            chart.xTicks = [1, 2]
            chart.xTickLabel = { "\(Int($0))" }
            out.append(("threads-\(Format.keys(keys)).svg", chart.svg()))
        }
        // lateness: distribution per key count.
        for keys in Set(results.rows.filter { $0.scenario == "lateness" }.map(\.keys)).sorted() {
            let s: [LineChart.Series] = Names.impls.compactMap { impl in
                guard let r = results.row("lateness", impl, keys: keys), let cdf = r.lateness_cdf_us else { return nil }
                let pts = cdf.compactMap { pair -> (x: Double, y: Double)? in
                    guard pair.count == 2, pair[0] > 0 else { return nil }
                    return (x: Self.nines(pair[0]), y: max(pair[1], 0.1))
                }
                return .init(name: impl, color: Self.colors[impl] ?? "#000", points: pts)
            }
            guard !s.isEmpty else { continue }
            var chart = LineChart(
                title: "lateness: delivery minus deadline, \(Format.keys(keys)) pending keys (real loop)",
                xLabel: "percentile", yLabel: "µs late", series: s)
            chart.logX = false
            chart.xTicks = [10, 50, 90, 99, 99.9, 99.99, 100].map(Self.nines)
            chart.xTickLabel = { x in
                let labels: [(Double, String)] = [
                    (10, "p10"), (50, "p50"), (90, "p90"), (99, "p99"), (99.9, "p99.9"), (99.99, "p99.99"),
                    (100, "max"),
                ]
                return labels.min { abs(Self.nines($0.0) - x) < abs(Self.nines($1.0) - x) }!.1
            }
            out.append(("lateness-\(Format.keys(keys)).svg", chart.svg()))
        }
        return out
    }

    /// Percentile on a "nines" scale: p50 → 0.3, p90 → 1, p99 → 2, …; max at 4.6.
    static func nines(_ p: Double) -> Double {
        if p >= 100 { return 4.6 }
        return -log10(1 - p / 100)
    }

    // MARK: - Page

    /// The run's date, length, machine and load.
    func runLine() -> String {
        let r = results
        let m = r.machine
        return """
            **Measured** \(r.date)\(r.quick ? " — **quick run** (reduced sizes)" : ""), in \(String(format: "%.0f", r.duration_s ?? 0)) s,
            on \(m.cpu), \(m.cores) cores, \(String(format: "%.0f", Double(m.memory_bytes) / 1_073_741_824)) GiB,
            \(m.os) (\(m.kernel)); \(m.swift); C: \(m.c_compiler); libevent \(m.libevent).
            Load average \(r.loadavg_start.map { String(format: "%.2f", $0) } ?? "?") at the start, \(r.loadavg_end.map { String(format: "%.2f", $0) } ?? "?") at the end
            """
    }

    /// The goals and whether each holds in this run.
    func goalsTable() -> String {
        var s = "| goal | measured | holds |\n|---|---|---|\n"
        for g in results.goals() {
            let mark = g.holds.map { $0 ? "yes" : "**no**" } ?? "–"
            s += "| \(g.name) | \(g.measured)\(g.detail.isEmpty ? "" : "<br><sub>\(g.detail)</sub>") | \(mark) |\n"
        }
        return s
    }

    /// Every scenario's section (charts from `chartsDir`, unless `compact`).
    func scenarioSections(_ chartsDir: String) -> String {
        var s = section(
            "throttle-hot", chartsDir,
            "Calls on existing keys in random order; leading throttle with an hour-long window, so every measured call lands in an open window and replaces the key's pending value. Setup (not timed): one call per key opens its window, a second makes a value pending."
        )
        s += section(
            "debounce-rearm", chartsDir,
            "Every key holds a pending debounce value (interval 60 s); each measured call pushes its key's deadline later."
        )
        s += section(
            "fire", chartsDir,
            "N pending debounce keys fall due and are delivered: ns per delivered emission. Sluice: deadlines spread over one second of manual time, then one `advance` past them all. libevent: all armed, then, once due, the loop runs until every one was delivered. Dispatch: armed with the consumer queue suspended, all due after the arming ended; the Dispatch manager's CPU time to fire them is counted, then the queue is resumed and timed to the last delivery. Before the timed pass, each implementation fires 512 keys once in the same process, untimed, so that a process's first-time costs (pages, lazy binding, runtime metadata) stay out of a one-pass figure."
        )
        s += memorySection(chartsDir)
        s += latenessSection(chartsDir)
        s += section(
            "spray", chartsDir,
            "A stream of unique keys on a rate limiter (1 per minute) with a cap of 10 000 live keys: every new key past the cap is refused (Sluice: `SLUICE_EFULL` / `LimiterError.full`; the baselines check their own count). ns per call, and the peak RSS growth during the spray, which must stay bounded."
        )
        s += threadsSection(chartsDir)
        s += quotasSection()
        s += fleetDebounceSection()
        return s
    }

    /// The newest full run of each other machine kind: its goals and its tables.
    func otherKindsSection(_ others: [(results: BenchResults, url: URL)]) -> String {
        guard !others.isEmpty else { return "" }
        var s = """
            ## Other machine kinds

            The newest full run on each other machine kind, kept in `Benchmarks/results/KIND.json`
            (`make bench` writes it beside `latest.json`). Its ratios are its own; compare them
            with this page's, not its absolute times.


            """
        for other in others {
            var g = ReportGenerator(results: other.results, jsonPath: other.url.path)
            g.compact = true
            s += "### \(other.results.machine.kindName)\n\n" + g.runLine() + ".\n"
            s += "Raw figures: [`\(displayPath(other.url.path))`](../\(displayPath(other.url.path))).\n\n"
            s += g.goalsTable() + "\n"
            s += "<details><summary>Its tables</summary>\n\n" + g.scenarioSections("") + "</details>\n\n"
        }
        return s
    }

    func page(chartsDir: String, notes: String?, others: [(results: BenchResults, url: URL)] = []) -> String {
        let r = results
        var s = """
            # Benchmarks

            <!-- Generated by `sluice-bench report` from \(displayPath(jsonPath)); do not edit by hand.
                 Hand-written findings go in Benchmarks/results/notes.md, which is included below. -->

            Sluice next to what you would write without it, measured in **one run on one machine**:
            the C core (`sluice-c`), the Swift `Limiter` (`sluice-swift`), two pure-Dispatch
            baselines (`dispatch-naive`, `dispatch-tuned`), libevent's own timers
            (`libevent-timers`) and the hardware's floor for a keyed operation (`floor`).
            Run it yourself with `make bench` (about 10 minutes; `make bench QUICK=1` takes under 3):
            it prints the same tables with the ratios, and writes `Benchmarks/results/latest.json`
            (a full run also `Benchmarks/results/KIND.json`, the newest run on its machine kind).

            \(runLine())
            (this is a shared 2-core machine: absolute times move by 20 % or more from run to run;
            compare the ratios, which are taken inside one run).

            ## Goals

            On \(r.machine.kindName), in the run above\(others.isEmpty ? "" : " (the other machine kinds' goals are at the end of this page)"):


            """
        s += goalsTable()
        if let notes, !notes.isEmpty {
            s += "\n" + notes.trimmingCharacters(in: .whitespacesAndNewlines) + "\n"
        }
        s += """

            ## The implementations

            Every implementation runs the same calls (the same keys, in the same random order, from
            the same generator), with the same policy semantics, and delivers every emission to
            one serial consumer.

            - **`sluice-c`** — the C core (`sluice.h`) on a manual clock that moves 100 µs every
              1024 calls (the clock is read once per batch, as a server embedding the core does);
              the loop layer (`sluice_loop.h`, `sluice_mt_*`, real `CLOCK_MONOTONIC`, owned
              libevent loop) for `lateness` and `threads`.
            - **`sluice-swift`** — `Limiter<UInt64, Int>` with a handler delivery, on a
              `ManualLimiterClock` moved in the same steps, or on a `LimiterLoop` for `lateness`
              and `threads`.
            - **`dispatch-naive`** — what people ship: `[Key: DispatchWorkItem]` plus last-fire
              times behind one `NSLock`. Debounce = `cancel()` + `asyncAfter`; throttle = last-fire
              time + one trailing `asyncAfter` per window; rate = TAT + a work item that forgets
              the key at its TAT. Entries are removed when their work item fires.
            - **`dispatch-tuned`** — the best Dispatch can do: one `DispatchSourceTimer` per live
              key, rescheduled in place, a generation counter instead of cancel, the source
              cancelled and the entry removed when the key goes idle; 16 shards, each a `Mutex`
              from Synchronization; monotonic `DispatchTime`; leeway 1 ms (Sluice's tick); every
              handler on one serial queue. Rate: no timers, a TAT dictionary swept every second.
            - **`libevent-timers`** — C: one record per key in an open-addressing hash table,
              with its `struct event` embedded, on libevent's min-heap (precise timers). Calls
              run inside a libevent callback with the time cache refreshed every 1024 calls (the
              same clock step as Sluice's); for `threads`, one base per thread (share-nothing).
            - **`floor`** — one random read-modify-write into an array of N 64-byte records, in
              the same order, no software prefetch: the least any per-key state costs.
            - **`sluice-c-batch`**, **`sluice-swift-batch`** (`throttle-hot` and `debounce-rearm`
              only) — `sluice-c` and `sluice-swift` with the measured calls handed over 32 at a
              time, at the time the clock step gives them: `sluice_limiter_submit_many()` and
              `Limiter.submit(contentsOf:)` (same results as single calls; the keys of a batch
              are hashed first and their state prefetched, so the cache misses overlap).
            - **`sluice-c-1q`** (`quotas` only) — `sluice-c` with one quota: `sluice_rate()` with
              the plan's first quota, through `sluice_limiter_submit_u64()` /
              `sluice_mt_submit_u64()`, the cheapest single-quota calls.

            Dispatch's timers need the real clock: the Dispatch baselines read `DispatchTime.now()`
            on every call (about 20–25 ns here), which is part of what they cost.

            **What `ns/op` is.** Except for `threads` and `lateness`, `ns/op` is the CPU time of the
            benchmark's process (all its threads) per operation, over the measured phase. On a
            shared machine that is the robust figure: time when the process was not running does
            not count, and the work an implementation hands to other threads (Dispatch's timer
            manager and its serial queue) does. The wall time of the calling thread (including a
            final `queue.sync {}` for Dispatch) is shown beside it and kept in the JSON
            (`wall_ns_per_op`). `threads` reports wall time per call (throughput), `lateness` the
            delivery time minus the deadline.

            **Runs.** Every case runs in a process of its own. In a full run the per-call cases
            up to 1M keys (throttle-hot, debounce-rearm, threads, quotas), and fire and lateness
            up to 100k keys, run three times, the implementations of a size in turn run after
            run, and the row is the run with the median value (its note lists the three); the
            fleet's cases are each the median of three runs too.

            ## Scenarios


            """
        s += scenarioSections(chartsDir)
        s += otherKindsSection(others)
        s += """
            ## Reproducing

            ```sh
            make bench              # the full suite (≤ 10 min on 2 cores), then the table and the goals
            make bench QUICK=1      # every scenario at keys ≤ 100k (≤ 3 min)
            Benchmarks/.build/release/sluice-bench run --scenario fire --impl sluice-c --impl libevent-timers
            Benchmarks/.build/release/sluice-bench run --scenario quotas --output /tmp/quotas.json  # this scenario alone (≈ 20 s)
            Benchmarks/.build/release/sluice-bench run --scenario fleet-debounce --output /tmp/fd.json  # ≈ 35 s (--quick ≈ 6 s)
            Benchmarks/.build/release/sluice-bench report   # this page and docs/charts/ from results/latest.json (+ KIND.json)
            cd Benchmarks && swift package benchmark        # single-operation microbenchmarks (package-benchmark)
            ```

            The raw figures of this page: [`Benchmarks/results/latest.json`](../Benchmarks/results/latest.json)
            (schema `sluice-bench/1`).

            """
        return s
    }

    func displayPath(_ p: String) -> String {
        if let range = p.range(of: "Benchmarks/results/") { return String(p[range.lowerBound...]) }
        return p
    }

    /// A table header; the columns named "implementation" are left-aligned, the others right-aligned.
    func header(_ cols: [String]) -> String {
        "| " + cols.joined(separator: " | ") + " |\n|"
            + cols.map { $0 == "implementation" ? ":---" : "---:" }.joined(separator: "|") + "|\n"
    }

    /// A scenario's heading, its description and its charts (`chart` names
    /// without ".svg"); just the heading when `compact`.
    func opening(_ scenario: String, _ text: String, charts: String, _ chartNames: [String]) -> String {
        if compact { return "#### `\(scenario)`\n\n" }
        var s = "### `\(scenario)`\n\n\(text.trimmingCharacters(in: .whitespacesAndNewlines))\n\n"
        for name in chartNames {
            s += "![\(name)](\(charts)/\(name).svg)\n\n"
        }
        return s
    }

    func section(_ scenario: String, _ charts: String, _ text: String) -> String {
        let rows = results.rows.filter { $0.scenario == scenario }
        guard !rows.isEmpty else { return "" }
        var s = opening(scenario, text, charts: charts, [scenario])
        let isSpray = scenario == "spray"
        var cols = [
            "keys", "implementation", Metric.unit(scenario), "÷ sluice-c", "÷ sluice-swift", "wall ns/op", "ops",
        ]
        if isSpray {
            cols = ["keys", "implementation", "ns/call", "÷ sluice-c", "÷ sluice-swift", "peak RSS growth", "refused"]
        }
        s += header(cols)
        for keys in Set(rows.map(\.keys)).sorted() {
            for impl in Names.impls {
                guard let r = results.row(scenario, impl, keys: keys) else { continue }
                var cells = [
                    Format.keys(keys), "`\(impl)`", Format.ns(r.ns_per_op),
                    Format.ratio(results.ratio(r, to: "sluice-c")), Format.ratio(results.ratio(r, to: "sluice-swift")),
                ]
                if isSpray {
                    cells += [Format.mib(r.peak_rss_bytes), "\(r.refused ?? 0)"]
                } else {
                    cells += [Format.ns(r.wall_ns_per_op), "\(r.ops)"]
                }
                if let note = r.note { cells[1] += " <sub>(\(note))</sub>" }
                s += "| " + cells.joined(separator: " | ") + " |\n"
            }
        }
        return s + "\n"
    }

    func memorySection(_ charts: String) -> String {
        let rows = results.rows.filter { $0.scenario == "memory" }
        guard !rows.isEmpty else { return "" }
        var s = opening(
            "memory",
            """
            Resident memory (RSS growth, read from `/proc/self/statm` in a process of its own) per
            pending key, measured in the `fire` case after every key was made pending; and once
            everything fired and went idle ("idle": what the process still holds per key — memory
            freed to `malloc` but kept by it counts here).
            """, charts: charts, ["memory"])
        s += header(["keys", "implementation", "bytes/pending key", "÷ sluice-c", "÷ sluice-swift", "idle bytes/key"])
        for keys in Set(rows.map(\.keys)).sorted() {
            for impl in Names.impls {
                guard let r = results.row("memory", impl, keys: keys) else { continue }
                s +=
                    "| "
                    + [
                        Format.keys(keys), "`\(impl)`", Format.bytes(r.bytes_per_key),
                        Format.ratio(results.ratio(r, to: "sluice-c")),
                        Format.ratio(results.ratio(r, to: "sluice-swift")),
                        Format.bytes(r.idle_bytes_per_key),
                    ].joined(separator: " | ") + " |\n"
            }
        }
        return s + "\n"
    }

    func latenessSection(_ charts: String) -> String {
        let rows = results.rows.filter { $0.scenario == "lateness" }
        guard !rows.isEmpty else { return "" }
        let keySizes = Set(rows.map(\.keys)).sorted()
        var s = opening(
            "lateness",
            """
            A real loop and the real clock: N keys submitted from one thread at a steady pace
            (over 0.5 s, or 1 µs per key when more), each with a debounce deadline 1 s later, so
            every key is pending at the peak and the deadlines are spread; lateness = the
            consumer's `CLOCK_MONOTONIC` at delivery minus the key's deadline, in an HdrHistogram.
            Sluice's loop limiters tick every 10 µs (a timer fires at most one tick late, never early);
            `dispatch-tuned` has a 1 ms leeway; `dispatch-naive`'s `asyncAfter` gets libdispatch's
            default leeway (a tenth of the delay: 100 ms here). The Dispatch baselines stop at
            100k keys.
            """, charts: charts, keySizes.map { "lateness-\(Format.keys($0))" })
        s += header(["keys", "implementation", "p50 µs", "p99 µs", "max µs", "p99 ÷ sluice-swift", "early"])
        for keys in Set(rows.map(\.keys)).sorted() {
            for impl in Names.impls {
                guard let r = results.row("lateness", impl, keys: keys) else { continue }
                var name = "`\(impl)`"
                if let note = r.note { name += " <sub>(\(note))</sub>" }
                s +=
                    "| "
                    + [
                        Format.keys(keys), name, Format.us(r.lateness_us?.p50), Format.us(r.lateness_us?.p99),
                        Format.us(r.lateness_us?.max), Format.ratio(results.ratio(r, to: "sluice-swift")),
                        "\(r.early ?? 0)",
                    ].joined(separator: " | ") + " |\n"
            }
        }
        return s + "\n"
    }

    func threadsSection(_ charts: String) -> String {
        let rows = results.rows.filter { $0.scenario == "threads" }
        guard !rows.isEmpty else { return "" }
        let keySizes = Set(rows.map(\.keys)).sorted()
        var s = opening(
            "threads",
            """
            Submit throughput from 1 and 2 threads on different keys (each thread its own half),
            on a rate limiter (100 per second, burst 100) whose keys are warm, with the real clock
            read on every call. Sluice: the loop layer's sharded limiter (`sluice-c`) and a
            `Limiter` on a `LimiterLoop` (`sluice-swift`); `libevent-timers`: one base per thread.
            On this 2-core machine the second thread competes with everything else running.
            """, charts: charts, keySizes.map { "threads-\(Format.keys($0))" })
        s += header([
            "keys", "threads", "implementation", "ns/call", "M calls/s", "÷ sluice-c", "÷ sluice-swift", "cpu ns/call",
        ])
        for keys in Set(rows.map(\.keys)).sorted() {
            for threads in [1, 2] {
                for impl in Names.impls {
                    guard let r = results.row("threads", impl, keys: keys, threads: threads) else { continue }
                    s +=
                        "| "
                        + [
                            Format.keys(keys), "\(threads)", "`\(impl)`", Format.ns(r.ns_per_op),
                            r.ns_per_op.map { String(format: "%.2f", 1e3 / $0) } ?? "–",
                            Format.ratio(results.ratio(r, to: "sluice-c")),
                            Format.ratio(results.ratio(r, to: "sluice-swift")),
                            Format.ns(r.cpu_ns_per_op),
                        ].joined(separator: " | ") + " |\n"
                }
            }
        }
        return s + "\n"
    }

    func quotasSection() -> String {
        let rows = results.rows.filter { $0.scenario == "quotas" }
        guard !rows.isEmpty else { return "" }
        var s = opening(
            "quotas",
            """
            A rate limiter with three quotas per key on one plan — `second` 10 per second (burst
            10), `minute` 300 per minute, `hour` 10 000 per hour (bursts = limits) — on calls to
            existing keys in random order (every key charged once first, untimed). The emission
            intervals (100, 200, 360 ms) are whole nanoseconds, so every implementation's GCRA is
            exact. At the manual clock's pace (100 ns per call) a key is called every N × 100 ns:
            at 1k keys `second` refuses nearly every call, at 100k it admits about a third (four
            fifths in a quick run, whose span is shorter), at 1M all; `minute` and `hour` are charged on every admitted
            call but never bind within the measured span, so `sluice-c-1q` makes the same
            decisions on one thread (the `admitted` column; the real-clock cases differ a little,
            their pace is their own). One thread: `sluice-c` is the core
            (`sluice_limiter_submit_plan()`) on the manual clock, as `throttle-hot`; two threads:
            the loop layer (`sluice_mt_submit_plan()`, real clock), each thread its own half of the
            keys, as `threads`. `sluice-c-1q` runs the same calls under `sluice_rate()` with the
            first quota alone (`sluice_limiter_submit_u64()` / `sluice_mt_submit_u64()`).
            `dispatch-tuned` keeps a struct of three TATs per key in its 16 `Mutex`-guarded
            dictionaries (one lookup, updated in place; all or nothing; swept every second) and
            reads `DispatchTime.now()` per call. One thread: process CPU ns per call; two threads:
            wall ns per call (throughput). Bytes per key: RSS growth over the setup of every key
            (one thread). Goals: `sluice-c` ≤ 1.6× `sluice-c-1q`, ≤ 0.5× `dispatch-tuned`, and
            ≤ 96 B per key with three quotas at 1M keys.
            """, charts: "", [])
        s += header([
            "keys", "threads", "implementation", "ns/call", "÷ sluice-c-1q", "÷ dispatch-tuned", "admitted", "B/key",
        ])
        for keys in Set(rows.map(\.keys)).sorted() {
            for threads in [1, 2] {
                for impl in Names.impls {
                    guard let r = results.row("quotas", impl, keys: keys, threads: threads) else { continue }
                    s +=
                        "| "
                        + [
                            Format.keys(keys), "\(threads)", "`\(impl)`", Format.ns(r.ns_per_op),
                            Format.ratio(results.ratio(r, to: "sluice-c-1q")),
                            Format.ratio(results.ratio(r, to: "dispatch-tuned")),
                            r.admitted.map {
                                r.ops > 0 ? String(format: "%.1f %%", 100 * Double($0) / Double(r.ops)) : "–"
                            }
                                ?? "–",
                            Format.bytes(r.bytes_per_key),
                        ].joined(separator: " | ") + " |\n"
                }
            }
        }
        return s + "\n"
    }

    /// The fleet-debounce scenario (issue 26), when the results have its rows.
    func fleetDebounceSection() -> String {
        let rows = results.rows.filter { $0.scenario == Names.fleetDebounceScenario }
        guard !rows.isEmpty else { return "" }
        var s = opening(Names.fleetDebounceScenario, Self.fleetDebounceText, charts: "", [])
        s += header([
            "implementation", "calls/s", "Redis CPU per call", "per emission", "lateness p50", "p99",
            "emissions (expected)", "missing + unexpected",
        ])
        for impl in Names.fleetDebounceImpls {
            guard let r = rows.first(where: { $0.impl == impl }) else { continue }
            s +=
                "| "
                + [
                    "`\(impl)`", r.ns_per_op.map { "\(Int((1e9 / $0).rounded()))" } ?? "–",
                    r.redis_cpu_ns_per_op.map { "\(Format.us($0 / 1000)) µs" } ?? "–",
                    r.redis_cpu_ns_per_emission.map { "\(Format.us($0 / 1000)) µs" } ?? "–",
                    r.lateness_us.map { "\(Format.us($0.p50)) µs" } ?? "–",
                    r.lateness_us.map { "\(Format.us($0.p99)) µs" } ?? "–",
                    "\(r.emissions ?? 0) (\(r.emissions_expected ?? 0))",
                    "\((r.emissions_missing ?? 0) + (r.emissions_unexpected ?? 0))",
                ].joined(separator: " | ") + " |\n"
        }
        return s + "\n"
    }

    static let fleetDebounceText = """
        Debounce across a fleet of processes, its state in a redis-server the driver starts
        (loopback, no persistence). 2 submitting processes re-arm debounce deadlines (50 ms,
        trailing edge) as fast as they go (closed loop, 4 s), and 2 worker processes deliver
        each emission, acknowledge it at once and record its lateness: `CLOCK_REALTIME` when
        the handler runs minus the emission's deadline (Redis's clock, the same clock on this
        host). The key space is 100,000 keys; a hot window of 250 keys walks over it: the
        submitters share a call counter, and every 8,000 calls (4,000 each) the window moves
        to the next 250 keys. While its window is hot (200–300 ms at these rates) a key gets
        about 32 calls, one every ~8 ms, each re-arming its pending deadline (50 ms is far
        above that gap and far below the window's time: a key emits about once per window,
        one emission per ~30 calls); then it goes quiet and emits its last value once.

        - **`sluice-fleet-timed`** — `sluice_fleet_timed.h`: each submitter a timed limiter
          (`sluice_debounce(50 ms)`, trailing, 1 partition) on its own event_base with 32
          calls in flight (pipelined); each worker a limiter started with
          `sluice_fleet_timed_start()` (batch 64, poll 10 ms) whose handler calls
          `sluice_fleet_timed_ack()` at once.
        - **`redis-delayed-job`** — the BullMQ way (a delayed job with a deduplication key,
          debounce mode with extend and replace), written for speed: per call one blocking
          `EVALSHA` (hiredis) of an upsert script that finds the key's current job in a dedup
          hash and, if it still waits in the delayed ZSET (due > now, Redis `TIME` in µs),
          replaces its payload and re-scores it to now + 50 ms, else makes a new job (id
          key:time) with its payload and due time; 4 connections (threads) per submitter.
          Each worker, on one connection: a claim script moves up to 64 due jobs (those whose
          lease ended first) to an active ZSET with a 30 s lease and returns them, their
          payloads and the earliest due time left; the worker handles them, then sends the
          batch's ack script (off the active ZSET, payload and dedup entry deleted) pipelined
          with its next claim (one round trip, as BullMQ's `moveToFinished` fetches the next
          job); when nothing is due it sleeps until the earliest due time (at most 10 ms).

        calls/s: both submitters, from the start to the last answer. Redis CPU: the server's
        `used_cpu_user` + `used_cpu_sys` over the run (submitting and the drain after it),
        per call and per emission. Lateness: of the emissions due while the submitters ran.
        Correctness: every call's Redis time is recorded; the expected emissions are the calls
        not followed on their key within 50 ms, and the delivered values must be exactly
        those, once each. Three runs per implementation, the median by calls/s (`--quick`:
        one run of 1.5 s). Each side at its best setting here: 8–256 calls in flight and 1 or
        4 partitions tried for sluice, 2, 4 and 8 connections for the baseline. Goals:
        `sluice-fleet-timed` ≥ 3× the calls/s of `redis-delayed-job` at a lateness p99 ≤ its;
        no missing or unexpected emission.
        """
}
