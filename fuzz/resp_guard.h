/*
 * resp_guard.h — for the fuzzers that feed RESP to hiredis's reader.
 * hiredis 0.14 allocates an array's element pointers when it reads the
 * array's header (`*N`), before the elements come: a declared size in the
 * millions is an allocation the fuzzer would report, not a reading bug.
 * The scripts' replies hold at most 16,384 values.
 */
#ifndef SLUICE_FUZZ_RESP_GUARD_H
#define SLUICE_FUZZ_RESP_GUARD_H

#include <stddef.h>
#include <stdint.h>

/* Whether the bytes declare an array of more than 16,384 values. */
static inline int resp_declares_huge_array(const uint8_t *p, size_t n) {
    for (size_t i = 0; i < n; i++) {
        if (p[i] != '*') continue;
        uint64_t declared = 0;
        for (size_t j = i + 1; j < n && j < i + 12 && p[j] >= '0' && p[j] <= '9'; j++)
            declared = declared * 10 + (uint64_t)(p[j] - '0');
        if (declared > 16384) return 1;
    }
    return 0;
}

#endif
