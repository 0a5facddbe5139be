/*
 * fleet.c — the fleet (Redis) rate limiter: request queue, the connection
 * (conn.c: TCP, Unix or TLS, reconnects; behind Sentinel, sentinel.c tells
 * it where the primary is; with Redis Cluster, cluster.c keeps one per
 * primary and each request goes to its key's slot) on the caller's event_base,
 * timeouts, the TAT cache and the failure policies. See include/sluice_fleet.h.
 *
 * Life of a request: sluice_fleet_call() (any thread) copies it into a
 * `struct req` and queues it under the mutex; the wake event runs on the loop
 * thread and processes the queue: a cancel invalidates the cache entry; a
 * call that the cache proves dropped is answered at once; otherwise the
 * request goes into the waiting list (ordered by deadline) and is sent with
 * EVALSHA. It is answered exactly once: by its reply, by its timeout, by the
 * failure policy when the connection is gone, or with SLUICE_ECLOSED at free.
 * A request stays allocated until it is answered AND the connection has
 * returned it (every callback the connection holds is called, with a NULL
 * reply at the latest when the connection is freed).
 */
#ifndef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L
#endif

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <event2/event.h>
#include <event2/thread.h>
/* Without hiredis's headers, say which package brings them before the
 * compiler stops at the first missing one (SwiftPM prints no hint for
 * CHiredis: see Package.swift; the same check is in CHiredis.h). */
#if defined(__has_include)
#if !__has_include(<hiredis/hiredis.h>)
#error                                                                                                                 \
    "hiredis not found: the fleet limiter (SluiceFleet) needs hiredis's headers; install libhiredis-dev (apt-get install libhiredis-dev, or make deps)"
#endif
#endif
#include <hiredis/hiredis.h>

#include "../CSluice/hash-internal.h" /* the core's seeded hash (header only) */
#include "../CSluice/seed-internal.h"
#include "cluster-slot.h"
#include "cluster.h"
#include "conn.h"
#include "redis-script.h"
#include "fleet-time.h"
#include "fleet-internal.h"
#include "loop-wait.h"
#include "redis-url.h"
#include "sentinel.h"
#include "topology.h"

#define MS 1000000ull

/* A table of plans as the limiter uses it (config.plans, sluice_fleet_set_plans()):
 * immutable, shared by the limiter and the requests made under it (each
 * holds a reference), freed with the last. */
struct fquota {
    struct sluice__fleet_rate rate;
    uint8_t name_len;
    char name[SLUICE_PLAN_NAME_MAX + 1];
};

struct fplan {
    uint32_t first, n; /* its quotas: q[first .. first + n) */
    uint64_t min_burst;
    uint8_t name_len;
    char name[SLUICE_PLAN_NAME_MAX + 1];
};

struct fplans {
    uint64_t refs; /* atomic */
    uint64_t gen;  /* which table: the TAT cache's entries are for one */
    uint32_t nplans;
    struct fplan *plan;
    struct fquota *q;
    uint32_t *by_name; /* plan indices sorted by name (sluice_fleet_plan_index) */
};

struct req {
    struct req *prev, *next; /* the waiting list (answered requests are out of it) */
    struct req *qnext;       /* the submit queue */
    struct sluice_fleet *f;
    sluice_fleet_op_t op;
    uint64_t cost, now; /* now: the caller's time (manual mode) */
    uint64_t deadline;  /* CLOCK_MONOTONIC ns */
    uint64_t sent_real; /* CLOCK_REALTIME ns when sent (clock offset bound) */
    uint64_t seq;       /* f->cancel_seq when sent: replies older than a cancel do not teach the cache */
    sluice_fleet_fn fn;
    void *user;
    bool answered, listed;
    int in_redis;       /* connection callbacks outstanding */
    unsigned redirects; /* a cancel's MOVED and ASK followed (Redis Cluster) */
    sluice__conn_t *to; /* Redis Cluster: the node flush_batch() sends it to */
    sluice_key_kind_t kind;
    uint64_t u64;
    struct fplans *plans; /* a limiter of plans: the table it was made under (a reference) */
    uint32_t plan;        /* ... and its plan there */
    size_t raw_len, rkey_len;
    uint64_t hash;
    char data[]; /* raw key bytes, then the Redis key */
};

struct slot {
    char *key;
    size_t len;
    fl_u128 tat;      /* a lower bound of the key's TAT (scaled) */
    fl_u128 *ptat;    /* plans: a lower bound of each quota's TAT (scaled by its limit), or NULL */
    uint64_t gen;     /* plans: the table (fplans.gen) ... */
    uint32_t plan;    /* ... and the plan they are for */
    uint64_t learned; /* CLOCK_MONOTONIC ns */
    uint64_t min_seq; /* replies to requests sent before this cancel sequence are ignored */
};

struct stats {
    uint64_t calls, quotas, cancels, redis_admitted, redis_dropped, cache_dropped, failure_admitted, failure_dropped,
        fallback_admitted, fallback_dropped, timeouts, unavailable, bad_replies, noscript, connects, disconnects,
        in_flight, closed, batches, bad_values, auth_errors, noperm_errors, oom_errors, readonly_errors, redis_errors,
        elsewhere; /* not public: sluice__fleet_elsewhere() */
};

struct sluice_fleet {
    struct event_base *base;
    sluice_fleet_config_t cfg;
    struct sluice__fleet_rate rate;
    char *prefix; /* encoded: "<N>:<E(prefix)>:" (fleet_key.c) */
    size_t prefix_len;
    sluice__script_t script; /* the rate script, as a library and for EVALSHA */
    char limit_s[40], bper_s[40], extra_s[24], cend_s[48];

    sluice__conn_t *conn;         /* keeps itself connected (conn.h) */
    sluice__sentinel_t *sentinel; /* a Sentinel address: the conn's resolver (sentinel.h), else NULL */
    sluice__cluster_t *cluster;   /* a Cluster address: one conn per primary (cluster.h), and conn is NULL */
    bool degraded, closing;
    struct event *wake, *tmo, *stall;
    int conn_err;       /* the connection's last error (under mu), 0 when up */
    char conn_msg[320]; /* its message (under mu) */

    pthread_mutex_t mu;
    struct req *qhead, *qtail;
    bool wake_armed, closed;
    struct sluice__loop_wait *free_wait; /* sluice_fleet_free() from another thread: the wake event frees */

    struct req *whead, *wtail;
    sluice_limiter_t *fallback;

    struct req **batch; /* requests processed, not sent yet (each holds one in_redis count) */
    size_t batch_n;
    size_t batch_cap;   /* room in batch: max_batch; on a Redis Cluster, for several nodes' batches */
    struct req **group; /* Redis Cluster: one node's share of batch, while flush_batch() sends it */
    size_t batches_out; /* batches sent and not replied to */

    struct slot *cache;
    size_t cache_mask;
    uint64_t cancel_seq;
    uint64_t hash_seed[2]; /* the cache's: random, drawn at creation */
    bool have_off;
    int64_t off; /* an upper bound of (server clock - local CLOCK_REALTIME), from the last reply */

    struct stats st;

    sluice_loop_t *loop; /* sluice_fleet_new_on_loop(): freed on its thread */

    bool has_plans;        /* made with config.plans */
    struct fplans *plans;  /* a limiter of plans: the current table (under mu), else NULL */
    uint64_t plans_gen;    /* the last table's gen (under mu) */
    pthread_mutex_t fb_mu; /* the fallback limiter of a limiter of plans (replaced from any thread) */
};

static void free_on_loop(struct sluice_fleet *f);

#define STAT_ADD(f, field, n) __atomic_fetch_add(&(f)->st.field, (uint64_t)(n), __ATOMIC_RELAXED)
#define STAT_INC(f, field) STAT_ADD(f, field, 1)

static uint64_t mono_now(void) { return sluice__fleet_clock_ns(CLOCK_MONOTONIC); }
static uint64_t real_now(void) { return sluice__fleet_clock_ns(CLOCK_REALTIME); }

/* ------------------------------------------------------------------ plans */

static void fplans_unref(struct fplans *p) {
    if (!p || __atomic_sub_fetch(&p->refs, 1, __ATOMIC_ACQ_REL) != 0) return;
    free(p->plan);
    free(p->q);
    free(p->by_name);
    free(p);
}

static struct fplans *fplans_ref(struct fplans *p) {
    __atomic_add_fetch(&p->refs, 1, __ATOMIC_RELAXED);
    return p;
}

static int name_cmp(const char *a, size_t an, const char *b, size_t bn) {
    int c = memcmp(a, b, an < bn ? an : bn);
    return c ? c : (an > bn) - (an < bn);
}

static const struct fplans *sort_ctx; /* qsort has no context argument; under sort_mu */
static pthread_mutex_t sort_mu = PTHREAD_MUTEX_INITIALIZER;

static int by_name_cmp(const void *x, const void *y) {
    const struct fplan *a = &sort_ctx->plan[*(const uint32_t *)x], *b = &sort_ctx->plan[*(const uint32_t *)y];
    return name_cmp(a->name, a->name_len, b->name, b->name_len);
}

/* A plan's index by name, or -1. */
static int64_t fplans_find(const struct fplans *p, const char *name, size_t len) {
    size_t lo = 0, hi = p->nplans;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        const struct fplan *m = &p->plan[p->by_name[mid]];
        int c = name_cmp(m->name, m->name_len, name, len);
        if (c == 0) return p->by_name[mid];
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return -1;
}

