import CSluice

extension Trace {
    /// Options of ``Trace/run(options:)``.
    public struct RunOptions: Hashable, Sendable {
        /// Check every internal invariant of the limiter after each step and
        /// each advance (slow: O(keys) each time; for tests).
        public var checkInvariants: Bool
        /// Use a random hash key instead of the fixed one the C runner uses.
        /// Output lines of different keys at the same instant may then come
        /// in another order.
        public var randomSeed: Bool

        /// Creates options; the defaults match the C `sluice-trace` tool.
        ///
        /// - Parameters:
        ///   - checkInvariants: check the limiter's invariants after every step.
        ///   - randomSeed: use a random hash key.
        public init(checkInvariants: Bool = false, randomSeed: Bool = false) {
            self.checkInvariants = checkInvariants
            self.randomSeed = randomSeed
        }
    }

    /// Runs the trace against a real limiter driven by a manual clock and
    /// returns what the limiter did, one ``TraceOutput`` per line of output.
    ///
    /// The limiter has a 1 ms tick, starts at time 0, and uses the same fixed
    /// hash key as the C runner (unless ``RunOptions/randomSeed``), so the
    /// output is the C tool's, line for line. A step at `TIME` ms runs at
    /// `TIME × 1 000 000` ns. Before each step at time `t`, every deadline
    /// `<= t` fires at its exact time (the runner advances to each successive
    /// next deadline, which is a lower bound of the true one). After the last
    /// step, unless it is `close`, time runs on until no deadline is left.
    /// A submit's own decision is reported when it returns (emitted → `emit`,
    /// dropped → `drop`, scheduled → nothing yet); the limiter's events are
    /// reported as they happen.
    ///
    /// Lines of different keys at the same instant may come in any order;
    /// the lines of one key are in the order they happened.
    ///
    /// The run also checks the limiter: every call's value is reported
    /// exactly once (by its decision or by one later event, never during its
    /// own submit), events with the key that submitted the value, `discard`
    /// only during `close discard`, output times non-decreasing, never after
    /// the current time and whole milliseconds, decisions at sensible times,
    /// no error from a valid step, and a next deadline that moves past every
    /// time advanced to.
    ///
    /// - Parameter options: checks and seed (see ``RunOptions``).
    /// - Returns: the output lines, in the order they happened.
    /// - Throws: ``TraceRunError`` when the limiter misbehaved (a bug in
    ///   Sluice, not in the trace).
    /// - Complexity: O(steps + events + advances), plus the limiter's costs.
    public func run(options: RunOptions = RunOptions()) throws(TraceRunError) -> [TraceOutput] {
        var run = try TraceRun(policy: policy, options: options)
        for step in steps {
            try run.perform(step)
        }
        try run.finish()
        return run.state.output
    }
}

extension Trace {
    /// The C runner's fixed hash key ("sluice-t", "race-v1"), shared by every
    /// trace runner so lines of different keys at one instant come in the
    /// same order.
    static let runnerSeed: (UInt64, UInt64) = (0x736c_7569_6365_2d74, 0x7261_6365_2d76_3100)
}

/// The state of one run, shared with the limiter's event handler.
private final class TraceRunState {
    enum TokenState {
        case inSubmit  // its submit is running
        case held      // scheduled: the limiter holds it
        case done      // reported
    }

    /// One submitted value, indexed by its token.
    struct Submitted {
        var line: Int
        var key: String
        var value: String
        var state: TokenState
    }

    var output: [TraceOutput] = []
    var submitted: [Submitted] = []
    /// The time of the current call into the limiter (ns): no event may be later.
    var now: UInt64 = 0
    /// The time of the last output line (ns): output never goes back in time.
    var lastOutput: UInt64 = 0
    var discardAllowed = false
    /// The first problem found (the event handler cannot throw).
    var failure: String?

    func fail(_ reason: String) {
        if failure == nil { failure = reason }
    }

    func emitLine(atNanoseconds at: UInt64, key: String, kind: TraceOutput.Kind) {
        if at < lastOutput {
            fail("output at \(at) ns is earlier than the previous output (\(lastOutput) ns)")
        } else {
            lastOutput = at
        }
        output.append(TraceOutput(time: at / 1_000_000, key: key, kind: kind))
    }

    func handle(_ event: CoreLimiter.Event) {
        guard failure == nil else { return }
        guard event.token < UInt64(submitted.count) else {
            fail("event for unknown token \(event.token)")
            return
        }
        let token = Int(event.token)
        let entry = submitted[token]
        switch entry.state {
        case .held: break
        case .inSubmit:
            fail("the call of line \(entry.line) was reported by an event before its submit returned")
            return
        case .done:
            fail("the call of line \(entry.line) was reported twice")
            return
        }
        guard Self.key(event.rawKey, equals: entry.key) else {
            fail("event for the call of line \(entry.line) carries another key")
            return
        }
        let word: String
        let kind: TraceOutput.Kind
        switch event.kind {
        case .emit: (word, kind) = ("emit", .emit(value: entry.value))
        case .drop: (word, kind) = ("drop", .drop(value: entry.value))
        case .discard:
            guard discardAllowed else {
                fail("the call of line \(entry.line) was discarded outside close(discard)")
                return
            }
            (word, kind) = ("discard", .discard(value: entry.value))
        }
        if event.at > now {
            fail("\(word) of the call of line \(entry.line) at \(event.at) ns, later than now (\(now) ns)")
            return
        }
        if event.at % 1_000_000 != 0 {
            fail("\(word) of the call of line \(entry.line) at \(event.at) ns, not a whole millisecond")
            return
        }
        submitted[token].state = .done
        emitLine(atNanoseconds: event.at, key: entry.key, kind: kind)
    }

