/* test_fleet_cache.c — the local answer without a round trip: a drop is
 * answered from the TAT cache only when it is certain; cancel invalidates the
 * entry at once, and replies to requests sent before the cancel do not bring
 * the old TAT back; an entry is trusted only for cache_ttl (a cancel made by
 * another process is seen after it); a small cache stays correct under many
 * keys; in server-time mode the cache uses a bound of the server's clock,
 * and a key expires in Redis when its burst is whole again. */
#define TEST_NAME "test_fleet_cache"
#include "test_fleet_util.h"

#define SEC 1000000000ull
#define MS 1000000ull

static struct event_base *base;
static int port;

static sluice_fleet_t *fleet_per(const char *prefix, bool manual, size_t slots, uint64_t ttl, uint64_t per) {
    sluice_fleet_config_t c;
    memset(&c, 0, sizeof c);
    c.policy = sluice_rate(1, (int64_t)per, 1); /* one call per `per`, burst 1 */
    c.port = port;
    c.prefix = prefix;
    c.prefix_len = strlen(prefix);
    c.manual_time = manual;
    c.timeout_ns = 5 * SEC;
    c.cache_slots = slots;
    c.cache_ttl_ns = ttl;
    sluice_fleet_t *f = NULL;
    CHECK(sluice_fleet_new(&f, base, &c) == 0, "sluice_fleet_new");
    return f;
}

/* One call per second, burst 1. */
static sluice_fleet_t *fleet(const char *prefix, bool manual, size_t slots, uint64_t ttl) {
    return fleet_per(prefix, manual, slots, ttl, SEC);
}

static sluice_fleet_result_t call(sluice_fleet_t *f, sluice_key_t k, uint64_t t) {
    tf_box_t b = { 0 };
    CHECK(sluice_fleet_call(f, k, 1, t, tf_on_result, &b) == 0, "call");
    tf_wait(base, &b);
    return b.res;
}

static void expect(const sluice_fleet_result_t *r, sluice_decision_kind_t kind, sluice_fleet_source_t src,
                   const char *what) {
    CHECK(r->status == 0 && r->decision.kind == kind && r->source == src,
          "%s: got kind %d source %d (cause %d), want kind %d source %d", what, r->decision.kind, r->source, r->cause,
          kind, src);
}

