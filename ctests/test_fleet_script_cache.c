/* test_fleet_script_cache.c — the fleet's scripts loaded as function
 * libraries keep what they read from their arguments between runs (the rate
 * script its policies, fleet_script.c policy1, and its plan sets, psets;
 * the timed script its policies, leases and key names, timed_script.c
 * KEPT). Over random runs
 * under more of those than a library keeps, interleaved, every reply (and,
 * for the rate script, every key's expiry) is exactly that of the same
 * script run by EVAL, which makes everything anew each run; an argument that
 * differs from a kept policy's only by a character that makes it malformed
 * is refused by both, as before. */
#define TEST_NAME "test_fleet_script_cache"
#include "test_fleet_util.h"

#include <hiredis/hiredis.h>

#include "fleet-internal.h"
#include "redis-script.h"
#include "timed-internal.h"

#define SEC 1000000000ull
#define POLICIES 90 /* more than the 64 the library keeps */
#define RUNS 1500

struct pol {
    char limit[24], nper[24], bper[48], extra[16], cend[48];
};

/* Loads a script as the limiter loads it (FUNCTION LOAD of its library; anew:
 * REPLACE, so nothing is kept from an earlier part of the test);
 * its function's name goes to `fn`. */
static void load_library(const char *text, size_t len, char fn[SLUICE__SCRIPT_FNAME_LEN + 1]) {
    sluice__script_t sc;
    sluice__script_init(&sc, text, len);
    CHECK(sc.lib, "the library's text");
    const char *argv[] = { "FUNCTION", "LOAD", "REPLACE", sc.lib };
    size_t lens[] = { 8, 4, 7, sc.lib_len };
    redisReply *r = redisCommandArgv(tf_rc, 4, argv, lens);
    CHECK(r && r->type == REDIS_REPLY_STRING, "FUNCTION LOAD: %s", r && r->str ? r->str : "no reply");
    freeReplyObject(r);
    memcpy(fn, sc.fname, SLUICE__SCRIPT_FNAME_LEN + 1);
    sluice__script_free(&sc);
}

/* One run of the single form on key `key`: by FCALL of `fn` or (fn NULL)
 * by EVAL. Arguments: op, now, limit, cost*per, burst*per, extra, end. */
static redisReply *run(const char *fn, const char *key, const char *now, const struct pol *p) {
    const char *argv[11];
    size_t n = 0;
    argv[n++] = fn ? "FCALL" : "EVAL";
    argv[n++] = fn ? fn : sluice_fleet_script();
    argv[n++] = "1";
    argv[n++] = key;
    argv[n++] = "C";
    argv[n++] = now;
    argv[n++] = p->limit;
    argv[n++] = p->nper;
    argv[n++] = p->bper;
    argv[n++] = p->extra;
    argv[n++] = p->cend;
    redisReply *r = redisCommandArgv(tf_rc, (int)n, argv, NULL);
    CHECK(r, "%s: no reply", argv[0]);
    return r;
}

/* Two replies are the same value. */
static bool same(const redisReply *a, const redisReply *b) {
    if (a->type != b->type) return false;
    switch (a->type) {
    case REDIS_REPLY_INTEGER: return a->integer == b->integer;
    case REDIS_REPLY_STRING:
    case REDIS_REPLY_ERROR:
    case REDIS_REPLY_STATUS: return a->len == b->len && memcmp(a->str, b->str, a->len) == 0;
    case REDIS_REPLY_ARRAY:
        if (a->elements != b->elements) return false;
        for (size_t i = 0; i < a->elements; i++)
            if (!same(a->element[i], b->element[i])) return false;
        return true;
    default: return true;
    }
}

