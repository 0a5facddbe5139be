/*
 * fleet_math.c — the fleet limiter's exact arithmetic on the C side: decimal
 * strings to and from 128-bit integers, and the decisions and quotas built
 * from the script's answers (times scaled by the policy's limit, as in the
 * script: T = per/limit becomes the integer `per`).
 *
 * Ranges: a time is below 2^64 ns and a limit at most 10^12, so a scaled time
 * is below 2^104; a burst or cost times `per` is at most 10^12 * 10^18 < 2^100.
 * Every sum below stays far under 2^128.
 */
#include <string.h>

#include "fleet-internal.h"

int sluice__fleet_parse_u128(const char *s, size_t len, fl_u128 *out) {
    if (s == NULL || len == 0 || len > 60) return -1;
    /* leading zeros (the script's cell marker before a TAT, fleet_script.c) */
    while (len > 1 && *s == '0') s++, len--;
    if (len > 39) return -1;
    /* in chunks of up to 19 digits, each read in 64 bits (a 128-bit
     * division per digit, as an overflow test, cost more than the rest of
     * the reply's parsing): 38 digits never overflow, a 39th is checked */
    fl_u128 v = 0;
    size_t i = 0, body = len < 38 ? len : 38;
    while (i < body) {
        size_t n = body - i < 19 ? body - i : 19;
        uint64_t chunk = 0, scale = 1;
        for (size_t k = 0; k < n; k++, i++) {
            unsigned d = (unsigned char)s[i] - '0';
            if (d > 9) return -1;
            chunk = chunk * 10 + d;
            scale *= 10;
        }
        v = v * scale + chunk;
    }
    if (i < len) {
        unsigned d = (unsigned char)s[i] - '0';
        const fl_u128 max = ~(fl_u128)0, top = max / 10; /* max = top * 10 + 5 */
        if (d > 9 || v > top || (v == top && d > (unsigned)(max - top * 10))) return -1;
        v = v * 10 + d;
    }
    *out = v;
    return 0;
}

size_t sluice__fleet_u64_put(uint64_t v, char *p) {
    char t[20];
    size_t n = 0;
    do {
        t[n++] = (char)('0' + (unsigned)(v % 10));
        v /= 10;
    } while (v);
    for (size_t i = 0; i < n; i++) p[i] = t[n - 1 - i];
    return n;
}

size_t sluice__fleet_u128_str(fl_u128 v, char *buf) {
    /* base 10^19 chunks (one 128-bit division each), then 64-bit digits */
    const uint64_t big = 10000000000000000000ull;
    uint64_t part[3];
    size_t np = 0;
    do {
        part[np++] = (uint64_t)(v % big);
        v /= big;
    } while (v);
    size_t n = sluice__fleet_u64_put(part[np - 1], buf);
    for (size_t k = np - 1; k-- > 0;) {
        uint64_t x = part[k];
        for (int d = 18; d >= 0; d--) {
            buf[n + (size_t)d] = (char)('0' + (unsigned)(x % 10));
            x /= 10;
        }
        n += 19;
    }
    buf[n] = '\0';
    return n;
}

/* The end of the clock (UINT64_MAX ns), scaled: as in the core, a TAT never
 * goes past it; a call that would push it further is dropped with retry "never". */
static fl_u128 clock_end(const struct sluice__fleet_rate *r) { return (fl_u128)UINT64_MAX * r->limit; }

/* ceil(v / limit) in ns, saturated to UINT64_MAX. */
static uint64_t ceil_ns(const struct sluice__fleet_rate *r, fl_u128 v) {
    fl_u128 q = v / r->limit + (v % r->limit != 0);
    return q > UINT64_MAX ? UINT64_MAX : (uint64_t)q;
}

