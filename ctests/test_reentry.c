/*
 * test_reentry.c — re-entrancy and teardown from inside event callbacks
 * (issue 6, part 6).
 *
 * From inside an event callback the test calls, on the same limiter:
 * submit (same key and other keys, thousands of new keys so the index and
 * the slab grow mid-call), cancel, flush, pending, advance, close(drain),
 * close(discard) and sluice_limiter_free — from events raised by advance,
 * submit (a superseded value), flush, cancel, close and free itself, and
 * nested 50 deep. Each follows the spec: a call from a callback is handled
 * after the transition that emitted has completed and respects the window
 * (a submit from a trailing emission's callback is SCHEDULED for the end of
 * the new window, never EMITTED at once as RxJS would); a free requested
 * from a callback is carried out when the outermost call returns, and until
 * then every call fails with SLUICE_ECLOSED.
 *
 * Token accounting is exact throughout: every token submitted is reported
 * exactly once — by its decision (EMITTED / DROPPED) or, when SCHEDULED, by
 * exactly one event. With re-entrancy that event may arrive before the
 * submit that scheduled the token has returned (a callback superseded or
 * cancelled it during the same call); the decision is then still
 * SCHEDULED, and the token is counted once.
 *
 * Nothing is used after free: run under ASan + UBSan in `make sanitize`
 * (the limiter's memory goes through ctests/support/fault_alloc, which
 * also catches double or foreign frees and leaks).
 */
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sluice.h"
#include "support/fault_alloc.h"

#define TEST_NAME "test_reentry"
#include "support/check.h"

#define MS UINT64_C(1000000)

/* ------------------------------------------------------------------ token accounting */

enum { T_NONE, T_IN_FLIGHT, T_EARLY_EVENT, T_HELD, T_DONE };
#define MAXTOK 200000
static uint8_t g_tok[MAXTOK];
static uint64_t g_next_tok;

static uint64_t tok_new(void) {
    CHECK(g_next_tok + 1 < MAXTOK, "too many tokens");
    return ++g_next_tok;
}

static void tok_event(uint64_t t) {
    CHECK(t >= 1 && t <= g_next_tok, "event for unknown token %" PRIu64, t);
    if (g_tok[t] == T_HELD)
        g_tok[t] = T_DONE;
    else if (g_tok[t] == T_IN_FLIGHT)
        g_tok[t] = T_EARLY_EVENT; /* reported before its submit returned */
    else
        die("token %" PRIu64 " reported twice or never held (state %d)", t, g_tok[t]);
}

/* submit with accounting; returns rc */
static int sub(sluice_limiter_t *l, uint64_t key, uint64_t tok, uint64_t now, sluice_decision_t *d) {
    sluice_decision_t dd = { 0 };
    CHECK(g_tok[tok] == T_NONE, "token reused");
    g_tok[tok] = T_IN_FLIGHT;
    int rc = sluice_limiter_submit(l, sluice_key_u64(key), tok, now, &dd);
    if (rc != 0) {
        CHECK(g_tok[tok] == T_IN_FLIGHT, "token %" PRIu64 " reported although its submit failed (%d)", tok, rc);
        g_tok[tok] = T_DONE;
    } else if (dd.kind == SLUICE_SCHEDULED) {
        g_tok[tok] = g_tok[tok] == T_EARLY_EVENT ? T_DONE : T_HELD;
    } else {
        CHECK(g_tok[tok] == T_IN_FLIGHT, "token %" PRIu64 " got decision %d and an event", tok, dd.kind);
        g_tok[tok] = T_DONE;
    }
    if (d) *d = dd;
    return rc;
}

static void tok_all_done(const char *scenario) {
    for (uint64_t t = 1; t <= g_next_tok; t++)
        CHECK(g_tok[t] == T_DONE || g_tok[t] == T_NONE, "%s: token %" PRIu64 " not accounted for (state %d)", scenario,
              t, g_tok[t]);
}

/* ------------------------------------------------------------------ events and actions */

typedef struct {
    int kind;
    uint64_t key, token, at;
    int depth;
} rec_t;

#define MAXEV 200000
static rec_t g_ev[MAXEV];
static size_t g_nev;
static int g_depth;

typedef void (*action_fn)(sluice_limiter_t *l, const sluice_event_t *e);
static action_fn g_action;
static sluice_limiter_t *g_lim;

static fault_alloc_t g_fa;

