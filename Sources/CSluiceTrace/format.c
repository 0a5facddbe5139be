/*
 * format.c — the output lines of a run (format-internal.h): builds each
 * line's text and fields from a parsed trace and hands it to the caller's
 * on_output. Every runner prints through here, so all print the same bytes.
 */
#include "format-internal.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void sluice__trace_set_message(sluice_trace_run_result_t *res, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(res->message, sizeof res->message, fmt, ap);
    va_end(ap);
}

/* The longest line besides KEY and VALUE: "TIME quota  policy=NAME
 * remaining=R full=F retry=S" with 20-digit numbers and a 32-byte name is
 * under 160 bytes. */
#define LINE_FIXED 200

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
    return k->buf != NULL ? SLUICE_OK : SLUICE_ENOMEM;
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
static size_t start_line(struct sluice__trace_sink *k, sluice_trace_output_t *o, sluice_trace_output_kind_t kind,
                         const char *word, uint64_t time_ms, size_t step) {
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
    if (k->fn != NULL) k->fn(k->user, o);
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
static uint64_t ms_up(uint64_t ns) { return ns / SLUICE_TRACE_NS_PER_MS + (ns % SLUICE_TRACE_NS_PER_MS != 0); }

/* One quota line: the overall one (name NULL) or one quota's. */
static void put_quota_line(struct sluice__trace_sink *k, uint64_t time_ms, size_t step, uint64_t remaining,
                           uint64_t full, uint64_t retry, const char *name) {
    sluice_trace_output_t o;
    size_t n = start_line(k, &o, SLUICE_TRACE_OUT_QUOTA, "quota", time_ms, step);
    o.remaining = remaining;
    o.full_ms = ms_up(full);
    o.retry_never = retry == SLUICE_NEVER;
    o.retry_ms = o.retry_never ? SLUICE_TRACE_NEVER : ms_up(retry);
    o.policy_name = name;
    if (name) {
        n += put_str(k->buf + n, "policy=");
        n += put_str(k->buf + n, name);
        k->buf[n++] = ' ';
    }
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

void sluice__trace_put_quota(struct sluice__trace_sink *k, uint64_t time_ms, size_t step, const sluice_quota_t *q,
                             const sluice_plan_detail_t *detail) {
    put_quota_line(k, time_ms, step, q->remaining, q->full, q->retry, NULL);
    if (!detail || detail->nquotas < 2) return;
    uint32_t plan = k->t->steps[step].plan;
    for (uint32_t j = 0; j < detail->nquotas; j++) {
        const sluice_quota_figures_t *f = &detail->quotas[j];
        put_quota_line(k, time_ms, step, f->remaining, f->full, f->retry, sluice__trace_quota_name(k->t, plan, j));
    }
}
