/* test_fleet_timed.c — the fleet's timed limiter (sluice_fleet_timed.h)
 * against a private redis-server: argument checks, values as exact bytes up
 * to max_value, leases (a delivery claimed again after its lease ends keeps
 * its generation, the old attempt's acknowledgement is refused), release,
 * generations strictly increasing per key across bursts, calls during a
 * lease starting the next burst, close drain and discard over the
 * namespace, acknowledgements batched with an answer each, the key states
 * as one hash-table-encoded hash expiring with the due index, a debounce's
 * early places in the due index moved by claims (time order kept), expiries on
 * everything a key leaves in Redis, no server
 * (answered from the loop, within the timeout), a stalled server (timeouts,
 * the connection dropped and made again), a worker on the real
 * clock: never early, calls of another process seen within the poll period,
 * stop handing its leases to another worker at once; and a limiter on a
 * loop thread (sluice_fleet_timed_new_on_loop()) called from two other
 * threads at once, its worker started, stopped and the limiter freed from
 * them (run under TSan by make sanitize-thread). */
#define TEST_NAME "test_fleet_timed"
#include "test_fleet_util.h"

#include <pthread.h>
#include <unistd.h>

#include "sluice_fleet_timed.h"

#define MS 1000000ull

typedef struct box {
    int done;
    sluice_fleet_timed_result_t res;
    /* copies of what the pointers held */
    char dropped[256];
    sluice_fleet_delivery_t d[16];
    char values[16][256];
    size_t n;
    bool inside; /* set while the submitting call runs */
} box_t;

static bool submitting;

static void on_res(void *user, const sluice_fleet_timed_result_t *res) {
    box_t *b = user;
    CHECK(!submitting, "a callback ran inside the submitting call");
    b->done++;
    b->res = *res;
    if (res->dropped) {
        CHECK(res->dropped_len < sizeof b->dropped, "dropped value too long");
        memcpy(b->dropped, res->dropped, res->dropped_len);
        b->dropped[res->dropped_len] = '\0';
        b->res.dropped = b->dropped;
    }
    const sluice_fleet_delivery_t *list = res->deliveries ? res->deliveries : res->discarded;
    size_t n = res->deliveries ? res->n_deliveries : res->n_discarded;
    b->n = n;
    for (size_t i = 0; i < n && i < 16; i++) {
        b->d[i] = list[i];
        CHECK(list[i].value_len < sizeof b->values[i], "value too long");
        memcpy(b->values[i], list[i].value, list[i].value_len);
        b->d[i].value = b->values[i];
    }
}

static struct event_base *base;
static sluice_fleet_timed_t *T;

static void wait_box(box_t *b) { tf_run_until(base, &b->done, 1, 30000); }

static box_t call(sluice_fleet_timed_t *t, const char *key, const char *value, uint64_t now) {
    box_t b;
    memset(&b, 0, sizeof b);
    submitting = true;
    int rc = sluice_fleet_timed_call(t, sluice_key_bytes(key, strlen(key)), value, strlen(value), now, on_res, &b);
    submitting = false;
    CHECK(rc == 0, "call %s: %d", key, rc);
    wait_box(&b);
    CHECK(b.res.status == 0, "call %s at %llu: status %s", key, (unsigned long long)now, sluice_strerror(b.res.status));
    return b;
}

static box_t claim_max(sluice_fleet_timed_t *t, uint32_t p, uint64_t now, size_t max) {
    box_t b;
    memset(&b, 0, sizeof b);
    CHECK(sluice_fleet_timed_claim(t, p, now, max, on_res, &b) == 0, "claim");
    wait_box(&b);
    CHECK(b.res.status == 0, "claim: %s", sluice_strerror(b.res.status));
    return b;
}

static box_t claim(sluice_fleet_timed_t *t, uint32_t p, uint64_t now) { return claim_max(t, p, now, 16); }

/* Checks that a claim delivered `values` ("k1@130 ..." : value and due time in ms), in that order. */
static void expect_order(const box_t *c, const char *want, const char *what) {
    char got[512] = "";
    for (size_t i = 0; i < c->n; i++) {
        size_t len = strlen(got);
        snprintf(got + len, sizeof got - len, "%s%s@%llu", i ? " " : "", c->values[i],
                 (unsigned long long)(c->d[i].at / MS));
    }
    CHECK(strcmp(got, want) == 0, "%s: delivered \"%s\", want \"%s\"", what, got, want);
}

static box_t lease_op(sluice_fleet_timed_t *t, const sluice_fleet_delivery_t *d, bool ack) {
    box_t b;
    memset(&b, 0, sizeof b);
    int rc = ack ? sluice_fleet_timed_ack(t, d, on_res, &b) : sluice_fleet_timed_release(t, d, on_res, &b);
    CHECK(rc == 0, "ack/release: %d", rc);
    wait_box(&b);
    return b;
}

/* Acknowledges every delivery of a claim. */
static void ack_all(sluice_fleet_timed_t *t, const box_t *c) {
    for (size_t i = 0; i < c->n; i++) CHECK(lease_op(t, &c->d[i], true).res.had, "acknowledged");
}

static sluice_fleet_timed_t *make_leased(const char *url, sluice_policy_t p, const char *prefix, bool manual,
                                         uint32_t partitions, uint64_t lease) {
    sluice_fleet_timed_config_t c;
    memset(&c, 0, sizeof c);
    c.policy = p;
    c.url = url;
    c.prefix = prefix;
    c.prefix_len = strlen(prefix);
    c.manual_time = manual;
    c.partitions = partitions;
    c.lease_ns = lease;
    c.max_value = 200;
    c.timeout_ns = 2000 * MS;
    sluice_fleet_timed_t *t = NULL;
    CHECK(sluice_fleet_timed_new(&t, base, &c) == 0, "new");
    return t;
}

/* A limiter with a lease of 1 s. */
static sluice_fleet_timed_t *make(const char *url, sluice_policy_t p, const char *prefix, bool manual,
                                  uint32_t partitions) {
    return make_leased(url, p, prefix, manual, partitions, 1000 * MS);
}

