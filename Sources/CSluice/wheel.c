/*
 * wheel.c — tickless hierarchical timer wheel (see wheel-internal.h).
 *
 * Vocabulary used below:
 *   tick       a multiple of tick_ns; the wheel only knows whole ticks.
 *   E(D)       expiry tick of deadline D: ceil(D / tick_ns). D is due at the
 *              wheel's time once E(D) <= curtick, i.e. D <= cur_ns.
 *   digit L    bits [6L, 6L+6) of a tick; "upper L" is everything above them.
 *   head h     list head number: slot s of level L is h = L*64 + s; then the
 *              expired list and the overflow list. Its sentinel has index
 *              SLUICE__WHEEL_HEAD_BASE + h, so one 32-bit index names a node or a head.
 *
 * Placement of a node with expiry tick E at curtick c:
 *   E <= c                      -> expired list (sluice__wheel_pop looks at it next);
 *   highest differing digit L   -> level L, slot digit_L(E) (> digit_L(c));
 *   L >= SLUICE__WHEEL_LEVELS              -> overflow (E is in a later 2^48-tick epoch).
 * The slot's start tick is E with its low 6L bits cleared; every tick in
 * [c+1, start) leaves the node alone, and reaching `start` moves the whole
 * slot to the expired list, where sluice__wheel_pop either returns a node (due) or
 * places it again relative to the new curtick (a finer level, or a later
 * slot if its deadline was pushed back in the meantime).
 *
 * Nothing here allocates, reads a clock or divides in hardware on a hot path.
 */
#include "wheel-internal.h"

#include <stdio.h>

/* ---- portability helpers ------------------------------------------------ */

#if defined(__GNUC__) || defined(__clang__)
#define LIKELY(x) __builtin_expect(!!(x), 1)
#define UNLIKELY(x) __builtin_expect(!!(x), 0)
#define PREFETCH_W(p) __builtin_prefetch((p), 1)
static inline unsigned clz64(uint64_t x) { return (unsigned)__builtin_clzll(x); } /* x != 0 */
static inline unsigned ctz64(uint64_t x) { return (unsigned)__builtin_ctzll(x); } /* x != 0 */
#else
#define LIKELY(x) (x)
#define UNLIKELY(x) (x)
#define PREFETCH_W(p) ((void)(p))
static inline unsigned clz64(uint64_t x) {
    unsigned n = 0;
    while (!(x & (UINT64_C(1) << 63))) {
        x <<= 1;
        n++;
    }
    return n;
}
static inline unsigned ctz64(uint64_t x) {
    unsigned n = 0;
    while (!(x & 1)) {
        x >>= 1;
        n++;
    }
    return n;
}
#endif

#if defined(__SIZEOF_INT128__)
__extension__ typedef unsigned __int128 u128;
static inline uint64_t mulhi(uint64_t a, uint64_t b) { return (uint64_t)(((u128)a * b) >> 64); }
#else
static inline uint64_t mulhi(uint64_t a, uint64_t b) {
    uint64_t al = (uint32_t)a, ah = a >> 32, bl = (uint32_t)b, bh = b >> 32;
    uint64_t ll = al * bl, lh = al * bh, hl = ah * bl, hh = ah * bh;
    uint64_t mid = (ll >> 32) + (uint32_t)lh + (uint32_t)hl;
    return hh + (lh >> 32) + (hl >> 32) + (mid >> 32);
}
#endif

/* ---- tick arithmetic ---------------------------------------------------- */

#define EXPIRED_IDX (SLUICE__WHEEL_HEAD_BASE + SLUICE__WHEEL_HEAD_EXPIRED)
#define OVERFLOW_IDX (SLUICE__WHEEL_HEAD_BASE + SLUICE__WHEEL_HEAD_OVERFLOW)
#define WHEEL_HEADS (SLUICE__WHEEL_LEVELS * SLUICE__WHEEL_SLOTS)
/* Bits covered by the levels: a tick's "epoch" is tick >> TOP_SHIFT. */
#define TOP_SHIFT (SLUICE__WHEEL_SLOT_BITS * SLUICE__WHEEL_LEVELS)

