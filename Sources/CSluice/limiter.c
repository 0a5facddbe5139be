/* limiter.c — the policies of semantics.md on the keyed table and the wheel.
 *
 * Every transition first brings the entry to its new consistent state
 * (fields, pending flag, timer armed or entry removed) and only then reports
 * the event it produced, so a callback that re-enters the limiter sees a
 * finished transition. Entry indices are never used across a callback: after
 * one, the key is looked up again. */
#define _DEFAULT_SOURCE 1
#include "limiter-internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#if defined(__linux__)
#include <sys/random.h>
#endif

__extension__ typedef unsigned __int128 sl_u128;

static inline uint64_t sat_add(uint64_t a, uint64_t b) { return a > UINT64_MAX - b ? UINT64_MAX : a + b; }
static inline uint64_t min_u64(uint64_t a, uint64_t b) { return a < b ? a : b; }

/* ------------------------------------------------------------------ events */

/* An event waiting to be reported: captured while the entry is consistent,
 * reported after. The key is copied so that it stays valid even if the
 * callback removes the key. */
struct pending_event {
    sluice_event_t ev;
    unsigned char keybuf[SLUICE_KEY_MAX];
};

static void capture(const struct sluice_limiter *l, struct pending_event *pe, const struct sl_entry *e,
                    sluice_event_kind_t kind, uint64_t token, uint64_t at) {
    (void)l;
    pe->ev.kind = kind;
    pe->ev.key = sl_entry_key(e, pe->keybuf);
    pe->ev.token = token;
    pe->ev.at = at;
}

static void report(struct sluice_limiter *l, const struct pending_event *pe) {
    if (l->on_event) l->on_event(l->user, &pe->ev);
}

/* Clears the pending flag and returns the token. */
static inline uint64_t take_pending(struct sluice_limiter *l, struct sl_entry *e) {
    e->flags &= (uint8_t)~SL_F_PENDING;
    l->pending--;
    return e->token;
}

static inline void set_pending(struct sluice_limiter *l, struct sl_entry *e, uint64_t token) {
    if (!(e->flags & SL_F_PENDING)) l->pending++;
    e->flags |= SL_F_PENDING;
    e->token = token;
}

/* ------------------------------------------------------------------ rate arithmetic
 * GCRA in exact integer arithmetic: every time is scaled by `limit` and kept
 * as (q, r) meaning q + r/limit ns with r < limit. A key's TAT is stored as
 * q in the timer deadline (rounded up: deadline = q + (r != 0)) and r in the
 * token field, so its timer fires exactly when TAT <= now. */

struct qr {
    uint64_t q, r;
};

static inline struct qr qr_add(const struct sluice_limiter *l, struct qr a, struct qr b) {
    uint64_t r = a.r + b.r; /* < 2 * limit <= 2e12: no overflow */
    uint64_t carry = r >= l->limit;
    if (carry) r -= l->limit;
    uint64_t q = sat_add(sat_add(a.q, b.q), carry);
    if (q == UINT64_MAX) r = 0;
    struct qr out = { q, r };
    return out;
}

static inline bool qr_ge(struct qr a, struct qr b) { return a.q != b.q ? a.q > b.q : a.r >= b.r; }

static inline uint64_t qr_ceil(struct qr a) { return a.r ? sat_add(a.q, 1) : a.q; }

static inline struct qr entry_tat(const struct sl_entry *e) {
    struct qr t;
    t.r = e->token;
    t.q = e->node.deadline - (e->token != 0);
    return t;
}

/* ------------------------------------------------------------------ deadlines */

static inline uint64_t debounce_deadline(const struct sluice_limiter *l, struct sl_entry *e, uint64_t last) {
    uint64_t quiet = sat_add(last, l->interval);
    if (!l->has_max_wait || (e->flags & SL_F_MAXDUE)) return quiet;
    return min_u64(quiet, sat_add(sl_ext_of(e)->start, l->max_wait));
}

/* ------------------------------------------------------------------ timer transition */

/* The entry's timer is due (it has been disarmed by the caller): apply the
 * policy's timer row at D = its deadline, then report. */
