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
    case SLUICE_THROTTLE: return BIT(OPT_INTERVAL) | BIT(OPT_LEADING) | BIT(OPT_TRAILING) | BIT(OPT_PICK);
    case SLUICE_AUDIT: return BIT(OPT_INTERVAL);
    case SLUICE_DEBOUNCE: return BIT(OPT_INTERVAL) | BIT(OPT_LEADING) | BIT(OPT_TRAILING) | BIT(OPT_MAXWAIT);
    case SLUICE_RATE: return BIT(OPT_LIMIT) | BIT(OPT_PER) | BIT(OPT_BURST);
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

static int add_step(struct parser *ps, uint64_t time_ms, uint8_t verb, uint8_t flags, uint64_t cost,
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
    s->line = ps->line;
    if (klen) memcpy(t->text + t->text_len, key->s, klen);
    if (vlen) memcpy(t->text + t->text_len + klen, value->s, vlen);
    t->text_len += klen + vlen;
    if (klen + vlen > t->max_kv) t->max_kv = klen + vlen;
    if (verb == SLUICE_TRACE_CALL) t->ncalls++;
    if (flags & SLUICE__STEP_HAS_COST) t->v2 = true;
    return SLUICE_OK;
}

/* The optional fields after a call's VALUE or a quota's KEY: only cost=N,
 * at most once. */
static int parse_cost_fields(struct parser *ps, const char *p, const char *end, uint64_t *cost, uint8_t *flags) {
    static const char prefix[] = "cost=";
    const size_t plen = sizeof prefix - 1;
    struct field f;

    *cost = 1;
    while (next_field(&p, end, &f)) {
        enum num_result nr;
        if (f.n < plen || memcmp(f.s, prefix, plen) != 0) {
            set_error_quoted(ps->err, ps->line, "extra field ", f.s, f.n, "");
            return SLUICE_ESYNTAX;
        }
        if (ps->pol.kind != SLUICE_RATE) {
            set_error(ps->err, ps->line, "cost needs a rate policy");
            return SLUICE_ESYNTAX;
        }
        if (*flags & SLUICE__STEP_HAS_COST) {
            set_error(ps->err, ps->line, "duplicate option 'cost'");
            return SLUICE_ESYNTAX;
        }
        *flags |= SLUICE__STEP_HAS_COST;
        if (f.n == plen) {
            set_error(ps->err, ps->line, "missing value for cost");
            return SLUICE_ESYNTAX;
        }
        nr = parse_number(f.s + plen, f.n - plen, SLUICE_TRACE_COUNT_MAX, cost);
        if (number_failed(ps->err, ps->line, nr, "cost", f.s + plen, f.n - plen)) return SLUICE_ESYNTAX;
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
        rc = parse_cost_fields(ps, p, end, &cost, &flags);
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
        return add_step(ps, time_ms, v, flags, 0, NULL, NULL);
    }
    if (key.n > SLUICE_KEY_MAX) {
        set_error(ps->err, ps->line, "key too long");
        return SLUICE_ESYNTAX;
    }
    if (nargs == 2 && (uint64_t)value.n > UINT32_MAX) {
        set_error(ps->err, ps->line, "value too long");
        return SLUICE_ESYNTAX;
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
    if (!ps->have_policy) {
        if (!field_is(&first, "policy")) {
            set_error(ps->err, ps->line, "missing policy");
            return SLUICE_ESYNTAX;
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
    if (rc == SLUICE_OK && !ps.have_policy) {
        set_error(err, ps.line + 1, "missing policy");
        rc = SLUICE_ESYNTAX;
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
    return SLUICE_OK;
}
