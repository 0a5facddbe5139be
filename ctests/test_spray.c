/*
 * test_spray.c — a hostile key spray against a limiter with a live-key cap
 * (issue 6, part 4).
 *
 * A throttle (100 s window, leading + trailing) capped at CAP live keys
 * receives KEYS unique keys (3 in 4 integer keys, 1 in 4 a 22-byte string
 * key, which needs a heap copy) within 50 s of simulated time, so no window
 * ends during the spray. Checked:
 *
 *  - the first CAP - RESIDENT new keys are admitted, then every new key gets
 *    SLUICE_EFULL (token not taken, stats.full_refusals counts them), while
 *    flush / cancel / pending of an unknown key still answer 0;
 *  - RESIDENT keys created before the spray, and the first spray keys, are
 *    hit again throughout the spray: their decisions and events equal the
 *    reference model's exactly (ctests/ref) — the cap never disturbs a live
 *    key;
 *  - a cancelled key frees its place: exactly that many new keys get in;
 *  - memory stays bounded: stats.memory_bytes equals the allocator's live
 *    bytes (ctests/support/fault_alloc) and stays under CAP * 128 bytes +
 *    1 MiB; the process RSS (/proc/self/statm) stays under a generous bound
 *    (not checked under ASan, whose shadow memory and quarantine inflate it);
 *  - after every window ends (advance past them) the keys are idle and the
 *    memory is released: memory_bytes returns to within 4 KiB (+ CAP / 256
 *    bytes for the slab's chunk pointer table) of a fresh limiter's, RSS comes back down (after malloc_trim on glibc), and new
 *    keys are admitted again.
 *
 * Env: SLUICE_SPRAY_KEYS (default 2000000; 1000000 under ASan/TSan),
 *      SLUICE_SPRAY_CAP (default 200000; 100000 under ASan/TSan). The full run is SLUICE_SPRAY_KEYS=10000000
 *      SLUICE_SPRAY_CAP=1000000; docs/reliability.md has its figures.
 */
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include "ref/ref_model.h"
#include "sluice.h"
#include "support/fault_alloc.h"

#define TEST_NAME "test_spray"
#include "support/check.h"

#define SEC UINT64_C(1000000000)
#define MS UINT64_C(1000000)
#define W (100 * SEC)
#define SPRAY_SPAN (50 * SEC)
#define RESIDENT 1000
#define PROBES 1000 /* the first spray keys, tracked by the model too */

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static uint64_t rss_bytes(void) {
    FILE *f = fopen("/proc/self/statm", "r");
    if (!f) return 0;
    unsigned long size = 0, res = 0;
    int n = fscanf(f, "%lu %lu", &size, &res);
    fclose(f);
    if (n != 2) return 0;
    return (uint64_t)res * (uint64_t)sysconf(_SC_PAGESIZE);
}

static void trim(void) {
#if defined(__GLIBC__)
    malloc_trim(0);
#endif
}

/* ------------------------------------------------------------------ keys */

/* Spray key i: u64 (i | 2^63) for 3 in 4, else the 22-byte "spray:" + 16
 * hex digits. Resident key j: u64 j (j even) or "resident-<j>" (j odd). */
typedef struct {
    sluice_key_t key;
    char buf[32];
} keyhold_t;

static void spray_key(uint64_t i, keyhold_t *h) {
    if (i % 4 != 3) {
        h->key = sluice_key_u64(i | (UINT64_C(1) << 63));
    } else {
        int n = snprintf(h->buf, sizeof h->buf, "spray:%016" PRIx64, i);
        h->key = sluice_key_bytes(h->buf, (size_t)n);
    }
}

static void resident_key(int j, keyhold_t *h) {
    if (j % 2 == 0) {
        h->key = sluice_key_u64((uint64_t)j);
    } else {
        int n = snprintf(h->buf, sizeof h->buf, "resident-%d", j);
        h->key = sluice_key_bytes(h->buf, (size_t)n);
    }
}

