/*
 * tracecmp — compares the output of a trace runner with an expected output
 * (trace format v3, docs/trace-format.md).
 *
 *   tracecmp EXPECTED ACTUAL     exit 0 when they match, 1 when they differ,
 *                                2 on a usage or I/O error
 *   tracecmp --self-test         checks the comparator itself
 *
 * Output lines are `TIME emit|drop|discard KEY VALUE`,
 * `TIME pending KEY yes|no` or
 * `TIME quota KEY remaining=R full=F retry=S|never` (R, F, S decimal
 * numbers without leading zeros; v3: one quota's line of a plan of several
 * has `policy=NAME` after KEY, NAME 1 to 32 of A-Z a-z 0-9 _ . -),
 * fields separated by one space. The order of
 * lines of different keys at the same instant is unspecified, so two outputs
 * match when:
 *   1. every line of both is well formed;
 *   2. times never decrease, in either file;
 *   3. they hold the same multiset of lines;
 *   4. for every key, the lines of that key appear in the same order.
 * Lines are compared as exact text. A missing final newline is tolerated.
 *
 * Plain C11, no dependencies: it is built by CMake with the C tests and
 * driven by cmake/run_vector.cmake.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* One output line; `text` is NUL-terminated inside the document's buffer. */
typedef struct line {
    const char *text;
    const char *key; /* points into a copy of the key, NUL-terminated */
    uint64_t time;
    size_t lineno; /* 1-based line number in its file */
    size_t index;  /* position among the lines of its file */
} line_t;

typedef struct doc {
    const char *name;
    char *buf;  /* the text, split in place */
    char *keys; /* the key fields, each NUL-terminated */
    line_t *lines;
    size_t count;
} doc_t;

/* Where diagnostics go; NULL keeps the comparator quiet (self-test). */
static FILE *report;

static void say(const char *fmt, ...) {
    if (report == NULL) return;
    va_list ap;
    va_start(ap, fmt);
    vfprintf(report, fmt, ap);
    va_end(ap);
}

static bool is_token_char(char c) { return c > ' ' && c <= '~' && c != '#'; }

/* "NAME=N" at *p, N decimal without a leading zero; moves *p past it. */
static bool take_number(const char **p, const char *name) {
    size_t n = strlen(name), digits = 0;
    if (strncmp(*p, name, n) != 0 || (*p)[n] != '=') return false;
    const char *q = *p + n + 1;
    while (q[digits] >= '0' && q[digits] <= '9') digits++;
    if (digits == 0 || (digits > 1 && q[0] == '0') || digits > 20) return false;
    *p = q + digits;
    return true;
}

static bool is_name_char(char c) {
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == '.' ||
           c == '-';
}

/* The tail of a quota line: "[policy=NAME ]remaining=R full=F retry=S|never". */
static const char *check_quota_tail(const char *p) {
    if (strncmp(p, "policy=", 7) == 0) {
        size_t n = 0;
        p += 7;
        while (is_name_char(p[n])) n++;
        if (n == 0 || n > 32 || p[n] != ' ')
            return "policy= must name a quota (1 to 32 of A-Z a-z 0-9 _ . -) and one space";
        p += n + 1;
    }
    if (!take_number(&p, "remaining") || *p++ != ' ') return "a quota line must go on with remaining=R and one space";
    if (!take_number(&p, "full") || *p++ != ' ') return "a quota line must go on with full=F and one space";
    if (strcmp(p, "retry=never") == 0) return NULL;
    if (!take_number(&p, "retry")) return "a quota line must end with retry=S or retry=never";
    if (*p != '\0') return "unexpected text after retry= (extra field, tab or trailing space?)";
    return NULL;
}

