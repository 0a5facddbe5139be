/*
 * test_core_plans.c — several quotas per key and plans in the core
 * (sluice_plans.h), on a manual clock, against the rules of
 * docs/semantics.md ("Several quotas on one key", "Plans") worked out by
 * hand in the comments:
 *  - all or nothing: a call refused by one quota charges none; the drop's
 *    retry is the latest quota's, `never` when a cost exceeds one burst;
 *  - a key changing plan keeps its consumption by quota name (upgrade,
 *    downgrade to remaining 0); a dropped call and a quota read under
 *    another plan convert without storing; an idle key forgets its plan;
 *  - fractional periods convert exactly, never early;
 *  - set_plans at run time: numbers changed, a quota added and removed, a
 *    plan added; keys converted at their next call; all or nothing on a bad
 *    table (the limiter stays usable and unchanged);
 *  - errors name the field: duplicate names, 0 or 9 quotas, unknown plan;
 *  - every allocation failure leaves the limiter as it was; nothing leaks;
 *  - a limiter without plans answers as plan 0 of one quota named "default".
 */
#define TEST_NAME "test_core_plans"
#include "support/check.h"

#include <inttypes.h>
#include <string.h>

#include "sluice.h"

#define MS UINT64_C(1000000)
#define S (1000 * MS)

/* ---- an allocator that counts and can fail ---- */

static long g_live, g_allocs, g_fail_at = -1;

static void *a_alloc(void *ctx, size_t n) {
    (void)ctx;
    if (g_fail_at >= 0 && g_allocs++ == g_fail_at) return NULL;
    void *p = malloc(n);
    if (p) g_live++;
    return p;
}

static void a_release(void *ctx, void *p, size_t n) {
    (void)ctx;
    (void)n;
    if (p) g_live--;
    free(p);
}

static const sluice_allocator_t counting = { a_alloc, a_release, NULL };

static int make(sluice_limiter_t **l, const sluice_plans_t *plans) {
    sluice_config_t c;
    memset(&c, 0, sizeof c);
    c.policy = sluice_rate_plans();
    c.plans = plans;
    c.tick_ns = 1;
    c.allocator = &counting;
    return sluice_limiter_new(l, &c);
}

static sluice_key_t key(const char *k) { return sluice_key_bytes(k, strlen(k)); }

static sluice_decision_t call(sluice_limiter_t *l, const char *k, uint64_t cost, uint32_t plan, uint64_t t,
                              sluice_plan_detail_t *det) {
    sluice_decision_t d;
    memset(&d, 0xAB, sizeof d);
    int rc = sluice_limiter_submit_plan(l, key(k), 1, cost, plan, t, &d, det);
    CHECK(rc == 0, "submit_plan(%s, plan %u): %s", k, plan, sluice_strerror(rc));
    CHECK(sluice_limiter_check(l) == 0, "invariants after a call");
    return d;
}

static sluice_quota_t peek(sluice_limiter_t *l, const char *k, uint64_t cost, uint32_t plan, uint64_t t,
                           sluice_plan_detail_t *det) {
    sluice_quota_t q;
    int rc = sluice_limiter_quota_plan(l, key(k), cost, plan, t, &q, det);
    CHECK(rc == 0, "quota_plan: %s", sluice_strerror(rc));
    return q;
}

static uint64_t live_keys(sluice_limiter_t *l) {
    sluice_stats_t st;
    CHECK(sluice_limiter_stats(l, &st) == 0, "stats");
    return st.live_keys;
}

/* ---- several quotas, one plan ---- */

