/* test_fleet_vectors.c — every rate vector of Tests/Vectors gives the same
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
    int compared = tf_compare_rate_vectors(exe, dir, forms, 3);
    CHECK(compared >= 5, "only %d rate vectors found in %s", compared, dir);
    fprintf(stderr, TEST_NAME ": %d rate vectors identical through Redis, 3 address forms each\n", compared);
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
