/* sluice_c.c — "sluice-c": the C core on a manual clock (throttle-hot,
 * debounce-rearm, fire + memory, spray, quotas on one thread), the loop
 * layer on the real clock (lateness, threads, quotas on two threads);
 * "sluice-c-1q" is quotas with one quota. */
#include "cbench-internal.h"
#include "sluice.h"
#include "sluice_loop.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

_Thread_local uint64_t cb_consumed;

#define T0 (1 * CB_MS)

static uint64_t g_emitted;

static void core_event(void *user, const sluice_event_t *ev) {
    (void)user;
    if (ev->kind == SLUICE_EVENT_EMIT) {
        cb_consume(ev->token);
        g_emitted++;
    }
}

static sluice_limiter_t *make_core_plans(sluice_policy_t policy, size_t max_keys, const sluice_plans_t *plans) {
    sluice_config_t cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.policy = policy;
    cfg.plans = plans;
    cfg.on_event = core_event;
    /* the tokens are loop indices that own nothing, and core_event ignores
     * drops: what a user who does not need them writes (libevent-timers
     * reports nothing for a superseded value either) */
    cfg.emit_only = true;
    cfg.max_keys = max_keys;
    cfg.start_ns = 0;
    const char *seed = getenv("CBENCH_SEED"); /* diagnostics: a fixed hash key */
    if (seed) {
        cfg.fixed_seed = true;
        cfg.seed[0] = strtoull(seed, NULL, 0);
        cfg.seed[1] = cfg.seed[0] * 31 + 7;
    }
    sluice_limiter_t *l = NULL;
    int rc = sluice_limiter_new(&l, &cfg);
    if (rc != 0) {
        fprintf(stderr, "sluice-c: sluice_limiter_new: %s\n", sluice_strerror(rc));
        exit(3);
    }
    return l;
}

static sluice_limiter_t *make_core(sluice_policy_t policy, size_t max_keys) {
    return make_core_plans(policy, max_keys, NULL);
}

/* Submits order[0..ops) with the manual clock from `start`; stops early past
 * the budget. Returns the number of calls made. */
static size_t hot_loop(sluice_limiter_t *l, const cb_params_t *p, uint64_t start, uint64_t *elapsed) {
    sluice_decision_t d;
    size_t i = 0;
    uint64_t t0 = cb_now();
    while (i < p->ops) {
        size_t end = i + 4096 < p->ops ? i + 4096 : p->ops;
        for (; i < end; i++) {
            sluice_limiter_submit_u64(l, p->key[p->order[i]], i, cb_manual_now(start, i), &d);
            if (d.kind == SLUICE_EMITTED) cb_consume(i);
        }
        if (cb_over_budget(t0, p->budget_s)) break;
    }
    *elapsed = cb_now() - t0;
    return i;
}

static void finish_rate(cb_result_t *out, size_t ops, uint64_t wall, uint64_t cpu) {
    out->ops = ops;
    out->ns_per_op = ops ? (double)wall / (double)ops : -1;
    out->cpu_ns_per_op = ops ? (double)cpu / (double)ops : -1;
}

static int throttle_hot(const cb_params_t *p, cb_result_t *out) {
    sluice_limiter_t *l = make_core(sluice_throttle(3600 * (int64_t)CB_S, true, true, SLUICE_PICK_LATEST), 0);
    sluice_decision_t d;
    /* open every window (leading emission), then give each key a pending value */
    for (size_t k = 0; k < p->keys; k++) {
        sluice_limiter_submit(l, sluice_key_u64(p->key[k]), k, T0, &d);
        if (d.kind == SLUICE_EMITTED) cb_consume(k);
    }
    for (size_t k = 0; k < p->keys; k++) sluice_limiter_submit(l, sluice_key_u64(p->key[k]), k, T0 + 1, &d);
    uint64_t wall, c0 = cb_process_cpu();
    size_t n = hot_loop(l, p, T0 + 2, &wall);
    finish_rate(out, n, wall, cb_process_cpu() - c0);
    sluice_limiter_free(l);
    return 0;
}

static int debounce_rearm(const cb_params_t *p, cb_result_t *out) {
    sluice_limiter_t *l = make_core(sluice_debounce((int64_t)p->interval_ns, false, true, -1), 0);
    sluice_decision_t d;
    for (size_t k = 0; k < p->keys; k++) sluice_limiter_submit(l, sluice_key_u64(p->key[k]), k, T0, &d);
    uint64_t wall, c0 = cb_process_cpu();
    size_t n = hot_loop(l, p, T0 + 1, &wall);
    finish_rate(out, n, wall, cb_process_cpu() - c0);
    sluice_limiter_free(l);
    return 0;
}

