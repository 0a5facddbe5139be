/* plans.c — a rate limiter's table of plans: checking a table, building
 * and installing it, finding a plan by name, and the quota sets' lifetime
 * (plans-internal.h). The decisions are policy-plans.c's. */
#include "plans-internal.h"

#include "hash-internal.h"
#include "policy-rate.h"

#include <stdio.h>
#include <string.h>

/* ---- checks ---- */

bool sluice_plan_name_valid(const char *s, size_t n) {
    if (!s || n < 1 || n > SLUICE_PLAN_NAME_MAX) return false;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (!((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == '.' ||
              c == '-'))
            return false;
    }
    return true;
}

/* A NUL-terminated name of the table, checked (its length to *len). */
static bool name_ok(const char *s, size_t *len) {
    if (!s) return false;
    *len = strnlen(s, SLUICE_PLAN_NAME_MAX + 1);
    return sluice_plan_name_valid(s, *len);
}

#define SAY(code_, ...)                                                                                                \
    do {                                                                                                               \
        if (buf && cap) snprintf(buf, cap, __VA_ARGS__);                                                               \
        return code_;                                                                                                  \
    } while (0)

/* A printable excerpt of a name that failed the rule (at most 40 bytes). */
static void excerpt(const char *s, char out[48]) {
    size_t i = 0;
    if (!s) {
        strcpy(out, "(NULL)");
        return;
    }
    for (; s[i] && i < 40; i++) out[i] = (s[i] > 0x20 && s[i] < 0x7f) ? s[i] : '?';
    out[i] = 0;
    if (s[i]) strcpy(out + i, "...");
}

int sluice__plans_check(const sluice_plans_t *p, char *buf, size_t cap) {
    if (buf && cap) buf[0] = 0;
    if (!p) SAY(SLUICE_EINVAL, "plans is NULL");
    if (p->nplans < 1 || !p->plans) SAY(SLUICE_EINVAL, "plans.nplans is 0: a limiter of plans needs at least one plan");
    if (p->nplans > SLUICE_PLANS_MAX) SAY(SLUICE_ERANGE, "plans.nplans is above SLUICE_PLANS_MAX (65536)");
    if (p->max_quotas > SLUICE_PLAN_QUOTAS_MAX)
        SAY(SLUICE_ERANGE, "plans.max_quotas is above SLUICE_PLAN_QUOTAS_MAX (8)");
    char ex[48];
    for (size_t i = 0; i < p->nplans; i++) {
        const sluice_plan_t *pl = &p->plans[i];
        size_t len;
        if (!name_ok(pl->name, &len)) {
            excerpt(pl->name, ex);
            SAY(SLUICE_EINVAL, "plans[%zu].name '%s' is not 1 to 32 characters of A-Z a-z 0-9 _ . -", i, ex);
        }
        if (pl->nquotas < 1 || !pl->quotas)
            SAY(SLUICE_EINVAL, "plans[%zu].nquotas is 0: plan '%s' has no quota", i, pl->name);
        if (pl->nquotas > SLUICE_PLAN_QUOTAS_MAX)
            SAY(SLUICE_ERANGE, "plans[%zu].nquotas is %zu: plan '%s' has more than 8 quotas", i, pl->nquotas, pl->name);
        if (p->max_quotas && pl->nquotas > p->max_quotas)
            SAY(SLUICE_ERANGE, "plans[%zu].nquotas is %zu: plan '%s' has more quotas than plans.max_quotas (%zu)", i,
                pl->nquotas, pl->name, p->max_quotas);
        for (size_t j = 0; j < pl->nquotas; j++) {
            const sluice_rate_quota_t *q = &pl->quotas[j];
            if (!name_ok(q->name, &len)) {
                excerpt(q->name, ex);
                SAY(SLUICE_EINVAL, "plans[%zu].quotas[%zu].name '%s' is not 1 to 32 characters of A-Z a-z 0-9 _ . -", i,
                    j, ex);
            }
            for (size_t k = 0; k < j; k++)
                if (strcmp(pl->quotas[k].name, q->name) == 0)
                    SAY(SLUICE_EINVAL, "plans[%zu].quotas[%zu].name '%s' is used twice in plan '%s'", i, j, q->name,
                        pl->name);
            if (q->limit < 1) SAY(SLUICE_EINVAL, "plans[%zu].quotas[%zu].limit is 0: at least 1 call per period", i, j);
            if (q->per_ns < 1) SAY(SLUICE_EINVAL, "plans[%zu].quotas[%zu].per_ns is below 1 ns", i, j);
            if (q->limit > SLUICE_RATE_MAX)
                SAY(SLUICE_ERANGE, "plans[%zu].quotas[%zu].limit is above SLUICE_RATE_MAX (10^12)", i, j);
            if (q->burst > SLUICE_RATE_MAX)
                SAY(SLUICE_ERANGE, "plans[%zu].quotas[%zu].burst is above SLUICE_RATE_MAX (10^12)", i, j);
            if (q->per_ns > SLUICE_DURATION_MAX)
                SAY(SLUICE_ERANGE, "plans[%zu].quotas[%zu].per_ns is above SLUICE_DURATION_MAX (10^18 ns)", i, j);
        }
        for (size_t k = 0; k < i; k++)
            if (strcmp(p->plans[k].name, pl->name) == 0)
                SAY(SLUICE_EINVAL, "plans[%zu].name '%s' is used twice (plans[%zu])", i, pl->name, k);
    }
    return 0;
}