static void several_quotas(void) {
    /* second: 5 per 1000 ms (T 200, burst 5); minute: 20 per 60000 ms,
     * burst 8 (T 3000) */
    sluice_rate_quota_t q[] = { { "second", 5, 1000 * MS, 0 }, { "minute", 20, 60000 * MS, 8 } };
    sluice_plan_t p[] = { { "default", q, 2 } };
    sluice_plans_t t = { p, 1, 0 };
    sluice_limiter_t *l;
    CHECK(make(&l, &t) == 0, "new");
    sluice_plan_detail_t det;
    /* a1 cost 4 at 0: second TAT 800 (<= 1000), minute TAT 12000 (<= 24000) */
    sluice_decision_t d = call(l, "A", 4, 0, 0, &det);
    CHECK(d.kind == SLUICE_EMITTED && d.full == 12000 * MS, "a1 admitted, full at the minute's TAT");
    CHECK(det.nquotas == 2 && det.refused == 0, "a1 detail");
    CHECK(det.quotas[0].remaining == 1 && det.quotas[0].full == 800 * MS, "second after a1: 1 left, full 800");
    CHECK(det.quotas[1].remaining == 4 && det.quotas[1].full == 12000 * MS, "minute after a1: 4 left");
    CHECK(d.remaining == 1, "overall remaining is the least");
    /* a2 cost 2 at 0: second new = 1200 > 1000: refused; minute would admit.
     * Nothing charged: the minute stays at 12000. */
    d = call(l, "A", 2, 0, 0, &det);
    CHECK(d.kind == SLUICE_DROPPED && d.at == 200 * MS, "a2 dropped, retry when the second admits (1200 - 1000)");
    CHECK(det.refused == 1u, "only the second refused a2");
    CHECK(det.quotas[1].retry == 0 && det.quotas[1].remaining == 4, "the minute would have admitted a2");
    sluice_quota_t qq = peek(l, "A", 1, 0, 0, &det);
    CHECK(qq.remaining == 1 && qq.full == 12000 * MS && qq.retry == 0, "overall quota after the refusal");
    CHECK(det.quotas[1].full == 12000 * MS, "the refused call charged the minute nothing");
    /* a3 cost 2 at 400: second tat 800, new 1200 - 400 = 800 <= 1000; minute
     * 12000 + 6000 = 18000 - 400 <= 24000: admitted */
    d = call(l, "A", 2, 0, 400 * MS, &det);
    CHECK(d.kind == SLUICE_EMITTED && d.full == 18000 * MS && d.remaining == 1, "a3");
    /* quota cost 3 at 400: second retry = 1200 + 600 - 1000 = 800; minute
     * 18000 + 9000 - 24000 = 3000: the overall retry is 3000 */
    qq = peek(l, "A", 3, 0, 400 * MS, &det);
    CHECK(qq.retry == 3000 * MS && det.refused == 3u, "overall retry is the latest quota's");
    CHECK(det.quotas[0].retry == 800 * MS && det.quotas[1].retry == 3000 * MS, "each quota's retry");
    /* a cost above one quota's burst (6 > 5) is never admitted */
    d = call(l, "B", 6, 0, 0, &det);
    CHECK(d.kind == SLUICE_DROPPED && d.at == SLUICE_NEVER && det.refused == 1u, "cost 6 never passes the second");
    CHECK(live_keys(l) == 1, "the refused new key holds nothing");
    sluice_limiter_free(l);
}

/* ---- plans and conversion ---- */

static void plans_convert(void) {
    /* free: second 1/1000 burst 3 (T 1000); pro: second 10/1000 burst 30
     * (T 100), day 10000/86400000 (T 8640) */
    sluice_rate_quota_t fq[] = { { "second", 1, 1000 * MS, 3 } };
    sluice_rate_quota_t pq[] = { { "second", 10, 1000 * MS, 30 }, { "day", 10000, 86400000 * MS, 0 } };
    sluice_plan_t p[] = { { "free", fq, 1 }, { "pro", pq, 2 } };
    sluice_plans_t t = { p, 2, 0 };
    sluice_limiter_t *l;
    CHECK(make(&l, &t) == 0, "new");
    uint32_t free_i, pro_i;
    CHECK(sluice_limiter_plan_index(l, "pro", 3, &pro_i) == 0 && pro_i == 1, "pro is plan 1");
    CHECK(sluice_limiter_plan_index(l, "free", 4, &free_i) == 0 && free_i == 0, "free is plan 0");
    CHECK(sluice_limiter_plan_index(l, "gold", 4, &pro_i) == SLUICE_ENOPLAN, "no plan gold");
    sluice_plan_detail_t det;
    for (int i = 0; i < 3; i++) CHECK(call(l, "A", 1, free_i, 0, NULL).kind == SLUICE_EMITTED, "free call %d", i);
    CHECK(call(l, "A", 1, free_i, 0, NULL).kind == SLUICE_DROPPED, "the fourth free call");
    /* upgrade: second TAT 3000 -> 0 + 3000 * 100 / 1000 = 300, + 100 = 400;
     * day fresh: 8640 */
    sluice_decision_t d = call(l, "A", 1, pro_i, 0, &det);
    CHECK(d.kind == SLUICE_EMITTED && d.full == 8640 * MS && d.remaining == 26, "upgrade keeps the consumption");
    CHECK(det.quotas[0].full == 400 * MS && det.quotas[1].remaining == 9999, "pro's quotas after the upgrade");
    /* a read under free converts back without storing: 400 -> 4000 > 3000 of room */
    sluice_quota_t q = peek(l, "A", 1, free_i, 0, &det);
    CHECK(q.remaining == 0 && q.full == 4000 * MS && q.retry == 2000 * MS && det.nquotas == 1, "read under free");
    q = peek(l, "A", 1, pro_i, 0, NULL);
    CHECK(q.remaining == 26 && q.full == 8640 * MS, "the read stored nothing: still pro");
    /* a dropped call under free stores nothing either */
    d = call(l, "A", 1, free_i, 0, &det);
    CHECK(d.kind == SLUICE_DROPPED && d.at == 2000 * MS && d.full == 4000 * MS, "downgrade drop: retry 2000");
    q = peek(l, "A", 1, pro_i, 0, NULL);
    CHECK(q.remaining == 26, "the dropped call left the key under pro");
    /* at 2000 the free call passes: second 400 -> 2000 + (400 - 2000)... the
     * pro TAT 400 has passed: fresh, so free's second starts at 2000 + 1000 */
    d = call(l, "A", 1, free_i, 2000 * MS, &det);
    CHECK(d.kind == SLUICE_EMITTED && d.full == 3000 * MS && d.remaining == 2, "free call after pro's second passed");
    /* the key is under free now: pro reads its day quota fresh again */
    q = peek(l, "A", 1, pro_i, 2000 * MS, &det);
    CHECK(det.quotas[1].remaining == 10000 && det.quotas[0].full == 2100 * MS, "pro converts free's TAT 3000");
    /* idle: every TAT passed; the key holds no memory and no plan */
    CHECK(sluice_limiter_advance(l, 10000 * MS, 0) >= 0, "advance");
    CHECK(live_keys(l) == 0, "idle key reclaimed");
    d = call(l, "A", 1, pro_i, 10000 * MS, &det);
    CHECK(d.remaining == 29 && det.quotas[1].remaining == 9999, "fresh under pro after going idle");
    CHECK(sluice_limiter_submit_plan(l, key("A"), 1, 1, 2, 10000 * MS, &d, NULL) == SLUICE_ENOPLAN, "plan 2");
    q = peek(l, "A", 1, pro_i, 10000 * MS, NULL);
    CHECK(q.remaining == 29, "an unknown plan changed nothing");
    char name[SLUICE_PLAN_NAME_MAX + 1];
    CHECK(sluice_limiter_plan_name(l, pro_i, 1, name, sizeof name) == 3 && strcmp(name, "day") == 0, "quota name");
    CHECK(sluice_limiter_plan_name(l, pro_i, -1, name, sizeof name) == 3 && strcmp(name, "pro") == 0, "plan name");
    CHECK(sluice_limiter_plan_name(l, pro_i, 2, name, sizeof name) == SLUICE_ENOPLAN, "no quota 2");
    CHECK(sluice_limiter_plan_info(l, pro_i, &det) == 2 && det.nquotas == 2 && det.quotas[1].limit == 10000 &&
              det.quotas[1].per_ns == 86400000 * MS,
          "plan info");
    sluice_limiter_free(l);
}

