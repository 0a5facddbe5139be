/*
 * seed-internal.h — random bits for hash seeds (internal).
 *
 * A limiter seeds its key index from here, and so does the fleet's cache
 * (Sources/CSluiceFleet/fleet.c), so that keys that collide under one seed
 * do not under another and nobody outside can aim keys at one slot. Header
 * only: the fleet library may be linked against a shared core whose
 * internal symbols are hidden.
 */
#ifndef SLUICE_SEED_INTERNAL_H
#define SLUICE_SEED_INTERNAL_H

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#if defined(__linux__)
#include <sys/random.h>
#include <sys/types.h>
#endif

/* Fills a 128-bit seed with random bits (getrandom, else /dev/urandom).
 * Returns 0, or -1 when no random bits could be had. */
static inline int sluice__random_seed(uint64_t seed[2]) {
#if defined(__linux__)
    size_t got = 0;
    unsigned char *p = (unsigned char *)seed;
    while (got < 16) {
        ssize_t n = getrandom(p + got, 16 - got, 0);
        if (n < 0) {
            if (errno == EINTR) continue;
            break;
        }
        got += (size_t)n;
    }
    if (got == 16) return 0;
#endif
    FILE *f = fopen("/dev/urandom", "rb");
    if (!f) return -1;
    size_t n = fread(seed, 1, 16, f);
    fclose(f);
    return n == 16 ? 0 : -1;
}

#endif /* SLUICE_SEED_INTERNAL_H */
