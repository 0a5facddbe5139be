import Dispatch
import Foundation
import Testing

@testable import Sluice

@Suite("Limiter on a manual clock")
struct LimiterTests {
    // Decisions, operations, combine, streams and drops on a manual clock are the
    // engine-generic behaviour suite (Behaviour/BehaviourCases.swift), run on this
    // clock by BehaviourOnManualClock.swift and on the NIO engine by NIOEngineTests.swift.

    // MARK: Errors

    @Test("invalid configurations throw when the limiter is created")
    func invalidConfigurations() {
        let clock = ManualLimiterClock()
        let invalid: [(LimiterPolicy, LimiterError)] = [
            (.throttle(interval: .milliseconds(-1)), .invalidArgument),
            (.throttle(interval: .seconds(1), leading: false, trailing: false), .invalidArgument),
            (.debounce(interval: .seconds(1), leading: false, trailing: false), .invalidArgument),
            (.debounce(interval: .seconds(2), maxWait: .seconds(1)), .invalidArgument),
            (.rate(limit: 0, per: .seconds(1)), .invalidArgument),
            (.rate(limit: 1, per: .zero), .invalidArgument),
            (.rate(limit: 1, per: .seconds(1), burst: 0), .invalidArgument),
            (.audit(interval: .seconds(40 * 365 * 86_400)), .outOfRange),
        ]
        for (policy, error) in invalid {
            #expect(throws: error, "\(policy)") {
                try Limiter<Int, Int>(policy, scheduler: .manual(clock)) { _, _ in }
            }
        }
        #expect(throws: LimiterError.invalidArgument) {
            try Limiter<Int, Int>(
                .audit(interval: .seconds(1)), scheduler: .manual(clock), maxKeys: -1,
                delivery: .handler { _, _ in })
        }
        #expect(throws: LimiterError.invalidArgument) {
            try Limiter<Int, Int>(
                .audit(interval: .seconds(1)), scheduler: .manual(clock), tick: .zero,
                delivery: .handler { _, _ in })
        }
    }

    @Test("too long keys and a full limiter throw; the value is not taken")
    func keyErrors() throws {
        let clock = ManualLimiterClock()
        let tracker = LifetimeTracker()
        let limiter = try Limiter<String, Tracked>(
            .debounce(interval: .seconds(1)), scheduler: .manual(clock), maxKeys: 2, delivery: .handler { _, _ in })
        try limiter.submit(tracker.make(1), for: String(repeating: "k", count: 1024))
        #expect(throws: LimiterError.keyTooLong) {
            try limiter.submit(tracker.make(2), for: String(repeating: "k", count: 1025))
        }
        #expect(tracker.isReleased(2))
        try limiter.submit(tracker.make(3), for: "b")
        #expect(throws: LimiterError.full) { try limiter.submit(tracker.make(4), for: "c") }
        #expect(tracker.isReleased(4))
        #expect(limiter.statistics.refusedKeys == 1)
        #expect(limiter.statistics.keys == 2)
        #expect(limiter.statistics.pendingValues == 2)
        #expect(throws: LimiterError.keyTooLong) { try limiter.pending(String(repeating: "k", count: 2000)) }
        try limiter.close(drain: false)
        #expect(tracker.alive == 0)
    }

    // MARK: Keys

    struct TenantID: LimiterKey, Hashable {
        var rawValue: UInt64
        func withLimiterKeyIdentity<R>(_ body: (LimiterKeyIdentity) -> R) -> R { body(.integer(rawValue)) }
    }

    enum Channel: String, LimiterKey { case email, sms }

    /// Submits one value per key at time 0 on a debounce limiter: had two
    /// keys shared state, the second would supersede the first.
    func distinct<Key: LimiterKey>(_ keys: [Key]) throws -> Int {
        let clock = ManualLimiterClock()
        let limiter = try Limiter<Key, Int>(.debounce(interval: .seconds(1)), scheduler: .manual(clock)) { _, _ in }
        for (i, key) in keys.enumerated() {
            #expect(try limiter.submit(i, for: key) == .scheduled(at: instant(1000)))
        }
        return limiter.statistics.keys
    }

    @Test("keys are exact for every key type")
    func exactKeys() throws {
        #expect(try distinct([0, 1, -1, Int.max, Int.min]) == 5)
        #expect(try distinct([UInt64(0), 1, .max]) == 3)
        // Canonically equivalent strings ("é", "e\u{301}") are one key (KeyTests).
        #expect(try distinct(["", "\0", "\0\0", "a", "a\0", "é", "e\u{301}"]) == 6)
        #expect(try distinct([[], [0], [0, 0], [1], [0, 1]] as [[UInt8]]) == 5)
        #expect(try distinct([UUID(), UUID(), UUID()]) == 3)
        #expect(try distinct([TenantID(rawValue: 1), TenantID(rawValue: 2)]) == 2)
        #expect(try distinct([Channel.email, .sms]) == 2)
        #expect(try distinct(["abc".dropFirst(), "bc".dropLast(), "b"[...]] as [Substring]) == 2 + 1 - 1)
    }

    @Test("a Substring, a String and their UTF-8 bytes are the same identity")
    func sameIdentity() {
        func identity(_ key: some LimiterKey) -> CoreKey { CoreKey(key: key) }
        #expect(identity("héllo") == identity(Array("héllo".utf8)))
        #expect(identity("<héllo>".dropFirst().dropLast()) == identity("héllo"))
        #expect(identity(Array("abc".utf8)[1...]) == identity("bc"))
        let uuid = UUID()
        #expect(identity(uuid) == .bytes(withUnsafeBytes(of: uuid.uuid) { Array($0) }))
        #expect(identity(42) == .u64(42))
        #expect(identity(Int8(-1)) == .u64(255))
        #expect(identity(Channel.sms) == identity("sms"))
        #expect(identity(UInt64(7)) != identity([UInt8](repeating: 0, count: 7) + [7]))
    }

    // MARK: Deliveries

    @Test("a released limiter finishes its stream")
    func streamFinishesOnRelease() async throws {
        let clock = ManualLimiterClock()
        var limiter: Limiter<Int, Int>?
        let emissions: AsyncStream<LimiterEmission<Int, Int>>
        (limiter, emissions) = try Limiter<Int, Int>.makeStream(
            .debounce(interval: .seconds(1)), scheduler: .manual(clock))
        try limiter!.submit(1, for: 1)
        limiter = nil
        var count = 0
        for await _ in emissions { count += 1 }
        #expect(count == 0, "pending values are discarded, not emitted")
    }

    @Test("queue delivery runs on the queue in order; async close waits for it")
    func queueDelivery() async throws {
        let clock = ManualLimiterClock()
        let queue = DispatchQueue(label: "sluice.test.delivery")
        let key = DispatchSpecificKey<Bool>()
        queue.setSpecific(key: key, value: true)
        let out = Recorder<Int, Int>()
        let limiter = try Limiter<Int, Int>(
            .throttle(interval: .milliseconds(10)), scheduler: .manual(clock),
            delivery: .queue(queue) { k, v in
                #expect(DispatchQueue.getSpecific(key: key) == true)
                usleep(1000)
                out.add(k, v)
            })
        for i in 0..<20 {
            clock.advance(by: .milliseconds(3))
            try limiter.submit(i, for: i % 2)
        }
        try await limiter.close()
        let values = out.values
        #expect(values.count > 4)
        for parity in 0...1 {
            let mine = values.filter { $0 % 2 == parity }
            #expect(mine == mine.sorted())
        }
        #expect(values.last == 19 || values.last == 18)
    }

    // MARK: Value lifetimes

    @Test("every dropped or discarded value is released at that moment")
    func lifetimes() throws {
        let clock = ManualLimiterClock()
        let tracker = LifetimeTracker()
        let delivered = Recorder<Int, Int>()
        var limiter: Limiter<Int, Tracked>? = try Limiter<Int, Tracked>(
            .throttle(interval: .milliseconds(100)), scheduler: .manual(clock)
        ) { key, value in
            delivered.add(key, value.id)
        }

        // Leading: delivered during submit, then released (the handler keeps nothing).
        #expect(try limiter!.submit(tracker.make(1), for: 1) == .emitted)
        #expect(tracker.isReleased(1))
        // Kept, then superseded: released inside the submit that superseded it.
        try limiter!.submit(tracker.make(2), for: 1)
        #expect(!tracker.isReleased(2))
        try limiter!.submit(tracker.make(3), for: 1)
        #expect(tracker.isReleased(2))
        #expect(!tracker.isReleased(3))
        // Emitted by the timer: released after delivery.
        clock.advance(to: instant(100))
        #expect(tracker.isReleased(3))
        #expect(delivered.values == [1, 3])
        // Cancelled: released inside cancel.
        try limiter!.submit(tracker.make(4), for: 1)
        try limiter!.cancel(1)
        #expect(tracker.isReleased(4))
        // Pending when the limiter is released: discarded, released.
        try limiter!.submit(tracker.make(5), for: 2)
        try limiter!.submit(tracker.make(6), for: 2)
        #expect(tracker.alive == 1)
        limiter = nil
        #expect(tracker.alive == 0)
        #expect(delivered.values == [1, 3, 5])
    }

    // MARK: Threads

    @Test("concurrent submitters and a clock driver: every value accounted for once")
    func concurrentSubmitters() async throws {
        let clock = ManualLimiterClock()
        let tracker = LifetimeTracker()
        let counts = Locked<[LimiterEvent<Int, Tracked>.Kind: Int]>([:])
        let limiter = try Limiter<Int, Tracked>(
            .throttle(interval: .microseconds(50)), scheduler: .manual(clock), tick: .microseconds(10),
            delivery: .events { e in counts.withLock { $0[e.kind, default: 0] += 1 } })
        let threads = 4
        let perThread = 2_000
        var decided = 0
        await withTaskGroup(of: Int.self) { group in
            for t in 0..<threads {
                group.addTask {
                    var count = 0
                    for i in 0..<perThread {
                        _ = try! limiter.submit(tracker.make(t * perThread + i), for: i % 16)
                        count += 1
                        if i % 64 == 0 { _ = try! limiter.pending(i % 16) }
                        if i % 512 == 0 { try! limiter.flush(i % 16) }
                    }
                    return count
                }
            }
            group.addTask {
                for _ in 0..<400 {
                    clock.advance(by: .microseconds(20))
                    await Task.yield()
                }
                return 0
            }
            for await count in group { decided += count }
        }
        clock.runUntilIdle()
        try await limiter.close()
        let total = threads * perThread
        let c = counts.withLock { $0 }
        #expect(c.values.reduce(0, +) == total)
        #expect(c[.discarded] == nil)
        #expect(decided == total)
        #expect(tracker.alive == 0)
        try limiter.storage.checkInvariants()
    }

    @Test("the slot table catches stale tokens and reuses slots")
    func slotTable() {
        // The table is noncopyable: read it outside #expect, whose
        // expansion copies its operands.
        var table = SlotTable<Int, String>()
        let a = table.insert(key: 1, value: "a")
        let b = table.insert(key: 2, value: "b")
        let removed = table.remove(a).value
        #expect(removed == "a")
        let holdsA = table.contains(a)
        #expect(!holdsA)
        let c = table.insert(key: 3, value: "c")
        #expect(c & 0xFFFF_FFFF == a & 0xFFFF_FFFF, "the freed slot is reused")
        #expect(c != a, "with a new generation")
        let holdsBAndC = table.contains(b) && table.contains(c)
        #expect(holdsBAndC)
        let count = table.count
        #expect(count == 2)
    }

    @Test("LimiterInstant arithmetic is exact and clamped")
    func instants() {
        let t = LimiterInstant(nanoseconds: 1_500_000_000)
        #expect(t.advanced(by: .milliseconds(500)) == LimiterInstant(nanoseconds: 2_000_000_000))
        #expect(t.advanced(by: .seconds(-2)) == LimiterInstant(nanoseconds: 0))
        #expect(LimiterInstant(nanoseconds: .max - 1).advanced(by: .seconds(1)).nanoseconds == .max)
        #expect(t.duration(to: LimiterInstant(nanoseconds: 1_000_000_000)) == .milliseconds(-500))
        #expect(
            LimiterInstant(nanoseconds: 0).duration(to: LimiterInstant(nanoseconds: .max))
                == LimiterInstant.duration(nanoseconds: .max))
        // Descriptions: InstantDescriptionTests.swift.
    }
}
