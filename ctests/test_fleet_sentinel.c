/* test_fleet_sentinel.c — the fleet limiter behind Redis Sentinel, with real
 * servers on loopback: a primary, a replica and a sentinel (plus one with a
 * password, on another master name). Discovery (past an unreachable sentinel),
 * the ROLE check that refuses a replica a lagging sentinel could name,
 * an unknown master name (SLUICE_ENOMASTER, fast), a wrong sentinel password
 * (SLUICE_EAUTH), no sentinel reachable (SLUICE_ENOTCONN); TLS and
 * passwords everywhere (a TLS-only primary with a password, a TLS sentinel
 * with its own, discovery and decisions over rediss+sentinel://, a wrong
 * data password, a wrong CA); then a steady
 * stream of calls through a forced failover (SENTINEL FAILOVER) and through
 * the SIGKILL of the primary: every call answered within its timeout, the
 * fleet back on the new primary within a bound after Sentinel names it, and
 * the over-admission on the one key measured and bounded. Last, a READONLY
 * reply with no +switch-master message: the reconnect asks the sentinel
 * again and goes where it now points.
 *
 * Label "topology" (seconds of real time): `make test-topology`. */
#define TEST_NAME "test_fleet_sentinel"
#include "test_fleet_util.h"
#include "support/tls_certs.h"

#include <hiredis/hiredis.h>
#include <unistd.h>

#include "conn.h"

#define SEC 1000000000ull
#define MS 1000000ull
#define MASTER "mymaster"
/* Sentinel names the new primary, then the fleet must be on it within this
 * (generous for a loaded CI machine: the fleet itself needs milliseconds) */
#define BACK_BOUND (15 * SEC)
/* Sentinel must finish a failover within this (down-after 1 s, election, promotion) */
#define FAILOVER_BOUND (40 * SEC)
#define CALL_TIMEOUT (50 * MS)
/* an answer may come this late past its timeout on a loaded machine */
#define ANSWER_SLACK (3000 * MS)

static struct event_base *base;

/* ---- synchronous helpers (hiredis, 5 s timeouts) */

/* The port of the primary the sentinel names for `name`, or -1. */
static int sentinel_primary_of(int sport, const char *name) {
    redisReply *r = tf_cmd(sport, "SENTINEL get-master-addr-by-name %s", name);
    int port = -1;
    if (r && r->type == REDIS_REPLY_ARRAY && r->elements == 2) port = atoi(r->element[1]->str);
    if (r) freeReplyObject(r);
    return port;
}

static int sentinel_primary(int sport) { return sentinel_primary_of(sport, MASTER); }

/* Whether `text` appears in the reply (a string, or any element of an array,
 * one level of nesting). */
static bool reply_has(const redisReply *r, const char *text) {
    if (!r) return false;
    if ((r->type == REDIS_REPLY_STRING || r->type == REDIS_REPLY_STATUS) && strstr(r->str, text)) return true;
    if (r->type == REDIS_REPLY_ARRAY)
        for (size_t i = 0; i < r->elements; i++)
            if (reply_has(r->element[i], text)) return true;
    return false;
}

static void sleep_ms(int ms) {
    struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };
    nanosleep(&ts, NULL);
}

/* Waits (bounded) until `primary` shows replica `rport` online and the
 * sentinel lists it: only then can Sentinel fail over to it. */
static void wait_replica_known(int primary, int rport, int sport) {
    char want[64];
    snprintf(want, sizeof want, "port=%d,state=online", rport);
    uint64_t end = tf_mono() + 60 * SEC;
    for (;;) {
        redisReply *info = tf_cmd(primary, "INFO replication");
        bool online = info && info->type == REDIS_REPLY_STRING && strstr(info->str, want);
        if (info) freeReplyObject(info);
        redisReply *reps = tf_cmd(sport, "SENTINEL replicas %s", MASTER);
        char port_s[16];
        snprintf(port_s, sizeof port_s, "%d", rport);
        bool listed = reps && reply_has(reps, port_s) && !reply_has(reps, "disconnected") && !reply_has(reps, "s_down");
        if (reps) freeReplyObject(reps);
        if (online && listed) return;
        CHECK(tf_mono() < end, "replica %d not online and known to the sentinel within 60 s", rport);
        sleep_ms(100);
    }
}

