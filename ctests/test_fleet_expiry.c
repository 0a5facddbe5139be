/* test_fleet_expiry.c — how a one-policy key is stored and expires in Redis
 * (docs/fleet.md, "Expiry"). The script stores a key's TAT after the marker of
 * the policy's cells (16 - k zeros, the cells 10^k of the scaled time, k the
 * digits of burst * per less one), expires it at the end of the TAT's cell,
 * and keeps that expiry (SET KEEPTTL) while later TATs stay in the cell.
 *
 *  1. Server time, calls faster than the policy allows: after every admitted
 *     call the key's expiry (Redis's TIME + PTTL, read in one script) is at or
 *     after its TAT and at most one cell (+ 3 ms) later; and SETs that keep
 *     the expiry are seen (MONITOR). A script that kept an expiry across a
 *     cell's end would let the key vanish before its TAT (the first check);
 *     one that never kept it fails the second.
 *  2. Manual time, 1 ms of extra expiry: a call whose key's burst is whole
 *     again (its marked TAT is before t) and whose new TAT lies in the next
 *     cell sets the expiry anew, to the end of that cell (it may keep it only
 *     within the same cell).
 *  1 and 2 again for a limiter of plans, whose key (P4) expires at the end of
 *     the cell of its latest TAT.
 *  3. Manual time, stored values the script did not write itself, decided
 *     exactly as the model of test_fleet_util.h with that TAT: a plain TAT
 *     (as a version without cells writes it), leading zeros, the marker of
 *     other cells; each written back with this policy's marker. */
#define TEST_NAME "test_fleet_expiry"
#include "test_fleet_util.h"

#include "fleet-internal.h"

#define SEC 1000000000ull
#define MS 1000000ull
#define LIMIT 100 /* T = 10 ms */
#define BURST 20  /* burst * per = 2 * 10^10: cells of 10^10 (scaled), 100 ms */
#define CELL_MS 100
#define ZEROS "000000" /* 16 - 10 */

static struct event_base *base;

/* Plans: one plan of two quotas, 10 ms apart each; the longest burst, the
 * minute's, is 6 s: cells of 10^9 ns, 1 s. */
static sluice_rate_quota_t quotas[2] = { { "second", 100, 1000000000, 20 }, { "minute", 6000, 60000000000, 600 } };
static sluice_plan_t plan = { "p", quotas, 2 };
static const sluice_plans_t plans = { &plan, 1, 0 };
#define PLAN_CELL_MS 1000

static bool with_plans; /* the limiters below: of one policy, or of plans */

static sluice_fleet_t *fleet(int port, bool manual, uint64_t extra_ms) {
    sluice_fleet_config_t c;
    memset(&c, 0, sizeof c);
    c.policy = sluice_rate(LIMIT, (int64_t)SEC, BURST);
    if (with_plans) {
        c.policy = sluice_rate_plans();
        c.plans = &plans;
    }
    c.port = port;
    c.prefix = "exp";
    c.prefix_len = 3;
    c.manual_time = manual;
    c.manual_ttl_extra_ms = extra_ms;
    c.timeout_ns = 5 * SEC;
    c.cache_slots = SIZE_MAX; /* every call reaches Redis */
    sluice_fleet_t *f = NULL;
    CHECK(sluice_fleet_new(&f, base, &c) == 0, "sluice_fleet_new");
    return f;
}

static sluice_fleet_result_t call(sluice_fleet_t *f, uint64_t t) {
    tf_box_t b = { 0 };
    int rc = with_plans ? sluice_fleet_call_plan(f, sluice_key_bytes("k", 1), 0, 1, t, tf_on_result, &b)
                        : sluice_fleet_call(f, sluice_key_bytes("k", 1), 1, t, tf_on_result, &b);
    CHECK(rc == 0, "call");
    tf_wait(base, &b);
    CHECK(b.res.status == 0 && b.res.source == SLUICE_FLEET_SOURCE_REDIS, "call: status %d source %d", b.res.status,
          b.res.source);
    return b.res;
}

/* The one key in Redis (the limiter's name for "k"). */
static void the_key(char *out, size_t cap) {
    redisReply *r = tf_ok("KEYS *");
    CHECK(r->type == REDIS_REPLY_ARRAY && r->elements == 1 && r->element[0]->len < cap, "one key expected");
    memcpy(out, r->element[0]->str, r->element[0]->len);
    out[r->element[0]->len] = '\0';
    freeReplyObject(r);
}

/* The key's expiry in ms of Redis's clock: TIME and PTTL read in one script. */
static long long expiry_ms(const char *name) {
    redisReply *r =
        tf_ok("EVAL %s 1 %s", "local t = redis.call('TIME') return {redis.call('PTTL', KEYS[1]), t[1], t[2]}", name);
    CHECK(r->type == REDIS_REPLY_ARRAY && r->elements == 3 && r->element[0]->type == REDIS_REPLY_INTEGER,
          "PTTL and TIME");
    long long pttl = r->element[0]->integer;
    CHECK(pttl > 0, "the key has no expiry (PTTL %lld)", pttl);
    long long now = atoll(r->element[1]->str) * 1000 + atoll(r->element[2]->str) / 1000;
    freeReplyObject(r);
    return now + pttl;
}

