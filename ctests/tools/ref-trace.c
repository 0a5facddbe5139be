/*
 * ref-trace.c — runs a conformance trace (format v3, docs/trace-format.md)
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

static char quota_name[64]; /* the name= of the last policy line parsed, or "" */

static sluice_policy_t parse_policy(char **f, int n) {
    sluice_policy_t p;
    quota_name[0] = 0;
    memset(&p, 0, sizeof p);
    if (n < 2) fail("missing policy kind");
    bool seen[16] = { false };
    const char *opts[] = { "interval", "leading", "trailing", "pick", "maxwait", "limit", "per", "burst", "name" };
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
        for (int j = 0; j < 9; j++)
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
        if (o == 8 && kind != SLUICE_RATE) fail("unknown option 'name'");
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
        case 8:
            if (!*val) fail("missing value for name");
            if (strlen(val) > 32) fail("bad name '%s'", val);
            strcpy(quota_name, val);
            break;
        }
    }
    if (p.kind == SLUICE_RATE && (!have_limit || !have_per)) fail("rate needs limit and per");
    if (p.kind != SLUICE_RATE && !have_interval) fail("missing interval");
    return p;
}

/* v3 header: rate quotas, in plans or not. */
#define MAXQ 8
#define MAXP 64
static struct hplan {
    char name[64];
    size_t nq;
    char qname[MAXQ][64];
    sluice_rate_quota_t q[MAXQ];
} hplans[MAXP];
static size_t nhplans;
static bool saw_plan_line;
static sluice_policy_t first_policy;
static size_t npolicies;

static void header_plan(char **f, int n) {
    if (n < 2) fail("missing field");
    if (n > 2) fail("extra field '%s'", f[2]);
    if (nhplans && !saw_plan_line) fail("quota outside a plan");
    if (nhplans && hplans[nhplans - 1].nq == 0) fail("plan without quota");
    if (nhplans == MAXP) fail("too many plans");
    for (size_t i = 0; i < nhplans; i++)
        if (!strcmp(hplans[i].name, f[1])) fail("duplicate plan '%s'", f[1]);
    if (strlen(f[1]) > 32) fail("bad name '%s'", f[1]);
    saw_plan_line = true;
    strcpy(hplans[nhplans++].name, f[1]);
}

static void header_policy(char **f, int n) {
    sluice_policy_t p = parse_policy(f, n);
    if (npolicies == 0) first_policy = p;
    npolicies++;
    if (npolicies > 1 && (p.kind != SLUICE_RATE || first_policy.kind != SLUICE_RATE))
        fail("only rate policies can be combined");
    if (saw_plan_line && p.kind != SLUICE_RATE) fail("only rate policies can be combined");
    if (p.kind != SLUICE_RATE) return;
    if (!nhplans) strcpy(hplans[nhplans++].name, "default");
    struct hplan *h = &hplans[nhplans - 1];
    if (h->nq == MAXQ) fail("too many quotas");
    for (size_t i = 0; i < h->nq; i++)
        if (quota_name[0] && !strcmp(h->qname[i], quota_name)) fail("duplicate quota '%s'", quota_name);
    strcpy(h->qname[h->nq], quota_name);
    h->q[h->nq].limit = p.limit;
    h->q[h->nq].per_ns = p.per_ns;
    h->q[h->nq].burst = p.burst;
    h->nq++;
}

/* TIME VERB KEY ... [cost=N] [plan=NAME]: takes the options off the end */
static void step_options(char **f, int *n, int fixed, uint64_t *cost, const char **plan) {
    *cost = 1;
    *plan = NULL;
    bool seen_cost = false;
    while (*n > fixed) {
        char *o = f[*n - 1];
        if (!strncmp(o, "cost=", 5) && !seen_cost) {
            if (parse_u64(o + 5, UINT64_C(1000000000000), cost) || *cost == 0) fail("bad cost");
            seen_cost = true;
        } else if (!strncmp(o, "plan=", 5) && !*plan) {
            if (!o[5]) fail("missing value for plan");
            *plan = o + 5;
        } else {
            break;
        }
        (*n)--;
    }
}

static void print_ms_up(uint64_t ns) {
    if (ns == SLUICE_NEVER)
        printf("never");
    else
        printf("%" PRIu64, ns / MS + (ns % MS != 0));
}

