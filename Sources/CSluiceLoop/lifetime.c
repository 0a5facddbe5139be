/* lifetime.c — a loop limiter's lifetime (sluice_mt_new, sluice_mt_free,
 * sluice_loop.h): creation of its shards and of its libevent event, that
 * event's callback, and teardown. Everything that may end a limiter is here:
 * a free, and a free asked from inside the limiter's own callback, which the
 * outermost deliverer carries out when it has delivered everything (see
 * sluice__mt_deliver_or_wake and on_loop_event). Calls the delivery
 * (delivery.c), the shards (shard.c) and the outboxes; called by the calls
 * on a key (mt.c) through sluice__mt_deliver_or_wake only.
 *
 * Teardown: the free marks the limiter FREEING (every call then fails with
 * SLUICE_ECLOSED before taking a lock), frees the libevent event (which
 * waits for a callback running on the loop thread), delivers what is left,
 * then frees the shard limiters in "direct" mode: their discards go straight
 * to the user's callback, no lock held. */
#include "loop-internal.h"

#include <event2/event.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------ creation */

/* The shard limiters allocate through this: every block starts on a cache
 * line and owns its last line whole, so the hot fields of two shards (each
 * written under its own lock, by any thread) never share a line. The
 * caller's block address is kept in the line before the block. */
static void *line_alloc(void *ctx, size_t size) {
    const struct sluice_mt *m = ctx;
    size_t body = (size + SLM_CACHE_LINE - 1) / SLM_CACHE_LINE * SLM_CACHE_LINE;
    if (body < size || body > SIZE_MAX - 2 * SLM_CACHE_LINE) return NULL;
    unsigned char *raw = sluice__mt_alloc(m, body + 2 * SLM_CACHE_LINE);
    if (!raw) return NULL;
    uintptr_t p = ((uintptr_t)raw + 2 * SLM_CACHE_LINE - 1) & ~(uintptr_t)(SLM_CACHE_LINE - 1);
    ((void **)p)[-1] = raw;
    return (void *)p;
}

static void line_release(void *ctx, void *p, size_t size) {
    const struct sluice_mt *m = ctx;
    if (!p) return;
    size_t body = (size + SLM_CACHE_LINE - 1) / SLM_CACHE_LINE * SLM_CACHE_LINE;
    sluice__mt_release(m, ((void **)p)[-1], body + 2 * SLM_CACHE_LINE);
}

static unsigned round_pow2(unsigned n) {
    unsigned p = 1;
    while (p < n) p <<= 1;
    return p;
}

/* Frees what sluice_mt_new built (shards [0, built) have their lock and core). */
static void destroy(struct sluice_mt *m, unsigned built) {
    for (unsigned i = 0; i < built; i++) {
        struct shard *s = sluice__shard_at(m, i);
        sluice__lock_destroy(&s->mu); /* (s->lk, when in the core, needs no destroying) */
        if (s->core) sluice_limiter_free(s->core);
        sluice__outbox_release(m, &s->out);
    }
    sluice__outbox_release(m, &m->spare);
    if (m->shards_raw) sluice__mt_release(m, m->shards_raw, m->shards_raw_size);
    pthread_cond_destroy(&m->dcond);
    pthread_mutex_destroy(&m->dmu);
    pthread_mutex_destroy(&m->arm_mu);
    sluice_allocator_t a = m->alloc;
    bool has = m->has_alloc;
    if (has)
        a.release(a.ctx, m, sizeof *m);
    else
        free(m);
}

static void on_loop_event(evutil_socket_t fd, short what, void *arg);

int sluice_mt_new(sluice_mt_t **out, sluice_loop_t *loop, const sluice_config_t *config, unsigned nshards) {
    sluice_mt_options_t opt = { nshards, 0, NULL };
    return sluice_mt_new_with_options(out, loop, config, &opt);
}

