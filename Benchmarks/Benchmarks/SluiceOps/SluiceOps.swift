// Single-operation microbenchmarks for `swift package benchmark`
// (ordo-one/benchmark): the hot calls of sluice-c and sluice-swift, and the
// same call on the Dispatch baselines for contrast.
//
//   cd Benchmarks
//   swift package benchmark                                   # run, print p0…p100
//   swift package benchmark baseline update main              # keep a baseline
//   swift package benchmark baseline compare main             # compare with it
//   swift package benchmark thresholds check                  # the allocation gates (Thresholds/)
//
// Only allocation counts are gated (Thresholds/*.p90.json): they do not
// jitter. Times are shown, never gated (about 20 % noise on shared machines).
import Benchmark
import BenchSuite
import CBench
import Dispatch
import Sluice

/// State built once per benchmark (the `setup:` hook), reused by every iteration.
final class SwiftState: @unchecked Sendable {
    let clock = ManualLimiterClock()
    let limiter: Limiter<Int, Int>
    let keys: [Int]
    let order: [Int32]
    var position = 0

    init(policy: LimiterPolicy, keys n: Int) throws {
        clock.advance(to: LimiterInstant(nanoseconds: 1_000_000))
        limiter = try Limiter<Int, Int>(policy, scheduler: .manual(clock)) { _, v in blackHole(v) }
        var seed: UInt64 = 42
        keys = (0..<n).map { _ in Int(truncatingIfNeeded: cb_rand(&seed) >> 1) }
        order = (0..<65536).map { _ in Int32(truncatingIfNeeded: cb_rand(&seed) % UInt64(n)) }
        for pass in 0..<2 {
            clock.advance(to: LimiterInstant(nanoseconds: 1_000_000 + UInt64(pass)))
            for (i, k) in keys.enumerated() { try limiter.submit(i, for: k) }
        }
    }

    @inline(__always) func next() -> Int {
        let k = keys[Int(order[position])]
        position = (position + 1) & 65535
        return k
    }
}

final class COpState: @unchecked Sendable {
    let op: OpaquePointer
    init(kind: Int32, keys: Int) { op = cb_op_new(kind, keys)! }
    deinit { cb_op_free(op) }
}

let benchmarks: @Sendable () -> Void = {
    Benchmark.defaultConfiguration = .init(
        metrics: [.wallClock, .throughput, .mallocCountTotal],
        scalingFactor: .kilo,
        maxDuration: .seconds(1),
        maxIterations: 10_000)

    // sluice-swift: Limiter<Int, Int> on a manual clock (time does not move while
    // measuring: an advance of the clock is not part of a submit).
    Benchmark("sluice-swift.submit.throttle-hot.1k") { benchmark, state in
        for i in benchmark.scaledIterations { blackHole(try? state.limiter.submit(i, for: state.next())) }
    } setup: {
        try SwiftState(policy: .throttle(interval: .seconds(3600)), keys: 1000)
    }

    Benchmark("sluice-swift.submit.throttle-hot.100k") { benchmark, state in
        for i in benchmark.scaledIterations { blackHole(try? state.limiter.submit(i, for: state.next())) }
    } setup: {
        try SwiftState(policy: .throttle(interval: .seconds(3600)), keys: 100_000)
    }

    Benchmark("sluice-swift.submit.debounce-rearm.100k") { benchmark, state in
        for i in benchmark.scaledIterations { blackHole(try? state.limiter.submit(i, for: state.next())) }
    } setup: {
        try SwiftState(policy: .debounce(interval: .seconds(60)), keys: 100_000)
    }

    Benchmark("sluice-swift.submit.rate-warm.1k") { benchmark, state in
        for i in benchmark.scaledIterations { blackHole(try? state.limiter.submit(i, for: state.next())) }
    } setup: {
        try SwiftState(policy: .rate(limit: 100, per: .seconds(1)), keys: 1000)
    }

    // sluice-c: the core through CSluice (manual clock, 100 ns per call).
    Benchmark("sluice-c.submit.throttle-hot.1k") { benchmark, state in
        blackHole(cb_op_run(state.op, benchmark.scaledIterations.count))
    } setup: {
        COpState(kind: 0, keys: 1000)
    }

    Benchmark("sluice-c.submit.throttle-hot.1M") { benchmark, state in
        blackHole(cb_op_run(state.op, benchmark.scaledIterations.count))
    } setup: {
        COpState(kind: 0, keys: 1_000_000)
    }

    Benchmark("sluice-c.submit.debounce-rearm.100k") { benchmark, state in
        blackHole(cb_op_run(state.op, benchmark.scaledIterations.count))
    } setup: {
        COpState(kind: 1, keys: 100_000)
    }

    Benchmark("sluice-c.submit.rate-warm.1k") { benchmark, state in
        blackHole(cb_op_run(state.op, benchmark.scaledIterations.count))
    } setup: {
        COpState(kind: 2, keys: 1000)
    }

    // The same re-arm on the Dispatch baselines, for contrast (they allocate).
    Benchmark(
        "dispatch-tuned.submit.debounce-rearm.1k",
        configuration: .init(scalingFactor: .one, maxDuration: .seconds(1), maxIterations: 200_000)
    ) { benchmark, state in
        for i in benchmark.scaledIterations { blackHole(state.submit(i)) }
    } setup: {
        BaselineState.tuned(keys: 1000)
    }

    Benchmark(
        "dispatch-naive.submit.debounce-rearm.1k",
        configuration: .init(scalingFactor: .one, maxDuration: .seconds(1), maxIterations: 200_000)
    ) { benchmark, state in
        for i in benchmark.scaledIterations { blackHole(state.submit(i)) }
    } setup: {
        BaselineState.naive(keys: 1000)
    }
}
