/*
 * timed.c — the fleet's throttle, audit and debounce (sluice_fleet_timed.h).
 *
 * Every operation is one run of the script (timed_script.c, whose header is
 * the protocol: FCALL where its function library is loaded, else EVALSHA;
 * redis-script.h) on the connection of its partition: the one connection of
 * a single node or of a Sentinel-discovered primary, or, under Redis Cluster,
 * the connection of the node serving the partition's slot. An operation keeps
 * its command, so that it can be sent again: with EVAL after NOSCRIPT, to the
 * node a MOVED or ASK names. Operations wait in one list; a periodic tick
 * answers those past their timeout and those that could not be sent, so no
 * callback runs inside the submitting call.
 *
 * Threads: everything runs on the loop thread. An operation made on
 * another thread (a limiter on a sluice_loop_t) is built there, then queued
 * in the inbox under the mutex; the wake event sends it from the loop
 * thread. The worker's start and stop travel the same way (as functions to
 * run), so the worker's state is the loop thread's alone.
 */
#ifndef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L
#endif

#include <event2/event.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cluster-slot.h"
#include "redis-url.h"
#include "loop-wait.h"
#include "timed-internal.h"
#include "topology.h"

#define MS 1000000ull
#define MAX_REDIRECTS 5
#define CLAIM_MAX 1024
#define CLOSE_BATCH "256"

struct op {
    struct sluice_fleet_timed *t;
    struct op *prev, *next; /* in t->ops; `next` chains the inbox before that */
    /* not an operation: a function to run on the loop thread (sluice__timed_on_loop) */
    void (*run)(struct sluice_fleet_timed *t, void *arg);
    void *run_arg;
    sluice_fleet_timed_op_t kind;
    sluice_fleet_timed_fn fn;
    void *user;
    uint32_t partition;
    uint64_t now; /* manual time */
    uint64_t deadline;
    int fail;      /* not sent: answer with this from the tick */
    bool answered; /* its callback ran (timed out): a late reply is only freed */
    bool in_redis; /* a reply or NULL is still to come from a connection */
    bool evalled;  /* sent with EVAL after NOSCRIPT */
    bool fcalled;  /* sent with FCALL */
    unsigned redirects;
    sluice__conn_t *conn;
    uint64_t gen; /* ack, release: the delivery's */
    uint32_t attempt;
    bool linked;  /* in t->ops */
    bool counted; /* a key operation or batch sent from its partition's queue: one of `out` */
    /* a batch of calls: the calls it carries (answered by it), and its
     * own command (`xargv`, `xlens`, `xbuf`) */
    struct op **members;
    size_t nmembers;
    const char **xargv;
    size_t *xlens;
    /* the command: argv[0] "EVALSHA" or "EVAL", argv[1] the SHA or the script */
    int argc;
    const char *argv[12];
    size_t lens[12];
    char *buf; /* the copies argv points into */
};

/* A partition's key operations waiting to be sent, in order: at most
 * BATCHES_OUT are out at once per partition; the calls that wait behind
 * them go as one batch (at most BATCH_MAX calls) when one comes back.
 * Its acknowledgements wait in a queue of their own (t->queues[partitions +
 * p]): at most ACKS_OUT out, those waiting behind go as one batch, so a
 * worker's acknowledgements of a claim's deliveries cost a run or two. */
struct sluice__timed_queue {
    struct op *head, *tail;
    unsigned out;
};

#define BATCHES_OUT 1
#define ACKS_OUT 1
#define BATCH_MAX 64

static uint64_t mono_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* ------------------------------------------------------------------ keys */

static int check_key(sluice_key_t key) {
    if (key.kind == SLUICE_KEY_U64) return 0;
    if (key.kind != SLUICE_KEY_BYTES) return SLUICE_EINVAL;
    if (key.len > SLUICE_KEY_MAX) return SLUICE_EKEYLEN;
    if (key.len > 0 && !key.bytes) return SLUICE_EINVAL;
    return 0;
}

uint32_t sluice_fleet_timed_partitions(const sluice_fleet_timed_t *t) { return t ? t->partitions : 0; }

/* The partition of a key's member (sluice__timed_member()). */
static uint32_t partition_of(const struct sluice_fleet_timed *t, const char *m, size_t n) {
    return (uint32_t)(sluice__cluster_crc16(m, n) % t->partitions);
}

uint32_t sluice_fleet_timed_partition_of(const sluice_fleet_timed_t *t, sluice_key_t key) {
    if (!t || check_key(key) != 0) return 0;
    char m[SLUICE_KEY_MAX + 1];
    return partition_of(t, m, sluice__timed_member(key, m));
}

/* ------------------------------------------------------------------ answers */

static void op_unlink(struct op *o) {
    struct sluice_fleet_timed *t = o->t;
    if (!o->linked) return;
    o->linked = false;
    if (o->prev)
        o->prev->next = o->next;
    else
        t->ops = o->next;
    if (o->next) o->next->prev = o->prev;
    o->prev = o->next = NULL;
}

static void op_free(struct op *o) {
    op_unlink(o);
    free(o->members);
    free(o->xargv);
    free(o->xlens);
    free(o->buf);
    free(o);
}

static void op_link(struct op *o) {
    struct sluice_fleet_timed *t = o->t;
    o->prev = NULL;
    o->next = t->ops;
    if (t->ops) t->ops->prev = o;
    t->ops = o;
    o->linked = true;
}

/* Answers the operation with `res` (or only a status) and frees it unless a
 * reply is still to come. */
static void answer_status(struct op *o, int status);

