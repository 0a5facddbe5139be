/*
 * test_wheel.c — tests of the timer wheel (Sources/CSluice/wheel.c) against a
 * brute-force reference model.
 *
 *   gcc -std=c11 -O2 -Wall -Wextra -I Sources/CSluice Sources/CSluice/wheel.c ctests/test_wheel.c -o test_wheel
 *   ./test_wheel [seed [scale]]
 *
 * Exit status 0 when every check passed; otherwise the first failed check is
 * printed with the seed, the scenario and the step, and the status is 1.
 *
 * The reference model keeps, for every record, whether it is armed and its
 * deadline. After any sluice__wheel_advance(now) the wheel's time is
 * floor(max now / tick) * tick, or UINT64_MAX once now is UINT64_MAX
 * (ref_cur_ns): a popped node must have a deadline
 * <= ref_cur_ns (else it fired early), and once sluice__wheel_pop returns SLUICE__WHEEL_NONE no armed
 * node may have a deadline <= ref_cur_ns (else it is late or lost).
 */
#define _POSIX_C_SOURCE 200809L
#include "wheel-internal.h"

#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- check machinery ---------------------------------------------------- */

#define TEST_NAME "test_wheel"
#define SCENARIO_SEED 0x5eed5eedULL
#include "support/scenario.h"
static int chance(unsigned percent) { return rndn(100) < percent; }
/* rnd() >> (lo + rndn(span)), with the two draws in a fixed order (so a seed
 * gives the same run whatever the compiler's argument evaluation order). */
static uint64_t rnd_shr(unsigned lo, unsigned span) {
    unsigned sh = lo + (unsigned)rndn(span);
    return rnd() >> sh;
}

static uint64_t add_sat(uint64_t a, uint64_t b) { return a > UINT64_MAX - b ? UINT64_MAX : a + b; }
static uint64_t mul_sat(uint64_t a, uint64_t b) { return (b && a > UINT64_MAX / b) ? UINT64_MAX : a * b; }
static uint64_t ceil_div(uint64_t a, uint64_t b) { return a / b + (a % b != 0); }
/* The time at which the wheel can first report deadline d (saturated). */
static uint64_t fire_time(uint64_t d, uint64_t t) { return mul_sat(ceil_div(d, t), t); }

#define NS_US UINT64_C(1000)
#define NS_MS UINT64_C(1000000)
#define NS_S UINT64_C(1000000000)
#define NS_DAY (UINT64_C(86400) * NS_S)
#define NS_YEAR (UINT64_C(31557600) * NS_S)

/* ---- arena + reference model ------------------------------------------- */

struct model {
    struct sluice__wheel w;
    struct sluice__wheel_arena a;
    uint32_t n, shift, nchunks, stride, node_off, tag_off;
    uint64_t tick, now;
    uint8_t *armed;
    uint64_t *dl;
    uint64_t *tag;       /* expected tag stored in each record */
    uint64_t *set_cur;   /* driver test: cur_ns when a deadline already due was set */
    uint32_t *set_drain; /* full drains done when the deadline was last set */
    uint64_t count, next_tag;
    uint64_t last_drain_cur; /* cur_ns at the last full drain */
    unsigned check_every;    /* m_verify every this many steps (0: never) */
    unsigned scan_every;     /* brute-force scan every this many full drains (0: never) */
    unsigned long long pops, drains, relocs, extends;
};

static struct sluice__wheel_node *m_node(struct model *m, uint32_t i) { return sluice__wheel_node_at(&m->a, i); }
static uint64_t *m_tagp(struct model *m, uint32_t i) {
    return (uint64_t *)(void *)(m->a.chunks[i >> m->shift] + (size_t)(i & ((UINT32_C(1) << m->shift) - 1)) * m->stride +
                                m->tag_off);
}
/* At the end of time (now == UINT64_MAX) every deadline is due: the wheel
 * reaches the tick holding UINT64_MAX even when that tick ends past 2^64. */
static uint64_t ref_cur_ns(const struct model *m) {
    if (m->now == UINT64_MAX) return UINT64_MAX;
    return (m->now / m->tick) * m->tick;
}

/* Layouts: (stride, node_off, tag_off). All keep the node 8-byte aligned. */
static const uint32_t layouts[][3] = { { 24, 8, 0 }, { 24, 0, 16 }, { 32, 16, 0 }, { 64, 40, 8 } };

static void model_init(struct model *m, uint32_t n, uint32_t shift, unsigned layout, uint64_t tick, uint64_t now0) {
    memset(m, 0, sizeof *m);
    m->n = n;
    m->shift = shift;
    m->stride = layouts[layout][0];
    m->node_off = layouts[layout][1];
    m->tag_off = layouts[layout][2];
    uint64_t per = UINT64_C(1) << shift;
    m->nchunks = (uint32_t)((n + per - 1) / per);
    unsigned char **chunks = calloc(m->nchunks, sizeof *chunks);
    CHECK(chunks != NULL, "out of memory");
    for (uint32_t k = 0; k < m->nchunks; k++) {
        uint64_t recs = n - (uint64_t)k * per < per ? n - (uint64_t)k * per : per;
        chunks[k] = malloc((size_t)recs * m->stride);
        CHECK(chunks[k] != NULL, "out of memory");
        memset(chunks[k], 0xA5, (size_t)recs * m->stride); /* garbage outside the fields */
    }
    m->a.chunks = chunks;
    m->a.chunk_shift = shift;
    m->a.stride = m->stride;
    m->a.node_off = m->node_off;
    m->armed = calloc(n, 1);
    m->dl = calloc(n, sizeof *m->dl);
    m->tag = calloc(n, sizeof *m->tag);
    m->set_cur = calloc(n, sizeof *m->set_cur);
    m->set_drain = calloc(n, sizeof *m->set_drain);
    CHECK(m->armed && m->dl && m->tag && m->set_cur && m->set_drain, "out of memory");
    for (uint32_t i = 0; i < n; i++) {
        sluice__wheel_node_init(m_node(m, i));
        m->tag[i] = ++m->next_tag;
        *m_tagp(m, i) = m->tag[i];
    }
    m->tick = tick;
    m->now = now0;
    m->check_every = 1;
    m->scan_every = 1;
    sluice__wheel_init(&m->w, &m->a, tick, now0);
    CHECK(m->w.cur_ns == ref_cur_ns(m), "init cur_ns %llu, expected %llu", U(m->w.cur_ns), U(ref_cur_ns(m)));
    CHECK(sluice__wheel_next(&m->w) == UINT64_MAX, "empty wheel next %llu", U(sluice__wheel_next(&m->w)));
}

