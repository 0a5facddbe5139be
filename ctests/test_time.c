/*
 * test_time.c — time at the edges (issue 6, part 5).
 *
 *  1. Clock jumps of days and years with 100k keys waiting: one advance
 *     handles exactly the due timer transitions (its return value equals
 *     the number expected from the keys, not from the ticks crossed: a jump
 *     of 10 years is 3e11 ticks of 1 ms), every event at its own deadline,
 *     and the jump costs about as much as a jump of 2 s firing the same
 *     timers (timed loosely). Also with a 1 ns tick, where deadlines 10 days
 *     ahead lie beyond the wheel's 2^48-tick horizon (overflow list).
 *  2. The top of the 64-bit range: `now` near UINT64_MAX with intervals of
 *     years saturates at UINT64_MAX (decisions never wrap below `now`),
 *     nothing fires before UINT64_MAX, and advance(UINT64_MAX) fires it —
 *     for ticks of 1 ns, 1 ms and 1 s. Rate near the top is never admitted
 *     early, and a call that would end past UINT64_MAX is never admitted.
 *  3. `now` going backwards: treated as the latest time seen (ref model
 *     agrees on every decision and event), advance never fires anything
 *     when time goes back, and each key's events stay in time order.
 *  4. Intervals of SLUICE_DURATION_MAX (and one more: SLUICE_ERANGE), ticks
 *     of 1 ns / 1 ms / 1 s (and 1 s + 1: SLUICE_EINVAL).
 *  5. Tick sizes 1 ns / 1 ms / 1 s with deadlines anywhere: an advance to
 *     `now` fires exactly the deadlines <= floor(now / tick) * tick — never
 *     early, at most one tick late — and next_deadline never points past the
 *     first deadline rounded up to the tick.
 *  6. Bounded advance (max_timers): the rest stays due, next_deadline says
 *     so, later calls handle it, and a key call on a still-due key fires its
 *     timer first.
 *  7. close() at a time between ticks: the deadlines due at `now` fire first
 *     (sluice.h), even those that advance() would leave for the next tick;
 *     free() of a limiter not closed fires the deadlines already due at the
 *     latest time seen before discarding ("first closed with discard").
 *
 * Failures of checks marked CORE BUG are reported to the lead (see
 * docs/reliability.md); the test then exits 1 after running everything.
 */
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ref/ref_model.h"
#include "sluice.h"

#define TEST_NAME "test_time"
#include "support/check.h"

#define NS UINT64_C(1)
#define US UINT64_C(1000)
#define MS UINT64_C(1000000)
#define SEC UINT64_C(1000000000)
#define DAY (UINT64_C(86400) * SEC)
#define YEAR (UINT64_C(31557600) * SEC)

static int g_bugs;

/* A check of documented behaviour that the core currently misses: printed,
 * counted, and the test goes on (exit 1 at the end). */
