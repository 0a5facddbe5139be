import CSluice
import CSluiceLoop

/// The loop binding, `sluice_loop_t`, and the loop layer's clock and thread
/// set-up (`sluice_loop.h`): each C call wrapped once.
@usableFromInline
struct CLoop: @unchecked Sendable {
    // @unchecked: a handle to a thread-safe C object.
    let handle: OpaquePointer

    /// `sluice_loop_start`: a loop on its own thread.
    static func start() throws(LimiterError) -> CLoop {
        var loop: OpaquePointer?
        try LimiterError.check(sluice_loop_start(&loop, nil))
        guard let loop else { throw .outOfMemory }
        return CLoop(handle: loop)
    }

    /// `sluice_loop_attach`: a binding to an `event_base` the caller runs.
    static func attach(to eventBase: OpaquePointer) throws(LimiterError) -> CLoop {
        var loop: OpaquePointer?
        try LimiterError.check(sluice_loop_attach(&loop, eventBase, nil))
        guard let loop else { throw .outOfMemory }
        return CLoop(handle: loop)
    }

    /// `sluice_loop_free`.
    func free() { _ = sluice_loop_free(handle) }
    /// `sluice_loop_base`.
    var eventBase: OpaquePointer { sluice_loop_base(handle)! }
    /// `sluice_loop_in_thread`.
    var isLoopThread: Bool { sluice_loop_in_thread(handle) }

    /// `sluice_clock_now`: the monotonic clock of every loop, in ns.
    @inlinable
    static var now: UInt64 { sluice_clock_now() }

    /// `sluice_threads_init`.
    static func enableLibeventThreads() throws(LimiterError) {
        try LimiterError.check(sluice_threads_init())
    }
}
