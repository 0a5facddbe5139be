/*
 * server.c — a libevent evhttp server that embeds Sluice in its own
 * event_base (Examples/http-server, see README.md beside it).
 *
 *   GET  /api/...             per-client quota (rate: LIMIT per PER, burst):
 *                             200, or 429 with Retry-After. Every answer
 *                             carries RateLimit-Policy and RateLimit. The
 *                             client is the X-API-Key header (any bytes but
 *                             NUL, up to SLUICE_KEY_MAX), or the peer address.
 *   POST /api/upload          the same quota, weighted: the call costs one
 *                             unit per started --upload-unit bytes of body.
 *   POST /docs/{id}/changed   202 "queued doc=ID seq=N"; bursts per document
 *                             are coalesced by a debounce into one line of the
 *                             notification log:
 *                             "changed doc=ID coalesced=N first=SEQ last=SEQ"
 *   GET  /stats               counters, one "name value" per line, O(1)
 *   POST /admin/shutdown      graceful stop (as SIGTERM/SIGINT): every pending
 *                             notification is written (close(drain)), then exit.
 * /stats and /admin/shutdown exist only with --admin-token, and want the
 * header "X-Admin-Token: TOKEN".
 *
 * Everything runs on one thread, the loop thread: Sluice's callbacks come on
 * it, and calls made on it report their events before they return.
 *
 * What a server copied from this one keeps (each has a test in
 * test_http_server.sh):
 *  - SIGPIPE is ignored: a client that closes before reading its replies
 *    costs a failed write, not the process and its pending notifications.
 *  - The coalesced count travels with the token: the token handed to the
 *    debounce is a small record of its burst; when a newer change supersedes
 *    it, the record's count moves to the newer one; the emission writes the
 *    count of exactly the changes it stands for, whatever fires when.
 *  - Keys are exact: the whole header value, of any length up to
 *    SLUICE_KEY_MAX (longer: 431); a request head with a NUL byte is refused
 *    with 400 (evhttp hands header values over as C strings, so a NUL would
 *    cut a key short and merge two clients).
 *  - Nothing is lost silently: --debounce 0 writes every change at once (the
 *    EMITTED decision is handled); a failed write of the notification log is
 *    reported on stderr, later changes get 503, and the exit status is 1.
 *  - HTTP limits: idle/read/write timeout (--timeout), a deadline for a whole
 *    request to arrive (--request-timeout, against slowloris clients),
 *    header and body size limits, and accept back-off: when accept() fails
 *    for lack of file descriptors the listener pauses for 100 ms instead of
 *    spinning.
 *  - At the quota table's cap (--max-keys) a new client is refused (503,
 *    the default) or admitted untracked (--at-cap admit): see docs/loop.md.
 *
 * Usage: sluice-http-example [--port N] [--port-file PATH] [--notify-log PATH]
 *            [--rate LIMIT/PER_MS] [--burst B] [--debounce MS] [--maxwait MS]
 *            [--max-keys N] [--at-cap refuse|admit] [--admin-token TOKEN]
 *            [--timeout S] [--request-timeout S] [--max-header-bytes N]
 *            [--max-body-bytes N] [--upload-unit BYTES]
 * --port 0 (the default) picks a free port; the chosen port is printed as
 * "listening on 127.0.0.1:PORT" and written to --port-file.
 */
#ifndef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L
#endif
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <event2/listener.h>
#include <event2/util.h>
#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>

#include <sluice.h>
#include <sluice_loop.h>

/* ------------------------------------------------------------------ server state */

enum at_cap { AT_CAP_REFUSE, AT_CAP_ADMIT };

struct conn;

struct server {
    struct event_base *base;
    struct evhttp *http;
    struct evconnlistener *listener;
    struct event *sig_term, *sig_int, *accept_resume;
    sluice_loop_t *loop;
    sluice_mt_t *quota;  /* rate, per client */
    sluice_mt_t *notify; /* debounce, per document */
    FILE *log;
    const char *log_name;
    const char *admin_token;
    enum at_cap at_cap;
    uint64_t limit, per_ms, upload_unit;
    int request_timeout_s;
    struct conn *guards; /* the connection guards, indexed by socket */
    size_t nguards;
    struct event *guard_sweep;
    uint64_t seq;
    uint64_t n_ok, n_limited, n_untracked, n_refused_full, n_changes, n_notifications, n_log_failed, n_lost, n_errors,
        n_bad_requests, n_request_timeouts, n_accept_pauses;
    bool log_broken;                                 /* a write of the notification log failed */
    uint64_t accept_logged_at, accept_pauses_logged; /* accept back-off: one line per 10 s at most */
    bool stopping;
};

/* The one server of this process, for callbacks whose argument is not ours
 * (the input buffer callback gets the bufferevent; the listener's error
 * callback gets evhttp's argument). */
static struct server *the_server;

/* ------------------------------------------------------------------ notifications */