/* N debounce keys submitted over one second of manual time (deadlines
 * spread over a second), then one advance past them all: ns per delivered
 * emission. The RSS readings around it give the memory figures. */
static int fire(const cb_params_t *p, cb_result_t *out) {
    sluice_limiter_t *l = make_core(sluice_debounce((int64_t)p->interval_ns, false, true, -1), 0);
    uint64_t rss0 = cb_rss();
    sluice_decision_t d;
    for (size_t k = 0; k < p->keys; k++) {
        uint64_t t = T0 + (uint64_t)((double)k * 1e9 / (double)p->keys);
        sluice_limiter_submit(l, sluice_key_u64(p->key[k]), k, t, &d);
    }
    uint64_t rss1 = cb_rss();
    g_emitted = 0;
    uint64_t c0 = cb_process_cpu(), t0 = cb_now();
    sluice_limiter_advance(l, T0 + CB_S + p->interval_ns + 2 * SLUICE_TICK_DEFAULT_NS, 0);
    uint64_t wall = cb_now() - t0, cpu = cb_process_cpu() - c0;
    uint64_t rss2 = cb_rss();
    out->delivered = g_emitted;
    finish_rate(out, g_emitted, wall, cpu);
    out->bytes_per_key = ((double)rss1 - (double)rss0) / (double)p->keys;
    out->idle_bytes_per_key = ((double)rss2 - (double)rss0) / (double)p->keys;
    sluice_limiter_free(l);
    return g_emitted == p->keys ? 0 : -1;
}

/* Unique keys past the cap: rate limiter (1 per minute), max_keys = cap. */
static int spray(const cb_params_t *p, cb_result_t *out) {
    sluice_limiter_t *l = make_core(sluice_rate(1, 60 * (int64_t)CB_S, 1), p->cap);
    cb_reset_peak_rss();
    uint64_t rss0 = cb_rss();
    sluice_decision_t d;
    uint64_t refused = 0;
    uint64_t c0 = cb_process_cpu(), t0 = cb_now();
    for (size_t i = 0; i < p->keys; i++) {
        int rc = sluice_limiter_submit(l, sluice_key_u64(p->key[i]), i, cb_manual_now(T0, i), &d);
        if (rc == SLUICE_EFULL)
            refused++;
        else if (rc == 0 && d.kind == SLUICE_EMITTED)
            cb_consume(i);
    }
    uint64_t wall = cb_now() - t0, cpu = cb_process_cpu() - c0;
    uint64_t peak = cb_peak_rss();
    finish_rate(out, p->keys, wall, cpu);
    out->refused = refused;
    out->peak_rss_bytes = peak > rss0 ? (double)(peak - rss0) : 0;
    size_t live = p->keys < p->cap ? p->keys : p->cap;
    out->bytes_per_key = out->peak_rss_bytes / (double)(live ? live : 1);
    sluice_limiter_free(l);
    return 0;
}

/* ------------------------------------------------------------ loop layer */

struct mt_late {
    cb_late_t late;
    atomic_size_t delivered;
};

static void mt_event(void *user, const sluice_event_t *ev) {
    struct mt_late *s = user;
    if (ev->kind != SLUICE_EVENT_EMIT) return;
    cb_late_add(&s->late, sluice_clock_now(), ev->at);
    cb_consume(ev->token);
    atomic_fetch_add_explicit(&s->delivered, 1, memory_order_release);
}

/* N keys submitted from this thread at a steady pace over spread_ns, each
 * with a debounce deadline interval_ns later; the loop thread delivers. */
