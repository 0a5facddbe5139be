import Sluice

/// The picture of a trace run: per key, the calls on one line and what
/// became of each value on the next — the marble diagram that tells
/// throttle from audit from debounce at a glance.
struct Timeline {
    /// What became of a call's value.
    enum Fate: Equatable {
        case emitted(at: UInt64)
        /// Dropped at `at`; `by` is the time of the call that took its place, if any.
        case dropped(at: UInt64, by: UInt64?)
        case discarded(at: UInt64)
        case unknown
    }

    struct Call {
        var time: UInt64
        var value: String
        /// The plan it was decided under (a trace with plans), or `nil`.
        var plan: String? = nil
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

    /// Matches each output line to its call by the call's step (the trace
    /// library names it), so two calls with the same value never mix up.
    init(trace: Trace, output: [TraceLine]) {
        // Under plans, every quota of every plan: the first policy alone
        // would hide all but one quota.
        title =
            trace.plans.isEmpty
            ? "\(trace.policy)"
            : "plans: " + trace.plans.map(\.description).joined(separator: "; ")
        // A call's plan is worth showing only when there is a choice.
        let manyPlans = trace.plans.count > 1
        var index: [String: Int] = [:]
        /// Step index of a call -> (lane, call index in the lane).
        var callAt: [Int: (lane: Int, call: Int)] = [:]
        func lane(_ key: String) -> Int {
            if let i = index[key] { return i }
            lanes.append(Lane(key: key))
            index[key] = lanes.count - 1
            return lanes.count - 1
        }
        for (stepIndex, step) in trace.steps.enumerated() {
            end = max(end, step.time)
            if case let .call(value, _) = step.verb {
                let l = lane(step.key)
                lanes[l].calls.append(
                    Call(time: step.time, value: value, plan: manyPlans ? step.plan : nil, fate: .unknown))
                callAt[stepIndex] = (l, lanes[l].calls.count - 1)
            }
        }
        for line in output {
            end = max(end, line.time)
            switch line.kind {
            case let .pending(yes):
                lanes[lane(line.key)].pendingAnswers.append((line.time, yes))
                continue
            case .quota:
                continue
            default:
                break
            }
            guard let (l, c) = callAt[line.step] else { continue }
            switch line.kind {
            case .emit: lanes[l].calls[c].fate = .emitted(at: line.time)
            case .drop:
                let by = line.successorStep.flatMap { trace.steps.indices.contains($0) ? trace.steps[$0].time : nil }
                lanes[l].calls[c].fate = .dropped(at: line.time, by: by)
            default: lanes[l].calls[c].fate = .discarded(at: line.time)
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
    /// (`drop`, under the call of the value), each value drawn as its
    /// first character at its time (`*` where several meet in one column).
    func text(width: Int) -> String {
        let labelWidth = max(8, (lanes.map(\.key.count).max() ?? 0) + 6)
        let columns = max(10, width - labelWidth - 1)
        let scale = Self.scale(span: end + 1, columns: columns - 8)
        let used = Int(end / scale) + 2
        func pad(_ s: String) -> String {
            s.count >= labelWidth
                ? String(s.prefix(labelWidth - 1)) + " " : s + String(repeating: " ", count: labelWidth - s.count)
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
                case .dropped:
                    // Under the value that was dropped (its call), not under
                    // the call that superseded it.
                    put(&drops, call.time, mark)
                    anyDrop = true
                case .discarded:
                    put(&drops, call.time, "!")
                    anyDrop = true
                case .unknown: break
                }
            }
            lines.append(pad("\(lane.key) in") + String(calls))
            lines.append(pad("\(lane.key) out") + String(outs))
            if anyDrop { lines.append(pad("\(lane.key) drop") + String(drops)) }
            if let legend = marks.legend { lines.append(pad("") + legend) }
            if let plans = Self.plans(of: lane) { lines.append(pad("") + plans) }
        }
        return lines.map { $0.trimmingTrailingSpaces() }.joined(separator: "\n")
    }

    /// The plan of each call of a lane, runs of one plan together
    /// (`plan free: a1 a2 a3 a4; plan pro: a5`), or `nil` without plans.
    static func plans(of lane: Lane) -> String? {
        var runs: [(plan: String, values: [String])] = []
        for call in lane.calls {
            guard let plan = call.plan else { continue }
            if runs.last?.plan == plan {
                runs[runs.count - 1].values.append(call.value)
            } else {
                runs.append((plan, [call.value]))
            }
        }
        guard !runs.isEmpty else { return nil }
        return runs.map { "plan \($0.plan): " + $0.values.joined(separator: " ") }.joined(separator: "; ")
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
    /// emission; a dropped value gets a red cross under its call (with a
    /// dashed line to the call that superseded it, if any), a discarded one
    /// an orange one.
    func svg() -> String {
        let left = 90.0, right = 40.0, top = 80.0, laneHeight = 110.0
        let plotWidth = 900.0
        let span = Double(max(end, 1))
        let scale = Self.scale(span: end + 1, columns: 10)
        func x(_ t: UInt64) -> Double { left + Double(t) / span * plotWidth }
        let height = top + Double(lanes.count) * laneHeight + 50
        let width = left + plotWidth + right
        var s: [String] = []
        s.append(
            """
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
                s.append(
                    "<line x1=\"\(fmt(left))\" y1=\"\(fmt(y))\" x2=\"\(fmt(left + plotWidth))\" y2=\"\(fmt(y))\" stroke=\"#bbb\"/>"
                )
            }
            for call in lane.calls {
                let cx = x(call.time)
                let label = escape(call.value.count > 12 ? String(call.value.prefix(11)) + "…" : call.value)
                switch call.fate {
                case let .emitted(at):
                    let ex = x(at)
                    s.append(
                        "<line x1=\"\(fmt(cx))\" y1=\"\(fmt(yIn))\" x2=\"\(fmt(ex))\" y2=\"\(fmt(yOut))\" stroke=\"#2a7\" stroke-width=\"1.5\"/>"
                    )
                    s.append(
                        "<circle cx=\"\(fmt(ex))\" cy=\"\(fmt(yOut))\" r=\"6\" fill=\"#2a7\"><title>emit \(escape(call.value)) at \(at) ms</title></circle>"
                    )
                    s.append(
                        "<text x=\"\(fmt(ex))\" y=\"\(fmt(yOut + 20))\" text-anchor=\"middle\" fill=\"#2a7\">\(label)</text>"
                    )
                case let .dropped(at, by):
                    // The cross sits under the value that was dropped; a
                    // dashed line leads to the call that took its place.
                    if let by {
                        let bx = x(by)
                        s.append(
                            "<line x1=\"\(fmt(cx))\" y1=\"\(fmt(yIn + 15))\" x2=\"\(fmt(bx))\" y2=\"\(fmt(yIn + 15))\" stroke=\"#d33\" stroke-dasharray=\"3 3\"/>"
                        )
                    }
                    s.append(
                        "<path d=\"M\(fmt(cx - 5)) \(fmt(yIn + 10))l10 10m0 -10l-10 10\" stroke=\"#d33\" stroke-width=\"2\"><title>drop \(escape(call.value)) at \(at) ms</title></path>"
                    )
                case let .discarded(at):
                    s.append(
                        "<path d=\"M\(fmt(cx - 5)) \(fmt(yIn + 10))l10 10m0 -10l-10 10\" stroke=\"#e90\" stroke-width=\"2\"><title>discard \(escape(call.value)) at \(at) ms</title></path>"
                    )
                case .unknown:
                    break
                }
                s.append(
                    "<circle cx=\"\(fmt(cx))\" cy=\"\(fmt(yIn))\" r=\"6\" fill=\"white\" stroke=\"#246\" stroke-width=\"1.5\"><title>call \(escape(call.value)) at \(call.time) ms\(call.plan.map { ", plan \(escape($0))" } ?? "")</title></circle>"
                )
                s.append(
                    "<text x=\"\(fmt(cx))\" y=\"\(fmt(yIn - 11))\" text-anchor=\"middle\" fill=\"#246\">\(label)</text>"
                )
            }
        }
        let legendY = height - 15
        s.append(
            """
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
