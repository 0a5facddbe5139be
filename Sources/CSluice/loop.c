/* loop.c — the core on a libevent loop, callable from any thread
 * (sluice_loop.h).
 *
 * A loop limiter (struct sluice_mt) is `nshards` shards, each a mutex, a core
 * limiter and an outbox. All shard limiters share one hash seed (shard 0's,
 * copied into the limiter), so a key is hashed once (sl_key_prepare_seeded())
 * and the low bits of the hash pick the shard; the key index uses the top
 * bits. The core's event callback runs under the shard lock and
 * only appends the event, key copied, to the shard's outbox; room for the
 * events a call can produce is reserved before the call, so an append never
 * fails and no token is ever lost to an allocation failure.
 *
 * Delivery: one thread at a time is the "deliverer" of a limiter (flag
 * `delivering` under `dmu`). It takes each shard's outbox whole (swapping it
 * with a spare, under the shard lock) and calls the user's callback outside
 * every lock, and goes round until a full pass finds nothing. Someone who
 * wants to deliver while another thread (or an outer frame of its own
 * thread, from inside a callback) is delivering sets `again` instead, and
 * the deliverer makes one more pass. The loop thread delivers in its event
 * callback; a call made on the loop thread delivers itself; a call from
 * another thread wakes the loop (event_active, once per batch thanks to the
 * `wake` flag). A shard's outbox is FIFO and a key always maps to one shard,
 * so the events of a key are delivered in order.
 *
 * Reporting flags (SLUICE_MT_REPORT_*): a submit whose token is emitted or
 * dropped at once appends that token's own event to the outbox, under the
 * same shard lock, right after the events the core call produced (room for
 * it is reserved with theirs). It then goes through the same FIFO as every
 * other event of its key, so the callback sees each key's tokens in order,
 * whichever thread called.
 *
 * Timer: one libevent event per limiter, used both as the timer and as the
 * wake-up. `armed` is the time it is armed for (UINT64_MAX: not armed); it
 * only ever moves earlier, under `arm_mu`, together with event_add(), except
 * in the callback, which resets it to UINT64_MAX (libevent has just disarmed
 * the non-persistent event), does the work and arms again for the earliest
 * `next` over the shards. Every shard publishes its core's next deadline in
 * `next` (sequentially consistent) after each call; a caller whose `next`
 * is earlier than `armed` re-arms. The store to `next` before the load of
 * `armed` (caller) and the reset of `armed` before the loads of `next`
 * (callback) are both sequentially consistent, so either the caller sees the
 * reset and arms, or the callback sees the caller's deadline: no deadline is
 * missed. Extending or cancelling never lowers `next`, so it never re-arms.
 *
 * Teardown: the free marks the limiter FREEING (every call then fails with
 * SLUICE_ECLOSED before taking a lock), frees the libevent event (which
 * waits for a callback running on the loop thread), delivers what is left,
 * then closes the shard limiters with discard in "direct" mode: their events
 * go straight to the user's callback, no lock held. A free asked from inside
 * the limiter's own callback only sets `free_deferred`; the outermost
 * deliverer carries it out when it has delivered everything. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE 1 /* PTHREAD_MUTEX_ADAPTIVE_NP (glibc); without it, plain mutexes */
#endif
#include "sluice_loop.h"
#include "limiter-internal.h"

#include <event2/event.h>
#include <event2/thread.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>

#define SLM_CACHE_LINE 64
/* Timer transitions handled between two outbox reservations. */
#define SLM_ADVANCE_CHUNK 256
/* A delivered batch larger than this gives its buffers back. */
#define SLM_SPARE_KEEP 4096
/* After an allocation failure in the timer pass, retry this much later. */
#define SLM_RETRY_NS UINT64_C(1000000)

/* ------------------------------------------------------------------ clock */

uint64_t sluice_clock_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * UINT64_C(1000000000) + (uint64_t)ts.tv_nsec;
}

static pthread_once_t threads_once = PTHREAD_ONCE_INIT;
static int threads_rc;

static void threads_init_once(void) { threads_rc = evthread_use_pthreads() == 0 ? 0 : SLUICE_ENOMEM; }

int sluice_threads_init(void) {
    pthread_once(&threads_once, threads_init_once);
    return threads_rc;
}

/* ------------------------------------------------------------------ structures */

struct sluice_loop {
    struct event_base *base;
    bool owned;
    bool thread_started;
    pthread_t thread;        /* owned: the loop thread; attached: the thread that attached */
    struct event *stop_ev;   /* owned: breaks the loop, on the loop thread */
    atomic_bool stopped;     /* owned: the thread has been joined */
    atomic_ulong nmt;        /* limiters on this binding */
    size_t budget;           /* max timer transitions per pass */
    pthread_mutex_t stop_mu; /* makes stop idempotent */
};