/* Fractional periods: 3 per 1000 ms (T = 333.33 ms) converted to 7 per
 * 1000 ms (T' = 142.857 ms). */
static void fractional(void) {
    sluice_rate_quota_t aq[] = { { "s", 3, 1000 * MS, 3 } };
    sluice_rate_quota_t bq[] = { { "s", 7, 1000 * MS, 7 } };
    sluice_plan_t p[] = { { "a", aq, 1 }, { "b", bq, 1 } };
    sluice_plans_t t = { p, 2, 0 };
    sluice_limiter_t *l;
    CHECK(make(&l, &t) == 0, "new");
    /* two calls under a at 0: TAT = 2000/3 ms = 666.666... ms */
    call(l, "K", 2, 0, 0, NULL);
    /* under b at 100 ms: TAT' = 100 + (2000/3 - 100) * (1000/7) / (1000/3)
     * = 100 + (1700/3) * 3/7 = 100 + 1700/7 = 342.857142857... ms; a call
     * of cost 7 is admitted at TAT' + 1000 - 1000 = 342857142.857 ns,
     * rounded up: 342857143 ns */
    sluice_quota_t q = peek(l, "K", 7, 1, 100 * MS, NULL);
    CHECK(q.retry == UINT64_C(342857143), "retry after conversion: %" PRIu64, q.retry);
    CHECK(q.full == UINT64_C(342857143), "full after conversion: %" PRIu64, q.full);
    /* a read converts at its own time and a call at its own: a call of
     * cost 1 under b at 100 ms stores TAT' + T' = 342.857142857 + 142.857142857
     * = 485.714285714 ms; cost 7 is then admitted from 485714285.714 ns on */
    sluice_decision_t d = call(l, "K", 1, 1, 100 * MS, NULL);
    CHECK(d.kind == SLUICE_EMITTED && d.full == UINT64_C(485714286), "converted call: full %" PRIu64, d.full);
    CHECK(sluice_limiter_submit_plan(l, key("K"), 1, 7, 1, UINT64_C(485714285), &d, NULL) == 0 &&
              d.kind == SLUICE_DROPPED && d.at == UINT64_C(485714286),
          "one ns early: dropped, retry rounded up");
    CHECK(sluice_limiter_submit_plan(l, key("K"), 1, 7, 1, UINT64_C(485714286), &d, NULL) == 0 &&
              d.kind == SLUICE_EMITTED,
          "at the retry: admitted");
    sluice_limiter_free(l);
}

/* ---- plans replaced at run time ---- */

