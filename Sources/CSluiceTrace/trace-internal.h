/*
 * trace-internal.h — the layout of a parsed trace, written by parse.c and
 * read by the output lines (format.c) and the runners (run.c, realtime.c).
 * Not installed; every symbol is sluice__-prefixed and hidden.
 */
#ifndef SLUICE_TRACE_INTERNAL_H
#define SLUICE_TRACE_INTERNAL_H

#include "sluice_trace.h"

#if defined(__GNUC__) || defined(__clang__)
#define SLUICE__TRACE_HIDDEN __attribute__((visibility("hidden")))
#else
#define SLUICE__TRACE_HIDDEN
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
    size_t ncalls; /* steps that are calls */
    size_t lines;  /* lines of the input */
    size_t max_kv; /* largest key_len + value_len of a step */
    bool v2;       /* a cost= field or a quota line */
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

#endif /* SLUICE_TRACE_INTERNAL_H */
