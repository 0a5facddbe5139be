/*
 * test_differential.c — randomized differential test: the core
 * (sluice_limiter_*) against the reference model (ctests/ref/ref_model.c).
 *
 * Every run is derived from one seed: a random policy (every kind, random
 * options including interval 0, 1 ns and huge intervals, maxWait, edges,
 * pick), 1..8 keys (u64 and byte keys, empty, binary with zero bytes, up to
 * SLUICE_KEY_MAX bytes, look-alikes), a wheel tick of 1 ns (arbitrary times)
 * or the default 1 ms (times in whole ms), and a random sequence of
 * submit / flush / cancel / pending / advance / close at non-decreasing times
 * (often exactly at, just before or just after a deadline; sometimes huge
 * jumps; now and then a call is passed a time earlier than one already seen,
 * which both sides must treat as that later time). Three variants:
 *
 *  A: before every op both sides are advanced to the op time, either in
 *     one jump or deadline by deadline (advancing the core to D - 1 first and
 *     checking that it fires nothing early). Every decision is compared, and
 *     after every step each key's events (kind, token, time) must equal the
 *     model's. Stats (pending, live keys) and next_deadline (never later than
 *     the model's) are checked too.
 *  B: no advance before ops: the core's "timers first" must still give the
 *     same per-key results. Decisions are compared; the touched key's event
 *     sequence must equal the model's after each op, other keys' model
 *     sequence must be a prefix of the core's (the core may fire due timers
 *     of other keys early, never wrongly); everything equal after an advance
 *     or close.
 *  C: like B, but with a coarse wheel tick (2 ns .. 1 s, times in arbitrary
 *     ns): per-key results must still be exact (timers first does not depend
 *     on the tick), and an advance may leave only deadlines of its last tick
 *     unfired ("at most one tick late, never early"); close fires every
 *     deadline <= its time exactly.
 *
 * In some runs of variant A the emit callback submits a follow-up value (same
 * key or another) for three in four emitted tokens, two levels deep; the
 * model does the same from its after-transition hook; the follow-ups'
 * decisions and events must agree too (re-entrancy: "handled after the
 * transition that emitted has completed, and it respects the window").
 *
 * Always: sluice_limiter_check() after every step; every token accounted for
 * exactly once (decision EMITTED/DROPPED, or SCHEDULED then exactly one
 * event of the right key); nothing outstanding after close or free.
 *
 * Variant P (after the others; see its section below) does the same for a
 * rate limiter of several quotas per key and plans (sluice_plans.h).
 *
 * Env: SLUICE_DIFF_ITERS (number of runs, default 40000, about 3 s at -O2),
 *      SLUICE_DIFF_SEED (run only this seed, printing every op),
 *      SLUICE_DIFF_SEED_BASE (first seed, default 1).
 * On failure prints the seed, the scenario and the ops so far, and exits 1.
 */
#include <inttypes.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ref/ref_model.h"
#include "sluice.h"

#define MAXKEYS 8
#define NS_TMAX UINT64_C(12000000000000000000) /* 1.2e19: deadlines stay far below 2^64 */
#define DUR_MAX UINT64_C(1000000000000000000)  /* 1e18 = SLUICE_DURATION_MAX */

/* ------------------------------------------------------------------ */
/* rng (splitmix64)                                                    */
/* ------------------------------------------------------------------ */

typedef struct {
    uint64_t s;
} rng_t;

static uint64_t rnext(rng_t *r) {
    uint64_t z = (r->s += UINT64_C(0x9E3779B97F4A7C15));
    z = (z ^ (z >> 30)) * UINT64_C(0xBF58476D1CE4E5B9);
    z = (z ^ (z >> 27)) * UINT64_C(0x94D049BB133111EB);
    return z ^ (z >> 31);
}
/* uniform in [0, n) (n > 0; negligible bias is fine here) */
static uint64_t rbelow(rng_t *r, uint64_t n) {
    __extension__ typedef unsigned __int128 u128;
    return (uint64_t)(((u128)rnext(r) * n) >> 64);
}
/* uniform in [lo, hi] */
static uint64_t rrange(rng_t *r, uint64_t lo, uint64_t hi) {
    if (hi <= lo) return lo;
    if (hi - lo == UINT64_MAX) return rnext(r);
    return lo + rbelow(r, hi - lo + 1);
}
static bool rchance(rng_t *r, unsigned pct) { return rbelow(r, 100) < pct; }

/* ------------------------------------------------------------------ */
/* run context                                                         */
/* ------------------------------------------------------------------ */

/* A value submitted from inside an emit callback (re-entrancy), per token. */
struct nested {
    uint8_t depth;     /* 0: submitted by the test; n: by a callback of a depth n-1 token */
    uint32_t child;    /* the token submitted when this one was emitted, or 0 */
    bool cdone, rdone; /* the child's submit was made on the core / model side */
    int crc, rrc;
    sluice_decision_t cdec, rdec;
};

typedef struct {
    sluice_key_kind_t kind;
    uint64_t u64;
    size_t len;
    unsigned char bytes[SLUICE_KEY_MAX + 1];
} keydef_t;

typedef struct {
    sluice_event_kind_t kind;
    uint64_t token, at;
    int step;
    bool has_succ; /* DROP of a superseded token: its successor */
    uint64_t succ;
} kev_t;

typedef struct {
    kev_t *v;
    size_t n, cap;
} kevvec_t;

enum op_type { OP_SUBMIT, OP_FLUSH, OP_CANCEL, OP_PENDING, OP_ADVANCE, OP_CLOSE, OP_FREE, OP_BADKEY, OP_PRE, OP_QUOTA };

typedef struct {
    int type;
    int key;
    uint64_t t;
    uint64_t token;
    int arg;       /* close mode, advance bound, pre-advance mode */
    uint64_t cost; /* submit, quota: the cost asked */
    char result[160];
} oprec_t;

typedef struct {
    uint64_t seed;
    rng_t rng;
    int variant;    /* 0 = A (advance first), 1 = B (no advance), 2 = C (B with a coarse tick) */
    bool msmode;    /* default 1 ms tick, whole-ms times */
    uint64_t tick;  /* the wheel tick in ns */
    uint64_t start; /* the clock at creation (config.start_ns) */
    uint64_t u;     /* time unit: 1 ns or 1 ms */
    sluice_policy_t pol;
    uint64_t scale_units, scale2_units;
    int nkeys;
    keydef_t keys[MAXKEYS];

    sluice_limiter_t *core;
    ref_model_t *ref;
    bool closed;
    uint64_t now;

    kevvec_t cke[MAXKEYS], rke[MAXKEYS];
    size_t cmp[MAXKEYS];

    uint32_t salt;
    size_t ntok, captok;
    uint8_t *tcore, *tref; /* 0 unknown, 1 outstanding, 2 done */
    int8_t *tkey;
    struct nested *tn;     /* re-entrancy: per token, its child and the child's submits */
    size_t nested_checked; /* tokens up to this index have had their nested submits compared */
    bool reentrant;        /* emit callbacks (and the model's hook) submit follow-up values */
    uint64_t op_now;       /* the time passed to the current call */
    uint64_t nested_calls;

    oprec_t *ops;
    size_t nops, capops;
    int step;
    bool skip_at; /* free: event times are not compared */
    bool in_submit;
    uint64_t step_events, step_last_at;
    uint64_t out_of_order; /* info: cross-key events of one call not in time order */

    bool failed;
    char msg[2048];
    bool verbose;
} ctx_t;

static uint64_t g_out_of_order, g_runs, g_ops, g_events, g_nested;
static uint64_t g_dec[4], g_ev[4], g_costly, g_quotas;

static void failf(ctx_t *c, const char *fmt, ...) {
    if (c->failed) return;
    c->failed = true;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->msg, sizeof c->msg, fmt, ap);
    va_end(ap);
}

static void *xrealloc(void *p, size_t n) {
    void *q = realloc(p, n);
    if (!q) {
        fprintf(stderr, "out of memory\n");
        exit(2);
    }
    return q;
}

static void kev_push(kevvec_t *v, kev_t e) {
    if (v->n == v->cap) {
        v->cap = v->cap ? 2 * v->cap : 32;
        v->v = xrealloc(v->v, v->cap * sizeof *v->v);
    }
    v->v[v->n++] = e;
}

static sluice_key_t key_of(const ctx_t *c, int k) {
    const keydef_t *d = &c->keys[k];
    if (d->kind == SLUICE_KEY_U64) return sluice_key_u64(d->u64);
    return sluice_key_bytes(d->len ? d->bytes : NULL, d->len);
}

static int key_index(const ctx_t *c, sluice_key_t k) {
    for (int i = 0; i < c->nkeys; i++)
        if (ref_key_equal(key_of(c, i), k)) return i;
    return -1;
}

static const char *ev_name(int k) {
    switch (k) {
    case SLUICE_EVENT_EMIT: return "EMIT";
    case SLUICE_EVENT_DROP: return "DROP";
    case SLUICE_EVENT_DISCARD: return "DISCARD";
    default: return "?";
    }
}
static const char *dec_name(int k) {
    switch (k) {
    case SLUICE_EMITTED: return "EMITTED";
    case SLUICE_SCHEDULED: return "SCHEDULED";
    case SLUICE_DROPPED: return "DROPPED";
    default: return "?";
    }
}

/* ------------------------------------------------------------------ */
/* tokens                                                              */
/* ------------------------------------------------------------------ */

static uint64_t new_token(ctx_t *c, int key) {
    if (c->ntok + 1 >= c->captok) {
        size_t nc = c->captok ? 2 * c->captok : 256;
        c->tcore = xrealloc(c->tcore, nc);
        c->tref = xrealloc(c->tref, nc);
        c->tkey = xrealloc(c->tkey, nc);
        memset(c->tcore + c->captok, 0, nc - c->captok);
        memset(c->tref + c->captok, 0, nc - c->captok);
        memset(c->tkey + c->captok, -1, nc - c->captok);
        c->tn = xrealloc(c->tn, nc * sizeof *c->tn);
        memset(c->tn + c->captok, 0, (nc - c->captok) * sizeof *c->tn);
        c->captok = nc;
    }
    size_t idx = ++c->ntok;
    c->tkey[idx] = (int8_t)key;
    return ((uint64_t)c->salt << 32) | idx;
}

/* Returns the token's index, or 0 when it is not one of ours. */
static size_t token_index(const ctx_t *c, uint64_t tok) {
    if ((tok >> 32) != c->salt) return 0;
    size_t idx = (size_t)(tok & 0xFFFFFFFFu);
    return idx >= 1 && idx <= c->ntok ? idx : 0;
}

static void account_event(ctx_t *c, uint8_t *st, const char *who, int k, uint64_t tok, int kind) {
    size_t idx = token_index(c, tok);
    if (!idx) {
        failf(c, "%s: event %s for unknown token %#" PRIx64, who, ev_name(kind), tok);
        return;
    }
    if (st[idx] != 1)
        failf(c, "%s: event %s for token %zu that is %s", who, ev_name(kind), idx,
              st[idx] == 0 ? "not held by the limiter (never scheduled, or its submit has not returned)"
                           : "already accounted for");
    else if (c->tkey[idx] != k)
        failf(c, "%s: event %s for token %zu with key k%d, submitted with key k%d", who, ev_name(kind), idx, k,
              c->tkey[idx]);
    st[idx] = 2;
}

