/* test_fleet_cluster_failover.c — the fleet limiter through a replica
 * failover of a real Redis Cluster on loopback: 3 primaries, each with one
 * replica (`redis-cli --cluster create … --cluster-replicas 1`), node
 * timeout 1 s, full coverage not required (so the nodes that stay up keep
 * serving their slots while one primary is failed).
 *
 * Once every replica is in sync (INFO replication: link up, offsets equal),
 * calls stream on keys spread over every slot range while one primary is
 * killed (SIGKILL). Checked: every call is answered within its timeout (+
 * slack); calls on the dead primary's slots are answered by the failure
 * policy until its replica is promoted, and those on the other slots are
 * decided by Redis throughout; after every surviving node names the promoted
 * replica in CLUSTER SLOTS, the fleet decides the dead primary's slots on it
 * within BACK_BOUND (no MOVED can tell it: its calls never reach a node; the
 * periodic map read finds it), and from then on every call there is Redis's;
 * no key admits more than its quota allows, but for the admissions the dead
 * primary made just before it died (the writes asynchronous replication may
 * not have carried over): measured and printed.
 *
 * Label "topology" (seconds of real time): `make test-topology`. */
#define TEST_NAME "test_fleet_cluster_failover"
#include "test_fleet_util.h"

#include <hiredis/hiredis.h>
#include <unistd.h>

#include "cluster-map.h"
#include "cluster-slot.h"
#include "fleet-internal.h"

#define NODES 6
#define SEC 1000000000ull
#define MS 1000000ull
/* the cluster must finish a failover within this (node timeout 1 s, FAIL by
 * the majority, election, promotion; generous for a loaded CI machine) */
#define FAILOVER_BOUND (40 * SEC)
/* every surviving node names the new primary, then the fleet must decide
 * its slots there within this (it reads the map every 500 ms while a
 * primary is missing: generous for a loaded machine) */
#define BACK_BOUND (10 * SEC)
#define CALL_TIMEOUT (300 * MS)
/* an answer may come this late past its timeout on a loaded machine */
#define ANSWER_SLACK (3000 * MS)
/* the dead primary's admissions this long before the kill may be lost by
 * asynchronous replication */
#define LOSS_WINDOW (250 * MS)
#define KEYS 90
#define LIMIT 2 /* calls per second per key, burst 2: each key gets ~5/s, saturated */
#define BURST 2

static test_redis_t node[NODES];
static struct event_base *base;

static void sleep_ms(int ms) {
    struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };
    nanosleep(&ts, NULL);
}

static bool info_has(int port, const char *section, const char *text) {
    redisReply *r = tf_cmd(port, "INFO %s", section);
    bool ok = r && r->type == REDIS_REPLY_STRING && strstr(r->str, text) != NULL;
    if (r) freeReplyObject(r);
    return ok;
}

static long long info_num(int port, const char *section, const char *field) {
    redisReply *r = tf_cmd(port, "INFO %s", section);
    long long v = -1;
    if (r && r->type == REDIS_REPLY_STRING) {
        const char *at = strstr(r->str, field);
        if (at) v = atoll(at + strlen(field));
    }
    if (r) freeReplyObject(r);
    return v;
}

static bool cluster_ok(int port) {
    redisReply *r = tf_cmd(port, "CLUSTER INFO");
    bool ok = r && r->type == REDIS_REPLY_STRING && strstr(r->str, "cluster_state:ok") != NULL;
    if (r) freeReplyObject(r);
    return ok;
}

static void ok_reply(redisReply *r, const char *what) {
    CHECK(r && r->type != REDIS_REPLY_ERROR, "%s: %s", what, r && r->str ? r->str : "no reply");
    freeReplyObject(r);
}