    /// Compares a key lent by the core with a trace key (a byte key of its UTF-8).
    static func key(_ raw: sluice_key_t, equals key: String) -> Bool {
        guard raw.kind == SLUICE_KEY_BYTES, raw.len == key.utf8.count else { return false }
        guard raw.len > 0 else { return true }
        guard let bytes = raw.bytes else { return false }
        return key.utf8.elementsEqual(UnsafeRawBufferPointer(start: bytes, count: raw.len))
    }
}

/// Drives one limiter through a trace (the Swift twin of `trace_run()`).
private struct TraceRun {
    static let nanosecondsPerMillisecond: UInt64 = 1_000_000
    /// The C runner's fixed hash key: "sluice-t", "race-v1".
    static let seed = Trace.runnerSeed

    let state = TraceRunState()
    let limiter: CoreLimiter
    let options: Trace.RunOptions
    var line = 0
    var lastTime: UInt64 = 0
    var closed = false

    init(policy: LimiterPolicy, options: Trace.RunOptions) throws(TraceRunError) {
        let state = self.state
        self.options = options
        do {
            limiter = try CoreLimiter(
                policy: policy, tickNanoseconds: Self.nanosecondsPerMillisecond, start: 0,
                seed: options.randomSeed ? nil : Self.seed
            ) { event in state.handle(event) }
        } catch {
            throw TraceRunError(line: 0, reason: "creating the limiter failed for a valid policy: \(error)")
        }
    }

    /// Throws the first problem found so far.
    func checkFailure() throws(TraceRunError) {
        if let failure = state.failure { throw TraceRunError(line: line, reason: failure) }
    }

    /// Runs the invariant checker when asked to.
    func checkCore(_ whereabouts: String) throws(TraceRunError) {
        guard options.checkInvariants else { return }
        do {
            try limiter.checkInvariants()
        } catch {
            throw TraceRunError(line: line, reason: "the invariant check failed \(whereabouts): \(error)")
        }
    }

    /// Runs a core call, turning an error into a run error.
    @discardableResult
    func core<R>(_ what: String, _ body: () throws(LimiterError) -> R) throws(TraceRunError) -> R {
        do {
            return try body()
        } catch {
            throw TraceRunError(line: line, reason: "\(what) failed: \(error)")
        }
    }

    /// Fires every deadline `<= t`, each at its own time.
    func advance(through t: UInt64) throws(TraceRunError) {
        while let deadline = limiter.nextDeadline, deadline <= t {
            state.now = max(state.now, deadline)
            try core("advance to \(deadline) ns") { () throws(LimiterError) in
                try limiter.advance(to: deadline)
            }
            try checkFailure()
            try checkCore("after an advance")
            if let next = limiter.nextDeadline, next <= deadline {
                throw TraceRunError(
                    line: line,
                    reason: "next deadline \(next) ns is not after \(deadline) ns, the time just advanced to")
            }
        }
    }

    mutating func perform(_ step: Trace.Step) throws(TraceRunError) {
        line = step.line
        // The parser guarantees these; a Trace built in code might not.
        if closed { throw TraceRunError(line: line, reason: "a step after close") }
        if step.time < lastTime { throw TraceRunError(line: line, reason: "time goes backwards") }
        lastTime = step.time
        let (t, overflow) = step.time.multipliedReportingOverflow(by: Self.nanosecondsPerMillisecond)
        if overflow { throw TraceRunError(line: line, reason: "time \(step.time) ms does not fit in ns") }
        try advance(through: t)
        state.now = max(state.now, t)
        switch step.action {
        case let .call(key, value):
            let token = state.submitted.count
            state.submitted.append(.init(line: line, key: key, value: value, state: .inSubmit))
            let decision = try core("submit") { () throws(LimiterError) in
                try limiter.submit(token: UInt64(token), key: key, now: t)
            }
            try checkFailure()
            switch decision {
            case let .emitted(at):
                if at != t { state.fail("EMITTED decision at \(at) ns, not now (\(t) ns)") }
                state.submitted[token].state = .done
                state.emitLine(atNanoseconds: t, key: key, kind: .emit(value: value))
            case .dropped:
                state.submitted[token].state = .done
                state.emitLine(atNanoseconds: t, key: key, kind: .drop(value: value))
            case let .scheduled(at):
                if at < t { state.fail("SCHEDULED at \(at) ns, before now (\(t) ns)") }
                state.submitted[token].state = .held
            }
        case let .cancel(key):
            try core("cancel") { () throws(LimiterError) in try limiter.cancel(key: key, now: t) }
        case let .flush(key):
            try core("flush") { () throws(LimiterError) in try limiter.flush(key: key, now: t) }
        case let .pending(key):
            let yes = try core("pending") { () throws(LimiterError) in try limiter.pending(key: key, now: t) }
            state.emitLine(atNanoseconds: t, key: key, kind: .pending(yes))
        case let .close(mode):
            state.discardAllowed = mode == .discard
            defer { state.discardAllowed = false }
            try core("close") { () throws(LimiterError) in
                try limiter.close(mode == .drain ? .drain : .discard, now: t)
            }
            closed = true
        }
        try checkFailure()
        if !closed { try checkCore("after the step") }
    }

    /// Lets time run on until no deadline is left (unless closed), then
    /// checks that every value was reported.
    func finish() throws(TraceRunError) {
        if !closed {
            try advance(through: .max - 1)
        }
        let missing = state.submitted.filter { $0.state != .done }
        if let first = missing.first {
            throw TraceRunError(
                line: line, reason: "\(missing.count) call(s) never reported (the first: line \(first.line))")
        }
    }
}
