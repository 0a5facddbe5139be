/*
 * answers.c — sluice_trace_print_answers() and sluice_trace_print_events()
 * (sluice_trace.h): the lines of a trace run by another limiter (a rate
 * trace's decisions; a timed trace's events), printed through format.c as
 * the manual runner prints them.
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

int sluice_trace_print_events(const sluice_trace_t *trace, const sluice_trace_event_t *events, size_t n,
                              const sluice_trace_run_options_t *options, sluice_trace_run_result_t *result) {
    sluice_trace_run_result_t local;
    if (result == NULL) result = &local;
    memset(result, 0, sizeof *result);
    if (trace == NULL || (events == NULL && n != 0) || trace->policy.kind == SLUICE_RATE) {
        sluice__trace_set_message(result, "%s",
                                  trace == NULL    ? "no trace"
                                  : events == NULL ? "no events"
                                                   : "a rate policy (see sluice_trace_print_answers)");
        return SLUICE_EINVAL;
    }
    /* every event names a step of its kind, before anything is printed */
    for (size_t i = 0; i < n; i++) {
        const sluice_trace_event_t *e = &events[i];
        bool value =
            e->kind == SLUICE_TRACE_OUT_EMIT || e->kind == SLUICE_TRACE_OUT_DROP || e->kind == SLUICE_TRACE_OUT_DISCARD;
        sluice_trace_verb_t want = value ? SLUICE_TRACE_CALL : SLUICE_TRACE_PENDING;
        bool ok = (value || e->kind == SLUICE_TRACE_OUT_PENDING) && e->step < trace->nsteps &&
                  trace->steps[e->step].verb == want &&
                  (e->kind != SLUICE_TRACE_OUT_DROP || e->successor == SIZE_MAX ||
                   (e->successor < trace->nsteps && trace->steps[e->successor].verb == SLUICE_TRACE_CALL));
        if (!ok) {
            sluice__trace_set_message(result, "event %zu names no step of its kind", i);
            return SLUICE_EINVAL;
        }
    }
    unsigned char *seen = calloc(trace->nsteps ? trace->nsteps : 1, 1);
    struct sluice__trace_sink sink;
    if (!seen || sluice__trace_sink_init(&sink, trace, options, result) != SLUICE_OK) {
        free(seen);
        sluice__trace_set_message(result, "out of memory");
        return SLUICE_ENOMEM;
    }
    int rc = SLUICE_OK;
    for (size_t i = 0; i < n && rc == SLUICE_OK; i++) {
        const sluice_trace_event_t *e = &events[i];
        if (seen[e->step]) {
            sluice__trace_set_message(result, "line %zu: reported twice", trace->steps[e->step].line);
            rc = SLUICE_ECORRUPT;
            break;
        }
        seen[e->step] = 1;
        if (e->kind == SLUICE_TRACE_OUT_PENDING)
            sluice__trace_put_pending(&sink, e->time_ms, e->step, e->yes);
        else
            sluice__trace_put_value(&sink, e->kind, e->time_ms, e->step,
                                    e->kind == SLUICE_TRACE_OUT_DROP ? e->successor : SIZE_MAX);
    }
    for (size_t i = 0; i < trace->nsteps && rc == SLUICE_OK; i++) {
        sluice_trace_verb_t v = trace->steps[i].verb;
        if ((v == SLUICE_TRACE_CALL || v == SLUICE_TRACE_PENDING) && !seen[i]) {
            sluice__trace_set_message(result, "line %zu: %s", trace->steps[i].line,
                                      v == SLUICE_TRACE_CALL ? "its value never ended" : "never answered");
            rc = SLUICE_ECORRUPT;
        }
    }
    sluice__trace_sink_free(&sink);
    free(seen);
    return rc;
}
