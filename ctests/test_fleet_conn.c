/* test_fleet_conn.c — the fleet's connection layer (conn.c) against real
 * redis-servers started here on loopback: plain TCP, a Unix socket, AUTH with
 * requirepass and with an ACL user, SELECT, TLS with CA and hostname
 * verification, mTLS, a plaintext client to a TLS port and the reverse, a
 * wrong CA, insecure mode, a server restart (reconnect with backoff), FIFO
 * replies, drop and close with commands pending (each answered exactly once),
 * and the fleet limiter itself over TLS and over a Unix socket with a
 * password. Every wait is bounded. */
#define TEST_NAME "test_fleet_conn"
#include "test_fleet_util.h"

#include <unistd.h>

#include "conn.h"
#include "redis-url.h"
#include "support/tls_certs.h"

#define SEC 1000000000ull
#define MS 1000000ull
#define CONNECT_TIMEOUT (2 * SEC)
/* how late past the connect timeout a failure may be seen on a loaded machine */
#define SLACK (2 * SEC)

static struct event_base *base;

/* ---- a connection's owner: counts events */

typedef struct owner {
    int up, down, failed;
    int last_err;
} owner_t;

static void on_event(void *arg, sluice__conn_event_t ev, int err) {
    owner_t *o = arg;
    if (ev == SLUICE__CONN_UP) o->up++;
    if (ev == SLUICE__CONN_DOWN) o->down++;
    if (ev == SLUICE__CONN_FAILED) o->failed++;
    o->last_err = err;
}

static sluice__conn_t *conn_open(const char *url, owner_t *o) {
    sluice__redis_url_t u;
    char why[256];
    CHECK(sluice__redis_url_parse(url, &u, why, sizeof why) == 0, "parse %s: %s", url, why);
    sluice__conn_opts_t opts;
    memset(&opts, 0, sizeof opts);
    opts.connect_timeout_ns = CONNECT_TIMEOUT;
    opts.backoff_min_ns = 10 * MS;
    opts.backoff_max_ns = 200 * MS;
    opts.on_event = on_event;
    opts.owner = o;
    memset(o, 0, sizeof *o);
    sluice__conn_t *c = NULL;
    int rc = sluice__conn_new(&c, base, &u, &opts, why, sizeof why);
    sluice__redis_url_free(&u);
    CHECK(rc == 0, "conn_new %s: %d %s", url, rc, why);
    return c;
}

/* Runs the loop until `*count` > 0 or `ms` passed. @return whether it did. */
static bool wait_for(const int *count, uint64_t ns) {
    uint64_t end = tf_mono() + ns;
    while (*count == 0 && tf_mono() < end) {
        event_base_loop(base, EVLOOP_ONCE | EVLOOP_NONBLOCK);
        if (*count == 0) {
            struct timespec ts = { 0, 200000 };
            nanosleep(&ts, NULL);
        }
    }
    return *count > 0;
}

static void expect_up(const char *url, sluice__conn_t *c, owner_t *o) {
    const char *msg;
    bool up = wait_for(&o->up, CONNECT_TIMEOUT + SLACK);
    int err = sluice__conn_error(c, &msg);
    CHECK(up && o->failed == 0, "%s: not up (err %d: %s)", url, err, msg);
    CHECK(sluice__conn_ready(c) && err == 0, "%s: ready, no error", url);
}

/* Connects to `url` and expects the attempt to fail with `want` within the
 * connect timeout; the message must not contain `secret` (when not NULL). */