static void test_arguments(const char *url) {
    sluice_fleet_timed_config_t c;
    memset(&c, 0, sizeof c);
    c.url = url;
    sluice_fleet_timed_t *t = NULL;
    c.policy = sluice_rate(10, 1000 * MS, 10);
    CHECK(sluice_fleet_timed_new(&t, base, &c) == SLUICE_EINVAL && !t, "a rate policy is refused");
    c.policy = sluice_debounce(100 * MS, false, true, -1);
    c.partitions = 4097;
    CHECK(sluice_fleet_timed_new(&t, base, &c) == SLUICE_EINVAL, "4097 partitions are refused");
    c.partitions = 0;
    c.max_value = SLUICE_FLEET_TIMED_VALUE_MAX + 1;
    CHECK(sluice_fleet_timed_new(&t, base, &c) == SLUICE_EINVAL, "max_value above the maximum is refused");
    c.max_value = 0;
    c.url = "redis://127.0.0.1:99999";
    CHECK(sluice_fleet_timed_new(&t, base, &c) == SLUICE_ESYNTAX, "a bad URL is refused");
    c.url = NULL;
    CHECK(sluice_fleet_timed_new(&t, base, &c) == SLUICE_EINVAL, "no URL is refused");

    char big[201];
    memset(big, 'x', sizeof big);
    char longkey[SLUICE_KEY_MAX + 1];
    memset(longkey, 'k', sizeof longkey);
    box_t b;
    memset(&b, 0, sizeof b);
    CHECK(sluice_fleet_timed_call(T, sluice_key_bytes("k", 1), big, 201, 0, on_res, &b) == SLUICE_ERANGE,
          "a value above max_value is refused");
    CHECK(sluice_fleet_timed_call(T, sluice_key_bytes(longkey, sizeof longkey), "v", 1, 0, on_res, &b) ==
              SLUICE_EKEYLEN,
          "a key above SLUICE_KEY_MAX is refused");
    CHECK(sluice_fleet_timed_call(T, sluice_key_bytes("k", 1), NULL, 3, 0, on_res, &b) == SLUICE_EINVAL,
          "a NULL value with a length is refused");
    CHECK(sluice_fleet_timed_call(T, sluice_key_bytes("k", 1), "v", 1, SLUICE_FLEET_TIMED_TIME_MAX + 1, on_res, &b) ==
              SLUICE_ERANGE,
          "a time above the maximum is refused");
    CHECK(sluice_fleet_timed_claim(T, 99, 0, 1, on_res, &b) == SLUICE_EINVAL, "a partition out of range");
    CHECK(sluice_fleet_timed_claim(T, 0, 0, 0, on_res, &b) == SLUICE_EINVAL, "a claim of 0");
    CHECK(sluice_fleet_timed_claim(T, 0, 0, 1025, on_res, &b) == SLUICE_EINVAL, "a claim above 1024");
    sluice_fleet_delivery_t d = { .attempt = 0 };
    CHECK(sluice_fleet_timed_ack(T, &d, on_res, &b) == SLUICE_EINVAL, "an ack of attempt 0");
    sluice_fleet_timed_worker_t w = { .handler = NULL };
    CHECK(sluice_fleet_timed_start(T, &w) == SLUICE_EINVAL, "a worker without a handler");
    CHECK(b.done == 0, "a refused call was answered");
    /* the limiter is still usable: a value of exactly max_value, bytes kept exactly (NUL inside) */
    char exact[200];
    for (size_t i = 0; i < sizeof exact; i++) exact[i] = (char)(i * 7);
    memset(&b, 0, sizeof b);
    CHECK(sluice_fleet_timed_call(T, sluice_key_u64(77), exact, sizeof exact, 0, on_res, &b) == 0, "exact value");
    wait_box(&b);
    CHECK(b.res.status == 0 && b.res.decision.kind == SLUICE_SCHEDULED && b.res.decision.at == 100 * MS,
          "scheduled at 100 ms");
    uint32_t p = sluice_fleet_timed_partition_of(T, sluice_key_u64(77));
    box_t c1 = claim(T, p, 100 * MS);
    CHECK(c1.n == 1, "one delivery, got %zu", c1.n);
    CHECK(c1.d[0].key.kind == SLUICE_KEY_U64 && c1.d[0].key.u64 == 77, "an integer key comes back as one");
    CHECK(c1.d[0].value_len == sizeof exact && memcmp(c1.values[0], exact, sizeof exact) == 0, "bytes kept exactly");
    CHECK(c1.d[0].at == 100 * MS && c1.d[0].attempt == 1, "at 100 ms, attempt 1");
    CHECK(lease_op(T, &c1.d[0], true).res.had, "acknowledged");
}