/* Builds the limiter's form of a table sluice_plans_check() accepts. */
static int fplans_build(const sluice_plans_t *t, uint64_t gen, struct fplans **out) {
    size_t nq = 0;
    for (size_t i = 0; i < t->nplans; i++) nq += t->plans[i].nquotas;
    struct fplans *p = calloc(1, sizeof *p);
    if (!p) return SLUICE_ENOMEM;
    p->refs = 1;
    p->gen = gen;
    p->nplans = (uint32_t)t->nplans;
    p->plan = calloc(t->nplans, sizeof *p->plan);
    p->q = calloc(nq, sizeof *p->q);
    p->by_name = malloc(t->nplans * sizeof *p->by_name);
    if (!p->plan || !p->q || !p->by_name) {
        fplans_unref(p);
        return SLUICE_ENOMEM;
    }
    uint32_t k = 0;
    for (uint32_t i = 0; i < p->nplans; i++) {
        const sluice_plan_t *sp = &t->plans[i];
        struct fplan *fp = &p->plan[i];
        fp->first = k;
        fp->n = (uint32_t)sp->nquotas;
        fp->name_len = (uint8_t)strlen(sp->name);
        memcpy(fp->name, sp->name, fp->name_len);
        fp->min_burst = UINT64_MAX;
        for (uint32_t j = 0; j < fp->n; j++, k++) {
            const sluice_rate_quota_t *sq = &sp->quotas[j];
            struct fquota *q = &p->q[k];
            q->name_len = (uint8_t)strlen(sq->name);
            memcpy(q->name, sq->name, q->name_len);
            q->rate.limit = sq->limit;
            q->rate.per = (uint64_t)sq->per_ns;
            q->rate.burst = sq->burst ? sq->burst : sq->limit;
            q->rate.bper = (fl_u128)q->rate.burst * q->rate.per;
            if (q->rate.burst < fp->min_burst) fp->min_burst = q->rate.burst;
        }
        p->by_name[i] = i;
    }
    pthread_mutex_lock(&sort_mu);
    sort_ctx = p;
    qsort(p->by_name, p->nplans, sizeof *p->by_name, by_name_cmp);
    pthread_mutex_unlock(&sort_mu);
    *out = p;
    return 0;
}

/* A fallback table's plans must be the table's, by name and in order. */
static bool same_plan_names(const sluice_plans_t *a, const sluice_plans_t *b) {
    if (a->nplans != b->nplans) return false;
    for (size_t i = 0; i < a->nplans; i++)
        if (strcmp(a->plans[i].name, b->plans[i].name) != 0) return false;
    return true;
}

/* A limiter of plans for the fallback: room for any quota count, so that
 * sluice_fleet_set_plans() never fails on it. */
static int fallback_of_plans(const sluice_plans_t *t, bool manual, sluice_limiter_t **out) {
    sluice_plans_t copy = *t;
    copy.max_quotas = SLUICE_PLAN_QUOTAS_MAX;
    sluice_config_t lc;
    memset(&lc, 0, sizeof lc);
    lc.policy = sluice_rate_plans();
    lc.plans = &copy;
    lc.start_ns = manual ? 0 : sluice__fleet_clock_ns(CLOCK_REALTIME);
    return sluice_limiter_new(out, &lc);
}

static const struct fplan *req_plan(const struct req *r) { return &r->plans->plan[r->plan]; }

/* The quotas of a request's plan, in order, into q[]. @return their count. */
static uint32_t plan_rates(const struct req *r, struct sluice__fleet_rate *q) {
    const struct fplan *pp = req_plan(r);
    for (uint32_t j = 0; j < pp->n; j++) q[j] = r->plans->q[pp->first + j].rate;
    return pp->n;
}

/* ------------------------------------------------------------------ answering */

static void req_free(struct req *r) {
    fplans_unref(r->plans);
    free(r);
}

static void req_release(struct req *r) {
    if (r->answered && r->in_redis == 0) req_free(r);
}

static void unlist(struct sluice_fleet *f, struct req *r) {
    if (!r->listed) return;
    if (r->prev)
        r->prev->next = r->next;
    else
        f->whead = r->next;
    if (r->next)
        r->next->prev = r->prev;
    else
        f->wtail = r->prev;
    r->prev = r->next = NULL;
    r->listed = false;
}

static sluice_key_t req_key(const struct req *r) {
    return r->kind == SLUICE_KEY_U64 ? sluice_key_u64(r->u64) : sluice_key_bytes(r->data, r->raw_len);
}

/* Delivers `res` once; the request is freed when hiredis no longer holds it. */
static void answer(struct sluice_fleet *f, struct req *r, sluice_fleet_result_t *res) {
    if (r->answered) return;
    r->answered = true;
    unlist(f, r);
    res->op = r->op;
    /* the decision's (or quota's) own time is the result's */
    if (res->op == SLUICE_FLEET_CALL) res->decision.now = res->now;
    if (res->op == SLUICE_FLEET_QUOTA) res->quota.now = res->now;
    if (r->fn) r->fn(r->user, res);
    req_release(r);
}

static void answer_closed(struct sluice_fleet *f, struct req *r) {
    sluice_fleet_result_t res;
    memset(&res, 0, sizeof res);
    res.status = SLUICE_ECLOSED;
    STAT_INC(f, closed);
    answer(f, r, &res);
}

/* The failure policy's answer to a request Redis could not answer. */
static void answer_failure(struct sluice_fleet *f, struct req *r, int cause) {
    if (r->answered) return;
    sluice_fleet_result_t res;
    memset(&res, 0, sizeof res);
    res.source = SLUICE_FLEET_SOURCE_FAILURE;
    res.cause = cause;
    uint64_t now = f->cfg.manual_time ? r->now : real_now();
    res.now = now;
    uint64_t burst = r->plans ? req_plan(r)->min_burst : f->rate.burst;
    bool never = r->cost > burst;
    /* a limiter of plans: its fallback decides under the plan of that name */
    int64_t fb_plan = -1;
    if (r->plans && f->fallback && f->cfg.on_failure == SLUICE_FLEET_FAIL_LOCAL && r->op != SLUICE_FLEET_CANCEL) {
        uint32_t idx;
        pthread_mutex_lock(&f->fb_mu);
        if (sluice_limiter_plan_index(f->fallback, req_plan(r)->name, req_plan(r)->name_len, &idx) == 0)
            fb_plan = idx;
        else
            pthread_mutex_unlock(&f->fb_mu);
    }
    uint64_t retry =
        never ? SLUICE_NEVER
              : (now > UINT64_MAX - 1 - f->cfg.closed_retry_ns ? UINT64_MAX - 1 : now + f->cfg.closed_retry_ns);
    switch (r->op) {
    case SLUICE_FLEET_CALL: {
        sluice_decision_t *d = &res.decision;
        int rc = -1;
        if (fb_plan >= 0) {
            rc =
                sluice_limiter_submit_plan(f->fallback, req_key(r), 0, r->cost, (uint32_t)fb_plan, now, d, &res.detail);
            pthread_mutex_unlock(&f->fb_mu);
            if (rc == 0) {
                if (d->kind == SLUICE_EMITTED)
                    STAT_INC(f, fallback_admitted);
                else
                    STAT_INC(f, fallback_dropped);
            }
        } else if (f->cfg.on_failure == SLUICE_FLEET_FAIL_LOCAL && f->fallback && !r->plans) {
            rc = sluice_limiter_submit_cost(f->fallback, req_key(r), 0, r->cost, now, d);
            if (rc == 0) {
                if (d->kind == SLUICE_EMITTED)
                    STAT_INC(f, fallback_admitted);
                else
                    STAT_INC(f, fallback_dropped);
            }
        }
        if (rc != 0) {
            memset(&res.detail, 0, sizeof res.detail);
            if (f->cfg.on_failure == SLUICE_FLEET_FAIL_OPEN && !never) {
                d->kind = SLUICE_EMITTED;
                d->at = now;
                d->remaining = 0;
                d->full = now;
            } else {
                d->kind = SLUICE_DROPPED;
                d->at = retry;
                d->remaining = 0;
                d->full = now;
            }
        }
        if (d->kind == SLUICE_EMITTED)
            STAT_INC(f, failure_admitted);
        else
            STAT_INC(f, failure_dropped);
        break;
    }
    case SLUICE_FLEET_QUOTA: {
        sluice_quota_t *q = &res.quota;
        int rc = -1;
        if (fb_plan >= 0) {
            rc = sluice_limiter_quota_plan(f->fallback, req_key(r), r->cost, (uint32_t)fb_plan, now, q, &res.detail);
            pthread_mutex_unlock(&f->fb_mu);
        } else if (f->cfg.on_failure == SLUICE_FLEET_FAIL_LOCAL && f->fallback && !r->plans) {
            rc = sluice_limiter_quota(f->fallback, req_key(r), r->cost, now, q);
        }
        if (rc != 0) {
            memset(&res.detail, 0, sizeof res.detail);
            q->burst = burst;
            q->full = now;
            if (f->cfg.on_failure == SLUICE_FLEET_FAIL_OPEN) {
                q->remaining = burst;
                q->retry = never ? SLUICE_NEVER : now;
            } else {
                q->remaining = 0;
                q->retry = retry;
            }
        }
        break;
    }
    case SLUICE_FLEET_CANCEL: res.status = cause; break;
    }
    answer(f, r, &res);
}

/* ------------------------------------------------------------------ cache */

static struct slot *cache_slot(struct sluice_fleet *f, const struct req *r) {
    return f->cache ? &f->cache[r->hash & f->cache_mask] : NULL;
}

/* A Redis key name's hash (req.hash), whose low bits pick its cache slot. */
static uint64_t name_hash(const struct sluice_fleet *f, const char *rkey, size_t len) {
    return sluice__fast_hash_bytes(f->hash_seed, rkey, len);
}

size_t sluice__fleet_cache_slot(const sluice_fleet_t *f, const char *rkey, size_t len) {
    return f->cache ? (size_t)(name_hash(f, rkey, len) & f->cache_mask) : SIZE_MAX;
}

static bool slot_holds(const struct slot *s, const struct req *r) {
    return s->key && s->len == r->rkey_len && memcmp(s->key, r->data + r->raw_len, r->rkey_len) == 0;
}

/* What a reply teaches: the key's TAT (one quota: tat[0], scaled), or each
 * quota's under the request's plan. */
static void cache_learn(struct sluice_fleet *f, const struct req *r, uint64_t t, const fl_u128 *tat) {
    struct slot *s = cache_slot(f, r);
    if (!s || r->seq < s->min_seq) return;
    /* max(TAT, t) with TAT <= t says nothing about later calls at earlier times */
    const struct fplan *pp = r->plans ? req_plan(r) : NULL;
    bool ahead = false;
    if (pp) {
        for (uint32_t j = 0; j < pp->n; j++)
            if (tat[j] > (fl_u128)t * r->plans->q[pp->first + j].rate.limit) ahead = true;
    } else {
        ahead = tat[0] > (fl_u128)t * f->rate.limit;
    }
    if (!ahead) return;
    if (pp && !s->ptat) {
        s->ptat = malloc(SLUICE_PLAN_QUOTAS_MAX * sizeof *s->ptat);
        if (!s->ptat) return;
    }
    if (!slot_holds(s, r)) {
        char *k = malloc(r->rkey_len ? r->rkey_len : 1);
        if (!k) return;
        memcpy(k, r->data + r->raw_len, r->rkey_len);
        free(s->key);
        s->key = k;
        s->len = r->rkey_len;
    }
    if (pp) {
        memcpy(s->ptat, tat, pp->n * sizeof *tat);
        s->gen = r->plans->gen;
        s->plan = r->plan;
    } else {
        s->tat = tat[0];
    }
    s->learned = mono_now();
}

