/* test_fleet_faults.c — every request is answered exactly once and within its
 * timeout whatever Redis does: nothing listening, SIGSTOPped then resumed,
 * killed then restarted empty, a fake server answering garbage, a fake server
 * answering well-formed nonsense, the script cache flushed (NOSCRIPT), and the
 * limiter freed with requests in flight. Each failure policy answers as
 * documented: fail closed (drop, retry after closed_retry), fail open (admit),
 * fail local (the core limiter, counted). Also sluice_fleet_new_on_loop()
 * (a limiter on a loop of the loop layer, freed from another thread). */
#define TEST_NAME "test_fleet_faults"
#include "test_fleet_util.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#define SEC 1000000000ull
#define MS 1000000ull
#define TIMEOUT (50 * MS) /* where no reply can come (nothing listening) */
/* Where a reply is expected (Redis, the fake servers): long enough that a
 * loaded machine (a sanitizer, the other tests) never turns a healthy reply
 * into a timeout; with 50 ms it did, and "all from Redis" failed. */
#define REPLY_TIMEOUT (1000 * MS)
/* How late past its timeout an answer may come: the loop thread of a loaded
 * 2-core machine can be descheduled for a while. An answer that waits for
 * the server instead of its timeout is later still (volley gives up at
 * timeout + SLACK + 2 s). */
#define SLACK (1000 * MS)

static struct event_base *base;

static sluice_fleet_t *fleet(int port, const char *prefix, sluice_fleet_failure_t fail, bool manual, uint64_t timeout) {
    sluice_fleet_config_t c;
    memset(&c, 0, sizeof c);
    c.policy = sluice_rate(2, (int64_t)SEC, 2);
    c.port = port;
    c.prefix = prefix;
    c.prefix_len = strlen(prefix);
    c.manual_time = manual;
    c.timeout_ns = timeout;
    c.on_failure = fail;
    c.backoff_min_ns = 10 * MS;
    c.backoff_max_ns = 200 * MS;
    c.stall_ns = 300 * MS;
    c.cache_slots = SIZE_MAX; /* these tests are about Redis's answers */
    sluice_fleet_t *f = NULL;
    CHECK(sluice_fleet_new(&f, base, &c) == 0, "sluice_fleet_new");
    return f;
}

typedef struct shot {
    tf_box_t box;
    uint64_t submitted;
} shot_t;

/* Submits n calls `spacing_ms` apart (the loop runs meanwhile), waits for
 * every answer, checks each came once and within timeout + slack. Returns how
 * many came from each source in counts[source]. */
static void volley(sluice_fleet_t *f, int n, int spacing_ms, uint64_t timeout, int counts[4], int causes_out[],
                   const char *what) {
    shot_t *s = calloc((size_t)n, sizeof *s);
    int done = 0;
    for (int i = 0; i < n; i++) {
        s[i].submitted = tf_mono();
        CHECK(sluice_fleet_call(f, sluice_key_u64((uint64_t)i % 3), 1, (uint64_t)i * MS, tf_on_result, &s[i].box) == 0,
              "%s: call", what);
        if (spacing_ms) tf_run_for(base, spacing_ms);
    }
    uint64_t end = tf_mono() + timeout + SLACK + 2 * SEC;
    for (;;) {
        done = 0;
        for (int i = 0; i < n; i++) done += s[i].box.done ? 1 : 0;
        if (done == n || tf_mono() > end) break;
        event_base_loop(base, EVLOOP_ONCE | EVLOOP_NONBLOCK);
    }
    tf_run_for(base, 20); /* a second answer would show here */
    memset(counts, 0, 4 * sizeof(int));
    for (int i = 0; i < n; i++) {
        CHECK(s[i].box.done == 1, "%s: call %d answered %d times", what, i, s[i].box.done);
        uint64_t lat = s[i].box.answered_at - s[i].submitted;
        CHECK(lat <= timeout + SLACK, "%s: call %d answered after %llu ms (timeout %llu ms)", what, i,
              (unsigned long long)(lat / MS), (unsigned long long)(timeout / MS));
        CHECK(s[i].box.res.status == 0, "%s: status", what);
        counts[s[i].box.res.source]++;
        if (causes_out) causes_out[i] = s[i].box.res.cause;
    }
    free(s);
}

/* A fake server on a free port, in a child process: `mode` 0 answers garbage
 * bytes, 1 answers "+OK" to everything. */
