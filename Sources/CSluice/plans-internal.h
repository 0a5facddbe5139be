/*
 * plans-internal.h — a rate limiter's table of plans (plans.c) and the
 * policy that decides under it (policy-plans.c). Internal.
 *
 * A plan names a quota set: an immutable list of up to
 * SLUICE_PLAN_QUOTAS_MAX named GCRA quotas. Each key's entry records the
 * set it was last charged under by its id, and holds one TAT per quota of
 * that set (the entry's layout is below). A set
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

/* One quota of a set as the short path reads it (sluice__plans_row): the
 * numbers of rate's fast path (sluice__rate_decide_fast), 56 bytes. */
struct sluice__qfast {
    uint64_t limit, per;
    uint64_t bt;             /* burst * per (scaled burst * T) */
    uint64_t dt_max;         /* floor(bt / limit) + 1: an idle time past which the quota is fresh */
    uint64_t c_limit, c_per; /* floor(n / limit), floor(n / per) by reciprocals (sluice__recip) */
    uint8_t sh_limit, sh_per;
};

/* A quota set: the quotas of one plan as a table defined them. */
struct sluice__qset {
    uint32_t refs;  /* entries that record it, + 1 while a plan of the table names it */
    uint32_t n;     /* quotas, 1..SLUICE_PLAN_QUOTAS_MAX */
    bool wide;      /* a quota's burst * per is 2^64 or more: entries keep their TATs in a block */
    uint64_t t_lim; /* the short path applies at t < t_lim: every quota's fast path does (0: never) */
    struct sluice__qfast f[SLUICE_PLAN_QUOTAS_MAX];
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

/* ---- an entry of a limiter of plans ----
 * It keeps, besides its key:
 *  - node.deadline: the latest `full` (TAT rounded up) of its quotas
 *    (policy-plans.c);
 *  - node.link.next: the id of its quota set. The node is never armed
 *    (link.prev stays SLUICE__WHEEL_NONE), and the wheel reads the `next`
 *    of no unarmed node (wheel-internal.h);
 *  - its quotas' TATs, in one of two forms, by its set's `wide`:
 *     - narrow (every quota's burst * per below 2^64): `token` is B, the
 *       time of the entry's last write, and the m = max_quotas words after
 *       the entry hold each quota's X = (TAT - B) * limit, 0 for a TAT at
 *       or before B. The rules admit a call only when every new TAT is at
 *       most burst * T ahead of it, so X <= burst * per fits. A call at
 *       t >= B reads quota j as fresh once t - B >= dt_max, and as
 *       X - (t - B) * limit ahead of t otherwise: one word per quota and
 *       no division, all on the entry's line when m <= 3 (64 bytes);
 *     - wide: `token` points to a block of the limiter's (sluice__mem) with
 *       m TATs as rate keeps one (policy-rate.c): `full` (the TAT rounded
 *       up) and the remainder r < limit, TAT = full - (r != 0) + r / limit.
 *       The block is the entry's own, made when it first records a wide
 *       set and released when it records a narrow one or is freed
 *       (sluice__plans_forget).
 * So m quotas take 8 m bytes after the entry. */
static inline size_t sluice__plans_ext(uint32_t max_quotas) { return (size_t)max_quotas * 8u; }

static inline uint32_t sluice__plans_set_of(const struct sluice__entry *e) { return e->node.link.next; }
static inline void sluice__plans_set_set(struct sluice__entry *e, uint32_t id) { e->node.link.next = id; }

/* A narrow entry's words X[0..m), after the entry. */
static inline uint64_t *sluice__plans_x(struct sluice__entry *e) { return (uint64_t *)(void *)(e + 1); }
static inline const uint64_t *sluice__plans_cx(const struct sluice__entry *e) {
    return (const uint64_t *)(const void *)(e + 1);
}

/* A wide entry's block: full[0..m) then r[0..m), m = max_quotas. */
static inline size_t sluice__plans_block_size(uint32_t max_quotas) { return (size_t)max_quotas * 16u; }
static inline uint64_t *sluice__plans_block(const struct sluice__entry *e) { return (uint64_t *)(uintptr_t)e->token; }

extern const struct sluice__policy_ops sluice__plans_ops;

/* Each quota's figures of a refused call into *det (policy-plans.c): the
 * entry as it stands (it records set s), `refused` the refusing quotas. */
void sluice__plans_refused_detail(const struct sluice__qset *s, const struct sluice__entry *e, uint32_t refused,
                                  uint64_t t, sluice_plan_detail_t *det);

/* sluice__plans_row (below) on a set of n quotas, for B <= t < s->t_lim. */
static SLUICE__HOT_INLINE bool sluice__plans_row_n(struct sluice__entry *e, const struct sluice__qset *s, uint64_t t,
                                                   sluice_decision_t *d, sluice_plan_detail_t *det, uint32_t n) {
    uint64_t fresh[SLUICE_PLAN_QUOTAS_MAX];
    uint64_t *x = sluice__plans_x(e);
    uint64_t dt = t - e->token; /* the time since the entry's last write */
    uint64_t at = t;
    uint32_t refused = 0;
    for (uint32_t j = 0; j < n; j++) {
        const struct sluice__qfast *q = &s->f[j];
        /* (TAT - t) * limit, 0 once the TAT has passed: dt past dt_max
         * covers the whole of X <= bt, and the product stays below 2^62 */
        uint64_t used = (dt < q->dt_max ? dt : q->dt_max) * q->limit;
        uint64_t f = (x[j] > used ? x[j] - used : 0) + q->per;
        fresh[j] = f;
        if (f > q->bt) {
            struct sluice__recip inv = { q->c_limit, q->sh_limit };
            uint64_t a = t + sluice__recip_div(inv, f - q->bt + q->limit - 1);
            if (a > at) at = a;
            refused |= 1u << j;
        }
    }
    if (refused) {
        uint64_t dl = e->node.deadline;
        d->kind = SLUICE_DROPPED;
        d->at = at;
        d->full = dl > t ? dl : t; /* the latest full as it stands */
        d->remaining = 0;
        if (det) sluice__plans_refused_detail(s, e, refused, t, det);
        return true;
    }
    uint64_t full = 0, remaining = UINT64_MAX;
    for (uint32_t j = 0; j < n; j++) {
        const struct sluice__qfast *q = &s->f[j];
        struct sluice__recip inv_limit = { q->c_limit, q->sh_limit }, inv_per = { q->c_per, q->sh_per };
        uint64_t f = fresh[j];
        uint64_t nf = t + sluice__recip_div(inv_limit, f + q->limit - 1); /* the new TAT, rounded up */
        uint64_t rem = sluice__recip_div(inv_per, q->bt - f);
        x[j] = f;
        if (nf > full) full = nf;
        if (rem < remaining) remaining = rem;
        if (det) {
            det->quotas[j].remaining = rem;
            det->quotas[j].full = nf;
            det->quotas[j].retry = t;
        }
    }
    e->token = t;
    e->node.deadline = full;
    d->kind = SLUICE_EMITTED;
    d->at = t;
    d->full = full;
    d->remaining = remaining;
    if (det) det->refused = 0;
    return true;
}

/* The short path's row: a call of cost 1 at t on a key whose entry records
 * quota set s (live, or idle in place: a quota whose full <= t is fresh),
 * each quota by rate's fast path (sluice__rate_decide_fast, the same
 * arithmetic on the set's packed numbers), all or nothing. Brings the
 * entry to its new state and fills kind, at, full and remaining of *d, and
 * each quota's figures into *det when det is not NULL; false, having
 * changed nothing, when t is outside the fast path's bounds (a wide set's
 * are empty) or before the entry's last write. No conversion, so no lower
 * bound of the lazy expiry moves: an admitted call only raises every full
 * (a TAT moves to max(TAT, t) + T). */
static SLUICE__HOT_INLINE bool sluice__plans_row(struct sluice__entry *e, const struct sluice__qset *s, uint64_t t,
                                                 sluice_decision_t *d, sluice_plan_detail_t *det) {
    if (SLUICE__UNLIKELY((t >= s->t_lim) | (t < e->token))) return false;
    /* the usual counts by a constant, so that the loops unroll */
    switch (s->n) {
    case 1: return sluice__plans_row_n(e, s, t, d, det, 1);
    case 2: return sluice__plans_row_n(e, s, t, d, det, 2);
    case 3: return sluice__plans_row_n(e, s, t, d, det, 3);
    default: return sluice__plans_row_n(e, s, t, d, det, s->n);
    }
}

/* A call of cost 1 under plan l->plan_arg on a key with an entry, for the
 * short path of submit (limiter.c, call_live): sluice__plans_row when the
 * entry records that plan's quota set, each quota's figures to
 * l->detail_arg. False, having changed nothing, when the key needs
 * converting or the row's bounds do not hold. */
bool sluice__plans_live(struct sluice_limiter *l, struct sluice__entry *e, uint64_t t, sluice_decision_t *d);

/* Plan `plan`'s quotas (nquotas, burst, limit, per_ns) into *det, zeroing the rest. */
void sluice__plans_describe(const struct sluice_limiter *l, uint32_t plan, sluice_plan_detail_t *det);

#if defined(__GNUC__) || defined(__clang__)
#pragma GCC visibility pop
#endif

#endif /* SLUICE_PLANS_INTERNAL_H */