/* Callbacks reach the limiter through g_lim (the limiter under test). */
static void on_event_g(void *user, const sluice_event_t *e) {
    (void)user;
    CHECK(e->key.kind == SLUICE_KEY_U64, "key kind");
    CHECK(g_nev < MAXEV, "too many events");
    tok_event(e->token);
    rec_t r = { e->kind, e->key.u64, e->token, e->at, g_depth };
    g_ev[g_nev++] = r;
    if (g_action) {
        g_depth++;
        g_action(g_lim, e);
        g_depth--;
    }
}

static sluice_limiter_t *lim(sluice_policy_t p) {
    fault_alloc_init(&g_fa);
    memset(g_tok, 0, sizeof g_tok);
    g_next_tok = 0;
    g_nev = 0;
    g_action = NULL;
    g_depth = 0;
    sluice_config_t c;
    memset(&c, 0, sizeof c);
    c.policy = p;
    c.tick_ns = MS;
    c.on_event = on_event_g;
    c.allocator = fault_alloc_hook(&g_fa);
    sluice_limiter_t *l;
    CHECK(sluice_limiter_new(&l, &c) == 0, "new");
    g_lim = l;
    return l;
}

/* Frees (if not freed already) and checks that nothing is left. */
static void finish(sluice_limiter_t *l, const char *scenario) {
    g_action = NULL;
    if (l) {
        CHECK(sluice_limiter_check(l) == 0, "%s: check before free", scenario);
        sluice_limiter_free(l);
    }
    g_lim = NULL;
    tok_all_done(scenario);
    if (!fault_alloc_clean(&g_fa)) {
        fault_alloc_report(&g_fa, stderr, 10);
        die("%s: allocator not clean after free", scenario);
    }
    fault_alloc_destroy(&g_fa);
    printf("  %-70s ok (%zu events)\n", scenario, g_nev);
}

static const rec_t *find_ev(uint64_t tok) {
    for (size_t i = 0; i < g_nev; i++)
        if (g_ev[i].token == tok) return &g_ev[i];
    return NULL;
}

/* ------------------------------------------------------------------ scenarios */

static sluice_decision_t g_inner_d;
static int g_inner_rc, g_inner_pending, g_fired;
static uint64_t g_inner_tok;

/* R1: submit to the same key from a trailing emission's callback */
static void act_submit_same(sluice_limiter_t *l, const sluice_event_t *e) {
    if (g_fired++ || e->kind != SLUICE_EVENT_EMIT) return;
    g_inner_tok = tok_new();
    g_inner_rc = sub(l, e->key.u64, g_inner_tok, e->at, &g_inner_d);
    g_inner_pending = sluice_limiter_pending(l, sluice_key_u64(e->key.u64), e->at);
    CHECK(sluice_limiter_check(l) == 0, "check inside the callback");
}

static void r1_same_key(const char *name, sluice_policy_t p, uint64_t first_sched_at) {
    sluice_limiter_t *l = lim(p);
    sluice_decision_t d;
    uint64_t a = tok_new(), b = tok_new();
    CHECK(sub(l, 7, a, 0, &d) == 0, "a");
    if (p.kind == SLUICE_THROTTLE) CHECK(sub(l, 7, b, 10 * MS, &d) == 0 && d.kind == SLUICE_SCHEDULED, "b");
    g_fired = 0;
    g_action = act_submit_same;
    CHECK(sluice_limiter_advance(l, first_sched_at, 0) >= 1, "advance");
    CHECK(g_fired >= 1, "%s: no emission", name);
    CHECK(g_inner_rc == 0, "%s: submit from the callback returned %d", name, g_inner_rc);
    /* the window is respected: the emission opened (throttle) or the idle
     * key starts (audit, debounce) a window ending 100 ms later */
    CHECK(g_inner_d.kind == SLUICE_SCHEDULED && g_inner_d.at == first_sched_at + 100 * MS,
          "%s: submit from the emission's callback: decision %d at %" PRIu64 ", expected SCHEDULED at %" PRIu64, name,
          g_inner_d.kind, g_inner_d.at, first_sched_at + 100 * MS);
    CHECK(g_inner_pending == 1, "%s: pending() inside the callback = %d", name, g_inner_pending);
    g_action = NULL;
    CHECK(sluice_limiter_advance(l, first_sched_at + 100 * MS, 0) >= 1, "advance");
    const rec_t *r = find_ev(g_inner_tok);
    CHECK(r && r->kind == SLUICE_EVENT_EMIT && r->at == first_sched_at + 100 * MS,
          "%s: inner token emitted at the window end", name);
    CHECK(sluice_limiter_advance(l, first_sched_at + 400 * MS, 0) >= 0, "advance");
    CHECK(sluice_limiter_check(l) == 0, "check");
    finish(l, name);
}

