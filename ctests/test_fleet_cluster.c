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
 * malformed ranges. Then the fleet limiter through redis+cluster://: every
 * rate vector of Tests/Vectors prints through `sluice-trace --redis` what
 * the local run prints; bursts on 60 keys spread over the three nodes admit
 * exactly the burst per key, each answer Redis's; a slot moved to another
 * node (SETSLOT IMPORTING/MIGRATING, MIGRATE, SETSLOT NODE) while calls go
 * on: MOVED followed, the key's state moved with it, nothing over-admitted
 * (also with calls streaming from another thread through the whole move);
 * during a migration (key already on the target) ASK is followed with
 * ASKING; a slot no node serves gives SLUICE_ECLUSTERDOWN to calls and
 * cancels until it is served again; the periodic map read (CLUSTER SLOTS
 * counted on the nodes, with a 200 ms period); and a node killed (SIGKILL):
 * its keys get the failure policy within their timeout, the other nodes'
 * keys are still decided by Redis. One batch per node: 4,000 calls on 400
 * keys (nearly as many slots) at increasing times, pipelined, go in few script
 * runs that each name keys of many slots of one node, and every answer is
 * the core limiter's (sluice_limiter_submit()); a slot holding five of 160
 * keys moved key by key (IMPORTING, MIGRATING, MIGRATE, SETSLOT NODE) while
 * rounds of calls on all the keys stream from another thread: the batches
 * the source refuses as a whole are split and each request decided once, on
 * the right node (exactly the burst admitted per key, every call answered
 * once, by Redis). Replica failover:
 * test_fleet_cluster_failover.c.
 *
 * Label "topology" (seconds of real time): `make test-topology`. */
#define TEST_NAME "test_fleet_cluster"
#include "test_fleet_util.h"

#include <hiredis/hiredis.h>
#include <stdarg.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cluster-map.h"
#include "cluster-slot.h"
#include "cluster.h"
#include "fleet-internal.h"

#define NODES 3

static test_redis_t node[NODES];

/* ---- synchronous helpers (hiredis, 5 s timeouts) */

static void sleep_ms(int ms) {
    struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };
    nanosleep(&ts, NULL);
}

/* ---- the cluster */

