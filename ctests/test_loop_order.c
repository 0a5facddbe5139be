/* test_loop_order.c — per-key order across threads, and the reporting
 * flags of loop limiters (SLUICE_MT_REPORT_*, sluice_mt_new_with_options()).
 *
 * The race: a thread other than the loop thread gets SLUICE_EMITTED from
 * sluice_mt_submit() and acts on its value at once, while an older event of
 * the same key still waits in the shard's outbox for the loop. With
 * SLUICE_MT_REPORT_ALL every token goes through the callback, in per-key
 * order. Checked here:
 *
 *  - deterministic scenarios on an attached base that does not run while a
 *    worker thread calls (so every event waits in the outbox): flush then an
 *    immediate emission; debounce leading+trailing whose trailing emission
 *    is fired by "timers first" in the submit that starts a new burst; an
 *    immediate drop. Without flags the worker's immediate value overtakes
 *    the queued event (the documented caveat, shown); with REPORT_ALL the
 *    callback sees every token once, in order, with the decision's kind and
 *    time; the partial flags report only their half;
 *  - calls made on the loop thread (and from inside the callback) with
 *    REPORT_ALL: events delivered before the call returns, in order;
 *  - a stress run: several threads hammer the same few keys with submit,
 *    flush, cancel and pending while the owned loop delivers. A per-key
 *    test lock gives every key's calls a sequence number (in the token), so
 *    the callback must see, per key, strictly increasing sequence numbers,
 *    non-decreasing times, every token exactly once, the decision's kind
 *    for immediate tokens; callbacks only on the loop thread, never two at
 *    once. The same run without flags counts how often a worker's immediate
 *    emission overtook an older queued event (reported, not asserted);
 *  - option validation, and allocation failures with REPORT_ALL (a call
 *    that fails with SLUICE_ENOMEM never reports its token).
 * Run it under TSan too (it is part of the loop tests). */
#include "loop_test_util.h"

#include <stdatomic.h>

/* ------------------------------------------------------------------ a log of what "acts" on values */

/* One line of the order in which values are acted on: by the callback, or
 * (without REPORT_ALL) by the caller of an immediate decision. */
struct act {
    uint64_t token;
    int kind; /* SLUICE_EVENT_* */
    uint64_t at;
    bool by_callback;
    bool on_loop;
};

struct actlog {
    pthread_mutex_t mu;
    struct act a[64];
    int n;
    sluice_loop_t *loop;
    sluice_mt_t *m;
    /* from inside the callback: submit this token on key `nested_key` once */
    uint64_t nested_token;
    uint64_t nested_key;
    int nested_rc;
    sluice_decision_t nested_d;
};

static void actlog_add(struct actlog *L, uint64_t token, int kind, uint64_t at, bool by_callback) {
    pthread_mutex_lock(&L->mu);
    if (L->n < 64) {
        struct act *x = &L->a[L->n++];
        x->token = token;
        x->kind = kind;
        x->at = at;
        x->by_callback = by_callback;
        x->on_loop = sluice_loop_in_thread(L->loop);
    }
    pthread_mutex_unlock(&L->mu);
}

static void on_act(void *user, const sluice_event_t *ev) {
    struct actlog *L = user;
    actlog_add(L, ev->token, (int)ev->kind, ev->at, true);
    if (L->nested_token && ev->token == 1) {
        /* a call from inside the callback: its events come after this one */
        uint64_t t = L->nested_token;
        L->nested_token = 0;
        L->nested_rc = sluice_mt_submit(L->m, sluice_key_u64(L->nested_key), t, &L->nested_d);
        actlog_add(L, 1000 + t, 0, 0, false); /* marks "the nested submit returned" */
    }
}

/* The caller's side: acts on an immediate decision at once (default mode). */
static void act_on_decision(struct actlog *L, unsigned flags, uint64_t token, const sluice_decision_t *d) {
    if (d->kind == SLUICE_EMITTED && !(flags & SLUICE_MT_REPORT_EMITTED))
        actlog_add(L, token, SLUICE_EVENT_EMIT, d->at, false);
    else if (d->kind == SLUICE_DROPPED && !(flags & SLUICE_MT_REPORT_DROPPED))
        actlog_add(L, token, SLUICE_EVENT_DROP, d->at, false);
}

/* ------------------------------------------------------------------ deterministic scenarios */

enum scenario { SC_FLUSH, SC_DEBOUNCE, SC_DROP };

struct scen_run {
    struct actlog *L;
    unsigned flags;
    enum scenario sc;
    uint64_t t0;
    sluice_decision_t d[8];
    int rc[8];
};

/* The worker: a thread other than the loop thread, while the loop is not
 * running (every event waits in the outbox until the main thread runs it). */
