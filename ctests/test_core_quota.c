/*
 * test_core_quota.c — rate quotas in the core: weighted calls
 * (sluice_limiter_submit_cost), quota peeks (sluice_limiter_quota), the
 * `remaining` and `full` of a decision, and their rounding.
 *
 * Checked against the rules of docs/semantics.md ("Weighted calls",
 * "Quota of a key") on a manual clock:
 *  - a quota read exactly at `full` shows the whole burst, and a burst-sized
 *    call is admitted there (one nanosecond earlier it is not);
 *  - a cost equal to the burst is admitted on a fresh key; one above it is
 *    dropped with SLUICE_NEVER, creates no key and changes nothing;
 *  - with a fractional emission interval T (per not a multiple of limit)
 *    every reported retry time is exact to the nanosecond and never early:
 *    a call at retry - 1 ns is dropped and a call at retry is admitted;
 *    `remaining` is a floor and `full` a ceiling;
 *  - a peek creates no key, arms no timer and moves no clock;
 *  - huge numbers (costs and bursts of 10^12, periods of 10^18 ns) never
 *    overflow; a call that would end past the end of the clock is "never";
 *  - argument errors (cost 0, above SLUICE_RATE_MAX, cost on another policy,
 *    quota on another policy, closed limiter);
 *  - a decision's and a quota's `now`: the time given, or the later time the
 *    limiter had seen, on every path (new key, live key, integer fast path,
 *    emit_only).
 */
#define TEST_NAME "test_core_quota"
#include "support/check.h"

#include <inttypes.h>
#include <string.h>

#include "sluice.h"

#define MS UINT64_C(1000000)

static uint64_t g_events;

static void on_event(void *user, const sluice_event_t *e) {
    (void)user;
    (void)e;
    g_events++;
}

static sluice_limiter_t *make(sluice_policy_t p, uint64_t start) {
    sluice_config_t c;
    memset(&c, 0, sizeof c);
    c.policy = p;
    c.tick_ns = 1;
    c.start_ns = start;
    c.on_event = on_event;
    sluice_limiter_t *l = NULL;
    int rc = sluice_limiter_new(&l, &c);
    CHECK(rc == 0, "sluice_limiter_new: %s", sluice_strerror(rc));
    return l;
}

static sluice_decision_t call(sluice_limiter_t *l, const char *key, uint64_t cost, uint64_t t) {
    sluice_decision_t d;
    memset(&d, 0xAB, sizeof d);
    int rc = sluice_limiter_submit_cost(l, sluice_key_bytes(key, strlen(key)), 7, cost, t, &d);
    CHECK(rc == 0, "submit_cost(%s, cost %" PRIu64 ", t %" PRIu64 "): %s", key, cost, t, sluice_strerror(rc));
    CHECK(sluice_limiter_check(l) == 0, "check after a call");
    return d;
}

static sluice_quota_t quota(sluice_limiter_t *l, const char *key, uint64_t cost, uint64_t t) {
    sluice_quota_t q;
    memset(&q, 0xAB, sizeof q);
    int rc = sluice_limiter_quota(l, sluice_key_bytes(key, strlen(key)), cost, t, &q);
    CHECK(rc == 0, "quota(%s, cost %" PRIu64 "): %s", key, cost, sluice_strerror(rc));
    return q;
}

static uint64_t live(sluice_limiter_t *l) {
    sluice_stats_t st;
    CHECK(sluice_limiter_stats(l, &st) == 0, "stats");
    return st.live_keys;
}

static uint64_t now_u64(sluice_limiter_t *l, uint64_t key, uint64_t t) {
    sluice_decision_t d;
    memset(&d, 0xAB, sizeof d);
    CHECK(sluice_limiter_submit_u64(l, key, 1, t, &d) == 0, "submit_u64");
    return d.now;
}

/* Retry-After is `at - now` with no second clock read: every path writes the
 * decision's time, clamped as the limiter clamps it. */
