import CBench
import Dispatch

/// A Dispatch baseline prepared for the package-benchmark microbenchmarks:
/// debounce keys (interval 60 s) all pending, re-armed in random order.
public final class BaselineState: @unchecked Sendable {
    let submitBody: (Int, UInt64) -> Outcome
    let keys: [UInt64]
    let order: [UInt32]
    var position = 0
    let keepAlive: AnyObject

    init<L: DispatchLimiter>(_ type: L.Type, keys n: Int) {
        let limiter = L(
            policy: .debounce(interval: 60 * sec), queue: DispatchQueue(label: "bench.micro"), cap: nil,
            consumer: Consumer(target: .max))
        var seed: UInt64 = 7
        keys = (0..<n).map { _ in cb_rand(&seed) | 1 }
        order = (0..<65536).map { _ in UInt32(truncatingIfNeeded: cb_rand(&seed) % UInt64(n)) }
        for (i, k) in keys.enumerated() { _ = limiter.submit(i, for: k) }
        submitBody = { limiter.submit($0, for: $1) }
        keepAlive = limiter
    }

    public static func tuned(keys: Int) -> BaselineState { BaselineState(DispatchTuned.self, keys: keys) }
    public static func naive(keys: Int) -> BaselineState { BaselineState(DispatchNaive.self, keys: keys) }

    /// One re-arm of a random key; returns whether it was scheduled.
    public func submit(_ value: Int) -> Bool {
        let k = keys[Int(order[position])]
        position = (position + 1) & 65535
        return submitBody(value, k) == .scheduled
    }
}
