/* test_loop_tick.c — the loop layer's default wheel tick
 * (SLUICE_LOOP_TICK_DEFAULT_NS, 10 us) and its firing rule.
 *
 * 1. Manual clock, the core with the loop's default tick: a deadline D is
 *    due once the time reaches D rounded up to the tick, ceil(D/tick)*tick:
 *    advancing to one nanosecond before fires nothing, advancing to exactly
 *    that time fires it, with the event's `at` the exact deadline. A
 *    deadline on a tick boundary fires at exactly D, never at D-1.
 * 2. A loop limiter created with tick_ns == 0 uses that tick: on an attached
 *    base that is not running yet, sluice_mt_next_deadline() of a deadline
 *    placed in the wheel's finest level is D rounded up to 10 us (it would
 *    be a multiple of 100 us with the former default). Run the base: the
 *    key is delivered with `at` == D, at a clock reading >= that rounded
 *    time (never early by the tick's rule, nor by the deadline).
 * 3. Real loop and clock (an owned loop thread), many keys: each key is
 *    submitted twice (a debounce re-arm), so its events are a drop of the
 *    first token (at the second call's time), then the emission of the
 *    second at its exact deadline. Checks per key: both events, in that
 *    order, `at` exact, no event delivered before its `at` (emissions never
 *    before their deadline), and within a generous bound (a shared machine
 *    stalls). */
#include "loop_test_util.h"

_Static_assert(SLUICE_LOOP_TICK_DEFAULT_NS == UINT64_C(10000), "the loop's default tick is 10 us");

#define TICK SLUICE_LOOP_TICK_DEFAULT_NS

static uint64_t ceil_tick(uint64_t d) { return (d + TICK - 1) / TICK * TICK; }

/* ------------------------------------------------------------------ 1. manual clock */

struct rec {
    uint64_t n;
    uint64_t token[8];
    uint64_t at[8];
    sluice_event_kind_t kind[8];
};

static void rec_event(void *user, const sluice_event_t *ev) {
    struct rec *r = user;
    if (r->n < 8) {
        r->token[r->n] = ev->token;
        r->at[r->n] = ev->at;
        r->kind[r->n] = ev->kind;
    }
    r->n++;
}

/* One key, debounce `interval`, submitted at t0: due at exactly ceil(D/tick)*tick. */
static void manual_case(uint64_t t0, uint64_t interval) {
    struct rec r;
    memset(&r, 0, sizeof r);
    sluice_config_t c = lt_config(sluice_debounce((int64_t)interval, false, true, -1), rec_event, &r);
    c.tick_ns = TICK;
    c.start_ns = t0;
    sluice_limiter_t *l = NULL;
    LT_OK(sluice_limiter_new(&l, &c));
    if (!l) return;
    sluice_decision_t d;
    LT_OK(sluice_limiter_submit(l, sluice_key_u64(42), 7, t0, &d));
    LT_CHECK(d.kind == SLUICE_SCHEDULED, "decision %d", (int)d.kind);
    const uint64_t D = t0 + interval, due = ceil_tick(D);
    LT_CHECK(due - D < TICK, "rounding %llu", (unsigned long long)(due - D));
    /* the reported deadline is a lower bound of `due`, and exact for a
     * deadline in the finest level (all of these are: < 64 ticks ahead,
     * same upper digits as t0) */
    uint64_t nd = sluice_limiter_next_deadline(l);
    LT_CHECK(nd == due, "next_deadline %llu, expected %llu (D %llu)", (unsigned long long)nd, (unsigned long long)due,
             (unsigned long long)D);
    if (D > t0 + 1) {
        LT_OK(sluice_limiter_advance(l, D - 1, 0));
        LT_CHECK(r.n == 0, "fired at D-1 (D %llu)", (unsigned long long)D);
    }
    LT_OK(sluice_limiter_advance(l, due - 1, 0));
    LT_CHECK(r.n == 0, "fired at ceil(D/tick)*tick - 1 (D %llu, due %llu)", (unsigned long long)D,
             (unsigned long long)due);
    LT_OK(sluice_limiter_advance(l, due, 0));
    LT_CHECK(r.n == 1, "not fired at ceil(D/tick)*tick (D %llu, due %llu): %llu events", (unsigned long long)D,
             (unsigned long long)due, (unsigned long long)r.n);
    if (r.n == 1) {
        LT_CHECK(r.kind[0] == SLUICE_EVENT_EMIT && r.token[0] == 7, "kind %d token %llu", (int)r.kind[0],
                 (unsigned long long)r.token[0]);
        LT_CHECK(r.at[0] == D, "event at %llu, deadline %llu", (unsigned long long)r.at[0], (unsigned long long)D);
    }
    sluice_limiter_free(l);
}

