/*
 * ref-trace.c — runs a conformance trace (format v2, docs/trace-format.md)
 * against the reference model (ctests/ref/ref_model.c), not the core.
 * Used to cross-check the .expected files of Tests/Vectors, which are written
 * by hand. It has its own small parser on purpose: it shares no code with the
 * trace library (Sources/CSluiceTrace) whose output it cross-checks. Its
 * error messages are not the library's (the vector tests check outputs only).
 *
 *   cc -std=c11 -I Sources/CSluice/include -I ctests \
 *      ctests/tools/ref-trace.c ctests/ref/ref_model.c -o ref-trace
 *   ref-trace FILE.trace    (or stdin)
 *
 * Prints the trace's output on stdout; a malformed trace prints
 * "error: line N: REASON" on stderr and exits with status 2.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ref/ref_model.h"

#define MS UINT64_C(1000000)
#define TIME_MAX_MS UINT64_C(10000000000000)    /* 10^13 */
#define DURATION_MAX_MS UINT64_C(1000000000000) /* 10^12 */

static int lineno;

static _Noreturn void fail(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "error: line %d: ", lineno);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    exit(2);
}

/* value strings, indexed by token */
static char **values;
static size_t nvalues, capvalues;

static uint64_t intern_value(const char *s) {
    if (nvalues == capvalues) {
        capvalues = capvalues ? 2 * capvalues : 64;
        values = realloc(values, capvalues * sizeof *values);
        if (!values) abort();
    }
    values[nvalues] = strdup(s);
    return nvalues++;
}

static int parse_u64(const char *s, uint64_t max, uint64_t *out) {
    if (!*s) return -1;
    uint64_t v = 0;
    for (; *s; s++) {
        if (*s < '0' || *s > '9') return -1;
        unsigned d = (unsigned)(*s - '0');
        if (v > (UINT64_MAX - d) / 10) return -1;
        v = v * 10 + d;
        if (v > max) return -1;
    }
    *out = v;
    return 0;
}

static int parse_bool(const char *s, bool *out) {
    if (!strcmp(s, "true"))
        *out = true;
    else if (!strcmp(s, "false"))
        *out = false;
    else
        return -1;
    return 0;
}

static int split(char *line, char **f, int maxf) {
    int n = 0;
    char *p = line;
    for (;;) {
        while (*p == ' ' || *p == '\t') p++;
        if (!*p) break;
        if (n == maxf) return maxf + 1;
        f[n++] = p;
        while (*p && *p != ' ' && *p != '\t') p++;
        if (*p) *p++ = 0;
    }
    return n;
}

static void print_ms(uint64_t ns) {
    if (ns % MS) {
        fprintf(stderr, "ref-trace: time %" PRIu64 " ns is not whole ms\n", ns);
        exit(3);
    }
    printf("%" PRIu64, ns / MS);
}

static void print_key(sluice_key_t k) { fwrite(k.bytes, 1, k.len, stdout); }

static void drain_events(ref_model_t *m) {
    const ref_event_t *ev = ref_events(m);
    for (size_t i = 0; i < ref_event_count(m); i++) {
        static const char *names[] = { "?", "emit", "drop", "discard" };
        print_ms(ev[i].at);
        printf(" %s ", names[ev[i].kind]);
        print_key(ev[i].key);
        printf(" %s\n", values[ev[i].token]);
    }
    ref_clear_events(m);
}

