/* test_fleet_plans.c — the fleet limiter with plans (several quotas per key):
 *
 *  1. Differential: random tables of plans (quota names shared between
 *     plans, numbers over the full ranges, fractional T) and random calls,
 *     quota reads and cancels under random plans, with the table replaced
 *     now and then (sluice_fleet_set_plans: numbers changed, quotas added
 *     and removed), run through a private Redis in manual time and through
 *     the core's limiter of plans with the same replacements; every answer
 *     Redis made must equal the core's field by field, each quota's figures
 *     and the refused quotas included. Sequential and pipelined (batches,
 *     and max_batch 1); with and without the TAT cache, whose answers must
 *     be drops the core also makes, never later than the core's retry.
 *  2. The cache and plan changes: a key refused under one plan is answered
 *     from the cache; under another plan, or after set_plans, it is not.
 *  3. Values: a key's quotas live in one Redis key, plan-independent; a
 *     value that is not plan state (another writer, a one-quota limiter
 *     with the same prefix, malformed) fails that key alone, unchanged.
 *  4. Errors: unknown plans, a limiter without plans, bad tables; each
 *     leaves the limiter usable.
 *  5. The failure policy: fail local decides under the plan of the same
 *     name in the fallback table, with each quota's figures; fail closed
 *     says never for a cost above a quota's burst.
 *  6. Threads: calls from one thread and plan replacements from another,
 *     the fleet on a loop of the loop layer (run under TSan by make
 *     sanitize-thread): every call answered once, under one table or the
 *     other. */
#define TEST_NAME "test_fleet_plans"
#include "test_fleet_util.h"

#include <math.h>
#include <pthread.h>

#include "sluice_loop.h"

#define NS 1000000000ull

/* ---- random tables */

typedef struct table {
    sluice_rate_quota_t q[4][SLUICE_PLAN_QUOTAS_MAX];
    sluice_plan_t p[4];
    sluice_plans_t t;
} table_t;

static const char *const qnames[] = { "second", "minute", "hour", "day", "x" };
static const char *const pnames[] = { "free", "pro", "team", "ent" };

static uint64_t pick(const uint64_t *v, size_t n) { return v[tf_next() % n]; }

static void gen_quota(sluice_rate_quota_t *q, bool huge) {
    static const uint64_t limits[] = { 1, 2, 3, 7, 10, 300, 1000 };
    static const uint64_t pers[] = { 1000000, 1000000000, 3000000001ull, 60000000000ull, 3600000000000ull };
    if (huge && tf_next() % 2) {
        q->limit = tf_range(1, 1000000000000ull);
        q->per_ns = (int64_t)tf_range(1, 1000000000000000000ull);
        q->burst = tf_next() % 2 ? tf_range(1, 1000000000000ull) : 0;
        /* keep most TATs inside the clock */
        tf_u128 cap = (tf_u128)4000000000000000000ull * q->limit / (uint64_t)q->per_ns;
        uint64_t b = q->burst ? q->burst : q->limit;
        if (tf_next() % 3 && (tf_u128)b > cap) q->burst = cap < 1 ? 1 : (uint64_t)cap;
        return;
    }
    q->limit = pick(limits, 7);
    q->per_ns = (int64_t)pick(pers, 5);
    q->burst = tf_next() % 3 == 0 ? tf_range(1, 12) : 0;
}

static void gen_table(table_t *tb, bool huge) {
    memset(tb, 0, sizeof *tb);
    size_t np = (size_t)tf_range(1, 3);
    for (size_t i = 0; i < np; i++) {
        size_t nq = (size_t)tf_range(1, 4);
        unsigned used = 0;
        for (size_t j = 0; j < nq; j++) {
            unsigned n;
            do n = (unsigned)(tf_next() % 5);
            while (used & (1u << n));
            used |= 1u << n;
            tb->q[i][j].name = qnames[n];
            gen_quota(&tb->q[i][j], huge);
        }
        tb->p[i].name = pnames[i];
        tb->p[i].quotas = tb->q[i];
        tb->p[i].nquotas = nq;
    }
    tb->t.plans = tb->p;
    tb->t.nplans = np;
    tb->t.max_quotas = 0;
    CHECK(sluice_plans_check(&tb->t, NULL, 0) == 0, "generated table invalid");
}

/* A changed table: each quota's numbers changed, a quota added or removed, now and then. */
static void mutate_table(table_t *tb, bool huge) {
    for (size_t i = 0; i < tb->t.nplans; i++) {
        size_t nq = tb->p[i].nquotas;
        for (size_t j = 0; j < nq; j++)
            if (tf_next() % 2) gen_quota(&tb->q[i][j], huge);
        if (tf_next() % 4 == 0 && nq > 1) {
            tb->p[i].nquotas--;
        } else if (tf_next() % 4 == 0 && nq < 4) {
            unsigned used = 0;
            for (size_t j = 0; j < nq; j++)
                for (unsigned n = 0; n < 5; n++)
                    if (strcmp(tb->q[i][j].name, qnames[n]) == 0) used |= 1u << n;
            for (unsigned n = 0; n < 5; n++)
                if (!(used & (1u << n))) {
                    tb->q[i][nq].name = qnames[n];
                    gen_quota(&tb->q[i][nq], huge);
                    tb->p[i].nquotas++;
                    break;
                }
        }
    }
    CHECK(sluice_plans_check(&tb->t, NULL, 0) == 0, "mutated table invalid");
}

/* ---- the differential run */

static const char bkey[] = { 'a', '}', 'b', '{', 0, 'c' };

static sluice_key_t key_of(int k) {
    switch (k) {
    case 0: return sluice_key_u64(7);
    case 1: return sluice_key_bytes(bkey, sizeof bkey);
    default: return sluice_key_bytes("client-42", 9);
    }
}

