/*
 * hash-internal.h — the fast keyed hash of the key index (internal).
 *
 * Every key is hashed on every call, so the hash is a large share of a
 * call's cost. SipHash-1-3 (siphash-internal.h) costs ~70 instructions for
 * an integer key and ~110 for a 16-byte string; the hash here costs 10–30
 * for the keys servers use most (integers, IPs, ids and API keys of 4–64
 * bytes).
 *
 * Construction: the key is read as 64-bit words (short keys as two
 * overlapping words, so no byte is read twice into one word and none past
 * the end), each pair of words is XORed with secret-dependent values and
 * multiplied into a 128-bit product whose halves are XORed together
 * ("fold"); a final fold with the seed spreads every input bit over the
 * whole output. The length enters the state, so keys that differ only in
 * length differ. The 128-bit seed is the limiter's random seed: outputs
 * differ from limiter to limiter, and keys that collide under one seed do
 * not collide under another.
 *
 * This hash is fast, not a proven pseudo-random function: an attacker who
 * learnt the seed, or found a way to build collisions without it, could make
 * many keys share a home bucket. The table does not rely on it alone: when
 * a key lands SLUICE__STRONG_PROBE or more slots past its home, the table
 * re-hashes every key with SipHash-1-3 under a key of its own (random bits
 * drawn apart from this hash's seed) and keeps using it
 * (table.c, docs/reliability.md).
 */
#ifndef SLUICE_HASH_INTERNAL_H
#define SLUICE_HASH_INTERNAL_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* Internal symbols stay out of the shared library's interface. */
#if defined(__GNUC__) || defined(__clang__)
#pragma GCC visibility push(hidden)
#endif

/* Odd constants with no structure an attacker could use: the fractional
 * parts of sqrt(2), sqrt(3), sqrt(5) and sqrt(7) (SHA-512's first words). */
#define SLUICE__HC0 UINT64_C(0x6a09e667f3bcc908)
#define SLUICE__HC1 UINT64_C(0xbb67ae8584caa73b)
#define SLUICE__HC2 UINT64_C(0x3c6ef372fe94f82b)
#define SLUICE__HC3 UINT64_C(0xa54ff53a5f1d36f1)

/* The 128-bit product of a and b, its halves XORed. */
static inline uint64_t sluice__fold(uint64_t a, uint64_t b) {
#if defined(__SIZEOF_INT128__)
    __uint128_t p = (__uint128_t)a * b;
    return (uint64_t)p ^ (uint64_t)(p >> 64);
#else
    uint64_t al = (uint32_t)a, ah = a >> 32, bl = (uint32_t)b, bh = b >> 32;
    uint64_t ll = al * bl, lh = al * bh, hl = ah * bl, hh = ah * bh;
    uint64_t mid = (ll >> 32) + (uint32_t)lh + (uint32_t)hl;
    uint64_t lo = (mid << 32) | (uint32_t)ll;
    uint64_t hi = hh + (lh >> 32) + (hl >> 32) + (mid >> 32);
    return lo ^ hi;
#endif
}

static inline uint64_t sluice__load64(const unsigned char *p) {
    uint64_t v;
    memcpy(&v, p, 8);
    return v;
}

static inline uint64_t sluice__load32(const unsigned char *p) {
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}

/* The words of the integer-key hash under a seed, computed once per seed
 * (a limiter keeps them: two fewer constants and XORs per call). */
struct sluice__u64_hash_key {
    uint64_t k0, k1, k2;
};

static inline struct sluice__u64_hash_key sluice__u64_hash_key(const uint64_t seed[2]) {
    struct sluice__u64_hash_key k = { seed[0], seed[1] ^ SLUICE__HC0, seed[0] ^ seed[1] ^ SLUICE__HC2 };
    return k;
}

/* sluice__fast_hash_u64() with the words of its seed. */
static inline uint64_t sluice__fast_hash_u64_keyed(const struct sluice__u64_hash_key *k, uint64_t x) {
    uint64_t h = sluice__fold(x ^ k->k0, k->k1);
    return sluice__fold(h ^ SLUICE__HC1, k->k2);
}

/* The fast hash of an integer key under `seed`. */
static inline uint64_t sluice__fast_hash_u64(const uint64_t seed[2], uint64_t x) {
    struct sluice__u64_hash_key k = sluice__u64_hash_key(seed);
    return sluice__fast_hash_u64_keyed(&k, x);
}

/* Keys longer than 16 bytes. */
static inline uint64_t sluice__fast_hash_long(const uint64_t seed[2], const unsigned char *p, size_t len) {
    const unsigned char *end = p + len;
    uint64_t h = seed[0] ^ ((uint64_t)len * SLUICE__HC0);
    /* Whole 16-byte blocks but the last: each folds into the state. */
    for (size_t left = len; left > 16; left -= 16, p += 16)
        h = sluice__fold(sluice__load64(p) ^ seed[1] ^ SLUICE__HC3, sluice__load64(p + 8) ^ h);
    /* The last 16 bytes (overlapping the previous block when len is not a
     * multiple of 16). */
    h = sluice__fold(sluice__load64(end - 16) ^ seed[1] ^ SLUICE__HC1, sluice__load64(end - 8) ^ h);
    return sluice__fold(h ^ SLUICE__HC1, seed[0] ^ seed[1] ^ SLUICE__HC2);
}

/* The fast hash of `len` bytes under `seed`. */
static inline uint64_t sluice__fast_hash_bytes(const uint64_t seed[2], const void *data, size_t len) {
    const unsigned char *p = (const unsigned char *)data;
    uint64_t a, b;
    if (len > 16) return sluice__fast_hash_long(seed, p, len);
    if (len >= 8) {
        a = sluice__load64(p);
        b = sluice__load64(p + len - 8);
    } else if (len >= 4) {
        a = sluice__load32(p);
        b = sluice__load32(p + len - 4);
    } else if (len > 0) {
        a = (uint64_t)p[0] << 16 | (uint64_t)p[len >> 1] << 8 | p[len - 1];
        b = 0;
    } else {
        a = b = 0;
    }
    uint64_t h = sluice__fold(a ^ seed[1] ^ SLUICE__HC3, b ^ seed[0] ^ ((uint64_t)len * SLUICE__HC0));
    return sluice__fold(h ^ SLUICE__HC1, seed[0] ^ seed[1] ^ SLUICE__HC2);
}

#if defined(__GNUC__) || defined(__clang__)
#pragma GCC visibility pop
#endif

#endif /* SLUICE_HASH_INTERNAL_H */