static void account_decision(ctx_t *c, uint8_t *st, uint64_t tok, const sluice_decision_t *d) {
    size_t idx = token_index(c, tok);
    st[idx] = d->kind == SLUICE_SCHEDULED ? 1 : 2;
}

/* ------------------------------------------------------------------ */
/* re-entrancy                                                         */
/* ------------------------------------------------------------------ */

/* Whether the emission of token `idx` makes the callback submit a follow-up. */
static bool nested_wanted(const ctx_t *c, size_t idx) {
    if (!c->reentrant || idx == 0 || c->tn[idx].depth >= 2) return false;
    return ((uint32_t)idx * UINT32_C(2654435761)) >> 30 != 0; /* three in four */
}

/* The follow-up of `idx`: the same token (and key) on both sides. */
static size_t nested_child(ctx_t *c, size_t idx) {
    if (c->tn[idx].child == 0) {
        int key = c->tkey[idx];
        if (idx % 3 == 0) key = (key + 1) % c->nkeys; /* sometimes another key */
        uint8_t depth = c->tn[idx].depth;
        size_t ch = (size_t)(new_token(c, key) & 0xFFFFFFFFu);
        c->tn[ch].depth = (uint8_t)(depth + 1);
        c->tn[idx].child = (uint32_t)ch;
    }
    return c->tn[idx].child;
}

/* Called from the core's callback (side 0) or the model's hook (side 1) when
 * token `idx` is emitted: "a call made from inside an emit callback is
 * handled after the transition that emitted has completed, and it respects
 * the window like any other call". */
static void nested_submit(ctx_t *c, int side, size_t idx) {
    if (!nested_wanted(c, idx)) return;
    size_t ch = nested_child(c, idx);
    uint64_t tok = ((uint64_t)c->salt << 32) | ch;
    sluice_key_t key = key_of(c, c->tkey[ch]);
    sluice_decision_t d = { 0 };
    if ((side == 0 && c->tn[ch].cdone) || (side == 1 && c->tn[ch].rdone)) {
        failf(c, "%s: token %zu emitted twice (its follow-up was already submitted)", side ? "ref" : "core", idx);
        return;
    }
    int rc = side == 0 ? sluice_limiter_submit(c->core, key, tok, c->op_now, &d)
                       : ref_submit(c->ref, key, tok, c->op_now, &d);
    struct nested *n = &c->tn[ch]; /* after the call: nested calls may have grown the table */
    if (side == 0) {
        n->cdone = true;
        n->crc = rc;
        n->cdec = d;
        if (rc == 0) c->tcore[ch] = d.kind == SLUICE_SCHEDULED ? 1 : 2;
        c->nested_calls++;
    } else {
        n->rdone = true;
        n->rrc = rc;
        n->rdec = d;
        if (rc == 0) c->tref[ch] = d.kind == SLUICE_SCHEDULED ? 1 : 2;
    }
}

static void ref_hook(void *user, ref_model_t *m, size_t first, size_t count) {
    ctx_t *c = user;
    for (size_t i = first; i < first + count; i++) {
        ref_event_t ev = ref_events(m)[i]; /* a copy: the log may move */
        if (ev.kind == SLUICE_EVENT_EMIT) nested_submit(c, 1, token_index(c, ev.token));
    }
}

/* Both sides must have made the same follow-up submits with the same results. */
static void nested_check(ctx_t *c) {
    for (size_t i = c->nested_checked + 1; i <= c->ntok && !c->failed; i++) {
        const struct nested *n = &c->tn[i];
        if (n->depth == 0) continue;
        if (n->cdone != n->rdone) {
            failf(c, "follow-up token %zu (submitted from an emit callback) was submitted on the %s side only", i,
                  n->cdone ? "core" : "ref");
        } else if (n->crc != n->rrc) {
            failf(c, "follow-up token %zu: submit from the callback returned %d, model %d", i, n->crc, n->rrc);
        } else if (n->crc == 0 && (n->cdec.kind != n->rdec.kind || n->cdec.at != n->rdec.at)) {
            failf(c, "follow-up token %zu: decision core %s at=%" PRIu64 ", ref %s at=%" PRIu64, i,
                  dec_name(n->cdec.kind), n->cdec.at, dec_name(n->rdec.kind), n->rdec.at);
        }
    }
    c->nested_checked = c->ntok;
}

/* ------------------------------------------------------------------ */
/* event capture                                                       */
/* ------------------------------------------------------------------ */

static void on_event(void *user, const sluice_event_t *e) {
    ctx_t *c = user;
    int k = key_index(c, e->key);
    if (k < 0) {
        failf(c, "core: event %s (token %#" PRIx64 ") with a key that is none of the run's keys", ev_name(e->kind),
              e->token);
        return;
    }
    if (e->kind < SLUICE_EVENT_EMIT || e->kind > SLUICE_EVENT_DISCARD) failf(c, "core: event of kind %d", e->kind);
    account_event(c, c->tcore, "core", k, e->token, e->kind);
    kev_t x = { e->kind, e->token, e->at, c->step, e->has_successor, e->successor };
    if (e->has_successor) {
        /* the successor is a token of the same key, handed in at this drop */
        size_t si = token_index(c, e->successor);
        if (e->kind != SLUICE_EVENT_DROP)
            failf(c, "core: %s event with a successor", ev_name(e->kind));
        else if (!si || c->tkey[si] != k)
            failf(c, "core: DROP of tok=%zu names successor %#" PRIx64 ", not a token of its key",
                  token_index(c, e->token), e->successor);
    }
    kev_push(&c->cke[k], x);
    if (e->kind >= 1 && e->kind <= 3) g_ev[e->kind]++;
    if (c->step_events && e->at < c->step_last_at) c->out_of_order++;
    c->step_events++;
    c->step_last_at = e->at;
    g_events++;
    if (e->kind == SLUICE_EVENT_EMIT) nested_submit(c, 0, token_index(c, e->token));
}

static void take_ref_events(ctx_t *c) {
    const ref_event_t *ev = ref_events(c->ref);
    size_t n = ref_event_count(c->ref);
    for (size_t i = 0; i < n; i++) {
        int k = key_index(c, ev[i].key);
        if (k < 0) {
            failf(c, "ref: event with an unknown key (model bug)");
            continue;
        }
        account_event(c, c->tref, "ref", k, ev[i].token, ev[i].kind);
        kev_t x = { ev[i].kind, ev[i].token, ev[i].at, c->step, ev[i].has_successor, ev[i].successor };
        kev_push(&c->rke[k], x);
    }
    ref_clear_events(c->ref);
}

/* How the per-key event sequences of core and model must relate after a step. */
enum sync_mode {
    SYNC_EQUAL,      /* every key: equal */
    SYNC_CORE_AHEAD, /* touched key equal; others: the model's is a prefix of the core's (B) */
    SYNC_EITHER,     /* touched key equal; others: one is a prefix of the other (C) */
    SYNC_CORE_BEHIND /* after an advance with a coarse tick: the core's is a prefix of the model's,
                          and the model's extra events all lie in the last tick before `now` (C) */
};

/*
 * Compares each key's event sequences from the last compared position.
 */
static void sync_check_at(ctx_t *c, enum sync_mode mode, int touched, uint64_t now) {
    take_ref_events(c);
    nested_check(c);
    for (int k = 0; k < c->nkeys && !c->failed; k++) {
        kevvec_t *a = &c->cke[k], *b = &c->rke[k];
        size_t m = a->n < b->n ? a->n : b->n;
        for (size_t i = c->cmp[k]; i < m; i++) {
            kev_t x = a->v[i], y = b->v[i];
            if (x.kind != y.kind || x.token != y.token || (!c->skip_at && x.at != y.at) || x.has_succ != y.has_succ ||
                (x.has_succ && x.succ != y.succ)) {
                failf(c,
                      "key k%d event #%zu differs: core %s tok=%zu at=%" PRIu64
                      " succ=%zu (step %d), ref %s tok=%zu at=%" PRIu64 " succ=%zu (step %d)",
                      k, i, ev_name(x.kind), token_index(c, x.token), x.at, x.has_succ ? token_index(c, x.succ) : 0,
                      x.step, ev_name(y.kind), token_index(c, y.token), y.at, y.has_succ ? token_index(c, y.succ) : 0,
                      y.step);
                return;
            }
        }
        c->cmp[k] = m;
        bool ok;
        if (mode == SYNC_EQUAL || k == touched)
            ok = a->n == b->n;
        else if (mode == SYNC_CORE_AHEAD)
            ok = a->n >= b->n;
        else if (mode == SYNC_EITHER)
            ok = true;
        else {
            ok = a->n <= b->n;
            for (size_t i = a->n; ok && i < b->n; i++) {
                /* an event the core has not delivered yet must be due within the last tick */
                if (b->v[i].at + c->tick <= now) {
                    failf(c,
                          "key k%d: after advance(%" PRIu64 ") with tick %" PRIu64 " the core has not fired the "
                          "deadline %" PRIu64 " (more than a tick late): ref %s tok=%zu",
                          k, now, c->tick, b->v[i].at, ev_name(b->v[i].kind), token_index(c, b->v[i].token));
                    return;
                }
            }
        }
        if (!ok) {
            const kevvec_t *more = a->n > b->n ? a : b;
            kev_t x = more->v[m];
            failf(c, "key k%d: core has %zu events, ref has %zu; first extra on the %s side: %s tok=%zu at=%" PRIu64, k,
                  a->n, b->n, a->n > b->n ? "core" : "ref", ev_name(x.kind), token_index(c, x.token), x.at);
            return;
        }
    }
}

static void sync_check(ctx_t *c, bool all_equal, int touched) {
    enum sync_mode mode = all_equal ? SYNC_EQUAL : c->variant == 1 ? SYNC_CORE_AHEAD : SYNC_EITHER;
    sync_check_at(c, mode, touched, 0);
}

static void core_check(ctx_t *c) {
    if (c->failed || !c->core) return;
    int rc = sluice_limiter_check(c->core);
    if (rc != 0) failf(c, "sluice_limiter_check() returned %d", rc);
}

