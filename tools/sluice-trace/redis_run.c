/*
 * redis_run.c — see redis_run.h. Steps are pipelined (a window of requests
 * in flight on the one connection, which Redis runs in order), answers kept
 * per step, then printed in step order exactly as the local runner formats
 * them: a rate call is decided at once (emit or drop), a quota line prints
 * its peek, `pending` is always "no", and cancel, flush and close print
 * nothing for a rate policy.
 */
#ifndef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L
#endif

#include "redis_run.h"

#include <event2/event.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "sluice_fleet.h"

#define NS_PER_MS 1000000ull
#define WINDOW 256

struct slot {
    int done;
    sluice_fleet_result_t res;
};

struct run {
    struct slot *slots;
    size_t answered;
};

static void on_result(void *user, const sluice_fleet_result_t *res) {
    struct slot *s = user;
    s->done++;
    s->res = *res;
}

static uint64_t ceil_ms(uint64_t ns) { return ns / NS_PER_MS + (ns % NS_PER_MS != 0); }

int sluice_trace_redis_main(const sluice_trace_t *trace, const char *addr, sluice_trace_output_fn on_output,
                            void *user) {
    sluice_policy_t policy = sluice_trace_policy(trace);
    if (policy.kind != SLUICE_RATE) {
        fprintf(stderr, "error: --redis runs rate policies only\n");
        return 64;
    }
    const char *colon = strrchr(addr, ':');
    char host[256];
    char *end = NULL;
    long port = colon ? strtol(colon + 1, &end, 10) : 0;
    if (!colon || colon == addr || (size_t)(colon - addr) >= sizeof host || !end || *end || port < 1 ||
        port > 65535) {
        fprintf(stderr, "error: --redis wants HOST:PORT (got '%s')\n", addr);
        return 64;
    }
    memcpy(host, addr, (size_t)(colon - addr));
    host[colon - addr] = '\0';

    size_t n = sluice_trace_step_count(trace);
    struct slot *slots = calloc(n ? n : 1, sizeof *slots);
    struct event_base *base = event_base_new();
    if (!slots || !base) {
        free(slots);
        if (base) event_base_free(base);
        fprintf(stderr, "error: out of memory\n");
        return 1;
    }
    char prefix[96];
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    snprintf(prefix, sizeof prefix, "sluice-trace:%ld:%lld.%09ld", (long)getpid(), (long long)now.tv_sec,
             now.tv_nsec);
    sluice_fleet_config_t c;
    memset(&c, 0, sizeof c);
    c.policy = policy;
    c.host = host;
    c.port = (int)port;
    c.prefix = prefix;
    c.prefix_len = strlen(prefix);
    c.manual_time = true;
    c.timeout_ns = 3000 * NS_PER_MS;
    c.on_failure = SLUICE_FLEET_FAIL_CLOSED;
    c.manual_ttl_extra_ms = 60000;
    sluice_fleet_t *f = NULL;
    int rc = sluice_fleet_new(&f, base, &c);
    if (rc != 0) {
        free(slots);
        event_base_free(base);
        fprintf(stderr, "error: fleet limiter: %s\n", sluice_fleet_strerror(rc));
        return rc == SLUICE_ENOMEM ? 1 : 64;
    }

    /* submit with a window of requests in flight, in step order */
    size_t next = 0, done = 0;
    int status = 0;
    const sluice_fleet_result_t *failed = NULL;
    size_t failed_line = 0;
    while (done < n && !failed) {
        while (next < n && next - done < WINDOW) {
            sluice_trace_step_t st;
            sluice_trace_step(trace, next, &st);
            sluice_key_t key = sluice_key_bytes(st.key, st.key_len);
            uint64_t t = st.time_ms * NS_PER_MS;
            struct slot *s = &slots[next];
            switch (st.verb) {
            case SLUICE_TRACE_CALL: rc = sluice_fleet_call(f, key, st.cost, t, on_result, s); break;
            case SLUICE_TRACE_QUOTA: rc = sluice_fleet_quota(f, key, st.cost, t, on_result, s); break;
            case SLUICE_TRACE_CANCEL: rc = sluice_fleet_cancel(f, key, t, on_result, s); break;
            default: /* flush, pending, close: nothing to ask Redis */
                s->done = 1;
                rc = 0;
                break;
            }
            if (rc != 0) {
                fprintf(stderr, "error: line %zu: %s\n", st.line, sluice_fleet_strerror(rc));
                status = rc == SLUICE_ENOMEM ? 1 : SLUICE_TRACE_EXIT_REDIS;
                goto out;
            }
            next++;
        }
        event_base_loop(base, EVLOOP_ONCE);
        while (done < next && slots[done].done) {
            const sluice_fleet_result_t *r = &slots[done].res;
            sluice_trace_step_t st;
            sluice_trace_step(trace, done, &st);
            bool asked = st.verb == SLUICE_TRACE_CALL || st.verb == SLUICE_TRACE_QUOTA || st.verb == SLUICE_TRACE_CANCEL;
            if (asked && (r->status != 0 || r->source == SLUICE_FLEET_SOURCE_FAILURE)) {
                failed = r;
                failed_line = st.line;
                break;
            }
            done++;
        }
    }
    if (failed) {
        int why = failed->status ? failed->status : failed->cause;
        if (why == SLUICE_FLEET_ENOTCONN)
            fprintf(stderr, "error: cannot reach Redis at %s: %s\n", addr, sluice_fleet_strerror(why));
        else
            fprintf(stderr, "error: Redis at %s did not decide line %zu: %s\n", addr, failed_line,
                    sluice_fleet_strerror(why));
        status = SLUICE_TRACE_EXIT_REDIS;
        goto out;
    }

    /* print, in step order, what the local run prints */
    for (size_t i = 0; i < n; i++) {
        sluice_trace_step_t st;
        sluice_trace_step(trace, i, &st);
        sluice_trace_output_t o;
        memset(&o, 0, sizeof o);
        o.time_ms = st.time_ms;
        o.step = i;
        o.key = st.key;
        o.key_len = st.key_len;
        size_t cap = 128 + st.key_len + st.value_len;
        char *buf = malloc(cap);
        if (!buf) {
            fprintf(stderr, "error: out of memory\n");
            status = 1;
            goto out;
        }
        int k = -1;
        const sluice_fleet_result_t *r = &slots[i].res;
        if (st.verb == SLUICE_TRACE_CALL) {
            bool emit = r->decision.kind == SLUICE_EMITTED;
            o.kind = emit ? SLUICE_TRACE_OUT_EMIT : SLUICE_TRACE_OUT_DROP;
            o.value = st.value;
            o.value_len = st.value_len;
            k = snprintf(buf, cap, "%llu %s %.*s %.*s", (unsigned long long)st.time_ms, emit ? "emit" : "drop",
                         (int)st.key_len, st.key, (int)st.value_len, st.value);
        } else if (st.verb == SLUICE_TRACE_PENDING) {
            o.kind = SLUICE_TRACE_OUT_PENDING;
            k = snprintf(buf, cap, "%llu pending %.*s no", (unsigned long long)st.time_ms, (int)st.key_len, st.key);
        } else if (st.verb == SLUICE_TRACE_QUOTA) {
            o.kind = SLUICE_TRACE_OUT_QUOTA;
            o.remaining = r->quota.remaining;
            o.full_ms = ceil_ms(r->quota.full);
            o.retry_never = r->quota.retry == SLUICE_NEVER;
            o.retry_ms = o.retry_never ? SLUICE_TRACE_NEVER : ceil_ms(r->quota.retry);
            char retry[32];
            if (o.retry_never) snprintf(retry, sizeof retry, "never");
            else snprintf(retry, sizeof retry, "%llu", (unsigned long long)o.retry_ms);
            k = snprintf(buf, cap, "%llu quota %.*s remaining=%llu full=%llu retry=%s", (unsigned long long)st.time_ms,
                         (int)st.key_len, st.key, (unsigned long long)o.remaining, (unsigned long long)o.full_ms,
                         retry);
        }
        if (k >= 0) {
            o.text = buf;
            o.text_len = (size_t)k;
            if (on_output) on_output(user, &o);
        }
        free(buf);
    }

out:
    sluice_fleet_free(f); /* answers what is left (SLUICE_ECLOSED) */
    event_base_free(base);
    free(slots);
    return status;
}