static void fire(struct sluice_limiter *l, uint32_t idx) {
    struct sl_entry *e = sl_entry_at(l, idx);
    uint64_t D = e->node.deadline;
    struct pending_event pe;
    bool have = false;

    switch (l->kind) {
    case SLUICE_THROTTLE:
        if (l->trailing && (e->flags & SL_F_PENDING)) {
            /* emit pending at end; the emission opens a new window */
            capture(l, &pe, e, SLUICE_EVENT_EMIT, take_pending(l, e), D);
            have = true;
            sw_add(&l->wheel, idx, sat_add(D, l->interval));
        } else {
            sl_table_remove(l, idx);
        }
        break;
    case SLUICE_AUDIT:
        capture(l, &pe, e, SLUICE_EVENT_EMIT, take_pending(l, e), D);
        have = true;
        sl_table_remove(l, idx);
        break;
    case SLUICE_DEBOUNCE: {
        bool emitted = false;
        if (l->trailing && (e->flags & SL_F_PENDING)) {
            capture(l, &pe, e, SLUICE_EVENT_EMIT, take_pending(l, e), D);
            have = emitted = true;
        }
        if (!l->has_max_wait) {
            sl_table_remove(l, idx); /* the only deadline is last + W: always quiet */
            break;
        }
        struct sl_ext *x = sl_ext_of(e);
        bool quiet = D >= sat_add(x->last, l->interval);
        if (quiet) {
            sl_table_remove(l, idx);
        } else if (emitted) {
            x->start = D;
            sw_add(&l->wheel, idx, debounce_deadline(l, e, x->last));
        } else {
            e->flags |= SL_F_MAXDUE;
            sw_add(&l->wheel, idx, sat_add(x->last, l->interval));
        }
        break;
    }
    case SLUICE_RATE:
        sl_table_remove(l, idx); /* TAT reached: the key is fresh again */
        break;
    default:
        break;
    }
    if (have) report(l, &pe);
}

/* ------------------------------------------------------------------ call plumbing */

static inline bool unusable(const struct sluice_limiter *l) { return l->closed || l->dying; }

static void release_now(struct sluice_limiter *l);
static void shut(struct sluice_limiter *l, uint64_t now, sluice_event_kind_t kind);
static int64_t advance_locked(struct sluice_limiter *l, uint64_t now, size_t max);

/* Called when a public call returns: carries out a deferred free, or tidies
 * memory when nothing holds an index. */
static void leave(struct sluice_limiter *l) {
    if (--l->depth > 0) return;
    if (l->dying) {
        if (!l->closed) {
            l->depth++;
            shut(l, l->now_seen, SLUICE_EVENT_DISCARD);
            l->depth--;
        }
        release_now(l);
        return;
    }
    if (l->live < l->shrink_below) sl_table_maybe_shrink(l);
}

static inline uint64_t clamp_now(struct sluice_limiter *l, uint64_t now) {
    if (now < l->now_seen) return l->now_seen;
    l->now_seen = now;
    return now;
}

/* Timers first: fires the key's deadlines due at `now`. Returns the key's
 * entry index afterwards (SW_NONE if idle), or SW_NONE with *stopped set
 * when a callback closed or freed the limiter. */
static uint32_t due_first(struct sluice_limiter *l, const struct sl_keyref *k, uint64_t now, bool *stopped) {
    *stopped = false;
    for (;;) {
        uint32_t idx = sl_table_find(l, k);
        if (idx == SW_NONE) return SW_NONE;
        struct sl_entry *e = sl_entry_at(l, idx);
        if (e->node.deadline > now) return idx;
        sw_del(&l->wheel, idx);
        fire(l, idx);
        if (unusable(l)) {
            *stopped = true;
            return SW_NONE;
        }
    }
}

/* ------------------------------------------------------------------ create / free */

static int random_seed(uint64_t seed[2]) {
#if defined(__linux__)
    size_t got = 0;
    unsigned char *p = (unsigned char *)seed;
    while (got < 16) {
        ssize_t n = getrandom(p + got, 16 - got, 0);
        if (n < 0) {
            if (errno == EINTR) continue;
            break;
        }
        got += (size_t)n;
    }
    if (got == 16) return 0;
#endif
    FILE *f = fopen("/dev/urandom", "rb");
    if (!f) return -1;
    size_t n = fread(seed, 1, 16, f);
    fclose(f);
    return n == 16 ? 0 : -1;
}

static void *default_alloc(void *ctx, size_t size) {
    (void)ctx;
    return malloc(size);
}

