/*
 * test_advance_into.c — sluice_limiter_advance_into() against the callback
 * path (sluice_limiter_advance()), randomized and differential.
 *
 * Each scenario draws a policy with random options (throttle leading /
 * trailing / pick, audit, debounce with and without maxWait, rate, now and
 * then an interval of 0), a tick, emit_only on or off, and runs one random
 * program on two limiters of that configuration with the same hash seed:
 *   A  advances with sluice_limiter_advance();
 *   B  advances with sluice_limiter_advance_into() into arrays of random
 *      capacities (1, 2, 3, up to 64, or 4096) with random timer bounds.
 * The program: calls on integer and byte keys (short and heap-held) at times
 * that move on (sometimes by many ticks, sometimes back), flushes, cancels,
 * pending(), and advances in one of two modes:
 *   lockstep  B advances once, then A with the same bound, or, when B's
 *             array filled, with B's count of handled timers as its bound:
 *             the same count, and B's array holds exactly the EMIT events
 *             A's callback received during its advance;
 *   drain     A advances once (bound or none); B calls advance_into with the
 *             same bound on the rest until it has handled as many timers
 *             (small arrays: several calls): B's arrays, in order, hold
 *             exactly A's EMIT events;
 * and sometimes, with a bounded advance_into left full, a call on a key
 * whose timer is still due (timers first reports it through the callback in
 * both). After every step: the same events on both sides in the same order
 * (every kind from calls, flush, cancel and close; under emit_only, EMIT
 * only), B's callback never called inside advance_into, each emission's key
 * the key's integer (0 for a byte key) and `at` its deadline, the same
 * stats, the same next deadline, sluice_limiter_check() passes. The program
 * ends with close(drain), close(discard) or a free without close, with the
 * same events again. Plus the errors (NULL pointers, capacity 0, a closed
 * limiter) with *count set to 0.
 *
 *   ./test_advance_into [seed]     Env: SLUICE_ADVANCE_INTO_ITERS (default 1200)
 */
#include "sluice.h"

#include <inttypes.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TEST_NAME "test_advance_into"
#define SCENARIO_SEED 0xad7a4ce1ULL
#include "support/scenario.h"
#include "support/event_copy.h"

/* ------------------------------------------------------------------ event logs */

struct side {
    struct ev *v;
    size_t n, cap;
    bool emit_only;
    bool in_into; /* B: inside advance_into (its callback must not run) */
    const char *name;
};

static struct ev *push(struct side *s) {
    if (s->n == s->cap) {
        s->cap = s->cap ? s->cap * 2 : 256;
        s->v = realloc(s->v, s->cap * sizeof *s->v);
        CHECK(s->v != NULL, "out of memory");
    }
    struct ev *r = &s->v[s->n++];
    memset(r, 0, sizeof *r);
    return r;
}

static void on_event(void *user, const sluice_event_t *e) {
    struct side *s = user;
    CHECK(!s->in_into, "%s: on_event called inside sluice_limiter_advance_into (kind %d, token %" PRIu64 ")", s->name,
          (int)e->kind, e->token);
    CHECK(!s->emit_only || e->kind == SLUICE_EVENT_EMIT, "%s: emit_only limiter reported kind %d", s->name,
          (int)e->kind);
    ev_copy(push(s), e);
}

/* ------------------------------------------------------------------ keys and tokens */

#define NKEYS 24
static char g_keybuf[NKEYS][24];
static size_t g_keylen[NKEYS];

static sluice_key_t key_of(unsigned i) {
    if (i % 3 == 2) return sluice_key_bytes(g_keybuf[i], g_keylen[i]);
    return sluice_key_u64(i * UINT64_C(0x9E3779B97F4A7C15) + (i == 0 ? 0 : 1)); /* key 0 included */
}

/* token -> the key it was submitted with (tokens are numbered from 1) */
static unsigned *g_token_key;
static size_t g_token_cap;
static uint64_t g_next_token;

static uint64_t new_token(unsigned key) {
    uint64_t t = ++g_next_token;
    if (t >= g_token_cap) {
        g_token_cap = g_token_cap ? g_token_cap * 2 : 4096;
        g_token_key = realloc(g_token_key, g_token_cap * sizeof *g_token_key);
        CHECK(g_token_key != NULL, "out of memory");
    }
    g_token_key[t] = key;
    return t;
}

/* The same call on A and B (a new token for key k): the same result and
 * decision on both. */