static void test_leases(void) {
    const char *k = "doc-1";
    uint32_t p = sluice_fleet_timed_partition_of(T, sluice_key_bytes(k, strlen(k)));
    box_t a = call(T, k, "v1", 1000 * MS);
    CHECK(a.res.decision.kind == SLUICE_SCHEDULED && a.res.decision.at == 1100 * MS, "v1 waits until 1100");
    box_t b = call(T, k, "v2", 1050 * MS);
    CHECK(b.res.dropped && strcmp(b.dropped, "v1") == 0, "v2 drops v1, reported to v2's call");
    CHECK(claim(T, p, 1149 * MS).n == 0, "nothing due before 1150 ms (never early)");
    box_t c1 = claim(T, p, 1150 * MS);
    CHECK(c1.n == 1 && strcmp(c1.values[0], "v2") == 0 && c1.d[0].at == 1150 * MS && c1.d[0].attempt == 1,
          "v2 emitted at 1150 ms, attempt 1");
    uint64_t gen = c1.d[0].generation;
    /* a call during the lease starts the next burst; it is never merged into the leased emission */
    box_t d = call(T, k, "v3", 1200 * MS);
    CHECK(d.res.decision.kind == SLUICE_SCHEDULED && !d.res.dropped, "v3 starts a new burst, drops nothing");
    box_t c2 = claim(T, p, 2150 * MS); /* the lease of v2 (1 s from 1150) ended; v3 is due at 1300 */
    CHECK(c2.n == 2, "two deliveries at 2150 ms, got %zu", c2.n);
    const sluice_fleet_delivery_t *again = NULL, *v3 = NULL;
    for (size_t i = 0; i < c2.n; i++) {
        if (strcmp(c2.values[i], "v2") == 0) again = &c2.d[i];
        if (strcmp(c2.values[i], "v3") == 0) v3 = &c2.d[i];
    }
    CHECK(again && again->generation == gen && again->attempt == 2 && again->at == 1150 * MS,
          "v2 again: same generation, attempt 2, same time");
    CHECK(v3 && v3->generation > gen && v3->at == 1300 * MS && v3->attempt == 1, "v3: a later generation, at 1300");
    /* the first attempt's late acknowledgement is refused; the second's is taken */
    box_t late = lease_op(T, &c1.d[0], true);
    CHECK(late.res.status == SLUICE_ELEASE, "late ack refused: %s", sluice_strerror(late.res.status));
    box_t ok = lease_op(T, again, true);
    CHECK(ok.res.status == 0 && ok.res.had, "attempt 2 acknowledged");
    box_t twice = lease_op(T, again, true);
    CHECK(twice.res.status == 0 && !twice.res.had, "a second ack finds nothing");
    /* release: claimable again at once, next attempt */
    box_t r = lease_op(T, v3, false);
    CHECK(r.res.status == 0 && r.res.had, "released");
    box_t c3 = claim(T, p, 2151 * MS);
    CHECK(c3.n == 1 && c3.d[0].generation == v3->generation && c3.d[0].attempt == 2, "released v3 claimed again");
    CHECK(lease_op(T, &c3.d[0], true).res.had, "v3 acknowledged");
    /* generations strictly increase per key across bursts: here one after the other, as a
     * run gives back the numbers it took and did not use */
    uint64_t last = c3.d[0].generation;
    for (int i = 0; i < 5; i++) {
        uint64_t t0 = (3000 + 1000 * (uint64_t)i) * MS;
        call(T, k, "burst", t0);
        box_t c = claim(T, p, t0 + 100 * MS);
        CHECK(c.n == 1 && c.d[0].generation == last + 1, "burst %d: generation %llu after %llu", i,
              (unsigned long long)c.d[0].generation, (unsigned long long)last);
        last = c.d[0].generation;
        CHECK(lease_op(T, &c.d[0], true).res.had, "burst %d acknowledged", i);
    }
}

static void test_close(const char *url) {
    sluice_fleet_timed_t *t = make(url, sluice_throttle(100 * MS, false, true, SLUICE_PICK_LATEST), "close", true, 3);
    call(t, "a", "a1", 0);
    call(t, "b", "b1", 10 * MS);
    call(t, "c", "c1", 20 * MS);
    box_t b;
    memset(&b, 0, sizeof b);
    int batches = 0;
    CHECK(sluice_fleet_timed_close(t, SLUICE_CLOSE_DISCARD, 105 * MS, on_res, &b) == 0, "close");
    /* a's deadline (100) fires first; b and c are discarded */
    while (true) {
        wait_box(&b);
        batches++;
        CHECK(b.res.status == 0, "close: %s", sluice_strerror(b.res.status));
        if (!b.res.had) break;
        b.done = 0;
    }
    CHECK(batches >= 1, "close answered");
    box_t after;
    memset(&after, 0, sizeof after);
    CHECK(sluice_fleet_timed_call(t, sluice_key_bytes("a", 1), "x", 1, 200 * MS, on_res, &after) == 0, "call");
    wait_box(&after);
    CHECK(after.res.status == SLUICE_ECLOSED, "a call after close: %s", sluice_strerror(after.res.status));
    size_t emitted = 0;
    for (uint32_t p = 0; p < 3; p++) {
        box_t c = claim(t, p, 200 * MS);
        for (size_t i = 0; i < c.n; i++) {
            CHECK(strcmp(c.values[i], "a1") == 0 && c.d[i].at == 100 * MS, "only a1 fired, at 100");
            emitted++;
        }
    }
    CHECK(emitted == 1, "a1 emitted once, got %zu", emitted);
    sluice_fleet_timed_free(t);
}

/* Acknowledgements made together go to Redis as one run, and each gets its
 * own answer: taken, taken already (the same attempt twice in the batch),
 * refused (an attempt that does not hold the delivery). */
static void test_ack_batch(const char *url) {
    sluice_fleet_timed_t *t = make(url, sluice_audit(100 * MS), "ackb", true, 1);
    char key[16];
    for (int i = 0; i < 12; i++) {
        snprintf(key, sizeof key, "k%d", i);
        call(t, key, "v", (uint64_t)i * MS);
    }
    box_t c = claim(t, 0, 500 * MS);
    CHECK(c.n == 12, "12 deliveries claimed, got %zu", c.n);
    sluice_fleet_timed_stats_t before, after;
    sluice_fleet_timed_stats(t, &before);
    box_t acks[14];
    memset(acks, 0, sizeof acks);
    for (size_t i = 0; i < 12; i++) CHECK(sluice_fleet_timed_ack(t, &c.d[i], on_res, &acks[i]) == 0, "ack %zu", i);
    CHECK(sluice_fleet_timed_ack(t, &c.d[0], on_res, &acks[12]) == 0, "ack again");
    sluice_fleet_delivery_t wrong = c.d[1];
    wrong.attempt = 2;
    CHECK(sluice_fleet_timed_ack(t, &wrong, on_res, &acks[13]) == 0, "ack of an attempt not made");
    for (size_t i = 0; i < 14; i++) wait_box(&acks[i]);
    for (size_t i = 0; i < 12; i++)
        CHECK(acks[i].res.status == 0 && acks[i].res.had && acks[i].res.op == SLUICE_FLEET_TIMED_ACK, "ack %zu taken",
              i);
    CHECK(acks[12].res.status == 0 && !acks[12].res.had, "the second ack of one attempt finds it taken");
    CHECK(acks[13].res.status == SLUICE_ELEASE, "an attempt not made is refused: %s",
          sluice_strerror(acks[13].res.status));
    sluice_fleet_timed_stats(t, &after);
    CHECK(after.acked - before.acked == 12 && after.ack_refused - before.ack_refused == 1, "counted: %llu, %llu",
          (unsigned long long)(after.acked - before.acked),
          (unsigned long long)(after.ack_refused - before.ack_refused));
    /* the first goes at once, the 13 behind it as one run */
    CHECK(after.runs - before.runs == 2, "14 acknowledgements in %llu runs",
          (unsigned long long)(after.runs - before.runs));
    CHECK(claim(t, 0, 5000 * MS).n == 0, "nothing comes back after its lease: all acknowledged");
    sluice_fleet_timed_free(t);
}

