/* common.c — workload generation, clocks and memory readings shared by all
 * implementations (C and Swift). */
#include "cbench.h"
#include "cbench-internal.h"

#include <pthread.h>

#include <event2/event.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

void cb_result_reset(cb_result_t *r) {
    memset(r, 0, sizeof *r);
    r->cpu_ns_per_op = -1;
    r->bytes_per_key = -1;
    r->idle_bytes_per_key = -1;
    r->peak_rss_bytes = -1;
    r->ns_per_op = -1;
}

void cb_result_free(cb_result_t *r) {
    free(r->lateness_ns);
    r->lateness_ns = NULL;
    r->lateness_n = 0;
}

uint64_t cb_rand(uint64_t *s) {
    uint64_t z = (*s += UINT64_C(0x9e3779b97f4a7c15));
    z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
    z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
    return z ^ (z >> 31);
}

/* A bijection of 64-bit integers (the splitmix64 finaliser), so the keys of
 * 0..n-1 are distinct and look random. */
static uint64_t scramble(uint64_t x) {
    x ^= x >> 30;
    x *= UINT64_C(0xbf58476d1ce4e5b9);
    x ^= x >> 27;
    x *= UINT64_C(0x94d049bb133111eb);
    x ^= x >> 31;
    return x;
}

uint64_t *cb_make_keys(size_t n) {
    uint64_t *k = malloc((n ? n : 1) * sizeof *k);
    if (!k) cb_die("out of memory (keys)");
    for (size_t i = 0; i < n; i++) {
        uint64_t v = scramble(i + 1);
        k[i] = v ? v : UINT64_C(0x8000000000000000); /* never 0 (the table's empty mark) */
    }
    return k;
}

uint32_t *cb_make_order(size_t n, size_t ops, uint64_t seed) {
    uint32_t *o = malloc((ops ? ops : 1) * sizeof *o);
    if (!o) cb_die("out of memory (order)");
    uint64_t s = seed;
    for (size_t i = 0; i < ops; i++) o[i] = (uint32_t)(cb_rand(&s) % (n ? n : 1));
    return o;
}

static uint64_t clock_ns(clockid_t id) {
    struct timespec ts;
    clock_gettime(id, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

uint64_t cb_now(void) { return clock_ns(CLOCK_MONOTONIC); }
uint64_t cb_process_cpu(void) { return clock_ns(CLOCK_PROCESS_CPUTIME_ID); }
uint64_t cb_thread_cpu(void) { return clock_ns(CLOCK_THREAD_CPUTIME_ID); }

void cb_sleep_until(uint64_t t) {
    struct timespec ts = { (time_t)(t / 1000000000u), (long)(t % 1000000000u) };
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) != 0) {
    }
}

uint64_t cb_rss(void) {
    FILE *f = fopen("/proc/self/statm", "r");
    if (!f) return 0;
    unsigned long size = 0, resident = 0;
    int n = fscanf(f, "%lu %lu", &size, &resident);
    fclose(f);
    if (n != 2) return 0;
    return (uint64_t)resident * (uint64_t)sysconf(_SC_PAGESIZE);
}

int cb_reset_peak_rss(void) {
    int fd = open("/proc/self/clear_refs", O_WRONLY);
    if (fd < 0) return -1;
    ssize_t w = write(fd, "5", 1);
    close(fd);
    return w == 1 ? 0 : -1;
}

uint64_t cb_peak_rss(void) {
    FILE *f = fopen("/proc/self/status", "r");
    if (!f) return 0;
    char line[256];
    uint64_t kb = 0;
    while (fgets(line, sizeof line, f)) {
        if (strncmp(line, "VmHWM:", 6) == 0) {
            kb = strtoull(line + 6, NULL, 10);
            break;
        }
    }
    fclose(f);
    return kb * 1024;
}

const char *cb_cc_version(void) { return __VERSION__; }
const char *cb_libevent_version(void) { return event_get_version(); }

void cb_keep(uint64_t v) { __asm__ volatile("" : : "r"(v) : "memory"); }

void cb_die(const char *what) {
    fprintf(stderr, "cbench: %s\n", what);
    exit(3);
}

bool cb_over_budget(uint64_t t0, double budget_s) { return budget_s > 0 && (double)(cb_now() - t0) > budget_s * 1e9; }

