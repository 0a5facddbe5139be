/*
 * fault_alloc.h — a checking, fault-injecting allocator for the tests.
 *
 * Plug fault_alloc_hook(&fa) into sluice_config_t.allocator. Every
 * allocation the limiter makes then goes through this allocator, which
 *
 *  - counts allocation attempts, successes, failures, releases and bytes
 *    (live, peak, total);
 *  - can fail allocations on purpose: exactly the Nth attempt after arming
 *    (fault_alloc_fail_nth), every Nth attempt (fault_alloc_fail_every), or
 *    any attempt that would take the live bytes over a budget
 *    (fault_alloc_fail_over);
 *  - tracks every live block in a hash table and reports misuse: a release
 *    of a pointer it did not hand out (double free, foreign pointer), a
 *    release with a size different from the allocation's, a zero-size
 *    allocation; blocks still live at the end are leaks
 *    (fault_alloc_leaks / fault_alloc_report).
 *
 * New blocks are filled with 0xA5 (so the core cannot rely on zeroed
 * memory) and released blocks with 0xDD before they go back to malloc.
 *
 * Misuse is fatal by default (message on stderr, then abort()), so a test
 * stops at the faulty call with a stack trace under a sanitizer; set
 * `abort_on_misuse = false` to count it in `misuse` instead.
 *
 * The allocator is guarded by a mutex, so it may be shared by limiters
 * used on several threads (the loop layer's shards).
 */
#ifndef SLUICE_FAULT_ALLOC_H
#define SLUICE_FAULT_ALLOC_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "sluice.h"

typedef struct fault_alloc_block {
    void *ptr; /* NULL: empty slot */
    size_t size;
    uint64_t serial; /* which allocation attempt produced it (1-based) */
} fault_alloc_block_t;

typedef struct fault_alloc {
    sluice_allocator_t hook; /* what to hand to sluice_config_t.allocator */

    /* ---- fault schedule (set through the functions below) ---- */
    uint64_t fail_at;    /* fail the attempt with this serial (0: off) */
    uint64_t fail_every; /* fail every Nth attempt counted from every_base (0: off) */
    uint64_t every_base;
    uint64_t budget; /* fail when live_bytes + size > budget (UINT64_MAX: off) */

    /* ---- counters ---- */
    uint64_t attempts;      /* allocation calls (serial of the last one) */
    uint64_t allocs;        /* successful allocations */
    uint64_t failures;      /* injected failures */
    uint64_t releases;      /* release calls with a non-NULL pointer */
    uint64_t null_releases; /* release calls with NULL (allowed) */
    uint64_t live_blocks, live_bytes, peak_bytes, total_bytes;
    uint64_t misuse; /* double frees, foreign pointers, size mismatches, zero sizes */
    char last_misuse[200];
    bool abort_on_misuse; /* default true */

    /* ---- live block table (open addressing, backward-shift deletion) ---- */
    fault_alloc_block_t *table;
    size_t table_cap; /* power of two */

    pthread_mutex_t mu;
} fault_alloc_t;

/** Initialises an allocator with no faults armed. */
void fault_alloc_init(fault_alloc_t *fa);

/** Frees the allocator's own table. Live blocks (leaks) are released too,
 *  after fault_alloc_leaks() has had a chance to see them. */
void fault_alloc_destroy(fault_alloc_t *fa);

/** The hook for sluice_config_t.allocator. */
const sluice_allocator_t *fault_alloc_hook(fault_alloc_t *fa);

/** Fails exactly the nth allocation attempt from now (n >= 1), once. */
void fault_alloc_fail_nth(fault_alloc_t *fa, uint64_t n);

/** Fails every nth allocation attempt from now (n >= 1; 1 = all). */
void fault_alloc_fail_every(fault_alloc_t *fa, uint64_t n);

/** Fails allocations that would take the live bytes over `bytes`. */
void fault_alloc_fail_over(fault_alloc_t *fa, uint64_t bytes);

/** Disarms every fault. */
void fault_alloc_disarm(fault_alloc_t *fa);

/** Number of injected failures so far. */
uint64_t fault_alloc_failures(fault_alloc_t *fa);

/** Live bytes right now. */
uint64_t fault_alloc_live_bytes(fault_alloc_t *fa);

/** Number of live blocks (leaks, once the limiter is freed). */
uint64_t fault_alloc_leaks(fault_alloc_t *fa);

/** True when no misuse was seen and no block is live. */
bool fault_alloc_clean(fault_alloc_t *fa);

/** Prints the counters and up to `max_blocks` live blocks to `f`. */
void fault_alloc_report(fault_alloc_t *fa, FILE *f, size_t max_blocks);

#endif /* SLUICE_FAULT_ALLOC_H */
