/* test_loop_threads.c — many threads calling one loop limiter at once, on
 * private and shared keys, with exact token accounting: every token is
 * reported exactly once (by its decision or by one event), events come on
 * the loop thread one at a time, carry the token's key, and each key's
 * events come in the order the key's calls were made. Run it under TSan:
 * it is the data-race test of the loop layer. */
#include "loop_test_util.h"

#include <stdatomic.h>

enum { THREADS = 8, PRIVATE_KEYS = 16, SHARED_KEYS = 8 };

static int per_thread(void) {
    const char *q = getenv("SLUICE_TEST_QUICK");
    return q && *q == '1' ? 2000 : 12000;
}

struct world {
    sluice_loop_t *loop;
    sluice_mt_t *m;
    int per;
    /* per token: times reported (decision or event) */
    atomic_uchar *reported;
    /* per token: its key number, written by the submitter before the submit */
    uint16_t *key_of;
    /* per private key: last token seen in an event (loop thread only) */
    uint64_t last_event_token[THREADS * PRIVATE_KEYS];
    atomic_int in_callback;
    atomic_ullong events, decisions_final, scheduled, errors, off_loop, overlap, wrong_key, disorder, double_report,
        inline_ok;
    uint64_t expected_final; /* tokens taken */
    struct lt_sync sync;
    atomic_ullong taken;
};

static struct world W;

static inline uint64_t tok(int t, int i) { return (uint64_t)t * (uint64_t)W.per + (uint64_t)i; }

/* key number: 0..THREADS*PRIVATE_KEYS-1 private, then the shared ones */
static inline void key_name(unsigned k, char *buf, size_t *len) {
    if (k < THREADS * PRIVATE_KEYS)
        *len = (size_t)snprintf(buf, 32, "t%u-k%u", k / PRIVATE_KEYS, k % PRIVATE_KEYS);
    else
        *len = (size_t)snprintf(buf, 32, "shared-%u", k - THREADS * PRIVATE_KEYS);
}

static void report(uint64_t token) {
    if (atomic_fetch_add(&W.reported[token], 1) != 0) atomic_fetch_add(&W.double_report, 1);
}

static void on_event(void *user, const sluice_event_t *ev) {
    (void)user;
    if (atomic_exchange(&W.in_callback, 1) != 0) atomic_fetch_add(&W.overlap, 1);
    if (!sluice_loop_in_thread(W.loop)) atomic_fetch_add(&W.off_loop, 1);
    uint64_t total = (uint64_t)THREADS * (uint64_t)W.per;
    if (ev->token >= total) {
        atomic_fetch_add(&W.wrong_key, 1);
    } else {
        unsigned k = W.key_of[ev->token];
        char name[32];
        size_t len;
        key_name(k, name, &len);
        if (ev->key.kind != SLUICE_KEY_BYTES || ev->key.len != len || memcmp(ev->key.bytes, name, len) != 0)
            atomic_fetch_add(&W.wrong_key, 1);
        if (k < THREADS * PRIVATE_KEYS) {
            /* one thread calls this key, in token order */
            if (W.last_event_token[k] != UINT64_MAX && ev->token <= W.last_event_token[k])
                atomic_fetch_add(&W.disorder, 1);
            W.last_event_token[k] = ev->token;
        }
        report(ev->token);
    }
    atomic_fetch_add(&W.events, 1);
    atomic_store(&W.in_callback, 0);
    pthread_mutex_lock(&W.sync.mu);
    pthread_cond_broadcast(&W.sync.cv);
    pthread_mutex_unlock(&W.sync.mu);
}

static void *worker(void *arg) {
    int t = (int)(intptr_t)arg;
    uint64_t rng = (uint64_t)t * 0x9e3779b97f4a7c15u + 1;
    for (int i = 0; i < W.per; i++) {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        unsigned k = (rng % 4 == 0) ? THREADS * PRIVATE_KEYS + (unsigned)(rng >> 8) % SHARED_KEYS
                                    : (unsigned)t * PRIVATE_KEYS + (unsigned)(rng >> 8) % PRIVATE_KEYS;
        uint64_t token = tok(t, i);
        W.key_of[token] = (uint16_t)k;
        char name[32];
        size_t len;
        key_name(k, name, &len);
        sluice_key_t key = sluice_key_bytes(name, len);
        sluice_decision_t d;
        int rc = sluice_mt_submit(W.m, key, token, &d);
        if (rc != 0) {
            atomic_fetch_add(&W.errors, 1);
            report(token); /* not taken: accounted as refused */
            continue;
        }
        atomic_fetch_add(&W.taken, 1);
        if (d.kind == SLUICE_SCHEDULED) {
            atomic_fetch_add(&W.scheduled, 1);
        } else {
            atomic_fetch_add(&W.decisions_final, 1);
            report(token);
        }
        switch (rng >> 60) {
        case 0: rc = sluice_mt_flush(W.m, key); break;
        case 1: rc = sluice_mt_cancel(W.m, key); break;
        case 2: rc = sluice_mt_pending(W.m, key); break;
        default: rc = 0;
        }
        if (rc < 0) atomic_fetch_add(&W.errors, 1);
        if ((i & 1023) == 0) sched_yield();
    }
    return NULL;
}

