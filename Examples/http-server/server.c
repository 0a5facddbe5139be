/*
 * server.c — a libevent evhttp server that embeds Sluice in its own
 * event_base (Examples/http-server, see README.md beside it).
 *
 *   GET  /api/...             per-client quota (rate: LIMIT per PER, burst):
 *                             200, or 429 with Retry-After. The client is the
 *                             X-API-Key header, or the peer address without it.
 *   POST /docs/{id}/changed   202; bursts per document are coalesced by a
 *                             debounce into one notification line in the log:
 *                             "changed doc=ID coalesced=N last=SEQ"
 *   GET  /stats               counters, one "name value" per line
 *   POST /admin/shutdown      graceful stop (as SIGTERM/SIGINT): every pending
 *                             notification is written (close(drain)), then exit 0.
 *
 * Everything runs on one thread, the loop thread: Sluice's callbacks come on
 * it, and calls made on it report their events before they return.
 *
 * Usage: sluice-http-example [--port N] [--port-file PATH] [--notify-log PATH]
 *                            [--rate LIMIT/PER_MS] [--burst B]
 *                            [--debounce MS] [--maxwait MS]
 * --port 0 (the default) picks a free port; the chosen port is printed as
 * "listening on 127.0.0.1:PORT" and written to --port-file.
 */
#ifndef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L
#endif
#include <event2/buffer.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <event2/util.h>
#include <arpa/inet.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sluice.h>
#include <sluice_loop.h>

/* ------------------------------------------------------------------ coalescing counts per document */

/* A small chained map: document id -> changes since its last notification.
 * Entries live while a notification is pending. */
struct doc {
    struct doc *next;
    uint64_t changes;
    char id[];
};

#define DOC_BUCKETS 1024

struct server {
    struct event_base *base;
    struct evhttp *http;
    struct event *sig_term, *sig_int;
    sluice_loop_t *loop;
    sluice_mt_t *quota;  /* rate, per client */
    sluice_mt_t *notify; /* debounce, per document */
    FILE *log;
    struct doc *docs[DOC_BUCKETS];
    uint64_t seq;
    uint64_t n_ok, n_limited, n_changes, n_notifications, n_errors;
    int64_t rate_per_ns;
    bool stopping;
};

static size_t doc_bucket(const char *id, size_t len) {
    uint64_t h = 1469598103934665603u; /* FNV-1a: ids are not adversarial here, the map is tiny */
    for (size_t i = 0; i < len; i++) h = (h ^ (unsigned char)id[i]) * 1099511628211u;
    return (size_t)(h % DOC_BUCKETS);
}

static struct doc **doc_find(struct server *s, const char *id, size_t len) {
    struct doc **p = &s->docs[doc_bucket(id, len)];
    while (*p && !(strlen((*p)->id) == len && memcmp((*p)->id, id, len) == 0)) p = &(*p)->next;
    return p;
}

/* ------------------------------------------------------------------ Sluice callbacks */

/* The notification limiter's events: an EMIT is one coalesced notification
 * (its token is the sequence number of the last change); a DROP is a change
 * superseded by a later one of the same document (counted, not written). */
static void on_notify(void *user, const sluice_event_t *ev) {
    struct server *s = user;
    const char *id = ev->key.bytes;
    size_t len = ev->key.len;
    struct doc **p = doc_find(s, id, len);
    if (ev->kind == SLUICE_EVENT_DROP) return; /* the entry keeps counting */
    uint64_t changes = *p ? (*p)->changes : 0;
    if (*p) {
        struct doc *d = *p;
        *p = d->next;
        free(d);
    }
    if (ev->kind == SLUICE_EVENT_EMIT) {
        fprintf(s->log, "changed doc=%.*s coalesced=%" PRIu64 " last=%" PRIu64 "\n", (int)len, id, changes,
                ev->token);
        s->n_notifications++;
    } else { /* DISCARD: only at free, after close(drain) there is none */
        fprintf(s->log, "lost doc=%.*s coalesced=%" PRIu64 "\n", (int)len, id, changes);
    }
    fflush(s->log);
}

