/*
 * cluster-map.h — which Redis Cluster primary serves each hash slot
 * (internal), read from a node's CLUSTER SLOTS reply.
 */
#ifndef SLUICE_CLUSTER_MAP_H
#define SLUICE_CLUSTER_MAP_H

#include <hiredis/hiredis.h>

#include "cluster-slot.h"
#include "redis-url.h"

/** No primary serves the slot (not covered, or its address is unknown). */
#define SLUICE__CLUSTER_NONE 0xFFFFu

/** A slot map: the primaries (distinct host:port) and, for each slot, the
 *  index of its primary in `nodes` or SLUICE__CLUSTER_NONE. Owned strings. */
typedef struct sluice__cluster_map {
    sluice__redis_node_t *nodes;
    size_t n_nodes;
    uint16_t owner[SLUICE__CLUSTER_SLOTS];
} sluice__cluster_map_t;

/**
 * Reads a CLUSTER SLOTS reply into `out` (zeroed first): each range's first
 * node is its primary (replicas are ignored). A primary whose host is the
 * empty string is at `self_host` (the host the reply came from, as Redis
 * documents); one whose host is NULL (unknown endpoint) serves nothing.
 *
 * @return 0; SLUICE_EPROTO (not a CLUSTER SLOTS reply: `out` holds nothing
 *         to free); SLUICE_ENOMEM.
 */
SLUICE_FLEET_HIDDEN int sluice__cluster_map_parse(const redisReply *r, const char *self_host,
                                                  sluice__cluster_map_t *out);

/** The index of host:port in the map's nodes, or -1. */
SLUICE_FLEET_HIDDEN int sluice__cluster_map_find(const sluice__cluster_map_t *m, const char *host, int port);

/** Frees the map's nodes and zeroes it. */
SLUICE_FLEET_HIDDEN void sluice__cluster_map_free(sluice__cluster_map_t *m);

#endif
