/*
 * realtime.c — sluice_trace_run_realtime() (sluice_trace.h): a trace replayed
 * on a real libevent loop and the real monotonic clock, through the loop
 * layer (sluice_loop.h). The only part of the trace library that needs
 * libevent.
 */
#ifndef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L
#endif
#include "format-internal.h"

#include <event2/event.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>

#include "sluice_loop.h"

struct rt {
    const sluice_trace_t *t;
    struct sluice__trace_sink sink;
    sluice_trace_run_result_t *res;
    struct event_base *base;
    sluice_loop_t *loop;
    sluice_mt_t *m;
    struct event *step_ev;
    uint64_t start;       /* the clock at time 0 */
    size_t next;          /* next step to run */
    uint64_t outstanding; /* tokens scheduled and not reported yet */
    uint8_t *reported;    /* per step: 0 not yet, 1 scheduled, 2 reported */
    int status;
    bool closed;
    bool in_step; /* a step is running: its own decision is still to come */
};

static void rt_fail(struct rt *r, int status, const char *fmt, ...)
#if defined(__GNUC__) || defined(__clang__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;

static void rt_fail(struct rt *r, int status, const char *fmt, ...) {
    if (r->status != SLUICE_OK) return;
    r->status = status;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->res->message, sizeof r->res->message, fmt, ap);
    va_end(ap);
    event_base_loopbreak(r->base);
}

/* Milliseconds since start, rounded down: a line is never shown early. */
static uint64_t elapsed_ms(const struct rt *r) {
    uint64_t now = sluice_clock_now();
    return now > r->start ? (now - r->start) / SLUICE_TRACE_NS_PER_MS : 0;
}

static void maybe_finish(struct rt *r) {
    if (r->in_step) return;
    if (r->next >= r->t->nsteps && r->outstanding == 0) event_base_loopbreak(r->base);
}

static void on_event(void *user, const sluice_event_t *ev) {
    struct rt *r = user;
    r->res->events++;
    if (r->status != SLUICE_OK) return;
    if (ev->token >= r->t->nsteps || r->t->steps[ev->token].verb != SLUICE_TRACE_CALL) {
        rt_fail(r, SLUICE_ECORRUPT, "event for unknown token %" PRIu64, ev->token);
        return;
    }
    const struct sluice__trace_step *s = &r->t->steps[ev->token];
    if (r->reported[ev->token] != 1) {
        rt_fail(r, SLUICE_ECORRUPT, "the call of line %zu was reported %s", s->line,
                r->reported[ev->token] == 2 ? "twice" : "before its decision");
        return;
    }
    r->reported[ev->token] = 2;
    r->outstanding--;
    sluice_trace_output_kind_t kind = ev->kind == SLUICE_EVENT_EMIT   ? SLUICE_TRACE_OUT_EMIT
                                      : ev->kind == SLUICE_EVENT_DROP ? SLUICE_TRACE_OUT_DROP
                                                                      : SLUICE_TRACE_OUT_DISCARD;
    size_t successor = SIZE_MAX;
    if (kind == SLUICE_TRACE_OUT_DROP && ev->has_successor && ev->successor < r->t->nsteps &&
        r->t->steps[ev->successor].verb == SLUICE_TRACE_CALL)
        successor = (size_t)ev->successor;
    sluice__trace_put_value(&r->sink, kind, elapsed_ms(r), (size_t)ev->token, successor);
    maybe_finish(r);
}