static void test_manual_rule(void) {
    const uint64_t t0 = UINT64_C(1000000000000); /* a multiple of 64 ticks */
    /* deadlines inside a tick (1 ns, half, last ns) and on its boundary */
    const uint64_t intervals[] = { 1,         5000,         9999, TICK, TICK + 1, 3 * TICK + 4321, 17 * TICK - 1,
                                   17 * TICK, 40 * TICK + 1 };
    for (size_t i = 0; i < sizeof intervals / sizeof intervals[0]; i++) manual_case(t0, intervals[i]);
    /* and from a time inside a tick */
    for (size_t i = 0; i < sizeof intervals / sizeof intervals[0]; i++) manual_case(t0 + 1234, intervals[i]);
}

/* ------------------------------------------------------------------ 2. attached base, default tick */

struct one {
    uint64_t n, at, seen_at_clock;
};

static void one_event(void *user, const sluice_event_t *ev) {
    struct one *o = user;
    if (ev->kind != SLUICE_EVENT_EMIT) return;
    o->seen_at_clock = sluice_clock_now();
    o->at = ev->at;
    o->n++;
}

/* One attempt; returns false when the machine stalled at the wrong moment
 * (the submit time could not be placed as the check needs): try again. */
static bool default_tick_attempt(struct event_base *base, sluice_loop_t *loop) {
    /* interval 16667 ns: from a submit at a tick boundary ct*tick, the
     * deadline is (ct+2)*tick - 3333, due at (ct+2)*tick */
    const uint64_t interval = 2 * TICK - 3333;
    struct one o;
    memset(&o, 0, sizeof o);
    sluice_config_t c = lt_config(sluice_debounce((int64_t)interval, false, true, -1), one_event, &o);
    /* c.tick_ns stays 0: the loop's default */
    /* The wheel starts at the limiter's creation, tick c0, and a submit
     * does not move it: a deadline is in its finest level (and the next
     * deadline exact) when its tick has the same digits above the lowest
     * six as c0. Create the limiter early in a block of 64 ticks. */
    uint64_t r;
    do r = sluice_clock_now();
    while ((r / TICK) % 64 > 30);
    const uint64_t block = r / TICK / 64;
    sluice_mt_t *m = NULL;
    LT_OK(sluice_mt_new(&m, loop, &c, 1));
    if (!m) return true;
    /* a submit time at a tick boundary after the creation, whose due tick
     * ct+2 is in the same block and (ct+2)*10 us not a multiple of 100 us
     * (a 100 us tick could not give the same answer) */
    uint64_t ct = sluice_clock_now() / TICK + 1;
    while ((ct + 2) % 10 == 0) ct++;
    while (sluice_clock_now() < ct * TICK) {
    }
    if ((ct + 2) / 64 != block) { /* stalled: the block is gone */
        sluice_mt_free(m);
        return false;
    }
    const uint64_t t = ct * TICK, D = t + interval, due = (ct + 2) * TICK;
    sluice_decision_t d;
    LT_OK(lt_submit_at(m, sluice_key_u64(1), 1, t, &d));
    LT_CHECK(d.kind == SLUICE_SCHEDULED, "decision %d", (int)d.kind);
    /* the base is not running: nothing fires before we look */
    uint64_t nd = sluice_mt_next_deadline(m);
    LT_CHECK(nd == due, "next deadline %llu, expected %llu = deadline %llu rounded up to 10 us", (unsigned long long)nd,
             (unsigned long long)due, (unsigned long long)D);
    LT_CHECK(ceil_tick(D) == due, "test arithmetic");
    /* run the base until delivered */
    uint64_t give_up = sluice_clock_now() + (uint64_t)LT_PATIENCE_MS * LT_MS;
    while (o.n == 0 && sluice_clock_now() < give_up) event_base_loop(base, EVLOOP_ONCE);
    LT_CHECK(o.n == 1, "delivered %llu", (unsigned long long)o.n);
    LT_CHECK(o.at == D, "at %llu, deadline %llu", (unsigned long long)o.at, (unsigned long long)D);
    LT_CHECK(o.seen_at_clock >= due, "delivered at %llu, before %llu (deadline %llu rounded up)",
             (unsigned long long)o.seen_at_clock, (unsigned long long)due, (unsigned long long)D);
    sluice_mt_free(m);
    return true;
}

