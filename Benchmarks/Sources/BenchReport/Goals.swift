/// The goals the suite makes visible (issue 5), each checked on ratios taken
/// inside one run.
public struct Goal: Sendable {
    public var name: String
    /// The measured ratio, in the direction of the goal ("31× faster").
    public var measured: String
    public var holds: Bool?
    public var detail: String
}

extension BenchResults {
    /// The largest key count at which every listed implementation has a row.
    func largestCommon(_ scenario: String, _ impls: [String], threads: Int = 1) -> Int? {
        let sizes = Set(rows.filter { $0.scenario == scenario && $0.threads == threads }.map(\.keys))
        return sizes.filter { k in
            impls.allSatisfy { row(scenario, $0, keys: k, threads: threads).flatMap(Metric.value) != nil }
        }
        .max()
    }

    func value(_ scenario: String, _ impl: String, _ keys: Int) -> Double? {
        row(scenario, impl, keys: keys).flatMap(Metric.value)
    }

    public func goals() -> [Goal] {
        var goals: [Goal] = []
        let k = Format.keys

        // 1. debounce-rearm at 100k: sluice-swift >= 30x faster than both Dispatch baselines.
        do {
            let n = 100_000
            if let s = value("debounce-rearm", "sluice-swift", n),
                let a = value("debounce-rearm", "dispatch-naive", n),
                let b = value("debounce-rearm", "dispatch-tuned", n)
            {
                let ra = a / s, rb = b / s
                goals.append(
                    Goal(
                        name: "debounce-rearm at 100k keys: sluice-swift ≥ 30× faster than both Dispatch baselines",
                        measured: "\(Format.ratio(ra)) vs dispatch-naive, \(Format.ratio(rb)) vs dispatch-tuned",
                        holds: ra >= 30 && rb >= 30,
                        detail:
                            "sluice-swift \(Format.ns(s)) ns/op; dispatch-naive \(Format.ns(a)); dispatch-tuned \(Format.ns(b))"
                    ))
            } else {
                goals.append(
                    Goal(
                        name: "debounce-rearm at 100k keys: sluice-swift ≥ 30× faster than both Dispatch baselines",
                        measured: "not measured", holds: nil, detail: ""))
            }
        }

        // 2. memory: sluice-swift <= 1/5 of dispatch-tuned bytes per pending key.
        if let n = largestCommon("memory", ["sluice-swift", "dispatch-tuned"]),
            let s = value("memory", "sluice-swift", n), let d = value("memory", "dispatch-tuned", n)
        {
            goals.append(
                Goal(
                    name: "memory: sluice-swift ≤ 1/5 of dispatch-tuned bytes per pending key",
                    measured: "1/\(String(format: "%.1f", d / s)) at \(k(n)) keys",
                    holds: s * 5 <= d,
                    detail: "sluice-swift \(Format.bytes(s)) B/key; dispatch-tuned \(Format.bytes(d)) B/key"))
        } else {
            goals.append(
                Goal(
                    name: "memory: sluice-swift ≤ 1/5 of dispatch-tuned bytes per pending key",
                    measured: "not measured", holds: nil, detail: ""))
        }

        // 3. fire: sluice-c >= 10x faster per delivered emission than libevent-timers at the largest size.
        if let n = largestCommon("fire", ["sluice-c", "libevent-timers"]),
            let s = value("fire", "sluice-c", n), let l = value("fire", "libevent-timers", n)
        {
            goals.append(
                Goal(
                    name: "fire: sluice-c ≥ 10× faster per delivered emission than libevent-timers at the largest size",
                    measured: "\(Format.ratio(l / s)) at \(k(n)) keys",
                    holds: l / s >= 10,
                    detail: "sluice-c \(Format.ns(s)) ns/emission; libevent-timers \(Format.ns(l))"))
        } else {
            goals.append(
                Goal(
                    name: "fire: sluice-c ≥ 10× faster per delivered emission than libevent-timers",
                    measured: "not measured", holds: nil, detail: ""))
        }

        // 4. lateness p99: sluice-swift <= dispatch-tuned (every common size).
        do {
            let sizes = Set(rows.filter { $0.scenario == "lateness" }.map(\.keys)).sorted().filter {
                value("lateness", "sluice-swift", $0) != nil && value("lateness", "dispatch-tuned", $0) != nil
            }
            if sizes.isEmpty {
                goals.append(
                    Goal(
                        name: "lateness p99: sluice-swift ≤ dispatch-tuned", measured: "not measured",
                        holds: nil, detail: ""))
            } else {
                let parts = sizes.map { n -> (String, Bool) in
                    let s = value("lateness", "sluice-swift", n)!, d = value("lateness", "dispatch-tuned", n)!
                    return ("\(k(n)): \(Format.us(s)) vs \(Format.us(d)) µs", s <= d)
                }
                goals.append(
                    Goal(
                        name: "lateness p99: sluice-swift ≤ dispatch-tuned",
                        measured: parts.map(\.0).joined(separator: "; "),
                        holds: parts.allSatisfy(\.1),
                        detail: "p99 of delivery time minus deadline"))
            }
        }

        // 5a. throttle-hot at the largest size: sluice-c <= 2.5x floor.
        if let n = largestCommon("throttle-hot", ["sluice-c", "floor"]),
            let s = value("throttle-hot", "sluice-c", n), let f = value("throttle-hot", "floor", n)
        {
            goals.append(
                Goal(
                    name: "throttle-hot at the largest size: sluice-c ≤ 2.5× floor",
                    measured: "\(Format.ratio(s / f)) at \(k(n)) keys",
                    holds: s <= 2.5 * f,
                    detail: "sluice-c \(Format.ns(s)) ns/op; floor \(Format.ns(f))"))
        } else {
            goals.append(
                Goal(
                    name: "throttle-hot at the largest size: sluice-c ≤ 2.5× floor", measured: "not measured",
                    holds: nil, detail: ""))
        }

        // 5b. throttle-hot at 1k keys: sluice-swift <= 1.5x sluice-c.
        if let s = value("throttle-hot", "sluice-swift", 1000), let c = value("throttle-hot", "sluice-c", 1000) {
            goals.append(
                Goal(
                    name: "throttle-hot at 1k keys: sluice-swift ≤ 1.5× sluice-c",
                    measured: Format.ratio(s / c),
                    holds: s <= 1.5 * c,
                    detail: "sluice-swift \(Format.ns(s)) ns/op; sluice-c \(Format.ns(c))"))
        } else {
            goals.append(
                Goal(
                    name: "throttle-hot at 1k keys: sluice-swift ≤ 1.5× sluice-c", measured: "not measured",
                    holds: nil, detail: ""))
        }
        goals += hotPathGoals()
        goals += coarseClockGoals()
        goals += batchGoals()
        goals += quotasGoals()
        goals += fleetGoals()
        return goals
    }

