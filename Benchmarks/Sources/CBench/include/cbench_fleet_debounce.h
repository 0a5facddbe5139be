/*
 * cbench_fleet_debounce.h — the "fleet-debounce" scenario: debounce across a
 * fleet of processes with its state in a real redis-server that the driver
 * starts (free loopback port, no persistence, as the "fleet" scenario).
 *
 * Both implementations run the same processes: 2 submitting processes that
 * call (re-arm) the debounce of keys as fast as they go (closed loop) for a
 * fixed time, and 2 worker processes that deliver each emission and
 * acknowledge it at once, recording its lateness (CLOCK_REALTIME when the
 * handler runs, minus the emission's deadline, which is Redis's clock: the
 * same clock on this host). Debounce, trailing edge, interval `interval_ns`.
 *
 * Keys: a hot window of `window` keys walks over `keys` keys: call j (a
 * counter the submitters share through shared memory) goes to a pseudo-random
 * key of window j / (2 * `per_window`) (window w is keys w*window ..
 * w*window+window-1, modulo `keys`). Both submitters walk the same windows in
 * step, so each key of a window gets 2 * per_window / window calls from both
 * processes while its window is hot, then goes quiet and emits its last
 * value once (the debounce of a burst that spans processes).
 *
 *  - "sluice-fleet-timed" (impl 0): sluice_fleet_timed.h. Each submitter has
 *    a timed limiter (sluice_debounce(interval, trailing)) on its own
 *    event_base, `in_flight` calls outstanding (pipelined and batched by the
 *    limiter); each worker a limiter started as a worker
 *    (sluice_fleet_timed_start(), poll `poll_ns`), whose handler acks at once.
 *  - "redis-delayed-job" (impl 1): what a BullMQ-style delayed queue with a
 *    deduplication key does (debounce mode, extend + replace), written for
 *    speed: per call one blocking EVALSHA (hiredis) of an upsert script that
 *    finds the key's current job through a dedup hash (key -> job id); if that
 *    job still waits in the delayed ZSET (score = due time, µs of Redis's
 *    TIME, > now) it replaces the job's payload and re-scores it to
 *    now + interval (extend), else it makes a new job (id = key:now) with its
 *    payload and due time. Each submitter runs `in_flight` threads, each with
 *    its own connection (blocking calls in parallel). Each worker loops on one
 *    connection: a claim script moves up to 64 due jobs (ZRANGEBYSCORE ...
 *    LIMIT, ZREM, ZADD to an active ZSET with a lease end, HMGET of the
 *    payloads; jobs whose lease ended first) and returns them with the
 *    earliest due time left; the worker handles them, then sends the batch's
 *    ack script (ZREM from active, HDEL the payload and the dedup entry)
 *    pipelined with the next claim (one round trip, as BullMQ's
 *    moveToFinished fetches the next job); when nothing more is due it sleeps
 *    until the earliest due time returned (at most `poll_ns`).
 *
 * Tuning by hand: the environment variables CB_FD_IN_FLIGHT, CB_FD_PARTITIONS,
 * CB_FD_WINDOW, CB_FD_PER_WINDOW and CB_FD_POLL_MS override the parameters;
 * CB_FD_DEBUG=1 prints the server's INFO commandstats to stderr.
 *
 * Correctness (cheap, both impls): every call's Redis time is recorded; the
 * expected emissions are the calls not followed on their key by another call
 * within the interval (by Redis time), and the emitted values are compared
 * with them (missing, unexpected or duplicated values counted).
 */
#ifndef CBENCH_FLEET_DEBOUNCE_H
#define CBENCH_FLEET_DEBOUNCE_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct cb_fleet_debounce_params {
    int impl;             /**< 0 sluice-fleet-timed, 1 redis-delayed-job */
    int keys;             /**< the key space (100,000) */
    int window;           /**< keys in the hot window */
    int per_window;       /**< calls a submitter makes in each window */
    double seconds;       /**< how long the submitters call */
    int in_flight;        /**< sluice: calls outstanding per submitter; delayed-job: connections
                               (threads) per submitter */
    uint64_t interval_ns; /**< the debounce interval */
    uint64_t poll_ns;     /**< the longest a worker waits before claiming again */
    int partitions;       /**< sluice: config.partitions */
} cb_fleet_debounce_params_t;

typedef struct cb_fleet_debounce_result {
    uint64_t calls;                   /**< calls answered (both submitters) */
    uint64_t failures;                /**< calls or claims that failed */
    double calls_per_s;               /**< calls / the submitting time */
    uint64_t keys_called;             /**< distinct keys called */
    uint64_t emissions;               /**< deliveries handled by the workers */
    uint64_t expected;                /**< emissions the calls' Redis times imply */
    uint64_t missing;                 /**< expected values never delivered */
    uint64_t unexpected;              /**< values delivered that were superseded, or delivered twice */
    uint64_t claims;                  /**< claim script runs (both workers) */
    uint64_t late_samples;            /**< emissions whose lateness counts (due while the submitters ran) */
    double p50_us, p99_us, max_us;    /**< lateness of those */
    double redis_cpu_ns_per_call;     /**< the server's CPU (user + system) over the run / calls */
    double redis_cpu_ns_per_emission; /**< the same / emissions */
    char note[200];                   /**< empty, or what went wrong */
} cb_fleet_debounce_result_t;

/** Runs one fleet-debounce case (starts and stops its own redis-server).
 *  @return 0 or -1 (see note). */
int cb_fleet_debounce(const cb_fleet_debounce_params_t *p, cb_fleet_debounce_result_t *r);

#ifdef __cplusplus
}
#endif

#endif