static void stats_check(ctx_t *c) {
    if (c->failed || c->variant != 0 || c->closed) return;
    sluice_stats_t st;
    int rc = sluice_limiter_stats(c->core, &st);
    if (rc) {
        failf(c, "sluice_limiter_stats() returned %d", rc);
        return;
    }
    if (st.pending != ref_pending_count(c->ref))
        failf(c, "stats.pending = %" PRIu64 ", model has %" PRIu64 " keys pending", st.pending,
              ref_pending_count(c->ref));
    else if (c->pol.kind != SLUICE_RATE && st.live_keys != ref_live_count(c->ref))
        failf(c, "stats.live_keys = %" PRIu64 ", model has %" PRIu64 " keys not idle", st.live_keys,
              ref_live_count(c->ref));
    /* totals: every token counted once at its call, and once more if scheduled */
    sluice_stats_t rt = st;
    ref_totals(c->ref, &rt);
    if (!c->failed &&
        (st.admitted != rt.admitted || st.scheduled != rt.scheduled || st.emitted_later != rt.emitted_later ||
         st.dropped != rt.dropped || st.discarded != rt.discarded))
        failf(c,
              "totals differ: core admitted %" PRIu64 " scheduled %" PRIu64 " emitted_later %" PRIu64
              " dropped %" PRIu64 " discarded %" PRIu64 ", ref %" PRIu64 " %" PRIu64 " %" PRIu64 " %" PRIu64
              " %" PRIu64,
              st.admitted, st.scheduled, st.emitted_later, st.dropped, st.discarded, rt.admitted, rt.scheduled,
              rt.emitted_later, rt.dropped, rt.discarded);
    uint64_t cn = sluice_limiter_next_deadline(c->core), rn = ref_next_deadline(c->ref);
    if (!c->failed && cn > rn)
        failf(c, "next_deadline = %" PRIu64 " is later than the earliest deadline %" PRIu64, cn, rn);
}

/* ------------------------------------------------------------------ */
/* op log                                                              */
/* ------------------------------------------------------------------ */

static oprec_t *op_begin(ctx_t *c, int type, int key, uint64_t t) {
    if (c->nops == c->capops) {
        c->capops = c->capops ? 2 * c->capops : 64;
        c->ops = xrealloc(c->ops, c->capops * sizeof *c->ops);
    }
    oprec_t *o = &c->ops[c->nops++];
    memset(o, 0, sizeof *o);
    o->type = type;
    o->key = key;
    o->t = t;
    c->op_now = t;
    c->step++;
    c->step_events = 0;
    c->skip_at = false;
    g_ops++;
    return o;
}

static void print_key(FILE *f, const keydef_t *d) {
    if (d->kind == SLUICE_KEY_U64) {
        fprintf(f, "u64 %" PRIu64, d->u64);
        return;
    }
    fprintf(f, "bytes[%zu] \"", d->len);
    size_t shown = d->len > 40 ? 40 : d->len;
    for (size_t i = 0; i < shown; i++) {
        unsigned ch = d->bytes[i];
        if (ch >= 0x20 && ch < 0x7f && ch != '"' && ch != '\\')
            fputc((int)ch, f);
        else
            fprintf(f, "\\x%02x", ch);
    }
    fprintf(f, "\"%s", d->len > shown ? "..." : "");
}

static void print_policy(FILE *f, const sluice_policy_t *p) {
    switch (p->kind) {
    case SLUICE_THROTTLE:
        fprintf(f, "throttle interval=%" PRId64 "ns leading=%d trailing=%d pick=%s", p->interval_ns, p->leading,
                p->trailing, p->pick == SLUICE_PICK_FIRST ? "first" : "latest");
        break;
    case SLUICE_AUDIT: fprintf(f, "audit interval=%" PRId64 "ns", p->interval_ns); break;
    case SLUICE_DEBOUNCE:
        fprintf(f, "debounce interval=%" PRId64 "ns leading=%d trailing=%d", p->interval_ns, p->leading, p->trailing);
        if (p->has_max_wait) fprintf(f, " maxwait=%" PRId64 "ns", p->max_wait_ns);
        break;
    case SLUICE_RATE:
        fprintf(f, "rate limit=%" PRIu64 " per=%" PRId64 "ns burst=%" PRIu64, p->limit, p->per_ns, p->burst);
        break;
    }
}

static const char *op_name(int t) {
    static const char *n[] = { "submit", "flush", "cancel",        "pending",     "advance",
                               "close",  "free",  "submit-badkey", "pre-advance", "quota" };
    return n[t];
}

static void print_op(FILE *f, const ctx_t *c, size_t i) {
    const oprec_t *o = &c->ops[i];
    fprintf(f, "  #%zu t=%" PRIu64 " %s", i + 1, o->t, op_name(o->type));
    if (o->key >= 0) fprintf(f, " k%d", o->key);
    if (o->type == OP_SUBMIT) fprintf(f, " tok=%zu", token_index(c, o->token));
    if ((o->type == OP_SUBMIT || o->type == OP_QUOTA) && o->cost != 1) fprintf(f, " cost=%" PRIu64, o->cost);
    if (o->type == OP_CLOSE) fprintf(f, " %s", o->arg == SLUICE_CLOSE_DRAIN ? "drain" : "discard");
    if (o->type == OP_ADVANCE || o->type == OP_PRE) fprintf(f, " max_timers=%d", o->arg);
    fprintf(f, "%s%s\n", o->result[0] ? "  -> " : "", o->result);
}

static void dump_failure(const ctx_t *c) {
    FILE *f = stderr;
    fprintf(f, "\nFAIL seed=%" PRIu64 " (replay: SLUICE_DIFF_SEED=%" PRIu64 ")\n  %s\n", c->seed, c->seed, c->msg);
    fprintf(f, "variant %s, tick %" PRIu64 " ns%s\npolicy: ",
            c->variant == 0   ? "A (advance before ops)"
            : c->variant == 1 ? "B (no advance)"
                              : "C (no advance, coarse tick)",
            c->tick, c->msmode ? " (times in whole ms)" : "");
    print_policy(f, &c->pol);
    fprintf(f, "\nkeys:\n");
    for (int k = 0; k < c->nkeys; k++) {
        fprintf(f, "  k%d = ", k);
        print_key(f, &c->keys[k]);
        fputc('\n', f);
    }
    fprintf(f, "ops (times in ns):\n");
    for (size_t i = 0; i < c->nops; i++) print_op(f, c, i);
    if (c->reentrant) {
        fprintf(f, "follow-up submits made from emit callbacks (at the time of the op that emitted):\n");
        for (size_t i = 1; i <= c->ntok; i++) {
            if (!c->tn[i].child) continue;
            const struct nested *n = &c->tn[c->tn[i].child];
            fprintf(f,
                    "  emit of tok=%u -> submit k%d tok=%u: core %s rc=%d %s@%" PRIu64 " | ref %s rc=%d %s@%" PRIu64
                    "\n",
                    (unsigned)i, c->tkey[c->tn[i].child], (unsigned)c->tn[i].child, n->cdone ? "made" : "not made",
                    n->crc, dec_name(n->cdec.kind), n->cdec.at, n->rdone ? "made" : "not made", n->rrc,
                    dec_name(n->rdec.kind), n->rdec.at);
        }
    }
    fprintf(f, "events by key (core | ref):\n");
    for (int k = 0; k < c->nkeys; k++) {
        size_t n = c->cke[k].n > c->rke[k].n ? c->cke[k].n : c->rke[k].n;
        if (!n) continue;
        fprintf(f, "  k%d:\n", k);
        for (size_t i = 0; i < n; i++) {
            char a[96] = "", b[96] = "";
            if (i < c->cke[k].n)
                snprintf(a, sizeof a, "%s tok=%zu at=%" PRIu64 " (#%d)", ev_name(c->cke[k].v[i].kind),
                         token_index(c, c->cke[k].v[i].token), c->cke[k].v[i].at, c->cke[k].v[i].step);
            if (i < c->rke[k].n)
                snprintf(b, sizeof b, "%s tok=%zu at=%" PRIu64 " (#%d)", ev_name(c->rke[k].v[i].kind),
                         token_index(c, c->rke[k].v[i].token), c->rke[k].v[i].at, c->rke[k].v[i].step);
            fprintf(f, "    %-48s | %s\n", a, b);
        }
    }
}

/* ------------------------------------------------------------------ */
/* scenario generation                                                 */
/* ------------------------------------------------------------------ */

static uint64_t gen_duration_units(ctx_t *c) {
    rng_t *r = &c->rng;
    uint64_t maxu = DUR_MAX / c->u;
    unsigned x = (unsigned)rbelow(r, 100);
    if (x < 10) return 0;
    if (x < 20) return 1;
    if (x < 50) return rrange(r, 2, 20);
    if (x < 75) return rrange(r, 20, 1000);
    if (x < 90) return rrange(r, 1000, 1000000);
    if (x < 95) return rrange(r, maxu - 1000, maxu);
    return rrange(r, 1, maxu);
}

static void gen_policy(ctx_t *c) {
    rng_t *r = &c->rng;
    sluice_policy_t p;
    int kind = (int)rrange(r, 1, 4);
    uint64_t W = 0;
    if (kind != SLUICE_RATE) W = gen_duration_units(c);
    c->scale_units = W ? W : rrange(r, 1, 1000);
    c->scale2_units = c->scale_units;
    switch (kind) {
    case SLUICE_THROTTLE: {
        int edges = (int)rrange(r, 1, 3);
        p = sluice_throttle((int64_t)(W * c->u), edges & 1, (edges & 2) != 0,
                            rchance(r, 50) ? SLUICE_PICK_LATEST : SLUICE_PICK_FIRST);
        break;
    }
    case SLUICE_AUDIT: p = sluice_audit((int64_t)(W * c->u)); break;
    case SLUICE_DEBOUNCE: {
        int edges = (int)rrange(r, 1, 3);
        int64_t mw = -1;
        unsigned x = (unsigned)rbelow(r, 100);
        uint64_t maxu = DUR_MAX / c->u;
        if (x < 40)
            mw = -1;
        else if (x < 55)
            mw = (int64_t)W;
        else if (x < 85)
            mw = (int64_t)(W + rrange(r, 1, W < maxu / 4 ? 3 * W + 1 : 1));
        else
            mw = (int64_t)rrange(r, W, maxu);
        if (mw > (int64_t)maxu) mw = (int64_t)maxu;
        if (mw >= 0) {
            c->scale2_units = (uint64_t)mw ? (uint64_t)mw : c->scale_units;
            mw *= (int64_t)c->u;
        }
        p = sluice_debounce((int64_t)(W * c->u), edges & 1, (edges & 2) != 0, mw);
        break;
    }
    default: {
        uint64_t limit, per, burst;
        unsigned x = (unsigned)rbelow(r, 100);
        limit = x < 50 ? rrange(r, 1, 10) : x < 80 ? rrange(r, 1, 1000) : rrange(r, 1, SLUICE_RATE_MAX);
        x = (unsigned)rbelow(r, 100);
        per = x < 30 ? rrange(r, 1, 100) : x < 80 ? rrange(r, 100, 1000000) : rrange(r, 1, DUR_MAX / c->u);
        x = (unsigned)rbelow(r, 100);
        burst = x < 40   ? 0
                : x < 60 ? 1
                : x < 90 ? rrange(r, 1, limit * 3 < SLUICE_RATE_MAX ? limit * 3 : SLUICE_RATE_MAX)
                         : rrange(r, 1, SLUICE_RATE_MAX);
        p = sluice_rate(limit, (int64_t)(per * c->u), burst);
        uint64_t T = per / limit;
        c->scale_units = T ? T : 1;
        c->scale2_units = per;
        break;
    }
    }
    c->pol = p;
}