typedef struct op {
    int kind; /* 0 call, 1 quota, 2 cancel, 3 set_plans */
    int key;
    uint32_t plan;
    uint64_t t, cost;
} op_t;

static sluice_fleet_t *new_fleet(struct event_base *base, int port, const sluice_plans_t *plans, const char *prefix,
                                 bool cache, size_t max_batch) {
    sluice_fleet_config_t c;
    memset(&c, 0, sizeof c);
    c.policy = sluice_rate_plans();
    c.plans = plans;
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

static sluice_limiter_t *new_core(const sluice_plans_t *plans) {
    sluice_plans_t copy = *plans;
    copy.max_quotas = SLUICE_PLAN_QUOTAS_MAX;
    sluice_config_t lc;
    memset(&lc, 0, sizeof lc);
    lc.policy = sluice_rate_plans();
    lc.plans = &copy;
    sluice_limiter_t *l = NULL;
    CHECK(sluice_limiter_new(&l, &lc) == 0, "core limiter of plans");
    return l;
}

static void check_detail(const char *what, int i, const sluice_plan_detail_t *got, const sluice_plan_detail_t *want) {
    CHECK(got->nquotas == want->nquotas && got->refused == want->refused && got->plan == want->plan,
          "%s op %d: detail nquotas %u/%u refused %x/%x plan %u/%u", what, i, got->nquotas, want->nquotas, got->refused,
          want->refused, got->plan, want->plan);
    for (uint32_t j = 0; j < want->nquotas; j++) {
        const sluice_quota_figures_t *a = &got->quotas[j], *b = &want->quotas[j];
        CHECK(a->remaining == b->remaining && a->full == b->full && a->retry == b->retry && a->burst == b->burst &&
                  a->limit == b->limit && a->per_ns == b->per_ns,
              "%s op %d quota %u: redis rem=%llu full=%llu retry=%llu, core rem=%llu full=%llu retry=%llu", what, i, j,
              (unsigned long long)a->remaining, (unsigned long long)a->full, (unsigned long long)a->retry,
              (unsigned long long)b->remaining, (unsigned long long)b->full, (unsigned long long)b->retry);
    }
}

static void differential(int port) {
    struct event_base *base = event_base_new();
    CHECK(base, "event_base_new");
    enum { ROUNDS = 48, OPS = 90 };
    static op_t ops[OPS];
    static tf_box_t boxes[OPS];
    static table_t tables[OPS + 1];
    uint64_t n_redis = 0, n_cache = 0, n_sets = 0, n_quota = 0;
    for (int round = 0; round < ROUNDS; round++) {
        bool huge = round % 3 == 2;
        bool pipelined = round % 2 == 1;
        bool cache = round % 4 != 0;
        size_t max_batch = round % 8 == 3 ? 1 : round % 8 == 5 ? 4 : 0;
        /* still: most calls at the time of the one before, so that a batch's
         * requests often share their time and plan but not their cost */
        bool still = round % 5 == 4;
        table_t *tb = &tables[0];
        gen_table(tb, huge);
        char prefix[32];
        snprintf(prefix, sizeof prefix, "plans%d", round);
        sluice_fleet_t *f = new_fleet(base, port, &tb->t, prefix, cache, max_batch);
        sluice_limiter_t *core = new_core(&tb->t);
        memset(boxes, 0, sizeof boxes);
        /* the ops, submitted as generated (set_plans applies to what follows) */
        /* a start near 0, anywhere below 1e18 ns, near today (19 digits), or
         * just before a multiple of 1e15 ns (the script's doubles take t's
         * last 15 digits: crossing one sends a key to its limbs) */
        uint64_t t;
        switch (round % 4) {
        case 0: t = tf_range(0, 1000000); break;
        case 1: t = tf_range(0, 1000000000000000000ull); break;
        case 2: t = 1795000000000000000ull + tf_range(0, 1000000000000000ull); break;
        default: t = tf_range(1, 18000) * 1000000000000000ull - tf_range(0, 3 * NS); break;
        }
        int cur = 0;
        for (int i = 0; i < OPS; i++) {
            op_t *o = &ops[i];
            switch (still && tf_next() % 8 != 0 ? 0 : tf_next() % 5) {
            case 0: break;
            case 1: t += tf_range(0, 1000000); break;
            case 2: t += tf_range(0, 2 * NS); break;
            case 3: t += tf_range(0, huge ? 1000000000000000ull : 100 * NS); break;
            default: t += tf_range(0, 300000000); break;
            }
            if (t > 15000000000000000000ull) t = 15000000000000000000ull;
            o->t = t;
            o->key = (int)(tf_next() % 3);
            unsigned r = (unsigned)(tf_next() % 40);
            o->kind = r < 26 ? 0 : r < 35 ? 1 : r < 38 ? 2 : 3;
            o->plan = (uint32_t)(tf_next() % tables[cur].t.nplans);
            o->cost = tf_next() % 4 == 0 ? tf_range(1, 20) : 1;
            if (o->kind == 3) {
                tables[cur + 1] = tables[cur];
                table_t *nt = &tables[cur + 1];
                for (size_t p = 0; p < nt->t.nplans; p++) nt->p[p].quotas = nt->q[p];
                nt->t.plans = nt->p;
                mutate_table(nt, huge);
                cur++;
                CHECK(sluice_fleet_set_plans(f, &nt->t, NULL) == 0, "set_plans");
                boxes[i].done = 1;
                n_sets++;
                continue;
            }
            sluice_key_t key = key_of(o->key);
            int rc = o->kind == 0   ? sluice_fleet_call_plan(f, key, o->plan, o->cost, o->t, tf_on_result, &boxes[i])
                     : o->kind == 1 ? sluice_fleet_quota_plan(f, key, o->plan, o->cost, o->t, tf_on_result, &boxes[i])
                                    : sluice_fleet_cancel(f, key, o->t, tf_on_result, &boxes[i]);
            CHECK(rc == 0, "submit: %s", sluice_strerror(rc));
            if (!pipelined) tf_wait(base, &boxes[i]);
        }
        for (int i = 0; i < OPS; i++) tf_wait(base, &boxes[i]);
        /* the core, in the same order */
        const char *what = pipelined ? "pipelined" : "sequential";
        cur = 0;
        for (int i = 0; i < OPS; i++) {
            const op_t *o = &ops[i];
            sluice_key_t key = key_of(o->key);
            const sluice_fleet_result_t *res = &boxes[i].res;
            CHECK(boxes[i].done == 1, "op %d answered %d times", i, boxes[i].done);
            if (o->kind == 3) {
                cur++;
                sluice_plans_t copy = tables[cur].t;
                CHECK(sluice_limiter_set_plans(core, &copy) == 0, "core set_plans");
                continue;
            }
            if (o->kind == 2) {
                CHECK(res->status == 0 && res->source == SLUICE_FLEET_SOURCE_REDIS, "cancel %d: status %d", i,
                      res->status);
                sluice_limiter_cancel(core, key, o->t);
                continue;
            }
            CHECK(res->status == 0 && res->source != SLUICE_FLEET_SOURCE_FAILURE,
                  "%s op %d: status %d source %d cause %d", what, i, res->status, res->source, res->cause);
            CHECK(res->now == o->t, "%s op %d: decided at %llu, asked at %llu", what, i, (unsigned long long)res->now,
                  (unsigned long long)o->t);
            sluice_plan_detail_t det;
            memset(&det, 0, sizeof det);
            if (o->kind == 1) {
                sluice_quota_t q;
                CHECK(sluice_limiter_quota_plan(core, key, o->cost, o->plan, o->t, &q, &det) == 0, "core quota");
                const sluice_quota_t *g = &res->quota;
                CHECK(g->remaining == q.remaining && g->full == q.full && g->retry == q.retry && g->burst == q.burst,
                      "%s op %d: quota redis rem=%llu full=%llu retry=%llu burst=%llu, core rem=%llu full=%llu "
                      "retry=%llu burst=%llu",
                      what, i, (unsigned long long)g->remaining, (unsigned long long)g->full,
                      (unsigned long long)g->retry, (unsigned long long)g->burst, (unsigned long long)q.remaining,
                      (unsigned long long)q.full, (unsigned long long)q.retry, (unsigned long long)q.burst);
                check_detail(what, i, &res->detail, &det);
                n_quota++;
                continue;
            }
            sluice_decision_t d;
            CHECK(sluice_limiter_submit_plan(core, key, 0, o->cost, o->plan, o->t, &d, &det) == 0, "core call");
            const sluice_decision_t *g = &res->decision;
            if (res->source == SLUICE_FLEET_SOURCE_CACHE) {
                /* a certain drop from a lower bound: the core drops too, and
                 * the retry is never later than the core's */
                CHECK(g->kind == SLUICE_DROPPED && d.kind == SLUICE_DROPPED && g->at <= d.at,
                      "%s op %d: cache kind %d at %llu, core kind %d at %llu", what, i, g->kind,
                      (unsigned long long)g->at, d.kind, (unsigned long long)d.at);
                n_cache++;
                continue;
            }
            CHECK(g->kind == d.kind && g->at == d.at && g->full == d.full && g->remaining == d.remaining,
                  "%s op %d (key %d plan %u t=%llu cost=%llu): redis kind %d at %llu full %llu rem %llu, core kind %d "
                  "at %llu full %llu rem %llu",
                  what, i, o->key, o->plan, (unsigned long long)o->t, (unsigned long long)o->cost, g->kind,
                  (unsigned long long)g->at, (unsigned long long)g->full, (unsigned long long)g->remaining, d.kind,
                  (unsigned long long)d.at, (unsigned long long)d.full, (unsigned long long)d.remaining);
            check_detail(what, i, &res->detail, &det);
            n_redis++;
        }
        sluice_fleet_stats_t st;
        sluice_fleet_stats(f, &st);
        CHECK(st.timeouts == 0 && st.bad_replies == 0 && st.bad_values == 0, "unexpected faults");
        sluice_limiter_free(core);
        sluice_fleet_free(f);
    }
    fprintf(stderr, TEST_NAME ": %llu redis decisions, %llu quota reads, %llu cache drops, %llu plan replacements\n",
            (unsigned long long)n_redis, (unsigned long long)n_quota, (unsigned long long)n_cache,
            (unsigned long long)n_sets);
    CHECK(n_cache > 0 && n_sets > 10, "the run did not reach the cache or plan changes");
    event_base_free(base);
}

/* ---- targeted checks */

static sluice_rate_quota_t free_q[2] = { { "second", 1, 1000000000, 2 }, { "day", 100, 86400000000000, 0 } };
static sluice_rate_quota_t pro_q[3] = { { "second", 10, 1000000000, 0 },
                                        { "minute", 300, 60000000000, 0 },
                                        { "day", 10000, 86400000000000, 0 } };
static sluice_plan_t two_plans[2] = { { "free", free_q, 2 }, { "pro", pro_q, 3 } };
static const sluice_plans_t table2 = { two_plans, 2, 0 };

static sluice_fleet_result_t ask(struct event_base *base, sluice_fleet_t *f, int kind, const char *key, uint32_t plan,
                                 uint64_t cost, uint64_t t) {
    tf_box_t b;
    memset(&b, 0, sizeof b);
    sluice_key_t k = sluice_key_bytes(key, strlen(key));
    int rc = kind == 0 ? sluice_fleet_call_plan(f, k, plan, cost, t, tf_on_result, &b)
                       : sluice_fleet_quota_plan(f, k, plan, cost, t, tf_on_result, &b);
    CHECK(rc == 0, "submit: %s", sluice_strerror(rc));
    tf_wait(base, &b);
    return b.res;
}

/* `head` then n little-endian doubles into out: its length. */
static size_t doubles_value(char *out, const char *head, const double *v, size_t n) {
    size_t len = strlen(head);
    memcpy(out, head, len);
    for (size_t i = 0; i < n; i++) {
        uint64_t bits;
        memcpy(&bits, &v[i], 8);
        for (int k = 0; k < 8; k++) out[len++] = (char)(bits >> (8 * k));
    }
    return len;
}

/* A plan's binary value as the script stores it: `head` ("P3 ... :"), then
 * B div 1e15, B mod 1e15 and each offset as doubles. */
static size_t binary_value(char *out, const char *head, uint64_t b, const uint64_t *x, size_t n) {
    double v[2 + SLUICE_PLAN_QUOTAS_MAX];
    v[0] = (double)(b / 1000000000000000ull);
    v[1] = (double)(b % 1000000000000000ull);
    for (size_t i = 0; i < n; i++) v[2 + i] = (double)x[i];
    return doubles_value(out, head, v, n + 2);
}

static void cache_and_changes(int port) {
    struct event_base *base = event_base_new();
    sluice_fleet_t *f = new_fleet(base, port, &table2, "cachep", true, 0);
    uint64_t t = 5 * NS;
    /* free: 2 at once, then the cache knows */
    CHECK(ask(base, f, 0, "k", 0, 1, t).decision.kind == SLUICE_EMITTED, "free 1");
    CHECK(ask(base, f, 0, "k", 0, 1, t).decision.kind == SLUICE_EMITTED, "free 2");
    /* the second reply taught the cache the key's TATs: a certain drop */
    sluice_fleet_result_t r = ask(base, f, 0, "k", 0, 1, t);
    CHECK(r.decision.kind == SLUICE_DROPPED && r.source == SLUICE_FLEET_SOURCE_CACHE, "free 3: the cache drops");
    CHECK(r.detail.nquotas == 2 && r.detail.refused == 1, "cache answer detail: n %u refused %x", r.detail.nquotas,
          r.detail.refused);
    CHECK(r.decision.at == t + 1 * NS, "cache answer retry %llu", (unsigned long long)r.decision.at);
    /* pro: the same key, converted (2 s of use at 1/s is 0.2 s at 10/s): admitted by Redis */
    r = ask(base, f, 0, "k", 1, 1, t);
    CHECK(r.decision.kind == SLUICE_EMITTED && r.source == SLUICE_FLEET_SOURCE_REDIS, "pro: admitted by Redis");
    CHECK(r.detail.nquotas == 3 && r.detail.quotas[0].full == t + 300000000, "pro second full %llu",
          (unsigned long long)r.detail.quotas[0].full);
    /* free again: converted back (0.3 s at 10/s is 3 s at 1/s): Redis, not the old entry */
    r = ask(base, f, 0, "k", 0, 1, t);
    CHECK(r.decision.kind == SLUICE_DROPPED && r.source == SLUICE_FLEET_SOURCE_REDIS, "free after pro: Redis");
    CHECK(r.decision.at == t + 2 * NS, "free after pro: retry %llu", (unsigned long long)r.decision.at);
    /* that drop's TATs were converted, not stored: they teach nothing (a
     * slower quota's converted TAT falls as time passes), so Redis again */
    r = ask(base, f, 0, "k", 0, 1, t + 1000);
    CHECK(r.decision.kind == SLUICE_DROPPED && r.source == SLUICE_FLEET_SOURCE_REDIS, "free again: Redis");
    /* a new table: free gets 5 per second: the cache's entry is for the old one */
    sluice_rate_quota_t free5[2] = { { "second", 5, 1000000000, 5 }, { "day", 100, 86400000000000, 0 } };
    sluice_plan_t p5[2] = { { "free", free5, 2 }, { "pro", pro_q, 3 } };
    sluice_plans_t t5 = { p5, 2, 0 };
    CHECK(sluice_fleet_set_plans(f, &t5, NULL) == 0, "set_plans");
    r = ask(base, f, 0, "k", 0, 1, t);
    /* 3 s of use at 1/s is 0.6 s at 5/s, burst 1 s: admitted */
    CHECK(r.decision.kind == SLUICE_EMITTED && r.source == SLUICE_FLEET_SOURCE_REDIS, "after set_plans: Redis admits");
    CHECK(r.detail.quotas[0].full == t + 800000000, "after set_plans: second full %llu",
          (unsigned long long)r.detail.quotas[0].full);
    /* one Redis key holds every quota of the key, whatever the plan */
    redisReply *k = tf_cmd(port, "KEYS {6:cachep:*");
    CHECK(k && k->type == REDIS_REPLY_ARRAY && k->elements == 1, "one Redis key per limiter key");
    freeReplyObject(k);
    /* its value: the quotas, the time of the write, then each TAT - t*limit:
     * second full at t + 0.8 s (4e9 scaled by 5), day four calls of 864 s each */
    redisReply *v = tf_cmd(port, "GET {6:cachep:bk}");
    char want[160];
    const uint64_t offs[2] = { 4000000000ull, 345600000000000ull };
    size_t wlen = binary_value(want, "P3 second 5 1000000000 day 100 86400000000000 :", t, offs, 2);
    CHECK(v && v->type == REDIS_REPLY_STRING && v->len == wlen && memcmp(v->str, want, wlen) == 0,
          "stored value: %.48s (%zu bytes)", v && v->str ? v->str : "(none)", v ? v->len : 0);
    freeReplyObject(v);
    redisReply *ttl = tf_cmd(port, "PTTL {6:cachep:bk}");
    CHECK(ttl && ttl->type == REDIS_REPLY_INTEGER && ttl->integer > 0, "the key expires");
    freeReplyObject(ttl);
    sluice_fleet_free(f);
    event_base_free(base);
}

/* Asks for key `key` under plan 0 (free: second, day) at t, and checks that
 * Redis admitted it with those two fulls. */
static void admitted_with(struct event_base *base, sluice_fleet_t *f, const char *what, const char *key, uint64_t t,
                          uint64_t second, uint64_t day) {
    sluice_fleet_result_t r = ask(base, f, 0, key, 0, 1, t);
    CHECK(r.source == SLUICE_FLEET_SOURCE_REDIS && r.decision.kind == SLUICE_EMITTED && r.detail.nquotas == 2 &&
              r.detail.quotas[0].full == second && r.detail.quotas[1].full == day,
          "%s: source %d kind %d full %llu %llu", what, r.source, r.decision.kind,
          (unsigned long long)r.detail.quotas[0].full, (unsigned long long)r.detail.quotas[1].full);
}

static void values(int port) {
    struct event_base *base = event_base_new();
    sluice_fleet_t *f = new_fleet(base, port, &table2, "vals", false, 0);
    static const char *const bad[] = { "12345",
                                       "P1",
                                       "P1 second 1 1000000000",
                                       "P1 second 0 1000000000 5",
                                       "P1 second 1 1000000000 5 ",
                                       "P1 second 1 1000000000 5 second 1 2 3",
                                       "P1 s!x 1 1 1",
                                       "P2 second 1 1000000000 5",
                                       "P2 second 1 1000000000 day 100 86400000000000 : 5 6",
                                       "P2 second 1 1000000000 : 5 6 7",
                                       "P2 second 1 1000000000 : 5 x",
                                       "P2 second 1 1000000000 : 5 "
                                       "1234567890123456789012345678901234567890123456789012345678901",
                                       "P3 second 1 1000000000 : 5 6" };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char key[16], rkey[32];
        snprintf(key, sizeof key, "bad%zu", i);
        snprintf(rkey, sizeof rkey, "{4:vals:b%s}", key);
        redisReply *s = tf_cmd(port, "SET %s %s", rkey, bad[i]);
        CHECK(s, "SET");
        freeReplyObject(s);
        sluice_fleet_result_t r = ask(base, f, 0, key, 1, 1, NS);
        CHECK(r.source == SLUICE_FLEET_SOURCE_FAILURE && r.cause == SLUICE_EBADVALUE, "value '%s': source %d cause %d",
              bad[i], r.source, r.cause);
        redisReply *g = tf_cmd(port, "GET %s", rkey);
        CHECK(g && g->type == REDIS_REPLY_STRING && strcmp(g->str, bad[i]) == 0, "value '%s' changed", bad[i]);
        freeReplyObject(g);
    }
    /* binary values of the right length whose numbers are out of bounds */
    static const double badnums[][4] = { { 0, 5, 6, -1 },   { 0, 5, 6, 0.5 },   { 0, 5, 6, 1e15 }, { 0, -5, 6, 7 },
                                         { 0, 1e15, 6, 7 }, { 20000, 5, 6, 7 }, { 0, 5, 6, NAN },  { 0, 5, 1e300, 7 } };
    for (size_t i = 0; i < sizeof badnums / sizeof badnums[0]; i++) {
        char val[128], rkey[32];
        size_t len = doubles_value(val, "P3 second 1 1000000000 day 100 86400000000000 :", badnums[i], 4);
        snprintf(rkey, sizeof rkey, "{4:vals:bbin%zu}", i);
        redisReply *st = tf_cmd(port, "SET %s %b", rkey, val, len);
        CHECK(st, "SET");
        freeReplyObject(st);
        char key[16];
        snprintf(key, sizeof key, "bin%zu", i);
        sluice_fleet_result_t r = ask(base, f, 0, key, 1, 1, NS);
        CHECK(r.source == SLUICE_FLEET_SOURCE_FAILURE && r.cause == SLUICE_EBADVALUE, "binary value %zu: cause %d", i,
              r.cause);
        redisReply *g = tf_cmd(port, "GET %s", rkey);
        CHECK(g && g->type == REDIS_REPLY_STRING && g->len == len && memcmp(g->str, val, len) == 0,
              "binary value %zu changed", i);
        freeReplyObject(g);
    }
    /* a good key beside a bad one in one batch is decided */
    CHECK(ask(base, f, 0, "good", 1, 1, NS).decision.kind == SLUICE_EMITTED, "a good key");
    /* a value of the earlier form, each TAT itself, is read and written back in
     * this one: at 10 s, second (1/s, burst 2) is full at 10.5 s, day (100 a
     * day) has one call of 864 s (8.64e13 scaled by 100) */
    redisReply *old = tf_cmd(port, "SET {4:vals:bold} %s",
                             "P1 second 1 1000000000 day 100 86400000000000 : 10500000000 87400000000000");
    CHECK(old, "SET");
    freeReplyObject(old);
    admitted_with(base, f, "earlier form", "old", 10 * NS, 11500000000ull, 10 * NS + 1728000000000ull);
    old = tf_cmd(port, "GET {4:vals:bold}");
    char want[128];
    const uint64_t offs[2] = { 1500000000ull, 172800000000000ull };
    size_t wlen = binary_value(want, "P3 second 1 1000000000 day 100 86400000000000 :", 10 * NS, offs, 2);
    CHECK(old && old->type == REDIS_REPLY_STRING && old->len == wlen && memcmp(old->str, want, wlen) == 0,
          "earlier form rewritten in binary (%zu bytes)", old ? old->len : 0);
    freeReplyObject(old);
    /* a decimal value of this form (the one the exact arithmetic writes) is
     * read, and stored in binary by an admitted call: B = 10 s, second full at
     * 10.5 s, day one call (8.64e13 scaled by 100); by the fast path, as P4
     * (expiring at the end of a cell: test_fleet_expiry.c) */
    old = tf_cmd(port, "SET {4:vals:bdec} %s",
                 "P2 second 1 1000000000 day 100 86400000000000 : 10000000000 500000000 86400000000000");
    CHECK(old, "SET");
    freeReplyObject(old);
    admitted_with(base, f, "decimal form", "dec", 10 * NS, 11500000000ull, 10 * NS + 1728000000000ull);
    old = tf_cmd(port, "GET {4:vals:bdec}");
    wlen = binary_value(want, "P4 second 1 1000000000 day 100 86400000000000 :", 10 * NS, offs, 2);
    CHECK(old && old->type == REDIS_REPLY_STRING && old->len == wlen && memcmp(old->str, want, wlen) == 0,
          "decimal form rewritten in binary (%zu bytes)", old ? old->len : 0);
    freeReplyObject(old);
    /* and a binary value is read back: the next call charges from it */
    admitted_with(base, f, "binary form", "dec", 11 * NS, 12500000000ull, 10 * NS + 2592000000000ull);
    /* B and t whose first digits differ (1e15 and 2e15 + 0.5 s: the key idle
     * for 11.6 days): t - B is taken from both parts, so every quota is whole
     * again */
    admitted_with(base, f, "cross, first", "cross", 1000000000000000ull, 1000001000000000ull,
                  1000000000000000ull + 864000000000ull);
    admitted_with(base, f, "cross", "cross", 2000000500000000ull, 2000001500000000ull,
                  2000000500000000ull + 864000000000ull);
    /* a one-quota limiter with the same prefix refuses plan state */
    sluice_fleet_config_t c;
    memset(&c, 0, sizeof c);
    c.policy = sluice_rate(10, 1000000000, 0);
    c.port = port;
    c.prefix = "vals";
    c.prefix_len = 4;
    c.manual_time = true;
    c.timeout_ns = 5000000000ull;
    sluice_fleet_t *one = NULL;
    CHECK(sluice_fleet_new(&one, base, &c) == 0, "one-quota fleet");
    tf_box_t b;
    memset(&b, 0, sizeof b);
    CHECK(sluice_fleet_call(one, sluice_key_bytes("good", 4), 1, NS, tf_on_result, &b) == 0, "call");
    tf_wait(base, &b);
    CHECK(b.res.source == SLUICE_FLEET_SOURCE_FAILURE && b.res.cause == SLUICE_EBADVALUE,
          "one quota on plan state: cause %d", b.res.cause);
    sluice_fleet_free(one);
    sluice_fleet_free(f);
    event_base_free(base);
}

