/* scenario.h — the failure report and random numbers of the C tests that run
 * seeded random scenarios (test_wheel, test_drain).
 *
 * Define TEST_NAME ("test_wheel", …) and SCENARIO_SEED (the default seed)
 * before including. The test names its scenario in g_scenario and, when it
 * counts steps, its step in g_step; CHECK(cond, fmt, …) counts the check and,
 * when it fails, prints the line, the condition, the scenario, the step and
 * the seed (a run is repeated with `TEST SEED`), then the message, and exits
 * 1. rnd() is splitmix64 over g_rng (seed it with g_seed). */
#ifndef SLUICE_TEST_SCENARIO_H
#define SLUICE_TEST_SCENARIO_H

#include <inttypes.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#if !defined(TEST_NAME) || !defined(SCENARIO_SEED)
#error "define TEST_NAME and SCENARIO_SEED before including support/scenario.h"
#endif

static unsigned long long g_checks;
static uint64_t g_seed = SCENARIO_SEED;
static const char *g_scenario = "";
static unsigned long long g_step;
static uint64_t g_rng;

__attribute__((format(printf, 3, 4), noreturn)) static void failf(int line, const char *expr, const char *fmt, ...) {
    va_list ap;
    fprintf(stderr, TEST_NAME ": FAILED at " TEST_NAME ".c:%d: %s\n  scenario: %s, step %llu, seed %" PRIu64 "\n  ",
            line, expr, g_scenario, g_step, g_seed);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    exit(1);
}

#define CHECK(cond, ...)                                                                                               \
    do {                                                                                                               \
        g_checks++;                                                                                                    \
        if (!(cond)) failf(__LINE__, #cond, __VA_ARGS__);                                                              \
    } while (0)

#define U(x) ((unsigned long long)(x))

__attribute__((unused)) static uint64_t rnd(void) { /* splitmix64 */
    uint64_t z = (g_rng += UINT64_C(0x9E3779B97F4A7C15));
    z = (z ^ (z >> 30)) * UINT64_C(0xBF58476D1CE4E5B9);
    z = (z ^ (z >> 27)) * UINT64_C(0x94D049BB133111EB);
    return z ^ (z >> 31);
}
__attribute__((unused)) static uint64_t rndn(uint64_t n) { return n ? rnd() % n : 0; }

#endif