static void expect_failure(const char *url, int want, const char *secret, const char *label) {
    owner_t o;
    uint64_t t0 = tf_mono();
    sluice__conn_t *c = conn_open(url, &o);
    CHECK(wait_for(&o.failed, CONNECT_TIMEOUT + SLACK), "%s: no failure reported", label);
    uint64_t took = tf_mono() - t0;
    const char *msg;
    int err = sluice__conn_error(c, &msg);
    CHECK(o.up == 0, "%s: came up", label);
    CHECK(err == want && o.last_err == want, "%s: error %d (%s), want %d (%s): %s", label, err, sluice_strerror(err),
          want, sluice_strerror(want), msg);
    CHECK(took <= CONNECT_TIMEOUT + SLACK, "%s: failure after %llu ms", label, (unsigned long long)(took / MS));
    CHECK(msg && *msg, "%s: a message", label);
    if (secret) CHECK(strstr(msg, secret) == NULL, "%s: the message shows the password", label);
    printf("  %s: %s (%llu ms)\n", label, msg, (unsigned long long)(took / MS));
    sluice__conn_free(c);
}

/* ---- commands */

typedef struct answer {
    int calls;
    int err;
    int type;
    char str[128];
    long long integer;
    int order; /* position among the answers of a volley */
} answer_t;

static int answer_seq;

static void on_reply(void *arg, redisReply *r, int err) {
    answer_t *a = arg;
    a->calls++;
    a->err = err;
    a->order = answer_seq++;
    a->type = r ? r->type : 0;
    if (r && (r->type == REDIS_REPLY_STRING || r->type == REDIS_REPLY_STATUS || r->type == REDIS_REPLY_ERROR))
        snprintf(a->str, sizeof a->str, "%.*s", (int)r->len, r->str);
    if (r && r->type == REDIS_REPLY_INTEGER) a->integer = r->integer;
}

/* Sends a command of words separated by spaces and waits for its answer. */
static answer_t command(sluice__conn_t *c, const char *line) {
    char buf[256];
    snprintf(buf, sizeof buf, "%s", line);
    const char *argv[16];
    size_t lens[16];
    int argc = 0;
    for (char *save = NULL, *w = strtok_r(buf, " ", &save); w && argc < 16; w = strtok_r(NULL, " ", &save)) {
        argv[argc] = w;
        lens[argc++] = strlen(w);
    }
    answer_t a;
    memset(&a, 0, sizeof a);
    CHECK(sluice__conn_send(c, argc, argv, lens, on_reply, &a) == 0, "send %s", line);
    CHECK(a.calls == 0, "answered inside send");
    CHECK(wait_for(&a.calls, 10 * SEC), "no answer to %s", line);
    return a;
}

static void expect_pong(sluice__conn_t *c, const char *label) {
    answer_t a = command(c, "PING");
    CHECK(a.calls == 1 && a.err == 0 && strcmp(a.str, "PONG") == 0, "%s: PING answered %s (err %d)", label, a.str,
          a.err);
}

static void connect_and_ping(const char *url, const char *label) {
    owner_t o;
    sluice__conn_t *c = conn_open(url, &o);
    expect_up(label, c, &o);
    expect_pong(c, label);
    sluice__conn_free(c);
    printf("  %s: ok\n", label);
}

/* ---- servers */

static void start(test_redis_t *r, const test_redis_opts_t *o) {
    memset(r, 0, sizeof *r);
    CHECK(test_redis_start_opts(r, 0, o) == 0, "cannot start redis-server with options");
}

/* ---- cases */

static void test_backoff(void) {
    /* d = min(max, min * 2^attempt), drawn in [d/2, d] */
    for (unsigned a = 0; a < 12; a++) {
        uint64_t d = 10 * MS << a;
        if (d > 200 * MS) d = 200 * MS;
        uint64_t lo = UINT64_MAX, hi = 0;
        for (uint64_t rnd = 0; rnd < 2000; rnd++) {
            uint64_t v = sluice__conn_backoff(10 * MS, 200 * MS, a, rnd * 0x9E3779B97F4A7C15ull);
            CHECK(v >= d - d / 2 && v <= d, "backoff attempt %u: %llu outside [d/2, d]", a, (unsigned long long)v);
            lo = v < lo ? v : lo;
            hi = v > hi ? v : hi;
        }
        CHECK(hi - lo > d / 4, "backoff attempt %u: no jitter", a);
    }
    CHECK(sluice__conn_backoff(1, UINT64_MAX, 200, 7) <= UINT64_MAX, "no overflow");
    printf("  backoff: ok\n");
}

