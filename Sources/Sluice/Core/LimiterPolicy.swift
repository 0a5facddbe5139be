/// How a limiter treats the calls of each key.
///
/// Every key of a limiter follows the same policy, with its own state. The
/// exact behaviour of each policy is specified in `docs/semantics.md`;
/// in short:
///
/// - ``throttle(interval:leading:trailing:pick:)``: emissions of a key are at
///   least `interval` apart.
/// - ``audit(interval:)``: trailing only; a call opens a window and its latest
///   value is emitted when the window ends.
/// - ``debounce(interval:leading:trailing:maxWait:)``: emit once calls have
///   been quiet for `interval` (and at least every `maxWait`).
/// - ``rate(limit:per:burst:)``: at most `limit` calls per `per` on average,
///   with bursts of up to `burst`; each call is emitted or dropped at once.
///
/// Durations count whole nanoseconds: a `Duration` is rounded to the nearest
/// nanosecond. An interval of zero is pass-through (every call emits at once).
/// The factories never fail: a configuration is checked when a limiter is
/// created (or by ``validate()``), which throws a ``LimiterError``:
/// ``LimiterError/invalidArgument`` for a negative duration, a `maxWait`
/// below the interval, neither edge enabled, or a limit, period or burst
/// below one; ``LimiterError/outOfRange`` for a duration above about
/// 31.7 years (10^18 ns) or a limit or burst above 10^12.
public struct LimiterPolicy: Hashable, Sendable, CustomStringConvertible {
    /// Which value a throttle window keeps when it already holds one.
    public enum Pick: Hashable, Sendable {
        /// The newer value replaces the pending one, which is dropped.
        case latest
        /// The pending value stays; the newer one is dropped.
        case first
    }

    enum Kind: Hashable, Sendable {
        case throttle(interval: Duration, leading: Bool, trailing: Bool, pick: Pick)
        case audit(interval: Duration)
        case debounce(interval: Duration, leading: Bool, trailing: Bool, maxWait: Duration?)
        case rate(limit: Int, per: Duration, burst: Int?)
    }

    let kind: Kind

    private init(_ kind: Kind) {
        self.kind = kind
    }

    /// Emissions of a key at least `interval` apart.
    ///
    /// A call on an idle key opens a window of `interval`; a value kept during
    /// the window is emitted when it ends, which opens the next window.
    ///
    /// - Parameters:
    ///   - interval: the shortest time between two emissions of a key.
    ///   - leading: emit the call that opens a window at once (default `true`).
    ///   - trailing: emit the kept value when the window ends (default `true`).
    ///   - pick: which value a window keeps (default ``Pick/latest``).
    /// - Returns: the policy; checked when a limiter is created.
    public static func throttle(
        interval: Duration, leading: Bool = true, trailing: Bool = true, pick: Pick = .latest
    ) -> LimiterPolicy {
        LimiterPolicy(.throttle(interval: interval, leading: leading, trailing: trailing, pick: pick))
    }

    /// Trailing-only limiting whose window is opened by a call: the latest
    /// value of the window is emitted when it ends, and no new window opens
    /// until the next call.
    ///
    /// - Parameter interval: the window.
    /// - Returns: the policy; checked when a limiter is created.
    public static func audit(interval: Duration) -> LimiterPolicy {
        LimiterPolicy(.audit(interval: interval))
    }

    /// Emission after `interval` without calls (optionally at least every
    /// `maxWait` while calls keep coming).
    ///
    /// - Parameters:
    ///   - interval: the quiet time.
    ///   - leading: emit the first call of a burst at once (default `false`).
    ///   - trailing: emit the last value once the key is quiet (default `true`).
    ///   - maxWait: the longest a pending value waits, at least `interval`;
    ///     `nil` (the default) for no limit.
    /// - Returns: the policy; checked when a limiter is created.
    public static func debounce(
        interval: Duration, leading: Bool = false, trailing: Bool = true, maxWait: Duration? = nil
    ) -> LimiterPolicy {
        LimiterPolicy(.debounce(interval: interval, leading: leading, trailing: trailing, maxWait: maxWait))
    }

