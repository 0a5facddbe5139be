/*
 * fuzz_diff.c — differential libFuzzer harness: the core against the
 * reference model ctests/ref/ref_model.c (a separate, deliberately simple
 * implementation of docs/semantics.md).
 *
 * The input bytes choose a policy (every kind, every option; intervals from
 * 0 and 1 ns to SLUICE_DURATION_MAX, interesting values or raw), a wheel
 * tick, a start time (0 up to 1.2e19 ns), an optional live-key cap, 1 to 8
 * keys (integers, empty, binary with zero bytes, look-alikes of each other,
 * SLUICE_KEY_MAX bytes), and then a sequence of operations — submit, flush,
 * cancel, pending, advance (bounded or not), close(drain/discard), a key over
 * SLUICE_KEY_MAX, and for rate weighted calls (costs 1, small, the burst,
 * just above it, up to 10^12, or invalid) and quota peeks — at times that step by 0, 1, a tick, around the interval,
 * by huge jumps, or backwards.
 *
 * Three timing modes:
 *   exact   tick 1 ns: both sides are advanced to each op's time (or not:
 *           "timers first" must give the same per-key results);
 *   aligned tick of 7 ns .. 1 s with every time and duration a multiple of it
 *           (so the wheel's rounding never shows): as exact;
 *   coarse  tick of 7 ns .. 1 s, times and durations anywhere: advance() is
 *           only applied to the core (it may fire up to a tick late); the
 *           model catches up per key (timers first) and at close. Every core
 *           event must lie in [previous wheel time, wheel time] of the advance
 *           that fired it.
 *
 * Any of these aborts (a libFuzzer finding): a different return value or
 * decision; a key whose events (kind, token, time) differ from the model's
 * — compared after every operation (the touched key exactly, the others as a
 * prefix while the model lags, everything after advance/close); an event in
 * the future (early fire) or missing once due (late fire); a token reported
 * twice, never reported, reported after its submit failed, or for the wrong
 * key; SLUICE_EFULL below the cap; any error other than the documented ones;
 * sluice_limiter_check() failing after any operation.
 *
 * Rate parameters keep T = per / limit at most 2e15 ns; weighted calls may
 * still push a TAT past the end of the clock (UINT64_MAX ns), where the core
 * and the model both keep it (docs/semantics.md: the clock ends there).
 * Every decision's `remaining` and `full` and every quota field must agree;
 * a quota peek must change nothing; a superseded token's DROP must name the
 * same successor on both sides.
 *
 * Build and run (from the repository root):
 *   /opt/swift/usr/bin/clang -std=c11 -g -O1 -D_POSIX_C_SOURCE=200809L \
 *     -fsanitize=fuzzer,address,undefined -I Sources/CSluice/include -I Sources/CSluice -I ctests \
 *     Sources/CSluice/limiter.c Sources/CSluice/table.c Sources/CSluice/wheel.c Sources/CSluice/siphash.c \
 *     Sources/CSluice/error.c ctests/ref/ref_model.c fuzz/fuzz_diff.c -o /tmp/fuzz_diff
 *   (plus Sources/CSluice/policy*.c)
 *   /tmp/fuzz_diff -max_total_time=60 fuzz/corpus/diff
 *
 * Plans: for a rate policy, some inputs (the live-key cap byte 100..199)
 * make a limiter of plans instead (sluice_plans.h): 1..4 plans of 1..4
 * quotas named from a pool of five, so plans share quotas; calls name a
 * plan by index (one past the table: SLUICE_ENOPLAN), quota reads too, and
 * some ops replace the table (sluice_limiter_set_plans: numbers, quotas and
 * plans change, max_quotas stays 4). Every decision, detail and quota field
 * must agree with the model's.
 *
 * Emit-only: for a throttle, debounce or audit policy, some inputs (bit 7
 * of the start byte) make the core `emit_only`. Its callback must then see
 * EMIT events only, each as the model reports it; a token the model drops,
 * cancels or discards is counted as done on both sides without an event, so
 * a core that emitted it anyway still differs. Half of such a limiter's
 * integer-key calls of cost 1 go through sluice_limiter_submit_u64(), whose
 * short path is the quiet one (fuzz builds switch the index to SipHash after
 * a probe of 2 slots, so its long misses are frequent).
 *
 * Set FUZZ_DIFF_VERBOSE=1 to print the scenario and every operation of an input.
 */
#include <inttypes.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ref/ref_model.h"
#include "sluice.h"

#define MAXKEYS 8
#define MAXOPS 1500
#define TMAX UINT64_C(12000000000000000000) /* 1.2e19: t + 1e18 stays below 2^64 */
#define DMAX ((uint64_t)SLUICE_DURATION_MAX)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* ------------------------------------------------------------------ input */

typedef struct {
    const uint8_t *p;
    size_t n, i;
} rd_t;

static uint8_t rd8(rd_t *r) { return r->i < r->n ? r->p[r->i++] : 0; }
static bool rd_more(const rd_t *r) { return r->i < r->n; }
static uint64_t rd64(rd_t *r) {
    uint64_t x = 0;
    for (int k = 0; k < 8; k++) x = x << 8 | rd8(r);
    return x;
}
static uint64_t rd_below(rd_t *r, uint64_t n) { return n ? rd64(r) % n : 0; }

/* ------------------------------------------------------------------ state */

typedef struct {
    uint8_t kind;
    uint64_t token, at;
    bool has_succ;
    uint64_t succ;
} ev_t;

