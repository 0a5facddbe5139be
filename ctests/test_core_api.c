/*
 * test_core_api.c — the core's bookkeeping as the API documents it:
 *  - totals (sluice_stats_t admitted, scheduled, emitted_later, dropped,
 *    discarded): every token counted once at its call and, if scheduled,
 *    once more by its fate; checked for every kind of fate;
 *  - the successor of a superseded token (throttle pick latest, audit,
 *    debounce trailing) and its absence everywhere else (cancel, pick first,
 *    window suppression, flush, close);
 *  - sluice_limiter_new() refuses a policy that can keep tokens when
 *    on_event is NULL, and accepts those that cannot;
 *  - sluice_config_explain(): one sentence per rule, naming the field, and
 *    the same verdict as sluice_limiter_new() and sluice_policy_validate();
 *  - the error list: sluice_error_count()/sluice_error_code() and
 *    sluice_strerror() agree.
 */
#define TEST_NAME "test_core_api"
#include "support/check.h"

#include <inttypes.h>
#include <string.h>

#include "sluice.h"

#define MAXEV 64

static struct {
    size_t n;
    sluice_event_t ev[MAXEV];
} g;

static void on_event(void *user, const sluice_event_t *e) {
    (void)user;
    CHECK(g.n < MAXEV, "too many events");
    g.ev[g.n++] = *e;
}

static sluice_limiter_t *make(sluice_policy_t p) {
    sluice_config_t c;
    memset(&c, 0, sizeof c);
    c.policy = p;
    c.tick_ns = 1;
    c.on_event = on_event;
    sluice_limiter_t *l = NULL;
    int rc = sluice_limiter_new(&l, &c);
    CHECK(rc == 0, "new: %s", sluice_strerror(rc));
    g.n = 0;
    return l;
}

static sluice_decision_kind_t submit(sluice_limiter_t *l, uint64_t key, uint64_t tok, uint64_t t) {
    sluice_decision_t d;
    CHECK(sluice_limiter_submit(l, sluice_key_u64(key), tok, t, &d) == 0, "submit");
    CHECK(sluice_limiter_check(l) == 0, "check");
    return d.kind;
}

static void expect_totals(sluice_limiter_t *l, uint64_t adm, uint64_t sch, uint64_t later, uint64_t drop, uint64_t disc,
                          const char *what) {
    sluice_stats_t st;
    CHECK(sluice_limiter_stats(l, &st) == 0, "stats");
    CHECK(st.admitted == adm && st.scheduled == sch && st.emitted_later == later && st.dropped == drop &&
              st.discarded == disc,
          "%s: admitted %" PRIu64 " scheduled %" PRIu64 " emitted_later %" PRIu64 " dropped %" PRIu64
          " discarded %" PRIu64 ", expected %" PRIu64 " %" PRIu64 " %" PRIu64 " %" PRIu64 " %" PRIu64,
          what, st.admitted, st.scheduled, st.emitted_later, st.dropped, st.discarded, adm, sch, later, drop, disc);
}

static void expect_event(size_t i, sluice_event_kind_t kind, uint64_t tok, bool has_succ, uint64_t succ) {
    CHECK(i < g.n, "event %zu missing (%zu events)", i, g.n);
    const sluice_event_t *e = &g.ev[i];
    CHECK(e->kind == kind && e->token == tok && e->has_successor == has_succ && (!has_succ || e->successor == succ),
          "event %zu: kind %d token %" PRIu64 " successor %d:%" PRIu64 ", expected kind %d token %" PRIu64
          " successor %d:%" PRIu64,
          i, e->kind, e->token, e->has_successor, e->successor, kind, tok, has_succ, succ);
}

