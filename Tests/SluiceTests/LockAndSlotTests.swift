import Dispatch
import Foundation
import Synchronization
import Testing

import CSluiceLoop
@testable import Sluice

/// The storage's lock (an atomic word with a parking place) and the slot
/// table's occupancy by generation parity, on the paths a limiter's submit
/// takes on a manual clock.
@Suite("Lock and slot table")
struct LockAndSlotTests {
    final class Counter: @unchecked Sendable {
        let lock = PosixLock()
        var value = 0
    }

    @Test("the lock excludes: threads that contend (spin or park) lose no increment and all finish")
    func lockExcludes() {
        let counter = Counter()
        let threads = 4, rounds = 20_000
        DispatchQueue.concurrentPerform(iterations: threads) { _ in
            for _ in 0..<rounds { counter.lock.withLock { counter.value += 1 } }
        }
        #expect(counter.value == threads * rounds)
    }

    @Test("a thread that waits while the holder sleeps parks and is woken by the unlock")
    func lockParks() {
        let counter = Counter()
        let group = DispatchGroup()
        counter.lock.lock()
        for _ in 0..<3 {
            DispatchQueue.global().async(group: group) {
                counter.lock.withLock { counter.value += 1 }
            }
        }
        usleep(20_000)  // long past the spin: the waiters park
        #expect(counter.value == 0)
        counter.lock.unlock()
        #expect(group.wait(timeout: .now() + 10) == .success, "every parked thread is woken")
        #expect(counter.value == 3)
        #expect(counter.lock.word.load(ordering: .relaxed) == 0)
    }

    @Test("a biased lock: its first user takes it without the word, and the first other thread revokes the bias")
    func biasedLockOwnerAndRevoke() {
        let lock = PosixLock(biased: true)
        // The process's one-time setup (membarrier registration, slow once
        // there are threads) ran when the lock was made, not on its first use.
        #expect(sluice__bias_ready())
        #expect(lock.bias.pointee.owner == (sluice__bias_available() ? 0 : UInt.max))
        lock.lock()
        let owner = lock.bias.pointee.owner
        if sluice__bias_available() {
            #expect(owner == sluice_bias_self(), "the first user owns the bias")
            #expect(lock.word.load(ordering: .relaxed) == 0, "the owner holds it without the word")
            #expect(lock.bias.pointee.in == 1)
        } else {  // (ThreadSanitizer, or no membarrier): the word, always
            #expect(owner == UInt.max && lock.word.load(ordering: .relaxed) == 1)
        }
        lock.unlock()
        #expect(lock.bias.pointee.in == 0 && lock.word.load(ordering: .relaxed) == 0)
        // The owner holds it by the bias; another thread takes the word,
        // revokes the bias, and waits for the owner to give the lock back.
        lock.lock()
        let entered = Atomic<Int>(0)
        let done = DispatchSemaphore(value: 0)
        Thread {
            lock.withLock { entered.store(1, ordering: .relaxed) }
            done.signal()
        }.start()
        usleep(50_000)
        #expect(entered.load(ordering: .relaxed) == 0, "the other thread waits while the owner holds the lock")
        lock.unlock()
        #expect(done.wait(timeout: .now() + 10) == .success)
        #expect(entered.load(ordering: .relaxed) == 1)
        #expect(lock.bias.pointee.revoked == 1, "another thread's lock revoked the bias")
        lock.lock()
        #expect(lock.word.load(ordering: .relaxed) == 1, "after that the owner takes the word too")
        #expect(lock.bias.pointee.in == 0)
        lock.unlock()
        #expect(lock.word.load(ordering: .relaxed) == 0)
        let byBias = lock.lockTellingHow()
        #expect(!byBias && lock.word.load(ordering: .relaxed) == 1, "told: by the word")
        lock.unlock(byBias: byBias)
        #expect(lock.word.load(ordering: .relaxed) == 0)
    }

    @Test("a biased lock tells its owner how it took it, and the told unlock gives back just that")
    func biasedLockTellingHow() {
        let lock = PosixLock(biased: true)
        let first = lock.lockTellingHow()
        #expect(first == sluice__bias_available(), "the owner is told: by the bias")
        #expect(lock.word.load(ordering: .relaxed) == (first ? 0 : 1))
        #expect(lock.bias.pointee.in == (first ? 1 : 0))
        lock.unlock(byBias: first)
        #expect(lock.bias.pointee.in == 0 && lock.word.load(ordering: .relaxed) == 0)
        // Another thread: by the word, told so; its told unlock frees the word.
        let told = Atomic<Int>(-1)
        let done = DispatchSemaphore(value: 0)
        Thread {
            let byBias = lock.lockTellingHow()
            told.store(byBias ? 1 : 0, ordering: .relaxed)
            lock.unlock(byBias: byBias)
            done.signal()
        }.start()
        #expect(done.wait(timeout: .now() + 10) == .success)
        #expect(told.load(ordering: .relaxed) == 0)
        #expect(lock.word.load(ordering: .relaxed) == 0)
    }