/* ---- servers */

static test_redis_t primary, replica, sentinel, locked;

static void start_data(test_redis_t *r) {
    tf_start_redis(r);
    /* no 5 s diskless-sync delay: a replica syncs at once */
    redisReply *x = tf_cmd(r->port, "CONFIG SET repl-diskless-sync-delay 0");
    CHECK(x && x->type == REDIS_REPLY_STATUS, "CONFIG SET on %d", r->port);
    freeReplyObject(x);
}

static void start_sentinel(test_redis_t *s, const char *name, int port, const char *extra) {
    char conf[512];
    snprintf(conf, sizeof conf,
             "sentinel monitor %s 127.0.0.1 %d 1\n"
             "sentinel down-after-milliseconds %s 1000\n"
             "sentinel failover-timeout %s 5000\n%s",
             name, port, name, name, extra);
    test_redis_opts_t o;
    memset(&o, 0, sizeof o);
    o.sentinel_conf = conf;
    memset(s, 0, sizeof *s);
    CHECK(test_redis_start_opts(s, 0, &o) == 0, "cannot start a sentinel");
}

/* ---- fleets */

static sluice_fleet_t *fleet(const char *url) {
    sluice_fleet_config_t fc;
    memset(&fc, 0, sizeof fc);
    fc.policy = sluice_rate(2, (int64_t)SEC, 2);
    fc.url = url;
    fc.timeout_ns = CALL_TIMEOUT;
    fc.on_failure = SLUICE_FLEET_FAIL_CLOSED;
    fc.cache_slots = SIZE_MAX; /* every call goes to Redis */
    sluice_fleet_t *f = NULL;
    int rc = sluice_fleet_new(&f, base, &fc);
    CHECK(rc == 0, "fleet_new %s: %d", url, rc);
    return f;
}

/* Runs the loop until the fleet's last error is `want` (bounded). */
static void wait_error(sluice_fleet_t *f, int want, uint64_t bound, char *msg, size_t msg_len) {
    uint64_t end = tf_mono() + bound;
    int err;
    while ((err = sluice_fleet_last_error(f, msg, msg_len)) != want) {
        CHECK(tf_mono() < end, "last error %d (%s), not %d, within %llu ms", err, msg, want,
              (unsigned long long)(bound / MS));
        event_base_loop(base, EVLOOP_ONCE | EVLOOP_NONBLOCK);
        sleep_ms(1);
    }
}

/* Calls until one is decided by Redis (bounded). */
static void wait_redis(sluice_fleet_t *f, uint64_t key) {
    uint64_t end = tf_mono() + 10 * SEC;
    for (;;) {
        tf_box_t b;
        memset(&b, 0, sizeof b);
        CHECK(sluice_fleet_quota(f, sluice_key_u64(key), 1, 0, tf_on_result, &b) == 0, "quota");
        tf_wait(base, &b);
        if (b.res.source == SLUICE_FLEET_SOURCE_REDIS) return;
        char msg[320];
        int err = sluice_fleet_last_error(f, msg, sizeof msg);
        CHECK(tf_mono() < end, "not on Redis within 10 s (cause %d, last error %d: %s)", b.res.cause, err, msg);
        tf_run_for(base, 20);
    }
}

static void test_discovery(void) {
    char url[256];
    /* the first sentinel is unreachable: the next one is asked */
    snprintf(url, sizeof url, "redis+sentinel://127.0.0.1:%d,127.0.0.1:%d/%s", test_free_port(), sentinel.port, MASTER);
    sluice_fleet_t *f = fleet(url);
    wait_redis(f, 1);
    tf_box_t b[3];
    memset(b, 0, sizeof b);
    for (int i = 0; i < 3; i++) CHECK(sluice_fleet_call(f, sluice_key_u64(7), 1, 0, tf_on_result, &b[i]) == 0, "call");
    for (int i = 0; i < 3; i++) tf_wait(base, &b[i]);
    for (int i = 0; i < 3; i++)
        CHECK(b[i].res.source == SLUICE_FLEET_SOURCE_REDIS &&
                  b[i].res.decision.kind == (i < 2 ? SLUICE_EMITTED : SLUICE_DROPPED),
              "discovery: call %d source %d cause %d kind %d", i, b[i].res.source, b[i].res.cause,
              b[i].res.decision.kind);
    /* the state is on the primary the sentinel names */
    redisReply *n = tf_cmd(primary.port, "DBSIZE");
    CHECK(n && n->type == REDIS_REPLY_INTEGER && n->integer >= 1, "the key is on the primary");
    freeReplyObject(n);
    sluice_fleet_free(f);
    printf("  discovery: ok\n");
}