static void *scen_worker(void *arg) {
    struct scen_run *R = arg;
    sluice_mt_t *m = R->L->m;
    sluice_key_t k = sluice_key_u64(7);
    uint64_t t0 = R->t0;
    switch (R->sc) {
    case SC_FLUSH:
        /* throttle 60 s: 1 leading (at once), 2 pending, flush emits 2
         * (queued), 3 leading again (at once) */
        R->rc[1] = lt_submit_at(m, k, 1, t0, &R->d[1]);
        act_on_decision(R->L, R->flags, 1, &R->d[1]);
        R->rc[2] = lt_submit_at(m, k, 2, t0 + 1 * LT_MS, &R->d[2]);
        act_on_decision(R->L, R->flags, 2, &R->d[2]);
        R->rc[0] = sluice_mt_flush(m, k);
        R->rc[3] = lt_submit_at(m, k, 3, t0 + 2 * LT_MS, &R->d[3]);
        act_on_decision(R->L, R->flags, 3, &R->d[3]);
        break;
    case SC_DEBOUNCE:
        /* debounce 10 ms leading+trailing: 1 leading, 2 trailing due at
         * t0+11 ms, then at t0+50 ms a call: "timers first" fires 2's
         * emission (queued) and 3 opens a new burst, emitted at once */
        R->rc[1] = lt_submit_at(m, k, 1, t0, &R->d[1]);
        act_on_decision(R->L, R->flags, 1, &R->d[1]);
        R->rc[2] = lt_submit_at(m, k, 2, t0 + 1 * LT_MS, &R->d[2]);
        act_on_decision(R->L, R->flags, 2, &R->d[2]);
        R->rc[3] = lt_submit_at(m, k, 3, t0 + 50 * LT_MS, &R->d[3]);
        act_on_decision(R->L, R->flags, 3, &R->d[3]);
        break;
    case SC_DROP:
        /* throttle 60 s leading only: 1 at once, 2 dropped at once */
        R->rc[1] = lt_submit_at(m, k, 1, t0, &R->d[1]);
        act_on_decision(R->L, R->flags, 1, &R->d[1]);
        R->rc[2] = lt_submit_at(m, k, 2, t0 + 1 * LT_MS, &R->d[2]);
        act_on_decision(R->L, R->flags, 2, &R->d[2]);
        break;
    }
    return NULL;
}

static const char *scen_name(enum scenario sc) {
    return sc == SC_FLUSH      ? "flush then immediate emission"
           : sc == SC_DEBOUNCE ? "debounce trailing+leading"
                               : "immediate drop";
}