/* R2: many new keys from callbacks while an advance walks 3000 due timers */
static uint64_t g_spawned;
static void act_spawn(sluice_limiter_t *l, const sluice_event_t *e) {
    if (e->key.u64 >= 100000) return; /* only the first generation spawns */
    sluice_decision_t d;
    uint64_t t = tok_new();
    CHECK(sub(l, e->key.u64 + 100000, t, e->at, &d) == 0 && d.kind == SLUICE_SCHEDULED && d.at == e->at + 10 * MS,
          "spawned key");
    /* and touch another first-generation key: timers first fires it from
     * here (even keys only, so the nesting stays one level deep) */
    if (e->key.u64 % 2 == 0 && e->key.u64 + 1 < 3000)
        CHECK(sluice_limiter_pending(l, sluice_key_u64(e->key.u64 + 1), e->at) >= 0, "pending");
    g_spawned++;
}

static void r2_grow_inside(void) {
    sluice_limiter_t *l = lim(sluice_audit(10 * (int64_t)MS));
    for (uint64_t k = 0; k < 3000; k++) CHECK(sub(l, k, tok_new(), 0, NULL) == 0, "arm");
    g_action = act_spawn;
    g_spawned = 0;
    int64_t n = sluice_limiter_advance(l, 10 * MS, 0);
    CHECK(g_spawned == 3000, "spawned %" PRIu64, g_spawned);
    CHECK(n >= 1 && n <= 3000, "advance handled %" PRId64 " (the rest fired by the callbacks' pending())", n);
    sluice_stats_t st;
    CHECK(sluice_limiter_stats(l, &st) == 0 && st.live_keys == 3000 && st.pending == 3000, "3000 new keys pending");
    CHECK(sluice_limiter_check(l) == 0, "check");
    g_action = NULL;
    CHECK(sluice_limiter_advance(l, 20 * MS, 0) == 3000, "second generation fires");
    for (size_t i = 0; i < g_nev; i++) {
        CHECK(g_ev[i].kind == SLUICE_EVENT_EMIT, "kind");
        CHECK(g_ev[i].at == (g_ev[i].key >= 100000 ? 20 : 10) * MS, "event time");
    }
    CHECK(g_nev == 6000, "events %zu", g_nev);
    finish(l, "3000 timers each submitting a new key from its callback (growth)");
}

/* R3/R4/R5: cancel, flush, pending from callbacks */
static int g_mode;
static int g_rc1, g_rc2, g_rc3;
static void act_keyops(sluice_limiter_t *l, const sluice_event_t *e) {
    if (g_fired++) return;
    uint64_t now = e->at;
    switch (g_mode) {
    case 0: /* cancel the emitting key (its new window, nothing pending) */
        g_rc1 = sluice_limiter_cancel(l, sluice_key_u64(e->key.u64), now);
        break;
    case 1: /* cancel another pending key: a nested DROP */
        g_rc1 = sluice_limiter_cancel(l, sluice_key_u64(2), now);
        break;
    case 2: /* flush another pending key: a nested EMIT at now */
        g_rc1 = sluice_limiter_flush(l, sluice_key_u64(2), now);
        break;
    case 3: /* flush the emitting key: nothing pending, back to idle */
        g_rc1 = sluice_limiter_flush(l, sluice_key_u64(e->key.u64), now);
        break;
    case 4: /* pending of self (0: just emitted) and of another key (1) */
        g_rc1 = sluice_limiter_pending(l, sluice_key_u64(e->key.u64), now);
        g_rc2 = sluice_limiter_pending(l, sluice_key_u64(2), now);
        g_rc3 = sluice_limiter_pending(l, sluice_key_u64(99), now);
        break;
    }
    CHECK(sluice_limiter_check(l) == 0, "check in callback");
}