static void test_plain(void) {
    test_redis_t r;
    tf_start_redis(&r);
    char url[128];
    snprintf(url, sizeof url, "redis://127.0.0.1:%d", r.port);
    connect_and_ping(url, "plain TCP");

    /* FIFO: 200 pipelined commands, answered in order, each once */
    owner_t o;
    sluice__conn_t *c = conn_open(url, &o);
    enum { N = 200 };
    static answer_t a[N];
    memset(a, 0, sizeof a);
    answer_seq = 0;
    int done = 0;
    for (int i = 0; i < N; i++) { /* sent before ready: held, then sent in order */
        char v[16];
        int n = snprintf(v, sizeof v, "%d", i);
        const char *argv[2] = { "ECHO", v };
        size_t lens[2] = { 4, (size_t)n };
        CHECK(sluice__conn_send(c, 2, argv, lens, on_reply, &a[i]) == 0, "send ECHO");
    }
    uint64_t end = tf_mono() + 10 * SEC;
    while (done < N && tf_mono() < end) {
        event_base_loop(base, EVLOOP_ONCE | EVLOOP_NONBLOCK);
        done = answer_seq;
    }
    CHECK(done == N, "pipelined: %d of %d answered", done, N);
    for (int i = 0; i < N; i++) {
        char v[16];
        snprintf(v, sizeof v, "%d", i);
        CHECK(a[i].calls == 1 && a[i].order == i && strcmp(a[i].str, v) == 0, "pipelined %d: %s at %d", i, a[i].str,
              a[i].order);
    }

    /* a drop answers every pending command once, with the drop's code */
    test_redis_signal(&r, SIGSTOP);
    memset(a, 0, 5 * sizeof a[0]);
    for (int i = 0; i < 5; i++) {
        const char *argv[1] = { "PING" };
        size_t lens[1] = { 4 };
        CHECK(sluice__conn_send(c, 1, argv, lens, on_reply, &a[i]) == 0, "send before drop");
    }
    tf_run_for(base, 20);
    sluice__conn_drop(c, SLUICE_ETIMEDOUT);
    for (int i = 0; i < 5; i++)
        CHECK(a[i].calls == 1 && a[i].err == SLUICE_ETIMEDOUT && a[i].type == 0, "drop: command %d: %d calls, err %d",
              i, a[i].calls, a[i].err);
    CHECK(o.down == 1 && !sluice__conn_ready(c), "drop reported");
    {
        const char *argv[1] = { "PING" };
        size_t lens[1] = { 4 };
        CHECK(sluice__conn_send(c, 1, argv, lens, on_reply, &a[0]) == SLUICE_ENOTCONN, "send while down");
    }
    test_redis_signal(&r, SIGCONT);
    o.up = 0;
    CHECK(wait_for(&o.up, 10 * SEC), "back after a drop");

    /* closing with commands pending answers each once, with SLUICE_ECLOSED */
    test_redis_signal(&r, SIGSTOP);
    memset(a, 0, 5 * sizeof a[0]);
    for (int i = 0; i < 5; i++) {
        const char *argv[1] = { "PING" };
        size_t lens[1] = { 4 };
        CHECK(sluice__conn_send(c, 1, argv, lens, on_reply, &a[i]) == 0, "send before close");
    }
    tf_run_for(base, 20);
    int ups = o.up, downs = o.down;
    sluice__conn_free(c);
    for (int i = 0; i < 5; i++)
        CHECK(a[i].calls == 1 && a[i].err == SLUICE_ECLOSED, "close: command %d: %d calls, err %d", i, a[i].calls,
              a[i].err);
    CHECK(o.up == ups && o.down == downs, "no event at close");
    test_redis_signal(&r, SIGCONT);
    printf("  FIFO, drop and close with commands pending: ok\n");

    /* a server that accepts but does not answer (stopped): the setup times out */
    test_redis_signal(&r, SIGSTOP);
    expect_failure(url, SLUICE_ETIMEDOUT, NULL, "stopped server");
    test_redis_signal(&r, SIGCONT);

    /* restart: the connection comes back by itself, within the backoff */
    c = conn_open(url, &o);
    expect_up("before restart", c, &o);
    int port = r.port;
    test_redis_stop(&r);
    CHECK(wait_for(&o.down, 10 * SEC), "restart: the drop was not seen");
    CHECK(o.down == 1 && sluice__conn_error(c, NULL) == SLUICE_ENOTCONN, "restart: down with ENOTCONN");
    tf_run_for(base, 300); /* a few failed attempts while the server is away */
    CHECK(o.failed >= 1 && o.up == 1, "restart: failed attempts while away (%d)", o.failed);
    memset(&r, 0, sizeof r);
    CHECK(test_redis_start(&r, port) == 0, "restart on port %d", port);
    uint64_t t0 = tf_mono();
    o.up = 0;
    CHECK(wait_for(&o.up, 10 * SEC), "restart: not back");
    /* the longest backoff is 200 ms, a connect on loopback is quick */
    CHECK(tf_mono() - t0 < 200 * MS + SLACK, "restart: back after %llu ms",
          (unsigned long long)((tf_mono() - t0) / MS));
    expect_pong(c, "after restart");
    sluice__conn_free(c);
    printf("  restart: back in %llu ms\n", (unsigned long long)((tf_mono() - t0) / MS));

    /* nothing listening: refused, ENOTCONN, with the address in the message */
    int dead = test_free_port();
    snprintf(url, sizeof url, "redis://127.0.0.1:%d", dead);
    expect_failure(url, SLUICE_ENOTCONN, NULL, "refused");
    test_redis_stop(&r);
}

