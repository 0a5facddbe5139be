import Foundation
import Synchronization
import Testing

@testable import Sluice

/// A manual clock's advance fires a limiter's timers in batches (the core's
/// events collected, recorded in one critical section per batch, then
/// delivered): the order, reentrancy and release rules of one event at a
/// time still hold, for many keys at once.
@Suite("Manual clock: firing many keys")
struct FireTests {
    /// Counts the values alive (each test its own: tests run in parallel).
    final class Tracker: Sendable {
        let alive = Atomic<Int>(0)
    }

    /// A value that must be released.
    final class Counted: Sendable {
        let value: Int
        let tracker: Tracker
        init(_ value: Int, _ tracker: Tracker) {
            self.value = value
            self.tracker = tracker
            tracker.alive.add(1, ordering: .relaxed)
        }
        deinit { tracker.alive.subtract(1, ordering: .relaxed) }
    }

    struct Seen: Equatable, CustomStringConvertible {
        var kind: LimiterEvent<UInt64, Int>.Kind
        var key: UInt64
        var value: Int
        var at: UInt64
        var description: String { "\(kind) \(key)=\(value)@\(at)" }
    }

    /// Keys submitted at `times[i]` (ms) with value i, key i * 7919; the
    /// clock then advances to `end` (ms) with one call or in 1 ms steps.
    static func run(
        _ policy: LimiterPolicy, times: [UInt64], end: UInt64, stepped: Bool, compact: Bool, tracker: Tracker
    ) throws -> [Seen] {
        let clock = ManualLimiterClock()
        let seen = Locked<[Seen]>([])
        let ms: UInt64 = 1_000_000
        var submit: (UInt64, Int) throws -> Void
        var keep: AnyObject
        if compact {
            let limiter = try Limiter<UInt64, Int>(
                policy, scheduler: .manual(clock),
                delivery: .events { e in
                    seen.withLock { $0.append(Seen(kind: e.kind, key: e.key, value: e.value, at: e.at.nanoseconds)) }
                })
            submit = { key, value in _ = try limiter.submit(value, for: key) }
            keep = limiter
        } else {
            // Not compact: string keys and class values live in the slot table.
            let limiter = try Limiter<String, Counted>(
                policy, scheduler: .manual(clock),
                delivery: .events { e in
                    let seen1 = Seen(
                        kind: LimiterEvent<UInt64, Int>.Kind(e.kind), key: UInt64(e.key)!, value: e.value.value,
                        at: e.at.nanoseconds)
                    seen.withLock { $0.append(seen1) }
                })
            submit = { key, value in _ = try limiter.submit(Counted(value, tracker), for: String(key)) }
            keep = limiter
        }
        for (i, t) in times.enumerated() {
            clock.advance(to: LimiterInstant(nanoseconds: t * ms))
            try submit(UInt64(i) &* 7919, i)
            if i % 3 == 0 { try submit(UInt64(i) &* 7919, i + 1_000_000) }  // supersedes the pending value
        }
        if stepped {
            var t = clock.now.nanoseconds / ms
            while t < end {
                t += 1
                clock.advance(to: LimiterInstant(nanoseconds: t * ms))
            }
        } else {
            clock.advance(to: LimiterInstant(nanoseconds: end * ms))
        }
        withExtendedLifetime(keep) {}
        return seen.withLock { $0 }
    }

    @Test(
        "one advance over many keys delivers what 1 ms steps deliver, in the same order",
        arguments: [false, true])
    func oneAdvanceMatchesSteps(compact: Bool) throws {
        // 3000 keys: 1000 at one time (several batches in one tick), the
        // rest spread over 2 s, with drops (superseded values) observed.
        let tracker = Tracker()
        var times = [UInt64](repeating: 5, count: 1000)
        for i in 0..<2000 { times.append(5 + UInt64(i)) }
        for policy: LimiterPolicy in [
            .debounce(interval: .milliseconds(300)), .throttle(interval: .milliseconds(250), leading: false),
        ] {
            let one = try Self.run(policy, times: times, end: 4000, stepped: false, compact: compact, tracker: tracker)
            let steps = try Self.run(policy, times: times, end: 4000, stepped: true, compact: compact, tracker: tracker)
            #expect(one.count == steps.count)
            #expect(one == steps)
            #expect(one.filter { $0.kind == .emitted }.count == times.count)
            // Never out of time order.
            #expect(zip(one, one.dropFirst()).allSatisfy { $0.at <= $1.at })
        }
        #expect(tracker.alive.load(ordering: .relaxed) == 0)
    }