/* Shift of digit L, and of everything above digit L (L < SLUICE__WHEEL_LEVELS, so both
 * stay <= 48: no shift by 64 anywhere). */
#define DIGIT_SHIFT(L) ((unsigned)(L)*SLUICE__WHEEL_SLOT_BITS)
#define UPPER_SHIFT(L) (((unsigned)(L) + 1) * SLUICE__WHEEL_SLOT_BITS)

/* floor(2^64 / t) for t >= 2. */
static uint64_t recip_of(uint64_t t) {
    uint64_t q = UINT64_MAX / t;
    /* 2^64 = UINT64_MAX + 1: one more when t divides 2^64 exactly. */
    if (UINT64_MAX % t == t - 1) q++;
    return q;
}

/* floor(x / tick_ns). recip = floor(2^64/t) makes mulhi(x, recip) either the
 * quotient or one less (the error of x*recip/2^64 against x/t is below 1), so
 * a single correction step is exact. */
static inline uint64_t floor_div(const struct sluice__wheel *w, uint64_t x) {
    uint64_t t = w->tick_ns;
    if (t == 1) return x;
    uint64_t q = mulhi(x, w->recip);
    if (x - q * t >= t) q++;
    return q;
}

/* E(d) = ceil(d / tick_ns); never overflows (ceil((2^64-1)/t) < 2^64). */
static inline uint64_t expiry_tick(const struct sluice__wheel *w, uint64_t d) {
    uint64_t t = w->tick_ns;
    if (t == 1) return d;
    uint64_t q = mulhi(d, w->recip);
    uint64_t r = d - q * t;
    if (r >= t) {
        q++;
        r -= t;
    }
    return q + (r != 0);
}

/* a * b, saturated at UINT64_MAX. */
static inline uint64_t mul_sat(uint64_t a, uint64_t b) {
#if defined(__SIZEOF_INT128__)
    u128 p = (u128)a * b;
    return (p >> 64) ? UINT64_MAX : (uint64_t)p;
#else
    if (b != 0 && a > UINT64_MAX / b) return UINT64_MAX;
    return a * b;
#endif
}

/* First tick of the epoch after c's (where overflow nodes may start to be
 * due). In the last epoch nothing can be in overflow (no later tick differs
 * from c above bit 48), so the saturated value is never used as a bound. */
static inline uint64_t next_epoch(uint64_t c) {
    uint64_t m = c | ((UINT64_C(1) << TOP_SHIFT) - 1);
    return m == UINT64_MAX ? UINT64_MAX : m + 1;
}

/* ---- links -------------------------------------------------------------- */

static inline struct sluice__wheel_link *link_of(struct sluice__wheel *w, uint32_t i) {
    if (i >= SLUICE__WHEEL_HEAD_BASE) return &w->heads[i - SLUICE__WHEEL_HEAD_BASE];
    return &sluice__wheel_node_at(w->arena, i)->link;
}

static inline bool list_empty(const struct sluice__wheel *w, uint32_t h) {
    return w->heads[h].next == SLUICE__WHEEL_HEAD_BASE + h;
}

/* Appends node i (links nl) to list h. */
static inline void push_tail(struct sluice__wheel *w, uint32_t h, uint32_t i, struct sluice__wheel_link *nl) {
    struct sluice__wheel_link *hd = &w->heads[h];
    uint32_t tail = hd->prev;
    nl->prev = tail;
    nl->next = SLUICE__WHEEL_HEAD_BASE + h;
    link_of(w, tail)->next = i;
    hd->prev = i;
}

static void refresh_next(struct sluice__wheel *w);

/* Removes a node from whatever list holds it; an emptied wheel slot loses
 * its occupancy bit. next_tick stays as it is (still a lower bound), except
 * when the expired list empties: then it is recomputed (O(levels)), so that
 * sluice__wheel_next() does not keep reporting work due now. The node's own links are
 * left stale. */
