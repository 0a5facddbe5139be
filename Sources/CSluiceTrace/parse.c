/*
 * parse.c — the parsed trace (sluice_trace.h): the parser, the accessors of
 * a parsed trace, its release and the library's status texts. Needs the
 * core's header only (policy types, key limits): no limiter is run here.
 */
#include "trace-internal.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------ */
/* Errors                                                              */
/* ------------------------------------------------------------------ */

/* Longest piece of input quoted in a reason. */
#define QUOTE_MAX 40

static void set_error(struct sluice_trace_error *err, size_t line, const char *fmt, ...)
#if defined(__GNUC__) || defined(__clang__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;

static void set_error(struct sluice_trace_error *err, size_t line, const char *fmt, ...) {
    va_list ap;
    if (err == NULL) return;
    err->line = line;
    va_start(ap, fmt);
    vsnprintf(err->reason, sizeof err->reason, fmt, ap);
    va_end(ap);
    if (err->reason[0] == '\0') /* never empty */
        snprintf(err->reason, sizeof err->reason, "error");
    snprintf(err->message, sizeof err->message, "error: line %zu: %s", line, err->reason);
}

/* Error "PREFIX'TEXT'SUFFIX", TEXT cut to QUOTE_MAX characters plus "...".
 * TEXT is printable ASCII here (the character check runs first). */
static void set_error_quoted(struct sluice_trace_error *err, size_t line, const char *prefix, const char *text,
                             size_t n, const char *suffix) {
    int shown = (int)(n > QUOTE_MAX ? QUOTE_MAX : n);
    set_error(err, line, "%s'%.*s%s'%s", prefix, shown, text, n > QUOTE_MAX ? "..." : "", suffix);
}

/* ------------------------------------------------------------------ */
/* Lexing helpers                                                      */
/* ------------------------------------------------------------------ */

struct field {
    const char *s;
    size_t n;
};

static bool is_blank(char c) { return c == ' ' || c == '\t'; }

/* The next field of [*p, end), or false at the end of the line. */
static bool next_field(const char **p, const char *end, struct field *f) {
    const char *q = *p;
    while (q < end && is_blank(*q)) q++;
    if (q == end) {
        *p = q;
        return false;
    }
    f->s = q;
    while (q < end && !is_blank(*q)) q++;
    f->n = (size_t)(q - f->s);
    *p = q;
    return true;
}

static bool field_is(const struct field *f, const char *word) {
    size_t n = strlen(word);
    return f->n == n && memcmp(f->s, word, n) == 0;
}

enum num_result { NUM_OK, NUM_BAD, NUM_NEGATIVE, NUM_TOO_LARGE };

static bool all_digits(const char *s, size_t n) {
    if (n == 0) return false;
    for (size_t i = 0; i < n; i++)
        if (s[i] < '0' || s[i] > '9') return false;
    return true;
}

/* Decimal digits only, at most `max`; never overflows. */
static enum num_result parse_number(const char *s, size_t n, uint64_t max, uint64_t *out) {
    uint64_t v = 0;
    if (n >= 2 && s[0] == '-' && all_digits(s + 1, n - 1)) return NUM_NEGATIVE;
    if (!all_digits(s, n)) return NUM_BAD;
    for (size_t i = 0; i < n; i++) {
        uint64_t d = (uint64_t)(s[i] - '0');
        if (v > (max - d) / 10) return NUM_TOO_LARGE;
        v = v * 10 + d;
    }
    *out = v;
    return NUM_OK;
}

/* Reports a number error for NAME (the option or "time"); false when fine. */
static bool number_failed(struct sluice_trace_error *err, size_t line, enum num_result r, const char *name,
                          const char *s, size_t n) {
    switch (r) {
    case NUM_OK: return false;
    case NUM_NEGATIVE: set_error(err, line, "negative %s", name); return true;
    case NUM_TOO_LARGE: set_error(err, line, "number too large"); return true;
    case NUM_BAD:
    default: set_error_quoted(err, line, "bad number ", s, n, ""); return true;
    }
}

/* ------------------------------------------------------------------ */
/* Storage                                                             */
/* ------------------------------------------------------------------ */

static bool grow(void **ptr, size_t *cap, size_t need, size_t elem) {
    size_t ncap;
    void *p;
    if (need <= *cap) return true;
    ncap = *cap ? *cap : 64;
    while (ncap < need) {
        if (ncap > SIZE_MAX / 2 / elem) return false;
        ncap *= 2;
    }
    if (ncap > SIZE_MAX / elem) return false;
    p = realloc(*ptr, ncap * elem);
    if (p == NULL) return false;
    *ptr = p;
    *cap = ncap;
    return true;
}