static void test_auth_unix_select(void) {
    static const char pw[] = "s3cret-Pw-4711";
    char sock[96];
    snprintf(sock, sizeof sock, "/tmp/sluice-conn-%d.sock", (int)getpid());
    test_redis_opts_t opts;
    memset(&opts, 0, sizeof opts);
    opts.unixsocket = sock;
    opts.requirepass = pw;
    opts.acl_user = "app on >app-Pw-0815 ~* +@all";
    test_redis_t r;
    start(&r, &opts);
    char url[256];

    snprintf(url, sizeof url, "redis://:%s@127.0.0.1:%d", pw, r.port);
    connect_and_ping(url, "requirepass, right password");
    snprintf(url, sizeof url, "redis://:wrong-Pw-9999@127.0.0.1:%d", r.port);
    expect_failure(url, SLUICE_EAUTH, "wrong-Pw-9999", "requirepass, wrong password");
    snprintf(url, sizeof url, "redis://127.0.0.1:%d", r.port);
    expect_failure(url, SLUICE_EAUTH, NULL, "requirepass, no password (NOAUTH)");

    snprintf(url, sizeof url, "redis://app:app-Pw-0815@127.0.0.1:%d", r.port);
    connect_and_ping(url, "ACL user, right password");
    snprintf(url, sizeof url, "redis://app:bad-Pw-1234@127.0.0.1:%d", r.port);
    expect_failure(url, SLUICE_EAUTH, "bad-Pw-1234", "ACL user, wrong password");

    snprintf(url, sizeof url, "unix://%s?password=%s", sock, pw);
    connect_and_ping(url, "Unix socket");
    snprintf(url, sizeof url, "unix://%s?password=nope-Pw-3333", sock);
    expect_failure(url, SLUICE_EAUTH, "nope-Pw-3333", "Unix socket, wrong password");
    snprintf(url, sizeof url, "unix://%s.missing", sock);
    expect_failure(url, SLUICE_ENOTCONN, NULL, "Unix socket, no such socket");

    /* SELECT: keys land in that database (seen from a second connection) */
    snprintf(url, sizeof url, "redis://:%s@127.0.0.1:%d/3", pw, r.port);
    owner_t o;
    sluice__conn_t *c = conn_open(url, &o);
    expect_up("SELECT 3", c, &o);
    answer_t a = command(c, "SET sel-key 1");
    CHECK(a.err == 0 && strcmp(a.str, "OK") == 0, "SET in db 3");
    sluice__conn_free(c);
    snprintf(url, sizeof url, "unix://%s?password=%s&db=3", sock, pw);
    c = conn_open(url, &o);
    expect_up("second connection, db 3", c, &o);
    a = command(c, "EXISTS sel-key");
    CHECK(a.type == REDIS_REPLY_INTEGER && a.integer == 1, "the key is in db 3");
    sluice__conn_free(c);
    snprintf(url, sizeof url, "unix://%s?password=%s", sock, pw);
    c = conn_open(url, &o);
    expect_up("second connection, db 0", c, &o);
    a = command(c, "EXISTS sel-key");
    CHECK(a.type == REDIS_REPLY_INTEGER && a.integer == 0, "the key is not in db 0");
    sluice__conn_free(c);
    snprintf(url, sizeof url, "redis://:%s@127.0.0.1:%d/99", pw, r.port);
    expect_failure(url, SLUICE_EREDIS, pw, "SELECT out of range");
    /* an ACL user that may not SELECT: ENOPERM */
    snprintf(url, sizeof url, "unix://%s?password=%s", sock, pw);
    c = conn_open(url, &o);
    expect_up("ACL SETUSER", c, &o);
    a = command(c, "ACL SETUSER nosel on >nosel-Pw-77 ~* +@all -select");
    CHECK(a.err == 0 && strcmp(a.str, "OK") == 0, "ACL SETUSER: %s", a.str);
    sluice__conn_free(c);
    snprintf(url, sizeof url, "redis://nosel:nosel-Pw-77@127.0.0.1:%d/3", r.port);
    expect_failure(url, SLUICE_ENOPERM, "nosel-Pw-77", "ACL user without SELECT");
    printf("  SELECT: ok\n");

    /* the fleet over the Unix socket with a password: Redis decides, in db 2 */
    sluice_fleet_config_t fc;
    memset(&fc, 0, sizeof fc);
    fc.policy = sluice_rate(3, (int64_t)SEC, 3);
    snprintf(url, sizeof url, "unix://%s?password=%s&db=2", sock, pw);
    fc.url = url;
    fc.prefix = "fl";
    fc.prefix_len = 2;
    fc.timeout_ns = 2 * SEC;
    sluice_fleet_t *f = NULL;
    CHECK(sluice_fleet_new(&f, base, &fc) == 0, "fleet over a Unix socket");
    tf_box_t b[4];
    memset(b, 0, sizeof b);
    for (int i = 0; i < 4; i++) CHECK(sluice_fleet_call(f, sluice_key_u64(1), 1, 0, tf_on_result, &b[i]) == 0, "call");
    for (int i = 0; i < 4; i++) tf_wait(base, &b[i]);
    for (int i = 0; i < 4; i++)
        CHECK(b[i].res.source == SLUICE_FLEET_SOURCE_REDIS &&
                  b[i].res.decision.kind == (i < 3 ? SLUICE_EMITTED : SLUICE_DROPPED),
              "fleet over Unix: call %d source %d kind %d cause %d", i, b[i].res.source, b[i].res.decision.kind,
              b[i].res.cause);
    CHECK(sluice_fleet_connected(f) && sluice_fleet_last_error(f, NULL, 0) == 0, "fleet connected");
    sluice_fleet_free(f);
    c = conn_open(url, &o);
    expect_up("fleet's db", c, &o);
    a = command(c, "EXISTS {2:fl:u1}"); /* the key layout of fleet_key.c */
    CHECK(a.type == REDIS_REPLY_INTEGER && a.integer == 1, "the fleet's key is in db 2");
    sluice__conn_free(c);

    /* the fleet with a wrong password: failure policy, EAUTH, no password shown */
    snprintf(url, sizeof url, "redis://:fleet-bad-Pw@127.0.0.1:%d", r.port);
    CHECK(sluice_fleet_new(&f, base, &fc) == 0, "fleet with a wrong password");
    uint64_t end = tf_mono() + CONNECT_TIMEOUT + SLACK;
    while (sluice_fleet_last_error(f, NULL, 0) == 0 && tf_mono() < end)
        event_base_loop(base, EVLOOP_ONCE | EVLOOP_NONBLOCK);
    char msg[320];
    CHECK(sluice_fleet_last_error(f, msg, sizeof msg) == SLUICE_EAUTH, "fleet: EAUTH (%s)", msg);
    CHECK(strstr(msg, "fleet-bad-Pw") == NULL && *msg, "fleet: message without the password: %s", msg);
    memset(b, 0, sizeof b);
    CHECK(sluice_fleet_call(f, sluice_key_u64(1), 1, 0, tf_on_result, &b[0]) == 0, "call");
    tf_wait(base, &b[0]);
    CHECK(b[0].res.source == SLUICE_FLEET_SOURCE_FAILURE && b[0].res.cause == SLUICE_EAUTH, "fleet: cause %d",
          b[0].res.cause);
    sluice_fleet_free(f);
    printf("  fleet over a Unix socket with a password: ok; wrong password: %s\n", msg);

    /* bad addresses: clear errors at creation */
    fc.url = "bogus://x";
    CHECK(sluice_fleet_new(&f, base, &fc) == SLUICE_ESYNTAX, "a malformed URL");
    test_redis_stop(&r);
    unlink(sock);
}