/* ------------------------------------------------------------------ table */

static size_t pow2_at_least(size_t n) {
    size_t c = 16;
    while (c < n) c <<= 1;
    return c;
}

void cb_table_init(cb_table_t *t, size_t expected) {
    t->cap = pow2_at_least(expected + expected / 3 + 1);
    t->mask = t->cap - 1;
    t->count = 0;
    t->slots = calloc(t->cap, sizeof *t->slots);
    if (!t->slots) cb_die("out of memory (table)");
}

void cb_table_free(cb_table_t *t) {
    free(t->slots);
    memset(t, 0, sizeof *t);
}

static void table_grow(cb_table_t *t) {
    cb_table_t n;
    n.cap = t->cap * 2;
    n.mask = n.cap - 1;
    n.count = 0;
    n.slots = calloc(n.cap, sizeof *n.slots);
    if (!n.slots) cb_die("out of memory (table grow)");
    for (size_t i = 0; i < t->cap; i++)
        if (t->slots[i].key) cb_table_put(&n, t->slots[i].key, t->slots[i].val);
    free(t->slots);
    *t = n;
}

void cb_table_put(cb_table_t *t, uint64_t key, void *val) {
    if ((t->count + 1) * 4 > t->cap * 3) table_grow(t);
    size_t i = cb_table_hash(key) & t->mask;
    while (t->slots[i].key) {
        if (t->slots[i].key == key) {
            t->slots[i].val = val;
            return;
        }
        i = (i + 1) & t->mask;
    }
    t->slots[i].key = key;
    t->slots[i].val = val;
    t->count++;
}

void cb_table_del(cb_table_t *t, uint64_t key) {
    size_t i = cb_table_hash(key) & t->mask;
    while (t->slots[i].key != key) {
        if (!t->slots[i].key) return;
        i = (i + 1) & t->mask;
    }
    /* backward-shift deletion: no tombstones */
    size_t j = i;
    for (;;) {
        t->slots[i].key = 0;
        t->slots[i].val = NULL;
        for (;;) {
            j = (j + 1) & t->mask;
            if (!t->slots[j].key) {
                t->count--;
                return;
            }
            size_t home = cb_table_hash(t->slots[j].key) & t->mask;
            /* move j back to i unless its home lies cyclically in (i, j] */
            if (i <= j ? (i < home && home <= j) : (i < home || home <= j)) continue;
            break;
        }
        t->slots[i] = t->slots[j];
        i = j;
    }
}

void cb_gate_ready(cb_gate_t *g) {
    atomic_fetch_add(&g->ready, 1);
    while (!atomic_load(&g->go)) {
    }
}

void cb_gate_run(cb_gate_t *g, int n, void *(*fn)(void *), void *args, size_t stride, double budget_s,
                 uint64_t *wall_ns, uint64_t *cpu_ns) {
    pthread_t th[8];
    if (n > 8) n = 8;
    atomic_init(&g->stop, false);
    atomic_init(&g->go, false);
    atomic_init(&g->ready, 0);
    for (int t = 0; t < n; t++)
        if (pthread_create(&th[t], NULL, fn, (char *)args + (size_t)t * stride) != 0) cb_die("pthread_create");
    while (atomic_load(&g->ready) < n) cb_sleep_until(cb_now() + 100000u);
    uint64_t c0 = cb_process_cpu(), t0 = cb_now();
    atomic_store(&g->go, true);
    cb_sleep_until(t0 + (uint64_t)(budget_s * 1e9));
    atomic_store(&g->stop, true);
    for (int t = 0; t < n; t++) pthread_join(th[t], NULL);
    *wall_ns = cb_now() - t0;
    *cpu_ns = cb_process_cpu() - c0;
}

cb_quota_t cb_quota(int i) {
    static const cb_quota_t plan[CB_QUOTA_COUNT] = {
        { 10, 1 * CB_S, 10 },          /* "second": 10 per second, burst 10 */
        { 300, 60 * CB_S, 300 },       /* "minute": 300 per minute */
        { 10000, 3600 * CB_S, 10000 }, /* "hour": 10 000 per hour */
    };
    return plan[i < 0 ? 0 : i >= CB_QUOTA_COUNT ? CB_QUOTA_COUNT - 1 : i];
}
