/* test_loop_quota.c — the rate quota API on a loop limiter
 * (sluice_mt_submit_with_options, sluice_mt_quota), the per-limiter totals of
 * sluice_mt_stats (summed over shards), the options (cost, now, plan), the
 * decision's time (now), and the successor of a superseded token carried
 * through the outbox to the callback. */
#include "loop_test_util.h"

/* 10 per 100 s: a unit comes back every 10 s, so nothing refills while the
 * test runs, however slow the machine. */
#define PER_NS (100000 * (int64_t)LT_MS)

static void test_cost_and_quota(void) {
    printf("submit_cost and quota\n");
    sluice_loop_t *loop;
    LT_OK(sluice_loop_start(&loop, NULL));
    sluice_config_t c = lt_config(sluice_rate(10, PER_NS, 0), NULL, NULL);
    sluice_mt_t *m;
    LT_OK(sluice_mt_new(&m, loop, &c, 4));
    sluice_key_t k = sluice_key_bytes("client:1", 8);
    sluice_decision_t d;
    sluice_quota_t q;

    /* a key without state: the whole burst */
    uint64_t before = sluice_clock_now();
    LT_OK(lt_quota(m, k, 1, &q));
    LT_CHECK(q.burst == 10 && q.remaining == 10, "fresh: burst %llu remaining %llu", (unsigned long long)q.burst,
             (unsigned long long)q.remaining);
    LT_CHECK(q.full >= before && q.full <= sluice_clock_now(), "fresh: full is now");
    LT_CHECK(q.retry >= before && q.retry <= sluice_clock_now(), "fresh: retry is now");

    /* cost 4: admitted whole */
    LT_OK(lt_submit_cost(m, k, 1, 4, &d));
    uint64_t t1 = sluice_clock_now();
    LT_CHECK(d.kind == SLUICE_EMITTED && d.remaining == 6, "cost 4: kind %d remaining %llu", (int)d.kind,
             (unsigned long long)d.remaining);
    LT_CHECK(d.full > t1 && d.full <= t1 + 4 * (uint64_t)PER_NS / 10, "cost 4: full within 40 s");
    /* cost 7 > 6 left: dropped whole, nothing counted */
    LT_OK(lt_submit_cost(m, k, 2, 7, &d));
    LT_CHECK(d.kind == SLUICE_DROPPED && d.at > sluice_clock_now(), "cost 7 dropped with a retry time");
    LT_OK(lt_quota(m, k, 7, &q));
    LT_CHECK(q.remaining == 6 && q.retry > sluice_clock_now() && q.retry != SLUICE_NEVER,
             "quota after the drop: remaining %llu", (unsigned long long)q.remaining);
    /* above the burst: never */
    LT_OK(lt_submit_cost(m, k, 3, 11, &d));
    LT_CHECK(d.kind == SLUICE_DROPPED && d.at == SLUICE_NEVER, "cost 11 > burst: never");
    LT_OK(lt_quota(m, k, 11, &q));
    LT_CHECK(q.retry == SLUICE_NEVER, "quota cost 11: never");
    /* bad costs */
    LT_CHECK(lt_submit_cost(m, k, 4, SLUICE_RATE_MAX + 1, &d) == SLUICE_ERANGE, "cost too big");
    LT_CHECK(lt_quota(m, k, SLUICE_RATE_MAX + 1, &q) == SLUICE_ERANGE, "quota cost too big");
    LT_CHECK(lt_quota(m, k, 1, NULL) == SLUICE_EINVAL, "quota NULL out");
    LT_CHECK(lt_quota(NULL, k, 1, &q) == SLUICE_EINVAL, "quota NULL limiter");
    /* the rest, one unit at a time, at the caller's time */
    for (int i = 0; i < 6; i++) {
        LT_OK(lt_submit_cost_at(m, k, 10 + (uint64_t)i, 1, sluice_clock_now(), &d));
        LT_CHECK(d.kind == SLUICE_EMITTED && d.remaining == (uint64_t)(5 - i), "unit %d: remaining %llu", i,
                 (unsigned long long)d.remaining);
    }
    LT_OK(sluice_mt_submit(m, k, 20, &d));
    LT_CHECK(d.kind == SLUICE_DROPPED, "empty");
    /* keys over several shards: the totals are summed */
    for (uint64_t i = 0; i < 16; i++) LT_OK(lt_submit_cost(m, sluice_key_u64(i), i, 2, &d));
    sluice_mt_stats_t st;
    LT_OK(sluice_mt_stats(m, &st));
    LT_CHECK(st.core.admitted == 1 + 6 + 16, "admitted %llu", (unsigned long long)st.core.admitted);
    LT_CHECK(st.core.dropped == 3, "dropped %llu", (unsigned long long)st.core.dropped);
    LT_CHECK(st.core.scheduled == 0 && st.core.live_keys == 17, "scheduled %llu live %llu",
             (unsigned long long)st.core.scheduled, (unsigned long long)st.core.live_keys);
    LT_OK(sluice_mt_close(m, SLUICE_CLOSE_DRAIN));
    LT_CHECK(lt_quota(m, k, 1, &q) == SLUICE_ECLOSED, "quota after close");
    LT_CHECK(lt_submit_cost(m, k, 1, 1, &d) == SLUICE_ECLOSED, "cost after close");
    sluice_mt_free(m);

    /* not a rate policy */
    c = lt_config(sluice_throttle(1000 * (int64_t)LT_MS, true, false, SLUICE_PICK_LATEST), NULL, NULL);
    LT_OK(sluice_mt_new(&m, loop, &c, 2));
    LT_CHECK(lt_submit_cost(m, k, 1, 2, &d) == SLUICE_EINVAL, "cost 2 on a throttle");
    LT_OK(lt_submit_cost(m, k, 1, 1, &d));
    LT_CHECK(d.kind == SLUICE_EMITTED, "cost 1 on a throttle is a call");
    LT_CHECK(lt_quota(m, k, 1, &q) == SLUICE_EINVAL, "quota on a throttle");
    sluice_mt_free(m);
    LT_OK(sluice_loop_free(loop));
}