/* A partition's key states are one hash, in Redis's hash-table encoding,
 * expiring with the due index: the retention after the latest deadline. Its
 * deliveries' set is a skip list, expiring the retention after the last one. */
static void test_states(const char *url, int port) {
    sluice_fleet_timed_t *t = make(url, sluice_debounce(100 * MS, false, true, -1), "states", true, 1);
    for (int i = 0; i < 5; i++) {
        char key[16];
        snprintf(key, sizeof key, "s%d", i);
        call(t, key, "v", 0);
    }
    redisContext *r = redisConnect("127.0.0.1", port);
    CHECK(r && !r->err, "hiredis connect");
    redisReply *keys = redisCommand(r, "KEYS *:states:*");
    CHECK(keys && keys->type == REDIS_REPLY_ARRAY, "keys");
    char states[128] = "", due[128] = "";
    for (size_t i = 0; i < keys->elements; i++) {
        const char *k = keys->element[i]->str;
        size_t n = keys->element[i]->len;
        if (n > 2 && n < sizeof states && strcmp(k + n - 2, ":s") == 0) memcpy(states, k, n + 1);
        if (n > 2 && n < sizeof due && strcmp(k + n - 2, ":d") == 0) memcpy(due, k, n + 1);
    }
    CHECK(states[0] && due[0], "a states hash and a due index");
    redisReply *enc = redisCommand(r, "OBJECT ENCODING %s", states);
    CHECK(enc && enc->type == REDIS_REPLY_STRING && strcmp(enc->str, "hashtable") == 0, "encoding %s",
          enc && enc->str ? enc->str : "?");
    redisReply *len = redisCommand(r, "HLEN %s", states);
    CHECK(len && len->integer == 6, "5 states and the encoding field, got %lld", len ? len->integer : -1);
    redisReply *a = redisCommand(r, "PTTL %s", states), *b = redisCommand(r, "PTTL %s", due);
    /* the retention is 24 h by default, the latest deadline 100 ms ahead */
    long long want = 86400000 + 100;
    CHECK(a && b && a->integer > want - 5000 && a->integer <= want && b->integer > want - 5000 && b->integer <= want,
          "both expire the retention after the deadline: %lld, %lld", a ? a->integer : -9, b ? b->integer : -9);
    freeReplyObject(enc);
    freeReplyObject(len);
    freeReplyObject(a);
    freeReplyObject(b);
    freeReplyObject(keys);
    /* fired and acknowledged, the keys leave the hash */
    box_t c = claim(t, 0, 200 * MS);
    CHECK(c.n == 5, "5 deliveries, got %zu", c.n);
    len = redisCommand(r, "HLEN %s", states);
    CHECK(len && len->integer == 1, "only the encoding field is left, got %lld", len ? len->integer : -1);
    freeReplyObject(len);
    char leased[128];
    snprintf(leased, sizeof leased, "%.*s:l", (int)(strlen(states) - 2), states);
    enc = redisCommand(r, "OBJECT ENCODING %s", leased);
    CHECK(enc && enc->type == REDIS_REPLY_STRING && strcmp(enc->str, "skiplist") == 0, "deliveries' encoding %s",
          enc && enc->str ? enc->str : "?");
    a = redisCommand(r, "PTTL %s", leased);
    CHECK(a && a->integer > 86400000 - 5000 && a->integer <= 86400000, "the deliveries expire: %lld",
          a ? a->integer : -9);
    freeReplyObject(enc);
    freeReplyObject(a);
    redisFree(r);
    sluice_fleet_timed_free(t);
}

/* A debounce call that moves a deadline later leaves the key's place in the
 * due index early; a claim that meets the early place moves it, and fires
 * nothing before its time, and what is due fires in time order. */
static void test_early_places(const char *url) {
    sluice_fleet_timed_t *t = make(url, sluice_debounce(100 * MS, false, true, -1), "early", true, 1);
    call(t, "a", "a1", 0);                 /* a due at 100 */
    call(t, "b", "b1", 30 * MS);           /* b due at 130 */
    box_t r = call(t, "a", "a2", 50 * MS); /* a due at 150; its place stays at 100 */
    CHECK(r.res.decision.at == 150 * MS && r.dropped[0] && strcmp(r.dropped, "a1") == 0, "a2 replaces a1, due at 150");
    CHECK(claim(t, 0, 120 * MS).n == 0, "at 120 nothing is due (a's early place is moved, not fired)");
    box_t c = claim(t, 0, 200 * MS);
    expect_order(&c, "b1@130 a2@150", "b1, then a2");
    ack_all(t, &c);
    /* the same when no claim came in between: both places met in one claim */
    call(t, "c", "c1", 1000 * MS);
    call(t, "d", "d1", 1030 * MS);
    call(t, "c", "c2", 1050 * MS);
    box_t c2 = claim(t, 0, 1200 * MS);
    expect_order(&c2, "d1@1130 c2@1150", "d1, then c2");
    ack_all(t, &c2);
    /* a moved place whose deadline has passed goes before the fetched keys due later */
    call(t, "e", "e1", 2000 * MS); /* place 2100 */
    call(t, "e", "e2", 2020 * MS); /* due 2120 */
    call(t, "f", "f1", 2030 * MS); /* due 2130 */
    box_t c3 = claim(t, 0, 2300 * MS);
    expect_order(&c3, "e2@2120 f1@2130", "a moved place, in order");
    ack_all(t, &c3);
    /* claims of 2: a key moved beyond the last fetched one waits for a later fetch */
    call(t, "g", "g1", 3000 * MS); /* place 3100 */
    call(t, "h", "h1", 3020 * MS); /* due 3120 */
    call(t, "i", "i1", 3040 * MS); /* due 3140 */
    call(t, "j", "j1", 3050 * MS); /* due 3150 */
    call(t, "g", "g2", 3060 * MS); /* due 3160 */
    box_t c4 = claim_max(t, 0, 3300 * MS, 2);
    expect_order(&c4, "h1@3120 i1@3140", "the two earliest");
    box_t c5 = claim_max(t, 0, 3300 * MS, 2);
    expect_order(&c5, "j1@3150 g2@3160", "then the next two");
    ack_all(t, &c4);
    ack_all(t, &c5);
    /* a moved place that ties a fetched key: both, in the index's order */
    call(t, "k", "k1", 4000 * MS); /* place 4100 */
    call(t, "l", "l1", 4030 * MS); /* due 4130 */
    call(t, "k", "k2", 4030 * MS); /* due 4130 */
    box_t c6 = claim(t, 0, 4300 * MS);
    expect_order(&c6, "k2@4130 l1@4130", "a tie");
    sluice_fleet_timed_free(t);
}

