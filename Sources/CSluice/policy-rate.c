/* policy-rate.c — rate(limit, per, burst) of docs/semantics.md: GCRA with
 * weighted calls and a quota peek.
 *
 * Exact integer arithmetic: every time is scaled by `limit`, so the
 * emission interval T = per / limit is the integer `per`, burst * T is
 * burst * per and a call of cost n weighs n * per. Scaled values fit in 128
 * bits (a time below 2^64 times a limit up to 10^12, a burst or cost up to
 * 10^12 times a period up to 10^18). A key's TAT is kept as q + r / limit ns:
 * q in the timer deadline (rounded up: deadline = q + (r != 0)) and r in the
 * entry's token word, so the timer fires exactly when TAT <= now and the key
 * goes back to idle (a fresh quota, no memory).
 *
 * The clock ends at UINT64_MAX ns, and so does every quota: a call that
 * would push a key's TAT past it is dropped with a retry time of "never"
 * (its TAT only grows with time, so it would never fit), and `remaining`
 * counts only the calls that fit before it. A TAT is therefore always exact.
 * Reported times round toward "later": `full` and a retry time are ceilings
 * in ns; `remaining` is a floor. */
#include "limiter-internal.h"

__extension__ typedef unsigned __int128 u128;

static const char *explain(const sluice_policy_t *p, int *code) {
    *code = SLUICE_EINVAL;
    if (p->limit < 1) return "policy.limit is 0: a rate needs a limit of at least 1 call per period";
    if (p->per_ns < 1) return "policy.per_ns is below 1: a rate's period must be at least 1 ns";
    *code = SLUICE_ERANGE;
    if (p->limit > SLUICE_RATE_MAX) return "policy.limit is above SLUICE_RATE_MAX (10^12)";
    if (p->burst > SLUICE_RATE_MAX) return "policy.burst is above SLUICE_RATE_MAX (10^12)";
    if (p->per_ns > SLUICE_DURATION_MAX) return "policy.per_ns is above SLUICE_DURATION_MAX (10^18 ns)";
    return NULL;
}

static size_t setup(struct sluice_limiter *l, const sluice_policy_t *p) {
    l->limit = p->limit;
    l->per = (uint64_t)p->per_ns;
    l->burst = p->burst ? p->burst : p->limit; /* default burst = limit */
    l->t_q = l->per / l->limit;
    l->t_r = l->per % l->limit;
    l->pass_through = false;
    return 0;
}

static bool never_schedules(const sluice_policy_t *p) {
    (void)p;
    return true;
}

/* ---- scaled arithmetic ---- */

/* A time q + r / limit ns, r < limit; at most (UINT64_MAX, 0), the end of the clock. */
struct qr {
    uint64_t q, r;
};

/* a + b, saturated at the end of the clock. */
static inline struct qr qr_add(const struct sluice_limiter *l, struct qr a, struct qr b) {
    uint64_t r = a.r + b.r; /* < 2 * limit <= 2e12: no overflow */
    uint64_t carry = r >= l->limit;
    if (carry) r -= l->limit;
    uint64_t q = sluice__sat_add(sluice__sat_add(a.q, b.q), carry);
    if (q == UINT64_MAX) r = 0;
    struct qr out = { q, r };
    return out;
}

static inline uint64_t qr_ceil(struct qr a) { return a.r ? sluice__sat_add(a.q, 1) : a.q; }

static inline u128 qr_scaled(const struct sluice_limiter *l, struct qr a) { return (u128)a.q * l->limit + a.r; }

/* A scaled time as q + r / limit, saturated at the end of the clock. */
static inline struct qr qr_of(const struct sluice_limiter *l, u128 x) {
    struct qr out = { UINT64_MAX, 0 };
    if (x >= (u128)UINT64_MAX * l->limit) return out;
    if ((x >> 64) == 0) {
        out.q = (uint64_t)x / l->limit;
        out.r = (uint64_t)x % l->limit;
    } else {
        out.q = (uint64_t)(x / l->limit);
        out.r = (uint64_t)(x % l->limit);
    }
    return out;
}

/* ceil(x / limit) ns, saturated at UINT64_MAX. */
static inline uint64_t ceil_ns(const struct sluice_limiter *l, u128 x) { return qr_ceil(qr_of(l, x)); }

/* The end of the clock, scaled. */
static inline u128 clock_end(const struct sluice_limiter *l) { return (u128)UINT64_MAX * l->limit; }

/* floor(x / per), for a result known to be at most the burst. */
static inline uint64_t floor_per(const struct sluice_limiter *l, u128 x) {
    return (x >> 64) == 0 ? (uint64_t)x / l->per : (uint64_t)(x / l->per);
}

/* The key's TAT, from its deadline and remainder. */
static inline struct qr entry_tat(const struct sluice__entry *e) {
    struct qr t;
    t.r = e->token;
    t.q = e->node.deadline - (e->token != 0);
    return t;
}

/* ---- rows ---- */

