/* mt.c — the sharded thread-safe limiter (sluice_mt_*, sluice_loop.h):
 * the calls on a key, the live-key budget, close and counters. Its
 * creation and free are in lifetime.c, its timer and delivery in
 * delivery.c, its shards' upkeep in shard.c, its event queues in outbox.c
 * (see loop-internal.h for the layout).
 *
 * A call on a key hashes it once with the seed every shard shares, takes
 * the shard's lock, reserves outbox room for the events the call can
 * produce, calls the shard's core limiter through core-internal.h, publishes
 * the core's next deadline, unlocks, re-arms the loop's timer if that
 * deadline is the earliest, and delivers (or wakes the loop for) the events
 * it queued.
 *
 * Reporting flags (SLUICE_MT_REPORT_*): a submit whose token is emitted or
 * dropped at once appends that token's own event to the outbox, under the
 * same shard lock, right after the events the core call produced (room for
 * it is reserved with theirs). It then goes through the same FIFO as every
 * other event of its key, so the callback sees each key's tokens in order,
 * whichever thread called.
 *
 * Live-key cap: `max_keys` caps the keys live over all shards together. The
 * limiter counts them in `live_keys`, one atomic counter: a call on a key
 * that has no state in its shard reserves one unit there before the core may
 * create the key (refused with SLUICE_EFULL when all are taken), and after
 * every core call the shard settles its count with the core's (a key that
 * went idle gives its unit back; a reservation the call did not use is given
 * back too). At the cap, a call frees expired state in its shard, then in
 * the others (its lock released: one shard lock held at a time), before it
 * refuses (reserve_key, sweep_others). Calls on live keys, the hot path,
 * never touch the counter.
 *
 * Integer keys (sluice_mt_submit_u64, and sluice_mt_submit_with_options on
 * an integer key) are hashed here through sluice__hash_u64(), with no key
 * check to make. */
#include "loop-internal.h"

#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------ calls on a key */

/* The per-call functions below are inlined into each public call, so each
 * gets its own copy with its kind and options known: a submit does not pay
 * for the switch, the struct in memory or the time argument it lacks. */
#if defined(__GNUC__) || defined(__clang__)
#define MT_HOT static inline __attribute__((always_inline))
#else
#define MT_HOT static inline
#endif

/* What a call on a key does. */
enum call_kind { CALL_SUBMIT, CALL_FLUSH, CALL_CANCEL, CALL_PENDING };

struct call {
    enum call_kind kind;
    uint64_t token;
    uint64_t cost; /* CALL_SUBMIT */
    bool have_now; /* the caller gave the time (options' now, sluice_mt_*_at) */
    uint64_t now;
    sluice_decision_t *decision;
    uint32_t plan;                /* CALL_SUBMIT: the key's plan (sluice_plans.h) */
    sluice_plan_detail_t *detail; /* CALL_SUBMIT: each quota's figures, or NULL */
};

/* With reporting flags, the event that also reports a token emitted or
 * dropped at once, if the flags ask for it. */
static bool reported_event(unsigned report, const sluice_decision_t *d, sluice_event_kind_t *kind) {
    if (d->kind == SLUICE_EMITTED && (report & SLUICE_MT_REPORT_EMITTED)) {
        *kind = SLUICE_EVENT_EMIT;
        return true;
    }
    if (d->kind == SLUICE_DROPPED && (report & SLUICE_MT_REPORT_DROPPED)) {
        *kind = SLUICE_EVENT_DROP;
        return true;
    }
    return false;
}

/* At the cap, after the calling shard found nothing to free: frees state
 * that has expired in the other shards but still holds a unit of the
 * budget (an idle rate key not yet swept, a key whose last deadline is due
 * but that the loop has not passed yet), so that the cap counts only keys
 * that are live. Called with no shard lock held; takes the other shards'
 * locks one at a time (never two at once, so no lock order to keep), and
 * stops at the first shard that gives a unit back. Due deadlines run there
 * as the loop's pass would run them (their events queued in that shard's
 * outbox: *queued is set, and the caller delivers or wakes the loop).
 * Returns true when a unit came back. Costs a lock round per shard on a
 * refusal: off the hot path (only a new key at the cap comes here). */
