/* test_loop_counters.c — the loop limiter's counters and its wake-up, with
 * no counter shared by the submitting threads.
 *
 * Checked here, on a base attached by this thread (so calls from other
 * threads queue their events and wake the loop, which runs only when this
 * thread runs it):
 *  - events_queued counts exactly the events waiting in the shards' outboxes
 *    (summed per shard when read): after two threads' calls, every reported
 *    token of every shard; 0 once the loop has delivered; events_delivered
 *    counts each token once;
 *  - the wake-up flag: the calls of both threads, made while the loop does
 *    not run, activate the limiter's event once between them (one pass of
 *    the loop callback, wakeups == 1), and a call after that pass wakes the
 *    loop again (wakeups == 2: the flag was reset, no wake-up lost).
 * Run it under TSan too (it is part of the loop tests). */
#include "loop_test_util.h"

#include <event2/event.h>
#include <stdatomic.h>

#define PER_THREAD 500

struct counted {
    atomic_ullong n;
};

static void count_event(void *user, const sluice_event_t *ev) {
    (void)ev;
    struct counted *c = user;
    atomic_fetch_add(&c->n, 1);
}

struct worker {
    sluice_mt_t *m;
    uint64_t first_key;
    int rc;
};

static void *submitter(void *arg) {
    struct worker *w = arg;
    w->rc = 0;
    for (uint64_t i = 0; i < PER_THREAD; i++) {
        sluice_decision_t d;
        int rc = sluice_mt_submit(w->m, sluice_key_u64(w->first_key + i), i, &d);
        if (rc == 0 && d.kind != SLUICE_EMITTED) rc = -1000;
        if (rc && !w->rc) w->rc = rc;
    }
    return NULL;
}

static void test_counters(void) {
    printf("events_queued summed over the shards; one wake-up per batch\n");
    struct event_base *base;
    sluice_loop_t *loop;
    if (!lt_attached_loop(&base, &loop, NULL)) return; /* this thread is the loop thread */
    struct counted cnt;
    atomic_init(&cnt.n, 0);
    /* a leading-edge throttle: each new key's first call is emitted at once,
     * and reported through the outbox */
    sluice_config_t c =
        lt_config(sluice_throttle(60000 * (int64_t)LT_MS, true, false, SLUICE_PICK_LATEST), count_event, &cnt);
    sluice_mt_options_t o = { 8, SLUICE_MT_REPORT_EMITTED, NULL };
    sluice_mt_t *m;
    LT_OK(sluice_mt_new_with_options(&m, loop, &c, &o));

    struct worker w[2] = { { m, 0, 0 }, { m, 1000000, 0 } };
    pthread_t th[2];
    for (int i = 0; i < 2; i++) pthread_create(&th[i], NULL, submitter, &w[i]);
    for (int i = 0; i < 2; i++) pthread_join(th[i], NULL);
    for (int i = 0; i < 2; i++) LT_CHECK(w[i].rc == 0, "thread %d: every call emitted at once (%d)", i, w[i].rc);

    sluice_mt_stats_t st;
    LT_OK(sluice_mt_stats(m, &st));
    LT_CHECK(st.events_queued == 2 * PER_THREAD, "queued %llu, want %d", (unsigned long long)st.events_queued,
             2 * PER_THREAD);
    LT_CHECK(st.events_delivered == 0 && atomic_load(&cnt.n) == 0, "nothing delivered before the loop runs");
    LT_CHECK(st.wakeups == 0, "no pass before the loop runs");

    /* Non-blocking passes: only the activation runs the limiter's callback
     * (its timer, if any, is 60 s away). */
    for (int i = 0; i < 20; i++) event_base_loop(base, EVLOOP_NONBLOCK);
    LT_OK(sluice_mt_stats(m, &st));
    LT_CHECK(st.events_queued == 0, "%llu events left", (unsigned long long)st.events_queued);
    LT_CHECK(st.events_delivered == 2 * PER_THREAD && atomic_load(&cnt.n) == 2 * PER_THREAD,
             "delivered %llu (callback %llu), want %d", (unsigned long long)st.events_delivered,
             (unsigned long long)atomic_load(&cnt.n), 2 * PER_THREAD);
    LT_CHECK(st.wakeups == 1, "one wake-up for both threads' calls: %llu", (unsigned long long)st.wakeups);

    /* After that pass the flag is down: one more call from another thread
     * wakes the loop again. */
    struct worker again = { m, 5000000, 0 };
    pthread_t t3;
    pthread_create(&t3, NULL, submitter, &again);
    pthread_join(t3, NULL);
    LT_CHECK(again.rc == 0, "third thread: every call emitted (%d)", again.rc);
    LT_OK(sluice_mt_stats(m, &st));
    LT_CHECK(st.events_queued == PER_THREAD, "queued %llu, want %d", (unsigned long long)st.events_queued, PER_THREAD);
    for (int i = 0; i < 20; i++) event_base_loop(base, EVLOOP_NONBLOCK);
    LT_OK(sluice_mt_stats(m, &st));
    LT_CHECK(st.events_queued == 0 && st.events_delivered == 3 * PER_THREAD, "all delivered: %llu queued, %llu",
             (unsigned long long)st.events_queued, (unsigned long long)st.events_delivered);
    LT_CHECK(st.wakeups == 2, "woken again: %llu", (unsigned long long)st.wakeups);

    sluice_mt_free(m);
    LT_OK(sluice_loop_free(loop));
    event_base_free(base);
}

int main(void) {
    test_counters();
    LT_MAIN_END();
}
