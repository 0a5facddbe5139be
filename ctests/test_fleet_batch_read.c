/* test_fleet_batch_read.c — a batch of calls reads its keys' values with one
 * MGET, and (when MGET finds no value for some) one EXISTS, instead of a
 * GET per key (fleet_script.c, preload); and it decides exactly as before
 * where that read cannot be trusted or made: a key of another type among
 * absent keys (MGET reads it as no value: each is read again with GET,
 * which names it WRONGTYPE), and a user whose ACL allows neither MGET nor
 * EXISTS (the limiter's documented minimum): every key is read with GET.
 * Every healthy call of one quota is checked against the model of
 * test_fleet_util.h; under plans, a batch's healthy calls decide alike with
 * and without a list among them. */
#define TEST_NAME "test_fleet_batch_read"
#include "test_fleet_util.h"

#include <hiredis/hiredis.h>

#define SEC 1000000000ull
#define LIMIT 10
#define BURST 3
#define KEYS 16  /* the model holds 16 */
#define ROUNDS 2 /* calls per key in one batch */

static struct event_base *base;
static int port;

static sluice_fleet_t *fleet(const char *prefix, const char *url) {
    sluice_fleet_config_t c;
    memset(&c, 0, sizeof c);
    c.policy = sluice_rate(LIMIT, (int64_t)SEC, BURST);
    c.port = port;
    c.url = url;
    c.prefix = prefix;
    c.prefix_len = strlen(prefix);
    c.manual_time = true;
    c.timeout_ns = 5 * SEC;
    c.on_failure = SLUICE_FLEET_FAIL_CLOSED;
    c.cache_slots = SIZE_MAX; /* every call reaches Redis */
    c.max_batch = 64;
    sluice_fleet_t *f = NULL;
    CHECK(sluice_fleet_new(&f, base, &c) == 0, "sluice_fleet_new");
    return f;
}

typedef struct counts {
    long long mget, exists, get;
} counts_t;

static counts_t counts(void) {
    return (counts_t){ tf_cmd_calls(port, "mget"), tf_cmd_calls(port, "exists"), tf_cmd_calls(port, "get") };
}

/* ROUNDS calls on each of keys 0..KEYS-1 at time t (and one on each key of
 * `bad`, the keys whose Redis values are not Sluice state), submitted before
 * the loop runs, so one batch; the healthy ones checked against `m`, the
 * bad ones answered by the failure policy with EBADVALUE. */
static void volley(sluice_fleet_t *f, tf_model_t *m, uint64_t t, const char *const *bad, int nbad) {
    static tf_box_t box[ROUNDS * KEYS + 8];
    int n = 0;
    sluice_fleet_stats_t before, after;
    sluice_fleet_stats(f, &before);
    for (int r = 0; r < ROUNDS; r++)
        for (int k = 0; k < KEYS; k++, n++) {
            memset(&box[n], 0, sizeof box[n]);
            CHECK(sluice_fleet_call(f, sluice_key_u64((uint64_t)k), 1, t, tf_on_result, &box[n]) == 0, "call");
        }
    for (int b = 0; b < nbad; b++, n++) {
        memset(&box[n], 0, sizeof box[n]);
        CHECK(sluice_fleet_call(f, sluice_key_bytes(bad[b], strlen(bad[b])), 1, t, tf_on_result, &box[n]) == 0, "call");
    }
    for (int i = 0; i < n; i++) tf_wait(base, &box[i]);
    sluice_fleet_stats(f, &after);
    CHECK(after.batches - before.batches == 1, "%llu script runs, want one batch",
          (unsigned long long)(after.batches - before.batches));
    for (int i = 0; i < n; i++) {
        const sluice_fleet_result_t *res = &box[i].res;
        if (i >= ROUNDS * KEYS) {
            CHECK(res->source == SLUICE_FLEET_SOURCE_FAILURE && res->cause == SLUICE_EBADVALUE,
                  "bad key %d: source %d cause %d", i - ROUNDS * KEYS, res->source, res->cause);
            continue;
        }
        int k = i % KEYS;
        sluice_decision_t want = tf_model_call(m, k, t, 1);
        CHECK(res->status == 0 && res->source == SLUICE_FLEET_SOURCE_REDIS && res->decision.kind == want.kind &&
                  res->decision.at == want.at && res->decision.remaining == want.remaining,
              "call %d (key %d): status %d source %d kind %d at %llu, model kind %d at %llu", i, k, res->status,
              res->source, res->decision.kind, (unsigned long long)res->decision.at, want.kind,
              (unsigned long long)want.at);
    }
}

/* The Redis names of the byte keys `a` and `b` of `f`, found by the keys
 * their calls create. */
