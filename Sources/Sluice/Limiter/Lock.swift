import CSluiceLoop
import Synchronization

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// A mutual-exclusion lock: a 32-bit atomic word whose uncontended lock and
/// unlock are one atomic read-modify-write each, inlined, with a parking
/// place (a `pthread_mutex_t` and a `pthread_cond_t`) for threads that find
/// it held.
///
/// The word is 0 (free), 1 (held) or 2 (held, and a thread may be parked):
/// Drepper's "mutex 2" from "Futexes Are Tricky", with a condition variable
/// in place of the futex (Swift cannot call the variadic `syscall`). A
/// locker that finds it held spins briefly, then marks it 2 and parks under
/// the parking mutex until an unlock that finds 2 frees the word and signals
/// one parked thread. A parked thread checks the word and starts waiting
/// under the parking mutex, and an unlock signals under it, so no wake-up
/// is lost.
///
/// Why not `pthread_mutex_t` alone: glibc's lock and unlock cost ~55
/// instructions per pair through two calls, ~1/8 of a limiter's submit on a
/// manual clock. Why not `Synchronization.Mutex`: on Linux it waits on a
/// futex in code that ThreadSanitizer does not see, so every access it
/// protects is reported as a race (tried with Swift 6.3.1). This lock's
/// atomics are compiled into Sluice (acquire on lock, release on unlock), so
/// ThreadSanitizer sees the ordering they give, and the parking place is
/// made of pthread calls, which it intercepts.
///
/// It is Sluice's one lock: every Swift module of the package (`package`
/// access) uses it, directly or through ``Locked``. Measured with callgrind
/// (a loop of lock, one addition, unlock; Swift 6.3.1 `-O`, x86-64), a pair
/// by the word costs 15 instructions per iteration, as `Synchronization.Mutex`
/// does; a `pthread_mutex_t` costs 66.
///
/// A lock made `biased` (a limiter's) also has a way in and out for the
/// first thread that takes it, its owner, with plain loads and stores and no
/// atomic read-modify-write: a limiter used from one thread pays no atomic
/// operation per call. The first time another thread takes it (by the word),
/// that thread revokes the bias for good, once, with a `membarrier` system
/// call; from then on every thread takes the word, the owner too
/// (`sluice_bias.h` has the protocol; docs/design.md, "The lock's bias").
/// The process registers for that system call once, when its first biased
/// lock is made (the kernel may take milliseconds), so no call waits for it.
/// Where `membarrier` is not available, under ThreadSanitizer, and with
/// `SLUICE_LOCK_BIAS=0` in the environment, no lock is biased.
///
/// Not recursive: locking it again on the thread that holds it deadlocks.
@usableFromInline
package final class PosixLock: @unchecked Sendable {
    /// 0 free, 1 held, 2 held with maybe a parked thread.
    @usableFromInline let word = Atomic<UInt32>(0)
    /// The bias: its owner, whether the owner is in, whether it was revoked.
    @usableFromInline let bias: UnsafeMutablePointer<sluice_bias_t>
    /// The parking place (used only when the word is found held).
    private let parkMutex: UnsafeMutablePointer<pthread_mutex_t>
    private let parked: UnsafeMutablePointer<pthread_cond_t>

    /// A lock; `biased`: with a bias towards the first thread that takes it.
    package init(biased: Bool = false) {
        bias = .allocate(capacity: 1)
        // (also the process's one-time setup of the bias, here rather than
        // on the lock's first use: see `sluice__bias_init`)
        bias.initialize(to: sluice_bias_t())
        sluice__bias_init(bias, biased)
        parkMutex = .allocate(capacity: 1)
        parkMutex.initialize(to: pthread_mutex_t())
        var rc = pthread_mutex_init(parkMutex, nil)
        precondition(rc == 0, "pthread_mutex_init failed: \(rc)")
        parked = .allocate(capacity: 1)
        parked.initialize(to: pthread_cond_t())
        rc = pthread_cond_init(parked, nil)
        precondition(rc == 0, "pthread_cond_init failed: \(rc)")
    }

    deinit {
        pthread_cond_destroy(parked)
        parked.deinitialize(count: 1)
        parked.deallocate()
        pthread_mutex_destroy(parkMutex)
        parkMutex.deinitialize(count: 1)
        parkMutex.deallocate()
        bias.deinitialize(count: 1)
        bias.deallocate()
    }

    /// Takes the lock, waiting while another thread holds it.
    @inlinable @inline(__always)
    package func lock() {
        _ = lockTellingHow()
    }

    /// Releases the lock (held by the calling thread).
    @inlinable @inline(__always)
    package func unlock() {
        if sluice_bias_exit(bias) { return }
        unlockWord()
    }

    /// Takes the lock as ``lock()`` does, and tells how: `true` by the bias
    /// (the calling thread is its owner). A caller that keeps the answer
    /// gives the lock back with ``unlock(byBias:)``, which then skips the
    /// question ``unlock()`` asks (whose thread, and whether it is in): on
    /// a hot path, a load of the thread pointer and two of the bias.
    @inlinable @inline(__always)
    package func lockTellingHow() -> Bool {
        if sluice_bias_enter(bias) { return true }
        if !word.compareExchange(expected: 0, desired: 1, successOrdering: .acquiring, failureOrdering: .relaxed)
            .exchanged
        {
            lockSlow()
        }
        // another thread than the owner, the first time: the owner out first
        if sluice_bias_must_revoke(bias) { sluice__bias_revoke(bias) }
        return false
    }

    /// Releases the lock taken by ``lockTellingHow()``, given its answer
    /// (``unlock()`` does as well, asking).
    @inlinable @inline(__always)
    package func unlock(byBias: Bool) {
        if byBias {
            sluice_bias_leave(bias)
        } else {
            unlockWord()
        }
    }

    /// Releases the lock word.
    @inlinable @inline(__always)
    func unlockWord() {
        if word.wrappingSubtract(1, ordering: .releasing).oldValue != 1 { unlockSlow() }
    }

    /// The word was found held: spin a little, then park until it is free.
    @usableFromInline @inline(never)
    func lockSlow() {
        // A holder is usually a few hundred instructions from its unlock.
        for _ in 0..<128 {
            let seen = word.load(ordering: .relaxed)
            if seen == 0,
                word.compareExchange(expected: 0, desired: 1, successOrdering: .acquiring, failureOrdering: .relaxed)
                    .exchanged
            {
                return
            }
            if seen == 2 { break }  // others are parked already: join them
        }
        // Mark a waiter (2) and park until the word is free. Taking it with
        // 2 is conservative: its unlock may signal nobody.
        pthread_mutex_lock(parkMutex)
        while word.exchange(2, ordering: .acquiring) != 0 {
            pthread_cond_wait(parked, parkMutex)
        }
        pthread_mutex_unlock(parkMutex)
    }

    /// The word was 2 (the subtraction left 1): free it and wake one parked thread.
    @usableFromInline @inline(never)
    func unlockSlow() {
        word.store(0, ordering: .releasing)
        pthread_mutex_lock(parkMutex)
        pthread_cond_signal(parked)
        pthread_mutex_unlock(parkMutex)
    }

    /// Runs `body` with the lock held.
    @inlinable @discardableResult
    package func withLock<Result, Failure: Error>(_ body: () throws(Failure) -> Result) throws(Failure) -> Result {
        lock()
        defer { unlock() }
        return try body()
    }
}

/// A value guarded by a ``PosixLock``.
package final class Locked<Value>: @unchecked Sendable {
    private let lock = PosixLock()
    private var value: Value

    package init(_ value: Value) {
        self.value = value
    }

    /// Runs `body` with exclusive access to the value.
    @inline(__always) @discardableResult
    package func withLock<Result, Failure: Error>(
        _ body: (inout Value) throws(Failure) -> Result
    ) throws(Failure) -> Result {
        try lock.withLock { () throws(Failure) -> Result in try body(&value) }
    }
}
