/* fleet.c — the "fleet" scenario (cbench_fleet.h). */
#include "cbench_fleet.h"

#include <arpa/inet.h>
#include <event2/event.h>
#include <hiredis/hiredis.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cbench-internal.h"
#include "sluice_fleet.h"

#define SEC 1000000000ull
#define LIMIT 10
#define BURST 10

static uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * SEC + (uint64_t)ts.tv_nsec;
}

/* ---- a private redis-server */

static int free_port(void) {
    int s = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    if (bind(s, (struct sockaddr *)&a, sizeof a) != 0 || getsockname(s, (struct sockaddr *)&a, &len) != 0) {
        close(s);
        return -1;
    }
    close(s);
    return ntohs(a.sin_port);
}

/* A CA and a server certificate for 127.0.0.1 in `dir` (ca.pem, server.pem,
 * server.key), made by the openssl command. @return 0 or -1. */
static int make_certs(const char *dir) {
    char cmd[2048];
    snprintf(cmd, sizeof cmd,
             "cd '%s' && "
             "openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 1 "
             "-subj /CN=bench-ca -keyout ca.key -out ca.pem && "
             "openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes "
             "-subj /CN=127.0.0.1 -keyout server.key -out server.csr && "
             "printf 'subjectAltName=IP:127.0.0.1\\n' > ext.cnf && "
             "openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 1 "
             "-extfile ext.cnf -out server.pem",
             dir);
    char quiet[2200];
    snprintf(quiet, sizeof quiet, "(%s) >/dev/null 2>&1", cmd);
    return system(quiet) == 0 ? 0 : -1;
}

/* Starts redis-server on `port` (plain: readiness, INFO and redis-per-call),
 * and, when `tls_port` > 0, on that TLS port too, with the certificates of
 * `cert_dir`; or, when `cluster_dir` is set, in cluster mode with its state
 * (nodes.conf) in that folder. */
static pid_t start_redis(int port, int tls_port, const char *cert_dir, const char *cluster_dir) {
    char port_s[16], tls_s[16], cert[512], key[512], ca[512];
    snprintf(port_s, sizeof port_s, "%d", port);
    snprintf(tls_s, sizeof tls_s, "%d", tls_port);
    snprintf(cert, sizeof cert, "%s/server.pem", cert_dir ? cert_dir : "");
    snprintf(key, sizeof key, "%s/server.key", cert_dir ? cert_dir : "");
    snprintf(ca, sizeof ca, "%s/ca.pem", cert_dir ? cert_dir : "");
    pid_t pid = fork();
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        sigset_t none;
        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, NULL);
        freopen("/dev/null", "w", stdout);
        if (cluster_dir)
            execlp("redis-server", "redis-server", "--port", port_s, "--bind", "127.0.0.1", "--save", "",
                   "--appendonly", "no", "--dir", cluster_dir, "--loglevel", "warning", "--cluster-enabled", "yes",
                   "--cluster-config-file", "nodes.conf", (char *)NULL);
        else if (tls_port > 0)
            execlp("redis-server", "redis-server", "--port", port_s, "--bind", "127.0.0.1", "--save", "",
                   "--appendonly", "no", "--dir", "/tmp", "--loglevel", "warning", "--tls-port", tls_s,
                   "--tls-cert-file", cert, "--tls-key-file", key, "--tls-ca-cert-file", ca, "--tls-auth-clients", "no",
                   (char *)NULL);
        else
            execlp("redis-server", "redis-server", "--port", port_s, "--bind", "127.0.0.1", "--save", "",
                   "--appendonly", "no", "--dir", "/tmp", "--loglevel", "warning", (char *)NULL);
        _exit(127);
    }
    for (int i = 0; i < 500 && pid > 0; i++) {
        struct timeval tv = { 0, 200000 };
        redisContext *c = redisConnectWithTimeout("127.0.0.1", port, tv);
        if (c && !c->err) {
            redisReply *r = redisCommand(c, "PING");
            bool ok = r && r->type == REDIS_REPLY_STATUS;
            if (r) freeReplyObject(r);
            redisFree(c);
            if (ok) return pid;
        } else if (c) {
            redisFree(c);
        }
        usleep(10000);
    }
    if (pid > 0) {
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
    }
    return -1;
}

