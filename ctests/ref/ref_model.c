/*
 * ref_model.c — reference implementation of docs/semantics.md.
 * See ref_model.h. Every table row of the spec is implemented by one
 * clearly marked block below; the row is quoted in the comment above it.
 */
#include "ref_model.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

__extension__ typedef unsigned __int128 u128; /* exact rate arithmetic */

enum { IDLE = 0, OPEN = 1 }; /* OPEN is the spec's OPEN (throttle, audit) or ACTIVE (debounce) */

struct ref_entry {
    /* identity */
    sluice_key_kind_t kind;
    uint64_t u64;
    size_t len;
    unsigned char *bytes; /* own copy (never freed before ref_free: events point at it) */

    int state; /* IDLE or OPEN/ACTIVE */

    /* throttle, audit, debounce */
    bool has_pending;
    uint64_t pending;

    /* throttle, audit */
    uint64_t end;

    /* debounce */
    uint64_t last, start;
    bool max_due;

    /* rate: TAT * limit, exact (absent for a fresh key) */
    bool has_tat;
    u128 tat_scaled;

    /* rate with plans: the quotas the key was last charged under (a copy of
     * their names and numbers, not a plan index: set_plans may change the
     * plan) and each one's TAT * limit; nq == 0 for a key never charged */
    size_t nq;
    struct ref_quota {
        char name[SLUICE_PLAN_NAME_MAX + 1];
        uint64_t limit, per, burst; /* burst with the default applied */
        u128 tat;                   /* TAT * limit */
    } q[SLUICE_PLAN_QUOTAS_MAX];
};

struct ref_model {
    sluice_policy_t p;
    uint64_t W;        /* interval (throttle, audit, debounce) */
    uint64_t max_wait; /* debounce, when p.has_max_wait */
    uint64_t burst;    /* rate, with the default applied */
    bool closed;
    uint64_t now; /* largest time seen */

    struct ref_entry **keys; /* plain array, linear search */
    size_t nkeys, capkeys;

    ref_event_t *ev;
    size_t nev, capev;

    ref_hook_fn hook; /* called after each transition that logged events */
    void *hook_user;

    /* totals: decisions by kind, later events by kind */
    uint64_t decided[4], reported[4];

    /* rate with plans (ref_new_plans): a copy of the table */
    bool has_plans;
    struct ref_plan {
        char name[SLUICE_PLAN_NAME_MAX + 1];
        size_t nq;
        struct ref_quota q[SLUICE_PLAN_QUOTAS_MAX]; /* tat unused */
    } * plans;
    size_t nplans, max_quotas;
};

/* ------------------------------------------------------------------ */
/* helpers                                                             */
/* ------------------------------------------------------------------ */

static void ref_die(const char *what) {
    fprintf(stderr, "ref_model: %s\n", what);
    abort();
}

/* a + b, aborting on overflow: the model must never wrap silently */
static uint64_t add(uint64_t a, uint64_t b) {
    if (a > UINT64_MAX - b) ref_die("time overflow");
    return a + b;
}

static void *xrealloc(void *p, size_t n) {
    void *q = realloc(p, n ? n : 1);
    if (!q) ref_die("out of memory");
    return q;
}

static ref_event_t *log_event(ref_model_t *m, sluice_event_kind_t kind, const struct ref_entry *e, uint64_t token,
                              uint64_t at) {
    if (m->nev == m->capev) {
        m->capev = m->capev ? 2 * m->capev : 64;
        m->ev = xrealloc(m->ev, m->capev * sizeof *m->ev);
    }
    ref_event_t *x = &m->ev[m->nev++];
    x->kind = kind;
    x->key.kind = e->kind;
    x->key.u64 = e->kind == SLUICE_KEY_U64 ? e->u64 : 0;
    x->key.bytes = e->kind == SLUICE_KEY_BYTES ? e->bytes : NULL;
    x->key.len = e->kind == SLUICE_KEY_BYTES ? e->len : 0;
    x->token = token;
    x->at = at;
    x->has_successor = false;
    x->successor = 0;
    m->reported[kind & 3]++;
    return x;
}

/* A pending token dropped because `successor` of the same key took its place. */
static void log_superseded(ref_model_t *m, const struct ref_entry *e, uint64_t token, uint64_t successor, uint64_t at) {
    ref_event_t *x = log_event(m, SLUICE_EVENT_DROP, e, token, at);
    x->has_successor = true;
    x->successor = successor;
}

static int key_check(sluice_key_t k) {
    if (k.kind == SLUICE_KEY_U64) return 0;
    if (k.kind != SLUICE_KEY_BYTES) return SLUICE_EINVAL;
    if (k.len > SLUICE_KEY_MAX) return SLUICE_EKEYLEN;
    if (k.len > 0 && k.bytes == NULL) return SLUICE_EINVAL;
    return 0;
}

bool ref_key_equal(sluice_key_t a, sluice_key_t b) {
    if (a.kind != b.kind) return false;
    if (a.kind == SLUICE_KEY_U64) return a.u64 == b.u64;
    if (a.len != b.len) return false;
    return a.len == 0 || memcmp(a.bytes, b.bytes, a.len) == 0;
}

static bool entry_is(const struct ref_entry *e, sluice_key_t k) {
    sluice_key_t ek = { e->kind, e->bytes, e->len, e->u64 };
    return ref_key_equal(ek, k);
}

/* Linear search; creates an IDLE entry when `create`. */
static struct ref_entry *find(ref_model_t *m, sluice_key_t k, bool create) {
    for (size_t i = 0; i < m->nkeys; i++)
        if (entry_is(m->keys[i], k)) return m->keys[i];
    if (!create) return NULL;
    struct ref_entry *e = calloc(1, sizeof *e);
    if (!e) ref_die("out of memory");
    e->kind = k.kind;
    if (k.kind == SLUICE_KEY_U64) {
        e->u64 = k.u64;
    } else {
        e->len = k.len;
        e->bytes = xrealloc(NULL, k.len);
        if (k.len) memcpy(e->bytes, k.bytes, k.len);
    }
    e->state = IDLE;
    if (m->nkeys == m->capkeys) {
        m->capkeys = m->capkeys ? 2 * m->capkeys : 8;
        m->keys = xrealloc(m->keys, m->capkeys * sizeof *m->keys);
    }
    m->keys[m->nkeys++] = e;
    return e;
}

