/*
 * cluster-map.c — the slot map of a Redis Cluster from a CLUSTER SLOTS reply
 * (cluster-map.h).
 */
#include <stdlib.h>
#include <string.h>

#include "cluster-map.h"

int sluice__cluster_map_find(const sluice__cluster_map_t *m, const char *host, int port) {
    for (size_t i = 0; i < m->n_nodes; i++)
        if (m->nodes[i].port == port && strcmp(m->nodes[i].host, host) == 0) return (int)i;
    return -1;
}

void sluice__cluster_map_free(sluice__cluster_map_t *m) {
    for (size_t i = 0; i < m->n_nodes; i++) free(m->nodes[i].host);
    free(m->nodes);
    memset(m, 0, sizeof *m);
}

/* The index of host:port, added when new. @return it, or -1 (no memory). */
static int add_node(sluice__cluster_map_t *m, const char *host, size_t host_len, int port) {
    for (size_t i = 0; i < m->n_nodes; i++)
        if (m->nodes[i].port == port && strlen(m->nodes[i].host) == host_len &&
            memcmp(m->nodes[i].host, host, host_len) == 0)
            return (int)i;
    if (m->n_nodes >= SLUICE__CLUSTER_NONE) return -1;
    sluice__redis_node_t *n = realloc(m->nodes, (m->n_nodes + 1) * sizeof *n);
    if (!n) return -1;
    m->nodes = n;
    char *h = malloc(host_len + 1);
    if (!h) return -1;
    memcpy(h, host, host_len);
    h[host_len] = '\0';
    n[m->n_nodes].host = h;
    n[m->n_nodes].port = port;
    return (int)m->n_nodes++;
}

static bool int_in(const redisReply *e, long long lo, long long hi) {
    return e && e->type == REDIS_REPLY_INTEGER && e->integer >= lo && e->integer <= hi;
}

/* One range [start, end, primary, replicas...]. @return 0, SLUICE_EPROTO or SLUICE_ENOMEM. */
static int parse_range(const redisReply *e, const char *self_host, sluice__cluster_map_t *out) {
    if (e->type != REDIS_REPLY_ARRAY || e->elements < 3) return SLUICE_EPROTO;
    const redisReply *p = e->element[2];
    if (!int_in(e->element[0], 0, SLUICE__CLUSTER_SLOTS - 1) ||
        !int_in(e->element[1], e->element[0]->integer, SLUICE__CLUSTER_SLOTS - 1) || p->type != REDIS_REPLY_ARRAY ||
        p->elements < 2 || !int_in(p->element[1], 1, 65535))
        return SLUICE_EPROTO;
    if (p->element[0]->type == REDIS_REPLY_NIL) return 0; /* unknown endpoint: serves nothing here */
    if (p->element[0]->type != REDIS_REPLY_STRING) return SLUICE_EPROTO;
    const char *host = p->element[0]->str;
    size_t host_len = p->element[0]->len;
    if (host_len == 0) {
        host = self_host;
        host_len = strlen(self_host);
    }
    int idx = add_node(out, host, host_len, (int)p->element[1]->integer);
    if (idx < 0) return SLUICE_ENOMEM;
    for (long long s = e->element[0]->integer; s <= e->element[1]->integer; s++) out->owner[s] = (uint16_t)idx;
    return 0;
}

int sluice__cluster_map_parse(const redisReply *r, const char *self_host, sluice__cluster_map_t *out) {
    memset(out, 0, sizeof *out);
    for (size_t s = 0; s < SLUICE__CLUSTER_SLOTS; s++) out->owner[s] = SLUICE__CLUSTER_NONE;
    if (!r || r->type != REDIS_REPLY_ARRAY) return SLUICE_EPROTO;
    for (size_t i = 0; i < r->elements; i++) {
        int rc = parse_range(r->element[i], self_host, out);
        if (rc != 0) {
            sluice__cluster_map_free(out);
            return rc;
        }
    }
    return 0;
}