int sluice_plans_check(const sluice_plans_t *plans, char *message, size_t cap) {
    return sluice__plans_check(plans, message, cap);
}

/* ---- building ---- */

/* Names are the operator's, never a client's, so the index's hash needs no
 * secret: any name looked up probes at most the longest run the table's own
 * names made. */
static const uint64_t name_seed[2] = { UINT64_C(0x736c75696365706c), UINT64_C(0x616e732d6e616d65) };

static uint32_t name_hash(const char *s, size_t len) { return (uint32_t)sluice__fast_hash_bytes(name_seed, s, len); }

/* Room for `more` new ids: grows the id arrays. */
static int reserve_ids(struct sluice__mem *mem, struct sluice__plans *pl, uint32_t more) {
    if (pl->nfree >= more) return 0;
    uint32_t cap = pl->nsets_cap ? pl->nsets_cap : 4;
    while (cap - pl->nsets_cap + pl->nfree < more) cap *= 2;
    struct sluice__qset **sets = sluice__mem_alloc(mem, (size_t)cap * sizeof *sets);
    uint32_t *free_ids = sluice__mem_alloc(mem, (size_t)cap * sizeof *free_ids);
    if (!sets || !free_ids) {
        if (sets) sluice__mem_release(mem, sets, (size_t)cap * sizeof *sets);
        if (free_ids) sluice__mem_release(mem, free_ids, (size_t)cap * sizeof *free_ids);
        return SLUICE_ENOMEM;
    }
    memset(sets, 0, (size_t)cap * sizeof *sets);
    if (pl->nsets_cap) memcpy(sets, pl->sets, (size_t)pl->nsets_cap * sizeof *sets);
    uint32_t nfree = 0;
    /* the new ids, highest first, below the old free ones: ids are handed out low first */
    for (uint32_t id = cap; id-- > pl->nsets_cap;) free_ids[nfree++] = id;
    if (pl->nfree) memcpy(free_ids + nfree, pl->free_ids, (size_t)pl->nfree * sizeof *free_ids);
    nfree += pl->nfree;
    if (pl->nsets_cap) {
        sluice__mem_release(mem, pl->sets, (size_t)pl->nsets_cap * sizeof *pl->sets);
        sluice__mem_release(mem, pl->free_ids, (size_t)pl->nsets_cap * sizeof *pl->free_ids);
    }
    pl->sets = sets;
    pl->free_ids = free_ids;
    pl->nfree = nfree;
    pl->nsets_cap = cap;
    return 0;
}

