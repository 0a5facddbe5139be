/*
 * trace.c — parser and runner of conformance traces (see trace.h).
 */
#include "sluice_trace.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------ */
/* Errors                                                              */
/* ------------------------------------------------------------------ */

/* Longest piece of input quoted in a reason. */
#define QUOTE_MAX 40

static void set_error(struct trace_error *err, size_t line, const char *fmt, ...)
#if defined(__GNUC__) || defined(__clang__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;

static void set_error(struct trace_error *err, size_t line, const char *fmt, ...) {
    va_list ap;
    if (err == NULL)
        return;
    err->line = line;
    va_start(ap, fmt);
    vsnprintf(err->reason, sizeof err->reason, fmt, ap);
    va_end(ap);
    if (err->reason[0] == '\0') /* never empty */
        snprintf(err->reason, sizeof err->reason, "error");
}

/* Error "PREFIX'TEXT'SUFFIX", TEXT cut to QUOTE_MAX characters plus "...".
 * TEXT is printable ASCII here (the character check runs first). */
static void set_error_quoted(struct trace_error *err, size_t line, const char *prefix,
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
static bool number_failed(struct trace_error *err, size_t line, enum num_result r, const char *name,
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

void trace_free(struct trace *trace) {
    if (trace == NULL)
        return;
    free(trace->steps);
    free(trace->text);
    memset(trace, 0, sizeof *trace);
}

/* ------------------------------------------------------------------ */
/* Parser                                                              */
/* ------------------------------------------------------------------ */

struct parser {
    struct trace *t;
    struct trace_error *err;
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
    struct trace_policy *pol = &ps->t->policy;
    struct field f;
    unsigned allowed, seen = 0;

    if (!next_field(&p, end, &f)) {
        set_error(ps->err, ps->line, "missing field");
        return TRACE_ERR_SYNTAX;
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
        return TRACE_ERR_SYNTAX;
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
            return TRACE_ERR_SYNTAX;
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
            return TRACE_ERR_SYNTAX;
        }
        if (seen & BIT(id)) {
            set_error_quoted(ps->err, ps->line, "duplicate option ", name.s, name.n, "");
            return TRACE_ERR_SYNTAX;
        }
        seen |= BIT(id);
        if (value.n == 0) {
            set_error(ps->err, ps->line, "missing value for %s", option_names[id]);
            return TRACE_ERR_SYNTAX;
        }
        switch (id) {
        case OPT_LEADING:
        case OPT_TRAILING:
            if (parse_bool(&value, id == OPT_LEADING ? &pol->leading : &pol->trailing) != 0) {
                set_error_quoted(ps->err, ps->line, "bad value ", value.s, value.n,
                                 id == OPT_LEADING ? " for leading" : " for trailing");
                return TRACE_ERR_SYNTAX;
            }
            break;
        case OPT_PICK:
            if (field_is(&value, "latest")) {
                pol->pick = SLUICE_PICK_LATEST;
            } else if (field_is(&value, "first")) {
                pol->pick = SLUICE_PICK_FIRST;
            } else {
                set_error_quoted(ps->err, ps->line, "bad value ", value.s, value.n, " for pick");
                return TRACE_ERR_SYNTAX;
            }
            break;
        case OPT_INTERVAL:
        case OPT_MAXWAIT:
        case OPT_PER:
            nr = parse_number(value.s, value.n, TRACE_DURATION_MAX_MS, &num);
            if (number_failed(ps->err, ps->line, nr, option_names[id], value.s, value.n))
                return TRACE_ERR_SYNTAX;
            if (id == OPT_INTERVAL) {
                pol->interval_ms = num;
            } else if (id == OPT_MAXWAIT) {
                pol->has_maxwait = true;
                pol->maxwait_ms = num;
            } else {
                if (num < 1) {
                    set_error(ps->err, ps->line, "per below 1");
                    return TRACE_ERR_SYNTAX;
                }
                pol->per_ms = num;
            }
            break;
        case OPT_LIMIT:
        case OPT_BURST:
            nr = parse_number(value.s, value.n, TRACE_RATE_MAX, &num);
            if (number_failed(ps->err, ps->line, nr, option_names[id], value.s, value.n))
                return TRACE_ERR_SYNTAX;
            if (num < 1) {
                set_error(ps->err, ps->line, "%s below 1", option_names[id]);
                return TRACE_ERR_SYNTAX;
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
            return TRACE_ERR_SYNTAX;
        }
        if (!(seen & BIT(OPT_PER))) {
            set_error(ps->err, ps->line, "missing option per");
            return TRACE_ERR_SYNTAX;
        }
        if (!(seen & BIT(OPT_BURST)))
            pol->burst = pol->limit;
        return TRACE_OK;
    }
    if (!(seen & BIT(OPT_INTERVAL))) {
        set_error(ps->err, ps->line, "missing option interval");
        return TRACE_ERR_SYNTAX;
    }
    if (pol->has_maxwait && pol->maxwait_ms < pol->interval_ms) {
        set_error(ps->err, ps->line, "maxwait below interval");
        return TRACE_ERR_SYNTAX;
    }
    if (!pol->leading && !pol->trailing) {
        set_error(ps->err, ps->line, "no edge enabled");
        return TRACE_ERR_SYNTAX;
    }
    return TRACE_OK;
}

static int add_step(struct parser *ps, uint64_t time_ms, uint8_t verb, const struct field *key,
                    const struct field *value) {
    struct trace *t = ps->t;
    struct trace_step *s;
    size_t klen = key ? key->n : 0, vlen = value ? value->n : 0;

    if (!grow((void **)&t->steps, &t->steps_cap, t->nsteps + 1, sizeof *t->steps) ||
        klen + vlen < klen || t->text_len > SIZE_MAX - (klen + vlen) ||
        !grow((void **)&t->text, &t->text_cap, t->text_len + klen + vlen, 1)) {
        ps->nomem = true;
        set_error(ps->err, ps->line, "out of memory");
        return TRACE_ERR_NOMEM;
    }
    s = &t->steps[t->nsteps++];
    memset(s, 0, sizeof *s);
    s->time_ms = time_ms;
    s->text_off = t->text_len;
    s->key_len = (uint16_t)klen;
    s->value_len = (uint32_t)vlen;
    s->verb = verb;
    s->line = ps->line > UINT32_MAX ? UINT32_MAX : (uint32_t)ps->line;
    if (klen)
        memcpy(t->text + t->text_len, key->s, klen);
    if (vlen)
        memcpy(t->text + t->text_len + klen, value->s, vlen);
    t->text_len += klen + vlen;
    if (verb == TRACE_CALL)
        t->ncalls++;
    return TRACE_OK;
}

/* A step line whose first field is `first`; `p` points after it. */
static int parse_step(struct parser *ps, const struct field *first, const char *p, const char *end) {
    struct field verb, key, value, extra;
    uint64_t time_ms = 0;
    uint8_t v;
    int nargs;

    if (ps->closed) {
        set_error(ps->err, ps->line, "line after close");
        return TRACE_ERR_SYNTAX;
    }
    if (field_is(first, "policy")) {
        set_error(ps->err, ps->line, "duplicate policy");
        return TRACE_ERR_SYNTAX;
    }
    if (number_failed(ps->err, ps->line,
                      parse_number(first->s, first->n, TRACE_TIME_MAX_MS, &time_ms), "time",
                      first->s, first->n))
        return TRACE_ERR_SYNTAX;
    if (time_ms < ps->last_time) {
        set_error(ps->err, ps->line, "time goes backwards");
        return TRACE_ERR_SYNTAX;
    }
    if (!next_field(&p, end, &verb)) {
        set_error(ps->err, ps->line, "missing field");
        return TRACE_ERR_SYNTAX;
    }
    if (field_is(&verb, "call")) {
        v = TRACE_CALL;
        nargs = 2;
    } else if (field_is(&verb, "cancel")) {
        v = TRACE_CANCEL;
        nargs = 1;
    } else if (field_is(&verb, "flush")) {
        v = TRACE_FLUSH;
        nargs = 1;
    } else if (field_is(&verb, "pending")) {
        v = TRACE_PENDING;
        nargs = 1;
    } else if (field_is(&verb, "close")) {
        v = TRACE_CLOSE_DRAIN;
        nargs = 1;
    } else {
        set_error_quoted(ps->err, ps->line, "unknown verb ", verb.s, verb.n, "");
        return TRACE_ERR_SYNTAX;
    }
    if (!next_field(&p, end, &key) || (nargs == 2 && !next_field(&p, end, &value))) {
        set_error(ps->err, ps->line, "missing field");
        return TRACE_ERR_SYNTAX;
    }
    if (next_field(&p, end, &extra)) {
        set_error_quoted(ps->err, ps->line, "extra field ", extra.s, extra.n, "");
        return TRACE_ERR_SYNTAX;
    }
    ps->last_time = time_ms;
    if (v == TRACE_CLOSE_DRAIN) {
        if (field_is(&key, "discard")) {
            v = TRACE_CLOSE_DISCARD;
        } else if (!field_is(&key, "drain")) {
            set_error_quoted(ps->err, ps->line, "bad value ", key.s, key.n, " for close");
            return TRACE_ERR_SYNTAX;
        }
        ps->closed = true;
        return add_step(ps, time_ms, v, NULL, NULL);
    }
    if (key.n > SLUICE_KEY_MAX) {
        set_error(ps->err, ps->line, "key too long");
        return TRACE_ERR_SYNTAX;
    }
    if (nargs == 2 && (uint64_t)value.n > UINT32_MAX) {
        set_error(ps->err, ps->line, "value too long");
        return TRACE_ERR_SYNTAX;
    }
    return add_step(ps, time_ms, v, &key, nargs == 2 ? &value : NULL);
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
                return TRACE_ERR_SYNTAX;
            }
            break;
        }
        if (!(c == ' ' || c == '\t' || (c >= 0x21 && c <= 0x7e))) {
            set_error(ps->err, ps->line, "bad character 0x%02x", (unsigned)c);
            return TRACE_ERR_SYNTAX;
        }
    }
    p = s;
    end = s + code;
    if (!next_field(&p, end, &first))
        return TRACE_OK; /* blank or comment */
    if (!ps->have_policy) {
        if (!field_is(&first, "policy")) {
            set_error(ps->err, ps->line, "missing policy");
            return TRACE_ERR_SYNTAX;
        }
        ps->have_policy = true;
        return parse_policy(ps, p, end);
    }
    return parse_step(ps, &first, p, end);
}

