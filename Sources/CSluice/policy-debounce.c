/* policy-debounce.c — debounce(W, leading, trailing, maxWait) of
 * docs/semantics.md. State IDLE (no entry) or ACTIVE: the entry's timer is
 * the debounce deadline, its pending flag and token the pending value, and
 * with maxWait the entry carries `last` and `start` (struct ext) and the
 * policy flag is the spec's maxDue. Without maxWait `last` is implied: the
 * only deadline is last + W. */
#include "policy-debounce.h"

#define F_MAXDUE SLUICE__F_POLICY

/* The spec's `last` and `start`, after the entry (maxWait only). */
struct ext {
    uint64_t last, start;
};

static inline struct ext *ext_of(struct sluice__entry *e) { return (struct ext *)sluice__entry_ext(e); }

static const char *explain(const sluice_policy_t *p, int *code) {
    const char *why = sluice__explain_edges(
        p, code, "policy.leading and policy.trailing are both false: a debounce needs at least one edge");
    if (why) return why;
    if (p->has_max_wait) {
        if (p->max_wait_ns < p->interval_ns)
            return "policy.max_wait_ns is below policy.interval_ns: a debounce maxWait must be at least its interval";
        if (p->max_wait_ns > SLUICE_DURATION_MAX) {
            *code = SLUICE_ERANGE;
            return "policy.max_wait_ns is above SLUICE_DURATION_MAX (10^18 ns)";
        }
    }
    return NULL;
}

static size_t setup(struct sluice_limiter *l, const sluice_policy_t *p) {
    sluice__setup_window(l, p, p->leading, p->trailing);
    l->has_max_wait = p->has_max_wait;
    l->max_wait = p->has_max_wait ? (uint64_t)p->max_wait_ns : 0;
    return l->has_max_wait ? sizeof(struct ext) : 0;
}

/* Without trailing nothing is ever kept. */
static bool never_schedules(const sluice_policy_t *p) { return p->interval_ns == 0 || !p->trailing; }

/* last + W, or min(last + W, start + maxWait) while maxWait applies. */
static inline uint64_t deadline(const struct sluice_limiter *l, struct sluice__entry *e, uint64_t last) {
    uint64_t quiet = sluice__sat_add(last, l->interval);
    if (!l->has_max_wait || (e->flags & F_MAXDUE)) return quiet;
    uint64_t cap = sluice__sat_add(ext_of(e)->start, l->max_wait);
    return cap < quiet ? cap : quiet;
}

static int call(struct sluice_limiter *l, const struct sluice__keyref *k, uint32_t idx, uint64_t token, uint64_t cost,
                uint64_t t, sluice_decision_t *d) {
    (void)cost;
    if (idx == SLUICE__NONE) {
        /* IDLE | call(t, v) | last = start = t; leading ? emit v : pending = v; -> ACTIVE
         * (maxWait >= interval, so the first deadline is t + W) */
        int rc = sluice__open_key(l, k, token, t, d, &idx);
        if (rc) return rc;
        struct sluice__entry *e = sluice__entry_of(l, idx);
        if (l->has_max_wait) ext_of(e)->last = ext_of(e)->start = t;
        return 0;
    }
    struct sluice__entry *e = sluice__entry_of(l, idx);
    struct sluice__event pe;
    if (!l->has_max_wait) {
        /* the common rows (policy-debounce.h) */
        if (sluice__debounce_live(l, idx, e, token, t, d, &pe)) sluice__report_superseded(l, &pe);
        return 0;
    }
    bool have = false;
    if (l->has_max_wait && l->leading && (e->flags & F_MAXDUE)) {
        /* ACTIVE | call(t, v), maxDue and leading | emit v; last = start = t; maxDue = false */
        if (e->flags & SLUICE__F_PENDING) { /* cannot happen (maxDue is set only without pending) */
            sluice__capture(&pe, e, SLUICE_EVENT_DROP, sluice__take_pending(l, e), t);
            have = true;
        }
        ext_of(e)->last = ext_of(e)->start = t;
        e->flags &= (uint8_t)~F_MAXDUE;
        sluice__wheel_set(&l->wheel, idx, deadline(l, e, t));
        d->kind = SLUICE_EMITTED;
        d->at = t;
    } else {
        /* ACTIVE | call(t, v), otherwise | last = t; trailing ? (drop pending
         * if any; pending = v) : drop v */
        if (l->has_max_wait) ext_of(e)->last = t;
        uint64_t dl = deadline(l, e, t);
        sluice__wheel_set(&l->wheel, idx, dl);
        d->at = dl;
        if (l->trailing) {
            if (e->flags & SLUICE__F_PENDING) {
                sluice__capture_superseded(&pe, e, e->token, token, t);
                have = true;
            }
            sluice__set_pending(l, e, token);
            d->kind = SLUICE_SCHEDULED;
        } else {
            d->kind = SLUICE_DROPPED;
        }
    }
    if (have) sluice__report(l, &pe);
    return 0;
}

/* The timer row; its emission reported, or written to *out (limiter-internal.h,
 * sluice__fired_capture). Returns the emissions written. */
static SLUICE__HOT_INLINE size_t fire(struct sluice_limiter *l, uint32_t idx, sluice_emission_t *out) {
    /* ACTIVE | timer(D) | quiet = D >= last + W. If trailing and pending:
     * emit pending at D. Then: quiet -> IDLE; else if it emitted -> start =
     * D; else maxDue = true and the deadline becomes last + W */
    struct sluice__entry *e = sluice__entry_of(l, idx);
    uint64_t D = e->node.deadline;
    struct sluice__event pe;
    bool emitted = false;
    if (l->trailing && (e->flags & SLUICE__F_PENDING)) {
        sluice__fired_capture(&pe, out, e, sluice__take_pending(l, e), D);
        emitted = true;
    }
    if (!l->has_max_wait) {
        sluice__limiter_remove_key(l, idx); /* the only deadline is last + W: always quiet */
    } else {
        struct ext *x = ext_of(e);
        if (D >= sluice__sat_add(x->last, l->interval)) {
            sluice__limiter_remove_key(l, idx);
        } else if (emitted) {
            x->start = D;
            sluice__wheel_add(&l->wheel, idx, deadline(l, e, x->last));
        } else {
            e->flags |= F_MAXDUE;
            sluice__wheel_add(&l->wheel, idx, sluice__sat_add(x->last, l->interval));
        }
    }
    if (!emitted) return 0;
    sluice__fired_report(l, &pe, out);
    return 1;
}

SLUICE__POLICY_FIRE_OPS(fire)

static const char *check(const struct sluice_limiter *l, const struct sluice__entry *e) {
    bool pend = e->flags & SLUICE__F_PENDING;
    if (pend && !l->trailing) return "debounce without trailing holds a pending value";
    if ((e->flags & F_MAXDUE) && !l->has_max_wait) return "maxDue without maxWait";
    if (l->has_max_wait) {
        struct sluice__entry *m = (struct sluice__entry *)(uintptr_t)e;
        if (e->node.deadline != deadline(l, m, ext_of(m)->last)) return "debounce deadline differs from its rule";
        if ((e->flags & F_MAXDUE) && pend && l->leading) return "maxDue with a pending value";
    }
    return NULL;
}

const struct sluice__policy_ops sluice__debounce_ops = { .kind = SLUICE_DEBOUNCE,
                                                         .name = "debounce",
                                                         SLUICE__POLICY_OPS_COMMON };
