/* test_loop_hot_line.c — a call on a loop limiter writes one shared cache
 * line: the shard's lock and the core's clock and decision counters.
 *
 * Two threads calling one loop limiter on their own keys still meet on the
 * shards (keys are hashed over all of them), and a call that finds a shard
 * last used on the other CPU must fetch what it writes from there. The core
 * keeps what every call writes at the start of its struct (limiter-internal.h:
 * host_word, now_seen, count.decided), the loop layer allocates it aligned to
 * a line, and on Linux keeps the shard's futex lock in the core's host word,
 * so that is one line per call, not three.
 *
 * Checked here:
 *  - layout, for several shard counts: every shard's lock (s->lk) is the
 *    core's host word on Linux (the shard's own mutex elsewhere), and the
 *    lock, the core's clock (sluice__limiter_hot) and its four decision
 *    counters lie in one cache line;
 *  - the lock still excludes where it now lives: THREADS threads make
 *    CALLS rate checks each on the same KEYS keys (a burst of BURST per
 *    hour, so nothing refills during the test) and exactly BURST calls per
 *    key are admitted, no more: a lost update under a broken lock admits
 *    more (and ThreadSanitizer reports the race, make sanitize-thread);
 *    the limiter's counters agree with what the threads saw. */
#define TEST_NAME "test_loop_hot_line"
#include "loop_test_util.h"

#include <inttypes.h>
#include <pthread.h>

#include "../Sources/CSluiceLoop/loop-internal.h"
#include "limiter-internal.h"

#define THREADS 4
#define CALLS 20000
#define KEYS 8
#define BURST 500

static bool same_line(const void *a, const void *b) {
    return (uintptr_t)a / SLM_CACHE_LINE == (uintptr_t)b / SLM_CACHE_LINE;
}

static void check_layout(sluice_loop_t *loop, unsigned shards) {
    sluice_config_t c = lt_config(sluice_rate(100, (int64_t)LT_MS * 1000, 0), NULL, NULL);
    sluice_mt_t *m = NULL;
    LT_OK(sluice_mt_new(&m, loop, &c, shards));
    if (!m) return;
    for (unsigned i = 0; i < m->nshards; i++) {
        struct shard *s = sluice__shard_at(m, i);
        struct sluice_limiter *core = s->core;
#if defined(SLM_FUTEX_LOCK)
        LT_CHECK(s->lk == sluice__limiter_host_word(core),
                 "shards %u, shard %u: the lock is not in the core's host word", shards, i);
#else
        LT_CHECK(s->lk == &s->mu, "shards %u, shard %u: the lock is not the shard's mutex", shards, i);
#endif
        const void *hot = sluice__limiter_hot(core);
        LT_CHECK(same_line(hot, &core->now_seen), "shards %u, shard %u: the clock is not the hot address", shards, i);
        for (int k = 0; k < 4; k++)
            LT_CHECK(same_line(hot, &core->count.decided[k]),
                     "shards %u, shard %u: decision counter %d in another line than the clock", shards, i, k);
#if defined(SLM_FUTEX_LOCK)
        LT_CHECK(same_line(hot, s->lk), "shards %u, shard %u: the lock in another line than the clock", shards, i);
#endif
    }
    sluice_mt_free(m);
}

struct worker {
    sluice_mt_t *m;
    pthread_barrier_t *start;
    uint64_t admitted[KEYS];
    int errors;
};

static void *hammer(void *arg) {
    struct worker *w = arg;
    pthread_barrier_wait(w->start);
    for (int i = 0; i < CALLS; i++) {
        sluice_decision_t d;
        unsigned k = (unsigned)i % KEYS;
        int rc = sluice_mt_submit_u64(w->m, 1000 + k, (uint64_t)i, &d);
        if (rc != 0)
            w->errors++;
        else if (d.kind == SLUICE_EMITTED)
            w->admitted[k]++;
    }
    return NULL;
}

static void check_exclusion(sluice_loop_t *loop) {
    /* BURST per hour: no refill within the test */
    sluice_config_t c = lt_config(sluice_rate(BURST, (int64_t)LT_MS * 1000 * 3600, 0), NULL, NULL);
    sluice_mt_t *m = NULL;
    LT_OK(sluice_mt_new(&m, loop, &c, 0));
    if (!m) return;
    pthread_barrier_t start;
    pthread_barrier_init(&start, NULL, THREADS);
    struct worker w[THREADS];
    pthread_t th[THREADS];
    for (int t = 0; t < THREADS; t++) {
        memset(&w[t], 0, sizeof w[t]);
        w[t].m = m;
        w[t].start = &start;
        LT_CHECK(pthread_create(&th[t], NULL, hammer, &w[t]) == 0, "pthread_create");
    }
    uint64_t total = 0;
    for (int t = 0; t < THREADS; t++) {
        pthread_join(th[t], NULL);
        LT_CHECK(w[t].errors == 0, "thread %d: %d calls failed", t, w[t].errors);
    }
    for (unsigned k = 0; k < KEYS; k++) {
        uint64_t got = 0;
        for (int t = 0; t < THREADS; t++) got += w[t].admitted[k];
        LT_CHECK(got == BURST, "key %u: %" PRIu64 " calls admitted, the burst is %d", k, got, BURST);
        total += got;
    }
    sluice_mt_stats_t st;
    LT_OK(sluice_mt_stats(m, &st));
    LT_CHECK(st.core.admitted == total, "stats: %" PRIu64 " admitted, the threads saw %" PRIu64, st.core.admitted,
             total);
    LT_CHECK(st.core.dropped == (uint64_t)THREADS * CALLS - total, "stats: %" PRIu64 " dropped, expected %" PRIu64,
             st.core.dropped, (uint64_t)THREADS * CALLS - total);
    pthread_barrier_destroy(&start);
    sluice_mt_free(m);
}

int main(void) {
    struct event_base *base;
    sluice_loop_t *loop;
    if (!lt_attached_loop(&base, &loop, NULL)) LT_MAIN_END();
    const unsigned shard_counts[] = { 0, 1, 4, 16, 64 };
    for (size_t i = 0; i < sizeof shard_counts / sizeof shard_counts[0]; i++) check_layout(loop, shard_counts[i]);
    check_exclusion(loop);
    lt_attached_loop_free(loop, base);
    LT_MAIN_END();
}