void sluice_trace_free(sluice_trace_t *trace) {
    if (trace == NULL) return;
    free(trace->plans);
    free(trace->quotas);
    free(trace->plan_c);
    free(trace->quota_c);
    free(trace->steps);
    free(trace->text);
    free(trace);
}

/* ------------------------------------------------------------------ */
/* Parser                                                              */
/* ------------------------------------------------------------------ */

/* The policy line as written, durations in ms, defaults applied. */
struct policy_ms {
    sluice_policy_kind_t kind;
    uint64_t interval_ms;
    bool leading;
    bool trailing;
    sluice_pick_t pick;
    bool has_maxwait;
    uint64_t maxwait_ms;
    uint64_t limit;
    uint64_t per_ms;
    uint64_t burst;
    bool has_name; /* rate: a name= was written (format v3) */
    char name[SLUICE_PLAN_NAME_MAX + 1];
};

/* Most plans and quotas a trace may declare (format v3). */
#define TRACE_PLANS_MAX 64
#define TRACE_QUOTAS_MAX (TRACE_PLANS_MAX * SLUICE_PLAN_QUOTAS_MAX)

struct parser {
    sluice_trace_t *t;
    struct sluice_trace_error *err;
    struct policy_ms pol;
    size_t line;
    bool have_policy;
    bool closed;
    uint64_t last_time;
    bool nomem;
    /* the header (format v3): plans and quotas, until the first step */
    bool header_done;
    struct sluice__trace_plan plans[TRACE_PLANS_MAX];
    uint32_t nplans; /* plan lines seen */
    struct sluice__trace_quota quotas[TRACE_QUOTAS_MAX];
    uint32_t nquotas;
    uint32_t loose; /* quotas outside any plan (the implicit plan) */
};

enum option_id {
    OPT_INTERVAL = 0,
    OPT_LEADING,
    OPT_TRAILING,
    OPT_PICK,
    OPT_MAXWAIT,
    OPT_LIMIT,
    OPT_PER,
    OPT_BURST,
    OPT_NAME,
    OPT_COUNT
};

static const char *const option_names[OPT_COUNT] = {
    "interval", "leading", "trailing", "pick", "maxwait", "limit", "per", "burst", "name",
};

#define BIT(o) (1u << (o))

static unsigned options_of(sluice_policy_kind_t kind) {
    switch (kind) {
    case SLUICE_THROTTLE: return BIT(OPT_INTERVAL) | BIT(OPT_LEADING) | BIT(OPT_TRAILING) | BIT(OPT_PICK);
    case SLUICE_AUDIT: return BIT(OPT_INTERVAL);
    case SLUICE_DEBOUNCE: return BIT(OPT_INTERVAL) | BIT(OPT_LEADING) | BIT(OPT_TRAILING) | BIT(OPT_MAXWAIT);
    case SLUICE_RATE: return BIT(OPT_LIMIT) | BIT(OPT_PER) | BIT(OPT_BURST) | BIT(OPT_NAME);
    }
    return 0;
}

static int parse_bool(const struct field *v, bool *out) {
    if (field_is(v, "true")) {
        *out = true;
        return 0;
    }
    if (field_is(v, "false")) {
        *out = false;
        return 0;
    }
    return -1;
}

/* A plan or quota name (format v3): the core's rule. */
static bool name_ok(const struct field *f) { return sluice_plan_name_valid(f->s, f->n); }

