/* test_loop_cap_sweep.c — max_keys is an exact cap across shards: a key
 * whose state has expired counts toward the cap only until a new key needs
 * its place, whichever shard holds it (mt.c: reserve_key, sweep_others).
 *
 * A loop limiter counts its live keys over all shards in one budget. A rate
 * key that goes idle keeps its entry until a sweep frees it, and a key whose
 * last deadline is due keeps it until the loop's pass fires it; either can
 * sit in another shard than the new key's. Before a refusal the limiter
 * frees such state in its own shard and then in the others, and tries once
 * more. Checked here on an attached base that is never dispatched (so the
 * loop never sweeps or fires on its own):
 *  - rate, max_keys 4 over 16 shards: 4 keys expire, then 4 new keys are all
 *    admitted (each in whatever shard it falls), in many rounds with
 *    different keys (so that most rounds put the new key in a shard that
 *    holds none of the expired ones); with 4 keys live a 5th is refused,
 *    the refusal counted once, and live keys stay exactly 4;
 *  - debounce, max_keys 2: 2 keys whose trailing deadline is due (not fired:
 *    the loop does not run) leave room for 2 new keys, and their emissions
 *    are not lost (delivered by the call or by the next loop iteration);
 *  - 2 threads (and the owned loop's thread) create short-lived rate keys
 *    at the cap: live keys never exceed max_keys, every refusal is counted
 *    exactly once, and afterwards, once everything has expired, max_keys
 *    new keys fit (ThreadSanitizer runs this in the C TSan build). */
#include "loop_test_util.h"

#define NSHARDS 16

struct count {
    atomic_ullong emitted, dropped;
};

static void on_event(void *user, const sluice_event_t *ev) {
    struct count *c = user;
    if (ev->kind == SLUICE_EVENT_EMIT) atomic_fetch_add(&c->emitted, 1);
    if (ev->kind == SLUICE_EVENT_DROP) atomic_fetch_add(&c->dropped, 1);
}

static sluice_mt_stats_t stats_of(sluice_mt_t *m) {
    sluice_mt_stats_t st;
    memset(&st, 0, sizeof st);
    LT_OK(sluice_mt_stats(m, &st));
    return st;
}

/* A limiter of NSHARDS shards on `loop` holding at most `cap` keys, its
 * events counted in *cnt (zeroed here); NULL if it could not be made (a
 * failed check). */
static sluice_mt_t *capped_limiter(sluice_loop_t *loop, sluice_policy_t p, uint64_t cap, struct count *cnt) {
    atomic_init(&cnt->emitted, 0);
    atomic_init(&cnt->dropped, 0);
    sluice_config_t c = lt_config(p, on_event, cnt);
    c.max_keys = cap;
    sluice_mt_t *m = NULL;
    LT_OK(sluice_mt_new(&m, loop, &c, NSHARDS));
    return m;
}

/* ------------------------------------------------------------------ rate, one thread */

