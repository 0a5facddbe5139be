/* test_fleet_badvalue.c — a key whose Redis value is not Sluice state (a
 * string such as `hello`, or a list: WRONGTYPE) fails alone. Batched with
 * healthy keys, the healthy keys get Redis's exact decisions (checked against
 * the model of test_fleet_util.h) and the bad keys are answered by the failure
 * policy with cause SLUICE_EBADVALUE. Before, the whole batch was answered by
 * the failure policy after the earlier keys had been written: fail open
 * admitted healthy keys far past their bound, and fail closed reported drops
 * that Redis had recorded as admissions. Also the script's single form. */
#define TEST_NAME "test_fleet_badvalue"
#include "test_fleet_util.h"

#include <hiredis/hiredis.h>

#define SEC 1000000000ull
#define LIMIT 10
#define BURST 4
#define HEALTHY 3
#define ROUNDS (3 * BURST) /* each healthy key is called 3 bursts' worth in one batch */

static struct event_base *base;

static sluice_fleet_t *fleet(int port, const char *prefix, sluice_fleet_failure_t fail) {
    sluice_fleet_config_t c;
    memset(&c, 0, sizeof c);
    c.policy = sluice_rate(LIMIT, (int64_t)SEC, BURST);
    c.port = port;
    c.prefix = prefix;
    c.prefix_len = strlen(prefix);
    c.manual_time = true;
    c.timeout_ns = 5 * SEC;
    c.on_failure = fail;
    c.cache_slots = SIZE_MAX; /* every call reaches Redis */
    c.max_batch = 64;
    sluice_fleet_t *f = NULL;
    CHECK(sluice_fleet_new(&f, base, &c) == 0, "sluice_fleet_new");
    return f;
}

/* The Redis name of key `k` of `f`, found by the one key a call creates
 * (layout-independent). */
static void name_of(sluice_fleet_t *f, sluice_key_t k, char *out, size_t cap) {
    redisReply *r = tf_ok("FLUSHALL");
    freeReplyObject(r);
    tf_box_t b = { 0 };
    CHECK(sluice_fleet_call(f, k, 1, 0, tf_on_result, &b) == 0, "call");
    tf_wait(base, &b);
    CHECK(b.res.source == SLUICE_FLEET_SOURCE_REDIS, "first call not from Redis");
    r = tf_ok("KEYS *");
    CHECK(r->type == REDIS_REPLY_ARRAY && r->elements == 1 && r->element[0]->len < cap, "one key expected");
    memcpy(out, r->element[0]->str, r->element[0]->len);
    out[r->element[0]->len] = '\0';
    freeReplyObject(r);
}

/* Makes `hello` a plain string and `list` a Redis list (both not Sluice state). */
static void spoil(const char *hello, const char *list) {
    freeReplyObject(tf_ok("FLUSHALL"));
    freeReplyObject(tf_ok("SET %s hello", hello));
    freeReplyObject(tf_ok("RPUSH %s x", list));
}

typedef struct shot {
    tf_box_t box;
    int key; /* 0..HEALTHY-1 healthy, HEALTHY "hello", HEALTHY+1 the list */
} shot_t;

#define SHOTS (ROUNDS * (HEALTHY + 2))

/* Submits ROUNDS rounds of calls on every key at time t, all before the loop
 * runs (so they form one batch), and waits for every answer. */
static void volley(sluice_fleet_t *f, shot_t *s, uint64_t t) {
    sluice_fleet_stats_t before, after;
    sluice_fleet_stats(f, &before);
    int n = 0;
    for (int round = 0; round < ROUNDS; round++) {
        for (int k = 0; k < HEALTHY + 2; k++, n++) {
            s[n].key = k;
            memset(&s[n].box, 0, sizeof s[n].box);
            sluice_key_t key =
                k < HEALTHY ? sluice_key_u64((uint64_t)k) : sluice_key_bytes(k == HEALTHY ? "bk0" : "bk1", 3);
            CHECK(sluice_fleet_call(f, key, 1, t, tf_on_result, &s[n].box) == 0, "call");
        }
    }
    for (int i = 0; i < SHOTS; i++) tf_wait(base, &s[i].box);
    sluice_fleet_stats(f, &after);
    CHECK(after.batches - before.batches == 1, "%llu script runs, want one batch",
          (unsigned long long)(after.batches - before.batches));
    CHECK(after.bad_values - before.bad_values == 2 * ROUNDS, "bad_values moved by %llu, want %d",
          (unsigned long long)(after.bad_values - before.bad_values), 2 * ROUNDS);
    for (int i = 0; i < SHOTS; i++) {
        const sluice_fleet_result_t *r = &s[i].box.res;
        CHECK(s[i].box.done == 1, "call %d answered %d times", i, s[i].box.done);
        if (s[i].key >= HEALTHY)
            CHECK(r->source == SLUICE_FLEET_SOURCE_FAILURE && r->cause == SLUICE_EBADVALUE,
                  "bad key %d: source %d cause %d, want the failure policy with EBADVALUE", s[i].key, r->source,
                  r->cause);
        else
            CHECK(r->source == SLUICE_FLEET_SOURCE_REDIS, "healthy key %d: source %d cause %d, want Redis", s[i].key,
                  r->source, r->cause);
    }
}

