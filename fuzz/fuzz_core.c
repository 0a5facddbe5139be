/*
 * fuzz_core.c — libFuzzer harness for the core alone, under allocation
 * faults and re-entrant callbacks chosen by the input.
 *
 * The input picks a policy, a tick, a live-key cap, up to 12 keys (integer,
 * short and long byte keys, so key copies are allocated), an allocation
 * fault schedule (a 64-bit mask over the first 64 allocation attempts, and
 * optionally every Nth attempt after that), a sequence of operations
 * (submit / flush / cancel / pending / advance, also into an array / close / free / bad keys /
 * bad arguments), and a script of calls to make from inside event callbacks
 * (submit, cancel, flush, pending, advance, close, free — nested up to 4
 * deep).
 *
 * Findings (abort): an error code an operation does not document
 * (SLUICE_ENOMEM anywhere but from submit and creation; SLUICE_EFULL below
 * the cap or without one; anything but SLUICE_ECLOSED once closed or while
 * being freed); a token reported twice, reported after its submit failed,
 * never reported, or reported for another key; an event in the future;
 * sluice_limiter_check() failing (after every top-level operation and inside
 * callbacks); stats.memory_bytes differing from the bytes the allocator
 * holds; a release with the wrong size, a double or foreign release (the
 * allocator's block headers), a leak after free; and whatever ASan/UBSan
 * report (use after free from a callback's free, overflows).
 *
 * Self-contained: only the core is linked (no ctests code), so it builds
 * with the CMake fuzz target as it stands.
 *
 *   /opt/swift/usr/bin/clang -std=c11 -g -O1 -D_POSIX_C_SOURCE=200809L \
 *     -fsanitize=fuzzer,address,undefined -I Sources/CSluice/include -I Sources/CSluice \
 *     Sources/CSluice/limiter.c Sources/CSluice/table.c Sources/CSluice/wheel.c Sources/CSluice/siphash.c \
 *     Sources/CSluice/error.c fuzz/fuzz_core.c -o /tmp/fuzz_core
 *   /tmp/fuzz_core -max_total_time=60 fuzz/corpus/core
 */
#include <inttypes.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sluice.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void finding(const char *fmt, ...) {
    va_list ap;
    fprintf(stderr, "\nfuzz_core: FINDING: ");
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

/* ------------------------------------------------------------------ input */

typedef struct {
    const uint8_t *p;
    size_t n, i;
} rd_t;

static uint8_t rd8(rd_t *r) { return r->i < r->n ? r->p[r->i++] : 0; }
static uint64_t rd64(rd_t *r) {
    uint64_t x = 0;
    for (int k = 0; k < 8; k++) x = x << 8 | rd8(r);
    return x;
}

/* ------------------------------------------------------------------ allocator */

#define BLK_MAGIC UINT64_C(0x511CEA110CA7ED00)
#define BLK_DEAD UINT64_C(0xDEADDEADDEADDEAD)

typedef struct {
    uint64_t attempts, failures, live_bytes, live_blocks;
    uint64_t mask;  /* fail attempt i (0-based) when bit i is set, i < 64 */
    uint64_t every; /* then fail every Nth attempt (0: never) */
    bool armed;
} alloc_t;

static void *a_alloc(void *ctx, size_t size) {
    alloc_t *a = ctx;
    uint64_t i = a->attempts++;
    REQUIRE(size > 0, "allocation of 0 bytes");
    if (a->armed && ((i < 64 && (a->mask >> i) & 1) || (i >= 64 && a->every && i % a->every == 0))) {
        a->failures++;
        return NULL;
    }
    uint64_t *h = malloc(size + 16);
    if (!h) return NULL;
    h[0] = BLK_MAGIC;
    h[1] = size;
    memset(h + 2, 0xA5, size);
    a->live_bytes += size;
    a->live_blocks++;
    return h + 2;
}

