/*
 * consumer.c — a program built against an *installed* Sluice (see
 * cmake/test_install.cmake): it includes <sluice.h> from the install prefix,
 * links libsluice (shared or static) and makes a few calls through the
 * public API only.
 *
 * Prints "sluice VERSION" and exits 0 when everything behaves.
 */
#include <sluice.h>

#include <stdio.h>
#include <string.h>

#define MS UINT64_C(1000000)

static int failures;

#define CHECK(cond)                                                                                                    \
    do {                                                                                                               \
        if (!(cond)) {                                                                                                 \
            fprintf(stderr, "consumer: check failed at line %d: %s\n", __LINE__, #cond);                               \
            failures++;                                                                                                \
        }                                                                                                              \
    } while (0)

struct events {
    int emits;
    int others;
    uint64_t token;
    uint64_t at;
};

static void on_event(void *user, const sluice_event_t *event) {
    struct events *seen = user;
    if (event->kind == SLUICE_EVENT_EMIT) {
        seen->emits++;
        seen->token = event->token;
        seen->at = event->at;
    } else {
        seen->others++;
    }
}

int main(void) {
    const char *version = sluice_version();
    CHECK(version != NULL);
    if (version == NULL) return 1;
    printf("sluice %s\n", version);
    /* The header and the library come from the same release. */
    CHECK(strcmp(version, SLUICE_VERSION_STRING) == 0);

    const char *text = sluice_strerror(SLUICE_EFULL);
    CHECK(text != NULL && text[0] != '\0');

    struct events seen = { 0, 0, 0, 0 };
    sluice_config_t config;
    memset(&config, 0, sizeof config);
    config.policy = sluice_throttle((int64_t)(100 * MS), true, true, SLUICE_PICK_LATEST);
    config.on_event = on_event;
    config.user = &seen;

    sluice_limiter_t *limiter = NULL;
    int rc = sluice_limiter_new(&limiter, &config);
    CHECK(rc == 0 && limiter != NULL);
    if (rc != 0 || limiter == NULL) {
        fprintf(stderr, "consumer: sluice_limiter_new: %s\n", sluice_strerror(rc));
        return 1;
    }

    static const char key[] = "user:42";
    sluice_decision_t decision;

    /* The first call of a window is emitted at once (leading edge)... */
    rc = sluice_limiter_submit(limiter, sluice_key_bytes(key, sizeof key - 1), 1, 0, &decision);
    CHECK(rc == 0);
    CHECK(decision.kind == SLUICE_EMITTED);

    /* ...the next one inside the window waits for its end (trailing edge). */
    rc = sluice_limiter_submit(limiter, sluice_key_bytes(key, sizeof key - 1), 2, 50 * MS, &decision);
    CHECK(rc == 0);
    CHECK(decision.kind == SLUICE_SCHEDULED);
    CHECK(decision.at == 100 * MS);
    CHECK(sluice_limiter_pending(limiter, sluice_key_bytes(key, sizeof key - 1), 60 * MS) == 1);

    int64_t fired = sluice_limiter_advance(limiter, 200 * MS, 0);
    CHECK(fired >= 1);
    CHECK(seen.emits == 1 && seen.token == 2 && seen.at == 100 * MS);
    CHECK(seen.others == 0);

    CHECK(sluice_limiter_check(limiter) == 0);
    sluice_limiter_free(limiter);

    return failures == 0 ? 0 : 1;
}
