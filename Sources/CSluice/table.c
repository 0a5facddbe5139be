/* table.c — the keyed table: entry slab + seeded open-addressing index,
 * fast hash with a SipHash fallback. See table-internal.h for the design.
 * Nothing here knows about timers or policies. */
#include "table-internal.h"

#include <stdio.h>
#include <string.h>

/* Index capacity: grow past 3/4 full; shrink below 1/16 full, to the
 * smallest size at most 1/4 full (SHRINK_TO). The gap is the hysteresis: a
 * table draining step by step (many small advances, each call ending with
 * a shrink check) rehashes each time its live keys fall 4 to 8 times, not
 * at every halving, so the index slots scanned over a whole drain stay
 * under 4/3 of the largest index (2x with shrink-at-1/8-to-1/4); and a
 * shrunk index can take 3x its keys before it grows again. */
#define LOAD_NUM 3
#define LOAD_DEN 4
#define SHRINK_BELOW 16 /* shrink when live * SHRINK_BELOW < slots */
#define SHRINK_TO 4     /* ... to the fewest slots with live * SHRINK_TO <= slots */
/* The slab compacts when fewer than 1/COMPACT_BELOW of its carved entries
 * are live. A draining table keeps its youngest keys, at the top of the
 * slab, so each compaction moves every live entry: over a whole drain
 * that is 1/(COMPACT_BELOW - 1) of the keys (a third with a quarter). */
#define COMPACT_BELOW 8

static inline uint64_t make_slot(uint32_t tag, uint32_t idx) { return (uint64_t)tag << 32 | ((uint64_t)idx + 1); }
static inline size_t nslots(const struct sluice__table *t) { return (size_t)1 << t->slot_bits; }
static inline unsigned hist_bucket(size_t d) {
    return d < SLUICE__PROBE_HIST - 1 ? (unsigned)d : SLUICE__PROBE_HIST - 1;
}

/* ------------------------------------------------------------------ index */

/* Recomputes the point below which sluice__table_maybe_shrink has work: the
 * index under 1/SHRINK_BELOW full, or fewer than 1/COMPACT_BELOW of the
 * carved entries live. */
static void update_shrink_mark(struct sluice__table *t) {
    uint64_t a =
        t->slot_bits > SLUICE__INDEX_MIN_BITS ? (((uint64_t)1 << t->slot_bits) + SHRINK_BELOW - 1) / SHRINK_BELOW : 0;
    uint64_t b = t->top >= 3 * SLUICE__CHUNK ? t->top / COMPACT_BELOW : 0;
    t->shrink_below = a > b ? a : b;
}

/* Puts slot value `s` at the first empty slot from its home; returns how far
 * past its home it landed. */
static size_t index_place(uint64_t *slots, uint32_t bits, uint64_t s) {
    size_t mask = ((size_t)1 << bits) - 1;
    size_t home = sluice__home(sluice__slot_tag(s), bits), i = home;
    while (slots[i] != 0) i = (i + 1) & mask;
    slots[i] = s;
    return (i - home) & mask;
}

/* Rebuilds the index with 2^bits slots. Returns 0 or SLUICE_ENOMEM (the old
 * index is kept). Only the slots are read: entries are not touched. A key
 * placed SLUICE__STRONG_PROBE or more past its home switches the table to
 * SipHash afterwards. */
static int index_resize(struct sluice__table *t, uint32_t bits) {
    size_t n = (size_t)1 << bits;
    uint64_t *fresh = sluice__mem_alloc(t->mem, n * sizeof *fresh);
    if (!fresh) return SLUICE_ENOMEM;
    memset(fresh, 0, n * sizeof *fresh);
    memset(t->probe_hist, 0, sizeof t->probe_hist);
    size_t old_n = nslots(t), worst = 0;
    /* The old slots in a local: the stores into the new index (uint64_t)
     * could otherwise alias the pointer, reloaded at every slot. */
    const uint64_t *old = t->slots;
    uint32_t *hist = t->probe_hist;
    const uint64_t live = t->live;
    if (live == 0) {
        /* an empty table (the end of a drain): no slot to move */
    } else if (live * 4 < old_n) {
        /* Shrinking (under 1/16 full): most groups of four slots are
         * empty, skipped at one test (old_n is a power of two >= 16). */
        for (size_t g = 0; g < old_n; g += 4) {
            if ((old[g] | old[g + 1] | old[g + 2] | old[g + 3]) == 0) continue;
            for (size_t i = g; i < g + 4; i++) {
                uint64_t s = old[i];
                if (!s) continue;
                size_t d = index_place(fresh, bits, s);
                hist[hist_bucket(d)]++;
                if (d > worst) worst = d;
            }
        }
    } else {
        for (size_t i = 0; i < old_n; i++) {
            uint64_t s = old[i];
            if (!s) continue;
            size_t d = index_place(fresh, bits, s);
            hist[hist_bucket(d)]++;
            if (d > worst) worst = d;
        }
    }
    sluice__mem_release(t->mem, t->slots, old_n * sizeof *t->slots);
    t->slots = fresh;
    sluice__table_set_bits(t, bits);
    update_shrink_mark(t);
    if (worst >= SLUICE__STRONG_PROBE && !t->strong) sluice__table_use_strong_hash(t);
    return 0;
}