/* ------------------------------------------------------------------ HTTP */

static void reply(struct evhttp_request *req, int code, const char *reason, const char *body) {
    struct evbuffer *b = evbuffer_new();
    if (b) evbuffer_add_printf(b, "%s", body);
    evhttp_add_header(evhttp_request_get_output_headers(req), "Content-Type", "text/plain");
    evhttp_send_reply(req, code, reason, b);
    if (b) evbuffer_free(b);
}

/* The client: the X-API-Key header, or the peer's address. */
static size_t client_key(struct evhttp_request *req, char *buf, size_t cap) {
    const char *k = evhttp_find_header(evhttp_request_get_input_headers(req), "X-API-Key");
    if (k && *k) {
        snprintf(buf, cap, "key:%s", k);
        return strlen(buf);
    }
    char *addr = NULL;
    ev_uint16_t port = 0;
    evhttp_connection_get_peer(evhttp_request_get_connection(req), &addr, &port);
    snprintf(buf, cap, "addr:%s", addr ? addr : "?");
    return strlen(buf);
}

static void handle_api(struct server *s, struct evhttp_request *req) {
    char key[300];
    size_t len = client_key(req, key, sizeof key);
    sluice_decision_t d;
    int rc = sluice_mt_submit(s->quota, sluice_key_bytes(key, len), 0, &d);
    if (rc != 0) {
        s->n_errors++;
        reply(req, 503, "Service Unavailable", sluice_strerror(rc));
        return;
    }
    if (d.kind == SLUICE_EMITTED) {
        s->n_ok++;
        reply(req, 200, "OK", "ok\n");
        return;
    }
    /* Retry-After: whole seconds until the quota admits a call, at least 1 */
    uint64_t now = sluice_clock_now();
    uint64_t wait = d.at > now ? d.at - now : 0;
    uint64_t secs = wait / 1000000000u + (wait % 1000000000u != 0);
    if (secs == 0) secs = 1;
    char v[32];
    snprintf(v, sizeof v, "%" PRIu64, secs);
    evhttp_add_header(evhttp_request_get_output_headers(req), "Retry-After", v);
    s->n_limited++;
    reply(req, 429, "Too Many Requests", "rate limited\n");
}

static void handle_doc_changed(struct server *s, struct evhttp_request *req, const char *id, size_t len) {
    if (len == 0 || len > 256) {
        reply(req, 400, "Bad Request", "bad document id\n");
        return;
    }
    struct doc **p = doc_find(s, id, len);
    bool fresh = *p == NULL;
    if (fresh) {
        struct doc *d = malloc(sizeof *d + len + 1);
        if (!d) {
            reply(req, 503, "Service Unavailable", "out of memory\n");
            return;
        }
        memcpy(d->id, id, len);
        d->id[len] = 0;
        d->changes = 0;
        d->next = NULL;
        *p = d;
    }
    (*p)->changes++;
    uint64_t seq = ++s->seq;
    int rc = sluice_mt_submit(s->notify, sluice_key_bytes(id, len), seq, NULL);
    if (rc != 0) {
        /* not taken: undo the count */
        p = doc_find(s, id, len);
        if (*p && --(*p)->changes == 0 && fresh) {
            struct doc *d = *p;
            *p = d->next;
            free(d);
        }
        s->n_errors++;
        reply(req, 503, "Service Unavailable", sluice_strerror(rc));
        return;
    }
    s->n_changes++;
    reply(req, 202, "Accepted", "queued\n");
}

static void shutdown_now(struct server *s) {
    if (s->stopping) return;
    s->stopping = true;
    /* Nothing lost: every pending notification is emitted now (on this, the
     * loop thread, so it is written before close returns). */
    sluice_mt_close(s->notify, SLUICE_CLOSE_DRAIN);
    sluice_mt_close(s->quota, SLUICE_CLOSE_DISCARD);
    struct timeval soon = { 0, 50000 }; /* let the last replies go out */
    event_base_loopexit(s->base, &soon);
}

