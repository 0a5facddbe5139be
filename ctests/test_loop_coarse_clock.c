/* test_loop_coarse_clock.c — SLUICE_MT_COARSE_CLOCK: calls that do not give
 * their time are stamped with CLOCK_MONOTONIC_COARSE, never ahead of the
 * precise clock and at most one tick behind it; decisions are exact at the
 * time they report (decision.now); a caller's own (precise) time is checked
 * against the precise clock, not refused for running ahead of the coarse
 * one; single calls, batches and quota reads alike; unknown flags are
 * refused. */
#include "loop_test_util.h"

static uint64_t coarse_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
    return (uint64_t)ts.tv_sec * UINT64_C(1000000000) + (uint64_t)ts.tv_nsec;
}

static uint64_t tick_ns(void) {
    struct timespec ts;
    clock_getres(CLOCK_MONOTONIC_COARSE, &ts);
    return (uint64_t)ts.tv_sec * UINT64_C(1000000000) + (uint64_t)ts.tv_nsec;
}

int main(void) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    sluice_loop_t *loop;
    LT_OK(sluice_loop_start(&loop, NULL));
    /* one call an hour: nothing refills while the test runs */
    sluice_config_t c = lt_config(sluice_rate(1, 3600 * UINT64_C(1000000000), 1), NULL, NULL);
    sluice_mt_options_t o = { .flags = SLUICE_MT_COARSE_CLOCK };
    sluice_mt_t *m;
    LT_OK(sluice_mt_new_with_options(&m, loop, &c, &o));
    uint64_t tick = tick_ns();
    printf("coarse clock: tick %llu ns\n", (unsigned long long)tick);

    /* stamped with the coarse clock: within [coarse before, precise after] */
    sluice_decision_t a, b;
    uint64_t before = coarse_ns();
    LT_OK(sluice_mt_submit_u64(m, 1, 1, &a));
    uint64_t after = sluice_clock_now();
    LT_CHECK(a.kind == SLUICE_EMITTED, "the first call is admitted");
    LT_CHECK(a.now >= before && a.now <= after, "stamped between the coarse reading before and the precise after");
    /* never past a coarse reading taken after the call (the precise clock
     * would be, but for a tick falling between the two readings; a fresh
     * limiter's clock starts on the coarse clock too) */
    LT_CHECK(a.now <= coarse_ns(), "stamped by the coarse clock");
    /* exact at the reported time: the retry is the first call's time plus one interval */
    LT_OK(sluice_mt_submit_u64(m, 1, 2, &b));
    LT_CHECK(b.kind == SLUICE_DROPPED && b.at == a.now + 3600 * UINT64_C(1000000000),
             "the drop's retry time counts from the reported time (%llu vs %llu)", (unsigned long long)b.at,
             (unsigned long long)(a.now + 3600 * UINT64_C(1000000000)));
    LT_CHECK(b.now >= a.now, "the limiter's time never goes back");

    /* a caller's precise time, ahead of the coarse clock by up to a tick: taken */
    sluice_mt_submit_options_t at = { .now = sluice_clock_now() };
    LT_OK(sluice_mt_submit_with_options(m, sluice_key_u64(2), 3, &at, &a));
    LT_CHECK(a.now == at.now, "decided at the caller's time");
    /* one ahead of the precise clock: still refused */
    at.now = sluice_clock_now() + 1000 * LT_MS;
    LT_CHECK(sluice_mt_submit_with_options(m, sluice_key_u64(3), 4, &at, &a) == SLUICE_ERANGE, "ahead: ERANGE");

    /* a quota read and a batch are stamped the same way */
    sluice_quota_t q;
    before = coarse_ns();
    LT_OK(sluice_mt_quota(m, sluice_key_u64(9), NULL, &q));
    after = sluice_clock_now();
    LT_CHECK(q.now >= before && q.now <= after && q.remaining == 1, "quota stamped by the coarse clock");
    sluice_call_t calls[2] = { { sluice_key_u64(10), 5, 1 }, { sluice_key_u64(11), 6, 1 } };
    sluice_decision_t d[2];
    int results[2];
    before = coarse_ns();
    LT_OK(sluice_mt_submit_many(m, calls, 2, d, results));
    after = sluice_clock_now();
    for (int i = 0; i < 2; i++)
        LT_CHECK(results[i] == 0 && d[i].now >= before && d[i].now <= after, "batch call %d stamped", i);

    /* how far behind the precise clock it may be: one tick (with slack for
     * a descheduled thread between the two readings) */
    uint64_t precise = sluice_clock_now();
    LT_OK(sluice_mt_submit_u64(m, 20, 7, &a));
    LT_CHECK(a.now + tick + 1000 * LT_MS >= precise, "at most a tick behind (%llu ns)",
             (unsigned long long)(precise - a.now));
    sluice_mt_free(m);

    /* an unknown flag is refused */
    o.flags = 8;
    LT_CHECK(sluice_mt_new_with_options(&m, loop, &c, &o) == SLUICE_EINVAL, "unknown flag: EINVAL");
    LT_OK(sluice_loop_free(loop));
    LT_MAIN_END();
}
