/*
 * test_rate_expiry.c — rate keys expire lazily (issue 11, goal 2).
 *
 * A rate key arms no timer: its state (TAT) is read on access, a key whose
 * quota is full again is idle wherever its entry still is, and idle entries
 * are reclaimed by a sweep (limiter-internal.h, policy-rate.c). What must
 * hold, each checked below on a manual clock (7: the real one):
 *
 *  1. calls on a warm key arm no timer and do not move next_deadline();
 *  2. a key that went idle between calls is reset in place: no removal, no
 *     insertion (same live count, same memory), a fresh quota;
 *  3. without a cap and without advance(), an entry idle for burst * T is
 *     reclaimed within top / 2 key creations (the sweep after each
 *     creation), and the entries held stay within about twice the keys used
 *     in the last 2 burst * T;
 *  4. at the key cap a new key is admitted exactly when an expired entry
 *     exists (to the nanosecond: refused at full - 1, admitted at full),
 *     with no advance() in between, and refused (counted) otherwise;
 *  5. next_deadline() names the sweep (the earliest full, but burst * T
 *     after the previous one at the soonest): advancing there frees every
 *     idle entry and nothing live (advance() frees every idle entry
 *     whenever it is called), the next one is later, and with no key left
 *     it is UINT64_MAX and the memory is released;
 *  6. randomized against the reference model (ctests/ref) with a cap:
 *     every decision, quota and refusal is the model's (a refusal exactly
 *     when the key is idle in the model and `cap` keys are live in it), and
 *     sluice_limiter_check() holds after every operation;
 *  7. the loop layer's cap (sluice_mt_t, one shard, on a base that is never
 *     run, so no sweep and no timer can free anything): a new key is
 *     refused while the held keys are live and admitted once one is idle,
 *     the call itself freeing the idle entry.
 */
#define TEST_NAME "test_rate_expiry"
#include <inttypes.h>
#include <stdint.h>
#include <string.h>

#include <event2/event.h>
#include <time.h>

#include "ref/ref_model.h"
#include "sluice.h"
#include "sluice_loop.h"
#include "support/check.h"

#define MS UINT64_C(1000000)
#define SEC (1000 * MS)

static sluice_limiter_t *mk(sluice_policy_t p, uint64_t max_keys) {
    sluice_config_t c;
    memset(&c, 0, sizeof c);
    c.policy = p;
    c.max_keys = max_keys;
    sluice_limiter_t *l = NULL;
    CHECK(sluice_limiter_new(&l, &c) == 0 && l, "sluice_limiter_new");
    return l;
}

static sluice_stats_t stats(sluice_limiter_t *l) {
    sluice_stats_t st;
    CHECK(sluice_limiter_stats(l, &st) == 0, "stats");
    return st;
}

static void submit(sluice_limiter_t *l, uint64_t key, uint64_t t, sluice_decision_t *d) {
    CHECK(sluice_limiter_submit(l, sluice_key_u64(key), key, t, d) == 0, "submit key %" PRIu64 " at %" PRIu64, key, t);
}

