/* binding.c — loop bindings (sluice_loop.h): Sluice attached to an
 * event_base the caller runs, or an owned base run on a thread of its own. */
#include "loop-internal.h"

#include <event2/event.h>
#include <stdlib.h>

/* The owned loop whose thread this is. */
static _Thread_local const struct sluice_loop *tl_owned_loop;

static size_t budget_of(const sluice_loop_config_t *cfg) {
    return cfg && cfg->max_timers_per_pass ? cfg->max_timers_per_pass : SLUICE_LOOP_MAX_TIMERS_DEFAULT;
}

static struct sluice_loop *loop_alloc(const sluice_loop_config_t *cfg) {
    struct sluice_loop *loop = calloc(1, sizeof *loop);
    if (!loop) return NULL;
    if (pthread_mutex_init(&loop->stop_mu, NULL) != 0) {
        free(loop);
        return NULL;
    }
    atomic_init(&loop->stopped, false);
    atomic_init(&loop->nmt, 0);
    loop->budget = budget_of(cfg);
    return loop;
}

int sluice_loop_attach(sluice_loop_t **out, struct event_base *base, const sluice_loop_config_t *cfg) {
    if (!out || !base) return SLUICE_EINVAL;
    struct sluice_loop *loop = loop_alloc(cfg);
    if (!loop) return SLUICE_ENOMEM;
    loop->base = base;
    loop->owned = false;
    loop->thread = pthread_self();
    *out = loop;
    return 0;
}

static void on_stop(evutil_socket_t fd, short what, void *arg) {
    (void)fd;
    (void)what;
    event_base_loopbreak(((struct sluice_loop *)arg)->base);
}

static void *loop_main(void *arg) {
    struct sluice_loop *loop = arg;
    tl_owned_loop = loop;
    event_base_loop(loop->base, EVLOOP_NO_EXIT_ON_EMPTY);
    tl_owned_loop = NULL;
    return NULL;
}

int sluice_loop_start(sluice_loop_t **out, const sluice_loop_config_t *cfg) {
    if (!out) return SLUICE_EINVAL;
    if (sluice_threads_init() != 0) return SLUICE_ENOMEM;
    struct sluice_loop *loop = loop_alloc(cfg);
    if (!loop) return SLUICE_ENOMEM;
    loop->owned = true;
    struct event_config *ec = event_config_new();
    if (ec) {
        event_config_set_flag(ec, EVENT_BASE_FLAG_PRECISE_TIMER);
        loop->base = event_base_new_with_config(ec);
        event_config_free(ec);
    }
    if (loop->base) loop->stop_ev = event_new(loop->base, -1, 0, on_stop, loop);
    if (!loop->stop_ev || pthread_create(&loop->thread, NULL, loop_main, loop) != 0) {
        if (loop->stop_ev) event_free(loop->stop_ev);
        if (loop->base) event_base_free(loop->base);
        pthread_mutex_destroy(&loop->stop_mu);
        free(loop);
        return SLUICE_ENOMEM;
    }
    loop->thread_started = true;
    *out = loop;
    return 0;
}

struct event_base *sluice_loop_base(const sluice_loop_t *loop) {
    return loop ? loop->base : NULL;
}

bool sluice_loop_in_thread(const sluice_loop_t *loop) {
    if (!loop) return false;
    if (loop->owned) return tl_owned_loop == loop;
    return pthread_equal(pthread_self(), loop->thread) != 0;
}

int sluice_loop_stop(sluice_loop_t *loop) {
    if (!loop || !loop->owned) return SLUICE_EINVAL;
    if (sluice_loop_in_thread(loop)) return SLUICE_EBUSY;
    pthread_mutex_lock(&loop->stop_mu);
    if (loop->thread_started) {
        /* An activation survives until the loop runs, unlike a loopbreak
         * asked before the thread entered event_base_loop(). */
        event_active(loop->stop_ev, EV_TIMEOUT, 0);
        pthread_join(loop->thread, NULL);
        loop->thread_started = false;
        atomic_store(&loop->stopped, true);
    }
    pthread_mutex_unlock(&loop->stop_mu);
    return 0;
}

int sluice_loop_free(sluice_loop_t *loop) {
    if (!loop) return 0;
    if (atomic_load(&loop->nmt) != 0) return SLUICE_EBUSY;
    if (loop->owned) {
        int rc = sluice_loop_stop(loop);
        if (rc) return rc;
        event_free(loop->stop_ev);
        event_base_free(loop->base);
    }
    pthread_mutex_destroy(&loop->stop_mu);
    free(loop);
    return 0;
}
