/* test_fleet_timed_procs.c — the fleet's timed limiter across processes
 * (label topology: tens of seconds of real time). Two submitting processes
 * make random calls on 10,000 keys (a hot hundred get half of them, so
 * bursts form and values are superseded) under debounce(50 ms); three
 * worker processes claim and deliver. Every process logs what it saw; the
 * parent then checks every value against the debounce rules on the Redis
 * clock (docs/semantics.md): for each key, in call order, a value is
 * superseded by the next call (reported to that call) when that call comes
 * before its deadline, and otherwise emitted at its deadline exactly.
 *
 *  1. No fault: every emission is delivered exactly once (attempt 1), never
 *     before its deadline.
 *  2. Faults: one worker is killed (SIGKILL) while its handler holds
 *     deliveries, another is paused (SIGSTOP), at a moment its handler holds
 *     one, past the lease. Every emission
 *     is delivered at least once; a redelivery keeps its generation with a
 *     later attempt; the paused worker's late acknowledgements are refused
 *     (SLUICE_ELEASE, logged by its handler's acknowledgement callback).
 *  3. Failover: the same load behind Redis Sentinel (a primary, a replica,
 *     one sentinel), whose primary is killed (SIGKILL) halfway. Calls fail
 *     while no primary answers; writes the replica had not received are
 *     lost. Every value outside the failover window still follows the rules
 *     and is delivered; inside it, what is lost is counted and reported,
 *     and bounded: only calls made from shortly before the kill until the
 *     new primary was named may be affected.
 *
 * SLUICE_PROCS_SECONDS sets the length of each run's load (default 20 s). */
#define TEST_NAME "test_fleet_timed_procs"
#include "test_fleet_util.h"

#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "sluice_fleet_timed.h"

#define MS 1000000ull
#define KEYS 10000
#define INTERVAL (50 * MS)
#define LEASE (1000 * MS)

static char url[160];
static char prefix[64];
static char logdir[96];

static uint64_t real_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static sluice_fleet_timed_t *open_limiter(struct event_base *base) {
    sluice_fleet_timed_config_t c;
    memset(&c, 0, sizeof c);
    c.policy = sluice_debounce((int64_t)INTERVAL, false, true, -1);
    c.url = url;
    c.prefix = prefix;
    c.prefix_len = strlen(prefix);
    c.partitions = 8;
    c.lease_ns = LEASE;
    c.timeout_ns = 5000 * MS;
    sluice_fleet_timed_t *t = NULL;
    if (sluice_fleet_timed_new(&t, base, &c) != 0) _exit(3);
    return t;
}

/* ---- a submitting process */

typedef struct submitter {
    sluice_fleet_timed_t *t;
    struct event_base *base;
    FILE *log;
    unsigned id;
    uint64_t seq, end_ns, rng;
    int in_flight, failures;
    struct event *tick;
} submitter_t;

typedef struct call_ctx {
    submitter_t *s;
    char key[16], value[32];
} call_ctx_t;

