/* tls_certs.c — see tls_certs.h. */
#ifndef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L
#endif
#ifndef _DEFAULT_SOURCE
#define _DEFAULT_SOURCE /* mkdtemp */
#endif

#include "tls_certs.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

bool test_tls_available(void) { return system("openssl version >/dev/null 2>&1") == 0; }

/* Runs one shell command in the folder; quiet unless it fails. */
static int run(const test_tls_certs_t *t, const char *cmd) {
    char line[1024];
    snprintf(line, sizeof line, "cd '%s' && %s >/dev/null 2>openssl.err", t->dir, cmd);
    if (system(line) == 0) return 0;
    fprintf(stderr, "openssl step failed: %s\n", cmd);
    snprintf(line, sizeof line, "cat '%s/openssl.err' >&2", t->dir);
    if (system(line) != 0) fprintf(stderr, "(no error output)\n");
    return -1;
}

#define EC "-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes"

int test_tls_make(test_tls_certs_t *t) {
    memset(t, 0, sizeof *t);
    snprintf(t->dir, sizeof t->dir, "/tmp/sluice-tls-XXXXXX");
    if (!mkdtemp(t->dir)) {
        perror("mkdtemp");
        t->dir[0] = '\0';
        return -1;
    }
    static const char *const steps[] = {
        "openssl req -x509 " EC " -keyout ca.key -out ca.crt -days 2 -subj /CN=sluice-test-ca",
        "openssl req -x509 " EC " -keyout other-ca.key -out other-ca.crt -days 2 -subj /CN=sluice-other-ca",
        "openssl req " EC " -keyout server.key -out server.csr -subj /CN=localhost",
        "openssl x509 -req -in server.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 2 -extfile server.ext "
        "-out server.crt",
        "openssl req " EC " -keyout client.key -out client.csr -subj /CN=sluice-test-client",
        "openssl x509 -req -in client.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 2 -out client.crt",
    };
    char ext[128];
    snprintf(ext, sizeof ext, "%s/server.ext", t->dir);
    FILE *f = fopen(ext, "w");
    if (!f || fputs("subjectAltName=DNS:localhost,IP:127.0.0.1\n", f) < 0 || fclose(f) != 0) {
        perror("server.ext");
        test_tls_remove(t);
        return -1;
    }
    for (size_t i = 0; i < sizeof steps / sizeof steps[0]; i++) {
        if (run(t, steps[i]) != 0) {
            test_tls_remove(t);
            return -1;
        }
    }
    snprintf(t->ca, sizeof t->ca, "%s/ca.crt", t->dir);
    snprintf(t->other_ca, sizeof t->other_ca, "%s/other-ca.crt", t->dir);
    snprintf(t->server_cert, sizeof t->server_cert, "%s/server.crt", t->dir);
    snprintf(t->server_key, sizeof t->server_key, "%s/server.key", t->dir);
    snprintf(t->client_cert, sizeof t->client_cert, "%s/client.crt", t->dir);
    snprintf(t->client_key, sizeof t->client_key, "%s/client.key", t->dir);
    return 0;
}

void test_tls_remove(test_tls_certs_t *t) {
    if (!t->dir[0]) return;
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", t->dir); /* our own mkdtemp folder */
    if (system(cmd) != 0) fprintf(stderr, "cannot remove %s\n", t->dir);
    t->dir[0] = '\0';
}
