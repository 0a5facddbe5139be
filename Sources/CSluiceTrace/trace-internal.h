/*
 * trace-internal.h — what trace.c (parser, manual runner) and realtime.c
 * (real-loop runner) share: the layout of a parsed trace and the one place
 * that turns a thing the limiter did into an output line. Not installed;
 * every symbol is sluice__-prefixed and hidden.
 */
#ifndef SLUICE_TRACE_INTERNAL_H
#define SLUICE_TRACE_INTERNAL_H

#include "sluice_trace.h"

#if defined(__GNUC__) || defined(__clang__)
#  define SLUICE__TRACE_HIDDEN __attribute__((visibility("hidden")))
#else
#  define SLUICE__TRACE_HIDDEN
#endif

/* Step flags. */
#define SLUICE__STEP_HAS_COST 1u /* a cost= field was written */
#define SLUICE__STEP_DISCARD 2u  /* close discard */

/* One step. KEY and VALUE live in trace->text: the key at text_off, the
 * value right after it. */
struct sluice__trace_step {
    uint64_t time_ms;
    uint64_t cost; /* call, quota: 1 when absent; 0 otherwise */
    size_t text_off;
    size_t line;
    uint32_t value_len;
    uint16_t key_len;
    uint8_t verb;  /* sluice_trace_verb_t */
    uint8_t flags; /* SLUICE__STEP_* */
};

struct sluice_trace {
    sluice_policy_t policy; /* the core's policy, ns */
    struct sluice__trace_step *steps;
    size_t nsteps;
    size_t steps_cap;
    char *text; /* keys and values, not NUL-terminated */
    size_t text_len;
    size_t text_cap;
    size_t ncalls;  /* steps that are calls */
    size_t lines;   /* lines of the input */
    size_t max_kv;  /* largest key_len + value_len of a step */
    bool v2;        /* a cost= field or a quota line */
};

static inline const char *sluice__step_key(const sluice_trace_t *t, const struct sluice__trace_step *s) {
    return t->text + s->text_off;
}

static inline const char *sluice__step_value(const sluice_trace_t *t, const struct sluice__trace_step *s) {
    return t->text + s->text_off + s->key_len;
}

/* The fixed seed of both runners: the same order of keys at one instant on
 * every run. */
#define SLUICE__TRACE_SEED0 UINT64_C(0x736c756963652d74) /* "sluice-t" */
#define SLUICE__TRACE_SEED1 UINT64_C(0x726163652d763100) /* "race-v1" */

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

/* Prepares a sink (one allocation). Returns SLUICE_TRACE_OK or
 * SLUICE_TRACE_ENOMEM. */
SLUICE__TRACE_HIDDEN int sluice__trace_sink_init(struct sluice__trace_sink *k, const sluice_trace_t *t,
                                                 const sluice_trace_run_options_t *opt,
                                                 sluice_trace_run_result_t *res);
SLUICE__TRACE_HIDDEN void sluice__trace_sink_free(struct sluice__trace_sink *k);

/* `TIME emit|drop|discard KEY VALUE` of call step `step`; `successor` is
 * the step of the call that replaced it (drops only), or SIZE_MAX. */
SLUICE__TRACE_HIDDEN void sluice__trace_put_value(struct sluice__trace_sink *k, sluice_trace_output_kind_t kind,
                                                  uint64_t time_ms, size_t step, size_t successor);
/* `TIME pending KEY yes|no`. */
SLUICE__TRACE_HIDDEN void sluice__trace_put_pending(struct sluice__trace_sink *k, uint64_t time_ms, size_t step,
                                                    bool yes);
/* `TIME quota KEY remaining=R full=F retry=S|never` from the core's quota
 * (ns, rounded up to ms here). */
SLUICE__TRACE_HIDDEN void sluice__trace_put_quota(struct sluice__trace_sink *k, uint64_t time_ms, size_t step,
                                                  const sluice_quota_t *q);

/* Formats a message into a run result's message (overwrites it). */
SLUICE__TRACE_HIDDEN void sluice__trace_set_message(sluice_trace_run_result_t *res, const char *fmt, ...)
#if defined(__GNUC__) || defined(__clang__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

#endif /* SLUICE_TRACE_INTERNAL_H */
