/* table.c — exact keyed table: entry slab + seeded open-addressing index.
 * See limiter-internal.h for the design. */
#include "limiter-internal.h"
#include "siphash-internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Index capacity: grow past 3/4 full, shrink below 1/8. */
#define SL_LOAD_NUM 3
#define SL_LOAD_DEN 4

void *sl_alloc(struct sluice_limiter *l, size_t size) {
    void *p = l->alloc.alloc ? l->alloc.alloc(l->alloc.ctx, size) : malloc(size);
    if (p) l->mem_bytes += size;
    return p;
}

void sl_release(struct sluice_limiter *l, void *p, size_t size) {
    if (!p) return;
    l->mem_bytes -= size;
    if (l->alloc.release)
        l->alloc.release(l->alloc.ctx, p, size);
    else
        free(p);
}

/* ------------------------------------------------------------------ keys */

/* ------------------------------------------------------------------ index */

#define slot_tag sl_slot_tag
#define slot_idx sl_slot_idx
#define home_of sl_home
static inline uint64_t make_slot(uint32_t tag, uint32_t idx) { return (uint64_t)tag << 32 | ((uint64_t)idx + 1); }
static inline size_t nslots(const struct sluice_limiter *l) { return (size_t)1 << l->slot_bits; }

/* Recomputes the point below which sl_table_maybe_shrink has work: the index
 * under 1/8 full, or fewer than a quarter of the carved entries live. */
static void update_shrink_mark(struct sluice_limiter *l) {
    uint64_t a = l->slot_bits > SL_INDEX_MIN_BITS ? (((uint64_t)1 << l->slot_bits) + 7) / 8 : 0;
    uint64_t b = l->top >= 3 * SL_CHUNK ? l->top / 4 : 0;
    l->shrink_below = a > b ? a : b;
}

static void index_place(uint64_t *slots, uint32_t bits, uint64_t s) {
    size_t mask = ((size_t)1 << bits) - 1;
    size_t i = home_of(slot_tag(s), bits);
    while (slots[i] != 0) i = (i + 1) & mask;
    slots[i] = s;
}

/* Rebuilds the index with 2^bits slots. Returns 0 or SLUICE_ENOMEM (the old
 * index is kept). Only the slots are read: entries are not touched. */
static int index_resize(struct sluice_limiter *l, uint32_t bits) {
    size_t n = (size_t)1 << bits;
    uint64_t *fresh = sl_alloc(l, n * sizeof *fresh);
    if (!fresh) return SLUICE_ENOMEM;
    memset(fresh, 0, n * sizeof *fresh);
    size_t old_n = nslots(l);
    for (size_t i = 0; i < old_n; i++)
        if (l->slots[i]) index_place(fresh, bits, l->slots[i]);
    sl_release(l, l->slots, old_n * sizeof *l->slots);
    l->slots = fresh;
    l->slot_bits = bits;
    update_shrink_mark(l);
    return 0;
}

static size_t index_position(const struct sluice_limiter *l, uint32_t tag, uint32_t idx) {
    size_t mask = nslots(l) - 1;
    size_t i = home_of(tag, l->slot_bits);
    uint64_t want = make_slot(tag, idx);
    while (l->slots[i] != want) i = (i + 1) & mask;
    return i;
}

/* Deletes slot `i` and shifts the following run back so that every key
 * stays reachable from its home without tombstones. */
static void index_delete_at(struct sluice_limiter *l, size_t hole) {
    size_t mask = nslots(l) - 1;
    size_t j = hole;
    for (;;) {
        j = (j + 1) & mask;
        uint64_t s = l->slots[j];
        if (s == 0) break;
        size_t home = home_of(slot_tag(s), l->slot_bits);
        /* The entry at j may fill the hole when the hole lies cyclically in
         * [home, j): moving it back keeps it reachable from its home. */
        if (((j - home) & mask) >= ((j - hole) & mask)) {
            l->slots[hole] = s;
            hole = j;
        }
    }
    l->slots[hole] = 0;
}

uint64_t sl_table_max_probe(const struct sluice_limiter *l) {
    size_t n = nslots(l), mask = n - 1;
    uint64_t worst = 0;
    for (size_t i = 0; i < n; i++) {
        uint64_t s = l->slots[i];
        if (!s) continue;
        uint64_t d = (uint64_t)((i - home_of(slot_tag(s), l->slot_bits)) & mask) + 1;
        if (d > worst) worst = d;
    }
    return worst;
}

/* ------------------------------------------------------------------ slab */

static int slab_add_chunk(struct sluice_limiter *l) {
    if (l->nchunks == l->chunks_cap) {
        uint32_t cap = l->chunks_cap ? l->chunks_cap * 2 : 8;
        if ((uint64_t)cap * SL_CHUNK > (uint64_t)SW_INDEX_MAX) return SLUICE_ENOMEM;
        unsigned char **grown = sl_alloc(l, cap * sizeof *grown);
        if (!grown) return SLUICE_ENOMEM;
        if (l->nchunks) memcpy(grown, l->chunks, l->nchunks * sizeof *grown);
        sl_release(l, l->chunks, l->chunks_cap * sizeof *l->chunks);
        l->chunks = grown;
        l->chunks_cap = cap;
        l->arena.chunks = grown;
    }
    unsigned char *c = sl_alloc(l, (size_t)SL_CHUNK * l->stride);
    if (!c) return SLUICE_ENOMEM;
    l->chunks[l->nchunks++] = c;
    return 0;
}