static void run_scenario(enum scenario sc, unsigned flags) {
    printf("scenario: %s, flags %u\n", scen_name(sc), flags);
    struct event_base *base = lt_precise_base();
    LT_CHECK(base != NULL, "base");
    if (!base) return;
    struct actlog L;
    memset(&L, 0, sizeof L);
    pthread_mutex_init(&L.mu, NULL);
    LT_OK(sluice_loop_attach(&L.loop, base, NULL)); /* this thread is the loop thread */
    sluice_policy_t p = sc == SC_FLUSH      ? sluice_throttle(60000 * (int64_t)LT_MS, true, true, SLUICE_PICK_LATEST)
                        : sc == SC_DEBOUNCE ? sluice_debounce(10 * (int64_t)LT_MS, true, true, -1)
                                            : sluice_throttle(60000 * (int64_t)LT_MS, true, false, SLUICE_PICK_LATEST);
    sluice_config_t c = lt_config(p, on_act, &L);
    sluice_mt_options_t o = { 2, flags, NULL };
    LT_OK(sluice_mt_new_with_options(&L.m, L.loop, &c, &o));

    struct scen_run R;
    memset(&R, 0, sizeof R);
    R.L = &L;
    R.flags = flags;
    R.sc = sc;
    R.t0 = sluice_clock_now();
    /* The worker's times (up to t0 + 50 ms) must not be ahead of the clock
     * (a given now ahead of the clock is refused): let them pass first. */
    lt_sleep_ms(60);
    pthread_t th;
    pthread_create(&th, NULL, scen_worker, &R);
    pthread_join(th, NULL);
    for (int i = 0; i < 4; i++) LT_CHECK(R.rc[i] >= 0, "call %d: %d", i, R.rc[i]);

    /* Now the loop runs and delivers what waited. */
    sluice_mt_stats_t st;
    uint64_t deadline = sluice_clock_now() + LT_PATIENCE_MS * LT_MS;
    do {
        event_base_loop(base, EVLOOP_NONBLOCK);
        LT_OK(sluice_mt_stats(L.m, &st));
    } while (st.events_queued > 0 && sluice_clock_now() < deadline);
    LT_CHECK(st.events_queued == 0, "everything delivered");
    sluice_mt_free(L.m);
    LT_OK(sluice_loop_free(L.loop));
    event_base_free(base);

    /* The order values were acted on. */
    uint64_t want[3];
    int nwant = 0;
    switch (sc) {
    case SC_FLUSH:
    case SC_DEBOUNCE:
        LT_CHECK(R.d[1].kind == SLUICE_EMITTED && R.d[2].kind == SLUICE_SCHEDULED && R.d[3].kind == SLUICE_EMITTED,
                 "decisions %d %d %d", R.d[1].kind, R.d[2].kind, R.d[3].kind);
        want[0] = 1, want[1] = 2, want[2] = 3, nwant = 3;
        break;
    case SC_DROP:
        LT_CHECK(R.d[1].kind == SLUICE_EMITTED && R.d[2].kind == SLUICE_DROPPED, "decisions %d %d", R.d[1].kind,
                 R.d[2].kind);
        want[0] = 1, want[1] = 2, nwant = 2;
        break;
    }
    if (sc == SC_FLUSH) LT_CHECK(R.rc[0] == 1, "flush emitted: %d", R.rc[0]);
    LT_CHECK(L.n == nwant, "%d values acted on, want %d", L.n, nwant);
    bool in_order = L.n == nwant;
    for (int i = 0; i < L.n && i < nwant; i++)
        if (L.a[i].token != want[i]) in_order = false;
    printf("  acted on:");
    for (int i = 0; i < L.n; i++)
        printf(" %llu(%s)", (unsigned long long)L.a[i].token, L.a[i].by_callback ? "cb" : "caller");
    printf("\n");
    if ((flags & SLUICE_MT_REPORT_ALL) == SLUICE_MT_REPORT_ALL) {
        LT_CHECK(in_order, "REPORT_ALL: per-key order");
        for (int i = 0; i < L.n; i++) {
            const struct act *x = &L.a[i];
            LT_CHECK(x->by_callback && x->on_loop, "token %llu reported by the callback on the loop thread",
                     (unsigned long long)x->token);
            const sluice_decision_t *d = &R.d[x->token];
            if (d->kind == SLUICE_EMITTED)
                LT_CHECK(x->kind == SLUICE_EVENT_EMIT && x->at == d->at, "token %llu: EMIT at the decision's time",
                         (unsigned long long)x->token);
            if (d->kind == SLUICE_DROPPED)
                LT_CHECK(x->kind == SLUICE_EVENT_DROP && x->at == R.t0 + 1 * LT_MS,
                         "token %llu: DROP at the call's time (%llu vs %llu)", (unsigned long long)x->token,
                         (unsigned long long)x->at, (unsigned long long)(R.t0 + 1 * LT_MS));
        }
        if (sc == SC_DEBOUNCE && L.n == 3)
            LT_CHECK(L.a[1].at == R.t0 + 11 * LT_MS && L.a[2].at == R.t0 + 50 * LT_MS,
                     "times: deadline, then the call");
    } else if (flags == 0) {
        /* The documented caveat, shown deterministically: the caller's
         * immediate value overtakes the older queued event. */
        if (sc != SC_DROP)
            LT_CHECK(L.n == 3 && L.a[0].token == 1 && L.a[1].token == 3 && L.a[2].token == 2,
                     "default mode: the caller acts on 3 before the loop delivers 2");
        for (int i = 0; i < L.n; i++)
            LT_CHECK(L.a[i].by_callback == (R.d[L.a[i].token].kind == SLUICE_SCHEDULED),
                     "default mode: only scheduled tokens come through the callback");
    } else {
        /* One half: only that kind of immediate token comes through the
         * callback; emissions stay in order when they do. */
        for (int i = 0; i < L.n; i++) {
            const struct act *x = &L.a[i];
            const sluice_decision_t *d = &R.d[x->token];
            bool via_cb = d->kind == SLUICE_SCHEDULED ||
                          (d->kind == SLUICE_EMITTED && (flags & SLUICE_MT_REPORT_EMITTED)) ||
                          (d->kind == SLUICE_DROPPED && (flags & SLUICE_MT_REPORT_DROPPED));
            LT_CHECK(x->by_callback == via_cb, "flags %u: token %llu via the callback: %d", flags,
                     (unsigned long long)x->token, x->by_callback);
        }
        if (flags == SLUICE_MT_REPORT_EMITTED) {
            uint64_t last = 0;
            for (int i = 0; i < L.n; i++) {
                if (L.a[i].kind != SLUICE_EVENT_EMIT) continue;
                LT_CHECK(L.a[i].token > last, "REPORT_EMITTED: emissions in per-key order");
                last = L.a[i].token;
            }
        }
    }
    pthread_mutex_destroy(&L.mu);
}

/* ------------------------------------------------------------------ calls on the loop thread */