/* The server's CPU time so far (user + system), in ns, or 0 when unknown. */
static uint64_t redis_cpu_ns(int port) {
    struct timeval tv = { 1, 0 };
    redisContext *c = redisConnectWithTimeout("127.0.0.1", port, tv);
    uint64_t ns = 0;
    if (c && !c->err) {
        redisReply *r = redisCommand(c, "INFO cpu");
        if (r && r->type == REDIS_REPLY_STRING) {
            const char *u = strstr(r->str, "used_cpu_user:"), *s = strstr(r->str, "used_cpu_sys:");
            if (u && s) ns = (uint64_t)((strtod(u + 14, NULL) + strtod(s + 13, NULL)) * 1e9);
        }
        if (r) freeReplyObject(r);
    }
    if (c) redisFree(c);
    return ns;
}

static void stop_redis(pid_t pid) {
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
}

/* ---- a private Redis Cluster: 3 primaries, no replicas */

#define CL_NODES 3
#define CL_SLOTS 16384

typedef struct bench_cluster {
    int port[CL_NODES];
    pid_t pid[CL_NODES];
    char dir[CL_NODES][40];
} bench_cluster_t;

/* The cluster's slot map (redis-per-call routes by it): the index in
 * port[] of each slot's primary. */
static uint8_t g_slot_node[CL_SLOTS];

/* CRC16 (XMODEM: polynomial 0x1021, initial 0), as Redis Cluster hashes keys. */
static uint16_t crc16_xmodem(const char *p, size_t len) {
    uint16_t crc = 0;
    for (size_t i = 0; i < len; i++) {
        crc = (uint16_t)(crc ^ ((uint16_t)(unsigned char)p[i] << 8));
        for (int b = 0; b < 8; b++) crc = (uint16_t)((crc & 0x8000) ? (crc << 1) ^ 0x1021 : crc << 1);
    }
    return crc;
}

/* A key's hash slot: of the text between the first '{' and the next '}'
 * when that is not empty, else of the whole key. */
static unsigned key_slot(const char *key, size_t len) {
    const char *open = memchr(key, '{', len);
    if (open) {
        const char *from = open + 1, *close = memchr(from, '}', len - (size_t)(from - key));
        if (close && close > from) return crc16_xmodem(from, (size_t)(close - from)) % CL_SLOTS;
    }
    return crc16_xmodem(key, len) % CL_SLOTS;
}

static redisReply *cmd_at(int port, const char *fmt, ...) {
    struct timeval tv = { 2, 0 };
    redisContext *c = redisConnectWithTimeout("127.0.0.1", port, tv);
    redisReply *r = NULL;
    if (c && !c->err) {
        redisSetTimeout(c, tv);
        va_list ap;
        va_start(ap, fmt);
        r = redisvCommand(c, fmt, ap);
        va_end(ap);
    }
    if (c) redisFree(c);
    return r;
}

/* Whether `port` says the cluster is ok and names all CL_NODES primaries for
 * every slot; fills g_slot_node from its CLUSTER SLOTS when it does. */
static bool cluster_ready(const bench_cluster_t *cl, int port) {
    redisReply *r = cmd_at(port, "CLUSTER INFO");
    bool ok = r && r->type == REDIS_REPLY_STRING && strstr(r->str, "cluster_state:ok");
    if (r) freeReplyObject(r);
    if (!ok) return false;
    r = cmd_at(port, "CLUSTER SLOTS");
    if (!r || r->type != REDIS_REPLY_ARRAY) {
        if (r) freeReplyObject(r);
        return false;
    }
    static uint8_t seen[CL_SLOTS];
    memset(seen, 0, sizeof seen);
    size_t covered = 0;
    for (size_t i = 0; i < r->elements && ok; i++) {
        const redisReply *e = r->element[i];
        ok = e->type == REDIS_REPLY_ARRAY && e->elements >= 3 && e->element[2]->type == REDIS_REPLY_ARRAY &&
             e->element[2]->elements >= 2;
        if (!ok) break;
        int node = -1, p = (int)e->element[2]->element[1]->integer;
        for (int n = 0; n < CL_NODES; n++)
            if (cl->port[n] == p) node = n;
        long long lo = e->element[0]->integer, hi = e->element[1]->integer;
        ok = node >= 0 && lo >= 0 && hi < CL_SLOTS && lo <= hi;
        for (long long slot = lo; ok && slot <= hi; slot++) {
            g_slot_node[slot] = (uint8_t)node;
            covered += !seen[slot];
            seen[slot] = 1;
        }
    }
    freeReplyObject(r);
    return ok && covered == CL_SLOTS;
}