typedef struct {
    ev_t *v;
    size_t n, cap;
} evv_t;

typedef struct {
    sluice_key_kind_t kind;
    uint64_t u64;
    size_t len;
    unsigned char b[SLUICE_KEY_MAX];
} keydef_t;

enum { T_NONE = 0, T_HELD, T_DONE, T_REFUSED };
enum { M_EXACT = 0, M_ALIGNED = 1, M_COARSE = 2 };

typedef struct {
    int mode;
    uint64_t tick, unit; /* unit: tick in aligned mode, else 1 */
    sluice_policy_t pol;
    uint64_t W; /* main duration, for time steps */
    uint64_t cap;
    int nkeys;
    keydef_t keys[MAXKEYS];
    sluice_limiter_t *core;
    ref_model_t *ref;
    evv_t ce[MAXKEYS], re[MAXKEYS];
    size_t cmp[MAXKEYS];
    uint8_t *tc, *tr; /* token states, core and model */
    size_t ntok;
    uint64_t now;      /* latest time handed to the core */
    uint64_t wheel_lo; /* wheel time before the current advance (coarse) */
    uint64_t wheel_hi; /* wheel time bound of the current call */
    bool in_advance;
    bool closed;
    bool quiet; /* the core is emit_only */
    int op;
    bool verbose;
    /* plans (a rate policy only) */
    bool plans;
    char pname[4][4];
    sluice_rate_quota_t pq[4][4];
    sluice_plan_t pp[4];
    sluice_plans_t table;
} ctx_t;

static ctx_t *G; /* for messages */

static void finding(const char *fmt, ...) {
    va_list ap;
    fprintf(stderr,
            "\nfuzz_diff: FINDING at op %d (mode %d, tick %" PRIu64 ", policy kind %d, interval %" PRId64
            ", now %" PRIu64 "): ",
            G ? G->op : -1, G ? G->mode : -1, G ? G->tick : 0, G ? (int)G->pol.kind : 0, G ? G->pol.interval_ns : 0,
            G ? G->now : 0);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    abort();
}

#define REQUIRE(cond, ...)                                                                                             \
    do {                                                                                                               \
        if (!(cond)) finding(__VA_ARGS__);                                                                             \
    } while (0)

static sluice_key_t key_of(const ctx_t *c, int k) {
    const keydef_t *d = &c->keys[k];
    if (d->kind == SLUICE_KEY_U64) return sluice_key_u64(d->u64);
    return sluice_key_bytes(d->len ? d->b : NULL, d->len);
}

static int key_index(const ctx_t *c, sluice_key_t k) {
    for (int i = 0; i < c->nkeys; i++)
        if (ref_key_equal(key_of(c, i), k)) return i;
    return -1;
}

static void evpush(evv_t *v, ev_t e) {
    if (v->n == v->cap) {
        v->cap = v->cap ? 2 * v->cap : 16;
        v->v = realloc(v->v, v->cap * sizeof *v->v);
        if (!v->v) abort();
    }
    v->v[v->n++] = e;
}

static void account(ctx_t *c, uint8_t *st, const char *who, int k, uint64_t tok) {
    REQUIRE(tok >= 1 && tok <= c->ntok, "%s: event for unknown token %" PRIu64, who, tok);
    REQUIRE(st[tok] == T_HELD, "%s: token %" PRIu64 " reported in state %d (%s)", who, tok, st[tok],
            st[tok] == T_REFUSED ? "its submit failed: never taken"
            : st[tok] == T_DONE  ? "doubled"
                                 : "not held");
    st[tok] = T_DONE;
    (void)k;
}

static void on_event(void *user, const sluice_event_t *e) {
    ctx_t *c = user;
    int k = key_index(c, e->key);
    REQUIRE(k >= 0, "core: event for a key that is none of the input's");
    REQUIRE(e->kind >= SLUICE_EVENT_EMIT && e->kind <= SLUICE_EVENT_DISCARD, "core: event kind %d", e->kind);
    REQUIRE(!c->quiet || e->kind == SLUICE_EVENT_EMIT, "core: event kind %d under emit_only", e->kind);
    account(c, c->tc, "core", k, e->token);
    REQUIRE(e->at <= c->now, "core: event at %" PRIu64 " after the latest time %" PRIu64 " (early fire)", e->at,
            c->now);
    if (c->in_advance && c->mode == M_COARSE) {
        /* a timer fired by advance: deadline in (previous wheel time, wheel time] */
        REQUIRE(e->at <= c->wheel_hi,
                "core: advance fired deadline %" PRIu64 " past the wheel time %" PRIu64 " (early)", e->at, c->wheel_hi);
        REQUIRE(e->at > c->wheel_lo,
                "core: advance fired deadline %" PRIu64 " that was due at the previous wheel "
                "time %" PRIu64 " (late)",
                e->at, c->wheel_lo);
    }
    REQUIRE(!e->has_successor || e->kind == SLUICE_EVENT_DROP, "core: a successor on a non-DROP event");
    ev_t x = { (uint8_t)e->kind, e->token, e->at, e->has_successor, e->successor };
    evpush(&c->ce[k], x);
}