/* A transition is complete: hand its events to the hook (which may call in). */
static void after_transition(ref_model_t *m, size_t mark) {
    if (m->hook && m->nev > mark) m->hook(m->hook_user, m, mark, m->nev - mark);
}

void ref_set_hook(ref_model_t *m, ref_hook_fn fn, void *user) {
    m->hook = fn;
    m->hook_user = user;
}

static bool pass_through(const ref_model_t *m) { return m->p.kind != SLUICE_RATE && m->W == 0; }

/* ------------------------------------------------------------------ */
/* creation                                                            */
/* ------------------------------------------------------------------ */

int ref_new(ref_model_t **out, const sluice_policy_t *p) {
    if (!out || !p) return SLUICE_EINVAL;
    /* Conventions: "A negative interval, a maxWait < interval, or a policy
     * with neither edge enabled is a configuration error". Ranges from
     * sluice.h (SLUICE_DURATION_MAX, SLUICE_RATE_MAX). */
    switch (p->kind) {
    case SLUICE_THROTTLE:
    case SLUICE_AUDIT:
    case SLUICE_DEBOUNCE:
        if (p->interval_ns < 0) return SLUICE_EINVAL;
        if (p->interval_ns > SLUICE_DURATION_MAX) return SLUICE_ERANGE;
        if (p->kind != SLUICE_AUDIT && !p->leading && !p->trailing) return SLUICE_EINVAL;
        if (p->kind == SLUICE_THROTTLE && p->pick != SLUICE_PICK_LATEST && p->pick != SLUICE_PICK_FIRST)
            return SLUICE_EINVAL;
        if (p->kind == SLUICE_DEBOUNCE && p->has_max_wait) {
            if (p->max_wait_ns < p->interval_ns) return SLUICE_EINVAL;
            if (p->max_wait_ns > SLUICE_DURATION_MAX) return SLUICE_ERANGE;
        }
        break;
    case SLUICE_RATE:
        if (p->limit < 1 || p->per_ns < 1) return SLUICE_EINVAL;
        if (p->limit > SLUICE_RATE_MAX || p->burst > SLUICE_RATE_MAX) return SLUICE_ERANGE;
        if (p->per_ns > SLUICE_DURATION_MAX) return SLUICE_ERANGE;
        break;
    default: return SLUICE_EINVAL;
    }
    ref_model_t *m = calloc(1, sizeof *m);
    if (!m) return SLUICE_ENOMEM;
    m->p = *p;
    if (p->kind == SLUICE_AUDIT) {
        /* audit is trailing-only whatever the struct says */
        m->p.leading = false;
        m->p.trailing = true;
    }
    if (p->kind != SLUICE_RATE) m->W = (uint64_t)p->interval_ns;
    if (p->kind == SLUICE_DEBOUNCE && p->has_max_wait) m->max_wait = (uint64_t)p->max_wait_ns;
    if (p->kind == SLUICE_RATE) m->burst = p->burst ? p->burst : p->limit; /* "default burst = limit" */
    *out = m;
    return 0;
}

void ref_free(ref_model_t *m) {
    if (!m) return;
    for (size_t i = 0; i < m->nkeys; i++) {
        free(m->keys[i]->bytes);
        free(m->keys[i]);
    }
    free(m->keys);
    free(m->ev);
    free(m->plans);
    free(m);
}

/* ------------------------------------------------------------------ */
/* deadlines                                                           */
/* ------------------------------------------------------------------ */

/* The key's armed deadline, or UINT64_MAX when it has none. */
static uint64_t deadline_of(const ref_model_t *m, const struct ref_entry *e) {
    if (e->state == IDLE) return UINT64_MAX;
    switch (m->p.kind) {
    case SLUICE_THROTTLE:
    case SLUICE_AUDIT: return e->end;
    case SLUICE_DEBOUNCE: {
        /* "Deadline: last + W, or min(last + W, start + maxWait) when maxWait
         * is set." ... "else maxDue = true and the deadline becomes last + W" */
        uint64_t d = add(e->last, m->W);
        if (m->p.has_max_wait && !e->max_due) {
            uint64_t d2 = add(e->start, m->max_wait);
            if (d2 < d) d = d2;
        }
        return d;
    }
    default: return UINT64_MAX; /* rate: nothing is ever pending, no timers */
    }
}

/* Applies the timer row of the key at its deadline D (which must be armed). */
static void fire(ref_model_t *m, struct ref_entry *e) {
    uint64_t D = deadline_of(m, e);
    switch (m->p.kind) {
    case SLUICE_THROTTLE:
        /* Throttle | OPEN | timer(end) | trailing and pending: emit pending at
         * `end`, `end += W`, stay OPEN (the emission opens a new window).
         * Otherwise -> IDLE */
        if (m->p.trailing && e->has_pending) {
            log_event(m, SLUICE_EVENT_EMIT, e, e->pending, D);
            e->has_pending = false;
            e->end = add(e->end, m->W);
        } else {
            if (e->has_pending) ref_die("throttle: pending without trailing");
            e->state = IDLE;
        }
        break;
    case SLUICE_AUDIT:
        /* Audit | OPEN | timer(end) | emit pending; -> IDLE (no new window) */
        if (!e->has_pending) ref_die("audit: open without pending");
        log_event(m, SLUICE_EVENT_EMIT, e, e->pending, D);
        e->has_pending = false;
        e->state = IDLE;
        break;
    case SLUICE_DEBOUNCE: {
        /* Debounce | ACTIVE | timer(D) | quiet = D >= last + W. If trailing
         * and pending: emit pending at D. Then: quiet -> IDLE; else if it
         * emitted -> start = D; else maxDue = true and the deadline becomes
         * last + W */
        bool quiet = D >= add(e->last, m->W);
        bool emitted = false;
        if (m->p.trailing && e->has_pending) {
            log_event(m, SLUICE_EVENT_EMIT, e, e->pending, D);
            e->has_pending = false;
            emitted = true;
        }
        if (quiet) {
            if (e->has_pending) ref_die("debounce: pending left at quiet");
            e->state = IDLE;
            e->max_due = false;
        } else if (emitted) {
            e->start = D;
        } else {
            e->max_due = true; /* deadline_of() now gives last + W */
        }
        break;
    }
    default: ref_die("fire: no timers for this policy");
    }
}