/* A claim that takes every key due fires them in that one fetch, however
 * early their places: the first place not taken bounds what the fetch did
 * not see. Keys re-armed since their places were made (every busy debounce
 * key) are not moved to their deadlines and fetched again first: one ZADD
 * (the leases) and two ZRANGEBYSCOREs (the leases' and the due keys'), by
 * the server's command counts. */
static void test_claim_edge(const char *url, int port) {
    sluice_fleet_timed_t *t = make(url, sluice_debounce(100 * MS, false, true, -1), "edge", true, 1);
    const char *keys[4] = { "a", "b", "c", "d" };
    char v[8];
    for (int i = 0; i < 4; i++) {
        snprintf(v, sizeof v, "%s1", keys[i]);
        call(t, keys[i], v, (uint64_t)i * MS); /* places at 100 .. 103 */
    }
    for (int i = 0; i < 4; i++) {
        snprintf(v, sizeof v, "%s2", keys[i]);
        call(t, keys[i], v, (uint64_t)(20 + i) * MS); /* due at 120 .. 123, places left early */
    }
    call(t, "z", "z1", 500 * MS); /* due at 600: not due at the claim */
    long long zadd = tf_cmd_calls(port, "zadd"), zrange = tf_cmd_calls(port, "zrangebyscore");
    box_t c = claim_max(t, 0, 200 * MS, 4);
    expect_order(&c, "a2@120 b2@121 c2@122 d2@123", "every re-armed key, in order");
    long long dzadd = tf_cmd_calls(port, "zadd") - zadd, dzrange = tf_cmd_calls(port, "zrangebyscore") - zrange;
    CHECK(dzadd == 1 && dzrange == 2, "the claim ran %lld ZADD and %lld ZRANGEBYSCORE, want 1 and 2: no place moved",
          dzadd, dzrange);
    ack_all(t, &c);
    box_t z = claim_max(t, 0, 700 * MS, 4);
    expect_order(&z, "z1@600", "then z");
    ack_all(t, &z);
    sluice_fleet_timed_free(t);
}

/* A delivery never acknowledged is leased again after each lease until the
 * retention after its time has passed; then it is dropped, record and all. */
static void test_old_delivery(const char *url, int port) {
    sluice_fleet_timed_config_t c;
    memset(&c, 0, sizeof c);
    c.policy = sluice_audit(100 * MS);
    c.url = url;
    c.prefix = "old";
    c.prefix_len = 3;
    c.manual_time = true;
    c.partitions = 1;
    c.lease_ns = 1000 * MS;
    c.retain_ms = 10000;
    c.timeout_ns = 2000 * MS;
    sluice_fleet_timed_t *t = NULL;
    CHECK(sluice_fleet_timed_new(&t, base, &c) == 0, "new");
    call(t, "k", "v1", 0);
    box_t c1 = claim(t, 0, 200 * MS);
    CHECK(c1.n == 1 && c1.d[0].attempt == 1, "leased once");
    box_t c2 = claim(t, 0, 1300 * MS);
    CHECK(c2.n == 1 && c2.d[0].attempt == 2 && c2.d[0].generation == c1.d[0].generation &&
              strcmp(c2.values[0], "v1") == 0 && c2.d[0].at == 100 * MS,
          "leased again after the lease, the same delivery");
    box_t c3 = claim(t, 0, 10200 * MS);
    CHECK(c3.n == 0, "dropped once the retention after its time has passed, got %zu", c3.n);
    redisContext *r = redisConnect("127.0.0.1", port);
    CHECK(r && !r->err, "hiredis connect");
    redisReply *keys = redisCommand(r, "KEYS *:old:*:r");
    CHECK(keys && keys->type == REDIS_REPLY_ARRAY && keys->elements == 1, "a records hash");
    redisReply *len = redisCommand(r, "HLEN %b", keys->element[0]->str, keys->element[0]->len);
    CHECK(len && len->integer == 1, "only the encoding field is left, got %lld", len ? len->integer : -1);
    redisReply *enc = redisCommand(r, "OBJECT ENCODING %b", keys->element[0]->str, keys->element[0]->len);
    CHECK(enc && enc->type == REDIS_REPLY_STRING && strcmp(enc->str, "hashtable") == 0, "records' encoding %s",
          enc && enc->str ? enc->str : "?");
    freeReplyObject(enc);
    freeReplyObject(len);
    freeReplyObject(keys);
    redisFree(r);
    sluice_fleet_timed_free(t);
}

/* Everything a key leaves in Redis expires. */
static void test_expiry(int port) {
    redisContext *r = redisConnect("127.0.0.1", port);
    CHECK(r && !r->err, "hiredis connect");
    redisReply *keys = redisCommand(r, "KEYS *");
    CHECK(keys && keys->type == REDIS_REPLY_ARRAY && keys->elements > 0, "keys");
    for (size_t i = 0; i < keys->elements; i++) {
        redisReply *ttl = redisCommand(r, "PTTL %b", keys->element[i]->str, keys->element[i]->len);
        CHECK(ttl && ttl->type == REDIS_REPLY_INTEGER && ttl->integer > 0, "%.*s has no expiry (PTTL %lld)",
              (int)keys->element[i]->len, keys->element[i]->str, ttl ? ttl->integer : -9);
        freeReplyObject(ttl);
    }
    freeReplyObject(keys);
    redisFree(r);
}

/* The script runs as a function library (FCALL) where Redis allows it, and
 * a FUNCTION FLUSH is survived: that run again with EVAL, the library loaded
 * again, FCALL again. */