static void gen_keys(ctx_t *c) {
    rng_t *r = &c->rng;
    c->nkeys = (int)rrange(r, 1, MAXKEYS);
    for (int k = 0; k < c->nkeys; k++) {
        keydef_t *d = &c->keys[k];
        for (int attempt = 0;; attempt++) {
            memset(d, 0, sizeof *d);
            unsigned x = (unsigned)rbelow(r, 100);
            if (x < 45) {
                d->kind = SLUICE_KEY_U64;
                unsigned y = (unsigned)rbelow(r, 4);
                d->u64 = y == 0 ? rbelow(r, 10) : y == 1 ? UINT64_MAX - rbelow(r, 2) : rnext(r);
            } else {
                d->kind = SLUICE_KEY_BYTES;
                unsigned y = (unsigned)rbelow(r, 100);
                if (y < 12) {
                    d->len = 0;
                } else if (y < 20 && k > 0) {
                    /* a look-alike of an earlier key: its u64 bytes, a prefix, or one more byte */
                    const keydef_t *o = &c->keys[rbelow(r, (uint64_t)k)];
                    if (o->kind == SLUICE_KEY_U64) {
                        d->len = 8;
                        memcpy(d->bytes, &o->u64, 8);
                    } else {
                        memcpy(d->bytes, o->bytes, o->len);
                        d->len = o->len;
                        if (d->len && rchance(r, 50))
                            d->len--;
                        else if (d->len < SLUICE_KEY_MAX)
                            d->bytes[d->len++] = (unsigned char)rbelow(r, 3);
                    }
                } else if (y < 24) {
                    d->len = SLUICE_KEY_MAX - rbelow(r, 2);
                    for (size_t i = 0; i < d->len; i++) d->bytes[i] = (unsigned char)rnext(r);
                } else {
                    d->len = rrange(r, 1, 16);
                    for (size_t i = 0; i < d->len; i++)
                        d->bytes[i] = rchance(r, 30) ? 0 : (unsigned char)rbelow(r, rchance(r, 50) ? 3 : 256);
                }
            }
            bool dup = false;
            for (int j = 0; j < k; j++)
                if (ref_key_equal(key_of(c, j), key_of(c, k))) dup = true;
            if (!dup) break;
            if (attempt > 50) {
                d->kind = SLUICE_KEY_U64;
                d->u64 = UINT64_C(0x5EED000000000000) + (uint64_t)k;
                break;
            }
        }
    }
}

/* A time step, in units. */
static uint64_t gen_dt_units(ctx_t *c) {
    rng_t *r = &c->rng;
    uint64_t S = rchance(r, 20) ? c->scale2_units : c->scale_units;
    if (S == 0) S = 1;
    uint64_t Sbig = S > UINT64_MAX / 40 ? UINT64_MAX / 40 : S;
    unsigned x = (unsigned)rbelow(r, 100);
    if (x < 15) return 0;
    if (x < 28) return rrange(r, 1, S / 4 > 1 ? S / 4 : 1);
    if (x < 40) return S + rbelow(r, 3) - (S ? 1 : 0);
    if (x < 65) {
        uint64_t d = ref_next_deadline(c->ref);
        if (d != UINT64_MAX && d > c->now) {
            uint64_t dd = (d - c->now) / c->u; /* exact in both modes: deadlines are whole units */
            unsigned y = (unsigned)rbelow(r, 3);
            return y == 0 ? dd - 1 : y == 1 ? dd : dd + 1;
        }
        return rrange(r, 0, 2 * Sbig);
    }
    if (x < 90) return rrange(r, 0, 3 * Sbig);
    if (x < 97) return rrange(r, 0, 20 * Sbig);
    return rrange(r, 0, DUR_MAX / c->u);
}

static uint64_t gen_time(ctx_t *c) {
    uint64_t dt = gen_dt_units(c);
    uint64_t room = (NS_TMAX - c->now) / c->u;
    if (dt > room) dt = room;
    return c->now + dt * c->u;
}

/* ------------------------------------------------------------------ */
/* ops                                                                 */
/* ------------------------------------------------------------------ */

/* Advances the core with a random bound on timers per call, until done. */
static void core_advance(ctx_t *c, uint64_t t, int bound, oprec_t *o) {
    int64_t total = 0;
    uint64_t ev0 = c->step_events;
    for (int iter = 0;; iter++) {
        int64_t n = sluice_limiter_advance(c->core, t, (size_t)bound);
        if (n < 0) {
            failf(c, "sluice_limiter_advance(%" PRIu64 ", %d) returned %" PRId64, t, bound, n);
            return;
        }
        if (bound && n > bound) {
            failf(c, "sluice_limiter_advance(%" PRIu64 ", %d) handled %" PRId64 " timers, more than the bound", t,
                  bound, n);
            return;
        }
        total += n;
        if (bound == 0 || n < bound) break;
        if (iter > 1000000) {
            failf(c, "sluice_limiter_advance never finishes");
            return;
        }
    }
    uint64_t evs = c->step_events - ev0;
    if (!c->reentrant && (uint64_t)total < evs) /* (follow-up submits make events of their own) */
        failf(c, "advance reported %" PRId64 " timer transitions but produced %" PRIu64 " events", total, evs);
    if (o) snprintf(o->result, sizeof o->result, "%" PRId64 " transitions, %" PRIu64 " events", total, evs);
}

/* Variant A: bring both sides to time t, firing every due deadline. */
static void pre_advance(ctx_t *c, uint64_t t, bool force_jump) {
    rng_t *r = &c->rng;
    bool stepping = !force_jump && rchance(r, 70);
    int bound = rchance(r, 70) ? 0 : (int)rrange(r, 1, 3);
    if (stepping) {
        for (int guard = 0; !c->failed; guard++) {
            uint64_t d = ref_next_deadline(c->ref);
            uint64_t cn = sluice_limiter_next_deadline(c->core);
            if (cn > d) {
                failf(c, "next_deadline = %" PRIu64 " is later than the earliest deadline %" PRIu64, cn, d);
                return;
            }
            if (d > t) break;
            if (guard > 100000) {
                failf(c, "too many deadlines (model loop?)");
                return;
            }
            if (d > c->now) {
                /* nothing may fire before the earliest deadline */
                oprec_t *o = op_begin(c, OP_PRE, -1, d - 1);
                o->arg = bound;
                core_advance(c, d - 1, bound, o);
                ref_advance(c->ref, d - 1);
                sync_check(c, true, -1);
                core_check(c);
            }
            oprec_t *o = op_begin(c, OP_PRE, -1, d);
            o->arg = bound;
            core_advance(c, d, bound, o);
            int64_t rn = ref_advance(c->ref, d);
            if (rn <= 0) failf(c, "model: advance to its own next deadline fired nothing (model bug)");
            c->now = d;
            sync_check(c, true, -1);
            core_check(c);
        }
    }
    if (c->failed) return;
    oprec_t *o = op_begin(c, OP_PRE, -1, t);
    o->arg = bound;
    core_advance(c, t, bound, o);
    ref_advance(c->ref, t);
    c->now = t;
    sync_check(c, true, -1);
    core_check(c);
}

/* A cost for a call or a quota peek: mostly 1 or small; for rate also the
 * burst exactly, just above it, huge ones, and now and then an invalid one
 * (0, above SLUICE_RATE_MAX; any cost but 1 elsewhere). */
static uint64_t gen_cost(ctx_t *c) {
    rng_t *r = &c->rng;
    unsigned x = (unsigned)rbelow(r, 1000);
    if (c->pol.kind != SLUICE_RATE) return x < 980 ? 1 : x < 990 ? 0 : rrange(r, 2, 5);
    uint64_t burst = c->pol.burst ? c->pol.burst : c->pol.limit;
    if (x < 450) return 1;
    if (x < 650) return rrange(r, 1, burst < 8 ? burst : 8);
    if (x < 750) return burst;
    if (x < 820) return burst < SLUICE_RATE_MAX ? burst + 1 : burst;
    if (x < 900) return rrange(r, 1, burst);
    if (x < 960) return rrange(r, 1, SLUICE_RATE_MAX);
    if (x < 980) return SLUICE_RATE_MAX;
    if (x < 990) return 0;
    return SLUICE_RATE_MAX + rrange(r, 1, 1000);
}

/* Returns false when the call failed (then no timer ran on either side). */
static bool do_submit(ctx_t *c, int k, uint64_t t) {
    oprec_t *o = op_begin(c, OP_SUBMIT, k, t);
    uint64_t tok = new_token(c, k);
    uint64_t cost = gen_cost(c);
    o->token = tok;
    o->cost = cost;
    sluice_decision_t dc = { 0 }, dr = { 0 };
    c->in_submit = true;
    int rc = cost == 1 && rchance(&c->rng, 50) ? sluice_limiter_submit(c->core, key_of(c, k), tok, t, &dc)
                                               : sluice_limiter_submit_cost(c->core, key_of(c, k), tok, cost, t, &dc);
    c->in_submit = false;
    int rr = ref_submit_cost(c->ref, key_of(c, k), tok, cost, t, &dr);
    if (rc != rr) {
        failf(c, "submit (cost %" PRIu64 ") returned %d, model %d", cost, rc, rr);
        return false;
    }
    if (rc == 0) {
        snprintf(o->result, sizeof o->result,
                 "core %s@%" PRIu64 " r=%" PRIu64 " full=%" PRIu64 ", ref %s@%" PRIu64 " r=%" PRIu64 " full=%" PRIu64,
                 dec_name(dc.kind), dc.at, dc.remaining, dc.full, dec_name(dr.kind), dr.at, dr.remaining, dr.full);
        if (dc.kind != dr.kind || dc.at != dr.at || dc.remaining != dr.remaining || dc.full != dr.full) {
            failf(c,
                  "decision differs: core %s at=%" PRIu64 " remaining=%" PRIu64 " full=%" PRIu64 ", ref %s at=%" PRIu64
                  " remaining=%" PRIu64 " full=%" PRIu64,
                  dec_name(dc.kind), dc.at, dc.remaining, dc.full, dec_name(dr.kind), dr.at, dr.remaining, dr.full);
            return false;
        }
        if (dc.kind >= 1 && dc.kind <= 3) g_dec[dc.kind]++;
        if (cost != 1) g_costly++;
        account_decision(c, c->tcore, tok, &dc);
        account_decision(c, c->tref, tok, &dr);
    } else {
        snprintf(o->result, sizeof o->result, "rc %d", rc);
    }
    return rc == 0;
}

