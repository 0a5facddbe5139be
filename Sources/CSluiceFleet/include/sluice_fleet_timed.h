/*
 * sluice_fleet_timed.h — throttle, audit and debounce shared by a fleet of
 * processes through Redis.
 *
 * A fleet timed limiter applies one throttle, audit or debounce policy
 * (sluice_throttle(), sluice_audit(), sluice_debounce()) to keys whose state
 * lives in Redis, with the semantics of docs/semantics.md: a burst that
 * starts on one process and goes on on another is one burst. Values are
 * bytes, stored in Redis while they wait (at most config.max_value bytes).
 * Every operation is one run of a Lua script that changes the key's state
 * atomically, so any process may call, flush, cancel or ask about any key.
 *
 * Emissions. What a call emits at once (a leading edge) is answered to that
 * call (SLUICE_EMITTED, with a generation): the caller does the work, as with
 * the local limiter. What becomes due later (a trailing edge, a flush, a
 * draining close) becomes a delivery in Redis, which a worker claims
 * (sluice_fleet_timed_claim()): the claim fires the due timers at their exact
 * deadlines, in time order, and leases each emission to the claiming process
 * until now + config.lease_ns. The worker does the work, then acknowledges
 * (sluice_fleet_timed_ack()). A lease that ends without an acknowledgement
 * (the worker died, hung or lost Redis) makes the same delivery, with the
 * same generation, claimable again, with the next attempt number; a worker
 * that stops on purpose hands its leases back at once
 * (sluice_fleet_timed_release()). An acknowledgement or release from an
 * attempt that no longer holds the delivery is refused (SLUICE_ELEASE):
 * its lease ended and another attempt holds the delivery or acknowledged
 * it, or the delivery expired. So every emission is delivered at least
 * once; a handler that records the generation it applied per key makes its
 * effect exactly once.
 *
 * Generations. Every emission gets a generation from its partition's counter
 * (a script run takes a block and gives back what it did not use): strictly
 * increasing for each key, across bursts, processes and
 * idle periods, as long as Redis keeps its data (docs/fleet.md says what a
 * failover can lose).
 *
 * Batches. A partition's key operations are sent in order, one script run
 * at a time; calls that wait behind it go to Redis as one run of up to 64
 * calls, decided in order (in manual time, calls of one instant). Its
 * acknowledgements wait the same way in a queue of their own. At light load
 * an operation goes out at once.
 *
 * Partitions. Keys are spread over config.partitions partitions by a fixed
 * hash of the key (the same in every process). All of a partition's Redis
 * keys share one hash tag, so under Redis Cluster a key's state, its place in
 * the due index and its deliveries are in one slot, and one script run can
 * change them together. A claim works on one partition; give every process
 * the same partition count.
 *
 * Clock. By default a decision's time is the Redis server's clock (TIME in
 * the script, Unix time), so deadlines are never early by that clock. With
 * config.manual_time every operation gives its own time, for traces and
 * tests. Times and durations: up to SLUICE_FLEET_TIMED_TIME_MAX ns.
 *
 * Threads. A timed limiter lives on one libevent event_base, run by one
 * thread (the loop thread): a caller's (sluice_fleet_timed_new(): used from
 * that thread only) or a loop of the loop layer's
 * (sluice_fleet_timed_new_on_loop(): every function may be called from any
 * thread; an operation made on another thread is queued to the loop thread,
 * in order). Every answer comes by the operation's callback on the loop
 * thread, never inside the submitting call, exactly once, within
 * config.timeout_ns (or SLUICE_ECLOSED when the limiter is freed first).
 */
#ifndef SLUICE_FLEET_TIMED_H
#define SLUICE_FLEET_TIMED_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "sluice.h"
#include "sluice_loop.h"

