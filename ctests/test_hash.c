/*
 * test_hash.c — the fast keyed hash and the table's switch to SipHash
 * (issue 11, item 5).
 *
 * The key index hashes keys with a fast seeded hash (hash-internal.h) and a
 * table switches for good to SipHash-1-3 when a key lands
 * SLUICE__STRONG_PROBE slots or more past its home. This test attacks that
 * design:
 *
 *  1. the fast hash itself: the seed changes every output (two seeds, two
 *     random-seeded limiters); no full 64-bit collision inside key families
 *     built to break weak hashes (sequential and shifted integers, zero
 *     keys of every length 0..1024, keys one bit apart, 16-byte keys with
 *     their words swapped, keys that differ only by trailing zero bytes);
 *     avalanche (each input bit flips each output bit with probability
 *     0.5 ± 0.1; the home bits too); home buckets of sequential keys and IP
 *     strings evenly spread;
 *  2. an attacker who knows the seed: keys crafted to share a home bucket
 *     under seed A make the table switch exactly at the key that lands
 *     SLUICE__STRONG_PROBE past its home; afterwards probes are short, the
 *     limiter checks clean, every key is exact. The same keys under another
 *     seed or a random one stay spread and do not switch (no seed, no
 *     attack);
 *  3. a broken fast hash: keys handed to the core with a constant hash (what
 *     a fast hash that collides on every key would give) through the
 *     limiter's and the loop layer's prepared-key entry points: the table
 *     switches, stays exact, probes stay short, the key cap holds
 *     (SLUICE_EFULL past it, full_refusals counted), the entries expire and
 *     the slab compacts and the index shrinks with SipHash, memory is
 *     returned (ASan: no leak, no bad access);
 *     And a lookup that misses after scanning SLUICE__STRONG_PROBE slots
 *     (a run of keys each near its own home, which no insert flags)
 *     switches too;
 *  4. the switch is invisible: a limiter switched at the start and one
 *     switched halfway agree with a limiter that never switches, call by
 *     call and event by event, on a long random run of submits (single and
 *     batched), flushes, cancels, pending checks and advances.
 *
 * Env: SLUICE_HASH_OPS (the differential run's length, default 200000;
 * 40000 under a sanitizer).
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core-internal.h"
#include "limiter-internal.h" /* the fast hash, the table's state, forged prepared keys */
#include "ref/ref_model.h"
#include "sluice.h"

#define TEST_NAME "test_hash"
#include "support/check.h"

#define SEC UINT64_C(1000000000)

static uint64_t g_rng = UINT64_C(0x9E3779B97F4A7C15);
static uint64_t rnd(void) {
    uint64_t z = (g_rng += UINT64_C(0x9E3779B97F4A7C15));
    z = (z ^ (z >> 30)) * UINT64_C(0xBF58476D1CE4E5B9);
    z = (z ^ (z >> 27)) * UINT64_C(0x94D049BB133111EB);
    return z ^ (z >> 31);
}

static const uint64_t SEED_A[2] = { UINT64_C(0x0123456789ABCDEF), UINT64_C(0x0F1E2D3C4B5A6978) };
static const uint64_t SEED_B[2] = { UINT64_C(0x0123456789ABCDEE), UINT64_C(0x0F1E2D3C4B5A6978) };

static uint64_t hash_of(const uint64_t seed[2], sluice_key_t key) {
    struct sluice__keyref k;
    CHECK(sluice__key_prepare_seeded(seed, key, &k) == 0, "prepare");
    return k.hash;
}