static sluice_policy_t parse_policy(char **f, int n) {
    sluice_policy_t p;
    memset(&p, 0, sizeof p);
    if (n < 2) fail("missing policy kind");
    bool seen[16] = { false };
    const char *opts[] = { "interval", "leading", "trailing", "pick", "maxwait", "limit", "per", "burst" };
    bool have_interval = false, have_limit = false, have_per = false;
    if (!strcmp(f[1], "throttle"))
        p = sluice_throttle(0, true, true, SLUICE_PICK_LATEST);
    else if (!strcmp(f[1], "audit"))
        p = sluice_audit(0);
    else if (!strcmp(f[1], "debounce"))
        p = sluice_debounce(0, false, true, -1);
    else if (!strcmp(f[1], "rate"))
        p = sluice_rate(0, 0, 0);
    else
        fail("unknown policy '%s'", f[1]);
    for (int i = 2; i < n; i++) {
        char *eq = strchr(f[i], '=');
        if (!eq) fail("bad option '%s'", f[i]);
        *eq = 0;
        const char *name = f[i], *val = eq + 1;
        int o = -1;
        for (int j = 0; j < 8; j++)
            if (!strcmp(name, opts[j])) o = j;
        if (o < 0) fail("unknown option '%s'", name);
        if (seen[o]) fail("option '%s' repeats", name);
        seen[o] = true;
        uint64_t v;
        bool b;
        int kind = p.kind;
        bool ok_for = (o == 0 && kind != SLUICE_RATE) ||
                      ((o == 1 || o == 2) && (kind == SLUICE_THROTTLE || kind == SLUICE_DEBOUNCE)) ||
                      (o == 3 && kind == SLUICE_THROTTLE) || (o == 4 && kind == SLUICE_DEBOUNCE) ||
                      (o >= 5 && kind == SLUICE_RATE);
        if (!ok_for) fail("option '%s' does not apply to this policy", name);
        switch (o) {
        case 0:
            if (parse_u64(val, DURATION_MAX_MS, &v)) fail("bad interval");
            p.interval_ns = (int64_t)(v * MS);
            have_interval = true;
            break;
        case 1:
            if (parse_bool(val, &b)) fail("bad leading");
            p.leading = b;
            break;
        case 2:
            if (parse_bool(val, &b)) fail("bad trailing");
            p.trailing = b;
            break;
        case 3:
            if (!strcmp(val, "latest"))
                p.pick = SLUICE_PICK_LATEST;
            else if (!strcmp(val, "first"))
                p.pick = SLUICE_PICK_FIRST;
            else
                fail("bad pick");
            break;
        case 4:
            if (parse_u64(val, DURATION_MAX_MS, &v)) fail("bad maxwait");
            p.has_max_wait = true;
            p.max_wait_ns = (int64_t)(v * MS);
            break;
        case 5:
            if (parse_u64(val, SLUICE_RATE_MAX, &v) || v < 1) fail("bad limit");
            p.limit = v;
            have_limit = true;
            break;
        case 6:
            if (parse_u64(val, DURATION_MAX_MS, &v) || v < 1) fail("bad per");
            p.per_ns = (int64_t)(v * MS);
            have_per = true;
            break;
        case 7:
            if (parse_u64(val, SLUICE_RATE_MAX, &v) || v < 1) fail("bad burst");
            p.burst = v;
            break;
        }
    }
    if (p.kind == SLUICE_RATE && (!have_limit || !have_per)) fail("rate needs limit and per");
    if (p.kind != SLUICE_RATE && !have_interval) fail("missing interval");
    return p;
}

