/* redis_server.h — a private redis-server for the fleet tests.
 *
 * test_redis_start() runs `redis-server` (the binary named by
 * $SLUICE_REDIS_SERVER, else the one on PATH) on a free 127.0.0.1 port with no
 * persistence (--save "" --appendonly no) in a fresh temporary folder, and
 * waits until it answers PING. test_redis_stop() ends it (SIGTERM, then
 * SIGKILL) and removes the folder. The server dies with the test process. */
#ifndef SLUICE_TEST_REDIS_SERVER_H
#define SLUICE_TEST_REDIS_SERVER_H

#include <stdbool.h>
#include <sys/types.h>

typedef struct test_redis {
    pid_t pid; /* 0 when not running */
    int port;
    char dir[64]; /* its working folder */
} test_redis_t;

/** Whether a redis-server binary can be found. */
bool test_redis_available(void);

/** Starts a server on a free port (port 0) or on `r->port` when it is not 0.
 *  @return 0, or -1 with a message on stderr. */
int test_redis_start(test_redis_t *r, int port);

/** Stops the server (SIGCONT first, in case it was stopped), waits for it. */
void test_redis_stop(test_redis_t *r);

/** Sends a signal to the server (SIGSTOP, SIGCONT, ...). */
void test_redis_signal(test_redis_t *r, int sig);

/** A free 127.0.0.1 TCP port (bound then released), or -1. */
int test_free_port(void);

/** Sends one inline command (for example "FLUSHALL") and reads one line back
 *  into `out` (may be NULL). @return 0 or -1. */
int test_redis_command(int port, const char *cmd, char *out, size_t out_len);

/* ---- servers with extra options (test_fleet_conn.c): Unix socket,
 * password, ACL users, TLS. */

typedef struct test_redis_opts {
    const char *unixsocket;  /* a Unix socket path (unixsocketperm 700); NULL: none */
    const char *requirepass; /* the default user's password; NULL: none */
    const char *acl_user;    /* an ACL rule list for `user`, e.g. "app on >secret ~* +@all"; NULL: none */
    bool tls;                /* TLS only: tls-port on the port, plain port 0 */
    bool tls_auth_clients;   /* TLS: clients must present a certificate */
    const char *tls_cert, *tls_key, *tls_ca; /* TLS: the server's files */
    /* Sentinel mode: these config lines (e.g. "sentinel monitor m 127.0.0.1
     * 6379 1\n") go into <dir>/sentinel.conf with port, bind, dir and
     * logfile, and the server runs as `redis-server FILE --sentinel` (it
     * rewrites the file). Ready when its log shows its Sentinel ID. The
     * other options are ignored. NULL: a plain server. */
    const char *sentinel_conf;
    /* Cluster mode: --cluster-enabled yes, its state in <dir>/nodes.conf (the
     * bus port is the port + 10000: a port above 55535 fails at start and
     * another one is tried). */
    bool cluster;
} test_redis_opts_t;

/** Starts a server as test_redis_start() does, with `o`'s options, on a free
 *  port (port 0) or `port`. Ready when its log says so (a TLS or
 *  password-protected port cannot be pinged as the plain start does).
 *  @return 0, or -1 with a message on stderr. */
int test_redis_start_opts(test_redis_t *r, int port, const test_redis_opts_t *o);

#endif
