/*
 * conn.c — the fleet's one connection to Redis: TCP, Unix socket or TLS,
 * setup (AUTH, SELECT), pipelined commands answered in order, reconnects with
 * backoff. See conn.h.
 *
 * States: IDLE (no socket; a reconnect is scheduled), CONNECTING (socket
 * connect in progress), SETUP (TLS handshake and the setup commands in
 * flight), READY. Every failure goes through conn_fail(), which tears the
 * socket down, answers every pending command, schedules the next attempt and
 * tells the owner. `gen` counts teardowns: a loop that calls out (replies)
 * stops as soon as it changed.
 */
#ifndef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L
#endif
#ifndef _DEFAULT_SOURCE
#define _DEFAULT_SOURCE /* SOCK_NONBLOCK, SOCK_CLOEXEC */
#endif

#include "conn.h"
#include "fleet-internal.h"
#include "fleet-time.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#if defined(__has_include)
#if !__has_include(<openssl/ssl.h>)
#error "OpenSSL not found: the fleet limiter's TLS connections need it; install libssl-dev (or make deps)"
#endif
#endif
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/bufferevent_ssl.h>
#include <event2/event.h>
#include <openssl/crypto.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#define MS 1000000ull

enum { ST_IDLE = 0, ST_CONNECTING = 1, ST_SETUP = 2, ST_READY = 3, ST_FREED = 4 };

/* A command sent (or held) and not answered yet. */
struct pending {
    struct pending *next;
    sluice__conn_reply_fn fn;
    void *arg;
};

struct queue {
    struct pending *head, *tail;
};

struct sluice__conn {
    struct event_base *base;
    sluice__redis_url_t url; /* a deep copy */
    sluice__conn_opts_t o;
    SSL_CTX *ctx;   /* TLS only */
    char peer[300]; /* "host:port" or "unix:path", for messages */

    int state; /* ST_*; stored atomically (sluice__conn_ready reads it from any thread) */
    uint64_t gen;
    int fd; /* CONNECTING: the socket being connected */
    struct event *connect_ev;
    struct addrinfo *addrs, *next_addr;
    struct bufferevent *bev;
    bool handshaking; /* TLS handshake not finished */
    bool got_data;    /* bytes received on this connection */
    bool resolving;   /* CONNECTING: waiting for the resolver's answer */
    redisReader *reader;
    int setup_left; /* setup replies still awaited */

    struct queue pending; /* on the wire, in order */
    struct queue held;    /* sent during setup, with their bytes in held_buf */
    struct evbuffer *held_buf;

    struct event *timer; /* the connect timeout */
    struct event *retry; /* the next attempt */
    unsigned attempt;
    uint64_t rng;

    int err;
    char msg[320];
    uint32_t mark; /* the owner's, for this server connection: 0 at each attempt */
};

static void start_attempt(struct sluice__conn *c);

/* ------------------------------------------------------------------ helpers */

static uint64_t next_rand(struct sluice__conn *c) {
    c->rng ^= c->rng << 13;
    c->rng ^= c->rng >> 7;
    c->rng ^= c->rng << 17;
    return c->rng;
}

static void push(struct queue *q, struct pending *p) {
    p->next = NULL;
    if (q->tail)
        q->tail->next = p;
    else
        q->head = p;
    q->tail = p;
}

static struct pending *pop(struct queue *q) {
    struct pending *p = q->head;
    if (p) {
        q->head = p->next;
        if (!q->head) q->tail = NULL;
    }
    return p;
}

/* Moves all of `from` behind `to`. */
static void append_all(struct queue *to, struct queue *from) {
    if (!from->head) return;
    if (to->tail)
        to->tail->next = from->head;
    else
        to->head = from->head;
    to->tail = from->tail;
    from->head = from->tail = NULL;
}

/* Answers every command of `q` (taken out first) with a NULL reply. */
static void answer_all(struct queue *q, int err) {
    struct queue mine = *q;
    q->head = q->tail = NULL;
    struct pending *p;
    while ((p = pop(&mine)) != NULL) {
        p->fn(p->arg, NULL, err);
        free(p);
    }
}

/* Writes one command in RESP (an array of bulk strings) into `out`, in one
 * extent reserved for it (a call of snprintf and three evbuffer_add per
 * argument, each running the buffer's callbacks, cost the client more than
 * the rest of a batch's sending). */
