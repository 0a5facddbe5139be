/*
 * trace.c — parser and manual-clock runner of conformance traces
 * (sluice_trace.h). Depends on the core only.
 */
#include "trace-internal.h"

#include <inttypes.h>
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
    if (err == NULL)
        return;
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
static void set_error_quoted(struct sluice_trace_error *err, size_t line, const char *prefix,
                             const char *text, size_t n, const char *suffix) {
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

static bool is_blank(char c) {
    return c == ' ' || c == '\t';
}

/* The next field of [*p, end), or false at the end of the line. */
static bool next_field(const char **p, const char *end, struct field *f) {
    const char *q = *p;
    while (q < end && is_blank(*q))
        q++;
    if (q == end) {
        *p = q;
        return false;
    }
    f->s = q;
    while (q < end && !is_blank(*q))
        q++;
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
    if (n == 0)
        return false;
    for (size_t i = 0; i < n; i++)
        if (s[i] < '0' || s[i] > '9')
            return false;
    return true;
}

/* Decimal digits only, at most `max`; never overflows. */
static enum num_result parse_number(const char *s, size_t n, uint64_t max, uint64_t *out) {
    uint64_t v = 0;
    if (n >= 2 && s[0] == '-' && all_digits(s + 1, n - 1))
        return NUM_NEGATIVE;
    if (!all_digits(s, n))
        return NUM_BAD;
    for (size_t i = 0; i < n; i++) {
        uint64_t d = (uint64_t)(s[i] - '0');
        if (v > (max - d) / 10)
            return NUM_TOO_LARGE;
        v = v * 10 + d;
    }
    *out = v;
    return NUM_OK;
}

/* Reports a number error for NAME (the option or "time"); false when fine. */
static bool number_failed(struct sluice_trace_error *err, size_t line, enum num_result r, const char *name,
                          const char *s, size_t n) {
    switch (r) {
    case NUM_OK:
        return false;
    case NUM_NEGATIVE:
        set_error(err, line, "negative %s", name);
        return true;
    case NUM_TOO_LARGE:
        set_error(err, line, "number too large");
        return true;
    case NUM_BAD:
    default:
        set_error_quoted(err, line, "bad number ", s, n, "");
        return true;
    }
}

/* ------------------------------------------------------------------ */
/* Storage                                                             */
/* ------------------------------------------------------------------ */

static bool grow(void **ptr, size_t *cap, size_t need, size_t elem) {
    size_t ncap;
    void *p;
    if (need <= *cap)
        return true;
    ncap = *cap ? *cap : 64;
    while (ncap < need) {
        if (ncap > SIZE_MAX / 2 / elem)
            return false;
        ncap *= 2;
    }
    if (ncap > SIZE_MAX / elem)
        return false;
    p = realloc(*ptr, ncap * elem);
    if (p == NULL)
        return false;
    *ptr = p;
    *cap = ncap;
    return true;
}

void sluice_trace_free(sluice_trace_t *trace) {
    if (trace == NULL)
        return;
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
};

struct parser {
    sluice_trace_t *t;
    struct sluice_trace_error *err;
    struct policy_ms pol;
    size_t line;
    bool have_policy;
    bool closed;
    uint64_t last_time;
    bool nomem;
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
    OPT_COUNT
};

static const char *const option_names[OPT_COUNT] = {
    "interval", "leading", "trailing", "pick", "maxwait", "limit", "per", "burst",
};

#define BIT(o) (1u << (o))

static unsigned options_of(sluice_policy_kind_t kind) {
    switch (kind) {
    case SLUICE_THROTTLE:
        return BIT(OPT_INTERVAL) | BIT(OPT_LEADING) | BIT(OPT_TRAILING) | BIT(OPT_PICK);
    case SLUICE_AUDIT:
        return BIT(OPT_INTERVAL);
    case SLUICE_DEBOUNCE:
        return BIT(OPT_INTERVAL) | BIT(OPT_LEADING) | BIT(OPT_TRAILING) | BIT(OPT_MAXWAIT);
    case SLUICE_RATE:
        return BIT(OPT_LIMIT) | BIT(OPT_PER) | BIT(OPT_BURST);
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

/* The policy line; `p` points after the word "policy". */
static int parse_policy(struct parser *ps, const char *p, const char *end) {
    struct policy_ms *pol = &ps->pol;
    struct field f;
    unsigned allowed, seen = 0;

    if (!next_field(&p, end, &f)) {
        set_error(ps->err, ps->line, "missing field");
        return SLUICE_TRACE_ESYNTAX;
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
        return SLUICE_TRACE_ESYNTAX;
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
            return SLUICE_TRACE_ESYNTAX;
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
            return SLUICE_TRACE_ESYNTAX;
        }
        if (seen & BIT(id)) {
            set_error_quoted(ps->err, ps->line, "duplicate option ", name.s, name.n, "");
            return SLUICE_TRACE_ESYNTAX;
        }
        seen |= BIT(id);
        if (value.n == 0) {
            set_error(ps->err, ps->line, "missing value for %s", option_names[id]);
            return SLUICE_TRACE_ESYNTAX;
        }
        switch (id) {
        case OPT_LEADING:
        case OPT_TRAILING:
            if (parse_bool(&value, id == OPT_LEADING ? &pol->leading : &pol->trailing) != 0) {
                set_error_quoted(ps->err, ps->line, "bad value ", value.s, value.n,
                                 id == OPT_LEADING ? " for leading" : " for trailing");
                return SLUICE_TRACE_ESYNTAX;
            }
            break;
        case OPT_PICK:
            if (field_is(&value, "latest")) {
                pol->pick = SLUICE_PICK_LATEST;
            } else if (field_is(&value, "first")) {
                pol->pick = SLUICE_PICK_FIRST;
            } else {
                set_error_quoted(ps->err, ps->line, "bad value ", value.s, value.n, " for pick");
                return SLUICE_TRACE_ESYNTAX;
            }
            break;
        case OPT_INTERVAL:
        case OPT_MAXWAIT:
        case OPT_PER:
            nr = parse_number(value.s, value.n, SLUICE_TRACE_DURATION_MAX_MS, &num);
            if (number_failed(ps->err, ps->line, nr, option_names[id], value.s, value.n))
                return SLUICE_TRACE_ESYNTAX;
            if (id == OPT_INTERVAL) {
                pol->interval_ms = num;
            } else if (id == OPT_MAXWAIT) {
                pol->has_maxwait = true;
                pol->maxwait_ms = num;
            } else {
                if (num < 1) {
                    set_error(ps->err, ps->line, "per below 1");
                    return SLUICE_TRACE_ESYNTAX;
                }
                pol->per_ms = num;
            }
            break;
        case OPT_LIMIT:
        case OPT_BURST:
            nr = parse_number(value.s, value.n, SLUICE_TRACE_COUNT_MAX, &num);
            if (number_failed(ps->err, ps->line, nr, option_names[id], value.s, value.n))
                return SLUICE_TRACE_ESYNTAX;
            if (num < 1) {
                set_error(ps->err, ps->line, "%s below 1", option_names[id]);
                return SLUICE_TRACE_ESYNTAX;
            }
            if (id == OPT_LIMIT)
                pol->limit = num;
            else
                pol->burst = num;
            break;
        default:
            break;
        }
    }

    if (pol->kind == SLUICE_RATE) {
        if (!(seen & BIT(OPT_LIMIT))) {
            set_error(ps->err, ps->line, "missing option limit");
            return SLUICE_TRACE_ESYNTAX;
        }
        if (!(seen & BIT(OPT_PER))) {
            set_error(ps->err, ps->line, "missing option per");
            return SLUICE_TRACE_ESYNTAX;
        }
        if (!(seen & BIT(OPT_BURST)))
            pol->burst = pol->limit;
        return SLUICE_TRACE_OK;
    }
    if (!(seen & BIT(OPT_INTERVAL))) {
        set_error(ps->err, ps->line, "missing option interval");
        return SLUICE_TRACE_ESYNTAX;
    }
    if (pol->has_maxwait && pol->maxwait_ms < pol->interval_ms) {
        set_error(ps->err, ps->line, "maxwait below interval");
        return SLUICE_TRACE_ESYNTAX;
    }
    if (!pol->leading && !pol->trailing) {
        set_error(ps->err, ps->line, "no edge enabled");
        return SLUICE_TRACE_ESYNTAX;
    }
    return SLUICE_TRACE_OK;
}

static int add_step(struct parser *ps, uint64_t time_ms, uint8_t verb, uint8_t flags, uint64_t cost,
                    const struct field *key, const struct field *value) {
    sluice_trace_t *t = ps->t;
    struct sluice__trace_step *s;
    size_t klen = key ? key->n : 0, vlen = value ? value->n : 0;

    if (!grow((void **)&t->steps, &t->steps_cap, t->nsteps + 1, sizeof *t->steps) ||
        klen + vlen < klen || t->text_len > SIZE_MAX - (klen + vlen) ||
        !grow((void **)&t->text, &t->text_cap, t->text_len + klen + vlen, 1)) {
        ps->nomem = true;
        set_error(ps->err, ps->line, "out of memory");
        return SLUICE_TRACE_ENOMEM;
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
    s->line = ps->line;
    if (klen)
        memcpy(t->text + t->text_len, key->s, klen);
    if (vlen)
        memcpy(t->text + t->text_len + klen, value->s, vlen);
    t->text_len += klen + vlen;
    if (klen + vlen > t->max_kv)
        t->max_kv = klen + vlen;
    if (verb == SLUICE_TRACE_CALL)
        t->ncalls++;
    if (flags & SLUICE__STEP_HAS_COST)
        t->v2 = true;
    return SLUICE_TRACE_OK;
}

/* The optional fields after a call's VALUE or a quota's KEY: only cost=N,
 * at most once. */
static int parse_cost_fields(struct parser *ps, const char *p, const char *end, uint64_t *cost,
                             uint8_t *flags) {
    static const char prefix[] = "cost=";
    const size_t plen = sizeof prefix - 1;
    struct field f;

    *cost = 1;
    while (next_field(&p, end, &f)) {
        enum num_result nr;
        if (f.n < plen || memcmp(f.s, prefix, plen) != 0) {
            set_error_quoted(ps->err, ps->line, "extra field ", f.s, f.n, "");
            return SLUICE_TRACE_ESYNTAX;
        }
        if (ps->pol.kind != SLUICE_RATE) {
            set_error(ps->err, ps->line, "cost needs a rate policy");
            return SLUICE_TRACE_ESYNTAX;
        }
        if (*flags & SLUICE__STEP_HAS_COST) {
            set_error(ps->err, ps->line, "duplicate option 'cost'");
            return SLUICE_TRACE_ESYNTAX;
        }
        *flags |= SLUICE__STEP_HAS_COST;
        if (f.n == plen) {
            set_error(ps->err, ps->line, "missing value for cost");
            return SLUICE_TRACE_ESYNTAX;
        }
        nr = parse_number(f.s + plen, f.n - plen, SLUICE_TRACE_COUNT_MAX, cost);
        if (number_failed(ps->err, ps->line, nr, "cost", f.s + plen, f.n - plen))
            return SLUICE_TRACE_ESYNTAX;
        if (*cost < 1) {
            set_error(ps->err, ps->line, "cost below 1");
            return SLUICE_TRACE_ESYNTAX;
        }
    }
    return SLUICE_TRACE_OK;
}

/* A step line whose first field is `first`; `p` points after it. */
static int parse_step(struct parser *ps, const struct field *first, const char *p, const char *end) {
    struct field verb, key, value, extra;
    uint64_t time_ms = 0, cost = 0;
    uint8_t v, flags = 0;
    int nargs, rc;

    if (ps->closed) {
        set_error(ps->err, ps->line, "line after close");
        return SLUICE_TRACE_ESYNTAX;
    }
    if (field_is(first, "policy")) {
        set_error(ps->err, ps->line, "duplicate policy");
        return SLUICE_TRACE_ESYNTAX;
    }
    if (number_failed(ps->err, ps->line,
                      parse_number(first->s, first->n, SLUICE_TRACE_TIME_MAX_MS, &time_ms), "time",
                      first->s, first->n))
        return SLUICE_TRACE_ESYNTAX;
    if (time_ms < ps->last_time) {
        set_error(ps->err, ps->line, "time goes backwards");
        return SLUICE_TRACE_ESYNTAX;
    }
    if (!next_field(&p, end, &verb)) {
        set_error(ps->err, ps->line, "missing field");
        return SLUICE_TRACE_ESYNTAX;
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
            return SLUICE_TRACE_ESYNTAX;
        }
        v = SLUICE_TRACE_QUOTA;
        nargs = 1;
    } else {
        set_error_quoted(ps->err, ps->line, "unknown verb ", verb.s, verb.n, "");
        return SLUICE_TRACE_ESYNTAX;
    }
    if (!next_field(&p, end, &key) || (nargs == 2 && !next_field(&p, end, &value))) {
        set_error(ps->err, ps->line, "missing field");
        return SLUICE_TRACE_ESYNTAX;
    }
    if (v == SLUICE_TRACE_CALL || v == SLUICE_TRACE_QUOTA) {
        rc = parse_cost_fields(ps, p, end, &cost, &flags);
        if (rc != SLUICE_TRACE_OK)
            return rc;
        if (v == SLUICE_TRACE_QUOTA)
            ps->t->v2 = true;
    } else if (next_field(&p, end, &extra)) {
        set_error_quoted(ps->err, ps->line, "extra field ", extra.s, extra.n, "");
        return SLUICE_TRACE_ESYNTAX;
    }
    ps->last_time = time_ms;
    if (v == SLUICE_TRACE_CLOSE) {
        if (field_is(&key, "discard")) {
            flags |= SLUICE__STEP_DISCARD;
        } else if (!field_is(&key, "drain")) {
            set_error_quoted(ps->err, ps->line, "bad value ", key.s, key.n, " for close");
            return SLUICE_TRACE_ESYNTAX;
        }
        ps->closed = true;
        return add_step(ps, time_ms, v, flags, 0, NULL, NULL);
    }
    if (key.n > SLUICE_KEY_MAX) {
        set_error(ps->err, ps->line, "key too long");
        return SLUICE_TRACE_ESYNTAX;
    }
    if (nargs == 2 && (uint64_t)value.n > UINT32_MAX) {
        set_error(ps->err, ps->line, "value too long");
        return SLUICE_TRACE_ESYNTAX;
    }
    return add_step(ps, time_ms, v, flags, cost, &key, nargs == 2 ? &value : NULL);
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
                return SLUICE_TRACE_ESYNTAX;
            }
            break;
        }
        if (!(c == ' ' || c == '\t' || (c >= 0x21 && c <= 0x7e))) {
            set_error(ps->err, ps->line, "bad character 0x%02x", (unsigned)c);
            return SLUICE_TRACE_ESYNTAX;
        }
    }
    p = s;
    end = s + code;
    if (!next_field(&p, end, &first))
        return SLUICE_TRACE_OK; /* blank or comment */
    if (!ps->have_policy) {
        if (!field_is(&first, "policy")) {
            set_error(ps->err, ps->line, "missing policy");
            return SLUICE_TRACE_ESYNTAX;
        }
        ps->have_policy = true;
        return parse_policy(ps, p, end);
    }
    return parse_step(ps, &first, p, end);
}

