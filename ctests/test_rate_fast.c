/*
 * test_rate_fast.c — rate's 64-bit fast path gives exactly the results of
 * the exact 128-bit arithmetic (policy-rate.c, policy-rate.h).
 *
 * A rate decision is taken in 64-bit arithmetic relative to the call's time
 * when its bounds hold (burst * per < 2^61, t below the limiter's
 * rate_t_lim, a TAT at most burst * T ahead, cost <= burst), its divisions
 * replaced by multiplications by precomputed reciprocals; otherwise by the
 * exact routine, which is kept. What must hold:
 *
 *  1. the reciprocal division sluice__recip_div equals n / d for every
 *     divisor 1..2^63 and numerator below 2^62 (edges and random);
 *  2. sluice__rate_decide (fast path, else exact) equals
 *     sluice__rate_decide_exact in every field (kind, at, full, and for an
 *     admitted call remaining, the new deadline and remainder), and
 *     sluice__rate_quota equals sluice__rate_quota_exact, on millions of
 *     inputs: limits 1..10^12, periods 1 ns..10^18 ns, bursts 1..10^12,
 *     costs 1..10^12 (1, burst, burst + 1 and random), times near 0, near
 *     UINT64_MAX / 2, at the fast path's limit and near UINT64_MAX, key
 *     states without an entry, reachable ones (TAT up to burst * T ahead,
 *     and just past it) and arbitrary ones; most of them take the fast
 *     path (counted);
 *  3. whole runs through the public API (sluice_limiter_submit_cost,
 *     sluice_limiter_quota) on a few keys with idle gaps agree with a model
 *     that keeps each key's state by the exact routine alone.
 */
#define TEST_NAME "test_rate_fast"
#include "support/check.h"

#include <inttypes.h>
#include <string.h>

#include "limiter-internal.h"
#include "policy-rate.h"
#include "sluice.h"

__extension__ typedef unsigned __int128 u128;

static uint64_t rng_state = 0x9E3779B97F4A7C15u;

static uint64_t rnd(void) { /* splitmix64 */
    uint64_t z = (rng_state += 0x9E3779B97F4A7C15u);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9u;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBu;
    return z ^ (z >> 31);
}

/* Uniform in [lo, hi] (hi - lo < 2^64 - 1). */
static uint64_t in(uint64_t lo, uint64_t hi) { return hi - lo == UINT64_MAX ? rnd() : lo + rnd() % (hi - lo + 1); }

/* Log-uniform in [1, max]. */
static uint64_t logu(uint64_t max) {
    unsigned bits = 1 + (unsigned)(rnd() % 64);
    uint64_t v = bits == 64 ? rnd() : rnd() & ((UINT64_C(1) << bits) - 1);
    v = max == UINT64_MAX ? v : v % max;
    return v + 1 > max ? max : v + 1;
}

static const int SANI = SANITIZED;

/* ---- 1. reciprocals ---- */

static void check_recip(uint64_t d, uint64_t n) {
    struct sluice__recip v = sluice__recip_of(d);
    uint64_t got = sluice__recip_div(v, n), want = n / d;
    CHECK(got == want, "recip: %" PRIu64 " / %" PRIu64 " = %" PRIu64 ", got %" PRIu64, n, d, want, got);
}