static void take_ref(ctx_t *c) {
    const ref_event_t *ev = ref_events(c->ref);
    size_t n = ref_event_count(c->ref);
    for (size_t i = 0; i < n; i++) {
        int k = key_index(c, ev[i].key);
        REQUIRE(k >= 0, "model: unknown key");
        account(c, c->tr, "model", k, ev[i].token);
        if (c->quiet && ev[i].kind != SLUICE_EVENT_EMIT) {
            /* emit_only: the core counts this token out without an event (a
             * core that emitted it instead has an event the model lacks) */
            if (c->tc[ev[i].token] == T_HELD) c->tc[ev[i].token] = T_DONE;
            continue;
        }
        ev_t x = { (uint8_t)ev[i].kind, ev[i].token, ev[i].at, ev[i].has_successor, ev[i].successor };
        evpush(&c->re[k], x);
    }
    ref_clear_events(c->ref);
}

/* all: every key equal; else `touched` equal and the others: model a prefix of the core */
static void compare(ctx_t *c, bool all, int touched) {
    take_ref(c);
    for (int k = 0; k < c->nkeys; k++) {
        evv_t *a = &c->ce[k], *b = &c->re[k];
        size_t m = a->n < b->n ? a->n : b->n;
        for (size_t i = c->cmp[k]; i < m; i++) {
            ev_t x = a->v[i], y = b->v[i];
            REQUIRE(x.kind == y.kind && x.token == y.token && x.at == y.at && x.has_succ == y.has_succ &&
                        (!x.has_succ || x.succ == y.succ),
                    "key %d event %zu: core kind %d token %" PRIu64 " at %" PRIu64 " successor %d:%" PRIu64
                    ", model kind %d token %" PRIu64 " at %" PRIu64 " successor %d:%" PRIu64,
                    k, i, x.kind, x.token, x.at, x.has_succ, x.succ, y.kind, y.token, y.at, y.has_succ, y.succ);
        }
        c->cmp[k] = m;
        REQUIRE(a->n >= b->n, "key %d: the model has %zu events, the core %zu (a due timer did not fire: late)", k,
                b->n, a->n);
        if (all || k == touched)
            REQUIRE(a->n == b->n, "key %d: the core has %zu events, the model %zu (fired early or wrongly)", k, a->n,
                    b->n);
    }
}

static void check_core(ctx_t *c) {
    if (!c->core) return;
    REQUIRE(sluice_limiter_check(c->core) == 0, "sluice_limiter_check failed");
}

static uint64_t new_token(ctx_t *c) {
    c->ntok++;
    return c->ntok;
}

/* ------------------------------------------------------------------ scenario */

static uint64_t pick_duration(rd_t *r) {
    static const uint64_t table[] = { 0,
                                      1,
                                      2,
                                      3,
                                      5,
                                      7,
                                      10,
                                      63,
                                      64,
                                      65,
                                      100,
                                      999,
                                      1000,
                                      4095,
                                      4096,
                                      1000000,
                                      1000001,
                                      1000000000,
                                      UINT64_C(4294967296),
                                      (UINT64_C(1) << 48) - 1,
                                      UINT64_C(1) << 48,
                                      (UINT64_C(1) << 48) + 1,
                                      UINT64_C(1000000000000000),
                                      UINT64_C(100000000000000000),
                                      DMAX - 1,
                                      DMAX };
    uint8_t b = rd8(r);
    if (b < 200) return table[b % (sizeof table / sizeof table[0])];
    if (b < 230) return rd_below(r, 100000);
    return rd_below(r, DMAX + 1);
}

static void gen_keys(ctx_t *c, rd_t *r) {
    c->nkeys = 1 + rd8(r) % MAXKEYS;
    for (int k = 0; k < c->nkeys; k++) {
        keydef_t *d = &c->keys[k];
        for (int attempt = 0;; attempt++) {
            memset(d, 0, sizeof *d);
            uint8_t b = rd8(r);
            switch (b % 8) {
            case 0:
                d->kind = SLUICE_KEY_U64;
                d->u64 = rd8(r) % 4;
                break;
            case 1:
                d->kind = SLUICE_KEY_U64;
                d->u64 = rd64(r);
                break;
            case 2:
                d->kind = SLUICE_KEY_BYTES;
                d->len = 0;
                break;
            case 3: /* zero bytes */
                d->kind = SLUICE_KEY_BYTES;
                d->len = 1 + rd8(r) % 16;
                break;
            case 4: /* raw short bytes */
                d->kind = SLUICE_KEY_BYTES;
                d->len = 1 + rd8(r) % 24;
                for (size_t i = 0; i < d->len; i++) d->b[i] = rd8(r) % 4;
                break;
            case 5: /* SLUICE_KEY_MAX bytes, differing from each other in the last byte */
                d->kind = SLUICE_KEY_BYTES;
                d->len = SLUICE_KEY_MAX - (rd8(r) % 2);
                memset(d->b, 0x5A, d->len);
                d->b[d->len - 1] = rd8(r);
                break;
            default: { /* a look-alike of an earlier key */
                if (k == 0) {
                    d->kind = SLUICE_KEY_U64;
                    d->u64 = 0;
                    break;
                }
                const keydef_t *o = &c->keys[rd8(r) % k];
                d->kind = SLUICE_KEY_BYTES;
                if (o->kind == SLUICE_KEY_U64) {
                    d->len = 8;
                    for (int i = 0; i < 8; i++) d->b[i] = (unsigned char)(o->u64 >> (8 * i));
                } else {
                    memcpy(d->b, o->b, o->len);
                    d->len = o->len;
                    if (d->len && (b & 16))
                        d->len--;
                    else if (d->len < SLUICE_KEY_MAX)
                        d->b[d->len++] = 0;
                }
                break;
            }
            }
            if (key_index(c, key_of(c, k)) == k || attempt > 3) break; /* distinct from earlier keys */
        }
        if (key_index(c, key_of(c, k)) != k) { /* still a duplicate: make it unique */
            d->kind = SLUICE_KEY_U64;
            d->u64 = UINT64_C(0xF00D000000000000) + (uint64_t)k;
        }
    }
}