static int lateness(const cb_params_t *p, cb_result_t *out) {
    sluice_loop_t *loop;
    if (sluice_loop_start(&loop, NULL) != 0) cb_die("sluice_loop_start");
    struct mt_late s;
    memset(&s, 0, sizeof s);
    s.late.cap = p->keys;
    s.late.v = malloc(p->keys * sizeof *s.late.v);
    atomic_init(&s.delivered, 0);
    sluice_config_t c;
    memset(&c, 0, sizeof c);
    c.policy = sluice_debounce((int64_t)p->interval_ns, false, true, -1);
    c.on_event = mt_event;
    c.emit_only = true; /* mt_event ignores drops */
    c.user = &s;
    sluice_mt_t *m;
    if (!s.late.v || sluice_mt_new(&m, loop, &c, 0) != 0) cb_die("sluice_mt_new");
    uint64_t t0 = cb_now();
    size_t batches = (size_t)(p->spread_ns / 100000u);
    if (batches < 1) batches = 1;
    size_t done = 0;
    sluice_decision_t d;
    for (size_t b = 0; b < batches; b++) {
        size_t upto = p->keys * (b + 1) / batches;
        for (; done < upto; done++) sluice_mt_submit(m, sluice_key_u64(p->key[done]), done, &d);
        cb_sleep_until(t0 + (b + 1) * 100000u);
    }
    uint64_t limit = cb_now() + p->interval_ns + 30 * CB_S;
    while (atomic_load_explicit(&s.delivered, memory_order_acquire) < p->keys && cb_now() < limit)
        cb_sleep_until(cb_now() + CB_MS);
    size_t got = atomic_load_explicit(&s.delivered, memory_order_acquire);
    sluice_mt_free(m);
    sluice_loop_free(loop);
    out->ops = got;
    out->delivered = got;
    out->early = s.late.early;
    out->lateness_ns = s.late.v;
    out->lateness_n = s.late.n;
    return got == p->keys ? 0 : -1;
}

struct tp {
    sluice_mt_t *m;
    const cb_params_t *p;
    size_t lo, range, start;
    cb_gate_t *gate;
    uint64_t ops;
};

static void *tp_worker(void *arg) {
    struct tp *t = arg;
    const cb_params_t *p = t->p;
    sluice_decision_t d;
    uint64_t i = 0;
    cb_gate_ready(t->gate);
    while (!cb_gate_stopped(t->gate)) {
        for (int j = 0; j < 256; j++, i++) {
            size_t k = t->lo + p->order[(t->start + i) % p->ops] % t->range;
            sluice_mt_submit_u64(t->m, p->key[k], i, &d); /* the key in a register, not a struct by value */
            if (d.kind == SLUICE_EMITTED) cb_consume(i);
        }
    }
    t->ops = i;
    return NULL;
}

/* Rate limiter (100 per second) on warm keys; each thread its own half of
 * the keys; default shards. */
static int threads(const cb_params_t *p, cb_result_t *out) {
    sluice_loop_t *loop;
    if (sluice_loop_start(&loop, NULL) != 0) cb_die("sluice_loop_start");
    sluice_config_t c;
    memset(&c, 0, sizeof c);
    c.policy = sluice_rate(100, (int64_t)CB_S, 0);
    sluice_mt_t *m;
    sluice_mt_options_t o = { .flags = p->coarse_clock ? SLUICE_MT_COARSE_CLOCK : 0 };
    if (sluice_mt_new_with_options(&m, loop, &c, &o) != 0) cb_die("sluice_mt_new");
    sluice_decision_t d;
    for (size_t k = 0; k < p->keys; k++) sluice_mt_submit(m, sluice_key_u64(p->key[k]), k, &d);
    cb_gate_t gate;
    int n = p->threads < 1 ? 1 : p->threads > 8 ? 8 : p->threads;
    struct tp w[8];
    size_t per = p->keys / (size_t)n;
    for (int t = 0; t < n; t++) w[t] = (struct tp){ m, p, (size_t)t * per, per, (size_t)t * 7919, &gate, 0 };
    uint64_t wall, cpu, ops = 0;
    cb_gate_run(&gate, n, tp_worker, w, sizeof w[0], p->budget_s, &wall, &cpu);
    for (int t = 0; t < n; t++) ops += w[t].ops;
    finish_rate(out, ops, wall, cpu);
    sluice_mt_free(m);
    sluice_loop_free(loop);
    return 0;
}

/* ------------------------------------------------------------ quotas */

/* The scenario's plan (cb_quota()): "second", "minute", "hour". */
struct quota_plan {
    sluice_rate_quota_t q[CB_QUOTA_COUNT];
    sluice_plan_t plan;
    sluice_plans_t table;
};

static const sluice_plans_t *quota_plan(struct quota_plan *qp) {
    static const char *const names[CB_QUOTA_COUNT] = { "second", "minute", "hour" };
    for (int i = 0; i < CB_QUOTA_COUNT; i++) {
        cb_quota_t c = cb_quota(i);
        qp->q[i] = (sluice_rate_quota_t){ names[i], c.limit, (int64_t)c.per_ns, c.burst };
    }
    qp->plan = (sluice_plan_t){ "plan", qp->q, CB_QUOTA_COUNT };
    qp->table = (sluice_plans_t){ &qp->plan, 1, 0 };
    return &qp->table;
}

