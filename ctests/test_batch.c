/*
 * test_batch.c — sluice_limiter_submit_many() gives exactly what the same
 * calls made one at a time give.
 *
 * 1. Vectors: every trace of Tests/Vectors (but the error-* ones) is run by
 *    the trace library one call at a time and with batch_size 16, 3 and 2
 *    (consecutive calls at one time handed to sluice_limiter_submit_many()),
 *    with the core's invariants checked after every step; the outputs must be
 *    byte for byte the same.
 * 2. Randomized differential: two limiters with the same configuration and
 *    hash seed run the same random program, one with single
 *    sluice_limiter_submit_cost() calls, the other with batches of 1..80
 *    calls (several groups of the core's batch pipeline) at the same time.
 *    Every policy with random options, integer, empty, short, long (heap)
 *    and binary keys with the same key many times in a batch, costs (rate:
 *    1..burst + 1; 0 and, for other policies, 2 are refused), invalid keys,
 *    a key cap (SLUICE_EFULL), times earlier than the limiter has seen,
 *    advances, flushes and cancels between batches, and callbacks that
 *    re-enter the limiter with a follow-up call. Some programs "churn": a
 *    pool of 400 integer keys (new keys grow the index in mid-batch), and
 *    callbacks of superseded tokens cancel another key (its entry is freed
 *    and taken by the next new key, so the batch's entry hints go stale).
 *    The log of each side
 *    (every event, and each call's result and decision at the point its call
 *    returned, read from the batch's results as the header promises) must be
 *    identical; sluice_limiter_check() after every step.
 * 3. Edge cases: n = 0, NULL decisions/results, NULL limiter or calls, a
 *    closed limiter, a callback that closes or frees the limiter mid-batch.
 *
 * Env: SLUICE_BATCH_ITERS (random programs, default 3000).
 */
#define TEST_NAME "test_batch"
#include <dirent.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sluice.h"
#include "sluice_trace.h"
#include "support/check.h"

#ifndef SLUICE_SOURCE_DIR
#define SLUICE_SOURCE_DIR "."
#endif

/* ------------------------------------------------------------------ 1. vectors */

struct outbuf {
    char *p;
    size_t n, cap;
};

static void collect(void *user, const sluice_trace_output_t *line) {
    struct outbuf *b = user;
    if (b->n + line->text_len + 1 > b->cap) {
        size_t cap = (b->cap ? b->cap * 2 : 4096) + line->text_len + 1;
        char *p = realloc(b->p, cap);
        CHECK(p != NULL, "out of memory");
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->n, line->text, line->text_len);
    b->n += line->text_len;
    b->p[b->n++] = '\n';
}

static char *read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    CHECK(f != NULL, "cannot open %s", path);
    fseek(f, 0, SEEK_END);
    long sz = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)sz + 1);
    CHECK(buf != NULL, "out of memory");
    CHECK(fread(buf, 1, (size_t)sz, f) == (size_t)sz, "cannot read %s", path);
    fclose(f);
    *len = (size_t)sz;
    return buf;
}

static int run_trace(const sluice_trace_t *t, uint32_t batch, struct outbuf *out, char *msg, size_t msglen) {
    sluice_trace_run_options_t opt;
    sluice_trace_run_result_t res;
    memset(&opt, 0, sizeof opt);
    opt.on_output = collect;
    opt.user = out;
    opt.check_invariants = true;
    opt.batch_size = batch;
    out->n = 0;
    int rc = sluice_trace_run(t, &opt, &res);
    snprintf(msg, msglen, "%s", res.message);
    return rc;
}