static void errors(int port) {
    struct event_base *base = event_base_new();
    sluice_fleet_t *f = new_fleet(base, port, &table2, "errs", true, 0);
    tf_box_t b;
    sluice_key_t k = sluice_key_u64(1);
    CHECK(sluice_fleet_call_plan(f, k, 2, 1, NS, tf_on_result, &b) == SLUICE_ENOPLAN, "plan 2 of 2");
    CHECK(sluice_fleet_quota_plan(f, k, UINT32_MAX, 1, NS, tf_on_result, &b) == SLUICE_ENOPLAN, "plan UINT32_MAX");
    uint32_t idx = 9;
    CHECK(sluice_fleet_plan_index(f, "pro", 3, &idx) == 0 && idx == 1, "plan_index pro");
    CHECK(sluice_fleet_plan_index(f, "pr", 2, &idx) == SLUICE_ENOPLAN, "plan_index of a prefix");
    CHECK(sluice_fleet_plan_index(f, "enterprise", 10, &idx) == SLUICE_ENOPLAN, "plan_index unknown");
    /* bad tables: refused, nothing changed */
    sluice_rate_quota_t dup[2] = { { "a", 1, 1000, 0 }, { "a", 2, 1000, 0 } };
    sluice_plan_t pd[1] = { { "free", dup, 2 } };
    sluice_plans_t td = { pd, 1, 0 };
    CHECK(sluice_fleet_set_plans(f, &td, NULL) == SLUICE_EINVAL, "duplicate quota");
    sluice_plan_t p0[1] = { { "free", dup, 0 } };
    sluice_plans_t t0 = { p0, 1, 0 };
    CHECK(sluice_fleet_set_plans(f, &t0, NULL) == SLUICE_EINVAL, "no quota");
    sluice_plan_t other[1] = { { "basic", free_q, 2 } };
    sluice_plans_t to = { other, 1, 0 };
    CHECK(sluice_fleet_set_plans(f, &table2, &to) == SLUICE_EINVAL, "fallback with other names");
    CHECK(sluice_fleet_plan_index(f, "pro", 3, &idx) == 0 && idx == 1, "the table is unchanged");
    CHECK(ask(base, f, 0, "after", 1, 1, NS).decision.kind == SLUICE_EMITTED, "usable after the errors");
    /* plan 0 by the plain calls */
    sluice_fleet_result_t r;
    memset(&b, 0, sizeof b);
    CHECK(sluice_fleet_call(f, sluice_key_bytes("plain", 5), 1, NS, tf_on_result, &b) == 0, "plain call");
    tf_wait(base, &b);
    r = b.res;
    CHECK(r.decision.kind == SLUICE_EMITTED && r.detail.nquotas == 2 && r.detail.plan == 0, "plain call: plan 0");
    sluice_fleet_free(f);

    /* a limiter without plans takes no plan call; configurations that mix are refused */
    sluice_fleet_config_t c;
    memset(&c, 0, sizeof c);
    c.policy = sluice_rate(10, 1000000000, 0);
    c.port = port;
    c.manual_time = true;
    CHECK(sluice_fleet_new(&f, base, &c) == 0, "one-quota fleet");
    CHECK(sluice_fleet_call_plan(f, k, 0, 1, NS, tf_on_result, &b) == SLUICE_EINVAL, "plan call without plans");
    CHECK(sluice_fleet_set_plans(f, &table2, NULL) == SLUICE_EINVAL, "set_plans without plans");
    CHECK(sluice_fleet_plan_index(f, "pro", 3, &idx) == SLUICE_EINVAL, "plan_index without plans");
    sluice_fleet_free(f);
    sluice_fleet_t *g = NULL;
    c.plans = &table2; /* with a rate's numbers too */
    CHECK(sluice_fleet_new(&g, base, &c) == SLUICE_EINVAL && g == NULL, "plans and a rate's numbers");
    c.policy = sluice_rate_plans();
    c.plans = &td;
    CHECK(sluice_fleet_new(&g, base, &c) == SLUICE_EINVAL && g == NULL, "an invalid table");
    event_base_free(base);
}