#if defined(__GNUC__) || defined(__clang__)
__attribute__((noinline, cold))
#endif
static bool
sweep_others(struct sluice_mt *m, const struct shard *own, uint64_t now, bool *queued) {
    bool freed = false;
    for (unsigned i = 0; i < m->nshards && !freed; i++) {
        struct shard *o = sluice__shard_at(m, i);
        if (o == own) continue;
        uint64_t next = UINT64_MAX;
        sluice__lock(o->lk);
        if (atomic_load_explicit(&m->state, memory_order_acquire) == MT_OPEN && o->core) {
            uint64_t had = o->charged;
            size_t before = o->out.n;
            bool stalled = false;
            if (sluice__limiter_reclaim(o->core, now)) /* rate: one idle entry */
                sluice__shard_settle_keys(o);
            else
                sluice__shard_advance(m, o, now, SIZE_MAX, &stalled);
            freed = o->charged < had;
            if (o->out.n != before) *queued = true;
            next = sluice__shard_publish_next(o);
        }
        sluice__unlock(o->lk);
        if (next < atomic_load(&m->armed)) sluice__mt_arm_at(m, next);
    }
    return freed;
}

/* Takes one unit of the live-key budget, or returns false when every unit
 * is taken. */
static bool budget_take(struct sluice_mt *m) {
    uint64_t cur = atomic_load_explicit(&m->live_keys, memory_order_relaxed);
    do {
        if (cur >= m->max_keys) return false;
    } while (!atomic_compare_exchange_weak_explicit(&m->live_keys, &cur, cur + 1, memory_order_relaxed,
                                                    memory_order_relaxed));
    return true;
}

/* Before a submit that may create its key: takes a unit of the live-key
 * budget unless the key is live already. At the cap, the shard's due
 * deadlines run first (as the core does at its own cap), so the answer does
 * not depend on whether the loop happened to pass; their events take
 * outbox room, so the room for the call's own `want` events is reserved
 * again. If that frees nothing, the shard's lock is released, the other
 * shards are swept (sweep_others()), the lock is taken again and the budget
 * tried once more: a refusal means max_keys keys were live at some instant
 * of the call. *unlocked is set when the lock was released (the outbox may
 * have been delivered meanwhile, and other shards may have queued events).
 * Returns 0, SLUICE_EFULL, SLUICE_ENOMEM or SLUICE_ECLOSED (the limiter was
 * closed while the lock was released). */
static int reserve_key(struct sluice_mt *m, struct shard *s, const sluice__pkey_t *k, uint64_t now, size_t want,
                       bool *unlocked) {
    if (sluice__key_is_live(s->core, k)) return 0;
    if (!budget_take(m)) {
        bool stalled = false;
        /* rate: an idle entry of this shard, one at a time (a whole pass
         * per refusal would cost O(keys) per call of a spray) */
        if (sluice__limiter_reclaim(s->core, now))
            sluice__shard_settle_keys(s);
        else
            sluice__shard_advance(m, s, now, SIZE_MAX, &stalled);
        if (!sluice__outbox_reserve(m, &s->out, want, want * k->len)) return SLUICE_ENOMEM;
        if (sluice__key_is_live(s->core, k)) return 0;
        if (!budget_take(m)) {
            if (m->nshards > 1) {
                sluice__unlock(s->lk);
                bool freed = sweep_others(m, s, now, unlocked);
                sluice__lock(s->lk);
                *unlocked = true;
                if (atomic_load_explicit(&m->state, memory_order_acquire) != MT_OPEN) return SLUICE_ECLOSED;
                /* the shard moved meanwhile: its outbox may have been
                 * delivered (room again) and the key created by another call */
                if (!sluice__outbox_reserve(m, &s->out, want, want * k->len)) return SLUICE_ENOMEM;
                if (sluice__key_is_live(s->core, k)) return 0;
                if (freed && budget_take(m)) {
                    s->charged++;
                    return 0;
                }
            }
            s->full_refusals++;
            return SLUICE_EFULL;
        }
    }
    s->charged++;
    return 0;
}

/* Appends the event that also reports a submit's token emitted or dropped
 * at once (reporting flags), after the events of the call, so that the
 * callback sees the key's tokens in order. Off the hot path: a limiter
 * without flags never calls it. */
