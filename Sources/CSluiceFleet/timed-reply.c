/*
 * timed-reply.c — reading the timed script's replies (timed_script.c's
 * header is the protocol) and the members that name keys in Redis. No
 * connection here: the fuzzer reads arbitrary RESP through it.
 */
#include <stdlib.h>
#include <string.h>

#include <hiredis/hiredis.h>

#include "timed-internal.h"

size_t sluice__timed_member(sluice_key_t key, char *out) {
    if (key.kind == SLUICE_KEY_U64) {
        out[0] = 'u';
        return 1 + (size_t)snprintf(out + 1, 24, "%llu", (unsigned long long)key.u64);
    }
    out[0] = 'b';
    if (key.len) memcpy(out + 1, key.bytes, key.len);
    return 1 + key.len;
}

int sluice__timed_member_key(const char *m, size_t len, sluice_key_t *out) {
    if (len < 1) return -1;
    if (m[0] == 'b') {
        if (len - 1 > SLUICE_KEY_MAX) return -1;
        *out = sluice_key_bytes(m + 1, len - 1);
        return 0;
    }
    if (m[0] != 'u' || len < 2 || len > 21) return -1;
    if (m[1] == '0' && len > 2) return -1;
    uint64_t v = 0;
    for (size_t i = 1; i < len; i++) {
        if (m[i] < '0' || m[i] > '9') return -1;
        unsigned dgt = (unsigned)(m[i] - '0');
        if (v > (UINT64_MAX - dgt) / 10) return -1;
        v = v * 10 + dgt;
    }
    *out = sluice_key_u64(v);
    return 0;
}

static bool is_int(const redisReply *r) { return r && r->type == REDIS_REPLY_INTEGER; }
static bool is_str(const redisReply *r) { return r && r->type == REDIS_REPLY_STRING; }
static bool is_nil(const redisReply *r) { return r && r->type == REDIS_REPLY_NIL; }

/* Decimal digits (1 to 20, leading zeros allowed) that fit 64 bits. */
static int digits_u64(const char *s, size_t len, uint64_t *out) {
    if (len == 0 || len > 20) return -1;
    uint64_t v = 0;
    for (size_t i = 0; i < len; i++) {
        if (s[i] < '0' || s[i] > '9') return -1;
        unsigned d = (unsigned)(s[i] - '0');
        if (v > (UINT64_MAX - d) / 10) return -1;
        v = v * 10 + d;
    }
    *out = v;
    return 0;
}

static int parse_u64(const redisReply *r, uint64_t *out) {
    if (is_int(r)) {
        if (r->integer < 0) return -1;
        *out = (uint64_t)r->integer;
        return 0;
    }
    if (!is_str(r)) return -1;
    return digits_u64(r->str, r->len, out);
}

/* A list of (gen, attempt, member, value, at) from element `from`, or of
 * (member, value) when `pairs`: into a fresh array. @return 0, -1 (a bad
 * reply) or SLUICE_ENOMEM. */
static int parse_deliveries(const redisReply *rep, size_t from, bool pairs, uint32_t partition,
                            sluice_fleet_delivery_t **out, size_t *n_out) {
    size_t width = pairs ? 2 : 5;
    if (rep->elements < from || (rep->elements - from) % width) return -1;
    size_t n = (rep->elements - from) / width;
    *out = NULL;
    *n_out = n;
    if (n == 0) return 0;
    sluice_fleet_delivery_t *d = calloc(n, sizeof *d);
    if (!d) return SLUICE_ENOMEM;
    for (size_t i = 0; i < n; i++) {
        redisReply *const *e = rep->element + from + i * width;
        uint64_t gen = 0, attempt = 0, at = 0;
        redisReply *m = pairs ? e[0] : e[2], *v = pairs ? e[1] : e[3];
        if (!pairs && (parse_u64(e[0], &gen) || parse_u64(e[1], &attempt) || attempt == 0 || attempt > UINT32_MAX ||
                       parse_u64(e[4], &at))) {
            free(d);
            return -1;
        }
        if (!is_str(m) || !is_str(v) || sluice__timed_member_key(m->str, m->len, &d[i].key) != 0) {
            free(d);
            return -1;
        }
        d[i].value = v->str;
        d[i].value_len = v->len;
        d[i].at = at;
        d[i].generation = gen;
        d[i].attempt = (uint32_t)attempt;
        d[i].partition = partition;
    }
    *out = d;
    return 0;
}