static void cache_forget(struct sluice_fleet *f, const struct req *r) {
    struct slot *s = cache_slot(f, r);
    if (!s) return;
    s->min_seq = ++f->cancel_seq; /* later replies to earlier requests are ignored */
    free(s->key);
    s->key = NULL;
    s->len = 0;
}

/* The caller's time for a decision made now: the manual time, or an upper
 * bound of the server's clock (local clock + the last reply's offset bound). */
static bool estimate_now(struct sluice_fleet *f, const struct req *r, uint64_t *out) {
    if (f->cfg.manual_time) {
        *out = r->now;
        return true;
    }
    if (!f->have_off) return false;
    int64_t t = (int64_t)real_now() + f->off;
    if (t < 0) return false;
    *out = (uint64_t)t;
    return true;
}

/* A call under a plan: answered from the cache when its entry is for this
 * table and plan and one quota certainly refuses. */
static bool cache_answer_plan(struct sluice_fleet *f, struct req *r, const struct slot *s, uint64_t t) {
    const struct fplan *pp = req_plan(r);
    if (s->gen != r->plans->gen || s->plan != r->plan || !s->ptat) return false;
    fl_u128 tat[SLUICE_PLAN_QUOTAS_MAX];
    bool refused = false;
    for (uint32_t j = 0; j < pp->n; j++) {
        const struct sluice__fleet_rate *rt = &r->plans->q[pp->first + j].rate;
        fl_u128 ts = (fl_u128)t * rt->limit, nper = (fl_u128)r->cost * rt->per;
        tat[j] = s->ptat[j] > ts ? s->ptat[j] : ts;
        if (ts + rt->bper < tat[j] + nper) refused = true;
    }
    if (!refused) return false;
    sluice_fleet_result_t res;
    memset(&res, 0, sizeof res);
    res.source = SLUICE_FLEET_SOURCE_CACHE;
    res.now = t;
    res.detail.plan = r->plan;
    struct sluice__fleet_rate q[SLUICE_PLAN_QUOTAS_MAX];
    plan_rates(r, q);
    if (sluice__fleet_plan_answer(q, pp->n, false, r->cost, false, t, tat, &res.decision, NULL, &res.detail) != 0)
        return false;
    STAT_INC(f, cache_dropped);
    answer(f, r, &res);
    return true;
}

/* Answers a call locally when its drop is certain. */
static bool cache_answer(struct sluice_fleet *f, struct req *r) {
    struct slot *s = cache_slot(f, r);
    if (!s || !slot_holds(s, r)) return false;
    if (mono_now() - s->learned >= f->cfg.cache_ttl_ns) return false;
    uint64_t t;
    if (!estimate_now(f, r, &t)) return false;
    if (r->plans) return cache_answer_plan(f, r, s, t);
    const struct sluice__fleet_rate *rt = &f->rate;
    fl_u128 ts = (fl_u128)t * rt->limit, nper = (fl_u128)r->cost * rt->per;
    fl_u128 tat = s->tat > ts ? s->tat : ts;
    if (!(ts + rt->bper < tat + nper)) return false;
    sluice_fleet_result_t res;
    memset(&res, 0, sizeof res);
    res.source = SLUICE_FLEET_SOURCE_CACHE;
    res.now = t;
    if (sluice__fleet_call_decision(rt, r->cost, false, t, tat, &res.decision) != 0) return false;
    STAT_INC(f, cache_dropped);
    answer(f, r, &res);
    return true;
}

/* ------------------------------------------------------------------ connection */

static void count_error_class(struct sluice_fleet *f, int code);
static int error_reply_code(struct sluice_fleet *f, const redisReply *rep);
static void after_error_reply(struct sluice_fleet *f, sluice__conn_t *c, int code);
static void flush_batch(struct sluice_fleet *f, bool force);

/* Why a request cannot go to Redis through `c` now: its last error, else ENOTCONN. */
static int down_cause_of(const sluice__conn_t *c) {
    int err = c ? sluice__conn_error(c, NULL) : 0;
    return err ? err : SLUICE_ENOTCONN;
}

/* The connection a request goes to: the one connection, or in a cluster the
 * primary of the key's slot (cluster.h). */
static sluice__conn_t *req_conn(struct sluice_fleet *f, const struct req *r) {
    if (!f->cluster) return f->conn;
    return sluice__cluster_route(f->cluster, sluice__cluster_keyslot(r->data + r->raw_len, r->rkey_len));
}

/* Drops a connection: every request it holds is answered by the failure
 * policy (the connection answers each callback), then it reconnects. */
static void drop_conn(sluice__conn_t *c, int err) { sluice__conn_drop(c, err); }

static void drop_connection(struct sluice_fleet *f, int err) { drop_conn(f->conn, err); }

static void script_loaded(void *arg, redisReply *r, int err) {
    (void)err;
    struct sluice_fleet *f = arg;
    if (!r || f->closing) return;
    if (r->type == REDIS_REPLY_ERROR) {
        /* refused (NOAUTH, NOPERM...): counted by class; the script runs get
         * the same refusal, and each is answered with its cause */
        after_error_reply(f, f->conn, error_reply_code(f, r));
        return;
    }
    if (r->type != REDIS_REPLY_STRING || r->len != 40 || memcmp(r->str, f->script.sha, 40) != 0) {
        /* not Redis, or a Redis that names scripts otherwise: EVALSHA cannot work */
        STAT_INC(f, bad_replies);
        drop_connection(f, SLUICE_EPROTO);
    }
}

/* Keeps a copy of the connection's state for sluice_fleet_last_error() (any thread). */
static void note_error_of(struct sluice_fleet *f, const sluice__conn_t *c) {
    const char *msg = NULL;
    int err = sluice__conn_error(c, &msg);
    pthread_mutex_lock(&f->mu);
    f->conn_err = err;
    snprintf(f->conn_msg, sizeof f->conn_msg, "%s", err && msg ? msg : "");
    pthread_mutex_unlock(&f->mu);
}

static void note_conn_error(struct sluice_fleet *f) { note_error_of(f, f->conn); }

/* The connection's state changes (conn.h): on UP, the script is loaded first
 * (it goes out before the requests held while connecting): as a function
 * library, and into the script cache for EVALSHA, which the batches use
 * until the library's load is confirmed. */
static void conn_event(void *owner, sluice__conn_event_t ev, int err) {
    struct sluice_fleet *f = owner;
    note_conn_error(f);
    /* a setup Redis refused (AUTH, SELECT): counted by class like a reply */
    if (ev == SLUICE__CONN_FAILED && (err == SLUICE_EAUTH || err == SLUICE_ENOPERM || err == SLUICE_EOOM ||
                                      err == SLUICE_EREADONLY || err == SLUICE_EREDIS))
        count_error_class(f, err);
    __atomic_store_n(&f->degraded, false, __ATOMIC_RELAXED);
    evtimer_del(f->stall);
    if (ev == SLUICE__CONN_UP) {
        STAT_INC(f, connects);
        if (sluice__script_on_up(&f->script, f->conn, script_loaded, f) != 0) drop_connection(f, SLUICE_ENOMEM);
        return;
    }
    if (ev == SLUICE__CONN_DOWN) STAT_INC(f, disconnects);
    flush_batch(f, false); /* requests held for a batch: answered now */
}

/* A cluster node's connection changes state (cluster.h). On UP the script is
 * loaded there first, as on the one connection: without it, a node's first
 * EVALSHAs would get NOSCRIPT and be sent again after the requests behind
 * them (a cancel would overtake the calls before it). */
static void cluster_event(void *owner, sluice__conn_t *c, sluice__conn_event_t ev, int err) {
    struct sluice_fleet *f = owner;
    note_error_of(f, c);
    if (ev == SLUICE__CONN_FAILED && (err == SLUICE_EAUTH || err == SLUICE_ENOPERM || err == SLUICE_EOOM ||
                                      err == SLUICE_EREADONLY || err == SLUICE_EREDIS))
        count_error_class(f, err);
    if (ev == SLUICE__CONN_DOWN) STAT_INC(f, disconnects);
    if (ev != SLUICE__CONN_UP) return;
    STAT_INC(f, connects);
    /* (the SCRIPT LOAD's reply unread: if it failed, the node's EVALSHAs get
     * NOSCRIPT or the same error, and are handled so) */
    if (sluice__script_on_up(&f->script, c, NULL, NULL) != 0) drop_conn(c, SLUICE_ENOMEM);
}

static void stall_cb(evutil_socket_t fd, short what, void *arg) {
    (void)fd;
    (void)what;
    struct sluice_fleet *f = arg;
    if (f->degraded) drop_connection(f, SLUICE_ETIMEDOUT);
    flush_batch(f, false);
}

/* ------------------------------------------------------------------ sending */

static void reply_cb(void *arg, redisReply *rep, int err);

/* The reply to ASKING (before a command an ASK redirected). */
static void ignore_reply(void *arg, redisReply *rep, int err) {
    (void)arg;
    (void)rep;
    (void)err;
}

/* A cancel: DEL, alone (calls and quota reads go in batches), to `c` (after
 * ASKING when `asking`). */
static int send_del(struct sluice_fleet *f, struct req *r, sluice__conn_t *c, bool asking) {
    const char *argv[2] = { "DEL", r->data + r->raw_len };
    size_t lens[2] = { 3, r->rkey_len };
    if (!c) return -1;
    const char *ask_argv[1] = { "ASKING" };
    size_t ask_len[1] = { 6 };
    if (asking && sluice__conn_send(c, 1, ask_argv, ask_len, ignore_reply, NULL) != 0) return -1;
    if (sluice__conn_send(c, 2, argv, lens, reply_cb, r) != 0) return -1;
    r->in_redis++;
    r->seq = f->cancel_seq;
    r->sent_real = real_now();
    STAT_INC(f, in_flight);
    return 0;
}

static int send_req(struct sluice_fleet *f, struct req *r) { return send_del(f, r, req_conn(f, r), false); }

/* A Redis Cluster node's MOVED or ASK to a cancel: the DEL goes to the node
 * it names (as follow_redirect() does for a batch). @return whether it was
 * followed (then the request is resent or answered). */