/* The owned loop whose thread this is. */
static _Thread_local const struct sluice_loop *tl_owned_loop;

/* One event waiting in an outbox. Key bytes live in the outbox's byte buffer. */
struct ob_rec {
    uint64_t token;
    uint64_t at;
    uint64_t u64;
    uint32_t key_off;
    uint16_t key_len;
    uint8_t kind;
    uint8_t is_u64;
};

struct outbox {
    struct ob_rec *rec;
    size_t n, cap;
    unsigned char *bytes;
    size_t nb, capb;
};

struct sluice_mt;

struct shard {
    pthread_mutex_t mu;
    sluice_limiter_t *core;
    struct sluice_mt *m;
    struct outbox out;
    size_t max_keylen; /* longest byte key submitted to this shard: bounds an event's bytes */
    bool direct;       /* teardown: events go straight to the user */
    _Atomic uint64_t next; /* the core's next deadline, written under mu */
};

/* A shard padded to whole cache lines, so two shards never share one. */
union shard_slot {
    struct shard s;
    unsigned char pad[(sizeof(struct shard) + SLM_CACHE_LINE - 1) / SLM_CACHE_LINE * SLM_CACHE_LINE];
};

enum { MT_OPEN = 0, MT_CLOSED = 1, MT_FREEING = 2 };

struct sluice_mt {
    /* read-mostly, shared by every caller */
    sluice_loop_t *loop;
    sluice_event_fn on_event;
    void *user;
    sluice_allocator_t alloc;
    bool has_alloc;
    unsigned nshards, mask;
    union shard_slot *shards;
    void *shards_raw;
    size_t shards_raw_size;
    uint64_t seed[2]; /* the hash key every shard uses (a copy, off the shards' written lines) */
    sluice_allocator_t line_alloc; /* the shard limiters' allocator: whole cache lines */
    struct event *ev;
    size_t budget;
    unsigned report; /* SLUICE_MT_REPORT_* flags */
    _Atomic int state;

    /* the timer (padding keeps the written fields off the read-mostly line;
     * no _Alignas: the allocator only promises malloc's alignment) */
    unsigned char pad_timer[SLM_CACHE_LINE];
    _Atomic uint64_t armed;
    pthread_mutex_t arm_mu;
    atomic_bool wake;

    /* delivery */
    unsigned char pad_deliver[SLM_CACHE_LINE];
    pthread_mutex_t dmu;
    pthread_cond_t dcond;
    bool delivering, again, free_deferred; /* under dmu */
    struct outbox spare;                   /* the deliverer's */
    unsigned rr;                           /* loop thread: first shard of the next pass */

    /* counters */
    atomic_ullong wakeups, arms, budget_passes, delivered, queued;
};

/* Limiters this thread is delivering for (innermost first). */
struct dframe {
    const struct sluice_mt *m;
    struct dframe *up;
};
static _Thread_local struct dframe *tl_frames;

static bool in_callback(const struct sluice_mt *m) {
    for (const struct dframe *f = tl_frames; f; f = f->up)
        if (f->m == m) return true;
    return false;
}

/* ------------------------------------------------------------------ memory */

static void *mt_alloc(const struct sluice_mt *m, size_t size) {
    return m->has_alloc ? m->alloc.alloc(m->alloc.ctx, size) : malloc(size);
}

static void mt_release(const struct sluice_mt *m, void *p, size_t size) {
    if (!p) return;
    if (m->has_alloc)
        m->alloc.release(m->alloc.ctx, p, size);
    else
        free(p);
}

/* The shard limiters allocate through this: every block starts on a cache
 * line and owns its last line whole, so the hot fields of two shards (each
 * written under its own lock, by any thread) never share a line. The
 * caller's block address is kept in the line before the block. */
static void *line_alloc(void *ctx, size_t size) {
    const struct sluice_mt *m = ctx;
    size_t body = (size + SLM_CACHE_LINE - 1) / SLM_CACHE_LINE * SLM_CACHE_LINE;
    if (body < size || body > SIZE_MAX - 2 * SLM_CACHE_LINE) return NULL;
    unsigned char *raw = mt_alloc(m, body + 2 * SLM_CACHE_LINE);
    if (!raw) return NULL;
    uintptr_t p = ((uintptr_t)raw + 2 * SLM_CACHE_LINE - 1) & ~(uintptr_t)(SLM_CACHE_LINE - 1);
    ((void **)p)[-1] = raw;
    return (void *)p;
}