int sluice__fleet_call_decision(const struct sluice__fleet_rate *r, uint64_t cost, bool admitted, uint64_t t,
                                fl_u128 tat, sluice_decision_t *d) {
    fl_u128 ts = (fl_u128)t * r->limit;
    fl_u128 nper = (fl_u128)cost * r->per;
    memset(d, 0, sizeof *d);
    if (tat < ts) return -1;
    fl_u128 room = ts + r->bper < clock_end(r) ? ts + r->bper : clock_end(r);
    if (admitted) {
        /* tat is the TAT after the call: it rose by cost*T from max(TAT, t) */
        if (tat - ts < nper || tat > room) return -1;
        d->kind = SLUICE_EMITTED;
        d->at = t;
        d->remaining = (uint64_t)((room - tat) / r->per);
        d->full = ceil_ns(r, tat);
    } else {
        /* tat is max(TAT, t), unchanged */
        fl_u128 fresh = tat + nper;
        if (fresh <= room) return -1;
        d->kind = SLUICE_DROPPED;
        d->at = cost > r->burst || fresh > clock_end(r) ? SLUICE_NEVER : ceil_ns(r, fresh - r->bper);
        d->full = ceil_ns(r, tat);
    }
    return 0;
}

int sluice__fleet_quota_from(const struct sluice__fleet_rate *r, uint64_t cost, uint64_t t, fl_u128 tat,
                             sluice_quota_t *q) {
    fl_u128 ts = (fl_u128)t * r->limit;
    fl_u128 nper = (fl_u128)cost * r->per;
    if (tat < ts) return -1;
    fl_u128 room = ts + r->bper < clock_end(r) ? ts + r->bper : clock_end(r);
    fl_u128 fresh = tat + nper;
    q->burst = r->burst;
    q->remaining = tat >= room ? 0 : (uint64_t)((room - tat) / r->per);
    q->full = ceil_ns(r, tat);
    if (cost > r->burst || fresh > clock_end(r))
        q->retry = SLUICE_NEVER;
    else
        q->retry = fresh - ts > r->bper ? ceil_ns(r, fresh - r->bper) : t;
    return 0;
}

/* A key under several quotas (a plan): each quota's figures from its own TAT
 * (scaled by its limit), combined as the core combines them
 * (docs/semantics.md, "Several quotas on one key"). */
int sluice__fleet_plan_answer(const struct sluice__fleet_rate *q, uint32_t n, bool is_quota, uint64_t cost,
                              bool admitted, uint64_t t, const fl_u128 *tat, sluice_decision_t *d, sluice_quota_t *out,
                              sluice_plan_detail_t *det) {
    if (n < 1 || n > SLUICE_PLAN_QUOTAS_MAX) return -1;
    det->nquotas = n;
    det->refused = 0;
    uint64_t remaining = UINT64_MAX, full = t, retry = t, burst = UINT64_MAX;
    for (uint32_t j = 0; j < n; j++) {
        sluice_quota_t qq;
        sluice_quota_figures_t *fig = &det->quotas[j];
        fig->burst = q[j].burst;
        fig->limit = q[j].limit;
        fig->per_ns = q[j].per;
        if (sluice__fleet_quota_from(&q[j], cost, t, tat[j], &qq) != 0) return -1;
        if (admitted) {
            sluice_decision_t dj;
            if (sluice__fleet_call_decision(&q[j], cost, true, t, tat[j], &dj) != 0) return -1;
            qq.remaining = dj.remaining;
            qq.full = dj.full;
            qq.retry = t;
        } else if (qq.retry > t) {
            det->refused |= 1u << j;
        }
        fig->remaining = qq.remaining;
        fig->full = qq.full;
        fig->retry = qq.retry;
        if (qq.remaining < remaining) remaining = qq.remaining;
        if (qq.full > full) full = qq.full;
        if (qq.retry > retry) retry = qq.retry;
        if (q[j].burst < burst) burst = q[j].burst;
    }
    if (is_quota) {
        if (admitted) return -1;
        out->burst = burst;
        out->remaining = remaining;
        out->full = full;
        out->retry = retry;
        return 0;
    }
    memset(d, 0, sizeof *d);
    if (admitted) {
        d->kind = SLUICE_EMITTED;
        d->at = t;
        d->remaining = remaining;
        d->full = full;
        return 0;
    }
    if (det->refused == 0) return -1; /* a drop that no quota refused */
    d->kind = SLUICE_DROPPED;
    d->at = retry;
    d->full = full;
    return 0;
}