int trace_parse(const char *buf, size_t len, struct trace *out, struct trace_error *err) {
    struct parser ps;
    size_t pos = 0;
    int rc = TRACE_OK;

    if (err != NULL) {
        err->line = 0;
        err->reason[0] = '\0';
    }
    if (out == NULL || (buf == NULL && len != 0)) {
        set_error(err, 1, "no input");
        return TRACE_ERR_SYNTAX;
    }
    memset(out, 0, sizeof *out);
    memset(&ps, 0, sizeof ps);
    ps.t = out;
    ps.err = err;

    while (pos < len) {
        const char *s = buf + pos;
        const char *nl = memchr(s, '\n', len - pos);
        size_t n = nl ? (size_t)(nl - s) : len - pos;

        ps.line++;
        pos += n + (nl ? 1 : 0);
        if (n > 0 && s[n - 1] == '\r')
            n--;
        rc = parse_line(&ps, s, n);
        if (rc != TRACE_OK)
            break;
    }
    out->lines = ps.line;
    if (rc == TRACE_OK && !ps.have_policy) {
        set_error(err, ps.line + 1, "missing policy");
        rc = TRACE_ERR_SYNTAX;
    }
    if (rc != TRACE_OK) {
        trace_free(out);
        return ps.nomem ? TRACE_ERR_NOMEM : rc;
    }
    return TRACE_OK;
}