uint64_t sluice__table_strong_hash(const struct sluice__table *t, const struct sluice__keyref *k) {
    return sluice__key_strong_hash(t->strong_seed, k);
}

void sluice__table_long_miss(const struct sluice__table *ct) {
    /* Lookups take a const pointer because they do not change what the
     * table holds; the table object itself is never const. */
    struct sluice__table *t = (struct sluice__table *)(uintptr_t)ct;
    if (!t->strong) sluice__table_use_strong_hash(t);
}

/* Switches to SipHash-1-3 for good: every live entry's tag becomes the top
 * of its key's SipHash under the table's SipHash key and the index is rebuilt in place
 * from the slab, at the same size. O(index + entries), once per table; no
 * allocation, so it cannot fail. Entries do not move. */
void sluice__table_use_strong_hash(struct sluice__table *t) {
    t->strong = true;
    memset(t->slots, 0, nslots(t) * sizeof *t->slots);
    memset(t->probe_hist, 0, sizeof t->probe_hist);
    for (uint32_t idx = 0; idx < t->top; idx++) {
        struct sluice__entry *e = sluice__entry_at(t, idx);
        if (e->state != SLUICE__LIVE) continue;
        struct sluice__keyref k;
        k.is_u64 = (e->flags & SLUICE__KEY_U64) != 0;
        k.u64 = k.is_u64 ? e->key : 0;
        k.bytes = k.is_u64 ? NULL : sluice__entry_key_bytes(e);
        k.len = k.is_u64 ? 0 : e->keylen;
        e->tag = (uint32_t)(sluice__key_strong_hash(t->strong_seed, &k) >> 32);
        t->probe_hist[hist_bucket(index_place(t->slots, t->slot_bits, make_slot(e->tag, idx)))]++;
    }
}

/* Removes the slot of entry `idx` (tag `tag`), which must be in the index,
 * and shifts the following run back so that every key stays reachable from
 * its home without tombstones. */
static void index_delete(struct sluice__table *t, uint32_t tag, uint32_t idx) {
    uint64_t *slots = t->slots;
    const uint32_t shift = t->slot_shift;
    const size_t mask = nslots(t) - 1;
    const size_t home0 = (size_t)(tag >> shift);
    const uint64_t want = make_slot(tag, idx);
    size_t hole = home0;
    while (slots[hole] != want) hole = (hole + 1) & mask;
    t->probe_hist[hist_bucket((hole - home0) & mask)]--;
    size_t j = hole;
    for (;;) {
        j = (j + 1) & mask;
        uint64_t s = slots[j];
        if (s == 0) break;
        size_t home = (size_t)(sluice__slot_tag(s) >> shift);
        /* The entry at j may fill the hole when the hole lies cyclically in
         * [home, j): moving it back keeps it reachable from its home. */
        size_t dj = (j - home) & mask;
        if (dj >= ((j - hole) & mask)) {
            t->probe_hist[hist_bucket(dj)]--;
            t->probe_hist[hist_bucket((hole - home) & mask)]++;
            slots[hole] = s;
            hole = j;
        }
    }
    slots[hole] = 0;
}

static size_t index_position(const struct sluice__table *t, uint32_t tag, uint32_t idx) {
    size_t mask = nslots(t) - 1;
    size_t i = sluice__home(tag, t->slot_bits);
    uint64_t want = make_slot(tag, idx);
    while (t->slots[i] != want) i = (i + 1) & mask;
    return i;
}

static uint64_t scan_max_probe(const struct sluice__table *t) {
    size_t n = nslots(t), mask = n - 1;
    uint64_t worst = 0;
    for (size_t i = 0; i < n; i++) {
        uint64_t s = t->slots[i];
        if (!s) continue;
        uint64_t d = (uint64_t)((i - sluice__home(sluice__slot_tag(s), t->slot_bits)) & mask) + 1;
        if (d > worst) worst = d;
    }
    return worst;
}

