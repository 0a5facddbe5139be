/*
 * cluster.c — routing to the primaries of a Redis Cluster: one connection per
 * node, the slot map read with CLUSTER SLOTS (cluster.h).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cluster-map.h"
#include "cluster.h"
#include "fleet-time.h"

#define MS 1000000ull
#define SEC_NS 1000000000ull

/* The period of the map reads of the routers created from now on (0: the
 * default); see sluice__cluster_set_refresh_ns(). */
static uint64_t refresh_knob_ns;

uint64_t sluice__cluster_set_refresh_ns(uint64_t period_ns) {
    return __atomic_exchange_n(&refresh_knob_ns, period_ns, __ATOMIC_RELAXED);
}

/* A map read in flight: its node, and its number (a reply to a read that was
 * given up is ignored). */
struct map_read {
    struct node *node;
    uint64_t seq;
};

struct node {
    struct sluice__cluster *cl;
    char *host;
    int port;
    sluice__conn_t *conn;
};

struct sluice__cluster {
    struct event_base *base;
    sluice__redis_url_t url; /* the settings every node gets (owned copies; no nodes) */
    sluice__conn_opts_t opts;
    sluice__cluster_event_fn on_event;
    void *owner;
    struct node **nodes;
    size_t n_nodes;
    bool loaded;           /* a map was read */
    bool refreshing;       /* a CLUSTER SLOTS is in flight (read_seq) */
    uint64_t read_seq;     /* the number of the last read sent */
    uint64_t read_sent_ns; /* when it was sent (monotonic) */
    uint64_t period_ns;    /* map reads while every slot's primary is up */
    uint64_t fast_ns;      /* map reads while one is not (or a node was lost) */
    uint64_t next_tick_ns; /* when the tick timer fires (monotonic) */
    uint64_t reads;        /* map reads sent (sluice__cluster_reads()) */
    struct event *tick;    /* the periodic map read */
    bool freeing;
    bool ready;      /* sluice__cluster_ready(), kept by the loop thread, read from any (atomic) */
    size_t next_try; /* where the next read looks for a node first */
    uint16_t owner_of[SLUICE__CLUSTER_SLOTS]; /* index in nodes, or SLUICE__CLUSTER_NONE */
};

/* Whether the map is read and every slot's primary is connected: kept in
 * cl->ready after every change, so that any thread may read it. */
static void update_ready(struct sluice__cluster *cl) {
    bool ready = cl->loaded;
    for (size_t s = 0; ready && s < SLUICE__CLUSTER_SLOTS; s++) {
        uint16_t o = cl->owner_of[s];
        ready = o != SLUICE__CLUSTER_NONE && sluice__conn_ready(cl->nodes[o]->conn);
    }
    __atomic_store_n(&cl->ready, ready, __ATOMIC_RELAXED);
}

static uint64_t mono_ns(void) { return sluice__fleet_clock_ns(CLOCK_MONOTONIC); }

/* Makes the tick timer fire within `ns` from now (sooner when it would fire
 * sooner already). */
static void tick_within(struct sluice__cluster *cl, uint64_t ns) {
    if (!cl->tick || cl->freeing) return;
    uint64_t now = mono_ns();
    if (evtimer_pending(cl->tick, NULL) && cl->next_tick_ns <= now + ns) return;
    cl->next_tick_ns = now + ns;
    sluice__fleet_arm(cl->tick, ns);
}

static void node_event(void *arg, sluice__conn_event_t ev, int err) {
    struct node *n = arg;
    struct sluice__cluster *cl = n->cl;
    update_ready(cl);
    /* a node lost or unreachable: the map may have changed (and a read sent
     * to it failed: try another node); and the cluster may take a while to
     * notice (a replica is promoted after the node timeout): read it again
     * soon, until every slot's primary is up */
    if (ev != SLUICE__CONN_UP) {
        sluice__cluster_refresh(cl);
        tick_within(cl, cl->fast_ns);
    }
    if (cl->on_event) cl->on_event(cl->owner, n->conn, ev, err);
}

/* The index of host:port among the nodes, created when new; -1 when it
 * cannot be created (*rc and `why` say why: out of memory, a TLS file). */