static void run_step(struct rt *r, size_t i, uint64_t at) {
    const struct sluice__trace_step *s = &r->t->steps[i];
    sluice_key_t key = sluice_key_bytes(sluice__step_key(r->t, s), s->key_len);
    sluice_decision_t d;
    int rc;
    switch (s->verb) {
    case SLUICE_TRACE_CALL:
        /* stamped with the step's own instant: the decision is the spec's */
        {
            sluice_mt_submit_options_t o = { .cost = s->cost, .now = at, .plan = s->plan };
            if (s->flags & SLUICE__STEP_HAS_COST) o.cost = s->cost;
            rc = sluice_mt_submit_with_options(r->m, key, (uint64_t)i, &o, &d);
        }
        if (rc != 0) {
            rt_fail(r, rc == SLUICE_ENOMEM ? SLUICE_ENOMEM : SLUICE_ECORRUPT,
                    "line %zu: sluice_mt_submit_with_options failed: %s", s->line, sluice_strerror(rc));
            return;
        }
        if (d.kind == SLUICE_SCHEDULED) {
            r->reported[i] = 1;
            r->outstanding++;
        } else {
            r->reported[i] = 2;
            sluice__trace_put_value(&r->sink, d.kind == SLUICE_EMITTED ? SLUICE_TRACE_OUT_EMIT : SLUICE_TRACE_OUT_DROP,
                                    elapsed_ms(r), i, SIZE_MAX);
        }
        break;
    case SLUICE_TRACE_QUOTA: {
        /* read at the step's own instant, as a call is made at it: the
         * quota is the spec's (the step runs before the limiter's clock
         * passes that instant); its times become ms since start, rounded up */
        sluice_quota_t q;
        sluice_plan_detail_t det;
        sluice_mt_submit_options_t o = { .cost = s->cost, .now = at, .plan = s->plan };
        rc = sluice_mt_quota_plan(r->m, key, &o, &q, &det);
        if (rc != 0) {
            rt_fail(r, SLUICE_ECORRUPT, "line %zu: quota failed: %s", s->line, sluice_strerror(rc));
            break;
        }
        q.full = q.full > r->start ? q.full - r->start : 0;
        if (q.retry != SLUICE_NEVER) q.retry = q.retry > r->start ? q.retry - r->start : 0;
        for (uint32_t j = 0; j < det.nquotas; j++) {
            sluice_quota_figures_t *f = &det.quotas[j];
            f->full = f->full > r->start ? f->full - r->start : 0;
            if (f->retry != SLUICE_NEVER) f->retry = f->retry > r->start ? f->retry - r->start : 0;
        }
        sluice__trace_put_quota(&r->sink, elapsed_ms(r), i, &q, &det);
        break;
    }
    case SLUICE_TRACE_FLUSH:
    case SLUICE_TRACE_CANCEL:
        /* at the step's instant too: one made at the real clock would move
         * the shard's clock (every key's) past the instant of the next
         * steps of the same millisecond */
        rc = s->verb == SLUICE_TRACE_FLUSH ? sluice_mt_flush_at(r->m, key, at) : sluice_mt_cancel_at(r->m, key, at);
        if (rc < 0)
            rt_fail(r, SLUICE_ECORRUPT, "line %zu: %s failed: %s", s->line,
                    s->verb == SLUICE_TRACE_FLUSH ? "flush" : "cancel", sluice_strerror(rc));
        break;
    case SLUICE_TRACE_PENDING:
        rc = sluice_mt_pending_at(r->m, key, at);
        if (rc < 0)
            rt_fail(r, SLUICE_ECORRUPT, "line %zu: pending failed: %s", s->line, sluice_strerror(rc));
        else
            sluice__trace_put_pending(&r->sink, elapsed_ms(r), i, rc == 1);
        break;
    case SLUICE_TRACE_CLOSE:
        rc = sluice_mt_close(r->m, (s->flags & SLUICE__STEP_DISCARD) ? SLUICE_CLOSE_DISCARD : SLUICE_CLOSE_DRAIN);
        if (rc != 0) rt_fail(r, SLUICE_ECORRUPT, "line %zu: close failed: %s", s->line, sluice_strerror(rc));
        r->closed = true;
        break;
    default: rt_fail(r, SLUICE_ECORRUPT, "line %zu: bad step", s->line); break;
    }
}

static uint64_t step_time(const struct rt *r, size_t i) {
    return r->start + r->t->steps[i].time_ms * SLUICE_TRACE_NS_PER_MS;
}

/* Arms the step timer STEP_LEAD_NS before the next step's instant; the step
 * callback then sleeps to the instant itself. Steps must run before the
 * limiter's own timer pass reaches their instant: the pass moves the core's
 * clock to the real time, a little later than the instant, and a call
 * stamped earlier than the core's clock counts as made at that later time
 * (a call exactly at a deadline would then miss it). The step event also
 * has the higher priority, so when both are due in one loop iteration the
 * step runs first. */
#define STEP_LEAD_NS UINT64_C(1000000)

static void arm_step(struct rt *r) {
    if (r->next >= r->t->nsteps) return;
    uint64_t at = step_time(r, r->next), now = sluice_clock_now();
    at = at > r->start + STEP_LEAD_NS ? at - STEP_LEAD_NS : r->start;
    uint64_t d = at > now ? at - now : 0;
    uint64_t us = d / 1000 + (d % 1000 != 0);
    struct timeval tv = { (time_t)(us / 1000000), (suseconds_t)(us % 1000000) };
    event_base_update_cache_time(r->base); /* the delay counts from now, not from a stale cache */
    evtimer_add(r->step_ev, &tv);
}

