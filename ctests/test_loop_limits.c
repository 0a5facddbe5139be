/* test_loop_limits.c — the limits of a loop limiter: the live-key cap over
 * all shards (max_keys), and caller-given times (options.now).
 *
 *  - cap, one thread: max_keys keys are accepted whatever shards they fall
 *    in (a cap shared out per shard refuses early on a skewed set), the next
 *    new key is refused, live keys are never refused, and a key that goes
 *    idle gives its place back;
 *  - cap, threads: several threads create, cancel and re-create keys; the
 *    number of live keys never exceeds max_keys, and no call is refused while
 *    the keys held (live or being created) are fewer than max_keys;
 *  - cap and timers: keys that go idle on the loop's timer give their places
 *    back (nothing is leaked: afterwards max_keys new keys fit again);
 *  - submit_at: a time ahead of the clock is refused with SLUICE_ERANGE and
 *    does not move the clock of the shard (another key's window is intact). */
#include "loop_test_util.h"

struct counter {
    atomic_ullong events;
};

static void count_event(void *user, const sluice_event_t *ev) {
    (void)ev;
    struct counter *c = user;
    atomic_fetch_add(&c->events, 1);
}

static uint64_t live_keys(sluice_mt_t *m) {
    sluice_mt_stats_t st;
    if (sluice_mt_stats(m, &st) != 0) return UINT64_MAX;
    return st.core.live_keys;
}

/* ------------------------------------------------------------------ cap, one thread */

static void test_cap_exact(void) {
    printf("max_keys is exact over 16 shards\n");
    sluice_loop_t *loop;
    LT_OK(sluice_loop_start(&loop, NULL));
    struct counter cnt = { 0 };
    sluice_config_t c = lt_config(sluice_debounce(60000 * (int64_t)LT_MS, false, true, -1), count_event, &cnt);
    enum { CAP = 100 };
    c.max_keys = CAP;
    sluice_mt_t *m;
    LT_OK(sluice_mt_new(&m, loop, &c, 16));
    sluice_decision_t d;
    /* CAP keys fit, whatever their shards (CAP / 16 rounded up is 7: a
     * per-shard share refuses some of these) */
    for (uint64_t k = 0; k < CAP; k++) {
        int rc = sluice_mt_submit(m, sluice_key_u64(k), k, &d);
        LT_CHECK(rc == 0 && d.kind == SLUICE_SCHEDULED, "key %llu of %d: rc %d", (unsigned long long)k, CAP, rc);
    }
    LT_CHECK(live_keys(m) == CAP, "live %llu", (unsigned long long)live_keys(m));
    /* the next new key is refused; a live key is not */
    LT_CHECK(sluice_mt_submit(m, sluice_key_u64(1000), 1000, &d) == SLUICE_EFULL, "new key past the cap");
    LT_CHECK(sluice_mt_submit(m, sluice_key_bytes("other", 5), 1001, &d) == SLUICE_EFULL, "byte key past the cap");
    LT_OK(sluice_mt_submit(m, sluice_key_u64(5), 5005, &d)); /* supersedes 5: a drop event */
    LT_CHECK(d.kind == SLUICE_SCHEDULED, "live key accepted at the cap");
    sluice_mt_stats_t st;
    LT_OK(sluice_mt_stats(m, &st));
    LT_CHECK(st.core.full_refusals == 2, "refusals %llu", (unsigned long long)st.core.full_refusals);
    /* idle keys give their places back, exactly */
    for (uint64_t k = 0; k < 10; k++)
        LT_CHECK(sluice_mt_cancel(m, sluice_key_u64(k)) == 1, "cancel %llu", (unsigned long long)k);
    LT_CHECK(live_keys(m) == CAP - 10, "live %llu", (unsigned long long)live_keys(m));
    for (uint64_t k = 0; k < 10; k++) LT_OK(sluice_mt_submit(m, sluice_key_u64(2000 + k), k, &d));
    LT_CHECK(sluice_mt_submit(m, sluice_key_u64(3000), 0, &d) == SLUICE_EFULL, "full again");
    /* a call that does not create its key gives its reservation back:
     * pending and flush on absent keys, at the cap */
    LT_CHECK(sluice_mt_pending(m, sluice_key_u64(4000)) == 0, "pending on an absent key");
    LT_CHECK(sluice_mt_flush(m, sluice_key_u64(2000)) == 1, "flush");
    LT_OK(sluice_mt_submit(m, sluice_key_u64(3000), 0, &d)); /* the flushed key's place */
    LT_CHECK(live_keys(m) == CAP, "live %llu", (unsigned long long)live_keys(m));
    sluice_mt_free(m);
    LT_OK(sluice_loop_free(loop));

    /* 0 = no cap */
    LT_OK(sluice_loop_start(&loop, NULL));
    c.max_keys = 0;
    LT_OK(sluice_mt_new(&m, loop, &c, 4));
    for (uint64_t k = 0; k < 5000; k++) LT_OK(sluice_mt_submit(m, sluice_key_u64(k), k, &d));
    LT_CHECK(live_keys(m) == 5000, "no cap: live %llu", (unsigned long long)live_keys(m));
    sluice_mt_free(m);
    /* a cap smaller than the number of shards is a cap, not a share */
    c.max_keys = 3;
    LT_OK(sluice_mt_new(&m, loop, &c, 64));
    int ok = 0, full = 0;
    for (uint64_t k = 0; k < 50; k++) {
        int rc = sluice_mt_submit(m, sluice_key_u64(k), k, &d);
        if (rc == 0) ok++;
        if (rc == SLUICE_EFULL) full++;
    }
    LT_CHECK(ok == 3 && full == 47, "cap 3 over 64 shards: %d accepted, %d refused", ok, full);
    sluice_mt_free(m);
    LT_OK(sluice_loop_free(loop));
}

