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
            delta =
                scaled.addingReportingOverflow(fraction).overflow
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

    /// The instant in seconds since its clock's origin, with six decimals
    /// (whole microseconds, the rest cut off), and the clock named: for
    /// example `1979.628459s on the limiter clock`.
    ///
    /// *The limiter clock* is the clock of the limiter that made the instant
    /// (its ``Limiter/now``, ``RateLimiter/now``): on an event loop
    /// (``LimiterLoop``), the system's `CLOCK_MONOTONIC` (on Linux, about the
    /// time since the machine booted), which ``LimiterLoop/now`` reads; on a
    /// ``ManualLimiterClock``, the time since that clock was created; on an
    /// external scheduler (SwiftNIO), its loop's clock. A fleet limiter's
    /// instants are on the event loops' clock too (except in manual-time
    /// mode). For the exact value, read ``nanoseconds``.
    public var description: String {
        Self.seconds(nanoseconds: nanoseconds) + " on the limiter clock"
    }

    /// Nanoseconds as seconds with six decimals (the rest cut off), with the
    /// unit: `0.000000s`, `1.500000s`, `1979.628459s`.
    static func seconds(nanoseconds: UInt64) -> String {
        let micros = String(nanoseconds % 1_000_000_000 / 1_000)
        return "\(nanoseconds / 1_000_000_000)." + String(repeating: "0", count: 6 - micros.count) + micros + "s"
    }

    /// The time from `start` to `end` as seconds with six decimals (the
    /// rest cut off), with the unit and a minus sign when `end` is earlier:
    /// `0.500000s`, `-1.000000s`.
    static func seconds(from start: LimiterInstant, to end: LimiterInstant) -> String {
        end.nanoseconds >= start.nanoseconds
            ? seconds(nanoseconds: end.nanoseconds - start.nanoseconds)
            : "-" + seconds(nanoseconds: start.nanoseconds - end.nanoseconds)
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