/* The rate script: random single calls under random policies. */
static void rate_script(void) {
    char fn[SLUICE__SCRIPT_FNAME_LEN + 1];
    load_library(sluice_fleet_script(), sluice__fleet_script_len(), fn);

    static struct pol pols[POLICIES];
    static const uint64_t limits[] = { 1, 3, 10, 1000, 900000, 900001 };
    static const uint64_t pers[] = { 1, 1000, 1000000000ull, 60000000000ull };
    /* in pairs that differ only in the extra expiry, and many that share a
     * limit or a burst*per */
    for (int i = 0; i < POLICIES; i++) {
        struct pol *p = &pols[i];
        uint64_t limit = limits[tf_next() % 6], per = pers[tf_next() % 4], burst = tf_range(1, 3);
        if (i % 2) {
            *p = pols[i - 1];
            snprintf(p->extra, sizeof p->extra, "900000");
            continue;
        }
        snprintf(p->limit, sizeof p->limit, "%llu", (unsigned long long)limit);
        snprintf(p->nper, sizeof p->nper, "%llu", (unsigned long long)per);
        snprintf(p->bper, sizeof p->bper, "%llu", (unsigned long long)(burst * per));
        /* (minutes of extra expiry: no key expires while the test runs, in
         * real time, between the reads of its two twins) */
        snprintf(p->extra, sizeof p->extra, "600000");
        /* the end of the clock, (2^64 - 1) * limit, in decimal */
        sluice__fleet_u128_str((fl_u128)UINT64_MAX * limit, p->cend);
    }

    /* random calls, each under a random policy: FCALL (policies kept) and
     * EVAL (made anew) on keys of their own answer alike */
    uint64_t now = 1795874631000000000ull;
    long admitted = 0;
    long long maxspan = 0; /* ms: the longest real time one run's two twins took */
    for (int i = 0; i < RUNS; i++) {
        const struct pol *p = &pols[tf_next() % POLICIES];
        now += tf_range(0, 400) * 1000000ull;
        char t[24], kf[32], ke[32];
        snprintf(t, sizeof t, "%llu", (unsigned long long)now);
        unsigned k = (unsigned)(tf_next() % 5);
        snprintf(kf, sizeof kf, "sc:f:%u", k);
        snprintf(ke, sizeof ke, "sc:e:%u", k);
        uint64_t t0 = tf_mono();
        redisReply *a = run(fn, kf, t, p), *e = run(NULL, ke, t, p);
        CHECK(a->type == REDIS_REPLY_ARRAY && a->elements == 3, "run %d: FCALL reply not {status, t, TAT}", i);
        CHECK(same(a, e), "run %d (limit %s, burst*per %s): FCALL and EVAL answer differently", i, p->limit, p->bper);
        if (a->element[0]->integer == 1) admitted++;
        /* and their keys expire alike: two expiries set by the same run (this
         * one's, or an earlier one's that an admission kept) differ by no more
         * than the real time between that run's writes, and their reads by
         * this run's: the longest such time so far bounds the difference */
        redisReply *xf = tf_ok("PTTL %s", kf), *xe = tf_ok("PTTL %s", ke);
        long long span = (long long)((tf_mono() - t0) / 1000000) + 1;
        if (span > maxspan) maxspan = span;
        CHECK(xf->type == REDIS_REPLY_INTEGER && xe->type == REDIS_REPLY_INTEGER &&
                  llabs(xf->integer - xe->integer) <= 2 * maxspan + 2,
              "run %d (extra %s): the FCALL key expires in %lld ms, the EVAL key in %lld ms", i, p->extra, xf->integer,
              xe->integer);
        freeReplyObject(xf);
        freeReplyObject(xe);
        freeReplyObject(a);
        freeReplyObject(e);
    }
    CHECK(admitted > RUNS / 10 && admitted < RUNS, "%ld of %d calls admitted: the calls do not test both outcomes",
          admitted, RUNS);

    /* malformed twins of a kept policy: refused by both, nothing written */
    const struct pol *p = &pols[0];
    redisReply *ok = run(fn, "sc:twin", "1000", p);
    CHECK(ok->type == REDIS_REPLY_ARRAY, "the twin's policy itself");
    freeReplyObject(ok);
    for (int v = 0; v < 4; v++) {
        struct pol q = *p;
        if (v == 0) strcat(q.bper, " ");
        if (v == 1) strcat(q.limit, "x");
        if (v == 2) {
            memmove(q.cend + 1, q.cend, strlen(q.cend) + 1);
            q.cend[0] = '0';
        }
        if (v == 3) snprintf(q.limit, sizeof q.limit, "0");
        for (int by = 0; by < 2; by++) {
            redisReply *r = run(by ? NULL : fn, "sc:twin2", "2000", &q);
            CHECK(r->type == REDIS_REPLY_ERROR && strstr(r->str, "bad arguments"),
                  "malformed twin %d by %s: want 'bad arguments', got type %d", v, by ? "EVAL" : "FCALL", r->type);
            freeReplyObject(r);
        }
    }
    redisReply *g = tf_ok("EXISTS sc:twin2");
    CHECK(g->type == REDIS_REPLY_INTEGER && g->integer == 0, "a refused run wrote its key");
    freeReplyObject(g);
}