/* Timers first, one key: every deadline <= t of this key fires, in order. */
static int64_t fire_key_due(ref_model_t *m, struct ref_entry *e, uint64_t t) {
    int64_t n = 0;
    while (deadline_of(m, e) <= t) {
        size_t mark = m->nev;
        fire(m, e);
        n++;
        after_transition(m, mark);
    }
    return n;
}

/* Timers first, whole limiter: repeatedly the key with the smallest due
 * deadline (ties: first-seen key) fires once. */
static int64_t fire_all_due(ref_model_t *m, uint64_t t) {
    int64_t n = 0;
    for (;;) {
        struct ref_entry *best = NULL;
        uint64_t bd = UINT64_MAX;
        for (size_t i = 0; i < m->nkeys; i++) {
            uint64_t d = deadline_of(m, m->keys[i]);
            if (d <= t && (best == NULL || d < bd)) {
                best = m->keys[i];
                bd = d;
            }
        }
        if (!best) return n;
        size_t mark = m->nev;
        fire(m, best);
        n++;
        after_transition(m, mark);
    }
}

static void see(ref_model_t *m, uint64_t *now) {
    /* "A now earlier than a time the limiter has already seen is treated as
     * that later time." (sluice.h) */
    if (*now < m->now) *now = m->now;
    m->now = *now;
}

/* ------------------------------------------------------------------ */
/* calls                                                               */
/* ------------------------------------------------------------------ */

static void call_throttle(ref_model_t *m, struct ref_entry *e, uint64_t t, uint64_t v, sluice_decision_t *d) {
    if (e->state == IDLE) {
        /* Throttle | IDLE | call(t, v) | end = t + W; leading ? emit v :
         * pending = v; -> OPEN */
        e->end = add(t, m->W);
        e->state = OPEN;
        if (m->p.leading) {
            d->kind = SLUICE_EMITTED;
            d->at = t;
        } else {
            e->has_pending = true;
            e->pending = v;
            d->kind = SLUICE_SCHEDULED;
            d->at = e->end;
        }
        return;
    }
    /* Throttle | OPEN | call(t, v) | trailing off: drop v. No pending:
     * pending = v. pick latest: drop pending, pending = v. pick first: drop v */
    if (!m->p.trailing) {
        d->kind = SLUICE_DROPPED;
        d->at = e->end;
    } else if (!e->has_pending) {
        e->has_pending = true;
        e->pending = v;
        d->kind = SLUICE_SCHEDULED;
        d->at = e->end;
    } else if (m->p.pick == SLUICE_PICK_LATEST) {
        log_superseded(m, e, e->pending, v, t);
        e->pending = v;
        d->kind = SLUICE_SCHEDULED;
        d->at = e->end;
    } else {
        d->kind = SLUICE_DROPPED;
        d->at = e->end;
    }
}

static void call_audit(ref_model_t *m, struct ref_entry *e, uint64_t t, uint64_t v, sluice_decision_t *d) {
    if (e->state == IDLE) {
        /* Audit | IDLE | call(t, v) | end = t + W, pending = v; -> OPEN */
        e->end = add(t, m->W);
        e->state = OPEN;
        e->has_pending = true;
        e->pending = v;
    } else {
        /* Audit | OPEN | call(t, v) | drop pending, pending = v */
        log_superseded(m, e, e->pending, v, t);
        e->pending = v;
    }
    d->kind = SLUICE_SCHEDULED;
    d->at = e->end;
}

static void call_debounce(ref_model_t *m, struct ref_entry *e, uint64_t t, uint64_t v, sluice_decision_t *d) {
    if (e->state == IDLE) {
        /* Debounce | IDLE | call(t, v) | last = start = t; leading ? emit v :
         * pending = v; -> ACTIVE */
        e->state = OPEN;
        e->last = e->start = t;
        e->max_due = false;
        if (m->p.leading) {
            d->kind = SLUICE_EMITTED;
            d->at = t;
        } else {
            e->has_pending = true;
            e->pending = v;
            d->kind = SLUICE_SCHEDULED;
            d->at = deadline_of(m, e);
        }
        return;
    }
    if (e->max_due && m->p.leading) {
        /* Debounce | ACTIVE | call(t, v), maxDue and leading | emit v;
         * last = start = t; maxDue = false */
        if (e->has_pending) ref_die("debounce: pending while maxDue");
        e->last = e->start = t;
        e->max_due = false;
        d->kind = SLUICE_EMITTED;
        d->at = t;
        return;
    }
    /* Debounce | ACTIVE | call(t, v), otherwise | last = t; trailing ? (drop
     * pending if any; pending = v) : drop v */
    e->last = t;
    if (m->p.trailing) {
        if (e->has_pending) log_superseded(m, e, e->pending, v, t);
        e->has_pending = true;
        e->pending = v;
        d->kind = SLUICE_SCHEDULED;
        d->at = deadline_of(m, e);
    } else {
        /* sluice.h: DROPPED reports "the end of the window or wait that
         * suppressed the call": the wait as it stands after this call. */
        d->kind = SLUICE_DROPPED;
        d->at = deadline_of(m, e);
    }
}

/* The end of the clock, scaled (sluice.h: time is a uint64 count of ns). A
 * call that would push a TAT past it never fits: dropped, retry "never";
 * `remaining` counts only the calls that fit before it. */