/* At the cap, a call runs its shard's due deadlines before refusing: keys
 * whose windows have ended give their places back even when the loop has
 * not run (an attached base that this thread never runs). */
static void test_cap_due_first(void) {
    printf("max_keys: due deadlines run before a refusal\n");
    struct event_base *base;
    sluice_loop_t *loop;
    if (!lt_attached_loop(&base, &loop, NULL)) return;
    struct counter cnt = { 0 };
    /* Windows long enough (1 s) that a thread descheduled on a loaded
     * machine between the submits below still finds them running (200 ms
     * left that to chance under a sanitizer). */
    sluice_config_t c =
        lt_config(sluice_throttle(1000 * (int64_t)LT_MS, true, true, SLUICE_PICK_LATEST), count_event, &cnt);
    c.max_keys = 2;
    sluice_mt_t *m;
    LT_OK(sluice_mt_new(&m, loop, &c, 1));
    sluice_decision_t d;
    LT_OK(sluice_mt_submit(m, sluice_key_u64(1), 1, &d));
    LT_OK(sluice_mt_submit(m, sluice_key_u64(1), 2, &d)); /* pending: emitted at the window's end */
    LT_OK(sluice_mt_submit(m, sluice_key_u64(2), 3, &d));
    LT_CHECK(sluice_mt_submit(m, sluice_key_u64(3), 4, &d) == SLUICE_EFULL, "full while both windows run");
    lt_sleep_ms(2200); /* both windows (and key 1's trailing window) are over; the base never ran */
    uint64_t events_before = atomic_load(&cnt.events);
    LT_OK(sluice_mt_submit(m, sluice_key_u64(3), 5, &d));
    LT_CHECK(d.kind == SLUICE_EMITTED, "key 3 accepted once the due deadlines ran");
    LT_CHECK(atomic_load(&cnt.events) >= events_before + 1, "key 1's trailing emission delivered on this thread");
    sluice_mt_stats_t st;
    LT_OK(sluice_mt_stats(m, &st));
    LT_CHECK(st.core.full_refusals == 1 && st.core.live_keys <= 2, "refusals %llu live %llu",
             (unsigned long long)st.core.full_refusals, (unsigned long long)st.core.live_keys);
    sluice_mt_free(m);
    LT_OK(sluice_loop_free(loop));
    event_base_free(base);
}

/* ------------------------------------------------------------------ cap, threads */

enum { THREADS = 4, SLOTS = 16, CAP_T = THREADS * SLOTS, ROUNDS = 3000 };

struct churn {
    sluice_mt_t *m;
    unsigned id;
    atomic_bool *stop;
    int refused; /* EFULL while this thread held fewer than SLOTS keys: a bug */
    int errors;
};

/* Each thread keeps at most SLOTS keys live (cancels one before creating
 * the next in its slot), so all threads together never hold more than
 * CAP_T = max_keys live or being created: every submit must be accepted. */
static void *churn_main(void *arg) {
    struct churn *w = arg;
    uint64_t slot_key[SLOTS];
    for (unsigned i = 0; i < SLOTS; i++) slot_key[i] = UINT64_MAX;
    uint64_t next = (uint64_t)w->id << 40;
    for (unsigned r = 0; r < ROUNDS; r++) {
        unsigned i = r % SLOTS;
        if (slot_key[i] != UINT64_MAX) {
            int rc = sluice_mt_cancel(w->m, sluice_key_u64(slot_key[i]));
            if (rc != 1) w->errors++;
        }
        sluice_decision_t d;
        uint64_t k = next++;
        int rc = sluice_mt_submit(w->m, sluice_key_u64(k), k, &d);
        if (rc == SLUICE_EFULL)
            w->refused++;
        else if (rc != 0 || d.kind != SLUICE_SCHEDULED)
            w->errors++;
        slot_key[i] = rc == 0 ? k : UINT64_MAX;
    }
    return NULL;
}