int sluice_mt_new_with_options(sluice_mt_t **out, sluice_loop_t *loop, const sluice_config_t *config,
                               const sluice_mt_options_t *options) {
    if (!out || !loop || !config) return SLUICE_EINVAL;
    unsigned nshards = options ? options->nshards : 0;
    unsigned report = options ? options->flags : 0;
    if (nshards > SLUICE_MT_SHARDS_MAX) return SLUICE_EINVAL;
    if (report & ~(unsigned)(SLUICE_MT_REPORT_ALL | SLUICE_MT_COARSE_CLOCK)) return SLUICE_EINVAL;
    bool coarse = (report & SLUICE_MT_COARSE_CLOCK) != 0;
    report &= (unsigned)SLUICE_MT_REPORT_ALL;
    sluice_mt_events_fn on_events = options ? options->on_events : NULL;
    if (report && !config->on_event && !on_events) return SLUICE_EINVAL;
    if (config->allocator && (!config->allocator->alloc || !config->allocator->release)) return SLUICE_EINVAL;
    /* the shards' sluice_limiter_new() checks everything again; this only
     * refuses a bad configuration before anything is allocated */
    int rc = config->plans ? sluice_plans_check(config->plans, NULL, 0) : sluice_policy_validate(&config->policy);
    if (rc) return rc;
    unsigned n = nshards ? round_pow2(nshards) : SLUICE_MT_SHARDS_DEFAULT;

    struct sluice_mt *m =
        config->allocator ? config->allocator->alloc(config->allocator->ctx, sizeof *m) : malloc(sizeof *m);
    if (!m) return SLUICE_ENOMEM;
    memset(m, 0, sizeof *m);
    if (config->allocator) {
        m->alloc = *config->allocator;
        m->has_alloc = true;
    }
    if (pthread_mutex_init(&m->arm_mu, NULL) != 0) goto fail_m;
    if (pthread_mutex_init(&m->dmu, NULL) != 0) goto fail_arm;
    if (pthread_cond_init(&m->dcond, NULL) != 0) goto fail_dmu;
    m->loop = loop;
    m->on_event = config->on_event;
    m->on_events = on_events;
    m->user = config->user;
    m->nshards = n;
    m->mask = n - 1;
    m->budget = loop->budget;
    /* emit_only: no DROP reaches the callback, an immediate one included */
    m->report = config->emit_only ? report & ~(unsigned)SLUICE_MT_REPORT_DROPPED : report;
    m->coarse = coarse;
    m->max_keys = config->max_keys;
    atomic_init(&m->state, MT_OPEN);
    atomic_init(&m->live_keys, 0);
    atomic_init(&m->armed, UINT64_MAX);
    atomic_init(&m->wake, false);

    m->shards_raw_size = (size_t)n * sizeof(union shard_slot) + SLM_SHARD_ALIGN;
    m->shards_raw = sluice__mt_alloc(m, m->shards_raw_size);
    if (!m->shards_raw) {
        destroy(m, 0);
        return SLUICE_ENOMEM;
    }
    memset(m->shards_raw, 0, m->shards_raw_size);
    uintptr_t base = ((uintptr_t)m->shards_raw + SLM_SHARD_ALIGN - 1) & ~(uintptr_t)(SLM_SHARD_ALIGN - 1);
    m->shards = (union shard_slot *)base;

    /* Every shard gets the whole configuration, max_keys included: the core
     * validates it, and its own cap never bites before the limiter's (a
     * shard never holds more keys than all shards together). */
    sluice_config_t cc = *config;
    m->line_alloc.alloc = line_alloc;
    m->line_alloc.release = line_release;
    m->line_alloc.ctx = m;
    cc.allocator = &m->line_alloc;
    cc.on_event = sluice__shard_on_event;
    /* the clock the calls read: a coarse limiter must not start ahead of it */
    cc.start_ns = coarse ? sluice__clock_coarse() : sluice_clock_now();
    if (cc.tick_ns == 0) cc.tick_ns = SLUICE_LOOP_TICK_DEFAULT_NS;
    for (unsigned i = 0; i < n; i++) {
        struct shard *s = sluice__shard_at(m, i);
        s->m = m;
        atomic_init(&s->next, UINT64_MAX);
        if (sluice__lock_init(&s->mu) != 0) {
            destroy(m, i);
            return SLUICE_ENOMEM;
        }
        s->lk = &s->mu;
        cc.user = s;
        rc = sluice_limiter_new(&s->core, &cc);
        if (rc) {
            destroy(m, i + 1);
            return rc;
        }
        s->hot = sluice__limiter_hot(s->core);
#if defined(SLM_FUTEX_LOCK)
        /* The futex word moves into the line every call writes (the core's,
         * line-aligned by line_alloc): one line to fetch per call. Nobody
         * holds the lock yet. */
        _Static_assert(sizeof(sluice__lock_t) <= sizeof(uint64_t) && _Alignof(sluice__lock_t) <= _Alignof(uint64_t),
                       "the shard lock fits the core's host word");
        s->lk = sluice__limiter_host_word(s->core);
        sluice__lock_init(s->lk);
#endif
        if (i > 0 && !config->fixed_seed) { /* each shard's SipHash fallback keyed apart */
            rc = sluice__limiter_redraw_strong_key(s->core);
            if (rc) {
                destroy(m, i + 1);
                return rc;
            }
        }
        if (i == 0) { /* every shard hashes with the first one's key */
            sluice__limiter_seed(s->core, m->seed);
            cc.fixed_seed = true;
            cc.seed[0] = m->seed[0];
            cc.seed[1] = m->seed[1];
        }
    }
    m->ev = event_new(loop->base, -1, 0, on_loop_event, m);
    if (!m->ev) {
        destroy(m, n);
        return SLUICE_ENOMEM;
    }
    atomic_fetch_add(&loop->nmt, 1);
    *out = m;
    return 0;

fail_dmu:
    pthread_mutex_destroy(&m->dmu);
fail_arm:
    pthread_mutex_destroy(&m->arm_mu);
fail_m:
    if (config->allocator)
        config->allocator->release(config->allocator->ctx, m, sizeof *m);
    else
        free(m);
    return SLUICE_ENOMEM;
}

