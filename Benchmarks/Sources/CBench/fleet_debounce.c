/* fleet_debounce.c — the "fleet-debounce" scenario (cbench_fleet_debounce.h). */
#include "cbench_fleet_debounce.h"

#include <event2/event.h>
#include <hiredis/hiredis.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cbench-internal.h"
#include "sluice_fleet_timed.h"

#define SEC 1000000000ull
#define MS 1000000ull
#define SUBMITTERS 2
#define WORKERS 2
#define CLAIM_BATCH 64
#define LEASE_NS (30 * SEC)
#define MAX_THREADS 32

static uint64_t real_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * SEC + (uint64_t)ts.tv_nsec;
}

static void sleep_until(uint64_t t) {
    struct timespec ts = { (time_t)(t / SEC), (long)(t % SEC) };
    while (clock_nanosleep(CLOCK_REALTIME, TIMER_ABSTIME, &ts, NULL) != 0) {
        if (real_ns() >= t) break;
    }
}

/* ---- records, written by each child to a file of the run's folder */

typedef struct call_rec {
    uint32_t key, pad;
    uint64_t vid, now; /* the value's id; the call's time on Redis's clock (ns) */
} call_rec_t;

typedef struct emit_rec {
    uint32_t key, pad;
    uint64_t vid, at, handled; /* the value; its deadline (ns, Redis clock); CLOCK_REALTIME at handling */
} emit_rec_t;

typedef struct file_head {
    uint64_t n, calls, failures, claims, last_ns;
} file_head_t;

typedef struct recbuf {
    char *v;
    size_t n, cap, size;
} recbuf_t;

static void *rec_push(recbuf_t *b) {
    if (b->n == b->cap) {
        b->cap = b->cap ? b->cap * 2 : 1 << 16;
        b->v = realloc(b->v, b->cap * b->size);
        if (!b->v) _exit(3);
    }
    return b->v + b->n++ * b->size;
}

/* The run's settings, set before the children are forked. */
static cb_fleet_debounce_params_t P;
static char g_dir[64];
static int g_port;
static uint64_t g_t_start, g_t_end; /* the submitting time (CLOCK_REALTIME) */
static char g_sha_upsert[48], g_sha_claim[48], g_sha_ack[48];

static void write_file(const char *name, unsigned id, file_head_t *h, const recbuf_t *b) {
    char path[128];
    snprintf(path, sizeof path, "%s/%s-%u.bin", g_dir, name, id);
    FILE *f = fopen(path, "w");
    if (!f) _exit(3);
    h->n = b->n;
    if (fwrite(h, sizeof *h, 1, f) != 1 || (b->n && fwrite(b->v, b->size, b->n, f) != b->n)) _exit(3);
    fclose(f);
}

static void *read_file(const char *name, unsigned id, file_head_t *h, size_t size) {
    char path[128];
    snprintf(path, sizeof path, "%s/%s-%u.bin", g_dir, name, id);
    FILE *f = fopen(path, "r");
    if (!f) return NULL;
    void *v = NULL;
    if (fread(h, sizeof *h, 1, f) == 1) {
        v = malloc(h->n ? h->n * size : 1);
        if (v && h->n && fread(v, size, h->n, f) != h->n) {
            free(v);
            v = NULL;
        }
    }
    fclose(f);
    return v;
}

/* The calls' counter, shared by every submitter (and thread) through memory
 * mapped before the fork: both processes walk the same windows in step. */
static _Atomic uint64_t *g_next;

/* Call j (of all submitters): a pseudo-random key of window j / (SUBMITTERS * per_window). */
static uint32_t key_for(unsigned sub, uint64_t j) {
    uint64_t w = j / ((uint64_t)SUBMITTERS * (uint64_t)P.per_window);
    uint64_t x = (j + 1) * 0x9E3779B97F4A7C15ull ^ ((uint64_t)sub + 1) * 0xBF58476D1CE4E5B9ull;
    x ^= x >> 31;
    x *= 0x94D049BB133111EBull;
    x ^= x >> 29;
    return (uint32_t)((w * (uint64_t)P.window + x % (uint64_t)P.window) % (uint64_t)P.keys);
}

static uint64_t vid_of(unsigned sub, uint64_t j) { return ((uint64_t)(sub + 1) << 40) | j; }