static void answer(struct op *o, sluice_fleet_timed_result_t *res) {
    res->op = o->kind;
    struct sluice_fleet_timed *t = o->t;
    if (o->members) { /* a batch: each call its own answer (those read already were given theirs) */
        for (size_t i = 0; i < o->nmembers; i++)
            if (o->members[i]) answer_status(o->members[i], res->status ? res->status : SLUICE_EPROTO);
        o->nmembers = 0;
        o->answered = true;
        if (!o->in_redis) op_free(o);
        return;
    }
    if (res->status != 0 && res->status != SLUICE_ELEASE && res->status != SLUICE_ECLOSED)
        SLUICE__TIMED_STAT_ADD(t, failures, 1);
    if (o->kind == SLUICE_FLEET_TIMED_ACK && res->status == 0 && res->had) SLUICE__TIMED_STAT_ADD(t, acked, 1);
    if (o->kind == SLUICE_FLEET_TIMED_ACK && res->status == SLUICE_ELEASE) SLUICE__TIMED_STAT_ADD(t, ack_refused, 1);
    if (o->kind == SLUICE_FLEET_TIMED_CALL && res->status == 0 && res->decision.kind == SLUICE_SCHEDULED && t->worker)
        sluice__timed_worker_hint(t, o->partition, res->decision.at, res->decision.now);
    if (!o->fn) { /* an acknowledgement nobody waits for */
        o->answered = true;
        if (!o->in_redis) op_free(o);
        return;
    }
    o->answered = true;
    o->fn(o->user, res);
    if (!o->in_redis) op_free(o);
}

static void answer_status(struct op *o, int status) {
    sluice_fleet_timed_result_t res;
    memset(&res, 0, sizeof res);
    res.status = status;
    answer(o, &res);
}

static void queue_done(struct op *o);
static void queue_timeouts(struct sluice_fleet_timed *t, uint64_t now);

/* The tick: operations that could not be sent, and those past their timeout.
 * A connection that has left a command unanswered for ten timeouts (at
 * least 1 s) is stalled: it is dropped, so that it reconnects and what it
 * holds is released. */
static void on_tick(evutil_socket_t fd, short what, void *arg) {
    (void)fd;
    (void)what;
    struct sluice_fleet_timed *t = arg;
    uint64_t now = mono_ns();
    uint64_t stall = t->timeout_ns * 10 > 1000 * MS ? t->timeout_ns * 10 : 1000 * MS;
    sluice__conn_t *stalled = NULL;
    queue_timeouts(t, now);
    struct op *o = t->ops;
    while (o) {
        struct op *next = o->next;
        if (!o->answered && o->fail) {
            queue_done(o); /* (it was never out) */
            answer_status(o, o->fail);
        } else if (!o->answered && now >= o->deadline) {
            answer_status(o, SLUICE_ETIMEDOUT);
        } else if (o->in_redis && o->conn && now >= o->deadline - t->timeout_ns + stall) {
            stalled = o->conn; /* (answered already: its deadline passed) */
        }
        o = next;
    }
    if (stalled) sluice__conn_drop(stalled, SLUICE_ETIMEDOUT);
}

/* ------------------------------------------------------------------ sending */

static void on_reply(void *arg, redisReply *rep, int err);

/* The reply to ASKING: nothing to do (the command after it gets its own). */
static void on_asking(void *arg, redisReply *rep, int err) {
    (void)arg;
    (void)rep;
    (void)err;
}

/* Sends the operation's command to `c` (after ASKING when `asking`), or marks
 * it to fail from the tick. */
static void send_on(struct op *o, sluice__conn_t *c, bool asking) {
    o->conn = c;
    int rc = SLUICE_ENOTCONN;
    if (c && asking) {
        static const char *const ask[1] = { "ASKING" };
        static const size_t ask_len[1] = { 6 };
        (void)sluice__conn_send(c, 1, ask, ask_len, on_asking, NULL);
    }
    if (c) {
        const char **av = o->xargv ? o->xargv : o->argv;
        size_t *al = o->xlens ? o->xlens : o->lens;
        o->fcalled = sluice__script_head(&o->t->script, c, o->evalled, av, al);
        rc = sluice__conn_send(c, o->argc, av, al, on_reply, o);
    }
    if (rc == 0) {
        o->in_redis = true;
        return;
    }
    o->fail = rc;
    event_active(o->t->tick, EV_TIMEOUT, 0);
}

static void send_op(struct op *o) {
    struct sluice_fleet_timed *t = o->t;
    SLUICE__TIMED_STAT_ADD(t, runs, 1);
    sluice__conn_t *c = t->cluster ? sluice__cluster_route(t->cluster, t->pslot[o->partition]) : t->conn;
    send_on(o, c, false);
}

/* Builds an operation: EVALSHA sha (or FCALL name) nkeys P [P:s] op now policy lease keep
 * extra... with `extra` copied. */