static void test_decision_time(void) {
    sluice_limiter_t *l = make(sluice_rate(10, 1000, 5), 1000);
    CHECK(call(l, "a", 1, 5000).now == 5000, "rate, new key: the time given");
    CHECK(call(l, "a", 1, 3000).now == 5000, "rate, live key, earlier time: the time seen");
    CHECK(now_u64(l, 9, 6000) == 6000 && now_u64(l, 9, 6100) == 6100, "rate, integer key (new, then live)");
    CHECK(quota(l, "a", 1, 2000).now == 6100 && quota(l, "a", 1, 7000).now == 7000, "quota: clamped, then given");
    sluice_limiter_free(l);

    for (int emit_only = 0; emit_only < 2; emit_only++) {
        sluice_config_t c;
        memset(&c, 0, sizeof c);
        c.policy = sluice_throttle(100, true, true, SLUICE_PICK_LATEST);
        c.tick_ns = 1;
        c.emit_only = emit_only;
        c.on_event = on_event;
        CHECK(sluice_limiter_new(&l, &c) == 0, "throttle limiter");
        CHECK(now_u64(l, 1, 100) == 100, "throttle, new key (emit_only %d)", emit_only);
        CHECK(now_u64(l, 1, 150) == 150, "throttle, live key: the short path (emit_only %d)", emit_only);
        CHECK(now_u64(l, 1, 120) == 150, "throttle, an earlier time: the time seen (emit_only %d)", emit_only);
        sluice_decision_t d;
        memset(&d, 0xAB, sizeof d);
        CHECK(sluice_limiter_submit(l, sluice_key_bytes("k", 1), 2, 170, &d) == 0 && d.now == 170, "byte key");
        sluice_limiter_free(l);
    }
}

/* limit 10 per 100 ms, burst 3: T = 10 ms, the vector rate-quota-never. */
static void test_at_full(void) {
    sluice_limiter_t *l = make(sluice_rate(10, (int64_t)(100 * MS), 3), 0);
    sluice_quota_t q = quota(l, "K", 4, 5 * MS);
    CHECK(q.burst == 3 && q.remaining == 3 && q.full == 5 * MS && q.retry == SLUICE_NEVER, "fresh key, cost 4");
    CHECK(live(l) == 0 && sluice_limiter_next_deadline(l) == UINT64_MAX, "a peek creates no key, arms no timer");

    sluice_decision_t d = call(l, "K", 3, 5 * MS);
    CHECK(d.kind == SLUICE_EMITTED && d.at == 5 * MS, "cost == burst on a fresh key is admitted");
    CHECK(d.remaining == 0 && d.full == 35 * MS, "remaining %" PRIu64 " full %" PRIu64, d.remaining, d.full);
    q = quota(l, "K", 1, 5 * MS);
    CHECK(q.remaining == 0 && q.full == 35 * MS && q.retry == 15 * MS, "after the burst: retry %" PRIu64, q.retry);

    /* one ns before full: two cost-1 calls fit, not three; a cost-3 call waits until full */
    q = quota(l, "K", 3, 35 * MS - 1);
    CHECK(q.remaining == 2 && q.full == 35 * MS && q.retry == 35 * MS,
          "at full - 1: remaining %" PRIu64 " retry %" PRIu64, q.remaining, q.retry);
    d = call(l, "K", 3, 35 * MS - 1);
    CHECK(d.kind == SLUICE_DROPPED && d.at == 35 * MS && d.full == 35 * MS && d.remaining == 0,
          "cost 3 at full - 1 ns: dropped, retry at full");
    CHECK(live(l) == 1, "a dropped call changed nothing");

    /* exactly at full: the whole burst, and the key holds no memory */
    q = quota(l, "K", 3, 35 * MS);
    CHECK(q.remaining == 3 && q.full == 35 * MS && q.retry == 35 * MS, "at full: remaining %" PRIu64 " full %" PRIu64,
          q.remaining, q.full);
    CHECK(sluice_limiter_advance(l, 35 * MS, 0) == 1 && live(l) == 0, "the key's memory is released at full");
    d = call(l, "K", 3, 35 * MS);
    CHECK(d.kind == SLUICE_EMITTED && d.remaining == 0 && d.full == 65 * MS, "a burst-sized call at full");
    sluice_limiter_free(l);
}

