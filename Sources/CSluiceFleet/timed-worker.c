/*
 * timed-worker.c — a fleet timed limiter that claims and delivers by itself
 * (sluice_fleet_timed_start(), sluice_fleet_timed_stop()).
 *
 * Each partition has a wake-up timer. When it fires, one claim is sent for
 * the partition (never two at once). The claim's reply hands its deliveries
 * to the handler and says when the partition next has work: its earliest
 * deadline and earliest lease end, on the script's clock, which the timer is
 * set to, counted from when the claim was sent (never beyond poll_ns, so
 * deadlines other processes set are seen).
 * A full batch claims again at once. A call of this process that schedules
 * an emission moves its partition's timer earlier (a hint: Redis decides
 * what is due, so waking early only costs a claim that finds nothing).
 *
 * The deliveries the handler holds are kept (generation, attempt, partition)
 * until it acknowledges them, so that stop can hand them back. While
 * max_in_hand are held no claim is sent; an acknowledgement resumes claiming.
 */
#ifndef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L
#endif

#include <event2/event.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "timed-internal.h"

#define MS 1000000ull

struct held {
    uint64_t generation;
    uint32_t attempt, partition;
};

struct part {
    struct sluice__timed_worker *w;
    uint32_t index;
    struct event *wake;
    uint64_t wake_at; /* monotonic ns of the armed wake-up, UINT64_MAX when none */
    uint64_t sent_at; /* monotonic ns when the claim in flight was sent */
    bool claiming;    /* a claim is in flight */
    bool blocked;     /* wanted to claim while max_in_hand were held */
};

struct sluice__timed_worker {
    struct sluice_fleet_timed *t;
    sluice_fleet_timed_worker_t cfg;
    struct part *parts;
    struct held *held;
    size_t nheld;
    bool stopping;
    /* stop: the releases and claims still awaited, the first failure, the
     * caller's callback (`done` runs it when nothing was awaited) */
    size_t waiting;
    int release_status;
    sluice_fleet_timed_fn stop_fn;
    void *stop_user;
    struct event *done;
};

static uint64_t mono_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Arms the partition's wake-up `delay` ns from now, unless an earlier one is armed. */
static void wake_in(struct part *p, uint64_t delay) {
    if (p->w->stopping) return;
    if (delay > p->w->cfg.poll_ns) delay = p->w->cfg.poll_ns;
    uint64_t at = mono_ns() + delay;
    if (p->wake_at != UINT64_MAX && p->wake_at <= at) return;
    struct timeval tv = { (time_t)(delay / 1000000000ull), (suseconds_t)(delay % 1000000000ull / 1000) };
    event_add(p->wake, &tv);
    p->wake_at = at;
}

/* A new timer for the partition, `delay` from now, replacing the armed one. */
static void rearm(struct part *p, uint64_t delay) {
    event_del(p->wake);
    p->wake_at = UINT64_MAX;
    wake_in(p, delay);
}

/* Stop is complete: the caller is told, once. */
static void stopped(struct sluice__timed_worker *w) {
    sluice_fleet_timed_fn fn = w->stop_fn;
    if (!fn) return;
    w->stop_fn = NULL;
    sluice_fleet_timed_result_t done;
    memset(&done, 0, sizeof done);
    done.op = SLUICE_FLEET_TIMED_RELEASE;
    done.status = w->release_status;
    fn(w->stop_user, &done);
}

static void on_done(evutil_socket_t fd, short what, void *arg) {
    (void)fd;
    (void)what;
    stopped(arg);
}

static void on_release(void *user, const sluice_fleet_timed_result_t *res) {
    struct sluice__timed_worker *w = user;
    if (res->status != 0 && w->release_status == 0) w->release_status = res->status;
    if (--w->waiting == 0) stopped(w);
}

/* Hands a delivery back (stop). */
static void give_back(struct sluice__timed_worker *w, const sluice_fleet_delivery_t *d) {
    if (sluice_fleet_timed_release(w->t, d, on_release, w) == 0)
        w->waiting++;
    else if (w->release_status == 0)
        w->release_status = SLUICE_ENOMEM;
}