static void line_release(void *ctx, void *p, size_t size) {
    const struct sluice_mt *m = ctx;
    if (!p) return;
    size_t body = (size + SLM_CACHE_LINE - 1) / SLM_CACHE_LINE * SLM_CACHE_LINE;
    mt_release(m, ((void **)p)[-1], body + 2 * SLM_CACHE_LINE);
}

static bool grow_array(const struct sluice_mt *m, void **p, size_t *cap, size_t need, size_t elem) {
    if (need <= *cap) return true;
    size_t ncap = *cap ? *cap : 16;
    while (ncap < need) {
        if (ncap > SIZE_MAX / 2 / elem) return false;
        ncap *= 2;
    }
    void *np = mt_alloc(m, ncap * elem);
    if (!np) return false;
    if (*p) {
        memcpy(np, *p, *cap * elem);
        mt_release(m, *p, *cap * elem);
    }
    *p = np;
    *cap = ncap;
    return true;
}

/* Room for `events` more records and `bytes` more key bytes. */
static bool outbox_reserve(const struct sluice_mt *m, struct outbox *o, size_t events, size_t bytes) {
    void *p = o->rec;
    bool ok = grow_array(m, &p, &o->cap, o->n + events, sizeof *o->rec);
    o->rec = p;
    if (!ok) return false;
    p = o->bytes;
    ok = grow_array(m, &p, &o->capb, o->nb + bytes, 1);
    o->bytes = p;
    return ok;
}

/* Reserves room for up to `want` events of keys of at most `keylen` bytes;
 * returns how many fit (0 when not even one). */
static size_t outbox_room(const struct sluice_mt *m, struct outbox *o, size_t want, size_t keylen) {
    if (outbox_reserve(m, o, want, want * keylen)) return want;
    size_t fit = o->cap - o->n;
    if (keylen && (o->capb - o->nb) / keylen < fit) fit = (o->capb - o->nb) / keylen;
    if (fit == 0 && outbox_reserve(m, o, 1, keylen)) fit = 1;
    return fit;
}

static void outbox_release(const struct sluice_mt *m, struct outbox *o) {
    mt_release(m, o->rec, o->cap * sizeof *o->rec);
    mt_release(m, o->bytes, o->capb);
    memset(o, 0, sizeof *o);
}

/* ------------------------------------------------------------------ events from the core */

/* Appends an event, key copied, to a shard's outbox (shard locked, room
 * reserved). */
static void outbox_push(struct shard *s, const sluice_event_t *ev) {
    struct sluice_mt *m = s->m;
    struct outbox *o = &s->out;
    size_t len = ev->key.kind == SLUICE_KEY_U64 ? 0 : ev->key.len;
    if (o->n >= o->cap || o->capb - o->nb < len) {
        /* Room was reserved before the call: this is a bug in Sluice. A token
         * must never be lost silently, so try once more, then stop loudly. */
        if (!outbox_reserve(m, o, 1, len)) {
            fprintf(stderr, "sluice: event outbox full despite reservation; aborting\n");
            abort();
        }
    }
    struct ob_rec *r = &o->rec[o->n++];
    r->token = ev->token;
    r->at = ev->at;
    r->kind = (uint8_t)ev->kind;
    r->is_u64 = ev->key.kind == SLUICE_KEY_U64;
    r->u64 = ev->key.u64;
    r->key_len = (uint16_t)len;
    r->key_off = (uint32_t)o->nb;
    if (len) memcpy(o->bytes + o->nb, ev->key.bytes, len);
    o->nb += len;
    atomic_fetch_add_explicit(&m->queued, 1, memory_order_relaxed);
}

/* The core's callback: runs under the shard lock (or, in teardown, with the
 * shard to ourselves). */
static void shard_on_event(void *user, const sluice_event_t *ev) {
    struct shard *s = user;
    struct sluice_mt *m = s->m;
    if (s->direct) {
        atomic_fetch_add_explicit(&m->delivered, 1, memory_order_relaxed);
        if (m->on_event) m->on_event(m->user, ev);
        return;
    }
    outbox_push(s, ev);
}

static inline struct shard *shard_at(const struct sluice_mt *m, unsigned i) { return &m->shards[i].s; }

static inline void publish_next(struct shard *s) {
    uint64_t next = sluice_limiter_next_deadline(s->core);
    if (next != atomic_load_explicit(&s->next, memory_order_relaxed)) atomic_store(&s->next, next);
}

/* ------------------------------------------------------------------ timer */

