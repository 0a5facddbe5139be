/*
 * trace.h — parser and runner of conformance traces (trace format v1).
 *
 * The format is shared/spec/trace-format.md; the behaviour is
 * shared/spec/semantics.md. This module is used by the `sluice-trace` tool,
 * its unit test (ctests/test_trace_parser.c) and the libFuzzer harness
 * (fuzz/fuzz_trace.c); it has no main() and keeps no global state.
 *
 * Parsing
 * -------
 * trace_parse() reads a whole input buffer given as pointer + length (it need
 * not be NUL-terminated and is never read out of bounds) and either fills a
 * `struct trace` or reports the first error as a line number (1-based) and a
 * short reason. The tool prints it as `error: line N: REASON`.
 *
 * Lexical rules, as implemented:
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
 * Grammar: the first line holding a field is the policy line:
 *     policy throttle interval=MS [leading=BOOL] [trailing=BOOL] [pick=latest|first]
 *     policy audit    interval=MS
 *     policy debounce interval=MS [leading=BOOL] [trailing=BOOL] [maxwait=MS]
 *     policy rate     limit=N per=MS [burst=B]
 * Options come in any order, each at most once. Defaults (semantics.md):
 * throttle leading=true trailing=true pick=latest; debounce leading=false
 * trailing=true, no maxwait; rate burst=limit. Every other line is
 *     TIME call KEY VALUE | TIME cancel KEY | TIME flush KEY |
 *     TIME pending KEY | TIME close drain|discard   (close must be last)
 *
 * Limits: TIME <= TRACE_TIME_MAX_MS (10^13 ms); interval, maxwait, per <=
 * TRACE_DURATION_MAX_MS (10^12 ms); limit, burst in 1..TRACE_RATE_MAX
 * (10^12, the core's SLUICE_RATE_MAX); per >= 1; interval may be 0
 * (pass-through); maxwait >= interval; throttle and debounce need at least
 * one edge. So every deadline of a valid trace fits in 64-bit nanoseconds.
 *
 * Error reasons (exact texts; 'X' is the offending text, quoted, cut to 40
 * characters followed by "..." when longer):
 *   missing policy            no policy line: reported on the first line that
 *                             holds a field when it is not a policy line, or,
 *                             for an input with no field at all (empty, only
 *                             comments or blanks), on line L + 1 where L is
 *                             the number of lines of the input (line 1 for
 *                             an empty input)
 *   duplicate policy          a second policy line
 *   unknown policy 'X'
 *   bad option 'X'            a policy option without '='
 *   unknown option 'X'        an option name the policy does not have
 *   duplicate option 'X'
 *   missing value for NAME    `NAME=` with nothing after '='
 *   missing option NAME       interval (throttle, audit, debounce), limit or per (rate)
 *   bad number 'X'
 *   negative NAME             NAME in time, interval, maxwait, limit, per, burst
 *   number too large          above the number's maximum (see Limits)
 *   limit below 1 / per below 1 / burst below 1
 *   maxwait below interval
 *   no edge enabled
 *   bad value 'X' for NAME    NAME in leading, trailing, pick, close
 *   unknown verb 'X'
 *   missing field             a step line with too few fields (also `policy` alone)
 *   extra field 'X'           a step line with too many fields
 *   key too long              KEY longer than SLUICE_KEY_MAX bytes
 *   value too long            VALUE of 2^32 bytes or more
 *   time goes backwards       TIME smaller than the previous step's
 *   line after close          any line with a field after `close`
 *   bad character 0xNN        a byte not allowed where it is (see above)
 * Checks run left to right on a line: characters, "line after close",
 * TIME (number, limit, "time goes backwards"), verb, fields.
 *
 * Running
 * -------
 * trace_run() drives a real limiter with a manual clock (tick 1 ms, start 0,
 * times in ns = ms * 1,000,000). Before each step at time t it fires every
 * deadline <= t at its exact time (advancing to each successive
 * sluice_limiter_next_deadline()); after the last step, unless it is close,
 * it runs time on until no deadline is left. It prints one line per thing the
 * limiter did (trace-format.md, "Output"):
 *     TIME emit KEY VALUE | TIME drop KEY VALUE | TIME discard KEY VALUE |
 *     TIME pending KEY yes|no
 * Events are printed from the event callback as they occur; a submit's own
 * decision (EMITTED -> emit, DROPPED -> drop, SCHEDULED -> nothing yet) is
 * printed when the submit returns.
 *
 * The runner also checks the core: every call's token reported exactly once
 * (by its decision or by one later event), events only for scheduled tokens,
 * event keys equal to the token's key, DISCARD only during close(discard),
 * event times non-decreasing, never after the current call's time, and whole
 * milliseconds, no error returned for a valid trace, and a next deadline that
 * moves past every time advanced to. A failure is TRACE_ERR_INTERNAL with a
 * message: a bug in the core, not in the trace.
 */
