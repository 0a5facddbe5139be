import CSluiceFleet
import Sluice

/// One emission of a ``FleetTimedLimiter``, handed to this process to do its
/// work: a trailing edge, a flushed value or a drained one.
///
/// The delivery is leased to this process for the limiter's
/// ``FleetTimedLimiter/Options/lease``. Do the work, then
/// ``acknowledge()``. A delivery that is not acknowledged in time (the
/// process died, hung or lost Redis) is delivered again, to this process or
/// another, with the same ``generation`` and a later ``attempt``: delivery
/// is at least once. Record the generation your effect applied per key (a
/// column, a header of the webhook) to make it exactly once.
public struct FleetDelivery<Value: FleetPayload>: Sendable {
    /// The key.
    public let key: String
    /// The value emitted.
    public let value: Value
    /// Strictly increasing per key, the same on every redelivery of this
    /// emission: a fencing token for the handler's effect.
    public let generation: UInt64
    /// 1 at the first delivery; one more each time it is delivered again.
    public let attempt: Int
    /// When it was emitted by the rules: Unix time in nanoseconds on Redis's
    /// clock (the deadline, or the time of the flush or of the draining close).
    public let emittedAt: UInt64

    let partition: UInt32
    let limiter: TimedHandle

    /// Marks the delivery done: it is forgotten, and never delivered again.
    /// Acknowledging it again is harmless within a lease period (Redis
    /// remembers an acknowledgement for one to two lease periods); after
    /// that, a repeat throws ``Sluice/LimiterError/leaseLost``.
    ///
    /// - Throws: ``Sluice/LimiterError/leaseLost`` when this attempt no
    ///   longer holds it (its lease ended: another attempt holds it or
    ///   acknowledged it), the connection's error (``Sluice/LimiterError/notConnected``,
    ///   ``Sluice/LimiterError/timedOut``, …) when Redis could not confirm it
    ///   (it is then delivered again after its lease), ``Sluice/LimiterError/closed``.
    public func acknowledge() async throws(LimiterError) {
        try await limiter.lease(SLUICE_FLEET_TIMED_ACK, self.cDelivery)
    }

    /// Hands the delivery back at once, for this or another process to
    /// deliver again (the same generation, the next attempt), instead of
    /// after its lease: for work that failed and should be retried.
    ///
    /// - Throws: as ``acknowledge()``.
    public func release() async throws(LimiterError) {
        try await limiter.lease(SLUICE_FLEET_TIMED_RELEASE, self.cDelivery)
    }

    var cDelivery: sluice_fleet_delivery_t {
        var d = sluice_fleet_delivery_t()
        d.generation = generation
        d.attempt = UInt32(clamping: attempt)
        d.partition = partition
        return d
    }
}
