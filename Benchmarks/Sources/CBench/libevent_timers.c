/* libevent_timers.c — "libevent-timers": what a C engineer writes on
 * libevent without Sluice. One record per live key, found through an
 * open-addressing hash table, with one struct event embedded in it on
 * libevent's min-heap (EVENT_BASE_FLAG_PRECISE_TIMER, CLOCK_MONOTONIC):
 *
 *  - throttle: the record holds the window end and the pending value; its
 *    timer ends the window (emits the pending value and opens the next
 *    window, or releases the record when nothing is pending);
 *  - debounce: every call stores the value and re-adds the timer at
 *    now + interval (libevent moves it in its heap);
 *  - rate (GCRA): the record holds the TAT; its timer releases the record
 *    when the TAT is reached.
 *
 * Calls that need no real clock (throttle-hot, debounce-rearm, spray) run
 * inside a libevent callback, as a server's request handlers would, and the
 * time is refreshed every 1024 calls (event_base_update_cache_time), the
 * same clock step as the Sluice implementations' manual clock. */
#include "cbench-internal.h"

#include <event2/event.h>
#include <event2/event_struct.h>
#include <event2/thread.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { LE_THROTTLE, LE_DEBOUNCE, LE_RATE };
enum { LE_EMITTED, LE_SCHEDULED, LE_DROPPED, LE_FULL };

typedef struct le_ctx le_ctx_t;

typedef struct le_rec {
    struct event ev; /* this key's timer, on libevent's heap */
    le_ctx_t *ctx;
    uint64_t key, value, deadline; /* deadline: window end, debounce deadline or TAT */
    bool has_value;
} le_rec_t;

struct le_ctx {
    struct event_base *base;
    cb_table_t table;
    int policy;
    uint64_t interval;   /* throttle, debounce */
    uint64_t T, tau;     /* rate: emission interval, tolerance */
    size_t cap;          /* 0: none */
    uint64_t now;        /* the driver's clock reading */
    cb_late_t *late;     /* lateness samples (loop thread) */
    pthread_mutex_t *mu; /* lateness: the table is shared with the producer */
    atomic_size_t delivered;
};

static struct event_base *new_base(void) {
    struct event_config *cfg = event_config_new();
    if (!cfg) cb_die("event_config_new");
    event_config_set_flag(cfg, EVENT_BASE_FLAG_PRECISE_TIMER);
    struct event_base *b = event_base_new_with_config(cfg);
    event_config_free(cfg);
    if (!b) cb_die("event_base_new_with_config");
    return b;
}

static void ctx_init(le_ctx_t *c, int policy, uint64_t interval) {
    memset(c, 0, sizeof *c);
    c->base = new_base();
    cb_table_init(&c->table, 16);
    c->policy = policy;
    c->interval = interval;
    atomic_init(&c->delivered, 0);
}

static void arm(le_rec_t *r, uint64_t delay_ns) {
    uint64_t us = (delay_ns + 999) / 1000; /* rounded up: never before our deadline */
    struct timeval tv = { (time_t)(us / 1000000u), (suseconds_t)(us % 1000000u) };
    event_add(&r->ev, &tv);
}

static void release(le_rec_t *r) {
    cb_table_del(&r->ctx->table, r->key);
    free(r);
}

static void deliver(le_ctx_t *c, uint64_t value, uint64_t deadline) {
    if (c->late) cb_late_add(c->late, cb_now(), deadline);
    cb_consume(value);
    /* one delivering thread (the base's): a load and a store, no locked
     * instruction, as sluice-c counts its emissions */
    atomic_store_explicit(&c->delivered, atomic_load_explicit(&c->delivered, memory_order_relaxed) + 1,
                          memory_order_release);
}