#ifndef SLUICE_TRACE_H
#define SLUICE_TRACE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "sluice.h"

#ifdef __cplusplus
extern "C" {
#endif

/** Largest TIME of a step, in ms (10^13, about 317 years). */
#define TRACE_TIME_MAX_MS UINT64_C(10000000000000)
/** Largest interval, maxwait or per, in ms (10^12; SLUICE_DURATION_MAX in ns). */
#define TRACE_DURATION_MAX_MS UINT64_C(1000000000000)
/** Largest rate limit or burst (the core's SLUICE_RATE_MAX, 10^12). */
#define TRACE_RATE_MAX SLUICE_RATE_MAX
/** Nanoseconds per millisecond. */
#define TRACE_NS_PER_MS UINT64_C(1000000)
/** Size of trace_error.reason, NUL included. */
#define TRACE_REASON_MAX 128
/** Size of trace_run_result.message, NUL included. */
#define TRACE_MESSAGE_MAX 320

/** Status codes of trace_parse() and trace_run(). */
enum trace_status {
    TRACE_OK = 0,
    TRACE_ERR_SYNTAX = -1,   /**< malformed trace: see trace_error */
    TRACE_ERR_NOMEM = -2,    /**< an allocation failed */
    TRACE_ERR_INTERNAL = -3, /**< the core misbehaved (a core bug): see trace_run_result.message */
    TRACE_ERR_LIMIT = -4     /**< trace_run_options.max_advances was reached */
};

/** What a step does. */
enum trace_verb {
    TRACE_CALL = 1,
    TRACE_CANCEL = 2,
    TRACE_FLUSH = 3,
    TRACE_PENDING = 4,
    TRACE_CLOSE_DRAIN = 5,
    TRACE_CLOSE_DISCARD = 6
};

/** The policy line, with defaults applied. Durations in ms. */
struct trace_policy {
    sluice_policy_kind_t kind;
    uint64_t interval_ms; /**< throttle, audit, debounce */
    bool leading;         /**< throttle, debounce */
    bool trailing;        /**< throttle, debounce (audit: true) */
    sluice_pick_t pick;   /**< throttle */
    bool has_maxwait;     /**< debounce */
    uint64_t maxwait_ms;  /**< debounce, when has_maxwait */
    uint64_t limit;       /**< rate */
    uint64_t per_ms;      /**< rate */
    uint64_t burst;       /**< rate (defaults to limit) */
};

/** One step line. KEY and VALUE live in trace.text: the key at text_off,
 *  the value right after it. Steps other than call have no value. */
struct trace_step {
    uint64_t time_ms;
    size_t text_off;
    uint32_t value_len;
    uint16_t key_len;
    uint8_t verb; /**< enum trace_verb */
    uint8_t reserved;
    uint32_t line; /**< input line number (saturated at UINT32_MAX) */
};

/** A parsed trace. Zero-initialise; release with trace_free(). */
struct trace {
    struct trace_policy policy;
    struct trace_step *steps;
    size_t nsteps;
    size_t steps_cap;
    char *text; /**< keys and values, not NUL-terminated */
    size_t text_len;
    size_t text_cap;
    size_t ncalls;   /**< steps that are calls */
    size_t lines;    /**< lines of the input */
};

/** A parse error. */
struct trace_error {
    size_t line;                    /**< 1-based */
    char reason[TRACE_REASON_MAX];  /**< NUL-terminated, never empty on error */
};

/**
 * Parses a whole trace.
 *
 * @param buf the input (need not be NUL-terminated; may be NULL when len is 0).
 * @param len its length in bytes.
 * @param out receives the trace; on error it is left empty (nothing to free,
 *        though trace_free() is harmless).
 * @param err receives the error (line and reason) on TRACE_ERR_SYNTAX; on
 *        TRACE_ERR_NOMEM its reason is "out of memory". May be NULL.
 * @return TRACE_OK, TRACE_ERR_SYNTAX or TRACE_ERR_NOMEM.
 * Complexity: O(len).
 */
int trace_parse(const char *buf, size_t len, struct trace *out, struct trace_error *err);

/** Releases what trace_parse() allocated and empties the trace. */
void trace_free(struct trace *trace);

/** The key bytes of a step. */
static inline const char *trace_step_key(const struct trace *t, const struct trace_step *s) {
    return t->text + s->text_off;
}

/** The value bytes of a call step. */
static inline const char *trace_step_value(const struct trace *t, const struct trace_step *s) {
    return t->text + s->text_off + s->key_len;
}

/**
 * Fills a core policy from the trace's policy (ms converted to ns).
 *
 * @param trace a parsed trace.
 * @param out receives the policy.
 */
void trace_policy_to_sluice(const struct trace *trace, sluice_policy_t *out);

/** Options of trace_run(). Zero-initialise. */
struct trace_run_options {
    FILE *out;             /**< where output lines go; NULL: nowhere (still checked) */
    uint64_t max_advances; /**< bound on sluice_limiter_advance() calls; 0 = none */
    bool check_invariants; /**< run sluice_limiter_check() after every step and
                                every advance (O(keys) each: for small traces) */
    bool random_seed;      /**< hash keys with a random seed; false (the default)
                                uses a fixed seed so that the order of lines of
                                different keys at one instant is the same on
                                every run */
};

/** What trace_run() found. */
struct trace_run_result {
    uint64_t lines;     /**< output lines produced */
    uint64_t events;    /**< event callbacks received */
    uint64_t advances;  /**< sluice_limiter_advance() calls made */
    uint64_t unaligned; /**< events whose time is not a whole millisecond */
    char message[TRACE_MESSAGE_MAX]; /**< TRACE_ERR_INTERNAL/NOMEM/LIMIT: what went wrong */
};

/**
 * Runs a parsed trace against a new limiter and prints its output.
 *
 * On TRACE_ERR_INTERNAL the run stops at the first problem found (output
 * already printed stays printed; an event whose time is not a whole ms is
 * still printed, rounded down, and the run goes on to the end before
 * reporting it). Write errors on `out` are not checked here: use ferror().
 *
 * @param trace a trace from trace_parse().
 * @param options the options, or NULL for no output and no bound.
 * @param result receives counters and the message; may be NULL.
 * @return TRACE_OK, TRACE_ERR_INTERNAL, TRACE_ERR_NOMEM or TRACE_ERR_LIMIT.
 * Complexity: O(steps + events + advance calls), plus the core's own costs.
 */
int trace_run(const struct trace *trace, const struct trace_run_options *options,
              struct trace_run_result *result);

/**
 * Runs a parsed trace on a real libevent loop and the real monotonic clock
 * (realtime.c; the loop layer), printing to options->out. Time 0 is a whole
 * millisecond of the clock; each step runs at start + TIME ms, never before;
 * every output line carries the actual time in whole ms since start, rounded
 * down (never early). After the last step (when it is not close) the run
 * goes on until nothing is pending.
 *
 * @param trace a trace from trace_parse().
 * @param options as for trace_run(): `out` is used; `check_invariants`,
 *        `max_advances` and `random_seed` are ignored. NULL: no output.
 * @param result receives counters (lines, events) and, on failure, the
 *        message; may be NULL.
 * @return TRACE_OK, TRACE_ERR_NOMEM, or TRACE_ERR_INTERNAL.
 * Takes as long as the trace's last time, plus its last deadline.
 */
int trace_run_realtime(const struct trace *trace, const struct trace_run_options *options,
                       struct trace_run_result *result);

#ifdef __cplusplus
}
#endif

#endif /* SLUICE_TRACE_H */