static void test_totals_and_successors(void) {
    /* throttle, both edges, pick latest, W = 100 */
    sluice_limiter_t *l = make(sluice_throttle(100, true, true, SLUICE_PICK_LATEST));
    CHECK(submit(l, 1, 1, 0) == SLUICE_EMITTED, "leading");
    CHECK(submit(l, 1, 2, 10) == SLUICE_SCHEDULED, "kept");
    CHECK(submit(l, 1, 3, 20) == SLUICE_SCHEDULED, "replaces 2");
    expect_event(0, SLUICE_EVENT_DROP, 2, true, 3);
    expect_totals(l, 1, 2, 0, 1, 0, "after a supersede");
    CHECK(sluice_limiter_advance(l, 100, 0) >= 1, "advance");
    expect_event(1, SLUICE_EVENT_EMIT, 3, false, 0);
    expect_totals(l, 1, 2, 1, 1, 0, "after the trailing emission");
    CHECK(submit(l, 1, 4, 150) == SLUICE_SCHEDULED, "in the window the emission opened");
    CHECK(sluice_limiter_cancel(l, sluice_key_u64(1), 160) == 1, "cancel");
    expect_event(2, SLUICE_EVENT_DROP, 4, false, 0);
    expect_totals(l, 1, 3, 1, 2, 0, "after a cancel");
    CHECK(submit(l, 1, 5, 170) == SLUICE_EMITTED, "cancel returned the key to idle: leading");
    CHECK(submit(l, 1, 6, 180) == SLUICE_SCHEDULED, "kept");
    CHECK(sluice_limiter_flush(l, sluice_key_u64(1), 190) == 1, "flush");
    expect_event(3, SLUICE_EVENT_EMIT, 6, false, 0);
    CHECK(submit(l, 2, 7, 200) == SLUICE_EMITTED, "other key");
    CHECK(submit(l, 2, 8, 210) == SLUICE_SCHEDULED, "kept");
    CHECK(sluice_limiter_close(l, 220, SLUICE_CLOSE_DISCARD) == 0, "close");
    expect_event(4, SLUICE_EVENT_DISCARD, 8, false, 0);
    CHECK(g.n == 5, "%zu events", g.n);
    /* 8 tokens: 3 admitted + 5 scheduled; of those 2 emitted later, 2 dropped, 1 discarded */
    expect_totals(l, 3, 5, 2, 2, 1, "at the end");
    sluice_limiter_free(l);

    /* pick first: the new token is dropped at its call, the kept one has no successor */
    l = make(sluice_throttle(100, false, true, SLUICE_PICK_FIRST));
    CHECK(submit(l, 1, 1, 0) == SLUICE_SCHEDULED, "kept");
    CHECK(submit(l, 1, 2, 10) == SLUICE_DROPPED, "dropped at its call");
    CHECK(g.n == 0, "no event for a drop at the call");
    expect_totals(l, 0, 1, 0, 1, 0, "pick first");
    CHECK(sluice_limiter_close(l, 20, SLUICE_CLOSE_DRAIN) == 0, "close drain");
    expect_event(0, SLUICE_EVENT_EMIT, 1, false, 0);
    expect_totals(l, 0, 1, 1, 1, 0, "drained");
    sluice_limiter_free(l);

    /* window suppression without trailing: dropped at the call, counted once */
    l = make(sluice_throttle(100, true, false, SLUICE_PICK_LATEST));
    CHECK(submit(l, 1, 1, 0) == SLUICE_EMITTED && submit(l, 1, 2, 5) == SLUICE_DROPPED, "leading only");
    expect_totals(l, 1, 0, 0, 1, 0, "leading only");
    sluice_limiter_free(l);

    /* audit: every replaced value names its successor */
    l = make(sluice_audit(100));
    CHECK(submit(l, 1, 1, 0) == SLUICE_SCHEDULED && submit(l, 1, 2, 10) == SLUICE_SCHEDULED &&
              submit(l, 1, 3, 20) == SLUICE_SCHEDULED,
          "audit");
    expect_event(0, SLUICE_EVENT_DROP, 1, true, 2);
    expect_event(1, SLUICE_EVENT_DROP, 2, true, 3);
    sluice_limiter_free(l); /* free discards 3 */
    expect_event(2, SLUICE_EVENT_DISCARD, 3, false, 0);

    /* debounce trailing, maxWait: superseded values name the successor */
    l = make(sluice_debounce(100, false, true, 150));
    CHECK(submit(l, 1, 1, 0) == SLUICE_SCHEDULED && submit(l, 1, 2, 50) == SLUICE_SCHEDULED, "debounce");
    expect_event(0, SLUICE_EVENT_DROP, 1, true, 2);
    CHECK(sluice_limiter_advance(l, 150, 0) >= 1, "maxWait");
    expect_event(1, SLUICE_EVENT_EMIT, 2, false, 0);
    expect_totals(l, 0, 2, 1, 1, 0, "debounce");
    sluice_limiter_free(l);

    /* debounce leading only: drops at the call */
    l = make(sluice_debounce(100, true, false, -1));
    CHECK(submit(l, 1, 1, 0) == SLUICE_EMITTED && submit(l, 1, 2, 50) == SLUICE_DROPPED, "debounce leading");
    expect_totals(l, 1, 0, 0, 1, 0, "debounce leading");
    sluice_limiter_free(l);

    /* rate and pass-through */
    l = make(sluice_rate(1, 100, 1));
    CHECK(submit(l, 1, 1, 0) == SLUICE_EMITTED && submit(l, 1, 2, 1) == SLUICE_DROPPED, "rate");
    sluice_decision_t d;
    CHECK(sluice_limiter_submit_cost(l, sluice_key_u64(2), 3, 2, 1, &d) == 0 && d.kind == SLUICE_DROPPED, "never");
    expect_totals(l, 1, 0, 0, 2, 0, "rate");
    sluice_limiter_free(l);
    l = make(sluice_throttle(0, true, true, SLUICE_PICK_LATEST));
    CHECK(submit(l, 1, 1, 0) == SLUICE_EMITTED && submit(l, 1, 2, 0) == SLUICE_EMITTED, "pass-through");
    expect_totals(l, 2, 0, 0, 0, 0, "pass-through");
    sluice_limiter_free(l);
}