static struct op *op_new(struct sluice_fleet_timed *t, sluice_fleet_timed_op_t kind, uint32_t partition,
                         const char *opcode, uint64_t now, bool states, int nextra, const char *const *extra,
                         const size_t *extra_len, sluice_fleet_timed_fn fn, void *user) {
    size_t need = 24 + (states ? t->pname_len[partition] + 2 : 0);
    for (int i = 0; i < nextra; i++) need += extra_len[i];
    struct op *o = calloc(1, sizeof *o);
    char *buf = malloc(need ? need : 1);
    if (!o || !buf) {
        free(o);
        free(buf);
        return NULL;
    }
    o->t = t;
    o->kind = kind;
    o->fn = fn;
    o->user = user;
    o->partition = partition;
    o->now = now;
    o->buf = buf;
    o->deadline = mono_ns() + t->timeout_ns;
    int k = 0;
    k += 2; /* FCALL, EVALSHA or EVAL: set when sent (send_on) */
    o->argv[k] = states ? "2" : "1", o->lens[k++] = 1;
    o->argv[k] = t->pname[partition], o->lens[k++] = t->pname_len[partition];
    char *p = buf;
    if (states) { /* a key operation declares the hash of the partition's key states */
        memcpy(p, t->pname[partition], t->pname_len[partition]);
        memcpy(p + t->pname_len[partition], ":s", 2);
        o->argv[k] = p, o->lens[k++] = t->pname_len[partition] + 2;
        p += o->lens[k - 1];
    }
    o->argv[k] = opcode, o->lens[k++] = 1;
    if (t->manual) {
        int n = snprintf(p, 24, "%llu", (unsigned long long)now);
        o->argv[k] = p, o->lens[k++] = (size_t)n;
        p += n;
    } else {
        o->argv[k] = "", o->lens[k++] = 0;
    }
    o->argv[k] = t->policy, o->lens[k++] = strlen(t->policy);
    o->argv[k] = t->lease, o->lens[k++] = strlen(t->lease);
    o->argv[k] = t->keep, o->lens[k++] = strlen(t->keep);
    for (int i = 0; i < nextra; i++) {
        if (extra_len[i]) memcpy(p, extra[i], extra_len[i]);
        o->argv[k] = p, o->lens[k++] = extra_len[i];
        p += extra_len[i];
    }
    o->argc = k;
    return o;
}

/* ------------------------------------------------------------------ queues */

/* The queue an operation or batch sent from one waits in. */
static struct sluice__timed_queue *queue_of(struct sluice_fleet_timed *t, const struct op *o) {
    return &t->queues[o->kind == SLUICE_FLEET_TIMED_ACK ? t->partitions + o->partition : o->partition];
}

static void queue_push(struct sluice__timed_queue *q, struct op *o) {
    o->next = NULL;
    if (q->tail)
        q->tail->next = o;
    else
        q->head = o;
    q->tail = o;
}

static bool is_key_op(const struct op *o) {
    return !o->run && (o->kind == SLUICE_FLEET_TIMED_CALL || o->kind == SLUICE_FLEET_TIMED_FLUSH ||
                       o->kind == SLUICE_FLEET_TIMED_CANCEL || o->kind == SLUICE_FLEET_TIMED_PENDING);
}

/* A batch of the `n` calls at the head of the queue (manual time: of one
 * instant), or of `n` acknowledgements; or NULL (no memory: they stay
 * queued). Its command: EVALSHA sha (or FCALL name) 2 P P:s B now policy lease keep n
 * (key value)..., or EVALSHA sha 1 P K now policy lease keep n
 * (gen attempt)...: the members' head, then their last two arguments. */
static struct op *make_batch(struct sluice_fleet_timed *t, uint32_t p, struct op *const *calls, size_t n) {
    struct op *b = calloc(1, sizeof *b);
    const struct op *first = calls[0];
    int head = first->kind == SLUICE_FLEET_TIMED_ACK ? first->argc - 3 : first->argc - 2;
    size_t argc = (size_t)head + 1 + 2 * n;
    if (b) {
        b->members = malloc(n * sizeof *b->members);
        b->xargv = malloc(argc * sizeof *b->xargv);
        b->xlens = malloc(argc * sizeof *b->xlens);
        b->buf = malloc(24);
    }
    if (!b || !b->members || !b->xargv || !b->xlens || !b->buf) {
        if (b) {
            free(b->members);
            free(b->xargv);
            free(b->xlens);
            free(b->buf);
        }
        free(b);
        return NULL;
    }
    b->t = t;
    b->kind = first->kind;
    b->partition = p;
    b->nmembers = n;
    b->deadline = UINT64_MAX;
    size_t k = 0;
    for (int i = 0; i < head; i++) b->xargv[k] = first->argv[i], b->xlens[k++] = first->lens[i];
    b->xargv[k] = b->buf, b->xlens[k++] = (size_t)snprintf(b->buf, 24, "%zu", n);
    for (size_t i = 0; i < n; i++) {
        struct op *c = calls[i];
        b->members[i] = c;
        if (c->deadline < b->deadline) b->deadline = c->deadline;
        /* the key's member and value, or the generation and attempt */
        b->xargv[k] = c->argv[c->argc - 2], b->xlens[k++] = c->lens[c->argc - 2];
        b->xargv[k] = c->argv[c->argc - 1], b->xlens[k++] = c->lens[c->argc - 1];
    }
    b->argc = (int)k;
    return b;
}

/* Sends the `n` operations at the head of queue `q` as one batch, taking
 * them off the queue. @return false when there was no memory (they stay). */
static bool send_batch(struct sluice_fleet_timed *t, struct sluice__timed_queue *q, uint32_t p,
                       struct op *const *members, size_t n) {
    struct op *b = make_batch(t, p, members, n);
    if (!b) return false;
    q->head = members[n - 1]->next;
    if (!q->head) q->tail = NULL;
    for (size_t i = 0; i < n; i++) members[i]->next = NULL;
    op_link(b);
    b->counted = true;
    q->out++;
    send_op(b);
    return true;
}

/* Sends what the partition's queue allows: its head, a flush, cancel or
 * pending alone, or the calls at its head as one batch, while fewer than
 * BATCHES_OUT are out. */