static void test_recip(void) {
    const uint64_t top = (UINT64_C(1) << 62) - 1;
    uint64_t ds[64 * 3 + 16];
    size_t nd = 0;
    for (unsigned b = 0; b < 64; b++) {
        uint64_t p = UINT64_C(1) << b;
        ds[nd++] = p;
        if (p > 1) ds[nd++] = p - 1;
        if (b < 63) ds[nd++] = p + 1;
    }
    const uint64_t extra[] = { 3,
                               5,
                               7,
                               10,
                               100,
                               1000,
                               1000000,
                               1000000000,
                               UINT64_C(1000000000000),
                               UINT64_C(1000000000000000000),
                               999999999989u,
                               3000000000u };
    for (size_t i = 0; i < sizeof extra / sizeof extra[0]; i++) ds[nd++] = extra[i];
    for (size_t i = 0; i < nd; i++) {
        uint64_t d = ds[i];
        if (d > (UINT64_C(1) << 63)) continue;
        check_recip(d, 0);
        check_recip(d, top);
        check_recip(d, top - 1);
        for (uint64_t k = 1; k < 4; k++) {
            if (d <= top / k) {
                check_recip(d, k * d);
                check_recip(d, k * d - 1);
                if (k * d + 1 <= top) check_recip(d, k * d + 1);
            }
        }
        uint64_t q = top / d; /* the largest multiples below the bound */
        if (q) {
            check_recip(d, q * d);
            check_recip(d, q * d - 1);
        }
        for (int j = 0; j < 2000; j++) check_recip(d, rnd() & top);
    }
    long n = SANI ? 200000 : 2000000;
    for (long i = 0; i < n; i++) {
        uint64_t d = logu(UINT64_C(1) << 63);
        uint64_t nn = (i & 1) ? rnd() & top : in(0, top / d) * d - (rnd() & 1);
        if (nn > top) nn = top;
        check_recip(d, nn);
    }
}

/* ---- 2. decisions and quotas ---- */

static sluice_limiter_t *rate_limiter(uint64_t limit, uint64_t per, uint64_t burst) {
    sluice_config_t c;
    memset(&c, 0, sizeof c);
    c.policy = sluice_rate(limit, (int64_t)per, burst);
    c.fixed_seed = true;
    sluice_limiter_t *l = NULL;
    int rc = sluice_limiter_new(&l, &c);
    CHECK(rc == 0, "limiter rate(%" PRIu64 ", %" PRIu64 ", %" PRIu64 "): %d", limit, per, burst, rc);
    return l;
}

static uint64_t pick_limit(void) {
    static const uint64_t v[] = { 1, 2, 3, 7, 10, 100, 1000, 999983, 1000000, 1000000000, UINT64_C(1000000000000) };
    return rnd() % 3 ? v[rnd() % (sizeof v / sizeof v[0])] : logu(SLUICE_RATE_MAX);
}

static uint64_t pick_per(void) {
    static const uint64_t v[] = { 1,
                                  2,
                                  3,
                                  1000,
                                  1000000,
                                  999999937,
                                  1000000000,
                                  60000000000u,
                                  UINT64_C(3600000000000),
                                  UINT64_C(1000000000000),
                                  UINT64_C(1000000000000000000) };
    return rnd() % 3 ? v[rnd() % (sizeof v / sizeof v[0])] : logu(SLUICE_DURATION_MAX);
}

static uint64_t pick_burst(uint64_t limit) {
    switch (rnd() % 6) {
    case 0: return 0; /* = limit */
    case 1: return 1;
    case 2: return limit;
    case 3: return 2;
    default: return logu(SLUICE_RATE_MAX);
    }
}

static uint64_t pick_time(const struct sluice_limiter *l) {
    const uint64_t half = UINT64_MAX / 2;
    switch (rnd() % 10) {
    case 0: return in(0, 1000);
    case 1: return in(0, UINT64_C(1) << 40);
    case 2: return half - 1000 + in(0, 2000);
    case 3: return half + (rnd() % (2 * (l->rate.bt_q + 3) + 1)) - l->rate.bt_q;
    case 4: return l->rate.t_lim >= 3 ? l->rate.t_lim - 3 + in(0, 6) : in(0, 6);
    case 5: return UINT64_MAX - in(0, 4 * l->rate.bt_q + 10 < 1000 ? 1000 : 4 * l->rate.bt_q + 10);
    case 6: return rnd();
    default: return in(0, UINT64_C(1) << 62);
    }
}

/* A key's state at t: no entry, a reachable TAT (up to burst * T ahead, or
 * just past it), or an arbitrary one. */
