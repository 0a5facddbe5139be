/*
 * sluice_trace.h — the one parser and runner of Sluice conformance traces.
 *
 * A trace is a plain-text script of calls against one limiter policy; the
 * format (version 3) is described in docs/trace-format.md and the behaviour
 * it checks in docs/semantics.md. This library is the only implementation of
 * the format in the project: the `sluice-trace` tool (tools/sluice-trace),
 * the Swift `sluice simulate` command and the Swift conformance tests all
 * call it, so every layer reads a trace the same way and prints the same
 * bytes.
 *
 * Use
 * ---
 *     sluice_trace_t *t;
 *     sluice_trace_error_t err;
 *     if (sluice_trace_parse(text, len, &t, &err) != SLUICE_OK) {
 *         fprintf(stderr, "%s\n", err.message);   // "error: line N: REASON"
 *         ...
 *     }
 *     sluice_trace_run_options_t opt = { .on_output = my_fn, .user = my_ctx };
 *     sluice_trace_run_result_t res;
 *     int rc = sluice_trace_run(t, &opt, &res);   // manual clock, exact
 *     sluice_trace_free(t);
 *
 * my_fn receives every output line once, in order, both as fields and as
 * the exact text the tool prints (sluice_trace_output_t).
 *
 * Dependencies: parsing, sluice_trace_run() and sluice_trace_print_answers()
 * need only the core (sluice.h): no event loop, no threads.
 * sluice_trace_run_realtime() uses the loop layer and libevent.
 *
 * Threads: a parsed trace is never changed after sluice_trace_parse();
 * several threads may read or run the same trace at once. A run keeps all of
 * its state to itself and calls on_output on the calling thread.
 *
 * Parsing rules, as implemented
 * -----------------------------
 *  - Lines end in "\n" or "\r\n"; a last line without a newline is fine. A
 *    carriage return anywhere else is a bad character.
 *  - `#` anywhere starts a comment that runs to the end of the line. A comment
 *    may hold any byte except NUL (so UTF-8 prose is fine); the rest of a line
 *    may hold only printable ASCII (0x21..0x7E), spaces and tabs.
 *  - Fields are separated by one or more spaces or tabs; leading and
 *    trailing blanks are ignored; a line with no field is ignored.
 *  - Words (`policy`, policy kinds, verbs, option names, true/false, ...) are
 *    lowercase and exact.
 *  - Numbers are decimal digits only: no sign, no `+`, no `_`, no exponent.
 *    Leading zeros are accepted (`007` is 7). Parsing never overflows: a
 *    number above its maximum is "number too large", however many digits it
 *    has. A number written with a leading `-` followed by digits is reported
 *    as "negative NAME" (for example "negative interval", "negative time").
 *  - A KEY is at most SLUICE_KEY_MAX (1024) bytes ("key too long"); it is
 *    passed to the core as a byte key (sluice_key_bytes()).
 *
 * Grammar: the lines before the first step are the header. It is one
 * policy line, or (format v3, rate only) several rate lines with name=,
 * or `plan NAME` lines each followed by its rate lines:
 *     policy throttle interval=MS [leading=BOOL] [trailing=BOOL] [pick=latest|first]
 *     policy audit    interval=MS
 *     policy debounce interval=MS [leading=BOOL] [trailing=BOOL] [maxwait=MS]
 *     policy rate     limit=N per=MS [burst=B] [name=NAME]
 *     plan NAME
 * Options come in any order, each at most once. Defaults (docs/semantics.md):
 * throttle leading=true trailing=true pick=latest; debounce leading=false
 * trailing=true, no maxwait; rate burst=limit. Every other line is one of
 *     TIME call KEY VALUE [cost=N] [plan=NAME]  (rate only: cost= v2, plan= v3)
 *     TIME quota KEY [cost=N] [plan=NAME]       (rate only, format v2: a peek)
 *     TIME cancel KEY | TIME flush KEY | TIME pending KEY
 *     TIME close drain|discard          (must be the last line)
 * `cost=N` and `plan=NAME` come after VALUE (call) or KEY (quota), in
 * either order; the cost is 1 and the plan the first when absent. NAME is 1
 * to 32 characters of A-Z a-z 0-9 _ . -; at most 8 quotas per plan, 64
 * plans; several quotas outside plan lines form one plan named "default"
 * (a lone quota is named "default").
 *
 * Limits: TIME <= SLUICE_TRACE_TIME_MAX_MS (10^13 ms); interval, maxwait,
 * per <= SLUICE_TRACE_DURATION_MAX_MS (10^12 ms); limit, burst and cost in
 * 1..SLUICE_TRACE_COUNT_MAX (10^12, the core's SLUICE_RATE_MAX); per >= 1;
 * interval may be 0 (pass-through); maxwait >= interval; throttle and
 * debounce need at least one edge. So every deadline of a valid trace fits in
 * 64-bit nanoseconds.
 *
 * Error reasons (exact texts; 'X' is the offending text, quoted, cut to 40
 * characters followed by "..." when longer):
 *   missing policy            no policy line: reported on the first line that
 *                             holds a field when it is not a policy line, or,
 *                             for an input with no field at all (empty, only
 *                             comments or blanks), on line L + 1 where L is
 *                             the number of lines of the input (line 1 for
 *                             an empty input)
 *   duplicate policy          a policy line after the first step
 *   only rate policies can be combined
 *                             a second header policy line when either is not
 *                             rate, or a non-rate policy in a plan
 *   quota needs a name        several quotas in a plan, one without name=
 *                             (on the second quota's line when the first lacks it)
 *   duplicate quota 'X'       a quota name twice in a plan
 *   bad name 'X'              a plan or quota name breaking the NAME rule
 *   duplicate plan 'X'        a plan name twice
 *   plan without quota        on a `plan` line followed by no quota
 *   too many quotas           the ninth quota of a plan
 *   too many plans            the 65th plan line
 *   quota outside a plan      a `plan` line after quota lines in no plan
 *   plan after the first step a `plan` line after the header
 *   unknown plan 'X'          plan= naming no plan of the header
 *   plan needs a rate policy  a plan= field under throttle, audit or debounce
 *   unknown policy 'X'
 *   bad option 'X'            a policy option without '='
 *   unknown option 'X'        an option name the policy does not have
 *   duplicate option 'X'      a policy option, `cost` or `plan`, given twice
 *   missing value for NAME    `NAME=` with nothing after '=' (also cost)
 *   missing option NAME       interval (throttle, audit, debounce), limit or per (rate)
 *   bad number 'X'
 *   negative NAME             NAME in time, interval, maxwait, limit, per, burst, cost
 *   number too large          above the number's maximum (see Limits)
 *   limit below 1 / per below 1 / burst below 1 / cost below 1
 *   maxwait below interval
 *   no edge enabled
 *   bad value 'X' for NAME    NAME in leading, trailing, pick, close
 *   unknown verb 'X'
 *   quota needs a rate policy a quota line under throttle, audit or debounce
 *   cost needs a rate policy  a cost= field under throttle, audit or debounce
 *   missing field             a step line with too few fields (also `policy` alone)
 *   extra field 'X'           a step line with too many fields, or a field
 *                             after VALUE (call) or KEY (quota) that does
 *                             not start with "cost="
 *   key too long              KEY longer than SLUICE_KEY_MAX bytes
 *   value too long            VALUE of 2^32 bytes or more
 *   time goes backwards       TIME smaller than the previous step's
 *   line after close          any line with a field after `close`
 *   bad character 0xNN        a byte not allowed where it is (see above)
 * Checks run left to right on a line: characters, "line after close",
 * TIME (number, limit, "time goes backwards"), verb ("quota needs a rate
 * policy"), fields (for each cost= field: "cost needs a rate policy", then
 * "duplicate option 'cost'", then the number).
 *
 * Running
 * -------
 * sluice_trace_run() drives a real limiter with a manual clock (tick 1 ms,
 * start 0, times in ns = ms * 1,000,000). Before each step at time t it fires
 * every deadline <= t at its exact time (advancing to each successive
 * sluice_limiter_next_deadline()); after the last step, unless it is close,
 * it runs time on until no deadline is left. It reports one output line per
 * thing the limiter did:
 *     TIME emit KEY VALUE | TIME drop KEY VALUE | TIME discard KEY VALUE |
 *     TIME pending KEY yes|no |
 *     TIME quota KEY remaining=R full=F retry=S|never
 *     TIME quota KEY policy=NAME remaining=R full=F retry=S|never
 * (the second form once per quota, in the plan's order, after the first,
 * when the quota line's plan has several quotas: each quota's own figures;
 * the first gives the overall ones). A trace with a table of plans
 * (sluice_trace_plans()) runs on a limiter of plans, one call at a time.
 * Events are reported from the core's event callback as they occur; a
 * submit's own decision (EMITTED -> emit, DROPPED -> drop, SCHEDULED ->
 * nothing yet) when the submit returns. In a quota line F and S are the
 * core's sluice_quota_t times in ms rounded up; S is TIME when a call of the
 * line's cost would be admitted now, `never` when the cost exceeds the burst.
 *
 * The runner also checks the core: every call's token reported exactly once
 * (by its decision or by one later event), events only for scheduled tokens,
 * event keys equal to the token's key, DISCARD only during close(discard),
 * event times non-decreasing, never after the current call's time, and whole
 * milliseconds, no error returned for a valid trace, and a next deadline that
 * moves past every time advanced to. A failure is SLUICE_ECORRUPT with
 * a message: a bug in the core, not in the trace.
 */
