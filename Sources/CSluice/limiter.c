/* limiter.c — the plumbing every policy shares: creation, "timers first",
 * the key cap, events and their counters, re-entrancy, flush/cancel/pending,
 * advance, close and free. The rows of each policy's state machine live in
 * policy-*.c, reached through its operations table; the row of a call on a
 * live key, inline in policy-*.h, is compiled into the short path of submit
 * here (see limiter-internal.h).
 *
 * Every transition first brings the entry to its new consistent state
 * (fields, pending flag, timer armed or entry removed) and only then reports
 * the event it produced, so a callback that re-enters the limiter sees a
 * finished transition. Entry indices are never used across a callback: after
 * one, the key is looked up again. */
#define _DEFAULT_SOURCE 1
#include "limiter-internal.h"
#include "plans-internal.h"
#include "policy-audit.h"
#include "policy-debounce.h"
#include "policy-rate.h"
#include "policy-throttle.h"
#include "seed-internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

_Static_assert(SLUICE__NONE == SLUICE__WHEEL_NONE, "the table and the wheel share the 'no entry' index");
_Static_assert(offsetof(struct sluice__entry, node) == 0, "the wheel finds an entry's node at offset 0");
_Static_assert(SLUICE__ENTRY_MAX <= SLUICE__WHEEL_INDEX_MAX, "every entry index is a valid wheel node index");

#if defined(__GNUC__) || defined(__clang__)
#define NOINLINE __attribute__((noinline))
#else
#define NOINLINE
#endif

/* ------------------------------------------------------------------ keys and events */

/* Compaction moved an entry: re-point its timer's neighbours. */
static void entry_moved(void *ctx, uint32_t to) {
    struct sluice_limiter *l = ctx;
    sluice__wheel_relocate(&l->wheel, to);
    /* rate: an entry moved below the expiry pass's position would be missed
     * by it; start the pass again (policy-rate.c) */
    l->rate_pass = 0;
    l->rate_pass_min = UINT64_MAX;
}

/* ------------------------------------------------------------------ call plumbing */

static inline bool unusable(const struct sluice_limiter *l) { return l->closed || l->dying; }

static void release_now(struct sluice_limiter *l);
static void shut(struct sluice_limiter *l, uint64_t now, sluice_event_kind_t kind);
static int64_t advance_locked(struct sluice_limiter *l, uint64_t now, size_t max);

/* Called when a public call returns: carries out a deferred free, or tidies
 * memory when nothing holds an index. */
static NOINLINE void leave_outermost(struct sluice_limiter *l) {
    if (l->dying) {
        if (!l->closed) {
            l->depth++;
            shut(l, l->now_seen, SLUICE_EVENT_DISCARD);
            l->depth--;
        }
        release_now(l);
        return;
    }
    if (l->defer_tidy) {
        l->tidy_pending = true;
        return;
    }
    if (l->table.live < l->table.shrink_below) sluice__table_maybe_shrink(&l->table);
}

bool sluice__limiter_defer_tidy(sluice_limiter_t *l, bool defer) {
    l->defer_tidy = defer;
    return l->tidy_pending;
}

bool sluice__limiter_tidy(sluice_limiter_t *l) {
    if (!l->tidy_pending) return false;
    l->tidy_pending = false;
    if (l->depth == 0 && !l->dying && l->table.live < l->table.shrink_below) sluice__table_maybe_shrink(&l->table);
    return true;
}

static SLUICE__HOT_INLINE void leave(struct sluice_limiter *l) {
    if (--l->depth == 0 && SLUICE__UNLIKELY(l->dying || l->table.live < l->table.shrink_below)) leave_outermost(l);
}

static inline uint64_t clamp_now(struct sluice_limiter *l, uint64_t now) {
    if (now < l->now_seen) return l->now_seen;
    l->now_seen = now;
    return now;
}

/* A `found` argument meaning "no find made yet": the callee finds the key
 * itself (with the probe that switches the table after a long miss). */
#define FIND_NOT_DONE SLUICE__FIND_AGAIN /* no entry index (above SLUICE__ENTRY_MAX) */
_Static_assert(FIND_NOT_DONE > SLUICE__ENTRY_MAX && FIND_NOT_DONE != SLUICE__NONE, "FIND_NOT_DONE names no entry");

/* Timers first: fires the key's deadlines due at `now`. Returns the key's
 * entry index afterwards (SLUICE__NONE if idle), or SLUICE__NONE with
 * *stopped set when a callback closed or freed the limiter. `found`: the
 * key's find in the limiter's current state, when the caller has just made
 * it, else FIND_NOT_DONE. */
static uint32_t due_first_from(struct sluice_limiter *l, const struct sluice__keyref *k, uint64_t now, bool *stopped,
                               uint32_t found) {
    *stopped = false;
    for (;;) {
        uint32_t idx = found != FIND_NOT_DONE ? found : sluice__table_find(&l->table, k);
        found = FIND_NOT_DONE;
        if (idx == SLUICE__NONE) return SLUICE__NONE;
        if (sluice__entry_of(l, idx)->node.deadline > now) return idx;
        if (l->timerless) return idx; /* no timer: an expired rate entry is idle in place */
        sluice__wheel_del(&l->wheel, idx);
        l->ops->fire(l, idx);
        if (unusable(l)) {
            *stopped = true;
            return SLUICE__NONE;
        }
    }
}

static inline uint32_t due_first(struct sluice_limiter *l, const struct sluice__keyref *k, uint64_t now,
                                 bool *stopped) {
    return due_first_from(l, k, now, stopped, FIND_NOT_DONE);
}