static void pick_state(const struct sluice_limiter *l, uint64_t t, uint64_t *dl, uint64_t *tok) {
    uint64_t r = rnd() % 3 ? in(0, l->rate.limit - 1) : (rnd() & 1 ? 0 : l->rate.limit - 1);
    uint64_t q;
    switch (rnd() % 8) {
    case 0: *dl = *tok = 0; return;
    case 1: q = t > 0 ? t - in(1, t < 1000 ? t : 1000) : 0; break; /* idle in place */
    case 2: q = t + l->rate.bt_q + in(0, 2); break;                /* at the bound */
    case 3: q = rnd(); break;
    default: {
        /* reachable: TAT - t in [0, burst * T] */
        uint64_t bq = l->rate.bt_q ? l->rate.bt_q
                                   : (uint64_t)(((u128)l->rate.burst * l->rate.per) / l->rate.limit > UINT64_MAX
                                                    ? UINT64_MAX
                                                    : ((u128)l->rate.burst * l->rate.per) / l->rate.limit);
        q = t + in(0, bq);
    }
    }
    if (q < t && (rnd() & 1)) q = t; /* TAT == t: deadline t or t + 1 */
    if (q == UINT64_MAX) r = 0;
    *tok = r;
    *dl = q + (r != 0);
}

static uint64_t pick_cost(const struct sluice_limiter *l) {
    switch (rnd() % 8) {
    case 0: return l->rate.burst;
    case 1: return l->rate.burst < SLUICE_RATE_MAX ? l->rate.burst + 1 : l->rate.burst;
    case 2: return in(1, l->rate.burst);
    case 3: return logu(SLUICE_RATE_MAX);
    default: return 1;
    }
}

static long fast_taken, inputs, fast_configs, configs;

static void compare(const struct sluice_limiter *l, uint64_t dl, uint64_t tok, uint64_t cost, uint64_t t) {
    struct sluice__rate_res a, b;
    memset(&a, 0xA5, sizeof a);
    memset(&b, 0xA5, sizeof b);
    sluice__rate_decide(&l->rate, dl, tok, cost, t, &a);
    sluice__rate_decide_exact(&l->rate, dl, tok, cost, t, &b);
    inputs++;
    uint64_t xq = dl > t ? dl - (tok != 0) - t : 0;
    if (t < l->rate.t_lim && xq <= l->rate.bt_q && cost <= l->rate.burst) fast_taken++;
    bool same = a.kind == b.kind && a.at == b.at && a.full == b.full;
    if (same && b.kind == SLUICE_EMITTED)
        same = a.remaining == b.remaining && a.deadline == b.deadline && a.token == b.token;
    CHECK(same,
          "rate(%" PRIu64 ", %" PRIu64 ", %" PRIu64 ") state (deadline %" PRIu64 ", token %" PRIu64 ") cost %" PRIu64
          " at %" PRIu64 ": fast kind %d at %" PRIu64 " full %" PRIu64 " rem %" PRIu64 " dl %" PRIu64 " tok %" PRIu64
          "; exact kind %d at %" PRIu64 " full %" PRIu64 " rem %" PRIu64 " dl %" PRIu64 " tok %" PRIu64,
          l->rate.limit, l->rate.per, l->rate.burst, dl, tok, cost, t, a.kind, a.at, a.full, a.remaining, a.deadline,
          a.token, b.kind, b.at, b.full, b.remaining, b.deadline, b.token);
    sluice_quota_t qa, qb;
    memset(&qa, 0xA5, sizeof qa);
    memset(&qb, 0xA5, sizeof qb);
    sluice__rate_quota(&l->rate, dl, tok, cost, t, &qa);
    sluice__rate_quota_exact(&l->rate, dl, tok, cost, t, &qb);
    CHECK(qa.burst == qb.burst && qa.remaining == qb.remaining && qa.full == qb.full && qa.retry == qb.retry,
          "quota rate(%" PRIu64 ", %" PRIu64 ", %" PRIu64 ") state (%" PRIu64 ", %" PRIu64 ") cost %" PRIu64
          " at %" PRIu64 ": fast rem %" PRIu64 " full %" PRIu64 " retry %" PRIu64 "; exact rem %" PRIu64
          " full %" PRIu64 " retry %" PRIu64,
          l->rate.limit, l->rate.per, l->rate.burst, dl, tok, cost, t, qa.remaining, qa.full, qa.retry, qb.remaining,
          qb.full, qb.retry);
}