#ifndef SLUICE_TRACE_H
#define SLUICE_TRACE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "sluice.h"

#ifdef __cplusplus
extern "C" {
#endif

/** Largest TIME of a step, in ms (10^13, about 317 years). */
#define SLUICE_TRACE_TIME_MAX_MS UINT64_C(10000000000000)
/** Largest interval, maxwait or per, in ms (10^12). */
#define SLUICE_TRACE_DURATION_MAX_MS UINT64_C(1000000000000)
/** Largest rate limit, burst or cost (10^12, the core's SLUICE_RATE_MAX). */
#define SLUICE_TRACE_COUNT_MAX UINT64_C(1000000000000)
/** Nanoseconds per millisecond. */
#define SLUICE_TRACE_NS_PER_MS UINT64_C(1000000)
/** Size of sluice_trace_error_t.reason, NUL included. */
#define SLUICE_TRACE_REASON_MAX 128
/** Size of sluice_trace_error_t.message, NUL included
 *  ("error: line " + up to 20 digits + ": " + reason). */
#define SLUICE_TRACE_ERROR_MESSAGE_MAX (SLUICE_TRACE_REASON_MAX + 40)
/** Size of sluice_trace_run_result_t.message, NUL included. */
#define SLUICE_TRACE_MESSAGE_MAX 320
/** sluice_trace_output_t.retry_ms of a quota line whose cost exceeds the burst. */
#define SLUICE_TRACE_NEVER UINT64_MAX

/* Errors: the functions below return 0 or a negative SLUICE_E* code of
 * sluice_errors.h, described by sluice_strerror(): SLUICE_ESYNTAX (a
 * malformed trace: see sluice_trace_error_t), SLUICE_ENOMEM, SLUICE_ECORRUPT
 * (the core or loop broke a rule of its API, a bug in Sluice: see
 * sluice_trace_run_result_t.message), SLUICE_ELIMIT
 * (sluice_trace_run_options_t.max_advances was reached) and SLUICE_EINVAL
 * (a bad argument: a NULL trace, a step index out of range, batch_size above
 * 1 in a real-loop run). */

/** A parsed trace: opaque, immutable, released with sluice_trace_free(). */
typedef struct sluice_trace sluice_trace_t;

/** A parse error. */
typedef struct sluice_trace_error {
    /** The 1-based line of the error; 0 for "out of memory". */
    size_t line;
    /** The reason, NUL-terminated, never empty on error (see the list above). */
    char reason[SLUICE_TRACE_REASON_MAX];
    /** The whole text the tool prints on standard error, without a newline:
     *  "error: line N: REASON", or "error: out of memory". */
    char message[SLUICE_TRACE_ERROR_MESSAGE_MAX];
} sluice_trace_error_t;

/** What a step (input line after the policy) does. */
typedef enum sluice_trace_verb {
    SLUICE_TRACE_CALL = 1,    /**< TIME call KEY VALUE [cost=N] */
    SLUICE_TRACE_CANCEL = 2,  /**< TIME cancel KEY */
    SLUICE_TRACE_FLUSH = 3,   /**< TIME flush KEY */
    SLUICE_TRACE_PENDING = 4, /**< TIME pending KEY */
    SLUICE_TRACE_CLOSE = 5,   /**< TIME close drain|discard (see close_mode) */
    SLUICE_TRACE_QUOTA = 6    /**< TIME quota KEY [cost=N] */
} sluice_trace_verb_t;

/** One step, as read by sluice_trace_step(). Pointers point into the parsed
 *  trace and stay valid until sluice_trace_free(); bytes are not
 *  NUL-terminated. */
typedef struct sluice_trace_step {
    uint64_t time_ms; /**< TIME */
    sluice_trace_verb_t verb;
    const char *key; /**< KEY bytes (NULL for close) */
    size_t key_len;
    const char *value; /**< VALUE bytes of a call (NULL otherwise) */
    size_t value_len;
    uint64_t cost;                  /**< call and quota: the cost (1 when no cost= was written); 0 otherwise */
    bool has_cost;                  /**< a cost= field was written */
    uint32_t plan;                  /**< call and quota: the plan's index in sluice_trace_plans() (0, the
                                         default, when no plan= was written) */
    bool has_plan;                  /**< a plan= field was written */
    sluice_close_mode_t close_mode; /**< close: drain or discard; SLUICE_CLOSE_DRAIN otherwise */
    size_t line;                    /**< the 1-based input line */
} sluice_trace_step_t;

/** The kind of an output line. */
typedef enum sluice_trace_output_kind {
    SLUICE_TRACE_OUT_EMIT = 1,    /**< TIME emit KEY VALUE */
    SLUICE_TRACE_OUT_DROP = 2,    /**< TIME drop KEY VALUE */
    SLUICE_TRACE_OUT_DISCARD = 3, /**< TIME discard KEY VALUE */
    SLUICE_TRACE_OUT_PENDING = 4, /**< TIME pending KEY yes|no */
    SLUICE_TRACE_OUT_QUOTA = 5    /**< TIME quota KEY remaining=R full=F retry=S|never */
} sluice_trace_output_kind_t;

/** One output line. Pointers are valid only during the callback. */
typedef struct sluice_trace_output {
    sluice_trace_output_kind_t kind;
    uint64_t time_ms; /**< TIME (realtime runs: the actual ms since start, rounded down) */
    size_t step;      /**< the step it concerns: the call for emit, drop and discard;
                                   the pending or quota line otherwise (index for sluice_trace_step()) */
    const char *key;  /**< KEY bytes */
    size_t key_len;
    const char *value; /**< emit, drop, discard: the call's VALUE; NULL otherwise */
    size_t value_len;
    bool yes;                    /**< pending: the answer */
    uint64_t remaining;          /**< quota: R, cost-1 calls admitted now */
    uint64_t full_ms;            /**< quota: F, when the whole burst is back (ms, rounded up) */
    uint64_t retry_ms;           /**< quota: S (ms, rounded up), or SLUICE_TRACE_NEVER */
    const char *policy_name;     /**< quota, one quota of several (format v3): its name
                                      (`policy=NAME`, NUL-terminated); NULL on the overall line */
    bool retry_never;            /**< quota: the line's cost exceeds the burst (`retry=never`) */
    bool has_successor;          /**< drop: the core named the call that took this value's place */
    size_t successor_step;       /**< when has_successor: that call's step index */
    const char *successor_value; /**< when has_successor: that call's VALUE bytes */
    size_t successor_value_len;
    const char *text; /**< the exact line, NUL-terminated, without the newline */
    size_t text_len;
} sluice_trace_output_t;

/** Receives each output line, in order, on the thread running the trace. */
typedef void (*sluice_trace_output_fn)(void *user, const sluice_trace_output_t *line);

/** Options of a run. Zero-initialise, then set what you need. */
typedef struct sluice_trace_run_options {
    sluice_trace_output_fn on_output; /**< NULL: the lines are produced and checked, not delivered */
    void *user;                       /**< passed to on_output */
    uint64_t max_advances;            /**< manual runs: bound on sluice_limiter_advance() calls; 0 = none */
    bool check_invariants;            /**< manual runs: sluice_limiter_check() after every step and every
                                 advance (O(keys) each: for small traces) */
    bool random_seed;                 /**< manual runs: hash keys with a random seed; false (the default)
                                 uses a fixed seed, so that the order of lines of different keys
                                 at one instant is the same on every run */
    uint32_t batch_size;              /**< manual runs: 0 or 1 submits one call at a time; N > 1 groups
                                 consecutive calls at the same time into batches of up to N,
                                 each handed to sluice_limiter_submit_many(). The output is
                                 the same either way (events met during a batch come after
                                 the outputs of the calls that returned before them). Real-loop
                                 runs accept only 0 or 1 (SLUICE_EINVAL otherwise) */
} sluice_trace_run_options_t;

/** What a run found. */
typedef struct sluice_trace_run_result {
    uint64_t lines;                         /**< output lines produced */
    uint64_t events;                        /**< event callbacks received from the core */
    uint64_t advances;                      /**< sluice_limiter_advance() calls made (manual runs) */
    uint64_t unaligned;                     /**< events whose time is not a whole millisecond (manual runs) */
    char message[SLUICE_TRACE_MESSAGE_MAX]; /**< on failure: what went wrong, NUL-terminated;
                                                 empty on success */
} sluice_trace_run_result_t;

/**
 * Parses a whole trace.
 *
 * The input is read once, never beyond `len` bytes, and need not be
 * NUL-terminated. On success the trace owns a copy of every key and value.
 *
 * @param text the input (may be NULL when len is 0).
 * @param len its length in bytes.
 * @param out receives the parsed trace (NULL on error).
 * @param err receives the error on SLUICE_ESYNTAX and
 *        SLUICE_ENOMEM (message "error: out of memory"); cleared on
 *        success. May be NULL.
 * @return SLUICE_OK, SLUICE_ESYNTAX, SLUICE_ENOMEM, or
 *         SLUICE_EINVAL when `out` is NULL or `text` is NULL with a
 *         non-zero len.
 * Complexity: O(len).
 */
SLUICE_EXTERN int sluice_trace_parse(const char *text, size_t len, sluice_trace_t **out, sluice_trace_error_t *err);

/**
 * Releases a parsed trace.
 *
 * @param trace the trace, or NULL (nothing happens).
 */
SLUICE_EXTERN void sluice_trace_free(sluice_trace_t *trace);

/**
 * The trace's policy, as the core's policy (durations in ns = ms * 10^6,
 * defaults applied, rate burst set even when the line omitted it).
 *
 * @param trace a parsed trace.
 * @return the policy.
 */
SLUICE_EXTERN sluice_policy_t sluice_trace_policy(const sluice_trace_t *trace);

/**
 * The trace's plans of rate quotas (format v3), in the core's terms, for a
 * limiter of plans (sluice_config_t.plans with sluice_rate_plans()): the
 * declared plans in order, or one plan named "default" holding the quotas
 * of a header without plan lines. sluice_trace_policy() is then the first
 * quota of the default plan.
 *
 * @param trace a parsed trace.
 * @return the table, valid until sluice_trace_free(); NULL for a trace of
 *         one policy and no plan line (run on that policy alone).
 */
SLUICE_EXTERN const sluice_plans_t *sluice_trace_plans(const sluice_trace_t *trace);

/**
 * The number of steps (input lines after the policy line).
 *
 * @param trace a parsed trace.
 * @return the count (0 for a trace with only a policy).
 */
SLUICE_EXTERN size_t sluice_trace_step_count(const sluice_trace_t *trace);

/**
 * Reads one step.
 *
 * @param trace a parsed trace.
 * @param index 0 to sluice_trace_step_count() - 1.
 * @param out receives the step.
 * @return SLUICE_OK, or SLUICE_EINVAL for a NULL pointer or an
 *         index out of range.
 */
SLUICE_EXTERN int sluice_trace_step(const sluice_trace_t *trace, size_t index, sluice_trace_step_t *out);

/**
 * Whether the trace uses format v2 (a cost= field or a quota line).
 *
 * @param trace a parsed trace.
 * @return true when it does.
 */
SLUICE_EXTERN bool sluice_trace_is_v2(const sluice_trace_t *trace);

/**
 * Runs a parsed trace against a new core limiter with a manual clock, exact
 * to the millisecond, and delivers every output line to options->on_output.
 *
 * On SLUICE_ECORRUPT the run stops at the first problem found (lines
 * already delivered stay delivered; an event whose time is not a whole ms is
 * still delivered, rounded down, and the run goes on to the end before
 * reporting it).
 *
 * @param trace a trace from sluice_trace_parse().
 * @param options the options, or NULL for no delivery and no bound.
 * @param result receives counters and the message; may be NULL.
 * @return SLUICE_OK, SLUICE_ECORRUPT, SLUICE_ENOMEM,
 *         SLUICE_ELIMIT or SLUICE_EINVAL.
 * Complexity: O(steps + events + advance calls), plus the core's own costs.
 */
SLUICE_EXTERN int sluice_trace_run(const sluice_trace_t *trace, const sluice_trace_run_options_t *options,
                                   sluice_trace_run_result_t *result);

/**
 * Runs a parsed trace on a real libevent loop and the real monotonic clock
 * (the loop layer), on the calling thread, delivering lines as
 * sluice_trace_run() does.
 *
 * Time 0 is a whole millisecond of the clock (a wheel tick), so step times
 * and deadlines are whole ticks as in the manual run. Each step runs when the
 * clock reaches start + TIME ms (never before), stamped with exactly that
 * instant, so its decision is the spec's even for a call exactly at a
 * deadline. Deadlines then fire on the loop by themselves. Every line carries
 * the actual time in whole ms since start, rounded down (never early);
 * emissions are late by the loop's timer lateness plus at most one tick.
 * Events a step causes are delivered before the step's own decision. A
 * quota line is read at its step's instant too (sluice_mt_quota() with the options' now), so
 * its remaining, full and retry are the manual run's; only its TIME is the
 * actual one.
 * After the last step (when it is not close) the run goes on until nothing
 * is pending.
 *
 * @param trace a trace from sluice_trace_parse().
 * @param options as for sluice_trace_run(): on_output, user and batch_size are
 *        used; max_advances, check_invariants and random_seed are ignored.
 *        NULL: no delivery.
 * @param result receives counters (lines, events) and, on failure, the
 *        message; may be NULL.
 * @return SLUICE_OK, SLUICE_ENOMEM, SLUICE_EINVAL, or
 *         SLUICE_ECORRUPT (the loop layer broke a rule: an error for a
 *         valid call, a token reported twice or never, an event of an
 *         unknown token).
 * Takes as long as the trace's last time, plus its last deadline.
 */
SLUICE_EXTERN int sluice_trace_run_realtime(const sluice_trace_t *trace, const sluice_trace_run_options_t *options,
                                            sluice_trace_run_result_t *result);

/** What another limiter decided for one step of a rate trace, for
 *  sluice_trace_print_answers(). */
typedef struct sluice_trace_answer {
    bool emitted;         /**< call steps: true when the call was emitted, false when dropped */
    sluice_quota_t quota; /**< quota steps: the quota read at the step's time (core units, ns) */
    /** quota steps of a trace with plans (sluice_trace_plans()): each quota's
     *  figures, printed after the overall line when the plan has several
     *  (nquotas 0: none printed) */
    sluice_plan_detail_t detail;
} sluice_trace_answer_t;

/**
 * Prints the lines of a rate trace whose steps another limiter decided (for
 * example the fleet limiter in Redis: `sluice-trace --redis`), exactly as
 * sluice_trace_run() prints a run that decided the same.
 *
 * Lines come in step order, each stamped with its step's TIME: a call step
 * gives `emit` or `drop` (never a successor: a rate call is decided at
 * once), a pending step `no` (a rate key holds no value), a quota step the
 * quota of its answer (full and retry rounded up to ms); cancel, flush and
 * close give nothing.
 *
 * @param trace a parsed trace whose policy is rate.
 * @param answers one answer per step (sluice_trace_step_count() of them);
 *        only those of call and quota steps are read. May be NULL when the
 *        trace has no step.
 * @param options on_output and user are used, the rest is ignored; NULL: the
 *        lines are produced, not delivered.
 * @param result receives the count of lines and, on failure, the message;
 *        may be NULL.
 * @return SLUICE_OK, SLUICE_ENOMEM, or SLUICE_EINVAL (NULL
 *         trace, NULL answers for a trace with steps, or a policy that is
 *         not rate); nothing is delivered on failure.
 * Complexity: O(steps).
 */
SLUICE_EXTERN int sluice_trace_print_answers(const sluice_trace_t *trace, const sluice_trace_answer_t *answers,
                                             const sluice_trace_run_options_t *options,
                                             sluice_trace_run_result_t *result);

/** One line that another limiter produced, for sluice_trace_print_events(). */
typedef struct sluice_trace_event {
    /** SLUICE_TRACE_OUT_EMIT, _DROP or _DISCARD: the value of call step
     *  `step`; SLUICE_TRACE_OUT_PENDING: the answer to pending step `step`. */
    sluice_trace_output_kind_t kind;
    uint64_t time_ms; /**< TIME */
    size_t step;      /**< index of the step (sluice_trace_step()) */
    size_t successor; /**< DROP: the call step that replaced the value, or SIZE_MAX */
    bool yes;         /**< PENDING: the answer */
} sluice_trace_event_t;

/**
 * Prints the lines of a throttle, audit or debounce trace that another
 * limiter ran (for example the fleet's timed limiter in Redis:
 * `sluice-trace --redis`), in the order given, exactly as sluice_trace_run()
 * prints the same events, and checks that every call's value ends exactly
 * once (emit, drop or discard) and every pending step has its answer.
 *
 * @param trace a parsed trace whose policy is throttle, audit or debounce.
 * @param events the lines, in the order to print; NULL when n is 0.
 * @param options on_output and user are used, the rest is ignored; NULL: the
 *        lines are produced, not delivered.
 * @param result receives the line count, and on failure the message; may be NULL.
 * @return SLUICE_OK; SLUICE_EINVAL (no trace, a rate trace, an event naming
 *         a step out of range or of the wrong verb, a kind that is not one of
 *         the four: nothing printed); SLUICE_ECORRUPT (a value reported twice
 *         or never, a pending step answered twice or never: the lines before
 *         the fault were printed); SLUICE_ENOMEM.
 */
SLUICE_EXTERN int sluice_trace_print_events(const sluice_trace_t *trace, const sluice_trace_event_t *events, size_t n,
                                            const sluice_trace_run_options_t *options,
                                            sluice_trace_run_result_t *result);

#ifdef __cplusplus
}
#endif

#endif /* SLUICE_TRACE_H */