static void run(const char *name, sluice_policy_t policy, unsigned nshards, bool attach) {
    printf("%s (%u shards, %s loop)\n", name, nshards, attach ? "attached" : "owned");
    memset(&W, 0, sizeof W);
    W.per = per_thread();
    size_t total = (size_t)THREADS * (size_t)W.per;
    W.reported = calloc(total, sizeof *W.reported);
    W.key_of = calloc(total, sizeof *W.key_of);
    for (size_t i = 0; i < THREADS * PRIVATE_KEYS; i++) W.last_event_token[i] = UINT64_MAX;
    lt_sync_init(&W.sync);

    struct event_base *base = NULL;
    if (attach) {
        /* the caller's base, run by this thread below (attach from it) */
        base = lt_precise_base();
        LT_CHECK(base != NULL, "base");
        LT_OK(sluice_loop_attach(&W.loop, base, NULL));
    } else {
        LT_OK(sluice_loop_start(&W.loop, NULL));
    }
    sluice_config_t c = lt_config(policy, on_event, NULL);
    LT_OK(sluice_mt_new(&W.m, W.loop, &c, nshards));

    pthread_t th[THREADS];
    for (int t = 0; t < THREADS; t++) pthread_create(&th[t], NULL, worker, (void *)(intptr_t)t);
    if (attach) {
        /* run the loop here while the workers call */
        for (;;) {
            event_base_loop(base, EVLOOP_NONBLOCK);
            if (atomic_load(&W.taken) + atomic_load(&W.errors) >= total) break;
            struct timespec ts = { 0, 200000 };
            nanosleep(&ts, NULL);
        }
    }
    for (int t = 0; t < THREADS; t++) pthread_join(th[t], NULL);

    /* close(drain): every value still pending is emitted */
    int rc = sluice_mt_close(W.m, SLUICE_CLOSE_DRAIN);
    LT_CHECK(rc == 0, "close: %d", rc);
    uint64_t want_events = atomic_load(&W.scheduled);
    uint64_t deadline = sluice_clock_now() + LT_PATIENCE_MS * LT_MS;
    while (atomic_load(&W.events) < want_events && sluice_clock_now() < deadline) {
        if (attach)
            event_base_loop(base, EVLOOP_NONBLOCK);
        else
            lt_sleep_ms(1);
    }
    LT_CHECK(atomic_load(&W.events) == want_events, "events %llu, scheduled %llu",
             (unsigned long long)atomic_load(&W.events), (unsigned long long)want_events);
    sluice_mt_stats_t st;
    LT_OK(sluice_mt_stats(W.m, &st));
    LT_CHECK(st.core.pending == 0 && st.core.live_keys == 0, "nothing left after drain");
    sluice_mt_free(W.m);
    LT_OK(sluice_loop_free(W.loop));
    if (base) event_base_free(base);

    size_t missing = 0, first_missing = 0;
    for (size_t i = 0; i < total; i++) {
        if (atomic_load(&W.reported[i]) != 1) {
            if (missing++ == 0) first_missing = i;
        }
    }
    LT_CHECK(missing == 0, "%zu tokens not reported exactly once (first %zu: %u times)", missing, first_missing,
             missing ? (unsigned)atomic_load(&W.reported[first_missing]) : 0u);
    LT_CHECK(atomic_load(&W.double_report) == 0, "double reports: %llu",
             (unsigned long long)atomic_load(&W.double_report));
    LT_CHECK(atomic_load(&W.errors) == 0, "errors: %llu", (unsigned long long)atomic_load(&W.errors));
    LT_CHECK(atomic_load(&W.off_loop) == 0, "callbacks off the loop thread: %llu",
             (unsigned long long)atomic_load(&W.off_loop));
    LT_CHECK(atomic_load(&W.overlap) == 0, "overlapping callbacks: %llu", (unsigned long long)atomic_load(&W.overlap));
    LT_CHECK(atomic_load(&W.wrong_key) == 0, "events with a wrong key: %llu",
             (unsigned long long)atomic_load(&W.wrong_key));
    LT_CHECK(atomic_load(&W.disorder) == 0, "events of a key out of order: %llu",
             (unsigned long long)atomic_load(&W.disorder));
    printf("  %zu tokens: %llu final decisions, %llu scheduled, %llu events\n", total,
           (unsigned long long)atomic_load(&W.decisions_final), (unsigned long long)atomic_load(&W.scheduled),
           (unsigned long long)atomic_load(&W.events));
    lt_sync_destroy(&W.sync);
    free(W.reported);
    free(W.key_of);
}

int main(void) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    run("throttle 1 ms", sluice_throttle(1 * LT_MS, true, true, SLUICE_PICK_LATEST), 0, false);
    run("debounce 2 ms maxwait 5 ms", sluice_debounce(2 * LT_MS, false, true, 5 * LT_MS), 16, false);
    run("audit 1 ms, one shard", sluice_audit(1 * LT_MS), 1, false);
    run("rate 50 per 10 ms", sluice_rate(50, 10 * (int64_t)LT_MS, 0), 8, false);
    run("throttle 1 ms pick first", sluice_throttle(1 * LT_MS, false, true, SLUICE_PICK_FIRST), 4, true);
    LT_MAIN_END();
}