static int format_command(struct evbuffer *out, int argc, const char *const *argv, const size_t *lens) {
    size_t total = 1 + 20 + 2;
    for (int i = 0; i < argc; i++) total += 1 + 20 + 2 + lens[i] + 2;
    struct evbuffer_iovec v;
    if (total > (size_t)EV_SSIZE_MAX || evbuffer_reserve_space(out, (ev_ssize_t)total, &v, 1) != 1 || v.iov_len < total)
        return -1;
    char *p = v.iov_base, *start = p;
    *p++ = '*';
    p += sluice__fleet_u64_put((uint64_t)argc, p);
    *p++ = '\r';
    *p++ = '\n';
    for (int i = 0; i < argc; i++) {
        *p++ = '$';
        p += sluice__fleet_u64_put((uint64_t)lens[i], p);
        *p++ = '\r';
        *p++ = '\n';
        if (lens[i]) memcpy(p, argv[i], lens[i]);
        p += lens[i];
        *p++ = '\r';
        *p++ = '\n';
    }
    v.iov_len = (size_t)(p - start);
    return evbuffer_commit_space(out, &v, 1) == 0 ? 0 : -1;
}

uint64_t sluice__conn_backoff(uint64_t min_ns, uint64_t max_ns, unsigned attempt, uint64_t rnd) {
    uint64_t d = min_ns ? min_ns : 1;
    for (unsigned i = 0; i < attempt && d < max_ns; i++) d = d > max_ns / 2 ? max_ns : d * 2;
    if (d > max_ns) d = max_ns;
    uint64_t half = d / 2;
    return d - half + (half ? rnd % (half + 1) : 0); /* uniform in [d - d/2, d] */
}

/* ------------------------------------------------------------------ teardown */

/* Closes the socket and frees what belongs to one connection attempt. */
static void teardown(struct sluice__conn *c) {
    c->gen++;
    if (c->connect_ev) {
        event_free(c->connect_ev);
        c->connect_ev = NULL;
    }
    if (c->fd >= 0) {
        close(c->fd);
        c->fd = -1;
    }
    if (c->bev) {
        bufferevent_free(c->bev); /* closes the socket, frees the SSL */
        c->bev = NULL;
    }
    if (c->reader) {
        redisReaderFree(c->reader);
        c->reader = NULL;
    }
    if (c->addrs) {
        freeaddrinfo(c->addrs);
        c->addrs = c->next_addr = NULL;
    }
    if (c->held_buf) evbuffer_drain(c->held_buf, evbuffer_get_length(c->held_buf));
    if (c->timer) evtimer_del(c->timer);
    c->handshaking = false;
    c->got_data = false;
    c->resolving = false;
    c->setup_left = 0;
}

/* The failure of an attempt or of a ready connection (c->err and c->msg are
 * set): answers everything pending, schedules the next attempt, tells the owner. */
static void conn_fail(struct sluice__conn *c) {
    if (c->state == ST_IDLE || c->state == ST_FREED) return;
    bool was_ready = c->state == ST_READY;
    teardown(c);
    __atomic_store_n(&c->state, ST_IDLE, __ATOMIC_RELAXED);
    sluice__fleet_arm(c->retry,
                      sluice__conn_backoff(c->o.backoff_min_ns, c->o.backoff_max_ns, c->attempt, next_rand(c)));
    if (c->attempt < 64) c->attempt++;
    int err = c->err;
    uint64_t gen = c->gen;
    answer_all(&c->pending, err);
    answer_all(&c->held, err);
    if (c->o.on_event && c->gen == gen && c->state == ST_IDLE)
        c->o.on_event(c->o.owner, was_ready ? SLUICE__CONN_DOWN : SLUICE__CONN_FAILED, err);
}

static void fail_with(struct sluice__conn *c, int err, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->msg, sizeof c->msg, fmt, ap);
    va_end(ap);
    c->err = err;
    conn_fail(c);
}

void sluice__conn_drop(sluice__conn_t *c, int err) {
    if (!c || c->state == ST_IDLE || c->state == ST_FREED) return;
    fail_with(c, err, "connection to %s dropped by its owner (%s)", c->peer, sluice_strerror(err));
}

/* ------------------------------------------------------------------ ready */

static void become_ready(struct sluice__conn *c) {
    evtimer_del(c->timer);
    __atomic_store_n(&c->state, ST_READY, __ATOMIC_RELAXED);
    c->attempt = 0;
    c->err = 0;
    c->msg[0] = '\0';
    uint64_t gen = c->gen;
    if (c->o.on_event) c->o.on_event(c->o.owner, SLUICE__CONN_UP, 0);
    if (c->gen != gen) return; /* dropped inside the event */
    /* the commands held during setup go out behind the owner's own setup */
    if (evbuffer_get_length(c->held_buf) && bufferevent_write_buffer(c->bev, c->held_buf) != 0) {
        fail_with(c, SLUICE_ENOMEM, "out of memory sending to %s", c->peer);
        return;
    }
    append_all(&c->pending, &c->held);
}

