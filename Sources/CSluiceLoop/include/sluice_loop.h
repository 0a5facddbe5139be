/*
 * sluice_loop.h — Sluice on a libevent loop, callable from any thread.
 *
 * The core (sluice.h) is confined to one thread and never reads a clock.
 * This header puts it on a libevent `event_base`:
 *
 *  - a *loop binding* (sluice_loop_t) ties Sluice to an event_base: one the
 *    caller owns and runs (sluice_loop_attach()), or one Sluice creates and
 *    runs on a thread of its own (sluice_loop_start());
 *  - a *loop limiter* (sluice_mt_t) is a limiter on a binding that any
 *    thread may call. A call reads the clock itself (sluice_clock_now())
 *    and returns its decision at once; deadlines fire on the loop, and the
 *    loop thread delivers the events. How the layer works inside (shards,
 *    timer, outboxes) is in docs/loop.md.
 *
 * Events. The event callback is called outside every lock of the limiter,
 * so it may call any function of this header, sluice_mt_free() of its own
 * limiter included. While the loop runs it is called on the loop thread
 * only, never twice at once for one limiter. A call made on the loop thread
 * delivers the events it caused before it returns; a call from another
 * thread wakes the loop, which delivers them shortly after. Events of one
 * key are delivered in the order they happened. When no loop thread runs
 * (an owned loop after sluice_loop_stop()) a call delivers its events on
 * the calling thread before it returns (or another thread delivering for
 * the limiter at that moment does).
 *
 * Reporting modes. By default (flags 0) a token is reported once, as in the
 * core: a token emitted or dropped at once by the submit's decision only, a
 * scheduled token later by one event. On a thread other than the loop
 * thread, an SLUICE_EMITTED decision may then be learnt before the loop
 * delivers an older event of the same key. Callers needing strict per-key
 * order of everything emitted call from the loop thread or create the
 * limiter with SLUICE_MT_REPORT_ALL: every token is then reported exactly
 * once by the callback, in per-key order (a token emitted or dropped at
 * once by an SLUICE_EVENT_EMIT or SLUICE_EVENT_DROP whose `at` is the
 * call's time, after the other events of that call), and the decision is
 * informational: the value must not be acted on or released from it.
 * SLUICE_MT_REPORT_EMITTED and SLUICE_MT_REPORT_DROPPED select one half.
 *
 * Timers. At most `max_timers_per_pass` timer transitions are handled per
 * pass of the loop, the rest on the next pass, so I/O gets a turn. A
 * limiter with nothing armed costs no CPU. Emissions are never early and at
 * most one wheel tick late, plus the loop's wake-up: sluice_config_t.tick_ns
 * 0 means SLUICE_LOOP_TICK_DEFAULT_NS. Create bases with
 * EVENT_BASE_FLAG_PRECISE_TIMER (sluice_loop_start() does): without it
 * libevent reads a coarse clock and timers fire up to a kernel tick (often
 * 4 ms) late.
 *
 * Threads. A call from a thread other than the loop thread needs libevent's
 * locking, enabled by evthread_use_pthreads() before the base is created
 * (sluice_threads_init(); sluice_loop_start() calls it). Without it the loop
 * notices new deadlines and events only at its next wake-up, and
 * sluice_mt_free() from another thread is unsafe.
 *
 * Live-key cap. sluice_config_t.max_keys (0: none) caps the keys that have
 * state in the limiter, over all shards. The limiter never holds more, and
 * refuses a new key with SLUICE_EFULL only when max_keys keys are live or
 * being created by calls running at that moment: a key whose state has
 * expired (a due deadline not run yet, an idle rate key) never causes a
 * refusal. A refusal costs a lock round on each shard.
 *
 * Caller-given times. A call given a `now` (sluice_mt_submit_options_t.now,
 * sluice_mt_flush_at(), sluice_mt_cancel_at(), sluice_mt_pending_at()), for
 * tests and replays, takes it on sluice_clock_now()'s clock. A time later
 * than the clock read by the call plus SLUICE_MT_SUBMIT_AT_SLACK_NS is
 * refused with SLUICE_ERANGE and changes nothing (a shard has one clock for
 * all its keys, which such a time would move). A time earlier than the
 * key's shard has already seen counts as that later time.
 *
 * Tokens are accounted as in the core (sluice.h): a token whose decision is
 * SLUICE_SCHEDULED is reported later by exactly one event (emit, drop or
 * discard), including when the limiter is closed, freed, or its owned loop
 * stopped. A call that returns an error never took its token, and no event
 * mentions it.
 *
 * Errors are the negative SLUICE_E* codes of sluice.h; misuse (NULL
 * pointers, calls after close) returns an error and never crashes.
 *
 * Link with libsluice, libevent_core, libevent_pthreads and pthreads
 * (`pkg-config --libs sluice`; `sluice-core` is the core alone). This
 * header does not include libevent's: `struct event_base` is only declared.
 */
