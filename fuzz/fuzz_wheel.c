/*
 * fuzz_wheel.c — libFuzzer harness for the timer wheel (Sources/CSluice/wheel.c).
 *
 * Build and run (from the repository root):
 *   /opt/swift/usr/bin/clang -std=c11 -g -O1 -fsanitize=fuzzer,address,undefined \
 *       -I Sources/CSluice Sources/CSluice/wheel.c fuzz/fuzz_wheel.c -o /tmp/fuzz_wheel
 *   /tmp/fuzz_wheel -max_total_time=60 fuzz/corpus/wheel
 *
 * The input drives a 16-record arena through wheel operations and a
 * brute-force reference (armed flag + deadline per record). After every
 * operation sluice__wheel_check must pass and the wheel must agree with the reference;
 * any early, late, missing, double or phantom fire abort()s.
 *
 * Input format (missing bytes read as 0):
 *   byte 0      tick: index into `ticks` below (mod 16)
 *   byte 1      bits 0-1 record layout, bit 2 chunked arena (4 records per
 *               chunk), bits 3-4 how bytes 2..9 give the start time
 *   bytes 2..9  start time (little endian)
 *   then ops:   opcode byte, record byte, operands (see run_op)
 *
 * Seeds in fuzz/corpus/wheel were written by this Python snippet:
 *   import os, struct
 *   d = "fuzz/corpus/wheel"; os.makedirs(d, exist_ok=True)
 *   def hdr(tick, cfg, now): return bytes([tick, cfg]) + struct.pack("<Q", now)
 *   seeds = {
 *    "basic-1ms":    hdr(2, 0, 10**9) + bytes([0,1,7,5, 0,2,8,9, 5,0,7,200,0, 9,0]),
 *    "tick1-far":    hdr(0, 4, 12345) + bytes([0,3,12,60, 0,4,10]+[0xff]*8+[5,0,10,0,0,0,0,0,0,1,0,0, 9,0]),
 *    "extend":       hdr(1, 1, 5000) + bytes([0,1,7,9, 4,1,7,3, 4,1,8,1,1, 5,0,7,50,0, 9,0]),
 *    "earlier":      hdr(3, 2, 77) + bytes([0,5,9,255,255,255,255, 3,5,1,9, 5,0,7,20,2, 6,0, 9,0]),
 *    "relocate":     hdr(2, 5, 10**12) + bytes([0,1,7,4, 0,2,4,9, 7,1,9, 7,2,10, 8,0,0, 9,0]),
 *    "end-of-time":  hdr(0, 16, 2**64-1000) + bytes([0,0,5,3, 0,1,11, 5,0,5,0,0, 9,0]),
 *    "backwards":    hdr(4, 3, 10**15) + bytes([0,1,7,9, 5,0,4,0,200,0, 5,0,7,10,0, 9,0]),
 *    "driver":       hdr(5, 6, 999) + bytes([0,1,13,7, 0,2,14,3, 0,3,15,1, 8,0,0, 8,0,0, 8,0,0, 8,0,1, 9,0]),
 *    "boundaries":   hdr(7, 7, 3*10**9) + bytes([0,1,6,17, 0,2,6,33, 0,3,6,50, 5,0,6,1,0, 9,0]),
 *    "huge-tick":    hdr(15, 0, 2**63) + bytes([0,1,10]+[0xff]*8+[0,2,2,1,0,0,0, 5,0,5,0,0, 9,0]),
 *    "mixed":        hdr(9, 12, 2**40) + bytes([0,1,12,40, 0,2,12,20, 0,3,13,9, 1,2, 2,3,8,1,0, 5,0,9,0,0,1,0,3, 6,0, 7,1,0, 9,0]),
 *   }
 *   for k, v in seeds.items(): open(os.path.join(d, k), "wb").write(v)
 */
#include "wheel-internal.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NREC 16u

static const uint64_t ticks[16] = { 1,
                                    1000,
                                    1000000,
                                    7000000,
                                    3,
                                    64,
                                    4096,
                                    999999937,
                                    UINT64_C(1) << 40,
                                    1000000000,
                                    2,
                                    13,
                                    UINT64_C(0xFFFFFFFFFFFF),
                                    UINT64_MAX / 3,
                                    UINT64_MAX - 1,
                                    UINT64_MAX };

static const uint32_t layouts[4][3] = {
    { 24, 8, 0 }, { 24, 0, 16 }, { 32, 16, 0 }, { 64, 40, 8 }
}; /* stride, node, tag */

