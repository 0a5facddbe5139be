/*
 * fleet-time.h — the fleet's clock readings and libevent timer arming
 * (internal; shared by fleet.c, conn.c and sentinel.c).
 */
#ifndef SLUICE_FLEET_TIME_H
#define SLUICE_FLEET_TIME_H

#include <stdint.h>
#include <sys/time.h>
#include <time.h>

#include <event2/event.h>

/* A clock's reading in ns (CLOCK_MONOTONIC for deadlines, CLOCK_REALTIME
 * for Unix times). */
static inline uint64_t sluice__fleet_clock_ns(clockid_t id) {
    struct timespec ts;
    clock_gettime(id, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Arms the timer `ev` to fire `ns` from now (rounded down to the µs). */
static inline void sluice__fleet_arm(struct event *ev, uint64_t ns) {
    struct timeval tv;
    tv.tv_sec = (time_t)(ns / 1000000000ull);
    tv.tv_usec = (suseconds_t)(ns % 1000000000ull / 1000);
    evtimer_add(ev, &tv);
}

#endif
