/*
 * timed-internal.h — internals of the fleet's throttle, audit and debounce
 * (timed.c, timed_script.c) shared with their tests.
 */
#ifndef SLUICE_TIMED_INTERNAL_H
#define SLUICE_TIMED_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "redis-script.h"
#include "cluster.h"
#include "conn.h"
#include "fleet-internal.h"
#include "sentinel.h"
#include "sluice_fleet_timed.h"

#include <pthread.h>

#include "sluice_loop.h"

struct event;
struct op;
struct sluice__timed_worker;
struct sluice__loop_wait;
struct sluice__timed_queue;

/* A counter of sluice_fleet_timed_stats_t: written on the loop thread, read
 * from any (relaxed atomics). */
#define SLUICE__TIMED_STAT_ADD(t, field, n) __atomic_fetch_add(&(t)->st.field, (uint64_t)(n), __ATOMIC_RELAXED)
#define SLUICE__TIMED_STAT_SET(t, field, v) __atomic_store_n(&(t)->st.field, (uint64_t)(v), __ATOMIC_RELAXED)

/* A timed limiter (timed.c); its worker, when started, is timed-worker.c's. */
struct sluice_fleet_timed {
    struct event_base *base;
    sluice__conn_t *conn; /* single node, Unix socket or Sentinel (else NULL) */
    sluice__sentinel_t *sentinel;
    sluice__cluster_t *cluster; /* Redis Cluster (else NULL) */
    struct event *tick;
    sluice__script_t script; /* the script, as a library and for EVALSHA (redis-script.h) */
    char policy[96];         /* ARGV[3] */
    char lease[24];          /* ARGV[4] */
    char keep[24];           /* ARGV[5] */
    uint32_t partitions;
    char **pname; /* each partition's name "{...}" */
    size_t *pname_len;
    unsigned *pslot;
    size_t max_value;
    bool manual;
    uint64_t timeout_ns;
    struct op *ops; /* every operation not answered yet, or still awaited from Redis (loop thread) */
    bool freeing;
    struct sluice__timed_worker *worker; /* NULL unless started (loop thread) */
    bool worker_started, worker_stopped; /* start and stop taken (atomics: any thread) */
    sluice_fleet_timed_stats_t st;
    /* Other threads (sluice_fleet_timed_new_on_loop()): their operations wait
     * in the inbox, under `mu`, until the wake event sends them. */
    sluice_loop_t *loop;
    pthread_mutex_t mu;
    struct op *inbox, *inbox_tail;
    struct event *wake;
    bool closed;                         /* freeing: the inbox takes nothing more (under mu) */
    struct sluice__loop_wait *free_wait; /* a free from another thread waits on it (under mu) */
    struct sluice__timed_queue *queues;  /* per partition: key operations waiting to be sent (loop thread) */
};

/* The worker's hooks (timed-worker.c), called by timed.c on the loop thread. */

/** A call of this process scheduled an emission in `partition` at `at`
 *  (Redis time ns; `now` the script's time): claim it when it is due. */
SLUICE_FLEET_HIDDEN void sluice__timed_worker_hint(struct sluice_fleet_timed *t, uint32_t partition, uint64_t at,
                                                   uint64_t now);

/** An acknowledgement of `d` is being sent: the handler no longer holds it. */
SLUICE_FLEET_HIDDEN void sluice__timed_worker_acked(struct sluice_fleet_timed *t, const sluice_fleet_delivery_t *d);

/** Frees the worker (no release: sluice_fleet_timed_stop() does that). */
SLUICE_FLEET_HIDDEN void sluice__timed_worker_free(struct sluice_fleet_timed *t);

/** Runs `fn(t, arg)` on the loop thread: now when called there (or when the
 *  limiter has no loop), else soon, from the wake event (timed.c).
 *  @return 0, SLUICE_ECLOSED (being freed) or SLUICE_ENOMEM. */
SLUICE_FLEET_HIDDEN int sluice__timed_on_loop(struct sluice_fleet_timed *t,
                                              void (*fn)(struct sluice_fleet_timed *t, void *arg), void *arg);

/** Bytes of the script (without the NUL). */
SLUICE_FLEET_HIDDEN size_t sluice__timed_script_len(void);

struct redisReply;

/** Reads one acknowledgement's or release's value `e`: *res->had true when
 *  it was done now, false when this attempt had done it already.
 *  @return 0, SLUICE_ELEASE (not leased to this attempt), or -1 when it
 *  breaks the protocol. */
SLUICE_FLEET_HIDDEN int sluice__timed_parse_lease(const struct redisReply *e, sluice_fleet_timed_result_t *res);

/** Reads one call's two values at `e` (each non-NULL) of a batch's reply,
 *  whose time is `now_r`, into *res. @return 0, or -1 when they break the
 *  protocol. */
SLUICE_FLEET_HIDDEN int sluice__timed_parse_call(const struct redisReply *now_r, struct redisReply *const *e,
                                                 sluice_fleet_timed_result_t *res);

/**
 * Reads the script's reply to an operation of `kind` on `partition` into
 * *res (its pointers into `rep`, and into *list, an array the caller frees:
 * a claim's deliveries or a close batch's discards). For a close, *more is
 * whether keys remain in the partition. For calls (a batch: the time, then
 * two values each), *res is the first call's answer and *more whether others
 * follow (sluice__timed_parse_call() reads them).
 * @return 0; SLUICE_ECLOSED or SLUICE_ELEASE (the script's refusal: the
 *         operation's status); SLUICE_ENOMEM; -1 when the reply breaks the
 *         protocol (shape, numbers, a key member, a delivery later than the
 *         claim's time, an emitted call without a generation).
 */
SLUICE_FLEET_HIDDEN int sluice__timed_parse(sluice_fleet_timed_op_t kind, uint32_t partition,
                                            const struct redisReply *rep, sluice_fleet_timed_result_t *res,
                                            sluice_fleet_delivery_t **list, bool *more);

/** The member that names a key in Redis: 'b' and the key's bytes, or 'u' and
 *  an integer key in decimal. Writes it into `out` (room for
 *  SLUICE_KEY_MAX + 1 bytes). @return its length. */
SLUICE_FLEET_HIDDEN size_t sluice__timed_member(sluice_key_t key, char *out);

/** The key a member names (bytes point into `m`). @return 0, or -1 when `m`
 *  is no member sluice__timed_member() writes. */
SLUICE_FLEET_HIDDEN int sluice__timed_member_key(const char *m, size_t len, sluice_key_t *out);

#endif
