/* limiter.c — the plumbing every policy shares: creation, "timers first",
 * the key cap, events and their counters, re-entrancy, flush/cancel/pending,
 * advance, close and free. The rows of each policy's state machine live in
 * policy-*.c (see limiter-internal.h).
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

_Static_assert(SLUICE__NONE == SLUICE__WHEEL_NONE, "the table and the wheel share the 'no entry' index");
_Static_assert(offsetof(struct sluice__entry, node) == 0, "the wheel finds an entry's node at offset 0");
_Static_assert(SLUICE__ENTRY_MAX <= SLUICE__WHEEL_INDEX_MAX, "every entry index is a valid wheel node index");

/* ------------------------------------------------------------------ dispatch
 * The built-in policies are called directly (no indirect call on the hot
 * path); a policy added to sluice__policies[] alone goes through its ops. */

static inline int policy_call(struct sluice_limiter *l, const struct sluice__keyref *k, uint32_t idx,
                              uint64_t token, uint64_t cost, uint64_t t, sluice_decision_t *d) {
    switch (l->kind) {
    case SLUICE_THROTTLE: return sluice__throttle_call(l, k, idx, token, cost, t, d);
    case SLUICE_AUDIT: return sluice__audit_call(l, k, idx, token, cost, t, d);
    case SLUICE_DEBOUNCE: return sluice__debounce_call(l, k, idx, token, cost, t, d);
    case SLUICE_RATE: return sluice__rate_call(l, k, idx, token, cost, t, d);
    default: return l->ops->call(l, k, idx, token, cost, t, d);
    }
}

static inline void policy_fire(struct sluice_limiter *l, uint32_t idx) {
    switch (l->kind) {
    case SLUICE_THROTTLE: sluice__throttle_fire(l, idx); break;
    case SLUICE_AUDIT: sluice__audit_fire(l, idx); break;
    case SLUICE_DEBOUNCE: sluice__debounce_fire(l, idx); break;
    case SLUICE_RATE: sluice__rate_fire(l, idx); break;
    default: l->ops->fire(l, idx); break;
    }
}

/* ------------------------------------------------------------------ keys and events */

int sluice__limiter_add_key(struct sluice_limiter *l, const struct sluice__keyref *k, uint32_t *idx) {
    if (l->max_keys && l->table.live >= l->max_keys) {
        l->count.full_refusals++;
        return SLUICE_EFULL;
    }
    int rc = sluice__table_insert(&l->table, k, idx);
    if (rc) return rc;
    l->arena.chunks = l->table.chunks; /* the chunk table may have grown */
    sluice__wheel_node_init(&sluice__entry_of(l, *idx)->node);
    return 0;
}

void sluice__limiter_remove_key(struct sluice_limiter *l, uint32_t idx) {
    struct sluice__entry *e = sluice__entry_of(l, idx);
    sluice__wheel_del(&l->wheel, idx);
    if (e->flags & SLUICE__F_PENDING) l->pending--;
    sluice__table_remove(&l->table, idx);
}

/* Compaction moved an entry: re-point its timer's neighbours. */
static void entry_moved(void *ctx, uint32_t to) {
    struct sluice_limiter *l = ctx;
    sluice__wheel_relocate(&l->wheel, to);
    /* rate: an entry moved below the expiry pass's position would be missed
     * by it; start the pass again (policy-rate.c) */
    l->rate_pass = 0;
    l->rate_pass_min = UINT64_MAX;
}

void sluice__report(struct sluice_limiter *l, const struct sluice__event *pe) {
    l->count.reported[pe->ev.kind & 3]++;
    if (l->on_event) l->on_event(l->user, &pe->ev);
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
    if (l->table.live < l->table.shrink_below) sluice__table_maybe_shrink(&l->table);
}

static inline uint64_t clamp_now(struct sluice_limiter *l, uint64_t now) {
    if (now < l->now_seen) return l->now_seen;
    l->now_seen = now;
    return now;
}

