/*
 * topology.h — the connections an address needs (internal): one connection
 * (a single node or a Unix socket; behind Sentinel, with the Sentinel
 * resolver asking where the primary is on every attempt), or a Redis
 * Cluster router with a connection per primary. Both fleet limiters open
 * their connections here.
 */
#ifndef SLUICE_TOPOLOGY_H
#define SLUICE_TOPOLOGY_H

#include "cluster.h"
#include "conn.h"
#include "redis-url.h"
#include "sentinel.h"

/**
 * Opens the connections of `url` on `base`, each with `opts` (copied; behind
 * Sentinel with its resolver and the primary check added; a cluster's node
 * events go to `on_node_event` with `owner`), into the owner's own fields:
 * *conn (and *sentinel behind Sentinel), or *cluster. They are written
 * before the connections are armed, because a loop running on another
 * thread may call the owner back before this function returns.
 *
 * @return 0; or the error of sluice__conn_new(), sluice__sentinel_new() or
 *         sluice__cluster_new() with the three fields NULL and `why` saying
 *         what failed.
 */
SLUICE_FLEET_HIDDEN int sluice__topology_open(struct event_base *base, const sluice__redis_url_t *url,
                                              const sluice__conn_opts_t *opts, sluice__cluster_event_fn on_node_event,
                                              void *owner, sluice__conn_t **conn, sluice__sentinel_t **sentinel,
                                              sluice__cluster_t **cluster, char *why, size_t why_len);

#endif