/* One run of a script: by FCALL of `fn`, or (fn NULL) by EVAL of `script`. */
static redisReply *trun(const char *fn, int nkeys, const char *const *keys, int nargs, const char *const *args,
                        const char *script) {
    const char *argv[64];
    int n = 0;
    char nk[8];
    snprintf(nk, sizeof nk, "%d", nkeys);
    argv[n++] = fn ? "FCALL" : "EVAL";
    argv[n++] = fn ? fn : script;
    argv[n++] = nk;
    for (int i = 0; i < nkeys; i++) argv[n++] = keys[i];
    for (int i = 0; i < nargs; i++) argv[n++] = args[i];
    redisReply *r = redisCommandArgv(tf_rc, n, argv, NULL);
    CHECK(r, "%s: no reply", argv[0]);
    return r;
}

#define TABLES 70 /* plan tables: more than the 64 the library keeps */
#define PRUNS 1200

/* The rate script under plans: random calls in the plans' form ('P', one
 * key) under random tables of plan sets, interleaved. */
static void plans_script(void) {
    char fn[SLUICE__SCRIPT_FNAME_LEN + 1];
    load_library(sluice_fleet_script(), sluice__fleet_script_len(), fn);
    /* a table: ARGV 2 .. its arguments, as strings */
    static char targ[TABLES][40][48];
    static int tn[TABLES], tsets[TABLES];
    static const uint64_t limits[] = { 1, 2, 10, 300 };
    static const uint64_t pers[] = { 1000000000ull, 60000000000ull, 3600000000000ull };
    for (int t = 0; t < TABLES; t++) {
        int n = 0;
        snprintf(targ[t][n++], 48, "%s", t % 2 ? "600000" : "900000");
        int ns = (int)tf_range(1, 2);
        tsets[t] = ns;
        snprintf(targ[t][n++], 48, "%d", ns);
        for (int si = 0; si < ns; si++) {
            int m = (int)tf_range(1, 3);
            snprintf(targ[t][n++], 48, "%d", m);
            for (int k = 0; k < m; k++) {
                uint64_t limit = limits[tf_next() % 4] * (uint64_t)(k + 1), per = pers[k];
                uint64_t burst = tf_range(1, 3);
                snprintf(targ[t][n++], 48, "q%d", k);
                snprintf(targ[t][n++], 48, "%llu", (unsigned long long)limit);
                snprintf(targ[t][n++], 48, "%llu", (unsigned long long)per);
                snprintf(targ[t][n++], 48, "%llu", (unsigned long long)(burst * per));
                sluice__fleet_u128_str((fl_u128)UINT64_MAX * limit, targ[t][n++]);
            }
        }
        tn[t] = n;
    }
    uint64_t now = 1795874631000000000ull;
    long admitted = 0;
    long long maxspan = 0; /* ms: the longest real time one run's two twins took */
    for (int i = 0; i < PRUNS; i++) {
        int t = (int)(tf_next() % TABLES);
        now += tf_range(0, 300) * 1000000ull;
        char ts[24], kf[32], ke[32], si[8];
        snprintf(ts, sizeof ts, "%llu", (unsigned long long)now);
        snprintf(si, sizeof si, "%d", (int)tf_range(1, (uint64_t)tsets[t]));
        /* (each table its own keys: a key's state belongs to its plan set) */
        unsigned k = (unsigned)(tf_next() % 3);
        snprintf(kf, sizeof kf, "pc:f:%d:%u", t, k);
        snprintf(ke, sizeof ke, "pc:e:%d:%u", t, k);
        const char *args[48];
        int na = 0;
        args[na++] = "P";
        for (int a = 0; a < tn[t]; a++) args[na++] = targ[t][a];
        args[na++] = "C";
        args[na++] = ts;
        args[na++] = si;
        args[na++] = "1";
        const char *keyf[1] = { kf }, *keye[1] = { ke };
        uint64_t t0 = tf_mono();
        redisReply *a = trun(fn, 1, keyf, na, args, sluice_fleet_script()),
                   *e = trun(NULL, 1, keye, na, args, sluice_fleet_script());
        CHECK(a->type == REDIS_REPLY_ARRAY && a->elements >= 3, "plans run %d: FCALL: %s", i, a->str ? a->str : "");
        CHECK(same(a, e), "plans run %d (table %d): FCALL and EVAL answer differently", i, t);
        if (a->element[0]->integer == 1) admitted++;
        redisReply *xf = tf_ok("PTTL %s", kf), *xe = tf_ok("PTTL %s", ke);
        long long span = (long long)((tf_mono() - t0) / 1000000) + 1; /* (as in rate_script) */
        if (span > maxspan) maxspan = span;
        CHECK(xf->type == REDIS_REPLY_INTEGER && xe->type == REDIS_REPLY_INTEGER &&
                  llabs(xf->integer - xe->integer) <= 2 * maxspan + 2,
              "plans run %d (table %d): the FCALL key expires in %lld ms, the EVAL key in %lld ms", i, t, xf->integer,
              xe->integer);
        freeReplyObject(xf);
        freeReplyObject(xe);
        freeReplyObject(a);
        freeReplyObject(e);
    }
    CHECK(admitted > PRUNS / 10 && admitted < PRUNS, "plans: %ld of %d admitted: both outcomes not tested", admitted,
          PRUNS);
}

