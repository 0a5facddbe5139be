/// Goals of the hot paths on every machine kind (issue 25): the C core
/// against the hand-written libevent table and against Dispatch, two threads
/// against one, the Swift layer against C, and the lateness tail.
extension BenchResults {
    /// One comparison at one size and thread count: `x` over `base`.
    struct Pair {
        var keys: Int
        var threads: Int
        var x: Double
        var base: Double
        var ratio: Double { x / base }
    }

    /// Every size and thread count at which both `impl` and `base` have a
    /// value in `scenario`, smallest first.
    func pairs(_ scenario: String, _ impl: String, _ base: String, threads: [Int] = [1]) -> [Pair] {
        var out: [Pair] = []
        for t in threads {
            for n in Set(rows.filter { $0.scenario == scenario && $0.threads == t }.map(\.keys)).sorted() {
                guard let x = row(scenario, impl, keys: n, threads: t).flatMap(Metric.value),
                    let b = row(scenario, base, keys: n, threads: t).flatMap(Metric.value), b > 0
                else { continue }
                out.append(Pair(keys: n, threads: t, x: x, base: b))
            }
        }
        return out
    }

    /// A goal over several sizes: `limit(pair)` is the largest ratio allowed there.
    func ratioGoal(_ name: String, _ pairs: [Pair], detail: String, limit: (Pair) -> Double) -> Goal {
        guard !pairs.isEmpty else { return Goal(name: name, measured: "not measured", holds: nil, detail: "") }
        let threaded = Set(pairs.map(\.threads)).count > 1 || pairs.contains { $0.threads > 1 }
        let measured = pairs.map { p in
            "\(Format.keys(p.keys))\(threaded ? " ×\(p.threads)" : ""): \(Format.ratio(p.ratio))"
        }
        return Goal(
            name: name, measured: measured.joined(separator: "; "),
            holds: pairs.allSatisfy { $0.ratio <= limit($0) }, detail: detail)
    }

    func hotPathGoals() -> [Goal] {
        var goals: [Goal] = []
        // H1. throttle-hot: sluice-c <= 1.3x libevent-timers at 1k keys, <= 1.0x from 100k up.
        goals.append(
            ratioGoal(
                "throttle-hot: sluice-c ≤ 1.3× libevent-timers at 1k keys, ≤ 1.0× at 100k and more",
                pairs("throttle-hot", "sluice-c", "libevent-timers"),
                detail: "ns/op over libevent-timers' at each size"
            ) { $0.keys < 100_000 ? 1.3 : 1.0 })
        // H2. threads: sluice-c <= 1.0x dispatch-tuned at 1k keys, <= 0.7x at 100k (1 and 2 threads).
        goals.append(
            ratioGoal(
                "threads: sluice-c ≤ 1.0× dispatch-tuned at 1k keys, ≤ 0.7× at 100k (1 and 2 threads)",
                pairs("threads", "sluice-c", "dispatch-tuned", threads: [1, 2]),
                detail: "keys × threads: wall ns per call over dispatch-tuned's (both read the real clock per call)"
            ) { $0.keys < 100_000 ? 1.0 : 0.7 })
        // H3. two threads on disjoint keys >= 1.6x the throughput of one (sluice-c).
        do {
            let name = "threads: 2 threads ≥ 1.6× the throughput of 1 (sluice-c, disjoint keys)"
            let sizes = Set(rows.filter { $0.scenario == "threads" }.map(\.keys)).sorted()
            let speedups: [(Int, Double)] = sizes.compactMap { n in
                guard let one = row("threads", "sluice-c", keys: n, threads: 1).flatMap(Metric.value),
                    let two = row("threads", "sluice-c", keys: n, threads: 2).flatMap(Metric.value), two > 0
                else { return nil }
                return (n, one / two)
            }
            goals.append(
                speedups.isEmpty
                    ? Goal(name: name, measured: "not measured", holds: nil, detail: "")
                    : Goal(
                        name: name,
                        measured: speedups.map { "\(Format.keys($0.0)): \(Format.ratio($0.1))" }
                            .joined(separator: "; "),
                        holds: speedups.allSatisfy { $0.1 >= 1.6 },
                        detail: "calls per second on 2 threads over calls per second on 1"))
        }
        // H4. sluice-swift <= 1.3x sluice-c on throttle-hot, debounce-rearm, threads and fire, at every size.
        for scenario in ["throttle-hot", "debounce-rearm", "threads", "fire"] {
            goals.append(
                ratioGoal(
                    "\(scenario): sluice-swift ≤ 1.3× sluice-c at every size",
                    pairs(scenario, "sluice-swift", "sluice-c", threads: scenario == "threads" ? [1, 2] : [1]),
                    detail: "\(Metric.unit(scenario)) over sluice-c's"
                ) { _ in 1.3 })
        }
        // H5. lateness p99 of sluice-c and sluice-swift: <= dispatch-tuned's at 1k and 100k keys; <= 5 ms at 1M.
        for impl in ["sluice-c", "sluice-swift"] {
            goals.append(
                ratioGoal(
                    "lateness p99: \(impl) ≤ dispatch-tuned at 1k and 100k keys",
                    pairs("lateness", impl, "dispatch-tuned").filter { $0.keys <= 100_000 },
                    detail: "p99 over dispatch-tuned's"
                ) { _ in 1.0 })
            let name = "lateness p99 at 1M keys: \(impl) ≤ 5 ms"
            if let p99 = value("lateness", impl, 1_000_000) {
                goals.append(
                    Goal(
                        name: name, measured: "\(Format.us(p99)) µs", holds: p99 <= 5000,
                        detail: "p99 of delivery time minus deadline"))
            } else {
                goals.append(Goal(name: name, measured: "not measured", holds: nil, detail: ""))
            }
        }
        return goals
    }
}