static int node_index_why(struct sluice__cluster *cl, const char *host, int port, int *rc, char *why, size_t why_len) {
    *rc = SLUICE_ENOMEM;
    for (size_t i = 0; i < cl->n_nodes; i++)
        if (cl->nodes[i]->port == port && strcmp(cl->nodes[i]->host, host) == 0) return (int)i;
    if (cl->n_nodes >= SLUICE__CLUSTER_NONE) return -1;
    struct node **v = realloc(cl->nodes, (cl->n_nodes + 1) * sizeof *v);
    if (!v) return -1;
    cl->nodes = v;
    struct node *n = calloc(1, sizeof *n);
    if (!n) return -1;
    n->cl = cl;
    n->port = port;
    n->host = strdup(host);
    sluice__redis_url_t u = cl->url;
    sluice__redis_node_t addr = { n->host, port };
    u.topology = SLUICE__REDIS_SINGLE;
    u.nodes = &addr;
    u.n_nodes = 1;
    sluice__conn_opts_t o = cl->opts;
    o.on_event = node_event;
    o.owner = n;
    if (!n->host || (*rc = sluice__conn_new(&n->conn, cl->base, &u, &o, why, why_len)) != 0) {
        free(n->host);
        free(n);
        return -1;
    }
    cl->nodes[cl->n_nodes] = n;
    return (int)cl->n_nodes++;
}

static int node_index(struct sluice__cluster *cl, const char *host, int port) {
    char why[256];
    int rc;
    return node_index_why(cl, host, port, &rc, why, sizeof why);
}

sluice__conn_t *sluice__cluster_node(sluice__cluster_t *cl, const char *host, int port) {
    int i = node_index(cl, host, port);
    return i < 0 ? NULL : cl->nodes[i]->conn;
}

sluice__conn_t *sluice__cluster_route(sluice__cluster_t *cl, unsigned slot) {
    uint16_t i = cl->owner_of[slot & (SLUICE__CLUSTER_SLOTS - 1)];
    if (i != SLUICE__CLUSTER_NONE) return cl->nodes[i]->conn;
    for (size_t k = 0; k < cl->n_nodes; k++)
        if (sluice__conn_ready(cl->nodes[k]->conn)) return cl->nodes[k]->conn;
    for (size_t k = 0; k < cl->n_nodes; k++)
        if (sluice__conn_sendable(cl->nodes[k]->conn)) return cl->nodes[k]->conn;
    return cl->n_nodes ? cl->nodes[0]->conn : NULL;
}

bool sluice__cluster_mapped(const sluice__cluster_t *cl, unsigned slot) {
    return cl->owner_of[slot & (SLUICE__CLUSTER_SLOTS - 1)] != SLUICE__CLUSTER_NONE;
}

sluice__conn_t *sluice__cluster_moved(sluice__cluster_t *cl, unsigned slot, const char *host, int port) {
    int i = node_index(cl, host, port);
    if (i < 0) return NULL;
    cl->owner_of[slot & (SLUICE__CLUSTER_SLOTS - 1)] = (uint16_t)i;
    update_ready(cl);
    sluice__cluster_refresh(cl);
    return cl->nodes[i]->conn;
}

/* Takes a map: its primaries become nodes. */
static void take_map(struct sluice__cluster *cl, const sluice__cluster_map_t *m) {
    int *to = malloc((m->n_nodes ? m->n_nodes : 1) * sizeof *to);
    if (!to) return;
    for (size_t i = 0; i < m->n_nodes; i++) to[i] = node_index(cl, m->nodes[i].host, m->nodes[i].port);
    for (size_t s = 0; s < SLUICE__CLUSTER_SLOTS; s++) {
        uint16_t o = m->owner[s];
        cl->owner_of[s] = o == SLUICE__CLUSTER_NONE || to[o] < 0 ? SLUICE__CLUSTER_NONE : (uint16_t)to[o];
    }
    free(to);
    cl->loaded = true;
    update_ready(cl);
}

static void slots_reply(void *arg, redisReply *r, int err) {
    (void)err;
    struct map_read *rd = arg;
    struct node *n = rd->node;
    struct sluice__cluster *cl = n->cl;
    uint64_t seq = rd->seq;
    free(rd);
    if (cl->freeing || seq != cl->read_seq) return; /* given up (tick_cb): a later read decides */
    cl->refreshing = false;
    sluice__cluster_map_t m;
    if (r && sluice__cluster_map_parse(r, n->host, &m) == 0) {
        take_map(cl, &m);
        sluice__cluster_map_free(&m);
    }
    /* a failed read (an error reply, a lost node) is not retried here: the
     * next tick (soon while a primary is missing), redirection, CLUSTERDOWN
     * or node event asks again, and the next read goes to another node first */
}

