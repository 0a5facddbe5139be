/* bench_core.c — the limiter's hot paths beside the floor of a keyed operation.
 *
 * - submit on existing keys (throttle, every window open, random key order)
 * - floor: one random read-modify-write in an array of N 64-byte records,
 *   with the same index sequence (what any keyed structure must at least pay)
 * - debounce re-arm: every call pushes a live deadline later
 * - fire: N pending debounce keys fall due; ns per delivered emission
 * - memory: bytes per live key, all structures included
 */
#include "bench_util.h"
#include "sluice.h"

#include <stdlib.h>
#include <string.h>

#define MS UINT64_C(1000000)

struct record {
    uint64_t v[8];
};

static uint64_t g_events;

static void count_event(void *user, const sluice_event_t *ev) {
    (void)user;
    g_events += ev->token;
}

static sluice_limiter_t *make(sluice_policy_t p) {
    sluice_config_t cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.policy = p;
    cfg.on_event = count_event;
    sluice_limiter_t *l = NULL;
    if (sluice_limiter_new(&l, &cfg) != 0) {
        fprintf(stderr, "bench: sluice_limiter_new failed\n");
        exit(1);
    }
    return l;
}

static uint32_t *random_indices(size_t n, size_t count, uint64_t seed) {
    uint32_t *idx = malloc(count * sizeof *idx);
    if (!idx) exit(1);
    for (size_t i = 0; i < count; i++) idx[i] = (uint32_t)(bench_rand(&seed) % n);
    return idx;
}

static double bench_floor(size_t n, const uint32_t *idx, size_t ops) {
    struct record *r = aligned_alloc(64, n * sizeof *r);
    if (!r) exit(1);
    memset(r, 0, n * sizeof *r);
    uint64_t t0 = bench_ns();
    for (size_t i = 0; i < ops; i++) r[idx[i]].v[0] += i;
    uint64_t t1 = bench_ns();
    uint64_t sum = 0;
    for (size_t i = 0; i < n; i += 97) sum += r[i].v[0];
    bench_keep(sum);
    free(r);
    return (double)(t1 - t0) / (double)ops;
}

static double bench_submit_hot(size_t n, const uint32_t *idx, size_t ops, double *bytes_per_key) {
    sluice_limiter_t *l = make(sluice_throttle((int64_t)(3600 * 1000 * MS), true, true, SLUICE_PICK_LATEST));
    for (size_t k = 0; k < n; k++) sluice_limiter_submit(l, sluice_key_u64(k), k, 0, NULL);
    sluice_stats_t st;
    sluice_limiter_stats(l, &st);
    *bytes_per_key = (double)st.memory_bytes / (double)n;
    sluice_decision_t d;
    uint64_t acc = 0;
    uint64_t t0 = bench_ns();
    for (size_t i = 0; i < ops; i++) {
        sluice_limiter_submit(l, sluice_key_u64(idx[i]), i, 1, &d);
        acc += d.kind;
    }
    uint64_t t1 = bench_ns();
    bench_keep(acc);
    sluice_limiter_free(l);
    return (double)(t1 - t0) / (double)ops;
}

static double bench_debounce_rearm(size_t n, const uint32_t *idx, size_t ops, double *bytes_per_key) {
    sluice_limiter_t *l = make(sluice_debounce((int64_t)(1000 * MS), false, true, -1));
    for (size_t k = 0; k < n; k++) sluice_limiter_submit(l, sluice_key_u64(k), k, 0, NULL);
    sluice_stats_t st;
    sluice_limiter_stats(l, &st);
    *bytes_per_key = (double)st.memory_bytes / (double)n;
    sluice_decision_t d;
    uint64_t acc = 0;
    /* time moves on by 100 ns per call: every call pushes its key's deadline later */
    uint64_t t0 = bench_ns();
    for (size_t i = 0; i < ops; i++) {
        sluice_limiter_submit(l, sluice_key_u64(idx[i]), i, 1 + (uint64_t)i * 100, &d);
        acc += d.at;
    }
    uint64_t t1 = bench_ns();
    bench_keep(acc);
    sluice_limiter_free(l);
    return (double)(t1 - t0) / (double)ops;
}

static double bench_fire(size_t n) {
    sluice_limiter_t *l = make(sluice_debounce((int64_t)(100 * MS), false, true, -1));
    uint64_t seed = 42;
    /* deadlines spread over one second */
    for (size_t k = 0; k < n; k++)
        sluice_limiter_submit(l, sluice_key_u64(bench_rand(&seed)), k, bench_rand(&seed) % (1000 * MS), NULL);
    uint64_t before = g_events;
    uint64_t t0 = bench_ns();
    int64_t fired = sluice_limiter_advance(l, 2000 * MS, 0);
    uint64_t t1 = bench_ns();
    bench_keep(g_events - before);
    sluice_limiter_free(l);
    if (fired <= 0) return 0;
    return (double)(t1 - t0) / (double)fired;
}

void bench_core_run(FILE *out, int quick) {
    static const size_t sizes[] = { 1000, 100000, 1000000 };
    size_t nsizes = quick ? 2 : 3;
    size_t ops = quick ? 2000000 : 8000000;
    fprintf(out, "\n== limiter (C core, manual clock) ==\n");
    fprintf(out, "%-34s %10s %10s %10s %8s\n", "operation", "keys", "ns/op", "floor", "ratio");
    for (size_t s = 0; s < nsizes; s++) {
        size_t n = sizes[s];
        uint32_t *idx = random_indices(n, ops, 7 + n);
        double fl = bench_floor(n, idx, ops);
        double bpk_t, bpk_d;
        double hot = bench_submit_hot(n, idx, ops, &bpk_t);
        double rearm = bench_debounce_rearm(n, idx, ops, &bpk_d);
        fprintf(out, "%-34s %10zu %10.1f %10.1f %7.2fx\n", "floor: random 64-byte record", n, fl, fl, 1.0);
        fprintf(out, "%-34s %10zu %10.1f %10.1f %7.2fx\n", "submit, existing key (throttle)", n, hot, fl, hot / fl);
        fprintf(out, "%-34s %10zu %10.1f %10.1f %7.2fx\n", "submit, debounce re-arm", n, rearm, fl, rearm / fl);
        fprintf(out, "%-34s %10zu %10.1f\n", "memory: bytes per live key (thr.)", n, bpk_t);
        fprintf(out, "%-34s %10zu %10.1f\n", "memory: bytes per live key (deb.)", n, bpk_d);
        free(idx);
    }
    size_t fire_n = quick ? 100000 : 1000000;
    fprintf(out, "%-34s %10zu %10.1f\n", "fire: ns per emitted timer", fire_n, bench_fire(fire_n));
}
