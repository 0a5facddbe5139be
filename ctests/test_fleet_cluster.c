/* test_fleet_cluster.c — Redis Cluster support of the fleet limiter, with a
 * real 3-primary cluster on loopback (three redis-servers in cluster mode,
 * joined by `redis-cli --cluster create`).
 *
 * So far: the hash slot of a key (cluster-slot.c): CRC16 against its known
 * check values, the hash-tag rule on hand-picked cases, and the slot of many
 * random keys and of the fleet's own key names (user keys with '{', '}' and
 * '%' inside, escaped by fleet_key.c) against CLUSTER KEYSLOT of a node;
 * the slot map (cluster-map.c) read from CLUSTER SLOTS of each node: every
 * slot covered by one of the three, and a key sent to its slot's node is
 * served there while the two others answer MOVED to that node; hand-made
 * replies for an empty host (the node asked), an unknown endpoint (NULL) and
 * malformed ranges.
 *
 * Label "topology" (seconds of real time): `make test-topology`. */
#define TEST_NAME "test_fleet_cluster"
#include "test_fleet_util.h"

#include <hiredis/hiredis.h>
#include <stdarg.h>
#include <unistd.h>

#include "cluster-map.h"
#include "cluster-slot.h"
#include "fleet-internal.h"

#define NODES 3

static test_redis_t node[NODES];

/* ---- synchronous helpers (hiredis, 5 s timeouts) */

static redisReply *cmd(int port, const char *fmt, ...) {
    struct timeval tv = { 5, 0 };
    redisContext *c = redisConnectWithTimeout("127.0.0.1", port, tv);
    if (!c || c->err) {
        if (c) redisFree(c);
        return NULL;
    }
    redisSetTimeout(c, tv);
    va_list ap;
    va_start(ap, fmt);
    redisReply *r = redisvCommand(c, fmt, ap);
    va_end(ap);
    redisFree(c);
    return r;
}

static void sleep_ms(int ms) {
    struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };
    nanosleep(&ts, NULL);
}

/* ---- the cluster */

static bool cluster_ok(int port) {
    redisReply *r = cmd(port, "CLUSTER INFO");
    bool ok = r && r->type == REDIS_REPLY_STRING && strstr(r->str, "cluster_state:ok") != NULL;
    if (r) freeReplyObject(r);
    return ok;
}

/* Starts three cluster-mode servers and joins them (each one a primary with
 * a third of the slots); waits (30 s at most) until every node says ok. */
static void start_cluster(void) {
    if (!test_redis_available() || system("redis-cli --version >/dev/null 2>&1") != 0) {
        fprintf(stderr, TEST_NAME ": SKIPPED: redis-server or redis-cli not found\n");
        exit(77);
    }
    test_redis_opts_t o = { .cluster = true };
    char line[512];
    int n = snprintf(line, sizeof line, "timeout 60 redis-cli --cluster create");
    for (int i = 0; i < NODES; i++) {
        memset(&node[i], 0, sizeof node[i]);
        CHECK(test_redis_start_opts(&node[i], 0, &o) == 0, "cannot start cluster node %d", i);
        n += snprintf(line + n, sizeof line - (size_t)n, " 127.0.0.1:%d", node[i].port);
    }
    snprintf(line + n, sizeof line - (size_t)n, " --cluster-yes >/dev/null");
    CHECK(system(line) == 0, "redis-cli --cluster create failed");
    uint64_t end = tf_mono() + 30000000000ull;
    for (int i = 0; i < NODES; i++) {
        while (!cluster_ok(node[i].port)) {
            CHECK(tf_mono() < end, "cluster_state not ok on node %d within 30 s", i);
            sleep_ms(50);
        }
    }
}

static void stop_cluster(void) {
    for (int i = 0; i < NODES; i++) test_redis_stop(&node[i]);
}

/* ---- slots */

static unsigned slot_of(const char *s) { return sluice__cluster_keyslot(s, strlen(s)); }

