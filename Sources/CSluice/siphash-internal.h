/*
 * siphash-internal.h — SipHash-1-3, a keyed 64-bit hash (internal).
 *
 * Sluice places keys in its index with a hash keyed by 128 random bits per
 * limiter, so a client cannot choose keys that collide. SipHash-1-3 (one
 * compression round, three finalization rounds) is the variant used by
 * hash tables that face hostile input (Rust's default hasher, for one).
 */
#ifndef SLUICE_SIPHASH_INTERNAL_H
#define SLUICE_SIPHASH_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

/* Internal symbols stay out of the shared library's interface. */
#if defined(__GNUC__) || defined(__clang__)
#pragma GCC visibility push(hidden)
#endif

/* Hash `len` bytes with the 128-bit key k[0], k[1]. */
uint64_t sluice__siphash13(const uint64_t k[2], const void *data, size_t len);

#define SLUICE__ROTL(x, b) (uint64_t)(((x) << (b)) | ((x) >> (64 - (b))))

struct sluice__sip {
    uint64_t v0, v1, v2, v3;
};

static inline void sluice__sip_round(struct sluice__sip *s) {
    s->v0 += s->v1;
    s->v1 = SLUICE__ROTL(s->v1, 13);
    s->v1 ^= s->v0;
    s->v0 = SLUICE__ROTL(s->v0, 32);
    s->v2 += s->v3;
    s->v3 = SLUICE__ROTL(s->v3, 16);
    s->v3 ^= s->v2;
    s->v0 += s->v3;
    s->v3 = SLUICE__ROTL(s->v3, 21);
    s->v3 ^= s->v0;
    s->v2 += s->v1;
    s->v1 = SLUICE__ROTL(s->v1, 17);
    s->v1 ^= s->v2;
    s->v2 = SLUICE__ROTL(s->v2, 32);
}

static inline void sluice__sip_init(struct sluice__sip *s, const uint64_t k[2]) {
    /* The initialisation constants spell "somepseudorandomlygeneratedbytes". */
    s->v0 = k[0] ^ UINT64_C(0x736f6d6570736575);
    s->v1 = k[1] ^ UINT64_C(0x646f72616e646f6d);
    s->v2 = k[0] ^ UINT64_C(0x6c7967656e657261);
    s->v3 = k[1] ^ UINT64_C(0x7465646279746573);
}

static inline void sluice__sip_absorb(struct sluice__sip *s, uint64_t m) {
    s->v3 ^= m;
    sluice__sip_round(s);
    s->v0 ^= m;
}

static inline uint64_t sluice__sip_finish(struct sluice__sip *s) {
    s->v2 ^= 0xff;
    sluice__sip_round(s);
    sluice__sip_round(s);
    sluice__sip_round(s);
    return s->v0 ^ s->v1 ^ s->v2 ^ s->v3;
}

/* Hash one 64-bit integer (as 8 little-endian bytes); same result as
 * sluice__siphash13 on those bytes, inlined for the integer-key fast path. */
static inline uint64_t sluice__siphash13_u64(const uint64_t k[2], uint64_t x) {
    struct sluice__sip s;
    sluice__sip_init(&s, k);
    sluice__sip_absorb(&s, x);
    sluice__sip_absorb(&s, (uint64_t)8 << 56);
    return sluice__sip_finish(&s);
}

#if defined(__GNUC__) || defined(__clang__)
#pragma GCC visibility pop
#endif

#endif
