/*
 * alloc-internal.h — the one allocation helper of the core (internal).
 *
 * Every block of a limiter goes through a sluice_allocator_t given by the
 * caller, or malloc/free when none was given, and is counted so that the
 * stats can report the memory held. This header is that logic, once.
 */
#ifndef SLUICE_ALLOC_INTERNAL_H
#define SLUICE_ALLOC_INTERNAL_H

#include "sluice.h"

#include <stdbool.h>
#include <stdlib.h>

/* An allocator (never with a NULL function) and the bytes it holds now. */
struct sluice__mem {
    sluice_allocator_t a;
    uint64_t bytes;
};

/* True when `a` may be used: NULL (malloc/free) or both functions set. */
static inline bool sluice__allocator_valid(const sluice_allocator_t *a) {
    return a == NULL || (a->alloc != NULL && a->release != NULL);
}

static inline void *sluice__malloc_fn(void *ctx, size_t size) {
    (void)ctx;
    return malloc(size);
}

static inline void sluice__free_fn(void *ctx, void *p, size_t size) {
    (void)ctx;
    (void)size;
    free(p);
}

/* Takes the caller's allocator (validated), or malloc/free for NULL. */
static inline void sluice__mem_init(struct sluice__mem *m, const sluice_allocator_t *a) {
    if (a) {
        m->a = *a;
    } else {
        m->a.alloc = sluice__malloc_fn;
        m->a.release = sluice__free_fn;
        m->a.ctx = NULL;
    }
    m->bytes = 0;
}

/* Allocates `size` bytes (NULL on failure) and counts them. */
static inline void *sluice__mem_alloc(struct sluice__mem *m, size_t size) {
    void *p = m->a.alloc(m->a.ctx, size);
    if (p) m->bytes += size;
    return p;
}

/* Releases a block of `size` bytes from sluice__mem_alloc(); NULL is ignored. */
static inline void sluice__mem_release(struct sluice__mem *m, void *p, size_t size) {
    if (!p) return;
    m->bytes -= size;
    m->a.release(m->a.ctx, p, size);
}

#endif /* SLUICE_ALLOC_INTERNAL_H */