/* 1 and 2 */
static void test_warm_and_idle_in_place(void) {
    sluice_limiter_t *l = mk(sluice_rate(10, (int64_t)SEC, 0), 0); /* T = 100 ms, burst 10 */
    sluice_decision_t d;
    submit(l, 1, 0, &d);
    CHECK(d.kind == SLUICE_EMITTED && d.full == 100 * MS && d.remaining == 9, "first call");
    uint64_t nd = sluice_limiter_next_deadline(l);
    sluice_stats_t s0 = stats(l);
    CHECK(s0.live_keys == 1 && s0.armed_timers == 0, "a rate key arms no timer: %" PRIu64, s0.armed_timers);
    for (int i = 1; i < 10; i++) {
        submit(l, 1, (uint64_t)i * MS, &d);
        CHECK(d.kind == SLUICE_EMITTED, "warm call %d", i);
        CHECK(stats(l).armed_timers == 0, "warm call %d armed a timer", i);
        CHECK(sluice_limiter_next_deadline(l) == nd, "warm call %d moved next_deadline", i);
    }
    submit(l, 1, 10 * MS, &d);
    CHECK(d.kind == SLUICE_DROPPED && d.at == 100 * MS, "11th call dropped until 100 ms: at %" PRIu64, d.at);
    CHECK(sluice_limiter_check(l) == 0, "check");

    /* TAT = 1 s. At exactly 1 s the key is idle: a fresh quota, reset in place */
    sluice_quota_t q;
    CHECK(sluice_limiter_quota(l, sluice_key_u64(1), 1, SEC - 1, &q) == 0 && q.remaining == 9 && q.full == SEC,
          "quota 1 ns before full: remaining %" PRIu64 " full %" PRIu64, q.remaining, q.full);
    CHECK(sluice_limiter_quota(l, sluice_key_u64(1), 1, SEC, &q) == 0 && q.remaining == 10 && q.full == SEC,
          "quota at full: fresh");
    sluice_stats_t s1 = stats(l);
    submit(l, 1, SEC + 5 * SEC, &d);
    CHECK(d.kind == SLUICE_EMITTED && d.remaining == 9 && d.full == 6 * SEC + 100 * MS,
          "idle key answers as fresh: remaining %" PRIu64 " full %" PRIu64, d.remaining, d.full);
    sluice_stats_t s2 = stats(l);
    CHECK(s2.live_keys == s1.live_keys && s2.memory_bytes == s1.memory_bytes && s2.armed_timers == 0,
          "reset in place: live %" PRIu64 " -> %" PRIu64 ", bytes %" PRIu64 " -> %" PRIu64, s1.live_keys, s2.live_keys,
          s1.memory_bytes, s2.memory_bytes);
    /* an expired key that is only dropped (cost above the burst) stays idle */
    CHECK(sluice_limiter_submit_cost(l, sluice_key_u64(1), 7, 11, 7 * SEC, &d) == 0 && d.kind == SLUICE_DROPPED &&
              d.at == SLUICE_NEVER && d.full == 7 * SEC,
          "cost above burst on an idle key: full %" PRIu64, d.full);
    CHECK(sluice_limiter_pending(l, sluice_key_u64(1), 7 * SEC) == 0 &&
              sluice_limiter_flush(l, sluice_key_u64(1), 7 * SEC) == 0,
          "pending/flush");
    CHECK(sluice_limiter_check(l) == 0, "check");
    CHECK(sluice_limiter_cancel(l, sluice_key_u64(1), 7 * SEC) == 0 && stats(l).live_keys == 0,
          "cancel frees the entry");
    CHECK(sluice_limiter_next_deadline(l) == UINT64_MAX, "no key, no sweep");
    sluice_limiter_free(l);
}

/* 3 */
static void test_sweep_on_creation(void) {
    enum { OLD = 5000, NEW = 3000 };
    sluice_limiter_t *l = mk(sluice_rate(1, (int64_t)SEC, 0), 0);
    sluice_decision_t d;
    for (uint64_t k = 0; k < OLD; k++) submit(l, k, 0, &d);
    CHECK(stats(l).live_keys == OLD, "old keys");
    /* every old key is idle from 1 s on, for burst * T = 1 s at 2 s; new keys, no advance */
    for (uint64_t j = 0; j < NEW; j++) {
        submit(l, 1000000 + j, 2 * SEC, &d);
        CHECK(d.kind == SLUICE_EMITTED, "new key");
    }
    /* 3000 creations examine 6000 >= 5000 + 3000 / ... entries: each old one */
    sluice_stats_t st = stats(l);
    CHECK(st.live_keys == NEW, "after %d creations %" PRIu64 " entries held, %d keys live", NEW, st.live_keys, NEW);
    CHECK(sluice_limiter_check(l) == 0, "check");
    /* the old keys answer as fresh keys */
    submit(l, 7, 2 * SEC, &d);
    CHECK(d.kind == SLUICE_EMITTED && d.remaining == 0 && d.full == 3 * SEC, "old key fresh");
    sluice_limiter_free(l);

    /* without a cap, the entries held stay within about twice the live keys:
     * 200 keys a second, each used once (idle 1 s later, freed 1 s after that), for 100 s */
    l = mk(sluice_rate(1, (int64_t)SEC, 0), 0);
    uint64_t peak = 0, key = 0;
    for (uint64_t t = 0; t < 100 * SEC; t += 5 * MS) {
        submit(l, key++, t, &d);
        uint64_t live = stats(l).live_keys;
        if (live > peak) peak = live;
    }
    CHECK(peak <= 2 * 400 + 8, "peak %" PRIu64 " entries for 400 keys used in the last 2 s", peak);
    printf("test_rate_expiry: at most %" PRIu64 " entries held for 200 keys live and 400 used in 2 s\n", peak);
    CHECK(sluice_limiter_check(l) == 0, "check");
    sluice_limiter_free(l);
}