static sluice_policy_t gen_policy(ctx_t *c, rd_t *r) {
    uint8_t b = rd8(r), f = rd8(r);
    sluice_policy_t p;
    uint64_t u = c->unit;
    uint64_t W = pick_duration(r);
    if (u > 1) W = (W > DMAX / u ? DMAX / u : W) * u;
    switch (b % 4) {
    case 0: {
        bool lead = f & 1, trail = (f & 2) != 0;
        if (!lead && !trail) lead = true;
        p = sluice_throttle((int64_t)W, lead, trail, (f & 4) ? SLUICE_PICK_FIRST : SLUICE_PICK_LATEST);
        break;
    }
    case 1: p = sluice_audit((int64_t)W); break;
    case 2: {
        bool lead = f & 1, trail = (f & 2) != 0;
        if (!lead && !trail) trail = true;
        int64_t mw = -1;
        if (f & 8) {
            uint64_t m = pick_duration(r);
            if (u > 1) m = (m > DMAX / u ? DMAX / u : m) * u;
            if (m < W) m = W + ((f & 16) ? 0 : m);
            if (m > DMAX) m = DMAX;
            if (m < W) m = W;
            mw = (int64_t)m;
        }
        p = sluice_debounce((int64_t)W, lead, trail, mw);
        break;
    }
    default: {
        uint64_t limit = (f & 1) ? 1 + rd8(r) % 10 : 1 + rd_below(r, SLUICE_RATE_MAX);
        uint64_t per = W ? W : 1;
        /* keep T = per / limit <= 2e15 so the exact TAT stays below 2^64 */
        if (per / limit > UINT64_C(2000000000000000)) per = limit * UINT64_C(2000000000000000);
        if (per > DMAX) per = DMAX;
        uint64_t burst = (f & 2) ? 0 : (f & 4) ? 1 : 1 + rd_below(r, (f & 8) ? SLUICE_RATE_MAX : 16);
        p = sluice_rate(limit, (int64_t)per, burst);
        W = per / limit ? per / limit : 1;
        break;
    }
    }
    c->W = W ? W : 1;
    return p;
}

static uint64_t next_time(ctx_t *c, rd_t *r) {
    uint8_t b = rd8(r);
    uint64_t t = c->now, W = c->W, d;
    switch (b % 12) {
    case 0: d = 0; break;
    case 1: d = 1; break;
    case 2: d = c->tick; break;
    case 3: d = W > 1 ? W - 1 : 0; break;
    case 4: d = W; break;
    case 5: d = W + 1; break;
    case 6: d = rd_below(r, 2 * W + 2); break;
    case 7: d = rd_below(r, 64) * c->tick; break;
    case 8: d = (b & 0x80) ? rd_below(r, UINT64_C(1) << 50) : UINT64_C(86400000000000) * (1 + rd8(r)); break;
    case 9: /* backwards */
        d = 0;
        t = t - (t < W ? t : rd_below(r, W + 1));
        break;
    case 10: d = rd_below(r, 1000); break;
    default: d = rd_below(r, W / 2 + 2); break;
    }
    if (t > TMAX - d)
        t = TMAX;
    else
        t += d;
    if (c->mode == M_ALIGNED) t = t / c->unit * c->unit;
    return t;
}

/* ------------------------------------------------------------------ operations */

static void core_advance_to(ctx_t *c, uint64_t t, size_t bound) {
    uint64_t prev_hi = c->wheel_hi;
    if (t > c->now) c->now = t;
    c->wheel_lo = prev_hi;
    c->wheel_hi = c->now / c->tick * c->tick;
    if (c->wheel_hi < prev_hi) c->wheel_hi = prev_hi;
    c->in_advance = true;
    for (int guard = 0;; guard++) {
        int64_t n = sluice_limiter_advance(c->core, t, bound);
        REQUIRE(n >= 0, "advance returned %" PRId64, n);
        REQUIRE(bound == 0 || (size_t)n <= bound, "advance handled %" PRId64 " > bound %zu", n, bound);
        if (bound == 0 || (size_t)n < bound) break;
        REQUIRE(guard < 1000000, "advance never finishes");
    }
    c->in_advance = false;
    check_core(c);
}

static void sync_advance(ctx_t *c, uint64_t t, size_t bound) {
    core_advance_to(c, t, bound);
    REQUIRE(ref_advance(c->ref, t) >= 0, "model advance");
    compare(c, true, -1);
    /* nothing due is left on either side */
    uint64_t rn = ref_next_deadline(c->ref);
    REQUIRE(rn > c->now || rn == UINT64_MAX, "model still has a deadline %" PRIu64 " <= now", rn);
}

static void refused_token(ctx_t *c, uint64_t tok) { c->tc[tok] = c->tr[tok] = T_REFUSED; }

/* A cost from the input: for rate mostly valid (1, small, the burst, just
 * above it, anything up to 10^12), sometimes invalid; elsewhere mostly 1. */