static void failure(void) {
    struct event_base *base = event_base_new();
    int port = test_free_port(); /* nothing listens there */
    sluice_rate_quota_t fq[2] = { { "second", 1, 1000000000, 1 }, { "day", 50, 86400000000000, 0 } };
    sluice_rate_quota_t pq[3] = { { "second", 5, 1000000000, 0 },
                                  { "minute", 150, 60000000000, 0 },
                                  { "day", 5000, 86400000000000, 0 } };
    sluice_plan_t fp[2] = { { "free", fq, 2 }, { "pro", pq, 3 } };
    sluice_plans_t fallback = { fp, 2, 0 };
    sluice_fleet_config_t c;
    memset(&c, 0, sizeof c);
    c.policy = sluice_rate_plans();
    c.plans = &table2;
    c.fallback_plans = &fallback;
    c.on_failure = SLUICE_FLEET_FAIL_LOCAL;
    c.port = port;
    c.manual_time = true;
    c.timeout_ns = 200000000;
    sluice_fleet_t *f = NULL;
    CHECK(sluice_fleet_new(&f, base, &c) == 0, "fail-local fleet");
    sluice_fleet_result_t r = ask(base, f, 0, "k", 1, 1, NS);
    CHECK(r.source == SLUICE_FLEET_SOURCE_FAILURE && r.decision.kind == SLUICE_EMITTED, "fallback admits");
    CHECK(r.detail.nquotas == 3 && r.detail.quotas[0].limit == 5, "fallback detail: the fallback's pro (n %u)",
          r.detail.nquotas);
    r = ask(base, f, 1, "k", 1, 1, NS);
    CHECK(r.detail.nquotas == 3 && r.quota.remaining == 4, "fallback quota: remaining %llu",
          (unsigned long long)r.quota.remaining);
    /* the fallback follows set_plans, by name */
    sluice_plan_t swapped[2] = { { "pro", pq, 3 }, { "free", fq, 2 } };
    sluice_plans_t sw = { swapped, 2, 0 };
    sluice_plan_t swapped_main[2] = { { "pro", pro_q, 3 }, { "free", free_q, 2 } };
    sluice_plans_t swm = { swapped_main, 2, 0 };
    CHECK(sluice_fleet_set_plans(f, &swm, &sw) == 0, "set_plans with a fallback");
    r = ask(base, f, 0, "k", 1, 1, NS); /* plan 1 is now free */
    CHECK(r.detail.nquotas == 2 && r.detail.quotas[0].limit == 1, "fallback after set_plans: free (n %u)",
          r.detail.nquotas);
    sluice_fleet_stats_t st;
    sluice_fleet_stats(f, &st);
    CHECK(st.fallback_admitted + st.fallback_dropped == 2, "fallback decisions counted");
    sluice_fleet_free(f);
    /* fail closed: no figures; never for a cost above a quota's burst */
    c.on_failure = SLUICE_FLEET_FAIL_CLOSED;
    c.fallback_plans = NULL;
    CHECK(sluice_fleet_new(&f, base, &c) == 0, "fail-closed fleet");
    r = ask(base, f, 0, "k", 0, 3, NS); /* free's second has burst 2 */
    CHECK(r.decision.kind == SLUICE_DROPPED && r.decision.at == SLUICE_NEVER && r.detail.nquotas == 0,
          "fail closed: never");
    r = ask(base, f, 0, "k", 0, 2, NS);
    CHECK(r.decision.kind == SLUICE_DROPPED && r.decision.at != SLUICE_NEVER, "fail closed: a retry time");
    sluice_fleet_free(f);
    event_base_free(base);
}