static inline void unlink_node(struct sluice__wheel *w, struct sluice__wheel_link *nl) {
    uint32_t p = nl->prev, x = nl->next;
    link_of(w, p)->next = x;
    link_of(w, x)->prev = p;
    /* The list always holds its sentinel, so p == x means only the sentinel
     * is left: p is a head. */
    if (p == x) {
        uint32_t h = p - SLUICE__WHEEL_HEAD_BASE;
        if (h < WHEEL_HEADS)
            w->occ[h / SLUICE__WHEEL_SLOTS] &= ~(UINT64_C(1) << (h % SLUICE__WHEEL_SLOTS));
        else if (h == SLUICE__WHEEL_HEAD_EXPIRED)
            refresh_next(w);
    }
}

/* Moves the whole of list h (a wheel slot or overflow) to the end of the
 * expired list in O(1). */
static inline void splice_expired(struct sluice__wheel *w, uint32_t h) {
    struct sluice__wheel_link *src = &w->heads[h];
    uint32_t first = src->next, last = src->prev;
    if (first == SLUICE__WHEEL_HEAD_BASE + h) return;
    struct sluice__wheel_link *ex = &w->heads[SLUICE__WHEEL_HEAD_EXPIRED];
    uint32_t tail = ex->prev;
    link_of(w, tail)->next = first;
    link_of(w, first)->prev = tail;
    link_of(w, last)->next = EXPIRED_IDX;
    ex->prev = last;
    src->next = src->prev = SLUICE__WHEEL_HEAD_BASE + h;
}

/* Links node i, whose expiry tick is e, where the placement rule says. */
static inline void place(struct sluice__wheel *w, uint32_t i, struct sluice__wheel_node *n, uint64_t e) {
    uint64_t c = w->curtick;
    uint64_t start;
    uint32_t h;
    if (e <= c) {
        h = SLUICE__WHEEL_HEAD_EXPIRED;
        start = c;
    } else {
        unsigned level = (63u - clz64(e ^ c)) / SLUICE__WHEEL_SLOT_BITS;
        if (LIKELY(level < SLUICE__WHEEL_LEVELS)) {
            unsigned sh = DIGIT_SHIFT(level);
            unsigned s = (unsigned)(e >> sh) & (SLUICE__WHEEL_SLOTS - 1);
            h = level * SLUICE__WHEEL_SLOTS + s;
            w->occ[level] |= UINT64_C(1) << s;
            start = e & ~((UINT64_C(1) << sh) - 1);
        } else {
            h = SLUICE__WHEEL_HEAD_OVERFLOW;
            start = next_epoch(c);
        }
    }
    if (start < w->next_tick) w->next_tick = start;
    push_tail(w, h, i, &n->link);
}

/* Exact next_tick from the lists: curtick if anything waits on the expired
 * list, else the start of the first slot to be reached. Levels are tried in
 * order: every occupied slot of level L starts before any of level L+1 (its
 * ticks share c's upper-L bits, level L+1 slots come after them). */
static void refresh_next(struct sluice__wheel *w) {
    uint64_t c = w->curtick;
    if (!list_empty(w, SLUICE__WHEEL_HEAD_EXPIRED)) {
        w->next_tick = c;
        return;
    }
    for (unsigned level = 0; level < SLUICE__WHEEL_LEVELS; level++) {
        uint64_t o = w->occ[level];
        if (o) {
            unsigned up = UPPER_SHIFT(level);
            w->next_tick = ((c >> up) << up) | ((uint64_t)ctz64(o) << DIGIT_SHIFT(level));
            return;
        }
    }
    w->next_tick = list_empty(w, SLUICE__WHEEL_HEAD_OVERFLOW) ? UINT64_MAX : next_epoch(c);
}

/* ---- API ---------------------------------------------------------------- */