static void test_vectors(void) {
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/Tests/Vectors", SLUICE_SOURCE_DIR);
    DIR *d = opendir(dir);
    CHECK(d != NULL, "cannot open %s", dir);
    struct dirent *de;
    int count = 0;
    static const uint32_t sizes[] = { 16, 3, 2 };
    while ((de = readdir(d)) != NULL) {
        size_t nl = strlen(de->d_name);
        if (nl < 7 || strcmp(de->d_name + nl - 6, ".trace") != 0 || strncmp(de->d_name, "error-", 6) == 0) continue;
        char path[8192];
        snprintf(path, sizeof path, "%s/%s", dir, de->d_name);
        size_t len;
        char *text = read_file(path, &len);
        sluice_trace_t *t = NULL;
        sluice_trace_error_t err;
        CHECK(sluice_trace_parse(text, len, &t, &err) == SLUICE_OK, "%s: %s", path, err.message);
        struct outbuf a = { 0 }, b = { 0 };
        char ma[SLUICE_TRACE_MESSAGE_MAX], mb[SLUICE_TRACE_MESSAGE_MAX];
        int ra = run_trace(t, 0, &a, ma, sizeof ma);
        for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
            int rb = run_trace(t, sizes[s], &b, mb, sizeof mb);
            CHECK(ra == rb, "%s: status %d unbatched, %d with batch %u (%s)", path, ra, rb, sizes[s], mb);
            CHECK(a.n == b.n && memcmp(a.p, b.p, a.n) == 0,
                  "%s: output with batch %u differs:\n--- unbatched\n%.*s--- batched\n%.*s", path, sizes[s], (int)a.n,
                  a.p, (int)b.n, b.p);
        }
        free(a.p);
        free(b.p);
        sluice_trace_free(t);
        free(text);
        count++;
    }
    closedir(d);
    CHECK(count >= 50, "only %d vectors found in %s", count, dir);
    printf("vectors: %d traces give the same output with batches of 16, 3 and 2\n", count);
}

/* The command line: `sluice-trace --batch 16 FILE` prints what
 * `sluice-trace FILE` prints (when the test runs under ctest, which names the
 * tool in SLUICE_TRACE). */
static size_t run_tool(const char *tool, const char *args, const char *path, char *out, size_t cap, int *status) {
    char cmd[16384];
    snprintf(cmd, sizeof cmd, "'%s' %s '%s' 2>&1", tool, args, path);
    FILE *p = popen(cmd, "r");
    CHECK(p != NULL, "cannot run %s", cmd);
    size_t n = fread(out, 1, cap, p);
    CHECK(n < cap, "output of %s too long", cmd);
    *status = pclose(p);
    return n;
}

static void test_tool(void) {
    const char *tool = getenv("SLUICE_TRACE");
    if (!tool || !*tool) {
        printf("tool: SLUICE_TRACE not set, command line not checked\n");
        return;
    }
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/Tests/Vectors", SLUICE_SOURCE_DIR);
    DIR *d = opendir(dir);
    CHECK(d != NULL, "cannot open %s", dir);
    static char a[1 << 20], b[1 << 20];
    struct dirent *de;
    int count = 0;
    while ((de = readdir(d)) != NULL) {
        size_t nl = strlen(de->d_name);
        if (nl < 7 || strcmp(de->d_name + nl - 6, ".trace") != 0) continue;
        char path[8192];
        snprintf(path, sizeof path, "%s/%s", dir, de->d_name);
        int sa, sb;
        size_t na = run_tool(tool, "", path, a, sizeof a, &sa);
        size_t nb = run_tool(tool, "--batch 16", path, b, sizeof b, &sb);
        CHECK(sa == sb && na == nb && memcmp(a, b, na) == 0,
              "%s: sluice-trace --batch 16 differs (status %d vs %d):\n%.*s---\n%.*s", path, sa, sb, (int)na, a,
              (int)nb, b);
        count++;
    }
    closedir(d);
    int st;
    size_t n = run_tool(tool, "--batch 0", "-", a, sizeof a, &st);
    CHECK(st != 0 && n > 0, "--batch 0 accepted");
    printf("tool: sluice-trace --batch 16 prints the same as without it for %d traces (errors included)\n", count);
}

/* ------------------------------------------------------------------ 2. differential */

static uint64_t rng_state;
static uint64_t rnd(void) {
    uint64_t z = (rng_state += UINT64_C(0x9e3779b97f4a7c15));
    z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
    z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
    return z ^ (z >> 31);
}
static uint64_t below(uint64_t n) { return n ? rnd() % n : 0; }

enum rec_type { REC_EVENT = 1, REC_CALL = 2 };