static void stop_cluster(bench_cluster_t *cl) {
    for (int i = 0; i < CL_NODES; i++) {
        if (cl->pid[i] > 0) stop_redis(cl->pid[i]);
        cl->pid[i] = 0;
        if (cl->dir[i][0]) {
            char rm[96];
            snprintf(rm, sizeof rm, "rm -rf '%s'", cl->dir[i]);
            if (system(rm) != 0) { /* a leftover folder in /tmp: harmless */
            }
            cl->dir[i][0] = '\0';
        }
    }
}

/* Starts 3 cluster-mode servers, gives each a third of the slots (CLUSTER
 * ADDSLOTSRANGE) and joins them (CLUSTER MEET); waits (20 s at most) until
 * every node says ok and names every slot's primary. @return 0 or -1. */
static int start_cluster(bench_cluster_t *cl) {
    memset(cl, 0, sizeof *cl);
    for (int i = 0; i < CL_NODES; i++) {
        /* the bus port is the port + 10000: a port above 55535 cannot have one */
        for (int attempt = 0; attempt < 20 && cl->pid[i] <= 0; attempt++) {
            int port = free_port();
            if (port <= 0 || port > 55535) continue;
            snprintf(cl->dir[i], sizeof cl->dir[i], "/tmp/sluice-bench-cl-XXXXXX");
            if (!mkdtemp(cl->dir[i])) {
                cl->dir[i][0] = '\0';
                break;
            }
            cl->port[i] = port;
            cl->pid[i] = start_redis(port, 0, NULL, cl->dir[i]);
            if (cl->pid[i] <= 0) {
                char rm[96];
                snprintf(rm, sizeof rm, "rm -rf '%s'", cl->dir[i]);
                if (system(rm) != 0) { /* harmless */
                }
                cl->dir[i][0] = '\0';
            }
        }
        if (cl->pid[i] <= 0) {
            stop_cluster(cl);
            return -1;
        }
    }
    for (int i = 0; i < CL_NODES; i++) {
        int lo = CL_SLOTS * i / CL_NODES, hi = CL_SLOTS * (i + 1) / CL_NODES - 1;
        redisReply *r = cmd_at(cl->port[i], "CLUSTER ADDSLOTSRANGE %d %d", lo, hi);
        bool ok = r && r->type == REDIS_REPLY_STATUS;
        if (r) freeReplyObject(r);
        if (i > 0) {
            r = cmd_at(cl->port[0], "CLUSTER MEET 127.0.0.1 %d", cl->port[i]);
            ok = ok && r && r->type == REDIS_REPLY_STATUS;
            if (r) freeReplyObject(r);
        }
        if (!ok) {
            stop_cluster(cl);
            return -1;
        }
    }
    uint64_t end = now_ns() + 20 * SEC;
    for (int i = 0; i < CL_NODES; i++) {
        while (!cluster_ready(cl, cl->port[i])) {
            if (now_ns() > end) {
                stop_cluster(cl);
                return -1;
            }
            usleep(20000);
        }
    }
    return 0;
}

/* The cluster of this process: started by the first cluster run and kept
 * for the next ones (a node refuses to serve for its first 2 s, so a
 * cluster per run would cost more than most runs), emptied (FLUSHALL on
 * every primary) before each; stopped at exit. */
static bench_cluster_t g_cl;
static bool g_cl_up;

static void cluster_at_exit(void) {
    if (g_cl_up) stop_cluster(&g_cl);
    g_cl_up = false;
}