/* A quota read at the caller's time: exact at the instant of a call made
 * then (what sluice-trace --realtime relies on), never ahead of the clock. */
static void test_quota_at(void) {
    printf("quota_at\n");
    sluice_loop_t *loop;
    LT_OK(sluice_loop_start(&loop, NULL));
    sluice_config_t c = lt_config(sluice_rate(10, PER_NS, 0), NULL, NULL);
    sluice_mt_t *m;
    LT_OK(sluice_mt_new(&m, loop, &c, 1));
    sluice_key_t k = sluice_key_bytes("client:1", 8);
    const uint64_t unit = (uint64_t)PER_NS / 10; /* 10 s */
    sluice_decision_t d;
    sluice_quota_t q;
    uint64_t t0 = sluice_clock_now();
    LT_OK(lt_submit_cost_at(m, k, 1, 4, t0, &d));
    LT_CHECK(d.kind == SLUICE_EMITTED && d.full == t0 + 4 * unit, "cost 4 at t0");
    /* read later, at t0: exactly the numbers of t0 */
    lt_sleep_ms(2);
    LT_OK(lt_quota_at(m, k, 1, t0, &q));
    LT_CHECK(q.remaining == 6 && q.full == t0 + 4 * unit && q.retry == t0,
             "at t0: remaining %llu full %+lld retry %+lld", (unsigned long long)q.remaining, (long long)(q.full - t0),
             (long long)(q.retry - t0));
    LT_OK(lt_quota_at(m, k, 7, t0, &q));
    LT_CHECK(q.retry == t0 + unit, "cost 7 at t0: retry %+lld, want one unit later", (long long)(q.retry - t0));
    LT_OK(lt_quota_at(m, k, 11, t0, &q));
    LT_CHECK(q.retry == SLUICE_NEVER, "cost 11 > burst: never");
    /* the plain read is at the clock: no earlier than t0 */
    LT_OK(lt_quota(m, k, 1, &q));
    LT_CHECK(q.retry > t0 && q.retry <= sluice_clock_now() && q.full == t0 + 4 * unit, "quota now: retry after t0");
    /* earlier than the shard has seen: counts as that time (t0) */
    LT_OK(lt_quota_at(m, k, 1, t0 - 1000 * LT_MS, &q));
    LT_CHECK(q.retry == t0 && q.remaining == 6, "before t0: read at t0 (retry %+lld)", (long long)(q.retry - t0));
    /* ahead of the clock: refused, nothing read */
    memset(&q, 0xA5, sizeof q);
    LT_CHECK(lt_quota_at(m, k, 1, sluice_clock_now() + 1000 * LT_MS, &q) == SLUICE_ERANGE, "ahead: ERANGE");
    LT_CHECK(q.burst == UINT64_C(0xA5A5A5A5A5A5A5A5), "ahead: out untouched");
    LT_CHECK(lt_quota_at(NULL, k, 1, t0, &q) == SLUICE_EINVAL, "quota_at NULL limiter");
    /* the other key operations at a time: ahead of the clock refused (the
     * key keeps its history), then a cancel at t0 forgets it at t0 */
    uint64_t ahead = sluice_clock_now() + 1000 * LT_MS;
    LT_CHECK(sluice_mt_flush_at(m, k, ahead) == SLUICE_ERANGE, "flush_at ahead: ERANGE");
    LT_CHECK(sluice_mt_pending_at(m, k, ahead) == SLUICE_ERANGE, "pending_at ahead: ERANGE");
    LT_CHECK(sluice_mt_cancel_at(m, k, ahead) == SLUICE_ERANGE, "cancel_at ahead: ERANGE");
    LT_OK(lt_quota_at(m, k, 1, t0, &q));
    LT_CHECK(q.remaining == 6, "after the refused calls: remaining %llu", (unsigned long long)q.remaining);
    LT_CHECK(sluice_mt_flush_at(m, k, t0) == 0 && sluice_mt_pending_at(m, k, t0) == 0, "rate: nothing pending");
    LT_CHECK(sluice_mt_cancel_at(m, k, t0) == 0, "cancel_at t0");
    LT_OK(lt_quota_at(m, k, 1, t0, &q));
    LT_CHECK(q.remaining == 10 && q.full == t0 && q.retry == t0, "cancelled at t0: fresh at t0 (full %+lld)",
             (long long)(q.full - t0));
    LT_OK(sluice_mt_close(m, SLUICE_CLOSE_DRAIN));
    LT_CHECK(lt_quota_at(m, k, 1, t0, &q) == SLUICE_ECLOSED, "quota_at after close");
    sluice_mt_free(m);
    LT_OK(sluice_loop_free(loop));
}

