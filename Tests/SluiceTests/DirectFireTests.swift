import Dispatch
import Foundation
import Synchronization
import Testing

@testable import Sluice

/// A manual clock's fire for an emit-only limiter delivering to a handler:
/// its events go from the engine's buffer to the handler without passing
/// through the outbox (`LimiterStorage.claimDirectLocked`). What the handler
/// sees must be exactly what a limiter that records every event sees: the
/// same values in the same order with the clock at each deadline, rounds
/// delivered before the next deadline fires, the handler's own calls and
/// a close from it ordered after what it was handed, and a fire while
/// another thread delivers left to that thread, in order.
@Suite("Manual clock: a fire delivered from the engine's buffer")
struct DirectFireTests {
    static let ms: UInt64 = 1_000_000

    typealias Entry = (key: Int, value: Int, now: UInt64)

    /// Submits the same bursts to `limiter` (many keys sharing deadlines,
    /// more than a fire round of 512 due at once), then runs the clock out.
    static func run(_ clock: ManualLimiterClock, _ submit: (Int, Int) throws -> Void) throws {
        for k in 0..<3000 {
            if k % 700 == 0 { clock.advance(to: LimiterInstant(nanoseconds: UInt64(k / 700) * 3 * Self.ms)) }
            try submit(k * 7, k)
            if k % 5 == 0 { try submit(k * 7 + 1, k) }  // superseded: dropped, never delivered
        }
        clock.runUntilIdle()
    }

    @Test("the same emissions, order and times as a limiter whose events go through the outbox")
    func sameAsRecorded() throws {
        let directClock = ManualLimiterClock()
        let direct = Locked<[Entry]>([])
        let a = try Limiter<Int, Int>(.debounce(interval: .milliseconds(10)), scheduler: .manual(directClock)) {
            key, value in direct.withLock { $0.append((key, value, directClock.now.nanoseconds)) }
        }
        #expect(a.storage.emitOnly)
        try Self.run(directClock) { _ = try a.submit($0, for: $1) }

        let recordedClock = ManualLimiterClock()
        let recorded = Locked<[Entry]>([])
        let b = try Limiter<Int, Int>(
            .debounce(interval: .milliseconds(10)), scheduler: .manual(recordedClock),
            delivery: .events { event in
                guard event.kind == .emitted else { return }
                recorded.withLock { $0.append((event.key, event.value, recordedClock.now.nanoseconds)) }
            })
        #expect(!b.storage.emitOnly)
        try Self.run(recordedClock) { _ = try b.submit($0, for: $1) }

        let x = direct.withLock { $0 }
        let y = recorded.withLock { $0 }
        #expect(x.count == 3000)
        #expect(x.count == y.count)
        for (p, q) in zip(x, y) where p != q {
            Issue.record("direct \(p) differs from recorded \(q)")
            break
        }
        #expect(a.storage.heldValues == 0)
        #expect(a.storage.lock.withLock { a.storage.outbox.events.isEmpty && !a.storage.outbox.draining })
    }

