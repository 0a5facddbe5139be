/*
 * bench_wheel.c — micro-benchmark of the timer wheel (Sources/CSluice/wheel.c).
 *
 *   gcc -std=c11 -O2 -DBENCH_WHEEL_MAIN -I Sources/CSluice Sources/CSluice/wheel.c bench/bench_wheel.c -o bench_wheel
 *   ./bench_wheel [--quick]
 *
 * bench_wheel_run(out, quick) prints one line per measurement, "wheel <what>:
 * <X> ns/op" (plus details). Times come from CLOCK_MONOTONIC around loops of
 * many operations; a volatile sink and compiler barriers keep the work from
 * being optimised away. Absolute figures vary by machine and load (about 20 %
 * run to run on shared machines): compare lines of one run.
 *
 * Scenarios (tick 1 ms, records of 32 bytes with the node first):
 *   add / cancel / move earlier / extend   1024 armed nodes, all in cache,
 *                                          deadlines spread over 1 ms..10 s
 *   next                                   sluice__wheel_next() on a populated wheel
 *   fire 1M / 100k                         timers over 3 s of deadlines, armed
 *                                          in random record order (32 MB / 3.2 MB
 *                                          of records): wake at every sluice__wheel_next(),
 *                                          advance, pop all; and the same with
 *                                          one big advance
 *   floor                                  a dependent walk over as many records
 *                                          in random order: the memory latency
 *                                          that bounds any linked timer list
 * --quick skips the 1M runs and uses fewer batches.
 */
#define _POSIX_C_SOURCE 200809L
#include "wheel-internal.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

void bench_wheel_run(FILE *out, int quick);

#if defined(__GNUC__) || defined(__clang__)
#define BW_CLOBBER(p) __asm__ volatile("" : : "r"(p) : "memory")
#else
#define BW_CLOBBER(p) ((void)(p))
#endif

static volatile uint64_t bw_sink;

struct bw_rec {
    struct sluice__wheel_node node;
    uint64_t key;
    uint64_t state;
};

static uint64_t bw_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * UINT64_C(1000000000) + (uint64_t)ts.tv_nsec;
}

static uint64_t bw_rng = UINT64_C(0x9E3779B97F4A7C15);
static uint64_t bw_rand(void) { /* xorshift64* */
    bw_rng ^= bw_rng >> 12;
    bw_rng ^= bw_rng << 25;
    bw_rng ^= bw_rng >> 27;
    return bw_rng * UINT64_C(0x2545F4914F6CDD1D);
}

struct bw_arena {
    struct sluice__wheel_arena a;
    unsigned char *chunk[1];
    struct bw_rec *recs;
};

static int bw_arena_init(struct bw_arena *ba, uint32_t n) {
    ba->recs = malloc((size_t)n * sizeof *ba->recs);
    if (!ba->recs) return -1;
    for (uint32_t i = 0; i < n; i++) {
        sluice__wheel_node_init(&ba->recs[i].node);
        ba->recs[i].key = i;
        ba->recs[i].state = 0;
    }
    ba->chunk[0] = (unsigned char *)ba->recs;
    ba->a.chunks = ba->chunk;
    ba->a.chunk_shift = 31;
    ba->a.stride = sizeof(struct bw_rec);
    ba->a.node_off = 0;
    return 0;
}

#define BW_MS UINT64_C(1000000)
#define BW_S UINT64_C(1000000000)

static void bw_line(FILE *out, const char *what, uint64_t ns, uint64_t ops, const char *target) {
    fprintf(out, "wheel %-24s %7.2f ns/op   (%llu ops%s%s)\n", what, (double)ns / (double)ops,
            (unsigned long long)ops, target ? ", target " : "", target ? target : "");
}

/* add, cancel, move earlier, extend, next: 1024 hot nodes. Each figure is
 * the best of `batches` batches, which filters out preemption by other
 * processes on a shared machine. */