static struct timeval delay_tv(uint64_t deadline, uint64_t now) {
    uint64_t d = deadline > now ? deadline - now : 0;
    uint64_t us = d / 1000 + (d % 1000 != 0); /* round up: never early */
    const uint64_t max_us = UINT64_C(1000000) * UINT64_C(2000000000);
    if (us > max_us) us = max_us;
    struct timeval tv;
    tv.tv_sec = (time_t)(us / 1000000);
    tv.tv_usec = (suseconds_t)(us % 1000000);
    return tv;
}

/* Arms the timer at `at` if that is earlier than where it is armed. */
static void arm_at(struct sluice_mt *m, uint64_t at) {
    if (at == UINT64_MAX || at >= atomic_load(&m->armed)) return;
    pthread_mutex_lock(&m->arm_mu);
    if (at < atomic_load(&m->armed) && m->ev && atomic_load(&m->state) != MT_FREEING) {
        atomic_store(&m->armed, at);
        /* libevent adds the delay to its cached time, which is stale inside
         * callbacks: refresh it so the timer does not fire early. */
        event_base_update_cache_time(m->loop->base);
        struct timeval tv = delay_tv(at, sluice_clock_now());
        event_add(m->ev, &tv);
        atomic_fetch_add_explicit(&m->arms, 1, memory_order_relaxed);
    }
    pthread_mutex_unlock(&m->arm_mu);
}

static uint64_t min_next(const struct sluice_mt *m) {
    uint64_t best = UINT64_MAX;
    for (unsigned i = 0; i < m->nshards; i++) {
        uint64_t n = atomic_load(&shard_at(m, i)->next);
        if (n < best) best = n;
    }
    return best;
}

/* ------------------------------------------------------------------ delivery */

static void teardown(struct sluice_mt *m);

static bool loop_inline(const struct sluice_loop *loop) {
    return sluice_loop_in_thread(loop) || atomic_load(&loop->stopped);
}

/* Delivers every queued event. Returns true when the limiter was freed (by a
 * deferred free): the caller must not touch it again. */
static bool deliver(struct sluice_mt *m) {
    pthread_mutex_lock(&m->dmu);
    if (m->delivering) {
        m->again = true;
        pthread_mutex_unlock(&m->dmu);
        return false;
    }
    m->delivering = true;
    pthread_mutex_unlock(&m->dmu);
    struct dframe frame = { m, tl_frames };
    tl_frames = &frame;
    for (;;) {
        bool any = false;
        for (unsigned i = 0; i < m->nshards; i++) {
            struct shard *s = shard_at(m, i);
            pthread_mutex_lock(&s->mu);
            if (s->out.n == 0) {
                pthread_mutex_unlock(&s->mu);
                continue;
            }
            struct outbox batch = s->out;
            s->out = m->spare;
            pthread_mutex_unlock(&s->mu);
            any = true;
            atomic_fetch_sub_explicit(&m->queued, batch.n, memory_order_relaxed);
            for (size_t j = 0; j < batch.n; j++) {
                const struct ob_rec *r = &batch.rec[j];
                sluice_event_t ev;
                ev.kind = (sluice_event_kind_t)r->kind;
                ev.key = r->is_u64 ? sluice_key_u64(r->u64) : sluice_key_bytes(batch.bytes + r->key_off, r->key_len);
                ev.token = r->token;
                ev.at = r->at;
                atomic_fetch_add_explicit(&m->delivered, 1, memory_order_relaxed);
                if (m->on_event) m->on_event(m->user, &ev);
            }
            batch.n = batch.nb = 0;
            if (batch.cap > SLM_SPARE_KEEP) outbox_release(m, &batch);
            m->spare = batch;
        }
        pthread_mutex_lock(&m->dmu);
        if (!any && !m->again) break; /* dmu stays locked */
        m->again = false;
        pthread_mutex_unlock(&m->dmu);
    }
    bool do_free = m->free_deferred;
    if (!do_free) {
        m->delivering = false;
        pthread_cond_broadcast(&m->dcond);
    }
    pthread_mutex_unlock(&m->dmu);
    if (do_free) teardown(m); /* still the deliverer, frame still pushed */
    tl_frames = frame.up;
    return do_free;
}

/* Asks the loop thread to deliver (and to look at the timer).
 *
 * The activation's cause is EV_READ, not EV_TIMEOUT, although the event has
 * no fd (the callback ignores it): libevent's event_add() with a timeout
 * removes an event from the active list when it is active *because of
 * EV_TIMEOUT*, so a re-arm by a later call (a deadline earlier than `armed`,
 * from any thread, or the callback's own re-arm) would cancel a pending
 * wake-up whose `wake` flag is still set: the queued events would wait for
 * the next timer. With another cause the activation survives event_add(),
 * and the callback's run disarms the timer as before (a non-persistent
 * event is deleted, timeout included, before its callback runs). */
