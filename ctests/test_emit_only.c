/*
 * test_emit_only.c — sluice_config_t.emit_only and sluice_limiter_submit_u64().
 *
 * 1. Core, randomized differential: every policy with random options
 *    (throttle leading/trailing/pick, debounce with and without maxWait,
 *    audit, rate; tick sizes, a key cap) runs one random program on three
 *    limiters with the same hash seed:
 *      A  the normal limiter, every call through sluice_limiter_submit_cost();
 *      B  the same configuration with emit_only, its calls spread over
 *         sluice_limiter_submit(), sluice_limiter_submit_u64() and batches of
 *         sluice_limiter_submit_many();
 *      U  the normal limiter again, every cost-1 integer-key call through
 *         sluice_limiter_submit_u64().
 *    The program: calls on integer and byte keys (a few hot keys, costs for
 *    rate, refused costs), times that move on and back, advances, flushes,
 *    cancels, pending(), and at the end close(drain), close(discard) or a
 *    free without close. In some programs B's and U's key indexes switch to
 *    SipHash (as a flood would make them) at random steps. After every step: the same results and decisions
 *    on all three; B's callback has seen exactly A's EMIT events in order
 *    (key, token, time) and never a DROP or DISCARD; U has seen exactly A's
 *    events, every kind; the stats of the three are equal (B counts the
 *    drops and discards it did not report); sluice_limiter_check() passes.
 * 2. Loop layer, on a real loop: the same random calls on two sharded
 *    limiters (REPORT_ALL), one with emit_only, periods of an hour (no timer
 *    is due during the test): each key's EMIT events are the same on both,
 *    the emit_only one's callback never sees DROP or DISCARD (not even an
 *    immediate drop, which REPORT_ALL reports otherwise), and their
 *    counters agree. Then a short real-timer check: a 2 ms debounce under
 *    emit_only emits the last of a burst, never early, and counts the rest
 *    as dropped.
 *
 * Env: SLUICE_EMIT_ONLY_ITERS (random programs, default 1500).
 */
#define TEST_NAME "test_emit_only"
#include "loop_test_util.h"

#include <inttypes.h>

#include "support/check.h"
#include "support/event_copy.h"
/* internals: sluice__table_use_strong_hash(), to run the emit_only and
 * submit_u64 paths on an index switched to SipHash */
#include "limiter-internal.h"

/* ------------------------------------------------------------------ event logs */

struct log {
    struct ev *v;
    size_t n, cap;
    bool emit_only; /* fail on anything but EMIT */
};

static void log_push(struct log *g, const sluice_event_t *e) {
    if (g->n == g->cap) {
        g->cap = g->cap ? g->cap * 2 : 256;
        g->v = realloc(g->v, g->cap * sizeof *g->v);
        CHECK(g->v != NULL, "out of memory");
    }
    ev_copy(&g->v[g->n++], e);
}

static void on_event(void *user, const sluice_event_t *e) {
    struct log *g = user;
    CHECK(!g->emit_only || e->kind == SLUICE_EVENT_EMIT,
          "an emit_only limiter reported event kind %d (token %" PRIu64 ")", (int)e->kind, e->token);
    log_push(g, e);
}

static bool ev_same(const struct ev *a, const struct ev *b, bool all_fields) {
    if (a->kind != b->kind || a->is_u64 != b->is_u64 || a->token != b->token || a->at != b->at) return false;
    if (a->is_u64 ? a->u64 != b->u64 : (a->len != b->len || memcmp(a->bytes, b->bytes, a->len) != 0)) return false;
    if (all_fields && (a->has_successor != b->has_successor || a->successor != b->successor)) return false;
    return true;
}

/* ------------------------------------------------------------------ 1. core differential */

