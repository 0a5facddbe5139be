/// What a limiter decided about one submitted value, returned at once by
/// ``Limiter/submit(_:for:)``.
///
/// Whatever the decision, the value is accounted for exactly once: an
/// emitted value reaches the delivery (now, or at the scheduled time), and a
/// dropped value is released before `submit` returns. A scheduled value may
/// still be superseded, flushed, cancelled or discarded before its time.
public enum LimiterDecision: Hashable, Sendable, CustomStringConvertible {
    /// Emitted now: the value is delivered (to the handler, the stream or the
    /// queue) as part of this call.
    case emitted
    /// Kept, to be emitted at `at` unless superseded, flushed or cancelled first.
    case scheduled(at: LimiterInstant)
    /// Not emitted and not kept: the value was released before `submit`
    /// returned.
    ///
    /// For ``LimiterPolicy/rate(limit:per:burst:)``, `retryAt` is the earliest
    /// instant at which a call on this key would be admitted (never early:
    /// rounded up to the nanosecond) — what a `Retry-After` header needs. For
    /// the other policies it is the end of the window or wait that
    /// suppressed the call.
    case dropped(retryAt: LimiterInstant)

    /// `emitted`, `scheduled(at: …)` or `dropped(retryAt: …)`.
    public var description: String {
        switch self {
        case .emitted: "emitted"
        case let .scheduled(at): "scheduled(at: \(at))"
        case let .dropped(retryAt): "dropped(retryAt: \(retryAt))"
        }
    }
}

/// A value a limiter emitted: do the work for `key` with `value` now.
public struct LimiterEmission<Key, Value> {
    /// The key.
    public var key: Key
    /// The value (with ``Limiter`` `combine`, the fold of the superseded values).
    public var value: Value
    /// When it was emitted by the specification: the exact deadline for a
    /// timer emission (the loop may run it up to one tick later), otherwise
    /// the instant of the call that emitted it.
    public var at: LimiterInstant

    /// Creates an emission.
    ///
    /// - Parameters:
    ///   - key: the key.
    ///   - value: the value.
    ///   - at: when it was emitted.
    public init(key: Key, value: Value, at: LimiterInstant) {
        self.key = key
        self.value = value
        self.at = at
    }
}

extension LimiterEmission: Sendable where Key: Sendable, Value: Sendable {}

/// Something a limiter did with a value: emitted it, dropped it or discarded it.
///
/// Delivered to a ``LimiterDelivery/events(_:)`` handler, which sees every
/// value exactly once — the way trace runners and audit logs need it.
public struct LimiterEvent<Key, Value> {
    /// What happened to the value.
    public enum Kind: Hashable, Sendable {
        /// The value was emitted: do the work.
        case emitted
        /// The value will never be emitted: superseded, suppressed by a window
        /// or a quota, or cancelled.
        case dropped
        /// The value was pending when the limiter closed without draining (or
        /// was released).
        case discarded
    }

    /// What happened.
    public var kind: Kind
    /// The key.
    public var key: Key
    /// The value.
    public var value: Value
    /// When it happened by the specification: the exact deadline for a timer
    /// emission, otherwise the instant of the call that caused it.
    public var at: LimiterInstant

    /// Creates an event.
    ///
    /// - Parameters:
    ///   - kind: what happened.
    ///   - key: the key.
    ///   - value: the value.
    ///   - at: when it happened.
    public init(kind: Kind, key: Key, value: Value, at: LimiterInstant) {
        self.kind = kind
        self.key = key
        self.value = value
        self.at = at
    }
}

extension LimiterEvent: Sendable where Key: Sendable, Value: Sendable {}