#define CORE_BUG(cond, ...)                                                                                            \
    do {                                                                                                               \
        if (!(cond)) {                                                                                                 \
            g_bugs++;                                                                                                  \
            fprintf(stderr, "test_time.c:%d: CORE BUG: %s: ", __LINE__, #cond);                                        \
            fprintf(stderr, __VA_ARGS__);                                                                              \
            fputc('\n', stderr);                                                                                       \
        }                                                                                                              \
    } while (0)

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static uint64_t rng_s = 12345;
static uint64_t rnd(void) {
    uint64_t z = (rng_s += UINT64_C(0x9E3779B97F4A7C15));
    z = (z ^ (z >> 30)) * UINT64_C(0xBF58476D1CE4E5B9);
    z = (z ^ (z >> 27)) * UINT64_C(0x94D049BB133111EB);
    return z ^ (z >> 31);
}
static uint64_t rndn(uint64_t n) { return n ? rnd() % n : 0; }

/* ------------------------------------------------------------------ event log */

typedef struct {
    int kind;
    sluice_key_t key;
    uint64_t key_u64; /* integer keys only (all keys in this file) */
    uint64_t token, at;
} rec_t;

static rec_t *g_ev;
static size_t g_nev, g_capev;

static void on_event(void *user, const sluice_event_t *e) {
    (void)user;
    if (g_nev == g_capev) {
        g_capev = g_capev ? 2 * g_capev : 1024;
        g_ev = realloc(g_ev, g_capev * sizeof *g_ev);
        CHECK(g_ev, "out of memory");
    }
    rec_t r = { e->kind, e->key, e->key.kind == SLUICE_KEY_U64 ? e->key.u64 : 0, e->token, e->at };
    g_ev[g_nev++] = r;
}

static void ev_reset(void) { g_nev = 0; }

static sluice_limiter_t *mk(sluice_policy_t p, uint64_t tick, uint64_t start) {
    sluice_config_t c;
    memset(&c, 0, sizeof c);
    c.policy = p;
    c.tick_ns = tick;
    c.start_ns = start;
    c.on_event = on_event;
    sluice_limiter_t *l = NULL;
    int rc = sluice_limiter_new(&l, &c);
    CHECK(rc == 0, "limiter_new: %d (%s)", rc, sluice_strerror(rc));
    return l;
}

static uint64_t floor_tick(uint64_t t, uint64_t tick) { return t / tick * tick; }
static uint64_t ceil_tick(uint64_t t, uint64_t tick) {
    uint64_t f = t / tick * tick;
    if (f == t) return t;
    return f > UINT64_MAX - tick ? UINT64_MAX : f + tick;
}

/* ------------------------------------------------------------------ 1. jumps */

#define JUMP_KEYS 100000

/* Arms JUMP_KEYS keys of `pol` between `t0` and t0 + 1 s (each with a
 * deadline at call + W), then jumps by `jump`. Returns the seconds the
 * advance took. */
static double jump_once(const char *name, sluice_policy_t pol, uint64_t tick, uint64_t t0, uint64_t jump,
                        int calls_per_key, int64_t expect_per_key, uint64_t *events_out) {
    sluice_limiter_t *l = mk(pol, tick, t0);
    ev_reset();
    sluice_decision_t d;
    for (uint64_t i = 0; i < JUMP_KEYS; i++) {
        uint64_t t = t0 + i * (SEC / JUMP_KEYS);
        for (int c = 0; c < calls_per_key; c++)
            CHECK(sluice_limiter_submit(l, sluice_key_u64(i), i * 4 + (uint64_t)c + 1, t, &d) == 0, "submit");
    }
    uint64_t ev_before = g_nev;
    sluice_stats_t st;
    CHECK(sluice_limiter_stats(l, &st) == 0 && st.armed_timers == JUMP_KEYS, "%s: %" PRIu64 " timers", name,
          st.armed_timers);
    uint64_t target = t0 + SEC + jump;
    double a = now_s();
    int64_t n = sluice_limiter_advance(l, target, 0);
    double secs = now_s() - a;
    CHECK(n == expect_per_key * JUMP_KEYS,
          "%s: advance by %" PRIu64 " ns returned %" PRId64 ", expected %" PRId64 " (the due timer transitions)", name,
          jump, n, expect_per_key * JUMP_KEYS);
    CHECK(sluice_limiter_stats(l, &st) == 0 && st.live_keys == 0 && st.armed_timers == 0, "%s: keys left", name);
    CHECK(sluice_limiter_next_deadline(l) == UINT64_MAX, "%s: next_deadline with no timer", name);
    /* each emission at its own deadline, not at the jump's end */
    for (size_t i = ev_before; i < g_nev; i++) {
        CHECK(g_ev[i].kind == SLUICE_EVENT_EMIT, "%s: event kind %d", name, g_ev[i].kind);
        uint64_t k = g_ev[i].key_u64;
        uint64_t call = t0 + k * (SEC / JUMP_KEYS);
        CHECK(g_ev[i].at == call + (uint64_t)pol.interval_ns,
              "%s: key %" PRIu64 " emitted at %" PRIu64 ", its deadline is %" PRIu64, name, k, g_ev[i].at,
              call + (uint64_t)pol.interval_ns);
    }
    *events_out = g_nev - ev_before;
    CHECK(sluice_limiter_check(l) == 0, "check");
    sluice_limiter_free(l);
    return secs;
}

static void test_jumps(void) {
    struct {
        const char *name;
        sluice_policy_t pol;
        int calls;
        int64_t transitions; /* per key */
    } cases[] = {
        /* audit: one call, one timer row (emit, idle) */
        { "audit 1 s", sluice_audit((int64_t)SEC), 1, 1 },
        /* throttle: leading emit + pending; timer rows: emit (new window), then idle */
        { "throttle 1 s", sluice_throttle((int64_t)SEC, true, true, SLUICE_PICK_LATEST), 2, 2 },
        /* debounce with maxWait: last + W < start + maxWait: one row (quiet) */
        { "debounce 1 s maxWait 2 s", sluice_debounce((int64_t)SEC, false, true, 2 * (int64_t)SEC), 1, 1 },
    };
    struct {
        const char *name;
        uint64_t tick, jump;
    } jumps[] = {
        { "2 s (tick 1 ms)", MS, 2 * SEC },        { "3 days (tick 1 ms)", MS, 3 * DAY },
        { "10 years (tick 1 ms)", MS, 10 * YEAR }, { "10 years (tick 1 s)", SEC, 10 * YEAR },
        { "1 year (tick 1 ns)", NS, YEAR },
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        double base = 0;
        for (size_t j = 0; j < sizeof jumps / sizeof jumps[0]; j++) {
            char name[160];
            snprintf(name, sizeof name, "%s, jump %s", cases[c].name, jumps[j].name);
            uint64_t evs;
            double secs = jump_once(name, cases[c].pol, jumps[j].tick, 5 * SEC, jumps[j].jump, cases[c].calls,
                                    cases[c].transitions, &evs);
            CHECK(evs == JUMP_KEYS, "%s: %" PRIu64 " emissions", name, evs);
            if (j == 0) base = secs;
            /* loose: the jump costs O(timers), whatever the ticks crossed
             * (O(ticks) would take minutes: 3e11 ticks and more). The 5 s
             * allow for a loaded machine stalling this process during one
             * jump (0.5 s did not always). */
            CHECK(secs <= 20 * base + 5.0, "%s: the jump took %.3f s, a 2 s jump firing the same timers %.3f s", name,
                  secs, base);
            printf("  jump: %-52s %" PRId64 " transitions in %.1f ms\n", name,
                   cases[c].transitions * (int64_t)JUMP_KEYS, secs * 1e3);
        }
    }
    /* overflow list: 1 ns tick, deadlines 10 days ahead (beyond 2^48 ns) */
    {
        uint64_t evs;
        double secs = jump_once("audit 10 days, tick 1 ns, jump 1 year", sluice_audit((int64_t)(10 * DAY)), NS, 0, YEAR,
                                1, 1, &evs);
        CHECK(evs == JUMP_KEYS, "overflow: %" PRIu64 " emissions", evs);
        printf("  jump: %-52s %d transitions in %.1f ms\n", "audit 10 days, tick 1 ns (overflow), 1 year", JUMP_KEYS,
               secs * 1e3);
    }
    /* an empty limiter jumps 100 years for nothing */
    sluice_limiter_t *l = mk(sluice_audit((int64_t)SEC), MS, 0);
    CHECK(sluice_limiter_advance(l, 100 * YEAR, 0) == 0, "empty jump");
    CHECK(sluice_limiter_advance(l, 100 * YEAR + 1, 0) == 0, "empty jump");
    sluice_limiter_free(l);
}

/* ------------------------------------------------------------------ 2. top of the range */

static void test_top(void) {
    const uint64_t ticks[] = { NS, MS, SEC };
    for (size_t i = 0; i < 3; i++) {
        uint64_t tick = ticks[i];
        uint64_t start = UINT64_MAX - 2 * YEAR;
        /* throttle with the longest interval: the window end saturates */
        sluice_limiter_t *l = mk(sluice_throttle(SLUICE_DURATION_MAX, true, true, SLUICE_PICK_LATEST), tick, start);
        ev_reset();
        sluice_decision_t d;
        CHECK(sluice_limiter_submit(l, sluice_key_u64(1), 1, start, &d) == 0 && d.kind == SLUICE_EMITTED, "lead");
        CHECK(sluice_limiter_submit(l, sluice_key_u64(1), 2, start + 5, &d) == 0 && d.kind == SLUICE_SCHEDULED &&
                  d.at == UINT64_MAX,
              "tick %" PRIu64 ": scheduled at %" PRIu64 ", expected the saturated UINT64_MAX", tick, d.at);
        CHECK(sluice_limiter_submit(l, sluice_key_u64(2), 3, UINT64_MAX - YEAR, &d) == 0 && d.kind == SLUICE_EMITTED,
              "second key");
        /* next_deadline is a lower bound: advancing there never fires early */
        uint64_t nd = sluice_limiter_next_deadline(l);
        CHECK(sluice_limiter_advance(l, nd, 0) == 0 && g_nev == 0, "early fire at next_deadline %" PRIu64, nd);
        CHECK(sluice_limiter_advance(l, UINT64_MAX - 1, 0) == 0 && g_nev == 0,
              "tick %" PRIu64 ": fired before UINT64_MAX", tick);
        CHECK(sluice_limiter_pending(l, sluice_key_u64(1), UINT64_MAX - 1) == 1, "still pending");
        int64_t n = sluice_limiter_advance(l, UINT64_MAX, 0);
        CORE_BUG(
            n >= 1 && g_nev == 1,
            "tick %" PRIu64 " ns: advance(UINT64_MAX) handled %" PRId64 " timers and emitted %zu values: a deadline "
            "of UINT64_MAX is due then, but with a tick > 1 ns the wheel stops at floor(UINT64_MAX / tick) * tick, "
            "so deadlines in the last partial tick are never fired by advance()",
            tick, n, g_nev);
        /* a key call fires it (timers first) */
        CHECK(sluice_limiter_pending(l, sluice_key_u64(1), UINT64_MAX) == 0, "pending at the end of time");
        CHECK(g_nev == 1 && g_ev[0].token == 2 && g_ev[0].kind == SLUICE_EVENT_EMIT && g_ev[0].at == UINT64_MAX,
              "tick %" PRIu64 ": the saturated deadline fires at UINT64_MAX (%zu events)", tick, g_nev);
        /* at the last nanosecond: decisions never wrap below now */
        CHECK(sluice_limiter_submit(l, sluice_key_u64(3), 4, UINT64_MAX, &d) == 0 && d.at == UINT64_MAX, "at max");
        CHECK(sluice_limiter_submit(l, sluice_key_u64(3), 5, UINT64_MAX, &d) == 0 && d.at >= UINT64_MAX, "no wrap");
        CHECK(sluice_limiter_check(l) == 0, "check");
        sluice_limiter_free(l);

        /* debounce with maxWait of the longest duration near the top */
        l = mk(sluice_debounce(SLUICE_DURATION_MAX / 2, false, true, SLUICE_DURATION_MAX), tick, start);
        ev_reset();
        CHECK(sluice_limiter_submit(l, sluice_key_u64(1), 1, start, &d) == 0 && d.kind == SLUICE_SCHEDULED &&
                  d.at == UINT64_MAX,
              "debounce saturates: at %" PRIu64, d.at);
        CHECK(sluice_limiter_advance(l, UINT64_MAX - 1, 0) == 0 && g_nev == 0, "debounce: early fire");
        CHECK(sluice_limiter_flush(l, sluice_key_u64(1), UINT64_MAX - 1) == 1 && g_nev == 1 &&
                  g_ev[0].at == UINT64_MAX - 1,
              "flush near the top");
        CHECK(sluice_limiter_check(l) == 0, "check");
        sluice_limiter_free(l);

        /* rate: the clock ends at UINT64_MAX, and so does every quota: a call
         * whose TAT would pass it never fits (SLUICE_NEVER, which is UINT64_MAX) */
        l = mk(sluice_rate(1, SLUICE_DURATION_MAX, 1), tick, start);
        uint64_t t = UINT64_MAX - (uint64_t)SLUICE_DURATION_MAX / 10; /* before `start`: counts as `start` */
        CHECK(sluice_limiter_submit(l, sluice_key_u64(9), 1, t, &d) == 0 && d.kind == SLUICE_DROPPED &&
                  d.at == SLUICE_NEVER && d.full == start,
              "rate: a call ending past the end of the clock: %d at %" PRIu64, d.kind, d.at);
        CHECK(sluice_limiter_check(l) == 0, "check");
        sluice_limiter_free(l);
        l = mk(sluice_rate(1, (int64_t)YEAR, 1), tick, start);
        t = UINT64_MAX - YEAR; /* ends exactly at the end of the clock: fits */
        CHECK(sluice_limiter_submit(l, sluice_key_u64(8), 2, t, &d) == 0 && d.kind == SLUICE_EMITTED &&
                  d.full == UINT64_MAX && d.remaining == 0,
              "rate first: full %" PRIu64, d.full);
        CHECK(sluice_limiter_submit(l, sluice_key_u64(8), 3, t + 1, &d) == 0 && d.kind == SLUICE_DROPPED &&
                  d.at == UINT64_MAX,
              "rate: dropped, retry at %" PRIu64, d.at);
        CHECK(sluice_limiter_submit(l, sluice_key_u64(8), 4, UINT64_MAX - 1, &d) == 0 && d.kind == SLUICE_DROPPED,
              "rate admitted before UINT64_MAX");
        CHECK(sluice_limiter_check(l) == 0, "check");
        sluice_limiter_free(l);
    }
    printf("  top of the range: saturation at UINT64_MAX, no early fire, no wrap (ticks 1 ns, 1 ms, 1 s)\n");
}

/* ------------------------------------------------------------------ 3. backwards */

static void test_backwards(void) {
    /* scripted */
    sluice_limiter_t *l = mk(sluice_throttle((int64_t)SEC, true, true, SLUICE_PICK_LATEST), MS, 0);
    ev_reset();
    sluice_decision_t d;
    CHECK(sluice_limiter_submit(l, sluice_key_u64(1), 1, 10 * SEC, &d) == 0 && d.kind == SLUICE_EMITTED, "a");
    CHECK(sluice_limiter_submit(l, sluice_key_u64(1), 2, 5 * SEC, &d) == 0 && d.kind == SLUICE_SCHEDULED &&
              d.at == 11 * SEC,
          "a call at 5 s after 10 s is handled at 10 s: window ends 11 s, got %" PRIu64, d.at);
    /* 11 s: b emitted, a new window opens; 12 s: it ends (two transitions) */
    CHECK(sluice_limiter_advance(l, 12 * SEC, 0) == 2 && g_nev == 1 && g_ev[0].at == 11 * SEC, "fire at 11 s");
    CHECK(sluice_limiter_advance(l, 3 * SEC, 0) == 0, "advance back in time fires nothing");
    CHECK(sluice_limiter_submit(l, sluice_key_u64(2), 3, 1 * SEC, &d) == 0 && d.kind == SLUICE_EMITTED &&
              d.at == 12 * SEC,
          "a call at 1 s after 12 s emits at 12 s, got %" PRIu64, d.at);
    CHECK(sluice_limiter_submit(l, sluice_key_u64(2), 4, 0, &d) == 0 && d.at == 13 * SEC, "window from 12 s");
    CHECK(sluice_limiter_flush(l, sluice_key_u64(2), 2 * SEC) == 1 && g_nev == 2 && g_ev[1].at == 12 * SEC,
          "flush at a past time happens at the latest time");
    CHECK(sluice_limiter_close(l, 1, SLUICE_CLOSE_DRAIN) == 0, "close back in time");
    sluice_limiter_free(l);

    /* randomized against the model: times jitter back and forth */
    uint64_t runs = 0, back = 0, events = 0;
    for (int run = 0; run < (SANITIZED ? 120 : 400); run++) {
        int kind = run % 4;
        uint64_t W = (1 + rndn(50)) * MS;
        sluice_policy_t p =
            kind == 0
                ? sluice_throttle((int64_t)W, run % 3 != 0, true, run % 2 ? SLUICE_PICK_FIRST : SLUICE_PICK_LATEST)
            : kind == 1 ? sluice_audit((int64_t)W)
            : kind == 2 ? sluice_debounce((int64_t)W, run % 3 == 0, true, run % 5 ? (int64_t)(2 * W) : -1)
                        : sluice_rate(1 + rndn(5), (int64_t)W, rndn(3));
        uint64_t tick = run % 2 ? NS : MS; /* with a 1 ms tick, times are whole ms */
        l = mk(p, tick, 0);
        ref_model_t *m;
        CHECK(ref_new(&m, &p) == 0, "ref");
        ev_reset();
        uint64_t seen = 0, t = 0;
        size_t last_ev = 0;
        uint64_t *last_at = calloc(8, sizeof *last_at);
        for (int op = 0; op < 200; op++) {
            uint64_t x = rndn(100);
            if (x < 40)
                t = seen + rndn(3 * W);
            else if (x < 70)
                t = seen > 0 ? seen - rndn(seen < 3 * W ? seen + 1 : 3 * W) : 0; /* backwards */
            else
                t = seen;
            if (tick == MS) t = t / MS * MS;
            if (t < seen) back++;
            if (t > seen) seen = t;
            uint64_t k = rndn(8);
            uint64_t tok = (uint64_t)op + 1;
            sluice_decision_t dc, dr;
            uint64_t w = rndn(10);
            if (w < 6) {
                int a = sluice_limiter_submit(l, sluice_key_u64(k), tok, t, &dc);
                int b = ref_submit(m, sluice_key_u64(k), tok, t, &dr);
                CHECK(a == 0 && b == 0 && dc.kind == dr.kind && dc.at == dr.at,
                      "run %d op %d: submit at %" PRIu64 " (seen %" PRIu64 "): core %d@%" PRIu64 ", model %d@%" PRIu64,
                      run, op, t, seen, dc.kind, dc.at, dr.kind, dr.at);
                CHECK(dc.at >= seen, "run %d: decision time %" PRIu64 " before the latest time %" PRIu64, run, dc.at,
                      seen);
            } else if (w < 7) {
                CHECK(sluice_limiter_flush(l, sluice_key_u64(k), t) == ref_flush(m, sluice_key_u64(k), t), "flush");
            } else if (w < 8) {
                CHECK(sluice_limiter_cancel(l, sluice_key_u64(k), t) == ref_cancel(m, sluice_key_u64(k), t), "cancel");
            } else {
                int64_t a = sluice_limiter_advance(l, t, 0);
                int64_t b = ref_advance(m, t);
                CHECK(a >= 0 && b >= 0, "advance");
                if (p.kind != SLUICE_RATE) CHECK(a == b, "run %d: advance %" PRId64 " vs model %" PRId64, run, a, b);
            }
            /* compare event streams per key: same multiset order per key */
            const ref_event_t *rev = ref_events(m);
            size_t rn = ref_event_count(m);
            for (size_t i = last_ev; i < g_nev; i++) {
                uint64_t kk = g_ev[i].key_u64;
                CHECK(g_ev[i].at <= seen, "run %d: event at %" PRIu64 " later than any time seen (%" PRIu64 ")", run,
                      g_ev[i].at, seen);
                CHECK(g_ev[i].at >= last_at[kk],
                      "run %d: key %" PRIu64 " event at %" PRIu64 " before an earlier one at %" PRIu64, run, kk,
                      g_ev[i].at, last_at[kk]);
                last_at[kk] = g_ev[i].at;
            }
            CHECK(rn == g_nev - last_ev, "run %d op %d: core %zu events, model %zu", run, op, g_nev - last_ev, rn);
            /* per key, in order */
            for (uint64_t kk = 0; kk < 8; kk++) {
                size_t ci = last_ev, ri = 0;
                for (;;) {
                    while (ci < g_nev && g_ev[ci].key_u64 != kk) ci++;
                    while (ri < rn && rev[ri].key.u64 != kk) ri++;
                    if (ci >= g_nev || ri >= rn) {
                        CHECK(ci >= g_nev && ri >= rn, "run %d: key %" PRIu64 " event counts differ", run, kk);
                        break;
                    }
                    CHECK(g_ev[ci].kind == (int)rev[ri].kind && g_ev[ci].token == rev[ri].token &&
                              g_ev[ci].at == rev[ri].at,
                          "run %d op %d: key %" PRIu64 ": core %d tok %" PRIu64 " at %" PRIu64 ", model %d tok %" PRIu64
                          " at %" PRIu64,
                          run, op, kk, g_ev[ci].kind, g_ev[ci].token, g_ev[ci].at, rev[ri].kind, rev[ri].token,
                          rev[ri].at);
                    ci++;
                    ri++;
                }
            }
            events += rn;
            ref_clear_events(m);
            last_ev = g_nev;
            CHECK(sluice_limiter_check(l) == 0, "check");
        }
        free(last_at);
        ref_free(m);
        sluice_limiter_free(l);
        runs++;
    }
    printf("  backwards: %" PRIu64 " runs, %" PRIu64 " calls back in time, %" PRIu64
           " events, all equal to the model\n",
           runs, back, events);
}

/* ------------------------------------------------------------------ 4. longest durations, tick limits */

static void test_duration_max(void) {
    sluice_config_t c;
    memset(&c, 0, sizeof c);
    sluice_limiter_t *l = NULL;
    c.policy = sluice_throttle(SLUICE_DURATION_MAX + 1, true, true, SLUICE_PICK_LATEST);
    CHECK(sluice_limiter_new(&l, &c) == SLUICE_ERANGE && !l, "interval over max");
    c.policy = sluice_debounce((int64_t)SEC, false, true, SLUICE_DURATION_MAX + 1);
    CHECK(sluice_limiter_new(&l, &c) == SLUICE_ERANGE && !l, "maxWait over max");
    c.policy = sluice_rate(1, SLUICE_DURATION_MAX + 1, 0);
    CHECK(sluice_limiter_new(&l, &c) == SLUICE_ERANGE && !l, "per over max");
    c.policy = sluice_rate(SLUICE_RATE_MAX + 1, (int64_t)SEC, 0);
    CHECK(sluice_limiter_new(&l, &c) == SLUICE_ERANGE && !l, "limit over max");
    c.policy = sluice_rate(10, (int64_t)SEC, SLUICE_RATE_MAX + 1);
    CHECK(sluice_limiter_new(&l, &c) == SLUICE_ERANGE && !l, "burst over max");
    c.policy = sluice_throttle(-1, true, true, SLUICE_PICK_LATEST);
    CHECK(sluice_limiter_new(&l, &c) == SLUICE_EINVAL && !l, "negative interval");
    c.policy = sluice_throttle(INT64_MIN, true, true, SLUICE_PICK_LATEST);
    CHECK(sluice_limiter_new(&l, &c) == SLUICE_EINVAL && !l, "INT64_MIN interval");
    c.policy = sluice_rate(1, -5, 0);
    CHECK(sluice_limiter_new(&l, &c) == SLUICE_EINVAL && !l, "negative per");
    c.policy = sluice_audit((int64_t)SEC);
    c.tick_ns = SEC + 1;
    CHECK(sluice_limiter_new(&l, &c) == SLUICE_EINVAL && !l, "tick over 1 s");
    c.tick_ns = UINT64_MAX;
    CHECK(sluice_limiter_new(&l, &c) == SLUICE_EINVAL && !l, "tick UINT64_MAX");

    const uint64_t ticks[] = { NS, MS, SEC };
    const uint64_t D = (uint64_t)SLUICE_DURATION_MAX;
    for (size_t i = 0; i < 3; i++) {
        uint64_t tick = ticks[i];
        l = mk(sluice_throttle(SLUICE_DURATION_MAX, true, true, SLUICE_PICK_LATEST), tick, 0);
        ev_reset();
        sluice_decision_t d;
        CHECK(sluice_limiter_submit(l, sluice_key_u64(1), 1, 0, &d) == 0 && d.kind == SLUICE_EMITTED, "a");
        CHECK(sluice_limiter_submit(l, sluice_key_u64(1), 2, 1, &d) == 0 && d.at == D, "b at %" PRIu64, d.at);
        /* step through the years: nothing early */
        for (uint64_t t = YEAR; t < D; t += 3 * YEAR)
            CHECK(sluice_limiter_advance(l, t, 0) == 0 && g_nev == 0, "early");
        CHECK(sluice_limiter_advance(l, D - 1, 0) == 0 && g_nev == 0, "tick %" PRIu64 ": fired before 1e18", tick);
        CHECK(sluice_limiter_advance(l, D, 0) == 1 && g_nev == 1 && g_ev[0].at == D && g_ev[0].token == 2,
              "tick %" PRIu64 ": fire at exactly SLUICE_DURATION_MAX", tick);
        CHECK(sluice_limiter_advance(l, 2 * D - 1, 0) == 0, "second window early");
        CHECK(sluice_limiter_advance(l, 2 * D, 0) == 1, "second window ends (idle)");
        CHECK(sluice_limiter_check(l) == 0, "check");
        sluice_limiter_free(l);
    }
    /* tick 0 means the default (1 ms): a deadline at 1.5 ms fires by 2 ms */
    l = mk(sluice_audit((int64_t)(1500 * US)), 0, 0);
    ev_reset();
    CHECK(sluice_limiter_submit(l, sluice_key_u64(1), 1, 0, NULL) == 0, "submit");
    CHECK(sluice_limiter_advance(l, 1999 * US, 0) == 0, "default tick: not before 2 ms");
    CHECK(sluice_limiter_advance(l, 2 * MS, 0) == 1 && g_ev[0].at == 1500 * US, "default tick: at 2 ms");
    sluice_limiter_free(l);
    printf("  durations: SLUICE_DURATION_MAX windows fire exactly at 1e18 ns (ticks 1 ns, 1 ms, 1 s); out-of-range "
           "configurations refused\n");
}

/* ------------------------------------------------------------------ 5. tick lateness */

static void test_tick_lateness(void) {
    const uint64_t ticks[] = { NS, MS, SEC };
    for (size_t ti = 0; ti < 3; ti++) {
        uint64_t tick = ticks[ti];
        uint64_t fired = 0;
        for (int run = 0; run < (SANITIZED ? 6 : 20); run++) {
            uint64_t W = 1 + rndn(tick * (run % 2 ? 5000 : 70));
            sluice_limiter_t *l = mk(sluice_audit((int64_t)W), tick, 0);
            ev_reset();
            uint64_t now = rndn(tick * 10), prev_wheel = floor_tick(now, tick);
            CHECK(sluice_limiter_advance(l, now, 0) == 0, "advance");
            uint64_t key = 0, armed = 0, first_deadline = UINT64_MAX;
            uint64_t *deadline = malloc(4000 * sizeof *deadline);
            uint8_t *gone = calloc(4000, 1);
            for (int step = 0; step < 300; step++) {
                int nsub = (int)rndn(10);
                for (int s = 0; s < nsub && key < 4000; s++, key++) {
                    CHECK(sluice_limiter_submit(l, sluice_key_u64(key), key + 1, now, NULL) == 0, "submit");
                    deadline[key] = now + W;
                    armed++;
                    if (now + W < first_deadline) first_deadline = now + W;
                }
                if (armed) {
                    uint64_t nd = sluice_limiter_next_deadline(l);
                    CHECK(nd <= ceil_tick(first_deadline, tick),
                          "tick %" PRIu64 ": next_deadline %" PRIu64 " past the first deadline %" PRIu64 " rounded up",
                          tick, nd, first_deadline);
                }
                uint64_t x = rndn(100);
                uint64_t step_ns = x < 30 ? rndn(tick) : x < 80 ? rndn(W + tick) : x < 95 ? rndn(4 * W) : rndn(100 * W);
                now += step_ns;
                size_t e0 = g_nev;
                int64_t n = sluice_limiter_advance(l, now, 0);
                uint64_t wheel = floor_tick(now, tick);
                CHECK(n == (int64_t)(g_nev - e0), "transitions %" PRId64 " vs events %zu", n, g_nev - e0);
                for (size_t i = e0; i < g_nev; i++) {
                    uint64_t D = g_ev[i].at;
                    CHECK(D == deadline[g_ev[i].key_u64], "event at %" PRIu64 " is not the key's deadline", D);
                    CHECK(D <= wheel, "tick %" PRIu64 ": deadline %" PRIu64 " fired by advance(%" PRIu64 "): early",
                          tick, D, now);
                    CHECK(D > prev_wheel,
                          "tick %" PRIu64 ": deadline %" PRIu64 " should have fired at the previous advance "
                          "(wheel at %" PRIu64 "): late",
                          tick, D, prev_wheel);
                    armed--;
                    fired++;
                }
                prev_wheel = wheel;
                /* every deadline <= wheel time has fired */
                sluice_stats_t st;
                CHECK(sluice_limiter_stats(l, &st) == 0 && st.armed_timers == armed, "armed %" PRIu64 " vs %" PRIu64,
                      st.armed_timers, armed);
                /* every deadline <= the wheel's time has fired; find the earliest left */
                first_deadline = UINT64_MAX;
                for (size_t i = e0; i < g_nev; i++) gone[g_ev[i].key_u64] = 1;
                for (uint64_t k = 0; k < key; k++) {
                    if (gone[k]) continue;
                    CHECK(deadline[k] > wheel,
                          "tick %" PRIu64 ": deadline %" PRIu64 " <= wheel time %" PRIu64 " not fired: late", tick,
                          deadline[k], wheel);
                    if (deadline[k] < first_deadline) first_deadline = deadline[k];
                }
            }
            CHECK(sluice_limiter_check(l) == 0, "check");
            free(deadline);
            free(gone);
            sluice_limiter_free(l);
        }
        printf("  tick %10" PRIu64 " ns: %" PRIu64 " deadlines fired, none early, none more than a tick late\n", tick,
               fired);
    }
}

/* ------------------------------------------------------------------ 6. bounded advance */

static void test_bounded(void) {
    const uint64_t N = 10000;
    sluice_limiter_t *l = mk(sluice_audit((int64_t)SEC), MS, 0);
    ev_reset();
    for (uint64_t k = 0; k < N; k++) CHECK(sluice_limiter_submit(l, sluice_key_u64(k), k + 1, k * US, NULL) == 0, "s");
    uint64_t now = 3 * SEC;
    int64_t n = sluice_limiter_advance(l, now, 100);
    CHECK(n == 100 && g_nev == 100, "bounded advance handled %" PRId64, n);
    sluice_stats_t st;
    CHECK(sluice_limiter_stats(l, &st) == 0 && st.armed_timers == N - 100, "rest still armed");
    CHECK(sluice_limiter_next_deadline(l) <= now, "next_deadline %" PRIu64 " must say work is due now",
          sluice_limiter_next_deadline(l));
    /* a still-due key: timers first — its EMIT at its deadline, then the flush finds nothing */
    uint64_t k_due = UINT64_MAX;
    {
        uint8_t *done = calloc(N, 1);
        for (size_t i = 0; i < g_nev; i++) done[g_ev[i].key_u64] = 1;
        for (uint64_t k = N; k-- > 0;)
            if (!done[k]) {
                k_due = k;
                break;
            }
        free(done);
    }
    size_t e0 = g_nev;
    CHECK(sluice_limiter_flush(l, sluice_key_u64(k_due), now) == 0, "flush of a due key: its timer fires first");
    CHECK(g_nev == e0 + 1 && g_ev[e0].kind == SLUICE_EVENT_EMIT && g_ev[e0].at == k_due * US + SEC,
          "the due key's timer emission");
    /* a submit to another due key: timer first, then a fresh window */
    uint64_t k2 = k_due - 1;
    sluice_decision_t d;
    CHECK(sluice_limiter_submit(l, sluice_key_u64(k2), 999999, now, &d) == 0 && d.kind == SLUICE_SCHEDULED &&
              d.at == now + SEC,
          "submit to a due key");
    CHECK(g_nev == e0 + 2 && g_ev[e0 + 1].at == k2 * US + SEC, "its timer fired first");
    uint64_t total = 102, calls = 1;
    for (;;) {
        n = sluice_limiter_advance(l, now, 100);
        CHECK(n >= 0 && n <= 100, "bound");
        total += (uint64_t)n;
        calls++;
        if (n < 100) break;
    }
    CHECK(total == N, "bounded advances handled %" PRIu64 " of %" PRIu64, total, N);
    CHECK(sluice_limiter_stats(l, &st) == 0 && st.armed_timers == 1, "only the new window is left");
    CHECK(sluice_limiter_check(l) == 0, "check");
    sluice_limiter_free(l);
    printf("  bounded advance: %" PRIu64 " due timers in %" PRIu64 " calls of at most 100\n", N, calls);
}

/* ------------------------------------------------------------------ 7. close between ticks */

static void test_close_between_ticks(void) {
    /* throttle 0.5 ms, tick 1 ms: b is due at 1.5 ms; close at 1.7 ms */
    for (int mode = SLUICE_CLOSE_DRAIN; mode <= SLUICE_CLOSE_DISCARD; mode++) {
        sluice_limiter_t *l = mk(sluice_throttle((int64_t)(500 * US), true, true, SLUICE_PICK_LATEST), MS, 0);
        ev_reset();
        sluice_decision_t d;
        CHECK(sluice_limiter_submit(l, sluice_key_u64(1), 1, 1000 * US, &d) == 0 && d.kind == SLUICE_EMITTED, "a");
        CHECK(sluice_limiter_submit(l, sluice_key_u64(1), 2, 1100 * US, &d) == 0 && d.at == 1500 * US, "b");
        CHECK(sluice_limiter_close(l, 1700 * US, (sluice_close_mode_t)mode) == 0, "close");
        CHECK(g_nev == 1 && g_ev[0].token == 2, "one event for b");
        CORE_BUG(g_ev[0].kind == SLUICE_EVENT_EMIT && g_ev[0].at == 1500 * US,
                 "close(%s) at 1.7 ms with tick 1 ms: b's deadline 1.5 ms is due at now and must fire first (EMIT at "
                 "1500000), got kind %d at %" PRIu64 " — close() fires only what advance() would (deadlines <= "
                 "floor(now / tick) * tick)",
                 mode == SLUICE_CLOSE_DRAIN ? "drain" : "discard", g_ev[0].kind, g_ev[0].at);
        sluice_limiter_free(l);
    }
    /* the same at a whole tick works (control) */
    sluice_limiter_t *l = mk(sluice_throttle((int64_t)(500 * US), true, true, SLUICE_PICK_LATEST), MS, 0);
    ev_reset();
    CHECK(sluice_limiter_submit(l, sluice_key_u64(1), 1, 1000 * US, NULL) == 0, "a");
    CHECK(sluice_limiter_submit(l, sluice_key_u64(1), 2, 1100 * US, NULL) == 0, "b");
    CHECK(sluice_limiter_close(l, 2000 * US, SLUICE_CLOSE_DISCARD) == 0, "close");
    CHECK(g_nev == 1 && g_ev[0].kind == SLUICE_EVENT_EMIT && g_ev[0].at == 1500 * US, "control: close at 2 ms");
    sluice_limiter_free(l);
    /* free() of a limiter not closed: "first closed with discard" at the
     * latest time seen — timers first, so a value whose deadline passed is
     * emitted at its deadline, not discarded (as when advance ran first) */
    l = mk(sluice_audit((int64_t)(100 * MS)), MS, 0);
    ev_reset();
    CHECK(sluice_limiter_submit(l, sluice_key_u64(1), 1, 0, NULL) == 0, "a (due at 100 ms)");
    CHECK(sluice_limiter_submit(l, sluice_key_u64(2), 2, 500 * MS, NULL) == 0, "b at 500 ms");
    sluice_limiter_free(l);
    CHECK(g_nev == 2, "two events at free");
    {
        const rec_t *a = g_ev[0].token == 1 ? &g_ev[0] : &g_ev[1];
        CORE_BUG(a->kind == SLUICE_EVENT_EMIT && a->at == 100 * MS,
                 "free() at the latest time 500 ms: a's deadline (100 ms) passed, so it must be emitted at 100 ms as "
                 "close(discard) at 500 ms does (and as it is when advance ran first); got kind %d at %" PRIu64
                 " — free() discards without running due timers",
                 a->kind, a->at);
    }
    printf("  close between ticks: checked (drain, discard); free of an unclosed limiter with an overdue value\n");
}

int main(void) {
    double t0 = now_s();
    printf("test_time:\n");
    test_jumps();
    test_top();
    test_backwards();
    test_duration_max();
    test_tick_lateness();
    test_bounded();
    test_close_between_ticks();
    free(g_ev);
    if (g_bugs) {
        fprintf(stderr, "test_time: FAILED: %d check(s) of documented behaviour fail in the core (CORE BUG above)\n",
                g_bugs);
        return 1;
    }
    printf("test_time: ok (%.2f s)\n", now_s() - t0);
    return 0;
}
