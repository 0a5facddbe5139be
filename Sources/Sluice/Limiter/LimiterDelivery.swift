import Dispatch

/// Where a ``Limiter`` delivers its emissions.
///
/// Every emission goes through the delivery, whether the value was emitted by
/// the call that submitted it (``LimiterDecision/emitted``) or later by a
/// timer, a flush or a draining close. Deliveries happen in the order the
/// limiter emitted, one at a time, never concurrently, and never while the
/// limiter's lock is held, so a handler may call the limiter again (a submit
/// from a handler respects the window like any other call).
///
/// - ``handler(_:)``: a closure called on the thread that caused the emission
///   (the thread of `submit`, `flush` or `close`, the thread advancing a
///   ``ManualLimiterClock``, or the loop thread for timer emissions). If
///   another thread is delivering at that moment, that thread delivers it
///   next, in order. Keep it short on a loop: a slow handler delays the
///   loop's timers.
/// - ``queue(_:_:)``: the closure runs asynchronously on a `DispatchQueue`,
///   in emission order on a serial queue — the way Dispatch users expect.
/// - ``events(_:)``: like `handler`, but sees every value's fate (emitted,
///   dropped, discarded) with its time; dropped values are then released
///   after the handler saw them.
/// - A stream: ``Limiter/makeStream(_:scheduler:maxKeys:bufferingPolicy:combine:)``
///   returns the limiter with an `AsyncStream` of its emissions.
///
/// Order on an event loop: events the loop reports (timer emissions, values
/// superseded or cancelled) reach the outbox from the loop thread, while a
/// value emitted by its own `submit` reaches it from the submitting thread.
/// A call made on the loop thread sees everything in order. A call from
/// another thread can, in a narrow window, deliver its emitted-now value
/// before the loop delivers an older event of the same key still in flight
/// — for example `flush(k)` followed at once by a `submit` on `k` that is
/// emitted at once, or a debounce with `leading: true` whose trailing
/// emission is due the very moment a new burst starts. On a
/// ``ManualLimiterClock`` the order is always exact.
public struct LimiterDelivery<Key: LimiterKey, Value: Sendable>: Sendable {
    @usableFromInline
    enum Target: Sendable {
        case handler(@Sendable (Key, Value) -> Void)
        case queue(DispatchQueue, @Sendable (Key, Value) -> Void)
        case events(@Sendable (LimiterEvent<Key, Value>) -> Void)
        case stream(AsyncStream<LimiterEmission<Key, Value>>.Continuation)
    }

    @usableFromInline let target: Target

    @usableFromInline
    init(target: Target) {
        self.target = target
    }

    /// Whether dropped and discarded values are delivered too.
    var observesDrops: Bool {
        if case .events = target { return true }
        return false
    }

    /// Calls `body` for every emission, on the thread that caused it (see
    /// ``LimiterDelivery``).
    ///
    /// - Parameter body: receives the key and the value.
    /// - Returns: the delivery.
    public static func handler(_ body: @escaping @Sendable (Key, Value) -> Void) -> LimiterDelivery {
        LimiterDelivery(target: .handler(body))
    }

    /// Runs `body` for every emission on `queue`, asynchronously, in emission
    /// order (on a serial queue, one at a time).
    ///
    /// - Parameters:
    ///   - queue: the target queue.
    ///   - body: receives the key and the value.
    /// - Returns: the delivery.
    public static func queue(
        _ queue: DispatchQueue, _ body: @escaping @Sendable (Key, Value) -> Void
    ) -> LimiterDelivery {
        LimiterDelivery(target: .queue(queue, body))
    }

    /// Calls `body` for every value's fate — emitted, dropped or discarded —
    /// with the time it happened, on the thread that caused it.
    ///
    /// - Parameter body: receives each event.
    /// - Returns: the delivery.
    public static func events(_ body: @escaping @Sendable (LimiterEvent<Key, Value>) -> Void) -> LimiterDelivery {
        LimiterDelivery(target: .events(body))
    }

    /// Performs one delivery (on the draining thread, without the limiter's lock).
    @inlinable
    func deliver(_ event: LimiterEvent<Key, Value>) {
        switch target {
        case let .handler(body):
            if event.kind == .emitted { body(event.key, event.value) }
        case let .queue(queue, body):
            if event.kind == .emitted {
                let key = event.key
                let value = event.value
                queue.async { body(key, value) }
            }
        case let .events(body):
            body(event)
        case let .stream(continuation):
            if event.kind == .emitted {
                continuation.yield(LimiterEmission(key: event.key, value: event.value, at: event.at))
            }
        }
    }

    /// Called once after the last delivery of a closed limiter.
    @inlinable
    func finish() {
        if case let .stream(continuation) = target { continuation.finish() }
    }
}