static void model_free(struct model *m) {
    for (uint32_t k = 0; k < m->nchunks; k++) free(m->a.chunks[k]);
    free(m->a.chunks);
    free(m->armed);
    free(m->dl);
    free(m->tag);
    free(m->set_cur);
    free(m->set_drain);
}

/* The caller may replace its chunk table between wheel calls. */
static void m_move_chunk_table(struct model *m) {
    unsigned char **nt = malloc(m->nchunks * sizeof *nt);
    CHECK(nt != NULL, "out of memory");
    memcpy(nt, m->a.chunks, m->nchunks * sizeof *nt);
    free(m->a.chunks);
    m->a.chunks = nt;
}

/* Everything the model knows, compared with the wheel. */
static void m_verify(struct model *m) {
    int rc = sluice__wheel_check(&m->w);
    CHECK(rc == 0, "sluice__wheel_check returned %d", rc);
    CHECK(m->w.count == m->count, "wheel count %llu, model %llu", U(m->w.count), U(m->count));
    CHECK(m->w.cur_ns == ref_cur_ns(m), "cur_ns %llu, expected %llu", U(m->w.cur_ns), U(ref_cur_ns(m)));
    uint64_t mindl = UINT64_MAX;
    for (uint32_t i = 0; i < m->n; i++) {
        struct sluice__wheel_node *nd = m_node(m, i);
        CHECK(sluice__wheel_node_armed(nd) == (m->armed[i] != 0), "node %u armed %d, model %d", i,
              (int)sluice__wheel_node_armed(nd), m->armed[i]);
        CHECK(*m_tagp(m, i) == m->tag[i], "node %u record tag %llu, expected %llu", i, U(*m_tagp(m, i)), U(m->tag[i]));
        if (m->armed[i]) {
            CHECK(nd->deadline == m->dl[i], "node %u deadline %llu, model %llu", i, U(nd->deadline), U(m->dl[i]));
            if (m->dl[i] < mindl) mindl = m->dl[i];
        } else {
            CHECK(nd->link.next == SLUICE__WHEEL_NONE, "unarmed node %u has next %#x", i, nd->link.next);
        }
    }
    /* sluice__wheel_next is a lower bound of when work appears. */
    uint64_t nx = sluice__wheel_next(&m->w);
    if (m->count) {
        uint64_t bound = fire_time(mindl, m->tick);
        if (bound < m->w.cur_ns) bound = m->w.cur_ns;
        CHECK(nx <= bound, "sluice__wheel_next %llu above the first fire time %llu", U(nx), U(bound));
    } else {
        CHECK(nx == UINT64_MAX, "sluice__wheel_next %llu with nothing armed", U(nx));
    }
}

static void m_step(struct model *m) {
    g_step++;
    if (m->check_every && g_step % m->check_every == 0) m_verify(m);
}

static void m_add(struct model *m, uint32_t i, uint64_t d) {
    CHECK(!m->armed[i], "model bug: add on armed %u", i);
    sluice__wheel_add(&m->w, i, d);
    m->armed[i] = 1;
    m->dl[i] = d;
    m->count++;
    m->set_cur[i] = d <= m->w.cur_ns ? m->w.cur_ns : UINT64_MAX;
    m->set_drain[i] = (uint32_t)m->drains;
}

static void m_del(struct model *m, uint32_t i) {
    sluice__wheel_del(&m->w, i);
    if (m->armed[i]) m->count--;
    m->armed[i] = 0;
    CHECK(!sluice__wheel_node_armed(m_node(m, i)), "node %u still armed after del", i);
}

static void m_set(struct model *m, uint32_t i, uint64_t d) {
    struct sluice__wheel_node *nd = m_node(m, i);
    struct sluice__wheel_link before = nd->link;
    uint64_t occ[SLUICE__WHEEL_LEVELS];
    memcpy(occ, m->w.occ, sizeof occ);
    uint64_t next_before = m->w.next_tick;
    int later = m->armed[i] && d >= m->dl[i];
    sluice__wheel_set(&m->w, i, d);
    if (later) {
        /* Extending must not move the node nor touch the wheel. */
        m->extends++;
        CHECK(nd->link.prev == before.prev && nd->link.next == before.next,
              "extending node %u moved it (%#x,%#x) -> (%#x,%#x)", i, before.prev, before.next, nd->link.prev,
              nd->link.next);
        CHECK(memcmp(occ, m->w.occ, sizeof occ) == 0 && next_before == m->w.next_tick,
              "extending node %u changed the wheel", i);
    }
    if (!m->armed[i]) m->count++;
    m->armed[i] = 1;
    m->set_cur[i] = d <= m->w.cur_ns ? m->w.cur_ns : UINT64_MAX;
    m->set_drain[i] = (uint32_t)m->drains;
    m->dl[i] = d;
}

static uint64_t list_len(struct model *m, uint32_t h) {
    uint64_t l = 0;
    for (uint32_t i = m->w.heads[h].next; i != SLUICE__WHEEL_HEAD_BASE + h; i = m_node(m, i)->link.next) l++;
    return l;
}

