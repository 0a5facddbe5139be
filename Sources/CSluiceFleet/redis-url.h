/*
 * redis-url.h — where and how to reach Redis, parsed from a URL (internal).
 *
 * Forms (user-facing documentation is docs/fleet.md):
 *   redis://[[USER]:PASSWORD@]HOST[:PORT][/DB][?query]
 *   rediss://[[USER]:PASSWORD@]HOST[:PORT][/DB][?cacert=PATH&cert=PATH&key=PATH&sni=NAME&insecure=1]
 *   unix:///PATH[?db=N&user=U&password=P]
 *   redis+sentinel://[[USER]:PASSWORD@]H1:P1[,H2:P2...]/MASTERNAME[/DB][?query]
 *   redis+cluster://[[USER]:PASSWORD@]H1:P1[,H2:P2...][?query]
 *   HOST[:PORT]  (no scheme: taken as redis://HOST[:PORT])
 * The `rediss+sentinel://` and `rediss+cluster://` forms are the same over TLS.
 * Query parameters on every form: db=N, password_env=NAME; TLS forms:
 * cacert, cert, key, sni, insecure; unix: user, password; sentinel forms:
 * sentinel_user, sentinel_password, sentinel_password_env. Default ports:
 * 6379 (servers, cluster seeds), 26379 (sentinels).
 *
 * The parser uses libc alone (no hiredis, no libevent) so that
 * fuzz/fuzz_redis_url.c can build it by itself.
 */
#ifndef SLUICE_REDIS_URL_H
#define SLUICE_REDIS_URL_H

#include <stdbool.h>
#include <stddef.h>

#include "fleet-internal.h"

/** How the address reaches Redis. */
typedef enum sluice__redis_topology {
    SLUICE__REDIS_SINGLE = 1,   /**< one server over TCP (or TLS) */
    SLUICE__REDIS_UNIX = 2,     /**< one server over a Unix socket (`path`) */
    SLUICE__REDIS_SENTINEL = 3, /**< `nodes` are sentinels; the primary of `master` is the server */
    SLUICE__REDIS_CLUSTER = 4   /**< `nodes` are seeds of a Redis Cluster */
} sluice__redis_topology_t;

/** A host and port. `host` is a name or a numeric address (IPv6 without brackets). */
typedef struct sluice__redis_node {
    char *host;
    int port;
} sluice__redis_node_t;

/** TLS settings (`tls` false: plain TCP). Paths are NULL when not given. */
typedef struct sluice__redis_tls {
    bool tls;
    bool insecure; /**< skip certificate verification (insecure=1) */
    char *cacert;  /**< CA bundle to verify the server; NULL = the system's */
    char *cert;    /**< client certificate (mTLS), with `key` */
    char *key;
    char *sni; /**< server name sent and verified; NULL = the host */
} sluice__redis_tls_t;

/** A parsed address. Every string is owned (freed by sluice__redis_url_free()). */
typedef struct sluice__redis_url {
    sluice__redis_topology_t topology;
    sluice__redis_node_t *nodes; /**< SINGLE: one; SENTINEL: the sentinels; CLUSTER: the seeds */
    size_t n_nodes;
    char *path;     /**< UNIX: the socket's path */
    char *master;   /**< SENTINEL: the master name */
    char *user;     /**< ACL user for AUTH; NULL = none (legacy AUTH PASSWORD) */
    char *password; /**< NULL = no AUTH. Secret: never printed, logged or put in an error */
    int db;         /**< SELECT on every connection when > 0 (not in CLUSTER) */
    sluice__redis_tls_t tls;
    /* Where the passwords came from, and the sentinels' own credentials: */
    char *password_env;          /**< the variable `password` was read from (password_env=), or NULL */
    char *sentinel_user;         /**< SENTINEL: ACL user for AUTH to the sentinels; NULL = none */
    char *sentinel_password;     /**< SENTINEL: password for the sentinels; NULL = no AUTH. Secret */
    char *sentinel_password_env; /**< the variable `sentinel_password` was read from, or NULL */
} sluice__redis_url_t;

/** Longest URL accepted, in bytes (without the NUL). */
#define SLUICE__REDIS_URL_MAX 4096

/**
 * Parses `url` into `out` (zeroed first). Percent-escapes are decoded in the
 * user, password, path, master name and query values.
 *
 * @param why on error, receives a NUL-terminated sentence naming the offending
 *        part (never the password), at most `why_len` bytes; may be NULL.
 * @return 0, SLUICE_ESYNTAX (malformed: `why` says which part) or SLUICE_ENOMEM;
 *         `out` holds nothing to free on error.
 */
SLUICE_FLEET_HIDDEN int sluice__redis_url_parse(const char *url, sluice__redis_url_t *out, char *why, size_t why_len);

/** A deep copy of `s` into `d` (zeroed first), freed by
 *  sluice__redis_url_free(); without `data_credentials` the data nodes'
 *  user and password are left out (a copy for the sentinels).
 *  @return 0 or SLUICE_ENOMEM (nothing to free then). */
SLUICE_FLEET_HIDDEN int sluice__redis_url_copy(sluice__redis_url_t *d, const sluice__redis_url_t *s,
                                               bool data_credentials);

/** Zeroes `n` bytes at `p` in a way the compiler cannot drop (a secret about
 *  to be freed). */
SLUICE_FLEET_HIDDEN void sluice__fleet_wipe(void *p, size_t n);

/** Frees what sluice__redis_url_parse() allocated (the password is wiped first) and zeroes `u`. */
SLUICE_FLEET_HIDDEN void sluice__redis_url_free(sluice__redis_url_t *u);

/**
 * Writes `u` as a URL that parses back to the same fields, except that a
 * password given in the URL is written as `***` (one read through
 * password_env is written as password_env=NAME). The form is canonical:
 * scheme in lower case, every port written, escapes where needed.
 * Like snprintf: writes at most `out_len` bytes, NUL included (nothing when
 * `out_len` is 0, `out` may then be NULL).
 *
 * @return the length of the whole form (without the NUL): the output was
 *         truncated when it is >= out_len.
 */
SLUICE_FLEET_HIDDEN size_t sluice__redis_url_write_redacted(const sluice__redis_url_t *u, char *out, size_t out_len);

/**
 * Tests only: the allocator of the parser (NULL: malloc/free, the default).
 * Process-wide and not synchronised: set it while no other thread parses.
 */
SLUICE_FLEET_HIDDEN void sluice__redis_url_set_allocator(const sluice_allocator_t *a);

#endif