static uint64_t pick_cost(ctx_t *c, rd_t *r) {
    uint8_t b = rd8(r);
    uint64_t burst = c->pol.burst ? c->pol.burst : c->pol.limit;
    if (c->pol.kind != SLUICE_RATE) return b < 250 ? 1 : b < 253 ? 0 : 2;
    switch (b % 10) {
    case 0:
    case 1:
    case 2: return 1;
    case 3: return 1 + rd8(r) % 8;
    case 4: return burst;
    case 5: return burst < SLUICE_RATE_MAX ? burst + 1 : burst;
    case 6: return 1 + rd_below(r, burst);
    case 7: return 1 + rd_below(r, SLUICE_RATE_MAX);
    case 8: return (b & 0x80) ? SLUICE_RATE_MAX : SLUICE_RATE_MAX - rd8(r);
    default: return (b & 0x80) ? 0 : SLUICE_RATE_MAX + 1 + rd8(r);
    }
}

/* ------------------------------------------------------------------ plans */

static const char *const qnames[] = { "second", "minute", "hour", "day", "burst" };

/* A table of 1..4 plans of 1..4 quotas from the input (max_quotas 4). */
static void gen_plans(ctx_t *c, rd_t *r) {
    size_t np = 1 + rd8(r) % 4;
    for (size_t i = 0; i < np; i++) {
        snprintf(c->pname[i], sizeof c->pname[i], "p%u", (unsigned)i);
        size_t nq = 1 + rd8(r) % 4;
        bool used[5] = { false };
        for (size_t k = 0; k < nq; k++) {
            uint8_t f = rd8(r);
            int n = f % 5;
            while (used[n]) n = (n + 1) % 5;
            used[n] = true;
            sluice_rate_quota_t *q = &c->pq[i][k];
            q->name = qnames[n];
            q->limit = (f & 0x10) ? 1 + rd8(r) % 10 : 1 + rd_below(r, SLUICE_RATE_MAX);
            uint64_t per = pick_duration(r);
            if (c->unit > 1) per = (per > DMAX / c->unit ? DMAX / c->unit : per) * c->unit;
            if (per == 0) per = c->unit;
            if (f & 0x20) { /* T a whole number of units */
                uint64_t m = per % 4 + 1;
                if (q->limit <= DMAX / c->unit / m) per = q->limit * m * c->unit;
            }
            if (per > DMAX) per = DMAX;
            q->per_ns = (int64_t)per;
            q->burst = (f & 0x40) ? 0 : (f & 0x80) ? 1 : 1 + rd_below(r, 2 * q->limit);
        }
        c->pp[i].name = c->pname[i];
        c->pp[i].quotas = c->pq[i];
        c->pp[i].nquotas = nq;
    }
    c->table.plans = c->pp;
    c->table.nplans = np;
    c->table.max_quotas = 4;
}

static void cmp_detail(const sluice_plan_detail_t *a, const sluice_plan_detail_t *b, const char *what) {
    REQUIRE(a->plan == b->plan && a->nquotas == b->nquotas && a->refused == b->refused,
            "%s: detail plan %u/%u nquotas %u/%u refused %#x/%#x (core/model)", what, a->plan, b->plan, a->nquotas,
            b->nquotas, a->refused, b->refused);
    for (uint32_t i = 0; i < b->nquotas && i < SLUICE_PLAN_QUOTAS_MAX; i++) {
        const sluice_quota_figures_t *x = &a->quotas[i], *y = &b->quotas[i];
        REQUIRE(x->remaining == y->remaining && x->full == y->full && x->retry == y->retry && x->burst == y->burst &&
                    x->limit == y->limit && x->per_ns == y->per_ns,
                "%s: quota %u: core remaining %" PRIu64 " full %" PRIu64 " retry %" PRIu64 ", model %" PRIu64
                " %" PRIu64 " %" PRIu64,
                what, i, x->remaining, x->full, x->retry, y->remaining, y->full, y->retry);
    }
}

static void do_submit_plan(ctx_t *c, rd_t *r, int k, uint64_t t) {
    uint64_t tok = new_token(c);
    uint64_t cost = pick_cost(c, r);
    uint32_t plan = rd8(r) % (uint32_t)(c->table.nplans + 1); /* the last: no such plan */
    sluice_key_t key = key_of(c, k);
    sluice_decision_t dc, dr;
    sluice_plan_detail_t tc, tr;
    memset(&dc, 0, sizeof dc);
    memset(&dr, 0, sizeof dr);
    memset(&tc, 0, sizeof tc);
    memset(&tr, 0, sizeof tr);
    uint64_t before = c->now;
    if (t > c->now) c->now = t;
    uint64_t te = c->now;
    int rc = sluice_limiter_submit_plan(c->core, key, tok, cost, plan, t, &dc, &tc);
    int rr = ref_submit_plan(c->ref, key, tok, cost, plan, te, &dr, &tr);
    if (rc == SLUICE_ERANGE || rc == SLUICE_EINVAL || rc == SLUICE_ENOPLAN) c->now = before;
    REQUIRE(rc == rr, "submit_plan (cost %" PRIu64 ", plan %u): core %d, model %d", cost, plan, rc, rr);
    if (rc == 0) {
        REQUIRE(dc.kind == dr.kind && dc.at == dr.at && dc.remaining == dr.remaining && dc.full == dr.full &&
                    dc.now == dr.now,
                "decision (cost %" PRIu64 ", plan %u): core %d@%" PRIu64 " remaining %" PRIu64 " full %" PRIu64
                ", model %d@%" PRIu64 " remaining %" PRIu64 " full %" PRIu64,
                cost, plan, dc.kind, dc.at, dc.remaining, dc.full, dr.kind, dr.at, dr.remaining, dr.full);
        cmp_detail(&tc, &tr, "submit_plan");
        c->tc[tok] = c->tr[tok] = T_DONE;
    } else {
        refused_token(c, tok);
    }
}