static void a_release(void *ctx, void *p, size_t size) {
    alloc_t *a = ctx;
    if (!p) return;
    uint64_t *h = (uint64_t *)p - 2;
    REQUIRE(h[0] == BLK_MAGIC, "release of a block that is not live (double or foreign release)");
    REQUIRE(h[1] == size, "release of a %" PRIu64 "-byte block with size %zu", h[1], size);
    h[0] = BLK_DEAD;
    a->live_bytes -= size;
    a->live_blocks--;
    free(h);
}

/* ------------------------------------------------------------------ state */

#define MAXKEYS 12
#define MAXTOK 4096
#define SCRIPT 64

typedef struct {
    sluice_key_kind_t kind;
    uint64_t u64;
    size_t len;
    unsigned char b[80];
} keydef_t;

enum { T_NONE = 0, T_IN_FLIGHT, T_EARLY, T_HELD, T_DONE };

typedef struct {
    sluice_limiter_t *l;
    bool closed, dying, gone;
    int closing; /* inside close() or free(): calls may succeed or fail with SLUICE_ECLOSED */
    uint64_t cap;
    alloc_t al;
    int nkeys;
    keydef_t keys[MAXKEYS];
    uint8_t tok[MAXTOK];
    int tokkey[MAXTOK];
    uint64_t ntok;
    uint64_t now; /* latest time passed */
    uint8_t script[SCRIPT];
    size_t nscript, spos;
    int depth;
    uint64_t W;
    sluice_policy_t pol;
} ctx_t;

static sluice_key_t key_of(const ctx_t *c, int k) {
    const keydef_t *d = &c->keys[k];
    if (d->kind == SLUICE_KEY_U64) return sluice_key_u64(d->u64);
    return sluice_key_bytes(d->len ? d->b : NULL, d->len);
}

static int key_index(const ctx_t *c, sluice_key_t k) {
    for (int i = 0; i < c->nkeys; i++) {
        sluice_key_t o = key_of(c, i);
        if (o.kind != k.kind) continue;
        if (k.kind == SLUICE_KEY_U64 ? o.u64 == k.u64
                                     : (o.len == k.len && (k.len == 0 || memcmp(o.bytes, k.bytes, k.len) == 0)))
            return i;
    }
    return -1;
}

static void check(ctx_t *c) {
    if (c->gone) return;
    REQUIRE(sluice_limiter_check(c->l) == 0, "sluice_limiter_check failed");
    sluice_stats_t st;
    REQUIRE(sluice_limiter_stats(c->l, &st) == 0, "stats");
    REQUIRE(st.memory_bytes == c->al.live_bytes, "memory_bytes %" PRIu64 " but the allocator holds %" PRIu64,
            st.memory_bytes, c->al.live_bytes);
    REQUIRE(!c->cap || st.live_keys <= c->cap, "live keys %" PRIu64 " over the cap %" PRIu64, st.live_keys, c->cap);
}

static bool unusable(const ctx_t *c) { return c->closed || c->dying; }

/* `was`: whether the limiter was closed or dying when the call began (a
 * callback of the call itself may close or free it; the call still succeeds) */
static void expect_rc(ctx_t *c, const char *what, int rc, bool was, bool may_nomem, bool may_full) {
    if (c->closing && rc == SLUICE_ECLOSED) return;
    /* timers first: a callback of the call's own due timers closed or freed
     * the limiter, so the call itself finds it closed */
    if (rc == SLUICE_ECLOSED && unusable(c)) return;
    if (was) {
        REQUIRE(rc == SLUICE_ECLOSED, "%s on a closed or dying limiter returned %d", what, rc);
        return;
    }
    if (rc >= 0) return;
    if (rc == SLUICE_ENOMEM)
        REQUIRE(may_nomem && c->al.failures > 0, "%s returned SLUICE_ENOMEM", what);
    else if (rc == SLUICE_EFULL)
        REQUIRE(may_full && c->cap, "%s returned SLUICE_EFULL without a cap", what);
    else
        finding("%s returned %d (%s)", what, rc, sluice_strerror(rc));
}

static void run_op(ctx_t *c, uint8_t op, uint8_t arg, uint64_t t);

