import Dispatch
import Foundation
import Testing

@testable import Sluice

@Suite("Limiter on a manual clock")
struct LimiterTests {
    // MARK: Decisions and delivery

    @Test("throttle: decisions, and every emission reaches the handler in order")
    func throttle() throws {
        let clock = ManualLimiterClock()
        let out = Recorder<String, Int>()
        let limiter = try Limiter<String, Int>(
            .throttle(interval: .milliseconds(100)), scheduler: .manual(clock), handler: out.handler)
        #expect(try limiter.submit(1, for: "a") == .emitted)
        #expect(out.values == [1], "an emitted-now value is delivered before submit returns")
        clock.advance(by: .milliseconds(50))
        #expect(try limiter.submit(2, for: "a") == .scheduled(at: instant(100)))
        #expect(try limiter.submit(3, for: "a") == .scheduled(at: instant(100)))
        #expect(try limiter.pending("a"))
        #expect(try !limiter.pending("b"))
        clock.advance(by: .milliseconds(49))
        #expect(out.values == [1])
        clock.advance(by: .milliseconds(1))
        #expect(out.values == [1, 3])
        #expect(clock.now == instant(100))
        #expect(limiter.policy == .throttle(interval: .milliseconds(100)))
        #expect(limiter.now == instant(100))
    }

    @Test("audit and throttle(leading: false) differ as the spec says")
    func auditVersusThrottle() throws {
        for (policy, expected) in [
            (LimiterPolicy.audit(interval: .milliseconds(100)), [instant(100), instant(220)]),
            (.throttle(interval: .milliseconds(100), leading: false), [instant(100), instant(200)]),
        ] {
            let clock = ManualLimiterClock()
            let times = Locked<[LimiterInstant]>([])
            let limiter = try Limiter<Int, String>(policy, scheduler: .manual(clock), delivery: .events { event in
                if event.kind == .emitted { times.withLock { $0.append(event.at) } }
            })
            try limiter.submit("a", for: 1)
            clock.advance(to: instant(50))
            try limiter.submit("b", for: 1)
            clock.advance(to: instant(120))
            try limiter.submit("c", for: 1)
            clock.runUntilIdle()
            #expect(times.withLock { $0 } == expected, "\(policy)")
        }
    }

    @Test("debounce with maxWait emits at least every maxWait")
    func debounceMaxWait() throws {
        let clock = ManualLimiterClock()
        let out = Recorder<Int, Int>()
        let limiter = try Limiter<Int, Int>(
            .debounce(interval: .milliseconds(100), maxWait: .milliseconds(250)), scheduler: .manual(clock),
            delivery: .events { if $0.kind == .emitted { out.add($0.key, $0.value, at: $0.at) } })
        for t in stride(from: 0, through: 300, by: 50) {
            clock.advance(to: instant(UInt64(t)))
            _ = try limiter.submit(t, for: 7)
        }
        clock.runUntilIdle()
        #expect(out.all.map(\.value) == [200, 300])
        #expect(out.all.map(\.at) == [instant(250), instant(400)])
    }

    @Test("rate: decided at once; a drop tells when to retry")
    func rate() throws {
        let clock = ManualLimiterClock()
        let out = Recorder<UInt64, Int>()
        let limiter = try Limiter<UInt64, Int>(
            .rate(limit: 2, per: .milliseconds(100)), scheduler: .manual(clock), handler: out.handler)
        #expect(try limiter.submit(1, for: 9) == .emitted)
        #expect(try limiter.submit(2, for: 9) == .emitted)
        clock.advance(to: instant(10))
        let decision = try limiter.submit(3, for: 9)
        #expect(decision == .dropped(retryAt: instant(50)))
        if case let .dropped(retryAt) = decision {
            #expect(limiter.now.duration(to: retryAt) == .milliseconds(40))
        }
        clock.advance(to: instant(50))
        #expect(try limiter.submit(4, for: 9) == .emitted)
        #expect(out.values == [1, 2, 4])
        #expect(try !limiter.pending(9))
        #expect(try !limiter.flush(9))
    }

    @Test("flush emits now, cancel drops now; close drains; calls after close throw")
    func operations() throws {
        let clock = ManualLimiterClock()
        let events = Locked<[String]>([])
        let limiter = try Limiter<String, String>(
            .debounce(interval: .seconds(1)), scheduler: .manual(clock), delivery: .events { event in
                events.withLock { $0.append("\(event.at.nanoseconds / 1_000_000) \(event.kind) \(event.key) \(event.value)") }
            })
        try limiter.submit("a", for: "A")
        try limiter.submit("b", for: "B")
        try limiter.submit("c", for: "C")
        clock.advance(to: instant(10))
        #expect(try limiter.flush("A"))
        #expect(try !limiter.flush("A"))
        #expect(try limiter.cancel("B"))
        #expect(try !limiter.cancel("B"))
        #expect(!limiter.isClosed)
        try limiter.close()
        #expect(limiter.isClosed)
        #expect(events.withLock { $0 } == ["10 emitted A a", "10 dropped B b", "10 emitted C c"])
        #expect(throws: LimiterError.closed) { try limiter.submit("d", for: "A") }
        #expect(throws: LimiterError.closed) { try limiter.flush("A") }
        #expect(throws: LimiterError.closed) { try limiter.pending("A") }
        #expect(throws: LimiterError.closed) { try limiter.close() }
    }