static void handle_stats(struct server *s, struct evhttp_request *req) {
    sluice_mt_stats_t q, n;
    sluice_mt_stats(s->quota, &q);
    sluice_mt_stats(s->notify, &n);
    char body[512];
    snprintf(body, sizeof body,
             "ok %" PRIu64 "\nlimited %" PRIu64 "\nchanges %" PRIu64 "\nnotifications %" PRIu64
             "\npending %" PRIu64 "\nquota_keys %" PRIu64 "\nerrors %" PRIu64 "\n",
             s->n_ok, s->n_limited, s->n_changes, s->n_notifications, n.core.pending, q.core.live_keys,
             s->n_errors);
    reply(req, 200, "OK", body);
}

static void on_request(struct evhttp_request *req, void *arg) {
    struct server *s = arg;
    const char *uri = evhttp_request_get_uri(req);
    enum evhttp_cmd_type cmd = evhttp_request_get_command(req);
    struct evhttp_uri *u = evhttp_uri_parse(uri);
    const char *path = u ? evhttp_uri_get_path(u) : NULL;
    if (!path) path = "/";
    if (s->stopping) {
        reply(req, 503, "Service Unavailable", "shutting down\n");
    } else if (strncmp(path, "/api/", 5) == 0 && cmd == EVHTTP_REQ_GET) {
        handle_api(s, req);
    } else if (strncmp(path, "/docs/", 6) == 0 && cmd == EVHTTP_REQ_POST) {
        const char *id = path + 6, *slash = strchr(id, '/');
        if (slash && strcmp(slash, "/changed") == 0)
            handle_doc_changed(s, req, id, (size_t)(slash - id));
        else
            reply(req, 404, "Not Found", "not found\n");
    } else if (strcmp(path, "/stats") == 0 && cmd == EVHTTP_REQ_GET) {
        handle_stats(s, req);
    } else if (strcmp(path, "/admin/shutdown") == 0 && cmd == EVHTTP_REQ_POST) {
        reply(req, 200, "OK", "bye\n");
        shutdown_now(s);
    } else {
        reply(req, 404, "Not Found", "not found\n");
    }
    if (u) evhttp_uri_free(u);
}

static void on_signal(evutil_socket_t sig, short what, void *arg) {
    (void)sig;
    (void)what;
    shutdown_now(arg);
}

/* ------------------------------------------------------------------ main */

static int usage(void) {
    fprintf(stderr, "usage: sluice-http-example [--port N] [--port-file PATH] [--notify-log PATH]\n"
                    "                           [--rate LIMIT/PER_MS] [--burst B] [--debounce MS] [--maxwait MS]\n");
    return 64;
}

