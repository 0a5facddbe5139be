import Foundation
import Testing

@testable import Sluice

/// `Limiter.submit(contentsOf:)` and `RateLimiter.check(contentsOf:)` give
/// exactly what single calls give, in order, including for a key that
/// appears several times in one batch.
@Suite("Batched submission")
struct BatchTests {
    /// One recorded event, comparable.
    struct Seen: Equatable, CustomStringConvertible {
        var kind: String
        var key: String
        var value: Int
        var at: UInt64
        var description: String { "\(kind) \(key)=\(value)@\(at)" }

        init(_ e: LimiterEvent<String, Int>) {
            self.init(kind: "\(e.kind)", key: e.key, value: e.value, at: e.at.nanoseconds)
        }

        init(kind: String, key: String, value: Int, at: UInt64) {
            (self.kind, self.key, self.value, self.at) = (kind, key, value, at)
        }
    }

    typealias Log = SeenLog<Seen>
    typealias Rng = SeededRandom

    static let policies: [LimiterPolicy] = [
        .throttle(interval: .milliseconds(30)),
        .throttle(interval: .milliseconds(30), leading: false),
        .audit(interval: .milliseconds(20)),
        .debounce(interval: .milliseconds(25)),
        .debounce(interval: .milliseconds(25), maxWait: .milliseconds(60)),
        .rate(limit: 3, per: .milliseconds(40), burst: 4),
    ]

    @Test("Limiter: random batches equal single calls (every policy, repeated keys, a key cap)", arguments: policies)
    func limiterDifferential(policy: LimiterPolicy) throws {
        for seed in 1...40 {
            var rng = Rng(state: UInt64(seed))
            let maxKeys: Int? = seed % 3 == 0 ? 3 : nil
            let clockA = ManualLimiterClock(), clockB = ManualLimiterClock()
            let logA = Log(), logB = Log()
            let single = try Limiter<String, Int>(
                policy, scheduler: .manual(clockA), maxKeys: maxKeys, delivery: .events { logA.add(Seen($0)) })
            let batched = try Limiter<String, Int>(
                policy, scheduler: .manual(clockB), maxKeys: maxKeys, delivery: .events { logB.add(Seen($0)) })
            var value = 0
            for _ in 0..<40 {
                let step = Duration.milliseconds(rng.next(4) == 0 ? 0 : rng.next(40))
                clockA.advance(by: step)
                clockB.advance(by: step)
                var items: [(Int, String)] = []
                for _ in 0..<(1 + rng.next(rng.next(5) == 0 ? 70 : 8)) {
                    let key = rng.next(6) == 0 ? String(repeating: "k", count: 20 + rng.next(5)) : "key\(rng.next(5))"
                    items.append((value, key))
                    value += 1
                }
                var expected: [Result<LimiterDecision, LimiterError>] = []
                for (v, k) in items {
                    do throws(LimiterError) {
                        expected.append(.success(try single.submit(v, for: k)))
                    } catch { expected.append(.failure(error)) }
                }
                let got = batched.submit(contentsOf: items)
                #expect(got.count == expected.count)
                for (g, e) in zip(got, expected) {
                    switch (g, e) {
                    case let (.success(a), .success(b)): #expect(a == b, "seed \(seed)")
                    case let (.failure(a), .failure(b)): #expect(a.rawValue == b.rawValue, "seed \(seed)")
                    default: Issue.record("seed \(seed): \(g) batched, \(e) one at a time")
                    }
                }
                #expect(logA.snapshot == logB.snapshot, "seed \(seed): events differ")
            }
            clockA.runUntilIdle()
            clockB.runUntilIdle()
            #expect(logA.snapshot == logB.snapshot, "seed \(seed): events differ at the end")
            #expect(single.storage.heldValues == batched.storage.heldValues)
        }
    }

    @Test("Limiter: an empty batch, a too-long key fails alone, a closed limiter fails every call")
    func limiterEdges() throws {
        let clock = ManualLimiterClock()
        let limiter = try Limiter<String, Int>(
            .throttle(interval: .seconds(1)), scheduler: .manual(clock), handler: { _, _ in })
        #expect(limiter.submit(contentsOf: [(Int, String)]()).isEmpty)
        limiter.submit(contentsOf: [(Int, String)]()) { _, _ in Issue.record("no call, no result") }
        let long = String(repeating: "x", count: 2000)
        let r = limiter.submit(contentsOf: [(1, "a"), (2, long), (3, "a")])
        #expect(try r[0].get() == .emitted)
        #expect(throws: LimiterError.self) { try r[1].get() }
        #expect(try r[2].get() == .scheduled(at: instant(1000)))
        try limiter.close(drain: false)
        for result in limiter.submit(contentsOf: [(4, "a"), (5, "b")]) {
            #expect(throws: LimiterError.closed) { try result.get() }
        }
        #expect(limiter.storage.heldValues == 0)
    }

