/* test_fleet_util.h — helpers shared by the fleet tests (ctests/test_fleet_*.c):
 * a private redis-server, waiting for answers on a loop, a random generator and
 * an independent model of the rate semantics (spec formulas in 128-bit
 * integers, times scaled by the limit). Define TEST_NAME first. */
#ifndef SLUICE_TEST_FLEET_UTIL_H
#define SLUICE_TEST_FLEET_UTIL_H

#include <event2/event.h>
#include <event2/thread.h>
#include <dirent.h>
#include <hiredis/hiredis.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "sluice.h"
#include "sluice_fleet.h"
#include "support/check.h"
#include "support/redis_server.h"

typedef unsigned __int128 tf_u128;

__attribute__((unused)) static uint64_t tf_mono(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Starts the private server or exits 77 (skipped) when there is no redis-server. */
__attribute__((unused)) static void tf_start_redis(test_redis_t *r) {
    memset(r, 0, sizeof *r);
    if (!test_redis_available()) {
        fprintf(stderr, TEST_NAME ": SKIPPED: redis-server not found\n");
        exit(77);
    }
    CHECK(test_redis_start(r, 0) == 0, "cannot start redis-server");
}

/* ---- answers */

typedef struct tf_box {
    int done;
    sluice_fleet_result_t res;
    uint64_t answered_at; /* CLOCK_MONOTONIC */
} tf_box_t;

__attribute__((unused)) static void tf_on_result(void *user, const sluice_fleet_result_t *res) {
    tf_box_t *b = user;
    b->done++;
    b->res = *res;
    b->answered_at = tf_mono();
}

/* Runs the loop until `*count` reaches `want` (at most `limit_ms`). */
__attribute__((unused)) static void tf_run_until(struct event_base *base, const int *count, int want, int limit_ms) {
    uint64_t end = tf_mono() + (uint64_t)limit_ms * 1000000ull;
    while (*count < want) {
        CHECK(tf_mono() < end, "no answer within %d ms (%d of %d)", limit_ms, *count, want);
        event_base_loop(base, EVLOOP_ONCE | EVLOOP_NONBLOCK);
        struct timespec ts = { 0, 100000 };
        if (*count < want) nanosleep(&ts, NULL);
    }
}

/* Waits for one answer: 30 s, generous on a loaded machine (every request
 * is answered by its timeout long before). */
__attribute__((unused)) static void tf_wait(struct event_base *base, tf_box_t *b) {
    tf_run_until(base, &b->done, 1, 30000);
}

/* Runs the loop for `ms` milliseconds. */
__attribute__((unused)) static void tf_run_for(struct event_base *base, int ms) {
    uint64_t end = tf_mono() + (uint64_t)ms * 1000000ull;
    while (tf_mono() < end) {
        event_base_loop(base, EVLOOP_ONCE | EVLOOP_NONBLOCK);
        struct timespec ts = { 0, 200000 };
        nanosleep(&ts, NULL);
    }
}

/* ---- random */

static uint64_t tf_rng = 0x9E3779B97F4A7C15ull;
__attribute__((unused)) static uint64_t tf_next(void) {
    tf_rng ^= tf_rng << 13;
    tf_rng ^= tf_rng >> 7;
    tf_rng ^= tf_rng << 17;
    return tf_rng;
}
/* uniform in [lo, hi] (hi - lo < 2^64 - 1) */
__attribute__((unused)) static uint64_t tf_range(uint64_t lo, uint64_t hi) { return lo + tf_next() % (hi - lo + 1); }

/* ---- model of one rate key (semantics: Rate, Weighted calls, Quota of a key) */

typedef struct tf_model {
    uint64_t limit, per, burst;
    int nkeys;
    tf_u128 tat[16]; /* scaled by limit; 0 = fresh */
} tf_model_t;

__attribute__((unused)) static uint64_t tf_ceil(const tf_model_t *m, tf_u128 v) {
    tf_u128 q = v / m->limit + (v % m->limit != 0);
    return q > UINT64_MAX ? UINT64_MAX : (uint64_t)q;
}

/* The clock ends at 2^64-1 ns (as in the core): a call that would push a
 * key's TAT past it is dropped with retry "never"; `remaining` counts only
 * the calls that fit before it. */
__attribute__((unused)) static tf_u128 tf_room(const tf_model_t *m, tf_u128 ts) {
    tf_u128 end = (tf_u128)UINT64_MAX * m->limit, r = ts + (tf_u128)m->burst * m->per;
    return r < end ? r : end;
}

__attribute__((unused)) static sluice_decision_t tf_model_call(tf_model_t *m, int k, uint64_t t, uint64_t n) {
    tf_u128 ts = (tf_u128)t * m->limit, T = m->per, B = (tf_u128)m->burst * m->per;
    tf_u128 end = (tf_u128)UINT64_MAX * m->limit;
    tf_u128 tat = m->tat[k] > ts ? m->tat[k] : ts;
    tf_u128 nw = tat + (tf_u128)n * T;
    sluice_decision_t d;
    memset(&d, 0, sizeof d);
    if (nw <= end && nw - ts <= B) {
        m->tat[k] = nw;
        d.kind = SLUICE_EMITTED;
        d.at = t;
        d.remaining = (uint64_t)((tf_room(m, ts) - nw) / T);
        d.full = tf_ceil(m, nw);
    } else {
        d.kind = SLUICE_DROPPED;
        d.at = n > m->burst || nw > end ? SLUICE_NEVER : tf_ceil(m, nw - B);
        d.full = tf_ceil(m, tat);
    }
    return d;
}

__attribute__((unused)) static sluice_quota_t tf_model_quota(const tf_model_t *m, int k, uint64_t t, uint64_t n) {
    tf_u128 ts = (tf_u128)t * m->limit, T = m->per, B = (tf_u128)m->burst * m->per;
    tf_u128 end = (tf_u128)UINT64_MAX * m->limit;
    tf_u128 tat = m->tat[k] > ts ? m->tat[k] : ts;
    tf_u128 room = tf_room(m, ts), fresh = tat + (tf_u128)n * T;
    sluice_quota_t q;
    q.burst = m->burst;
    q.remaining = tat >= room ? 0 : (uint64_t)((room - tat) / T);
    q.full = tf_ceil(m, tat);
    if (n > m->burst || fresh > end)
        q.retry = SLUICE_NEVER;
    else
        q.retry = fresh - ts > B ? tf_ceil(m, fresh - B) : t;
    return q;
}

/* ---- commands and programs */

/* One command to the server on 127.0.0.1:`port` over a fresh blocking
 * connection (5 s timeouts). @return the reply (free it), or NULL. */
__attribute__((unused)) static redisReply *tf_cmd(int port, const char *fmt, ...) {
    struct timeval tv = { 5, 0 };
    redisContext *c = redisConnectWithTimeout("127.0.0.1", port, tv);
    if (!c || c->err) {
        if (c) redisFree(c);
        return NULL;
    }
    redisSetTimeout(c, tv);
    va_list ap;
    va_start(ap, fmt);
    redisReply *r = redisvCommand(c, fmt, ap);
    va_end(ap);
    redisFree(c);
    return r;
}

/* A blocking connection for a test's own commands (tf_ok): tf_connect makes
 * it, tf_disconnect closes it. */
__attribute__((unused)) static redisContext *tf_rc;

__attribute__((unused)) static void tf_connect(int port) {
    tf_rc = redisConnect("127.0.0.1", port);
    CHECK(tf_rc && !tf_rc->err, "redisConnect to port %d", port);
}

__attribute__((unused)) static void tf_disconnect(void) {
    redisFree(tf_rc);
    tf_rc = NULL;
}

/* One command on tf_rc that must succeed. @return its reply (free it). */
__attribute__((unused)) static redisReply *tf_ok(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    redisReply *r = redisvCommand(tf_rc, fmt, ap);
    va_end(ap);
    CHECK(r && r->type != REDIS_REPLY_ERROR, "redis command %s: %s", fmt, r ? r->str : "no reply");
    return r;
}

/* The calls of command `name` on the server on `port` so far (INFO
 * commandstats's cmdstat_NAME:calls=), 0 before the first. */
__attribute__((unused)) static long long tf_cmd_calls(int port, const char *name) {
    redisReply *r = tf_cmd(port, "INFO commandstats");
    CHECK(r && r->type == REDIS_REPLY_STRING, "INFO commandstats on port %d", port);
    char want[64];
    snprintf(want, sizeof want, "cmdstat_%s:calls=", name);
    const char *at = strstr(r->str, want);
    long long n = at ? atoll(at + strlen(want)) : 0;
    freeReplyObject(r);
    return n;
}

/* Runs a shell command; returns its standard output (free it) and its
 * wait status. */
__attribute__((unused)) static char *tf_run(const char *command, int *status) {
    FILE *p = popen(command, "r");
    CHECK(p, "popen %s", command);
    size_t cap = 1 << 16, len = 0;
    char *buf = malloc(cap);
    size_t n;
    while ((n = fread(buf + len, 1, cap - len - 1, p)) > 0) {
        len += n;
        if (len + 1 == cap) buf = realloc(buf, cap *= 2);
    }
    buf[len] = '\0';
    *status = pclose(p);
    return buf;
}

/* Whether the trace at `path` is a rate trace: its header (the lines before
 * the first step, comments and blanks aside) is `policy rate` lines, one or
 * several (v3: several quotas), and `plan` lines (v3: plans). */
__attribute__((unused)) static bool tf_is_rate_trace(const char *path) {
    FILE *f = fopen(path, "r");
    if (!f) return false;
    char line[512];
    bool rate = true;
    int header = 0;
    while (fgets(line, sizeof line, f)) {
        char *t = line;
        while (*t == ' ' || *t == '\t') t++;
        if (*t == '#' || *t == '\n' || *t == '\0') continue;
        if (*t >= '0' && *t <= '9') break; /* the first step */
        /* v3: several rate quotas, in plans or not */
        header++;
        if (strncmp(t, "plan ", 5) != 0 && !(strncmp(t, "policy", 6) == 0 && strstr(t, " rate") != NULL)) rate = false;
    }
    fclose(f);
    return rate && header >= 1;
}

/* Whether two trace outputs match by tracecmp's rules (`cmp` the tracecmp
 * binary): the order of different keys' lines at one instant is free. */
__attribute__((unused)) static bool tf_outputs_match(const char *cmp, const char *a, const char *b) {
    char pa[128], pb[128], cmd[512];
    snprintf(pa, sizeof pa, "/tmp/sluice-cmp-a-%ld.txt", (long)getpid());
    snprintf(pb, sizeof pb, "/tmp/sluice-cmp-b-%ld.txt", (long)getpid());
    FILE *fa = fopen(pa, "w"), *fb = fopen(pb, "w");
    CHECK(fa && fb, "cannot write %s or %s", pa, pb);
    fputs(a, fa);
    fputs(b, fb);
    fclose(fa);
    fclose(fb);
    snprintf(cmd, sizeof cmd, "'%s' '%s' '%s' >/dev/null 2>&1", cmp, pa, pb);
    int st = system(cmd);
    unlink(pa);
    unlink(pb);
    return st == 0;
}

/* The same output, by the rules of `cmp` (the tracecmp binary; the order
 * of different keys' lines at one instant is free), or byte for byte when
 * `cmp` is NULL. */
__attribute__((unused)) static bool tf_same_output(const char *cmp, const char *a, const char *b) {
    return cmp ? tf_outputs_match(cmp, a, b) : strcmp(a, b) == 0;
}

/* Runs every vector of `dir` (Tests/Vectors) of one kind, rate (`rate`) or
 * throttle, audit and debounce, through `exe --redis URL` for each of the
 * `n` URLs and checks each output is the local run's (tf_same_output()).
 * @return the number of vectors compared. */
__attribute__((unused)) static int tf_compare_vectors(const char *exe, const char *cmp, const char *dir,
                                                      const char *const *urls, int n, bool rate) {
    DIR *d = opendir(dir);
    CHECK(d, "cannot open %s", dir);
    struct dirent *e;
    int compared = 0;
    while ((e = readdir(d))) {
        size_t l = strlen(e->d_name);
        if (l < 7 || strcmp(e->d_name + l - 6, ".trace") != 0 || strncmp(e->d_name, "error-", 6) == 0) continue;
        char path[2048], cmd[4096];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        if (tf_is_rate_trace(path) != rate) continue;
        int st1, st2;
        snprintf(cmd, sizeof cmd, "'%s' '%s'", exe, path);
        char *local = tf_run(cmd, &st1);
        for (int u = 0; u < n; u++) {
            snprintf(cmd, sizeof cmd, "'%s' --redis '%s' '%s'", exe, urls[u], path);
            char *fleet = tf_run(cmd, &st2);
            CHECK(st1 == 0 && st2 == 0, "%s: exit statuses %d (local) %d (--redis %s)", e->d_name, st1, st2, urls[u]);
            CHECK(tf_same_output(cmp, local, fleet), "%s through %s: outputs differ\n--- local\n%s--- redis\n%s",
                  e->d_name, urls[u], local, fleet);
            free(fleet);
        }
        free(local);
        compared++;
    }
    closedir(d);
    return compared;
}

/* Writes random trace number `seed` into `f`. */
typedef void (*tf_trace_writer_fn)(FILE *f, unsigned seed);

/* Runs random traces 1..`traces` of `write` locally and through `exe
 * --redis URL` and checks the outputs are the same (tf_same_output()).
 * @return how many of the local outputs contain `marker` (what the caller
 * wants most traces to exercise). */
__attribute__((unused)) static int tf_compare_random(const char *exe, const char *cmp, const char *url, int traces,
                                                     tf_trace_writer_fn write, const char *marker) {
    char path[128];
    snprintf(path, sizeof path, "/tmp/sluice-random-%ld.trace", (long)getpid());
    int marked = 0;
    for (unsigned seed = 1; seed <= (unsigned)traces; seed++) {
        FILE *f = fopen(path, "w");
        CHECK(f, "cannot write %s", path);
        write(f, seed);
        fclose(f);
        char cmd[1024];
        int st1, st2;
        snprintf(cmd, sizeof cmd, "'%s' '%s'", exe, path);
        char *local = tf_run(cmd, &st1);
        snprintf(cmd, sizeof cmd, "'%s' --redis '%s' '%s'", exe, url, path);
        char *fleet = tf_run(cmd, &st2);
        CHECK(st1 == 0 && st2 == 0, "random trace %u: exit statuses %d (local) %d (--redis)", seed, st1, st2);
        CHECK(tf_same_output(cmp, local, fleet), "random trace %u: outputs differ\n--- local\n%s--- redis\n%s", seed,
              local, fleet);
        if (strstr(local, marker)) marked++;
        free(local);
        free(fleet);
    }
    unlink(path);
    return marked;
}

/* Writes a random trace of one timed policy. Times are multiples of 10 ms
 * and intervals of 50, so many steps land exactly on deadlines. Now and then
 * a burst of 3 to 10 calls at one time over five keys: a runner that makes
 * them together has the limiter decide several keys in one batch. */
__attribute__((unused)) static void tf_write_random_timed(FILE *f, unsigned seed) {
    static const unsigned intervals[] = { 0, 10, 50, 100, 150, 250 };
    tf_rng = (0x51ED2701C0FFEEull ^ ((uint64_t)seed * 0x100000001B3ull)) | 1;
    unsigned kind = (unsigned)(tf_next() % 3);
    unsigned w = intervals[tf_range(0, 5)];
    if (tf_next() % 8 != 0 && w == 0) w = 100; /* pass-through now and then */
    fprintf(f, "# random timed trace %u\n", seed);
    bool lead = tf_next() % 2, trail = tf_next() % 3 != 0;
    if (!lead && !trail) trail = true;
    if (kind == 0) {
        fprintf(f, "policy throttle interval=%u leading=%s trailing=%s pick=%s\n", w, lead ? "true" : "false",
                trail ? "true" : "false", tf_next() % 2 ? "latest" : "first");
    } else if (kind == 1) {
        fprintf(f, "policy audit interval=%u\n", w);
    } else {
        fprintf(f, "policy debounce interval=%u leading=%s trailing=%s", w, lead ? "true" : "false",
                trail ? "true" : "false");
        if (tf_next() % 2) fprintf(f, " maxwait=%u", w + 10 * (unsigned)tf_range(0, 30));
        fprintf(f, "\n");
    }
    uint64_t t = 0;
    int n = (int)tf_range(20, 80);
    int burst = 0; /* calls left of a burst at one time (sent together: batched by the limiter) */
    for (int i = 0; i < n; i++) {
        if (burst == 0) {
            t += tf_next() % 4 == 0 ? 0 : 10 * tf_range(0, tf_next() % 5 == 0 ? 60 : 12);
            if (tf_next() % 6 == 0) burst = (int)tf_range(3, 10);
        }
        static const char *const keys[] = { "A", "B", "C", "D", "E" };
        const char *key = keys[tf_next() % (burst ? 5 : 3)];
        unsigned r = burst ? 0 : (unsigned)(tf_next() % 20);
        if (burst) burst--;
        if (r < 14)
            fprintf(f, "%llu call %s v%d\n", (unsigned long long)t, key, i);
        else if (r < 16)
            fprintf(f, "%llu flush %s\n", (unsigned long long)t, key);
        else if (r < 18)
            fprintf(f, "%llu pending %s\n", (unsigned long long)t, key);
        else
            fprintf(f, "%llu cancel %s\n", (unsigned long long)t, key);
    }
    unsigned end = (unsigned)(tf_next() % 3);
    if (end == 1) fprintf(f, "%llu close drain\n", (unsigned long long)(t + 10 * tf_range(0, 5)));
    if (end == 2) fprintf(f, "%llu close discard\n", (unsigned long long)(t + 10 * tf_range(0, 5)));
}

#endif
