import Foundation

/// A small SVG line chart with logarithmic or linear axes (no dependencies).
public struct LineChart {
    public struct Series {
        public var name: String
        public var color: String
        public var points: [(x: Double, y: Double)]
        public var dashed = false
    }

    public var title: String
    public var xLabel: String
    public var yLabel: String
    public var series: [Series]
    public var logX = true
    public var logY = true
    /// Labels for x tick values (default: the value).
    public var xTickLabel: (Double) -> String = { Format.keys(Int($0)) }
    public var xTicks: [Double]? = nil

    let width = 720.0, height = 400.0
    let left = 70.0, right = 170.0, top = 40.0, bottom = 50.0

    public init(title: String, xLabel: String, yLabel: String, series: [Series]) {
        self.title = title
        self.xLabel = xLabel
        self.yLabel = yLabel
        self.series = series
    }

    static func esc(_ s: String) -> String {
        s.replacingOccurrences(of: "&", with: "&amp;").replacingOccurrences(of: "<", with: "&lt;")
            .replacingOccurrences(of: ">", with: "&gt;")
    }

    public func svg() -> String {
        let pts = series.flatMap(\.points).filter { $0.y.isFinite && (!logY || $0.y > 0) && (!logX || $0.x > 0) }
        guard !pts.isEmpty else {
            return
                "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"\(Int(width))\" height=\"60\"><text x=\"10\" y=\"30\">\(Self.esc(title)): no data</text></svg>\n"
        }
        func t(_ v: Double, _ log: Bool) -> Double { log ? log10(v) : v }
        var x0 = pts.map { t($0.x, logX) }.min()!, x1 = pts.map { t($0.x, logX) }.max()!
        var y0 = pts.map { t($0.y, logY) }.min()!, y1 = pts.map { t($0.y, logY) }.max()!
        if logY {
            y0 = floor(y0)
            y1 = ceil(y1)
            if y1 == y0 { y1 += 1 }
        } else {
            y0 = min(0, y0)
            y1 = y1 * 1.1
            if y1 == y0 { y1 = y0 + 1 }
        }
        if x1 == x0 {
            x0 -= 0.5
            x1 += 0.5
        }
        let pw = width - left - right, ph = height - top - bottom
        func px(_ x: Double) -> Double { left + (t(x, logX) - x0) / (x1 - x0) * pw }
        func py(_ y: Double) -> Double { top + ph - (t(y, logY) - y0) / (y1 - y0) * ph }
        var s = """
            <svg xmlns="http://www.w3.org/2000/svg" width="\(Int(width))" height="\(Int(height))" viewBox="0 0 \(Int(width)) \(Int(height))" font-family="Helvetica, Arial, sans-serif" font-size="12">
            <rect width="100%" height="100%" fill="white"/>
            <text x="\(left)" y="22" font-size="15" font-weight="bold">\(Self.esc(title))</text>

            """
        // y grid and labels
        if logY {
            for e in Int(y0)...Int(y1) {
                let v = pow(10, Double(e))
                let y = py(v)
                s += "<line x1=\"\(left)\" y1=\"\(f(y))\" x2=\"\(left + pw)\" y2=\"\(f(y))\" stroke=\"#ddd\"/>\n"
                s += "<text x=\"\(left - 6)\" y=\"\(f(y + 4))\" text-anchor=\"end\">\(Self.esc(Self.short(v)))</text>\n"
                if e < Int(y1) {
                    for m in [2.0, 5.0] {
                        let yy = py(v * m)
                        s +=
                            "<line x1=\"\(left)\" y1=\"\(f(yy))\" x2=\"\(left + pw)\" y2=\"\(f(yy))\" stroke=\"#f2f2f2\"/>\n"
                    }
                }
            }
        } else {
            let step = Self.niceStep((y1 - y0) / 5)
            var v = (y0 / step).rounded(.down) * step
            while v <= y1 + 1e-9 {
                let y = py(v)
                s += "<line x1=\"\(left)\" y1=\"\(f(y))\" x2=\"\(left + pw)\" y2=\"\(f(y))\" stroke=\"#ddd\"/>\n"
                s += "<text x=\"\(left - 6)\" y=\"\(f(y + 4))\" text-anchor=\"end\">\(Self.esc(Self.short(v)))</text>\n"
                v += step
            }
        }
        // x ticks
        let ticks = xTicks ?? Array(Set(pts.map(\.x))).sorted()
        for v in ticks {
            let x = px(v)
            s += "<line x1=\"\(f(x))\" y1=\"\(top)\" x2=\"\(f(x))\" y2=\"\(top + ph)\" stroke=\"#eee\"/>\n"
            s +=
                "<text x=\"\(f(x))\" y=\"\(f(top + ph + 18))\" text-anchor=\"middle\">\(Self.esc(xTickLabel(v)))</text>\n"
        }
        s += "<rect x=\"\(left)\" y=\"\(top)\" width=\"\(pw)\" height=\"\(ph)\" fill=\"none\" stroke=\"#888\"/>\n"
        s +=
            "<text x=\"\(f(left + pw / 2))\" y=\"\(f(height - 10))\" text-anchor=\"middle\">\(Self.esc(xLabel))</text>\n"
        s +=
            "<text transform=\"translate(16,\(f(top + ph / 2))) rotate(-90)\" text-anchor=\"middle\">\(Self.esc(yLabel))</text>\n"
        // series
        for (i, se) in series.enumerated() {
            let p = se.points.filter { $0.y.isFinite && (!logY || $0.y > 0) && (!logX || $0.x > 0) }
                .sorted { $0.x < $1.x }
            guard !p.isEmpty else { continue }
            let path = p.map { "\(f(px($0.x))),\(f(py($0.y)))" }.joined(separator: " ")
            s +=
                "<polyline fill=\"none\" stroke=\"\(se.color)\" stroke-width=\"2.2\"\(se.dashed ? " stroke-dasharray=\"6 4\"" : "") points=\"\(path)\"/>\n"
            for q in p {
                s += "<circle cx=\"\(f(px(q.x)))\" cy=\"\(f(py(q.y)))\" r=\"3.2\" fill=\"\(se.color)\"/>\n"
            }
            let ly = top + 14 + Double(i) * 20
            s +=
                "<line x1=\"\(left + pw + 14)\" y1=\"\(f(ly - 4))\" x2=\"\(left + pw + 38)\" y2=\"\(f(ly - 4))\" stroke=\"\(se.color)\" stroke-width=\"2.2\"\(se.dashed ? " stroke-dasharray=\"6 4\"" : "")/>\n"
            s += "<text x=\"\(left + pw + 44)\" y=\"\(f(ly))\">\(Self.esc(se.name))</text>\n"
        }
        s += "</svg>\n"
        return s
    }

    func f(_ x: Double) -> String { String(format: "%.1f", x) }

    static func niceStep(_ raw: Double) -> Double {
        guard raw > 0 else { return 1 }
        let e = pow(10, floor(log10(raw)))
        for m in [1.0, 2.0, 5.0, 10.0] where raw <= m * e { return m * e }
        return 10 * e
    }

    static func short(_ v: Double) -> String {
        if v >= 1e9 { return String(format: "%gG", v / 1e9) }
        if v >= 1e6 { return String(format: "%gM", v / 1e6) }
        if v >= 1e3 { return String(format: "%gk", v / 1e3) }
        return String(format: "%g", v)
    }
}