/* A sentinel that lags may name a demoted primary: the data connection asks
 * ROLE (check_primary) and refuses a replica with SLUICE_EREADONLY (the fleet
 * then rediscovers after the backoff). */
static int role_failed, role_err, role_up;
static void role_event(void *owner, sluice__conn_event_t ev, int err) {
    (void)owner;
    if (ev == SLUICE__CONN_UP) role_up++;
    if (ev == SLUICE__CONN_FAILED) {
        role_failed++;
        role_err = err;
    }
}

static void check_role(int port, bool primary_expected) {
    char url[64], why[256];
    snprintf(url, sizeof url, "redis://127.0.0.1:%d", port);
    sluice__redis_url_t u;
    CHECK(sluice__redis_url_parse(url, &u, why, sizeof why) == 0, "parse");
    sluice__conn_opts_t o;
    memset(&o, 0, sizeof o);
    o.connect_timeout_ns = 2 * SEC;
    o.backoff_min_ns = 5 * SEC; /* one attempt in this test */
    o.backoff_max_ns = 5 * SEC;
    o.on_event = role_event;
    o.check_primary = true;
    sluice__conn_t *c = NULL;
    CHECK(sluice__conn_new(&c, base, &u, &o, why, sizeof why) == 0, "conn_new: %s", why);
    sluice__redis_url_free(&u);
    role_failed = role_up = role_err = 0;
    uint64_t end = tf_mono() + 5 * SEC;
    while (!role_failed && !role_up) {
        CHECK(tf_mono() < end, "no ROLE outcome within 5 s");
        event_base_loop(base, EVLOOP_ONCE | EVLOOP_NONBLOCK);
        sleep_ms(1);
    }
    const char *msg = NULL;
    sluice__conn_error(c, &msg);
    if (primary_expected) {
        CHECK(role_up == 1 && sluice__conn_ready(c), "the primary passes the ROLE check (%s)", msg);
    } else {
        CHECK(role_failed == 1 && role_err == SLUICE_EREADONLY && strstr(msg, "is not a primary"),
              "a replica fails the ROLE check: err %d, %s", role_err, msg);
    }
    sluice__conn_free(c);
}

static void test_role_check(void) {
    check_role(primary.port, true);
    check_role(replica.port, false);
    printf("  ROLE check (a replica is refused): ok\n");
}

