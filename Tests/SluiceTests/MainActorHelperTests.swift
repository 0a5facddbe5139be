import Dispatch
import Foundation
import Testing

@testable import Sluice

/// The main-actor helpers: work isolated to the main actor runs there.
@Suite("MainActorThrottler and MainActorDebouncer")
@MainActor
struct MainActorHelperTests {
    /// State only the main actor may touch.
    @MainActor final class Model {
        var runs: [Int] = []
        var onMainThread: [Bool] = []
    }

    /// Whether the work runs on the main queue (the main actor's executor);
    /// traps otherwise.
    nonisolated static func onMainQueue() -> Bool {
        dispatchPrecondition(condition: .onQueue(.main))
        return true
    }

    /// Lets the main queue run what is queued on it: the main queue is
    /// serial, so a block queued now runs after everything queued before it
    /// (however long a busy machine takes to get there).
    func settle() async {
        await withCheckedContinuation { (done: CheckedContinuation<Void, Never>) in
            DispatchQueue.main.async { done.resume() }
        }
    }

    @Test("throttled work runs on the main actor, in order, after the decision")
    func throttler() async throws {
        let clock = ManualLimiterClock()
        let model = Model()
        let throttler = try MainActorThrottler(interval: .milliseconds(100), scheduler: .manual(clock))
        #expect(
            throttler.call {
                model.runs.append(1); model.onMainThread.append(Self.onMainQueue())
            } == .emitted)
        #expect(model.runs.isEmpty, "queued on the main actor, not run inside call")
        throttler.call { model.runs.append(2) }
        throttler.call {
            model.runs.append(3); model.onMainThread.append(Self.onMainQueue())
        }
        #expect(throttler.isPending)
        clock.advance(by: .milliseconds(100))
        await settle()
        #expect(model.runs == [1, 3])
        #expect(model.onMainThread == [true, true])
    }

    @Test("debounced work runs on the main actor; flush and cancel")
    func debouncer() async throws {
        let clock = ManualLimiterClock()
        let model = Model()
        let debouncer = try MainActorDebouncer(interval: .milliseconds(100), scheduler: .manual(clock))
        debouncer.call { model.runs.append(1) }
        debouncer.call { model.runs.append(2) }
        #expect(debouncer.flush())
        debouncer.call { model.runs.append(3) }
        #expect(debouncer.cancel())
        debouncer.call {
            model.runs.append(4); model.onMainThread.append(Self.onMainQueue())
        }
        clock.advance(by: .milliseconds(100))
        await settle()
        #expect(model.runs == [2, 4])
        #expect(model.onMainThread == [true])
    }
}