static void r3_keyops(void) {
    static const char *names[] = {
        "cancel of the emitting key from its EMIT callback",
        "cancel of another pending key from an EMIT callback",
        "flush of another pending key from an EMIT callback",
        "flush of the emitting key from its EMIT callback",
        "pending() of self, another and an unknown key from a callback",
    };
    for (g_mode = 0; g_mode < 5; g_mode++) {
        sluice_limiter_t *l = lim(sluice_throttle(100 * (int64_t)MS, true, true, SLUICE_PICK_LATEST));
        sluice_decision_t d;
        uint64_t a = tok_new(), b = tok_new(), c2 = tok_new(), c3 = tok_new();
        CHECK(sub(l, 1, a, 0, &d) == 0 && d.kind == SLUICE_EMITTED, "a");
        CHECK(sub(l, 1, b, 10 * MS, &d) == 0 && d.kind == SLUICE_SCHEDULED && d.at == 100 * MS, "b");
        CHECK(sub(l, 2, c2, 50 * MS, &d) == 0 && d.kind == SLUICE_EMITTED, "c");
        CHECK(sub(l, 2, c3, 60 * MS, &d) == 0 && d.kind == SLUICE_SCHEDULED && d.at == 150 * MS, "c3");
        g_fired = 0;
        g_action = act_keyops;
        g_rc1 = g_rc2 = g_rc3 = -999;
        CHECK(sluice_limiter_advance(l, 100 * MS, 0) == 1, "advance to 100 ms");
        g_action = NULL;
        const rec_t *rb = find_ev(b), *rc3 = find_ev(c3);
        CHECK(rb && rb->kind == SLUICE_EVENT_EMIT && rb->at == 100 * MS && rb->depth == 0, "b emitted at 100 ms");
        sluice_decision_t d2;
        switch (g_mode) {
        case 0:
        case 3:
            CHECK(g_rc1 == 0, "%s: returned %d", names[g_mode], g_rc1);
            /* key 1 is idle: the next call is a leading edge */
            CHECK(sub(l, 1, tok_new(), 100 * MS, &d2) == 0 && d2.kind == SLUICE_EMITTED, "%s: not a leading edge",
                  names[g_mode]);
            break;
        case 1:
            CHECK(g_rc1 == 1 && rc3 && rc3->kind == SLUICE_EVENT_DROP && rc3->at == 100 * MS && rc3->depth == 1, "%s",
                  names[g_mode]);
            break;
        case 2:
            CHECK(g_rc1 == 1 && rc3 && rc3->kind == SLUICE_EVENT_EMIT && rc3->at == 100 * MS && rc3->depth == 1, "%s",
                  names[g_mode]);
            break;
        case 4:
            CHECK(g_rc1 == 0 && g_rc2 == 1 && g_rc3 == 0, "%s: %d %d %d", names[g_mode], g_rc1, g_rc2, g_rc3);
            break;
        }
        if (g_mode == 0 || g_mode == 3 || g_mode == 4) {
            /* key 1's new window was not disturbed (modes 4) / key 2 still due at 150 ms */
            CHECK(sluice_limiter_advance(l, 150 * MS, 0) >= 1, "advance");
            rc3 = find_ev(c3);
            CHECK(rc3 && rc3->kind == SLUICE_EVENT_EMIT && rc3->at == 150 * MS, "c3 at 150 ms");
        }
        CHECK(sluice_limiter_check(l) == 0, "check");
        finish(l, names[g_mode]);
    }
}

/* R-supersede: a DROP raised inside submit (pick latest) re-enters */
static void act_on_drop(sluice_limiter_t *l, const sluice_event_t *e) {
    if (e->kind != SLUICE_EVENT_DROP || g_fired++) return;
    switch (g_mode) {
    case 0: /* submit to the same key: supersedes the value whose submit is still running */
        g_inner_tok = tok_new();
        g_inner_rc = sub(l, e->key.u64, g_inner_tok, e->at, &g_inner_d);
        break;
    case 1: /* cancel the same key: drops that value */
        g_inner_rc = sluice_limiter_cancel(l, sluice_key_u64(e->key.u64), e->at);
        break;
    case 2: /* submit to another key */
        g_inner_tok = tok_new();
        g_inner_rc = sub(l, 555, g_inner_tok, e->at, &g_inner_d);
        break;
    }
}