static sluice_policy_t one_quota(void) {
    cb_quota_t c = cb_quota(0);
    return sluice_rate(c.limit, (int64_t)c.per_ns, c.burst);
}

/* The measured calls of one thread on the core, manual clock from `start`
 * (as hot_loop); CALL decides call i on key `key` at `now` into `d`. */
#define QUOTA_LOOP(CALL)                                                                                               \
    do {                                                                                                               \
        while (i < p->ops) {                                                                                           \
            size_t end = i + 4096 < p->ops ? i + 4096 : p->ops;                                                        \
            for (; i < end; i++) {                                                                                     \
                uint64_t key = p->key[p->order[i]], now = cb_manual_now(start, i);                                     \
                CALL;                                                                                                  \
                if (d.kind == SLUICE_EMITTED) {                                                                        \
                    cb_consume(i);                                                                                     \
                    admitted++;                                                                                        \
                }                                                                                                      \
            }                                                                                                          \
            if (cb_over_budget(t0, p->budget_s)) break;                                                                \
        }                                                                                                              \
    } while (0)

/* One thread, the core on the manual clock: every key charged once at T0
 * (untimed; the RSS growth over it is the memory figure), then calls on
 * existing keys in random order. quotas 3: the plan through
 * sluice_limiter_submit_plan_u64(); 1: sluice_rate() with quota 0's numbers
 * through sluice_limiter_submit_u64(): each the integer-key call, the
 * cheapest of its kind. */
static int quotas_core(const cb_params_t *p, cb_result_t *out) {
    bool plan = p->quotas > 1;
    struct quota_plan qp;
    sluice_limiter_t *l = plan ? make_core_plans(sluice_rate_plans(), 0, quota_plan(&qp)) : make_core(one_quota(), 0);
    sluice_decision_t d;
    uint64_t rss0 = cb_rss();
    for (size_t k = 0; k < p->keys; k++) {
        int rc = plan ? sluice_limiter_submit_plan_u64(l, p->key[k], k, 0, T0, &d)
                      : sluice_limiter_submit_u64(l, p->key[k], k, T0, &d);
        if (rc != 0 || d.kind != SLUICE_EMITTED) {
            fprintf(stderr, "sluice-c: quotas setup: key %zu: rc %d, kind %d\n", k, rc, (int)d.kind);
            sluice_limiter_free(l);
            return -1;
        }
    }
    uint64_t rss1 = cb_rss();
    uint64_t admitted = 0, start = T0 + 1;
    size_t i = 0;
    uint64_t c0 = cb_process_cpu(), t0 = cb_now();
    if (plan)
        QUOTA_LOOP(sluice_limiter_submit_plan_u64(l, key, i, 0, now, &d));
    else
        QUOTA_LOOP(sluice_limiter_submit_u64(l, key, i, now, &d));
    uint64_t wall = cb_now() - t0, cpu = cb_process_cpu() - c0;
    finish_rate(out, i, wall, cpu);
    out->admitted = admitted;
    out->bytes_per_key = ((double)rss1 - (double)rss0) / (double)p->keys;
    sluice_limiter_free(l);
    return 0;
}

struct qt {
    sluice_mt_t *m;
    const cb_params_t *p;
    size_t lo, range, start;
    cb_gate_t *gate;
    bool plan;
    uint64_t ops, admitted;
};

static void *qt_worker(void *arg) {
    struct qt *t = arg;
    const cb_params_t *p = t->p;
    sluice_decision_t d;
    uint64_t i = 0, admitted = 0;
    cb_gate_ready(t->gate);
    while (!cb_gate_stopped(t->gate)) {
        for (int j = 0; j < 256; j++, i++) {
            size_t k = t->lo + p->order[(t->start + i) % p->ops] % t->range;
            if (t->plan)
                sluice_mt_submit_plan_u64(t->m, p->key[k], i, 0, &d);
            else
                sluice_mt_submit_u64(t->m, p->key[k], i, &d);
            if (d.kind == SLUICE_EMITTED) {
                cb_consume(i);
                admitted++;
            }
        }
    }
    t->ops = i;
    t->admitted = admitted;
    return NULL;
}

/* Two (or more) threads on the loop layer, real clock, each thread its own
 * share of the keys (as `threads`); every key charged once first. */
