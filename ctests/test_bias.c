/* test_bias.c — making a lock's bias (sluice_bias.h, bias.c), the part the
 * Swift layer's lock (PosixLock) relies on before any thread uses the lock.
 *
 * Checked here, each case in a process of its own (the setup is once per
 * process):
 *  - the process's one-time setup (membarrier registration, slow once the
 *    process has threads) runs when a biased lock is made, not on its first
 *    use: sluice__bias_ready() turns true in sluice__bias_init();
 *  - a lock made unbiased is never biased: its first user takes the word
 *    and must not revoke anything;
 *  - with SLUICE_LOCK_BIAS=0 (as where membarrier is missing or refused),
 *    a lock made biased is unbiased too, and two threads take it in turn,
 *    each by the word, with no revocation (which needs membarrier) and an
 *    exact count;
 *  - with biasing on, the first user owns the bias and a second thread
 *    revokes it once, after which both take the word, and the count of
 *    increments made under the lock is exact. */
#include "sluice_bias.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define ROUNDS 20000

static int failures;
#define CHECK(cond)                                                                                                    \
    do {                                                                                                               \
        if (!(cond)) {                                                                                                 \
            fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond);                                   \
            failures++;                                                                                                \
        }                                                                                                              \
    } while (0)

/* The Swift lock's protocol (Lock.swift), with a pthread mutex as its word. */
struct lock {
    sluice_bias_t bias;
    pthread_mutex_t word;
    int revokes;      /* under `word` */
    uint64_t counter; /* under the lock, deliberately not atomic */
    uint64_t by_word; /* entries by the word, under `word` */
};

static void lock_take(struct lock *l) {
    if (sluice_bias_enter(&l->bias)) return;
    pthread_mutex_lock(&l->word);
    l->by_word++;
    if (sluice_bias_must_revoke(&l->bias)) {
        l->revokes++;
        sluice__bias_revoke(&l->bias);
    }
}

static void lock_give(struct lock *l) {
    if (sluice_bias_exit(&l->bias)) return;
    pthread_mutex_unlock(&l->word);
}

static void lock_make(struct lock *l, bool biased) {
    memset(l, 0, sizeof *l);
    pthread_mutex_init(&l->word, NULL);
    sluice__bias_init(&l->bias, biased);
}

static void *worker(void *arg) {
    struct lock *l = arg;
    for (int i = 0; i < ROUNDS; i++) {
        lock_take(l);
        l->counter++;
        lock_give(l);
    }
    return NULL;
}

/* Two threads (this one first, so that it becomes the owner where biasing
 * is on) make ROUNDS increments each under the lock. */
static void run_two(struct lock *l) {
    lock_take(l);
    l->counter++;
    lock_give(l);
    pthread_t t;
    CHECK(pthread_create(&t, NULL, worker, l) == 0);
    worker(l);
    pthread_join(t, NULL);
    CHECK(l->counter == 2 * ROUNDS + 1);
}

static int case_setup_at_init(void) {
    CHECK(!sluice__bias_ready());
    struct lock l;
    lock_make(&l, true);
    CHECK(sluice__bias_ready()); /* made, not yet used: the setup ran */
    if (sluice__bias_available()) {
        CHECK(l.bias.owner == 0 && l.bias.revoked == 0);
    } else { /* (ThreadSanitizer, no membarrier): never biased */
        CHECK(l.bias.owner == SLUICE_BIAS_NOBODY && l.bias.revoked == 1);
    }
    return failures;
}

static int case_unbiased(void) {
    struct lock l;
    lock_make(&l, false);
    CHECK(l.bias.owner == SLUICE_BIAS_NOBODY && l.bias.revoked == 1);
    run_two(&l);
    CHECK(l.revokes == 0);
    CHECK(l.by_word == 2 * ROUNDS + 1);
    return failures;
}

static int case_turned_off(void) {
    setenv("SLUICE_LOCK_BIAS", "0", 1);
    struct lock l;
    lock_make(&l, true);
    CHECK(!sluice__bias_available());
    CHECK(l.bias.owner == SLUICE_BIAS_NOBODY && l.bias.revoked == 1);
    run_two(&l);
    CHECK(l.revokes == 0);
    CHECK(l.by_word == 2 * ROUNDS + 1);
    return failures;
}

static int case_biased(void) {
    struct lock l;
    lock_make(&l, true);
    if (!sluice__bias_available()) return failures; /* nothing more to see here */
    lock_take(&l);
    CHECK(l.bias.owner == sluice_bias_self() && l.bias.in == 1 && l.by_word == 0);
    l.counter++;
    lock_give(&l);
    CHECK(l.bias.in == 0);
    pthread_t t;
    CHECK(pthread_create(&t, NULL, worker, &l) == 0);
    worker(&l);
    pthread_join(t, NULL);
    CHECK(l.counter == 2 * ROUNDS + 1);
    CHECK(l.revokes == 1);
    CHECK(l.bias.revoked == 1);
    return failures;
}

static int run_in_child(const char *name, int (*fn)(void)) {
    fflush(stderr);
    pid_t pid = fork();
    if (pid < 0) {
        perror("fork");
        return 1;
    }
    if (pid == 0) _exit(fn() ? 1 : 0);
    int status = 0;
    if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        fprintf(stderr, "test_bias: case %s failed (status %d)\n", name, status);
        return 1;
    }
    return 0;
}

int main(void) {
    int bad = 0;
    bad += run_in_child("setup at init", case_setup_at_init);
    bad += run_in_child("unbiased", case_unbiased);
    bad += run_in_child("turned off", case_turned_off);
    bad += run_in_child("biased", case_biased);
    if (bad) return 1;
    printf("test_bias: ok\n");
    return 0;
}
