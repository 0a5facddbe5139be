import CSluiceLoop

/// A libevent event loop that runs limiters' timers: the library's own
/// loop on a thread it owns, or a loop the caller runs.
///
/// Limiters on a loop may be called from any thread: each call reads the
/// clock (`CLOCK_MONOTONIC`) and returns its decision at once; deadlines fire
/// on the loop thread, where timer emissions are delivered. This is the C
/// loop layer (`sluice_loop.h`) seen from Swift.
///
/// - ``shared``: the default loop, started on first use on a thread the
///   library owns, and never stopped. ``LimiterScheduler/default`` uses it.
/// - ``init()``: a loop of your own on a new thread, stopped when released
///   (after the last limiter on it).
/// - ``init(attachingTo:)``: a libevent `event_base` that your program
///   already runs — for embedding limiters into an existing libevent server.
public final class LimiterLoop: @unchecked Sendable {
    // @unchecked: `handle` is set once in init and only read afterwards;
    // the C binding is thread-safe.
    let cLoop: CLoop

    /// The C binding (`sluice_loop_t *`), for the package's other C users
    /// (the fleet limiter lives on a loop).
    package var cHandle: OpaquePointer { cLoop.handle }

    /// The library's default loop: a libevent loop with precise timers on a
    /// thread the library owns, started on first use and never stopped.
    ///
    /// Starting it can only fail when the process is out of memory or
    /// threads, which stops the program.
    public static let shared: LimiterLoop = {
        do {
            return try LimiterLoop()
        } catch {
            fatalError("Sluice: the default loop could not start: \(error)")
        }
    }()

    /// Starts a loop of its own: a libevent base with precise timers, run on
    /// a new thread until this object is released. Every limiter on it keeps
    /// it alive.
    ///
    /// - Throws: ``LimiterError/outOfMemory`` when no base or thread could be created.
    public init() throws(LimiterError) {
        cLoop = try CLoop.start()
    }

    /// Attaches to a libevent `event_base` that the caller created and runs.
    ///
    /// Call it on the thread that runs the base: that thread becomes the
    /// loop thread. Create the base with `EVENT_BASE_FLAG_PRECISE_TIMER` for
    /// timers within about 0.2 ms (libevent's default coarse clock makes them
    /// up to ~4 ms late, never early), and — if other threads will call the
    /// limiters — call `evthread_use_pthreads()` (or
    /// ``enableLibeventThreads()``) before creating it. The base must outlive
    /// this object; releasing this object leaves the base alone.
    ///
    /// - Parameter eventBase: the caller's `struct event_base *`.
    /// - Throws: ``LimiterError/outOfMemory``.
    public init(attachingTo eventBase: OpaquePointer) throws(LimiterError) {
        cLoop = try CLoop.attach(to: eventBase)
    }

    deinit {
        // Every limiter on this loop holds a reference to it, so none remains.
        cLoop.free()
    }

    /// The loop's `struct event_base *`: the caller's base, or the owned one
    /// (on which the caller may add events of its own, from any thread).
    public var eventBase: OpaquePointer {
        cLoop.eventBase
    }

    /// Whether the calling thread is the loop thread.
    public var isLoopThread: Bool {
        cLoop.isLoopThread
    }

    /// Enables libevent's pthreads locking once per process; call it before
    /// creating an `event_base` that other threads will reach through
    /// limiters. The library's own loops do it themselves.
    ///
    /// - Throws: ``LimiterError/outOfMemory`` when libevent could not set up its locks.
    public static func enableLibeventThreads() throws(LimiterError) {
        try CLoop.enableLibeventThreads()
    }

    /// The current time of the loops' clock, `CLOCK_MONOTONIC`.
    public static var now: LimiterInstant {
        LimiterInstant(nanoseconds: CLoop.now)
    }
}