struct watch {
    sluice_mt_t *m;
    atomic_bool stop;
    uint64_t max_seen;
    unsigned samples;
};

static void *watch_main(void *arg) {
    struct watch *w = arg;
    while (!atomic_load(&w->stop)) {
        uint64_t n = live_keys(w->m);
        if (n > w->max_seen) w->max_seen = n;
        w->samples++;
    }
    return NULL;
}

static void test_cap_threads(void) {
    printf("max_keys under %d threads\n", THREADS);
    sluice_loop_t *loop;
    LT_OK(sluice_loop_start(&loop, NULL));
    struct counter cnt = { 0 };
    sluice_config_t c = lt_config(sluice_debounce(60000 * (int64_t)LT_MS, false, true, -1), count_event, &cnt);
    c.max_keys = CAP_T;
    sluice_mt_t *m;
    LT_OK(sluice_mt_new(&m, loop, &c, 16));

    struct watch watch = { m, false, 0, 0 };
    pthread_t wt;
    pthread_create(&wt, NULL, watch_main, &watch);
    struct churn w[THREADS];
    pthread_t th[THREADS];
    for (unsigned t = 0; t < THREADS; t++) {
        w[t] = (struct churn){ m, t + 1, NULL, 0, 0 };
        pthread_create(&th[t], NULL, churn_main, &w[t]);
    }
    for (unsigned t = 0; t < THREADS; t++) pthread_join(th[t], NULL);
    atomic_store(&watch.stop, true);
    pthread_join(wt, NULL);
    for (unsigned t = 0; t < THREADS; t++) {
        LT_CHECK(w[t].refused == 0, "thread %u refused %d times below the cap", t, w[t].refused);
        LT_CHECK(w[t].errors == 0, "thread %u: %d errors", t, w[t].errors);
    }
    LT_CHECK(watch.max_seen <= CAP_T, "live keys reached %llu > %d", (unsigned long long)watch.max_seen, CAP_T);
    LT_CHECK(live_keys(m) == CAP_T, "live at the end %llu", (unsigned long long)live_keys(m));
    printf("  %u samples, at most %llu live\n", watch.samples, (unsigned long long)watch.max_seen);

    /* Now every thread races for new keys past the cap: exactly nothing more fits. */
    int accepted = 0;
    sluice_decision_t d;
    for (uint64_t k = 0; k < 100; k++)
        if (sluice_mt_submit(m, sluice_key_u64(UINT64_C(1) << 50 | k), k, &d) == 0) accepted++;
    LT_CHECK(accepted == 0, "%d keys accepted past the cap", accepted);
    sluice_mt_free(m);
    LT_OK(sluice_loop_free(loop));
}

/* Threads submit a spread of keys on a short throttle: keys go idle on the
 * loop's timer. The count never exceeds the cap, and once every key is idle
 * the whole cap is free again. */
struct spray {
    sluice_mt_t *m;
    unsigned id;
    int ok, full, errors;
};

static void *spray_main(void *arg) {
    struct spray *w = arg;
    uint64_t x = 0x9e3779b97f4a7c15ULL * (w->id + 1);
    uint64_t end = sluice_clock_now() + 300 * LT_MS;
    while (sluice_clock_now() < end) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        sluice_decision_t d;
        int rc = sluice_mt_submit(w->m, sluice_key_u64(x % 2000), x, &d);
        if (rc == 0)
            w->ok++;
        else if (rc == SLUICE_EFULL)
            w->full++;
        else
            w->errors++;
    }
    return NULL;
}