static void submit_both(sluice_limiter_t *la, sluice_limiter_t *lb, unsigned k, uint64_t now, const char *what) {
    uint64_t tok = new_token(k);
    sluice_decision_t da, db;
    int ra = sluice_limiter_submit(la, key_of(k), tok, now, &da);
    int rb = sluice_limiter_submit(lb, key_of(k), tok, now, &db);
    CHECK(ra == rb, "%s: %d vs %d", what, ra, rb);
    if (ra == 0) CHECK(da.kind == db.kind && da.at == db.at, "%s: decisions differ", what);
}

/* Appends B's emissions to its log as the EMIT events they stand for,
 * checking the key each carries. */
static void push_emissions(struct side *b, const sluice_emission_t *out, size_t n) {
    for (size_t i = 0; i < n; i++) {
        CHECK(out[i].token >= 1 && out[i].token <= g_next_token, "emission %zu: unknown token %" PRIu64, i,
              out[i].token);
        sluice_key_t k = key_of(g_token_key[out[i].token]);
        struct ev *r = push(b);
        r->kind = SLUICE_EVENT_EMIT;
        r->is_u64 = k.kind == SLUICE_KEY_U64;
        if (r->is_u64) {
            CHECK(out[i].key == k.u64, "emission %zu (token %" PRIu64 "): key %" PRIu64 ", submitted with %" PRIu64, i,
                  out[i].token, out[i].key, k.u64);
            r->u64 = k.u64;
        } else {
            CHECK(out[i].key == 0, "emission %zu (token %" PRIu64 "): byte key reported as %" PRIu64, i, out[i].token,
                  out[i].key);
            r->len = k.len;
            memcpy(r->bytes, k.bytes, k.len);
        }
        r->token = out[i].token;
        r->at = out[i].at;
    }
}

static bool ev_eq(const struct ev *x, const struct ev *y) {
    return x->kind == y->kind && x->is_u64 == y->is_u64 && x->token == y->token && x->at == y->at &&
           x->has_successor == y->has_successor && (!x->has_successor || x->successor == y->successor) &&
           (x->is_u64 ? x->u64 == y->u64 : x->len == y->len && memcmp(x->bytes, y->bytes, x->len) == 0);
}

static void same_events(const struct side *a, const struct side *b, const char *what) {
    size_t n = a->n < b->n ? a->n : b->n;
    for (size_t i = 0; i < n; i++) {
        const struct ev *x = &a->v[i], *y = &b->v[i];
        CHECK(ev_eq(x, y),
              "%s: event %zu differs: callback path kind %d token %" PRIu64 " at %" PRIu64 " succ %d/%" PRIu64
              ", advance_into side kind %d token %" PRIu64 " at %" PRIu64 " succ %d/%" PRIu64,
              what, i, x->kind, x->token, x->at, x->has_successor, x->successor, y->kind, y->token, y->at,
              y->has_successor, y->successor);
    }
    CHECK(a->n == b->n, "%s: %zu events on the callback path, %zu with advance_into", what, a->n, b->n);
}

static void same_state(sluice_limiter_t *la, sluice_limiter_t *lb, const struct side *a, const struct side *b,
                       const char *what) {
    same_events(a, b, what);
    sluice_stats_t sa, sb;
    CHECK(sluice_limiter_stats(la, &sa) == 0 && sluice_limiter_stats(lb, &sb) == 0, "stats failed");
#define SAME(f) CHECK(sa.f == sb.f, "%s: stats." #f " %" PRIu64 " vs %" PRIu64, what, sa.f, sb.f)
    SAME(live_keys);
    SAME(pending);
    SAME(armed_timers);
    SAME(admitted);
    SAME(scheduled);
    SAME(emitted_later);
    SAME(dropped);
    SAME(discarded);
    SAME(full_refusals);
#undef SAME
    CHECK(sluice_limiter_next_deadline(la) == sluice_limiter_next_deadline(lb),
          "%s: next deadline %" PRIu64 " vs %" PRIu64, what, sluice_limiter_next_deadline(la),
          sluice_limiter_next_deadline(lb));
    CHECK(sluice_limiter_check(la) == 0, "%s: check of the callback-path limiter", what);
    CHECK(sluice_limiter_check(lb) == 0, "%s: check of the advance_into limiter", what);
}

/* ------------------------------------------------------------------ one scenario */