static uint64_t rnd(uint64_t *s) {
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

static void on_called(void *user, const sluice_fleet_timed_result_t *r) {
    call_ctx_t *c = user;
    submitter_t *s = c->s;
    s->in_flight--;
    if (r->status != 0) {
        s->failures++;
        fprintf(s->log, "F %s %s %d\n", c->key, c->value, r->status);
    } else {
        fprintf(s->log, "C %s %s %d %llu %llu %.*s\n", c->key, c->value, (int)r->decision.kind,
                (unsigned long long)r->decision.at, (unsigned long long)r->decision.now,
                r->dropped ? (int)r->dropped_len : 1, r->dropped ? (const char *)r->dropped : "-");
    }
    free(c);
}

static void submit_tick(evutil_socket_t fd, short what, void *arg) {
    (void)fd;
    (void)what;
    submitter_t *s = arg;
    if (real_ns() >= s->end_ns) {
        if (s->in_flight == 0) event_base_loopbreak(s->base);
        return;
    }
    for (int i = 0; i < 4 && s->in_flight < 64; i++) {
        call_ctx_t *c = malloc(sizeof *c);
        if (!c) _exit(3);
        c->s = s;
        uint64_t r = rnd(&s->rng);
        unsigned k = r % 2 ? (unsigned)(r >> 8) % 100 : (unsigned)(r >> 8) % KEYS;
        snprintf(c->key, sizeof c->key, "k%u", k);
        snprintf(c->value, sizeof c->value, "p%u-%llu", s->id, (unsigned long long)s->seq++);
        if (sluice_fleet_timed_call(s->t, sluice_key_bytes(c->key, strlen(c->key)), c->value, strlen(c->value), 0,
                                    on_called, c) != 0)
            _exit(3);
        s->in_flight++;
    }
}

static void run_submitter(unsigned id, int seconds) {
    struct event_base *base = event_base_new();
    submitter_t s;
    memset(&s, 0, sizeof s);
    s.base = base;
    s.t = open_limiter(base);
    s.id = id;
    s.rng = 0x9E3779B97F4A7C15ull * (id + 1);
    s.end_ns = real_ns() + (uint64_t)seconds * 1000000000ull;
    char path[256];
    snprintf(path, sizeof path, "%s/submit-%u.log", logdir, id);
    s.log = fopen(path, "w");
    if (!s.log) _exit(3);
    setvbuf(s.log, NULL, _IOLBF, 0);
    s.tick = event_new(base, -1, EV_PERSIST, submit_tick, &s);
    struct timeval tv = { 0, 1000 };
    event_add(s.tick, &tv);
    event_base_dispatch(base);
    event_free(s.tick);
    fclose(s.log);
    sluice_fleet_timed_free(s.t);
    event_base_free(base);
    _exit(s.failures ? 4 : 0);
}

/* ---- a worker process: its handler holds each delivery 30 ms, then acks */

/* held[i]: the deliveries worker i's handler holds now (not yet acknowledged),
 * in memory shared with the parent, which pauses a worker only while it holds
 * one (stop_holding()). */
static int *held;

typedef struct worker {
    unsigned id;
    sluice_fleet_timed_t *t;
    struct event_base *base;
    FILE *log;
    volatile sig_atomic_t stop;
    struct event *sig;
} worker_t;

typedef struct held {
    worker_t *w;
    sluice_fleet_delivery_t d;
    struct event *timer;
} held_t;

static void on_acked(void *user, const sluice_fleet_timed_result_t *r) {
    held_t *h = user;
    fprintf(h->w->log, "A %llu %u %u %d %d\n", (unsigned long long)h->d.generation, h->d.attempt, h->d.partition,
            r->status, r->had ? 1 : 0);
    free(h);
}

static void ack_later(evutil_socket_t fd, short what, void *arg) {
    (void)fd;
    (void)what;
    held_t *h = arg;
    event_free(h->timer);
    __atomic_fetch_sub(&held[h->w->id], 1, __ATOMIC_RELEASE);
    if (sluice_fleet_timed_ack(h->w->t, &h->d, on_acked, h) != 0) _exit(3);
}

static void handle(void *user, const sluice_fleet_delivery_t *d) {
    worker_t *w = user;
    __atomic_fetch_add(&held[w->id], 1, __ATOMIC_RELEASE);
    fprintf(w->log, "D %.*s %.*s %llu %u %llu %llu\n", (int)d->key.len, (const char *)d->key.bytes, (int)d->value_len,
            (const char *)d->value, (unsigned long long)d->generation, d->attempt, (unsigned long long)d->at,
            (unsigned long long)real_ns());
    held_t *h = calloc(1, sizeof *h);
    if (!h) _exit(3);
    h->w = w;
    h->d = *d;
    h->d.key = sluice_key_u64(0); /* the pointers die with this call: ack needs the numbers only */
    h->d.value = NULL;
    h->timer = evtimer_new(w->base, ack_later, h);
    struct timeval tv = { 0, 30000 };
    evtimer_add(h->timer, &tv);
}

static void on_stopped(void *user, const sluice_fleet_timed_result_t *r) {
    worker_t *w = user;
    fprintf(w->log, "S %d\n", r->status);
    event_base_loopexit(w->base, NULL);
}

static void on_term(evutil_socket_t fd, short what, void *arg) {
    (void)fd;
    (void)what;
    worker_t *w = arg;
    if (sluice_fleet_timed_stop(w->t, on_stopped, w) != 0) event_base_loopexit(w->base, NULL);
}

static void run_worker(unsigned id) {
    struct event_base *base = event_base_new();
    worker_t w;
    memset(&w, 0, sizeof w);
    w.id = id;
    w.base = base;
    w.t = open_limiter(base);
    char path[256];
    snprintf(path, sizeof path, "%s/work-%u.log", logdir, id);
    w.log = fopen(path, "w");
    if (!w.log) _exit(3);
    setvbuf(w.log, NULL, _IOLBF, 0);
    w.sig = evsignal_new(base, SIGTERM, on_term, &w);
    evsignal_add(w.sig, NULL);
    sluice_fleet_timed_worker_t wc = { .handler = handle, .user = &w, .poll_ns = 100 * MS, .batch = 64 };
    if (sluice_fleet_timed_start(w.t, &wc) != 0) _exit(3);
    event_base_dispatch(base);
    fclose(w.log);
    _exit(0);
}

/* ---- checking */

typedef struct call {
    char key[16], value[32], dropped[32];
    int kind;
    uint64_t at, now;
    int delivered, first_attempt_max;
    uint64_t gen, deliv_at;
    bool superseded; /* named as `dropped` by a later call */
} call_t;

static call_t *calls;
static size_t ncalls;

static int by_value(const void *a, const void *b) {
    return strcmp(((const call_t *)a)->value, ((const call_t *)b)->value);
}

static call_t *find(const char *value) {
    call_t k;
    snprintf(k.value, sizeof k.value, "%s", value);
    return bsearch(&k, calls, ncalls, sizeof *calls, by_value);
}

static int by_key_time(const void *a, const void *b) {
    const call_t *x = *(const call_t *const *)a, *y = *(const call_t *const *)b;
    int c = strcmp(x->key, y->key);
    if (c) return c;
    return x->now < y->now ? -1 : x->now > y->now;
}

typedef struct totals {
    size_t calls, delivered, redelivered, superseded, refused, keys_checked;
    size_t failed_calls, lost, late_supersede; /* the failover */
} totals_t;

/* Rule breaks are failures, except for calls whose Redis time is within
 * [w0, w1] (a failover): those are counted. */
static uint64_t w0 = 1, w1 = 0;
static bool in_window(uint64_t t) { return t >= w0 && t <= w1; }

static totals_t check_logs(int submitters, int workers, bool faults) {
    totals_t tot;
    memset(&tot, 0, sizeof tot);
    size_t cap = 1 << 16;
    calls = malloc(cap * sizeof *calls);
    ncalls = 0;
    char path[256], line[512];
    for (int i = 0; i < submitters; i++) {
        snprintf(path, sizeof path, "%s/submit-%d.log", logdir, i);
        FILE *f = fopen(path, "r");
        CHECK(f, "no log %s", path);
        while (fgets(line, sizeof line, f)) {
            if (line[0] == 'F' && w1 > 0) { /* the failover: no primary answered */
                tot.failed_calls++;
                continue;
            }
            CHECK(line[0] == 'C', "a call failed: %s", line);
            if (ncalls == cap) calls = realloc(calls, (cap *= 2) * sizeof *calls);
            call_t *c = &calls[ncalls++];
            memset(c, 0, sizeof *c);
            unsigned long long at, now;
            CHECK(sscanf(line, "C %15s %31s %d %llu %llu %31s", c->key, c->value, &c->kind, &at, &now, c->dropped) == 6,
                  "bad call line %s", line);
            c->at = at;
            c->now = now;
            CHECK(c->kind == SLUICE_SCHEDULED, "a trailing debounce call was %d", c->kind);
            CHECK(c->at == c->now + INTERVAL, "%s scheduled at %llu, called at %llu", c->value, at, now);
        }
        fclose(f);
    }
    qsort(calls, ncalls, sizeof *calls, by_value);
    tot.calls = ncalls;
    for (size_t i = 0; i < ncalls; i++) {
        if (strcmp(calls[i].dropped, "-") == 0) continue;
        call_t *v = find(calls[i].dropped);
        CHECK(v, "%s dropped an unknown value %s", calls[i].value, calls[i].dropped);
        CHECK(!v->superseded, "%s superseded twice", v->value);
        CHECK(strcmp(v->key, calls[i].key) == 0, "%s superseded by a call on another key", v->value);
        CHECK(calls[i].now < v->at, "%s superseded at %llu, after its deadline %llu", v->value,
              (unsigned long long)calls[i].now, (unsigned long long)v->at);
        v->superseded = true;
        tot.superseded++;
    }
    /* deliveries and acknowledgements */
    for (int i = 0; i < workers; i++) {
        snprintf(path, sizeof path, "%s/work-%d.log", logdir, i);
        FILE *f = fopen(path, "r");
        CHECK(f, "no log %s", path);
        while (fgets(line, sizeof line, f)) {
            if (line[0] == 'D') {
                char key[16], value[32];
                unsigned long long gen, at, handled;
                unsigned attempt;
                CHECK(sscanf(line, "D %15s %31s %llu %u %llu %llu", key, value, &gen, &attempt, &at, &handled) == 6,
                      "bad delivery line %s", line);
                call_t *v = find(value);
                CHECK(v && strcmp(v->key, key) == 0, "delivered an unknown value %s", line);
                CHECK(!v->superseded || in_window(v->now), "%s was superseded and delivered", value);
                CHECK(at == v->at, "%s delivered for %llu, its deadline is %llu", value, at, (unsigned long long)v->at);
                CHECK(handled >= at, "%s handled %llu ns early", value, at - handled);
                if (v->delivered) {
                    /* (a claim lost in a failover is made again by the new primary, whose
                     * counter may have lost generations too) */
                    CHECK(gen == v->gen || in_window(v->now), "%s redelivered with generation %llu, first %llu", value,
                          gen, (unsigned long long)v->gen);
                    tot.redelivered++;
                } else {
                    tot.delivered++;
                }
                CHECK(faults || attempt == 1, "%s: attempt %u without faults", value, attempt);
                v->gen = gen;
                v->delivered++;
            } else if (line[0] == 'A') {
                unsigned long long gen;
                unsigned attempt, part;
                int status, had;
                CHECK(sscanf(line, "A %llu %u %u %d %d", &gen, &attempt, &part, &status, &had) == 5, "bad ack %s",
                      line);
                if (status == SLUICE_ELEASE) tot.refused++;
                CHECK(status == 0 || status == SLUICE_ELEASE || w1 > 0, "an ack failed: %s", line);
                CHECK(faults || (status == 0 && had), "an ack was refused without faults: %s", line);
            }
        }
        fclose(f);
    }
    /* the debounce rules, key by key, in call order */
    call_t **order = malloc(ncalls * sizeof *order);
    for (size_t i = 0; i < ncalls; i++) order[i] = &calls[i];
    qsort(order, ncalls, sizeof *order, by_key_time);
    for (size_t i = 0; i < ncalls; i++) {
        call_t *c = order[i];
        bool last_of_key = i + 1 == ncalls || strcmp(order[i + 1]->key, c->key) != 0;
        if (!last_of_key && order[i + 1]->now < c->at) {
            /* the next call came before c's deadline: c superseded (ties in
             * time: the order of the two is Redis's, and one of them is) */
            bool ok = c->superseded || order[i + 1]->now == c->now;
            if (!ok && (in_window(c->now) || in_window(order[i + 1]->now))) {
                tot.late_supersede++; /* the superseding call's write was lost */
                ok = true;
            }
            CHECK(ok, "%s should have been superseded by %s", c->value, order[i + 1]->value);
        } else {
            if (c->delivered == 0 && in_window(c->now)) {
                tot.lost++;
                continue;
            }
            CHECK(c->delivered >= 1, "%s (key %s, due %llu) was never delivered", c->value, c->key,
                  (unsigned long long)c->at);
            CHECK(faults || c->delivered == 1, "%s delivered %d times without faults", c->value, c->delivered);
        }
        if (last_of_key) tot.keys_checked++;
    }
    free(order);
    free(calls);
    calls = NULL;
    return tot;
}

static pid_t spawn(void (*fn)(unsigned, int), unsigned id, int seconds) {
    fflush(NULL);
    pid_t pid = fork();
    CHECK(pid >= 0, "fork");
    if (pid == 0) fn(id, seconds);
    return pid;
}

static void worker_entry(unsigned id, int seconds) {
    (void)seconds;
    run_worker(id);
}
static void submitter_entry(unsigned id, int seconds) { run_submitter(id, seconds); }

static int wait_exit(pid_t pid) {
    int st = 0;
    CHECK(waitpid(pid, &st, 0) == pid, "waitpid");
    return st;
}

static void sleep_ms(int ms) {
    struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };
    nanosleep(&ts, NULL);
}