static void server_time(int port) {
    freeReplyObject(tf_ok("FLUSHALL"));
    redisContext *mon = redisConnect("127.0.0.1", port);
    CHECK(mon && !mon->err, "redisConnect (monitor)");
    redisReply *r = redisCommand(mon, "MONITOR");
    CHECK(r && r->type == REDIS_REPLY_STATUS, "MONITOR");
    freeReplyObject(r);

    sluice_fleet_t *f = fleet(port, false, 0);
    char name[128];
    int admitted = 0, dropped = 0;
    for (int i = 0; i < 60; i++) {
        sluice_fleet_result_t res = call(f, 0);
        if (res.decision.kind != SLUICE_EMITTED) {
            dropped++;
            continue;
        }
        if (admitted++ == 0) the_key(name, sizeof name);
        /* the (latest) TAT in ms of Redis's clock (server time), rounded up */
        uint64_t full = res.decision.full;
        for (uint32_t q = 0; with_plans && q < res.detail.nquotas; q++)
            if (res.detail.quotas[q].full > full) full = res.detail.quotas[q].full;
        long long tat = (long long)((full + MS - 1) / MS), exp = expiry_ms(name);
        long long cell = with_plans ? PLAN_CELL_MS : CELL_MS;
        CHECK(exp >= tat, "call %d: the key expires at %lld ms, before its TAT %lld", i, exp, tat);
        CHECK(exp <= tat + cell + 3, "call %d: the key expires at %lld ms, more than a cell after its TAT %lld", i, exp,
              tat);
    }
    /* 60 calls in far less than the 400 ms that refill 40 (slow machines: the
     * drops may be fewer, the admissions still cross several cells) */
    CHECK(admitted >= BURST && dropped > 0, "admitted %d, dropped %d", admitted, dropped);

    /* the SETs the script made, up to a marker command */
    freeReplyObject(tf_ok("ECHO sluice-expiry-end"));
    int keep = 0, px = 0;
    for (;;) {
        void *reply = NULL;
        CHECK(redisGetReply(mon, &reply) == REDIS_OK && reply, "monitor read");
        r = reply;
        bool end = r->type == REDIS_REPLY_STATUS && strstr(r->str, "sluice-expiry-end");
        if (r->type == REDIS_REPLY_STATUS && strstr(r->str, "\"SET\"")) {
            if (strstr(r->str, "\"KEEPTTL\"")) keep++;
            if (strstr(r->str, "\"PX\"")) px++;
        }
        freeReplyObject(r);
        if (end) break;
    }
    CHECK(keep + px == admitted, "%d SETs with KEEPTTL, %d with PX, for %d admissions", keep, px, admitted);
    /* 10 calls fit a cell (100 for plans): at most one SET in a cell's calls
     * needs PX */
    CHECK(px <= admitted / (with_plans ? 100 : 10) + 2 && keep > 0, "%d SETs with KEEPTTL, %d with PX", keep, px);
    redisFree(mon);
    sluice_fleet_free(f);
}

/* Calls at trace time t (manual time, extra expiry 1 ms) and checks the key's
 * PTTL: at most `want` ms, and at least `want` less the time since the call. */
static void call_expires(sluice_fleet_t *f, const char *name, uint64_t t, long long want) {
    uint64_t before = tf_mono();
    sluice_fleet_result_t r = call(f, t);
    CHECK(r.decision.kind == SLUICE_EMITTED, "call at %llu ns: not admitted", (unsigned long long)t);
    redisReply *p = tf_ok("PTTL %s", name);
    long long since = (long long)((tf_mono() - before) / MS) + 1;
    CHECK(p->type == REDIS_REPLY_INTEGER && p->integer <= want && p->integer >= want - since,
          "call at %llu ns: PTTL %lld, want %lld (%lld ms after the call at most)", (unsigned long long)t, p->integer,
          want, since);
    freeReplyObject(p);
}

static void next_cell(int port) {
    freeReplyObject(tf_ok("FLUSHALL"));
    sluice_fleet_t *f = fleet(port, true, 1);
    const uint64_t t0 = 1700000000ull * SEC; /* a cell's start: a multiple of 1 s */
    call(f, t0 - 10 * SEC);                  /* (makes the key, then deleted) */
    char name[128];
    the_key(name, sizeof name);
    freeReplyObject(tf_ok("DEL %s", name));
    if (!with_plans) {
        /* TAT t0 + 10 ms: to the cell's end, 100 ms, + 2 + 1 */
        call_expires(f, name, t0, 103);
        /* at t0 + 95 ms the burst is whole; the new TAT, t0 + 105 ms, is in
         * the next cell, which ends at t0 + 200 ms: 105 + 3 ms (kept, it
         * would be the first cell's end, 8 ms before that TAT) */
        call_expires(f, name, t0 + 95 * MS, 108);
    } else {
        /* TATs t0 + 995 ms: to the cell's end, 15 ms, + 2 + 1 */
        call_expires(f, name, t0 + 985 * MS, 18);
        /* 1 ms later both TATs pass into the next cell (t0 + 1005 ms), which
         * ends at t0 + 2 s: 1014 + 3 ms (kept, the key would vanish 15 ms
         * after this call, before those TATs) */
        call_expires(f, name, t0 + 986 * MS, 1017);
    }
    sluice_fleet_free(f);
}

