/*
 * sluice.h — keyed throttle / audit / debounce / rate limiter core.
 *
 * A limiter keeps one small state machine per key (docs/semantics.md
 * describes them) and does its timing on a hierarchical hashed timer wheel. The core never reads a clock:
 * every entry point takes `now`, a count of nanoseconds on a monotonic clock
 * chosen by the caller. Values never enter the core: the caller hands in an
 * opaque 64-bit token and learns the fate of every token exactly once.
 *
 * Token accounting (the "nothing lost" rule):
 *  - sluice_limiter_submit() returns a decision for its own token. When the
 *    decision is SLUICE_EMITTED or SLUICE_DROPPED the token is the caller's
 *    again at once and is never mentioned by the limiter afterwards.
 *  - When the decision is SLUICE_SCHEDULED the limiter holds the token and
 *    reports it later through the event callback exactly once: as
 *    SLUICE_EVENT_EMIT, SLUICE_EVENT_DROP (superseded or cancelled) or
 *    SLUICE_EVENT_DISCARD (pending at close(discard) or at free).
 *  - When a function returns an error, the token was not taken.
 *
 * Threads: a limiter is not thread-safe; it is confined to one thread at a
 * time (the loop layer adds locking and a libevent binding on top).
 *
 * Re-entrancy: the event callback may call any function of this header on
 * the same limiter, including sluice_limiter_close() and
 * sluice_limiter_free(). A call made from a callback is handled after the
 * transition that produced the event has completed, and it respects the
 * window like any other call. A free requested from a callback is carried
 * out when the outermost call returns.
 *
 * Errors: functions return 0 (or a non-negative result) on success and a
 * negative SLUICE_E* code on failure; sluice_strerror() describes a code.
 * Misuse (NULL pointers, bad sizes, calls after close) returns an error and
 * never crashes.
 */
#ifndef SLUICE_H
#define SLUICE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "sluice_errors.h"