enum mode { CLEAN, FAULTS, FAILOVER };

static test_redis_t primary, replica, sentinel;

/* Waits (bounded) until the primary shows the replica online and the
 * sentinel knows it: only then can Sentinel fail over to it. */
static void wait_replica(void) {
    char want[64];
    snprintf(want, sizeof want, "port=%d,state=online", replica.port);
    uint64_t end = tf_mono() + 60000 * MS;
    for (;;) {
        redisReply *info = tf_cmd(primary.port, "INFO replication");
        bool online = info && info->type == REDIS_REPLY_STRING && strstr(info->str, want);
        if (info) freeReplyObject(info);
        redisReply *reps = tf_cmd(sentinel.port, "SENTINEL replicas timedm");
        bool listed = reps && reps->type == REDIS_REPLY_ARRAY && reps->elements == 1;
        if (reps) freeReplyObject(reps);
        if (online && listed) return;
        CHECK(tf_mono() < end, "the replica is not online and known to the sentinel within 60 s");
        sleep_ms(100);
    }
}

static int named_primary(void) {
    redisReply *r = tf_cmd(sentinel.port, "SENTINEL get-master-addr-by-name timedm");
    int port = r && r->type == REDIS_REPLY_ARRAY && r->elements == 2 ? atoi(r->element[1]->str) : -1;
    if (r) freeReplyObject(r);
    return port;
}

