/* test_fleet_errors.c — Redis error replies are answered by the failure policy
 * with the cause of their class, counted per class, and are not mistaken for
 * "Redis is unreachable", against real redis-servers:
 *   OOM (maxmemory 1, noeviction)  -> SLUICE_EOOM, oom_errors; connection kept
 *   NOPERM (ACL without evalsha, eval and fcall) -> SLUICE_ENOPERM, noperm_errors; kept
 *   READONLY (a replica)           -> SLUICE_EREADONLY, readonly_errors; the
 *                                     connection is dropped and re-established
 *   NOAUTH (requirepass, no AUTH)  -> SLUICE_EAUTH, auth_errors; kept
 * Each kept connection decides again as soon as the condition is lifted. */
#define TEST_NAME "test_fleet_errors"
#include "test_fleet_util.h"

#include <hiredis/hiredis.h>

#define SEC 1000000000ull
#define MS 1000000ull

static struct event_base *base;

static sluice_fleet_t *fleet(int port, const char *prefix) {
    sluice_fleet_config_t c;
    memset(&c, 0, sizeof c);
    c.policy = sluice_rate(100, (int64_t)SEC, 100);
    c.port = port;
    c.prefix = prefix;
    c.prefix_len = strlen(prefix);
    c.manual_time = true;
    c.timeout_ns = 5 * SEC; /* a loaded machine must not turn a reply into a timeout */
    c.backoff_min_ns = 10 * MS;
    c.backoff_max_ns = 100 * MS;
    c.cache_slots = SIZE_MAX;
    sluice_fleet_t *f = NULL;
    CHECK(sluice_fleet_new(&f, base, &c) == 0, "sluice_fleet_new");
    return f;
}

static uint64_t key_n;

/* One call on a fresh key (so an admission, which writes). */
static sluice_fleet_result_t call(sluice_fleet_t *f) {
    tf_box_t b = { 0 };
    CHECK(sluice_fleet_call(f, sluice_key_u64(++key_n), 1, SEC, tf_on_result, &b) == 0, "call");
    tf_wait(base, &b);
    return b.res;
}

static void expect_failure(const sluice_fleet_result_t *r, int cause, const char *what) {
    CHECK(r->source == SLUICE_FLEET_SOURCE_FAILURE && r->cause == cause,
          "%s: source %d cause %d (%s), want the failure policy with cause %d (%s)", what, r->source, r->cause,
          sluice_strerror(r->cause), cause, sluice_strerror(cause));
    CHECK(r->decision.kind == SLUICE_DROPPED, "%s: fail closed must drop", what);
}

static void expect_redis(const sluice_fleet_result_t *r, const char *what) {
    CHECK(r->source == SLUICE_FLEET_SOURCE_REDIS && r->decision.kind == SLUICE_EMITTED,
          "%s: source %d cause %d (%s), want admitted by Redis", what, r->source, r->cause, sluice_strerror(r->cause));
}

static void command(int port, const char *line) {
    char out[256];
    CHECK(test_redis_command(port, line, out, sizeof out) == 0 && out[0] == '+', "%s: %s", line, out);
}

static sluice_fleet_stats_t stats(sluice_fleet_t *f) {
    sluice_fleet_stats_t s;
    CHECK(sluice_fleet_stats(f, &s) == 0, "stats");
    return s;
}

/* Waits (at most 30 s) until the replica on `port` is synchronised. */
static void wait_replica(int port) {
    redisContext *c = redisConnect("127.0.0.1", port);
    CHECK(c && !c->err, "redisConnect replica");
    uint64_t end = tf_mono() + 30 * SEC;
    for (;;) {
        redisReply *r = redisCommand(c, "INFO replication");
        bool up = r && r->type == REDIS_REPLY_STRING && strstr(r->str, "master_link_status:up");
        freeReplyObject(r);
        if (up) break;
        CHECK(tf_mono() < end, "the replica did not synchronise within 30 s");
        tf_run_for(base, 20);
    }
    redisFree(c);
}

