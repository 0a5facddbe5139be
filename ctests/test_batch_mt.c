/*
 * test_batch_mt.c — sluice_mt_submit_many() on the real loop gives, key by
 * key, what the same calls made one at a time with
 * sluice_mt_submit_with_options() give.
 *
 * Two limiters of the same configuration (reporting every token, so each
 * key's events are its whole history) on one loop: A gets random calls one
 * at a time, B the same calls in batches of 1..150 (several groups, many
 * shards, keys repeated inside a batch). The periods are an hour long, so the
 * few milliseconds between A's and B's calls cannot change a decision.
 * Checked: every call's result and decision kind (rate: remaining too) are
 * equal; after close(drain), each key's sequence of (event kind, token) is
 * equal; every token is accounted for exactly once. Also: a live-key cap
 * (SLUICE_EFULL for the same calls), invalid keys and costs in a batch, a
 * closed limiter, NULL arguments, and two threads batching on disjoint keys
 * at once (every token accounted for).
 */
#include "loop_test_util.h"

#include <inttypes.h>

#define NKEYS 60
#define HOUR (UINT64_C(3600) * 1000000000)
#define MAXTOK 20000

struct rec {
    int kind;
    uint64_t token;
    int key; /* index in the pool, -1 unknown */
};

struct side {
    pthread_mutex_t mu;
    struct rec *ev;
    size_t n;
    unsigned char seen[MAXTOK * 2];
};

static char keynames[NKEYS][24];

static int key_index(sluice_key_t k) {
    if (k.kind == SLUICE_KEY_U64) return k.u64 < NKEYS / 2 ? (int)k.u64 : -1;
    for (int i = NKEYS / 2; i < NKEYS; i++)
        if (k.len == strlen(keynames[i]) && memcmp(k.bytes, keynames[i], k.len) == 0) return i;
    return -1;
}

static sluice_key_t key_of(int i) {
    if (i < NKEYS / 2) return sluice_key_u64((uint64_t)i);
    return sluice_key_bytes(keynames[i], strlen(keynames[i]));
}

static void on_event(void *user, const sluice_event_t *ev) {
    struct side *s = user;
    pthread_mutex_lock(&s->mu);
    s->ev[s->n].kind = (int)ev->kind;
    s->ev[s->n].token = ev->token;
    s->ev[s->n].key = key_index(ev->key);
    s->n++;
    pthread_mutex_unlock(&s->mu);
}

/* xorshift64; each thread draws from its own state. */
static uint64_t rnd_next(uint64_t *state) {
    uint64_t x = *state;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return *state = x;
}

static uint64_t rng = 12345; /* the main thread's */
static uint64_t rnd(void) { return rnd_next(&rng); }

static void side_init(struct side *s) {
    memset(s, 0, sizeof *s);
    pthread_mutex_init(&s->mu, NULL);
    s->ev = calloc(MAXTOK * 4, sizeof *s->ev);
}

static void side_free(struct side *s) {
    free(s->ev);
    pthread_mutex_destroy(&s->mu);
}

/* After close(drain): each key's events must be the same sequence. */
static void compare_events(struct side *a, struct side *b, const char *what) {
    LT_CHECK(a->n == b->n, "%s: %zu events one at a time, %zu batched", what, a->n, b->n);
    for (int k = -1; k < NKEYS; k++) {
        size_t i = 0, j = 0;
        for (;;) {
            while (i < a->n && a->ev[i].key != k) i++;
            while (j < b->n && b->ev[j].key != k) j++;
            if (i >= a->n || j >= b->n) {
                LT_CHECK(i >= a->n && j >= b->n, "%s: key %d has more events on one side", what, k);
                break;
            }
            LT_CHECK(a->ev[i].kind == b->ev[j].kind && a->ev[i].token == b->ev[j].token,
                     "%s: key %d: event %d/%" PRIu64 " one at a time, %d/%" PRIu64 " batched", what, k, a->ev[i].kind,
                     a->ev[i].token, b->ev[j].kind, b->ev[j].token);
            i++;
            j++;
        }
    }
    /* every token reported exactly once (REPORT_ALL) */
    for (size_t i = 0; i < b->n; i++) {
        LT_CHECK(b->ev[i].token < MAXTOK * 2, "token out of range");
        if (b->ev[i].token < MAXTOK * 2) {
            LT_CHECK(b->seen[b->ev[i].token] == 0, "%s: token %" PRIu64 " reported twice", what, b->ev[i].token);
            b->seen[b->ev[i].token] = 1;
        }
    }
}