static void test_above_burst(void) {
    sluice_limiter_t *l = make(sluice_rate(4, 1000, 4), 100);
    sluice_decision_t d = call(l, "a", 5, 100);
    CHECK(d.kind == SLUICE_DROPPED && d.at == SLUICE_NEVER && d.full == 100 && d.remaining == 0,
          "cost above the burst on a fresh key: never");
    CHECK(live(l) == 0, "no key was created");
    d = call(l, "a", 4, 100);
    CHECK(d.kind == SLUICE_EMITTED && d.remaining == 0 && d.full == 1100, "cost == burst: full %" PRIu64, d.full);
    d = call(l, "a", SLUICE_RATE_MAX, 100);
    CHECK(d.kind == SLUICE_DROPPED && d.at == SLUICE_NEVER && d.full == 1100, "cost 10^12 on a live key");
    d = call(l, "a", 1, 100);
    CHECK(d.kind == SLUICE_DROPPED && d.at == 350 && d.full == 1100, "cost 1: retry at tat + T - burst*T = %" PRIu64,
          d.at);
    /* the plain call on rate fills remaining and full too */
    sluice_decision_t p;
    CHECK(sluice_limiter_submit(l, sluice_key_u64(9), 1, 100, &p) == 0 && p.kind == SLUICE_EMITTED &&
              p.remaining == 3 && p.full == 350,
          "plain submit on rate: remaining %" PRIu64 " full %" PRIu64, p.remaining, p.full);
    sluice_limiter_free(l);
}

/* Deterministic 64-bit generator. */
static uint64_t rng(uint64_t *s) {
    uint64_t z = (*s += UINT64_C(0x9e3779b97f4a7c15));
    z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
    z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
    return z ^ (z >> 31);
}

/* limit 3 per 10 ns: T = 10/3 ns. Then random fractional policies: every
 * retry time is the exact first nanosecond of admission. */
static void test_fractional(void) {
    sluice_limiter_t *l = make(sluice_rate(3, 10, 2), 1000);
    sluice_decision_t d = call(l, "f", 2, 1000);
    /* TAT = 1000 + 20/3 = 1006.67: full rounds up, remaining is floor(0) */
    CHECK(d.kind == SLUICE_EMITTED && d.full == 1007 && d.remaining == 0, "full %" PRIu64, d.full);
    d = call(l, "f", 1, 1000);
    /* admitted from tat + T - 2T = 1003.33 on: 1004 */
    CHECK(d.kind == SLUICE_DROPPED && d.at == 1004, "retry %" PRIu64, d.at);
    CHECK(call(l, "f", 1, 1003).kind == SLUICE_DROPPED, "at 1003 (before 1003.33): dropped");
    d = call(l, "f", 1, 1004);
    CHECK(d.kind == SLUICE_EMITTED && d.full == 1010 && d.remaining == 0, "at 1004: admitted, TAT 1010");
    sluice_quota_t q = quota(l, "f", 1, 1005);
    /* floor((1005 + 20/3 - 1010) / (10/3)) = floor(1.67 / 3.33) = 0; retry ceil(1010 - 10/3) = 1007 */
    CHECK(q.remaining == 0 && q.full == 1010 && q.retry == 1007, "peek: remaining %" PRIu64 " retry %" PRIu64,
          q.remaining, q.retry);
    sluice_limiter_free(l);

    uint64_t seed = 42;
    for (int trial = 0; trial < 3000; trial++) {
        uint64_t limit = 2 + rng(&seed) % 997, per = 1 + rng(&seed) % 100000;
        if (per % limit == 0) per++; /* keep T fractional */
        uint64_t burst = 1 + rng(&seed) % 20;
        uint64_t t = rng(&seed) % 1000000;
        l = make(sluice_rate(limit, (int64_t)per, burst), t);
        for (int step = 0; step < 20; step++) {
            t += rng(&seed) % (2 * per / limit + 2);
            uint64_t cost = 1 + rng(&seed) % burst;
            sluice_quota_t before = quota(l, "x", cost, t);
            d = call(l, "x", cost, t);
            if (d.kind == SLUICE_EMITTED) {
                CHECK(before.retry == t, "admitted, but the peek said retry %" PRIu64 " > %" PRIu64, before.retry, t);
                CHECK(d.remaining <= burst - cost && d.full > t, "remaining %" PRIu64 " full %" PRIu64, d.remaining,
                      d.full);
                continue;
            }
            CHECK(d.kind == SLUICE_DROPPED && d.at > t && d.at == before.retry,
                  "dropped at %" PRIu64 ": retry %" PRIu64 ", peek %" PRIu64, t, d.at, before.retry);
            /* never early: one ns before the retry time the same call is dropped */
            sluice_decision_t early = call(l, "x", cost, d.at - 1);
            CHECK(early.kind == SLUICE_DROPPED && early.at == d.at,
                  "limit %" PRIu64 " per %" PRIu64 " burst %" PRIu64 " cost %" PRIu64
                  ": admitted at retry - 1 = %" PRIu64,
                  limit, per, burst, cost, d.at - 1);
            /* exact: at the retry time it is admitted */
            t = d.at;
            sluice_decision_t ok = call(l, "x", cost, t);
            CHECK(ok.kind == SLUICE_EMITTED,
                  "limit %" PRIu64 " per %" PRIu64 " burst %" PRIu64 " cost %" PRIu64
                  ": dropped at its retry time %" PRIu64,
                  limit, per, burst, cost, t);
        }
        sluice_limiter_free(l);
    }
}