static void test_rate_rounds(void) {
    printf("max_keys 4 over 16 shards: expired rate keys in any shard make room\n");
    struct event_base *base;
    sluice_loop_t *loop;
    if (!lt_attached_loop(&base, &loop, NULL)) return;
    struct count cnt;
    enum { CAP = 4, ROUNDS = 24 };
    /* 100 per second, burst 100: a call of cost 1 keeps its key live 10 ms,
     * a call of cost 100 keeps it live 1 s */
    sluice_mt_t *m = capped_limiter(loop, sluice_rate(100, 1000 * (int64_t)LT_MS, 100), CAP, &cnt);
    if (!m) {
        lt_attached_loop_free(loop, base);
        return;
    }
    sluice_decision_t d;
    uint64_t key = 1;
    int admitted_new = 0, refused = 0;
    for (int r = 0; r < ROUNDS; r++) {
        /* CAP short-lived keys (10 ms): all admitted */
        for (int i = 0; i < CAP; i++, key++) {
            int rc = sluice_mt_submit_u64(m, key * 0x9E3779B97F4A7C15ull, key, &d);
            LT_CHECK(rc == 0 && d.kind == SLUICE_EMITTED, "round %d: fill key %d: rc %d kind %d", r, i, rc,
                     (int)d.kind);
        }
        lt_sleep_ms(15); /* every one of them is idle now; nothing swept them (the loop never runs) */
        LT_CHECK(stats_of(m).core.live_keys == CAP, "round %d: idle keys still held before a new key", r);
        /* CAP new keys, each wherever it falls: every one admitted */
        for (int i = 0; i < CAP; i++, key++) {
            int rc = sluice_mt_submit_u64(m, key * 0x9E3779B97F4A7C15ull, key, &d);
            if (rc == 0) admitted_new++;
            if (rc == SLUICE_EFULL) refused++;
            LT_CHECK(rc == 0 && d.kind == SLUICE_EMITTED, "round %d: new key %d after expiry: rc %d", r, i, rc);
        }
        LT_CHECK(stats_of(m).core.live_keys == CAP, "round %d: live %llu", r,
                 (unsigned long long)stats_of(m).core.live_keys);
        lt_sleep_ms(15);
    }
    LT_CHECK(admitted_new == ROUNDS * CAP && refused == 0, "admitted %d of %d, refused %d", admitted_new, ROUNDS * CAP,
             refused);
    sluice_mt_stats_t st = stats_of(m);
    LT_CHECK(st.core.full_refusals == 0, "refusals counted %llu", (unsigned long long)st.core.full_refusals);

    /* CAP keys live for a second: the next new key is refused, counted once;
     * the live ones are still served */
    lt_sleep_ms(15);
    uint64_t live_keys[CAP];
    for (int i = 0; i < CAP; i++, key++) {
        live_keys[i] = key * 0x9E3779B97F4A7C15ull;
        LT_OK(lt_submit_cost(m, sluice_key_u64(live_keys[i]), key, 100, &d));
        LT_CHECK(d.kind == SLUICE_EMITTED, "live key %d admitted", i);
    }
    int rc = sluice_mt_submit_u64(m, 7777777, 1, &d);
    LT_CHECK(rc == SLUICE_EFULL, "a 5th key with %d live: rc %d", CAP, rc);
    rc = sluice_mt_submit(m, sluice_key_bytes("five", 4), 2, &d);
    LT_CHECK(rc == SLUICE_EFULL, "a byte key with %d live: rc %d", CAP, rc);
    LT_OK(sluice_mt_submit_u64(m, live_keys[0], 3, &d)); /* a live key is served (its quota is spent) */
    LT_CHECK(d.kind == SLUICE_DROPPED, "live key over its quota: kind %d", (int)d.kind);
    st = stats_of(m);
    LT_CHECK(st.core.full_refusals == 2, "refusals counted %llu", (unsigned long long)st.core.full_refusals);
    LT_CHECK(st.core.live_keys == CAP, "live %llu", (unsigned long long)st.core.live_keys);
    sluice_mt_free(m);
    lt_attached_loop_free(loop, base);
}

/* ------------------------------------------------------------------ due deadlines in other shards */

static void test_debounce_due(void) {
    printf("max_keys 2 over 16 shards: keys whose deadline is due make room, their emissions delivered\n");
    struct event_base *base;
    sluice_loop_t *loop;
    if (!lt_attached_loop(&base, &loop, NULL)) return;
    struct count cnt;
    enum { CAP = 2, ROUNDS = 16 };
    sluice_mt_t *m = capped_limiter(loop, sluice_debounce(2 * (int64_t)LT_MS, false, true, -1), CAP, &cnt);
    if (!m) {
        lt_attached_loop_free(loop, base);
        return;
    }
    sluice_decision_t d;
    uint64_t key = 1;
    int refused = 0;
    for (int r = 0; r < ROUNDS; r++) {
        for (int i = 0; i < CAP; i++, key++) {
            int rc = sluice_mt_submit_u64(m, key * 0x9E3779B97F4A7C15ull, key, &d);
            if (rc == SLUICE_EFULL) refused++;
            LT_CHECK(rc == 0 && d.kind == SLUICE_SCHEDULED, "round %d key %d: rc %d", r, i, rc);
        }
        lt_sleep_ms(5); /* the CAP deadlines are due; the loop does not run, so none fired */
    }
    /* the last round's keys are due too: run the loop until every emission arrived */
    uint64_t want = (uint64_t)ROUNDS * CAP;
    uint64_t give_up = sluice_clock_now() + (uint64_t)LT_PATIENCE_MS * LT_MS;
    while (atomic_load(&cnt.emitted) < want && sluice_clock_now() < give_up) {
        event_base_loop(base, EVLOOP_NONBLOCK);
        lt_sleep_ms(1);
    }
    LT_CHECK(refused == 0, "refused %d", refused);
    LT_CHECK(atomic_load(&cnt.emitted) == want, "emitted %llu of %llu", (unsigned long long)atomic_load(&cnt.emitted),
             (unsigned long long)want);
    sluice_mt_stats_t st = stats_of(m);
    LT_CHECK(st.core.full_refusals == 0, "refusals counted %llu", (unsigned long long)st.core.full_refusals);
    LT_CHECK(st.core.live_keys == 0, "live %llu after every key fired", (unsigned long long)st.core.live_keys);
    sluice_mt_free(m);
    lt_attached_loop_free(loop, base);
}

