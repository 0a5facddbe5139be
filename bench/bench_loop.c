/* bench_loop.c — the loop layer (sluice_loop.h) on a real libevent loop:
 *
 *  1. timer lateness with precise timers at 1k and 100k pending keys:
 *     keys are submitted at a steady pace by another thread, each with a
 *     deadline W later, so at the peak every key is pending at once and
 *     deadlines fall throughout the run. Lateness = the clock when the
 *     callback runs minus the event's deadline (ev.at). Reported as p50,
 *     p99 and max, for the default 1 ms wheel tick and a 0.1 ms tick;
 *  2. submit throughput from 1 and 2 threads on different keys (a rate
 *     limiter on warm keys: the server's hot path), with the default shards
 *     and with one shard (a single lock), as ratios.
 *
 * Real time on a shared machine: run-to-run noise is large; compare ratios
 * inside one run. Exposed as bench_loop_run() for bench_main.c. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE 1 /* CPU_SET, pthread_setaffinity_np (opt-in FIFO mode) */
#endif
#include "bench_util.h"
#include "sluice_loop.h"

#include <event2/event.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------ lateness */

struct late {
    uint64_t *v;
    size_t n, cap;
    atomic_size_t got;
};

static void on_emit(void *user, const sluice_event_t *ev) {
    struct late *l = user;
    uint64_t now = sluice_clock_now();
    if (l->n < l->cap) l->v[l->n++] = now >= ev->at ? now - ev->at : 0; /* never negative: checked below */
    if (now < ev->at) l->v[l->n - 1] = UINT64_MAX;                     /* early: flagged */
    atomic_fetch_add_explicit(&l->got, 1, memory_order_release);
}

static int cmp_u64(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static void sleep_until(uint64_t t) {
    struct timespec ts = { (time_t)(t / 1000000000u), (long)(t % 1000000000u) };
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) != 0) {
    }
}

/* Submits n keys paced over `spread_ms`, each with an audit deadline
 * `wait_ms` later; waits for all emissions and prints the lateness. */
/* Gives the owned loop's thread SCHED_FIFO priority (when allowed), to see
 * the layer's own lateness apart from CPU contention on a busy machine. */
static void fifo_cb(evutil_socket_t fd, short what, void *arg) {
    (void)fd;
    (void)what;
    struct sched_param sp = { .sched_priority = 10 };
    *(int *)arg = pthread_setschedparam(pthread_self(), SCHED_FIFO, &sp) == 0 ? 1 : -1;
}

static int set_loop_fifo(sluice_loop_t *loop) {
    int done = 0;
    struct event *ev = event_new(sluice_loop_base(loop), -1, 0, fifo_cb, &done);
    event_active(ev, EV_TIMEOUT, 0);
    while (__atomic_load_n(&done, __ATOMIC_ACQUIRE) == 0) {
        struct timespec ts = { 0, 1000000 };
        nanosleep(&ts, NULL);
    }
    event_free(ev);
    return done;
}