static void test_functions(int port) {
    long long fcalls = tf_cmd_calls(port, "fcall");
    box_t b = call(T, "fn", "v1", 5000 * MS);
    CHECK(b.res.status == 0 && b.res.decision.kind == SLUICE_SCHEDULED, "a call by FCALL");
    CHECK(tf_cmd_calls(port, "fcall") == fcalls + 1, "the call ran as FCALL");
    redisReply *r = tf_cmd(port, "FUNCTION FLUSH");
    freeReplyObject(r);
    r = tf_cmd(port, "SCRIPT FLUSH");
    freeReplyObject(r);
    b = call(T, "fn", "v2", 5010 * MS);
    CHECK(b.res.status == 0 && b.res.decision.kind == SLUICE_SCHEDULED && b.res.dropped_len == 2,
          "after FUNCTION FLUSH: decided, v1 replaced");
    r = tf_cmd(port, "FUNCTION LIST");
    CHECK(r && r->type == REDIS_REPLY_ARRAY && r->elements == 1, "the library loaded again");
    freeReplyObject(r);
    fcalls = tf_cmd_calls(port, "fcall");
    b = call(T, "fn", "v3", 5020 * MS);
    CHECK(b.res.status == 0 && tf_cmd_calls(port, "fcall") == fcalls + 1, "FCALL again");
}

/* A user with exactly the commands docs/fleet.md lists ("ACL") can use the limiter. */
static void test_acl(int port) {
    redisContext *r = redisConnect("127.0.0.1", port);
    CHECK(r && !r->err, "hiredis connect");
    redisReply *ok =
        redisCommand(r, "ACL SETUSER timed on >timed-Pw-5 ~{*:api:* ~{*:close:* ~{*:ackb:* ~{*:early:* ~{*:edge:* "
                        "+evalsha +eval +script|load +set +time +hmget +hset +hdel +pexpire "
                        "+zadd +zrem +zrange +zrangebyscore +zscore +incrby +decrby +exists");
    CHECK(ok && ok->type == REDIS_REPLY_STATUS, "ACL SETUSER: %s", ok && ok->str ? ok->str : "?");
    freeReplyObject(ok);
    ok = redisCommand(r, "FLUSHALL");
    freeReplyObject(ok);
    redisFree(r);
    char url[96];
    snprintf(url, sizeof url, "redis://timed:timed-Pw-5@127.0.0.1:%d", port);
    test_close(url);
    test_ack_batch(url);
    test_early_places(url);
    test_claim_edge(url, port);
}

static void test_no_server(void) {
    int port = test_free_port();
    char url[64];
    snprintf(url, sizeof url, "redis://127.0.0.1:%d", port);
    sluice_fleet_timed_t *t = make(url, sluice_audit(100 * MS), "none", true, 1);
    box_t b;
    memset(&b, 0, sizeof b);
    uint64_t t0 = tf_mono();
    submitting = true;
    CHECK(sluice_fleet_timed_call(t, sluice_key_bytes("k", 1), "v", 1, 0, on_res, &b) == 0, "call");
    submitting = false;
    wait_box(&b);
    CHECK(b.res.status == SLUICE_ENOTCONN || b.res.status == SLUICE_ETIMEDOUT, "no server: %s",
          sluice_strerror(b.res.status));
    CHECK(tf_mono() - t0 < 10000 * MS, "answered within the bound");
    sluice_fleet_timed_free(t);
}

/* A stalled server (SIGSTOP): calls time out within their timeout, the
 * stalled connection is dropped, and once the server runs again calls work. */
static void test_stall(void) {
    test_redis_t r;
    tf_start_redis(&r);
    char url[64];
    snprintf(url, sizeof url, "redis://127.0.0.1:%d", r.port);
    sluice_fleet_timed_config_t c;
    memset(&c, 0, sizeof c);
    c.policy = sluice_audit(100 * MS);
    c.url = url;
    c.prefix = "stall";
    c.prefix_len = 5;
    c.manual_time = true;
    c.timeout_ns = 200 * MS;
    sluice_fleet_timed_t *t = NULL;
    CHECK(sluice_fleet_timed_new(&t, base, &c) == 0, "new");
    box_t b = call(t, "k", "before", 0);
    CHECK(b.res.decision.kind == SLUICE_SCHEDULED, "before the stall");
    test_redis_signal(&r, SIGSTOP);
    memset(&b, 0, sizeof b);
    uint64_t t0 = tf_mono();
    CHECK(sluice_fleet_timed_call(t, sluice_key_bytes("k", 1), "during", 6, 10 * MS, on_res, &b) == 0, "call");
    wait_box(&b);
    CHECK(b.res.status == SLUICE_ETIMEDOUT, "a stalled server: %s", sluice_strerror(b.res.status));
    CHECK(tf_mono() - t0 < 5000 * MS, "answered by the timeout");
    tf_run_for(base, 2500); /* ten timeouts pass: the connection is dropped */
    test_redis_signal(&r, SIGCONT);
    uint64_t end = tf_mono() + 20000 * MS;
    for (;;) {
        memset(&b, 0, sizeof b);
        CHECK(sluice_fleet_timed_pending(t, sluice_key_bytes("k", 1), 20 * MS, on_res, &b) == 0, "pending");
        wait_box(&b);
        if (b.res.status == 0) break;
        CHECK(tf_mono() < end, "no answer after the server came back: %s", sluice_strerror(b.res.status));
        tf_run_for(base, 50);
    }
    sluice_fleet_timed_stats_t st;
    sluice_fleet_timed_stats(t, &st);
    CHECK(st.failures >= 1, "the timeout was counted");
    sluice_fleet_timed_free(t);
    test_redis_stop(&r);
}

/* ---- a worker on the real clock */

typedef struct seen {
    int n;
    sluice_fleet_delivery_t d[64];
    char value[64][32];
    uint64_t redis_ms[64]; /* Redis time when delivered */
    bool ack;
    sluice_fleet_timed_t *t;
} seen_t;

static int redis_port;

static redisContext *clock_conn;

static uint64_t redis_now_ms(void) {
    if (!clock_conn) clock_conn = redisConnect("127.0.0.1", redis_port);
    CHECK(clock_conn && !clock_conn->err, "hiredis connect");
    redisReply *r = redisCommand(clock_conn, "TIME");
    CHECK(r && r->type == REDIS_REPLY_ARRAY && r->elements == 2, "TIME");
    uint64_t ms = strtoull(r->element[0]->str, NULL, 10) * 1000 + strtoull(r->element[1]->str, NULL, 10) / 1000;
    freeReplyObject(r);
    return ms;
}

