import Foundation
import Testing

@testable import Sluice

/// Emit-only limiters: a compact limiter on a manual clock whose drops
/// nobody observes creates its core with `emit_only` (no DROP or DISCARD
/// event reaches Swift). What it emits, its decisions and its statistics
/// stay exactly those of a limiter that is told of every drop; a limiter
/// whose delivery observes drops still receives each one.
@Suite("Emit-only limiters")
struct EmitOnlyTests {
    typealias Seen = CompactTests.Seen
    typealias Log = SeenLog<Seen>

    @Test("emit-only exactly when compact, on a manual clock, with nobody observing drops")
    func conditions() throws {
        let clock = ManualLimiterClock()
        let p = LimiterPolicy.debounce(interval: .seconds(1))
        #expect(try Limiter<Int, Int>(p, scheduler: .manual(clock), handler: { _, _ in }).storage.emitOnly)
        #expect(try Limiter<UInt16, Double>(p, scheduler: .manual(clock), handler: { _, _ in }).storage.emitOnly)
        #expect(try Limiter<Int, Int>.makeStream(p, scheduler: .manual(clock)).limiter.storage.emitOnly)
        // Drops observed: every one is reported.
        #expect(try !Limiter<Int, Int>(p, scheduler: .manual(clock), delivery: .events { _ in }).storage.emitOnly)
        // combine folds superseded values: not compact, not emit-only.
        #expect(
            try !Limiter<Int, Int>(p, scheduler: .manual(clock), combine: { $0 + $1 }, handler: { _, _ in })
                .storage.emitOnly)
        // Values that need their slot (release, or too large).
        #expect(try !Limiter<Int, String>(p, scheduler: .manual(clock), handler: { _, _ in }).storage.emitOnly)
        #expect(try !Limiter<Int, (Int, Int)>(p, scheduler: .manual(clock), handler: { _, _ in }).storage.emitOnly)
        #expect(try !Limiter<String, Int>(p, scheduler: .manual(clock), handler: { _, _ in }).storage.emitOnly)
        // A loop engine counts every value's fate itself.
        let loop = try LimiterLoop()
        let onLoop = try Limiter<Int, Int>(p, scheduler: .loop(loop), handler: { _, _ in })
        #expect(onLoop.storage.compact && !onLoop.storage.emitOnly)
    }

    /// The counters that a drop the core does not report must keep.
    static func counters(_ s: LimiterStatistics) -> [Int] {
        [s.admitted, s.scheduled, s.emittedLater, s.dropped, s.discarded, s.pendingValues, s.liveKeys, s.refusedAtCap]
    }

    /// An emit-only limiter and a slot limiter told of every drop (`.events`,
    /// boxed values), same hash seed, under one random sequence of single
    /// and batched calls, flush, cancel, advances and a close: the same
    /// decisions, the same emissions (key, value, time) in the same order,
    /// the same statistics and held values after every step.
    @Test(
        "emits, decides and counts exactly as a limiter told of every drop",
        arguments: CompactTests.policies)
    func differential(policy: LimiterPolicy) throws {
        for seed in UInt64(1)...30 {
            var rng = SeededRandom(state: seed)
            let logA = Log(), logB = Log()
            let dropsB = Locked<Int>(0)
            let twins = try SlotTwins<Int, Int>(
                policy, maxKeys: seed % 5 == 0 ? 3 : nil, seed: (seed &* 0x9E37_79B9_7F4A_7C15, seed ^ 0x5555),
                a: { clock in
                    .handler { k, v in
                        logA.add(
                            Seen(
                                kind: "emitted", key: UInt64(bitPattern: Int64(k)), value: Int64(v),
                                at: clock.now.nanoseconds))
                    }
                },
                b: { clock in
                    .events { e in
                        if e.kind == .emitted {
                            logB.add(
                                Seen(
                                    kind: "emitted", key: UInt64(bitPattern: Int64(e.key)), value: Int64(e.value.value),
                                    at: clock.now.nanoseconds))
                        } else {
                            dropsB.withLock { $0 += 1 }
                        }
                    }
                })
            let emitOnly = twins.a, told = twins.b
            #expect(emitOnly.storage.emitOnly)
            #expect(!told.storage.emitOnly)
            let keys = [Int.min, -7, 0, 3, Int.max]
            var n = 0
            var closed = false
            for step in 0..<150 {
                let at = "seed \(seed) step \(step)"
                let key = keys[rng.next(keys.count)]
                switch rng.next(20) {
                case 0..<10:
                    n += 1
                    twins.submit(n, for: key, at)
                case 10..<13:
                    var items: [(Int, Int)] = []
                    for _ in 0..<(1 + rng.next(40)) {  // past one group of 32
                        n += 1
                        items.append((n, keys[rng.next(keys.count)]))
                    }
                    twins.submit(contentsOf: items, at)
                case 13:
                    twins.flush(key, at)
                case 14:
                    twins.cancel(key, at)
                case 15 where step > 120 && !closed:
                    try twins.close(drain: rng.next(2) == 0)
                    closed = true
                default:
                    twins.advance(by: .milliseconds(rng.next(45)))
                }
                #expect(Self.counters(emitOnly.statistics) == Self.counters(told.statistics), "\(at)")
                #expect(emitOnly.storage.heldValues == told.storage.heldValues, "\(at)")
                #expect(logA.snapshot == logB.snapshot, "\(at): emissions differ")
                if logA.snapshot != logB.snapshot { return }
            }
            if !closed { try twins.close(drain: seed % 2 == 0) }
            let stats = emitOnly.statistics
            #expect(Self.counters(stats) == Self.counters(told.statistics))
            #expect(logA.snapshot == logB.snapshot, "seed \(seed): emissions differ at the end")
            // Every value accounted for: emitted, or counted as dropped or
            // discarded (the slot limiter was told of each of those).
            #expect(stats.admitted + stats.emittedLater == logA.snapshot.count)
            #expect(stats.dropped + stats.discarded == dropsB.withLock { $0 })
            #expect(emitOnly.storage.heldValues == 0)
        }
    }

    /// A compact limiter whose delivery observes drops is not emit-only:
    /// every superseded, cancelled or discarded value is delivered, once.
    @Test("a compact limiter that observes drops receives every drop", arguments: CompactTests.policies)
    func observedDrops(policy: LimiterPolicy) throws {
        let clock = ManualLimiterClock()
        let fates = Locked<[Int: String]>([:])
        let limiter = try Limiter<Int, Int>(
            policy, scheduler: .manual(clock),
            delivery: .events { e in
                fates.withLock { f in
                    #expect(f[e.value] == nil, "value \(e.value) reported twice")
                    f[e.value] = "\(e.kind)"
                }
            })
        #expect(limiter.storage.compact && !limiter.storage.emitOnly)
        var rng = SeededRandom(state: 42)
        var n = 0
        for _ in 0..<400 {
            switch rng.next(10) {
            case 0..<6:
                n += 1
                _ = try limiter.submit(n, for: rng.next(6))
            case 6:
                let items = (0..<(1 + rng.next(40))).map { _ -> (Int, Int) in
                    n += 1
                    return (n, rng.next(6))
                }
                _ = limiter.submit(contentsOf: items)
            case 7:
                _ = try limiter.cancel(rng.next(6))
            default:
                clock.advance(by: .milliseconds(rng.next(30)))
            }
        }
        try limiter.close(drain: false)
        let seen = fates.withLock { $0 }
        let stats = limiter.statistics
        #expect(seen.count == n, "every value's fate reported")
        #expect(seen.values.filter { $0 == "emitted" }.count == stats.admitted + stats.emittedLater)
        #expect(seen.values.filter { $0 == "dropped" }.count == stats.dropped)
        #expect(seen.values.filter { $0 == "discarded" }.count == stats.discarded)
        if !policy.isRate { #expect(stats.dropped > 0) }
    }

    /// The delivery of an emit-only limiter finishes once its core is
    /// closed (no drop or discard event counts the held values down).
    @Test("an emit-only stream finishes after close(drain:) and after release, with values pending")
    func streamFinishes() async throws {
        let clock = ManualLimiterClock()
        for drain in [true, false] {
            let (limiter, emissions) = try Limiter<Int, Int>.makeStream(
                .debounce(interval: .seconds(1)), scheduler: .manual(clock))
            #expect(limiter.storage.emitOnly)
            for i in 0..<20 { try limiter.submit(i, for: i % 5) }  // 15 superseded, 5 pending
            #expect(limiter.storage.heldValues == 5)
            try await limiter.close(drain: drain)
            var got: [Int: Int] = [:]
            for await e in emissions { got[e.key] = e.value }
            #expect(got == (drain ? [0: 15, 1: 16, 2: 17, 3: 18, 4: 19] : [:]))
            #expect(limiter.statistics.dropped == 15)
            #expect(limiter.statistics.discarded == (drain ? 0 : 5))
            #expect(limiter.storage.heldValues == 0)
        }
        // Released with values pending: discarded, and the stream finishes.
        var released: Limiter<Int, Int>? = nil
        let emissions: AsyncStream<Limiter<Int, Int>.Emission>
        (released, emissions) = try Limiter<Int, Int>.makeStream(
            .throttle(interval: .seconds(1)), scheduler: .manual(clock))
        for i in 0..<6 { try released!.submit(i, for: i % 2) }  // 0, 1 emitted; 4, 5 pending
        released = nil
        var values: [Int] = []
        for await e in emissions { values.append(e.value) }
        #expect(values == [0, 1])
    }

    /// A handler that calls its emit-only limiter (a submit, a flush) from
    /// inside a delivery, and a clock advance between: the re-entrant calls
    /// see the same state, and the counters stay exact.
    @Test("re-entrant calls from the handler of an emit-only limiter")
    func reentrant() throws {
        let clock = ManualLimiterClock()
        let got = Locked<[Int]>([])
        let holder = Locked<Limiter<Int, Int>?>(nil)
        let limiter = try Limiter<Int, Int>(.throttle(interval: .milliseconds(10)), scheduler: .manual(clock)) { k, v in
            got.withLock { $0.append(v) }
            if v < 1000, let l = holder.withLock({ $0 }) {
                _ = try? l.submit(v + 1000, for: k)  // within the window: scheduled
                _ = try? l.submit(v + 2000, for: k)  // supersedes it
            }
        }
        holder.withLock { $0 = limiter }
        #expect(limiter.storage.emitOnly)
        try limiter.submit(1, for: 1)
        try limiter.submit(2, for: 2)
        clock.advance(by: .milliseconds(10))
        let seen = got.withLock { $0 }
        #expect(seen.prefix(2) == [1, 2] && seen.dropFirst(2).sorted() == [2001, 2002])
        let s = limiter.statistics
        #expect(s.admitted == 2 && s.scheduled == 4 && s.dropped == 2 && s.emittedLater == 2)
        holder.withLock { $0 = nil }
    }
}