/* tracked key id: residents 0..RESIDENT-1, probes RESIDENT.. ; -1 otherwise */
static int tracked_id(sluice_key_t k) {
    if (k.kind == SLUICE_KEY_U64) {
        if (k.u64 >> 63) {
            uint64_t i = k.u64 & ~(UINT64_C(1) << 63);
            return i < PROBES ? RESIDENT + (int)i : -1;
        }
        return k.u64 < RESIDENT && k.u64 % 2 == 0 ? (int)k.u64 : -1;
    }
    char s[40];
    if (k.len >= sizeof s) return -1;
    memcpy(s, k.bytes, k.len);
    s[k.len] = 0;
    if (strncmp(s, "resident-", 9) == 0) {
        int j = atoi(s + 9);
        return j >= 0 && j < RESIDENT && j % 2 == 1 ? j : -1;
    }
    if (strncmp(s, "spray:", 6) == 0) {
        uint64_t i = strtoull(s + 6, NULL, 16);
        return i < PROBES ? RESIDENT + (int)i : -1;
    }
    return -1;
}

/* ------------------------------------------------------------------ events */

#define NTRACK (RESIDENT + PROBES)

__extension__ typedef unsigned __int128 u128;

typedef struct {
    uint64_t n, hash; /* count and a running hash of (kind, token, at) */
} evsum_t;

static evsum_t g_core[NTRACK], g_ref[NTRACK];
static uint64_t g_untracked_events;

static void ev_add(evsum_t *s, int kind, uint64_t tok, uint64_t at) {
    s->n++;
    uint64_t h = s->hash ^ ((uint64_t)kind * UINT64_C(0x9E3779B97F4A7C15));
    h = (h ^ tok) * UINT64_C(0x100000001B3);
    h = (h ^ at) * UINT64_C(0xC2B2AE3D27D4EB4F);
    s->hash = h ^ (h >> 29);
}

static void on_event(void *user, const sluice_event_t *e) {
    (void)user;
    int id = tracked_id(e->key);
    if (id < 0) {
        g_untracked_events++;
        return;
    }
    ev_add(&g_core[id], e->kind, e->token, e->at);
}

static void take_ref(ref_model_t *m) {
    const ref_event_t *ev = ref_events(m);
    for (size_t i = 0; i < ref_event_count(m); i++) {
        int id = tracked_id(ev[i].key);
        CHECK(id >= 0, "model event for an untracked key");
        ev_add(&g_ref[id], ev[i].kind, ev[i].token, ev[i].at);
    }
    ref_clear_events(m);
}

static void compare_events(int id) {
    CHECK(g_core[id].n == g_ref[id].n && g_core[id].hash == g_ref[id].hash,
          "tracked key %d: core has %" PRIu64 " events, model %" PRIu64 " (or they differ)", id, g_core[id].n,
          g_ref[id].n);
}

/* ------------------------------------------------------------------ cap and due timers */

/* Timers first: "the result never depends on whether the event loop happened
 * to run the timer or the call first" (semantics.md). A full limiter whose
 * keys' windows have all ended at `now` must admit a new key at `now`
 * whether or not advance(now) ran first. Returns the number of failed
 * checks (reported as CORE BUG). */
