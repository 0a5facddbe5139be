/* tls_certs.h — a throwaway CA, server and client certificate for the TLS
 * tests, made at test time with the `openssl` command (EC P-256 keys: fast). */
#ifndef SLUICE_TEST_TLS_CERTS_H
#define SLUICE_TEST_TLS_CERTS_H

#include <stdbool.h>

typedef struct test_tls_certs {
    char dir[64];                           /* a fresh temporary folder holding the files below */
    char ca[128];                           /* ca.crt: the CA that signed server.crt and client.crt */
    char other_ca[128];                     /* other-ca.crt: a CA that signed nothing here */
    char server_cert[128], server_key[128]; /* for localhost, IP 127.0.0.1 */
    char client_cert[128], client_key[128];
} test_tls_certs_t;

/** Whether the `openssl` command can be run. */
bool test_tls_available(void);

/** Makes the files. @return 0, or -1 with a message on stderr. */
int test_tls_make(test_tls_certs_t *t);

/** Removes the files and the folder. */
void test_tls_remove(test_tls_certs_t *t);

#endif