/* The reply to one of the setup commands (AUTH, SELECT, PING). */
static void setup_reply(void *arg, redisReply *reply, int err) {
    struct sluice__conn *c = arg;
    (void)err;
    if (!reply) return; /* the attempt failed: conn_fail() reports it */
    if (reply->type == REDIS_REPLY_ERROR) {
        int code = sluice__redis_error_code(reply->str, reply->len);
        /* Redis's messages never echo the password */
        fail_with(c, code, "%s refused the connection setup: %.*s", c->peer, (int)(reply->len > 200 ? 200 : reply->len),
                  reply->str);
        return;
    }
    if (--c->setup_left == 0) become_ready(c);
}

/* The reply to ROLE (check_primary): its first element must be "master". A
 * replica or a demoted primary fails the attempt; with a resolver, the next
 * attempt asks again (a sentinel that lags may name a node just demoted). */
static void role_reply(void *arg, redisReply *reply, int err) {
    struct sluice__conn *c = arg;
    if (reply && reply->type != REDIS_REPLY_ERROR) {
        const redisReply *e = reply->type == REDIS_REPLY_ARRAY && reply->elements > 0 ? reply->element[0] : NULL;
        bool is_str = e && (e->type == REDIS_REPLY_STRING || e->type == REDIS_REPLY_STATUS);
        if (!is_str || e->len != 6 || memcmp(e->str, "master", 6) != 0) {
            fail_with(c, SLUICE_EREADONLY, "%s is not a primary (ROLE answered %.*s)", c->peer,
                      is_str ? (int)(e->len > 40 ? 40 : e->len) : 9, is_str ? e->str : "no string");
            return;
        }
    }
    setup_reply(arg, reply, err);
}

static int queue_setup_fn(struct sluice__conn *c, int argc, const char *const *argv, const size_t *lens,
                          sluice__conn_reply_fn fn) {
    struct pending *p = malloc(sizeof *p);
    if (!p || format_command(bufferevent_get_output(c->bev), argc, argv, lens) != 0) {
        free(p);
        return -1;
    }
    p->fn = fn;
    p->arg = c;
    push(&c->pending, p);
    c->setup_left++;
    return 0;
}

static int queue_setup(struct sluice__conn *c, int argc, const char *const *argv, const size_t *lens) {
    return queue_setup_fn(c, argc, argv, lens, setup_reply);
}

/* Writes AUTH / SELECT / PING. They are buffered until a TLS handshake ends. */
static int send_setup(struct sluice__conn *c) {
    const sluice__redis_url_t *u = &c->url;
    if (u->password) {
        const char *argv[3] = { "AUTH", u->user ? u->user : u->password, u->password };
        size_t lens[3] = { 4, strlen(argv[1]), strlen(u->password) };
        if (queue_setup(c, u->user ? 3 : 2, argv, lens) != 0) return -1;
    }
    if (u->db > 0) {
        char db[16];
        const char *argv[2] = { "SELECT", db };
        size_t lens[2] = { 6, (size_t)snprintf(db, sizeof db, "%d", u->db) };
        if (queue_setup(c, 2, argv, lens) != 0) return -1;
    }
    if (c->o.check_primary) {
        const char *argv[1] = { "ROLE" };
        size_t lens[1] = { 4 };
        if (queue_setup_fn(c, 1, argv, lens, role_reply) != 0) return -1;
    }
    if (c->setup_left == 0) {
        const char *argv[1] = { "PING" };
        size_t lens[1] = { 4 };
        if (queue_setup(c, 1, argv, lens) != 0) return -1;
    }
    return 0;
}

/* ------------------------------------------------------------------ reading */

/* TLS records start with 0x15 (alert) or 0x16 (handshake): a TLS server. */
static bool looks_like_tls(struct evbuffer *in) {
    unsigned char b;
    return evbuffer_copyout(in, &b, 1) == 1 && (b == 0x15 || b == 0x16);
}

