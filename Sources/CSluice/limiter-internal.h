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
#include "wheel-internal.h"

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
    return (struct sl_entry *)(void *)sw_node_at(&l->arena, idx);
}

static inline struct sl_ext *sl_ext_of(struct sl_entry *e) { return (struct sl_ext *)(void *)(e + 1); }

/* Validates and hashes a key. Returns 0, SLUICE_EINVAL or SLUICE_EKEYLEN. */
int sl_key_prepare(const struct sluice_limiter *l, sluice_key_t key, struct sl_keyref *out);

/* Index of the live entry for the key, or SW_NONE. */
uint32_t sl_table_find(const struct sluice_limiter *l, const struct sl_keyref *k);

/* Creates a live entry for a key known to be absent (node unarmed, flags
 * zero but for the key kind). Returns 0 and the index, or SLUICE_ENOMEM
 * with nothing changed. */
int sl_table_insert(struct sluice_limiter *l, const struct sl_keyref *k, uint32_t *idx_out);

/* Removes a live entry: disarms its timer, unlinks it from the index,
 * frees its key blob and returns it to the free list. */
void sl_table_remove(struct sluice_limiter *l, uint32_t idx);

/* Copies an entry's key into a caller buffer of SLUICE_KEY_MAX bytes and
 * returns it as a sluice_key_t pointing there. */
sluice_key_t sl_entry_key(const struct sluice_limiter *l, const struct sl_entry *e, unsigned char *buf);

/* Releases slab chunks and index space when most is unused. Only at depth 0. */
void sl_table_maybe_shrink(struct sluice_limiter *l);

int sl_table_init(struct sluice_limiter *l);
void sl_table_destroy(struct sluice_limiter *l);
uint64_t sl_table_max_probe(const struct sluice_limiter *l);
int sl_table_check(const struct sluice_limiter *l);

#endif /* SLUICE_LIMITER_INTERNAL_H */