static void on_timer(evutil_socket_t fd, short what, void *arg) {
    (void)fd;
    (void)what;
    le_rec_t *r = arg;
    le_ctx_t *c = r->ctx;
    if (c->mu) pthread_mutex_lock(c->mu);
    uint64_t value = r->value, deadline = r->deadline;
    bool emit = false;
    switch (c->policy) {
    case LE_THROTTLE:
        if (r->has_value) {
            emit = true;
            r->has_value = false;
            r->deadline += c->interval; /* the emission opens the next window */
            arm(r, c->interval);
        } else {
            release(r);
        }
        break;
    case LE_DEBOUNCE:
        emit = r->has_value;
        release(r);
        break;
    default: /* rate: the TAT is reached, the key is as good as new */ release(r); break;
    }
    if (c->mu) pthread_mutex_unlock(c->mu);
    if (emit) deliver(c, value, deadline);
}

static le_rec_t *new_rec(le_ctx_t *c, uint64_t key) {
    le_rec_t *r = malloc(sizeof *r);
    if (!r) cb_die("out of memory (record)");
    event_assign(&r->ev, c->base, -1, 0, on_timer, r);
    r->ctx = c;
    r->key = key;
    r->has_value = false;
    cb_table_put(&c->table, key, r);
    return r;
}

static int submit(le_ctx_t *c, uint64_t key, uint64_t value, uint64_t now) {
    le_rec_t *r = cb_table_get(&c->table, key);
    switch (c->policy) {
    case LE_THROTTLE:
        if (r) {
            r->value = value; /* replaces the pending value */
            r->has_value = true;
            return LE_SCHEDULED;
        }
        if (c->cap && c->table.count >= c->cap) return LE_FULL;
        r = new_rec(c, key);
        r->deadline = now + c->interval;
        arm(r, c->interval);
        cb_consume(value); /* leading edge */
        return LE_EMITTED;
    case LE_DEBOUNCE:
        if (!r) {
            if (c->cap && c->table.count >= c->cap) return LE_FULL;
            r = new_rec(c, key);
        }
        r->value = value;
        r->has_value = true;
        r->deadline = now + c->interval;
        arm(r, c->interval); /* re-adding moves it in the heap */
        return LE_SCHEDULED;
    default: {
        uint64_t tat = r ? r->deadline : now;
        if (tat > now + c->tau) return LE_DROPPED;
        if (!r) {
            if (c->cap && c->table.count >= c->cap) return LE_FULL;
            r = new_rec(c, key);
        }
        r->deadline = (tat > now ? tat : now) + c->T;
        arm(r, r->deadline - now);
        cb_consume(value);
        return LE_EMITTED;
    }
    }
}

static void ctx_free(le_ctx_t *c) {
    for (size_t i = 0; i < c->table.cap; i++) {
        le_rec_t *r = c->table.slots[i].val;
        if (c->table.slots[i].key && r) {
            event_del(&r->ev);
            free(r);
        }
    }
    cb_table_free(&c->table);
    event_base_free(c->base);
}

/* ------------------------------------------- calls inside a loop callback */

struct in_loop {
    le_ctx_t *c;
    const cb_params_t *p;
    const uint32_t *order; /* NULL: key i for call i (spray) */
    size_t count;
    double budget_s;
    size_t done;
    uint64_t wall, cpu, refused;
};

static void in_loop_cb(evutil_socket_t fd, short what, void *arg) {
    (void)fd;
    (void)what;
    struct in_loop *s = arg;
    le_ctx_t *c = s->c;
    size_t i = 0;
    uint64_t c0 = cb_process_cpu(), t0 = cb_now();
    while (i < s->count) {
        size_t end = i + 1024 < s->count ? i + 1024 : s->count;
        event_base_update_cache_time(c->base);
        c->now = cb_now();
        for (; i < end; i++) {
            uint64_t key = s->p->key[s->order ? s->order[i] : i];
            if (submit(c, key, i, c->now) == LE_FULL) s->refused++;
        }
        if ((i & 4095) == 0 && cb_over_budget(t0, s->budget_s)) break;
    }
    s->wall = cb_now() - t0;
    s->cpu = cb_process_cpu() - c0;
    s->done = i;
}

