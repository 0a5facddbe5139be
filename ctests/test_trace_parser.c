/*
 * test_trace_parser.c — unit tests of the trace library (Sources/CSluiceTrace,
 * sluice_trace.h): the parser (v1 and v2 lines, every error reason), the step
 * accessors, and end-to-end runs against the core through the output
 * callback, whose fields are checked against its text.
 *
 * Build: link with the trace library (Sources/CSluiceTrace) and the core library; include
 * paths Sources/CSluice/include and Sources/CSluiceTrace/include. Exit status
 * 0 when every check passes.
 */
#ifndef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L
#endif

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sluice.h"
#include "sluice_trace.h"

static int failures;
static int checks;

#define CHECK(cond, ...)                                                                                               \
    do {                                                                                                               \
        checks++;                                                                                                      \
        if (!(cond)) {                                                                                                 \
            failures++;                                                                                                \
            fprintf(stderr, "%s:%d: check failed: %s: ", __FILE__, __LINE__, #cond);                                   \
            fprintf(stderr, __VA_ARGS__);                                                                              \
            fputc('\n', stderr);                                                                                       \
        }                                                                                                              \
    } while (0)

#define MS UINT64_C(1000000)
#define POL(t) sluice_trace_policy(t)

/* Parses exactly `len` bytes held in a buffer of exactly that size, so a
 * sanitizer catches any read past the end. */
static int parse_exact(const char *input, size_t len, sluice_trace_t **t, sluice_trace_error_t *err) {
    char *copy = malloc(len ? len : 1);
    int rc;
    if (copy == NULL) {
        fprintf(stderr, "out of memory\n");
        exit(1);
    }
    if (len) memcpy(copy, input, len);
    rc = sluice_trace_parse(len ? copy : NULL, len, t, err);
    free(copy);
    return rc;
}

static void expect_error_n(const char *input, size_t len, size_t line, const char *reason) {
    sluice_trace_t *t = (sluice_trace_t *)&t; /* must become NULL */
    sluice_trace_error_t err;
    char message[SLUICE_TRACE_ERROR_MESSAGE_MAX];
    int rc = parse_exact(input, len, &t, &err);
    CHECK(rc == SLUICE_ESYNTAX, "input %.60s: rc %d, want a syntax error", input, rc);
    if (rc != SLUICE_ESYNTAX) {
        sluice_trace_free(rc == SLUICE_OK ? t : NULL);
        return;
    }
    CHECK(err.line == line && strcmp(err.reason, reason) == 0,
          "input \"%.60s\": got 'line %zu: %s', want 'line %zu: %s'", input, err.line, err.reason, line, reason);
    snprintf(message, sizeof message, "error: line %zu: %s", line, reason);
    CHECK(strcmp(err.message, message) == 0, "message '%s', want '%s'", err.message, message);
    CHECK(t == NULL, "no trace after an error");
}

static void expect_error(const char *input, size_t line, const char *reason) {
    expect_error_n(input, strlen(input), line, reason);
}

/* Parses an input that must be valid; the caller frees. */
static sluice_trace_t *expect_ok_n(const char *input, size_t len) {
    sluice_trace_t *t = NULL;
    sluice_trace_error_t err;
    int rc = parse_exact(input, len, &t, &err);
    CHECK(rc == SLUICE_OK, "input \"%.60s\": got 'line %zu: %s'", input, err.line, err.reason);
    if (rc != SLUICE_OK) {
        fprintf(stderr, "cannot go on\n");
        exit(1);
    }
    CHECK(err.message[0] == '\0' && err.line == 0, "error cleared on success");
    return t;
}

static sluice_trace_t *expect_ok(const char *input) { return expect_ok_n(input, strlen(input)); }

static void accept(const char *input) { sluice_trace_free(expect_ok(input)); }

static bool step_is(const sluice_trace_t *t, size_t i, uint64_t time_ms, int verb, const char *key, const char *value) {
    sluice_trace_step_t s;
    if (sluice_trace_step(t, i, &s) != SLUICE_OK) return false;
    if (s.time_ms != time_ms || (int)s.verb != verb) return false;
    if (key && (s.key_len != strlen(key) || memcmp(s.key, key, s.key_len) != 0)) return false;
    if (value && (s.value_len != strlen(value) || memcmp(s.value, value, s.value_len) != 0)) return false;
    if (!value && s.value != NULL) return false;
    return true;
}

static sluice_trace_step_t step_at(const sluice_trace_t *t, size_t i) {
    sluice_trace_step_t s;
    memset(&s, 0, sizeof s);
    CHECK(sluice_trace_step(t, i, &s) == SLUICE_OK, "step %zu", i);
    return s;
}

/* ------------------------------------------------------------------ */

static void test_missing_policy(void) {
    expect_error("", 1, "missing policy");
    expect_error("\n", 2, "missing policy");
    expect_error("# only a comment\n\n   \n", 4, "missing policy");
    expect_error("# only a comment", 2, "missing policy");
    expect_error("\t \r\n", 2, "missing policy");
    expect_error("0 call A a\n", 1, "missing policy");
    expect_error("# c\nPolicy throttle interval=1\n", 2, "missing policy");
    /* format v3: a second policy line of the header combines quotas, which
     * only rate policies do */
    expect_error("policy throttle interval=1\npolicy audit interval=1\n", 2, "only rate policies can be combined");
}

static void test_policy_errors(void) {
    expect_error("policy\n", 1, "missing field");
    expect_error("policy   # nothing\n", 1, "missing field");
    expect_error("policy frobnicate interval=1\n", 1, "unknown policy 'frobnicate'");
    expect_error("policy Throttle interval=1\n", 1, "unknown policy 'Throttle'");
    expect_error("policy throttle\n", 1, "missing option interval");
    expect_error("policy audit\n", 1, "missing option interval");
    expect_error("policy debounce leading=true\n", 1, "missing option interval");
    expect_error("policy rate per=10\n", 1, "missing option limit");
    expect_error("policy rate limit=10\n", 1, "missing option per");
    expect_error("policy throttle interval\n", 1, "bad option 'interval'");
    expect_error("policy throttle interval = 5\n", 1, "bad option 'interval'");
    expect_error("policy throttle interval=\n", 1, "missing value for interval");
    expect_error("policy throttle interval=1 interval=2\n", 1, "duplicate option 'interval'");
    expect_error("policy throttle leading=true interval=1 leading=false\n", 1, "duplicate option 'leading'");
    expect_error("policy throttle interval=1 maxwait=5\n", 1, "unknown option 'maxwait'");
    expect_error("policy audit interval=1 leading=true\n", 1, "unknown option 'leading'");
    expect_error("policy debounce interval=1 pick=first\n", 1, "unknown option 'pick'");
    expect_error("policy rate limit=1 per=1 interval=5\n", 1, "unknown option 'interval'");
    expect_error("policy throttle Interval=5\n", 1, "unknown option 'Interval'");
    expect_error("policy throttle =5\n", 1, "unknown option ''");
    expect_error("policy throttle interval=abc\n", 1, "bad number 'abc'");
    expect_error("policy throttle interval=+5\n", 1, "bad number '+5'");
    expect_error("policy throttle interval=1e3\n", 1, "bad number '1e3'");
    expect_error("policy throttle interval=1_000\n", 1, "bad number '1_000'");
    expect_error("policy throttle interval=-\n", 1, "bad number '-'");
    expect_error("policy throttle interval=-5\n", 1, "negative interval");
    expect_error("policy throttle interval=-0\n", 1, "negative interval");
    expect_error("policy debounce interval=5 maxwait=-5\n", 1, "negative maxwait");
    expect_error("policy rate limit=-1 per=5\n", 1, "negative limit");
    expect_error("policy rate limit=1 per=-5\n", 1, "negative per");
    expect_error("policy rate limit=1 per=5 burst=-2\n", 1, "negative burst");
    expect_error("policy debounce interval=100 maxwait=99\n", 1, "maxwait below interval");
    expect_error("policy debounce maxwait=0 interval=1\n", 1, "maxwait below interval");
    expect_error("policy throttle interval=1 leading=false trailing=false\n", 1, "no edge enabled");
    expect_error("policy debounce interval=1 trailing=false\n", 1, "no edge enabled");
    expect_error("policy throttle interval=1 leading=yes\n", 1, "bad value 'yes' for leading");
    expect_error("policy throttle interval=1 trailing=True\n", 1, "bad value 'True' for trailing");
    expect_error("policy throttle interval=1 pick=last\n", 1, "bad value 'last' for pick");
    expect_error("policy rate limit=0 per=1\n", 1, "limit below 1");
    expect_error("policy rate limit=1 per=0\n", 1, "per below 1");
    expect_error("policy rate limit=1 per=1 burst=0\n", 1, "burst below 1");
    expect_error("policy rate limit=1 per=1 burst=000\n", 1, "burst below 1");
    /* The policy line is the first line with a field, wherever it is. */
    expect_error("# header\n\n  \t\npolicy throttle interval=x\n", 4, "bad number 'x'");
}

static void test_number_limits(void) {
    sluice_trace_t *t;

    /* Durations: at most 10^12 ms. */
    t = expect_ok("policy throttle interval=1000000000000\n");
    CHECK((uint64_t)POL(t).interval_ns / MS == UINT64_C(1000000000000), "interval %" PRIu64,
          (uint64_t)POL(t).interval_ns / MS);
    sluice_trace_free(t);
    expect_error("policy throttle interval=1000000000001\n", 1, "number too large");
    expect_error("policy audit interval=99999999999999999999999\n", 1, "number too large");
    expect_error("policy audit interval=18446744073709551616\n", 1, "number too large");
    expect_error("policy audit interval=18446744073709551615\n", 1, "number too large");
    expect_error("policy audit interval=10000000000000\n", 1, "number too large");
    accept("policy debounce interval=1000000000000 maxwait=1000000000000\n");
    expect_error("policy debounce interval=1 maxwait=1000000000001\n", 1, "number too large");
    accept("policy rate limit=1 per=1000000000000\n");
    expect_error("policy rate limit=1 per=1000000000001\n", 1, "number too large");
    /* Rate limit and burst: at most SLUICE_TRACE_COUNT_MAX (10^12). */
    t = expect_ok("policy rate limit=1000000000000 per=1 burst=1000000000000\n");
    CHECK(POL(t).limit == SLUICE_TRACE_COUNT_MAX && POL(t).burst == SLUICE_TRACE_COUNT_MAX, "limit/burst");
    sluice_trace_free(t);
    expect_error("policy rate limit=1000000000001 per=1\n", 1, "number too large");
    expect_error("policy rate limit=1 per=1 burst=1000000000001\n", 1, "number too large");
    /* Leading zeros are fine, and do not count towards the size. */
    t = expect_ok("policy throttle interval=0000000000000000000000000001000000000000\n"
                  "000000000000000000000000010000000000000 call A a\n");
    CHECK((uint64_t)POL(t).interval_ns / MS == UINT64_C(1000000000000), "interval %" PRIu64,
          (uint64_t)POL(t).interval_ns / MS);
    CHECK(step_is(t, 0, SLUICE_TRACE_TIME_MAX_MS, SLUICE_TRACE_CALL, "A", "a"), "time 10^13");
    sluice_trace_free(t);

    /* Time: at most 10^13 ms. */
    accept("policy audit interval=1\n10000000000000 call A a\n");
    expect_error("policy audit interval=1\n10000000000001 call A a\n", 2, "number too large");
    expect_error("policy audit interval=1\n99999999999999999999999999999 call A a\n", 2, "number too large");
    expect_error("policy audit interval=1\n-1 call A a\n", 2, "negative time");
    expect_error("policy audit interval=1\n+1 call A a\n", 2, "bad number '+1'");
    expect_error("policy audit interval=1\n1.5 call A a\n", 2, "bad number '1.5'");
    expect_error("policy audit interval=1\nten call A a\n", 2, "bad number 'ten'");
    expect_error("policy audit interval=1\n0x10 call A a\n", 2, "bad number '0x10'");
}

static void test_step_errors(void) {
    const char *p = "policy debounce interval=100\n";
    char buf[4096];

#define WITH_POLICY(body) (snprintf(buf, sizeof buf, "%s%s", p, body), buf)
    expect_error(WITH_POLICY("0 frob A\n"), 2, "unknown verb 'frob'");
    expect_error(WITH_POLICY("0 Call A a\n"), 2, "unknown verb 'Call'");
    expect_error(WITH_POLICY("0 policy\n"), 2, "unknown verb 'policy'");
    expect_error(WITH_POLICY("0\n"), 2, "missing field");
    expect_error(WITH_POLICY("0 call\n"), 2, "missing field");
    expect_error(WITH_POLICY("0 call A\n"), 2, "missing field");
    expect_error(WITH_POLICY("0 call A #a\n"), 2, "missing field");
    expect_error(WITH_POLICY("0 cancel\n"), 2, "missing field");
    expect_error(WITH_POLICY("0 flush\n"), 2, "missing field");
    expect_error(WITH_POLICY("0 pending\n"), 2, "missing field");
    expect_error(WITH_POLICY("0 close\n"), 2, "missing field");
    expect_error(WITH_POLICY("0 call A a b\n"), 2, "extra field 'b'");
    expect_error(WITH_POLICY("0 cancel A a\n"), 2, "extra field 'a'");
    expect_error(WITH_POLICY("0 flush A a\n"), 2, "extra field 'a'");
    expect_error(WITH_POLICY("0 pending A yes\n"), 2, "extra field 'yes'");
    expect_error(WITH_POLICY("0 close drain now\n"), 2, "extra field 'now'");
    expect_error(WITH_POLICY("0 close now\n"), 2, "bad value 'now' for close");
    expect_error(WITH_POLICY("0 close Drain\n"), 2, "bad value 'Drain' for close");
    expect_error(WITH_POLICY("0 call A a\n0 call A b\n1 call A c\n0 call A d\n"), 5, "time goes backwards");
    expect_error(WITH_POLICY("0 close drain\n1 call A a\n"), 3, "line after close");
    expect_error(WITH_POLICY("0 close drain\n0 close drain\n"), 3, "line after close");
    expect_error(WITH_POLICY("5 close discard\n# ok\n\n1 frob\n"), 5, "line after close");
    expect_error(WITH_POLICY("0 call A a\npolicy audit interval=1\n"), 3, "duplicate policy");
    /* "time goes backwards" is checked before the verb and the fields. */
    expect_error(WITH_POLICY("5 call A a\n4 frob\n"), 3, "time goes backwards");
    /* A field cut at '#'. */
    expect_error(WITH_POLICY("0 call A#x a\n"), 2, "missing field");
    /* Long texts are cut in the reason. */
    expect_error(WITH_POLICY("0 abcdefghijklmnopqrstuvwxyzabcdefghijklmnopqrstuvwxyz A\n"), 2,
                 "unknown verb 'abcdefghijklmnopqrstuvwxyzabcdefghijklmn...'");
    expect_error(WITH_POLICY("0 abcdefghijklmnopqrstuvwxyzabcdefghijklmn A\n"), 2,
                 "unknown verb 'abcdefghijklmnopqrstuvwxyzabcdefghijklmn'");
#undef WITH_POLICY
}

static void test_keys(void) {
    char *buf = malloc(64 + 2 * (SLUICE_KEY_MAX + 1));
    size_t n;
    sluice_trace_t *t;

    if (buf == NULL) exit(1);
    n = (size_t)sprintf(buf, "policy throttle interval=1\n0 call ");
    memset(buf + n, 'k', SLUICE_KEY_MAX);
    n += SLUICE_KEY_MAX;
    n += (size_t)sprintf(buf + n, " v\n");
    t = expect_ok_n(buf, n);
    CHECK(sluice_trace_step_count(t) == 1 && step_at(t, 0).key_len == SLUICE_KEY_MAX, "key of SLUICE_KEY_MAX bytes");
    sluice_trace_free(t);

    n = (size_t)sprintf(buf, "policy throttle interval=1\n0 pending ");
    memset(buf + n, 'k', SLUICE_KEY_MAX + 1);
    n += SLUICE_KEY_MAX + 1;
    expect_error_n(buf, n, 2, "key too long");
    free(buf);
}

static void test_characters(void) {
    static const char nul_in_token[] = "policy audit interval=1\n0 call A a\0b\n";
    static const char nul_in_comment[] = "policy audit interval=1 # x\0y\n";
    static const char nul_first[] = "\0";

    expect_error_n(nul_in_token, sizeof nul_in_token - 1, 2, "bad character 0x00");
    expect_error_n(nul_in_comment, sizeof nul_in_comment - 1, 1, "bad character 0x00");
    expect_error_n(nul_first, 1, 1, "bad character 0x00");
    expect_error("policy audit interval=1\n0 call A \x01\n", 2, "bad character 0x01");
    expect_error("policy audit interval=1\n0 call A \x7f\n", 2, "bad character 0x7f");
    expect_error("policy audit interval=1\n0 call A \xc3\xa9\n", 2, "bad character 0xc3");
    expect_error("policy audit interval=1\n0 call A a\rb\n", 2, "bad character 0x0d");
    expect_error("policy audit interval=1\r\r\n", 1, "bad character 0x0d");
    expect_error("policy audit interval=1\n\v\n", 2, "bad character 0x0b");
    expect_error("policy audit interval=1\n\f\n", 2, "bad character 0x0c");
    /* A UTF-8 byte order mark is not ASCII. */
    expect_error("\xef\xbb\xbfpolicy audit interval=1\n", 1, "bad character 0xef");
    /* Comments may hold UTF-8 and control characters other than NUL. */
    accept("# D\xc3\xa9"
           "bounce \xe2\x80\x94 a comment\x01\r\npolicy audit interval=1 # \x7f\n");
}

static void test_accepted(void) {
    sluice_trace_t *t;

    /* Defaults. */
    t = expect_ok("policy throttle interval=100");
    CHECK(POL(t).kind == SLUICE_THROTTLE && (uint64_t)POL(t).interval_ns / MS == 100 && POL(t).leading &&
              POL(t).trailing && POL(t).pick == SLUICE_PICK_LATEST && sluice_trace_step_count(t) == 0,
          "throttle defaults");
    sluice_trace_free(t);
    t = expect_ok("policy audit interval=0\n");
    CHECK(POL(t).kind == SLUICE_AUDIT && (uint64_t)POL(t).interval_ns / MS == 0, "audit");
    sluice_trace_free(t);
    t = expect_ok("policy debounce interval=100\n");
    CHECK(POL(t).kind == SLUICE_DEBOUNCE && !POL(t).leading && POL(t).trailing && !POL(t).has_max_wait,
          "debounce defaults");
    sluice_trace_free(t);
    t = expect_ok("policy rate per=1000 limit=10\n");
    CHECK(POL(t).kind == SLUICE_RATE && POL(t).limit == 10 && (uint64_t)POL(t).per_ns / MS == 1000 &&
              POL(t).burst == 10,
          "rate defaults");
    sluice_trace_free(t);

    /* Every option, in a free order. */
    t = expect_ok("policy throttle pick=first trailing=false leading=true interval=0\n");
    CHECK(POL(t).pick == SLUICE_PICK_FIRST && !POL(t).trailing && POL(t).leading &&
              (uint64_t)POL(t).interval_ns / MS == 0,
          "throttle options");
    sluice_trace_free(t);
    t = expect_ok("policy debounce maxwait=250 trailing=true leading=true interval=100\n");
    CHECK(POL(t).has_max_wait && (uint64_t)POL(t).max_wait_ns / MS == 250 && POL(t).leading, "debounce options");
    sluice_trace_free(t);
    t = expect_ok("policy debounce interval=0 maxwait=0 leading=true trailing=false\n");
    CHECK(POL(t).has_max_wait && (uint64_t)POL(t).max_wait_ns / MS == 0 && (uint64_t)POL(t).interval_ns / MS == 0,
          "debounce zero");
    sluice_trace_free(t);
    t = expect_ok("policy rate burst=3 limit=2 per=100\n");
    CHECK(POL(t).burst == 3 && POL(t).limit == 2 && (uint64_t)POL(t).per_ns / MS == 100, "rate options");
    sluice_trace_free(t);
}

static void test_layout(void) {
    sluice_trace_t *t;
    static const char input[] = "# header comment\r\n"
                                "\r\n"
                                "  \tpolicy\t debounce   interval=100\tmaxwait=250 # trailing comment\r\n"
                                "0 call A a\n"
                                "\t 007\tcall\t\tA   b#comment right after\n"
                                "   # indented comment\n"
                                "7 call B !$%&'()*+,-./:;<=>?@[\\]^_`{|}~\n"
                                "30 flush A\r\n"
                                "30 pending B\n"
                                "40 cancel B\n"
                                "1000 close discard";
    t = expect_ok(input);
    CHECK(sluice_trace_step_count(t) == 7, "nsteps %zu", sluice_trace_step_count(t));
    CHECK(!sluice_trace_is_v2(t), "a v1 trace");
    CHECK(step_is(t, 0, 0, SLUICE_TRACE_CALL, "A", "a"), "step 0");
    CHECK(step_is(t, 1, 7, SLUICE_TRACE_CALL, "A", "b"), "step 1");
    CHECK(step_is(t, 2, 7, SLUICE_TRACE_CALL, "B", "!$%&'()*+,-./:;<=>?@[\\]^_`{|}~"), "step 2");
    CHECK(step_is(t, 3, 30, SLUICE_TRACE_FLUSH, "A", NULL), "step 3");
    CHECK(step_is(t, 4, 30, SLUICE_TRACE_PENDING, "B", NULL), "step 4");
    CHECK(step_is(t, 5, 40, SLUICE_TRACE_CANCEL, "B", NULL), "step 5");
    CHECK(step_is(t, 6, 1000, SLUICE_TRACE_CLOSE, NULL, NULL) && step_at(t, 6).close_mode == SLUICE_CLOSE_DISCARD,
          "step 6");
    CHECK(sluice_trace_step_count(t) == 7 && step_at(t, 0).line == 4 && step_at(t, 1).line == 5 &&
              step_at(t, 6).line == 11,
          "step lines");
    sluice_trace_free(t);

    /* close drain, then only blanks and comments. */
    t = expect_ok("policy throttle interval=10\n5 close drain\n\n# done\n   \n");
    CHECK(sluice_trace_step_count(t) == 1 && step_at(t, 0).verb == SLUICE_TRACE_CLOSE &&
              step_at(t, 0).close_mode == SLUICE_CLOSE_DRAIN,
          "close drain");
    sluice_trace_free(t);

    /* A last line ending in a lone CR (CRLF cut short) is accepted. */
    t = expect_ok("policy throttle interval=10\r\n5 call K v\r");
    CHECK(sluice_trace_step_count(t) == 1 && step_is(t, 0, 5, SLUICE_TRACE_CALL, "K", "v"), "final CR");
    sluice_trace_free(t);

    /* Line numbers count CRLF lines once. */
    expect_error("policy throttle interval=10\r\n\r\n\r\n1 call K\r\n", 4, "missing field");
    /* A final line without newline is still a line. */
    expect_error("policy throttle interval=10\n1 call K", 2, "missing field");
}

/* ------------------------------------------------------------------ */
/* Runner                                                              */
/* ------------------------------------------------------------------ */

struct lines {
    char **v;
    size_t n;
};

static void split_lines(char *text, struct lines *out) {
    size_t cap = 16;
    out->v = malloc(cap * sizeof *out->v);
    out->n = 0;
    for (char *p = text; out->v && *p;) {
        char *nl = strchr(p, '\n');
        if (nl) *nl = '\0';
        if (out->n == cap) {
            cap *= 2;
            out->v = realloc(out->v, cap * sizeof *out->v);
            if (out->v == NULL) break;
        }
        out->v[out->n++] = p;
        if (!nl) break;
        p = nl + 1;
    }
    if (out->v == NULL) exit(1);
}

/* The KEY field of an output line (the third), as a length. */
static size_t key_of(const char *line, const char **key) {
    const char *p = strchr(line, ' ');
    const char *q;
    p = p ? strchr(p + 1, ' ') : NULL;
    if (!p) {
        *key = line;
        return 0;
    }
    p++;
    q = strchr(p, ' ');
    *key = p;
    return q ? (size_t)(q - p) : strlen(p);
}

static int key_cmp(const char *a, const char *b) {
    const char *ka, *kb;
    size_t na = key_of(a, &ka), nb = key_of(b, &kb);
    int c = memcmp(ka, kb, na < nb ? na : nb);
    return c ? c : (na > nb) - (na < nb);
}

/* Stable sort by key: keeps each key's lines in their order. */
static void sort_by_key(struct lines *l) {
    for (size_t i = 1; i < l->n; i++) {
        char *x = l->v[i];
        size_t j = i;
        while (j > 0 && key_cmp(l->v[j - 1], x) > 0) {
            l->v[j] = l->v[j - 1];
            j--;
        }
        l->v[j] = x;
    }
}

struct collected {
    char *text; /* every line + '\n' */
    size_t len, cap;
    const sluice_trace_t *t;
    size_t count;
};

/* on_output: appends the text, and checks that the fields say what the text says. */
static void collect(void *user, const sluice_trace_output_t *o) {
    struct collected *c = user;
    char head[64];
    size_t need = o->text_len + 1;
    sluice_trace_step_t st = step_at(c->t, o->step);
    int n;

    c->count++;
    CHECK(strlen(o->text) == o->text_len, "text NUL-terminated at text_len");
    n = snprintf(head, sizeof head, "%" PRIu64 " %s ", o->time_ms,
                 o->kind == SLUICE_TRACE_OUT_EMIT      ? "emit"
                 : o->kind == SLUICE_TRACE_OUT_DROP    ? "drop"
                 : o->kind == SLUICE_TRACE_OUT_DISCARD ? "discard"
                 : o->kind == SLUICE_TRACE_OUT_PENDING ? "pending"
                                                       : "quota");
    CHECK(o->text_len > (size_t)n && memcmp(o->text, head, (size_t)n) == 0, "line '%s' starts with '%s'", o->text,
          head);
    CHECK(o->key_len == st.key_len && memcmp(o->key, st.key, st.key_len) == 0 && o->text_len > (size_t)n + o->key_len &&
              memcmp(o->text + n, o->key, o->key_len) == 0 && o->text[(size_t)n + o->key_len] == ' ',
          "key of '%s'", o->text);
    if (o->kind <= SLUICE_TRACE_OUT_DISCARD) {
        CHECK(st.verb == SLUICE_TRACE_CALL && o->value_len == st.value_len &&
                  memcmp(o->value, st.value, st.value_len) == 0 &&
                  o->text_len == (size_t)n + o->key_len + 1 + o->value_len &&
                  memcmp(o->text + n + o->key_len + 1, o->value, o->value_len) == 0,
              "value of '%s'", o->text);
        if (o->has_successor) {
            sluice_trace_step_t r = step_at(c->t, o->successor_step);
            CHECK(o->kind == SLUICE_TRACE_OUT_DROP && r.verb == SLUICE_TRACE_CALL &&
                      r.value_len == o->successor_value_len && memcmp(r.value, o->successor_value, r.value_len) == 0 &&
                      o->successor_step > o->step,
                  "successor of '%s'", o->text);
        }
    } else if (o->kind == SLUICE_TRACE_OUT_PENDING) {
        CHECK(st.verb == SLUICE_TRACE_PENDING && o->value == NULL &&
                  strcmp(o->text + n + o->key_len + 1, o->yes ? "yes" : "no") == 0,
              "pending '%s'", o->text);
    } else {
        char tail[128];
        char retry[24];
        if (o->retry_never)
            snprintf(retry, sizeof retry, "never");
        else
            snprintf(retry, sizeof retry, "%" PRIu64, o->retry_ms);
        int at = 0;
        if (o->policy_name) at = snprintf(tail, sizeof tail, "policy=%s ", o->policy_name);
        snprintf(tail + at, sizeof tail - (size_t)at, "remaining=%" PRIu64 " full=%" PRIu64 " retry=%s", o->remaining,
                 o->full_ms, retry);
        CHECK(st.verb == SLUICE_TRACE_QUOTA && strcmp(o->text + n + o->key_len + 1, tail) == 0 &&
                  o->retry_never == (o->retry_ms == SLUICE_TRACE_NEVER),
              "quota '%s' vs fields '%s'", o->text, tail);
    }
    while (c->len + need + 1 > c->cap) {
        c->cap = c->cap ? 2 * c->cap : 256;
        c->text = realloc(c->text, c->cap);
        if (c->text == NULL) exit(1);
    }
    memcpy(c->text + c->len, o->text, o->text_len);
    c->len += o->text_len;
    c->text[c->len++] = '\n';
    c->text[c->len] = '\0';
}

/* Runs `input` and compares each key's output lines, in order, with `expected`. */
static void expect_run(const char *name, const char *input, const char *expected) {
    sluice_trace_t *t;
    sluice_trace_run_options_t opt;
    sluice_trace_run_result_t res;
    struct collected c;
    char *got, *want;
    int rc;
    bool same;
    struct lines lg, lw;

    t = expect_ok(input);
    memset(&c, 0, sizeof c);
    c.t = t;
    memset(&opt, 0, sizeof opt);
    opt.on_output = collect;
    opt.user = &c;
    opt.check_invariants = true;
    opt.max_advances = 1000000;
    rc = sluice_trace_run(t, &opt, &res);
    CHECK(rc == SLUICE_OK, "%s: run failed (%d): %s", name, rc, res.message);
    CHECK(res.lines == c.count, "%s: %" PRIu64 " lines counted, %zu delivered", name, res.lines, c.count);
    sluice_trace_free(t);
    if (c.text == NULL) c.text = calloc(1, 1);
    got = strdup(c.text);
    want = strdup(expected);
    if (got == NULL || want == NULL) exit(1);
    split_lines(got, &lg);
    split_lines(want, &lw);
    sort_by_key(&lg);
    sort_by_key(&lw);
    same = lg.n == lw.n;
    for (size_t i = 0; same && i < lg.n; i++) same = strcmp(lg.v[i], lw.v[i]) == 0;
    CHECK(same, "%s: output differs (compared per key).\n--- got:\n%s--- want:\n%s", name, c.text, expected);
    free(lg.v);
    free(lw.v);
    free(got);
    free(want);
    free(c.text);
}

static void test_runs(void) {
    /* The small examples of the format description. */
    expect_run("throttle-basic", "policy throttle interval=100\n0 call A a\n50 call A b\n120 call A c\n",
               "0 emit A a\n100 emit A b\n200 emit A c\n");
    expect_run("audit-basic", "policy audit interval=100\n0 call A a\n50 call A b\n120 call A c\n",
               "50 drop A a\n100 emit A b\n220 emit A c\n");
    expect_run("debounce-leading-both",
               "policy debounce interval=100 leading=true trailing=true\n"
               "0 call A a\n300 call B x\n350 call B y\n",
               "0 emit A a\n300 emit B x\n450 emit B y\n");
    expect_run("debounce-maxwait",
               "policy debounce interval=100 maxwait=250\n"
               "0 call K v0\n50 call K v50\n100 call K v100\n150 call K v150\n"
               "200 call K v200\n250 call K v250\n300 call K v300\n",
               "50 drop K v0\n100 drop K v50\n150 drop K v100\n200 drop K v150\n"
               "250 emit K v200\n300 drop K v250\n400 emit K v300\n");
    expect_run("keys-and-ops",
               "policy debounce interval=100\n0 call A a\n10 call B b\n20 pending A\n30 flush A\n"
               "40 cancel B\n50 pending B\n60 call C c\n70 close discard\n",
               "20 pending A yes\n30 emit A a\n40 drop B b\n50 pending B no\n70 discard C c\n");

    /* More, derived from semantics.md. */
    expect_run("throttle trailing only",
               "policy throttle interval=100 leading=false\n0 call A a\n50 call A b\n120 call A c\n",
               "50 drop A a\n100 emit A b\n200 emit A c\n");
    expect_run("throttle pick first", "policy throttle interval=100 pick=first\n0 call A a\n10 call A b\n20 call A c\n",
               "0 emit A a\n20 drop A c\n100 emit A b\n");
    expect_run("throttle leading only",
               "policy throttle interval=100 trailing=false\n0 call A a\n10 call A b\n100 call A c\n",
               "0 emit A a\n10 drop A b\n100 emit A c\n");
    expect_run("pass-through", "policy debounce interval=0\n0 call A a\n0 call A b\n5 call A c\n",
               "0 emit A a\n0 emit A b\n5 emit A c\n");
    expect_run("rate",
               "policy rate limit=2 per=100\n0 call A a\n0 call A b\n0 call A c\n50 call A d\n"
               "100 call A e\n100 pending A\n100 flush A\n",
               "0 emit A a\n0 emit A b\n0 drop A c\n50 emit A d\n100 emit A e\n100 pending A no\n");
    expect_run("rate cancel", "policy rate limit=1 per=100\n0 call A a\n10 call A b\n20 cancel A\n30 call A c\n",
               "0 emit A a\n10 drop A b\n30 emit A c\n");
    expect_run("close drain", "policy debounce interval=100\n0 call A a\n10 call B b\n50 close drain\n",
               "50 emit A a\n50 emit B b\n");
    expect_run("timers before close", "policy audit interval=100\n0 call A a\n100 close discard\n", "100 emit A a\n");
    expect_run("no steps", "policy audit interval=100\n", "");
    expect_run("largest times",
               "policy throttle interval=1000000000000\n"
               "10000000000000 call A a\n10000000000000 call A b\n",
               "10000000000000 emit A a\n11000000000000 emit A b\n");
    expect_run("largest debounce",
               "policy debounce interval=1000000000000 maxwait=1000000000000\n"
               "10000000000000 call A a\n10000000000000 call A b\n",
               "10000000000000 drop A a\n11000000000000 emit A b\n");
}

static void test_v2_parse(void) {
    const char *rate = "policy rate limit=1 per=10 burst=3\n";
    char buf[4096];
    sluice_trace_t *t;
    sluice_trace_step_t st;

#define WITH(pol, body) (snprintf(buf, sizeof buf, "%s%s", pol, body), buf)
    t = expect_ok(WITH(rate, "0 call A a\n1 call A b cost=1\n2\tcall A c\tcost=1000000000000 # max\n"
                             "3 quota A\n4 quota B cost=007\n5 call A cost=5\n"));
    CHECK(sluice_trace_is_v2(t) && sluice_trace_step_count(t) == 6, "v2 steps");
    st = step_at(t, 0);
    CHECK(st.cost == 1 && !st.has_cost && st.line == 2, "call without cost");
    st = step_at(t, 1);
    CHECK(st.cost == 1 && st.has_cost, "cost=1 written");
    st = step_at(t, 2);
    CHECK(st.cost == SLUICE_TRACE_COUNT_MAX && st.has_cost && step_is(t, 2, 2, SLUICE_TRACE_CALL, "A", "c"),
          "largest cost");
    st = step_at(t, 3);
    CHECK(step_is(t, 3, 3, SLUICE_TRACE_QUOTA, "A", NULL) && st.cost == 1 && !st.has_cost, "quota");
    st = step_at(t, 4);
    CHECK(step_is(t, 4, 4, SLUICE_TRACE_QUOTA, "B", NULL) && st.cost == 7 && st.has_cost, "quota cost");
    /* The fourth field of a call is its VALUE, whatever it looks like. */
    st = step_at(t, 5);
    CHECK(step_is(t, 5, 5, SLUICE_TRACE_CALL, "A", "cost=5") && st.cost == 1 && !st.has_cost, "value cost=5");
    CHECK(sluice_trace_step(t, 6, &st) == SLUICE_EINVAL, "index out of range");
    sluice_trace_free(t);

    /* A v1 rate trace is not v2; a quota line alone makes it v2. */
    t = expect_ok(WITH(rate, "0 call A a\n"));
    CHECK(!sluice_trace_is_v2(t), "v1");
    sluice_trace_free(t);
    t = expect_ok(WITH("policy throttle interval=5\n", "0 call A cost=5\n"));
    CHECK(!sluice_trace_is_v2(t) && step_at(t, 0).cost == 1, "throttle value cost=5");
    sluice_trace_free(t);

    /* Errors. */
    expect_error(WITH("policy throttle interval=5\n", "0 call A a cost=2\n"), 2, "cost needs a rate policy");
    expect_error(WITH("policy debounce interval=5\n", "0 call A a cost=1\n"), 2, "cost needs a rate policy");
    expect_error(WITH("policy audit interval=5\n", "0 call A a cost=abc\n"), 2, "cost needs a rate policy");
    expect_error(WITH("policy throttle interval=5\n", "0 quota A\n"), 2, "quota needs a rate policy");
    expect_error(WITH("policy audit interval=5\n", "0 quota\n"), 2, "quota needs a rate policy");
    expect_error(WITH("policy debounce interval=5\n", "0 quota A cost=1\n"), 2, "quota needs a rate policy");
    expect_error(WITH(rate, "0 call A a cost=0\n"), 2, "cost below 1");
    expect_error(WITH(rate, "0 call A a cost=0000\n"), 2, "cost below 1");
    expect_error(WITH(rate, "0 quota A cost=0\n"), 2, "cost below 1");
    expect_error(WITH(rate, "0 call A a cost=1000000000001\n"), 2, "number too large");
    expect_error(WITH(rate, "0 quota A cost=99999999999999999999999\n"), 2, "number too large");
    expect_error(WITH(rate, "0 call A a cost=-1\n"), 2, "negative cost");
    expect_error(WITH(rate, "0 call A a cost=abc\n"), 2, "bad number 'abc'");
    expect_error(WITH(rate, "0 call A a cost=+1\n"), 2, "bad number '+1'");
    expect_error(WITH(rate, "0 call A a cost=1.5\n"), 2, "bad number '1.5'");
    expect_error(WITH(rate, "0 call A a cost=1e3\n"), 2, "bad number '1e3'");
    expect_error(WITH(rate, "0 call A a cost=\n"), 2, "missing value for cost");
    expect_error(WITH(rate, "0 call A a cost=1 cost=1\n"), 2, "duplicate option 'cost'");
    expect_error(WITH(rate, "0 quota A cost=2 cost=x\n"), 2, "duplicate option 'cost'");
    expect_error(WITH(rate, "0 call A a cost=1 x\n"), 2, "extra field 'x'");
    expect_error(WITH(rate, "0 call A a x\n"), 2, "extra field 'x'");
    expect_error(WITH(rate, "0 call A a Cost=1\n"), 2, "extra field 'Cost=1'");
    expect_error(WITH(rate, "0 call A a cost = 1\n"), 2, "extra field 'cost'");
    expect_error(WITH(rate, "0 call A a costs=1\n"), 2, "extra field 'costs=1'");
    expect_error(WITH(rate, "0 quota A B\n"), 2, "extra field 'B'");
    expect_error(WITH(rate, "0 quota\n"), 2, "missing field");
    expect_error(WITH(rate, "0 cancel A cost=1\n"), 2, "extra field 'cost=1'");
    expect_error(WITH(rate, "0 pending A cost=1\n"), 2, "extra field 'cost=1'");
    expect_error(WITH(rate, "0 Quota A\n"), 2, "unknown verb 'Quota'");
    expect_error(WITH(rate, "5 call A a\n4 quota A\n"), 3, "time goes backwards");
    expect_error(WITH(rate, "5 close drain\n6 quota A\n"), 3, "line after close");
#undef WITH
}

static void test_v2_runs(void) {
    /* limit=1 per=1000 burst=3: T = 1000 ms. a (cost 3) at 0: new = 3000,
     * 3000 - 0 <= 3000: emit, TAT 3000. quota at 0: remaining
     * floor((0 + 3000 - 3000) / 1000) = 0, full 3000, retry(1) =
     * max(0, 3000 + 1000 - 3000) = 1000. b at 0: 4000 - 0 > 3000: drop.
     * quota at 1000: remaining 1, full 3000, retry 1000 (now). */
    expect_run("cost and quota",
               "policy rate limit=1 per=1000 burst=3\n0 call A a cost=3\n0 quota A\n0 call A b\n"
               "1000 quota A\n1000 quota A cost=4\n",
               "0 emit A a\n0 quota A remaining=0 full=3000 retry=1000\n0 drop A b\n"
               "1000 quota A remaining=1 full=3000 retry=1000\n"
               "1000 quota A remaining=1 full=3000 retry=never\n");
    /* A peek creates no state: quota of an unknown key, then a fresh call. */
    expect_run("peek", "policy rate limit=2 per=100\n7 quota K cost=2\n7 call K a cost=2\n7 quota K\n",
               "7 quota K remaining=2 full=7 retry=7\n7 emit K a\n7 quota K remaining=0 full=107 retry=57\n");
}

/* Format v3: several quotas and plans in the header, plan= on steps. */
static void test_v3_parse(void) {
    /* the errors, each on the line that makes it certain */
    expect_error("policy rate limit=1 per=10 name=a\npolicy rate limit=2 per=10\n", 2, "quota needs a name");
    expect_error("policy rate limit=1 per=10\npolicy rate limit=2 per=10 name=b\n", 2, "quota needs a name");
    expect_error("policy rate limit=1 per=10 name=a\npolicy rate limit=2 per=10 name=a\n", 2, "duplicate quota 'a'");
    expect_error("policy rate limit=1 per=10 name=a\npolicy throttle interval=1\n", 2,
                 "only rate policies can be combined");
    expect_error("policy throttle interval=1\npolicy rate limit=1 per=10 name=a\n", 2,
                 "only rate policies can be combined");
    expect_error("plan p\npolicy debounce interval=1\n", 2, "only rate policies can be combined");
    expect_error("policy throttle interval=1 name=a\n", 1, "unknown option 'name'");
    expect_error("policy rate limit=1 per=1 name=\n", 1, "missing value for name");
    expect_error("policy rate limit=1 per=1 name=a/b\n", 1, "bad name 'a/b'");
    expect_error("policy rate limit=1 per=1 name=abcdefghijklmnopqrstuvwxyz0123456\n", 1,
                 "bad name 'abcdefghijklmnopqrstuvwxyz0123456'");
    expect_error("plan a\nplan b\npolicy rate limit=1 per=1\n", 1, "plan without quota");
    expect_error("plan a\npolicy rate limit=1 per=1\nplan b\n0 call A x\n", 3, "plan without quota");
    expect_error("plan a\n", 1, "plan without quota");
    expect_error("policy rate limit=1 per=1\nplan a\n", 2, "quota outside a plan");
    expect_error("plan a\npolicy rate limit=1 per=1\nplan a\n", 3, "duplicate plan 'a'");
    expect_error("plan\n", 1, "missing field");
    expect_error("plan a b\n", 1, "extra field 'b'");
    expect_error("plan a.b-c_D9!\n", 1, "bad name 'a.b-c_D9!'");
    expect_error("plan a\npolicy rate limit=1 per=1\n0 call A x\nplan b\n", 4, "plan after the first step");
    expect_error("plan a\npolicy rate limit=1 per=1\n0 call A x\npolicy rate limit=1 per=1\n", 4, "duplicate policy");
    expect_error("plan a\npolicy rate limit=1 per=1\n0 call A x plan=b\n", 3, "unknown plan 'b'");
    expect_error("policy rate limit=1 per=1\n0 call A x plan=default plan=default\n", 2, "duplicate option 'plan'");
    expect_error("policy rate limit=1 per=1\n0 quota A plan=\n", 2, "missing value for plan");
    expect_error("policy throttle interval=1\n0 call A x plan=a\n", 2, "plan needs a rate policy");
    expect_error("policy rate limit=1 per=1\n0 call A x plan=default cost=0\n", 2, "cost below 1");
    expect_error("policy rate limit=1 per=1\n0 call A x plan=default bogus\n", 2, "extra field 'bogus'");
    /* nine quotas in a plan, 65 plans */
    static char big[32768];
    size_t n = 0;
    n += (size_t)snprintf(big + n, sizeof big - n, "plan p\n");
    for (int i = 0; i < 9; i++)
        n += (size_t)snprintf(big + n, sizeof big - n, "policy rate limit=1 per=1 name=q%d\n", i);
    expect_error(big, 10, "too many quotas");
    n = 0;
    for (int i = 0; i < 65; i++)
        n += (size_t)snprintf(big + n, sizeof big - n, "plan p%d\npolicy rate limit=1 per=1\n", i);
    expect_error(big, 129, "too many plans");
    /* 64 plans of 8 quotas are fine */
    n = 0;
    for (int i = 0; i < 64; i++) {
        n += (size_t)snprintf(big + n, sizeof big - n, "plan p%d\n", i);
        for (int j = 0; j < 8 && n < sizeof big - 64; j++)
            n += (size_t)snprintf(big + n, sizeof big - n, "policy rate limit=1 per=1 name=q%d\n", j);
    }
    CHECK(n < sizeof big - 64, "the 64-plan trace fits");
    sluice_trace_t *t = expect_ok(big);
    const sluice_plans_t *pl = sluice_trace_plans(t);
    CHECK(pl && pl->nplans == 64 && pl->plans[63].nquotas == 8 && strcmp(pl->plans[63].name, "p63") == 0,
          "64 plans of 8 quotas");
    sluice_trace_free(t);
    /* the table, and plan= on the steps */
    t = expect_ok("plan free\npolicy rate limit=1 per=1000 burst=3 name=s\nplan pro\n"
                  "policy rate limit=10 per=1000 name=s\npolicy rate limit=5 per=60000 name=m\n"
                  "0 call A a plan=pro cost=2\n0 quota A\n");
    pl = sluice_trace_plans(t);
    CHECK(pl && pl->nplans == 2 && pl->plans[1].nquotas == 2 && pl->plans[1].quotas[1].per_ns == 60000000000,
          "two plans");
    CHECK(sluice_trace_policy(t).limit == 1 && sluice_trace_policy(t).burst == 3, "the policy: free's quota");
    sluice_trace_step_t st = step_at(t, 0);
    CHECK(st.plan == 1 && st.has_plan && st.cost == 2, "call under pro");
    st = step_at(t, 1);
    CHECK(st.plan == 0 && !st.has_plan, "quota under the default plan");
    sluice_trace_free(t);
    /* one rate quota, no plan line: no table (run as before); plan=default names it */
    t = expect_ok("policy rate limit=1 per=10 name=only\n0 call A a plan=default\n");
    CHECK(sluice_trace_plans(t) == NULL, "a lone quota needs no table");
    sluice_trace_free(t);
    t = expect_ok("policy rate limit=1 per=10 name=a\npolicy rate limit=2 per=10 name=b\n");
    pl = sluice_trace_plans(t);
    CHECK(pl && pl->nplans == 1 && strcmp(pl->plans[0].name, "default") == 0 && pl->plans[0].nquotas == 2,
          "several quotas: the implicit plan 'default'");
    sluice_trace_free(t);
}

static void test_v3_runs(void) {
    /* second 5/1000 and minute 20/60000 burst 8 (the spec's example):
     * a1 cost 4 admitted; a2 cost 2 refused by second (TAT 800 + 400 -
     * 0 > 1000), charging neither */
    expect_run("several quotas",
               "policy rate limit=5 per=1000 name=second\npolicy rate limit=20 per=60000 burst=8 name=minute\n"
               "0 call A a1 cost=4\n0 call A a2 cost=2\n0 quota A\n",
               "0 emit A a1\n0 drop A a2\n0 quota A remaining=1 full=12000 retry=0\n"
               "0 quota A policy=second remaining=1 full=800 retry=0\n"
               "0 quota A policy=minute remaining=4 full=12000 retry=0\n");
    /* a quota of a one-quota plan prints no per-quota line; reading under
     * a converts b's x (TAT 105, T 100) to a's x (T 50): 5 + 100 * 50 / 100
     * = 55, remaining floor((5 + 100 - 55) / 50) = 1, retry max(5, 55 + 50
     * - 100) = 5; a quota of another name starts fresh */
    expect_run("one-quota plan",
               "plan a\npolicy rate limit=2 per=100 name=x\nplan b\npolicy rate limit=1 per=100 name=x\n"
               "plan c\npolicy rate limit=2 per=100 name=y\n5 call K v plan=b\n5 quota K plan=a\n5 quota K plan=c\n",
               "5 emit K v\n5 quota K remaining=1 full=55 retry=5\n5 quota K remaining=2 full=5 retry=5\n");
}

/* Records the drop lines' successor fields. */
struct drops {
    size_t n;
    bool has[8];
    size_t step[8];
    char value[8][8];
    char succ[8][8];
};

static void record_drops(void *user, const sluice_trace_output_t *o) {
    struct drops *d = user;
    if (o->kind != SLUICE_TRACE_OUT_DROP || d->n == 8) return;
    d->has[d->n] = o->has_successor;
    d->step[d->n] = o->has_successor ? o->successor_step : SIZE_MAX;
    snprintf(d->value[d->n], sizeof d->value[0], "%.*s", (int)o->value_len, o->value);
    snprintf(d->succ[d->n], sizeof d->succ[0], "%.*s", o->has_successor ? (int)o->successor_value_len : 0,
             o->has_successor ? o->successor_value : "");
    d->n++;
}

static void test_api(void) {
    sluice_trace_t *t = (sluice_trace_t *)&t;
    sluice_trace_error_t err;
    sluice_trace_run_options_t opt;
    sluice_trace_run_result_t res;
    struct drops d;
    sluice_policy_t pol;

    /* Bad arguments. */
    CHECK(sluice_trace_parse("policy audit interval=1", 23, NULL, &err) == SLUICE_EINVAL, "out NULL");
    CHECK(sluice_trace_parse(NULL, 3, &t, &err) == SLUICE_EINVAL && t == NULL, "text NULL");
    CHECK(sluice_trace_parse(NULL, 0, &t, NULL) == SLUICE_ESYNTAX && t == NULL, "empty, no err");
    CHECK(sluice_trace_run(NULL, NULL, &res) == SLUICE_EINVAL && res.message[0] != '\0', "run NULL");
    CHECK(sluice_trace_run_realtime(NULL, NULL, NULL) == SLUICE_EINVAL, "realtime NULL");
    CHECK(sluice_trace_step_count(NULL) == 0 && !sluice_trace_is_v2(NULL), "NULL accessors");
    sluice_trace_free(NULL);
    CHECK(strncmp(sluice_strerror(SLUICE_ESYNTAX), "malformed input", 15) == 0 && sluice_strerror(12345) != NULL,
          "strerror");

    /* The policy as the core's policy, in ns, defaults applied. */
    t = expect_ok("policy debounce interval=100 maxwait=250 leading=true\n");
    pol = sluice_trace_policy(t);
    CHECK(pol.kind == SLUICE_DEBOUNCE && pol.interval_ns == 100 * (int64_t)MS && pol.has_max_wait &&
              pol.max_wait_ns == 250 * (int64_t)MS && pol.leading && pol.trailing,
          "debounce policy in ns");
    sluice_trace_free(t);
    t = expect_ok("policy rate limit=3 per=1000\n");
    pol = sluice_trace_policy(t);
    CHECK(pol.kind == SLUICE_RATE && pol.limit == 3 && pol.per_ns == 1000 * (int64_t)MS && pol.burst == 3,
          "rate policy in ns, burst = limit");
    /* batch_size: any value in manual runs (test_batch compares the
     * outputs); real-loop runs take 0 and 1 only. */
    memset(&opt, 0, sizeof opt);
    opt.batch_size = 1;
    CHECK(sluice_trace_run(t, &opt, &res) == SLUICE_OK, "batch_size 1");
    opt.batch_size = 2;
    CHECK(sluice_trace_run(t, &opt, &res) == SLUICE_OK, "batch_size 2: %s", res.message);
    CHECK(sluice_trace_run_realtime(t, &opt, &res) == SLUICE_EINVAL && res.message[0] != '\0', "realtime batch_size 2");
    sluice_trace_free(t);

    /* A superseded value names its successor; a suppressed or cancelled one does not. */
    t = expect_ok("policy throttle interval=100\n0 call A a\n10 call A b\n20 call A c\n30 cancel A\n"
                  "40 call A d\n");
    memset(&d, 0, sizeof d);
    memset(&opt, 0, sizeof opt);
    opt.on_output = record_drops;
    opt.user = &d;
    CHECK(sluice_trace_run(t, &opt, &res) == SLUICE_OK, "run: %s", res.message);
    CHECK(d.n == 2, "two drops, got %zu", d.n);
    CHECK(strcmp(d.value[0], "b") == 0 && d.has[0] && d.step[0] == 2 && strcmp(d.succ[0], "c") == 0,
          "b replaced by c (step 2), got has %d step %zu succ '%s'", d.has[0], d.step[0], d.succ[0]);
    CHECK(strcmp(d.value[1], "c") == 0 && !d.has[1], "c cancelled: no successor");
    sluice_trace_free(t);
}

int main(void) {
    test_missing_policy();
    test_policy_errors();
    test_number_limits();
    test_step_errors();
    test_keys();
    test_characters();
    test_accepted();
    test_layout();
    test_runs();
    test_v2_parse();
    test_v2_runs();
    test_v3_parse();
    test_v3_runs();
    test_api();
    if (failures) {
        fprintf(stderr, "test_trace_parser: %d of %d checks failed\n", failures, checks);
        return 1;
    }
    printf("test_trace_parser: all %d checks passed\n", checks);
    return 0;
}
