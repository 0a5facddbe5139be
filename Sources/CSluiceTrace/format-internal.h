/*
 * format-internal.h — the output lines of a run (format.c): the one place
 * that turns what a limiter did into a line, for every runner (run.c,
 * realtime.c, answers.c). Not installed; every symbol is sluice__-prefixed
 * and hidden.
 */
#ifndef SLUICE_TRACE_FORMAT_INTERNAL_H
#define SLUICE_TRACE_FORMAT_INTERNAL_H

#include "trace-internal.h"

/* Where a run's lines go: builds the text and the fields of each line and
 * hands them to options->on_output. */
struct sluice__trace_sink {
    const sluice_trace_t *t;
    sluice_trace_output_fn fn;
    void *user;
    sluice_trace_run_result_t *res;
    char *buf; /* one line; room for the longest */
    size_t cap;
};

/* Prepares a sink (one allocation). Returns SLUICE_OK or
 * SLUICE_ENOMEM. */
SLUICE__TRACE_HIDDEN int sluice__trace_sink_init(struct sluice__trace_sink *k, const sluice_trace_t *t,
                                                 const sluice_trace_run_options_t *opt, sluice_trace_run_result_t *res);
SLUICE__TRACE_HIDDEN void sluice__trace_sink_free(struct sluice__trace_sink *k);

/* `TIME emit|drop|discard KEY VALUE` of call step `step`; `successor` is
 * the step of the call that replaced it (drops only), or SIZE_MAX. */
SLUICE__TRACE_HIDDEN void sluice__trace_put_value(struct sluice__trace_sink *k, sluice_trace_output_kind_t kind,
                                                  uint64_t time_ms, size_t step, size_t successor);
/* `TIME pending KEY yes|no`. */
SLUICE__TRACE_HIDDEN void sluice__trace_put_pending(struct sluice__trace_sink *k, uint64_t time_ms, size_t step,
                                                    bool yes);
/* `TIME quota KEY remaining=R full=F retry=S|never` from the core's quota
 * (ns, rounded up to ms here), followed, when `detail` has several quotas,
 * by `TIME quota KEY policy=NAME remaining=R full=F retry=S` for each, in
 * the plan's order (the names are the step's plan's). */
SLUICE__TRACE_HIDDEN void sluice__trace_put_quota(struct sluice__trace_sink *k, uint64_t time_ms, size_t step,
                                                  const sluice_quota_t *q, const sluice_plan_detail_t *detail);

/* Formats a message into a run result's message (overwrites it). */
SLUICE__TRACE_HIDDEN void sluice__trace_set_message(sluice_trace_run_result_t *res, const char *fmt, ...)
#if defined(__GNUC__) || defined(__clang__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

#endif /* SLUICE_TRACE_FORMAT_INTERNAL_H */
