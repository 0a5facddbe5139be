/* test_fleet_diff.c — the fleet limiter decides exactly as the local rate
 * semantics: random rate operations (calls with and without cost, quota reads,
 * cancels) over the full ranges (times up to 10^19 ns, limits, bursts and costs
 * up to 10^12, fractional T) run in manual-time mode through a private Redis
 * and are compared with an independent model of the spec and with the core
 * (sluice_limiter_*), one answer at a time and then pipelined (in batches:
 * one script run decides many requests in order, the same key repeatedly;
 * and with max_batch 1), up to and
 * past the end of the clock (2^64-1 ns, where calls are dropped for ever). Decisions that
 * the local cache answered (certain drops) must be drops whose times are never
 * later than Redis's. */
#define TEST_NAME "test_fleet_diff"
#include "test_fleet_util.h"

#pragma weak sluice_limiter_submit_cost
#pragma weak sluice_limiter_quota

static const char bkey1[] = { 'a', '}', 'b', '{', 'c', 0, 'd' };

static sluice_key_t key_of(int k) {
    switch (k) {
    case 0: return sluice_key_u64(7);
    case 1: return sluice_key_u64(UINT64_MAX);
    case 2: return sluice_key_bytes(bkey1, sizeof bkey1);
    default: return sluice_key_bytes("", 0);
    }
}
#define NKEYS 4

typedef struct op {
    int kind; /* 0 call, 1 quota, 2 cancel */
    int key;
    uint64_t t, cost;
} op_t;

static uint64_t pick(const uint64_t *v, size_t n) { return v[tf_next() % n]; }

static void gen_policy(tf_model_t *m) {
    /* (900000 and 2000003, and times of 19 and 20 digits: on both sides of the script's
     * clock in doubles, fleet_script.c) */
    static const uint64_t limits[] = { 1, 2, 3, 7, 10, 1000, 900000, 2000003, 999999999989ull, 1000000000000ull };
    static const uint64_t pers[] = { 1, 1000, 1000000, 1000000000, 7000000003ull, 1000000000000000000ull };
    memset(m, 0, sizeof *m);
    m->limit = tf_next() % 4 == 0 ? tf_range(1, 1000000000000ull) : pick(limits, sizeof limits / sizeof *limits);
    m->per = tf_next() % 4 == 0 ? tf_range(1, 1000000000000000000ull) : pick(pers, 6);
    switch (tf_next() % 4) {
    case 0: m->burst = 1; break;
    case 1: m->burst = m->limit; break;
    case 2: m->burst = tf_range(1, 20); break;
    default: m->burst = tf_range(1, 1000000000000ull); break;
    }
    /* half the policies keep every TAT well inside the clock (burst*T <= 4e18);
     * the others reach its end (2^64-1 ns), where calls are dropped for ever */
    tf_u128 cap = (tf_u128)4000000000000000000ull * m->limit / m->per;
    if (tf_next() % 2 && (tf_u128)m->burst > cap) m->burst = cap < 1 ? 1 : (uint64_t)cap;
    m->nkeys = NKEYS;
}

