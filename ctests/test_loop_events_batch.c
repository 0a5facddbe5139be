/* test_loop_events_batch.c — the batch event callback of loop limiters
 * (sluice_mt_options_t.on_events, sluice_mt_events_fn).
 *
 * Checked here:
 *  - events queued while the loop does not run (an attached base, calls from
 *    another thread) come in batches of 1 to SLUICE_MT_EVENTS_MAX, at least
 *    one batch holding more than one event, with `config->on_event` NULL and
 *    never called; every token exactly once, per key in order, only on the
 *    loop thread, never two callbacks at once; the same as the events
 *    on_event receives for the same calls;
 *  - a call made on the loop thread delivers its events before it returns;
 *  - a stress run on an owned loop: threads submit on a few keys with
 *    REPORT_ALL, the batch callback sees every token once, per key in
 *    strictly increasing order;
 *  - sluice_mt_free() reports what is pending through on_events, one per
 *    call;
 *  - validation: a SLUICE_MT_REPORT_* flag needs on_event or on_events.
 * Run it under TSan too (it is part of the loop tests). */
#include "loop_test_util.h"

#include <stdatomic.h>

/* ------------------------------------------------------------------ a recorder */

#define NTOK 4096

struct rec {
    pthread_mutex_t mu;
    sluice_loop_t *loop;
    uint64_t seen[NTOK];  /* times each token was reported */
    int kind[NTOK];       /* its last event kind */
    uint64_t order[NTOK]; /* tokens in delivery order */
    size_t n;             /* events delivered */
    size_t calls, multi;  /* callback calls, of which with count > 1 */
    size_t max_count;
    atomic_int inside; /* callbacks running now */
    bool off_loop, concurrent, bad_count, single_called;
    uint64_t last_per_key[16]; /* stress: last sequence per key (+1) */
    bool out_of_order;
};

static void rec_one(struct rec *R, const sluice_event_t *ev) {
    uint64_t t = ev->token;
    if (t < NTOK) {
        R->seen[t]++;
        R->kind[t] = (int)ev->kind;
    }
    if (R->n < NTOK) R->order[R->n] = t;
    R->n++;
    /* stress tokens: key index in the low 4 bits, sequence above */
    if (ev->key.kind == SLUICE_KEY_U64 && ev->key.u64 >= 100 && ev->key.u64 < 116) {
        unsigned k = (unsigned)(ev->key.u64 - 100);
        uint64_t seq = t >> 4;
        if (seq + 1 <= R->last_per_key[k]) R->out_of_order = true;
        R->last_per_key[k] = seq + 1;
    }
}

static void on_batch(void *user, const sluice_event_t *events, size_t count) {
    struct rec *R = user;
    if (atomic_fetch_add(&R->inside, 1) != 0) R->concurrent = true;
    pthread_mutex_lock(&R->mu);
    if (R->loop && !sluice_loop_in_thread(R->loop)) R->off_loop = true;
    if (count < 1 || count > SLUICE_MT_EVENTS_MAX) R->bad_count = true;
    R->calls++;
    if (count > 1) R->multi++;
    if (count > R->max_count) R->max_count = count;
    for (size_t i = 0; i < count; i++) rec_one(R, &events[i]);
    pthread_mutex_unlock(&R->mu);
    atomic_fetch_sub(&R->inside, 1);
}

static void on_single(void *user, const sluice_event_t *ev) {
    struct rec *R = user;
    pthread_mutex_lock(&R->mu);
    R->single_called = true;
    R->calls++;
    rec_one(R, ev);
    pthread_mutex_unlock(&R->mu);
}

static void rec_init(struct rec *R) {
    memset(R, 0, sizeof *R);
    pthread_mutex_init(&R->mu, NULL);
    atomic_init(&R->inside, 0);
}

/* ------------------------------------------------------------------ queued while the loop is idle */

#define QUEUED 300

struct qrun {
    sluice_mt_t *m;
    int rc;
};

/* Throttle 60 s, leading and trailing, pick latest: per key, token 3k+0 is
 * emitted at once, 3k+1 is superseded by 3k+2 (a DROP naming it), and 3k+2
 * stays pending. QUEUED / 3 keys. */
static void *queue_worker(void *arg) {
    struct qrun *Q = arg;
    for (uint64_t t = 0; t < QUEUED; t++) {
        sluice_decision_t d;
        int rc = sluice_mt_submit(Q->m, sluice_key_u64(t / 3), t, &d);
        if (rc < 0) Q->rc = rc;
    }
    return NULL;
}

/* Runs the queued scenario with either callback; returns the delivery order
 * (QUEUED / 3 * 2 events before the free) in `order`. */