/* Checks one line and fills `out`. Returns NULL, or the reason it is malformed. */
static const char *parse_line(const char *text, char *key_out, line_t *out) {
    const char *p = text;
    uint64_t time = 0;
    size_t digits = 0;

    while (*p >= '0' && *p <= '9') {
        unsigned d = (unsigned)(*p - '0');
        if (time > (UINT64_MAX - d) / 10) return "time does not fit in 64 bits";
        time = time * 10 + d;
        digits++;
        p++;
    }
    if (digits == 0) return "does not start with a time";
    if (digits > 1 && text[0] == '0') return "time has a leading zero";
    if (*p != ' ') return "time is not followed by one space";
    p++;

    static const char *const verbs[] = { "emit", "drop", "discard", "pending", "quota" };
    size_t verb = 0;
    size_t vlen = 0;
    for (verb = 0; verb < 5; verb++) {
        vlen = strlen(verbs[verb]);
        if (strncmp(p, verbs[verb], vlen) == 0 && p[vlen] == ' ') break;
    }
    if (verb == 5) return "verb is not emit, drop, discard, pending or quota followed by one space";
    p += vlen + 1;

    const char *key = p;
    while (is_token_char(*p)) p++;
    size_t klen = (size_t)(p - key);
    if (klen == 0) return "missing key";
    if (*p != ' ') return "key is not followed by one space and a value";
    p++;

    if (verb == 4) {
        const char *why = check_quota_tail(p);
        if (why != NULL) return why;
        memcpy(key_out, key, klen);
        key_out[klen] = '\0';
        out->text = text;
        out->key = key_out;
        out->time = time;
        return NULL;
    }

    const char *value = p;
    while (is_token_char(*p)) p++;
    if (p == value) return "missing value";
    if (*p != '\0') return "unexpected text after the value (extra field, tab or trailing space?)";
    if (verb == 3 && strcmp(value, "yes") != 0 && strcmp(value, "no") != 0)
        return "a pending line must end with yes or no";

    memcpy(key_out, key, klen);
    key_out[klen] = '\0';
    out->text = text;
    out->key = key_out;
    out->time = time;
    return NULL;
}

static void doc_free(doc_t *doc) {
    free(doc->buf);
    free(doc->keys);
    free(doc->lines);
    memset(doc, 0, sizeof *doc);
}

/* Splits `text` (taken over: freed by doc_free) into lines and checks them.
 * Returns 0, 1 when a line is malformed, or 2 when memory runs out. */
static int doc_parse(doc_t *doc, const char *name, char *text, size_t len) {
    memset(doc, 0, sizeof *doc);
    doc->name = name;
    doc->buf = text;

    size_t max_lines = 1;
    for (size_t i = 0; i < len; i++)
        if (text[i] == '\n') max_lines++;
    doc->lines = calloc(max_lines, sizeof *doc->lines);
    doc->keys = malloc(len + 1);
    if (doc->lines == NULL || doc->keys == NULL) return 2;

    int status = 0;
    size_t lineno = 0;
    char *keys = doc->keys;
    char *p = text;
    char *end = text + len;
    while (p < end) {
        char *nl = memchr(p, '\n', (size_t)(end - p));
        char *stop = nl != NULL ? nl : end;
        lineno++;
        if (memchr(p, '\0', (size_t)(stop - p)) != NULL) {
            say("%s:%zu: line contains a NUL byte\n", name, lineno);
            status = 1;
        } else {
            *stop = '\0'; /* `end` is a NUL as well: the buffer has one spare byte */
            line_t *ln = &doc->lines[doc->count];
            const char *why = parse_line(p, keys, ln);
            if (why != NULL) {
                say("%s:%zu: malformed line '%s': %s\n", name, lineno, p, why);
                status = 1;
            } else {
                ln->lineno = lineno;
                ln->index = doc->count;
                keys += strlen(keys) + 1;
                doc->count++;
            }
        }
        p = stop + 1;
    }
    return status;
}

/* Time order within one file. */
static bool check_times(const doc_t *doc) {
    for (size_t i = 1; i < doc->count; i++) {
        if (doc->lines[i].time < doc->lines[i - 1].time) {
            say("%s:%zu: time goes backwards: '%s' after '%s'\n", doc->name, doc->lines[i].lineno, doc->lines[i].text,
                doc->lines[i - 1].text);
            return false;
        }
    }
    return true;
}

static int by_text(const void *a, const void *b) {
    const line_t *x = *(const line_t *const *)a;
    const line_t *y = *(const line_t *const *)b;
    int c = strcmp(x->text, y->text);
    if (c != 0) return c;
    return (x->index > y->index) - (x->index < y->index);
}

static int by_key(const void *a, const void *b) {
    const line_t *x = *(const line_t *const *)a;
    const line_t *y = *(const line_t *const *)b;
    int c = strcmp(x->key, y->key);
    if (c != 0) return c;
    return (x->index > y->index) - (x->index < y->index);
}

static const line_t **sorted(const doc_t *doc, int (*cmp)(const void *, const void *)) {
    const line_t **v = malloc((doc->count ? doc->count : 1) * sizeof *v);
    if (v == NULL) return NULL;
    for (size_t i = 0; i < doc->count; i++) v[i] = &doc->lines[i];
    qsort(v, doc->count, sizeof *v, cmp);
    return v;
}

enum { SHOW_MAX = 20 };