static int gen_ops(const tf_model_t *m, op_t *ops, int n) {
    uint64_t T = m->per / m->limit + 1;
    tf_u128 bt128 = (tf_u128)m->burst * m->per / m->limit + 1;
    uint64_t bt = bt128 > 10000000000000000000ull ? 10000000000000000000ull : (uint64_t)bt128;
    uint64_t t;
    switch (tf_next() % 4) {
    case 0: t = tf_range(0, 10000000000000000000ull); break;
    case 1: t = 10000000000000000000ull - tf_range(1, 1000000000000ull); break; /* 19 digits, then 20 */
    default: t = tf_range(0, 1000000); break;
    }
    const uint64_t tmax = 14000000000000000000ull;
    uint64_t prev = t;
    for (int i = 0; i < n; i++) {
        switch (tf_next() % 5) {
        case 0: break;
        case 1: t += tf_range(0, T < 4000000000000000000ull ? 2 * T : T); break;
        case 2: t += tf_range(0, bt); break;
        case 3: t += tf_range(0, 1000000); break;
        default: t += tf_range(0, T / 3 + 1); break;
        }
        if (t > tmax || t < prev) t = tmax; /* no wrap-around: times never go back */
        prev = t;
        op_t *o = &ops[i];
        o->t = t;
        o->key = (int)(tf_next() % NKEYS);
        unsigned r = (unsigned)(tf_next() % 20);
        o->kind = r < 13 ? 0 : r < 18 ? 1 : 2;
        switch (tf_next() % 6) {
        case 0:
        case 1:
        case 2: o->cost = 1; break;
        case 3: o->cost = tf_range(1, m->burst); break;
        case 4: o->cost = m->burst + (tf_next() % 2); break;
        default: o->cost = tf_range(1, 1000000000000ull); break;
        }
        if (o->cost > 1000000000000ull) o->cost = 1000000000000ull;
    }
    return n;
}

static void check_decision(const char *what, int i, const op_t *o, const sluice_fleet_result_t *res,
                           const sluice_decision_t *want) {
    const sluice_decision_t *d = &res->decision;
    CHECK(res->status == 0, "%s op %d: status %d", what, i, res->status);
    CHECK(res->now == o->t, "%s op %d: now %llu, want %llu", what, i, (unsigned long long)res->now,
          (unsigned long long)o->t);
    CHECK(d->now == res->now, "%s op %d: the decision's now is the result's", what, i);
    if (res->source == SLUICE_FLEET_SOURCE_CACHE) {
        CHECK(d->kind == SLUICE_DROPPED && want->kind == SLUICE_DROPPED,
              "%s op %d: the cache dropped a call the semantics admit (t=%llu cost=%llu)", what, i,
              (unsigned long long)o->t, (unsigned long long)o->cost);
        CHECK(d->at <= want->at && d->full <= want->full, "%s op %d: cache times later than the truth", what, i);
        return;
    }
    CHECK(res->source == SLUICE_FLEET_SOURCE_REDIS, "%s op %d: source %d cause %d (%s)", what, i, res->source,
          res->cause, sluice_strerror(res->cause));
    CHECK(d->kind == want->kind && d->at == want->at && d->remaining == want->remaining && d->full == want->full,
          "%s op %d (key %d t=%llu cost=%llu): redis kind=%d at=%llu rem=%llu full=%llu, model kind=%d at=%llu "
          "rem=%llu full=%llu",
          what, i, o->key, (unsigned long long)o->t, (unsigned long long)o->cost, d->kind, (unsigned long long)d->at,
          (unsigned long long)d->remaining, (unsigned long long)d->full, want->kind, (unsigned long long)want->at,
          (unsigned long long)want->remaining, (unsigned long long)want->full);
}

static void check_quota(const char *what, int i, const sluice_fleet_result_t *res, const sluice_quota_t *w) {
    const sluice_quota_t *q = &res->quota;
    CHECK(res->status == 0 && res->source == SLUICE_FLEET_SOURCE_REDIS, "%s op %d: quota not from redis", what, i);
    CHECK(q->burst == w->burst && q->remaining == w->remaining && q->full == w->full && q->retry == w->retry,
          "%s op %d: quota redis rem=%llu full=%llu retry=%llu, model rem=%llu full=%llu retry=%llu", what, i,
          (unsigned long long)q->remaining, (unsigned long long)q->full, (unsigned long long)q->retry,
          (unsigned long long)w->remaining, (unsigned long long)w->full, (unsigned long long)w->retry);
}