static void wake(struct sluice_mt *m) {
    if (!atomic_exchange(&m->wake, true) && m->ev) event_active(m->ev, EV_READ, 0);
}

/* After a call that queued events: deliver them here or on the loop. */
static bool deliver_or_wake(struct sluice_mt *m) {
    if (loop_inline(m->loop)) return deliver(m);
    wake(m);
    return false;
}

/* Fires due deadlines of one shard (locked) within `budget`, reserving
 * outbox room as it goes. Returns the transitions handled. */
static size_t shard_advance(struct sluice_mt *m, struct shard *s, uint64_t now, size_t budget, bool *stalled) {
    size_t done = 0;
    while (done < budget) {
        size_t want = budget - done;
        if (want > SLM_ADVANCE_CHUNK) want = SLM_ADVANCE_CHUNK;
        size_t fit = outbox_room(m, &s->out, want, s->max_keylen);
        if (fit == 0) {
            *stalled = true;
            break;
        }
        int64_t n = sluice_limiter_advance(s->core, now, fit);
        if (n <= 0) break;
        done += (size_t)n;
        if ((size_t)n < fit) break;
    }
    publish_next(s);
    return done;
}

/* The limiter's libevent callback: its timer fired, or it was woken. */
static void on_loop_event(evutil_socket_t fd, short what, void *arg) {
    (void)fd;
    (void)what;
    struct sluice_mt *m = arg;
    atomic_store(&m->wake, false);
    pthread_mutex_lock(&m->arm_mu);
    atomic_store(&m->armed, UINT64_MAX); /* libevent disarmed it to run us */
    pthread_mutex_unlock(&m->arm_mu);
    atomic_fetch_add_explicit(&m->wakeups, 1, memory_order_relaxed);

    uint64_t now = sluice_clock_now(); /* once for the whole batch */
    size_t budget = m->budget;
    bool more = false, stalled = false;
    unsigned first = m->rr++;
    for (unsigned k = 0; k < m->nshards; k++) {
        struct shard *s = shard_at(m, (first + k) & m->mask);
        if (atomic_load(&s->next) > now) continue;
        if (budget == 0) {
            more = true;
            break;
        }
        pthread_mutex_lock(&s->mu);
        budget -= shard_advance(m, s, now, budget, &stalled);
        if (budget == 0 && atomic_load_explicit(&s->next, memory_order_relaxed) <= now) more = true;
        pthread_mutex_unlock(&s->mu);
    }
    if (more) atomic_fetch_add_explicit(&m->budget_passes, 1, memory_order_relaxed);
    if (deliver(m)) return;
    uint64_t next = min_next(m);
    if (stalled && next < now + SLM_RETRY_NS) next = now + SLM_RETRY_NS;
    else if (more) next = now; /* at once, after the loop has polled I/O */
    arm_at(m, next);
}

/* ------------------------------------------------------------------ loop bindings */

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

struct event_base *sluice_loop_base(const sluice_loop_t *loop) { return loop ? loop->base : NULL; }

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

/* ------------------------------------------------------------------ loop limiters */

/* A shard's critical section is short (tens of ns): where glibc offers it,
 * an adaptive mutex spins a little before sleeping, instead of a futex
 * round trip through the kernel each time two threads meet on one shard. */
static int shard_mutex_init(pthread_mutex_t *mu) {
#if defined(PTHREAD_ADAPTIVE_MUTEX_INITIALIZER_NP)
    pthread_mutexattr_t a;
    if (pthread_mutexattr_init(&a) != 0) return -1;
    pthread_mutexattr_settype(&a, PTHREAD_MUTEX_ADAPTIVE_NP);
    int rc = pthread_mutex_init(mu, &a);
    pthread_mutexattr_destroy(&a);
    return rc;
#else
    return pthread_mutex_init(mu, NULL);
#endif
}

static unsigned round_pow2(unsigned n) {
    unsigned p = 1;
    while (p < n) p <<= 1;
    return p;
}