/* The token handed to the debounce for one change: the record of the burst
 * it stands for. When a newer change supersedes it (a DROP whose successor
 * is the newer token) its count moves into the successor's record, so the
 * emission writes the count of exactly the changes it replaces, even when a
 * deadline fires inside a submit ("timers first") or at close(drain). */
struct burst {
    uint64_t count, first, last;
};

static void log_failed(struct server *s) {
    if (!s->log_broken)
        fprintf(stderr, "notification log %s: write failed: %s; further changes are refused\n", s->log_name,
                strerror(errno));
    s->log_broken = true;
}

static void write_notification(struct server *s, const char *id, size_t len, const struct burst *b) {
    errno = 0;
    if (fprintf(s->log, "changed doc=%.*s coalesced=%" PRIu64 " first=%" PRIu64 " last=%" PRIu64 "\n", (int)len, id,
                b->count, b->first, b->last) < 0 ||
        fflush(s->log) != 0) {
        s->n_log_failed++;
        log_failed(s);
        return;
    }
    s->n_notifications++;
}

/* The notification limiter's events. */
static void on_notify(void *user, const sluice_event_t *ev) {
    struct server *s = user;
    struct burst *b = (struct burst *)(uintptr_t)ev->token;
    if (ev->kind == SLUICE_EVENT_DROP && ev->has_successor) {
        struct burst *next = (struct burst *)(uintptr_t)ev->successor;
        next->count += b->count;
        if (b->first < next->first) next->first = b->first;
    } else if (ev->kind == SLUICE_EVENT_EMIT) {
        write_notification(s, ev->key.bytes, ev->key.len, b);
    } else { /* a DISCARD (only at free, after close(drain) there is none) or a cancel */
        fprintf(stderr, "lost doc=%.*s coalesced=%" PRIu64 "\n", (int)ev->key.len, (const char *)ev->key.bytes,
                b->count);
        s->n_lost += b->count;
    }
    free(b);
}

/* ------------------------------------------------------------------ connection guard */

/* evhttp reads each client socket through a bufferevent this server creates
 * (evhttp_set_bevcb). A callback on its input buffer sees every byte as it
 * arrives and follows the request framing, to do what evhttp cannot:
 *  - a deadline for a whole request (--request-timeout): a slowloris client
 *    that sends a byte now and then keeps resetting evhttp's inactivity
 *    timeout, but not this one (a sweep every 250 ms shuts such sockets down);
 *  - NUL bytes in request heads: evhttp's header values are C strings, so
 *    "key\0a" and "key\0b" would both read as "key"; such a request is
 *    refused with 400.
 * The framing followed is the simple one: a head, then Content-Length bytes
 * of body. A request it cannot follow (Transfer-Encoding, a body on a method
 * that has none, a bad Content-Length) is refused and its connection closed,
 * so the guard never mistakes which head belongs to which request.
 * Guards live in a table indexed by socket, without allocation per
 * connection; a guard is bound to its connection by the bufferevent and the
 * peer's port, checked before it is used. */
#define GUARD_BAD_MAX 8

struct conn {
    struct bufferevent *bev; /* the connection this guard belongs to */
    uint16_t peer_port;
    bool live;
    enum { G_HEAD, G_BODY, G_LOST } state;
    bool in_request, first_line, head_nul, head_bad, method_body, has_length;
    uint64_t started; /* when the current request's first byte came */
    uint64_t body_left, length;
    char line[40]; /* the start of the current line (header names of interest are short) */
    size_t line_len;
    uint64_t heads;              /* request heads seen */
    uint64_t handled;            /* requests handed to on_request */
    uint64_t lost_at;            /* index of the first head that could not be followed, when G_LOST */
    uint64_t bad[GUARD_BAD_MAX]; /* indices of heads with a NUL byte, ascending */
    unsigned nbad;
};

static uint16_t peer_port(evutil_socket_t fd) {
    struct sockaddr_storage ss;
    socklen_t len = sizeof ss;
    if (getpeername(fd, (struct sockaddr *)&ss, &len) != 0) return 0;
    if (ss.ss_family == AF_INET) return ntohs(((struct sockaddr_in *)&ss)->sin_port);
    if (ss.ss_family == AF_INET6) return ntohs(((struct sockaddr_in6 *)&ss)->sin6_port);
    return 0;
}

static struct conn *guard_slot(struct server *s, evutil_socket_t fd) {
    if (fd < 0) return NULL;
    if ((size_t)fd >= s->nguards) {
        size_t cap = s->nguards ? s->nguards : 256;
        while (cap <= (size_t)fd) cap *= 2;
        struct conn *t = realloc(s->guards, cap * sizeof *t);
        if (!t) return NULL;
        memset(t + s->nguards, 0, (cap - s->nguards) * sizeof *t);
        s->guards = t;
        s->nguards = cap;
    }
    return &s->guards[fd];
}

