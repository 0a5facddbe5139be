import Sluice

/// The picture of a trace run: per key, the calls on one line and what
/// became of each value on the next — the marble diagram that tells
/// throttle from audit from debounce at a glance.
struct Timeline {
    /// What became of a call's value.
    enum Fate: Equatable {
        case emitted(at: UInt64)
        case dropped(at: UInt64)
        case discarded(at: UInt64)
        case unknown
    }

    struct Call {
        var time: UInt64
        var value: String
        var fate: Fate
    }

    struct Lane {
        var key: String
        var calls: [Call] = []
        /// Answers to `pending` steps.
        var pendingAnswers: [(time: UInt64, yes: Bool)] = []
    }

    let title: String
    private(set) var lanes: [Lane] = []
    /// The last instant of the run, in ms.
    private(set) var end: UInt64 = 0

    /// Matches each output line to its call: for each key, the earliest call
    /// of that value not yet accounted for.
    init(trace: Trace, output: [TraceOutput]) {
        title = "\(trace.policy)"
        var index: [String: Int] = [:]
        func lane(_ key: String) -> Int {
            if let i = index[key] { return i }
            lanes.append(Lane(key: key))
            index[key] = lanes.count - 1
            return lanes.count - 1
        }
        for step in trace.steps {
            end = max(end, step.time)
            if case let .call(key, value) = step.action {
                lanes[lane(key)].calls.append(Call(time: step.time, value: value, fate: .unknown))
            }
        }
        for line in output {
            end = max(end, line.time)
            let l = lane(line.key)
            let (value, fate): (String, Fate)
            switch line.kind {
            case let .emit(v): (value, fate) = (v, .emitted(at: line.time))
            case let .drop(v): (value, fate) = (v, .dropped(at: line.time))
            case let .discard(v): (value, fate) = (v, .discarded(at: line.time))
            case let .pending(yes):
                lanes[l].pendingAnswers.append((line.time, yes))
                continue
            }
            if let c = lanes[l].calls.firstIndex(where: { $0.value == value && $0.fate == .unknown }) {
                lanes[l].calls[c].fate = fate
            }
        }
    }

    // MARK: - Terminal

    /// Milliseconds per column (1, 2 or 5 times a power of ten) so that the
    /// run fits in `columns`.
    static func scale(span: UInt64, columns: Int) -> UInt64 {
        var power: UInt64 = 1
        while true {
            for step: UInt64 in [1, 2, 5] {
                let scale = step * power
                if span / scale < UInt64(columns) { return scale }
            }
            if power > UInt64.max / 100 { return .max }
            power *= 10
        }
    }

    /// The picture for a terminal: a time axis, then per key the calls
    /// (`in`), the emissions (`out`) and the values dropped or discarded
    /// (`drop`), each value drawn as its first character at its time (`*`
    /// where several meet in one column).
    func text(width: Int) -> String {
        let labelWidth = max(8, (lanes.map(\.key.count).max() ?? 0) + 6)
        let columns = max(10, width - labelWidth - 1)
        let scale = Self.scale(span: end + 1, columns: columns - 8)
        let used = Int(end / scale) + 2
        func pad(_ s: String) -> String {
            s.count >= labelWidth ? String(s.prefix(labelWidth - 1)) + " " : s + String(repeating: " ", count: labelWidth - s.count)
        }
        var lines: [String] = []
        lines.append(title)
        lines.append("1 column = \(scale) ms; in: calls, out: emissions, drop: values dropped (or discarded, '!')")
        // Axis: a label every 10 columns.
        var labels = [Character](repeating: " ", count: used + 20)
        var axis = [Character](repeating: "-", count: used)
        for col in stride(from: 0, to: used, by: 10) {
            axis[col] = "+"
            let text = Array(String(UInt64(col) * scale))
            if col + text.count <= labels.count, labels[col..<(col + text.count)].allSatisfy({ $0 == " " }) {
                labels.replaceSubrange(col..<(col + text.count), with: text)
            }
        }
        lines.append(pad("") + String(labels).trimmingTrailingSpaces())
        lines.append(pad("time") + String(axis))
        for lane in lanes {
            var calls = [Character](repeating: " ", count: used)
            var outs = [Character](repeating: " ", count: used)
            var drops = [Character](repeating: " ", count: used)
            func put(_ row: inout [Character], _ t: UInt64, _ c: Character) {
                let col = Int(t / scale)
                guard col < row.count else { return }
                row[col] = row[col] == " " ? c : "*"
            }
            var anyDrop = false
            let marks = Self.marks(for: lane)
            for (call, mark) in zip(lane.calls, marks.symbols) {
                put(&calls, call.time, mark)
                switch call.fate {
                case let .emitted(at): put(&outs, at, mark)
                case let .dropped(at):
                    put(&drops, at, mark)
                    anyDrop = true
                case let .discarded(at):
                    put(&drops, at, "!")
                    anyDrop = true
                case .unknown: break
                }
            }
            lines.append(pad("\(lane.key) in") + String(calls))
            lines.append(pad("\(lane.key) out") + String(outs))
            if anyDrop { lines.append(pad("\(lane.key) drop") + String(drops)) }
            if let legend = marks.legend { lines.append(pad("") + legend) }
        }
        return lines.map { $0.trimmingTrailingSpaces() }.joined(separator: "\n")
    }