static void test_errors(void) {
    char url[256], msg[320];
    /* an unknown master name: fast, with its own code, naming the master */
    snprintf(url, sizeof url, "redis+sentinel://127.0.0.1:%d/nosuchmaster", sentinel.port);
    sluice_fleet_t *f = fleet(url);
    uint64_t t0 = tf_mono();
    wait_error(f, SLUICE_ENOMASTER, 1 * SEC + 2 * SEC, msg, sizeof msg); /* connect timeout 1 s + slack */
    printf("  unknown master: reported in %llu ms: %s\n", (unsigned long long)((tf_mono() - t0) / MS), msg);
    CHECK(strstr(msg, "nosuchmaster") != NULL, "the message names the master: %s", msg);
    tf_box_t b;
    memset(&b, 0, sizeof b);
    CHECK(sluice_fleet_call(f, sluice_key_u64(1), 1, 0, tf_on_result, &b) == 0, "call");
    tf_wait(base, &b);
    CHECK(b.res.source == SLUICE_FLEET_SOURCE_FAILURE && b.res.decision.kind == SLUICE_DROPPED,
          "unknown master: the failure policy answers (source %d)", b.res.source);
    CHECK(b.res.cause == SLUICE_ENOMASTER || b.res.cause == SLUICE_ETIMEDOUT, "unknown master: cause %d", b.res.cause);
    sluice_fleet_free(f);

    /* a wrong sentinel password: EAUTH, the password in no message */
    snprintf(url, sizeof url, "redis+sentinel://127.0.0.1:%d/other?sentinel_password=wrongpw", locked.port);
    f = fleet(url);
    wait_error(f, SLUICE_EAUTH, 3 * SEC, msg, sizeof msg);
    CHECK(strstr(msg, "wrongpw") == NULL, "no password in the message: %s", msg);
    sluice_fleet_free(f);
    /* the right one: discovery works (the primary itself has no password) */
    snprintf(url, sizeof url, "redis+sentinel://127.0.0.1:%d/other?sentinel_password=sentpw", locked.port);
    f = fleet(url);
    wait_redis(f, 2);
    sluice_fleet_free(f);

    /* no sentinel reachable */
    snprintf(url, sizeof url, "redis+sentinel://127.0.0.1:%d,127.0.0.1:%d/%s", test_free_port(), test_free_port(),
             MASTER);
    f = fleet(url);
    wait_error(f, SLUICE_ENOTCONN, 3 * SEC, msg, sizeof msg);
    CHECK(strstr(msg, "no sentinel answered") != NULL, "message: %s", msg);
    sluice_fleet_free(f);
    printf("  errors (unknown master, sentinel password, no sentinel): ok\n");
}

/* ---- failover under a steady stream of calls */

#define MAX_CALLS 200000

typedef struct stream {
    tf_box_t box[MAX_CALLS];
    uint64_t sent_at[MAX_CALLS];
    int n;
} stream_t;

static stream_t st;

static void issue(sluice_fleet_t *f) {
    CHECK(st.n < MAX_CALLS, "too many calls");
    memset(&st.box[st.n], 0, sizeof st.box[0]);
    st.sent_at[st.n] = tf_mono();
    CHECK(sluice_fleet_call(f, sluice_key_u64(42), 1, 0, tf_on_result, &st.box[st.n]) == 0, "call");
    st.n++;
}

/* Runs the stream (a call every ~2 ms) for `ns`, or until `until` returns true. */
static void stream_for(sluice_fleet_t *f, uint64_t ns, bool (*until)(void)) {
    uint64_t end = tf_mono() + ns;
    while (tf_mono() < end && !(until && until())) {
        issue(f);
        uint64_t next = tf_mono() + 2 * MS;
        while (tf_mono() < next) {
            event_base_loop(base, EVLOOP_ONCE | EVLOOP_NONBLOCK);
            sleep_ms(1);
        }
    }
}

static int first_unseen; /* calls before it were sent before the new primary was named */
static bool redis_after_switch(void) {
    for (int i = first_unseen; i < st.n; i++)
        if (st.box[i].done && st.box[i].res.source == SLUICE_FLEET_SOURCE_REDIS) return true;
    return false;
}

