/* bench_util.h — timing helpers shared by the C micro-benchmark files. */
#ifndef SLUICE_BENCH_UTIL_H
#define SLUICE_BENCH_UTIL_H

#include <stdint.h>
#include <stdio.h>
#include <time.h>

static inline uint64_t bench_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* splitmix64: a fast deterministic generator for key orders. */
static inline uint64_t bench_rand(uint64_t *s) {
    uint64_t z = (*s += UINT64_C(0x9e3779b97f4a7c15));
    z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
    z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
    return z ^ (z >> 31);
}

/* Keeps a value alive so the compiler cannot drop the work producing it. */
static inline void bench_keep(uint64_t v) { __asm__ volatile("" : : "r"(v) : "memory"); }

void bench_core_run(FILE *out, int quick);
void bench_libevent_run(FILE *out, int quick);
void bench_wheel_run(FILE *out, int quick);
void bench_loop_run(FILE *out, int quick);

#endif