void sluice__cluster_refresh(sluice__cluster_t *cl) {
    if (cl->freeing) return;
    if (cl->refreshing) return;
    /* a ready node first, else any that takes commands; round robin, so
     * that a node that fails to answer is not asked every time */
    struct node *pick = NULL;
    for (int pass = 0; pass < 2 && !pick; pass++) {
        for (size_t k = 0; k < cl->n_nodes && !pick; k++) {
            struct node *n = cl->nodes[(cl->next_try + k) % cl->n_nodes];
            if (pass == 0 ? sluice__conn_ready(n->conn) : sluice__conn_sendable(n->conn)) pick = n;
        }
    }
    if (!pick) return; /* every node is between attempts: a node's next event asks again */
    cl->next_try++;
    struct map_read *rd = malloc(sizeof *rd);
    if (!rd) return;
    rd->node = pick;
    rd->seq = cl->read_seq + 1;
    const char *argv[2] = { "CLUSTER", "SLOTS" };
    size_t lens[2] = { 7, 5 };
    if (sluice__conn_send(pick->conn, 2, argv, lens, slots_reply, rd) != 0) {
        free(rd);
        return;
    }
    cl->read_seq++;
    cl->refreshing = true;
    cl->read_sent_ns = mono_ns();
    cl->reads++;
}

/* The periodic map read: every period while every slot's primary is up,
 * every fast period while one is not. A read unanswered for max(period,
 * 1 s) (a stalled node) is given up, so that the next goes to another node. */
static void tick_cb(evutil_socket_t fd, short what, void *arg) {
    (void)fd;
    (void)what;
    struct sluice__cluster *cl = arg;
    bool ready = __atomic_load_n(&cl->ready, __ATOMIC_RELAXED);
    uint64_t now = mono_ns();
    if (cl->refreshing && now - cl->read_sent_ns >= (cl->period_ns > SEC_NS ? cl->period_ns : SEC_NS))
        cl->refreshing = false, cl->read_seq++; /* its reply, if it comes, is ignored */
    sluice__cluster_refresh(cl);
    uint64_t next = ready ? cl->period_ns : cl->fast_ns;
    cl->next_tick_ns = now + next;
    sluice__fleet_arm(cl->tick, next);
}

uint64_t sluice__cluster_reads(const sluice__cluster_t *cl) { return cl->reads; }

size_t sluice__cluster_nodes(const sluice__cluster_t *cl) { return cl->n_nodes; }

bool sluice__cluster_ready(const sluice__cluster_t *cl) { return __atomic_load_n(&cl->ready, __ATOMIC_RELAXED); }

bool sluice__cluster_addr(const sluice__cluster_t *cl, const sluice__conn_t *c, const char **host, int *port) {
    for (size_t i = 0; i < cl->n_nodes; i++) {
        if (cl->nodes[i]->conn == c) {
            *host = cl->nodes[i]->host;
            *port = cl->nodes[i]->port;
            return true;
        }
    }
    return false;
}

int sluice__cluster_redirect_parse(const char *msg, size_t len, bool *ask, unsigned *slot, char *host, size_t host_len,
                                   int *port) {
    size_t skip;
    if (len > 6 && memcmp(msg, "MOVED ", 6) == 0)
        *ask = false, skip = 6;
    else if (len > 4 && memcmp(msg, "ASK ", 4) == 0)
        *ask = true, skip = 4;
    else
        return -1;
    const char *p = msg + skip, *end = msg + len;
    unsigned s = 0;
    size_t digits = 0;
    while (p < end && *p >= '0' && *p <= '9' && digits < 6) s = s * 10 + (unsigned)(*p++ - '0'), digits++;
    if (!digits || s >= SLUICE__CLUSTER_SLOTS || p == end || *p++ != ' ') return -1;
    const char *colon = NULL;
    for (const char *q = p; q < end; q++)
        if (*q == ':') colon = q;
    if (!colon || (size_t)(colon - p) >= host_len) return -1;
    long pt = 0;
    const char *q = colon + 1;
    if (q == end) return -1;
    for (; q < end; q++) {
        if (*q < '0' || *q > '9' || (pt = pt * 10 + (*q - '0')) > 65535) return -1;
    }
    if (pt < 1) return -1;
    memcpy(host, p, (size_t)(colon - p));
    host[colon - p] = '\0';
    *slot = s;
    *port = (int)pt;
    return 0;
}