static bool cluster_ok(int port) {
    redisReply *r = tf_cmd(port, "CLUSTER INFO");
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
    redisReply *r = tf_cmd(port, "CLUSTER KEYSLOT %b", key, len);
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
        redisReply *r = tf_cmd(node[i].port, "CLUSTER SLOTS");
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
                redisReply *e = tf_cmd(node[j].port, "EXISTS %b", key, (size_t)len);
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

/* ---- redirections */

static int parse_redirect(const char *msg, bool *ask, unsigned *slot, char *host, size_t host_len, int *port) {
    return sluice__cluster_redirect_parse(msg, strlen(msg), ask, slot, host, host_len, port);
}

static void test_redirect_parse(void) {
    bool ask;
    unsigned slot;
    char host[64];
    int port;
    CHECK(parse_redirect("MOVED 3999 127.0.0.1:6381", &ask, &slot, host, sizeof host, &port) == 0 && !ask &&
              slot == 3999 && strcmp(host, "127.0.0.1") == 0 && port == 6381,
          "MOVED");
    CHECK(parse_redirect("ASK 16383 ::1:7000", &ask, &slot, host, sizeof host, &port) == 0 && ask && slot == 16383 &&
              strcmp(host, "::1") == 0 && port == 7000,
          "ASK to IPv6: the port is after the last colon");
    CHECK(parse_redirect("MOVED 0 :7002", &ask, &slot, host, sizeof host, &port) == 0 && host[0] == '\0' &&
              port == 7002,
          "an empty host (the node that answered)");
    const char *bad[] = { "MOVED",           "MOVED 16384 h:1", "MOVED x h:1",      "MOVED 1 h",    "MOVED 1 h:",
                          "MOVED 1 h:70000", "MOVED 1 h:0",     "ASK 1 h:1x",       "MOVEDX 1 h:1", "NOSCRIPT x",
                          "MOVED 1  h:1x",   "ask 1 h:1",       "MOVED 1234567 h:1" };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        CHECK(parse_redirect(bad[i], &ask, &slot, host, sizeof host, &port) != 0, "not a redirection: %s", bad[i]);
    char small[4];
    CHECK(parse_redirect("MOVED 1 longhost:1", &ask, &slot, small, sizeof small, &port) != 0, "a host too long");
}

/* ---- the fleet through the cluster */

#define MS 1000000ull
#define SEC 1000000000ull

static struct event_base *base;

static sluice_fleet_t *fleet_on(uint64_t timeout_ns) {
    char url[256];
    snprintf(url, sizeof url, "redis+cluster://127.0.0.1:%d,127.0.0.1:%d", node[0].port, node[1].port);
    sluice_fleet_config_t fc;
    memset(&fc, 0, sizeof fc);
    fc.policy = sluice_rate(3, (int64_t)SEC, 3);
    fc.url = url;
    fc.manual_time = true;
    fc.timeout_ns = timeout_ns;
    fc.on_failure = SLUICE_FLEET_FAIL_CLOSED;
    fc.cache_slots = SIZE_MAX; /* every call goes to Redis */
    sluice_fleet_t *f = NULL;
    int rc = sluice_fleet_new(&f, base, &fc);
    CHECK(rc == 0, "fleet_new %s: %d", url, rc);
    return f;
}

/* One call (cost 1) at `now`, waited for. */
static sluice_fleet_result_t call1(sluice_fleet_t *f, sluice_key_t k, uint64_t now) {
    tf_box_t b = { 0 };
    CHECK(sluice_fleet_call(f, k, 1, now, tf_on_result, &b) == 0, "call");
    tf_wait(base, &b);
    return b.res;
}

/* The Redis name of a bytes key with the default prefix, and its slot. */
static unsigned name_slot(const char *key, char *name, size_t *name_len) {
    char prefix[32];
    size_t plen = sluice__fleet_prefix_encode("sluice", 6, prefix);
    *name_len = sluice__fleet_key_write(name, prefix, plen, 'b', key, strlen(key));
    return sluice__cluster_keyslot(name, *name_len);
}

/* The index (in node[]) of the primary of `slot`, by CLUSTER SLOTS of node 0. */
static int owner_of(unsigned slot) {
    redisReply *r = tf_cmd(node[0].port, "CLUSTER SLOTS");
    sluice__cluster_map_t m;
    CHECK(sluice__cluster_map_parse(r, "127.0.0.1", &m) == 0, "CLUSTER SLOTS");
    freeReplyObject(r);
    int port = m.owner[slot] == SLUICE__CLUSTER_NONE ? -1 : m.nodes[m.owner[slot]].port;
    sluice__cluster_map_free(&m);
    for (int i = 0; i < NODES; i++)
        if (node[i].port == port) return i;
    CHECK(false, "no node serves slot %u", slot);
    return -1;
}

static void node_id(int i, char *out, size_t len) {
    redisReply *r = tf_cmd(node[i].port, "CLUSTER MYID");
    CHECK(r && r->type == REDIS_REPLY_STRING, "CLUSTER MYID");
    snprintf(out, len, "%s", r->str);
    freeReplyObject(r);
}

static void ok_reply(redisReply *r, const char *what) {
    CHECK(r && r->type != REDIS_REPLY_ERROR, "%s: %s", what, r && r->str ? r->str : "no reply");
    freeReplyObject(r);
}

/* Setup errors: a TLS file that cannot be loaded fails at once; seeds that
 * do not answer fail each call by the policy within its timeout. */
static void test_setup_errors(void) {
    sluice_fleet_config_t fc;
    memset(&fc, 0, sizeof fc);
    fc.policy = sluice_rate(3, (int64_t)SEC, 3);
    fc.url = "rediss+cluster://127.0.0.1:7000?cacert=/nonexistent/ca.pem";
    sluice_fleet_t *f = NULL;
    int rc = sluice_fleet_new(&f, base, &fc);
    CHECK(rc == SLUICE_ETLS && !f, "a missing CA file: %d", rc);
    char url[128];
    snprintf(url, sizeof url, "redis+cluster://127.0.0.1:%d,127.0.0.1:%d", test_free_port(), test_free_port());
    fc.url = url;
    fc.timeout_ns = 100 * MS;
    CHECK(sluice_fleet_new(&f, base, &fc) == 0, "fleet_new with dead seeds");
    uint64_t t0 = tf_mono();
    sluice_fleet_result_t r = call1(f, sluice_key_u64(1), 0);
    CHECK(r.source == SLUICE_FLEET_SOURCE_FAILURE && r.cause != 0 && r.decision.kind == SLUICE_DROPPED,
          "no seed answers: source %d cause %d", r.source, r.cause);
    /* within the timeout; the slack is for a loaded machine, not a speed claim */
    CHECK(tf_mono() - t0 < 100 * MS + 3000 * MS, "answered within the timeout");
    CHECK(!sluice_fleet_connected(f), "not connected");
    sluice_fleet_free(f);
}

/* Every rate vector prints through the cluster what the local run prints;
 * every throttle, audit and debounce vector and random timed traces match
 * the local run through the timed limiter. */
static void test_vectors(void) {
    const char *exe = getenv("SLUICE_TRACE"), *src = getenv("SLUICE_SOURCE_DIR");
    if (!exe || !src) {
        fprintf(stderr, TEST_NAME ": vectors SKIPPED: SLUICE_TRACE or SLUICE_SOURCE_DIR not set\n");
        return;
    }
    char dir[1024], url[256];
    snprintf(dir, sizeof dir, "%s/Tests/Vectors", src);
    snprintf(url, sizeof url, "redis+cluster://127.0.0.1:%d,127.0.0.1:%d", node[0].port, node[1].port);
    const char *const urls[1] = { url };
    int compared = tf_compare_vectors(exe, NULL, dir, urls, 1, true);
    CHECK(compared >= 5, "only %d rate vectors found", compared);
    fprintf(stderr, TEST_NAME ": %d rate vectors identical through the cluster\n", compared);
    /* throttle, audit and debounce: the timed limiter's 16 partitions over the 3 primaries */
    const char *cmp = getenv("SLUICE_TRACECMP");
    CHECK(cmp, "SLUICE_TRACECMP not set");
    compared = tf_compare_vectors(exe, cmp, dir, urls, 1, false);
    CHECK(compared >= 40, "only %d timed vectors found", compared);
    int dropping = tf_compare_random(exe, cmp, url, 40, tf_write_random_timed, " drop ");
    CHECK(dropping > 40 / 3, "only %d random timed traces dropped a value", dropping);
    fprintf(stderr, TEST_NAME ": %d timed vectors and 40 random timed traces match through the cluster\n", compared);
}

/* Bursts on many keys, spread over the three nodes: exactly the burst
 * admitted per key, every answer Redis's. */
static void test_spread(void) {
    sluice_fleet_t *f = fleet_on(2 * SEC);
    enum { KEYS = 60, CALLS = 5 };
    static tf_box_t box[KEYS][CALLS];
    memset(box, 0, sizeof box);
    int done = 0;
    for (int k = 0; k < KEYS; k++)
        for (int c = 0; c < CALLS; c++)
            CHECK(sluice_fleet_call(f, sluice_key_u64(1000 + (uint64_t)k), 1, 5 * SEC, tf_on_result, &box[k][c]) == 0,
                  "call");
    uint64_t end = tf_mono() + 30 * SEC;
    while (done < KEYS * CALLS) {
        CHECK(tf_mono() < end, "spread: %d of %d answered", done, KEYS * CALLS);
        event_base_loop(base, EVLOOP_ONCE | EVLOOP_NONBLOCK);
        done = 0;
        for (int k = 0; k < KEYS; k++)
            for (int c = 0; c < CALLS; c++) done += box[k][c].done;
    }
    for (int k = 0; k < KEYS; k++) {
        int admitted = 0;
        for (int c = 0; c < CALLS; c++) {
            CHECK(box[k][c].done == 1 && box[k][c].res.source == SLUICE_FLEET_SOURCE_REDIS,
                  "key %d call %d: source %d cause %d", k, c, box[k][c].res.source, box[k][c].res.cause);
            admitted += box[k][c].res.decision.kind == SLUICE_EMITTED;
        }
        CHECK(admitted == 3, "key %d: %d admitted, the burst is 3", k, admitted);
    }
    for (int i = 0; i < NODES; i++) {
        redisReply *r = tf_cmd(node[i].port, "DBSIZE");
        CHECK(r && r->type == REDIS_REPLY_INTEGER && r->integer > 0, "node %d holds keys", i);
        freeReplyObject(r);
    }
    CHECK(sluice_fleet_connected(f), "connected to every primary");
    sluice_fleet_free(f);
}

/* Migrates every key `slot` still holds on node `from` to node `to` (keys
 * other tests left there: the timed limiter's partitions, whose slots
 * depend on a random prefix), so that SETSLOT NODE may end the move. */
static void migrate_rest(unsigned slot, int from, int to) {
    for (;;) {
        redisReply *r = tf_cmd(node[from].port, "CLUSTER GETKEYSINSLOT %u 100", slot);
        CHECK(r && r->type == REDIS_REPLY_ARRAY, "GETKEYSINSLOT");
        size_t n = r->elements;
        for (size_t i = 0; i < n; i++)
            ok_reply(tf_cmd(node[from].port, "MIGRATE 127.0.0.1 %d %b 0 5000", node[to].port, r->element[i]->str,
                            r->element[i]->len),
                     "MIGRATE (the slot's other keys)");
        freeReplyObject(r);
        if (n == 0) return;
    }
}

/* Starts moving `slot` from node `from` to node `to` with `name` in it:
 * IMPORTING, MIGRATING, then MIGRATE of the key. */
static void migrate_key(unsigned slot, int from, int to, const char *name, size_t name_len) {
    char from_id[64], to_id[64];
    node_id(from, from_id, sizeof from_id);
    node_id(to, to_id, sizeof to_id);
    ok_reply(tf_cmd(node[to].port, "CLUSTER SETSLOT %u IMPORTING %s", slot, from_id), "IMPORTING");
    ok_reply(tf_cmd(node[from].port, "CLUSTER SETSLOT %u MIGRATING %s", slot, to_id), "MIGRATING");
    ok_reply(tf_cmd(node[from].port, "MIGRATE 127.0.0.1 %d %s 0 5000 KEYS %b", node[to].port, "", name, name_len),
             "MIGRATE");
}

/* Ends the move: what `from` still holds of the slot goes to `to`, then
 * every node says the slot is `to`'s. */
static void finish_move(unsigned slot, int from, int to) {
    migrate_rest(slot, from, to);
    char to_id[64];
    node_id(to, to_id, sizeof to_id);
    for (int i = 0; i < NODES; i++)
        ok_reply(tf_cmd(node[i].port, "CLUSTER SETSLOT %u NODE %s", slot, to_id), "SETSLOT NODE");
}

/* A slot moved while calls go on: MOVED is followed, the key's state moved
 * with it (nothing over-admitted), every answer Redis's. */
static void test_moved(void) {
    sluice_fleet_t *f = fleet_on(2 * SEC);
    char name[256];
    size_t len;
    unsigned slot = name_slot("moved-key", name, &len);
    int from = owner_of(slot), to = (from + 1) % NODES;
    sluice_key_t k = sluice_key_bytes("moved-key", 9);
    int admitted = 0;
    for (int i = 0; i < 2; i++) {
        sluice_fleet_result_t r = call1(f, k, 7 * SEC);
        CHECK(r.source == SLUICE_FLEET_SOURCE_REDIS, "before the move: source %d", r.source);
        admitted += r.decision.kind == SLUICE_EMITTED;
    }
    migrate_key(slot, from, to, name, len);
    finish_move(slot, from, to);
    long long before = tf_cmd_calls(node[to].port, "evalsha") + tf_cmd_calls(node[to].port, "eval") +
                       tf_cmd_calls(node[to].port, "fcall");
    for (int i = 0; i < 4; i++) {
        sluice_fleet_result_t r = call1(f, k, 7 * SEC);
        CHECK(r.source == SLUICE_FLEET_SOURCE_REDIS, "after the move: source %d cause %d", r.source, r.cause);
        admitted += r.decision.kind == SLUICE_EMITTED;
    }
    CHECK(admitted == 3, "moved key: %d admitted, the burst is 3", admitted);
    CHECK(tf_cmd_calls(node[to].port, "evalsha") + tf_cmd_calls(node[to].port, "eval") +
                  tf_cmd_calls(node[to].port, "fcall") >=
              before + 4,
          "decided on the new node");
    CHECK(owner_of(slot) == to, "the slot is the new node's");
    sluice_fleet_free(f);
}

/* ---- a slot moved while calls stream (the fleet on its own loop thread) */

static int live_answered, live_admitted, live_not_redis;

static void live_result(void *user, const sluice_fleet_result_t *res) {
    (void)user;
    if (res->source != SLUICE_FLEET_SOURCE_REDIS) __atomic_fetch_add(&live_not_redis, 1, __ATOMIC_RELAXED);
    if (res->decision.kind == SLUICE_EMITTED) __atomic_fetch_add(&live_admitted, 1, __ATOMIC_RELAXED);
    __atomic_fetch_add(&live_answered, 1, __ATOMIC_RELAXED);
}

static void live_calls(sluice_fleet_t *f, sluice_key_t k, int n, int *sent) {
    for (int i = 0; i < n; i++) {
        CHECK(sluice_fleet_call(f, k, 1, 13 * SEC, live_result, NULL) == 0, "call");
        (*sent)++;
        struct timespec ts = { 0, 200000 };
        nanosleep(&ts, NULL);
    }
}

/* Calls at one instant stream on one key while its slot moves to another
 * node: every call is answered by Redis, and exactly the burst (3) is
 * admitted over all of them (the state moved with the key; a fresh key on
 * the target would have admitted more). */
static void test_moved_live(void) {
    char url[256];
    snprintf(url, sizeof url, "redis+cluster://127.0.0.1:%d", node[2].port);
    sluice_fleet_config_t fc;
    memset(&fc, 0, sizeof fc);
    fc.policy = sluice_rate(3, (int64_t)SEC, 3);
    fc.url = url;
    fc.manual_time = true;
    fc.timeout_ns = 2 * SEC;
    fc.cache_slots = SIZE_MAX;
    sluice_loop_t *loop = NULL;
    CHECK(sluice_loop_start(&loop, NULL) == 0, "sluice_loop_start");
    sluice_fleet_t *f = NULL;
    CHECK(sluice_fleet_new_on_loop(&f, loop, &fc) == 0, "fleet on a loop");
    char name[256];
    size_t len;
    unsigned slot = name_slot("live-key", name, &len);
    int from = owner_of(slot), to = (from + 2) % NODES;
    sluice_key_t k = sluice_key_bytes("live-key", 8);
    char from_id[64], to_id[64];
    node_id(from, from_id, sizeof from_id);
    node_id(to, to_id, sizeof to_id);
    int sent = 0;
    live_calls(f, k, 20, &sent);
    ok_reply(tf_cmd(node[to].port, "CLUSTER SETSLOT %u IMPORTING %s", slot, from_id), "IMPORTING");
    live_calls(f, k, 20, &sent);
    ok_reply(tf_cmd(node[from].port, "CLUSTER SETSLOT %u MIGRATING %s", slot, to_id), "MIGRATING");
    live_calls(f, k, 20, &sent);
    ok_reply(tf_cmd(node[from].port, "MIGRATE 127.0.0.1 %d %s 0 5000 KEYS %b", node[to].port, "", name, len),
             "MIGRATE");
    live_calls(f, k, 20, &sent); /* ASK from the source */
    migrate_rest(slot, from, to);
    for (int i = 0; i < NODES; i++) {
        ok_reply(tf_cmd(node[i].port, "CLUSTER SETSLOT %u NODE %s", slot, to_id), "SETSLOT NODE");
        live_calls(f, k, 10, &sent);
    }
    uint64_t end = tf_mono() + 30 * SEC;
    while (__atomic_load_n(&live_answered, __ATOMIC_RELAXED) < sent) {
        CHECK(tf_mono() < end, "live move: %d of %d answered", live_answered, sent);
        sleep_ms(5);
    }
    CHECK(live_not_redis == 0, "live move: %d answers not Redis's", live_not_redis);
    CHECK(live_admitted == 3, "live move: %d admitted over %d calls, the burst is 3", live_admitted, sent);
    fprintf(stderr, TEST_NAME ": %d calls during a live slot move: all Redis's, %d admitted\n", sent, live_admitted);
    sluice_fleet_free(f); /* from this thread: freed on the loop's */
    CHECK(sluice_loop_free(loop) == 0, "sluice_loop_free");
}

/* ---- one batch per node: keys of many slots in one script run */

/* Two plans (two and three quotas) for the run under plans. */
static sluice_rate_quota_t xq_a[2] = { { "second", 3, 1000000000, 3 }, { "minute", 20, 60000000000, 0 } };
static sluice_rate_quota_t xq_b[3] = { { "second", 5, 1000000000, 0 },
                                       { "minute", 30, 60000000000, 0 },
                                       { "day", 1000, 86400000000000, 0 } };
static sluice_plan_t x_plans[2] = { { "a", xq_a, 2 }, { "b", xq_b, 3 } };

/* 4,000 calls on 400 keys at increasing times, submitted at once: decided in
 * batches of keys of many slots (one per node, each run at most max_batch),
 * and each answer is exactly the core's; with one quota, and under plans
 * (each key's plan fixed: a or b by the key). */
static void test_cross_exact(bool plans) {
    char url[256];
    snprintf(url, sizeof url, "redis+cluster://127.0.0.1:%d", node[1].port);
    sluice_fleet_config_t fc;
    memset(&fc, 0, sizeof fc);
    sluice_plans_t table = { x_plans, 2, 0 };
    fc.policy = plans ? sluice_rate_plans() : sluice_rate(3, (int64_t)SEC, 3);
    if (plans) fc.plans = &table;
    fc.url = url;
    fc.prefix = plans ? "xexactp" : "xexact";
    fc.prefix_len = strlen(fc.prefix);
    fc.manual_time = true;
    fc.timeout_ns = 10 * SEC;
    fc.on_failure = SLUICE_FLEET_FAIL_CLOSED;
    fc.cache_slots = SIZE_MAX; /* every call goes to Redis */
    fc.max_batch = 64;
    sluice_fleet_t *f = NULL;
    CHECK(sluice_fleet_new(&f, base, &fc) == 0, "fleet_new %s", url);
    uint64_t end = tf_mono() + 10 * SEC;
    while (!sluice_fleet_connected(f)) {
        CHECK(tf_mono() < end, "not connected to every primary within 10 s");
        event_base_loop(base, EVLOOP_ONCE | EVLOOP_NONBLOCK);
    }
    sluice_limiter_t *core = NULL;
    sluice_config_t lc;
    memset(&lc, 0, sizeof lc);
    sluice_plans_t copy = table;
    copy.max_quotas = SLUICE_PLAN_QUOTAS_MAX;
    lc.policy = fc.policy;
    if (plans) lc.plans = &copy;
    CHECK(sluice_limiter_new(&core, &lc) == 0, "core limiter");
    enum { KEYS = 400, CALLS = 4000 };
    static tf_box_t box[CALLS];
    static int key_of[CALLS];
    static uint64_t at[CALLS];
    memset(box, 0, sizeof box);
    uint64_t seed = 0x9E3779B97F4A7C15ull, t = 1000 * SEC;
    for (int i = 0; i < CALLS; i++) {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        key_of[i] = (int)((seed >> 33) % KEYS);
        t += (seed >> 20) % (400 * 1000); /* 10 calls per key in 0.8 s: about half dropped */
        at[i] = t;
        sluice_key_t key = sluice_key_u64(70000 + (uint64_t)key_of[i]);
        CHECK((plans ? sluice_fleet_call_plan(f, key, (uint32_t)key_of[i] % 2, 1, at[i], tf_on_result, &box[i])
                     : sluice_fleet_call(f, key, 1, at[i], tf_on_result, &box[i])) == 0,
              "call");
    }
    for (int i = 0; i < CALLS; i++) tf_wait(base, &box[i]);
    int admitted = 0;
    for (int i = 0; i < CALLS; i++) {
        sluice_decision_t want;
        sluice_plan_detail_t det;
        sluice_key_t key = sluice_key_u64(70000 + (uint64_t)key_of[i]);
        CHECK((plans ? sluice_limiter_submit_plan(core, key, 0, 1, (uint32_t)key_of[i] % 2, at[i], &want, &det)
                     : sluice_limiter_submit(core, key, 0, at[i], &want)) == 0,
              "core submit");
        const sluice_fleet_result_t *r = &box[i].res;
        CHECK(box[i].done == 1 && r->status == 0 && r->source == SLUICE_FLEET_SOURCE_REDIS,
              "call %d: answered %d times, status %d source %d cause %d", i, box[i].done, r->status, r->source,
              r->cause);
        CHECK(r->decision.kind == want.kind && r->decision.at == want.at,
              "call %d (key %d, t %llu): Redis kind %d at %llu, core kind %d at %llu", i, key_of[i],
              (unsigned long long)at[i], r->decision.kind, (unsigned long long)r->decision.at, want.kind,
              (unsigned long long)want.at);
        admitted += want.kind == SLUICE_EMITTED;
    }
    sluice_fleet_stats_t st;
    CHECK(sluice_fleet_stats(f, &st) == 0, "stats");
    CHECK(st.batches * 8 <= CALLS, "%llu script runs for %d calls: not batched", (unsigned long long)st.batches, CALLS);
    CHECK(sluice__fleet_elsewhere(f) == 0, "a stable cluster refused %llu batches",
          (unsigned long long)sluice__fleet_elsewhere(f));
    long long fcalls = 0;
    for (int i = 0; i < NODES; i++) fcalls += tf_cmd_calls(node[i].port, "fcall");
    CHECK(fcalls > 0, "no batch ran as FCALL (the library loaded on every primary, keys of many slots in a run)");
    fprintf(stderr, TEST_NAME ": %d calls on %d keys%s in %llu script runs, each answer the core's (%d admitted)\n",
            CALLS, KEYS, plans ? " under plans" : "", (unsigned long long)st.batches, admitted);
    sluice_limiter_free(core);
    sluice_fleet_free(f);
}

/* A slot with five of 160 keys moves, key by key, while rounds of calls at
 * one instant (one call per key each round) stream from this thread to a
 * fleet on a loop thread: every call is answered once, by Redis, and exactly
 * the burst (3) is admitted per key (a decision made twice, or made on the
 * target without the migrated state, would show); the source refused
 * batches of keys of several slots, which were split. */
enum { MV_KEYS = 160, MV_SAME = 5 };
static int mv_answered[MV_KEYS], mv_admitted[MV_KEYS], mv_not_redis, mv_cause;

static void mv_result(void *user, const sluice_fleet_result_t *res) {
    int k = (int)(intptr_t)user;
    if (res->source != SLUICE_FLEET_SOURCE_REDIS) {
        __atomic_fetch_add(&mv_not_redis, 1, __ATOMIC_RELAXED);
        __atomic_store_n(&mv_cause, res->cause, __ATOMIC_RELAXED);
    }
    if (res->decision.kind == SLUICE_EMITTED) __atomic_fetch_add(&mv_admitted[k], 1, __ATOMIC_RELAXED);
    __atomic_fetch_add(&mv_answered[k], 1, __ATOMIC_RELAXED);
}

static void mv_round(sluice_fleet_t *f, char (*keys)[32], int *rounds) {
    for (int k = 0; k < MV_KEYS; k++)
        CHECK(sluice_fleet_call(f, sluice_key_bytes(keys[k], strlen(keys[k])), 1, 5 * SEC, mv_result,
                                (void *)(intptr_t)k) == 0,
              "call");
    (*rounds)++;
    sleep_ms(2);
}

static void test_cross_migrate(void) {
    static char keys[MV_KEYS][32];
    char name[256];
    size_t len;
    /* the first MV_SAME keys share a slot (searched), the others anywhere */
    snprintf(keys[0], sizeof keys[0], "xmv-0");
    unsigned slot = name_slot(keys[0], name, &len);
    int same = 1;
    for (int i = 1; same < MV_SAME; i++) {
        char k[32];
        snprintf(k, sizeof k, "xmv-%d", i);
        if (name_slot(k, name, &len) == slot) memcpy(keys[same++], k, sizeof k);
    }
    for (int k = MV_SAME; k < MV_KEYS; k++) snprintf(keys[k], sizeof keys[k], "xmv-other-%d", k);
    int from = owner_of(slot), to = (from + 1) % NODES;
    char url[256];
    snprintf(url, sizeof url, "redis+cluster://127.0.0.1:%d", node[0].port);
    sluice_fleet_config_t fc;
    memset(&fc, 0, sizeof fc);
    fc.policy = sluice_rate(3, (int64_t)SEC, 3);
    fc.url = url;
    fc.manual_time = true;
    fc.timeout_ns = 5 * SEC;
    fc.cache_slots = SIZE_MAX;
    fc.max_batch = 32;
    sluice_loop_t *loop = NULL;
    CHECK(sluice_loop_start(&loop, NULL) == 0, "sluice_loop_start");
    sluice_fleet_t *f = NULL;
    CHECK(sluice_fleet_new_on_loop(&f, loop, &fc) == 0, "fleet on a loop");
    uint64_t end = tf_mono() + 10 * SEC;
    while (!sluice_fleet_connected(f)) {
        CHECK(tf_mono() < end, "not connected to every primary within 10 s");
        sleep_ms(5);
    }
    char from_id[64], to_id[64];
    node_id(from, from_id, sizeof from_id);
    node_id(to, to_id, sizeof to_id);
    int rounds = 0;
    mv_round(f, keys, &rounds);
    mv_round(f, keys, &rounds);
    ok_reply(tf_cmd(node[to].port, "CLUSTER SETSLOT %u IMPORTING %s", slot, from_id), "IMPORTING");
    mv_round(f, keys, &rounds);
    ok_reply(tf_cmd(node[from].port, "CLUSTER SETSLOT %u MIGRATING %s", slot, to_id), "MIGRATING");
    mv_round(f, keys, &rounds);
    for (int i = 0; i < MV_SAME; i++) { /* one key at a time: the slot's keys on both nodes */
        size_t nl;
        name_slot(keys[i], name, &nl);
        ok_reply(tf_cmd(node[from].port, "MIGRATE 127.0.0.1 %d %b 0 5000", node[to].port, name, nl), "MIGRATE");
        mv_round(f, keys, &rounds);
    }
    migrate_rest(slot, from, to);
    for (int i = 0; i < NODES; i++) { /* the target first, then the source (as Redis advises), then the third */
        ok_reply(tf_cmd(node[(to + NODES - i) % NODES].port, "CLUSTER SETSLOT %u NODE %s", slot, to_id),
                 "SETSLOT NODE");
        mv_round(f, keys, &rounds);
    }
    mv_round(f, keys, &rounds);
    end = tf_mono() + 30 * SEC;
    for (int k = 0; k < MV_KEYS; k++) {
        while (__atomic_load_n(&mv_answered[k], __ATOMIC_RELAXED) < rounds) {
            CHECK(tf_mono() < end, "slot move: key %d: %d of %d answered", k, mv_answered[k], rounds);
            sleep_ms(5);
        }
    }
    sleep_ms(100); /* an answer twice would come by now */
    uint64_t splits = sluice__fleet_elsewhere(f);
    sluice_fleet_free(f); /* from this thread: freed on the loop's */
    CHECK(sluice_loop_free(loop) == 0, "sluice_loop_free");
    CHECK(mv_not_redis == 0, "slot move: %d answers not Redis's (cause %s)", mv_not_redis, sluice_strerror(mv_cause));
    for (int k = 0; k < MV_KEYS; k++) {
        CHECK(mv_answered[k] == rounds, "slot move: key %d answered %d times for %d calls", k, mv_answered[k], rounds);
        CHECK(mv_admitted[k] == 3, "slot move: key %d (%s slot) admitted %d over %d calls, the burst is 3", k,
              k < MV_SAME ? "the moved" : "another", mv_admitted[k], rounds);
    }
    CHECK(owner_of(slot) == to, "the slot is the new node's");
    CHECK(splits > 0, "no request was found on another node during the move: the path was not exercised");
    fprintf(stderr,
            TEST_NAME ": %d rounds on %d keys while slot %u moved: each call answered once, by Redis, burst "
                      "admitted per key; %llu requests resent to their slot's node\n",
            rounds, MV_KEYS, slot, (unsigned long long)splits);
}

/* During a migration (the key already on the target): ASK is followed with
 * ASKING, the state is the migrated one. */
static void test_ask(void) {
    sluice_fleet_t *f = fleet_on(2 * SEC);
    char name[256];
    size_t len;
    unsigned slot = name_slot("ask-key", name, &len);
    int from = owner_of(slot), to = (from + 1) % NODES;
    sluice_key_t k = sluice_key_bytes("ask-key", 7);
    sluice_fleet_result_t r = call1(f, k, 9 * SEC);
    CHECK(r.source == SLUICE_FLEET_SOURCE_REDIS && r.decision.kind == SLUICE_EMITTED, "before the migration");
    migrate_key(slot, from, to, name, len);
    long long asking = tf_cmd_calls(node[to].port, "asking");
    int admitted = 1;
    for (int i = 0; i < 3; i++) {
        r = call1(f, k, 9 * SEC);
        CHECK(r.source == SLUICE_FLEET_SOURCE_REDIS, "during the migration: source %d cause %d", r.source, r.cause);
        admitted += r.decision.kind == SLUICE_EMITTED;
    }
    CHECK(admitted == 3, "migrating key: %d admitted, the burst is 3", admitted);
    CHECK(tf_cmd_calls(node[to].port, "asking") >= asking + 3, "each call asked the target (ASKING)");
    CHECK(owner_of(slot) == from, "the slot is still the source's");
    finish_move(slot, from, to);
    sluice_fleet_free(f);
}

/* A slot no node serves (CLUSTER DELSLOTS on its owner): a call and a
 * cancel get the failure policy with SLUICE_ECLUSTERDOWN; once the slot is
 * served again, Redis decides. */
static void test_clusterdown(void) {
    sluice_fleet_t *f = fleet_on(2 * SEC);
    char name[256];
    size_t len;
    unsigned slot = name_slot("down-key", name, &len);
    int o = owner_of(slot);
    sluice_key_t k = sluice_key_bytes("down-key", 8);
    CHECK(call1(f, k, 15 * SEC).source == SLUICE_FLEET_SOURCE_REDIS, "before");
    ok_reply(tf_cmd(node[o].port, "CLUSTER DELSLOTS %u", slot), "DELSLOTS");
    sluice_fleet_result_t r = call1(f, k, 15 * SEC);
    CHECK(r.source == SLUICE_FLEET_SOURCE_FAILURE && r.cause == SLUICE_ECLUSTERDOWN, "uncovered: source %d cause %d",
          r.source, r.cause);
    tf_box_t b = { 0 };
    CHECK(sluice_fleet_cancel(f, k, 15 * SEC, tf_on_result, &b) == 0, "cancel");
    tf_wait(base, &b);
    CHECK(b.res.status == SLUICE_ECLUSTERDOWN, "uncovered cancel: status %d", b.res.status);
    ok_reply(tf_cmd(node[o].port, "CLUSTER ADDSLOTS %u", slot), "ADDSLOTS");
    uint64_t end = tf_mono() + 30 * SEC;
    for (int i = 0; i < NODES; i++) {
        while (!cluster_ok(node[i].port)) {
            CHECK(tf_mono() < end, "cluster_state not ok again on node %d", i);
            sleep_ms(20);
        }
    }
    r = call1(f, k, 15 * SEC);
    CHECK(r.source == SLUICE_FLEET_SOURCE_REDIS, "served again: source %d cause %d", r.source, r.cause);
    sluice_fleet_free(f);
}

/* The periodic map read (cluster.h): with a period of 200 ms (the test
 * knob) and every primary up, the fleet reads CLUSTER SLOTS about five times
 * a second, and no more often than its period allows. */
static long long slots_reads(void) {
    long long n = 0;
    for (int i = 0; i < NODES; i++) n += tf_cmd_calls(node[i].port, "cluster|slots");
    return n;
}

static void test_periodic_refresh(void) {
    uint64_t was = sluice__cluster_set_refresh_ns(200 * MS);
    sluice_fleet_t *f = fleet_on(2 * SEC);
    sluice__cluster_set_refresh_ns(was);
    uint64_t end = tf_mono() + 10 * SEC;
    while (!sluice_fleet_connected(f)) {
        CHECK(tf_mono() < end, "not connected to every primary within 10 s");
        tf_run_for(base, 10);
    }
    long long before = slots_reads();
    uint64_t t0 = tf_mono();
    tf_run_for(base, 1500);
    long long reads = slots_reads() - before;
    double secs = (double)(tf_mono() - t0) / SEC;
    /* 1.5 s / 200 ms = 7.5 periods: at least 3 on a loaded machine, at most
     * one per period (+1 at each edge) */
    CHECK(reads >= 3 && reads <= (long long)(secs / 0.2) + 2, "periodic map reads: %lld in %.2f s", reads, secs);
    fprintf(stderr, TEST_NAME ": periodic map read every 200 ms: %lld reads in %.2f s\n", reads, secs);
    sluice_fleet_free(f);
}

/* A node killed: calls on its slots get the failure policy within their
 * timeout, calls on the other nodes' slots are still Redis's. */
static void test_node_killed(void) {
    const uint64_t timeout = 200 * MS, slack = 3000 * MS; /* slack: a loaded machine */
    sluice_fleet_t *f = fleet_on(timeout);
    /* one key per node (found by slot), each used once while all are up */
    uint64_t key[NODES] = { 0 };
    int found = 0;
    for (uint64_t u = 1; found < NODES && u < 100000; u++) {
        char digits[24], name[64], prefix[32];
        size_t plen = sluice__fleet_prefix_encode("sluice", 6, prefix);
        size_t dl = (size_t)snprintf(digits, sizeof digits, "%llu", (unsigned long long)u);
        size_t nl = sluice__fleet_key_write(name, prefix, plen, 'u', digits, dl);
        int o = owner_of(sluice__cluster_keyslot(name, nl));
        if (!key[o]) key[o] = u, found++;
    }
    CHECK(found == NODES, "a key for every node");
    for (int i = 0; i < NODES; i++)
        CHECK(call1(f, sluice_key_u64(key[i]), 11 * SEC).source == SLUICE_FLEET_SOURCE_REDIS, "node %d up", i);
    int dead = 2;
    uint64_t worst_dead = 0, worst_live = 0;
    test_redis_signal(&node[dead], SIGKILL);
    for (int round = 0; round < 5; round++) {
        for (int i = 0; i < NODES; i++) {
            uint64_t t0 = tf_mono();
            sluice_fleet_result_t r = call1(f, sluice_key_u64(key[i]), 11 * SEC);
            uint64_t took = tf_mono() - t0;
            if (i == dead) {
                CHECK(r.source == SLUICE_FLEET_SOURCE_FAILURE && r.decision.kind == SLUICE_DROPPED && r.cause != 0,
                      "round %d: the dead node's key: source %d", round, r.source);
                CHECK(took <= timeout + slack, "round %d: answered in %llu ms", round, (unsigned long long)(took / MS));
                if (took > worst_dead) worst_dead = took;
            } else {
                CHECK(r.source == SLUICE_FLEET_SOURCE_REDIS, "round %d: node %d's key: source %d cause %d", round, i,
                      r.source, r.cause);
                if (took > worst_live) worst_live = took;
            }
        }
    }
    fprintf(stderr,
            TEST_NAME ": node killed: its keys answered by the policy in %.1f ms at most, others by Redis in "
                      "%.1f ms at most\n",
            (double)worst_dead / MS, (double)worst_live / MS);
    sluice_fleet_free(f);
}

int main(void) {
    test_slot_known();
    test_map_edge_replies();
    test_redirect_parse();
    start_cluster();
    test_slot_against_server();
    test_map_from_nodes();
    base = event_base_new();
    CHECK(base, "event_base_new");
    test_setup_errors();
    test_vectors();
    test_spread();
    test_moved();
    test_moved_live();
    test_ask();
    test_cross_exact(false);
    test_cross_exact(true);
    test_cross_migrate();
    test_clusterdown();
    test_periodic_refresh();
    test_node_killed();
    event_base_free(base);
    stop_cluster();
    printf(TEST_NAME ": ok\n");
    return 0;
}