uint64_t sluice__table_max_probe(const struct sluice__table *t) {
    if (t->probe_hist[SLUICE__PROBE_HIST - 1]) return scan_max_probe(t);
    for (unsigned b = SLUICE__PROBE_HIST - 1; b-- > 0;)
        if (t->probe_hist[b]) return (uint64_t)b + 1;
    return 0;
}

/* ------------------------------------------------------------------ slab */

/* A chunk starts on a cache line, so that an entry of 64 bytes (a rate
 * limiter's of three quotas, plans-internal.h) is one line, not two. The
 * allocator promises no alignment: the block is SLUICE__CHUNK_PAD bytes
 * longer, and the pointer it gave is kept in the 8 bytes before the line. */
#define SLUICE__CHUNK_ALIGN 64u
#define SLUICE__CHUNK_PAD (SLUICE__CHUNK_ALIGN + 8u)

static size_t chunk_bytes(const struct sluice__table *t) {
    return (size_t)SLUICE__CHUNK * t->stride + SLUICE__CHUNK_PAD;
}

static unsigned char *chunk_alloc(struct sluice__table *t) {
    unsigned char *raw = sluice__mem_alloc(t->mem, chunk_bytes(t));
    if (!raw) return NULL;
    uintptr_t at = ((uintptr_t)raw + 8u + SLUICE__CHUNK_ALIGN - 1u) & ~(uintptr_t)(SLUICE__CHUNK_ALIGN - 1u);
    unsigned char *c = raw + (at - (uintptr_t)raw);
    memcpy(c - 8, &raw, sizeof raw);
    return c;
}

static void chunk_release(struct sluice__table *t, unsigned char *c) {
    unsigned char *raw;
    memcpy(&raw, c - 8, sizeof raw);
    sluice__mem_release(t->mem, raw, chunk_bytes(t));
}

static int slab_add_chunk(struct sluice__table *t) {
    if (t->nchunks == t->chunks_cap) {
        uint32_t cap = t->chunks_cap ? t->chunks_cap * 2 : 8;
        if ((uint64_t)cap * SLUICE__CHUNK > (uint64_t)SLUICE__ENTRY_MAX) return SLUICE_ENOMEM;
        unsigned char **grown = sluice__mem_alloc(t->mem, cap * sizeof *grown);
        if (!grown) return SLUICE_ENOMEM;
        if (t->nchunks) memcpy(grown, t->chunks, t->nchunks * sizeof *grown);
        sluice__mem_release(t->mem, t->chunks, t->chunks_cap * sizeof *t->chunks);
        t->chunks = grown;
        t->chunks_cap = cap;
    }
    unsigned char *c = chunk_alloc(t);
    if (!c) return SLUICE_ENOMEM;
    t->chunks[t->nchunks++] = c;
    return 0;
}

int sluice__table_init(struct sluice__table *t, struct sluice__mem *mem, uint32_t stride, const uint64_t seed[2],
                       const uint64_t strong_seed[2]) {
    memset(t, 0, sizeof *t);
    t->mem = mem;
    t->stride = stride;
    t->seed[0] = seed[0];
    t->seed[1] = seed[1];
    t->strong_seed[0] = strong_seed[0];
    t->strong_seed[1] = strong_seed[1];
    sluice__table_set_bits(t, SLUICE__INDEX_MIN_BITS);
    t->slots = sluice__mem_alloc(mem, nslots(t) * sizeof *t->slots);
    if (!t->slots) return SLUICE_ENOMEM;
    memset(t->slots, 0, nslots(t) * sizeof *t->slots);
    t->free_head = SLUICE__NONE;
    update_shrink_mark(t);
    return 0;
}

static void free_key_blob(struct sluice__table *t, struct sluice__entry *e) {
    if (e->flags & SLUICE__KEY_HEAP) {
        sluice__mem_release(t->mem, (void *)(uintptr_t)e->key, e->keylen);
        e->flags &= (uint8_t)~SLUICE__KEY_HEAP;
    }
}

void sluice__table_destroy(struct sluice__table *t) {
    for (uint32_t i = 0; i < t->top; i++) {
        struct sluice__entry *e = sluice__entry_at(t, i);
        if (e->state == SLUICE__LIVE) free_key_blob(t, e);
    }
    for (uint32_t c = 0; c < t->nchunks; c++) chunk_release(t, t->chunks[c]);
    sluice__mem_release(t->mem, t->chunks, t->chunks_cap * sizeof *t->chunks);
    sluice__mem_release(t->mem, t->slots, nslots(t) * sizeof *t->slots);
    t->chunks = NULL;
    t->slots = NULL;
    t->nchunks = t->chunks_cap = t->top = 0;
    t->live = 0;
}

