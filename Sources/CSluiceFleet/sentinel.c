/*
 * sentinel.c — Redis Sentinel discovery and failover notices for the fleet's
 * data connection. See sentinel.h for the design.
 *
 * A "probe" is one connection to one sentinel. A round asks the sentinels in
 * turn, starting with the one that answered last, one probe at a time. The
 * probe that names the primary becomes the subscriber (SUBSCRIBE
 * +switch-master); the previous subscriber is retired. Retired probes are
 * freed from the `reap` event: a connection cannot be freed inside its own
 * callbacks.
 */
#ifndef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L
#endif

#include "sentinel.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>

#define MS 1000000ull

struct probe {
    struct sluice__sentinel *s;
    sluice__conn_t *c;
    size_t idx;         /* which sentinel */
    bool sub;           /* the subscriber (else a round's question) */
    bool retired;       /* waiting for `reap`: its events are ignored */
    struct probe *dead; /* the reap list */
};

struct sluice__sentinel {
    struct event_base *base;
    sluice__redis_url_t url; /* sentinels, master, sentinel credentials, TLS */
    uint64_t timeout_ns;     /* per sentinel */

    sluice__conn_t *data; /* the connection asking, and its attempt */
    uint64_t ticket;
    struct probe *ask; /* the round's current question, or NULL */
    size_t next;       /* the sentinel asked first in a round */
    size_t tried;      /* sentinels asked in this round */
    int err;           /* the round's most telling failure */
    char msg[320];

    struct probe *sub;
    struct probe *dead;
    struct event *reap, *step;
};

static void ask_next(struct sluice__sentinel *s);

/* ------------------------------------------------------------------ probes */

static void retire(struct probe *p) {
    if (!p || p->retired) return;
    struct sluice__sentinel *s = p->s;
    p->retired = true;
    p->dead = s->dead;
    s->dead = p;
    if (s->ask == p) s->ask = NULL;
    if (s->sub == p) s->sub = NULL;
    if (s->reap) event_active(s->reap, 0, 0);
}

static void reap_cb(evutil_socket_t fd, short what, void *arg) {
    (void)fd;
    (void)what;
    struct sluice__sentinel *s = arg;
    struct probe *p = s->dead;
    s->dead = NULL;
    while (p) {
        struct probe *next = p->dead;
        sluice__conn_free(p->c); /* answers its pending commands: ignored, retired */
        free(p);
        p = next;
    }
}

/* Keeps the round's most telling failure: an unknown master name, then a
 * refusal by a sentinel (credentials...), then anything else. */
static int rank(int err) {
    return err == SLUICE_ENOMASTER ? 3 : err == SLUICE_ENOTCONN || err == SLUICE_ETIMEDOUT ? 1 : 2;
}

static void note_failure(struct sluice__sentinel *s, int err, const char *msg) {
    if (s->err && rank(err) < rank(s->err)) return;
    s->err = err;
    snprintf(s->msg, sizeof s->msg, "%.*s", (int)(sizeof s->msg - 1), msg); /* cut if longer */
}

/* This sentinel gave no address: the next one is asked (from the loop). */
static void give_up_on(struct probe *p, int err, const char *msg) {
    struct sluice__sentinel *s = p->s;
    note_failure(s, err, msg);
    retire(p);
    event_active(s->step, 0, 0);
}

/* "host:port" of sentinel i, for messages. */
static void sentinel_name(const struct sluice__sentinel *s, size_t i, char *out, size_t n) {
    const sluice__redis_node_t *nd = &s->url.nodes[i];
    snprintf(out, n, strchr(nd->host, ':') ? "[%.200s]:%d" : "%.200s:%d", nd->host, nd->port);
}

/* ------------------------------------------------------------------ the subscriber */

static void ignore_reply(void *arg, redisReply *reply, int err) {
    (void)arg;
    (void)reply;
    (void)err;
}

static void subscribe(struct probe *p) {
    const char *argv[2] = { "SUBSCRIBE", "+switch-master" };
    size_t lens[2] = { 9, 14 };
    sluice__conn_send(p->c, 2, argv, lens, ignore_reply, NULL); /* ENOTCONN: resent at the next UP */
}

