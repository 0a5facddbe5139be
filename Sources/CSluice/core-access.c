/* core-access.c — the accessors of core-internal.h, over the core's
 * internals. The loop layer calls only these (and sluice.h); when the
 * internals change, this file follows. */
#include "core-internal.h"
#include "limiter-internal.h"

int sluice__key_prepare(const uint64_t seed[2], sluice_key_t key, sluice__pkey_t *out) {
    return sluice__key_prepare_seeded(seed, key, out);
}

uint64_t sluice__hash_u64(const uint64_t seed[2], uint64_t key) { return sluice__fast_hash_u64(seed, key); }

const void *sluice__limiter_hot(const sluice_limiter_t *l) { return &l->now_seen; }

void *sluice__limiter_host_word(sluice_limiter_t *l) { return &l->host_word; }

void sluice__limiter_seed(const sluice_limiter_t *l, uint64_t seed[2]) {
    seed[0] = l->seed[0];
    seed[1] = l->seed[1];
}

int sluice__submit_prepared(sluice_limiter_t *l, const sluice__pkey_t *key, uint64_t token, uint64_t cost, uint64_t now,
                            sluice_decision_t *d) {
    return sluice__limiter_submit_keyref(l, key, token, cost, now, d);
}

int sluice__key_op(sluice_limiter_t *l, const sluice__pkey_t *key, sluice__key_op_t op, uint64_t now) {
    switch (op) {
    case SLUICE__OP_FLUSH: return sluice__limiter_key_op_keyref(l, key, now, SLUICE_EVENT_EMIT);
    case SLUICE__OP_CANCEL: return sluice__limiter_key_op_keyref(l, key, now, SLUICE_EVENT_DROP);
    case SLUICE__OP_PENDING: return sluice__limiter_key_op_keyref(l, key, now, 0);
    }
    return SLUICE_EINVAL;
}

bool sluice__key_is_live(const sluice_limiter_t *l, const sluice__pkey_t *key) {
    return l->table.live != 0 && sluice__table_find(&l->table, key) != SLUICE__NONE;
}

uint64_t sluice__limiter_now(const sluice_limiter_t *l) { return l->now_seen; }

uint64_t sluice__limiter_pending(const sluice_limiter_t *l) { return l->pending; }

uint64_t sluice__limiter_live(const sluice_limiter_t *l) { return l->table.live; }

void sluice__limiter_index_hint(const sluice_limiter_t *l, uintptr_t *base, unsigned *bits) {
    *base = (uintptr_t)l->table.slots;
    *bits = l->table.slot_bits;
}

void sluice__prefetch_prepared(const sluice_limiter_t *l, const sluice__pkey_t *key, int stage) {
    if (l->table.live == 0) return;
    if (stage == 0)
        sluice__prefetch_slot(l, key);
    else
        sluice__prefetch_entry(l, key);
}
