/*
 * redis_timed.c — `sluice-trace --redis URL` for throttle, audit and debounce
 * traces: each step runs through the fleet's timed limiter
 * (sluice_fleet_timed.h) in manual time, one operation at a time, except
 * that consecutive calls at one time are made together, as a server's
 * concurrent requests are: the limiter sends the first alone and those that
 * wait behind it as one batch (one script run deciding them in order), and
 * their answers come in order. Before a step at time t, every partition is
 * claimed at t, so every deadline at or before t fires at its own time; the
 * emissions of all partitions are put in time order and acknowledged. A
 * call's value is its step index in decimal, so each delivery names the call
 * it came from. The lines are printed by the trace library
 * (sluice_trace_print_events()), which also checks that every value ended
 * exactly once.
 */
#ifndef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L
#endif

#include <event2/event.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "redis_run.h"
#include "sluice_fleet.h"
#include "sluice_fleet_timed.h"

#define NS_PER_MS 1000000ull
#define CLAIM_BATCH 256
/* partitions on a single node too: the runner merges their emissions */
#define PARTITIONS 4
/* consecutive calls at one time made together, at most */
#define GROUP_MAX 64

struct emission {
    uint64_t at;
    size_t step;
};

struct run {
    struct event_base *base;
    sluice_fleet_timed_t *t;
    size_t nsteps;
    sluice_trace_event_t *ev;
    size_t nev, cap_ev;
    struct emission *em; /* one claim round's emissions, then sorted */
    size_t nem, cap_em;
    /* the answer being awaited */
    bool done;
    int status;
    sluice_fleet_timed_result_t res;
    bool more; /* a claim had work left */
    size_t acks;
    int ack_status;
    const char *what;
};

static int push_event(struct run *r, sluice_trace_event_t e) {
    if (r->nev == r->cap_ev) {
        size_t cap = r->cap_ev ? 2 * r->cap_ev : 64;
        sluice_trace_event_t *p = realloc(r->ev, cap * sizeof *p);
        if (!p) return SLUICE_ENOMEM;
        r->ev = p;
        r->cap_ev = cap;
    }
    r->ev[r->nev++] = e;
    return 0;
}

/* The step a stored value names. */
static int step_of(struct run *r, const void *v, size_t len, size_t *out) {
    const char *s = v;
    size_t x = 0;
    if (len == 0 || len > 19) return -1;
    for (size_t i = 0; i < len; i++) {
        if (s[i] < '0' || s[i] > '9') return -1;
        x = x * 10 + (size_t)(s[i] - '0');
    }
    if (x >= r->nsteps) return -1;
    *out = x;
    return 0;
}

static void on_ack(void *user, const sluice_fleet_timed_result_t *res) {
    struct run *r = user;
    r->acks--;
    if (res->status != 0 && r->ack_status == 0) r->ack_status = res->status;
    if (res->status == 0 && !res->had && r->ack_status == 0) r->ack_status = SLUICE_ECORRUPT;
}

/* The answer of a claim, flush, cancel, pending or close batch: the events
 * it carries. */