static void run_in_loop(struct in_loop *s) {
    struct timeval zero = { 0, 0 };
    event_base_once(s->c->base, -1, EV_TIMEOUT, in_loop_cb, s, &zero);
    event_base_loop(s->c->base, EVLOOP_ONCE);
}

static void finish_rate(cb_result_t *out, size_t ops, uint64_t wall, uint64_t cpu) {
    out->ops = ops;
    out->ns_per_op = ops ? (double)wall / (double)ops : -1;
    out->cpu_ns_per_op = ops ? (double)cpu / (double)ops : -1;
}

static int hot(const cb_params_t *p, cb_result_t *out, int policy, uint64_t interval) {
    le_ctx_t c;
    ctx_init(&c, policy, interval);
    uint64_t now = cb_now();
    for (size_t k = 0; k < p->keys; k++) submit(&c, p->key[k], k, now);
    if (policy == LE_THROTTLE)
        for (size_t k = 0; k < p->keys; k++) submit(&c, p->key[k], k, now);
    struct in_loop s = { &c, p, p->order, p->ops, p->budget_s, 0, 0, 0, 0 };
    run_in_loop(&s);
    finish_rate(out, s.done, s.wall, s.cpu);
    ctx_free(&c);
    return 0;
}

/* N debounce keys armed (interval_ns each), then, once all are due, the loop
 * runs until every one fired and was delivered. */
static int fire(const cb_params_t *p, cb_result_t *out) {
    le_ctx_t c;
    ctx_init(&c, LE_DEBOUNCE, p->interval_ns);
    uint64_t rss0 = cb_rss();
    uint64_t last = 0;
    for (size_t k = 0; k < p->keys; k++) {
        last = cb_now();
        submit(&c, p->key[k], k, last);
    }
    uint64_t rss1 = cb_rss();
    cb_sleep_until(last + p->interval_ns + 5 * CB_MS);
    uint64_t c0 = cb_process_cpu(), t0 = cb_now();
    while (atomic_load(&c.delivered) < p->keys) event_base_loop(c.base, EVLOOP_NONBLOCK);
    uint64_t wall = cb_now() - t0, cpu = cb_process_cpu() - c0;
    uint64_t rss2 = cb_rss();
    size_t got = atomic_load(&c.delivered);
    finish_rate(out, got, wall, cpu);
    out->delivered = got;
    out->bytes_per_key = ((double)rss1 - (double)rss0) / (double)p->keys;
    out->idle_bytes_per_key = ((double)rss2 - (double)rss0) / (double)p->keys;
    ctx_free(&c);
    return 0;
}

static int spray(const cb_params_t *p, cb_result_t *out) {
    le_ctx_t c;
    ctx_init(&c, LE_RATE, 0);
    c.T = 60 * CB_S;
    c.tau = 0;
    c.cap = p->cap;
    cb_reset_peak_rss();
    uint64_t rss0 = cb_rss();
    struct in_loop s = { &c, p, NULL, p->keys, 0, 0, 0, 0, 0 };
    run_in_loop(&s);
    uint64_t peak = cb_peak_rss();
    finish_rate(out, s.done, s.wall, s.cpu);
    out->refused = s.refused;
    out->peak_rss_bytes = peak > rss0 ? (double)(peak - rss0) : 0;
    size_t live = p->keys < p->cap ? p->keys : p->cap;
    out->bytes_per_key = out->peak_rss_bytes / (double)(live ? live : 1);
    ctx_free(&c);
    return 0;
}

/* ---------------------------------------------------------------- lateness */

static void *loop_main(void *arg) {
    le_ctx_t *c = arg;
    event_base_loop(c->base, EVLOOP_NO_EXIT_ON_EMPTY);
    return NULL;
}