static u128 clock_end(const ref_model_t *m) { return (u128)UINT64_MAX * m->p.limit; }

/* ceil(x / limit) ns, at most UINT64_MAX ("times round up": never early). */
static uint64_t ceil_ns(const ref_model_t *m, u128 x) {
    u128 L = m->p.limit;
    u128 q = x / L + (x % L != 0);
    return q > UINT64_MAX ? UINT64_MAX : (uint64_t)q;
}

/* The key's scaled tat = max(TAT, t) (t for a fresh key). */
static u128 rate_tat(const ref_model_t *m, const struct ref_entry *e, uint64_t t) {
    u128 ts = (u128)t * m->p.limit;
    return (e && e->has_tat && e->tat_scaled > ts) ? e->tat_scaled : ts;
}

static void call_rate(ref_model_t *m, struct ref_entry *e, uint64_t t, uint64_t n, sluice_decision_t *d) {
    /* Rate | call(t, v, n) | tat = max(TAT, t), new = tat + n*T. If new - t
     * <= burst*T: emit v, TAT = new. Otherwise drop v; TAT unchanged.
     * Everything is scaled by `limit` so that T = per / limit is the integer
     * per: T*limit = per, burst*T*limit = burst * per. A fresh key behaves as
     * TAT = t. */
    u128 L = m->p.limit, P = (uint64_t)m->p.per_ns, BP = (u128)m->burst * P;
    u128 ts = (u128)t * L;
    u128 tat = rate_tat(m, e, t);
    if (n > m->burst) {
        /* "A call whose cost exceeds burst can never be admitted: it is
         * dropped and its retry time is never" */
        d->kind = SLUICE_DROPPED;
        d->at = SLUICE_NEVER;
        d->full = ceil_ns(m, tat);
        return;
    }
    u128 fresh = tat + (u128)n * P;
    u128 room = ts + BP < clock_end(m) ? ts + BP : clock_end(m);
    if (fresh > clock_end(m)) {
        d->kind = SLUICE_DROPPED;
        d->at = SLUICE_NEVER;
        d->full = ceil_ns(m, tat);
    } else if (fresh - ts <= BP) {
        e->has_tat = true;
        e->tat_scaled = fresh;
        d->kind = SLUICE_EMITTED;
        d->at = t;
        /* "An admitted call learns its remaining and full right after it
         * counted": remaining = floor((t + burst*T - tat) / T), full = tat */
        d->remaining = (uint64_t)((room - e->tat_scaled) / P);
        d->full = ceil_ns(m, e->tat_scaled);
    } else {
        /* "A dropped call of cost n would be admitted from tat + n*T -
         * burst*T on", rounded up to the ns (never toward admitting). */
        d->kind = SLUICE_DROPPED;
        d->at = ceil_ns(m, fresh - BP); /* > ts here */
        d->full = ceil_ns(m, tat);
    }
}

int ref_quota(ref_model_t *m, sluice_key_t key, uint64_t cost, uint64_t now, sluice_quota_t *out) {
    if (!m || !out) return SLUICE_EINVAL;
    if (m->closed) return SLUICE_ECLOSED;
    if (m->p.kind != SLUICE_RATE) return SLUICE_EINVAL;
    if (cost == 0 || cost > SLUICE_RATE_MAX) return SLUICE_ERANGE;
    int rc = key_check(key);
    if (rc) return rc;
    if (m->has_plans) return ref_quota_plan(m, key, cost, 0, now, out, NULL); /* the default plan */
    if (now < m->now) now = m->now;                                           /* a peek does not move the clock */
    out->now = now;
    /* Quota of a key: at time t, with tat = max(TAT, t):
     * remaining = floor((t + burst*T - tat) / T), full = tat,
     * retry(n) = max(t, tat + n*T - burst*T); never when n > burst. */
    u128 P = (uint64_t)m->p.per_ns, BP = (u128)m->burst * P;
    u128 ts = (u128)now * m->p.limit;
    u128 tat = rate_tat(m, find(m, key, false), now);
    u128 room = ts + BP < clock_end(m) ? ts + BP : clock_end(m);
    out->burst = m->burst;
    out->remaining = tat >= room ? 0 : (uint64_t)((room - tat) / P);
    out->full = ceil_ns(m, tat);
    if (cost > m->burst || tat + (u128)cost * P > clock_end(m))
        out->retry = SLUICE_NEVER;
    else if (tat + (u128)cost * P > ts + BP)
        out->retry = ceil_ns(m, tat + (u128)cost * P - BP);
    else
        out->retry = now;
    return 0;
}

int ref_submit_cost(ref_model_t *m, sluice_key_t key, uint64_t token, uint64_t cost, uint64_t now,
                    sluice_decision_t *decision) {
    sluice_decision_t dummy;
    if (!decision) decision = &dummy;
    if (!m) return SLUICE_EINVAL;
    int rc = key_check(key);
    if (rc) return rc;
    if (m->closed) return SLUICE_ECLOSED;
    if (cost == 0 || cost > SLUICE_RATE_MAX) return SLUICE_ERANGE;
    if (cost != 1 && m->p.kind != SLUICE_RATE) return SLUICE_EINVAL;
    if (m->has_plans) return ref_submit_plan(m, key, token, cost, 0, now, decision, NULL); /* the default plan */
    see(m, &now);
    decision->now = now;
    decision->remaining = decision->full = 0; /* rate only */
    if (pass_through(m)) {
        /* "interval == 0 means pass-through: every call emits at once." */
        decision->kind = SLUICE_EMITTED;
        decision->at = now;
        m->decided[SLUICE_EMITTED]++;
        return 0;
    }
    struct ref_entry *e = find(m, key, true);
    if (m->p.kind != SLUICE_RATE) fire_key_due(m, e, now); /* timers first */
    size_t mark = m->nev;
    switch (m->p.kind) {
    case SLUICE_THROTTLE: call_throttle(m, e, now, token, decision); break;
    case SLUICE_AUDIT: call_audit(m, e, now, token, decision); break;
    case SLUICE_DEBOUNCE: call_debounce(m, e, now, token, decision); break;
    case SLUICE_RATE: call_rate(m, e, now, cost, decision); break;
    }
    m->decided[decision->kind & 3]++;
    after_transition(m, mark);
    return 0;
}

