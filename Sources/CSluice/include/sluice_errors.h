/*
 * sluice_errors.h — the one list of Sluice's error codes.
 *
 * Each line is X(NAME, VALUE, MESSAGE): the C constant SLUICE_<NAME>, its
 * value, and the sentence sluice_strerror() returns for it. Every module
 * returns these codes: the core, the loop layer, the trace library and the
 * fleet limiter (ESYNTAX and ELIMIT come from traces; EPROTO, ENOTCONN,
 * ETIMEDOUT, EAUTH, ENOPERM, ETLS, EOOM, EREADONLY, EBADVALUE, ECLUSTERDOWN and EREDIS
 * from Redis; ECANCELED from a fleet call its caller gave up; ELEASE from an
 * acknowledgement that came after its delivery's lease ended). sluice.h builds
 * `enum sluice_error` from this list and error.c builds sluice_strerror(),
 * sluice_error_count() and sluice_error_code() from it, so a code added here
 * is added everywhere (the Swift layer checks its own list against
 * sluice_error_code()). Values follow Linux errno numbers, negated, so they
 * read familiarly, but they are Sluice's own constants on every platform.
 *
 * Include sluice.h rather than this file.
 */
#ifndef SLUICE_ERRORS_H
#define SLUICE_ERRORS_H

#define SLUICE_ERROR_LIST(X)                                                                                           \
    X(OK, 0, "success")                                                                                                \
    X(ENOPERM, -1, "the Redis user lacks a permission the fleet needs (NOPERM): see the ACL line in docs/fleet.md")    \
    X(ENOPLAN, -2, "no plan of the limiter has that index or name")                                                    \
    X(EREDIS, -5, "Redis answered with an error this list does not name (the message is reported with it)")            \
    X(ENOMASTER, -6, "Redis Sentinel knows no primary by the configured master name (see the message)")                \
    X(ELIMIT, -7, "a configured limit was reached (a trace run's max_advances)")                                       \
    X(ENOMEM, -12, "out of memory: nothing was changed")                                                               \
    X(EAUTH, -13, "Redis refused the credentials (WRONGPASS or NOAUTH): check the user and password")                  \
    X(EBUSY, -16, "not allowed while a callback of this limiter runs")                                                 \
    X(EINVAL, -22, "invalid argument or configuration")                                                                \
    X(EFULL, -28, "limiter full: the live-key cap is reached, the new key was refused")                                \
    X(EREADONLY, -30, "the Redis node cannot take writes: a replica, or its primary is down (READONLY, MASTERDOWN)")   \
    X(ERANGE, -34, "number out of range")                                                                              \
    X(EKEYLEN, -36, "key too long (more than SLUICE_KEY_MAX bytes)")                                                   \
    X(EPROTO, -71, "Redis answered something that is not a valid answer")                                              \
    X(ESYNTAX, -74, "malformed input: see the line and the reason reported with it")                                   \
    X(EBADVALUE, -84, "the key's value in Redis is not Sluice state (another writer, or the wrong type)")              \
    X(ECLUSTERDOWN, -100, "Redis Cluster cannot serve the key's slot now (CLUSTERDOWN, TRYAGAIN, or no node for it)")  \
    X(EOOM, -105, "Redis is out of memory and refuses writes (OOM): raise maxmemory or free memory")                   \
    X(ENOTCONN, -107, "no connection to Redis (down, refused or reconnecting)")                                        \
    X(ECLOSED, -108, "limiter closed")                                                                                 \
    X(ETIMEDOUT, -110, "Redis did not answer within the timeout")                                                      \
    X(ELEASE, -116, "the lease of a delivery ended before its acknowledgement: a later claim holds it")                \
    X(ECORRUPT, -117, "internal invariant broken: a bug in Sluice (details on stderr or in the message)")              \
    X(ECANCELED, -125, "the caller cancelled the call before its answer came")                                         \
    X(ETLS, -129, "TLS failed: handshake refused, server without TLS, or a certificate that did not verify")

#endif /* SLUICE_ERRORS_H */