/* A set for plan p. */
static struct sluice__qset *qset_new(struct sluice__mem *mem, const sluice_plan_t *p) {
    struct sluice__qset *s = sluice__mem_alloc(mem, sizeof *s);
    if (!s) return NULL;
    memset(s, 0, sizeof *s);
    s->refs = 1; /* the plan's */
    s->n = (uint32_t)p->nquotas;
    s->min_burst = UINT64_MAX;
    s->t_lim = UINT64_MAX;
    for (uint32_t j = 0; j < s->n; j++) {
        const sluice_rate_quota_t *q = &p->quotas[j];
        const struct sluice__gcra *g = &s->q[j];
        sluice__gcra_setup(&s->q[j], q->limit, (uint64_t)q->per_ns, q->burst);
        /* the short path's copy: the fast path's numbers (t_lim 0: never) */
        struct sluice__qfast *f = &s->f[j];
        f->limit = g->limit;
        f->per = g->per;
        f->bt = g->bt;
        f->dt_max = g->bt_q + 1;
        f->c_limit = g->inv_limit.c;
        f->sh_limit = (uint8_t)g->inv_limit.sh;
        f->c_per = g->inv_per.c;
        f->sh_per = (uint8_t)g->inv_per.sh;
        if (g->per > UINT64_MAX / g->burst) s->wide = true; /* burst * per >= 2^64 */
        if (g->t_lim < s->t_lim) s->t_lim = g->t_lim;
        size_t len = strlen(q->name);
        memcpy(s->name[j], q->name, len + 1);
        s->name_len[j] = (uint8_t)len;
        if (s->q[j].every > s->every) s->every = s->q[j].every;
        if (s->q[j].burst < s->min_burst) s->min_burst = s->q[j].burst;
    }
    return s;
}

static void table_free(struct sluice__mem *mem, struct sluice__plan_table *t) {
    sluice__mem_release(mem, t->plan, (size_t)t->nplans * sizeof *t->plan);
    if (t->index) sluice__mem_release(mem, t->index, ((size_t)t->index_mask + 1) * sizeof *t->index);
    memset(t, 0, sizeof *t);
}

void sluice__plans_discard(struct sluice__mem *mem, struct sluice__plans_built *b) {
    if (b->sets) {
        for (uint32_t i = 0; i < b->table.nplans; i++)
            if (b->sets[i]) sluice__mem_release(mem, b->sets[i], sizeof *b->sets[i]);
        sluice__mem_release(mem, b->sets, (size_t)b->table.nplans * sizeof *b->sets);
    }
    table_free(mem, &b->table);
    b->sets = NULL;
}

int sluice__plans_build(struct sluice__mem *mem, struct sluice__plans *pl, const sluice_plans_t *p,
                        struct sluice__plans_built *b) {
    memset(b, 0, sizeof *b);
    /* ids for the new sets, reserved now so that installing cannot fail
     * (growing the id arrays changes nothing a call sees) */
    if (reserve_ids(mem, pl, (uint32_t)p->nplans)) return SLUICE_ENOMEM;
    uint32_t n = (uint32_t)p->nplans;
    uint32_t slots = 4;
    while (slots < 2 * n) slots <<= 1;
    b->table.nplans = n;
    b->table.plan = sluice__mem_alloc(mem, (size_t)n * sizeof *b->table.plan);
    b->table.index = sluice__mem_alloc(mem, (size_t)slots * sizeof *b->table.index);
    b->table.index_mask = slots - 1;
    b->sets = sluice__mem_alloc(mem, (size_t)n * sizeof *b->sets);
    if (b->sets) memset(b->sets, 0, (size_t)n * sizeof *b->sets);
    if (!b->table.plan || !b->table.index || !b->sets) goto nomem;
    memset(b->table.index, 0, (size_t)slots * sizeof *b->table.index);
    for (uint32_t i = 0; i < n; i++) {
        struct sluice__plan *pn = &b->table.plan[i];
        size_t len = strlen(p->plans[i].name);
        memcpy(pn->name, p->plans[i].name, len + 1);
        pn->name_len = (uint8_t)len;
        pn->set = UINT32_MAX; /* given at install */
        uint32_t h = name_hash(pn->name, len) & b->table.index_mask;
        while (b->table.index[h]) h = (h + 1) & b->table.index_mask;
        b->table.index[h] = i + 1;
        if (!(b->sets[i] = qset_new(mem, &p->plans[i]))) goto nomem;
    }
    return 0;
nomem:
    sluice__plans_discard(mem, b);
    return SLUICE_ENOMEM;
}

