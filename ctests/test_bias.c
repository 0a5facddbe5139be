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
#define TEST_NAME "test_bias"
#include "support/check.h"

#include "sluice_bias.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define ROUNDS 20000

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
    CHECK(pthread_create(&t, NULL, worker, l) == 0, "pthread_create");
    worker(l);
    pthread_join(t, NULL);
    CHECK(l->counter == 2 * ROUNDS + 1, "%llu increments counted", (unsigned long long)l->counter);
}

/* A lock made unbiased: both threads take the word, every time, and nobody
 * revokes (a revocation needs membarrier, which may be missing). */
static void check_word_only(struct lock *l) {
    CHECK(l->bias.owner == SLUICE_BIAS_NOBODY && l->bias.revoked == 1, "made unbiased");
    run_two(l);
    CHECK(l->revokes == 0, "%d revocations of an unbiased lock", l->revokes);
    CHECK(l->by_word == 2 * ROUNDS + 1, "%llu entries by the word", (unsigned long long)l->by_word);
}

static void case_setup_at_init(void) {
    CHECK(!sluice__bias_ready(), "the setup ran before any lock was made");
    struct lock l;
    lock_make(&l, true);
    CHECK(sluice__bias_ready(), "making a biased lock did not run the setup (left to its first use)");
    if (sluice__bias_available())
        CHECK(l.bias.owner == 0 && l.bias.revoked == 0, "a biased lock has no owner before its first use");
    else /* (ThreadSanitizer, no membarrier): never biased */
        CHECK(l.bias.owner == SLUICE_BIAS_NOBODY && l.bias.revoked == 1, "made unbiased where biasing is off");
}

static void case_unbiased(void) {
    struct lock l;
    lock_make(&l, false);
    check_word_only(&l);
}

static void case_turned_off(void) {
    setenv("SLUICE_LOCK_BIAS", "0", 1);
    struct lock l;
    lock_make(&l, true);
    CHECK(!sluice__bias_available(), "SLUICE_LOCK_BIAS=0 leaves biasing on");
    check_word_only(&l);
}

static void case_biased(void) {
    struct lock l;
    lock_make(&l, true);
    if (!sluice__bias_available()) return; /* nothing more to see here */
    lock_take(&l);
    CHECK(l.bias.owner == sluice_bias_self() && l.bias.in == 1 && l.by_word == 0, "the first user owns the bias");
    l.counter++;
    lock_give(&l);
    CHECK(l.bias.in == 0, "the owner is out");
    pthread_t t;
    CHECK(pthread_create(&t, NULL, worker, &l) == 0, "pthread_create");
    worker(&l);
    pthread_join(t, NULL);
    CHECK(l.counter == 2 * ROUNDS + 1, "%llu increments counted", (unsigned long long)l.counter);
    CHECK(l.revokes == 1 && l.bias.revoked == 1, "%d revocations, not one", l.revokes);
}

/* Each case in a child process: the setup is once per process. */
static int run_in_child(const char *name, void (*fn)(void)) {
    fflush(stderr);
    pid_t pid = fork();
    if (pid < 0) {
        perror("fork");
        return 1;
    }
    if (pid == 0) {
        fn();
        _exit(0);
    }
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