static void default_release(void *ctx, void *p, size_t size) {
    (void)ctx;
    (void)size;
    free(p);
}

int sluice_limiter_new(sluice_limiter_t **out, const sluice_config_t *cfg) {
    if (!out || !cfg) return SLUICE_EINVAL;
    int rc = sluice_policy_validate(&cfg->policy);
    if (rc) return rc;
    uint64_t tick = cfg->tick_ns ? cfg->tick_ns : SLUICE_TICK_DEFAULT_NS;
    if (tick > UINT64_C(1000000000)) return SLUICE_EINVAL;
    if (cfg->allocator && (!cfg->allocator->alloc || !cfg->allocator->release)) return SLUICE_EINVAL;

    sluice_allocator_t a = { default_alloc, default_release, NULL };
    if (cfg->allocator) a = *cfg->allocator;
    struct sluice_limiter *l = a.alloc(a.ctx, sizeof *l);
    if (!l) return SLUICE_ENOMEM;
    memset(l, 0, sizeof *l);
    l->alloc = a;
    l->mem_bytes = sizeof *l;

    const sluice_policy_t *p = &cfg->policy;
    l->policy = *p;
    l->kind = (uint8_t)p->kind;
    l->leading = p->leading;
    l->trailing = p->kind == SLUICE_AUDIT ? true : p->trailing;
    l->pick_first = p->pick == SLUICE_PICK_FIRST;
    l->interval = (uint64_t)p->interval_ns;
    l->has_max_wait = p->kind == SLUICE_DEBOUNCE && p->has_max_wait;
    l->max_wait = l->has_max_wait ? (uint64_t)p->max_wait_ns : 0;
    l->pass_through = p->kind != SLUICE_RATE && p->interval_ns == 0;
    if (p->kind == SLUICE_RATE) {
        uint64_t burst = p->burst ? p->burst : p->limit;
        l->limit = p->limit;
        l->t_q = (uint64_t)p->per_ns / p->limit;
        l->t_r = (uint64_t)p->per_ns % p->limit;
        sl_u128 tau = (sl_u128)(burst - 1) * (uint64_t)p->per_ns;
        sl_u128 tq = tau / p->limit;
        l->tau_q = tq > UINT64_MAX ? UINT64_MAX : (uint64_t)tq;
        l->tau_r = tq > UINT64_MAX ? 0 : (uint64_t)(tau % p->limit);
    }
    l->on_event = cfg->on_event;
    l->user = cfg->user;
    l->max_keys = cfg->max_keys;
    l->stride = (uint32_t)sizeof(struct sl_entry) + (l->has_max_wait ? (uint32_t)sizeof(struct sl_ext) : 0);
    if (cfg->fixed_seed) {
        l->seed[0] = cfg->seed[0];
        l->seed[1] = cfg->seed[1];
    } else if (random_seed(l->seed) != 0) {
        a.release(a.ctx, l, sizeof *l);
        return SLUICE_ENOMEM;
    }
    l->now_seen = cfg->start_ns;
    if ((rc = sl_table_init(l)) != 0) {
        a.release(a.ctx, l, sizeof *l);
        return rc;
    }
    sw_init(&l->wheel, &l->arena, tick, cfg->start_ns);
    *out = l;
    return 0;
}

static void release_now(struct sluice_limiter *l) {
    sl_table_destroy(l);
    sluice_allocator_t a = l->alloc;
    a.release(a.ctx, l, sizeof *l);
}

/* Hands back every pending token (as `kind`) and returns every key to idle. */
static void discard_all(struct sluice_limiter *l, uint64_t now, sluice_event_kind_t kind) {
    for (uint32_t i = 0; i < l->top; i++) {
        struct sl_entry *e = sl_entry_at(l, i);
        if (e->state != SL_LIVE) continue;
        struct pending_event pe;
        bool have = false;
        if (e->flags & SL_F_PENDING) {
            capture(l, &pe, e, kind, take_pending(l, e), now);
            have = true;
        }
        sl_table_remove(l, i);
        if (have) report(l, &pe);
    }
}

void sluice_limiter_free(sluice_limiter_t *l) {
    if (!l) return;
    if (l->depth > 0) {
        l->dying = true; /* carried out by leave() when the outermost call returns */
        return;
    }
    if (l->dying) return;
    l->dying = true; /* from here on, calls from callbacks fail with SLUICE_ECLOSED */
    if (!l->closed) {
        l->depth++;
        shut(l, l->now_seen, SLUICE_EVENT_DISCARD);
        l->depth--;
    }
    release_now(l);
}