static void r_supersede(void) {
    static const char *names[] = {
        "submit to the same key from a DROP raised inside submit",
        "cancel of the same key from a DROP raised inside submit",
        "submit to another key from a DROP raised inside submit",
    };
    for (g_mode = 0; g_mode < 3; g_mode++) {
        sluice_limiter_t *l = lim(sluice_throttle(100 * (int64_t)MS, false, true, SLUICE_PICK_LATEST));
        sluice_decision_t d;
        uint64_t a = tok_new(), b = tok_new();
        CHECK(sub(l, 1, a, 0, &d) == 0 && d.kind == SLUICE_SCHEDULED, "a");
        g_fired = 0;
        g_action = act_on_drop;
        CHECK(sub(l, 1, b, 5 * MS, &d) == 0, "b");
        g_action = NULL;
        /* b's decision is SCHEDULED (the transition that took it completed
         * before the callback ran) */
        CHECK(d.kind == SLUICE_SCHEDULED && d.at == 100 * MS, "%s: b's decision %d", names[g_mode], d.kind);
        const rec_t *ra = find_ev(a), *rbb = find_ev(b);
        CHECK(ra && ra->kind == SLUICE_EVENT_DROP && ra->at == 5 * MS, "a dropped by b");
        switch (g_mode) {
        case 0:
            /* the inner call saw b pending and superseded it: b's DROP came
             * before b's own submit returned; the inner value is pending */
            CHECK(g_inner_rc == 0 && g_inner_d.kind == SLUICE_SCHEDULED && g_inner_d.at == 100 * MS, "inner");
            CHECK(rbb && rbb->kind == SLUICE_EVENT_DROP && rbb->depth == 1, "b dropped by the inner submit");
            CHECK(sluice_limiter_advance(l, 100 * MS, 0) >= 1, "advance");
            CHECK(find_ev(g_inner_tok) && find_ev(g_inner_tok)->kind == SLUICE_EVENT_EMIT, "inner emitted");
            break;
        case 1:
            CHECK(g_inner_rc == 1 && rbb && rbb->kind == SLUICE_EVENT_DROP && rbb->depth == 1, "b cancelled");
            CHECK(sluice_limiter_pending(l, sluice_key_u64(1), 6 * MS) == 0, "nothing pending");
            break;
        case 2:
            CHECK(g_inner_rc == 0 && g_inner_d.kind == SLUICE_SCHEDULED, "other key scheduled");
            CHECK(sluice_limiter_advance(l, 200 * MS, 0) >= 2, "advance");
            CHECK(find_ev(b) && find_ev(b)->kind == SLUICE_EVENT_EMIT && find_ev(b)->at == 100 * MS, "b emitted");
            break;
        }
        CHECK(sluice_limiter_check(l) == 0, "check");
        finish(l, names[g_mode]);
    }
}

/* R6/R7: close from a callback during advance */
static int g_accepted_while_closing;
static void act_close(sluice_limiter_t *l, const sluice_event_t *e) {
    if (e->key.u64 == 999) return;
    if (g_fired++) {
        /* later events: the close's own timers-first emissions (the close has
         * not taken effect yet: a submit may be accepted, and is then drained
         * or discarded by the close like any pending value) or its drain
         * (closed: SLUICE_ECLOSED). Either way the token is accounted once. */
        int rc = sub(l, 999, tok_new(), e->at, NULL);
        CHECK(rc == 0 || rc == SLUICE_ECLOSED, "submit while closing: %d", rc);
        if (rc == 0) g_accepted_while_closing++;
        return;
    }
    g_inner_rc = sluice_limiter_close(l, e->at, (sluice_close_mode_t)g_mode);
    CHECK(sluice_limiter_close(l, e->at, (sluice_close_mode_t)g_mode) == SLUICE_ECLOSED, "second close");
    CHECK(sluice_limiter_submit(l, sluice_key_u64(5), 0, e->at, NULL) == SLUICE_ECLOSED, "submit after close");
    CHECK(sluice_limiter_flush(l, sluice_key_u64(5), e->at) == SLUICE_ECLOSED, "flush after close");
    CHECK(sluice_limiter_advance(l, e->at, 0) == SLUICE_ECLOSED, "advance after close");
}