/* Pauses worker `i` (SIGSTOP) at a moment its handler holds a delivery, so
 * that its acknowledgement comes after the lease: stopped, and let go again
 * while it holds none, until it does (within 20 s). */
static void stop_holding(pid_t pid, unsigned i) {
    uint64_t end = tf_mono() + 20000 * MS;
    for (;;) {
        CHECK(kill(pid, SIGSTOP) == 0, "SIGSTOP");
        int st = 0;
        CHECK(waitpid(pid, &st, WUNTRACED) == pid && WIFSTOPPED(st), "worker %u did not stop", i);
        if (__atomic_load_n(&held[i], __ATOMIC_ACQUIRE) > 0) return;
        CHECK(kill(pid, SIGCONT) == 0, "SIGCONT");
        CHECK(tf_mono() < end, "worker %u held no delivery within 20 s", i);
        sleep_ms(3);
    }
}

static void run(const char *name, int seconds, enum mode mode) {
    bool faults = mode != CLEAN;
    snprintf(prefix, sizeof prefix, "procs-%s-%ld", name, (long)getpid());
    snprintf(logdir, sizeof logdir, "/tmp/sluice-procs-%s-%ld", name, (long)getpid());
    char cmd[320];
    snprintf(cmd, sizeof cmd, "rm -rf '%s' && mkdir -p '%s'", logdir, logdir);
    CHECK(system(cmd) == 0, "mkdir %s", logdir);
    pid_t workers[3], subs[2];
    memset(held, 0, 3 * sizeof *held); /* (a worker of the last run may have stopped holding some) */
    for (unsigned i = 0; i < 3; i++) workers[i] = spawn(worker_entry, i, 0);
    for (unsigned i = 0; i < 2; i++) subs[i] = spawn(submitter_entry, i, seconds);
    uint64_t t_kill = 0, t_named = 0;
    if (mode == FAILOVER) {
        sleep_ms(seconds * 1000 / 2);
        t_kill = real_ns();
        test_redis_signal(&primary, SIGKILL);
        uint64_t end = tf_mono() + 60000 * MS;
        while (named_primary() != replica.port) {
            CHECK(tf_mono() < end, "Sentinel named no new primary within 60 s");
            sleep_ms(20);
        }
        t_named = real_ns();
        /* calls from a second before the kill (writes not yet replicated, claims
         * and acknowledgements lost) to a second after the new primary was named
         * (processes still reconnecting) */
        w0 = t_kill - 1000 * MS;
        w1 = t_named + 1000 * MS;
    }
    if (mode == FAULTS) {
        sleep_ms(seconds * 1000 / 3);
        kill(workers[2], SIGKILL); /* mid-handler: it always holds deliveries for 30 ms */
        sleep_ms(seconds * 1000 / 3);
        stop_holding(workers[1], 1); /* past the lease: its deliveries go to worker 0 */
        sleep_ms((int)(LEASE / MS) * 5 / 2);
        kill(workers[1], SIGCONT);
    }
    for (int i = 0; i < 2; i++) {
        int st = wait_exit(subs[i]);
        /* 4: some calls failed (logged), which only a failover may cause */
        CHECK(WIFEXITED(st) && (WEXITSTATUS(st) == 0 || (mode == FAILOVER && WEXITSTATUS(st) == 4)),
              "submitter %d: status %d", i, st);
    }
    /* every deadline passed, every lease ended, the redeliveries handled */
    sleep_ms((int)((INTERVAL + 2 * LEASE) / MS) + 1500);
    for (int i = 0; i < 3; i++) {
        if (mode == FAULTS && i == 2) {
            wait_exit(workers[i]);
            continue;
        }
        kill(workers[i], SIGTERM);
        int st = wait_exit(workers[i]);
        CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "worker %d: status %d", i, st);
    }
    totals_t t = check_logs(2, 3, faults);
    fprintf(stderr,
            TEST_NAME ": %s, %d s: %zu calls on %zu keys, %zu superseded, %zu emissions delivered, %zu redelivered, "
                      "%zu late acknowledgements refused\n",
            name, seconds, t.calls, t.keys_checked, t.superseded, t.delivered, t.redelivered, t.refused);
    CHECK(t.calls > 1000 && t.superseded > 100 && t.delivered > 500, "too little load to tell");
    if (mode == FAILOVER) {
        fprintf(stderr,
                TEST_NAME ": failover: Sentinel named the new primary %llu ms after the kill; %zu calls failed "
                          "meanwhile; in the window: %zu values lost, %zu delivered although a later call's write "
                          "was lost\n",
                (unsigned long long)((t_named - t_kill) / MS), t.failed_calls, t.lost, t.late_supersede);
        w0 = 1;
        w1 = 0;
    } else if (faults) {
        CHECK(t.redelivered > 0, "the killed and the paused worker's deliveries were not redelivered");
        CHECK(t.refused > 0, "the paused worker's late acknowledgements were not refused");
    }
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", logdir);
    CHECK(system(cmd) == 0, "rm %s", logdir);
}

