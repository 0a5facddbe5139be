/*
 * policy-throttle.h — the throttle policy (policy-throttle.c): its operations table and
 * the row of a call on a live key, inline so that limiter.c's short path of
 * submit compiles it in (limiter-internal.h, "the row of a call on a live
 * key"). Internal.
 */
#ifndef SLUICE_POLICY_THROTTLE_H
#define SLUICE_POLICY_THROTTLE_H

#include "limiter-internal.h"

#if defined(__GNUC__) || defined(__clang__)
#pragma GCC visibility push(hidden)
#endif

extern const struct sluice__policy_ops sluice__throttle_ops;

/* throttle OPEN | call(t, v) | trailing off: drop v. No pending: pending = v.
 * pick latest: drop pending, pending = v. pick first: drop v */
static SLUICE__HOT_INLINE bool sluice__throttle_live(struct sluice_limiter *l, struct sluice__entry *e, uint64_t token,
                                                     uint64_t t, sluice_decision_t *d, struct sluice__event *pe) {
    d->at = e->node.deadline;
    uint8_t f = e->flags;
    if (!l->trailing || ((f & SLUICE__F_PENDING) && l->pick_first)) {
        d->kind = SLUICE_DROPPED;
        return false;
    }
    d->kind = SLUICE_SCHEDULED;
    if (!(f & SLUICE__F_PENDING)) {
        sluice__set_pending(l, e, token);
        return false;
    }
    sluice__capture_dropped(l, pe, e, token, t);
    e->token = token;
    return true;
}

#if defined(__GNUC__) || defined(__clang__)
#pragma GCC visibility pop
#endif

#endif /* SLUICE_POLICY_THROTTLE_H */
