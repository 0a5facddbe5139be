/*
 * fuzz_timed_reply.c — what a misbehaving Redis (or a man in the middle of
 * a plaintext connection) could send the fleet's timed limiter: arbitrary
 * bytes parsed as RESP by hiredis's reader, each reply then read as the
 * answer to one operation (timed-reply.c). The reader may refuse anything;
 * what it accepts keeps the promises of sluice_fleet_timed.h:
 *  - a call is emitted at its time with a generation and replaces nothing,
 *    or dropped or scheduled at or after its time without one;
 *  - a claim's deliveries are of attempt 1 or more, never later than the
 *    claim's time, each with a key that sluice__timed_member() writes back
 *    to the same member;
 *  - an acknowledgement is done, absent or refused (SLUICE_ELEASE).
 * It also checks that a key's member reads back as the same key. ASan and
 * UBSan watch the reading itself (element counts, lengths).
 *
 * Input: 1 byte of operation kind, 1 of partition, then the RESP bytes.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <hiredis/hiredis.h>

#include "resp_guard.h"

#include "timed-internal.h"

#define CHECK(c)                                                                                                       \
    do {                                                                                                               \
        if (!(c)) __builtin_trap();                                                                                    \
    } while (0)

static bool same_key(sluice_key_t a, sluice_key_t b) {
    if (a.kind != b.kind) return false;
    if (a.kind == SLUICE_KEY_U64) return a.u64 == b.u64;
    return a.len == b.len && (a.len == 0 || memcmp(a.bytes, b.bytes, a.len) == 0);
}

static void check_member(sluice_key_t k) {
    char m[SLUICE_KEY_MAX + 1];
    size_t n = sluice__timed_member(k, m);
    sluice_key_t back;
    CHECK(sluice__timed_member_key(m, n, &back) == 0 && same_key(k, back));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 2) return 0;
    sluice_fleet_timed_op_t kind = (sluice_fleet_timed_op_t)(1 + data[0] % 8);
    uint32_t partition = data[1];
    const uint8_t *p = data + 2;
    size_t n = size - 2;
    /* members: the input's first bytes as a byte key, and as an integer */
    uint64_t u = 0;
    for (size_t i = 0; i < n && i < 8; i++) u |= (uint64_t)p[i] << (8 * i);
    check_member(sluice_key_u64(u));
    check_member(sluice_key_bytes(p, n < SLUICE_KEY_MAX ? n : SLUICE_KEY_MAX));
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
        sluice_fleet_timed_result_t res;
        sluice_fleet_delivery_t *list = NULL;
        bool more = false;
        int rc = sluice__timed_parse(kind, partition, rep, &res, &list, &more);
        CHECK(rc == 0 || rc == -1 || rc == SLUICE_ECLOSED || rc == SLUICE_ELEASE || rc == SLUICE_ENOMEM);
        if (rc == SLUICE_ELEASE) CHECK(kind == SLUICE_FLEET_TIMED_ACK || kind == SLUICE_FLEET_TIMED_RELEASE);
        if (rc == SLUICE_ECLOSED)
            CHECK(kind == SLUICE_FLEET_TIMED_CALL || kind == SLUICE_FLEET_TIMED_FLUSH ||
                  kind == SLUICE_FLEET_TIMED_CANCEL || kind == SLUICE_FLEET_TIMED_PENDING);
        if (rc == 0) {
            CHECK(res.op == kind);
            if (kind == SLUICE_FLEET_TIMED_CALL) {
                const sluice_decision_t *d = &res.decision;
                if (d->kind == SLUICE_EMITTED)
                    CHECK(res.generation > 0 && d->at == d->now && !res.dropped);
                else
                    CHECK((d->kind == SLUICE_DROPPED || d->kind == SLUICE_SCHEDULED) && res.generation == 0 &&
                          d->at >= d->now);
            }
            if (kind == SLUICE_FLEET_TIMED_PENDING || kind == SLUICE_FLEET_TIMED_FLUSH) CHECK(!res.dropped);
            for (size_t i = 0; i < res.n_deliveries; i++) {
                const sluice_fleet_delivery_t *d = &res.deliveries[i];
                CHECK(d->attempt >= 1 && d->at <= res.decision.now && d->partition == partition);
                check_member(d->key);
            }
            for (size_t i = 0; i < res.n_discarded; i++) check_member(res.discarded[i].key);
            CHECK(res.n_deliveries == 0 || kind == SLUICE_FLEET_TIMED_CLAIM);
            CHECK(res.n_discarded == 0 || kind == SLUICE_FLEET_TIMED_CLOSE);
            CHECK(!more || kind == SLUICE_FLEET_TIMED_CLOSE || kind == SLUICE_FLEET_TIMED_CALL);
        } else {
            CHECK(list == NULL);
        }
        free(list);
        freeReplyObject(rep);
    }
    redisReaderFree(rd);
    return 0;
}
