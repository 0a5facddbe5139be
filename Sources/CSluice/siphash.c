/* siphash.c — SipHash-1-3 (see siphash-internal.h). */
#include "siphash-internal.h"

#include <string.h>

static inline uint64_t load_le64(const unsigned char *p) {
    return (uint64_t)p[0] | (uint64_t)p[1] << 8 | (uint64_t)p[2] << 16 | (uint64_t)p[3] << 24 | (uint64_t)p[4] << 32 |
           (uint64_t)p[5] << 40 | (uint64_t)p[6] << 48 | (uint64_t)p[7] << 56;
}

uint64_t sluice__siphash13(const uint64_t k[2], const void *data, size_t len) {
    const unsigned char *p = data;
    struct sluice__sip s;
    sluice__sip_init(&s, k);
    size_t whole = len & ~(size_t)7;
    for (size_t i = 0; i < whole; i += 8) sluice__sip_absorb(&s, load_le64(p + i));
    uint64_t last = (uint64_t)(len & 0xff) << 56;
    for (size_t i = 0; i < (len & 7); i++) last |= (uint64_t)p[whole + i] << (8 * i);
    sluice__sip_absorb(&s, last);
    return sluice__sip_finish(&s);
}