bool sluice__cluster_follow(sluice__cluster_t *cl, const char *msg, size_t len, sluice__conn_t *from,
                            sluice__conn_t **to, bool *ask) {
    unsigned slot;
    char host[256];
    int port;
    if (!cl || sluice__cluster_redirect_parse(msg, len, ask, &slot, host, sizeof host, &port) != 0) return false;
    if (!host[0]) { /* an empty host: the node that answered */
        const char *self;
        int self_port;
        if (!from || !sluice__cluster_addr(cl, from, &self, &self_port)) return false;
        snprintf(host, sizeof host, "%s", self);
    }
    *to = *ask ? sluice__cluster_node(cl, host, port) : sluice__cluster_moved(cl, slot, host, port);
    return true;
}

static bool dup_opt(char **dst, const char *src) {
    *dst = src ? strdup(src) : NULL;
    return !src || *dst;
}

/* Copies the settings every node's connection gets: TLS, user, password. */
static bool copy_settings(sluice__redis_url_t *d, const sluice__redis_url_t *s) {
    memset(d, 0, sizeof *d);
    d->topology = SLUICE__REDIS_SINGLE;
    d->tls.tls = s->tls.tls;
    d->tls.insecure = s->tls.insecure;
    return dup_opt(&d->user, s->user) && dup_opt(&d->password, s->password) && dup_opt(&d->tls.cacert, s->tls.cacert) &&
           dup_opt(&d->tls.cert, s->tls.cert) && dup_opt(&d->tls.key, s->tls.key) && dup_opt(&d->tls.sni, s->tls.sni);
}

static void free_settings(sluice__redis_url_t *u) {
    if (u->password) sluice__fleet_wipe(u->password, strlen(u->password)); /* a secret */
    free(u->password);
    free(u->user);
    free(u->tls.cacert);
    free(u->tls.cert);
    free(u->tls.key);
    free(u->tls.sni);
    memset(u, 0, sizeof *u);
}

int sluice__cluster_new(sluice__cluster_t **out, struct event_base *base, const sluice__redis_url_t *url,
                        const sluice__conn_opts_t *opts, sluice__cluster_event_fn on_event, void *owner, char *why,
                        size_t why_len) {
    if (!url->n_nodes) {
        snprintf(why, why_len, "a Redis Cluster address needs at least one seed node");
        return SLUICE_EINVAL;
    }
    struct sluice__cluster *cl = calloc(1, sizeof *cl);
    if (!cl) return SLUICE_ENOMEM;
    cl->base = base;
    cl->opts = *opts;
    cl->on_event = on_event;
    cl->owner = owner;
    cl->period_ns = __atomic_load_n(&refresh_knob_ns, __ATOMIC_RELAXED);
    if (!cl->period_ns) cl->period_ns = SLUICE__CLUSTER_REFRESH_NS;
    cl->fast_ns = cl->period_ns / 10 > 50 * MS ? cl->period_ns / 10 : 50 * MS;
    if (cl->fast_ns > cl->period_ns) cl->fast_ns = cl->period_ns;
    cl->tick = evtimer_new(base, tick_cb, cl);
    if (!cl->tick) {
        snprintf(why, why_len, "out of memory");
        sluice__cluster_free(cl);
        return SLUICE_ENOMEM;
    }
    for (size_t s = 0; s < SLUICE__CLUSTER_SLOTS; s++) cl->owner_of[s] = SLUICE__CLUSTER_NONE;
    if (!copy_settings(&cl->url, url)) {
        snprintf(why, why_len, "out of memory");
        sluice__cluster_free(cl);
        return SLUICE_ENOMEM;
    }
    for (size_t i = 0; i < url->n_nodes; i++) {
        int rc;
        if (node_index_why(cl, url->nodes[i].host, url->nodes[i].port, &rc, why, why_len) < 0) {
            if (rc == SLUICE_ENOMEM) snprintf(why, why_len, "out of memory");
            sluice__cluster_free(cl);
            return rc;
        }
    }
    *out = cl;
    sluice__cluster_refresh(cl);
    cl->next_tick_ns = mono_ns() + cl->fast_ns;
    sluice__fleet_arm(cl->tick, cl->fast_ns); /* the first read may fail: soon again */
    return 0;
}

void sluice__cluster_free(sluice__cluster_t *cl) {
    if (!cl) return;
    cl->freeing = true;
    if (cl->tick) event_free(cl->tick);
    for (size_t i = 0; i < cl->n_nodes; i++) sluice__conn_free(cl->nodes[i]->conn);
    for (size_t i = 0; i < cl->n_nodes; i++) {
        free(cl->nodes[i]->host);
        free(cl->nodes[i]);
    }
    free(cl->nodes);
    free_settings(&cl->url);
    free(cl);
}