int sluice__timed_parse_call(const struct redisReply *now_r, struct redisReply *const *e,
                             sluice_fleet_timed_result_t *res) {
    memset(res, 0, sizeof *res);
    res->op = SLUICE_FLEET_TIMED_CALL;
    uint64_t now, v;
    if (parse_u64(now_r, &now) || !is_str(e[0]) || e[0]->len < 2) return -1;
    if (!is_str(e[1]) && !is_nil(e[1])) return -1;
    char k = e[0]->str[0];
    if ((k != 'E' && k != 'D' && k != 'S') || digits_u64(e[0]->str + 1, e[0]->len - 1, &v)) return -1;
    /* emitted: at the call's time, with a generation, replacing nothing;
     * dropped: at or after it, replacing nothing; scheduled: at or after it */
    if (k == 'E' ? (v == 0 || is_str(e[1])) : (v < now || (k == 'D' && is_str(e[1])))) return -1;
    res->decision.kind = k == 'E' ? SLUICE_EMITTED : k == 'D' ? SLUICE_DROPPED : SLUICE_SCHEDULED;
    res->decision.at = k == 'E' ? now : v;
    res->decision.now = now;
    res->generation = k == 'E' ? v : 0;
    if (is_str(e[1])) {
        res->dropped = e[1]->str;
        res->dropped_len = e[1]->len;
    }
    return 0;
}

int sluice__timed_parse_lease(const struct redisReply *e, sluice_fleet_timed_result_t *res) {
    memset(res, 0, sizeof *res);
    if (!is_int(e) || e->integer < -1 || e->integer > 1) return -1;
    if (e->integer == -1) return SLUICE_ELEASE;
    res->had = e->integer == 1;
    return 0;
}

int sluice__timed_parse(sluice_fleet_timed_op_t kind, uint32_t partition, const redisReply *rep,
                        sluice_fleet_timed_result_t *res, sluice_fleet_delivery_t **list, bool *more) {
    memset(res, 0, sizeof *res);
    *list = NULL;
    *more = false;
    res->op = kind;
    switch (kind) {
    case SLUICE_FLEET_TIMED_CALL: {
        /* a batch of calls: the time, then two values each; the caller
         * splits them (sluice__timed_parse_call()). Here: closed, or the
         * shape and the first call. */
        if (rep->type != REDIS_REPLY_ARRAY || rep->elements < 1) return -1;
        if (rep->elements == 1 && is_int(rep->element[0]) && rep->element[0]->integer == -1) return SLUICE_ECLOSED;
        if (rep->elements < 3 || rep->elements % 2 == 0) return -1;
        *more = rep->elements > 3;
        return sluice__timed_parse_call(rep->element[0], rep->element + 1, res);
    }
    case SLUICE_FLEET_TIMED_FLUSH:
    case SLUICE_FLEET_TIMED_CANCEL:
    case SLUICE_FLEET_TIMED_PENDING: {
        if (rep->type != REDIS_REPLY_ARRAY || rep->elements < 1 || !is_int(rep->element[0])) return -1;
        long long k = rep->element[0]->integer;
        if (k == -1 && rep->elements == 1) return SLUICE_ECLOSED;
        if (rep->elements != 2 || (k != 0 && k != 1)) return -1;
        redisReply *v = rep->element[1];
        bool want_value = kind == SLUICE_FLEET_TIMED_CANCEL && k == 1;
        if (want_value ? !is_str(v) : !is_nil(v)) return -1;
        res->had = k == 1;
        if (want_value) {
            res->dropped = v->str;
            res->dropped_len = v->len;
        }
        return 0;
    }
    case SLUICE_FLEET_TIMED_CLAIM: {
        if (rep->type != REDIS_REPLY_ARRAY || rep->elements < 3) return -1;
        redisReply *const *e = rep->element;
        if (!is_int(e[0]) || !is_int(e[1]) || e[0]->integer < -1 || e[1]->integer < -1) return -1;
        res->next_due_us = e[0]->integer < 0 ? 0 : (uint64_t)e[0]->integer;
        res->next_lease_us = e[1]->integer < 0 ? 0 : (uint64_t)e[1]->integer;
        if (parse_u64(e[2], &res->decision.now)) return -1;
        int rc = parse_deliveries(rep, 3, false, partition, list, &res->n_deliveries);
        if (rc) return rc;
        for (size_t i = 0; i < res->n_deliveries; i++) {
            if ((*list)[i].at > res->decision.now) { /* never early */
                free(*list);
                *list = NULL;
                return -1;
            }
        }
        res->deliveries = *list;
        return 0;
    }
    case SLUICE_FLEET_TIMED_ACK:
    case SLUICE_FLEET_TIMED_RELEASE: {
        /* one value per delivery: here one (a batch's: sluice__timed_parse_lease()) */
        if (rep->type != REDIS_REPLY_ARRAY || rep->elements != 1) return -1;
        int rc = sluice__timed_parse_lease(rep->element[0], res);
        res->op = kind;
        return rc;
    }
    case SLUICE_FLEET_TIMED_CLOSE: {
        if (rep->type != REDIS_REPLY_ARRAY || rep->elements < 1 || !is_int(rep->element[0])) return -1;
        long long left = rep->element[0]->integer;
        if (left != 0 && left != 1) return -1;
        int rc = parse_deliveries(rep, 1, true, partition, list, &res->n_discarded);
        if (rc) return rc;
        res->discarded = *list;
        *more = left == 1;
        return 0;
    }
    }
    return -1;
}
