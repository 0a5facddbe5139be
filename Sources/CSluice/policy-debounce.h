/*
 * policy-debounce.h — the debounce policy (policy-debounce.c): its operations table and
 * the row of a call on a live key, inline so that limiter.c's short path of
 * submit compiles it in (limiter-internal.h, "the row of a call on a live
 * key"). Internal.
 */
#ifndef SLUICE_POLICY_DEBOUNCE_H
#define SLUICE_POLICY_DEBOUNCE_H

#include "limiter-internal.h"

#if defined(__GNUC__) || defined(__clang__)
#pragma GCC visibility push(hidden)
#endif

extern const struct sluice__policy_ops sluice__debounce_ops;

/* debounce ACTIVE | call(t, v), without maxWait | last = t (the deadline
 * becomes t + W); trailing ? (drop pending if any; pending = v) : drop v.
 * (With maxWait: sluice__debounce_call.) */
static SLUICE__HOT_INLINE bool sluice__debounce_live(struct sluice_limiter *l, uint32_t idx, struct sluice__entry *e,
                                                     uint64_t token, uint64_t t, sluice_decision_t *d,
                                                     struct sluice__event *pe) {
    uint64_t dl = sluice__sat_add(t, l->interval);
    sluice__wheel_set_later(&l->wheel, idx, &e->node, dl);
    d->at = dl;
    if (!l->trailing) {
        d->kind = SLUICE_DROPPED;
        return false;
    }
    d->kind = SLUICE_SCHEDULED;
    if (e->flags & SLUICE__F_PENDING) {
        sluice__capture_dropped(l, pe, e, token, t);
        e->token = token;
        return true;
    }
    sluice__set_pending(l, e, token);
    return false;
}

#if defined(__GNUC__) || defined(__clang__)
#pragma GCC visibility pop
#endif

#endif /* SLUICE_POLICY_DEBOUNCE_H */
