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
    int compared = tf_compare_vectors(exe, cmp, dir, forms, 2, false);
    CHECK(compared >= 40, "only %d throttle, audit and debounce vectors found in %s", compared, dir);
    fprintf(stderr, TEST_NAME ": %d vectors match through Redis, 2 address forms each\n", compared);
    int dropping = tf_compare_random(exe, cmp, urls[0], 150, tf_write_random_timed, " drop ");
    CHECK(dropping > 150 / 3, "only %d random traces dropped a value", dropping);
    fprintf(stderr, TEST_NAME ": 150 random traces match through Redis\n");
    test_redis_stop(&redis);
    test_redis_stop(&locked);
    unlink(sock);
    printf(TEST_NAME ": ok\n");
    return 0;
}