/* How many nodes advancing to tick nt must move to the expired list: those
 * of every slot whose start tick is <= nt, and overflow on a new epoch. */
static uint64_t expected_expired_after(struct model *m, uint64_t nt) {
    uint64_t c = m->w.curtick, l = list_len(m, SLUICE__WHEEL_HEAD_EXPIRED);
    if (nt <= c) return l;
    for (uint32_t h = 0; h < SLUICE__WHEEL_LEVELS * SLUICE__WHEEL_SLOTS; h++) {
        unsigned lv = h / SLUICE__WHEEL_SLOTS, up = (lv + 1) * SLUICE__WHEEL_SLOT_BITS;
        uint64_t start = ((c >> up) << up) | ((uint64_t)(h % SLUICE__WHEEL_SLOTS) << (lv * SLUICE__WHEEL_SLOT_BITS));
        if (start <= nt) l += list_len(m, h);
    }
    if ((nt >> (SLUICE__WHEEL_LEVELS * SLUICE__WHEEL_SLOT_BITS)) !=
        (c >> (SLUICE__WHEEL_LEVELS * SLUICE__WHEEL_SLOT_BITS)))
        l += list_len(m, SLUICE__WHEEL_HEAD_OVERFLOW);
    return l;
}

static void m_advance(struct model *m, uint64_t t) {
    uint64_t before = m->w.cur_ns;
    uint64_t nt = t / m->tick;
    if (t == UINT64_MAX && mul_sat(nt, m->tick) != UINT64_MAX) nt++; /* the end of time */
    uint64_t want = m->check_every == 1 ? expected_expired_after(m, nt) : 0;
    sluice__wheel_advance(&m->w, t);
    if (t > m->now) m->now = t;
    CHECK(m->w.cur_ns == ref_cur_ns(m), "after advance(%llu): cur_ns %llu, expected %llu", U(t), U(m->w.cur_ns),
          U(ref_cur_ns(m)));
    CHECK(m->w.cur_ns >= before, "time went back");
    if (m->check_every == 1) {
        uint64_t got = list_len(m, SLUICE__WHEEL_HEAD_EXPIRED);
        CHECK(got == want,
              "advance(%llu) left %llu nodes on the expired list, expected %llu (slots reached early "
              "or late)",
              U(t), U(got), U(want));
    }
}

/* After sluice__wheel_pop returned SLUICE__WHEEL_NONE: nothing due may remain. */
static void m_check_drained(struct model *m) {
    uint64_t cur = ref_cur_ns(m), mindl = UINT64_MAX;
    int scan = m->scan_every && m->drains % m->scan_every == 0;
    for (uint32_t i = 0; scan && i < m->n; i++) {
        if (!m->armed[i]) continue;
        CHECK(m->dl[i] > cur, "LATE/LOST: node %u deadline %llu <= now %llu but sluice__wheel_pop returned none", i,
              U(m->dl[i]), U(cur));
        if (m->dl[i] < mindl) mindl = m->dl[i];
    }
    uint64_t nx = sluice__wheel_next(&m->w);
    if (m->count && !scan) {
        CHECK(nx > cur, "sluice__wheel_next %llu <= cur_ns %llu after a full drain (would busy-loop)", U(nx), U(cur));
    } else if (m->count) {
        CHECK(nx > cur, "sluice__wheel_next %llu <= cur_ns %llu after a full drain (would busy-loop)", U(nx), U(cur));
        CHECK(nx <= fire_time(mindl, m->tick), "sluice__wheel_next %llu above the first fire time %llu", U(nx),
              U(fire_time(mindl, m->tick)));
    } else {
        CHECK(nx == UINT64_MAX, "sluice__wheel_next %llu on an empty wheel", U(nx));
    }
    CHECK(sluice__wheel_pop(&m->w) == SLUICE__WHEEL_NONE, "second pop after a drain returned a node");
    m->drains++;
    m->last_drain_cur = cur;
}

/* One sluice__wheel_pop, checked: returns the index or SLUICE__WHEEL_NONE (after checking that
 * nothing due is left). */
static uint32_t m_pop_one(struct model *m) {
    uint64_t cur = ref_cur_ns(m);
    uint32_t i = sluice__wheel_pop(&m->w);
    if (i == SLUICE__WHEEL_NONE) {
        m_check_drained(m);
        return i;
    }
    CHECK(i < m->n, "popped bad index %#x", i);
    CHECK(m->armed[i], "DOUBLE/PHANTOM fire: popped node %u is not armed", i);
    CHECK(m->dl[i] <= cur, "EARLY fire: node %u deadline %llu > now %llu", i, U(m->dl[i]), U(cur));
    CHECK(!(m->set_drain[i] < m->drains && m->dl[i] <= m->last_drain_cur),
          "LATE fire: node %u deadline %llu was already due at an earlier full drain (at %llu)", i, U(m->dl[i]),
          U(m->last_drain_cur));
    CHECK(!sluice__wheel_node_armed(m_node(m, i)), "popped node %u still armed", i);
    CHECK(*m_tagp(m, i) == m->tag[i], "popped node %u has the wrong record", i);
    m->armed[i] = 0;
    m->count--;
    m->pops++;
    if (m->count && m->w.heads[SLUICE__WHEEL_HEAD_EXPIRED].next == SLUICE__WHEEL_HEAD_BASE + SLUICE__WHEEL_HEAD_EXPIRED)
        CHECK(sluice__wheel_next(&m->w) > cur,
              "sluice__wheel_next %llu <= cur_ns %llu after the last due node was popped", U(sluice__wheel_next(&m->w)),
              U(cur));
    return i;
}

/* Pops up to `limit` nodes (0: until none); returns how many. */
static uint64_t m_pop(struct model *m, uint64_t limit) {
    uint64_t got = 0;
    while (!limit || got < limit) {
        if (m_pop_one(m) == SLUICE__WHEEL_NONE) break;
        got++;
    }
    return got;
}