int ref_submit(ref_model_t *m, sluice_key_t key, uint64_t token, uint64_t now, sluice_decision_t *decision) {
    return ref_submit_cost(m, key, token, 1, now, decision);
}

void ref_totals(const ref_model_t *m, sluice_stats_t *out) {
    out->admitted = m->decided[SLUICE_EMITTED];
    out->scheduled = m->decided[SLUICE_SCHEDULED];
    out->emitted_later = m->reported[SLUICE_EVENT_EMIT];
    out->dropped = m->decided[SLUICE_DROPPED] + m->reported[SLUICE_EVENT_DROP];
    out->discarded = m->reported[SLUICE_EVENT_DISCARD];
}

/* ------------------------------------------------------------------ */
/* operations on one key                                               */
/* ------------------------------------------------------------------ */

static int key_op_prologue(ref_model_t *m, sluice_key_t key, uint64_t *now, struct ref_entry **e) {
    if (!m) return SLUICE_EINVAL;
    int rc = key_check(key);
    if (rc) return rc;
    if (m->closed) return SLUICE_ECLOSED;
    see(m, now);
    *e = find(m, key, false);
    if (*e && m->p.kind != SLUICE_RATE) fire_key_due(m, *e, *now); /* timers first */
    return 0;
}

static void to_idle(struct ref_entry *e) {
    e->state = IDLE;
    e->has_pending = false;
    e->max_due = false;
}

int ref_flush(ref_model_t *m, sluice_key_t key, uint64_t now) {
    struct ref_entry *e;
    int rc = key_op_prologue(m, key, &now, &e);
    if (rc) return rc;
    /* flush(key): a pending value is emitted now; the key returns to IDLE and
     * its timer is disarmed. Rate: flush does nothing. */
    if (!e || m->p.kind == SLUICE_RATE) return 0;
    int r = 0;
    size_t mark = m->nev;
    if (e->has_pending) {
        log_event(m, SLUICE_EVENT_EMIT, e, e->pending, now);
        r = 1;
    }
    to_idle(e);
    after_transition(m, mark);
    return r;
}

int ref_cancel(ref_model_t *m, sluice_key_t key, uint64_t now) {
    struct ref_entry *e;
    int rc = key_op_prologue(m, key, &now, &e);
    if (rc) return rc;
    if (!e) return 0;
    if (m->p.kind == SLUICE_RATE) {
        /* "cancel(key) forgets the key's history (a fresh quota)" */
        e->has_tat = false;
        e->tat_scaled = 0;
        e->nq = 0; /* plans: no memory, no plan */
        return 0;
    }
    /* cancel(key): a pending value is dropped; the key returns to IDLE,
     * timer disarmed. */
    int r = 0;
    size_t mark = m->nev;
    if (e->has_pending) {
        log_event(m, SLUICE_EVENT_DROP, e, e->pending, now);
        r = 1;
    }
    to_idle(e);
    after_transition(m, mark);
    return r;
}

int ref_pending(ref_model_t *m, sluice_key_t key, uint64_t now) {
    struct ref_entry *e;
    int rc = key_op_prologue(m, key, &now, &e);
    if (rc) return rc;
    /* pending(key): true when a value waits to be emitted later. An open
     * window with nothing pending is not "pending". Rate: always false. */
    return e && e->has_pending ? 1 : 0;
}

/* ------------------------------------------------------------------ */
/* whole limiter                                                       */
/* ------------------------------------------------------------------ */

int ref_close(ref_model_t *m, uint64_t now, sluice_close_mode_t mode) {
    if (!m) return SLUICE_EINVAL;
    if (mode != SLUICE_CLOSE_DRAIN && mode != SLUICE_CLOSE_DISCARD) return SLUICE_EINVAL;
    if (m->closed) return SLUICE_ECLOSED;
    see(m, &now);
    fire_all_due(m, now); /* "deadlines due at now fire first" (sluice.h) */
    /* close(drain): every pending value of every key is emitted now.
     * close(discard): every pending value is handed back as discarded.
     * The limiter is closed before anyone hears of it: calls made from the
     * hook fail with SLUICE_ECLOSED. */
    size_t mark = m->nev;
    for (size_t i = 0; i < m->nkeys; i++) {
        struct ref_entry *e = m->keys[i];
        if (e->has_pending)
            log_event(m, mode == SLUICE_CLOSE_DRAIN ? SLUICE_EVENT_EMIT : SLUICE_EVENT_DISCARD, e, e->pending, now);
        to_idle(e);
        e->has_tat = false;
        e->nq = 0;
    }
    m->closed = true;
    after_transition(m, mark);
    return 0;
}

int64_t ref_advance(ref_model_t *m, uint64_t now) {
    if (!m) return SLUICE_EINVAL;
    if (m->closed) return SLUICE_ECLOSED;
    see(m, &now);
    return fire_all_due(m, now);
}

uint64_t ref_next_deadline(const ref_model_t *m) {
    uint64_t best = UINT64_MAX;
    if (!m || m->closed) return best;
    for (size_t i = 0; i < m->nkeys; i++) {
        uint64_t d = deadline_of(m, m->keys[i]);
        if (d < best) best = d;
    }
    return best;
}

size_t ref_event_count(const ref_model_t *m) { return m->nev; }
const ref_event_t *ref_events(const ref_model_t *m) { return m->ev; }
void ref_clear_events(ref_model_t *m) { m->nev = 0; }
bool ref_closed(const ref_model_t *m) { return m->closed; }
uint64_t ref_now(const ref_model_t *m) { return m->now; }

