/*
 * limiter-internal.h — the limiter and its policies (internal).
 *
 * A limiter is three things:
 *
 *  - a keyed table (table-internal.h): one entry per live key;
 *  - a timer wheel (wheel-internal.h) whose nodes are the entries' nodes;
 *  - a policy: a small table of operations (struct sluice__policy_ops), one
 *    file each (policy-throttle.c, policy-audit.c, policy-debounce.c,
 *    policy-rate.c) with its header (policy-*.h: the table and the row of
 *    a call on a live key, inline), registered in sluice__policies[]
 *    (policy.c).
 *
 * limiter.c owns the plumbing every policy shares: "timers first", the cap
 * on keys, events and their counters, re-entrancy, close and free. A policy
 * owns the rows of its state machine (docs/semantics.md): what a call does
 * to an idle or live key, what its timer does, and its invariants.
 *
 * For throttle, audit and debounce an entry exists exactly while its key is
 * not idle, and every live entry has exactly one armed timer: the end of its
 * window (throttle, audit) or its debounce deadline.
 *
 * Rate entries have no timer. A rate entry keeps its TAT (node.deadline is
 * `full`, the TAT rounded up; the wheel node is never linked), and once
 * full <= now the key is idle: a call treats it as fresh (the state is reset
 * in place, no removal and no insertion), a quota peek reads a fresh quota.
 * Its memory is reclaimed lazily (policy-rate.c): a few entries are examined
 * after each key created, a resumable pass over the slab runs from
 * advance() once the sweep is due (next_deadline() says when), and at the
 * key cap a pass reclaims an expired entry before a new key is refused.
 */
#ifndef SLUICE_LIMITER_INTERNAL_H
#define SLUICE_LIMITER_INTERNAL_H

#include "alloc-internal.h"
#include "sluice.h"
#include "table-internal.h"
#include "wheel-internal.h"

#include <string.h>

/* Internal symbols stay out of the shared library's interface. */
#if defined(__GNUC__) || defined(__clang__)
#pragma GCC visibility push(hidden)
#endif

/* Bits of sluice__entry.flags owned by the limiter (the table owns the top two). */
enum sluice__flag {
    SLUICE__F_PENDING = 1 << 0, /* `token` holds a pending token */
    SLUICE__F_POLICY = 1 << 1   /* free for the policy (debounce: maxWait passed without an emission) */
};

static inline uint64_t sluice__sat_add(uint64_t a, uint64_t b) { return a > UINT64_MAX - b ? UINT64_MAX : a + b; }

struct sluice_limiter;

/* The operations of one policy kind (libevent's eventops is the model):
 * each policy-NAME.c defines its table, sluice__NAME_ops (policy-NAME.h),
 * registered in sluice__policies[] (policy.c), and limiter.c reaches the
 * policy through this table alone. The one exception is the short path of
 * a call on a live key (limiter.c, call_live): each policy keeps that row
 * inline in its header (sluice__NAME_live in policy-NAME.h), and limiter.c
 * compiles it into its submit paths, because an indirect call there would
 * cost the hottest call its inlining (an operation of this table runs on
 * every other path). */
