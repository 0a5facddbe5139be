/*
 * cbench.h — the C side of Sluice's benchmark suite.
 *
 * Three implementations are written in C so that nothing but their own code
 * is measured:
 *  - "sluice-c":        the core (sluice.h) on a manual clock, or the loop
 *                       layer (sluice_loop.h) where the scenario needs a real
 *                       clock (lateness, threads); "sluice-c-coarse" is its
 *                       threads case with the coarse clock
 *                       (SLUICE_MT_COARSE_CLOCK);
 *  - "libevent-timers": one struct event per key on libevent's min-heap, keys
 *                       in an open-addressing hash table (what a C engineer
 *                       writes on libevent);
 *  - "floor":           one random read-modify-write into an array of N
 *                       64-byte records (prefetch-free): the least any keyed
 *                       structure pays per operation.
 *
 * The workloads (keys, key orders, policies, clocks) are defined once here
 * and shared with the Swift implementations (BenchSuite), so every
 * implementation runs exactly the same sequence of calls.
 */
#ifndef CBENCH_H
#define CBENCH_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------ */
/* Workload                                                            */
/* ------------------------------------------------------------------ */

/** Scenarios (names in the JSON: see cb_scenario_name()). */
typedef enum cb_scenario {
    CB_THROTTLE_HOT = 0,
    CB_DEBOUNCE_REARM = 1,
    CB_FIRE = 2, /* also yields the memory figures (same setup) */
    CB_LATENESS = 3,
    CB_SPRAY = 4,
    CB_THREADS = 5,
    CB_QUOTAS = 6, /* rate: a plan of CB_QUOTA_COUNT quotas, or one (1 thread: core; 2: loop) */
} cb_scenario_t;

/** One quota of the `quotas` scenario's plan: limit calls per per_ns, burst. */
typedef struct cb_quota {
    uint64_t limit;
    uint64_t per_ns;
    uint64_t burst;
} cb_quota_t;

/** The `quotas` scenario's plan, shared by sluice-c and dispatch-tuned: 10 per
 *  second (burst 10), 300 per minute, 10 000 per hour (bursts = limits).
 *  Every period is a whole multiple of its limit (emission intervals of 100,
 *  200 and 360 ms), so a GCRA in integer nanoseconds is exact. Quota 0 alone
 *  is the single-quota companion (sluice-c-1q). */
#define CB_QUOTA_COUNT 3
cb_quota_t cb_quota(int i);

/** Workload parameters: one case of one scenario. */
typedef struct cb_params {
    size_t keys;      /**< N: distinct keys */
    size_t ops;       /**< upper bound on measured operations */
    double budget_s;  /**< upper bound on the measured phase's wall time (0: none) */
    int threads;      /**< threads scenario: 1 or 2 */
    int coarse_clock; /**< threads scenario, sluice-c: the loop limiter reads the coarse clock */
    int quotas;       /**< quotas scenario, sluice-c: 3 (a plan, cb_quota(0..2)) or 1 (sluice_rate(), cb_quota(0)) */
    uint64_t interval_ns;  /**< the policy's interval (scenario-specific) */
    uint64_t spread_ns;    /**< lateness: submissions spread over this time */
    size_t cap;            /**< spray: the key cap */
    const uint64_t *key;   /**< keys[N]: the 64-bit keys (cb_make_keys) */
    const uint32_t *order; /**< order[ops]: random indices into key[] (cb_make_order) */
} cb_params_t;

/** What one case measured. Fields that do not apply stay at their reset
 *  value (cb_result_reset()): -1 for doubles, 0 for counts. */
typedef struct cb_result {
    uint64_t ops;              /**< operations measured (calls, or emissions for fire) */
    double ns_per_op;          /**< wall ns per operation */
    double cpu_ns_per_op;      /**< process CPU ns per operation (all threads), -1 if not measured */
    double bytes_per_key;      /**< RSS delta per pending key (fire/memory), -1 if none */
    double idle_bytes_per_key; /**< RSS delta per key once everything fired and went idle, -1 if none */
    double peak_rss_bytes;     /**< spray: peak RSS growth during the spray, -1 if none */
    uint64_t delivered;        /**< emissions delivered to the consumer */
    uint64_t refused;          /**< spray: calls refused by the key cap */
    uint64_t early;            /**< lateness: deliveries before their deadline (must be 0) */
    uint64_t admitted;         /**< quotas: measured calls admitted */
    uint64_t *lateness_ns;     /**< lateness: one sample per delivery (malloc'ed; cb_result_free) */
    size_t lateness_n;
} cb_result_t;