static void test_decisions(void) {
    long nconf = SANI ? 600 : 4000, per_conf = SANI ? 500 : 1000;
    /* burst * per on both sides of the fast path's bound (2^61), then random */
    static const uint64_t edge[][3] = {
        { 1, UINT64_C(768614336404564650), 3 },
        { 1, UINT64_C(768614336404564651), 3 },
        { 3, UINT64_C(768614336404564650), 3 },
        { 999999999989u, UINT64_C(768614336404564650), 3 },
        { 1, UINT64_C(1000000000000000000), 2 },
        { 1, UINT64_C(1000000000000000000), 3 },
        { 7, UINT64_C(576460752303423487), 4 },
        { 1000000, 2305843, UINT64_C(1000000000000) },
        { 1000000, 2305844, UINT64_C(1000000000000) },
        { 1, 1, 1 },
        { UINT64_C(1000000000000), 1, 1 },
        { UINT64_C(1000000000000), UINT64_C(1000000000000000000), UINT64_C(1000000000000) },
    };
    const long nedge = (long)(sizeof edge / sizeof edge[0]);
    for (long c = 0; c < nconf + nedge; c++) {
        uint64_t limit = c < nedge ? edge[c][0] : pick_limit(), per = c < nedge ? edge[c][1] : pick_per();
        uint64_t burst = c < nedge ? edge[c][2] : pick_burst(limit);
        sluice_limiter_t *l = rate_limiter(limit, per, burst);
        if (c < 2)
            CHECK((l->rate.t_lim != 0) == (c == 0), "fast path bound: burst * per = 2^61 - 2 allows it, 2^61 + 1 not");
        configs++;
        if (l->rate.t_lim) fast_configs++;
        for (long i = 0; i < (c < nedge ? 50 * per_conf : per_conf); i++) {
            uint64_t t = pick_time(l), dl, tok;
            pick_state(l, t, &dl, &tok);
            compare(l, dl, tok, pick_cost(l), t);
        }
        /* TATs a whole number of intervals (and a little) ahead of t: the
         * quotients' numerators at and around multiples of their divisors */
        for (uint64_t k = 0; k <= 4 && k <= l->rate.burst; k++) {
            u128 ahead = (u128)k * l->rate.per / l->rate.limit;
            if (ahead > (UINT64_C(1) << 62)) break;
            for (int delta = -2; delta <= 2; delta++) {
                if ((u128)(-delta) > ahead && delta < 0) continue;
                uint64_t t = rnd() % 2 ? in(0, 1000) : UINT64_MAX / 2 + in(0, 1000);
                uint64_t q = t + (uint64_t)ahead + (uint64_t)(int64_t)delta;
                for (int rr = 0; rr < 3; rr++) {
                    uint64_t r = rr == 0 ? 0 : rr == 1 ? l->rate.limit - 1 : in(0, l->rate.limit - 1);
                    for (uint64_t cost = 1; cost <= 3 && cost <= l->rate.burst + 1; cost++) {
                        compare(l, q + (r != 0), r, cost, t);
                        compare(l, q + (r != 0), r, l->rate.burst, t);
                    }
                }
            }
        }
        /* the edges of the bound on the TAT, at the fast path's time limit */
        if (l->rate.t_lim) {
            for (uint64_t dt = 0; dt < 6; dt++) {
                uint64_t t = l->rate.t_lim - 3 + dt;
                for (uint64_t off = 0; off < 4; off++) {
                    uint64_t q = t + l->rate.bt_q - 1 + off;
                    if (q < t) continue;
                    compare(l, q, 0, 1, t);
                    compare(l, q + 1, limit - 1, 1, t);
                    compare(l, q + 1, limit - 1, l->rate.burst, t);
                }
            }
        }
        sluice_limiter_free(l);
    }
    CHECK(fast_configs * 3 > configs, "only %ld of %ld configurations allow the fast path", fast_configs, configs);
    CHECK(fast_taken * 4 > inputs, "only %ld of %ld inputs took the fast path", fast_taken, inputs);
    printf("decisions: %ld inputs (each also as a quota), %ld in the fast path's bounds; %ld of %ld configurations "
           "allow it\n",
           inputs, fast_taken, fast_configs, configs);
}

/* ---- 3. runs through the API against the exact model ---- */

#define KEYS 8