#if defined(__GNUC__) || defined(__clang__)
__attribute__((noinline, cold))
#endif
static void
push_reported(struct sluice_mt *m, struct shard *s, const sluice__pkey_t *k, uint64_t token, sluice_event_kind_t kind) {
    sluice_event_t ev;
    memset(&ev, 0, sizeof ev);
    ev.kind = kind;
    ev.key = k->is_u64 ? sluice_key_u64(k->u64) : sluice_key_bytes(k->bytes, k->len);
    ev.token = token;
    ev.at = sluice__limiter_now(s->core); /* the call's time, as the core clamped it */
    sluice__outbox_push(m, &s->out, &ev);
}

/* The part of a call on a key made under its shard's lock (held by the
 * caller): outbox room, the core call, the reported event, the live-key
 * count. Returns the call's result. */
MT_HOT int shard_call_locked(struct sluice_mt *m, struct shard *s, const sluice__pkey_t *k, const struct call *c,
                             uint64_t now, bool *unlocked) {
    /* A call produces at most two events, both of its own key: a due
     * emission (timers first) and a superseded value; with reporting flags a
     * submit adds a third, its own token emitted or dropped at once. */
    const size_t want = c->kind == CALL_SUBMIT && m->report ? 3 : 2;
    struct outbox *o = &s->out;
    int rc = 0;
    if ((o->cap - o->n < want || (k->len && o->capb - o->nb < want * k->len)) &&
        !sluice__outbox_reserve(m, o, want, want * k->len))
        return SLUICE_ENOMEM;
    if (k->len > s->max_keylen) s->max_keylen = k->len;
    switch (c->kind) {
    case CALL_SUBMIT: {
        /* The core writes the caller's decision directly (as
         * sluice_limiter_submit() does): no copy on the hot path. */
        sluice_decision_t local;
        sluice_decision_t *dec = c->decision ? c->decision : &local;
        /* a plan other than the default, or a detail asked for: the core's
         * plan arguments around the call (constants fold this away for a
         * plain submit) */
        bool planned = c->plan != 0 || c->detail != NULL;
        if (planned && (rc = sluice__limiter_plan_args(s->core, c->plan, c->detail)) != 0) break;
        rc = m->max_keys ? reserve_key(m, s, k, now, want, unlocked) : 0;
        if (rc == 0) rc = sluice__submit_prepared(s->core, k, c->token, c->cost, now, dec);
        if (planned) sluice__limiter_plan_done(s->core, rc, dec, c->cost, k, c->detail);
        sluice_event_kind_t kind;
        if (rc == 0 && m->report && reported_event(m->report, dec, &kind)) push_reported(m, s, k, c->token, kind);
        break;
    }
    case CALL_FLUSH: rc = sluice__key_op(s->core, k, SLUICE__OP_FLUSH, now); break;
    case CALL_CANCEL: rc = sluice__key_op(s->core, k, SLUICE__OP_CANCEL, now); break;
    case CALL_PENDING: rc = sluice__key_op(s->core, k, SLUICE__OP_PENDING, now); break;
    }
    if (m->max_keys) sluice__shard_settle_keys(s);
    return rc;
}

/* Asks for a line in a writable state, without waiting for it (x86:
 * PREFETCHW, a no-op on processors without it; elsewhere a plain write
 * prefetch). */
static inline void prefetch_w(const void *p) {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
    __asm__ volatile("prefetchw %0" : : "m"(*(const char *)p));
#elif defined(__GNUC__) || defined(__clang__)
    __builtin_prefetch(p, 1);
#else
    (void)p;
#endif
}

static inline void prefetch_r(const void *p) {
#if defined(__GNUC__) || defined(__clang__)
    __builtin_prefetch(p, 0);
#else
    (void)p;
#endif
}

/* The core's index into the shard's hint, when it moved or was resized in
 * place (under s->lk). */