static int cluster_get(void) {
    if (g_cl_up) {
        bool ok = true;
        for (int i = 0; i < CL_NODES && ok; i++) {
            redisReply *r = cmd_at(g_cl.port[i], "FLUSHALL");
            ok = r && r->type == REDIS_REPLY_STATUS;
            if (r) freeReplyObject(r);
            ok = ok && cluster_ready(&g_cl, g_cl.port[i]);
        }
        if (ok) return 0;
        stop_cluster(&g_cl); /* not as left: a fresh one */
        g_cl_up = false;
    }
    static bool registered;
    if (!registered) atexit(cluster_at_exit);
    registered = true;
    if (start_cluster(&g_cl) != 0) return -1;
    g_cl_up = true;
    return 0;
}

/* ---- workload and accounting */

typedef struct keystat {
    uint64_t admitted, first, last;
} keystat_t;

struct run {
    const cb_fleet_params_t *p;
    int keys;
    keystat_t *ks;
    uint64_t *lat; /* per call, ns */
    uint64_t *sent;
    uint64_t done, failures, admitted;
    uint64_t t0; /* open loop: call i is due at t0 + i/rate */
    pthread_mutex_t mu;
};

static int key_of(struct run *R, uint64_t i) {
    uint64_t x = i * 0x9E3779B97F4A7C15ull;
    x ^= x >> 29;
    return (int)(x % (uint64_t)R->keys);
}

static void account(struct run *R, uint64_t i, int k, bool from_redis, bool admitted, uint64_t t) {
    keystat_t *s = &R->ks[k];
    if (from_redis) {
        if (!s->first || t < s->first) s->first = t;
        if (t > s->last) s->last = t;
    }
    if (admitted) {
        s->admitted++;
        R->admitted++;
    }
    R->lat[i] = now_ns() - R->sent[i];
    R->done++;
}