struct sluice__policy_ops {
    sluice_policy_kind_t kind;
    const char *name;
    /* Checks a policy of this kind. Returns NULL when valid, else a sentence
     * naming the field and the rule, with *code set to SLUICE_EINVAL or
     * SLUICE_ERANGE. */
    const char *(*explain)(const sluice_policy_t *p, int *code);
    /* Fills the limiter's policy fields from a valid policy. Returns the
     * bytes each entry needs after struct sluice__entry. */
    size_t (*setup)(struct sluice_limiter *l, const sluice_policy_t *p);
    /* True when a valid policy never keeps a token (its calls are all
     * decided at once, so it needs no event callback). */
    bool (*never_schedules)(const sluice_policy_t *p);
    /* A call of `cost` at time t. `idx` is the key's live entry, or
     * SLUICE__NONE when the key is idle: the policy then creates the entry
     * with sluice__limiter_add_key() if it needs one. Fills *d (zeroed by
     * the caller). Returns 0, or the error of sluice__limiter_add_key(). */
    int (*call)(struct sluice_limiter *l, const struct sluice__keyref *k, uint32_t idx, uint64_t token, uint64_t cost,
                uint64_t t, sluice_decision_t *d);
    /* The entry's timer is due and has been disarmed: the policy's timer row
     * at the entry's deadline. */
    void (*fire)(struct sluice_limiter *l, uint32_t idx);
    /* The same row, its emission (a timer row reports nothing else) written
     * to *out instead of reported (sluice_limiter_advance_into): returns 1
     * when it wrote one, else 0. */
    size_t (*fire_into)(struct sluice_limiter *l, uint32_t idx, sluice_emission_t *out);
    /* flush() on a live entry: NULL for the usual rule (emit the pending
     * token, back to idle). */
    int (*flush)(struct sluice_limiter *l, uint32_t idx, uint64_t now);
    /* quota() on a key (idx may be SLUICE__NONE); NULL when the policy has
     * no quota. */
    void (*quota)(const struct sluice_limiter *l, uint32_t idx, uint64_t cost, uint64_t t, sluice_quota_t *out);
    /* The policy's invariants of one live entry: NULL, or what is broken. */
    const char *(*check)(const struct sluice_limiter *l, const struct sluice__entry *e);
    /* A policy whose entries arm no timer (rate) frees idle entries lazily:
     * reclaim frees those idle at `now` (at most `max`, 0 for no bound) and
     * returns how many; next says when advance() should call it (UINT64_MAX:
     * never). Both NULL for a policy with timers, whose idle keys have no
     * entry (advance() fires their deadlines). */
    size_t (*reclaim)(struct sluice_limiter *l, uint64_t now, size_t max);
    uint64_t (*next)(const struct sluice_limiter *l);
};

/* A policy file's fire_now and fire_into operations, from its timer row
 * FIRE(l, idx, out) (out NULL: the emission is reported). */
#define SLUICE__POLICY_FIRE_OPS(FIRE)                                                                                  \
    static void fire_now(struct sluice_limiter *l, uint32_t idx) { (void)FIRE(l, idx, NULL); }                         \
    static size_t fire_into(struct sluice_limiter *l, uint32_t idx, sluice_emission_t *out) {                          \
        return FIRE(l, idx, out);                                                                                      \
    }

/* The operations every policy file defines, as static functions of these
 * names: a table is { .kind = ..., .name = ..., SLUICE__POLICY_OPS_COMMON }
 * followed by its optional operations (.flush, .quota, .reclaim, .next). */
#define SLUICE__POLICY_OPS_COMMON                                                                                      \
    .explain = explain, .setup = setup, .never_schedules = never_schedules, .call = call, .fire = fire_now,            \
    .fire_into = fire_into, .check = check

/* The limiter's kind (sluice_limiter.kind) of a rate limiter of plans: no
 * public kind, so that no short path of a call takes it for another policy. */
#define SLUICE__KIND_PLANS 7

/* Lets go of what a plans entry holds (plans.c): its quota set. */
void sluice__plans_forget(struct sluice_limiter *l, struct sluice__entry *e);

/* The registered policies, indexed by kind (NULL where no policy has the kind). */
#define SLUICE__POLICY_KINDS 5
extern const struct sluice__policy_ops *const sluice__policies[SLUICE__POLICY_KINDS];

/* The ops of a policy kind, or NULL for an unknown kind. */
static inline const struct sluice__policy_ops *sluice__policy_ops_of(int kind) {
    return kind >= 0 && kind < SLUICE__POLICY_KINDS ? sluice__policies[kind] : NULL;
}

/* floor(n / d) for n < 2^62 by a multiplication (rate's fast path). With
 * L = ceil(log2 d) and c = ceil(2^(63+L) / d) = 2^(63+L) / d + e / d
 * (0 <= e < d; c < 2^64), c * 2n / 2^(64+L) = n / d + e * n / (d * 2^(63+L)),
 * whose second term is below 2^62 / 2^(63+L) <= 1 / (2d): too small to carry
 * n / d (whose fraction is at most (d-1)/d) to the next integer. */
struct sluice__recip {
    uint64_t c;
    unsigned sh; /* L */
};

/* The reciprocal of d >= 1 (d <= 2^63). */
struct sluice__recip sluice__recip_of(uint64_t d);

static inline uint64_t sluice__recip_div(struct sluice__recip v, uint64_t n) {
    __extension__ typedef unsigned __int128 sluice__u128;
    return (uint64_t)(((sluice__u128)v.c * (n << 1)) >> 64) >> v.sh;
}

/* One GCRA quota, normalised (policy-rate.c, sluice__gcra_setup): times are
 * scaled by `limit`, exact for a fractional T = per / limit. */
