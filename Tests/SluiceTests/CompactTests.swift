import Foundation
import Testing

@testable import Sluice

/// Compact limiters (integer keys, trivially copyable values of at most 8
/// bytes, no `combine`: the token is the value, no value slots) behave
/// exactly as limiters that keep their values in slots.
@Suite("Compact limiters")
struct CompactTests {
    /// One event, comparable: kind, key, value, time.
    struct Seen: Equatable, CustomStringConvertible {
        var kind: String
        var key: UInt64
        var value: Int64
        var at: UInt64
        var description: String { "\(kind) \(key)=\(value)@\(at)" }
    }

    typealias Log = SeenLog<Seen>
    typealias Rng = SeededRandom

    static let policies: [LimiterPolicy] = [
        .throttle(interval: .milliseconds(30)),
        .throttle(interval: .milliseconds(30), leading: false),
        .throttle(interval: .milliseconds(30), pick: .first),
        .audit(interval: .milliseconds(20)),
        .debounce(interval: .milliseconds(25)),
        .debounce(interval: .milliseconds(25), leading: true, maxWait: .milliseconds(60)),
        .rate(limit: 3, per: .milliseconds(40), burst: 4),
    ]

    /// A compact limiter and a slot limiter (same keys, boxed values, same
    /// hash seed) under one random sequence of calls: identical events,
    /// decisions and held counts.
    static func differential<K: LimiterKey & FixedWidthInteger, V: FixedWidthInteger & Sendable>(
        _: K.Type, _: V.Type, policy: LimiterPolicy, observeDrops: Bool, seeds: ClosedRange<UInt64>
    ) throws {
        for seed in seeds {
            var rng = Rng(state: seed)
            let logA = Log(), logB = Log()
            let twins = try SlotTwins<K, V>(
                policy, maxKeys: seed % 4 == 0 ? 3 : nil, seed: (seed &* 0x9E37_79B9_7F4A_7C15, seed ^ 0x1234_5678),
                a: { clock in
                    observeDrops
                        ? .events { e in
                            logA.add(
                                Seen(
                                    kind: "\(e.kind)", key: UInt64(truncatingIfNeeded: e.key),
                                    value: Int64(truncatingIfNeeded: e.value), at: e.at.nanoseconds))
                        }
                        : .handler { k, v in
                            logA.add(
                                Seen(
                                    kind: "emitted", key: UInt64(truncatingIfNeeded: k),
                                    value: Int64(truncatingIfNeeded: v), at: clock.now.nanoseconds))
                        }
                },
                b: { clock in
                    observeDrops
                        ? .events { e in
                            logB.add(
                                Seen(
                                    kind: "\(e.kind)", key: UInt64(truncatingIfNeeded: e.key),
                                    value: Int64(truncatingIfNeeded: e.value.value), at: e.at.nanoseconds))
                        }
                        : .handler { k, v in
                            logB.add(
                                Seen(
                                    kind: "emitted", key: UInt64(truncatingIfNeeded: k),
                                    value: Int64(truncatingIfNeeded: v.value), at: clock.now.nanoseconds))
                        }
                })
            let compact = twins.a, slotted = twins.b
            #expect(compact.storage.compact)
            #expect(!slotted.storage.compact)
            // Keys spread over the type's range (negative ones included),
            // values too (the extremes).
            let keys: [K] = (0..<5).map { i in
                i == 0 ? K.min : i == 1 ? K.max : K(truncatingIfNeeded: Int64(i) &* -0x1F3D_5B79)
            }
            func value(_ i: Int) -> V {
                i % 7 == 0 ? V.min : i % 11 == 0 ? V.max : V(truncatingIfNeeded: i &* 2_654_435_761)
            }
            var n = 0
            var closed = false
            for step in 0..<120 {
                let at = "seed \(seed) step \(step)"
                let op = rng.next(20)
                let key = keys[rng.next(keys.count)]
                switch op {
                case 0..<10:
                    n += 1
                    twins.submit(value(n), for: key, at)
                case 10..<12:
                    var items: [(V, K)] = []
                    for _ in 0..<(1 + rng.next(12)) {
                        n += 1
                        items.append((value(n), keys[rng.next(keys.count)]))
                    }
                    twins.submit(contentsOf: items, at)
                case 12:
                    twins.flush(key, at)
                case 13:
                    twins.cancel(key, at)
                case 14:
                    twins.pending(key, at)
                case 15 where step > 90 && !closed:
                    try twins.close(drain: rng.next(2) == 0)
                    closed = true
                default:
                    twins.advance(by: .milliseconds(rng.next(45)))
                }
                #expect(compact.storage.heldValues == slotted.storage.heldValues, "\(at)")
                #expect(logA.snapshot == logB.snapshot, "\(at): events differ")
                if logA.snapshot != logB.snapshot { return }
            }
            twins.runUntilIdle()
            if !closed { try twins.close(drain: seed % 2 == 0) }
            #expect(logA.snapshot == logB.snapshot, "seed \(seed): events differ at the end")
            #expect(compact.storage.heldValues == 0 && slotted.storage.heldValues == 0)
        }
    }