/* The policy line; `p` points after the word "policy". */
static int parse_policy(struct parser *ps, const char *p, const char *end, struct policy_ms *pol) {
    struct field f;
    unsigned allowed, seen = 0;

    if (!next_field(&p, end, &f)) {
        set_error(ps->err, ps->line, "missing field");
        return SLUICE_ESYNTAX;
    }
    memset(pol, 0, sizeof *pol);
    if (field_is(&f, "throttle")) {
        pol->kind = SLUICE_THROTTLE;
        pol->leading = true;
        pol->trailing = true;
        pol->pick = SLUICE_PICK_LATEST;
    } else if (field_is(&f, "audit")) {
        pol->kind = SLUICE_AUDIT;
        pol->leading = false;
        pol->trailing = true;
    } else if (field_is(&f, "debounce")) {
        pol->kind = SLUICE_DEBOUNCE;
        pol->leading = false;
        pol->trailing = true;
    } else if (field_is(&f, "rate")) {
        pol->kind = SLUICE_RATE;
    } else {
        set_error_quoted(ps->err, ps->line, "unknown policy ", f.s, f.n, "");
        return SLUICE_ESYNTAX;
    }
    allowed = options_of(pol->kind);

    while (next_field(&p, end, &f)) {
        const char *eq = memchr(f.s, '=', f.n);
        struct field name, value;
        int id = -1;
        uint64_t num = 0;
        enum num_result nr;

        if (eq == NULL) {
            set_error_quoted(ps->err, ps->line, "bad option ", f.s, f.n, "");
            return SLUICE_ESYNTAX;
        }
        name.s = f.s;
        name.n = (size_t)(eq - f.s);
        value.s = eq + 1;
        value.n = f.n - name.n - 1;
        for (int o = 0; o < OPT_COUNT; o++) {
            if ((allowed & BIT(o)) && field_is(&name, option_names[o])) {
                id = o;
                break;
            }
        }
        if (id < 0) {
            set_error_quoted(ps->err, ps->line, "unknown option ", name.s, name.n, "");
            return SLUICE_ESYNTAX;
        }
        if (seen & BIT(id)) {
            set_error_quoted(ps->err, ps->line, "duplicate option ", name.s, name.n, "");
            return SLUICE_ESYNTAX;
        }
        seen |= BIT(id);
        if (value.n == 0) {
            set_error(ps->err, ps->line, "missing value for %s", option_names[id]);
            return SLUICE_ESYNTAX;
        }
        switch (id) {
        case OPT_NAME:
            if (!name_ok(&value)) {
                set_error_quoted(ps->err, ps->line, "bad name ", value.s, value.n, "");
                return SLUICE_ESYNTAX;
            }
            memcpy(pol->name, value.s, value.n);
            pol->name[value.n] = '\0';
            pol->has_name = true;
            break;
        case OPT_LEADING:
        case OPT_TRAILING:
            if (parse_bool(&value, id == OPT_LEADING ? &pol->leading : &pol->trailing) != 0) {
                set_error_quoted(ps->err, ps->line, "bad value ", value.s, value.n,
                                 id == OPT_LEADING ? " for leading" : " for trailing");
                return SLUICE_ESYNTAX;
            }
            break;
        case OPT_PICK:
            if (field_is(&value, "latest")) {
                pol->pick = SLUICE_PICK_LATEST;
            } else if (field_is(&value, "first")) {
                pol->pick = SLUICE_PICK_FIRST;
            } else {
                set_error_quoted(ps->err, ps->line, "bad value ", value.s, value.n, " for pick");
                return SLUICE_ESYNTAX;
            }
            break;
        case OPT_INTERVAL:
        case OPT_MAXWAIT:
        case OPT_PER:
            nr = parse_number(value.s, value.n, SLUICE_TRACE_DURATION_MAX_MS, &num);
            if (number_failed(ps->err, ps->line, nr, option_names[id], value.s, value.n)) return SLUICE_ESYNTAX;
            if (id == OPT_INTERVAL) {
                pol->interval_ms = num;
            } else if (id == OPT_MAXWAIT) {
                pol->has_maxwait = true;
                pol->maxwait_ms = num;
            } else {
                if (num < 1) {
                    set_error(ps->err, ps->line, "per below 1");
                    return SLUICE_ESYNTAX;
                }
                pol->per_ms = num;
            }
            break;
        case OPT_LIMIT:
        case OPT_BURST:
            nr = parse_number(value.s, value.n, SLUICE_TRACE_COUNT_MAX, &num);
            if (number_failed(ps->err, ps->line, nr, option_names[id], value.s, value.n)) return SLUICE_ESYNTAX;
            if (num < 1) {
                set_error(ps->err, ps->line, "%s below 1", option_names[id]);
                return SLUICE_ESYNTAX;
            }
            if (id == OPT_LIMIT)
                pol->limit = num;
            else
                pol->burst = num;
            break;
        default: break;
        }
    }

    if (pol->kind == SLUICE_RATE) {
        if (!(seen & BIT(OPT_LIMIT))) {
            set_error(ps->err, ps->line, "missing option limit");
            return SLUICE_ESYNTAX;
        }
        if (!(seen & BIT(OPT_PER))) {
            set_error(ps->err, ps->line, "missing option per");
            return SLUICE_ESYNTAX;
        }
        if (!(seen & BIT(OPT_BURST))) pol->burst = pol->limit;
        return SLUICE_OK;
    }
    if (!(seen & BIT(OPT_INTERVAL))) {
        set_error(ps->err, ps->line, "missing option interval");
        return SLUICE_ESYNTAX;
    }
    if (pol->has_maxwait && pol->maxwait_ms < pol->interval_ms) {
        set_error(ps->err, ps->line, "maxwait below interval");
        return SLUICE_ESYNTAX;
    }
    if (!pol->leading && !pol->trailing) {
        set_error(ps->err, ps->line, "no edge enabled");
        return SLUICE_ESYNTAX;
    }
    return SLUICE_OK;
}

