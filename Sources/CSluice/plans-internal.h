/*
 * plans-internal.h — a rate limiter's table of plans (plans.c) and the
 * policy that decides under it (policy-plans.c). Internal.
 *
 * A plan names a quota set: an immutable list of up to
 * SLUICE_PLAN_QUOTAS_MAX named GCRA quotas. Each key's entry records the
 * set it was last charged under by its id (the entry's `token`), and holds
 * one TAT per quota of that set in its extra bytes (policy-plans.c). A set
 * lives while a plan of the current table names it or an entry records it
 * (its reference count), so replacing the plans (sluice_limiter_set_plans)
 * keeps every key's old quotas readable until the key is converted, freed
 * or forgotten.
 */
#ifndef SLUICE_PLANS_INTERNAL_H
#define SLUICE_PLANS_INTERNAL_H

#include "limiter-internal.h"

#if defined(__GNUC__) || defined(__clang__)
#pragma GCC visibility push(hidden)
#endif

/* A quota set: the quotas of one plan as a table defined them. */
struct sluice__qset {
    uint32_t refs;  /* entries that record it, + 1 while a plan of the table names it */
    uint32_t n;     /* quotas, 1..SLUICE_PLAN_QUOTAS_MAX */
    uint64_t every; /* the longest of its quotas' expiry spacings (sluice__gcra.every) */
    uint64_t min_burst;
    struct sluice__gcra q[SLUICE_PLAN_QUOTAS_MAX];
    char name[SLUICE_PLAN_QUOTAS_MAX][SLUICE_PLAN_NAME_MAX + 1];
    uint8_t name_len[SLUICE_PLAN_QUOTAS_MAX];
};

struct sluice__plan {
    uint32_t set; /* its quota set's id */
    uint8_t name_len;
    char name[SLUICE_PLAN_NAME_MAX + 1];
};

/* The plans of a table, as installed in a limiter. */
struct sluice__plan_table {
    struct sluice__plan *plan;
    uint32_t nplans;
    uint32_t *index; /* open addressing on the plan's name: plan index + 1, 0 for empty */
    uint32_t index_mask;
};

/* Everything a limiter of plans keeps (sluice_limiter.plans). */
struct sluice__plans {
    struct sluice__plan_table table;
    struct sluice__qset **sets; /* by id; NULL for a free id */
    uint32_t nsets_cap;
    uint32_t *free_ids; /* a stack of free ids below nsets_cap */
    uint32_t nfree;
    uint32_t max_quotas; /* the quotas every entry has room for */
    uint64_t every;      /* the longest expiry spacing of any set ever installed */
};

/* A table built for one limiter, ready to install (sluice__plans_build). */
struct sluice__plans_built {
    struct sluice__plan_table table;
    struct sluice__qset **sets; /* one new set per plan, in the table's order */
};

/* Checks a table (sluice_plans_check): NULL when valid, else the sentence
 * written to buf. */
int sluice__plans_check(const sluice_plans_t *p, char *buf, size_t cap);

/* Creates a limiter's plans from a valid table: *out, and the bytes each
 * entry needs for max_quotas quotas in *ext. SLUICE_ENOMEM. */
int sluice__plans_create(struct sluice__mem *mem, const sluice_plans_t *p, struct sluice__plans **out, size_t *ext);

/* Builds a valid table for a limiter's plans without changing what a call
 * sees (it reserves ids in `pl`: SLUICE_ENOMEM), then installs it (cannot
 * fail) or discards it. */
int sluice__plans_build(struct sluice__mem *mem, struct sluice__plans *pl, const sluice_plans_t *p,
                        struct sluice__plans_built *out);
void sluice__plans_install(struct sluice__mem *mem, struct sluice__plans *pl, struct sluice__plans_built *b);
void sluice__plans_discard(struct sluice__mem *mem, struct sluice__plans_built *b);

void sluice__plans_free(struct sluice__mem *mem, struct sluice__plans *pl);

/* A plan's index by name, or SLUICE__NONE. */
uint32_t sluice__plans_find(const struct sluice__plans *pl, const char *name, size_t len);

/* An entry starts or stops recording set `id`. */
static inline void sluice__qset_hold(struct sluice__plans *pl, uint32_t id) { pl->sets[id]->refs++; }
void sluice__qset_release(struct sluice__mem *mem, struct sluice__plans *pl, uint32_t id);

/* The bytes of an entry's quotas for max_quotas quotas: each TAT as its
 * full (8 bytes) and its remainder below the limit (5 bytes: a limit is
 * below 2^40), rounded up to keep entries 8-aligned. */
static inline size_t sluice__plans_ext(uint32_t max_quotas) { return ((size_t)max_quotas * 13u + 7u) & ~(size_t)7u; }

extern const struct sluice__policy_ops sluice__plans_ops;

/* A call of cost 1 under plan l->plan_arg on a key whose entry records
 * that plan's quota set (live, or idle in place), for the short path of
 * submit (limiter.c, call_live): each quota by rate's fast path. Fills the
 * whole of *d (and l->detail_arg); false, having changed nothing, when the
 * key needs converting or a quota is outside the fast path's bounds. */
bool sluice__plans_live(struct sluice_limiter *l, struct sluice__entry *e, uint64_t t, sluice_decision_t *d);

/* Plan `plan`'s quotas (nquotas, burst, limit, per_ns) into *det, zeroing the rest. */
void sluice__plans_describe(const struct sluice_limiter *l, uint32_t plan, sluice_plan_detail_t *det);

#if defined(__GNUC__) || defined(__clang__)
#pragma GCC visibility pop
#endif

#endif /* SLUICE_PLANS_INTERNAL_H */
