/*
 * sluice_bias.h — a lock's bias towards the one thread that uses it: the
 * fast path under the Swift layer's lock (PosixLock, Sources/Sluice/Limiter/
 * Lock.swift). Exposed by this module for Swift; not part of the installed
 * C API.
 *
 * A limiter used from one thread (a server's event loop, a single-threaded
 * job) still needs a lock, since nothing stops another thread from calling
 * it; but two atomic read-modify-writes per call, to take the lock and give
 * it back, cost more than the rest of the call on some machines. A bias
 * gives the lock's first user, its owner, a way in and out with plain loads
 * and stores; any other thread takes the lock word as usual and, the first
 * time, revokes the bias for good, after which the owner takes the word too.
 *
 * The protocol is Dekker's with the costly half on the revoker only (an
 * asymmetric fence): the owner announces itself (`in` = 1) and then reads
 * `revoked`; the revoker, holding the lock word, sets `revoked` and runs
 * membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED), which makes every thread of
 * the process pass a full memory barrier, so afterwards either the owner's
 * `in` is visible to it (it waits until the owner leaves) or the owner's
 * read of `revoked` comes after the barrier and sees it set (the owner backs
 * out and takes the word). Between its store and its load the owner needs
 * only a compiler barrier.
 *
 * Where membarrier is not available (an old kernel, a seccomp filter), under
 * ThreadSanitizer (which cannot see that barrier), and with SLUICE_LOCK_BIAS=0
 * in the environment, no lock is ever biased: every thread takes the word.
 */
#ifndef SLUICE_BIAS_H
#define SLUICE_BIAS_H

#include <stdbool.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/** The owner of a lock that is never biased: no thread. */
#define SLUICE_BIAS_NOBODY UINTPTR_MAX

/** A lock's bias, made by sluice__bias_init(). One per lock. */
typedef struct sluice_bias {
    uintptr_t owner;  /**< the owner's thread (sluice_bias_self()), 0 before the lock's first use */
    uint32_t in;      /**< 1 while the owner holds the lock by the bias */
    uint32_t revoked; /**< 1 once another thread took the lock: the bias is gone for good */
} sluice_bias_t;

/** The calling thread's identity, never 0: its thread pointer on Linux
 * (one load or register read), else pthread_self(). */
static inline uintptr_t sluice_bias_self(void) {
#if defined(__x86_64__) && defined(__linux__)
    uintptr_t t;
    __asm__("mov %%fs:0, %0" : "=r"(t)); /* the TCB points to itself (x86-64 TLS ABI) */
    return t;
#elif defined(__aarch64__) && defined(__linux__)
    uintptr_t t;
    __asm__ __volatile__("mrs %0, tpidr_el0" : "=r"(t)); /* the thread's TLS block */
    return t;
#else
    extern uintptr_t sluice__bias_self_slow(void);
    return sluice__bias_self_slow();
#endif
}

/** Whether this process biases locks: membarrier there, no
 * ThreadSanitizer, and SLUICE_LOCK_BIAS not "0" in the environment. The
 * first call does the process's one-time setup: it registers for
 * MEMBARRIER_CMD_PRIVATE_EXPEDITED, for which the kernel waits for an RCU
 * grace period once the process has more than one thread (milliseconds).
 * Thread-safe; later calls only read the answer. */
bool sluice__bias_available(void);

/** Whether the one-time setup of sluice__bias_available() has run. */
bool sluice__bias_ready(void);

/** Makes a lock's bias: when `biased` and the process biases locks, one
 * whose first user becomes its owner; otherwise one that is never biased
 * (owner SLUICE_BIAS_NOBODY, revoked), which every thread takes by the word
 * and nobody revokes. Runs the one-time setup now, while the lock is made,
 * so that no lock or unlock ever waits for it. */
void sluice__bias_init(sluice_bias_t *b, bool biased);

/** Makes the calling thread the owner when the lock has none and biasing is
 * available (out of line: once per lock). @return whether it is the owner. */
bool sluice__bias_claim(sluice_bias_t *b, uintptr_t self);

/** Called holding the lock word, by a thread that is not the owner, while
 * the bias stands (sluice_bias_must_revoke()): revokes it and returns once
 * the owner is out. */
void sluice__bias_revoke(sluice_bias_t *b);

/** Takes the lock by the bias. @return true: the calling thread, the owner,
 * holds the lock (give it back with sluice_bias_exit()); false: take the
 * lock word (then sluice_bias_must_revoke()). */
static inline bool sluice_bias_enter(sluice_bias_t *b) {
    uintptr_t self = sluice_bias_self();
    uintptr_t owner = __atomic_load_n(&b->owner, __ATOMIC_RELAXED);
    /* (self is never 0, so no owner yet, 0, is never taken for self) */
    if (owner != self && (owner != 0 || !sluice__bias_claim(b, self))) return false;
    __atomic_store_n(&b->in, 1, __ATOMIC_RELAXED);
    __atomic_signal_fence(__ATOMIC_SEQ_CST); /* the store, then the load (the revoker's membarrier orders them) */
    if (__atomic_load_n(&b->revoked, __ATOMIC_RELAXED)) {
        __atomic_store_n(&b->in, 0, __ATOMIC_RELAXED);
        return false;
    }
    __atomic_signal_fence(__ATOMIC_SEQ_CST); /* the critical section after the check */
    return true;
}

/** Gives the lock back, held by the bias: for a caller that kept
 * sluice_bias_enter()'s true (it is the owner, and in). */
static inline void sluice_bias_leave(sluice_bias_t *b) {
    __atomic_store_n(&b->in, 0, __ATOMIC_RELEASE); /* the critical section before the exit */
}

/** Gives the lock back if the calling thread holds it by the bias. @return
 * false: it holds the lock word (give that back). */
static inline bool sluice_bias_exit(sluice_bias_t *b) {
    if (__atomic_load_n(&b->owner, __ATOMIC_RELAXED) != sluice_bias_self() ||
        !__atomic_load_n(&b->in, __ATOMIC_RELAXED))
        return false;
    sluice_bias_leave(b);
    return true;
}

/** After taking the lock word: whether this thread must revoke the bias
 * first (sluice__bias_revoke()). */
static inline bool sluice_bias_must_revoke(const sluice_bias_t *b) {
    uintptr_t owner = __atomic_load_n(&b->owner, __ATOMIC_RELAXED);
    return owner != 0 && owner != sluice_bias_self() && !__atomic_load_n(&b->revoked, __ATOMIC_RELAXED);
}

#ifdef __cplusplus
}
#endif

#endif