static void do_quota_plan(ctx_t *c, rd_t *r, int k, uint64_t t) {
    uint64_t cost = pick_cost(c, r);
    uint32_t plan = rd8(r) % (uint32_t)(c->table.nplans + 1);
    sluice_key_t key = key_of(c, k);
    sluice_stats_t before, after;
    REQUIRE(sluice_limiter_stats(c->core, &before) == 0, "stats");
    uint64_t te = t > c->now ? t : c->now;
    sluice_quota_t qc, qm;
    sluice_plan_detail_t tc, tr;
    memset(&qc, 0, sizeof qc);
    memset(&qm, 0, sizeof qm);
    memset(&tc, 0, sizeof tc);
    memset(&tr, 0, sizeof tr);
    int rc = sluice_limiter_quota_plan(c->core, key, cost, plan, t, &qc, &tc);
    int rr = ref_quota_plan(c->ref, key, cost, plan, te, &qm, &tr);
    REQUIRE(rc == rr, "quota_plan (cost %" PRIu64 ", plan %u): core %d, model %d", cost, plan, rc, rr);
    if (rc == 0) {
        REQUIRE(qc.burst == qm.burst && qc.remaining == qm.remaining && qc.full == qm.full && qc.retry == qm.retry &&
                    qc.now == qm.now,
                "quota_plan (cost %" PRIu64 ", plan %u): core remaining %" PRIu64 " full %" PRIu64 " retry %" PRIu64
                ", model %" PRIu64 " %" PRIu64 " %" PRIu64,
                cost, plan, qc.remaining, qc.full, qc.retry, qm.remaining, qm.full, qm.retry);
        cmp_detail(&tc, &tr, "quota_plan");
    }
    REQUIRE(sluice_limiter_stats(c->core, &after) == 0, "stats");
    REQUIRE(after.live_keys == before.live_keys && after.memory_bytes == before.memory_bytes,
            "a quota read changed the limiter");
}

static void do_set_plans(ctx_t *c, rd_t *r) {
    gen_plans(c, r);
    if (rd8(r) & 1) c->table.max_quotas = 0; /* 0: the limiter's */
    int rc = sluice_limiter_set_plans(c->core, &c->table);
    int rr = ref_set_plans(c->ref, &c->table);
    REQUIRE(rc == rr, "set_plans: core %d, model %d", rc, rr);
}

static void do_submit(ctx_t *c, rd_t *r, int k, uint64_t t) {
    uint64_t tok = new_token(c);
    uint64_t cost = pick_cost(c, r);
    sluice_key_t key = key_of(c, k);
    sluice_decision_t dc = { 0 }, dr = { 0 };
    uint64_t before = c->now;
    if (t > c->now) c->now = t;
    /* the core clamps a time going back to the latest it has seen (which, in
     * coarse mode, includes advance calls the model did not get) */
    uint64_t te = c->now;
    int rc = c->quiet && cost == 1 && key.kind == SLUICE_KEY_U64 && (tok & 1)
                 ? sluice_limiter_submit_u64(c->core, key.u64, tok, t, &dc)
                 : sluice_limiter_submit_cost(c->core, key, tok, cost, t, &dc);
    if (rc == SLUICE_ERANGE || rc == SLUICE_EINVAL) c->now = before; /* a refused argument: the clock did not move */
    if (rc == SLUICE_EFULL) {
        sluice_stats_t st;
        REQUIRE(sluice_limiter_stats(c->core, &st) == 0, "stats");
        REQUIRE(c->cap && st.live_keys >= c->cap, "SLUICE_EFULL with %" PRIu64 " live keys, cap %" PRIu64, st.live_keys,
                c->cap);
        refused_token(c, tok);
        /* like the refused call, fire the key's due timers on the model */
        int rp = ref_pending(c->ref, key, te);
        REQUIRE(rp >= 0, "model pending");
        compare(c, false, k);
        return;
    }
    int rr = ref_submit_cost(c->ref, key, tok, cost, te, &dr);
    REQUIRE(rc == rr, "submit (cost %" PRIu64 "): core %d (%s), model %d", cost, rc, sluice_strerror(rc), rr);
    if (rc == 0) {
        REQUIRE(dc.kind == dr.kind && dc.at == dr.at && dc.remaining == dr.remaining && dc.full == dr.full,
                "decision (cost %" PRIu64 "): core %d@%" PRIu64 " remaining %" PRIu64 " full %" PRIu64
                ", model %d@%" PRIu64 " remaining %" PRIu64 " full %" PRIu64,
                cost, dc.kind, dc.at, dc.remaining, dc.full, dr.kind, dr.at, dr.remaining, dr.full);
        REQUIRE(dc.at >= t || dc.at >= c->now || dc.kind == SLUICE_EMITTED, "decision time %" PRIu64 " in the past",
                dc.at);
        uint8_t s = dc.kind == SLUICE_SCHEDULED ? T_HELD : T_DONE;
        REQUIRE(c->tc[tok] == T_NONE && c->tr[tok] == T_NONE, "token %" PRIu64 " reported before its decision", tok);
        c->tc[tok] = c->tr[tok] = s;
        compare(c, false, k);
    } else {
        /* refused before anything ran: no key was touched */
        refused_token(c, tok);
        compare(c, false, -1);
    }
}

