/*
 * test_fault.c — allocation fault injection (issue 6, part 3).
 *
 * Every allocation of a limiter goes through ctests/support/fault_alloc, which
 * fails on purpose: exactly the Nth allocation (N = 1, 2, ... until a run
 * completes without reaching N), every Nth allocation, or any allocation over
 * a byte budget. For every policy, scripted and random workloads run with
 * each schedule, and for each run:
 *
 *  - creation either succeeds or fails with SLUICE_ENOMEM, leaving `out`
 *    untouched and no byte allocated;
 *  - only submit may fail, and only with SLUICE_ENOMEM; a failed submit's
 *    token is not taken: it is never reported by an event afterwards;
 *  - the faulty limiter ("A") runs in lockstep with a twin that never faults
 *    ("B", same seed) and, for the smaller workloads, with the reference model
 *    ctests/ref ("R"). Where A fails a submit, B and R are asked pending() on
 *    the key instead (which, like the failed submit, fires that key's due
 *    timers and changes nothing else). Every other result, every decision and
 *    every key's event sequence must be identical on all sides;
 *  - sluice_limiter_check(A) after every operation (for the 13k-key
 *    workloads: after the first 24 operations that attempted an
 *    allocation or failed, every 2048th operation and at every phase end;
 *    each check is O(keys)), and the
 *    limiter's memory_bytes equals the allocator's live bytes;
 *  - after the faulty part, allocation works again and the limiter is still
 *    usable: a recovery phase (new keys, old keys) must succeed entirely;
 *  - after close and free, the allocator holds no live block (leaks), and it
 *    saw no double free or size mismatch. Run under ASan/LSan in
 *    `make sanitize` as well.
 *
 * Under ASan/TSan (SANITIZED): one random workload per policy, one 13k-key
 * policy run (every 4th N), and in small runs the invariant check only after operations
 * that allocated or failed and every 8th, to keep `make sanitize`
 * reasonable.
 *
 * Env: SLUICE_FAULT_SEEDS (random workloads per policy, default 3),
 *      SLUICE_FAULT_VERBOSE=1 (print every run).
 */
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ref/ref_model.h"
#include "sluice.h"
#include "support/fault_alloc.h"

#include "support/sanitized.h"

/* ------------------------------------------------------------------ */
/* checks                                                              */
/* ------------------------------------------------------------------ */

static char g_where[256];
static uint64_t g_checks;

static void die(const char *fmt, ...) {
    va_list ap;
    fprintf(stderr, "test_fault: FAILED (%s)\n  ", g_where);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    exit(1);
}