static uint32_t parse_key(const void *bytes, size_t len) {
    char b[24];
    if (len == 0 || len >= sizeof b) return UINT32_MAX;
    memcpy(b, bytes, len);
    b[len] = '\0';
    return b[0] == 'k' ? (uint32_t)strtoul(b + 1, NULL, 10) : UINT32_MAX;
}

static void child_setup(void) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
}

/* ---- sluice-fleet-timed */

static sluice_fleet_timed_t *open_timed(struct event_base *base) {
    static char url[64];
    snprintf(url, sizeof url, "redis://127.0.0.1:%d", g_port);
    sluice_fleet_timed_config_t c;
    memset(&c, 0, sizeof c);
    c.policy = sluice_debounce((int64_t)P.interval_ns, false, true, -1);
    c.url = url;
    c.prefix = "fd";
    c.prefix_len = 2;
    c.partitions = (uint32_t)P.partitions;
    c.lease_ns = LEASE_NS;
    c.timeout_ns = 5 * SEC;
    sluice_fleet_timed_t *t = NULL;
    if (sluice_fleet_timed_new(&t, base, &c) != 0) _exit(3);
    return t;
}

/* An event_base with precise timers (not rounded to the coarse clock's ticks). */
static struct event_base *precise_base(void) {
    struct event_config *ec = event_config_new();
    event_config_set_flag(ec, EVENT_BASE_FLAG_PRECISE_TIMER);
    struct event_base *base = event_base_new_with_config(ec);
    event_config_free(ec);
    if (!base) _exit(3);
    return base;
}

static void on_ready(void *user, const sluice_fleet_timed_result_t *r) { *(int *)user = r->status == 0 ? 1 : -1; }

/* Waits until Redis answers the limiter (a pending() on a key of no one's). */
static void wait_ready(sluice_fleet_timed_t *t, struct event_base *base) {
    for (int i = 0; i < 300; i++) {
        int st = 0;
        if (sluice_fleet_timed_pending(t, sluice_key_bytes("warm", 4), 0, on_ready, &st) != 0) _exit(3);
        while (st == 0) event_base_loop(base, EVLOOP_ONCE);
        if (st == 1) return;
        usleep(10000);
    }
    _exit(5);
}

typedef struct ssub ssub_t;

typedef struct sctx {
    ssub_t *s;
    uint64_t j, vid;
    uint32_t key;
    char text[16];
} sctx_t;

struct ssub {
    sluice_fleet_timed_t *t;
    unsigned id;
    int in_flight;
    sctx_t **free_ctx;
    int nfree;
    file_head_t head;
    recbuf_t rec;
};

static void s_on_called(void *user, const sluice_fleet_timed_result_t *r) {
    sctx_t *c = user;
    ssub_t *s = c->s;
    s->in_flight--;
    if (r->status != 0) {
        s->head.failures++;
    } else {
        call_rec_t *x = rec_push(&s->rec);
        x->key = c->key;
        x->pad = 0;
        x->vid = c->vid;
        x->now = r->decision.now;
        s->head.calls++;
    }
    s->free_ctx[s->nfree++] = c;
}

static void run_sluice_submitter(unsigned id) {
    child_setup();
    struct event_base *base = precise_base();
    ssub_t s;
    memset(&s, 0, sizeof s);
    s.id = id;
    s.rec.size = sizeof(call_rec_t);
    s.t = open_timed(base);
    wait_ready(s.t, base);
    int window = P.in_flight > 0 ? P.in_flight : 256;
    sctx_t *pool = calloc((size_t)window, sizeof *pool);
    s.free_ctx = calloc((size_t)window, sizeof *s.free_ctx);
    if (!pool || !s.free_ctx) _exit(3);
    for (int i = 0; i < window; i++) {
        pool[i].s = &s;
        s.free_ctx[s.nfree++] = &pool[i];
    }
    sleep_until(g_t_start);
    for (;;) {
        bool open = real_ns() < g_t_end;
        while (open && s.nfree > 0) {
            sctx_t *c = s.free_ctx[--s.nfree];
            c->j = atomic_fetch_add(g_next, 1);
            c->key = key_for(id, c->j);
            c->vid = vid_of(id, c->j);
            int n = snprintf(c->text, sizeof c->text, "k%u", c->key);
            if (sluice_fleet_timed_call(s.t, sluice_key_bytes(c->text, (size_t)n), &c->vid, sizeof c->vid, 0,
                                        s_on_called, c) != 0)
                _exit(3);
            s.in_flight++;
        }
        if (!open && s.in_flight == 0) break;
        event_base_loop(base, EVLOOP_ONCE);
    }
    s.head.last_ns = real_ns();
    write_file("submit", id, &s.head, &s.rec);
    sluice_fleet_timed_free(s.t);
    event_base_free(base);
    _exit(0);
}

