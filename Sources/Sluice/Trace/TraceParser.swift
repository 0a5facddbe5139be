extension Trace {
    /// Parses a trace from its text.
    ///
    /// - Parameter text: the whole trace (trace format v1).
    /// - Throws: ``TraceSyntaxError``: the first problem, with its line and
    ///   the same reason as the C parser.
    /// - Complexity: O(n) in the length of `text`.
    public init(parsing text: String) throws(TraceSyntaxError) {
        var text = text
        // withUTF8 is `rethrows` (untyped): carry the typed error out in a Result.
        self = try text.withUTF8 { bytes in Result { () throws(TraceSyntaxError) in try TraceParser.parse(bytes) } }.get()
    }

    /// Parses a trace from raw bytes, for example a file's contents; bytes
    /// that are not allowed are reported as `bad character 0xNN`.
    ///
    /// - Parameter bytes: the whole trace (trace format v1).
    /// - Throws: ``TraceSyntaxError``: the first problem, with its line and
    ///   the same reason as the C parser.
    /// - Complexity: O(n) in the number of bytes.
    public init(parsing bytes: [UInt8]) throws(TraceSyntaxError) {
        self = try bytes.withUnsafeBufferPointer { bytes in
            Result { () throws(TraceSyntaxError) in try TraceParser.parse(bytes) }
        }.get()
    }
}

/// Trace format v1 parser: a line-by-line port of `trace_parse()` in
/// `tools/sluice-trace/trace.c`, with the same checks in the same order and
/// the same reason texts.
///
/// Lexical rules: lines end in `\n` or `\r\n` (a last line may lack it, and a
/// `\r` right before the end of a line is dropped); `#` starts a comment that
/// may hold any byte but NUL; elsewhere only printable ASCII, spaces and tabs.
/// Fields are separated by spaces and tabs. Numbers are decimal digits only,
/// leading zeros allowed, never overflowing.
enum TraceParser {
    /// Largest TIME of a step, in ms (10^13, about 317 years).
    static let timeMax: UInt64 = 10_000_000_000_000
    /// Largest interval, maxwait or per, in ms (10^12, 10^18 ns).
    static let durationMax: UInt64 = 1_000_000_000_000
    /// Largest rate limit or burst (the core's `SLUICE_RATE_MAX`).
    static let rateMax: UInt64 = 1_000_000_000_000
    /// Longest key, in bytes (`SLUICE_KEY_MAX`).
    static let keyMax = 1024
    /// Longest piece of input quoted in a reason.
    static let quoteMax = 40

    typealias Bytes = UnsafeBufferPointer<UInt8>
    typealias Field = Slice<Bytes>

    static func parse(_ buffer: Bytes) throws(TraceSyntaxError) -> Trace {
        var state = State()
        var position = 0
        while position < buffer.count {
            var end = buffer[position...].firstIndex(of: UInt8(ascii: "\n")) ?? buffer.count
            let next = end < buffer.count ? end + 1 : end
            state.line += 1
            if end > position && buffer[end - 1] == UInt8(ascii: "\r") { end -= 1 }
            try state.parseLine(buffer[position..<end])
            position = next
        }
        guard let policy = state.policy else {
            throw TraceSyntaxError(line: state.line + 1, reason: "missing policy")
        }
        return Trace(policy: policy, steps: state.steps)
    }

    /// The policy line, before conversion (durations in ms).
    struct PolicyLine {
        enum Kind { case throttle, audit, debounce, rate }
        var kind: Kind
        var interval: UInt64 = 0
        var leading: Bool
        var trailing = true
        var pick = LimiterPolicy.Pick.latest
        var maxWait: UInt64?
        var limit: UInt64 = 0
        var per: UInt64 = 0
        var burst: UInt64?

        init(kind: Kind) {
            self.kind = kind
            self.leading = kind == .throttle  // throttle leading=true, debounce leading=false
        }

        var policy: LimiterPolicy {
            // Every number is within the parser's limits: these conversions are exact.
            switch kind {
            case .throttle:
                return .throttle(interval: .milliseconds(Int64(interval)), leading: leading,
                                 trailing: trailing, pick: pick)
            case .audit:
                return .audit(interval: .milliseconds(Int64(interval)))
            case .debounce:
                return .debounce(interval: .milliseconds(Int64(interval)), leading: leading,
                                 trailing: trailing, maxWait: maxWait.map { .milliseconds(Int64($0)) })
            case .rate:
                return .rate(limit: Int(limit), per: .milliseconds(Int64(per)), burst: burst.map { Int($0) })
            }
        }
    }

    enum Option: Int, CaseIterable {
        case interval, leading, trailing, pick, maxwait, limit, per, burst

