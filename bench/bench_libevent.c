/* bench_libevent.c — libevent's own timers (one struct event per key, its
 * min-heap), measured in the same run as the wheel for the ratios. */
#include "bench_util.h"

#include <event2/event.h>
#include <stdlib.h>

static size_t g_fired;

static void on_timer(evutil_socket_t fd, short what, void *arg) {
    (void)fd;
    (void)what;
    (void)arg;
    g_fired++;
}

static void run_size(FILE *out, size_t n) {
    struct event_base *base = event_base_new();
    if (!base) exit(1);
    struct event **ev = malloc(n * sizeof *ev);
    struct timeval *tv = malloc(n * sizeof *tv);
    if (!ev || !tv) exit(1);
    uint64_t seed = 9;
    for (size_t i = 0; i < n; i++) {
        ev[i] = evtimer_new(base, on_timer, NULL);
        uint64_t us = 1000000 + bench_rand(&seed) % 60000000; /* 1..61 s ahead */
        tv[i].tv_sec = (time_t)(us / 1000000);
        tv[i].tv_usec = (suseconds_t)(us % 1000000);
    }
    uint64_t t0 = bench_ns();
    for (size_t i = 0; i < n; i++) evtimer_add(ev[i], &tv[i]);
    uint64_t t1 = bench_ns();
    /* delete in a random order, as cancellations come */
    uint64_t t2 = bench_ns();
    for (size_t i = 0; i < n; i++) evtimer_del(ev[(i * 2654435761u) % n]);
    uint64_t t3 = bench_ns();
    for (size_t i = 0; i < n; i++) evtimer_del(ev[i]); /* the few the permutation missed */
    /* fire: all due 1 ms from now, then run the loop until every one fired */
    struct timeval soon = { 0, 1000 };
    for (size_t i = 0; i < n; i++) evtimer_add(ev[i], &soon);
    struct timespec pause = { 0, 5000000 };
    nanosleep(&pause, NULL);
    g_fired = 0;
    uint64_t t4 = bench_ns();
    while (g_fired < n) event_base_loop(base, EVLOOP_NONBLOCK);
    uint64_t t5 = bench_ns();
    fprintf(out, "%-34s %10zu %10.1f\n", "libevent add (heap)", n, (double)(t1 - t0) / (double)n);
    fprintf(out, "%-34s %10zu %10.1f\n", "libevent delete (heap)", n, (double)(t3 - t2) / (double)n);
    fprintf(out, "%-34s %10zu %10.1f\n", "libevent fire: ns per fired timer", n, (double)(t5 - t4) / (double)n);
    for (size_t i = 0; i < n; i++) event_free(ev[i]);
    free(ev);
    free(tv);
    event_base_free(base);
}

void bench_libevent_run(FILE *out, int quick) {
    fprintf(out, "\n== libevent timers (one struct event per key) ==\n");
    run_size(out, 1000);
    run_size(out, 100000);
    if (!quick) run_size(out, 1000000);
}
