import Testing

#if canImport(Glibc)
import Glibc
#endif

@testable import Sluice

// The few libevent calls "the application" makes, declared here rather than
// by importing CLibevent: a test module that imports both CLibevent and Glibc
// (or Foundation) fails to build from scratch ("'__fds_bits' from module
// 'SwiftGlibc' is not present in definition of 'fd_set' in module
// 'CLibevent'"). Plain pointer and int signatures, as in <event2/event.h>.
@_silgen_name("event_base_new") private func event_base_new() -> OpaquePointer?
@_silgen_name("event_base_loop") private func event_base_loop(_ base: OpaquePointer, _ flags: Int32) -> Int32
@_silgen_name("event_base_free") private func event_base_free(_ base: OpaquePointer)
private let EVLOOP_NONBLOCK: Int32 = 0x02

/// A libevent loop run by "the application" on its own thread, as a server
/// embedding Sluice would.
final class ApplicationLoop: @unchecked Sendable {
    // @unchecked: `base` and `binding` are set on the loop thread before
    // `state` says ready, and only read after that.
    var base: OpaquePointer?
    var binding: LimiterLoop?
    private let state = Locked<(ready: Bool, stop: Bool, done: Bool)>((false, false, false))
    private var thread = pthread_t()

    func start() {
        let me = Unmanaged.passRetained(self).toOpaque()
        pthread_create(
            &thread, nil,
            { arg in
                let app = Unmanaged<ApplicationLoop>.fromOpaque(arg!).takeRetainedValue()
                app.run()
                return nil
            }, me)
        while !state.withLock({ $0.ready }) { usleep(100) }
    }

    private func run() {
        try! LimiterLoop.enableLibeventThreads()
        base = event_base_new()
        binding = try! LimiterLoop(attachingTo: base!)
        state.withLock { $0.ready = true }
        while !state.withLock({ $0.stop }) {
            _ = event_base_loop(base!, EVLOOP_NONBLOCK)
            usleep(200)
        }
        binding = nil
        event_base_free(base!)
        state.withLock { $0.done = true }
    }

    func finish() {
        state.withLock { $0.stop = true }
        pthread_join(thread, nil)
    }
}

@Suite("Limiter attached to the caller's loop", .serialized)
struct AttachedLoopTests {
    @Test("timer emissions run on the caller's loop thread")
    func attached() async throws {
        let app = ApplicationLoop()
        app.start()
        let onLoop = Locked<[Bool]>([])
        let out = Recorder<String, Int>()
        do {
            let binding = app.binding!
            // 1 s: the two submits for "a" coalesce even when a loaded machine
            // stalls this thread between them (50 ms is not always enough).
            let limiter = try Limiter<String, Int>(.debounce(interval: .seconds(1)), scheduler: .loop(binding)) {
                key, value in
                onLoop.withLock { $0.append(binding.isLoopThread) }
                out.add(key, value)
            }
            #expect(!binding.isLoopThread)
            let start = limiter.now
            try limiter.submit(1, for: "a")
            try limiter.submit(2, for: "a")
            let oneBurst = insideOneWindow(start, limiter.now, .seconds(1), "attached loop")
            try limiter.submit(3, for: "b")
            #expect(
                await eventually {
                    out.all.contains { $0.key == "a" && $0.value == 2 } && out.all.contains { $0.key == "b" }
                })
            let byKey = Dictionary(grouping: out.all, by: \.key).mapValues { $0.map(\.value) }
            if oneBurst {
                #expect(byKey == ["a": [2], "b": [3]])
            } else {
                #expect(byKey["b"] == [3] && (byKey["a"] == [2] || byKey["a"] == [1, 2]))
            }
            #expect(onLoop.withLock { $0 }.allSatisfy { $0 } && onLoop.withLock { $0 }.count == out.count)
            try await limiter.close()
        }
        app.finish()
    }
}