static inline void publish_index(struct shard *s) {
    uintptr_t base;
    unsigned bits;
    sluice__limiter_index_hint(s->core, &base, &bits);
    if (base != atomic_load_explicit(&s->index_base, memory_order_relaxed) ||
        bits != atomic_load_explicit(&s->index_bits, memory_order_relaxed)) {
        atomic_store_explicit(&s->index_bits, bits, memory_order_relaxed);
        atomic_store_explicit(&s->index_base, base, memory_order_relaxed);
    }
}

/* A call on a prepared key (m open, checked by the caller). */
MT_HOT int key_call_prepared(struct sluice_mt *m, const sluice__pkey_t *k, const struct call *c) {
    struct shard *s = sluice__shard_at(m, (unsigned)k->hash & m->mask);
    int rc;
    /* The line every call writes, the core's clock and counters with the
     * shard's lock (s->lk, on Linux), was often last written by another
     * thread's call on this shard: ask for it now, so that it travels while
     * the clock is read rather than under the lock. With the futex lock the
     * lock word is in that line: one hint is enough. */
    prefetch_w(s->hot);
#if !defined(SLM_FUTEX_LOCK)
    prefetch_w(s->lk);
#endif
    /* The key's index slot too, by the index as the last call left it: the
     * first of a call's two dependent misses then overlaps the clock and
     * the lock, which wait for the loads before them. */
    uintptr_t base = atomic_load_explicit(&s->index_base, memory_order_relaxed);
    if (base) {
        unsigned bits = atomic_load_explicit(&s->index_bits, memory_order_relaxed);
        uint32_t tag = (uint32_t)(k->hash >> 32);
        prefetch_r((const void *)(base + 8u * (uintptr_t)(bits ? tag >> (32u - bits) : 0u)));
    }
    /* The clock is read before the lock, to keep the critical section short;
     * a time older than one the shard has seen counts as that later one. A
     * time given by the caller may not run ahead of the clock: the shard's
     * clock would move for every key of the shard. */
    uint64_t now;
    if (!c->have_now) {
        now = m->coarse ? sluice__clock_coarse() : sluice__clock_now();
    } else { /* checked against the precise clock, whichever the limiter reads */
        uint64_t clock = sluice__clock_now();
        if (c->now > clock && c->now - clock > SLUICE_MT_SUBMIT_AT_SLACK_NS) return SLUICE_ERANGE;
        now = c->now;
    }
    sluice__lock(s->lk);
    size_t before = s->out.n;
    bool unlocked = false; /* at the cap: released while other shards were swept */
    rc = shard_call_locked(m, s, k, c, now, &unlocked);
    uint64_t next = sluice__shard_publish_next(s);
    bool produced = s->out.n != before || unlocked;
    publish_index(s);
    sluice__unlock(s->lk);
    if (next < atomic_load(&m->armed)) sluice__mt_arm_at(m, next);
    if (produced) sluice__mt_deliver_or_wake(m); /* m may be gone afterwards (a free from a callback) */
    return rc;
}

MT_HOT int key_call(struct sluice_mt *m, sluice_key_t key, const struct call *c) {
    if (!m) return SLUICE_EINVAL;
    if (atomic_load_explicit(&m->state, memory_order_acquire) != MT_OPEN) return SLUICE_ECLOSED;
    sluice__pkey_t k;
    int rc = sluice__key_prepare(m->seed, key, &k);
    if (rc) return rc;
    return key_call_prepared(m, &k, c);
}

/* An integer key given as itself: no sluice_key_t by value (whose small
 * stores, read back by the callee's wider loads, stall a store forward on
 * every call) and no validation to do. */
MT_HOT int key_call_u64(struct sluice_mt *m, uint64_t key, const struct call *c) {
    if (!m) return SLUICE_EINVAL;
    if (atomic_load_explicit(&m->state, memory_order_acquire) != MT_OPEN) return SLUICE_ECLOSED;
    sluice__pkey_t k = { NULL, 0, key, true, sluice__hash_u64(m->seed, key) };
    return key_call_prepared(m, &k, c);
}

/* A batch is taken in groups of MT_BATCH_GROUP calls: every key of the
 * group is checked and hashed first, then each shard the group touches is
 * locked once and its calls are made in their order in the batch (so the
 * calls on one key, which always share a shard, keep their order), with the
 * index slots and entries of the shard's calls prefetched first. With a
 * live-key cap (shared by the shards) the calls are made in batch order, a
 * lock per run of consecutive calls on one shard. Events are delivered once,
 * after the whole batch. */