static bool follow_del_redirect(struct sluice_fleet *f, struct req *r, const redisReply *rep) {
    bool ask;
    sluice__conn_t *c;
    if (r->answered || r->redirects >= 5 || !sluice__cluster_follow(f->cluster, rep->str, rep->len, NULL, &c, &ask))
        return false;
    r->redirects++;
    if (send_del(f, r, c, ask) != 0) answer_failure(f, r, down_cause_of(c));
    return true;
}

/* Requests decided by one run of the script, in order (see the script's "B" form). */
struct batch {
    struct sluice_fleet *f;
    sluice__conn_t *conn; /* where it was sent */
    size_t n;
    bool evalled;       /* sent with EVAL after NOSCRIPT: not resent again */
    bool fcalled;       /* sent with FCALL (the function library) */
    bool asking;        /* sent after ASKING (an ASK redirection) */
    bool cross;         /* keys named in ARGV, none declared (the script's 'K' form) */
    unsigned redirects; /* MOVED and ASK followed so far */
    struct req *r[];
};

static void batch_reply_cb(void *arg, redisReply *rep, int err);

/* Where and how a batch is sent (a resend keeps its node, or follows a
 * redirection). */
struct route {
    sluice__conn_t *conn;
    bool eval, asking;
    unsigned redirects;
};

/* The arguments of a script run under plans (the script's 'P' form) after
 * the keys: the quota sets of the requests' plans, each once, then each
 * request's op, time, set and cost (once when they all share them,
 * `uniform`: 'V'). `nums` has room for 72 bytes per request and 160 per
 * quota. @return the count written at argv[k]. */
static size_t plan_args(struct sluice_fleet *f, struct req *const *reqs, size_t n, bool uniform, const char **argv,
                        size_t *lens, size_t k, char *nums, const struct fplan **seen) {
    size_t k0 = k, nsets = 0;
    char *p = nums;
    argv[k] = uniform ? "V" : "P", lens[k++] = 1;
    argv[k] = f->extra_s, lens[k++] = strlen(f->extra_s);
    size_t nsets_at = k++;
    for (size_t i = 0; i < n; i++) {
        const struct fplan *pp = req_plan(reqs[i]);
        size_t s = 0;
        while (s < nsets && seen[s] != pp) s++;
        if (s < nsets) continue;
        seen[nsets++] = pp;
        argv[k] = p, lens[k++] = sluice__fleet_u128_str(pp->n, p), p += 4;
        for (uint32_t j = 0; j < pp->n; j++) {
            const struct fquota *q = &reqs[i]->plans->q[pp->first + j];
            argv[k] = q->name, lens[k++] = q->name_len;
            argv[k] = p, lens[k] = sluice__fleet_u128_str(q->rate.limit, p), p += lens[k++] + 1;
            argv[k] = p, lens[k] = sluice__fleet_u128_str(q->rate.per, p), p += lens[k++] + 1;
            argv[k] = p, lens[k] = sluice__fleet_u128_str(q->rate.bper, p), p += lens[k++] + 1;
            argv[k] = p, lens[k] = sluice__fleet_u128_str((fl_u128)UINT64_MAX * q->rate.limit, p), p += lens[k++] + 1;
        }
    }
    argv[nsets_at] = p, lens[nsets_at] = sluice__fleet_u128_str(nsets, p), p += lens[nsets_at] + 1;
    for (size_t i = 0; i < (uniform ? 1 : n); i++) {
        const struct req *r = reqs[i];
        size_t s = 0;
        while (seen[s] != req_plan(r)) s++;
        argv[k] = r->op == SLUICE_FLEET_QUOTA ? "Q" : "C", lens[k++] = 1;
        argv[k] = p, lens[k++] = f->cfg.manual_time ? sluice__fleet_u128_str(r->now, p) : 0, p += 24;
        argv[k] = p, lens[k++] = sluice__fleet_u128_str(s + 1, p), p += 8;
        argv[k] = p, lens[k++] = sluice__fleet_u128_str(r->cost, p), p += 24;
    }
    return k - k0;
}

/* Sends reqs[0..n) as one EVALSHA, or FCALL where the script's library is
 * loaded (EVAL when rt->eval; after ASKING when
 * rt->asking) to rt->conn. Each request must hold one in_redis count, which
 * becomes the batch's. On a Redis Cluster, a batch of several requests
 * declares no key (a run that declares keys of two slots is refused with
 * CROSSSLOT) and names them in ARGV (the script's 'K' form): the node runs
 * it, the script may touch keys of every slot the node serves, and a key it
 * does not serve is left undecided ('ELSEWHERE': batch_reply_cb() sends that
 * request alone, declaring its key, so that MOVED and ASK apply). A batch of
 * one request declares its key. @return 0, or -1 when nothing was sent (the
 * caller answers them). */
static int send_batch(struct sluice_fleet *f, struct req *const *reqs, size_t n, const struct route *rt) {
    if (n == 0 || !rt->conn) return -1;
    bool eval = rt->eval;
    bool plans = reqs[0]->plans != NULL;
    /* one quota: 5 arguments, then 3 per request (3 in all in the 'U' form
     * below); plans: 3, then per request 4 and at most a set of 8 quotas
     * (1 + 5 * 8) */
    bool cross = f->cluster && n > 1;
    size_t argc = (plans ? 3 + n + 3 + 45 * n : 3 + n + 5 + 3 * n) + (cross ? 2 : 0);
    struct batch *b = malloc(sizeof *b + n * sizeof b->r[0]);
    const char **argv = malloc(argc * sizeof *argv);
    size_t *lens = malloc(argc * sizeof *lens);
    /* per request: now (24 bytes) and cost*per (40); plans: 72 bytes per
     * request, 160 per quota, and the sets' indices */
    size_t nums_len = plans ? n * (72 + 8 * 160 + sizeof(void *)) + 64 + 8 : n * 64;
    char *nums = malloc(nums_len);
    int rc = -1;
    if (!b || !argv || !lens || !nums) goto out;
    b->f = f;
    b->conn = rt->conn;
    b->n = n;
    b->evalled = eval;
    b->asking = rt->asking;
    b->cross = cross;
    b->redirects = rt->redirects;
    char nkeys[24];
    /* FCALL where the library is loaded: a run then makes none of the
     * script's functions (redis-script.h) */
    b->fcalled = sluice__script_head(&f->script, rt->conn, eval, argv, lens);
    size_t k = 2;
    char nargv[24];
    if (cross) {
        argv[k] = "0", lens[k++] = 1;
        argv[k] = "K", lens[k++] = 1;
        argv[k] = nargv, lens[k++] = sluice__fleet_u128_str(n, nargv);
    } else {
        argv[k] = nkeys, lens[k++] = sluice__fleet_u128_str(n, nkeys);
    }
    for (size_t i = 0; i < n; i++) argv[k] = reqs[i]->data + reqs[i]->raw_len, lens[k++] = reqs[i]->rkey_len;
    /* requests that share op, time and cost, and their plan under plans (every
     * batch of calls of one cost in server time), name them once: the script's
     * 'U' and 'V' forms, three or four arguments fewer per request for Redis
     * to read */
    bool uniform = true;
    for (size_t i = 1; i < n && uniform; i++)
        uniform = reqs[i]->op == reqs[0]->op && reqs[i]->cost == reqs[0]->cost &&
                  (!plans || req_plan(reqs[i]) == req_plan(reqs[0])) &&
                  (!f->cfg.manual_time || reqs[i]->now == reqs[0]->now);
    if (plans) {
        /* the plans seen, at the end of nums (aligned) */
        size_t at = (n * (72 + 8 * 160) + 64 + 7) & ~(size_t)7;
        k += plan_args(f, reqs, n, uniform, argv, lens, k, nums, (const struct fplan **)(void *)(nums + at));
        argc = k;
        goto send;
    }
    argv[k] = uniform ? "U" : "B", lens[k++] = 1;
    argv[k] = f->limit_s, lens[k++] = strlen(f->limit_s);
    argv[k] = f->bper_s, lens[k++] = strlen(f->bper_s);
    argv[k] = f->extra_s, lens[k++] = strlen(f->extra_s);
    argv[k] = f->cend_s, lens[k++] = strlen(f->cend_s);
    for (size_t i = 0; i < (uniform ? 1 : n); i++) {
        const struct req *r = reqs[i];
        char *now_s = nums + 64 * i, *nper_s = now_s + 24;
        argv[k] = r->op == SLUICE_FLEET_QUOTA ? "Q" : "C", lens[k++] = 1;
        argv[k] = now_s, lens[k++] = f->cfg.manual_time ? sluice__fleet_u128_str(r->now, now_s) : 0;
        argv[k] = nper_s, lens[k++] = sluice__fleet_u128_str((fl_u128)r->cost * f->rate.per, nper_s);
    }
    argc = k;
send:;
    static const char *const asking[1] = { "ASKING" };
    static const size_t asking_len[1] = { 6 };
    if (rt->asking && sluice__conn_send(rt->conn, 1, asking, asking_len, ignore_reply, NULL) != 0) goto out;
    if (sluice__conn_send(rt->conn, (int)argc, argv, lens, batch_reply_cb, b) != 0) goto out;
    uint64_t sent = real_now();
    for (size_t i = 0; i < n; i++) {
        struct req *r = reqs[i];
        b->r[i] = r;
        r->seq = f->cancel_seq;
        r->sent_real = sent;
    }
    STAT_ADD(f, in_flight, n);
    STAT_INC(f, batches);
    f->batches_out++;
    b = NULL; /* the connection holds it until batch_reply_cb */
    rc = 0;
out:
    free(b);
    free(argv);
    free(lens);
    free(nums);
    return rc;
}

/* Sends the requests waiting in f->batch as one batch: at once when `force`
 * (a cancel must follow them), when the batch is full, or when fewer than
 * BATCHES_OUT batches await their reply; otherwise they wait for the next
 * reply (under load, batches grow by themselves; at light load a request goes
 * out at once). Requests answered meanwhile (timeouts) are left out. Without
 * a connection, each is answered by the failure policy. */