struct in {
    const uint8_t *p;
    size_t n;
};
static uint8_t u8(struct in *in) {
    if (!in->n) return 0;
    in->n--;
    return *in->p++;
}
static uint64_t un(struct in *in, unsigned bytes) {
    uint64_t v = 0;
    for (unsigned k = 0; k < bytes; k++) v |= (uint64_t)u8(in) << (8 * k);
    return v;
}

static uint64_t add_sat(uint64_t a, uint64_t b) { return a > UINT64_MAX - b ? UINT64_MAX : a + b; }
static uint64_t mul_sat(uint64_t a, uint64_t b) { return (b && a > UINT64_MAX / b) ? UINT64_MAX : a * b; }
static uint64_t fire_time(uint64_t d, uint64_t t) { return mul_sat(d / t + (d % t != 0), t); }

struct fz {
    struct sluice__wheel w;
    struct sluice__wheel_arena a;
    unsigned char *chunk[NREC];
    uint32_t nchunks, shift, stride, node_off, tag_off;
    uint64_t tick, now, count, drains, last_drain_cur, next_tag;
    uint8_t armed[NREC];
    uint64_t dl[NREC], tag[NREC], set_drain[NREC];
};

#define FAIL(...)                                                                                                      \
    do {                                                                                                               \
        fprintf(stderr, "fuzz_wheel: ");                                                                               \
        fprintf(stderr, __VA_ARGS__);                                                                                  \
        fprintf(stderr, " (tick %llu, now %llu)\n", (unsigned long long)f->tick, (unsigned long long)f->now);          \
        abort();                                                                                                       \
    } while (0)
#define U(x) ((unsigned long long)(x))

static struct sluice__wheel_node *node(struct fz *f, uint32_t i) { return sluice__wheel_node_at(&f->a, i); }
static uint64_t *tagp(struct fz *f, uint32_t i) {
    return (uint64_t *)(void *)(f->a.chunks[i >> f->shift] + (size_t)(i & ((UINT32_C(1) << f->shift) - 1)) * f->stride +
                                f->tag_off);
}
/* The wheel's time: now rounded down to a tick, except at the end of time
 * (now == UINT64_MAX) when every deadline is due. */
static uint64_t cur_ns(const struct fz *f) {
    if (f->now == UINT64_MAX) return UINT64_MAX;
    return (f->now / f->tick) * f->tick;
}

static void verify(struct fz *f) {
    if (sluice__wheel_check(&f->w) != 0) FAIL("sluice__wheel_check failed");
    if (f->w.count != f->count) FAIL("count %llu, model %llu", U(f->w.count), U(f->count));
    if (f->w.cur_ns != cur_ns(f)) FAIL("cur_ns %llu, model %llu", U(f->w.cur_ns), U(cur_ns(f)));
    uint64_t mindl = UINT64_MAX;
    for (uint32_t i = 0; i < NREC; i++) {
        const struct sluice__wheel_node *n = node(f, i);
        if (sluice__wheel_node_armed(n) != (f->armed[i] != 0))
            FAIL("node %u armed %d, model %d", i, sluice__wheel_node_armed(n), f->armed[i]);
        if (*tagp(f, i) != f->tag[i]) FAIL("node %u record clobbered", i);
        if (f->armed[i]) {
            if (n->deadline != f->dl[i]) FAIL("node %u deadline %llu, model %llu", i, U(n->deadline), U(f->dl[i]));
            if (f->dl[i] < mindl) mindl = f->dl[i];
        }
    }
    uint64_t nx = sluice__wheel_next(&f->w);
    if (f->count) {
        uint64_t bound = fire_time(mindl, f->tick);
        if (bound < f->w.cur_ns) bound = f->w.cur_ns;
        if (nx > bound) FAIL("sluice__wheel_next %llu above first fire time %llu", U(nx), U(bound));
    } else if (nx != UINT64_MAX) {
        FAIL("sluice__wheel_next %llu on an empty wheel", U(nx));
    }
}