static void read_cb(struct bufferevent *bev, void *arg) {
    struct sluice__conn *c = arg;
    struct evbuffer *in = bufferevent_get_input(bev);
    if (!c->got_data && !c->url.tls.tls && looks_like_tls(in)) {
        fail_with(c, SLUICE_ETLS, "%s answered with TLS: use a rediss:// address", c->peer);
        return;
    }
    c->got_data = true;
    size_t len;
    while ((len = evbuffer_get_contiguous_space(in)) > 0) {
        if (redisReaderFeed(c->reader, (const char *)evbuffer_pullup(in, (ssize_t)len), len) != REDIS_OK) break;
        evbuffer_drain(in, len);
    }
    uint64_t gen = c->gen;
    for (;;) {
        void *rep = NULL;
        if (redisReaderGetReply(c->reader, &rep) != REDIS_OK) {
            fail_with(c, SLUICE_EPROTO, "%s sent something that is not RESP (%s)", c->peer, c->reader->errstr);
            return;
        }
        if (!rep) return;
        struct pending *p = pop(&c->pending);
        if (!p && c->o.on_push && c->state == ST_READY) { /* a pub/sub message */
            c->o.on_push(c->o.owner, rep);
            freeReplyObject(rep);
            if (c->gen != gen) return;
            continue;
        }
        if (!p) {
            freeReplyObject(rep);
            fail_with(c, SLUICE_EPROTO, "%s sent a reply to no command", c->peer);
            return;
        }
        p->fn(p->arg, rep, 0);
        free(p);
        freeReplyObject(rep);
        if (c->gen != gen) return; /* dropped inside the callback */
    }
}

/* The reason of a TLS failure: the certificate check, else OpenSSL's error. */
static void tls_failure(struct sluice__conn *c, struct bufferevent *bev) {
    unsigned long e, first = 0;
    while ((e = bufferevent_get_openssl_error(bev)) != 0)
        if (!first) first = e;
    SSL *ssl = bufferevent_openssl_get_ssl(bev);
    long vr = ssl ? SSL_get_verify_result(ssl) : X509_V_OK;
    if (!c->url.tls.insecure && vr != X509_V_OK) {
        fail_with(c, SLUICE_ETLS, "TLS certificate of %s did not verify: %s", c->peer,
                  X509_verify_cert_error_string(vr));
    } else if (first) {
        char buf[200];
        ERR_error_string_n(first, buf, sizeof buf);
        fail_with(c, SLUICE_ETLS, "TLS with %s failed: %s", c->peer, buf);
    } else if (c->handshaking) {
        fail_with(c, SLUICE_ETLS, "TLS handshake with %s failed (%s): is it a TLS port?", c->peer,
                  errno ? strerror(errno) : "closed");
    } else {
        fail_with(c, SLUICE_ENOTCONN, "connection to %s lost: %s", c->peer, errno ? strerror(errno) : "closed");
    }
}

static void event_cb(struct bufferevent *bev, short what, void *arg) {
    struct sluice__conn *c = arg;
    if (what & BEV_EVENT_CONNECTED) { /* TLS handshake done; setup commands go out */
        c->handshaking = false;
        return;
    }
    if (c->url.tls.tls && (what & BEV_EVENT_ERROR)) {
        tls_failure(c, bev);
    } else if (c->handshaking) {
        fail_with(c, SLUICE_ETLS, "%s closed the connection during the TLS handshake: is it a TLS port?", c->peer);
    } else if (c->url.tls.tls && c->state == ST_SETUP) {
        /* TLS 1.3: a server that refuses the client (no or a bad client
         * certificate) says so after the client's handshake is done */
        fail_with(c, SLUICE_ETLS, "%s closed the TLS connection before setup (client certificate refused?)", c->peer);
    } else {
        /* a TLS server resets a plaintext client without a word: say so */
        const char *hint = c->state == ST_SETUP && !c->got_data ? " during setup (a TLS port? use rediss://)" : "";
        int e = EVUTIL_SOCKET_ERROR();
        if (what & BEV_EVENT_EOF)
            fail_with(c, SLUICE_ENOTCONN, "%s closed the connection%s", c->peer, hint);
        else
            fail_with(c, SLUICE_ENOTCONN, "connection to %s lost: %s%s", c->peer, e ? strerror(e) : "error", hint);
    }
}

/* ------------------------------------------------------------------ connecting */