/* A quota peek: same answer as the model's, and nothing changes. */
static void do_quota(ctx_t *c, int k, uint64_t t) {
    oprec_t *o = op_begin(c, OP_QUOTA, k, t);
    uint64_t cost = gen_cost(c);
    o->cost = cost;
    sluice_stats_t before, after;
    sluice_limiter_stats(c->core, &before);
    uint64_t nd = sluice_limiter_next_deadline(c->core);
    sluice_quota_t qc, qr;
    memset(&qc, 0, sizeof qc);
    memset(&qr, 0, sizeof qr);
    int rc = sluice_limiter_quota(c->core, key_of(c, k), cost, t, &qc);
    int rr = ref_quota(c->ref, key_of(c, k), cost, t, &qr);
    snprintf(o->result, sizeof o->result,
             "core rc %d r=%" PRIu64 " full=%" PRIu64 " retry=%" PRIu64 ", ref rc %d r=%" PRIu64 " full=%" PRIu64
             " retry=%" PRIu64,
             rc, qc.remaining, qc.full, qc.retry, rr, qr.remaining, qr.full, qr.retry);
    if (rc != rr) {
        failf(c, "quota (cost %" PRIu64 ") returned %d, model %d", cost, rc, rr);
        return;
    }
    if (rc == 0 &&
        (qc.burst != qr.burst || qc.remaining != qr.remaining || qc.full != qr.full || qc.retry != qr.retry)) {
        failf(c, "quota differs: %s", o->result);
        return;
    }
    if (rc == 0) g_quotas++;
    sluice_limiter_stats(c->core, &after);
    if (after.live_keys != before.live_keys || after.armed_timers != before.armed_timers ||
        after.pending != before.pending || after.memory_bytes != before.memory_bytes ||
        sluice_limiter_next_deadline(c->core) != nd)
        failf(c,
              "a quota peek changed the limiter (live %" PRIu64 " -> %" PRIu64 ", timers %" PRIu64 " -> %" PRIu64 ")",
              before.live_keys, after.live_keys, before.armed_timers, after.armed_timers);
}

static void do_badkey(ctx_t *c, uint64_t t) {
    static unsigned char big[SLUICE_KEY_MAX + 1];
    oprec_t *o = op_begin(c, OP_BADKEY, -1, t);
    sluice_key_t k = sluice_key_bytes(big, SLUICE_KEY_MAX + 1);
    sluice_decision_t d;
    uint64_t tok = ((uint64_t)c->salt << 32) | 0xFFFFFFFFu; /* never a valid token */
    int rc = sluice_limiter_submit(c->core, k, tok, t, &d);
    int rr = ref_submit(c->ref, k, tok, t, &d);
    snprintf(o->result, sizeof o->result, "core rc %d, ref rc %d", rc, rr);
    if (rc != rr) failf(c, "submit with a %d-byte key returned %d, expected %d", SLUICE_KEY_MAX + 1, rc, rr);
    int rf = sluice_limiter_flush(c->core, k, t);
    if (!c->failed && rf != rr) failf(c, "flush with a too long key returned %d, expected %d", rf, rr);
}

static void do_keyop(ctx_t *c, int type, int k, uint64_t t) {
    oprec_t *o = op_begin(c, type, k, t);
    int rc, rr;
    sluice_key_t key = key_of(c, k);
    switch (type) {
    case OP_FLUSH:
        rc = sluice_limiter_flush(c->core, key, t);
        rr = ref_flush(c->ref, key, t);
        break;
    case OP_CANCEL:
        rc = sluice_limiter_cancel(c->core, key, t);
        rr = ref_cancel(c->ref, key, t);
        break;
    default:
        rc = sluice_limiter_pending(c->core, key, t);
        rr = ref_pending(c->ref, key, t);
        break;
    }
    snprintf(o->result, sizeof o->result, "core %d, ref %d", rc, rr);
    if (rc != rr) failf(c, "%s returned %d, model %d", op_name(type), rc, rr);
}

static void do_close(ctx_t *c, uint64_t t, int mode) {
    oprec_t *o = op_begin(c, OP_CLOSE, -1, t);
    o->arg = mode;
    int rc = sluice_limiter_close(c->core, t, (sluice_close_mode_t)mode);
    int rr = ref_close(c->ref, t, (sluice_close_mode_t)mode);
    snprintf(o->result, sizeof o->result, "core %d, ref %d", rc, rr);
    if (rc != rr) failf(c, "close returned %d, model %d", rc, rr);
    if (rr == 0) c->closed = true;
}

static void check_all_accounted(ctx_t *c) {
    for (size_t i = 1; i <= c->ntok && !c->failed; i++) {
        if (c->tcore[i] == 1)
            failf(c, "token %zu (key k%d) was scheduled but never reported by the core", i, c->tkey[i]);
        else if (c->tref[i] == 1)
            failf(c, "token %zu never reported by the model (model bug)", i);
    }
}

/* After close: every call fails with SLUICE_ECLOSED, on both sides. */
static void closed_ops(ctx_t *c) {
    rng_t *r = &c->rng;
    int n = (int)rbelow(r, 4);
    for (int i = 0; i < n && !c->failed; i++) {
        uint64_t t = gen_time(c);
        int k = (int)rbelow(r, (uint64_t)c->nkeys);
        switch (rbelow(r, 6)) {
        case 0: do_submit(c, k, t); break;
        case 1: do_keyop(c, OP_FLUSH, k, t); break;
        case 2: do_keyop(c, OP_CANCEL, k, t); break;
        case 3: do_keyop(c, OP_PENDING, k, t); break;
        case 4: {
            oprec_t *o = op_begin(c, OP_ADVANCE, -1, t);
            int64_t rc = sluice_limiter_advance(c->core, t, 0);
            int64_t rr = ref_advance(c->ref, t);
            snprintf(o->result, sizeof o->result, "core %" PRId64 ", ref %" PRId64, rc, rr);
            if (rc != rr) failf(c, "advance after close returned %" PRId64 ", expected %" PRId64, rc, rr);
            break;
        }
        default: {
            oprec_t *o = op_begin(c, OP_CLOSE, -1, t);
            o->arg = SLUICE_CLOSE_DRAIN;
            int rc = sluice_limiter_close(c->core, t, SLUICE_CLOSE_DRAIN);
            snprintf(o->result, sizeof o->result, "core %d", rc);
            if (rc != SLUICE_ECLOSED) failf(c, "second close returned %d, expected SLUICE_ECLOSED", rc);
            break;
        }
        }
        sync_check(c, true, -1);
        core_check(c);
    }
}

/* ------------------------------------------------------------------ */
/* one run                                                             */
/* ------------------------------------------------------------------ */

static void ctx_free(ctx_t *c) {
    if (c->core) sluice_limiter_free(c->core);
    ref_free(c->ref);
    for (int k = 0; k < MAXKEYS; k++) {
        free(c->cke[k].v);
        free(c->rke[k].v);
    }
    free(c->tcore);
    free(c->tref);
    free(c->tkey);
    free(c->tn);
    free(c->ops);
}

static bool run_one(uint64_t seed, bool verbose) {
    ctx_t *c = calloc(1, sizeof *c);
    if (!c) exit(2);
    c->seed = seed;
    c->verbose = verbose;
    c->rng.s = seed * UINT64_C(0xD1B54A32D192ED03) + UINT64_C(0x8CB92BA72F3D8DD7);
    rng_t *r = &c->rng;
    rnext(r);
    unsigned vx = (unsigned)rbelow(r, 100);
    c->variant = vx < 45 ? 0 : vx < 75 ? 1 : 2;
    c->msmode = c->variant != 2 && rchance(r, 30);
    c->u = c->msmode ? UINT64_C(1000000) : 1;
    if (c->variant == 2) {
        unsigned tx = (unsigned)rbelow(r, 100);
        c->tick = tx < 30   ? rrange(r, 2, 16)
                  : tx < 60 ? rrange(r, 2, 1000000)
                  : tx < 85 ? UINT64_C(1000000)
                            : rrange(r, 2, UINT64_C(1000000000));
    } else {
        c->tick = c->msmode ? UINT64_C(1000000) : 1;
    }
    c->salt = (uint32_t)(rnext(r) | 1);
    gen_policy(c);
    gen_keys(c);

    unsigned x = (unsigned)rbelow(r, 100);
    uint64_t start_units = x < 30   ? 0
                           : x < 60 ? rrange(r, 1, 1000000)
                           : x < 85 ? rrange(r, 0, UINT64_C(10000000000000000000) / c->u)
                                    : rrange(r, 0, (NS_TMAX / 2) / c->u);
    c->now = start_units * c->u;
    c->start = c->now;

    sluice_config_t cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.policy = c->pol;
    cfg.tick_ns = c->msmode ? 0 : c->tick; /* 0: the default, 1 ms */
    cfg.start_ns = c->now;
    cfg.on_event = on_event;
    cfg.user = c;
    cfg.fixed_seed = true;
    cfg.seed[0] = rnext(r);
    cfg.seed[1] = rnext(r);
    int rc = sluice_limiter_new(&c->core, &cfg);
    int rr = ref_new(&c->ref, &c->pol);
    /* re-entrant calls from the emit callback: only where both sides fire the
     * same timers in the same call (variant A), so that they call in at the same time */
    c->reentrant = c->variant == 0 && rchance(r, 35);
    if (rr == 0) ref_set_hook(c->ref, ref_hook, c);
    if (rc != 0 || rr != 0) {
        failf(c, "limiter_new returned %d, model %d (the generated policy should be valid)", rc, rr);
        c->core = rc == 0 ? c->core : NULL;
        goto done;
    }

    int nops = rchance(r, 50) ? (int)rrange(r, 1, 40) : (int)rrange(r, 40, 300);
    for (int i = 0; i < nops && !c->failed && !c->closed; i++) {
        uint64_t t = gen_time(c);
        int k = (int)rbelow(r, (uint64_t)c->nkeys);
        unsigned w = (unsigned)rbelow(r, 1000);
        int type = w < 520   ? OP_SUBMIT
                   : w < 600 ? OP_FLUSH
                   : w < 680 ? OP_CANCEL
                   : w < 720 ? OP_PENDING
                   : w < 760 ? OP_QUOTA
                   : w < 980 ? OP_ADVANCE
                   : w < 985 ? OP_BADKEY
                             : OP_CLOSE;
        if (c->variant == 0) {
            pre_advance(c, t, type == OP_ADVANCE && rchance(r, 50));
            if (c->failed) break;
            if (type == OP_ADVANCE) {
                stats_check(c);
                continue;
            }
        }
        c->step_events = 0;
        uint64_t top = t; /* the time passed to the call */
        if (type != OP_ADVANCE && c->now > c->start && rchance(r, 3)) {
            /* a time earlier than one already seen is treated as that later time (not
             * earlier than the creation time: whether that one counts as "seen" is
             * left open by the API) */
            t = c->now;
            uint64_t back = rrange(r, 1, 1000) * c->u;
            top = back >= c->now - c->start ? c->start : c->now - back;
        }
        switch (type) {
        case OP_SUBMIT:
            if (!do_submit(c, k, top)) type = OP_BADKEY; /* refused: nothing ran, no key was touched */
            break;
        case OP_FLUSH:
        case OP_CANCEL:
        case OP_PENDING: do_keyop(c, type, k, top); break;
        case OP_QUOTA: do_quota(c, k, top); break;
        case OP_BADKEY: do_badkey(c, top); break;
        case OP_ADVANCE: {
            if (c->variant == 2 && rchance(r, 30)) {
                /* an event loop sleeping until next_deadline() */
                uint64_t nd = sluice_limiter_next_deadline(c->core);
                if (nd != UINT64_MAX && nd > c->now && nd <= NS_TMAX) t = nd;
            }
            oprec_t *o = op_begin(c, OP_ADVANCE, -1, t);
            o->arg = rchance(r, 70) ? 0 : (int)rrange(r, 1, 3);
            core_advance(c, t, o->arg, o);
            ref_advance(c->ref, t);
            break;
        }
        case OP_CLOSE: do_close(c, top, rchance(r, 50) ? SLUICE_CLOSE_DRAIN : SLUICE_CLOSE_DISCARD); break;
        }
        c->now = t;
        if (c->failed) break;
        bool all = c->variant == 0 || type == OP_ADVANCE || type == OP_CLOSE;
        /* a quota peek runs no timer on either side: it touches no key */
        int touched = (type == OP_SUBMIT || type == OP_FLUSH || type == OP_CANCEL || type == OP_PENDING) ? k : -1;
        if (c->variant == 2 && type == OP_ADVANCE)
            sync_check_at(c, SYNC_CORE_BEHIND, -1, t);
        else
            sync_check(c, all, touched);
        core_check(c);
        stats_check(c);
    }
    if (c->failed) goto done;

    if (!c->closed) {
        /* end of the run: close (both variants) or free directly (variant A) */
        unsigned y = (unsigned)rbelow(r, 100);
        if (c->variant == 0 && y < 50) {
            oprec_t *o = op_begin(c, OP_FREE, -1, c->now);
            c->skip_at = true; /* free has no `now`: event times are not compared */
            sluice_limiter_free(c->core);
            c->core = NULL;
            ref_close(c->ref, c->now, SLUICE_CLOSE_DISCARD);
            snprintf(o->result, sizeof o->result, "freed");
            sync_check(c, true, -1);
            c->closed = true;
            check_all_accounted(c);
            goto done;
        }
        uint64_t t = gen_time(c);
        if (c->variant == 0) pre_advance(c, t, false);
        if (c->failed) goto done;
        do_close(c, t, y < 75 ? SLUICE_CLOSE_DRAIN : SLUICE_CLOSE_DISCARD);
        c->now = t;
        sync_check(c, true, -1);
        core_check(c);
    }
    if (c->failed) goto done;
    closed_ops(c);
    check_all_accounted(c);
    if (!c->failed) {
        /* free after close: nothing left to report */
        op_begin(c, OP_FREE, -1, c->now);
        sluice_limiter_free(c->core);
        c->core = NULL;
        sync_check(c, true, -1);
    }

done:;
    bool ok = !c->failed;
    g_out_of_order += c->out_of_order;
    g_nested += c->nested_calls;
    g_runs++;
    if (!ok || verbose) {
        if (!ok)
            dump_failure(c);
        else {
            fprintf(stderr, "seed %" PRIu64 " ok; variant %d, ms %d, policy ", seed, c->variant, c->msmode);
            print_policy(stderr, &c->pol);
            fputc('\n', stderr);
            for (size_t i = 0; i < c->nops; i++) print_op(stderr, c, i);
        }
    }
    ctx_free(c);
    free(c);
    return ok;
}

