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
/// - ``handler(_:)``: a closure called on the thread that delivers. On a
///   ``ManualLimiterClock`` that is the thread that caused the emission (the
///   thread of `submit`, `flush` or `close`, or the thread advancing the
///   clock). On a loop it is the loop thread, for every emission — also a
///   value emitted at once by a `submit` — (and the thread that releases the
///   limiter, for what it reports then). If another thread is delivering at
///   that moment, that thread delivers it next, in order. Keep it short on a
///   loop: a slow handler delays the loop's timers.
/// - ``queue(_:_:)``: the closure runs asynchronously on a `DispatchQueue`,
///   in emission order on a serial queue — the way Dispatch users expect.
/// - ``events(_:)``: like `handler`, but sees every value's fate (emitted,
///   dropped, discarded) with its time; dropped values are then released
///   after the handler saw them.
/// - A stream: ``Limiter/makeStream(_:scheduler:maxKeys:bufferingPolicy:combine:)``
///   returns the limiter with an `AsyncStream` of its emissions.
///
/// Order: the values of each key reach the delivery in the order their fates
/// were decided, whichever threads call. On a ``ManualLimiterClock`` every
/// delivery happens in the calls themselves. On an event loop every fate —
/// a timer emission, a value superseded or cancelled, and a value emitted at
/// once by its own `submit` (and, for ``events(_:)``, dropped at once) — is
/// reported by the loop, queued behind the older events of its key, and
/// delivered by the loop thread. So a `submit` from another thread that
/// returns ``LimiterDecision/emitted`` has decided the emission; the value
/// reaches the delivery shortly after, on the loop thread, after any older
/// value of its key still on its way (for example the value a `flush` of the
/// key just emitted, or a debounce's trailing emission that fell due as the
/// call started a new burst). A call made on the loop thread delivers before
/// it returns.
public struct LimiterDelivery<Key: LimiterKey, Value: Sendable>: Sendable {
    @usableFromInline
    enum Target: Sendable {
        case handler(@Sendable (Key, Value) -> Void)
        case queue(DispatchQueue, @Sendable (Key, Value) -> Void)
        case events(@Sendable (LimiterEvent<Key, Value>) -> Void)
        case stream(AsyncStream<LimiterEmission<Key, Value>>.Continuation)
    }

    @usableFromInline let target: Target
    /// The body of a `.handler` target, or nil: the common targets read
    /// without a switch over `Target` per delivery (its layout is only known
    /// at run time, because of the resilient `AsyncStream.Continuation`, so
    /// each switch and copy is a call into the runtime).
    @usableFromInline let handlerBody: (@Sendable (Key, Value) -> Void)?
    /// The body of an `.events` target, or nil.
    @usableFromInline let eventsBody: (@Sendable (LimiterEvent<Key, Value>) -> Void)?

    @usableFromInline
    init(target: Target) {
        self.target = target
        if case let .handler(body) = target { handlerBody = body } else { handlerBody = nil }
        if case let .events(body) = target { eventsBody = body } else { eventsBody = nil }
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
        if let handlerBody {
            if event.kind == .emitted { handlerBody(event.key, event.value) }
            return
        }
        if let eventsBody {
            eventsBody(event)
            return
        }
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