/* A pub/sub message: ["message", "+switch-master", "NAME OLDIP OLDPORT NEWIP NEWPORT"]. */
static void probe_push(void *owner, redisReply *r) {
    struct probe *p = owner;
    struct sluice__sentinel *s = p->s;
    if (p->retired || !p->sub || r->type != REDIS_REPLY_ARRAY || r->elements != 3) return;
    const redisReply *body = r->element[2];
    if (r->element[0]->type != REDIS_REPLY_STRING || r->element[0]->len != 7 ||
        memcmp(r->element[0]->str, "message", 7) != 0 || body->type != REDIS_REPLY_STRING)
        return;
    size_t n = strlen(s->url.master);
    if (body->len <= n || memcmp(body->str, s->url.master, n) != 0 || body->str[n] != ' ') return;
    /* the new address: the last two words */
    char text[512], host[256];
    int port = 0;
    snprintf(text, sizeof text, "%.*s", (int)(body->len - n - 1 < 500 ? body->len - n - 1 : 500), body->str + n + 1);
    if (sscanf(text, "%*255s %*d %255s %d", host, &port) == 2 && sluice__conn_is_at(s->data, host, port))
        return; /* a reconnect found the new primary first: nothing to leave */
    /* our primary moved: leave the old one now, and reconnect at once (not
     * after the backoff of a connection that lost a dead primary): the
     * attempt rediscovers */
    if (s->data) {
        sluice__conn_drop(s->data, SLUICE_EREADONLY);
        sluice__conn_retry_now(s->data);
    }
}

/* ------------------------------------------------------------------ a round's question */

/* The answer to SENTINEL get-master-addr-by-name: [ip, port], or nil. */
static void addr_reply(void *arg, redisReply *r, int err) {
    (void)err;
    struct probe *p = arg;
    struct sluice__sentinel *s = p->s;
    if (!r || p->retired) return; /* dropped: the probe's event says why */
    char who[220], msg[640];
    sentinel_name(s, p->idx, who, sizeof who);
    if (r->type == REDIS_REPLY_NIL) {
        snprintf(msg, sizeof msg, "sentinel %s knows no primary named \"%.100s\"", who, s->url.master);
        give_up_on(p, SLUICE_ENOMASTER, msg);
        return;
    }
    if (r->type == REDIS_REPLY_ERROR) {
        snprintf(msg, sizeof msg, "sentinel %s refused SENTINEL get-master-addr-by-name: %.200s", who, r->str);
        give_up_on(p, sluice__redis_error_code(r->str, r->len), msg);
        return;
    }
    char *end = NULL;
    long port = 0;
    bool ok = r->type == REDIS_REPLY_ARRAY && r->elements == 2 && r->element[0]->type == REDIS_REPLY_STRING &&
              r->element[1]->type == REDIS_REPLY_STRING && r->element[0]->len > 0 && r->element[0]->len < 256;
    if (ok) port = strtol(r->element[1]->str, &end, 10);
    if (!ok || end == r->element[1]->str || *end || port < 1 || port > 65535) {
        snprintf(msg, sizeof msg, "sentinel %s answered SENTINEL get-master-addr-by-name with no address", who);
        give_up_on(p, SLUICE_EPROTO, msg);
        return;
    }
    /* found: this sentinel is asked first next time, and becomes the subscriber */
    s->next = p->idx;
    s->ask = NULL;
    retire(s->sub);
    p->sub = true;
    s->sub = p;
    subscribe(p);
    char host[256];
    memcpy(host, r->element[0]->str, r->element[0]->len);
    host[r->element[0]->len] = '\0';
    sluice__conn_target(s->data, s->ticket, host, (int)port);
}

static void ask_addr(struct probe *p) {
    const char *argv[3] = { "SENTINEL", "get-master-addr-by-name", p->s->url.master };
    size_t lens[3] = { 8, 23, strlen(p->s->url.master) };
    if (sluice__conn_send(p->c, 3, argv, lens, addr_reply, p) != 0)
        give_up_on(p, SLUICE_ENOMEM, "out of memory asking a sentinel");
}

static void probe_event(void *owner, sluice__conn_event_t ev, int err) {
    struct probe *p = owner;
    if (p->retired) return;
    if (p->sub) {
        if (ev == SLUICE__CONN_UP) subscribe(p); /* after its own reconnect */
        return;
    }
    if (ev == SLUICE__CONN_UP) {
        ask_addr(p);
        return;
    }
    const char *msg = NULL;
    sluice__conn_error(p->c, &msg);
    char buf[320];
    snprintf(buf, sizeof buf, "sentinel: %s", msg && *msg ? msg : sluice_strerror(err));
    give_up_on(p, err, buf);
}