/* An acknowledgement leaves a tombstone, by the server's clock: the same
 * attempt's acknowledgement again finds the delivery taken already (not
 * refused) within a lease period, also across the end of one (the
 * tombstones are kept per lease period of the clock: the second
 * acknowledgement is made just after such an end), and after two lease
 * periods it is forgotten: refused, as any acknowledgement of a delivery
 * not leased. */
static void test_ack_tombstone(const char *url) {
    sluice_fleet_timed_t *t = make(url, sluice_audit(1 * MS), "tomb", false, 1); /* real time, lease 1 s */
    call(t, "k", "v", 0);
    box_t c;
    memset(&c, 0, sizeof c);
    for (int i = 0; i < 400 && c.n == 0; i++) { /* due 1 ms after the call, on the server's clock */
        usleep(5000);
        c = claim(t, 0, 0);
    }
    CHECK(c.n == 1 && strcmp(c.values[0], "v") == 0 && c.d[0].attempt == 1, "v delivered, got %zu", c.n);
    /* the first acknowledgement late in a lease period of the server's clock, the second
     * early in the next one */
    uint64_t at = redis_now_ms();
    for (int i = 0; i < 300 && at % 1000 < 800; i++) {
        usleep(5000);
        at = redis_now_ms();
    }
    CHECK(lease_op(t, &c.d[0], true).res.had, "acknowledged");
    for (int i = 0; i < 300 && redis_now_ms() / 1000 == at / 1000; i++) usleep(5000);
    box_t again = lease_op(t, &c.d[0], true);
    CHECK(again.res.status == 0 && !again.res.had, "the same attempt again finds it taken: %s",
          sluice_strerror(again.res.status));
    usleep(2100 * 1000);
    box_t late = lease_op(t, &c.d[0], true);
    CHECK(late.res.status == SLUICE_ELEASE, "after two lease periods the tombstone is gone: %s",
          sluice_strerror(late.res.status));
    sluice_fleet_timed_free(t);
}

static void handler(void *user, const sluice_fleet_delivery_t *d) {
    seen_t *s = user;
    CHECK(s->n < 64, "too many deliveries");
    s->d[s->n] = *d;
    snprintf(s->value[s->n], sizeof s->value[s->n], "%.*s", (int)d->value_len, (const char *)d->value);
    s->d[s->n].value = s->value[s->n];
    s->redis_ms[s->n] = redis_now_ms();
    s->n++;
    if (s->ack) CHECK(sluice_fleet_timed_ack(s->t, d, NULL, NULL) == 0, "ack from the handler");
}

static void on_stopped(void *user, const sluice_fleet_timed_result_t *res) {
    int *n = user;
    CHECK(res->status == 0, "stop: %s", sluice_strerror(res->status));
    (*n)++;
}

static void test_worker(const char *url) {
    sluice_policy_t pol = sluice_debounce(150 * MS, false, true, -1);
    sluice_fleet_timed_t *w1 = make_leased(url, pol, "work", false, 2, 60000 * MS);
    sluice_fleet_timed_t *other = make(url, pol, "work", false, 2); /* a process that only calls */
    seen_t s1;
    memset(&s1, 0, sizeof s1);
    s1.ack = true;
    s1.t = w1;
    sluice_fleet_timed_worker_t wc = { .handler = handler, .user = &s1, .poll_ns = 200 * MS };
    CHECK(sluice_fleet_timed_start(w1, &wc) == 0, "start");
    CHECK(sluice_fleet_timed_start(w1, &wc) == SLUICE_EINVAL, "a second start is refused");
    /* a call on the worker, one on the other process: both delivered, never early */
    box_t a = call(w1, "x", "from-worker", 0);
    box_t b = call(other, "y", "from-other", 0);
    tf_run_until(base, &s1.n, 2, 20000);
    for (int i = 0; i < 2; i++) {
        bool mine = strcmp(s1.value[i], "from-worker") == 0;
        uint64_t at = mine ? a.res.decision.at : b.res.decision.at;
        CHECK(s1.d[i].at == at, "delivery %d at its deadline", i);
        CHECK(s1.redis_ms[i] >= at / MS, "delivery %d early: Redis time %llu ms < deadline %llu ms", i,
              (unsigned long long)s1.redis_ms[i], (unsigned long long)(at / MS));
    }
    tf_run_for(base, 50);
    sluice_fleet_timed_stats_t st;
    sluice_fleet_timed_stats(w1, &st);
    CHECK(st.delivered == 2 && st.acked == 2 && st.in_hand == 0, "stats: %llu delivered %llu acked %llu in hand",
          (unsigned long long)st.delivered, (unsigned long long)st.acked, (unsigned long long)st.in_hand);
    /* a handler that holds its delivery; stop hands it back, another worker takes it over at once */
    s1.ack = false;
    call(other, "z", "held", 0);
    tf_run_until(base, &s1.n, 3, 20000);
    sluice_fleet_timed_t *w2 = make_leased(url, pol, "work", false, 2, 60000 * MS);
    seen_t s2;
    memset(&s2, 0, sizeof s2);
    s2.ack = true;
    s2.t = w2;
    sluice_fleet_timed_worker_t wc2 = { .handler = handler, .user = &s2, .poll_ns = 200 * MS };
    CHECK(sluice_fleet_timed_start(w2, &wc2) == 0, "start the second worker");
    int stopped = 0;
    CHECK(sluice_fleet_timed_stop(w1, on_stopped, &stopped) == 0, "stop");
    CHECK(stopped == 0, "stop answered inside the call");
    tf_run_until(base, &stopped, 1, 20000);
    /* within 20 s, where the lease is 60 s: only the release can have handed it over */
    tf_run_until(base, &s2.n, 1, 20000);
    CHECK(strcmp(s2.value[0], "held") == 0 && s2.d[0].attempt == 2 && s2.d[0].generation == s1.d[2].generation,
          "the held delivery, attempt 2, same generation");
    /* the first worker's late acknowledgement is refused */
    box_t late = lease_op(w1, &s1.d[2], true);
    CHECK(late.res.status == SLUICE_ELEASE, "late ack: %s", sluice_strerror(late.res.status));
    sluice_fleet_timed_free(w1);
    sluice_fleet_timed_free(w2);
    sluice_fleet_timed_free(other);
}