typedef struct swork {
    sluice_fleet_timed_t *t;
    struct event_base *base;
    file_head_t head;
    recbuf_t rec;
} swork_t;

static void s_on_acked(void *user, const sluice_fleet_timed_result_t *r) {
    swork_t *w = user;
    if (r->status != 0 || !r->had) w->head.failures++;
}

static void s_handle(void *user, const sluice_fleet_delivery_t *d) {
    swork_t *w = user;
    uint64_t now = real_ns();
    emit_rec_t *e = rec_push(&w->rec);
    e->key = d->key.kind == SLUICE_KEY_BYTES ? parse_key(d->key.bytes, d->key.len) : UINT32_MAX;
    e->pad = 0;
    e->vid = 0;
    if (d->value_len == sizeof e->vid) memcpy(&e->vid, d->value, sizeof e->vid);
    e->at = d->at;
    e->handled = now;
    if (sluice_fleet_timed_ack(w->t, d, s_on_acked, w) != 0) w->head.failures++;
}

static void s_on_stopped(void *user, const sluice_fleet_timed_result_t *r) {
    swork_t *w = user;
    if (r->status != 0) w->head.failures++;
    event_base_loopexit(w->base, NULL);
}

static void s_on_term(evutil_socket_t fd, short what, void *arg) {
    (void)fd;
    (void)what;
    swork_t *w = arg;
    if (sluice_fleet_timed_stop(w->t, s_on_stopped, w) != 0) event_base_loopexit(w->base, NULL);
}

static void run_sluice_worker(unsigned id) {
    child_setup();
    swork_t w;
    memset(&w, 0, sizeof w);
    w.rec.size = sizeof(emit_rec_t);
    w.base = precise_base();
    w.t = open_timed(w.base);
    struct event *sig = evsignal_new(w.base, SIGTERM, s_on_term, &w);
    evsignal_add(sig, NULL);
    sluice_fleet_timed_worker_t wc = { .handler = s_handle, .user = &w, .poll_ns = P.poll_ns, .batch = CLAIM_BATCH };
    if (sluice_fleet_timed_start(w.t, &wc) != 0) _exit(3);
    event_base_dispatch(w.base);
    sluice_fleet_timed_stats_t st;
    if (sluice_fleet_timed_stats(w.t, &st) == 0) {
        w.head.claims = st.claims;
        w.head.failures += st.failures;
    }
    w.head.last_ns = real_ns();
    write_file("work", id, &w.head, &w.rec);
    event_free(sig);
    sluice_fleet_timed_free(w.t);
    event_base_free(w.base);
    _exit(0);
}

/* ---- redis-delayed-job */

/* The keys: the dedup hash (key -> its current job id), the delayed ZSET
 * (job id -> due time, µs of Redis's TIME), the payloads (job id -> value),
 * the active ZSET (job id -> lease end, µs). One hash tag: one slot. */
#define K_CUR "{fd}:cur"
#define K_DELAYED "{fd}:delayed"
#define K_DATA "{fd}:data"
#define K_ACTIVE "{fd}:active"

/* Upsert with a dedup key, debounce mode with extend and replace. KEYS: cur,
 * delayed, data; ARGV: key, value, interval (µs). Returns {replaced, now µs}. */