struct rec {
    int type;
    int rc;
    int kind;
    uint64_t token, at, remaining, full, successor;
    bool has_successor;
    uint64_t keysum; /* a digest of the key */
};

#define MAX_BATCH 80
#define FOLLOW_BASE UINT64_C(1000000000)

struct side {
    sluice_limiter_t *l;
    struct rec *log;
    size_t n, cap;
    bool batched;
    /* the batch being made */
    const sluice_call_t *calls;
    sluice_decision_t decs[MAX_BATCH];
    int rcs[MAX_BATCH];
    size_t bn, bdone;
    bool follow; /* callbacks re-enter with a follow-up call */
    bool churn;  /* callbacks of superseded tokens cancel another key */
    bool in_churn;
    uint64_t now;
};

/* churn: the pool of integer keys */
#define CHURN_BASE 5000
#define CHURN_KEYS 400

static uint64_t key_digest(sluice_key_t k) {
    if (k.kind == SLUICE_KEY_U64) return k.u64 * 31 + 7;
    uint64_t h = 1469598103934665603ull ^ k.len;
    for (size_t i = 0; i < k.len; i++) h = (h ^ ((const unsigned char *)k.bytes)[i]) * 1099511628211ull;
    return h;
}

static void push(struct side *s, struct rec r) {
    if (s->n == s->cap) {
        s->cap = s->cap ? s->cap * 2 : 1024;
        s->log = realloc(s->log, s->cap * sizeof *s->log);
        CHECK(s->log != NULL, "out of memory");
    }
    s->log[s->n++] = r;
}

static void push_call(struct side *s, uint64_t token, int rc, const sluice_decision_t *d) {
    struct rec r;
    memset(&r, 0, sizeof r);
    r.type = REC_CALL;
    r.rc = rc;
    r.token = token;
    r.kind = (int)d->kind;
    r.at = d->at;
    r.remaining = d->remaining;
    r.full = d->full;
    push(s, r);
}

#define RUNNING 1

static void drain_batch(struct side *s) {
    while (s->bdone < s->bn && s->rcs[s->bdone] != RUNNING) {
        size_t j = s->bdone++;
        push_call(s, s->calls[j].token, s->rcs[j], &s->decs[j]);
    }
}

static void on_event(void *user, const sluice_event_t *ev) {
    struct side *s = user;
    if (s->batched) drain_batch(s);
    struct rec r;
    memset(&r, 0, sizeof r);
    r.type = REC_EVENT;
    r.kind = (int)ev->kind;
    r.token = ev->token;
    r.at = ev->at;
    r.has_successor = ev->has_successor;
    r.successor = ev->successor;
    r.keysum = key_digest(ev->key);
    push(s, r);
    /* a follow-up on the same key for some emitted tokens (one level deep) */
    if (s->follow && ev->kind == SLUICE_EVENT_EMIT && ev->token < FOLLOW_BASE && ev->token % 3 == 0) {
        sluice_decision_t d;
        memset(&d, 0, sizeof d);
        uint64_t tok = FOLLOW_BASE + ev->token;
        int rc = sluice_limiter_submit(s->l, ev->key, tok, s->now, &d);
        push_call(s, tok, rc, &d);
    }
    if (s->churn && !s->in_churn && ev->kind == SLUICE_EVENT_DROP && ev->has_successor) {
        s->in_churn = true; /* the cancel's own event does not cancel again */
        sluice_key_t victim = sluice_key_u64(CHURN_BASE + (ev->token * 7 + ev->successor) % CHURN_KEYS);
        struct rec r;
        memset(&r, 0, sizeof r);
        r.type = REC_CALL;
        r.rc = sluice_limiter_cancel(s->l, victim, s->now);
        r.token = UINT64_MAX;
        push(s, r);
        s->in_churn = false;
    }
}

static unsigned char longkey[40];
static const unsigned char bin[3] = { 0, 1, 0 };

static bool g_churn;