int sl_table_init(struct sluice_limiter *l) {
    l->slot_bits = SL_INDEX_MIN_BITS;
    l->slots = sl_alloc(l, nslots(l) * sizeof *l->slots);
    if (!l->slots) return SLUICE_ENOMEM;
    memset(l->slots, 0, nslots(l) * sizeof *l->slots);
    l->chunks = NULL;
    l->nchunks = l->chunks_cap = 0;
    l->top = 0;
    l->free_head = SW_NONE;
    l->arena.chunks = NULL;
    l->arena.chunk_shift = SL_CHUNK_SHIFT;
    l->arena.stride = l->stride;
    l->arena.node_off = 0;
    update_shrink_mark(l);
    return 0;
}

static void free_key_blob(struct sluice_limiter *l, struct sl_entry *e) {
    if (e->flags & SL_F_KEY_HEAP) {
        sl_release(l, (void *)(uintptr_t)e->key, e->keylen);
        e->flags &= (uint8_t)~SL_F_KEY_HEAP;
    }
}

void sl_table_destroy(struct sluice_limiter *l) {
    for (uint32_t i = 0; i < l->top; i++) {
        struct sl_entry *e = sl_entry_at(l, i);
        if (e->state == SL_LIVE) free_key_blob(l, e);
    }
    for (uint32_t c = 0; c < l->nchunks; c++) sl_release(l, l->chunks[c], (size_t)SL_CHUNK * l->stride);
    sl_release(l, l->chunks, l->chunks_cap * sizeof *l->chunks);
    sl_release(l, l->slots, nslots(l) * sizeof *l->slots);
    l->chunks = NULL;
    l->slots = NULL;
    l->nchunks = l->chunks_cap = l->top = 0;
}

int sl_table_insert(struct sluice_limiter *l, const struct sl_keyref *k, uint32_t *idx_out) {
    /* 1. index room */
    if ((l->live + 1) * SL_LOAD_DEN > (uint64_t)nslots(l) * SL_LOAD_NUM) {
        if (l->slot_bits >= 32) return SLUICE_ENOMEM;
        int rc = index_resize(l, l->slot_bits + 1);
        if (rc) return rc;
    }
    /* 2. key storage */
    void *blob = NULL;
    if (!k->is_u64 && k->len > SL_INLINE_KEY) {
        blob = sl_alloc(l, k->len);
        if (!blob) return SLUICE_ENOMEM;
        memcpy(blob, k->bytes, k->len);
    }
    /* 3. an entry */
    uint32_t idx;
    if (l->free_head != SW_NONE) {
        idx = l->free_head;
        l->free_head = sl_entry_at(l, idx)->node.link.next;
    } else {
        if (l->top == (uint64_t)l->nchunks * SL_CHUNK) {
            int rc = slab_add_chunk(l);
            if (rc) {
                if (blob) sl_release(l, blob, k->len);
                return rc;
            }
        }
        idx = l->top++;
        update_shrink_mark(l);
    }
    struct sl_entry *e = sl_entry_at(l, idx);
    memset(e, 0, l->stride);
    sw_node_init(&e->node);
    e->state = SL_LIVE;
    e->tag = (uint32_t)(k->hash >> 32);
    if (k->is_u64) {
        e->flags = SL_F_KEY_U64;
        e->key = k->u64;
    } else {
        e->keylen = (uint16_t)k->len;
        if (blob) {
            e->flags = SL_F_KEY_HEAP;
            e->key = (uint64_t)(uintptr_t)blob;
        } else if (k->len) {
            memcpy(&e->key, k->bytes, k->len);
        }
    }
    index_place(l->slots, l->slot_bits, make_slot(e->tag, idx));
    l->live++;
    *idx_out = idx;
    return 0;
}

void sl_table_remove(struct sluice_limiter *l, uint32_t idx) {
    struct sl_entry *e = sl_entry_at(l, idx);
    sw_del(&l->wheel, idx);
    index_delete_at(l, index_position(l, e->tag, idx));
    if (e->flags & SL_F_PENDING) l->pending--;
    free_key_blob(l, e);
    e->state = SL_FREE;
    e->flags = 0;
    e->node.link.prev = SW_NONE;
    e->node.link.next = l->free_head;
    l->free_head = idx;
    l->live--;
}

/* Moves every live entry below `live` so that [0, live) is dense, then
 * releases the chunks above. O(top). Entry indices change: only call when no
 * index is held (depth 0). */