static int cap_with_due_timers(void) {
    int bugs = 0;
    sluice_config_t cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.policy = sluice_throttle((int64_t)(100 * MS), true, true, SLUICE_PICK_LATEST);
    cfg.on_event = on_event;
    cfg.max_keys = 2;
    sluice_limiter_t *a, *b;
    CHECK(sluice_limiter_new(&a, &cfg) == 0 && sluice_limiter_new(&b, &cfg) == 0, "new");
    sluice_decision_t d;
    for (uint64_t k = 1; k <= 2; k++) {
        CHECK(sluice_limiter_submit(a, sluice_key_u64(k), k, 0, &d) == 0, "fill a");
        CHECK(sluice_limiter_submit(b, sluice_key_u64(k), k, 0, &d) == 0, "fill b");
    }
    /* both windows ended at 100 ms; at 500 ms the limiter is empty by the spec */
    CHECK(sluice_limiter_advance(b, 500 * MS, 0) == 2, "advance b");
    int rb = sluice_limiter_submit(b, sluice_key_u64(3), 3, 500 * MS, &d);
    int ra = sluice_limiter_submit(a, sluice_key_u64(3), 3, 500 * MS, &d);
    CHECK(rb == 0, "after advance the new key is admitted (rc %d)", rb);
    if (ra != rb) {
        bugs++;
        fprintf(stderr,
                "test_spray: CORE BUG: a limiter at max_keys whose keys' windows all ended at `now` refuses a new key "
                "with SLUICE_EFULL (%d) unless advance(now) ran first (then it admits it): the result depends on "
                "whether the event loop ran the timers first\n",
                ra);
    }
    sluice_limiter_free(a);
    sluice_limiter_free(b);
    return bugs;
}

/* ------------------------------------------------------------------ main */

static uint64_t env_u64(const char *name, uint64_t dflt) {
    const char *s = getenv(name);
    return s && *s ? strtoull(s, NULL, 0) : dflt;
}