/* The socket is connected: wraps it (TLS or not) and sends the setup. */
static void on_socket_connected(struct sluice__conn *c) {
    int fd = c->fd;
    c->fd = -1; /* the bufferevent owns it now */
    if (c->connect_ev) {
        event_free(c->connect_ev);
        c->connect_ev = NULL;
    }
    if (c->addrs) {
        freeaddrinfo(c->addrs);
        c->addrs = c->next_addr = NULL;
    }
    int opts = BEV_OPT_CLOSE_ON_FREE | BEV_OPT_DEFER_CALLBACKS;
    if (c->url.tls.tls) {
        SSL *ssl = SSL_new(c->ctx);
        const char *name = c->url.tls.sni ? c->url.tls.sni : c->url.nodes[0].host;
        unsigned char ip[16];
        bool is_ip = inet_pton(AF_INET, name, ip) == 1 || inet_pton(AF_INET6, name, ip) == 1;
        bool ok = ssl != NULL;
        if (ok && !is_ip) ok = SSL_set_tlsext_host_name(ssl, name) == 1; /* SNI: names only */
        if (ok && !c->url.tls.insecure)
            ok = is_ip ? X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl), name) == 1 : SSL_set1_host(ssl, name) == 1;
        if (ok) c->bev = bufferevent_openssl_socket_new(c->base, fd, ssl, BUFFEREVENT_SSL_CONNECTING, opts);
        if (!c->bev) {
            if (ssl) SSL_free(ssl);
            close(fd);
            fail_with(c, SLUICE_ETLS, "cannot set up TLS for %s (name \"%s\")", c->peer, name);
            return;
        }
        bufferevent_openssl_set_allow_dirty_shutdown(c->bev, 1);
        c->handshaking = true;
    } else {
        c->bev = bufferevent_socket_new(c->base, fd, opts);
        if (!c->bev) {
            close(fd);
            fail_with(c, SLUICE_ENOMEM, "out of memory connecting to %s", c->peer);
            return;
        }
    }
    __atomic_store_n(&c->state, ST_SETUP, __ATOMIC_RELAXED);
    c->reader = redisReaderCreate();
    bufferevent_setcb(c->bev, read_cb, NULL, event_cb, c);
    if (!c->reader || bufferevent_enable(c->bev, EV_READ | EV_WRITE) != 0 || send_setup(c) != 0)
        fail_with(c, SLUICE_ENOMEM, "out of memory connecting to %s", c->peer);
}

static void try_next_addr(struct sluice__conn *c, int last_errno);

static void connect_ready_cb(evutil_socket_t fd, short what, void *arg) {
    (void)what;
    struct sluice__conn *c = arg;
    int e = 0;
    socklen_t len = sizeof e;
    if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &e, &len) != 0) e = errno;
    if (e == 0) {
        on_socket_connected(c);
        return;
    }
    close(c->fd);
    c->fd = -1;
    event_free(c->connect_ev);
    c->connect_ev = NULL;
    try_next_addr(c, e);
}

/* Starts a non-blocking connect to `sa`. @return 0 (done or in progress) or an errno. */
static int start_connect(struct sluice__conn *c, int family, const struct sockaddr *sa, socklen_t salen) {
    int fd = socket(family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) return errno;
    if (family != AF_UNIX) { /* small pipelined commands: never wait for Nagle's delayed ACK */
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    }
    c->fd = fd;
    if (connect(fd, sa, salen) == 0) {
        on_socket_connected(c);
        return 0;
    }
    int e = errno;
    if (e != EINPROGRESS) {
        close(fd);
        c->fd = -1;
        return e;
    }
    c->connect_ev = event_new(c->base, fd, EV_WRITE, connect_ready_cb, c);
    if (!c->connect_ev || event_add(c->connect_ev, NULL) != 0) {
        close(fd);
        c->fd = -1;
        return ENOMEM;
    }
    return 0;
}

/* Tries the resolved addresses in turn; fails with the last error. */
static void try_next_addr(struct sluice__conn *c, int last_errno) {
    while (c->next_addr) {
        struct addrinfo *a = c->next_addr;
        c->next_addr = a->ai_next;
        last_errno = start_connect(c, a->ai_family, a->ai_addr, a->ai_addrlen);
        if (last_errno == 0) return;
    }
    fail_with(c, SLUICE_ENOTCONN, "cannot connect to %s: %s", c->peer, strerror(last_errno ? last_errno : ENOENT));
}

static void connect_unix(struct sluice__conn *c) {
    struct sockaddr_un sa;
    memset(&sa, 0, sizeof sa);
    sa.sun_family = AF_UNIX;
    memcpy(sa.sun_path, c->url.path, strlen(c->url.path) + 1); /* length checked in sluice__conn_new */
    int e = start_connect(c, AF_UNIX, (const struct sockaddr *)&sa, sizeof sa);
    if (e) fail_with(c, SLUICE_ENOTCONN, "cannot connect to %s: %s", c->peer, strerror(e));
}