int main(void) {
    test_redis_t redis;
    tf_start_redis(&redis);
    port = redis.port;
    base = event_base_new();
    CHECK(base, "event_base_new");
    sluice_key_t A = sluice_key_bytes("A", 1), B = sluice_key_bytes("B", 1);

    /* 1. a certain drop is answered locally; its times come from the cached TAT */
    sluice_fleet_t *f = fleet("cache1", true, 0, 60 * SEC);
    sluice_fleet_result_t r = call(f, A, 0);
    expect(&r, SLUICE_EMITTED, SLUICE_FLEET_SOURCE_REDIS, "first call");
    r = call(f, A, 1 * MS);
    expect(&r, SLUICE_DROPPED, SLUICE_FLEET_SOURCE_CACHE, "second call, 1 ms later");
    CHECK(r.decision.at == SEC && r.decision.full == SEC && r.now == MS, "cache drop times");
    /* at 1 s the drop is no longer certain: Redis decides (and admits) */
    r = call(f, A, SEC);
    expect(&r, SLUICE_EMITTED, SLUICE_FLEET_SOURCE_REDIS, "call at 1 s");

    /* 2. cancel invalidates the entry before anything else */
    tf_box_t cb = { 0 };
    CHECK(sluice_fleet_cancel(f, A, SEC + 1, tf_on_result, &cb) == 0, "cancel");
    r = call(f, A, SEC + 2); /* submitted after the cancel: must not be a cache drop */
    expect(&r, SLUICE_EMITTED, SLUICE_FLEET_SOURCE_REDIS, "call after cancel");
    CHECK(cb.done == 1 && cb.res.status == 0, "cancel answered");

    /* 3. a reply to a call sent before a cancel does not teach the cache: call B
     * (in flight), cancel B, both submitted in one batch; after both answers the
     * key is fresh, so a call must reach Redis and be admitted */
    tf_box_t b1 = { 0 }, b2 = { 0 };
    CHECK(sluice_fleet_call(f, B, 1, 10 * SEC, tf_on_result, &b1) == 0, "call B");
    CHECK(sluice_fleet_cancel(f, B, 10 * SEC, tf_on_result, &b2) == 0, "cancel B");
    tf_wait(base, &b1);
    tf_wait(base, &b2);
    expect(&b1.res, SLUICE_EMITTED, SLUICE_FLEET_SOURCE_REDIS, "call B before cancel");
    r = call(f, B, 10 * SEC + 1);
    expect(&r, SLUICE_EMITTED, SLUICE_FLEET_SOURCE_REDIS, "call B after the cancel's batch");
    sluice_fleet_stats_t st;
    sluice_fleet_stats(f, &st);
    CHECK(st.cache_dropped == 1, "cache drops: %llu", (unsigned long long)st.cache_dropped);
    sluice_fleet_free(f);

    /* 4. another process's cancel is seen once the entry expires (cache_ttl).
     * A 2 s cache_ttl: node 1's second call comes within it however long a
     * loaded machine takes over node 2's cancel (with 300 ms, a slow round
     * trip let the entry expire first, and Redis admitted the call). */
    sluice_fleet_t *f1 = fleet("cache4", true, 0, 2 * SEC);
    sluice_fleet_t *f2 = fleet("cache4", true, 0, 2 * SEC);
    r = call(f1, A, 0);
    expect(&r, SLUICE_EMITTED, SLUICE_FLEET_SOURCE_REDIS, "node 1 call");
    tf_box_t c2 = { 0 };
    CHECK(sluice_fleet_cancel(f2, A, 0, tf_on_result, &c2) == 0, "node 2 cancel");
    tf_wait(base, &c2);
    r = call(f1, A, 1);
    expect(&r, SLUICE_DROPPED, SLUICE_FLEET_SOURCE_CACHE, "node 1 within cache_ttl (stale by design)");
    tf_run_for(base, 2100);
    r = call(f1, A, 2);
    expect(&r, SLUICE_EMITTED, SLUICE_FLEET_SOURCE_REDIS, "node 1 after cache_ttl");
    sluice_fleet_free(f1);
    sluice_fleet_free(f2);

    /* 5. a 4-slot cache over 16 keys: never a wrong drop (model comparison) */
    tf_model_t m;
    memset(&m, 0, sizeof m);
    m.limit = 3;
    m.per = SEC;
    m.burst = 2;
    enum { KEYS = 16, OPS = 600 };
    /* the model holds 16 keys: 16 keys on a 4-slot cache (collisions) */
    sluice_fleet_t *g = NULL;
    {
        sluice_fleet_config_t c;
        memset(&c, 0, sizeof c);
        c.policy = sluice_rate(3, (int64_t)SEC, 2);
        c.port = port;
        c.prefix = "cache5b";
        c.prefix_len = 7;
        c.manual_time = true;
        c.timeout_ns = 5 * SEC;
        c.cache_slots = 4;
        c.cache_ttl_ns = 60 * SEC;
        CHECK(sluice_fleet_new(&g, base, &c) == 0, "fleet g");
    }
    uint64_t t = 0, hits = 0;
    for (int i = 0; i < OPS; i++) {
        t += tf_range(0, 200 * MS);
        int k = (int)(tf_next() % KEYS);
        uint64_t key = (uint64_t)k * 1000003u;
        if (tf_next() % 15 == 0) {
            tf_box_t x = { 0 };
            CHECK(sluice_fleet_cancel(g, sluice_key_u64(key), t, tf_on_result, &x) == 0, "cancel");
            tf_wait(base, &x);
            m.tat[k] = 0;
            continue;
        }
        tf_box_t x = { 0 };
        CHECK(sluice_fleet_call(g, sluice_key_u64(key), 1, t, tf_on_result, &x) == 0, "call");
        tf_wait(base, &x);
        sluice_decision_t want = tf_model_call(&m, k, t, 1);
        CHECK(x.res.decision.kind == want.kind, "op %d key %d: fleet %d model %d (source %d)", i, k,
              x.res.decision.kind, want.kind, x.res.source);
        if (x.res.source == SLUICE_FLEET_SOURCE_CACHE)
            hits++;
        else
            CHECK(x.res.decision.at == want.at && x.res.decision.full == want.full, "op %d: times", i);
    }
    CHECK(hits > 0, "the small cache never answered");
    sluice_fleet_free(g);

    /* 6. server time: the drop right after an admission is certain and local,
     * with a retry at most T after Redis's clock. T = 60 s: the second call
     * comes well within it however long a loaded machine stalls this test
     * (with T = 1 s, a stall of a second let it be admitted). */
    const uint64_t T6 = 60 * SEC;
    f = fleet_per("cache6", false, 0, 60 * SEC, T6);
    uint64_t before = tf_mono();
    r = call(f, A, 0);
    expect(&r, SLUICE_EMITTED, SLUICE_FLEET_SOURCE_REDIS, "server time: first call");
    uint64_t t0 = r.now;
    {
        /* the key expires in Redis at the end of the cell of its TAT (t0 + T:
         * its burst is whole again then), cells of 10 s here (10^10 ns, the
         * power of ten of burst * per = 6 * 10^10 ns): rounded down to ms,
         * plus 2 ms, less the time since the call */
        char out[64];
        CHECK(test_redis_command(port, "PTTL {6:cache6:bA}", out, sizeof out) == 0, "PTTL");
        long long ttl = strtoll(out + 1, NULL, 10);
        const uint64_t cell = 10 * SEC, end = ((t0 + T6) / cell + 1) * cell;
        long long expiry = (long long)((end - t0) / MS) + 2, since = (long long)((tf_mono() - before) / MS) + 1;
        CHECK(out[0] == ':' && ttl <= expiry && ttl >= expiry - since && expiry > (long long)(T6 / MS),
              "expiry of an admitted key: %s (want %lld, %lld ms after the call at most)", out, expiry, since);
        /* its value: the TAT after the marker of those cells (16 - 10 zeros) */
        redisReply *v = tf_cmd(port, "GET {6:cache6:bA}");
        char want[64];
        snprintf(want, sizeof want, "000000%llu", (unsigned long long)(t0 + T6));
        CHECK(v && v->type == REDIS_REPLY_STRING && strcmp(v->str, want) == 0, "stored value %s, want %s",
              v && v->str ? v->str : "(none)", want);
        freeReplyObject(v);
    }
    CHECK(t0 > 1600000000ull * SEC, "server time looks like Unix time in ns: %llu", (unsigned long long)t0);
    r = call(f, A, 0);
    expect(&r, SLUICE_DROPPED, SLUICE_FLEET_SOURCE_CACHE, "server time: second call");
    CHECK(r.decision.at == r.decision.full && r.decision.at > r.now && r.decision.at - r.now <= T6 && r.now >= t0,
          "server time: retry %llu ns after now", (unsigned long long)(r.decision.at - r.now));
    sluice_fleet_free(f);

    event_base_free(base);
    test_redis_stop(&redis);
    printf(TEST_NAME ": ok\n");
    return 0;
}