static void test_loop_thread_calls(void) {
    printf("calls on the loop thread, REPORT_ALL\n");
    struct event_base *base = lt_precise_base();
    LT_CHECK(base != NULL, "base");
    if (!base) return;
    struct actlog L;
    memset(&L, 0, sizeof L);
    pthread_mutex_init(&L.mu, NULL);
    LT_OK(sluice_loop_attach(&L.loop, base, NULL));
    sluice_config_t c = lt_config(sluice_throttle(60000 * (int64_t)LT_MS, true, true, SLUICE_PICK_LATEST), on_act, &L);
    sluice_mt_options_t o = { 0, SLUICE_MT_REPORT_ALL, NULL };
    LT_OK(sluice_mt_new_with_options(&L.m, L.loop, &c, &o));
    sluice_key_t k = sluice_key_u64(1);
    sluice_decision_t d;

    /* The token's event is delivered before submit returns. Inside its
     * callback, a submit on another (idle) key is emitted at once too: its
     * event is queued behind the one being delivered and delivered in the
     * same pass, still before the outer submit returns. */
    L.nested_token = 4;
    L.nested_key = 2;
    LT_OK(sluice_mt_submit(L.m, k, 1, &d));
    LT_CHECK(d.kind == SLUICE_EMITTED, "leading");
    LT_CHECK(L.n == 3 && L.a[0].token == 1 && L.a[0].kind == SLUICE_EVENT_EMIT && L.a[1].token == 1004 &&
                 L.a[2].token == 4 && L.a[2].kind == SLUICE_EVENT_EMIT,
             "1, then the nested call returned, then its 4, all before submit returned (%d acts)", L.n);
    LT_CHECK(L.nested_rc == 0 && L.nested_d.kind == SLUICE_EMITTED, "nested submit emitted at once");
    /* 2 waits in 1's window; 5 supersedes it (DROP 2), flush emits 5, then
     * 3 leads again: each delivered before its call returns, in order */
    LT_OK(sluice_mt_submit(L.m, k, 2, &d));
    LT_CHECK(d.kind == SLUICE_SCHEDULED && L.n == 3, "2 scheduled, nothing reported yet");
    LT_OK(sluice_mt_submit(L.m, k, 5, &d));
    LT_CHECK(d.kind == SLUICE_SCHEDULED, "5 scheduled");
    LT_CHECK(L.n == 4 && L.a[3].token == 2 && L.a[3].kind == SLUICE_EVENT_DROP, "2 dropped when 5 came");
    LT_CHECK(sluice_mt_flush(L.m, k) == 1, "flush");
    LT_OK(sluice_mt_submit(L.m, k, 3, &d));
    LT_CHECK(d.kind == SLUICE_EMITTED, "3 leads");
    LT_CHECK(L.n == 6 && L.a[4].token == 5 && L.a[4].kind == SLUICE_EVENT_EMIT && L.a[5].token == 3 &&
                 L.a[5].kind == SLUICE_EVENT_EMIT,
             "flush's 5 then 3, before the calls returned");
    for (int i = 0; i < L.n; i++) LT_CHECK(L.a[i].on_loop, "on the loop thread");

    /* a closed limiter: the error takes no token and reports nothing */
    LT_OK(sluice_mt_close(L.m, SLUICE_CLOSE_DISCARD));
    int n_before = L.n;
    LT_CHECK(sluice_mt_submit(L.m, k, 9, &d) == SLUICE_ECLOSED, "closed");
    LT_CHECK(L.n == n_before, "no event for a refused token");
    sluice_mt_free(L.m);
    LT_OK(sluice_loop_free(L.loop));
    event_base_free(base);
    pthread_mutex_destroy(&L.mu);
}

/* ------------------------------------------------------------------ stress */

enum { NKEYS = 6, NTHREADS = 4 };

static int per_thread(void) {
    const char *q = getenv("SLUICE_TEST_QUICK");
    return q && *q == '1' ? 3000 : 15000;
}

struct stress {
    sluice_loop_t *loop;
    sluice_mt_t *m;
    unsigned flags;
    int per;
    size_t cap; /* sequence numbers per key: 1..cap-1 */
    /* per key: the test's lock, which orders the key's calls (sequence) */
    pthread_mutex_t key_mu[NKEYS];
    uint32_t next_seq[NKEYS];
    /* per key: the order values are acted on (callback, or the caller of
     * an immediate decision without flags), under act_mu */
    pthread_mutex_t act_mu[NKEYS];
    uint32_t last_acted[NKEYS];
    uint64_t last_at[NKEYS];
    /* per token [key * cap + seq] */
    atomic_uchar *reported;   /* times reported by the callback */
    atomic_uchar *decision;   /* the decision kind (0: not taken) */
    atomic_uchar *event_kind; /* the callback's kind */
    _Atomic uint64_t *event_at;
    uint64_t *decision_at; /* written by the worker */
    atomic_int in_callback;
    atomic_ullong events, taken, refused, scheduled, immediate, overtaken, disorder, time_back, off_loop, overlap,
        bad_token;
};

static struct stress S;

static void stress_act(unsigned k, uint32_t seq, uint64_t at) {
    pthread_mutex_lock(&S.act_mu[k]);
    if (seq <= S.last_acted[k]) {
        /* an older value acted on after a newer one of the same key */
        if (S.flags == 0)
            atomic_fetch_add(&S.overtaken, 1);
        else
            atomic_fetch_add(&S.disorder, 1);
    } else {
        S.last_acted[k] = seq;
    }
    if (S.flags && at < S.last_at[k]) atomic_fetch_add(&S.time_back, 1);
    if (at > S.last_at[k]) S.last_at[k] = at;
    pthread_mutex_unlock(&S.act_mu[k]);
}