#ifdef __cplusplus
extern "C" {
#endif

struct event_base;

/** The latest time (ns) an operation may give, and the longest interval,
 *  maxWait or lease: their sums stay below 2^64. */
#define SLUICE_FLEET_TIMED_TIME_MAX UINT64_C(17000000000000000000)

/** The largest config.max_value (Redis's own limit on a string is 512 MiB). */
#define SLUICE_FLEET_TIMED_VALUE_MAX ((size_t)64 << 20)

/** Configuration of a fleet timed limiter. Zero-initialise, then set what you need. */
typedef struct sluice_fleet_timed_config {
    sluice_policy_t policy; /**< required: sluice_throttle(), sluice_audit() or sluice_debounce() */
    const char *url;        /**< Redis address, as sluice_fleet_config_t.url (redis://, rediss://,
                                 unix://, redis+sentinel://, redis+cluster://); required */
    const void *prefix;     /**< key prefix (any bytes) naming the limiter's namespace; every
                                 process of the limiter uses the same one and the same policy */
    size_t prefix_len;      /**< bytes of prefix (0 with prefix NULL = "sluice") */
    uint32_t partitions;    /**< 0 = 1, or 16 with a Redis Cluster address; at most 4096 */
    uint64_t lease_ns;      /**< how long a claimed delivery is held before it may be claimed
                                 again; 0 = 30 s */
    uint64_t retain_ms;     /**< expiry of a partition's key states beyond their latest deadline,
                                 and of an unacknowledged delivery: nothing stays in Redis
                                 forever after a crash; 0 = 24 h */
    size_t max_value;       /**< largest value accepted (bytes); 0 = 64 KiB */
    bool manual_time;       /**< use the `now` of each operation instead of Redis's TIME */
    uint64_t timeout_ns;    /**< per-operation timeout; 0 = 1 s */
} sluice_fleet_timed_config_t;

/** An opaque fleet timed limiter. */
typedef struct sluice_fleet_timed sluice_fleet_timed_t;

/** One emission handed to a worker by a claim. Pointers are valid during the
 *  callback only: copy what you keep. */
typedef struct sluice_fleet_delivery {
    sluice_key_t key;  /**< the key (bytes or integer, as it was called) */
    const void *value; /**< the emitted value */
    size_t value_len;
    uint64_t at;         /**< when it was emitted by the rules (ns): the deadline, or the flush or close time */
    uint64_t generation; /**< strictly increasing per key */
    uint32_t attempt;    /**< 1 at the first lease; one more at each later claim of it */
    uint32_t partition;  /**< its partition (ack and release need it) */
} sluice_fleet_delivery_t;

/** The kind of an operation. */
typedef enum sluice_fleet_timed_op {
    SLUICE_FLEET_TIMED_CALL = 1,
    SLUICE_FLEET_TIMED_FLUSH = 2,
    SLUICE_FLEET_TIMED_CANCEL = 3,
    SLUICE_FLEET_TIMED_PENDING = 4,
    SLUICE_FLEET_TIMED_CLAIM = 5,
    SLUICE_FLEET_TIMED_ACK = 6,
    SLUICE_FLEET_TIMED_RELEASE = 7,
    SLUICE_FLEET_TIMED_CLOSE = 8
} sluice_fleet_timed_op_t;

/** The answer to one operation, passed to its callback on the loop thread.
 *  Pointers are valid during the callback only. */
typedef struct sluice_fleet_timed_result {
    sluice_fleet_timed_op_t op;
    /** 0, or why the operation was not done: SLUICE_ECLOSED (the namespace was
     *  closed, or the limiter freed first), SLUICE_ELEASE (ack, release: a later
     *  attempt holds the delivery), SLUICE_ETIMEDOUT, SLUICE_ENOTCONN, the
     *  class of a Redis error reply (SLUICE_EAUTH, _ENOPERM, _EOOM,
     *  _EREADONLY, _ECLUSTERDOWN, _EREDIS) or SLUICE_EPROTO (not a valid
     *  answer). When it is not 0 nothing below is set, and a call's value was
     *  not taken. */
    int status;
    /** call: as sluice_limiter_submit() fills it (EMITTED: do the work now;
     *  DROPPED: the call's own value will never be emitted; SCHEDULED: it
     *  waits until decision.at unless replaced). */
    sluice_decision_t decision;
    /** call, EMITTED: the emission's generation. */
    uint64_t generation;
    /** call: the waiting value this call replaced, now dropped; cancel: the
     *  waiting value, dropped. NULL when there was none. */
    const void *dropped;
    size_t dropped_len;
    /** pending: whether a value waits; flush and cancel: whether one waited
     *  (flush: it is now a delivery, ready to claim). ack and release: true
     *  when done, false when this attempt had acknowledged it already. */
    bool had;
    /** claim: the deliveries leased to this process, in the order they were
     *  made (due timers in deadline order). */
    const sluice_fleet_delivery_t *deliveries;
    size_t n_deliveries;
    /** claim: the earliest deadline left in the partition's due index and the
     *  earliest end of a lease (whole microseconds, rounded up, Redis clock;
     *  0 for none): when the next claim has work. */
    uint64_t next_due_us, next_lease_us;
    /** close with discard: values handed back, with their keys. */
    const sluice_fleet_delivery_t *discarded;
    size_t n_discarded;
} sluice_fleet_timed_result_t;

/** An operation's callback. Runs on the loop thread. */
typedef void (*sluice_fleet_timed_fn)(void *user, const sluice_fleet_timed_result_t *result);

/**
 * Creates a fleet timed limiter on `base` and starts connecting.
 *
 * @return 0; SLUICE_EINVAL (no url, a policy that is not throttle, audit or
 *         debounce or that sluice_policy_validate() refuses, partitions above
 *         4096, max_value above SLUICE_FLEET_TIMED_VALUE_MAX, a lease or
 *         timeout above SLUICE_FLEET_TIMED_TIME_MAX); SLUICE_ESYNTAX (a
 *         malformed url); SLUICE_ETLS (a CA, certificate or key that cannot be
 *         loaded); SLUICE_ENOMEM. Connection failures are not reported here:
 *         operations fail with SLUICE_ENOTCONN until Redis answers.
 */
SLUICE_EXTERN int sluice_fleet_timed_new(sluice_fleet_timed_t **out, struct event_base *base,
                                         const sluice_fleet_timed_config_t *config);

/**
 * sluice_fleet_timed_new() on a loop of the loop layer (sluice_loop.h),
 * beside local limiters: every function of the limiter may then be called
 * from any thread. The loop must outlive the limiter.
 * @return as sluice_fleet_timed_new(); SLUICE_EINVAL without a loop.
 */
SLUICE_EXTERN int sluice_fleet_timed_new_on_loop(sluice_fleet_timed_t **out, sluice_loop_t *loop,
                                                 const sluice_fleet_timed_config_t *config);

/** Frees the limiter: every operation waiting for Redis is answered first
 *  with SLUICE_ECLOSED. Not inside one of its callbacks. From another thread
 *  than a loop's (sluice_fleet_timed_new_on_loop()), it waits until the loop
 *  thread has freed it. Leases held stay in Redis until they end (stop the
 *  worker first for a prompt hand-over). */
SLUICE_EXTERN void sluice_fleet_timed_free(sluice_fleet_timed_t *t);

/**
 * A call with `value` (copied) on `key` at `now` (manual time; ignored
 * otherwise), decided in Redis by the policy's rules (timers first: the
 * key's due timer fires before the call, its emission becoming a delivery).
 *
 * @return 0 (fn will be called once); SLUICE_EINVAL (NULL limiter or fn, bad
 *         key, value NULL with a length); SLUICE_EKEYLEN; SLUICE_ERANGE
 *         (value longer than config.max_value, or now above
 *         SLUICE_FLEET_TIMED_TIME_MAX); SLUICE_ENOMEM. On error fn is not called.
 */
SLUICE_EXTERN int sluice_fleet_timed_call(sluice_fleet_timed_t *t, sluice_key_t key, const void *value,
                                          size_t value_len, uint64_t now, sluice_fleet_timed_fn fn, void *user);

/** flush(key) of docs/semantics.md: a waiting value becomes a delivery ready
 *  to claim (at = now), and the key goes idle. Returns as sluice_fleet_timed_call(). */
SLUICE_EXTERN int sluice_fleet_timed_flush(sluice_fleet_timed_t *t, sluice_key_t key, uint64_t now,
                                           sluice_fleet_timed_fn fn, void *user);

/** cancel(key): a waiting value is dropped (result.dropped) and the key goes idle. */
SLUICE_EXTERN int sluice_fleet_timed_cancel(sluice_fleet_timed_t *t, sluice_key_t key, uint64_t now,
                                            sluice_fleet_timed_fn fn, void *user);

/** pending(key): whether a value waits (result.had). */
SLUICE_EXTERN int sluice_fleet_timed_pending(sluice_fleet_timed_t *t, sluice_key_t key, uint64_t now,
                                             sluice_fleet_timed_fn fn, void *user);

/**
 * Claims up to `max` (1..1024) deliveries of `partition` at `now`: first the
 * deliveries that are ready or whose lease ended, then the due timers, fired
 * at their deadlines in time order. Each is leased to this process until
 * now + lease_ns.
 *
 * @return 0, SLUICE_EINVAL (partition out of range, max 0 or above 1024),
 *         SLUICE_ERANGE (now), SLUICE_ENOMEM.
 */
SLUICE_EXTERN int sluice_fleet_timed_claim(sluice_fleet_timed_t *t, uint32_t partition, uint64_t now, size_t max,
                                           sluice_fleet_timed_fn fn, void *user);

/** Acknowledges a delivery (its generation, attempt and partition): it is
 *  done and forgotten. result.status SLUICE_ELEASE when it is not leased to
 *  this attempt (another attempt holds it or acknowledged it, or it
 *  expired); result.had false when this attempt acknowledged it already
 *  (remembered for at least a lease period, at most two). `fn` may be NULL.
 *  A worker's handler
 *  acknowledges this way too. */
SLUICE_EXTERN int sluice_fleet_timed_ack(sluice_fleet_timed_t *t, const sluice_fleet_delivery_t *d,
                                         sluice_fleet_timed_fn fn, void *user);

/** Hands a leased delivery back: claimable again at once (same generation,
 *  the next attempt). Refused as sluice_fleet_timed_ack() is. `fn` may be NULL. */
SLUICE_EXTERN int sluice_fleet_timed_release(sluice_fleet_timed_t *t, const sluice_fleet_delivery_t *d,
                                             sluice_fleet_timed_fn fn, void *user);

/**
 * close(drain or discard) of docs/semantics.md over the whole namespace, at
 * `now`: each partition is marked closed (every later call, flush, cancel and
 * pending answers SLUICE_ECLOSED, in every process), its due timers fire, and
 * every waiting value becomes a delivery ready to claim (drain) or is handed
 * back (discard: result.discarded, possibly over several callbacks). Claims
 * and acknowledgements go on working, so workers deliver what was drained.
 * `fn` is called once per batch; the last call has result.had false.
 */
SLUICE_EXTERN int sluice_fleet_timed_close(sluice_fleet_timed_t *t, sluice_close_mode_t mode, uint64_t now,
                                           sluice_fleet_timed_fn fn, void *user);

/* ------------------------------------------------------------------ */
/* Workers: claiming and delivering by themselves                       */
/* ------------------------------------------------------------------ */

/**
 * A worker's handler: do the delivery's work, then acknowledge it with
 * sluice_fleet_timed_ack() (now, or later from the loop thread; the
 * delivery's pointers die with this call: keep a copy of its fields). Runs
 * on the loop thread.
 */
typedef void (*sluice_fleet_timed_handler_fn)(void *user, const sluice_fleet_delivery_t *delivery);

/** How a worker claims. Zero-initialise, then set what you need. */
typedef struct sluice_fleet_timed_worker {
    sluice_fleet_timed_handler_fn handler; /**< required */
    void *user;                            /**< passed to handler */
    uint64_t poll_ns;   /**< the longest a partition goes unclaimed: a deadline set by another process is
                              claimed within this (plus a round trip); 0 = 100 ms */
    size_t batch;       /**< deliveries per claim, 1..1024; 0 = 64 */
    size_t max_in_hand; /**< most deliveries handed to the handler and not yet acknowledged; no claim is
                              sent while that many are; 0 = 1024 */
} sluice_fleet_timed_worker_t;

/**
 * Makes this limiter a worker: every partition is claimed as soon as its
 * earliest deadline or lease end is due (as the last claim reported, or as a
 * call of this process scheduled), and at least every poll_ns, and each
 * delivery goes to the handler. Several processes may work on the same
 * namespace: a claim is atomic, so each delivery goes to one of them at a
 * time. Not with manual_time (claims need Redis's clock).
 *
 * A limiter is a worker once: after sluice_fleet_timed_stop() it is not
 * started again (make a new limiter).
 *
 * @return 0; SLUICE_EINVAL (no handler, manual_time, batch above 1024, a
 *         worker started before); SLUICE_ENOMEM.
 */
SLUICE_EXTERN int sluice_fleet_timed_start(sluice_fleet_timed_t *t, const sluice_fleet_timed_worker_t *worker);

/**
 * Stops claiming, and hands back every delivery the handler holds and has
 * not acknowledged (sluice_fleet_timed_release()), so that other workers
 * take them over at once instead of after their lease. An acknowledgement
 * that comes later is refused (SLUICE_ELEASE) only if another worker claimed
 * the delivery meanwhile. `fn` (may be NULL) is called once every release
 * was answered, with result.status the first failure (0 if none).
 *
 * @return 0, SLUICE_EINVAL (not a worker, or stopped already), SLUICE_ENOMEM.
 */
SLUICE_EXTERN int sluice_fleet_timed_stop(sluice_fleet_timed_t *t, sluice_fleet_timed_fn fn, void *user);

/** Counters of a limiter (loop thread). */
typedef struct sluice_fleet_timed_stats {
    uint64_t claims;      /**< claims sent */
    uint64_t delivered;   /**< deliveries handed to the handler (redeliveries included) */
    uint64_t redelivered; /**< of those, a later attempt: a lease had ended or was released */
    uint64_t acked;       /**< acknowledgements Redis accepted */
    uint64_t ack_refused; /**< acknowledgements refused: a later attempt held the delivery */
    uint64_t in_hand;     /**< deliveries with the handler, not acknowledged yet */
    uint64_t failures;    /**< operations answered with an error (timeouts, connection, Redis errors) */
    uint64_t runs;        /**< script runs sent: calls and acknowledgements go several to a run */
} sluice_fleet_timed_stats_t;

/** Fills `out` with the limiter's counters. @return 0 or SLUICE_EINVAL. */
SLUICE_EXTERN int sluice_fleet_timed_stats(const sluice_fleet_timed_t *t, sluice_fleet_timed_stats_t *out);

/** The partition count (config.partitions as resolved). */
SLUICE_EXTERN uint32_t sluice_fleet_timed_partitions(const sluice_fleet_timed_t *t);

/** The partition of `key` (0..partitions-1): the same in every process. */
SLUICE_EXTERN uint32_t sluice_fleet_timed_partition_of(const sluice_fleet_timed_t *t, sluice_key_t key);

/** The Lua script every operation runs (for audits and for pre-loading). */
SLUICE_EXTERN const char *sluice_fleet_timed_script(void);

#ifdef __cplusplus
}
#endif

#endif /* SLUICE_FLEET_TIMED_H */