/* Fails over (forced, or by SIGKILL of the primary) under the stream. */
static void failover(sluice_fleet_t *f, test_redis_t *old, test_redis_t *next, bool kill_it, const char *label,
                     uint64_t lim_per_s, uint64_t burst) {
    wait_replica_known(old->port, next->port, sentinel.port);
    memset(&st, 0, sizeof st);
    stream_for(f, 1 * SEC, NULL); /* steady: Redis decides */
    int steady_redis = 0;
    for (int i = 0; i < st.n; i++) steady_redis += st.box[i].done && st.box[i].res.source == SLUICE_FLEET_SOURCE_REDIS;
    CHECK(steady_redis > 0, "%s: Redis decides before", label);
    uint64_t t_fail = tf_mono();
    int i_fail = st.n;
    if (kill_it) {
        test_redis_signal(old, SIGKILL);
    } else {
        redisReply *r = tf_cmd(sentinel.port, "SENTINEL failover %s", MASTER);
        CHECK(r && r->type == REDIS_REPLY_STATUS, "SENTINEL failover: %s", r && r->str ? r->str : "no reply");
        freeReplyObject(r);
    }
    /* the stream goes on until Sentinel names the new primary */
    uint64_t t_named = 0;
    uint64_t end = tf_mono() + FAILOVER_BOUND;
    while (!t_named) {
        CHECK(tf_mono() < end, "%s: Sentinel named no new primary within %llu s", label,
              (unsigned long long)(FAILOVER_BOUND / SEC));
        stream_for(f, 50 * MS, NULL);
        if (sentinel_primary(sentinel.port) == next->port) t_named = tf_mono();
    }
    first_unseen = st.n;
    stream_for(f, BACK_BOUND, redis_after_switch);
    uint64_t t_back = tf_mono();
    CHECK(redis_after_switch(), "%s: not back on Redis within %llu s after Sentinel named the new primary", label,
          (unsigned long long)(BACK_BOUND / SEC));
    stream_for(f, 500 * MS, NULL);
    /* every call is answered, none later than its timeout (+ slack) */
    for (int i = 0; i < st.n; i++) tf_wait(base, &st.box[i]);
    uint64_t worst = 0, span_first = 0, span_last = 0, fail_first = 0, fail_last = 0;
    int admitted = 0, failure = 0, admitted_window = 0;
    for (int i = 0; i < st.n; i++) {
        CHECK(st.box[i].done == 1, "%s: call %d answered %d times", label, i, st.box[i].done);
        uint64_t lat = st.box[i].answered_at - st.sent_at[i];
        if (lat > worst) worst = lat;
        const sluice_fleet_result_t *r = &st.box[i].res;
        if (r->source == SLUICE_FLEET_SOURCE_FAILURE) {
            failure++;
            if (!fail_first) fail_first = st.sent_at[i];
            fail_last = st.box[i].answered_at;
        }
        if (r->source == SLUICE_FLEET_SOURCE_REDIS && r->decision.kind == SLUICE_EMITTED) {
            admitted++;
            if (!span_first) span_first = r->now;
            span_last = r->now;
            /* admitted by the old primary from just before the failover on:
             * the writes replication may not have carried over */
            if (i >= i_fail - 50 && st.box[i].answered_at < t_back) admitted_window++;
        }
    }
    CHECK(worst <= CALL_TIMEOUT + ANSWER_SLACK, "%s: an answer took %llu ms", label, (unsigned long long)(worst / MS));
    /* GCRA allows burst + rate * span over the span of the admissions */
    uint64_t allowed = burst + (span_last - span_first) * lim_per_s / SEC + 1;
    int over = admitted > (int)allowed ? admitted - (int)allowed : 0;
    printf("  %s: %d calls, %d answered by the failure policy (within %llu ms); Sentinel named the new primary "
           "after %llu ms, the fleet was back on Redis %llu ms later; worst answer %llu ms; admitted %d, allowed %llu: "
           "over-admission %d (bound %d)\n",
           label, st.n, failure, (unsigned long long)((fail_last - fail_first) / MS),
           (unsigned long long)((t_named - t_fail) / MS), (unsigned long long)((t_back - t_named) / MS),
           (unsigned long long)(worst / MS), admitted, (unsigned long long)allowed, over, admitted_window);
    CHECK(over <= admitted_window, "%s: over-admission %d beyond the calls admitted around the failover (%d)", label,
          over, admitted_window);
    CHECK(failure > 0 || !kill_it, "%s: the failure policy answered during the outage", label);
}

static void test_failover(void) {
    char url[256];
    snprintf(url, sizeof url, "redis+sentinel://127.0.0.1:%d/%s", sentinel.port, MASTER);
    sluice_fleet_config_t fc;
    memset(&fc, 0, sizeof fc);
    /* 50 calls/s, burst 10, against a stream of ~400 calls/s: the key is
     * saturated, so every write lost in the failover shows as over-admission */
    const uint64_t lim = 50, burst = 10;
    fc.policy = sluice_rate(lim, (int64_t)SEC, burst);
    fc.url = url;
    fc.timeout_ns = CALL_TIMEOUT;
    fc.on_failure = SLUICE_FLEET_FAIL_CLOSED;
    fc.cache_slots = SIZE_MAX;
    sluice_fleet_t *f = NULL;
    CHECK(sluice_fleet_new(&f, base, &fc) == 0, "fleet");
    wait_redis(f, 3);
    failover(f, &primary, &replica, false, "forced failover", lim, burst);
    /* the old primary is now the new one's replica: kill the new primary */
    failover(f, &replica, &primary, true, "SIGKILL of the primary", lim, burst);
    sluice_fleet_stats_t s;
    sluice_fleet_stats(f, &s);
    CHECK(s.connects >= 3, "connected three times (%llu)", (unsigned long long)s.connects);
    sluice_fleet_free(f);
}