        var name: String {
            switch self {
            case .interval: "interval"
            case .leading: "leading"
            case .trailing: "trailing"
            case .pick: "pick"
            case .maxwait: "maxwait"
            case .limit: "limit"
            case .per: "per"
            case .burst: "burst"
            }
        }

        static func allowed(for kind: PolicyLine.Kind) -> [Option] {
            switch kind {
            case .throttle: [.interval, .leading, .trailing, .pick]
            case .audit: [.interval]
            case .debounce: [.interval, .leading, .trailing, .maxwait]
            case .rate: [.limit, .per, .burst]
            }
        }
    }

    struct State {
        var line = 0
        var policy: LimiterPolicy?
        var steps: [Trace.Step] = []
        var closed = false
        var lastTime: UInt64 = 0

        func error(_ reason: String) -> TraceSyntaxError {
            TraceSyntaxError(line: line, reason: reason)
        }

        /// `PREFIX'TEXT'SUFFIX`, TEXT cut to 40 characters plus "...".
        func quotedError(_ prefix: String, _ text: Field, _ suffix: String = "") -> TraceSyntaxError {
            let shown = text.prefix(TraceParser.quoteMax)
            let more = text.count > TraceParser.quoteMax ? "..." : ""
            return error("\(prefix)'\(string(shown))\(more)'\(suffix)")
        }

        /// One line without its end of line.
        mutating func parseLine(_ text: Field) throws(TraceSyntaxError) {
            var code = text.endIndex
            for i in text.indices {
                let c = text[i]
                if c == UInt8(ascii: "#") {
                    code = i
                    if text[i...].contains(0) { throw error("bad character 0x00") }
                    break
                }
                if !(c == 0x20 || c == 0x09 || (0x21...0x7E).contains(c)) {
                    throw error("bad character 0x\(hex2(c))")
                }
            }
            var fields = Fields(text[text.startIndex..<code])
            guard let first = fields.next() else { return }  // blank or comment
            if policy == nil {
                guard equals(first, "policy") else { throw error("missing policy") }
                policy = try parsePolicy(&fields).policy
                return
            }
            try parseStep(first, &fields)
        }

        mutating func parsePolicy(_ fields: inout Fields) throws(TraceSyntaxError) -> PolicyLine {
            guard let kindField = fields.next() else { throw error("missing field") }
            var pol: PolicyLine
            if equals(kindField, "throttle") {
                pol = PolicyLine(kind: .throttle)
            } else if equals(kindField, "audit") {
                pol = PolicyLine(kind: .audit)
            } else if equals(kindField, "debounce") {
                pol = PolicyLine(kind: .debounce)
            } else if equals(kindField, "rate") {
                pol = PolicyLine(kind: .rate)
            } else {
                throw quotedError("unknown policy ", kindField)
            }
            let allowed = Option.allowed(for: pol.kind)
            var seen = Set<Option>()
            while let field = fields.next() {
                guard let eq = field.firstIndex(of: UInt8(ascii: "=")) else {
                    throw quotedError("bad option ", field)
                }
                let name = field[field.startIndex..<eq]
                let value = field[(eq + 1)...]
                guard let option = allowed.first(where: { equals(name, $0.name) }) else {
                    throw quotedError("unknown option ", name)
                }
                guard seen.insert(option).inserted else { throw quotedError("duplicate option ", name) }
                if value.isEmpty { throw error("missing value for \(option.name)") }
                switch option {
                case .leading, .trailing:
                    let flag: Bool
                    if equals(value, "true") {
                        flag = true
                    } else if equals(value, "false") {
                        flag = false
                    } else {
                        throw quotedError("bad value ", value, " for \(option.name)")
                    }
                    if option == .leading { pol.leading = flag } else { pol.trailing = flag }
                case .pick:
                    if equals(value, "latest") {
                        pol.pick = .latest
                    } else if equals(value, "first") {
                        pol.pick = .first
                    } else {
                        throw quotedError("bad value ", value, " for pick")
                    }
                case .interval, .maxwait, .per:
                    let number = try parseNumber(value, max: TraceParser.durationMax, name: option.name)
                    switch option {
                    case .interval: pol.interval = number
                    case .maxwait: pol.maxWait = number
                    default:
                        if number < 1 { throw error("per below 1") }
                        pol.per = number
                    }
                case .limit, .burst:
                    let number = try parseNumber(value, max: TraceParser.rateMax, name: option.name)
                    if number < 1 { throw error("\(option.name) below 1") }
                    if option == .limit { pol.limit = number } else { pol.burst = number }
                }
            }
            if pol.kind == .rate {
                if !seen.contains(.limit) { throw error("missing option limit") }
                if !seen.contains(.per) { throw error("missing option per") }
                return pol
            }
            if !seen.contains(.interval) { throw error("missing option interval") }
            if let maxWait = pol.maxWait, maxWait < pol.interval { throw error("maxwait below interval") }
            if !pol.leading && !pol.trailing { throw error("no edge enabled") }
            return pol
        }