/* ------------------------------------------------------------------ totals and successors */

struct seen {
    struct lt_sync sync;
    uint64_t n;
    uint64_t drop_token, successor;
    bool has_successor;
    uint64_t emits, discards;
};

static void on_seen(void *user, const sluice_event_t *ev) {
    struct seen *s = user;
    pthread_mutex_lock(&s->sync.mu);
    if (ev->kind == SLUICE_EVENT_DROP) {
        s->drop_token = ev->token;
        s->has_successor = ev->has_successor;
        s->successor = ev->successor;
    } else if (ev->kind == SLUICE_EVENT_EMIT) {
        s->emits++;
    } else {
        s->discards++;
    }
    s->n++;
    pthread_cond_broadcast(&s->sync.cv);
    pthread_mutex_unlock(&s->sync.mu);
}

static void test_totals(void) {
    printf("totals and the successor of a superseded token\n");
    sluice_loop_t *loop;
    LT_OK(sluice_loop_start(&loop, NULL));
    struct seen s;
    memset(&s, 0, sizeof s);
    lt_sync_init(&s.sync);
    sluice_config_t c = lt_config(sluice_debounce(60000 * (int64_t)LT_MS, false, true, -1), on_seen, &s);
    sluice_mt_t *m;
    LT_OK(sluice_mt_new(&m, loop, &c, 8));
    sluice_decision_t d;
    for (uint64_t i = 1; i <= 5; i++) LT_OK(sluice_mt_submit(m, sluice_key_u64(i), i, &d));
    LT_OK(sluice_mt_submit(m, sluice_key_u64(1), 100, &d)); /* supersedes 1 */
    LT_CHECK(sluice_mt_flush(m, sluice_key_u64(2)) == 1, "flush");
    LT_OK(sluice_mt_close(m, SLUICE_CLOSE_DISCARD));
    pthread_mutex_lock(&s.sync.mu);
    LT_CHECK(lt_wait_locked(&s.sync, &s.n, 6), "6 events, got %llu", (unsigned long long)s.n);
    LT_CHECK(s.drop_token == 1 && s.has_successor && s.successor == 100, "drop of 1: successor %d %llu",
             (int)s.has_successor, (unsigned long long)s.successor);
    LT_CHECK(s.emits == 1 && s.discards == 4, "emits %llu discards %llu", (unsigned long long)s.emits,
             (unsigned long long)s.discards);
    pthread_mutex_unlock(&s.sync.mu);
    sluice_mt_stats_t st;
    LT_OK(sluice_mt_stats(m, &st));
    LT_CHECK(st.core.admitted == 0 && st.core.scheduled == 6 && st.core.dropped == 1 && st.core.emitted_later == 1 &&
                 st.core.discarded == 4,
             "admitted %llu scheduled %llu dropped %llu emitted_later %llu discarded %llu",
             (unsigned long long)st.core.admitted, (unsigned long long)st.core.scheduled,
             (unsigned long long)st.core.dropped, (unsigned long long)st.core.emitted_later,
             (unsigned long long)st.core.discarded);
    sluice_mt_free(m);
    LT_OK(sluice_loop_free(loop));
    lt_sync_destroy(&s.sync);
}