static void stress_on_event(void *user, const sluice_event_t *ev) {
    (void)user;
    if (atomic_exchange(&S.in_callback, 1) != 0) atomic_fetch_add(&S.overlap, 1);
    if (!sluice_loop_in_thread(S.loop)) atomic_fetch_add(&S.off_loop, 1);
    unsigned k = (unsigned)(ev->token >> 32);
    uint32_t seq = (uint32_t)ev->token;
    if (k >= NKEYS || seq == 0 || seq >= S.cap || ev->key.kind != SLUICE_KEY_U64 || ev->key.u64 != k) {
        atomic_fetch_add(&S.bad_token, 1);
    } else {
        size_t i = (size_t)k * S.cap + seq;
        atomic_fetch_add(&S.reported[i], 1);
        atomic_store(&S.event_kind[i], (unsigned char)ev->kind);
        atomic_store(&S.event_at[i], ev->at);
        if (ev->kind != SLUICE_EVENT_DISCARD) stress_act(k, seq, ev->at);
    }
    atomic_fetch_add(&S.events, 1);
    atomic_store(&S.in_callback, 0);
}

static void *stress_worker(void *arg) {
    int t = (int)(intptr_t)arg;
    uint64_t rng = (uint64_t)(t + 1) * 0x9e3779b97f4a7c15u;
    for (int i = 0; i < S.per; i++) {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        unsigned k = (unsigned)(rng % NKEYS);
        unsigned op = (unsigned)((rng >> 20) % 100);
        sluice_key_t key = sluice_key_u64(k);
        pthread_mutex_lock(&S.key_mu[k]);
        if (op < 80) {
            uint32_t seq = ++S.next_seq[k];
            uint64_t token = (uint64_t)k << 32 | seq;
            size_t idx = (size_t)k * S.cap + seq;
            sluice_decision_t d;
            int rc = sluice_mt_submit(S.m, key, token, &d);
            if (rc != 0) {
                atomic_fetch_add(&S.refused, 1);
            } else {
                atomic_fetch_add(&S.taken, 1);
                S.decision_at[idx] = d.at;
                atomic_store(&S.decision[idx], (unsigned char)d.kind);
                if (d.kind == SLUICE_SCHEDULED) {
                    atomic_fetch_add(&S.scheduled, 1);
                } else {
                    atomic_fetch_add(&S.immediate, 1);
                    /* without flags the caller acts on its value now */
                    if (S.flags == 0 && d.kind == SLUICE_EMITTED) stress_act(k, seq, d.at);
                }
            }
        } else if (op < 90) {
            LT_CHECK(sluice_mt_flush(S.m, key) >= 0, "flush");
        } else if (op < 95) {
            LT_CHECK(sluice_mt_cancel(S.m, key) >= 0, "cancel");
        } else {
            LT_CHECK(sluice_mt_pending(S.m, key) >= 0, "pending");
        }
        pthread_mutex_unlock(&S.key_mu[k]);
        if ((i & 255) == 0) sched_yield();
    }
    return NULL;
}

