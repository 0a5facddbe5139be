/*
 * sluice_fleet.h — a rate limiter shared by a fleet of processes through Redis.
 *
 * A fleet limiter applies one GCRA rate policy (sluice_rate()), or a table of
 * plans of several quotas (config.plans: see "Plans" below), to keys whose
 * state lives in Redis, so every process using the same Redis, key prefix and
 * policy draws from the same quota. Each decision is made atomically in Redis
 * by one Lua script (loaded on each connection as a function library and run
 * with FCALL on Redis 7; otherwise, and until that load is confirmed, loaded
 * with SCRIPT LOAD and run with EVALSHA; EVAL when the server answers
 * NOSCRIPT or "Function not found"; docs/fleet.md, "Script"). The script follows
 * the local rate semantics exactly, weighted calls and the quota peek included,
 * in exact integer arithmetic over decimal strings (Lua numbers are doubles),
 * so a trace gives the same decisions on Redis as on the local core.
 *
 * Clock. By default the time of a decision is the Redis server's clock
 * (TIME inside the script, Unix time in ns), so the whole fleet shares one
 * clock. With config.local_clock each process stamps its calls with its own
 * CLOCK_REALTIME instead, for services whose scripts may not call TIME
 * (docs/fleet.md, "Managed services"): the servers' clocks must agree, since
 * a process whose clock is d ahead of the others can take up to d * limit /
 * per units more than its share of a key, and one d behind is refused that
 * much sooner. In manual-time mode (config.manual_time) the caller passes its
 * own time with each call: for traces and tests.
 *
 * Batches. Calls and quota reads are sent in batches: one script run decides up
 * to config.max_batch of them, in order, exactly as the same requests one by
 * one (a key may appear twice), at one reading of the server's clock. A
 * request waits for a batch only while two batches await their reply, so at
 * light load it goes out at once, and under load batches grow. This cuts
 * Redis's cost per decision (one script run, one clock reading, one command).
 * With Redis Cluster (redis+cluster://) a batch goes to one node and names
 * keys of any slots that node serves (one batch per node; a key the node
 * no longer serves is sent again alone to its slot's node).
 * The slot map is read (CLUSTER SLOTS) at start, after a MOVED, CLUSTERDOWN
 * or TRYAGAIN, when a node's connection is lost or refused, and
 * periodically: every 5 s while the primary of every slot is connected,
 * every 500 ms while one is not, so a replica promoted after its primary
 * failed (whose slots' calls get the failure policy meanwhile, never
 * reaching a node that could answer MOVED) is used within about half a
 * second of the cluster naming it.
 *
 * Threads. A fleet limiter lives on one libevent event_base, run by one
 * thread (the loop thread): a caller's (sluice_fleet_new()) or a loop of the
 * loop layer's (sluice_fleet_new_on_loop()); it has no thread of its own.
 * sluice_fleet_call(), _quota() and _cancel() may be called from any thread:
 * the request is queued to the loop thread, which pipelines it on one
 * connection (TCP, Unix socket or TLS: see config.url; with Redis Cluster,
 * the connection of the key's node). Every answer is delivered by the
 * request's callback on the loop thread, never inside the submitting call,
 * exactly once, and no later than the configured timeout after the call
 * (as long as the loop thread runs). When other threads call in, the
 * event_base must have been created after sluice_threads_init() (or
 * libevent's evthread_use_pthreads()).
 *
 * Local answers. When a drop is certain, the limiter answers without a round
 * trip: it keeps, per key, a lower bound of the key's theoretical arrival
 * time (TAT) learned from Redis replies. A key's TAT never moves earlier
 * except through cancel (or data loss in Redis), so a call of cost n at time
 * t is certainly dropped when t < cachedTAT + n*T - burst*T. sluice_fleet_cancel()
 * invalidates the entry at once; a cancel made by another process, or data
 * lost by Redis, is seen only when the entry expires (config.cache_ttl_ns).
 * The cache holds at most config.cache_slots entries.
 *
 * Faults. Each request has a timeout (default 50 ms). When Redis cannot answer
 * in time — down, unreachable, stalled, answering garbage — the request is
 * answered by the failure policy: fail closed (drop, with a retry time), fail
 * open (admit) or a local limiter (the core's sluice_limiter_* with its own
 * policy, typically the fleet's rate divided by the number of processes).
 * The connection is re-established with exponential backoff. When Redis
 * answers with an error (OOM, NOPERM, NOAUTH, READONLY...), the requests of
 * that command are answered by the failure policy with the error's class as
 * the cause, and a key whose Redis value is not Sluice state fails alone
 * (SLUICE_EBADVALUE) while the others of its batch are decided; the script
 * writes nothing for a refused batch.
 */
