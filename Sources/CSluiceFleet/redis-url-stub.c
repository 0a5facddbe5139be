/*
 * redis-url-stub.c — TEMPORARY stand-in for the real URL parser (redis-url.c),
 * so the connection layer can be built and tested before it lands. DELETE
 * THIS FILE when redis-url.c is merged: both define the functions of
 * redis-url.h.
 *
 * Understands only what the tests use: redis://[[USER]:PASSWORD@]HOST[:PORT][/DB],
 * rediss://... with ?cacert=&cert=&key=&sni=&insecure=1, and
 * unix:///PATH?db=N&user=U&password=P. No percent-decoding, no IPv6 brackets.
 */
#include <stdlib.h>
#include <string.h>

#include "redis-url.h"

static char *dup_n(const char *s, size_t n) {
    char *d = malloc(n + 1);
    if (d) {
        memcpy(d, s, n);
        d[n] = '\0';
    }
    return d;
}

static int query_pair(sluice__redis_url_t *u, const char *k, size_t kl, const char *v, size_t vl) {
    char **dst = NULL;
    if (kl == 6 && !memcmp(k, "cacert", 6))
        dst = &u->tls.cacert;
    else if (kl == 4 && !memcmp(k, "cert", 4))
        dst = &u->tls.cert;
    else if (kl == 3 && !memcmp(k, "key", 3))
        dst = &u->tls.key;
    else if (kl == 3 && !memcmp(k, "sni", 3))
        dst = &u->tls.sni;
    else if (kl == 4 && !memcmp(k, "user", 4))
        dst = &u->user;
    else if (kl == 8 && !memcmp(k, "password", 8))
        dst = &u->password;
    else if (kl == 8 && !memcmp(k, "insecure", 8)) {
        u->tls.insecure = vl == 1 && v[0] == '1';
        return 0;
    } else if (kl == 2 && !memcmp(k, "db", 2)) {
        u->db = atoi(v);
        return 0;
    } else {
        return -1;
    }
    free(*dst);
    *dst = dup_n(v, vl);
    return *dst ? 0 : -1;
}

static int parse_query(sluice__redis_url_t *u, const char *q) {
    while (q && *q) {
        const char *amp = strchr(q, '&'), *end = amp ? amp : q + strlen(q);
        const char *eq = memchr(q, '=', (size_t)(end - q));
        if (!eq || query_pair(u, q, (size_t)(eq - q), eq + 1, (size_t)(end - eq - 1)) != 0) return -1;
        q = amp ? amp + 1 : NULL;
    }
    return 0;
}

static int parse_server(sluice__redis_url_t *u, const char *s) {
    const char *q = strchr(s, '?');
    size_t n = q ? (size_t)(q - s) : strlen(s);
    const char *at = memchr(s, '@', n);
    if (at) {
        const char *colon = memchr(s, ':', (size_t)(at - s));
        if (!colon) return -1;
        if (colon > s && !(u->user = dup_n(s, (size_t)(colon - s)))) return -1;
        if (!(u->password = dup_n(colon + 1, (size_t)(at - colon - 1)))) return -1;
        n -= (size_t)(at + 1 - s);
        s = at + 1;
    }
    const char *slash = memchr(s, '/', n);
    size_t hp = slash ? (size_t)(slash - s) : n;
    if (slash) u->db = atoi(slash + 1);
    const char *colon = memchr(s, ':', hp);
    size_t hl = colon ? (size_t)(colon - s) : hp;
    if (hl == 0) return -1;
    u->nodes = calloc(1, sizeof *u->nodes);
    if (!u->nodes) return -1;
    u->n_nodes = 1;
    u->nodes[0].port = colon ? atoi(colon + 1) : 6379;
    if (!(u->nodes[0].host = dup_n(s, hl))) return -1;
    return parse_query(u, q ? q + 1 : NULL);
}

int sluice__redis_url_parse(const char *url, sluice__redis_url_t *out, char *why, size_t why_len) {
    memset(out, 0, sizeof *out);
    int rc = -1;
    if (url && !strncmp(url, "redis://", 8)) {
        out->topology = SLUICE__REDIS_SINGLE;
        rc = parse_server(out, url + 8);
    } else if (url && !strncmp(url, "rediss://", 9)) {
        out->topology = SLUICE__REDIS_SINGLE;
        out->tls.tls = true;
        rc = parse_server(out, url + 9);
    } else if (url && !strncmp(url, "unix://", 7)) {
        out->topology = SLUICE__REDIS_UNIX;
        const char *q = strchr(url + 7, '?');
        size_t n = q ? (size_t)(q - url - 7) : strlen(url + 7);
        out->path = dup_n(url + 7, n);
        rc = out->path && n ? parse_query(out, q ? q + 1 : NULL) : -1;
    }
    if (rc != 0) {
        sluice__redis_url_free(out);
        if (why && why_len) {
            strncpy(why, "malformed Redis URL (temporary parser)", why_len - 1);
            why[why_len - 1] = '\0';
        }
        return SLUICE_ESYNTAX;
    }
    return 0;
}

void sluice__redis_url_free(sluice__redis_url_t *u) {
    if (u->password) memset(u->password, 0, strlen(u->password));
    for (size_t i = 0; i < u->n_nodes; i++) free(u->nodes[i].host);
    free(u->nodes);
    free(u->path);
    free(u->master);
    free(u->user);
    free(u->password);
    free(u->tls.cacert);
    free(u->tls.cert);
    free(u->tls.key);
    free(u->tls.sni);
    memset(u, 0, sizeof *u);
}