/* ------------------------------------------------------------------ create / free */

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
    if (cfg->plans) {
        l->ops = &sluice__plans_ops;
        l->kind = SLUICE__KIND_PLANS;
        size_t plans_ext;
        if ((rc = sluice__plans_create(&l->mem, cfg->plans, &l->plans, &plans_ext)) != 0) {
            mem = l->mem;
            sluice__mem_release(&mem, l, sizeof *l);
            return rc;
        }
    }
    l->timerless = l->ops->reclaim != NULL;
    size_t ext = l->ops->setup(l, p);
    sluice__gate_update(l);
    l->on_event = cfg->on_event;
    l->emit_only = cfg->emit_only;
    l->report_fn[SLUICE_EVENT_EMIT] = cfg->on_event;
    l->report_fn[SLUICE_EVENT_DROP] = cfg->emit_only ? NULL : cfg->on_event;
    l->report_fn[SLUICE_EVENT_DISCARD] = cfg->emit_only ? NULL : cfg->on_event;
    sluice__gate_update(l); /* gate_u64 follows emit_only */
    l->user = cfg->user;
    l->max_keys = cfg->max_keys;
    /* The fast hash's seed and SipHash's key are drawn apart, so that
     * whoever learnt the one (the fast hash is not a proven PRF) has nothing
     * of the other. A fixed seed (tests) is both, for repeatable runs. */
    uint64_t strong_seed[2];
    if (cfg->fixed_seed) {
        l->seed[0] = strong_seed[0] = cfg->seed[0];
        l->seed[1] = strong_seed[1] = cfg->seed[1];
    } else if (sluice__random_seed(l->seed) != 0 || sluice__random_seed(strong_seed) != 0) {
        sluice__plans_free(&l->mem, l->plans);
        mem = l->mem;
        sluice__mem_release(&mem, l, sizeof *l);
        return SLUICE_ENOMEM;
    }
    l->u64_key = sluice__u64_hash_key(l->seed);
    l->now_seen = cfg->start_ns;
    uint32_t stride = (uint32_t)(sizeof(struct sluice__entry) + ext);
    if ((rc = sluice__table_init(&l->table, &l->mem, stride, l->seed, strong_seed)) != 0) {
        sluice__plans_free(&l->mem, l->plans);
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
    sluice__plans_free(&l->mem, l->plans);
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

int sluice__limiter_redraw_strong_key(sluice_limiter_t *l) {
    if (l->table.live != 0 || l->table.strong) return SLUICE_EINVAL;
    return sluice__random_seed(l->table.strong_seed) == 0 ? 0 : SLUICE_ENOMEM;
}

void sluice_limiter_free(sluice_limiter_t *l) {
    if (!l) return;
    if (l->depth > 0) {
        l->dying = true; /* carried out by leave() when the outermost call returns */
        sluice__gate_update(l);
        return;
    }
    if (l->dying) return;
    l->dying = true; /* from here on, calls from callbacks fail with SLUICE_ECLOSED */
    sluice__gate_update(l);
    if (!l->closed) {
        l->depth++;
        shut(l, l->now_seen, SLUICE_EVENT_DISCARD);
        l->depth--;
    }
    release_now(l);
}

/* ------------------------------------------------------------------ submit */

/* The whole of a call, every case, for a key checked and hashed. `found`:
 * the key's find in the current state when the caller has just made it,
 * else FIND_NOT_DONE. Writes the decision as the policies fill it. */
static NOINLINE int submit_general(struct sluice_limiter *l, const struct sluice__keyref *k, uint64_t token,
                                   uint64_t cost, uint64_t now, sluice_decision_t *out, uint32_t found) {
    if (unusable(l)) return SLUICE_ECLOSED;
    if (cost != 1) {
        if (cost == 0 || cost > SLUICE_RATE_MAX) return SLUICE_ERANGE;
        if (!l->ops->quota) return SLUICE_EINVAL; /* not rate */
    }
    /* The policy writes kind and at (rate also remaining and full) into the
     * caller's decision, which is therefore filled even on error. */
    sluice_decision_t scratch;
    sluice_decision_t *d = out ? out : &scratch;
    d->remaining = d->full = 0;
    now = clamp_now(l, now);
    d->now = now;
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
    uint32_t idx;
    if (l->timerless)
        idx = found != FIND_NOT_DONE ? found : sluice__table_find(&l->table, k);
    else
        idx = due_first_from(l, k, now, &stopped, found);
    if (!stopped && idx == SLUICE__NONE && l->max_keys && l->table.live >= l->max_keys) {
        /* At the cap, keys whose windows have ended may still hold entries
         * until their timers run: run them first, so the answer does not
         * depend on whether the loop happened to advance. Rate: free one
         * expired entry if there is one (policy-rate.c). */
        if (l->timerless)
            l->ops->reclaim(l, now, 1);
        else
            advance_locked(l, now, 0);
        idx = unusable(l) ? SLUICE__NONE : due_first(l, k, now, &stopped);
        if (unusable(l)) stopped = true;
    }
    if (stopped) {
        rc = SLUICE_ECLOSED;
    } else {
        rc = l->ops->call(l, k, idx, token, cost, now, d);
        if (rc == 0) l->count.decided[d->kind & 3]++;
    }
    leave(l);
    return rc;
}

/* submit_general() for a batch: the caller's decision is written only when
 * the call returns (a callback during the call sees it untouched). */
static NOINLINE int submit_general_isolated(struct sluice_limiter *l, const struct sluice__keyref *k, uint64_t token,
                                            uint64_t cost, uint64_t now, sluice_decision_t *out, uint32_t found) {
    if (!out) return submit_general(l, k, token, cost, now, NULL, found);
    sluice_decision_t d = *out;
    int rc = submit_general(l, k, token, cost, now, &d, found);
    *out = d;
    return rc;
}

/* Field by field: a copy of the whole struct makes compilers load it with
 * 16-byte moves, which cannot be forwarded from the narrower stores that
 * just filled it (a store-forwarding stall on every call). */
static SLUICE__HOT_INLINE void put_decision(sluice_decision_t *out, const sluice_decision_t *d, uint64_t now) {
    if (!out) return;
    out->kind = d->kind;
    out->at = d->at;
    out->remaining = 0;
    out->full = 0;
    out->now = now;
}

/* The short path of a call: the everyday call on a live key of a built-in
 * policy, with cost 1 on a usable limiter (the caller checked l->gate and
 * the cost) at `now` (clamped by the caller), when nothing of the key is due
 * (timers first has nothing to do) and, for debounce, without maxWait. It
 * runs the same rows (sluice__*_live, policy-*.h; rate, beyond its fast
 * path: the policy's call op) and counts the same totals as the general path, and
 * writes the caller's decision once, when the call is done (after the event
 * it reports, if any). Returns false, having changed nothing, for any other
 * case: the caller then takes submit_general() with the find already made. */
static SLUICE__HOT_INLINE bool call_live(struct sluice_limiter *l, uint32_t idx, uint64_t token, uint64_t now,
                                         sluice_decision_t *out, bool held, int quiet) {
    struct sluice__entry *e = sluice__entry_of(l, idx);
    sluice_decision_t d;
    struct sluice__event pe;
    bool have;
    int kind = quiet ? quiet : l->kind;
    /* (remaining and full are 0 for these policies: put_decision) */
    if (kind == SLUICE_THROTTLE) {
        if (e->node.deadline <= now) return false;
        have = sluice__throttle_live(l, e, token, now, &d, &pe);
    } else if (kind == SLUICE_DEBOUNCE) {
        if (e->node.deadline <= now || l->has_max_wait) return false;
        have = sluice__debounce_live(l, idx, e, token, now, &d, &pe);
    } else if (kind == SLUICE_RATE) {
        if (quiet) return false; /* (never: gate_u64 leaves rate out) */
        /* a live or idle-in-place entry: no event, no key created (the
         * keyref is only used to create one) */
        sluice_decision_t *dr = out ? out : &d;
        dr->now = now;
        if (!sluice__rate_live(l, e, now, dr)) {
            dr->remaining = dr->full = 0;
            (void)l->ops->call(l, NULL, idx, token, 1, now, dr);
        }
        l->count.decided[dr->kind & 3]++;
        return true;
    } else if (kind == SLUICE_AUDIT) {
        if (e->node.deadline <= now) return false;
        have = sluice__audit_live(l, e, token, now, &d, &pe);
    } else if (kind == SLUICE__KIND_PLANS) {
        /* like rate: no event; a key to convert takes the general path */
        sluice_decision_t *dr = out ? out : &d;
        if (!sluice__plans_live(l, e, now, dr)) return false;
        dr->now = now;
        l->count.decided[dr->kind & 3]++;
        return true;
    } else {
        return false;
    }
    /* Every change to the limiter is made before the event is reported, the
     * decision counted too (sluice_limiter_check's token balance holds
     * exactly during the callback): a callback that re-enters or closes the
     * limiter finds the call complete. It is held (depth) only so that a
     * free from the callback waits for the call's end, as documented
     * (`held`: a batch holds it already, for all its calls). The
     * superseded token's event is built only when someone is told of it
     * (not under emit_only): otherwise the drop is only counted, and with
     * no callback to run nothing needs holding. */
    l->count.decided[d.kind & 3]++;
    if (have) {
        l->count.reported[SLUICE_EVENT_DROP]++;
        sluice_event_fn fn = l->report_fn[SLUICE_EVENT_DROP];
        if (!quiet && fn) {
            if (!held) l->depth++;
            fn(l->user, &pe.ev);
            put_decision(out, &d, now);
            if (!held) leave(l);
            return true;
        }
    }
    put_decision(out, &d, now);
    return true;
}

/* A call on a key checked and hashed: the short path when it applies, else
 * the general one. `isolate`: a batch call (see submit_general_isolated;
 * the batch holds depth for all its calls). */
static SLUICE__HOT_INLINE int submit_hot(struct sluice_limiter *l, const struct sluice__keyref *k, uint64_t token,
                                         uint64_t cost, uint64_t now, sluice_decision_t *out, bool isolate) {
    uint32_t idx = FIND_NOT_DONE;
    if (SLUICE__LIKELY(l->gate == 0 && cost == 1)) {
        idx = k->is_u64 && !l->table.strong ? sluice__table_find_u64(&l->table, k->u64, k->hash)
                                            : sluice__table_find(&l->table, k);
        if (idx != SLUICE__NONE && call_live(l, idx, token, clamp_now(l, now), out, isolate, 0)) return 0;
    }
    if (isolate) return submit_general_isolated(l, k, token, cost, now, out, idx);
    return submit_general(l, k, token, cost, now, out, idx);
}

int sluice__limiter_submit_keyref(struct sluice_limiter *l, const struct sluice__keyref *k, uint64_t token,
                                  uint64_t cost, uint64_t now, sluice_decision_t *out) {
    return submit_hot(l, k, token, cost, now, out, false);
}

/* An integer key, cost 1, on a usable limiter whose index uses the fast
 * hash: the key is hashed and found without a keyref (built only for the
 * general path). */
static NOINLINE int submit_u64_general(struct sluice_limiter *l, uint64_t key, uint64_t hash, uint64_t token,
                                       uint64_t now, sluice_decision_t *d, uint32_t found, bool isolate) {
    struct sluice__keyref k = { NULL, 0, key, true, hash };
    if (isolate) return submit_general_isolated(l, &k, token, 1, now, d, found);
    return submit_general(l, &k, token, 1, now, d, found);
}

/* `hash`: the key's fast hash under the limiter's seed. */
static SLUICE__HOT_INLINE int submit_u64(struct sluice_limiter *l, uint64_t key, uint64_t hash, uint64_t token,
                                         uint64_t now, sluice_decision_t *d, bool isolate) {
    uint32_t idx = sluice__table_find_u64(&l->table, key, hash);
    if (idx != SLUICE__NONE && call_live(l, idx, token, clamp_now(l, now), d, isolate, 0)) return 0;
    return submit_u64_general(l, key, hash, token, now, d, idx, isolate);
}

static SLUICE__HOT_INLINE int submit_key(sluice_limiter_t *l, sluice_key_t key, uint64_t token, uint64_t cost,
                                         uint64_t now, sluice_decision_t *d) {
    if (!l) return SLUICE_EINVAL;
    if (SLUICE__LIKELY(key.kind == SLUICE_KEY_U64 && cost == 1 && (l->gate | l->table.strong) == 0))
        return submit_u64(l, key.u64, sluice__fast_hash_u64_keyed(&l->u64_key, key.u64), token, now, d, false);
    if (unusable(l)) return SLUICE_ECLOSED;
    struct sluice__keyref k;
    int rc = sluice__limiter_key(l, key, &k);
    if (rc) return rc;
    return submit_hot(l, &k, token, cost, now, d, false);
}

int sluice_limiter_submit_cost(sluice_limiter_t *l, sluice_key_t key, uint64_t token, uint64_t cost, uint64_t now,
                               sluice_decision_t *d) {
    return submit_key(l, key, token, cost, now, d);
}

int sluice_limiter_submit(sluice_limiter_t *l, sluice_key_t key, uint64_t token, uint64_t now, sluice_decision_t *d) {
    return submit_key(l, key, token, 1, now, d);
}

/* sluice_limiter_submit_u64() off its short path: a closed, dying or
 * pass-through limiter, or an index that switched to SipHash. */
static NOINLINE int submit_u64_slow(sluice_limiter_t *l, uint64_t key, uint64_t token, uint64_t now,
                                    sluice_decision_t *d) {
    if (unusable(l)) return SLUICE_ECLOSED;
    struct sluice__keyref k;
    int rc = sluice__limiter_key(l, sluice_key_u64(key), &k);
    if (rc) return rc;
    return submit_hot(l, &k, token, 1, now, d, false);
}

/* sluice_limiter_submit_u64() on a usable limiter whose index uses the
 * fast hash (gate_u64 and strong clear). */
static NOINLINE int submit_u64_loud(sluice_limiter_t *l, uint64_t key, uint64_t token, uint64_t now,
                                    sluice_decision_t *d) {
    return submit_u64(l, key, sluice__fast_hash_u64_keyed(&l->u64_key, key), token, now, d, false);
}

/* The same under emit_only (gate_u64 == kind << 1, kind not rate), one
 * function per policy kind: a superseded token is only counted, and the
 * probe leaves a long miss to the general path (sluice__table_find_u64_leaf),
 * so the short path of the kind calls nothing and keeps its values in the
 * registers a call would clobber. */
static NOINLINE int submit_u64_quiet_general(sluice_limiter_t *l, uint64_t key, uint64_t token, uint64_t now,
                                             sluice_decision_t *d, uint32_t found) {
    return submit_u64_general(l, key, sluice__fast_hash_u64_keyed(&l->u64_key, key), token, now, d, found, false);
}

static SLUICE__HOT_INLINE int submit_u64_quiet(sluice_limiter_t *l, uint64_t key, uint64_t token, uint64_t now,
                                               sluice_decision_t *d, int kind) {
    uint64_t hash = sluice__fast_hash_u64_keyed(&l->u64_key, key);
    uint32_t idx = sluice__table_find_u64_leaf(&l->table, key, hash);
    if (idx < SLUICE__FIND_AGAIN && call_live(l, idx, token, clamp_now(l, now), d, false, kind)) return 0;
    /* (six arguments: a tail call, so the short path needs no frame) */
    return submit_u64_quiet_general(l, key, token, now, d, idx);
}

static NOINLINE int submit_u64_quiet_throttle(sluice_limiter_t *l, uint64_t key, uint64_t token, uint64_t now,
                                              sluice_decision_t *d) {
    return submit_u64_quiet(l, key, token, now, d, SLUICE_THROTTLE);
}

static NOINLINE int submit_u64_quiet_audit(sluice_limiter_t *l, uint64_t key, uint64_t token, uint64_t now,
                                           sluice_decision_t *d) {
    return submit_u64_quiet(l, key, token, now, d, SLUICE_AUDIT);
}

static NOINLINE int submit_u64_quiet_debounce(sluice_limiter_t *l, uint64_t key, uint64_t token, uint64_t now,
                                              sluice_decision_t *d) {
    return submit_u64_quiet(l, key, token, now, d, SLUICE_DEBOUNCE);
}

int sluice_limiter_submit_u64(sluice_limiter_t *l, uint64_t key, uint64_t token, uint64_t now, sluice_decision_t *d) {
    if (!l) return SLUICE_EINVAL;
    unsigned g = (unsigned)l->gate_u64 | l->table.strong;
    if (SLUICE__LIKELY(g == 0)) return submit_u64_loud(l, key, token, now, d);
    if (g == 2 * SLUICE_THROTTLE) return submit_u64_quiet_throttle(l, key, token, now, d);
    if (g == 2 * SLUICE_DEBOUNCE) return submit_u64_quiet_debounce(l, key, token, now, d);
    if (g == 2 * SLUICE_AUDIT) return submit_u64_quiet_audit(l, key, token, now, d);
    return submit_u64_slow(l, key, token, now, d);
}

/* A batch runs in groups of GROUP calls, as DPDK's bulk lookups do, in
 * three passes over the group. First every key is validated and hashed and
 * its home index slot prefetched, so all the group's index misses are in
 * flight together; then, for every key, the slots from its home (by now in
 * cache or on the way) are read up to the key's tag or an empty slot, and
 * both cache lines the entry named there may span are prefetched (an entry
 * of 40 bytes crosses a line half the time), so all the group's entry
 * misses are in flight together too; then the calls are made in order,
 * through the same short path as a single call. (At 1M keys, ~64 MB of
 * table, hinting the entries only 8 calls ahead of each call and only their
 * first line left most calls waiting on an entry: 66 -> 48 ns a call in a C
 * driver like the bench's.) The hints only read and prefetch, so a call that
 * changes the table (a key created or removed, the index resized, a
 * callback re-entering) can only make a hint useless, never wrong; the same
 * key twice in a batch is simply found twice. (A table that switched to
 * SipHash gets no entry hints: its tags are not the prepared hash.) */
#define GROUP 32u
#define ENTRY_SCAN 8u /* index slots an entry hint looks at */

static SLUICE__HOT_INLINE void hint_slot(const struct sluice_limiter *l, uint64_t hash) {
#if defined(__GNUC__) || defined(__clang__)
    __builtin_prefetch(&l->table.slots[sluice__table_home(&l->table, (uint32_t)(hash >> 32))]);
#else
    (void)l;
    (void)hash;
#endif
}

/* Returns the entry index the key's first slot with its tag names (a
 * candidate, SLUICE__NONE when none is near), after asking for the entry's
 * first and last byte. */
static SLUICE__HOT_INLINE uint32_t hint_entry(const struct sluice_limiter *l, uint64_t hash) {
    const struct sluice__table *t = &l->table;
    if (t->strong) return SLUICE__NONE;
    uint32_t tag = (uint32_t)(hash >> 32);
    size_t mask = t->slot_mask;
    size_t i = sluice__table_home(t, tag);
    for (unsigned n = 0; n < ENTRY_SCAN; n++, i = (i + 1) & mask) {
        uint64_t s = t->slots[i];
        if (s == 0) return SLUICE__NONE;
        if (sluice__slot_tag(s) == tag) {
            uint32_t idx = sluice__slot_idx(s);
            if (idx >= t->top) return SLUICE__NONE;
#if defined(__GNUC__) || defined(__clang__)
            const char *e = (const char *)sluice__entry_at(t, idx);
            __builtin_prefetch(e);
            __builtin_prefetch(e + t->stride - 1);
#endif
            return idx;
        }
    }
    return SLUICE__NONE;
}

/* The key's entry when the candidate is it: a live entry holding the key
 * is the key's entry, wherever the index names it (keys are unique), so a
 * candidate taken before earlier calls changed the table is checked here,
 * not trusted. */
static SLUICE__HOT_INLINE bool candidate_is(const struct sluice_limiter *l, uint32_t idx, uint64_t key) {
    if (idx >= l->table.top) return false;
    const struct sluice__entry *e = sluice__entry_of(l, idx);
    return e->key == key && (e->flags & SLUICE__KEY_U64) && e->state == SLUICE__LIVE;
}

/* A batch call off the short path: the checks and the general call. `k`:
 * the prepared key (byte keys), or NULL for an integer key of `hash`. */
static NOINLINE int batch_call_general(struct sluice_limiter *l, const sluice_call_t *c, int krc,
                                       const struct sluice__keyref *k, uint64_t hash, uint64_t now,
                                       sluice_decision_t *d) {
    if (unusable(l)) return SLUICE_ECLOSED; /* as sluice_limiter_submit_cost() checks it before the key */
    if (krc) return krc;
    struct sluice__keyref ku = { NULL, 0, c->key.u64, true, hash };
    return submit_hot(l, k ? k : &ku, c->token, c->cost, now, d, true);
}

/* The batch; `quiet`: 0, or the policy kind of a limiter under emit_only
 * (see gate_u64), for which the short path reports nothing. */
static SLUICE__HOT_INLINE int submit_many(sluice_limiter_t *l, const sluice_call_t *calls, size_t n, uint64_t now,
                                          sluice_decision_t *decisions, int *results, int quiet) {
    int first = 0;
    struct sluice__keyref kb[GROUP]; /* byte keys */
    uint64_t hash[GROUP];
    uint32_t cand[GROUP]; /* entry hints (integer keys) */
    int krc[GROUP];
    bool fast[GROUP]; /* an integer key of cost 1 */
    /* Held across the whole batch: a free from a callback waits for its end. */
    l->depth++;
    for (size_t base = 0; base < n; base += GROUP) {
        const sluice_call_t *cg = calls + base;
        size_t m = n - base < GROUP ? n - base : GROUP;
        for (size_t j = 0; j < m; j++) {
            if (cg[j].key.kind == SLUICE_KEY_U64) {
                hash[j] = sluice__fast_hash_u64_keyed(&l->u64_key, cg[j].key.u64);
                krc[j] = 0;
                fast[j] = cg[j].cost == 1;
            } else {
                fast[j] = false;
                hash[j] = 0;
                if ((krc[j] = sluice__limiter_key(l, cg[j].key, &kb[j])) != 0) continue;
                hash[j] = kb[j].hash;
            }
            hint_slot(l, hash[j]);
        }
        for (size_t j = 0; j < m; j++) cand[j] = krc[j] == 0 ? hint_entry(l, hash[j]) : SLUICE__NONE;
        for (size_t j = 0; j < m; j++) {
            sluice_decision_t *d = decisions ? &decisions[base + j] : NULL;
            int rc;
            if (SLUICE__LIKELY(fast[j] && (l->gate | l->table.strong) == 0)) {
                uint64_t key = cg[j].key.u64;
                if (candidate_is(l, cand[j], key) &&
                    call_live(l, cand[j], cg[j].token, clamp_now(l, now), d, true, quiet))
                    rc = 0;
                else
                    rc = submit_u64(l, key, hash[j], cg[j].token, now, d, true);
            } else
                rc = batch_call_general(l, &cg[j], krc[j], cg[j].key.kind == SLUICE_KEY_U64 ? NULL : &kb[j], hash[j],
                                        now, d);
            if (results) results[base + j] = rc;
            if (rc && !first) first = rc;
        }
    }
    leave(l);
    return first;
}

static NOINLINE int submit_many_loud(sluice_limiter_t *l, const sluice_call_t *calls, size_t n, uint64_t now,
                                     sluice_decision_t *decisions, int *results) {
    return submit_many(l, calls, n, now, decisions, results, 0);
}

static NOINLINE int submit_many_quiet_throttle(sluice_limiter_t *l, const sluice_call_t *calls, size_t n, uint64_t now,
                                               sluice_decision_t *decisions, int *results) {
    return submit_many(l, calls, n, now, decisions, results, SLUICE_THROTTLE);
}

static NOINLINE int submit_many_quiet_debounce(sluice_limiter_t *l, const sluice_call_t *calls, size_t n, uint64_t now,
                                               sluice_decision_t *decisions, int *results) {
    return submit_many(l, calls, n, now, decisions, results, SLUICE_DEBOUNCE);
}

static NOINLINE int submit_many_quiet_audit(sluice_limiter_t *l, const sluice_call_t *calls, size_t n, uint64_t now,
                                            sluice_decision_t *decisions, int *results) {
    return submit_many(l, calls, n, now, decisions, results, SLUICE_AUDIT);
}

int sluice_limiter_submit_many(sluice_limiter_t *l, const sluice_call_t *calls, size_t n, uint64_t now,
                               sluice_decision_t *decisions, int *results) {
    if (!l || (n && !calls)) return SLUICE_EINVAL;
    /* under emit_only the policy kind is fixed and no drop is reported: a
     * copy of the batch per kind (gate_u64 without its gate bit) */
    switch (l->gate_u64 & ~1u) {
    case 2 * SLUICE_THROTTLE: return submit_many_quiet_throttle(l, calls, n, now, decisions, results);
    case 2 * SLUICE_DEBOUNCE: return submit_many_quiet_debounce(l, calls, n, now, decisions, results);
    case 2 * SLUICE_AUDIT: return submit_many_quiet_audit(l, calls, n, now, decisions, results);
    default: return submit_many_loud(l, calls, n, now, decisions, results);
    }
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
    out->now = now;
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

/* A cursor may be used while it names a carved entry. A sentinel or
 * SLUICE__WHEEL_NONE (both >= SLUICE__WHEEL_HEAD_BASE > every entry index)
 * never does, so raw links need no conversion before this test. */
static inline bool hint_ok(const struct sluice_limiter *l, uint32_t i) { return i < l->table.top; }

/* The raw link after entry `i` (an entry index, a sentinel or NONE): the
 * limiter's wheel nodes are its entries' first field, so this reads the
 * entry directly instead of through the wheel's general arena. */
static inline uint32_t link_after(const struct sluice_limiter *l, uint32_t i) {
    return sluice__entry_of(l, i)->node.link.next;
}

static inline void prefetch_entry(const struct sluice_limiter *l, uint32_t i) {
#if defined(__GNUC__) || defined(__clang__)
    __builtin_prefetch(sluice__entry_of(l, i));
#else
    (void)l;
    (void)i;
#endif
}

/* Handles the due timers, at most `max` (0: no bound). With `out` NULL
 * (a constant where this is inlined) each emission is reported; otherwise
 * it is written to out[*written] and the pass ends once `cap` are (a timer
 * writes at most one). */
static SLUICE__HOT_INLINE int64_t advance_pass(struct sluice_limiter *l, uint64_t now, size_t max,
                                               sluice_emission_t *out, size_t cap, size_t *written) {
    if (l->timerless) {
        /* no timers: the lazy expiry frees the idle entries (policy-rate.c) */
        sluice__wheel_advance(&l->wheel, now);
        return (int64_t)l->ops->reclaim(l, now, max);
    }
    sluice__wheel_advance(&l->wheel, now);
    int64_t n = 0;
    size_t w = 0;
    uint32_t ca = SLUICE__NONE, cb = SLUICE__NONE;
    while ((max == 0 || (size_t)n < max) && (!out || w < cap)) {
        uint32_t idx = sluice__wheel_pop(&l->wheel);
        if (idx == SLUICE__NONE) break;
        if (!hint_ok(l, cb) || idx == cb || idx == ca) {
            /* (re)start: cb AHEAD nodes past the head, ca AHEAD past cb */
            cb = l->wheel.heads[SLUICE__WHEEL_HEAD_EXPIRED].next;
            for (unsigned k = 0; k < AHEAD && hint_ok(l, cb); k++) cb = link_after(l, cb);
            ca = cb;
            for (unsigned k = 0; k < AHEAD && hint_ok(l, ca); k++) {
                ca = link_after(l, ca);
                if (hint_ok(l, ca)) prefetch_entry(l, ca);
            }
        } else {
            cb = link_after(l, cb);
            if (hint_ok(l, cb)) sluice__table_prefetch_home(&l->table, sluice__entry_of(l, cb));
            if (hint_ok(l, ca)) {
                ca = link_after(l, ca);
                if (hint_ok(l, ca)) prefetch_entry(l, ca);
            }
        }
        if (out)
            w += l->ops->fire_into(l, idx, out + w);
        else
            l->ops->fire(l, idx);
        n++;
        if (unusable(l)) break;
    }
    if (out) *written = w;
    return n;
}

static int64_t advance_locked(struct sluice_limiter *l, uint64_t now, size_t max) {
    return advance_pass(l, now, max, NULL, 0, NULL);
}

static NOINLINE int64_t advance_locked_into(struct sluice_limiter *l, uint64_t now, size_t max, sluice_emission_t *out,
                                            size_t cap, size_t *written) {
    return advance_pass(l, now, max, out, cap, written);
}

size_t sluice__limiter_reclaim(sluice_limiter_t *l, uint64_t now) {
    if (unusable(l) || !l->timerless) return 0;
    return l->ops->reclaim(l, now < l->now_seen ? l->now_seen : now, 1);
}

/* The end of an advance (n timers handled): the table's tidy, or not yet. */
static inline int64_t advance_done(struct sluice_limiter *l, int64_t n) {
    /* A drain in progress (timers still armed): the table's tidy (index
     * shrink, slab compaction) waits for the drain's end, for a call of
     * another kind, or until the live keys are 8 times below its mark, so
     * that a drain in many small advances (a manual clock's deadlines)
     * rehashes and moves about what one advance does; memory meanwhile stays
     * under 8 times what the mark allows. Only timers remove keys in an
     * advance (rate aside). The loop layer defers this work its own way
     * (defer_tidy: done after its pass's delivery), left as it is. */
    if (l->depth == 1 && !l->defer_tidy && !l->dying && !l->timerless && l->wheel.count != 0 &&
        l->table.live * 8 >= l->table.shrink_below) {
        l->depth = 0;
        return n;
    }
    leave(l);
    return n;
}

int64_t sluice_limiter_advance(sluice_limiter_t *l, uint64_t now, size_t max_timers) {
    if (!l) return SLUICE_EINVAL;
    if (unusable(l)) return SLUICE_ECLOSED;
    now = clamp_now(l, now);
    l->depth++;
    return advance_done(l, advance_locked(l, now, max_timers));
}

int64_t sluice_limiter_advance_into(sluice_limiter_t *l, uint64_t now, size_t max_timers, sluice_emission_t *out,
                                    size_t capacity, size_t *count) {
    if (count) *count = 0;
    if (!l || !out || !count || capacity == 0) return SLUICE_EINVAL;
    if (unusable(l)) return SLUICE_ECLOSED;
    now = clamp_now(l, now);
    l->depth++;
    return advance_done(l, advance_locked_into(l, now, max_timers, out, capacity, count));
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
        l->ops->fire(l, idx);
        if (l->closed) return;
    }
    for (uint32_t i = 0; i < l->table.top; i++) {
        while (sluice__entry_of(l, i)->state == SLUICE__LIVE && sluice__entry_of(l, i)->node.deadline <= now) {
            sluice__wheel_del(&l->wheel, i);
            l->ops->fire(l, i);
            if (l->closed) return;
        }
    }
    l->closed = true;
    sluice__gate_update(l);
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
    if (l->timerless) return l->ops->next(l); /* the lazy expiry's next sweep */
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

int sluice_limiter_check(const sluice_limiter_t *l) {
    if (!l) return SLUICE_EINVAL;
    int rc = sluice__table_check(&l->table, l->seed);
    if (rc) return rc;
    if (sluice__wheel_check(&l->wheel) != 0) return SLUICE_ECORRUPT;
    uint64_t pend = 0;
    for (uint32_t i = 0; i < l->table.top; i++) {
        const struct sluice__entry *e = sluice__entry_of(l, i);
        if (e->state != SLUICE__LIVE) {
            if (sluice__wheel_node_armed(&e->node)) SLUICE__CHECK_FAIL("free entry %u has an armed timer", i);
            continue;
        }
        if (!sluice__wheel_node_armed(&e->node) && !l->timerless)
            SLUICE__CHECK_FAIL("live entry %u has no armed timer", i);
        if (e->flags & SLUICE__F_PENDING) pend++;
        const char *why = l->ops->check ? l->ops->check(l, e) : NULL;
        if (why) SLUICE__CHECK_FAIL("entry %u: %s", i, why);
    }
    if (pend != l->pending)
        SLUICE__CHECK_FAIL("pending count %llu, but %llu entries hold a token", (unsigned long long)l->pending,
                           (unsigned long long)pend);
    if (l->wheel.count != (l->timerless ? 0 : l->table.live))
        SLUICE__CHECK_FAIL("wheel holds %llu timers for %llu live keys", (unsigned long long)l->wheel.count,
                           (unsigned long long)l->table.live);
    /* Every scheduled token is pending or was reported exactly once. A call
     * still in progress (this check may run from a callback) may have
     * reported the token it supersedes before its own decision is counted:
     * at most one such token per nested public call. */
    const struct sluice__counters *c = &l->count;
    uint64_t later =
        c->reported[SLUICE_EVENT_EMIT] + c->reported[SLUICE_EVENT_DROP] + c->reported[SLUICE_EVENT_DISCARD];
    uint64_t held = later + l->pending, sched = c->decided[SLUICE_SCHEDULED];
    if (held < sched || held > sched + (uint64_t)l->depth)
        SLUICE__CHECK_FAIL("token counts disagree: %llu scheduled, %llu reported later, %llu pending",
                           (unsigned long long)c->decided[SLUICE_SCHEDULED], (unsigned long long)later,
                           (unsigned long long)l->pending);
    return 0;
}

/* ------------------------------------------------------------------ plans (sluice_plans.h) */

/* The one quota of a rate limiter without plans, described as plan 0. */
static void describe_plan(const struct sluice_limiter *l, uint32_t plan, sluice_plan_detail_t *det) {
    if (l->plans) {
        sluice__plans_describe(l, plan, det);
        return;
    }
    memset(det, 0, sizeof *det);
    det->nquotas = 1;
    det->quotas[0].burst = l->rate.burst;
    det->quotas[0].limit = l->rate.limit;
    det->quotas[0].per_ns = l->rate.per;
}

int sluice__limiter_plan_args(struct sluice_limiter *l, uint32_t plan, sluice_plan_detail_t *det) {
    if (!l->ops->quota) return SLUICE_EINVAL; /* not rate */
    if (plan >= (l->plans ? l->plans->table.nplans : 1)) return SLUICE_ENOPLAN;
    if (det) describe_plan(l, plan, det);
    l->plan_arg = plan;
    l->detail_arg = l->plans ? det : NULL;
    return 0;
}

void sluice__limiter_plan_done(struct sluice_limiter *l, int rc, const sluice_decision_t *d, uint64_t cost,
                               const struct sluice__keyref *k, sluice_plan_detail_t *det) {
    l->plan_arg = 0;
    l->detail_arg = NULL;
    if (rc || !det || l->plans) return;
    /* one quota: its figures are the decision's, or the key's as it stands */
    sluice_quota_figures_t *f = &det->quotas[0];
    if (d->kind == SLUICE_EMITTED) {
        f->remaining = d->remaining;
        f->full = d->full;
        f->retry = d->now;
        det->refused = 0;
        return;
    }
    sluice_quota_t q;
    l->ops->quota(l, sluice__table_find(&l->table, k), cost, d->now, &q);
    f->remaining = q.remaining;
    f->full = q.full;
    f->retry = q.retry;
    det->refused = 1;
}

/* sluice_limiter_submit_plan() on an integer key, cost 1, on a usable
 * limiter of plans whose index uses the fast hash (`hash`: the key's),
 * off its short path; `found`: the key's find. */
static NOINLINE int submit_plan_u64(struct sluice_limiter *l, uint64_t key, uint64_t hash, uint64_t token,
                                    uint32_t plan, uint64_t now, sluice_decision_t *d, sluice_plan_detail_t *det,
                                    uint32_t found) {
    int rc = sluice__limiter_plan_args(l, plan, det);
    if (rc) return rc;
    if (found != SLUICE__NONE && call_live(l, found, token, clamp_now(l, now), d, false, 0))
        rc = 0;
    else
        rc = submit_u64_general(l, key, hash, token, now, d, found, false);
    sluice__limiter_plan_done(l, rc, d, 1, NULL, det);
    return rc;
}

/* sluice_limiter_submit_plan() off the short path below, every case. */
static NOINLINE int submit_plan_slow(sluice_limiter_t *l, sluice_key_t key, uint64_t token, uint64_t cost,
                                     uint32_t plan, uint64_t now, sluice_decision_t *d, sluice_plan_detail_t *det) {
    if (unusable(l)) return SLUICE_ECLOSED;
    sluice_decision_t scratch;
    sluice_decision_t *dd = d ? d : &scratch;
    int rc;
    if (l->plans && key.kind == SLUICE_KEY_U64 && cost == 1 && (l->gate | l->table.strong) == 0) {
        /* an integer key: hashed and found as sluice_limiter_submit_u64() does */
        uint64_t hash = sluice__fast_hash_u64_keyed(&l->u64_key, key.u64);
        return submit_plan_u64(l, key.u64, hash, token, plan, now, dd, det,
                               sluice__table_find_u64(&l->table, key.u64, hash));
    }
    struct sluice__keyref k;
    if ((rc = sluice__limiter_key(l, key, &k)) != 0) return rc;
    if ((rc = sluice__limiter_plan_args(l, plan, det)) != 0) return rc;
    rc = submit_hot(l, &k, token, cost, now, dd, false);
    sluice__limiter_plan_done(l, rc, dd, cost, &k, det);
    return rc;
}

/* The short path's way out: the key found again, every case of an
 * integer key (six arguments: a tail call, so the short path needs no
 * frame). */
static NOINLINE int submit_plan_u64_off(struct sluice_limiter *l, uint64_t key, uint64_t token, uint32_t plan,
                                        uint64_t now, sluice_decision_t *d) {
    uint64_t hash = sluice__fast_hash_u64_keyed(&l->u64_key, key);
    return submit_plan_u64(l, key, hash, token, plan, now, d, NULL, sluice__table_find_u64(&l->table, key, hash));
}

/* The short path of a plan call: an integer key, cost 1, no detail, on a
 * usable limiter of plans whose index uses the fast hash. A live key (or
 * one idle in place) whose entry records the plan's quota set is decided
 * by the plan's row (sluice__plans_row) here, as call_live does for the
 * other policies; any other case takes submit_plan_u64_off(). */
static NOINLINE int submit_plan_u64_hot(struct sluice_limiter *l, uint64_t key, uint64_t token, uint32_t plan,
                                        uint64_t now, sluice_decision_t *d) {
    const struct sluice__plans *pl = l->plans;
    uint32_t idx = sluice__table_find_u64(&l->table, key, sluice__fast_hash_u64_keyed(&l->u64_key, key));
    if (SLUICE__LIKELY(idx != SLUICE__NONE && plan < pl->table.nplans)) {
        struct sluice__entry *e = sluice__entry_of(l, idx);
        uint32_t sid = pl->table.plan[plan].set;
        if (SLUICE__LIKELY(sluice__plans_set_of(e) == sid)) {
            uint64_t t = clamp_now(l, now);
            if (SLUICE__LIKELY(sluice__plans_row(e, pl->sets[sid], t, d, NULL))) {
                d->now = t;
                l->count.decided[d->kind & 3]++;
                return 0;
            }
        }
    }
    return submit_plan_u64_off(l, key, token, plan, now, d);
}

int sluice_limiter_submit_plan(sluice_limiter_t *l, sluice_key_t key, uint64_t token, uint64_t cost, uint32_t plan,
                               uint64_t now, sluice_decision_t *d, sluice_plan_detail_t *det) {
    if (!l) return SLUICE_EINVAL;
    if (SLUICE__LIKELY(l->plans && key.kind == SLUICE_KEY_U64 && cost == 1 && d && !det &&
                       (l->gate | l->table.strong) == 0))
        return submit_plan_u64_hot(l, key.u64, token, plan, now, d);
    return submit_plan_slow(l, key, token, cost, plan, now, d, det);
}

int sluice_limiter_submit_plan_u64(sluice_limiter_t *l, uint64_t key, uint64_t token, uint32_t plan, uint64_t now,
                                   sluice_decision_t *d) {
    if (!l) return SLUICE_EINVAL;
    if (SLUICE__LIKELY(l->plans && d && (l->gate | l->table.strong) == 0))
        return submit_plan_u64_hot(l, key, token, plan, now, d);
    return submit_plan_slow(l, sluice_key_u64(key), token, 1, plan, now, d, NULL);
}

int sluice_limiter_quota_plan(sluice_limiter_t *l, sluice_key_t key, uint64_t cost, uint32_t plan, uint64_t now,
                              sluice_quota_t *out, sluice_plan_detail_t *det) {
    if (!l || !out) return SLUICE_EINVAL;
    if (unusable(l)) return SLUICE_ECLOSED;
    int rc = sluice__limiter_plan_args(l, plan, det);
    if (rc) return rc;
    rc = sluice_limiter_quota(l, key, cost, now, out);
    l->plan_arg = 0;
    l->detail_arg = NULL;
    if (rc == 0 && det && !l->plans) {
        det->quotas[0].remaining = out->remaining;
        det->quotas[0].full = out->full;
        det->quotas[0].retry = out->retry;
        det->refused = out->retry > out->now;
    }
    return rc;
}

int sluice__limiter_plans_prepare(sluice_limiter_t *l, const sluice_plans_t *p, void **out) {
    if (!l || !p || !out) return SLUICE_EINVAL;
    if (unusable(l)) return SLUICE_ECLOSED;
    if (!l->plans) return SLUICE_EINVAL;
    int rc = sluice__plans_check(p, NULL, 0);
    if (rc) return rc;
    if (p->max_quotas && p->max_quotas != l->plans->max_quotas) return SLUICE_ERANGE;
    for (size_t i = 0; i < p->nplans; i++)
        if (p->plans[i].nquotas > l->plans->max_quotas) return SLUICE_ERANGE;
    struct sluice__plans_built *b = sluice__mem_alloc(&l->mem, sizeof *b);
    if (!b) return SLUICE_ENOMEM;
    if ((rc = sluice__plans_build(&l->mem, l->plans, p, b)) != 0) {
        sluice__mem_release(&l->mem, b, sizeof *b);
        return rc;
    }
    *out = b;
    return 0;
}

void sluice__limiter_plans_commit(sluice_limiter_t *l, void *h) {
    struct sluice__plans_built *b = h;
    sluice__plans_install(&l->mem, l->plans, b);
    sluice__mem_release(&l->mem, b, sizeof *b);
    /* a longer quota may keep keys longer: the sweeps space out (never closer) */
    if (l->plans->every > l->rate_every) l->rate_every = l->plans->every;
}

void sluice__limiter_plans_abandon(sluice_limiter_t *l, void *h) {
    struct sluice__plans_built *b = h;
    sluice__plans_discard(&l->mem, b);
    sluice__mem_release(&l->mem, b, sizeof *b);
}

int sluice_limiter_set_plans(sluice_limiter_t *l, const sluice_plans_t *p) {
    if (l && l->depth > 0) return SLUICE_EBUSY;
    void *h;
    int rc = sluice__limiter_plans_prepare(l, p, &h);
    if (rc == 0) sluice__limiter_plans_commit(l, h);
    return rc;
}

int sluice_limiter_plan_index(const sluice_limiter_t *l, const char *name, size_t len, uint32_t *out) {
    if (!l || !name || !out || !l->ops->quota) return SLUICE_EINVAL;
    uint32_t i;
    if (l->plans)
        i = sluice__plans_find(l->plans, name, len);
    else
        i = len == 7 && memcmp(name, "default", 7) == 0 ? 0 : SLUICE__NONE;
    if (i == SLUICE__NONE) return SLUICE_ENOPLAN;
    *out = i;
    return 0;
}

int sluice_limiter_plan_info(const sluice_limiter_t *l, uint32_t plan, sluice_plan_detail_t *det) {
    if (!l || !l->ops->quota) return SLUICE_EINVAL;
    uint32_t n = l->plans ? l->plans->table.nplans : 1;
    if (plan >= n) return SLUICE_ENOPLAN;
    if (det) describe_plan(l, plan, det);
    return (int)n;
}

int sluice_limiter_plan_name(const sluice_limiter_t *l, uint32_t plan, int quota, char *buf, size_t cap) {
    if (!l || !buf || !l->ops->quota) return SLUICE_EINVAL;
    const char *name = "default";
    if (l->plans) {
        if (plan >= l->plans->table.nplans) return SLUICE_ENOPLAN;
        const struct sluice__plan *p = &l->plans->table.plan[plan];
        const struct sluice__qset *s = l->plans->sets[p->set];
        if (quota >= (int)s->n || quota < -1) return SLUICE_ENOPLAN;
        name = quota < 0 ? p->name : s->name[quota];
    } else if (plan != 0 || quota > 0 || quota < -1) {
        return SLUICE_ENOPLAN;
    }
    size_t len = strlen(name);
    if (len + 1 > cap) return SLUICE_EINVAL;
    memcpy(buf, name, len + 1);
    return (int)len;
}