    @Test("a handler's calls during a fire: its new keys fire at their own deadlines, after what it was handed")
    func reentrantCalls() throws {
        let clock = ManualLimiterClock()
        let log = Locked<[Entry]>([])
        let box = Locked<Limiter<Int, Int>?>(nil)
        let limiter = try Limiter<Int, Int>(.debounce(interval: .milliseconds(10)), scheduler: .manual(clock)) {
            key, value in
            let now = clock.now.nanoseconds
            log.withLock { $0.append((key, value, now)) }
            guard key < 100_000, let limiter = box.withLock({ $0 }) else { return }
            // A new key fires 10 ms after this deadline. A call on a key
            // due now but not in a round fired yet runs its timer first (an
            // emission recorded while this round is delivered, handed over
            // after it); the flush then finds nothing pending.
            _ = try! limiter.submit(key + 100_000, for: key + 100_000)
            if key % 2 == 0, key < 800 { #expect(try! !limiter.flush(key + 700)) }
        }
        box.withLock { $0 = limiter }
        for k in 0..<1500 { _ = try limiter.submit(k, for: k) }  // one deadline, three rounds
        clock.advance(by: .milliseconds(10))  // exactly the deadline
        let first = log.withLock { $0 }
        #expect(first.count == 1500)
        #expect(first.map(\.key).sorted() == Array(0..<1500))  // each once
        #expect(first.allSatisfy { $0.now == 10 * Self.ms && $0.value == $0.key })
        clock.runUntilIdle()
        let all = log.withLock { $0 }
        #expect(all.count == 3000)
        #expect(all[1500...].allSatisfy { $0.key >= 100_000 && $0.now == 20 * Self.ms && $0.value == $0.key })
        #expect(Set(all[1500...].map(\.key)) == Set((0..<1500).map { $0 + 100_000 }))
        #expect(limiter.storage.heldValues == 0)
        box.withLock { $0 = nil }
    }

    @Test("a handler that closes the limiter during a fire: nothing is delivered after the close discards")
    func closeFromHandler() throws {
        let clock = ManualLimiterClock()
        let log = Locked<[Int]>([])
        let box = Locked<Limiter<Int, Int>?>(nil)
        let limiter = try Limiter<Int, Int>(.debounce(interval: .milliseconds(10)), scheduler: .manual(clock)) {
            key, _ in
            log.withLock { $0.append(key) }
            if key == 600, let limiter = box.withLock({ $0 }) { try! limiter.close(drain: false) }
        }
        box.withLock { $0 = limiter }
        for k in 0..<1000 { _ = try limiter.submit(k, for: k) }
        clock.advance(by: .milliseconds(10))
        // The round holding key 600 was handed over before the close:
        // delivered to its end (a round is 512 timers); the rest discarded.
        let seen = log.withLock { $0 }
        #expect(seen.contains(600))
        #expect(Set(seen).count == seen.count)
        #expect(seen.count == 512 || seen.count == 1000)
        #expect(limiter.isClosed)
        clock.advance(by: .seconds(1))
        #expect(log.withLock { $0.count } == seen.count)
        #expect(limiter.storage.heldValues == 0)
        box.withLock { $0 = nil }
    }

    @Test("a fire while another thread delivers: that thread delivers the fired values, after its own")
    func fireWhileAnotherThreadDelivers() throws {
        let clock = ManualLimiterClock()
        let log = Locked<[Int]>([])
        let entered = DispatchSemaphore(value: 0)
        let proceed = DispatchSemaphore(value: 0)
        // Throttle: a key's first value is emitted at once (delivered by its
        // submit's thread), the last one of the window at its end.
        let limiter = try Limiter<Int, Int>(.throttle(interval: .milliseconds(10)), scheduler: .manual(clock)) {
            key, value in
            if key == -1 {
                entered.signal()
                proceed.wait()
            }
            log.withLock { $0.append(value) }
        }
        #expect(limiter.storage.emitOnly)
        for k in 0..<100 {
            _ = try limiter.submit(k, for: k)  // leading: delivered now
            _ = try limiter.submit(1000 + k, for: k)  // trailing, due at 10 ms
        }
        let done = DispatchSemaphore(value: 0)
        Thread.detachNewThread {
            _ = try! limiter.submit(-1, for: -1)  // delivered by this thread, which waits in the handler
            done.signal()
        }
        entered.wait()
        clock.advance(by: .milliseconds(10))  // the trailing values: left to the delivering thread
        #expect(log.withLock { $0.count } == 100)
        proceed.signal()
        done.wait()
        let seen = log.withLock { $0 }
        #expect(seen.count == 201)
        #expect(Array(seen[..<100]) == Array(0..<100))
        #expect(seen[100] == -1)  // the delivering thread's own value, then the fired ones
        #expect(seen[101...].sorted() == Array(1000..<1100))
        #expect(
            limiter.storage.lock.withLock { limiter.storage.outbox.events.isEmpty && !limiter.storage.outbox.draining })
    }
}
