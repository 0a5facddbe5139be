/* test_loop_lock.c — the shard lock of the loop layer (loop-internal.h,
 * sluice__lock_t: a futex word on Linux, a pthread mutex elsewhere).
 *
 * Checked here:
 *  - mutual exclusion: THREADS threads each make ROUNDS non-atomic
 *    read-modify-writes of one counter under the lock, and the count is
 *    exact; a flag set inside the critical section is never found set by
 *    another holder;
 *  - the sleeping path: every SLEEP_EVERY rounds a holder sleeps 200 us with
 *    the lock held, far longer than a locker spins, so the others go to
 *    sleep in the kernel (FUTEX_WAIT) and must be woken by the unlock: a
 *    lost wake-up hangs the test (the ctest timeout fails it);
 *  - the word is free again (0) once everything is unlocked (Linux).
 * Under ThreadSanitizer (make sanitize-thread) a missing acquire or release
 * on the lock shows as a race on the counter. */
#include "../Sources/CSluiceLoop/loop-internal.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define THREADS 4
#define ROUNDS 50000
#define SLEEP_EVERY 2500

static sluice__lock_t lock;
static uint64_t counter; /* guarded by lock, deliberately not atomic */
static int inside;       /* guarded by lock */
static atomic_int violations;

static void *worker(void *arg) {
    (void)arg;
    for (int i = 0; i < ROUNDS; i++) {
        sluice__lock(&lock);
        if (inside) atomic_fetch_add(&violations, 1);
        inside = 1;
        uint64_t c = counter;
        if (i % SLEEP_EVERY == SLEEP_EVERY - 1) {
            struct timespec ts = { 0, 200000 };
            nanosleep(&ts, NULL);
        }
        counter = c + 1;
        inside = 0;
        sluice__unlock(&lock);
    }
    return NULL;
}

int main(void) {
    if (sluice__lock_init(&lock) != 0) {
        fprintf(stderr, "FAIL: sluice__lock_init\n");
        return 1;
    }
    /* single thread: lock, unlock, lock again */
    sluice__lock(&lock);
    sluice__unlock(&lock);
    sluice__lock(&lock);
    sluice__unlock(&lock);

    pthread_t t[THREADS];
    for (int i = 0; i < THREADS; i++)
        if (pthread_create(&t[i], NULL, worker, NULL) != 0) {
            fprintf(stderr, "FAIL: pthread_create\n");
            return 1;
        }
    for (int i = 0; i < THREADS; i++) pthread_join(t[i], NULL);
    int fails = 0;
    if (counter != (uint64_t)THREADS * ROUNDS) {
        fprintf(stderr, "FAIL: counter %llu, want %llu\n", (unsigned long long)counter,
                (unsigned long long)THREADS * ROUNDS);
        fails++;
    }
    if (atomic_load(&violations) != 0) {
        fprintf(stderr, "FAIL: %d holders found the lock held by another\n", atomic_load(&violations));
        fails++;
    }
#if defined(SLM_FUTEX_LOCK)
    if (atomic_load(&lock.v) != 0) {
        fprintf(stderr, "FAIL: lock word %u after the last unlock\n", (unsigned)atomic_load(&lock.v));
        fails++;
    }
#endif
    sluice__lock_destroy(&lock);
    if (fails) return 1;
    printf("ok: %d threads x %d rounds under the shard lock, exact\n", THREADS, ROUNDS);
    return 0;
}
