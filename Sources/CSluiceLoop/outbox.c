/* outbox.c — a shard's queue of events waiting for delivery, and the loop
 * limiter's memory.
 *
 * The core's event callback runs under the shard lock; it only appends the
 * event, key bytes copied, to the shard's outbox. The deliverer takes an
 * outbox whole (swapping it with a spare, under the lock) and hands its
 * events to the user's callback outside every lock (sluice__outbox_deliver,
 * the one place that turns records back into events). */
#include "loop-internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void *sluice__mt_alloc(const struct sluice_mt *m, size_t size) {
    return m->has_alloc ? m->alloc.alloc(m->alloc.ctx, size) : malloc(size);
}

void sluice__mt_release(const struct sluice_mt *m, void *p, size_t size) {
    if (!p) return;
    if (m->has_alloc)
        m->alloc.release(m->alloc.ctx, p, size);
    else
        free(p);
}

static bool grow_array(const struct sluice_mt *m, void **p, size_t *cap, size_t need, size_t elem) {
    if (need <= *cap) return true;
    size_t ncap = *cap ? *cap : 16;
    while (ncap < need) {
        if (ncap > SIZE_MAX / 2 / elem) return false;
        ncap *= 2;
    }
    void *np = sluice__mt_alloc(m, ncap * elem);
    if (!np) return false;
    if (*p) {
        memcpy(np, *p, *cap * elem);
        sluice__mt_release(m, *p, *cap * elem);
    }
    *p = np;
    *cap = ncap;
    return true;
}

bool sluice__outbox_reserve(const struct sluice_mt *m, struct outbox *o, size_t events, size_t bytes) {
    void *p = o->rec;
    bool ok = grow_array(m, &p, &o->cap, o->n + events, sizeof *o->rec);
    o->rec = p;
    if (!ok) return false;
    p = o->bytes;
    ok = grow_array(m, &p, &o->capb, o->nb + bytes, 1);
    o->bytes = p;
    return ok;
}

size_t sluice__outbox_room(const struct sluice_mt *m, struct outbox *o, size_t want, size_t keylen) {
    if (sluice__outbox_reserve(m, o, want, want * keylen)) return want;
    size_t fit = o->cap - o->n;
    if (keylen && (o->capb - o->nb) / keylen < fit) fit = (o->capb - o->nb) / keylen;
    if (fit == 0 && sluice__outbox_reserve(m, o, 1, keylen)) fit = 1;
    return fit;
}

void sluice__outbox_release(const struct sluice_mt *m, struct outbox *o) {
    sluice__mt_release(m, o->rec, o->cap * sizeof *o->rec);
    sluice__mt_release(m, o->bytes, o->capb);
    memset(o, 0, sizeof *o);
}

void sluice__outbox_push(const struct sluice_mt *m, struct outbox *o, const sluice_event_t *ev) {
    size_t len = ev->key.kind == SLUICE_KEY_U64 ? 0 : ev->key.len;
    if (o->n >= o->cap || o->capb - o->nb < len) {
        /* Room was reserved before the call: this is a bug in Sluice. A token
         * must never be lost silently, so try once more, then stop loudly. */
        if (!sluice__outbox_reserve(m, o, 1, len)) {
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
    r->has_successor = ev->has_successor;
    r->successor = ev->successor;
    r->key_len = (uint16_t)len;
    r->key_off = (uint32_t)o->nb;
    if (len) memcpy(o->bytes + o->nb, ev->key.bytes, len);
    o->nb += len;
}

size_t sluice__outbox_deliver(struct sluice_mt *m, struct outbox *o) {
    size_t n = o->n;
    sluice_event_t batch[SLUICE_MT_EVENTS_MAX];
    size_t nb = 0; /* events in `batch` (on_events only) */
    for (size_t j = 0; j < n; j++) {
        const struct ob_rec *r = &o->rec[j];
        sluice_event_t *ev = m->on_events ? &batch[nb++] : &batch[0];
        memset(ev, 0, sizeof *ev);
        ev->kind = (sluice_event_kind_t)r->kind;
        ev->key = r->is_u64 ? sluice_key_u64(r->u64) : sluice_key_bytes(o->bytes + r->key_off, r->key_len);
        ev->token = r->token;
        ev->at = r->at;
        ev->has_successor = r->has_successor;
        ev->successor = r->successor;
        if (m->on_events) {
            if (nb == SLUICE_MT_EVENTS_MAX || j + 1 == n) {
                atomic_fetch_add_explicit(&m->delivered, nb, memory_order_relaxed);
                m->on_events(m->user, batch, nb);
                nb = 0;
            }
        } else {
            atomic_fetch_add_explicit(&m->delivered, 1, memory_order_relaxed);
            if (m->on_event) m->on_event(m->user, ev);
        }
    }
    o->n = o->nb = 0;
    return n;
}