struct sluice__gcra {
    uint64_t limit, burst, per;
    uint64_t t_q, t_r; /* the emission interval T = per / limit, as t_q + t_r / limit ns */
    /* the 64-bit fast path, taken at t < t_lim (0 when burst * per >= 2^61: never) */
    uint64_t bt;                             /* burst * per: burst * T scaled by limit */
    uint64_t bt_q;                           /* floor(burst * per / limit) */
    uint64_t t_lim;                          /* UINT64_MAX - 2 * bt_q - 3, or 0 */
    struct sluice__recip inv_limit, inv_per; /* floor(n / limit), floor(n / per) */
    uint64_t every;                          /* burst * T rounded up, at least 1 ms: the lazy expiry's spacing */
};

/* Totals since creation (sluice_stats_t), one plain increment each. */
struct sluice__counters {
    uint64_t decided[4];  /* by sluice_decision_kind_t: tokens emitted, scheduled or dropped at their call */
    uint64_t reported[4]; /* by sluice_event_kind_t: scheduled tokens emitted, dropped or discarded later */
    uint64_t full_refusals;
};

/* Checks a configuration: NULL when valid, else the rule it breaks, with
 * *code set to the error sluice_limiter_new() returns (policy.c). */
const char *sluice__config_check(const sluice_config_t *config, int *code);

struct sluice_limiter {
    /* What every call writes, first: in the loop layer, whose allocator
     * aligns the limiter to a cache line, these 48 bytes share one line, so
     * a call that finds the shard last used on another CPU fetches one line,
     * not two or three (2 threads on one loop limiter, 1k keys: 1.40x ->
     * 1.80x the throughput of one). Nothing read-mostly shares the line.
     *  - host_word: storage the embedding layer owns, never touched by the
     *    core (sluice__limiter_host_word): the loop layer keeps its shard
     *    lock there;
     *  - now_seen, and the decision counters (count.decided). */
    uint64_t host_word;
    uint64_t now_seen;
    struct sluice__counters count;

    /* policy, normalised by its setup() */
    const struct sluice__policy_ops *ops;
    uint8_t kind;
    bool pass_through; /* interval 0: every call emits at once, nothing is kept */
    bool leading, trailing, pick_first, has_max_wait;
    bool timerless;    /* the policy arms no timer: ops->reclaim and ops->next are set (rate) */
    uint64_t interval; /* ns */
    uint64_t max_wait; /* ns */
    /* rate: its one quota (a limiter of plans: none; plans below) */
    struct sluice__gcra rate;
    /* rate: lazy expiry (policy-rate.c) */
    uint64_t rate_lb;       /* <= every rate entry's full (UINT64_MAX: no entry) */
    uint64_t rate_every;    /* least spacing of the sweeps asked for; idle time before the creation sweep frees a key */
    uint64_t rate_last;     /* when the last complete pass ended */
    uint64_t rate_pass_min; /* the least full seen by the pass in progress (and of keys created since) */
    uint32_t rate_pass;     /* the pass in progress: next entry index */
    uint32_t rate_step;     /* the sweep after each created key: next entry index */
    /* A rate limiter of plans (plans-internal.h, policy-plans.c), else
     * NULL; the plan and detail of the call or quota read in progress. */
    struct sluice__plans *plans;
    uint32_t plan_arg;
    sluice_plan_detail_t *detail_arg;

    sluice_event_fn on_event;
    /* The callback each event kind is reported to, by sluice_event_kind_t
     * (index 0 unused): on_event, or NULL for a kind nobody is told of (no
     * on_event; DROP and DISCARD under emit_only). */
    sluice_event_fn report_fn[4];
    bool emit_only;
    void *user;
    uint64_t seed[2];
    struct sluice__u64_hash_key u64_key; /* sluice__u64_hash_key(seed) */
    uint64_t max_keys;
    uint64_t pending; /* entries holding a pending token */

    struct sluice__table table;
    struct sluice__wheel_arena arena;
    struct sluice__wheel wheel;
    struct sluice__mem mem;