/* sluice_limiter_new() and sluice_config_explain() agree, rule by rule. */
static void expect_rule(const sluice_config_t *c, int code, const char *needle) {
    sluice_limiter_t *l = NULL;
    int rc = sluice_limiter_new(&l, c);
    const char *why = sluice_config_explain(c);
    if (code == 0) {
        CHECK(rc == 0 && l && why == NULL, "valid configuration refused: %d, %s", rc, why ? why : "(null)");
        sluice_limiter_free(l);
        return;
    }
    CHECK(rc == code && l == NULL, "expected %d (%s), got %d", code, needle, rc);
    CHECK(why && strstr(why, needle), "explanation \"%s\" does not name \"%s\"", why ? why : "(null)", needle);
    if (c && strncmp(needle, "policy.", 7) == 0)
        CHECK(sluice_policy_validate(&c->policy) == code, "sluice_policy_validate disagrees on %s", needle);
}

static void ignore(void *user, const sluice_event_t *e) {
    (void)user;
    (void)e;
}

static void test_config_rules(void) {
    CHECK(sluice_config_explain(NULL) && strstr(sluice_config_explain(NULL), "NULL"), "NULL configuration");
    sluice_config_t c;
    memset(&c, 0, sizeof c);
    c.on_event = ignore;
    expect_rule(&c, SLUICE_EINVAL, "policy.kind");
    c.policy = sluice_throttle(-1, true, true, SLUICE_PICK_LATEST);
    expect_rule(&c, SLUICE_EINVAL, "policy.interval_ns is negative");
    c.policy = sluice_audit(SLUICE_DURATION_MAX + 1);
    expect_rule(&c, SLUICE_ERANGE, "policy.interval_ns is above SLUICE_DURATION_MAX");
    c.policy = sluice_throttle(10, false, false, SLUICE_PICK_LATEST);
    expect_rule(&c, SLUICE_EINVAL, "policy.leading and policy.trailing are both false");
    c.policy = sluice_throttle(10, true, true, (sluice_pick_t)7);
    expect_rule(&c, SLUICE_EINVAL, "policy.pick");
    c.policy = sluice_debounce(10, false, false, -1);
    expect_rule(&c, SLUICE_EINVAL, "a debounce needs at least one edge");
    c.policy = sluice_debounce(10, false, true, 9);
    expect_rule(&c, SLUICE_EINVAL,
                "policy.max_wait_ns is below policy.interval_ns: a debounce maxWait must be at least its interval");
    c.policy = sluice_debounce(10, false, true, 10);
    expect_rule(&c, 0, "");
    c.policy = sluice_debounce(10, false, true, SLUICE_DURATION_MAX + 1);
    expect_rule(&c, SLUICE_ERANGE, "policy.max_wait_ns is above SLUICE_DURATION_MAX");
    c.policy = sluice_rate(0, 10, 0);
    expect_rule(&c, SLUICE_EINVAL, "policy.limit");
    c.policy = sluice_rate(1, 0, 0);
    expect_rule(&c, SLUICE_EINVAL, "policy.per_ns");
    c.policy = sluice_rate(SLUICE_RATE_MAX + 1, 10, 0);
    expect_rule(&c, SLUICE_ERANGE, "policy.limit is above SLUICE_RATE_MAX");
    c.policy = sluice_rate(1, 10, SLUICE_RATE_MAX + 1);
    expect_rule(&c, SLUICE_ERANGE, "policy.burst is above SLUICE_RATE_MAX");
    c.policy = sluice_rate(1, SLUICE_DURATION_MAX + 1, 0);
    expect_rule(&c, SLUICE_ERANGE, "policy.per_ns is above SLUICE_DURATION_MAX");

    c.policy = sluice_throttle(10, true, true, SLUICE_PICK_LATEST);
    c.tick_ns = SLUICE_TICK_MAX_NS;
    expect_rule(&c, 0, "");
    c.tick_ns = SLUICE_TICK_MAX_NS + 1;
    expect_rule(&c, SLUICE_EINVAL, "tick_ns");
    c.tick_ns = 0;
    sluice_allocator_t half = { NULL, NULL, NULL };
    c.allocator = &half;
    expect_rule(&c, SLUICE_EINVAL, "allocator");
    c.allocator = NULL;

    /* on_event: required exactly when the policy can keep a token */
    c.on_event = NULL;
    static const struct {
        sluice_policy_t p;
        bool needs;
    } cases[] = {
        { { SLUICE_THROTTLE, 10, true, true, SLUICE_PICK_LATEST, false, 0, 0, 0, 0 }, true },
        { { SLUICE_THROTTLE, 10, false, true, SLUICE_PICK_FIRST, false, 0, 0, 0, 0 }, true },
        { { SLUICE_THROTTLE, 10, true, false, SLUICE_PICK_LATEST, false, 0, 0, 0, 0 }, false },
        { { SLUICE_THROTTLE, 0, true, true, SLUICE_PICK_LATEST, false, 0, 0, 0, 0 }, false },
        { { SLUICE_AUDIT, 10, false, true, SLUICE_PICK_LATEST, false, 0, 0, 0, 0 }, true },
        { { SLUICE_AUDIT, 0, false, true, SLUICE_PICK_LATEST, false, 0, 0, 0, 0 }, false },
        { { SLUICE_DEBOUNCE, 10, true, true, SLUICE_PICK_LATEST, true, 20, 0, 0, 0 }, true },
        { { SLUICE_DEBOUNCE, 10, true, false, SLUICE_PICK_LATEST, false, 0, 0, 0, 0 }, false },
        { { SLUICE_RATE, 0, false, false, SLUICE_PICK_LATEST, false, 0, 5, 100, 0 }, false },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        c.policy = cases[i].p;
        expect_rule(&c, cases[i].needs ? SLUICE_EINVAL : 0, "on_event is NULL");
    }
}