/* Compaction: copy record i to the free index j, re-point, free i. */
static void m_relocate(struct model *m, uint32_t i, uint32_t j) {
    CHECK(i != j && !m->armed[j], "model bug: relocate %u -> %u", i, j);
    unsigned char *src = (unsigned char *)m_tagp(m, i) - m->tag_off;
    unsigned char *dst = (unsigned char *)m_tagp(m, j) - m->tag_off;
    memcpy(dst, src, m->stride);
    sluice__wheel_relocate(&m->w, j);
    memset(src, 0x5A, m->stride); /* the old record is garbage now */
    sluice__wheel_node_init(m_node(m, i));
    m->tag[j] = m->tag[i];
    m->tag[i] = ++m->next_tag;
    *m_tagp(m, i) = m->tag[i];
    m->armed[j] = m->armed[i];
    m->dl[j] = m->dl[i];
    m->set_cur[j] = m->set_cur[i];
    m->set_drain[j] = m->set_drain[i];
    m->armed[i] = 0;
    m->relocs++;
}

/* ---- generators --------------------------------------------------------- */

static uint64_t gen_deadline(const struct model *m) {
    uint64_t now = m->now, t = m->tick;
    switch (rndn(14)) {
    case 0: return now - rndn(now < 100 * t ? now + 1 : 100 * t); /* past */
    case 1: return now;
    case 2: return add_sat(now, rndn(t + 1));
    case 3: return add_sat(now, rndn(mul_sat(64, t)));
    case 4: return add_sat(now, rndn(mul_sat(4096, t)));
    case 5: return add_sat(now, rndn(mul_sat(UINT64_C(1) << 18, t)));
    case 6: return add_sat(now, rnd_shr(0, 64));
    case 7: return UINT64_MAX - rndn(3 * t);
    case 8: return UINT64_MAX;
    case 9: return add_sat(now, rndn(30 * NS_DAY));
    case 10: return add_sat(now, rndn(50 * NS_YEAR));
    case 11: { /* on and next to tick boundaries */
        uint64_t b = mul_sat(add_sat(now / t, rndn(300)), t);
        uint64_t v = rndn(3);
        return v == 0 ? b - (b > 0) : v == 1 ? b : add_sat(b, 1);
    }
    case 12: return add_sat(now, rndn(mul_sat(UINT64_C(1) << 36, t)));
    default: return add_sat(now, 1 + rndn(10 * t));
    }
}

static uint64_t gen_advance(struct model *m) {
    uint64_t now = m->now, t = m->tick;
    switch (rndn(16)) {
    case 0: return now;
    case 1: return now - rndn(now < 1000 * t ? now + 1 : 1000 * t); /* backwards: ignored */
    case 2: return add_sat(now, 1);
    case 3: return add_sat(now, t);
    case 4: return add_sat(now, rndn(3 * t));
    case 5: return add_sat(now, rndn(mul_sat(100, t)));
    case 6: return add_sat(now, rndn(mul_sat(64 * 64 * 4, t)));
    case 7: return add_sat(now, rnd_shr(20, 44));
    case 8: return add_sat(now, rndn(3 * NS_DAY));
    case 9: return chance(3) ? add_sat(now, rndn(2 * NS_YEAR)) : add_sat(now, rndn(mul_sat(1u << 20, t)));
    case 10: return rndn(20000) == 0 ? UINT64_MAX - rndn(4 * t) : add_sat(now, rndn(mul_sat(t, 10)));
    case 11: { /* exactly where the wheel says the next work is */
        uint64_t nx = sluice__wheel_next(&m->w);
        return nx == UINT64_MAX ? add_sat(now, t) : nx - (chance(20) && nx > 0);
    }
    default: { /* to an armed node's deadline, or just around its tick */
        for (int tries = 0; tries < 8; tries++) {
            uint32_t i = (uint32_t)rndn(m->n);
            if (!m->armed[i]) continue;
            uint64_t d = m->dl[i], f = fire_time(d, t);
            switch (rndn(4)) {
            case 0: return d;
            case 1: return f;
            case 2: return f - (f > 0);
            default: return d - (d > 0);
            }
        }
        return add_sat(now, t);
    }
    }
}

/* ---- randomized model test ----------------------------------------------- */

static void run_random(const char *name, uint64_t tick, uint32_t n, uint32_t shift, unsigned layout, uint64_t now0,
                       long ops, unsigned check_every) {
    struct model m;
    g_scenario = name;
    g_step = 0;
    model_init(&m, n, shift, layout, tick, now0);
    m.check_every = check_every;
    m.scan_every = n > 500 ? 16 : 1;
    for (long k = 0; k < ops; k++) {
        uint32_t i = (uint32_t)rndn(n);
        unsigned op = (unsigned)rndn(100);
        if (op < 24) { /* arm */
            if (m.armed[i])
                m_set(&m, i, gen_deadline(&m));
            else if (chance(50))
                m_add(&m, i, gen_deadline(&m));
            else
                m_set(&m, i, gen_deadline(&m)); /* sluice__wheel_set arms an unarmed node */
        } else if (op < 32) {
            m_del(&m, i);     /* also on unarmed nodes: no-op */
        } else if (op < 42) { /* move earlier */
            if (m.armed[i] && m.dl[i] > 0) {
                uint64_t d = m.dl[i];
                uint64_t back = chance(50) ? 1 + rndn(mul_sat(tick, 70)) : 1 + (rnd_shr(0, 64));
                m_set(&m, i, d > back ? d - back : 0);
            }
        } else if (op < 60) { /* extend */
            if (m.armed[i]) {
                uint64_t fwd = chance(60) ? rndn(mul_sat(tick, 200)) : rnd_shr(0, 64);
                m_set(&m, i, add_sat(m.dl[i], fwd));
            }
        } else if (op < 86) { /* advance, then pop some or all */
            m_advance(&m, gen_advance(&m));
            unsigned p = (unsigned)rndn(10);
            if (p < 6)
                m_pop(&m, 0);
            else if (p < 9)
                m_pop(&m, 1 + rndn(4));
        } else if (op < 91) {
            m_pop(&m, 1 + rndn(3));
        } else if (op < 96) { /* relocate to a free index */
            uint32_t j = (uint32_t)rndn(n);
            if (j != i && !m.armed[j]) m_relocate(&m, i, j);
        } else if (op < 97) {
            if (m.nchunks > 1) m_move_chunk_table(&m);
        } else {
            m_pop(&m, 0);
        }
        m_step(&m);
    }
    /* Finish: every armed node fires by the end of time, except deadlines
     * past the last tick boundary below 2^64, which never become due. */
    m_advance(&m, UINT64_MAX);
    m_pop(&m, 0);
    m_verify(&m);
    for (uint32_t i = 0; i < n; i++)
        if (m.armed[i]) CHECK(fire_time(m.dl[i], tick) == UINT64_MAX && m.dl[i] > ref_cur_ns(&m), "node %u left", i);
    model_free(&m);
}

