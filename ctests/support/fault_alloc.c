/* fault_alloc.c — see fault_alloc.h. */
#include "fault_alloc.h"

#include <stdlib.h>
#include <string.h>

#define FA_FILL_NEW 0xA5
#define FA_FILL_FREED 0xDD

static void fa_fatal(const char *what) {
    fprintf(stderr, "fault_alloc: %s\n", what);
    abort();
}

static size_t fa_hash(const void *p, size_t mask) {
    uint64_t x = (uint64_t)(uintptr_t)p;
    x ^= x >> 33;
    x *= UINT64_C(0xff51afd7ed558ccd);
    x ^= x >> 33;
    return (size_t)x & mask;
}

/* Inserts a block known to be absent. The table is at most half full. */
static void fa_table_put(fault_alloc_block_t *t, size_t cap, fault_alloc_block_t b) {
    size_t mask = cap - 1, i = fa_hash(b.ptr, mask);
    while (t[i].ptr) i = (i + 1) & mask;
    t[i] = b;
}

static void fa_table_grow(fault_alloc_t *fa) {
    size_t cap = fa->table_cap ? fa->table_cap * 2 : 1024;
    fault_alloc_block_t *t = calloc(cap, sizeof *t);
    if (!t) fa_fatal("cannot grow the block table (out of memory in the test itself)");
    for (size_t i = 0; i < fa->table_cap; i++)
        if (fa->table[i].ptr) fa_table_put(t, cap, fa->table[i]);
    free(fa->table);
    fa->table = t;
    fa->table_cap = cap;
}

/* Returns the slot holding p, or (size_t)-1. */
static size_t fa_table_find(const fault_alloc_t *fa, const void *p) {
    if (!fa->table_cap) return (size_t)-1;
    size_t mask = fa->table_cap - 1, i = fa_hash(p, mask);
    while (fa->table[i].ptr) {
        if (fa->table[i].ptr == p) return i;
        i = (i + 1) & mask;
    }
    return (size_t)-1;
}

static void fa_table_delete(fault_alloc_t *fa, size_t hole) {
    size_t mask = fa->table_cap - 1, j = hole;
    for (;;) {
        j = (j + 1) & mask;
        if (!fa->table[j].ptr) break;
        size_t home = fa_hash(fa->table[j].ptr, mask);
        if (((j - home) & mask) >= ((j - hole) & mask)) {
            fa->table[hole] = fa->table[j];
            hole = j;
        }
    }
    fa->table[hole].ptr = NULL;
    fa->table[hole].size = 0;
    fa->table[hole].serial = 0;
}

static void fa_misuse(fault_alloc_t *fa, const char *msg) {
    fa->misuse++;
    snprintf(fa->last_misuse, sizeof fa->last_misuse, "%s", msg);
    if (fa->abort_on_misuse) {
        pthread_mutex_unlock(&fa->mu);
        fa_fatal(msg);
    }
}

static bool fa_should_fail(fault_alloc_t *fa, uint64_t serial, size_t size) {
    if (fa->fail_at && serial == fa->fail_at) {
        fa->fail_at = 0;
        return true;
    }
    if (fa->fail_every && (serial - fa->every_base) % fa->fail_every == 0) return true;
    if (fa->budget != UINT64_MAX && (fa->live_bytes + size > fa->budget || fa->live_bytes + size < size)) return true;
    return false;
}

static void *fa_alloc(void *ctx, size_t size) {
    fault_alloc_t *fa = ctx;
    pthread_mutex_lock(&fa->mu);
    uint64_t serial = ++fa->attempts;
    if (size == 0) {
        char msg[120];
        snprintf(msg, sizeof msg, "allocation #%llu of 0 bytes", (unsigned long long)serial);
        fa_misuse(fa, msg);
    }
    if (fa_should_fail(fa, serial, size)) {
        fa->failures++;
        pthread_mutex_unlock(&fa->mu);
        return NULL;
    }
    void *p = malloc(size ? size : 1);
    if (!p) {
        pthread_mutex_unlock(&fa->mu);
        return NULL; /* a real failure: the core must cope as well */
    }
    memset(p, FA_FILL_NEW, size);
    if ((fa->live_blocks + 1) * 2 > fa->table_cap) fa_table_grow(fa);
    fault_alloc_block_t b = { p, size, serial };
    fa_table_put(fa->table, fa->table_cap, b);
    fa->allocs++;
    fa->live_blocks++;
    fa->live_bytes += size;
    fa->total_bytes += size;
    if (fa->live_bytes > fa->peak_bytes) fa->peak_bytes = fa->live_bytes;
    pthread_mutex_unlock(&fa->mu);
    return p;
}