/* A quota peek: the same answer as the model's, and nothing changes. */
static void do_quota(ctx_t *c, rd_t *r, int k, uint64_t t) {
    uint64_t cost = pick_cost(c, r);
    sluice_key_t key = key_of(c, k);
    sluice_stats_t before, after;
    REQUIRE(sluice_limiter_stats(c->core, &before) == 0, "stats");
    uint64_t nd = sluice_limiter_next_deadline(c->core);
    uint64_t te = t > c->now ? t : c->now; /* a peek does not move the clock */
    sluice_quota_t qc, qm;
    memset(&qc, 0, sizeof qc);
    memset(&qm, 0, sizeof qm);
    int rc = sluice_limiter_quota(c->core, key, cost, t, &qc);
    int rr = ref_quota(c->ref, key, cost, te, &qm);
    REQUIRE(rc == rr, "quota (cost %" PRIu64 "): core %d, model %d", cost, rc, rr);
    if (rc == 0)
        REQUIRE(qc.burst == qm.burst && qc.remaining == qm.remaining && qc.full == qm.full && qc.retry == qm.retry,
                "quota (cost %" PRIu64 "): core remaining %" PRIu64 " full %" PRIu64 " retry %" PRIu64
                ", model %" PRIu64 " %" PRIu64 " %" PRIu64,
                cost, qc.remaining, qc.full, qc.retry, qm.remaining, qm.full, qm.retry);
    REQUIRE(sluice_limiter_stats(c->core, &after) == 0, "stats");
    REQUIRE(after.live_keys == before.live_keys && after.armed_timers == before.armed_timers &&
                after.memory_bytes == before.memory_bytes && sluice_limiter_next_deadline(c->core) == nd,
            "a quota peek changed the limiter");
    compare(c, false, -1);
}

static void do_keyop(ctx_t *c, int what, int k, uint64_t t) {
    sluice_key_t key = key_of(c, k);
    int rc, rr;
    if (t > c->now) c->now = t;
    uint64_t te = c->now;
    switch (what) {
    case 0:
        rc = sluice_limiter_flush(c->core, key, t);
        rr = ref_flush(c->ref, key, te);
        break;
    case 1:
        rc = sluice_limiter_cancel(c->core, key, t);
        rr = ref_cancel(c->ref, key, te);
        break;
    default:
        rc = sluice_limiter_pending(c->core, key, t);
        rr = ref_pending(c->ref, key, te);
        break;
    }
    REQUIRE(rc == rr, "%s: core %d, model %d", what == 0 ? "flush" : what == 1 ? "cancel" : "pending", rc, rr);
    compare(c, false, k);
}

static void do_close(ctx_t *c, uint64_t t, sluice_close_mode_t mode) {
    if (t > c->now) c->now = t;
    int rc = sluice_limiter_close(c->core, t, mode);
    int rr = ref_close(c->ref, c->now, mode);
    REQUIRE(rc == rr, "close: core %d, model %d", rc, rr);
    compare(c, true, -1);
    if (rc == 0) c->closed = true;
    REQUIRE(sluice_limiter_next_deadline(c->core) == UINT64_MAX, "next_deadline after close");
}