/* ------------------------------------------------------------------ submit */

static void decide(sluice_decision_t *d, sluice_decision_kind_t kind, uint64_t at) {
    if (d) {
        d->kind = kind;
        d->at = at;
    }
}

/* IDLE: the key has no entry. */
static int call_idle(struct sluice_limiter *l, const struct sl_keyref *k, uint64_t token, uint64_t t,
                     sluice_decision_t *d) {
    if (l->max_keys && l->live >= l->max_keys) {
        l->full_refusals++;
        return SLUICE_EFULL;
    }
    uint32_t idx;
    int rc = sl_table_insert(l, k, &idx);
    if (rc) return rc;
    struct sl_entry *e = sl_entry_at(l, idx);
    uint64_t end = sat_add(t, l->interval);
    switch (l->kind) {
    case SLUICE_THROTTLE:
        if (l->leading) {
            decide(d, SLUICE_EMITTED, t);
        } else {
            set_pending(l, e, token);
            decide(d, SLUICE_SCHEDULED, end);
        }
        sw_add(&l->wheel, idx, end);
        break;
    case SLUICE_AUDIT:
        set_pending(l, e, token);
        decide(d, SLUICE_SCHEDULED, end);
        sw_add(&l->wheel, idx, end);
        break;
    case SLUICE_DEBOUNCE:
        if (l->has_max_wait) sl_ext_of(e)->last = sl_ext_of(e)->start = t;
        /* maxWait >= interval, so the first deadline is t + W */
        if (l->leading) {
            decide(d, SLUICE_EMITTED, t);
        } else {
            set_pending(l, e, token);
            decide(d, SLUICE_SCHEDULED, end);
        }
        sw_add(&l->wheel, idx, end);
        break;
    case SLUICE_RATE: {
        /* a fresh key: tat = t, always admitted; TAT = t + T */
        struct qr now = { t, 0 }, T = { l->t_q, l->t_r };
        struct qr tat = qr_add(l, now, T);
        e->token = tat.r;
        decide(d, SLUICE_EMITTED, t);
        sw_add(&l->wheel, idx, qr_ceil(tat));
        break;
    }
    }
    return 0;
}

/* The key is OPEN / ACTIVE / has a TAT in the future. */
static void call_live(struct sluice_limiter *l, uint32_t idx, uint64_t token, uint64_t t, sluice_decision_t *d) {
    struct sl_entry *e = sl_entry_at(l, idx);
    struct pending_event pe;
    bool have = false;
    switch (l->kind) {
    case SLUICE_THROTTLE: {
        uint64_t end = e->node.deadline;
        if (!l->trailing) {
            decide(d, SLUICE_DROPPED, end);
        } else if (!(e->flags & SL_F_PENDING)) {
            set_pending(l, e, token);
            decide(d, SLUICE_SCHEDULED, end);
        } else if (!l->pick_first) {
            capture(l, &pe, e, SLUICE_EVENT_DROP, e->token, t);
            have = true;
            e->token = token;
            decide(d, SLUICE_SCHEDULED, end);
        } else {
            decide(d, SLUICE_DROPPED, end);
        }
        break;
    }
    case SLUICE_AUDIT:
        capture(l, &pe, e, SLUICE_EVENT_DROP, e->token, t);
        have = true;
        e->token = token;
        decide(d, SLUICE_SCHEDULED, e->node.deadline);
        break;
    case SLUICE_DEBOUNCE:
        if (l->has_max_wait && l->leading && (e->flags & SL_F_MAXDUE)) {
            /* maxWait passed without an emission: this call is a leading edge */
            struct sl_ext *x = sl_ext_of(e);
            if (e->flags & SL_F_PENDING) { /* cannot happen (maxDue is set only without pending) */
                capture(l, &pe, e, SLUICE_EVENT_DROP, take_pending(l, e), t);
                have = true;
            }
            x->last = x->start = t;
            e->flags &= (uint8_t)~SL_F_MAXDUE;
            sw_set(&l->wheel, idx, debounce_deadline(l, e, t));
            decide(d, SLUICE_EMITTED, t);
            break;
        }
        if (l->has_max_wait) sl_ext_of(e)->last = t;
        uint64_t dl = debounce_deadline(l, e, t);
        sw_set(&l->wheel, idx, dl);
        if (l->trailing) {
            if (e->flags & SL_F_PENDING) {
                capture(l, &pe, e, SLUICE_EVENT_DROP, e->token, t);
                have = true;
            }
            set_pending(l, e, token);
            decide(d, SLUICE_SCHEDULED, dl);
        } else {
            decide(d, SLUICE_DROPPED, dl);
        }
        break;
    case SLUICE_RATE: {
        struct qr tat = entry_tat(e); /* > t: a key whose TAT <= t was fired first */
        struct qr now = { t, 0 }, tau = { l->tau_q, l->tau_r }, T = { l->t_q, l->t_r };
        if (qr_ge(qr_add(l, now, tau), tat)) {
            struct qr next = qr_add(l, tat, T);
            e->token = next.r;
            sw_set(&l->wheel, idx, qr_ceil(next));
            decide(d, SLUICE_EMITTED, t);
        } else {
            /* would be admitted at tat - tau, rounded up (never toward admitting) */
            struct qr at;
            if (tat.r >= tau.r) {
                at.r = tat.r - tau.r;
                at.q = tat.q - tau.q;
            } else {
                at.r = tat.r + l->limit - tau.r;
                at.q = tat.q - tau.q - 1;
            }
            decide(d, SLUICE_DROPPED, qr_ceil(at));
        }
        break;
    }
    }
    if (have) report(l, &pe);
}