static void run_stress(const char *name, sluice_policy_t policy, unsigned flags) {
    printf("stress: %s, flags %u\n", name, flags);
    memset(&S, 0, sizeof S);
    S.flags = flags;
    S.per = per_thread();
    S.cap = (size_t)NTHREADS * (size_t)S.per + 2;
    size_t n = (size_t)NKEYS * S.cap;
    S.reported = calloc(n, sizeof *S.reported);
    S.decision = calloc(n, sizeof *S.decision);
    S.event_kind = calloc(n, sizeof *S.event_kind);
    S.event_at = calloc(n, sizeof *S.event_at);
    S.decision_at = calloc(n, sizeof *S.decision_at);
    for (int k = 0; k < NKEYS; k++) {
        pthread_mutex_init(&S.key_mu[k], NULL);
        pthread_mutex_init(&S.act_mu[k], NULL);
    }
    LT_OK(sluice_loop_start(&S.loop, NULL));
    sluice_config_t c = lt_config(policy, stress_on_event, NULL);
    c.tick_ns = 100000; /* 0.1 ms: many timer emissions race the workers */
    sluice_mt_options_t o = { 4, flags, NULL };
    LT_OK(sluice_mt_new_with_options(&S.m, S.loop, &c, &o));

    pthread_t th[NTHREADS];
    for (int t = 0; t < NTHREADS; t++) pthread_create(&th[t], NULL, stress_worker, (void *)(intptr_t)t);
    for (int t = 0; t < NTHREADS; t++) pthread_join(th[t], NULL);

    LT_OK(sluice_mt_close(S.m, SLUICE_CLOSE_DRAIN));
    uint64_t want = flags == SLUICE_MT_REPORT_ALL ? atomic_load(&S.taken) : atomic_load(&S.scheduled);
    uint64_t deadline = sluice_clock_now() + LT_PATIENCE_MS * LT_MS;
    while (atomic_load(&S.events) < want && sluice_clock_now() < deadline) lt_sleep_ms(1);
    sluice_mt_free(S.m);
    LT_OK(sluice_loop_free(S.loop));

    LT_CHECK(atomic_load(&S.events) == want, "events %llu, want %llu", (unsigned long long)atomic_load(&S.events),
             (unsigned long long)want);
    LT_CHECK(atomic_load(&S.refused) == 0, "refused: %llu", (unsigned long long)atomic_load(&S.refused));
    LT_CHECK(atomic_load(&S.bad_token) == 0, "bad tokens: %llu", (unsigned long long)atomic_load(&S.bad_token));
    LT_CHECK(atomic_load(&S.off_loop) == 0, "callbacks off the loop thread: %llu",
             (unsigned long long)atomic_load(&S.off_loop));
    LT_CHECK(atomic_load(&S.overlap) == 0, "overlapping callbacks: %llu", (unsigned long long)atomic_load(&S.overlap));

    /* Exact accounting, token by token. */
    size_t wrong = 0, first_wrong = 0;
    for (unsigned k = 0; k < NKEYS; k++) {
        for (uint32_t seq = 1; seq <= S.next_seq[k]; seq++) {
            size_t i = (size_t)k * S.cap + seq;
            unsigned dk = atomic_load(&S.decision[i]);
            unsigned times = atomic_load(&S.reported[i]);
            unsigned ek = atomic_load(&S.event_kind[i]);
            bool ok;
            if (dk == SLUICE_SCHEDULED)
                ok = times == 1 && ek != SLUICE_EVENT_DISCARD; /* closed with drain */
            else if (flags == SLUICE_MT_REPORT_ALL)
                ok = times == 1 && ((dk == SLUICE_EMITTED && ek == SLUICE_EVENT_EMIT &&
                                     atomic_load(&S.event_at[i]) == S.decision_at[i]) ||
                                    (dk == SLUICE_DROPPED && ek == SLUICE_EVENT_DROP));
            else
                ok = times == 0;
            if (!ok && wrong++ == 0) first_wrong = i;
        }
    }
    LT_CHECK(wrong == 0, "%zu tokens misreported (first: key %zu seq %zu: decision %u, %u events, kind %u)", wrong,
             first_wrong / S.cap, first_wrong % S.cap, (unsigned)atomic_load(&S.decision[first_wrong]),
             (unsigned)atomic_load(&S.reported[first_wrong]), (unsigned)atomic_load(&S.event_kind[first_wrong]));
    if (flags) {
        LT_CHECK(atomic_load(&S.disorder) == 0, "values of a key acted on out of order: %llu",
                 (unsigned long long)atomic_load(&S.disorder));
        LT_CHECK(atomic_load(&S.time_back) == 0, "event times of a key going back: %llu",
                 (unsigned long long)atomic_load(&S.time_back));
    }
    printf("  %llu taken: %llu at once, %llu scheduled; %llu events%s", (unsigned long long)atomic_load(&S.taken),
           (unsigned long long)atomic_load(&S.immediate), (unsigned long long)atomic_load(&S.scheduled),
           (unsigned long long)atomic_load(&S.events), flags ? "\n" : "");
    if (!flags)
        printf("; without flags, an immediate emission overtook an older queued value %llu times\n",
               (unsigned long long)atomic_load(&S.overtaken));
    for (int k = 0; k < NKEYS; k++) {
        pthread_mutex_destroy(&S.key_mu[k]);
        pthread_mutex_destroy(&S.act_mu[k]);
    }
    free(S.reported);
    free(S.decision);
    free(S.event_kind);
    free((void *)S.event_at);
    free(S.decision_at);
}

struct counter {
    atomic_ullong n;
    atomic_uchar seen[64];
};

static void count_event(void *user, const sluice_event_t *ev) {
    struct counter *c = user;
    if (ev->token < 64) atomic_fetch_add(&c->seen[ev->token], 1);
    atomic_fetch_add(&c->n, 1);
}

/* ------------------------------------------------------------------ lost wake-up */

/* A call from another thread that queues events wakes the loop
 * (event_active on the limiter's libevent event, once per batch). libevent
 * cancels a pending activation whose cause is EV_TIMEOUT when the event is
 * re-armed (event_add with a timeout) before its callback ran: a later call
 * that re-armed the timer earlier (a key of another shard with an earlier
 * deadline) used to swallow the wake-up, and the queued events waited for
 * the next timer, up to a whole interval. Here: the base does not run while
 * the worker calls, so the wake-up is still pending when the re-arm comes;
 * then a non-blocking pass of the loop must deliver everything. */
struct lost_wake {
    sluice_mt_t *m;
    unsigned flags;
    uint64_t t0;      /* before the limiter was created */
    uint64_t key0_at; /* key 0's first call: its deadline is 60 s later */
    int rearmed;      /* the key that re-armed the timer earlier, or -1 */
};

static void *lost_wake_worker(void *arg) {
    struct lost_wake *w = arg;
    sluice_decision_t d;
    w->rearmed = -1;
    if (w->flags) {
        /* key 0, now (20 ms after t0): its shard's deadline is key0_at +
         * 60 s, where the timer is armed, and its emission (REPORT_ALL) is
         * queued: wake-up */
        w->key0_at = sluice_clock_now();
        LT_OK(lt_submit_at(w->m, sluice_key_u64(0), 0, w->key0_at, &d));
        LT_CHECK(d.kind == SLUICE_EMITTED, "key 0 leads");
    } else {
        /* key 0 holds a value (set up on the loop thread, timer armed at
         * key0_at + 60 s): the flush's emission is queued: wake-up */
        LT_CHECK(sluice_mt_flush(w->m, sluice_key_u64(0)) == 1, "flush");
    }
    /* keys of other shards, at t0 + 1 ms (the past: their shards' clocks are
     * at the limiter's creation): deadline about t0 + 60 s, earlier than key
     * 0's: re-armed */
    for (int k = 1; k < 64 && w->rearmed < 0; k++) {
        LT_OK(lt_submit_at(w->m, sluice_key_u64((uint64_t)k), (uint64_t)k, w->t0 + 1 * LT_MS, &d));
        if (d.kind == SLUICE_EMITTED && sluice_mt_next_deadline(w->m) < w->key0_at + 60000 * LT_MS) w->rearmed = k;
    }
    return NULL;
}

