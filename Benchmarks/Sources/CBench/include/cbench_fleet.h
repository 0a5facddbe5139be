/*
 * cbench_fleet.h — the "fleet" scenario: rate decisions shared through a real
 * redis-server that the driver starts (free loopback port, no persistence).
 *
 *  - "sluice-redis":   the fleet limiter (sluice_fleet.h): one hiredis
 *                      connection, pipelined, certain drops answered locally;
 *  - "redis-per-call": the same Lua script run with a blocking EVALSHA per
 *                      request over a small pool of connections (one thread
 *                      each): what a service calling Redis per request does;
 *  - "sluice-redis-tls": sluice-redis over TLS (rediss://, the server's
 *                      certificate verified), to the same server's TLS port,
 *                      with a CA and certificate made at run time by openssl;
 *  - "sluice-redis-3q": sluice-redis with a plan of three quotas per key
 *                      (all or nothing in one script run): its Redis CPU per
 *                      decision beside sluice-redis's one quota;
 *  - "sluice-redis-cluster", "redis-per-call-cluster": the same two against a
 *                      Redis Cluster of 3 primaries (no replicas) that the
 *                      driver starts (CLUSTER ADDSLOTSRANGE and MEET, no
 *                      redis-cli): sluice-redis through a redis+cluster://
 *                      URL (one pipelined connection per primary, one key per
 *                      script run); redis-per-call with a connection to each
 *                      primary per thread, each EVALSHA sent to its key's
 *                      node (the slot by CRC16 of the hash tag, the nodes
 *                      from CLUSTER SLOTS: hiredis has no cluster support).
 *                      The cluster is started by a process's first cluster
 *                      run and kept (FLUSHALL between runs) until it exits.
 *
 * Closed loop (rate 0) measures throughput at saturation; open loop (rate > 0)
 * measures the latency of calls at the offered load `rate` (the suite offers
 * half of the implementation's own closed-loop throughput).
 *
 * Workloads (policy: 10 calls per second per key, burst 10):
 *  - "mixed": calls spread over 10,000 keys (most admitted);
 *  - "abuse": calls on 4 keys far over their quota (almost all dropped).
 */
#ifndef CBENCH_FLEET_H
#define CBENCH_FLEET_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct cb_fleet_params {
    int impl;       /**< 0 sluice-redis, 1 redis-per-call */
    int tls;        /**< sluice-redis: connect over TLS (needs the openssl command) */
    int quotas;     /**< sluice-redis: 0 the one policy; 3 a plan of three quotas (the policy as
                         "second", and "minute" and "hour", which never bind here), called
                         with sluice_fleet_call_plan() */
    int cluster;    /**< 1: against a 3-primary Redis Cluster (either impl; not with tls) */
    int workload;   /**< 0 mixed, 1 abuse */
    uint64_t calls; /**< calls to make */
    int pool;       /**< redis-per-call: connections (threads); sluice-redis: requests in flight
                         (closed loop; ignored when `rate` is set) */
    double rate;    /**< 0: closed loop (as fast as it goes: throughput); > 0: open loop, the
                         offered load in calls per second (call i is due at start + i/rate, and
                         its latency counts from that due time, so a client that falls behind
                         sees the queueing in its latency); sluice-redis then runs on a
                         loop thread of its own and 4 threads make the calls, as
                         redis-per-call's 4 */
} cb_fleet_params_t;

typedef struct cb_fleet_result {
    uint64_t ops;                  /**< calls answered */
    double ns_per_op;              /**< wall ns per call (throughput) */
    double p50_us, p99_us, max_us; /**< latency of a call, submit to answer */
    uint64_t admitted;             /**< calls admitted */
    uint64_t over_admitted;        /**< admissions beyond burst + elapsed/T, summed over keys (must be 0) */
    uint64_t failures;             /**< calls not decided by Redis or the cache (timeouts, errors) */
    uint64_t script_runs;          /**< EVALSHA commands Redis ran (sluice-redis: batches) */
    double redis_cpu_ns_per_op;    /**< the server's CPU time (user + system; a cluster: all its nodes')
                                        per call, or 0 */
    char note[160];                /**< empty, or what went wrong */
} cb_fleet_result_t;

/** Runs one fleet case (starts and stops its own redis-server, or cluster).
 *  @return 0 or -1 (see note). */
int cb_fleet(const cb_fleet_params_t *p, cb_fleet_result_t *r);

#ifdef __cplusplus
}
#endif

#endif