static sluice_policy_t random_policy(uint64_t *tick) {
    static const uint64_t ticks[] = { 1000000, 100000, 1000, 250000, 1 };
    *tick = ticks[rndn(5)];
    int64_t iv = (int64_t)(rndn(8) + 1) * (int64_t)(rndn(2) ? 1000000 : 137000);
    if (rndn(20) == 0) iv = 0; /* pass-through */
    switch (rndn(4)) {
    case 0: {
        bool lead = rndn(2), trail = rndn(2);
        if (!lead && !trail) trail = true;
        return sluice_throttle(iv, lead, trail, rndn(2) ? SLUICE_PICK_FIRST : SLUICE_PICK_LATEST);
    }
    case 1: return sluice_audit(iv);
    case 2: {
        bool lead = rndn(3) == 0, trail = rndn(4) != 0;
        if (!lead && !trail) trail = true;
        int64_t mw = rndn(2) ? iv + (int64_t)rndn(4) * iv + (int64_t)rndn(3) * 500000 : -1;
        return sluice_debounce(iv, lead, trail, mw);
    }
    default: return sluice_rate(rndn(5) + 1, (int64_t)(rndn(5) + 1) * 1000000, rndn(4));
    }
}

static size_t random_capacity(void) {
    switch (rndn(6)) {
    case 0: return 1;
    case 1: return 2;
    case 2: return 3;
    case 3: return 4096;
    default: return 1 + rndn(64);
    }
}

static size_t random_bound(void) { return rndn(3) == 0 ? 1 + rndn(6) : 0; }

static sluice_emission_t g_out[4096];
/* what the scenarios exercised, checked at the end */
static unsigned long long g_emitted, g_full, g_after_full, g_byte_keys;

/* B: one advance_into; fills its log. Returns the timers handled. */
static int64_t into_once(sluice_limiter_t *lb, struct side *b, uint64_t now, size_t bound, size_t cap, size_t *count) {
    /* the entries past what is written must stay untouched */
    memset(g_out, 0xA5, sizeof g_out);
    b->in_into = true;
    int64_t n = sluice_limiter_advance_into(lb, now, bound, g_out, cap, count);
    b->in_into = false;
    CHECK(n >= 0, "advance_into failed: %" PRId64, n);
    CHECK(*count <= cap, "advance_into wrote %zu emissions into %zu entries", *count, cap);
    CHECK((uint64_t)n >= *count, "advance_into handled %" PRId64 " timers but wrote %zu emissions", n, *count);
    CHECK(bound == 0 || (uint64_t)n <= bound, "advance_into handled %" PRId64 " timers past its bound %zu", n, bound);
    for (size_t i = *count; i < cap && i < *count + 4; i++) {
        const unsigned char *p = (const unsigned char *)&g_out[i];
        for (size_t j = 0; j < sizeof g_out[i]; j++) CHECK(p[j] == 0xA5, "entry %zu past the count was written", i);
    }
    push_emissions(b, g_out, *count);
    g_emitted += *count;
    if (*count == cap) g_full++;
    for (size_t i = 0; i < *count; i++) g_byte_keys += g_token_key[g_out[i].token] % 3 == 2;
    return n;
}