/* The stored TAT (scaled) of a healthy key, 0 when absent. */
static tf_u128 stored(const char *name) {
    redisReply *r = tf_ok("GET %s", name);
    tf_u128 v = 0;
    if (r->type == REDIS_REPLY_STRING)
        for (size_t i = 0; i < r->len; i++) v = v * 10 + (tf_u128)(r->str[i] - '0');
    freeReplyObject(r);
    return v;
}

int main(void) {
    test_redis_t redis;
    tf_start_redis(&redis);
    base = event_base_new();
    CHECK(base, "event_base_new");
    tf_connect(redis.port);
    static shot_t s[SHOTS];
    const uint64_t t = 1000 * SEC;

    /* 1. fail closed: healthy keys decided exactly, bad keys by the policy,
     * and Redis holds exactly the admissions reported */
    {
        sluice_fleet_t *f = fleet(redis.port, "c3", SLUICE_FLEET_FAIL_CLOSED);
        char hello[128], list[128], healthy[HEALTHY][128];
        name_of(f, sluice_key_bytes("bk0", 3), hello, sizeof hello);
        name_of(f, sluice_key_bytes("bk1", 3), list, sizeof list);
        for (int k = 0; k < HEALTHY; k++) name_of(f, sluice_key_u64((uint64_t)k), healthy[k], sizeof healthy[k]);
        spoil(hello, list);
        volley(f, s, t);
        tf_model_t m = { LIMIT, SEC, BURST, HEALTHY, { 0 } };
        for (int i = 0; i < SHOTS; i++) {
            if (s[i].key >= HEALTHY) {
                CHECK(s[i].box.res.decision.kind == SLUICE_DROPPED, "fail closed admitted a bad key");
                continue;
            }
            sluice_decision_t want = tf_model_call(&m, s[i].key, t, 1);
            const sluice_decision_t *got = &s[i].box.res.decision;
            CHECK(got->kind == want.kind && got->at == want.at && got->remaining == want.remaining &&
                      got->full == want.full,
                  "call %d (key %d): got kind %d at %llu rem %llu, model kind %d at %llu rem %llu", i, s[i].key,
                  got->kind, (unsigned long long)got->at, (unsigned long long)got->remaining, want.kind,
                  (unsigned long long)want.at, (unsigned long long)want.remaining);
        }
        /* nothing recorded for a call reported dropped: Redis holds the model's TATs */
        for (int k = 0; k < HEALTHY; k++)
            CHECK(stored(healthy[k]) == m.tat[k], "key %d: Redis holds another TAT than the decisions reported", k);
        redisReply *r = tf_ok("GET %s", hello);
        CHECK(r->type == REDIS_REPLY_STRING && strcmp(r->str, "hello") == 0, "the bad string was overwritten");
        freeReplyObject(r);
        r = tf_ok("LLEN %s", list);
        CHECK(r->type == REDIS_REPLY_INTEGER && r->integer == 1, "the list was changed");
        freeReplyObject(r);
        sluice_fleet_free(f);
    }

    /* 2. fail open: the healthy keys stay within their bound */
    {
        sluice_fleet_t *f = fleet(redis.port, "c4", SLUICE_FLEET_FAIL_OPEN);
        char hello[128], list[128];
        name_of(f, sluice_key_bytes("bk0", 3), hello, sizeof hello);
        name_of(f, sluice_key_bytes("bk1", 3), list, sizeof list);
        spoil(hello, list);
        volley(f, s, t);
        int admitted[HEALTHY] = { 0 };
        for (int i = 0; i < SHOTS; i++)
            if (s[i].key < HEALTHY && s[i].box.res.decision.kind == SLUICE_EMITTED) admitted[s[i].key]++;
        for (int k = 0; k < HEALTHY; k++)
            CHECK(admitted[k] == BURST, "fail open: key %d admitted %d times at one instant, bound %d", k, admitted[k],
                  BURST);
        sluice_fleet_free(f);
    }

    /* 3. the script's single form answers a bad key with status -1, no error */
    {
        freeReplyObject(tf_ok("SET bad hello"));
        const char *script = sluice_fleet_script();
        redisReply *r =
            tf_ok("EVAL %s 1 bad C %s 10 1000000000 4000000000 0 %s", script, "1000", "184467440737095516150");
        CHECK(r->type == REDIS_REPLY_ARRAY && r->elements == 3 && r->element[0]->type == REDIS_REPLY_INTEGER &&
                  r->element[0]->integer == -1,
              "single form on a bad value: want {-1, t, reason}");
        freeReplyObject(r);
        r = tf_ok("GET bad");
        CHECK(r->type == REDIS_REPLY_STRING && strcmp(r->str, "hello") == 0, "single form overwrote a bad value");
        freeReplyObject(r);
    }

    tf_disconnect();
    event_base_free(base);
    test_redis_stop(&redis);
    printf(TEST_NAME ": ok\n");
    return 0;
}