/* The guard of a request's connection, or NULL when there is none. */
static struct conn *guard_of(struct server *s, struct evhttp_request *req) {
    struct evhttp_connection *evcon = evhttp_request_get_connection(req);
    struct bufferevent *bev = evcon ? evhttp_connection_get_bufferevent(evcon) : NULL;
    evutil_socket_t fd = bev ? bufferevent_getfd(bev) : -1;
    if (fd < 0 || (size_t)fd >= s->nguards) return NULL;
    struct conn *c = &s->guards[fd];
    return c->live && c->bev == bev ? c : NULL;
}

static void guard_request_done(struct conn *c) { c->in_request = false; }

static void guard_lose(struct conn *c, uint64_t index) {
    c->lost_at = index;
    c->state = G_LOST;
}

/* One complete line of a request head (len counts every byte, without the LF). */
static void guard_line(struct conn *c, size_t len) {
    size_t n = len < sizeof c->line ? len : sizeof c->line;
    if (n > 0 && len <= sizeof c->line && c->line[n - 1] == '\r') n--;
    if (c->first_line) {
        c->first_line = false;
        c->method_body = (n >= 5 && memcmp(c->line, "POST ", 5) == 0) || (n >= 4 && memcmp(c->line, "PUT ", 4) == 0) ||
                         (n >= 6 && memcmp(c->line, "PATCH ", 6) == 0);
        return;
    }
    if (n >= 18 && strncasecmp(c->line, "transfer-encoding:", 18) == 0) {
        c->head_bad = true;
    } else if (n >= 15 && strncasecmp(c->line, "content-length:", 15) == 0) {
        if (len > sizeof c->line) { /* a value longer than any valid length */
            c->head_bad = true;
            return;
        }
        size_t i = 15;
        while (i < n && (c->line[i] == ' ' || c->line[i] == '\t')) i++;
        uint64_t v = 0;
        size_t digits = 0;
        while (i < n && c->line[i] >= '0' && c->line[i] <= '9' && digits < 18) {
            v = v * 10 + (uint64_t)(c->line[i++] - '0');
            digits++;
        }
        while (i < n && (c->line[i] == ' ' || c->line[i] == '\t')) i++;
        if (digits == 0 || i != n || (c->has_length && c->length != v)) c->head_bad = true;
        c->has_length = true;
        c->length = v;
    }
}

static void guard_head_end(struct conn *c) {
    uint64_t index = c->heads++;
    if (c->head_bad || (c->has_length && c->length > 0 && !c->method_body) ||
        (c->head_nul && c->nbad == GUARD_BAD_MAX)) {
        guard_lose(c, index); /* cannot tell where this request ends: refused, connection closed */
        return;
    }
    if (c->head_nul) c->bad[c->nbad++] = index;
    if (c->has_length && c->length > 0) {
        c->state = G_BODY;
        c->body_left = c->length;
    } else {
        guard_request_done(c);
    }
}

static void guard_scan(struct conn *c, const unsigned char *p, size_t n) {
    size_t i = 0;
    while (i < n && c->state != G_LOST) {
        if (c->state == G_BODY) {
            size_t take = n - i < c->body_left ? n - i : (size_t)c->body_left;
            c->body_left -= take;
            i += take;
            if (c->body_left == 0) {
                c->state = G_HEAD;
                guard_request_done(c);
            }
            continue;
        }
        if (!c->in_request) { /* the first byte of a request: its deadline starts */
            c->in_request = true;
            c->started = sluice_clock_now();
            c->first_line = true;
            c->head_nul = c->head_bad = c->has_length = false;
            c->line_len = 0;
            c->length = 0;
        }
        unsigned char b = p[i++];
        if (b == '\n') {
            size_t len = c->line_len;
            if (len > 0 && len <= sizeof c->line && c->line[len - 1] == '\r') len--;
            if (len == 0 && !c->first_line)
                guard_head_end(c);
            else if (len > 0)
                guard_line(c, c->line_len);
            /* empty lines before a request line: evhttp refuses those requests */
            c->line_len = 0;
            continue;
        }
        if (b == 0) c->head_nul = true;
        if (c->line_len < sizeof c->line) c->line[c->line_len] = (char)b;
        c->line_len++;
    }
}

/* Called by libevent whenever the connection's input buffer changes; bytes
 * added by a read are at its end. */
