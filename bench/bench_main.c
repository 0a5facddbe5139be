/* bench_main.c — the C micro-benchmark: wheel, limiter, floor and libevent's
 * heap in one run, so ratios are taken side by side. Not a test: it asserts
 * nothing. Usage: sluice-microbench [--quick] */
#include "bench_util.h"
#include "sluice.h"

#include <string.h>

/* Parts built from other files are optional: a build without them still runs. */
__attribute__((weak)) void bench_loop_run(FILE *out, int quick);
__attribute__((weak)) void bench_wheel_run(FILE *out, int quick);

int main(int argc, char **argv) {
    int quick = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--quick") == 0)
            quick = 1;
        else {
            fprintf(stderr, "usage: sluice-microbench [--quick]\n");
            return 2;
        }
    }
    setvbuf(stdout, NULL, _IOLBF, 0);
    printf("sluice %s micro-benchmark%s (ns per operation; compare ratios, not absolute times)\n",
           sluice_version(), quick ? " (quick)" : "");
    if (bench_wheel_run) bench_wheel_run(stdout, quick);
    bench_core_run(stdout, quick);
    bench_libevent_run(stdout, quick);
    if (bench_loop_run) bench_loop_run(stdout, quick);
    return 0;
}