static void queue_flush(struct sluice_fleet_timed *t, uint32_t p) {
    struct sluice__timed_queue *q = &t->queues[p];
    while (q->head && q->out < BATCHES_OUT) {
        struct op *o = q->head;
        if (o->kind != SLUICE_FLEET_TIMED_CALL) {
            q->head = o->next;
            if (!q->head) q->tail = NULL;
            op_link(o);
            o->counted = true;
            q->out++;
            send_op(o);
            continue;
        }
        struct op *calls[BATCH_MAX];
        size_t n = 0;
        for (struct op *c = o; c && n < BATCH_MAX && c->kind == SLUICE_FLEET_TIMED_CALL && c->now == o->now;
             c = c->next)
            calls[n++] = c;
        if (!send_batch(t, q, p, calls, n)) return; /* no memory now: the calls wait (their timeouts still apply) */
    }
}

/* Sends the partition's waiting acknowledgements, as one batch, while
 * fewer than ACKS_OUT are out. */
static void ack_flush(struct sluice_fleet_timed *t, uint32_t p) {
    struct sluice__timed_queue *q = &t->queues[t->partitions + p];
    while (q->head && q->out < ACKS_OUT) {
        struct op *acks[BATCH_MAX];
        size_t n = 0;
        for (struct op *c = q->head; c && n < BATCH_MAX; c = c->next) acks[n++] = c;
        if (!send_batch(t, q, p, acks, n)) return; /* no memory now: they wait (their timeouts still apply) */
    }
}

/* The operation sent from a queue is done (answered, or failed to send):
 * its partition may send what waits. */
static void queue_done(struct op *o) {
    if (!o->counted) return;
    o->counted = false;
    struct sluice_fleet_timed *t = o->t;
    queue_of(t, o)->out--;
    if (t->freeing) return;
    if (o->kind == SLUICE_FLEET_TIMED_ACK)
        ack_flush(t, o->partition);
    else
        queue_flush(t, o->partition);
}

/* Answers the queued operations past their deadline. */
static void queue_timeouts(struct sluice_fleet_timed *t, uint64_t now) {
    for (uint32_t p = 0; p < 2 * t->partitions; p++) {
        struct sluice__timed_queue *q = &t->queues[p];
        struct op *prev = NULL, *o = q->head;
        while (o) {
            struct op *next = o->next;
            if (now >= o->deadline) {
                if (prev)
                    prev->next = next;
                else
                    q->head = next;
                if (q->tail == o) q->tail = prev;
                o->next = NULL;
                answer_status(o, SLUICE_ETIMEDOUT);
            } else {
                prev = o;
            }
            o = next;
        }
    }
}

/* ------------------------------------------------------------------ threads */

static bool on_loop_thread(const struct sluice_fleet_timed *t) { return !t->loop || sluice_loop_in_thread(t->loop); }

/* On the loop thread: the operation joins the list and is sent (or, for a
 * function, runs). */
static void dispatch(struct op *o) {
    struct sluice_fleet_timed *t = o->t;
    if (o->run) {
        o->run(t, o->run_arg);
        free(o);
        return;
    }
    if (is_key_op(o)) { /* in order, behind the partition's earlier key operations */
        queue_push(queue_of(t, o), o);
        queue_flush(t, o->partition);
        return;
    }
    if (o->kind == SLUICE_FLEET_TIMED_ACK) {
        if (t->worker) {
            sluice_fleet_delivery_t d;
            memset(&d, 0, sizeof d);
            d.generation = o->gen;
            d.attempt = o->attempt;
            d.partition = o->partition;
            sluice__timed_worker_acked(t, &d);
        }
        queue_push(queue_of(t, o), o);
        ack_flush(t, o->partition);
        return;
    }
    op_link(o);
    send_op(o);
}

/* Sends the operation now (loop thread) or queues it for the wake event.
 * @return 0, or SLUICE_ECLOSED when the limiter is being freed (`o` freed). */
static int submit(struct op *o) {
    struct sluice_fleet_timed *t = o->t;
    if (on_loop_thread(t)) {
        dispatch(o);
        return 0;
    }
    pthread_mutex_lock(&t->mu);
    if (t->closed) {
        pthread_mutex_unlock(&t->mu);
        free(o->buf);
        free(o);
        return SLUICE_ECLOSED;
    }
    o->next = NULL;
    if (t->inbox_tail)
        t->inbox_tail->next = o;
    else
        t->inbox = o;
    t->inbox_tail = o;
    event_active(t->wake, EV_READ, 0);
    pthread_mutex_unlock(&t->mu);
    return 0;
}

int sluice__timed_on_loop(struct sluice_fleet_timed *t, void (*fn)(struct sluice_fleet_timed *t, void *arg),
                          void *arg) {
    if (on_loop_thread(t)) {
        fn(t, arg);
        return 0;
    }
    struct op *o = calloc(1, sizeof *o);
    if (!o) return SLUICE_ENOMEM;
    o->t = t;
    o->run = fn;
    o->run_arg = arg;
    return submit(o);
}

static void free_on_loop(struct sluice_fleet_timed *t);

/* The wake event: the inbox's operations, in order; or the free. */
static void on_wake(evutil_socket_t fd, short what, void *arg) {
    (void)fd;
    (void)what;
    struct sluice_fleet_timed *t = arg;
    pthread_mutex_lock(&t->mu);
    struct op *q = t->inbox;
    t->inbox = t->inbox_tail = NULL;
    struct sluice__loop_wait *w = t->free_wait;
    pthread_mutex_unlock(&t->mu);
    while (q) {
        struct op *next = q->next;
        dispatch(q);
        q = next;
    }
    if (!w) return;
    free_on_loop(t); /* sluice_fleet_timed_free() from another thread: freed here, then told */
    sluice__loop_wait_done(w);
}

/* ------------------------------------------------------------------ replies */

static void send_close_step(struct op *o);

/* The reply of a script run: parsed into the operation's answer. @return 0,
 * or -1 when the reply breaks the protocol. */