static void test_lost_wake(unsigned flags) {
    printf("wake-up not lost when the timer is re-armed, flags %u\n", flags);
    struct event_base *base = lt_precise_base();
    LT_CHECK(base != NULL, "base");
    if (!base) return;
    struct counter *cnt = calloc(1, sizeof *cnt);
    sluice_loop_t *loop;
    LT_OK(sluice_loop_attach(&loop, base, NULL)); /* this thread is the loop thread */
    sluice_config_t c =
        lt_config(sluice_throttle(60000 * (int64_t)LT_MS, true, true, SLUICE_PICK_LATEST), count_event, cnt);
    sluice_mt_options_t o = { 16, flags, NULL };
    struct lost_wake w = { NULL, flags, sluice_clock_now(), 0, -1 };
    LT_OK(sluice_mt_new_with_options(&w.m, loop, &c, &o));
    lt_sleep_ms(20); /* key 0's calls come 20 ms after the other keys' time */
    if (!flags) {
        sluice_decision_t d;
        w.key0_at = sluice_clock_now();
        LT_OK(lt_submit_at(w.m, sluice_key_u64(0), 62, w.key0_at, &d));
        LT_OK(lt_submit_at(w.m, sluice_key_u64(0), 63, w.key0_at, &d));
        LT_CHECK(d.kind == SLUICE_SCHEDULED, "pending");
    }
    pthread_t th;
    pthread_create(&th, NULL, lost_wake_worker, &w);
    pthread_join(th, NULL);
    LT_CHECK(w.rearmed > 0, "a key of another shard re-armed the timer earlier");
    /* Non-blocking passes: only an activation runs the limiter's callback
     * (its timer is 60 s away). */
    for (int i = 0; i < 20; i++) event_base_loop(base, EVLOOP_NONBLOCK);
    sluice_mt_stats_t st;
    LT_OK(sluice_mt_stats(w.m, &st));
    LT_CHECK(st.events_queued == 0, "the loop delivered without waiting for a timer: %llu events left",
             (unsigned long long)st.events_queued);
    uint64_t want = flags ? (uint64_t)w.rearmed + 1 : 1;
    LT_CHECK(atomic_load(&cnt->n) == want, "delivered %llu, want %llu", (unsigned long long)atomic_load(&cnt->n),
             (unsigned long long)want);
    sluice_mt_free(w.m);
    LT_OK(sluice_loop_free(loop));
    event_base_free(base);
    free(cnt);
}

/* ------------------------------------------------------------------ options, allocation failures */

static void nop_event(void *user, const sluice_event_t *ev) {
    (void)user;
    (void)ev;
}

static void test_options(void) {
    printf("options\n");
    sluice_loop_t *loop;
    LT_OK(sluice_loop_start(&loop, NULL));
    sluice_config_t c = lt_config(sluice_throttle(LT_MS, true, true, SLUICE_PICK_LATEST), nop_event, NULL);
    sluice_mt_t *m = NULL;
    sluice_mt_options_t o = { 0, 8, NULL };
    LT_CHECK(sluice_mt_new_with_options(&m, loop, &c, &o) == SLUICE_EINVAL && m == NULL, "unknown flag");
    o.flags = SLUICE_MT_REPORT_ALL;
    o.nshards = SLUICE_MT_SHARDS_MAX + 1;
    LT_CHECK(sluice_mt_new_with_options(&m, loop, &c, &o) == SLUICE_EINVAL, "too many shards");
    sluice_config_t nocb = lt_config(sluice_rate(1, 1000, 0), NULL, NULL);
    o.nshards = 0;
    LT_CHECK(sluice_mt_new_with_options(&m, loop, &nocb, &o) == SLUICE_EINVAL, "reporting without a callback");
    LT_CHECK(sluice_mt_new_with_options(NULL, loop, &c, &o) == SLUICE_EINVAL, "NULL out");
    LT_OK(sluice_mt_new_with_options(&m, loop, &nocb, NULL)); /* NULL options: the defaults */
    sluice_mt_stats_t st;
    LT_OK(sluice_mt_stats(m, &st));
    LT_CHECK(st.shards == SLUICE_MT_SHARDS_DEFAULT, "default shards");
    sluice_decision_t d;
    LT_OK(sluice_mt_submit(m, sluice_key_u64(1), 1, &d));
    LT_CHECK(d.kind == SLUICE_EMITTED, "rate admits");
    sluice_mt_free(m);
    o.nshards = 3;
    LT_OK(sluice_mt_new_with_options(&m, loop, &c, &o));
    LT_OK(sluice_mt_stats(m, &st));
    LT_CHECK(st.shards == 4, "shards rounded up: %llu", (unsigned long long)st.shards);
    sluice_mt_free(m);
    LT_OK(sluice_loop_free(loop));
}