static void test_huge(void) {
    /* one call per 10^18 ns with a burst of 10^12: the burst spans ~10^30 ns,
     * far past the end of the clock */
    sluice_limiter_t *l = make(sluice_rate(1, (int64_t)SLUICE_DURATION_MAX, SLUICE_RATE_MAX), 5);
    sluice_quota_t q = quota(l, "h", SLUICE_RATE_MAX, 5);
    CHECK(q.retry == SLUICE_NEVER, "a burst that ends past the end of the clock never fits");
    CHECK(q.remaining == (UINT64_MAX - 5) / (uint64_t)SLUICE_DURATION_MAX,
          "remaining counts what fits before the end: %" PRIu64, q.remaining);
    sluice_decision_t d = call(l, "h", SLUICE_RATE_MAX, 5);
    CHECK(d.kind == SLUICE_DROPPED && d.at == SLUICE_NEVER && live(l) == 0, "dropped, never, no key");
    d = call(l, "h", 18, 5);
    CHECK(d.kind == SLUICE_EMITTED && d.full == 5 + 18 * (uint64_t)SLUICE_DURATION_MAX && d.remaining == 0,
          "18 periods fit: full %" PRIu64 " remaining %" PRIu64, d.full, d.remaining);
    d = call(l, "h", 1, 5);
    CHECK(d.kind == SLUICE_DROPPED && d.at == SLUICE_NEVER, "the 19th would end past the end of the clock");
    sluice_limiter_free(l);

    /* limit and burst 10^12 per 10^18 ns: T = 10^6 ns, scaled values near 2^100 */
    l = make(sluice_rate(SLUICE_RATE_MAX, (int64_t)SLUICE_DURATION_MAX, 0), UINT64_C(1) << 62);
    uint64_t t = UINT64_C(1) << 62;
    d = call(l, "g", SLUICE_RATE_MAX, t);
    CHECK(d.kind == SLUICE_EMITTED && d.full == t + (uint64_t)SLUICE_DURATION_MAX && d.remaining == 0, "whole burst");
    d = call(l, "g", 3, t + 1);
    CHECK(d.kind == SLUICE_DROPPED && d.at == t + 3000000, "retry after three T: %" PRIu64, d.at);
    q = quota(l, "g", 1, t + 2500000);
    CHECK(q.remaining == 2 && q.retry == t + 2500000 && q.full == t + (uint64_t)SLUICE_DURATION_MAX,
          "peek after 2.5 T");
    sluice_limiter_free(l);

    /* near the end of the clock */
    l = make(sluice_rate(7, 1000, 5), UINT64_MAX - 2000);
    d = call(l, "e", 5, UINT64_MAX - 2000);
    CHECK(d.kind == SLUICE_EMITTED && d.full == UINT64_MAX - 2000 + 715, "5 * 1000/7 = 714.3 ns, rounded up");
    /* fresh again, but 10 ns before the end of the clock no call of T = 142.9 ns fits */
    q = quota(l, "e", 1, UINT64_MAX - 10);
    CHECK(q.remaining == 0 && q.full == UINT64_MAX - 10 && q.retry == SLUICE_NEVER, "fresh again near the end");
    d = call(l, "e", 1, UINT64_MAX - 10);
    CHECK(d.kind == SLUICE_DROPPED && d.at == SLUICE_NEVER, "a call that would end past the end of the clock");
    sluice_limiter_free(l);
}

