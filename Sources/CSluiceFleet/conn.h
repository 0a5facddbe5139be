/*
 * conn.h — the fleet's one connection to Redis (internal): the only fleet
 * code that touches sockets.
 *
 * A connection lives on its owner's event_base and is used from the loop
 * thread only. It carries RESP over plain TCP, a Unix socket or TLS (libevent's
 * bufferevent_openssl), as the address (sluice__redis_url_t) says, and keeps
 * itself connected: after a failure or a drop it reconnects on its own, after
 * a capped exponential backoff with jitter (sluice__conn_backoff()).
 *
 * Each (re)connection goes through these steps before it is ready:
 *   1. TCP or Unix connect (non-blocking; a host name is resolved with
 *      getaddrinfo(), which blocks: give a numeric address in a hot path);
 *   2. TLS handshake and certificate verification (rediss);
 *   3. AUTH [user] password, when a password is set;
 *   4. SELECT db, when db > 0;
 *   5. ROLE, when the owner asked for a primary (check_primary);
 *   6. PING, when none of 3-5 ran (so "ready" always means that a Redis
 *      answered in RESP).
 * With a resolver (opts.resolve), each attempt first asks it where to go
 * (step 0: Sentinel discovery), so a reconnect after a drop or a failure
 * rediscovers the server instead of returning to the old address.
 * The whole sequence is bounded by the connect timeout. Then the owner is told
 * SLUICE__CONN_UP; commands it sends from inside that event go out before the
 * commands it sent while the connection was being set up (room for the
 * owner's own setup, such as SCRIPT LOAD).
 *
 * Commands are pipelined and answered in order, each exactly once: by its
 * reply, or with a NULL reply and an error code when the connection drops or
 * is freed. Callbacks never run inside sluice__conn_send().
 */
#ifndef SLUICE_CONN_H
#define SLUICE_CONN_H

#include <stddef.h>
#include <stdint.h>

#include <hiredis/hiredis.h>

#include "redis-url.h"

struct event_base;

typedef struct sluice__conn sluice__conn_t;

/** What the owner is told about the connection's state. */
typedef enum sluice__conn_event {
    SLUICE__CONN_UP = 1,    /**< ready: setup done (the last error is cleared) */
    SLUICE__CONN_DOWN = 2,  /**< a ready connection was lost (err: why) */
    SLUICE__CONN_FAILED = 3 /**< a connection attempt failed before ready (err: why) */
} sluice__conn_event_t;

/**
 * A command's answer. `reply` is the reply (owned by the connection: valid
 * during the call only), or NULL when the connection dropped or was freed
 * first; then `err` says why (see sluice__conn_error()), else `err` is 0.
 * May send new commands and call sluice__conn_drop(), not sluice__conn_free().
 */
typedef void (*sluice__conn_reply_fn)(void *arg, redisReply *reply, int err);

/** A state change (UP, DOWN, FAILED), after the pending commands were answered.
 *  Same rules as sluice__conn_reply_fn. */
typedef void (*sluice__conn_event_fn)(void *owner, sluice__conn_event_t ev, int err);

/**
 * Asks where to connect (discovery: Redis Sentinel, sentinel.h), at the start
 * of every attempt, the first one included. Called from the event loop, never
 * inside a conn function. The resolver answers later (or inside this call)
 * with sluice__conn_target() or sluice__conn_target_failed() and `ticket`; an
 * answer whose attempt has ended (connect timeout, drop, free) is ignored.
 */
typedef void (*sluice__conn_resolve_fn)(void *resolver, sluice__conn_t *c, uint64_t ticket);

/** A reply that answers no command: a pub/sub message after SUBSCRIBE.
 *  `reply` is valid during the call only. Same rules as sluice__conn_reply_fn. */
typedef void (*sluice__conn_push_fn)(void *owner, redisReply *reply);

/** Options of a connection. Zero means the default. */
typedef struct sluice__conn_opts {
    uint64_t connect_timeout_ns; /**< discovery + connect + TLS + AUTH/SELECT; 0 = 1 s */
    uint64_t backoff_min_ns;     /**< first reconnect delay; 0 = 20 ms */
    uint64_t backoff_max_ns;     /**< longest reconnect delay; 0 = 1 s */
    sluice__conn_event_fn on_event;
    void *owner;
    /** NULL: connect to the address's host. Else every attempt asks it first
     *  (the address may then be SENTINEL: its TLS settings, user, password
     *  and db apply to the server the resolver names). */
    sluice__conn_resolve_fn resolve;
    void *resolver;
    /** Setup also sends ROLE, and the attempt fails (SLUICE_EREADONLY) unless
     *  the server says it is a primary ("master"). */
    bool check_primary;
    /** NULL: a reply to no command is a protocol error (SLUICE_EPROTO). */
    sluice__conn_push_fn on_push;
} sluice__conn_opts_t;

