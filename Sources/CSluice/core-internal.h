/*
 * core-internal.h — the few core internals the loop layer needs (internal).
 *
 * The loop layer (Sources/CSluiceLoop) runs several core limiters ("shards")
 * behind locks. It uses the public core API (sluice.h) plus the functions
 * below, and never a field of the core's structures: this header is the
 * whole contract between the two, so the core's internals can change freely
 * as long as these keep their meaning. They are implemented in
 * core-access.c, carry the `sluice__` prefix and hidden visibility: they are
 * not part of the shared library's interface.
 *
 * Prepared keys: the loop layer gives all its shards one hash seed, hashes a
 * key once with sluice__key_prepare(), picks the shard from the hash's low
 * bits (the core's index uses the top bits) and hands the prepared key to
 * that shard. A prepared key borrows the caller's key bytes: it is valid
 * only while they are.
 */
#ifndef SLUICE_CORE_INTERNAL_H
#define SLUICE_CORE_INTERNAL_H

#include "include/sluice.h"
#include "key-internal.h" /* sluice__pkey_t: a prepared key */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#if defined(__GNUC__) || defined(__clang__)
#pragma GCC visibility push(hidden)
#endif

/* What sluice__key_op() does to a key (see sluice.h for each). */
typedef enum sluice__key_op {
    SLUICE__OP_FLUSH = 1,  /* sluice_limiter_flush() */
    SLUICE__OP_CANCEL = 2, /* sluice_limiter_cancel() */
    SLUICE__OP_PENDING = 3 /* sluice_limiter_pending() */
} sluice__key_op_t;

/* Checks a key and hashes it with `seed`. Returns 0, SLUICE_EINVAL (bad
 * kind, NULL bytes with a length) or SLUICE_EKEYLEN. */
int sluice__key_prepare(const uint64_t seed[2], sluice_key_t key, sluice__pkey_t *out);

/* sluice__key_prepare() for an integer key given as itself: the key's hash
 * under `seed` (the integer is the prepared key's `u64`, is_u64 set), with
 * no sluice_key_t passed by value. */
uint64_t sluice__hash_u64(const uint64_t seed[2], uint64_t key);

/* The address of the fields every call on a key writes (the limiter's
 * clock and decision counters, one cache line): a prefetch hint for a
 * caller about to lock a limiter another thread may have used last. Only
 * an address: never read or written through. */
const void *sluice__limiter_hot(const sluice_limiter_t *limiter);

/* Eight bytes (8-aligned when the limiter is) in the line every call writes
 * (sluice__limiter_hot's), which the core never reads or writes: storage
 * for the embedding layer's own use. The loop layer keeps its shard lock
 * there, so that taking the lock and making the call touch one line. */
void *sluice__limiter_host_word(sluice_limiter_t *limiter);

/* Copies the hash seed a limiter uses into `seed`. A limiter created with
 * `fixed_seed` and this seed hashes every key exactly as this one does. */
void sluice__limiter_seed(const sluice_limiter_t *limiter, uint64_t seed[2]);

/* Gives a limiter that holds no key yet a new random SipHash-1-3 key for
 * its table's fallback (a limiter created with `fixed_seed` has the seed
 * itself): the loop layer creates its shards with one shared seed and then
 * draws each shard's SipHash key apart. Returns 0, SLUICE_EINVAL (a key is
 * live or the table already switched) or SLUICE_ENOMEM (no random bits). */
int sluice__limiter_redraw_strong_key(sluice_limiter_t *limiter);

/* sluice_limiter_submit_cost() for a key prepared with this limiter's seed:
 * same behaviour, results and errors (cost 1 is sluice_limiter_submit()). */
int sluice__submit_prepared(sluice_limiter_t *limiter, const sluice__pkey_t *key, uint64_t token, uint64_t cost,
                            uint64_t now, sluice_decision_t *decision);

/* sluice_limiter_flush(), _cancel() or _pending() for a key prepared with
 * this limiter's seed: same behaviour, results and errors. */
