/* siphash.c — SipHash-1-3 (see siphash-internal.h). */
#include "siphash-internal.h"

#include <string.h>

#define SL_ROTL(x, b) (uint64_t)(((x) << (b)) | ((x) >> (64 - (b))))

struct sip_state {
    uint64_t v0, v1, v2, v3;
};

static inline void sip_round(struct sip_state *s) {
    s->v0 += s->v1;
    s->v1 = SL_ROTL(s->v1, 13);
    s->v1 ^= s->v0;
    s->v0 = SL_ROTL(s->v0, 32);
    s->v2 += s->v3;
    s->v3 = SL_ROTL(s->v3, 16);
    s->v3 ^= s->v2;
    s->v0 += s->v3;
    s->v3 = SL_ROTL(s->v3, 21);
    s->v3 ^= s->v0;
    s->v2 += s->v1;
    s->v1 = SL_ROTL(s->v1, 17);
    s->v1 ^= s->v2;
    s->v2 = SL_ROTL(s->v2, 32);
}

static inline void sip_init(struct sip_state *s, const uint64_t k[2]) {
    /* The initialisation constants spell "somepseudorandomlygeneratedbytes". */
    s->v0 = k[0] ^ UINT64_C(0x736f6d6570736575);
    s->v1 = k[1] ^ UINT64_C(0x646f72616e646f6d);
    s->v2 = k[0] ^ UINT64_C(0x6c7967656e657261);
    s->v3 = k[1] ^ UINT64_C(0x7465646279746573);
}

static inline void sip_absorb(struct sip_state *s, uint64_t m) {
    s->v3 ^= m;
    sip_round(s);
    s->v0 ^= m;
}

static inline uint64_t sip_finish(struct sip_state *s) {
    s->v2 ^= 0xff;
    sip_round(s);
    sip_round(s);
    sip_round(s);
    return s->v0 ^ s->v1 ^ s->v2 ^ s->v3;
}

static inline uint64_t load_le64(const unsigned char *p) {
    return (uint64_t)p[0] | (uint64_t)p[1] << 8 | (uint64_t)p[2] << 16 | (uint64_t)p[3] << 24 |
           (uint64_t)p[4] << 32 | (uint64_t)p[5] << 40 | (uint64_t)p[6] << 48 | (uint64_t)p[7] << 56;
}

uint64_t sl_siphash13(const uint64_t k[2], const void *data, size_t len) {
    const unsigned char *p = data;
    struct sip_state s;
    sip_init(&s, k);
    size_t whole = len & ~(size_t)7;
    for (size_t i = 0; i < whole; i += 8) sip_absorb(&s, load_le64(p + i));
    uint64_t last = (uint64_t)(len & 0xff) << 56;
    for (size_t i = 0; i < (len & 7); i++) last |= (uint64_t)p[whole + i] << (8 * i);
    sip_absorb(&s, last);
    return sip_finish(&s);
}

uint64_t sl_siphash13_u64(const uint64_t k[2], uint64_t x) {
    struct sip_state s;
    sip_init(&s, k);
    sip_absorb(&s, x);
    sip_absorb(&s, (uint64_t)8 << 56);
    return sip_finish(&s);
}
