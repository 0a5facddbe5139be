/* bias.c — the out-of-line parts of a lock's bias (sluice_bias.h): the
 * process's one-time setup and making a bias, when a lock is made; claiming
 * it, once per lock; revoking it, once per lock used by a second thread. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE 1 /* syscall() */
#endif
#include "sluice_bias.h"

#include "loop-internal.h"

#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>

#if defined(__linux__)
#include <linux/membarrier.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

#if defined(__SANITIZE_THREAD__)
#define SLUICE_BIAS_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define SLUICE_BIAS_TSAN 1
#endif
#endif

uintptr_t sluice__bias_self_slow(void) { return (uintptr_t)pthread_self(); }

/* Whether the process can bias its locks: membarrier's private expedited
 * command registered (Linux 4.14 and later), no ThreadSanitizer, and not
 * turned off by SLUICE_LOCK_BIAS=0. The registration is slow once the
 * process has threads (the kernel waits for an RCU grace period: 6 ms
 * measured on the benchmark machine), so it is made when a biased lock is
 * made (sluice__bias_init()), never on a lock's first use. */
static pthread_once_t once = PTHREAD_ONCE_INIT;
static bool available;
static bool ready; /* written once, under `once` */

static void check_available(void) {
#if defined(__linux__) && defined(SYS_membarrier) && !defined(SLUICE_BIAS_TSAN)
    const char *env = getenv("SLUICE_LOCK_BIAS");
    if (!env || strcmp(env, "0") != 0) {
        long cmds = syscall(SYS_membarrier, MEMBARRIER_CMD_QUERY, 0, 0);
        if (cmds >= 0 && (cmds & MEMBARRIER_CMD_PRIVATE_EXPEDITED))
            available = syscall(SYS_membarrier, MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED, 0, 0) == 0;
    }
#endif
    __atomic_store_n(&ready, true, __ATOMIC_RELEASE);
}

bool sluice__bias_available(void) {
    pthread_once(&once, check_available);
    return available;
}

bool sluice__bias_ready(void) { return __atomic_load_n(&ready, __ATOMIC_ACQUIRE); }

void sluice__bias_init(sluice_bias_t *b, bool biased) {
    bool on = biased && sluice__bias_available();
    b->owner = on ? 0 : SLUICE_BIAS_NOBODY;
    b->in = 0;
    b->revoked = on ? 0 : 1;
}

bool sluice__bias_claim(sluice_bias_t *b, uintptr_t self) {
    /* (a lock has no owner, 0, only when sluice__bias_init() found biasing on) */
    uintptr_t none = 0;
    return __atomic_compare_exchange_n(&b->owner, &none, self, false, __ATOMIC_ACQUIRE, __ATOMIC_RELAXED);
}

void sluice__bias_revoke(sluice_bias_t *b) {
    __atomic_store_n(&b->revoked, 1, __ATOMIC_RELAXED);
#if defined(__linux__) && defined(SYS_membarrier)
    /* Every thread of the process passes a full barrier: the owner's `in`
     * is visible now, or its next read of `revoked` sees it set. (Only a
     * process that registered gets here: the owner's claim needed it.) */
    if (syscall(SYS_membarrier, MEMBARRIER_CMD_PRIVATE_EXPEDITED, 0, 0) != 0) {
        /* a child forked after the claim: its memory was never registered */
        if (syscall(SYS_membarrier, MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED, 0, 0) != 0 ||
            syscall(SYS_membarrier, MEMBARRIER_CMD_PRIVATE_EXPEDITED, 0, 0) != 0)
            abort(); /* registered once already: cannot fail */
    }
#endif
    /* The owner holds the lock by the bias a few hundred instructions at most;
     * it may also have been descheduled inside: yield after a while. */
    for (unsigned i = 0; __atomic_load_n(&b->in, __ATOMIC_ACQUIRE); i++) {
        if (i < 1024)
            sluice__cpu_relax();
        else
            sched_yield();
    }
}