static sluice_key_t pick_key(void) {
    if (g_churn && below(4) != 0) return sluice_key_u64(CHURN_BASE + below(CHURN_KEYS));
    switch (below(9)) {
    case 0: return sluice_key_u64(1);
    case 1: return sluice_key_u64(2);
    case 2: return sluice_key_u64(below(4) + 100);
    case 3: return sluice_key_bytes("a", 1);
    case 4: return sluice_key_bytes("", 0);
    case 5: return sluice_key_bytes(longkey, 20);
    case 6: return sluice_key_bytes(bin, 3);
    case 7: return sluice_key_bytes("key-b", 5);
    default:
        if (below(6) == 0) return sluice_key_bytes(longkey, SLUICE_KEY_MAX + 1); /* EKEYLEN */
        if (below(6) == 0) {
            sluice_key_t bad = sluice_key_u64(0);
            bad.kind = (sluice_key_kind_t)9; /* EINVAL */
            return bad;
        }
        return sluice_key_bytes(longkey, 8 + below(30));
    }
}

static sluice_policy_t pick_policy(uint64_t *unit) {
    int64_t ms = 1000000;
    switch (below(4)) {
    case 0: {
        bool lead = below(2), trail = below(2);
        if (!lead && !trail) trail = true;
        *unit = (uint64_t)((int64_t)(1 + below(5)) * 10 * ms);
        return sluice_throttle((int64_t)*unit, lead, trail, below(2) ? SLUICE_PICK_FIRST : SLUICE_PICK_LATEST);
    }
    case 1: *unit = (1 + below(5)) * 10 * (uint64_t)ms; return sluice_audit((int64_t)*unit);
    case 2: {
        bool lead = below(2), trail = below(3) != 0;
        if (!lead && !trail) trail = true;
        *unit = (1 + below(5)) * 10 * (uint64_t)ms;
        int64_t mw = below(2) ? (int64_t)*unit * (int64_t)(1 + below(3)) : -1;
        return sluice_debounce((int64_t)*unit, lead, trail, mw);
    }
    default: {
        uint64_t limit = 1 + below(5);
        *unit = (1 + below(5)) * 10 * (uint64_t)ms;
        return sluice_rate(limit, (int64_t)*unit, below(2) ? 0 : 1 + below(8));
    }
    }
}

static void compare(const struct side *a, const struct side *b, uint64_t seed, const char *where) {
    size_t n = a->n < b->n ? a->n : b->n;
    for (size_t i = 0; i < n; i++) {
        const struct rec *x = &a->log[i], *y = &b->log[i];
        CHECK(x->type == y->type && x->rc == y->rc && x->kind == y->kind && x->token == y->token && x->at == y->at &&
                  x->remaining == y->remaining && x->full == y->full && x->has_successor == y->has_successor &&
                  x->successor == y->successor && x->keysum == y->keysum,
              "seed %" PRIu64 " %s: record %zu differs: single %s token %" PRIu64 " rc %d kind %d at %" PRIu64
              " rem %" PRIu64 " | batch %s token %" PRIu64 " rc %d kind %d at %" PRIu64 " rem %" PRIu64,
              seed, where, i, x->type == REC_CALL ? "call" : "event", x->token, x->rc, x->kind, x->at, x->remaining,
              y->type == REC_CALL ? "call" : "event", y->token, y->rc, y->kind, y->at, y->remaining);
    }
    CHECK(a->n == b->n, "seed %" PRIu64 " %s: %zu records with single calls, %zu with batches", seed, where, a->n,
          b->n);
}