static void lateness(FILE *out, size_t n, uint64_t spread_ms, uint64_t wait_ms, uint64_t tick_ns, bool rt) {
    sluice_loop_t *loop;
    if (sluice_loop_start(&loop, NULL) != 0) exit(1);
    struct late l;
    memset(&l, 0, sizeof l);
    l.cap = n;
    l.v = malloc(n * sizeof *l.v);
    atomic_init(&l.got, 0);
    sluice_config_t c;
    memset(&c, 0, sizeof c);
    c.policy = sluice_audit((int64_t)wait_ms * 1000000);
    c.on_event = on_emit;
    c.user = &l;
    c.tick_ns = tick_ns;
    sluice_mt_t *m;
    if (!l.v || sluice_mt_new(&m, loop, &c, 0) != 0) exit(1);

    if (rt) set_loop_fifo(loop);
    uint64_t t0 = sluice_clock_now();
    /* one batch every 100 us: deadlines fall evenly across wheel ticks */
    const size_t batches = (size_t)spread_ms * 10;
    size_t done = 0;
    uint64_t max_pending = 0;
    for (size_t b = 0; b < batches; b++) {
        size_t upto = n * (b + 1) / batches;
        for (; done < upto; done++) {
            sluice_decision_t d;
            sluice_mt_submit(m, sluice_key_u64(done), done, &d);
        }
        uint64_t pend = done - atomic_load_explicit(&l.got, memory_order_acquire);
        if (pend > max_pending) max_pending = pend;
        sleep_until(t0 + (b + 1) * 100000u);
    }
    while (atomic_load_explicit(&l.got, memory_order_acquire) < n) {
        struct timespec ts = { 0, 2000000 };
        nanosleep(&ts, NULL);
    }
    sluice_mt_stats_t st;
    sluice_mt_stats(m, &st);
    sluice_mt_free(m);
    sluice_loop_free(loop);

    size_t early = 0;
    for (size_t i = 0; i < l.n; i++) early += l.v[i] == UINT64_MAX;
    qsort(l.v, l.n, sizeof *l.v, cmp_u64);
    size_t ok = l.n - early;
    double p50 = ok ? (double)l.v[ok / 2] / 1e6 : 0;
    double p99 = ok ? (double)l.v[(size_t)((double)ok * 0.99)] / 1e6 : 0;
    double mx = ok ? (double)l.v[ok - 1] / 1e6 : 0;
    fprintf(out, "%-10zu %8.3f %-6s %9.3f %8.3f %8.3f %8.1f %9zu %8llu\n", n,
            tick_ns ? (double)tick_ns / 1e6 : 1.0, rt ? "fifo" : "normal", p50, p99, mx,
            (double)max_pending / 1000.0, early, (unsigned long long)st.wakeups);
    free(l.v);
}

/* ------------------------------------------------------------------ throughput */

struct tp {
    sluice_mt_t *m;
    uint64_t base_key;
    atomic_bool *stop;
    uint64_t ops;
    uint64_t cpu_ns;
    uint64_t nkeys; /* a power of two */
    bool fifo;
    int cpu;
};

static uint64_t thread_cpu_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

#define TP_KEYS_MAX 4096

static bool bench_fifo(void) {
    const char *e = getenv("SLUICE_BENCH_FIFO");
    return e && *e == '1';
}

static void *tp_worker(void *arg) {
    struct tp *t = arg;
    uint64_t i = 0;
    sluice_decision_t d;
    if (t->fifo) {
        /* opt-in (SLUICE_BENCH_FIFO=1): each worker at SCHED_FIFO on its own
         * CPU, so that 2 threads really run at once on a busy machine */
        cpu_set_t set;
        CPU_ZERO(&set);
        CPU_SET(t->cpu, &set);
        pthread_setaffinity_np(pthread_self(), sizeof set, &set);
        struct sched_param sp = { .sched_priority = 5 };
        pthread_setschedparam(pthread_self(), SCHED_FIFO, &sp);
    }
    uint64_t c0 = thread_cpu_ns();
    while (!atomic_load_explicit(t->stop, memory_order_relaxed)) {
        for (int j = 0; j < 256; j++, i++)
            sluice_mt_submit(t->m, sluice_key_u64(t->base_key + (i & (t->nkeys - 1))), i, &d);
    }
    t->cpu_ns = thread_cpu_ns() - c0;
    t->ops = i;
    return NULL;
}