/* ------------------------------------------------------------------ one input */

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 4) return 0;
    rd_t r = { data, size, 0 };
    ctx_t *c = calloc(1, sizeof *c);
    if (!c) abort();
    G = c;
    c->verbose = getenv("FUZZ_DIFF_VERBOSE") != NULL;
    static const uint64_t ticks[] = { 7, 64, 1000, 1000000, 1000000000 };
    uint8_t m = rd8(&r);
    c->mode = m % 3;
    c->tick = c->mode == M_EXACT ? 1 : ticks[(m / 3) % 5];
    c->unit = c->mode == M_ALIGNED ? c->tick : 1;
    c->pol = gen_policy(c, &r);
    uint8_t s = rd8(&r);
    uint64_t start = s % 4 == 0   ? 0
                     : s % 4 == 1 ? rd8(&r)
                     : s % 4 == 2 ? rd_below(&r, UINT64_C(1) << 50)
                                  : rd_below(&r, TMAX);
    if (c->mode == M_ALIGNED) start = start / c->unit * c->unit;
    uint8_t capb = rd8(&r);
    c->cap = capb < 200 ? 0 : 1 + capb % 4;
    c->plans = c->pol.kind == SLUICE_RATE && capb >= 100 && capb < 200;
    if (c->plans) {
        gen_plans(c, &r);
        c->pol.limit = c->pq[0][0].limit; /* (pick_cost's burst) */
        c->pol.burst = c->pq[0][0].burst;
    }
    gen_keys(c, &r);
    c->quiet = (s & 0x80) && !c->plans &&
               (c->pol.kind == SLUICE_THROTTLE || c->pol.kind == SLUICE_DEBOUNCE || c->pol.kind == SLUICE_AUDIT);
    bool pre_advance = (m & 0x80) == 0 && c->mode != M_COARSE;

    sluice_config_t cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.policy = c->pol;
    cfg.tick_ns = c->tick;
    cfg.start_ns = start;
    cfg.max_keys = c->cap;
    cfg.on_event = on_event;
    cfg.user = c;
    cfg.emit_only = c->quiet;
    cfg.fixed_seed = true;
    cfg.seed[0] = UINT64_C(0x0706050403020100);
    cfg.seed[1] = UINT64_C(0x0F0E0D0C0B0A0908);
    if (c->plans) {
        cfg.policy = sluice_rate_plans();
        cfg.plans = &c->table;
    }
    int rc = sluice_limiter_new(&c->core, &cfg);
    int rr = c->plans ? ref_new_plans(&c->ref, &c->table) : ref_new(&c->ref, &c->pol);
    REQUIRE(rc == rr, "new: core %d, model %d", rc, rr);
    if (rc != 0) goto out;
    c->now = start;
    c->wheel_hi = start / c->tick * c->tick;
    size_t captok = 2 * MAXOPS + 8;
    c->tc = calloc(captok, 1);
    c->tr = calloc(captok, 1);
    if (!c->tc || !c->tr) abort();
    if (c->verbose)
        fprintf(stderr,
                "mode %d tick %" PRIu64 " kind %d W %" PRId64 " lead %d trail %d pick %d mw %d:%" PRId64
                " limit %" PRIu64 " per %" PRId64 " burst %" PRIu64 " start %" PRIu64 " cap %" PRIu64
                " keys %d pre %d emit_only %d\n",
                c->mode, c->tick, c->pol.kind, c->pol.interval_ns, c->pol.leading, c->pol.trailing, c->pol.pick,
                c->pol.has_max_wait, c->pol.max_wait_ns, c->pol.limit, c->pol.per_ns, c->pol.burst, start, c->cap,
                c->nkeys, pre_advance, c->quiet);

    for (c->op = 0; c->op < MAXOPS && rd_more(&r) && !c->closed; c->op++) {
        uint8_t o = rd8(&r);
        uint64_t t = next_time(c, &r);
        int k = rd8(&r) % c->nkeys;
        int type = o % 16;
        if (c->verbose) fprintf(stderr, "  op %d: type %d key %d t %" PRIu64 "\n", c->op, type, k, t);
        if (pre_advance && type < 12 && (o & 0x40) == 0) sync_advance(c, t, (o & 0x20) ? 1 + (o >> 7) : 0);
        if (c->plans && type < 4)
            do_submit_plan(c, &r, k, t);
        else if (c->plans && type == 6 && (o & 0x80))
            do_quota_plan(c, &r, k, t);
        else if (c->plans && type == 14 && (o & 0x80))
            do_set_plans(c, &r);
        else if (type < 6)
            do_submit(c, &r, k, t);
        else if (type == 6)
            do_quota(c, &r, k, t);
        else if (type == 7)
            do_keyop(c, 0, k, t);
        else if (type == 8)
            do_keyop(c, 1, k, t);
        else if (type == 9)
            do_keyop(c, 2, k, t);
        else if (type < 14) {
            size_t bound = (o & 0x20) ? 1 + (o >> 6) : 0;
            if (c->mode == M_COARSE) {
                core_advance_to(c, t, bound);
                compare(c, false, -1);
            } else {
                sync_advance(c, t, bound);
            }
        } else if (type == 14) {
            static unsigned char big[SLUICE_KEY_MAX + 1];
            sluice_decision_t d;
            uint64_t tok = new_token(c);
            refused_token(c, tok);
            REQUIRE(sluice_limiter_submit(c->core, sluice_key_bytes(big, sizeof big), tok, t, &d) == SLUICE_EKEYLEN,
                    "over-long key not refused");
            REQUIRE(sluice_limiter_cancel(c->core, sluice_key_bytes(big, sizeof big), t) == SLUICE_EKEYLEN,
                    "over-long key not refused (cancel)");
        } else {
            if (rd8(&r) < 64) do_close(c, t, (o & 0x80) ? SLUICE_CLOSE_DISCARD : SLUICE_CLOSE_DRAIN);
        }
        check_core(c);
    }
    if (!c->closed) {
        uint64_t t = c->now + (rd8(&r) % 2 ? c->W : 0);
        if (t > TMAX) t = TMAX;
        if (c->mode != M_COARSE && rd8(&r) % 2) {
            /* free without close: first bring both to t, then every pending token comes back as DISCARD */
            sync_advance(c, t, 0);
            sluice_limiter_free(c->core);
            c->core = NULL;
            REQUIRE(ref_close(c->ref, t, SLUICE_CLOSE_DISCARD) == 0, "model close");
            compare(c, true, -1);
            c->closed = true;
        } else {
            do_close(c, t, rd8(&r) % 2 ? SLUICE_CLOSE_DISCARD : SLUICE_CLOSE_DRAIN);
        }
    }
    if (c->core) {
        /* closed: everything fails, nothing is reported */
        sluice_decision_t d;
        REQUIRE(sluice_limiter_submit(c->core, key_of(c, 0), 0, c->now, &d) == SLUICE_ECLOSED, "submit after close");
        REQUIRE(sluice_limiter_advance(c->core, c->now, 0) == SLUICE_ECLOSED, "advance after close");
        sluice_limiter_free(c->core);
        c->core = NULL;
    }
    compare(c, true, -1);
    for (size_t t = 1; t <= c->ntok; t++) {
        REQUIRE(c->tc[t] != T_HELD, "core: token %zu scheduled but never reported", t);
        REQUIRE(c->tr[t] != T_HELD, "model: token %zu never reported (model bug)", t);
    }
out:
    if (c->core) sluice_limiter_free(c->core);
    ref_free(c->ref);
    for (int k = 0; k < MAXKEYS; k++) {
        free(c->ce[k].v);
        free(c->re[k].v);
    }
    free(c->tc);
    free(c->tr);
    free(c);
    G = NULL;
    return 0;
}