int main(void) {
    const uint64_t nkeys = env_u64("SLUICE_SPRAY_KEYS", SANITIZED ? 1000000 : 2000000);
    const uint64_t cap = env_u64("SLUICE_SPRAY_CAP", SANITIZED ? 100000 : 200000);
    CHECK(cap > RESIDENT + PROBES + 100 && nkeys > cap, "need KEYS > CAP > %d", RESIDENT + PROBES + 100);
    int bugs = cap_with_due_timers();

    fault_alloc_t fa;
    fault_alloc_init(&fa);
    sluice_config_t cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.policy = sluice_throttle((int64_t)W, true, true, SLUICE_PICK_LATEST);
    cfg.max_keys = cap;
    cfg.on_event = on_event;
    cfg.allocator = fault_alloc_hook(&fa);
    sluice_limiter_t *l;
    CHECK(sluice_limiter_new(&l, &cfg) == 0, "limiter_new");
    ref_model_t *m;
    CHECK(ref_new(&m, &cfg.policy) == 0, "ref_new");

    sluice_stats_t st;
    CHECK(sluice_limiter_stats(l, &st) == 0, "stats");
    const uint64_t empty_bytes = st.memory_bytes;
    trim();
    const uint64_t rss0 = rss_bytes();
    const uint64_t mem_bound = cap * 128 + (UINT64_C(1) << 20);
    uint64_t tok = 0, peak_mem = 0, peak_rss = rss0;
    keyhold_t h;
    sluice_decision_t d, dr;

    /* residents: live before the spray */
    for (int j = 0; j < RESIDENT; j++) {
        resident_key(j, &h);
        tok++;
        CHECK(sluice_limiter_submit(l, h.key, tok, 0, &d) == 0 && d.kind == SLUICE_EMITTED, "resident %d", j);
        CHECK(ref_submit(m, h.key, tok, 0, &dr) == 0, "ref");
    }

    /* the spray */
    double t0 = now_s();
    uint64_t admitted = 0, refused = 0, hits = 0, next_res = 0;
    uint64_t admitted_max = cap - RESIDENT;
    uint64_t t = 0;
    for (uint64_t i = 0; i < nkeys; i++) {
        t = (uint64_t)((u128)i * SPRAY_SPAN / nkeys) + 1;
        spray_key(i, &h);
        tok++;
        int rc = sluice_limiter_submit(l, h.key, tok, t, &d);
        if (admitted < admitted_max) {
            CHECK(rc == 0 && d.kind == SLUICE_EMITTED && d.at == t, "spray key %" PRIu64 ": rc %d kind %d", i, rc,
                  d.kind);
            admitted++;
            if (i < PROBES) CHECK(ref_submit(m, h.key, tok, t, &dr) == 0, "ref");
        } else {
            CHECK(rc == SLUICE_EFULL, "spray key %" PRIu64 " past the cap: rc %d (%s), expected SLUICE_EFULL", i, rc,
                  sluice_strerror(rc));
            refused++;
        }
        if (i % 64 == 0) {
            /* an existing key keeps working exactly */
            int id = (int)(next_res++ % NTRACK);
            keyhold_t k2;
            if (id < RESIDENT)
                resident_key(id, &k2);
            else
                spray_key((uint64_t)(id - RESIDENT), &k2);
            tok++;
            int r1 = sluice_limiter_submit(l, k2.key, tok, t, &d);
            int r2 = ref_submit(m, k2.key, tok, t, &dr);
            CHECK(r1 == 0 && r2 == 0, "tracked key %d: core rc %d (%s), model %d", id, r1, sluice_strerror(r1), r2);
            CHECK(d.kind == dr.kind && d.at == dr.at, "tracked key %d: core %d@%" PRIu64 ", model %d@%" PRIu64, id,
                  d.kind, d.at, dr.kind, dr.at);
            take_ref(m);
            compare_events(id);
            hits++;
        }
        if (i % 262144 == 0 || i + 1 == nkeys) {
            CHECK(sluice_limiter_stats(l, &st) == 0, "stats");
            CHECK(st.memory_bytes == fault_alloc_live_bytes(&fa), "memory_bytes %" PRIu64 " != allocator %" PRIu64,
                  st.memory_bytes, fault_alloc_live_bytes(&fa));
            CHECK(st.live_keys <= cap, "live %" PRIu64 " > cap", st.live_keys);
            CHECK(st.memory_bytes <= mem_bound, "memory %" PRIu64 " over the bound %" PRIu64, st.memory_bytes,
                  mem_bound);
            if (st.memory_bytes > peak_mem) peak_mem = st.memory_bytes;
            uint64_t rss = rss_bytes();
            if (rss > peak_rss) peak_rss = rss;
        }
    }
    double t1 = now_s();
    CHECK(admitted == admitted_max, "admitted %" PRIu64 ", expected %" PRIu64, admitted, admitted_max);
    CHECK(sluice_limiter_stats(l, &st) == 0, "stats");
    CHECK(st.live_keys == cap, "live keys %" PRIu64 " != cap %" PRIu64, st.live_keys, cap);
    CHECK(st.full_refusals == refused, "full_refusals %" PRIu64 " != %" PRIu64, st.full_refusals, refused);
    CHECK(g_untracked_events == 0, "%" PRIu64 " events for keys hit once", g_untracked_events);
    uint64_t bytes_at_cap = st.memory_bytes;
    uint64_t max_probe_at_cap = st.max_probe;

    /* unknown keys: flush / cancel / pending answer 0 and create nothing */
    spray_key(nkeys + 5, &h);
    CHECK(sluice_limiter_pending(l, h.key, t) == 0, "pending");
    CHECK(sluice_limiter_flush(l, h.key, t) == 0, "flush");
    CHECK(sluice_limiter_cancel(l, h.key, t) == 0, "cancel");
    CHECK(sluice_limiter_check(l) == 0, "check at cap");

    /* a cancelled key frees exactly its place */
    for (int j = 0; j < 10; j++) {
        keyhold_t k2;
        spray_key((uint64_t)(PROBES + j), &k2);
        CHECK(sluice_limiter_cancel(l, k2.key, t) >= 0, "cancel");
    }
    for (int j = 0; j < 11; j++) {
        spray_key(nkeys + 100 + (uint64_t)j, &h);
        tok++;
        int rc = sluice_limiter_submit(l, h.key, tok, t, &d);
        if (j < 10)
            CHECK(rc == 0, "new key %d after 10 cancels: rc %d", j, rc);
        else
            CHECK(rc == SLUICE_EFULL, "11th new key after 10 cancels: rc %d", rc);
    }

    /* every window ends: everything idle, memory released */
    uint64_t t_end = t + 3 * W;
    int64_t fired = sluice_limiter_advance(l, t_end, 0);
    CHECK(fired >= (int64_t)cap, "advance fired %" PRId64, fired);
    CHECK(ref_advance(m, t_end) >= 0, "ref");
    take_ref(m);
    for (int id = 0; id < NTRACK; id++) compare_events(id);
    CHECK(sluice_limiter_stats(l, &st) == 0, "stats");
    CHECK(st.live_keys == 0 && st.pending == 0 && st.armed_timers == 0, "not idle: %" PRIu64 " live", st.live_keys);
    CHECK(st.memory_bytes == fault_alloc_live_bytes(&fa), "memory accounting");
    CHECK(st.memory_bytes <= empty_bytes + 4096 + cap / 256, /* the chunk pointer table may stay */
          "after idle, memory_bytes = %" PRIu64 " (empty limiter: %" PRIu64 "): not released", st.memory_bytes,
          empty_bytes);
    CHECK(sluice_limiter_check(l) == 0, "check after idle");
    uint64_t idle_bytes = st.memory_bytes;
    trim();
    uint64_t rss_idle = rss_bytes();

    /* and the limiter admits new keys again */
    for (uint64_t j = 0; j < 1000; j++) {
        spray_key(nkeys + 1000 + j, &h);
        tok++;
        CHECK(sluice_limiter_submit(l, h.key, tok, t_end, &d) == 0 && d.kind == SLUICE_EMITTED, "re-admit %" PRIu64, j);
    }
    sluice_limiter_free(l);
    ref_free(m);
    CHECK(fault_alloc_clean(&fa), "allocator not clean after free");
    fault_alloc_destroy(&fa);

    double secs = t1 - t0;
    double mib = 1024.0 * 1024.0;
    printf("test_spray: %" PRIu64 " unique keys against max_keys %" PRIu64 ": %" PRIu64 " admitted, %" PRIu64
           " refused with SLUICE_EFULL, %" PRIu64 " exact checks of live keys\n",
           nkeys, cap, admitted + RESIDENT, refused, hits);
    printf("  spray: %.2f s, %.2f M calls/s\n", secs, (double)(nkeys + hits) / secs / 1e6);
    printf("  memory at the cap: %.1f MiB (%.1f bytes per live key, bound %.1f MiB), max_probe %" PRIu64 "\n",
           (double)bytes_at_cap / mib, (double)bytes_at_cap / (double)cap, (double)mem_bound / mib, max_probe_at_cap);
    printf("  after idle: %" PRIu64 " bytes (fresh limiter: %" PRIu64 ")\n", idle_bytes, empty_bytes);
    printf("  RSS: start %.1f MiB, peak %.1f MiB, after idle + trim %.1f MiB%s\n", (double)rss0 / mib,
           (double)peak_rss / mib, (double)rss_idle / mib, UNDER_ASAN ? " (ASan: not checked)" : "");
    if (!UNDER_ASAN && rss0 > 0) {
        /* generous: 3x the limiter's own bytes + 64 MiB for the test's own tables and allocator slack */
        uint64_t rss_bound = rss0 + 3 * peak_mem + 64 * (UINT64_C(1) << 20);
        CHECK(peak_rss <= rss_bound, "peak RSS %" PRIu64 " over %" PRIu64, peak_rss, rss_bound);
        CHECK(rss_idle <= rss0 + (peak_rss - rss0) / 2 + 16 * (UINT64_C(1) << 20),
              "RSS after idle %.1f MiB did not come down (start %.1f, peak %.1f)", (double)rss_idle / mib,
              (double)rss0 / mib, (double)peak_rss / mib);
    }
    if (bugs) {
        fprintf(stderr, "test_spray: FAILED: %d check(s) of documented behaviour fail in the core (CORE BUG above)\n",
                bugs);
        return 1;
    }
    printf("test_spray: ok\n");
    return 0;
}