    int depth;   /* nesting of public calls (callbacks re-enter) */
    bool closed; /* close() done */
    bool dying;  /* free() requested */
    /* Nonzero when a submit cannot take the short path for a live key
     * (limiter.c, submit_hot): closed, dying or pass-through. Kept by
     * sluice__gate_update() whenever one of those changes. */
    uint8_t gate;
    /* gate, plus the policy kind << 1 under emit_only for a built-in policy
     * that keeps tokens (throttle, audit, debounce): a call on an integer
     * key (sluice_limiter_submit_u64) then takes the quiet short path of
     * that kind, which reports nothing and so calls nothing (limiter.c,
     * submit_u64_quiet). Kept by sluice__gate_update() too. */
    uint8_t gate_u64;
    /* Set by the loop layer around its timer pass (sluice__limiter_defer_tidy):
     * the table's shrink and slab compaction at the end of a call are left
     * for sluice__limiter_tidy(), which the loop runs one shard at a time
     * (tidy_pending: one was skipped). */
    bool defer_tidy, tidy_pending;
};

static inline void sluice__gate_update(struct sluice_limiter *l) {
    l->gate = (uint8_t)(l->closed || l->dying || l->pass_through);
    bool quiet = l->emit_only && (l->kind == SLUICE_THROTTLE || l->kind == SLUICE_AUDIT || l->kind == SLUICE_DEBOUNCE);
    l->gate_u64 = (uint8_t)(l->gate | (quiet ? l->kind << 1 : 0));
}

/* ---- helpers for the policies (limiter.c) ---- */

static inline struct sluice__entry *sluice__entry_of(const struct sluice_limiter *l, uint32_t idx) {
    return sluice__entry_at(&l->table, idx);
}

/* Bytes of the policy after the entry (debounce's maxWait times). */
static inline void *sluice__entry_ext(struct sluice__entry *e) { return (void *)(e + 1); }

/* The interval rule shared by throttle, audit and debounce. */
static inline const char *sluice__explain_interval(const sluice_policy_t *p, int *code) {
    if (p->interval_ns < 0) {
        *code = SLUICE_EINVAL;
        return "policy.interval_ns is negative: an interval must be 0 (pass-through) or more";
    }
    if (p->interval_ns > SLUICE_DURATION_MAX) {
        *code = SLUICE_ERANGE;
        return "policy.interval_ns is above SLUICE_DURATION_MAX (10^18 ns)";
    }
    return NULL;
}

/* The interval rule, then the edge rule shared by throttle and debounce
 * (`why_no_edge`: the sentence for a policy with neither edge). */
static inline const char *sluice__explain_edges(const sluice_policy_t *p, int *code, const char *why_no_edge) {
    const char *why = sluice__explain_interval(p, code);
    if (why) return why;
    *code = SLUICE_EINVAL;
    if (!p->leading && !p->trailing) return why_no_edge;
    return NULL;
}

/* The settings every window policy (throttle, audit, debounce) keeps: its
 * interval, its edges, and an interval of 0 as pass-through. */
static inline void sluice__setup_window(struct sluice_limiter *l, const sluice_policy_t *p, bool leading,
                                        bool trailing) {
    l->interval = (uint64_t)p->interval_ns;
    l->leading = leading;
    l->trailing = trailing;
    l->pass_through = p->interval_ns == 0;
}

/* Creates the entry of an idle key (timer unarmed, nothing pending).
 * Returns 0 and its index, SLUICE_EFULL at the key cap (counted) or
 * SLUICE_ENOMEM, with nothing changed. */
static inline int sluice__limiter_add_key(struct sluice_limiter *l, const struct sluice__keyref *k, uint32_t *idx) {
    if (l->max_keys && l->table.live >= l->max_keys) {
        l->count.full_refusals++;
        return SLUICE_EFULL;
    }
    int rc = sluice__table_insert(&l->table, k, idx);
    if (rc) return rc;
    l->arena.chunks = l->table.chunks; /* the chunk table may have grown */
    sluice__wheel_node_init(&sluice__entry_at(&l->table, *idx)->node);
    return 0;
}

/* Returns a live key to idle: disarms its timer, forgets a pending token
 * (the caller has reported it) and frees the entry. Inline: every fire row
 * ends here, and a timer just popped is already disarmed, so the wheel is
 * only called when the key is still armed. */
static SLUICE__HOT_INLINE void sluice__limiter_remove_key(struct sluice_limiter *l, uint32_t idx) {
    struct sluice__entry *e = sluice__entry_at(&l->table, idx);
    if (sluice__wheel_node_armed(&e->node)) sluice__wheel_del(&l->wheel, idx);
    if (e->flags & SLUICE__F_PENDING) l->pending--;
    if (SLUICE__UNLIKELY(l->plans != NULL)) sluice__plans_forget(l, e);
    sluice__table_remove(&l->table, idx);
}

