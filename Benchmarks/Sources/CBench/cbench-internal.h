/* cbench-internal.h — helpers shared by the C implementations. */
#ifndef CBENCH_INTERNAL_H
#define CBENCH_INTERNAL_H

#include "cbench.h"

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define CB_MS UINT64_C(1000000)
#define CB_S UINT64_C(1000000000)

/** Prints and exits (status 3): for impossible setup failures. */
void cb_die(const char *what) __attribute__((noreturn));
/** Whether more than budget_s seconds passed since t0 (budget 0: never). */
bool cb_over_budget(uint64_t t0, double budget_s);

/* The start line of the `threads` scenario. Each worker sets itself up,
 * calls cb_gate_ready() (which holds it until every worker is ready), then
 * works until cb_gate_stopped(). cb_gate_run() starts `n` workers
 * fn(args + i * stride), opens the gate, lets them run for budget_s, stops
 * and joins them, and reports the wall and process-CPU time in between. */
typedef struct cb_gate {
    atomic_bool stop, go;
    atomic_int ready;
} cb_gate_t;

void cb_gate_ready(cb_gate_t *g);
static inline bool cb_gate_stopped(cb_gate_t *g) { return atomic_load_explicit(&g->stop, memory_order_relaxed); }
void cb_gate_run(cb_gate_t *g, int n, void *(*fn)(void *), void *args, size_t stride, double budget_s,
                 uint64_t *wall_ns, uint64_t *cpu_ns);

/** The consumer: one serial consumer per process, as in every
 *  implementation; it folds each delivered value into a checksum. */
extern _Thread_local uint64_t cb_consumed;
static inline void cb_consume(uint64_t value) { cb_consumed += value + 1; }

/* An open-addressing (linear probing) table from nonzero 64-bit keys to
 * pointers: what a C engineer puts beside libevent to find a key's record.
 * Cheap multiplicative hash (the keys are not attacker-chosen here). */
typedef struct cb_slot {
    uint64_t key; /* 0 = empty */
    void *val;
} cb_slot_t;

typedef struct cb_table {
    cb_slot_t *slots;
    size_t cap, mask, count;
} cb_table_t;

static inline uint64_t cb_table_hash(uint64_t k) {
    uint64_t h = k * UINT64_C(0x9E3779B97F4A7C15);
    return h ^ (h >> 29);
}

void cb_table_init(cb_table_t *t, size_t expected);
void cb_table_free(cb_table_t *t);
void cb_table_put(cb_table_t *t, uint64_t key, void *val);
void cb_table_del(cb_table_t *t, uint64_t key);

static inline void *cb_table_get(const cb_table_t *t, uint64_t key) {
    size_t i = cb_table_hash(key) & t->mask;
    for (;;) {
        uint64_t k = t->slots[i].key;
        if (k == key) return t->slots[i].val;
        if (!k) return NULL;
        i = (i + 1) & t->mask;
    }
}

/** Lateness samples: preallocated, filled by the single consumer. */
typedef struct cb_late {
    uint64_t *v;
    size_t n, cap;
    uint64_t early;
} cb_late_t;

static inline void cb_late_add(cb_late_t *l, uint64_t now, uint64_t deadline) {
    if (now < deadline) {
        l->early++;
        return;
    }
    if (l->n < l->cap) l->v[l->n++] = now - deadline;
}

/* A private redis-server on a free loopback port (fleet.c), for the fleet
 * scenarios: the port; a started server's pid (it answered PING) or -1; its
 * CPU time so far (user + system, ns; 0 when unknown); stop (SIGKILL). */
int cb_redis_free_port(void);
int cb_redis_start(int port);
uint64_t cb_redis_cpu_ns(int port);
void cb_redis_stop(int pid);

#endif