static int quotas_mt(const cb_params_t *p, cb_result_t *out) {
    bool plan = p->quotas > 1;
    struct quota_plan qp;
    sluice_loop_t *loop;
    if (sluice_loop_start(&loop, NULL) != 0) cb_die("sluice_loop_start");
    sluice_config_t c;
    memset(&c, 0, sizeof c);
    c.policy = plan ? sluice_rate_plans() : one_quota();
    c.plans = plan ? quota_plan(&qp) : NULL;
    sluice_mt_t *m;
    if (sluice_mt_new(&m, loop, &c, 0) != 0) cb_die("sluice_mt_new");
    sluice_decision_t d;
    for (size_t k = 0; k < p->keys; k++) {
        int rc = plan ? sluice_mt_submit_plan(m, sluice_key_u64(p->key[k]), k, NULL, &d, NULL)
                      : sluice_mt_submit_u64(m, p->key[k], k, &d);
        if (rc != 0) cb_die("quotas setup");
    }
    cb_gate_t gate;
    int n = p->threads < 1 ? 1 : p->threads > 8 ? 8 : p->threads;
    struct qt w[8];
    size_t per = p->keys / (size_t)n;
    for (int t = 0; t < n; t++) w[t] = (struct qt){ m, p, (size_t)t * per, per, (size_t)t * 7919, &gate, plan, 0, 0 };
    uint64_t wall, cpu, ops = 0, admitted = 0;
    cb_gate_run(&gate, n, qt_worker, w, sizeof w[0], p->budget_s, &wall, &cpu);
    for (int t = 0; t < n; t++) {
        ops += w[t].ops;
        admitted += w[t].admitted;
    }
    finish_rate(out, ops, wall, cpu);
    out->admitted = admitted;
    sluice_mt_free(m);
    sluice_loop_free(loop);
    return 0;
}

static int quotas(const cb_params_t *p, cb_result_t *out) {
    return p->threads > 1 ? quotas_mt(p, out) : quotas_core(p, out);
}

int cb_sluice_c(cb_scenario_t scenario, const cb_params_t *p, cb_result_t *out) {
    cb_result_reset(out);
    switch (scenario) {
    case CB_THROTTLE_HOT: return throttle_hot(p, out);
    case CB_DEBOUNCE_REARM: return debounce_rearm(p, out);
    case CB_FIRE: return fire(p, out);
    case CB_LATENESS: return lateness(p, out);
    case CB_SPRAY: return spray(p, out);
    case CB_THREADS: return threads(p, out);
    case CB_QUOTAS: return quotas(p, out);
    }
    return -1;
}

/* ------------------------------------------------------- single operations */

struct cb_op {
    sluice_limiter_t *l;
    int kind;
    size_t keys;
    uint64_t *key;
    uint32_t *order;
    size_t norder, pos;
    uint64_t calls;
};

#define OP_ORDER 65536

cb_op_t *cb_op_new(int kind, size_t keys) {
    cb_op_t *op = calloc(1, sizeof *op);
    if (!op) return NULL;
    op->kind = kind;
    op->keys = keys;
    op->key = cb_make_keys(keys);
    op->norder = OP_ORDER;
    op->order = cb_make_order(keys, OP_ORDER, 99);
    sluice_policy_t pol = kind == 0   ? sluice_throttle(3600 * (int64_t)CB_S, true, true, SLUICE_PICK_LATEST)
                          : kind == 1 ? sluice_debounce(60 * (int64_t)CB_S, false, true, -1)
                                      : sluice_rate(100, (int64_t)CB_S, 0);
    op->l = make_core(pol, 0);
    sluice_decision_t d;
    for (size_t k = 0; k < keys; k++) sluice_limiter_submit(op->l, sluice_key_u64(op->key[k]), k, T0, &d);
    for (size_t k = 0; k < keys; k++) sluice_limiter_submit(op->l, sluice_key_u64(op->key[k]), k, T0 + 1, &d);
    op->calls = 2;
    return op;
}

uint64_t cb_op_run(cb_op_t *op, size_t count) {
    sluice_decision_t d;
    uint64_t acc = 0;
    for (size_t i = 0; i < count; i++) {
        uint32_t k = op->order[op->pos];
        op->pos = (op->pos + 1) & (OP_ORDER - 1);
        sluice_limiter_submit_u64(op->l, op->key[k], i, cb_manual_now(T0 + 2, op->calls), &d);
        op->calls++;
        acc += d.kind;
    }
    return acc;
}

void cb_op_free(cb_op_t *op) {
    if (!op) return;
    sluice_limiter_free(op->l);
    free(op->key);
    free(op->order);
    free(op);
}