static void test_cap_timers(void) {
    printf("max_keys with keys going idle on the loop's timer\n");
    sluice_loop_t *loop;
    LT_OK(sluice_loop_start(&loop, NULL));
    struct counter cnt = { 0 };
    sluice_config_t c =
        lt_config(sluice_throttle(5 * (int64_t)LT_MS, true, false, SLUICE_PICK_LATEST), count_event, &cnt);
    enum { CAP = 32 };
    c.max_keys = CAP;
    sluice_mt_t *m;
    LT_OK(sluice_mt_new(&m, loop, &c, 8));
    struct watch watch = { m, false, 0, 0 };
    pthread_t wt;
    pthread_create(&wt, NULL, watch_main, &watch);
    struct spray w[THREADS];
    pthread_t th[THREADS];
    for (unsigned t = 0; t < THREADS; t++) {
        w[t] = (struct spray){ m, t, 0, 0, 0 };
        pthread_create(&th[t], NULL, spray_main, &w[t]);
    }
    int ok = 0, full = 0;
    for (unsigned t = 0; t < THREADS; t++) {
        pthread_join(th[t], NULL);
        LT_CHECK(w[t].errors == 0, "thread %u: %d errors", t, w[t].errors);
        ok += w[t].ok;
        full += w[t].full;
    }
    atomic_store(&watch.stop, true);
    pthread_join(wt, NULL);
    LT_CHECK(watch.max_seen <= CAP, "live keys reached %llu > %d", (unsigned long long)watch.max_seen, CAP);
    LT_CHECK(ok > 0 && full > 0, "accepted %d, refused %d (both expected)", ok, full);
    printf("  %d accepted, %d refused, at most %llu live\n", ok, full, (unsigned long long)watch.max_seen);
    /* every window ends within 5 ms (+ a tick): wait until all keys are idle */
    uint64_t give_up = sluice_clock_now() + LT_PATIENCE_MS * LT_MS;
    while (live_keys(m) != 0 && sluice_clock_now() < give_up) lt_sleep_ms(5);
    LT_CHECK(live_keys(m) == 0, "keys still live: %llu", (unsigned long long)live_keys(m));
    /* nothing leaked: CAP new keys fit, the next does not */
    sluice_decision_t d;
    for (uint64_t k = 0; k < CAP; k++) {
        int rc = sluice_mt_submit(m, sluice_key_u64(100000 + k), k, &d);
        LT_CHECK(rc == 0, "key %llu after the churn: rc %d", (unsigned long long)k, rc);
    }
    LT_CHECK(sluice_mt_submit(m, sluice_key_u64(200000), 0, &d) == SLUICE_EFULL, "cap after the churn");
    sluice_mt_free(m);
    LT_OK(sluice_loop_free(loop));
}

/* ------------------------------------------------------------------ submit_at */

static void test_submit_at_future(void) {
    printf("submit_at: a time ahead of the clock is refused\n");
    sluice_loop_t *loop;
    LT_OK(sluice_loop_start(&loop, NULL));
    struct counter cnt = { 0 };
    /* one shard: keys A and B share its clock; 5 s windows, so B's is still
     * running at the check below however slow the machine (and a 10 s jump
     * of the clock would still end it) */
    sluice_config_t c =
        lt_config(sluice_throttle(5000 * (int64_t)LT_MS, true, false, SLUICE_PICK_LATEST), count_event, &cnt);
    sluice_mt_t *m;
    LT_OK(sluice_mt_new(&m, loop, &c, 1));
    sluice_decision_t d;
    sluice_key_t a = sluice_key_bytes("A", 1), b = sluice_key_bytes("B", 1);
    LT_OK(sluice_mt_submit(m, b, 1, &d));
    LT_CHECK(d.kind == SLUICE_EMITTED, "B leads");
    uint64_t b_end = d.at + 5000 * LT_MS; /* EMITTED: `at` is the call's time */
    /* 10 s ahead: refused, token not taken, nothing moves */
    d.kind = SLUICE_SCHEDULED;
    LT_CHECK(lt_submit_at(m, a, 2, sluice_clock_now() + 10000 * LT_MS, &d) == SLUICE_ERANGE, "10 s ahead is refused");
    LT_CHECK(lt_submit_cost_at(m, a, 2, 1, sluice_clock_now() + 10000 * LT_MS, &d) == SLUICE_ERANGE,
             "10 s ahead is refused (cost)");
    LT_CHECK(lt_submit_at(m, a, 2, sluice_clock_now() + 2 * SLUICE_MT_SUBMIT_AT_SLACK_NS + LT_MS, &d) == SLUICE_ERANGE,
             "just past the slack is refused");
    LT_CHECK(sluice_mt_pending(m, a) == 0 && live_keys(m) == 1, "A has no state");
    /* B's window is intact: a call now is still inside it (before the fix,
     * the shard's clock jumped 10 s and B led again) */
    LT_OK(sluice_mt_submit(m, b, 3, &d));
    LT_CHECK(d.kind == SLUICE_DROPPED && d.at == b_end, "B still in its window: kind %d", (int)d.kind);
    /* times at or before the clock are fine; an older one counts as the shard's */
    LT_OK(lt_submit_at(m, a, 4, sluice_clock_now(), &d));
    LT_CHECK(d.kind == SLUICE_EMITTED, "A now");
    uint64_t a_at = d.at;
    LT_OK(lt_submit_at(m, a, 5, 1, &d));
    LT_CHECK(d.kind == SLUICE_DROPPED && d.at == a_at + 5000 * LT_MS, "a time in the past counts as the shard's clock");
    LT_CHECK(lt_submit_at(NULL, a, 6, 0, &d) == SLUICE_EINVAL, "NULL limiter");
    sluice_mt_free(m);
    LT_OK(sluice_loop_free(loop));
}

int main(void) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    test_cap_exact();
    test_cap_due_first();
    test_cap_threads();
    test_cap_timers();
    test_submit_at_future();
    LT_MAIN_END();
}