#define BATCHES_OUT 2
static void send_groups(struct sluice_fleet *f, size_t n);
static void flush_batch(struct sluice_fleet *f, bool force) {
    if (f->batch_n == 0) return;
    /* a cluster: BATCHES_OUT per node, while every slot's primary is up */
    bool up = f->cluster ? sluice__cluster_ready(f->cluster) : sluice__conn_sendable(f->conn);
    size_t out_max = f->cluster ? BATCHES_OUT * sluice__cluster_nodes(f->cluster) : BATCHES_OUT;
    if (!force && up && f->batch_n < f->batch_cap && f->batches_out >= out_max) return;
    size_t n = 0;
    for (size_t i = 0; i < f->batch_n; i++) {
        struct req *r = f->batch[i];
        if (r->answered) {
            r->in_redis--;
            req_release(r);
        } else {
            f->batch[n++] = r;
        }
    }
    f->batch_n = 0;
    if (n == 0) return;
    if (f->cluster) {
        send_groups(f, n);
        return;
    }
    struct route rt = { .conn = f->conn };
    if (send_batch(f, f->batch, n, &rt) == 0) return;
    for (size_t i = 0; i < n; i++) {
        struct req *r = f->batch[i];
        r->in_redis--;
        STAT_INC(f, unavailable);
        answer_failure(f, r, down_cause_of(rt.conn));
    }
}

/* A cluster: the n requests in f->batch go out as one batch per node (by the
 * slot map; at most max_batch each), in their order; a node's batch names
 * keys of several slots (the script's 'K' form, send_batch()). A request
 * whose slot the map does not name (not read yet) goes alone, declaring its
 * key, to any node, which answers MOVED: its requests then follow one
 * another in order. Those a batch cannot be sent for are answered by the
 * failure policy. */
static void send_groups(struct sluice_fleet *f, size_t n) {
    for (size_t i = 0; i < n; i++) {
        struct req *r = f->batch[i];
        unsigned slot = sluice__cluster_keyslot(r->data + r->raw_len, r->rkey_len);
        r->to = sluice__cluster_mapped(f->cluster, slot) ? sluice__cluster_route(f->cluster, slot) : NULL;
    }
    for (size_t i = 0; i < n; i++) {
        if (!f->batch[i]) continue;
        sluice__conn_t *c = f->batch[i]->to;
        if (!c) { /* an unmapped slot: alone */
            c = req_conn(f, f->batch[i]);
            f->group[0] = f->batch[i];
            f->batch[i] = NULL;
            struct route rt = { .conn = c };
            if (send_batch(f, f->group, 1, &rt) == 0) continue;
            f->group[0]->in_redis--;
            STAT_INC(f, unavailable);
            answer_failure(f, f->group[0], down_cause_of(c));
            continue;
        }
        size_t m = 0;
        for (size_t j = i; j < n && m < f->cfg.max_batch; j++) {
            if (f->batch[j] && f->batch[j]->to == c) {
                f->group[m++] = f->batch[j];
                f->batch[j] = NULL;
            }
        }
        struct route rt = { .conn = c };
        if (send_batch(f, f->group, m, &rt) == 0) continue;
        for (size_t k = 0; k < m; k++) {
            struct req *r = f->group[k];
            r->in_redis--;
            STAT_INC(f, unavailable);
            answer_failure(f, r, down_cause_of(c));
        }
    }
}

static void arm_timeout(struct sluice_fleet *f) {
    if (!f->whead) {
        evtimer_del(f->tmo);
        return;
    }
    uint64_t now = mono_now();
    sluice__fleet_arm(f->tmo, f->whead->deadline > now ? f->whead->deadline - now : 0);
}

static void insert_waiting(struct sluice_fleet *f, struct req *r) {
    struct req *p = f->wtail;
    while (p && p->deadline > r->deadline) p = p->prev;
    r->prev = p;
    r->next = p ? p->next : f->whead;
    if (r->next)
        r->next->prev = r;
    else
        f->wtail = r;
    if (p)
        p->next = r;
    else
        f->whead = r;
    r->listed = true;
    if (f->whead == r) arm_timeout(f);
}

static void process(struct sluice_fleet *f, struct req *r) {
    if (r->op == SLUICE_FLEET_CANCEL) {
        /* calls before the cancel go first, and their replies must not teach
         * the cache (they are sent with the sequence before the cancel) */
        flush_batch(f, true);
        cache_forget(f, r);
        if (f->fallback) {
            pthread_mutex_lock(&f->fb_mu);
            sluice_limiter_cancel(f->fallback, req_key(r), f->cfg.manual_time ? r->now : real_now());
            pthread_mutex_unlock(&f->fb_mu);
        }
    } else if (r->op == SLUICE_FLEET_CALL && cache_answer(f, r)) {
        return;
    } else if (r->op == SLUICE_FLEET_CALL && r->plans) {
        /* a call under another plan (or table) than the cache's entry may
         * convert the key: what the entry says, and what replies to the
         * requests sent before this one would teach, no longer holds */
        struct slot *s = cache_slot(f, r);
        if (s && slot_holds(s, r) && (s->gen != r->plans->gen || s->plan != r->plan)) cache_forget(f, r);
    }
    sluice__conn_t *c = req_conn(f, r);
    if (!sluice__conn_sendable(c)) {
        STAT_INC(f, unavailable);
        answer_failure(f, r, down_cause_of(c));
        return;
    }
    if (f->degraded) {
        STAT_INC(f, unavailable);
        answer_failure(f, r, SLUICE_ETIMEDOUT);
        return;
    }
    if (mono_now() >= r->deadline) {
        STAT_INC(f, timeouts);
        answer_failure(f, r, SLUICE_ETIMEDOUT);
        return;
    }
    if (r->op != SLUICE_FLEET_CANCEL) {
        /* decided in a batch with the requests queued beside it (flush_batch:
         * sent now, or at the next reply while two batches are out) */
        insert_waiting(f, r);
        if (f->batch_n == f->batch_cap) flush_batch(f, true);
        r->in_redis++; /* held by f->batch */
        f->batch[f->batch_n++] = r;
        if (f->batch_n == f->batch_cap) flush_batch(f, true);
        return;
    }
    if (send_req(f, r) != 0) {
        STAT_INC(f, unavailable);
        answer_failure(f, r, SLUICE_ENOTCONN);
        return;
    }
    insert_waiting(f, r);
}

static void wake_cb(evutil_socket_t fd, short what, void *arg) {
    (void)fd;
    (void)what;
    struct sluice_fleet *f = arg;
    pthread_mutex_lock(&f->mu);
    struct sluice__loop_wait *w = f->free_wait;
    pthread_mutex_unlock(&f->mu);
    if (w) { /* sluice_fleet_free() from another thread: freed here, then told */
        free_on_loop(f);
        sluice__loop_wait_done(w);
        return;
    }
    pthread_mutex_lock(&f->mu);
    struct req *q = f->qhead;
    f->qhead = f->qtail = NULL;
    f->wake_armed = false;
    pthread_mutex_unlock(&f->mu);
    while (q) {
        struct req *next = q->qnext;
        q->qnext = NULL;
        process(f, q);
        q = next;
    }
    flush_batch(f, false);
}

static void tmo_cb(evutil_socket_t fd, short what, void *arg) {
    (void)fd;
    (void)what;
    struct sluice_fleet *f = arg;
    uint64_t now = mono_now();
    while (f->whead && f->whead->deadline <= now) {
        struct req *r = f->whead;
        STAT_INC(f, timeouts);
        if (r->in_redis && !f->degraded && sluice__conn_sendable(f->conn)) {
            /* Redis is late: answer new requests by the failure policy until a
             * reply comes; reconnect if none comes for stall_ns */
            __atomic_store_n(&f->degraded, true, __ATOMIC_RELAXED);
            sluice__fleet_arm(f->stall, f->cfg.stall_ns);
        }
        answer_failure(f, r, SLUICE_ETIMEDOUT);
    }
    arm_timeout(f);
    flush_batch(f, false); /* leaves out the requests just answered */
}

/* ------------------------------------------------------------------ replies */

/* What the reply reader needs to know of a request (fleet-reply.c). */
static struct sluice__fleet_ask ask_of(const struct sluice_fleet *f, const struct req *r,
                                       struct sluice__fleet_rate *q) {
    struct sluice__fleet_ask a;
    a.op = r->op;
    a.cost = r->cost;
    a.now = r->now;
    a.manual = f->cfg.manual_time;
    a.plan = r->plan;
    if (r->plans) {
        a.n = plan_rates(r, q);
        a.q = q;
    } else {
        a.n = 0;
        a.q = &f->rate;
    }
    return a;
}

/* Any reply: Redis is alive. */
static void alive(struct sluice_fleet *f) {
    __atomic_store_n(&f->degraded, false, __ATOMIC_RELAXED);
    evtimer_del(f->stall);
}

/* The code of an error reply (sluice__redis_error_code()), counted by class. */
/* Counts an error of Redis's by its class (a reply, or the refusal of a
 * connection's setup). */
static void count_error_class(struct sluice_fleet *f, int code) {
    switch (code) {
    case SLUICE_EAUTH: STAT_INC(f, auth_errors); break;
    case SLUICE_ENOPERM: STAT_INC(f, noperm_errors); break;
    case SLUICE_EOOM: STAT_INC(f, oom_errors); break;
    case SLUICE_EREADONLY: STAT_INC(f, readonly_errors); break;
    default: STAT_INC(f, redis_errors); break;
    }
}

static int error_reply_code(struct sluice_fleet *f, const redisReply *rep) {
    int code = sluice__redis_error_code(rep->str, rep->len);
    count_error_class(f, code);
    return code;
}

/* An error reply is about the command, not the connection: Redis answered,
 * so the connection stays (OOM, NOPERM, NOAUTH... get the same answer on a
 * new one). Except READONLY/MASTERDOWN: this node cannot take writes (a
 * replica, or one whose primary is down), so it is left: dropped and
 * reconnected (with a Sentinel address, the reconnect asks the sentinels for
 * the primary again: sentinel.h). CLUSTERDOWN or TRYAGAIN from a Redis
 * Cluster: the slot map is read again. */
static void after_error_reply(struct sluice_fleet *f, sluice__conn_t *c, int code) {
    if (code == SLUICE_EREADONLY) drop_conn(c, code);
    /* a Redis Cluster that cannot serve the slot now: its map may have changed */
    if (code == SLUICE_ECLUSTERDOWN && f->cluster) sluice__cluster_refresh(f->cluster);
}

