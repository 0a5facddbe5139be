/* lock.c — the shard lock's slow paths (loop-internal.h: sluice__lock_t).
 *
 * Linux: a futex word, 0 free, 1 held, 2 held and maybe waited on. A locker
 * that finds it held spins a little (the holder is usually a few hundred
 * instructions from its unlock), then marks the word 2 and sleeps on it; an
 * unlock that finds 2 clears the word and wakes one sleeper, which marks it
 * 2 again when it takes it (so a later unlock wakes the next). Elsewhere
 * the lock is a pthread mutex. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE 1 /* syscall(), SYS_futex */
#endif
#include "loop-internal.h"

#if defined(SLM_FUTEX_LOCK)

#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

/* Spins before sleeping: about a microsecond of pause loops, longer than
 * a shard's critical section when its holder runs. */
#define SLM_LOCK_SPINS 128

int sluice__lock_init(sluice__lock_t *l) {
    atomic_init(&l->v, 0);
    return 0;
}

void sluice__lock_destroy(sluice__lock_t *l) { (void)l; }

void sluice__lock_slow(sluice__lock_t *l) {
    for (int i = 0; i < SLM_LOCK_SPINS; i++) {
        sluice__cpu_relax();
        uint32_t c = atomic_load_explicit(&l->v, memory_order_relaxed);
        if (c == 0 && atomic_compare_exchange_weak_explicit(&l->v, &c, 1, memory_order_acquire, memory_order_relaxed))
            return;
        if (c == 2) break; /* others sleep already: join them */
    }
    /* Held: announce a waiter (2) and sleep until the word is free. Taking
     * it with 2 is conservative: the next unlock may wake nobody. */
    while (atomic_exchange_explicit(&l->v, 2, memory_order_acquire) != 0)
        syscall(SYS_futex, &l->v, FUTEX_WAIT_PRIVATE, 2, NULL, NULL, 0);
}

void sluice__unlock_slow(sluice__lock_t *l) {
    /* The word was 2 (the fetch_sub left 1): free it and wake one sleeper. */
    atomic_store_explicit(&l->v, 0, memory_order_release);
    syscall(SYS_futex, &l->v, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
}

#else

int sluice__lock_init(sluice__lock_t *l) { return pthread_mutex_init(&l->mu, NULL); }

void sluice__lock_destroy(sluice__lock_t *l) { pthread_mutex_destroy(&l->mu); }

#endif
