/*
 * sluice_plans.h — several quotas per key, and plans: a rate limiter whose
 * keys each answer to a named list of quotas ("10 per second and 1000 per
 * hour"), chosen per call from a table of plans ("free", "pro", a
 * customer's override) that can be replaced while the limiter runs.
 *
 * Included by sluice.h; include that. The rules are docs/semantics.md,
 * "Several quotas on one key" and "Plans":
 *
 *  - A call is admitted only when every quota of its plan admits it, and
 *    then charges them all. A refused call changes nothing, in any quota.
 *  - A key remembers the quotas it was last charged under. A call or a
 *    quota read under other quotas (another plan, or the same plan after
 *    sluice_limiter_set_plans() changed it) first converts the key's state,
 *    quota by quota matched by name: the units consumed stay consumed,
 *    TAT' = t + (TAT - t) * T' / T for a TAT still ahead of t; a quota the
 *    old list lacks starts fresh, one the new list lacks is forgotten. Only
 *    an admitted call stores the conversion.
 *  - A key whose every TAT has passed holds no memory and no plan.
 *  - A quota read gives the key's overall figures (the least remaining, the
 *    latest full, the latest retry) and each quota's own.
 *
 * Exact but for conversions: times are kept scaled by each quota's limit,
 * so calls, reads and one conversion give the exact rational figures; a
 * converted time is rounded up to the next 1/limit ns when it is stored,
 * so a key converted again later carries that fraction of a nanosecond,
 * scaled by the next ratio T''/T', toward later (refusing), never earlier.
 *
 * Use
 * ---
 *     sluice_rate_quota_t free_q[] = { { "second", 1, 1000000000, 3 } };
 *     sluice_rate_quota_t pro_q[] = { { "second", 10, 1000000000, 30 },
 *                                     { "day", 10000, 86400000000000, 0 } };
 *     sluice_plan_t plans[] = { { "free", free_q, 1 }, { "pro", pro_q, 2 } };
 *     sluice_plans_t table = { plans, 2, 0 };
 *     sluice_config_t c = { .policy = sluice_rate_plans(), .plans = &table };
 *     sluice_limiter_new(&l, &c);
 *     uint32_t pro;
 *     sluice_limiter_plan_index(l, "pro", 3, &pro);
 *     sluice_limiter_submit_plan(l, key, token, 1, pro, now, &decision, &detail);
 */
#ifndef SLUICE_PLANS_H
#define SLUICE_PLANS_H

#ifndef SLUICE_H
#error "include sluice.h, not sluice_plans.h"
#endif