static void connect_tcp(struct sluice__conn *c) {
    char port[16];
    snprintf(port, sizeof port, "%d", c->url.nodes[0].port);
    struct addrinfo hints;
    memset(&hints, 0, sizeof hints);
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    /* no AI_ADDRCONFIG: with only a loopback interface it hides 127.0.0.1 itself */
    int rc = getaddrinfo(c->url.nodes[0].host, port, &hints, &c->addrs);
    if (rc != 0) {
        c->addrs = NULL;
        fail_with(c, SLUICE_ENOTCONN, "cannot resolve %s: %s", c->peer, gai_strerror(rc));
        return;
    }
    c->next_addr = c->addrs;
    try_next_addr(c, 0);
}

static void begin_connect(struct sluice__conn *c) {
    if (c->o.resolve) { /* where to? (answered by sluice__conn_target*) */
        c->resolving = true;
        c->o.resolve(c->o.resolver, c, c->gen);
    } else if (c->url.topology == SLUICE__REDIS_UNIX)
        connect_unix(c);
    else
        connect_tcp(c);
}

/* An attempt: CONNECTING, bounded by the connect timeout. */
static void start_attempt(struct sluice__conn *c) {
    c->mark = 0; /* whatever the owner learnt of the last server */
    __atomic_store_n(&c->state, ST_CONNECTING, __ATOMIC_RELAXED);
    sluice__fleet_arm(c->timer, c->o.connect_timeout_ns);
    begin_connect(c);
}

/* The next attempt, or the first one (sluice__conn_new() enters CONNECTING
 * and lets the loop start it, so no failure is reported inside the call). */
static void retry_cb(evutil_socket_t fd, short what, void *arg) {
    (void)fd;
    (void)what;
    struct sluice__conn *c = arg;
    if (c->state == ST_IDLE)
        start_attempt(c);
    else if (c->state == ST_CONNECTING && c->fd < 0 && !c->connect_ev && !c->addrs && !c->resolving)
        begin_connect(c);
}

static void timeout_cb(evutil_socket_t fd, short what, void *arg) {
    (void)fd;
    (void)what;
    struct sluice__conn *c = arg;
    unsigned long long ms = (unsigned long long)(c->o.connect_timeout_ns / MS);
    if (c->state == ST_CONNECTING && c->resolving)
        fail_with(c, SLUICE_ETIMEDOUT, "discovery of %s timed out (%llu ms)", c->peer, ms);
    else if (c->state == ST_CONNECTING)
        fail_with(c, SLUICE_ETIMEDOUT, "connect to %s timed out (%llu ms)", c->peer, ms);
    else if (c->state == ST_SETUP && c->handshaking)
        fail_with(c, SLUICE_ETLS, "TLS handshake with %s did not finish in %llu ms: is it a TLS port?", c->peer, ms);
    else if (c->state == ST_SETUP)
        fail_with(c, SLUICE_ETIMEDOUT, "%s did not answer the connection setup in %llu ms", c->peer, ms);
}

/* ------------------------------------------------------------------ TLS context */

static int tls_error(char *why, size_t why_len, const char *what, const char *path) {
    char buf[160];
    ERR_error_string_n(ERR_peek_last_error(), buf, sizeof buf);
    ERR_clear_error();
    if (why) snprintf(why, why_len, "cannot load the TLS %s %s: %s", what, path, buf);
    return SLUICE_ETLS;
}

/* The client context of a rediss address: CA (or the system's), client
 * certificate and key, verification unless `insecure`. */
static int make_ctx(const sluice__redis_tls_t *t, SSL_CTX **out, char *why, size_t why_len) {
    SSL_CTX *ctx = SSL_CTX_new(TLS_client_method());
    if (!ctx) return SLUICE_ENOMEM;
    int rc = 0;
    SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
    SSL_CTX_set_verify(ctx, t->insecure ? SSL_VERIFY_NONE : SSL_VERIFY_PEER, NULL);
    if (t->cacert) {
        if (SSL_CTX_load_verify_locations(ctx, t->cacert, NULL) != 1)
            rc = tls_error(why, why_len, "CA file", t->cacert);
    } else if (SSL_CTX_set_default_verify_paths(ctx) != 1) {
        rc = tls_error(why, why_len, "system CA paths", "");
    }
    if (!rc && (t->cert != NULL) != (t->key != NULL)) {
        if (why) snprintf(why, why_len, "a TLS client certificate needs both cert and key");
        rc = SLUICE_EINVAL;
    }
    if (!rc && t->cert && SSL_CTX_use_certificate_chain_file(ctx, t->cert) != 1)
        rc = tls_error(why, why_len, "client certificate", t->cert);
    if (!rc && t->key && SSL_CTX_use_PrivateKey_file(ctx, t->key, SSL_FILETYPE_PEM) != 1)
        rc = tls_error(why, why_len, "client key", t->key);
    if (!rc && t->cert && SSL_CTX_check_private_key(ctx) != 1)
        rc = tls_error(why, why_len, "client key (does not match the certificate)", t->key);
    if (rc) {
        SSL_CTX_free(ctx);
        return rc;
    }
    *out = ctx;
    return 0;
}

