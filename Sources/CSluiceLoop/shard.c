/* shard.c — a loop limiter's shard (loop-internal.h): the core limiter's
 * event callback, which queues events in the shard's outbox, and the
 * upkeep after core calls (publishing the core's next deadline, settling
 * the live-key count, firing due deadlines within a budget). Called by the
 * calls on a key (mt.c), the timer pass (delivery.c) and creation
 * (lifetime.c); calls only the outbox and the core. */
#include "loop-internal.h"

/* The core's callback: runs under the shard lock (or, in teardown, with the
 * shard to ourselves). */
void sluice__shard_on_event(void *user, const sluice_event_t *ev) {
    struct shard *s = user;
    struct sluice_mt *m = s->m;
    if (s->direct) {
        atomic_fetch_add_explicit(&m->delivered, 1, memory_order_relaxed);
        if (m->on_events)
            m->on_events(m->user, ev, 1);
        else if (m->on_event)
            m->on_event(m->user, ev);
        return;
    }
    sluice__outbox_push(m, &s->out, ev);
}

uint64_t sluice__shard_publish_next(struct shard *s) {
    uint64_t next = sluice_limiter_next_deadline(s->core);
    if (next != atomic_load_explicit(&s->next, memory_order_relaxed)) atomic_store(&s->next, next);
    return next;
}

void sluice__shard_settle_keys(struct shard *s) {
    struct sluice_mt *m = s->m;
    if (!m->max_keys || !s->core) return;
    uint64_t live = sluice__limiter_live(s->core);
    if (live < s->charged)
        atomic_fetch_sub_explicit(&m->live_keys, s->charged - live, memory_order_relaxed);
    else if (live > s->charged) /* never happens (a call creates only its reserved key); stay exact anyway */
        atomic_fetch_add_explicit(&m->live_keys, live - s->charged, memory_order_relaxed);
    s->charged = live;
}

size_t sluice__shard_advance(struct sluice_mt *m, struct shard *s, uint64_t now, size_t budget, bool *stalled) {
    size_t done = 0;
    while (done < budget) {
        size_t want = budget - done;
        if (want > SLM_ADVANCE_CHUNK) want = SLM_ADVANCE_CHUNK;
        size_t fit = sluice__outbox_room(m, &s->out, want, s->max_keylen);
        if (fit == 0) {
            *stalled = true;
            break;
        }
        int64_t n = sluice_limiter_advance(s->core, now, fit);
        if (n <= 0) break;
        done += (size_t)n;
        if ((size_t)n < fit) break;
    }
    sluice__shard_settle_keys(s);
    sluice__shard_publish_next(s);
    return done;
}
