import Dispatch
import Testing

@testable import Sluice

/// Counts live `Tracked` values: a value's `deinit` records its release, so
/// a test can tell the exact moment the limiter let go of it.
final class LifetimeTracker: Sendable {
    private let state = Locked<(created: Int, released: [Int])>((0, []))

    func make(_ id: Int) -> Tracked { Tracked(id, self) }

    fileprivate func created() { state.withLock { $0.created += 1 } }
    fileprivate func released(_ id: Int) { state.withLock { $0.released.append(id) } }

    /// Values created and not yet released.
    var alive: Int { state.withLock { $0.created - $0.released.count } }
    /// Ids released so far, in order.
    var releasedIDs: [Int] { state.withLock { $0.released } }
    func isReleased(_ id: Int) -> Bool { state.withLock { $0.released.contains(id) } }
}

/// A value whose release is recorded by its tracker.
final class Tracked: Sendable, CustomStringConvertible {
    let id: Int
    let tracker: LifetimeTracker

    fileprivate init(_ id: Int, _ tracker: LifetimeTracker) {
        self.id = id
        self.tracker = tracker
        tracker.created()
    }

    deinit { tracker.released(id) }

    var description: String { "Tracked(\(id))" }
}

/// Collects deliveries, thread-safely.
final class Recorder<Key: Sendable, Value: Sendable>: Sendable {
    private let items = Locked<[(key: Key, value: Value, at: LimiterInstant?)]>([])

    func add(_ key: Key, _ value: Value, at: LimiterInstant? = nil) {
        items.withLock { $0.append((key, value, at)) }
    }

    var all: [(key: Key, value: Value, at: LimiterInstant?)] { items.withLock { $0 } }
    var values: [Value] { all.map(\.value) }
    var count: Int { items.withLock { $0.count } }

    func take() -> [(key: Key, value: Value, at: LimiterInstant?)] {
        items.withLock { items in
            defer { items.removeAll() }
            return items
        }
    }

    var handler: @Sendable (Key, Value) -> Void { { self.add($0, $1) } }
}

/// Milliseconds on a limiter clock.
func instant(_ milliseconds: UInt64) -> LimiterInstant { LimiterInstant(nanoseconds: milliseconds * 1_000_000) }

/// Waits (polling) until `condition` holds or `timeout` passes. The default
/// is generous: it only bounds a wait for something that must happen, and a
/// sanitized run on a loaded machine can take seconds to get there (the
/// wait ends as soon as the condition holds).
func eventually(
    timeout: Duration = .seconds(30), _ condition: @Sendable () -> Bool
) async -> Bool {
    let deadline = ContinuousClock.now + timeout
    while ContinuousClock.now < deadline {
        if condition() { return true }
        try? await Task.sleep(for: .milliseconds(1))
    }
    return condition()
}

/// Whether calls made on the real clock between `start` (read before the
/// first) and `end` (read after the last) all fell inside one window of
/// `window`. A test on the real clock checks the exact outcome of such a
/// burst (one emission, the others superseded) only when this says so: a
/// busy machine can stall a test longer than any window, and the test then
/// checks only what holds however slow the threads are (order, never early,
/// every value accounted for). Prints a note when the burst was spread.
func insideOneWindow(_ start: LimiterInstant, _ end: LimiterInstant, _ window: Duration, _ what: String) -> Bool {
    let span = start.duration(to: end)
    if span < window { return true }
    print(
        "note: \(what): the calls spanned \(span), more than one \(window) window (a busy machine): "
            + "the one-burst outcome is not checked")
    return false
}