int main(int argc, char **argv) {
    int port = 0;
    const char *port_file = NULL, *log_path = NULL;
    unsigned long long limit = 10, per_ms = 1000, burst = 0, debounce_ms = 500;
    long long maxwait_ms = -1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!v) return usage();
        if (strcmp(a, "--port") == 0) port = atoi(v);
        else if (strcmp(a, "--port-file") == 0) port_file = v;
        else if (strcmp(a, "--notify-log") == 0) log_path = v;
        else if (strcmp(a, "--rate") == 0) {
            if (sscanf(v, "%llu/%llu", &limit, &per_ms) != 2) return usage();
        } else if (strcmp(a, "--burst") == 0) burst = strtoull(v, NULL, 10);
        else if (strcmp(a, "--debounce") == 0) debounce_ms = strtoull(v, NULL, 10);
        else if (strcmp(a, "--maxwait") == 0) maxwait_ms = atoll(v);
        else return usage();
        i++;
    }

    static struct server s; /* zeroed */
    s.log = log_path ? fopen(log_path, "a") : stdout;
    if (!s.log) {
        perror(log_path);
        return 1;
    }
    /* A base with precise timers: libevent's default coarse clock would make
     * every deadline up to ~4 ms late. Only this thread calls Sluice here, so
     * sluice_threads_init() is not needed; it is harmless and future-proof. */
    sluice_threads_init();
    struct event_config *ec = event_config_new();
    event_config_set_flag(ec, EVENT_BASE_FLAG_PRECISE_TIMER);
    s.base = event_base_new_with_config(ec);
    event_config_free(ec);
    if (!s.base || sluice_loop_attach(&s.loop, s.base, NULL) != 0) {
        fprintf(stderr, "cannot create the event loop\n");
        return 1;
    }

    sluice_config_t qc;
    memset(&qc, 0, sizeof qc);
    qc.policy = sluice_rate(limit, (int64_t)per_ms * 1000000, burst);
    qc.max_keys = 1000000; /* a cap: a flood of fresh client keys cannot take all memory */
    sluice_config_t nc;
    memset(&nc, 0, sizeof nc);
    nc.policy = sluice_debounce((int64_t)debounce_ms * 1000000, false, true,
                                maxwait_ms >= 0 ? (int64_t)maxwait_ms * 1000000 : -1);
    nc.on_event = on_notify;
    nc.user = &s;
    int rc = sluice_mt_new(&s.quota, s.loop, &qc, 0);
    if (rc == 0) rc = sluice_mt_new(&s.notify, s.loop, &nc, 0);
    if (rc != 0) {
        fprintf(stderr, "bad limiter configuration: %s\n", sluice_strerror(rc));
        return 1;
    }

    s.http = evhttp_new(s.base);
    struct evhttp_bound_socket *bound = s.http ? evhttp_bind_socket_with_handle(s.http, "127.0.0.1", (ev_uint16_t)port) : NULL;
    if (!bound) {
        fprintf(stderr, "cannot listen on 127.0.0.1:%d\n", port);
        return 1;
    }
    evhttp_set_gencb(s.http, on_request, &s);
    evhttp_set_allowed_methods(s.http, EVHTTP_REQ_GET | EVHTTP_REQ_POST);

    struct sockaddr_storage ss;
    ev_socklen_t sl = sizeof ss;
    getsockname(evhttp_bound_socket_get_fd(bound), (struct sockaddr *)&ss, &sl);
    int actual = ntohs(((struct sockaddr_in *)&ss)->sin_port);
    if (port_file) {
        char tmp[4096];
        snprintf(tmp, sizeof tmp, "%s.tmp", port_file);
        FILE *pf = fopen(tmp, "w");
        if (!pf || fprintf(pf, "%d\n", actual) < 0 || fclose(pf) != 0 || rename(tmp, port_file) != 0) {
            perror(port_file);
            return 1;
        }
    }
    printf("listening on 127.0.0.1:%d\n", actual);
    fflush(stdout);

    s.sig_term = evsignal_new(s.base, SIGTERM, on_signal, &s);
    s.sig_int = evsignal_new(s.base, SIGINT, on_signal, &s);
    evsignal_add(s.sig_term, NULL);
    evsignal_add(s.sig_int, NULL);

    event_base_dispatch(s.base);

    /* after close(drain) nothing is pending: the frees report nothing */
    evhttp_free(s.http);
    sluice_mt_free(s.notify);
    sluice_mt_free(s.quota);
    sluice_loop_free(s.loop);
    event_free(s.sig_term);
    event_free(s.sig_int);
    event_base_free(s.base);
    for (size_t i = 0; i < DOC_BUCKETS; i++)
        for (struct doc *d = s.docs[i], *n; d; d = n) {
            n = d->next;
            free(d);
        }
    fprintf(stderr, "stopped: %" PRIu64 " ok, %" PRIu64 " limited, %" PRIu64 " changes, %" PRIu64
                    " notifications\n", s.n_ok, s.n_limited, s.n_changes, s.n_notifications);
    if (s.log != stdout) fclose(s.log);
    return 0;
}