/* Same multiset of lines. Returns 1 if equal, 0 if not, -1 without memory. */
static int check_multiset(const doc_t *want, const doc_t *got) {
    const line_t **a = sorted(want, by_text);
    const line_t **b = sorted(got, by_text);
    if (a == NULL || b == NULL) {
        free(a);
        free(b);
        return -1;
    }
    size_t i = 0, j = 0, missing = 0, extra = 0;
    while (i < want->count || j < got->count) {
        int c;
        if (i == want->count)
            c = 1;
        else if (j == got->count)
            c = -1;
        else
            c = strcmp(a[i]->text, b[j]->text);
        if (c == 0) {
            i++;
            j++;
        } else if (c < 0) {
            if (missing++ < SHOW_MAX) say("missing:    '%s' (%s:%zu)\n", a[i]->text, want->name, a[i]->lineno);
            i++;
        } else {
            if (extra++ < SHOW_MAX) say("unexpected: '%s' (%s:%zu)\n", b[j]->text, got->name, b[j]->lineno);
            j++;
        }
    }
    if (missing > SHOW_MAX || extra > SHOW_MAX) say("(%zu missing and %zu unexpected lines in all)\n", missing, extra);
    free(a);
    free(b);
    return missing == 0 && extra == 0;
}

/* Per-key order. Returns 1 if every key's lines agree, 0 if not, -1 without memory. */
static int check_per_key(const doc_t *want, const doc_t *got) {
    const line_t **a = sorted(want, by_key);
    const line_t **b = sorted(got, by_key);
    if (a == NULL || b == NULL) {
        free(a);
        free(b);
        return -1;
    }
    int ok = 1;
    size_t i = 0, j = 0, shown = 0;
    while (i < want->count || j < got->count) {
        /* The smaller of the two next keys. */
        const char *key;
        if (i == want->count)
            key = b[j]->key;
        else if (j == got->count)
            key = a[i]->key;
        else
            key = strcmp(a[i]->key, b[j]->key) <= 0 ? a[i]->key : b[j]->key;

        size_t i0 = i, j0 = j;
        while (i < want->count && strcmp(a[i]->key, key) == 0) i++;
        while (j < got->count && strcmp(b[j]->key, key) == 0) j++;
        size_t n = i - i0, m = j - j0;
        for (size_t k = 0; k < n || k < m; k++) {
            const char *x = k < n ? a[i0 + k]->text : NULL;
            const char *y = k < m ? b[j0 + k]->text : NULL;
            if (x != NULL && y != NULL && strcmp(x, y) == 0) continue;
            ok = 0;
            if (shown++ < SHOW_MAX) {
                say("key %s, line %zu of the key: want '%s', got '%s'\n", key, k + 1, x != NULL ? x : "(nothing)",
                    y != NULL ? y : "(nothing)");
            }
            break; /* the first difference of a key is the informative one */
        }
    }
    free(a);
    free(b);
    return ok;
}

static void dump(const doc_t *doc) {
    say("--- %s (%zu lines)\n", doc->name, doc->count);
    size_t n = doc->count < 200 ? doc->count : 200;
    for (size_t i = 0; i < n; i++) say("%s\n", doc->lines[i].text);
    if (n < doc->count) say("... (%zu more)\n", doc->count - n);
}

/* Compares two outputs. Takes over both buffers (each of len + 1 bytes).
 * Returns 0 (match), 1 (differ) or 2 (out of memory). */
static int compare(const char *want_name, char *want_text, size_t want_len, const char *got_name, char *got_text,
                   size_t got_len) {
    doc_t want, got;
    int pw = doc_parse(&want, want_name, want_text, want_len);
    int pg = doc_parse(&got, got_name, got_text, got_len);
    int result = 0;
    if (pw == 2 || pg == 2) {
        result = 2;
        goto done;
    }
    if (pw != 0 || pg != 0) result = 1;
    if (!check_times(&want)) result = 1;
    if (!check_times(&got)) result = 1;
    int ms = check_multiset(&want, &got);
    int pk = check_per_key(&want, &got);
    if (ms < 0 || pk < 0) {
        result = 2;
        goto done;
    }
    if (!ms || !pk) result = 1;
    if (result != 0) {
        dump(&want);
        dump(&got);
    }
done:
    doc_free(&want);
    doc_free(&got);
    return result;
}