/* A READONLY reply, without any +switch-master: the fleet leaves the node and
 * its reconnect asks the sentinel again. The sentinel is re-pointed by hand
 * (SENTINEL REMOVE / MONITOR publish no +switch-master), then the old node
 * is made a replica, so its next script run is refused with READONLY. */
static void test_readonly_rediscovery(void) {
    test_redis_t x, y, s;
    start_data(&x);
    start_data(&y);
    start_sentinel(&s, "moved", x.port, "");
    char url[256];
    snprintf(url, sizeof url, "redis+sentinel://127.0.0.1:%d/moved", s.port);
    sluice_fleet_t *f = fleet(url);
    wait_redis(f, 11);
    redisReply *r = tf_cmd(s.port, "SENTINEL REMOVE moved");
    CHECK(r && r->type == REDIS_REPLY_STATUS, "SENTINEL REMOVE");
    freeReplyObject(r);
    r = tf_cmd(s.port, "SENTINEL MONITOR moved 127.0.0.1 %d 1", y.port);
    CHECK(r && r->type == REDIS_REPLY_STATUS, "SENTINEL MONITOR");
    freeReplyObject(r);
    CHECK(sentinel_primary_of(s.port, "moved") == y.port, "the sentinel names the other node");
    r = tf_cmd(x.port, "REPLICAOF 127.0.0.1 %d", y.port);
    CHECK(r && r->type == REDIS_REPLY_STATUS, "REPLICAOF");
    freeReplyObject(r);
    /* calls until one is decided by Redis on y: its key appears there */
    uint64_t end = tf_mono() + 10 * SEC;
    for (;;) {
        tf_box_t b;
        memset(&b, 0, sizeof b);
        CHECK(sluice_fleet_call(f, sluice_key_u64(12), 1, 0, tf_on_result, &b) == 0, "call");
        tf_wait(base, &b);
        redisReply *n = tf_cmd(y.port, "DBSIZE");
        bool on_y = b.res.source == SLUICE_FLEET_SOURCE_REDIS && n && n->type == REDIS_REPLY_INTEGER && n->integer > 0;
        if (n) freeReplyObject(n);
        if (on_y) break;
        CHECK(tf_mono() < end, "not on the node the sentinel names within 10 s (cause %d)", b.res.cause);
        tf_run_for(base, 20);
    }
    sluice_fleet_stats_t st_;
    sluice_fleet_stats(f, &st_);
    CHECK(st_.readonly_errors >= 1 && st_.connects >= 2, "left on READONLY (%llu), reconnected (%llu)",
          (unsigned long long)st_.readonly_errors, (unsigned long long)st_.connects);
    sluice_fleet_free(f);
    test_redis_stop(&s);
    test_redis_stop(&x);
    test_redis_stop(&y);
    printf("  READONLY without +switch-master: rediscovered: ok\n");
}

/* TLS and passwords everywhere: a primary reached only over TLS with a
 * password, a sentinel reached only over TLS (tls-port, its plain port aside)
 * with a password of its own, which monitors the primary over TLS
 * (tls-replication) with the primary's password. The fleet discovers the
 * primary through the sentinel over TLS and is decided by Redis; a wrong
 * data password is EAUTH without the password in the message, and a CA
 * that signed nothing is ETLS. */
