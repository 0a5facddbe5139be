/*
 * test_strong_key.c — the SipHash-1-3 fallback is keyed apart from the fast
 * hash.
 *
 * The key index hashes with a fast seeded hash and switches to SipHash-1-3
 * when a probe grows long (table-internal.h). The two keys are drawn apart,
 * so whoever learnt the fast hash's seed has nothing of SipHash's key:
 *
 *  1. a limiter with a random seed: its table's SipHash key is neither its
 *     seed nor another limiter's key; with `fixed_seed` it is the seed
 *     (repeatable test runs);
 *  2. after the switch, under that key, every key is found again, exact,
 *     and sluice_limiter_check() passes (10,000 integer and byte keys);
 *  3. a loop limiter: its shards share one fast seed (a key's shard and its
 *     index home agree), and each shard's SipHash key is its own, unlike
 *     the seed and unlike every other shard's; with `fixed_seed`, every
 *     shard's key is the seed;
 *  4. sluice__limiter_redraw_strong_key() refuses a limiter holding a key,
 *     or one whose table has switched, and leaves the key as it was.
 */
#define TEST_NAME "test_strong_key"
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "sluice.h"
#include "sluice_loop.h"
#include "support/check.h"

#include "core-internal.h"
#include "limiter-internal.h"
#include "../Sources/CSluiceLoop/loop-internal.h"

#define SEC UINT64_C(1000000000)

static void on_event(void *user, const sluice_event_t *ev) {
    (void)user;
    (void)ev;
}

static sluice_config_t config(bool fixed) {
    sluice_config_t c;
    memset(&c, 0, sizeof c);
    c.policy = sluice_debounce(SEC, false, true, -1);
    c.on_event = on_event;
    if (fixed) {
        c.fixed_seed = true;
        c.seed[0] = UINT64_C(0x0123456789abcdef);
        c.seed[1] = UINT64_C(0xfedcba9876543210);
    }
    return c;
}

static bool same(const uint64_t a[2], const uint64_t b[2]) { return a[0] == b[0] && a[1] == b[1]; }

static sluice_limiter_t *make(bool fixed) {
    sluice_config_t c = config(fixed);
    sluice_limiter_t *l = NULL;
    CHECK(sluice_limiter_new(&l, &c) == 0, "sluice_limiter_new");
    return l;
}

static void keys_apart(void) {
    sluice_limiter_t *a = make(false), *b = make(false);
    CHECK(!same(a->table.strong_seed, a->table.seed), "a random limiter's SipHash key is its fast seed");
    CHECK(!same(a->table.strong_seed, b->table.strong_seed), "two limiters drew the same SipHash key");
    CHECK(!same(a->table.seed, b->table.seed), "two limiters drew the same seed");
    sluice_limiter_free(a);
    sluice_limiter_free(b);

    sluice_limiter_t *f = make(true);
    CHECK(same(f->table.strong_seed, f->table.seed), "a fixed seed is not also the SipHash key");
    sluice_limiter_free(f);
}

static void switched_table_finds_every_key(void) {
    sluice_limiter_t *l = make(false);
    sluice__table_use_strong_hash(&l->table);
    CHECK(l->table.strong, "the table did not switch");
    enum { N = 10000 };
    char buf[32];
    sluice_decision_t d;
    for (uint64_t i = 0; i < N; i++) {
        CHECK(sluice_limiter_submit(l, sluice_key_u64(i), i, SEC, &d) == 0, "submit u64 %" PRIu64, i);
        int n = snprintf(buf, sizeof buf, "key-%" PRIu64, i);
        CHECK(sluice_limiter_submit(l, sluice_key_bytes(buf, (size_t)n), i, SEC, &d) == 0, "submit bytes %" PRIu64, i);
    }
    CHECK(sluice_limiter_check(l) == 0, "sluice_limiter_check after the switch");
    sluice_stats_t st;
    CHECK(sluice_limiter_stats(l, &st) == 0, "stats");
    CHECK(st.live_keys == 2 * N, "live keys %" PRIu64 ", expected %d", st.live_keys, 2 * N);
    /* each key is found again: a second call on it supersedes its value
     * instead of adding a key */
    for (uint64_t i = 0; i < N; i++) {
        CHECK(sluice_limiter_pending(l, sluice_key_u64(i), SEC) == 1, "u64 key %" PRIu64 " not found", i);
        int n = snprintf(buf, sizeof buf, "key-%" PRIu64, i);
        CHECK(sluice_limiter_pending(l, sluice_key_bytes(buf, (size_t)n), SEC) == 1, "byte key %" PRIu64 " not found",
              i);
        CHECK(sluice_limiter_submit(l, sluice_key_u64(i), N + i, SEC + 1, &d) == 0, "submit again");
    }
    CHECK(sluice_limiter_stats(l, &st) == 0 && st.live_keys == 2 * N, "a key was added twice");
    CHECK(sluice_limiter_check(l) == 0, "sluice_limiter_check at the end");
    sluice_limiter_free(l);
}