/* decision.now: the decision's own time, from which a drop's retry wait
 * is measured, with no second read of the clock. */
static void test_timed(void) {
    printf("the decision's time (decision.now)\n");
    sluice_loop_t *loop;
    LT_OK(sluice_loop_start(&loop, NULL));
    sluice_config_t c = lt_config(sluice_rate(10, PER_NS, 0), NULL, NULL);
    sluice_mt_t *m;
    LT_OK(sluice_mt_new(&m, loop, &c, 1));
    sluice_key_t k = sluice_key_bytes("client:t", 8);
    sluice_decision_t d;
    sluice_quota_t q;
    uint64_t when = 0;

    uint64_t before = sluice_clock_now();
    LT_OK(lt_submit_timed(m, k, 1, 4, &d, &when));
    uint64_t after = sluice_clock_now();
    LT_CHECK(d.kind == SLUICE_EMITTED && d.remaining == 6, "cost 4 admitted: kind %d", (int)d.kind);
    LT_CHECK(when >= before && when <= after, "admitted: the time lies within the call");
    /* dropped: the retry time is what a quota read at the decision's time says */
    before = sluice_clock_now();
    LT_OK(lt_submit_timed(m, k, 2, 7, &d, &when));
    after = sluice_clock_now();
    LT_CHECK(d.kind == SLUICE_DROPPED && d.at > when, "cost 7 dropped with a later retry time");
    LT_CHECK(when >= before && when <= after, "dropped: the time lies within the call");
    LT_OK(lt_quota_at(m, k, 7, when, &q));
    LT_CHECK(q.retry == d.at, "retry %llu equals the quota's at the decision's time %llu", (unsigned long long)d.at,
             (unsigned long long)q.retry);
    /* the shard's clock moved ahead by a call at a caller's time: a later
     * call is decided at that time, not at an earlier clock read */
    uint64_t ahead = sluice_clock_now() + SLUICE_MT_SUBMIT_AT_SLACK_NS;
    LT_OK(lt_submit_cost_at(m, sluice_key_u64(7), 3, 1, ahead, &d));
    LT_OK(lt_submit_timed(m, k, 4, 1, &d, &when));
    LT_CHECK(when >= ahead, "a shard's clock never goes back: %llu < %llu", (unsigned long long)when,
             (unsigned long long)ahead);
    LT_OK(lt_submit_timed(m, k, 5, 1, NULL, NULL)); /* both outputs optional */
    /* errors leave `when` untouched */
    when = 42;
    LT_CHECK(lt_submit_timed(m, k, 6, SLUICE_RATE_MAX + 1, &d, &when) == SLUICE_ERANGE && when == 42, "cost too big");
    LT_OK(sluice_mt_close(m, SLUICE_CLOSE_DRAIN));
    LT_CHECK(lt_submit_timed(m, k, 7, 1, &d, &when) == SLUICE_ECLOSED && when == 42, "after close");
    sluice_mt_free(m);
    LT_OK(sluice_loop_free(loop));
}

/* sluice_mt_submit_options_t: each field, and NULL options. A rate of 10
 * per 1000 s: nothing comes back while the test runs, so `remaining`
 * counts the units taken. */