static size_t run_queued(bool batch, uint64_t *order, struct rec *R) {
    struct event_base *base = lt_precise_base();
    LT_CHECK(base != NULL, "base");
    if (!base) return 0;
    rec_init(R);
    LT_OK(sluice_loop_attach(&R->loop, base, NULL)); /* this thread is the loop thread */
    sluice_config_t c =
        lt_config(sluice_throttle(60000 * (int64_t)LT_MS, true, true, SLUICE_PICK_LATEST), batch ? NULL : on_single, R);
    c.fixed_seed = true; /* the same shards in both runs: the same delivery order */
    c.seed[0] = 1;
    c.seed[1] = 2;
    sluice_mt_options_t o;
    memset(&o, 0, sizeof o);
    o.nshards = 4;
    o.flags = SLUICE_MT_REPORT_ALL;
    o.on_events = batch ? on_batch : NULL;
    sluice_mt_t *m = NULL;
    LT_OK(sluice_mt_new_with_options(&m, R->loop, &c, &o));
    if (!m) return 0;
    struct qrun Q = { m, 0 };
    pthread_t th;
    pthread_create(&th, NULL, queue_worker, &Q);
    pthread_join(th, NULL);
    LT_CHECK(Q.rc == 0, "worker calls: %d", Q.rc);
    pthread_mutex_lock(&R->mu);
    LT_CHECK(R->n == 0, "nothing delivered while the loop is idle (%zu)", R->n);
    pthread_mutex_unlock(&R->mu);

    sluice_mt_stats_t st;
    uint64_t deadline = sluice_clock_now() + LT_PATIENCE_MS * LT_MS;
    do {
        event_base_loop(base, EVLOOP_NONBLOCK);
        LT_OK(sluice_mt_stats(m, &st));
    } while (st.events_queued > 0 && sluice_clock_now() < deadline);
    LT_CHECK(st.events_queued == 0, "everything delivered");

    /* A call on the loop thread: delivered before it returns. */
    pthread_mutex_lock(&R->mu);
    size_t before = R->n;
    pthread_mutex_unlock(&R->mu);
    sluice_decision_t d;
    LT_OK(sluice_mt_submit(m, sluice_key_u64(1000), QUEUED, &d));
    pthread_mutex_lock(&R->mu);
    LT_CHECK(R->n == before + 1 && R->seen[QUEUED] == 1 && R->kind[QUEUED] == SLUICE_EVENT_EMIT,
             "a call on the loop thread delivers before it returns (%zu -> %zu)", before, R->n);
    size_t n = R->n < NTOK ? R->n : NTOK;
    memcpy(order, R->order, n * sizeof *order);
    pthread_mutex_unlock(&R->mu);

    /* The free reports the pending tokens (3k+2) as discarded. */
    sluice_mt_free(m);
    LT_OK(sluice_loop_free(R->loop));
    R->loop = NULL; /* the free's reports come on this thread, after the binding */
    event_base_free(base);
    return n;
}

static void test_queued(void) {
    printf("events queued while the loop is idle: batches vs single events\n");
    static uint64_t order_batch[NTOK], order_single[NTOK];
    static struct rec RB, RS;
    size_t nb = run_queued(true, order_batch, &RB);
    size_t ns = run_queued(false, order_single, &RS);

    LT_CHECK(!RB.single_called, "on_event (NULL) never called");
    LT_CHECK(!RB.bad_count, "every batch holds 1 to SLUICE_MT_EVENTS_MAX events");
    LT_CHECK(RB.multi > 0, "at least one batch holds several events (max %zu)", RB.max_count);
    LT_CHECK(!RB.off_loop, "batches only on the loop thread");
    LT_CHECK(!RB.concurrent, "never two batches at once");
    LT_CHECK(nb == QUEUED / 3 * 2 + 1, "events before the free: %zu", nb);
    LT_CHECK(nb == ns, "the same number of events as on_event gets: %zu vs %zu", nb, ns);
    bool same = nb == ns;
    for (size_t i = 0; same && i < nb; i++) same = order_batch[i] == order_single[i];
    LT_CHECK(same, "the same events in the same order as on_event gets");
    /* Every token exactly once, with its fate (the free's discards included). */
    for (uint64_t t = 0; t < QUEUED; t++) {
        int want = t % 3 == 0 ? SLUICE_EVENT_EMIT : t % 3 == 1 ? SLUICE_EVENT_DROP : SLUICE_EVENT_DISCARD;
        LT_CHECK(RB.seen[t] == 1 && RB.kind[t] == want, "token %llu: seen %llu, kind %d (want %d)",
                 (unsigned long long)t, (unsigned long long)RB.seen[t], RB.kind[t], want);
        LT_CHECK(RS.seen[t] == 1 && RS.kind[t] == want, "on_event: token %llu", (unsigned long long)t);
    }
    /* Per key in order: 3k before 3k+1 in the delivery order. */
    bool in_order = true;
    for (size_t i = 0; i < nb; i++)
        for (size_t j = i + 1; j < nb; j++)
            if (order_batch[i] / 3 == order_batch[j] / 3 && order_batch[i] > order_batch[j]) in_order = false;
    LT_CHECK(in_order, "per-key order");
    /* The free's reports: one per call (QUEUED / 3 discards after the
     * earlier calls). */
    LT_CHECK(RB.n == nb + QUEUED / 3, "discards reported by the free: %zu", RB.n - nb);
    pthread_mutex_destroy(&RB.mu);
    pthread_mutex_destroy(&RS.mu);
}