uint64_t ref_pending_count(const ref_model_t *m) {
    uint64_t n = 0;
    for (size_t i = 0; i < m->nkeys; i++) n += m->keys[i]->has_pending;
    return n;
}

uint64_t ref_live_count(const ref_model_t *m) {
    uint64_t n = 0;
    for (size_t i = 0; i < m->nkeys; i++) {
        const struct ref_entry *e = m->keys[i];
        if (m->has_plans) {
            bool live = false;
            for (size_t j = 0; j < e->nq; j++) live |= e->q[j].tat > (u128)m->now * e->q[j].limit;
            n += live;
        } else if (m->p.kind == SLUICE_RATE)
            n += e->has_tat && e->tat_scaled > (u128)m->now * m->p.limit;
        else
            n += e->state != IDLE;
    }
    return n;
}

/* ------------------------------------------------------------------ */
/* several quotas per key, and plans (sluice_plans.h)                  */
/* ------------------------------------------------------------------ */
/*
 * Written from the rules alone:
 *  - quota q (limit L, per P, burst B): T = P / L; each TAT is kept as
 *    S = TAT * L, an integer (t*L and n*P are integers);
 *  - a call of cost n at t is admitted iff for EVERY quota of its plan
 *    new_q = max(S_q, t*L) + n*P satisfies new_q - t*L <= B*P; then every
 *    S_q = new_q; otherwise nothing changes;
 *  - a key charged under other quotas (kept as a copy of their names and
 *    numbers) is first converted, quota by quota matched by name: for a TAT
 *    still ahead of t, TAT' = t + (TAT - t) * T' / T, that is
 *    S' = t*L' + (S - t*L) * P' / P, rounded up to an integer (the next
 *    1/L' ns, as sluice_plans.h says); every other quota is fresh. Only an
 *    admitted call stores the converted state.
 *    One conversion rounded so cannot be told from the exact rational by any
 *    reported figure. A stored rounded conversion converted again can: the
 *    error (< 1/L' ns) is scaled by T''/T'. E.g. free s 1/3ms, then at 1 ms
 *    pro s 7/2ms (stored), then a read under s 1/1e9ms: full 1666667001 ms
 *    here, 1666666668 ms exactly. This model follows sluice_plans.h (round
 *    up at each conversion), like an implementation in integers must.
 * (S - t*L) < 2^105 and P' < 2^60: the product needs up to 165 bits, so it
 * goes through mul_div_up() below (192-bit product, 64-bit divisor).
 */

/* ceil(a * b / c) for c >= 1; false when it does not fit in 128 bits. */
static bool mul_div_up(u128 a, uint64_t b, uint64_t c, u128 *out) {
    const u128 M = UINT64_MAX;
    u128 p0 = (a & M) * b, p1 = (a >> 64) * b;
    u128 mid = (p0 >> 64) + (p1 & M);
    uint64_t limb[3] = { (uint64_t)p0, (uint64_t)mid, (uint64_t)((p1 >> 64) + (mid >> 64)) };
    uint64_t q[3];
    u128 r = 0;
    for (int i = 2; i >= 0; i--) {
        u128 cur = (r << 64) | limb[i];
        q[i] = (uint64_t)(cur / c);
        r = cur % c;
    }
    if (q[2]) return false;
    u128 v = ((u128)q[1] << 64) | q[0];
    if (r) {
        if (v == ~(u128)0) return false;
        v++;
    }
    *out = v;
    return true;
}

