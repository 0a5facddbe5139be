/* test_fleet_timed_vectors.c — every throttle, audit and debounce vector of
 * Tests/Vectors, and random traces of the three policies (every option,
 * calls at deadlines, flush, cancel, pending, close), give the local run's
 * output through `sluice-trace --redis URL`: the fleet's timed limiter in a
 * private redis-server, in manual time, over TCP and over a Unix socket with
 * a password and a database. Outputs are compared by tracecmp's rules (the
 * order of different keys' lines at one instant is free). */
#define TEST_NAME "test_fleet_timed_vectors"
#include "test_fleet_util.h"

#include <unistd.h>

/* Writes a random trace of one timed policy. Times are multiples of 10 ms
 * and intervals of 50, so many steps land exactly on deadlines. */
static void write_random_timed(FILE *f, unsigned seed) {
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
    for (int i = 0; i < n; i++) {
        t += tf_next() % 4 == 0 ? 0 : 10 * tf_range(0, tf_next() % 5 == 0 ? 60 : 12);
        static const char *const keys[] = { "A", "B", "C" };
        const char *key = keys[tf_next() % 3];
        unsigned r = (unsigned)(tf_next() % 20);
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

static int compare_random(const char *exe, const char *cmp, const char *url, int traces) {
    char path[128];
    snprintf(path, sizeof path, "/tmp/sluice-random-timed-%ld.trace", (long)getpid());
    int with_drops = 0;
    for (unsigned seed = 1; seed <= (unsigned)traces; seed++) {
        FILE *f = fopen(path, "w");
        CHECK(f, "cannot write %s", path);
        write_random_timed(f, seed);
        fclose(f);
        char cmd[1024];
        int st1, st2;
        snprintf(cmd, sizeof cmd, "'%s' '%s'", exe, path);
        char *local = tf_run(cmd, &st1);
        snprintf(cmd, sizeof cmd, "'%s' --redis '%s' '%s'", exe, url, path);
        char *fleet = tf_run(cmd, &st2);
        CHECK(st1 == 0 && st2 == 0, "random timed trace %u: exit statuses %d (local) %d (--redis)", seed, st1, st2);
        CHECK(tf_outputs_match(cmp, local, fleet), "random timed trace %u: outputs differ\n--- local\n%s--- redis\n%s",
              seed, local, fleet);
        if (strstr(local, " drop ")) with_drops++;
        free(local);
        free(fleet);
    }
    unlink(path);
    CHECK(with_drops > traces / 3, "only %d random traces dropped a value", with_drops);
    return traces;
}

int main(void) {
    const char *exe = getenv("SLUICE_TRACE");
    const char *src = getenv("SLUICE_SOURCE_DIR");
    const char *cmp = getenv("SLUICE_TRACECMP");
    if (!exe || !src || !cmp) {
        fprintf(stderr, TEST_NAME ": SKIPPED: SLUICE_TRACE, SLUICE_TRACECMP or SLUICE_SOURCE_DIR not set\n");
        return 77;
    }
    test_redis_t redis, locked;
    tf_start_redis(&redis);
    char sock[128];
    snprintf(sock, sizeof sock, "/tmp/sluice-timed-vectors-%ld.sock", (long)getpid());
    test_redis_opts_t lo = { .unixsocket = sock, .requirepass = "timed-Pw-7" };
    memset(&locked, 0, sizeof locked);
    CHECK(test_redis_start_opts(&locked, 0, &lo) == 0, "cannot start the password-protected redis-server");
    char urls[2][512];
    snprintf(urls[0], sizeof urls[0], "127.0.0.1:%d", redis.port);
    snprintf(urls[1], sizeof urls[1], "unix://%s?password=timed-Pw-7&db=4", sock);
    char dir[1024];
    snprintf(dir, sizeof dir, "%s/Tests/Vectors", src);
    const char *const forms[2] = { urls[0], urls[1] };
    int compared = tf_compare_timed_vectors(exe, cmp, dir, forms, 2);
    CHECK(compared >= 40, "only %d throttle, audit and debounce vectors found in %s", compared, dir);
    fprintf(stderr, TEST_NAME ": %d vectors match through Redis, 2 address forms each\n", compared);
    int random_traces = compare_random(exe, cmp, urls[0], 150);
    fprintf(stderr, TEST_NAME ": %d random traces match through Redis\n", random_traces);
    test_redis_stop(&redis);
    test_redis_stop(&locked);
    unlink(sock);
    printf(TEST_NAME ": ok\n");
    return 0;
}
