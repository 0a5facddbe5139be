/*
 * realtime.h — `sluice-trace --realtime`: a conformance trace replayed on a
 * real libevent loop and the real monotonic clock (sluice_loop.h).
 *
 * Time 0 is a whole millisecond of CLOCK_MONOTONIC (a wheel tick), so step
 * times and deadlines are whole ticks as in the manual runner. Each step
 * runs when the clock reaches start + TIME ms (a libevent timer of higher
 * priority armed 1 ms ahead, then a sleep to the instant: never before),
 * as a call into a loop limiter (sluice_mt_*) stamped with exactly that
 * instant, so its decision is the spec's even for a call exactly at a
 * deadline: the step always runs before the limiter's own timer pass for
 * that instant. Deadlines then fire on the loop by themselves. Every output line carries the *actual* time,
 * in whole milliseconds since start (rounded down, so a line is never shown
 * earlier than it happened): emissions are never early, and late by the
 * loop's timer lateness plus at most one wheel tick (1 ms).
 *
 * Everything runs on the calling thread (the loop thread of a base with
 * EVENT_BASE_FLAG_PRECISE_TIMER): events a step causes are printed before
 * the step's own decision, as in the manual runner. After the last step
 * (when it is not `close`) the run goes on until no value is pending: after
 * that nothing more can be printed.
 */
#ifndef SLUICE_TRACE_REALTIME_H
#define SLUICE_TRACE_REALTIME_H

#include "trace.h"

#ifdef __cplusplus
extern "C" {
#endif

/**
 * Runs a parsed trace on the real loop and clock, printing to options->out.
 *
 * @param trace a trace from trace_parse().
 * @param options as for trace_run(): `out` is used; `check_invariants`,
 *        `max_advances` and `random_seed` are ignored. NULL: no output.
 * @param result receives counters (lines, events) and, on failure, the
 *        message; may be NULL.
 * @return TRACE_OK, TRACE_ERR_NOMEM, or TRACE_ERR_INTERNAL (the loop layer
 *         broke a rule: an error for a valid call, a token reported twice or
 *         never, an event of an unknown token).
 * Takes as long as the trace's last time, plus its last deadline.
 */
int trace_run_realtime(const struct trace *trace, const struct trace_run_options *options,
                       struct trace_run_result *result);

#ifdef __cplusplus
}
#endif

#endif /* SLUICE_TRACE_REALTIME_H */
