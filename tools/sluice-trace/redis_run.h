/*
 * redis_run.h — `sluice-trace --redis URL`: runs a trace through Redis in
 * manual time and prints what the local run prints: a rate trace (format v3:
 * several quotas and plans too) through the fleet limiter (redis_run.c), a
 * throttle, audit or debounce trace through the fleet's timed limiter
 * (redis_timed.c). Built only when the fleet limiter is (hiredis present).
 */
#ifndef SLUICE_TRACE_REDIS_RUN_H
#define SLUICE_TRACE_REDIS_RUN_H

#include <stddef.h>

#include "sluice_trace.h"

/** Exit status of sluice-trace when Redis cannot be reached or fails. */
#define SLUICE_TRACE_EXIT_REDIS 4

/**
 * Runs `trace` through a fleet limiter connected to `addr`
 * (a Redis URL of docs/fleet.md, or "HOST:PORT"), each step at its trace time (manual time), under a key
 * prefix of its own. Every line goes to `on_output` only once every step has
 * been answered by Redis, in the order the local run prints them; nothing is
 * printed when something fails.
 *
 * @return the process exit status: 0; 64 (bad address), 1 (out of memory),
 *         3 (the answers broke a rule: a value that ended twice or never)
 *         or SLUICE_TRACE_EXIT_REDIS (Redis not reachable, too slow, or not
 *         answering like Redis), with a message on standard error.
 */
int sluice_trace_redis_main(const sluice_trace_t *trace, const char *addr, sluice_trace_output_fn on_output,
                            void *user);

/** Writes a key prefix of this run's own into `buf` (`cap` bytes, 96 are
 *  enough): the process and the time, so runs never share Redis keys. */
void sluice_trace_redis_prefix(char *buf, size_t cap);

/** sluice_trace_redis_main() for a throttle, audit or debounce trace, whose
 *  address was checked (redis_timed.c). */
int sluice_trace_redis_timed(const sluice_trace_t *trace, const char *addr, sluice_trace_output_fn on_output,
                             void *user);

#endif