static void on_step(evutil_socket_t fd, short what, void *arg) {
    (void)fd;
    (void)what;
    struct rt *r = arg;
    if (r->next < r->t->nsteps) {
        /* sleep (the loop with it) to the step's instant */
        uint64_t at = step_time(r, r->next);
        struct timespec ts = { (time_t)(at / UINT64_C(1000000000)), (long)(at % UINT64_C(1000000000)) };
        while (sluice_clock_now() < at && clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == 0) {
        }
        while (sluice_clock_now() < at) {
        }
    }
    uint64_t now = sluice_clock_now();
    while (r->status == SLUICE_OK && r->next < r->t->nsteps && step_time(r, r->next) <= now) {
        size_t i = r->next++;
        r->in_step = true;
        run_step(r, i, step_time(r, i));
        r->in_step = false;
    }
    if (r->status != SLUICE_OK) return;
    arm_step(r);
    maybe_finish(r);
}

int sluice_trace_run_realtime(const sluice_trace_t *trace, const sluice_trace_run_options_t *options,
                              sluice_trace_run_result_t *result) {
    sluice_trace_run_result_t local;
    struct rt r;
    if (!result) result = &local;
    memset(result, 0, sizeof *result);
    memset(&r, 0, sizeof r);
    r.t = trace;
    r.res = result;
    if (!trace) {
        snprintf(result->message, sizeof result->message, "no trace");
        return SLUICE_EINVAL;
    }
    if (options && options->batch_size > 1) {
        snprintf(result->message, sizeof result->message,
                 "batch_size %" PRIu32 " is not supported by real-loop runs (0 or 1)", options->batch_size);
        return SLUICE_EINVAL;
    }
    if (sluice__trace_sink_init(&r.sink, trace, options, result) != SLUICE_OK) {
        snprintf(result->message, sizeof result->message, "out of memory");
        return SLUICE_ENOMEM;
    }
    r.reported = calloc(trace->nsteps ? trace->nsteps : 1, 1);
    struct event_config *ec = event_config_new();
    if (ec) {
        event_config_set_flag(ec, EVENT_BASE_FLAG_PRECISE_TIMER);
        r.base = event_base_new_with_config(ec);
        event_config_free(ec);
    }
    /* two priorities: steps (0) before the limiter's timer (default, 1) */
    if (r.base && event_base_priority_init(r.base, 2) == 0) {
        r.step_ev = evtimer_new(r.base, on_step, &r);
        if (r.step_ev) event_priority_set(r.step_ev, 0);
    }
    if (!r.reported || !r.base || !r.step_ev || sluice_loop_attach(&r.loop, r.base, NULL) != 0) {
        snprintf(result->message, sizeof result->message, "out of memory");
        r.status = SLUICE_ENOMEM;
        goto out;
    }
    sluice_config_t cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.policy = trace->table ? sluice_rate_plans() : trace->policy;
    cfg.plans = sluice_trace_plans(trace);
    cfg.on_event = on_event;
    cfg.user = &r;
    cfg.fixed_seed = true; /* the same order of keys at one instant on every run */
    cfg.seed[0] = SLUICE__TRACE_SEED0;
    cfg.seed[1] = SLUICE__TRACE_SEED1;
    int rc = sluice_mt_new(&r.m, r.loop, &cfg, 1);
    if (rc != 0) {
        snprintf(result->message, sizeof result->message, "sluice_mt_new failed: %s", sluice_strerror(rc));
        r.status = rc == SLUICE_ENOMEM ? SLUICE_ENOMEM : SLUICE_ECORRUPT;
        goto out;
    }

    /* Time 0 on a wheel tick boundary (1 ms): every step time and deadline
     * of the trace is then a whole tick, as in the manual runner, so a
     * deadline at a step's time is due at that step (the wheel fires a
     * deadline once the clock reaches its tick). */
    r.start = (sluice_clock_now() / SLUICE_TICK_DEFAULT_NS + 1) * SLUICE_TICK_DEFAULT_NS;
    arm_step(&r);
    if (trace->nsteps == 0)
        maybe_finish(&r);
    else
        event_base_dispatch(r.base);

    if (r.status == SLUICE_OK) {
        for (size_t i = 0; i < trace->nsteps; i++) {
            if (trace->steps[i].verb == SLUICE_TRACE_CALL && r.reported[i] != 2) {
                rt_fail(&r, SLUICE_ECORRUPT, "the call of line %zu was never reported", trace->steps[i].line);
                break;
            }
        }
    }
out:
    if (r.m) {
        /* everything is reported by now: an event from the free is a bug */
        sluice_mt_free(r.m);
    }
    if (r.loop) sluice_loop_free(r.loop);
    if (r.step_ev) event_free(r.step_ev);
    if (r.base) event_base_free(r.base);
    sluice__trace_sink_free(&r.sink);
    free(r.reported);
    return r.status;
}
