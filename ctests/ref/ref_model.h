/*
 * ref_model.h — a deliberately simple reference implementation of
 * docs/semantics.md, used by the tests to check the core.
 *
 * It shares nothing with the core but the public types of sluice.h (policy,
 * key, decision and event kinds, error codes). Its design is chosen to be
 * obviously correct rather than fast:
 *  - one small struct per key holding exactly the state variables named in
 *    the spec tables (throttle/audit: state, end, pending; debounce: last,
 *    start, pending, maxDue; rate: TAT kept exactly as TAT * limit, in
 *    128 bits; a call that would push it past the end of the clock,
 *    UINT64_MAX ns, is dropped with a retry time of "never");
 *  - keys in a plain array, found by linear search with exact byte
 *    comparison (an integer key and a byte key are never the same key);
 *  - time in uint64 nanoseconds; deadlines fired by an explicit loop that
 *    repeatedly takes the smallest due deadline.
 *
 * Per-key operations (submit, flush, cancel, pending) fire only that key's
 * due deadlines first ("timers first"). A trace-level driver that wants
 * "every deadline <= t fires first" calls ref_advance(t) before each line.
 *
 * Every event produced is appended to a log (ref_events()), in the order it
 * happened. Nothing in here is linked into the library: this directory is
 * linked into every C test program.
 */
#ifndef SLUICE_REF_MODEL_H
#define SLUICE_REF_MODEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "sluice.h"

typedef struct ref_model ref_model_t;

/** One event of the reference model. `key.bytes` points at the model's own
 *  copy of the key and stays valid until ref_free(). */
typedef struct ref_event {
    sluice_event_kind_t kind;
    sluice_key_t key;
    uint64_t token;
    uint64_t at;
    bool has_successor; /* DROP: superseded by `successor`, a later token of the same key */
    uint64_t successor;
} ref_event_t;

/** Creates a model. Returns 0, or SLUICE_EINVAL / SLUICE_ERANGE for a policy
 *  the spec calls a configuration error (same rules as
 *  sluice_policy_validate()), or SLUICE_ENOMEM. */
int ref_new(ref_model_t **out, const sluice_policy_t *policy);

/** Frees the model (no events: use ref_close() first if you want them). */
void ref_free(ref_model_t *m);

/** A call: fires the key's due deadlines, then applies the call row.
 *  Returns 0, or SLUICE_EINVAL / SLUICE_EKEYLEN (bad key), SLUICE_ECLOSED. */
int ref_submit(ref_model_t *m, sluice_key_t key, uint64_t token, uint64_t now, sluice_decision_t *decision);

/** A weighted call (rate only; cost 1 is ref_submit()). Returns as
 *  ref_submit(), and SLUICE_ERANGE for a cost of 0 or above SLUICE_RATE_MAX,
 *  SLUICE_EINVAL for a cost other than 1 on another policy. Rate decisions
 *  carry `remaining` and `full` (docs/semantics.md, "Quota of a key"). */
int ref_submit_cost(ref_model_t *m, sluice_key_t key, uint64_t token, uint64_t cost, uint64_t now,
                    sluice_decision_t *decision);

/** The quota of a rate key at `now` (a peek: nothing changes, not even the
 *  model's clock). Returns 0, SLUICE_EINVAL (not rate, bad key),
 *  SLUICE_ERANGE (cost), SLUICE_EKEYLEN or SLUICE_ECLOSED. */
int ref_quota(ref_model_t *m, sluice_key_t key, uint64_t cost, uint64_t now, sluice_quota_t *out);

/** Totals as sluice_stats_t counts them: admitted, scheduled, emitted_later,
 *  dropped, discarded (the other fields are left as they are). */
void ref_totals(const ref_model_t *m, sluice_stats_t *out);

/** flush(key): 1 if a value was emitted, 0 if none was pending, or an error. */
int ref_flush(ref_model_t *m, sluice_key_t key, uint64_t now);

/** cancel(key): 1 if a value was dropped, 0 if none was pending, or an error. */
int ref_cancel(ref_model_t *m, sluice_key_t key, uint64_t now);

/** pending(key): 1 or 0, or an error. */
int ref_pending(ref_model_t *m, sluice_key_t key, uint64_t now);

/** close(drain|discard) at `now`: every deadline <= now fires first. */
int ref_close(ref_model_t *m, uint64_t now, sluice_close_mode_t mode);