/* `v` in decimal (the fleet's own printer). */
static const char *u128(tf_u128 v, char buf[48]) {
    sluice__fleet_u128_str(v, buf);
    return buf;
}

/* Stores `value` as the key's state, calls at t, and checks the decision
 * against the model with TAT `tat` (scaled by the limit) and the value written
 * back (the marker, then the new TAT). */
static void stored(sluice_fleet_t *f, const char *name, const char *what, const char *value, tf_u128 tat, uint64_t t) {
    freeReplyObject(tf_ok("SET %s %s PX 600000", name, value));
    tf_model_t m = { .limit = LIMIT, .per = SEC, .burst = BURST, .nkeys = 1 };
    m.tat[0] = tat;
    sluice_decision_t want = tf_model_call(&m, 0, t, 1);
    sluice_fleet_result_t got = call(f, t);
    CHECK(got.decision.kind == want.kind && got.decision.at == want.at && got.decision.full == want.full &&
              got.decision.remaining == want.remaining,
          "%s: fleet kind %d at %llu full %llu remaining %llu, model %d %llu %llu %llu", what, got.decision.kind,
          (unsigned long long)got.decision.at, (unsigned long long)got.decision.full,
          (unsigned long long)got.decision.remaining, want.kind, (unsigned long long)want.at,
          (unsigned long long)want.full, (unsigned long long)want.remaining);
    redisReply *v = tf_ok("GET %s", name);
    char tat_s[64], digits[48];
    snprintf(tat_s, sizeof tat_s, "%s%s", ZEROS, u128(m.tat[0], digits));
    CHECK(v->type == REDIS_REPLY_STRING && strcmp(v->str, want.kind == SLUICE_EMITTED ? tat_s : value) == 0,
          "%s: stored %s, want %s", what, v->str, want.kind == SLUICE_EMITTED ? tat_s : value);
    freeReplyObject(v);
}

static void foreign_values(int port) {
    freeReplyObject(tf_ok("FLUSHALL"));
    sluice_fleet_t *f = fleet(port, true, 0);
    /* Unix time in ns: t * limit has 20 digits (the fast path's form); and
     * small times (t * limit below 10^15) */
    const uint64_t times[2] = { 1700000000ull * SEC, 7 * SEC };
    for (int i = 0; i < 2; i++) {
        uint64_t t = times[i];
        call(f, t);
        char name[128];
        the_key(name, sizeof name);
        char v[96], d[48];
        /* a plain TAT, 50 ms after t */
        tf_u128 tat = (tf_u128)(t + 50 * MS) * LIMIT;
        snprintf(v, sizeof v, "%s", u128(tat, d));
        stored(f, name, "plain TAT", v, tat, t);
        /* leading zeros (3: not this policy's marker) */
        snprintf(v, sizeof v, "000%s", u128(tat, d));
        stored(f, name, "three leading zeros", v, tat, t);
        /* the marker of cells 10 times larger (5 zeros), and of smaller (7) */
        snprintf(v, sizeof v, "00000%s", u128(tat, d));
        stored(f, name, "another policy's marker (5 zeros)", v, tat, t);
        snprintf(v, sizeof v, "0000000%s", u128(tat, d));
        stored(f, name, "another policy's marker (7 zeros)", v, tat, t);
        /* this policy's marker: a TAT after t, one before it (its burst is
         * whole), and one a whole burst after t (the call is dropped) */
        snprintf(v, sizeof v, "%s%s", ZEROS, u128(tat, d));
        stored(f, name, "marked TAT", v, tat, t);
        tf_u128 past = (tf_u128)(t - 30 * MS) * LIMIT;
        snprintf(v, sizeof v, "%s%s", ZEROS, u128(past, d));
        stored(f, name, "marked TAT before t", v, past, t);
        tf_u128 full = (tf_u128)(t + (uint64_t)BURST * 10 * MS) * LIMIT;
        snprintf(v, sizeof v, "%s%s", ZEROS, u128(full, d));
        stored(f, name, "marked TAT a burst after t", v, full, t);
        freeReplyObject(tf_ok("FLUSHALL"));
    }
    sluice_fleet_free(f);
}

int main(void) {
    test_redis_t redis;
    tf_start_redis(&redis);
    base = event_base_new();
    CHECK(base, "event_base_new");
    tf_connect(redis.port);
    server_time(redis.port);
    next_cell(redis.port);
    with_plans = true;
    server_time(redis.port);
    next_cell(redis.port);
    with_plans = false;
    foreign_values(redis.port);
    tf_disconnect();
    event_base_free(base);
    test_redis_stop(&redis);
    printf(TEST_NAME ": ok\n");
    return 0;
}
