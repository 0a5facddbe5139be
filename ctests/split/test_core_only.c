/* test_core_only.c — the core stands alone.
 *
 * Built and linked against libsluice-core only (CMake target
 * sluice_core_static, nothing else on the link line: no libevent, no
 * pthreads; cmake/check_core_only.cmake checks the link line and the
 * libraries). Runs a throttle with both edges on a manual clock and checks
 * every token's fate, so a core that needed the loop layer or libevent
 * would fail to link, and one that misbehaved would fail here. */
#include <sluice.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MS UINT64_C(1000000)

static int failures;

#define CHECK(cond)                                                                                                    \
    do {                                                                                                               \
        if (!(cond)) {                                                                                                 \
            fprintf(stderr, "test_core_only: line %d: %s\n", __LINE__, #cond);                                         \
            failures++;                                                                                                \
        }                                                                                                              \
    } while (0)

struct seen {
    int n;
    sluice_event_kind_t kind[8];
    uint64_t token[8], at[8];
};

static void on_event(void *user, const sluice_event_t *ev) {
    struct seen *s = user;
    if (s->n < 8) {
        s->kind[s->n] = ev->kind;
        s->token[s->n] = ev->token;
        s->at[s->n] = ev->at;
    }
    s->n++;
}

int main(void) {
    struct seen seen;
    memset(&seen, 0, sizeof seen);
    sluice_config_t cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.policy = sluice_throttle((int64_t)(100 * MS), true, true, SLUICE_PICK_LATEST);
    cfg.on_event = on_event;
    cfg.user = &seen;
    sluice_limiter_t *l = NULL;
    int rc = sluice_limiter_new(&l, &cfg);
    if (rc != 0) {
        fprintf(stderr, "test_core_only: sluice_limiter_new: %s\n", sluice_strerror(rc));
        return 1;
    }
    sluice_key_t key = sluice_key_bytes("user:42", 7);
    sluice_decision_t d;
    CHECK(sluice_limiter_submit(l, key, 1, 0, &d) == 0 && d.kind == SLUICE_EMITTED);
    CHECK(sluice_limiter_submit(l, key, 2, 40 * MS, &d) == 0 && d.kind == SLUICE_SCHEDULED && d.at == 100 * MS);
    CHECK(sluice_limiter_submit(l, key, 3, 60 * MS, &d) == 0 && d.kind == SLUICE_SCHEDULED);
    CHECK(seen.n == 1 && seen.kind[0] == SLUICE_EVENT_DROP && seen.token[0] == 2 && seen.at[0] == 60 * MS);
    CHECK(sluice_limiter_next_deadline(l) <= 100 * MS);
    CHECK(sluice_limiter_advance(l, 99 * MS, 0) >= 0 && seen.n == 1); /* never early */
    CHECK(sluice_limiter_advance(l, 200 * MS, 0) >= 1);
    CHECK(seen.n == 2 && seen.kind[1] == SLUICE_EVENT_EMIT && seen.token[1] == 3 && seen.at[1] == 100 * MS);
    /* later, idle again: a new window; its pending value is discarded at close */
    CHECK(sluice_limiter_submit(l, key, 4, 500 * MS, &d) == 0 && d.kind == SLUICE_EMITTED);
    CHECK(sluice_limiter_submit(l, key, 5, 510 * MS, &d) == 0 && d.kind == SLUICE_SCHEDULED && d.at == 600 * MS);
    CHECK(sluice_limiter_close(l, 520 * MS, SLUICE_CLOSE_DISCARD) == 0);
    CHECK(seen.n == 3 && seen.kind[2] == SLUICE_EVENT_DISCARD && seen.token[2] == 5);
    CHECK(sluice_limiter_check(l) == 0);
    sluice_limiter_free(l);
    if (failures) return 1;
    printf("core only: throttle ok (sluice %s, no loop layer linked)\n", sluice_version());
    return 0;
}