/* Frees what mt_new built (shards [0, built) have their mutex and core). */
static void mt_destroy(struct sluice_mt *m, unsigned built) {
    for (unsigned i = 0; i < built; i++) {
        struct shard *s = shard_at(m, i);
        if (s->core) sluice_limiter_free(s->core);
        outbox_release(m, &s->out);
        pthread_mutex_destroy(&s->mu);
    }
    outbox_release(m, &m->spare);
    if (m->shards_raw) mt_release(m, m->shards_raw, m->shards_raw_size);
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

int sluice_mt_new(sluice_mt_t **out, sluice_loop_t *loop, const sluice_config_t *config, unsigned nshards) {
    sluice_mt_options_t opt = { nshards, 0 };
    return sluice_mt_new_with_options(out, loop, config, &opt);
}

int sluice_mt_new_with_options(sluice_mt_t **out, sluice_loop_t *loop, const sluice_config_t *config,
                               const sluice_mt_options_t *options) {
    if (!out || !loop || !config) return SLUICE_EINVAL;
    unsigned nshards = options ? options->nshards : 0;
    unsigned report = options ? options->flags : 0;
    if (nshards > SLUICE_MT_SHARDS_MAX) return SLUICE_EINVAL;
    if (report & ~(unsigned)SLUICE_MT_REPORT_ALL) return SLUICE_EINVAL;
    if (report && !config->on_event) return SLUICE_EINVAL;
    if (config->allocator && (!config->allocator->alloc || !config->allocator->release)) return SLUICE_EINVAL;
    int rc = sluice_policy_validate(&config->policy);
    if (rc) return rc;
    unsigned n = nshards ? round_pow2(nshards) : SLUICE_MT_SHARDS_DEFAULT;

    struct sluice_mt *m = config->allocator ? config->allocator->alloc(config->allocator->ctx, sizeof *m)
                                            : malloc(sizeof *m);
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
    m->user = config->user;
    m->nshards = n;
    m->mask = n - 1;
    m->budget = loop->budget;
    m->report = report;
    atomic_init(&m->state, MT_OPEN);
    atomic_init(&m->armed, UINT64_MAX);
    atomic_init(&m->wake, false);

    m->shards_raw_size = (size_t)n * sizeof(union shard_slot) + SLM_CACHE_LINE;
    m->shards_raw = mt_alloc(m, m->shards_raw_size);
    if (!m->shards_raw) {
        mt_destroy(m, 0);
        return SLUICE_ENOMEM;
    }
    memset(m->shards_raw, 0, m->shards_raw_size);
    uintptr_t base = ((uintptr_t)m->shards_raw + SLM_CACHE_LINE - 1) & ~(uintptr_t)(SLM_CACHE_LINE - 1);
    m->shards = (union shard_slot *)base;

    sluice_config_t cc = *config;
    m->line_alloc.alloc = line_alloc;
    m->line_alloc.release = line_release;
    m->line_alloc.ctx = m;
    cc.allocator = &m->line_alloc;
    cc.on_event = shard_on_event;
    cc.start_ns = sluice_clock_now();
    if (cc.tick_ns == 0) cc.tick_ns = SLUICE_LOOP_TICK_DEFAULT_NS;
    if (cc.max_keys) cc.max_keys = cc.max_keys / n + (cc.max_keys % n != 0);
    for (unsigned i = 0; i < n; i++) {
        struct shard *s = shard_at(m, i);
        s->m = m;
        atomic_init(&s->next, UINT64_MAX);
        if (shard_mutex_init(&s->mu) != 0) {
            mt_destroy(m, i);
            return SLUICE_ENOMEM;
        }
        cc.user = s;
        rc = sluice_limiter_new(&s->core, &cc);
        if (rc) {
            mt_destroy(m, i + 1);
            return rc;
        }
        if (i == 0) { /* every shard hashes with the first one's key */
            m->seed[0] = s->core->seed[0];
            m->seed[1] = s->core->seed[1];
            cc.fixed_seed = true;
            cc.seed[0] = s->core->seed[0];
            cc.seed[1] = s->core->seed[1];
        }
    }
    m->ev = event_new(loop->base, -1, 0, on_loop_event, m);
    if (!m->ev) {
        mt_destroy(m, n);
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

enum { OP_SUBMIT = -1, OP_PENDING = 0, OP_FLUSH = SLUICE_EVENT_EMIT, OP_CANCEL = SLUICE_EVENT_DROP };

static int key_call(struct sluice_mt *m, sluice_key_t key, int op, uint64_t token, bool have_now, uint64_t now,
                    sluice_decision_t *d) {
    if (!m) return SLUICE_EINVAL;
    if (atomic_load_explicit(&m->state, memory_order_acquire) != MT_OPEN) return SLUICE_ECLOSED;
    struct sl_keyref k;
    int rc = sl_key_prepare_seeded(m->seed, key, &k);
    if (rc) return rc;
    struct shard *s = shard_at(m, (unsigned)k.hash & m->mask);
    /* The clock is read before the lock, to keep the critical section short;
     * a time older than one the shard has seen counts as that later one. */
    if (!have_now) now = sluice_clock_now();
    /* A call produces at most two events, both of its own key: a due
     * emission (timers first) and a superseded value; with reporting flags a
     * submit adds a third, its own token emitted or dropped at once. */
    const size_t want = op == OP_SUBMIT && m->report ? 3 : 2;
    sluice_decision_t dec;
    pthread_mutex_lock(&s->mu);
    size_t before = s->out.n;
    struct outbox *o = &s->out;
    if ((o->cap - o->n < want || o->capb - o->nb < want * k.len) && !outbox_reserve(m, o, want, want * k.len)) {
        pthread_mutex_unlock(&s->mu);
        return SLUICE_ENOMEM;
    }
    if (k.len > s->max_keylen) s->max_keylen = k.len;
    if (op == OP_SUBMIT) {
        rc = sl_submit_prepared(s->core, &k, token, now, &dec);
        if (rc == 0 && m->report) {
            /* Reported in the outbox too, after the events of this call, so
             * that the callback sees the key's tokens in order. */
            sluice_event_t ev;
            ev.kind = (sluice_event_kind_t)0;
            if (dec.kind == SLUICE_EMITTED && (m->report & SLUICE_MT_REPORT_EMITTED))
                ev.kind = SLUICE_EVENT_EMIT;
            else if (dec.kind == SLUICE_DROPPED && (m->report & SLUICE_MT_REPORT_DROPPED))
                ev.kind = SLUICE_EVENT_DROP;
            if (ev.kind) {
                ev.key = key;
                ev.token = token;
                ev.at = s->core->now_seen; /* the call's time, as the core clamped it */
                outbox_push(s, &ev);
            }
        }
        if (rc == 0 && d) *d = dec;
    } else {
        rc = sl_key_op_prepared(s->core, &k, now, op);
    }
    publish_next(s);
    uint64_t next = atomic_load_explicit(&s->next, memory_order_relaxed);
    bool produced = s->out.n != before;
    pthread_mutex_unlock(&s->mu);
    if (next < atomic_load(&m->armed)) arm_at(m, next);
    if (produced) deliver_or_wake(m); /* m may be gone afterwards (a free from a callback) */
    return rc;
}

int sluice_mt_submit(sluice_mt_t *m, sluice_key_t key, uint64_t token, sluice_decision_t *d) {
    return key_call(m, key, OP_SUBMIT, token, false, 0, d);
}

int sluice_mt_submit_at(sluice_mt_t *m, sluice_key_t key, uint64_t token, uint64_t now, sluice_decision_t *d) {
    return key_call(m, key, OP_SUBMIT, token, true, now, d);
}

int sluice_mt_flush(sluice_mt_t *m, sluice_key_t key) { return key_call(m, key, OP_FLUSH, 0, false, 0, NULL); }

int sluice_mt_cancel(sluice_mt_t *m, sluice_key_t key) { return key_call(m, key, OP_CANCEL, 0, false, 0, NULL); }

int sluice_mt_pending(sluice_mt_t *m, sluice_key_t key) { return key_call(m, key, OP_PENDING, 0, false, 0, NULL); }

int sluice_mt_close(sluice_mt_t *m, sluice_close_mode_t mode) {
    if (!m || (mode != SLUICE_CLOSE_DRAIN && mode != SLUICE_CLOSE_DISCARD)) return SLUICE_EINVAL;
    if (atomic_load(&m->state) != MT_OPEN) return SLUICE_ECLOSED;
    for (unsigned i = 0; i < m->nshards; i++) pthread_mutex_lock(&shard_at(m, i)->mu);
    int rc = 0;
    bool produced = false;
    if (atomic_load(&m->state) != MT_OPEN) {
        rc = SLUICE_ECLOSED;
    } else {
        uint64_t now = sluice_clock_now();
        /* Timers first, in bounded steps with room reserved, then room for
         * one event per pending value: the close itself cannot fail. */
        for (unsigned i = 0; i < m->nshards && rc == 0; i++) {
            struct shard *s = shard_at(m, i);
            size_t before = s->out.n;
            bool stalled = false;
            while (shard_advance(m, s, now, SLM_ADVANCE_CHUNK, &stalled) == SLM_ADVANCE_CHUNK && !stalled) {
            }
            if (s->out.n != before) produced = true;
            uint64_t pend = s->core->pending;
            if (stalled || !outbox_reserve(m, &s->out, (size_t)pend, (size_t)pend * s->max_keylen))
                rc = SLUICE_ENOMEM;
        }
        if (rc == 0) {
            atomic_store(&m->state, MT_CLOSED);
            for (unsigned i = 0; i < m->nshards; i++) {
                struct shard *s = shard_at(m, i);
                size_t before = s->out.n;
                sluice_limiter_close(s->core, now, mode);
                if (s->out.n != before) produced = true;
                publish_next(s);
            }
        }
    }
    for (unsigned i = m->nshards; i-- > 0;) pthread_mutex_unlock(&shard_at(m, i)->mu);
    if (produced) deliver_or_wake(m);
    return rc;
}

/* Carried out by the deliverer (flag held, frame pushed), state FREEING. */
static void teardown(struct sluice_mt *m) {
    pthread_mutex_lock(&m->arm_mu);
    struct event *ev = m->ev;
    m->ev = NULL;
    pthread_mutex_unlock(&m->arm_mu);
    if (ev) event_free(ev); /* from the loop thread (a deferred free) this does not wait */
    /* Deliver what is queued: the deliver loop is ours, run it inline. */
    for (;;) {
        bool any = false;
        for (unsigned i = 0; i < m->nshards; i++) {
            struct shard *s = shard_at(m, i);
            pthread_mutex_lock(&s->mu);
            struct outbox batch = s->out;
            s->out = m->spare;
            pthread_mutex_unlock(&s->mu);
            for (size_t j = 0; j < batch.n; j++) {
                const struct ob_rec *r = &batch.rec[j];
                sluice_event_t ev;
                ev.kind = (sluice_event_kind_t)r->kind;
                ev.key = r->is_u64 ? sluice_key_u64(r->u64) : sluice_key_bytes(batch.bytes + r->key_off, r->key_len);
                ev.token = r->token;
                ev.at = r->at;
                any = true;
                atomic_fetch_add_explicit(&m->delivered, 1, memory_order_relaxed);
                if (m->on_event) m->on_event(m->user, &ev);
            }
            batch.n = batch.nb = 0;
            m->spare = batch;
        }
        if (!any) break;
    }
    /* Discard what is pending, straight to the user, as the core's free
     * does (calls into the limiter fail from now on, so no lock is needed
     * or held while the callback runs). */
    for (unsigned i = 0; i < m->nshards; i++) {
        struct shard *s = shard_at(m, i);
        pthread_mutex_lock(&s->mu); /* orders us after every earlier holder */
        s->direct = true;
        sluice_limiter_t *core = s->core;
        s->core = NULL;
        pthread_mutex_unlock(&s->mu);
        sluice_limiter_free(core);
    }
    sluice_loop_t *loop = m->loop;
    mt_destroy(m, m->nshards);
    atomic_fetch_sub(&loop->nmt, 1);
}

void sluice_mt_free(sluice_mt_t *m) {
    if (!m) return;
    if (in_callback(m)) {
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
    struct dframe frame = { m, tl_frames };
    tl_frames = &frame;
    teardown(m);
    tl_frames = frame.up;
}

int sluice_mt_stats(sluice_mt_t *m, sluice_mt_stats_t *out) {
    if (!m || !out) return SLUICE_EINVAL;
    memset(out, 0, sizeof *out);
    for (unsigned i = 0; i < m->nshards; i++) {
        struct shard *s = shard_at(m, i);
        sluice_stats_t st;
        pthread_mutex_lock(&s->mu);
        int rc = sluice_limiter_stats(s->core, &st);
        out->core.memory_bytes += s->out.cap * sizeof(struct ob_rec) + s->out.capb;
        pthread_mutex_unlock(&s->mu);
        if (rc) continue;
        out->core.live_keys += st.live_keys;
        out->core.pending += st.pending;
        out->core.armed_timers += st.armed_timers;
        out->core.memory_bytes += st.memory_bytes;
        if (st.max_probe > out->core.max_probe) out->core.max_probe = st.max_probe;
        out->core.table_slots += st.table_slots;
        out->core.full_refusals += st.full_refusals;
    }
    out->core.memory_bytes += sizeof *m + m->shards_raw_size;
    out->shards = m->nshards;
    out->timer_armed_at = atomic_load(&m->armed);
    out->wakeups = atomic_load_explicit(&m->wakeups, memory_order_relaxed);
    out->timer_arms = atomic_load_explicit(&m->arms, memory_order_relaxed);
    out->budget_passes = atomic_load_explicit(&m->budget_passes, memory_order_relaxed);
    out->events_delivered = atomic_load_explicit(&m->delivered, memory_order_relaxed);
    out->events_queued = atomic_load_explicit(&m->queued, memory_order_relaxed);
    return 0;
}

uint64_t sluice_mt_next_deadline(sluice_mt_t *m) {
    if (!m || atomic_load(&m->state) != MT_OPEN) return UINT64_MAX;
    return min_next(m);
}