static void one_program(uint64_t seed) {
    rng_state = seed * UINT64_C(0x2545F4914F6CDD1D) + 1;
    uint64_t unit = 0;
    sluice_config_t cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.policy = pick_policy(&unit);
    cfg.on_event = on_event;
    cfg.fixed_seed = true;
    cfg.seed[0] = rnd();
    cfg.seed[1] = rnd();
    g_churn = below(3) == 0;
    cfg.max_keys = below(3) == 0 ? (g_churn ? 50 + below(300) : 2 + below(4)) : 0;
    cfg.start_ns = 0;
    bool rate = cfg.policy.kind == SLUICE_RATE;
    uint64_t burst = rate ? (cfg.policy.burst ? cfg.policy.burst : cfg.policy.limit) : 1;

    struct side a, b;
    memset(&a, 0, sizeof a);
    memset(&b, 0, sizeof b);
    a.follow = b.follow = below(3) == 0;
    a.churn = b.churn = g_churn;
    b.batched = true;
    cfg.user = &a;
    CHECK(sluice_limiter_new(&a.l, &cfg) == 0, "new");
    cfg.user = &b;
    CHECK(sluice_limiter_new(&b.l, &cfg) == 0, "new");

    uint64_t t = 0;
    sluice_call_t calls[MAX_BATCH];
    uint64_t token = 0;
    int steps = 20 + (int)below(60) + (g_churn ? 60 : 0);
    for (int step = 0; step < steps; step++) {
        uint64_t r = below(10);
        if (r < 5)
            t += 0;
        else if (r < 8)
            t += below(unit);
        else
            t += below(3 * unit) + (below(4) == 0 ? below(1000) : 0); /* sometimes off the ms grid */
        uint64_t op = below(10);
        if (op < 7) {
            size_t n = below(4) == 0 ? below(MAX_BATCH + 1) : 1 + below(12);
            for (size_t i = 0; i < n; i++) {
                calls[i].key = pick_key();
                calls[i].token = token++;
                if (rate)
                    calls[i].cost = below(10) == 0 ? 0 : 1 + below(burst + 1);
                else
                    calls[i].cost = below(12) == 0 ? below(3) : 1;
            }
            uint64_t when = (t > 5 && below(8) == 0) ? t - 5 : t; /* earlier than seen: counts as t */
            a.now = b.now = t;
            int first_a = 0;
            for (size_t i = 0; i < n; i++) {
                sluice_decision_t d;
                memset(&d, 0, sizeof d);
                int rc = sluice_limiter_submit_cost(a.l, calls[i].key, calls[i].token, calls[i].cost, when, &d);
                push_call(&a, calls[i].token, rc, &d);
                if (rc && !first_a) first_a = rc;
            }
            memset(b.decs, 0, sizeof b.decs);
            for (size_t i = 0; i < n; i++) b.rcs[i] = RUNNING;
            b.calls = calls;
            b.bn = n;
            b.bdone = 0;
            int first_b = sluice_limiter_submit_many(b.l, calls, n, when, b.decs, b.rcs);
            drain_batch(&b);
            CHECK(b.bdone == n, "seed %" PRIu64 ": batch left %zu results unwritten", seed, n - b.bdone);
            b.batched = false;
            b.bn = 0;
            b.batched = true;
            CHECK(first_a == first_b, "seed %" PRIu64 ": batch returned %d, first single error %d", seed, first_b,
                  first_a);
        } else {
            sluice_key_t k = pick_key();
            a.now = b.now = t;
            b.bn = 0;
            if (op == 7) {
                CHECK(sluice_limiter_advance(a.l, t, 0) == sluice_limiter_advance(b.l, t, 0), "advance");
            } else if (op == 8) {
                CHECK(sluice_limiter_flush(a.l, k, t) == sluice_limiter_flush(b.l, k, t), "flush");
            } else {
                CHECK(sluice_limiter_cancel(a.l, k, t) == sluice_limiter_cancel(b.l, k, t), "cancel");
            }
        }
        CHECK(sluice_limiter_check(a.l) == 0 && sluice_limiter_check(b.l) == 0, "seed %" PRIu64 ": check", seed);
        compare(&a, &b, seed, "after a step");
    }
    b.bn = 0;
    a.now = b.now = t + 100 * unit;
    CHECK(sluice_limiter_close(a.l, t + 100 * unit, SLUICE_CLOSE_DRAIN) == 0, "close");
    CHECK(sluice_limiter_close(b.l, t + 100 * unit, SLUICE_CLOSE_DRAIN) == 0, "close");
    compare(&a, &b, seed, "after close");
    sluice_limiter_free(a.l);
    sluice_limiter_free(b.l);
    free(a.log);
    free(b.log);
}

/* ------------------------------------------------------------------ 3. edges */