static void set_plans(void) {
    sluice_rate_quota_t q1[] = { { "second", 10, 1000 * MS, 0 }, { "hour", 100, 3600000 * MS, 0 } };
    sluice_plan_t p1[] = { { "basic", q1, 2 } };
    sluice_plans_t t1 = { p1, 1, 3 };
    sluice_limiter_t *l;
    CHECK(make(&l, &t1) == 0, "new");
    for (int i = 0; i < 10; i++) call(l, "A", 1, 0, 0, NULL);
    CHECK(call(l, "A", 1, 0, 0, NULL).kind == SLUICE_DROPPED, "the second quota is used up");
    /* the second doubles (T 100 -> 50, burst 20), the hour goes, a minute
     * comes: A's second TAT 1000 -> 500; the minute starts fresh */
    sluice_rate_quota_t q2[] = { { "second", 20, 1000 * MS, 0 }, { "minute", 30, 60000 * MS, 0 } };
    sluice_rate_quota_t q3[] = { { "second", 1, 1000 * MS, 0 } };
    sluice_plan_t p2[] = { { "basic", q2, 2 }, { "tiny", q3, 1 } };
    sluice_plans_t t2 = { p2, 2, 0 };
    CHECK(sluice_limiter_set_plans(l, &t2) == 0, "set_plans");
    sluice_plan_detail_t det;
    sluice_quota_t q = peek(l, "A", 1, 0, 0, &det);
    CHECK(q.remaining == 10 && det.quotas[0].full == 500 * MS && det.quotas[1].remaining == 30,
          "read under the new numbers: second 10 left, minute fresh");
    sluice_decision_t d = call(l, "A", 1, 0, 0, &det);
    CHECK(d.kind == SLUICE_EMITTED && det.quotas[0].full == 550 * MS && det.quotas[1].remaining == 29, "converted");
    uint32_t tiny;
    CHECK(sluice_limiter_plan_index(l, "tiny", 4, &tiny) == 0 && tiny == 1, "the new plan is found");
    /* tiny: second T 1000: A's 550 -> 0 + 550 * 20 = 11000 > 1000 of room */
    d = call(l, "A", 1, tiny, 0, &det);
    CHECK(d.kind == SLUICE_DROPPED && d.at == 11000 * MS, "downgrade to tiny: retry 11000 (%" PRIu64 ")", d.at);
    /* bad tables change nothing */
    sluice_rate_quota_t dup[] = { { "x", 1, S, 0 }, { "x", 2, S, 0 } };
    sluice_plan_t pd[] = { { "basic", dup, 2 } };
    sluice_plans_t td = { pd, 1, 0 };
    CHECK(sluice_limiter_set_plans(l, &td) == SLUICE_EINVAL, "duplicate quota name refused");
    sluice_rate_quota_t four[] = { { "a", 1, S, 0 }, { "b", 1, S, 0 }, { "c", 1, S, 0 }, { "d", 1, S, 0 } };
    sluice_plan_t p4[] = { { "basic", four, 4 } };
    sluice_plans_t t4 = { p4, 1, 0 };
    CHECK(sluice_limiter_set_plans(l, &t4) == SLUICE_ERANGE, "more quotas than max_quotas (3)");
    t4.max_quotas = 4;
    CHECK(sluice_limiter_set_plans(l, &t4) == SLUICE_ERANGE, "a different max_quotas");
    CHECK(sluice_limiter_plan_index(l, "tiny", 4, &tiny) == 0, "the old plans stay");
    q = peek(l, "A", 1, 0, 0, NULL);
    CHECK(q.remaining == 9, "and the key too");
    /* a set_plans that fails on any allocation changes nothing */
    for (long n = 0;; n++) {
        g_allocs = 0;
        g_fail_at = n;
        int rc = sluice_limiter_set_plans(l, &t1);
        g_fail_at = -1;
        if (rc == 0) break;
        CHECK(rc == SLUICE_ENOMEM, "set_plans under failure %ld: %d", n, rc);
        CHECK(sluice_limiter_check(l) == 0, "invariants after a failed set_plans");
        CHECK(sluice_limiter_plan_index(l, "tiny", 4, &tiny) == 0, "failed set_plans %ld kept the plans", n);
    }
    /* back on t1: second 10/s: A's TAT 550 converts to 1100: 0 left, retry 1100 + 100 - 1000 */
    q = peek(l, "A", 1, 0, 0, &det);
    CHECK(q.remaining == 0 && q.retry == 200 * MS && det.quotas[1].remaining == 100, "t1 again");
    sluice_limiter_free(l);
}

/* ---- errors ---- */