static int lateness(const cb_params_t *p, cb_result_t *out) {
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, (void (*)(void))evthread_use_pthreads);
    le_ctx_t c;
    ctx_init(&c, LE_DEBOUNCE, p->interval_ns);
    pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
    cb_late_t late = { malloc(p->keys * sizeof(uint64_t)), 0, p->keys, 0 };
    if (!late.v) cb_die("out of memory (lateness)");
    c.mu = &mu;
    c.late = &late;
    pthread_t th;
    pthread_create(&th, NULL, loop_main, &c);
    uint64_t t0 = cb_now();
    size_t batches = (size_t)(p->spread_ns / 100000u);
    if (batches < 1) batches = 1;
    size_t done = 0;
    for (size_t b = 0; b < batches; b++) {
        size_t upto = p->keys * (b + 1) / batches;
        for (; done < upto; done++) {
            pthread_mutex_lock(&mu);
            submit(&c, p->key[done], done, cb_now());
            pthread_mutex_unlock(&mu);
        }
        cb_sleep_until(t0 + (b + 1) * 100000u);
    }
    uint64_t limit = cb_now() + p->interval_ns + 30 * CB_S;
    while (atomic_load(&c.delivered) < p->keys && cb_now() < limit) cb_sleep_until(cb_now() + CB_MS);
    event_base_loopbreak(c.base);
    pthread_join(th, NULL);
    size_t got = atomic_load(&c.delivered);
    out->ops = got;
    out->delivered = got;
    out->early = late.early;
    out->lateness_ns = late.v;
    out->lateness_n = late.n;
    ctx_free(&c);
    return got == p->keys ? 0 : -1;
}

/* ----------------------------------------------------------------- threads */

struct tp {
    const cb_params_t *p;
    size_t lo, range, start;
    cb_gate_t *gate;
    uint64_t ops;
};

/* Share-nothing, as a libevent server is built: each thread its own base,
 * its own table and its own keys; the clock read on every call. */
static void *tp_worker(void *arg) {
    struct tp *t = arg;
    const cb_params_t *p = t->p;
    le_ctx_t c;
    ctx_init(&c, LE_RATE, 0);
    c.T = 10 * CB_MS; /* 100 per second, burst 100 */
    c.tau = 99 * c.T;
    for (size_t k = 0; k < t->range; k++) submit(&c, p->key[t->lo + k], k, cb_now());
    cb_gate_ready(t->gate);
    uint64_t i = 0;
    while (!cb_gate_stopped(t->gate)) {
        for (int j = 0; j < 256; j++, i++) {
            size_t k = t->lo + p->order[(t->start + i) % p->ops] % t->range;
            submit(&c, p->key[k], i, cb_now());
        }
    }
    t->ops = i;
    ctx_free(&c);
    return NULL;
}

static int threads(const cb_params_t *p, cb_result_t *out) {
    cb_gate_t gate;
    int n = p->threads < 1 ? 1 : p->threads > 8 ? 8 : p->threads;
    struct tp w[8];
    size_t per = p->keys / (size_t)n;
    for (int t = 0; t < n; t++) w[t] = (struct tp){ p, (size_t)t * per, per, (size_t)t * 7919, &gate, 0 };
    uint64_t wall, cpu, ops = 0;
    cb_gate_run(&gate, n, tp_worker, w, sizeof w[0], p->budget_s, &wall, &cpu);
    for (int t = 0; t < n; t++) ops += w[t].ops;
    finish_rate(out, ops, wall, cpu);
    return 0;
}

int cb_libevent(cb_scenario_t scenario, const cb_params_t *p, cb_result_t *out) {
    cb_result_reset(out);
    switch (scenario) {
    case CB_THROTTLE_HOT: return hot(p, out, LE_THROTTLE, 3600 * CB_S);
    case CB_DEBOUNCE_REARM: return hot(p, out, LE_DEBOUNCE, p->interval_ns);
    case CB_FIRE: return fire(p, out);
    case CB_LATENESS: return lateness(p, out);
    case CB_SPRAY: return spray(p, out);
    case CB_THREADS: return threads(p, out);
    case CB_QUOTAS: return -1; /* not a libevent case (quotas: sluice-c and dispatch-tuned) */
    }
    return -1;
}
