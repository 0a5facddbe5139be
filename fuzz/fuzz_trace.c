/*
 * fuzz_trace.c — libFuzzer harness for the trace parser and runner.
 *
 * Feeds the input bytes to trace_parse(). A crash, a hang, a sanitizer report
 * or a malformed error (empty reason, line 0, line beyond the input's line
 * count + 1) is a finding. When the parse succeeds and the trace is small, it
 * is also run against the core with invariant checks after every step, output
 * to a null sink; a core misbehaviour found by the runner (TRACE_ERR_INTERNAL)
 * or a run needing a huge number of advance calls is a finding too.
 *
 * Build and run (from the repository root):
 *   clang -std=c11 -g -O1 -D_POSIX_C_SOURCE=200809L -fsanitize=fuzzer,address,undefined \
 *     -I Sources/CSluice/include -I Sources/CSluice -I tools/sluice-trace \
 *     Sources/CSluice/[a-z]*.c tools/sluice-trace/trace.c fuzz/fuzz_trace.c \
 *     -levent_core -levent_pthreads -o /tmp/fuzz_trace
 *   /tmp/fuzz_trace -max_total_time=60 -dict=fuzz/trace.dict fuzz/corpus/trace
 * (the libevent libraries are for the core's loop.c, which the harness does
 * not use; CMake's -DSLUICE_FUZZ=ON builds the same harness as fuzz_trace.)
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
        if (data[i] == '\n')
            n++;
    if (size > 0 && data[size - 1] != '\n')
        n++;
    return n;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    struct trace t;
    struct trace_error err;
    int rc;

    /* libFuzzer's buffer is exactly `size` bytes: ASan sees any overread. */
    rc = trace_parse((const char *)data, size, &t, &err);
    if (rc == TRACE_ERR_NOMEM)
        return 0;
    if (rc != TRACE_OK) {
        size_t len = strnlen(err.reason, sizeof err.reason);
        if (rc != TRACE_ERR_SYNTAX)
            finding("unexpected parse status", "");
        if (len == 0 || len == sizeof err.reason)
            finding("empty or unterminated reason", "");
        for (size_t i = 0; i < len; i++)
            if (err.reason[i] < 0x20 || err.reason[i] > 0x7e)
                finding("non-printable reason", err.reason);
        if (err.line == 0 || err.line > count_lines(data, size) + 1)
            finding("error line out of range", err.reason);
        if (t.steps != NULL || t.nsteps != 0)
            finding("trace not emptied after an error", err.reason);
        return 0;
    }

    /* Shape of a parsed trace. */
    if (t.lines != count_lines(data, size))
        finding("line count", "");
    for (size_t i = 0; i < t.nsteps; i++) {
        const struct trace_step *s = &t.steps[i];
        if (s->time_ms > TRACE_TIME_MAX_MS || (i > 0 && s->time_ms < t.steps[i - 1].time_ms))
            finding("step time", "");
        if (s->text_off + s->key_len + s->value_len > t.text_len)
            finding("step text out of range", "");
        if ((s->verb == TRACE_CLOSE_DRAIN || s->verb == TRACE_CLOSE_DISCARD) && i + 1 != t.nsteps)
            finding("close not last", "");
    }

    if (t.nsteps < RUN_MAX_STEPS) {
        static int no_check = -1;
        struct trace_run_options opt;
        struct trace_run_result res;
        static FILE *sink;
        if (sink == NULL)
            sink = fopen("/dev/null", "w"); /* exercise the printing too; NULL is fine */
        if (no_check < 0) {
            const char *e = getenv("FUZZ_TRACE_NO_CHECK");
            no_check = e != NULL && e[0] != '\0' && strcmp(e, "0") != 0;
        }
        memset(&opt, 0, sizeof opt);
        opt.out = sink;
        opt.max_advances = RUN_MAX_ADVANCES;
        opt.check_invariants = !no_check;
        rc = trace_run(&t, &opt, &res);
        if (rc == TRACE_ERR_INTERNAL)
            finding("core misbehaved", res.message);
        if (rc == TRACE_ERR_LIMIT)
            finding("too many advance calls", res.message);
    }
    trace_free(&t);
    return 0;
}