/* ---- the header (format v3): quotas and plans ---- */

/* The plan quota lines go to: the last plan line's, or the implicit one. */
static struct sluice__trace_plan *current_plan(struct parser *ps) {
    return ps->nplans ? &ps->plans[ps->nplans - 1] : NULL;
}

/* A policy line of the header. */
static int header_policy(struct parser *ps, const char *p, const char *end) {
    struct policy_ms pol;
    int rc = parse_policy(ps, p, end, &pol);
    if (rc != SLUICE_OK) return rc;
    struct sluice__trace_plan *plan = current_plan(ps);
    uint32_t in_plan = plan ? plan->n : ps->loose;
    /* only rate quotas combine: beside another quota, or in a plan */
    bool combined = ps->have_policy || plan != NULL;
    if (combined && (pol.kind != SLUICE_RATE || (ps->have_policy && ps->pol.kind != SLUICE_RATE))) {
        set_error(ps->err, ps->line, "only rate policies can be combined");
        return SLUICE_ESYNTAX;
    }
    if (in_plan == SLUICE_PLAN_QUOTAS_MAX) {
        set_error(ps->err, ps->line, "too many quotas");
        return SLUICE_ESYNTAX;
    }
    const struct sluice__trace_quota *mine = &ps->quotas[ps->nquotas - in_plan];
    if (in_plan >= 1 && (!pol.has_name || (in_plan == 1 && !mine[0].named))) {
        set_error(ps->err, ps->line, "quota needs a name");
        return SLUICE_ESYNTAX;
    }
    for (uint32_t i = 0; i < in_plan; i++)
        if (strcmp(mine[i].name, pol.name) == 0) {
            set_error_quoted(ps->err, ps->line, "duplicate quota ", pol.name, strlen(pol.name), "");
            return SLUICE_ESYNTAX;
        }
    struct sluice__trace_quota *q = &ps->quotas[ps->nquotas++];
    memset(q, 0, sizeof *q);
    q->named = pol.has_name;
    snprintf(q->name, sizeof q->name, "%s", pol.has_name ? pol.name : "default");
    q->limit = pol.limit;
    q->per_ms = pol.per_ms;
    q->burst = pol.burst;
    if (plan)
        plan->n++;
    else
        ps->loose++;
    if (!ps->have_policy) ps->pol = pol; /* the trace's policy: the first quota of the default plan */
    ps->have_policy = true;
    return SLUICE_OK;
}

/* A `plan NAME` line of the header. */
static int header_plan(struct parser *ps, const char *p, const char *end) {
    struct field name, extra;
    if (!next_field(&p, end, &name)) {
        set_error(ps->err, ps->line, "missing field");
        return SLUICE_ESYNTAX;
    }
    if (next_field(&p, end, &extra)) {
        set_error_quoted(ps->err, ps->line, "extra field ", extra.s, extra.n, "");
        return SLUICE_ESYNTAX;
    }
    if (ps->loose) {
        set_error(ps->err, ps->line, "quota outside a plan");
        return SLUICE_ESYNTAX;
    }
    struct sluice__trace_plan *last = current_plan(ps);
    if (last && last->n == 0) {
        set_error(ps->err, last->line, "plan without quota");
        return SLUICE_ESYNTAX;
    }
    if (ps->nplans == TRACE_PLANS_MAX) {
        set_error(ps->err, ps->line, "too many plans");
        return SLUICE_ESYNTAX;
    }
    if (!name_ok(&name)) {
        set_error_quoted(ps->err, ps->line, "bad name ", name.s, name.n, "");
        return SLUICE_ESYNTAX;
    }
    for (uint32_t i = 0; i < ps->nplans; i++)
        if (strlen(ps->plans[i].name) == name.n && memcmp(ps->plans[i].name, name.s, name.n) == 0) {
            set_error_quoted(ps->err, ps->line, "duplicate plan ", name.s, name.n, "");
            return SLUICE_ESYNTAX;
        }
    struct sluice__trace_plan *pl = &ps->plans[ps->nplans++];
    memset(pl, 0, sizeof *pl);
    memcpy(pl->name, name.s, name.n);
    pl->line = ps->line;
    pl->first = ps->nquotas;
    return SLUICE_OK;
}