/// A horizontal bar chart (memory per key, and the like).
public struct BarChart {
    public var title: String
    public var unit: String
    /// Groups (e.g. key counts), each with one bar per implementation.
    public var groups: [(label: String, bars: [(name: String, color: String, value: Double)])]

    public init(
        title: String, unit: String, groups: [(label: String, bars: [(name: String, color: String, value: Double)])]
    ) {
        self.title = title
        self.unit = unit
        self.groups = groups
    }

    public func svg() -> String {
        let barH = 14.0, gap = 10.0, left = 190.0, width = 720.0
        let maxV = groups.flatMap { $0.bars.map(\.value) }.filter(\.isFinite).max() ?? 1
        let rowsCount = groups.reduce(0) { $0 + $1.bars.count }
        let height = 50 + Double(rowsCount) * (barH + 3) + Double(groups.count) * (gap + 16) + 10
        let pw = width - left - 90
        var s = """
            <svg xmlns="http://www.w3.org/2000/svg" width="\(Int(width))" height="\(Int(height))" viewBox="0 0 \(Int(width)) \(Int(height))" font-family="Helvetica, Arial, sans-serif" font-size="12">
            <rect width="100%" height="100%" fill="white"/>
            <text x="10" y="22" font-size="15" font-weight="bold">\(LineChart.esc(title))</text>

            """
        var y = 44.0
        for g in groups {
            s +=
                "<text x=\"10\" y=\"\(String(format: "%.1f", y + 10))\" font-weight=\"bold\">\(LineChart.esc(g.label))</text>\n"
            y += 16
            for b in g.bars {
                let w = b.value.isFinite && maxV > 0 ? max(1, b.value / maxV * pw) : 0
                s +=
                    "<text x=\"\(left - 8)\" y=\"\(String(format: "%.1f", y + 11))\" text-anchor=\"end\">\(LineChart.esc(b.name))</text>\n"
                s +=
                    "<rect x=\"\(left)\" y=\"\(String(format: "%.1f", y))\" width=\"\(String(format: "%.1f", w))\" height=\"\(barH)\" fill=\"\(b.color)\"/>\n"
                s +=
                    "<text x=\"\(String(format: "%.1f", left + w + 6))\" y=\"\(String(format: "%.1f", y + 11))\">\(LineChart.esc(Format.bytes(b.value) + " " + unit))</text>\n"
                y += barH + 3
            }
            y += gap
        }
        s += "</svg>\n"
        return s
    }
}
