/* policy-rate.c — rate(limit, per, burst) of docs/semantics.md: GCRA with
 * weighted calls and a quota peek.
 *
 * Exact integer arithmetic: every time is scaled by `limit`, so the
 * emission interval T = per / limit is the integer `per`, burst * T is
 * burst * per and a call of cost n weighs n * per. Scaled values fit in 128
 * bits (a time below 2^64 times a limit up to 10^12, a burst or cost up to
 * 10^12 times a period up to 10^18). A key's TAT is kept as q + r / limit ns:
 * q in the node's deadline field (rounded up: deadline = q + (r != 0), the
 * key's `full`) and r in the entry's token word.
 *
 * Fast path. When burst * per < 2^61 (checked at setup) and the call's time
 * is below rate_t_lim (2 * burst * T + 3 ns short of the end of the clock),
 * every quantity a decision needs, taken relative to t and scaled by limit,
 * fits in 63 bits, and its three divisions (the new TAT by limit, remaining
 * by per, a retry time by limit) are multiplications by reciprocals
 * precomputed at setup (sluice__recip_div). The result is the exact one
 * bit for bit; any other input takes the exact 128-bit routine
 * (sluice__rate_decide_exact, kept, and compared with the fast path by
 * ctests/test_rate_fast.c).
 *
 * Lazy expiry. A rate entry arms no timer: a key whose full <= now is idle
 * (a fresh quota) wherever its entry still is, and a call on it resets the
 * state in place. So a call costs no wheel operation, and a key that goes
 * idle between calls costs no removal, insertion or timer fire. Idle entries
 * are reclaimed three ways, all in this file. Let S = rate_every =
 * max(burst * T, 1 ms), the longest an untouched key stays live:
 *
 *  - after each key created, the next RATE_STEP entries of a cursor going
 *    round the slab are examined, and freed if idle for S or more (not
 *    sooner: a key used less often than once per T but more often than
 *    once per S is not removed and created again on the hot path). Every
 *    entry is examined within top / RATE_STEP creations, so without a cap
 *    and without a loop the slab holds at most about twice the keys used in
 *    the last 2 S;
 *  - reclaim (the reclaim op), a pass over the slab that can stop and resume
 *    (`rate_pass`), freeing every idle entry, run by advance().
 *    next_deadline() asks for it at max(rate_lb, rate_last + S): the
 *    earliest full, but at most once per S after the previous pass, so a
 *    loop sweeps at most once per S and an idle key's memory is released
 *    within S of its quota filling up (when a loop advances the limiter);
 *  - at the key cap (the core's or the loop layer's), before a new key is
 *    refused, the pass runs until it frees one idle entry or finds none
 *    (then rate_lb > now, and the refusal is exact: every held key is live).
 *    Resumed where it stopped, it costs O(top) per complete pass, not per
 *    refusal: refusals while rate_lb > now are O(1).
 *
 * rate_lb is a lower bound of every entry's full: a complete pass sets it to
 * the least full it kept, a key created lowers it, and a call only raises a
 * key's full. When now < rate_lb no entry can be idle and the pass does no
 * work.
 *
 * The clock ends at UINT64_MAX ns, and so does every quota: a call that
 * would push a key's TAT past it is dropped with a retry time of "never"
 * (its TAT only grows with time, so it would never fit), and `remaining`
 * counts only the calls that fit before it. A TAT is therefore always exact.
 * Reported times round toward "later": `full` and a retry time are ceilings
 * in ns; `remaining` is a floor. */
#include "policy-rate.h"

__extension__ typedef unsigned __int128 u128;

/* Entries examined after each key created. */
#define RATE_STEP 2u
/* The least spacing of the sweeps a loop is asked for (1 ms). */
#define RATE_EVERY_MIN UINT64_C(1000000)

#if defined(__GNUC__) || defined(__clang__)
#define NOINLINE_RATE __attribute__((noinline))
#else
#define NOINLINE_RATE
#endif

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