static void on_answer(void *user, const sluice_fleet_timed_result_t *res) {
    struct run *r = user;
    r->status = res->status;
    if (res->status == 0 && res->op == SLUICE_FLEET_TIMED_CLAIM) {
        r->more = res->n_deliveries == CLAIM_BATCH;
        for (size_t i = 0; i < res->n_deliveries && r->status == 0; i++) {
            const sluice_fleet_delivery_t *d = &res->deliveries[i];
            size_t step;
            if (step_of(r, d->value, d->value_len, &step) != 0 || d->attempt != 1) {
                r->status = SLUICE_ECORRUPT;
                break;
            }
            if (r->nem == r->cap_em) {
                size_t cap = r->cap_em ? 2 * r->cap_em : 64;
                struct emission *p = realloc(r->em, cap * sizeof *p);
                if (!p) {
                    r->status = SLUICE_ENOMEM;
                    break;
                }
                r->em = p;
                r->cap_em = cap;
            }
            r->em[r->nem++] = (struct emission){ d->at, step };
            /* acknowledged at once: the runner's handler did its work */
            if (sluice_fleet_timed_ack(r->t, d, on_ack, r) == 0)
                r->acks++;
            else
                r->ack_status = SLUICE_ENOMEM;
        }
    }
    if (res->status == 0 && res->op == SLUICE_FLEET_TIMED_CLOSE) {
        for (size_t i = 0; i < res->n_discarded; i++) {
            size_t step;
            if (step_of(r, res->discarded[i].value, res->discarded[i].value_len, &step) != 0) {
                r->status = SLUICE_ECORRUPT;
                break;
            }
            sluice_trace_event_t e = { SLUICE_TRACE_OUT_DISCARD, r->res.decision.now, step, SIZE_MAX, false };
            if (push_event(r, e) != 0) r->status = SLUICE_ENOMEM;
        }
        if (res->had) return; /* more batches come */
    }
    r->res = *res;
    if (res->status == 0 && res->op == SLUICE_FLEET_TIMED_CANCEL && res->dropped) {
        /* copied: the pointer dies with the callback */
        size_t step;
        if (step_of(r, res->dropped, res->dropped_len, &step) != 0) r->status = SLUICE_ECORRUPT;
        r->res.dropped_len = r->status ? 0 : step;
    }
    r->done = true;
}

/* Runs the loop until the awaited answer and its acknowledgements came. */
static int wait_answer(struct run *r, int rc, const char *what) {
    r->what = what;
    if (rc != 0) return rc;
    while (!r->done || r->acks) event_base_loop(r->base, EVLOOP_ONCE);
    r->done = false;
    if (r->status) return r->status;
    return r->ack_status;
}

static int by_time(const void *a, const void *b) {
    const struct emission *x = a, *y = b;
    if (x->at != y->at) return x->at < y->at ? -1 : 1;
    return x->step < y->step ? -1 : x->step > y->step;
}

/* Fires every deadline at or before `now` in every partition; the emissions
 * become events in time order. */
static int claim_all(struct run *r, uint64_t now) {
    r->nem = 0;
    for (uint32_t p = 0; p < sluice_fleet_timed_partitions(r->t); p++) {
        do {
            int rc = wait_answer(r, sluice_fleet_timed_claim(r->t, p, now, CLAIM_BATCH, on_answer, r), "claim");
            if (rc) return rc;
        } while (r->more);
    }
    /* a stable order: by time, then by step (one key's emissions are at
     * different times, so this keeps each key's order) */
    if (r->nem > 1) qsort(r->em, r->nem, sizeof *r->em, by_time);
    for (size_t i = 0; i < r->nem; i++) {
        sluice_trace_event_t e = { SLUICE_TRACE_OUT_EMIT, r->em[i].at / NS_PER_MS, r->em[i].step, SIZE_MAX, false };
        if (r->em[i].at % NS_PER_MS) return SLUICE_ECORRUPT; /* a trace's deadlines are whole ms */
        if (push_event(r, e) != 0) return SLUICE_ENOMEM;
    }
    return 0;
}

/* The answer of one call of a group (run_calls()). */
struct call_answer {
    struct run *r;
    bool done;
    int status;
    sluice_decision_kind_t kind;
    bool dropped;        /* it replaced a waiting value */
    size_t dropped_step; /* the call that value came from */
};

static void on_call_answer(void *user, const sluice_fleet_timed_result_t *res) {
    struct call_answer *a = user;
    a->done = true;
    a->status = res->status;
    if (res->status != 0) return;
    a->kind = res->decision.kind;
    if (res->dropped) {
        a->dropped = true;
        if (step_of(a->r, res->dropped, res->dropped_len, &a->dropped_step) != 0) a->status = SLUICE_ECORRUPT;
    }
}