static void test_runs(void) {
    long runs = SANI ? 150 : 1500, calls = 600, ncalls = 0;
    for (long run = 0; run < runs; run++) {
        uint64_t limit = pick_limit(), per = pick_per();
        if (rnd() % 2) { /* mostly the everyday shapes */
            limit = in(1, 1000);
            per = rnd() % 2 ? 1000000000 : in(1, UINT64_C(100000000000));
        }
        sluice_limiter_t *l = rate_limiter(limit, per, pick_burst(limit));
        uint64_t mdl[KEYS] = { 0 }, mtok[KEYS] = { 0 };
        uint64_t t = rnd() % 4 == 0 ? UINT64_MAX / 2 : in(0, 1000000);
        uint64_t T = l->rate.t_q ? l->rate.t_q : 1;
        for (long i = 0; i < calls; i++) {
            switch (rnd() % 8) { /* time steps: none, a fraction of T, about T, idle gaps */
            case 0: break;
            case 1:
            case 2:
            case 3: t = sluice__sat_add(t, in(0, T / 4 + 1)); break;
            case 4:
            case 5: t = sluice__sat_add(t, in(0, 2 * T)); break;
            case 6:
                t = sluice__sat_add(t,
                                    in(0, l->rate_every < (UINT64_C(1) << 50) ? 2 * l->rate_every : UINT64_C(1) << 50));
                break;
            default:
                if (rnd() % 16 == 0) t = sluice__sat_add(t, rnd() % (UINT64_C(1) << 62));
                break;
            }
            unsigned k = (unsigned)(rnd() % KEYS);
            uint64_t cost = rnd() % 4 ? 1 : pick_cost(l);
            struct sluice__rate_res want;
            if (rnd() % 5 == 0) {
                sluice_quota_t got, exp;
                int rc = sluice_limiter_quota(l, sluice_key_u64(k), cost, t, &got);
                CHECK(rc == 0, "quota: %d", rc);
                sluice__rate_quota_exact(&l->rate, mdl[k], mtok[k], cost, t, &exp);
                CHECK(got.remaining == exp.remaining && got.full == exp.full && got.retry == exp.retry &&
                          got.burst == exp.burst,
                      "run %ld call %ld: quota key %u at %" PRIu64 ": got rem %" PRIu64 " full %" PRIu64
                      " retry %" PRIu64 ", exact rem %" PRIu64 " full %" PRIu64 " retry %" PRIu64,
                      run, i, k, t, got.remaining, got.full, got.retry, exp.remaining, exp.full, exp.retry);
                continue;
            }
            sluice_decision_t d;
            int rc = sluice_limiter_submit_cost(l, sluice_key_u64(k), (uint64_t)i, cost, t, &d);
            CHECK(rc == 0, "submit: %d", rc);
            sluice__rate_decide_exact(&l->rate, mdl[k], mtok[k], cost, t, &want);
            uint64_t want_rem = want.kind == SLUICE_EMITTED ? want.remaining : 0;
            CHECK((int)d.kind == want.kind && d.at == want.at && d.full == want.full && d.remaining == want_rem,
                  "run %ld call %ld rate(%" PRIu64 ", %" PRIu64 ", %" PRIu64 ") key %u cost %" PRIu64 " at %" PRIu64
                  ": got kind %d at %" PRIu64 " rem %" PRIu64 " full %" PRIu64 ", exact kind %d at %" PRIu64
                  " rem %" PRIu64 " full %" PRIu64,
                  run, i, l->rate.limit, l->rate.per, l->rate.burst, k, cost, t, (int)d.kind, d.at, d.remaining, d.full,
                  want.kind, want.at, want_rem, want.full);
            if (want.kind == SLUICE_EMITTED) {
                mdl[k] = want.deadline;
                mtok[k] = want.token;
            }
            ncalls++;
        }
        CHECK(sluice_limiter_check(l) == 0, "limiter check after run %ld", run);
        sluice_limiter_free(l);
    }
    printf("runs: %ld calls through the API agree with the exact model\n", ncalls);
}

int main(void) {
    test_recip();
    test_decisions();
    test_runs();
    printf("test_rate_fast: ok\n");
    return 0;
}