static void errors(void) {
    sluice_rate_quota_t ok[] = { { "s", 1, S, 0 } };
    sluice_rate_quota_t dup[] = { { "s", 1, S, 0 }, { "s", 2, S, 0 } };
    sluice_rate_quota_t nine[9];
    static const char *names[9] = { "a", "b", "c", "d", "e", "f", "g", "h", "i" };
    for (int i = 0; i < 9; i++) nine[i] = (sluice_rate_quota_t){ names[i], 1, S, 0 };
    sluice_rate_quota_t badname[] = { { "a b", 1, S, 0 } };
    sluice_rate_quota_t zero[] = { { "s", 0, S, 0 } };
    struct {
        sluice_plan_t plans[2];
        size_t n;
        int code;
        const char *says;
    } cases[] = {
        { { { "p", dup, 2 } }, 1, SLUICE_EINVAL, "plans[0].quotas[1].name 's' is used twice in plan 'p'" },
        { { { "p", ok, 0 } }, 1, SLUICE_EINVAL, "plans[0].nquotas is 0" },
        { { { "p", nine, 9 } }, 1, SLUICE_ERANGE, "more than 8 quotas" },
        { { { "p", ok, 1 }, { "p", ok, 1 } }, 2, SLUICE_EINVAL, "plans[1].name 'p' is used twice" },
        { { { "p", badname, 1 } }, 1, SLUICE_EINVAL, "plans[0].quotas[0].name 'a?b' is not" },
        { { { "", ok, 1 } }, 1, SLUICE_EINVAL, "plans[0].name '' is not" },
        { { { "p", zero, 1 } }, 1, SLUICE_EINVAL, "plans[0].quotas[0].limit is 0" },
        { { { "p", ok, 1 } }, 0, SLUICE_EINVAL, "plans.nplans is 0" },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        sluice_plans_t t = { cases[i].plans, cases[i].n, 0 };
        char msg[SLUICE_PLANS_MESSAGE_MAX];
        int rc = sluice_plans_check(&t, msg, sizeof msg);
        CHECK(rc == cases[i].code, "case %zu: code %d", i, rc);
        CHECK(strstr(msg, cases[i].says) != NULL, "case %zu says '%s'", i, msg);
        sluice_config_t c;
        memset(&c, 0, sizeof c);
        c.policy = sluice_rate_plans();
        c.plans = &t;
        sluice_limiter_t *l = NULL;
        CHECK(sluice_limiter_new(&l, &c) == cases[i].code && l == NULL, "case %zu: new refused", i);
        CHECK(strstr(sluice_config_explain(&c), cases[i].says) != NULL, "case %zu: config_explain", i);
    }
    /* the name rule, by length (not the NUL): 1 to 32 of A-Z a-z 0-9 _ . - */
    CHECK(sluice_plan_name_valid("a", 1) && sluice_plan_name_valid("Pro_1.x-y", 9), "valid names");
    CHECK(!sluice_plan_name_valid("", 0) && !sluice_plan_name_valid(NULL, 0), "empty");
    CHECK(sluice_plan_name_valid("abcdefghijklmnopqrstuvwxyz012345", 32), "32 characters");
    CHECK(!sluice_plan_name_valid("abcdefghijklmnopqrstuvwxyz0123456", 33), "33 characters");
    CHECK(!sluice_plan_name_valid("a\0b", 3) && !sluice_plan_name_valid("a b", 3) && !sluice_plan_name_valid("a\"", 2),
          "a NUL, a space, a quote");
    /* plans with a rate's numbers, or on another policy */
    sluice_plan_t p[] = { { "p", ok, 1 } };
    sluice_plans_t t = { p, 1, 0 };
    sluice_config_t c;
    memset(&c, 0, sizeof c);
    c.policy = sluice_rate(1, S, 1);
    c.plans = &t;
    sluice_limiter_t *l = NULL;
    CHECK(sluice_limiter_new(&l, &c) == SLUICE_EINVAL, "rate numbers and plans");
    c.policy = sluice_throttle(S, true, true, SLUICE_PICK_LATEST);
    CHECK(sluice_limiter_new(&l, &c) == SLUICE_EINVAL, "plans on a throttle");
    /* a limiter of plans created under every allocation failure */
    for (long n = 0;; n++) {
        g_allocs = 0;
        g_fail_at = n;
        int rc = make(&l, &t);
        g_fail_at = -1;
        if (rc == 0) break;
        CHECK(rc == SLUICE_ENOMEM && g_live == 0, "new under failure %ld: %d, %ld blocks live", n, rc, g_live);
    }
    sluice_limiter_free(l);
}