static void differential(sluice_loop_t *loop, sluice_policy_t policy, uint64_t max_keys, const char *what) {
    struct side a, b;
    side_init(&a);
    side_init(&b);
    sluice_config_t cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.policy = policy;
    cfg.on_event = on_event;
    cfg.max_keys = max_keys;
    sluice_mt_options_t opt = { 8, SLUICE_MT_REPORT_ALL, NULL };
    sluice_mt_t *ma = NULL, *mb = NULL;
    cfg.user = &a;
    LT_OK(sluice_mt_new_with_options(&ma, loop, &cfg, &opt));
    cfg.user = &b;
    LT_OK(sluice_mt_new_with_options(&mb, loop, &cfg, &opt));
    if (!ma || !mb) return;
    bool rate = policy.kind == SLUICE_RATE;
    uint64_t burst = rate ? (policy.burst ? policy.burst : policy.limit) : 1;

    static sluice_call_t calls[200];
    static sluice_decision_t da[200], db[200];
    static int ra[200], rb[200];
    uint64_t token = 0;
    size_t ncalls = 0, admitted = 0;
    while (token < MAXTOK - 200) {
        size_t n = 1 + rnd() % 150;
        for (size_t i = 0; i < n; i++) {
            int k = (int)(rnd() % (rnd() % 4 == 0 ? NKEYS : 6)); /* a few hot keys, repeated */
            calls[i].key = key_of(k);
            calls[i].token = token++;
            calls[i].cost = rate ? 1 + rnd() % (burst + 1) : 1;
            if (rnd() % 50 == 0) calls[i].cost = 0;                                                /* SLUICE_ERANGE */
            if (rnd() % 60 == 0) calls[i].key = sluice_key_bytes(keynames[0], SLUICE_KEY_MAX + 1); /* EKEYLEN */
        }
        int first_a = 0;
        for (size_t i = 0; i < n; i++) {
            memset(&da[i], 0, sizeof da[i]);
            /* a batch refuses cost 0 (as the core's does) where a single
             * call takes it as 1: the single call gets a cost refused alike */
            uint64_t cost = calls[i].cost ? calls[i].cost : SLUICE_RATE_MAX + 1;
            ra[i] = lt_submit_cost(ma, calls[i].key, calls[i].token, cost, &da[i]);
            if (ra[i] && !first_a) first_a = ra[i];
        }
        memset(db, 0, sizeof db);
        int first_b = sluice_mt_submit_many(mb, calls, n, db, rb);
        LT_CHECK(first_a == first_b, "%s: batch returned %d, first single error %d", what, first_b, first_a);
        for (size_t i = 0; i < n; i++) {
            LT_CHECK(ra[i] == rb[i], "%s: call %" PRIu64 ": result %d one at a time, %d batched", what, calls[i].token,
                     ra[i], rb[i]);
            if (ra[i] == 0 && rb[i] == 0) {
                LT_CHECK(da[i].kind == db[i].kind && da[i].remaining == db[i].remaining,
                         "%s: call %" PRIu64 ": decision %d/%" PRIu64 " one at a time, %d/%" PRIu64 " batched", what,
                         calls[i].token, (int)da[i].kind, da[i].remaining, (int)db[i].kind, db[i].remaining);
                admitted++;
            }
        }
        ncalls += n;
    }
    LT_OK(sluice_mt_close(ma, SLUICE_CLOSE_DRAIN));
    LT_OK(sluice_mt_close(mb, SLUICE_CLOSE_DRAIN));
    /* a closed limiter: every call refused */
    int rcs[2] = { 7, 7 };
    calls[0].key = key_of(1);
    calls[1].key = key_of(2);
    calls[0].cost = calls[1].cost = 1;
    LT_CHECK(sluice_mt_submit_many(mb, calls, 2, NULL, rcs) == SLUICE_ECLOSED && rcs[0] == SLUICE_ECLOSED &&
                 rcs[1] == SLUICE_ECLOSED,
             "%s: closed limiter", what);
    sluice_mt_free(ma);
    sluice_mt_free(mb);
    compare_events(&a, &b, what);
    /* every call that was taken is reported exactly once */
    size_t reported = 0;
    for (size_t i = 0; i < MAXTOK; i++) reported += b.seen[i];
    LT_CHECK(reported == admitted, "%s: %zu tokens taken, %zu reported", what, admitted, reported);
    printf("%s: %zu calls (%zu taken), %zu events, equal key by key\n", what, ncalls, admitted, b.n);
    side_free(&a);
    side_free(&b);
}

