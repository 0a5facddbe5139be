/*
 * fuzz_redis_url.c — libFuzzer harness for the fleet's Redis URL parser
 * (Sources/CSluiceFleet/redis-url.c and redis-url-write.c, libc only).
 *
 * Feeds the input, as a NUL-terminated string, to sluice__redis_url_parse().
 * A crash, a sanitizer report or a leak is a finding, and so is:
 *  - an error other than SLUICE_ESYNTAX, or a `why` that does not start with
 *    "redis URL: ", or is not terminated within its buffer;
 *  - a parsed address breaking an invariant: a host list for the TCP forms
 *    (one node for redis://) with non-empty hosts and ports 1..65535, a path
 *    for unix://, a master for sentinels, db in 0..2^31-1 and 0 in Cluster,
 *    a user only with a password, cert only with key, a secret that is empty;
 *  - a redacted form that does not parse back to the same fields (passwords
 *    given in the URL become "***"; those from the environment stay), when
 *    it is within the URL length limit (escapes and written ports lengthen
 *    it); a redacted form holding the password of the environment (unless
 *    the input itself does), or whose cut copies differ from its prefix.
 * The environment variable SLUICE_FUZZ_PW (set here) lets password_env=
 * succeed: the dictionary names it.
 *
 * Build and run (from the repository root):
 *   clang -std=c11 -g -O1 -D_POSIX_C_SOURCE=200809L -fsanitize=fuzzer,address,undefined \
 *     -I Sources/CSluice/include -I Sources/CSluiceFleet/include -I Sources/CSluiceFleet \
 *     Sources/CSluiceFleet/redis-url.c Sources/CSluiceFleet/redis-url-write.c \
 *     fuzz/fuzz_redis_url.c -o /tmp/fuzz_redis_url
 *   /tmp/fuzz_redis_url -max_total_time=60 -dict=fuzz/redis_url.dict fuzz/corpus/redis_url
 * (CMake's -DSLUICE_FUZZ=ON builds the same harness as fuzz_redis_url.)
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "redis-url.h"

#define ENV_PASSWORD "fuzz-env-secret"

static void finding(const char *what, const char *input) {
    fprintf(stderr, "fuzz_redis_url: %s (input: \"%s\")\n", what, input);
    abort();
}

static bool same(const char *a, const char *b) { return (a == NULL && b == NULL) || (a && b && strcmp(a, b) == 0); }

static bool nonempty_or_null(const char *s) { return s == NULL || s[0] != '\0'; }

static void check_invariants(const sluice__redis_url_t *u, const char *in) {
    if (u->topology == SLUICE__REDIS_UNIX) {
        if (!u->path || u->path[0] != '/' || u->n_nodes != 0) finding("unix without a path", in);
    } else {
        if (u->n_nodes == 0 || (u->topology == SLUICE__REDIS_SINGLE && u->n_nodes != 1)) finding("node count", in);
        for (size_t i = 0; i < u->n_nodes; i++)
            if (!u->nodes[i].host || !u->nodes[i].host[0] || u->nodes[i].port < 1 || u->nodes[i].port > 65535)
                finding("a node without host or port", in);
    }
    if ((u->topology == SLUICE__REDIS_SENTINEL) != (u->master != NULL)) finding("master", in);
    if (u->db < 0 || (u->topology == SLUICE__REDIS_CLUSTER && u->db != 0)) finding("db", in);
    if ((u->user && !u->password) || (u->sentinel_user && !u->sentinel_password)) finding("user without password", in);
    if ((u->tls.cert != NULL) != (u->tls.key != NULL)) finding("cert without key", in);
    if (!u->tls.tls && (u->tls.cacert || u->tls.cert || u->tls.sni || u->tls.insecure)) finding("TLS fields", in);
    if (!nonempty_or_null(u->password) || !nonempty_or_null(u->sentinel_password) || !nonempty_or_null(u->user))
        finding("an empty credential", in);
}

/* What a password is expected to be after the redacted round trip. */
static const char *redacted_password(const char *password, const char *env) {
    return env ? password : password ? "***" : NULL;
}

static void check_same_fields(const sluice__redis_url_t *a, const sluice__redis_url_t *b, const char *in) {
    bool ok = a->topology == b->topology && a->n_nodes == b->n_nodes && same(a->path, b->path) &&
              same(a->master, b->master) && same(a->user, b->user) && a->db == b->db && a->tls.tls == b->tls.tls &&
              a->tls.insecure == b->tls.insecure && same(a->tls.cacert, b->tls.cacert) &&
              same(a->tls.cert, b->tls.cert) && same(a->tls.key, b->tls.key) && same(a->tls.sni, b->tls.sni) &&
              same(a->password_env, b->password_env) && same(a->sentinel_user, b->sentinel_user) &&
              same(a->sentinel_password_env, b->sentinel_password_env) &&
              same(redacted_password(a->password, a->password_env), b->password) &&
              same(redacted_password(a->sentinel_password, a->sentinel_password_env), b->sentinel_password);
    for (size_t i = 0; ok && i < a->n_nodes; i++)
        ok = same(a->nodes[i].host, b->nodes[i].host) && a->nodes[i].port == b->nodes[i].port;
    if (!ok) finding("the redacted form parses to other fields", in);
}

static void check_redacted(const sluice__redis_url_t *u, const char *in) {
    size_t n = sluice__redis_url_write_redacted(u, NULL, 0);
    char *full = malloc(n + 1);
    if (!full) return;
    if (sluice__redis_url_write_redacted(u, full, n + 1) != n || strlen(full) != n) finding("redacted length", in);
    if (strstr(full, ENV_PASSWORD) && !strstr(in, ENV_PASSWORD))
        finding("the environment's password in the redacted form", in);
    char cut[16];
    size_t cap = n % sizeof cut + 1;
    if (sluice__redis_url_write_redacted(u, cut, cap) != n || strncmp(cut, full, cap - 1) != 0 ||
        strlen(cut) != (cap - 1 < n ? cap - 1 : n))
        finding("a cut redacted form is not a prefix", in);
    if (n > SLUICE__REDIS_URL_MAX) { /* escapes and default ports made it longer than a URL may be */
        free(full);
        return;
    }
    sluice__redis_url_t again;
    char why[256];
    if (sluice__redis_url_parse(full, &again, why, sizeof why) != 0) {
        fprintf(stderr, "redacted: \"%s\": %s\n", full, why);
        finding("the redacted form does not parse", in);
    }
    check_same_fields(u, &again, in);
    sluice__redis_url_free(&again);
    free(full);
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    setenv("SLUICE_FUZZ_PW", ENV_PASSWORD, 1);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size > SLUICE__REDIS_URL_MAX + 16) return 0;
    char *in = malloc(size + 1);
    if (!in) return 0;
    memcpy(in, data, size);
    in[size] = '\0';
    sluice__redis_url_t u;
    char why[128];
    memset(why, 'W', sizeof why);
    int rc = sluice__redis_url_parse(in, &u, why, sizeof why);
    if (rc == 0) {
        check_invariants(&u, in);
        check_redacted(&u, in);
        sluice__redis_url_free(&u);
    } else if (rc != SLUICE_ESYNTAX) {
        finding("an error other than SLUICE_ESYNTAX", in);
    } else if (!memchr(why, '\0', sizeof why) || strncmp(why, "redis URL: ", 11) != 0 ||
               (strstr(why, ENV_PASSWORD) && !strstr(in, ENV_PASSWORD))) {
        finding("a malformed why", in);
    }
    free(in);
    return 0;
}