/* Marks a pending token / takes it back (pending flag and count). */
static SLUICE__HOT_INLINE void sluice__set_pending(struct sluice_limiter *l, struct sluice__entry *e, uint64_t token) {
    if (!(e->flags & SLUICE__F_PENDING)) l->pending++;
    e->flags |= SLUICE__F_PENDING;
    e->token = token;
}

/* The first call of a key opens its window [t, end): with a leading edge the
 * call is emitted now, otherwise its token waits for `end`. Throttle and
 * debounce both start this way. */
static inline void sluice__open_window(struct sluice_limiter *l, struct sluice__entry *e, uint32_t idx, uint64_t token,
                                       uint64_t t, uint64_t end, sluice_decision_t *d) {
    if (l->leading) {
        d->kind = SLUICE_EMITTED;
        d->at = t;
    } else {
        sluice__set_pending(l, e, token);
        d->kind = SLUICE_SCHEDULED;
        d->at = end;
    }
    sluice__wheel_add(&l->wheel, idx, end);
}

/* IDLE | call(t, v) of throttle and debounce: the key's entry is created
 * and its window [t, t + W) opened. Returns 0 and the entry's index, or
 * the error of sluice__limiter_add_key() with nothing changed. */
static inline int sluice__open_key(struct sluice_limiter *l, const struct sluice__keyref *k, uint64_t token, uint64_t t,
                                   sluice_decision_t *d, uint32_t *idx) {
    int rc = sluice__limiter_add_key(l, k, idx);
    if (rc) return rc;
    sluice__open_window(l, sluice__entry_of(l, *idx), *idx, token, t, sluice__sat_add(t, l->interval), d);
    return 0;
}

static inline uint64_t sluice__take_pending(struct sluice_limiter *l, struct sluice__entry *e) {
    e->flags &= (uint8_t)~SLUICE__F_PENDING;
    l->pending--;
    return e->token;
}

/* An event waiting to be reported: captured while the entry is consistent,
 * reported after. The key is copied so that it stays valid even if the
 * callback removes the key. */
struct sluice__event {
    sluice_event_t ev;
    unsigned char keybuf[SLUICE_KEY_MAX];
};

static SLUICE__HOT_INLINE void sluice__capture(struct sluice__event *pe, const struct sluice__entry *e,
                                               sluice_event_kind_t kind, uint64_t token, uint64_t at) {
    pe->ev.kind = kind;
    if (e->flags & SLUICE__KEY_U64) /* the common case inline (compilers may outline sluice__entry_key) */
        pe->ev.key = sluice_key_u64(e->key);
    else
        pe->ev.key = sluice__entry_key(e, pe->keybuf);
    pe->ev.token = token;
    pe->ev.at = at;
    pe->ev.has_successor = false;
    pe->ev.successor = 0;
}

/* A DROP of a pending token superseded by `successor` of the same key. */
static SLUICE__HOT_INLINE void sluice__capture_superseded(struct sluice__event *pe, const struct sluice__entry *e,
                                                          uint64_t token, uint64_t successor, uint64_t at) {
    sluice__capture(pe, e, SLUICE_EVENT_DROP, token, at);
    pe->ev.has_successor = true;
    pe->ev.successor = successor;
}

/* Counts and delivers a captured event (the transition is complete); an
 * event of a kind nobody is told of (report_fn) is only counted. */
static SLUICE__HOT_INLINE void sluice__report(struct sluice_limiter *l, const struct sluice__event *pe) {
    l->count.reported[pe->ev.kind & 3]++;
    sluice_event_fn fn = l->report_fn[pe->ev.kind & 3];
    if (fn) fn(l->user, &pe->ev);
}

/* A timer row's emission of entry e's pending `token` at its deadline `at`,
 * taken while the entry is consistent: written to *out when the row runs
 * for sluice_limiter_advance_into() (`out` non-NULL, a constant where the
 * row is inlined), else captured in *pe. sluice__fired_report() then
 * counts it, and reports it unless written. */
static SLUICE__HOT_INLINE void sluice__fired_capture(struct sluice__event *pe, sluice_emission_t *out,
                                                     const struct sluice__entry *e, uint64_t token, uint64_t at) {
    if (out) {
        out->key = (e->flags & SLUICE__KEY_U64) ? e->key : 0;
        out->token = token;
        out->at = at;
        return;
    }
    sluice__capture(pe, e, SLUICE_EVENT_EMIT, token, at);
}

