/* hash.c — the fast keyed hash for keys longer than 16 bytes (see
 * hash-internal.h). */
#include "hash-internal.h"

uint64_t sluice__fast_hash_long(const uint64_t seed[2], const unsigned char *p, size_t len) {
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