void trace_policy_to_sluice(const struct trace *trace, sluice_policy_t *out) {
    const struct trace_policy *p = &trace->policy;
    /* Every duration is <= 10^12 ms, so <= 10^18 ns: no overflow. */
    int64_t interval = (int64_t)(p->interval_ms * TRACE_NS_PER_MS);

    switch (p->kind) {
    case SLUICE_THROTTLE:
        *out = sluice_throttle(interval, p->leading, p->trailing, p->pick);
        break;
    case SLUICE_AUDIT:
        *out = sluice_audit(interval);
        break;
    case SLUICE_DEBOUNCE:
        *out = sluice_debounce(interval, p->leading, p->trailing,
                               p->has_maxwait ? (int64_t)(p->maxwait_ms * TRACE_NS_PER_MS) : -1);
        break;
    case SLUICE_RATE:
    default:
        *out = sluice_rate(p->limit, (int64_t)(p->per_ms * TRACE_NS_PER_MS), p->burst);
        break;
    }
}

/* ------------------------------------------------------------------ */
/* Runner                                                              */
/* ------------------------------------------------------------------ */

enum token_state {
    TOK_NONE = 0,      /* not submitted yet */
    TOK_IN_SUBMIT = 1, /* its submit is running */
    TOK_HELD = 2,      /* SCHEDULED: the limiter holds it */
    TOK_DONE = 3       /* reported */
};

