/*
 * redis_run.h — `sluice-trace --redis URL`: runs a rate trace (format v3:
 * several quotas and plans too) through the
 * fleet limiter (Redis, manual-time mode) and prints what the local run
 * prints. Built only when the fleet limiter is (hiredis present).
 */
#ifndef SLUICE_TRACE_REDIS_RUN_H
#define SLUICE_TRACE_REDIS_RUN_H

#include "sluice_trace.h"

/** Exit status of sluice-trace when Redis cannot be reached or fails. */
#define SLUICE_TRACE_EXIT_REDIS 4

/**
 * Runs `trace` (a rate policy) through a fleet limiter connected to `addr`
 * (a Redis URL of docs/fleet.md, or "HOST:PORT"), each step at its trace time (manual time), under a key
 * prefix of its own. Every line goes to `on_output` only once every step has
 * been answered by Redis, in the order the local run prints them; nothing is
 * printed when something fails.
 *
 * @return the process exit status: 0; 64 (bad address, or a policy that is
 *         not rate), 1 (out of memory) or SLUICE_TRACE_EXIT_REDIS (Redis not
 *         reachable, too slow, or not answering like Redis), with a message
 *         on standard error.
 */
int sluice_trace_redis_main(const sluice_trace_t *trace, const char *addr, sluice_trace_output_fn on_output,
                            void *user);

#endif
