/*
 * limiter-internal.h — the limiter's data structures (internal).
 *
 * A limiter is three things:
 *
 *  - a slab of fixed-stride entries, one per live key, in chunks of
 *    SL_CHUNK entries addressed by a 32-bit index. An entry embeds its timer
 *    node, so arming never allocates. Free entries form a list. When most
 *    entries are free the slab is compacted (live entries moved down, their
 *    links and index slots re-pointed) and the chunks above are released;
 *  - an index: open addressing with linear probing over 64-bit slots holding
 *    (hash tag << 32 | entry index + 1), 0 for empty. The home bucket is the
 *    top bits of the tag, so growing or shrinking never touches entries.
 *    Deletion shifts the following run back (no tombstones). Keys are
 *    compared exactly, so two keys never share state;
 *  - a timer wheel (wheel-internal.h) whose nodes are the entries' nodes.
 *
 * An entry exists exactly while its key is not idle, and every live entry
 * has exactly one armed timer: the end of its window (throttle, audit), its
 * debounce deadline, or for rate the instant its TAT is reached (when the key
 * becomes indistinguishable from a fresh one and its memory is released).
 */
#ifndef SLUICE_LIMITER_INTERNAL_H
#define SLUICE_LIMITER_INTERNAL_H

#include "sluice.h"
#include "siphash-internal.h"
#include "wheel-internal.h"

#include <string.h>

/* Internal symbols stay out of the shared library's interface. */
#if defined(__GNUC__) || defined(__clang__)
#pragma GCC visibility push(hidden)
#endif


#define SL_CHUNK_SHIFT 12
#define SL_CHUNK ((uint32_t)1 << SL_CHUNK_SHIFT)
#define SL_INDEX_MIN_BITS 4
#define SL_INLINE_KEY 8

enum sl_state { SL_FREE = 0, SL_LIVE = 1 };

enum sl_flag {
    SL_F_PENDING = 1 << 0, /* token holds a pending value */
    SL_F_MAXDUE = 1 << 1,  /* debounce: maxWait passed without an emission */
    SL_F_KEY_U64 = 1 << 2, /* key is an integer */
    SL_F_KEY_HEAP = 1 << 3 /* key bytes live in a heap blob pointed to by `key` */
};

/* One live key. 40 bytes; debounce with maxWait appends struct sl_ext. */
struct sl_entry {
    struct sw_node node; /* must stay first: the arena's node_off is 0 */
    uint64_t key;        /* integer key, inline bytes (len <= 8), or blob pointer */
    uint64_t token;      /* pending token; rate: the remainder of TAT * limit */
    uint32_t tag;        /* top 32 bits of the key's hash */
    uint8_t state;
    uint8_t flags;
    uint16_t keylen;
};

/* Debounce with maxWait: the spec's `last` and `start`. */
struct sl_ext {
    uint64_t last, start;
};

struct sluice_limiter {
    /* policy, normalised */
    sluice_policy_t policy;
    uint8_t kind;
    bool leading, trailing, pick_first, has_max_wait, pass_through;
    uint64_t interval;   /* ns */
    uint64_t max_wait;   /* ns */
    /* rate: all times scaled by `limit` are kept as (quotient, remainder) */
    uint64_t limit;
    uint64_t t_q, t_r;     /* emission interval T = per/limit */
    uint64_t tau_q, tau_r; /* tolerance tau = (burst-1) * per / limit (t_q saturates) */

    sluice_event_fn on_event;
    void *user;
    sluice_allocator_t alloc;
    uint64_t seed[2];
    uint64_t max_keys;

    /* index */
    uint64_t *slots;
    uint32_t slot_bits;

    /* slab */
    unsigned char **chunks;
    uint32_t nchunks, chunks_cap;
    uint32_t top;       /* entries carved so far: indices [0, top) are LIVE or FREE */
    uint32_t free_head; /* free list through node.link.next */
    uint32_t stride;
    uint64_t live;
    uint64_t pending;
    uint64_t shrink_below; /* sl_table_maybe_shrink has work when live < shrink_below */

    struct sw_arena arena;
    struct sw_wheel wheel;

    uint64_t now_seen;
    uint64_t mem_bytes;
    uint64_t full_refusals;

    int depth;           /* nesting of public calls (callbacks re-enter) */
    bool closed;         /* close() done */
    bool dying;          /* free() requested */
};

/* ---- allocation ---- */
void *sl_alloc(struct sluice_limiter *l, size_t size);
void sl_release(struct sluice_limiter *l, void *p, size_t size);

/* ---- keys ---- */
struct sl_keyref {
    const unsigned char *bytes;
    size_t len;
    uint64_t u64;
    bool is_u64;
    uint64_t hash;
};

static inline struct sl_entry *sl_entry_at(const struct sluice_limiter *l, uint32_t idx) {
    return (struct sl_entry *)(void *)(l->chunks[idx >> SL_CHUNK_SHIFT] +
                                       (size_t)(idx & (SL_CHUNK - 1)) * l->stride);
}

static inline struct sl_ext *sl_ext_of(struct sl_entry *e) { return (struct sl_ext *)(void *)(e + 1); }

/* A distinct hash key for integer keys, so an integer and its 8 bytes do
 * not hash alike (they are never equal anyway: the comparison checks the
 * kind). */
#define SL_U64_DOMAIN UINT64_C(0x9e3779b97f4a7c15)

/* Validates and hashes a key with a limiter's seed. Returns 0, SLUICE_EINVAL
 * or SLUICE_EKEYLEN. (The loop layer calls it with the seed its shards share.) */