/** Fires every deadline <= now of every key, in time order (ties: in the
 *  order the keys were first seen). Returns the number of timer rows
 *  applied, or SLUICE_ECLOSED. */
int64_t ref_advance(ref_model_t *m, uint64_t now);

/** The smallest armed deadline of any key (possibly already due when the
 *  caller did not advance), or UINT64_MAX. */
uint64_t ref_next_deadline(const ref_model_t *m);

/** The event log. */
size_t ref_event_count(const ref_model_t *m);
const ref_event_t *ref_events(const ref_model_t *m);
void ref_clear_events(ref_model_t *m);

/** Number of keys holding a pending value / not idle (no timers fired). */
uint64_t ref_pending_count(const ref_model_t *m);
uint64_t ref_live_count(const ref_model_t *m);

/** True once closed. */
bool ref_closed(const ref_model_t *m);

/** The time the model has reached (largest `now` seen). */
uint64_t ref_now(const ref_model_t *m);

/**
 * Re-entrancy: "A call made from inside an emit callback is handled after the
 * transition that emitted has completed". When set, the hook is called after
 * every transition that logged events (a timer row, a call row, flush,
 * cancel, close), once that transition is complete, with the range of the
 * log it produced. The hook may call any ref_* function on the model,
 * including ref_submit() (the log may grow and move meanwhile: read
 * ref_events() again after such a call).
 */
typedef void (*ref_hook_fn)(void *user, ref_model_t *m, size_t first, size_t count);
void ref_set_hook(ref_model_t *m, ref_hook_fn fn, void *user);

/** Compares two keys by the spec's identity rule (kind, then exact bytes or
 *  integer). Returns true when they are the same key. */
bool ref_key_equal(sluice_key_t a, sluice_key_t b);

/* ------------------------------------------------------------------ */
/* Several quotas per key, and plans (sluice_plans.h)                  */
/* ------------------------------------------------------------------ */
/*
 * A model of plans keeps, per key, a copy of the quotas (names and numbers)
 * it was last charged under and each one's TAT * limit, exactly; a call or a
 * quota read under other quotas converts that state by quota name (rounded
 * up to the next 1/limit ns, as sluice_plans.h says), and only an admitted
 * call stores it. ref_submit_cost() and ref_quota() use plan 0 on such a
 * model; ref_submit_plan() and ref_quota_plan() on a rate model without
 * plans accept plan 0 only (its one quota).
 */

/** Creates a rate model of plans (the table is copied; checked as
 *  sluice_plans_check() does). Returns 0, SLUICE_EINVAL or SLUICE_ERANGE. */
int ref_new_plans(ref_model_t **out, const sluice_plans_t *plans);

/** Replaces the plans (keys keep their state, converted at their next call).
 *  Returns 0, SLUICE_EINVAL (invalid table, a model without plans),
 *  SLUICE_ERANGE (numbers out of range, a plan of more quotas than the
 *  model's max_quotas, a max_quotas other than 0 or the model's) or
 *  SLUICE_ECLOSED. */
int ref_set_plans(ref_model_t *m, const sluice_plans_t *plans);

/** Number of plans (1 for a model without plans). */
int ref_plan_count(const ref_model_t *m);

/** A plan's index by name: 0, SLUICE_ENOPLAN or SLUICE_EINVAL. */
int ref_plan_index(const ref_model_t *m, const char *name, uint32_t *out);

/** A call under plan `plan`: as sluice_limiter_submit_plan(). `detail` (may
 *  be NULL) gets each quota's figures: after an admitted call its remaining
 *  and full after it and retry = the call's time; after a dropped one the
 *  figures as the key stands (converted) and the refusing quotas' bits.
 *  Returns 0, SLUICE_ENOPLAN (nothing changed), or as ref_submit_cost(). */
int ref_submit_plan(ref_model_t *m, sluice_key_t key, uint64_t token, uint64_t cost, uint32_t plan, uint64_t now,
                    sluice_decision_t *decision, sluice_plan_detail_t *detail);

/** A quota read under plan `plan` (a peek: nothing changes): overall
 *  remaining = the least, full = the latest, retry = the latest, burst = the
 *  least; `detail` (may be NULL) each quota's, with bit i of `refused` set
 *  when quota i would refuse a call of that cost now. */
int ref_quota_plan(ref_model_t *m, sluice_key_t key, uint64_t cost, uint32_t plan, uint64_t now, sluice_quota_t *out,
                   sluice_plan_detail_t *detail);

#endif /* SLUICE_REF_MODEL_H */