/* The port of node i's primary (ROLE), or 0 when it is a primary itself. */
static int primary_of(int i) {
    redisReply *r = tf_cmd(node[i].port, "ROLE");
    CHECK(r && r->type == REDIS_REPLY_ARRAY && r->elements >= 1, "ROLE of node %d", i);
    int port = 0;
    if (strcmp(r->element[0]->str, "slave") == 0) port = (int)r->element[2]->integer;
    freeReplyObject(r);
    return port;
}

static int index_of(int port) {
    for (int i = 0; i < NODES; i++)
        if (node[i].port == port) return i;
    return -1;
}

/* The slot map as `port` sees it (false when it does not answer). */
static bool map_of(int port, sluice__cluster_map_t *m) {
    redisReply *r = tf_cmd(port, "CLUSTER SLOTS");
    bool ok = r && sluice__cluster_map_parse(r, "127.0.0.1", m) == 0;
    if (r) freeReplyObject(r);
    return ok;
}

/* The port of the primary of `slot` as `port` sees it, or -1. */
static int owner_seen_by(int port, unsigned slot) {
    sluice__cluster_map_t m;
    if (!map_of(port, &m)) return -1;
    int p = m.owner[slot] == SLUICE__CLUSTER_NONE ? -1 : m.nodes[m.owner[slot]].port;
    sluice__cluster_map_free(&m);
    return p;
}

/* Six cluster-mode servers, three primaries with a replica each; waits
 * (bounded) until every node says ok and every replica is in sync. */
static int replica_of[NODES]; /* a primary's replica (index), -1 for a replica */
static void start_cluster(void) {
    if (!test_redis_available() || system("redis-cli --version >/dev/null 2>&1") != 0) {
        fprintf(stderr, TEST_NAME ": SKIPPED: redis-server or redis-cli not found\n");
        exit(77);
    }
    test_redis_opts_t o = { .cluster = true };
    char line[1024];
    int n = snprintf(line, sizeof line, "timeout 60 redis-cli --cluster create");
    for (int i = 0; i < NODES; i++) {
        memset(&node[i], 0, sizeof node[i]);
        CHECK(test_redis_start_opts(&node[i], 0, &o) == 0, "cannot start cluster node %d", i);
        /* fail over within seconds; the nodes that stay up keep serving their
         * slots while one primary is failed; a replica syncs at once */
        ok_reply(tf_cmd(node[i].port, "CONFIG SET cluster-node-timeout 1000"), "cluster-node-timeout");
        ok_reply(tf_cmd(node[i].port, "CONFIG SET cluster-require-full-coverage no"), "full coverage");
        ok_reply(tf_cmd(node[i].port, "CONFIG SET repl-diskless-sync-delay 0"), "diskless sync delay");
        n += snprintf(line + n, sizeof line - (size_t)n, " 127.0.0.1:%d", node[i].port);
    }
    snprintf(line + n, sizeof line - (size_t)n, " --cluster-replicas 1 --cluster-yes >/dev/null");
    CHECK(system(line) == 0, "redis-cli --cluster create failed");
    uint64_t end = tf_mono() + 60 * SEC;
    for (int i = 0; i < NODES; i++) {
        while (!cluster_ok(node[i].port)) {
            CHECK(tf_mono() < end, "cluster_state not ok on node %d within 60 s", i);
            sleep_ms(50);
        }
    }
    /* roles: who replicates whom (redis-cli chooses), and every replica in
     * sync: link up, and its offset the primary's (no writes meanwhile) */
    for (int i = 0; i < NODES; i++) replica_of[i] = -1;
    int primaries = 0;
    for (int i = 0; i < NODES; i++) {
        int p = primary_of(i);
        if (!p) {
            primaries++;
            continue;
        }
        int pi = index_of(p);
        CHECK(pi >= 0 && replica_of[pi] == -1, "node %d replicates an unknown or shared primary %d", i, p);
        replica_of[pi] = i;
    }
    CHECK(primaries == 3, "%d primaries", primaries);
    for (int i = 0; i < NODES; i++) {
        if (replica_of[i] < 0) continue;
        int r = replica_of[i];
        for (;;) {
            long long po = info_num(node[i].port, "replication", "master_repl_offset:");
            long long ro = info_num(node[r].port, "replication", "slave_repl_offset:");
            if (info_has(node[r].port, "replication", "master_link_status:up") && po > 0 && po == ro) break;
            CHECK(tf_mono() < end, "replica %d of %d not in sync within 60 s (offsets %lld, %lld)", r, i, po, ro);
            sleep_ms(50);
        }
    }
    /* every node knows every slot's primary (the map is the same everywhere) */
    for (int i = 0; i < NODES; i++) {
        for (;;) {
            sluice__cluster_map_t m;
            bool full = map_of(node[i].port, &m);
            for (size_t s = 0; full && s < SLUICE__CLUSTER_SLOTS; s++) full = m.owner[s] != SLUICE__CLUSTER_NONE;
            if (full) full = m.n_nodes == 3;
            sluice__cluster_map_free(&m);
            if (full) break;
            CHECK(tf_mono() < end, "node %d does not name 3 primaries for every slot within 60 s", i);
            sleep_ms(50);
        }
    }
}