struct run {
    const struct trace *t;
    FILE *out;
    uint8_t *state;
    struct trace_run_result *res;
    const struct trace_run_options *opt;
    sluice_limiter_t *lim;
    uint64_t now;     /* time of the call into the limiter being made, ns */
    uint64_t seen;    /* latest time handed to the limiter, ns */
    uint64_t last_at; /* latest time printed, ns */
    uint64_t first_unaligned;
    bool discard_ok;  /* inside close(discard) */
    int status;       /* first failure */
};

static void run_fail(struct run *r, int status, const char *fmt, ...)
#if defined(__GNUC__) || defined(__clang__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;

static void run_fail(struct run *r, int status, const char *fmt, ...) {
    va_list ap;
    if (r->status != TRACE_OK)
        return;
    r->status = status;
    va_start(ap, fmt);
    vsnprintf(r->res->message, sizeof r->res->message, fmt, ap);
    va_end(ap);
}

static void put_u64(FILE *f, uint64_t v) {
    char b[24];
    size_t i = sizeof b;
    do {
        b[--i] = (char)('0' + v % 10);
        v /= 10;
    } while (v != 0);
    fwrite(b + i, 1, sizeof b - i, f);
}

/* "TIME WORD KEY TAIL\n"; TAIL is the value or yes/no. */
static void print_line(struct run *r, uint64_t at_ns, const char *word, const struct trace_step *s,
                       const char *tail, size_t tail_len) {
    FILE *f = r->out;
    r->res->lines++;
    if (at_ns < r->last_at)
        run_fail(r, TRACE_ERR_INTERNAL, "line %" PRIu32 ": output at %" PRIu64
                 " ns is earlier than the previous output (%" PRIu64 " ns)",
                 s->line, at_ns, r->last_at);
    else
        r->last_at = at_ns;
    if (f == NULL)
        return;
    put_u64(f, at_ns / TRACE_NS_PER_MS);
    fputc(' ', f);
    fputs(word, f);
    fputc(' ', f);
    fwrite(trace_step_key(r->t, s), 1, s->key_len, f);
    fputc(' ', f);
    fwrite(tail, 1, tail_len, f);
    fputc('\n', f);
}

static void print_value_line(struct run *r, uint64_t at_ns, const char *word, const struct trace_step *s) {
    print_line(r, at_ns, word, s, trace_step_value(r->t, s), s->value_len);
}