static void guard_input(struct evbuffer *buf, const struct evbuffer_cb_info *info, void *arg) {
    struct bufferevent *bev = arg;
    if (info->n_added == 0) return;
    struct server *s = the_server;
    evutil_socket_t fd = bufferevent_getfd(bev);
    struct conn *c = guard_slot(s, fd);
    if (!c) return; /* no memory for the table: on_request refuses the request */
    uint16_t port = peer_port(fd);
    if (!c->live || c->bev != bev || c->peer_port != port) { /* a new connection on this socket */
        memset(c, 0, sizeof *c);
        c->live = true;
        c->bev = bev;
        c->peer_port = port;
    }
    struct evbuffer_ptr pos;
    if (evbuffer_ptr_set(buf, &pos, info->orig_size - info->n_deleted, EVBUFFER_PTR_SET) != 0) return;
    struct evbuffer_iovec v[16];
    size_t left = info->n_added;
    while (left > 0) {
        int k = evbuffer_peek(buf, (ev_ssize_t)left, &pos, v, 16);
        if (k <= 0) break;
        size_t done = 0;
        for (int j = 0; j < k && j < 16 && done < left; j++) {
            size_t len = v[j].iov_len < left - done ? v[j].iov_len : left - done;
            guard_scan(c, v[j].iov_base, len);
            done += len;
        }
        left -= done;
        if (left > 0 && evbuffer_ptr_set(buf, &pos, done, EVBUFFER_PTR_ADD) != 0) break;
    }
}

/* Every 250 ms: a request that has not fully arrived within
 * --request-timeout has its socket shut down (evhttp then sees the end of
 * the stream and frees the connection itself). */
static void on_guard_sweep(evutil_socket_t unused, short what, void *arg) {
    (void)unused;
    (void)what;
    struct server *s = arg;
    uint64_t now = sluice_clock_now(), limit = (uint64_t)s->request_timeout_s * 1000000000u;
    for (size_t fd = 0; fd < s->nguards; fd++) {
        struct conn *c = &s->guards[fd];
        if (!c->live || !c->in_request || now - c->started < limit) continue;
        c->live = false;
        if (peer_port((evutil_socket_t)fd) != c->peer_port) continue; /* closed meanwhile */
        s->n_request_timeouts++;
        shutdown((int)fd, SHUT_RDWR);
    }
}

static struct bufferevent *on_new_connection(struct event_base *base, void *arg) {
    (void)arg;
    struct bufferevent *bev = bufferevent_socket_new(base, -1, BEV_OPT_CLOSE_ON_FREE);
    if (bev && !evbuffer_add_cb(bufferevent_get_input(bev), guard_input, bev)) {
        bufferevent_free(bev);
        return NULL; /* evhttp makes a plain one: on_request refuses its requests */
    }
    return bev;
}

/* Accept back-off: out of file descriptors (or memory), accept() fails at
 * once every time the listening socket is polled; without this, the loop
 * spins at 100% CPU. The listener pauses for 100 ms instead. */
static void on_accept_resume(evutil_socket_t fd, short what, void *arg) {
    (void)fd;
    (void)what;
    struct server *s = arg;
    if (!s->stopping) evconnlistener_enable(s->listener);
}

static void on_accept_error(struct evconnlistener *lev, void *unused) {
    (void)unused;
    struct server *s = the_server;
    int err = EVUTIL_SOCKET_ERROR();
    if (err != EMFILE && err != ENFILE && err != ENOBUFS && err != ENOMEM) return; /* per-connection errors */
    evconnlistener_disable(lev);
    s->n_accept_pauses++;
    uint64_t now = sluice_clock_now();
    if (s->accept_logged_at == 0 || now - s->accept_logged_at >= UINT64_C(10000000000)) {
        fprintf(stderr, "accept: %s; new connections wait (pauses of 100 ms, %" PRIu64 " so far)\n", strerror(err),
                s->n_accept_pauses);
        s->accept_logged_at = now;
    }
    struct timeval tv = { 0, 100000 };
    evtimer_add(s->accept_resume, &tv);
}

/* ------------------------------------------------------------------ HTTP */

static void reply(struct evhttp_request *req, int code, const char *reason, const char *body) {
    struct evbuffer *b = evbuffer_new();
    if (b) evbuffer_add_printf(b, "%s", body);
    evhttp_add_header(evhttp_request_get_output_headers(req), "Content-Type", "text/plain");
    evhttp_send_reply(req, code, reason, b);
    if (b) evbuffer_free(b);
}

static void reply_close(struct evhttp_request *req, int code, const char *reason, const char *body) {
    evhttp_add_header(evhttp_request_get_output_headers(req), "Connection", "close");
    reply(req, code, reason, body);
}

/* Whole seconds from now until t, rounded up. */
static uint64_t secs_until(uint64_t t, uint64_t now) {
    uint64_t d = t > now ? t - now : 0;
    return d / 1000000000u + (d % 1000000000u != 0);
}

/* RateLimit-Policy, RateLimit (draft-ietf-httpapi-ratelimit-headers, structured fields). */
static void add_ratelimit(struct evhttp_request *req, const char *name, const char *fmt, uint64_t a, uint64_t b) {
    char v[96];
    snprintf(v, sizeof v, fmt, a, b);
    evhttp_add_header(evhttp_request_get_output_headers(req), name, v);
}