/* ---- the stream of calls */

#define MAX_CALLS 60000

static struct {
    tf_box_t box[MAX_CALLS];
    uint64_t sent_at[MAX_CALLS];
    int key[MAX_CALLS];
    int n;
} st;

static int key_owner[KEYS]; /* the index (node[]) of the key's primary before the kill */

static void issue(sluice_fleet_t *f, int k) {
    CHECK(st.n < MAX_CALLS, "too many calls");
    memset(&st.box[st.n], 0, sizeof st.box[0]);
    st.sent_at[st.n] = tf_mono();
    st.key[st.n] = k;
    CHECK(sluice_fleet_call(f, sluice_key_u64(1000 + (uint64_t)k), 1, 0, tf_on_result, &st.box[st.n]) == 0, "call");
    st.n++;
}

/* Streams calls (one every ~2 ms, keys in turn) for `ns`. */
static void stream_for(sluice_fleet_t *f, uint64_t ns) {
    uint64_t end = tf_mono() + ns;
    while (tf_mono() < end) {
        issue(f, st.n % KEYS);
        uint64_t next = tf_mono() + 2 * MS;
        while (tf_mono() < next) {
            event_base_loop(base, EVLOOP_ONCE | EVLOOP_NONBLOCK);
            sleep_ms(1);
        }
    }
}

/* Whether a call on the dead primary's slots sent at or after `i0` was
 * decided by Redis. @return its index, or -1. */
static int redis_on_dead(int dead, int i0) {
    for (int i = i0; i < st.n; i++)
        if (key_owner[st.key[i]] == dead && st.box[i].done && st.box[i].res.source == SLUICE_FLEET_SOURCE_REDIS)
            return i;
    return -1;
}