/* 4 */
static void test_cap(void) {
    enum { CAP = 64 };
    sluice_limiter_t *l = mk(sluice_rate(4, (int64_t)SEC, 4), CAP); /* T = 250 ms */
    sluice_decision_t d;
    /* key k at time k ms: full = k ms + 250 ms (k = 0 .. 63) */
    for (uint64_t k = 0; k < CAP; k++) submit(l, k, k * MS, &d);
    /* key 0's full is 250 ms: refused 1 ns before, at the cap */
    CHECK(sluice_limiter_submit(l, sluice_key_u64(500), 1, 250 * MS - 1, &d) == SLUICE_EFULL, "refused before full");
    CHECK(stats(l).full_refusals == 1, "counted");
    /* ... and admitted at exactly 250 ms, with no advance in between */
    CHECK(sluice_limiter_submit(l, sluice_key_u64(500), 1, 250 * MS, &d) == 0 && d.kind == SLUICE_EMITTED,
          "admitted once key 0 is idle");
    CHECK(stats(l).live_keys == CAP, "at the cap");
    CHECK(sluice_limiter_submit(l, sluice_key_u64(501), 1, 250 * MS, &d) == SLUICE_EFULL, "no other idle key");
    /* key 0 comes back: fresh quota, but it is a new key at the cap now */
    CHECK(sluice_limiter_submit(l, sluice_key_u64(0), 1, 250 * MS, &d) == SLUICE_EFULL, "key 0 is new again");
    /* at 260 ms, keys 1..10 are idle: ten new keys fit, the 11th does not */
    for (uint64_t j = 0; j < 10; j++)
        CHECK(sluice_limiter_submit(l, sluice_key_u64(600 + j), 1, 260 * MS, &d) == 0, "new key %" PRIu64, j);
    CHECK(sluice_limiter_submit(l, sluice_key_u64(700), 1, 260 * MS, &d) == SLUICE_EFULL, "11th refused");
    /* a key still live (key 20) is served at the cap */
    CHECK(sluice_limiter_submit(l, sluice_key_u64(20), 1, 260 * MS, &d) == 0 && d.kind == SLUICE_EMITTED, "live key");
    CHECK(stats(l).full_refusals == 4 && stats(l).live_keys == CAP, "refusals %" PRIu64, stats(l).full_refusals);
    CHECK(sluice_limiter_check(l) == 0, "check");
    sluice_limiter_free(l);
}

/* 5 */
static void test_sweep_deadline(void) {
    sluice_limiter_t *l = mk(sluice_rate(4, (int64_t)SEC, 4), 0); /* T = 250 ms, burst 4: sweeps 1 s apart */
    sluice_stats_t empty = stats(l);
    sluice_decision_t d;
    enum { N = 20000 };
    for (uint64_t k = 0; k < N; k++) submit(l, k, 0, &d); /* full at 250 ms */
    uint64_t nd = sluice_limiter_next_deadline(l);
    CHECK(nd == SEC, "first sweep at max(earliest full, 0 + burst * T): %" PRIu64, nd);
    CHECK(sluice_limiter_advance(l, 250 * MS - 1, 0) == 0 && stats(l).live_keys == N, "nothing idle before full");
    CHECK(sluice_limiter_advance(l, nd, 0) == N && stats(l).live_keys == 0, "all freed at the sweep");
    CHECK(sluice_limiter_next_deadline(l) == UINT64_MAX, "no key, no sweep");
    /* at 2 s: half the keys full at 2.25 s, half at 3 s */
    for (uint64_t k = 0; k < N; k++)
        CHECK(sluice_limiter_submit_cost(l, sluice_key_u64(k), k, k % 2 ? 4 : 1, 2 * SEC, &d) == 0 &&
                  d.kind == SLUICE_EMITTED,
              "submit");
    nd = sluice_limiter_next_deadline(l);
    CHECK(nd == 2 * SEC + 250 * MS, "sweep at the earliest full (2.25 s): %" PRIu64, nd);
    CHECK(sluice_limiter_advance(l, nd - 1, 0) == 0 && stats(l).live_keys == N, "nothing before the sweep");
    int64_t n = sluice_limiter_advance(l, nd, 0);
    uint64_t live = stats(l).live_keys;
    CHECK(n == N / 2 && live == N / 2, "sweep at %" PRIu64 ": freed %" PRId64 ", %" PRIu64 " left", nd, n, live);
    uint64_t nd2 = sluice_limiter_next_deadline(l);
    CHECK(nd2 == 3 * SEC + 250 * MS, "next sweep one spacing later: %" PRIu64, nd2);
    CHECK(sluice_limiter_check(l) == 0, "check");
    while ((nd = sluice_limiter_next_deadline(l)) != UINT64_MAX)
        CHECK(sluice_limiter_advance(l, nd, 0) >= 0, "advance");
    sluice_stats_t st = stats(l);
    CHECK(st.live_keys == 0 && st.armed_timers == 0, "all idle: %" PRIu64, st.live_keys);
    CHECK(st.memory_bytes <= empty.memory_bytes + 4096 + N / 64, "memory released: %" PRIu64 " (empty %" PRIu64 ")",
          st.memory_bytes, empty.memory_bytes);
    CHECK(sluice_limiter_check(l) == 0, "check");
    /* bounded advances free the same keys as one unbounded advance */
    for (uint64_t k = 0; k < 1000; k++) submit(l, k, 10 * SEC, &d);
    nd = sluice_limiter_next_deadline(l);
    int64_t total = 0, got;
    while ((got = sluice_limiter_advance(l, nd, 7)) == 7) total += got;
    total += got;
    CHECK(total == 1000 && stats(l).live_keys == 0, "bounded sweep freed %" PRId64, total);
    sluice_limiter_free(l);
}