/* Reads a whole file into a buffer with one spare byte. */
static char *read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (f == NULL) {
        fprintf(stderr, "tracecmp: cannot open %s: %s\n", path, strerror(errno));
        return NULL;
    }
    size_t cap = 4096, n = 0;
    char *buf = malloc(cap);
    while (buf != NULL) {
        n += fread(buf + n, 1, cap - n - 1, f);
        if (ferror(f)) {
            fprintf(stderr, "tracecmp: cannot read %s\n", path);
            free(buf);
            buf = NULL;
            break;
        }
        if (feof(f)) break;
        if (n + 1 == cap) {
            char *grown = realloc(buf, cap * 2);
            if (grown == NULL) {
                free(buf);
                buf = NULL;
                break;
            }
            buf = grown;
            cap *= 2;
        }
    }
    fclose(f);
    if (buf == NULL) return NULL;
    buf[n] = '\0';
    *len = n;
    return buf;
}

/* ------------------------------------------------------------------ */
/* Self-test                                                           */
/* ------------------------------------------------------------------ */

static int compare_strings(const char *want, const char *got) {
    size_t wl = strlen(want), gl = strlen(got);
    char *w = malloc(wl + 1), *g = malloc(gl + 1);
    if (w == NULL || g == NULL) {
        free(w);
        free(g);
        return 2;
    }
    memcpy(w, want, wl + 1);
    memcpy(g, got, gl + 1);
    return compare("expected", w, wl, "actual", g, gl);
}