/* The header is over (the first step, or the end of the input). */
static int end_header(struct parser *ps) {
    struct sluice__trace_plan *last = current_plan(ps);
    ps->header_done = true;
    if (last && last->n == 0) {
        set_error(ps->err, last->line, "plan without quota");
        return SLUICE_ESYNTAX;
    }
    if (ps->nplans == 0 && ps->have_policy) { /* the implicit plan */
        struct sluice__trace_plan *pl = &ps->plans[ps->nplans++];
        memset(pl, 0, sizeof *pl);
        memcpy(pl->name, "default", 8);
        pl->first = 0;
        pl->n = ps->loose;
    }
    return SLUICE_OK;
}

/* Copies the header into the trace, with the core's table when the trace
 * needs a limiter of plans. */
static int keep_header(struct parser *ps) {
    sluice_trace_t *t = ps->t;
    if (ps->pol.kind != SLUICE_RATE) return SLUICE_OK;
    t->nplans = ps->nplans;
    t->nquotas = ps->nquotas;
    t->table = ps->nplans > 1 || ps->plans[0].line != 0 || ps->nquotas > 1;
    t->plans = malloc(ps->nplans * sizeof *t->plans);
    t->quotas = malloc(ps->nquotas * sizeof *t->quotas);
    t->plan_c = malloc(ps->nplans * sizeof *t->plan_c);
    t->quota_c = malloc(ps->nquotas * sizeof *t->quota_c);
    if (!t->plans || !t->quotas || !t->plan_c || !t->quota_c) return SLUICE_ENOMEM;
    memcpy(t->plans, ps->plans, ps->nplans * sizeof *t->plans);
    memcpy(t->quotas, ps->quotas, ps->nquotas * sizeof *t->quotas);
    for (uint32_t i = 0; i < ps->nquotas; i++) {
        const struct sluice__trace_quota *q = &t->quotas[i];
        t->quota_c[i].name = q->name;
        t->quota_c[i].limit = q->limit;
        t->quota_c[i].per_ns = (int64_t)(q->per_ms * SLUICE_TRACE_NS_PER_MS);
        t->quota_c[i].burst = q->burst;
    }
    for (uint32_t i = 0; i < ps->nplans; i++) {
        t->plan_c[i].name = t->plans[i].name;
        t->plan_c[i].quotas = &t->quota_c[t->plans[i].first];
        t->plan_c[i].nquotas = t->plans[i].n;
    }
    t->plans_c.plans = t->plan_c;
    t->plans_c.nplans = t->nplans;
    t->plans_c.max_quotas = 0;
    return SLUICE_OK;
}

static int add_step(struct parser *ps, uint64_t time_ms, uint8_t verb, uint8_t flags, uint64_t cost, uint16_t plan,
                    const struct field *key, const struct field *value) {
    sluice_trace_t *t = ps->t;
    struct sluice__trace_step *s;
    size_t klen = key ? key->n : 0, vlen = value ? value->n : 0;

    if (!grow((void **)&t->steps, &t->steps_cap, t->nsteps + 1, sizeof *t->steps) || klen + vlen < klen ||
        t->text_len > SIZE_MAX - (klen + vlen) ||
        !grow((void **)&t->text, &t->text_cap, t->text_len + klen + vlen, 1)) {
        ps->nomem = true;
        set_error(ps->err, ps->line, "out of memory");
        return SLUICE_ENOMEM;
    }
    s = &t->steps[t->nsteps++];
    memset(s, 0, sizeof *s);
    s->time_ms = time_ms;
    s->cost = cost;
    s->text_off = t->text_len;
    s->key_len = (uint16_t)klen;
    s->value_len = (uint32_t)vlen;
    s->verb = verb;
    s->flags = flags;
    s->plan = plan;
    s->line = ps->line;
    if (klen) memcpy(t->text + t->text_len, key->s, klen);
    if (vlen) memcpy(t->text + t->text_len + klen, value->s, vlen);
    t->text_len += klen + vlen;
    if (klen + vlen > t->max_kv) t->max_kv = klen + vlen;
    if (verb == SLUICE_TRACE_CALL) t->ncalls++;
    if (flags & SLUICE__STEP_HAS_COST) t->v2 = true;
    return SLUICE_OK;
}