#define MT_BATCH_GROUP 64

int sluice_mt_submit_many(sluice_mt_t *m, const sluice_call_t *calls, size_t n, sluice_decision_t *decisions,
                          int *results) {
    if (!m || (n && !calls)) return SLUICE_EINVAL;
    int first = 0; /* the first error in batch order (calls are made shard by shard) */
    size_t first_at = SIZE_MAX;
    if (atomic_load_explicit(&m->state, memory_order_acquire) != MT_OPEN) {
        if (results)
            for (size_t i = 0; i < n; i++) results[i] = SLUICE_ECLOSED;
        return n ? SLUICE_ECLOSED : 0;
    }
    sluice__pkey_t k[MT_BATCH_GROUP];
    int krc[MT_BATCH_GROUP];
    unsigned shard_of[MT_BATCH_GROUP];
    bool done[MT_BATCH_GROUP];
    bool produced = false;
    uint64_t now = m->coarse ? sluice__clock_coarse() : sluice_clock_now();
    for (size_t base = 0; base < n; base += MT_BATCH_GROUP) {
        size_t g = n - base < MT_BATCH_GROUP ? n - base : MT_BATCH_GROUP;
        for (size_t j = 0; j < g; j++) {
            krc[j] = sluice__key_prepare(m->seed, calls[base + j].key, &k[j]);
            shard_of[j] = krc[j] ? 0 : (unsigned)k[j].hash & m->mask;
            done[j] = false;
        }
        for (size_t i = 0; i < g; i++) {
            if (done[i]) continue;
            if (krc[i]) {
                if (results) results[base + i] = krc[i];
                if (base + i < first_at) {
                    first = krc[i];
                    first_at = base + i;
                }
                done[i] = true;
                continue;
            }
            unsigned si = shard_of[i];
            struct shard *s = sluice__shard_at(m, si);
            /* With a live-key cap, the shards share one budget: which call
             * takes its last units depends on the order of the calls across
             * shards, so only a run of consecutive calls on this shard is
             * taken under its lock; without a cap, every call of the group
             * on this shard is. */
            size_t last = g;
            if (m->max_keys) {
                last = i + 1;
                while (last < g && !krc[last] && shard_of[last] == si) last++;
            }
            sluice__lock(s->lk);
            for (size_t j = i; j < last; j++)
                if (!done[j] && !krc[j] && shard_of[j] == si) sluice__prefetch_prepared(s->core, &k[j], 0);
            for (size_t j = i; j < last; j++)
                if (!done[j] && !krc[j] && shard_of[j] == si) sluice__prefetch_prepared(s->core, &k[j], 1);
            size_t before = s->out.n;
            bool unlocked = false;
            for (size_t j = i; j < last; j++) {
                if (done[j] || krc[j] || shard_of[j] != si) continue;
                const sluice_call_t *cl = &calls[base + j];
                struct call c = { CALL_SUBMIT, cl->token, cl->cost, false, 0, decisions ? &decisions[base + j] : NULL,
                                  0,           NULL };
                int rc = shard_call_locked(m, s, &k[j], &c, now, &unlocked);
                if (results) results[base + j] = rc;
                if (rc && base + j < first_at) {
                    first = rc;
                    first_at = base + j;
                }
                done[j] = true;
            }
            uint64_t next = sluice__shard_publish_next(s);
            if (s->out.n != before || unlocked) produced = true;
            publish_index(s);
            sluice__unlock(s->lk);
            if (next < atomic_load(&m->armed)) sluice__mt_arm_at(m, next);
        }
    }
    if (produced) sluice__mt_deliver_or_wake(m); /* m may be gone afterwards (a free from a callback) */
    return first;
}

int sluice_mt_submit(sluice_mt_t *m, sluice_key_t key, uint64_t token, sluice_decision_t *d) {
    struct call c = { CALL_SUBMIT, token, 1, false, 0, d, 0, NULL };
    return key_call(m, key, &c);
}

int sluice_mt_submit_u64(sluice_mt_t *m, uint64_t key, uint64_t token, sluice_decision_t *d) {
    struct call c = { CALL_SUBMIT, token, 1, false, 0, d, 0, NULL };
    return key_call_u64(m, key, &c);
}