/* ------------------------------------------------------------------ the address check */

static int check_url(const sluice__redis_url_t *u, bool resolved, char *why, size_t why_len) {
    const char *bad = NULL;
    if (u->topology == SLUICE__REDIS_UNIX) {
        if (!u->path || !*u->path || strlen(u->path) >= sizeof(((struct sockaddr_un *)0)->sun_path))
            bad = "the Unix socket path is missing or too long";
        else if (u->tls.tls)
            bad = "TLS over a Unix socket is not supported";
    } else if (u->topology == SLUICE__REDIS_SINGLE) {
        if (u->n_nodes != 1 || !u->nodes || !u->nodes[0].host || !*u->nodes[0].host)
            bad = "a single-server address needs one host";
        else if (u->nodes[0].port <= 0 || u->nodes[0].port > 65535)
            bad = "the port is out of range (1-65535)";
    } else if (u->topology == SLUICE__REDIS_SENTINEL && resolved) {
        if (u->n_nodes < 1 || !u->nodes) bad = "a Sentinel address needs at least one sentinel";
    } else {
        bad = "a Cluster address has one connection per node (cluster.c), not one";
    }
    if (!bad && u->db < 0) bad = "the database number is negative";
    if (bad && why) snprintf(why, why_len, "%s", bad);
    return bad ? SLUICE_EINVAL : 0;
}

/* ------------------------------------------------------------------ public */

/* "host:port" ("[v6]:port") or "unix:path", for messages. */
static void set_peer(struct sluice__conn *c) {
    if (c->url.topology == SLUICE__REDIS_UNIX)
        snprintf(c->peer, sizeof c->peer, "unix:%s", c->url.path);
    else if (strchr(c->url.nodes[0].host, ':'))
        snprintf(c->peer, sizeof c->peer, "[%.200s]:%d", c->url.nodes[0].host, c->url.nodes[0].port);
    else
        snprintf(c->peer, sizeof c->peer, "%.200s:%d", c->url.nodes[0].host, c->url.nodes[0].port);
}

void sluice__conn_target(sluice__conn_t *c, uint64_t ticket, const char *host, int port) {
    if (!c || ticket != c->gen || c->state != ST_CONNECTING || !c->resolving) return;
    c->resolving = false;
    char *h = strdup(host);
    if (!h) {
        fail_with(c, SLUICE_ENOMEM, "out of memory connecting to %s", c->peer);
        return;
    }
    free(c->url.nodes[0].host);
    c->url.nodes[0].host = h;
    c->url.nodes[0].port = port;
    set_peer(c);
    connect_tcp(c);
}

bool sluice__conn_is_at(const sluice__conn_t *c, const char *host, int port) {
    if (!c || c->state == ST_IDLE || c->state == ST_FREED || c->resolving || !c->url.nodes) return false;
    return c->url.nodes[0].port == port && strcmp(c->url.nodes[0].host, host) == 0;
}

void sluice__conn_retry_now(sluice__conn_t *c) {
    if (!c || c->state != ST_IDLE) return;
    c->attempt = 0;
    sluice__fleet_arm(c->retry, 0);
}

void sluice__conn_target_failed(sluice__conn_t *c, uint64_t ticket, int err, const char *msg) {
    if (!c || ticket != c->gen || c->state != ST_CONNECTING || !c->resolving) return;
    fail_with(c, err, "%s", msg);
}