/* ------------------------------------------------------------------ threads */

enum { T_CAP = 8, T_THREADS = 2, T_CALLS = 4000 };

struct worker {
    sluice_mt_t *m;
    int id;
    uint64_t ok, full, other;
};

static void *churn(void *arg) {
    struct worker *w = arg;
    sluice_decision_t d;
    for (uint64_t i = 0; i < T_CALLS; i++) {
        uint64_t key = ((uint64_t)w->id << 40 | i) * 0x9E3779B97F4A7C15ull;
        int rc = sluice_mt_submit_u64(w->m, key, i, &d);
        if (rc == 0)
            w->ok++;
        else if (rc == SLUICE_EFULL)
            w->full++;
        else
            w->other++;
        if (i % 64 == 0) {
            sluice_mt_stats_t st;
            if (sluice_mt_stats(w->m, &st) == 0 && st.core.live_keys > T_CAP) w->other++;
        }
    }
    return NULL;
}

static void test_threads(void) {
    printf("max_keys %d under %d threads and the loop thread, keys expiring\n", T_CAP, T_THREADS);
    sluice_loop_t *loop = NULL;
    LT_OK(sluice_loop_start(&loop, NULL));
    if (!loop) return;
    struct count cnt;
    /* 10000 per second: a key is live 100 µs after its call */
    sluice_mt_t *m = capped_limiter(loop, sluice_rate(10000, 1000 * (int64_t)LT_MS, 1), T_CAP, &cnt);
    if (!m) {
        sluice_loop_free(loop);
        return;
    }
    struct worker w[T_THREADS];
    pthread_t th[T_THREADS];
    for (int t = 0; t < T_THREADS; t++) {
        w[t] = (struct worker){ m, t + 1, 0, 0, 0 };
        pthread_create(&th[t], NULL, churn, &w[t]);
    }
    uint64_t ok = 0, full = 0, other = 0;
    for (int t = 0; t < T_THREADS; t++) {
        pthread_join(th[t], NULL);
        ok += w[t].ok;
        full += w[t].full;
        other += w[t].other;
    }
    LT_CHECK(other == 0, "%llu calls failed otherwise or saw more than %d live keys", (unsigned long long)other, T_CAP);
    LT_CHECK(ok + full == (uint64_t)T_THREADS * T_CALLS, "ok %llu + full %llu", (unsigned long long)ok,
             (unsigned long long)full);
    sluice_mt_stats_t st = stats_of(m);
    LT_CHECK(st.core.full_refusals == full, "refusals counted %llu, seen %llu",
             (unsigned long long)st.core.full_refusals, (unsigned long long)full);
    LT_CHECK(st.core.live_keys <= T_CAP, "live %llu", (unsigned long long)st.core.live_keys);
    /* everything has expired: T_CAP new keys fit, the next one does not */
    lt_sleep_ms(5);
    sluice_decision_t d;
    for (uint64_t i = 0; i < T_CAP; i++) {
        int rc = lt_submit_cost(m, sluice_key_u64(UINT64_C(0xABCDEF) + i), i, 1, &d);
        LT_CHECK(rc == 0, "new key %llu after the churn: rc %d", (unsigned long long)i, rc);
    }
    /* (these keys may expire again before the next call on a slow run:
     * only the count is checked) */
    st = stats_of(m);
    LT_CHECK(st.core.live_keys <= T_CAP, "live %llu", (unsigned long long)st.core.live_keys);
    sluice_mt_free(m);
    sluice_loop_free(loop);
}

int main(void) {
    test_rate_rounds();
    test_debounce_due();
    test_threads();
    LT_MAIN_END();
}