static void test_slot_known(void) {
    CHECK(sluice__cluster_crc16("123456789", 9) == 0x31C3, "CRC16 check value");
    CHECK(sluice__cluster_crc16(NULL, 0) == 0, "CRC16 of nothing");
    /* Redis's documented examples */
    CHECK(slot_of("foo") == 12182, "slot of foo: %u", slot_of("foo"));
    CHECK(slot_of("{user1000}.following") == slot_of("{user1000}.followers"), "one tag, one slot");
    CHECK(slot_of("{user1000}.following") == slot_of("user1000"), "the tag alone is hashed");
    CHECK(slot_of("foo{}{bar}") == sluice__cluster_crc16("foo{}{bar}", 10) % 16384, "{} is no tag");
    CHECK(slot_of("foo{{bar}}zap") == slot_of("{bar"), "the tag runs to the first }");
    CHECK(slot_of("foo{bar}{zap}") == slot_of("bar"), "the first tag counts");
    CHECK(slot_of("{") == sluice__cluster_crc16("{", 1) % 16384, "an open brace alone");
}

/* CLUSTER KEYSLOT of `key` (binary) on `port`. */
static unsigned server_slot(int port, const char *key, size_t len) {
    redisReply *r = cmd(port, "CLUSTER KEYSLOT %b", key, len);
    CHECK(r && r->type == REDIS_REPLY_INTEGER, "CLUSTER KEYSLOT: %s", r && r->str ? r->str : "no reply");
    unsigned s = (unsigned)r->integer;
    freeReplyObject(r);
    return s;
}

static void test_slot_against_server(void) {
    static const char alphabet[] = "ab{}%:xyz0{}9\x01\xff";
    char prefix[32];
    size_t plen = sluice__fleet_prefix_encode("sl{u}ice", 8, prefix);
    int braces = 0;
    for (int i = 0; i < 600; i++) {
        char key[40], name[200];
        size_t len = (size_t)tf_range(0, sizeof key - 1);
        for (size_t j = 0; j < len; j++) key[j] = alphabet[tf_range(0, sizeof alphabet - 2)];
        if (memchr(key, '{', len) && memchr(key, '}', len)) braces++;
        /* the key as it is (any bytes, tags or not) */
        unsigned want = server_slot(node[i % NODES].port, key, len);
        CHECK(sluice__cluster_keyslot(key, len) == want, "slot of raw key %d: %u, server %u", i, want,
              sluice__cluster_keyslot(key, len));
        /* the fleet's name of it */
        size_t nlen = sluice__fleet_key_write(name, prefix, plen, 'b', key, len);
        want = server_slot(node[i % NODES].port, name, nlen);
        CHECK(sluice__cluster_keyslot(name, nlen) == want, "slot of name %d: server %u", i, want);
        /* one key's names share the tag: the whole braced name */
        CHECK(sluice__cluster_keyslot(name, nlen) == sluice__cluster_keyslot(name + 1, nlen - 2),
              "name %d: the tag is the whole identity", i);
    }
    CHECK(braces > 50, "keys with braces tried: %d", braces);
}

/* ---- slot map */

static void test_map_from_nodes(void) {
    for (int i = 0; i < NODES; i++) {
        redisReply *r = cmd(node[i].port, "CLUSTER SLOTS");
        sluice__cluster_map_t m;
        CHECK(sluice__cluster_map_parse(r, "127.0.0.1", &m) == 0, "parse CLUSTER SLOTS of node %d", i);
        freeReplyObject(r);
        CHECK(m.n_nodes == NODES, "node %d names %zu primaries", i, m.n_nodes);
        for (int j = 0; j < NODES; j++)
            CHECK(sluice__cluster_map_find(&m, "127.0.0.1", node[j].port) >= 0, "node %d is in the map", j);
        for (size_t s = 0; s < SLUICE__CLUSTER_SLOTS; s++) CHECK(m.owner[s] < m.n_nodes, "slot %zu covered", s);
        for (int k = 0; k < 60; k++) {
            char key[32];
            int len = snprintf(key, sizeof key, "k%d:%llu", k, (unsigned long long)tf_next());
            int owner = m.nodes[m.owner[sluice__cluster_keyslot(key, (size_t)len)]].port;
            for (int j = 0; j < NODES; j++) {
                redisReply *e = cmd(node[j].port, "EXISTS %b", key, (size_t)len);
                CHECK(e, "EXISTS on node %d", j);
                if (node[j].port == owner) {
                    CHECK(e->type == REDIS_REPLY_INTEGER, "the map's node serves %s", key);
                } else {
                    char want[64];
                    snprintf(want, sizeof want, ":%d", owner);
                    CHECK(e->type == REDIS_REPLY_ERROR && strncmp(e->str, "MOVED ", 6) == 0 && strstr(e->str, want),
                          "node %d sends %s to the map's node: %s", j, key, e->str ? e->str : "?");
                }
                freeReplyObject(e);
            }
        }
        sluice__cluster_map_free(&m);
    }
}

