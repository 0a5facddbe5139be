/*
 * test_drain.c — draining many timers in many small steps, as a manual clock
 * does (each step to the wheel's next time, then every due timer popped),
 * against draining them in one advance.
 *
 *   1. The wheel (Sources/CSluice/wheel.c): bursts of nodes armed at one
 *      time (a run of nodes bound for one slot, which sluice__wheel_pop
 *      cascades in one piece), some moved later or disarmed to break the
 *      runs, drained step by step: every node pops at the first step whose
 *      time reaches its deadline (never early, never late), nodes of one
 *      burst with one deadline in the order they were armed, and every
 *      invariant (sluice__wheel_check) holds after each step.
 *   2. The limiter (Sources/CSluice/table.c's shrink rule): a debounce
 *      limiter with many keys drained by advances of at most 512 timers to
 *      each next deadline gives each key's token once, at its own deadline,
 *      as one advance does; its index shrinks only below 1/16 full, to at
 *      most 1/4 full (so a few resizes over the whole drain, not one per
 *      halving), an advance mid-drain leaving that work for later (down to
 *      1/128 full) while any other call does it at once, and it ends at the
 *      smallest size with the memory of a new limiter.
 *
 *   ./test_drain [seed]
 */
#include "sluice.h"
#include "wheel-internal.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TEST_NAME "test_drain"
#define SCENARIO_SEED 0xd7a1d7a1ULL
#include "support/scenario.h"

static uint64_t fire_time(uint64_t d, uint64_t tick) { return (d / tick + (d % tick != 0)) * tick; }

/* ---- 1. the wheel ----------------------------------------------------------- */

struct rec {
    struct sluice__wheel_node node;
    uint64_t armed_seq; /* arming order (0: not armed) */
    uint64_t burst;     /* the burst it was armed in, and whether it was moved since */
    uint8_t moved;
};