/**
 * Creates a connection to `url` (SINGLE or UNIX topology, or SENTINEL with a
 * resolver in `opts`; copied) and starts connecting at once.
 *
 * @param why on error, a sentence naming the problem (never the password).
 * @return 0; SLUICE_EINVAL (unsupported topology, TLS over a Unix socket);
 *         SLUICE_ETLS (a CA, certificate or key file that cannot be loaded);
 *         SLUICE_ENOMEM.
 */
SLUICE_FLEET_HIDDEN int sluice__conn_new(sluice__conn_t **out, struct event_base *base, const sluice__redis_url_t *url,
                                         const sluice__conn_opts_t *opts, char *why, size_t why_len);

/**
 * Queues one command (argv[0..argc), binary-safe). Accepted while the
 * connection is ready or being set up (then it is sent once setup is done).
 *
 * @return 0 (fn will be called exactly once, never inside this call), or
 *         SLUICE_ENOTCONN (between attempts: fn will not be called), or
 *         SLUICE_ENOMEM.
 */
SLUICE_FLEET_HIDDEN int sluice__conn_send(sluice__conn_t *c, int argc, const char *const *argv, const size_t *lens,
                                          sluice__conn_reply_fn fn, void *arg);

/** Drops the connection now (a stalled or misbehaving server): every pending
 *  command is answered with `err`, the owner gets DOWN (or FAILED), and a
 *  reconnect is scheduled. Safe inside a callback. Nothing when down already. */
SLUICE_FLEET_HIDDEN void sluice__conn_drop(sluice__conn_t *c, int err);

/** The resolver's answer for attempt `ticket`: connect to host:port (copied).
 *  Ignored when that attempt has ended. */
SLUICE_FLEET_HIDDEN void sluice__conn_target(sluice__conn_t *c, uint64_t ticket, const char *host, int port);

/** The resolver's failure for attempt `ticket`: the attempt fails with `err`
 *  and `msg` (no password in it). Ignored when that attempt has ended. */
SLUICE_FLEET_HIDDEN void sluice__conn_target_failed(sluice__conn_t *c, uint64_t ticket, int err, const char *msg);

/** Whether the connection is at host:port: connected, or connecting there
 *  (not while its resolver is asked where to go). */
SLUICE_FLEET_HIDDEN bool sluice__conn_is_at(const sluice__conn_t *c, const char *host, int port);

/** Between attempts (a reconnect is scheduled after a backoff): starts the
 *  next attempt now, with the backoff reset (the owner learnt that the server
 *  is back or has moved). Nothing otherwise. Safe inside a callback. */
SLUICE_FLEET_HIDDEN void sluice__conn_retry_now(sluice__conn_t *c);

/** Frees the connection: every pending command is answered (NULL reply,
 *  SLUICE_ECLOSED) first; no event is sent. Not inside one of its callbacks. */
SLUICE_FLEET_HIDDEN void sluice__conn_free(sluice__conn_t *c);

/** Whether sluice__conn_send() accepts commands now (ready or being set up). */
SLUICE_FLEET_HIDDEN bool sluice__conn_sendable(const sluice__conn_t *c);

/** The owner's mark: what it learnt about the server of the current
 *  connection (the fleet: whether its function library is loaded there).
 *  0 at the start of every connection attempt; loop thread only. */
SLUICE_FLEET_HIDDEN uint32_t sluice__conn_mark(const sluice__conn_t *c);
SLUICE_FLEET_HIDDEN void sluice__conn_set_mark(sluice__conn_t *c, uint32_t mark);

/** Whether the connection is ready (setup done). */
SLUICE_FLEET_HIDDEN bool sluice__conn_ready(const sluice__conn_t *c);

/** The last failure's code (0 after a successful setup) and, when `msg` is
 *  not NULL, its message, e.g. "connection refused by 127.0.0.1:6390" or
 *  "TLS certificate verification failed: unable to get local issuer
 *  certificate". Never contains the password. */
SLUICE_FLEET_HIDDEN int sluice__conn_error(const sluice__conn_t *c, const char **msg);

/** The delay before reconnect attempt `attempt` (0 = the first): d =
 *  min(max, min * 2^attempt), drawn uniformly in [d/2, d] from `rnd` (equal
 *  jitter: processes that lost Redis together do not come back together). */
SLUICE_FLEET_HIDDEN uint64_t sluice__conn_backoff(uint64_t min_ns, uint64_t max_ns, unsigned attempt, uint64_t rnd);

#endif