    /// One character per call of a lane: the values' first characters when
    /// they tell the values apart, otherwise letters in call order with a
    /// legend (`a=v0 b=v50 …`).
    static func marks(for lane: Lane) -> (symbols: [Character], legend: String?) {
        let firsts = lane.calls.map { $0.value.first ?? "?" }
        var seen: [Character: String] = [:]
        let distinct = zip(firsts, lane.calls).allSatisfy { c, call in
            if let other = seen[c] { return other == call.value }
            seen[c] = call.value
            return true
        }
        if distinct { return (firsts, nil) }
        let alphabet = Array("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789")
        let symbols = lane.calls.indices.map { alphabet[$0 % alphabet.count] }
        let shown = zip(symbols, lane.calls).prefix(alphabet.count).map { "\($0)=\($1.value)" }
        var legend = shown.joined(separator: " ")
        if lane.calls.count > alphabet.count { legend += " … (letters repeat)" }
        return (symbols, legend)
    }

    // MARK: - SVG

    /// The same picture as SVG: per key, calls as circles on the upper line
    /// and emissions on the lower one, joined by a line from each call to its
    /// emission; a dropped value ends in a red cross at the time it was
    /// dropped, a discarded one in an orange one.
    func svg() -> String {
        let left = 90.0, right = 40.0, top = 80.0, laneHeight = 110.0
        let plotWidth = 900.0
        let span = Double(max(end, 1))
        let scale = Self.scale(span: end + 1, columns: 10)
        func x(_ t: UInt64) -> Double { left + Double(t) / span * plotWidth }
        let height = top + Double(lanes.count) * laneHeight + 50
        let width = left + plotWidth + right
        var s: [String] = []
        s.append("""
            <svg xmlns="http://www.w3.org/2000/svg" width="\(fmt(width))" height="\(fmt(height))" \
            viewBox="0 0 \(fmt(width)) \(fmt(height))" font-family="Helvetica, Arial, sans-serif" font-size="12">
            """)
        s.append("<rect width=\"100%\" height=\"100%\" fill=\"white\"/>")
        s.append("<text x=\"\(fmt(left))\" y=\"20\" font-size=\"14\" font-weight=\"bold\">\(escape(title))</text>")
        // Axis.
        s.append("<line x1=\"\(fmt(left))\" y1=\"40\" x2=\"\(fmt(left + plotWidth))\" y2=\"40\" stroke=\"#444\"/>")
        var tick: UInt64 = 0
        while tick <= end {
            let tx = x(tick)
            s.append("<line x1=\"\(fmt(tx))\" y1=\"36\" x2=\"\(fmt(tx))\" y2=\"44\" stroke=\"#444\"/>")
            s.append("<text x=\"\(fmt(tx))\" y=\"32\" text-anchor=\"middle\" fill=\"#444\">\(tick) ms</text>")
            s.append("<line x1=\"\(fmt(tx))\" y1=\"44\" x2=\"\(fmt(tx))\" y2=\"\(fmt(height - 40))\" stroke=\"#eee\"/>")
            let (next, overflow) = tick.addingReportingOverflow(scale)
            if overflow { break }
            tick = next
        }
        for (i, lane) in lanes.enumerated() {
            let yIn = top + Double(i) * laneHeight + 15
            let yOut = yIn + 50
            s.append("<text x=\"10\" y=\"\(fmt(yIn + 4))\" font-weight=\"bold\">\(escape(lane.key))</text>")
            s.append("<text x=\"10\" y=\"\(fmt(yIn + 18))\" fill=\"#888\">calls</text>")
            s.append("<text x=\"10\" y=\"\(fmt(yOut + 4))\" fill=\"#888\">emissions</text>")
            for y in [yIn, yOut] {
                s.append("<line x1=\"\(fmt(left))\" y1=\"\(fmt(y))\" x2=\"\(fmt(left + plotWidth))\" y2=\"\(fmt(y))\" stroke=\"#bbb\"/>")
            }
            for call in lane.calls {
                let cx = x(call.time)
                let label = escape(call.value.count > 12 ? String(call.value.prefix(11)) + "…" : call.value)
                switch call.fate {
                case let .emitted(at):
                    let ex = x(at)
                    s.append("<line x1=\"\(fmt(cx))\" y1=\"\(fmt(yIn))\" x2=\"\(fmt(ex))\" y2=\"\(fmt(yOut))\" stroke=\"#2a7\" stroke-width=\"1.5\"/>")
                    s.append("<circle cx=\"\(fmt(ex))\" cy=\"\(fmt(yOut))\" r=\"6\" fill=\"#2a7\"><title>emit \(escape(call.value)) at \(at) ms</title></circle>")
                    s.append("<text x=\"\(fmt(ex))\" y=\"\(fmt(yOut + 20))\" text-anchor=\"middle\" fill=\"#2a7\">\(label)</text>")
                case let .dropped(at), let .discarded(at):
                    let color = if case .dropped = call.fate { "#d33" } else { "#e90" }
                    let dx = x(at)
                    s.append("<line x1=\"\(fmt(cx))\" y1=\"\(fmt(yIn))\" x2=\"\(fmt(dx))\" y2=\"\(fmt(yIn))\" stroke=\"\(color)\" stroke-dasharray=\"3 3\"/>")
                    s.append("<path d=\"M\(fmt(dx - 5)) \(fmt(yIn + 10))l10 10m0 -10l-10 10\" stroke=\"\(color)\" stroke-width=\"2\"><title>\(call.fate == .dropped(at: at) ? "drop" : "discard") \(escape(call.value)) at \(at) ms</title></path>")
                case .unknown:
                    break
                }
                s.append("<circle cx=\"\(fmt(cx))\" cy=\"\(fmt(yIn))\" r=\"6\" fill=\"white\" stroke=\"#246\" stroke-width=\"1.5\"><title>call \(escape(call.value)) at \(call.time) ms</title></circle>")
                s.append("<text x=\"\(fmt(cx))\" y=\"\(fmt(yIn - 11))\" text-anchor=\"middle\" fill=\"#246\">\(label)</text>")
            }
        }
        let legendY = height - 15
        s.append("""
            <text x="\(fmt(left))" y="\(fmt(legendY))" fill="#444">○ call   \
            <tspan fill="#2a7">● emission</tspan>   <tspan fill="#d33">✕ dropped</tspan>   \
            <tspan fill="#e90">✕ discarded</tspan></text>
            """)
        s.append("</svg>")
        return s.joined(separator: "\n") + "\n"
    }

    private func fmt(_ v: Double) -> String {
        let rounded = (v * 10).rounded() / 10
        return rounded == rounded.rounded() ? String(Int(rounded)) : String(rounded)
    }

    private func escape(_ text: String) -> String {
        var out = ""
        for c in text {
            switch c {
            case "&": out += "&amp;"
            case "<": out += "&lt;"
            case ">": out += "&gt;"
            case "\"": out += "&quot;"
            default: out.append(c)
            }
        }
        return out
    }
}

extension String {
    fileprivate func trimmingTrailingSpaces() -> String {
        var s = self
        while s.last == " " { s.removeLast() }
        return s
    }
}
