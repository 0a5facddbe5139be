/*
 * table-internal.h — the keyed table: one entry per live key (internal).
 *
 * Two structures, both owned by table.c:
 *
 *  - a slab of fixed-stride entries, one per live key, in chunks of
 *    SLUICE__CHUNK entries addressed by a 32-bit index, each chunk
 *    starting on a 64-byte line. Free entries form a
 *    list. When most entries are free the slab is compacted (live entries
 *    moved down, their index slots re-pointed, the owner told through the
 *    `moved` hook) and the chunks above are released;
 *  - an index: open addressing with linear probing over 64-bit slots holding
 *    (hash tag << 32 | entry index + 1), 0 for empty. The home bucket is the
 *    top bits of the tag, so growing or shrinking never touches entries.
 *    Deletion shifts the following run back (no tombstones). Keys are
 *    compared exactly, so two keys never share state.
 *
 * Hashes: a key is hashed once per call, with the fast seeded hash of
 * hash-internal.h (sluice__key_prepare_seeded; the loop layer also picks a
 * shard from it). The index uses that hash until some key lands
 * SLUICE__STRONG_PROBE or more slots past its home, which random keys do
 * essentially never at the index's load limit of 3/4, but keys built to
 * collide under the fast hash do. Then the table switches for good to
 * SipHash-1-3 under its own key (`strong_seed`, drawn apart from the fast
 * hash's seed, so learning one tells nothing of the other): every live entry's tag is recomputed
 * from its key and the index rebuilt in place (no allocation, so it cannot
 * fail), and from then on sluice__table_hash() hashes each key again with
 * SipHash. Entry indices, keys and everything the limiter sees stay the
 * same; only the cost of a call changes.
 *
 * The table knows keys and entries, nothing else: the timer node at the
 * start of an entry, the `token` word, the policy bits of `flags` and the
 * bytes after the entry (stride - sizeof(struct sluice__entry)) belong to
 * the limiter and are only zeroed when an entry is created.
 */
#ifndef SLUICE_TABLE_INTERNAL_H
#define SLUICE_TABLE_INTERNAL_H

#include "alloc-internal.h"
#include "hash-internal.h"
#include "key-internal.h"
#include "siphash-internal.h"
#include "sluice.h"
#include "wheel-internal.h"

#include <string.h>

/* Internal symbols stay out of the shared library's interface. */
#if defined(__GNUC__) || defined(__clang__)
/* For the sluice_limiter_check() family: says on stderr what is broken and
 * returns SLUICE_ECORRUPT from the calling function. */
#define SLUICE__CHECK_FAIL(...)                                                                                        \
    do {                                                                                                               \
        fprintf(stderr, "sluice_limiter_check: " __VA_ARGS__);                                                         \
        fputc('\n', stderr);                                                                                           \
        return SLUICE_ECORRUPT;                                                                                        \
    } while (0)

#pragma GCC visibility push(hidden)
#endif

#define SLUICE__CHUNK_SHIFT 12
#define SLUICE__CHUNK ((uint32_t)1 << SLUICE__CHUNK_SHIFT)
#define SLUICE__INDEX_MIN_BITS 4
#define SLUICE__INLINE_KEY 8
/* No entry: the result of a failed find. */
#define SLUICE__NONE UINT32_C(0xFFFFFFFF)
/* Largest entry index (the indices above are left to the limiter's timer
 * wheel, which names its list heads with them). */
#define SLUICE__ENTRY_MAX UINT32_C(0xFFFFEFFF)
/* Probe lengths are counted exactly up to this many; beyond, the longest
 * one is found by scanning the index. */
#define SLUICE__PROBE_HIST 256
/* A key placed this many slots or more past its home switches the table
 * to SipHash for good. With a hash that behaves randomly, linear probing at
 * load 3/4 gives P(displacement >= d) ~ exp(-0.038 d) per insert: ~1e-17
 * at 1024 (the longest seen in test_flood's runs: 258). Fuzz builds switch
 * at 2, so that the fuzzers' few keys reach the SipHash path often. */
#ifdef FUZZING_BUILD_MODE_UNSAFE_FOR_PRODUCTION
#define SLUICE__STRONG_PROBE 2
#else
#define SLUICE__STRONG_PROBE 1024
#endif

enum sluice__entry_state { SLUICE__FREE = 0, SLUICE__LIVE = 1 };

/* Bits of sluice__entry.flags owned by the table; the limiter uses the
 * others (limiter-internal.h). */