struct edge {
    sluice_limiter_t *l;
    int mode; /* 1: close on the first event; 2: free on the first event */
    int events;
};

static void edge_event(void *user, const sluice_event_t *ev) {
    (void)ev;
    struct edge *e = user;
    e->events++;
    if (e->events == 1 && e->mode == 1) CHECK(sluice_limiter_close(e->l, 0, SLUICE_CLOSE_DISCARD) == 0, "close");
    if (e->events == 1 && e->mode == 2) sluice_limiter_free(e->l);
}

static void test_edges(void) {
    sluice_config_t cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.policy = sluice_debounce(1000000, false, true, -1);
    struct edge e = { 0 };
    cfg.on_event = edge_event;
    cfg.user = &e;
    sluice_call_t calls[4] = { { sluice_key_u64(1), 1, 1 },
                               { sluice_key_u64(1), 2, 1 },
                               { sluice_key_u64(2), 3, 1 },
                               { sluice_key_u64(3), 4, 1 } };
    int rcs[4];
    sluice_decision_t d[4];

    CHECK(sluice_limiter_submit_many(NULL, calls, 4, 0, d, rcs) == SLUICE_EINVAL, "NULL limiter");
    CHECK(sluice_limiter_new(&e.l, &cfg) == 0, "new");
    CHECK(sluice_limiter_submit_many(e.l, NULL, 1, 0, d, rcs) == SLUICE_EINVAL, "NULL calls");
    CHECK(sluice_limiter_submit_many(e.l, NULL, 0, 0, NULL, NULL) == 0, "empty batch");
    CHECK(sluice_limiter_submit_many(e.l, calls, 1, 0, NULL, NULL) == 0, "no outputs");
    /* mode 1: the second call supersedes token 1 (a DROP event), whose
     * callback closes the limiter: call 2 itself completes (close is
     * deferred to nothing: it is a transition of another call), later calls
     * get ECLOSED exactly as single calls after a close would. */
    e.mode = 1;
    for (int i = 0; i < 4; i++) rcs[i] = RUNNING;
    int rc = sluice_limiter_submit_many(e.l, calls + 1, 3, 0, d, rcs);
    CHECK(rc == SLUICE_ECLOSED, "a batch after a close from a callback: %d", rc);
    CHECK(rcs[1] == SLUICE_ECLOSED && rcs[2] == SLUICE_ECLOSED, "later calls closed: %d %d", rcs[1], rcs[2]);
    CHECK(sluice_limiter_submit_many(e.l, calls, 2, 0, d, rcs) == SLUICE_ECLOSED, "closed limiter");
    CHECK(rcs[0] == SLUICE_ECLOSED && rcs[1] == SLUICE_ECLOSED, "closed limiter results");
    sluice_limiter_free(e.l);

    /* mode 2: a free from a callback is carried out when the batch returns */
    memset(&e, 0, sizeof e);
    e.mode = 2;
    CHECK(sluice_limiter_new(&e.l, &cfg) == 0, "new");
    CHECK(sluice_limiter_submit(e.l, sluice_key_u64(1), 1, 0, NULL) == 0, "submit");
    rc = sluice_limiter_submit_many(e.l, calls + 1, 3, 0, d, rcs);
    CHECK(rc == SLUICE_ECLOSED && rcs[0] == 0 && rcs[1] == SLUICE_ECLOSED && rcs[2] == SLUICE_ECLOSED,
          "free from a callback mid-batch: %d %d %d %d", rc, rcs[0], rcs[1], rcs[2]);
    printf("edges: ok\n");
}

int main(void) {
    for (size_t i = 0; i < sizeof longkey; i++) longkey[i] = (unsigned char)('a' + i % 26);
    test_edges();
    test_vectors();
    test_tool();
    const char *it = getenv("SLUICE_BATCH_ITERS");
    uint64_t iters = it ? strtoull(it, NULL, 10) : 3000;
    if (UNDER_ASAN && !it) iters = 800;
    for (uint64_t s = 1; s <= iters; s++) one_program(s);
    printf("differential: %" PRIu64 " random programs, batches equal single calls\n", iters);
    return 0;
}