int main(void) {
    test_redis_t redis, replica;
    tf_start_redis(&redis);
    base = event_base_new();
    CHECK(base, "event_base_new");

    /* OOM: the command is refused, Redis is fine: the connection stays */
    {
        sluice_fleet_t *f = fleet(redis.port, "oom");
        sluice_fleet_result_t r = call(f);
        expect_redis(&r, "before OOM");
        command(redis.port, "CONFIG SET maxmemory-policy noeviction");
        command(redis.port, "CONFIG SET maxmemory 1");
        r = call(f);
        expect_failure(&r, SLUICE_EOOM, "maxmemory 1");
        sluice_fleet_stats_t s = stats(f);
        CHECK(s.oom_errors >= 1, "oom_errors did not move");
        CHECK(s.disconnects == 0 && sluice_fleet_connected(f), "OOM dropped the connection");
        CHECK(s.bad_replies == 0, "OOM counted as a bad reply");
        /* a quota read writes nothing: Redis still answers it */
        tf_box_t q = { 0 };
        CHECK(sluice_fleet_quota(f, sluice_key_u64(1), 1, SEC, tf_on_result, &q) == 0, "quota");
        tf_wait(base, &q);
        CHECK(q.res.source == SLUICE_FLEET_SOURCE_REDIS, "quota read under OOM: source %d cause %d", q.res.source,
              q.res.cause);
        /* enough runs for the library's load to be tried again, under OOM:
         * refused for now, not for good (FCALL comes back below) */
        for (int i = 0; i < 70; i++) {
            tf_box_t qi = { 0 };
            CHECK(sluice_fleet_quota(f, sluice_key_u64(1), 1, SEC, tf_on_result, &qi) == 0, "quota");
            tf_wait(base, &qi);
            CHECK(qi.res.source == SLUICE_FLEET_SOURCE_REDIS, "quota read %d under OOM", i);
        }
        command(redis.port, "CONFIG SET maxmemory 0");
        r = call(f);
        expect_redis(&r, "after OOM");
        CHECK(stats(f).connects == 1, "reconnected after OOM");
        /* refused under OOM, FCALL gave way to EVALSHA; the library's load
         * is tried again after 64 runs, and FCALL comes back */
        for (int i = 0; i < 70; i++) {
            r = call(f);
            expect_redis(&r, "after OOM, by EVALSHA");
        }
        long long fcalls = tf_cmd_calls(redis.port, "fcall");
        r = call(f);
        expect_redis(&r, "after OOM, FCALL again");
        CHECK(tf_cmd_calls(redis.port, "fcall") == fcalls + 1, "FCALL again after OOM");
        sluice_fleet_free(f);
    }

    /* NOPERM: the default user may not run scripts */
    {
        sluice_fleet_t *f = fleet(redis.port, "perm");
        sluice_fleet_result_t r = call(f);
        expect_redis(&r, "before ACL");
        command(redis.port, "ACL SETUSER default -evalsha -eval -fcall");
        r = call(f);
        expect_failure(&r, SLUICE_ENOPERM, "no evalsha");
        sluice_fleet_stats_t s = stats(f);
        CHECK(s.noperm_errors >= 1, "noperm_errors did not move");
        CHECK(s.disconnects == 0, "NOPERM dropped the connection");
        command(redis.port, "ACL SETUSER default +@all");
        r = call(f);
        expect_redis(&r, "after ACL");
        sluice_fleet_free(f);
    }

    /* NOPERM for FCALL alone (a user who may load functions, not call them):
     * that batch again by EVALSHA, and EVALSHA from then on */
    {
        sluice_fleet_t *f = fleet(redis.port, "nofcall");
        sluice_fleet_result_t r = call(f);
        expect_redis(&r, "first call");
        r = call(f); /* by FCALL: the library's load was answered meanwhile */
        expect_redis(&r, "before ACL");
        command(redis.port, "ACL SETUSER default -fcall");
        for (int i = 0; i < 3; i++) {
            r = call(f);
            expect_redis(&r, "without fcall");
        }
        CHECK(stats(f).noperm_errors == 0, "a refused FCALL counted as an error");
        command(redis.port, "ACL SETUSER default +@all");
        sluice_fleet_free(f);
    }

    /* READONLY: a replica refuses the writes; the connection is dropped */
    {
        memset(&replica, 0, sizeof replica);
        CHECK(test_redis_start(&replica, 0) == 0, "start the replica");
        command(redis.port, "CONFIG SET repl-diskless-sync-delay 0"); /* default: the primary waits 5 s */
        char line[64];
        snprintf(line, sizeof line, "REPLICAOF 127.0.0.1 %d", redis.port);
        command(replica.port, line);
        wait_replica(replica.port);
        sluice_fleet_t *f = fleet(replica.port, "ro");
        sluice_fleet_result_t r = call(f);
        expect_failure(&r, SLUICE_EREADONLY, "a replica");
        CHECK(stats(f).readonly_errors >= 1, "readonly_errors did not move");
        uint64_t end = tf_mono() + 30 * SEC;
        while (stats(f).disconnects == 0) {
            CHECK(tf_mono() < end, "READONLY did not drop the connection within 30 s");
            tf_run_for(base, 10);
        }
        /* and it reconnects (to the same replica, for now) */
        while (stats(f).connects < 2) {
            CHECK(tf_mono() < end, "no reconnect after READONLY within 30 s");
            tf_run_for(base, 10);
        }
        sluice_fleet_free(f);
        test_redis_stop(&replica);
    }

    /* NOAUTH: the server wants a password the limiter did not send */
    {
        command(redis.port, "CONFIG SET requirepass test-only-password");
        sluice_fleet_t *f = fleet(redis.port, "auth");
        sluice_fleet_result_t r = call(f);
        expect_failure(&r, SLUICE_EAUTH, "requirepass");
        sluice_fleet_stats_t s = stats(f);
        CHECK(s.auth_errors >= 1, "auth_errors did not move");
        CHECK(s.bad_replies == 0, "NOAUTH counted as a bad reply");
        sluice_fleet_free(f);
    }

    event_base_free(base);
    test_redis_stop(&redis);
    printf(TEST_NAME ": ok\n");
    return 0;
}
