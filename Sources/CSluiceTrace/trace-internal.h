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
#define SLUICE__STEP_HAS_PLAN 4u /* a plan= field was written */

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
    uint16_t plan; /* call, quota: the plan's index (0, the default, when no plan= was written) */
};

/* A quota of the header (format v3): a rate policy line and its name. */
struct sluice__trace_quota {
    char name[SLUICE_PLAN_NAME_MAX + 1];
    bool named; /* a name= was written (a lone quota is named "default") */
    uint64_t limit, per_ms, burst;
};

/* A plan of the header: `plan NAME` and the quota lines after it, or the
 * one implicit plan "default" of a trace without plan lines. */
struct sluice__trace_plan {
    char name[SLUICE_PLAN_NAME_MAX + 1];
    size_t line;    /* its `plan` line (0 for the implicit plan) */
    uint32_t first; /* its quotas: quotas[first .. first + n) */
    uint32_t n;
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
    /* Rate traces: the plans of the header (one implicit plan "default"
     * without plan lines) and their quotas. `table`: the trace needs a
     * limiter of plans (format v3: plan lines, or several quotas); the
     * table is then also given in the core's terms (plans_c). */
    struct sluice__trace_plan *plans;
    uint32_t nplans;
    struct sluice__trace_quota *quotas;
    uint32_t nquotas;
    bool table;
    sluice_plans_t plans_c;
    sluice_plan_t *plan_c;
    sluice_rate_quota_t *quota_c;
};

/* The name of quota `q` of plan `p` (a trace with plans). */
static inline const char *sluice__trace_quota_name(const sluice_trace_t *t, uint32_t p, uint32_t q) {
    return t->quotas[t->plans[p].first + q].name;
}

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
