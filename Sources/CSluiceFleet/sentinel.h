/*
 * sentinel.h — Redis Sentinel discovery for the fleet's data connection
 * (internal).
 *
 * Design: the fleet keeps ONE data connection (conn.h) for a Sentinel
 * address as for any other; this object is that connection's resolver
 * (sluice__conn_opts_t.resolve). Every connection attempt, the first one, a
 * reconnect after a drop, a READONLY/MASTERDOWN reply or a failed ROLE check
 * alike, starts by asking the sentinels in turn
 *   SENTINEL get-master-addr-by-name MASTERNAME
 * and goes to the address the first one names. So the fleet never returns to
 * an old primary by itself: a reconnect is a rediscovery. The data
 * connection also checks ROLE (check_primary) before it is ready, because a
 * sentinel that lags may still name a demoted node: that attempt fails and
 * the next one, after the backoff, asks again.
 *
 * The sentinel that answered is kept as a subscriber to `+switch-master`
 * (its own connection, reconnecting by itself). A message for our master name
 * drops the data connection at once (SLUICE_EREADONLY: the old primary no
 * longer takes writes): the requests it holds are answered by the failure
 * policy with that cause, and the reconnect, 10-20 ms later, rediscovers.
 *
 * Sentinels get the sentinel credentials (sentinel_user, sentinel_password)
 * and the address's TLS settings (the same CA, client certificate and SNI as
 * the data node); never the data credentials or the db.
 *
 * Outcome of a round that found no address, as the attempt's error:
 * SLUICE_ENOMASTER when a sentinel answered that it knows no such master
 * (the message names the master, never a password); else the refusal of a
 * sentinel's setup (SLUICE_EAUTH for a wrong sentinel password, ...); else
 * SLUICE_ENOTCONN ("no sentinel answered ...").
 *
 * Loop thread only, like the connection.
 */
#ifndef SLUICE_SENTINEL_H
#define SLUICE_SENTINEL_H

#include <stdint.h>

#include "conn.h"
#include "redis-url.h"

typedef struct sluice__sentinel sluice__sentinel_t;

/**
 * Creates the resolver of a SENTINEL address (copied: sentinels, master name,
 * sentinel credentials, TLS). Connects to nothing until asked.
 *
 * @param timeout_ns the data connection's connect timeout: each sentinel
 *        gets a share of it, so a round ends within it.
 * @return 0, SLUICE_EINVAL (not a SENTINEL address, no master name),
 *         SLUICE_ETLS (TLS files: `why` says which), SLUICE_ENOMEM.
 */
SLUICE_FLEET_HIDDEN int sluice__sentinel_new(sluice__sentinel_t **out, struct event_base *base,
                                             const sluice__redis_url_t *url, uint64_t timeout_ns, char *why,
                                             size_t why_len);

/** The resolver function to put in sluice__conn_opts_t.resolve, with the
 *  sentinel object as `resolver`. */
SLUICE_FLEET_HIDDEN void sluice__sentinel_resolve(void *resolver, sluice__conn_t *data, uint64_t ticket);

/** Frees it and its connections. Before the data connection is freed, not
 *  inside a connection callback. */
SLUICE_FLEET_HIDDEN void sluice__sentinel_free(sluice__sentinel_t *s);

#endif