static int read_reply(struct op *o, const redisReply *rep) {
    sluice_fleet_timed_result_t res;
    sluice_fleet_delivery_t *list = NULL;
    bool more = false;
    if (o->members && o->kind == SLUICE_FLEET_TIMED_ACK) { /* a batch of acknowledgements: one value each */
        if (rep->type != REDIS_REPLY_ARRAY || rep->elements != o->nmembers) return -1;
        for (size_t i = 0; i < o->nmembers; i++) {
            int rc = sluice__timed_parse_lease(rep->element[i], &res);
            if (rc == -1) return -1;
            struct op *m = o->members[i];
            o->members[i] = NULL;
            if (rc)
                answer_status(m, rc);
            else
                answer(m, &res);
        }
        memset(&res, 0, sizeof res);
        answer(o, &res);
        return 0;
    }
    if (o->members) { /* a batch of calls: the time, then two values each, in order */
        if (rep->type == REDIS_REPLY_ARRAY && rep->elements == 1 && rep->element[0]->type == REDIS_REPLY_INTEGER &&
            rep->element[0]->integer == -1) {
            answer_status(o, SLUICE_ECLOSED);
            return 0;
        }
        if (rep->type != REDIS_REPLY_ARRAY || rep->elements != 1 + 2 * o->nmembers) return -1;
        for (size_t i = 0; i < o->nmembers; i++) {
            if (sluice__timed_parse_call(rep->element[0], rep->element + 1 + 2 * i, &res) != 0) return -1;
            struct op *m = o->members[i];
            o->members[i] = NULL;
            answer(m, &res);
        }
        memset(&res, 0, sizeof res);
        answer(o, &res);
        return 0;
    }
    int rc = sluice__timed_parse(o->kind, o->partition, rep, &res, &list, &more);
    if (rc == SLUICE_ECLOSED || rc == SLUICE_ELEASE || rc == SLUICE_ENOMEM) {
        answer_status(o, rc);
        return 0;
    }
    if (rc != 0) return -1;
    if (o->kind == SLUICE_FLEET_TIMED_CLOSE && (more || o->partition + 1 < o->t->partitions)) {
        /* a batch before the last: its discards now, then the next */
        if (res.n_discarded) {
            res.had = true;
            res.op = o->kind;
            o->fn(o->user, &res);
        }
        free(list);
        if (!more) o->partition++;
        send_close_step(o);
        return 0;
    }
    answer(o, &res);
    free(list);
    return 0;
}

/* A MOVED or ASK: the command goes to the node it names. */
static bool follow_redirect(struct op *o, const redisReply *rep) {
    bool ask;
    sluice__conn_t *c;
    if (o->redirects >= MAX_REDIRECTS || !sluice__cluster_follow(o->t->cluster, rep->str, rep->len, o->conn, &c, &ask))
        return false;
    o->redirects++;
    send_on(o, c, ask);
    return true;
}

static void on_reply(void *arg, redisReply *rep, int err) {
    struct op *o = arg;
    struct sluice_fleet_timed *t = o->t;
    o->in_redis = false;
    if (o->answered) {
        queue_done(o);
        op_free(o);
        return;
    }
    if (!rep) {
        queue_done(o);
        answer_status(o, t->freeing ? SLUICE_ECLOSED : err ? err : SLUICE_ENOTCONN);
        return;
    }
    int next = sluice__script_reply(&t->script, o->conn, o->fcalled, o->evalled, rep);
    if (next == SLUICE_ENOMEM) sluice__conn_drop(o->conn, SLUICE_ENOMEM);
    if (rep->type == REDIS_REPLY_ERROR) {
        if (follow_redirect(o, rep)) return;
        if (next == SLUICE__SCRIPT_AGAIN_EVAL || next == SLUICE__SCRIPT_AGAIN) {
            /* the script lost (NOSCRIPT, or its function after FUNCTION
             * FLUSH): once more with EVAL; FCALL refused (OOM, NOPERM): once
             * more with EVALSHA */
            if (next == SLUICE__SCRIPT_AGAIN_EVAL) o->evalled = true;
            send_on(o, o->conn, false);
            return;
        }
        queue_done(o);
        int code = sluice__redis_error_code(rep->str, rep->len);
        sluice__conn_t *c = o->conn;
        answer_status(o, code);
        if (code == SLUICE_EREADONLY && c) sluice__conn_drop(c, SLUICE_EREADONLY);
        if (code == SLUICE_ECLUSTERDOWN && t->cluster) sluice__cluster_refresh(t->cluster);
        return;
    }
    queue_done(o);
    if (read_reply(o, rep) != 0) {
        sluice__conn_t *c = o->conn;
        answer_status(o, SLUICE_EPROTO);
        if (c) sluice__conn_drop(c, SLUICE_EPROTO); /* the stream cannot be trusted */
    }
}

/* ------------------------------------------------------------------ operations */

static int check_now(const struct sluice_fleet_timed *t, uint64_t now) {
    return t->manual && now > SLUICE_FLEET_TIMED_TIME_MAX ? SLUICE_ERANGE : 0;
}

static int key_op(sluice_fleet_timed_t *t, sluice_fleet_timed_op_t kind, const char *opcode, sluice_key_t key,
                  const void *value, size_t value_len, uint64_t now, sluice_fleet_timed_fn fn, void *user) {
    if (!t || !fn) return SLUICE_EINVAL;
    int rc = check_key(key);
    if (rc) return rc;
    if ((rc = check_now(t, now)) != 0) return rc;
    char m[SLUICE_KEY_MAX + 1];
    size_t mlen = sluice__timed_member(key, m);
    uint32_t p = partition_of(t, m, mlen);
    const char *extra[2] = { m, value };
    size_t extra_len[2] = { mlen, value_len };
    int nextra = kind == SLUICE_FLEET_TIMED_CALL ? 2 : 1;
    struct op *o = op_new(t, kind, p, opcode, now, true, nextra, extra, extra_len, fn, user);
    if (!o) return SLUICE_ENOMEM;
    return submit(o);
}