static void r_close(void) {
    for (g_mode = SLUICE_CLOSE_DRAIN; g_mode <= SLUICE_CLOSE_DISCARD; g_mode++) {
        sluice_limiter_t *l = lim(sluice_audit(100 * (int64_t)MS));
        /* keys 0..9 due at 100..109 ms; keys 10..19 due at 200 ms */
        for (uint64_t k = 0; k < 10; k++) CHECK(sub(l, k, tok_new(), k * MS, NULL) == 0, "due");
        for (uint64_t k = 10; k < 20; k++) CHECK(sub(l, k, tok_new(), 100 * MS, NULL) == 0, "later");
        g_fired = 0;
        g_accepted_while_closing = 0;
        g_action = act_close;
        int64_t n = sluice_limiter_advance(l, 150 * MS, 0);
        g_action = NULL;
        CHECK(n >= 1, "advance returned %" PRId64, n);
        CHECK(g_inner_rc == 0, "close from callback returned %d", g_inner_rc);
        /* timers first: every due key emitted at its own deadline; the others
         * drained / discarded at the latest time seen (the advance's 150 ms) */
        for (size_t i = 0; i < g_nev; i++) {
            const rec_t *r = &g_ev[i];
            if (r->key == 999 && r->kind == SLUICE_EVENT_DROP) {
                CHECK(r->at == 150 * MS, "key 999 superseded at %" PRIu64, r->at);
            } else if (r->key < 10) {
                CHECK(r->kind == SLUICE_EVENT_EMIT && r->at == 100 * MS + r->key * MS,
                      "due key %" PRIu64 ": kind %d at %" PRIu64, r->key, r->kind, r->at);
            } else {
                CHECK(r->kind == (g_mode == SLUICE_CLOSE_DRAIN ? SLUICE_EVENT_EMIT : SLUICE_EVENT_DISCARD) &&
                          r->at == 150 * MS,
                      "later key %" PRIu64 ": kind %d at %" PRIu64, r->key, r->kind, r->at);
            }
        }
        CHECK(g_nev == 20 + (size_t)g_accepted_while_closing, "events %zu (%d accepted while closing)", g_nev,
              g_accepted_while_closing);
        CHECK(sluice_limiter_submit(l, sluice_key_u64(1), 0, 200 * MS, NULL) == SLUICE_ECLOSED, "closed");
        CHECK(sluice_limiter_next_deadline(l) == UINT64_MAX, "no deadline after close");
        CHECK(sluice_limiter_check(l) == 0, "check");
        finish(l, g_mode == SLUICE_CLOSE_DRAIN ? "close(drain) from an EMIT callback during advance"
                                               : "close(discard) from an EMIT callback during advance");
    }
}

/* R8: advance from a callback */
static void act_advance(sluice_limiter_t *l, const sluice_event_t *e) {
    if (g_fired++) return;
    g_inner_rc = (int)sluice_limiter_advance(l, 150 * MS, 0);
    (void)e;
}

static void r_advance(void) {
    sluice_limiter_t *l = lim(sluice_audit(100 * (int64_t)MS));
    for (uint64_t k = 0; k < 60; k++) CHECK(sub(l, k, tok_new(), k * MS, NULL) == 0, "arm");
    g_fired = 0;
    g_action = act_advance;
    int64_t n = sluice_limiter_advance(l, 120 * MS, 0);
    g_action = NULL;
    CHECK(n >= 1 && g_inner_rc >= 1, "outer %" PRId64 ", inner %d", n, g_inner_rc);
    CHECK(n + g_inner_rc == 51, "outer %" PRId64 " + inner %d transitions, expected the 51 deadlines <= 150 ms", n,
          g_inner_rc);
    for (size_t i = 0; i < g_nev; i++)
        CHECK(g_ev[i].kind == SLUICE_EVENT_EMIT && g_ev[i].at == 100 * MS + g_ev[i].key * MS && g_ev[i].at <= 150 * MS,
              "key %" PRIu64 " at %" PRIu64, g_ev[i].key, g_ev[i].at);
    CHECK(g_nev == 51, "events %zu", g_nev);
    CHECK(sluice_limiter_check(l) == 0, "check");
    CHECK(sluice_limiter_advance(l, 200 * MS, 0) == 9, "the rest");
    finish(l, "advance to a later time from an EMIT callback during advance");
}