/* The tick the wheel reaches at `now_ns`: floor(now / tick). At the end of
 * time the last tick boundary below 2^64 may lie before UINT64_MAX, and
 * deadlines after it (saturated ones) would never be reached; at now ==
 * UINT64_MAX every deadline is due, so take the tick holding UINT64_MAX
 * (cur_ns then saturates to UINT64_MAX: nothing fires early). */
static uint64_t tick_at(const struct sluice__wheel *w, uint64_t now_ns) {
    uint64_t t = floor_div(w, now_ns);
    if (now_ns == UINT64_MAX && mul_sat(t, w->tick_ns) != UINT64_MAX) t++;
    return t;
}

void sluice__wheel_init(struct sluice__wheel *w, const struct sluice__wheel_arena *arena, uint64_t tick_ns,
                        uint64_t now_ns) {
    if (tick_ns == 0) tick_ns = 1;
    w->arena = arena;
    w->tick_ns = tick_ns;
    w->recip = tick_ns == 1 ? 0 : recip_of(tick_ns);
    w->curtick = tick_at(w, now_ns);
    w->cur_ns = mul_sat(w->curtick, tick_ns);
    w->next_tick = UINT64_MAX;
    w->count = 0;
    for (unsigned l = 0; l < SLUICE__WHEEL_LEVELS; l++) w->occ[l] = 0;
    for (uint32_t h = 0; h < SLUICE__WHEEL_HEADS; h++)
        w->heads[h].prev = w->heads[h].next = SLUICE__WHEEL_HEAD_BASE + h;
}

void sluice__wheel_add(struct sluice__wheel *w, uint32_t idx, uint64_t deadline_ns) {
    struct sluice__wheel_node *n = sluice__wheel_node_at(w->arena, idx);
    if (UNLIKELY(sluice__wheel_node_armed(n))) /* misuse: treat as a move */
        unlink_node(w, &n->link);
    else
        w->count++;
    n->deadline = deadline_ns;
    place(w, idx, n, expiry_tick(w, deadline_ns));
}

void sluice__wheel_del(struct sluice__wheel *w, uint32_t idx) {
    struct sluice__wheel_node *n = sluice__wheel_node_at(w->arena, idx);
    if (!sluice__wheel_node_armed(n)) return;
    unlink_node(w, &n->link);
    n->link.prev = n->link.next = SLUICE__WHEEL_NONE;
    w->count--;
}

void sluice__wheel_set(struct sluice__wheel *w, uint32_t idx, uint64_t deadline_ns) {
    struct sluice__wheel_node *n = sluice__wheel_node_at(w->arena, idx);
    if (LIKELY(sluice__wheel_node_armed(n))) {
        if (deadline_ns >= n->deadline) {
            /* Later: the node's slot is still reached no later than the new
             * deadline; sluice__wheel_pop will see the true deadline and move it on. */
            n->deadline = deadline_ns;
            return;
        }
        unlink_node(w, &n->link);
    } else {
        w->count++;
    }
    n->deadline = deadline_ns;
    place(w, idx, n, expiry_tick(w, deadline_ns));
}