/* The reply to a cancel (DEL). */
static void reply_cb(void *arg, redisReply *rep, int err) {
    struct req *r = arg;
    struct sluice_fleet *f = r->f;
    r->in_redis--;
    __atomic_fetch_sub(&f->st.in_flight, 1, __ATOMIC_RELAXED);
    if (!rep) {
        /* the connection is gone (or being freed) */
        if (r->answered)
            req_release(r);
        else if (f->closing)
            answer_closed(f, r);
        else
            answer_failure(f, r, err ? err : SLUICE_ENOTCONN);
        return;
    }
    alive(f);
    if (rep->type == REDIS_REPLY_ERROR && follow_del_redirect(f, r, rep)) return;
    if (rep->type == REDIS_REPLY_ERROR) {
        int code = error_reply_code(f, rep);
        sluice__conn_t *c = req_conn(f, r); /* before r is freed */
        if (!r->answered)
            answer_failure(f, r, code); /* frees r */
        else
            req_release(r);
        after_error_reply(f, c, code);
        flush_batch(f, false);
        return;
    }
    if (rep->type != REDIS_REPLY_INTEGER) {
        STAT_INC(f, bad_replies);
        if (!r->answered)
            answer_failure(f, r, SLUICE_EPROTO); /* frees r */
        else
            req_release(r);
        drop_connection(f, SLUICE_EPROTO);
        return;
    }
    sluice_fleet_result_t res;
    memset(&res, 0, sizeof res);
    res.source = SLUICE_FLEET_SOURCE_REDIS;
    if (!r->answered)
        answer(f, r, &res);
    else
        req_release(r);
    flush_batch(f, false);
}

/* Sends a batch's requests once more by `rt` (after a redirection or a
 * NOSCRIPT), and frees the batch: those answered meanwhile are released,
 * the others held for the resend, or answered by the failure policy when it
 * cannot be sent (`unavailable`: counted so). */
static void resend(struct sluice_fleet *f, struct batch *b, const struct route *rt, bool unavailable) {
    size_t m = 0;
    for (size_t i = 0; i < b->n; i++) {
        struct req *r = b->r[i];
        if (r->answered)
            req_release(r);
        else
            b->r[m++] = r;
    }
    for (size_t i = 0; i < m; i++) b->r[i]->in_redis++; /* held for the resend */
    if (m && send_batch(f, b->r, m, rt) != 0) {
        for (size_t i = 0; i < m; i++) {
            b->r[i]->in_redis--;
            if (unavailable) STAT_INC(f, unavailable);
            answer_failure(f, b->r[i], down_cause_of(rt->conn));
        }
    }
    free(b);
}

/* A Redis Cluster node's MOVED or ASK: the batch goes to the node it names
 * (MOVED also updates the slot map; ASK sends ASKING first and leaves the
 * map alone), at most MAX_REDIRECTS times. @return whether it was followed
 * (then `b` is freed and its requests resent or answered). */
#define MAX_REDIRECTS 5
static bool follow_redirect(struct sluice_fleet *f, struct batch *b, const redisReply *rep) {
    bool ask;
    sluice__conn_t *c;
    if (b->redirects >= MAX_REDIRECTS || !sluice__cluster_follow(f->cluster, rep->str, rep->len, b->conn, &c, &ask))
        return false;
    struct route rt = { .conn = c, .asking = ask, .redirects = b->redirects + 1 };
    resend(f, b, &rt, true);
    flush_batch(f, false);
    return true;
}

/* Sends request `r` (undecided: holding no in_redis count) once more alone,
 * declaring its key, to its slot's node by the map: a MOVED or ASK then
 * names that key's slot and is followed (follow_redirect()), at most
 * MAX_REDIRECTS times in all (`redirects` so far); answered by the failure
 * policy when it cannot be sent. */
static void send_alone(struct sluice_fleet *f, struct req *r, unsigned redirects) {
    struct route rt = { .conn = req_conn(f, r), .redirects = redirects };
    STAT_INC(f, elsewhere);
    r->in_redis++; /* held for the resend */
    if (send_batch(f, &r, 1, &rt) != 0) {
        r->in_redis--;
        STAT_INC(f, unavailable);
        answer_failure(f, r, down_cause_of(rt.conn));
    }
}

/* A node refused a batch of keys of several slots (b->cross) as a whole,
 * before writing anything, for one key: a MOVED or ASK, or Redis's "non
 * local key" error. Not expected (the batch declares no key, and the script
 * reads each key with redis.pcall and answers 'ELSEWHERE' for it alone); a
 * guard, so that such a refusal still gets each request decided once. The
 * map is taken from a MOVED (and read again), and each request goes once
 * more alone (send_alone()). @return whether `rep` was such a refusal (then
 * `b` is freed and its requests resent or answered). */
static bool split_cross(struct sluice_fleet *f, struct batch *b, const redisReply *rep) {
    bool ask;
    unsigned slot;
    char host[256];
    int port;
    if (!b->cross) return false;
    bool redirect = sluice__cluster_redirect_parse(rep->str, rep->len, &ask, &slot, host, sizeof host, &port) == 0;
    static const char nl[] = "non local key";
    bool nonlocal = false;
    for (size_t i = 0; !redirect && !nonlocal && i + sizeof nl - 1 <= rep->len; i++)
        nonlocal = memcmp(rep->str + i, nl, sizeof nl - 1) == 0;
    if (!redirect && !nonlocal) return false;
    if (redirect && !ask && host[0]) sluice__cluster_moved(f->cluster, slot, host, port);
    if (!redirect || !host[0]) sluice__cluster_refresh(f->cluster);
    for (size_t i = 0; i < b->n; i++) {
        struct req *r = b->r[i];
        if (r->answered)
            req_release(r);
        else
            send_alone(f, r, b->redirects + 1);
    }
    free(b);
    flush_batch(f, false);
    return true;
}

/* The reply to a batch: each request answered in order. */
static void batch_reply_cb(void *arg, redisReply *rep, int err) {
    struct batch *b = arg;
    struct sluice_fleet *f = b->f;
    size_t n = b->n;
    for (size_t i = 0; i < n; i++) b->r[i]->in_redis--;
    __atomic_fetch_sub(&f->st.in_flight, (uint64_t)n, __ATOMIC_RELAXED);
    f->batches_out--;
    if (!rep) {
        /* the connection is gone (or being freed) */
        int cause = err ? err : SLUICE_ENOTCONN;
        for (size_t i = 0; i < n; i++) {
            struct req *r = b->r[i];
            if (r->answered)
                req_release(r);
            else if (f->closing)
                answer_closed(f, r);
            else
                answer_failure(f, r, cause);
        }
        free(b);
        if (!f->closing) flush_batch(f, false);
        return;
    }
    alive(f);
    int next = sluice__script_reply(&f->script, b->conn, b->fcalled, b->evalled, rep);
    if (next == SLUICE_ENOMEM) drop_conn(b->conn, SLUICE_ENOMEM);
    if (rep->type == REDIS_REPLY_ERROR && split_cross(f, b, rep)) return;
    if (rep->type == REDIS_REPLY_ERROR && follow_redirect(f, b, rep)) return;
    if (next == SLUICE__SCRIPT_AGAIN_EVAL || next == SLUICE__SCRIPT_AGAIN) {
        /* the script lost (NOSCRIPT, or its function after FUNCTION FLUSH):
         * the same batch once more with EVAL; FCALL refused (OOM, NOPERM):
         * once more with EVALSHA */
        if (next == SLUICE__SCRIPT_AGAIN_EVAL) STAT_INC(f, noscript);
        struct route rt = {
            .conn = b->conn, .eval = next == SLUICE__SCRIPT_AGAIN_EVAL, .asking = b->asking, .redirects = b->redirects
        };
        resend(f, b, &rt, false);
        flush_batch(f, false);
        return;
    }
    if (rep->type == REDIS_REPLY_ERROR) {
        /* the script wrote nothing (it checks everything first): each request
         * is answered with the error's class */
        int code = error_reply_code(f, rep);
        for (size_t i = 0; i < n; i++) {
            if (b->r[i]->answered)
                req_release(b->r[i]);
            else
                answer_failure(f, b->r[i], code);
        }
        sluice__conn_t *conn = b->conn;
        free(b);
        after_error_reply(f, conn, code);
        flush_batch(f, false);
        return;
    }
    /* a reply of the wrong shape: the stream cannot be trusted */
    bool shape = rep->type == REDIS_REPLY_ARRAY && rep->elements == 3 * n;
    bool bad = !shape;
    for (size_t i = 0; i < n; i++) {
        struct req *r = b->r[i];
        sluice_fleet_result_t res;
        uint64_t t = 0;
        fl_u128 tat[SLUICE_PLAN_QUOTAS_MAX] = { 0 };
        bool teach = true;
        struct sluice__fleet_rate q[SLUICE_PLAN_QUOTAS_MAX];
        struct sluice__fleet_ask a = ask_of(f, r, q);
        int rc = shape ? sluice__fleet_read_answer(&a, rep->element + 3 * i, &res, &t, tat, &teach) : -1;
        if (rc == 2 && b->cross) {
            /* its key is another node's (Redis Cluster): not decided here;
             * sent alone, after the requests before it in this batch, so
             * that a key's requests stay in order */
            if (r->answered)
                req_release(r);
            else
                send_alone(f, r, b->redirects + 1);
            continue;
        }
        if (rc == 2) rc = 1; /* 'ELSEWHERE' from a run that declared its key: not Sluice's */
        if (rc == 1) {
            /* this key's value is not Sluice state: it fails alone */
            if (r->answered) {
                req_release(r);
            } else {
                STAT_INC(f, bad_values);
                answer_failure(f, r, SLUICE_EBADVALUE);
            }
            continue;
        }
        if (rc != 0) {
            if (shape) bad = true;
            if (!r->answered)
                answer_failure(f, r, SLUICE_EPROTO); /* frees r */
            else
                req_release(r);
            continue;
        }
        if (!f->cfg.manual_time) {
            /* the script ran after the request was sent: server - local <= t - sent */
            f->off = (int64_t)(t - r->sent_real);
            f->have_off = true;
        }
        if (teach) cache_learn(f, r, t, tat);
        if (r->answered) {
            req_release(r);
            continue;
        }
        if (r->op == SLUICE_FLEET_CALL) {
            if (res.decision.kind == SLUICE_EMITTED)
                STAT_INC(f, redis_admitted);
            else
                STAT_INC(f, redis_dropped);
        }
        answer(f, r, &res);
    }
    sluice__conn_t *conn = b->conn;
    free(b);
    if (bad) {
        STAT_INC(f, bad_replies);
        drop_conn(conn, SLUICE_EPROTO);
    }
    flush_batch(f, false);
}

/* ------------------------------------------------------------------ public API */

