/*
 * fuzz_trace.c — libFuzzer harness for the trace parser and runner.
 *
 * Feeds the input bytes to sluice_trace_parse() (trace format v3). A crash, a
 * hang, a sanitizer report or a malformed error (empty reason, line 0, line
 * beyond the input's line count + 1, a message that is not exactly
 * "error: line N: REASON") is a finding. When the parse succeeds the steps
 * are read back and checked (times, lines, costs, v2 lines only under rate);
 * when the trace is small it is also run against the core with invariant
 * checks after every step, each output line checked against its fields; a
 * core misbehaviour found by the runner (SLUICE_ECORRUPT) or a run
 * needing a huge number of advance calls is a finding too.
 *
 * Build and run (from the repository root):
 *   clang -std=c11 -g -O1 -D_POSIX_C_SOURCE=200809L -fsanitize=fuzzer,address,undefined \
 *     -I Sources/CSluice/include -I Sources/CSluice -I Sources/CSluiceTrace/include \
 *     Sources/CSluice/[a-z]*.c Sources/CSluiceTrace/trace.c fuzz/fuzz_trace.c \
 *     -o /tmp/fuzz_trace
 *   /tmp/fuzz_trace -max_total_time=60 -dict=fuzz/trace.dict fuzz/corpus/trace
 * (the harness needs only the core: no libevent. CMake's -DSLUICE_FUZZ=ON
 * builds the same harness as fuzz_trace.)
 * libFuzzer writes new inputs into the corpus folder: give it a copy when the
 * seed corpus should stay as it is.
 *
 * Set FUZZ_TRACE_NO_CHECK=1 in the environment to skip sluice_limiter_check()
 * (for example while a known invariant-checker bug is being fixed).
 */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sluice_trace.h"

/* Run traces of fewer steps than this. */
#define RUN_MAX_STEPS 200
/* A small trace needing more advance calls than this hangs, in effect. */
#define RUN_MAX_ADVANCES 100000

static void finding(const char *what, const char *detail) {
    fprintf(stderr, "fuzz_trace: %s: %s\n", what, detail ? detail : "");
    abort();
}

static size_t count_lines(const uint8_t *data, size_t size) {
    size_t n = 0;
    for (size_t i = 0; i < size; i++)
        if (data[i] == '\n') n++;
    if (size > 0 && data[size - 1] != '\n') n++;
    return n;
}

/* Checks a delivered line against its fields; counts lines. */
struct sink {
    const sluice_trace_t *t;
    uint64_t lines;
};