    /// The floor's "independent accesses" figure (ns per access when the CPU
    /// overlaps the misses), kept in the floor row's note.
    func floorIndependent(_ scenario: String, _ keys: Int) -> Double? {
        guard let note = row(scenario, "floor", keys: keys)?.note,
            let r = note.range(of: "overlapped by the CPU: ")
        else { return nil }
        return Double(note[r.upperBound...].prefix { $0.isNumber || $0 == "." })
    }

    /// Goals of batched submission (issue 11).
    func batchGoals() -> [Goal] {
        var goals: [Goal] = []
        // B1. throttle-hot at 1M keys: sluice-c-batch <= 5x the floor's independent accesses.
        let b1 = "throttle-hot at 1M keys: sluice-c-batch ≤ 5× floor (independent accesses)"
        if let c = value("throttle-hot", "sluice-c-batch", 1_000_000),
            let f = floorIndependent("throttle-hot", 1_000_000)
        {
            goals.append(
                Goal(
                    name: b1, measured: Format.ratio(c / f), holds: c <= 5 * f,
                    detail: "sluice-c-batch \(Format.ns(c)) ns/op; floor independent \(Format.ns(f)) ns"))
        } else {
            goals.append(Goal(name: b1, measured: "not measured", holds: nil, detail: ""))
        }
        // B2. sluice-swift-batch <= 1.3x sluice-c-batch (throttle-hot and debounce-rearm, every common size).
        for scenario in ["throttle-hot", "debounce-rearm"] {
            let name = "\(scenario): sluice-swift-batch ≤ 1.3× sluice-c-batch"
            let sizes = Set(rows.filter { $0.scenario == scenario }.map(\.keys)).sorted().filter {
                value(scenario, "sluice-swift-batch", $0) != nil && value(scenario, "sluice-c-batch", $0) != nil
            }
            if sizes.isEmpty {
                goals.append(Goal(name: name, measured: "not measured", holds: nil, detail: ""))
                continue
            }
            let parts = sizes.map { n -> (String, Bool) in
                let s = value(scenario, "sluice-swift-batch", n)!, c = value(scenario, "sluice-c-batch", n)!
                return ("\(Format.keys(n)): \(Format.ratio(s / c))", s <= 1.3 * c)
            }
            goals.append(
                Goal(
                    name: name, measured: parts.map(\.0).joined(separator: "; "), holds: parts.allSatisfy(\.1),
                    detail: "ns/op ratio at each size"))
        }
        // B3. debounce-rearm at 100k keys: sluice-swift-batch >= 30x faster than dispatch-tuned.
        let b3 = "debounce-rearm at 100k keys: sluice-swift-batch ≥ 30× faster than dispatch-tuned"
        if let s = value("debounce-rearm", "sluice-swift-batch", 100_000),
            let d = value("debounce-rearm", "dispatch-tuned", 100_000)
        {
            goals.append(
                Goal(
                    name: b3, measured: Format.ratio(d / s), holds: d / s >= 30,
                    detail: "sluice-swift-batch \(Format.ns(s)) ns/op; dispatch-tuned \(Format.ns(d))"))
        } else {
            goals.append(Goal(name: b3, measured: "not measured", holds: nil, detail: ""))
        }
        return goals
    }