/* Connects to config->url (parsed), or to host:port over TCP. */
static int open_conn(struct sluice_fleet *f, const sluice_fleet_config_t *config) {
    sluice__redis_url_t url;
    sluice__redis_node_t node;
    char why[320];
    int rc;
    if (config->url) {
        rc = sluice__redis_url_parse(config->url, &url, why, sizeof why);
        if (rc != 0) {
            snprintf(f->conn_msg, sizeof f->conn_msg, "%s", why);
            return rc;
        }
    } else {
        memset(&url, 0, sizeof url);
        node.host = (char *)(config->host ? config->host : "127.0.0.1");
        node.port = config->port ? config->port : 6379;
        url.topology = SLUICE__REDIS_SINGLE;
        url.nodes = &node;
        url.n_nodes = 1;
    }
    sluice__conn_opts_t o;
    memset(&o, 0, sizeof o);
    uint64_t timeout = f->cfg.timeout_ns;
    o.connect_timeout_ns = timeout * 10 > 1000 * MS ? timeout * 10 : 1000 * MS;
    o.backoff_min_ns = f->cfg.backoff_min_ns;
    o.backoff_max_ns = f->cfg.backoff_max_ns;
    o.on_event = conn_event;
    o.owner = f;
    if (url.topology == SLUICE__REDIS_CLUSTER) {
        /* one conn per primary, and one batch per node: room for up to 8
         * nodes' batches of max_batch before a flush (send_groups()) */
        f->batch_cap = f->cfg.max_batch * 8;
        struct req **v = realloc(f->batch, f->batch_cap * sizeof *v);
        if (v) f->batch = v;
        f->group = malloc(f->cfg.max_batch * sizeof *f->group);
        if (!v || !f->group) {
            if (config->url) sluice__redis_url_free(&url);
            snprintf(f->conn_msg, sizeof f->conn_msg, "out of memory");
            return SLUICE_ENOMEM;
        }
    }
    rc = sluice__topology_open(f->base, &url, &o, cluster_event, f, &f->conn, &f->sentinel, &f->cluster, why,
                               sizeof why);
    if (rc != 0) snprintf(f->conn_msg, sizeof f->conn_msg, "%s", why);
    if (config->url) sluice__redis_url_free(&url);
    return rc;
}

int sluice_fleet_new(sluice_fleet_t **out, struct event_base *base, const sluice_fleet_config_t *config) {
    if (!out || !base || !config) return SLUICE_EINVAL;
    const sluice_policy_t *p = &config->policy;
    if (p->kind != SLUICE_RATE) return SLUICE_EINVAL;
    int rc;
    const sluice_plans_t *plans = config->plans;
    if (plans) {
        /* sluice_rate_plans(): the numbers are the plans' quotas */
        if (p->limit || p->per_ns || p->burst || config->fallback_policy.kind) return SLUICE_EINVAL;
        if (sluice_plans_check(plans, NULL, 0) != 0) return SLUICE_EINVAL;
        if (config->fallback_plans && (sluice_plans_check(config->fallback_plans, NULL, 0) != 0 ||
                                       !same_plan_names(plans, config->fallback_plans)))
            return SLUICE_EINVAL;
    } else {
        if (config->fallback_plans) return SLUICE_EINVAL;
        rc = sluice_policy_validate(p);
        if (rc) return rc;
    }
    if (config->prefix_len > 256 || (config->prefix_len && !config->prefix)) return SLUICE_EINVAL;
    if (config->local_clock && config->manual_time) return SLUICE_EINVAL;
    if (config->on_failure != SLUICE_FLEET_FAIL_CLOSED && config->on_failure != SLUICE_FLEET_FAIL_OPEN &&
        config->on_failure != SLUICE_FLEET_FAIL_LOCAL)
        return SLUICE_EINVAL;
    sluice_policy_t fb = config->fallback_policy.kind ? config->fallback_policy : *p;
    if (config->on_failure == SLUICE_FLEET_FAIL_LOCAL && !plans) {
        if (fb.kind != SLUICE_RATE) return SLUICE_EINVAL;
        rc = sluice_policy_validate(&fb);
        if (rc) return rc;
    }

    struct sluice_fleet *f = calloc(1, sizeof *f);
    if (!f) return SLUICE_ENOMEM;
    f->base = base;
    f->cfg = *config;
    sluice_fleet_config_t *c = &f->cfg;
    if (!c->port) c->port = 6379;
    if (!c->timeout_ns) c->timeout_ns = 50 * MS;
    if (!c->closed_retry_ns) c->closed_retry_ns = 1000 * MS;
    if (!c->backoff_min_ns) c->backoff_min_ns = 20 * MS;
    if (!c->backoff_max_ns) c->backoff_max_ns = 1000 * MS;
    if (c->backoff_max_ns < c->backoff_min_ns) c->backoff_max_ns = c->backoff_min_ns;
    if (!c->stall_ns) c->stall_ns = c->timeout_ns * 10 > 1000 * MS ? c->timeout_ns * 10 : 1000 * MS;
    if (!c->cache_ttl_ns) c->cache_ttl_ns = 1000 * MS;
    if (!c->manual_ttl_extra_ms) c->manual_ttl_extra_ms = 600000;
    /* The local clock is manual time whose every `now` is this process's
     * real time (submit()); keys' expiries keep the extra margin, which
     * covers the servers' clock skew. */
    if (c->local_clock) c->manual_time = true;
    if (!c->max_batch) c->max_batch = 32;
    if (c->max_batch > 1024) c->max_batch = 1024;

    f->rate.limit = p->limit;
    f->rate.per = (uint64_t)p->per_ns;
    f->rate.burst = p->burst ? p->burst : p->limit;
    f->rate.bper = (fl_u128)f->rate.burst * f->rate.per;
    sluice__fleet_u128_str(f->rate.limit, f->limit_s);
    sluice__fleet_u128_str(f->rate.bper, f->bper_s);
    sluice__fleet_u128_str((fl_u128)UINT64_MAX * f->rate.limit, f->cend_s);
    sluice__fleet_u128_str(c->manual_time ? c->manual_ttl_extra_ms : 0, f->extra_s);
    sluice__script_init(&f->script, sluice_fleet_script(), sluice__fleet_script_len());

    /* the prefix as it opens every Redis name: "<N>:<E(prefix)>:" (fleet_key.c) */
    const char *pre = c->prefix_len ? c->prefix : "sluice";
    size_t pre_len = c->prefix_len ? c->prefix_len : 6;
    f->prefix = malloc(22 + 3 * pre_len);
    if (f->prefix) f->prefix_len = sluice__fleet_prefix_encode(pre, pre_len, f->prefix);
    c->host = NULL;
    c->url = NULL;
    c->prefix = NULL;

    f->batch_cap = c->max_batch;
    f->batch = malloc(c->max_batch * sizeof *f->batch);
    if (!f->batch) goto nomem;

    if (c->cache_slots != SIZE_MAX) {
        size_t n = 1, want = c->cache_slots ? c->cache_slots : 4096;
        if (want > ((size_t)1 << 24)) want = (size_t)1 << 24;
        while (n < want) n <<= 1;
        f->cache = calloc(n, sizeof *f->cache);
        f->cache_mask = n - 1;
        if (!f->cache) goto nomem;
    }
    if (sluice__random_seed(f->hash_seed) != 0) goto nomem;

    if (plans) {
        f->plans_gen = 1;
        f->has_plans = true;
        if (fplans_build(plans, f->plans_gen, &f->plans) != 0) goto nomem;
        if (c->on_failure == SLUICE_FLEET_FAIL_LOCAL &&
            fallback_of_plans(config->fallback_plans ? config->fallback_plans : plans, c->manual_time, &f->fallback) !=
                0)
            goto nomem;
    }
    c->plans = c->fallback_plans = NULL; /* copied */
    if (c->on_failure == SLUICE_FLEET_FAIL_LOCAL && !plans) {
        sluice_config_t lc;
        memset(&lc, 0, sizeof lc);
        lc.policy = fb;
        lc.start_ns = c->manual_time ? 0 : real_now();
        if (sluice_limiter_new(&f->fallback, &lc) != 0) goto nomem;
    }

    if (pthread_mutex_init(&f->fb_mu, NULL) != 0) goto nomem;
    if (pthread_mutex_init(&f->mu, NULL) != 0) {
        pthread_mutex_destroy(&f->fb_mu);
        goto nomem;
    }
    f->wake = event_new(base, -1, 0, wake_cb, f);
    f->tmo = evtimer_new(base, tmo_cb, f);
    f->stall = evtimer_new(base, stall_cb, f);
    if (!f->prefix || !f->wake || !f->tmo || !f->stall) {
        pthread_mutex_destroy(&f->mu);
        pthread_mutex_destroy(&f->fb_mu);
        goto nomem;
    }
    rc = open_conn(f, config);
    if (rc != 0) {
        pthread_mutex_destroy(&f->mu);
        pthread_mutex_destroy(&f->fb_mu);
        goto fail;
    }
    *out = f;
    return 0;

nomem:
    rc = SLUICE_ENOMEM;
fail:
    if (f->wake) event_free(f->wake);
    if (f->tmo) event_free(f->tmo);
    if (f->stall) event_free(f->stall);
    if (f->fallback) sluice_limiter_free(f->fallback);
    fplans_unref(f->plans);
    free(f->batch);
    free(f->group);
    free(f->cache);
    free(f->prefix);
    sluice__script_free(&f->script);
    free(f);
    return rc;
}

/* Queues a request; `plan` is its plan's index for a call or quota read of a
 * limiter of plans (-1: plan 0; a limiter without plans takes only -1). */
