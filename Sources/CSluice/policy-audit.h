/*
 * policy-audit.h — the audit policy (policy-audit.c): its operations table and
 * the row of a call on a live key, inline so that limiter.c's short path of
 * submit compiles it in (limiter-internal.h, "the row of a call on a live
 * key"). Internal.
 */
#ifndef SLUICE_POLICY_AUDIT_H
#define SLUICE_POLICY_AUDIT_H

#include "limiter-internal.h"

#if defined(__GNUC__) || defined(__clang__)
#pragma GCC visibility push(hidden)
#endif

extern const struct sluice__policy_ops sluice__audit_ops;

/* audit OPEN | call(t, v) | drop pending, pending = v */
static SLUICE__HOT_INLINE bool sluice__audit_live(struct sluice_limiter *l, struct sluice__entry *e, uint64_t token,
                                                  uint64_t t, sluice_decision_t *d, struct sluice__event *pe) {
    sluice__capture_dropped(l, pe, e, token, t);
    e->token = token;
    d->kind = SLUICE_SCHEDULED;
    d->at = e->node.deadline;
    return true;
}

#if defined(__GNUC__) || defined(__clang__)
#pragma GCC visibility pop
#endif

#endif /* SLUICE_POLICY_AUDIT_H */