void sluice__wheel_advance(struct sluice__wheel *w, uint64_t now_ns) {
    uint64_t nt = tick_at(w, now_ns);
    uint64_t c = w->curtick;
    if (nt <= c) {
        /* Same tick (or time went back): nothing moves. Defensive only: an
         * empty expired list already implies next_tick > curtick. */
        if (w->next_tick <= c && list_empty(w, SLUICE__WHEEL_HEAD_EXPIRED)) refresh_next(w);
        return;
    }
    if (nt < w->next_tick) {
        /* Nothing starts in (c, nt]: every occupied slot keeps its digit
         * ahead of nt's at the same upper bits, and overflow its epoch. */
        w->curtick = nt;
        w->cur_ns = mul_sat(nt, w->tick_ns);
        return;
    }
    for (unsigned level = 0; level < SLUICE__WHEEL_LEVELS; level++) {
        uint64_t o = w->occ[level];
        if (!o) continue;
        unsigned up = UPPER_SHIFT(level);
        uint64_t reached;
        if ((nt >> up) != (c >> up)) {
            reached = o; /* nt is past this level's whole span */
        } else {
            unsigned d = (unsigned)(nt >> DIGIT_SHIFT(level)) & (SLUICE__WHEEL_SLOTS - 1);
            reached = o & (UINT64_MAX >> (63 - d)); /* slots 0..d */
        }
        if (!reached) continue;
        w->occ[level] = o & ~reached;
        do {
            unsigned s = ctz64(reached);
            reached &= reached - 1;
            splice_expired(w, level * SLUICE__WHEEL_SLOTS + s);
        } while (reached);
    }
    if ((nt >> TOP_SHIFT) != (c >> TOP_SHIFT)) splice_expired(w, SLUICE__WHEEL_HEAD_OVERFLOW);
    w->curtick = nt;
    w->cur_ns = mul_sat(nt, w->tick_ns);
    refresh_next(w);
}

/* Node i (n), first on the expired list and not due, goes where the
 * placement rule says, and with it every node after it on the expired list
 * bound for the same list: moved as one piece, so the lists end exactly as
 * placing them one by one would leave them (each appended in turn), at a few
 * instructions a node instead of an expiry tick and a placement each. Nodes
 * armed together for one tick (a burst of keys at one time) lie together on
 * the list of the slot that held them, so reaching a coarse slot cascades
 * its nodes a run at a time. The run's deadlines are those whose expiry
 * tick falls in the target slot's span: (start - 1) * tick < D <= end * tick,
 * all later than cur_ns (start > curtick), so none of them is due. */
#if defined(__GNUC__) || defined(__clang__)
__attribute__((noinline)) /* off sluice__wheel_pop's path for a due node (its registers) */
#endif
static void
cascade(struct sluice__wheel *w, uint32_t i, struct sluice__wheel_node *n) {
    struct sluice__wheel_link *ex = &w->heads[SLUICE__WHEEL_HEAD_EXPIRED];
    const uint64_t c = w->curtick;
    const uint64_t e = expiry_tick(w, n->deadline); /* > c: not due */
    const unsigned level = (63u - clz64(e ^ c)) / SLUICE__WHEEL_SLOT_BITS;
    if (UNLIKELY(level >= SLUICE__WHEEL_LEVELS)) { /* overflow: one at a time */
        uint32_t x = n->link.next;
        ex->next = x;
        link_of(w, x)->prev = EXPIRED_IDX;
        place(w, i, n, e);
        return;
    }
    const unsigned sh = DIGIT_SHIFT(level);
    const unsigned s = (unsigned)(e >> sh) & (SLUICE__WHEEL_SLOTS - 1);
    const uint64_t start = e & ~((UINT64_C(1) << sh) - 1);
    /* start + 2^sh - 1 keeps start's upper bits: no overflow. */
    const uint64_t lo = mul_sat(start - 1, w->tick_ns), hi = mul_sat(start + ((UINT64_C(1) << sh) - 1), w->tick_ns);
    uint32_t last = i;
    struct sluice__wheel_node *ln = n;
    uint32_t x = n->link.next;
    /* lo < D <= hi as one unsigned test: D - (lo + 1) <= hi - (lo + 1).
     * (n's own deadline is in the span, so lo < hi; a saturated lo would
     * leave no deadline above it.) */
    const uint64_t first = lo + 1, span = hi - first;
    while (x < SLUICE__WHEEL_HEAD_BASE && lo != UINT64_MAX) {
        struct sluice__wheel_node *xn = sluice__wheel_node_at(w->arena, x);
        if (xn->deadline - first > span) break;
        last = x;
        ln = xn;
        x = xn->link.next;
    }
    /* off the head of the expired list ... */
    ex->next = x;
    link_of(w, x)->prev = EXPIRED_IDX;
    /* ... onto the tail of slot s of `level` */
    const uint32_t h = level * SLUICE__WHEEL_SLOTS + s;
    struct sluice__wheel_link *hd = &w->heads[h];
    const uint32_t tail = hd->prev;
    n->link.prev = tail;
    link_of(w, tail)->next = i;
    ln->link.next = SLUICE__WHEEL_HEAD_BASE + h;
    hd->prev = last;
    w->occ[level] |= UINT64_C(1) << s;
    if (start < w->next_tick) w->next_tick = start;
}