/* ------------------------------------------------------------------ stress on an owned loop */

#define STRESS_THREADS 3
#define STRESS_CALLS 20000

struct srun {
    sluice_mt_t *m;
    pthread_mutex_t *keylocks; /* one per key: gives each key's calls a sequence */
    uint64_t *seq;             /* per key */
    unsigned id;
    uint64_t taken;
};

static void *stress_worker(void *arg) {
    struct srun *S = arg;
    uint64_t x = 0x9e3779b97f4a7c15ull * (S->id + 1);
    for (int i = 0; i < STRESS_CALLS; i++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        unsigned k = (unsigned)(x % 16);
        pthread_mutex_lock(&S->keylocks[k]);
        uint64_t token = (S->seq[k]++ << 4) | k;
        sluice_decision_t d;
        int rc = sluice_mt_submit(S->m, sluice_key_u64(100 + k), token, &d);
        pthread_mutex_unlock(&S->keylocks[k]);
        if (rc == 0) S->taken++;
    }
    return NULL;
}

static void test_stress(void) {
    printf("stress: %d threads on 16 keys, REPORT_ALL, batch callback\n", STRESS_THREADS);
    static struct rec R;
    rec_init(&R);
    LT_OK(sluice_loop_start(&R.loop, NULL));
    /* debounce 1 ms trailing: supersessions (DROP) and timer emissions */
    sluice_config_t c = lt_config(sluice_debounce(1 * (int64_t)LT_MS, false, true, -1), NULL, &R);
    sluice_mt_options_t o;
    memset(&o, 0, sizeof o);
    o.nshards = 4;
    o.flags = SLUICE_MT_REPORT_ALL;
    o.on_events = on_batch;
    sluice_mt_t *m = NULL;
    LT_OK(sluice_mt_new_with_options(&m, R.loop, &c, &o));
    if (!m) return;
    pthread_mutex_t keylocks[16];
    uint64_t seq[16] = { 0 };
    for (int k = 0; k < 16; k++) pthread_mutex_init(&keylocks[k], NULL);
    struct srun S[STRESS_THREADS];
    pthread_t th[STRESS_THREADS];
    for (unsigned i = 0; i < STRESS_THREADS; i++) {
        S[i] = (struct srun){ m, keylocks, seq, i, 0 };
        pthread_create(&th[i], NULL, stress_worker, &S[i]);
    }
    uint64_t taken = 0;
    for (unsigned i = 0; i < STRESS_THREADS; i++) {
        pthread_join(th[i], NULL);
        taken += S[i].taken;
    }
    /* Wait until every token has been reported (the last ones by timers). */
    uint64_t deadline = sluice_clock_now() + LT_PATIENCE_MS * LT_MS;
    for (;;) {
        pthread_mutex_lock(&R.mu);
        size_t n = R.n;
        pthread_mutex_unlock(&R.mu);
        if (n >= taken || sluice_clock_now() > deadline) break;
        lt_sleep_ms(2);
    }
    sluice_mt_free(m);
    pthread_mutex_lock(&R.mu);
    LT_CHECK(R.n == taken, "every token reported once: %zu events, %llu taken", R.n, (unsigned long long)taken);
    LT_CHECK(!R.out_of_order, "per key, strictly increasing sequence numbers");
    LT_CHECK(!R.off_loop, "batches only on the loop thread");
    LT_CHECK(!R.concurrent, "never two batches at once");
    LT_CHECK(!R.bad_count, "every batch holds 1 to SLUICE_MT_EVENTS_MAX events");
    printf("  %zu events in %zu calls (largest batch %zu)\n", R.n, R.calls, R.max_count);
    pthread_mutex_unlock(&R.mu);
    LT_OK(sluice_loop_free(R.loop));
    for (int k = 0; k < 16; k++) pthread_mutex_destroy(&keylocks[k]);
    pthread_mutex_destroy(&R.mu);
}

/* ------------------------------------------------------------------ validation */

static void test_validation(void) {
    printf("validation\n");
    sluice_loop_t *loop;
    LT_OK(sluice_loop_start(&loop, NULL));
    static struct rec R;
    rec_init(&R);
    sluice_config_t c = lt_config(sluice_rate(10, 1000 * (int64_t)LT_MS, 0), NULL, &R);
    sluice_mt_options_t o;
    memset(&o, 0, sizeof o);
    o.flags = SLUICE_MT_REPORT_ALL;
    sluice_mt_t *m = NULL;
    LT_CHECK(sluice_mt_new_with_options(&m, loop, &c, &o) == SLUICE_EINVAL,
             "a reporting flag with neither on_event nor on_events");
    o.on_events = on_batch;
    LT_OK(sluice_mt_new_with_options(&m, loop, &c, &o));
    if (m) sluice_mt_free(m);
    LT_OK(sluice_loop_free(loop));
    pthread_mutex_destroy(&R.mu);
}

int main(void) {
    test_queued();
    test_stress();
    test_validation();
    LT_MAIN_END();
}