static void wheel_drain(uint64_t tick, uint32_t n, uint32_t burst, uint64_t gap, uint64_t horizon, unsigned move_pct,
                        unsigned del_pct) {
    static char name[160];
    /* Arming ends before the first deadline: nothing pops meanwhile. */
    uint64_t span = ((uint64_t)n / burst + 1) * gap;
    if (horizon <= span) horizon += span;
    snprintf(name, sizeof name,
             "wheel tick %llu, %u nodes in bursts of %u, gap %llu, horizon %llu, moves %u%%, dels %u%%", U(tick), n,
             burst, U(gap), U(horizon), move_pct, del_pct);
    g_scenario = name;
    struct rec *r = calloc(n, sizeof *r);
    CHECK(r != NULL, "out of memory");
    unsigned char *chunk = (unsigned char *)r;
    struct sluice__wheel_arena a = { &chunk, 31, (uint32_t)sizeof *r, 0 };
    struct sluice__wheel w;
    uint64_t now = UINT64_C(1000000) * tick + rndn(tick);
    sluice__wheel_init(&w, &a, tick, now);
    for (uint32_t i = 0; i < n; i++) sluice__wheel_node_init(&r[i].node);
    uint64_t seq = 0, armed = 0;
    /* Arm in bursts: each burst at one time, one deadline (or a few), the
     * clock moved on between bursts (popping nothing: the horizon is later). */
    for (uint32_t i = 0; i < n; i += burst) {
        uint64_t d = now + horizon + rndn(horizon / 4 + 1);
        for (uint32_t j = i; j < n && j < i + burst; j++) {
            uint64_t dj = rndn(8) == 0 ? d + rndn(horizon / 2 + 1) : d;
            sluice__wheel_add(&w, j, dj);
            r[j].armed_seq = ++seq;
            r[j].burst = i / burst;
            armed++;
        }
        now += gap;
        sluice__wheel_advance(&w, now);
        CHECK(sluice__wheel_pop(&w) == SLUICE__WHEEL_NONE, "a node popped while arming");
    }
    /* Some moved later (breaking the runs of their slot), some disarmed. */
    for (uint32_t i = 0; i < n; i++) {
        if (rndn(100) < move_pct) {
            sluice__wheel_set(&w, i, r[i].node.deadline + 1 + rndn(horizon));
            r[i].moved = 1;
        } else if (rndn(100) < del_pct) {
            sluice__wheel_del(&w, i);
            r[i].armed_seq = 0;
            armed--;
        }
    }
    CHECK(sluice__wheel_check(&w) == 0, "wheel invariants after arming");
    CHECK(w.count == armed, "count %llu, armed %llu", U(w.count), U(armed));
    /* Drain step by step. */
    uint64_t prev_cur = w.cur_ns, popped = 0, steps = 0;
    uint32_t last_in_step = SLUICE__WHEEL_NONE;
    for (;;) {
        uint64_t next = sluice__wheel_next(&w);
        if (next == UINT64_MAX) break;
        CHECK(next > prev_cur, "next %llu not after the last step %llu", U(next), U(prev_cur));
        sluice__wheel_advance(&w, next);
        steps++;
        last_in_step = SLUICE__WHEEL_NONE;
        for (uint32_t i; (i = sluice__wheel_pop(&w)) != SLUICE__WHEEL_NONE;) {
            CHECK(i < n && r[i].armed_seq != 0, "popped %u, not armed", i);
            uint64_t d = r[i].node.deadline;
            CHECK(d <= w.cur_ns, "node %u (deadline %llu) popped early at %llu", i, U(d), U(w.cur_ns));
            CHECK(d > prev_cur, "node %u (deadline %llu) popped late at %llu: due at the step before (%llu)", i, U(d),
                  U(w.cur_ns), U(prev_cur));
            CHECK(fire_time(d, tick) == w.cur_ns, "node %u (deadline %llu) popped at %llu, not at its tick", i, U(d),
                  U(w.cur_ns));
            /* One burst, one deadline, none moved: in arming order. */
            if (last_in_step != SLUICE__WHEEL_NONE) {
                const struct rec *p = &r[last_in_step];
                if (p->burst == r[i].burst && !p->moved && !r[i].moved && p->node.deadline == d)
                    CHECK(p->armed_seq < r[i].armed_seq,
                          "node %u popped before node %u, armed earlier with "
                          "the same deadline",
                          last_in_step, i);
            }
            last_in_step = i;
            r[i].armed_seq = 0;
            popped++;
            if ((popped & 1023) == 0) CHECK(sluice__wheel_check(&w) == 0, "wheel invariants mid-step");
        }
        if ((steps & 15) == 0 || w.count < 4096)
            CHECK(sluice__wheel_check(&w) == 0, "wheel invariants after step %llu", U(steps));
        prev_cur = w.cur_ns;
    }
    CHECK(popped == armed, "popped %llu of %llu", U(popped), U(armed));
    CHECK(w.count == 0, "count %llu after the drain", U(w.count));
    free(r);
}

static void test_wheel(void) {
    const uint64_t ms = UINT64_C(1000000);
    /* The bench's shape: 1 ms ticks, bursts of 1024 a few ticks apart,
     * deadlines 2 s later (levels 1 and 2 cascade down). */
    wheel_drain(ms, 60000, 1024, 3 * ms, 2000 * ms, 0, 0);
    wheel_drain(ms, 60000, 1024, 3 * ms, 2000 * ms, 10, 10);
    /* Bursts of one tick, deadlines on every level up to 3. */
    wheel_drain(1, 40000, 100, 1, 300000, 5, 5);
    wheel_drain(1000, 40000, 7, 250, 64 * 64 * 64 * 1000, 20, 0);
    /* Small bursts, every node its own run or two. */
    wheel_drain(ms, 20000, 3, ms / 3, 70 * ms, 30, 30);
    for (unsigned k = 0; k < 6; k++) {
        uint64_t tick = 1 + rndn(5000);
        wheel_drain(tick, 5000 + (uint32_t)rndn(20000), 1 + (uint32_t)rndn(2000), rndn(10 * tick),
                    tick * (1 + rndn(64 * 64 * 8)), (unsigned)rndn(40), (unsigned)rndn(20));
    }
}

/* ---- 2. the limiter's index ------------------------------------------------- */

struct drain_log {
    uint64_t *at;  /* per key: when its token was emitted (0: not yet) */
    uint64_t *tok; /* per key: the token emitted */
    uint64_t emitted, n;
    int bad;
};