int sluice__conn_new(sluice__conn_t **out, struct event_base *base, const sluice__redis_url_t *url,
                     const sluice__conn_opts_t *opts, char *why, size_t why_len) {
    if (why && why_len) why[0] = '\0';
    if (!out || !base || !url || !opts) return SLUICE_EINVAL;
    int rc = check_url(url, opts->resolve != NULL, why, why_len);
    if (rc) return rc;
    struct sluice__conn *c = calloc(1, sizeof *c);
    if (!c) return SLUICE_ENOMEM;
    c->base = base;
    c->fd = -1;
    c->o = *opts;
    if (!c->o.connect_timeout_ns) c->o.connect_timeout_ns = 1000 * MS;
    if (!c->o.backoff_min_ns) c->o.backoff_min_ns = 20 * MS;
    if (!c->o.backoff_max_ns) c->o.backoff_max_ns = 1000 * MS;
    if (c->o.backoff_max_ns < c->o.backoff_min_ns) c->o.backoff_max_ns = c->o.backoff_min_ns;
    c->rng = (sluice__fleet_clock_ns(CLOCK_MONOTONIC) << 20) ^ (uint64_t)(uintptr_t)c ^ 0x9E3779B97F4A7C15ull;
    rc = sluice__redis_url_copy(&c->url, url, true);
    if (rc) {
        free(c);
        return rc;
    }
    if (c->o.resolve) {
        /* the copy holds the first sentinel: replaced by the resolver's answer */
        c->url.topology = SLUICE__REDIS_SINGLE;
        snprintf(c->peer, sizeof c->peer, "the primary of \"%.200s\"", url->master ? url->master : "");
    } else {
        set_peer(c);
    }
    if (c->url.tls.tls) rc = make_ctx(&c->url.tls, &c->ctx, why, why_len);
    c->timer = evtimer_new(base, timeout_cb, c);
    c->retry = evtimer_new(base, retry_cb, c);
    c->held_buf = evbuffer_new();
    if (!rc && (!c->timer || !c->retry || !c->held_buf)) rc = SLUICE_ENOMEM;
    if (rc) {
        __atomic_store_n(&c->state, ST_FREED, __ATOMIC_RELAXED);
        sluice__conn_free(c);
        return rc;
    }
    *out = c;
    __atomic_store_n(&c->state, ST_CONNECTING, __ATOMIC_RELAXED); /* commands sent now wait for the connection */
    sluice__fleet_arm(c->timer, c->o.connect_timeout_ns);
    sluice__fleet_arm(c->retry, 0);
    return 0;
}

int sluice__conn_send(sluice__conn_t *c, int argc, const char *const *argv, const size_t *lens,
                      sluice__conn_reply_fn fn, void *arg) {
    if (c->state != ST_READY && c->state != ST_CONNECTING && c->state != ST_SETUP) return SLUICE_ENOTCONN;
    struct pending *p = malloc(sizeof *p);
    if (!p) return SLUICE_ENOMEM;
    bool ready = c->state == ST_READY;
    struct evbuffer *out = ready ? bufferevent_get_output(c->bev) : c->held_buf;
    if (format_command(out, argc, argv, lens) != 0) {
        free(p);
        return SLUICE_ENOMEM;
    }
    p->fn = fn;
    p->arg = arg;
    push(ready ? &c->pending : &c->held, p);
    return 0;
}

void sluice__conn_free(sluice__conn_t *c) {
    if (!c) return;
    if (c->held_buf) teardown(c);
    __atomic_store_n(&c->state, ST_FREED, __ATOMIC_RELAXED);
    answer_all(&c->pending, SLUICE_ECLOSED);
    answer_all(&c->held, SLUICE_ECLOSED);
    if (c->timer) event_free(c->timer);
    if (c->retry) event_free(c->retry);
    if (c->held_buf) evbuffer_free(c->held_buf);
    if (c->ctx) SSL_CTX_free(c->ctx);
    sluice__redis_url_free(&c->url);
    free(c);
}

bool sluice__conn_sendable(const sluice__conn_t *c) {
    return c && (c->state == ST_READY || c->state == ST_CONNECTING || c->state == ST_SETUP);
}

uint32_t sluice__conn_mark(const sluice__conn_t *c) { return c->mark; }

void sluice__conn_set_mark(sluice__conn_t *c, uint32_t mark) { c->mark = mark; }

/* Any thread may ask (sluice_fleet_connected): the loop thread stores the
 * state atomically (relaxed: a hint, ordering nothing else). */
bool sluice__conn_ready(const sluice__conn_t *c) {
    return c && __atomic_load_n(&c->state, __ATOMIC_RELAXED) == ST_READY;
}

int sluice__conn_error(const sluice__conn_t *c, const char **msg) {
    if (msg) *msg = c->msg;
    return c->err;
}