enum sluice__key_flag {
    SLUICE__KEY_U64 = 1 << 6, /* the key is an integer */
    SLUICE__KEY_HEAP = 1 << 7 /* the key bytes live in a heap blob pointed to by `key` */
};

/* One live key. 40 bytes, then stride - 40 bytes of the limiter's. */
struct sluice__entry {
    struct sluice__wheel_node node; /* the limiter's timer; must stay first (node_off 0) */
    uint64_t key;                   /* integer key, inline bytes (len <= 8), blob pointer; free: next free index */
    uint64_t token;                 /* the limiter's (the pending token; rate: TAT's remainder) */
    uint32_t tag;                   /* top 32 bits of the key's hash */
    uint8_t state;
    uint8_t flags;
    uint16_t keylen;
};

struct sluice__table {
    struct sluice__mem *mem;
    /* index */
    uint64_t *slots;
    uint32_t slot_bits;
    uint32_t slot_shift;     /* 32 - slot_bits: a tag's home is tag >> slot_shift */
    size_t slot_mask;        /* 2^slot_bits - 1 */
    bool strong;             /* tags are SipHash-1-3 of the key under `strong_seed` (else the fast hash) */
    uint64_t seed[2];        /* the limiter's hash seed (the fast hash) */
    uint64_t strong_seed[2]; /* SipHash-1-3's key: random bits of its own */
    /* slab */
    unsigned char **chunks;
    uint32_t nchunks, chunks_cap;
    uint32_t top;       /* entries carved so far: indices [0, top) are LIVE or FREE */
    uint32_t free_head; /* free list through `key` */
    uint32_t stride;
    uint64_t live;
    uint64_t shrink_below; /* sluice__table_maybe_shrink has work when live < shrink_below */
    /* probe_hist[d]: keys sitting d slots past their home (the last bucket: d or more) */
    uint32_t probe_hist[SLUICE__PROBE_HIST];
    /* Called after compaction copied an entry to index `to`. */
    void (*moved)(void *ctx, uint32_t to);
    void *moved_ctx;
};

static inline struct sluice__entry *sluice__entry_at(const struct sluice__table *t, uint32_t idx) {
    return (struct sluice__entry *)(void *)(t->chunks[idx >> SLUICE__CHUNK_SHIFT] +
                                            (size_t)(idx & (SLUICE__CHUNK - 1)) * t->stride);
}

/* A distinct hash key for integer keys, so an integer and its 8 bytes do
 * not hash alike (they are never equal anyway: the comparison checks the
 * kind). */
#define SLUICE__U64_DOMAIN UINT64_C(0x9e3779b97f4a7c15)

/* Validates and hashes a key (fast hash) with a 128-bit seed. Returns 0,
 * SLUICE_EINVAL or SLUICE_EKEYLEN. (The loop layer calls it with the seed
 * its shards share.) */
static inline int sluice__key_prepare_seeded(const uint64_t seed[2], sluice_key_t key, struct sluice__keyref *out) {
    if (key.kind == SLUICE_KEY_U64) {
        out->is_u64 = true;
        out->u64 = key.u64;
        out->bytes = NULL;
        out->len = 0;
        out->hash = sluice__fast_hash_u64(seed, key.u64);
        return 0;
    }
    if (key.kind != SLUICE_KEY_BYTES) return SLUICE_EINVAL;
    if (key.len > SLUICE_KEY_MAX) return SLUICE_EKEYLEN;
    if (key.len > 0 && key.bytes == NULL) return SLUICE_EINVAL;
    out->is_u64 = false;
    out->u64 = 0;
    out->bytes = (const unsigned char *)key.bytes;
    out->len = key.len;
    out->hash = sluice__fast_hash_bytes(seed, key.bytes, key.len);
    return 0;
}

/* SipHash-1-3 of a prepared key under `seed` (integer keys under a key of
 * their own): the hash of a table that switched. */
static inline uint64_t sluice__key_strong_hash(const uint64_t seed[2], const struct sluice__keyref *k) {
    if (k->is_u64) {
        uint64_t s[2] = { seed[0] ^ SLUICE__U64_DOMAIN, seed[1] };
        return sluice__siphash13_u64(s, k->u64);
    }
    return sluice__siphash13(seed, k->bytes, k->len);
}

#if defined(__GNUC__) || defined(__clang__)
#define SLUICE__COLD __attribute__((cold, noinline))
#define SLUICE__HOT_INLINE inline __attribute__((always_inline))
#define SLUICE__UNLIKELY(x) __builtin_expect(!!(x), 0)
#define SLUICE__LIKELY(x) __builtin_expect(!!(x), 1)
#else
#define SLUICE__LIKELY(x) (x)
#define SLUICE__COLD
#define SLUICE__HOT_INLINE inline
#define SLUICE__UNLIKELY(x) (x)
#endif

