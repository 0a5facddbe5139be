/* test_loop_submit_u64.c — an integer key passed as itself is the key
 * sluice_key_u64(key): the same decisions, times, errors and events.
 *
 *  - two limiters with the same configuration and reporting flags (on a
 *    base that is never dispatched, and an hour's throttle, so that the
 *    calls' few nanoseconds apart change nothing), one called through
 *    sluice_mt_submit(sluice_key_u64(key)), the other through
 *    sluice_mt_submit_u64(key): equal decisions, and per key the same
 *    events in the same order (the reported ones included, whose key the
 *    loop layer rebuilds from the integer);
 *  - rate: sluice_mt_submit_with_options() on sluice_key_u64(key) (the
 *    integer path) against the same call on the key's 8 bytes (the checked
 *    path): equal decisions, `when` set to a time within the call, errors
 *    alike with `when` untouched;
 *  - a closed limiter: SLUICE_ECLOSED from each; NULL: SLUICE_EINVAL. */
#include "loop_test_util.h"

#define KEYS 50
#define MAXEV 20000

struct rec {
    uint64_t key, token;
    int kind;
};

struct log {
    pthread_mutex_t mu;
    struct rec ev[MAXEV];
    size_t n;
    int bad_key; /* an event whose key is not an integer key */
};

static void on_event(void *user, const sluice_event_t *ev) {
    struct log *l = user;
    pthread_mutex_lock(&l->mu);
    if (ev->key.kind != SLUICE_KEY_U64) l->bad_key++;
    if (l->n < MAXEV) l->ev[l->n++] = (struct rec){ ev->key.u64, ev->token, (int)ev->kind };
    pthread_mutex_unlock(&l->mu);
}

/* The events of one key, in order. */
static size_t events_of(const struct log *l, uint64_t key, struct rec *out) {
    size_t n = 0;
    for (size_t i = 0; i < l->n; i++)
        if (l->ev[i].key == key) out[n++] = l->ev[i];
    return n;
}

static struct log la, lb;
static struct rec ea[MAXEV], eb[MAXEV];

static void test_same_calls(void) {
    printf("sluice_mt_submit_u64() and sluice_mt_submit(): same decisions and events\n");
    /* an attached base that is never dispatched: no timer pass moves a
     * shard's clock between the calls, so both limiters see the same times */
    struct event_base *base;
    sluice_loop_t *loop;
    if (!lt_attached_loop(&base, &loop, NULL)) return;
    pthread_mutex_init(&la.mu, NULL);
    pthread_mutex_init(&lb.mu, NULL);
    sluice_config_t c =
        lt_config(sluice_throttle(3600000 * (int64_t)LT_MS, true, true, SLUICE_PICK_LATEST), on_event, &la);
    sluice_mt_options_t o = { 8, SLUICE_MT_REPORT_ALL, NULL };
    sluice_mt_t *a = NULL, *b = NULL;
    LT_OK(sluice_mt_new_with_options(&a, loop, &c, &o));
    c.user = &lb;
    LT_OK(sluice_mt_new_with_options(&b, loop, &c, &o));
    if (!a || !b) {
        if (a) sluice_mt_free(a);
        if (b) sluice_mt_free(b);
        lt_attached_loop_free(loop, base);
        return;
    }
    uint64_t x = 12345;
    int mismatched = 0;
    for (uint64_t i = 0; i < 3000; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        uint64_t key = (x % KEYS) * UINT64_C(0x9E3779B97F4A7C15);
        sluice_decision_t da, db;
        memset(&da, 0xA5, sizeof da);
        memset(&db, 0xA5, sizeof db);
        int ra = sluice_mt_submit(a, sluice_key_u64(key), i, &da);
        int rb = sluice_mt_submit_u64(b, key, i, &db);
        if (ra != rb || da.kind != db.kind) mismatched++;
    }
    LT_CHECK(mismatched == 0, "%d decisions differ", mismatched);
    LT_OK(sluice_mt_close(a, SLUICE_CLOSE_DRAIN));
    LT_OK(sluice_mt_close(b, SLUICE_CLOSE_DRAIN));
    sluice_decision_t d;
    LT_CHECK(sluice_mt_submit_u64(b, 1, 1, &d) == SLUICE_ECLOSED, "closed: submit_u64");
    uint64_t when = 77;
    LT_CHECK(lt_submit_timed(b, sluice_key_u64(1), 1, 1, &d, &when) == SLUICE_ECLOSED && when == 77,
             "closed: submit_with_options");
    sluice_mt_free(a); /* delivers what is left */
    sluice_mt_free(b);
    lt_attached_loop_free(loop, base);
    LT_CHECK(la.bad_key == 0 && lb.bad_key == 0, "events with a byte key: %d / %d", la.bad_key, lb.bad_key);
    LT_CHECK(la.n == lb.n && la.n > 0, "events %zu / %zu", la.n, lb.n);
    for (uint64_t k = 0; k < KEYS; k++) {
        uint64_t key = k * UINT64_C(0x9E3779B97F4A7C15);
        size_t na = events_of(&la, key, ea), nb = events_of(&lb, key, eb);
        bool same = na == nb;
        for (size_t i = 0; same && i < na; i++) same = ea[i].token == eb[i].token && ea[i].kind == eb[i].kind;
        LT_CHECK(same, "key %llu: %zu / %zu events, or in another order", (unsigned long long)k, na, nb);
    }
    pthread_mutex_destroy(&la.mu);
    pthread_mutex_destroy(&lb.mu);
}