static void run_failover(int seconds) {
    tf_start_redis(&primary);
    tf_start_redis(&replica);
    redisReply *r = tf_cmd(primary.port, "CONFIG SET repl-diskless-sync-delay 0");
    CHECK(r && r->type == REDIS_REPLY_STATUS, "CONFIG SET");
    freeReplyObject(r);
    r = tf_cmd(replica.port, "REPLICAOF 127.0.0.1 %d", primary.port);
    CHECK(r && r->type == REDIS_REPLY_STATUS, "REPLICAOF");
    freeReplyObject(r);
    char conf[256];
    snprintf(conf, sizeof conf,
             "sentinel monitor timedm 127.0.0.1 %d 1\n"
             "sentinel down-after-milliseconds timedm 1000\n"
             "sentinel failover-timeout timedm 5000\n",
             primary.port);
    test_redis_opts_t o;
    memset(&o, 0, sizeof o);
    o.sentinel_conf = conf;
    memset(&sentinel, 0, sizeof sentinel);
    CHECK(test_redis_start_opts(&sentinel, 0, &o) == 0, "cannot start a sentinel");
    wait_replica();
    snprintf(url, sizeof url, "redis+sentinel://127.0.0.1:%d/timedm", sentinel.port);
    run("failover", seconds, FAILOVER);
    test_redis_stop(&sentinel);
    test_redis_stop(&replica);
    test_redis_stop(&primary);
}

int main(void) {
    signal(SIGPIPE, SIG_IGN);
    held = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    CHECK(held != MAP_FAILED, "mmap");
    test_redis_t redis;
    tf_start_redis(&redis);
    snprintf(url, sizeof url, "redis://127.0.0.1:%d", redis.port);
    const char *env = getenv("SLUICE_PROCS_SECONDS");
    int seconds = env && atoi(env) > 0 ? atoi(env) : 20;
    run("clean", seconds, CLEAN);
    run("faults", seconds, FAULTS);
    test_redis_stop(&redis);
    run_failover(seconds);
    printf(TEST_NAME ": ok\n");
    return 0;
}