static int cmp_u64(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* ---- sluice-redis */

struct call_ctx {
    struct run *R;
    uint64_t i;
};

static void on_result(void *user, const sluice_fleet_result_t *res) {
    struct call_ctx *c = user;
    struct run *R = c->R;
    int k = key_of(R, c->i);
    if (res->status != 0 || res->source == SLUICE_FLEET_SOURCE_FAILURE) R->failures++;
    account(R, c->i, k, res->source == SLUICE_FLEET_SOURCE_REDIS, res->decision.kind == SLUICE_EMITTED, res->now);
}

static void pace_cb(evutil_socket_t fd, short what, void *arg) {
    (void)fd;
    (void)what;
    (void)arg; /* only wakes the loop */
}

/* Open loop: the limiter on a loop of the loop layer (sluice_fleet_new_on_loop), and
 * calls made by 4 threads, each waiting for its calls' due times, as
 * redis-per-call's 4 threads do: both see the same submitting side. */
struct pacer {
    struct run *R;
    sluice_fleet_t *f;
    struct call_ctx *ctx;
    int index, count;
};

static void on_result_mt(void *user, const sluice_fleet_result_t *res) {
    struct call_ctx *c = user;
    pthread_mutex_lock(&c->R->mu);
    on_result(user, res);
    pthread_mutex_unlock(&c->R->mu);
}

/* An open loop's wait for a call due at `due`: none once it is due, else
 * until then but never less than PACE_MIN_SLEEP_NS, so that calls falling
 * due meanwhile go out together on waking (late by at most that, and the
 * lateness counts in their latency). At tens of thousands of calls per
 * second, a sleep per call would spend the client's share of the two cores
 * on context switches that the server under test then waits for. */
#define PACE_MIN_SLEEP_NS (100 * 1000)
static void pace_until(uint64_t due) {
    uint64_t now = now_ns();
    if (due <= now) return;
    cb_sleep_until(due - now >= PACE_MIN_SLEEP_NS ? due : now + PACE_MIN_SLEEP_NS);
}

static void *pacer_main(void *arg) {
    struct pacer *p = arg;
    struct run *R = p->R;
    double interval = 1e9 / R->p->rate;
    for (uint64_t i = (uint64_t)p->index; i < R->p->calls; i += (uint64_t)p->count) {
        uint64_t due = R->t0 + (uint64_t)((double)i * interval);
        pace_until(due);
        p->ctx[i].R = R;
        p->ctx[i].i = i;
        R->sent[i] = due;
        if (sluice_fleet_call(p->f, sluice_key_u64((uint64_t)key_of(R, i)), 1, 0, on_result_mt, &p->ctx[i]) != 0) {
            pthread_mutex_lock(&R->mu);
            R->failures++;
            R->lat[i] = 0;
            R->done++;
            pthread_mutex_unlock(&R->mu);
        }
    }
    return NULL;
}

/* The address of the sluice-redis cases: the plain port, or a URL set by
 * cb_fleet: rediss:// to the TLS port, or redis+cluster:// to the cluster's
 * nodes. */
static char g_url[600];
static bool g_cluster; /* the case runs against the cluster */

/* sluice-redis-3q: the policy as "second", and two quotas that never bind
 * within a run (600 a minute, 36,000 an hour). */
static const sluice_rate_quota_t three_quotas[3] = {
    { "second", LIMIT, (int64_t)SEC, BURST },
    { "minute", 60 * LIMIT, 60 * (int64_t)SEC, 0 },
    { "hour", 3600 * LIMIT, 3600 * (int64_t)SEC, 0 },
};
static const sluice_plan_t three_plan[1] = { { "bench", three_quotas, 3 } };
static const sluice_plans_t three_table = { three_plan, 1, 0 };

/* The limiter the sluice-redis cases use. */
static sluice_fleet_config_t bench_config(int port, int quotas) {
    sluice_fleet_config_t c;
    memset(&c, 0, sizeof c);
    c.policy = sluice_rate(LIMIT, (int64_t)SEC, BURST);
    if (quotas == 3) {
        c.policy = sluice_rate_plans();
        c.plans = &three_table;
    }
    c.port = port;
    if (g_url[0]) c.url = g_url;
    c.prefix = "bench";
    c.prefix_len = 5;
    c.timeout_ns = 2 * SEC;
    return c;
}

/* One call of the sluice-redis cases: under the plan, or the one policy. */
static void fleet_call(struct run *R, sluice_fleet_t *f, uint64_t i, struct call_ctx *ctx) {
    sluice_key_t key = sluice_key_u64((uint64_t)key_of(R, i));
    if (R->p->quotas == 3)
        sluice_fleet_call_plan(f, key, 0, 1, 0, on_result, ctx);
    else
        sluice_fleet_call(f, key, 1, 0, on_result, ctx);
}

static int run_sluice_paced(struct run *R, int port, cb_fleet_result_t *r) {
    sluice_fleet_config_t c = bench_config(port, R->p->quotas);
    sluice_loop_t *loop = NULL;
    sluice_fleet_t *f = NULL;
    if (sluice_loop_start(&loop, NULL) != 0 || sluice_fleet_new_on_loop(&f, loop, &c) != 0) {
        snprintf(r->note, sizeof r->note, "sluice_fleet_new_on_loop failed");
        if (loop) sluice_loop_free(loop);
        return -1;
    }
    /* a cluster: the map read and every primary connected first (else the
     * first calls would measure the redirections of a cold start) */
    for (int i = 0; g_cluster && !sluice_fleet_connected(f) && i < 10000; i++) usleep(1000);
    struct call_ctx *ctx = calloc(R->p->calls, sizeof *ctx);
    if (!ctx) {
        snprintf(r->note, sizeof r->note, "out of memory");
        sluice_fleet_free(f);
        sluice_loop_free(loop);
        return -1;
    }
    enum { P = 4 };
    struct pacer pw[P];
    pthread_t th[P];
    R->t0 = now_ns();
    for (int i = 0; i < P; i++) {
        pw[i] = (struct pacer){ R, f, ctx, i, P };
        pthread_create(&th[i], NULL, pacer_main, &pw[i]);
    }
    for (int i = 0; i < P; i++) pthread_join(th[i], NULL);
    for (;;) { /* every call is answered within its timeout */
        pthread_mutex_lock(&R->mu);
        bool all = R->done >= R->p->calls;
        pthread_mutex_unlock(&R->mu);
        if (all) break;
        usleep(1000);
    }
    sluice_fleet_stats_t st;
    sluice_fleet_stats(f, &st);
    r->script_runs = st.batches;
    sluice_fleet_free(f);
    sluice_loop_free(loop);
    free(ctx);
    return 0;
}

static int run_sluice(struct run *R, int port, cb_fleet_result_t *r) {
    if (R->p->rate > 0) return run_sluice_paced(R, port, r);
    /* precise timers: the open loop submits on time (not rounded to ms) */
    struct event_config *ec = event_config_new();
    event_config_set_flag(ec, EVENT_BASE_FLAG_PRECISE_TIMER);
    struct event_base *base = event_base_new_with_config(ec);
    event_config_free(ec);
    sluice_fleet_config_t c = bench_config(port, R->p->quotas);
    sluice_fleet_t *f = NULL;
    if (sluice_fleet_new(&f, base, &c) != 0) {
        snprintf(r->note, sizeof r->note, "sluice_fleet_new failed");
        return -1;
    }
    struct call_ctx *ctx = calloc(R->p->calls, sizeof *ctx);
    if (!ctx) {
        snprintf(r->note, sizeof r->note, "out of memory");
        sluice_fleet_free(f);
        return -1;
    }
    for (int i = 0; g_cluster && !sluice_fleet_connected(f) && i < 10000; i++) {
        event_base_loop(base, EVLOOP_ONCE | EVLOOP_NONBLOCK);
        usleep(1000);
    }
    struct event *pace = evtimer_new(base, pace_cb, NULL);
    uint64_t next = 0, window = R->p->pool > 0 ? (uint64_t)R->p->pool : 256;
    double interval = R->p->rate > 0 ? 1e9 / R->p->rate : 0;
    uint64_t t0 = now_ns();
    while (R->done < R->p->calls) {
        if (interval > 0) {
            /* open loop: every call due by now, timed from its due time */
            uint64_t now = now_ns();
            while (next < R->p->calls && t0 + (uint64_t)((double)next * interval) <= now) {
                ctx[next].R = R;
                ctx[next].i = next;
                R->sent[next] = t0 + (uint64_t)((double)next * interval);
                fleet_call(R, f, next, &ctx[next]);
                next++;
            }
            if (next < R->p->calls) {
                uint64_t due = t0 + (uint64_t)((double)next * interval), now2 = now_ns();
                uint64_t wait = due > now2 ? due - now2 : 0;
                struct timeval tv = { (time_t)(wait / SEC), (suseconds_t)(wait % SEC / 1000) };
                evtimer_add(pace, &tv);
            }
        } else {
            while (next < R->p->calls && next - R->done < window) {
                ctx[next].R = R;
                ctx[next].i = next;
                R->sent[next] = now_ns();
                fleet_call(R, f, next, &ctx[next]);
                next++;
            }
        }
        event_base_loop(base, EVLOOP_ONCE);
    }
    sluice_fleet_stats_t st;
    sluice_fleet_stats(f, &st);
    r->script_runs = st.batches;
    event_free(pace);
    sluice_fleet_free(f);
    event_base_free(base);
    free(ctx);
    return 0;
}

/* ---- redis-per-call */

struct worker {
    struct run *R;
    const int *ports; /* one node, or the cluster's CL_NODES primaries */
    int nodes, index, count;
    const char *sha;
    int rc;
};

static void *worker_main(void *arg) {
    struct worker *w = arg;
    struct run *R = w->R;
    redisContext *cs[CL_NODES] = { NULL };
    for (int n = 0; n < w->nodes; n++) {
        cs[n] = redisConnect("127.0.0.1", w->ports[n]);
        if (!cs[n] || cs[n]->err) {
            for (int m = 0; m <= n; m++)
                if (cs[m]) redisFree(cs[m]);
            w->rc = -1;
            return NULL;
        }
    }
    char per_s[32], bper_s[48], limit_s[8], cend_s[48];
    snprintf(per_s, sizeof per_s, "%llu", (unsigned long long)SEC);
    snprintf(bper_s, sizeof bper_s, "%llu", (unsigned long long)(BURST * SEC));
    snprintf(limit_s, sizeof limit_s, "%d", LIMIT);
    /* the end of the clock (2^64-1 ns) times the limit, as the limiter passes it */
    unsigned __int128 cend = (unsigned __int128)UINT64_MAX * LIMIT;
    char tmp[48];
    int n = 0;
    do {
        tmp[n++] = (char)('0' + (int)(cend % 10));
        cend /= 10;
    } while (cend);
    for (int i = 0; i < n; i++) cend_s[i] = tmp[n - 1 - i];
    cend_s[n] = '\0';
    double interval = R->p->rate > 0 ? 1e9 / R->p->rate : 0;
    for (uint64_t i = (uint64_t)w->index; i < R->p->calls; i += (uint64_t)w->count) {
        int k = key_of(R, i);
        uint64_t due = 0;
        if (interval > 0) {
            /* open loop: wait for the call's due time; a worker that falls
             * behind sends at once, and the wait shows in the latency */
            due = R->t0 + (uint64_t)((double)i * interval);
            pace_until(due);
        }
        char key[48];
        int kl = snprintf(key, sizeof key, "{bench:u%d}", k);
        const char *argv[] = { "EVALSHA", w->sha, "1", key, "C", "", limit_s, per_s, bper_s, "0", cend_s };
        size_t lens[11];
        for (int j = 0; j < 11; j++) lens[j] = strlen(argv[j]);
        lens[3] = (size_t)kl;
        /* a cluster: the key's node, by its hash slot */
        redisContext *c = w->nodes > 1 ? cs[g_slot_node[key_slot(key, (size_t)kl)]] : cs[0];
        R->sent[i] = interval > 0 ? due : now_ns();
        redisReply *rep = redisCommandArgv(c, 11, argv, lens);
        bool ok = rep && rep->type == REDIS_REPLY_ARRAY && rep->elements == 3;
        bool adm = ok && rep->element[0]->integer == 1;
        uint64_t t = ok ? strtoull(rep->element[1]->str, NULL, 10) : 0;
        pthread_mutex_lock(&R->mu);
        if (!ok) R->failures++;
        account(R, i, k, ok, adm, t);
        pthread_mutex_unlock(&R->mu);
        if (rep) freeReplyObject(rep);
        if (!rep) break;
    }
    for (int n = 0; n < w->nodes; n++) redisFree(cs[n]);
    return NULL;
}

static int run_per_call(struct run *R, const int *ports, int nodes, cb_fleet_result_t *r) {
    char sha[48] = "";
    for (int n = 0; n < nodes; n++) { /* the script on every node */
        redisContext *c = redisConnect("127.0.0.1", ports[n]);
        if (!c || c->err) {
            snprintf(r->note, sizeof r->note, "cannot connect to the redis-server");
            if (c) redisFree(c);
            return -1;
        }
        redisReply *rep = redisCommand(c, "SCRIPT LOAD %s", sluice_fleet_script());
        if (!rep || rep->type != REDIS_REPLY_STRING) {
            snprintf(r->note, sizeof r->note, "SCRIPT LOAD failed");
            if (rep) freeReplyObject(rep);
            redisFree(c);
            return -1;
        }
        snprintf(sha, sizeof sha, "%s", rep->str);
        freeReplyObject(rep);
        redisFree(c);
    }
    int P = R->p->pool > 0 ? R->p->pool : 4;
    struct worker w[64];
    pthread_t th[64];
    if (P > 64) P = 64;
    R->t0 = now_ns();
    for (int i = 0; i < P; i++) {
        w[i] = (struct worker){ R, ports, nodes, i, P, sha, 0 };
        pthread_create(&th[i], NULL, worker_main, &w[i]);
    }
    for (int i = 0; i < P; i++) pthread_join(th[i], NULL);
    return 0;
}

int cb_fleet(const cb_fleet_params_t *p, cb_fleet_result_t *r) {
    memset(r, 0, sizeof *r);
    char cert_dir[] = "/tmp/sluice-bench-tls-XXXXXX";
    int tls_port = 0;
    g_url[0] = '\0';
    if (p->tls) {
        if (p->impl != 0 || !mkdtemp(cert_dir) || make_certs(cert_dir) != 0) {
            snprintf(r->note, sizeof r->note, "cannot make TLS certificates (is openssl installed?)");
            return -1;
        }
        tls_port = free_port();
    }
    int port = -1, nodes = 1;
    const int *ports = &port;
    pid_t redis = -1;
    g_cluster = p->cluster != 0;
    if (p->cluster) {
        if (p->tls || cluster_get() != 0) {
            snprintf(r->note, sizeof r->note, "cannot start a 3-node Redis Cluster (redis-server 7 needed)");
            return -1;
        }
        port = g_cl.port[0];
        ports = g_cl.port;
        nodes = CL_NODES;
        snprintf(g_url, sizeof g_url, "redis+cluster://127.0.0.1:%d,127.0.0.1:%d,127.0.0.1:%d", g_cl.port[0],
                 g_cl.port[1], g_cl.port[2]);
    } else {
        port = free_port();
        redis = port > 0 ? start_redis(port, tls_port, p->tls ? cert_dir : NULL, NULL) : -1;
        if (redis < 0) {
            snprintf(r->note, sizeof r->note, "cannot start redis-server (is it installed, with TLS?)");
            return -1;
        }
    }
    if (p->tls) snprintf(g_url, sizeof g_url, "rediss://127.0.0.1:%d?cacert=%s/ca.pem", tls_port, cert_dir);
    struct run R;
    memset(&R, 0, sizeof R);
    R.p = p;
    R.keys = p->workload == 1 ? 4 : 10000;
    R.ks = calloc((size_t)R.keys, sizeof *R.ks);
    R.lat = calloc(p->calls, sizeof *R.lat);
    R.sent = calloc(p->calls, sizeof *R.sent);
    pthread_mutex_init(&R.mu, NULL);
    uint64_t cpu0 = 0, cpu1 = 0;
    for (int n = 0; n < nodes; n++) cpu0 += redis_cpu_ns(ports[n]);
    uint64_t t0 = now_ns();
    int rc = p->impl == 0 ? run_sluice(&R, port, r) : run_per_call(&R, ports, nodes, r);
    uint64_t elapsed = now_ns() - t0;
    for (int n = 0; n < nodes; n++) cpu1 += redis_cpu_ns(ports[n]);
    if (p->cluster) { /* kept for the next run of this process (cluster_get) */
        g_url[0] = '\0';
        g_cluster = false;
    } else {
        stop_redis(redis);
    }
    if (p->tls) {
        char rm[128];
        snprintf(rm, sizeof rm, "rm -rf '%s'", cert_dir);
        if (system(rm) != 0) snprintf(r->note, sizeof r->note, "could not remove %s", cert_dir);
        g_url[0] = '\0';
    }
    if (rc == 0 && R.done && cpu0 && cpu1 > cpu0) r->redis_cpu_ns_per_op = (double)(cpu1 - cpu0) / (double)R.done;
    if (rc == 0) {
        r->ops = R.done;
        r->ns_per_op = R.done ? (double)elapsed / (double)R.done : -1;
        qsort(R.lat, R.done, sizeof *R.lat, cmp_u64);
        if (R.done) {
            r->p50_us = (double)R.lat[R.done / 2] / 1000;
            r->p99_us = (double)R.lat[R.done * 99 / 100] / 1000;
            r->max_us = (double)R.lat[R.done - 1] / 1000;
        }
        r->admitted = R.admitted;
        if (p->impl == 1) r->script_runs = R.done - R.failures;
        r->failures = R.failures;
        const uint64_t T = SEC / LIMIT;
        for (int k = 0; k < R.keys; k++) {
            keystat_t *s = &R.ks[k];
            uint64_t allowed = BURST + (s->last > s->first ? (s->last - s->first) / T : 0) + 1;
            if (s->admitted > allowed) r->over_admitted += s->admitted - allowed;
        }
    }
    free(R.ks);
    free(R.lat);
    free(R.sent);
    pthread_mutex_destroy(&R.mu);
    return rc;
}

/* ---- the private redis-server, for the fleet-debounce scenario (fleet_debounce.c) */

int cb_redis_free_port(void) { return free_port(); }

int cb_redis_start(int port) { return (int)start_redis(port, 0, NULL, NULL); }

uint64_t cb_redis_cpu_ns(int port) { return redis_cpu_ns(port); }

void cb_redis_stop(int pid) { stop_redis((pid_t)pid); }
