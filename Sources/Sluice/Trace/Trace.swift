/// A conformance trace (trace format v1): a script of calls against one
/// limiter policy, and the way to run it.
///
/// The format is `docs/trace-format.md` (shared/spec/trace-format.md); the
/// behaviour it checks is `docs/semantics.md`. Every trace runner of the
/// project — the C `sluice-trace` tool, the Swift tests and
/// `sluice simulate` — reads the same files and prints the same lines:
///
/// ```swift
/// let trace = try Trace(parsing: """
///     policy debounce interval=100
///     0 call A a
///     30 call A b
///     """)
/// for line in try trace.run() { print(line) }   // 30 drop A a, 130 emit A b
/// ```
///
/// Parsing follows the C parser (`tools/sluice-trace/trace.h`) byte for
/// byte: the same input is accepted or refused the same way, and a refusal
/// carries the same line number and reason (``TraceSyntaxError``).
public struct Trace: Hashable, Sendable {
    /// The policy of the trace's limiter, from the `policy` line (durations
    /// in the trace are milliseconds).
    public var policy: LimiterPolicy

    /// The step lines, in input order. Times never decrease, and a
    /// ``Action/close(_:)`` step, if any, is the last one.
    public var steps: [Step]

    /// Creates a trace from its parts. ``run(options:)`` expects what the parser
    /// guarantees (times non-decreasing, `close` last, keys at most 1024 bytes).
    ///
    /// - Parameters:
    ///   - policy: the limiter's policy.
    ///   - steps: the step lines, in order.
    public init(policy: LimiterPolicy, steps: [Step]) {
        self.policy = policy
        self.steps = steps
    }

    /// One step line: `TIME VERB ARGS`.
    public struct Step: Hashable, Sendable {
        /// The input line it came from (1-based); 0 for steps built in code.
        public var line: Int
        /// The step's time, in milliseconds (at most 10^13).
        public var time: UInt64
        /// What the step does.
        public var action: Action

        /// Creates a step.
        ///
        /// - Parameters:
        ///   - line: the input line it came from (0 for steps built in code).
        ///   - time: the step's time, in milliseconds.
        ///   - action: what the step does.
        public init(line: Int = 0, time: UInt64, action: Action) {
            self.line = line
            self.time = time
            self.action = action
        }
    }

    /// What a step does.
    public enum Action: Hashable, Sendable {
        /// `call KEY VALUE`: submit `value` for `key`.
        case call(key: String, value: String)
        /// `cancel KEY`: drop the key's pending value.
        case cancel(key: String)
        /// `flush KEY`: emit the key's pending value now.
        case flush(key: String)
        /// `pending KEY`: ask whether the key holds a pending value.
        case pending(key: String)
        /// `close drain|discard`: close the limiter (the last step).
        case close(CloseMode)
    }

    /// What `close` does with pending values.
    public enum CloseMode: Hashable, Sendable {
        /// Emit every pending value now.
        case drain
        /// Report every pending value as discarded.
        case discard
    }
}

/// A malformed trace: the first problem found, as the line it is on and a
/// short reason (the same texts as the C parser, `tools/sluice-trace/trace.h`).
///
/// Tools print it as ``message``, `error: line N: REASON`, on stderr and
/// exit with status 2.
public struct TraceSyntaxError: Error, Hashable, Sendable, CustomStringConvertible {
    /// The 1-based input line.
    public var line: Int
    /// What is wrong, for example `time goes backwards` or `unknown verb 'x'`.
    public var reason: String

    /// Creates an error.
    ///
    /// - Parameters:
    ///   - line: the 1-based input line.
    ///   - reason: what is wrong.
    public init(line: Int, reason: String) {
        self.line = line
        self.reason = reason
    }

    /// `line N: REASON`.
    public var description: String { "line \(line): \(reason)" }

    /// The line a tool prints on stderr: `error: line N: REASON`.
    public var message: String { "error: \(description)" }
}

/// A run that found the limiter misbehaving: a bug in Sluice, never in the
/// trace (a token reported twice or never, an event for a key that did not
/// submit it, an error from a valid call, time going backwards, …).
public struct TraceRunError: Error, Hashable, Sendable, CustomStringConvertible {
    /// The input line being run when the problem was found (0 after the last line).
    public var line: Int
    /// What went wrong.
    public var reason: String

    /// Creates an error.
    ///
    /// - Parameters:
    ///   - line: the 1-based input line.
    ///   - reason: what is wrong.
    public init(line: Int, reason: String) {
        self.line = line
        self.reason = reason
    }

    /// `internal error at line N: REASON`.
    public var description: String { "internal error at line \(line): \(reason)" }
}

/// One line of a trace's output: something the limiter did.
public struct TraceOutput: Hashable, Sendable, CustomStringConvertible {
    /// What happened.
    public enum Kind: Hashable, Sendable {
        /// `emit`: the value was emitted.
        case emit(value: String)
        /// `drop`: the value will never be emitted (superseded, suppressed by
        /// the window, or cancelled), reported when that became so.
        case drop(value: String)
        /// `discard`: the value was pending at `close discard`.
        case discard(value: String)
        /// `pending`: the answer to a `pending` step.
        case pending(Bool)
    }

    /// When, in milliseconds (a timer emission reports its exact deadline).
    public var time: UInt64
    /// The key.
    public var key: String
    /// What happened.
    public var kind: Kind

    /// Creates an output line.
    ///
    /// - Parameters:
    ///   - time: when, in milliseconds.
    ///   - key: the key.
    ///   - kind: what happened.
    public init(time: UInt64, key: String, kind: Kind) {
        self.time = time
        self.key = key
        self.kind = kind
    }

    /// The line as printed: `TIME emit KEY VALUE`, `TIME drop KEY VALUE`,
    /// `TIME discard KEY VALUE` or `TIME pending KEY yes|no`.
    public var description: String {
        switch kind {
        case let .emit(value): "\(time) emit \(key) \(value)"
        case let .drop(value): "\(time) drop \(key) \(value)"
        case let .discard(value): "\(time) discard \(key) \(value)"
        case let .pending(yes): "\(time) pending \(key) \(yes ? "yes" : "no")"
        }
    }
}