static ref_model_t *build_model(bool force_plans, bool *plans_mode) {
    ref_model_t *m = NULL;
    if (!npolicies) fail("expected a policy line");
    if (nhplans && hplans[nhplans - 1].nq == 0) fail("plan without quota");
    if (first_policy.kind == SLUICE_RATE && (npolicies > 1 || saw_plan_line || force_plans)) {
        sluice_plan_t pl[MAXP];
        const char *dflt = "default";
        for (size_t i = 0; i < nhplans; i++) {
            struct hplan *h = &hplans[i];
            for (size_t k = 0; k < h->nq; k++) {
                if (!h->qname[k][0]) {
                    if (h->nq > 1) fail("quota needs a name");
                    strcpy(h->qname[k], dflt);
                }
                h->q[k].name = h->qname[k];
            }
            pl[i].name = h->name;
            pl[i].quotas = h->q;
            pl[i].nquotas = h->nq;
        }
        sluice_plans_t table = { pl, nhplans, 0 };
        int rc = ref_new_plans(&m, &table);
        if (rc) fail("invalid plans (%d)", rc);
        *plans_mode = true;
    } else {
        int rc = ref_new(&m, &first_policy);
        if (rc) fail("invalid policy (%d)", rc);
    }
    return m;
}

int main(int argc, char **argv) {
    FILE *in = stdin;
    if (argc > 1 && !(in = fopen(argv[1], "r"))) {
        perror(argv[1]);
        return 2;
    }
    /* REF_TRACE_PLANS=1: run a trace of one rate policy as a table of one
     * plan (a cross-check of the model's plans against the v2 vectors) */
    const char *force = getenv("REF_TRACE_PLANS");
    bool force_plans = force && *force == '1';
    char buf[8192];
    ref_model_t *m = NULL;
    bool plans_mode = false;
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
        if (!m && !strcmp(f[0], "policy")) {
            header_policy(f, n);
            continue;
        }
        if (!m && !strcmp(f[0], "plan")) {
            header_plan(f, n);
            continue;
        }
        if (!m) m = build_model(force_plans, &plans_mode);
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
        uint64_t cost = 1;
        const char *plan_name = NULL;
        uint32_t plan = 0;
        if (!strcmp(verb, "call") || !strcmp(verb, "quota")) {
            step_options(f, &n, !strcmp(verb, "call") ? 4 : 3, &cost, &plan_name);
            if (plan_name) {
                if (first_policy.kind != SLUICE_RATE) fail("plan needs a rate policy");
                if (plans_mode) {
                    if (ref_plan_index(m, plan_name, &plan)) fail("unknown plan '%s'", plan_name);
                } else if (strcmp(plan_name, "default")) {
                    fail("unknown plan '%s'", plan_name);
                }
            }
        }
        if (!strcmp(verb, "call")) {
            if (n != 4) fail("call needs KEY VALUE");
            sluice_key_t k = sluice_key_bytes(f[2], strlen(f[2]));
            uint64_t tok = intern_value(f[3]);
            sluice_decision_t d;
            int rc = first_policy.kind == SLUICE_RATE ? ref_submit_plan(m, k, tok, cost, plan, t, &d, NULL)
                                                      : ref_submit_cost(m, k, tok, cost, t, &d);
            if (rc) fail("submit failed (%d)", rc);
            drain_events(m);
            if (d.kind == SLUICE_EMITTED)
                printf("%" PRIu64 " emit %s %s\n", ms, f[2], f[3]);
            else if (d.kind == SLUICE_DROPPED)
                printf("%" PRIu64 " drop %s %s\n", ms, f[2], f[3]);
        } else if (!strcmp(verb, "quota")) {
            /* TIME quota KEY [cost=N] [plan=NAME] -> remaining, full and retry (ms rounded
             * up), then each quota's when the plan has more than one */
            if (n != 3) fail("quota needs KEY");
            sluice_quota_t q;
            sluice_plan_detail_t det;
            int rc = ref_quota_plan(m, sluice_key_bytes(f[2], strlen(f[2])), cost, plan, t, &q, &det);
            if (rc) fail("quota failed (%d)", rc);
            printf("%" PRIu64 " quota %s remaining=%" PRIu64 " full=", ms, f[2], q.remaining);
            print_ms_up(q.full);
            printf(" retry=");
            print_ms_up(q.retry);
            printf("\n");
            if (det.nquotas > 1)
                for (uint32_t i = 0; i < det.nquotas; i++) {
                    printf("%" PRIu64 " quota %s policy=%s remaining=%" PRIu64 " full=", ms, f[2],
                           hplans[plan].qname[i], det.quotas[i].remaining);
                    print_ms_up(det.quotas[i].full);
                    printf(" retry=");
                    print_ms_up(det.quotas[i].retry);
                    printf("\n");
                }
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
        if (!npolicies) fail("no policy");
        m = build_model(force_plans, &plans_mode);
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