static void scenario(unsigned iter) {
    static char name[200];
    uint64_t tick = 0;
    sluice_config_t cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.policy = random_policy(&tick);
    cfg.tick_ns = tick;
    cfg.emit_only = rndn(2);
    cfg.fixed_seed = true;
    cfg.seed[0] = rnd();
    cfg.seed[1] = rnd();
    cfg.start_ns = rndn(3) * 1000000000ULL;
    if (rndn(8) == 0) cfg.max_keys = 1 + rndn(NKEYS);
    cfg.on_event = on_event;
    snprintf(name, sizeof name,
             "#%u policy %d interval %" PRId64 " lead %d trail %d pick %d maxwait %d/%" PRId64 " tick %" PRIu64
             " emit_only %d max_keys %" PRIu64,
             iter, (int)cfg.policy.kind, cfg.policy.interval_ns, cfg.policy.leading, cfg.policy.trailing,
             (int)cfg.policy.pick, cfg.policy.has_max_wait, cfg.policy.max_wait_ns, tick, cfg.emit_only, cfg.max_keys);
    g_scenario = name;
    g_step = 0;

    struct side a = { .name = "callback path", .emit_only = cfg.emit_only };
    struct side b = { .name = "advance_into", .emit_only = cfg.emit_only };
    sluice_limiter_t *la = NULL, *lb = NULL;
    cfg.user = &a;
    CHECK(sluice_limiter_new(&la, &cfg) == 0, "limiter A");
    cfg.user = &b;
    CHECK(sluice_limiter_new(&lb, &cfg) == 0, "limiter B");

    uint64_t now = cfg.start_ns;
    uint64_t span = cfg.policy.kind == SLUICE_RATE ? 1000000 : (uint64_t)cfg.policy.interval_ns + 1000000;
    unsigned steps = 20 + (unsigned)rndn(120);
    unsigned hot = 1 + (unsigned)rndn(NKEYS); /* keys in use */
    for (unsigned s = 0; s < steps; s++) {
        g_step = s;
        /* time moves on (or, rarely, back: clamped by both) */
        switch (rndn(8)) {
        case 0: break;
        case 1: now += rndn(span * 4); break;
        case 2: now = now > span ? now - rndn(span) : now; break;
        default: now += rndn(span / 2 + 1);
        }
        unsigned calls = (unsigned)rndn(12);
        for (unsigned c = 0; c < calls; c++) {
            submit_both(la, lb, (unsigned)rndn(hot), now, "submit");
        }
        if (rndn(6) == 0) {
            unsigned k = (unsigned)rndn(hot);
            int op = (int)rndn(3);
            int ra = op == 0   ? sluice_limiter_flush(la, key_of(k), now)
                     : op == 1 ? sluice_limiter_cancel(la, key_of(k), now)
                               : sluice_limiter_pending(la, key_of(k), now);
            int rb = op == 0   ? sluice_limiter_flush(lb, key_of(k), now)
                     : op == 1 ? sluice_limiter_cancel(lb, key_of(k), now)
                               : sluice_limiter_pending(lb, key_of(k), now);
            CHECK(ra == rb, "key op %d: %d vs %d", op, ra, rb);
        }
        same_state(la, lb, &a, &b, "after the calls");

        /* advance */
        uint64_t to = now + (rndn(4) == 0 ? rndn(span * 6) : 0);
        now = to;
        size_t bound = random_bound(), cap = random_capacity();
        if (rndn(2) == 0) {
            /* lockstep: B once, then A with B's bound, or, when B's array
             * filled, bounded by what B handled (then neither looks past) */
            size_t count = 0;
            int64_t nb = into_once(lb, &b, to, bound, cap, &count);
            int64_t na = sluice_limiter_advance(la, to, count == cap ? (size_t)nb : bound);
            CHECK(na == nb, "lockstep: advance handled %" PRId64 " timers, advance_into %" PRId64, na, nb);
            same_state(la, lb, &a, &b, "lockstep advance");
            if ((count == cap || (bound && (size_t)nb == bound)) && rndn(2) == 0) {
                /* B stopped early: what is left stays due, and a call on a key
                 * fires its due timer first, through the callback, on both */
                submit_both(la, lb, (unsigned)rndn(hot), to, "submit after a full array");
                g_after_full++;
                same_state(la, lb, &a, &b, "a call after a full array");
            }
        } else {
            /* drain: A once; B as many calls as it takes to handle as many */
            int64_t na = sluice_limiter_advance(la, to, bound);
            CHECK(na >= 0, "advance failed");
            int64_t total = 0;
            unsigned rounds = 0;
            do { /* (at least one call: it moves B's clock as A's advance did) */
                size_t count = 0;
                size_t left = (size_t)(na - total); /* 0 (none due): no bound, and none handled */
                int64_t nb = into_once(lb, &b, to, left, cap, &count);
                CHECK(nb > 0 || na == 0, "drain: advance_into handled nothing with %zu timers left", left);
                CHECK(count == cap || (size_t)nb == left,
                      "drain: advance_into stopped early (%" PRId64 " of %zu timers, %zu of %zu entries)", nb, left,
                      count, cap);
                total += nb;
                CHECK(++rounds <= 100000, "drain does not end");
            } while (total < na);
            CHECK(total == na, "drain: advance_into handled %" PRId64 " timers, advance %" PRId64, total, na);
            if (bound == 0 || (size_t)na < bound) {
                /* A found nothing more due: one more call of B handles nothing
                 * (and looks past the last timer as A's did) */
                size_t count = 1;
                CHECK(into_once(lb, &b, to, 0, cap, &count) == 0 && count == 0, "drain: timers left after it");
            }
            same_state(la, lb, &a, &b, "drain");
        }
    }

    /* the end */
    g_step = steps;
    switch (rndn(3)) {
    case 0:
    case 1: {
        sluice_close_mode_t mode = rndn(2) ? SLUICE_CLOSE_DRAIN : SLUICE_CLOSE_DISCARD;
        now += rndn(span);
        CHECK(sluice_limiter_close(la, now, mode) == 0 && sluice_limiter_close(lb, now, mode) == 0, "close");
        same_state(la, lb, &a, &b, "close");
        size_t count = 7;
        CHECK(sluice_limiter_advance_into(lb, now, 0, g_out, 4, &count) == SLUICE_ECLOSED && count == 0,
              "advance_into on a closed limiter");
        break;
    }
    default: break;
    }
    sluice_limiter_free(la);
    sluice_limiter_free(lb);
    same_events(&a, &b, "free");
    free(a.v);
    free(b.v);
}

