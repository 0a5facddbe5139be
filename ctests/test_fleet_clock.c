/* test_fleet_clock.c — config.local_clock: each process stamps its calls
 * with its own CLOCK_REALTIME, for a Redis whose scripts may not call TIME
 * (ElastiCache Serverless forbids it; here an ACL user without +time, which
 * Redis 7 applies to the commands a script calls). With Redis's clock such a
 * user's calls are answered by the failure policy (NOPERM); with the local
 * clock they are decided by Redis, at the local time, exactly as the
 * semantics say. local_clock with manual_time is refused. */
#define TEST_NAME "test_fleet_clock"
#include "test_fleet_util.h"

static uint64_t real_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static sluice_fleet_t *fleet(struct event_base *base, const char *url, bool local_clock) {
    sluice_fleet_config_t c;
    memset(&c, 0, sizeof c);
    c.policy = sluice_rate(2, 3600ull * 1000000000ull, 2); /* two calls an hour: no refill during the test */
    c.url = url;
    c.prefix = "clock";
    c.prefix_len = 5;
    c.local_clock = local_clock;
    c.cache_slots = SIZE_MAX;      /* every drop decided by Redis, with its exact retry time */
    c.timeout_ns = 10000000000ull; /* generous: a loaded machine is not a fault here */
    sluice_fleet_t *f = NULL;
    int rc = sluice_fleet_new(&f, base, &c);
    CHECK(rc == 0, "sluice_fleet_new: %s", sluice_strerror(rc));
    return f;
}

int main(void) {
    if (!test_redis_available()) {
        fprintf(stderr, TEST_NAME ": SKIPPED: redis-server not found\n");
        return 77;
    }
    test_redis_t r;
    memset(&r, 0, sizeof r);
    test_redis_opts_t o = { .acl_user = "app on >clock-Pw-3 ~* +@all -time" };
    CHECK(test_redis_start_opts(&r, 0, &o) == 0, "cannot start redis-server");
    char url[128];
    snprintf(url, sizeof url, "redis://app:clock-Pw-3@127.0.0.1:%d", r.port);
    struct event_base *base = event_base_new();

    /* Redis's clock: TIME is refused to this user, so no decision is made */
    sluice_fleet_t *f = fleet(base, url, false);
    tf_box_t b = { 0 };
    CHECK(sluice_fleet_call(f, sluice_key_u64(1), 1, 0, tf_on_result, &b) == 0, "call");
    tf_wait(base, &b);
    CHECK(b.res.source == SLUICE_FLEET_SOURCE_FAILURE && b.res.cause == SLUICE_ENOPERM,
          "Redis's clock without TIME: source %d cause %d", b.res.source, b.res.cause);
    sluice_fleet_free(f);

    /* the local clock: Redis decides, at this process's time */
    f = fleet(base, url, true);
    tf_box_t c[3];
    memset(c, 0, sizeof c);
    uint64_t before = real_ns();
    for (int i = 0; i < 3; i++) {
        CHECK(sluice_fleet_call(f, sluice_key_u64(2), 1, 0, tf_on_result, &c[i]) == 0, "call %d", i);
        tf_wait(base, &c[i]);
    }
    uint64_t after = real_ns();
    for (int i = 0; i < 3; i++) {
        CHECK(c[i].res.source == SLUICE_FLEET_SOURCE_REDIS, "local clock: call %d source %d cause %d (%s)", i,
              c[i].res.source, c[i].res.cause, sluice_strerror(c[i].res.cause));
        CHECK(c[i].res.now >= before && c[i].res.now <= after, "call %d: its time is the local real time", i);
        CHECK(c[i].res.decision.kind == (i < 2 ? SLUICE_EMITTED : SLUICE_DROPPED), "call %d: kind %d", i,
              c[i].res.decision.kind);
    }
    /* the third call waits for the first's time plus one emission interval (30 min) */
    uint64_t half_hour = 1800ull * 1000000000ull;
    CHECK(c[2].res.decision.at >= c[0].res.now + half_hour && c[2].res.decision.at <= after + half_hour,
          "the retry time follows the local stamps");
    sluice_fleet_free(f);

    /* both clocks at once: refused */
    sluice_fleet_config_t bad;
    memset(&bad, 0, sizeof bad);
    bad.policy = sluice_rate(1, 1000000000, 1);
    bad.local_clock = true;
    bad.manual_time = true;
    sluice_fleet_t *none = NULL;
    CHECK(sluice_fleet_new(&none, base, &bad) == SLUICE_EINVAL && none == NULL, "local_clock with manual_time");

    event_base_free(base);
    test_redis_stop(&r);
    printf(TEST_NAME ": ok\n");
    return 0;
}