void sluice__plans_install(struct sluice__mem *mem, struct sluice__plans *pl, struct sluice__plans_built *b) {
    /* the old table's plans let go of their sets (entries may still hold them) */
    struct sluice__plan_table old = pl->table;
    pl->table = b->table;
    for (uint32_t i = 0; i < pl->table.nplans; i++) {
        uint32_t id = pl->free_ids[--pl->nfree];
        pl->sets[id] = b->sets[i];
        pl->table.plan[i].set = id;
        if (b->sets[i]->every > pl->every) pl->every = b->sets[i]->every;
    }
    for (uint32_t i = 0; i < old.nplans; i++) sluice__qset_release(mem, pl, old.plan[i].set);
    table_free(mem, &old);
    sluice__mem_release(mem, b->sets, (size_t)b->table.nplans * sizeof *b->sets);
    memset(b, 0, sizeof *b);
}

void sluice__qset_release(struct sluice__mem *mem, struct sluice__plans *pl, uint32_t id) {
    struct sluice__qset *s = pl->sets[id];
    if (--s->refs) return;
    sluice__mem_release(mem, s, sizeof *s);
    pl->sets[id] = NULL;
    pl->free_ids[pl->nfree++] = id;
}

int sluice__plans_create(struct sluice__mem *mem, const sluice_plans_t *p, struct sluice__plans **out, size_t *ext) {
    struct sluice__plans *pl = sluice__mem_alloc(mem, sizeof *pl);
    if (!pl) return SLUICE_ENOMEM;
    memset(pl, 0, sizeof *pl);
    uint32_t most = 0;
    for (size_t i = 0; i < p->nplans; i++)
        if (p->plans[i].nquotas > most) most = (uint32_t)p->plans[i].nquotas;
    pl->max_quotas = p->max_quotas ? (uint32_t)p->max_quotas : most;
    struct sluice__plans_built b;
    int rc = sluice__plans_build(mem, pl, p, &b);
    if (rc == 0) sluice__plans_install(mem, pl, &b);
    if (rc) {
        sluice__plans_free(mem, pl);
        return rc;
    }
    *ext = sluice__plans_ext(pl->max_quotas);
    *out = pl;
    return 0;
}

void sluice__plans_free(struct sluice__mem *mem, struct sluice__plans *pl) {
    if (!pl) return;
    for (uint32_t id = 0; id < pl->nsets_cap; id++)
        if (pl->sets[id]) sluice__mem_release(mem, pl->sets[id], sizeof *pl->sets[id]);
    if (pl->nsets_cap) {
        sluice__mem_release(mem, pl->sets, (size_t)pl->nsets_cap * sizeof *pl->sets);
        sluice__mem_release(mem, pl->free_ids, (size_t)pl->nsets_cap * sizeof *pl->free_ids);
    }
    table_free(mem, &pl->table);
    sluice__mem_release(mem, pl, sizeof *pl);
}

uint32_t sluice__plans_find(const struct sluice__plans *pl, const char *name, size_t len) {
    const struct sluice__plan_table *t = &pl->table;
    if (len == 0 || len > SLUICE_PLAN_NAME_MAX) return SLUICE__NONE;
    for (uint32_t h = name_hash(name, len) & t->index_mask;; h = (h + 1) & t->index_mask) {
        uint32_t v = t->index[h];
        if (!v) return SLUICE__NONE;
        const struct sluice__plan *p = &t->plan[v - 1];
        if (p->name_len == len && memcmp(p->name, name, len) == 0) return v - 1;
    }
}

void sluice__plans_forget(struct sluice_limiter *l, struct sluice__entry *e) {
    struct sluice__plans *pl = l->plans;
    uint32_t id = sluice__plans_set_of(e);
    if (pl->sets[id]->wide)
        sluice__mem_release(&l->mem, sluice__plans_block(e), sluice__plans_block_size(pl->max_quotas));
    sluice__qset_release(&l->mem, pl, id);
}