int sluice_fleet_timed_stats(const sluice_fleet_timed_t *t, sluice_fleet_timed_stats_t *out) {
    if (!t || !out) return SLUICE_EINVAL;
    out->claims = __atomic_load_n(&t->st.claims, __ATOMIC_RELAXED);
    out->delivered = __atomic_load_n(&t->st.delivered, __ATOMIC_RELAXED);
    out->redelivered = __atomic_load_n(&t->st.redelivered, __ATOMIC_RELAXED);
    out->acked = __atomic_load_n(&t->st.acked, __ATOMIC_RELAXED);
    out->ack_refused = __atomic_load_n(&t->st.ack_refused, __ATOMIC_RELAXED);
    out->in_hand = __atomic_load_n(&t->st.in_hand, __ATOMIC_RELAXED);
    out->failures = __atomic_load_n(&t->st.failures, __ATOMIC_RELAXED);
    out->runs = __atomic_load_n(&t->st.runs, __ATOMIC_RELAXED);
    return 0;
}

int sluice_fleet_timed_call(sluice_fleet_timed_t *t, sluice_key_t key, const void *value, size_t value_len,
                            uint64_t now, sluice_fleet_timed_fn fn, void *user) {
    if (!t) return SLUICE_EINVAL;
    if (!value && value_len) return SLUICE_EINVAL;
    if (value_len > t->max_value) return SLUICE_ERANGE;
    /* a call's own command is never sent: its partition's queue sends it in a
     * batch ('B', make_batch()), which takes its key and value from it */
    return key_op(t, SLUICE_FLEET_TIMED_CALL, "B", key, value ? value : "", value_len, now, fn, user);
}

int sluice_fleet_timed_flush(sluice_fleet_timed_t *t, sluice_key_t key, uint64_t now, sluice_fleet_timed_fn fn,
                             void *user) {
    return key_op(t, SLUICE_FLEET_TIMED_FLUSH, "F", key, NULL, 0, now, fn, user);
}

int sluice_fleet_timed_cancel(sluice_fleet_timed_t *t, sluice_key_t key, uint64_t now, sluice_fleet_timed_fn fn,
                              void *user) {
    return key_op(t, SLUICE_FLEET_TIMED_CANCEL, "X", key, NULL, 0, now, fn, user);
}

int sluice_fleet_timed_pending(sluice_fleet_timed_t *t, sluice_key_t key, uint64_t now, sluice_fleet_timed_fn fn,
                               void *user) {
    return key_op(t, SLUICE_FLEET_TIMED_PENDING, "P", key, NULL, 0, now, fn, user);
}

int sluice_fleet_timed_claim(sluice_fleet_timed_t *t, uint32_t partition, uint64_t now, size_t max,
                             sluice_fleet_timed_fn fn, void *user) {
    if (!t || !fn || partition >= t->partitions || max == 0 || max > CLAIM_MAX) return SLUICE_EINVAL;
    int rc = check_now(t, now);
    if (rc) return rc;
    char n[24];
    const char *extra[1] = { n };
    size_t extra_len[1] = { (size_t)snprintf(n, sizeof n, "%zu", max) };
    struct op *o = op_new(t, SLUICE_FLEET_TIMED_CLAIM, partition, "W", now, false, 1, extra, extra_len, fn, user);
    if (!o) return SLUICE_ENOMEM;
    SLUICE__TIMED_STAT_ADD(t, claims, 1);
    return submit(o);
}

static int lease_op(sluice_fleet_timed_t *t, sluice_fleet_timed_op_t kind, const char *opcode,
                    const sluice_fleet_delivery_t *d, sluice_fleet_timed_fn fn, void *user) {
    if (!t || !d || d->partition >= t->partitions || d->attempt == 0) return SLUICE_EINVAL;
    char g[24], a[24];
    const char *extra[3] = { "1", g, a }; /* one delivery (acknowledgements go as batches: make_batch()) */
    size_t extra_len[3] = { 1, (size_t)snprintf(g, sizeof g, "%llu", (unsigned long long)d->generation),
                            (size_t)snprintf(a, sizeof a, "%u", (unsigned)d->attempt) };
    struct op *o = op_new(t, kind, d->partition, opcode, 0, false, 3, extra, extra_len, fn, user);
    if (!o) return SLUICE_ENOMEM;
    o->gen = d->generation;
    o->attempt = d->attempt;
    return submit(o);
}

int sluice_fleet_timed_ack(sluice_fleet_timed_t *t, const sluice_fleet_delivery_t *d, sluice_fleet_timed_fn fn,
                           void *user) {
    return lease_op(t, SLUICE_FLEET_TIMED_ACK, "K", d, fn, user);
}

int sluice_fleet_timed_release(sluice_fleet_timed_t *t, const sluice_fleet_delivery_t *d, sluice_fleet_timed_fn fn,
                               void *user) {
    return lease_op(t, SLUICE_FLEET_TIMED_RELEASE, "R", d, fn, user);
}

/* The close's next script run: its partition, the same mode and time. */
static void send_close_step(struct op *o) {
    struct sluice_fleet_timed *t = o->t;
    uint32_t p = o->partition;
    o->argv[3] = t->pname[p], o->lens[3] = t->pname_len[p];
    o->deadline = mono_ns() + t->timeout_ns;
    o->redirects = 0;
    send_op(o);
}