    public func goalsText() -> String {
        goals().map { g in
            let mark = g.holds.map { $0 ? "HOLDS " : "MISSED" } ?? "  –   "
            return "\(mark)  \(g.name)\n        \(g.measured)\(g.detail.isEmpty ? "" : " (\(g.detail))")"
        }.joined(separator: "\n")
    }
}

extension BenchResults {
    /// threads with the coarse clock (SLUICE_MT_COARSE_CLOCK): sluice-c-coarse
    /// <= 0.5x dispatch-tuned (which reads DispatchTime.now() per call), at
    /// each size and thread count both have.
    func coarseClockGoals() -> [Goal] {
        let name = "threads with the coarse clock: sluice-c-coarse ≤ 0.5× dispatch-tuned"
        var parts: [String] = [], holds = true, any = false
        for threads in [1, 2] {
            let sizes = Set(rows.filter { $0.scenario == "threads" && $0.threads == threads }.map(\.keys)).sorted()
            for n in sizes {
                guard let c = row("threads", "sluice-c-coarse", keys: n, threads: threads).flatMap(Metric.value),
                    let d = row("threads", "dispatch-tuned", keys: n, threads: threads).flatMap(Metric.value), d > 0
                else { continue }
                any = true
                holds = holds && c / d <= 0.5
                var part = "\(Format.keys(n)) keys, \(threads) thread\(threads == 1 ? "" : "s"): \(Format.ratio(c / d))"
                if let p = row("threads", "sluice-c", keys: n, threads: threads).flatMap(Metric.value) {
                    part += " (precise clock \(Format.ratio(p / d)))"
                }
                parts.append(part)
            }
        }
        guard any else { return [Goal(name: name, measured: "not measured", holds: nil, detail: "")] }
        return [
            Goal(
                name: name, measured: parts.joined(separator: "; "), holds: holds,
                detail: "ns per call over dispatch-tuned's, same keys and threads")
        ]
    }
}

extension BenchResults {
    /// Goals of the quotas scenario (three quotas per key on one plan): the
    /// cost of three quotas against sluice-c's own single quota, against a
    /// dispatch-tuned that keeps three GCRA states per key, and the memory.
    func quotasGoals() -> [Goal] {
        var goals: [Goal] = []
        // Q1. sluice-c with three quotas <= 1.6x sluice-c with one (every size and thread count).
        goals.append(
            ratioGoal(
                "quotas: sluice-c (three quotas) ≤ 1.6× its own single-quota time (sluice-c-1q)",
                pairs("quotas", "sluice-c", "sluice-c-1q", threads: [1, 2]),
                detail:
                    "keys × threads: ns per call over sluice-c-1q's (sluice_rate() with the first quota, sluice_limiter_submit_u64 / sluice_mt_submit_u64)"
            ) { _ in 1.6 })
        // Q2. sluice-c <= 0.5x dispatch-tuned with three GCRA states per key.
        goals.append(
            ratioGoal(
                "quotas: sluice-c ≤ 0.5× dispatch-tuned (three GCRA states per key)",
                pairs("quotas", "sluice-c", "dispatch-tuned", threads: [1, 2]),
                detail: "keys × threads: ns per call over dispatch-tuned's"
            ) { _ in 0.5 })
        // Q3. memory: sluice-c <= 96 B per key with three quotas, at 1M keys (a full run).
        let q3 = "quotas memory at 1M keys: sluice-c ≤ 96 B per key with three quotas"
        let n = 1_000_000
        if let b = row("quotas", "sluice-c", keys: n)?.bytes_per_key {
            var detail = "RSS growth over the setup of every key, one thread"
            let others = ["sluice-c-1q", "dispatch-tuned"].compactMap { impl in
                row("quotas", impl, keys: n)?.bytes_per_key.map { "\(impl) \(Format.bytes($0)) B/key" }
            }
            if !others.isEmpty { detail += "; " + others.joined(separator: ", ") }
            goals.append(Goal(name: q3, measured: "\(Format.bytes(b)) B/key", holds: b <= 96, detail: detail))
        } else {
            goals.append(Goal(name: q3, measured: "not measured", holds: nil, detail: ""))
        }
        return goals
    }
}
