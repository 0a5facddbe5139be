/* test_fleet_keys.c — Redis key names are unambiguous: limiters whose prefixes
 * nest (`login` and `login:by-ip`) never share a key, however the user's keys
 * are crafted. With the old layout `{prefix:<tag><key>}`, limiter A's key
 * `y-ip:b10.0.0.7` was limiter B's key `10.0.0.7`, so whoever chose A's keys
 * could spend B's quota. Also checks the documented names
 * (`{<N>:<prefix>:<tag><key>}`, `}` and `%` escaped) against a real Redis. */
#define TEST_NAME "test_fleet_keys"
#include "test_fleet_util.h"

#include <hiredis/hiredis.h>

#include "fleet-internal.h"

#define SEC 1000000000ull
#define BURST 3

static struct event_base *base;

static sluice_fleet_t *fleet(int port, const char *prefix) {
    sluice_fleet_config_t c;
    memset(&c, 0, sizeof c);
    c.policy = sluice_rate(1, (int64_t)SEC, BURST);
    c.port = port;
    c.prefix = prefix;
    c.prefix_len = strlen(prefix);
    c.manual_time = true;
    c.timeout_ns = 5 * SEC;
    c.cache_slots = SIZE_MAX; /* every answer from Redis */
    sluice_fleet_t *f = NULL;
    CHECK(sluice_fleet_new(&f, base, &c) == 0, "sluice_fleet_new(%s)", prefix);
    return f;
}

/* The cache's slots come from the core's seeded hash under a seed drawn per
 * limiter: keys that share a slot in one limiter are spread in another, and
 * names that differ in one byte land apart. */
static void check_cache_hash(int port) {
    sluice_fleet_t *f[2];
    for (int i = 0; i < 2; i++) {
        sluice_fleet_config_t c;
        memset(&c, 0, sizeof c);
        c.policy = sluice_rate(1, (int64_t)SEC, BURST);
        c.port = port;
        c.prefix = "cache";
        c.prefix_len = 5;
        c.cache_slots = 4096;
        CHECK(sluice_fleet_new(&f[i], base, &c) == 0, "sluice_fleet_new");
        CHECK(sluice__fleet_cache_slot(f[i], "x", 1) < 4096, "cache slot out of range");
    }
    /* 32 names that share one slot in f[0] */
    enum { SAME = 32 };
    static char names[SAME][48];
    size_t lens[SAME], found = 0, target = SIZE_MAX;
    for (unsigned i = 0; found < SAME && i < 4096u * 64u; i++) {
        char name[48];
        size_t len = (size_t)snprintf(name, sizeof name, "{5:cache:bclient-%u}", i);
        size_t s = sluice__fleet_cache_slot(f[0], name, len);
        if (target == SIZE_MAX) target = s;
        if (s != target) continue;
        memcpy(names[found], name, len + 1);
        lens[found++] = len;
    }
    CHECK(found == SAME, "only %zu names in one slot among 262144", found);
    /* in f[1] they spread: 32 names in 4096 slots, five in one slot would be
     * a one-in-a-billion draw */
    size_t most = 0;
    for (size_t i = 0; i < SAME; i++) {
        size_t same = 0, si = sluice__fleet_cache_slot(f[1], names[i], lens[i]);
        for (size_t j = 0; j < SAME; j++) same += sluice__fleet_cache_slot(f[1], names[j], lens[j]) == si;
        if (same > most) most = same;
    }
    CHECK(most <= 4, "%zu of the names that share a slot in one limiter share one in another", most);
    /* one byte changed anywhere in a name moves it (expected 1000/4096 of
     * 1000 pairs stay) */
    unsigned stayed = 0;
    for (unsigned i = 0; i < 1000; i++) {
        char name[64];
        size_t len = (size_t)snprintf(name, sizeof name, "{5:cache:bapi-key-%08u-abcdefghijklmnop}", i * 7919u);
        size_t s = sluice__fleet_cache_slot(f[0], name, len);
        name[i % len] ^= 1;
        stayed += sluice__fleet_cache_slot(f[0], name, len) == s;
    }
    CHECK(stayed <= 10, "%u of 1000 names kept their slot with a byte changed", stayed);
    sluice_fleet_free(f[0]);
    sluice_fleet_free(f[1]);
}