static void drained(struct fz *f) {
    uint64_t cur = cur_ns(f);
    for (uint32_t i = 0; i < NREC; i++)
        if (f->armed[i] && f->dl[i] <= cur)
            FAIL("LATE/LOST: node %u deadline %llu <= %llu left", i, U(f->dl[i]), U(cur));
    if (f->count && sluice__wheel_next(&f->w) <= cur)
        FAIL("sluice__wheel_next %llu <= cur %llu after a drain", U(sluice__wheel_next(&f->w)), U(cur));
    if (sluice__wheel_pop(&f->w) != SLUICE__WHEEL_NONE) FAIL("second pop after a drain");
    f->drains++;
    f->last_drain_cur = cur;
}

/* Pops up to `limit` (0: all); checks every popped node. */
static void pop(struct fz *f, unsigned limit) {
    uint64_t cur = cur_ns(f);
    for (unsigned got = 0; !limit || got < limit; got++) {
        uint32_t i = sluice__wheel_pop(&f->w);
        if (i == SLUICE__WHEEL_NONE) {
            drained(f);
            return;
        }
        if (i >= NREC) FAIL("popped bad index %#x", i);
        if (!f->armed[i]) FAIL("DOUBLE/PHANTOM fire of node %u", i);
        if (f->dl[i] > cur) FAIL("EARLY fire: node %u deadline %llu > %llu", i, U(f->dl[i]), U(cur));
        if (f->set_drain[i] < f->drains && f->dl[i] <= f->last_drain_cur)
            FAIL("LATE fire: node %u deadline %llu was due at an earlier drain", i, U(f->dl[i]));
        if (sluice__wheel_node_armed(node(f, i))) FAIL("popped node %u still armed", i);
        f->armed[i] = 0;
        f->count--;
        if (f->count &&
            f->w.heads[SLUICE__WHEEL_HEAD_EXPIRED].next == SLUICE__WHEEL_HEAD_BASE + SLUICE__WHEEL_HEAD_EXPIRED &&
            sluice__wheel_next(&f->w) <= cur)
            FAIL("sluice__wheel_next not refreshed after the last due pop");
    }
}

static uint64_t read_time(struct fz *f, struct in *in, uint64_t base) {
    uint8_t s = u8(in);
    uint64_t t = f->tick;
    switch (s & 15) {
    case 0: return add_sat(base, u8(in));
    case 1: return add_sat(base, un(in, 2));
    case 2: return add_sat(base, un(in, 4));
    case 3: {
        uint64_t v = un(in, 8);
        return add_sat(base, v >> (u8(in) & 63));
    }
    case 4: {
        uint64_t v = un(in, 2);
        return base > v ? base - v : 0;
    }
    case 5: return UINT64_MAX - u8(in);
    case 6: { /* around a tick boundary */
        uint64_t b = mul_sat(add_sat(base / t, u8(in)), t);
        unsigned k = (s >> 4) % 3;
        return k == 0 ? b - (b > 0) : k == 1 ? b : add_sat(b, 1);
    }
    case 7: return add_sat(base, mul_sat(u8(in), t));
    case 8: return add_sat(base, mul_sat(un(in, 2), t));
    case 9: return add_sat(base, mul_sat(un(in, 4), t));
    case 10: return un(in, 8);
    case 11: return base;
    case 12: return add_sat(base, mul_sat(UINT64_C(1) << (u8(in) & 63), t));
    default: /* a few slots of one level */
        return add_sat(base, mul_sat(mul_sat(u8(in), t), UINT64_C(1) << (6 * ((s >> 4) % 9))));
    }
}

static void set_model(struct fz *f, uint32_t i, uint64_t d) {
    if (!f->armed[i]) f->count++;
    f->armed[i] = 1;
    f->dl[i] = d;
    f->set_drain[i] = f->drains;
}

static void do_set(struct fz *f, uint32_t i, uint64_t d) {
    struct sluice__wheel_link before = node(f, i)->link;
    int later = f->armed[i] && d >= f->dl[i];
    sluice__wheel_set(&f->w, i, d);
    if (later && (node(f, i)->link.prev != before.prev || node(f, i)->link.next != before.next))
        FAIL("extending node %u moved it", i);
    set_model(f, i, d);
}

