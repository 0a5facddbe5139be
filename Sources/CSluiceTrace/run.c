/*
 * run.c — sluice_trace_run() (sluice_trace.h): a trace replayed against one
 * core limiter on a manual clock, exact to the millisecond. Depends on the
 * core only; prints through format.c.
 */
#include "format-internal.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
    bool discard_ok; /* inside close(discard) */
    int status;      /* first failure */
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
    if (r->status != SLUICE_OK) return;
    r->status = status;
    va_start(ap, fmt);
    vsnprintf(r->res->message, sizeof r->res->message, fmt, ap);
    va_end(ap);
}

/* Lines come in time order. */
static void check_order(struct run *r, uint64_t at_ns, size_t line) {
    if (at_ns < r->last_at)
        run_fail(r, SLUICE_ECORRUPT,
                 "line %zu: output at %" PRIu64 " ns is earlier than the previous output (%" PRIu64 " ns)", line, at_ns,
                 r->last_at);
    else
        r->last_at = at_ns;
}

static void put_value(struct run *r, uint64_t at_ns, sluice_trace_output_kind_t kind, size_t step, size_t successor) {
    check_order(r, at_ns, r->t->steps[step].line);
    sluice__trace_put_value(&r->sink, kind, at_ns / SLUICE_TRACE_NS_PER_MS, step, successor);
}