static void test_default_tick_on_loop(void) {
    struct event_base *base;
    sluice_loop_t *loop;
    if (!lt_attached_loop(&base, &loop, NULL)) return;
    int tries = 0;
    while (!default_tick_attempt(base, loop) && ++tries < 50) {
    }
    LT_CHECK(tries < 50, "the machine stalled in every attempt");
    lt_attached_loop_free(loop, base);
}

/* ------------------------------------------------------------------ 3. real loop, many keys */

#define NKEYS 400
#define INTERVAL (100 * LT_MS)
#define LATE_BOUND (2000 * LT_MS) /* generous: a stalled shared machine, TSan */

struct many {
    struct lt_sync sync;
    uint64_t events; /* under sync.mu */
    uint64_t first_at[NKEYS], second_at[NKEYS], seen[NKEYS];
    sluice_event_kind_t first_kind[NKEYS], second_kind[NKEYS];
    uint64_t first_tok[NKEYS], second_tok[NKEYS];
    unsigned count[NKEYS];
    uint64_t early, late, bad_key;
};

static void many_event(void *user, const sluice_event_t *ev) {
    struct many *s = user;
    uint64_t clock = sluice_clock_now();
    pthread_mutex_lock(&s->sync.mu);
    uint64_t k = ev->key.kind == SLUICE_KEY_U64 ? ev->key.u64 : UINT64_MAX;
    if (k >= NKEYS) {
        s->bad_key++;
    } else {
        if (s->count[k] == 0) {
            s->first_kind[k] = ev->kind;
            s->first_at[k] = ev->at;
            s->first_tok[k] = ev->token;
        } else if (s->count[k] == 1) {
            s->second_kind[k] = ev->kind;
            s->second_at[k] = ev->at;
            s->second_tok[k] = ev->token;
            s->seen[k] = clock;
        }
        s->count[k]++;
        if (clock < ev->at)
            s->early++;
        else if (clock - ev->at > LATE_BOUND)
            s->late++;
    }
    s->events++;
    pthread_cond_broadcast(&s->sync.cv);
    pthread_mutex_unlock(&s->sync.mu);
}