    @Test("values are released after a fire; nothing stays held")
    func valuesReleased() throws {
        let clock = ManualLimiterClock()
        let tracker = Tracker()
        let sum = Atomic<Int>(0)
        let limiter = try Limiter<Int, Counted>(.debounce(interval: .milliseconds(10)), scheduler: .manual(clock)) {
            _, v in sum.add(v.value, ordering: .relaxed)
        }
        for k in 0..<5000 {
            _ = try limiter.submit(Counted(k, tracker), for: k)
            _ = try limiter.submit(Counted(k, tracker), for: k)  // the first one superseded, unobserved
        }
        #expect(limiter.storage.heldValues == 5000)
        clock.advance(by: .seconds(1))
        #expect(sum.load(ordering: .relaxed) == (0..<5000).reduce(0, +))
        #expect(limiter.storage.heldValues == 0)
        #expect(tracker.alive.load(ordering: .relaxed) == 0)
        withExtendedLifetime(limiter) {}
    }

    @Test("combine during a fire: folded values emitted once")
    func combineFire() throws {
        let clock = ManualLimiterClock()
        let got = Locked<[Int: Int]>([:])
        let limiter = try Limiter<Int, Int>(
            .debounce(interval: .milliseconds(10)), scheduler: .manual(clock), combine: { $0 + $1 }
        ) { k, v in got.withLock { $0[k] = v } }
        for k in 0..<1000 {
            for v in 1...3 { _ = try limiter.submit(v, for: k) }
        }
        clock.advance(by: .seconds(1))
        #expect(got.withLock { $0.count } == 1000)
        #expect(got.withLock { $0.values.allSatisfy { $0 == 6 } })
        #expect(limiter.storage.heldValues == 0)
    }

    @Test("a handler that calls the limiter and advances the clock during a fire")
    func reentrantHandler() throws {
        let clock = ManualLimiterClock()
        let log = Locked<[(key: Int, value: Int, at: UInt64)]>([])
        let box = Locked<Limiter<Int, Int>?>(nil)
        let advanced = Atomic<Bool>(false)
        let limiter = try Limiter<Int, Int>(.debounce(interval: .milliseconds(10)), scheduler: .manual(clock)) {
            key, value in
            log.withLock { $0.append((key, value, clock.now.nanoseconds)) }
            guard let limiter = box.withLock({ $0 }) else { return }
            if key < 600 {
                // A new key from inside the delivery: fires 10 ms later.
                _ = try! limiter.submit(value + 10_000, for: key + 10_000)
                _ = try! limiter.pending(key + 1)
            }
            if key == 300, !advanced.exchange(true, ordering: .relaxed) {
                clock.advance(by: .milliseconds(50))  // nested advance: fires what is due, delivered in order
            }
        }
        box.withLock { $0 = limiter }
        for k in 0..<600 { _ = try limiter.submit(k, for: k) }
        clock.advance(by: .milliseconds(20))
        clock.advance(by: .seconds(1))
        let entries = log.withLock { $0 }
        #expect(entries.count == 1200)
        #expect(Set(entries.map(\.key)) == Set((0..<600).flatMap { [$0, $0 + 10_000] }))
        for entry in entries { #expect(entry.value == entry.key) }
        // Each second-generation key after its first-generation key.
        var position: [Int: Int] = [:]
        for (i, entry) in entries.enumerated() { position[entry.key] = i }
        #expect((0..<600).allSatisfy { position[$0]! < position[$0 + 10_000]! })
        #expect(limiter.storage.heldValues == 0)
        box.withLock { $0 = nil }
    }
}

extension LimiterEvent<UInt64, Int>.Kind {
    init<K, V>(_ other: LimiterEvent<K, V>.Kind) {
        switch other {
        case .emitted: self = .emitted
        case .dropped: self = .dropped
        case .discarded: self = .discarded
        }
    }
}