static void on_output(void *user, const sluice_trace_output_t *o) {
    struct sink *k = user;
    sluice_trace_step_t st;
    k->lines++;
    if (o->text == NULL || strlen(o->text) != o->text_len || o->text_len == 0) finding("output text", "");
    if (sluice_trace_step(k->t, o->step, &st) != SLUICE_OK) finding("output step out of range", o->text);
    if (o->key_len != st.key_len || memcmp(o->key, st.key, st.key_len) != 0)
        finding("output key is not its step's", o->text);
    if (o->kind == SLUICE_TRACE_OUT_QUOTA && st.verb != SLUICE_TRACE_QUOTA)
        finding("quota line for a step that is not quota", o->text);
    if (o->kind == SLUICE_TRACE_OUT_PENDING && st.verb != SLUICE_TRACE_PENDING)
        finding("pending line for a step that is not pending", o->text);
    if (o->kind <= SLUICE_TRACE_OUT_DISCARD && (st.verb != SLUICE_TRACE_CALL || o->value_len != st.value_len))
        finding("value line for a step that is not its call", o->text);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    sluice_trace_t *t = NULL;
    sluice_trace_error_t err;
    int rc;
    size_t n;

    /* libFuzzer's buffer is exactly `size` bytes: ASan sees any overread. */
    rc = sluice_trace_parse((const char *)data, size, &t, &err);
    if (rc == SLUICE_ENOMEM) return 0;
    if (rc != SLUICE_OK) {
        size_t len = strnlen(err.reason, sizeof err.reason);
        char want[SLUICE_TRACE_ERROR_MESSAGE_MAX];
        if (rc != SLUICE_ESYNTAX) finding("unexpected parse status", "");
        if (len == 0 || len == sizeof err.reason) finding("empty or unterminated reason", "");
        for (size_t i = 0; i < len; i++)
            if (err.reason[i] < 0x20 || err.reason[i] > 0x7e) finding("non-printable reason", err.reason);
        if (err.line == 0 || err.line > count_lines(data, size) + 1) finding("error line out of range", err.reason);
        snprintf(want, sizeof want, "error: line %zu: %s", err.line, err.reason);
        if (strcmp(want, err.message) != 0) finding("message is not 'error: line N: REASON'", err.message);
        if (t != NULL) finding("a trace after an error", err.reason);
        return 0;
    }

    /* Shape of a parsed trace. */
    n = sluice_trace_step_count(t);
    for (size_t i = 0; i < n; i++) {
        sluice_trace_step_t s, prev;
        if (sluice_trace_step(t, i, &s) != SLUICE_OK) finding("step not readable", "");
        if (s.time_ms > SLUICE_TRACE_TIME_MAX_MS ||
            (i > 0 && (sluice_trace_step(t, i - 1, &prev) != 0 || s.time_ms < prev.time_ms)))
            finding("step time", "");
        if (s.line == 0 || s.line > count_lines(data, size)) finding("step line", "");
        if (s.verb == SLUICE_TRACE_CLOSE && i + 1 != n) finding("close not last", "");
        if ((s.verb == SLUICE_TRACE_CALL || s.verb == SLUICE_TRACE_QUOTA) &&
            (s.cost < 1 || s.cost > SLUICE_TRACE_COUNT_MAX))
            finding("cost out of range", "");
        if ((s.has_cost || s.verb == SLUICE_TRACE_QUOTA) &&
            (!sluice_trace_is_v2(t) || sluice_trace_policy(t).kind != SLUICE_RATE))
            finding("v2 line accepted outside a rate policy", "");
        if (s.verb != SLUICE_TRACE_CLOSE && s.key_len > SLUICE_KEY_MAX) finding("key too long accepted", "");
        /* v3: a plan index names a plan of the table (or the one plan 0) */
        const sluice_plans_t *pl = sluice_trace_plans(t);
        if (s.has_plan && sluice_trace_policy(t).kind != SLUICE_RATE) finding("plan= accepted outside rate", "");
        if (s.plan != 0 && (!pl || s.plan >= pl->nplans)) finding("plan index out of the table", "");
    }
    /* v3: the table the parser built passes the core's own check */
    if (sluice_trace_plans(t) && sluice_plans_check(sluice_trace_plans(t), NULL, 0) != SLUICE_OK)
        finding("the trace's plans fail sluice_plans_check", "");

    if (n < RUN_MAX_STEPS) {
        static int no_check = -1;
        sluice_trace_run_options_t opt;
        sluice_trace_run_result_t res;
        struct sink sink = { t, 0 };
        if (no_check < 0) {
            const char *e = getenv("FUZZ_TRACE_NO_CHECK");
            no_check = e != NULL && e[0] != '\0' && strcmp(e, "0") != 0;
        }
        memset(&opt, 0, sizeof opt);
        opt.on_output = on_output;
        opt.user = &sink;
        opt.max_advances = RUN_MAX_ADVANCES;
        opt.check_invariants = !no_check;
        rc = sluice_trace_run(t, &opt, &res);
        if (rc == SLUICE_ECORRUPT) finding("core misbehaved", res.message);
        if (rc == SLUICE_ELIMIT) finding("too many advance calls", res.message);
        if (rc == SLUICE_OK && res.lines != sink.lines) finding("line count", res.message);
    }
    sluice_trace_free(t);
    return 0;
}