static const char upsert_lua[] = "local t = redis.call('TIME')\n"
                                 "local now = tonumber(t[1]) * 1000000 + tonumber(t[2])\n"
                                 "local due = string.format('%.0f', now + tonumber(ARGV[3]))\n"
                                 "local jid = redis.call('HGET', KEYS[1], ARGV[1])\n"
                                 "if jid then\n"
                                 "  local s = redis.call('ZSCORE', KEYS[2], jid)\n"
                                 "  if s and tonumber(s) > now then\n"
                                 "    redis.call('ZADD', KEYS[2], due, jid)\n"
                                 "    redis.call('HSET', KEYS[3], jid, ARGV[2])\n"
                                 "    return {1, now}\n"
                                 "  end\n"
                                 "end\n"
                                 "jid = ARGV[1] .. ':' .. t[1] .. '.' .. t[2]\n"
                                 "redis.call('HSET', KEYS[1], ARGV[1], jid)\n"
                                 "redis.call('HSET', KEYS[3], jid, ARGV[2])\n"
                                 "redis.call('ZADD', KEYS[2], due, jid)\n"
                                 "return {0, now}\n";

/* Moves up to ARGV[1] jobs to active with a lease of ARGV[2] µs: first the
 * ones whose lease ended, then the due ones, earliest first. KEYS: delayed,
 * active, data. Returns {earliest due left (µs, "0" for none), then per job:
 * id, due (µs, "0" for a lease that ended), value}. */
static const char claim_lua[] =
    "local t = redis.call('TIME')\n"
    "local now = string.format('%.0f', tonumber(t[1]) * 1000000 + tonumber(t[2]))\n"
    "local max = tonumber(ARGV[1])\n"
    "local lease_end = string.format('%.0f', tonumber(now) + tonumber(ARGV[2]))\n"
    "local out = {'0'}\n"
    "local ids, dues = {}, {}\n"
    "local exp = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', now, 'LIMIT', 0, max)\n"
    "for i = 1, #exp do ids[#ids + 1] = exp[i]; dues[#dues + 1] = '0' end\n"
    "if #ids < max then\n"
    "  local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'WITHSCORES', 'LIMIT', 0, max - #ids)\n"
    "  if #due > 0 then\n"
    "    local rem = {}\n"
    "    for i = 1, #due, 2 do\n"
    "      rem[#rem + 1] = due[i]; ids[#ids + 1] = due[i]; dues[#dues + 1] = due[i + 1]\n"
    "    end\n"
    "    redis.call('ZREM', KEYS[1], unpack(rem))\n"
    "  end\n"
    "end\n"
    "if #ids > 0 then\n"
    "  local z = {}\n"
    "  for i = 1, #ids do z[#z + 1] = lease_end; z[#z + 1] = ids[i] end\n"
    "  redis.call('ZADD', KEYS[2], unpack(z))\n"
    "  local vals = redis.call('HMGET', KEYS[3], unpack(ids))\n"
    "  for i = 1, #ids do\n"
    "    out[#out + 1] = ids[i]; out[#out + 1] = dues[i]; out[#out + 1] = vals[i] or ''\n"
    "  end\n"
    "end\n"
    "local nxt = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')\n"
    "if #nxt > 0 then out[1] = nxt[2] end\n"
    "return out\n";

/* Acknowledges jobs (ARGV: their ids): off active, payload deleted, the
 * dedup entry deleted when it still names the job. KEYS: active, data, cur.
 * Returns how many were held. */
static const char ack_lua[] =
    "local n = 0\n"
    "for i = 1, #ARGV do\n"
    "  local jid = ARGV[i]\n"
    "  if redis.call('ZREM', KEYS[1], jid) == 1 then\n"
    "    n = n + 1\n"
    "    redis.call('HDEL', KEYS[2], jid)\n"
    "    local key = string.match(jid, '^(.*):')\n"
    "    if redis.call('HGET', KEYS[3], key) == jid then redis.call('HDEL', KEYS[3], key) end\n"
    "  end\n"
    "end\n"
    "return n\n";

static redisContext *connect_redis(void) {
    redisContext *c = redisConnect("127.0.0.1", g_port);
    if (!c || c->err) _exit(5);
    struct timeval tv = { 5, 0 };
    redisSetTimeout(c, tv);
    return c;
}

typedef struct bsub_thread {
    unsigned id;
    _Atomic uint64_t *next;
    file_head_t head;
    recbuf_t rec;
} bsub_thread_t;