static const char *event_name(sluice_event_kind_t k) {
    switch (k) {
    case SLUICE_EVENT_EMIT:
        return "emit";
    case SLUICE_EVENT_DROP:
        return "drop";
    case SLUICE_EVENT_DISCARD:
        return "discard";
    }
    return NULL;
}

static void on_event(void *user, const sluice_event_t *ev) {
    struct run *r = user;
    const struct trace_step *s;
    const char *word;

    r->res->events++;
    if (r->status != TRACE_OK)
        return;
    if (ev == NULL) {
        run_fail(r, TRACE_ERR_INTERNAL, "event callback called with NULL");
        return;
    }
    if (ev->token >= r->t->nsteps || r->t->steps[ev->token].verb != TRACE_CALL) {
        run_fail(r, TRACE_ERR_INTERNAL, "event for unknown token %" PRIu64, ev->token);
        return;
    }
    s = &r->t->steps[ev->token];
    switch (r->state[ev->token]) {
    case TOK_HELD:
        break;
    case TOK_IN_SUBMIT:
        run_fail(r, TRACE_ERR_INTERNAL,
                 "the call of line %" PRIu32 " was reported by an event before its submit returned",
                 s->line);
        return;
    case TOK_DONE:
        run_fail(r, TRACE_ERR_INTERNAL, "the call of line %" PRIu32 " was reported twice", s->line);
        return;
    default:
        run_fail(r, TRACE_ERR_INTERNAL,
                 "the call of line %" PRIu32 " was reported before it was submitted", s->line);
        return;
    }
    if (ev->key.kind != SLUICE_KEY_BYTES || ev->key.len != s->key_len ||
        (s->key_len != 0 &&
         (ev->key.bytes == NULL || memcmp(ev->key.bytes, trace_step_key(r->t, s), s->key_len) != 0))) {
        run_fail(r, TRACE_ERR_INTERNAL, "event for the call of line %" PRIu32 " carries another key",
                 s->line);
        return;
    }
    word = event_name(ev->kind);
    if (word == NULL) {
        run_fail(r, TRACE_ERR_INTERNAL, "event of unknown kind %d for the call of line %" PRIu32,
                 (int)ev->kind, s->line);
        return;
    }
    if (ev->kind == SLUICE_EVENT_DISCARD && !r->discard_ok) {
        run_fail(r, TRACE_ERR_INTERNAL,
                 "the call of line %" PRIu32 " was discarded outside close(discard)", s->line);
        return;
    }
    if (ev->at > r->now) {
        run_fail(r, TRACE_ERR_INTERNAL,
                 "%s of the call of line %" PRIu32 " at %" PRIu64 " ns, later than now (%" PRIu64 " ns)",
                 word, s->line, ev->at, r->now);
        return;
    }
    if (ev->at % TRACE_NS_PER_MS != 0) {
        if (r->res->unaligned++ == 0)
            r->first_unaligned = ev->at;
    }
    r->state[ev->token] = TOK_DONE;
    print_value_line(r, ev->at, word, s);
}

static void check_core(struct run *r, const char *where, uint32_t line) {
    if (r->opt->check_invariants && r->status == TRACE_OK &&
        sluice_limiter_check(r->lim) != 0)
        run_fail(r, TRACE_ERR_INTERNAL, "sluice_limiter_check failed %s line %" PRIu32, where, line);
}

static void set_now(struct run *r, uint64_t t) {
    if (t > r->seen)
        r->seen = t;
    r->now = r->seen; /* the core treats an earlier time as the latest it saw */
}