int sluice__table_insert(struct sluice__table *t, const struct sluice__keyref *k, uint32_t *idx_out) {
    /* 1. index room */
    if ((t->live + 1) * LOAD_DEN > (uint64_t)nslots(t) * LOAD_NUM) {
        if (t->slot_bits >= 32) return SLUICE_ENOMEM;
        int rc = index_resize(t, t->slot_bits + 1);
        if (rc) return rc;
    }
    /* 2. key storage */
    void *blob = NULL;
    if (!k->is_u64 && k->len > SLUICE__INLINE_KEY) {
        blob = sluice__mem_alloc(t->mem, k->len);
        if (!blob) return SLUICE_ENOMEM;
        memcpy(blob, k->bytes, k->len);
    }
    /* 3. an entry */
    uint32_t idx;
    if (t->free_head != SLUICE__NONE) {
        idx = t->free_head;
        t->free_head = (uint32_t)sluice__entry_at(t, idx)->key;
    } else {
        if (t->top == (uint64_t)t->nchunks * SLUICE__CHUNK) {
            int rc = slab_add_chunk(t);
            if (rc) {
                if (blob) sluice__mem_release(t->mem, blob, k->len);
                return rc;
            }
        }
        idx = t->top++;
        update_shrink_mark(t);
    }
    struct sluice__entry *e = sluice__entry_at(t, idx);
    memset(e, 0, t->stride);
    e->state = SLUICE__LIVE;
    e->tag = sluice__table_tag(t, k);
    if (k->is_u64) {
        e->flags = SLUICE__KEY_U64;
        e->key = k->u64;
    } else {
        e->keylen = (uint16_t)k->len;
        if (blob) {
            e->flags = SLUICE__KEY_HEAP;
            e->key = (uint64_t)(uintptr_t)blob;
        } else if (k->len) {
            memcpy(&e->key, k->bytes, k->len);
        }
    }
    size_t d = index_place(t->slots, t->slot_bits, make_slot(e->tag, idx));
    t->probe_hist[hist_bucket(d)]++;
    t->live++;
    *idx_out = idx;
    /* A probe this long does not happen by chance: the fast hash is being
     * attacked (or has failed). */
    if (d >= SLUICE__STRONG_PROBE && !t->strong) sluice__table_use_strong_hash(t);
    return 0;
}

void sluice__table_remove(struct sluice__table *t, uint32_t idx) {
    struct sluice__entry *e = sluice__entry_at(t, idx);
    index_delete(t, e->tag, idx);
    free_key_blob(t, e);
    e->state = SLUICE__FREE;
    e->flags = 0;
    e->key = t->free_head;
    t->free_head = idx;
    t->live--;
}

/* Moves every live entry below `live` so that [0, live) is dense, then
 * releases the chunks above. O(top). Entry indices change: only call when no
 * index is held. */
static void slab_compact(struct sluice__table *t) {
    uint32_t n = (uint32_t)t->live;
    uint32_t hi = t->top;
    for (uint32_t lo = 0; lo < n; lo++) {
        struct sluice__entry *dst = sluice__entry_at(t, lo);
        if (dst->state == SLUICE__LIVE) continue;
        struct sluice__entry *src;
        do {
            hi--;
            src = sluice__entry_at(t, hi);
        } while (src->state != SLUICE__LIVE);
        size_t pos = index_position(t, src->tag, hi);
        memcpy(dst, src, t->stride);
        if (t->moved) t->moved(t->moved_ctx, lo);
        t->slots[pos] = make_slot(dst->tag, lo);
        src->state = SLUICE__FREE;
    }
    t->top = n;
    t->free_head = SLUICE__NONE;
    update_shrink_mark(t);
    uint32_t keep = (n + SLUICE__CHUNK - 1) >> SLUICE__CHUNK_SHIFT;
    while (t->nchunks > keep) {
        t->nchunks--;
        chunk_release(t, t->chunks[t->nchunks]);
        t->chunks[t->nchunks] = NULL;
    }
}

