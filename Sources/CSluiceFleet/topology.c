/*
 * topology.c — see topology.h.
 */
#include "topology.h"

#include <string.h>

int sluice__topology_open(struct event_base *base, const sluice__redis_url_t *url, const sluice__conn_opts_t *opts,
                          sluice__cluster_event_fn on_node_event, void *owner, sluice__conn_t **conn,
                          sluice__sentinel_t **sentinel, sluice__cluster_t **cluster, char *why, size_t why_len) {
    *conn = NULL;
    *sentinel = NULL;
    *cluster = NULL;
    sluice__conn_opts_t o = *opts;
    int rc = 0;
    if (url->topology == SLUICE__REDIS_SENTINEL) {
        /* every attempt asks the sentinels, and only a primary will do */
        rc = sluice__sentinel_new(sentinel, base, url, o.connect_timeout_ns, why, why_len);
        if (rc != 0) return rc;
        o.resolve = sluice__sentinel_resolve;
        o.resolver = *sentinel;
        o.check_primary = true;
    }
    if (url->topology == SLUICE__REDIS_CLUSTER)
        rc = sluice__cluster_new(cluster, base, url, &o, on_node_event, owner, why, why_len);
    else
        rc = sluice__conn_new(conn, base, url, &o, why, why_len);
    if (rc != 0) {
        sluice__sentinel_free(*sentinel);
        *sentinel = NULL;
        *conn = NULL;
        *cluster = NULL;
    }
    return rc;
}
