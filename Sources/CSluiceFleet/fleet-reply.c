/*
 * fleet-reply.c — one request's answer read from a script reply (RESP,
 * parsed by hiredis): the values the script gives each request, checked
 * against everything the script promises, then turned into a decision or a
 * quota (fleet_math.c). A reply that breaks a promise is a bad reply: the
 * caller stops trusting the connection. Fuzzed by fuzz/fuzz_fleet_reply.c.
 */
#include <string.h>

#include <hiredis/hiredis.h>

#include "fleet-internal.h"

static bool bulk_u128(const redisReply *e, fl_u128 *out) {
    return e && e->type == REDIS_REPLY_STRING && sluice__fleet_parse_u128(e->str, (size_t)e->len, out) == 0;
}

static bool bulk_u64(const redisReply *e, uint64_t *out) {
    fl_u128 v;
    if (!bulk_u128(e, &v) || v > UINT64_MAX) return false;
    *out = (uint64_t)v;
    return true;
}

/* One policy: {status, t, TAT}: 1 admitted, 0 dropped or a quota read. */
static int read_one(const struct sluice__fleet_ask *a, struct redisReply *const *e, sluice_fleet_result_t *res,
                    uint64_t *t, fl_u128 *tat) {
    if (e[0]->type != REDIS_REPLY_INTEGER || (e[0]->integer != 0 && e[0]->integer != 1) || !bulk_u64(e[1], t) ||
        !bulk_u128(e[2], tat))
        return -1;
    if (a->op == SLUICE_FLEET_QUOTA) {
        if (e[0]->integer != 0 || sluice__fleet_quota_from(a->q, a->cost, *t, *tat, &res->quota) != 0) return -1;
    } else if (sluice__fleet_call_decision(a->q, a->cost, e[0]->integer == 1, *t, *tat, &res->decision) != 0) {
        return -1;
    }
    return 0;
}

/* One offset of a binary answer: 8 bytes, a little-endian IEEE double that
 * must hold an integer in [0, 1e15) (every one the script sends in binary). */
static bool binary_offset(const unsigned char *b, fl_u128 *off) {
    uint64_t bits = 0;
    for (int i = 7; i >= 0; i--) bits = bits << 8 | b[i];
    double x;
    memcpy(&x, &bits, sizeof x);
    if (!(x >= 0 && x < 1e15)) return false; /* (NaN fails too) */
    uint64_t u = (uint64_t)x;
    if ((double)u != x) return false;
    *off = u;
    return true;
}

/* The offsets of a plan's answer, each TAT - t*limit of its quota, from one
 * bulk string: exactly `n` decimal numbers one space apart, '#' and `n`
 * binary offsets (binary_offset), or the key's new binary value ("P4", its
 * quotas, " :", then B and those offsets: `n` + 2 doubles), whose last `n`
 * doubles are the offsets. */
static bool plan_offsets(const redisReply *e, uint32_t n, fl_u128 *off) {
    if (!e || e->type != REDIS_REPLY_STRING) return false;
    const char *p = e->str, *end = e->str + e->len;
    size_t tail = 8 * (size_t)n;
    bool binary = e->len > 0 && p[0] == '#';
    if (binary && (size_t)e->len != 1 + tail) return false;
    if (e->len > 2 && p[0] == 'P' && p[1] == '4') {
        if ((size_t)e->len < 2 + 2 + 16 + tail || memcmp(end - tail - 18, " :", 2) != 0) return false;
        binary = true;
    }
    if (binary) {
        for (uint32_t j = 0; j < n; j++)
            if (!binary_offset((const unsigned char *)end - tail + 8 * j, &off[j])) return false;
        return true;
    }
    for (uint32_t j = 0; j < n; j++) {
        const char *s = p;
        while (s < end && *s != ' ') s++;
        if (sluice__fleet_parse_u128(p, (size_t)(s - p), &off[j]) != 0) return false;
        if (j + 1 < n) {
            if (s == end) return false;
            s++; /* the space */
        }
        p = s;
    }
    return p == end;
}

/* The TATs of a plan's answer at time t: its offsets plus t*limit. */
static bool plan_tats(const redisReply *e, uint32_t n, const struct sluice__fleet_rate *q, uint64_t t, fl_u128 *tat) {
    fl_u128 off[SLUICE_PLAN_QUOTAS_MAX];
    if (n > SLUICE_PLAN_QUOTAS_MAX || !plan_offsets(e, n, off)) return false;
    for (uint32_t j = 0; j < n; j++) {
        fl_u128 ts = (fl_u128)t * q[j].limit;
        if (off[j] > ~(fl_u128)0 - ts) return false;
        tat[j] = ts + off[j];
    }
    return true;
}

/* Plans: {status, t, "X X ..." or "#..."} (one TAT - t*limit per quota): 1 admitted, 0
 * dropped or a quota read, 2 the same with TATs converted from other quotas
 * (they may not teach the cache). */
static int read_plan(const struct sluice__fleet_ask *a, struct redisReply *const *e, sluice_fleet_result_t *res,
                     uint64_t *t, fl_u128 *tat, bool *teach) {
    if (e[0]->type != REDIS_REPLY_INTEGER || e[0]->integer < 0 || e[0]->integer > 2 || !bulk_u64(e[1], t)) return -1;
    *teach = e[0]->integer != 2;
    if (!plan_tats(e[2], a->n, a->q, *t, tat)) return -1;
    bool admitted = e[0]->integer == 1;
    bool quota = a->op == SLUICE_FLEET_QUOTA;
    if (quota && admitted) return -1;
    res->detail.plan = a->plan;
    return sluice__fleet_plan_answer(a->q, a->n, quota, a->cost, admitted, *t, tat, &res->decision, &res->quota,
                                     &res->detail);
}

int sluice__fleet_read_answer(const struct sluice__fleet_ask *a, struct redisReply *const *e,
                              sluice_fleet_result_t *res, uint64_t *t_out, fl_u128 *tat, bool *teach) {
    memset(res, 0, sizeof *res);
    res->source = SLUICE_FLEET_SOURCE_REDIS;
    *teach = true;
    if (a->op != SLUICE_FLEET_CALL && a->op != SLUICE_FLEET_QUOTA) return -1;
    if (a->n > SLUICE_PLAN_QUOTAS_MAX) return -1;
    for (size_t i = 0; i < 3; i++)
        if (!e[i]) return -1;
    if (e[0]->type == REDIS_REPLY_INTEGER && e[0]->integer == -1) {
        /* Redis Cluster: the key is served by another node (not decided) */
        if (e[2]->type == REDIS_REPLY_STRING && e[2]->len == 9 && memcmp(e[2]->str, "ELSEWHERE", 9) == 0) return 2;
        return 1; /* not Sluice state */
    }
    uint64_t t;
    int rc = a->n ? read_plan(a, e, res, &t, tat, teach) : read_one(a, e, res, &t, &tat[0]);
    if (rc != 0) return -1;
    if (a->manual && t != a->now) return -1;
    res->now = t;
    *t_out = t;
    return 0;
}