void sluice__table_maybe_shrink(struct sluice__table *t) {
    /* Compact when fewer than 1/COMPACT_BELOW of the carved entries are
     * live and at least two chunks would be released: amortised O(1) per
     * removal. */
    if (t->top >= 3 * SLUICE__CHUNK && t->live < t->top / COMPACT_BELOW) slab_compact(t);
    /* Under 1/SHRINK_BELOW full: down to the fewest slots at most
     * 1/SHRINK_TO full (see SHRINK_BELOW). */
    uint32_t bits = t->slot_bits;
    if (bits > SLUICE__INDEX_MIN_BITS && t->live * SHRINK_BELOW < ((uint64_t)1 << bits)) {
        while (bits > SLUICE__INDEX_MIN_BITS && t->live * SHRINK_TO <= ((uint64_t)1 << (bits - 1))) bits--;
        if (bits != t->slot_bits) (void)index_resize(t, bits); /* on failure keep the larger index */
    }
}

/* ------------------------------------------------------------------ check */

int sluice__table_check(const struct sluice__table *t, const uint64_t seed[2]) {
    size_t n = nslots(t), mask = n - 1;
    if (t->seed[0] != seed[0] || t->seed[1] != seed[1])
        SLUICE__CHECK_FAIL("the table's hash seed is not the limiter's");
    uint64_t used = 0;
    uint32_t hist[SLUICE__PROBE_HIST] = { 0 };
    for (size_t i = 0; i < n; i++) {
        uint64_t s = t->slots[i];
        if (!s) continue;
        used++;
        uint32_t idx = sluice__slot_idx(s);
        if (idx >= t->top) SLUICE__CHECK_FAIL("index slot %zu points past the slab (%u >= %u)", i, idx, t->top);
        const struct sluice__entry *e = sluice__entry_at(t, idx);
        if (e->state != SLUICE__LIVE) SLUICE__CHECK_FAIL("index slot %zu points at a free entry %u", i, idx);
        if (e->tag != sluice__slot_tag(s)) SLUICE__CHECK_FAIL("index slot %zu tag differs from entry %u", i, idx);
        /* no empty slot between home and i */
        size_t home = sluice__home(sluice__slot_tag(s), t->slot_bits);
        for (size_t j = home; j != i; j = (j + 1) & mask)
            if (t->slots[j] == 0) SLUICE__CHECK_FAIL("index slot %zu unreachable from its home", i);
        hist[hist_bucket((i - home) & mask)]++;
        /* the key finds this entry, and its hash matches the tag */
        struct sluice__keyref k;
        unsigned char buf[SLUICE_KEY_MAX];
        sluice_key_t key = sluice__entry_key(e, buf);
        if (sluice__key_prepare_seeded(seed, key, &k) != 0) SLUICE__CHECK_FAIL("entry %u holds an invalid key", idx);
        if (sluice__table_tag(t, &k) != e->tag)
            SLUICE__CHECK_FAIL("entry %u tag is not its key's %s hash", idx, t->strong ? "SipHash" : "fast");
        if (sluice__table_find(t, &k) != idx) SLUICE__CHECK_FAIL("entry %u not found by its own key", idx);
    }
    if (used != t->live)
        SLUICE__CHECK_FAIL("index holds %llu keys, live count is %llu", (unsigned long long)used,
                           (unsigned long long)t->live);
    if (t->live * LOAD_DEN > (uint64_t)n * LOAD_NUM) SLUICE__CHECK_FAIL("index over its load limit");
    if (memcmp(hist, t->probe_hist, sizeof hist) != 0)
        SLUICE__CHECK_FAIL("probe-length histogram differs from the index");
    if (sluice__table_max_probe(t) != scan_max_probe(t)) SLUICE__CHECK_FAIL("longest probe differs from the index");
    uint64_t live = 0, freec = 0;
    for (uint32_t i = 0; i < t->top; i++) {
        const struct sluice__entry *e = sluice__entry_at(t, i);
        if (e->state == SLUICE__LIVE)
            live++;
        else if (e->state == SLUICE__FREE)
            freec++;
        else
            SLUICE__CHECK_FAIL("entry %u has unknown state %u", i, e->state);
    }
    if (live != t->live)
        SLUICE__CHECK_FAIL("slab has %llu live entries, count is %llu", (unsigned long long)live,
                           (unsigned long long)t->live);
    uint64_t walked = 0;
    for (uint32_t f = t->free_head; f != SLUICE__NONE; f = (uint32_t)sluice__entry_at(t, f)->key) {
        if (f >= t->top) SLUICE__CHECK_FAIL("free list leaves the slab");
        if (sluice__entry_at(t, f)->state != SLUICE__FREE) SLUICE__CHECK_FAIL("free list holds a live entry %u", f);
        if (++walked > freec) SLUICE__CHECK_FAIL("free list loops");
    }
    if (walked != freec)
        SLUICE__CHECK_FAIL("free list holds %llu of %llu free entries", (unsigned long long)walked,
                           (unsigned long long)freec);
    return 0;
}