/* The optional fields after a call's VALUE or a quota's KEY: cost=N and
 * plan=NAME, in either order, each at most once. */
static int parse_call_options(struct parser *ps, const char *p, const char *end, uint64_t *cost, uint16_t *plan,
                              uint8_t *flags) {
    struct field f;

    *cost = 1;
    *plan = 0;
    while (next_field(&p, end, &f)) {
        enum num_result nr;
        bool is_cost = f.n >= 5 && memcmp(f.s, "cost=", 5) == 0;
        bool is_plan = f.n >= 5 && memcmp(f.s, "plan=", 5) == 0;
        if (!is_cost && !is_plan) {
            set_error_quoted(ps->err, ps->line, "extra field ", f.s, f.n, "");
            return SLUICE_ESYNTAX;
        }
        const char *what = is_cost ? "cost" : "plan";
        uint8_t bit = is_cost ? SLUICE__STEP_HAS_COST : SLUICE__STEP_HAS_PLAN;
        if (ps->pol.kind != SLUICE_RATE) {
            set_error(ps->err, ps->line, "%s needs a rate policy", what);
            return SLUICE_ESYNTAX;
        }
        if (*flags & bit) {
            set_error(ps->err, ps->line, "duplicate option '%s'", what);
            return SLUICE_ESYNTAX;
        }
        *flags |= bit;
        if (f.n == 5) {
            set_error(ps->err, ps->line, "missing value for %s", what);
            return SLUICE_ESYNTAX;
        }
        if (is_plan) {
            uint32_t i = 0;
            while (i < ps->nplans &&
                   !(strlen(ps->plans[i].name) == f.n - 5 && memcmp(ps->plans[i].name, f.s + 5, f.n - 5) == 0))
                i++;
            if (i == ps->nplans) {
                set_error_quoted(ps->err, ps->line, "unknown plan ", f.s + 5, f.n - 5, "");
                return SLUICE_ESYNTAX;
            }
            *plan = (uint16_t)i;
            continue;
        }
        nr = parse_number(f.s + 5, f.n - 5, SLUICE_TRACE_COUNT_MAX, cost);
        if (number_failed(ps->err, ps->line, nr, "cost", f.s + 5, f.n - 5)) return SLUICE_ESYNTAX;
        if (*cost < 1) {
            set_error(ps->err, ps->line, "cost below 1");
            return SLUICE_ESYNTAX;
        }
    }
    return SLUICE_OK;
}