static void test_error_list(void) {
    size_t n = sluice_error_count();
    CHECK(n >= 9 && sluice_error_code(0) == SLUICE_OK, "%zu codes", n);
    for (size_t i = 0; i < n; i++) {
        int code = sluice_error_code(i);
        CHECK(code <= 0, "code %d", code);
        CHECK(strcmp(sluice_strerror(code), "unknown error") != 0, "code %d has no message", code);
        for (size_t j = 0; j < i; j++) CHECK(sluice_error_code(j) != code, "code %d listed twice", code);
    }
    CHECK(sluice_error_code(n) == 1, "past the end");
    /* the list is in order of value, success first */
    for (size_t i = 1; i < n; i++)
        CHECK(sluice_error_code(i) < sluice_error_code(i - 1), "order of the list at %zu", i);
    /* every module's codes are in the one list: traces and the fleet too */
    const int modules[] = { SLUICE_ESYNTAX,   SLUICE_ELIMIT,  SLUICE_EPROTO,    SLUICE_ENOTCONN,     SLUICE_ETIMEDOUT,
                            SLUICE_EAUTH,     SLUICE_ENOPERM, SLUICE_ETLS,      SLUICE_EOOM,         SLUICE_EREADONLY,
                            SLUICE_EBADVALUE, SLUICE_EREDIS,  SLUICE_ENOMASTER, SLUICE_ECLUSTERDOWN, SLUICE_ELEASE };
    for (size_t i = 0; i < sizeof modules / sizeof modules[0]; i++) {
        bool listed = false;
        for (size_t j = 0; j < n; j++) listed = listed || sluice_error_code(j) == modules[i];
        CHECK(listed, "code %d of a module is not in the list", modules[i]);
    }
}

int main(void) {
    test_totals_and_successors();
    test_config_rules();
    test_error_list();
    printf("test_core_api: ok\n");
    return 0;
}