/* Timers first: fires the key's deadlines due at `now`. Returns the key's
 * entry index afterwards (SLUICE__NONE if idle), or SLUICE__NONE with
 * *stopped set when a callback closed or freed the limiter. */
static uint32_t due_first(struct sluice_limiter *l, const struct sluice__keyref *k, uint64_t now, bool *stopped) {
    *stopped = false;
    for (;;) {
        uint32_t idx = sluice__table_find(&l->table, k);
        if (idx == SLUICE__NONE) return SLUICE__NONE;
        if (sluice__entry_of(l, idx)->node.deadline > now) return idx;
        if (l->kind == SLUICE_RATE) return idx; /* no timer: an expired rate entry is idle in place */
        sluice__wheel_del(&l->wheel, idx);
        policy_fire(l, idx);
        if (unusable(l)) {
            *stopped = true;
            return SLUICE__NONE;
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

int sluice_limiter_new(sluice_limiter_t **out, const sluice_config_t *cfg) {
    if (!out || !cfg) return SLUICE_EINVAL;
    int rc = 0;
    if (sluice__config_check(cfg, &rc) != NULL) return rc;
    const sluice_policy_t *p = &cfg->policy;
    uint64_t tick = cfg->tick_ns ? cfg->tick_ns : SLUICE_TICK_DEFAULT_NS;

    struct sluice__mem mem;
    sluice__mem_init(&mem, cfg->allocator);
    struct sluice_limiter *l = sluice__mem_alloc(&mem, sizeof *l);
    if (!l) return SLUICE_ENOMEM;
    memset(l, 0, sizeof *l);
    l->mem = mem;

    l->ops = sluice__policy_ops_of((int)p->kind);
    l->kind = (uint8_t)p->kind;
    size_t ext = l->ops->setup(l, p);
    l->on_event = cfg->on_event;
    l->user = cfg->user;
    l->max_keys = cfg->max_keys;
    if (cfg->fixed_seed) {
        l->seed[0] = cfg->seed[0];
        l->seed[1] = cfg->seed[1];
    } else if (random_seed(l->seed) != 0) {
        sluice__mem_release(&mem, l, sizeof *l);
        return SLUICE_ENOMEM;
    }
    l->now_seen = cfg->start_ns;
    uint32_t stride = (uint32_t)(sizeof(struct sluice__entry) + ext);
    if ((rc = sluice__table_init(&l->table, &l->mem, stride, l->seed)) != 0) {
        mem = l->mem;
        sluice__mem_release(&mem, l, sizeof *l);
        return rc;
    }
    l->table.moved = entry_moved;
    l->table.moved_ctx = l;
    l->arena.chunks = l->table.chunks;
    l->arena.chunk_shift = SLUICE__CHUNK_SHIFT;
    l->arena.stride = stride;
    l->arena.node_off = 0;
    sluice__wheel_init(&l->wheel, &l->arena, tick, cfg->start_ns);
    *out = l;
    return 0;
}

static void release_now(struct sluice_limiter *l) {
    sluice__table_destroy(&l->table);
    struct sluice__mem mem = l->mem;
    sluice__mem_release(&mem, l, sizeof *l);
}

/* Hands back every pending token (as `kind`) and returns every key to idle. */
static void discard_all(struct sluice_limiter *l, uint64_t now, sluice_event_kind_t kind) {
    for (uint32_t i = 0; i < l->table.top; i++) {
        struct sluice__entry *e = sluice__entry_of(l, i);
        if (e->state != SLUICE__LIVE) continue;
        struct sluice__event pe;
        bool have = false;
        if (e->flags & SLUICE__F_PENDING) {
            sluice__capture(&pe, e, kind, sluice__take_pending(l, e), now);
            have = true;
        }
        sluice__limiter_remove_key(l, i);
        if (have) sluice__report(l, &pe);
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

int sluice__limiter_submit_keyref(struct sluice_limiter *l, const struct sluice__keyref *k, uint64_t token,
                                  uint64_t cost, uint64_t now, sluice_decision_t *out) {
    if (unusable(l)) return SLUICE_ECLOSED;
    if (cost != 1) {
        if (cost == 0 || cost > SLUICE_RATE_MAX) return SLUICE_ERANGE;
        if (l->kind != SLUICE_RATE) return SLUICE_EINVAL;
    }
    /* The policy writes kind and at (rate also remaining and full) into the
     * caller's decision, which is therefore filled even on error. */
    sluice_decision_t scratch;
    sluice_decision_t *d = out ? out : &scratch;
    d->remaining = d->full = 0;
    now = clamp_now(l, now);
    if (l->pass_through) {
        d->kind = SLUICE_EMITTED;
        d->at = now;
        l->count.decided[SLUICE_EMITTED]++;
        return 0;
    }
    int rc;
    l->depth++;
    bool stopped = false;
    /* rate keys have no timers (lazy expiry, policy-rate.c): just the lookup */
    uint32_t idx = l->kind == SLUICE_RATE ? sluice__table_find(&l->table, k) : due_first(l, k, now, &stopped);
    if (!stopped && idx == SLUICE__NONE && l->max_keys && l->table.live >= l->max_keys) {
        /* At the cap, keys whose windows have ended may still hold entries
         * until their timers run: run them first, so the answer does not
         * depend on whether the loop happened to advance. Rate: free one
         * expired entry if there is one (policy-rate.c). */
        if (l->kind == SLUICE_RATE)
            sluice__rate_reclaim(l, now, 1);
        else
            advance_locked(l, now, 0);
        idx = unusable(l) ? SLUICE__NONE : due_first(l, k, now, &stopped);
        if (unusable(l)) stopped = true;
    }
    if (stopped) {
        rc = SLUICE_ECLOSED;
    } else {
        rc = policy_call(l, k, idx, token, cost, now, d);
        if (rc == 0) l->count.decided[d->kind & 3]++;
    }
    leave(l);
    return rc;
}

int sluice_limiter_submit_cost(sluice_limiter_t *l, sluice_key_t key, uint64_t token, uint64_t cost, uint64_t now,
                               sluice_decision_t *d) {
    if (!l) return SLUICE_EINVAL;
    if (unusable(l)) return SLUICE_ECLOSED;
    struct sluice__keyref k;
    int rc = sluice__limiter_key(l, key, &k);
    if (rc) return rc;
    return sluice__limiter_submit_keyref(l, &k, token, cost, now, d);
}

int sluice_limiter_submit(sluice_limiter_t *l, sluice_key_t key, uint64_t token, uint64_t now,
                          sluice_decision_t *d) {
    return sluice_limiter_submit_cost(l, key, token, 1, now, d);
}

/* A batch is handled in groups of BATCH_GROUP calls, in three passes over
 * each group: (1) validate and hash every key and prefetch its home index
 * slot; (2) read each home slot (by now in flight or in cache) and, when its
 * tag is the key's, prefetch the entry it names; (3) make the calls in order,
 * through the same path as a single call. Passes 1 and 2 only read and
 * prefetch, so a call of pass 3 that changes the table (a key created or
 * removed, the index resized, a callback re-entering) can only make a hint
 * useless, never wrong. */
#define BATCH_GROUP 32

int sluice_limiter_submit_many(sluice_limiter_t *l, const sluice_call_t *calls, size_t n, uint64_t now,
                               sluice_decision_t *decisions, int *results) {
    if (!l || (n && !calls)) return SLUICE_EINVAL;
    int first = 0;
    struct sluice__keyref k[BATCH_GROUP];
    int krc[BATCH_GROUP];
    /* Held across the whole batch: a free from a callback waits for its end. */
    l->depth++;
    for (size_t base = 0; base < n; base += BATCH_GROUP) {
        size_t m = n - base < BATCH_GROUP ? n - base : BATCH_GROUP;
        bool hint = !unusable(l) && !l->pass_through && l->table.live != 0;
        for (size_t j = 0; j < m; j++) {
            krc[j] = sluice__limiter_key(l, calls[base + j].key, &k[j]);
            if (hint && krc[j] == 0) sluice__prefetch_slot(l, &k[j]);
        }
        if (hint)
            for (size_t j = 0; j < m; j++)
                if (krc[j] == 0) sluice__prefetch_entry(l, &k[j]);
        for (size_t j = 0; j < m; j++) {
            const sluice_call_t *c = &calls[base + j];
            int rc;
            if (unusable(l)) {
                rc = SLUICE_ECLOSED; /* as sluice_limiter_submit_cost() checks it before the key */
            } else if (krc[j]) {
                rc = krc[j];
            } else if (decisions) {
                /* the decision goes to the caller's array when the call has
                 * returned, before the next one starts */
                sluice_decision_t d = decisions[base + j];
                rc = sluice__limiter_submit_keyref(l, &k[j], c->token, c->cost, now, &d);
                decisions[base + j] = d;
            } else {
                rc = sluice__limiter_submit_keyref(l, &k[j], c->token, c->cost, now, NULL);
            }
            if (results) results[base + j] = rc;
            if (rc && !first) first = rc;
        }
    }
    leave(l);
    return first;
}

int sluice_limiter_quota(sluice_limiter_t *l, sluice_key_t key, uint64_t cost, uint64_t now, sluice_quota_t *out) {
    if (!l || !out) return SLUICE_EINVAL;
    if (unusable(l)) return SLUICE_ECLOSED;
    if (!l->ops->quota) return SLUICE_EINVAL;
    if (cost == 0 || cost > SLUICE_RATE_MAX) return SLUICE_ERANGE;
    struct sluice__keyref k;
    int rc = sluice__limiter_key(l, key, &k);
    if (rc) return rc;
    /* a peek: the clock, the key and its timer stay as they are */
    if (now < l->now_seen) now = l->now_seen;
    l->ops->quota(l, sluice__table_find(&l->table, &k), cost, now, out);
    return 0;
}

/* ------------------------------------------------------------------ flush / cancel / pending */

int sluice__limiter_key_op_keyref(struct sluice_limiter *l, const struct sluice__keyref *k, uint64_t now, int kind) {
    if (unusable(l)) return SLUICE_ECLOSED;
    int rc = 0;
    now = clamp_now(l, now);
    if (l->pass_through) return 0;
    l->depth++;
    bool stopped;
    uint32_t idx = due_first(l, k, now, &stopped);
    if (stopped) {
        rc = SLUICE_ECLOSED;
    } else if (idx != SLUICE__NONE) {
        struct sluice__entry *e = sluice__entry_of(l, idx);
        if (kind == 0) {
            rc = (e->flags & SLUICE__F_PENDING) ? 1 : 0;
        } else if (kind == SLUICE_EVENT_EMIT && l->ops->flush) {
            rc = l->ops->flush(l, idx, now);
        } else {
            /* flush: emit the pending value now; cancel: drop it. Either
             * way the key returns to idle, its timer disarmed. */
            struct sluice__event pe;
            bool have = false;
            if (e->flags & SLUICE__F_PENDING) {
                sluice__capture(&pe, e, (sluice_event_kind_t)kind, sluice__take_pending(l, e), now);
                have = true;
            }
            sluice__limiter_remove_key(l, idx);
            if (have) sluice__report(l, &pe);
            rc = have ? 1 : 0;
        }
    }
    leave(l);
    return rc;
}

static int key_op(sluice_limiter_t *l, sluice_key_t key, uint64_t now, int kind) {
    if (!l) return SLUICE_EINVAL;
    if (unusable(l)) return SLUICE_ECLOSED;
    struct sluice__keyref k;
    int rc = sluice__limiter_key(l, key, &k);
    if (rc) return rc;
    return sluice__limiter_key_op_keyref(l, &k, now, kind);
}

int sluice_limiter_flush(sluice_limiter_t *l, sluice_key_t key, uint64_t now) {
    return key_op(l, key, now, SLUICE_EVENT_EMIT);
}

int sluice_limiter_cancel(sluice_limiter_t *l, sluice_key_t key, uint64_t now) {
    return key_op(l, key, now, SLUICE_EVENT_DROP);
}

int sluice_limiter_pending(sluice_limiter_t *l, sluice_key_t key, uint64_t now) { return key_op(l, key, now, 0); }

/* ------------------------------------------------------------------ advance / close */

/* Firing a timer of a key that goes idle touches two cold lines: the entry
 * and the index slot its key is removed from. At millions of keys each is a
 * DRAM miss. Two cursors run ahead in the wheel's expired list: `ca`
 * prefetches entries AHEAD nodes beyond `cb`, and `cb` prefetches the index
 * slot of the node it reaches (whose entry `ca` fetched earlier), so the
 * misses of the next timers overlap with the work on this one. The cursors
 * are only hints: a node that leaves the list (cancelled or placed again by
 * a callback) just makes them start over from the head. */
#define AHEAD 8

/* A cursor may be used while it names a carved entry. */
static inline bool hint_ok(const struct sluice_limiter *l, uint32_t i) { return i < l->table.top; }

static inline void prefetch_entry(const struct sluice_limiter *l, uint32_t i) {
#if defined(__GNUC__) || defined(__clang__)
    __builtin_prefetch(sluice__entry_of(l, i));
#else
    (void)l;
    (void)i;
#endif
}

static int64_t advance_locked(struct sluice_limiter *l, uint64_t now, size_t max) {
    if (l->kind == SLUICE_RATE) {
        /* no timers: the lazy expiry frees the idle entries (policy-rate.c) */
        sluice__wheel_advance(&l->wheel, now);
        return (int64_t)sluice__rate_reclaim(l, now, max);
    }
    sluice__wheel_advance(&l->wheel, now);
    int64_t n = 0;
    uint32_t ca = SLUICE__NONE, cb = SLUICE__NONE;
    while (max == 0 || (size_t)n < max) {
        uint32_t idx = sluice__wheel_pop(&l->wheel);
        if (idx == SLUICE__NONE) break;
        if (!hint_ok(l, cb) || idx == cb || idx == ca) {
            /* (re)start: cb AHEAD nodes past the head, ca AHEAD past cb */
            cb = sluice__wheel_expired_first(&l->wheel);
            for (unsigned k = 0; k < AHEAD && hint_ok(l, cb); k++) cb = sluice__wheel_after(&l->wheel, cb);
            ca = cb;
            for (unsigned k = 0; k < AHEAD && hint_ok(l, ca); k++) {
                ca = sluice__wheel_after(&l->wheel, ca);
                if (hint_ok(l, ca)) prefetch_entry(l, ca);
            }
        } else {
            cb = sluice__wheel_after(&l->wheel, cb);
            if (hint_ok(l, cb)) sluice__table_prefetch_home(&l->table, sluice__entry_of(l, cb));
            if (hint_ok(l, ca)) {
                ca = sluice__wheel_after(&l->wheel, ca);
                if (hint_ok(l, ca)) prefetch_entry(l, ca);
            }
        }
        policy_fire(l, idx);
        n++;
        if (unusable(l)) break;
    }
    return n;
}

size_t sluice__limiter_reclaim(sluice_limiter_t *l, uint64_t now) {
    if (unusable(l) || l->kind != SLUICE_RATE) return 0;
    return sluice__rate_reclaim(l, now < l->now_seen ? l->now_seen : now, 1);
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
    sluice__wheel_advance(&l->wheel, now);
    for (uint32_t idx; (idx = sluice__wheel_pop(&l->wheel)) != SLUICE__NONE;) {
        policy_fire(l, idx);
        if (l->closed) return;
    }
    for (uint32_t i = 0; i < l->table.top; i++) {
        while (sluice__entry_of(l, i)->state == SLUICE__LIVE && sluice__entry_of(l, i)->node.deadline <= now) {
            sluice__wheel_del(&l->wheel, i);
            policy_fire(l, i);
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
    if (l->kind == SLUICE_RATE) return sluice__rate_next(l); /* the lazy expiry's next sweep */
    return sluice__wheel_next(&l->wheel);
}

/* ------------------------------------------------------------------ stats / check */

int sluice_limiter_stats(const sluice_limiter_t *l, sluice_stats_t *out) {
    if (!l || !out) return SLUICE_EINVAL;
    out->live_keys = l->table.live;
    out->pending = l->pending;
    out->armed_timers = l->wheel.count;
    out->memory_bytes = l->mem.bytes;
    out->max_probe = sluice__table_max_probe(&l->table);
    out->table_slots = (uint64_t)1 << l->table.slot_bits;
    out->full_refusals = l->count.full_refusals;
    out->admitted = l->count.decided[SLUICE_EMITTED];
    out->scheduled = l->count.decided[SLUICE_SCHEDULED];
    out->emitted_later = l->count.reported[SLUICE_EVENT_EMIT];
    out->dropped = l->count.decided[SLUICE_DROPPED] + l->count.reported[SLUICE_EVENT_DROP];
    out->discarded = l->count.reported[SLUICE_EVENT_DISCARD];
    out->hash_fallbacks = l->table.strong ? 1 : 0;
    return 0;
}

#define FAIL(...)                                                                              \
    do {                                                                                       \
        fprintf(stderr, "sluice_limiter_check: " __VA_ARGS__);                                 \
        fputc('\n', stderr);                                                                   \
        return SLUICE_ECORRUPT;                                                                \
    } while (0)

int sluice_limiter_check(const sluice_limiter_t *l) {
    if (!l) return SLUICE_EINVAL;
    int rc = sluice__table_check(&l->table, l->seed);
    if (rc) return rc;
    if (sluice__wheel_check(&l->wheel) != 0) return SLUICE_ECORRUPT;
    uint64_t pend = 0;
    for (uint32_t i = 0; i < l->table.top; i++) {
        const struct sluice__entry *e = sluice__entry_of(l, i);
        if (e->state != SLUICE__LIVE) {
            if (sluice__wheel_node_armed(&e->node)) FAIL("free entry %u has an armed timer", i);
            continue;
        }
        if (!sluice__wheel_node_armed(&e->node) && l->kind != SLUICE_RATE) FAIL("live entry %u has no armed timer", i);
        if (e->flags & SLUICE__F_PENDING) pend++;
        const char *why = l->ops->check ? l->ops->check(l, e) : NULL;
        if (why) FAIL("entry %u: %s", i, why);
    }
    if (pend != l->pending) FAIL("pending count %llu, but %llu entries hold a token", (unsigned long long)l->pending,
                                 (unsigned long long)pend);
    if (l->wheel.count != (l->kind == SLUICE_RATE ? 0 : l->table.live))
        FAIL("wheel holds %llu timers for %llu live keys", (unsigned long long)l->wheel.count,
             (unsigned long long)l->table.live);
    /* Every scheduled token is pending or was reported exactly once. A call
     * still in progress (this check may run from a callback) may have
     * reported the token it supersedes before its own decision is counted:
     * at most one such token per nested public call. */
    const struct sluice__counters *c = &l->count;
    uint64_t later = c->reported[SLUICE_EVENT_EMIT] + c->reported[SLUICE_EVENT_DROP] + c->reported[SLUICE_EVENT_DISCARD];
    uint64_t held = later + l->pending, sched = c->decided[SLUICE_SCHEDULED];
    if (held < sched || held > sched + (uint64_t)l->depth)
        FAIL("token counts disagree: %llu scheduled, %llu reported later, %llu pending",
             (unsigned long long)c->decided[SLUICE_SCHEDULED], (unsigned long long)later,
             (unsigned long long)l->pending);
    return 0;
}
