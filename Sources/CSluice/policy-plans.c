/* policy-plans.c — rate with several quotas per key and plans
 * (docs/semantics.md, "Several quotas on one key" and "Plans"): each call
 * is decided under its plan's quota set, all or nothing, after converting
 * the key's state from the set it was last charged under.
 *
 * An entry of this policy (its layout: plans-internal.h):
 *  - node.deadline: the latest `full` of its quotas, so the lazy expiry of
 *    policy-rate.c (reclaim, the sweep after each created key, the key cap)
 *    frees it exactly when every TAT has passed; the node is never armed;
 *  - node.link.next: the id of its quota set (plans-internal.h), held by
 *    the entry;
 *  - each quota's TAT, relative to the entry's last write and scaled by the
 *    quota's limit (a narrow set), or in a block of its own (a wide set);
 *    a call sees each as rate keeps one (policy-rate.c): `full` (the TAT
 *    rounded up) and the remainder r < limit, TAT = full - (r != 0) +
 *    r / limit (tat_of, store).
 *
 * Each quota is decided by rate's own arithmetic (sluice__rate_decide, its
 * 64-bit fast path or the exact one), so one quota here is the rate policy.
 *
 * Conversion of a TAT ahead of t from quota (L, per) to (L', per'), both
 * scaled: X = (TAT - t) * L is exact, and the new TAT is
 * t + ceil(X * per' / per) / L': the exact rational rounded up to the next
 * 1/L' ns. Converted once, no figure tells it from the exact one (every
 * comparison and rounding the rules make is against a multiple of 1/L' ns);
 * stored and converted again, the rounding is scaled by the next T''/T'
 * (docs/semantics.md, "Plans"), always toward later.
 * The product takes up to 164 bits: a 192-bit multiply and divide. */
#include "limiter-internal.h"
#include "plans-internal.h"
#include "policy-rate.h"

__extension__ typedef unsigned __int128 u128;

/* A key's quotas as a call sees them: each TAT as (full, r), 0/0 fresh. */
struct kstate {
    uint64_t full[SLUICE_PLAN_QUOTAS_MAX];
    uint64_t r[SLUICE_PLAN_QUOTAS_MAX];
};

/* ---- the entry's state (plans-internal.h) ---- */

/* Quota j's TAT of an entry recording set `s`, as (full, r). */
static void tat_of(const struct sluice__entry *e, const struct sluice__qset *s, uint32_t m, uint32_t j, uint64_t *full,
                   uint64_t *r) {
    if (s->wide) {
        const uint64_t *b = sluice__plans_block(e);
        *full = b[j];
        *r = b[m + j];
        return;
    }
    uint64_t x = sluice__plans_cx(e)[j], limit = s->q[j].limit;
    uint64_t q = x / limit;
    *r = x % limit;
    *full = x ? e->token + q + (*r != 0) : 0; /* (B + ceil(X / limit) never passes the clock's end) */
}

/* Every quota's TAT (full[j], r[j]) of an admitted call at t into an entry
 * recording set `s` (its block made already when `s` is wide). */
static void store(struct sluice__entry *e, const struct sluice__qset *s, uint32_t m, const uint64_t *full,
                  const uint64_t *r, uint64_t t) {
    if (s->wide) {
        uint64_t *b = sluice__plans_block(e);
        for (uint32_t j = 0; j < s->n; j++) {
            b[j] = full[j];
            b[m + j] = r[j];
        }
        return;
    }
    uint64_t *x = sluice__plans_x(e);
    for (uint32_t j = 0; j < s->n; j++) /* an admitted TAT is at most burst * T ahead of t: X < 2^64 */
        x[j] = full[j] > t ? (uint64_t)((u128)(full[j] - (r[j] != 0) - t) * s->q[j].limit + r[j]) : 0;
    e->token = t;
}

/* ---- conversion ---- */

/* ceil(x * a / b), b >= 1; *over when it is 2^128 or more. */
static u128 muldiv_ceil(u128 x, uint64_t a, uint64_t b, bool *over) {
    u128 lo = (u128)(uint64_t)x * a;
    u128 hi = (u128)(uint64_t)(x >> 64) * a + (lo >> 64);
    uint64_t p2 = (uint64_t)(hi >> 64), p1 = (uint64_t)hi, p0 = (uint64_t)lo;
    u128 cur = p2;
    uint64_t q2 = (uint64_t)(cur / b);
    cur = ((cur % b) << 64) | p1;
    uint64_t q1 = (uint64_t)(cur / b);
    cur = ((cur % b) << 64) | p0;
    uint64_t q0 = (uint64_t)(cur / b);
    bool rest = cur % b != 0;
    u128 q = ((u128)q1 << 64) | q0;
    *over = q2 != 0 || (rest && q == ~(u128)0);
    return q + rest;
}