/* ------------------------------------------------------------------ */
/* variant P: several quotas per key, and plans                        */
/* ------------------------------------------------------------------ */
/*
 * A random table of 1..5 plans of 1..4 quotas each, named from a small pool
 * so that plans share quota names (the conversions match quotas by name),
 * with limits and periods both divisible and not (fractional T), bursts
 * 1..2*limit or the default; 1..6 keys; calls naming plans by index (now and
 * then one past the table: SLUICE_ENOPLAN and nothing changes), plain calls
 * and quota reads (plan 0), quota reads under any plan, cancel, and now and
 * then sluice_limiter_set_plans() replacing the table (numbers changed,
 * quotas and plans added or removed; max_quotas fixed). Times step by 0, a
 * fraction of T, around T and burst*T, a period, or huge jumps. Every
 * decision field, every detail field and every quota read must equal the
 * model's; sluice_limiter_check() after every step.
 *
 * Numbers: limit up to SLUICE_RATE_MAX, per up to SLUICE_DURATION_MAX, so a
 * conversion's (TAT - t) * limit * per' needs up to 165 bits: the model
 * computes it in 192 bits (ref_model.c, mul_div_up), nothing is restricted.
 *
 * Env: SLUICE_DIFF_PLANS_ITERS (runs, default 3000), SLUICE_DIFF_PLANS_SEED
 * (run only this seed, printing every op); SLUICE_DIFF_SEED_BASE applies.
 */

#define PMAXKEYS 6
#define PMAXPLANS 5
#define PMAXQ 4

typedef struct {
    char pname[PMAXPLANS][24];
    sluice_rate_quota_t q[PMAXPLANS][SLUICE_PLAN_QUOTAS_MAX];
    sluice_plan_t plans[PMAXPLANS];
    sluice_plans_t table;
} ptable_t;

typedef struct {
    uint64_t seed;
    rng_t rng;
    bool verbose, failed;
    char msg[1024];
    ptable_t tab;
    size_t max_quotas;
    uint64_t u; /* time unit: 1 ns or 1 ms */
    uint64_t scale, scale2;
    uint64_t now, start;
    int nkeys;
    uint64_t keys[PMAXKEYS];
    sluice_limiter_t *core;
    ref_model_t *ref;
    int step;
    char last[8][256]; /* the last ops, for the failure report */
} pctx_t;

static uint64_t g_p_runs, g_p_steps, g_p_admit, g_p_drop, g_p_reads, g_p_sets, g_p_noplan;

static void pfail(pctx_t *c, const char *fmt, ...) {
    if (c->failed) return;
    c->failed = true;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->msg, sizeof c->msg, fmt, ap);
    va_end(ap);
}

static void plog(pctx_t *c, const char *fmt, ...) {
    char *b = c->last[c->step % 8];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(b, 256, fmt, ap);
    va_end(ap);
    if (c->verbose) fprintf(stderr, "  #%d %s\n", c->step, b);
    c->step++;
    g_p_steps++;
}

static const char *const g_qnames[] = { "second", "minute", "hour", "day", "burst" };

static void gen_quota_numbers(pctx_t *c, sluice_rate_quota_t *q) {
    rng_t *r = &c->rng;
    unsigned x = (unsigned)rbelow(r, 100);
    uint64_t limit = x < 50 ? rrange(r, 1, 10) : x < 85 ? rrange(r, 1, 1000) : rrange(r, 1, SLUICE_RATE_MAX);
    uint64_t maxper = DUR_MAX / c->u;
    uint64_t per;
    x = (unsigned)rbelow(r, 100);
    if (x < 35) /* divisible: T a whole number of units */
        per = limit * rrange(r, 1, limit < 1000 ? 1000 : 3);
    else if (x < 75)
        per = rrange(r, 1, 100000);
    else if (x < 92)
        per = rrange(r, 1, 1000);
    else
        per = rrange(r, 1, maxper);
    if (per > maxper) per = maxper;
    x = (unsigned)rbelow(r, 100);
    uint64_t burst = x < 30 ? 0 : x < 45 ? 1 : rrange(r, 1, limit * 2 < SLUICE_RATE_MAX ? limit * 2 : SLUICE_RATE_MAX);
    q->limit = limit;
    q->per_ns = (int64_t)(per * c->u);
    q->burst = burst;
}

/* A plan's quotas: 1..PMAXQ distinct names from the pool. */
static void gen_plan(pctx_t *c, int i) {
    rng_t *r = &c->rng;
    ptable_t *t = &c->tab;
    size_t nq = (size_t)rrange(r, 1, c->max_quotas < PMAXQ ? c->max_quotas : PMAXQ);
    bool used[5] = { false };
    for (size_t k = 0; k < nq; k++) {
        size_t n;
        do n = (size_t)rbelow(r, 5);
        while (used[n]);
        used[n] = true;
        t->q[i][k].name = g_qnames[n];
        gen_quota_numbers(c, &t->q[i][k]);
    }
    t->plans[i].quotas = t->q[i];
    t->plans[i].nquotas = nq;
}

static void gen_table(pctx_t *c) {
    rng_t *r = &c->rng;
    ptable_t *t = &c->tab;
    size_t np = (size_t)rrange(r, 1, PMAXPLANS);
    for (size_t i = 0; i < np; i++) {
        snprintf(t->pname[i], sizeof t->pname[i], "p%zu", i);
        t->plans[i].name = t->pname[i];
        gen_plan(c, (int)i);
    }
    t->table.plans = t->plans;
    t->table.nplans = np;
}

/* A new table from the old: numbers changed, quotas added or removed,
 * plans added or removed (plan names stay p0.. in order). */
static void mutate_table(pctx_t *c) {
    rng_t *r = &c->rng;
    ptable_t *t = &c->tab;
    size_t np = t->table.nplans;
    unsigned x = (unsigned)rbelow(r, 100);
    if (x < 20 && np < PMAXPLANS) {
        snprintf(t->pname[np], sizeof t->pname[np], "p%zu", np);
        t->plans[np].name = t->pname[np];
        gen_plan(c, (int)np);
        np++;
    } else if (x < 35 && np > 1) {
        np--;
    }
    t->table.nplans = np;
    for (size_t i = 0; i < np; i++) {
        sluice_plan_t *p = &t->plans[i];
        x = (unsigned)rbelow(r, 100);
        if (x < 30) {
            /* change one quota's numbers, keep its name */
            gen_quota_numbers(c, &t->q[i][rbelow(r, p->nquotas)]);
        } else if (x < 40) {
            /* scale a quota: the same T, another limit */
            sluice_rate_quota_t *q = &t->q[i][rbelow(r, p->nquotas)];
            uint64_t f = rrange(r, 2, 5);
            if (q->limit <= SLUICE_RATE_MAX / f && (uint64_t)q->per_ns <= DUR_MAX / f) {
                q->limit *= f;
                q->per_ns *= (int64_t)f;
            }
        } else if (x < 50 && p->nquotas < (c->max_quotas < PMAXQ ? c->max_quotas : PMAXQ)) {
            /* add a quota of a name not in the plan */
            bool used[5] = { false };
            for (size_t k = 0; k < p->nquotas; k++)
                for (int n = 0; n < 5; n++)
                    if (!strcmp(t->q[i][k].name, g_qnames[n])) used[n] = true;
            int n = (int)rbelow(r, 5);
            while (used[n]) n = (n + 1) % 5;
            t->q[i][p->nquotas].name = g_qnames[n];
            gen_quota_numbers(c, &t->q[i][p->nquotas]);
            p->nquotas++;
        } else if (x < 60 && p->nquotas > 1) {
            /* remove a quota */
            size_t k = (size_t)rbelow(r, p->nquotas);
            memmove(&t->q[i][k], &t->q[i][k + 1], (p->nquotas - k - 1) * sizeof t->q[i][0]);
            p->nquotas--;
        } else if (x < 65) {
            gen_plan(c, (int)i);
        }
    }
}

static bool fig_eq(const sluice_quota_figures_t *a, const sluice_quota_figures_t *b) {
    return a->remaining == b->remaining && a->full == b->full && a->retry == b->retry && a->burst == b->burst &&
           a->limit == b->limit && a->per_ns == b->per_ns;
}

