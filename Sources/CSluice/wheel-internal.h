/*
 * wheel-internal.h — tickless hierarchical hashed timer wheel (internal).
 *
 * The caller owns the timer nodes: each is a `struct sluice__wheel_node` embedded in
 * one of the caller's records, and records are addressed by a 32-bit index
 * through a `struct sluice__wheel_arena` (chunked storage of fixed-stride records).
 * Arming, moving and cancelling never allocate.
 *
 * Time is in nanoseconds and passed by the caller; the wheel never reads a
 * clock. Internally it counts ticks of `tick_ns`. A node with deadline D is
 * due once the wheel has advanced to a time >= D rounded up to the next tick
 * boundary: never early, at most one tick late.
 *
 * Layout: SLUICE__WHEEL_LEVELS levels of 64 slots, each slot a circular doubly-linked
 * list through the nodes (32-bit indices), headed by a sentinel living in the
 * wheel. Sentinels have indices SLUICE__WHEEL_HEAD_BASE + i. Each level has a 64-bit
 * occupancy bitmap. Deadlines further than 64^SLUICE__WHEEL_LEVELS ticks go to an
 * overflow list that is re-examined when the top bits of the tick change.
 *
 * Invariant: a node in level L, slot s has an expiry tick E (ceil(D/tick),
 * for the deadline it was placed with) whose bits above level L equal those
 * of `curtick` and whose level-L digit is s > the level-L digit of curtick.
 * So at each level only slots after the current digit are occupied, and the
 * lowest set bit of the bitmap is the next slot to reach.
 *
 * Moving a deadline later (the debounce hot path) only stores the new
 * deadline: the node stays where it is, and when its slot is reached the
 * wheel sees the true deadline and places it again. Moving earlier unlinks
 * and places. Nodes taken from reached slots go to the "expired" list and are
 * checked one by one by sluice__wheel_pop(), so advance() itself costs O(levels +
 * occupied slots reached), and the caller bounds the work by popping as few
 * nodes as it likes.
 */
#ifndef SLUICE_WHEEL_INTERNAL_H
#define SLUICE_WHEEL_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Internal symbols stay out of the shared library's interface. */
#if defined(__GNUC__) || defined(__clang__)
#pragma GCC visibility push(hidden)
#endif

#define SLUICE__WHEEL_LEVELS 8
#define SLUICE__WHEEL_SLOT_BITS 6
#define SLUICE__WHEEL_SLOTS 64
#define SLUICE__WHEEL_NONE UINT32_C(0xFFFFFFFF)
/* Index of the first sentinel. Record indices must stay below it. */
#define SLUICE__WHEEL_HEAD_BASE UINT32_C(0xFFFFF000)
#define SLUICE__WHEEL_HEAD_EXPIRED (SLUICE__WHEEL_LEVELS * SLUICE__WHEEL_SLOTS) /* head number of the expired list */
#define SLUICE__WHEEL_HEAD_OVERFLOW                                                                                    \
    (SLUICE__WHEEL_LEVELS * SLUICE__WHEEL_SLOTS + 1) /* head number of the overflow list */
#define SLUICE__WHEEL_HEADS (SLUICE__WHEEL_LEVELS * SLUICE__WHEEL_SLOTS + 2)
/* Largest record index the wheel accepts. */
#define SLUICE__WHEEL_INDEX_MAX (SLUICE__WHEEL_HEAD_BASE - 1)

/* prev == SLUICE__WHEEL_NONE: not armed. The wheel reads the `next` of no
 * unarmed node: a record whose node is never armed may keep 32 bits of its
 * own there (a limiter of plans keeps its quota set's id, plans-internal.h). */
struct sluice__wheel_link {
    uint32_t prev, next;
};

/* Embedded in the caller's record. 16 bytes. */
struct sluice__wheel_node {
    struct sluice__wheel_link link;
    uint64_t deadline; /* the true deadline in ns (may be later than where it sits) */
};

/* How to find node `i`: chunks[i >> chunk_shift] + (i & mask) * stride + node_off.
 * The caller owns this struct and may change `chunks` (growing its chunk
 * table) at any time between wheel calls. */
struct sluice__wheel_arena {
    unsigned char **chunks;
    uint32_t chunk_shift;
    uint32_t stride;
    uint32_t node_off;
};

struct sluice__wheel {
    const struct sluice__wheel_arena *arena;
    uint64_t tick_ns;
    uint64_t recip;     /* floor(2^64 / tick_ns), for fast division (0 when tick_ns == 1) */
    uint64_t curtick;   /* everything with expiry tick <= curtick has been moved to expired */
    uint64_t cur_ns;    /* curtick * tick_ns, saturated: a node is due when deadline <= cur_ns */
    uint64_t next_tick; /* lower bound of the next tick at which work exists (UINT64_MAX: none) */
    uint64_t count;     /* armed nodes, in slots, overflow or expired */
    uint64_t occ[SLUICE__WHEEL_LEVELS];
    struct sluice__wheel_link heads[SLUICE__WHEEL_HEADS];
};