static SLUICE__HOT_INLINE void sluice__fired_report(struct sluice_limiter *l, const struct sluice__event *pe,
                                                    const sluice_emission_t *out) {
    if (out) {
        l->count.reported[SLUICE_EVENT_EMIT]++;
        return;
    }
    sluice__report(l, pe);
}

/* The rows below: captures in *pe the DROP of entry e's pending token,
 * superseded by `successor` at t, when someone is told of drops (not under
 * emit_only); otherwise *pe is left unset. */
static SLUICE__HOT_INLINE void sluice__capture_dropped(const struct sluice_limiter *l, struct sluice__event *pe,
                                                       const struct sluice__entry *e, uint64_t successor, uint64_t t) {
    if (l->report_fn[SLUICE_EVENT_DROP]) sluice__capture_superseded(pe, e, e->token, successor, t);
}

/* Counts and reports a superseded token's DROP after a row below returned
 * true (*pe is set only when someone is told of drops). */
static SLUICE__HOT_INLINE void sluice__report_superseded(struct sluice_limiter *l, const struct sluice__event *pe) {
    l->count.reported[SLUICE_EVENT_DROP]++;
    sluice_event_fn fn = l->report_fn[SLUICE_EVENT_DROP];
    if (fn) fn(l->user, &pe->ev);
}

/* ---- the row of a call on a live key (policy-*.h) ----
 * Each policy's header defines it inline, sluice__NAME_live, for its own
 * call() and for the short path of submit (limiter.c). It brings the entry
 * to its new state and fills *d (kind and at; the caller has zeroed
 * remaining and full), and returns true when the call superseded a pending
 * token: the caller reports its DROP (sluice__report_superseded), after
 * which it may store the decision where a callback can see it. The event is
 * captured in *pe only when someone is told of drops, so a limiter under
 * emit_only builds none. The entry's deadline is after t (timers first has
 * run). (Rate's row, which reports nothing, has its own contract.) */

/* ---- entry points for a hashed key (limiter.c) ----
 * The body of sluice_limiter_submit_cost() and of
 * sluice_limiter_flush/cancel/pending() for a key already checked and hashed
 * with this limiter's seed (`kind`: SLUICE_EVENT_EMIT for flush,
 * SLUICE_EVENT_DROP for cancel, 0 for pending). The loop layer reaches them
 * through core-internal.h. */
int sluice__limiter_submit_keyref(struct sluice_limiter *l, const struct sluice__keyref *k, uint64_t token,
                                  uint64_t cost, uint64_t now, sluice_decision_t *d);
int sluice__limiter_key_op_keyref(struct sluice_limiter *l, const struct sluice__keyref *k, uint64_t now, int kind);

/* Batch hints (sluice_limiter_submit_many, the loop layer's batches): asks
 * for the key's home index slot, then (once that slot is likely in cache)
 * for the entry its slot names when the tag is the key's. Only hints: they
 * read, never change, and any table is fine. */
static inline void sluice__prefetch_slot(const struct sluice_limiter *l, const struct sluice__keyref *k) {
#if defined(__GNUC__) || defined(__clang__)
    __builtin_prefetch(&l->table.slots[sluice__home(sluice__table_tag(&l->table, k), l->table.slot_bits)]);
#else
    (void)l;
    (void)k;
#endif
}

static inline void sluice__prefetch_entry(const struct sluice_limiter *l, const struct sluice__keyref *k) {
    uint32_t tag = sluice__table_tag(&l->table, k);
    uint64_t s = l->table.slots[sluice__home(tag, l->table.slot_bits)];
    if (s != 0 && sluice__slot_tag(s) == tag && sluice__slot_idx(s) < l->table.top)
#if defined(__GNUC__) || defined(__clang__)
        __builtin_prefetch(sluice__entry_of(l, sluice__slot_idx(s)));
#else
        (void)s;
#endif
}

/* Validates and hashes a key with the limiter's seed. */
static inline int sluice__limiter_key(const struct sluice_limiter *l, sluice_key_t key, struct sluice__keyref *out) {
    return sluice__key_prepare_seeded(l->seed, key, out);
}

#if defined(__GNUC__) || defined(__clang__)
#pragma GCC visibility pop
#endif

#endif /* SLUICE_LIMITER_INTERNAL_H */