static void test_failover(void) {
    /* the keys' primaries, from the map of a node (the same everywhere) */
    char prefix[32];
    size_t plen = sluice__fleet_prefix_encode("sluice", 6, prefix);
    sluice__cluster_map_t m;
    CHECK(map_of(node[0].port, &m), "CLUSTER SLOTS");
    int per_node[NODES] = { 0 };
    for (int k = 0; k < KEYS; k++) {
        char digits[24], name[64];
        size_t dl = (size_t)snprintf(digits, sizeof digits, "%llu", (unsigned long long)(1000 + k));
        size_t nl = sluice__fleet_key_write(name, prefix, plen, 'u', digits, dl);
        key_owner[k] = index_of(m.nodes[m.owner[sluice__cluster_keyslot(name, nl)]].port);
        CHECK(key_owner[k] >= 0, "key %d's primary", k);
        per_node[key_owner[k]]++;
    }
    sluice__cluster_map_free(&m);
    int dead = -1;
    for (int i = 0; i < NODES; i++) {
        if (replica_of[i] < 0) continue;
        CHECK(per_node[i] >= 10, "primary %d has %d of the keys", i, per_node[i]);
        if (dead < 0) dead = i;
    }
    int heir = replica_of[dead];
    int survivor = -1; /* a primary that stays up: asked for the map */
    for (int i = 0; i < NODES; i++)
        if (replica_of[i] >= 0 && i != dead) survivor = i;

    char url[256];
    snprintf(url, sizeof url, "redis+cluster://127.0.0.1:%d,127.0.0.1:%d", node[survivor].port, node[dead].port);
    sluice_fleet_config_t fc;
    memset(&fc, 0, sizeof fc);
    fc.policy = sluice_rate(LIMIT, (int64_t)SEC, BURST);
    fc.url = url;
    fc.timeout_ns = CALL_TIMEOUT;
    fc.on_failure = SLUICE_FLEET_FAIL_CLOSED;
    fc.cache_slots = SIZE_MAX; /* every call goes to Redis */
    sluice_fleet_t *f = NULL;
    CHECK(sluice_fleet_new(&f, base, &fc) == 0, "fleet_new %s", url);
    uint64_t end = tf_mono() + 10 * SEC;
    while (!sluice_fleet_connected(f)) {
        CHECK(tf_mono() < end, "the fleet is not connected to every primary within 10 s");
        tf_run_for(base, 10);
    }

    memset(&st, 0, sizeof st);
    stream_for(f, 1 * SEC); /* steady: Redis decides everything */
    int i_kill = st.n;
    uint64_t t_kill = tf_mono();
    test_redis_signal(&node[dead], SIGKILL);
    /* the stream goes on until every surviving node names the heir as the
     * primary of the dead one's slots */
    unsigned probe = 0; /* a slot of the dead primary */
    for (int k = 0; k < KEYS; k++) {
        if (key_owner[k] != dead) continue;
        char digits[24], name[64];
        size_t dl = (size_t)snprintf(digits, sizeof digits, "%llu", (unsigned long long)(1000 + k));
        probe = sluice__cluster_keyslot(name, sluice__fleet_key_write(name, prefix, plen, 'u', digits, dl));
        break;
    }
    uint64_t t_first = 0, t_all = 0;
    end = tf_mono() + FAILOVER_BOUND;
    while (!t_all) {
        CHECK(tf_mono() < end, "the cluster promoted no replica within %llu s",
              (unsigned long long)(FAILOVER_BOUND / SEC));
        stream_for(f, 50 * MS);
        int named = 0, asked = 0;
        for (int i = 0; i < NODES; i++) {
            if (i == dead) continue;
            asked++;
            named += owner_seen_by(node[i].port, probe) == node[heir].port;
        }
        if (named && !t_first) t_first = tf_mono();
        if (named == asked) t_all = tf_mono();
    }
    int i_all = st.n;
    /* the fleet finds the heir: a call on its slots decided by Redis */
    int i_back = -1;
    end = tf_mono() + BACK_BOUND;
    while ((i_back = redis_on_dead(dead, i_all)) < 0) {
        CHECK(tf_mono() < end, "the fleet did not decide the dead primary's slots on its heir within %llu s",
              (unsigned long long)(BACK_BOUND / SEC));
        stream_for(f, 10 * MS);
    }
    uint64_t t_back = st.box[i_back].answered_at;
    stream_for(f, 1 * SEC); /* after: Redis decides everything again */
    for (int i = 0; i < st.n; i++) tf_wait(base, &st.box[i]);

    /* every answer: once, in time; the failure policy only on the dead
     * primary's slots, and only between the kill and the heir */
    uint64_t worst = 0, fail_first = 0, fail_last = 0;
    int failures = 0, on_dead = 0;
    for (int i = 0; i < st.n; i++) {
        const tf_box_t *b = &st.box[i];
        CHECK(b->done == 1, "call %d answered %d times", i, b->done);
        uint64_t lat = b->answered_at - st.sent_at[i];
        if (lat > worst) worst = lat;
        bool dead_slot = key_owner[st.key[i]] == dead;
        on_dead += dead_slot;
        /* a call on the dead primary's slots answered before the kill, or
         * sent after the fleet found the heir, is Redis's too */
        if (!dead_slot || b->answered_at < t_kill || i > i_back) {
            CHECK(b->res.source == SLUICE_FLEET_SOURCE_REDIS,
                  "call %d (key %d, %s, %.0f ms after the kill): source %d cause %d", i, st.key[i],
                  dead_slot ? "the dead primary's slots" : "a live primary's slots",
                  (double)((int64_t)(st.sent_at[i] - t_kill)) / MS, b->res.source, b->res.cause);
        } else if (b->res.source == SLUICE_FLEET_SOURCE_FAILURE) {
            CHECK(b->res.decision.kind == SLUICE_DROPPED && b->res.cause != 0, "call %d: fail closed", i);
            failures++;
            if (!fail_first) fail_first = st.sent_at[i];
            fail_last = b->answered_at;
        }
    }
    CHECK(worst <= CALL_TIMEOUT + ANSWER_SLACK, "an answer took %llu ms", (unsigned long long)(worst / MS));
    CHECK(failures > 0, "the failure policy answered the dead primary's slots during the outage");

    /* over-admission per key: GCRA allows burst + rate * span (+1 for the
     * edges) over the span of its admissions (Redis's clock) */
    int over_dead = 0, over_live = 0, window = 0, admitted = 0;
    for (int k = 0; k < KEYS; k++) {
        uint64_t first = 0, last = 0;
        int adm = 0;
        for (int i = 0; i < st.n; i++) {
            const sluice_fleet_result_t *r = &st.box[i].res;
            if (st.key[i] != k || r->source != SLUICE_FLEET_SOURCE_REDIS || r->decision.kind != SLUICE_EMITTED)
                continue;
            adm++;
            if (!first) first = r->now;
            last = r->now;
            if (key_owner[k] == dead && i < i_kill && st.box[i].answered_at + LOSS_WINDOW >= t_kill) window++;
        }
        admitted += adm;
        int allowed = BURST + (int)((last - first) * LIMIT / SEC) + 1;
        int over = adm > allowed ? adm - allowed : 0;
        if (key_owner[k] == dead)
            over_dead += over;
        else
            over_live += over;
    }
    printf("  %d calls on %d keys (%d on the dead primary's slots), %d admitted; the kill: %d answered by the "
           "failure policy (sent from %.0f ms after it, answered until %.0f ms after it); a node named the heir after "
           "%llu ms, every survivor "
           "after %llu ms; the fleet decided on the heir %llu ms later; worst answer %.1f ms; over-admission: "
           "%d on the dead primary's keys (bound: its %d admissions in the last %llu ms before the kill), "
           "%d elsewhere\n",
           st.n, KEYS, on_dead, admitted, failures, (double)(int64_t)(fail_first - t_kill) / MS,
           (double)(fail_last - t_kill) / MS, (unsigned long long)((t_first - t_kill) / MS),
           (unsigned long long)((t_all - t_kill) / MS),
           (unsigned long long)(t_back > t_all ? (t_back - t_all) / MS : 0), (double)worst / MS, over_dead, window,
           (unsigned long long)(LOSS_WINDOW / MS), over_live);
    CHECK(over_live == 0, "over-admission on the live primaries' keys: %d", over_live);
    CHECK(over_dead <= window, "over-admission %d beyond the admissions replication may have lost (%d)", over_dead,
          window);
    CHECK(sluice_fleet_connected(f), "connected to every primary after the failover");
    sluice_fleet_free(f);
}

int main(void) {
    signal(SIGPIPE, SIG_IGN);
    start_cluster();
    base = event_base_new();
    CHECK(base, "event_base_new");
    test_failover();
    event_base_free(base);
    for (int i = 0; i < NODES; i++) test_redis_stop(&node[i]);
    printf(TEST_NAME ": ok\n");
    return 0;
}
