/* delivery.c — a loop limiter's timer and the delivery of its events to
 * the user's callback (loop-internal.h). Its creation, its libevent event's
 * callback and its teardown are in lifetime.c, which calls this file; this
 * file calls only the shards (shard.c), the outboxes and the core.
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
 * so the events of a key are delivered in order. A free asked from inside
 * the limiter's own callback only sets `free_deferred`: the outermost
 * deliverer returns it to its caller (lifetime.c), which carries it out.
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
 * missed. Extending or cancelling never lowers `next`, so it never re-arms. */
#include "loop-internal.h"

#include <event2/event.h>
#include <sys/time.h>
#include <time.h>

/* Limiters this thread is delivering for (innermost first). */
static _Thread_local struct sluice__dframe *tl_frames;

void sluice__deliverer_push(struct sluice__dframe *f, const struct sluice_mt *m) {
    f->m = m;
    f->up = tl_frames;
    tl_frames = f;
}

void sluice__deliverer_pop(struct sluice__dframe *f) { tl_frames = f->up; }

bool sluice__mt_in_callback(const struct sluice_mt *m) {
    for (const struct sluice__dframe *f = tl_frames; f; f = f->up)
        if (f->m == m) return true;
    return false;
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

void sluice__mt_arm_at(struct sluice_mt *m, uint64_t at) {
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

uint64_t sluice__mt_min_next(const struct sluice_mt *m) {
    uint64_t best = UINT64_MAX;
    for (unsigned i = 0; i < m->nshards; i++) {
        uint64_t n = atomic_load(&sluice__shard_at(m, i)->next);
        if (n < best) best = n;
    }
    return best;
}

/* ------------------------------------------------------------------ delivery */

/* Takes a shard's queued events, or returns false when it has none. */
static bool take_outbox(struct sluice_mt *m, struct shard *s, struct outbox *batch) {
    sluice__lock(s->lk);
    if (s->out.n == 0) {
        sluice__unlock(s->lk);
        return false;
    }
    *batch = s->out;
    s->out = m->spare;
    sluice__unlock(s->lk);
    return true;
}

bool sluice__mt_deliver_pass(struct sluice_mt *m) {
    bool any = false;
    for (unsigned i = 0; i < m->nshards; i++) {
        struct outbox batch;
        if (!take_outbox(m, sluice__shard_at(m, i), &batch)) continue;
        any = true;
        sluice__outbox_deliver(m, &batch);
        if (batch.cap > SLM_SPARE_KEEP) sluice__outbox_release(m, &batch);
        m->spare = batch;
    }
    return any;
}

bool sluice__mt_deliver(struct sluice_mt *m) {
    pthread_mutex_lock(&m->dmu);
    if (m->delivering) {
        m->again = true;
        pthread_mutex_unlock(&m->dmu);
        return false;
    }
    m->delivering = true;
    pthread_mutex_unlock(&m->dmu);
    struct sluice__dframe frame;
    sluice__deliverer_push(&frame, m);
    for (;;) {
        bool any = sluice__mt_deliver_pass(m);
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
    sluice__deliverer_pop(&frame);
    return do_free; /* when set, still the deliverer: the caller frees */
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
void sluice__mt_wake(struct sluice_mt *m) {
    /* a plain load first: while a wake-up is pending, callers only read the line */
    if (!atomic_load(&m->wake) && !atomic_exchange(&m->wake, true) && m->ev) event_active(m->ev, EV_READ, 0);
}

/* Table work deferred by the timer pass (the core's index shrink and slab
 * compaction when keys go idle, core-internal.h): the shards drain in step,
 * so done in the pass they would all rehash at once, milliseconds without a
 * delivery at a million keys. Done here after the delivery, one shard per
 * pass. Returns true when another shard still has some (the caller then
 * comes back at once, after the loop has polled I/O). Loop thread only. */
static bool tidy_one(struct sluice_mt *m) {
    bool done = false;
    for (unsigned i = 0; i < m->nshards; i++) {
        struct shard *s = sluice__shard_at(m, i);
        if (!s->tidy) continue;
        if (done) return true;
        s->tidy = false;
        sluice__lock(s->lk);
        sluice__limiter_tidy(s->core);
        sluice__unlock(s->lk);
        done = true;
    }
    return false;
}

bool sluice__mt_timer_pass(struct sluice_mt *m) {
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
        struct shard *s = sluice__shard_at(m, (first + k) & m->mask);
        if (atomic_load(&s->next) > now) continue;
        if (budget == 0) {
            more = true;
            break;
        }
        sluice__lock(s->lk);
        sluice__limiter_defer_tidy(s->core, true);
        budget -= sluice__shard_advance(m, s, now, budget, &stalled);
        if (sluice__limiter_defer_tidy(s->core, false)) s->tidy = true;
        if (budget == 0 && atomic_load_explicit(&s->next, memory_order_relaxed) <= now) more = true;
        sluice__unlock(s->lk);
    }
    if (more) atomic_fetch_add_explicit(&m->budget_passes, 1, memory_order_relaxed);
    if (sluice__mt_deliver(m)) return true;
    bool tidy_more = tidy_one(m);
    uint64_t next = sluice__mt_min_next(m);
    if (stalled && next < now + SLM_RETRY_NS)
        next = now + SLM_RETRY_NS;
    else if (more || tidy_more)
        next = now; /* at once, after the loop has polled I/O */
    sluice__mt_arm_at(m, next);
    return false;
}