/* Fires every deadline <= limit, each at its own time. */
static void fire_until(struct run *r, uint64_t limit, uint32_t line) {
    uint64_t d = sluice_limiter_next_deadline(r->lim);
    while (r->status == TRACE_OK && d <= limit) {
        int64_t n;
        uint64_t d2;
        if (r->opt->max_advances != 0 && r->res->advances >= r->opt->max_advances) {
            run_fail(r, TRACE_ERR_LIMIT, "more than %" PRIu64 " advance calls (before line %" PRIu32 ")",
                     r->opt->max_advances, line);
            return;
        }
        set_now(r, d);
        n = sluice_limiter_advance(r->lim, d, 0);
        r->res->advances++;
        if (n < 0) {
            run_fail(r, TRACE_ERR_INTERNAL, "sluice_limiter_advance(%" PRIu64 " ns) failed: %s", d,
                     sluice_strerror((int)n));
            return;
        }
        check_core(r, "after an advance before", line);
        d2 = sluice_limiter_next_deadline(r->lim);
        if (d2 <= d) {
            run_fail(r, TRACE_ERR_INTERNAL,
                     "next deadline %" PRIu64 " ns is not after %" PRIu64
                     " ns, the time just advanced to (before line %" PRIu32 ")",
                     d2, d, line);
            return;
        }
        d = d2;
    }
}

static void run_step(struct run *r, size_t i) {
    const struct trace_step *s = &r->t->steps[i];
    uint64_t t = s->time_ms * TRACE_NS_PER_MS; /* <= 10^19 < 2^64 */
    sluice_key_t key = sluice_key_bytes(trace_step_key(r->t, s), s->key_len);
    sluice_decision_t dec;
    int rc;

    fire_until(r, t, s->line);
    if (r->status != TRACE_OK)
        return;
    set_now(r, t);
    switch (s->verb) {
    case TRACE_CALL:
        memset(&dec, 0, sizeof dec);
        r->state[i] = TOK_IN_SUBMIT;
        rc = sluice_limiter_submit(r->lim, key, (uint64_t)i, t, &dec);
        if (rc < 0) {
            run_fail(r, TRACE_ERR_INTERNAL, "line %" PRIu32 ": sluice_limiter_submit failed: %s",
                     s->line, sluice_strerror(rc));
            return;
        }
        if (r->status != TRACE_OK)
            return;
        switch (dec.kind) {
        case SLUICE_EMITTED:
            if (dec.at != t)
                run_fail(r, TRACE_ERR_INTERNAL,
                         "line %" PRIu32 ": EMITTED decision at %" PRIu64 " ns, not now (%" PRIu64 " ns)",
                         s->line, dec.at, t);
            r->state[i] = TOK_DONE;
            print_value_line(r, t, "emit", s);
            break;
        case SLUICE_DROPPED:
            r->state[i] = TOK_DONE;
            print_value_line(r, t, "drop", s);
            break;
        case SLUICE_SCHEDULED:
            if (dec.at < t)
                run_fail(r, TRACE_ERR_INTERNAL,
                         "line %" PRIu32 ": SCHEDULED at %" PRIu64 " ns, before now (%" PRIu64 " ns)",
                         s->line, dec.at, t);
            r->state[i] = TOK_HELD;
            break;
        default:
            run_fail(r, TRACE_ERR_INTERNAL, "line %" PRIu32 ": unknown decision kind %d", s->line,
                     (int)dec.kind);
            break;
        }
        break;
    case TRACE_FLUSH:
    case TRACE_CANCEL:
        rc = s->verb == TRACE_FLUSH ? sluice_limiter_flush(r->lim, key, t)
                                    : sluice_limiter_cancel(r->lim, key, t);
        if (rc != 0 && rc != 1)
            run_fail(r, TRACE_ERR_INTERNAL, "line %" PRIu32 ": sluice_limiter_%s returned %d (%s)",
                     s->line, s->verb == TRACE_FLUSH ? "flush" : "cancel", rc, sluice_strerror(rc));
        break;
    case TRACE_PENDING:
        rc = sluice_limiter_pending(r->lim, key, t);
        if (rc != 0 && rc != 1) {
            run_fail(r, TRACE_ERR_INTERNAL, "line %" PRIu32 ": sluice_limiter_pending returned %d (%s)",
                     s->line, rc, sluice_strerror(rc));
            break;
        }
        print_line(r, t, "pending", s, rc ? "yes" : "no", rc ? 3 : 2);
        break;
    case TRACE_CLOSE_DRAIN:
    case TRACE_CLOSE_DISCARD:
        r->discard_ok = s->verb == TRACE_CLOSE_DISCARD;
        rc = sluice_limiter_close(r->lim, t,
                                  s->verb == TRACE_CLOSE_DRAIN ? SLUICE_CLOSE_DRAIN : SLUICE_CLOSE_DISCARD);
        r->discard_ok = false;
        if (rc != 0)
            run_fail(r, TRACE_ERR_INTERNAL, "line %" PRIu32 ": sluice_limiter_close failed: %s", s->line,
                     sluice_strerror(rc));
        break;
    default:
        run_fail(r, TRACE_ERR_INTERNAL, "line %" PRIu32 ": bad step", s->line);
        break;
    }
    if (s->verb != TRACE_CLOSE_DRAIN && s->verb != TRACE_CLOSE_DISCARD)
        check_core(r, "after", s->line);
}