static void test_alloc_failures(void) {
    printf("allocation failures, REPORT_ALL\n");
    sluice_loop_t *loop;
    LT_OK(sluice_loop_start(&loop, NULL));
    for (long fail_at = 0; fail_at < 300; fail_at++) {
        struct failing_alloc fa;
        atomic_init(&fa.budget, fail_at);
        atomic_init(&fa.live, 0);
        sluice_allocator_t a = { fa_alloc, fa_release, &fa };
        struct counter *cnt = calloc(1, sizeof *cnt);
        sluice_config_t c =
            lt_config(sluice_throttle(60000 * (int64_t)LT_MS, true, true, SLUICE_PICK_LATEST), count_event, cnt);
        c.allocator = &a;
        sluice_mt_options_t o = { 4, SLUICE_MT_REPORT_ALL, NULL };
        sluice_mt_t *m;
        int rc = sluice_mt_new_with_options(&m, loop, &c, &o);
        if (rc != 0) {
            LT_CHECK(rc == SLUICE_ENOMEM, "mt_new: %d", rc);
            LT_CHECK(atomic_load(&fa.live) == 0, "nothing leaked by a failed mt_new (fail_at %ld)", fail_at);
            free(cnt);
            continue;
        }
        bool taken[64] = { false };
        uint64_t ntaken = 0;
        for (uint64_t i = 0; i < 64; i++) {
            char key[24];
            int n = snprintf(key, sizeof key, "a-longer-key-%llu", (unsigned long long)(i % 40));
            sluice_decision_t d;
            rc = sluice_mt_submit(m, sluice_key_bytes(key, (size_t)n), i, &d);
            LT_CHECK(rc == 0 || rc == SLUICE_ENOMEM, "submit: %d", rc);
            if (rc == 0) taken[i] = true, ntaken++;
        }
        if (fail_at % 2) {
            rc = sluice_mt_close(m, SLUICE_CLOSE_DRAIN);
            LT_CHECK(rc == 0 || rc == SLUICE_ENOMEM, "close: %d", rc);
        }
        sluice_mt_free(m);
        /* every taken token reported exactly once, a refused one never */
        LT_CHECK(atomic_load(&cnt->n) == ntaken, "fail_at %ld: %llu events for %llu taken", fail_at,
                 (unsigned long long)atomic_load(&cnt->n), (unsigned long long)ntaken);
        for (int i = 0; i < 64; i++)
            LT_CHECK(atomic_load(&cnt->seen[i]) == (taken[i] ? 1 : 0), "fail_at %ld: token %d reported %u times",
                     fail_at, i, (unsigned)atomic_load(&cnt->seen[i]));
        LT_CHECK(atomic_load(&fa.live) == 0, "fail_at %ld: %ld blocks leaked", fail_at, atomic_load(&fa.live));
        free(cnt);
        if (fail_at > 200 && ntaken == 64) break;
    }
    LT_OK(sluice_loop_free(loop));
}

int main(void) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    const enum scenario scs[] = { SC_FLUSH, SC_DEBOUNCE, SC_DROP };
    const unsigned flagsets[] = { 0, SLUICE_MT_REPORT_ALL, SLUICE_MT_REPORT_EMITTED, SLUICE_MT_REPORT_DROPPED };
    for (size_t i = 0; i < sizeof scs / sizeof scs[0]; i++)
        for (size_t j = 0; j < sizeof flagsets / sizeof flagsets[0]; j++) run_scenario(scs[i], flagsets[j]);
    test_loop_thread_calls();
    test_lost_wake(0);
    test_lost_wake(SLUICE_MT_REPORT_ALL);
    test_options();
    test_alloc_failures();

    run_stress("debounce 1 ms leading+trailing, maxWait 3 ms",
               sluice_debounce(1 * (int64_t)LT_MS, true, true, 3 * (int64_t)LT_MS), SLUICE_MT_REPORT_ALL);
    run_stress("throttle 1 ms", sluice_throttle(1 * (int64_t)LT_MS, true, true, SLUICE_PICK_LATEST),
               SLUICE_MT_REPORT_ALL);
    run_stress("throttle 1 ms leading only", sluice_throttle(1 * (int64_t)LT_MS, true, false, SLUICE_PICK_LATEST),
               SLUICE_MT_REPORT_ALL);
    run_stress("audit 1 ms", sluice_audit(1 * (int64_t)LT_MS), SLUICE_MT_REPORT_ALL);
    run_stress("rate 20 per 1 ms", sluice_rate(20, 1 * (int64_t)LT_MS, 0), SLUICE_MT_REPORT_ALL);
    run_stress("debounce 1 ms leading+trailing, maxWait 3 ms",
               sluice_debounce(1 * (int64_t)LT_MS, true, true, 3 * (int64_t)LT_MS), 0);
    LT_MAIN_END();
}