static void on_event(void *user, const sluice_event_t *e) {
    struct drain_log *g = user;
    if (e->kind != SLUICE_EVENT_EMIT || e->key.kind != SLUICE_KEY_U64 || e->key.u64 >= g->n || g->at[e->key.u64]) {
        g->bad++;
        return;
    }
    g->at[e->key.u64] = e->at;
    g->tok[e->key.u64] = e->token;
    g->emitted++;
}

#define MS UINT64_C(1000000)
#define T0 (UINT64_C(1000) * 1000 * MS)

/* n debounce keys (interval 2 s) submitted over one second in bursts of 1024
 * at one time each, then drained either by one advance or in steps of at most
 * 512 timers to each next deadline. */
static void limiter_drain(uint64_t n, bool stepped) {
    static char name[96];
    snprintf(name, sizeof name, "limiter, %llu keys, %s", U(n), stepped ? "stepped" : "one advance");
    g_scenario = name;
    struct drain_log g = { calloc(n, sizeof(uint64_t)), calloc(n, sizeof(uint64_t)), 0, n, 0 };
    CHECK(g.at && g.tok, "out of memory");
    sluice_config_t cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.policy = sluice_debounce((int64_t)(2000 * MS), false, true, -1);
    cfg.on_event = on_event;
    cfg.user = &g;
    cfg.start_ns = T0;
    sluice_limiter_t *l = NULL, *fresh = NULL;
    CHECK(sluice_limiter_new(&l, &cfg) == 0, "sluice_limiter_new");
    CHECK(sluice_limiter_new(&fresh, &cfg) == 0, "sluice_limiter_new");
    sluice_stats_t st, st0;
    CHECK(sluice_limiter_stats(fresh, &st0) == 0, "stats");
    uint64_t t = T0;
    uint64_t *sent = calloc(n, sizeof *sent);
    CHECK(sent != NULL, "out of memory");
    for (uint64_t k = 0; k < n; k++) {
        if ((k & 1023) == 0) t = T0 + k * 1000 * MS / n;
        sluice_decision_t d;
        sent[k] = t;
        CHECK(sluice_limiter_submit(l, sluice_key_u64(k), k * 7 + 1, t, &d) == 0, "submit");
        CHECK(d.kind == SLUICE_SCHEDULED, "key %llu not scheduled", U(k));
    }
    CHECK(sluice_limiter_stats(l, &st) == 0, "stats");
    const uint64_t slots0 = st.table_slots, min_slots = st0.table_slots;
    /* bytes per key in the slab, about (the chunk table and the index aside) */
    const uint64_t entry_bytes = (st.memory_bytes - st0.memory_bytes - slots0 * 8) / n + 1;
    CHECK(st.live_keys == n, "live %llu", U(st.live_keys));
    const uint64_t end = T0 + 3000 * MS + 2 * MS;
    unsigned resizes = 0;
    if (!stepped) {
        CHECK(sluice_limiter_advance(l, end, 0) == (int64_t)n, "one advance fired not all");
    } else {
        uint64_t now = t, last = slots0;
        bool tidied_mid_drain = false;
        for (;;) {
            uint64_t dl = sluice_limiter_next_deadline(l);
            if (dl > end) break;
            if (dl > now) now = dl;
            int64_t fired;
            do {
                fired = sluice_limiter_advance(l, now, 512);
                CHECK(fired >= 0, "advance: %lld", (long long)fired);
                CHECK(sluice_limiter_stats(l, &st) == 0, "stats");
                /* The rule: never over 3/4 full; at the end of a call
                 * either the smallest index or at least 1/16 full, but
                 * for an advance in the middle of a drain (timers still
                 * armed), which leaves the tidy for later while the keys
                 * are not 8 times below the mark: 1/128. */
                CHECK(st.live_keys * 4 <= st.table_slots * 3, "index over 3/4 full");
                CHECK(st.table_slots == min_slots || st.live_keys * (st.armed_timers ? 128 : 16) >= st.table_slots,
                      "index of %llu slots for %llu keys (%llu timers) after a call: too empty", U(st.table_slots),
                      U(st.live_keys), U(st.armed_timers));
                if (st.armed_timers != 0 && st.live_keys * 16 < st.table_slots && !tidied_mid_drain) {
                    /* Any other call tidies at its end: the index at
                     * least 1/16 full again, keys and timers unchanged. */
                    uint64_t live = st.live_keys, timers = st.armed_timers;
                    CHECK(sluice_limiter_pending(l, sluice_key_u64(n + 1), now) == 0, "pending");
                    CHECK(sluice_limiter_stats(l, &st) == 0, "stats");
                    CHECK(st.live_keys == live && st.armed_timers == timers, "pending changed the keys");
                    CHECK(st.live_keys * 16 >= st.table_slots,
                          "index of %llu slots for %llu keys after a call "
                          "that is not an advance",
                          U(st.table_slots), U(st.live_keys));
                    CHECK(sluice_limiter_check(l) == 0, "limiter invariants after the tidy mid-drain");
                    tidied_mid_drain = true;
                    last = st.table_slots;
                    resizes++;
                }
                if (st.table_slots != last) {
                    CHECK(st.table_slots < last, "index grew while draining");
                    /* only once under 1/16 full */
                    CHECK(st.live_keys * 16 < last,
                          "index of %llu slots shrunk with %llu keys: not under "
                          "1/16 full",
                          U(last), U(st.live_keys));
                    /* shrunk to at most 1/4 full */
                    CHECK(st.live_keys * 4 <= st.table_slots,
                          "index shrunk to %llu slots for %llu keys: over "
                          "1/4 full",
                          U(st.table_slots), U(st.live_keys));
                    CHECK(st.table_slots == min_slots || st.live_keys * 8 > st.table_slots,
                          "index shrunk to %llu slots for %llu keys: not the smallest at most 1/4 full",
                          U(st.table_slots), U(st.live_keys));
                    resizes++;
                    last = st.table_slots;
                }
            } while (fired >= 512);
        }
        /* Each shrink divides the index by 4 or more: with one per halving
         * there would be log2(slots0 / min) of them. */
        unsigned bits = 0;
        for (uint64_t s = slots0; s > min_slots; s >>= 1) bits++;
        CHECK(resizes <= (bits + 1) / 2 + 1, "%u index resizes draining from %llu to %llu slots", resizes, U(slots0),
              U(min_slots));
        CHECK(tidied_mid_drain, "no call found the index under 1/16 full mid-drain");
    }
    CHECK(g.bad == 0, "%d unexpected events", g.bad);
    CHECK(g.emitted == n, "emitted %llu of %llu", U(g.emitted), U(n));
    for (uint64_t k = 0; k < n; k++) {
        CHECK(g.tok[k] == k * 7 + 1, "key %llu emitted token %llu", U(k), U(g.tok[k]));
        uint64_t due = sent[k] + 2000 * MS;
        CHECK(g.at[k] == due, "key %llu emitted at %llu, its deadline is %llu", U(k), U(g.at[k]), U(due));
    }
    CHECK(sluice_limiter_stats(l, &st) == 0, "stats");
    CHECK(st.live_keys == 0 && st.armed_timers == 0, "keys left: %llu, timers %llu", U(st.live_keys),
          U(st.armed_timers));
    CHECK(st.table_slots == min_slots, "index of %llu slots after the drain", U(st.table_slots));
    /* Memory back to a new limiter's, but for the slab's grown chunk table
     * and the chunks a slab of under 3 chunks keeps (it compacts only when
     * that releases two or more: table.c). */
    CHECK(st.memory_bytes <= st0.memory_bytes + 1024 + 3 * 4096 * entry_bytes,
          "memory %llu after the drain, a new limiter %llu (%llu bytes a key)", U(st.memory_bytes), U(st0.memory_bytes),
          U(entry_bytes));
    CHECK(sluice_limiter_check(l) == 0, "limiter invariants");
    sluice_limiter_free(l);
    sluice_limiter_free(fresh);
    free(sent);
    free(g.at);
    free(g.tok);
}

int main(int argc, char **argv) {
    if (argc > 1) g_seed = strtoull(argv[1], NULL, 0);
    g_rng = g_seed;
    test_wheel();
    limiter_drain(200000, true);
    limiter_drain(200000, false);
    limiter_drain(5000, true);
    printf("test_drain: %llu checks passed (seed %llu)\n", g_checks, U(g_seed));
    return 0;
}