/* A rate limiter without plans: plan 0 of one quota named "default". */
static void single(void) {
    sluice_config_t c;
    memset(&c, 0, sizeof c);
    c.policy = sluice_rate(2, (int64_t)S, 2);
    sluice_limiter_t *l;
    CHECK(sluice_limiter_new(&l, &c) == 0, "new");
    sluice_plan_detail_t det;
    sluice_decision_t d;
    CHECK(sluice_limiter_submit_plan(l, key("A"), 1, 2, 0, 0, &d, &det) == 0 && d.kind == SLUICE_EMITTED, "call");
    CHECK(det.nquotas == 1 && det.quotas[0].remaining == 0 && det.quotas[0].full == S && det.quotas[0].limit == 2,
          "its one quota");
    CHECK(sluice_limiter_submit_plan(l, key("A"), 1, 1, 0, 0, &d, &det) == 0 && d.kind == SLUICE_DROPPED, "drop");
    CHECK(det.refused == 1 && det.quotas[0].retry == S / 2 && d.at == S / 2, "the drop's detail");
    CHECK(sluice_limiter_submit_plan(l, key("A"), 1, 1, 1, 0, &d, &det) == SLUICE_ENOPLAN, "no plan 1");
    uint32_t i;
    CHECK(sluice_limiter_plan_index(l, "default", 7, &i) == 0 && i == 0, "the default plan");
    char name[8];
    CHECK(sluice_limiter_plan_name(l, 0, 0, name, sizeof name) == 7 && strcmp(name, "default") == 0, "its name");
    CHECK(sluice_limiter_plan_name(l, 0, 0, name, 7) == SLUICE_EINVAL, "a buffer too small");
    sluice_plans_t t = { NULL, 0, 0 };
    CHECK(sluice_limiter_set_plans(l, &t) == SLUICE_EINVAL, "set_plans without plans");
    sluice_limiter_free(l);
    c.policy = sluice_throttle(S, true, true, SLUICE_PICK_LATEST);
    c.on_event = NULL;
    c.policy.trailing = false;
    CHECK(sluice_limiter_new(&l, &c) == 0, "throttle");
    CHECK(sluice_limiter_submit_plan(l, key("A"), 1, 1, 0, 0, &d, &det) == SLUICE_EINVAL, "plans need rate");
    sluice_limiter_free(l);
}

/* Many keys under churned plans: reclaim, sets released, nothing leaks. */
static void churn(void) {
    sluice_rate_quota_t a[] = { { "s", 2, 100 * MS, 0 }, { "m", 5, 1000 * MS, 0 } };
    sluice_rate_quota_t b[] = { { "m", 3, 1000 * MS, 0 } };
    sluice_plan_t p[] = { { "a", a, 2 }, { "b", b, 1 } };
    sluice_plans_t t = { p, 2, 0 };
    sluice_limiter_t *l;
    CHECK(make(&l, &t) == 0, "new");
    char k[16];
    uint64_t now = 0;
    for (int round = 0; round < 50; round++) {
        for (int i = 0; i < 200; i++) {
            snprintf(k, sizeof k, "k%d", (i * 7 + round) % 300);
            sluice_decision_t d;
            CHECK(sluice_limiter_submit_plan(l, key(k), 1, 1, (uint32_t)(i + round) & 1, now, &d, NULL) == 0, "call");
            now += MS / 3;
        }
        a[0].limit = 2 + (uint64_t)round % 3; /* new numbers each round: new quota sets */
        CHECK(sluice_limiter_set_plans(l, &t) == 0, "set_plans round %d", round);
        CHECK(sluice_limiter_check(l) == 0, "invariants round %d", round);
    }
    CHECK(sluice_limiter_advance(l, now + 10 * S, 0) >= 0, "advance");
    CHECK(live_keys(l) == 0, "every key reclaimed");
    CHECK(sluice_limiter_check(l) == 0, "invariants at the end");
    sluice_limiter_free(l);
    CHECK(g_live == 0, "%ld blocks leaked", g_live);
}

/* ---- the integer-key entry ---- */

/* sluice_limiter_submit_plan_u64() decides exactly as
 * sluice_limiter_submit_plan() with a detail (its general path) on the same
 * integer key: two limiters, the
 * same calls (plans alternating, so keys convert, and a table replaced
 * midway), every decision equal; errors as the general call's. */