static void *b_submit_main(void *arg) {
    bsub_thread_t *b = arg;
    redisContext *c = connect_redis();
    char iv[32];
    snprintf(iv, sizeof iv, "%llu", (unsigned long long)(P.interval_ns / 1000));
    sleep_until(g_t_start);
    while (real_ns() < g_t_end) {
        uint64_t j = atomic_fetch_add(b->next, 1);
        uint32_t key = key_for(b->id, j);
        uint64_t vid = vid_of(b->id, j);
        char text[16];
        int n = snprintf(text, sizeof text, "k%u", key);
        const char *argv[] = { "EVALSHA", g_sha_upsert, "3", K_CUR, K_DELAYED, K_DATA, text, (const char *)&vid, iv };
        size_t lens[9];
        for (int i = 0; i < 9; i++) lens[i] = strlen(argv[i]);
        lens[6] = (size_t)n;
        lens[7] = sizeof vid;
        redisReply *r = redisCommandArgv(c, 9, argv, lens);
        if (r && r->type == REDIS_REPLY_ARRAY && r->elements == 2 && r->element[1]->type == REDIS_REPLY_INTEGER) {
            call_rec_t *x = rec_push(&b->rec);
            x->key = key;
            x->pad = 0;
            x->vid = vid;
            x->now = (uint64_t)r->element[1]->integer * 1000;
            b->head.calls++;
        } else {
            b->head.failures++;
        }
        if (r) freeReplyObject(r);
        if (!r) break;
    }
    redisFree(c);
    return NULL;
}

static void run_delayed_submitter(unsigned id) {
    child_setup();
    int n = P.in_flight > 0 ? P.in_flight : 4;
    if (n > MAX_THREADS) n = MAX_THREADS;
    bsub_thread_t th[MAX_THREADS];
    pthread_t tid[MAX_THREADS];
    for (int i = 0; i < n; i++) {
        memset(&th[i], 0, sizeof th[i]);
        th[i].id = id;
        th[i].next = g_next;
        th[i].rec.size = sizeof(call_rec_t);
        pthread_create(&tid[i], NULL, b_submit_main, &th[i]);
    }
    file_head_t head;
    memset(&head, 0, sizeof head);
    recbuf_t all = { NULL, 0, 0, sizeof(call_rec_t) };
    for (int i = 0; i < n; i++) {
        pthread_join(tid[i], NULL);
        head.calls += th[i].head.calls;
        head.failures += th[i].head.failures;
        for (size_t k = 0; k < th[i].rec.n; k++)
            memcpy(rec_push(&all), th[i].rec.v + k * sizeof(call_rec_t), sizeof(call_rec_t));
    }
    head.last_ns = real_ns();
    write_file("submit", id, &head, &all);
    _exit(0);
}

static volatile sig_atomic_t g_stop;

static void on_sigterm(int sig) {
    (void)sig;
    g_stop = 1;
}