#define CHECK(cond, ...)                                                                                               \
    do {                                                                                                               \
        g_checks++;                                                                                                    \
        if (!(cond)) die("test_fault.c:%d: %s", __LINE__, #cond);                                                      \
    } while (0)
#define CHECKF(cond, ...)                                                                                              \
    do {                                                                                                               \
        g_checks++;                                                                                                    \
        if (!(cond)) {                                                                                                 \
            fprintf(stderr, "test_fault.c:%d: %s\n", __LINE__, #cond);                                                 \
            die(__VA_ARGS__);                                                                                          \
        }                                                                                                              \
    } while (0)

#define MS UINT64_C(1000000)

/* ------------------------------------------------------------------ */
/* rng                                                                 */
/* ------------------------------------------------------------------ */

static uint64_t rng_next(uint64_t *s) {
    uint64_t z = (*s += UINT64_C(0x9E3779B97F4A7C15));
    z = (z ^ (z >> 30)) * UINT64_C(0xBF58476D1CE4E5B9);
    z = (z ^ (z >> 27)) * UINT64_C(0x94D049BB133111EB);
    return z ^ (z >> 31);
}
static uint64_t rng_below(uint64_t *s, uint64_t n) { return n ? rng_next(s) % n : 0; }

/* ------------------------------------------------------------------ */
/* keys                                                                */
/* ------------------------------------------------------------------ */

#define MAXK 13000
#define KEY_TAG UINT64_C(0x5A)

typedef struct {
    sluice_key_kind_t kind;
    uint64_t u64;
    uint16_t len;
    unsigned char b[64];
} kdef_t;

static kdef_t g_keys[MAXK];
static int g_nkeys;

/* Key i: u64 (i * 2^20 + 0x5A), a short byte key (4..8 bytes, inline in the
 * entry) or, when `long_keys`, a long byte key (9..64 bytes: a heap copy,
 * one allocation each). The first 4 bytes of a byte key are i. */
static void keys_define(int n, bool long_keys) {
    if (n > MAXK) n = MAXK;
    g_nkeys = n;
    for (int i = 0; i < n; i++) {
        kdef_t *k = &g_keys[i];
        memset(k, 0, sizeof *k);
        int sel = long_keys ? i % 3 : i % 2;
        if (sel == 0) {
            k->kind = SLUICE_KEY_U64;
            k->u64 = ((uint64_t)i << 20) + KEY_TAG;
        } else {
            k->kind = SLUICE_KEY_BYTES;
            k->len = sel == 1 ? (uint16_t)(4 + i % 5) : (uint16_t)(9 + (i * 7) % 56);
            for (int j = 0; j < k->len; j++) k->b[j] = (unsigned char)(i * 31 + j * 7);
            k->b[0] = (unsigned char)i;
            k->b[1] = (unsigned char)(i >> 8);
            k->b[2] = (unsigned char)(i >> 16);
            k->b[3] = (unsigned char)(i >> 24);
        }
    }
}

static sluice_key_t key_of(int i) {
    const kdef_t *k = &g_keys[i];
    if (k->kind == SLUICE_KEY_U64) return sluice_key_u64(k->u64);
    return sluice_key_bytes(k->b, k->len);
}

/* The id of an event's key; dies if it is none of ours or not exact. */
static int key_id(sluice_key_t key) {
    int i = -1;
    if (key.kind == SLUICE_KEY_U64) {
        if ((key.u64 & 0xFFFFF) == KEY_TAG) i = (int)(key.u64 >> 20);
    } else if (key.kind == SLUICE_KEY_BYTES && key.len >= 4 && key.bytes) {
        const unsigned char *b = key.bytes;
        i = (int)((uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24);
    }
    if (i < 0 || i >= g_nkeys || !ref_key_equal(key, key_of(i))) die("event for a key that is none of the run's");
    return i;
}

/* ------------------------------------------------------------------ */
/* one side of a lockstep run: A (faulty core), B (clean core), R (ref) */
/* ------------------------------------------------------------------ */

typedef struct {
    uint8_t kind;
    uint64_t token, at;
} ev_t;

typedef struct {
    ev_t *v;
    uint32_t n, cap;
} evvec_t;

enum { T_NONE = 0, T_HELD = 1, T_DONE = 2, T_REFUSED = 3 };

typedef struct side {
    const char *name;
    sluice_limiter_t *l;
    ref_model_t *r;
    evvec_t *ev;  /* per key */
    uint8_t *tok; /* per token */
    struct run *run;
} side_t;

typedef struct run {
    side_t s[3]; /* A, B, R */
    bool with_ref;
    fault_alloc_t fa;
    sluice_policy_t pol;
    uint64_t now;
    uint64_t ntok, captok;
    uint32_t *cmp_ab, *cmp_ar; /* per key: events compared so far */
    int *dirty;
    uint8_t *is_dirty;
    int ndirty;
    bool closed, a_created;
    uint64_t ops, nomem, checks_done;
    bool big; /* sparse invariant checks */
    uint64_t attempts_before;
} run_t;

static void ev_push(evvec_t *v, ev_t e) {
    if (v->n == v->cap) {
        v->cap = v->cap ? v->cap * 2 : 4;
        v->v = realloc(v->v, v->cap * sizeof *v->v);
        if (!v->v) die("out of memory");
    }
    v->v[v->n++] = e;
}

static void mark_dirty(run_t *r, int k) {
    if (!r->is_dirty[k]) {
        r->is_dirty[k] = 1;
        r->dirty[r->ndirty++] = k;
    }
}

static void token_event(side_t *s, uint64_t tok, int k, int kind) {
    run_t *r = s->run;
    CHECKF(tok >= 1 && tok <= r->ntok, "%s: event for unknown token %" PRIu64, s->name, tok);
    CHECKF(s->tok[tok] == T_HELD, "%s: event %d for token %" PRIu64 " in state %d (%s)", s->name, kind, tok,
           s->tok[tok],
           s->tok[tok] == T_REFUSED ? "its submit failed: the token was never taken"
           : s->tok[tok] == T_DONE  ? "already accounted for"
                                    : "not held");
    s->tok[tok] = T_DONE;
    (void)k;
}

static void on_event(void *user, const sluice_event_t *e) {
    side_t *s = user;
    int k = key_id(e->key);
    CHECKF(e->kind >= SLUICE_EVENT_EMIT && e->kind <= SLUICE_EVENT_DISCARD, "bad event kind %d", e->kind);
    token_event(s, e->token, k, e->kind);
    ev_t x = { (uint8_t)e->kind, e->token, e->at };
    ev_push(&s->ev[k], x);
    mark_dirty(s->run, k);
}

static void take_ref_events(run_t *r) {
    side_t *s = &r->s[2];
    const ref_event_t *ev = ref_events(s->r);
    size_t n = ref_event_count(s->r);
    for (size_t i = 0; i < n; i++) {
        int k = key_id(ev[i].key);
        token_event(s, ev[i].token, k, ev[i].kind);
        ev_t x = { (uint8_t)ev[i].kind, ev[i].token, ev[i].at };
        ev_push(&s->ev[k], x);
        mark_dirty(r, k);
    }
    ref_clear_events(s->r);
}

static void cmp_key(run_t *r, int k, const side_t *x, const side_t *y, uint32_t *pos) {
    const evvec_t *a = &x->ev[k], *b = &y->ev[k];
    CHECKF(a->n == b->n, "key %d: %s has %u events, %s has %u (op %" PRIu64 ")", k, x->name, a->n, y->name, b->n,
           r->ops);
    for (uint32_t i = *pos; i < a->n; i++) {
        ev_t p = a->v[i], q = b->v[i];
        CHECKF(p.kind == q.kind && p.token == q.token && p.at == q.at,
               "key %d event %u: %s kind %d tok %" PRIu64 " at %" PRIu64 ", %s kind %d tok %" PRIu64 " at %" PRIu64, k,
               i, x->name, p.kind, p.token, p.at, y->name, q.kind, q.token, q.at);
    }
    *pos = a->n;
}

static void sync_events(run_t *r) {
    if (r->with_ref) take_ref_events(r);
    for (int i = 0; i < r->ndirty; i++) {
        int k = r->dirty[i];
        r->is_dirty[k] = 0;
        if (r->s[1].l) cmp_key(r, k, &r->s[0], &r->s[1], &r->cmp_ab[k]);
        if (r->with_ref) cmp_key(r, k, &r->s[0], &r->s[2], &r->cmp_ar[k]);
    }
    r->ndirty = 0;
}

/* Invariants of A, its memory accounting, and A == B in counters. */
static void checkpoint(run_t *r) {
    sluice_limiter_t *a = r->s[0].l, *b = r->s[1].l;
    if (!a) return;
    r->checks_done++;
    int rc = sluice_limiter_check(a);
    CHECKF(rc == 0, "sluice_limiter_check(A) = %d after op %" PRIu64, rc, r->ops);
    sluice_stats_t sa, sb;
    CHECK(sluice_limiter_stats(a, &sa) == 0, "");
    CHECK(sluice_limiter_stats(b, &sb) == 0, "");
    uint64_t live = fault_alloc_live_bytes(&r->fa);
    CHECKF(sa.memory_bytes == live, "A says memory_bytes = %" PRIu64 ", the allocator holds %" PRIu64 " live bytes",
           sa.memory_bytes, live);
    CHECKF(sa.live_keys == sb.live_keys && sa.pending == sb.pending && sa.armed_timers == sb.armed_timers,
           "A and B differ: live %" PRIu64 "/%" PRIu64 ", pending %" PRIu64 "/%" PRIu64 ", timers %" PRIu64 "/%" PRIu64,
           sa.live_keys, sb.live_keys, sa.pending, sb.pending, sa.armed_timers, sb.armed_timers);
    if (r->with_ref && !r->closed) {
        CHECKF(sa.pending == ref_pending_count(r->s[2].r), "A pending %" PRIu64 ", model %" PRIu64, sa.pending,
               ref_pending_count(r->s[2].r));
    }
}

static void after_op(run_t *r, bool failed) {
    r->ops++;
    sync_events(r);
    bool attempted = r->fa.attempts != r->attempts_before;
    r->attempts_before = r->fa.attempts;
    /* big runs: the first 24 operations that allocated or failed, then every 2048th */
    /* sanitizer builds, small runs: after every operation that allocated or
     * failed, and every 8th (the wheel check walks all 514 wheel lists each time) */
    bool small_check = !SANITIZED || failed || attempted || r->ops % 8 == 0;
    uint64_t big_first = SANITIZED ? 6 : 24;
    if (r->big ? (((failed || attempted) && r->checks_done < big_first) || r->ops % 2048 == 0) : small_check)
        checkpoint(r);
}

static uint64_t new_token(run_t *r) {
    if (r->ntok + 2 >= r->captok) {
        uint64_t nc = r->captok ? r->captok * 2 : 4096;
        for (int i = 0; i < 3; i++) {
            r->s[i].tok = realloc(r->s[i].tok, nc);
            if (!r->s[i].tok) die("out of memory");
            memset(r->s[i].tok + r->captok, 0, nc - r->captok);
        }
        r->captok = nc;
    }
    return ++r->ntok;
}

/* ------------------------------------------------------------------ */
/* operations in lockstep                                              */
/* ------------------------------------------------------------------ */

static void op_submit(run_t *r, int k, uint64_t t) {
    uint64_t tok = new_token(r);
    sluice_key_t key = key_of(k);
    uint64_t f0 = r->fa.failures;
    sluice_decision_t da = { 0 }, db = { 0 }, dr = { 0 };
    int ra = sluice_limiter_submit(r->s[0].l, key, tok, t, &da);
    bool injected = r->fa.failures != f0;
    if (ra == SLUICE_ENOMEM) {
        CHECKF(injected, "submit returned SLUICE_ENOMEM but no allocation failed");
        r->nomem++;
        for (int i = 0; i < 3; i++) r->s[i].tok[tok] = T_REFUSED;
        int pb = sluice_limiter_pending(r->s[1].l, key, t);
        CHECKF(pb >= 0, "B pending = %d", pb);
        if (r->with_ref) (void)ref_pending(r->s[2].r, key, t);
        after_op(r, true);
        return;
    }
    CHECKF(!injected || ra == 0, "submit hit an injected fault but returned %d (%s), not SLUICE_ENOMEM", ra,
           sluice_strerror(ra));
    int rb = sluice_limiter_submit(r->s[1].l, key, tok, t, &db);
    CHECKF(ra == rb, "submit: A returned %d, B %d", ra, rb);
    if (r->with_ref) {
        int rr = ref_submit(r->s[2].r, key, tok, t, &dr);
        CHECKF(ra == rr, "submit: A returned %d, model %d", ra, rr);
    }
    if (ra == 0) {
        CHECKF(da.kind == db.kind && da.at == db.at, "decision: A %d@%" PRIu64 ", B %d@%" PRIu64, da.kind, da.at,
               db.kind, db.at);
        if (r->with_ref)
            CHECKF(da.kind == dr.kind && da.at == dr.at, "decision: A %d@%" PRIu64 ", model %d@%" PRIu64, da.kind,
                   da.at, dr.kind, dr.at);
        uint8_t st = da.kind == SLUICE_SCHEDULED ? T_HELD : T_DONE;
        for (int i = 0; i < 3; i++)
            if (r->s[i].tok[tok] == T_NONE) r->s[i].tok[tok] = st;
    } else {
        for (int i = 0; i < 3; i++) r->s[i].tok[tok] = T_REFUSED;
    }
    after_op(r, ra != 0);
}

enum { K_FLUSH, K_CANCEL, K_PENDING };

static void op_key(run_t *r, int what, int k, uint64_t t) {
    sluice_key_t key = key_of(k);
    int ra, rb, rr = 0;
    switch (what) {
    case K_FLUSH:
        ra = sluice_limiter_flush(r->s[0].l, key, t);
        rb = sluice_limiter_flush(r->s[1].l, key, t);
        if (r->with_ref) rr = ref_flush(r->s[2].r, key, t);
        break;
    case K_CANCEL:
        ra = sluice_limiter_cancel(r->s[0].l, key, t);
        rb = sluice_limiter_cancel(r->s[1].l, key, t);
        if (r->with_ref) rr = ref_cancel(r->s[2].r, key, t);
        break;
    default:
        ra = sluice_limiter_pending(r->s[0].l, key, t);
        rb = sluice_limiter_pending(r->s[1].l, key, t);
        if (r->with_ref) rr = ref_pending(r->s[2].r, key, t);
        break;
    }
    CHECKF(ra != SLUICE_ENOMEM, "key operation %d returned SLUICE_ENOMEM (only submit may allocate)", what);
    CHECKF(ra == rb, "key op %d: A %d, B %d", what, ra, rb);
    if (r->with_ref) CHECKF(ra == rr, "key op %d: A %d, model %d", what, ra, rr);
    after_op(r, false);
}

static void op_advance(run_t *r, uint64_t t, size_t bound) {
    int64_t ta = 0;
    for (int guard = 0;; guard++) {
        int64_t n = sluice_limiter_advance(r->s[0].l, t, bound);
        CHECKF(n >= 0, "advance(A) = %" PRId64, n);
        CHECKF(bound == 0 || (size_t)n <= bound, "advance handled %" PRId64 " > bound %zu", n, bound);
        ta += n;
        if (bound == 0 || (size_t)n < bound) break;
        CHECK(guard < 10000000, "");
    }
    int64_t tb = sluice_limiter_advance(r->s[1].l, t, 0);
    CHECKF(ta == tb, "advance: A handled %" PRId64 " timers, B %" PRId64, ta, tb);
    if (r->with_ref) {
        int64_t tr = ref_advance(r->s[2].r, t);
        if (r->pol.kind != SLUICE_RATE)
            CHECKF(ta == tr, "advance: core handled %" PRId64 " timer transitions, model %" PRId64, ta, tr);
    }
    after_op(r, false);
}

static void op_close(run_t *r, uint64_t t, sluice_close_mode_t mode) {
    int ra = sluice_limiter_close(r->s[0].l, t, mode);
    int rb = sluice_limiter_close(r->s[1].l, t, mode);
    CHECKF(ra == 0 && rb == 0, "close: A %d, B %d", ra, rb);
    if (r->with_ref) CHECK(ref_close(r->s[2].r, t, mode) == 0, "");
    r->closed = true;
    after_op(r, false);
    /* closed: every call fails with SLUICE_ECLOSED and allocates nothing */
    uint64_t att = r->fa.attempts;
    sluice_decision_t d;
    CHECK(sluice_limiter_submit(r->s[0].l, key_of(0), 0, t, &d) == SLUICE_ECLOSED, "");
    CHECK(sluice_limiter_flush(r->s[0].l, key_of(0), t) == SLUICE_ECLOSED, "");
    CHECK(sluice_limiter_advance(r->s[0].l, t, 0) == SLUICE_ECLOSED, "");
    CHECK(sluice_limiter_close(r->s[0].l, t, mode) == SLUICE_ECLOSED, "");
    CHECK(r->fa.attempts == att, "");
}

/* ------------------------------------------------------------------ */
/* run lifecycle                                                       */
/* ------------------------------------------------------------------ */

typedef enum { F_NONE, F_NTH, F_EVERY, F_BUDGET } fmode_t;

static sluice_config_t config_for(run_t *r, side_t *s) {
    sluice_config_t c;
    memset(&c, 0, sizeof c);
    c.policy = r->pol;
    c.tick_ns = MS;
    c.start_ns = 0;
    c.on_event = on_event;
    c.user = s;
    c.fixed_seed = true;
    c.seed[0] = UINT64_C(0x0123456789abcdef);
    c.seed[1] = UINT64_C(0xfedcba9876543210);
    return c;
}

/* Creates the sides. With faults armed before creation, A's creation may
 * fail: it must fail cleanly, and is then retried with faults off (the
 * schedule is re-armed afterwards by the caller). Returns whether A's first
 * creation failed. */
static bool run_init(run_t *r, const sluice_policy_t *pol, bool with_ref, bool big, fmode_t mode, uint64_t n,
                     bool arm_before_new) {
    memset(r, 0, sizeof *r);
    r->pol = *pol;
    r->with_ref = with_ref;
    r->big = big;
    fault_alloc_init(&r->fa);
    const char *names[3] = { "A(faulty core)", "B(clean core)", "R(model)" };
    for (int i = 0; i < 3; i++) {
        r->s[i].name = names[i];
        r->s[i].run = r;
        r->s[i].ev = calloc((size_t)g_nkeys, sizeof(evvec_t));
        if (!r->s[i].ev) die("out of memory");
    }
    r->cmp_ab = calloc((size_t)g_nkeys, sizeof *r->cmp_ab);
    r->cmp_ar = calloc((size_t)g_nkeys, sizeof *r->cmp_ar);
    r->dirty = calloc((size_t)g_nkeys, sizeof *r->dirty);
    r->is_dirty = calloc((size_t)g_nkeys, 1);
    if (!r->cmp_ab || !r->cmp_ar || !r->dirty || !r->is_dirty) die("out of memory");
    new_token(r); /* allocate the token arrays */
    r->ntok = 0;

    if (arm_before_new) {
        if (mode == F_NTH) fault_alloc_fail_nth(&r->fa, n);
        if (mode == F_EVERY) fault_alloc_fail_every(&r->fa, n);
        if (mode == F_BUDGET) fault_alloc_fail_over(&r->fa, n);
    }
    bool creation_failed = false;
    sluice_config_t ca = config_for(r, &r->s[0]);
    ca.allocator = fault_alloc_hook(&r->fa);
    sluice_limiter_t *sentinel = (sluice_limiter_t *)(uintptr_t)0x1;
    sluice_limiter_t *a = sentinel;
    int rc = sluice_limiter_new(&a, &ca);
    if (rc != 0) {
        CHECKF(rc == SLUICE_ENOMEM, "sluice_limiter_new with a faulty allocator returned %d", rc);
        CHECK(a == sentinel, "");
        CHECKF(r->fa.failures > 0, "creation failed without an injected failure");
        CHECKF(fault_alloc_clean(&r->fa), "a failed creation left %" PRIu64 " bytes allocated",
               fault_alloc_live_bytes(&r->fa));
        creation_failed = true;
        fault_alloc_disarm(&r->fa);
        rc = sluice_limiter_new(&a, &ca);
        CHECKF(rc == 0, "creation with faults off returned %d", rc);
    }
    r->s[0].l = a;
    sluice_config_t cb = config_for(r, &r->s[1]);
    CHECK(sluice_limiter_new(&r->s[1].l, &cb) == 0, "");
    if (with_ref) CHECK(ref_new(&r->s[2].r, pol) == 0, "");
    r->attempts_before = r->fa.attempts;
    r->a_created = true;
    return creation_failed;
}

static void run_arm(run_t *r, fmode_t mode, uint64_t n) {
    if (mode == F_NTH) fault_alloc_fail_nth(&r->fa, n);
    if (mode == F_EVERY) fault_alloc_fail_every(&r->fa, n);
    if (mode == F_BUDGET) fault_alloc_fail_over(&r->fa, n);
}

/* Recovery: faults off, everything must work. Then close (or free without
 * close) and check that nothing is left. */
static void run_finish(run_t *r, uint64_t *rng, bool close_first) {
    fault_alloc_disarm(&r->fa);
    if (!r->closed) {
        uint64_t n0 = r->nomem;
        int nk = g_nkeys < 64 ? g_nkeys : 64;
        for (int i = 0; i < nk; i++) {
            int k = (int)rng_below(rng, (uint64_t)g_nkeys);
            op_submit(r, k, r->now);
            r->now += rng_below(rng, 3) * MS;
        }
        CHECKF(r->nomem == n0, "SLUICE_ENOMEM with faults off (the limiter did not recover)");
        op_advance(r, r->now, 0);
        checkpoint(r);
        if (close_first) {
            op_close(r, r->now, rng_below(rng, 2) ? SLUICE_CLOSE_DRAIN : SLUICE_CLOSE_DISCARD);
        } else {
            /* free without close: pending tokens come back as DISCARD at the last time seen */
            if (r->with_ref) CHECK(ref_close(r->s[2].r, r->now, SLUICE_CLOSE_DISCARD) == 0, "");
            sluice_limiter_free(r->s[0].l);
            sluice_limiter_free(r->s[1].l);
            r->s[0].l = r->s[1].l = NULL;
            r->closed = true;
            sync_events(r);
        }
    }
    if (r->s[0].l) {
        sluice_limiter_free(r->s[0].l);
        sluice_limiter_free(r->s[1].l);
        r->s[0].l = r->s[1].l = NULL;
        sync_events(r);
    }
    /* every token accounted for exactly once */
    for (uint64_t t = 1; t <= r->ntok; t++)
        for (int i = 0; i < (r->with_ref ? 3 : 2); i++)
            CHECKF(r->s[i].tok[t] != T_HELD, "%s: token %" PRIu64 " was scheduled but never reported", r->s[i].name, t);
    /* every key: same events on every side */
    for (int k = 0; k < g_nkeys; k++) {
        CHECKF(r->s[0].ev[k].n == r->s[1].ev[k].n, "key %d: A %u events, B %u", k, r->s[0].ev[k].n, r->s[1].ev[k].n);
        if (r->with_ref)
            CHECKF(r->s[0].ev[k].n == r->s[2].ev[k].n, "key %d: A %u events, model %u", k, r->s[0].ev[k].n,
                   r->s[2].ev[k].n);
    }
    if (!fault_alloc_clean(&r->fa)) {
        fault_alloc_report(&r->fa, stderr, 20);
        die("the allocator is not clean after free (leak or misuse)");
    }
}

static void run_free(run_t *r) {
    ref_free(r->s[2].r);
    for (int i = 0; i < 3; i++) {
        for (int k = 0; k < g_nkeys; k++) free(r->s[i].ev[k].v);
        free(r->s[i].ev);
        free(r->s[i].tok);
    }
    free(r->cmp_ab);
    free(r->cmp_ar);
    free(r->dirty);
    free(r->is_dirty);
    fault_alloc_destroy(&r->fa);
}

/* ------------------------------------------------------------------ */
/* workloads                                                           */
/* ------------------------------------------------------------------ */

static uint64_t g_window; /* the policies' window, ns */

/* Scripted: fill (growing the index, the slab and, with long keys, key
 * copies), hit again, flush / cancel / pending a few, let everything go
 * idle (compaction and index shrink at the end of the call), fill half
 * again, then the recovery phase and close or free. */
static void workload_scripted(run_t *r, uint64_t *rng) {
    int n = g_nkeys;
    uint64_t per_ms = (uint64_t)(n / 8 + 1);
    for (int i = 0; i < n; i++) {
        op_submit(r, i, r->now);
        if ((uint64_t)i % per_ms == per_ms - 1) r->now += MS;
    }
    if (r->big) checkpoint(r);
    for (int i = 0; i < n; i += 3) op_submit(r, i, r->now);
    for (int i = 0; i < n; i += 7) op_key(r, K_FLUSH, i, r->now);
    for (int i = 1; i < n; i += 11) op_key(r, K_CANCEL, i, r->now);
    for (int i = 2; i < n; i += 13) op_key(r, K_PENDING, i, r->now);
    r->now += g_window / 2;
    op_advance(r, r->now, 0);
    for (int i = 0; i < n; i += 5) op_submit(r, i, r->now);
    r->now += 4 * g_window + 20 * MS;
    op_advance(r, r->now, (size_t)(n / 4 + 1)); /* bounded, several calls */
    if (r->big) checkpoint(r);
    for (int i = n / 2; i < n; i++) op_submit(r, i, r->now + (uint64_t)(i % 4) * MS);
    r->now += 4 * MS;
    op_advance(r, r->now, 0);
    run_finish(r, rng, rng_below(rng, 4) != 0);
}

/* Random: submit / flush / cancel / pending / advance / close, times
 * advancing by whole ms (the wheel's tick), all key kinds. */
static void workload_random(run_t *r, uint64_t *rng, int nops) {
    for (int i = 0; i < nops && !r->closed; i++) {
        uint64_t x = rng_below(rng, 100);
        if (x < 35)
            r->now += rng_below(rng, g_window / MS + 2) * MS;
        else if (x < 38)
            r->now += rng_below(rng, 100) * g_window;
        int k = (int)rng_below(rng, (uint64_t)g_nkeys);
        uint64_t w = rng_below(rng, 1000);
        if (w < 600)
            op_submit(r, k, r->now);
        else if (w < 680)
            op_key(r, K_FLUSH, k, r->now);
        else if (w < 760)
            op_key(r, K_CANCEL, k, r->now);
        else if (w < 820)
            op_key(r, K_PENDING, k, r->now);
        else if (w < 997)
            op_advance(r, r->now, rng_below(rng, 3) == 0 ? (size_t)rng_below(rng, 3) + 1 : 0);
        else
            op_close(r, r->now, rng_below(rng, 2) ? SLUICE_CLOSE_DRAIN : SLUICE_CLOSE_DISCARD);
    }
    run_finish(r, rng, rng_below(rng, 4) != 0);
}

/* ------------------------------------------------------------------ */
/* drivers                                                             */
/* ------------------------------------------------------------------ */

typedef struct {
    const char *name;
    sluice_policy_t pol;
} polcase_t;

static bool g_verbose;
static uint64_t g_runs, g_failures_injected, g_nomem_total, g_creation_failures, g_ops_total, g_invariant_checks;

typedef enum { W_SCRIPTED, W_RANDOM } wkind_t;

/* One run; returns the number of injected failures. */
static uint64_t one_run(const polcase_t *pc, wkind_t wk, bool big, uint64_t seed, fmode_t mode, uint64_t n,
                        bool arm_before_new, int nops) {
    snprintf(g_where, sizeof g_where, "policy %s, %s%s workload, seed %" PRIu64 ", fault %s %" PRIu64 "%s", pc->name,
             wk == W_SCRIPTED ? "scripted" : "random", big ? " 13k-key" : "", seed,
             mode == F_NTH      ? "nth"
             : mode == F_EVERY  ? "every"
             : mode == F_BUDGET ? "budget"
                                : "none",
             n, arm_before_new ? " (armed before creation)" : "");
    run_t *r = malloc(sizeof *r);
    if (!r) die("out of memory");
    bool cf = run_init(r, &pc->pol, !big, big, mode, n, arm_before_new);
    if (cf) {
        g_creation_failures++;
        if (mode != F_NTH) run_arm(r, mode, n); /* keep faulting after the clean retry */
    } else if (!arm_before_new) {
        run_arm(r, mode, n);
    }
    uint64_t rng = seed * UINT64_C(0x2545F4914F6CDD1D) + 17;
    if (wk == W_SCRIPTED)
        workload_scripted(r, &rng);
    else
        workload_random(r, &rng, nops);
    uint64_t f = r->fa.failures;
    if (g_verbose)
        fprintf(stderr,
                "  %s: %" PRIu64 " ops, %" PRIu64 " attempts, %" PRIu64 " injected, %" PRIu64 " ENOMEM, %" PRIu64
                " checks\n",
                g_where, r->ops, r->fa.attempts, f, r->nomem, r->checks_done);
    g_runs++;
    g_failures_injected += f;
    g_nomem_total += r->nomem;
    g_ops_total += r->ops;
    g_invariant_checks += r->checks_done;
    run_free(r);
    free(r);
    return f;
}

/* Fails the 1st, 2nd, ... allocation until a run completes without
 * reaching the fault; then every-Nth schedules. */
static void sweep(const polcase_t *pc, wkind_t wk, bool big, uint64_t seed, int nops) {
    uint64_t n;
    /* under a sanitizer the 13k-key workload tries every 4th N only */
    uint64_t step = big && SANITIZED ? 4 : 1;
    for (n = 1;; n += step) {
        if (one_run(pc, wk, big, seed, F_NTH, n, true, nops) == 0) break;
        CHECK(n < 100000, "");
    }
    if (g_verbose) fprintf(stderr, "%s: nth sweep done after %" PRIu64 " runs\n", g_where, n);
    static const uint64_t every[] = { 1, 2, 3, 5, 16 };
    size_t nevery = sizeof every / sizeof every[0];
    if (big && SANITIZED) nevery = 1;
    for (size_t i = 0; i < nevery; i++) {
        one_run(pc, wk, big, seed, F_EVERY, every[i], true, nops);
        one_run(pc, wk, big, seed, F_EVERY, every[i], false, nops);
    }
}

/* A memory budget: the limiter refuses new keys with SLUICE_ENOMEM once it
 * would exceed it, keeps serving the live ones, and never holds more. */
static void budget_test(const polcase_t *pc) {
    snprintf(g_where, sizeof g_where, "budget test, policy %s", pc->name);
    run_t *r = malloc(sizeof *r);
    if (!r) die("out of memory");
    keys_define(4000, true);
    run_init(r, &pc->pol, false, true, F_NONE, 0, false);
    uint64_t budget = fault_alloc_live_bytes(&r->fa) + 64 * 1024;
    fault_alloc_fail_over(&r->fa, budget);
    for (int i = 0; i < g_nkeys; i++) op_submit(r, i, r->now);
    CHECKF(r->nomem > 0, "a 64 KiB budget should refuse some of 4000 keys");
    CHECKF(r->fa.peak_bytes <= budget, "peak %" PRIu64 " over budget %" PRIu64, r->fa.peak_bytes, budget);
    checkpoint(r);
    uint64_t rng = 99;
    run_finish(r, &rng, true);
    if (g_verbose) fprintf(stderr, "  budget: %" PRIu64 " of %d keys refused\n", r->nomem, g_nkeys);
    g_nomem_total += r->nomem;
    run_free(r);
    free(r);
}

/* For configurations whose events are not looked at. */
static void ignore_event(void *user, const sluice_event_t *e) {
    (void)user;
    (void)e;
}

/* Misuse of the allocator hook itself. */
static void config_tests(void) {
    snprintf(g_where, sizeof g_where, "allocator configuration");
    sluice_config_t c;
    memset(&c, 0, sizeof c);
    c.policy = sluice_throttle(10 * (int64_t)MS, true, true, SLUICE_PICK_LATEST);
    c.on_event = ignore_event;
    sluice_allocator_t half = { NULL, NULL, NULL };
    fault_alloc_t fa;
    fault_alloc_init(&fa);
    half.alloc = fa.hook.alloc;
    half.ctx = &fa;
    c.allocator = &half;
    sluice_limiter_t *l = NULL;
    CHECK(sluice_limiter_new(&l, &c) == SLUICE_EINVAL && l == NULL, "");
    half.alloc = NULL;
    half.release = fa.hook.release;
    CHECK(sluice_limiter_new(&l, &c) == SLUICE_EINVAL && l == NULL, "");
    CHECK(fa.attempts == 0, "");
    /* the hook struct is copied: it may go away after creation */
    sluice_allocator_t tmp = fa.hook;
    c.allocator = &tmp;
    CHECK(sluice_limiter_new(&l, &c) == 0, "");
    memset(&tmp, 0, sizeof tmp);
    sluice_decision_t d;
    for (int i = 0; i < 100; i++) CHECK(sluice_limiter_submit(l, sluice_key_u64((uint64_t)i), 1, 0, &d) == 0, "");
    sluice_limiter_free(l);
    CHECK(fault_alloc_clean(&fa), "");
    fault_alloc_destroy(&fa);
}

int main(void) {
    g_verbose = getenv("SLUICE_FAULT_VERBOSE") && *getenv("SLUICE_FAULT_VERBOSE") == '1';
    int seeds = getenv("SLUICE_FAULT_SEEDS") ? atoi(getenv("SLUICE_FAULT_SEEDS")) : SANITIZED ? 1 : 3;
    if (seeds < 1) seeds = 1;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);

    const int64_t W = 10 * (int64_t)MS;
    g_window = (uint64_t)W;
    const polcase_t pols[] = {
        { "throttle(lead,trail,latest)", sluice_throttle(W, true, true, SLUICE_PICK_LATEST) },
        { "throttle(trail,first)", sluice_throttle(W, false, true, SLUICE_PICK_FIRST) },
        { "throttle(lead)", sluice_throttle(W, true, false, SLUICE_PICK_LATEST) },
        { "audit", sluice_audit(W) },
        { "debounce(trail)", sluice_debounce(W, false, true, -1) },
        { "debounce(lead,trail,maxWait)", sluice_debounce(W, true, true, 25 * (int64_t)MS) },
        { "rate(5/10ms,burst 3)", sluice_rate(5, W, 3) },
    };
    const int npol = (int)(sizeof pols / sizeof pols[0]);

    config_tests();

    /* small workloads with the reference model, every policy */
    for (int p = 0; p < npol; p++) {
        keys_define(60, true);
        sweep(&pols[p], W_SCRIPTED, false, 1, 0);
        for (int s = 0; s < seeds; s++) {
            keys_define(24, true);
            sweep(&pols[p], W_RANDOM, false, (uint64_t)(s + 1) * 7919, 250);
        }
    }
    /* 13k keys: the slab grows past 3 chunks, so going idle compacts it
     * and shrinks the index; lockstep with a clean twin */
    const int bigpols[] = { 5, 0, 6 };
    for (size_t i = 0; i < (SANITIZED ? 1 : sizeof bigpols / sizeof bigpols[0]); i++) {
        keys_define(MAXK, false);
        sweep(&pols[bigpols[i]], W_SCRIPTED, true, 3, 0);
    }
    for (int p = 0; p < npol; p += 3) budget_test(&pols[p]);

    clock_gettime(CLOCK_MONOTONIC, &t1);
    double secs = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
    printf("test_fault: ok: %" PRIu64 " runs, %" PRIu64 " operations, %" PRIu64
           " injected allocation failures, %" PRIu64 " submits refused with SLUICE_ENOMEM, %" PRIu64
           " creations failed cleanly, %" PRIu64 " sluice_limiter_check() calls, %" PRIu64 " assertions, %.2f s\n",
           g_runs, g_ops_total, g_failures_injected, g_nomem_total, g_creation_failures, g_invariant_checks, g_checks,
           secs);
    return 0;
}