/* ------------------------------------------------------------------ teardown and free */

/* Carried out by the deliverer (flag held, frame pushed), state FREEING. */
static void teardown(struct sluice_mt *m) {
    pthread_mutex_lock(&m->arm_mu);
    struct event *ev = m->ev;
    m->ev = NULL;
    pthread_mutex_unlock(&m->arm_mu);
    if (ev) event_free(ev); /* from the loop thread (a deferred free) this does not wait */
    /* Deliver what is queued: the deliver loop is ours, run it inline. */
    while (sluice__mt_deliver_pass(m)) {
    }
    /* Discard what is pending, straight to the user, as the core's free
     * does (calls into the limiter fail from now on, so no lock is needed
     * or held while the callback runs). */
    for (unsigned i = 0; i < m->nshards; i++) {
        struct shard *s = sluice__shard_at(m, i);
        sluice__lock(s->lk); /* orders us after every earlier holder */
        s->direct = true;
        sluice_limiter_t *core = s->core;
        s->core = NULL;
        sluice__unlock(s->lk);
        sluice_limiter_free(core);
    }
    sluice_loop_t *loop = m->loop;
    destroy(m, m->nshards);
    atomic_fetch_sub(&loop->nmt, 1);
}

/* A free asked from a callback, now due: `m`'s deliverer (flag still held)
 * carries it out. */
static void finish_deferred_free(struct sluice_mt *m) {
    struct sluice__dframe frame;
    sluice__deliverer_push(&frame, m);
    teardown(m);
    sluice__deliverer_pop(&frame);
}

void sluice_mt_free(sluice_mt_t *m) {
    if (!m) return;
    if (sluice__mt_in_callback(m)) {
        /* Deferred: the outermost deliverer finishes and releases. */
        atomic_store(&m->state, MT_FREEING);
        pthread_mutex_lock(&m->dmu);
        m->free_deferred = true;
        pthread_mutex_unlock(&m->dmu);
        return;
    }
    if (atomic_exchange(&m->state, MT_FREEING) == MT_FREEING) return; /* freed twice: misuse */
    /* No more callbacks from the loop: event_free waits for a running one. */
    pthread_mutex_lock(&m->arm_mu);
    struct event *ev = m->ev;
    m->ev = NULL;
    pthread_mutex_unlock(&m->arm_mu);
    if (ev) event_free(ev);
    pthread_mutex_lock(&m->dmu);
    while (m->delivering) pthread_cond_wait(&m->dcond, &m->dmu);
    m->delivering = true;
    pthread_mutex_unlock(&m->dmu);
    struct sluice__dframe frame;
    sluice__deliverer_push(&frame, m);
    teardown(m);
    sluice__deliverer_pop(&frame);
}

/* ------------------------------------------------------------------ delivery that may end the limiter */

bool sluice__mt_deliver_or_wake(struct sluice_mt *m) {
    if (!sluice_loop_in_thread(m->loop) && !atomic_load(&m->loop->stopped)) {
        sluice__mt_wake(m);
        return false;
    }
    if (!sluice__mt_deliver(m)) return false;
    finish_deferred_free(m);
    return true;
}

/* The limiter's libevent callback: its timer fired, or it was woken. */
static void on_loop_event(evutil_socket_t fd, short what, void *arg) {
    (void)fd;
    (void)what;
    struct sluice_mt *m = arg;
    if (sluice__mt_timer_pass(m)) finish_deferred_free(m);
}
