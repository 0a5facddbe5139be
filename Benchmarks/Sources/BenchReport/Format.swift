import Foundation

/// Number formatting shared by the terminal table and the markdown report.
public enum Format {
    /// 1000 → "1k", 100000 → "100k", 1000000 → "1M".
    public static func keys(_ n: Int) -> String {
        if n >= 1_000_000 && n % 1_000_000 == 0 { return "\(n / 1_000_000)M" }
        if n >= 1000 && n % 1000 == 0 { return "\(n / 1000)k" }
        return "\(n)"
    }

    /// A time in ns with 3 significant digits: "12.3", "1234", "12.3k".
    public static func ns(_ x: Double?) -> String {
        guard let x, x.isFinite else { return "–" }
        if x >= 100_000 { return String(format: "%.0fk", x / 1000) }
        if x >= 1000 { return String(format: "%.0f", x) }
        if x >= 100 { return String(format: "%.0f", x) }
        if x >= 10 { return String(format: "%.1f", x) }
        return String(format: "%.2f", x)
    }

    public static func bytes(_ x: Double?) -> String {
        guard let x, x.isFinite else { return "–" }
        if abs(x) >= 100 { return String(format: "%.0f", x) }
        return String(format: "%.1f", x)
    }

    public static func mib(_ x: Double?) -> String {
        guard let x, x.isFinite else { return "–" }
        return String(format: "%.1f MiB", x / 1_048_576)
    }

    public static func us(_ x: Double?) -> String {
        guard let x, x.isFinite else { return "–" }
        if x >= 10_000 { return String(format: "%.0f", x) }
        if x >= 100 { return String(format: "%.0f", x) }
        return String(format: "%.1f", x)
    }

    /// A ratio: "1.00×", "31×", "0.21×".
    public static func ratio(_ x: Double?) -> String {
        guard let x, x.isFinite, x > 0 else { return "–" }
        if x >= 100 { return String(format: "%.0f×", x) }
        if x >= 10 { return String(format: "%.1f×", x) }
        return String(format: "%.2f×", x)
    }

    public static func pad(_ s: String, _ width: Int, right: Bool = false) -> String {
        let n = s.count
        if n >= width { return s }
        let fill = String(repeating: " ", count: width - n)
        return right ? fill + s : s + fill
    }
}

/// The figure a row is compared by, and its unit.
public enum Metric {
    /// The value compared between implementations: ns per op, bytes per key,
    /// or p99 lateness (µs).
    public static func value(_ r: Row) -> Double? {
        switch r.scenario {
        case "memory": return r.bytes_per_key
        case "lateness": return r.lateness_us?.p99
        default: return r.ns_per_op
        }
    }

    public static func unit(_ scenario: String) -> String {
        switch scenario {
        case "memory": return "bytes/key"
        case "lateness": return "p99 µs"
        case "fire": return "ns/emission"
        default: return "ns/op"
        }
    }
}

extension BenchResults {
    /// The row of an implementation in the same scenario, size and threads.
    public func row(_ scenario: String, _ impl: String, keys: Int, threads: Int = 1) -> Row? {
        rows.first { $0.scenario == scenario && $0.impl == impl && $0.keys == keys && $0.threads == threads }
    }

    /// `row`'s value divided by the same figure of `base` (same scenario, size, threads).
    public func ratio(_ row: Row, to base: String) -> Double? {
        guard let b = self.row(row.scenario, base, keys: row.keys, threads: row.threads),
            let x = Metric.value(row), let y = Metric.value(b), y > 0
        else { return nil }
        return x / y
    }

    /// The terminal table: every row with its ratio to sluice-c and sluice-swift.
    public func table() -> String {
        var out = ""
        let header = [
            Format.pad("scenario", 15), Format.pad("keys", 5, right: true), Format.pad("thr", 4, right: true),
            "  " + Format.pad("impl", 16), Format.pad("value", 10, right: true), " " + Format.pad("unit", 12),
            Format.pad("÷sluice-c", 10, right: true), Format.pad("÷sluice-swift", 14, right: true), "  extra",
        ].joined()
        out += header + "\n" + String(repeating: "─", count: header.count + 10) + "\n"
        var lastGroup = ""
        for scenario in Names.scenarios {
            for r in rows where r.scenario == scenario {
                let group = "\(r.scenario)/\(r.keys)/\(r.threads)"
                if !lastGroup.isEmpty && group != lastGroup { out += "\n" }
                lastGroup = group
                var extra: [String] = []
                switch r.scenario {
                case "memory":
                    extra.append("idle \(Format.bytes(r.idle_bytes_per_key)) B/key")
                case "lateness":
                    if let l = r.lateness_us {
                        extra.append("p50 \(Format.us(l.p50)) µs, max \(Format.us(l.max)) µs")
                    }
                    if let e = r.early, e > 0 { extra.append("EARLY \(e)") }
                case "spray":
                    extra.append("peak +\(Format.mib(r.peak_rss_bytes)), refused \(r.refused ?? 0)")
                case "threads":
                    if let c = r.cpu_ns_per_op { extra.append("cpu \(Format.ns(c)) ns/op") }
                case "quotas":
                    if let a = r.admitted, r.ops > 0 {
                        extra.append(String(format: "admitted %.1f %%", 100 * Double(a) / Double(r.ops)))
                    }
                    if let b = r.bytes_per_key { extra.append("\(Format.bytes(b)) B/key") }
                    if r.threads > 1, let c = r.cpu_ns_per_op { extra.append("cpu \(Format.ns(c)) ns/op") }
                default:
                    if let w = r.wall_ns_per_op { extra.append("wall \(Format.ns(w)) ns/op") }
                }
                if let n = r.note { extra.append(n) }
                let value: String =
                    switch r.scenario {
                    case "memory": Format.bytes(Metric.value(r))
                    case "lateness": Format.us(Metric.value(r))
                    default: Format.ns(Metric.value(r))
                    }
                out +=
                    [
                        Format.pad(r.scenario, 15), Format.pad(Format.keys(r.keys), 5, right: true),
                        Format.pad("\(r.threads)", 4, right: true), "  " + Format.pad(r.impl, 16),
                        Format.pad(value, 10, right: true), " " + Format.pad(Metric.unit(r.scenario), 12),
                        Format.pad(Format.ratio(ratio(r, to: "sluice-c")), 10, right: true),
                        Format.pad(Format.ratio(ratio(r, to: "sluice-swift")), 14, right: true),
                        "  " + extra.joined(separator: "; "),
                    ].joined() + "\n"
            }
        }
        return out
    }
}