static void test_tls_passwords(void) {
    if (!test_tls_available()) {
        printf("  TLS and passwords behind Sentinel: SKIPPED (no openssl command)\n");
        return;
    }
    test_tls_certs_t t;
    CHECK(test_tls_make(&t) == 0, "cannot make the test certificates");
    test_redis_opts_t o;
    memset(&o, 0, sizeof o);
    o.tls = true;
    o.tls_cert = t.server_cert;
    o.tls_key = t.server_key;
    o.tls_ca = t.ca;
    o.requirepass = "data-Pw-7";
    test_redis_t data, sent;
    memset(&data, 0, sizeof data);
    CHECK(test_redis_start_opts(&data, 0, &o) == 0, "cannot start the TLS primary");
    int tls_port = test_free_port();
    char extra[1024];
    snprintf(extra, sizeof extra,
             "sentinel auth-pass tlsm data-Pw-7\n"
             "requirepass sent-Pw-8\n"
             "tls-port %d\ntls-cert-file %s\ntls-key-file %s\ntls-ca-cert-file %s\n"
             "tls-auth-clients no\ntls-replication yes\n",
             tls_port, t.server_cert, t.server_key, t.ca);
    start_sentinel(&sent, "tlsm", data.port, extra);
    char url[768];
    snprintf(url, sizeof url, "rediss+sentinel://:data-Pw-7@127.0.0.1:%d/tlsm?cacert=%s&sentinel_password=sent-Pw-8",
             tls_port, t.ca);
    sluice_fleet_t *f = fleet(url);
    wait_redis(f, 1);
    tf_box_t b;
    memset(&b, 0, sizeof b);
    CHECK(sluice_fleet_call(f, sluice_key_u64(2), 1, 0, tf_on_result, &b) == 0, "call");
    tf_wait(base, &b);
    CHECK(b.res.source == SLUICE_FLEET_SOURCE_REDIS && b.res.decision.kind == SLUICE_EMITTED,
          "over TLS behind Sentinel: source %d kind %d", b.res.source, b.res.decision.kind);
    sluice_fleet_free(f);

    char msg[320];
    snprintf(url, sizeof url, "rediss+sentinel://:wrong-Pw-9@127.0.0.1:%d/tlsm?cacert=%s&sentinel_password=sent-Pw-8",
             tls_port, t.ca);
    f = fleet(url);
    wait_error(f, SLUICE_EAUTH, 10 * SEC, msg, sizeof msg);
    CHECK(strstr(msg, "wrong-Pw-9") == NULL && strstr(msg, "sent-Pw-8") == NULL, "a password in '%s'", msg);
    sluice_fleet_free(f);

    snprintf(url, sizeof url, "rediss+sentinel://:data-Pw-7@127.0.0.1:%d/tlsm?cacert=%s&sentinel_password=sent-Pw-8",
             tls_port, t.other_ca);
    f = fleet(url);
    wait_error(f, SLUICE_ETLS, 10 * SEC, msg, sizeof msg);
    sluice_fleet_free(f);

    test_redis_stop(&sent);
    test_redis_stop(&data);
    test_tls_remove(&t);
    printf("  TLS and passwords behind Sentinel (discovery over TLS, wrong password, wrong CA): ok\n");
}

int main(void) {
    signal(SIGPIPE, SIG_IGN);
    if (!test_redis_available()) {
        fprintf(stderr, TEST_NAME ": SKIPPED: redis-server not found\n");
        return 77;
    }
    base = event_base_new();
    CHECK(base, "event_base_new");
    start_data(&primary);
    start_data(&replica);
    redisReply *r = tf_cmd(replica.port, "REPLICAOF 127.0.0.1 %d", primary.port);
    CHECK(r && r->type == REDIS_REPLY_STATUS, "REPLICAOF");
    freeReplyObject(r);
    start_sentinel(&sentinel, MASTER, primary.port, "");
    start_sentinel(&locked, "other", primary.port, "requirepass sentpw\n");

    test_discovery();
    test_role_check();
    test_errors();
    test_tls_passwords();
    test_failover();
    test_readonly_rediscovery();

    test_redis_stop(&locked);
    test_redis_stop(&sentinel);
    test_redis_stop(&replica);
    test_redis_stop(&primary);
    event_base_free(base);
    printf(TEST_NAME ": ok\n");
    return 0;
}