static void fa_release(void *ctx, void *ptr, size_t size) {
    fault_alloc_t *fa = ctx;
    pthread_mutex_lock(&fa->mu);
    if (!ptr) {
        fa->null_releases++;
        pthread_mutex_unlock(&fa->mu);
        return;
    }
    size_t at = fa_table_find(fa, ptr);
    if (at == (size_t)-1) {
        char msg[160];
        snprintf(msg, sizeof msg, "release of %p (%zu bytes) that is not a live block: double free or foreign pointer",
                 ptr, size);
        fa_misuse(fa, msg);
        pthread_mutex_unlock(&fa->mu);
        return; /* never hand a pointer we do not own to free() */
    }
    fault_alloc_block_t b = fa->table[at];
    if (b.size != size) {
        char msg[200];
        snprintf(msg, sizeof msg, "release of %p with size %zu, but allocation #%llu gave it %zu bytes", ptr, size,
                 (unsigned long long)b.serial, b.size);
        fa_misuse(fa, msg);
    }
    fa_table_delete(fa, at);
    fa->releases++;
    fa->live_blocks--;
    fa->live_bytes -= b.size;
    memset(ptr, FA_FILL_FREED, b.size);
    free(ptr);
    pthread_mutex_unlock(&fa->mu);
}

void fault_alloc_init(fault_alloc_t *fa) {
    memset(fa, 0, sizeof *fa);
    fa->hook.alloc = fa_alloc;
    fa->hook.release = fa_release;
    fa->hook.ctx = fa;
    fa->budget = UINT64_MAX;
    fa->abort_on_misuse = true;
    if (pthread_mutex_init(&fa->mu, NULL) != 0) fa_fatal("pthread_mutex_init failed");
}

void fault_alloc_destroy(fault_alloc_t *fa) {
    pthread_mutex_lock(&fa->mu);
    for (size_t i = 0; i < fa->table_cap; i++)
        if (fa->table[i].ptr) free(fa->table[i].ptr);
    free(fa->table);
    fa->table = NULL;
    fa->table_cap = 0;
    fa->live_blocks = fa->live_bytes = 0;
    pthread_mutex_unlock(&fa->mu);
    pthread_mutex_destroy(&fa->mu);
}

const sluice_allocator_t *fault_alloc_hook(fault_alloc_t *fa) { return &fa->hook; }

void fault_alloc_fail_nth(fault_alloc_t *fa, uint64_t n) {
    pthread_mutex_lock(&fa->mu);
    fa->fail_at = n ? fa->attempts + n : 0;
    pthread_mutex_unlock(&fa->mu);
}

void fault_alloc_fail_every(fault_alloc_t *fa, uint64_t n) {
    pthread_mutex_lock(&fa->mu);
    fa->fail_every = n;
    fa->every_base = fa->attempts;
    pthread_mutex_unlock(&fa->mu);
}

void fault_alloc_fail_over(fault_alloc_t *fa, uint64_t bytes) {
    pthread_mutex_lock(&fa->mu);
    fa->budget = bytes;
    pthread_mutex_unlock(&fa->mu);
}

void fault_alloc_disarm(fault_alloc_t *fa) {
    pthread_mutex_lock(&fa->mu);
    fa->fail_at = 0;
    fa->fail_every = 0;
    fa->budget = UINT64_MAX;
    pthread_mutex_unlock(&fa->mu);
}

uint64_t fault_alloc_failures(fault_alloc_t *fa) {
    pthread_mutex_lock(&fa->mu);
    uint64_t n = fa->failures;
    pthread_mutex_unlock(&fa->mu);
    return n;
}

uint64_t fault_alloc_live_bytes(fault_alloc_t *fa) {
    pthread_mutex_lock(&fa->mu);
    uint64_t n = fa->live_bytes;
    pthread_mutex_unlock(&fa->mu);
    return n;
}

uint64_t fault_alloc_leaks(fault_alloc_t *fa) {
    pthread_mutex_lock(&fa->mu);
    uint64_t n = fa->live_blocks;
    pthread_mutex_unlock(&fa->mu);
    return n;
}

bool fault_alloc_clean(fault_alloc_t *fa) {
    pthread_mutex_lock(&fa->mu);
    bool ok = fa->misuse == 0 && fa->live_blocks == 0 && fa->live_bytes == 0;
    pthread_mutex_unlock(&fa->mu);
    return ok;
}

void fault_alloc_report(fault_alloc_t *fa, FILE *f, size_t max_blocks) {
    pthread_mutex_lock(&fa->mu);
    fprintf(f,
            "fault_alloc: %llu attempts, %llu allocations, %llu injected failures, %llu releases (+%llu NULL), "
            "live %llu blocks / %llu bytes, peak %llu bytes, misuse %llu%s%s\n",
            (unsigned long long)fa->attempts, (unsigned long long)fa->allocs, (unsigned long long)fa->failures,
            (unsigned long long)fa->releases, (unsigned long long)fa->null_releases,
            (unsigned long long)fa->live_blocks, (unsigned long long)fa->live_bytes, (unsigned long long)fa->peak_bytes,
            (unsigned long long)fa->misuse, fa->misuse ? ": " : "", fa->misuse ? fa->last_misuse : "");
    size_t shown = 0;
    for (size_t i = 0; i < fa->table_cap && shown < max_blocks; i++) {
        if (!fa->table[i].ptr) continue;
        fprintf(f, "  live block %p: %zu bytes from allocation #%llu\n", fa->table[i].ptr, fa->table[i].size,
                (unsigned long long)fa->table[i].serial);
        shown++;
    }
    pthread_mutex_unlock(&fa->mu);
}