/* 6 */
static uint64_t rng = 0x9E3779B97F4A7C15u;
static uint64_t rnd(uint64_t n) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng % n;
}

static void test_random_vs_model(void) {
    uint64_t refusals = 0;
    int runs = SANITIZED ? 40 : 200;
    for (int run = 0; run < runs; run++) {
        uint64_t limit = 1 + rnd(5), per = (1 + rnd(100)) * MS, burst = rnd(4);
        uint64_t cap = rnd(3) == 0 ? 0 : 1 + rnd(12);
        sluice_policy_t p = sluice_rate(limit, (int64_t)per, burst);
        sluice_limiter_t *l = mk(p, cap);
        ref_model_t *m;
        CHECK(ref_new(&m, &p) == 0, "ref_new");
        uint64_t t = 0, refused = 0;
        for (int op = 0; op < 600; op++) {
            t += rnd(4) == 0 ? rnd(3 * per) : rnd(per / 8 + 1);
            uint64_t k = rnd(24), x = rnd(20);
            sluice_key_t key = sluice_key_u64(k);
            CHECK(ref_advance(m, t) >= 0, "ref_advance");
            if (x < 12) {
                uint64_t cost = rnd(6) == 0 ? 1 + rnd(burst ? burst + 2 : limit + 2) : 1;
                sluice_quota_t rq;
                CHECK(ref_quota(m, key, cost, t, &rq) == 0, "ref quota");
                /* refused: a key idle in the model (no TAT ahead of t) whose
                 * call would be admitted (a dropped call creates no key) */
                bool idle = rq.full == t;
                bool full = cap && idle && rq.retry == t && ref_live_count(m) >= cap;
                sluice_decision_t dc, dr;
                memset(&dc, 0, sizeof dc);
                memset(&dr, 0, sizeof dr);
                int a = sluice_limiter_submit_cost(l, key, (uint64_t)op, cost, t, &dc);
                if (full) {
                    /* the model has no cap: the refused call must not reach it */
                    CHECK(a == SLUICE_EFULL,
                          "run %d op %d: key %" PRIu64 " at %" PRIu64 " with %" PRIu64 " live keys (cap %" PRIu64
                          "): rc %d, expected SLUICE_EFULL",
                          run, op, k, t, ref_live_count(m), cap, a);
                    refused++;
                } else {
                    int b = ref_submit_cost(m, key, (uint64_t)op, cost, t, &dr);
                    CHECK(a == b && a == 0, "run %d op %d: rc %d, model %d (live %" PRIu64 " cap %" PRIu64 ")", run, op,
                          a, b, ref_live_count(m), cap);
                    CHECK(dc.kind == dr.kind && dc.at == dr.at && dc.full == dr.full && dc.remaining == dr.remaining,
                          "run %d op %d: key %" PRIu64 " cost %" PRIu64 " at %" PRIu64 ": core %d@%" PRIu64
                          " full %" PRIu64 " rem %" PRIu64 ", model %d@%" PRIu64 " full %" PRIu64 " rem %" PRIu64,
                          run, op, k, cost, t, dc.kind, dc.at, dc.full, dc.remaining, dr.kind, dr.at, dr.full,
                          dr.remaining);
                }
            } else if (x < 15) {
                sluice_quota_t qc, qr;
                uint64_t cost = 1 + rnd(3);
                CHECK(sluice_limiter_quota(l, key, cost, t, &qc) == 0 && ref_quota(m, key, cost, t, &qr) == 0, "quota");
                CHECK(qc.remaining == qr.remaining && qc.full == qr.full && qc.retry == qr.retry,
                      "run %d op %d: quota differs", run, op);
            } else if (x < 17) {
                CHECK(sluice_limiter_cancel(l, key, t) == ref_cancel(m, key, t), "cancel");
            } else {
                CHECK(sluice_limiter_advance(l, t, rnd(2) ? 0 : 1 + rnd(3)) >= 0, "advance");
            }
            sluice_stats_t st = stats(l);
            CHECK(st.live_keys >= ref_live_count(m), "run %d op %d: %" PRIu64 " entries < %" PRIu64 " live keys", run,
                  op, st.live_keys, ref_live_count(m));
            CHECK(!cap || st.live_keys <= cap, "above the cap");
            CHECK(st.armed_timers == 0, "a timer armed");
            CHECK(sluice_limiter_check(l) == 0, "run %d op %d: check", run, op);
        }
        refusals += refused;
        ref_free(m);
        sluice_limiter_free(l);
    }
    CHECK(refusals > 100, "the random runs reached the cap only %" PRIu64 " times", refusals);
    printf("test_rate_expiry: %" PRIu64 " refusals at the cap, all where the model had cap keys live\n", refusals);
}