static void bw_hot(FILE *out, int quick) {
    enum { N = 1024 };
    const unsigned batches = quick ? 3 : 15, rounds = quick ? 40 : 200;
    const uint64_t t0 = 1000 * BW_S;
    struct bw_arena ba;
    struct sluice__wheel w;
    static uint64_t off[N];
    if (bw_arena_init(&ba, N)) return;
    sluice__wheel_init(&w, &ba.a, BW_MS, t0);
    for (uint32_t i = 0; i < N; i++) off[i] = BW_MS + bw_rand() % (10 * BW_S);
    const uint64_t ops = (uint64_t)rounds * N;
    uint64_t best_add = UINT64_MAX, best_del = UINT64_MAX, best_early = UINT64_MAX, best_ext = UINT64_MAX,
             best_next = UINT64_MAX;
    uint64_t mbase = t0 + 20 * BW_S, back = 0, fwd = 0;
    for (unsigned bt = 0; bt < batches; bt++) {
        /* add + cancel, timed separately over the same rounds */
        uint64_t t_add = 0, t_del = 0;
        for (unsigned r = 0; r < rounds; r++) {
            uint64_t a = bw_now();
            for (uint32_t i = 0; i < N; i++) sluice__wheel_add(&w, i, t0 + off[i]);
            BW_CLOBBER(&w);
            uint64_t b = bw_now();
            for (uint32_t i = 0; i < N; i++) sluice__wheel_del(&w, i);
            BW_CLOBBER(&w);
            t_add += b - a;
            t_del += bw_now() - b;
        }
        if (t_add < best_add) best_add = t_add;
        if (t_del < best_del) best_del = t_del;

        /* move earlier: each round sets every node 1 tick (+1 ns) earlier,
         * so every call unlinks and places again; deadlines stay ahead. */
        for (uint32_t i = 0; i < N; i++) sluice__wheel_add(&w, i, mbase + off[i] - back);
        uint64_t a = bw_now();
        for (unsigned r = 0; r < rounds; r++) {
            back += BW_MS + 1;
            for (uint32_t i = 0; i < N; i++) sluice__wheel_set(&w, i, mbase + off[i] - back);
            BW_CLOBBER(&w);
        }
        uint64_t b = bw_now();
        if (b - a < best_early) best_early = b - a;

        /* extend (the debounce hot path): each round pushes every deadline later */
        a = bw_now();
        for (unsigned r = 0; r < rounds; r++) {
            fwd += BW_MS;
            for (uint32_t i = 0; i < N; i++) sluice__wheel_set(&w, i, mbase + off[i] + fwd);
            BW_CLOBBER(&w);
        }
        b = bw_now();
        if (b - a < best_ext) best_ext = b - a;

        /* next deadline: the wheel is re-read on every call (memory clobber) */
        uint64_t acc = 0;
        a = bw_now();
        for (uint64_t k = 0; k < ops; k++) {
            BW_CLOBBER(&w);
            acc += sluice__wheel_next(&w);
        }
        b = bw_now();
        bw_sink = acc;
        if (b - a < best_next) best_next = b - a;
        for (uint32_t i = 0; i < N; i++) sluice__wheel_del(&w, i);
    }
    bw_line(out, "add 1k:", best_add, ops, "<= 10 ns");
    bw_line(out, "cancel 1k:", best_del, ops, "<= 10 ns");
    bw_line(out, "move earlier 1k:", best_early, ops, "<= 10 ns");
    bw_line(out, "extend 1k:", best_ext, ops, "<= 3 ns");
    bw_line(out, "next:", best_next, ops, "<= 2 ns");
    if (sluice__wheel_check(&w) != 0) fprintf(out, "wheel bench: sluice__wheel_check FAILED after the hot benchmarks\n");
    free(ba.recs);
}

/* Arms n timers over `spread` ns, then fires them all. step_mode: wake at
 * every sluice__wheel_next() like an event loop; otherwise one advance past the end. */
static int bw_fire_once(uint32_t n, uint64_t spread, int step_mode, uint64_t *t_add, uint64_t *t_fire,
                        uint64_t *fired_out, uint64_t *wakeups_out) {
    const uint64_t t0 = 1000 * BW_S;
    struct bw_arena ba;
    struct sluice__wheel w;
    if (bw_arena_init(&ba, n)) return -1;
    uint64_t *dl = malloc((size_t)n * sizeof *dl);
    uint32_t *order = malloc((size_t)n * sizeof *order);
    if (!dl || !order) {
        free(ba.recs);
        free(dl);
        free(order);
        return -1;
    }
    /* Arm in a random order, so the lists are scattered through memory as
     * they are in a real table of keys. */
    for (uint32_t i = 0; i < n; i++) order[i] = i;
    for (uint32_t i = n - 1; i > 0; i--) {
        uint32_t j = (uint32_t)(bw_rand() % (i + 1));
        uint32_t tmp = order[i];
        order[i] = order[j];
        order[j] = tmp;
    }
    for (uint32_t i = 0; i < n; i++) dl[i] = t0 + 1 + bw_rand() % spread;
    sluice__wheel_init(&w, &ba.a, BW_MS, t0);
    uint64_t a = bw_now();
    for (uint32_t k = 0; k < n; k++) sluice__wheel_add(&w, order[k], dl[order[k]]);
    uint64_t b = bw_now();
    uint64_t fired = 0, wakeups = 0, acc = 0;
    if (step_mode) {
        while (w.count) {
            uint64_t t = sluice__wheel_next(&w);
            if (t == UINT64_MAX) break;
            sluice__wheel_advance(&w, t);
            wakeups++;
            for (uint32_t i; (i = sluice__wheel_pop(&w)) != SLUICE__WHEEL_NONE;) {
                acc += ba.recs[i].key; /* the limiter reads the entry next */
                fired++;
            }
        }
    } else {
        sluice__wheel_advance(&w, t0 + spread + BW_MS);
        wakeups = 1;
        for (uint32_t i; (i = sluice__wheel_pop(&w)) != SLUICE__WHEEL_NONE;) {
            acc += ba.recs[i].key;
            fired++;
        }
    }
    uint64_t c = bw_now();
    bw_sink = acc;
    *t_add = b - a;
    *t_fire = c - b;
    *fired_out = fired;
    *wakeups_out = wakeups;
    free(ba.recs);
    free(dl);
    free(order);
    return 0;
}

