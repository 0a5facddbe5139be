#if NIO
import NIOCore
import Sluice

/// A SwiftNIO `EventLoop` as the time and timers of a limiter: a
/// ``Sluice/LimiterTimerHost`` whose clock is the loop's `now` and whose
/// wake-ups are the loop's scheduled tasks.
///
/// Each limiter keeps at most one task scheduled on the loop, at its next
/// deadline, and replaces it only when that deadline moves earlier. Calls
/// may come from any thread (any loop of the group); deadlines fire, and a
/// ``Sluice/Limiter``'s emissions are delivered, on this loop's thread.
/// Sluice starts no thread of its own.
///
/// On an `EmbeddedEventLoop` or a `NIOAsyncTestingEventLoop`, time moves only
/// with `advanceTime`: limiters decide exactly as on a
/// ``Sluice/ManualLimiterClock``.
public struct EventLoopTimerHost: LimiterTimerHost {
    /// The loop.
    public let eventLoop: any EventLoop

    /// A host on `eventLoop`.
    ///
    /// - Parameter eventLoop: the loop whose clock and tasks the limiter uses.
    public init(_ eventLoop: any EventLoop) {
        self.eventLoop = eventLoop
    }

    /// The loop's `now`, in nanoseconds (its uptime clock; an embedded loop's own time).
    public var nowNanoseconds: UInt64 { eventLoop.now.uptimeNanoseconds }

    /// Schedules `body` as a task of the loop at `deadline`.
    ///
    /// - Parameters:
    ///   - deadline: nanoseconds on the clock of ``nowNanoseconds``.
    ///   - body: runs on the loop.
    /// - Returns: the task, as a cancellable wake-up.
    public func scheduleWakeUp(at deadline: UInt64, _ body: @escaping @Sendable () -> Void) -> any LimiterWakeUp {
        let clamped = min(deadline, UInt64(Int64.max))
        let task = eventLoop.scheduleTask(deadline: .uptimeNanoseconds(clamped)) { body() }
        return ScheduledWakeUp(task: task)
    }
}

/// A scheduled task of the loop as a ``Sluice/LimiterWakeUp``.
struct ScheduledWakeUp: LimiterWakeUp {
    let task: Scheduled<Void>
    func cancel() { task.cancel() }
}

extension LimiterScheduler {
    /// Runs the limiter on a SwiftNIO event loop (see ``EventLoopTimerHost``):
    /// its clock is the loop's, its deadlines are tasks of the loop, and a
    /// ``Sluice/Limiter``'s emissions are delivered on the loop's thread.
    ///
    /// In a server, give a `RateLimiter` one of the server's own loops: on
    /// Sluice's default loop (`LimiterScheduler.default`) a decision that
    /// creates a key wakes Sluice's loop thread, and the example servers
    /// answered about 30% fewer requests per second that way
    /// (docs/servers.md, "Cost of the middleware").
    ///
    /// ```swift
    /// let loop = group.next()
    /// let limiter = try Limiter<String, Int>(
    ///     .debounce(interval: .milliseconds(200)), scheduler: .eventLoop(loop)
    /// ) { key, value in save(key, value) }   // runs on `loop`
    /// ```
    ///
    /// - Parameter eventLoop: the loop.
    /// - Returns: the scheduler.
    public static func eventLoop(_ eventLoop: any EventLoop) -> LimiterScheduler {
        .external(EventLoopTimerHost(eventLoop))
    }
}
#endif