/* 7 */
static void sleep_ms(unsigned ms) {
    struct timespec ts = { (time_t)(ms / 1000), (long)(ms % 1000) * 1000000L };
    while (nanosleep(&ts, &ts) != 0) {
    }
}

static void test_loop_cap(void) {
    enum { CAP = 8 };
    struct event_base *base = event_base_new();
    CHECK(base != NULL, "event_base_new");
    sluice_loop_t *loop;
    CHECK(sluice_loop_attach(&loop, base, NULL) == 0, "attach");
    sluice_config_t c;
    memset(&c, 0, sizeof c);
    /* T = 1 s, burst 1: a key is live for 1 s, longer than a loaded machine
     * stalls this thread between the calls below (with 100 ms, a stall let
     * keys go idle in the middle of the replacements) */
    c.policy = sluice_rate(1, (int64_t)SEC, 1);
    c.max_keys = CAP;
    sluice_mt_options_t opt;
    memset(&opt, 0, sizeof opt);
    opt.nshards = 1;
    sluice_mt_t *m;
    CHECK(sluice_mt_new_with_options(&m, loop, &c, &opt) == 0, "sluice_mt_new_with_options");
    sluice_decision_t d;
    uint64_t t0 = sluice_clock_now();
    for (uint64_t k = 0; k < CAP; k++)
        CHECK(sluice_mt_submit(m, sluice_key_u64(k), k, &d) == 0 && d.kind == SLUICE_EMITTED, "key %" PRIu64, k);
    int rc = sluice_mt_submit(m, sluice_key_u64(100), 100, &d);
    if (sluice_clock_now() < t0 + SEC) {
        CHECK(rc == SLUICE_EFULL, "a new key while %d keys are live: rc %d", CAP, rc);
    } else {
        fprintf(stderr, "test_rate_expiry: note: more than 1 s between calls; the refusal part is skipped\n");
    }
    sleep_ms(1200); /* every key is idle now; the base never ran */
    CHECK(sluice_mt_submit(m, sluice_key_u64(101), 101, &d) == 0 && d.kind == SLUICE_EMITTED,
          "a new key once a held key is idle");
    for (uint64_t k = 102; k < 102 + CAP - 1; k++)
        CHECK(sluice_mt_submit(m, sluice_key_u64(k), k, &d) == 0, "new key %" PRIu64 " in place of an idle one", k);
    sluice_mt_stats_t st;
    CHECK(sluice_mt_stats(m, &st) == 0 && st.core.live_keys == CAP && st.core.armed_timers == 0,
          "live %" PRIu64 ", timers %" PRIu64, st.core.live_keys, st.core.armed_timers);
    sluice_mt_free(m);
    CHECK(sluice_loop_free(loop) == 0, "loop free");
    event_base_free(base);
}

int main(void) {
    test_warm_and_idle_in_place();
    test_sweep_on_creation();
    test_cap();
    test_sweep_deadline();
    test_random_vs_model();
    test_loop_cap();
    printf("test_rate_expiry: ok\n");
    return 0;
}