static void run_delayed_worker(unsigned id) {
    child_setup();
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_sigterm; /* no SA_RESTART: a sleep ends at once */
    sigaction(SIGTERM, &sa, NULL);
    redisContext *c = connect_redis();
    file_head_t head;
    memset(&head, 0, sizeof head);
    recbuf_t rec = { NULL, 0, 0, sizeof(emit_rec_t) };
    char max_s[16], lease_s[32];
    snprintf(max_s, sizeof max_s, "%d", CLAIM_BATCH);
    snprintf(lease_s, sizeof lease_s, "%llu", (unsigned long long)(LEASE_NS / 1000));
    const char *claim_argv[] = { "EVALSHA", g_sha_claim, "3", K_DELAYED, K_ACTIVE, K_DATA, max_s, lease_s };
    /* the acknowledgements of the last batch: sent with the next claim */
    enum { ACK_FIXED = 6 };
    const char *ack_argv[ACK_FIXED + CLAIM_BATCH];
    size_t ack_lens[ACK_FIXED + CLAIM_BATCH];
    char jids[CLAIM_BATCH][64];
    size_t nack = 0;
    ack_argv[0] = "EVALSHA";
    ack_argv[1] = g_sha_ack;
    ack_argv[2] = "3";
    ack_argv[3] = K_ACTIVE;
    ack_argv[4] = K_DATA;
    ack_argv[5] = K_CUR;
    for (int i = 0; i < ACK_FIXED; i++) ack_lens[i] = strlen(ack_argv[i]);
    for (;;) {
        bool stopping = g_stop;
        if (nack) {
            for (size_t i = 0; i < nack; i++) {
                ack_argv[ACK_FIXED + i] = jids[i];
                ack_lens[ACK_FIXED + i] = strlen(jids[i]);
            }
            redisAppendCommandArgv(c, (int)(ACK_FIXED + nack), ack_argv, ack_lens);
        }
        if (!stopping) redisAppendCommandArgv(c, 8, claim_argv, NULL);
        if (nack) {
            redisReply *r = NULL;
            if (redisGetReply(c, (void **)&r) != REDIS_OK || !r) _exit(6);
            if (r->type != REDIS_REPLY_INTEGER || (size_t)r->integer != nack) head.failures++;
            freeReplyObject(r);
            nack = 0;
        }
        if (stopping) break;
        redisReply *r = NULL;
        if (redisGetReply(c, (void **)&r) != REDIS_OK || !r) _exit(6);
        head.claims++;
        uint64_t next_due = 0;
        size_t got = 0;
        if (r->type == REDIS_REPLY_ARRAY && r->elements >= 1 && (r->elements - 1) % 3 == 0) {
            next_due = strtoull(r->element[0]->str, NULL, 10) * 1000;
            uint64_t now = real_ns();
            for (size_t i = 1; i + 3 <= r->elements; i += 3) {
                const redisReply *jid = r->element[i], *due = r->element[i + 1], *val = r->element[i + 2];
                emit_rec_t *e = rec_push(&rec);
                const char *colon = memrchr(jid->str, ':', jid->len);
                e->key = colon ? parse_key(jid->str, (size_t)(colon - jid->str)) : UINT32_MAX;
                e->pad = 0;
                e->vid = 0;
                if (val->type == REDIS_REPLY_STRING && val->len == sizeof e->vid)
                    memcpy(&e->vid, val->str, sizeof e->vid);
                e->at = strtoull(due->str, NULL, 10) * 1000;
                e->handled = now;
                snprintf(jids[nack], sizeof jids[nack], "%.*s", (int)jid->len, jid->str);
                nack++;
                got++;
            }
        } else {
            head.failures++;
        }
        freeReplyObject(r);
        if (got > 0) continue; /* acknowledge them with the next claim, at once */
        uint64_t now = real_ns(), until = now + P.poll_ns;
        if (next_due && next_due < until) until = next_due;
        if (until > now && !g_stop) sleep_until(until);
    }
    head.last_ns = real_ns();
    redisFree(c);
    write_file("work", id, &head, &rec);
    _exit(0);
}

/* ---- the run */

static pid_t spawn(void (*fn)(unsigned), unsigned id) {
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) fn(id);
    return pid;
}

static int load_script(redisContext *c, const char *src, char *sha) {
    redisReply *r = redisCommand(c, "SCRIPT LOAD %s", src);
    int rc = r && r->type == REDIS_REPLY_STRING ? 0 : -1;
    if (rc == 0) snprintf(sha, 48, "%s", r->str);
    if (r) freeReplyObject(r);
    return rc;
}

static int cmp_call(const void *a, const void *b) {
    const call_rec_t *x = a, *y = b;
    if (x->key != y->key) return x->key < y->key ? -1 : 1;
    if (x->now != y->now) return x->now < y->now ? -1 : 1;
    return x->vid < y->vid ? -1 : x->vid > y->vid;
}