/* A step line whose first field is `first`; `p` points after it. */
static int parse_step(struct parser *ps, const struct field *first, const char *p, const char *end) {
    struct field verb, key, value, extra;
    uint64_t time_ms = 0, cost = 0;
    uint16_t plan = 0;
    uint8_t v, flags = 0;
    int nargs, rc;

    if (ps->closed) {
        set_error(ps->err, ps->line, "line after close");
        return SLUICE_ESYNTAX;
    }
    if (field_is(first, "policy")) {
        set_error(ps->err, ps->line, "duplicate policy");
        return SLUICE_ESYNTAX;
    }
    if (field_is(first, "plan")) {
        set_error(ps->err, ps->line, "plan after the first step");
        return SLUICE_ESYNTAX;
    }
    if (number_failed(ps->err, ps->line, parse_number(first->s, first->n, SLUICE_TRACE_TIME_MAX_MS, &time_ms), "time",
                      first->s, first->n))
        return SLUICE_ESYNTAX;
    if (time_ms < ps->last_time) {
        set_error(ps->err, ps->line, "time goes backwards");
        return SLUICE_ESYNTAX;
    }
    if (!next_field(&p, end, &verb)) {
        set_error(ps->err, ps->line, "missing field");
        return SLUICE_ESYNTAX;
    }
    if (field_is(&verb, "call")) {
        v = SLUICE_TRACE_CALL;
        nargs = 2;
    } else if (field_is(&verb, "cancel")) {
        v = SLUICE_TRACE_CANCEL;
        nargs = 1;
    } else if (field_is(&verb, "flush")) {
        v = SLUICE_TRACE_FLUSH;
        nargs = 1;
    } else if (field_is(&verb, "pending")) {
        v = SLUICE_TRACE_PENDING;
        nargs = 1;
    } else if (field_is(&verb, "close")) {
        v = SLUICE_TRACE_CLOSE;
        nargs = 1;
    } else if (field_is(&verb, "quota")) {
        if (ps->pol.kind != SLUICE_RATE) {
            set_error(ps->err, ps->line, "quota needs a rate policy");
            return SLUICE_ESYNTAX;
        }
        v = SLUICE_TRACE_QUOTA;
        nargs = 1;
    } else {
        set_error_quoted(ps->err, ps->line, "unknown verb ", verb.s, verb.n, "");
        return SLUICE_ESYNTAX;
    }
    if (!next_field(&p, end, &key) || (nargs == 2 && !next_field(&p, end, &value))) {
        set_error(ps->err, ps->line, "missing field");
        return SLUICE_ESYNTAX;
    }
    if (v == SLUICE_TRACE_CALL || v == SLUICE_TRACE_QUOTA) {
        rc = parse_call_options(ps, p, end, &cost, &plan, &flags);
        if (rc != SLUICE_OK) return rc;
        if (v == SLUICE_TRACE_QUOTA) ps->t->v2 = true;
    } else if (next_field(&p, end, &extra)) {
        set_error_quoted(ps->err, ps->line, "extra field ", extra.s, extra.n, "");
        return SLUICE_ESYNTAX;
    }
    ps->last_time = time_ms;
    if (v == SLUICE_TRACE_CLOSE) {
        if (field_is(&key, "discard")) {
            flags |= SLUICE__STEP_DISCARD;
        } else if (!field_is(&key, "drain")) {
            set_error_quoted(ps->err, ps->line, "bad value ", key.s, key.n, " for close");
            return SLUICE_ESYNTAX;
        }
        ps->closed = true;
        return add_step(ps, time_ms, v, flags, 0, 0, NULL, NULL);
    }
    if (key.n > SLUICE_KEY_MAX) {
        set_error(ps->err, ps->line, "key too long");
        return SLUICE_ESYNTAX;
    }
    if (nargs == 2 && (uint64_t)value.n > UINT32_MAX) {
        set_error(ps->err, ps->line, "value too long");
        return SLUICE_ESYNTAX;
    }
    return add_step(ps, time_ms, v, flags, cost, plan, &key, nargs == 2 ? &value : NULL);
}

/* One line without its end of line. */
static int parse_line(struct parser *ps, const char *s, size_t n) {
    size_t code = n;
    const char *p, *end;
    struct field first;

    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '#') {
            code = i;
            if (memchr(s + i, '\0', n - i) != NULL) {
                set_error(ps->err, ps->line, "bad character 0x00");
                return SLUICE_ESYNTAX;
            }
            break;
        }
        if (!(c == ' ' || c == '\t' || (c >= 0x21 && c <= 0x7e))) {
            set_error(ps->err, ps->line, "bad character 0x%02x", (unsigned)c);
            return SLUICE_ESYNTAX;
        }
    }
    p = s;
    end = s + code;
    if (!next_field(&p, end, &first)) return SLUICE_OK; /* blank or comment */
    if (!ps->header_done) {
        if (field_is(&first, "policy")) return header_policy(ps, p, end);
        if (field_is(&first, "plan")) return header_plan(ps, p, end);
        if (!ps->have_policy && ps->nplans == 0) {
            set_error(ps->err, ps->line, "missing policy");
            return SLUICE_ESYNTAX;
        }
        int rc = end_header(ps);
        if (rc != SLUICE_OK) return rc;
    }
    return parse_step(ps, &first, p, end);
}

static sluice_policy_t policy_to_sluice(const struct policy_ms *p) {
    /* Every duration is <= 10^12 ms, so <= 10^18 ns: no overflow. */
    int64_t interval = (int64_t)(p->interval_ms * SLUICE_TRACE_NS_PER_MS);

    switch (p->kind) {
    case SLUICE_THROTTLE: return sluice_throttle(interval, p->leading, p->trailing, p->pick);
    case SLUICE_AUDIT: return sluice_audit(interval);
    case SLUICE_DEBOUNCE:
        return sluice_debounce(interval, p->leading, p->trailing,
                               p->has_maxwait ? (int64_t)(p->maxwait_ms * SLUICE_TRACE_NS_PER_MS) : -1);
    case SLUICE_RATE:
    default: return sluice_rate(p->limit, (int64_t)(p->per_ms * SLUICE_TRACE_NS_PER_MS), p->burst);
    }
}