static void add_retry_after(struct evhttp_request *req, uint64_t secs) {
    char v[32];
    snprintf(v, sizeof v, "%" PRIu64, secs ? secs : 1);
    evhttp_add_header(evhttp_request_get_output_headers(req), "Retry-After", v);
}

/* The quota, for GET /api/... (cost 1) and POST /api/upload (weighted). */
static void handle_api(struct server *s, struct evhttp_request *req, uint64_t cost) {
    struct evkeyvalq *in = evhttp_request_get_input_headers(req);
    const char *k = evhttp_find_header(in, "X-API-Key");
    sluice_key_t key;
    if (k) {
        size_t len = strlen(k);
        if (len == 0) {
            reply(req, 400, "Bad Request", "empty X-API-Key\n");
            return;
        }
        if (len > SLUICE_KEY_MAX) {
            reply(req, 431, "Request Header Fields Too Large", "X-API-Key longer than 1024 bytes\n");
            return;
        }
        key = sluice_key_bytes(k, len); /* the whole value: exact, whatever its length */
    } else {
        /* Without a key, the peer address, as an integer key (never equal to
         * a byte key): an IPv4 address, or the /64 of an IPv6 one. */
        char *addr = NULL;
        ev_uint16_t port = 0;
        evhttp_connection_get_peer(evhttp_request_get_connection(req), &addr, &port);
        struct in_addr a4;
        struct in6_addr a6;
        uint64_t id = 0;
        if (addr && inet_pton(AF_INET, addr, &a4) == 1) {
            id = (UINT64_C(1) << 32) | ntohl(a4.s_addr);
        } else if (addr && inet_pton(AF_INET6, addr, &a6) == 1) {
            for (int i = 0; i < 8; i++) id = id << 8 | a6.s6_addr[i];
            id |= UINT64_C(1) << 63;
        }
        key = sluice_key_u64(id);
    }
    add_ratelimit(req, "RateLimit-Policy", "\"default\";q=%" PRIu64 ";w=%" PRIu64, s->limit, (s->per_ms + 999) / 1000);
    sluice_mt_submit_options_t opts = { .cost = cost };
    sluice_decision_t d;
    int rc = sluice_mt_submit_with_options(s->quota, key, 0, &opts, &d);
    uint64_t now = d.now; /* the time of the decision: headers are relative to it */
    if (rc == SLUICE_EFULL) {
        if (s->at_cap == AT_CAP_ADMIT) { /* fail open: served, not counted against any quota */
            s->n_untracked++;
            reply(req, 200, "OK", "ok (untracked)\n");
        } else { /* fail closed: a new client waits until keys go idle (at most one period) */
            s->n_refused_full++;
            add_retry_after(req, (s->per_ms + 999) / 1000);
            reply(req, 503, "Service Unavailable", "too many clients\n");
        }
        return;
    }
    if (rc != 0) {
        s->n_errors++;
        reply(req, 503, "Service Unavailable", sluice_strerror(rc));
        return;
    }
    if (d.kind == SLUICE_EMITTED) {
        s->n_ok++;
        add_ratelimit(req, "RateLimit", "\"default\";r=%" PRIu64 ";t=%" PRIu64, d.remaining, secs_until(d.full, d.at));
        char body[64];
        snprintf(body, sizeof body, "ok at=%" PRIu64 "\n", d.at);
        reply(req, 200, "OK", body);
        return;
    }
    s->n_limited++;
    /* A refused call changed nothing: what remains is 0 for a call of cost 1;
     * for a weighted call the key may still have units (a smaller call passes). */
    sluice_quota_t q;
    uint64_t remaining = 0;
    if (cost > 1 && sluice_mt_quota(s->quota, key, NULL, &q) == 0) remaining = q.remaining;
    add_ratelimit(req, "RateLimit", "\"default\";r=%" PRIu64 ";t=%" PRIu64, remaining, secs_until(d.full, now));
    if (d.at == SLUICE_NEVER) { /* a cost above the burst: never admitted */
        reply(req, 413, "Payload Too Large", "cost above the quota's burst\n");
        return;
    }
    uint64_t retry = secs_until(d.at, now);
    add_retry_after(req, retry);
    reply(req, 429, "Too Many Requests", "rate limited\n");
}