/* NULL options: the defaults. */
static const sluice_mt_submit_options_t default_options;

int sluice_mt_submit_with_options(sluice_mt_t *m, sluice_key_t key, uint64_t token,
                                  const sluice_mt_submit_options_t *options, sluice_decision_t *d) {
    const sluice_mt_submit_options_t *o = options ? options : &default_options;
    struct call c = { CALL_SUBMIT, token, o->cost ? o->cost : 1, o->now != 0, o->now, d, o->plan, NULL };
    /* an integer key needs no check: the path of sluice_mt_submit_u64() */
    if (key.kind == SLUICE_KEY_U64) return key_call_u64(m, key.u64, &c);
    return key_call(m, key, &c);
}

int sluice_mt_flush(sluice_mt_t *m, sluice_key_t key) {
    struct call c = { CALL_FLUSH, 0, 0, false, 0, NULL, 0, NULL };
    return key_call(m, key, &c);
}

int sluice_mt_cancel(sluice_mt_t *m, sluice_key_t key) {
    struct call c = { CALL_CANCEL, 0, 0, false, 0, NULL, 0, NULL };
    return key_call(m, key, &c);
}

int sluice_mt_pending(sluice_mt_t *m, sluice_key_t key) {
    struct call c = { CALL_PENDING, 0, 0, false, 0, NULL, 0, NULL };
    return key_call(m, key, &c);
}

int sluice_mt_flush_at(sluice_mt_t *m, sluice_key_t key, uint64_t now) {
    struct call c = { CALL_FLUSH, 0, 0, true, now, NULL, 0, NULL };
    return key_call(m, key, &c);
}

int sluice_mt_cancel_at(sluice_mt_t *m, sluice_key_t key, uint64_t now) {
    struct call c = { CALL_CANCEL, 0, 0, true, now, NULL, 0, NULL };
    return key_call(m, key, &c);
}

int sluice_mt_pending_at(sluice_mt_t *m, sluice_key_t key, uint64_t now) {
    struct call c = { CALL_PENDING, 0, 0, true, now, NULL, 0, NULL };
    return key_call(m, key, &c);
}

int sluice_mt_submit_plan(sluice_mt_t *m, sluice_key_t key, uint64_t token, const sluice_mt_submit_options_t *options,
                          sluice_decision_t *d, sluice_plan_detail_t *detail) {
    const sluice_mt_submit_options_t *o = options ? options : &default_options;
    struct call c = { CALL_SUBMIT, token, o->cost ? o->cost : 1, o->now != 0, o->now, d, o->plan, detail };
    if (key.kind == SLUICE_KEY_U64) return key_call_u64(m, key.u64, &c);
    return key_call(m, key, &c);
}

int sluice_mt_submit_plan_u64(sluice_mt_t *m, uint64_t key, uint64_t token, uint32_t plan, sluice_decision_t *d) {
    struct call c = { CALL_SUBMIT, token, 1, false, 0, d, plan, NULL };
    return key_call_u64(m, key, &c);
}

int sluice_mt_quota(sluice_mt_t *m, sluice_key_t key, const sluice_mt_submit_options_t *options, sluice_quota_t *out) {
    return sluice_mt_quota_plan(m, key, options, out, NULL);
}

int sluice_mt_quota_plan(sluice_mt_t *m, sluice_key_t key, const sluice_mt_submit_options_t *options,
                         sluice_quota_t *out, sluice_plan_detail_t *detail) {
    const sluice_mt_submit_options_t *o = options ? options : &default_options;
    if (!m || !out) return SLUICE_EINVAL;
    if (atomic_load_explicit(&m->state, memory_order_acquire) != MT_OPEN) return SLUICE_ECLOSED;
    sluice__pkey_t k;
    int rc = sluice__key_prepare(m->seed, key, &k);
    if (rc) return rc;
    struct shard *s = sluice__shard_at(m, (unsigned)k.hash & m->mask);
    uint64_t now;
    if (!o->now) {
        now = m->coarse ? sluice__clock_coarse() : sluice_clock_now();
    } else { /* as key_call_prepared(): not ahead of the precise clock */
        uint64_t clock = sluice_clock_now();
        if (o->now > clock && o->now - clock > SLUICE_MT_SUBMIT_AT_SLACK_NS) return SLUICE_ERANGE;
        now = o->now;
    }
    sluice__lock(s->lk);
    /* A read: the shard's core hashes the key again (same seed) and changes
     * nothing, so no event, deadline or key count moves. */
    rc = sluice_limiter_quota_plan(s->core, key, o->cost ? o->cost : 1, o->plan, now, out, detail);
    sluice__unlock(s->lk);
    return rc;
}

