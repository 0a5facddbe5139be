/*
 * redis_run.c — see redis_run.h. Steps are pipelined (a window of requests
 * in flight on the one connection, which Redis runs in order), answers kept
 * per step, then printed in step order by the trace library's
 * sluice_trace_print_answers(), which prints them as the local run does: a
 * rate call is decided at once (emit or drop), a quota line prints its peek,
 * `pending` is always "no", and cancel, flush and close print nothing.
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

void sluice_trace_redis_prefix(char *buf, size_t cap) {
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    snprintf(buf, cap, "sluice-trace:%ld:%lld.%09ld", (long)getpid(), (long long)now.tv_sec, now.tv_nsec);
}

int sluice_trace_redis_main(const sluice_trace_t *trace, const char *addr, sluice_trace_output_fn on_output,
                            void *user) {
    sluice_policy_t policy = sluice_trace_policy(trace);
    /* a URL, or HOST:PORT (which the URL parser takes as redis://HOST:PORT) */
    char why[256];
    if (sluice_fleet_check_url(addr, why, sizeof why) != 0) {
        fprintf(stderr, "error: --redis: %s\n", why); /* never echoes a password */
        return 64;
    }
    if (policy.kind != SLUICE_RATE) return sluice_trace_redis_timed(trace, addr, on_output, user);
    const sluice_plans_t *plans = sluice_trace_plans(trace); /* v3: several quotas, plans */

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
    sluice_trace_redis_prefix(prefix, sizeof prefix);
    sluice_fleet_config_t c;
    memset(&c, 0, sizeof c);
    c.policy = plans ? sluice_rate_plans() : policy;
    c.plans = plans;
    c.url = addr;
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
        fprintf(stderr, "error: fleet limiter: %s\n", sluice_strerror(rc)); /* ETLS: a CA, cert or key file */
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
            case SLUICE_TRACE_CALL:
                rc = plans ? sluice_fleet_call_plan(f, key, st.plan, st.cost, t, on_result, s)
                           : sluice_fleet_call(f, key, st.cost, t, on_result, s);
                break;
            case SLUICE_TRACE_QUOTA:
                rc = plans ? sluice_fleet_quota_plan(f, key, st.plan, st.cost, t, on_result, s)
                           : sluice_fleet_quota(f, key, st.cost, t, on_result, s);
                break;
            case SLUICE_TRACE_CANCEL: rc = sluice_fleet_cancel(f, key, t, on_result, s); break;
            default: /* flush, pending, close: nothing to ask Redis */
                s->done = 1;
                rc = 0;
                break;
            }
            if (rc != 0) {
                fprintf(stderr, "error: line %zu: %s\n", st.line, sluice_strerror(rc));
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
            bool asked =
                st.verb == SLUICE_TRACE_CALL || st.verb == SLUICE_TRACE_QUOTA || st.verb == SLUICE_TRACE_CANCEL;
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
        char shown[512]; /* the address without its password */
        if (sluice_fleet_redact_url(addr, shown, sizeof shown) < 0) snprintf(shown, sizeof shown, "(the address)");
        char detail[256] = "";
        sluice_fleet_last_error(f, detail, sizeof detail); /* the connection's own words, when it has them */
        if (why == SLUICE_ENOTCONN)
            fprintf(stderr, "error: cannot reach Redis at %s: %s%s%s\n", shown, sluice_strerror(why),
                    detail[0] ? ": " : "", detail);
        else
            fprintf(stderr, "error: Redis at %s did not decide line %zu: %s%s%s\n", shown, failed_line,
                    sluice_strerror(why), detail[0] ? ": " : "", detail);
        status = SLUICE_TRACE_EXIT_REDIS;
        goto out;
    }

    /* print, in step order, what the local run prints (the trace library's
     * sluice_trace_print_answers(): a call emits or drops at once, `pending`
     * is always "no" for a rate policy, and cancel, flush and close print
     * nothing) */
    sluice_trace_answer_t *answers = calloc(n ? n : 1, sizeof *answers);
    if (!answers) {
        fprintf(stderr, "error: out of memory\n");
        status = 1;
        goto out;
    }
    for (size_t i = 0; i < n; i++) {
        answers[i].emitted = slots[i].res.decision.kind == SLUICE_EMITTED;
        answers[i].quota = slots[i].res.quota;
        answers[i].detail = slots[i].res.detail;
    }
    sluice_trace_run_options_t opt;
    memset(&opt, 0, sizeof opt);
    opt.on_output = on_output;
    opt.user = user;
    rc = sluice_trace_print_answers(trace, answers, &opt, NULL);
    free(answers);
    if (rc != SLUICE_OK) {
        fprintf(stderr, "error: %s\n", sluice_strerror(rc));
        status = rc == SLUICE_ENOMEM ? 1 : 64;
    }

out:
    sluice_fleet_free(f); /* answers what is left (SLUICE_ECLOSED) */
    event_base_free(base);
    free(slots);
    return status;
}