/* ---- driver test: advance only to sluice__wheel_next(), fire exactly on time --------- */

static void run_driver(const char *name, uint64_t tick, uint32_t n, uint64_t now0, uint64_t horizon, unsigned mod_pct,
                       unsigned check_every) {
    struct model m;
    g_scenario = name;
    g_step = 0;
    model_init(&m, n, n > 4096 ? 10 : 31, 0, tick, now0);
    m.check_every = check_every;
    m.scan_every = n > 4096 ? 0 : n > 500 ? 16 : 1; /* exact fire times below already prove nothing is late */
    for (uint32_t i = 0; i < n; i++) m_add(&m, i, now0 + 1 + rndn(horizon));
    uint64_t wakeups = 0, mods = n;
    for (;;) {
        uint64_t t = sluice__wheel_next(&m.w);
        if (t == UINT64_MAX) {
            CHECK(m.count == 0, "sluice__wheel_next says never with %llu armed", U(m.count));
            break;
        }
        CHECK(t >= m.w.cur_ns, "sluice__wheel_next %llu in the past (cur %llu)", U(t), U(m.w.cur_ns));
        m_advance(&m, t);
        uint64_t cur = m.w.cur_ns;
        for (uint32_t i; (i = m_pop_one(&m)) != SLUICE__WHEEL_NONE;) {
            uint64_t want = m.set_cur[i] != UINT64_MAX ? m.set_cur[i] : fire_time(m.dl[i], tick);
            CHECK(cur == want, "node %u deadline %llu fired at %llu, expected %llu", i, U(m.dl[i]), U(cur), U(want));
        }
        wakeups++;
        /* Modify a few timers between wake-ups (a bounded number in all, so
         * the run ends). */
        while (mods < 4 * (uint64_t)n && chance(mod_pct)) {
            uint32_t i = (uint32_t)rndn(n);
            mods++;
            if (!m.armed[i]) {
                if (chance(50)) m_add(&m, i, add_sat(m.now, chance(5) ? 0 : 1 + rndn(horizon / 8 + 1)));
            } else if (chance(40)) {
                m_set(&m, i, add_sat(m.dl[i], rndn(horizon / 16 + 1)));
            } else if (chance(60)) {
                uint64_t back = chance(5) ? rndn(3 * tick) : 0;
                uint64_t lo = m.now > back ? m.now - back : 0;
                if (lo > m.dl[i]) lo = m.dl[i];
                m_set(&m, i, lo + rndn(m.dl[i] - lo + 1));
            } else {
                m_del(&m, i);
            }
        }
        m_step(&m);
    }
    /* Each arm/move can cost one wake-up per level it cascades through. */
    CHECK(wakeups <= mods * (SLUICE__WHEEL_LEVELS + 1) + 2, "%llu wake-ups for %llu timer operations", U(wakeups),
          U(mods));
    model_free(&m);
}

/* ---- work bound for huge jumps -------------------------------------------- */

/* Walks the expired list: how many nodes it holds and how many are not due
 * (each of those will be placed again by sluice__wheel_pop). */
static void scan_expired(struct model *m, uint64_t *len, uint64_t *notdue) {
    const uint32_t head = SLUICE__WHEEL_HEAD_BASE + SLUICE__WHEEL_HEAD_EXPIRED;
    uint64_t l = 0, nd = 0;
    for (uint32_t i = m->w.heads[SLUICE__WHEEL_HEAD_EXPIRED].next; i != head; i = m_node(m, i)->link.next) {
        l++;
        if (m_node(m, i)->deadline > m->w.cur_ns) nd++;
    }
    *len = l;
    *notdue = nd;
}