#ifndef SLUICE_FLEET_H
#define SLUICE_FLEET_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "sluice.h"
#include "sluice_loop.h"

#ifdef __cplusplus
extern "C" {
#endif

struct event_base;

/* Errors: the functions below return 0 or a negative SLUICE_E* code of
 * sluice_errors.h, described by sluice_strerror(). The causes of a failure
 * answer (sluice_fleet_result_t.cause) are those of Redis: SLUICE_ENOTCONN (no
 * connection), SLUICE_ETIMEDOUT (no answer within the timeout), SLUICE_EPROTO
 * (not a valid answer), SLUICE_EBADVALUE (the key's value in Redis is not
 * Sluice state: that request alone), and the classes of Redis's error
 * replies: SLUICE_EAUTH, SLUICE_ENOPERM, SLUICE_EOOM, SLUICE_EREADONLY,
 * SLUICE_ECLUSTERDOWN (CLUSTERDOWN or TRYAGAIN from a Redis Cluster node) and
 * SLUICE_EREDIS (any other). Behind Redis Sentinel also SLUICE_ENOMASTER (no
 * sentinel knows the master name), and SLUICE_EREADONLY for the requests in
 * flight when a failover moved the primary. docs/fleet.md lists what each
 * means and what to do. */

/** What to do when Redis cannot decide in time. */
typedef enum sluice_fleet_failure {
    SLUICE_FLEET_FAIL_CLOSED = 0, /**< drop the call; its retry time is `now + closed_retry_ns` */
    SLUICE_FLEET_FAIL_OPEN = 1,   /**< admit the call */
    SLUICE_FLEET_FAIL_LOCAL = 2   /**< decide with a local limiter (config.fallback_policy) */
} sluice_fleet_failure_t;

/** Who made a decision. */
typedef enum sluice_fleet_source {
    SLUICE_FLEET_SOURCE_REDIS = 1,  /**< the script in Redis (the fleet-wide decision) */
    SLUICE_FLEET_SOURCE_CACHE = 2,  /**< a certain drop, answered locally from the TAT cache */
    SLUICE_FLEET_SOURCE_FAILURE = 3 /**< the failure policy (see `cause`), Redis could not answer */
} sluice_fleet_source_t;

/** The kind of a request. */
typedef enum sluice_fleet_op {
    SLUICE_FLEET_CALL = 1,  /**< sluice_fleet_call() */
    SLUICE_FLEET_QUOTA = 2, /**< sluice_fleet_quota() */
    SLUICE_FLEET_CANCEL = 3 /**< sluice_fleet_cancel() */
} sluice_fleet_op_t;

/** The answer to one request, passed to its callback on the loop thread. */
typedef struct sluice_fleet_result {
    sluice_fleet_op_t op;
    /** 0 when answered; SLUICE_ECLOSED when the limiter was freed first (no
     *  decision). A cancel that Redis could not confirm has the cause here
     *  (its local effects — cache, fallback limiter — still happened). */
    int status;
    sluice_fleet_source_t source;
    /** SLUICE_FLEET_SOURCE_FAILURE: why (see "Errors" above: SLUICE_ETIMEDOUT,
     *  _ENOTCONN, _EPROTO, _EBADVALUE, _EAUTH, _ENOPERM, _EOOM, _EREADONLY,
     *  _EREDIS, or the connection's failure, _ETLS, ..., as
     *  sluice_fleet_last_error() reports it). 0 otherwise. */
    int cause;
    /** The time of the decision in ns: the Redis server's clock (Unix time),
     *  the caller's time in manual-time mode, or the local CLOCK_REALTIME for
     *  a failure-policy answer (an estimate of the server's clock for a cache
     *  answer). Retry-After = decision.at - now. */
    uint64_t now;
    /** SLUICE_FLEET_CALL: as sluice_limiter_submit_cost() fills it (its
     *  `now` is the result's `now`). For a
     *  cache answer (always a drop) `at` and `full` are computed from a lower
     *  bound of the key's TAT, so they may be earlier than Redis would say. */
    sluice_decision_t decision;
    /** SLUICE_FLEET_QUOTA: as sluice_limiter_quota() fills it (`now` as above). */
    sluice_quota_t quota;
    /** A limiter of plans (config.plans), for a call or quota read that
     *  Redis or the cache answered, or the fallback limiter: each quota's
     *  figures and the quotas that refused, as sluice_limiter_submit_plan()
     *  and sluice_limiter_quota_plan() fill them. `nquotas` is 0 otherwise
     *  (one policy, a cancel, or fail open/closed). */
    sluice_plan_detail_t detail;
} sluice_fleet_result_t;

/** A request's callback. `result` is valid only during the call. Runs on the loop thread. */
typedef void (*sluice_fleet_fn)(void *user, const sluice_fleet_result_t *result);

/** Configuration of a fleet limiter. Zero-initialise, then set what you need. */
typedef struct sluice_fleet_config {
    sluice_policy_t policy;               /**< required: a rate policy (sluice_rate()) */
    const char *host;                     /**< Redis address, plain TCP (numeric IP recommended);
                                       NULL = "127.0.0.1"; ignored when `url` is set */
    int port;                             /**< Redis port; 0 = 6379; ignored when `url` is set */
    const void *prefix;                   /**< key prefix (any bytes): Redis keys are `{<N>:prefix:...}`
                                       (docs/fleet.md, "Keys"); must identify the policy */
    size_t prefix_len;                    /**< bytes of prefix (0 with prefix NULL = "sluice") */
    bool manual_time;                     /**< use the `now` passed with each request instead of Redis's TIME */
    bool local_clock;                     /**< stamp each request with this process's CLOCK_REALTIME instead of
                                       Redis's TIME (see "Clock"); not with manual_time */
    uint64_t timeout_ns;                  /**< per-request timeout; 0 = 50 ms */
    sluice_fleet_failure_t on_failure;    /**< the failure policy; default fail closed */
    uint64_t closed_retry_ns;             /**< fail closed: the retry delay reported; 0 = 1 s */
    sluice_policy_t fallback_policy;      /**< fail local: the local policy; kind 0 = `policy` */
    uint64_t backoff_min_ns;              /**< first reconnect delay; 0 = 20 ms */
    uint64_t backoff_max_ns;              /**< longest reconnect delay; 0 = 1 s */
    uint64_t stall_ns;                    /**< reconnect when no reply came for this long while
                                       requests wait; 0 = max(1 s, 10 * timeout) */
    size_t cache_slots;                   /**< TAT cache size (rounded up to a power of two);
                                       0 = 4096; SIZE_MAX = no cache */
    uint64_t cache_ttl_ns;                /**< how long a cache entry is trusted; 0 = 1 s */
    uint64_t manual_ttl_extra_ms;         /**< manual time: added to each key's Redis expiry (trace
                                       time is not Redis time); 0 = 10 minutes */
    size_t max_batch;                     /**< most calls and quota reads decided by one script run
                                       (sent together, decided in order; see "Batches");
                                       0 = 32; 1 = one key per command (a Redis Cluster:
                                       per node) */
    const char *url;                      /**< Redis address as a URL (see docs/fleet.md, "Connections");
                                       replaces host and port when set: redis://[[USER]:PASSWORD@]HOST[:PORT][/DB],
                                       rediss://...?cacert=PATH&cert=PATH&key=PATH&sni=NAME&insecure=1,
                                       unix:///PATH?db=N&user=U&password=P,
                                       redis+sentinel://[[USER]:PASSWORD@]H1:P1[,H2:P2...]/MASTER[/DB] (and
                                       rediss+sentinel://; docs/fleet.md, "Sentinel"),
                                       redis+cluster://[[USER]:PASSWORD@]H1:P1[,H2:P2...] (seeds; and
                                       rediss+cluster://; docs/fleet.md, "Redis Cluster"). Read during
                                       sluice_fleet_new() only */
    const sluice_plans_t *plans;          /**< several quotas per key, in plans (sluice_plans.h), with
                                          `policy` = sluice_rate_plans(); see "Plans" below. Copied during
                                          sluice_fleet_new(); NULL = the one quota of `policy` */
    const sluice_plans_t *fallback_plans; /**< fail local with plans: the local limiter's plans, the same
                                          plan names in the same order (typically each quota divided by
                                          the number of processes); NULL = `plans` */
} sluice_fleet_config_t;

/** An opaque fleet limiter. */
typedef struct sluice_fleet sluice_fleet_t;

/**
 * Creates a fleet limiter on `base` and starts connecting to Redis (without
 * blocking). Requests made before the connection is up wait for it, within
 * their timeout.
 *
 * @param out receives the limiter; untouched on error.
 * @param base the event_base that will run it (run it on one thread).
 * @param config the configuration; read only during the call (the prefix is copied).
 * @return 0, SLUICE_EINVAL (NULL pointer, not a rate policy, bad fallback
 *         policy, prefix too long; with plans: a policy other than
 *         sluice_rate_plans(), a table sluice_plans_check() refuses, a
 *         fallback_policy, or fallback_plans whose names differ; without
 *         plans: fallback_plans),
 *         SLUICE_ERANGE (see sluice_policy_validate()), SLUICE_ESYNTAX (a
 *         malformed `url`), SLUICE_ETLS (a TLS CA, certificate or key file that
 *         cannot be loaded) or SLUICE_ENOMEM. Connection failures (refused,
 *         wrong password, TLS verification; behind Sentinel: an unknown master
 *         name, SLUICE_ENOMASTER, or no sentinel reachable) are not reported
 *         here: the limiter keeps trying, and sluice_fleet_last_error() says
 *         why it is not up.
 */
SLUICE_EXTERN int sluice_fleet_new(sluice_fleet_t **out, struct event_base *base, const sluice_fleet_config_t *config);

/**
 * Creates a fleet limiter on a loop of the loop layer (sluice_loop.h: one of
 * sluice_loop_start(), or sluice_loop_attach() to a caller's event_base),
 * run by that loop's thread beside its loop limiters: no thread of its own.
 * Requests may come from any thread (libevent's thread support is turned
 * on); callbacks run on the loop thread. sluice_fleet_free() may then be
 * called from any thread while the loop runs (see there).
 *
 * @param out receives the limiter; untouched on error.
 * @param loop the loop; it must outlive the limiter.
 * @param config as for sluice_fleet_new().
 * @return as sluice_fleet_new(); SLUICE_EINVAL also for a NULL loop,
 *         SLUICE_ENOMEM when libevent's thread support cannot be turned on.
 */
SLUICE_EXTERN int sluice_fleet_new_on_loop(sluice_fleet_t **out, sluice_loop_t *loop,
                                           const sluice_fleet_config_t *config);

/**
 * Frees the limiter. Never inside one of its own callbacks; every other
 * thread must have stopped calling in. For a limiter of sluice_fleet_new():
 * on the loop thread, or with the loop stopped. For one of
 * sluice_fleet_new_on_loop(): also from any other thread while the loop
 * runs; the limiter is then freed on the loop thread and this call returns
 * once it is. Every request not yet answered is answered now (on the loop
 * thread), with status SLUICE_ECLOSED. Closes the connection.
 *
 * @param fleet the limiter; NULL is ignored.
 */
SLUICE_EXTERN void sluice_fleet_free(sluice_fleet_t *fleet);

/**
 * Asks whether a call of weight `cost` on `key` is admitted. The answer comes
 * by `fn` on the loop thread (SLUICE_FLEET_CALL).
 *
 * @param fleet the limiter.
 * @param key the key (bytes are copied).
 * @param cost the units this call weighs, 1 to SLUICE_RATE_MAX.
 * @param now manual-time mode: the call's time in ns (never smaller than the
 *        previous one on this key for meaningful results); ignored otherwise.
 * @param fn the callback (required). @param user passed to fn.
 * @return 0 (fn will be called exactly once), SLUICE_EINVAL, SLUICE_ERANGE
 *         (cost), SLUICE_EKEYLEN, SLUICE_ENOMEM or SLUICE_ECLOSED (fn will
 *         not be called).
 */
SLUICE_EXTERN int sluice_fleet_call(sluice_fleet_t *fleet, sluice_key_t key, uint64_t cost, uint64_t now,
                                    sluice_fleet_fn fn, void *user);

/**
 * Reads a key's quota without changing it (a peek, always a round trip). The
 * answer comes by `fn` (SLUICE_FLEET_QUOTA, result->quota).
 *
 * @param cost the cost to compute `retry` for, 1 to SLUICE_RATE_MAX.
 * @return as sluice_fleet_call().
 */
SLUICE_EXTERN int sluice_fleet_quota(sluice_fleet_t *fleet, sluice_key_t key, uint64_t cost, uint64_t now,
                                     sluice_fleet_fn fn, void *user);

/**
 * Forgets a key's history fleet-wide (DEL in Redis): the key gets a fresh
 * quota. The local TAT cache entry is invalidated before anything else, and
 * replies to requests sent earlier no longer update it; the fallback limiter
 * forgets the key too. `fn` may be NULL.
 *
 * @return as sluice_fleet_call().
 */
SLUICE_EXTERN int sluice_fleet_cancel(sluice_fleet_t *fleet, sluice_key_t key, uint64_t now, sluice_fleet_fn fn,
                                      void *user);

/* ------------------------------------------------------------------ */
/* Plans: several quotas per key (docs/fleet.md, "Plans")               */
/* ------------------------------------------------------------------ */

/*
 * A fleet limiter made with config.plans decides each call under the plan it
 * names, exactly as a local limiter of plans does (docs/semantics.md,
 * "Several quotas on one key" and "Plans"): admitted only when every quota
 * of the plan admits it, then charged to all of them, in one script run; a
 * refused call writes nothing. A key's value in Redis does not depend on the
 * plans: it holds each quota's name, limit, period and TAT, so a key called
 * under another plan, or after sluice_fleet_set_plans() changed a quota, or
 * by a process whose table differs, keeps its consumed units, converted by
 * quota name (TAT' = t + (TAT - t) * T'/T, rounded up to 1/limit' ns). Every
 * quota of a key lives in one Redis key, so in one hash slot.
 *
 * The TAT cache is kept per key and plan: a call under another plan, or any
 * call after sluice_fleet_set_plans(), is not answered from what an earlier
 * plan taught. (Another process calling the same key under another plan is
 * seen when the cache entry expires, as its cancels are.)
 *
 * sluice_fleet_call() and sluice_fleet_quota() on such a limiter use plan 0.
 */

/**
 * sluice_fleet_call() under plan `plan` (an index of the limiter's current
 * table: sluice_fleet_plan_index()). The result's `detail` gives each quota's
 * figures.
 *
 * @return as sluice_fleet_call(); SLUICE_ENOPLAN when the table has no plan
 *         `plan`; SLUICE_EINVAL for a limiter made without plans.
 */
SLUICE_EXTERN int sluice_fleet_call_plan(sluice_fleet_t *fleet, sluice_key_t key, uint32_t plan, uint64_t cost,
                                         uint64_t now, sluice_fleet_fn fn, void *user);

/**
 * sluice_fleet_quota() under plan `plan`: the overall figures in
 * result->quota, each quota's in result->detail.
 *
 * @return as sluice_fleet_call_plan().
 */
SLUICE_EXTERN int sluice_fleet_quota_plan(sluice_fleet_t *fleet, sluice_key_t key, uint32_t plan, uint64_t cost,
                                          uint64_t now, sluice_fleet_fn fn, void *user);

/**
 * A plan's index in the limiter's current table, by name. Any thread.
 *
 * @param name the name's bytes (`len` of them, no NUL needed).
 * @return 0 (*out set), SLUICE_ENOPLAN (no such plan), SLUICE_EINVAL (NULL
 *         pointer, or a limiter made without plans).
 */
SLUICE_EXTERN int sluice_fleet_plan_index(sluice_fleet_t *fleet, const char *name, size_t len, uint32_t *out);

/**
 * Replaces the limiter's plans while it runs, all or nothing (any thread).
 * Requests made from then on use the new table (indices are the new
 * table's); requests already made keep the plan they named. Keys keep their
 * consumption: each is converted by quota name at its next call, in Redis.
 * The TAT cache forgets what the old table taught. With fail local, the
 * fallback limiter takes `fallback` (NULL: `plans`), keys converted as the
 * core converts them.
 *
 * @param plans the new table (sluice_plans_check() says what is wrong with
 *        one that is refused); copied.
 * @return 0; SLUICE_EINVAL (a table sluice_plans_check() refuses, fallback
 *         plans whose names differ, or a limiter made without plans: nothing
 *         changed); SLUICE_ENOMEM.
 */
SLUICE_EXTERN int sluice_fleet_set_plans(sluice_fleet_t *fleet, const sluice_plans_t *plans,
                                         const sluice_plans_t *fallback);

/** Counters of a fleet limiter (read on any thread; a consistent-enough snapshot). */
typedef struct sluice_fleet_stats {
    uint64_t calls, quotas, cancels;              /**< requests accepted */
    uint64_t redis_admitted, redis_dropped;       /**< call decisions made by Redis */
    uint64_t cache_dropped;                       /**< certain drops answered from the cache */
    uint64_t failure_admitted, failure_dropped;   /**< call decisions made by the failure
                                                     policy (fail open/closed/local) */
    uint64_t fallback_admitted, fallback_dropped; /**< of those, made by the local fallback limiter */
    uint64_t timeouts;                            /**< requests answered because their timeout passed */
    uint64_t unavailable;                         /**< requests answered at once: no connection / stalled */
    uint64_t bad_replies;                         /**< replies that were not valid answers */
    uint64_t noscript;                            /**< NOSCRIPT answers (the script was re-sent with EVAL) */
    uint64_t connects, disconnects;               /**< connections established / lost */
    uint64_t in_flight;                           /**< requests waiting for Redis now */
    uint64_t closed;                              /**< requests answered with SLUICE_ECLOSED */
    uint64_t batches;                             /**< script runs sent (FCALL or EVALSHA, or EVAL after NOSCRIPT),
                                              each deciding up to max_batch calls and quota reads */
    /* Redis's answers that refused something. The error replies are counted
     * by class (one per refused command: a script run, SCRIPT LOAD or DEL);
     * each request of a refused command is answered by the failure policy
     * with the class's cause. See docs/fleet.md, "Error replies". */
    uint64_t bad_values;      /**< requests whose key held a value that is not Sluice state (another
                                 writer, or another type): each answered alone, cause SLUICE_EBADVALUE */
    uint64_t auth_errors;     /**< NOAUTH / WRONGPASS replies (cause SLUICE_EAUTH) */
    uint64_t noperm_errors;   /**< NOPERM replies: an ACL forbids a command (cause SLUICE_ENOPERM) */
    uint64_t oom_errors;      /**< OOM replies: Redis at maxmemory refuses writes (cause SLUICE_EOOM) */
    uint64_t readonly_errors; /**< READONLY / MASTERDOWN replies: the node takes no writes (cause
                                 SLUICE_EREADONLY); the connection is dropped and re-established */
    uint64_t redis_errors;    /**< other error replies (cause SLUICE_EREDIS; a second NOSCRIPT too) */
} sluice_fleet_stats_t;

/**
 * Reads the counters.
 *
 * @param fleet the limiter. @param out receives them.
 * @return 0 or SLUICE_EINVAL.
 */
SLUICE_EXTERN int sluice_fleet_stats(sluice_fleet_t *fleet, sluice_fleet_stats_t *out);

/**
 * Whether the limiter currently has a working connection (connected, and no
 * request timed out since the last reply). For health checks and tests.
 */
SLUICE_EXTERN bool sluice_fleet_connected(sluice_fleet_t *fleet);

/**
 * Why the limiter has no working connection: the last connection failure's
 * code (SLUICE_ENOTCONN refused/unreachable/closed, SLUICE_ETIMEDOUT connect
 * timeout, SLUICE_EAUTH credentials refused, SLUICE_ENOPERM, SLUICE_ETLS TLS
 * handshake or certificate verification, SLUICE_EPROTO not a Redis, ...) or 0
 * when the last (re)connection succeeded. Any thread.
 *
 * @param msg receives a NUL-terminated sentence (empty with 0), e.g.
 *        "cannot connect to 127.0.0.1:6390: Connection refused"; it never
 *        contains the password. May be NULL. @param msg_len its size.
 * @return the code, or SLUICE_EINVAL when `fleet` is NULL.
 */
SLUICE_EXTERN int sluice_fleet_last_error(sluice_fleet_t *fleet, char *msg, size_t msg_len);

/**
 * The Lua script the limiter runs in Redis (for inspection and tools). It
 * has three forms, described in its comments: one decision (KEYS[1],
 * ARGV op, now, limit, cost*per, burst*per, extra ms, end of the clock), a
 * batch (ARGV[1] = "B") that decides several keys in order in one run, and
 * a batch under plans (ARGV[1] = "P": the quota sets, then per key its set
 * and cost; each answer {status, t, the TATs of its quotas in one string}). Each
 * decision is answered {status, t, TAT}: status 1 admitted, 0 dropped (or a
 * quota read), -1 the key holds a value that is not Sluice state (that key
 * alone fails and is left unchanged). The script checks every argument and
 * reads every key before it writes anything, so an error reply means that
 * nothing was written. This is the form EVAL and EVALSHA run; the limiter
 * loads the same definitions as a function library on Redis 7 (FUNCTION
 * LOAD; docs/fleet.md, "Script").
 *
 * @return a static NUL-terminated string.
 */
SLUICE_EXTERN const char *sluice_fleet_script(void);

/* ------------------------------------------------------------------ */
/* Addresses as URLs (forms and parameters: docs/fleet.md, "Addresses") */
/* ------------------------------------------------------------------ */

/**
 * Checks a Redis address URL without connecting: redis://, rediss://,
 * unix://, redis+sentinel://, rediss+sentinel://, redis+cluster://,
 * rediss+cluster:// or a bare HOST:PORT, with their query parameters.
 * password_env=NAME (and sentinel_password_env=NAME) are resolved: an unset
 * variable makes the URL invalid. Nothing else of the process is read.
 *
 * @param url NUL-terminated, at most 4096 bytes.
 * @param why on error, receives "redis URL: " and a sentence naming the
 *        offending part (the scheme, a host, a port, a parameter...), cut
 *        to `why_len` bytes with the NUL; never a password nor the value of
 *        an environment variable. Set to "" on success. May be NULL.
 * @return 0 (valid), SLUICE_ESYNTAX (malformed, or an unset variable) or
 *         SLUICE_ENOMEM. Thread-safe (as far as getenv() is).
 */
SLUICE_EXTERN int sluice_fleet_check_url(const char *url, char *why, size_t why_len);

/**
 * Writes a URL in a form fit for logs and descriptions: every password (in
 * the credentials, or password= and sentinel_password= in the query) is
 * replaced by `***`; password_env=NAME is kept (it names a variable, it holds
 * no secret). The form is canonical: lower-case scheme, every port written,
 * parameters in a fixed order, percent-escapes where a byte needs one; a bare
 * HOST:PORT is written redis://HOST:PORT. Passing it to sluice_fleet_check_url()
 * gives the same address with the password "***".
 *
 * Like snprintf: at most `out_len` bytes are written, the NUL included, so
 * the output is always terminated when `out_len` > 0; a cut output ends
 * anywhere (a cut never reveals a password: the whole holds none).
 *
 * @param url the URL (as for sluice_fleet_check_url()).
 * @param out receives the text; may be NULL when `out_len` is 0 (to learn
 *        the length). On error it receives "" (when `out_len` > 0): a
 *        malformed URL is never echoed, since it may hold a password in an
 *        unexpected place; sluice_fleet_check_url() tells what is wrong.
 * @return the length of the whole redacted form without the NUL (>= 0; the
 *         output was cut when it is >= `out_len`), or a negative code:
 *         SLUICE_ESYNTAX (malformed URL), SLUICE_ENOMEM, SLUICE_EINVAL (`out`
 *         NULL with `out_len` > 0).
 */
SLUICE_EXTERN int sluice_fleet_redact_url(const char *url, char *out, size_t out_len);

#ifdef __cplusplus
}
#endif

#endif