    @Test("a biased lock excludes while its bias is revoked under the owner's feet: no increment lost")
    func biasedLockRevokedWhileOwnerRuns() {
        final class Shared: @unchecked Sendable {
            let lock = PosixLock(biased: true)
            var value = 0
            let started = Atomic<Int>(0)
            /// A slow increment: two threads inside at once lose one. Every
            /// other one takes the lock told how, and gives it back so.
            func increment(_ round: Int) {
                if round & 1 == 0 {
                    lock.withLock { slowIncrement() }
                } else {
                    let byBias = lock.lockTellingHow()
                    slowIncrement()
                    lock.unlock(byBias: byBias)
                }
            }
            func slowIncrement() {
                let seen = value
                for _ in 0..<200 { spin.add(1, ordering: .relaxed) }
                value = seen + 1
            }
            let spin = Atomic<Int>(0)
        }
        // Many locks: the owner is inside most of the time, so each revocation
        // finds it there at another point of its critical section.
        for _ in 0..<40 {
            let shared = Shared()
            let rounds = 2_000, others = 2
            DispatchQueue.concurrentPerform(iterations: others + 1) { i in
                if i == 0 {
                    // the owner: takes the lock first, then keeps calling
                    shared.increment(0)
                    shared.started.store(1, ordering: .releasing)
                    for round in 1..<rounds { shared.increment(round) }
                } else {
                    while shared.started.load(ordering: .acquiring) == 0 {}
                    for round in 0..<rounds { shared.increment(round + i) }
                }
            }
            #expect(shared.value == (others + 1) * rounds)
            #expect(shared.lock.word.load(ordering: .relaxed) == 0 && shared.lock.bias.pointee.in == 0)
        }
    }

    @Test("slots: a stale token is not held, generations stay odd while held, and trivial release frees a slot")
    func slotGenerations() {
        var table = SlotTable<Int, Int>()
        let a = table.insert(key: 1, value: 10)
        #expect(a >> 32 & 1 == 1, "a held slot's generation is odd")
        let released = table.header.pointee.releaseTrivial(a)
        #expect(released)
        let again = table.header.pointee.releaseTrivial(a)
        #expect(!again, "a released token is not held any more")
        let heldA = table.contains(a)
        #expect(!heldA)
        let b = table.insert(key: 2, value: 20)
        #expect(b & 0xFFFF_FFFF == a & 0xFFFF_FFFF && b != a, "the slot is reused with a new generation")
        #expect(b >> 32 & 1 == 1)
        let even = (b & 0xFFFF_FFFF) | ((b >> 32 &+ 1) << 32)
        let heldEven = table.contains(even)
        #expect(!heldEven, "an even generation is never held")
        let count = table.count
        #expect(count == 1)
        let removed = table.remove(b)
        #expect(removed.key == 2 && removed.value == 20)
    }

    @Test("superseded values are released at once, trivial or not, and the table grows with them held")
    func supersededReleased() throws {
        let clock = ManualLimiterClock()
        // Trivial keys and values: released by the core's event callback.
        let trivial = try Limiter<Int, Int>(.throttle(interval: .seconds(1)), scheduler: .manual(clock)) { _, _ in }
        // Class values: released through the collected events.
        let tracker = LifetimeTracker()
        let tracked = try Limiter<Int, Tracked>(.throttle(interval: .seconds(1)), scheduler: .manual(clock)) { _, _ in }
        for round in 0..<5 {
            for key in 0..<100 {
                try trivial.submit(round, for: key)
                try tracked.submit(tracker.make(round * 100 + key), for: key)
            }
        }
        // Each key: the first call emitted, the newest pending, the rest dropped.
        #expect(trivial.storage.heldValues == 100)
        #expect(tracked.storage.heldValues == 100)
        #expect(tracker.alive == 100)
        #expect(trivial.statistics.dropped == 300)
        clock.advance(by: .seconds(2))
        #expect(trivial.storage.heldValues == 0)
        #expect(tracked.storage.heldValues == 0)
        #expect(tracker.alive == 0)
        try trivial.storage.checkInvariants()
        try tracked.storage.checkInvariants()
    }
}