void sluice__gcra_setup(struct sluice__gcra *g, uint64_t limit, uint64_t per, uint64_t burst) {
    g->limit = limit;
    g->per = per;
    g->burst = burst ? burst : limit; /* default burst = limit */
    g->t_q = g->per / g->limit;
    g->t_r = g->per % g->limit;
    /* sweeps no closer than burst * T (rounded up), nor than RATE_EVERY_MIN */
    u128 bt = (u128)g->burst * g->per;
    u128 every = bt / g->limit + (bt % g->limit != 0);
    g->every = every > UINT64_MAX ? UINT64_MAX : (uint64_t)every;
    if (g->every < RATE_EVERY_MIN) g->every = RATE_EVERY_MIN;
    /* the fast path (sluice__rate_decide_fast, policy-rate.h): every
     * scaled quantity relative to t fits in 63 bits and every numerator of
     * a reciprocal division in 62 when burst * per < 2^61 */
    g->inv_limit = sluice__recip_of(g->limit);
    g->inv_per = sluice__recip_of(g->per);
    if (bt < ((u128)1 << 61)) {
        g->bt = (uint64_t)bt;
        g->bt_q = g->bt / g->limit;
        g->t_lim = UINT64_MAX - 2 * g->bt_q - 3;
    } else {
        g->bt = g->bt_q = g->t_lim = 0;
    }
}

void sluice__rate_expiry_reset(struct sluice_limiter *l, uint64_t every) {
    l->rate_every = every;
    l->rate_lb = l->rate_pass_min = UINT64_MAX;
    l->rate_last = 0;
    l->rate_pass = l->rate_step = 0;
}

static size_t setup(struct sluice_limiter *l, const sluice_policy_t *p) {
    sluice__gcra_setup(&l->rate, p->limit, (uint64_t)p->per_ns, p->burst);
    l->pass_through = false;
    sluice__rate_expiry_reset(l, l->rate.every);
    return 0;
}