static void on_event(void *user, const sluice_event_t *e) {
    ctx_t *c = user;
    REQUIRE(!c->gone, "event after the limiter was freed");
    int k = key_index(c, e->key);
    REQUIRE(k >= 0, "event for an unknown key");
    REQUIRE(e->token >= 1 && e->token <= c->ntok, "event for unknown token %" PRIu64, e->token);
    uint8_t *s = &c->tok[e->token];
    REQUIRE(c->tokkey[e->token] == k, "token %" PRIu64 " reported for another key", e->token);
    if (*s == T_HELD)
        *s = T_DONE;
    else if (*s == T_IN_FLIGHT)
        *s = T_EARLY;
    else
        finding("token %" PRIu64 " reported in state %d (twice, or never taken)", e->token, *s);
    REQUIRE(e->at <= c->now, "event at %" PRIu64 " after the latest time %" PRIu64, e->at, c->now);
    REQUIRE(e->kind >= SLUICE_EVENT_EMIT && e->kind <= SLUICE_EVENT_DISCARD, "event kind %d", e->kind);
    /* the limiter is consistent whenever a callback runs */
    if (!c->dying) REQUIRE(sluice_limiter_check(c->l) == 0, "check inside a callback");
    /* re-entry from the script */
    if (c->depth < 4 && c->spos + 2 <= c->nscript) {
        uint8_t op = c->script[c->spos++], arg = c->script[c->spos++];
        if (op & 1) { /* odd: act */
            c->depth++;
            run_op(c, (uint8_t)(op >> 1), arg, e->at + (arg & 3));
            c->depth--;
        }
    }
}

/* An emission written by sluice_limiter_advance_into(), checked as on_event
 * checks an event: a token held for its key (an integer key's value is in
 * the emission; a byte key's is 0), emitted once, not in the future. */
static void emitted_into(ctx_t *c, const sluice_emission_t *m) {
    REQUIRE(m->token >= 1 && m->token <= c->ntok, "emission of unknown token %" PRIu64, m->token);
    int k = c->tokkey[m->token];
    const keydef_t *d = &c->keys[k];
    REQUIRE(m->key == (d->kind == SLUICE_KEY_U64 ? d->u64 : 0), "token %" PRIu64 " emitted with key %" PRIu64, m->token,
            m->key);
    /* (from a callback of the token's own submit: emitted before its decision returns, as on_event allows) */
    uint8_t *st = &c->tok[m->token];
    if (*st == T_HELD)
        *st = T_DONE;
    else if (*st == T_IN_FLIGHT)
        *st = T_EARLY;
    else
        finding("token %" PRIu64 " emitted in state %d (twice, or never taken)", m->token, *st);
    REQUIRE(m->at <= c->now, "emission at %" PRIu64 " after the latest time %" PRIu64, m->at, c->now);
}

