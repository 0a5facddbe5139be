@testable import Sluice

// Shared by the differential tests (BatchTests, CompactTests), which run one
// random sequence of calls on two limiters and compare what each reported.

/// A deterministic generator of small random numbers (a 64-bit LCG): the
/// same seed gives the same sequence on every run and machine.
struct SeededRandom {
    var state: UInt64

    /// A number in `0..<n`.
    mutating func next(_ n: Int) -> Int {
        state = state &* 6_364_136_223_846_793_005 &+ 1_442_695_040_888_963_407
        return Int((state >> 33) % UInt64(n))
    }
}

/// What a limiter reported, recorded from any thread and read as one array.
final class SeenLog<Seen: Sendable>: Sendable {
    private let items = Locked<[Seen]>([])

    /// Records one report.
    func add(_ seen: Seen) { items.withLock { $0.append(seen) } }

    /// Everything recorded so far, in order.
    var snapshot: [Seen] { items.withLock { $0 } }
}