    /// A rate quota (GCRA): at most `limit` calls per `per` on average, with
    /// up to `burst` calls at once. Each call is emitted or dropped at once;
    /// nothing is ever pending.
    ///
    /// - Parameters:
    ///   - limit: calls per period, at least 1.
    ///   - per: the period, at least one nanosecond.
    ///   - burst: calls allowed at once, at least 1; `nil` (the default) for `limit`.
    /// - Returns: the policy; checked when a limiter is created.
    public static func rate(limit: Int, per: Duration, burst: Int? = nil) -> LimiterPolicy {
        LimiterPolicy(.rate(limit: limit, per: per, burst: burst))
    }

    /// Whether this is a ``rate(limit:per:burst:)`` policy.
    var isRate: Bool {
        if case .rate = kind { return true }
        return false
    }

    /// A rate policy's numbers — at most `limit` calls per `per`, and up to
    /// `burst` at once (the limit when not given) — or `nil` for the other
    /// policies.
    public var rateLimit: (limit: Int, per: Duration, burst: Int)? {
        if case let .rate(limit, per, burst) = kind { return (limit, per, burst ?? limit) }
        return nil
    }

    /// Checks the configuration without creating a limiter.
    ///
    /// - Throws: ``LimiterError/invalidArgument`` or ``LimiterError/outOfRange``
    ///   (see ``LimiterPolicy``).
    public func validate() throws(LimiterError) {
        do {
            try LimiterError.check(CPolicy.validate(try cPolicy()))
        } catch {
            throw LimiterError.explaining(error, policy: self)
        }
    }

    /// The policy and its options, for example
    /// `throttle(interval: 0.1 seconds, leading: true, trailing: true, pick: latest)`.
    public var description: String {
        switch kind {
        case let .throttle(interval, leading, trailing, pick):
            return "throttle(interval: \(interval), leading: \(leading), trailing: \(trailing), pick: \(pick))"
        case let .audit(interval):
            return "audit(interval: \(interval))"
        case let .debounce(interval, leading, trailing, maxWait):
            let wait = maxWait.map { "\($0)" } ?? "nil"
            return "debounce(interval: \(interval), leading: \(leading), trailing: \(trailing), maxWait: \(wait))"
        case let .rate(limit, per, burst):
            let b = burst.map { "\($0)" } ?? "nil"
            return "rate(limit: \(limit), per: \(per), burst: \(b))"
        }
    }

    /// The largest duration the core accepts, in nanoseconds (`SLUICE_DURATION_MAX`).
    static let maxNanoseconds: Int64 = 1_000_000_000_000_000_000

    /// Converts a duration to whole nanoseconds without floating point and
    /// without overflow.
    ///
    /// The attosecond part is rounded to the nearest nanosecond (halves up),
    /// so `.seconds(0.1)`, whose `Double` is slightly above 0.1, is exactly
    /// 100 000 000 ns.
    ///
    /// - Parameter duration: a duration.
    /// - Returns: the duration in nanoseconds, in `0...maxNanoseconds`.
    /// - Throws: ``LimiterError/invalidArgument`` for a negative duration;
    ///   ``LimiterError/outOfRange`` above `maxNanoseconds`.
    static func nanoseconds(_ duration: Duration) throws(LimiterError) -> Int64 {
        guard duration >= .zero else { throw .invalidArgument }
        // Non-negative: seconds >= 0 and 0 <= attoseconds < 10^18.
        let (seconds, attoseconds) = duration.components
        let (whole, overflow) = seconds.multipliedReportingOverflow(by: 1_000_000_000)
        guard !overflow else { throw .outOfRange }
        let fraction = (attoseconds + 500_000_000) / 1_000_000_000
        let (total, overflow2) = whole.addingReportingOverflow(fraction)
        guard !overflow2, total <= maxNanoseconds else { throw .outOfRange }
        return total
    }
}