static void test_tls(void) {
    if (!test_tls_available()) {
        printf("  TLS: SKIPPED (no openssl command)\n");
        return;
    }
    test_tls_certs_t t;
    CHECK(test_tls_make(&t) == 0, "cannot make the test certificates");
    test_redis_opts_t opts;
    memset(&opts, 0, sizeof opts);
    opts.tls = true;
    opts.tls_cert = t.server_cert;
    opts.tls_key = t.server_key;
    opts.tls_ca = t.ca;
    test_redis_t r;
    start(&r, &opts);
    test_redis_t plain;
    tf_start_redis(&plain);
    char url[512];

    snprintf(url, sizeof url, "rediss://localhost:%d?cacert=%s", r.port, t.ca);
    connect_and_ping(url, "TLS, CA and host name verified");
    snprintf(url, sizeof url, "rediss://127.0.0.1:%d?cacert=%s", r.port, t.ca);
    connect_and_ping(url, "TLS, CA and IP address verified");
    snprintf(url, sizeof url, "rediss://127.0.0.1:%d?cacert=%s&sni=other.example", r.port, t.ca);
    expect_failure(url, SLUICE_ETLS, NULL, "TLS, name not in the certificate");
    snprintf(url, sizeof url, "rediss://localhost:%d?cacert=%s", r.port, t.other_ca);
    expect_failure(url, SLUICE_ETLS, NULL, "TLS, wrong CA");
    snprintf(url, sizeof url, "rediss://localhost:%d?cacert=%s&insecure=1", r.port, t.other_ca);
    connect_and_ping(url, "TLS, wrong CA, insecure");
    snprintf(url, sizeof url, "redis://127.0.0.1:%d", r.port);
    /* Redis resets a plaintext client on its TLS port without a TLS alert:
     * ENOTCONN (documented), with a hint in the message */
    expect_failure(url, SLUICE_ENOTCONN, NULL, "plaintext client, TLS port");
    snprintf(url, sizeof url, "rediss://127.0.0.1:%d?cacert=%s", plain.port, t.ca);
    expect_failure(url, SLUICE_ETLS, NULL, "TLS client, plaintext port");

    /* a CA file that cannot be loaded: an error at creation */
    {
        sluice__redis_url_t u;
        snprintf(url, sizeof url, "rediss://127.0.0.1:%d?cacert=%s/missing.crt", r.port, t.dir);
        CHECK(sluice__redis_url_parse(url, &u, NULL, 0) == 0, "parse");
        sluice__conn_opts_t o;
        memset(&o, 0, sizeof o);
        sluice__conn_t *c = NULL;
        char why[256];
        CHECK(sluice__conn_new(&c, base, &u, &o, why, sizeof why) == SLUICE_ETLS && c == NULL, "missing CA file");
        CHECK(strstr(why, "missing.crt") != NULL, "the message names the file: %s", why);
        sluice__redis_url_free(&u);
    }

    /* the fleet over TLS: Redis decides */
    sluice_fleet_config_t fc;
    memset(&fc, 0, sizeof fc);
    fc.policy = sluice_rate(2, (int64_t)SEC, 2);
    snprintf(url, sizeof url, "rediss://localhost:%d?cacert=%s", r.port, t.ca);
    fc.url = url;
    fc.timeout_ns = 2 * SEC;
    sluice_fleet_t *f = NULL;
    CHECK(sluice_fleet_new(&f, base, &fc) == 0, "fleet over TLS");
    tf_box_t b[3];
    memset(b, 0, sizeof b);
    for (int i = 0; i < 3; i++) CHECK(sluice_fleet_call(f, sluice_key_u64(5), 1, 0, tf_on_result, &b[i]) == 0, "call");
    for (int i = 0; i < 3; i++) tf_wait(base, &b[i]);
    for (int i = 0; i < 3; i++)
        CHECK(b[i].res.source == SLUICE_FLEET_SOURCE_REDIS &&
                  b[i].res.decision.kind == (i < 2 ? SLUICE_EMITTED : SLUICE_DROPPED),
              "fleet over TLS: call %d source %d cause %d", i, b[i].res.source, b[i].res.cause);
    sluice_fleet_free(f);
    snprintf(url, sizeof url, "rediss://localhost:%d?cacert=%s/missing.crt", r.port, t.dir);
    CHECK(sluice_fleet_new(&f, base, &fc) == SLUICE_ETLS, "fleet: a CA file that cannot be loaded");
    printf("  fleet over TLS: ok\n");
    test_redis_stop(&r);

    /* mTLS: the server asks for a client certificate */
    opts.tls_auth_clients = true;
    start(&r, &opts);
    snprintf(url, sizeof url, "rediss://localhost:%d?cacert=%s&cert=%s&key=%s", r.port, t.ca, t.client_cert,
             t.client_key);
    connect_and_ping(url, "mTLS with a client certificate");
    snprintf(url, sizeof url, "rediss://localhost:%d?cacert=%s", r.port, t.ca);
    expect_failure(url, SLUICE_ETLS, NULL, "mTLS without a client certificate");
    test_redis_stop(&r);
    test_redis_stop(&plain);
    test_tls_remove(&t);
}

int main(void) {
    signal(SIGPIPE, SIG_IGN);
    if (!test_redis_available()) {
        fprintf(stderr, TEST_NAME ": SKIPPED: redis-server not found\n");
        return 77;
    }
    base = event_base_new();
    CHECK(base, "event_base_new");
    test_backoff();
    test_plain();
    test_auth_unix_select();
    test_tls();
    event_base_free(base);
    printf(TEST_NAME ": ok\n");
    return 0;
}