/* A TAT (full, r) of quota `from`, ahead of t, as a TAT of quota `to`. */
static void convert(const struct sluice__gcra *from, const struct sluice__gcra *to, uint64_t full, uint64_t r,
                    uint64_t t, uint64_t *out_full, uint64_t *out_r) {
    if (from->limit == to->limit && from->per == to->per) { /* T' = T: the same TAT */
        *out_full = full;
        *out_r = r;
        return;
    }
    u128 x = (u128)(full - (r != 0) - t) * from->limit + r; /* (TAT - t) * L */
    bool over;
    u128 y = muldiv_ceil(x, to->per, from->per, &over); /* (TAT' - t) * L' */
    u128 room = (u128)(UINT64_MAX - t) * to->limit;     /* the end of the clock */
    if (over || y >= room) {
        *out_full = UINT64_MAX;
        *out_r = 0;
        return;
    }
    uint64_t q = (uint64_t)(y / to->limit), rr = (uint64_t)(y % to->limit);
    *out_full = t + q + (rr != 0);
    *out_r = rr;
}

/* The key's state under set `s` (id `sid`) at t: as stored when the entry
 * records `s`, converted by quota name from the set it records otherwise,
 * fresh without an entry or once every TAT has passed. */
static void load(const struct sluice_limiter *l, const struct sluice__entry *e, const struct sluice__qset *s,
                 uint32_t sid, uint64_t t, struct kstate *k) {
    uint32_t m = l->plans->max_quotas;
    if (!e || e->node.deadline <= t) {
        memset(k, 0, sizeof *k);
        return;
    }
    if (sluice__plans_set_of(e) == sid) {
        for (uint32_t j = 0; j < s->n; j++) tat_of(e, s, m, j, &k->full[j], &k->r[j]);
        return;
    }
    const struct sluice__qset *old = l->plans->sets[sluice__plans_set_of(e)];
    for (uint32_t j = 0; j < s->n; j++) {
        k->full[j] = k->r[j] = 0;
        for (uint32_t i = 0; i < old->n; i++) {
            if (old->name_len[i] != s->name_len[j] || memcmp(old->name[i], s->name[j], s->name_len[j]) != 0) continue;
            uint64_t f, r;
            tat_of(e, old, m, i, &f, &r);
            if (f > t) convert(&old->q[i], &s->q[j], f, r, t, &k->full[j], &k->r[j]);
            break;
        }
    }
}

/* ---- decisions ---- */

static void figures_of(const struct sluice__gcra *g, sluice_quota_figures_t *f) {
    f->burst = g->burst;
    f->limit = g->limit;
    f->per_ns = g->per;
}

/* A refused call: nothing changes; the overall retry, the key's full as it
 * stands (converted), and each quota's figures when asked for. */
static void refuse(const struct sluice_limiter *l, const struct sluice__qset *s, const struct kstate *ks,
                   const struct sluice__rate_res *o, uint32_t refused, uint64_t cost, uint64_t t,
                   sluice_decision_t *d) {
    uint64_t at = t, full = t;
    for (uint32_t j = 0; j < s->n; j++) {
        if (o[j].kind == SLUICE_DROPPED && o[j].at > at) at = o[j].at;
        uint64_t f = ks->full[j] > t ? ks->full[j] : t;
        if (f > full) full = f;
    }
    d->kind = SLUICE_DROPPED;
    d->at = at;
    d->full = full;
    d->remaining = 0;
    sluice_plan_detail_t *det = l->detail_arg;
    if (!det) return;
    det->refused = refused;
    for (uint32_t j = 0; j < s->n; j++) {
        sluice_quota_t q;
        sluice__rate_quota(&s->q[j], ks->full[j], ks->r[j], cost, t, &q);
        det->quotas[j].remaining = q.remaining;
        det->quotas[j].full = q.full;
        det->quotas[j].retry = q.retry;
    }
}

/* An admitted call: every quota's new TAT into the entry (which records
 * set `s` already), the decision and each quota's figures. */