static pid_t fake_server(int mode, int *port_out) {
    int ls = socket(AF_INET, SOCK_STREAM, 0);
    int one = 1;
    setsockopt(ls, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in a;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    CHECK(bind(ls, (struct sockaddr *)&a, sizeof a) == 0 && listen(ls, 16) == 0, "fake server listen");
    getsockname(ls, (struct sockaddr *)&a, &len);
    *port_out = ntohs(a.sin_port);
    pid_t pid = fork();
    CHECK(pid >= 0, "fork");
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        for (;;) {
            int c = accept(ls, NULL, NULL);
            if (c < 0) continue;
            if (fork() == 0) {
                char buf[4096];
                for (;;) {
                    ssize_t n = read(c, buf, sizeof buf);
                    if (n <= 0) _exit(0);
                    const char *reply = mode == 0 ? "@#garbage!\r\n" : "+OK\r\n";
                    if (write(c, reply, strlen(reply)) < 0) _exit(0);
                }
            }
            close(c);
        }
    }
    close(ls);
    return pid;
}

static int owned_admitted, owned_closed, owned_off_loop;
static sluice_loop_t *owned_loop;
static void owned_cb(void *user, const sluice_fleet_result_t *r) {
    if (r->decision.kind == SLUICE_EMITTED && r->source == SLUICE_FLEET_SOURCE_REDIS && r->status == 0)
        __atomic_fetch_add(&owned_admitted, 1, __ATOMIC_RELEASE);
    if (r->status == SLUICE_ECLOSED) __atomic_fetch_add(&owned_closed, 1, __ATOMIC_RELEASE);
    if (!sluice_loop_in_thread(owned_loop)) __atomic_fetch_add(&owned_off_loop, 1, __ATOMIC_RELEASE);
    __atomic_fetch_add((int *)user, 1, __ATOMIC_RELEASE);
}

static void stop_child(pid_t pid) {
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
}