/* ------------------------------------------------------------------ plans */

int sluice_mt_set_plans(sluice_mt_t *m, const sluice_plans_t *plans) {
    if (!m || !plans) return SLUICE_EINVAL;
    if (atomic_load(&m->state) != MT_OPEN) return SLUICE_ECLOSED;
    void *built[SLUICE_MT_SHARDS_MAX];
    int rc = 0;
    unsigned done = 0; /* shards whose table is built */
    for (unsigned i = 0; i < m->nshards; i++) sluice__lock(sluice__shard_at(m, i)->lk);
    if (atomic_load(&m->state) != MT_OPEN) rc = SLUICE_ECLOSED;
    /* every shard's table is built before any shard takes its own */
    while (rc == 0 && done < m->nshards) {
        rc = sluice__limiter_plans_prepare(sluice__shard_at(m, done)->core, plans, &built[done]);
        if (rc == 0) done++;
    }
    for (unsigned i = 0; i < done; i++) {
        sluice_limiter_t *core = sluice__shard_at(m, i)->core;
        if (rc == 0)
            sluice__limiter_plans_commit(core, built[i]);
        else
            sluice__limiter_plans_abandon(core, built[i]);
    }
    for (unsigned i = m->nshards; i-- > 0;) sluice__unlock(sluice__shard_at(m, i)->lk);
    return rc;
}

/* Every shard holds the same plans (sluice_mt_set_plans changes them all
 * under every lock): shard 0 answers, under its lock. */
int sluice_mt_plan_index(sluice_mt_t *m, const char *name, size_t len, uint32_t *out) {
    if (!m) return SLUICE_EINVAL;
    struct shard *s = sluice__shard_at(m, 0);
    sluice__lock(s->lk);
    int rc = sluice_limiter_plan_index(s->core, name, len, out);
    sluice__unlock(s->lk);
    return rc;
}

int sluice_mt_plan_info(sluice_mt_t *m, uint32_t plan, sluice_plan_detail_t *detail) {
    if (!m) return SLUICE_EINVAL;
    struct shard *s = sluice__shard_at(m, 0);
    sluice__lock(s->lk);
    int rc = sluice_limiter_plan_info(s->core, plan, detail);
    sluice__unlock(s->lk);
    return rc;
}

int sluice_mt_plan_name(sluice_mt_t *m, uint32_t plan, int quota, char *buf, size_t cap) {
    if (!m) return SLUICE_EINVAL;
    struct shard *s = sluice__shard_at(m, 0);
    sluice__lock(s->lk);
    int rc = sluice_limiter_plan_name(s->core, plan, quota, buf, cap);
    sluice__unlock(s->lk);
    return rc;
}

/* ------------------------------------------------------------------ close, counters */