        /// A step line whose first field is `first`.
        mutating func parseStep(_ first: Field, _ fields: inout Fields) throws(TraceSyntaxError) {
            if closed { throw error("line after close") }
            if equals(first, "policy") { throw error("duplicate policy") }
            let time = try parseNumber(first, max: TraceParser.timeMax, name: "time")
            if time < lastTime { throw error("time goes backwards") }
            guard let verb = fields.next() else { throw error("missing field") }
            enum Verb { case call, cancel, flush, pending, close }
            let kind: Verb
            if equals(verb, "call") {
                kind = .call
            } else if equals(verb, "cancel") {
                kind = .cancel
            } else if equals(verb, "flush") {
                kind = .flush
            } else if equals(verb, "pending") {
                kind = .pending
            } else if equals(verb, "close") {
                kind = .close
            } else {
                throw quotedError("unknown verb ", verb)
            }
            guard let key = fields.next() else { throw error("missing field") }
            var value: Field?
            if kind == .call {
                guard let v = fields.next() else { throw error("missing field") }
                value = v
            }
            if let extra = fields.next() { throw quotedError("extra field ", extra) }
            lastTime = time
            let action: Trace.Action
            if kind == .close {
                let mode: Trace.CloseMode
                if equals(key, "discard") {
                    mode = .discard
                } else if equals(key, "drain") {
                    mode = .drain
                } else {
                    throw quotedError("bad value ", key, " for close")
                }
                closed = true
                steps.append(Trace.Step(line: line, time: time, action: .close(mode)))
                return
            }
            if key.count > TraceParser.keyMax { throw error("key too long") }
            if let value, UInt64(value.count) > UInt64(UInt32.max) { throw error("value too long") }
            let k = string(key)
            switch kind {
            case .call: action = .call(key: k, value: string(value!))
            case .cancel: action = .cancel(key: k)
            case .flush: action = .flush(key: k)
            default: action = .pending(key: k)
            }
            steps.append(Trace.Step(line: line, time: time, action: action))
        }

        /// Decimal digits only, at most `max`; never overflows. `-` followed by
        /// digits is "negative NAME".
        func parseNumber(_ text: Field, max: UInt64, name: String) throws(TraceSyntaxError) -> UInt64 {
            func allDigits(_ s: Field) -> Bool {
                !s.isEmpty && s.allSatisfy { (UInt8(ascii: "0")...UInt8(ascii: "9")).contains($0) }
            }
            if text.count >= 2 && text.first == UInt8(ascii: "-") && allDigits(text.dropFirst()) {
                throw error("negative \(name)")
            }
            guard allDigits(text) else { throw quotedError("bad number ", text) }
            var value: UInt64 = 0
            for c in text {
                let digit = UInt64(c - UInt8(ascii: "0"))
                if value > (max - digit) / 10 { throw error("number too large") }
                value = value * 10 + digit
            }
            return value
        }
    }

    /// The fields of a line: runs of bytes other than space and tab.
    struct Fields {
        var rest: Field

        init(_ text: Field) { rest = text }

        mutating func next() -> Field? {
            guard let start = rest.firstIndex(where: { !isBlank($0) }) else {
                rest = rest[rest.endIndex...]
                return nil
            }
            let end = rest[start...].firstIndex(where: isBlank) ?? rest.endIndex
            defer { rest = rest[end...] }
            return rest[start..<end]
        }
    }

    static func isBlank(_ c: UInt8) -> Bool { c == 0x20 || c == 0x09 }
}

private func equals(_ field: TraceParser.Field, _ word: StaticString) -> Bool {
    let w = UnsafeBufferPointer(start: word.utf8Start, count: word.utf8CodeUnitCount)
    return field.elementsEqual(w)
}

private func equals(_ field: TraceParser.Field, _ word: String) -> Bool {
    field.elementsEqual(word.utf8)
}

private func string(_ field: TraceParser.Field) -> String {
    String(decoding: field, as: UTF8.self)
}

private func string(_ field: Slice<TraceParser.Field>) -> String {
    String(decoding: field, as: UTF8.self)
}

private func hex2(_ c: UInt8) -> String {
    let digits = Array("0123456789abcdef".utf8)
    return String(decoding: [digits[Int(c >> 4)], digits[Int(c & 15)]], as: UTF8.self)
}