uint32_t sluice__wheel_pop(struct sluice__wheel *w) {
    struct sluice__wheel_link *ex = &w->heads[SLUICE__WHEEL_HEAD_EXPIRED];
    const uint64_t now = w->cur_ns;
    while (ex->next != EXPIRED_IDX) {
        uint32_t i = ex->next;
        struct sluice__wheel_node *n = sluice__wheel_node_at(w->arena, i);
        if (n->deadline > now) {
            /* Not due (a coarse slot reached, or moved later since it was
             * placed): E > curtick, so it never lands on the expired list
             * again. */
            cascade(w, i, n);
            continue;
        }
        uint32_t x = n->link.next;
        struct sluice__wheel_link *xl = link_of(w, x);
        /* Ask for the next node's line now: its miss then overlaps with the
         * caller's handling of this node (the walk is a dependent chain, so
         * nothing further ahead is known). */
        PREFETCH_W(xl);
        ex->next = x;
        xl->prev = EXPIRED_IDX;
        n->link.prev = n->link.next = SLUICE__WHEEL_NONE;
        w->count--;
        if (x == EXPIRED_IDX) refresh_next(w);
        return i;
    }
    if (w->next_tick <= w->curtick) refresh_next(w);
    return SLUICE__WHEEL_NONE;
}

void sluice__wheel_relocate(struct sluice__wheel *w, uint32_t to) {
    struct sluice__wheel_node *n = sluice__wheel_node_at(w->arena, to);
    if (!sluice__wheel_node_armed(n)) return;
    link_of(w, n->link.prev)->next = to;
    link_of(w, n->link.next)->prev = to;
}

/* ---- invariant checker -------------------------------------------------- */

#define FAIL(...)                                                                                                      \
    do {                                                                                                               \
        fprintf(stderr, "sluice__wheel_check failed (wheel.c:%d): ", __LINE__);                                        \
        fprintf(stderr, __VA_ARGS__);                                                                                  \
        fputc('\n', stderr);                                                                                           \
        return -__LINE__;                                                                                              \
    } while (0)