int trace_run(const struct trace *trace, const struct trace_run_options *options,
              struct trace_run_result *result) {
    static const struct trace_run_options no_options;
    struct trace_run_result local;
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
    r.out = options->out;
    r.res = result;
    r.opt = options;
    if (trace == NULL) {
        run_fail(&r, TRACE_ERR_INTERNAL, "no trace");
        return r.status;
    }
    r.state = calloc(trace->nsteps ? trace->nsteps : 1, 1);
    if (r.state == NULL) {
        run_fail(&r, TRACE_ERR_NOMEM, "out of memory");
        return r.status;
    }

    memset(&cfg, 0, sizeof cfg);
    trace_policy_to_sluice(trace, &cfg.policy);
    cfg.tick_ns = TRACE_NS_PER_MS;
    cfg.start_ns = 0;
    cfg.on_event = on_event;
    cfg.user = &r;
    if (!options->random_seed) {
        cfg.fixed_seed = true;
        cfg.seed[0] = UINT64_C(0x736c756963652d74); /* "sluice-t" */
        cfg.seed[1] = UINT64_C(0x726163652d763100); /* "race-v1" */
    }
    rc = sluice_limiter_new(&r.lim, &cfg);
    if (rc != 0) {
        run_fail(&r, rc == SLUICE_ENOMEM ? TRACE_ERR_NOMEM : TRACE_ERR_INTERNAL,
                 "sluice_limiter_new failed for a valid policy: %s", sluice_strerror(rc));
        free(r.state);
        return r.status;
    }

    for (size_t i = 0; i < trace->nsteps && r.status == TRACE_OK; i++) {
        run_step(&r, i);
        if (trace->steps[i].verb == TRACE_CLOSE_DRAIN || trace->steps[i].verb == TRACE_CLOSE_DISCARD)
            closed = true;
    }
    if (r.status == TRACE_OK && !closed)
        fire_until(&r, UINT64_MAX - 1, trace->nsteps ? trace->steps[trace->nsteps - 1].line : 0);

    if (r.status == TRACE_OK) {
        size_t missing = 0, first = 0;
        for (size_t i = 0; i < trace->nsteps; i++) {
            if (trace->steps[i].verb == TRACE_CALL && r.state[i] != TOK_DONE) {
                if (missing++ == 0)
                    first = i;
            }
        }
        if (missing != 0)
            run_fail(&r, TRACE_ERR_INTERNAL,
                     "%zu call(s) never reported (the first: line %" PRIu32 ")", missing,
                     trace->steps[first].line);
    }
    /* Every token is reported by now: an event from free() is a double report. */
    sluice_limiter_free(r.lim);
    r.lim = NULL;

    if (r.status == TRACE_OK && result->unaligned != 0)
        run_fail(&r, TRACE_ERR_INTERNAL,
                 "%" PRIu64 " event time(s) not a whole millisecond (the first: %" PRIu64 " ns)",
                 result->unaligned, r.first_unaligned);
    free(r.state);
    return r.status;
}