static int cmp_u64(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* Waits for a child, at most `ms`; kills it (SIGKILL) after that. @return its status, or -1. */
static int reap(pid_t pid, int ms) {
    int st = 0;
    for (int i = 0; i < ms; i++) {
        pid_t w = waitpid(pid, &st, WNOHANG);
        if (w == pid) return st;
        usleep(1000);
    }
    kill(pid, SIGKILL);
    waitpid(pid, &st, 0);
    return -1;
}

int cb_fleet_debounce(const cb_fleet_debounce_params_t *p, cb_fleet_debounce_result_t *r) {
    memset(r, 0, sizeof *r);
    P = *p;
    if (P.keys <= 0) P.keys = 100000;
    if (P.window <= 0) P.window = 250;
    if (P.per_window <= 0) P.per_window = 4000;
    if (P.seconds <= 0) P.seconds = 3;
    if (!P.interval_ns) P.interval_ns = 50 * MS;
    if (!P.poll_ns) P.poll_ns = 10 * MS;
    if (P.partitions <= 0) P.partitions = 1;
    /* overrides, for tuning by hand (CB_FD_IN_FLIGHT=32 ...) */
    const char *e;
    if ((e = getenv("CB_FD_IN_FLIGHT"))) P.in_flight = atoi(e);
    if ((e = getenv("CB_FD_PARTITIONS"))) P.partitions = atoi(e);
    if ((e = getenv("CB_FD_WINDOW"))) P.window = atoi(e);
    if ((e = getenv("CB_FD_PER_WINDOW"))) P.per_window = atoi(e);
    if ((e = getenv("CB_FD_POLL_MS"))) P.poll_ns = (uint64_t)atoi(e) * MS;
    if (!g_next) {
        void *m = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
        if (m == MAP_FAILED) {
            snprintf(r->note, sizeof r->note, "mmap failed");
            return -1;
        }
        g_next = m;
    }
    atomic_store(g_next, 0);
    snprintf(g_dir, sizeof g_dir, "/tmp/sluice-bench-fd-XXXXXX");
    if (!mkdtemp(g_dir)) {
        snprintf(r->note, sizeof r->note, "cannot make a folder in /tmp");
        return -1;
    }
    g_port = cb_redis_free_port();
    int redis = g_port > 0 ? cb_redis_start(g_port) : -1;
    if (redis < 0) {
        snprintf(r->note, sizeof r->note, "cannot start redis-server (is it installed?)");
        return -1;
    }
    int rc = 0;
    if (P.impl == 1) {
        redisContext *c = redisConnect("127.0.0.1", g_port);
        if (!c || c->err || load_script(c, upsert_lua, g_sha_upsert) != 0 ||
            load_script(c, claim_lua, g_sha_claim) != 0 || load_script(c, ack_lua, g_sha_ack) != 0) {
            snprintf(r->note, sizeof r->note, "SCRIPT LOAD failed");
            rc = -1;
        }
        if (c) redisFree(c);
    }
    pid_t workers[WORKERS] = { 0 }, subs[SUBMITTERS] = { 0 };
    uint64_t cpu0 = 0, cpu1 = 0;
    if (rc == 0) {
        for (unsigned i = 0; i < WORKERS; i++)
            workers[i] = spawn(P.impl == 0 ? run_sluice_worker : run_delayed_worker, i);
        g_t_start = real_ns() + 700 * MS; /* every child connected by then */
        g_t_end = g_t_start + (uint64_t)(P.seconds * 1e9);
        for (unsigned i = 0; i < SUBMITTERS; i++)
            subs[i] = spawn(P.impl == 0 ? run_sluice_submitter : run_delayed_submitter, i);
        sleep_until(g_t_start);
        cpu0 = cb_redis_cpu_ns(g_port);
        for (unsigned i = 0; i < SUBMITTERS; i++) {
            int st = reap(subs[i], (int)(P.seconds * 1000) + 30000);
            if (st != 0 && rc == 0) {
                snprintf(r->note, sizeof r->note, "a submitter failed (status %d)", st);
                rc = -1;
            }
        }
        /* the last deadlines: an interval after the last call, then a claim */
        usleep((useconds_t)((P.interval_ns + P.poll_ns) / 1000 + 500000));
        cpu1 = cb_redis_cpu_ns(g_port);
        if (getenv("CB_FD_DEBUG")) { /* the server's command statistics, to stderr */
            redisContext *c = redisConnect("127.0.0.1", g_port);
            redisReply *x = c && !c->err ? redisCommand(c, "INFO commandstats") : NULL;
            if (x && x->type == REDIS_REPLY_STRING) fprintf(stderr, "%s\n", x->str);
            if (x) freeReplyObject(x);
            if (c) redisFree(c);
        }
        for (unsigned i = 0; i < WORKERS; i++) kill(workers[i], SIGTERM);
        for (unsigned i = 0; i < WORKERS; i++) {
            int st = reap(workers[i], 5000);
            if (st != 0 && rc == 0) {
                snprintf(r->note, sizeof r->note, "a worker failed (status %d)", st);
                rc = -1;
            }
        }
    }
    cb_redis_stop(redis);
    /* the records */
    call_rec_t *calls = NULL;
    emit_rec_t *emits = NULL;
    size_t ncalls = 0, nemits = 0;
    uint64_t last_ns = g_t_end;
    for (unsigned i = 0; rc == 0 && i < SUBMITTERS; i++) {
        file_head_t h;
        call_rec_t *v = read_file("submit", i, &h, sizeof *v);
        if (!v) {
            snprintf(r->note, sizeof r->note, "a submitter's records are missing");
            rc = -1;
            break;
        }
        calls = realloc(calls, (ncalls + h.n + 1) * sizeof *calls);
        memcpy(calls + ncalls, v, h.n * sizeof *v);
        ncalls += h.n;
        free(v);
        r->failures += h.failures;
        if (h.last_ns > last_ns) last_ns = h.last_ns;
    }
    for (unsigned i = 0; rc == 0 && i < WORKERS; i++) {
        file_head_t h;
        emit_rec_t *v = read_file("work", i, &h, sizeof *v);
        if (!v) {
            snprintf(r->note, sizeof r->note, "a worker's records are missing");
            rc = -1;
            break;
        }
        emits = realloc(emits, (nemits + h.n + 1) * sizeof *emits);
        memcpy(emits + nemits, v, h.n * sizeof *v);
        nemits += h.n;
        free(v);
        r->failures += h.failures;
        r->claims += h.claims;
    }
    char rm[96];
    snprintf(rm, sizeof rm, "rm -rf '%s'", g_dir);
    if (system(rm) != 0) { /* a leftover folder in /tmp: harmless */
    }
    if (rc != 0) {
        free(calls);
        free(emits);
        return rc;
    }
    r->calls = ncalls;
    r->emissions = nemits;
    r->calls_per_s = last_ns > g_t_start ? (double)ncalls * 1e9 / (double)(last_ns - g_t_start) : 0;
    if (cpu0 && cpu1 > cpu0) {
        if (ncalls) r->redis_cpu_ns_per_call = (double)(cpu1 - cpu0) / (double)ncalls;
        if (nemits) r->redis_cpu_ns_per_emission = (double)(cpu1 - cpu0) / (double)nemits;
    }
    /* expected emissions: a call whose key is not called again within the
     * interval (Redis time) */
    qsort(calls, ncalls, sizeof *calls, cmp_call);
    uint64_t *want = malloc((ncalls + 1) * sizeof *want), *got = malloc((nemits + 1) * sizeof *got);
    size_t nwant = 0;
    for (size_t i = 0; i < ncalls; i++) {
        if (i == 0 || calls[i].key != calls[i - 1].key) r->keys_called++;
        bool last = i + 1 == ncalls || calls[i + 1].key != calls[i].key;
        if (last || calls[i + 1].now >= calls[i].now + P.interval_ns) want[nwant++] = calls[i].vid;
    }
    r->expected = nwant;
    uint64_t *late = malloc((nemits + 1) * sizeof *late);
    size_t nlate = 0, early = 0;
    for (size_t i = 0; i < nemits; i++) {
        got[i] = emits[i].vid;
        if (emits[i].at <= g_t_end) {
            if (emits[i].handled < emits[i].at) early++;
            late[nlate++] = emits[i].handled > emits[i].at ? emits[i].handled - emits[i].at : 0;
        }
    }
    qsort(want, nwant, sizeof *want, cmp_u64);
    qsort(got, nemits, sizeof *got, cmp_u64);
    size_t a = 0, b = 0;
    while (a < nwant || b < nemits) {
        if (b < nemits && b > 0 && got[b] == got[b - 1]) { /* delivered twice */
            r->unexpected++;
            b++;
        } else if (a < nwant && (b == nemits || want[a] < got[b])) {
            r->missing++;
            a++;
        } else if (a == nwant || got[b] < want[a]) {
            r->unexpected++;
            b++;
        } else {
            a++;
            b++;
        }
    }
    qsort(late, nlate, sizeof *late, cmp_u64);
    r->late_samples = nlate;
    if (nlate) {
        r->p50_us = (double)late[nlate / 2] / 1000;
        r->p99_us = (double)late[nlate * 99 / 100] / 1000;
        r->max_us = (double)late[nlate - 1] / 1000;
    }
    if (early) snprintf(r->note, sizeof r->note, "%zu emissions handled before their deadline", early);
    free(want);
    free(got);
    free(late);
    free(calls);
    free(emits);
    return 0;
}