/* Hand-made replies: an empty host is the node asked, NULL serves nothing. */
static void test_map_edge_replies(void) {
    redisReply s0 = { .type = REDIS_REPLY_INTEGER, .integer = 0 }, s9 = { .type = REDIS_REPLY_INTEGER, .integer = 9 };
    redisReply s10 = { .type = REDIS_REPLY_INTEGER, .integer = 10 };
    redisReply s20 = { .type = REDIS_REPLY_INTEGER, .integer = 20 };
    redisReply port = { .type = REDIS_REPLY_INTEGER, .integer = 7001 };
    redisReply empty = { .type = REDIS_REPLY_STRING, .str = (char *)"", .len = 0 };
    redisReply nil = { .type = REDIS_REPLY_NIL };
    redisReply *pe[] = { &empty, &port }, *pn[] = { &nil, &port };
    redisReply p_empty = { .type = REDIS_REPLY_ARRAY, .elements = 2, .element = pe };
    redisReply p_nil = { .type = REDIS_REPLY_ARRAY, .elements = 2, .element = pn };
    redisReply *r1[] = { &s0, &s9, &p_empty }, *r2[] = { &s10, &s20, &p_nil };
    redisReply range1 = { .type = REDIS_REPLY_ARRAY, .elements = 3, .element = r1 };
    redisReply range2 = { .type = REDIS_REPLY_ARRAY, .elements = 3, .element = r2 };
    redisReply *all[] = { &range1, &range2 };
    redisReply top = { .type = REDIS_REPLY_ARRAY, .elements = 2, .element = all };
    sluice__cluster_map_t m;
    CHECK(sluice__cluster_map_parse(&top, "10.0.0.7", &m) == 0, "parse the hand-made reply");
    CHECK(m.n_nodes == 1 && strcmp(m.nodes[0].host, "10.0.0.7") == 0 && m.nodes[0].port == 7001,
          "an empty host is the node asked");
    CHECK(m.owner[0] == 0 && m.owner[9] == 0, "slots 0..9 on it");
    CHECK(m.owner[10] == SLUICE__CLUSTER_NONE && m.owner[20] == SLUICE__CLUSTER_NONE &&
              m.owner[21] == SLUICE__CLUSTER_NONE,
          "an unknown endpoint and a gap serve nothing");
    sluice__cluster_map_free(&m);
    /* malformed: end before start, a slot out of range, not an array */
    r2[0] = &s20, r2[1] = &s10, r2[2] = &p_empty;
    CHECK(sluice__cluster_map_parse(&top, "h", &m) == SLUICE_EPROTO && m.n_nodes == 0, "end before start");
    redisReply big = { .type = REDIS_REPLY_INTEGER, .integer = 16384 };
    r2[0] = &s10, r2[1] = &big;
    CHECK(sluice__cluster_map_parse(&top, "h", &m) == SLUICE_EPROTO, "slot 16384");
    CHECK(sluice__cluster_map_parse(&s0, "h", &m) == SLUICE_EPROTO, "an integer");
    CHECK(sluice__cluster_map_parse(NULL, "h", &m) == SLUICE_EPROTO, "no reply");
}

int main(void) {
    test_slot_known();
    test_map_edge_replies();
    start_cluster();
    test_slot_against_server();
    test_map_from_nodes();
    stop_cluster();
    printf(TEST_NAME ": ok\n");
    return 0;
}