static void do_submit(ctx_t *c, int k, uint64_t t, uint64_t cost) {
    if (c->ntok + 1 >= MAXTOK) return;
    uint64_t tok = ++c->ntok;
    c->tok[tok] = T_IN_FLIGHT;
    c->tokkey[tok] = k;
    sluice_decision_t d = { 0 };
    uint64_t f0 = c->al.failures;
    bool was = unusable(c);
    int rc = cost == 1 ? sluice_limiter_submit(c->l, key_of(c, k), tok, t, &d)
                       : sluice_limiter_submit_cost(c->l, key_of(c, k), tok, cost, t, &d);
    expect_rc(c, "submit", rc, was, c->al.failures != f0, true);
    if (rc == 0 && c->pol.kind == SLUICE_RATE) {
        /* a rate decision: remaining within the burst, full after now, a drop's retry later than now */
        uint64_t burst = c->pol.burst ? c->pol.burst : c->pol.limit;
        REQUIRE(d.remaining <= burst, "remaining %" PRIu64 " above the burst", d.remaining);
        REQUIRE(d.kind != SLUICE_DROPPED || d.at > t, "dropped with retry %" PRIu64 " not after %" PRIu64, d.at, t);
        REQUIRE(d.kind != SLUICE_EMITTED || d.full > t || d.full == UINT64_MAX, "admitted with full %" PRIu64, d.full);
        REQUIRE(cost <= burst || d.at == SLUICE_NEVER, "a cost above the burst was not 'never'");
    }
    if (rc == SLUICE_EFULL) {
        sluice_stats_t st;
        REQUIRE(sluice_limiter_stats(c->l, &st) == 0 && st.live_keys >= c->cap,
                "SLUICE_EFULL with %" PRIu64 " live keys, cap %" PRIu64, st.live_keys, c->cap);
    }
    if (rc != 0) {
        REQUIRE(c->tok[tok] == T_IN_FLIGHT, "token %" PRIu64 " reported although its submit failed (%d)", tok, rc);
        c->tok[tok] = T_DONE;
        return;
    }
    REQUIRE(d.kind >= SLUICE_EMITTED && d.kind <= SLUICE_DROPPED, "decision kind %d", d.kind);
    if (d.kind == SLUICE_SCHEDULED) {
        c->tok[tok] = c->tok[tok] == T_EARLY ? T_DONE : T_HELD;
    } else {
        REQUIRE(c->tok[tok] == T_IN_FLIGHT, "token %" PRIu64 ": decision %d and an event", tok, d.kind);
        c->tok[tok] = T_DONE;
    }
}

/* One operation (top level or from a callback). */
static bool g_verbose;

static void run_op(ctx_t *c, uint8_t op, uint8_t arg, uint64_t t) {
    if (c->gone) return;
    if (g_verbose)
        fprintf(stderr, "%*sop %d arg %d t %" PRIu64 " (closed %d dying %d closing %d)\n", 2 * c->depth, "", op % 12,
                arg, t, c->closed, c->dying, c->closing);
    if (t > c->now) c->now = t;
    int k = arg % c->nkeys;
    bool was = unusable(c);
    switch (op % 12) {
    case 0:
    case 1:
    case 2: do_submit(c, k, t, 1); break;
    case 3:
        if (c->pol.kind != SLUICE_RATE) {
            do_submit(c, k, t, 1);
        } else if (arg & 0x80) {
            /* a quota peek: documented results, nothing changes */
            sluice_quota_t q;
            sluice_stats_t a, b;
            REQUIRE(sluice_limiter_stats(c->l, &a) == 0, "stats");
            int rc = sluice_limiter_quota(c->l, key_of(c, k), 1 + (arg & 7), t, &q);
            expect_rc(c, "quota", rc, was, false, false);
            REQUIRE(sluice_limiter_stats(c->l, &b) == 0, "stats");
            REQUIRE(a.live_keys == b.live_keys && a.armed_timers == b.armed_timers && a.memory_bytes == b.memory_bytes,
                    "a quota peek changed the limiter");
            if (rc == 0)
                REQUIRE(q.retry >= t || q.retry == SLUICE_NEVER, "quota retry %" PRIu64 " before now", q.retry);
        } else {
            uint64_t burst = c->pol.burst ? c->pol.burst : c->pol.limit;
            do_submit(c, k, t, (arg & 0x40) ? burst + (arg & 1) : 1 + (arg & 7));
        }
        break;
    case 4: expect_rc(c, "flush", sluice_limiter_flush(c->l, key_of(c, k), t), was, false, false); break;
    case 5: expect_rc(c, "cancel", sluice_limiter_cancel(c->l, key_of(c, k), t), was, false, false); break;
    case 6: expect_rc(c, "pending", sluice_limiter_pending(c->l, key_of(c, k), t), was, false, false); break;
    case 7: {
        size_t bound = arg & 0x10 ? (size_t)(arg >> 5) + 1 : 0;
        if (arg & 0x08) { /* into an array of 1 to 8: no callback during the call */
            sluice_emission_t out[8];
            size_t cap = (size_t)(arg & 7) + 1, count = 99;
            int64_t n = sluice_limiter_advance_into(c->l, t, bound, out, cap, &count);
            expect_rc(c, "advance_into", n < 0 ? (int)n : 0, was, false, false);
            REQUIRE(n < 0 ? count == 0 : count <= cap && count <= (uint64_t)n,
                    "advance_into: %zu emissions for %" PRId64 " timers, capacity %zu", count, n, cap);
            for (size_t i = 0; i < count; i++) emitted_into(c, &out[i]);
        } else {
            int64_t n = sluice_limiter_advance(c->l, t, bound);
            expect_rc(c, "advance", n < 0 ? (int)n : 0, was, false, false);
        }
        break;
    }
    case 8: {
        c->closing++;
        int rc = sluice_limiter_close(c->l, t, arg & 1 ? SLUICE_CLOSE_DISCARD : SLUICE_CLOSE_DRAIN);
        c->closing--;
        if (was)
            REQUIRE(rc == SLUICE_ECLOSED, "close of a closed limiter returned %d", rc);
        else
            REQUIRE(rc == 0 || (c->closing && rc == SLUICE_ECLOSED) || c->dying, "close returned %d", rc);
        c->closed = true;
        break;
    }
    case 9:
        if (arg < 0x20) {
            if (c->depth == 0) {
                c->dying = true;
                c->closing++;
                sluice_limiter_free(c->l);
                c->closing--;
                c->gone = true;
            } else {
                sluice_limiter_free(c->l); /* deferred to the outermost return */
                c->dying = true;
            }
        }
        break;
    case 10: { /* bad keys and arguments: documented errors, nothing taken */
        static unsigned char big[SLUICE_KEY_MAX + 1];
        sluice_key_t bad = arg & 1 ? sluice_key_bytes(big, sizeof big) : sluice_key_bytes(NULL, 3);
        int want = arg & 1 ? SLUICE_EKEYLEN : SLUICE_EINVAL;
        int rc = sluice_limiter_submit(c->l, bad, 0, t, NULL);
        if (!unusable(c) && !(c->closing && rc == SLUICE_ECLOSED))
            REQUIRE(rc == want, "bad key: %d, expected %d", rc, want);
        rc = sluice_limiter_close(c->l, t, (sluice_close_mode_t)7);
        REQUIRE(rc == SLUICE_EINVAL || rc == SLUICE_ECLOSED, "close with a bad mode: %d", rc);
        break;
    }
    default: (void)sluice_limiter_next_deadline(c->l); break;
    }
}