int sluice_mt_close(sluice_mt_t *m, sluice_close_mode_t mode) {
    if (!m || (mode != SLUICE_CLOSE_DRAIN && mode != SLUICE_CLOSE_DISCARD)) return SLUICE_EINVAL;
    if (atomic_load(&m->state) != MT_OPEN) return SLUICE_ECLOSED;
    for (unsigned i = 0; i < m->nshards; i++) sluice__lock(sluice__shard_at(m, i)->lk);
    int rc = 0;
    bool produced = false;
    if (atomic_load(&m->state) != MT_OPEN) {
        rc = SLUICE_ECLOSED;
    } else {
        uint64_t now = sluice_clock_now();
        /* Timers first, in bounded steps with room reserved, then room for
         * one event per pending value: the close itself cannot fail. */
        for (unsigned i = 0; i < m->nshards && rc == 0; i++) {
            struct shard *s = sluice__shard_at(m, i);
            size_t before = s->out.n;
            bool stalled = false;
            while (sluice__shard_advance(m, s, now, SLM_ADVANCE_CHUNK, &stalled) == SLM_ADVANCE_CHUNK && !stalled) {
            }
            if (s->out.n != before) produced = true;
            uint64_t pend = sluice__limiter_pending(s->core);
            if (stalled || !sluice__outbox_reserve(m, &s->out, (size_t)pend, (size_t)pend * s->max_keylen))
                rc = SLUICE_ENOMEM;
        }
        if (rc == 0) {
            atomic_store(&m->state, MT_CLOSED);
            for (unsigned i = 0; i < m->nshards; i++) {
                struct shard *s = sluice__shard_at(m, i);
                size_t before = s->out.n;
                sluice_limiter_close(s->core, now, mode);
                if (s->out.n != before) produced = true;
                sluice__shard_settle_keys(s);
                sluice__shard_publish_next(s);
            }
        }
    }
    for (unsigned i = m->nshards; i-- > 0;) sluice__unlock(sluice__shard_at(m, i)->lk);
    if (produced) sluice__mt_deliver_or_wake(m);
    return rc;
}

/* Adds a shard's counters into the limiter's (live_keys apart). */
static void add_stats(sluice_stats_t *sum, const sluice_stats_t *st) {
    sum->pending += st->pending;
    sum->armed_timers += st->armed_timers;
    sum->memory_bytes += st->memory_bytes;
    if (st->max_probe > sum->max_probe) sum->max_probe = st->max_probe;
    sum->table_slots += st->table_slots;
    sum->full_refusals += st->full_refusals;
    sum->admitted += st->admitted;
    sum->scheduled += st->scheduled;
    sum->emitted_later += st->emitted_later;
    sum->dropped += st->dropped;
    sum->discarded += st->discarded;
    sum->hash_fallbacks += st->hash_fallbacks;
}

int sluice_mt_stats(sluice_mt_t *m, sluice_mt_stats_t *out) {
    if (!m || !out) return SLUICE_EINVAL;
    memset(out, 0, sizeof *out);
    /* The live keys at one instant: every shard locked at once (in order,
     * as close does), for a count that can be compared with max_keys (a sum
     * taken shard by shard could count a key that moved twice). */
    for (unsigned i = 0; i < m->nshards; i++) sluice__lock(sluice__shard_at(m, i)->lk);
    for (unsigned i = 0; i < m->nshards; i++) {
        const struct shard *s = sluice__shard_at(m, i);
        if (s->core) out->core.live_keys += sluice__limiter_live(s->core);
    }
    for (unsigned i = m->nshards; i-- > 0;) sluice__unlock(sluice__shard_at(m, i)->lk);
    for (unsigned i = 0; i < m->nshards; i++) {
        struct shard *s = sluice__shard_at(m, i);
        sluice_stats_t st;
        sluice__lock(s->lk);
        int rc = s->core ? sluice_limiter_stats(s->core, &st) : SLUICE_ECLOSED;
        out->core.memory_bytes += s->out.cap * sizeof(struct ob_rec) + s->out.capb;
        out->core.full_refusals += s->full_refusals;
        out->events_queued += s->out.n; /* counted per shard: no counter shared by the callers */
        sluice__unlock(s->lk);
        if (rc == 0) add_stats(&out->core, &st);
    }
    out->core.memory_bytes += sizeof *m + m->shards_raw_size;
    out->shards = m->nshards;
    out->timer_armed_at = atomic_load(&m->armed);
    out->wakeups = atomic_load_explicit(&m->wakeups, memory_order_relaxed);
    out->timer_arms = atomic_load_explicit(&m->arms, memory_order_relaxed);
    out->budget_passes = atomic_load_explicit(&m->budget_passes, memory_order_relaxed);
    out->events_delivered = atomic_load_explicit(&m->delivered, memory_order_relaxed);
    return 0;
}

uint64_t sluice_mt_next_deadline(sluice_mt_t *m) {
    if (!m || atomic_load(&m->state) != MT_OPEN) return UINT64_MAX;
    return sluice__mt_min_next(m);
}