/* Two threads batching at once on disjoint keys. */
struct worker {
    sluice_mt_t *m;
    uint64_t base;
    size_t taken;
};

static void *work(void *arg) {
    struct worker *w = arg;
    sluice_call_t calls[64];
    int rcs[64];
    uint64_t state = 0x9E3779B97F4A7C15u ^ (w->base + 1);
    for (int round = 0; round < 200; round++) {
        for (int i = 0; i < 64; i++) {
            calls[i].key = sluice_key_u64(w->base + (uint64_t)(rnd_next(&state) % 500) * 2);
            calls[i].token = w->base * 1000000 + (uint64_t)round * 64 + (uint64_t)i;
            calls[i].cost = 1;
        }
        int rc = sluice_mt_submit_many(w->m, calls, 64, NULL, rcs);
        LT_CHECK(rc == 0, "threaded batch: %d", rc);
        for (int i = 0; i < 64; i++) w->taken += rcs[i] == 0;
    }
    return NULL;
}

struct counter {
    atomic_uint_fast64_t n;
};

static void count_event(void *user, const sluice_event_t *ev) {
    (void)ev;
    struct counter *c = user;
    atomic_fetch_add(&c->n, 1);
}

static void threads(sluice_loop_t *loop) {
    struct counter c;
    atomic_init(&c.n, 0);
    sluice_config_t cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.policy = sluice_throttle(1000000, true, true, SLUICE_PICK_LATEST); /* 1 ms windows: real timers */
    cfg.on_event = count_event;
    cfg.user = &c;
    sluice_mt_options_t opt = { 4, SLUICE_MT_REPORT_ALL, NULL };
    sluice_mt_t *m = NULL;
    LT_OK(sluice_mt_new_with_options(&m, loop, &cfg, &opt));
    if (!m) return;
    struct worker w[2] = { { m, 0, 0 }, { m, 1, 0 } };
    pthread_t th[2];
    for (int i = 0; i < 2; i++) pthread_create(&th[i], NULL, work, &w[i]);
    for (int i = 0; i < 2; i++) pthread_join(th[i], NULL);
    LT_OK(sluice_mt_close(m, SLUICE_CLOSE_DRAIN));
    sluice_mt_free(m);
    uint64_t n = atomic_load(&c.n);
    LT_CHECK(n == w[0].taken + w[1].taken, "threads: %zu tokens taken, %" PRIu64 " reported", w[0].taken + w[1].taken,
             n);
    printf("threads: %zu tokens from two threads, each reported once\n", w[0].taken + w[1].taken);
}

int main(void) {
    for (int i = 0; i < NKEYS; i++) snprintf(keynames[i], sizeof keynames[i], "user:%d", i);
    sluice_threads_init();
    sluice_loop_t *loop = NULL;
    LT_OK(sluice_loop_start(&loop, NULL));
    if (!loop) return 1;
    LT_CHECK(sluice_mt_submit_many(NULL, NULL, 0, NULL, NULL) == SLUICE_EINVAL, "NULL limiter");
    differential(loop, sluice_throttle((int64_t)HOUR, true, true, SLUICE_PICK_LATEST), 0, "throttle");
    differential(loop, sluice_debounce((int64_t)HOUR, false, true, -1), 0, "debounce");
    differential(loop, sluice_rate(3, (int64_t)HOUR, 5), 0, "rate");
    differential(loop, sluice_throttle((int64_t)HOUR, true, false, SLUICE_PICK_FIRST), 20, "throttle capped");
    threads(loop);
    LT_OK(sluice_loop_free(loop));
    if (lt_failures) {
        fprintf(stderr, "test_batch_mt: %d failure(s)\n", lt_failures);
        return 1;
    }
    printf("test_batch_mt: ok\n");
    return 0;
}