static void admit(struct sluice_limiter *l, struct sluice__entry *e, const struct sluice__qset *s,
                  const struct sluice__rate_res *o, uint64_t t, sluice_decision_t *d) {
    uint64_t full = 0, remaining = UINT64_MAX, fulls[SLUICE_PLAN_QUOTAS_MAX], rs[SLUICE_PLAN_QUOTAS_MAX];
    for (uint32_t j = 0; j < s->n; j++) {
        fulls[j] = o[j].deadline;
        rs[j] = o[j].token;
        if (o[j].deadline > full) full = o[j].deadline;
        if (o[j].remaining < remaining) remaining = o[j].remaining;
    }
    store(e, s, l->plans->max_quotas, fulls, rs, t);
    e->node.deadline = full;
    /* a conversion may bring a key's full below the expiry's lower bound */
    if (full < l->rate_lb) l->rate_lb = full;
    if (full < l->rate_pass_min) l->rate_pass_min = full;
    d->kind = SLUICE_EMITTED;
    d->at = t;
    d->full = full;
    d->remaining = remaining;
    sluice_plan_detail_t *det = l->detail_arg;
    if (!det) return;
    det->refused = 0;
    for (uint32_t j = 0; j < s->n; j++) {
        det->quotas[j].remaining = o[j].remaining;
        det->quotas[j].full = o[j].deadline;
        det->quotas[j].retry = t;
    }
}

/* A call of `cost` at t on the key (idx, or SLUICE__NONE) under plan
 * l->plan_arg, detail to l->detail_arg: every case. */
static int call(struct sluice_limiter *l, const struct sluice__keyref *k, uint32_t idx, uint64_t token, uint64_t cost,
                uint64_t t, sluice_decision_t *d) {
    (void)token;
    struct sluice__plans *pl = l->plans;
    uint32_t sid = pl->table.plan[l->plan_arg].set;
    const struct sluice__qset *s = pl->sets[sid];
    struct sluice__entry *e = idx != SLUICE__NONE ? sluice__entry_of(l, idx) : NULL;
    struct kstate ks;
    load(l, e, s, sid, t, &ks);
    struct sluice__rate_res o[SLUICE_PLAN_QUOTAS_MAX];
    uint32_t refused = 0;
    for (uint32_t j = 0; j < s->n; j++) {
        sluice__rate_decide(&s->q[j], ks.full[j], ks.r[j], cost, t, &o[j]);
        if (o[j].kind == SLUICE_DROPPED) refused |= 1u << j;
    }
    if (refused) {
        refuse(l, s, &ks, o, refused, cost, t, d);
        return 0;
    }
    /* a wide set's entry needs its block: made before anything changes */
    const struct sluice__qset *was = e ? pl->sets[sluice__plans_set_of(e)] : NULL;
    uint64_t *block = NULL;
    if (s->wide && !(was && was->wide) &&
        !(block = sluice__mem_alloc(&l->mem, sluice__plans_block_size(pl->max_quotas))))
        return SLUICE_ENOMEM;
    if (!e) {
        int rc = sluice__limiter_add_key(l, k, &idx);
        if (rc) {
            sluice__mem_release(&l->mem, block, sluice__plans_block_size(pl->max_quotas));
            return rc;
        }
        e = sluice__entry_of(l, idx);
        sluice__plans_set_set(e, sid);
        sluice__qset_hold(pl, sid);
        if (block) e->token = (uint64_t)(uintptr_t)block;
        admit(l, e, s, o, t, d);
        sluice__rate_step(l, idx, t);
        return 0;
    }
    if (was != s) {
        uint32_t was_id = sluice__plans_set_of(e);
        if (was->wide && !s->wide)
            sluice__mem_release(&l->mem, sluice__plans_block(e), sluice__plans_block_size(pl->max_quotas));
        if (block) e->token = (uint64_t)(uintptr_t)block;
        sluice__plans_set_set(e, sid);
        sluice__qset_hold(pl, sid);
        sluice__qset_release(&l->mem, pl, was_id);
    }
    admit(l, e, s, o, t, d);
    return 0;
}

void sluice__plans_refused_detail(const struct sluice__qset *s, const struct sluice__entry *e, uint32_t refused,
                                  uint64_t t, sluice_plan_detail_t *det) {
    det->refused = refused;
    for (uint32_t j = 0; j < s->n; j++) {
        sluice_quota_t q;
        uint64_t full, r;
        tat_of(e, s, 0, j, &full, &r); /* (s is narrow: the short path) */
        /* (a full <= t reads as fresh, whatever the remainder) */
        sluice__rate_quota(&s->q[j], full, r, 1, t, &q);
        det->quotas[j].remaining = q.remaining;
        det->quotas[j].full = q.full;
        det->quotas[j].retry = q.retry;
    }
}

bool sluice__plans_live(struct sluice_limiter *l, struct sluice__entry *e, uint64_t t, sluice_decision_t *d) {
    const struct sluice__plans *pl = l->plans;
    uint32_t sid = pl->table.plan[l->plan_arg].set;
    if (SLUICE__UNLIKELY(sluice__plans_set_of(e) != sid)) return false; /* a conversion: the general path */
    return sluice__plans_row(e, pl->sets[sid], t, d, l->detail_arg);
}