#ifdef __cplusplus
extern "C" {
#endif

#if defined(_WIN32)
#define SLUICE_EXTERN
#elif defined(__GNUC__) || defined(__clang__)
#define SLUICE_EXTERN __attribute__((visibility("default")))
#else
#define SLUICE_EXTERN
#endif

/** Library version as "MAJOR.MINOR.PATCH". */
#define SLUICE_VERSION_STRING "0.1.0"
#define SLUICE_VERSION_MAJOR 0
#define SLUICE_VERSION_MINOR 1
#define SLUICE_VERSION_PATCH 0

/* ------------------------------------------------------------------ */
/* Errors                                                              */
/* ------------------------------------------------------------------ */

/** Error codes, built from the one list in sluice_errors.h (name, value,
 *  message). Values follow Linux errno numbers, negated, so they read
 *  familiarly, but they are Sluice's own constants on every platform:
 *  SLUICE_OK 0, SLUICE_ENOMEM (an allocation failed; nothing changed),
 *  SLUICE_EBUSY (not allowed while a callback runs), SLUICE_EINVAL (invalid
 *  argument or configuration), SLUICE_EFULL (the live-key cap is reached; the
 *  new key was refused), SLUICE_ERANGE (a number is out of its documented
 *  range), SLUICE_EKEYLEN (key longer than SLUICE_KEY_MAX bytes),
 *  SLUICE_ECLOSED (the limiter is closed), SLUICE_ECORRUPT
 *  (sluice_limiter_check() found a broken invariant). */
enum sluice_error {
#define SLUICE_X(name, value, message) SLUICE_##name = value,
    SLUICE_ERROR_LIST(SLUICE_X)
#undef SLUICE_X
};

/**
 * Returns the library version string, for example "0.1.0".
 *
 * @return a static NUL-terminated string; never NULL.
 */
SLUICE_EXTERN const char *sluice_version(void);

/**
 * Describes an error code returned by any Sluice function.
 *
 * @param err a value returned by a Sluice function (0 or a SLUICE_E* code).
 * @return a static NUL-terminated English sentence; unknown codes give
 *         "unknown error". Never NULL.
 */
SLUICE_EXTERN const char *sluice_strerror(int err);

/**
 * Counts the error codes (SLUICE_OK included), for bindings that check their
 * own list of codes against the library's.
 *
 * @return the number of codes in sluice_errors.h.
 */
SLUICE_EXTERN size_t sluice_error_count(void);

/**
 * Returns the i-th error code of sluice_errors.h, in the order listed there
 * (SLUICE_OK first).
 *
 * @param i an index below sluice_error_count().
 * @return the code (0 or a negative SLUICE_E* value), or 1 (not a code) for
 *         an index out of range.
 */
SLUICE_EXTERN int sluice_error_code(size_t i);

/* ------------------------------------------------------------------ */
/* Keys                                                                */
/* ------------------------------------------------------------------ */

/** Longest byte-string key, in bytes. Longer keys fail with SLUICE_EKEYLEN. */
#define SLUICE_KEY_MAX 1024

/** Kinds of key. An integer key and a byte key are never the same key, even
 *  when their bytes agree. */
typedef enum sluice_key_kind {
    SLUICE_KEY_BYTES = 0, /**< `bytes`/`len`: any bytes, zero bytes allowed, length 0..SLUICE_KEY_MAX */
    SLUICE_KEY_U64 = 1    /**< `u64`: a 64-bit integer (fast path, never allocates) */
} sluice_key_kind_t;

/** A key, passed by value. Build one with sluice_key_u64() or
 *  sluice_key_bytes(). The bytes are copied when the limiter keeps the key. */
typedef struct sluice_key {
    sluice_key_kind_t kind;
    const void *bytes; /**< SLUICE_KEY_BYTES: the bytes (may be NULL when len is 0) */
    size_t len;        /**< SLUICE_KEY_BYTES: their length */
    uint64_t u64;      /**< SLUICE_KEY_U64: the integer */
} sluice_key_t;

/** An integer key. */
static inline sluice_key_t sluice_key_u64(uint64_t k) {
    sluice_key_t key = { SLUICE_KEY_U64, NULL, 0, k };
    return key;
}

/** A byte-string key (not copied until the limiter keeps it). */
static inline sluice_key_t sluice_key_bytes(const void *bytes, size_t len) {
    sluice_key_t key = { SLUICE_KEY_BYTES, bytes, len, 0 };
    return key;
}

/* ------------------------------------------------------------------ */
/* Policies                                                            */
/* ------------------------------------------------------------------ */

/** The policy of a limiter; every key of a limiter follows the same one. */
typedef enum sluice_policy_kind {
    SLUICE_THROTTLE = 1, /**< emissions of a key at least `interval` apart */
    SLUICE_AUDIT = 2,    /**< trailing-only; the window is opened by a call */
    SLUICE_DEBOUNCE = 3, /**< emit after `interval` of quiet (optionally maxWait) */
    SLUICE_RATE = 4      /**< GCRA: at most `limit` per `per`, bursts up to `burst` */
} sluice_policy_kind_t;

/** Which value a throttle keeps when a window already holds one. */
typedef enum sluice_pick {
    SLUICE_PICK_LATEST = 0, /**< the newer value replaces the pending one (the old is dropped) */
    SLUICE_PICK_FIRST = 1   /**< the pending value stays; the newer one is dropped */
} sluice_pick_t;

/** Largest interval, maxWait or per accepted, in nanoseconds (about 31.7 years). */
#define SLUICE_DURATION_MAX INT64_C(1000000000000000000)
/** Largest rate `limit` and `burst`. */
#define SLUICE_RATE_MAX UINT64_C(1000000000000)

/**
 * A policy configuration. Fill it with one of the helpers below
 * (sluice_throttle(), sluice_audit(), sluice_debounce(), sluice_rate()),
 * which apply the defaults of the spec, then adjust fields if needed.
 * sluice_limiter_new() validates it.
 */
typedef struct sluice_policy {
    sluice_policy_kind_t kind;
    int64_t interval_ns; /**< throttle, audit, debounce: the window or wait; 0 = pass-through */
    bool leading;        /**< throttle (default true), debounce (default false) */
    bool trailing;       /**< throttle (default true), debounce (default true) */
    sluice_pick_t pick;  /**< throttle: which value a window keeps (default latest) */
    bool has_max_wait;   /**< debounce: whether max_wait_ns applies */
    int64_t max_wait_ns; /**< debounce: longest delay of a pending value; >= interval */
    uint64_t limit;      /**< rate: calls per `per_ns`, >= 1 */
    int64_t per_ns;      /**< rate: the period, >= 1 */
    uint64_t burst;      /**< rate: calls allowed at once, >= 1 (0 means `limit`) */
} sluice_policy_t;

/** A throttle policy. @param interval_ns window @param leading emit the call that opens a window
 *  @param trailing emit the kept value when the window ends @param pick which value a window keeps
 *  @return the policy (validated by sluice_limiter_new()). */
static inline sluice_policy_t sluice_throttle(int64_t interval_ns, bool leading, bool trailing, sluice_pick_t pick) {
    sluice_policy_t p = { SLUICE_THROTTLE, interval_ns, leading, trailing, pick, false, 0, 0, 0, 0 };
    return p;
}

/** An audit policy (trailing-only, window opened by a call). @param interval_ns window
 *  @return the policy. */
static inline sluice_policy_t sluice_audit(int64_t interval_ns) {
    sluice_policy_t p = { SLUICE_AUDIT, interval_ns, false, true, SLUICE_PICK_LATEST, false, 0, 0, 0, 0 };
    return p;
}

/** A debounce policy. @param interval_ns quiet time @param leading emit the first call of a burst
 *  @param trailing emit the last value after the quiet time @param max_wait_ns longest delay of a
 *  pending value, or a negative number for none @return the policy. */
static inline sluice_policy_t sluice_debounce(int64_t interval_ns, bool leading, bool trailing, int64_t max_wait_ns) {
    sluice_policy_t p = { SLUICE_DEBOUNCE,
                          interval_ns,
                          leading,
                          trailing,
                          SLUICE_PICK_LATEST,
                          max_wait_ns >= 0,
                          max_wait_ns >= 0 ? max_wait_ns : 0,
                          0,
                          0,
                          0 };
    return p;
}

/** A GCRA rate policy. @param limit calls per period @param per_ns the period
 *  @param burst calls allowed at once (0 for `limit`) @return the policy. */
static inline sluice_policy_t sluice_rate(uint64_t limit, int64_t per_ns, uint64_t burst) {
    sluice_policy_t p = { SLUICE_RATE, 0, false, false, SLUICE_PICK_LATEST, false, 0, limit, per_ns, burst };
    return p;
}

/**
 * Checks a policy without creating a limiter. sluice_config_explain() gives
 * the broken rule as a sentence.
 *
 * @param policy the configuration to check.
 * @return 0 when valid; SLUICE_EINVAL for a negative interval, maxWait below
 *         the interval, a throttle or debounce with neither edge, a rate with
 *         limit, per or burst below 1, or an unknown kind; SLUICE_ERANGE for a
 *         duration above SLUICE_DURATION_MAX or a limit or burst above
 *         SLUICE_RATE_MAX.
 */
SLUICE_EXTERN int sluice_policy_validate(const sluice_policy_t *policy);

/* ------------------------------------------------------------------ */
/* Events and decisions                                                */
/* ------------------------------------------------------------------ */

/** What happened to a token the limiter held. */
typedef enum sluice_event_kind {
    SLUICE_EVENT_EMIT = 1,   /**< the value is emitted: do the work now */
    SLUICE_EVENT_DROP = 2,   /**< the value will never be emitted (superseded or cancelled) */
    SLUICE_EVENT_DISCARD = 3 /**< the value was pending at close(discard) or free */
} sluice_event_kind_t;

/** One event. Pointers inside are valid only during the callback. */
typedef struct sluice_event {
    sluice_event_kind_t kind;
    sluice_key_t key;   /**< the key (its bytes are the limiter's copy) */
    uint64_t token;     /**< the caller's token */
    uint64_t at;        /**< when it happened by the spec, in ns: the deadline for a timer emission,
                            otherwise the `now` of the call that caused it */
    bool has_successor; /**< SLUICE_EVENT_DROP only: true when the token was superseded by another
                             token of the same key (pick latest, audit, debounce trailing) */
    uint64_t successor; /**< when has_successor: the token that took this one's place */
} sluice_event_t;

/** The event callback. Runs on the thread that called into the limiter. */
typedef void (*sluice_event_fn)(void *user, const sluice_event_t *event);

/** The fate of a submitted token. */
typedef enum sluice_decision_kind {
    SLUICE_EMITTED = 1,   /**< emitted now: the caller does the work; the token is not kept */
    SLUICE_SCHEDULED = 2, /**< kept; reported later by exactly one event */
    SLUICE_DROPPED = 3    /**< not emitted and not kept */
} sluice_decision_kind_t;

/** The decision returned by sluice_limiter_submit(). */
typedef struct sluice_decision {
    sluice_decision_kind_t kind;
    /** SLUICE_EMITTED: `now`. SLUICE_SCHEDULED: the time it will be emitted
     *  unless superseded, flushed or cancelled first. SLUICE_DROPPED: for rate,
     *  the earliest time a call on this key would be admitted (for
     *  Retry-After); for the other policies, the end of the window or wait
     *  that suppressed the call. For a rate call whose cost exceeds the burst
     *  (it can never be admitted) `at` is SLUICE_NEVER; so it is for a call
     *  that would push the key's quota past the end of the clock (UINT64_MAX
     *  ns), which only absurd periods or times near 2^64 ns can reach. */
    uint64_t at;
    /** Rate, SLUICE_EMITTED: how many cost-1 calls would still be admitted
     *  now, right after this call counted (for a `RateLimit` header's `r`).
     *  0 otherwise. */
    uint64_t remaining;
    /** Rate, SLUICE_EMITTED: when the key's whole burst is available again,
     *  in ns (for a `RateLimit` header's `t`). Rate, SLUICE_DROPPED: the same
     *  for the key as it stands (the drop changed nothing). 0 for the other
     *  policies. */
    uint64_t full;
    /** The time the call was decided at, in ns: the `now` passed, or the
     *  later time the limiter had already seen (a limiter's time never goes
     *  back). `at - now` is a drop's Retry-After without a second reading
     *  of the clock. */
    uint64_t now;
} sluice_decision_t;

/** A time that never comes: the retry time of a rate call whose cost exceeds the burst. */
#define SLUICE_NEVER UINT64_MAX

/** The quota of a rate key at a time, read by sluice_limiter_quota() without changing it. */
typedef struct sluice_quota {
    uint64_t burst;     /**< the policy's burst: the most cost-1 calls admitted at once */
    uint64_t remaining; /**< cost-1 calls that would be admitted now, one after another (0..burst) */
    uint64_t full;      /**< when the whole burst is available again, in ns (`now` when it already is) */
    uint64_t retry;     /**< the earliest time a call of the asked cost would be admitted, in ns
                             (`now` when it would be now), or SLUICE_NEVER when the cost exceeds the burst
                             (or the call would end past the end of the clock, UINT64_MAX ns) */
    uint64_t now;       /**< the time the quota was read at: the `now` passed, or the later time the
                             limiter had already seen */
} sluice_quota_t;

/* ------------------------------------------------------------------ */
/* Allocation                                                          */
/* ------------------------------------------------------------------ */

/** An allocator. Every allocation of a limiter goes through it, so tests
 *  can make allocations fail. Both functions must be set, or the struct
 *  pointer left NULL for malloc/free. */
typedef struct sluice_allocator {
    void *(*alloc)(void *ctx, size_t size);             /**< return NULL on failure */
    void (*release)(void *ctx, void *ptr, size_t size); /**< ptr may be NULL */
    void *ctx;
} sluice_allocator_t;

/* ------------------------------------------------------------------ */
/* Limiter                                                             */
/* ------------------------------------------------------------------ */

/** An opaque limiter. */
typedef struct sluice_limiter sluice_limiter_t;

/** Default wheel tick: 1 ms. */
#define SLUICE_TICK_DEFAULT_NS UINT64_C(1000000)
/** Largest wheel tick accepted: 1 s. */
#define SLUICE_TICK_MAX_NS UINT64_C(1000000000)

/** Limiter configuration. Zero-initialise, then set `policy` and what you need. */
typedef struct sluice_config {
    sluice_policy_t policy;              /**< required */
    uint64_t tick_ns;                    /**< wheel resolution; 0 = SLUICE_TICK_DEFAULT_NS, at most
                                     SLUICE_TICK_MAX_NS (1 s). Timer emissions happen at most one
                                     tick after their deadline, never before. */
    uint64_t max_keys;                   /**< cap on live keys; 0 = no cap. A new key past the cap fails
                                     with SLUICE_EFULL; live keys are never evicted. */
    uint64_t start_ns;                   /**< the clock's value at creation (the wheel's origin) */
    sluice_event_fn on_event;            /**< required when the policy can keep a token for later; may be
                                     NULL only for rate, a pass-through (interval 0), or a throttle
                                     or debounce without trailing edge, whose calls are all decided
                                     at once */
    void *user;                          /**< passed to on_event */
    const sluice_allocator_t *allocator; /**< NULL = malloc/free; copied */
    /** Report emissions only: on_event is called for SLUICE_EVENT_EMIT and
     *  never for SLUICE_EVENT_DROP or SLUICE_EVENT_DISCARD. Tokens superseded,
     *  cancelled or discarded at close are still counted in sluice_stats_t
     *  (`dropped`, `discarded`) but not reported. For tokens that own nothing
     *  (integers, indices into the caller's own array), where a token never
     *  emitted needs no clean-up: the short path of a call on a live key then
     *  builds no event at all. on_event stays required under the same rules.
     *  false (the default): every event is reported. */
    bool emit_only;
    bool fixed_seed;  /**< tests only: use `seed` instead of a random hash key (then also
                                     as the SipHash fallback's key, for repeatable runs) */
    uint64_t seed[2]; /**< the hash key when fixed_seed */
    /** A rate limiter of several quotas per key and plans (sluice_plans.h):
     *  the table (copied), with `policy` = sluice_rate_plans(). NULL: the
     *  one quota of `policy`. */
    const struct sluice_plans *plans;
} sluice_config_t;

/**
 * Creates a limiter.
 *
 * Keys are placed with a fast hash keyed with 128 random bits drawn for
 * this limiter (getrandom). Should keys chosen to collide under it make one
 * probe sequence long (a key placed 1024 slots past its home), the
 * key index switches for good to SipHash-1-3 under 128 other random bits
 * (so that learning the fast hash's key gives nothing of SipHash's), and
 * such keys cannot flood it (sluice_stats_t.hash_fallbacks counts the
 * switch).
 *
 * @param out receives the limiter; untouched on error.
 * @param config the configuration; read only during the call.
 * @return 0, SLUICE_EINVAL or SLUICE_ERANGE for a bad configuration (see
 *         sluice_policy_validate(); also a NULL pointer, a tick above
 *         SLUICE_TICK_MAX_NS, an allocator with a NULL function, or a NULL
 *         on_event for a policy that can keep tokens; sluice_config_explain()
 *         says which rule), or SLUICE_ENOMEM.
 */
SLUICE_EXTERN int sluice_limiter_new(sluice_limiter_t **out, const sluice_config_t *config);

/**
 * Explains why sluice_limiter_new() would refuse a configuration, naming the
 * field and the rule, for example "policy.max_wait_ns is below
 * policy.interval_ns: a debounce maxWait must be at least its interval".
 * Every rule of sluice_policy_validate() and sluice_limiter_new() has its
 * sentence.
 *
 * @param config the configuration (may be NULL: that is a broken rule too).
 * @return NULL when the configuration is valid, otherwise a static
 *         NUL-terminated English sentence (for a rule of `plans`, one the
 *         calling thread's next call may overwrite).
 */
SLUICE_EXTERN const char *sluice_config_explain(const sluice_config_t *config);

/**
 * Frees a limiter and everything it holds. A limiter that was not closed is
 * first closed with discard at the latest time it has seen: deadlines due
 * then fire first (as SLUICE_EVENT_EMIT), and every token still pending is
 * reported as SLUICE_EVENT_DISCARD. Called from inside the limiter's own callback, the
 * free is deferred until the outermost call into the limiter returns; until
 * then further calls fail with SLUICE_ECLOSED.
 *
 * @param limiter the limiter, or NULL (nothing happens).
 */
SLUICE_EXTERN void sluice_limiter_free(sluice_limiter_t *limiter);

/**
 * Hands a token to the limiter for a key at time `now`.
 *
 * Timers first: deadlines of this key that are due at `now` fire before the
 * call is handled, so the result does not depend on whether
 * sluice_limiter_advance() ran first. A `now` earlier than a time the
 * limiter has already seen is treated as that later time.
 *
 * @param limiter the limiter.
 * @param key the key; its bytes are copied if the key becomes live.
 * @param token the caller's value handle, opaque to the limiter.
 * @param now current time in ns.
 * @param decision receives the decision (may be NULL).
 * @return 0 on success; SLUICE_EINVAL (NULL limiter, bad key), SLUICE_EKEYLEN,
 *         SLUICE_EFULL (a new key while max_keys keys are live, after the
 *         timers due at `now` have run), SLUICE_ENOMEM or
 *         SLUICE_ECLOSED. On error the token was not taken.
 */
SLUICE_EXTERN int sluice_limiter_submit(sluice_limiter_t *limiter, sluice_key_t key, uint64_t token, uint64_t now,
                                        sluice_decision_t *decision);

/**
 * Hands a weighted call to a rate limiter: like sluice_limiter_submit(), but
 * the call counts `cost` units of the quota (bytes, rows, a batch of n). It is
 * admitted whole or not at all. A cost above the burst is not an error: the
 * call is dropped and `decision->at` is SLUICE_NEVER. A dropped call changes
 * nothing. The decision of an admitted call carries `remaining` and `full`;
 * that of a dropped call the retry time for its cost in `at`.
 *
 * @param limiter the limiter.
 * @param key the key.
 * @param token the caller's value handle.
 * @param cost the units this call weighs: 1 to SLUICE_RATE_MAX. For policies
 *        other than rate only 1 is accepted.
 * @param now current time in ns.
 * @param decision receives the decision (may be NULL).
 * @return as sluice_limiter_submit(), and SLUICE_ERANGE for a cost of 0 or
 *         above SLUICE_RATE_MAX, SLUICE_EINVAL for a cost other than 1 on a
 *         policy that is not rate.
 */
SLUICE_EXTERN int sluice_limiter_submit_cost(sluice_limiter_t *limiter, sluice_key_t key, uint64_t token, uint64_t cost,
                                             uint64_t now, sluice_decision_t *decision);

/**
 * Hands a token to the limiter for an integer key: exactly
 * sluice_limiter_submit(limiter, sluice_key_u64(key), token, now, decision),
 * the same key, state, decision and events, without building and passing
 * the 32-byte sluice_key_t (the cheapest call for integer keys).
 *
 * @param limiter the limiter.
 * @param key the integer key (the same key as sluice_key_u64(key)).
 * @param token the caller's value handle, opaque to the limiter.
 * @param now current time in ns.
 * @param decision receives the decision (may be NULL).
 * @return as sluice_limiter_submit().
 */
SLUICE_EXTERN int sluice_limiter_submit_u64(sluice_limiter_t *limiter, uint64_t key, uint64_t token, uint64_t now,
                                            sluice_decision_t *decision);

/** One call of a batch handed to sluice_limiter_submit_many(). */
typedef struct sluice_call {
    sluice_key_t key; /**< the key (its bytes are copied if the key becomes live) */
    uint64_t token;   /**< the caller's value handle, opaque to the limiter */
    uint64_t cost;    /**< the units the call weighs, as for sluice_limiter_submit_cost():
                           1 for an unweighted call (0 is refused with SLUICE_ERANGE, as a
                           single call would be) */
} sluice_call_t;

/**
 * Hands a batch of calls to the limiter, all at time `now`: the result is
 * exactly that of sluice_limiter_submit_cost(limiter, calls[i].key,
 * calls[i].token, calls[i].cost, now, &decisions[i]) for i = 0, 1, ..., n - 1
 * in that order (the same key may appear several times; each call sees the
 * state the previous ones left, and every event is reported at the same
 * point of the sequence as it would be by single calls).
 *
 * The batch is faster than single calls at many keys: every key of a group
 * is hashed first and the index slots and entries it will touch are
 * prefetched ahead of their use, so the cache misses of different keys
 * overlap instead of following one another.
 *
 * Progress is visible to callbacks: `decisions[i]` and `results[i]` are
 * stored as soon as call i has returned and before call i + 1 starts (an
 * event callback that runs during call i + 1 finds call i's decision and
 * result written, and those of the later calls untouched). A callback may
 * re-enter the limiter as between single calls; one that closes it makes the
 * remaining calls fail with SLUICE_ECLOSED, and one that frees it has the
 * free carried out when the batch returns (the remaining calls fail with
 * SLUICE_ECLOSED).
 *
 * @param limiter the limiter.
 * @param calls the calls, in order (may be NULL when n is 0).
 * @param n how many calls.
 * @param now the time of every call, in ns (treated as the latest time the
 *        limiter has seen if earlier).
 * @param decisions receives each call's decision (n entries; may be NULL).
 * @param results receives each call's return value, as the single call
 *        would have returned it (n entries; may be NULL).
 * @return 0 when every call returned 0; otherwise the first nonzero result
 *         (the other calls were still made). SLUICE_EINVAL, with no call
 *         made, for a NULL limiter or NULL calls with n > 0.
 */
SLUICE_EXTERN int sluice_limiter_submit_many(sluice_limiter_t *limiter, const sluice_call_t *calls, size_t n,
                                             uint64_t now, sluice_decision_t *decisions, int *results);

/**
 * Reads a rate key's quota at `now` without changing anything (a peek: a key
 * with no state gets none). See sluice_quota_t; times round toward "later".
 *
 * @param limiter a rate limiter.
 * @param key the key.
 * @param cost the cost to compute `retry` for (1 for a plain call), 1 to SLUICE_RATE_MAX.
 * @param now current time in ns.
 * @param out receives the quota.
 * @return 0, SLUICE_EINVAL (NULL pointer, bad key, not a rate policy),
 *         SLUICE_ERANGE (cost), SLUICE_EKEYLEN or SLUICE_ECLOSED.
 */
SLUICE_EXTERN int sluice_limiter_quota(sluice_limiter_t *limiter, sluice_key_t key, uint64_t cost, uint64_t now,
                                       sluice_quota_t *out);

/**
 * Emits the key's pending value now (as an SLUICE_EVENT_EMIT at `now`) and
 * returns the key to idle with its timer disarmed: the next call is a
 * leading edge. A key with nothing pending also returns to idle. For rate,
 * flush does nothing.
 *
 * @param limiter the limiter.
 * @param key the key.
 * @param now current time in ns (due timers of the key fire first).
 * @return 1 if a value was emitted, 0 if none was pending, or SLUICE_EINVAL,
 *         SLUICE_EKEYLEN, SLUICE_ECLOSED.
 */
SLUICE_EXTERN int sluice_limiter_flush(sluice_limiter_t *limiter, sluice_key_t key, uint64_t now);

/**
 * Drops the key's pending value (as an SLUICE_EVENT_DROP at `now`) and
 * returns the key to idle, timer disarmed. For rate, forgets the key's
 * history: the key has a fresh quota.
 *
 * @param limiter the limiter.
 * @param key the key.
 * @param now current time in ns (due timers of the key fire first).
 * @return 1 if a value was dropped, 0 if none was pending, or an error as
 *         for sluice_limiter_flush().
 */
SLUICE_EXTERN int sluice_limiter_cancel(sluice_limiter_t *limiter, sluice_key_t key, uint64_t now);

/**
 * Tells whether a value of the key waits to be emitted later. An open window
 * with nothing pending is not pending; rate keys are never pending.
 *
 * @param limiter the limiter.
 * @param key the key.
 * @param now current time in ns (due timers of the key fire first).
 * @return 1 or 0, or an error as for sluice_limiter_flush().
 */
SLUICE_EXTERN int sluice_limiter_pending(sluice_limiter_t *limiter, sluice_key_t key, uint64_t now);

/** How sluice_limiter_close() treats pending values. */
typedef enum sluice_close_mode {
    SLUICE_CLOSE_DRAIN = 1,  /**< emit every pending value now */
    SLUICE_CLOSE_DISCARD = 2 /**< hand every pending value back as SLUICE_EVENT_DISCARD */
} sluice_close_mode_t;

/**
 * Closes the limiter: deadlines due at `now` fire first, then every pending
 * value is emitted (drain) or discarded (discard), every key returns to
 * idle, and later calls fail with SLUICE_ECLOSED. The memory is released by
 * sluice_limiter_free().
 *
 * @param limiter the limiter.
 * @param now current time in ns.
 * @param mode SLUICE_CLOSE_DRAIN or SLUICE_CLOSE_DISCARD.
 * @return 0, SLUICE_EINVAL, or SLUICE_ECLOSED if already closed.
 */
SLUICE_EXTERN int sluice_limiter_close(sluice_limiter_t *limiter, uint64_t now, sluice_close_mode_t mode);

/**
 * Fires the deadlines the wheel has reached at `now`: every deadline up to
 * `now` rounded down to a multiple of the tick (a deadline inside the current
 * tick waits for the next one: never early, at most one tick late; each
 * event still carries its exact deadline). Per-key calls and close() fire a
 * key's due deadlines exactly, whatever the tick. Cost: O(occupied wheel
 * slots + timers handled), whatever the time jump. At most `max_timers` timer transitions
 * are handled (0 = no bound); the rest stay due and are handled by the next
 * call, so a huge batch cannot starve an event loop.
 *
 * A rate limiter has no timers (its keys expire lazily): advance() frees
 * the memory of every rate key idle at `now` (its quota full again) and
 * returns how many; O(1) when none can be idle, else a pass over the keys,
 * which sluice_limiter_next_deadline() asks for at most once per
 * max(burst * per / limit, 1 ms).
 *
 * @param limiter the limiter.
 * @param now current time in ns; an earlier time than already seen is clamped.
 * @param max_timers bound on timer transitions for this call, 0 for none.
 * @return the number of timer transitions handled (>= 0), or SLUICE_EINVAL,
 *         SLUICE_ECLOSED.
 */
SLUICE_EXTERN int64_t sluice_limiter_advance(sluice_limiter_t *limiter, uint64_t now, size_t max_timers);

/** A token emitted by a timer, written by sluice_limiter_advance_into():
 *  what the SLUICE_EVENT_EMIT event of the callback path carries, without
 *  the key's bytes. */
typedef struct sluice_emission {
    uint64_t key;   /**< the key's integer for an integer key; 0 for a byte-string key (its bytes may
                         be freed by the time the call returns: find a byte key through its token) */
    uint64_t token; /**< the caller's token, emitted */
    uint64_t at;    /**< its deadline, in ns (the event's `at`) */
} sluice_emission_t;

/**
 * Advances like sluice_limiter_advance(), but writes the emissions of the
 * timers it fires into `out`, in order, instead of reporting each one to
 * on_event: no callback runs during this call (nothing can re-enter the
 * limiter), and the per-event call and event copy of the callback path are
 * saved, for a caller that collects the emissions of a fire anyway (a
 * binding handing them to another language or thread).
 *
 * A timer fires at most one token, and the call handles timers only while
 * the array has room: it returns when `capacity` emissions are written,
 * when `max_timers` timers are handled, or when nothing more is due at
 * `now`. Nothing is lost: timers not handled stay due, exactly as after a
 * bounded sluice_limiter_advance() (sluice_limiter_next_deadline() gives a
 * time already reached), and are handled by the next call, or by a per-key
 * call on their key, which fires them first through on_event as always.
 * Apart from where they are reported, the result is exactly that of
 * sluice_limiter_advance() with the same bound: the same timers handled in
 * the same order, the same emissions (`out[i]` is the i-th SLUICE_EVENT_EMIT
 * on_event would have received, `key` aside for byte keys), the same state
 * and counters (each emission counts in `emitted_later`). Timers report
 * only emissions (drops and discards come from calls, flush, cancel and
 * close), so nothing else is reported, whatever `emit_only`. A rate
 * limiter, which has no timers, frees its idle keys as advance() does and
 * writes nothing.
 *
 * @param limiter the limiter.
 * @param now current time in ns; an earlier time than already seen is clamped.
 * @param max_timers bound on timer transitions for this call, 0 for none
 *        (as for sluice_limiter_advance()).
 * @param out receives the emissions, out[0] to out[*count - 1].
 * @param capacity the entries of `out`, at least 1.
 * @param count receives the number of emissions written (also on error: 0).
 * @return the number of timer transitions handled (>= *count; more timers
 *         may be due when *count == capacity or the result == max_timers),
 *         or SLUICE_EINVAL (NULL limiter, out or count, capacity 0),
 *         SLUICE_ECLOSED.
 */
SLUICE_EXTERN int64_t sluice_limiter_advance_into(sluice_limiter_t *limiter, uint64_t now, size_t max_timers,
                                                  sluice_emission_t *out, size_t capacity, size_t *count);

/**
 * The time at which sluice_limiter_advance() next has work: never later than
 * the earliest deadline rounded up to a multiple of the tick (so advancing to
 * it fires that deadline), possibly earlier (after a cancel, or at a wheel
 * level change), in which case advancing there finds nothing and the next
 * call gives a later time. While a bounded advance left due timers, it is a
 * time already reached. O(1).
 *
 * @param limiter the limiter.
 * @return a time in ns, or UINT64_MAX when no timer is armed (or on NULL).
 */
SLUICE_EXTERN uint64_t sluice_limiter_next_deadline(const sluice_limiter_t *limiter);

/** Counters of a limiter. */
typedef struct sluice_stats {
    uint64_t live_keys;     /**< keys not idle (rate: keys holding memory, which includes idle
                                  keys not yet reclaimed: see sluice_limiter_advance()) */
    uint64_t pending;       /**< keys holding a pending token */
    uint64_t armed_timers;  /**< timers on the wheel */
    uint64_t memory_bytes;  /**< bytes allocated by this limiter */
    uint64_t max_probe;     /**< longest probe sequence in the key index right now (kept as a
                                  histogram of probe lengths, so reading it is O(1)) */
    uint64_t table_slots;   /**< size of the key index */
    uint64_t full_refusals; /**< new keys refused because of max_keys */
    /* Totals since creation, for servers to graph. Every token handed in is
     * counted once in `admitted` or `scheduled`, and once again, if scheduled,
     * in exactly one of `emitted_later`, `dropped` or `discarded`; a token
     * dropped at its call counts in `dropped` only. */
    uint64_t admitted;      /**< calls emitted at once (SLUICE_EMITTED) */
    uint64_t scheduled;     /**< calls kept for later (SLUICE_SCHEDULED) */
    uint64_t emitted_later; /**< scheduled tokens emitted later (timer, flush, drain) */
    uint64_t dropped;       /**< tokens dropped: at their call, superseded, or cancelled */
    uint64_t discarded;     /**< tokens handed back by close(discard) or free */
    /** Key indexes that switched from the fast hash to SipHash-1-3 because a
     *  probe sequence grew past its bound (1,024 slots): 1 or 0 for a
     *  limiter, the number of shards for a loop limiter. Random keys
     *  essentially never do this; a non-zero value is a sign of keys crafted
     *  to collide, which the switch has defeated (docs/reliability.md). */
    uint64_t hash_fallbacks;
} sluice_stats_t;

/**
 * Reads the limiter's counters. O(1) (a bounded histogram scan for
 * max_probe; O(index size) only while some key sits 255 or more slots from
 * its home, which the random hash key makes practically impossible).
 *
 * @param limiter the limiter.
 * @param out receives the counters.
 * @return 0 or SLUICE_EINVAL.
 */
SLUICE_EXTERN int sluice_limiter_stats(const sluice_limiter_t *limiter, sluice_stats_t *out);

/**
 * Checks every internal invariant (key index, entries, timer wheel, counters)
 * and returns at the first broken one. Meant for tests: O(keys + wheel).
 *
 * @param limiter the limiter.
 * @return 0, or SLUICE_ECORRUPT (a description is written to stderr), or SLUICE_EINVAL.
 */
SLUICE_EXTERN int sluice_limiter_check(const sluice_limiter_t *limiter);

#ifdef __cplusplus
}
#endif

#include "sluice_plans.h"

#endif /* SLUICE_H */