static uint64_t rng = 0x243F6A8885A308D3u;
static uint64_t rnd(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

static const char *byte_keys[] = { "", "a", "user:1", "user:22", "\x00\x01" };
#define NBYTEKEYS 5
#define NU64KEYS 8

static sluice_key_t pick_key(void) {
    uint64_t r = rnd() % 10;
    if (r < 7) return sluice_key_u64(rnd() % NU64KEYS * 0x9E3779B97F4A7C15u); /* a few hot integer keys */
    size_t i = (size_t)(rnd() % NBYTEKEYS);
    return sluice_key_bytes(byte_keys[i], i == 4 ? 2 : strlen(byte_keys[i]));
}

static sluice_policy_t random_policy(const char **name) {
    int64_t W = (int64_t)(1 + rnd() % 20) * 1000000; /* 1..20 ms */
    switch (rnd() % 4) {
    case 0: {
        bool lead = rnd() & 1, trail = rnd() & 1;
        if (!lead && !trail) trail = true;
        *name = "throttle";
        return sluice_throttle(W, lead, trail, (rnd() & 1) ? SLUICE_PICK_FIRST : SLUICE_PICK_LATEST);
    }
    case 1: {
        bool lead = rnd() % 3 == 0, trail = rnd() % 4 != 0;
        if (!lead && !trail) trail = true;
        int64_t mw = rnd() % 2 ? -1 : W + (int64_t)(rnd() % 3) * W;
        *name = mw < 0 ? "debounce" : "debounce maxWait";
        return sluice_debounce(W, lead, trail, mw);
    }
    case 2: *name = "audit"; return sluice_audit(W);
    default: *name = "rate"; return sluice_rate(1 + rnd() % 5, W, rnd() % 4);
    }
}

struct sides {
    sluice_limiter_t *a, *b, *u;
    struct log la, lb, lu;
    size_t seen_a, seen_b, seen_u; /* entries of each log compared so far */
};

static void compare_stats(struct sides *s, const char *what, unsigned step) {
    sluice_stats_t sa, sb, su;
    CHECK(sluice_limiter_stats(s->a, &sa) == 0 && sluice_limiter_stats(s->b, &sb) == 0 &&
              sluice_limiter_stats(s->u, &su) == 0,
          "stats");
    /* memory and probe lengths may differ (B's batches make other index
     * moves); the totals and the state may not */
#define SAME(f)                                                                                                        \
    CHECK(sa.f == sb.f && sa.f == su.f, "%s step %u: stats." #f " %" PRIu64 " / emit_only %" PRIu64 " / u64 %" PRIu64, \
          what, step, sa.f, sb.f, su.f)
    SAME(live_keys);
    SAME(pending);
    SAME(armed_timers);
    SAME(full_refusals);
    SAME(admitted);
    SAME(scheduled);
    SAME(emitted_later);
    SAME(dropped);
    SAME(discarded);
#undef SAME
}

/* B's new events must be A's new EMIT events; U's new events all of A's. */
static void compare_logs(struct sides *s, const char *what, unsigned step) {
    size_t j = s->seen_b;
    for (size_t i = s->seen_a; i < s->la.n; i++) {
        const struct ev *ea = &s->la.v[i];
        if (ea->kind == SLUICE_EVENT_EMIT) {
            CHECK(j < s->lb.n, "%s step %u: EMIT of token %" PRIu64 " missing under emit_only", what, step, ea->token);
            CHECK(ev_same(ea, &s->lb.v[j], true),
                  "%s step %u: EMIT %" PRIu64 "@%" PRIu64 ", emit_only EMIT %" PRIu64 "@%" PRIu64, what, step,
                  ea->token, ea->at, s->lb.v[j].token, s->lb.v[j].at);
            j++;
        }
        size_t k = s->seen_u + (i - s->seen_a);
        CHECK(k < s->lu.n && ev_same(ea, &s->lu.v[k], true), "%s step %u: event %zu differs through submit_u64", what,
              step, i);
    }
    CHECK(j == s->lb.n, "%s step %u: emit_only reported %zu events, normal %zu EMIT", what, step, s->lb.n - s->seen_b,
          j - s->seen_b);
    CHECK(s->lu.n - s->seen_u == s->la.n - s->seen_a, "%s step %u: submit_u64 side has extra events", what, step);
    s->seen_a = s->la.n;
    s->seen_b = s->lb.n;
    s->seen_u = s->lu.n;
}

static void same_decision(const sluice_decision_t *x, const sluice_decision_t *y, const char *what, unsigned step,
                          const char *side) {
    CHECK(x->kind == y->kind && x->at == y->at && x->remaining == y->remaining && x->full == y->full,
          "%s step %u: decision %d@%" PRIu64 " r%" PRIu64 " f%" PRIu64 ", %s %d@%" PRIu64 " r%" PRIu64 " f%" PRIu64,
          what, step, (int)x->kind, x->at, x->remaining, x->full, side, (int)y->kind, y->at, y->remaining, y->full);
}

static uint64_t g_token;

static void core_program(unsigned iter) {
    const char *name;
    sluice_policy_t p = random_policy(&name);
    char what[64];
    snprintf(what, sizeof what, "core #%u %s", iter, name);
    sluice_config_t cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.policy = p;
    cfg.on_event = on_event;
    cfg.tick_ns = (uint64_t)(1 + rnd() % 3) * 1000000 / (rnd() % 2 ? 1 : 4);
    cfg.max_keys = rnd() % 4 == 0 ? 3 + rnd() % 4 : 0;
    cfg.start_ns = rnd() % 1000;
    cfg.fixed_seed = true;
    cfg.seed[0] = rnd();
    cfg.seed[1] = rnd();
    struct sides s;
    memset(&s, 0, sizeof s);
    s.lb.emit_only = true;
    cfg.user = &s.la;
    CHECK(sluice_limiter_new(&s.a, &cfg) == 0, "new A");
    cfg.user = &s.lu;
    CHECK(sluice_limiter_new(&s.u, &cfg) == 0, "new U");
    cfg.user = &s.lb;
    cfg.emit_only = true;
    CHECK(sluice_limiter_new(&s.b, &cfg) == 0, "new B");
    bool rate = p.kind == SLUICE_RATE;
    uint64_t burst = rate ? (p.burst ? p.burst : p.limit) : 1;
    uint64_t now = cfg.start_ns;
    unsigned steps = 40 + (unsigned)(rnd() % 200);
    unsigned strong_b = rnd() % 3 == 0 ? (unsigned)(rnd() % steps) : UINT32_MAX;
    unsigned strong_u = rnd() % 3 == 0 ? (unsigned)(rnd() % steps) : UINT32_MAX;
    for (unsigned step = 0; step < steps; step++) {
        if (step == strong_b) sluice__table_use_strong_hash(&s.b->table);
        if (step == strong_u) sluice__table_use_strong_hash(&s.u->table);
        uint64_t r = rnd() % 100;
        if (r < 35) now += rnd() % 3000000;                                          /* up to 3 ms */
        uint64_t t = rnd() % 10 == 0 && now > 5000000 ? now - rnd() % 5000000 : now; /* sometimes in the past */
        if (r < 70) {
            /* a group of calls at one time: B takes them as a batch or one by one */
            sluice_call_t calls[12];
            sluice_decision_t da[12], db[12], du[12];
            int ra[12], rb[12], ru[12];
            size_t n = 1 + (size_t)(rnd() % 12);
            for (size_t i = 0; i < n; i++) {
                calls[i].key = pick_key();
                calls[i].token = ++g_token;
                calls[i].cost = rate ? 1 + rnd() % (burst + 1) : 1;
                if (rnd() % 40 == 0) calls[i].cost = rnd() % 2 ? 0 : 2; /* ERANGE, or EINVAL off rate */
            }
            for (size_t i = 0; i < n; i++) {
                memset(&da[i], 0, sizeof da[i]);
                ra[i] = sluice_limiter_submit_cost(s.a, calls[i].key, calls[i].token, calls[i].cost, t, &da[i]);
                memset(&du[i], 0, sizeof du[i]);
                if (calls[i].key.kind == SLUICE_KEY_U64 && calls[i].cost == 1)
                    ru[i] = sluice_limiter_submit_u64(s.u, calls[i].key.u64, calls[i].token, t, &du[i]);
                else
                    ru[i] = sluice_limiter_submit_cost(s.u, calls[i].key, calls[i].token, calls[i].cost, t, &du[i]);
            }
            memset(db, 0, sizeof db);
            uint64_t how = rnd() % 3;
            if (how == 0) {
                sluice_limiter_submit_many(s.b, calls, n, t, db, rb);
            } else {
                for (size_t i = 0; i < n; i++) {
                    if (how == 1 && calls[i].key.kind == SLUICE_KEY_U64 && calls[i].cost == 1)
                        rb[i] = sluice_limiter_submit_u64(s.b, calls[i].key.u64, calls[i].token, t, &db[i]);
                    else if (calls[i].cost == 1 && rnd() % 2)
                        rb[i] = sluice_limiter_submit(s.b, calls[i].key, calls[i].token, t, &db[i]);
                    else
                        rb[i] = sluice_limiter_submit_cost(s.b, calls[i].key, calls[i].token, calls[i].cost, t, &db[i]);
                }
            }
            for (size_t i = 0; i < n; i++) {
                CHECK(ra[i] == rb[i] && ra[i] == ru[i], "%s step %u: result %d, emit_only %d, u64 %d", what, step,
                      ra[i], rb[i], ru[i]);
                if (ra[i] == 0) {
                    same_decision(&da[i], &db[i], what, step, "emit_only");
                    same_decision(&da[i], &du[i], what, step, "u64");
                }
            }
        } else if (r < 80) {
            int64_t na = sluice_limiter_advance(s.a, t, 0), nb = sluice_limiter_advance(s.b, t, 0),
                    nu = sluice_limiter_advance(s.u, t, 0);
            CHECK(na == nb && na == nu, "%s step %u: advance %" PRId64 " / %" PRId64 " / %" PRId64, what, step, na, nb,
                  nu);
        } else if (r < 88) {
            sluice_key_t k = pick_key();
            int xa = sluice_limiter_flush(s.a, k, t), xb = sluice_limiter_flush(s.b, k, t),
                xu = sluice_limiter_flush(s.u, k, t);
            CHECK(xa == xb && xa == xu, "%s step %u: flush %d / %d / %d", what, step, xa, xb, xu);
        } else if (r < 96) {
            sluice_key_t k = pick_key();
            int xa = sluice_limiter_cancel(s.a, k, t), xb = sluice_limiter_cancel(s.b, k, t),
                xu = sluice_limiter_cancel(s.u, k, t);
            CHECK(xa == xb && xa == xu, "%s step %u: cancel %d / %d / %d", what, step, xa, xb, xu);
        } else {
            sluice_key_t k = pick_key();
            int xa = sluice_limiter_pending(s.a, k, t), xb = sluice_limiter_pending(s.b, k, t),
                xu = sluice_limiter_pending(s.u, k, t);
            CHECK(xa == xb && xa == xu, "%s step %u: pending %d / %d / %d", what, step, xa, xb, xu);
        }
        CHECK(sluice_limiter_next_deadline(s.a) == sluice_limiter_next_deadline(s.b) &&
                  sluice_limiter_next_deadline(s.a) == sluice_limiter_next_deadline(s.u),
              "%s step %u: next deadlines differ", what, step);
        compare_logs(&s, what, step);
        compare_stats(&s, what, step);
        CHECK(sluice_limiter_check(s.a) == 0 && sluice_limiter_check(s.b) == 0 && sluice_limiter_check(s.u) == 0,
              "%s step %u: sluice_limiter_check", what, step);
    }
    /* the end: close (drain or discard) or a free without close (discard) */
    uint64_t end = rnd() % 3;
    now += rnd() % 5000000;
    if (end < 2) {
        sluice_close_mode_t mode = end == 0 ? SLUICE_CLOSE_DRAIN : SLUICE_CLOSE_DISCARD;
        CHECK(sluice_limiter_close(s.a, now, mode) == 0 && sluice_limiter_close(s.b, now, mode) == 0 &&
                  sluice_limiter_close(s.u, now, mode) == 0,
              "%s: close", what);
        compare_logs(&s, what, steps);
        compare_stats(&s, what, steps);
        sluice_stats_t sb;
        sluice_limiter_stats(s.b, &sb);
        /* nothing lost: every scheduled token emitted, dropped or discarded */
        CHECK(sb.pending == 0 && sb.live_keys == 0, "%s: keys left after close", what);
    } else {
        /* free with a discard at the latest time seen: the frees report into
         * the logs, compared below (no stats after a free) */
        (void)sluice_limiter_advance(s.a, now, 0);
        (void)sluice_limiter_advance(s.b, now, 0);
        (void)sluice_limiter_advance(s.u, now, 0);
        compare_logs(&s, what, steps);
        compare_stats(&s, what, steps);
    }
    sluice_limiter_free(s.a);
    sluice_limiter_free(s.b);
    sluice_limiter_free(s.u);
    compare_logs(&s, what, steps + 1);
    free(s.la.v);
    free(s.lb.v);
    free(s.lu.v);
}

/* The edge cases of the new entry point and option. */
static void core_edges(void) {
    CHECK(sluice_limiter_submit_u64(NULL, 1, 1, 0, NULL) == SLUICE_EINVAL, "NULL limiter");
    struct log g;
    memset(&g, 0, sizeof g);
    g.emit_only = true;
    sluice_config_t cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.policy = sluice_throttle(1000, true, true, SLUICE_PICK_LATEST);
    cfg.tick_ns = 100;
    cfg.emit_only = true;
    /* on_event stays required under emit_only */
    sluice_limiter_t *l = NULL;
    CHECK(sluice_limiter_new(&l, &cfg) == SLUICE_EINVAL && l == NULL, "emit_only without on_event accepted");
    cfg.on_event = on_event;
    cfg.user = &g;
    CHECK(sluice_limiter_new(&l, &cfg) == 0, "new");
    sluice_decision_t d;
    CHECK(sluice_limiter_submit_u64(l, 7, 1, 0, &d) == 0 && d.kind == SLUICE_EMITTED, "leading");
    CHECK(sluice_limiter_submit_u64(l, 7, 2, 1, &d) == 0 && d.kind == SLUICE_SCHEDULED && d.at == 1000, "kept");
    CHECK(sluice_limiter_submit_u64(l, 7, 3, 2, NULL) == 0, "superseding, no decision");
    CHECK(sluice_limiter_submit_u64(l, 7, 4, 3, &d) == 0 && d.kind == SLUICE_SCHEDULED, "superseding");
    CHECK(g.n == 0, "emit_only reported a superseded token");
    CHECK(sluice_limiter_advance(l, 1100, 0) == 1 && g.n == 1 && g.v[0].token == 4 && g.v[0].at == 1000 &&
              g.v[0].is_u64 && g.v[0].u64 == 7,
          "the last token emitted at the window's end");
    CHECK(sluice_limiter_submit(l, sluice_key_u64(7), 5, 1101, &d) == 0 && d.kind == SLUICE_SCHEDULED, "kept again");
    CHECK(sluice_limiter_close(l, 1102, SLUICE_CLOSE_DISCARD) == 0 && g.n == 1, "discard not reported");
    sluice_stats_t st;
    sluice_limiter_stats(l, &st);
    CHECK(st.dropped == 2 && st.discarded == 1 && st.emitted_later == 1 && st.scheduled == 4,
          "counts: dropped %" PRIu64 " discarded %" PRIu64, st.dropped, st.discarded);
    CHECK(sluice_limiter_submit_u64(l, 7, 6, 1103, &d) == SLUICE_ECLOSED, "closed");
    sluice_limiter_free(l);
    /* pass-through: the u64 entry point takes the general path */
    cfg.policy = sluice_throttle(0, true, true, SLUICE_PICK_LATEST);
    CHECK(sluice_limiter_new(&l, &cfg) == 0, "new pass-through");
    CHECK(sluice_limiter_submit_u64(l, 9, 1, 5, &d) == 0 && d.kind == SLUICE_EMITTED && d.at == 5, "pass-through");
    sluice_limiter_free(l);
    free(g.v);
}

/* ------------------------------------------------------------------ 2. loop layer */

#define HOUR (UINT64_C(3600) * 1000000000)
#define MT_KEYS 24

struct mtlog {
    pthread_mutex_t mu;
    struct log g;
};

static void mt_on_event(void *user, const sluice_event_t *e) {
    struct mtlog *m = user;
    pthread_mutex_lock(&m->mu);
    if (m->g.emit_only && e->kind != SLUICE_EVENT_EMIT) {
        lt_failures++;
        fprintf(stderr, "loop: an emit_only limiter delivered event kind %d (token %" PRIu64 ")\n", (int)e->kind,
                e->token);
    }
    log_push(&m->g, e);
    pthread_mutex_unlock(&m->mu);
}

static char mt_names[MT_KEYS][16];

static sluice_key_t mt_key(int i) {
    if (i < MT_KEYS / 2) return sluice_key_u64((uint64_t)i);
    return sluice_key_bytes(mt_names[i], strlen(mt_names[i]));
}

static int mt_key_index(const struct ev *e) {
    if (e->is_u64) return (int)e->u64;
    for (int i = MT_KEYS / 2; i < MT_KEYS; i++)
        if (e->len == strlen(mt_names[i]) && memcmp(e->bytes, mt_names[i], e->len) == 0) return i;
    return -1;
}

static void loop_differential(sluice_loop_t *loop, sluice_policy_t policy, sluice_close_mode_t mode, const char *what) {
    struct mtlog a, b;
    memset(&a, 0, sizeof a);
    memset(&b, 0, sizeof b);
    pthread_mutex_init(&a.mu, NULL);
    pthread_mutex_init(&b.mu, NULL);
    b.g.emit_only = true;
    sluice_config_t cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.policy = policy;
    cfg.on_event = mt_on_event;
    sluice_mt_options_t opt = { 4, SLUICE_MT_REPORT_ALL, NULL };
    sluice_mt_t *ma = NULL, *mb = NULL;
    cfg.user = &a;
    LT_OK(sluice_mt_new_with_options(&ma, loop, &cfg, &opt));
    cfg.user = &b;
    cfg.emit_only = true;
    LT_OK(sluice_mt_new_with_options(&mb, loop, &cfg, &opt));
    if (!ma || !mb) return;
    bool rate = policy.kind == SLUICE_RATE;
    uint64_t token = 0;
    static sluice_call_t calls[40];
    static sluice_decision_t db[40];
    static int rb[40];
    for (int round = 0; round < 300; round++) {
        uint64_t r = rnd() % 10;
        if (r < 7) {
            size_t n = 1 + (size_t)(rnd() % 40);
            for (size_t i = 0; i < n; i++) {
                calls[i].key = mt_key((int)(rnd() % (rnd() % 3 == 0 ? MT_KEYS : 5)));
                calls[i].token = ++token;
                calls[i].cost = rate ? 1 + rnd() % 3 : 1;
            }
            bool batch = rnd() & 1;
            if (batch) sluice_mt_submit_many(mb, calls, n, db, rb);
            for (size_t i = 0; i < n; i++) {
                sluice_decision_t da;
                int ra = lt_submit_cost(ma, calls[i].key, calls[i].token, calls[i].cost, &da);
                if (!batch) rb[i] = lt_submit_cost(mb, calls[i].key, calls[i].token, calls[i].cost, &db[i]);
                LT_CHECK(ra == rb[i], "%s: result %d, emit_only %d", what, ra, rb[i]);
                if (ra == 0 && rb[i] == 0)
                    LT_CHECK(da.kind == db[i].kind && da.remaining == db[i].remaining,
                             "%s: token %" PRIu64 ": decision %d, emit_only %d", what, calls[i].token, (int)da.kind,
                             (int)db[i].kind);
            }
        } else {
            sluice_key_t k = mt_key((int)(rnd() % MT_KEYS));
            int xa, xb;
            if (r < 9) {
                xa = sluice_mt_flush(ma, k);
                xb = sluice_mt_flush(mb, k);
            } else {
                xa = sluice_mt_cancel(ma, k);
                xb = sluice_mt_cancel(mb, k);
            }
            LT_CHECK(xa == xb, "%s: flush/cancel %d, emit_only %d", what, xa, xb);
        }
    }
    sluice_mt_stats_t sa, sb;
    LT_OK(sluice_mt_close(ma, mode));
    LT_OK(sluice_mt_close(mb, mode));
    LT_OK(sluice_mt_stats(ma, &sa));
    LT_OK(sluice_mt_stats(mb, &sb));
    LT_CHECK(sa.core.admitted == sb.core.admitted && sa.core.scheduled == sb.core.scheduled &&
                 sa.core.emitted_later == sb.core.emitted_later && sa.core.dropped == sb.core.dropped &&
                 sa.core.discarded == sb.core.discarded,
             "%s: counters differ (dropped %" PRIu64 "/%" PRIu64 ", discarded %" PRIu64 "/%" PRIu64 ")", what,
             sa.core.dropped, sb.core.dropped, sa.core.discarded, sb.core.discarded);
    sluice_mt_free(ma); /* delivers what is queued first */
    sluice_mt_free(mb);
    size_t emits = 0, others = 0;
    for (size_t i = 0; i < a.g.n; i++) {
        if (a.g.v[i].kind == SLUICE_EVENT_EMIT)
            emits++;
        else
            others++;
    }
    LT_CHECK(b.g.n == emits, "%s: %zu EMIT events normally, %zu under emit_only", what, emits, b.g.n);
    LT_CHECK(others > 0, "%s: the program made no drop (the test would prove nothing)", what);
    /* each key's EMIT sequence is the same (the loop orders events per key) */
    for (int k = -1; k < MT_KEYS; k++) {
        size_t i = 0, j = 0;
        for (;;) {
            while (i < a.g.n && (a.g.v[i].kind != SLUICE_EVENT_EMIT || mt_key_index(&a.g.v[i]) != k)) i++;
            while (j < b.g.n && mt_key_index(&b.g.v[j]) != k) j++;
            if (i >= a.g.n || j >= b.g.n) {
                LT_CHECK(i >= a.g.n && j >= b.g.n, "%s: key %d has more EMIT events on one side", what, k);
                break;
            }
            LT_CHECK(a.g.v[i].token == b.g.v[j].token, "%s: key %d: EMIT %" PRIu64 ", emit_only EMIT %" PRIu64, what, k,
                     a.g.v[i].token, b.g.v[j].token);
            i++;
            j++;
        }
    }
    printf("%s: %" PRIu64 " calls, %zu EMIT events on both, %zu drops/discards only counted under emit_only\n", what,
           token, emits, others);
    free(a.g.v);
    free(b.g.v);
    pthread_mutex_destroy(&a.mu);
    pthread_mutex_destroy(&b.mu);
}

/* A debounce under emit_only on the real clock: a burst of 5 tokens on one
 * key. Whatever the scheduler does, every token is emitted or counted as a
 * drop, nothing is emitted before its deadline (interval after its own call)
 * and the last token is the last emission. When the 5 calls all fall inside
 * one interval (measured, not assumed: a starved machine may spread them),
 * the burst is one: one emission, 4 drops. */
#define RT_CALLS 5
#define RT_INTERVAL_MS 20

struct rt {
    struct lt_sync sync;
    uint64_t n, kind_other;
    uint64_t token[RT_CALLS], at_clock[RT_CALLS];
};

static void rt_event(void *user, const sluice_event_t *e) {
    struct rt *r = user;
    uint64_t now = sluice_clock_now();
    pthread_mutex_lock(&r->sync.mu);
    if (e->kind != SLUICE_EVENT_EMIT) r->kind_other++;
    if (r->n < RT_CALLS) {
        r->token[r->n] = e->token;
        r->at_clock[r->n] = now;
    }
    r->n++;
    pthread_cond_broadcast(&r->sync.cv);
    pthread_mutex_unlock(&r->sync.mu);
}

static void loop_realtime(sluice_loop_t *loop) {
    struct rt r;
    memset(&r, 0, sizeof r);
    lt_sync_init(&r.sync);
    sluice_config_t cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.policy = sluice_debounce(RT_INTERVAL_MS * (int64_t)LT_MS, false, true, -1);
    cfg.on_event = rt_event;
    cfg.user = &r;
    cfg.emit_only = true;
    sluice_mt_t *m = NULL;
    LT_OK(sluice_mt_new(&m, loop, &cfg, 2));
    if (!m) return;
    uint64_t called[RT_CALLS + 1]; /* called[t]: the clock just before token t's call */
    uint64_t first = sluice_clock_now();
    for (uint64_t t = 1; t <= RT_CALLS; t++) {
        called[t] = sluice_clock_now();
        LT_OK(sluice_mt_submit(m, sluice_key_u64(42), t, NULL));
    }
    uint64_t span = sluice_clock_now() - first;
    bool one_burst = span < RT_INTERVAL_MS * LT_MS;
    /* Token RT_CALLS is always emitted (nothing supersedes it): wait for it. */
    pthread_mutex_lock(&r.sync.mu);
    struct timespec dl;
    clock_gettime(CLOCK_REALTIME, &dl);
    dl.tv_sec += LT_PATIENCE_MS / 1000;
    bool got = false;
    for (;;) {
        got = r.n > 0 && r.n <= RT_CALLS && r.token[r.n - 1] == RT_CALLS;
        if (got || pthread_cond_timedwait(&r.sync.cv, &r.sync.mu, &dl) != 0) break;
    }
    got = r.n > 0 && r.n <= RT_CALLS && r.token[r.n - 1] == RT_CALLS;
    LT_CHECK(got, "real loop: token %d not emitted within %d ms", RT_CALLS, LT_PATIENCE_MS);
    LT_CHECK(r.kind_other == 0, "real loop: %" PRIu64 " non-EMIT events under emit_only", r.kind_other);
    LT_CHECK(r.n >= 1 && r.n <= RT_CALLS, "real loop: %" PRIu64 " emissions of %d tokens", r.n, RT_CALLS);
    uint64_t emitted = r.n <= RT_CALLS ? r.n : RT_CALLS;
    for (uint64_t i = 0; i < emitted; i++) {
        uint64_t t = r.token[i];
        LT_CHECK(t >= 1 && t <= RT_CALLS && (i == 0 || t > r.token[i - 1]),
                 "real loop: emission %" PRIu64 " is token %" PRIu64 ", out of order", i, t);
        if (t >= 1 && t <= RT_CALLS)
            LT_CHECK(r.at_clock[i] >= called[t] + RT_INTERVAL_MS * LT_MS,
                     "real loop: token %" PRIu64 " emitted %" PRIu64 " ns after its call, before %d ms", t,
                     r.at_clock[i] - called[t], RT_INTERVAL_MS);
    }
    if (one_burst)
        LT_CHECK(r.n == 1, "real loop: the calls spanned %" PRIu64 " ns (< %d ms) yet made %" PRIu64 " emissions", span,
                 RT_INTERVAL_MS, r.n);
    pthread_mutex_unlock(&r.sync.mu);
    sluice_mt_stats_t st;
    LT_OK(sluice_mt_stats(m, &st));
    LT_CHECK(st.core.emitted_later == emitted && st.core.dropped + st.core.emitted_later == RT_CALLS,
             "real loop: %" PRIu64 " emitted (%" PRIu64 " seen), %" PRIu64 " dropped, of %d calls",
             st.core.emitted_later, emitted, st.core.dropped, RT_CALLS);
    LT_OK(sluice_mt_close(m, SLUICE_CLOSE_DISCARD));
    sluice_mt_free(m);
    lt_sync_destroy(&r.sync);
    printf("real loop: a %d ms debounce under emit_only: %" PRIu64 " emission(s) of %d tokens, the last one last, "
           "none early (calls spanned %" PRIu64 " us)\n",
           RT_INTERVAL_MS, emitted, RT_CALLS, span / 1000);
}

int main(void) {
    const char *it = getenv("SLUICE_EMIT_ONLY_ITERS");
    unsigned iters = it ? (unsigned)strtoul(it, NULL, 10) : 1500;
    core_edges();
    for (unsigned i = 0; i < iters; i++) core_program(i);
    printf("core: %u random programs, emit_only and submit_u64 agree with the normal limiter\n", iters);

    for (int i = 0; i < MT_KEYS; i++) snprintf(mt_names[i], sizeof mt_names[i], "k:%d", i);
    sluice_threads_init();
    sluice_loop_t *loop = NULL;
    LT_OK(sluice_loop_start(&loop, NULL));
    if (!loop) return 1;
    loop_differential(loop, sluice_throttle((int64_t)HOUR, true, true, SLUICE_PICK_LATEST), SLUICE_CLOSE_DISCARD,
                      "loop throttle");
    loop_differential(loop, sluice_debounce((int64_t)HOUR, false, true, -1), SLUICE_CLOSE_DRAIN, "loop debounce");
    loop_differential(loop, sluice_debounce((int64_t)HOUR, true, true, 2 * (int64_t)HOUR), SLUICE_CLOSE_DISCARD,
                      "loop debounce maxWait");
    loop_differential(loop, sluice_audit((int64_t)HOUR), SLUICE_CLOSE_DISCARD, "loop audit");
    loop_differential(loop, sluice_rate(3, (int64_t)HOUR, 4), SLUICE_CLOSE_DRAIN, "loop rate");
    loop_realtime(loop);
    LT_OK(sluice_loop_free(loop));
    if (lt_failures) {
        fprintf(stderr, "test_emit_only: %d failure(s)\n", lt_failures);
        return 1;
    }
    printf("test_emit_only: ok\n");
    return 0;
}