int sluice__wheel_check(const struct sluice__wheel *w) {
    const uint64_t t = w->tick_ns;
    const uint64_t c = w->curtick;
    if (t == 0) FAIL("tick_ns is 0");
    if (w->recip != (t == 1 ? 0 : recip_of(t)))
        FAIL("recip %llu wrong for tick %llu", (unsigned long long)w->recip, (unsigned long long)t);
    if (w->cur_ns != mul_sat(c, t))
        FAIL("cur_ns %llu != curtick %llu * tick %llu", (unsigned long long)w->cur_ns, (unsigned long long)c,
             (unsigned long long)t);

    uint64_t seen = 0;
    uint64_t earliest = UINT64_MAX; /* first slot start (or epoch start) holding a node */
    for (uint32_t h = 0; h < SLUICE__WHEEL_HEADS; h++) {
        const uint32_t hidx = SLUICE__WHEEL_HEAD_BASE + h;
        const struct sluice__wheel_link *hd = &w->heads[h];
        if ((hd->next >= SLUICE__WHEEL_HEAD_BASE && hd->next != hidx) ||
            (hd->prev >= SLUICE__WHEEL_HEAD_BASE && hd->prev != hidx))
            FAIL("head %u links to a foreign head (next %#x prev %#x)", h, hd->next, hd->prev);
        if ((hd->next == hidx) != (hd->prev == hidx))
            FAIL("head %u half empty (next %#x prev %#x)", h, hd->next, hd->prev);
        const bool empty = hd->next == hidx;
        unsigned level = h / SLUICE__WHEEL_SLOTS, slot = h % SLUICE__WHEEL_SLOTS;
        uint64_t slot_start = 0;
        if (h < WHEEL_HEADS) {
            bool bit = (w->occ[level] >> slot) & 1;
            if (bit == empty)
                FAIL("level %u slot %u: occupancy bit %d but list %s", level, slot, (int)bit,
                     empty ? "empty" : "non-empty");
            if (empty) continue;
            unsigned digit = (unsigned)(c >> DIGIT_SHIFT(level)) & (SLUICE__WHEEL_SLOTS - 1);
            if (slot <= digit)
                FAIL("level %u slot %u occupied but curtick %llu is at digit %u (slot behind)", level, slot,
                     (unsigned long long)c, digit);
            unsigned up = UPPER_SHIFT(level);
            slot_start = ((c >> up) << up) | ((uint64_t)slot << DIGIT_SHIFT(level));
            if (slot_start < earliest) earliest = slot_start;
        } else if (h == SLUICE__WHEEL_HEAD_OVERFLOW && !empty) {
            if ((c >> TOP_SHIFT) == (UINT64_MAX >> TOP_SHIFT)) FAIL("overflow list non-empty in the last epoch");
            uint64_t ep = next_epoch(c);
            if (ep < earliest) earliest = ep;
        }
        if (empty) continue;

        uint32_t prev = hidx, cur = hd->next;
        while (cur != hidx) {
            if (cur >= SLUICE__WHEEL_HEAD_BASE) FAIL("list %u reaches foreign head or bad index %#x", h, cur);
            if (++seen > w->count)
                FAIL("more nodes in lists than count %llu (cycle or lost count) in list %u",
                     (unsigned long long)w->count, h);
            const struct sluice__wheel_node *n = sluice__wheel_node_at(w->arena, cur);
            if (n->link.prev != prev) FAIL("list %u: node %u prev %#x, expected %#x", h, cur, n->link.prev, prev);
            uint64_t e = n->deadline / t + (n->deadline % t != 0); /* independent of recip */
            if (h < WHEEL_HEADS) {
                if (slot_start > e)
                    FAIL("node %u (deadline %llu, E %llu) sits in level %u slot %u starting at tick %llu: "
                         "reached late",
                         cur, (unsigned long long)n->deadline, (unsigned long long)e, level, slot,
                         (unsigned long long)slot_start);
            } else if (h == SLUICE__WHEEL_HEAD_OVERFLOW) {
                if ((e >> TOP_SHIFT) <= (c >> TOP_SHIFT))
                    FAIL("overflow node %u (E %llu) is within the current epoch of curtick %llu", cur,
                         (unsigned long long)e, (unsigned long long)c);
            }
            prev = cur;
            cur = n->link.next;
        }
        if (hd->prev != prev) FAIL("list %u: head prev %#x but last node %#x", h, hd->prev, prev);
    }
    if (seen != w->count)
        FAIL("count %llu but %llu nodes in lists", (unsigned long long)w->count, (unsigned long long)seen);
    if (!list_empty(w, SLUICE__WHEEL_HEAD_EXPIRED)) {
        if (w->next_tick > c)
            FAIL("expired list non-empty but next_tick %llu > curtick %llu", (unsigned long long)w->next_tick,
                 (unsigned long long)c);
    } else {
        if (w->next_tick > earliest)
            FAIL("next_tick %llu above the first occupied slot start %llu", (unsigned long long)w->next_tick,
                 (unsigned long long)earliest);
        /* Nothing waits to be popped, so no work is due now: a next_tick at
         * or before curtick would make an event loop spin. */
        if (w->next_tick <= c && w->next_tick != UINT64_MAX)
            FAIL("expired list empty but next_tick %llu <= curtick %llu (stale)", (unsigned long long)w->next_tick,
                 (unsigned long long)c);
    }
    return 0;
}