/* R9: free from callbacks */
static int g_where;
static void act_free(sluice_limiter_t *l, const sluice_event_t *e) {
    if (g_fired++) {
        /* events after the free request (the discards): calls fail */
        CHECK(sluice_limiter_submit(l, sluice_key_u64(4242), 0, e->at, NULL) == SLUICE_ECLOSED, "submit while dying");
        if (g_where == 5) sluice_limiter_free(l); /* free again from a DISCARD callback */
        return;
    }
    sluice_limiter_free(l);
    sluice_limiter_free(l); /* twice: still one release */
    CHECK(sluice_limiter_submit(l, sluice_key_u64(4242), 0, e->at, NULL) == SLUICE_ECLOSED,
          "submit after free request");
    CHECK(sluice_limiter_pending(l, sluice_key_u64(1), e->at) == SLUICE_ECLOSED, "pending after free request");
    CHECK(sluice_limiter_advance(l, e->at, 0) == SLUICE_ECLOSED, "advance after free request");
    CHECK(sluice_limiter_close(l, e->at, SLUICE_CLOSE_DRAIN) == SLUICE_ECLOSED, "close after free request");
    CHECK(sluice_limiter_next_deadline(l) == UINT64_MAX, "next_deadline after free request");
    sluice_stats_t st;
    CHECK(sluice_limiter_stats(l, &st) == 0, "stats still readable until the outermost call returns");
}

static int g_depth2_seen;
static void act_free_depth2(sluice_limiter_t *l, const sluice_event_t *e) {
    if (e->key.u64 == 77 && e->kind == SLUICE_EVENT_DROP && !g_depth2_seen++) {
        CHECK(g_depth == 2, "depth %d", g_depth);
        sluice_limiter_free(l);
        return;
    }
    if (e->key.u64 != 77 && !g_fired++) {
        sluice_decision_t d;
        CHECK(sub(l, 77, tok_new(), e->at, &d) == 0, "inner submit");
        CHECK(sub(l, 77, tok_new(), e->at, &d) == 0 && d.kind == SLUICE_SCHEDULED, "inner submit 2 (its DROP frees)");
    }
}

static void r_free(void) {
    static const char *names[] = {
        "free from an EMIT callback during advance",
        "free from a DROP callback during submit",
        "free from an EMIT callback during flush",
        "free from a DROP callback during cancel",
        "free from an EMIT callback during close(drain)",
        "free again from a DISCARD callback during free",
        "free from a callback two calls deep",
    };
    for (g_where = 0; g_where < 7; g_where++) {
        sluice_limiter_t *l = lim(sluice_throttle(100 * (int64_t)MS, false, true, SLUICE_PICK_LATEST));
        for (uint64_t k = 0; k < 8; k++) CHECK(sub(l, k, tok_new(), k * MS, NULL) == 0, "arm");
        g_fired = 0;
        g_depth2_seen = 0;
        g_action = g_where == 6 ? act_free_depth2 : act_free;
        sluice_decision_t d;
        switch (g_where) {
        case 0: {
            int64_t n = sluice_limiter_advance(l, 103 * MS, 0);
            CHECK(n >= 1, "advance returned %" PRId64 " after a free from its callback", n);
            break;
        }
        case 1: CHECK(sub(l, 3, tok_new(), 50 * MS, &d) == 0 && d.kind == SLUICE_SCHEDULED, "submit"); break;
        case 2: CHECK(sluice_limiter_flush(l, sluice_key_u64(2), 50 * MS) == 1, "flush"); break;
        case 3: CHECK(sluice_limiter_cancel(l, sluice_key_u64(2), 50 * MS) == 1, "cancel"); break;
        case 4: CHECK(sluice_limiter_close(l, 50 * MS, SLUICE_CLOSE_DRAIN) == 0, "close"); break;
        case 5:
            g_fired = 1; /* the first DISCARD frees again */
            sluice_limiter_free(l);
            break;
        case 6: CHECK(sluice_limiter_advance(l, 100 * MS, 0) >= 1, "advance"); break;
        }
        g_action = NULL;
        /* the limiter is gone (the pointer must not be used): every token was reported once */
        for (size_t i = 0; i < g_nev; i++) {
            const rec_t *r = &g_ev[i];
            CHECK(r->kind == SLUICE_EVENT_EMIT || r->kind == SLUICE_EVENT_DROP || r->kind == SLUICE_EVENT_DISCARD,
                  "kind");
        }
        finish(NULL, names[g_where]);
    }
}

/* R10: nesting 50 deep: each DROP triggers a submit that drops again */
static int g_max_depth;
static void act_chain(sluice_limiter_t *l, const sluice_event_t *e) {
    if (e->kind != SLUICE_EVENT_DROP) return;
    if (g_depth > g_max_depth) g_max_depth = g_depth;
    if (g_depth >= 50) return;
    sluice_decision_t d;
    CHECK(sub(l, e->key.u64, tok_new(), e->at, &d) == 0 && d.kind == SLUICE_SCHEDULED, "chain submit");
}

