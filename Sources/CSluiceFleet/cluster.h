/*
 * cluster.h — routing to the primaries of a Redis Cluster (internal).
 *
 * The router keeps one connection (conn.h) per primary it has heard of: the
 * seeds of the URL at first, then every primary of the slot map and every
 * node a MOVED or ASK named. Nodes are never forgotten: a node that left the
 * cluster keeps reconnecting with backoff and serves no slot.
 *
 * The slot map (cluster-map.h) is read with CLUSTER SLOTS from a node (one
 * ready node, else any node that takes commands: the seeds are tried in
 * turn as their connections fail), at creation, whenever the owner or a
 * node's failure asks for it (sluice__cluster_refresh()), and periodically:
 * every period (SLUICE__CLUSTER_REFRESH_NS) while the primary of every slot
 * is connected, and every tenth of it (at least 50 ms) while one is not or
 * after a node's connection was lost or refused, so that a promoted replica
 * or a new node is found without waiting for a MOVED. At most one read is in
 * flight; one unanswered for max(period, 1 s) is given up (its reply is
 * ignored) and the next goes to another node. A slot the map does not name
 * (not loaded yet, or not covered) is sent to any node: it answers MOVED or
 * CLUSTERDOWN.
 *
 * Used from the loop thread only, but for sluice__cluster_ready().
 */
#ifndef SLUICE_CLUSTER_H
#define SLUICE_CLUSTER_H

#include <stdbool.h>

#include "conn.h"
#include "redis-url.h"

typedef struct sluice__cluster sluice__cluster_t;

/** The default period of the map reads (5 s). */
#define SLUICE__CLUSTER_REFRESH_NS 5000000000ull

/** The period of the map reads of the routers created from now on (0: the
 *  default, SLUICE__CLUSTER_REFRESH_NS); any thread. A knob for the tests.
 *  @return the previous setting. */
SLUICE_FLEET_HIDDEN uint64_t sluice__cluster_set_refresh_ns(uint64_t period_ns);

/** How many nodes the router knows (seeds, primaries, redirection targets). */
SLUICE_FLEET_HIDDEN size_t sluice__cluster_nodes(const sluice__cluster_t *cl);

/** How many map reads (CLUSTER SLOTS) the router has sent (loop thread). */
SLUICE_FLEET_HIDDEN uint64_t sluice__cluster_reads(const sluice__cluster_t *cl);

/** A node connection's state change: as sluice__conn_event_fn, with the
 *  node's connection. */
typedef void (*sluice__cluster_event_fn)(void *owner, sluice__conn_t *c, sluice__conn_event_t ev, int err);

/**
 * Creates a router for `url` (CLUSTER topology: the seeds, TLS, user,
 * password; copied) and starts connecting to the seeds and reading the map.
 * Each node's connection gets `opts` (its on_event/owner are replaced:
 * `on_event` is told instead).
 *
 * @return 0, SLUICE_EINVAL (no seed), SLUICE_ETLS or SLUICE_ENOMEM (`why`
 *         says which).
 */
SLUICE_FLEET_HIDDEN int sluice__cluster_new(sluice__cluster_t **out, struct event_base *base,
                                            const sluice__redis_url_t *url, const sluice__conn_opts_t *opts,
                                            sluice__cluster_event_fn on_event, void *owner, char *why, size_t why_len);

/** The connection of the primary of `slot`; for a slot the map does not
 *  name, one that takes commands. NULL when there is none. */
SLUICE_FLEET_HIDDEN sluice__conn_t *sluice__cluster_route(sluice__cluster_t *cl, unsigned slot);

/** Whether the map names the primary of `slot`. */
SLUICE_FLEET_HIDDEN bool sluice__cluster_mapped(const sluice__cluster_t *cl, unsigned slot);

/** The connection of the node host:port, created when new (a MOVED or ASK
 *  target). NULL: out of memory. */
SLUICE_FLEET_HIDDEN sluice__conn_t *sluice__cluster_node(sluice__cluster_t *cl, const char *host, int port);

/** A MOVED: `slot` is now served by host:port (taken at once) and the whole
 *  map is read again. @return the node's connection, or NULL (no memory). */
SLUICE_FLEET_HIDDEN sluice__conn_t *sluice__cluster_moved(sluice__cluster_t *cl, unsigned slot, const char *host,
                                                          int port);

/** Reads the map again (nothing when a read is in flight). */
SLUICE_FLEET_HIDDEN void sluice__cluster_refresh(sluice__cluster_t *cl);

/** Whether the map is loaded and every slot's primary is connected, as of
 *  the last change the loop thread saw (any thread may ask). */
SLUICE_FLEET_HIDDEN bool sluice__cluster_ready(const sluice__cluster_t *cl);

/**
 * Parses a redirection "MOVED <slot> <host>:<port>" or "ASK <slot>
 * <host>:<port>" (`len` bytes; the host may be an IPv6 address: the port is
 * after the last ':'; an empty host is left empty: the caller uses the node
 * that answered).
 * @return 0 with *ask, *slot, host (NUL-terminated) and *port, or -1 when
 *         `msg` is no redirection (or its host does not fit).
 */
SLUICE_FLEET_HIDDEN int sluice__cluster_redirect_parse(const char *msg, size_t len, bool *ask, unsigned *slot,
                                                       char *host, size_t host_len, int *port);

/**
 * Follows a redirection error reply `msg` (`len` bytes) that connection
 * `from` received: a MOVED updates the map (sluice__cluster_moved()), an
 * ASK does not; an empty host means `from`'s node. @return true with *to
 * the connection to send the command to (NULL: no memory) and *ask (send
 * ASKING first), or false when `msg` is no redirection it can follow.
 */
SLUICE_FLEET_HIDDEN bool sluice__cluster_follow(sluice__cluster_t *cl, const char *msg, size_t len,
                                                sluice__conn_t *from, sluice__conn_t **to, bool *ask);

/** The host and port of a node's connection `c`, or false when it is no
 *  node of this router. */
SLUICE_FLEET_HIDDEN bool sluice__cluster_addr(const sluice__cluster_t *cl, const sluice__conn_t *c, const char **host,
                                              int *port);

/** Frees the router: every connection answers its pending commands
 *  (NULL replies, SLUICE_ECLOSED) first; no event is sent. */
SLUICE_FLEET_HIDDEN void sluice__cluster_free(sluice__cluster_t *cl);

#endif