static int submit(struct sluice_fleet *f, sluice_fleet_op_t op, sluice_key_t key, int64_t plan, uint64_t cost,
                  uint64_t now, sluice_fleet_fn fn, void *user) {
    if (!f || (op != SLUICE_FLEET_CANCEL && !fn)) return SLUICE_EINVAL;
    if (f->cfg.local_clock) now = real_now();
    if (op != SLUICE_FLEET_CANCEL && (cost < 1 || cost > SLUICE_RATE_MAX)) return SLUICE_ERANGE;
    char ibuf[24];
    const char *kb;
    size_t kl;
    char tag;
    if (key.kind == SLUICE_KEY_U64) {
        kl = sluice__fleet_u128_str(key.u64, ibuf);
        kb = ibuf;
        tag = 'u';
    } else if (key.kind == SLUICE_KEY_BYTES) {
        if (key.len > SLUICE_KEY_MAX) return SLUICE_EKEYLEN;
        if (key.len && !key.bytes) return SLUICE_EINVAL;
        kb = key.bytes;
        kl = key.len;
        tag = 'b';
    } else {
        return SLUICE_EINVAL;
    }
    size_t raw = key.kind == SLUICE_KEY_BYTES ? key.len : 0;
    /* Redis key: {<N>:<E(prefix)>:<tag><E(key)>}, unambiguous, one hash slot (fleet_key.c) */
    size_t rlen = f->prefix_len + 3 + sluice__fleet_escaped_len(kb, kl);
    struct req *r = malloc(sizeof *r + raw + rlen);
    if (!r) return SLUICE_ENOMEM;
    memset(r, 0, sizeof *r);
    r->f = f;
    r->op = op;
    r->cost = op == SLUICE_FLEET_CANCEL ? 1 : cost;
    r->now = now;
    r->fn = fn;
    r->user = user;
    r->kind = key.kind;
    r->u64 = key.u64;
    r->raw_len = raw;
    if (raw) memcpy(r->data, key.bytes, raw);
    char *k = r->data + raw;
    r->rkey_len = sluice__fleet_key_write(k, f->prefix, f->prefix_len, tag, kb, kl);
    r->hash = name_hash(f, k, r->rkey_len);
    r->deadline = mono_now() + f->cfg.timeout_ns;

    pthread_mutex_lock(&f->mu);
    if (f->closed) {
        pthread_mutex_unlock(&f->mu);
        free(r);
        return SLUICE_ECLOSED;
    }
    if (op != SLUICE_FLEET_CANCEL && f->plans) {
        uint32_t idx = plan < 0 ? 0 : (uint32_t)plan;
        if (plan > (int64_t)UINT32_MAX || idx >= f->plans->nplans) {
            pthread_mutex_unlock(&f->mu);
            free(r);
            return SLUICE_ENOPLAN;
        }
        r->plans = fplans_ref(f->plans);
        r->plan = idx;
    }
    if (f->qtail)
        f->qtail->qnext = r;
    else
        f->qhead = r;
    f->qtail = r;
    bool wake = !f->wake_armed;
    f->wake_armed = true;
    if (op == SLUICE_FLEET_CALL)
        STAT_INC(f, calls);
    else if (op == SLUICE_FLEET_QUOTA)
        STAT_INC(f, quotas);
    else
        STAT_INC(f, cancels);
    if (wake) event_active(f->wake, 0, 0);
    pthread_mutex_unlock(&f->mu);
    return 0;
}

int sluice_fleet_call(sluice_fleet_t *f, sluice_key_t key, uint64_t cost, uint64_t now, sluice_fleet_fn fn,
                      void *user) {
    return submit(f, SLUICE_FLEET_CALL, key, -1, cost, now, fn, user);
}

int sluice_fleet_quota(sluice_fleet_t *f, sluice_key_t key, uint64_t cost, uint64_t now, sluice_fleet_fn fn,
                       void *user) {
    return submit(f, SLUICE_FLEET_QUOTA, key, -1, cost, now, fn, user);
}

int sluice_fleet_cancel(sluice_fleet_t *f, sluice_key_t key, uint64_t now, sluice_fleet_fn fn, void *user) {
    return submit(f, SLUICE_FLEET_CANCEL, key, -1, 1, now, fn, user);
}

/* A plans request: only on a limiter of plans (whose table may change: the
 * index is checked under the lock, in submit()). */
static int submit_plan(struct sluice_fleet *f, sluice_fleet_op_t op, sluice_key_t key, uint32_t plan, uint64_t cost,
                       uint64_t now, sluice_fleet_fn fn, void *user) {
    if (!f || !f->has_plans) return SLUICE_EINVAL;
    return submit(f, op, key, plan, cost, now, fn, user);
}

int sluice_fleet_call_plan(sluice_fleet_t *f, sluice_key_t key, uint32_t plan, uint64_t cost, uint64_t now,
                           sluice_fleet_fn fn, void *user) {
    return submit_plan(f, SLUICE_FLEET_CALL, key, plan, cost, now, fn, user);
}

int sluice_fleet_quota_plan(sluice_fleet_t *f, sluice_key_t key, uint32_t plan, uint64_t cost, uint64_t now,
                            sluice_fleet_fn fn, void *user) {
    return submit_plan(f, SLUICE_FLEET_QUOTA, key, plan, cost, now, fn, user);
}

int sluice_fleet_plan_index(sluice_fleet_t *f, const char *name, size_t len, uint32_t *out) {
    if (!f || !f->has_plans || !out || (!name && len)) return SLUICE_EINVAL;
    pthread_mutex_lock(&f->mu);
    int64_t i = fplans_find(f->plans, name ? name : "", len);
    pthread_mutex_unlock(&f->mu);
    if (i < 0) return SLUICE_ENOPLAN;
    *out = (uint32_t)i;
    return 0;
}

int sluice_fleet_set_plans(sluice_fleet_t *f, const sluice_plans_t *plans, const sluice_plans_t *fallback) {
    if (!f || !f->has_plans || !plans || sluice_plans_check(plans, NULL, 0) != 0) return SLUICE_EINVAL;
    if (fallback && (sluice_plans_check(fallback, NULL, 0) != 0 || !same_plan_names(plans, fallback)))
        return SLUICE_EINVAL;
    pthread_mutex_lock(&f->mu);
    uint64_t gen = ++f->plans_gen;
    pthread_mutex_unlock(&f->mu);
    struct fplans *np;
    int rc = fplans_build(plans, gen, &np);
    if (rc) return rc;
    if (f->fallback) {
        sluice_plans_t copy = fallback ? *fallback : *plans;
        copy.max_quotas = 0;
        pthread_mutex_lock(&f->fb_mu);
        rc = sluice_limiter_set_plans(f->fallback, &copy);
        pthread_mutex_unlock(&f->fb_mu);
        if (rc) {
            fplans_unref(np);
            return rc == SLUICE_ENOMEM ? rc : SLUICE_EINVAL;
        }
    }
    pthread_mutex_lock(&f->mu);
    struct fplans *old = f->plans;
    f->plans = np;
    pthread_mutex_unlock(&f->mu);
    fplans_unref(old); /* the requests made under it hold their own references */
    return 0;
}

int sluice_fleet_new_on_loop(sluice_fleet_t **out, sluice_loop_t *loop, const sluice_fleet_config_t *config) {
    if (!out || !loop) return SLUICE_EINVAL;
    /* other threads call in: libevent's locks must be on (sluice_loop.h) */
    if (sluice_threads_init() != 0) return SLUICE_ENOMEM;
    sluice_fleet_t *f = NULL;
    int rc = sluice_fleet_new(&f, sluice_loop_base(loop), config);
    if (rc != 0) return rc;
    f->loop = loop;
    *out = f;
    return 0;
}

void sluice_fleet_free(sluice_fleet_t *f) {
    if (!f) return;
    if (f->loop && !sluice_loop_in_thread(f->loop)) {
        /* The wake event frees it on the loop thread; this thread waits. */
        struct sluice__loop_wait w = SLUICE__LOOP_WAIT_INIT;
        pthread_mutex_lock(&f->mu);
        f->free_wait = &w;
        f->wake_armed = true;
        event_active(f->wake, 0, 0);
        pthread_mutex_unlock(&f->mu);
        sluice__loop_wait(&w);
        return;
    }
    free_on_loop(f);
}

/* sluice_fleet_free() on the loop thread (or with the loop stopped). */
static void free_on_loop(struct sluice_fleet *f) {
    f->closing = true;
    pthread_mutex_lock(&f->mu);
    f->closed = true;
    struct req *q = f->qhead;
    f->qhead = f->qtail = NULL;
    pthread_mutex_unlock(&f->mu);
    while (q) {
        struct req *next = q->qnext;
        answer_closed(f, q);
        q = next;
    }
    for (size_t i = 0; i < f->batch_n; i++) { /* held, never sent */
        struct req *r = f->batch[i];
        r->in_redis--;
        if (r->answered)
            req_release(r);
        else
            answer_closed(f, r);
    }
    f->batch_n = 0;
    while (f->whead) answer_closed(f, f->whead);
    sluice__sentinel_free(f->sentinel); /* first: it may hold an answer for the conn */
    sluice__conn_free(f->conn);         /* returns every request it holds (NULL replies) */
    f->conn = NULL;
    sluice__cluster_free(f->cluster); /* the same, for each node's conn */
    f->cluster = NULL;
    event_free(f->wake);
    event_free(f->tmo);
    event_free(f->stall);
    if (f->fallback) sluice_limiter_free(f->fallback);
    if (f->cache) {
        for (size_t i = 0; i <= f->cache_mask; i++) {
            free(f->cache[i].key);
            free(f->cache[i].ptat);
        }
        free(f->cache);
    }
    pthread_mutex_destroy(&f->mu);
    pthread_mutex_destroy(&f->fb_mu);
    fplans_unref(f->plans);
    free(f->batch);
    free(f->group);
    free(f->prefix);
    sluice__script_free(&f->script);
    free(f);
}

int sluice_fleet_stats(sluice_fleet_t *f, sluice_fleet_stats_t *out) {
    if (!f || !out) return SLUICE_EINVAL;
#define LD(x) out->x = __atomic_load_n(&f->st.x, __ATOMIC_RELAXED)
    LD(calls);
    LD(quotas);
    LD(cancels);
    LD(redis_admitted);
    LD(redis_dropped);
    LD(cache_dropped);
    LD(failure_admitted);
    LD(failure_dropped);
    LD(fallback_admitted);
    LD(fallback_dropped);
    LD(timeouts);
    LD(unavailable);
    LD(bad_replies);
    LD(noscript);
    LD(connects);
    LD(disconnects);
    LD(in_flight);
    LD(closed);
    LD(batches);
    LD(bad_values);
    LD(auth_errors);
    LD(noperm_errors);
    LD(oom_errors);
    LD(readonly_errors);
    LD(redis_errors);
#undef LD
    return 0;
}

uint64_t sluice__fleet_elsewhere(sluice_fleet_t *f) { return __atomic_load_n(&f->st.elsewhere, __ATOMIC_RELAXED); }

bool sluice_fleet_connected(sluice_fleet_t *f) {
    if (f && f->cluster) return sluice__cluster_ready(f->cluster);
    return f && sluice__conn_ready(f->conn) && !__atomic_load_n(&f->degraded, __ATOMIC_RELAXED);
}

int sluice_fleet_last_error(sluice_fleet_t *f, char *msg, size_t msg_len) {
    if (!f) return SLUICE_EINVAL;
    pthread_mutex_lock(&f->mu);
    int err = f->conn_err;
    if (msg && msg_len) snprintf(msg, msg_len, "%s", f->conn_msg);
    pthread_mutex_unlock(&f->mu);
    return err;
}