static void r_chain(void) {
    sluice_limiter_t *l = lim(sluice_debounce(100 * (int64_t)MS, false, true, -1));
    CHECK(sub(l, 1, tok_new(), 0, NULL) == 0, "first");
    g_action = act_chain;
    g_max_depth = 0;
    CHECK(sub(l, 1, tok_new(), MS, NULL) == 0, "second");
    g_action = NULL;
    CHECK(g_max_depth == 50, "depth %d", g_max_depth);
    CHECK(g_nev == 50, "drops %zu", g_nev); /* raised at depths 0..49; the callback at depth 50 stops */
    CHECK(sluice_limiter_pending(l, sluice_key_u64(1), MS) == 1, "one value pending");
    CHECK(sluice_limiter_advance(l, 200 * MS, 0) == 1, "it is emitted");
    CHECK(g_ev[g_nev - 1].kind == SLUICE_EVENT_EMIT && g_ev[g_nev - 1].token == g_next_tok,
          "the last value submitted is the one emitted");
    CHECK(sluice_limiter_check(l) == 0, "check");
    finish(l, "a chain of 50 nested submits, each superseding the last");
}

/* Closing and freeing from callbacks of close/free: no call gets through */
static void act_during_close(sluice_limiter_t *l, const sluice_event_t *e) {
    CHECK(sluice_limiter_submit(l, sluice_key_u64(e->key.u64), 0, e->at, NULL) == SLUICE_ECLOSED, "submit");
    CHECK(sluice_limiter_flush(l, sluice_key_u64(e->key.u64), e->at) == SLUICE_ECLOSED, "flush");
    CHECK(sluice_limiter_cancel(l, sluice_key_u64(e->key.u64), e->at) == SLUICE_ECLOSED, "cancel");
    CHECK(sluice_limiter_pending(l, sluice_key_u64(e->key.u64), e->at) == SLUICE_ECLOSED, "pending");
    CHECK(sluice_limiter_advance(l, e->at, 0) == SLUICE_ECLOSED, "advance");
    CHECK(sluice_limiter_close(l, e->at, SLUICE_CLOSE_DISCARD) == SLUICE_ECLOSED, "close");
}

static void r_calls_while_closing(void) {
    for (int mode = SLUICE_CLOSE_DRAIN; mode <= SLUICE_CLOSE_DISCARD + 1; mode++) {
        sluice_limiter_t *l = lim(sluice_audit(100 * (int64_t)MS));
        for (uint64_t k = 0; k < 20; k++) CHECK(sub(l, k, tok_new(), 0, NULL) == 0, "arm");
        g_action = act_during_close;
        if (mode <= SLUICE_CLOSE_DISCARD) {
            CHECK(sluice_limiter_close(l, 10 * MS, (sluice_close_mode_t)mode) == 0, "close");
            CHECK(g_nev == 20, "events");
            finish(l, mode == SLUICE_CLOSE_DRAIN ? "every call from a callback during close(drain): SLUICE_ECLOSED"
                                                 : "every call from a callback during close(discard): SLUICE_ECLOSED");
        } else {
            sluice_limiter_free(l);
            CHECK(g_nev == 20, "events");
            finish(NULL, "every call from a callback during free: SLUICE_ECLOSED");
        }
    }
}

int main(void) {
    printf("test_reentry:\n");
    r1_same_key("submit to the same key from a throttle trailing EMIT",
                sluice_throttle(100 * (int64_t)MS, true, true, SLUICE_PICK_LATEST), 100 * MS);
    r1_same_key("submit to the same key from an audit EMIT", sluice_audit(100 * (int64_t)MS), 100 * MS);
    r1_same_key("submit to the same key from a debounce EMIT", sluice_debounce(100 * (int64_t)MS, false, true, -1),
                100 * MS);
    r1_same_key("submit to the same key from a debounce(maxWait) EMIT",
                sluice_debounce(100 * (int64_t)MS, false, true, 150 * (int64_t)MS), 100 * MS);
    r2_grow_inside();
    r3_keyops();
    r_supersede();
    r_close();
    r_advance();
    r_free();
    r_chain();
    r_calls_while_closing();
    printf("test_reentry: ok\n");
    return 0;
}
