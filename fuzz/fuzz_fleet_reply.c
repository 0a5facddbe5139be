/*
 * fuzz_fleet_reply.c — what a Redis that misbehaves (or a man in the middle
 * of a plaintext connection) could send the fleet limiter: arbitrary bytes
 * parsed as RESP by hiredis's reader, each array reply then read as the
 * answers of a batch of requests (fleet-reply.c), under one policy or a plan
 * of up to 8 quotas with random numbers. The reader may refuse anything; what
 * it accepts must keep every promise a decision makes:
 *  - its time is the answer's (and the request's, in manual time);
 *  - an admitted call is decided at that time and full no earlier; a dropped
 *    one retries later than that time (or never);
 *  - remaining never exceeds a burst; a quota read's retry and full are not
 *    before its time;
 *  - under a plan, the detail has the plan's quotas, an admitted call no
 *    refused quota, a dropped one at least one, and no bit past the plan's.
 * ASan and UBSan watch the reading itself (element counts, lengths).
 *
 * Input: 1 byte of shape (quotas, kind, manual time), 8 of cost and time,
 * 16 per quota of numbers, then the RESP bytes.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <hiredis/hiredis.h>

#include "resp_guard.h"

#include "fleet-internal.h"

static uint64_t take(const uint8_t **p, size_t *n, int bytes) {
    uint64_t v = 0;
    for (int i = 0; i < bytes && *n; i++, (*p)++, (*n)--) v |= (uint64_t) * *p << (8 * i);
    return v;
}

#define CHECK(c)                                                                                                       \
    do {                                                                                                               \
        if (!(c)) __builtin_trap();                                                                                    \
    } while (0)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const uint8_t *p = data;
    size_t n = size;
    if (n < 9) return 0;
    uint8_t shape = (uint8_t)take(&p, &n, 1);
    struct sluice__fleet_ask a;
    memset(&a, 0, sizeof a);
    a.n = shape % 9; /* 0: one policy */
    a.op = shape & 0x10 ? SLUICE_FLEET_QUOTA : SLUICE_FLEET_CALL;
    a.manual = (shape & 0x20) != 0;
    uint64_t ct = take(&p, &n, 8);
    a.cost = 1 + (ct & 0xff) % 16;
    if (ct & 0x100) a.cost = 1 + (ct >> 9) % 1000000000000ull;
    a.now = ct >> 20;
    struct sluice__fleet_rate q[SLUICE_PLAN_QUOTAS_MAX];
    uint32_t nq = a.n ? a.n : 1;
    uint64_t max_burst = 0;
    for (uint32_t j = 0; j < nq; j++) {
        uint64_t x = take(&p, &n, 8), y = take(&p, &n, 8);
        q[j].limit = 1 + x % 1000000000000ull;
        q[j].per = 1 + y % 1000000000000000000ull;
        q[j].burst = 1 + (x >> 40) % (y & 1 ? 1000000000000ull : 20);
        q[j].bper = (fl_u128)q[j].burst * q[j].per;
        if (q[j].burst > max_burst) max_burst = q[j].burst;
    }
    a.q = q;
    size_t width = 3;

    if (resp_declares_huge_array(p, n)) return 0; /* resp_guard.h */
    redisReader *rd = redisReaderCreate();
    if (!rd) return 0;
    if (redisReaderFeed(rd, (const char *)p, n) != REDIS_OK) {
        redisReaderFree(rd);
        return 0;
    }
    for (int replies = 0; replies < 16; replies++) {
        void *got = NULL;
        if (redisReaderGetReply(rd, &got) != REDIS_OK || !got) break;
        redisReply *rep = got;
        if (rep->type == REDIS_REPLY_ARRAY) {
            for (size_t i = 0; i + width <= rep->elements; i += width) {
                sluice_fleet_result_t res;
                uint64_t t = 0;
                fl_u128 tat[SLUICE_PLAN_QUOTAS_MAX];
                bool teach;
                int rc = sluice__fleet_read_answer(&a, rep->element + i, &res, &t, tat, &teach);
                CHECK(rc >= -1 && rc <= 2); /* 2: ELSEWHERE (a Redis Cluster key on another node) */
                if (rc != 0) continue;
                CHECK(res.now == t && res.source == SLUICE_FLEET_SOURCE_REDIS);
                if (a.manual) CHECK(t == a.now);
                if (a.op == SLUICE_FLEET_CALL) {
                    const sluice_decision_t *d = &res.decision;
                    CHECK(d->kind == SLUICE_EMITTED || d->kind == SLUICE_DROPPED);
                    CHECK(d->full >= t);
                    if (d->kind == SLUICE_EMITTED)
                        CHECK(d->at == t && d->remaining <= max_burst);
                    else
                        CHECK(d->at > t && d->remaining == 0);
                } else {
                    const sluice_quota_t *qq = &res.quota;
                    CHECK(qq->remaining <= qq->burst && qq->full >= t && qq->retry >= t);
                }
                if (a.n) {
                    const sluice_plan_detail_t *det = &res.detail;
                    CHECK(det->nquotas == a.n && (det->refused >> a.n) == 0);
                    if (a.op == SLUICE_FLEET_CALL) CHECK((det->refused != 0) == (res.decision.kind == SLUICE_DROPPED));
                    for (uint32_t j = 0; j < a.n; j++)
                        CHECK(det->quotas[j].remaining <= q[j].burst && det->quotas[j].full >= t &&
                              det->quotas[j].retry >= t);
                }
            }
        }
        freeReplyObject(rep);
    }
    redisReaderFree(rd);
    return 0;
}