static void on_claim(void *user, const sluice_fleet_timed_result_t *res) {
    struct part *p = user;
    struct sluice__timed_worker *w = p->w;
    struct sluice_fleet_timed *t = w->t;
    p->claiming = false;
    if (res->status != 0) {
        if (w->stopping) {
            if (--w->waiting == 0) stopped(w);
            return;
        }
        rearm(p, w->cfg.poll_ns); /* Redis could not answer: again after the poll period */
        return;
    }
    for (size_t i = 0; i < res->n_deliveries; i++) {
        const sluice_fleet_delivery_t *d = &res->deliveries[i];
        if (w->stopping) { /* claimed while stopping: straight back */
            give_back(w, d);
            continue;
        }
        if (w->nheld < w->cfg.max_in_hand)
            w->held[w->nheld++] = (struct held){ d->generation, d->attempt, d->partition };
        SLUICE__TIMED_STAT_ADD(t, delivered, 1);
        if (d->attempt > 1) SLUICE__TIMED_STAT_ADD(t, redelivered, 1);
        SLUICE__TIMED_STAT_SET(t, in_hand, w->nheld);
        w->cfg.handler(w->cfg.user, d);
    }
    if (w->stopping) {
        if (--w->waiting == 0) stopped(w);
        return;
    }
    if (res->n_deliveries == w->cfg.batch) {
        rearm(p, 0);
        return;
    }
    /* the next work the reply knows of, on the script's clock (whole us), counted from when
     * the claim was sent: the script ran after that, so the wake-up may come early (a claim
     * then finds nothing yet and says when again), never later by the reply's way back */
    uint64_t now_us = res->decision.now / 1000, next = UINT64_MAX;
    if (res->next_due_us) next = res->next_due_us;
    if (res->next_lease_us && res->next_lease_us < next) next = res->next_lease_us;
    uint64_t delay = next == UINT64_MAX ? w->cfg.poll_ns : next > now_us ? (next - now_us) * 1000 : 0;
    uint64_t since = mono_ns() - p->sent_at;
    rearm(p, delay > since ? delay - since : 0);
}

static void claim(struct part *p) {
    struct sluice__timed_worker *w = p->w;
    if (w->stopping || p->claiming) return;
    if (w->nheld >= w->cfg.max_in_hand) {
        p->blocked = true;
        return;
    }
    size_t room = w->cfg.max_in_hand - w->nheld;
    size_t n = room < w->cfg.batch ? room : w->cfg.batch;
    p->sent_at = mono_ns();
    if (sluice_fleet_timed_claim(w->t, p->index, 0, n, on_claim, p) == 0)
        p->claiming = true;
    else
        rearm(p, w->cfg.poll_ns);
}

static void on_wake(evutil_socket_t fd, short what, void *arg) {
    (void)fd;
    (void)what;
    struct part *p = arg;
    p->wake_at = UINT64_MAX;
    claim(p);
}

void sluice__timed_worker_hint(struct sluice_fleet_timed *t, uint32_t partition, uint64_t at, uint64_t now) {
    struct sluice__timed_worker *w = t->worker;
    if (!w || partition >= t->partitions) return;
    /* due once the claim's whole us reaches the deadline rounded up */
    uint64_t due = (at + 999) / 1000 * 1000;
    wake_in(&w->parts[partition], due > now ? due - now : 0);
}

void sluice__timed_worker_acked(struct sluice_fleet_timed *t, const sluice_fleet_delivery_t *d) {
    struct sluice__timed_worker *w = t->worker;
    if (!w) return;
    for (size_t i = 0; i < w->nheld; i++) {
        struct held *h = &w->held[i];
        if (h->generation == d->generation && h->partition == d->partition && h->attempt == d->attempt) {
            *h = w->held[--w->nheld];
            break;
        }
    }
    SLUICE__TIMED_STAT_SET(t, in_hand, w->nheld);
    if (w->stopping || w->nheld >= w->cfg.max_in_hand) return;
    for (uint32_t i = 0; i < t->partitions; i++) {
        if (!w->parts[i].blocked) continue;
        w->parts[i].blocked = false;
        rearm(&w->parts[i], 0);
    }
}

/* On the loop thread: the worker takes over its limiter and wakes every
 * partition at once. */
static void install(struct sluice_fleet_timed *t, void *arg) {
    struct sluice__timed_worker *w = arg;
    if (t->freeing) {
        t->worker = w;
        sluice__timed_worker_free(t);
        return;
    }
    t->worker = w;
    for (uint32_t i = 0; i < t->partitions; i++) wake_in(&w->parts[i], 0);
}

