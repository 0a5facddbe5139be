/*
 * redis-url.h — where and how to reach Redis, parsed from a URL (internal).
 *
 * Forms (user-facing documentation is docs/fleet.md):
 *   redis://[[USER]:PASSWORD@]HOST[:PORT][/DB][?query]
 *   rediss://[[USER]:PASSWORD@]HOST[:PORT][/DB][?cacert=PATH&cert=PATH&key=PATH&sni=NAME&insecure=1]
 *   unix:///PATH[?db=N&user=U&password=P]
 *   redis+sentinel://[[USER]:PASSWORD@]H1:P1[,H2:P2...]/MASTERNAME[/DB][?query]
 *   redis+cluster://[[USER]:PASSWORD@]H1:P1[,H2:P2...][?query]
 * The `rediss+sentinel://` and `rediss+cluster://` forms are the same over TLS.
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
} sluice__redis_url_t;

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

/** Frees what sluice__redis_url_parse() allocated (the password is wiped first) and zeroes `u`. */
SLUICE_FLEET_HIDDEN void sluice__redis_url_free(sluice__redis_url_t *u);

#endif