/* The body of sluice_limiter_submit() for a key already checked and hashed
 * with this limiter's seed (limiter-internal.h; the loop layer hashes once). */
int sl_submit_prepared(struct sluice_limiter *l, const struct sl_keyref *k, uint64_t token, uint64_t now,
                       sluice_decision_t *d) {
    if (unusable(l)) return SLUICE_ECLOSED;
    int rc = 0;
    now = clamp_now(l, now);
    if (l->pass_through) {
        decide(d, SLUICE_EMITTED, now);
        return 0;
    }
    l->depth++;
    bool stopped;
    uint32_t idx = due_first(l, k, now, &stopped);
    if (stopped)
        rc = SLUICE_ECLOSED;
    else if (idx == SW_NONE && l->max_keys && l->live >= l->max_keys) {
        /* At the cap, keys whose windows have ended may still hold entries
         * until their timers run: run them first, so the answer does not
         * depend on whether the loop happened to advance. */
        advance_locked(l, now, 0);
        idx = unusable(l) ? SW_NONE : due_first(l, k, now, &stopped);
        if (unusable(l) || stopped)
            rc = SLUICE_ECLOSED;
        else if (idx == SW_NONE)
            rc = call_idle(l, k, token, now, d);
        else
            call_live(l, idx, token, now, d);
    } else if (idx == SW_NONE)
        rc = call_idle(l, k, token, now, d);
    else
        call_live(l, idx, token, now, d);
    leave(l);
    return rc;
}

int sluice_limiter_submit(sluice_limiter_t *l, sluice_key_t key, uint64_t token, uint64_t now,
                          sluice_decision_t *d) {
    if (!l) return SLUICE_EINVAL;
    if (unusable(l)) return SLUICE_ECLOSED;
    struct sl_keyref k;
    int rc = sl_key_prepare(l, key, &k);
    if (rc) return rc;
    return sl_submit_prepared(l, &k, token, now, d);
}

/* ------------------------------------------------------------------ flush / cancel / pending */

/* flush (kind EMIT), cancel (DROP) or pending (0) for a prepared key. */
int sl_key_op_prepared(struct sluice_limiter *l, const struct sl_keyref *k, uint64_t now, int kind) {
    if (unusable(l)) return SLUICE_ECLOSED;
    int rc = 0;
    now = clamp_now(l, now);
    if (l->pass_through) return 0;
    l->depth++;
    bool stopped;
    uint32_t idx = due_first(l, k, now, &stopped);
    if (stopped) {
        rc = SLUICE_ECLOSED;
    } else if (idx != SW_NONE) {
        struct sl_entry *e = sl_entry_at(l, idx);
        if (kind == 0) {
            rc = (e->flags & SL_F_PENDING) ? 1 : 0;
        } else if (l->kind == SLUICE_RATE) {
            if (kind == SLUICE_EVENT_DROP) sl_table_remove(l, idx); /* cancel: a fresh quota */
            rc = 0;
        } else {
            struct pending_event pe;
            bool have = false;
            if (e->flags & SL_F_PENDING) {
                capture(l, &pe, e, (sluice_event_kind_t)kind, take_pending(l, e), now);
                have = true;
            }
            sl_table_remove(l, idx); /* back to IDLE, timer disarmed */
            if (have) report(l, &pe);
            rc = have ? 1 : 0;
        }
    }
    leave(l);
    return rc;
}