static sluice_fleet_t *new_fleet(struct event_base *base, int port, const tf_model_t *m, const char *prefix, bool cache,
                                 size_t max_batch) {
    sluice_fleet_config_t c;
    memset(&c, 0, sizeof c);
    c.policy = sluice_rate(m->limit, (int64_t)m->per, m->burst);
    c.port = port;
    c.prefix = prefix;
    c.prefix_len = strlen(prefix);
    c.manual_time = true;
    c.timeout_ns = 5000000000ull; /* generous: a slow CI machine is not a fault here */
    c.cache_slots = cache ? 0 : SIZE_MAX;
    c.cache_ttl_ns = 60000000000ull;
    c.max_batch = max_batch;
    sluice_fleet_t *f = NULL;
    int rc = sluice_fleet_new(&f, base, &c);
    CHECK(rc == 0, "sluice_fleet_new: %s", sluice_strerror(rc));
    return f;
}

int main(void) {
    const char *seed = getenv("SLUICE_TEST_SEED");
    if (seed) tf_rng = strtoull(seed, NULL, 0) | 1;
    fprintf(stderr, TEST_NAME ": seed %llu\n", (unsigned long long)tf_rng);
    test_redis_t redis;
    tf_start_redis(&redis);
    struct event_base *base = event_base_new();
    CHECK(base, "event_base_new");

    bool have_cost = sluice_limiter_submit_cost != NULL && sluice_limiter_quota != NULL;
    uint64_t n_redis = 0, n_cache = 0, n_core = 0, n_batches = 0, n_sent = 0;
    enum { POLICIES = 60, OPS = 80 };
    static op_t ops[OPS];
    for (int p = 0; p < POLICIES; p++) {
        tf_model_t m, m2;
        gen_policy(&m);
        gen_ops(&m, ops, OPS);
        bool pipelined = p % 2 == 1;
        char prefix[32];
        snprintf(prefix, sizeof prefix, "diff%d", p);
        /* pipelined: the requests of one loop iteration go in batches (one
         * EVALSHA decides up to max_batch of them, the same key many times);
         * every fourth policy with max_batch 1 (one key per command) */
        size_t max_batch = p % 4 == 3 ? 1 : p % 8 == 1 ? 5 : 0;
        sluice_fleet_t *f = new_fleet(base, redis.port, &m, prefix, p % 3 != 2, max_batch);
        sluice_limiter_t *core = NULL;
        sluice_config_t lc;
        memset(&lc, 0, sizeof lc);
        lc.policy = sluice_rate(m.limit, (int64_t)m.per, m.burst);
        CHECK(sluice_limiter_new(&core, &lc) == 0, "core limiter");
        m2 = m;
        bool use_core = have_cost;
        if (!have_cost) { /* a core without weighted calls: only all-cost-1 sequences, no quota */
            use_core = true;
            for (int i = 0; i < OPS; i++)
                if ((ops[i].kind == 0 && ops[i].cost != 1) || ops[i].kind == 1) use_core = false;
        }
        static tf_box_t boxes[OPS];
        memset(boxes, 0, sizeof boxes);
        for (int i = 0; i < OPS; i++) {
            const op_t *o = &ops[i];
            sluice_key_t key = key_of(o->key);
            int rc;
            if (o->kind == 0)
                rc = sluice_fleet_call(f, key, o->cost, o->t, tf_on_result, &boxes[i]);
            else if (o->kind == 1)
                rc = sluice_fleet_quota(f, key, o->cost, o->t, tf_on_result, &boxes[i]);
            else
                rc = sluice_fleet_cancel(f, key, o->t, tf_on_result, &boxes[i]);
            CHECK(rc == 0, "submit: %s", sluice_strerror(rc));
            if (!pipelined) tf_wait(base, &boxes[i]);
        }
        for (int i = 0; i < OPS; i++) tf_wait(base, &boxes[i]);
        const char *what = pipelined ? "pipelined" : "sequential";
        for (int i = 0; i < OPS; i++) {
            const op_t *o = &ops[i];
            sluice_key_t key = key_of(o->key);
            CHECK(boxes[i].done == 1, "op %d answered %d times", i, boxes[i].done);
            if (o->kind == 0) {
                sluice_decision_t want = tf_model_call(&m2, o->key, o->t, o->cost);
                check_decision(what, i, o, &boxes[i].res, &want);
                if (boxes[i].res.source == SLUICE_FLEET_SOURCE_CACHE)
                    n_cache++;
                else
                    n_redis++;
                sluice_decision_t cd;
                if (use_core) {
                    int rc = have_cost ? sluice_limiter_submit_cost(core, key, 0, o->cost, o->t, &cd)
                                       : sluice_limiter_submit(core, key, 0, o->t, &cd);
                    CHECK(rc == 0, "core submit: %s", sluice_strerror(rc));
                    CHECK(cd.kind == want.kind && cd.at == want.at,
                          "core and model disagree at op %d (limit %llu per %llu burst %llu, key %d t=%llu cost=%llu): "
                          "core kind %d at %llu, model kind %d at %llu",
                          i, (unsigned long long)m.limit, (unsigned long long)m.per, (unsigned long long)m.burst,
                          o->key, (unsigned long long)o->t, (unsigned long long)o->cost, cd.kind,
                          (unsigned long long)cd.at, want.kind, (unsigned long long)want.at);
                    if (have_cost)
                        CHECK(cd.remaining == want.remaining && cd.full == want.full,
                              "core and model disagree (remaining/full) at op %d", i);
                    n_core++;
                }
            } else if (o->kind == 1) {
                sluice_quota_t want = tf_model_quota(&m2, o->key, o->t, o->cost);
                check_quota(what, i, &boxes[i].res, &want);
                if (use_core) {
                    sluice_quota_t cq;
                    CHECK(sluice_limiter_quota(core, key, o->cost, o->t, &cq) == 0, "core quota");
                    CHECK(cq.remaining == want.remaining && cq.full == want.full && cq.retry == want.retry,
                          "core and model disagree (quota) at op %d", i);
                }
            } else {
                CHECK(boxes[i].res.status == 0 && boxes[i].res.source == SLUICE_FLEET_SOURCE_REDIS,
                      "cancel %d: status %d", i, boxes[i].res.status);
                m2.tat[o->key] = 0;
                sluice_limiter_cancel(core, key, o->t);
            }
        }
        sluice_limiter_free(core);
        sluice_fleet_stats_t st;
        sluice_fleet_stats(f, &st);
        CHECK(st.timeouts == 0 && st.bad_replies == 0 && st.failure_admitted + st.failure_dropped == 0,
              "unexpected faults: timeouts %llu bad %llu", (unsigned long long)st.timeouts,
              (unsigned long long)st.bad_replies);
        uint64_t sent = st.redis_admitted + st.redis_dropped + st.quotas; /* requests the script decided */
        if (max_batch == 1)
            CHECK(st.batches == sent, "max_batch 1: %llu script runs for %llu requests", (unsigned long long)st.batches,
                  (unsigned long long)sent);
        else if (pipelined && sent > 40)
            CHECK(st.batches * 2 < sent, "pipelined: %llu script runs for %llu requests (no batching?)",
                  (unsigned long long)st.batches, (unsigned long long)sent);
        else if (!pipelined)
            CHECK(st.batches == sent, "sequential: %llu script runs for %llu requests", (unsigned long long)st.batches,
                  (unsigned long long)sent);
        n_batches += st.batches;
        n_sent += sent;
        sluice_fleet_free(f);
    }
    fprintf(stderr,
            TEST_NAME ": %llu redis decisions, %llu cache drops, %llu compared with the core, %llu requests "
                      "in %llu script runs%s\n",
            (unsigned long long)n_redis, (unsigned long long)n_cache, (unsigned long long)n_core,
            (unsigned long long)n_sent, (unsigned long long)n_batches,
            sluice_limiter_submit_cost ? "" : " (core without weighted calls: cost-1 calls only)");
    CHECK(n_cache > 0, "the cache never answered");
    event_base_free(base);
    test_redis_stop(&redis);
    printf(TEST_NAME ": ok\n");
    return 0;
}