#ifdef __cplusplus
extern "C" {
#endif

/** Most quotas in one plan. */
#define SLUICE_PLAN_QUOTAS_MAX 8
/** Longest plan or quota name, in bytes (names are 1 to 32 characters of
 *  `A-Z a-z 0-9 _ . -`). */
#define SLUICE_PLAN_NAME_MAX 32
/** Most plans in one limiter. */
#define SLUICE_PLANS_MAX 65536

/** One quota of a plan: a GCRA rate (as sluice_rate()) with a name. */
typedef struct sluice_rate_quota {
    const char *name; /**< NUL-terminated, unique within its plan; the key of conversions */
    uint64_t limit;   /**< calls per `per_ns`, 1..SLUICE_RATE_MAX */
    int64_t per_ns;   /**< the period, 1..SLUICE_DURATION_MAX */
    uint64_t burst;   /**< calls allowed at once, 0..SLUICE_RATE_MAX (0 means `limit`) */
} sluice_rate_quota_t;

/** A plan: a named list of quotas that must all admit a call. */
typedef struct sluice_plan {
    const char *name;                  /**< NUL-terminated, unique within the table */
    const sluice_rate_quota_t *quotas; /**< 1..SLUICE_PLAN_QUOTAS_MAX quotas */
    size_t nquotas;
} sluice_plan_t;

/** A table of plans. The first plan is the default (index 0). */
typedef struct sluice_plans {
    const sluice_plan_t *plans; /**< 1..SLUICE_PLANS_MAX plans */
    size_t nplans;
    /** The most quotas a plan of this limiter may ever have, 1 to
     *  SLUICE_PLAN_QUOTAS_MAX, fixed at creation: each key's record holds
     *  this many quotas (8 bytes each), so a later
     *  sluice_limiter_set_plans() may not exceed it. A key charged under a
     *  plan with a quota whose burst * per_ns reaches 2^64 keeps its
     *  quotas in a block of its own instead (16 bytes per quota), made by
     *  its call under that plan. 0 at creation: the most quotas of any plan
     *  given; 0 in sluice_limiter_set_plans(): the limiter's. */
    size_t max_quotas;
} sluice_plans_t;

/** The policy of a limiter of plans: set sluice_config_t.plans too. */
static inline sluice_policy_t sluice_rate_plans(void) {
    sluice_policy_t p = { SLUICE_RATE, 0, false, false, SLUICE_PICK_LATEST, false, 0, 0, 0, 0 };
    return p;
}

/** Each quota's figures for one call or quota read (sluice_plan_detail_t). */
typedef struct sluice_quota_figures {
    uint64_t remaining; /**< cost-1 calls this quota would admit now (after an admitted call: after it) */
    uint64_t full;      /**< when this quota's whole burst is back, in ns */
    uint64_t retry;     /**< when a call of the asked cost would pass this quota (the call's time when
                             it would now, or did), or SLUICE_NEVER */
    uint64_t burst;     /**< the quota's burst */
    uint64_t limit;     /**< the quota's limit, for headers (`q`) */
    uint64_t per_ns;    /**< the quota's period, for headers (`w`) */
} sluice_quota_figures_t;

/** The per-quota side of a decision or a quota read. */
typedef struct sluice_plan_detail {
    uint32_t plan;    /**< the plan it was decided under (its index) */
    uint32_t nquotas; /**< quotas of that plan: the entries of `quotas` that are set */
    uint32_t refused; /**< a decision: bit i set when quota i refused the call (0 when admitted);
                           a quota read: bit i set when quota i would refuse a call of the asked cost now */
    sluice_quota_figures_t quotas[SLUICE_PLAN_QUOTAS_MAX]; /**< in the plan's order */
} sluice_plan_detail_t;

/**
 * Whether `len` bytes at `name` are a valid plan or quota name: 1 to
 * SLUICE_PLAN_NAME_MAX characters of `A-Z a-z 0-9 _ . -` (so no NUL, no
 * space, nothing that needs quoting in a header).
 *
 * @param name the bytes (need not be NUL-terminated; may be NULL when len is 0).
 * @param len their count.
 * @return true when valid.
 */
SLUICE_EXTERN bool sluice_plan_name_valid(const char *name, size_t len);

/** Size of a buffer that holds any message of sluice_plans_check(), NUL included. */
#define SLUICE_PLANS_MESSAGE_MAX 160

/**
 * Checks a table of plans without a limiter. Rules: 1..SLUICE_PLANS_MAX
 * plans; each with a valid, distinct name and 1..SLUICE_PLAN_QUOTAS_MAX
 * quotas; each quota with a valid name distinct within its plan and numbers
 * as sluice_policy_validate() requires of a rate; max_quotas at most
 * SLUICE_PLAN_QUOTAS_MAX and at least every plan's count (when not 0).
 *
 * @param plans the table.
 * @param message receives, when invalid, a sentence naming the field and the
 *        rule it breaks ("plans[1].quotas[2].name 'hour' is used twice in
 *        plan 'pro'"); may be NULL.
 * @param cap the buffer's size (SLUICE_PLANS_MESSAGE_MAX holds any message).
 * @return 0 when valid, SLUICE_EINVAL or SLUICE_ERANGE.
 */
SLUICE_EXTERN int sluice_plans_check(const sluice_plans_t *plans, char *message, size_t cap);

/**
 * A plan's index by name, for sluice_limiter_submit_plan(). Indices follow
 * the table's order and change only with sluice_limiter_set_plans().
 *
 * @param limiter a limiter of plans.
 * @param name the name's bytes (need not be NUL-terminated).
 * @param len its length.
 * @param out receives the index.
 * @return 0; SLUICE_ENOPLAN when no plan has that name; SLUICE_EINVAL (NULL
 *         pointer, a limiter without plans).
 */
SLUICE_EXTERN int sluice_limiter_plan_index(const sluice_limiter_t *limiter, const char *name, size_t len,
                                            uint32_t *out);

/**
 * A call under a plan: sluice_limiter_submit_cost() with the key's plan
 * named. `decision->at` of a drop is the overall retry: when every quota
 * would admit the call (SLUICE_NEVER when one never would); `remaining` and
 * `full` are the overall figures.
 *
 * On a limiter without plans only plan 0 is accepted and detail describes
 * its one quota. sluice_limiter_submit(), _submit_cost() and batches use
 * plan 0 on a limiter of plans.
 *
 * @param limiter a rate limiter.
 * @param key the key.
 * @param token the caller's value handle (never kept: rate decides at once).
 * @param cost 1..SLUICE_RATE_MAX.
 * @param plan the plan's index.
 * @param now the time, in ns (clamped up to the latest time seen).
 * @param decision receives the decision (may be NULL).
 * @param detail receives each quota's figures and the refusing quotas (may be NULL).
 * @return 0; SLUICE_ENOPLAN (no plan of that index: nothing changed);
 *         SLUICE_ENOMEM also when an admitted call's key needs its block
 *         (sluice_plans_t.max_quotas) and none can be had: nothing changed;
 *         otherwise as sluice_limiter_submit_cost().
 */
SLUICE_EXTERN int sluice_limiter_submit_plan(sluice_limiter_t *limiter, sluice_key_t key, uint64_t token, uint64_t cost,
                                             uint32_t plan, uint64_t now, sluice_decision_t *decision,
                                             sluice_plan_detail_t *detail);

/**
 * sluice_limiter_submit_plan() on an integer key, cost 1, without each
 * quota's figures: what sluice_limiter_submit_u64() is to
 * sluice_limiter_submit(), for servers keyed by integers (the key travels in
 * a register, not as a struct). Same decisions.
 *
 * @param limiter a limiter of plans. @param key the key's integer.
 * @param token the caller's value handle. @param plan the plan's index.
 * @param now the time in ns. @param decision receives the decision (may be NULL).
 * @return as sluice_limiter_submit_plan().
 */
SLUICE_EXTERN int sluice_limiter_submit_plan_u64(sluice_limiter_t *limiter, uint64_t key, uint64_t token, uint32_t plan,
                                                 uint64_t now, sluice_decision_t *decision);

/**
 * Reads a key's quota under a plan without changing anything (a peek: a key
 * charged under other quotas is read as converted, and stays as it was).
 * `out` gets the overall figures: remaining = the least, full = the latest,
 * retry = the latest (SLUICE_NEVER when any is), burst = the least burst.
 *
 * @param limiter a rate limiter.
 * @param key the key.
 * @param cost the cost `retry` is computed for, 1..SLUICE_RATE_MAX.
 * @param plan the plan's index.
 * @param now the time, in ns.
 * @param out receives the overall quota.
 * @param detail receives each quota's figures (may be NULL).
 * @return 0; SLUICE_ENOPLAN; otherwise as sluice_limiter_quota().
 */
SLUICE_EXTERN int sluice_limiter_quota_plan(sluice_limiter_t *limiter, sluice_key_t key, uint64_t cost, uint32_t plan,
                                            uint64_t now, sluice_quota_t *out, sluice_plan_detail_t *detail);

/**
 * Replaces a limiter's plans while it runs: add or remove plans, change a
 * quota's numbers, add or remove quotas. Keys keep their state and are
 * converted at their next call, by quota name. All or nothing: on error the
 * old plans stay.
 *
 * @param limiter a limiter created with plans.
 * @param plans the new table (copied; its max_quotas must be 0 or the limiter's).
 * @return 0; SLUICE_EINVAL or SLUICE_ERANGE (invalid table:
 *         sluice_plans_check() names why; or more quotas in a plan than the
 *         limiter's max_quotas); SLUICE_ENOMEM; SLUICE_EBUSY (from a callback);
 *         SLUICE_ECLOSED.
 */
SLUICE_EXTERN int sluice_limiter_set_plans(sluice_limiter_t *limiter, const sluice_plans_t *plans);

/**
 * The limiter's plans: how many, and the number of quotas of plan `plan`
 * and their numbers (for headers listing every quota of a key's plan).
 *
 * @param limiter a rate limiter (one without plans has one plan of one quota).
 * @param plan the plan's index.
 * @param detail receives nquotas and each quota's burst, limit and per_ns
 *        (remaining, full, retry and refused are 0); may be NULL.
 * @return the number of plans (>= 1), or SLUICE_EINVAL / SLUICE_ENOPLAN.
 */
SLUICE_EXTERN int sluice_limiter_plan_info(const sluice_limiter_t *limiter, uint32_t plan,
                                           sluice_plan_detail_t *detail);

/**
 * A plan's or a quota's name, copied, for `RateLimit-Policy` and problem
 * bodies. A limiter without plans has one plan named "default" whose one
 * quota is named "default".
 *
 * @param limiter a rate limiter.
 * @param plan the plan's index.
 * @param quota the quota's index in the plan, or -1 for the plan's own name.
 * @param buf receives the name, NUL-terminated (SLUICE_PLAN_NAME_MAX + 1 bytes hold any).
 * @param cap the buffer's size.
 * @return the name's length; SLUICE_ENOPLAN for a bad plan or quota index;
 *         SLUICE_EINVAL (NULL pointer, or a buffer too small).
 */
SLUICE_EXTERN int sluice_limiter_plan_name(const sluice_limiter_t *limiter, uint32_t plan, int quota, char *buf,
                                           size_t cap);

#ifdef __cplusplus
}
#endif

#endif /* SLUICE_PLANS_H */