    @Test("Limiter<Int, Int> equals a slot limiter (emissions only)", arguments: policies)
    func intInt(policy: LimiterPolicy) throws {
        try Self.differential(Int.self, Int.self, policy: policy, observeDrops: false, seeds: 1...25)
    }

    @Test("Limiter<Int, Int> equals a slot limiter (observed drops)", arguments: policies)
    func intIntEvents(policy: LimiterPolicy) throws {
        try Self.differential(Int.self, Int.self, policy: policy, observeDrops: true, seeds: 1...25)
    }

    @Test("Limiter<UInt32, Int16> and <Int8, UInt8>, <UInt64, Int64> equal slot limiters", arguments: policies)
    func otherWidths(policy: LimiterPolicy) throws {
        try Self.differential(UInt32.self, Int16.self, policy: policy, observeDrops: true, seeds: 1...10)
        try Self.differential(Int8.self, UInt8.self, policy: policy, observeDrops: true, seeds: 11...20)
        try Self.differential(UInt64.self, Int64.self, policy: policy, observeDrops: false, seeds: 21...30)
        try Self.differential(Int16.self, Int32.self, policy: policy, observeDrops: true, seeds: 31...40)
    }

    @Test("compact mode only for integer keys, small trivial values, no combine")
    func conditions() throws {
        let clock = ManualLimiterClock()
        let p = LimiterPolicy.throttle(interval: .seconds(1))
        #expect(try Limiter<Int, Int>(p, scheduler: .manual(clock), handler: { _, _ in }).storage.compact)
        #expect(try Limiter<UInt8, Double>(p, scheduler: .manual(clock), handler: { _, _ in }).storage.compact)
        #expect(try Limiter<Int, (Int32, Int32)>(p, scheduler: .manual(clock), handler: { _, _ in }).storage.compact)
        #expect(try !Limiter<Int, (Int, Int)>(p, scheduler: .manual(clock), handler: { _, _ in }).storage.compact)
        #expect(try !Limiter<Int, String>(p, scheduler: .manual(clock), handler: { _, _ in }).storage.compact)
        #expect(try !Limiter<String, Int>(p, scheduler: .manual(clock), handler: { _, _ in }).storage.compact)
        #expect(
            try !Limiter<Int, Int>(p, scheduler: .manual(clock), combine: { $0 + $1 }, handler: { _, _ in })
                .storage.compact)
        #expect(try !Limiter<CompositeKey, Int>(p, scheduler: .manual(clock), handler: { _, _ in }).storage.compact)
    }

    @Test("a compact tuple value and a Double survive the trip through the token")
    func valuesRoundTrip() throws {
        let clock = ManualLimiterClock()
        let got = Locked<[(Int, Int32, Int32)]>([])
        let limiter = try Limiter<Int, (Int32, Int32)>(
            .throttle(interval: .seconds(1), leading: false), scheduler: .manual(clock),
            handler: { k, v in got.withLock { $0.append((k, v.0, v.1)) } })
        #expect(limiter.storage.compact)
        try limiter.submit((-1, 7), for: -5)
        try limiter.submit((Int32.min, Int32.max), for: Int.min)
        #expect(limiter.storage.heldValues == 2)
        clock.advance(by: .seconds(1))
        let seen = got.withLock { $0 }.sorted { $0.0 < $1.0 }
        #expect(seen.count == 2)
        #expect(seen[0] == (Int.min, Int32.min, Int32.max))
        #expect(seen[1] == (-5, -1, 7))
        #expect(limiter.storage.heldValues == 0)
    }

    @Test("a compact stream finishes after close, once every held value is delivered")
    func streamFinishesAfterClose() async throws {
        let clock = ManualLimiterClock()
        let (limiter, emissions) = try Limiter<Int, Int>.makeStream(
            .throttle(interval: .seconds(1), leading: false), scheduler: .manual(clock))
        #expect(limiter.storage.compact)
        for i in 0..<10 { try limiter.submit(i, for: i % 4) }
        #expect(limiter.storage.heldValues == 4)
        try await limiter.close(drain: true)
        var got: [Int: Int] = [:]
        for await e in emissions { got[e.key] = e.value }  // finishes: nothing held after close
        #expect(got == [0: 8, 1: 9, 2: 6, 3: 7])
        #expect(limiter.storage.heldValues == 0)

        let (discarding, stream) = try Limiter<Int, Int>.makeStream(
            .debounce(interval: .seconds(1)), scheduler: .manual(clock))
        for i in 0..<5 { try discarding.submit(i, for: i) }
        try await discarding.close(drain: false)
        var count = 0
        for await _ in stream { count += 1 }
        #expect(count == 0)
        #expect(discarding.storage.heldValues == 0)
    }

    @Test("a compact limiter on a real loop: each key's values in order, nothing held after close")
    func onLoop() async throws {
        let loop = try LimiterLoop()
        for observe in [false, true] {
            let log = Log()
            let delivery: LimiterDelivery<Int, Int> =
                observe
                ? .events { e in
                    log.add(
                        Seen(kind: "\(e.kind)", key: UInt64(bitPattern: Int64(e.key)), value: Int64(e.value), at: 0))
                }
                : .handler { k, v in
                    log.add(Seen(kind: "emitted", key: UInt64(bitPattern: Int64(k)), value: Int64(v), at: 0))
                }
            // Leading emissions at once, trailing ones 20 ms later: order per
            // key is what is checked, not timing.
            let limiter = try Limiter<Int, Int>(
                .throttle(interval: .milliseconds(20)), scheduler: .loop(loop), delivery: delivery)
            #expect(limiter.storage.compact)
            let keys = [-3, 0, 7, Int.max, Int.min]
            var submitted = 0
            for round in 0..<30 {
                for (j, k) in keys.enumerated() {
                    try limiter.submit(round * 10 + j, for: k)
                    submitted += 1
                }
                let batch = keys.map { (round * 10 + 5, $0) }
                _ = limiter.submit(contentsOf: batch)
                submitted += batch.count
                if round % 10 == 9 { try await Task.sleep(for: .milliseconds(30)) }
            }
            try await limiter.close(drain: true)
            #expect(await eventually { limiter.storage.heldValues == 0 })
            let seen = log.snapshot
            for (j, k) in keys.enumerated() {
                let key = UInt64(bitPattern: Int64(k))
                let values = seen.filter { $0.key == key && $0.kind == "emitted" }.map(\.value)
                #expect(!values.isEmpty)
                #expect(values == values.sorted(), "key \(k): emitted in order")
                #expect(values.allSatisfy { $0 % 10 == Int64(j) || $0 % 10 == 5 }, "key \(k): its own values")
                #expect(values.last == 295, "key \(k): the last value emitted by the draining close")
            }
            if observe {
                #expect(seen.count == submitted, "every value reported once")
                #expect(!seen.contains { $0.kind == "discarded" })
            }
        }
    }

    @Test("concurrent submitters on a compact loop limiter: every value accounted for once", arguments: [false, true])
    func concurrentOnLoop(observe: Bool) async throws {
        let counts = Locked<[String: Int]>([:])
        let delivery: LimiterDelivery<Int, Int> =
            observe
            ? .events { e in counts.withLock { $0["\(e.kind)", default: 0] += 1 } }
            : .handler { _, _ in counts.withLock { $0["emitted", default: 0] += 1 } }
        let limiter = try Limiter<Int, Int>(
            .debounce(interval: .milliseconds(2), maxWait: .milliseconds(5)), delivery: delivery)
        #expect(limiter.storage.compact)
        let threads = 4, perThread = 3_000
        await withTaskGroup(of: Void.self) { group in
            for t in 0..<threads {
                group.addTask {
                    for i in 0..<perThread {
                        _ = try! limiter.submit(t * perThread + i, for: (i * 7 + t) % 32)
                        if i % 500 == 0 { _ = limiter.submit(contentsOf: [(-1, i % 32), (-1, (i + 1) % 32)]) }
                        if i % 700 == 0 { try! limiter.cancel(i % 32) }
                        if i % 900 == 0 { try! limiter.flush(i % 32) }
                    }
                }
            }
        }
        try await limiter.close(drain: true)
        #expect(limiter.storage.heldValues == 0)
        let total = counts.withLock { $0.values.reduce(0, +) }
        if observe {
            #expect(total == threads * perThread + threads * 2 * (perThread / 500))
            #expect(counts.withLock { $0["discarded"] } == nil)
        } else {
            #expect(total > 0 && total <= threads * perThread + threads * 2 * (perThread / 500))
        }
    }
}