static int key_op(sluice_limiter_t *l, sluice_key_t key, uint64_t now, sluice_event_kind_t kind) {
    if (!l) return SLUICE_EINVAL;
    if (unusable(l)) return SLUICE_ECLOSED;
    struct sl_keyref k;
    int rc = sl_key_prepare(l, key, &k);
    if (rc) return rc;
    return sl_key_op_prepared(l, &k, now, (int)kind);
}

int sluice_limiter_flush(sluice_limiter_t *l, sluice_key_t key, uint64_t now) {
    return key_op(l, key, now, SLUICE_EVENT_EMIT);
}

int sluice_limiter_cancel(sluice_limiter_t *l, sluice_key_t key, uint64_t now) {
    return key_op(l, key, now, SLUICE_EVENT_DROP);
}

int sluice_limiter_pending(sluice_limiter_t *l, sluice_key_t key, uint64_t now) {
    return key_op(l, key, now, (sluice_event_kind_t)0);
}

/* ------------------------------------------------------------------ advance / close */

/* Firing a timer of a key that goes idle touches two cold lines: the entry
 * and the index slot its key is removed from. At millions of keys each is a
 * DRAM miss. Two cursors run ahead in the expired list: `ca` prefetches
 * entries SL_AHEAD nodes beyond `cb`, and `cb` prefetches the index slot of
 * the node it reaches (whose entry `ca` fetched earlier), so the misses of
 * the next timers overlap with the work on this one. The cursors are only
 * hints: a node that leaves the list (cancelled or placed again by a
 * callback) just makes them start over from the head. */
#define SL_AHEAD 8

static inline bool list_node(const struct sluice_limiter *l, uint32_t i) { return i < SW_HEAD_BASE && i < l->top; }

static inline uint32_t next_of(const struct sluice_limiter *l, uint32_t i) {
    return sl_entry_at(l, i)->node.link.next;
}

static int64_t advance_locked(struct sluice_limiter *l, uint64_t now, size_t max) {
    sw_advance(&l->wheel, now);
    int64_t n = 0;
    uint32_t ca = SW_NONE, cb = SW_NONE;
    while (max == 0 || (size_t)n < max) {
        uint32_t idx = sw_pop(&l->wheel);
        if (idx == SW_NONE) break;
        if (!list_node(l, cb) || idx == cb || idx == ca) {
            /* (re)start: cb SL_AHEAD nodes past the head, ca SL_AHEAD past cb */
            cb = l->wheel.heads[SW_HEAD_EXPIRED].next;
            for (unsigned k = 0; k < SL_AHEAD && list_node(l, cb); k++) cb = next_of(l, cb);
            ca = cb;
            for (unsigned k = 0; k < SL_AHEAD && list_node(l, ca); k++) {
                ca = next_of(l, ca);
                if (list_node(l, ca)) __builtin_prefetch(sl_entry_at(l, ca));
            }
        } else {
            cb = next_of(l, cb);
            if (list_node(l, cb)) __builtin_prefetch(&l->slots[sl_home(sl_entry_at(l, cb)->tag, l->slot_bits)]);
            if (list_node(l, ca)) {
                ca = next_of(l, ca);
                if (list_node(l, ca)) __builtin_prefetch(sl_entry_at(l, ca));
            }
        }
        fire(l, idx);
        n++;
        if (unusable(l)) break;
    }
    return n;
}

int64_t sluice_limiter_advance(sluice_limiter_t *l, uint64_t now, size_t max_timers) {
    if (!l) return SLUICE_EINVAL;
    if (unusable(l)) return SLUICE_ECLOSED;
    now = clamp_now(l, now);
    l->depth++;
    int64_t n = advance_locked(l, now, max_timers);
    leave(l);
    return n;
}