int main(void) {
    signal(SIGPIPE, SIG_IGN);
    int counts[4], causes[64];
    /* fake servers first: fork before any event_base exists */
    int garbage_port = 0, ok_port = 0;
    pid_t garbage = fake_server(0, &garbage_port);
    pid_t okserver = fake_server(1, &ok_port);
    test_redis_t redis;
    tf_start_redis(&redis);
    {
        /* the helper itself: a second server on a port another one holds must
         * not count as started because the first one answers there */
        test_redis_t twin;
        memset(&twin, 0, sizeof twin);
        CHECK(test_redis_start(&twin, redis.port) == -1 && twin.pid == 0, "a taken port counted as started");
        test_redis_stop(&twin);
        int a = test_free_port(), b = test_free_port();
        CHECK(a > 0 && b > 0 && a != redis.port && b != redis.port, "free ports %d %d", a, b);
    }
    base = event_base_new();
    CHECK(base, "event_base_new");

    /* 1. nothing listening: each policy answers at once */
    int dead_port = test_free_port();
    sluice_fleet_t *f = fleet(dead_port, "nl", SLUICE_FLEET_FAIL_CLOSED, false, TIMEOUT);
    volley(f, 10, 5, TIMEOUT, counts, causes, "nothing listening, fail closed");
    CHECK(counts[SLUICE_FLEET_SOURCE_FAILURE] == 10, "fail closed: all by the failure policy");
    for (int i = 0; i < 10; i++)
        CHECK(causes[i] == SLUICE_ENOTCONN || causes[i] == SLUICE_ETIMEDOUT, "cause %d", causes[i]);
    {
        tf_box_t b = { 0 };
        sluice_fleet_call(f, sluice_key_u64(1), 1, 0, tf_on_result, &b);
        tf_wait(base, &b);
        CHECK(b.res.decision.kind == SLUICE_DROPPED && b.res.decision.at == b.res.now + SEC,
              "fail closed: drop with retry = now + 1 s");
        tf_box_t q = { 0 };
        sluice_fleet_quota(f, sluice_key_u64(1), 1, 0, tf_on_result, &q);
        tf_wait(base, &q);
        CHECK(q.res.source == SLUICE_FLEET_SOURCE_FAILURE && q.res.quota.remaining == 0, "fail closed quota");
    }
    sluice_fleet_stats_t st;
    sluice_fleet_stats(f, &st);
    CHECK(st.failure_dropped == 11 && st.failure_admitted == 0, "fail closed counters");
    sluice_fleet_free(f);

    f = fleet(dead_port, "nl", SLUICE_FLEET_FAIL_OPEN, false, TIMEOUT);
    volley(f, 5, 5, TIMEOUT, counts, NULL, "nothing listening, fail open");
    sluice_fleet_stats(f, &st);
    CHECK(counts[SLUICE_FLEET_SOURCE_FAILURE] == 5 && st.failure_admitted == 5, "fail open admits");
    sluice_fleet_free(f);

    f = fleet(dead_port, "nl", SLUICE_FLEET_FAIL_LOCAL, true, TIMEOUT);
    {
        tf_box_t b[3] = { { 0 }, { 0 }, { 0 } };
        for (int i = 0; i < 3; i++) sluice_fleet_call(f, sluice_key_u64(9), 1, 5 * SEC, tf_on_result, &b[i]);
        for (int i = 0; i < 3; i++) tf_wait(base, &b[i]);
        CHECK(b[0].res.decision.kind == SLUICE_EMITTED && b[1].res.decision.kind == SLUICE_EMITTED &&
                  b[2].res.decision.kind == SLUICE_DROPPED && b[2].res.decision.at == 5 * SEC + SEC / 2,
              "fail local follows the local rate (burst 2, then retry at +0.5 s)");
        sluice_fleet_stats(f, &st);
        CHECK(st.fallback_admitted == 2 && st.fallback_dropped == 1 && st.failure_admitted == 2, "fallback counters");
    }
    sluice_fleet_free(f);

    /* 2. SIGSTOP: calls time out (answered by the policy within the timeout),
     * then the limiter recovers after SIGCONT */
    f = fleet(redis.port, "stop", SLUICE_FLEET_FAIL_CLOSED, false, REPLY_TIMEOUT);
    volley(f, 3, 0, REPLY_TIMEOUT, counts, NULL, "healthy");
    CHECK(counts[SLUICE_FLEET_SOURCE_REDIS] == 3, "healthy calls from Redis");
    test_redis_signal(&redis, SIGSTOP);
    volley(f, 20, 10, REPLY_TIMEOUT, counts, causes, "SIGSTOPped");
    CHECK(counts[SLUICE_FLEET_SOURCE_FAILURE] == 20, "stopped: all by the failure policy");
    sluice_fleet_stats(f, &st);
    CHECK(st.timeouts >= 1, "stopped: timeouts counted");
    test_redis_signal(&redis, SIGCONT);
    {
        uint64_t end = tf_mono() + 15 * SEC;
        bool back = false;
        while (!back && tf_mono() < end) {
            volley(f, 1, 0, REPLY_TIMEOUT, counts, NULL, "after SIGCONT");
            back = counts[SLUICE_FLEET_SOURCE_REDIS] == 1;
            tf_run_for(base, 20);
        }
        CHECK(back, "no Redis answer within 15 s of SIGCONT");
    }
    sluice_fleet_free(f);

    /* 3. killed, then restarted empty on the same port */
    f = fleet(redis.port, "kill", SLUICE_FLEET_FAIL_CLOSED, true, REPLY_TIMEOUT);
    {
        tf_box_t b = { 0 };
        sluice_fleet_call(f, sluice_key_u64(42), 2, 0, tf_on_result, &b);
        tf_wait(base, &b);
        CHECK(b.res.source == SLUICE_FLEET_SOURCE_REDIS && b.res.decision.kind == SLUICE_EMITTED, "before kill");
    }
    int port = redis.port;
    test_redis_stop(&redis);
    volley(f, 10, 5, REPLY_TIMEOUT, counts, NULL, "killed");
    CHECK(counts[SLUICE_FLEET_SOURCE_FAILURE] == 10, "killed: all by the failure policy");
    CHECK(test_redis_start(&redis, port) == 0, "restart redis on port %d", port);
    {
        uint64_t end = tf_mono() + 15 * SEC;
        bool back = false;
        while (!back && tf_mono() < end) {
            volley(f, 1, 0, REPLY_TIMEOUT, counts, NULL, "after restart");
            back = counts[SLUICE_FLEET_SOURCE_REDIS] == 1;
            tf_run_for(base, 20);
        }
        CHECK(back, "no Redis answer within 15 s of the restart");
        /* the data is gone: key 42 has its whole burst again (documented loss) */
        tf_box_t q = { 0 };
        sluice_fleet_quota(f, sluice_key_u64(42), 1, 0, tf_on_result, &q);
        tf_wait(base, &q);
        CHECK(q.res.source == SLUICE_FLEET_SOURCE_REDIS && q.res.quota.remaining == 2, "restarted empty");
    }
    sluice_fleet_stats(f, &st);
    CHECK(st.disconnects >= 1 && st.connects >= 2, "reconnect counted");
    sluice_fleet_free(f);

    /* 4. garbage bytes */
    f = fleet(garbage_port, "g", SLUICE_FLEET_FAIL_CLOSED, false, REPLY_TIMEOUT);
    volley(f, 20, 5, REPLY_TIMEOUT, counts, causes, "garbage server");
    CHECK(counts[SLUICE_FLEET_SOURCE_FAILURE] == 20, "garbage: all by the failure policy");
    {
        bool proto = false;
        for (int i = 0; i < 20; i++) proto |= causes[i] == SLUICE_EPROTO;
        CHECK(proto, "garbage: some answer names the protocol error");
    }
    sluice_fleet_free(f);

    /* 5. well-formed nonsense ("+OK" to everything) */
    f = fleet(ok_port, "ok", SLUICE_FLEET_FAIL_OPEN, false, REPLY_TIMEOUT);
    volley(f, 20, 5, REPLY_TIMEOUT, counts, NULL, "+OK server");
    CHECK(counts[SLUICE_FLEET_SOURCE_FAILURE] == 20, "+OK: all by the failure policy");
    sluice_fleet_stats(f, &st);
    CHECK(st.bad_replies >= 1 && st.failure_admitted == 20, "+OK: bad replies counted, fail open admitted");
    sluice_fleet_free(f);

    /* 6. The script as a function library (FCALL) where Redis allows it;
     * FUNCTION FLUSH: "Function not found", that batch re-sent with EVAL and
     * the library loaded again */
    f = fleet(redis.port, "fn", SLUICE_FLEET_FAIL_CLOSED, false, REPLY_TIMEOUT);
    volley(f, 1, 0, REPLY_TIMEOUT, counts, NULL, "first");
    long long fcalls = tf_cmd_calls(redis.port, "fcall");
    volley(f, 3, 0, REPLY_TIMEOUT, counts, NULL, "library loaded");
    CHECK(counts[SLUICE_FLEET_SOURCE_REDIS] == 3, "library loaded: Redis answers");
    CHECK(tf_cmd_calls(redis.port, "fcall") >= fcalls + 1, "decided by FCALL once the library is loaded");
    CHECK(test_redis_command(redis.port, "FUNCTION FLUSH", NULL, 0) == 0, "FUNCTION FLUSH");
    CHECK(test_redis_command(redis.port, "SCRIPT FLUSH", NULL, 0) == 0, "SCRIPT FLUSH");
    volley(f, 3, 0, REPLY_TIMEOUT, counts, NULL, "after FUNCTION FLUSH");
    CHECK(counts[SLUICE_FLEET_SOURCE_REDIS] == 3, "after FUNCTION FLUSH: Redis answers");
    sluice_fleet_stats(f, &st);
    CHECK(st.noscript >= 1, "the missing function counted as NOSCRIPT");
    fcalls = tf_cmd_calls(redis.port, "fcall");
    volley(f, 3, 0, REPLY_TIMEOUT, counts, NULL, "library loaded again");
    CHECK(counts[SLUICE_FLEET_SOURCE_REDIS] == 3, "library loaded again: Redis answers");
    CHECK(tf_cmd_calls(redis.port, "fcall") >= fcalls + 1, "FCALL again once the library is back");
    redisReply *libs = tf_cmd(redis.port, "FUNCTION LIST");
    CHECK(libs && libs->type == REDIS_REPLY_ARRAY && libs->elements == 1, "the library loaded again");
    freeReplyObject(libs);
    sluice_fleet_free(f);

    /* 6b. A user who may not load functions: EVALSHA; SCRIPT FLUSH: NOSCRIPT,
     * the script re-sent with EVAL */
    CHECK(test_redis_command(redis.port, "ACL SETUSER default -function", NULL, 0) == 0, "ACL -function");
    f = fleet(redis.port, "ns", SLUICE_FLEET_FAIL_CLOSED, false, REPLY_TIMEOUT);
    fcalls = tf_cmd_calls(redis.port, "fcall");
    long long shas = tf_cmd_calls(redis.port, "evalsha");
    volley(f, 1, 0, REPLY_TIMEOUT, counts, NULL, "before flush");
    CHECK(counts[SLUICE_FLEET_SOURCE_REDIS] == 1, "before flush");
    CHECK(test_redis_command(redis.port, "SCRIPT FLUSH", NULL, 0) == 0, "SCRIPT FLUSH");
    volley(f, 3, 0, REPLY_TIMEOUT, counts, NULL, "after flush");
    CHECK(counts[SLUICE_FLEET_SOURCE_REDIS] == 3, "after flush: Redis answers");
    sluice_fleet_stats(f, &st);
    CHECK(st.noscript >= 1, "NOSCRIPT counted");
    CHECK(tf_cmd_calls(redis.port, "fcall") == fcalls && tf_cmd_calls(redis.port, "evalsha") >= shas + 1,
          "without FUNCTION, EVALSHA alone");
    sluice_fleet_free(f);
    CHECK(test_redis_command(redis.port, "ACL SETUSER default +@all", NULL, 0) == 0, "ACL +@all");

    /* 7. free with requests in flight: each answered once with SLUICE_ECLOSED */
    f = fleet(redis.port, "free", SLUICE_FLEET_FAIL_CLOSED, false, 10 * SEC);
    volley(f, 1, 0, 10 * SEC, counts, NULL, "before stop");
    test_redis_signal(&redis, SIGSTOP);
    {
        tf_box_t b[5];
        memset(b, 0, sizeof b);
        for (int i = 0; i < 5; i++) sluice_fleet_call(f, sluice_key_u64(7), 1, 0, tf_on_result, &b[i]);
        tf_run_for(base, 50);
        for (int i = 0; i < 5; i++) CHECK(b[i].done == 0, "answered before free");
        sluice_fleet_free(f);
        for (int i = 0; i < 5; i++)
            CHECK(b[i].done == 1 && b[i].res.status == SLUICE_ECLOSED, "free: call %d done %d status %d", i, b[i].done,
                  b[i].res.status);
    }
    test_redis_signal(&redis, SIGCONT);

    /* 8. sluice_fleet_new_on_loop(): on a loop of the loop layer, no thread
     * of its own; calls from this thread, answers on the loop's; a free from
     * this thread, with requests in flight, is done on the loop thread: each
     * request answered once (decided, or ECLOSED), before free returns */
    {
        sluice_fleet_config_t c;
        memset(&c, 0, sizeof c);
        c.policy = sluice_rate(2, (int64_t)SEC, 2);
        c.port = redis.port;
        c.prefix = "owned";
        c.prefix_len = 5;
        c.timeout_ns = 5 * SEC;
        CHECK(sluice_loop_start(&owned_loop, NULL) == 0, "sluice_loop_start");
        sluice_fleet_t *o = NULL;
        CHECK(sluice_fleet_new_on_loop(&o, NULL, &c) == SLUICE_EINVAL && o == NULL, "NULL loop");
        CHECK(sluice_fleet_new_on_loop(&o, owned_loop, &c) == 0, "sluice_fleet_new_on_loop");
        static int answered;
        for (int i = 0; i < 5; i++)
            CHECK(sluice_fleet_call(o, sluice_key_u64(5), 1, 0, owned_cb, &answered) == 0, "on-loop call");
        uint64_t end = tf_mono() + 30 * SEC;
        while (__atomic_load_n(&answered, __ATOMIC_ACQUIRE) < 5 && tf_mono() < end) {
            struct timespec ts = { 0, 1000000 };
            nanosleep(&ts, NULL);
        }
        CHECK(__atomic_load_n(&answered, __ATOMIC_ACQUIRE) == 5, "on loop: %d answers", answered);
        CHECK(__atomic_load_n(&owned_admitted, __ATOMIC_ACQUIRE) == 2, "on loop: burst 2 admitted, got %d",
              owned_admitted);
        /* requests in flight, then a free from this thread */
        static int late;
        for (int i = 0; i < 50; i++)
            CHECK(sluice_fleet_call(o, sluice_key_u64(6 + (uint64_t)i), 1, 0, owned_cb, &late) == 0, "late call");
        sluice_fleet_free(o);
        CHECK(__atomic_load_n(&late, __ATOMIC_ACQUIRE) == 50, "free answered every request: %d", late);
        CHECK(__atomic_load_n(&owned_off_loop, __ATOMIC_ACQUIRE) == 0, "every answer on the loop thread");
        printf("  on a loop: freed from another thread, %d of 50 in flight answered ECLOSED\n",
               __atomic_load_n(&owned_closed, __ATOMIC_ACQUIRE));
        CHECK(sluice_loop_free(owned_loop) == 0, "the loop is freed after the limiter");
    }

    event_base_free(base);
    test_redis_stop(&redis);
    stop_child(garbage);
    stop_child(okserver);
    printf(TEST_NAME ": ok\n");
    return 0;
}
