/* test_fleet_paths.c — the script's two ways of computing a call: the fast
 * path in doubles (taken only when every number is provably below 2^53) and
 * exact limbs (every other case). Scenarios are chosen so that each path runs,
 * and the numbers sit where a double would round (around 2^53, at powers of
 * ten, across a carry into the shared digits); every answer and the stored
 * TAT must equal the model of test_fleet_util.h:
 *   A  t*limit and TATs of at most 15 digits          fast
 *   B  t*limit of 15 digits, TATs of 16                limbs, then fast
 *   C  around 2^53 (16 digits, first digit shared)    fast
 *   D  low 15 digits about to carry into the first    limbs, then fast
 *   E  26-digit numbers (t = 1.8e19 ns, limit 1e6)     fast
 *   F  cost*per or burst*per of 16 digits              limbs only
 *   G  Unix time in ns, limit 10 (server-time sizes)   fast */
#define TEST_NAME "test_fleet_paths"
#include "test_fleet_util.h"

#include <hiredis/hiredis.h>

#define SEC 1000000000ull
#define MS 1000000ull

static struct event_base *base;
static redisContext *rc;
static int port;

typedef struct scenario {
    const char *name;
    uint64_t limit, per, burst;
    uint64_t t0;
} scenario_t;

static sluice_fleet_t *fleet(const scenario_t *s) {
    sluice_fleet_config_t c;
    memset(&c, 0, sizeof c);
    c.policy = sluice_rate(s->limit, (int64_t)s->per, s->burst);
    c.port = port;
    c.prefix = s->name;
    c.prefix_len = strlen(s->name);
    c.manual_time = true;
    c.timeout_ns = 10 * SEC;
    c.cache_slots = SIZE_MAX; /* every call reaches the script */
    sluice_fleet_t *f = NULL;
    CHECK(sluice_fleet_new(&f, base, &c) == 0, "%s: sluice_fleet_new", s->name);
    return f;
}

static tf_u128 stored(const scenario_t *s) {
    redisReply *r = redisCommand(rc, "GET {%d:%s:u0}", (int)strlen(s->name), s->name);
    CHECK(r && (r->type == REDIS_REPLY_STRING || r->type == REDIS_REPLY_NIL), "%s: GET", s->name);
    tf_u128 v = 0;
    if (r->type == REDIS_REPLY_STRING)
        for (size_t i = 0; i < r->len; i++) v = v * 10 + (tf_u128)(r->str[i] - '0');
    freeReplyObject(r);
    return v;
}

/* One request (a quota read or a call) on key 0 at `t`, compared with the model,
 * then the stored TAT with the model's. */
static void step(sluice_fleet_t *f, const scenario_t *s, tf_model_t *m, int i, bool quota, uint64_t t, uint64_t cost) {
    tf_box_t b = { 0 };
    int rc_ = quota ? sluice_fleet_quota(f, sluice_key_u64(0), cost, t, tf_on_result, &b)
                    : sluice_fleet_call(f, sluice_key_u64(0), cost, t, tf_on_result, &b);
    CHECK(rc_ == 0, "%s: submit", s->name);
    tf_wait(base, &b);
    CHECK(b.res.source == SLUICE_FLEET_SOURCE_REDIS, "%s step %d: source %d cause %d", s->name, i, b.res.source,
          b.res.cause);
    if (quota) {
        sluice_quota_t want = tf_model_quota(m, 0, t, cost), got = b.res.quota;
        CHECK(got.remaining == want.remaining && got.full == want.full && got.retry == want.retry,
              "%s step %d (quota, t %llu, cost %llu): remaining %llu/%llu full %llu/%llu retry %llu/%llu", s->name, i,
              (unsigned long long)t, (unsigned long long)cost, (unsigned long long)got.remaining,
              (unsigned long long)want.remaining, (unsigned long long)got.full, (unsigned long long)want.full,
              (unsigned long long)got.retry, (unsigned long long)want.retry);
    } else {
        sluice_decision_t want = tf_model_call(m, 0, t, cost), got = b.res.decision;
        CHECK(got.kind == want.kind && got.at == want.at && got.remaining == want.remaining && got.full == want.full,
              "%s step %d (call, t %llu, cost %llu): kind %d/%d at %llu/%llu remaining %llu/%llu full %llu/%llu",
              s->name, i, (unsigned long long)t, (unsigned long long)cost, got.kind, want.kind,
              (unsigned long long)got.at, (unsigned long long)want.at, (unsigned long long)got.remaining,
              (unsigned long long)want.remaining, (unsigned long long)got.full, (unsigned long long)want.full);
    }
    tf_u128 v = stored(s);
    CHECK(v == 0 || v == m->tat[0], "%s step %d: Redis holds another TAT than the model", s->name, i);
}

static void run(const scenario_t *s, int steps) {
    sluice_fleet_t *f = fleet(s);
    tf_model_t m = { s->limit, s->per, s->burst, 1, { 0 } };
    uint64_t t = s->t0, T = s->per / s->limit;
    for (int i = 0; i < steps; i++) {
        /* first burst + 1 calls of cost 1 at t0: the burst filled exactly (its
         * last call ends at t*limit + burst*per), then a drop; with t0 three
         * T before a power of ten, the TATs cross it (a carry into the shared
         * digits, then a TAT whose first digits differ from t*limit's).
         * Small bursts only: the others are for wide numbers. */
        if (s->burst <= 10 && (uint64_t)i <= s->burst) {
            step(f, s, &m, i, false, t, 1);
            continue;
        }
        /* often several calls at one instant (a burst filled exactly), mostly
         * within a burst's time, sometimes a jump that makes it whole */
        uint64_t dice = tf_range(0, 99);
        t += dice < 30 ? 0 : dice < 35 ? s->burst * T * 2 : tf_range(0, 2 * T);
        uint64_t cost = tf_range(0, 100) < 5 ? s->burst + tf_range(1, 200) : tf_range(1, s->burst < 4 ? s->burst : 4);
        step(f, s, &m, i, tf_range(0, 100) < 10, t, cost);
    }
    sluice_fleet_free(f);
}

int main(void) {
    test_redis_t redis;
    tf_start_redis(&redis);
    port = redis.port;
    base = event_base_new();
    CHECK(base, "event_base_new");
    rc = redisConnect("127.0.0.1", port);
    CHECK(rc && !rc->err, "redisConnect");
    const uint64_t two53 = 9007199254740992ull;
    const scenario_t scenarios[] = {
        { "A", 1, MS, 5, 1000000000000ull },
        { "B", 1, MS, 5, 1000000000000000ull - 3 * MS },
        { "C", 1, MS, 5, two53 - 3 * MS },
        { "D", 1, MS, 5, 2000000000000000ull - 3 * MS },
        { "E", 1000000, SEC, 1000, 18000000000000000000ull },
        { "F", 1, 1000 * SEC, 900, 5000000000000000ull },
        { "F2", 1, 1000 * SEC, 2000, 5000000000000000ull },
        { "G", 10, SEC, 10, 1700000000000000000ull },
    };
    for (size_t i = 0; i < sizeof scenarios / sizeof scenarios[0]; i++) run(&scenarios[i], 200);
    redisFree(rc);
    event_base_free(base);
    test_redis_stop(&redis);
    printf(TEST_NAME ": ok\n");
    return 0;
}
