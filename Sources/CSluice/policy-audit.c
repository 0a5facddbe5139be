/* policy-audit.c — audit(W) of docs/semantics.md: trailing-only, the window
 * is opened by a call. State IDLE (no entry) or OPEN: the entry's timer is
 * `end`, and an open window always holds a pending value. */
#include "policy-audit.h"

/* leading, trailing and pick are ignored: audit is trailing-only. */
static const char *explain(const sluice_policy_t *p, int *code) { return sluice__explain_interval(p, code); }

static size_t setup(struct sluice_limiter *l, const sluice_policy_t *p) {
    sluice__setup_window(l, p, false, true);
    return 0;
}

static bool never_schedules(const sluice_policy_t *p) { return p->interval_ns == 0; }

static int call(struct sluice_limiter *l, const struct sluice__keyref *k, uint32_t idx, uint64_t token, uint64_t cost,
                uint64_t t, sluice_decision_t *d) {
    (void)cost;
    d->kind = SLUICE_SCHEDULED;
    if (idx == SLUICE__NONE) {
        /* IDLE | call(t, v) | end = t + W, pending = v; -> OPEN */
        int rc = sluice__limiter_add_key(l, k, &idx);
        if (rc) return rc;
        struct sluice__entry *e = sluice__entry_of(l, idx);
        uint64_t end = sluice__sat_add(t, l->interval);
        sluice__set_pending(l, e, token);
        sluice__wheel_add(&l->wheel, idx, end);
        d->at = end;
        return 0;
    }
    /* OPEN: sluice__audit_live (policy-audit.h) */
    struct sluice__event pe;
    if (sluice__audit_live(l, sluice__entry_of(l, idx), token, t, d, &pe)) sluice__report_superseded(l, &pe);
    return 0;
}

/* The timer row; its emission reported, or written to *out (limiter-internal.h,
 * sluice__fired_capture). Returns the emissions written. */
static SLUICE__HOT_INLINE size_t fire(struct sluice_limiter *l, uint32_t idx, sluice_emission_t *out) {
    /* OPEN | timer(end) | emit pending; -> IDLE (no new window) */
    struct sluice__entry *e = sluice__entry_of(l, idx);
    struct sluice__event pe;
    sluice__fired_capture(&pe, out, e, sluice__take_pending(l, e), e->node.deadline);
    sluice__limiter_remove_key(l, idx);
    sluice__fired_report(l, &pe, out);
    return 1;
}

SLUICE__POLICY_FIRE_OPS(fire)

static const char *check(const struct sluice_limiter *l, const struct sluice__entry *e) {
    (void)l;
    if (!(e->flags & SLUICE__F_PENDING)) return "open audit window without a pending value";
    if (e->flags & SLUICE__F_POLICY) return "audit entry with a debounce flag";
    return NULL;
}

const struct sluice__policy_ops sluice__audit_ops = { .kind = SLUICE_AUDIT,
                                                      .name = "audit",
                                                      SLUICE__POLICY_OPS_COMMON };