static void run_jumps(const char *name, uint64_t tick, uint32_t n, uint64_t span, unsigned njumps) {
    struct model m;
    g_scenario = name;
    g_step = 0;
    uint64_t now0 = 1000 * NS_S + rndn(NS_S);
    model_init(&m, n, 12, 2, tick, now0);
    m.check_every = 0;
    m.scan_every = njumps > 2000 ? 0 : 64;
    for (uint32_t i = 0; i < n; i++) m_add(&m, i, now0 + rndn(span));
    m_verify(&m);
    uint64_t placements = n, touched = 0;
    uint64_t end = now0 + span + tick; /* past every deadline rounded up to its tick */
    for (unsigned k = 1; k <= njumps; k++) {
        uint64_t t = k == njumps ? end : now0 + rndn(span);
        m_advance(&m, t);
        uint64_t len, notdue;
        scan_expired(&m, &len, &notdue);
        touched += len;
        placements += notdue;
        m_pop(&m, 0);
        if (k % (njumps / 16 + 1) == 0) m_verify(&m);
    }
    m_verify(&m);
    CHECK(m.count == 0, "%llu timers left after the last jump", U(m.count));
    CHECK(m.pops == n, "popped %llu of %u", U(m.pops), n);
    /* A node is placed once, then once more per level it cascades through
     * (at most SLUICE__WHEEL_LEVELS, plus one for overflow); it is touched by advance
     * (spliced) once per placement. Nothing per tick. */
    CHECK(placements <= (uint64_t)n * (SLUICE__WHEEL_LEVELS + 2), "%llu placements for %u timers", U(placements), n);
    CHECK(touched <= placements, "%llu nodes spliced for %llu placements", U(touched), U(placements));
    printf("  %-34s %u timers, %u jumps: %.2f placements/timer\n", name, n, njumps, (double)placements / n);
    model_free(&m);
}

/* ---- directed tests ------------------------------------------------------- */

static void test_rounding(void) {
    /* A deadline d fires at the first tick boundary >= d: not one ns before. */
    g_scenario = "rounding";
    static const uint64_t ticks[] = { 1,
                                      2,
                                      3,
                                      7,
                                      64,
                                      1000,
                                      4096,
                                      999999937,
                                      1000000,
                                      7000000,
                                      UINT64_C(1) << 40,
                                      UINT64_C(0xFFFFFFFFFFFF),
                                      UINT64_MAX / 3,
                                      UINT64_MAX - 1,
                                      UINT64_MAX };
    for (unsigned r = 0; r < 4000; r++) {
        uint64_t t = r < 2 * (sizeof ticks / sizeof ticks[0]) ? ticks[r / 2]
                     : chance(50)                             ? ticks[rndn(15)]
                                                              : rnd_shr(0, 64);
        if (t == 0) t = 1;
        struct model m;
        uint64_t start = chance(30) ? 0 : rnd_shr(0, 64);
        model_init(&m, 3, 31, r & 3, t, start);
        uint64_t d = chance(10) ? UINT64_MAX - rndn(3) : add_sat(start, rnd_shr(0, 64));
        m_add(&m, 0, d);
        uint64_t f = fire_time(d, t);
        if (d <= m.w.cur_ns) { /* already due */
            CHECK(m_pop_one(&m) == 0, "due deadline %llu not popped at once (tick %llu)", U(d), U(t));
        } else if (f == UINT64_MAX && d > (UINT64_MAX / t) * t) {
            /* beyond the last tick boundary: due only at the end of time */
            m_advance(&m, UINT64_MAX - 1);
            CHECK(m_pop_one(&m) == SLUICE__WHEEL_NONE, "deadline %llu fired before the end of time", U(d));
            m_advance(&m, UINT64_MAX);
            CHECK(m_pop_one(&m) == 0, "deadline %llu not fired at the end of time (tick %llu)", U(d), U(t));
        } else {
            m_advance(&m, f - 1);
            m_verify(&m);
            CHECK(m_pop_one(&m) == SLUICE__WHEEL_NONE, "deadline %llu fired at %llu (tick %llu): early", U(d), U(f - 1),
                  U(t));
            m_advance(&m, f);
            CHECK(m_pop_one(&m) == 0, "deadline %llu not fired at %llu (tick %llu)", U(d), U(f), U(t));
        }
        m_verify(&m);
        model_free(&m);
    }
}

static void snapshot_links(struct model *m, struct sluice__wheel_link *out) {
    for (uint32_t i = 0; i < m->n; i++) out[i] = m_node(m, i)->link;
}

static void test_extend_in_place(void) {
    g_scenario = "extend in place";
    static const uint64_t ticks[] = { 1, NS_MS };
    for (unsigned k = 0; k < 2; k++) {
        struct model m;
        uint64_t t = ticks[k];
        model_init(&m, 48, 3, 1, t, 5 * NS_S);
        /* Spread over the expired list, every level and (tick 1) overflow. */
        for (uint32_t i = 0; i < 48; i++) {
            uint64_t d = i < 4 ? m.now - i : add_sat(m.now, mul_sat(UINT64_C(1) << (i + 2), t) / 4 + i);
            m_add(&m, i, d);
        }
        m_verify(&m);
        static struct sluice__wheel_link before[48], after[48];
        for (uint32_t i = 0; i < 48; i++) {
            struct sluice__wheel wb = m.w;
            snapshot_links(&m, before);
            uint64_t d = add_sat(m.dl[i], chance(50) ? 1 : rnd_shr(0, 64));
            m_set(&m, i, d);
            snapshot_links(&m, after);
            CHECK(memcmp(&wb, &m.w, sizeof wb) == 0, "extending node %u changed the wheel struct", i);
            CHECK(memcmp(before, after, sizeof before) == 0, "extending node %u changed some links", i);
            CHECK(m_node(&m, i)->deadline == d, "deadline not stored");
            m_set(&m, i, m.dl[i]); /* same deadline: also in place */
            snapshot_links(&m, after);
            CHECK(memcmp(before, after, sizeof before) == 0, "re-setting node %u moved it", i);
            m_verify(&m);
        }
        /* Still all fire, and at the right time. */
        m_advance(&m, UINT64_MAX);
        m_pop(&m, 0);
        m_verify(&m);
        model_free(&m);
    }
}