static int self_test(void) {
    static const struct {
        const char *what;
        const char *want;
        const char *got;
        int result;
    } cases[] = {
        { "identical", "0 emit A a\n100 emit A b\n", "0 emit A a\n100 emit A b\n", 0 },
        { "both empty", "", "", 0 },
        { "no final newline", "0 emit A a\n20 pending A no\n", "0 emit A a\n20 pending A no", 0 },
        { "keys swapped at one instant", "0 emit A a\n0 emit B b\n5 drop C c\n", "0 emit B b\n0 emit A a\n5 drop C c\n",
          0 },
        { "keys interleaved at one instant", "10 drop A a\n10 emit A b\n10 emit B x\n10 pending B no\n",
          "10 emit B x\n10 drop A a\n10 pending B no\n10 emit A b\n", 0 },
        { "same key swapped at one instant", "10 drop A a\n10 emit A b\n", "10 emit A b\n10 drop A a\n", 1 },
        { "line missing", "0 emit A a\n100 emit A b\n", "0 emit A a\n", 1 },
        { "line added", "0 emit A a\n", "0 emit A a\n100 emit A b\n", 1 },
        { "expected empty, output not", "", "0 emit A a\n", 1 },
        { "duplicate lost", "0 pending A no\n0 pending A no\n", "0 pending A no\n", 1 },
        { "other value", "0 emit A a\n", "0 emit A b\n", 1 },
        { "other verb", "0 emit A a\n", "0 drop A a\n", 1 },
        { "other time", "100 emit A a\n", "101 emit A a\n", 1 },
        { "other key", "0 emit A a\n", "0 emit B a\n", 1 },
        { "key prefix is another key", "0 emit A a\n0 emit AB b\n", "0 emit AB b\n0 emit A a\n", 0 },
        { "time goes backwards across keys", "10 emit A a\n20 emit B b\n", "20 emit B b\n10 emit A a\n", 1 },
        { "expected goes backwards", "20 emit B b\n10 emit A a\n", "20 emit B b\n10 emit A a\n", 1 },
        { "missing field", "0 emit A a\n", "0 emit A\n", 1 },
        { "extra field", "0 emit A a\n", "0 emit A a x\n", 1 },
        { "double space", "0 emit A a\n", "0  emit A a\n", 1 },
        { "tab separator", "0 emit A a\n", "0\temit A a\n", 1 },
        { "trailing space", "0 emit A a\n", "0 emit A a \n", 1 },
        { "carriage return", "0 emit A a\n", "0 emit A a\r\n", 1 },
        { "blank line", "0 emit A a\n", "0 emit A a\n\n", 1 },
        { "unknown verb", "0 emit A a\n", "0 fire A a\n", 1 },
        { "bad pending answer", "0 pending A no\n", "0 pending A maybe\n", 1 },
        { "negative time", "0 emit A a\n", "-1 emit A a\n", 1 },
        { "leading zero", "10 emit A a\n", "010 emit A a\n", 1 },
        { "time overflow", "0 emit A a\n", "18446744073709551616 emit A a\n", 1 },
        { "largest time", "18446744073709551615 emit A a\n", "18446744073709551615 emit A a\n", 0 },
        { "hash in key", "0 emit A a\n", "0 emit A#1 a\n", 1 },
        { "quota lines", "0 quota A remaining=2 full=0 retry=0\n5 quota B remaining=0 full=105 retry=never\n",
          "0 quota A remaining=2 full=0 retry=0\n5 quota B remaining=0 full=105 retry=never\n", 0 },
        { "quota keys swapped at one instant", "5 quota A remaining=1 full=9 retry=5\n5 emit B b\n",
          "5 emit B b\n5 quota A remaining=1 full=9 retry=5\n", 0 },
        { "quota and call of one key swapped", "5 quota A remaining=1 full=9 retry=5\n5 emit A a\n",
          "5 emit A a\n5 quota A remaining=1 full=9 retry=5\n", 1 },
        { "other remaining", "0 quota A remaining=2 full=0 retry=0\n", "0 quota A remaining=1 full=0 retry=0\n", 1 },
        { "other full", "0 quota A remaining=2 full=0 retry=0\n", "0 quota A remaining=2 full=1 retry=0\n", 1 },
        { "never vs a time", "0 quota A remaining=2 full=0 retry=never\n", "0 quota A remaining=2 full=0 retry=0\n",
          1 },
        { "quota fields out of order", "0 quota A remaining=2 full=0 retry=0\n",
          "0 quota A full=0 remaining=2 retry=0\n", 1 },
        { "quota field missing", "0 quota A remaining=2 full=0 retry=0\n", "0 quota A remaining=2 full=0\n", 1 },
        { "quota extra field", "0 quota A remaining=2 full=0 retry=0\n", "0 quota A remaining=2 full=0 retry=0 x\n",
          1 },
        { "quota leading zero", "0 quota A remaining=2 full=0 retry=0\n", "0 quota A remaining=02 full=0 retry=0\n",
          1 },
        { "quota empty number", "0 quota A remaining=2 full=0 retry=0\n", "0 quota A remaining= full=0 retry=0\n", 1 },
        { "quota retry garbage", "0 quota A remaining=2 full=0 retry=0\n",
          "0 quota A remaining=2 full=0 retry=nevermore\n", 1 },
        { "quota lines of a plan",
          "0 quota A remaining=0 full=9 retry=5\n0 quota A policy=s remaining=0 full=4 retry=5\n"
          "0 quota A policy=day.1 remaining=7 full=9 retry=0\n",
          "0 quota A remaining=0 full=9 retry=5\n0 quota A policy=s remaining=0 full=4 retry=5\n"
          "0 quota A policy=day.1 remaining=7 full=9 retry=0\n",
          0 },
        { "quota lines of a plan swapped",
          "0 quota A policy=s remaining=0 full=4 retry=5\n0 quota A policy=d remaining=7 full=9 retry=0\n",
          "0 quota A policy=d remaining=7 full=9 retry=0\n0 quota A policy=s remaining=0 full=4 retry=5\n", 1 },
        { "other quota name", "0 quota A policy=s remaining=0 full=4 retry=5\n",
          "0 quota A policy=t remaining=0 full=4 retry=5\n", 1 },
        { "quota name empty", "0 quota A policy=s remaining=0 full=4 retry=5\n",
          "0 quota A policy= remaining=0 full=4 retry=5\n", 1 },
        { "quota name bad", "0 quota A policy=s remaining=0 full=4 retry=5\n",
          "0 quota A policy=s/t remaining=0 full=4 retry=5\n", 1 },
    };
    int failed = 0;
    size_t n = sizeof cases / sizeof cases[0];
    for (size_t i = 0; i < n; i++) {
        report = NULL;
        int r = compare_strings(cases[i].want, cases[i].got);
        if (r != cases[i].result) {
            fprintf(stderr, "self-test FAILED: %s: got %d, want %d\n", cases[i].what, r, cases[i].result);
            report = stderr;
            (void)compare_strings(cases[i].want, cases[i].got);
            failed++;
        }
    }
    printf("tracecmp self-test: %zu passed, %d failed\n", n - (size_t)failed, failed);
    return failed == 0 ? 0 : 1;
}

int main(int argc, char **argv) {
    if (argc == 2 && strcmp(argv[1], "--self-test") == 0) return self_test();
    if (argc != 3) {
        fprintf(stderr, "usage: tracecmp EXPECTED ACTUAL\n       tracecmp --self-test\n");
        return 2;
    }
    size_t wl = 0, gl = 0;
    char *w = read_file(argv[1], &wl);
    if (w == NULL) return 2;
    char *g = read_file(argv[2], &gl);
    if (g == NULL) {
        free(w);
        return 2;
    }
    report = stderr;
    int r = compare(argv[1], w, wl, argv[2], g, gl);
    if (r == 2)
        fprintf(stderr, "tracecmp: out of memory\n");
    else if (r == 1)
        fprintf(stderr, "tracecmp: %s and %s differ\n", argv[1], argv[2]);
    else
        printf("tracecmp: %s matches\n", argv[2]);
    return r;
}
