/*
 * policy-rate.h — the rate (GCRA) policy (policy-rate.c): its operations table and
 * the row of a call on a live key, inline so that limiter.c's short path of
 * submit compiles it in (limiter-internal.h, "the row of a call on a live
 * key"). Internal.
 */
#ifndef SLUICE_POLICY_RATE_H
#define SLUICE_POLICY_RATE_H

#include "limiter-internal.h"

#if defined(__GNUC__) || defined(__clang__)
#pragma GCC visibility push(hidden)
#endif

extern const struct sluice__policy_ops sluice__rate_ops;

/* Fills a quota's numbers (burst 0 means limit) from valid inputs. */
void sluice__gcra_setup(struct sluice__gcra *g, uint64_t limit, uint64_t per, uint64_t burst);

/* Resets the lazy expiry (policy-rate.c) for entries idle once `every` ns
 * past their full: a limiter with no entries. */
void sluice__rate_expiry_reset(struct sluice_limiter *l, uint64_t every);

/* The lazy expiry, shared with the plans policy (policy-plans.c), whose
 * entries keep their latest full in node.deadline as rate's do: the sweep
 * after key `keep` was created at t, the reclaim and next ops, and flush
 * (nothing: a rate key is never pending). */
void sluice__rate_step(struct sluice_limiter *l, uint32_t keep, uint64_t t);
size_t sluice__rate_reclaim(struct sluice_limiter *l, uint64_t now, size_t max);
uint64_t sluice__rate_next(const struct sluice_limiter *l);
int sluice__rate_flush(struct sluice_limiter *l, uint32_t idx, uint64_t now);

/* A rate decision on a key's state, without changing anything: the key's
 * entry `deadline` and `token` (its TAT as deadline - (token != 0) +
 * token / limit ns; 0 and 0 for a key without an entry: an entry whose
 * deadline <= t is idle), a call of `cost` (1..SLUICE_RATE_MAX) at t.
 * kind: SLUICE_EMITTED (then at = t, full = deadline = the new deadline,
 * token = the new remainder, remaining) or SLUICE_DROPPED (at: the retry
 * time or SLUICE_NEVER, full; the rest unset). sluice__rate_decide takes
 * the 64-bit fast path when its bounds hold and the exact one otherwise;
 * sluice__rate_decide_exact is the exact 128-bit arithmetic alone (kept
 * for the differential test, ctests/test_rate_fast.c). Both give the same
 * result for every input. */
struct sluice__rate_res {
    int kind;
    uint64_t at, full, remaining, deadline, token;
};
void sluice__rate_decide(const struct sluice__gcra *g, uint64_t deadline, uint64_t token, uint64_t cost, uint64_t t,
                         struct sluice__rate_res *o);
void sluice__rate_decide_exact(const struct sluice__gcra *g, uint64_t deadline, uint64_t token, uint64_t cost,
                               uint64_t t, struct sluice__rate_res *o);
/* The fast path of sluice__rate_decide: the same rule in 64-bit arithmetic
 * relative to t, for t < rate_t_lim, a TAT at most burst * T ahead of t
 * (every TAT a call leaves is: it was admitted at a time <= t) and a cost
 * <= burst; false (nothing written) otherwise. Scaled by limit, x = TAT - t
 * <= burst * per + limit - 1 and fresh = x + cost * per <= 2 * burst * per
 * + limit - 1 fit in 63 bits, nothing reaches the end of the clock (t + 2 *
 * burst * T + 3 <= UINT64_MAX) so the room is t + burst * T, and the three
 * divisions (the new TAT by limit, remaining by per, a retry time by limit)
 * are multiplications by reciprocals (numerators below 2^62). Inline for
 * the short path of submit (sluice__rate_live). */
static SLUICE__HOT_INLINE bool sluice__rate_decide_fast(const struct sluice__gcra *g, uint64_t deadline, uint64_t token,
                                                        uint64_t cost, uint64_t t, struct sluice__rate_res *o) {
    uint64_t xq = 0, xr = 0, full = t;
    if (deadline > t) {
        xq = deadline - (token != 0) - t;
        xr = token;
        full = deadline;
    }
    /* (a cost of 1 never exceeds the burst: the test folds away for it) */
    if (SLUICE__UNLIKELY((t >= g->t_lim) | (xq > g->bt_q) | ((cost != 1) & (cost > g->burst)))) return false;
    uint64_t fresh = xq * g->limit + xr + cost * g->per;
    if (fresh > g->bt) {
        o->kind = SLUICE_DROPPED;
        o->at = t + sluice__recip_div(g->inv_limit, fresh - g->bt + g->limit - 1);
        o->full = full;
        return true;
    }
    uint64_t nq = sluice__recip_div(g->inv_limit, fresh);
    uint64_t nr = fresh - nq * g->limit;
    o->kind = SLUICE_EMITTED;
    o->at = t;
    o->token = nr;
    o->deadline = o->full = t + nq + (nr != 0);
    o->remaining = sluice__recip_div(g->inv_per, g->bt - fresh);
    return true;
}

/* A rate call of cost 1 on a key with an entry (live or idle in place), for
 * the short path of submit (limiter.c): the fast path only. Brings the entry
 * to its new state and fills the whole of *d; false, having changed
 * nothing, when the fast path's bounds do not hold (then call
 * the policy's call op). */
static SLUICE__HOT_INLINE bool sluice__rate_live(struct sluice_limiter *l, struct sluice__entry *e, uint64_t t,
                                                 sluice_decision_t *d) {
    struct sluice__rate_res o;
    if (!sluice__rate_decide_fast(&l->rate, e->node.deadline, e->token, 1, t, &o)) return false;
    d->kind = (sluice_decision_kind_t)o.kind;
    d->at = o.at;
    d->full = o.full;
    if (o.kind == SLUICE_DROPPED) {
        d->remaining = 0;
        return true;
    }
    e->token = o.token;
    e->node.deadline = o.deadline; /* no timer: the TAT is read on access */
    d->remaining = o.remaining;
    return true;
}

/* The quota (the policy's quota op) on a key's state given as above: the
 * fast path when its bounds hold, or the exact arithmetic alone. */
void sluice__rate_quota(const struct sluice__gcra *g, uint64_t deadline, uint64_t token, uint64_t cost, uint64_t t,
                        sluice_quota_t *out);
void sluice__rate_quota_exact(const struct sluice__gcra *g, uint64_t deadline, uint64_t token, uint64_t cost,
                              uint64_t t, sluice_quota_t *out);

#if defined(__GNUC__) || defined(__clang__)
#pragma GCC visibility pop
#endif

#endif /* SLUICE_POLICY_RATE_H */
