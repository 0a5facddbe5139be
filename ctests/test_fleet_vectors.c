/* test_fleet_vectors.c — every rate vector of Tests/Vectors (format v3
 * included: several quotas, plans), and random v3 traces, give the same
 * output through `sluice-trace --redis URL` (the fleet limiter, manual time,
 * private redis-servers) as through the local run, byte for byte, with the
 * address in each form: HOST:PORT, redis:// with a password and a database,
 * and unix:// with a password and a database; a malformed URL is refused
 * (status 64) naming its part, never echoing the password; and
 * with nothing listening, --redis fails within a few seconds with exit status
 * 4, a message on stderr and nothing on stdout. */
#define TEST_NAME "test_fleet_vectors"
#include "test_fleet_util.h"

#include <sys/wait.h>
#include <unistd.h>

/* Writes a random v3 trace: 1 to 3 plans of 1 to 4 quotas (names shared
 * between plans, so keys convert when they change plan), then calls and
 * quota reads under random plans with costs, and cancels. */
static void write_random_v3(FILE *f, unsigned seed) {
    static const char *const qn[] = { "s", "m", "h", "d" };
    static const char *const pn[] = { "free", "pro", "team" };
    static const unsigned limits[] = { 1, 2, 3, 5, 7, 10, 60 };
    static const unsigned pers[] = { 1, 100, 1000, 3000, 60000 };
    tf_rng = (0x9E3779B97F4A7C15ull ^ ((uint64_t)seed * 0x100000001B3ull)) | 1;
    int np = (int)tf_range(1, 3);
    fprintf(f, "# random v3 trace %u\n", seed);
    for (int p = 0; p < np; p++) {
        if (np > 1 || tf_next() % 2) fprintf(f, "plan %s\n", pn[p]);
        int nq = (int)tf_range(1, 4);
        unsigned used = 0;
        for (int q = 0; q < nq; q++) {
            unsigned n;
            do n = (unsigned)(tf_next() % 4);
            while (used & (1u << n));
            used |= 1u << n;
            fprintf(f, "policy rate limit=%u per=%u", limits[tf_next() % 7], pers[tf_next() % 5]);
            if (tf_next() % 3 == 0) fprintf(f, " burst=%u", (unsigned)tf_range(1, 12));
            fprintf(f, " name=%s\n", qn[n]);
        }
    }
    uint64_t t = 0;
    for (int i = 0; i < 70; i++) {
        t += tf_next() % 3 == 0 ? 0 : tf_range(0, tf_next() % 4 == 0 ? 5000 : 400);
        const char *key = tf_next() % 2 ? "A" : "B";
        unsigned r = (unsigned)(tf_next() % 20);
        char extra[64] = "";
        int n = 0;
        if (tf_next() % 3 == 0)
            n += snprintf(extra + n, sizeof extra - (size_t)n, " cost=%u", (unsigned)tf_range(1, 8));
        if (np > 1 && tf_next() % 4)
            snprintf(extra + n, sizeof extra - (size_t)n, " plan=%s", pn[tf_next() % (unsigned)np]);
        if (r < 13)
            fprintf(f, "%llu call %s v%d%s\n", (unsigned long long)t, key, i, extra);
        else if (r < 19)
            fprintf(f, "%llu quota %s%s\n", (unsigned long long)t, key, extra);
        else
            fprintf(f, "%llu cancel %s\n", (unsigned long long)t, key);
    }
}

int main(void) {
    const char *exe = getenv("SLUICE_TRACE");
    const char *src = getenv("SLUICE_SOURCE_DIR");
    if (!exe || !src) {
        fprintf(stderr, TEST_NAME ": SKIPPED: SLUICE_TRACE or SLUICE_SOURCE_DIR not set\n");
        return 77;
    }
    test_redis_t redis, locked;
    tf_start_redis(&redis);
    /* a second server behind a password, on TCP and a Unix socket */
    char sock[128];
    snprintf(sock, sizeof sock, "/tmp/sluice-vectors-%ld.sock", (long)getpid());
    test_redis_opts_t lo = { .unixsocket = sock, .requirepass = "vector-Pw-1" };
    memset(&locked, 0, sizeof locked);
    CHECK(test_redis_start_opts(&locked, 0, &lo) == 0, "cannot start the password-protected redis-server");
    char urls[3][512];
    snprintf(urls[0], sizeof urls[0], "127.0.0.1:%d", redis.port);
    snprintf(urls[1], sizeof urls[1], "redis://:vector-Pw-1@127.0.0.1:%d/2", locked.port);
    snprintf(urls[2], sizeof urls[2], "unix://%s?password=vector-Pw-1&db=3", sock);
    char dir[1024];
    snprintf(dir, sizeof dir, "%s/Tests/Vectors", src);
    const char *const forms[3] = { urls[0], urls[1], urls[2] };
    int compared = tf_compare_vectors(exe, NULL, dir, forms, 3, true);
    CHECK(compared >= 5, "only %d rate vectors found in %s", compared, dir);
    fprintf(stderr, TEST_NAME ": %d rate vectors identical through Redis, 3 address forms each\n", compared);

    /* random v3 traces (several quotas, plans, costs, quota reads, cancels):
     * the same output through Redis as locally */
    int converted = tf_compare_random(exe, NULL, urls[0], 40, write_random_v3, "policy=");
    CHECK(converted > 40 / 4, "only %d random traces read several quotas", converted); /* per-quota lines */
    fprintf(stderr, TEST_NAME ": 40 random v3 traces identical through Redis\n");
    test_redis_stop(&redis);
    test_redis_stop(&locked);
    unlink(sock);

    /* nothing listening */
    int port = test_free_port();
    char cmd[4096], path[2048];
    snprintf(path, sizeof path, "%s/rate-basic.trace", dir);
    snprintf(cmd, sizeof cmd, "'%s' --redis 127.0.0.1:%d '%s' 2>/dev/null", exe, port, path);
    uint64_t t0 = tf_mono();
    int st;
    char *out = tf_run(cmd, &st);
    uint64_t took = tf_mono() - t0;
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 4, "nothing listening: status %d", st);
    CHECK(out[0] == '\0', "nothing listening: printed %s", out);
    /* a bound on hanging, not a speed claim: generous for a loaded machine */
    CHECK(took < 20000000000ull, "nothing listening: took %llu ms", (unsigned long long)(took / 1000000));
    free(out);
    snprintf(cmd, sizeof cmd, "'%s' --redis 127.0.0.1:%d '%s' 2>&1 >/dev/null", exe, port, path);
    out = tf_run(cmd, &st);
    CHECK(strstr(out, "cannot reach Redis") != NULL, "nothing listening: message '%s'", out);
    free(out);

    /* a malformed URL: refused at once, the part named, the password not echoed */
    snprintf(cmd, sizeof cmd, "'%s' --redis 'redis://:Top-Secret-9@127.0.0.1:70000' '%s' 2>&1 >/dev/null", exe, path);
    out = tf_run(cmd, &st);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 64, "malformed URL: status %d", st);
    CHECK(strstr(out, "70000") != NULL && strstr(out, "Top-Secret-9") == NULL, "malformed URL: message '%s'", out);
    free(out);
    printf(TEST_NAME ": ok\n");
    return 0;
}