static sluice_fleet_result_t call(sluice_fleet_t *f, sluice_key_t k, uint64_t t) {
    tf_box_t b = { 0 };
    CHECK(sluice_fleet_call(f, k, 1, t, tf_on_result, &b) == 0, "call");
    tf_wait(base, &b);
    CHECK(b.res.source == SLUICE_FLEET_SOURCE_REDIS, "not decided by Redis (source %d, cause %d)", b.res.source,
          b.res.cause);
    return b.res;
}

static sluice_quota_t quota(sluice_fleet_t *f, sluice_key_t k, uint64_t t) {
    tf_box_t b = { 0 };
    CHECK(sluice_fleet_quota(f, k, 1, t, tf_on_result, &b) == 0, "quota");
    tf_wait(base, &b);
    CHECK(b.res.source == SLUICE_FLEET_SOURCE_REDIS, "quota not from Redis (cause %d)", b.res.cause);
    return b.res.quota;
}

/* Whether Redis holds a key of exactly these bytes. */
static bool exists(redisContext *rc, const char *name, size_t len) {
    redisReply *r = redisCommand(rc, "EXISTS %b", name, len);
    CHECK(r && r->type == REDIS_REPLY_INTEGER, "EXISTS");
    bool yes = r->integer == 1;
    freeReplyObject(r);
    return yes;
}

/* Undoes E (see fleet_key.c) over [p, end) into out; returns its length, or
 * -1 on a byte sequence E never writes. */
static int unescape(const char *p, const char *end, char *out) {
    int n = 0;
    while (p < end) {
        if (*p == '}') return -1;
        if (*p != '%') {
            out[n++] = *p++;
            continue;
        }
        if (end - p < 3) return -1;
        if (p[1] == '2' && p[2] == '5')
            out[n++] = '%';
        else if (p[1] == '7' && p[2] == 'D')
            out[n++] = '}';
        else
            return -1;
        p += 3;
    }
    return n;
}

/* Decodes a name as documented (no suffix) and checks it gives back the prefix,
 * tag and key, and that Redis's hash tag covers the whole identity. */
static void check_decodes(const char *name, size_t len, const char *pre, size_t pn, char tag, const char *key,
                          size_t kn) {
    CHECK(len >= 2 && name[0] == '{' && name[len - 1] == '}', "braces");
    const char *first_close = memchr(name + 1, '}', len - 1);
    CHECK(first_close == name + len - 1, "the hash tag ends before the identity does");
    size_t i = 1, n = 0;
    while (name[i] >= '0' && name[i] <= '9') n = n * 10 + (size_t)(name[i++] - '0');
    CHECK(name[i] == ':' && i + 1 + n + 2 < len, "length prefix");
    char buf[4096];
    int got = unescape(name + i + 1, name + i + 1 + n, buf);
    CHECK(got == (int)pn && memcmp(buf, pre, pn) == 0, "prefix not recovered");
    i += 1 + n;
    CHECK(name[i] == ':' && name[i + 1] == tag, "separator and tag");
    got = unescape(name + i + 2, name + len - 1, buf);
    CHECK(got == (int)kn && memcmp(buf, key, kn) == 0, "key not recovered");
}

/* Random prefixes and keys over the bytes that matter to the layout. */
static void check_encoding(void) {
    static const char alphabet[] = "%}{:7D25ab\0";
    for (int round = 0; round < 20000; round++) {
        char pre[40], key[40], enc[22 + 3 * sizeof pre], name[sizeof enc + 3 + 3 * sizeof key];
        size_t pn = tf_range(0, sizeof pre), kn = tf_range(0, sizeof key);
        for (size_t i = 0; i < pn; i++) pre[i] = alphabet[tf_range(0, sizeof alphabet - 2)];
        for (size_t i = 0; i < kn; i++) key[i] = alphabet[tf_range(0, sizeof alphabet - 2)];
        size_t en = sluice__fleet_prefix_encode(pre, pn, enc);
        CHECK(en <= 22 + 3 * pn, "prefix encoding longer than documented");
        char tag = round % 2 ? 'b' : 'u';
        size_t len = sluice__fleet_key_write(name, enc, en, tag, key, kn);
        CHECK(len == en + 3 + sluice__fleet_escaped_len(key, kn), "name length");
        check_decodes(name, len, pre, pn, tag, key, kn);
    }
}