/* sluice__key_strong_hash() with the table's seed, out of line (table.c):
 * the fast path stays small. */
SLUICE__COLD uint64_t sluice__table_strong_hash(const struct sluice__table *t, const struct sluice__keyref *k);

/* The hash the table places a key by: the fast hash the key was prepared
 * with, or SipHash once the table switched. */
static inline uint64_t sluice__table_hash(const struct sluice__table *t, const struct sluice__keyref *k) {
    if (SLUICE__UNLIKELY(t->strong)) return sluice__table_strong_hash(t, k);
    return k->hash;
}

/* The index tag of a key (the top 32 bits of sluice__table_hash()). */
static inline uint32_t sluice__table_tag(const struct sluice__table *t, const struct sluice__keyref *k) {
    return (uint32_t)(sluice__table_hash(t, k) >> 32);
}

static inline const unsigned char *sluice__entry_key_bytes(const struct sluice__entry *e) {
    if (e->flags & SLUICE__KEY_HEAP) return (const unsigned char *)(uintptr_t)e->key;
    return (const unsigned char *)&e->key;
}

static inline bool sluice__entry_matches(const struct sluice__entry *e, const struct sluice__keyref *k) {
    if (k->is_u64) return (e->flags & SLUICE__KEY_U64) && e->key == k->u64;
    if (e->flags & SLUICE__KEY_U64) return false;
    if (e->keylen != k->len) return false;
    return k->len == 0 || memcmp(sluice__entry_key_bytes(e), k->bytes, k->len) == 0;
}

/* Index slots: tag << 32 | (entry index + 1); 0 is empty. The home bucket is
 * the top bits of the tag. */
static inline uint32_t sluice__slot_tag(uint64_t s) { return (uint32_t)(s >> 32); }
static inline uint32_t sluice__slot_idx(uint64_t s) { return (uint32_t)s - 1; }
static inline size_t sluice__home(uint32_t tag, uint32_t bits) { return (size_t)(tag >> (32 - bits)); }

/* sluice__home() in this table's index. */
static inline size_t sluice__table_home(const struct sluice__table *t, uint32_t tag) {
    return (size_t)(tag >> t->slot_shift);
}

/* Sets the index size (slot_bits and what is derived from it). */
static inline void sluice__table_set_bits(struct sluice__table *t, uint32_t bits) {
    t->slot_bits = bits;
    t->slot_shift = 32 - bits;
    t->slot_mask = ((size_t)1 << bits) - 1;
}

/* A lookup missed after SLUICE__STRONG_PROBE or more slots (table.c). */
SLUICE__COLD void sluice__table_long_miss(const struct sluice__table *t);

/* Not an entry index, nor SLUICE__NONE: what sluice__table_find_u64_leaf()
 * returns for a long miss, which it leaves to a find that switches. */
#define SLUICE__FIND_AGAIN UINT32_C(0xFFFFFFFE)

/* The probe of the finds below: the index of the live entry whose slot
 * carries `tag` and that holds the byte key `k` (or, `k` NULL, the integer
 * key `key`), or SLUICE__NONE. A miss that scanned SLUICE__STRONG_PROBE
 * slots or more switches the table to SipHash (entries do not move; the
 * table is never a const object, only this view of it), or, `leaf` true,
 * returns SLUICE__FIND_AGAIN and changes nothing. Always inlined, with `k`
 * and `leaf` constants at each find, so their tests fold away; clang
 * otherwise makes it a call on every submit (callgrind, throttle-hot: 28
 * more instructions per submit). */
static SLUICE__HOT_INLINE uint32_t sluice__table_probe(const struct sluice__table *t, uint32_t tag,
                                                       const struct sluice__keyref *k, uint64_t key, bool leaf) {
    size_t mask = t->slot_mask;
    size_t home = sluice__table_home(t, tag), i = home;
    for (;;) {
        uint64_t s = t->slots[i];
        if (s == 0) {
            if (SLUICE__UNLIKELY(((i - home) & mask) >= SLUICE__STRONG_PROBE)) {
                if (leaf) return SLUICE__FIND_AGAIN;
                sluice__table_long_miss(t);
            }
            return SLUICE__NONE;
        }
        if (sluice__slot_tag(s) == tag) {
            uint32_t idx = sluice__slot_idx(s);
            const struct sluice__entry *e = sluice__entry_at(t, idx);
            if (k ? sluice__entry_matches(e, k) : e->key == key && (e->flags & SLUICE__KEY_U64)) return idx;
        }
        i = (i + 1) & mask;
    }
}

