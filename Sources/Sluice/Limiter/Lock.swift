#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// A mutual-exclusion lock on `pthread_mutex_t`.
///
/// Sluice uses this rather than `Synchronization.Mutex` because on Linux
/// `Mutex` waits on a futex that ThreadSanitizer does not see: every access
/// it protects is then reported as a race (tried with Swift 6.3.1), which
/// would make `swift test --sanitize=thread` useless. pthread mutexes are
/// intercepted by ThreadSanitizer and cost the same uncontended.
@usableFromInline
final class PosixLock: @unchecked Sendable {
    @usableFromInline let mutex: UnsafeMutablePointer<pthread_mutex_t>

    init() {
        mutex = .allocate(capacity: 1)
        mutex.initialize(to: pthread_mutex_t())
        let rc = pthread_mutex_init(mutex, nil)
        precondition(rc == 0, "pthread_mutex_init failed: \(rc)")
    }

    deinit {
        pthread_mutex_destroy(mutex)
        mutex.deinitialize(count: 1)
        mutex.deallocate()
    }

    /// Runs `body` with the lock held.
    @inlinable
    func withLock<Result, Failure: Error>(_ body: () throws(Failure) -> Result) throws(Failure) -> Result {
        pthread_mutex_lock(mutex)
        defer { pthread_mutex_unlock(mutex) }
        return try body()
    }
}

/// A value guarded by a ``PosixLock``.
final class Locked<Value>: @unchecked Sendable {
    private let lock = PosixLock()
    private var value: Value

    init(_ value: Value) {
        self.value = value
    }

    /// Runs `body` with exclusive access to the value.
    @inline(__always)
    func withLock<Result, Failure: Error>(_ body: (inout Value) throws(Failure) -> Result) throws(Failure) -> Result {
        try lock.withLock { () throws(Failure) -> Result in try body(&value) }
    }
}
