/*
 * fleet-internal.h — internals of the fleet limiter shared with its tests
 * (hidden symbols, sluice__ prefix).
 */
#ifndef SLUICE_FLEET_INTERNAL_H
#define SLUICE_FLEET_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "sluice_fleet.h"

#define SLUICE_FLEET_HIDDEN __attribute__((visibility("hidden")))

typedef unsigned __int128 fl_u128;

/** Bytes of the script (without the NUL). */
SLUICE_FLEET_HIDDEN size_t sluice__fleet_script_len(void);

/** SHA-1 of `data` as 40 lowercase hex digits and a NUL (the script's EVALSHA name). */
SLUICE_FLEET_HIDDEN void sluice__fleet_sha1_hex(const void *data, size_t len, char out[41]);

/** Parses a decimal string of `len` digits (no sign, 1..60 digits, of which at
 *  most 39 after its leading zeros) into `out`.
 *  @return 0, or -1 when it is not such a string or overflows 128 bits. */
SLUICE_FLEET_HIDDEN int sluice__fleet_parse_u128(const char *s, size_t len, fl_u128 *out);

/** Writes `v` in decimal at `p` (at most 20 bytes), without a NUL. @return its length. */
SLUICE_FLEET_HIDDEN size_t sluice__fleet_u64_put(uint64_t v, char *p);

/** Writes `v` in decimal with a NUL into `buf` (at least 40 bytes). @return its length. */
SLUICE_FLEET_HIDDEN size_t sluice__fleet_u128_str(fl_u128 v, char *buf);

/** The policy's numbers in the script's scaled units (ns * limit). */
struct sluice__fleet_rate {
    uint64_t limit, burst, per;
    fl_u128 bper; /* burst * per: the burst in scaled units */
};

/** Fills a call decision from the script's answer: `admitted`, the time `t`
 *  (ns) and the TAT after the call (scaled). @return 0 or -1 when the answer
 *  breaks the script's invariants (a bad reply). */
SLUICE_FLEET_HIDDEN int sluice__fleet_call_decision(const struct sluice__fleet_rate *r, uint64_t cost, bool admitted,
                                                    uint64_t t, fl_u128 tat, sluice_decision_t *d);

/** Fills a quota from the script's answer: the time `t` and the key's TAT
 *  (scaled, already max(stored, t*limit)). @return 0 or -1 (bad reply). */
SLUICE_FLEET_HIDDEN int sluice__fleet_quota_from(const struct sluice__fleet_rate *r, uint64_t cost, uint64_t t,
                                                 fl_u128 tat, sluice_quota_t *q);

/** A call's decision or a quota read under several quotas (a plan), from the
 *  script's answer: the time `t` and each quota's TAT (scaled by its own
 *  limit): after the call when `admitted`, else max(TAT, t*limit) converted
 *  to the quota. Fills *d (a call) or *out (`is_quota`), and *det (each
 *  quota's figures, the refused ones). @return 0 or -1 (a bad reply). */
SLUICE_FLEET_HIDDEN int sluice__fleet_plan_answer(const struct sluice__fleet_rate *q, uint32_t n, bool is_quota,
                                                  uint64_t cost, bool admitted, uint64_t t, const fl_u128 *tat,
                                                  sluice_decision_t *d, sluice_quota_t *out, sluice_plan_detail_t *det);

/* Reading the script's answers (fleet-reply.c). */

struct redisReply;

/** What the reader needs of a request: its kind, cost and (manual time)
 *  time, and its quotas: one policy (n == 0, q[0]) or a plan's n quotas. */
struct sluice__fleet_ask {
    sluice_fleet_op_t op; /* SLUICE_FLEET_CALL or SLUICE_FLEET_QUOTA */
    uint64_t cost;
    uint64_t now; /* manual time: the request's time, which the answer must carry */
    bool manual;
    uint32_t n;    /* a plan's quotas, 1..SLUICE_PLAN_QUOTAS_MAX; 0 for one policy */
    uint32_t plan; /* the plan's index (for the detail) */
    const struct sluice__fleet_rate *q;
};

/** Reads a request's answer from the 3 values at `e` (each non-NULL; under
 *  a plan the third holds every quota's TAT - t*limit): fills *res (source REDIS), the time in
 *  *t_out, the TATs in tat[] (room for SLUICE_PLAN_QUOTAS_MAX), and *teach
 *  (whether they may teach the TAT cache). @return 0, 1 when the key's value
 *  is not Sluice state (this request alone fails), 2 when the key is served
 *  by another node of a Redis Cluster (not decided: to be sent there), or -1
 *  when the values break what the script promises (a bad reply). */
SLUICE_FLEET_HIDDEN int sluice__fleet_read_answer(const struct sluice__fleet_ask *a, struct redisReply *const *e,
                                                  sluice_fleet_result_t *res, uint64_t *t_out, fl_u128 *tat,
                                                  bool *teach);

/* Redis key names (fleet_key.c: the layout and why it is unambiguous). */

/** Bytes of E(s): `s` with '%' and '}' escaped (three bytes each). */
SLUICE_FLEET_HIDDEN size_t sluice__fleet_escaped_len(const char *s, size_t n);

/** Writes the prefix part of a name, "<N>:<E(prefix)>:", into `out` (room for
 *  22 + 3 * n bytes). @return its length. */
SLUICE_FLEET_HIDDEN size_t sluice__fleet_prefix_encode(const char *prefix, size_t n, char *out);

/** Writes the name "{" enc_prefix tag E(key) "}" into `out` (room for
 *  enc_prefix_len + 3 + sluice__fleet_escaped_len(key, key_len) bytes).
 *  @return its length. */
SLUICE_FLEET_HIDDEN size_t sluice__fleet_key_write(char *out, const char *enc_prefix, size_t enc_prefix_len, char tag,
                                                   const char *key, size_t key_len);

/** The cache slot of the Redis key name `rkey` (`len` bytes) in limiter
 *  `f`: the core's seeded hash under the limiter's random seed, masked to
 *  its cache; SIZE_MAX for a limiter without a cache. (For tests.) */
SLUICE_FLEET_HIDDEN size_t sluice__fleet_cache_slot(const sluice_fleet_t *f, const char *rkey, size_t len);

/** The SLUICE_E* code of a Redis error reply `msg` (`len` bytes, no NUL
 *  needed), by its class, the first word: WRONGPASS and NOAUTH are
 *  SLUICE_EAUTH, NOPERM SLUICE_ENOPERM, OOM SLUICE_EOOM, READONLY and
 *  MASTERDOWN SLUICE_EREADONLY, WRONGTYPE SLUICE_EBADVALUE, CLUSTERDOWN
 *  and TRYAGAIN SLUICE_ECLUSTERDOWN, any other SLUICE_EREDIS; except
 *  "ERR Protocol error: unauthenticated ...", Redis 7's
 *  refusal of a long command from a client that has not authenticated,
 *  which is SLUICE_EAUTH. (NOSCRIPT, MOVED and ASK are acted on where they
 *  arrive, before an error is reported.) */
SLUICE_FLEET_HIDDEN int sluice__redis_error_code(const char *msg, size_t len);

/** How many requests a Redis Cluster node's batch left undecided (their key
 *  is another node's: a moved or migrating slot), each then sent alone to
 *  its slot's node (any thread). */
SLUICE_FLEET_HIDDEN uint64_t sluice__fleet_elsewhere(sluice_fleet_t *f);

#endif