int main(int argc, char **argv) {
    FILE *in = stdin;
    if (argc > 1 && !(in = fopen(argv[1], "r"))) {
        perror(argv[1]);
        return 2;
    }
    char buf[8192];
    ref_model_t *m = NULL;
    uint64_t last = 0;
    bool closed = false;
    while (fgets(buf, sizeof buf, in)) {
        lineno++;
        buf[strcspn(buf, "\r\n")] = 0;
        char *hash = strchr(buf, '#');
        if (hash) *hash = 0;
        char *f[16];
        int n = split(buf, f, 15);
        if (n == 0) continue;
        if (n > 15) fail("too many fields");
        if (!m) {
            if (strcmp(f[0], "policy")) fail("expected a policy line");
            sluice_policy_t p = parse_policy(f, n);
            int rc = ref_new(&m, &p);
            if (rc) fail("invalid policy (%d)", rc);
            continue;
        }
        if (closed) fail("line after close");
        uint64_t ms;
        if (parse_u64(f[0], TIME_MAX_MS, &ms)) fail("bad time");
        if (ms < last) fail("time goes backwards");
        last = ms;
        uint64_t t = ms * MS;
        if (n < 2) fail("missing verb");
        /* Before each input line at time t every deadline <= t fires. */
        ref_advance(m, t);
        drain_events(m);
        const char *verb = f[1];
        if (!strcmp(verb, "call")) {
            /* v2: an optional cost=N (rate only; the model refuses it elsewhere) */
            uint64_t cost = 1;
            if (n == 5 && !strncmp(f[4], "cost=", 5)) {
                if (parse_u64(f[4] + 5, UINT64_C(1000000000000), &cost) || cost == 0) fail("bad cost");
                n = 4;
            }
            if (n != 4) fail("call needs KEY VALUE");
            sluice_key_t k = sluice_key_bytes(f[2], strlen(f[2]));
            uint64_t tok = intern_value(f[3]);
            sluice_decision_t d;
            int rc = ref_submit_cost(m, k, tok, cost, t, &d);
            if (rc) fail("submit failed (%d)", rc);
            drain_events(m);
            if (d.kind == SLUICE_EMITTED)
                printf("%" PRIu64 " emit %s %s\n", ms, f[2], f[3]);
            else if (d.kind == SLUICE_DROPPED)
                printf("%" PRIu64 " drop %s %s\n", ms, f[2], f[3]);
        } else if (!strcmp(verb, "quota")) {
            /* v2: TIME quota KEY [cost=N] -> remaining, full and retry (ms rounded up) */
            uint64_t cost = 1;
            if (n == 4 && !strncmp(f[3], "cost=", 5)) {
                if (parse_u64(f[3] + 5, UINT64_C(1000000000000), &cost) || cost == 0) fail("bad cost");
                n = 3;
            }
            if (n != 3) fail("quota needs KEY");
            sluice_quota_t q;
            int rc = ref_quota(m, sluice_key_bytes(f[2], strlen(f[2])), cost, t, &q);
            if (rc) fail("quota failed (%d)", rc);
            printf("%" PRIu64 " quota %s remaining=%" PRIu64 " full=%" PRIu64, ms, f[2], q.remaining,
                   q.full / MS + (q.full % MS != 0));
            if (q.retry == SLUICE_NEVER)
                printf(" retry=never\n");
            else
                printf(" retry=%" PRIu64 "\n", q.retry / MS + (q.retry % MS != 0));
        } else if (!strcmp(verb, "flush") || !strcmp(verb, "cancel") || !strcmp(verb, "pending")) {
            if (n != 3) fail("%s needs KEY", verb);
            sluice_key_t k = sluice_key_bytes(f[2], strlen(f[2]));
            int rc = verb[0] == 'f' ? ref_flush(m, k, t) : verb[0] == 'c' ? ref_cancel(m, k, t) : ref_pending(m, k, t);
            if (rc < 0) fail("%s failed (%d)", verb, rc);
            drain_events(m);
            if (verb[0] == 'p') printf("%" PRIu64 " pending %s %s\n", ms, f[2], rc ? "yes" : "no");
        } else if (!strcmp(verb, "close")) {
            if (n != 3) fail("close needs drain|discard");
            sluice_close_mode_t mode;
            if (!strcmp(f[2], "drain"))
                mode = SLUICE_CLOSE_DRAIN;
            else if (!strcmp(f[2], "discard"))
                mode = SLUICE_CLOSE_DISCARD;
            else
                fail("bad close mode");
            ref_close(m, t, mode);
            drain_events(m);
            closed = true;
        } else {
            fail("unknown verb '%s'", verb);
        }
    }
    if (!m) {
        lineno++;
        fail("no policy");
    }
    if (!closed) {
        /* let time run on until no deadline is left */
        while (ref_next_deadline(m) != UINT64_MAX) {
            ref_advance(m, ref_next_deadline(m));
            drain_events(m);
        }
    }
    ref_free(m);
    return 0;
}