int sluice_trace_parse(const char *buf, size_t len, sluice_trace_t **out, sluice_trace_error_t *err) {
    struct parser ps;
    size_t pos = 0;
    int rc = SLUICE_OK;

    if (err != NULL) memset(err, 0, sizeof *err);
    if (out == NULL) return SLUICE_EINVAL;
    *out = NULL;
    if (buf == NULL && len != 0) return SLUICE_EINVAL;
    memset(&ps, 0, sizeof ps);
    ps.err = err;
    ps.t = calloc(1, sizeof *ps.t);
    if (ps.t == NULL) {
        ps.nomem = true;
        rc = SLUICE_ENOMEM;
    }

    while (rc == SLUICE_OK && pos < len) {
        const char *s = buf + pos;
        const char *nl = memchr(s, '\n', len - pos);
        size_t n = nl ? (size_t)(nl - s) : len - pos;

        ps.line++;
        pos += n + (nl ? 1 : 0);
        if (n > 0 && s[n - 1] == '\r') n--;
        rc = parse_line(&ps, s, n);
    }
    if (rc == SLUICE_OK && !ps.header_done && (ps.have_policy || ps.nplans)) rc = end_header(&ps);
    if (rc == SLUICE_OK && !ps.have_policy) {
        set_error(err, ps.line + 1, "missing policy");
        rc = SLUICE_ESYNTAX;
    }
    if (rc == SLUICE_OK && keep_header(&ps) != SLUICE_OK) {
        ps.nomem = true;
        rc = SLUICE_ENOMEM;
    }
    if (rc != SLUICE_OK) {
        sluice_trace_free(ps.t);
        if (ps.nomem) {
            if (err != NULL) {
                err->line = 0;
                snprintf(err->reason, sizeof err->reason, "out of memory");
                snprintf(err->message, sizeof err->message, "error: out of memory");
            }
            return SLUICE_ENOMEM;
        }
        return rc;
    }
    ps.t->lines = ps.line;
    ps.t->policy = policy_to_sluice(&ps.pol);
    *out = ps.t;
    return SLUICE_OK;
}

/* ------------------------------------------------------------------ */
/* Accessors                                                           */
/* ------------------------------------------------------------------ */

sluice_policy_t sluice_trace_policy(const sluice_trace_t *trace) {
    if (trace == NULL) {
        sluice_policy_t none;
        memset(&none, 0, sizeof none);
        return none;
    }
    return trace->policy;
}

size_t sluice_trace_step_count(const sluice_trace_t *trace) { return trace != NULL ? trace->nsteps : 0; }

bool sluice_trace_is_v2(const sluice_trace_t *trace) { return trace != NULL && trace->v2; }

int sluice_trace_step(const sluice_trace_t *trace, size_t index, sluice_trace_step_t *out) {
    const struct sluice__trace_step *s;
    if (trace == NULL || out == NULL || index >= trace->nsteps) return SLUICE_EINVAL;
    s = &trace->steps[index];
    memset(out, 0, sizeof *out);
    out->time_ms = s->time_ms;
    out->verb = (sluice_trace_verb_t)s->verb;
    out->line = s->line;
    out->close_mode = SLUICE_CLOSE_DRAIN;
    if (s->verb == SLUICE_TRACE_CLOSE) {
        if (s->flags & SLUICE__STEP_DISCARD) out->close_mode = SLUICE_CLOSE_DISCARD;
        return SLUICE_OK;
    }
    out->key = sluice__step_key(trace, s);
    out->key_len = s->key_len;
    if (s->verb == SLUICE_TRACE_CALL) {
        out->value = sluice__step_value(trace, s);
        out->value_len = s->value_len;
    }
    out->cost = s->cost;
    out->has_cost = (s->flags & SLUICE__STEP_HAS_COST) != 0;
    out->plan = s->plan;
    out->has_plan = (s->flags & SLUICE__STEP_HAS_PLAN) != 0;
    return SLUICE_OK;
}

const sluice_plans_t *sluice_trace_plans(const sluice_trace_t *trace) {
    return trace != NULL && trace->table ? &trace->plans_c : NULL;
}