/* ---- threads: calls and plan replacements from two threads, the fleet on a loop */

struct race {
    sluice_fleet_t *f;
    int answered, bad; /* atomics */
    int started, sets; /* atomics: calls made before the replacer may start; tables set */
    uint32_t nq_seen;  /* bit n: a detail with n quotas seen (atomic or) */
};

static void race_answer(void *user, const sluice_fleet_result_t *res) {
    struct race *r = user;
    if (res->status != 0 || res->source == SLUICE_FLEET_SOURCE_FAILURE || res->detail.nquotas < 1 ||
        res->detail.nquotas > 3)
        __atomic_add_fetch(&r->bad, 1, __ATOMIC_RELAXED);
    else
        __atomic_or_fetch(&r->nq_seen, 1u << res->detail.nquotas, __ATOMIC_RELAXED);
    __atomic_add_fetch(&r->answered, 1, __ATOMIC_RELAXED);
}

enum { RACE_CALLS = 2000, RACE_SETS = 61 }; /* odd: the last table set is the second (free of 1 quota) */

static void *race_caller(void *arg) {
    struct race *r = arg;
    for (int i = 0; i < RACE_CALLS; i++) {
        /* the first tenth under the first table (the replacer waits for
         * it); the second half after at least one replacement */
        if (i == RACE_CALLS / 10) __atomic_store_n(&r->started, 1, __ATOMIC_RELEASE);
        uint64_t end = tf_mono() + 60000000000ull;
        while (i == RACE_CALLS / 2 && __atomic_load_n(&r->sets, __ATOMIC_ACQUIRE) == 0)
            CHECK(tf_mono() < end, "no replacement within 60 s");
        char key[16];
        snprintf(key, sizeof key, "r%d", i % 50);
        /* plan 1 exists in both tables; its quota count differs */
        int rc = sluice_fleet_call_plan(r->f, sluice_key_bytes(key, strlen(key)), (uint32_t)(i % 2), 1,
                                        (uint64_t)i * 1000000, race_answer, r);
        if (rc != 0) __atomic_add_fetch(&r->bad, 1, __ATOMIC_RELAXED);
        if (rc != 0) __atomic_add_fetch(&r->answered, 1, __ATOMIC_RELAXED);
    }
    return NULL;
}

