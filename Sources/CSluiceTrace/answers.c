/*
 * answers.c — sluice_trace_print_answers() (sluice_trace.h): the lines of a
 * rate trace decided by another limiter, printed through format.c as the
 * manual runner prints them.
 */
#include "format-internal.h"

#include <stdlib.h>
#include <string.h>

int sluice_trace_print_answers(const sluice_trace_t *trace, const sluice_trace_answer_t *answers,
                               const sluice_trace_run_options_t *options, sluice_trace_run_result_t *result) {
    sluice_trace_run_result_t local;
    if (result == NULL) result = &local;
    memset(result, 0, sizeof *result);
    if (trace == NULL || (answers == NULL && trace->nsteps != 0) || trace->policy.kind != SLUICE_RATE) {
        sluice__trace_set_message(result, "%s",
                                  trace == NULL     ? "no trace"
                                  : answers == NULL ? "no answers"
                                                    : "not a rate policy");
        return SLUICE_EINVAL;
    }
    struct sluice__trace_sink sink;
    if (sluice__trace_sink_init(&sink, trace, options, result) != SLUICE_OK) {
        sluice__trace_set_message(result, "out of memory");
        return SLUICE_ENOMEM;
    }
    for (size_t i = 0; i < trace->nsteps; i++) {
        const struct sluice__trace_step *s = &trace->steps[i];
        if (s->verb == SLUICE_TRACE_CALL)
            sluice__trace_put_value(&sink, answers[i].emitted ? SLUICE_TRACE_OUT_EMIT : SLUICE_TRACE_OUT_DROP,
                                    s->time_ms, i, SIZE_MAX);
        else if (s->verb == SLUICE_TRACE_PENDING)
            sluice__trace_put_pending(&sink, s->time_ms, i, false);
        else if (s->verb == SLUICE_TRACE_QUOTA)
            sluice__trace_put_quota(&sink, s->time_ms, i, &answers[i].quota,
                                    answers[i].detail.nquotas ? &answers[i].detail : NULL);
    }
    sluice__trace_sink_free(&sink);
    return SLUICE_OK;
}
