/// A point in time on a limiter's clock, in whole nanoseconds.
///
/// Every limiter decides on integer nanoseconds of one monotonic clock:
///
/// - on a ``ManualLimiterClock``, the time since the clock was created (its
///   ``ManualLimiterClock/now`` starts at `nanoseconds == 0`);
/// - on an event loop (``LimiterLoop``), the system's `CLOCK_MONOTONIC`, the
///   clock that Swift's `SuspendingClock` reads on Linux.
///
/// Instants of two different clocks cannot be compared meaningfully. To wait
/// for an instant, take the duration to it from the limiter's
/// ``Limiter/now``:
///
/// ```swift
/// let limiter = try Limiter<UserID, Request>(.rate(limit: 10, per: .seconds(1))) { _, request in
///     handle(request)
/// }
/// if case .dropped(let retryAt) = try limiter.submit(request, for: user) {
///     print("retry in", limiter.now.duration(to: retryAt))   // for a Retry-After header
/// }
/// ```
public struct LimiterInstant: InstantProtocol, Hashable, Sendable, CustomStringConvertible {
    /// The durations between instants.
    public typealias Duration = Swift.Duration

    /// Nanoseconds since the clock's origin.
    public var nanoseconds: UInt64

    /// Creates an instant.
    ///
    /// - Parameter nanoseconds: nanoseconds since the clock's origin.
    @inlinable
    public init(nanoseconds: UInt64) {
        self.nanoseconds = nanoseconds
    }

    /// The time since the clock's origin, as a duration.
    public var sinceOrigin: Duration {
        .nanoseconds(Int64(clamping: nanoseconds))
    }

    /// The instant `duration` later (or earlier, for a negative duration),
    /// rounded to the nearest nanosecond and clamped to the clock's range.
    ///
    /// - Parameter duration: the offset.
    /// - Returns: the instant.
    public func advanced(by duration: Duration) -> LimiterInstant {
        let (seconds, attoseconds) = duration.components
        // Whole nanoseconds, rounding the attosecond part (which may be negative).
        let fraction = (attoseconds + (attoseconds >= 0 ? 500_000_000 : -500_000_000)) / 1_000_000_000
        let (scaled, overflow) = seconds.multipliedReportingOverflow(by: 1_000_000_000)
        let delta: Int64
        if overflow {
            delta = seconds < 0 ? .min : .max
        } else {
            delta = scaled.addingReportingOverflow(fraction).overflow
                ? (seconds < 0 ? .min : .max) : scaled + fraction
        }
        if delta >= 0 {
            let (sum, carry) = nanoseconds.addingReportingOverflow(UInt64(delta))
            return LimiterInstant(nanoseconds: carry ? .max : sum)
        }
        let magnitude = delta.magnitude
        return LimiterInstant(nanoseconds: nanoseconds >= magnitude ? nanoseconds - magnitude : 0)
    }

    /// The duration from this instant to `other` (negative when `other` is earlier).
    ///
    /// - Parameter other: another instant of the same clock.
    /// - Returns: `other - self`, exact.
    public func duration(to other: LimiterInstant) -> Duration {
        if other.nanoseconds >= nanoseconds {
            return Self.duration(nanoseconds: other.nanoseconds - nanoseconds)
        }
        return .zero - Self.duration(nanoseconds: nanoseconds - other.nanoseconds)
    }

    /// Orders instants of the same clock.
    ///
    /// - Parameters:
    ///   - lhs: an instant.
    ///   - rhs: an instant of the same clock.
    /// - Returns: whether `lhs` is earlier.
    @inlinable
    public static func < (lhs: LimiterInstant, rhs: LimiterInstant) -> Bool {
        lhs.nanoseconds < rhs.nanoseconds
    }

    /// The time since the clock's origin, readable: for example `t+1.5s` or `t+34m13.29s`.
    public var description: String {
        Self.readable(nanoseconds: nanoseconds)
    }

    /// `t+` and the time since the origin, readable: `t+0s`, `t+0.25s`,
    /// `t+34m13.29s`, `t+2h0m5s` (hours, minutes, then seconds with up to
    /// nine decimals, trailing zeros cut).
    static func readable(nanoseconds: UInt64) -> String {
        let totalSeconds = nanoseconds / 1_000_000_000
        let fraction = nanoseconds % 1_000_000_000
        var text = "t+"
        let hours = totalSeconds / 3600
        let minutes = (totalSeconds % 3600) / 60
        let seconds = totalSeconds % 60
        if hours > 0 { text += "\(hours)h" }
        if hours > 0 || minutes > 0 { text += "\(minutes)m" }
        text += "\(seconds)"
        if fraction > 0 {
            var digits = String(fraction)
            digits = String(repeating: "0", count: 9 - digits.count) + digits
            while digits.last == "0" { digits.removeLast() }
            text += "." + digits
        }
        return text + "s"
    }

    /// Whole seconds from `start` to `end`, rounded up (0 when `end` is not
    /// after `start`): 1 ns is 1 s, exactly 2 s is 2.
    static func secondsRoundedUp(from start: LimiterInstant, to end: LimiterInstant) -> Int {
        guard end.nanoseconds > start.nanoseconds else { return 0 }
        let delta = end.nanoseconds - start.nanoseconds
        return Int(clamping: delta / 1_000_000_000 + (delta % 1_000_000_000 == 0 ? 0 : 1))
    }

    /// An exact duration for any count of nanoseconds (even above `Int64.max`).
    static func duration(nanoseconds: UInt64) -> Duration {
        let seconds = Int64(nanoseconds / 1_000_000_000)
        let rest = Int64(nanoseconds % 1_000_000_000)
        return .seconds(seconds) + .nanoseconds(rest)
    }
}