#define TPARTS 70 /* partitions, each with its own policy and lease: more than 64 */
#define TSTEPS 2500

/* The timed script: calls, claims and acknowledgements on partitions of
 * their own policy and lease, twins for FCALL and EVAL. */
static void timed_script(void) {
    char fn[SLUICE__SCRIPT_FNAME_LEN + 1];
    load_library(sluice_fleet_timed_script(), sluice__timed_script_len(), fn);
    static char pol[TPARTS][64], lease[TPARTS][24];
    static const char *const ws[] = { "1000000", "50000000", "3000000000" };
    for (int i = 0; i < TPARTS; i++) {
        const char *w = ws[tf_next() % 3];
        switch (i % 3) {
        case 0:
            snprintf(pol[i], sizeof pol[i], "T %s %d %d %d", w, (int)(tf_next() % 2), (int)(tf_next() % 2),
                     (int)(tf_next() % 2));
            break;
        case 1: snprintf(pol[i], sizeof pol[i], "A %s", w); break;
        default:
            if (tf_next() % 2)
                snprintf(pol[i], sizeof pol[i], "D %s %d 1 -", w, (int)(tf_next() % 2));
            else
                snprintf(pol[i], sizeof pol[i], "D %s 0 1 %llu", w, 3 * strtoull(w, NULL, 10));
        }
        snprintf(lease[i], sizeof lease[i], "%llu", 1000000000ull + (unsigned long long)i * 1000);
        /* (the generations start alike: a counter that does not exist starts
         * from the server's clock) */
        freeReplyObject(tf_ok("SET {tf%d}:g 1000", i));
        freeReplyObject(tf_ok("SET {te%d}:g 1000", i));
    }
    /* the deliveries each partition holds (generation, attempt) */
    static long long held[TPARTS][16][2];
    static int nheld[TPARTS];
    uint64_t now = 1700000000000000000ull;
    int claimed = 0, acked = 0, calls = 0;
    for (int step = 0; step < TSTEPS; step++) {
        int i = (int)(tf_next() % TPARTS);
        now += tf_range(0, 20) * 1000000ull;
        char t[24], pf[16], pe[16], sf[20], se[20], nb[8];
        snprintf(t, sizeof t, "%llu", (unsigned long long)now);
        snprintf(pf, sizeof pf, "{tf%d}", i);
        snprintf(pe, sizeof pe, "{te%d}", i);
        snprintf(sf, sizeof sf, "{tf%d}:s", i);
        snprintf(se, sizeof se, "{te%d}:s", i);
        const char *args[24] = { NULL, t, pol[i], lease[i], "86400000" };
        int nargs = 5, nkeys = 1;
        const char *kf[2] = { pf, sf }, *ke[2] = { pe, se };
        static char vals[4][16], gens[3][24], atts[3][8];
        unsigned what = (unsigned)(tf_next() % 20);
        char op;
        if (what < 12) { /* a batch of 1 to 4 calls */
            op = 'B';
            int n = (int)tf_range(1, 4);
            snprintf(nb, sizeof nb, "%d", n);
            args[nargs++] = nb;
            for (int c = 0; c < n; c++) {
                static const char *const keys[] = { "k0", "k1", "k2" };
                snprintf(vals[c], sizeof vals[c], "v%d.%d", step, c);
                args[nargs++] = keys[tf_next() % 3];
                args[nargs++] = vals[c];
            }
            nkeys = 2;
            calls += n;
        } else if (what < 17 || nheld[i] == 0) { /* a claim of at most 1 to 4 */
            op = 'W';
            snprintf(nb, sizeof nb, "%d", (int)tf_range(1, 4));
            args[nargs++] = nb;
        } else { /* acknowledgements of 1 to 3 held deliveries, one maybe of a wrong attempt */
            op = 'K';
            int n = (int)tf_range(1, nheld[i] < 3 ? (uint64_t)nheld[i] : 3);
            snprintf(nb, sizeof nb, "%d", n);
            args[nargs++] = nb;
            for (int c = 0; c < n; c++) {
                int h = (int)(tf_next() % (uint64_t)nheld[i]);
                snprintf(gens[c], sizeof gens[c], "%lld", held[i][h][0]);
                snprintf(atts[c], sizeof atts[c], "%lld", held[i][h][1] + (tf_next() % 8 == 0));
                args[nargs++] = gens[c];
                args[nargs++] = atts[c];
                held[i][h][0] = held[i][--nheld[i]][0];
                held[i][h][1] = held[i][nheld[i]][1];
            }
            acked += n;
        }
        char ops[2] = { op, 0 };
        args[0] = ops;
        redisReply *a = trun(fn, nkeys, kf, nargs, args, NULL),
                   *e = trun(NULL, nkeys, ke, nargs, args, sluice_fleet_timed_script());
        CHECK(a->type == REDIS_REPLY_ARRAY, "step %d (%c, %s): FCALL: %s", step, op, pol[i], a->str ? a->str : "");
        CHECK(same(a, e), "step %d (%c on partition %d, policy '%s'): FCALL and EVAL answer differently", step, op, i,
              pol[i]);
        if (op == 'W')
            for (size_t k = 3; k + 4 < a->elements; k += 5) {
                claimed++;
                if (nheld[i] < 16) {
                    held[i][nheld[i]][0] = a->element[k]->integer;
                    held[i][nheld[i]][1] = a->element[k + 1]->integer;
                    nheld[i]++;
                }
            }
        freeReplyObject(a);
        freeReplyObject(e);
    }
    CHECK(claimed > 50 && acked > 50, "%d calls, %d deliveries claimed, %d acknowledged: too few to test", calls,
          claimed, acked);
}

int main(void) {
    test_redis_t redis;
    tf_start_redis(&redis);
    tf_connect(redis.port);
    rate_script();
    plans_script();
    timed_script();
    tf_disconnect();
    test_redis_stop(&redis);
    printf(TEST_NAME ": ok\n");
    return 0;
}