static void slab_compact(struct sluice_limiter *l) {
    uint32_t n = (uint32_t)l->live;
    uint32_t hi = l->top;
    for (uint32_t lo = 0; lo < n; lo++) {
        struct sl_entry *dst = sl_entry_at(l, lo);
        if (dst->state == SL_LIVE) continue;
        struct sl_entry *src;
        do {
            hi--;
            src = sl_entry_at(l, hi);
        } while (src->state != SL_LIVE);
        size_t pos = index_position(l, src->tag, hi);
        memcpy(dst, src, l->stride);
        sw_relocate(&l->wheel, hi, lo);
        l->slots[pos] = make_slot(dst->tag, lo);
        src->state = SL_FREE;
    }
    l->top = n;
    l->free_head = SW_NONE;
    update_shrink_mark(l);
    uint32_t keep = (n + SL_CHUNK - 1) >> SL_CHUNK_SHIFT;
    while (l->nchunks > keep) {
        l->nchunks--;
        sl_release(l, l->chunks[l->nchunks], (size_t)SL_CHUNK * l->stride);
        l->chunks[l->nchunks] = NULL;
    }
}

void sl_table_maybe_shrink(struct sluice_limiter *l) {
    /* Compact when fewer than a quarter of the carved entries are live and
     * at least two chunks would be released: amortised O(1) per removal. */
    if (l->top >= 3 * SL_CHUNK && l->live < l->top / 4) slab_compact(l);
    /* Halve the index (possibly several times) when it is under 1/8 full. */
    uint32_t bits = l->slot_bits;
    while (bits > SL_INDEX_MIN_BITS && l->live * 8 < ((uint64_t)1 << bits)) bits--;
    if (bits != l->slot_bits) (void)index_resize(l, bits); /* on failure keep the larger index */
}

/* ------------------------------------------------------------------ check */

#define FAIL(...)                                                                              \
    do {                                                                                       \
        fprintf(stderr, "sluice_limiter_check: " __VA_ARGS__);                                 \
        fputc('\n', stderr);                                                                   \
        return SLUICE_ECORRUPT;                                                                \
    } while (0)

int sl_table_check(const struct sluice_limiter *l) {
    size_t n = nslots(l), mask = n - 1;
    uint64_t used = 0;
    for (size_t i = 0; i < n; i++) {
        uint64_t s = l->slots[i];
        if (!s) continue;
        used++;
        uint32_t idx = slot_idx(s);
        if (idx >= l->top) FAIL("index slot %zu points past the slab (%u >= %u)", i, idx, l->top);
        const struct sl_entry *e = sl_entry_at(l, idx);
        if (e->state != SL_LIVE) FAIL("index slot %zu points at a free entry %u", i, idx);
        if (e->tag != slot_tag(s)) FAIL("index slot %zu tag differs from entry %u", i, idx);
        /* no empty slot between home and i */
        for (size_t j = home_of(slot_tag(s), l->slot_bits); j != i; j = (j + 1) & mask)
            if (l->slots[j] == 0) FAIL("index slot %zu unreachable from its home", i);
        /* the key finds this entry, and its hash matches the tag */
        struct sl_keyref k;
        unsigned char buf[SLUICE_KEY_MAX];
        sluice_key_t key = sl_entry_key(e, buf);
        if (sl_key_prepare(l, key, &k) != 0) FAIL("entry %u holds an invalid key", idx);
        if ((uint32_t)(k.hash >> 32) != e->tag) FAIL("entry %u tag is not its key's hash", idx);
        if (sl_table_find(l, &k) != idx) FAIL("entry %u not found by its own key", idx);
    }
    if (used != l->live) FAIL("index holds %llu keys, live count is %llu", (unsigned long long)used,
                              (unsigned long long)l->live);
    if (l->live * SL_LOAD_DEN > (uint64_t)n * SL_LOAD_NUM) FAIL("index over its load limit");
    uint64_t live = 0, pend = 0, freec = 0;
    for (uint32_t i = 0; i < l->top; i++) {
        const struct sl_entry *e = sl_entry_at(l, i);
        if (e->state == SL_LIVE) {
            live++;
            if (e->flags & SL_F_PENDING) pend++;
            if (!sw_node_armed(&e->node)) FAIL("live entry %u has no armed timer", i);
        } else if (e->state == SL_FREE) {
            freec++;
            if (sw_node_armed(&e->node)) FAIL("free entry %u has an armed timer", i);
        } else {
            FAIL("entry %u has unknown state %u", i, e->state);
        }
    }
    if (live != l->live) FAIL("slab has %llu live entries, count is %llu", (unsigned long long)live,
                              (unsigned long long)l->live);
    if (pend != l->pending) FAIL("pending count mismatch");
    uint64_t walked = 0;
    for (uint32_t f = l->free_head; f != SW_NONE; f = sl_entry_at(l, f)->node.link.next) {
        if (f >= l->top) FAIL("free list leaves the slab");
        if (sl_entry_at(l, f)->state != SL_FREE) FAIL("free list holds a live entry %u", f);
        if (++walked > freec) FAIL("free list loops");
    }
    if (walked != freec) FAIL("free list holds %llu of %llu free entries", (unsigned long long)walked,
                              (unsigned long long)freec);
    if (l->wheel.count != l->live) FAIL("wheel holds %llu timers for %llu live keys",
                                        (unsigned long long)l->wheel.count, (unsigned long long)l->live);
    return 0;
}
