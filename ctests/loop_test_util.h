/* loop_test_util.h — small helpers shared by the ctests/test_loop_*.c
 * programs (header-only: each test stays a standalone program). */
#ifndef SLUICE_LOOP_TEST_UTIL_H
#define SLUICE_LOOP_TEST_UTIL_H

#ifndef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L
#endif

#include <event2/event.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "sluice.h"
#include "sluice_loop.h"

static int lt_failures;

#define LT_CHECK(cond, ...)                                                                                            \
    do {                                                                                                               \
        if (!(cond)) {                                                                                                 \
            lt_failures++;                                                                                             \
            fprintf(stderr, "%s:%d: check failed: %s: ", __FILE__, __LINE__, #cond);                                   \
            fprintf(stderr, __VA_ARGS__);                                                                              \
            fputc('\n', stderr);                                                                                       \
        }                                                                                                              \
    } while (0)

#define LT_OK(expr)                                                                                                    \
    do {                                                                                                               \
        int lt_rc_ = (expr);                                                                                           \
        if (lt_rc_ < 0) {                                                                                              \
            lt_failures++;                                                                                             \
            fprintf(stderr, "%s:%d: %s returned %d (%s)\n", __FILE__, __LINE__, #expr, lt_rc_,                         \
                    sluice_strerror(lt_rc_));                                                                          \
        }                                                                                                              \
    } while (0)

#define LT_MS UINT64_C(1000000)

static inline void lt_sleep_ms(uint64_t ms) {
    struct timespec ts = { (time_t)(ms / 1000), (long)(ms % 1000) * 1000000L };
    while (nanosleep(&ts, &ts) != 0) {
    }
}

/* Generous bound for "it happened eventually" on a shared, noisy machine
 * (and under TSan, several times slower): never a claim about speed. A
 * wait ends as soon as what it waits for happened. */
#define LT_PATIENCE_MS 30000

/* A mutex + condition for waiting on callbacks of the loop thread. */
struct lt_sync {
    pthread_mutex_t mu;
    pthread_cond_t cv;
};

static inline void lt_sync_init(struct lt_sync *s) {
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
}

static inline void lt_sync_destroy(struct lt_sync *s) {
    pthread_cond_destroy(&s->cv);
    pthread_mutex_destroy(&s->mu);
}

/* Waits (mutex held) until *counter >= want or the patience runs out. */
static inline bool lt_wait_locked(struct lt_sync *s, const uint64_t *counter, uint64_t want) {
    struct timespec dl;
    clock_gettime(CLOCK_REALTIME, &dl);
    dl.tv_sec += LT_PATIENCE_MS / 1000;
    while (*counter < want) {
        if (pthread_cond_timedwait(&s->cv, &s->mu, &dl) != 0 && *counter < want) return false;
    }
    return true;
}

/* A base with precise timers (after sluice_threads_init()). */
static inline struct event_base *lt_precise_base(void) {
    if (sluice_threads_init() != 0) return NULL;
    struct event_config *cfg = event_config_new();
    if (!cfg) return NULL;
    event_config_set_flag(cfg, EVENT_BASE_FLAG_PRECISE_TIMER);
    struct event_base *b = event_base_new_with_config(cfg);
    event_config_free(cfg);
    return b;
}

/* A loop attached to a new precise base (this thread is the loop thread; the
 * base runs only when the test dispatches it), `lc` NULL for the defaults.
 * On failure (a failed check) returns false and leaves nothing to free;
 * otherwise the test frees both with lt_attached_loop_free(). */
static inline bool lt_attached_loop(struct event_base **base, sluice_loop_t **loop, const sluice_loop_config_t *lc) {
    *loop = NULL;
    *base = lt_precise_base();
    LT_CHECK(*base != NULL, "base");
    if (!*base) return false;
    LT_OK(sluice_loop_attach(loop, *base, lc));
    if (!*loop) {
        event_base_free(*base);
        *base = NULL;
        return false;
    }
    return true;
}

static inline void lt_attached_loop_free(sluice_loop_t *loop, struct event_base *base) {
    sluice_loop_free(loop);
    event_base_free(base);
}

static inline sluice_config_t lt_config(sluice_policy_t p, sluice_event_fn fn, void *user) {
    sluice_config_t c;
    memset(&c, 0, sizeof c);
    c.policy = p;
    c.on_event = fn;
    c.user = user;
    return c;
}

#define LT_MAIN_END()                                                                                                  \
    do {                                                                                                               \
        if (lt_failures) {                                                                                             \
            fprintf(stderr, "%d check(s) failed\n", lt_failures);                                                      \
            return 1;                                                                                                  \
        }                                                                                                              \
        printf("all checks passed\n");                                                                                 \
        return 0;                                                                                                      \
    } while (0)

/* A thread-safe allocator for sluice_allocator_t that fails once `budget`
 * allocations have been made (budget < 0: never) and counts live blocks, so
 * a test can check that every allocation failure leaks nothing. */
struct failing_alloc {
    atomic_long budget; /* allocations left before failing; < 0: never fail */
    atomic_long live;
};

static inline void *fa_alloc(void *ctx, size_t size) {
    struct failing_alloc *f = ctx;
    if (atomic_load(&f->budget) >= 0 && atomic_fetch_sub(&f->budget, 1) <= 0) return NULL;
    void *p = malloc(size);
    if (p) atomic_fetch_add(&f->live, 1);
    return p;
}

static inline void fa_release(void *ctx, void *p, size_t size) {
    (void)size;
    struct failing_alloc *f = ctx;
    if (p) {
        atomic_fetch_sub(&f->live, 1);
        free(p);
    }
}

/* sluice_mt_submit_with_options() and sluice_mt_quota() with one option
 * set: a given time, a cost, the time of the decision. */
static inline int lt_submit_at(sluice_mt_t *m, sluice_key_t key, uint64_t token, uint64_t now, sluice_decision_t *d) {
    sluice_mt_submit_options_t o = { .now = now };
    return sluice_mt_submit_with_options(m, key, token, &o, d);
}

static inline int lt_submit_cost(sluice_mt_t *m, sluice_key_t key, uint64_t token, uint64_t cost,
                                 sluice_decision_t *d) {
    sluice_mt_submit_options_t o = { .cost = cost };
    return sluice_mt_submit_with_options(m, key, token, &o, d);
}

static inline int lt_submit_cost_at(sluice_mt_t *m, sluice_key_t key, uint64_t token, uint64_t cost, uint64_t now,
                                    sluice_decision_t *d) {
    sluice_mt_submit_options_t o = { .cost = cost, .now = now };
    return sluice_mt_submit_with_options(m, key, token, &o, d);
}

/* A call of `cost`; `*when` receives the decision's time (d->now) on
 * success and is left alone on error. d and when may be NULL. */
static inline int lt_submit_timed(sluice_mt_t *m, sluice_key_t key, uint64_t token, uint64_t cost, sluice_decision_t *d,
                                  uint64_t *when) {
    sluice_decision_t local;
    sluice_decision_t *out = d ? d : &local;
    sluice_mt_submit_options_t o = { .cost = cost };
    int rc = sluice_mt_submit_with_options(m, key, token, &o, out);
    if (rc == 0 && when) *when = out->now;
    return rc;
}

static inline int lt_quota(sluice_mt_t *m, sluice_key_t key, uint64_t cost, sluice_quota_t *q) {
    sluice_mt_submit_options_t o = { .cost = cost };
    return sluice_mt_quota(m, key, &o, q);
}

static inline int lt_quota_at(sluice_mt_t *m, sluice_key_t key, uint64_t cost, uint64_t now, sluice_quota_t *q) {
    sluice_mt_submit_options_t o = { .cost = cost, .now = now };
    return sluice_mt_quota(m, key, &o, q);
}

#endif