static void detail_cmp(pctx_t *c, const char *what, const sluice_plan_detail_t *dc, const sluice_plan_detail_t *dr) {
    if (dc->plan != dr->plan || dc->nquotas != dr->nquotas || dc->refused != dr->refused) {
        pfail(c, "%s: detail differs: core plan %u nquotas %u refused %#x, ref plan %u nquotas %u refused %#x", what,
              dc->plan, dc->nquotas, dc->refused, dr->plan, dr->nquotas, dr->refused);
        return;
    }
    for (uint32_t i = 0; i < dr->nquotas && i < SLUICE_PLAN_QUOTAS_MAX; i++) {
        const sluice_quota_figures_t *a = &dc->quotas[i], *b = &dr->quotas[i];
        if (!fig_eq(a, b)) {
            pfail(c,
                  "%s: quota %u differs: core r=%" PRIu64 " full=%" PRIu64 " retry=%" PRIu64 " burst=%" PRIu64
                  " limit=%" PRIu64 " per=%" PRIu64 ", ref r=%" PRIu64 " full=%" PRIu64 " retry=%" PRIu64
                  " burst=%" PRIu64 " limit=%" PRIu64 " per=%" PRIu64,
                  what, i, a->remaining, a->full, a->retry, a->burst, a->limit, a->per_ns, b->remaining, b->full,
                  b->retry, b->burst, b->limit, b->per_ns);
            return;
        }
    }
}

static uint64_t p_cost(pctx_t *c, uint32_t plan) {
    rng_t *r = &c->rng;
    const ptable_t *t = &c->tab;
    uint64_t b = 1;
    if (plan < t->table.nplans) {
        const sluice_plan_t *p = &t->plans[plan];
        const sluice_rate_quota_t *q = &p->quotas[rbelow(r, p->nquotas)];
        b = q->burst ? q->burst : q->limit;
    }
    unsigned x = (unsigned)rbelow(r, 100);
    if (x < 50) return 1;
    if (x < 70) return rrange(r, 1, 5);
    if (x < 80) return b;
    if (x < 88) return b < SLUICE_RATE_MAX ? b + 1 : b;
    if (x < 96) return rrange(r, 1, b);
    return rrange(r, 1, SLUICE_RATE_MAX);
}

static uint64_t p_time(pctx_t *c) {
    rng_t *r = &c->rng;
    uint64_t S = rchance(r, 25) ? c->scale2 : c->scale;
    if (S == 0) S = 1;
    uint64_t Sb = S > UINT64_MAX / 64 ? UINT64_MAX / 64 : S;
    unsigned x = (unsigned)rbelow(r, 100);
    uint64_t dt;
    if (x < 25)
        dt = 0;
    else if (x < 40)
        dt = rrange(r, 1, S / 3 > 1 ? S / 3 : 1);
    else if (x < 60)
        dt = S + rbelow(r, 3) - 1;
    else if (x < 85)
        dt = rrange(r, 0, 4 * Sb);
    else if (x < 97)
        dt = rrange(r, 0, 40 * Sb);
    else
        dt = rrange(r, 0, DUR_MAX / c->u);
    uint64_t room = (NS_TMAX - c->now) / c->u;
    if (dt > room) dt = room;
    return c->now + dt * c->u;
}

/* Sets the time scales from a random quota of the table. */
static void p_scales(pctx_t *c) {
    const ptable_t *t = &c->tab;
    const sluice_plan_t *p = &t->plans[rbelow(&c->rng, t->table.nplans)];
    const sluice_rate_quota_t *q = &p->quotas[rbelow(&c->rng, p->nquotas)];
    uint64_t per = (uint64_t)q->per_ns / c->u, b = q->burst ? q->burst : q->limit;
    c->scale = per / q->limit ? per / q->limit : 1;
    c->scale2 = b <= UINT64_MAX / c->scale ? b * c->scale : per;
}

static void p_submit(pctx_t *c, int k, uint64_t t, uint32_t plan, bool plain) {
    uint64_t cost = p_cost(c, plan);
    sluice_key_t key = sluice_key_u64(c->keys[k]);
    sluice_decision_t dc, dr;
    sluice_plan_detail_t tc, tr;
    memset(&dc, 0xA5, sizeof dc);
    memset(&dr, 0x5A, sizeof dr);
    memset(&tc, 0xA5, sizeof tc);
    memset(&tr, 0x5A, sizeof tr);
    sluice_stats_t before, after;
    sluice_limiter_stats(c->core, &before);
    int rc, rr;
    uint64_t tok = (uint64_t)c->step;
    if (plain) {
        rc = sluice_limiter_submit_cost(c->core, key, tok, cost, t, &dc);
        rr = ref_submit_cost(c->ref, key, tok, cost, t, &dr);
    } else {
        /* without a detail half the time: the short path of a plan call
         * (limiter.c, submit_plan_u64_hot) takes only those */
        bool detail = rchance(&c->rng, 50);
        rc = sluice_limiter_submit_plan(c->core, key, tok, cost, plan, t, &dc, detail ? &tc : NULL);
        rr = ref_submit_plan(c->ref, key, tok, cost, plan, t, &dr, &tr);
        if (!detail) tc = tr;
    }
    plog(c,
         "%s k%d cost=%" PRIu64 " plan=%u t=%" PRIu64 ": core rc %d %s at=%" PRIu64 " r=%" PRIu64 " full=%" PRIu64
         " refused=%#x, ref rc %d %s at=%" PRIu64 " r=%" PRIu64 " full=%" PRIu64 " refused=%#x",
         plain ? "submit_cost" : "submit_plan", k, cost, plan, t, rc, rc ? "-" : dec_name(dc.kind), dc.at, dc.remaining,
         dc.full, plain ? 0 : tc.refused, rr, rr ? "-" : dec_name(dr.kind), dr.at, dr.remaining, dr.full,
         plain ? 0 : tr.refused);
    if (rc != rr) {
        pfail(c, "submit returned %d, model %d", rc, rr);
        return;
    }
    if (rc) {
        if (rc == SLUICE_ENOPLAN) {
            g_p_noplan++;
            sluice_limiter_stats(c->core, &after);
            if (after.live_keys != before.live_keys || after.admitted != before.admitted ||
                after.dropped != before.dropped || after.memory_bytes != before.memory_bytes)
                pfail(c, "a call naming no plan changed the limiter");
        }
        return;
    }
    if (dc.kind != dr.kind || dc.at != dr.at || dc.remaining != dr.remaining || dc.full != dr.full ||
        dc.now != dr.now) {
        pfail(c,
              "decision differs: core %s at=%" PRIu64 " remaining=%" PRIu64 " full=%" PRIu64 " now=%" PRIu64
              ", ref %s at=%" PRIu64 " remaining=%" PRIu64 " full=%" PRIu64 " now=%" PRIu64,
              dec_name(dc.kind), dc.at, dc.remaining, dc.full, dc.now, dec_name(dr.kind), dr.at, dr.remaining, dr.full,
              dr.now);
        return;
    }
    if (!plain) detail_cmp(c, "submit_plan", &tc, &tr);
    if (dr.kind == SLUICE_EMITTED)
        g_p_admit++;
    else
        g_p_drop++;
}

static void p_quota(pctx_t *c, int k, uint64_t t, uint32_t plan, bool plain) {
    uint64_t cost = p_cost(c, plan);
    sluice_key_t key = sluice_key_u64(c->keys[k]);
    sluice_quota_t qc, qr;
    sluice_plan_detail_t tc, tr;
    memset(&qc, 0xA5, sizeof qc);
    memset(&qr, 0x5A, sizeof qr);
    memset(&tc, 0xA5, sizeof tc);
    memset(&tr, 0x5A, sizeof tr);
    sluice_stats_t before, after;
    sluice_limiter_stats(c->core, &before);
    int rc, rr;
    if (plain) {
        rc = sluice_limiter_quota(c->core, key, cost, t, &qc);
        rr = ref_quota(c->ref, key, cost, t, &qr);
    } else {
        rc = sluice_limiter_quota_plan(c->core, key, cost, plan, t, &qc, &tc);
        rr = ref_quota_plan(c->ref, key, cost, plan, t, &qr, &tr);
    }
    plog(c,
         "%s k%d cost=%" PRIu64 " plan=%u t=%" PRIu64 ": core rc %d r=%" PRIu64 " full=%" PRIu64 " retry=%" PRIu64
         " burst=%" PRIu64 ", ref rc %d r=%" PRIu64 " full=%" PRIu64 " retry=%" PRIu64 " burst=%" PRIu64,
         plain ? "quota" : "quota_plan", k, cost, plan, t, rc, qc.remaining, qc.full, qc.retry, qc.burst, rr,
         qr.remaining, qr.full, qr.retry, qr.burst);
    if (rc != rr) {
        pfail(c, "quota returned %d, model %d", rc, rr);
        return;
    }
    sluice_limiter_stats(c->core, &after);
    if (after.live_keys != before.live_keys || after.memory_bytes != before.memory_bytes ||
        after.admitted != before.admitted || after.dropped != before.dropped) {
        pfail(c, "a quota read changed the limiter");
        return;
    }
    if (rc) return;
    if (qc.burst != qr.burst || qc.remaining != qr.remaining || qc.full != qr.full || qc.retry != qr.retry ||
        qc.now != qr.now) {
        pfail(c, "quota differs (now: core %" PRIu64 ", ref %" PRIu64 ")", qc.now, qr.now);
        return;
    }
    if (!plain) detail_cmp(c, "quota_plan", &tc, &tr);
    g_p_reads++;
}

static void p_set_plans(pctx_t *c) {
    mutate_table(c);
    c->tab.table.max_quotas = rchance(&c->rng, 50) ? 0 : c->max_quotas;
    int rc = sluice_limiter_set_plans(c->core, &c->tab.table);
    int rr = ref_set_plans(c->ref, &c->tab.table);
    char desc[200];
    size_t o = 0;
    for (size_t i = 0; i < c->tab.table.nplans && o < sizeof desc - 40; i++) {
        const sluice_plan_t *p = &c->tab.plans[i];
        o += (size_t)snprintf(desc + o, sizeof desc - o, " %s[", p->name);
        for (size_t k = 0; k < p->nquotas && o < sizeof desc - 40; k++)
            o += (size_t)snprintf(desc + o, sizeof desc - o, "%s%s %" PRIu64 "/%" PRId64 " b%" PRIu64, k ? ", " : "",
                                  p->quotas[k].name, p->quotas[k].limit, p->quotas[k].per_ns, p->quotas[k].burst);
        if (o < sizeof desc - 2) o += (size_t)snprintf(desc + o, sizeof desc - o, "]");
    }
    plog(c, "set_plans:%s -> core rc %d, ref rc %d", desc, rc, rr);
    if (rc != rr) pfail(c, "set_plans returned %d, model %d", rc, rr);
    if (rc == 0) {
        g_p_sets++;
        p_scales(c);
    }
}