/* The quota read under plan l->plan_arg, each quota to l->detail_arg. */
static void quota(const struct sluice_limiter *l, uint32_t idx, uint64_t cost, uint64_t t, sluice_quota_t *out) {
    const struct sluice__plans *pl = l->plans;
    uint32_t sid = pl->table.plan[l->plan_arg].set;
    const struct sluice__qset *s = pl->sets[sid];
    struct kstate ks;
    load(l, idx != SLUICE__NONE ? sluice__entry_of(l, idx) : NULL, s, sid, t, &ks);
    sluice_plan_detail_t *det = l->detail_arg;
    out->burst = s->min_burst;
    out->remaining = UINT64_MAX;
    out->full = t;
    out->retry = t;
    uint32_t refused = 0;
    for (uint32_t j = 0; j < s->n; j++) {
        sluice_quota_t q;
        sluice__rate_quota(&s->q[j], ks.full[j], ks.r[j], cost, t, &q);
        if (q.remaining < out->remaining) out->remaining = q.remaining;
        if (q.full > out->full) out->full = q.full;
        if (q.retry > out->retry) out->retry = q.retry;
        if (q.retry > t) refused |= 1u << j;
        if (det) {
            det->quotas[j].remaining = q.remaining;
            det->quotas[j].full = q.full;
            det->quotas[j].retry = q.retry;
        }
    }
    if (det) det->refused = refused;
}

void sluice__plans_describe(const struct sluice_limiter *l, uint32_t plan, sluice_plan_detail_t *det) {
    const struct sluice__qset *s = l->plans->sets[l->plans->table.plan[plan].set];
    memset(det, 0, sizeof *det);
    det->plan = plan;
    det->nquotas = s->n;
    for (uint32_t j = 0; j < s->n; j++) figures_of(&s->q[j], &det->quotas[j]);
}

/* ---- the rest of the policy ---- */

static const char *explain(const sluice_policy_t *p, int *code) {
    *code = SLUICE_EINVAL;
    if (p->limit || p->per_ns || p->burst)
        return "policy has a rate's numbers and plans too: with plans, use sluice_rate_plans() (the numbers are the "
               "plans' quotas)";
    return NULL;
}

static size_t setup(struct sluice_limiter *l, const sluice_policy_t *p) {
    (void)p;
    l->pass_through = false;
    sluice__rate_expiry_reset(l, l->plans->every);
    return sluice__plans_ext(l->plans->max_quotas);
}

static bool never_schedules(const sluice_policy_t *p) {
    (void)p;
    return true;
}

/* Only close() reaches it (entries arm no timer): frees an expired entry. */
static void fire_now(struct sluice_limiter *l, uint32_t idx) { sluice__limiter_remove_key(l, idx); }

static size_t fire_into(struct sluice_limiter *l, uint32_t idx, sluice_emission_t *out) {
    (void)out;
    sluice__limiter_remove_key(l, idx);
    return 0;
}

static const char *check(const struct sluice_limiter *l, const struct sluice__entry *e) {
    const struct sluice__plans *pl = l->plans;
    if (sluice__wheel_node_armed(&e->node)) return "plans entry with an armed timer";
    if (e->node.deadline < l->rate_lb) return "plans entry's full below the sweep's lower bound";
    if (e->flags & (SLUICE__F_PENDING | SLUICE__F_POLICY)) return "plans entry with a flag set";
    uint32_t sid = sluice__plans_set_of(e);
    if (sid >= pl->nsets_cap || !pl->sets[sid]) return "plans entry records no quota set";
    const struct sluice__qset *s = pl->sets[sid];
    if (s->refs < 1) return "plans entry's quota set has no reference";
    if (s->wide && !sluice__plans_block(e)) return "plans entry of a wide set without its block";
    uint64_t full = 0;
    for (uint32_t j = 0; j < s->n; j++) {
        if (!s->wide && sluice__plans_cx(e)[j] > (u128)s->q[j].burst * s->q[j].per)
            return "plans entry's quota more than burst * T ahead of its last write";
        uint64_t f, r;
        tat_of(e, s, pl->max_quotas, j, &f, &r);
        if (r >= s->q[j].limit) return "plans remainder not below its quota's limit";
        if (f == 0 && r != 0) return "plans TAT below zero";
        if (f > full) full = f;
    }
    if (full != e->node.deadline) return "plans entry's full is not its quotas' latest";
    return NULL;
}

const struct sluice__policy_ops sluice__plans_ops = { .kind = SLUICE_RATE,
                                                      .name = "rate plans",
                                                      SLUICE__POLICY_OPS_COMMON,
                                                      .flush = sluice__rate_flush,
                                                      .quota = quota,
                                                      .reclaim = sluice__rate_reclaim,
                                                      .next = sluice__rate_next };