static void names_of(sluice_fleet_t *f, const char *a, const char *b, char *na, char *nb, size_t cap) {
    const char *in[2] = { a, b };
    char *out[2] = { na, nb };
    for (int i = 0; i < 2; i++) {
        freeReplyObject(tf_ok("FLUSHALL"));
        tf_box_t box = { 0 };
        CHECK(sluice_fleet_call(f, sluice_key_bytes(in[i], strlen(in[i])), 1, 0, tf_on_result, &box) == 0, "call");
        tf_wait(base, &box);
        redisReply *r = tf_ok("KEYS *");
        CHECK(r->type == REDIS_REPLY_ARRAY && r->elements == 1 && r->element[0]->len < cap, "one key expected");
        memcpy(out[i], r->element[0]->str, r->element[0]->len);
        out[i][r->element[0]->len] = '\0';
        freeReplyObject(r);
    }
    freeReplyObject(tf_ok("FLUSHALL"));
}

int main(void) {
    test_redis_t redis;
    tf_start_redis(&redis);
    port = redis.port;
    base = event_base_new();
    CHECK(base, "event_base_new");
    tf_connect(port);

    /* 1. healthy keys: one MGET per batch; one EXISTS while some have no
     * value (here: none has), none once all have; no GET */
    {
        sluice_fleet_t *f = fleet("br1", NULL);
        tf_model_t m = { LIMIT, SEC, BURST, KEYS, { 0 } };
        counts_t c0 = counts();
        volley(f, &m, 1000 * SEC, NULL, 0);
        counts_t c1 = counts();
        volley(f, &m, 1000 * SEC + SEC / 20, NULL, 0); /* every key has a value now */
        counts_t c2 = counts();
        CHECK(c1.mget - c0.mget == 1 && c1.exists - c0.exists == 1 && c1.get == c0.get,
              "new keys: %lld MGET, %lld EXISTS, %lld GET; want 1, 1, 0", c1.mget - c0.mget, c1.exists - c0.exists,
              c1.get - c0.get);
        CHECK(c2.mget - c1.mget == 1 && c2.exists == c1.exists && c2.get == c1.get,
              "known keys: %lld MGET, %lld EXISTS, %lld GET; want 1, 0, 0", c2.mget - c1.mget, c2.exists - c1.exists,
              c2.get - c1.get);
        sluice_fleet_free(f);
    }

    /* 2. a list (MGET reads it as no value) and a plain string among absent
     * keys: the absent ones are read again one by one, the list is named
     * WRONGTYPE, the string BADVALUE; the healthy keys are exact, and
     * neither foreign value is touched */
    {
        sluice_fleet_t *f = fleet("br2", NULL);
        char list[128], hello[128];
        names_of(f, "bl", "bh", list, hello, sizeof list);
        freeReplyObject(tf_ok("RPUSH %s x", list));
        freeReplyObject(tf_ok("SET %s hello", hello));
        tf_model_t m = { LIMIT, SEC, BURST, KEYS, { 0 } };
        const char *bad[] = { "bl", "bh" };
        counts_t c0 = counts();
        volley(f, &m, 2000 * SEC, bad, 2);
        counts_t c1 = counts();
        CHECK(c1.mget - c0.mget == 1 && c1.exists - c0.exists == 1 && c1.get - c0.get >= KEYS,
              "absent keys beside a list: %lld MGET, %lld EXISTS, %lld GET; want 1, 1, at least %d", c1.mget - c0.mget,
              c1.exists - c0.exists, c1.get - c0.get, KEYS);
        redisReply *r = tf_ok("LLEN %s", list);
        CHECK(r->type == REDIS_REPLY_INTEGER && r->integer == 1, "the list was changed");
        freeReplyObject(r);
        r = tf_ok("GET %s", hello);
        CHECK(r->type == REDIS_REPLY_STRING && strcmp(r->str, "hello") == 0, "the string was overwritten");
        freeReplyObject(r);
        sluice_fleet_free(f);
    }

    /* 3. a user whose ACL allows neither MGET nor EXISTS: every key read
     * with GET, decisions exact */
    {
        freeReplyObject(tf_ok("ACL SETUSER lim on >pw ~* +evalsha +eval +script|load +get +set +del +time +fcall "
                              "+function|load +ping +hello +client +info"));
        char url[128];
        snprintf(url, sizeof url, "redis://lim:pw@127.0.0.1:%d", port);
        sluice_fleet_t *f = fleet("br3", url);
        tf_model_t m = { LIMIT, SEC, BURST, KEYS, { 0 } };
        counts_t c0 = counts();
        volley(f, &m, 3000 * SEC, NULL, 0);
        volley(f, &m, 3000 * SEC + SEC / 20, NULL, 0);
        counts_t c1 = counts();
        CHECK(c1.get - c0.get >= 2 * KEYS, "ACL without MGET: %lld GET, want at least %d", c1.get - c0.get, 2 * KEYS);
        sluice_fleet_stats_t st;
        sluice_fleet_stats(f, &st);
        CHECK(st.noperm_errors == 0, "the refused MGET was counted as an error");
        sluice_fleet_free(f);
    }

    /* 4. plans: a uniform batch (one plan, cost and time) reads with one
     * MGET too; beside a list its healthy keys decide exactly as without */
    {
        static sluice_rate_quota_t q[3] = { { "second", 10, 1000000000, 1 },
                                            { "minute", 300, 60000000000, 0 },
                                            { "day", 10000, 86400000000000, 0 } };
        static sluice_plan_t plan[1] = { { "pro", q, 3 } };
        static const sluice_plans_t table = { plan, 1, 0 };
        sluice_fleet_t *f[2];
        for (int i = 0; i < 2; i++) {
            sluice_fleet_config_t c;
            memset(&c, 0, sizeof c);
            c.policy = sluice_rate_plans();
            c.plans = &table;
            c.port = port;
            c.prefix = i ? "bp2" : "bp1";
            c.prefix_len = 3;
            c.manual_time = true;
            c.timeout_ns = 5 * SEC;
            c.cache_slots = SIZE_MAX;
            c.max_batch = 64;
            CHECK(sluice_fleet_new(&f[i], base, &c) == 0, "plans fleet");
        }
        char list[128], unused[128];
        names_of(f[1], "bl", "bu", list, unused, sizeof list);
        freeReplyObject(tf_ok("RPUSH %s x", list));
        enum { N = ROUNDS * KEYS };
        static tf_box_t box[2][N + 1];
        for (int round = 0; round < 3; round++) {
            uint64_t t = 5000 * SEC + (uint64_t)round * (SEC / 10);
            for (int i = 0; i < 2; i++) {
                counts_t c0 = counts();
                for (int j = 0; j < N; j++) {
                    memset(&box[i][j], 0, sizeof box[i][j]);
                    CHECK(sluice_fleet_call_plan(f[i], sluice_key_u64((uint64_t)(j % KEYS)), 0, 1, t, tf_on_result,
                                                 &box[i][j]) == 0,
                          "call_plan");
                }
                if (i) {
                    memset(&box[i][N], 0, sizeof box[i][N]);
                    CHECK(sluice_fleet_call_plan(f[i], sluice_key_bytes("bl", 2), 0, 1, t, tf_on_result, &box[i][N]) ==
                              0,
                          "call_plan");
                }
                for (int j = 0; j < N + i; j++) tf_wait(base, &box[i][j]);
                counts_t c1 = counts();
                CHECK(c1.mget - c0.mget == 1, "plans, round %d, fleet %d: %lld MGET, want 1", round, i,
                      c1.mget - c0.mget);
                if (i == 0) CHECK(c1.get == c0.get, "plans, round %d: %lld GET, want 0", round, c1.get - c0.get);
            }
            CHECK(box[1][N].res.source == SLUICE_FLEET_SOURCE_FAILURE && box[1][N].res.cause == SLUICE_EBADVALUE,
                  "plans: the list answered with source %d cause %d", box[1][N].res.source, box[1][N].res.cause);
            int admitted = 0;
            for (int j = 0; j < N; j++) {
                const sluice_fleet_result_t *a = &box[0][j].res, *b = &box[1][j].res;
                CHECK(a->status == 0 && b->status == 0 && a->source == SLUICE_FLEET_SOURCE_REDIS &&
                          b->source == SLUICE_FLEET_SOURCE_REDIS && a->decision.kind == b->decision.kind &&
                          a->decision.at == b->decision.at && a->decision.remaining == b->decision.remaining,
                      "plans, round %d, call %d: kind %d at %llu beside a list, kind %d at %llu without", round, j,
                      b->decision.kind, (unsigned long long)b->decision.at, a->decision.kind,
                      (unsigned long long)a->decision.at);
                admitted += a->decision.kind == SLUICE_EMITTED;
            }
            CHECK(admitted > 0 && admitted < N, "plans, round %d: %d of %d admitted: both outcomes not tested", round,
                  admitted, N);
        }
        redisReply *r = tf_ok("LLEN %s", list);
        CHECK(r->type == REDIS_REPLY_INTEGER && r->integer == 1, "plans: the list was changed");
        freeReplyObject(r);
        sluice_fleet_free(f[0]);
        sluice_fleet_free(f[1]);
    }

    tf_disconnect();
    event_base_free(base);
    test_redis_stop(&redis);
    printf(TEST_NAME ": ok\n");
    return 0;
}