int main(void) {
    check_encoding();
    test_redis_t redis;
    tf_start_redis(&redis);
    base = event_base_new();
    CHECK(base, "event_base_new");
    check_cache_hash(redis.port);
    redisContext *rc = redisConnect("127.0.0.1", redis.port);
    CHECK(rc && !rc->err, "redisConnect");

    sluice_fleet_t *a = fleet(redis.port, "login");
    sluice_fleet_t *b = fleet(redis.port, "login:by-ip");
    const uint64_t t = 1000 * SEC;
    static const char crafted[] = "y-ip:b10.0.0.7"; /* A's key, B's key 10.0.0.7 in the old layout */
    sluice_key_t ka = sluice_key_bytes(crafted, sizeof crafted - 1);
    sluice_key_t kb = sluice_key_bytes("10.0.0.7", 8);

    /* A spends its crafted key's whole burst... */
    for (int i = 0; i < BURST; i++) {
        sluice_fleet_result_t r = call(a, ka, t);
        CHECK(r.decision.kind == SLUICE_EMITTED, "A's call %d dropped", i);
    }
    CHECK(call(a, ka, t).decision.kind == SLUICE_DROPPED, "A's own quota is spent");
    /* ...and B's key keeps its own */
    sluice_quota_t q = quota(b, kb, t);
    CHECK(q.remaining == BURST, "B's quota touched by A's calls: %llu of %d left", (unsigned long long)q.remaining,
          BURST);
    for (int i = 0; i < BURST; i++)
        CHECK(call(b, kb, t).decision.kind == SLUICE_EMITTED, "B's call %d dropped: A spent its quota", i);
    /* the other way round: B's calls left A's key as it was */
    CHECK(call(a, ka, t).decision.kind == SLUICE_DROPPED, "A's key after B's calls");

    /* the documented names: {<length of encoded prefix>:<prefix>:<tag><key>} */
    static const char na[] = "{5:login:by-ip:b10.0.0.7}", nb[] = "{11:login:by-ip:b10.0.0.7}";
    CHECK(exists(rc, na, sizeof na - 1), "A's key is not %s", na);
    CHECK(exists(rc, nb, sizeof nb - 1), "B's key is not %s", nb);
    call(a, sluice_key_u64(42), t);
    CHECK(exists(rc, "{5:login:u42}", 13), "integer key name");
    /* '}' would end the hash tag early and '%' is the escape: both escaped */
    call(a, sluice_key_bytes("a}b%", 4), t);
    static const char esc[] = "{5:login:ba%7Db%25}";
    CHECK(exists(rc, esc, sizeof esc - 1), "escaped key name is not %s", esc);
    /* a key holding the escape itself stays distinct from the escaped one */
    call(a, sluice_key_bytes("a%7Db%25", 8), t);
    static const char esc2[] = "{5:login:ba%257Db%2525}";
    CHECK(exists(rc, esc2, sizeof esc2 - 1), "twice-escaped key name is not %s", esc2);
    /* a prefix with '}' is escaped too; its length prefix counts encoded bytes */
    sluice_fleet_t *c = fleet(redis.port, "x}");
    call(c, sluice_key_u64(1), t);
    CHECK(exists(rc, "{4:x%7D:u1}", 11), "escaped prefix name");
    redisReply *r = redisCommand(rc, "DBSIZE");
    CHECK(r && r->type == REDIS_REPLY_INTEGER && r->integer == 6, "keys in Redis: %lld, want 6", r ? r->integer : -1);
    freeReplyObject(r);

    sluice_fleet_free(a);
    sluice_fleet_free(b);
    sluice_fleet_free(c);
    redisFree(rc);
    event_base_free(base);
    test_redis_stop(&redis);
    printf(TEST_NAME ": ok\n");
    return 0;
}