static void test_options(void) {
    printf("submit options: cost, now, plan\n");
    sluice_loop_t *loop;
    LT_OK(sluice_loop_start(&loop, NULL));
    sluice_config_t c = lt_config(sluice_rate(10, 1000 * PER_NS, 0), NULL, NULL);
    sluice_mt_t *m;
    LT_OK(sluice_mt_new(&m, loop, &c, 1));
    sluice_key_t k = sluice_key_bytes("client:o", 8);
    sluice_decision_t d;
    sluice_quota_t q;

    /* cost 0 means 1, as do NULL options */
    sluice_mt_submit_options_t o = { .cost = 0 };
    LT_OK(sluice_mt_submit_with_options(m, k, 1, &o, &d));
    LT_CHECK(d.kind == SLUICE_EMITTED && d.remaining == 9, "cost 0: one unit taken (remaining %llu)",
             (unsigned long long)d.remaining);
    LT_OK(sluice_mt_submit_with_options(m, k, 2, NULL, &d));
    LT_CHECK(d.kind == SLUICE_EMITTED && d.remaining == 8, "NULL options: one unit taken (remaining %llu)",
             (unsigned long long)d.remaining);
    o = (sluice_mt_submit_options_t){ .cost = 3 };
    LT_OK(sluice_mt_submit_with_options(m, sluice_key_u64(5), 3, &o, &d));
    LT_CHECK(d.kind == SLUICE_EMITTED && d.remaining == 7, "integer key, cost 3 (remaining %llu)",
             (unsigned long long)d.remaining);

    /* decision.now: the time of the call read from the clock */
    uint64_t before = sluice_clock_now();
    o = (sluice_mt_submit_options_t){ .cost = 1 };
    LT_OK(sluice_mt_submit_with_options(m, k, 4, &o, &d));
    uint64_t after = sluice_clock_now();
    LT_CHECK(d.now >= before && d.now <= after, "the decision's time lies within the call");

    /* a given now: the call is decided at it, not at the clock */
    uint64_t t0 = sluice_clock_now();
    lt_sleep_ms(5);
    o = (sluice_mt_submit_options_t){ .now = t0 };
    LT_OK(sluice_mt_submit_with_options(m, k, 5, &o, &d));
    LT_CHECK(d.now == t0, "decided at the given now (%+lld ns)", (long long)(d.now - t0));
    LT_OK(sluice_mt_quota(m, k, &o, &q));
    LT_CHECK(q.now == t0 && q.remaining == 6, "quota at the given now: remaining %llu",
             (unsigned long long)q.remaining);
    /* the integer fast path fills the decision's time too */
    before = sluice_clock_now();
    LT_OK(sluice_mt_submit_u64(m, 5, 55, &d));
    after = sluice_clock_now();
    LT_CHECK(d.now >= before && d.now <= after, "submit_u64: the decision's time lies within the call");

    /* a now ahead of the clock: refused, no unit taken */
    o = (sluice_mt_submit_options_t){ .now = sluice_clock_now() + 1000 * LT_MS };
    LT_CHECK(sluice_mt_submit_with_options(m, k, 6, &o, &d) == SLUICE_ERANGE, "ahead of the clock: ERANGE");
    LT_CHECK(sluice_mt_quota(m, k, &o, &q) == SLUICE_ERANGE, "quota ahead of the clock: ERANGE");

    /* a plan other than 0: refused (a limiter without plans has only plan 0) */
    o = (sluice_mt_submit_options_t){ .plan = 1 };
    LT_CHECK(sluice_mt_submit_with_options(m, k, 7, &o, &d) == SLUICE_ENOPLAN, "plan 1: ENOPLAN");
    LT_CHECK(sluice_mt_quota(m, k, &o, &q) == SLUICE_ENOPLAN, "quota plan 1: ENOPLAN");
    LT_OK(sluice_mt_quota(m, k, NULL, &q));
    LT_CHECK(q.remaining == 6, "refused calls took nothing: remaining %llu", (unsigned long long)q.remaining);
    LT_CHECK(sluice_mt_submit_with_options(NULL, k, 8, NULL, &d) == SLUICE_EINVAL, "NULL limiter");
    sluice_mt_free(m);
    LT_OK(sluice_loop_free(loop));
}

int main(void) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    test_options();
    test_timed();
    test_cost_and_quota();
    test_quota_at();
    test_totals();
    LT_MAIN_END();
}