static bool run_plans_one(uint64_t seed, bool verbose) {
    pctx_t *c = calloc(1, sizeof *c);
    if (!c) exit(2);
    c->seed = seed;
    c->verbose = verbose;
    c->rng.s = seed * UINT64_C(0x9FB21C651E98DF25) + UINT64_C(0x2545F4914F6CDD1D);
    rng_t *r = &c->rng;
    rnext(r);
    c->u = rchance(r, 30) ? UINT64_C(1000000) : 1;
    c->max_quotas = rchance(r, 50) ? PMAXQ : (size_t)rrange(r, 1, PMAXQ);
    /* sometimes room for more quotas than any plan has (up to the most
     * there may be): every layout of a key's record */
    if (rchance(r, 20)) c->max_quotas = (size_t)rrange(r, PMAXQ, SLUICE_PLAN_QUOTAS_MAX);
    gen_table(c);
    c->tab.table.max_quotas = rchance(r, 50) ? 0 : c->max_quotas;
    if (c->tab.table.max_quotas == 0) {
        size_t mq = 0;
        for (size_t i = 0; i < c->tab.table.nplans; i++)
            if (c->tab.plans[i].nquotas > mq) mq = c->tab.plans[i].nquotas;
        c->max_quotas = mq;
    }
    p_scales(c);
    c->nkeys = (int)rrange(r, 1, PMAXKEYS);
    for (int k = 0; k < c->nkeys; k++) c->keys[k] = (uint64_t)k * UINT64_C(0x9E3779B97F4A7C15) + rbelow(r, 7);
    unsigned x = (unsigned)rbelow(r, 100);
    uint64_t start_units = x < 40 ? 0 : x < 70 ? rrange(r, 1, 1000000) : rrange(r, 0, (NS_TMAX / 2) / c->u);
    c->now = c->start = start_units * c->u;

    sluice_config_t cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.policy = sluice_rate_plans();
    cfg.plans = &c->tab.table;
    cfg.start_ns = c->now;
    cfg.tick_ns = c->u == 1 ? 1 : 0;
    cfg.fixed_seed = true;
    cfg.seed[0] = rnext(r);
    cfg.seed[1] = rnext(r);
    int rc = sluice_limiter_new(&c->core, &cfg);
    int rr = ref_new_plans(&c->ref, &c->tab.table);
    if (verbose)
        fprintf(stderr, "plans seed %" PRIu64 ": unit %" PRIu64 " ns, max_quotas %zu\n", seed, c->u, c->max_quotas);
    if (rc != 0 || rr != 0) {
        pfail(c, "limiter_new with plans returned %d, model %d (the table should be valid)", rc, rr);
        if (rc) c->core = NULL;
        goto done;
    }
    plog(c, "new: %zu plans", c->tab.table.nplans);
    int nops = (int)rrange(r, 10, 200);
    for (int i = 0; i < nops && !c->failed; i++) {
        uint64_t t = p_time(c);
        int k = (int)rbelow(r, (uint64_t)c->nkeys);
        uint32_t np = (uint32_t)c->tab.table.nplans;
        uint32_t plan = (uint32_t)rbelow(r, np);
        if (rchance(r, 3)) plan = rchance(r, 80) ? np + (uint32_t)rbelow(r, 3) : UINT32_MAX;
        unsigned w = (unsigned)rbelow(r, 100);
        uint64_t top = t;
        if (c->now > c->start && rchance(r, 3)) top = c->now - (c->now - c->start) / 2; /* an earlier time */
        if (w < 50)
            p_submit(c, k, top, plan, false);
        else if (w < 58)
            p_submit(c, k, top, 0, true);
        else if (w < 78)
            p_quota(c, k, top, plan, false);
        else if (w < 83)
            p_quota(c, k, top, 0, true);
        else if (w < 88) {
            int cr = sluice_limiter_cancel(c->core, sluice_key_u64(c->keys[k]), top);
            int rr2 = ref_cancel(c->ref, sluice_key_u64(c->keys[k]), top);
            plog(c, "cancel k%d t=%" PRIu64 ": core %d, ref %d", k, top, cr, rr2);
            if (cr != rr2) pfail(c, "cancel returned %d, model %d", cr, rr2);
        } else if (w < 95) {
            p_set_plans(c);
        } else {
            /* a quota read of every key under every plan */
            for (int kk = 0; kk < c->nkeys && !c->failed; kk++)
                for (uint32_t pp = 0; pp < np && !c->failed; pp++) p_quota(c, kk, t, pp, false);
        }
        if (top == t) c->now = t;
        if (c->failed) break;
        int ck = sluice_limiter_check(c->core);
        if (ck) pfail(c, "sluice_limiter_check() returned %d", ck);
        sluice_stats_t st, rt;
        sluice_limiter_stats(c->core, &st);
        rt = st;
        ref_totals(c->ref, &rt);
        if (!c->failed && (st.admitted != rt.admitted || st.dropped != rt.dropped))
            pfail(c, "totals differ: core admitted %" PRIu64 " dropped %" PRIu64 ", ref %" PRIu64 " %" PRIu64,
                  st.admitted, st.dropped, rt.admitted, rt.dropped);
    }
    if (!c->failed) {
        /* close: then every call fails on both sides */
        uint64_t t = p_time(c);
        int a = sluice_limiter_close(c->core, t, SLUICE_CLOSE_DRAIN), b = ref_close(c->ref, t, SLUICE_CLOSE_DRAIN);
        if (a != b) pfail(c, "close returned %d, model %d", a, b);
        sluice_decision_t d1, d2;
        a = sluice_limiter_submit_plan(c->core, sluice_key_u64(c->keys[0]), 1, 1, 0, t, &d1, NULL);
        b = ref_submit_plan(c->ref, sluice_key_u64(c->keys[0]), 1, 1, 0, t, &d2, NULL);
        if (!c->failed && (a != b || a != SLUICE_ECLOSED))
            pfail(c, "submit_plan after close returned %d, model %d (expected SLUICE_ECLOSED)", a, b);
    }

done:;
    bool ok = !c->failed;
    g_p_runs++;
    if (!ok) {
        fprintf(stderr, "\nFAIL (plans): seed %" PRIu64 ": %s\nreplay with SLUICE_DIFF_PLANS_SEED=%" PRIu64 "\n", seed,
                c->msg, seed);
        fprintf(stderr, "table (as last set):\n");
        for (size_t i = 0; i < c->tab.table.nplans; i++) {
            const sluice_plan_t *p = &c->tab.plans[i];
            fprintf(stderr, "  %s:", p->name);
            for (size_t k = 0; k < p->nquotas; k++)
                fprintf(stderr, " %s limit=%" PRIu64 " per_ns=%" PRId64 " burst=%" PRIu64 ";", p->quotas[k].name,
                        p->quotas[k].limit, p->quotas[k].per_ns, p->quotas[k].burst);
            fputc('\n', stderr);
        }
        fprintf(stderr, "last ops:\n");
        for (int i = c->step > 8 ? c->step - 8 : 0; i < c->step; i++) fprintf(stderr, "  #%d %s\n", i, c->last[i % 8]);
    }
    if (c->core) sluice_limiter_free(c->core);
    ref_free(c->ref);
    free(c);
    return ok;
}

/* Watchdog: a core stuck in a loop fails with the seed instead of hanging. */
static volatile sig_atomic_t g_cur_seed_lo, g_cur_seed_hi, g_cur_plans;

static void on_alarm(int sig) {
    (void)sig;
    char buf[192];
    uint64_t s = ((uint64_t)(uint32_t)g_cur_seed_hi << 32) | (uint32_t)g_cur_seed_lo;
    int n = snprintf(buf, sizeof buf,
                     "\nFAIL: seed %" PRIu64 " still running after 20 s (infinite loop?); replay with %s=%" PRIu64 "\n",
                     s, g_cur_plans ? "SLUICE_DIFF_PLANS_SEED" : "SLUICE_DIFF_SEED", s);
    if (n > 0) {
        ssize_t w = write(2, buf, (size_t)n);
        (void)w;
    }
    _exit(1);
}

static bool run_guarded(uint64_t seed, bool verbose) {
    g_cur_seed_lo = (sig_atomic_t)(uint32_t)seed;
    g_cur_seed_hi = (sig_atomic_t)(uint32_t)(seed >> 32);
    alarm(20);
    bool ok = run_one(seed, verbose);
    alarm(0);
    return ok;
}

static uint64_t env_u64(const char *name, uint64_t dflt, bool *set) {
    const char *s = getenv(name);
    if (set) *set = s && *s;
    if (!s || !*s) return dflt;
    return strtoull(s, NULL, 0);
}

int main(void) {
    signal(SIGALRM, on_alarm);
    bool one;
    uint64_t seed1 = env_u64("SLUICE_DIFF_SEED", 0, &one);
    if (one) return run_guarded(seed1, true) ? 0 : 1;
    uint64_t pseed = env_u64("SLUICE_DIFF_PLANS_SEED", 0, &one);
    if (one) return run_plans_one(pseed, true) ? 0 : 1;
    uint64_t iters = env_u64("SLUICE_DIFF_ITERS", 40000, NULL);
    uint64_t base = env_u64("SLUICE_DIFF_SEED_BASE", 1, NULL);
    for (uint64_t i = 0; i < iters; i++) {
        if (!run_guarded(base + i, false)) {
            fprintf(stderr, "test_differential: FAILED at run %" PRIu64 " of %" PRIu64 "\n", i + 1, iters);
            return 1;
        }
    }
    uint64_t piters = env_u64("SLUICE_DIFF_PLANS_ITERS", 3000, NULL);
    for (uint64_t i = 0; i < piters; i++) {
        g_cur_seed_lo = (sig_atomic_t)(uint32_t)(base + i);
        g_cur_seed_hi = (sig_atomic_t)(uint32_t)((base + i) >> 32);
        g_cur_plans = 1;
        alarm(20);
        bool ok = run_plans_one(base + i, false);
        alarm(0);
        if (!ok) {
            fprintf(stderr, "test_differential: plans FAILED at run %" PRIu64 " of %" PRIu64 "\n", i + 1, piters);
            return 1;
        }
    }
    printf("test_differential: %" PRIu64 " runs, %" PRIu64 " steps: ok\n"
           "  decisions: %" PRIu64 " emitted, %" PRIu64 " scheduled, %" PRIu64 " dropped\n"
           "  events: %" PRIu64 " emit, %" PRIu64 " drop, %" PRIu64 " discard\n"
           "  rate: %" PRIu64 " weighted calls decided, %" PRIu64 " quota peeks answered\n"
           "  submits from inside emit callbacks: %" PRIu64 "\n"
           "  info: %" PRIu64 " cross-key events out of time order within one advance/close\n",
           g_runs, g_ops, g_dec[1], g_dec[2], g_dec[3], g_ev[1], g_ev[2], g_ev[3], g_costly, g_quotas, g_nested,
           g_out_of_order);
    printf("  plans: %" PRIu64 " runs, %" PRIu64 " steps: %" PRIu64 " admitted, %" PRIu64 " dropped, %" PRIu64
           " quota reads, %" PRIu64 " tables replaced, %" PRIu64 " calls naming no plan\n",
           g_p_runs, g_p_steps, g_p_admit, g_p_drop, g_p_reads, g_p_sets, g_p_noplan);
    return 0;
}
