/* floor.c — "floor": the physical limit of a keyed operation. One random
 * read-modify-write of an array of N 64-byte records, in the same random
 * order as the other implementations' calls, prefetch-free: no software
 * prefetch, and each access depends on the previous one (its index is
 * XORed with a word of the previous record that is always 0, which the
 * compiler cannot know), so neither the hardware prefetchers nor the
 * out-of-order engine can start an access before the previous call's
 * state was read. That is the latency of one random access, what a call
 * that must read its key's state before it can answer pays at least.
 *
 * The same loop without the dependency (independent accesses overlapped by
 * the CPU: memory-level parallelism) is measured too and reported in the
 * row's note: a throughput bound that no per-call API reaches, since one
 * call's work (hashing, branching, ~100+ instructions) fills the CPU's
 * reorder window. */
#include "cbench-internal.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

struct record {
    uint64_t v[8];
};

static struct record *records(size_t n) {
    struct record *r = aligned_alloc(64, (n ? n : 1) * sizeof *r);
    if (!r) cb_die("out of memory (floor)");
    memset(r, 0, n * sizeof *r);
    return r;
}

static void finish(cb_result_t *out, size_t ops, uint64_t wall, uint64_t cpu) {
    out->ops = ops;
    out->ns_per_op = ops ? (double)wall / (double)ops : -1;
    out->cpu_ns_per_op = ops ? (double)cpu / (double)ops : -1;
}

/* The independent (overlapped) variant, ns per access. */
static double independent(const cb_params_t *p, struct record *r, size_t ops) {
    size_t i = 0;
    uint64_t t0 = cb_now();
    while (i < ops) {
        size_t end = i + 4096 < ops ? i + 4096 : ops;
        for (; i < end; i++) r[p->order[i]].v[0] += i;
        if (cb_over_budget(t0, p->budget_s / 4)) break;
    }
    return i ? (double)(cb_now() - t0) / (double)i : -1;
}

static double cb_floor_independent_ns = -1;
double cb_floor_independent(void) { return cb_floor_independent_ns; }

static int single(const cb_params_t *p, cb_result_t *out, size_t ops) {
    struct record *r = records(p->keys);
    size_t i = 0;
    uint64_t dep = 0;
    uint64_t c0 = cb_process_cpu(), t0 = cb_now();
    while (i < ops) {
        size_t end = i + 4096 < ops ? i + 4096 : ops;
        for (; i < end; i++) {
            struct record *x = &r[p->order[i] ^ dep];
            x->v[0] += i;
            dep = x->v[1]; /* always 0, but only known once the record is read */
        }
        if (cb_over_budget(t0, p->budget_s)) break;
    }
    uint64_t wall = cb_now() - t0, cpu = cb_process_cpu() - c0;
    finish(out, i, wall, cpu);
    cb_floor_independent_ns = independent(p, r, ops);
    uint64_t sum = 0;
    for (size_t k = 0; k < p->keys; k += 97) sum += r[k].v[0];
    cb_keep(sum);
    free(r);
    return 0;
}

struct tp {
    const cb_params_t *p;
    struct record *r;
    size_t range, start;
    cb_gate_t *gate;
    uint64_t ops;
};

static void *tp_worker(void *arg) {
    struct tp *t = arg;
    const cb_params_t *p = t->p;
    t->r = records(t->range);
    cb_gate_ready(t->gate);
    uint64_t i = 0;
    while (!cb_gate_stopped(t->gate)) {
        for (int j = 0; j < 256; j++, i++) t->r[p->order[(t->start + i) % p->ops] % t->range].v[0] += i;
    }
    t->ops = i;
    cb_keep(t->r[0].v[0]);
    free(t->r);
    return NULL;
}

static int threads(const cb_params_t *p, cb_result_t *out) {
    cb_gate_t gate;
    int n = p->threads < 1 ? 1 : p->threads > 8 ? 8 : p->threads;
    struct tp w[8];
    for (int t = 0; t < n; t++) w[t] = (struct tp){ p, NULL, p->keys / (size_t)n, (size_t)t * 7919, &gate, 0 };
    uint64_t wall, cpu, ops = 0;
    cb_gate_run(&gate, n, tp_worker, w, sizeof w[0], p->budget_s, &wall, &cpu);
    for (int t = 0; t < n; t++) ops += w[t].ops;
    finish(out, ops, wall, cpu);
    return 0;
}

int cb_floor(cb_scenario_t scenario, const cb_params_t *p, cb_result_t *out) {
    cb_result_reset(out);
    switch (scenario) {
    case CB_THROTTLE_HOT:
    case CB_DEBOUNCE_REARM: return single(p, out, p->ops);
    case CB_FIRE: /* one random access per delivered emission */
        single(p, out, p->ops < p->keys ? p->ops : p->keys);
        out->delivered = out->ops;
        return 0;
    case CB_THREADS: return threads(p, out);
    default: return -1;
    }
}