static bool name_ok(const char *s) {
    if (!s) return false;
    size_t n = strlen(s);
    if (n < 1 || n > SLUICE_PLAN_NAME_MAX) return false;
    for (size_t i = 0; i < n; i++) {
        char ch = s[i];
        bool ok = (ch >= 'A' && ch <= 'Z') || (ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9') || ch == '_' ||
                  ch == '.' || ch == '-';
        if (!ok) return false;
    }
    return true;
}

/* The rules of sluice_plans_check(). */
static int plans_check(const sluice_plans_t *t) {
    if (!t || !t->plans) return SLUICE_EINVAL;
    if (t->nplans < 1 || t->nplans > SLUICE_PLANS_MAX) return SLUICE_EINVAL;
    if (t->max_quotas > SLUICE_PLAN_QUOTAS_MAX) return SLUICE_EINVAL;
    for (size_t i = 0; i < t->nplans; i++) {
        const sluice_plan_t *p = &t->plans[i];
        if (!name_ok(p->name)) return SLUICE_EINVAL;
        for (size_t j = 0; j < i; j++)
            if (!strcmp(p->name, t->plans[j].name)) return SLUICE_EINVAL;
        if (!p->quotas || p->nquotas < 1 || p->nquotas > SLUICE_PLAN_QUOTAS_MAX) return SLUICE_EINVAL;
        if (t->max_quotas && p->nquotas > t->max_quotas) return SLUICE_EINVAL;
        for (size_t k = 0; k < p->nquotas; k++) {
            const sluice_rate_quota_t *q = &p->quotas[k];
            if (!name_ok(q->name)) return SLUICE_EINVAL;
            for (size_t j = 0; j < k; j++)
                if (!strcmp(q->name, p->quotas[j].name)) return SLUICE_EINVAL;
            if (q->limit < 1 || q->per_ns < 1) return SLUICE_EINVAL;
            if (q->limit > SLUICE_RATE_MAX || q->burst > SLUICE_RATE_MAX || q->per_ns > SLUICE_DURATION_MAX)
                return SLUICE_ERANGE;
        }
    }
    return 0;
}

static void plans_copy(ref_model_t *m, const sluice_plans_t *t) {
    struct ref_plan *np = xrealloc(NULL, t->nplans * sizeof *np);
    memset(np, 0, t->nplans * sizeof *np);
    for (size_t i = 0; i < t->nplans; i++) {
        strcpy(np[i].name, t->plans[i].name);
        np[i].nq = t->plans[i].nquotas;
        for (size_t k = 0; k < np[i].nq; k++) {
            const sluice_rate_quota_t *q = &t->plans[i].quotas[k];
            strcpy(np[i].q[k].name, q->name);
            np[i].q[k].limit = q->limit;
            np[i].q[k].per = (uint64_t)q->per_ns;
            np[i].q[k].burst = q->burst ? q->burst : q->limit; /* 0 means limit */
        }
    }
    free(m->plans);
    m->plans = np;
    m->nplans = t->nplans;
}

int ref_new_plans(ref_model_t **out, const sluice_plans_t *plans) {
    if (!out) return SLUICE_EINVAL;
    int rc = plans_check(plans);
    if (rc) return rc;
    ref_model_t *m = calloc(1, sizeof *m);
    if (!m) return SLUICE_ENOMEM;
    m->p = sluice_rate_plans();
    m->has_plans = true;
    size_t mq = plans->max_quotas;
    if (mq == 0)
        for (size_t i = 0; i < plans->nplans; i++)
            if (plans->plans[i].nquotas > mq) mq = plans->plans[i].nquotas;
    m->max_quotas = mq;
    plans_copy(m, plans);
    *out = m;
    return 0;
}

int ref_set_plans(ref_model_t *m, const sluice_plans_t *plans) {
    if (!m || !plans) return SLUICE_EINVAL;
    if (m->closed) return SLUICE_ECLOSED;
    if (!m->has_plans) return SLUICE_EINVAL;
    int rc = plans_check(plans);
    if (rc) return rc;
    /* (SLUICE_ERANGE as the core: the header allows either) */
    if (plans->max_quotas && plans->max_quotas != m->max_quotas) return SLUICE_ERANGE;
    for (size_t i = 0; i < plans->nplans; i++)
        if (plans->plans[i].nquotas > m->max_quotas) return SLUICE_ERANGE;
    /* Keys keep their state (and the quotas it was charged under): each is
     * converted at its next call. */
    plans_copy(m, plans);
    return 0;
}

int ref_plan_count(const ref_model_t *m) { return m && m->has_plans ? (int)m->nplans : 1; }

int ref_plan_index(const ref_model_t *m, const char *name, uint32_t *out) {
    if (!m || !name || !out) return SLUICE_EINVAL;
    if (!m->has_plans) return SLUICE_EINVAL;
    for (size_t i = 0; i < m->nplans; i++)
        if (!strcmp(m->plans[i].name, name)) {
            *out = (uint32_t)i;
            return 0;
        }
    return SLUICE_ENOPLAN;
}

/* The end of the clock for a quota of limit L, scaled. */
static u128 q_end(const struct ref_quota *q) { return (u128)UINT64_MAX * q->limit; }

static uint64_t q_ceil_ns(const struct ref_quota *q, u128 x) {
    u128 v = x / q->limit + (x % q->limit != 0);
    return v > UINT64_MAX ? UINT64_MAX : (uint64_t)v;
}

/* The key's scaled tat = max(TAT', t*L') of each quota of plan `pl` at t,
 * its state converted from the quotas it was last charged under. A
 * converted TAT past the end of the clock is held as end + 1 (no call can
 * then pass that quota; every figure is the same as for the exact value). */
static void plan_view(const struct ref_entry *e, const struct ref_plan *pl, uint64_t t, u128 *tat) {
    for (size_t j = 0; j < pl->nq; j++) {
        const struct ref_quota *nq = &pl->q[j];
        u128 ts = (u128)t * nq->limit;
        tat[j] = ts; /* fresh */
        if (!e) continue;
        for (size_t i = 0; i < e->nq; i++) {
            const struct ref_quota *oq = &e->q[i];
            if (strcmp(oq->name, nq->name)) continue;
            u128 ots = (u128)t * oq->limit;
            if (oq->tat <= ots) break; /* passed: fresh */
            /* S' = t*L' + ceil((S - t*L) * P' / P) */
            u128 d;
            if (!mul_div_up(oq->tat - ots, nq->per, oq->per, &d) || d > q_end(nq) - ts)
                tat[j] = q_end(nq) + 1;
            else
                tat[j] = ts + d;
            break;
        }
    }
}

/* One quota's figures at t for a cost n, given its scaled tat (>= t*L). */
static void q_figures(const struct ref_quota *q, u128 tat, uint64_t t, uint64_t n, sluice_quota_figures_t *f,
                      bool *admits) {
    u128 P = q->per, BP = (u128)q->burst * P, ts = (u128)t * q->limit, end = q_end(q);
    u128 room = ts + BP < end ? ts + BP : end;
    u128 fresh = tat + (u128)n * P;
    f->remaining = tat >= room ? 0 : (uint64_t)((room - tat) / P);
    f->full = q_ceil_ns(q, tat);
    f->burst = q->burst;
    f->limit = q->limit;
    f->per_ns = q->per;
    /* admitted iff n <= burst, new - t <= burst*T, and new within the clock */
    *admits = n <= q->burst && fresh <= end && fresh - ts <= BP;
    if (n > q->burst || fresh > end)
        f->retry = SLUICE_NEVER;
    else if (fresh - ts > BP)
        f->retry = q_ceil_ns(q, fresh - BP);
    else
        f->retry = t;
}

/* Detail of a model without plans: one plan of the policy's one quota. */
static void single_detail(const ref_model_t *m, sluice_plan_detail_t *det) {
    memset(det, 0, sizeof *det);
    det->plan = 0;
    det->nquotas = 1;
    det->quotas[0].burst = m->burst;
    det->quotas[0].limit = m->p.limit;
    det->quotas[0].per_ns = (uint64_t)m->p.per_ns;
}

static int plan_call(ref_model_t *m, struct ref_entry *e, uint64_t cost, uint32_t plan, uint64_t t,
                     sluice_decision_t *d, sluice_plan_detail_t *det) {
    const struct ref_plan *pl = &m->plans[plan];
    u128 tat[SLUICE_PLAN_QUOTAS_MAX];
    plan_view(e, pl, t, tat);
    memset(det, 0, sizeof *det);
    det->plan = plan;
    det->nquotas = (uint32_t)pl->nq;
    bool all = true;
    bool admits[SLUICE_PLAN_QUOTAS_MAX];
    for (size_t j = 0; j < pl->nq; j++) {
        q_figures(&pl->q[j], tat[j], t, cost, &det->quotas[j], &admits[j]);
        if (!admits[j]) {
            all = false;
            det->refused |= 1u << j;
        }
    }
    d->now = t;
    if (all) {
        /* every quota admits: charge them all, and the key is now under this plan */
        e->nq = pl->nq;
        d->remaining = UINT64_MAX;
        d->full = 0;
        for (size_t j = 0; j < pl->nq; j++) {
            e->q[j] = pl->q[j];
            e->q[j].tat = tat[j] + (u128)cost * pl->q[j].per;
            bool ok;
            q_figures(&e->q[j], e->q[j].tat, t, cost, &det->quotas[j], &ok);
            det->quotas[j].retry = t; /* it passed, now */
            if (det->quotas[j].remaining < d->remaining) d->remaining = det->quotas[j].remaining;
            if (det->quotas[j].full > d->full) d->full = det->quotas[j].full;
        }
        d->kind = SLUICE_EMITTED;
        d->at = t;
    } else {
        /* refused: nothing changes, in any quota (the conversion is not kept) */
        d->kind = SLUICE_DROPPED;
        d->remaining = 0;
        d->full = 0;
        d->at = t;
        for (size_t j = 0; j < pl->nq; j++) {
            if (det->quotas[j].full > d->full) d->full = det->quotas[j].full;
            if (det->quotas[j].retry > d->at) d->at = det->quotas[j].retry; /* NEVER is the largest */
        }
    }
    return 0;
}

int ref_submit_plan(ref_model_t *m, sluice_key_t key, uint64_t token, uint64_t cost, uint32_t plan, uint64_t now,
                    sluice_decision_t *decision, sluice_plan_detail_t *detail) {
    sluice_decision_t dummy;
    sluice_plan_detail_t ddummy;
    if (!decision) decision = &dummy;
    if (!detail) detail = &ddummy;
    if (!m) return SLUICE_EINVAL;
    int rc = key_check(key);
    if (rc) return rc;
    if (m->closed) return SLUICE_ECLOSED;
    if (m->p.kind != SLUICE_RATE) return SLUICE_EINVAL;
    /* (a bad plan is reported before a bad cost, as the core does: the
     * header leaves the order open) */
    if (m->has_plans ? plan >= m->nplans : plan != 0) return SLUICE_ENOPLAN; /* nothing changes, not even the clock */
    if (cost == 0 || cost > SLUICE_RATE_MAX) return SLUICE_ERANGE;
    if (!m->has_plans) {
        /* only plan 0, the policy's one quota */
        sluice_quota_t q;
        rc = ref_quota(m, key, cost, now, &q); /* the figures as the key stands */
        if (rc) return rc;
        rc = ref_submit_cost(m, key, token, cost, now, decision);
        if (rc) return rc;
        single_detail(m, detail);
        if (decision->kind == SLUICE_EMITTED) {
            detail->quotas[0].remaining = decision->remaining;
            detail->quotas[0].full = decision->full;
            detail->quotas[0].retry = decision->now;
        } else {
            detail->refused = 1;
            detail->quotas[0].remaining = q.remaining;
            detail->quotas[0].full = q.full;
            detail->quotas[0].retry = q.retry;
        }
        return 0;
    }
    (void)token; /* rate decides at once: no token is kept */
    see(m, &now);
    struct ref_entry *e = find(m, key, true);
    plan_call(m, e, cost, plan, now, decision, detail);
    m->decided[decision->kind & 3]++;
    return 0;
}

int ref_quota_plan(ref_model_t *m, sluice_key_t key, uint64_t cost, uint32_t plan, uint64_t now, sluice_quota_t *out,
                   sluice_plan_detail_t *detail) {
    sluice_plan_detail_t ddummy;
    if (!detail) detail = &ddummy;
    if (!m || !out) return SLUICE_EINVAL;
    if (m->closed) return SLUICE_ECLOSED;
    if (m->p.kind != SLUICE_RATE) return SLUICE_EINVAL;
    if (m->has_plans ? plan >= m->nplans : plan != 0) return SLUICE_ENOPLAN; /* (before cost and key, as the core) */
    if (cost == 0 || cost > SLUICE_RATE_MAX) return SLUICE_ERANGE;
    int rc = key_check(key);
    if (rc) return rc;
    if (!m->has_plans) {
        rc = ref_quota(m, key, cost, now, out);
        if (rc) return rc;
        single_detail(m, detail);
        detail->quotas[0].remaining = out->remaining;
        detail->quotas[0].full = out->full;
        detail->quotas[0].retry = out->retry;
        detail->refused = out->retry != out->now;
        return 0;
    }
    if (now < m->now) now = m->now; /* a peek does not move the clock */
    const struct ref_plan *pl = &m->plans[plan];
    u128 tat[SLUICE_PLAN_QUOTAS_MAX];
    plan_view(find(m, key, false), pl, now, tat);
    memset(detail, 0, sizeof *detail);
    detail->plan = plan;
    detail->nquotas = (uint32_t)pl->nq;
    out->remaining = UINT64_MAX;
    out->full = 0;
    out->retry = now;
    out->burst = UINT64_MAX;
    out->now = now;
    for (size_t j = 0; j < pl->nq; j++) {
        bool admits;
        sluice_quota_figures_t *f = &detail->quotas[j];
        q_figures(&pl->q[j], tat[j], now, cost, f, &admits);
        if (!admits) detail->refused |= 1u << j;
        if (f->remaining < out->remaining) out->remaining = f->remaining;
        if (f->full > out->full) out->full = f->full;
        if (f->retry > out->retry) out->retry = f->retry;
        if (f->burst < out->burst) out->burst = f->burst;
    }
    return 0;
}