#ifndef SLUICE_LOOP_H
#define SLUICE_LOOP_H

#include "sluice.h"

/** The wheel tick of a loop limiter whose sluice_config_t.tick_ns is 0: 10 us.
 *  A deadline is delivered once the loop's clock has reached it, rounded up
 *  to this tick: never early, at most one tick (plus the loop's wake-up and
 *  delivery time) late. */
#define SLUICE_LOOP_TICK_DEFAULT_NS UINT64_C(10000)

/** How far a caller-given time may be ahead of sluice_clock_now() read by
 *  the call: 1 us. A later time is refused with SLUICE_ERANGE. */
#define SLUICE_MT_SUBMIT_AT_SLACK_NS UINT64_C(1000)

#ifdef __cplusplus
extern "C" {
#endif

struct event_base;

/* ------------------------------------------------------------------ */
/* Clock and libevent threads                                          */
/* ------------------------------------------------------------------ */

/**
 * Reads the clock of the loop layer: CLOCK_MONOTONIC, in nanoseconds. Every
 * time passed to or returned by this header's functions is on this clock.
 *
 * @return the current time in ns; never 0 (not related to wall time).
 */
SLUICE_EXTERN uint64_t sluice_clock_now(void);

/**
 * Enables libevent's pthreads locking (evthread_use_pthreads()) once per
 * process. Call it before creating an event_base that threads other than
 * its loop thread will reach through Sluice (submits that re-arm its timer
 * or wake it, sluice_mt_free() from another thread). Calling it again is
 * harmless. sluice_loop_start() calls it itself.
 *
 * @return 0, or SLUICE_ENOMEM when libevent could not set up its locks.
 */
SLUICE_EXTERN int sluice_threads_init(void);

/* ------------------------------------------------------------------ */
/* Loop bindings                                                       */
/* ------------------------------------------------------------------ */

/** A binding of Sluice to one libevent event_base (opaque). */
typedef struct sluice_loop sluice_loop_t;

/** Default bound on timer transitions handled per loop pass. */
#define SLUICE_LOOP_MAX_TIMERS_DEFAULT 4096

/** Options of a loop binding. Zero-initialise, or pass NULL for defaults. */
typedef struct sluice_loop_config {
    /** Timer transitions one limiter handles per pass of the loop; the rest
     *  is handled on the next pass, scheduled at once, so I/O gets a turn
     *  in between. 0 = SLUICE_LOOP_MAX_TIMERS_DEFAULT. */
    size_t max_timers_per_pass;
} sluice_loop_config_t;

/**
 * Binds Sluice to an event_base the caller created and runs.
 *
 * Create the base with EVENT_BASE_FLAG_PRECISE_TIMER (see the top of this
 * header for what happens without it), after sluice_threads_init() when
 * other threads will call into limiters on it. Call this function on the
 * thread that runs the base: that thread is taken as the loop thread (calls
 * made on it deliver their events before returning). The base is not owned:
 * sluice_loop_free() leaves it alone, and it must outlive the binding.
 *
 * @param out receives the binding; untouched on error.
 * @param base the caller's event base.
 * @param config options, or NULL for defaults; read only during the call.
 * @return 0, SLUICE_EINVAL (NULL out or base), or SLUICE_ENOMEM.
 */
SLUICE_EXTERN int sluice_loop_attach(sluice_loop_t **out, struct event_base *base, const sluice_loop_config_t *config);

/**
 * Creates an event_base with EVENT_BASE_FLAG_PRECISE_TIMER (after
 * sluice_threads_init()) and runs it on a thread the binding owns, until
 * sluice_loop_stop() or sluice_loop_free(). For callers without a loop of
 * their own. The loop keeps running while it has nothing to do, at no CPU
 * cost.
 *
 * @param out receives the binding; untouched on error.
 * @param config options, or NULL for defaults; read only during the call.
 * @return 0, SLUICE_EINVAL (NULL out), or SLUICE_ENOMEM (no memory, no
 *         base, or no thread could be started).
 */
SLUICE_EXTERN int sluice_loop_start(sluice_loop_t **out, const sluice_loop_config_t *config);

/**
 * The event_base of a binding: the caller's (attach) or the owned one
 * (start). Callers may add their own events to an owned base from any
 * thread; they run on the owned thread.
 *
 * @param loop the binding.
 * @return the base, or NULL when loop is NULL.
 */
SLUICE_EXTERN struct event_base *sluice_loop_base(const sluice_loop_t *loop);

/**
 * Tells whether the calling thread is the binding's loop thread: the owned
 * thread (start), or the thread that called sluice_loop_attach().
 *
 * @param loop the binding.
 * @return true on the loop thread; false otherwise or when loop is NULL.
 */
SLUICE_EXTERN bool sluice_loop_in_thread(const sluice_loop_t *loop);

/**
 * Stops an owned loop: asks its thread to leave the loop and joins it. Events
 * not delivered yet stay with their limiters; from now on every call into a
 * limiter of this loop delivers its events on the calling thread before it
 * returns, and deadlines no longer fire by themselves (pending values wait
 * for sluice_mt_flush(), sluice_mt_close() or sluice_mt_free(), which hand
 * each one back exactly once). Calling it again does nothing.
 *
 * Must not be called from the loop thread itself (that would wait for
 * itself): from there it returns SLUICE_EBUSY.
 *
 * @param loop an owned binding.
 * @return 0; SLUICE_EINVAL for NULL or an attached binding; SLUICE_EBUSY
 *         when called on the loop thread.
 */
SLUICE_EXTERN int sluice_loop_stop(sluice_loop_t *loop);

/**
 * Frees a binding. An owned loop is stopped first (as sluice_loop_stop())
 * and its base freed; an attached base is left to the caller. Every limiter
 * created on the binding must have been freed before: otherwise nothing
 * happens and SLUICE_EBUSY is returned.
 *
 * @param loop the binding, or NULL (returns 0).
 * @return 0; SLUICE_EBUSY when limiters remain, or when called on the owned
 *         loop's own thread.
 */
SLUICE_EXTERN int sluice_loop_free(sluice_loop_t *loop);

/* ------------------------------------------------------------------ */
/* Loop limiters                                                       */
/* ------------------------------------------------------------------ */

/** A limiter on a loop binding, callable from any thread (opaque). */
typedef struct sluice_mt sluice_mt_t;

/** Default number of shards of a loop limiter. */
#define SLUICE_MT_SHARDS_DEFAULT 16
/** Largest number of shards. */
#define SLUICE_MT_SHARDS_MAX 1024

/** Flags of a loop limiter (sluice_mt_options_t.flags), OR-ed: the
 *  reporting flags (see "Reporting modes" at the top of this header) and the
 *  clock. */
typedef enum sluice_mt_flag {
    /** A token emitted at once is also reported by an SLUICE_EVENT_EMIT (at
     *  the call's time), queued in order with the key's other events. */
    SLUICE_MT_REPORT_EMITTED = 1,
    /** A token dropped at once is also reported by an SLUICE_EVENT_DROP (at
     *  the call's time), queued in order with the key's other events.
     *  Without effect under `config->emit_only`, which reports no drop. */
    SLUICE_MT_REPORT_DROPPED = 2,
    /** Both: the callback reports every token exactly once, in per-key
     *  order; decisions are informational. */
    SLUICE_MT_REPORT_ALL = 3,
    /** Calls that do not give their time read CLOCK_MONOTONIC_COARSE (a few
     *  ns, no hardware counter read) instead of CLOCK_MONOTONIC (about 20-30
     *  ns on virtual machines). Its resolution is the kernel's tick (1 to
     *  10 ms, clock_getres(CLOCK_MONOTONIC_COARSE)) and it is never ahead of
     *  CLOCK_MONOTONIC, so a call is decided at a time up to one tick
     *  before the precise clock's: decisions stay exact at the time they
     *  report (`decision->now`), and a window opened by a call ends up to one
     *  tick earlier than the precise clock would have put it. For servers
     *  whose limits are far coarser than a tick (docs/semantics.md, "The
     *  clock"). Timers still fire on the precise clock. */
    SLUICE_MT_COARSE_CLOCK = 4
} sluice_mt_flag_t;

/** Most events handed to one call of a batch callback (sluice_mt_events_fn). */
#define SLUICE_MT_EVENTS_MAX 64

/**
 * A loop limiter's batch event callback (sluice_mt_options_t.on_events):
 * receives the limiter's events several at a time instead of one per call
 * of `config->on_event`, with the same guarantees (the same thread, outside
 * every lock, never two calls at once for one limiter, each key's events in
 * order). The events of one call are consecutive in delivery order: a
 * receiver that handles `events[0]`, …, `events[count - 1]` in order sees
 * exactly what `on_event` would have seen.
 *
 * @param user the configuration's `user`.
 * @param events `count` events; the array and the key bytes inside are
 *        valid only during the call.
 * @param count 1 to SLUICE_MT_EVENTS_MAX.
 */
typedef void (*sluice_mt_events_fn)(void *user, const sluice_event_t *events, size_t count);

/** Options of a loop limiter. Zero-initialise (or pass NULL) for the
 *  defaults, which are those of sluice_mt_new(). */
typedef struct sluice_mt_options {
    /** Number of shards, as sluice_mt_new()'s `nshards` (0 = default). */
    unsigned nshards;
    /** SLUICE_MT_* flags, OR-ed; 0 = decisions report immediate tokens (the
     *  default mode), and calls read the precise clock. */
    unsigned flags;
    /** NULL (the default): every event goes to `config->on_event`, one per
     *  call. Otherwise every event goes here instead, in batches of up to
     *  SLUICE_MT_EVENTS_MAX consecutive events (see sluice_mt_events_fn);
     *  the values still pending that sluice_mt_free() reports as discarded
     *  come one per call. `config->on_event` is then never called and may
     *  be NULL. */
    sluice_mt_events_fn on_events;
} sluice_mt_options_t;

/**
 * Creates a loop limiter.
 *
 * The configuration is the core's (sluice.h) with these differences:
 * `on_event` and `user` receive every event, on the loop thread (see the
 * top of this header); `start_ns` is ignored (the wheel starts at
 * sluice_clock_now()); `max_keys` is an exact cap on the keys live in all
 * shards together (0 = no cap; see "Live-key cap" above); `allocator`
 * also serves the limiter's own memory (shards and outboxes). All shards
 * share one random hash key (or `seed` when `fixed_seed`).
 *
 * @param out receives the limiter; untouched on error.
 * @param loop the binding whose loop fires the deadlines and delivers events.
 * @param config the configuration; read only during the call.
 * @param nshards number of shards: 0 for SLUICE_MT_SHARDS_DEFAULT, else
 *        rounded up to a power of two, at most SLUICE_MT_SHARDS_MAX. One
 *        shard is a single lock; a few per core spread contention.
 * @return 0; SLUICE_EINVAL or SLUICE_ERANGE for a bad configuration (as
 *         sluice_limiter_new(), also NULL loop or more shards than the
 *         maximum); SLUICE_ENOMEM.
 */
SLUICE_EXTERN int sluice_mt_new(sluice_mt_t **out, sluice_loop_t *loop, const sluice_config_t *config,
                                unsigned nshards);

/**
 * Creates a loop limiter with options: as sluice_mt_new(), plus reporting
 * flags. With SLUICE_MT_REPORT_ALL every token, including one emitted or
 * dropped at once by sluice_mt_submit(), is reported exactly once through
 * `config->on_event`, on the loop thread and in per-key order; the decision
 * returned to the caller is then informational (see the top of this
 * header).
 *
 * @param out receives the limiter; untouched on error.
 * @param loop the binding.
 * @param config the configuration (as sluice_mt_new()).
 * @param options the options, or NULL for the defaults (sluice_mt_new(out,
 *        loop, config, 0)).
 * @return as sluice_mt_new(); also SLUICE_EINVAL for an unknown flag, or a
 *         SLUICE_MT_REPORT_* flag with neither `config->on_event` nor
 *         `options->on_events`.
 */
SLUICE_EXTERN int sluice_mt_new_with_options(sluice_mt_t **out, sluice_loop_t *loop, const sluice_config_t *config,
                                             const sluice_mt_options_t *options);

/**
 * Hands a token to the limiter for a key, now, and returns the decision at
 * once. Any thread may call it.
 *
 * As sluice_limiter_submit(): deadlines of this key due now fire first, and
 * a SLUICE_SCHEDULED token is reported later by exactly one event. The
 * events this call causes are delivered as described at the top of this
 * header. Without reporting flags, on a thread other than the loop thread,
 * an SLUICE_EMITTED decision may precede an older event of the same key
 * still queued; with SLUICE_MT_REPORT_ALL the decision is informational.
 *
 * @param m the limiter.
 * @param key the key; its bytes are copied if the key becomes live.
 * @param token the caller's value handle, opaque to the limiter.
 * @param decision receives the decision (may be NULL). For SLUICE_DROPPED
 *        on a rate limiter, `at` is the earliest time a call on this key
 *        would be admitted: Retry-After.
 * @return 0; SLUICE_EINVAL (NULL limiter, bad key), SLUICE_EKEYLEN,
 *         SLUICE_EFULL, SLUICE_ENOMEM or SLUICE_ECLOSED. On error the token
 *         was not taken.
 */
SLUICE_EXTERN int sluice_mt_submit(sluice_mt_t *m, sluice_key_t key, uint64_t token, sluice_decision_t *decision);

/**
 * sluice_mt_submit(m, sluice_key_u64(key), token, decision), with the same
 * results, events and errors, for an integer key passed as itself: the
 * cheapest call for integer keys.
 *
 * @param m the limiter.
 * @param key the integer key.
 * @param token the caller's value handle.
 * @param decision receives the decision (may be NULL).
 * @return as sluice_mt_submit().
 */
SLUICE_EXTERN int sluice_mt_submit_u64(sluice_mt_t *m, uint64_t key, uint64_t token, sluice_decision_t *decision);

/** Options of one call on a key (sluice_mt_submit_with_options(),
 *  sluice_mt_quota()). Zero-initialise, or pass NULL, for the defaults: a
 *  call of cost 1, now, on the key's only plan. */
typedef struct sluice_mt_submit_options {
    /** The units the call weighs, 1 to SLUICE_RATE_MAX (only 1 for policies
     *  other than rate); 0 means 1. A rate call is admitted whole or not at
     *  all; a cost above the burst is dropped with `decision->at` ==
     *  SLUICE_NEVER. */
    uint64_t cost;
    /** 0: the call reads sluice_clock_now() (which never returns 0).
     *  Otherwise the time of the call on that clock, under the rule of
     *  "Caller-given times" (top of this header): at most the clock read by
     *  the call plus SLUICE_MT_SUBMIT_AT_SLACK_NS, else SLUICE_ERANGE. */
    uint64_t now;
    /** The key's plan, by index (sluice_mt_plan_index()): 0, the default,
     *  on a limiter without plans (sluice_plans.h). */
    uint32_t plan;
} sluice_mt_submit_options_t;

/**
 * sluice_mt_submit() with options: a weighted call (sluice_limiter_submit_cost()
 * on the key's shard), a caller-given time, the time of the decision.
 * With NULL options, it is sluice_mt_submit().
 *
 * @param m the limiter.
 * @param key the key.
 * @param token the caller's value handle.
 * @param options the options, or NULL; read only during the call.
 * @param decision receives the decision (may be NULL); an admitted rate
 *        call's carries `remaining` and `full`.
 * @return as sluice_mt_submit(); SLUICE_ERANGE for a cost above
 *         SLUICE_RATE_MAX or a `now` ahead of the clock; SLUICE_EINVAL for a
 *         cost other than 1 on a policy that is not rate; SLUICE_ENOPLAN
 *         for a plan index the limiter lacks. On error the token was not
 *         taken.
 */
SLUICE_EXTERN int sluice_mt_submit_with_options(sluice_mt_t *m, sluice_key_t key, uint64_t token,
                                                const sluice_mt_submit_options_t *options, sluice_decision_t *decision);

/**
 * Hands a batch of calls to the limiter, now: for each call i in order, what
 * sluice_mt_submit_with_options() with calls[i].cost does (a cost of 0 is
 * refused with SLUICE_ERANGE here), all at one reading of the clock and with
 * one lock per shard per group of calls. Each key sees exactly the sequence
 * of single calls; calls on different keys may be made, and their events
 * delivered, in another interleaving. With `max_keys` the same calls get
 * SLUICE_EFULL as with single calls. The batch's events are delivered as
 * for sluice_mt_submit(), once after the last call; with reporting flags,
 * each key's events still come in the order of its tokens.
 *
 * @param m the limiter.
 * @param calls the calls, in order (may be NULL when n is 0).
 * @param n how many calls.
 * @param decisions receives each call's decision (n entries; may be NULL).
 * @param results receives each call's return value (n entries; may be NULL).
 * @return 0 when every call returned 0, otherwise the first nonzero result
 *         in batch order; SLUICE_EINVAL with no call made for a NULL limiter
 *         or NULL calls with n > 0; SLUICE_ECLOSED for every call of a
 *         closed limiter.
 */
SLUICE_EXTERN int sluice_mt_submit_many(sluice_mt_t *m, const sluice_call_t *calls, size_t n,
                                        sluice_decision_t *decisions, int *results);

/**
 * Reads a rate key's quota without changing anything: sluice_limiter_quota()
 * (sluice.h) on the key's shard, for the call the options describe. For a
 * `RateLimit` header or a Retry-After before the call is made.
 *
 * @param m a loop limiter with a rate policy.
 * @param key the key.
 * @param options the cost to compute `retry` for, the time of the read (as
 *        for sluice_mt_submit_with_options()), or NULL for cost 1, now.
 * @param out receives the quota (`out->now`: the time it was read at); times
 *        are on sluice_clock_now()'s clock.
 * @return 0; SLUICE_EINVAL (NULL pointer, bad key, not a rate policy);
 *         SLUICE_ENOPLAN (a plan index the limiter lacks); SLUICE_ERANGE (cost, or a `now` ahead of the
 *         clock); SLUICE_EKEYLEN; SLUICE_ECLOSED.
 */
SLUICE_EXTERN int sluice_mt_quota(sluice_mt_t *m, sluice_key_t key, const sluice_mt_submit_options_t *options,
                                  sluice_quota_t *out);

/**
 * sluice_mt_submit_with_options() that also reports each quota of the
 * call's plan: sluice_limiter_submit_plan() (sluice_plans.h) on the key's
 * shard.
 *
 * @param m a rate limiter.
 * @param key the key.
 * @param token the caller's value handle.
 * @param options cost, time and plan, or NULL for cost 1, now, plan 0.
 * @param decision receives the overall decision (may be NULL).
 * @param detail receives each quota's figures and the refusing quotas (may be NULL).
 * @return as sluice_mt_submit_with_options(); SLUICE_ENOPLAN for a plan
 *         index the limiter does not have.
 */
SLUICE_EXTERN int sluice_mt_submit_plan(sluice_mt_t *m, sluice_key_t key, uint64_t token,
                                        const sluice_mt_submit_options_t *options, sluice_decision_t *decision,
                                        sluice_plan_detail_t *detail);

/**
 * sluice_mt_submit_plan() on an integer key, cost 1, now, without each
 * quota's figures: what sluice_mt_submit_u64() is to sluice_mt_submit(),
 * for servers keyed by integers.
 *
 * @param m a rate limiter of plans. @param key the key's integer.
 * @param token the caller's value handle. @param plan the plan's index.
 * @param decision receives the decision (may be NULL).
 * @return as sluice_mt_submit_plan().
 */
SLUICE_EXTERN int sluice_mt_submit_plan_u64(sluice_mt_t *m, uint64_t key, uint64_t token, uint32_t plan,
                                            sluice_decision_t *decision);

/**
 * sluice_mt_quota() that also reports each quota of the plan:
 * sluice_limiter_quota_plan() on the key's shard.
 *
 * @return as sluice_mt_quota(); SLUICE_ENOPLAN for an unknown plan index.
 */
SLUICE_EXTERN int sluice_mt_quota_plan(sluice_mt_t *m, sluice_key_t key, const sluice_mt_submit_options_t *options,
                                       sluice_quota_t *out, sluice_plan_detail_t *detail);

/**
 * Replaces the plans of a limiter created with plans, in every shard, while
 * calls go on: sluice_limiter_set_plans(). All or nothing: the new table is
 * checked and built for every shard before any shard takes it; a call sees
 * either the old plans or the new ones.
 *
 * @return 0; SLUICE_EINVAL / SLUICE_ERANGE (sluice_plans_check() says why);
 *         SLUICE_ENOMEM; SLUICE_ECLOSED.
 */
SLUICE_EXTERN int sluice_mt_set_plans(sluice_mt_t *m, const sluice_plans_t *plans);

/** sluice_limiter_plan_index() on the limiter's plans. */
SLUICE_EXTERN int sluice_mt_plan_index(sluice_mt_t *m, const char *name, size_t len, uint32_t *out);

/** sluice_limiter_plan_info() on the limiter's plans: returns the number of plans. */
SLUICE_EXTERN int sluice_mt_plan_info(sluice_mt_t *m, uint32_t plan, sluice_plan_detail_t *detail);

/** sluice_limiter_plan_name() on the limiter's plans. */
SLUICE_EXTERN int sluice_mt_plan_name(sluice_mt_t *m, uint32_t plan, int quota, char *buf, size_t cap);

/**
 * Emits the key's pending value now (an SLUICE_EVENT_EMIT, delivered as for
 * sluice_mt_submit()) and returns the key to idle with its timer disarmed.
 * For rate, does nothing.
 *
 * @param m the limiter.
 * @param key the key.
 * @return 1 if a value was emitted, 0 if none was pending, or SLUICE_EINVAL,
 *         SLUICE_EKEYLEN, SLUICE_ENOMEM, SLUICE_ECLOSED.
 */
SLUICE_EXTERN int sluice_mt_flush(sluice_mt_t *m, sluice_key_t key);

/**
 * Drops the key's pending value now (an SLUICE_EVENT_DROP) and returns the
 * key to idle, timer disarmed. For rate, forgets the key's history (a fresh
 * quota).
 *
 * @param m the limiter.
 * @param key the key.
 * @return 1 if a value was dropped, 0 if none was pending, or an error as
 *         for sluice_mt_flush().
 */
SLUICE_EXTERN int sluice_mt_cancel(sluice_mt_t *m, sluice_key_t key);

/**
 * Tells whether a value of the key waits to be emitted later.
 *
 * @param m the limiter.
 * @param key the key.
 * @return 1 or 0, or an error as for sluice_mt_flush().
 */
SLUICE_EXTERN int sluice_mt_pending(sluice_mt_t *m, sluice_key_t key);

/**
 * sluice_mt_flush(), sluice_mt_cancel() and sluice_mt_pending() at a time
 * given by the caller, under the rule of "Caller-given times" (top of this
 * header); deadlines due by then fire first, as for any call. For replays
 * whose every step happens at its own instant (sluice-trace --realtime).
 *
 * @param m the limiter.
 * @param key the key.
 * @param now the time of the call, at most sluice_clock_now() +
 *        SLUICE_MT_SUBMIT_AT_SLACK_NS.
 * @return as the call without `now`, and SLUICE_ERANGE for a `now` ahead of
 *         the clock (nothing done).
 */
SLUICE_EXTERN int sluice_mt_flush_at(sluice_mt_t *m, sluice_key_t key, uint64_t now);
SLUICE_EXTERN int sluice_mt_cancel_at(sluice_mt_t *m, sluice_key_t key, uint64_t now);
SLUICE_EXTERN int sluice_mt_pending_at(sluice_mt_t *m, sluice_key_t key, uint64_t now);

/**
 * Closes the limiter while the loop runs: deadlines due now fire first,
 * then every pending value is emitted (drain) or handed back as
 * SLUICE_EVENT_DISCARD (discard); later calls fail with SLUICE_ECLOSED. The
 * events are delivered as for sluice_mt_submit() (on the loop thread; before
 * returning when called there). Any thread may call it, including the
 * event callback. The memory is released by sluice_mt_free().
 *
 * @param m the limiter.
 * @param mode SLUICE_CLOSE_DRAIN or SLUICE_CLOSE_DISCARD.
 * @return 0; SLUICE_EINVAL; SLUICE_ECLOSED if already closed; SLUICE_ENOMEM
 *         when room for the events could not be found (nothing was closed:
 *         try again, or free, which cannot fail).
 */
SLUICE_EXTERN int sluice_mt_close(sluice_mt_t *m, sluice_close_mode_t mode);

/**
 * Frees the limiter. One not closed is first closed with discard. Every
 * event not delivered yet, and every discard, is delivered before the
 * memory is released:
 *  - called from inside the limiter's own event callback, the free is
 *    deferred until that callback returns; the remaining events are then
 *    delivered on the loop thread (the callback may see a few more events
 *    after it asked for the free) and the limiter is released there;
 *  - called from another place, it first waits for a callback of this
 *    limiter running on the loop thread to return and stops the loop from
 *    calling it again, then delivers the remaining events on the calling
 *    thread and releases the limiter before returning.
 * From the call on, other calls into the limiter fail with SLUICE_ECLOSED;
 * as for any free, no other thread may be using the limiter when it is
 * released. A free from another thread than the loop thread needs libevent
 * locking (sluice_threads_init() before the base was created).
 *
 * @param m the limiter, or NULL (nothing happens).
 */
SLUICE_EXTERN void sluice_mt_free(sluice_mt_t *m);

/** Counters of a loop limiter. */
typedef struct sluice_mt_stats {
    /** The shards' counters, each summed over the shards when read
     *  (max_probe: the largest): live_keys, pending, the totals admitted,
     *  scheduled, emitted_later, dropped and discarded, and full_refusals
     *  (new keys refused because of max_keys, over all shards). */
    sluice_stats_t core;
    uint64_t shards;           /**< number of shards */
    uint64_t timer_armed_at;   /**< the time (ns) the loop timer is armed for; UINT64_MAX: not armed */
    uint64_t wakeups;          /**< passes of the loop callback (timer fired or woken) */
    uint64_t timer_arms;       /**< times the libevent timer was (re-)armed */
    uint64_t budget_passes;    /**< passes that stopped at max_timers_per_pass */
    uint64_t events_delivered; /**< events handed to the callback */
    uint64_t events_queued;    /**< events waiting in outboxes to be delivered */
} sluice_mt_stats_t;

/**
 * Reads the limiter's counters. `core.live_keys` is one instant's count
 * (every shard's lock is taken at once, briefly), never above max_keys; the
 * other sums take each shard's lock in turn, so they are not one instant's
 * snapshot while other threads are calling. O(shards).
 *
 * @param m the limiter.
 * @param out receives the counters.
 * @return 0 or SLUICE_EINVAL.
 */
SLUICE_EXTERN int sluice_mt_stats(sluice_mt_t *m, sluice_mt_stats_t *out);

/**
 * The earliest time at which the limiter has timer work, over all shards:
 * a lower bound as sluice_limiter_next_deadline() (a wake-up there may find
 * nothing due).
 *
 * @param m the limiter.
 * @return a time in ns, or UINT64_MAX when no timer is armed, the limiter is
 *         closed, or m is NULL.
 */
SLUICE_EXTERN uint64_t sluice_mt_next_deadline(sluice_mt_t *m);

#ifdef __cplusplus
}
#endif

#endif /* SLUICE_LOOP_H */