static void handle_doc_changed(struct server *s, struct evhttp_request *req, const char *id, size_t len) {
    if (len == 0 || len > 256) {
        reply(req, 400, "Bad Request", "bad document id\n");
        return;
    }
    if (s->log_broken) { /* accepting a change that cannot be written would lose it silently */
        reply(req, 503, "Service Unavailable", "notification log unavailable\n");
        return;
    }
    struct burst *b = malloc(sizeof *b);
    if (!b) {
        reply(req, 503, "Service Unavailable", "out of memory\n");
        return;
    }
    uint64_t seq = ++s->seq;
    b->count = 1;
    b->first = b->last = seq;
    sluice_decision_t d;
    int rc = sluice_mt_submit(s->notify, sluice_key_bytes(id, len), (uint64_t)(uintptr_t)b, &d);
    if (rc != 0) { /* not taken: the record is ours again */
        free(b);
        s->n_errors++;
        reply(req, 503, "Service Unavailable", sluice_strerror(rc));
        return;
    }
    if (d.kind == SLUICE_EMITTED) { /* --debounce 0, or a leading edge: written now */
        write_notification(s, id, len, b);
        free(b);
    } else if (d.kind == SLUICE_DROPPED) { /* not with this policy; counted, never silent */
        free(b);
        s->n_errors++;
        reply(req, 503, "Service Unavailable", "change dropped\n");
        return;
    }
    s->n_changes++;
    char body[320];
    snprintf(body, sizeof body, "queued doc=%.*s seq=%" PRIu64 "\n", (int)len, id, seq);
    reply(req, 202, "Accepted", body);
}

static void shutdown_now(struct server *s) {
    if (s->stopping) return;
    s->stopping = true;
    /* Nothing lost: every pending notification is emitted now (on this, the
     * loop thread, so it is written before close returns). */
    int rc = sluice_mt_close(s->notify, SLUICE_CLOSE_DRAIN);
    if (rc != 0) /* then sluice_mt_free() discards what is pending: reported as lost, exit status 1 */
        fprintf(stderr, "close(drain) of the notifications failed: %s\n", sluice_strerror(rc));
    sluice_mt_close(s->quota, SLUICE_CLOSE_DISCARD);
    evconnlistener_disable(s->listener);
    struct timeval soon = { 0, 50000 }; /* let the last replies go out */
    event_base_loopexit(s->base, &soon);
}

static bool admin_ok(struct server *s, struct evhttp_request *req) {
    if (!s->admin_token) {
        reply(req, 404, "Not Found", "not found\n");
        return false;
    }
    const char *t = evhttp_find_header(evhttp_request_get_input_headers(req), "X-Admin-Token");
    size_t n = strlen(s->admin_token);
    unsigned char diff = t ? (unsigned char)(strlen(t) != n) : 1;
    for (size_t i = 0; t && i < n && t[i]; i++) diff |= (unsigned char)(t[i] ^ s->admin_token[i]);
    if (diff) {
        reply(req, 403, "Forbidden", "admin token required\n");
        return false;
    }
    return true;
}

/* The limiters' counters (sluice_mt_stats: O(shards), no walk over keys)
 * and the server's own. */
static void handle_stats(struct server *s, struct evhttp_request *req) {
    sluice_mt_stats_t q, n;
    sluice_mt_stats(s->quota, &q);
    sluice_mt_stats(s->notify, &n);
    char body[1536];
    snprintf(body, sizeof body,
             "ok %" PRIu64 "\nlimited %" PRIu64 "\nuntracked %" PRIu64 "\nrefused_full %" PRIu64 "\nchanges %" PRIu64
             "\nnotifications %" PRIu64 "\nnotifications_failed %" PRIu64 "\nerrors %" PRIu64 "\nbad_requests %" PRIu64
             "\nrequest_timeouts %" PRIu64 "\naccept_pauses %" PRIu64 "\n"
             "quota_admitted %" PRIu64 "\nquota_dropped %" PRIu64 "\nquota_keys %" PRIu64
             "\nquota_full_refusals %" PRIu64 "\nquota_memory_bytes %" PRIu64 "\n"
             "notify_scheduled %" PRIu64 "\nnotify_emitted_later %" PRIu64 "\nnotify_admitted %" PRIu64
             "\nnotify_dropped %" PRIu64 "\nnotify_discarded %" PRIu64 "\nnotify_pending %" PRIu64
             "\nnotify_memory_bytes %" PRIu64 "\n",
             s->n_ok, s->n_limited, s->n_untracked, s->n_refused_full, s->n_changes, s->n_notifications,
             s->n_log_failed, s->n_errors, s->n_bad_requests, s->n_request_timeouts, s->n_accept_pauses,
             q.core.admitted, q.core.dropped, q.core.live_keys, q.core.full_refusals, q.core.memory_bytes,
             n.core.scheduled, n.core.emitted_later, n.core.admitted, n.core.dropped, n.core.discarded, n.core.pending,
             n.core.memory_bytes);
    reply(req, 200, "OK", body);
}