    @Test("close(drain: false) hands pending values back as discarded")
    func closeDiscard() throws {
        let clock = ManualLimiterClock()
        let kinds = Locked<[LimiterEvent<Int, Int>.Kind]>([])
        let limiter = try Limiter<Int, Int>(.audit(interval: .seconds(1)), scheduler: .manual(clock),
                                            delivery: .events { e in kinds.withLock { $0.append(e.kind) } })
        try limiter.submit(1, for: 1)
        try limiter.submit(2, for: 2)
        try limiter.close(drain: false)
        #expect(kinds.withLock { $0 } == [.discarded, .discarded])
    }

    @Test("a call from inside the handler is handled after the emission and respects the window")
    func reentrantSubmit() throws {
        let clock = ManualLimiterClock()
        let decisions = Locked<[LimiterDecision]>([])
        let out = Recorder<Int, Int>()
        let box = Locked<Limiter<Int, Int>?>(nil)
        let limiter = try Limiter<Int, Int>(.throttle(interval: .milliseconds(100)), scheduler: .manual(clock)) {
            key, value in
            out.add(key, value)
            if value == 2, let limiter = box.withLock({ $0 }) {
                decisions.withLock { $0.append(try! limiter.submit(3, for: key)) }
            }
        }
        box.withLock { $0 = limiter }
        defer { box.withLock { $0 = nil } }
        try limiter.submit(1, for: 1)
        clock.advance(to: instant(10))
        try limiter.submit(2, for: 1)
        clock.advance(to: instant(100))
        #expect(decisions.withLock { $0 } == [.scheduled(at: instant(200))])
        clock.runUntilIdle()
        #expect(out.values == [1, 2, 3])
    }

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
            try Limiter<Int, Int>(.audit(interval: .seconds(1)), scheduler: .manual(clock), maxKeys: -1,
                                  delivery: .handler { _, _ in })
        }
        #expect(throws: LimiterError.invalidArgument) {
            try Limiter<Int, Int>(.audit(interval: .seconds(1)), scheduler: .manual(clock), tick: .zero,
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

    // MARK: Combine

    @Test("combine folds superseded values into the newer one", arguments: [
        LimiterPolicy.audit(interval: .milliseconds(100)),
        .throttle(interval: .milliseconds(100), leading: false),
        .throttle(interval: .milliseconds(100), leading: false, pick: .first),
        .debounce(interval: .milliseconds(100)),
    ])
    func combine(policy: LimiterPolicy) throws {
        let clock = ManualLimiterClock()
        let out = Recorder<String, [Int]>()
        let limiter = try Limiter<String, [Int]>(
            policy, scheduler: .manual(clock), combine: { $0 + $1 }, handler: out.handler)
        for i in 1...5 {
            clock.advance(to: instant(UInt64(i * 10)))
            try limiter.submit([i], for: "k")
        }
        clock.runUntilIdle()
        #expect(out.values == [[1, 2, 3, 4, 5]], "\(policy)")
    }

    @Test("combine with a leading edge: the window after the leading value folds its values")
    func combineLeading() throws {
        let clock = ManualLimiterClock()
        let out = Recorder<Int, [Int]>()
        let limiter = try Limiter<Int, [Int]>(
            .throttle(interval: .milliseconds(100)), scheduler: .manual(clock), combine: { $0 + $1 },
            handler: out.handler)
        for i in 0..<6 {
            clock.advance(to: instant(UInt64(i * 40)))
            try limiter.submit([i], for: 1)
        }
        clock.runUntilIdle()
        // 0 leads; 1, 2 fold and emit at 100; 3, 4 at 200; 5 at 300.
        #expect(out.values == [[0], [1, 2], [3, 4], [5]])
    }

    @Test("combine does not resurrect a cancelled value")
    func combineCancel() throws {
        let clock = ManualLimiterClock()
        let tracker = LifetimeTracker()
        let out = Recorder<Int, [Tracked]>()
        let limiter = try Limiter<Int, [Tracked]>(
            .audit(interval: .milliseconds(100)), scheduler: .manual(clock), combine: { $0 + $1 },
            handler: out.handler)
        try limiter.submit([tracker.make(1)], for: 1)
        try limiter.submit([tracker.make(2)], for: 1)
        #expect(tracker.alive == 2, "folded, not released")
        #expect(try limiter.cancel(1))
        #expect(tracker.alive == 0, "the fold is released when cancelled")
        try limiter.submit([tracker.make(3)], for: 1)
        clock.runUntilIdle()
        #expect(out.values.map { $0.map(\.id) } == [[3]])
    }

    // MARK: Deliveries

    @Test("stream delivery: every emission, then the stream finishes at close")
    func stream() async throws {
        let clock = ManualLimiterClock()
        let (limiter, emissions) = try Limiter<String, Int>.makeStream(
            .throttle(interval: .milliseconds(100)), scheduler: .manual(clock))
        try limiter.submit(1, for: "a")
        try limiter.submit(2, for: "a")
        try limiter.submit(3, for: "b")
        clock.advance(to: instant(100))
        try limiter.submit(4, for: "a")
        try await limiter.close()
        var got: [String] = []
        for await emission in emissions {
            got.append("\(emission.at.nanoseconds / 1_000_000) \(emission.key) \(emission.value)")
        }
        #expect(got == ["0 a 1", "0 b 3", "100 a 2", "100 a 4"])
    }

    @Test("a released limiter finishes its stream")
    func streamFinishesOnRelease() async throws {
        let clock = ManualLimiterClock()
        var limiter: Limiter<Int, Int>?
        let emissions: AsyncStream<LimiterEmission<Int, Int>>
        (limiter, emissions) = try Limiter<Int, Int>.makeStream(.debounce(interval: .seconds(1)), scheduler: .manual(clock))
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
            .throttle(interval: .milliseconds(100)), scheduler: .manual(clock)) { key, value in
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

    @Test("values dropped by a window, by a quota and at close(discard) are released at once")
    func lifetimesOfDrops() throws {
        let clock = ManualLimiterClock()
        let tracker = LifetimeTracker()
        let noTrailing = try Limiter<Int, Tracked>(
            .throttle(interval: .milliseconds(100), trailing: false), scheduler: .manual(clock)) { _, _ in }
        try noTrailing.submit(tracker.make(1), for: 1)
        #expect(try noTrailing.submit(tracker.make(2), for: 1) == .dropped(retryAt: instant(100)))
        #expect(tracker.alive == 0)

        let rate = try Limiter<Int, Tracked>(.rate(limit: 1, per: .seconds(1)), scheduler: .manual(clock)) { _, _ in }
        try rate.submit(tracker.make(3), for: 1)
        #expect(try rate.submit(tracker.make(4), for: 1) == .dropped(retryAt: instant(1000)))
        #expect(tracker.alive == 0)

        let audit = try Limiter<String, Tracked>(.audit(interval: .seconds(1)), scheduler: .manual(clock)) { _, _ in }
        for i in 5..<25 { try audit.submit(tracker.make(i), for: "k\(i)") }
        #expect(tracker.alive == 20)
        #expect(audit.storage.heldValues == 20)
        try audit.close(drain: false)
        #expect(tracker.alive == 0)
        #expect(audit.storage.heldValues == 0)
    }

    @Test("the events delivery sees drops before releasing them")
    func eventsSeeDrops() throws {
        let clock = ManualLimiterClock()
        let tracker = LifetimeTracker()
        let seen = Locked<[String]>([])
        let limiter = try Limiter<Int, Tracked>(
            .debounce(interval: .milliseconds(10)), scheduler: .manual(clock), delivery: .events { e in
                seen.withLock { $0.append("\(e.kind) \(e.value.id)") }
            })
        try limiter.submit(tracker.make(1), for: 1)
        try limiter.submit(tracker.make(2), for: 1)
        #expect(tracker.isReleased(1))
        clock.runUntilIdle()
        #expect(seen.withLock { $0 } == ["dropped 1", "emitted 2"])
        #expect(tracker.alive == 0)
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
        #expect(LimiterInstant(nanoseconds: 0).duration(to: LimiterInstant(nanoseconds: .max))
                == LimiterInstant.duration(nanoseconds: .max))
        #expect(t.description == "t+1.5s")
        #expect(LimiterDecision.scheduled(at: t).description == "scheduled(at: t+1.5s)")
        // Readable instants: hours and minutes, up to nine decimals, no trailing zeros.
        #expect(LimiterInstant(nanoseconds: 0).description == "t+0s")
        #expect(LimiterInstant(nanoseconds: 2_053_290_000_000).description == "t+34m13.29s")
        #expect(LimiterInstant(nanoseconds: 7_205_000_000_001).description == "t+2h0m5.000000001s")
    }
}