int sluice_fleet_timed_close(sluice_fleet_timed_t *t, sluice_close_mode_t mode, uint64_t now, sluice_fleet_timed_fn fn,
                             void *user) {
    if (!t || !fn || (mode != SLUICE_CLOSE_DRAIN && mode != SLUICE_CLOSE_DISCARD)) return SLUICE_EINVAL;
    int rc = check_now(t, now);
    if (rc) return rc;
    const char *how = mode == SLUICE_CLOSE_DRAIN ? "drain" : "discard";
    const char *extra[2] = { how, CLOSE_BATCH };
    size_t extra_len[2] = { strlen(how), strlen(CLOSE_BATCH) };
    struct op *o = op_new(t, SLUICE_FLEET_TIMED_CLOSE, 0, "Z", now, false, 2, extra, extra_len, fn, user);
    if (!o) return SLUICE_ENOMEM;
    return submit(o);
}

/* ------------------------------------------------------------------ life */

/* A connection (the one, or a cluster node's) is up: the script is loaded
 * there first, as a function library and for EVALSHA (redis-script.h). */
static void cluster_event(void *owner, sluice__conn_t *c, sluice__conn_event_t ev, int err) {
    (void)err;
    struct sluice_fleet_timed *t = owner;
    if (ev == SLUICE__CONN_UP && sluice__script_on_up(&t->script, c, NULL, NULL) != 0)
        sluice__conn_drop(c, SLUICE_ENOMEM);
}

/* The one connection's state changes (a single node, a Unix socket or a
 * Sentinel-discovered primary): as a cluster node's. */
static void conn_event(void *owner, sluice__conn_event_t ev, int err) {
    struct sluice_fleet_timed *t = owner;
    if (t->conn) cluster_event(owner, t->conn, ev, err);
}

static int open_link(struct sluice_fleet_timed *t, const char *url_text, bool *cluster) {
    sluice__redis_url_t url;
    char why[320];
    int rc = sluice__redis_url_parse(url_text, &url, why, sizeof why);
    if (rc != 0) return rc;
    sluice__conn_opts_t o;
    memset(&o, 0, sizeof o);
    o.connect_timeout_ns = t->timeout_ns > 1000 * MS ? t->timeout_ns : 1000 * MS;
    o.on_event = conn_event;
    o.owner = t;
    *cluster = url.topology == SLUICE__REDIS_CLUSTER;
    rc = sluice__topology_open(t->base, &url, &o, cluster_event, t, &t->conn, &t->sentinel, &t->cluster, why,
                               sizeof why);
    sluice__redis_url_free(&url);
    return rc;
}

static int policy_arg(const sluice_policy_t *p, char *out, size_t cap) {
    unsigned long long w = (unsigned long long)p->interval_ns;
    switch (p->kind) {
    case SLUICE_THROTTLE:
        snprintf(out, cap, "T %llu %d %d %d", w, p->leading ? 1 : 0, p->trailing ? 1 : 0,
                 p->pick == SLUICE_PICK_FIRST ? 1 : 0);
        return 0;
    case SLUICE_AUDIT: snprintf(out, cap, "A %llu", w); return 0;
    case SLUICE_DEBOUNCE:
        if (p->has_max_wait)
            snprintf(out, cap, "D %llu %d %d %llu", w, p->leading ? 1 : 0, p->trailing ? 1 : 0,
                     (unsigned long long)p->max_wait_ns);
        else
            snprintf(out, cap, "D %llu %d %d -", w, p->leading ? 1 : 0, p->trailing ? 1 : 0);
        return 0;
    default: return SLUICE_EINVAL;
    }
}

