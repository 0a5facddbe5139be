import CSluice

#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif

/// An error reported by a limiter: an invalid configuration, a key the core
/// refuses, a call on a closed limiter, or, for a fleet limiter, Redis that
/// cannot answer.
///
/// Each error is one of the codes of Sluice's one C error list
/// (`sluice_errors.h`, shared by the core, the loop layer, the fleet and the
/// trace library) (``rawValue``), with a
/// sentence that says what went wrong in the Swift API's own words
/// (``description``, also its `localizedDescription`), and, for a refused
/// configuration, which option broke which rule (``reason``):
///
/// ```swift
/// do {
///     _ = try Limiter<String, Int>(.debounce(interval: .seconds(1), maxWait: .milliseconds(500))) { _, _ in }
/// } catch {
///     print(error)  // Invalid debounce policy: maxWait (0.5 seconds) is shorter than interval (1.0 seconds); …
/// }
/// ```
///
/// Errors compare by their code only, so the static members match in a
/// `catch` clause whatever the reason says:
///
/// ```swift
/// let quota = try RateLimiter<String>(limit: 10, per: .seconds(1))
/// do { _ = try quota.check("user-42") }
/// catch LimiterError.closed { /* shutting down: refuse the request */ }
/// ```
public struct LimiterError: Error, RawRepresentable, Hashable, Sendable, CustomStringConvertible, LocalizedError,
    CaseIterable
{
    /// The C core's error code: a negative `SLUICE_E*` constant.
    public let rawValue: Int32

    /// Which option broke which rule, as a sentence, when the error comes
    /// from a configuration the limiter checked; `nil` otherwise.
    public let reason: String?

    /// Wraps a C error code. Codes the core does not define describe
    /// themselves as an unknown error, with the code.
    ///
    /// - Parameter rawValue: a negative `SLUICE_E*` code.
    public init(rawValue: Int32) {
        self.rawValue = rawValue
        self.reason = nil
    }

    /// An error with the code of `error` and a sentence saying exactly what
    /// was wrong (`package`: SluiceFleet explains its configuration with it).
    ///
    /// - Parameters:
    ///   - error: the kind of error (its code is kept).
    ///   - reason: a sentence naming the option and the rule it broke.
    package init(_ error: LimiterError, reason: String) {
        self.rawValue = error.rawValue
        self.reason = reason
    }

    /// An allocation failed; nothing changed.
    public static let outOfMemory = LimiterError(rawValue: SLUICE_ENOMEM.rawValue)
    /// The operation is not allowed while one of this limiter's own callbacks
    /// runs.
    public static let busy = LimiterError(rawValue: SLUICE_EBUSY.rawValue)
    /// An invalid argument or configuration: a negative interval, a `maxWait`
    /// below the interval, a policy with neither edge, a rate limit, period
    /// or burst below 1, a `maxKeys` below 1, a tick of zero or above one
    /// second. ``reason`` names the option.
    public static let invalidArgument = LimiterError(rawValue: SLUICE_EINVAL.rawValue)
    /// The cap on keys with state (`maxKeys`) is reached and a new key was
    /// refused; keys with state are never evicted.
    public static let full = LimiterError(rawValue: SLUICE_EFULL.rawValue)
    /// A number is outside its range: a duration above 10^18 nanoseconds
    /// (about 31.7 years), a limit, burst or cost above 10^12, a cost of 0.
    public static let outOfRange = LimiterError(rawValue: SLUICE_ERANGE.rawValue)
    /// A key is longer than 1024 bytes (a `String` key counts the bytes of
    /// its UTF-8 in Unicode Normalization Form C).
    public static let keyTooLong = LimiterError(rawValue: SLUICE_EKEYLEN.rawValue)
    /// The limiter is closed: it takes no more values.
    public static let closed = LimiterError(rawValue: SLUICE_ECLOSED.rawValue)
    /// An internal consistency check failed: a bug in Sluice (details are
    /// printed on standard error).
    public static let corrupted = LimiterError(rawValue: SLUICE_ECORRUPT.rawValue)
    /// A fleet limiter has no connection to Redis (down, refused, or
    /// reconnecting).
    public static let notConnected = LimiterError(rawValue: SLUICE_ENOTCONN.rawValue)
    /// Redis did not answer a fleet limiter within its timeout.
    public static let timedOut = LimiterError(rawValue: SLUICE_ETIMEDOUT.rawValue)
    /// Redis answered a fleet limiter with something that is not a valid
    /// answer.
    public static let badReply = LimiterError(rawValue: SLUICE_EPROTO.rawValue)
    /// Malformed input: a conformance trace (the trace tools report the line
    /// and the reason) or a fleet limiter's Redis URL (``reason`` names the
    /// offending part).
    public static let malformedInput = LimiterError(rawValue: SLUICE_ESYNTAX.rawValue)
    /// A trace run reached its limit of timer advances.
    public static let limitReached = LimiterError(rawValue: SLUICE_ELIMIT.rawValue)
    /// Redis refused a fleet limiter's credentials (`WRONGPASS`, `NOAUTH`).
    public static let authenticationFailed = LimiterError(rawValue: SLUICE_EAUTH.rawValue)
    /// The Redis user lacks a permission the fleet limiter needs (`NOPERM`).
    public static let permissionDenied = LimiterError(rawValue: SLUICE_ENOPERM.rawValue)
    /// TLS to Redis failed: the handshake was refused, the server does not
    /// speak TLS, or a certificate did not verify.
    public static let tlsFailed = LimiterError(rawValue: SLUICE_ETLS.rawValue)
    /// Redis is out of memory and refuses writes (`OOM`).
    public static let redisOutOfMemory = LimiterError(rawValue: SLUICE_EOOM.rawValue)
    /// The Redis node cannot take writes: it is a replica, or its primary
    /// is down (`READONLY`, `MASTERDOWN`).
    public static let readOnly = LimiterError(rawValue: SLUICE_EREADONLY.rawValue)
    /// A key's value in Redis is not a fleet limiter's state: something else
    /// wrote it, or it has another type.
    public static let badStoredValue = LimiterError(rawValue: SLUICE_EBADVALUE.rawValue)
    /// Redis Cluster cannot serve the key's slot now: the cluster is down
    /// (`CLUSTERDOWN`), asks to try again (`TRYAGAIN`), or no node holds it.
    public static let clusterDown = LimiterError(rawValue: SLUICE_ECLUSTERDOWN.rawValue)
    /// Redis answered with an error that has no code of its own.
    public static let redisError = LimiterError(rawValue: SLUICE_EREDIS.rawValue)
    /// Redis Sentinel knows no primary by the fleet limiter's master name
    /// (the ``reason`` names it).
    public static let unknownMaster = LimiterError(rawValue: SLUICE_ENOMASTER.rawValue)
    /// The task awaiting a fleet limiter's answer was cancelled first.
    public static let cancelled = LimiterError(rawValue: SLUICE_ECANCELED.rawValue)
    /// A rate limiter has no plan by that name (or index): see
    /// ``RateLimiter/init(plans:scheduler:maxKeys:maxQuotas:)`` and
    /// ``RateLimiter/update(plans:)``.
    public static let unknownPlan = LimiterError(rawValue: SLUICE_ENOPLAN.rawValue)
    /// A fleet delivery's lease was lost: its lease ended before the
    /// acknowledgement, and it was claimed again (a later attempt holds it).
    public static let leaseLost = LimiterError(rawValue: SLUICE_ELEASE.rawValue)

    /// Every error Sluice reports: one for each code of the C list
    /// (`sluice_errors.h`), which every module shares.
    public static let allCases: [LimiterError] = [
        .outOfMemory, .busy, .invalidArgument, .full, .outOfRange, .keyTooLong, .closed, .corrupted,
        .notConnected, .timedOut, .badReply, .malformedInput, .limitReached, .authenticationFailed,
        .permissionDenied, .tlsFailed, .redisOutOfMemory, .readOnly, .badStoredValue, .redisError,
        .cancelled, .unknownMaster, .clusterDown, .unknownPlan, .leaseLost,
    ]

    /// What went wrong, as one sentence: the ``reason`` when there is one,
    /// otherwise the meaning of the code, for example "The limiter is
    /// closed: it takes no more values."
    public var description: String {
        reason ?? summary
    }

    /// The same sentence as ``description``, so that `localizedDescription`
    /// of the error names the problem.
    public var errorDescription: String? { description }

    /// The meaning of the code alone.
    var summary: String {
        switch self {
        case .outOfMemory: "Out of memory: an allocation failed and nothing was changed."
        case .busy: "Not allowed while one of this limiter's own callbacks runs."
        case .invalidArgument: "Invalid argument or configuration."
        case .full:
            "The limiter is full: maxKeys keys have state, so the new key was refused (keys with state are never evicted)."
        case .outOfRange:
            "A number is out of range: durations may be at most 10^18 nanoseconds (about 31.7 years), limits, bursts and costs at most 10^12."
        case .keyTooLong: "The key is longer than 1024 bytes."
        case .closed: "The limiter is closed: it takes no more values."
        case .corrupted: "An internal consistency check failed (details on standard error): a bug in Sluice."
        case .notConnected: "No connection to Redis (down, refused, or reconnecting)."
        case .timedOut: "Redis did not answer within the timeout."
        case .badReply: "Redis answered something that is not a valid answer."
        case .malformedInput: "The input is malformed (a trace or a Redis URL)."
        case .limitReached: "The trace run reached its limit of timer advances."
        case .authenticationFailed: "Redis refused the credentials: check the user and the password."
        case .permissionDenied:
            "The Redis user may not run a command the fleet limiter needs: grant it the ACL rule in docs/fleet.md."
        case .tlsFailed:
            "TLS to Redis failed: the handshake was refused, the server does not speak TLS, or a certificate did not verify."
        case .redisOutOfMemory: "Redis is out of memory and refuses writes."
        case .readOnly: "The Redis node cannot take writes: it is a replica, or its primary is down."
        case .badStoredValue:
            "A key's value in Redis is not the fleet limiter's state: another writer, or another type."
        case .redisError: "Redis answered with an error."
        case .clusterDown: "Redis Cluster cannot serve the key's slot now (down, busy migrating, or uncovered)."
        case .cancelled: "The call was cancelled before its answer came."
        case .unknownMaster: "Redis Sentinel knows no primary by the configured master name."
        case .unknownPlan: "The rate limiter has no plan by that name."
        case .leaseLost:
            "The delivery's lease ended before the acknowledgement: it was claimed again, and a later attempt holds it."
        default: "Unknown Sluice error (code \(rawValue))."
        }
    }

    /// Whether two errors have the same code (the ``reason`` is not compared).
    public static func == (lhs: LimiterError, rhs: LimiterError) -> Bool {
        lhs.rawValue == rhs.rawValue
    }

    /// Hashes the code.
    ///
    /// - Parameter hasher: the hasher.
    public func hash(into hasher: inout Hasher) {
        hasher.combine(rawValue)
    }

    /// Whether `error` is a ``LimiterError`` with the code of `pattern`: lets
    /// `catch LimiterError.closed { … }` match an untyped error as well.
    ///
    /// - Parameters:
    ///   - pattern: the error to match, usually a static member.
    ///   - error: the error thrown.
    /// - Returns: whether the codes are equal.
    public static func ~= (pattern: LimiterError, error: any Error) -> Bool {
        (error as? LimiterError) == pattern
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

// MARK: - Configuration errors that name the option

extension LimiterError {
    /// The longest duration the core takes.
    static let longestDuration = Duration.nanoseconds(1_000_000_000_000_000_000)
    /// The largest limit, burst or cost the core takes.
    static let largestCount = 1_000_000_000_000

    /// `error`, with a ``reason`` naming the option of this configuration
    /// that broke a rule.
    ///
    /// Call it where creating a limiter (or validating a policy) failed: the
    /// core decides *whether* a configuration is valid, this only finds the
    /// first option that explains the failure. An error that is not about
    /// the configuration, or whose cause it cannot find, comes back
    /// unchanged.
    ///
    /// - Parameters:
    ///   - error: the error the check threw.
    ///   - policy: the policy that was checked.
    ///   - maxKeys: the `maxKeys` option, if any.
    ///   - tick: the `tick` option, if any.
    /// - Returns: the error with a reason, or `error`.
    static func explaining(
        _ error: LimiterError, policy: LimiterPolicy, maxKeys: Int? = nil, tick: Duration? = nil
    ) -> LimiterError {
        guard error == .invalidArgument || error == .outOfRange, error.reason == nil else { return error }
        if let problem = policy.problem ?? problem(maxKeys: maxKeys) ?? problem(tick: tick) {
            return LimiterError(problem.code, reason: problem.sentence)
        }
        return error
    }

    /// The problem with a `maxKeys` option, if any: 0 and negative caps are
    /// refused (a cap of 0 would refuse every key; `nil` is "no cap").
    static func problem(maxKeys: Int?) -> (code: LimiterError, sentence: String)? {
        guard let maxKeys, maxKeys < 1 else { return nil }
        return (
            .invalidArgument,
            "Invalid maxKeys (\(maxKeys)): it must be at least 1, or nil for no cap on keys."
        )
    }

    /// The problem with a `tick` option, if any.
    static func problem(tick: Duration?) -> (code: LimiterError, sentence: String)? {
        guard let tick else { return nil }
        if tick <= .zero {
            return (.invalidArgument, "Invalid tick (\(tick)): it must be more than zero (nil for the default).")
        }
        if tick > .seconds(1) {
            return (.invalidArgument, "Invalid tick (\(tick)): it must be at most one second.")
        }
        return nil
    }
}

extension LimiterPolicy {
    /// The first option of this policy that breaks a rule, with the code the
    /// core reports for it and a sentence naming the option and the rule
    /// (`package`: SluiceFleet checks its policies with it).
    package var problem: (code: LimiterError, sentence: String)? {
        func duration(_ name: String, _ value: Duration) -> (code: LimiterError, sentence: String)? {
            if value < .zero {
                return (.invalidArgument, "\(name) (\(value)) is negative; it must be zero or more.")
            }
            if value > LimiterError.longestDuration {
                return (
                    .outOfRange,
                    "\(name) (\(value)) is too long; it may be at most 10^18 nanoseconds (about 31.7 years)."
                )
            }
            return nil
        }
        func count(_ name: String, _ value: Int) -> (code: LimiterError, sentence: String)? {
            if value < 1 { return (.invalidArgument, "\(name) (\(value)) must be at least 1.") }
            if value > LimiterError.largestCount {
                return (.outOfRange, "\(name) (\(value)) is too large; it may be at most 10^12.")
            }
            return nil
        }
        func invalid(
            _ what: String, _ problem: (code: LimiterError, sentence: String)?
        )
            -> (code: LimiterError, sentence: String)?
        {
            problem.map { ($0.code, "Invalid \(what) policy: \($0.sentence)") }
        }
        switch kind {
        case let .throttle(interval, leading, trailing, _):
            if let p = invalid("throttle", duration("interval", interval)) { return p }
            if !leading && !trailing {
                return (
                    .invalidArgument,
                    "Invalid throttle policy: leading and trailing are both false, so nothing would ever be emitted; enable at least one edge."
                )
            }
        case let .audit(interval):
            return invalid("audit", duration("interval", interval))
        case let .debounce(interval, leading, trailing, maxWait):
            if let p = invalid("debounce", duration("interval", interval)) { return p }
            if !leading && !trailing {
                return (
                    .invalidArgument,
                    "Invalid debounce policy: leading and trailing are both false, so nothing would ever be emitted; enable at least one edge."
                )
            }
            if let maxWait {
                if let p = invalid("debounce", duration("maxWait", maxWait)) { return p }
                if maxWait < interval {
                    return (
                        .invalidArgument,
                        "Invalid debounce policy: maxWait (\(maxWait)) is shorter than interval (\(interval)); it must be at least the interval (or nil for no limit)."
                    )
                }
            }
        case let .rate(limit, per, burst):
            if let p = invalid("rate", count("limit", limit)) { return p }
            if per <= .zero {
                return (.invalidArgument, "Invalid rate policy: per (\(per)) must be at least one nanosecond.")
            }
            if let p = invalid("rate", duration("per", per)) { return p }
            if let burst, let p = invalid("rate", count("burst", burst)) { return p }
        }
        return nil
    }
}