/* A connection to sentinel `i` with the sentinel credentials and the TLS settings. */
static int probe_new(struct sluice__sentinel *s, size_t i, struct probe **out, char *why, size_t why_len) {
    struct probe *p = calloc(1, sizeof *p);
    if (!p) return SLUICE_ENOMEM;
    p->s = s;
    p->idx = i;
    sluice__redis_url_t u;
    memset(&u, 0, sizeof u);
    u.topology = SLUICE__REDIS_SINGLE;
    u.nodes = &s->url.nodes[i];
    u.n_nodes = 1;
    u.user = s->url.sentinel_user;
    u.password = s->url.sentinel_password;
    u.tls = s->url.tls;
    sluice__conn_opts_t o;
    memset(&o, 0, sizeof o);
    o.connect_timeout_ns = s->timeout_ns;
    o.backoff_min_ns = 100 * MS;
    o.backoff_max_ns = 2000 * MS;
    o.on_event = probe_event;
    o.owner = p;
    o.on_push = probe_push;
    int rc = sluice__conn_new(&p->c, s->base, &u, &o, why, why_len);
    if (rc) {
        free(p);
        return rc;
    }
    *out = p;
    return 0;
}

/* ------------------------------------------------------------------ rounds */

/* Asks the next sentinel of the round, or ends the round with its failure. */
static void ask_next(struct sluice__sentinel *s) {
    while (s->tried < s->url.n_nodes) {
        size_t i = (s->next + s->tried) % s->url.n_nodes;
        s->tried++;
        char why[320];
        int rc = probe_new(s, i, &s->ask, why, sizeof why);
        if (rc == 0) return; /* its UP or FAILED event goes on */
        note_failure(s, rc, why);
    }
    char msg[320];
    if (s->err == SLUICE_ENOTCONN || s->err == SLUICE_ETIMEDOUT || !s->err)
        snprintf(msg, sizeof msg, "no sentinel answered (%zu tried; last: %.250s)", s->url.n_nodes, s->msg);
    else
        snprintf(msg, sizeof msg, "%s", s->msg);
    int err = s->err == SLUICE_ETIMEDOUT || !s->err ? SLUICE_ENOTCONN : s->err;
    sluice__conn_target_failed(s->data, s->ticket, err, msg);
}

static void step_cb(evutil_socket_t fd, short what, void *arg) {
    (void)fd;
    (void)what;
    struct sluice__sentinel *s = arg;
    if (!s->ask) ask_next(s);
}

void sluice__sentinel_resolve(void *resolver, sluice__conn_t *data, uint64_t ticket) {
    struct sluice__sentinel *s = resolver;
    retire(s->ask); /* an older round's question */
    event_del(s->step);
    s->data = data;
    s->ticket = ticket;
    s->tried = 0;
    s->err = 0;
    s->msg[0] = '\0';
    ask_next(s);
}

/* ------------------------------------------------------------------ life */

int sluice__sentinel_new(sluice__sentinel_t **out, struct event_base *base, const sluice__redis_url_t *url,
                         uint64_t timeout_ns, char *why, size_t why_len) {
    if (why && why_len) why[0] = '\0';
    if (url->topology != SLUICE__REDIS_SENTINEL || url->n_nodes < 1 || !url->master || !*url->master) {
        if (why) snprintf(why, why_len, "a Sentinel address needs sentinels and a master name");
        return SLUICE_EINVAL;
    }
    struct sluice__sentinel *s = calloc(1, sizeof *s);
    if (!s) return SLUICE_ENOMEM;
    s->base = base;
    /* each sentinel gets a share of the connect timeout (at least 100 ms) */
    s->timeout_ns = timeout_ns / url->n_nodes > 100 * MS ? timeout_ns / url->n_nodes : 100 * MS;
    int rc = sluice__redis_url_copy(&s->url, url, false);
    s->reap = event_new(base, -1, 0, reap_cb, s);
    s->step = event_new(base, -1, 0, step_cb, s);
    if (!rc && (!s->reap || !s->step)) rc = SLUICE_ENOMEM;
    if (rc) {
        sluice__sentinel_free(s);
        return rc;
    }
    *out = s;
    return 0;
}

void sluice__sentinel_free(sluice__sentinel_t *s) {
    if (!s) return;
    retire(s->ask);
    retire(s->sub);
    if (s->reap) reap_cb(-1, 0, s);
    if (s->reap) event_free(s->reap);
    if (s->step) event_free(s->step);
    sluice__redis_url_free(&s->url);
    free(s);
}