/* Closes at `now`: timers first, exactly (the wheel fires what is due at its
 * tick, then every key whose deadline lies between that tick and `now`),
 * then every value still pending is handed back as `kind` and every key
 * returns to idle. Used by close() and by free(). Callbacks may run; if one
 * of them closes the limiter, that nested close has done the work. During a
 * free (`dying`) their calls fail with SLUICE_ECLOSED. */
static void shut(struct sluice_limiter *l, uint64_t now, sluice_event_kind_t kind) {
    sw_advance(&l->wheel, now);
    for (uint32_t idx; (idx = sw_pop(&l->wheel)) != SW_NONE;) {
        fire(l, idx);
        if (l->closed) return;
    }
    for (uint32_t i = 0; i < l->top; i++) {
        while (sl_entry_at(l, i)->state == SL_LIVE && sl_entry_at(l, i)->node.deadline <= now) {
            sw_del(&l->wheel, i);
            fire(l, i);
            if (l->closed) return;
        }
    }
    l->closed = true;
    discard_all(l, now, kind);
}

int sluice_limiter_close(sluice_limiter_t *l, uint64_t now, sluice_close_mode_t mode) {
    if (!l || (mode != SLUICE_CLOSE_DRAIN && mode != SLUICE_CLOSE_DISCARD)) return SLUICE_EINVAL;
    if (unusable(l)) return SLUICE_ECLOSED;
    now = clamp_now(l, now);
    l->depth++;
    shut(l, now, mode == SLUICE_CLOSE_DRAIN ? SLUICE_EVENT_EMIT : SLUICE_EVENT_DISCARD);
    leave(l);
    return 0;
}

uint64_t sluice_limiter_next_deadline(const sluice_limiter_t *l) {
    if (!l || l->closed || l->dying) return UINT64_MAX;
    return sw_next(&l->wheel);
}

int sluice_limiter_stats(const sluice_limiter_t *l, sluice_stats_t *out) {
    if (!l || !out) return SLUICE_EINVAL;
    out->live_keys = l->live;
    out->pending = l->pending;
    out->armed_timers = l->wheel.count;
    out->memory_bytes = l->mem_bytes;
    out->max_probe = sl_table_max_probe(l);
    out->table_slots = (uint64_t)1 << l->slot_bits;
    out->full_refusals = l->full_refusals;
    return 0;
}

/* Policy-level invariants of one live entry. */
static int check_entry(const struct sluice_limiter *l, uint32_t i) {
    struct sl_entry *e = sl_entry_at(l, i);
    bool pend = e->flags & SL_F_PENDING;
    const char *why = NULL;
    switch (l->kind) {
    case SLUICE_THROTTLE:
        if (pend && !l->trailing) why = "throttle without trailing holds a pending value";
        break;
    case SLUICE_AUDIT:
        if (!pend) why = "open audit window without a pending value";
        break;
    case SLUICE_DEBOUNCE:
        if (pend && !l->trailing) why = "debounce without trailing holds a pending value";
        if ((e->flags & SL_F_MAXDUE) && !l->has_max_wait) why = "maxDue without maxWait";
        if (l->has_max_wait) {
            struct sl_ext *x = sl_ext_of(e);
            if (e->node.deadline != debounce_deadline(l, e, x->last)) why = "debounce deadline differs from its rule";
            if ((e->flags & SL_F_MAXDUE) && pend && l->leading) why = "maxDue with a pending value";
        }
        break;
    case SLUICE_RATE:
        if (pend) why = "rate key holds a pending value";
        if (e->token >= l->limit) why = "rate remainder not below limit";
        break;
    }
    if (why) {
        fprintf(stderr, "sluice_limiter_check: entry %u: %s\n", i, why);
        return SLUICE_ECORRUPT;
    }
    return 0;
}

int sluice_limiter_check(const sluice_limiter_t *l) {
    if (!l) return SLUICE_EINVAL;
    int rc = sl_table_check(l);
    if (rc) return rc;
    if (sw_check(&l->wheel) != 0) return SLUICE_ECORRUPT;
    for (uint32_t i = 0; i < l->top; i++)
        if (sl_entry_at(l, i)->state == SL_LIVE && (rc = check_entry(l, i)) != 0) return rc;
    return 0;
}