/* ---- a limiter on a loop thread, called from other threads */

typedef struct mt_count {
    int answered, emitted_or_scheduled, delivered;
    pthread_mutex_t mu;
} mt_count_t;

static mt_count_t mtc = { 0, 0, 0, PTHREAD_MUTEX_INITIALIZER };

static void mt_on_call(void *user, const sluice_fleet_timed_result_t *r) {
    (void)user;
    pthread_mutex_lock(&mtc.mu);
    mtc.answered++;
    if (r->status == 0 && r->decision.kind == SLUICE_SCHEDULED) mtc.emitted_or_scheduled++;
    pthread_mutex_unlock(&mtc.mu);
}

static void mt_handler(void *user, const sluice_fleet_delivery_t *d) {
    sluice_fleet_timed_t *t = user;
    pthread_mutex_lock(&mtc.mu);
    mtc.delivered++;
    pthread_mutex_unlock(&mtc.mu);
    CHECK(sluice_fleet_timed_ack(t, d, NULL, NULL) == 0, "ack on the loop thread");
}

typedef struct mt_arg {
    sluice_fleet_timed_t *t;
    int id;
} mt_arg_t;

static void *mt_caller(void *arg) {
    mt_arg_t *a = arg;
    for (int i = 0; i < 200; i++) {
        char key[32], value[32];
        snprintf(key, sizeof key, "t%d-k%d", a->id, i);
        snprintf(value, sizeof value, "v%d", i);
        CHECK(sluice_fleet_timed_call(a->t, sluice_key_bytes(key, strlen(key)), value, strlen(value), 0, mt_on_call,
                                      NULL) == 0,
              "call from thread %d", a->id);
    }
    return NULL;
}

static int mt_read(int *field) {
    pthread_mutex_lock(&mtc.mu);
    int v = *field;
    pthread_mutex_unlock(&mtc.mu);
    return v;
}

static void mt_wait(int *field, int want) {
    uint64_t end = tf_mono() + 30000 * MS;
    while (mt_read(field) < want) {
        CHECK(tf_mono() < end, "only %d of %d within 30 s", mt_read(field), want);
        struct timespec ts = { 0, 2000000 };
        nanosleep(&ts, NULL);
    }
}

static void mt_stopped(void *user, const sluice_fleet_timed_result_t *r) {
    (void)r;
    __atomic_store_n((int *)user, 1, __ATOMIC_RELEASE);
}

static void test_threads(const char *url) {
    sluice_loop_t *loop = NULL;
    CHECK(sluice_loop_start(&loop, NULL) == 0, "loop");
    sluice_fleet_timed_config_t c;
    memset(&c, 0, sizeof c);
    c.policy = sluice_debounce(20 * MS, false, true, -1);
    c.url = url;
    c.prefix = "threads";
    c.prefix_len = 7;
    c.partitions = 3;
    sluice_fleet_timed_t *t = NULL;
    CHECK(sluice_fleet_timed_new_on_loop(&t, loop, &c) == 0, "new on loop");
    sluice_fleet_timed_worker_t wc = { .handler = mt_handler, .user = t, .poll_ns = 50 * MS };
    CHECK(sluice_fleet_timed_start(t, &wc) == 0, "start from another thread");
    CHECK(sluice_fleet_timed_start(t, &wc) == SLUICE_EINVAL, "a second start");
    pthread_t th[2];
    mt_arg_t args[2] = { { t, 0 }, { t, 1 } };
    for (int i = 0; i < 2; i++) CHECK(pthread_create(&th[i], NULL, mt_caller, &args[i]) == 0, "thread");
    for (int i = 0; i < 2; i++) pthread_join(th[i], NULL);
    mt_wait(&mtc.answered, 400);
    CHECK(mt_read(&mtc.emitted_or_scheduled) == 400, "every call scheduled (%d)", mt_read(&mtc.emitted_or_scheduled));
    mt_wait(&mtc.delivered, 400);
    sluice_fleet_timed_stats_t st;
    CHECK(sluice_fleet_timed_stats(t, &st) == 0 && st.delivered == 400, "stats from another thread: %llu",
          (unsigned long long)st.delivered);
    int stopped = 0;
    CHECK(sluice_fleet_timed_stop(t, mt_stopped, &stopped) == 0, "stop from another thread");
    CHECK(sluice_fleet_timed_stop(t, mt_stopped, &stopped) == SLUICE_EINVAL, "a second stop");
    uint64_t end = tf_mono() + 30000 * MS;
    while (!__atomic_load_n(&stopped, __ATOMIC_ACQUIRE)) {
        CHECK(tf_mono() < end, "stop not answered");
        struct timespec ts = { 0, 2000000 };
        nanosleep(&ts, NULL);
    }
    sluice_fleet_timed_free(t); /* from this thread: waits for the loop thread */
    CHECK(sluice_loop_stop(loop) == 0, "loop stop");
    CHECK(sluice_loop_free(loop) == 0, "loop free");
}

int main(void) {
    test_redis_t redis;
    tf_start_redis(&redis);
    redis_port = redis.port;
    base = event_base_new();
    char url[64];
    snprintf(url, sizeof url, "redis://127.0.0.1:%d", redis.port);
    T = make(url, sluice_debounce(100 * MS, false, true, -1), "api", true, 4);
    test_arguments(url);
    test_leases();
    test_close(url);
    test_ack_batch(url);
    test_ack_tombstone(url);
    test_states(url, redis.port);
    test_early_places(url);
    test_claim_edge(url, redis.port);
    test_old_delivery(url, redis.port);
    test_expiry(redis.port);
    test_functions(redis.port);
    test_acl(redis.port);
    test_no_server();
    test_stall();
    sluice_fleet_timed_free(T);
    test_worker(url);
    test_threads(url);
    event_base_free(base);
    if (clock_conn) redisFree(clock_conn);
    test_redis_stop(&redis);
    printf(TEST_NAME ": ok\n");
    return 0;
}