static sluice_policy_t policy_to_sluice(const struct policy_ms *p) {
    /* Every duration is <= 10^12 ms, so <= 10^18 ns: no overflow. */
    int64_t interval = (int64_t)(p->interval_ms * SLUICE_TRACE_NS_PER_MS);

    switch (p->kind) {
    case SLUICE_THROTTLE:
        return sluice_throttle(interval, p->leading, p->trailing, p->pick);
    case SLUICE_AUDIT:
        return sluice_audit(interval);
    case SLUICE_DEBOUNCE:
        return sluice_debounce(interval, p->leading, p->trailing,
                               p->has_maxwait ? (int64_t)(p->maxwait_ms * SLUICE_TRACE_NS_PER_MS) : -1);
    case SLUICE_RATE:
    default:
        return sluice_rate(p->limit, (int64_t)(p->per_ms * SLUICE_TRACE_NS_PER_MS), p->burst);
    }
}

int sluice_trace_parse(const char *buf, size_t len, sluice_trace_t **out, sluice_trace_error_t *err) {
    struct parser ps;
    size_t pos = 0;
    int rc = SLUICE_TRACE_OK;

    if (err != NULL)
        memset(err, 0, sizeof *err);
    if (out == NULL)
        return SLUICE_TRACE_EINVAL;
    *out = NULL;
    if (buf == NULL && len != 0)
        return SLUICE_TRACE_EINVAL;
    memset(&ps, 0, sizeof ps);
    ps.err = err;
    ps.t = calloc(1, sizeof *ps.t);
    if (ps.t == NULL) {
        ps.nomem = true;
        rc = SLUICE_TRACE_ENOMEM;
    }

    while (rc == SLUICE_TRACE_OK && pos < len) {
        const char *s = buf + pos;
        const char *nl = memchr(s, '\n', len - pos);
        size_t n = nl ? (size_t)(nl - s) : len - pos;

        ps.line++;
        pos += n + (nl ? 1 : 0);
        if (n > 0 && s[n - 1] == '\r')
            n--;
        rc = parse_line(&ps, s, n);
    }
    if (rc == SLUICE_TRACE_OK && !ps.have_policy) {
        set_error(err, ps.line + 1, "missing policy");
        rc = SLUICE_TRACE_ESYNTAX;
    }
    if (rc != SLUICE_TRACE_OK) {
        sluice_trace_free(ps.t);
        if (ps.nomem) {
            if (err != NULL) {
                err->line = 0;
                snprintf(err->reason, sizeof err->reason, "out of memory");
                snprintf(err->message, sizeof err->message, "error: out of memory");
            }
            return SLUICE_TRACE_ENOMEM;
        }
        return rc;
    }
    ps.t->lines = ps.line;
    ps.t->policy = policy_to_sluice(&ps.pol);
    *out = ps.t;
    return SLUICE_TRACE_OK;
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

size_t sluice_trace_step_count(const sluice_trace_t *trace) {
    return trace != NULL ? trace->nsteps : 0;
}

bool sluice_trace_is_v2(const sluice_trace_t *trace) {
    return trace != NULL && trace->v2;
}

int sluice_trace_step(const sluice_trace_t *trace, size_t index, sluice_trace_step_t *out) {
    const struct sluice__trace_step *s;
    if (trace == NULL || out == NULL || index >= trace->nsteps)
        return SLUICE_TRACE_EINVAL;
    s = &trace->steps[index];
    memset(out, 0, sizeof *out);
    out->time_ms = s->time_ms;
    out->verb = (sluice_trace_verb_t)s->verb;
    out->line = s->line;
    out->close_mode = SLUICE_CLOSE_DRAIN;
    if (s->verb == SLUICE_TRACE_CLOSE) {
        if (s->flags & SLUICE__STEP_DISCARD)
            out->close_mode = SLUICE_CLOSE_DISCARD;
        return SLUICE_TRACE_OK;
    }
    out->key = sluice__step_key(trace, s);
    out->key_len = s->key_len;
    if (s->verb == SLUICE_TRACE_CALL) {
        out->value = sluice__step_value(trace, s);
        out->value_len = s->value_len;
    }
    out->cost = s->cost;
    out->has_cost = (s->flags & SLUICE__STEP_HAS_COST) != 0;
    return SLUICE_TRACE_OK;
}

const char *sluice_trace_strerror(int status) {
    switch (status) {
    case SLUICE_TRACE_OK:
        return "success";
    case SLUICE_TRACE_ESYNTAX:
        return "malformed trace";
    case SLUICE_TRACE_ENOMEM:
        return "out of memory";
    case SLUICE_TRACE_EINTERNAL:
        return "internal error: the limiter broke a rule of its API";
    case SLUICE_TRACE_ELIMIT:
        return "too many timer advances";
    case SLUICE_TRACE_EINVAL:
        return "invalid argument";
    default:
        return "unknown status";
    }
}

/* ------------------------------------------------------------------ */
/* Output lines (shared with realtime.c)                               */
/* ------------------------------------------------------------------ */

void sluice__trace_set_message(sluice_trace_run_result_t *res, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(res->message, sizeof res->message, fmt, ap);
    va_end(ap);
}

/* The longest line besides KEY and VALUE: "TIME quota  remaining=R full=F
 * retry=S" with 20-digit numbers is under 120 bytes. */
#define LINE_FIXED 160

int sluice__trace_sink_init(struct sluice__trace_sink *k, const sluice_trace_t *t,
                            const sluice_trace_run_options_t *opt, sluice_trace_run_result_t *res) {
    memset(k, 0, sizeof *k);
    k->t = t;
    k->res = res;
    if (opt != NULL) {
        k->fn = opt->on_output;
        k->user = opt->user;
    }
    k->cap = LINE_FIXED + t->max_kv;
    k->buf = malloc(k->cap);
    return k->buf != NULL ? SLUICE_TRACE_OK : SLUICE_TRACE_ENOMEM;
}

void sluice__trace_sink_free(struct sluice__trace_sink *k) {
    free(k->buf);
    k->buf = NULL;
}

static size_t put_u64(char *b, uint64_t v) {
    char tmp[24];
    size_t i = sizeof tmp, n;
    do {
        tmp[--i] = (char)('0' + v % 10);
        v /= 10;
    } while (v != 0);
    n = sizeof tmp - i;
    memcpy(b, tmp + i, n);
    return n;
}

static size_t put_str(char *b, const char *s) {
    size_t n = strlen(s);
    memcpy(b, s, n);
    return n;
}

/* "TIME WORD KEY " into the buffer; fills the common fields. */
static size_t start_line(struct sluice__trace_sink *k, sluice_trace_output_t *o,
                         sluice_trace_output_kind_t kind, const char *word, uint64_t time_ms,
                         size_t step) {
    const struct sluice__trace_step *s = &k->t->steps[step];
    size_t n = 0;
    memset(o, 0, sizeof *o);
    o->kind = kind;
    o->time_ms = time_ms;
    o->step = step;
    o->key = sluice__step_key(k->t, s);
    o->key_len = s->key_len;
    n += put_u64(k->buf + n, time_ms);
    k->buf[n++] = ' ';
    n += put_str(k->buf + n, word);
    k->buf[n++] = ' ';
    memcpy(k->buf + n, o->key, o->key_len);
    n += o->key_len;
    k->buf[n++] = ' ';
    return n;
}

static void finish_line(struct sluice__trace_sink *k, sluice_trace_output_t *o, size_t n) {
    k->buf[n] = '\0';
    o->text = k->buf;
    o->text_len = n;
    k->res->lines++;
    if (k->fn != NULL)
        k->fn(k->user, o);
}

void sluice__trace_put_value(struct sluice__trace_sink *k, sluice_trace_output_kind_t kind, uint64_t time_ms,
                             size_t step, size_t successor) {
    static const char *const words[] = { "?", "emit", "drop", "discard" };
    const struct sluice__trace_step *s = &k->t->steps[step];
    sluice_trace_output_t o;
    size_t n = start_line(k, &o, kind, words[kind <= SLUICE_TRACE_OUT_DISCARD ? kind : 0], time_ms, step);
    o.value = sluice__step_value(k->t, s);
    o.value_len = s->value_len;
    memcpy(k->buf + n, o.value, o.value_len);
    n += o.value_len;
    if (kind == SLUICE_TRACE_OUT_DROP && successor < k->t->nsteps) {
        const struct sluice__trace_step *r = &k->t->steps[successor];
        o.has_successor = true;
        o.successor_step = successor;
        o.successor_value = sluice__step_value(k->t, r);
        o.successor_value_len = r->value_len;
    }
    finish_line(k, &o, n);
}

void sluice__trace_put_pending(struct sluice__trace_sink *k, uint64_t time_ms, size_t step, bool yes) {
    sluice_trace_output_t o;
    size_t n = start_line(k, &o, SLUICE_TRACE_OUT_PENDING, "pending", time_ms, step);
    o.yes = yes;
    n += put_str(k->buf + n, yes ? "yes" : "no");
    finish_line(k, &o, n);
}

/* ns -> ms, rounded up (a time shown to people is never early). */
static uint64_t ms_up(uint64_t ns) {
    return ns / SLUICE_TRACE_NS_PER_MS + (ns % SLUICE_TRACE_NS_PER_MS != 0);
}

void sluice__trace_put_quota(struct sluice__trace_sink *k, uint64_t time_ms, size_t step,
                             const sluice_quota_t *q) {
    sluice_trace_output_t o;
    size_t n = start_line(k, &o, SLUICE_TRACE_OUT_QUOTA, "quota", time_ms, step);
    o.remaining = q->remaining;
    o.full_ms = ms_up(q->full);
    o.retry_never = q->retry == SLUICE_NEVER;
    o.retry_ms = o.retry_never ? SLUICE_TRACE_NEVER : ms_up(q->retry);
    n += put_str(k->buf + n, "remaining=");
    n += put_u64(k->buf + n, o.remaining);
    n += put_str(k->buf + n, " full=");
    n += put_u64(k->buf + n, o.full_ms);
    n += put_str(k->buf + n, " retry=");
    if (o.retry_never)
        n += put_str(k->buf + n, "never");
    else
        n += put_u64(k->buf + n, o.retry_ms);
    finish_line(k, &o, n);
}

/* ------------------------------------------------------------------ */
/* Manual-clock runner                                                 */
/* ------------------------------------------------------------------ */

enum token_state {
    TOK_NONE = 0,      /* not submitted yet */
    TOK_IN_SUBMIT = 1, /* its submit is running */
    TOK_HELD = 2,      /* SCHEDULED: the limiter holds it */
    TOK_DONE = 3       /* reported */
};

struct run {
    const sluice_trace_t *t;
    struct sluice__trace_sink sink;
    uint8_t *state;
    sluice_trace_run_result_t *res;
    const sluice_trace_run_options_t *opt;
    sluice_limiter_t *lim;
    uint64_t now;     /* time of the call into the limiter being made, ns */
    uint64_t seen;    /* latest time handed to the limiter, ns */
    uint64_t last_at; /* latest time of a line, ns */
    uint64_t first_unaligned;
    bool discard_ok;  /* inside close(discard) */
    int status;       /* first failure */
    /* batch_size > 1: the batch being submitted by sluice_limiter_submit_many() */
    sluice_call_t *calls;
    sluice_decision_t *decs;
    int *rcs;
    size_t batch_first; /* step index of calls[0] */
    size_t batch_n;     /* calls in the batch (0: none running) */
    size_t batch_done;  /* calls whose outputs are written */
    uint64_t batch_t;
};

static void run_fail(struct run *r, int status, const char *fmt, ...)
#if defined(__GNUC__) || defined(__clang__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;

static void run_fail(struct run *r, int status, const char *fmt, ...) {
    va_list ap;
    if (r->status != SLUICE_TRACE_OK)
        return;
    r->status = status;
    va_start(ap, fmt);
    vsnprintf(r->res->message, sizeof r->res->message, fmt, ap);
    va_end(ap);
}

/* Lines come in time order. */
static void check_order(struct run *r, uint64_t at_ns, size_t line) {
    if (at_ns < r->last_at)
        run_fail(r, SLUICE_TRACE_EINTERNAL,
                 "line %zu: output at %" PRIu64 " ns is earlier than the previous output (%" PRIu64 " ns)",
                 line, at_ns, r->last_at);
    else
        r->last_at = at_ns;
}

static void put_value(struct run *r, uint64_t at_ns, sluice_trace_output_kind_t kind, size_t step,
                      size_t successor) {
    check_order(r, at_ns, r->t->steps[step].line);
    sluice__trace_put_value(&r->sink, kind, at_ns / SLUICE_TRACE_NS_PER_MS, step, successor);
}

static sluice_trace_output_kind_t event_output(sluice_event_kind_t k) {
    switch (k) {
    case SLUICE_EVENT_EMIT:
        return SLUICE_TRACE_OUT_EMIT;
    case SLUICE_EVENT_DROP:
        return SLUICE_TRACE_OUT_DROP;
    case SLUICE_EVENT_DISCARD:
        return SLUICE_TRACE_OUT_DISCARD;
    }
    return (sluice_trace_output_kind_t)0;
}

static const char *event_word(sluice_event_kind_t k) {
    return k == SLUICE_EVENT_EMIT ? "emit" : k == SLUICE_EVENT_DROP ? "drop" : "discard";
}

static void finish_batch_calls(struct run *r);

static void on_event(void *user, const sluice_event_t *ev) {
    struct run *r = user;
    const struct sluice__trace_step *s;
    sluice_trace_output_kind_t kind;
    size_t successor = SIZE_MAX;

    r->res->events++;
    if (r->status != SLUICE_TRACE_OK)
        return;
    if (ev == NULL) {
        run_fail(r, SLUICE_TRACE_EINTERNAL, "event callback called with NULL");
        return;
    }
    if (ev->token >= r->t->nsteps || r->t->steps[ev->token].verb != SLUICE_TRACE_CALL) {
        run_fail(r, SLUICE_TRACE_EINTERNAL, "event for unknown token %" PRIu64, ev->token);
        return;
    }
    /* An event during a batch comes after the calls that have returned:
     * their outputs go first, as with single calls. */
    finish_batch_calls(r);
    if (r->status != SLUICE_TRACE_OK)
        return;
    s = &r->t->steps[ev->token];
    switch (r->state[ev->token]) {
    case TOK_HELD:
        break;
    case TOK_IN_SUBMIT:
        run_fail(r, SLUICE_TRACE_EINTERNAL,
                 "the call of line %zu was reported by an event before its submit returned", s->line);
        return;
    case TOK_DONE:
        run_fail(r, SLUICE_TRACE_EINTERNAL, "the call of line %zu was reported twice", s->line);
        return;
    default:
        run_fail(r, SLUICE_TRACE_EINTERNAL, "the call of line %zu was reported before it was submitted",
                 s->line);
        return;
    }
    if (ev->key.kind != SLUICE_KEY_BYTES || ev->key.len != s->key_len ||
        (s->key_len != 0 &&
         (ev->key.bytes == NULL || memcmp(ev->key.bytes, sluice__step_key(r->t, s), s->key_len) != 0))) {
        run_fail(r, SLUICE_TRACE_EINTERNAL, "event for the call of line %zu carries another key", s->line);
        return;
    }
    kind = event_output(ev->kind);
    if (kind == 0) {
        run_fail(r, SLUICE_TRACE_EINTERNAL, "event of unknown kind %d for the call of line %zu",
                 (int)ev->kind, s->line);
        return;
    }
    if (ev->kind == SLUICE_EVENT_DISCARD && !r->discard_ok) {
        run_fail(r, SLUICE_TRACE_EINTERNAL, "the call of line %zu was discarded outside close(discard)",
                 s->line);
        return;
    }
    if (ev->at > r->now) {
        run_fail(r, SLUICE_TRACE_EINTERNAL,
                 "%s of the call of line %zu at %" PRIu64 " ns, later than now (%" PRIu64 " ns)",
                 event_word(ev->kind), s->line, ev->at, r->now);
        return;
    }
    if (ev->kind == SLUICE_EVENT_DROP && ev->has_successor) {
        const struct sluice__trace_step *n;
        if (ev->successor >= r->t->nsteps || r->t->steps[ev->successor].verb != SLUICE_TRACE_CALL) {
            run_fail(r, SLUICE_TRACE_EINTERNAL,
                     "the drop of the call of line %zu names an unknown successor token %" PRIu64, s->line,
                     ev->successor);
            return;
        }
        n = &r->t->steps[ev->successor];
        if (n->key_len != s->key_len ||
            memcmp(sluice__step_key(r->t, n), sluice__step_key(r->t, s), s->key_len) != 0) {
            run_fail(r, SLUICE_TRACE_EINTERNAL,
                     "the drop of the call of line %zu names a successor of another key (line %zu)", s->line,
                     n->line);
            return;
        }
        successor = (size_t)ev->successor;
    }
    if (ev->at % SLUICE_TRACE_NS_PER_MS != 0) {
        if (r->res->unaligned++ == 0)
            r->first_unaligned = ev->at;
    }
    r->state[ev->token] = TOK_DONE;
    put_value(r, ev->at, kind, (size_t)ev->token, successor);
}

static void check_core(struct run *r, const char *where, size_t line) {
    if (r->opt->check_invariants && r->status == SLUICE_TRACE_OK && sluice_limiter_check(r->lim) != 0)
        run_fail(r, SLUICE_TRACE_EINTERNAL, "sluice_limiter_check failed %s line %zu", where, line);
}

static void set_now(struct run *r, uint64_t t) {
    if (t > r->seen)
        r->seen = t;
    r->now = r->seen; /* the core treats an earlier time as the latest it saw */
}

/* Fires every deadline <= limit, each at its own time. */
static void fire_until(struct run *r, uint64_t limit, size_t line) {
    uint64_t d = sluice_limiter_next_deadline(r->lim);
    while (r->status == SLUICE_TRACE_OK && d <= limit) {
        int64_t n;
        uint64_t d2;
        if (r->opt->max_advances != 0 && r->res->advances >= r->opt->max_advances) {
            run_fail(r, SLUICE_TRACE_ELIMIT, "more than %" PRIu64 " advance calls (before line %zu)",
                     r->opt->max_advances, line);
            return;
        }
        set_now(r, d);
        n = sluice_limiter_advance(r->lim, d, 0);
        r->res->advances++;
        if (n < 0) {
            run_fail(r, SLUICE_TRACE_EINTERNAL, "sluice_limiter_advance(%" PRIu64 " ns) failed: %s", d,
                     sluice_strerror((int)n));
            return;
        }
        check_core(r, "after an advance before", line);
        d2 = sluice_limiter_next_deadline(r->lim);
        if (d2 <= d) {
            run_fail(r, SLUICE_TRACE_EINTERNAL,
                     "next deadline %" PRIu64 " ns is not after %" PRIu64
                     " ns, the time just advanced to (before line %zu)",
                     d2, d, line);
            return;
        }
        d = d2;
    }
}

static void call_returned(struct run *r, size_t i, uint64_t t, int rc, sluice_decision_t dec) {
    const struct sluice__trace_step *s = &r->t->steps[i];
    if (rc < 0) {
        run_fail(r, SLUICE_TRACE_EINTERNAL, "line %zu: sluice_limiter_submit%s failed: %s", s->line,
                 (s->flags & SLUICE__STEP_HAS_COST) ? "_cost" : "", sluice_strerror(rc));
        return;
    }
    if (r->status != SLUICE_TRACE_OK)
        return;
    switch (dec.kind) {
    case SLUICE_EMITTED:
        if (dec.at != t)
            run_fail(r, SLUICE_TRACE_EINTERNAL,
                     "line %zu: EMITTED decision at %" PRIu64 " ns, not now (%" PRIu64 " ns)", s->line, dec.at,
                     t);
        r->state[i] = TOK_DONE;
        put_value(r, t, SLUICE_TRACE_OUT_EMIT, i, SIZE_MAX);
        break;
    case SLUICE_DROPPED:
        r->state[i] = TOK_DONE;
        put_value(r, t, SLUICE_TRACE_OUT_DROP, i, SIZE_MAX);
        break;
    case SLUICE_SCHEDULED:
        if (dec.at < t)
            run_fail(r, SLUICE_TRACE_EINTERNAL,
                     "line %zu: SCHEDULED at %" PRIu64 " ns, before now (%" PRIu64 " ns)", s->line, dec.at, t);
        r->state[i] = TOK_HELD;
        break;
    default:
        run_fail(r, SLUICE_TRACE_EINTERNAL, "line %zu: unknown decision kind %d", s->line, (int)dec.kind);
        break;
    }
}

static void run_call(struct run *r, size_t i, sluice_key_t key, uint64_t t) {
    const struct sluice__trace_step *s = &r->t->steps[i];
    sluice_decision_t dec;
    int rc;

    memset(&dec, 0, sizeof dec);
    r->state[i] = TOK_IN_SUBMIT;
    if (s->flags & SLUICE__STEP_HAS_COST)
        rc = sluice_limiter_submit_cost(r->lim, key, (uint64_t)i, s->cost, t, &dec);
    else
        rc = sluice_limiter_submit(r->lim, key, (uint64_t)i, t, &dec);
    call_returned(r, i, t, rc, dec);
}

/* A result no call returns: marks the calls of a batch that have not
 * returned yet (sluice_limiter_submit_many() stores each result when its
 * call returns). */
#define RC_RUNNING 1

/* Writes the outputs of the batch's calls that have returned, in order. */
static void finish_batch_calls(struct run *r) {
    while (r->batch_done < r->batch_n && r->rcs[r->batch_done] != RC_RUNNING) {
        size_t j = r->batch_done++;
        call_returned(r, r->batch_first + j, r->batch_t, r->rcs[j], r->decs[j]);
    }
}

/* Submits steps [first, first + n), all calls at time t, as one batch. */
static void run_batch(struct run *r, size_t first, size_t n, uint64_t t) {
    for (size_t j = 0; j < n; j++) {
        const struct sluice__trace_step *s = &r->t->steps[first + j];
        r->calls[j].key = sluice_key_bytes(sluice__step_key(r->t, s), s->key_len);
        r->calls[j].token = (uint64_t)(first + j);
        r->calls[j].cost = (s->flags & SLUICE__STEP_HAS_COST) ? s->cost : 1;
        memset(&r->decs[j], 0, sizeof r->decs[j]);
        r->rcs[j] = RC_RUNNING;
        r->state[first + j] = TOK_IN_SUBMIT;
    }
    r->batch_first = first;
    r->batch_n = n;
    r->batch_done = 0;
    r->batch_t = t;
    (void)sluice_limiter_submit_many(r->lim, r->calls, n, t, r->decs, r->rcs);
    for (size_t j = r->batch_done; j < n; j++)
        if (r->rcs[j] == RC_RUNNING) {
            run_fail(r, SLUICE_TRACE_EINTERNAL, "line %zu: sluice_limiter_submit_many left no result",
                     r->t->steps[first + j].line);
            r->rcs[j] = SLUICE_EINVAL;
        }
    finish_batch_calls(r);
    r->batch_n = 0;
}

static void run_quota(struct run *r, size_t i, sluice_key_t key, uint64_t t) {
    const struct sluice__trace_step *s = &r->t->steps[i];
    sluice_quota_t q;
    int rc;

    memset(&q, 0, sizeof q);
    rc = sluice_limiter_quota(r->lim, key, s->cost, t, &q);
    if (rc != 0) {
        run_fail(r, SLUICE_TRACE_EINTERNAL, "line %zu: sluice_limiter_quota failed: %s", s->line,
                 sluice_strerror(rc));
        return;
    }
    if (q.remaining > q.burst || q.full < t || (q.retry != SLUICE_NEVER && q.retry < t) ||
        (q.retry == SLUICE_NEVER) != (s->cost > q.burst)) {
        run_fail(r, SLUICE_TRACE_EINTERNAL,
                 "line %zu: inconsistent quota at %" PRIu64 " ns (burst %" PRIu64 ", remaining %" PRIu64
                 ", full %" PRIu64 " ns, retry %" PRIu64 " ns, cost %" PRIu64 ")",
                 s->line, t, q.burst, q.remaining, q.full, q.retry, s->cost);
        return;
    }
    check_order(r, t, s->line);
    sluice__trace_put_quota(&r->sink, s->time_ms, i, &q);
}

static void run_step(struct run *r, size_t i) {
    const struct sluice__trace_step *s = &r->t->steps[i];
    uint64_t t = s->time_ms * SLUICE_TRACE_NS_PER_MS; /* <= 10^19 < 2^64 */
    sluice_key_t key = sluice_key_bytes(sluice__step_key(r->t, s), s->key_len);
    int rc;

    fire_until(r, t, s->line);
    if (r->status != SLUICE_TRACE_OK)
        return;
    set_now(r, t);
    switch (s->verb) {
    case SLUICE_TRACE_CALL:
        run_call(r, i, key, t);
        break;
    case SLUICE_TRACE_QUOTA:
        run_quota(r, i, key, t);
        break;
    case SLUICE_TRACE_FLUSH:
    case SLUICE_TRACE_CANCEL:
        rc = s->verb == SLUICE_TRACE_FLUSH ? sluice_limiter_flush(r->lim, key, t)
                                           : sluice_limiter_cancel(r->lim, key, t);
        if (rc != 0 && rc != 1)
            run_fail(r, SLUICE_TRACE_EINTERNAL, "line %zu: sluice_limiter_%s returned %d (%s)", s->line,
                     s->verb == SLUICE_TRACE_FLUSH ? "flush" : "cancel", rc, sluice_strerror(rc));
        break;
    case SLUICE_TRACE_PENDING:
        rc = sluice_limiter_pending(r->lim, key, t);
        if (rc != 0 && rc != 1) {
            run_fail(r, SLUICE_TRACE_EINTERNAL, "line %zu: sluice_limiter_pending returned %d (%s)", s->line,
                     rc, sluice_strerror(rc));
            break;
        }
        check_order(r, t, s->line);
        sluice__trace_put_pending(&r->sink, s->time_ms, i, rc == 1);
        break;
    case SLUICE_TRACE_CLOSE:
        r->discard_ok = (s->flags & SLUICE__STEP_DISCARD) != 0;
        rc = sluice_limiter_close(r->lim, t, r->discard_ok ? SLUICE_CLOSE_DISCARD : SLUICE_CLOSE_DRAIN);
        r->discard_ok = false;
        if (rc != 0)
            run_fail(r, SLUICE_TRACE_EINTERNAL, "line %zu: sluice_limiter_close failed: %s", s->line,
                     sluice_strerror(rc));
        break;
    default:
        run_fail(r, SLUICE_TRACE_EINTERNAL, "line %zu: bad step", s->line);
        break;
    }
    if (s->verb != SLUICE_TRACE_CLOSE)
        check_core(r, "after", s->line);
}

int sluice_trace_run(const sluice_trace_t *trace, const sluice_trace_run_options_t *options,
                     sluice_trace_run_result_t *result) {
    static const sluice_trace_run_options_t no_options;
    sluice_trace_run_result_t local;
    struct run r;
    sluice_config_t cfg;
    bool closed = false;
    int rc;

    if (result == NULL)
        result = &local;
    memset(result, 0, sizeof *result);
    if (options == NULL)
        options = &no_options;
    memset(&r, 0, sizeof r);
    r.t = trace;
    r.res = result;
    r.opt = options;
    if (trace == NULL) {
        run_fail(&r, SLUICE_TRACE_EINVAL, "no trace");
        return r.status;
    }
    size_t batch = options->batch_size > 1 ? options->batch_size : 1;
    if (batch > trace->nsteps)
        batch = trace->nsteps ? trace->nsteps : 1;
    r.state = calloc(trace->nsteps ? trace->nsteps : 1, 1);
    if (batch > 1) {
        r.calls = calloc(batch, sizeof *r.calls);
        r.decs = calloc(batch, sizeof *r.decs);
        r.rcs = calloc(batch, sizeof *r.rcs);
    }
    if (r.state == NULL || (batch > 1 && (!r.calls || !r.decs || !r.rcs)) ||
        sluice__trace_sink_init(&r.sink, trace, options, result) != SLUICE_TRACE_OK) {
        free(r.state);
        free(r.calls);
        free(r.decs);
        free(r.rcs);
        run_fail(&r, SLUICE_TRACE_ENOMEM, "out of memory");
        return r.status;
    }

    memset(&cfg, 0, sizeof cfg);
    cfg.policy = trace->policy;
    cfg.tick_ns = SLUICE_TRACE_NS_PER_MS;
    cfg.start_ns = 0;
    cfg.on_event = on_event;
    cfg.user = &r;
    if (!options->random_seed) {
        cfg.fixed_seed = true;
        cfg.seed[0] = SLUICE__TRACE_SEED0;
        cfg.seed[1] = SLUICE__TRACE_SEED1;
    }
    rc = sluice_limiter_new(&r.lim, &cfg);
    if (rc != 0) {
        run_fail(&r, rc == SLUICE_ENOMEM ? SLUICE_TRACE_ENOMEM : SLUICE_TRACE_EINTERNAL,
                 "sluice_limiter_new failed for a valid policy: %s", sluice_strerror(rc));
        sluice__trace_sink_free(&r.sink);
        free(r.state);
        free(r.calls);
        free(r.decs);
        free(r.rcs);
        return r.status;
    }

    for (size_t i = 0; i < trace->nsteps && r.status == SLUICE_TRACE_OK;) {
        const struct sluice__trace_step *s = &trace->steps[i];
        size_t n = 1;
        if (batch > 1 && s->verb == SLUICE_TRACE_CALL) {
            /* consecutive calls at the same time, up to batch_size */
            while (n < batch && i + n < trace->nsteps && trace->steps[i + n].verb == SLUICE_TRACE_CALL &&
                   trace->steps[i + n].time_ms == s->time_ms)
                n++;
        }
        if (n > 1) {
            uint64_t t = s->time_ms * SLUICE_TRACE_NS_PER_MS;
            fire_until(&r, t, s->line);
            if (r.status == SLUICE_TRACE_OK) {
                set_now(&r, t);
                run_batch(&r, i, n, t);
                check_core(&r, "after the batch ending at", trace->steps[i + n - 1].line);
            }
        } else {
            run_step(&r, i);
        }
        if (s->verb == SLUICE_TRACE_CLOSE)
            closed = true;
        i += n;
    }
    if (r.status == SLUICE_TRACE_OK && !closed)
        fire_until(&r, UINT64_MAX - 1, trace->nsteps ? trace->steps[trace->nsteps - 1].line : 0);

    if (r.status == SLUICE_TRACE_OK) {
        size_t missing = 0, first = 0;
        for (size_t i = 0; i < trace->nsteps; i++) {
            if (trace->steps[i].verb == SLUICE_TRACE_CALL && r.state[i] != TOK_DONE) {
                if (missing++ == 0)
                    first = i;
            }
        }
        if (missing != 0)
            run_fail(&r, SLUICE_TRACE_EINTERNAL, "%zu call(s) never reported (the first: line %zu)", missing,
                     trace->steps[first].line);
    }
    /* Every token is reported by now: an event from free() is a double report. */
    sluice_limiter_free(r.lim);
    r.lim = NULL;

    if (r.status == SLUICE_TRACE_OK && result->unaligned != 0)
        run_fail(&r, SLUICE_TRACE_EINTERNAL,
                 "%" PRIu64 " event time(s) not a whole millisecond (the first: %" PRIu64 " ns)",
                 result->unaligned, r.first_unaligned);
    sluice__trace_sink_free(&r.sink);
    free(r.state);
    free(r.calls);
    free(r.decs);
    free(r.rcs);
    return r.status;
}