static void test_real_loop_many(void) {
    static struct many s; /* large: not on the stack */
    memset(&s, 0, sizeof s);
    lt_sync_init(&s.sync);
    sluice_loop_t *loop = NULL;
    LT_OK(sluice_loop_start(&loop, NULL));
    if (!loop) return;
    sluice_config_t c = lt_config(sluice_debounce((int64_t)INTERVAL, false, true, -1), many_event, &s);
    sluice_mt_t *m = NULL;
    LT_OK(sluice_mt_new(&m, loop, &c, 0));
    if (!m) {
        sluice_loop_free(loop);
        return;
    }
    static uint64_t t1[NKEYS], t2[NKEYS];
    /* keys submitted ~25 us apart, each re-armed 1-3 ms later: deadlines
     * spread over 10 ms, many in the same tick, many ticks apart */
    for (unsigned k = 0; k < NKEYS; k++) {
        t1[k] = sluice_clock_now();
        sluice_decision_t d;
        LT_OK(lt_submit_at(m, sluice_key_u64(k), 2 * (uint64_t)k, t1[k], &d));
        if (k >= 100) {
            unsigned j = k - 100; /* its second call, ~2.5 ms after its first */
            t2[j] = sluice_clock_now();
            LT_OK(lt_submit_at(m, sluice_key_u64(j), 2 * (uint64_t)j + 1, t2[j], &d));
        }
        uint64_t until = t1[k] + 25000;
        while (sluice_clock_now() < until) {
        }
    }
    for (unsigned j = NKEYS - 100; j < NKEYS; j++) {
        t2[j] = sluice_clock_now();
        sluice_decision_t d;
        LT_OK(lt_submit_at(m, sluice_key_u64(j), 2 * (uint64_t)j + 1, t2[j], &d));
    }
    pthread_mutex_lock(&s.sync.mu);
    bool all = lt_wait_locked(&s.sync, &s.events, 2 * NKEYS);
    pthread_mutex_unlock(&s.sync.mu);
    LT_CHECK(all, "only %llu of %u events", (unsigned long long)s.events, 2 * NKEYS);
    sluice_mt_free(m);
    sluice_loop_free(loop);
    LT_CHECK(s.early == 0, "%llu events delivered before their time", (unsigned long long)s.early);
    LT_CHECK(s.late == 0, "%llu events later than %llu ms", (unsigned long long)s.late,
             (unsigned long long)(LATE_BOUND / LT_MS));
    LT_CHECK(s.bad_key == 0, "unknown keys");
    unsigned bad = 0;
    for (unsigned k = 0; k < NKEYS && bad < 5; k++) {
        /* The second call normally comes ~2.5 ms after the first, well
         * inside the interval: the first token is dropped (superseded) at
         * the second call's time. If the machine stalled the submitting
         * thread past the first deadline, that deadline fired first (by the
         * loop, or by the second call itself): the first token is emitted
         * at its deadline. Either way, exact times. */
        const uint64_t d1 = t1[k] + INTERVAL, d2 = t2[k] + INTERVAL;
        const bool superseded = t2[k] < d1;
        bool ok = s.count[k] == 2 && s.first_tok[k] == 2 * (uint64_t)k &&
                  (superseded ? s.first_kind[k] == SLUICE_EVENT_DROP && s.first_at[k] == t2[k]
                              : s.first_kind[k] == SLUICE_EVENT_EMIT && s.first_at[k] == d1) &&
                  s.second_kind[k] == SLUICE_EVENT_EMIT && s.second_tok[k] == 2 * (uint64_t)k + 1 &&
                  s.second_at[k] == d2 && s.seen[k] >= d2;
        if (!ok) {
            bad++;
            LT_CHECK(ok,
                     "key %u: %u events; first kind %d token %llu at %llu (want %s %llu at %llu); "
                     "second kind %d token %llu at %llu seen %llu (want emit %llu at %llu)",
                     k, s.count[k], (int)s.first_kind[k], (unsigned long long)s.first_tok[k],
                     (unsigned long long)s.first_at[k], superseded ? "drop" : "emit",
                     (unsigned long long)(2 * (uint64_t)k), (unsigned long long)(superseded ? t2[k] : d1),
                     (int)s.second_kind[k], (unsigned long long)s.second_tok[k], (unsigned long long)s.second_at[k],
                     (unsigned long long)s.seen[k], (unsigned long long)(2 * (uint64_t)k + 1), (unsigned long long)d2);
        }
    }
    lt_sync_destroy(&s.sync);
}

int main(void) {
    test_manual_rule();
    test_default_tick_on_loop();
    test_real_loop_many();
    LT_MAIN_END();
}