static void test_errors(void) {
    sluice_limiter_t *l = make(sluice_rate(2, 1000, 0), 0);
    sluice_decision_t d;
    sluice_quota_t q;
    sluice_key_t k = sluice_key_u64(1);
    CHECK(sluice_limiter_submit_cost(l, k, 1, 0, 0, &d) == SLUICE_ERANGE, "cost 0");
    CHECK(sluice_limiter_submit_cost(l, k, 1, SLUICE_RATE_MAX + 1, 0, &d) == SLUICE_ERANGE, "cost above the max");
    CHECK(sluice_limiter_quota(l, k, 0, 0, &q) == SLUICE_ERANGE, "quota cost 0");
    CHECK(sluice_limiter_quota(l, k, SLUICE_RATE_MAX + 1, 0, &q) == SLUICE_ERANGE, "quota cost above the max");
    CHECK(sluice_limiter_quota(l, k, 1, 0, NULL) == SLUICE_EINVAL, "quota NULL out");
    CHECK(sluice_limiter_quota(NULL, k, 1, 0, &q) == SLUICE_EINVAL, "quota NULL limiter");
    unsigned char big[SLUICE_KEY_MAX + 1] = { 0 };
    CHECK(sluice_limiter_quota(l, sluice_key_bytes(big, sizeof big), 1, 0, &q) == SLUICE_EKEYLEN, "quota long key");
    CHECK(live(l) == 0, "nothing created");
    CHECK(sluice_limiter_close(l, 0, SLUICE_CLOSE_DRAIN) == 0, "close");
    CHECK(sluice_limiter_quota(l, k, 1, 0, &q) == SLUICE_ECLOSED, "quota after close");
    CHECK(sluice_limiter_submit_cost(l, k, 1, 2, 0, &d) == SLUICE_ECLOSED, "submit_cost after close");
    sluice_limiter_free(l);

    l = make(sluice_throttle(100, true, true, SLUICE_PICK_LATEST), 0);
    CHECK(sluice_limiter_submit_cost(l, k, 1, 2, 0, &d) == SLUICE_EINVAL, "cost 2 on a throttle");
    CHECK(sluice_limiter_submit_cost(l, k, 1, 0, 0, &d) == SLUICE_ERANGE, "cost 0 on a throttle");
    CHECK(sluice_limiter_quota(l, k, 1, 0, &q) == SLUICE_EINVAL, "quota on a throttle");
    CHECK(sluice_limiter_submit_cost(l, k, 1, 1, 0, &d) == 0 && d.kind == SLUICE_EMITTED && d.remaining == 0 &&
              d.full == 0,
          "cost 1 on a throttle: a plain call, remaining and full 0");
    sluice_limiter_free(l);
}

int main(void) {
    test_at_full();
    test_above_burst();
    test_fractional();
    test_huge();
    test_errors();
    test_decision_time();
    printf("test_core_quota: ok\n");
    return 0;
}