static sluice_trace_output_kind_t event_output(sluice_event_kind_t k) {
    switch (k) {
    case SLUICE_EVENT_EMIT: return SLUICE_TRACE_OUT_EMIT;
    case SLUICE_EVENT_DROP: return SLUICE_TRACE_OUT_DROP;
    case SLUICE_EVENT_DISCARD: return SLUICE_TRACE_OUT_DISCARD;
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
    if (r->status != SLUICE_OK) return;
    if (ev == NULL) {
        run_fail(r, SLUICE_ECORRUPT, "event callback called with NULL");
        return;
    }
    if (ev->token >= r->t->nsteps || r->t->steps[ev->token].verb != SLUICE_TRACE_CALL) {
        run_fail(r, SLUICE_ECORRUPT, "event for unknown token %" PRIu64, ev->token);
        return;
    }
    /* An event during a batch comes after the calls that have returned:
     * their outputs go first, as with single calls. */
    finish_batch_calls(r);
    if (r->status != SLUICE_OK) return;
    s = &r->t->steps[ev->token];
    switch (r->state[ev->token]) {
    case TOK_HELD: break;
    case TOK_IN_SUBMIT:
        run_fail(r, SLUICE_ECORRUPT, "the call of line %zu was reported by an event before its submit returned",
                 s->line);
        return;
    case TOK_DONE: run_fail(r, SLUICE_ECORRUPT, "the call of line %zu was reported twice", s->line); return;
    default: run_fail(r, SLUICE_ECORRUPT, "the call of line %zu was reported before it was submitted", s->line); return;
    }
    if (ev->key.kind != SLUICE_KEY_BYTES || ev->key.len != s->key_len ||
        (s->key_len != 0 &&
         (ev->key.bytes == NULL || memcmp(ev->key.bytes, sluice__step_key(r->t, s), s->key_len) != 0))) {
        run_fail(r, SLUICE_ECORRUPT, "event for the call of line %zu carries another key", s->line);
        return;
    }
    kind = event_output(ev->kind);
    if (kind == 0) {
        run_fail(r, SLUICE_ECORRUPT, "event of unknown kind %d for the call of line %zu", (int)ev->kind, s->line);
        return;
    }
    if (ev->kind == SLUICE_EVENT_DISCARD && !r->discard_ok) {
        run_fail(r, SLUICE_ECORRUPT, "the call of line %zu was discarded outside close(discard)", s->line);
        return;
    }
    if (ev->at > r->now) {
        run_fail(r, SLUICE_ECORRUPT, "%s of the call of line %zu at %" PRIu64 " ns, later than now (%" PRIu64 " ns)",
                 event_word(ev->kind), s->line, ev->at, r->now);
        return;
    }
    if (ev->kind == SLUICE_EVENT_DROP && ev->has_successor) {
        const struct sluice__trace_step *n;
        if (ev->successor >= r->t->nsteps || r->t->steps[ev->successor].verb != SLUICE_TRACE_CALL) {
            run_fail(r, SLUICE_ECORRUPT, "the drop of the call of line %zu names an unknown successor token %" PRIu64,
                     s->line, ev->successor);
            return;
        }
        n = &r->t->steps[ev->successor];
        if (n->key_len != s->key_len || memcmp(sluice__step_key(r->t, n), sluice__step_key(r->t, s), s->key_len) != 0) {
            run_fail(r, SLUICE_ECORRUPT, "the drop of the call of line %zu names a successor of another key (line %zu)",
                     s->line, n->line);
            return;
        }
        successor = (size_t)ev->successor;
    }
    if (ev->at % SLUICE_TRACE_NS_PER_MS != 0) {
        if (r->res->unaligned++ == 0) r->first_unaligned = ev->at;
    }
    r->state[ev->token] = TOK_DONE;
    put_value(r, ev->at, kind, (size_t)ev->token, successor);
}

static void check_core(struct run *r, const char *where, size_t line) {
    if (r->opt->check_invariants && r->status == SLUICE_OK && sluice_limiter_check(r->lim) != 0)
        run_fail(r, SLUICE_ECORRUPT, "sluice_limiter_check failed %s line %zu", where, line);
}

static void set_now(struct run *r, uint64_t t) {
    if (t > r->seen) r->seen = t;
    r->now = r->seen; /* the core treats an earlier time as the latest it saw */
}

/* Fires every deadline <= limit, each at its own time. */
static void fire_until(struct run *r, uint64_t limit, size_t line) {
    uint64_t d = sluice_limiter_next_deadline(r->lim);
    while (r->status == SLUICE_OK && d <= limit) {
        int64_t n;
        uint64_t d2;
        if (r->opt->max_advances != 0 && r->res->advances >= r->opt->max_advances) {
            run_fail(r, SLUICE_ELIMIT, "more than %" PRIu64 " advance calls (before line %zu)", r->opt->max_advances,
                     line);
            return;
        }
        set_now(r, d);
        n = sluice_limiter_advance(r->lim, d, 0);
        r->res->advances++;
        if (n < 0) {
            run_fail(r, SLUICE_ECORRUPT, "sluice_limiter_advance(%" PRIu64 " ns) failed: %s", d,
                     sluice_strerror((int)n));
            return;
        }
        check_core(r, "after an advance before", line);
        d2 = sluice_limiter_next_deadline(r->lim);
        if (d2 <= d) {
            run_fail(r, SLUICE_ECORRUPT,
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
        run_fail(r, SLUICE_ECORRUPT, "line %zu: sluice_limiter_submit%s failed: %s", s->line,
                 (s->flags & SLUICE__STEP_HAS_COST) ? "_cost" : "", sluice_strerror(rc));
        return;
    }
    if (r->status != SLUICE_OK) return;
    switch (dec.kind) {
    case SLUICE_EMITTED:
        if (dec.at != t)
            run_fail(r, SLUICE_ECORRUPT, "line %zu: EMITTED decision at %" PRIu64 " ns, not now (%" PRIu64 " ns)",
                     s->line, dec.at, t);
        r->state[i] = TOK_DONE;
        put_value(r, t, SLUICE_TRACE_OUT_EMIT, i, SIZE_MAX);
        break;
    case SLUICE_DROPPED:
        r->state[i] = TOK_DONE;
        put_value(r, t, SLUICE_TRACE_OUT_DROP, i, SIZE_MAX);
        break;
    case SLUICE_SCHEDULED:
        if (dec.at < t)
            run_fail(r, SLUICE_ECORRUPT, "line %zu: SCHEDULED at %" PRIu64 " ns, before now (%" PRIu64 " ns)", s->line,
                     dec.at, t);
        r->state[i] = TOK_HELD;
        break;
    default: run_fail(r, SLUICE_ECORRUPT, "line %zu: unknown decision kind %d", s->line, (int)dec.kind); break;
    }
}

static void run_call(struct run *r, size_t i, sluice_key_t key, uint64_t t) {
    const struct sluice__trace_step *s = &r->t->steps[i];
    sluice_decision_t dec;
    int rc;

    memset(&dec, 0, sizeof dec);
    r->state[i] = TOK_IN_SUBMIT;
    if (r->t->table || (s->flags & SLUICE__STEP_HAS_PLAN))
        rc = sluice_limiter_submit_plan(r->lim, key, (uint64_t)i, s->cost, s->plan, t, &dec, NULL);
    else if (s->flags & SLUICE__STEP_HAS_COST)
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
            run_fail(r, SLUICE_ECORRUPT, "line %zu: sluice_limiter_submit_many left no result",
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

    sluice_plan_detail_t det;
    memset(&q, 0, sizeof q);
    rc = sluice_limiter_quota_plan(r->lim, key, s->cost, s->plan, t, &q, &det);
    if (rc != 0) {
        run_fail(r, SLUICE_ECORRUPT, "line %zu: sluice_limiter_quota failed: %s", s->line, sluice_strerror(rc));
        return;
    }
    if (q.remaining > q.burst || q.full < t || (q.retry != SLUICE_NEVER && q.retry < t) ||
        (q.retry == SLUICE_NEVER) != (s->cost > q.burst)) {
        run_fail(r, SLUICE_ECORRUPT,
                 "line %zu: inconsistent quota at %" PRIu64 " ns (burst %" PRIu64 ", remaining %" PRIu64
                 ", full %" PRIu64 " ns, retry %" PRIu64 " ns, cost %" PRIu64 ")",
                 s->line, t, q.burst, q.remaining, q.full, q.retry, s->cost);
        return;
    }
    check_order(r, t, s->line);
    sluice__trace_put_quota(&r->sink, s->time_ms, i, &q, &det);
}

static void run_step(struct run *r, size_t i) {
    const struct sluice__trace_step *s = &r->t->steps[i];
    uint64_t t = s->time_ms * SLUICE_TRACE_NS_PER_MS; /* <= 10^19 < 2^64 */
    sluice_key_t key = sluice_key_bytes(sluice__step_key(r->t, s), s->key_len);
    int rc;

    fire_until(r, t, s->line);
    if (r->status != SLUICE_OK) return;
    set_now(r, t);
    switch (s->verb) {
    case SLUICE_TRACE_CALL: run_call(r, i, key, t); break;
    case SLUICE_TRACE_QUOTA: run_quota(r, i, key, t); break;
    case SLUICE_TRACE_FLUSH:
    case SLUICE_TRACE_CANCEL:
        rc = s->verb == SLUICE_TRACE_FLUSH ? sluice_limiter_flush(r->lim, key, t)
                                           : sluice_limiter_cancel(r->lim, key, t);
        if (rc != 0 && rc != 1)
            run_fail(r, SLUICE_ECORRUPT, "line %zu: sluice_limiter_%s returned %d (%s)", s->line,
                     s->verb == SLUICE_TRACE_FLUSH ? "flush" : "cancel", rc, sluice_strerror(rc));
        break;
    case SLUICE_TRACE_PENDING:
        rc = sluice_limiter_pending(r->lim, key, t);
        if (rc != 0 && rc != 1) {
            run_fail(r, SLUICE_ECORRUPT, "line %zu: sluice_limiter_pending returned %d (%s)", s->line, rc,
                     sluice_strerror(rc));
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
            run_fail(r, SLUICE_ECORRUPT, "line %zu: sluice_limiter_close failed: %s", s->line, sluice_strerror(rc));
        break;
    default: run_fail(r, SLUICE_ECORRUPT, "line %zu: bad step", s->line); break;
    }
    if (s->verb != SLUICE_TRACE_CLOSE) check_core(r, "after", s->line);
}

/* Frees what a run allocated (its limiter is freed apart). */
static void run_free(struct run *r) {
    sluice__trace_sink_free(&r->sink);
    free(r->state);
    free(r->calls);
    free(r->decs);
    free(r->rcs);
}

int sluice_trace_run(const sluice_trace_t *trace, const sluice_trace_run_options_t *options,
                     sluice_trace_run_result_t *result) {
    static const sluice_trace_run_options_t no_options;
    sluice_trace_run_result_t local;
    struct run r;
    sluice_config_t cfg;
    bool closed = false;
    int rc;

    if (result == NULL) result = &local;
    memset(result, 0, sizeof *result);
    if (options == NULL) options = &no_options;
    memset(&r, 0, sizeof r);
    r.t = trace;
    r.res = result;
    r.opt = options;
    if (trace == NULL) {
        run_fail(&r, SLUICE_EINVAL, "no trace");
        return r.status;
    }
    /* (a batch names no plan: a trace of plans runs one call at a time) */
    size_t batch = options->batch_size > 1 && !trace->table ? options->batch_size : 1;
    if (batch > trace->nsteps) batch = trace->nsteps ? trace->nsteps : 1;
    r.state = calloc(trace->nsteps ? trace->nsteps : 1, 1);
    if (batch > 1) {
        r.calls = calloc(batch, sizeof *r.calls);
        r.decs = calloc(batch, sizeof *r.decs);
        r.rcs = calloc(batch, sizeof *r.rcs);
    }
    if (r.state == NULL || (batch > 1 && (!r.calls || !r.decs || !r.rcs)) ||
        sluice__trace_sink_init(&r.sink, trace, options, result) != SLUICE_OK) {
        free(r.state);
        free(r.calls);
        free(r.decs);
        free(r.rcs);
        run_fail(&r, SLUICE_ENOMEM, "out of memory");
        return r.status;
    }

    memset(&cfg, 0, sizeof cfg);
    cfg.policy = trace->table ? sluice_rate_plans() : trace->policy;
    cfg.plans = sluice_trace_plans(trace);
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
        run_fail(&r, rc == SLUICE_ENOMEM ? SLUICE_ENOMEM : SLUICE_ECORRUPT,
                 "sluice_limiter_new failed for a valid policy: %s", sluice_strerror(rc));
        run_free(&r);
        return r.status;
    }

    for (size_t i = 0; i < trace->nsteps && r.status == SLUICE_OK;) {
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
            if (r.status == SLUICE_OK) {
                set_now(&r, t);
                run_batch(&r, i, n, t);
                check_core(&r, "after the batch ending at", trace->steps[i + n - 1].line);
            }
        } else {
            run_step(&r, i);
        }
        if (s->verb == SLUICE_TRACE_CLOSE) closed = true;
        i += n;
    }
    if (r.status == SLUICE_OK && !closed)
        fire_until(&r, UINT64_MAX - 1, trace->nsteps ? trace->steps[trace->nsteps - 1].line : 0);

    if (r.status == SLUICE_OK) {
        size_t missing = 0, first = 0;
        for (size_t i = 0; i < trace->nsteps; i++) {
            if (trace->steps[i].verb == SLUICE_TRACE_CALL && r.state[i] != TOK_DONE) {
                if (missing++ == 0) first = i;
            }
        }
        if (missing != 0)
            run_fail(&r, SLUICE_ECORRUPT, "%zu call(s) never reported (the first: line %zu)", missing,
                     trace->steps[first].line);
    }
    /* Every token is reported by now: an event from free() is a double report. */
    sluice_limiter_free(r.lim);
    r.lim = NULL;

    if (r.status == SLUICE_OK && result->unaligned != 0)
        run_fail(&r, SLUICE_ECORRUPT, "%" PRIu64 " event time(s) not a whole millisecond (the first: %" PRIu64 " ns)",
                 result->unaligned, r.first_unaligned);
    run_free(&r);
    return r.status;
}