    /// A handler delivery (drops not observed: values dropped at once are
    /// released by the batch itself), with `combine` (superseded values
    /// folded into the newer one) or without (trivial keys and values whose
    /// superseded slots the batch frees after each core call), over more
    /// keys than the value table's cache threshold, in batches of up to
    /// 5000 (several core calls each): the same deliveries in the same
    /// order as single calls, the same decisions, and the closure variant
    /// alike.
    @Test(
        "Limiter: batches with a handler, with and without combine, 20k keys, equal single calls",
        arguments: [false, true], [false, true])
    func limiterHandlerManyKeys(closureVariant: Bool, combining: Bool) throws {
        final class Deliveries: @unchecked Sendable {
            var all: [String] = []
        }
        let policies: [LimiterPolicy] = [
            .throttle(interval: .milliseconds(30)), .debounce(interval: .milliseconds(20), maxWait: .milliseconds(50)),
        ]
        for policy in policies {
            let clockA = ManualLimiterClock(), clockB = ManualLimiterClock()
            let seenA = Deliveries(), seenB = Deliveries()
            var fold: (@Sendable (Int, Int) -> Int)? = nil
            if combining { fold = { @Sendable (a: Int, b: Int) -> Int in a &+ b } }
            let single = try Limiter<UInt64, Int>(
                policy, scheduler: .manual(clockA), combine: fold, handler: { k, v in seenA.all.append("\(k)=\(v)") })
            let batched = try Limiter<UInt64, Int>(
                policy, scheduler: .manual(clockB), combine: fold, handler: { k, v in seenB.all.append("\(k)=\(v)") })
            var rng = Rng(state: 5)
            var value = 1
            for round in 0..<60 {
                let step = Duration.milliseconds(rng.next(3) == 0 ? 0 : rng.next(25))
                clockA.advance(by: step)
                clockB.advance(by: step)
                // Early rounds fill 20k keys (large batches); later ones
                // revisit a few hot keys too.
                let items: [(Int, UInt64)] = (0..<(round < 4 ? 5000 : 1 + rng.next(100))).map { _ in
                    defer { value += 1 }
                    let key = round < 20 || rng.next(2) == 0 ? UInt64(rng.next(20_000)) : UInt64(rng.next(8))
                    return (value, key)
                }
                var expected: [LimiterDecision] = []
                for (v, k) in items { expected.append(try single.submit(v, for: k)) }
                var got: [LimiterDecision] = []
                if closureVariant {
                    var positions: [Int] = []
                    batched.submit(contentsOf: items) { i, result in
                        positions.append(i)
                        if let d = try? result.get() { got.append(d) }
                    }
                    #expect(positions == Array(items.indices))
                } else {
                    got = try batched.submit(contentsOf: items).map { try $0.get() }
                }
                #expect(got == expected, "round \(round)")
                #expect(seenA.all == seenB.all, "round \(round): deliveries differ")
            }
            clockA.runUntilIdle()
            clockB.runUntilIdle()
            #expect(seenA.all == seenB.all)
            #expect(seenA.all.count > 1000)
            #expect(single.storage.heldValues == batched.storage.heldValues)
            #expect(batched.storage.heldValues == 0)
        }
    }

    @Test("Limiter on a loop: batches equal single calls key by key")
    func limiterOnLoop() throws {
        let hour = Duration.seconds(3600)
        let single = try Limiter<String, Int>(.throttle(interval: hour), handler: { _, _ in })
        let batched = try Limiter<String, Int>(.throttle(interval: hour), handler: { _, _ in })
        var rng = Rng(state: 7)
        for round in 0..<50 {
            let items = (0..<(1 + rng.next(100))).map { (round * 1000 + $0, "user:\(rng.next(30))") }
            // The loop's clock moves between the two runs: compare the kinds.
            func kind(_ d: LimiterDecision?) -> Int {
                switch d {
                case .emitted?: return 0
                case .scheduled?: return 1
                case .dropped?: return 2
                default: return -1
                }
            }
            let expected = items.map { kind(try? single.submit($0.0, for: $0.1)) }
            let got = batched.submit(contentsOf: items).map { kind(try? $0.get()) }
            #expect(got == expected)
        }
    }

    @Test("RateLimiter: check(contentsOf:) equals check(_:cost:) one at a time, bad costs fail alone")
    func rateDifferential() throws {
        for scheduler in ["manual", "loop"] {
            let clockA = ManualLimiterClock(), clockB = ManualLimiterClock()
            let per: Duration = scheduler == "manual" ? .milliseconds(100) : .seconds(3600)
            let a = try RateLimiter<String>(
                limit: 3, per: per, burst: 5, scheduler: scheduler == "manual" ? .manual(clockA) : .default)
            let b = try RateLimiter<String>(
                limit: 3, per: per, burst: 5, scheduler: scheduler == "manual" ? .manual(clockB) : .default)
            var rng = Rng(state: 11)
            for _ in 0..<60 {
                if scheduler == "manual" {
                    let step = Duration.milliseconds(rng.next(60))
                    clockA.advance(by: step)
                    clockB.advance(by: step)
                }
                let calls = (0..<(1 + rng.next(40))).map { _ in
                    ("ip\(rng.next(6))", rng.next(10) == 0 ? 0 : 1 + rng.next(6))
                }
                let expected = calls.map { call -> Result<RateDecision, LimiterError> in
                    do throws(LimiterError) { return .success(try a.check(call.0, cost: call.1)) } catch {
                        return .failure(error)
                    }
                }
                let got = b.check(contentsOf: calls)
                for (g, e) in zip(got, expected) {
                    switch (g, e) {
                    case let (.success(x), .success(y)):
                        if scheduler == "manual" {
                            #expect(x == y)
                        } else {
                            #expect(x.isAdmitted == y.isAdmitted && x.remaining == y.remaining)
                        }
                    case let (.failure(x), .failure(y)): #expect(x.rawValue == y.rawValue)
                    default: Issue.record("\(scheduler): \(g) batched, \(e) one at a time")
                    }
                }
                #expect(got.count == expected.count)
            }
            let keysOnly = b.check(contentsOf: ["z", "z", "z", "z", "z", "z"])
            #expect(keysOnly.filter { (try? $0.get())?.isAdmitted == true }.count == 5, "burst 5 of a fresh key")
        }
    }
}