/* Makes the `n` calls of steps first.. (one time, consecutive) together,
 * then writes their events in step order. On a failure, *failed is the
 * group's index of the call that failed. */
static int run_calls(struct run *r, size_t first, size_t n, const sluice_trace_step_t *steps, size_t *failed) {
    struct call_answer *a = calloc(n, sizeof *a);
    *failed = 0;
    if (!a) return SLUICE_ENOMEM;
    uint64_t t = steps[0].time_ms * NS_PER_MS;
    int rc = 0;
    size_t sent = 0;
    r->what = "call";
    for (; sent < n && rc == 0; sent++) {
        char v[24];
        size_t vlen = (size_t)snprintf(v, sizeof v, "%zu", first + sent);
        a[sent].r = r;
        rc = sluice_fleet_timed_call(r->t, sluice_key_bytes(steps[sent].key, steps[sent].key_len), v, vlen, t,
                                     on_call_answer, &a[sent]);
    }
    if (rc) *failed = --sent; /* that one was not taken */
    /* every call sent is answered, even after a failure: their callbacks use `a` */
    for (size_t k = 0; k < sent; k++)
        while (!a[k].done) event_base_loop(r->base, EVLOOP_ONCE);
    for (size_t k = 0; k < sent && rc == 0; k++) {
        size_t i = first + k;
        *failed = k;
        if ((rc = a[k].status) != 0) break;
        if (a[k].dropped) {
            sluice_trace_event_t d = { SLUICE_TRACE_OUT_DROP, steps[k].time_ms, a[k].dropped_step, i, false };
            if ((rc = push_event(r, d)) != 0) break;
        }
        if (a[k].kind == SLUICE_SCHEDULED) continue;
        sluice_trace_event_t e = { a[k].kind == SLUICE_EMITTED ? SLUICE_TRACE_OUT_EMIT : SLUICE_TRACE_OUT_DROP,
                                   steps[k].time_ms, i, SIZE_MAX, false };
        rc = push_event(r, e);
    }
    free(a);
    return rc;
}

/* A step other than a call. */
static int run_step(struct run *r, size_t i, const sluice_trace_step_t *st) {
    uint64_t t = st->time_ms * NS_PER_MS;
    sluice_key_t key = sluice_key_bytes(st->key, st->key_len);
    int rc = claim_all(r, t);
    if (rc) return rc;
    sluice_trace_event_t e = { 0, st->time_ms, i, SIZE_MAX, false };
    switch (st->verb) {
    case SLUICE_TRACE_FLUSH:
        rc = wait_answer(r, sluice_fleet_timed_flush(r->t, key, t, on_answer, r), "flush");
        return rc ? rc : claim_all(r, t); /* the flushed value, a delivery now */
    case SLUICE_TRACE_CANCEL:
        rc = wait_answer(r, sluice_fleet_timed_cancel(r->t, key, t, on_answer, r), "cancel");
        if (rc || !r->res.dropped) return rc;
        e.kind = SLUICE_TRACE_OUT_DROP;
        e.step = r->res.dropped_len;
        return push_event(r, e);
    case SLUICE_TRACE_PENDING:
        rc = wait_answer(r, sluice_fleet_timed_pending(r->t, key, t, on_answer, r), "pending");
        if (rc) return rc;
        e.kind = SLUICE_TRACE_OUT_PENDING;
        e.yes = r->res.had;
        return push_event(r, e);
    case SLUICE_TRACE_CLOSE:
        r->res.decision.now = st->time_ms; /* the time of the discards */
        rc = wait_answer(r, sluice_fleet_timed_close(r->t, st->close_mode, t, on_answer, r), "close");
        return rc ? rc : claim_all(r, t); /* the drained values */
    default: return SLUICE_EINVAL;
    }
}

