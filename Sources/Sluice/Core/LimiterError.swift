import CSluice

/// An error reported by a limiter: an invalid configuration, a key the core
/// refuses, or a call on a closed limiter.
///
/// Each value is one of the C core's negative `SLUICE_E*` codes, so the Swift
/// layer and the C API describe a failure in the same words
/// (``description`` is `sluice_strerror()`). Compare against the static
/// members, or match them in a `catch` clause:
///
/// ```swift
/// do { try limiter.submit(request, for: "user-42") }
/// catch LimiterError.closed { … }
/// ```
public struct LimiterError: Error, RawRepresentable, Hashable, Sendable, CustomStringConvertible {
    /// The C core's error code: a negative `SLUICE_E*` constant.
    public let rawValue: Int32

    /// Wraps a C error code. Codes the core does not define describe
    /// themselves as "unknown error".
    ///
    /// - Parameter rawValue: a negative `SLUICE_E*` code.
    public init(rawValue: Int32) {
        self.rawValue = rawValue
    }

    /// An allocation failed; nothing changed (`SLUICE_ENOMEM`).
    public static let outOfMemory = LimiterError(rawValue: SLUICE_ENOMEM.rawValue)
    /// The operation is not allowed while a callback runs (`SLUICE_EBUSY`).
    public static let busy = LimiterError(rawValue: SLUICE_EBUSY.rawValue)
    /// An invalid argument or configuration: a negative interval, a `maxWait`
    /// below the interval, a policy with neither edge, a rate limit, period
    /// or burst below 1 (`SLUICE_EINVAL`).
    public static let invalidArgument = LimiterError(rawValue: SLUICE_EINVAL.rawValue)
    /// The cap on live keys is reached and a new key was refused; live keys
    /// are never evicted (`SLUICE_EFULL`).
    public static let full = LimiterError(rawValue: SLUICE_EFULL.rawValue)
    /// A number is outside its documented range, for example a duration above
    /// about 31.7 years (`SLUICE_ERANGE`).
    public static let outOfRange = LimiterError(rawValue: SLUICE_ERANGE.rawValue)
    /// A byte key is longer than 1024 bytes (`SLUICE_EKEYLEN`).
    public static let keyTooLong = LimiterError(rawValue: SLUICE_EKEYLEN.rawValue)
    /// The limiter is closed (`SLUICE_ECLOSED`).
    public static let closed = LimiterError(rawValue: SLUICE_ECLOSED.rawValue)
    /// An internal consistency check failed (`SLUICE_ECORRUPT`); a bug in Sluice.
    public static let corrupted = LimiterError(rawValue: SLUICE_ECORRUPT.rawValue)

    /// The core's English description of the error, from `sluice_strerror()`.
    public var description: String {
        String(cString: sluice_strerror(rawValue))
    }

    /// Turns the return value of a C core function into a result or an error.
    ///
    /// This is the only place where C error codes become Swift errors: every
    /// call into the core passes its return value through here.
    ///
    /// - Parameter result: a value returned by a `sluice_*` function:
    ///   non-negative on success, a negative `SLUICE_E*` code on failure.
    /// - Returns: `result` when it is not negative.
    /// - Throws: the ``LimiterError`` for a negative `result`.
    @inlinable
    @discardableResult
    static func check<Result: BinaryInteger>(_ result: Result) throws(LimiterError) -> Result {
        guard result >= 0 else {
            throw LimiterError(rawValue: Int32(truncatingIfNeeded: result))
        }
        return result
    }
}