static void *race_replacer(void *arg) {
    struct race *r = arg;
    sluice_rate_quota_t one[1] = { { "second", 100, 1000000000, 0 } };
    sluice_plan_t a[2] = { { "free", free_q, 2 }, { "pro", pro_q, 3 } };
    sluice_plan_t b[2] = { { "free", one, 1 }, { "pro", free_q, 2 } };
    sluice_plans_t ta = { a, 2, 0 }, tb = { b, 2, 0 };
    uint64_t end = tf_mono() + 60000000000ull;
    while (!__atomic_load_n(&r->started, __ATOMIC_ACQUIRE)) CHECK(tf_mono() < end, "the caller never started");
    for (int i = 0; i < RACE_SETS; i++) {
        CHECK(sluice_fleet_set_plans(r->f, i % 2 ? &ta : &tb, NULL) == 0, "set_plans from another thread");
        uint32_t idx;
        CHECK(sluice_fleet_plan_index(r->f, "pro", 3, &idx) == 0 && idx == 1, "plan_index from another thread");
        __atomic_add_fetch(&r->sets, 1, __ATOMIC_RELEASE);
        struct timespec ts = { 0, 200000 };
        nanosleep(&ts, NULL);
    }
    return NULL;
}

static void threads(int port) {
    sluice_loop_t *loop = NULL;
    CHECK(sluice_loop_start(&loop, NULL) == 0, "sluice_loop_start");
    sluice_fleet_config_t c;
    memset(&c, 0, sizeof c);
    c.policy = sluice_rate_plans();
    c.plans = &table2;
    c.port = port;
    c.prefix = "race";
    c.prefix_len = 4;
    c.manual_time = true;
    c.timeout_ns = 20000000000ull; /* generous: TSan on a loaded machine */
    struct race r = { 0 };
    CHECK(sluice_fleet_new_on_loop(&r.f, loop, &c) == 0, "fleet on a loop");
    pthread_t a, b;
    CHECK(pthread_create(&a, NULL, race_caller, &r) == 0 && pthread_create(&b, NULL, race_replacer, &r) == 0,
          "threads");
    pthread_join(a, NULL);
    pthread_join(b, NULL);
    /* one call more, under the last table for sure */
    CHECK(sluice_fleet_call_plan(r.f, sluice_key_bytes("last", 4), 0, 1, (uint64_t)RACE_CALLS * 1000000, race_answer,
                                 &r) == 0,
          "the last call");
    uint64_t end = tf_mono() + 60000000000ull;
    while (__atomic_load_n(&r.answered, __ATOMIC_RELAXED) < RACE_CALLS + 1) {
        CHECK(tf_mono() < end, "only %d of %d answered", __atomic_load_n(&r.answered, __ATOMIC_RELAXED), RACE_CALLS);
        struct timespec ts = { 0, 1000000 };
        nanosleep(&ts, NULL);
    }
    int bad = __atomic_load_n(&r.bad, __ATOMIC_ACQUIRE);
    uint32_t seen = __atomic_load_n(&r.nq_seen, __ATOMIC_ACQUIRE);
    CHECK(bad == 0, "%d bad answers", bad);
    /* both tables were used: details of 1, 2 and 3 quotas (the first tenth
     * under the first table, the last call under the second) */
    CHECK(seen == (2u | 4u | 8u), "quota counts seen: %x", seen);
    sluice_fleet_free(r.f); /* from this thread while the loop runs */
    sluice_loop_free(loop);
}

int main(void) {
    const char *seed = getenv("SLUICE_TEST_SEED");
    if (seed) tf_rng = strtoull(seed, NULL, 0) | 1;
    fprintf(stderr, TEST_NAME ": seed %llu\n", (unsigned long long)tf_rng);
    test_redis_t redis;
    tf_start_redis(&redis);
    errors(redis.port);
    values(redis.port);
    cache_and_changes(redis.port);
    failure();
    threads(redis.port);
    differential(redis.port);
    test_redis_stop(&redis);
    printf(TEST_NAME ": ok\n");
    return 0;
}