void cb_result_reset(cb_result_t *r);
void cb_result_free(cb_result_t *r);

/** The N keys: distinct, scrambled 64-bit integers (never 0). Caller frees. */
uint64_t *cb_make_keys(size_t n);
/** `ops` uniformly random indices in [0, n) (splitmix64, seeded). Caller frees. */
uint32_t *cb_make_order(size_t n, size_t ops, uint64_t seed);
/** splitmix64 step. */
uint64_t cb_rand(uint64_t *state);

/** CLOCK_MONOTONIC in ns (the clock every real-time implementation uses). */
uint64_t cb_now(void);
/** CPU time of the whole process, ns. */
uint64_t cb_process_cpu(void);
/** CPU time of the calling thread, ns. */
uint64_t cb_thread_cpu(void);
/** Sleeps until CLOCK_MONOTONIC reaches t (ns). */
void cb_sleep_until(uint64_t t);
/** Resident set size now, bytes (/proc/self/statm). */
uint64_t cb_rss(void);
/** Resets the peak RSS (VmHWM) to the current RSS: 0 on success. */
int cb_reset_peak_rss(void);
/** Peak RSS since start or the last reset, bytes (VmHWM). */
uint64_t cb_peak_rss(void);
/** Keeps a value alive (defeats dead-code elimination). */
void cb_keep(uint64_t v);
/** The C compiler that built this target (__VERSION__). */
const char *cb_cc_version(void);
/** libevent's version string. */
const char *cb_libevent_version(void);

/** The manual clock of the Sluice scenarios: time moves 100 µs every 1024
 *  calls (about 100 ns per call), the same for sluice-c and sluice-swift. */
static inline uint64_t cb_manual_now(uint64_t t0, size_t i) { return t0 + (uint64_t)(i >> 10) * 102400u; }

/* ------------------------------------------------------------------ */
/* Implementations                                                     */
/* ------------------------------------------------------------------ */

/** Runs one case of "sluice-c". @return 0, or a negative error (printed). */
int cb_sluice_c(cb_scenario_t scenario, const cb_params_t *p, cb_result_t *out);
/** Runs one case of "sluice-c-batch": as "sluice-c", the measured calls in
 *  batches (sluice_limiter_submit_many). Throttle-hot and debounce-rearm only
 *  (-1 for the other scenarios). */
int cb_sluice_c_batch(cb_scenario_t scenario, const cb_params_t *p, cb_result_t *out);
/** Runs one case of "libevent-timers". */
int cb_libevent(cb_scenario_t scenario, const cb_params_t *p, cb_result_t *out);
/** Runs one case of "floor". Scenarios: any keyed one (the same random
 *  access stands for throttle-hot, debounce-rearm and threads). */
int cb_floor(cb_scenario_t scenario, const cb_params_t *p, cb_result_t *out);
/** After cb_floor() on a single-thread scenario: ns per access of the same
 *  loop without the dependency between accesses (overlapped by the CPU). */
double cb_floor_independent(void);

/* ------------------------------------------------------------------ */
/* Single operations, for the package-benchmark microbenchmarks        */
/* ------------------------------------------------------------------ */

/** An opaque C core limiter prepared for one hot operation. */
typedef struct cb_op cb_op_t;
/** kind 0: throttle submit on existing keys; 1: debounce re-arm; 2: rate on warm keys. */
cb_op_t *cb_op_new(int kind, size_t keys);
/** Runs `count` operations in random key order; returns a checksum. */
uint64_t cb_op_run(cb_op_t *op, size_t count);
void cb_op_free(cb_op_t *op);

#ifdef __cplusplus
}
#endif

#endif /* CBENCH_H */
