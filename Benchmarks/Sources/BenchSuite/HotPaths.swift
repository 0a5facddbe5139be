import CBench
import Sluice

/// One call of each Swift per-call path that `sluice-swift` measures, each
/// in a function of its own (never inlined), specialized as in the
/// scenarios: their disassembly is the code a call runs, counted by
/// `tools/hot-atomics.py` (docs/benchmarks.md, "Atomic operations per
/// call"). Nothing calls them.
public enum HotPaths {
    /// `Limiter.submit` of throttle-hot, debounce-rearm and fire (a manual
    /// clock), and of lateness (a loop): the same specialization, the
    /// engine chosen at run time.
    @inline(never)
    public static func submit(_ limiter: Limiter<UInt64, Int>, _ value: Int, for key: UInt64) -> Bool {
        (try? limiter.submit(value, for: key)) != nil
    }

    /// `Limiter.submit(contentsOf:_:)` of sluice-swift-batch.
    @inline(never)
    public static func submitBatch(_ limiter: Limiter<UInt64, Int>, _ items: [(Int, UInt64)]) {
        limiter.submit(contentsOf: items) { _, _ in }
    }

    /// `RateLimiter.check` of threads (a loop), or on a manual clock.
    @inline(never)
    public static func check(_ limiter: RateLimiter<UInt64>, _ key: UInt64) -> Bool {
        (try? limiter.check(key))?.isAdmitted == true
    }
}

extension HotPaths {
    /// The paths ``drive(_:calls:keys:)`` runs.
    public static let names = [
        "submit-manual", "submit-loop", "submit-loop-drop", "submit-batch", "check-loop", "check-manual",
    ]

    /// Calls one path `calls` times on `keys` keys, each key used once
    /// before (a key with state: the everyday call), as the scenarios do:
    /// throttle-hot's limiter (a throttle of an hour, the handler
    /// delivery) on a manual clock or a loop (submit-loop-drop: a rate
    /// limiter's drops on a loop), and threads' rate limiter.
    /// For `valgrind --tool=callgrind --toggle-collect='*HotPaths*'`: the
    /// costs then collected are those of the calls alone. Returns the calls
    /// that succeeded.
    public static func drive(_ name: String, calls: Int, keys: Int) throws -> Int {
        var seed: UInt64 = 7
        let keyList = (0..<keys).map { _ in cb_rand(&seed) | 1 }
        var ok = 0
        switch name {
        case "submit-manual", "submit-loop", "submit-loop-drop", "submit-batch":
            let consumer = Consumer(target: .max)
            let clock = ManualLimiterClock()
            clock.advance(to: LimiterInstant(nanoseconds: manualT0))
            let loop = name.hasPrefix("submit-loop") ? try LimiterLoop() : nil
            let scheduler: LimiterScheduler = loop.map { .loop($0) } ?? .manual(clock)
            // submit-loop-drop: a rate of one call an hour, every later call dropped at once.
            let policy: LimiterPolicy =
                name == "submit-loop-drop" ? .rate(limit: 1, per: .seconds(3600)) : .throttle(interval: .seconds(3600))
            let limiter = try Limiter<UInt64, Int>(policy, scheduler: scheduler) {
                _, v in consumer.consume(v)
            }
            for (i, k) in keyList.enumerated() { try limiter.submit(i, for: k) }
            if name == "submit-batch" {
                let items = (0..<32).map { j in (j, keyList[j % keys]) }
                for _ in 0..<(calls / 32) {
                    submitBatch(limiter, items)
                    ok += 32
                }
            } else {
                for i in 0..<calls where submit(limiter, i, for: keyList[i % keys]) { ok += 1 }
            }
            try limiter.close(drain: false)
        default:
            let clock = ManualLimiterClock()
            clock.advance(to: LimiterInstant(nanoseconds: manualT0))
            let loop = name == "check-loop" ? try LimiterLoop() : nil
            let scheduler: LimiterScheduler = loop.map { .loop($0) } ?? .manual(clock)
            let limiter = try RateLimiter<UInt64>(.rate(limit: 100, per: .seconds(1)), scheduler: scheduler)
            for k in keyList { _ = try limiter.check(k) }
            for i in 0..<calls where check(limiter, keyList[i % keys]) { ok += 1 }
        }
        return ok
    }
}