static void free_worker(struct sluice__timed_worker *w, uint32_t partitions) {
    if (w->parts)
        for (uint32_t i = 0; i < partitions; i++)
            if (w->parts[i].wake) event_free(w->parts[i].wake);
    free(w->parts);
    free(w->held);
    if (w->done) event_free(w->done);
    free(w);
}

int sluice_fleet_timed_start(sluice_fleet_timed_t *t, const sluice_fleet_timed_worker_t *cfg) {
    if (!t || !cfg || !cfg->handler || t->manual || cfg->batch > 1024) return SLUICE_EINVAL;
    bool no = false;
    if (!__atomic_compare_exchange_n(&t->worker_started, &no, true, false, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
        return SLUICE_EINVAL; /* one worker per limiter */
    struct sluice__timed_worker *w = calloc(1, sizeof *w);
    bool ok = w != NULL;
    if (ok) {
        w->t = t;
        w->cfg = *cfg;
        if (!w->cfg.poll_ns) w->cfg.poll_ns = 100 * MS;
        if (!w->cfg.batch) w->cfg.batch = 64;
        if (!w->cfg.max_in_hand) w->cfg.max_in_hand = 1024;
        w->parts = calloc(t->partitions, sizeof *w->parts);
        w->held = calloc(w->cfg.max_in_hand, sizeof *w->held);
        w->done = event_new(t->base, -1, 0, on_done, w);
        ok = w->parts && w->held && w->done;
        for (uint32_t i = 0; ok && i < t->partitions; i++) {
            struct part *p = &w->parts[i];
            p->w = w;
            p->index = i;
            p->wake_at = UINT64_MAX;
            p->wake = evtimer_new(t->base, on_wake, p);
            ok = p->wake != NULL;
        }
    }
    int rc = ok ? sluice__timed_on_loop(t, install, w) : SLUICE_ENOMEM;
    if (rc != 0) {
        if (w) free_worker(w, t->partitions);
        __atomic_store_n(&t->worker_started, false, __ATOMIC_RELEASE);
    }
    return rc;
}

struct stop_args {
    sluice_fleet_timed_fn fn;
    void *user;
};

/* On the loop thread: stop claiming, hand back what the handler holds. */
static void stop_on_loop(struct sluice_fleet_timed *t, void *arg) {
    struct stop_args a = *(struct stop_args *)arg;
    free(arg);
    struct sluice__timed_worker *w = t->worker;
    if (!w || w->stopping) return; /* freed meanwhile */
    w->stopping = true;
    w->stop_fn = a.fn;
    w->stop_user = a.user;
    for (uint32_t i = 0; i < t->partitions; i++) {
        struct part *p = &w->parts[i];
        event_del(p->wake);
        p->wake_at = UINT64_MAX;
        if (p->claiming) w->waiting++; /* its deliveries go straight back */
    }
    for (size_t i = 0; i < w->nheld; i++) {
        sluice_fleet_delivery_t d;
        memset(&d, 0, sizeof d);
        d.generation = w->held[i].generation;
        d.attempt = w->held[i].attempt;
        d.partition = w->held[i].partition;
        give_back(w, &d);
    }
    w->nheld = 0;
    SLUICE__TIMED_STAT_SET(t, in_hand, 0);
    if (w->waiting == 0) event_active(w->done, EV_TIMEOUT, 0); /* the callback, from the loop */
}

int sluice_fleet_timed_stop(sluice_fleet_timed_t *t, sluice_fleet_timed_fn fn, void *user) {
    if (!t) return SLUICE_EINVAL;
    bool no = false;
    if (!__atomic_load_n(&t->worker_started, __ATOMIC_ACQUIRE) ||
        !__atomic_compare_exchange_n(&t->worker_stopped, &no, true, false, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
        return SLUICE_EINVAL; /* not a worker, or stopped already */
    struct stop_args *a = malloc(sizeof *a);
    if (!a) {
        __atomic_store_n(&t->worker_stopped, false, __ATOMIC_RELEASE);
        return SLUICE_ENOMEM;
    }
    a->fn = fn;
    a->user = user;
    int rc = sluice__timed_on_loop(t, stop_on_loop, a);
    if (rc != 0) {
        free(a);
        __atomic_store_n(&t->worker_stopped, false, __ATOMIC_RELEASE);
    }
    return rc;
}

void sluice__timed_worker_free(struct sluice_fleet_timed *t) {
    struct sluice__timed_worker *w = t->worker;
    if (!w) return;
    free_worker(w, t->partitions);
    t->worker = NULL;
}