int sluice__rate_call(struct sluice_limiter *l, const struct sluice__keyref *k, uint32_t idx, uint64_t token,
                      uint64_t cost, uint64_t t, sluice_decision_t *d) {
    /* call(t, v, n) | tat = max(TAT, t), new = tat + n*T. If new - t <=
     * burst*T: emit v, TAT = new. Otherwise drop v; TAT unchanged.
     * A live key's TAT is > t: a key whose TAT <= t was fired (removed) first. */
    (void)token;
    struct qr tat = { t, 0 };
    if (idx != SLUICE__NONE) tat = entry_tat(sluice__entry_of(l, idx));
    uint64_t full_now = idx != SLUICE__NONE ? sluice__entry_of(l, idx)->node.deadline : t;
    if (cost > l->burst) {
        /* never admitted: the retry time is "never" */
        d->kind = SLUICE_DROPPED;
        d->at = SLUICE_NEVER;
        d->full = full_now;
        return 0;
    }
    u128 ts = (u128)t * l->limit, bt = (u128)l->burst * l->per;
    u128 now_tat = qr_scaled(l, tat), fresh = now_tat + (u128)cost * l->per;
    if (fresh > clock_end(l)) {
        /* past the end of the clock: it would never fit */
        d->kind = SLUICE_DROPPED;
        d->at = SLUICE_NEVER;
        d->full = full_now;
        return 0;
    }
    if (fresh - ts > bt) {
        /* admitted from tat + n*T - burst*T on (> t here), rounded up */
        d->kind = SLUICE_DROPPED;
        d->at = ceil_ns(l, fresh - bt);
        d->full = full_now;
        return 0;
    }
    struct qr next;
    if (cost == 1) {
        struct qr T = { l->t_q, l->t_r };
        next = qr_add(l, tat, T);
    } else {
        next = qr_of(l, fresh);
    }
    if (idx == SLUICE__NONE) {
        int rc = sluice__limiter_add_key(l, k, &idx);
        if (rc) return rc;
    }
    struct sluice__entry *e = sluice__entry_of(l, idx);
    e->token = next.r;
    uint64_t dl = qr_ceil(next);
    sluice__wheel_set(&l->wheel, idx, dl);
    d->kind = SLUICE_EMITTED;
    d->at = t;
    d->full = dl;
    u128 room = ts + bt < clock_end(l) ? ts + bt : clock_end(l);
    d->remaining = floor_per(l, room - qr_scaled(l, next));
    return 0;
}

void sluice__rate_fire(struct sluice_limiter *l, uint32_t idx) {
    sluice__limiter_remove_key(l, idx); /* TAT reached: the key is fresh again */
}

/* flush does nothing for rate (there is never a pending value). */
static int flush(struct sluice_limiter *l, uint32_t idx, uint64_t now) {
    (void)l;
    (void)idx;
    (void)now;
    return 0;
}

static void quota(const struct sluice_limiter *l, uint32_t idx, uint64_t cost, uint64_t t, sluice_quota_t *out) {
    /* At t, with tat = max(TAT, t): remaining = floor((t + burst*T - tat) / T),
     * full = tat, retry(n) = max(t, tat + n*T - burst*T), never when n > burst. */
    u128 ts = (u128)t * l->limit, bt = (u128)l->burst * l->per;
    u128 tat = ts;
    uint64_t full = t;
    if (idx != SLUICE__NONE) {
        const struct sluice__entry *e = sluice__entry_of(l, idx);
        u128 x = qr_scaled(l, entry_tat(e));
        if (x > ts) { /* a key whose TAT <= t is fresh (its timer just has not run) */
            tat = x;
            full = e->node.deadline;
        }
    }
    u128 room = ts + bt < clock_end(l) ? ts + bt : clock_end(l);
    u128 fresh = tat + (u128)cost * l->per;
    out->burst = l->burst;
    out->remaining = tat >= room ? 0 : floor_per(l, room - tat);
    out->full = full;
    if (cost > l->burst || fresh > clock_end(l))
        out->retry = SLUICE_NEVER;
    else
        out->retry = fresh - ts > bt ? ceil_ns(l, fresh - bt) : t;
}

static const char *check(const struct sluice_limiter *l, const struct sluice__entry *e) {
    if (e->flags & SLUICE__F_PENDING) return "rate key holds a pending value";
    if (e->flags & SLUICE__F_POLICY) return "rate entry with a debounce flag";
    if (e->token >= l->limit) return "rate remainder not below limit";
    if (e->node.deadline == 0 && e->token != 0) return "rate TAT below zero";
    return NULL;
}

const struct sluice__policy_ops sluice__rate_ops = {
    .kind = SLUICE_RATE,
    .name = "rate",
    .explain = explain,
    .setup = setup,
    .never_schedules = never_schedules,
    .call = sluice__rate_call,
    .fire = sluice__rate_fire,
    .flush = flush,
    .quota = quota,
    .check = check,
};