struct sluice__recip sluice__recip_of(uint64_t d) {
    struct sluice__recip v;
    unsigned L = 0;
    while (L < 63 && (UINT64_C(1) << L) < d) L++;
    u128 num = (u128)1 << (63 + L);
    v.c = (uint64_t)(num / d + (num % d != 0));
    v.sh = L;
    return v;
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
static inline struct qr qr_add(const struct sluice__gcra *g, struct qr a, struct qr b) {
    uint64_t r = a.r + b.r; /* < 2 * limit <= 2e12: no overflow */
    uint64_t carry = r >= g->limit;
    if (carry) r -= g->limit;
    uint64_t q = sluice__sat_add(sluice__sat_add(a.q, b.q), carry);
    if (q == UINT64_MAX) r = 0;
    struct qr out = { q, r };
    return out;
}

static inline uint64_t qr_ceil(struct qr a) { return a.r ? sluice__sat_add(a.q, 1) : a.q; }

static inline u128 qr_scaled(const struct sluice__gcra *g, struct qr a) { return (u128)a.q * g->limit + a.r; }

/* A scaled time as q + r / limit, saturated at the end of the clock. */
static inline struct qr qr_of(const struct sluice__gcra *g, u128 x) {
    struct qr out = { UINT64_MAX, 0 };
    if (x >= (u128)UINT64_MAX * g->limit) return out;
    if ((x >> 64) == 0) {
        out.q = (uint64_t)x / g->limit;
        out.r = (uint64_t)x % g->limit;
    } else {
        out.q = (uint64_t)(x / g->limit);
        out.r = (uint64_t)(x % g->limit);
    }
    return out;
}

/* ceil(x / limit) ns, saturated at UINT64_MAX. */
static inline uint64_t ceil_ns(const struct sluice__gcra *g, u128 x) { return qr_ceil(qr_of(g, x)); }

/* The end of the clock, scaled. */
static inline u128 clock_end(const struct sluice__gcra *g) { return (u128)UINT64_MAX * g->limit; }

/* floor(x / per), for a result known to be at most the burst. */
static inline uint64_t floor_per(const struct sluice__gcra *g, u128 x) {
    return (x >> 64) == 0 ? (uint64_t)x / g->per : (uint64_t)(x / g->per);
}

/* ---- decisions ---- */

void sluice__rate_decide_exact(const struct sluice__gcra *g, uint64_t deadline, uint64_t token, uint64_t cost,
                               uint64_t t, struct sluice__rate_res *o) {
    /* call(t, v, n) | tat = max(TAT, t), new = tat + n*T. If new - t <=
     * burst*T: emit v, TAT = new. Otherwise drop v; TAT unchanged.
     * An entry whose full <= t is idle (TAT <= t): its state is t's. */
    struct qr tat = { t, 0 };
    uint64_t full_now = t;
    if (deadline > t) {
        tat.r = token;
        tat.q = deadline - (token != 0);
        full_now = deadline;
    }
    o->full = full_now;
    o->kind = SLUICE_DROPPED;
    if (cost > g->burst) {
        /* never admitted: the retry time is "never" */
        o->at = SLUICE_NEVER;
        return;
    }
    u128 ts = (u128)t * g->limit, bt = (u128)g->burst * g->per;
    u128 now_tat = qr_scaled(g, tat), fresh = now_tat + (u128)cost * g->per;
    if (fresh > clock_end(g)) {
        /* past the end of the clock: it would never fit */
        o->at = SLUICE_NEVER;
        return;
    }
    if (fresh - ts > bt) {
        /* admitted from tat + n*T - burst*T on (> t here), rounded up */
        o->at = ceil_ns(g, fresh - bt);
        return;
    }
    struct qr next;
    if (cost == 1) {
        struct qr T = { g->t_q, g->t_r };
        next = qr_add(g, tat, T);
    } else {
        next = qr_of(g, fresh);
    }
    o->kind = SLUICE_EMITTED;
    o->at = t;
    o->token = next.r;
    o->deadline = o->full = qr_ceil(next);
    u128 room = ts + bt < clock_end(g) ? ts + bt : clock_end(g);
    o->remaining = floor_per(g, room - qr_scaled(g, next));
}

void sluice__rate_decide(const struct sluice__gcra *g, uint64_t deadline, uint64_t token, uint64_t cost, uint64_t t,
                         struct sluice__rate_res *o) {
    if (!sluice__rate_decide_fast(g, deadline, token, cost, t, o))
        sluice__rate_decide_exact(g, deadline, token, cost, t, o);
}

/* ---- rows ---- */

/* The entry's new state and the decision of an admitted call. */
static SLUICE__HOT_INLINE void admit(struct sluice__entry *e, uint64_t t, const struct sluice__rate_res *o,
                                     sluice_decision_t *d) {
    e->token = o->token;
    e->node.deadline = o->deadline; /* no timer: the TAT is read on access */
    d->kind = SLUICE_EMITTED;
    d->at = t;
    d->full = o->deadline;
    d->remaining = o->remaining;
}

static SLUICE__HOT_INLINE void drop(const struct sluice__rate_res *o, sluice_decision_t *d) {
    d->kind = SLUICE_DROPPED;
    d->at = o->at;
    d->full = o->full;
}

/* Every call the fast path of call() does not take: a key
 * without an entry (created when admitted), or inputs outside the fast
 * path's bounds (the exact arithmetic). */
static NOINLINE_RATE int call_slow(struct sluice_limiter *l, const struct sluice__keyref *k, uint32_t idx,
                                   uint64_t cost, uint64_t t, sluice_decision_t *d) {
    struct sluice__entry *e = idx != SLUICE__NONE ? sluice__entry_of(l, idx) : NULL;
    struct sluice__rate_res o;
    sluice__rate_decide(&l->rate, e ? e->node.deadline : 0, e ? e->token : 0, cost, t, &o);
    if (o.kind == SLUICE_DROPPED) {
        drop(&o, d);
        return 0;
    }
    if (e) {
        admit(e, t, &o, d);
        return 0;
    }
    int rc = sluice__limiter_add_key(l, k, &idx);
    if (rc) return rc;
    admit(sluice__entry_of(l, idx), t, &o, d);
    if (o.deadline < l->rate_lb) l->rate_lb = o.deadline;
    if (o.deadline < l->rate_pass_min) l->rate_pass_min = o.deadline;
    sluice__rate_step(l, idx, t);
    return 0;
}

static int call(struct sluice_limiter *l, const struct sluice__keyref *k, uint32_t idx, uint64_t token, uint64_t cost,
                uint64_t t, sluice_decision_t *d) {
    (void)token;
    if (SLUICE__UNLIKELY(idx == SLUICE__NONE)) return call_slow(l, k, idx, cost, t, d);
    struct sluice__entry *e = sluice__entry_of(l, idx);
    struct sluice__rate_res o;
    if (SLUICE__UNLIKELY(!sluice__rate_decide_fast(&l->rate, e->node.deadline, e->token, cost, t, &o)))
        return call_slow(l, k, idx, cost, t, d);
    if (o.kind == SLUICE_DROPPED)
        drop(&o, d);
    else
        admit(e, t, &o, d);
    return 0;
}

/* Only close() reaches it (rate entries arm no timer): frees an expired entry. */
static void fire_now(struct sluice_limiter *l, uint32_t idx) { sluice__limiter_remove_key(l, idx); }

static size_t fire_into(struct sluice_limiter *l, uint32_t idx, sluice_emission_t *out) {
    (void)out;
    sluice__limiter_remove_key(l, idx);
    return 0;
}

/* ---- lazy expiry ---- */

static void reclaimed_all(struct sluice_limiter *l) {
    l->rate_lb = l->rate_pass_min = UINT64_MAX;
    l->rate_pass = 0;
}

/* The sweep after a key was created (`keep`, never freed here). */
void sluice__rate_step(struct sluice_limiter *l, uint32_t keep, uint64_t t) {
    for (unsigned j = 0; j < RATE_STEP; j++) {
        uint32_t i = l->rate_step;
        if (i >= l->table.top) i = 0;
        l->rate_step = i + 1;
        struct sluice__entry *e = sluice__entry_of(l, i);
        if (i != keep && e->state == SLUICE__LIVE && sluice__sat_add(e->node.deadline, l->rate_every) <= t)
            sluice__limiter_remove_key(l, i);
    }
}

/* The reclaim op (limiter-internal.h). */
size_t sluice__rate_reclaim(struct sluice_limiter *l, uint64_t now, size_t max) {
    size_t n = 0;
    /* Ends when no entry is idle: a pass ends with rate_lb = the least full
     * it kept, so rate_lb > now unless part of the pass ran at an earlier
     * time or keys were created since it began; then one more pass, all at
     * `now`, settles it. */
    while (l->table.live != 0 && now >= l->rate_lb) {
        if (l->rate_pass >= l->table.top) {
            l->rate_lb = l->rate_pass_min;
            l->rate_pass_min = UINT64_MAX;
            l->rate_pass = 0;
            l->rate_last = now;
            continue;
        }
        if (max && n >= max) break;
        uint32_t i = l->rate_pass++;
        struct sluice__entry *e = sluice__entry_of(l, i);
        if (e->state != SLUICE__LIVE) continue;
        if (e->node.deadline <= now) {
            sluice__limiter_remove_key(l, i);
            n++;
        } else if (e->node.deadline < l->rate_pass_min) {
            l->rate_pass_min = e->node.deadline;
        }
    }
    if (l->table.live == 0) {
        reclaimed_all(l);
        l->rate_last = now;
    }
    return n;
}

/* The next op: when advance() should reclaim. */
uint64_t sluice__rate_next(const struct sluice_limiter *l) {
    if (l->table.live == 0) return UINT64_MAX;
    uint64_t at = sluice__sat_add(l->rate_last, l->rate_every);
    return at > l->rate_lb ? at : l->rate_lb;
}

/* flush does nothing for rate (there is never a pending value). */
int sluice__rate_flush(struct sluice_limiter *l, uint32_t idx, uint64_t now) {
    (void)l;
    (void)idx;
    (void)now;
    return 0;
}

void sluice__rate_quota_exact(const struct sluice__gcra *g, uint64_t deadline, uint64_t token, uint64_t cost,
                              uint64_t t, sluice_quota_t *out) {
    /* At t, with tat = max(TAT, t): remaining = floor((t + burst*T - tat) / T),
     * full = tat, retry(n) = max(t, tat + n*T - burst*T), never when n > burst. */
    u128 ts = (u128)t * g->limit, bt = (u128)g->burst * g->per;
    u128 tat = ts;
    uint64_t full = t;
    struct qr e_tat = { deadline - (token != 0), token };
    u128 x = qr_scaled(g, e_tat);
    if (x > ts) { /* a key whose TAT <= t is fresh (its timer just has not run) */
        tat = x;
        full = deadline;
    }
    u128 room = ts + bt < clock_end(g) ? ts + bt : clock_end(g);
    u128 fresh = tat + (u128)cost * g->per;
    out->burst = g->burst;
    out->remaining = tat >= room ? 0 : floor_per(g, room - tat);
    out->full = full;
    if (cost > g->burst || fresh > clock_end(g))
        out->retry = SLUICE_NEVER;
    else
        out->retry = fresh - ts > bt ? ceil_ns(g, fresh - bt) : t;
}

void sluice__rate_quota(const struct sluice__gcra *g, uint64_t deadline, uint64_t token, uint64_t cost, uint64_t t,
                        sluice_quota_t *out) {
    /* the fast path's bounds and arithmetic (sluice__rate_decide_fast); a TAT > t exactly
     * when its deadline > t */
    uint64_t xq = 0, xr = 0, full = t;
    if (deadline > t) {
        xq = deadline - (token != 0) - t;
        xr = token;
        full = deadline;
    }
    if ((t >= g->t_lim) | (xq > g->bt_q)) {
        sluice__rate_quota_exact(g, deadline, token, cost, t, out);
        return;
    }
    uint64_t x = xq * g->limit + xr;
    out->burst = g->burst;
    out->remaining = x >= g->bt ? 0 : sluice__recip_div(g->inv_per, g->bt - x);
    out->full = full;
    if (cost > g->burst) {
        out->retry = SLUICE_NEVER;
    } else {
        uint64_t fresh = x + cost * g->per;
        out->retry = fresh > g->bt ? t + sluice__recip_div(g->inv_limit, fresh - g->bt + g->limit - 1) : t;
    }
}

static void quota(const struct sluice_limiter *l, uint32_t idx, uint64_t cost, uint64_t t, sluice_quota_t *out) {
    uint64_t dl = 0, rem = 0;
    if (idx != SLUICE__NONE) {
        const struct sluice__entry *e = sluice__entry_of(l, idx);
        dl = e->node.deadline;
        rem = e->token;
    }
    sluice__rate_quota(&l->rate, dl, rem, cost, t, out);
}

static const char *check(const struct sluice_limiter *l, const struct sluice__entry *e) {
    if (sluice__wheel_node_armed(&e->node)) return "rate entry with an armed timer";
    if (e->node.deadline < l->rate_lb) return "rate entry's full below the sweep's lower bound";
    if (e->flags & SLUICE__F_PENDING) return "rate key holds a pending value";
    if (e->flags & SLUICE__F_POLICY) return "rate entry with a debounce flag";
    if (e->token >= l->rate.limit) return "rate remainder not below limit";
    if (e->node.deadline == 0 && e->token != 0) return "rate TAT below zero";
    return NULL;
}

const struct sluice__policy_ops sluice__rate_ops = { .kind = SLUICE_RATE,
                                                     .name = "rate",
                                                     SLUICE__POLICY_OPS_COMMON,
                                                     .flush = sluice__rate_flush,
                                                     .quota = quota,
                                                     .reclaim = sluice__rate_reclaim,
                                                     .next = sluice__rate_next };