/* ------------------------------------------------------------------ fixed checks */

static void fixed_checks(void) {
    g_scenario = "errors and a fixed drain";
    sluice_config_t cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.policy = sluice_debounce(1000000, false, true, -1);
    struct side b = { .name = "advance_into" };
    cfg.on_event = on_event;
    cfg.user = &b;
    sluice_limiter_t *l = NULL;
    CHECK(sluice_limiter_new(&l, &cfg) == 0, "new");
    size_t count = 9;
    CHECK(sluice_limiter_advance_into(NULL, 0, 0, g_out, 1, &count) == SLUICE_EINVAL && count == 0, "NULL limiter");
    count = 9;
    CHECK(sluice_limiter_advance_into(l, 0, 0, NULL, 1, &count) == SLUICE_EINVAL && count == 0, "NULL out");
    count = 9;
    CHECK(sluice_limiter_advance_into(l, 0, 0, g_out, 0, &count) == SLUICE_EINVAL && count == 0, "capacity 0");
    CHECK(sluice_limiter_advance_into(l, 0, 0, g_out, 1, NULL) == SLUICE_EINVAL, "NULL count");

    /* 10 keys due at 1 ms (the tick), drained into arrays of 3: 3, 3, 3, 1,
     * each in the order they were submitted, with their deadline */
    for (uint64_t k = 0; k < 10; k++) CHECK(sluice_limiter_submit_u64(l, 100 + k, 1000 + k, 0, NULL) == 0, "submit");
    CHECK(sluice_limiter_next_deadline(l) == 1000000, "next deadline");
    size_t got = 0;
    static const size_t expect[] = { 3, 3, 3, 1, 0 };
    for (int round = 0; round < 5; round++) {
        CHECK(sluice_limiter_advance_into(l, 1000000, 0, g_out, 3, &count) == (int64_t)expect[round] &&
                  count == expect[round],
              "round %d: %zu emissions", round, count);
        for (size_t i = 0; i < count; i++, got++)
            CHECK(g_out[i].key == 100 + got && g_out[i].token == 1000 + got && g_out[i].at == 1000000,
                  "round %d entry %zu: key %" PRIu64 " token %" PRIu64 " at %" PRIu64, round, i, g_out[i].key,
                  g_out[i].token, g_out[i].at);
        if (round < 3) CHECK(sluice_limiter_next_deadline(l) <= 1000000, "round %d: the rest is not due", round);
    }
    CHECK(got == 10 && b.n == 0, "drain: %zu emissions, %zu callbacks", got, b.n);
    sluice_stats_t st;
    sluice_limiter_stats(l, &st);
    CHECK(st.emitted_later == 10 && st.live_keys == 0 && st.pending == 0, "stats after the drain");
    sluice_limiter_free(l);
}

int main(int argc, char **argv) {
    if (argc > 1) g_seed = strtoull(argv[1], NULL, 0);
    const char *it = getenv("SLUICE_ADVANCE_INTO_ITERS");
    unsigned iters = it ? (unsigned)strtoul(it, NULL, 10) : 1200;
    for (int i = 0; i < NKEYS; i++) {
        /* byte keys: short (inline) and long (heap-held), one empty */
        g_keylen[i] = i == 2 ? 0 : (size_t)(i % 2 ? 3 + i % 5 : 9 + i % 13);
        for (size_t j = 0; j < g_keylen[i]; j++) g_keybuf[i][j] = (char)('a' + (i * 7 + j) % 26);
    }
    fixed_checks();
    g_rng = g_seed;
    for (unsigned i = 0; i < iters; i++) scenario(i);
    free(g_token_key);
    if (iters >= 200) /* the paths were taken: emissions (byte keys too), full arrays, calls after one */
        CHECK(g_emitted > 1000 && g_byte_keys > 100 && g_full > 100 && g_after_full > 20,
              "coverage: %llu emissions (%llu byte keys), %llu full arrays, %llu calls after one", g_emitted,
              g_byte_keys, g_full, g_after_full);
    printf(TEST_NAME ": %u scenarios, %llu emissions (%llu on byte keys), %llu full arrays, %llu calls after one, "
                     "%llu checks, seed %" PRIu64 ": ok\n",
           iters, g_emitted, g_byte_keys, g_full, g_after_full, g_checks, g_seed);
    return 0;
}