/* Best of `reps` runs of bw_fire_once. */
static void bw_fire(FILE *out, uint32_t n, uint64_t spread, int step_mode, const char *label, unsigned reps) {
    uint64_t best_add = UINT64_MAX, best_fire = UINT64_MAX, fired = 0, wakeups = 0;
    for (unsigned r = 0; r < reps; r++) {
        uint64_t ta, tf;
        if (bw_fire_once(n, spread, step_mode, &ta, &tf, &fired, &wakeups)) return;
        if (fired != n) fprintf(out, "wheel bench: FIRED %llu of %u\n", (unsigned long long)fired, n);
        if (ta < best_add) best_add = ta;
        if (tf < best_fire) best_fire = tf;
    }
    char what[64];
    if (step_mode) {
        snprintf(what, sizeof what, "add %s (cold):", label);
        bw_line(out, what, best_add, n, NULL);
    }
    snprintf(what, sizeof what, "fire %s%s:", label, step_mode ? "" : " one jump");
    fprintf(out, "wheel %-24s %7.2f ns/timer (%llu fired, %llu wake-ups%s)\n", what, (double)best_fire / (double)n,
            (unsigned long long)fired, (unsigned long long)wakeups, step_mode ? ", target <= 50 ns" : "");
}

/* The memory floor for firing: one dependent walk over n records in random
 * order (each step must load a record to learn the next), which is what any
 * linked timer structure does when timers live in a hash table's entries. */
static void bw_chase(FILE *out, uint32_t n, const char *label) {
    struct bw_rec *r = malloc((size_t)n * sizeof *r);
    uint32_t *order = malloc((size_t)n * sizeof *order);
    if (!r || !order) {
        free(r);
        free(order);
        return;
    }
    for (uint32_t i = 0; i < n; i++) order[i] = i;
    for (uint32_t i = n - 1; i > 0; i--) {
        uint32_t j = (uint32_t)(bw_rand() % (i + 1));
        uint32_t tmp = order[i];
        order[i] = order[j];
        order[j] = tmp;
    }
    for (uint32_t k = 0; k < n; k++) {
        r[order[k]].node.link.next = order[(k + 1) % n];
        r[order[k]].key = k;
    }
    uint64_t best = UINT64_MAX;
    for (unsigned rep = 0; rep < 3; rep++) {
        uint64_t acc = 0, a = bw_now();
        uint32_t i = order[0];
        for (uint32_t k = 0; k < n; k++) {
            acc += r[i].key;
            i = r[i].node.link.next;
        }
        uint64_t b = bw_now();
        bw_sink = acc;
        if (b - a < best) best = b - a;
    }
    char what[64];
    snprintf(what, sizeof what, "floor: walk %s records:", label);
    fprintf(out, "wheel %-24s %7.2f ns/record (dependent loads in random order: memory latency)\n", what,
            (double)best / (double)n);
    free(r);
    free(order);
}

void bench_wheel_run(FILE *out, int quick) {
    fprintf(out, "wheel benchmark (%s): tick 1 ms, %zu-byte records\n", quick ? "quick" : "full",
            sizeof(struct bw_rec));
    bw_hot(out, quick);
    if (!quick) {
        bw_fire(out, 1000000, 3 * BW_S, 1, "1M", 3);
        bw_fire(out, 1000000, 3 * BW_S, 0, "1M", 3);
        bw_chase(out, 1000000, "1M");
    }
    bw_fire(out, 100000, 3 * BW_S, 1, "100k", quick ? 1 : 5);
    bw_fire(out, 100000, 3 * BW_S, 0, "100k", quick ? 1 : 5);
    bw_chase(out, 100000, "100k");
}

#ifdef BENCH_WHEEL_MAIN
int main(int argc, char **argv) {
    int quick = argc > 1 && strcmp(argv[1], "--quick") == 0;
    bench_wheel_run(stdout, quick);
    return 0;
}
#endif