/* ------------------------------------------------------------------ one input */

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 8) return 0;
    rd_t r = { data, size, 0 };
    ctx_t *c = calloc(1, sizeof *c);
    if (!c) abort();
    g_verbose = getenv("FUZZ_CORE_VERBOSE") != NULL;

    /* policy */
    uint8_t b = rd8(&r), f = rd8(&r);
    static const int64_t durs[] = { 0, 1, 7, 100, 1000, 1000000, 1000000000, INT64_C(1000000000000000000) };
    int64_t W = durs[rd8(&r) % 8];
    sluice_policy_t p;
    switch (b % 4) {
    case 0: p = sluice_throttle(W, (f & 3) != 2, (f & 3) != 1, f & 4 ? SLUICE_PICK_FIRST : SLUICE_PICK_LATEST); break;
    case 1: p = sluice_audit(W); break;
    case 2: p = sluice_debounce(W, (f & 3) != 2, (f & 3) != 1, f & 8 ? W * 2 > W ? W * 2 : W : -1); break;
    default: p = sluice_rate(1 + (f & 7), W ? W : 1, f >> 5); break;
    }
    c->W = W > 0 ? (uint64_t)W : 1;
    c->pol = p;
    static const uint64_t ticks[] = { 0, 1, 7, 1000, 1000000, 1000000000 };
    uint64_t tick = ticks[rd8(&r) % 6];
    uint8_t capb = rd8(&r);
    c->cap = capb < 128 ? 0 : capb % 5 + 1;

    /* keys */
    c->nkeys = 1 + rd8(&r) % MAXKEYS;
    for (int k = 0; k < c->nkeys; k++) {
        keydef_t *d = &c->keys[k];
        uint8_t kb = rd8(&r);
        if (kb % 3 == 0) {
            d->kind = SLUICE_KEY_U64;
            d->u64 = (uint64_t)k * 1000003u + (kb >> 2);
        } else {
            d->kind = SLUICE_KEY_BYTES;
            d->len = kb % 3 == 1 ? (size_t)(kb >> 4) % 9 : 9 + (size_t)(kb >> 2) % 60;
            for (size_t i = 0; i < d->len; i++) d->b[i] = (unsigned char)(k * 7 + i);
            if (d->len) d->b[0] = (unsigned char)k; /* distinct */
            if (d->len == 0 && k > 0) {
                d->kind = SLUICE_KEY_U64;
                d->u64 = UINT64_C(0xE0000000) + (uint64_t)k;
            }
        }
    }

    /* faults */
    c->al.mask = rd64(&r);
    uint8_t ev = rd8(&r);
    c->al.every = ev < 128 ? 0 : 2 + ev % 16;
    c->al.armed = true;
    sluice_allocator_t hook = { a_alloc, a_release, &c->al };

    /* callback script */
    c->nscript = rd8(&r) % (SCRIPT + 1);
    for (size_t i = 0; i < c->nscript; i++) c->script[i] = rd8(&r);

    sluice_config_t cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.policy = p;
    cfg.tick_ns = tick;
    cfg.max_keys = c->cap;
    cfg.on_event = on_event;
    cfg.user = c;
    cfg.allocator = &hook;
    cfg.start_ns = rd8(&r);
    c->now = cfg.start_ns;
    sluice_limiter_t *sentinel = (sluice_limiter_t *)(uintptr_t)0x10;
    c->l = sentinel;
    int rc = sluice_limiter_new(&c->l, &cfg);
    if (rc != 0) {
        REQUIRE(rc == SLUICE_ENOMEM || rc == SLUICE_EINVAL || rc == SLUICE_ERANGE, "new returned %d", rc);
        REQUIRE(rc != SLUICE_ENOMEM || c->al.failures > 0, "ENOMEM without a failed allocation");
        REQUIRE(c->l == sentinel, "new wrote *out on failure");
        REQUIRE(c->al.live_blocks == 0, "a failed new leaked %" PRIu64 " blocks", c->al.live_blocks);
        free(c);
        return 0;
    }

    /* operations */
    for (int i = 0; i < 400 && r.i < r.n && !c->gone; i++) {
        uint8_t op = rd8(&r), arg = rd8(&r), dt = rd8(&r);
        uint64_t t = c->now;
        switch (dt % 6) {
        case 0: break;
        case 1: t += dt >> 3; break;
        case 2: t += c->W; break;
        case 3: t += c->W / 2 + (dt >> 3); break;
        case 4: t = t > (uint64_t)(dt >> 3) ? t - (dt >> 3) : 0; break; /* back */
        default: t += (uint64_t)(dt >> 3) * (tick ? tick : 1000000); break;
        }
        if (dt == 0xFF) c->al.armed = false; /* allocation works again */
        run_op(c, op, arg, t);
        if (c->dying) c->gone = true; /* the outermost call returned: freed */
        check(c);
    }
    if (!c->gone) {
        if (!unusable(c) && (rd8(&r) & 1)) {
            REQUIRE(sluice_limiter_close(c->l, c->now, SLUICE_CLOSE_DRAIN) == 0, "final close");
            c->closed = true;
            check(c);
        }
        c->dying = true;
        sluice_limiter_free(c->l);
        c->gone = true;
    }
    for (uint64_t t = 1; t <= c->ntok; t++)
        REQUIRE(c->tok[t] == T_DONE, "token %" PRIu64 " (state %d) never reported", t, c->tok[t]);
    REQUIRE(c->al.live_blocks == 0 && c->al.live_bytes == 0, "leak after free: %" PRIu64 " blocks, %" PRIu64 " bytes",
            c->al.live_blocks, c->al.live_bytes);
    free(c);
    return 0;
}
