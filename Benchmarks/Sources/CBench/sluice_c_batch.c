/* sluice_c_batch.c — "sluice-c-batch": the C core on a manual clock, as
 * "sluice-c" (same keys, order, clock steps and setup), but the measured
 * calls go through sluice_limiter_submit_many() in batches of CB_BATCH calls
 * at one time. Throttle-hot and debounce-rearm only. */
#include "cbench-internal.h"
#include "sluice.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define T0 (1 * CB_MS)
/* Calls per batch: a multiple of the clock step (1024 calls) divides it, so
 * every call of a batch has the time sluice-c gives it. */
#define CB_BATCH 32

static void on_event(void *user, const sluice_event_t *ev) {
    (void)user;
    if (ev->kind == SLUICE_EVENT_EMIT) cb_consume(ev->token);
}

static sluice_limiter_t *make(sluice_policy_t policy) {
    sluice_config_t cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.policy = policy;
    cfg.on_event = on_event;
    cfg.emit_only = true; /* as sluice-c: tokens own nothing, drops are ignored */
    sluice_limiter_t *l = NULL;
    int rc = sluice_limiter_new(&l, &cfg);
    if (rc != 0) {
        fprintf(stderr, "sluice-c-batch: sluice_limiter_new: %s\n", sluice_strerror(rc));
        exit(3);
    }
    return l;
}

static size_t hot_loop(sluice_limiter_t *l, const cb_params_t *p, uint64_t start, uint64_t *elapsed) {
    sluice_call_t calls[CB_BATCH];
    sluice_decision_t d[CB_BATCH];
    size_t i = 0;
    uint64_t t0 = cb_now();
    while (i < p->ops) {
        size_t end = i + 4096 < p->ops ? i + 4096 : p->ops;
        while (i < end) {
            size_t n = end - i < CB_BATCH ? end - i : CB_BATCH;
            for (size_t j = 0; j < n; j++) {
                calls[j].key = sluice_key_u64(p->key[p->order[i + j]]);
                calls[j].token = i + j;
                calls[j].cost = 1;
            }
            sluice_limiter_submit_many(l, calls, n, cb_manual_now(start, i), d, NULL);
            for (size_t j = 0; j < n; j++)
                if (d[j].kind == SLUICE_EMITTED) cb_consume(i + j);
            i += n;
        }
        if (cb_over_budget(t0, p->budget_s)) break;
    }
    *elapsed = cb_now() - t0;
    return i;
}

static void finish_rate(cb_result_t *out, size_t ops, uint64_t wall, uint64_t cpu) {
    out->ops = ops;
    out->ns_per_op = ops ? (double)wall / (double)ops : -1;
    out->cpu_ns_per_op = ops ? (double)cpu / (double)ops : -1;
}

int cb_sluice_c_batch(cb_scenario_t scenario, const cb_params_t *p, cb_result_t *out) {
    cb_result_reset(out);
    sluice_limiter_t *l;
    sluice_decision_t d;
    uint64_t start;
    if (scenario == CB_THROTTLE_HOT) {
        l = make(sluice_throttle(3600 * (int64_t)CB_S, true, true, SLUICE_PICK_LATEST));
        for (size_t k = 0; k < p->keys; k++) {
            sluice_limiter_submit(l, sluice_key_u64(p->key[k]), k, T0, &d);
            if (d.kind == SLUICE_EMITTED) cb_consume(k);
        }
        for (size_t k = 0; k < p->keys; k++) sluice_limiter_submit(l, sluice_key_u64(p->key[k]), k, T0 + 1, &d);
        start = T0 + 2;
    } else if (scenario == CB_DEBOUNCE_REARM) {
        l = make(sluice_debounce((int64_t)p->interval_ns, false, true, -1));
        for (size_t k = 0; k < p->keys; k++) sluice_limiter_submit(l, sluice_key_u64(p->key[k]), k, T0, &d);
        start = T0 + 1;
    } else {
        return -1;
    }
    uint64_t wall, c0 = cb_process_cpu();
    size_t n = hot_loop(l, p, start, &wall);
    finish_rate(out, n, wall, cb_process_cpu() - c0);
    sluice_limiter_free(l);
    return 0;
}