static void integer_entry(void) {
    sluice_rate_quota_t a[] = { { "s", 3, 100 * MS, 0 }, { "m", 20, 1000 * MS, 0 }, { "h", 50, 5000 * MS, 0 } };
    sluice_rate_quota_t b[] = { { "s", 9, 100 * MS, 0 }, { "h", 40, 5000 * MS, 0 } };
    sluice_plan_t p[] = { { "a", a, 3 }, { "b", b, 2 } };
    sluice_plans_t t = { p, 2, 3 };
    sluice_limiter_t *gen, *u64;
    CHECK(make(&gen, &t) == 0 && make(&u64, &t) == 0, "new");
    uint64_t now = 0;
    unsigned admitted = 0, dropped = 0;
    for (int i = 0; i < 6000; i++) {
        uint64_t k = (uint64_t)(i * 7919) % 17;
        uint32_t plan = (uint32_t)((i / 13) & 1);
        sluice_decision_t dg, du;
        memset(&dg, 0xAB, sizeof dg);
        memset(&du, 0xCD, sizeof du);
        sluice_plan_detail_t det; /* a detail: the general path, not the integer short path */
        CHECK(sluice_limiter_submit_plan(gen, sluice_key_u64(k), 1, 1, plan, now, &dg, &det) == 0, "general");
        CHECK(sluice_limiter_submit_plan_u64(u64, k, 1, plan, now, &du) == 0, "integer");
        CHECK(dg.kind == du.kind && dg.at == du.at && dg.full == du.full && dg.remaining == du.remaining &&
                  dg.now == du.now,
              "call %d (key %llu, plan %u): general kind %d at %llu, integer kind %d at %llu", i, (unsigned long long)k,
              plan, dg.kind, (unsigned long long)dg.at, du.kind, (unsigned long long)du.at);
        if (du.kind == SLUICE_EMITTED)
            admitted++;
        else
            dropped++;
        if (i == 3000) {
            a[0].limit = 4; /* a new table midway: keys convert at their next call */
            CHECK(sluice_limiter_set_plans(gen, &t) == 0 && sluice_limiter_set_plans(u64, &t) == 0, "set_plans");
        }
        now += MS / 2;
    }
    CHECK(admitted > 500 && dropped > 500, "both outcomes: %u admitted, %u dropped", admitted, dropped);
    CHECK(sluice_limiter_check(u64) == 0, "invariants");
    sluice_decision_t d;
    CHECK(sluice_limiter_submit_plan_u64(u64, 1, 1, 2, now, &d) == SLUICE_ENOPLAN, "plan 2 of 2: ENOPLAN");
    CHECK(sluice_limiter_submit_plan_u64(NULL, 1, 1, 0, now, &d) == SLUICE_EINVAL, "no limiter");
    CHECK(sluice_limiter_submit_plan_u64(u64, 1, 1, 0, now, NULL) == 0, "no decision wanted");
    sluice_limiter_close(u64, now, SLUICE_CLOSE_DISCARD);
    CHECK(sluice_limiter_submit_plan_u64(u64, 1, 1, 0, now, &d) == SLUICE_ECLOSED, "closed");
    sluice_limiter_free(gen);
    sluice_limiter_free(u64);
    /* a limiter of one policy has no plan call */
    sluice_config_t c;
    memset(&c, 0, sizeof c);
    c.policy = sluice_rate(1, (int64_t)S, 1);
    sluice_limiter_t *one;
    CHECK(sluice_limiter_new(&one, &c) == 0, "one policy");
    int rc = sluice_limiter_submit_plan_u64(one, 1, 1, 0, 0, &d);
    CHECK(rc == sluice_limiter_submit_plan(one, sluice_key_u64(1), 1, 1, 0, 0, &d, NULL),
          "one policy: the integer entry answers as the general one (%d)", rc);
    sluice_limiter_free(one);
}

/* ---- the two forms of an entry's state (plans-internal.h) ---- */

/* One quota under plans decides as the rate policy with its numbers, on
 * the same calls (costs up to 3/8 of a burst, each key charged more than it earns: both outcomes), for
 * a quota of each kind: fast (burst * per below 2^61), narrow without the
 * fast path (below 2^64), and wide (2^64 or more: its TATs in a block). */
static void forms_as_rate(void) {
    static const struct {
        uint64_t limit, per, burst;
    } qs[] = {
        { 7, 3 * S, 5 },               /* fast; T fractional */
        { 100000, 86400 * S, 100000 }, /* 8.64e18: narrow, no fast path */
        { 1000000, 86400 * S, 0 },     /* 8.64e19: wide */
        { 7000000, 86400 * S, 0 },     /* 6.05e20: wide; T fractional */
    };
    for (size_t n = 0; n < sizeof qs / sizeof qs[0]; n++) {
        sluice_rate_quota_t q[] = { { "q", qs[n].limit, (int64_t)qs[n].per, qs[n].burst } };
        sluice_plan_t p[] = { { "only", q, 1 } };
        sluice_plans_t t = { p, 1, 0 };
        sluice_limiter_t *pl, *rate;
        CHECK(make(&pl, &t) == 0, "new plans");
        sluice_config_t c;
        memset(&c, 0, sizeof c);
        c.policy = sluice_rate(qs[n].limit, (int64_t)qs[n].per, qs[n].burst);
        c.tick_ns = 1;
        CHECK(sluice_limiter_new(&rate, &c) == 0, "new rate");
        uint64_t burst = qs[n].burst ? qs[n].burst : qs[n].limit, tq = qs[n].per / qs[n].limit, now = 0;
        unsigned admitted = 0, dropped = 0;
        for (int i = 0; i < 400; i++) {
            char k[8];
            snprintf(k, sizeof k, "k%d", i % 3);
            uint64_t cost = 1 + (uint64_t)(i * 7 % 4) * burst / 8;
            if (i % 50 == 49) cost = burst; /* a whole burst now and then */
            sluice_decision_t dp, dr;
            memset(&dp, 0xAB, sizeof dp);
            memset(&dr, 0xCD, sizeof dr);
            int rp = sluice_limiter_submit_plan(pl, key(k), 1, cost, 0, now, &dp, NULL);
            int rr = sluice_limiter_submit_cost(rate, key(k), 1, cost, now, &dr);
            CHECK(rp == 0 && rr == 0, "quota %zu call %d: %d, %d", n, i, rp, rr);
            CHECK(dp.kind == dr.kind && dp.at == dr.at && dp.full == dr.full && dp.remaining == dr.remaining,
                  "quota %zu call %d (cost %llu): plans kind %d at %llu full %llu rem %llu, rate kind %d at %llu full "
                  "%llu rem %llu",
                  n, i, (unsigned long long)cost, dp.kind, (unsigned long long)dp.at, (unsigned long long)dp.full,
                  (unsigned long long)dp.remaining, dr.kind, (unsigned long long)dr.at, (unsigned long long)dr.full,
                  (unsigned long long)dr.remaining);
            if (dp.kind == SLUICE_EMITTED)
                admitted++;
            else
                dropped++;
            CHECK(sluice_limiter_check(pl) == 0, "invariants");
            now += tq * (1 + burst * 3 / 16) * (uint64_t)(i % 5) / 10 + (uint64_t)i % 3;
        }
        CHECK(admitted > 50 && dropped > 50, "quota %zu: both outcomes (%u admitted, %u dropped)", n, admitted,
              dropped);
        sluice_limiter_free(pl);
        sluice_limiter_free(rate);
        CHECK(g_live == 0, "quota %zu: %ld blocks leaked", n, g_live);
    }
}