int sluice_trace_redis_timed(const sluice_trace_t *trace, const char *addr, sluice_trace_output_fn on_output,
                             void *user) {
    struct run r;
    memset(&r, 0, sizeof r);
    r.nsteps = sluice_trace_step_count(trace);
    r.base = event_base_new();
    if (!r.base) {
        fprintf(stderr, "error: out of memory\n");
        return 1;
    }
    char prefix[96];
    sluice_trace_redis_prefix(prefix, sizeof prefix);
    sluice_fleet_timed_config_t c;
    memset(&c, 0, sizeof c);
    c.policy = sluice_trace_policy(trace);
    c.url = addr;
    c.prefix = prefix;
    c.prefix_len = strlen(prefix);
    c.manual_time = true;
    c.timeout_ns = 3000 * NS_PER_MS;
    c.retain_ms = 600000; /* what a run leaves in Redis is gone in 10 minutes */
    bool cluster = strncmp(addr, "redis+cluster://", 16) == 0 || strncmp(addr, "rediss+cluster://", 17) == 0;
    c.partitions = cluster ? 0 : PARTITIONS; /* a cluster: the default, spread over its nodes */
    int rc = sluice_fleet_timed_new(&r.t, r.base, &c);
    if (rc != 0) {
        event_base_free(r.base);
        fprintf(stderr, "error: fleet timed limiter: %s\n", sluice_strerror(rc));
        return rc == SLUICE_ENOMEM ? 1 : 64;
    }
    int status = 0;
    size_t failed_line = 0;
    bool closed = false;
    for (size_t i = 0; i < r.nsteps && rc == 0;) {
        sluice_trace_step_t st[GROUP_MAX];
        sluice_trace_step(trace, i, &st[0]);
        size_t n = 1;
        /* the calls that follow at the same time are made with it */
        while (st[0].verb == SLUICE_TRACE_CALL && i + n < r.nsteps && n < GROUP_MAX) {
            sluice_trace_step(trace, i + n, &st[n]);
            if (st[n].verb != SLUICE_TRACE_CALL || st[n].time_ms != st[0].time_ms) break;
            n++;
        }
        size_t failed = 0;
        if (st[0].verb == SLUICE_TRACE_CALL) {
            rc = claim_all(&r, st[0].time_ms * NS_PER_MS);
            if (rc == 0) rc = run_calls(&r, i, n, st, &failed);
        } else {
            rc = run_step(&r, i, &st[0]);
        }
        if (rc) failed_line = st[failed].line;
        closed = st[0].verb == SLUICE_TRACE_CLOSE;
        i += n;
    }
    if (rc == 0 && !closed) rc = claim_all(&r, SLUICE_FLEET_TIMED_TIME_MAX); /* time runs on */
    if (rc != 0) {
        char shown[512];
        if (sluice_fleet_redact_url(addr, shown, sizeof shown) < 0) snprintf(shown, sizeof shown, "(the address)");
        if (failed_line)
            fprintf(stderr, "error: Redis at %s did not run line %zu (%s): %s\n", shown, failed_line, r.what,
                    sluice_strerror(rc));
        else
            fprintf(stderr, "error: Redis at %s did not run the end of the trace (%s): %s\n", shown, r.what,
                    sluice_strerror(rc));
        status = rc == SLUICE_ENOMEM ? 1 : SLUICE_TRACE_EXIT_REDIS;
    } else {
        sluice_trace_run_options_t opt;
        memset(&opt, 0, sizeof opt);
        opt.on_output = on_output;
        opt.user = user;
        sluice_trace_run_result_t res;
        rc = sluice_trace_print_events(trace, r.ev, r.nev, &opt, &res);
        if (rc != SLUICE_OK) {
            fprintf(stderr, "error: %s\n", res.message);
            status = rc == SLUICE_ENOMEM ? 1 : 3;
        }
    }
    sluice_fleet_timed_free(r.t);
    event_base_free(r.base);
    free(r.ev);
    free(r.em);
    return status;
}