static inline int sl_key_prepare_seeded(const uint64_t seed[2], sluice_key_t key, struct sl_keyref *out) {
    if (key.kind == SLUICE_KEY_U64) {
        uint64_t k[2] = { seed[0] ^ SL_U64_DOMAIN, seed[1] };
        out->is_u64 = true;
        out->u64 = key.u64;
        out->bytes = NULL;
        out->len = 0;
        out->hash = sl_siphash13_u64(k, key.u64);
        return 0;
    }
    if (key.kind != SLUICE_KEY_BYTES) return SLUICE_EINVAL;
    if (key.len > SLUICE_KEY_MAX) return SLUICE_EKEYLEN;
    if (key.len > 0 && key.bytes == NULL) return SLUICE_EINVAL;
    out->is_u64 = false;
    out->u64 = 0;
    out->bytes = (const unsigned char *)key.bytes;
    out->len = key.len;
    out->hash = sl_siphash13(seed, key.bytes, key.len);
    return 0;
}

/* Validates and hashes a key. Returns 0, SLUICE_EINVAL or SLUICE_EKEYLEN. */
static inline int sl_key_prepare(const struct sluice_limiter *l, sluice_key_t key, struct sl_keyref *out) {
    return sl_key_prepare_seeded(l->seed, key, out);
}

static inline const unsigned char *sl_entry_key_bytes(const struct sl_entry *e) {
    if (e->flags & SL_F_KEY_HEAP) return (const unsigned char *)(uintptr_t)e->key;
    return (const unsigned char *)&e->key;
}

static inline bool sl_entry_matches(const struct sl_entry *e, const struct sl_keyref *k) {
    if (k->is_u64) return (e->flags & SL_F_KEY_U64) && e->key == k->u64;
    if (e->flags & SL_F_KEY_U64) return false;
    if (e->keylen != k->len) return false;
    return k->len == 0 || memcmp(sl_entry_key_bytes(e), k->bytes, k->len) == 0;
}

/* Index slots: tag << 32 | (entry index + 1); 0 is empty. The home bucket is
 * the top bits of the tag. */
static inline uint32_t sl_slot_tag(uint64_t s) { return (uint32_t)(s >> 32); }
static inline uint32_t sl_slot_idx(uint64_t s) { return (uint32_t)s - 1; }
static inline size_t sl_home(uint32_t tag, uint32_t bits) { return (size_t)(tag >> (32 - bits)); }

/* Index of the live entry for the key, or SW_NONE. */
static inline uint32_t sl_table_find(const struct sluice_limiter *l, const struct sl_keyref *k) {
    uint32_t tag = (uint32_t)(k->hash >> 32);
    size_t mask = ((size_t)1 << l->slot_bits) - 1;
    size_t i = sl_home(tag, l->slot_bits);
    for (;;) {
        uint64_t s = l->slots[i];
        if (s == 0) return SW_NONE;
        if (sl_slot_tag(s) == tag) {
            uint32_t idx = sl_slot_idx(s);
            if (sl_entry_matches(sl_entry_at(l, idx), k)) return idx;
        }
        i = (i + 1) & mask;
    }
}

/* Copies an entry's key into a caller buffer of SLUICE_KEY_MAX bytes (byte
 * keys only) and returns it as a sluice_key_t. */
static inline sluice_key_t sl_entry_key(const struct sl_entry *e, unsigned char *buf) {
    if (e->flags & SL_F_KEY_U64) return sluice_key_u64(e->key);
    if (e->keylen) memcpy(buf, sl_entry_key_bytes(e), e->keylen);
    return sluice_key_bytes(buf, e->keylen);
}

/* Creates a live entry for a key known to be absent (node unarmed, flags
 * zero but for the key kind). Returns 0 and the index, or SLUICE_ENOMEM
 * with nothing changed. */
int sl_table_insert(struct sluice_limiter *l, const struct sl_keyref *k, uint32_t *idx_out);

/* Removes a live entry: disarms its timer, unlinks it from the index,
 * frees its key blob and returns it to the free list. */
void sl_table_remove(struct sluice_limiter *l, uint32_t idx);

/* Releases slab chunks and index space when most is unused (live <
 * shrink_below). Only at depth 0. */
void sl_table_maybe_shrink(struct sluice_limiter *l);

/* ---- entry points for a prepared key (limiter.c) ----
 * The loop layer (loop.c) hashes a key once with sl_key_prepare_seeded() and
 * the seed all its shard limiters share, picks the shard from the low hash
 * bits (the index uses the top ones) and calls these. `k` must be prepared
 * with this limiter's seed. Same behaviour and results as
 * sluice_limiter_submit() and sluice_limiter_flush/cancel/pending() (`kind`:
 * SLUICE_EVENT_EMIT for flush, SLUICE_EVENT_DROP for cancel, 0 for pending). */
int sl_submit_prepared(struct sluice_limiter *l, const struct sl_keyref *k, uint64_t token, uint64_t now,
                       sluice_decision_t *d);
int sl_key_op_prepared(struct sluice_limiter *l, const struct sl_keyref *k, uint64_t now, int kind);

int sl_table_init(struct sluice_limiter *l);
void sl_table_destroy(struct sluice_limiter *l);
uint64_t sl_table_max_probe(const struct sluice_limiter *l);
int sl_table_check(const struct sluice_limiter *l);

#if defined(__GNUC__) || defined(__clang__)
#pragma GCC visibility pop
#endif

#endif /* SLUICE_LIMITER_INTERNAL_H */