/* A key moving between a narrow and a wide set converts as specified, its
 * block made and released as it goes; a block that cannot be made refuses
 * the call with SLUICE_ENOMEM and changes nothing. */
static void wide_block(void) {
    /* wide: 1e6 per day, T 86.4 ms, burst*per 8.64e19; narrow: 1e5 per
     * day, T 864 ms, 8.64e18 (T'/T = 10) */
    sluice_rate_quota_t w[] = { { "day", 1000000, 86400 * S, 0 } };
    sluice_rate_quota_t nw[] = { { "day", 100000, 86400 * S, 0 } };
    sluice_plan_t p[] = { { "wide", w, 1 }, { "narrow", nw, 1 } };
    sluice_plans_t t = { p, 2, 0 };
    sluice_limiter_t *l;
    CHECK(make(&l, &t) == 0, "new");
    sluice_plan_detail_t det;
    call(l, "B", 1, 1, 0, &det); /* the table's chunk and index, so that A's block is all that moves */
    long base = g_live;
    /* wide, cost 10 at 0: TAT 10 T = 864 ms */
    sluice_decision_t d = call(l, "A", 10, 0, 0, &det);
    CHECK(d.kind == SLUICE_EMITTED && d.full == 864 * MS && d.remaining == 999990, "A wide: full 864 ms");
    CHECK(g_live == base + 1, "A holds a block (%ld blocks, %ld before)", g_live, base);
    /* narrow, cost 1 at 0: 864 ms * 10 = 8640 ms, + 864 = 9504 ms */
    d = call(l, "A", 1, 1, 0, &det);
    CHECK(d.kind == SLUICE_EMITTED && d.full == 9504 * MS && d.remaining == 100000 - 11, "A narrow: full 9504 ms");
    CHECK(g_live == base, "A's block released (%ld blocks)", g_live);
    /* a wide call whose block cannot be made: refused, nothing changed */
    g_fail_at = g_allocs = 0;
    sluice_decision_t e;
    CHECK(sluice_limiter_submit_plan(l, key("A"), 1, 1, 0, 100 * MS, &e, NULL) == SLUICE_ENOMEM, "A: ENOMEM");
    g_fail_at = g_allocs = 0;
    CHECK(sluice_limiter_submit_plan(l, key("C"), 1, 1, 0, 100 * MS, &e, NULL) == SLUICE_ENOMEM, "new C: ENOMEM");
    g_fail_at = -1;
    CHECK(sluice_limiter_check(l) == 0 && live_keys(l) == 2 && g_live == base, "nothing changed");
    sluice_quota_t q = peek(l, "A", 1, 1, 100 * MS, &det);
    CHECK(q.full == 9504 * MS && q.remaining == 100000 - 11, "A's narrow state as it was");
    /* wide again, cost 1 at 100 ms: (9504 - 100) / 10 = 940.4 ms ahead, +
     * 86.4: full 1126.8 ms, 1026.8 ms = 11.9 T ahead */
    d = call(l, "A", 1, 0, 100 * MS, &det);
    CHECK(d.kind == SLUICE_EMITTED && d.full == 11268 * MS / 10 && d.remaining == 1000000 - 12,
          "A wide again: full 1126.8 ms");
    CHECK(g_live == base + 1, "A holds a block again");
    /* every key idle: reclaimed with its block */
    CHECK(sluice_limiter_advance(l, 20 * S, 0) >= 0, "advance");
    CHECK(live_keys(l) == 0, "every key reclaimed");
    sluice_limiter_free(l);
    CHECK(g_live == 0, "%ld blocks leaked", g_live);
}

int main(void) {
    several_quotas();
    integer_entry();
    plans_convert();
    fractional();
    set_plans();
    errors();
    single();
    churn();
    forms_as_rate();
    wide_block();
    CHECK(g_live == 0, "%ld blocks leaked", g_live);
    printf(TEST_NAME ": ok\n");
    return 0;
}