/* Index of the live entry for the key, or SLUICE__NONE. */
static SLUICE__HOT_INLINE uint32_t sluice__table_find(const struct sluice__table *t, const struct sluice__keyref *k) {
    return sluice__table_probe(t, sluice__table_tag(t, k), k, 0, false);
}

/* sluice__table_find() for an integer key with its fast hash, on a table
 * that has not switched to SipHash (!t->strong): the same answer, with the
 * same switch after a long miss. */
static SLUICE__HOT_INLINE uint32_t sluice__table_find_u64(const struct sluice__table *t, uint64_t key, uint64_t hash) {
    return sluice__table_probe(t, (uint32_t)(hash >> 32), NULL, key, false);
}

/* sluice__table_find_u64() that calls nothing, so that a caller's short
 * path can keep its values in the registers a call would clobber: a long
 * miss (the one case that switches the table) returns SLUICE__FIND_AGAIN,
 * for the caller to find the key again with sluice__table_find_u64() or
 * sluice__table_find(). */
static SLUICE__HOT_INLINE uint32_t sluice__table_find_u64_leaf(const struct sluice__table *t, uint64_t key,
                                                               uint64_t hash) {
    return sluice__table_probe(t, (uint32_t)(hash >> 32), NULL, key, true);
}

/* Asks for the index slot a live entry's key starts its probe at (a hint
 * for a caller about to remove that key). */
static inline void sluice__table_prefetch_home(const struct sluice__table *t, const struct sluice__entry *e) {
#if defined(__GNUC__) || defined(__clang__)
    __builtin_prefetch(&t->slots[sluice__home(e->tag, t->slot_bits)]);
#else
    (void)t;
    (void)e;
#endif
}

/* Copies an entry's key into a caller buffer of SLUICE_KEY_MAX bytes (byte
 * keys only) and returns it as a sluice_key_t. */
static inline sluice_key_t sluice__entry_key(const struct sluice__entry *e, unsigned char *buf) {
    if (e->flags & SLUICE__KEY_U64) return sluice_key_u64(e->key);
    if (e->keylen) memcpy(buf, sluice__entry_key_bytes(e), e->keylen);
    return sluice_key_bytes(buf, e->keylen);
}

/* Makes an empty table whose entries are `stride` bytes (at least
 * sizeof(struct sluice__entry)), for keys prepared with `seed`, with
 * `strong_seed` as its SipHash key should it switch (both copied). Returns
 * 0 or SLUICE_ENOMEM. */
int sluice__table_init(struct sluice__table *t, struct sluice__mem *mem, uint32_t stride, const uint64_t seed[2],
                       const uint64_t strong_seed[2]);

/* Releases everything the table holds. */
void sluice__table_destroy(struct sluice__table *t);

/* Creates a live entry for a key known to be absent: zeroed but for the key
 * and its table flags. Returns 0 and the index, or SLUICE_ENOMEM with
 * nothing changed. The chunk table may move: re-read t->chunks. May switch
 * the table to SipHash (t->strong; entry indices do not change). */
int sluice__table_insert(struct sluice__table *t, const struct sluice__keyref *k, uint32_t *idx_out);

/* Removes a live entry: unlinks it from the index, frees its key blob and
 * returns it to the free list. Whatever the limiter keeps in the entry must
 * be let go first. */
void sluice__table_remove(struct sluice__table *t, uint32_t idx);

/* Releases slab chunks and index space when most is unused (live <
 * shrink_below). Moves entries: only when no entry index is held. */
void sluice__table_maybe_shrink(struct sluice__table *t);

/* The longest probe sequence in the index right now (displacement + 1; 0
 * when empty). O(SLUICE__PROBE_HIST), or O(index size) while some key sits
 * SLUICE__PROBE_HIST - 1 or more slots past its home. */
uint64_t sluice__table_max_probe(const struct sluice__table *t);

/* Checks the table's invariants (index, slab, free list, counts, probe
 * histogram, every tag the key's hash under the table's current hash) with
 * the seed its keys are prepared with. Returns 0 or SLUICE_ECORRUPT after
 * writing the broken rule to stderr. */
int sluice__table_check(const struct sluice__table *t, const uint64_t seed[2]);

/* Switches the table to SipHash now (what a long probe does; tests). */
void sluice__table_use_strong_hash(struct sluice__table *t);

#if defined(__GNUC__) || defined(__clang__)
#pragma GCC visibility pop
#endif

#endif /* SLUICE_TABLE_INTERNAL_H */