static int cmp_u64(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* Sorts n hashes and returns how many equal their predecessor. */
static size_t dups(uint64_t *h, size_t n) {
    qsort(h, n, sizeof *h, cmp_u64);
    size_t d = 0;
    for (size_t i = 1; i < n; i++) d += h[i] == h[i - 1];
    return d;
}

/* ------------------------------------------------------------------ 1. the fast hash */

static void family(const char *name, uint64_t *h, size_t n) {
    size_t d = dups(h, n);
    CHECK(d == 0, "%s: %zu full 64-bit collisions among %zu keys", name, d, n);
}

static void no_collisions(void) {
    size_t n = SANITIZED ? 50000 : 400000;
    uint64_t *h = malloc((n > 70000 ? n : 70000) * sizeof *h); /* the largest family: 65,792 keys */
    CHECK(h, "malloc");
    for (size_t i = 0; i < n; i++) h[i] = hash_of(SEED_A, sluice_key_u64(i));
    family("u64 sequential", h, n);
    for (size_t i = 0; i < n; i++) h[i] = hash_of(SEED_A, sluice_key_u64((uint64_t)i << 32));
    family("u64 multiples of 2^32", h, n);
    for (size_t i = 0; i < n; i++) h[i] = hash_of(SEED_A, sluice_key_u64(((uint64_t)i << 48) | (i >> 16)));
    family("u64 with the top and bottom 16 bits varying", h, n);
    for (size_t i = 0; i < n; i++) {
        char s[32];
        int len = snprintf(s, sizeof s, "user-%zu", i);
        h[i] = hash_of(SEED_A, sluice_key_bytes(s, (size_t)len));
    }
    family("\"user-N\" strings", h, n);
    for (size_t i = 0; i < n; i++) {
        char s[32];
        int len = snprintf(s, sizeof s, "10.%zu.%zu.%zu", (i >> 16) & 255, (i >> 8) & 255, i & 255);
        h[i] = hash_of(SEED_A, sluice_key_bytes(s, (size_t)len));
    }
    family("IPv4 strings", h, n);
    /* zero bytes of every length, and keys that differ only by trailing zeros */
    static unsigned char zeros[SLUICE_KEY_MAX], big[SLUICE_KEY_MAX];
    size_t m = 0;
    for (size_t len = 0; len <= SLUICE_KEY_MAX; len++) h[m++] = hash_of(SEED_A, sluice_key_bytes(zeros, len));
    family("zero keys of length 0..1024", h, m);
    m = 0;
    memset(big, 0, sizeof big);
    big[0] = 'k';
    for (size_t len = 1; len <= SLUICE_KEY_MAX; len++) h[m++] = hash_of(SEED_A, sluice_key_bytes(big, len));
    family("\"k\" followed by 0..1023 zero bytes", h, m);
    m = 0;
    for (size_t v = 0; v < 65536 + 256; v++) {
        unsigned char b[2] = { (unsigned char)v, (unsigned char)(v >> 8) };
        h[m++] = hash_of(SEED_A, sluice_key_bytes(b, v < 65536 ? 2 : 1));
    }
    family("every 1- and 2-byte key", h, m);
    /* every single-bit flip of random keys of several lengths */
    static const size_t lens[] = { 1, 3, 4, 7, 8, 9, 15, 16, 17, 31, 32, 33, 64, 100, 1024 };
    for (size_t li = 0; li < sizeof lens / sizeof lens[0]; li++) {
        size_t len = lens[li];
        for (size_t i = 0; i < len; i++) big[i] = (unsigned char)rnd();
        m = 0;
        h[m++] = hash_of(SEED_A, sluice_key_bytes(big, len));
        for (size_t bit = 0; bit < len * 8; bit++) {
            big[bit / 8] ^= (unsigned char)(1u << (bit % 8));
            h[m++] = hash_of(SEED_A, sluice_key_bytes(big, len));
            big[bit / 8] ^= (unsigned char)(1u << (bit % 8));
        }
        char name[64];
        snprintf(name, sizeof name, "single-bit flips of a %zu-byte key", len);
        family(name, h, m);
    }
    /* 16-byte keys (a, b) and (b, a): the product is commutative, the hash must not be */
    m = 0;
    for (size_t i = 0; i < n / 2; i++) {
        uint64_t w[2] = { rnd(), rnd() }, s[2] = { w[1], w[0] };
        h[m++] = hash_of(SEED_A, sluice_key_bytes(w, 16));
        h[m++] = hash_of(SEED_A, sluice_key_bytes(s, 16));
    }
    family("16-byte keys with swapped words", h, m);
    /* an integer and its 8 bytes */
    for (uint64_t i = 0; i < 1000; i++) {
        unsigned char b[8];
        for (int j = 0; j < 8; j++) b[j] = (unsigned char)(i >> (8 * j));
        CHECK(hash_of(SEED_A, sluice_key_u64(i)) != hash_of(SEED_A, sluice_key_bytes(b, 8)),
              "u64 %" PRIu64 " hashes like its bytes", i);
    }
    free(h);
    printf("  no full collisions: sequential / shifted integers, user-N, IPv4, zero keys 0..1024,"
           " trailing zeros, every 1-2 byte key, single-bit flips (1..1024 bytes), swapped words, u64 vs bytes\n");
}

/* Each input bit must flip each output bit about half the time. */
static void avalanche_one(const char *name, size_t len, size_t samples) {
    static uint32_t flips[64 * 8][64];
    size_t bits = len ? len * 8 : 64;
    CHECK(bits <= 64 * 8, "avalanche length");
    memset(flips, 0, sizeof flips);
    unsigned char key[64];
    for (size_t s = 0; s < samples; s++) {
        uint64_t h0, x = rnd();
        for (size_t i = 0; i < len; i++) key[i] = (unsigned char)rnd();
        h0 = len ? hash_of(SEED_A, sluice_key_bytes(key, len)) : hash_of(SEED_A, sluice_key_u64(x));
        for (size_t bit = 0; bit < bits; bit++) {
            uint64_t h1;
            if (len) {
                key[bit / 8] ^= (unsigned char)(1u << (bit % 8));
                h1 = hash_of(SEED_A, sluice_key_bytes(key, len));
                key[bit / 8] ^= (unsigned char)(1u << (bit % 8));
            } else {
                h1 = hash_of(SEED_A, sluice_key_u64(x ^ ((uint64_t)1 << bit)));
            }
            uint64_t d = h0 ^ h1;
            for (int o = 0; o < 64; o++) flips[bit][o] += (uint32_t)((d >> o) & 1);
        }
    }
    double worst = 0.5;
    for (size_t bit = 0; bit < bits; bit++)
        for (int o = 0; o < 64; o++) {
            double p = (double)flips[bit][o] / (double)samples;
            if (p < 0.4 || p > 0.6)
                die("avalanche %s: input bit %zu flips output bit %d with probability %.3f", name, bit, o, p);
            if (p < 0.5 ? 1 - p > worst : p > worst) worst = p < 0.5 ? 1 - p : p;
        }
    printf("  avalanche %-14s %4zu input bits x 64 output bits: every flip rate in [%.3f, %.3f]\n", name, bits,
           1 - worst, worst);
}

static void avalanche(void) {
    size_t samples = SANITIZED ? 800 : 3000;
    avalanche_one("u64", 0, samples);
    /* (1-byte keys: only 128 pairs per input bit, too few for this bound;
     * all 256 are distinct, no_collisions()) */
    static const size_t lens[] = { 2, 3, 4, 5, 7, 8, 9, 12, 15, 16, 17, 24, 32, 33, 48, 64 };
    for (size_t i = 0; i < sizeof lens / sizeof lens[0]; i++) {
        char name[32];
        snprintf(name, sizeof name, "%zu bytes", lens[i]);
        avalanche_one(name, lens[i], samples);
    }
}

/* Home buckets (top 10 bits) of 64k structured keys: about 64 each. */
static void spread(void) {
    uint32_t bu[1024], bs[1024];
    memset(bu, 0, sizeof bu);
    memset(bs, 0, sizeof bs);
    for (uint64_t i = 0; i < 65536; i++) {
        char s[32];
        int len = snprintf(s, sizeof s, "192.168.%u.%u", (unsigned)(i >> 8), (unsigned)(i & 255));
        bu[hash_of(SEED_A, sluice_key_u64(i)) >> 54]++;
        bs[hash_of(SEED_A, sluice_key_bytes(s, (size_t)len)) >> 54]++;
    }
    uint32_t lo = UINT32_MAX, hi = 0;
    for (int b = 0; b < 1024; b++) {
        lo = bu[b] < lo ? bu[b] : lo;
        lo = bs[b] < lo ? bs[b] : lo;
        hi = bu[b] > hi ? bu[b] : hi;
        hi = bs[b] > hi ? bs[b] : hi;
    }
    /* Poisson(64): below 30 or above 110 has probability < 1e-7 per bucket */
    CHECK(lo >= 30 && hi <= 110, "home buckets of sequential keys: %u..%u (expected ~64)", lo, hi);
    printf("  home buckets (1024) of 65,536 sequential integers and IPv4 strings: %u..%u keys each\n", lo, hi);
}

static void on_nothing(void *user, const sluice_event_t *e) {
    (void)user;
    (void)e;
}

static void seed_changes_outputs(void) {
    size_t same = 0, same_tag = 0, n = 20000;
    for (uint64_t i = 0; i < n; i++) {
        char s[40];
        int len = snprintf(s, sizeof s, "%.*s%" PRIu64, (int)(i % 24), "abcdefghijklmnopqrstuvwx", i);
        uint64_t a = hash_of(SEED_A, sluice_key_bytes(s, (size_t)len)),
                 b = hash_of(SEED_B, sluice_key_bytes(s, (size_t)len));
        uint64_t ua = hash_of(SEED_A, sluice_key_u64(i)), ub = hash_of(SEED_B, sluice_key_u64(i));
        same += (a == b) + (ua == ub);
        same_tag += ((a >> 32) == (b >> 32)) + ((ua >> 32) == (ub >> 32));
        CHECK(a == hash_of(SEED_A, sluice_key_bytes(s, (size_t)len)), "the fast hash is not deterministic");
    }
    CHECK(same == 0 && same_tag <= 2, "seeds one bit apart: %zu equal hashes, %zu equal tags of %zu", same, same_tag,
          2 * n);
    /* two limiters with random seeds hash the same key differently */
    sluice_config_t c;
    memset(&c, 0, sizeof c);
    c.policy = sluice_throttle((int64_t)SEC, true, true, SLUICE_PICK_LATEST);
    c.on_event = on_nothing;
    sluice_limiter_t *l1, *l2;
    CHECK(sluice_limiter_new(&l1, &c) == 0 && sluice_limiter_new(&l2, &c) == 0, "limiter_new");
    size_t eq = 0;
    for (uint64_t i = 0; i < 1000; i++) {
        struct sluice__keyref k1, k2;
        CHECK(sluice__limiter_key(l1, sluice_key_u64(i), &k1) == 0 &&
                  sluice__limiter_key(l2, sluice_key_u64(i), &k2) == 0,
              "prepare");
        eq += k1.hash == k2.hash;
    }
    CHECK(eq == 0, "two random-seeded limiters give %zu equal hashes of 1000 keys", eq);
    sluice_limiter_free(l1);
    sluice_limiter_free(l2);
    printf("  seeds: one bit of seed changes all %zu hashes (%zu equal tags); two random-seeded limiters differ\n",
           2 * n, same_tag);
}

/* ------------------------------------------------------------------ limiters */

static int64_t g_expect_idx = -1;
static uint64_t g_expect_tok;
static sluice_key_t g_expect_key;
static uint64_t g_drops;

static void on_drop(void *user, const sluice_event_t *e) {
    (void)user;
    if (g_expect_idx < 0) return; /* emissions at expiry */
    CHECK(e->kind == SLUICE_EVENT_DROP && e->token == g_expect_tok,
          "event kind %d token %" PRIu64 ", expected DROP %" PRIu64, e->kind, e->token, g_expect_tok);
    CHECK(ref_key_equal(e->key, g_expect_key), "key #%" PRId64 ": the event carries other key bytes", g_expect_idx);
    g_drops++;
    g_expect_idx = -1;
}

static sluice_limiter_t *throttle(const uint64_t *seed, uint64_t max_keys) {
    sluice_config_t c;
    memset(&c, 0, sizeof c);
    c.policy = sluice_throttle((int64_t)SEC, true, true, SLUICE_PICK_LATEST);
    c.on_event = on_drop;
    c.max_keys = max_keys;
    if (seed) {
        c.fixed_seed = true;
        c.seed[0] = seed[0];
        c.seed[1] = seed[1];
    }
    sluice_limiter_t *l;
    CHECK(sluice_limiter_new(&l, &c) == 0, "limiter_new");
    return l;
}

static uint64_t max_probe(sluice_limiter_t *l) {
    sluice_stats_t st;
    CHECK(sluice_limiter_stats(l, &st) == 0, "stats");
    return st.max_probe;
}

/* Exact separation of keys[0..n): a second call is SCHEDULED (the key's own
 * window is open), pending is 1, and cancel drops exactly that key's token
 * with its bytes. */
static void exact(sluice_limiter_t *l, const sluice_key_t *keys, size_t n, uint64_t now, const char *what) {
    for (size_t i = 0; i < n; i++) {
        sluice_decision_t d;
        CHECK(sluice_limiter_submit(l, keys[i], 1000000 + i, now, &d) == 0 && d.kind == SLUICE_SCHEDULED,
              "%s: key #%zu: second call not SCHEDULED (kind %d)", what, i, d.kind);
        CHECK(sluice_limiter_pending(l, keys[i], now) == 1, "%s: key #%zu not pending", what, i);
    }
    for (size_t i = 0; i < n; i++) {
        g_expect_idx = (int64_t)i;
        g_expect_tok = 1000000 + i;
        g_expect_key = keys[i];
        uint64_t before = g_drops;
        CHECK(sluice_limiter_cancel(l, keys[i], now) == 1, "%s: cancel #%zu", what, i);
        CHECK(g_drops == before + 1, "%s: cancel of key #%zu dropped nothing", what, i);
        g_expect_idx = -1;
    }
    CHECK(sluice_limiter_check(l) == 0, "%s: limiter_check", what);
}

/* ------------------------------------------------------------------ 2. crafted keys, known seed */

static char g_crafted[1600][24];
static sluice_key_t g_ckeys[1600];

static void crafted_for_known_seed(void) {
    const size_t n = 1400;
    /* keys whose fast hash under seed A has the same top 13 bits: one home
     * bucket in every index of up to 8192 slots */
    uint64_t tries = 0;
    size_t got = 0;
    for (uint64_t i = 0; got < n; i++, tries++) {
        char s[24];
        int len = snprintf(s, sizeof s, "atk-%" PRIu64, i);
        if ((hash_of(SEED_A, sluice_key_bytes(s, (size_t)len)) >> 51) == 0x0A5A) {
            memcpy(g_crafted[got], s, (size_t)len);
            g_ckeys[got] = sluice_key_bytes(g_crafted[got], (size_t)len);
            got++;
        }
    }
    sluice_limiter_t *a = throttle(SEED_A, 0);
    size_t switched_at = SIZE_MAX;
    uint64_t probe_before = 0;
    for (size_t i = 0; i < n; i++) {
        sluice_decision_t d;
        CHECK(sluice_limiter_submit(a, g_ckeys[i], i, 0, &d) == 0 && d.kind == SLUICE_EMITTED,
              "crafted key #%zu: first call not EMITTED", i);
        if (switched_at == SIZE_MAX && a->table.strong) switched_at = i;
        if (switched_at == SIZE_MAX) probe_before = max_probe(a);
    }
    /* key #k lands k slots past the shared home: #1024 is the first at SLUICE__STRONG_PROBE */
    CHECK(switched_at == SLUICE__STRONG_PROBE, "the table switched at key #%zu, expected #%d", switched_at,
          SLUICE__STRONG_PROBE);
    CHECK(probe_before == SLUICE__STRONG_PROBE, "longest probe before the switch %" PRIu64, probe_before);
    uint64_t after = max_probe(a);
    CHECK(after <= 128, "after the switch the crafted keys still cluster: max_probe %" PRIu64, after);
    CHECK(sluice_limiter_check(a) == 0, "check after the switch");
    exact(a, g_ckeys, n, 1, "crafted keys, seed A");
    /* the attacker did not know seed B, nor a random seed */
    sluice_limiter_t *b = throttle(SEED_B, 0), *c = throttle(NULL, 0);
    for (size_t i = 0; i < n; i++) {
        sluice_decision_t d;
        CHECK(sluice_limiter_submit(b, g_ckeys[i], i, 0, &d) == 0 && d.kind == SLUICE_EMITTED, "B #%zu", i);
        CHECK(sluice_limiter_submit(c, g_ckeys[i], i, 0, &d) == 0 && d.kind == SLUICE_EMITTED, "C #%zu", i);
    }
    CHECK(!b->table.strong && !c->table.strong, "keys crafted for seed A switched a table with another seed");
    uint64_t pb = max_probe(b), pc = max_probe(c);
    CHECK(pb <= 128 && pc <= 128, "keys crafted for seed A cluster under another seed: %" PRIu64 " / %" PRIu64, pb, pc);
    exact(b, g_ckeys, n, 1, "crafted keys, seed B");
    printf("  crafted: %zu keys sharing 13 home bits under seed A (%" PRIu64 " tries): the table switched at key #%zu"
           " (probe %" PRIu64 "), max_probe %" PRIu64
           " after; under seed B / a random seed: no switch, max_probe %" PRIu64 " / %" PRIu64 "; all exact\n",
           n, tries, switched_at, probe_before, after, pb, pc);
    sluice_limiter_free(a);
    sluice_limiter_free(b);
    sluice_limiter_free(c);
}

/* ------------------------------------------------------------------ 3. a broken fast hash */

#define BROKEN UINT64_C(0x5A5A5A5A12345678)

static char g_bk[6000][40];
static sluice_key_t g_bkeys[6000];

/* key i: a u64 every third key, else strings of 0..39 bytes (inline and heap) */
static void broken_keys(size_t n) {
    for (size_t i = 0; i < n; i++) {
        if (i % 3 == 0) {
            g_bkeys[i] = sluice_key_u64(UINT64_C(0xABCD000000000000) + i);
            continue;
        }
        int len = snprintf(g_bk[i], sizeof g_bk[i], "%zu:", i);
        size_t want = (i * 7) % 40;
        for (; (size_t)len < want; len++) g_bk[i][len] = (char)('a' + (i + (size_t)len) % 26);
        g_bkeys[i] = sluice_key_bytes(g_bk[i], (size_t)len);
    }
}

static struct sluice__keyref forged(sluice_limiter_t *l, sluice_key_t key) {
    struct sluice__keyref k;
    CHECK(sluice__limiter_key(l, key, &k) == 0, "prepare");
    k.hash = BROKEN; /* every key, one hash: the fast hash broken outright */
    return k;
}

static void broken_fast_hash(void) {
    const size_t n = 5000, cap = 3000;
    broken_keys(n);
    sluice_limiter_t *l = throttle(SEED_A, cap);
    size_t switched_at = SIZE_MAX, refused = 0;
    for (size_t i = 0; i < n; i++) {
        struct sluice__keyref k = forged(l, g_bkeys[i]);
        sluice_decision_t d;
        int rc = sluice__limiter_submit_keyref(l, &k, i, 1, 0, &d);
        if (i < cap) {
            CHECK(rc == 0 && d.kind == SLUICE_EMITTED, "broken hash: key #%zu: rc %d kind %d", i, rc, d.kind);
        } else {
            CHECK(rc == SLUICE_EFULL, "broken hash: key #%zu past the cap: rc %d", i, rc);
            refused++;
        }
        if (switched_at == SIZE_MAX && l->table.strong) switched_at = i;
    }
    CHECK(switched_at == SLUICE__STRONG_PROBE, "broken hash: switched at key #%zu", switched_at);
    sluice_stats_t st;
    CHECK(sluice_limiter_stats(l, &st) == 0, "stats");
    CHECK(st.live_keys == cap && st.full_refusals == refused, "cap: %" PRIu64 " live, %" PRIu64 " refusals",
          st.live_keys, st.full_refusals);
    uint64_t probe_after = st.max_probe;
    CHECK(probe_after <= 128, "broken hash: max_probe %" PRIu64 " after the switch", probe_after);
    CHECK(sluice_limiter_check(l) == 0, "broken hash: check");
    /* the same keys again, still with the broken hash: found, exact */
    for (size_t i = 0; i < cap; i++) {
        struct sluice__keyref k = forged(l, g_bkeys[i]);
        sluice_decision_t d;
        CHECK(sluice__limiter_submit_keyref(l, &k, 500000 + i, 1, 1, &d) == 0 && d.kind == SLUICE_SCHEDULED,
              "broken hash: key #%zu again: kind %d", i, d.kind);
    }
    /* and through the public API (its real hash): each key's own pending value */
    for (size_t i = 0; i < cap; i++) {
        g_expect_idx = (int64_t)i;
        g_expect_tok = 500000 + i;
        g_expect_key = g_bkeys[i];
        uint64_t before = g_drops;
        CHECK(sluice_limiter_cancel(l, g_bkeys[i], 2) == 1 && g_drops == before + 1, "broken hash: cancel #%zu", i);
        g_expect_idx = -1;
    }
    /* every window closes: the entries go, the slab compacts, the index
     * shrinks, and the table stays on SipHash */
    CHECK(sluice_limiter_advance(l, 3 * SEC, SIZE_MAX) >= 0, "advance");
    CHECK(sluice_limiter_stats(l, &st) == 0 && st.live_keys == 0, "entries left: %" PRIu64, st.live_keys);
    CHECK(l->table.strong, "the switch is for good");
    CHECK(st.hash_fallbacks == 1, "stats report the switch");
    CHECK(sluice_limiter_check(l) == 0, "check after expiry");
    /* and works again from empty */
    for (size_t i = 0; i < cap; i++) {
        struct sluice__keyref k = forged(l, g_bkeys[i]);
        sluice_decision_t d;
        CHECK(sluice__limiter_submit_keyref(l, &k, i, 1, 4 * SEC, &d) == 0 && d.kind == SLUICE_EMITTED, "again #%zu",
              i);
    }
    CHECK(max_probe(l) <= 128 && sluice_limiter_check(l) == 0, "refilled");
    sluice_limiter_free(l);

    /* the loop layer's entry points (prepared keys, as its shards get them) */
    l = throttle(SEED_A, 0);
    uint64_t seed[2];
    sluice__limiter_seed(l, seed);
    for (size_t i = 0; i < 2000; i++) {
        sluice__pkey_t k;
        CHECK(sluice__key_prepare(seed, g_bkeys[i], &k) == 0, "prepare");
        k.hash = BROKEN;
        sluice_decision_t d;
        CHECK(sluice__submit_prepared(l, &k, i, 1, 0, &d) == 0 && d.kind == SLUICE_EMITTED, "prepared #%zu", i);
        sluice__prefetch_prepared(l, &k, 0);
        sluice__prefetch_prepared(l, &k, 1);
        CHECK(sluice__key_is_live(l, &k), "prepared #%zu not live", i);
    }
    CHECK(l->table.strong && max_probe(l) <= 128 && sluice_limiter_check(l) == 0, "prepared keys: switch");
    exact(l, g_bkeys, 2000, 1, "prepared keys with a broken hash");
    sluice_limiter_free(l);
    printf("  broken fast hash (one hash for every key): switched at key #%zu, max_probe %" PRIu64
           " after, cap %zu held (%zu refused), exact, expiry + compaction + refill on SipHash; loop-layer entry points"
           " too\n",
           switched_at, probe_after, cap, refused);
}

/* A run of keys each at (or near) its own home: no insert lands far from
 * its home, but a lookup that misses at the run's start scans all of it.
 * Key i gets home i in the final 2^11-slot index (hash top bits = i). */
static void long_miss(void) {
    const size_t n = 1100;
    sluice_limiter_t *l = throttle(SEED_A, 0);
    for (size_t i = 0; i < n; i++) {
        struct sluice__keyref k;
        CHECK(sluice__limiter_key(l, g_bkeys[i], &k) == 0, "prepare");
        k.hash = (uint64_t)i << 53;
        sluice_decision_t d;
        CHECK(sluice__limiter_submit_keyref(l, &k, i, 1, 0, &d) == 0 && d.kind == SLUICE_EMITTED, "run #%zu", i);
    }
    CHECK(l->table.slot_bits == 11 && !l->table.strong && max_probe(l) < SLUICE__STRONG_PROBE,
          "the run: %u index bits, strong %d, max_probe %" PRIu64, l->table.slot_bits, l->table.strong, max_probe(l));
    /* read-only misses (pending on absent keys) */
    struct sluice__keyref miss;
    CHECK(sluice__limiter_key(l, sluice_key_bytes("absent", 6), &miss) == 0, "prepare");
    miss.hash = (uint64_t)100 << 53; /* scans slots 100..1099: 1000 */
    CHECK(sluice__limiter_key_op_keyref(l, &miss, 0, 0) == 0 && !l->table.strong,
          "a 1000-slot miss switched the table");
    miss.hash = (uint64_t)60 << 53; /* 1040 slots */
    CHECK(sluice__limiter_key_op_keyref(l, &miss, 0, 0) == 0, "pending on an absent key");
    CHECK(l->table.strong, "a miss that scanned 1040 slots did not switch the table");
    CHECK(max_probe(l) <= 128 && sluice_limiter_check(l) == 0, "after a long miss: max_probe %" PRIu64, max_probe(l));
    exact(l, g_bkeys, n, 1, "after a long miss");
    sluice_limiter_free(l);
    printf("  long miss: a run of %zu keys each at its home; a 1000-slot miss leaves the fast hash, a 1040-slot miss"
           " switches; exact after\n",
           n);
}

/* The same through sluice_limiter_submit_u64() under emit_only, whose short
 * path finds integer keys with a probe that calls nothing and leaves a long
 * miss to the general path's find: integer keys chosen (by their fast hash
 * under the limiter's seed) to sit at homes 0..1099 of the 2^11-slot index,
 * then a call on a new key whose home is 60, refused by the key cap (so no
 * insert moves the table: the miss over 1040 slots alone), switches the
 * table, and every key is still its own afterwards. */
static void long_miss_u64_emit_only(void) {
    const size_t n = 1100;
    sluice_config_t c;
    memset(&c, 0, sizeof c);
    c.policy = sluice_throttle((int64_t)SEC, true, true, SLUICE_PICK_LATEST);
    c.emit_only = true;
    c.on_event = on_drop; /* (emissions only here: at expiry, which this test never reaches) */
    c.max_keys = n;
    c.fixed_seed = true;
    c.seed[0] = SEED_A[0];
    c.seed[1] = SEED_A[1];
    sluice_limiter_t *l;
    CHECK(sluice_limiter_new(&l, &c) == 0, "limiter_new");
    static uint64_t keys[1100];
    uint64_t probe_key = 0, next = 1;
    /* one key per home 0..n-1, and a key of home 60 (never submitted before the miss) */
    for (size_t home = 0; home < n; home++) {
        for (;; next++) {
            uint64_t h = sluice__fast_hash_u64_keyed(&l->u64_key, next);
            if ((h >> 53) == home) break;
        }
        keys[home] = next++;
    }
    for (;; next++) {
        if ((sluice__fast_hash_u64_keyed(&l->u64_key, next) >> 53) == 60) break;
    }
    probe_key = next;
    sluice_decision_t d;
    for (size_t i = 0; i < n; i++)
        CHECK(sluice_limiter_submit_u64(l, keys[i], i, 0, &d) == 0 && d.kind == SLUICE_EMITTED, "key #%zu", i);
    CHECK(l->table.slot_bits == 11 && !l->table.strong && max_probe(l) < SLUICE__STRONG_PROBE,
          "the run: %u index bits, strong %d, max_probe %" PRIu64, l->table.slot_bits, l->table.strong, max_probe(l));
    /* a live key found on the short path: no switch */
    CHECK(sluice_limiter_submit_u64(l, keys[1000], 7, 1, &d) == 0 && d.kind == SLUICE_SCHEDULED, "a live key");
    CHECK(!l->table.strong, "a call on a live key switched the table");
    CHECK(sluice_limiter_submit_u64(l, probe_key, 8, 1, &d) == SLUICE_EFULL, "a new key past the cap");
    CHECK(l->table.strong, "a miss over 1040 slots by sluice_limiter_submit_u64 under emit_only did not switch");
    CHECK(max_probe(l) <= 128 && sluice_limiter_check(l) == 0, "after the switch: max_probe %" PRIu64, max_probe(l));
    for (size_t i = 0; i < n; i++) {
        /* every key's window is open: the next call is held, on the key's own state */
        CHECK(sluice_limiter_submit_u64(l, keys[i], n + i, 2, &d) == 0 && d.kind == SLUICE_SCHEDULED,
              "key #%zu after the switch", i);
    }
    CHECK(sluice_limiter_submit_u64(l, probe_key, 9, 2, &d) == SLUICE_EFULL, "the new key again");
    CHECK(sluice_limiter_check(l) == 0, "check at the end");
    sluice_limiter_free(l);
    printf("  long miss, integer keys under emit_only: a 1040-slot miss on the short path switches; exact after\n");
}

/* ------------------------------------------------------------------ 4. invisible */

#define POOL 3000
static char g_pk[POOL][48];
static sluice_key_t g_pool[POOL];

struct rec {
    uint64_t n, sum; /* events seen and a digest of them, order-free within a step */
};
static struct rec g_rec[3];

static void on_rec(void *user, const sluice_event_t *e) {
    struct rec *r = user;
    uint64_t h = (uint64_t)e->kind * UINT64_C(0x9E3779B97F4A7C15) ^ e->token * UINT64_C(0xBF58476D1CE4E5B9) ^ e->at ^
                 (e->has_successor ? e->successor * 31 + 1 : 0);
    if (e->key.kind == SLUICE_KEY_U64)
        h ^= e->key.u64 * UINT64_C(0x94D049BB133111EB);
    else
        for (size_t i = 0; i < e->key.len; i++)
            h = (h ^ ((const unsigned char *)e->key.bytes)[i]) * UINT64_C(0x100000001B3);
    r->n++;
    r->sum += h * UINT64_C(0xD6E8FEB86659FD93) + (h >> 29);
}

static void invisible(void) {
    const char *s = getenv("SLUICE_HASH_OPS");
    uint64_t ops = s && *s ? strtoull(s, NULL, 0) : SANITIZED ? 40000 : 200000;
    for (size_t i = 0; i < POOL; i++) {
        if (i % 4 == 0) {
            g_pool[i] = sluice_key_u64(rnd() % 5 == 0 ? i : rnd());
            continue;
        }
        size_t len = (size_t)(rnd() % 48);
        for (size_t j = 0; j < len; j++) g_pk[i][j] = (char)rnd();
        if (len >= 4) memcpy(g_pk[i], &i, 4); /* distinct */
        g_pool[i] = sluice_key_bytes(g_pk[i], len);
    }
    sluice_limiter_t *l[3];
    for (int i = 0; i < 3; i++) {
        sluice_config_t c;
        memset(&c, 0, sizeof c);
        c.policy = sluice_debounce((int64_t)(5 * 1000000), true, true, (int64_t)(20 * 1000000));
        c.on_event = on_rec;
        c.user = &g_rec[i];
        c.max_keys = 2500;
        c.fixed_seed = true;
        c.seed[0] = SEED_A[0];
        c.seed[1] = SEED_A[1];
        CHECK(sluice_limiter_new(&l[i], &c) == 0, "limiter_new");
    }
    sluice__table_use_strong_hash(&l[1]->table); /* from the start; l[2] halfway */
    uint64_t now = 0;
    sluice_call_t calls[40];
    sluice_decision_t dd[3][40];
    int rr[3][40];
    for (uint64_t op = 0; op < ops; op++) {
        if (op == ops / 2) sluice__table_use_strong_hash(&l[2]->table);
        uint64_t r = rnd();
        sluice_key_t key = g_pool[(r >> 8) % POOL];
        int rc[3];
        sluice_decision_t d[3];
        memset(d, 0, sizeof d);
        switch (r % 16) {
        case 0: now += (r >> 40) % 3000000; break;
        case 1:
            for (int i = 0; i < 3; i++) rc[i] = (int)sluice_limiter_advance(l[i], now, SIZE_MAX);
            CHECK(rc[0] == rc[1] && rc[0] == rc[2], "op %" PRIu64 ": advance %d %d %d", op, rc[0], rc[1], rc[2]);
            break;
        case 2:
            for (int i = 0; i < 3; i++) rc[i] = sluice_limiter_flush(l[i], key, now);
            break;
        case 3:
            for (int i = 0; i < 3; i++) rc[i] = sluice_limiter_cancel(l[i], key, now);
            break;
        case 4:
            for (int i = 0; i < 3; i++) rc[i] = sluice_limiter_pending(l[i], key, now);
            break;
        case 5: {
            size_t n = 1 + (r >> 32) % 40;
            for (size_t j = 0; j < n; j++) {
                calls[j].key = g_pool[rnd() % POOL];
                calls[j].token = op * 64 + j;
                calls[j].cost = 1;
            }
            for (int i = 0; i < 3; i++) rc[i] = sluice_limiter_submit_many(l[i], calls, n, now, dd[i], rr[i]);
            for (size_t j = 0; j < n; j++)
                CHECK(rr[0][j] == rr[1][j] && rr[0][j] == rr[2][j] && dd[0][j].kind == dd[1][j].kind &&
                          dd[0][j].kind == dd[2][j].kind && dd[0][j].at == dd[1][j].at && dd[0][j].at == dd[2][j].at,
                      "op %" PRIu64 ": batch call %zu differs", op, j);
            break;
        }
        default:
            for (int i = 0; i < 3; i++) rc[i] = sluice_limiter_submit(l[i], key, op * 64, now, &d[i]);
            CHECK(d[0].kind == d[1].kind && d[0].kind == d[2].kind && d[0].at == d[1].at && d[0].at == d[2].at,
                  "op %" PRIu64 ": decisions differ", op);
        }
        if (r % 16 >= 2)
            CHECK(rc[0] == rc[1] && rc[0] == rc[2], "op %" PRIu64 " (%d): results %d %d %d", op, (int)(r % 16), rc[0],
                  rc[1], rc[2]);
        CHECK(g_rec[0].n == g_rec[1].n && g_rec[0].n == g_rec[2].n && g_rec[0].sum == g_rec[1].sum &&
                  g_rec[0].sum == g_rec[2].sum,
              "op %" PRIu64 ": events differ (%" PRIu64 " / %" PRIu64 " / %" PRIu64 ")", op, g_rec[0].n, g_rec[1].n,
              g_rec[2].n);
        if (op % 20000 == 0)
            for (int i = 0; i < 3; i++) CHECK(sluice_limiter_check(l[i]) == 0, "check at op %" PRIu64, op);
    }
    for (int i = 0; i < 3; i++) CHECK(sluice_limiter_check(l[i]) == 0, "check at the end");
    CHECK(!l[0]->table.strong && l[1]->table.strong && l[2]->table.strong, "which tables switched");
    for (int i = 0; i < 3; i++) {
        sluice_stats_t st;
        CHECK(sluice_limiter_stats(l[i], &st) == 0 && st.hash_fallbacks == (i == 0 ? 0u : 1u),
              "limiter %d: hash_fallbacks %" PRIu64, i, st.hash_fallbacks);
    }
    printf("  invisible: %" PRIu64 " random ops (submit, batches, flush, cancel, pending, advance) on %d keys:"
           " never switched = switched at start = switched halfway (%" PRIu64 " events)\n",
           ops, POOL, g_rec[0].n);
    for (int i = 0; i < 3; i++) sluice_limiter_free(l[i]);
}

int main(void) {
    printf("test_hash: the fast hash\n");
    seed_changes_outputs();
    no_collisions();
    avalanche();
    spread();
    printf("test_hash: the switch to SipHash\n");
    crafted_for_known_seed();
    broken_fast_hash();
    long_miss();
    long_miss_u64_emit_only();
    invisible();
    printf("test_hash: ok\n");
    return 0;
}