static void test_relocate(void) {
    g_scenario = "relocate";
    for (unsigned layout = 0; layout < 4; layout++) {
        struct model m;
        uint64_t t = layout & 1 ? 1 : NS_MS;
        model_init(&m, 96, 3, layout, t, 77 * NS_S);
        /* Lists of one node, of several, the expired list and overflow. */
        for (uint32_t i = 0; i < 48; i++) {
            uint64_t d;
            switch (i % 6) {
            case 0: d = m.now - 1; break;                     /* expired */
            case 1: d = m.now + 5 * t; break;                 /* all in one level-0 slot */
            case 2: d = m.now + (i + 1) * 100 * t; break;     /* level 1, one per slot */
            case 3: d = m.now + NS_YEAR * (i % 7 + 1); break; /* far: overflow with tick 1 */
            case 4: d = m.now + (UINT64_C(1) << (i % 40)); break;
            default: d = UINT64_MAX; break;
            }
            m_add(&m, i, d);
        }
        m_verify(&m);
        /* Move neighbours one after the other, including into an index that
         * a neighbour just vacated. */
        for (uint32_t i = 0; i < 48; i++) {
            m_relocate(&m, i, 48 + i);
            m_verify(&m);
        }
        for (uint32_t i = 0; i < 48; i++) {
            m_relocate(&m, 48 + i, 47 - i);
            m_verify(&m);
        }
        /* Relocating an unarmed record is a no-op for the wheel. */
        m_relocate(&m, 60, 61);
        m_verify(&m);
        m_advance(&m, m.now + 2 * NS_YEAR);
        m_pop(&m, 0);
        m_advance(&m, UINT64_MAX);
        m_pop(&m, 0);
        m_verify(&m);
        model_free(&m);
    }
}

static void test_basics(void) {
    g_scenario = "basics";
    struct model m;
    model_init(&m, 16, 2, 0, 10, 1000);
    CHECK(m_pop_one(&m) == SLUICE__WHEEL_NONE, "pop on empty");
    m_del(&m, 3); /* unarmed: no-op */
    CHECK(m.w.count == 0, "count after no-op del");
    m_add(&m, 1, 1055); /* E = 106 */
    CHECK(sluice__wheel_next(&m.w) <= 1060 && sluice__wheel_next(&m.w) > 1000, "next %llu",
          U(sluice__wheel_next(&m.w)));
    m_advance(&m, 1059);
    CHECK(m_pop_one(&m) == SLUICE__WHEEL_NONE, "fired early");
    m_advance(&m, 1060);
    CHECK(m_pop_one(&m) == 1, "not fired");
    CHECK(m_pop_one(&m) == SLUICE__WHEEL_NONE, "fired twice");
    m_add(&m, 2, 5); /* in the past: due at once */
    CHECK(sluice__wheel_next(&m.w) == m.w.cur_ns, "due node: next %llu", U(sluice__wheel_next(&m.w)));
    m_del(&m, 2);
    m_verify(&m);
    CHECK(m_pop_one(&m) == SLUICE__WHEEL_NONE, "deleted node fired");
    CHECK(sluice__wheel_next(&m.w) == UINT64_MAX, "next after all deleted");
    /* A delete emptying the expired list must not leave the wheel busy. */
    m_add(&m, 4, 2000);
    m_add(&m, 5, 1);
    CHECK(sluice__wheel_next(&m.w) == m.w.cur_ns, "a due node: work now");
    m_del(&m, 5);
    CHECK(sluice__wheel_next(&m.w) > m.w.cur_ns && sluice__wheel_next(&m.w) <= 2000,
          "next %llu after deleting the due node", U(sluice__wheel_next(&m.w)));
    m_verify(&m);
    m_add(&m, 5, 1);
    m_set(&m, 5, 1500); /* moved later, stays on the expired list */
    m_set(&m, 5, 1400); /* earlier: moved off it, into a slot */
    CHECK(sluice__wheel_next(&m.w) > m.w.cur_ns, "next %llu after moving the due node out",
          U(sluice__wheel_next(&m.w)));
    m_del(&m, 5);
    m_advance(&m, 1061); /* same tick */
    CHECK(sluice__wheel_next(&m.w) > m.w.cur_ns && sluice__wheel_next(&m.w) <= 2000, "stale next not refreshed: %llu",
          U(sluice__wheel_next(&m.w)));
    /* Time going back is ignored. */
    m_advance(&m, 3);
    CHECK(m.w.cur_ns == 1060, "time went back");
    m_verify(&m);
    /* Move earlier, into the past, then extend again. */
    m_set(&m, 4, 1070);
    m_set(&m, 4, 10);
    m_set(&m, 4, 1065);
    m_verify(&m);
    m_advance(&m, 1069);
    CHECK(m_pop_one(&m) == SLUICE__WHEEL_NONE, "fired before its new deadline");
    m_advance(&m, 1070);
    CHECK(m_pop_one(&m) == 4, "not fired at its new deadline");
    m_verify(&m);
    /* sluice__wheel_add on an armed node (a misuse) moves it; the lists stay sound. */
    m_add(&m, 7, 5000);
    sluice__wheel_add(&m.w, 7, 1200);
    m.dl[7] = 1200;
    m_verify(&m);
    sluice__wheel_add(&m.w, 7, 90000);
    m.dl[7] = 90000;
    m_verify(&m);
    m_advance(&m, 89999);
    CHECK(m_pop_one(&m) == SLUICE__WHEEL_NONE, "re-added node fired early");
    m_advance(&m, 90000);
    CHECK(m_pop_one(&m) == 7, "re-added node did not fire");
    m_verify(&m);
    model_free(&m);
}