static inline struct sluice__wheel_node *sluice__wheel_node_at(const struct sluice__wheel_arena *a, uint32_t i) {
    return (struct sluice__wheel_node *)(void *)(a->chunks[i >> a->chunk_shift] +
                                                 (size_t)(i & ((UINT32_C(1) << a->chunk_shift) - 1)) * a->stride +
                                                 a->node_off);
}

static inline bool sluice__wheel_node_armed(const struct sluice__wheel_node *n) {
    return n->link.prev != SLUICE__WHEEL_NONE;
}

/* Makes an empty wheel at time `now_ns`. tick_ns >= 1. */
void sluice__wheel_init(struct sluice__wheel *w, const struct sluice__wheel_arena *arena, uint64_t tick_ns,
                        uint64_t now_ns);

/* Marks a node as not armed; call once when a record is created. */
static inline void sluice__wheel_node_init(struct sluice__wheel_node *n) {
    n->link.prev = SLUICE__WHEEL_NONE;
    n->link.next = SLUICE__WHEEL_NONE;
    n->deadline = 0;
}

/* Arms an unarmed node at `deadline_ns`. A deadline already due goes to the
 * expired list (popped by the next sluice__wheel_pop). */
void sluice__wheel_add(struct sluice__wheel *w, uint32_t idx, uint64_t deadline_ns);

/* Disarms a node; no-op when it is not armed. */
void sluice__wheel_del(struct sluice__wheel *w, uint32_t idx);

/* Sets an armed node's deadline (later: O(1) store; earlier: move), or arms
 * an unarmed node. */
void sluice__wheel_set(struct sluice__wheel *w, uint32_t idx, uint64_t deadline_ns);

/* sluice__wheel_set() for node `n` (node `idx`) with the common case
 * inline: an armed node moved later only stores its new deadline. */
static inline void sluice__wheel_set_later(struct sluice__wheel *w, uint32_t idx, struct sluice__wheel_node *n,
                                           uint64_t deadline_ns) {
    if (sluice__wheel_node_armed(n) && deadline_ns >= n->deadline)
        n->deadline = deadline_ns;
    else
        sluice__wheel_set(w, idx, deadline_ns);
}

/* Moves the wheel to `now_ns` (clamped: time never goes back). Reached slots
 * are spliced onto the expired list. O(levels + occupied slots reached). */
void sluice__wheel_advance(struct sluice__wheel *w, uint64_t now_ns);

/* Takes one due node off the expired list, disarmed, and returns its index;
 * nodes found not due yet (moved later) are placed again on the way.
 * Returns SLUICE__WHEEL_NONE when nothing is due at the wheel's current time. */
uint32_t sluice__wheel_pop(struct sluice__wheel *w);

/* A lower bound of the time (ns) when sluice__wheel_advance + sluice__wheel_pop next find work:
 * cur_ns if the expired list is not empty, UINT64_MAX if nothing is armed. */
static inline uint64_t sluice__wheel_next(const struct sluice__wheel *w) {
    if (w->count == 0) return UINT64_MAX;
    if (w->next_tick == UINT64_MAX) return UINT64_MAX;
    /* saturating next_tick * tick_ns */
    if (w->next_tick > UINT64_MAX / w->tick_ns) return UINT64_MAX;
    return w->next_tick * w->tick_ns;
}

/* The caller has copied a record (with its node) to index `to`; re-points the
 * node's neighbours at `to`. No-op for an unarmed node. */
void sluice__wheel_relocate(struct sluice__wheel *w, uint32_t to);

/* Prefetch hints for a caller that pops many nodes in a row: the first node
 * of the expired list, and the node after node `i` in whatever list holds
 * it, or SLUICE__WHEEL_NONE at the end of a list. The caller must make sure
 * `i` is a valid record index; a node that left the list meanwhile gives a
 * meaningless (but harmless) answer. */
static inline uint32_t sluice__wheel_expired_first(const struct sluice__wheel *w) {
    uint32_t i = w->heads[SLUICE__WHEEL_HEAD_EXPIRED].next;
    return i >= SLUICE__WHEEL_HEAD_BASE ? SLUICE__WHEEL_NONE : i;
}

static inline uint32_t sluice__wheel_after(const struct sluice__wheel *w, uint32_t i) {
    uint32_t x = sluice__wheel_node_at(w->arena, i)->link.next;
    return x >= SLUICE__WHEEL_HEAD_BASE ? SLUICE__WHEEL_NONE : x;
}

/* Checks every invariant (links symmetric, bitmaps match lists, placement
 * rule above, count, next_tick a lower bound). Returns 0 or a negative line
 * number of the failed check, after writing a description to stderr. */
int sluice__wheel_check(const struct sluice__wheel *w);

#if defined(__GNUC__) || defined(__clang__)
#pragma GCC visibility pop
#endif

#endif /* SLUICE_WHEEL_INTERNAL_H */
