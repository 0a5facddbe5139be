/*
 * test_trace_answers.c — sluice_trace_print_answers() (sluice_trace.h), the
 * printer `sluice-trace --redis` uses: given the decisions the manual runner
 * made, it prints the very lines sluice_trace_run() printed; and it refuses
 * what it cannot print (no trace, no answers, a policy that is not rate).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sluice.h"
#include "sluice_trace.h"

static int failures;

#define CHECK(cond)                                                                                                    \
    do {                                                                                                               \
        if (!(cond)) {                                                                                                 \
            fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond);                                   \
            failures++;                                                                                                \
        }                                                                                                              \
    } while (0)

struct lines {
    char text[64][96];
    size_t n;
    sluice_trace_answer_t *answers; /* filled from a run's lines when set */
};

static void collect(void *user, const sluice_trace_output_t *o) {
    struct lines *l = user;
    if (l->n < 64) snprintf(l->text[l->n++], sizeof l->text[0], "%s", o->text);
    if (!l->answers) return;
    if (o->kind == SLUICE_TRACE_OUT_EMIT || o->kind == SLUICE_TRACE_OUT_DROP)
        l->answers[o->step].emitted = o->kind == SLUICE_TRACE_OUT_EMIT;
    if (o->kind == SLUICE_TRACE_OUT_QUOTA) {
        sluice_quota_t *q = &l->answers[o->step].quota;
        q->remaining = o->remaining;
        q->full = o->full_ms * SLUICE_TRACE_NS_PER_MS;
        q->retry = o->retry_never ? SLUICE_NEVER : o->retry_ms * SLUICE_TRACE_NS_PER_MS;
    }
}

static const char rate_trace[] = "policy rate limit=2 per=1000\n"
                                 "0 call a x\n"
                                 "0 call a y\n"
                                 "0 call b p cost=2\n"
                                 "0 call a z\n"
                                 "0 pending a\n"
                                 "0 quota a\n"
                                 "0 quota b cost=3\n"
                                 "250 flush a\n"
                                 "500 call a w\n"
                                 "501 cancel a\n"
                                 "600 quota a\n"
                                 "700 close drain\n";

int main(void) {
    sluice_trace_t *t = NULL;
    sluice_trace_error_t err;
    CHECK(sluice_trace_parse(rate_trace, sizeof rate_trace - 1, &t, &err) == SLUICE_OK);
    if (!t) return 1;
    size_t n = sluice_trace_step_count(t);
    sluice_trace_answer_t *answers = calloc(n, sizeof *answers);
    struct lines *ran = calloc(1, sizeof *ran), *printed = calloc(1, sizeof *printed);
    if (!answers || !ran || !printed) return 1;

    /* the manual run's lines, and its decisions as answers */
    ran->answers = answers;
    sluice_trace_run_options_t opt;
    memset(&opt, 0, sizeof opt);
    opt.on_output = collect;
    opt.user = ran;
    CHECK(sluice_trace_run(t, &opt, NULL) == SLUICE_OK);
    CHECK(ran->n == 9);

    /* the same answers print the same lines */
    opt.user = printed;
    sluice_trace_run_result_t res;
    CHECK(sluice_trace_print_answers(t, answers, &opt, &res) == SLUICE_OK);
    CHECK(res.lines == ran->n && res.message[0] == '\0');
    CHECK(printed->n == ran->n);
    for (size_t i = 0; i < ran->n && i < printed->n; i++) {
        if (strcmp(ran->text[i], printed->text[i]) != 0) {
            fprintf(stderr, "line %zu: run '%s', answers '%s'\n", i, ran->text[i], printed->text[i]);
            failures++;
        }
    }
    CHECK(printed->n > 5 && strcmp(printed->text[5], "0 quota a remaining=0 full=1000 retry=500") == 0);

    /* refusals */
    CHECK(sluice_trace_print_answers(NULL, answers, &opt, &res) == SLUICE_EINVAL);
    CHECK(sluice_trace_print_answers(t, NULL, &opt, &res) == SLUICE_EINVAL);
    static const char throttle_trace[] = "policy throttle interval=10\n0 call a x\n";
    sluice_trace_t *th = NULL;
    CHECK(sluice_trace_parse(throttle_trace, sizeof throttle_trace - 1, &th, &err) == SLUICE_OK);
    printed->n = 0;
    CHECK(sluice_trace_print_answers(th, answers, &opt, &res) == SLUICE_EINVAL);
    CHECK(printed->n == 0 && res.message[0] != '\0');

    sluice_trace_free(th);
    sluice_trace_free(t);
    free(answers);
    free(ran);
    free(printed);
    if (failures) fprintf(stderr, "test_trace_answers: %d check(s) failed\n", failures);
    return failures ? 1 : 0;
}