/* Millions of submits per second from `threads` threads on disjoint keys. */
static double throughput(int threads, unsigned nshards, uint64_t nkeys, double seconds, double *per_cpu) {
    sluice_loop_t *loop;
    if (sluice_loop_start(&loop, NULL) != 0) exit(1);
    sluice_config_t c;
    memset(&c, 0, sizeof c);
    c.policy = sluice_rate(1, (int64_t)60 * 1000000000, 0); /* warm keys: admitted once, then refused */
    sluice_mt_t *m;
    if (sluice_mt_new(&m, loop, &c, nshards) != 0) exit(1);
    sluice_decision_t d;
    for (int t = 0; t < threads; t++)
        for (uint64_t k = 0; k < nkeys; k++) sluice_mt_submit(m, sluice_key_u64((uint64_t)t << 32 | k), 0, &d);
    atomic_bool stop;
    atomic_init(&stop, false);
    struct tp w[2];
    pthread_t th[2];
    uint64_t t0 = bench_ns();
    for (int t = 0; t < threads; t++) {
        w[t].m = m;
        w[t].base_key = (uint64_t)t << 32;
        w[t].stop = &stop;
        w[t].ops = 0;
        w[t].nkeys = nkeys;
        w[t].fifo = bench_fifo();
        w[t].cpu = t;
        pthread_create(&th[t], NULL, tp_worker, &w[t]);
    }
    struct timespec ts = { (time_t)seconds, (long)((seconds - (double)(time_t)seconds) * 1e9) };
    nanosleep(&ts, NULL);
    atomic_store(&stop, true);
    uint64_t ops = 0, cpu = 0;
    for (int t = 0; t < threads; t++) {
        pthread_join(th[t], NULL);
        ops += w[t].ops;
        cpu += w[t].cpu_ns;
    }
    *per_cpu = cpu ? (double)ops / ((double)cpu / 1e9) / 1e6 : 0;
    uint64_t t1 = bench_ns();
    sluice_mt_free(m);
    sluice_loop_free(loop);
    return (double)ops / ((double)(t1 - t0) / 1e9) / 1e6;
}

void bench_loop_run(FILE *out, int quick) {
    fprintf(out, "\n== loop layer: timer lateness on the real loop (precise timers, owned loop) ==\n");
    fprintf(out, "keys submitted evenly over the spread, each due `wait` later; lateness = delivery - deadline (ms);\n"
                 "sched fifo: the loop thread at SCHED_FIFO (the layer's own lateness, apart from CPU contention)\n");
    fprintf(out, "%-10s %8s %-6s %9s %8s %8s %8s %9s %8s\n", "keys", "tick_ms", "sched", "p50", "p99", "max",
            "peak_k", "early", "wakeups");
    for (int rt = 0; rt < 2; rt++) {
        lateness(out, 1000, 500, 300, 0, rt);
        lateness(out, 1000, 500, 300, 100000, rt);
        if (!quick) {
            lateness(out, 100000, 1000, 1000, 0, rt);
            lateness(out, 100000, 1000, 1000, 100000, rt);
        } else {
            lateness(out, 20000, 300, 300, 0, rt);
        }
    }

    double secs = quick ? 0.3 : 1.0;
    fprintf(out, "\n== loop layer: submit throughput, each thread on its own warm keys (rate limiter), %.1f s each ==\n",
            secs);
    fprintf(out, "M/s = million submits per second (wall clock); cpu = per thread-CPU-second%s\n",
            bench_fifo() ? "; workers at SCHED_FIFO, one per CPU" : "");
    static const uint64_t key_sets[2] = { 1, TP_KEYS_MAX };
    int rounds = quick ? 1 : 3;
    for (int r = 0; r < rounds; r++) {
        for (int ks = 0; ks < 2; ks++) {
            for (unsigned shards = 0; shards <= 1; shards++) {
                double c1, c2;
                double one = throughput(1, shards, key_sets[ks], secs, &c1);
                double two = throughput(2, shards, key_sets[ks], secs, &c2);
                fprintf(out,
                        "round %d, %4llu key(s)/thread, %-9s: 1 thread %5.2f M/s (cpu %5.2f) | 2 threads %5.2f M/s "
                        "(x%.2f; cpu %5.2f per thread)\n",
                        r + 1, (unsigned long long)key_sets[ks], shards ? "1 shard" : "16 shards", one, c1, two,
                        two / one, c2);
            }
        }
    }
}
