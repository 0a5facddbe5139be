/* policy-throttle.c — throttle(W, leading, trailing, pick) of
 * docs/semantics.md. State IDLE (no entry) or OPEN: the entry's timer is
 * `end`, its pending flag and token the pending value. */
#include "policy-throttle.h"

static const char *explain(const sluice_policy_t *p, int *code) {
    const char *why = sluice__explain_edges(
        p, code, "policy.leading and policy.trailing are both false: a throttle needs at least one edge");
    if (why) return why;
    if (p->pick != SLUICE_PICK_LATEST && p->pick != SLUICE_PICK_FIRST)
        return "policy.pick is neither SLUICE_PICK_LATEST nor SLUICE_PICK_FIRST";
    return NULL;
}

static size_t setup(struct sluice_limiter *l, const sluice_policy_t *p) {
    sluice__setup_window(l, p, p->leading, p->trailing);
    l->pick_first = p->pick == SLUICE_PICK_FIRST;
    return 0;
}

/* Without trailing nothing is ever kept: calls are emitted or dropped at once. */
static bool never_schedules(const sluice_policy_t *p) { return p->interval_ns == 0 || !p->trailing; }

static int call(struct sluice_limiter *l, const struct sluice__keyref *k, uint32_t idx, uint64_t token, uint64_t cost,
                uint64_t t, sluice_decision_t *d) {
    (void)cost;
    /* IDLE | call(t, v) | end = t + W; leading ? emit v : pending = v; -> OPEN */
    if (idx == SLUICE__NONE) return sluice__open_key(l, k, token, t, d, &idx);
    /* OPEN: sluice__throttle_live (policy-throttle.h) */
    struct sluice__event pe;
    if (sluice__throttle_live(l, sluice__entry_of(l, idx), token, t, d, &pe)) sluice__report_superseded(l, &pe);
    return 0;
}

/* The timer row; its emission reported, or written to *out (limiter-internal.h,
 * sluice__fired_capture). Returns the emissions written. */
static SLUICE__HOT_INLINE size_t fire(struct sluice_limiter *l, uint32_t idx, sluice_emission_t *out) {
    /* OPEN | timer(end) | trailing and pending: emit pending at `end`,
     * `end += W`, stay OPEN. Otherwise -> IDLE */
    struct sluice__entry *e = sluice__entry_of(l, idx);
    if (!(l->trailing && (e->flags & SLUICE__F_PENDING))) {
        sluice__limiter_remove_key(l, idx);
        return 0;
    }
    uint64_t D = e->node.deadline;
    struct sluice__event pe;
    sluice__fired_capture(&pe, out, e, sluice__take_pending(l, e), D);
    sluice__wheel_add(&l->wheel, idx, sluice__sat_add(D, l->interval));
    sluice__fired_report(l, &pe, out);
    return 1;
}

SLUICE__POLICY_FIRE_OPS(fire)

static const char *check(const struct sluice_limiter *l, const struct sluice__entry *e) {
    if ((e->flags & SLUICE__F_PENDING) && !l->trailing) return "throttle without trailing holds a pending value";
    if (e->flags & SLUICE__F_POLICY) return "throttle entry with a debounce flag";
    return NULL;
}

const struct sluice__policy_ops sluice__throttle_ops = { .kind = SLUICE_THROTTLE,
                                                         .name = "throttle",
                                                         SLUICE__POLICY_OPS_COMMON };
