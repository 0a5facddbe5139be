import Synchronization
import Testing

@testable import Sluice

/// A manual clock's fire runs in rounds of at most 512 timers, the core
/// writing each round's emissions into the engine's array
/// (`sluice_limiter_advance_into`) with no callback per event. What a
/// handler can do between and during rounds must not disturb that: a fire
/// from the handler while a round is delivered straight from the array uses
/// an array of its own, and a call from the handler on a key whose timer is
/// due in a later round fires it first, through the event callback, once.
@Suite("Manual clock: fire rounds written into the engine's array")
struct FireIntoTests {
    typealias Entry = (key: Int, value: Int, now: UInt64)
    static let ms: UInt64 = 1_000_000

    @Test("a fire from a handler during a direct round writes its own array; the round's values stay intact")
    func nestedFireOwnArray() throws {
        let clock = ManualLimiterClock()
        let log = Locked<[Entry]>([])
        let box = Locked<Limiter<Int, Int>?>(nil)
        let nested = Atomic<Bool>(false)
        let limiter = try Limiter<Int, Int>(.debounce(interval: .milliseconds(10)), scheduler: .manual(clock)) {
            key, value in
            log.withLock { $0.append((key, value, clock.now.nanoseconds)) }
            guard key == 0, !nested.exchange(true, ordering: .relaxed), let limiter = box.withLock({ $0 }) else {
                return
            }
            // During the first round (keys 0..<512, delivered from the
            // engine's array): 1000 new keys, then a nested fire of more
            // than a round (the 988 keys left at 10 ms and the new ones at
            // 20 ms). Written into the same array, they would overwrite the
            // 511 values of this round not yet delivered.
            for k in 0..<1000 { _ = try! limiter.submit(100_000 + k, for: 100_000 + k) }
            clock.advance(by: .milliseconds(15))
        }
        #expect(limiter.storage.emitOnly)
        box.withLock { $0 = limiter }
        for k in 0..<1500 { _ = try limiter.submit(k, for: k) }
        clock.advance(by: .milliseconds(10))
        clock.runUntilIdle()
        let entries = log.withLock { $0 }
        let expected = Array(0..<1500) + Array(100_000..<101_000)
        #expect(entries.count == expected.count)
        // The round's values first, in the order armed, then what the nested
        // fire recorded (left to this delivery), in time order.
        #expect(entries.map(\.key) == expected)
        #expect(entries.allSatisfy { $0.key == $0.value })
        #expect(entries.prefix(1).allSatisfy { $0.now == 10 * Self.ms })
        #expect(limiter.storage.heldValues == 0)
        #expect(
            limiter.storage.lock.withLock { limiter.storage.outbox.events.isEmpty && !limiter.storage.outbox.draining })
        box.withLock { $0 = nil }
    }

    @Test(
        "a handler's call on a key due in a later round fires it first, once, delivered after this round",
        arguments: [true, false])
    func callDuringRound(direct: Bool) throws {
        let clock = ManualLimiterClock()
        let log = Locked<[Entry]>([])
        let box = Locked<Limiter<Int, Int>?>(nil)
        let record: @Sendable (Int, Int) -> Void = { key, value in
            log.withLock { $0.append((key, value, clock.now.nanoseconds)) }
            guard key == 0, let limiter = box.withLock({ $0 }) else { return }
            // Key 1400 is due (10 ms) but in the third round: timers first.
            #expect(try! limiter.pending(1400) == false)
        }
        let limiter: Limiter<Int, Int>
        if direct {
            limiter = try Limiter(.debounce(interval: .milliseconds(10)), scheduler: .manual(clock)) { record($0, $1) }
            #expect(limiter.storage.emitOnly)
        } else {
            // The same through the outbox: events observed (drops too), so
            // each round is recorded, not delivered from the array.
            limiter = try Limiter(
                .debounce(interval: .milliseconds(10)), scheduler: .manual(clock),
                delivery: .events { event in
                    if event.kind == .emitted { record(event.key, event.value) }
                })
            #expect(!limiter.storage.emitOnly)
        }
        box.withLock { $0 = limiter }
        for k in 0..<1500 {
            _ = try limiter.submit(k, for: k)
            if k % 4 == 0 { _ = try limiter.submit(k, for: k) }  // supersedes (a dropped value)
        }
        clock.advance(by: .milliseconds(10))
        let entries = log.withLock { $0 }
        let keys = entries.map(\.key)
        // the first round (0..<512), then 1400 (fired by the handler's call,
        // recorded, delivered when the round is), then the other rounds
        let expected: [Int] = Array(0..<512) + [1400] + Array(512..<1400) + Array(1401..<1500)
        #expect(keys == expected)
        #expect(entries.allSatisfy { $0.key == $0.value && $0.now == 10 * Self.ms })
        #expect(limiter.storage.heldValues == 0)
        box.withLock { $0 = nil }
    }
}