int sluice_fleet_timed_new(sluice_fleet_timed_t **out, struct event_base *base,
                           const sluice_fleet_timed_config_t *config) {
    if (!out) return SLUICE_EINVAL;
    *out = NULL;
    if (!base || !config || !config->url) return SLUICE_EINVAL;
    const sluice_fleet_timed_config_t *c = config;
    if (sluice_policy_validate(&c->policy) != 0) return SLUICE_EINVAL;
    if (c->partitions > 4096 || c->max_value > SLUICE_FLEET_TIMED_VALUE_MAX) return SLUICE_EINVAL;
    if (c->lease_ns > SLUICE_FLEET_TIMED_TIME_MAX || c->timeout_ns > SLUICE_FLEET_TIMED_TIME_MAX) return SLUICE_EINVAL;
    if (c->prefix_len && !c->prefix) return SLUICE_EINVAL;
    struct sluice_fleet_timed *t = calloc(1, sizeof *t);
    if (!t) return SLUICE_ENOMEM;
    t->base = base;
    int rc = policy_arg(&c->policy, t->policy, sizeof t->policy);
    if (rc) {
        free(t);
        return rc;
    }
    snprintf(t->lease, sizeof t->lease, "%llu", (unsigned long long)(c->lease_ns ? c->lease_ns : 30000 * MS));
    snprintf(t->keep, sizeof t->keep, "%llu", (unsigned long long)(c->retain_ms ? c->retain_ms : 86400000ull));
    t->max_value = c->max_value ? c->max_value : 64 * 1024;
    t->manual = c->manual_time;
    t->timeout_ns = c->timeout_ns ? c->timeout_ns : 1000 * MS;
    sluice__script_init(&t->script, sluice_fleet_timed_script(), sluice__timed_script_len());
    bool cluster = false;
    pthread_mutex_init(&t->mu, NULL);
    t->tick = event_new(base, -1, EV_PERSIST, on_tick, t);
    t->wake = event_new(base, -1, EV_READ, on_wake, t);
    if (!t->tick || !t->wake) {
        if (t->tick) event_free(t->tick);
        if (t->wake) event_free(t->wake);
        pthread_mutex_destroy(&t->mu);
        sluice__script_free(&t->script);
        free(t);
        return SLUICE_ENOMEM;
    }
    rc = open_link(t, c->url, &cluster);
    if (rc != 0) {
        sluice_fleet_timed_free(t);
        return rc;
    }
    t->partitions = c->partitions ? c->partitions : cluster ? 16 : 1;
    const char *prefix = c->prefix ? c->prefix : "sluice";
    size_t plen = c->prefix ? c->prefix_len : 6;
    char *enc = malloc(22 + 3 * plen);
    t->pname = calloc(t->partitions, sizeof *t->pname);
    t->pname_len = calloc(t->partitions, sizeof *t->pname_len);
    t->pslot = calloc(t->partitions, sizeof *t->pslot);
    t->queues = calloc(2 * (size_t)t->partitions, sizeof *t->queues);
    if (!enc || !t->pname || !t->pname_len || !t->pslot || !t->queues) {
        free(enc);
        sluice_fleet_timed_free(t);
        return SLUICE_ENOMEM;
    }
    size_t elen = sluice__fleet_prefix_encode(prefix, plen, enc);
    for (uint32_t p = 0; p < t->partitions; p++) {
        char digits[12];
        size_t dlen = (size_t)snprintf(digits, sizeof digits, "%u", (unsigned)p);
        t->pname[p] = malloc(elen + 3 + dlen + 1);
        if (!t->pname[p]) {
            free(enc);
            sluice_fleet_timed_free(t);
            return SLUICE_ENOMEM;
        }
        t->pname_len[p] = sluice__fleet_key_write(t->pname[p], enc, elen, 't', digits, dlen);
        t->pname[p][t->pname_len[p]] = '\0';
        t->pslot[p] = sluice__cluster_keyslot(t->pname[p], t->pname_len[p]);
    }
    free(enc);
    /* the tick: timeouts at a tenth of the timeout (at least 1 ms) */
    uint64_t period = t->timeout_ns / 10 > MS ? t->timeout_ns / 10 : MS;
    struct timeval tv = { (time_t)(period / 1000000000ull), (suseconds_t)(period % 1000000000ull / 1000) };
    event_add(t->tick, &tv);
    *out = t;
    return 0;
}

int sluice_fleet_timed_new_on_loop(sluice_fleet_timed_t **out, sluice_loop_t *loop,
                                   const sluice_fleet_timed_config_t *config) {
    if (!out || !loop) return SLUICE_EINVAL;
    *out = NULL;
    /* other threads call in: libevent's locks must be on (sluice_loop.h) */
    if (sluice_threads_init() != 0) return SLUICE_ENOMEM;
    sluice_fleet_timed_t *t = NULL;
    int rc = sluice_fleet_timed_new(&t, sluice_loop_base(loop), config);
    if (rc != 0) return rc;
    t->loop = loop;
    *out = t;
    return 0;
}

void sluice_fleet_timed_free(sluice_fleet_timed_t *t) {
    if (!t) return;
    if (!on_loop_thread(t)) {
        /* the wake event frees it on the loop thread; this thread waits */
        struct sluice__loop_wait w = SLUICE__LOOP_WAIT_INIT;
        pthread_mutex_lock(&t->mu);
        t->free_wait = &w;
        t->closed = true;
        event_active(t->wake, EV_READ, 0);
        pthread_mutex_unlock(&t->mu);
        sluice__loop_wait(&w);
        return;
    }
    free_on_loop(t);
}

/* sluice_fleet_timed_free() on the loop thread (or without a loop). */
static void free_on_loop(struct sluice_fleet_timed *t) {
    pthread_mutex_lock(&t->mu);
    t->closed = true;
    struct op *q = t->inbox;
    t->inbox = t->inbox_tail = NULL;
    pthread_mutex_unlock(&t->mu);
    while (q) { /* queued, never sent: answered closed */
        struct op *next = q->next;
        if (q->run) {
            q->run(t, q->run_arg);
            free(q);
        } else {
            q->prev = NULL;
            q->next = t->ops;
            if (t->ops) t->ops->prev = q;
            t->ops = q;
        }
        q = next;
    }
    t->freeing = true;
    for (uint32_t p = 0; t->queues && p < 2 * t->partitions; p++) { /* queued, never sent */
        struct op *o = t->queues[p].head;
        t->queues[p].head = t->queues[p].tail = NULL;
        while (o) {
            struct op *next = o->next;
            o->next = NULL;
            answer_status(o, SLUICE_ECLOSED);
            o = next;
        }
    }
    sluice__timed_worker_free(t);
    /* the connections answer what they hold (ECLOSED); then the rest */
    sluice__sentinel_free(t->sentinel);
    t->sentinel = NULL;
    if (t->cluster) sluice__cluster_free(t->cluster);
    if (t->conn) sluice__conn_free(t->conn);
    t->cluster = NULL;
    t->conn = NULL;
    while (t->ops) {
        struct op *o = t->ops;
        if (o->answered)
            op_free(o);
        else
            answer_status(o, SLUICE_ECLOSED);
    }
    if (t->tick) event_free(t->tick);
    if (t->wake) event_free(t->wake);
    pthread_mutex_destroy(&t->mu);
    if (t->pname)
        for (uint32_t p = 0; p < t->partitions; p++) free(t->pname[p]);
    free(t->pname);
    free(t->pname_len);
    free(t->pslot);
    free(t->queues);
    sluice__script_free(&t->script);
    free(t);
}