static void shards_keyed_apart(void) {
    sluice_loop_t *loop = NULL;
    CHECK(sluice_loop_start(&loop, NULL) == 0, "sluice_loop_start");
    for (int fixed = 0; fixed <= 1; fixed++) {
        sluice_config_t c = config(fixed != 0);
        sluice_mt_t *m = NULL;
        CHECK(sluice_mt_new(&m, loop, &c, 8) == 0, "sluice_mt_new");
        CHECK(m->nshards == 8, "%u shards", m->nshards);
        for (unsigned i = 0; i < m->nshards; i++) {
            const struct sluice__table *t = &sluice__shard_at(m, i)->core->table;
            CHECK(same(t->seed, m->seed), "shard %u hashes with another seed", i);
            if (fixed) {
                CHECK(same(t->strong_seed, m->seed), "fixed seed: shard %u's SipHash key is not the seed", i);
                continue;
            }
            CHECK(!same(t->strong_seed, m->seed), "shard %u's SipHash key is the shared seed", i);
            for (unsigned j = 0; j < i; j++)
                CHECK(!same(t->strong_seed, sluice__shard_at(m, j)->core->table.strong_seed),
                      "shards %u and %u share a SipHash key", j, i);
        }
        /* calls still work on every shard */
        for (uint64_t k = 0; k < 256; k++) {
            sluice_decision_t d;
            CHECK(sluice_mt_submit(m, sluice_key_u64(k), k, &d) == 0, "sluice_mt_submit");
        }
        CHECK(sluice_mt_close(m, SLUICE_CLOSE_DISCARD) == 0, "close");
        sluice_mt_free(m);
    }
    sluice_loop_free(loop);
}

static void redraw_refused_once_used(void) {
    sluice_limiter_t *l = make(false);
    uint64_t before[2] = { l->table.strong_seed[0], l->table.strong_seed[1] };
    CHECK(sluice__limiter_redraw_strong_key(l) == 0, "redraw on an empty limiter");
    CHECK(!same(before, l->table.strong_seed), "the redraw kept the key");
    sluice_decision_t d;
    CHECK(sluice_limiter_submit(l, sluice_key_u64(7), 1, SEC, &d) == 0, "submit");
    uint64_t kept[2] = { l->table.strong_seed[0], l->table.strong_seed[1] };
    CHECK(sluice__limiter_redraw_strong_key(l) == SLUICE_EINVAL, "redraw with a live key");
    CHECK(same(kept, l->table.strong_seed), "a refused redraw changed the key");
    CHECK(sluice_limiter_pending(l, sluice_key_u64(7), SEC) == 1, "the key was lost");
    sluice_limiter_free(l);

    sluice_limiter_t *s = make(false);
    sluice__table_use_strong_hash(&s->table);
    CHECK(sluice__limiter_redraw_strong_key(s) == SLUICE_EINVAL, "redraw after the switch");
    sluice_limiter_free(s);
}

int main(void) {
    keys_apart();
    switched_table_finds_every_key();
    shards_keyed_apart();
    redraw_refused_once_used();
    printf(TEST_NAME ": ok\n");
    return 0;
}