static void run_op(struct fz *f, struct in *in) {
    uint8_t op = u8(in);
    uint32_t i = u8(in) % NREC;
    switch (op % 10) {
    case 0: { /* arm */
        uint64_t d = read_time(f, in, f->now);
        if (f->armed[i]) {
            do_set(f, i, d);
        } else {
            sluice__wheel_add(&f->w, i, d);
            set_model(f, i, d);
        }
        break;
    }
    case 1:
        sluice__wheel_del(&f->w, i);
        if (f->armed[i]) f->count--;
        f->armed[i] = 0;
        break;
    case 2: do_set(f, i, read_time(f, in, f->now)); break;
    case 3: { /* earlier */
        uint64_t back = read_time(f, in, 0);
        if (f->armed[i]) do_set(f, i, f->dl[i] > back ? f->dl[i] - back : 0);
        break;
    }
    case 4: { /* later */
        uint64_t fwd = read_time(f, in, 0);
        if (f->armed[i]) do_set(f, i, add_sat(f->dl[i], fwd));
        break;
    }
    case 5: { /* advance (maybe backwards), then pop */
        uint64_t t = read_time(f, in, f->now);
        sluice__wheel_advance(&f->w, t);
        if (t > f->now) f->now = t;
        pop(f, u8(in) % 4);
        break;
    }
    case 6: pop(f, 1); break;
    case 7: { /* compaction: move record i to a free index */
        uint32_t j = u8(in) % NREC;
        if (j == i || f->armed[j]) break;
        unsigned char *src = (unsigned char *)tagp(f, i) - f->tag_off, *dst = (unsigned char *)tagp(f, j) - f->tag_off;
        memcpy(dst, src, f->stride);
        sluice__wheel_relocate(&f->w, j);
        memset(src, 0x5A, f->stride);
        sluice__wheel_node_init(node(f, i));
        f->tag[j] = f->tag[i];
        f->tag[i] = ++f->next_tag;
        *tagp(f, i) = f->tag[i];
        f->armed[j] = f->armed[i];
        f->dl[j] = f->dl[i];
        f->set_drain[j] = f->set_drain[i];
        f->armed[i] = 0;
        break;
    }
    case 8: { /* event-loop style: wake where the wheel says */
        uint64_t nx = sluice__wheel_next(&f->w);
        if (nx == UINT64_MAX) break;
        if (i & 1) nx -= nx > 0;
        sluice__wheel_advance(&f->w, nx);
        if (nx > f->now) f->now = nx;
        pop(f, 0);
        break;
    }
    default: pop(f, 0); break;
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    struct in in = { data, size };
    static struct fz fz;
    struct fz *f = &fz;
    memset(f, 0, sizeof *f);
    uint8_t tsel = u8(&in), cfg = u8(&in);
    f->tick = ticks[tsel % 16];
    f->stride = layouts[cfg & 3][0];
    f->node_off = layouts[cfg & 3][1];
    f->tag_off = layouts[cfg & 3][2];
    f->shift = (cfg & 4) ? 2 : 31;
    f->nchunks = (cfg & 4) ? NREC / 4 : 1;
    uint64_t raw = un(&in, 8);
    switch ((cfg >> 3) & 3) {
    case 0: f->now = raw & 0xFFFFFFFFFFFFu; break;
    case 1: f->now = raw; break;
    case 2: f->now = UINT64_MAX - (raw & 0xFFFFFFFFu); break;
    default: f->now = raw >> 20; break;
    }
    unsigned char **table = malloc(f->nchunks * sizeof *table);
    if (!table) return 0;
    uint32_t per = NREC / f->nchunks;
    for (uint32_t k = 0; k < f->nchunks; k++) {
        table[k] = malloc((size_t)per * f->stride);
        if (!table[k]) abort();
        memset(table[k], 0xA5, (size_t)per * f->stride);
    }
    f->a.chunks = table;
    f->a.chunk_shift = f->shift;
    f->a.stride = f->stride;
    f->a.node_off = f->node_off;
    for (uint32_t i = 0; i < NREC; i++) {
        sluice__wheel_node_init(node(f, i));
        f->tag[i] = ++f->next_tag;
        *tagp(f, i) = f->tag[i];
    }
    sluice__wheel_init(&f->w, &f->a, f->tick, f->now);
    verify(f);
    while (in.n) {
        run_op(f, &in);
        verify(f);
    }
    /* Run to the end of time: everything that any tick reaches must fire. */
    sluice__wheel_advance(&f->w, UINT64_MAX);
    f->now = UINT64_MAX;
    pop(f, 0);
    verify(f);
    for (uint32_t i = 0; i < NREC; i++)
        if (f->armed[i] && f->dl[i] <= cur_ns(f)) FAIL("node %u never fired", i);
    for (uint32_t k = 0; k < f->nchunks; k++) free(table[k]);
    free(table);
    return 0;
}