int sluice__key_op(sluice_limiter_t *limiter, const sluice__pkey_t *key, sluice__key_op_t op, uint64_t now);

/* True when the key (prepared with this limiter's seed) has state in the
 * limiter right now (a live entry). Changes nothing: no timer is run. */
bool sluice__key_is_live(const sluice_limiter_t *limiter, const sluice__pkey_t *key);

/* The latest `now` the limiter has been given: its clock. An earlier `now`
 * passed to a call counts as this one. */
uint64_t sluice__limiter_now(const sluice_limiter_t *limiter);

/* Batch hints for a key prepared with this limiter's seed: stage 0 asks
 * for the key's index slot, stage 1 (later, once that slot is likely in
 * cache) for its entry. Change nothing; any order of calls is safe. */
void sluice__prefetch_prepared(const sluice_limiter_t *limiter, const sluice__pkey_t *key, int stage);

/* The limiter's index as a prefetch hint for a caller about to lock it:
 * the address of its slots (0 with none) and the bits of a home slot's
 * number. While the index hashes with the fast hash, a prepared key's home
 * slot is base + 8 * ((hash >> 32) >> (32 - bits)); otherwise the hint
 * names some other slot, which a prefetch may ask for harmlessly. Read it
 * under the caller's lock; it changes when the index grows or shrinks. */
void sluice__limiter_index_hint(const sluice_limiter_t *limiter, uintptr_t *base, unsigned *bits);

/* Keys holding a pending value right now. */
uint64_t sluice__limiter_pending(const sluice_limiter_t *limiter);

/* At the key cap, before a refusal: frees one expired rate entry if the
 * limiter holds one (rate keys arm no timer, limiter-internal.h). Returns 1
 * or 0 (always 0 for other policies, whose due timers advance() runs). */
size_t sluice__limiter_reclaim(sluice_limiter_t *limiter, uint64_t now);

/* Keys with state (live entries) right now. */
uint64_t sluice__limiter_live(const sluice_limiter_t *limiter);

/* While `defer` is set, a call that ends with the table due to shrink its
 * index or compact its slab (keys went idle) leaves that work pending
 * instead of doing it: the loop layer sets it around its timer pass, so the
 * shards, which drain in step, do not all rehash in one pass without a
 * delivery. Returns whether such work is pending. sluice__limiter_tidy()
 * does it (outside any call into the limiter) and returns whether some was
 * pending. */
bool sluice__limiter_defer_tidy(sluice_limiter_t *limiter, bool defer);
bool sluice__limiter_tidy(sluice_limiter_t *limiter);

/* A call or quota read under a plan (sluice_plans.h), made of the calls
 * above: plan_args names the plan and the detail to fill for the next call
 * (sluice__submit_prepared or sluice_limiter_quota) after checking the
 * plan (SLUICE_ENOPLAN, SLUICE_EINVAL for a limiter that is not rate), and
 * plan_done, once that call returned `rc` with decision *d, completes the
 * detail and forgets the arguments. Both under the same lock as the call. */
int sluice__limiter_plan_args(sluice_limiter_t *limiter, uint32_t plan, sluice_plan_detail_t *detail);
void sluice__limiter_plan_done(sluice_limiter_t *limiter, int rc, const sluice_decision_t *d, uint64_t cost,
                               const sluice__pkey_t *key, sluice_plan_detail_t *detail);

/* sluice_limiter_set_plans() in two steps, for a caller that changes
 * several limiters all or nothing: prepare checks the table and builds it
 * for this limiter (0, or an error with nothing changed), then commit
 * installs it (cannot fail) or abandon frees it. */
int sluice__limiter_plans_prepare(sluice_limiter_t *limiter, const sluice_plans_t *plans, void **out);
void sluice__limiter_plans_commit(sluice_limiter_t *limiter, void *built);
void sluice__limiter_plans_abandon(sluice_limiter_t *limiter, void *built);

#if defined(__GNUC__) || defined(__clang__)
#pragma GCC visibility pop
#endif

#endif /* SLUICE_CORE_INTERNAL_H */