static void on_request(struct evhttp_request *req, void *arg) {
    struct server *s = arg;
    struct conn *c = guard_of(s, req);
    uint64_t index = c ? c->handled++ : 0;
    if (!c) {
        s->n_bad_requests++;
        reply_close(req, 503, "Service Unavailable", "connection not guarded\n");
        return;
    }
    if (c->state == G_LOST && index >= c->lost_at) {
        s->n_bad_requests++;
        reply_close(req, 400, "Bad Request",
                    "request framing not accepted (Transfer-Encoding, or a body without a method that takes one)\n");
        return;
    }
    if (c->nbad > 0 && c->bad[0] == index) {
        memmove(c->bad, c->bad + 1, (c->nbad - 1) * sizeof c->bad[0]);
        c->nbad--;
        s->n_bad_requests++;
        reply_close(req, 400, "Bad Request", "NUL byte in the request head\n");
        return;
    }
    const char *uri = evhttp_request_get_uri(req);
    enum evhttp_cmd_type cmd = evhttp_request_get_command(req);
    struct evhttp_uri *u = evhttp_uri_parse(uri);
    const char *path = u ? evhttp_uri_get_path(u) : NULL;
    if (!path) path = "/";
    if (s->stopping) {
        reply(req, 503, "Service Unavailable", "shutting down\n");
    } else if (strcmp(path, "/api/upload") == 0 && cmd == EVHTTP_REQ_POST) {
        uint64_t bytes = evbuffer_get_length(evhttp_request_get_input_buffer(req));
        uint64_t cost = bytes / s->upload_unit + (bytes % s->upload_unit != 0);
        handle_api(s, req, cost ? cost : 1);
    } else if (strncmp(path, "/api/", 5) == 0 && cmd == EVHTTP_REQ_GET) {
        handle_api(s, req, 1);
    } else if (strncmp(path, "/docs/", 6) == 0 && cmd == EVHTTP_REQ_POST) {
        const char *id = path + 6, *slash = strchr(id, '/');
        if (slash && strcmp(slash, "/changed") == 0)
            handle_doc_changed(s, req, id, (size_t)(slash - id));
        else
            reply(req, 404, "Not Found", "not found\n");
    } else if (strcmp(path, "/stats") == 0 && cmd == EVHTTP_REQ_GET) {
        if (admin_ok(s, req)) handle_stats(s, req);
    } else if (strcmp(path, "/admin/shutdown") == 0 && cmd == EVHTTP_REQ_POST) {
        if (admin_ok(s, req)) {
            reply(req, 200, "OK", "bye\n");
            shutdown_now(s);
        }
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

static int usage(const char *why) {
    if (why) fprintf(stderr, "sluice-http-example: %s\n", why);
    fprintf(stderr, "usage: sluice-http-example [--port N] [--port-file PATH] [--notify-log PATH]\n"
                    "           [--rate LIMIT/PER_MS] [--burst B] [--debounce MS] [--maxwait MS]\n"
                    "           [--max-keys N] [--at-cap refuse|admit] [--admin-token TOKEN]\n"
                    "           [--timeout S] [--request-timeout S] [--max-header-bytes N]\n"
                    "           [--max-body-bytes N] [--upload-unit BYTES]\n");
    return 64;
}

static bool parse_u64(const char *v, unsigned long long *out) {
    char *end;
    errno = 0;
    if (!v || *v < '0' || *v > '9') return false;
    *out = strtoull(v, &end, 10);
    return errno == 0 && *end == 0;
}

int main(int argc, char **argv) {
    unsigned long long port = 0, limit = 10, per_ms = 1000, burst = 0, debounce_ms = 500, max_keys = 1000000;
    unsigned long long timeout_s = 10, request_timeout_s = 10, max_header = 8192, max_body = 1 << 20,
                       upload_unit = 1024, maxwait_ms = 0;
    bool has_maxwait = false;
    const char *port_file = NULL, *log_path = NULL, *admin_token = NULL, *at_cap = "refuse";
    for (int i = 1; i < argc; i += 2) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        bool ok = v != NULL;
        if (!ok) return usage("an option without its value");
        if (strcmp(a, "--port") == 0)
            ok = parse_u64(v, &port) && port <= 65535;
        else if (strcmp(a, "--port-file") == 0)
            port_file = v;
        else if (strcmp(a, "--notify-log") == 0)
            log_path = v;
        else if (strcmp(a, "--rate") == 0)
            ok = sscanf(v, "%llu/%llu", &limit, &per_ms) == 2 && limit && per_ms;
        else if (strcmp(a, "--burst") == 0)
            ok = parse_u64(v, &burst);
        else if (strcmp(a, "--debounce") == 0)
            ok = parse_u64(v, &debounce_ms);
        else if (strcmp(a, "--maxwait") == 0)
            ok = has_maxwait = parse_u64(v, &maxwait_ms);
        else if (strcmp(a, "--max-keys") == 0)
            ok = parse_u64(v, &max_keys);
        else if (strcmp(a, "--at-cap") == 0) {
            at_cap = v;
            ok = strcmp(v, "refuse") == 0 || strcmp(v, "admit") == 0;
        } else if (strcmp(a, "--admin-token") == 0)
            ok = *(admin_token = v) != 0;
        else if (strcmp(a, "--timeout") == 0)
            ok = parse_u64(v, &timeout_s) && timeout_s > 0 && timeout_s < 86400;
        else if (strcmp(a, "--request-timeout") == 0)
            ok = parse_u64(v, &request_timeout_s) && request_timeout_s > 0 && request_timeout_s < 86400;
        else if (strcmp(a, "--max-header-bytes") == 0)
            ok = parse_u64(v, &max_header) && max_header >= SLUICE_KEY_MAX + 1024 && max_header <= (1u << 20);
        else if (strcmp(a, "--max-body-bytes") == 0)
            ok = parse_u64(v, &max_body) && max_body <= (1ull << 40);
        else if (strcmp(a, "--upload-unit") == 0)
            ok = parse_u64(v, &upload_unit) && upload_unit > 0;
        else
            return usage("unknown option");
        if (!ok) {
            fprintf(stderr, "sluice-http-example: bad value for %s: %s\n", a, v);
            return usage(NULL);
        }
    }

    /* A write to a client that has gone away must fail with EPIPE, not kill
     * the process (and with it every pending notification). */
    signal(SIGPIPE, SIG_IGN);

    static struct server s; /* zeroed */
    the_server = &s;
    s.log = log_path ? fopen(log_path, "a") : stdout;
    s.log_name = log_path ? log_path : "(stdout)";
    if (!s.log) {
        perror(log_path);
        return 1;
    }
    s.admin_token = admin_token;
    s.at_cap = strcmp(at_cap, "admit") == 0 ? AT_CAP_ADMIT : AT_CAP_REFUSE;
    s.limit = limit;
    s.per_ms = per_ms;
    s.upload_unit = upload_unit;
    s.request_timeout_s = (int)request_timeout_s;

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

    /* One shard each: every call comes from this one thread, and one shard
     * makes --max-keys exact (shards share a cap out, see sluice_mt_new()). */
    sluice_config_t qc;
    memset(&qc, 0, sizeof qc);
    qc.policy = sluice_rate(limit, (int64_t)per_ms * 1000000, burst);
    qc.max_keys = max_keys; /* a flood of fresh client keys cannot take all memory */
    sluice_config_t nc;
    memset(&nc, 0, sizeof nc);
    nc.policy =
        sluice_debounce((int64_t)debounce_ms * 1000000, false, true, has_maxwait ? (int64_t)maxwait_ms * 1000000 : -1);
    nc.on_event = on_notify;
    nc.user = &s;
    int rc = sluice_mt_new(&s.quota, s.loop, &qc, 1);
    if (rc == 0) rc = sluice_mt_new(&s.notify, s.loop, &nc, 1);
    if (rc != 0) {
        fprintf(stderr, "bad limiter configuration: %s\n", sluice_strerror(rc));
        return 1;
    }

    s.http = evhttp_new(s.base);
    struct evhttp_bound_socket *bound =
        s.http ? evhttp_bind_socket_with_handle(s.http, "127.0.0.1", (ev_uint16_t)port) : NULL;
    if (!bound) {
        fprintf(stderr, "cannot listen on 127.0.0.1:%llu\n", port);
        return 1;
    }
    evhttp_set_gencb(s.http, on_request, &s);
    evhttp_set_allowed_methods(s.http, EVHTTP_REQ_GET | EVHTTP_REQ_POST | EVHTTP_REQ_HEAD);
    evhttp_set_bevcb(s.http, on_new_connection, &s);
    evhttp_set_timeout(s.http, (int)timeout_s);
    evhttp_set_max_headers_size(s.http, (ev_ssize_t)max_header);
    evhttp_set_max_body_size(s.http, (ev_ssize_t)max_body);
    s.listener = evhttp_bound_socket_get_listener(bound);
    evconnlistener_set_error_cb(s.listener, on_accept_error);
    s.accept_resume = evtimer_new(s.base, on_accept_resume, &s);
    s.guard_sweep = event_new(s.base, -1, EV_PERSIST, on_guard_sweep, &s);
    struct timeval sweep = { 0, 250000 };
    event_add(s.guard_sweep, &sweep);

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
    event_free(s.accept_resume);
    event_free(s.guard_sweep);
    event_base_free(s.base);
    free(s.guards);
    int status = 0;
    if (s.log != stdout) {
        errno = 0;
        if (fclose(s.log) != 0) log_failed(&s);
    } else if (fflush(stdout) != 0 || ferror(stdout)) {
        log_failed(&s);
    }
    fprintf(stderr, "stopped: %" PRIu64 " ok, %" PRIu64 " limited, %" PRIu64 " changes, %" PRIu64 " notifications\n",
            s.n_ok, s.n_limited, s.n_changes, s.n_notifications);
    if (s.n_lost) {
        fprintf(stderr, "error: %" PRIu64 " change(s) lost without a notification\n", s.n_lost);
        status = 1;
    }
    if (s.log_broken) {
        fprintf(stderr, "error: %" PRIu64 " notification(s) could not be written to %s\n", s.n_log_failed, s.log_name);
        status = 1;
    }
    return status;
}