/* sluice__wheel_check must notice a broken wheel (its messages are hidden). */
static void test_check_detects(void) {
    g_scenario = "sluice__wheel_check detects corruption";
    struct model m;
    model_init(&m, 32, 31, 0, NS_MS, NS_S);
    for (uint32_t i = 0; i < 20; i++) m_add(&m, i, m.now + (i == 0 ? 0 : NS_MS << (i % 14)) + i);
    m_advance(&m, m.now + NS_MS); /* leave node 0 on the expired list */
    m_verify(&m);
    fflush(stderr);
    int saved = dup(2), devnull = open("/dev/null", O_WRONLY);
    if (saved >= 0 && devnull >= 0) dup2(devnull, 2);
    struct sluice__wheel keep = m.w;
    uint32_t s = 0;
    while (s < SLUICE__WHEEL_LEVELS * SLUICE__WHEEL_SLOTS && !(m.w.occ[s / 64] >> (s % 64) & 1)) s++;
    int bad[8];
    m.w.occ[s / 64] ^= UINT64_C(1) << (s % 64); /* occupancy bit lost */
    bad[0] = sluice__wheel_check(&m.w);
    m.w = keep;
    m.w.occ[7] |= UINT64_C(1) << 63; /* bit without a list */
    bad[1] = sluice__wheel_check(&m.w);
    m.w = keep;
    m.w.count++;
    bad[2] = sluice__wheel_check(&m.w);
    m.w = keep;
    m.w.next_tick = UINT64_MAX; /* not a lower bound any more */
    bad[3] = sluice__wheel_check(&m.w);
    m.w = keep;
    uint32_t victim = m.w.heads[s].next;
    uint64_t d = m_node(&m, victim)->deadline;
    m_node(&m, victim)->deadline = 0; /* earlier without a move: would be late */
    bad[4] = sluice__wheel_check(&m.w);
    m_node(&m, victim)->deadline = d;
    uint32_t p = m_node(&m, victim)->link.prev;
    m_node(&m, victim)->link.prev = victim; /* asymmetric link */
    bad[5] = sluice__wheel_check(&m.w);
    m_node(&m, victim)->link.prev = p;
    m.w.curtick += 1; /* cur_ns no longer matches */
    bad[6] = sluice__wheel_check(&m.w);
    m.w = keep;
    m.w.heads[SLUICE__WHEEL_HEAD_OVERFLOW].next = 0; /* list through a foreign head */
    bad[7] = sluice__wheel_check(&m.w);
    m.w = keep;
    fflush(stderr);
    if (saved >= 0) {
        dup2(saved, 2);
        close(saved);
    }
    if (devnull >= 0) close(devnull);
    for (int k = 0; k < 8; k++) CHECK(bad[k] < 0, "corruption %d not detected", k);
    m_verify(&m);
    model_free(&m);
}

/* ---- main --------------------------------------------------------------- */

int main(int argc, char **argv) {
    long scale = 1;
    if (argc > 1) g_seed = strtoull(argv[1], NULL, 0);
    if (argc > 2) scale = strtol(argv[2], NULL, 0);
    if (scale < 1) scale = 1;
    g_rng = g_seed;
    printf("test_wheel: seed %" PRIu64 ", scale %ld\n", g_seed, scale);

    test_basics();
    test_rounding();
    test_extend_in_place();
    test_relocate();
    test_check_detects();
    printf("  directed tests ok\n");

    static const uint64_t ticks[] = { 1, NS_US, NS_MS, 7 * NS_MS, 3, 64, 999999937 };
    static const char *tick_names[] = { "1ns", "1us", "1ms", "7ms", "3ns", "64ns", "~1s prime" };
    char name[96];
    for (unsigned k = 0; k < sizeof ticks / sizeof ticks[0]; k++) {
        uint64_t t = ticks[k];
        /* Small populations, sluice__wheel_check after every step, both arena kinds. */
        snprintf(name, sizeof name, "random tick %s n=8 one chunk", tick_names[k]);
        run_random(name, t, 8, 31, k % 4, rnd() >> 8, 6000 * scale, 1);
        snprintf(name, sizeof name, "random tick %s n=40 chunks of 8", tick_names[k]);
        run_random(name, t, 40, 3, (k + 1) % 4, rnd_shr(0, 64), 30000 * scale, 1);
        snprintf(name, sizeof name, "random tick %s n=200 chunks of 64", tick_names[k]);
        run_random(name, t, 200, 6, (k + 2) % 4, 0, 30000 * scale, 1);
        snprintf(name, sizeof name, "random tick %s near the end of time", tick_names[k]);
        run_random(name, t, 64, 4, (k + 3) % 4, UINT64_MAX - (rnd_shr(8, 40)), 10000 * scale, 1);
        /* Larger populations, checked now and then. */
        snprintf(name, sizeof name, "random tick %s n=2000", tick_names[k]);
        run_random(name, t, 2000, 10, k % 4, rnd() >> 4, 250000 * scale, 997);
        /* Event-loop style: wake only at sluice__wheel_next(), fire exactly on time. */
        snprintf(name, sizeof name, "driver tick %s", tick_names[k]);
        run_driver(name, t, 300, rnd() >> 8, mul_sat(t, 300000), 40, 1);
        snprintf(name, sizeof name, "driver tick %s long horizon", tick_names[k]);
        run_driver(name, t, 2000, rnd() >> 8, t < NS_MS ? 40 * NS_DAY : 5 * NS_YEAR, 30, 101);
        printf("  tick %-10s random + driver ok\n", tick_names[k]);
    }

    /* Huge jumps: work is O(timers x levels), never O(ticks). */
    run_jumps("10 years in one jump, tick 1ms", NS_MS, 100000, 10 * NS_YEAR, 1);
    run_jumps("10 years in 1000 jumps, tick 1ms", NS_MS, 100000, 10 * NS_YEAR, 1000);
    run_jumps("10 years in one jump, tick 1ns", 1, 100000, 10 * NS_YEAR, 1);
    run_jumps("10 years in 1000 jumps, tick 1ns", 1, 100000, 10 * NS_YEAR, 1000);
    run_jumps("10 s in 100000 jumps, tick 1us", NS_US, 100000, 10 * NS_S, 100000);
    run_driver("driver 100k timers over 10 years, 1ms", NS_MS, 100000, NS_S, 10 * NS_YEAR, 0, 0);

    printf("test_wheel: %llu checks passed\n", g_checks);
    return 0;
}