static void test_cost_timed(void) {
    printf("sluice_mt_submit_with_options(): an integer key and its bytes, same decisions, a time\n");
    sluice_loop_t *loop = NULL;
    LT_OK(sluice_loop_start(&loop, NULL));
    if (!loop) return;
    sluice_config_t c = lt_config(sluice_rate(5, 1000 * (int64_t)LT_MS, 10), NULL, NULL);
    sluice_mt_t *a = NULL, *b = NULL;
    LT_OK(sluice_mt_new(&a, loop, &c, 4));
    LT_OK(sluice_mt_new(&b, loop, &c, 4));
    if (!a || !b) {
        if (a) sluice_mt_free(a);
        if (b) sluice_mt_free(b);
        sluice_loop_free(loop);
        return;
    }
    int mismatched = 0, emitted = 0, dropped = 0, late = 0;
    for (uint64_t i = 0; i < 400; i++) {
        uint64_t key = i % 7, cost = 1 + i % 3;
        sluice_decision_t da, db;
        uint64_t wa = 0, wb = 0;
        uint64_t before = sluice_clock_now();
        int ra = lt_submit_timed(a, sluice_key_u64(key), i, cost, &da, &wa);
        int rb = lt_submit_timed(b, sluice_key_bytes(&key, sizeof key), i, cost, &db, &wb);
        uint64_t after = sluice_clock_now();
        if (ra != rb || ra != 0 || da.kind != db.kind) mismatched++;
        if (wb < before || wb > after || wa < before || wa > after) late++;
        if (db.kind == SLUICE_EMITTED) emitted++;
        if (db.kind == SLUICE_DROPPED) dropped++;
    }
    LT_CHECK(mismatched == 0, "%d calls differ", mismatched);
    LT_CHECK(late == 0, "%d times outside their call", late);
    LT_CHECK(emitted > 0 && dropped > 0, "emitted %d, dropped %d", emitted, dropped);
    sluice_decision_t d;
    uint64_t wa = 5, wb = 5;
    uint64_t k1 = 1;
    int ra = lt_submit_timed(a, sluice_key_u64(1), 1, SLUICE_RATE_MAX + 1, &d, &wa);
    int rb = lt_submit_timed(b, sluice_key_bytes(&k1, sizeof k1), 1, SLUICE_RATE_MAX + 1, &d, &wb);
    LT_CHECK(ra == rb && rb == SLUICE_ERANGE && wa == 5 && wb == 5, "cost too big: %d / %d, when %llu", ra, rb,
             (unsigned long long)wb);
    LT_CHECK(sluice_mt_submit_u64(NULL, 1, 1, &d) == SLUICE_EINVAL, "NULL limiter");
    LT_CHECK(lt_submit_at(a, sluice_key_u64(1), 1, sluice_clock_now() + 1000 * LT_MS, &d) == SLUICE_ERANGE,
             "a time ahead of the clock");
    sluice_mt_free(a);
    sluice_mt_free(b);
    sluice_loop_free(loop);
}

int main(void) {
    test_same_calls();
    test_cost_timed();
    LT_MAIN_END();
}
