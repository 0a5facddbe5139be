/*
 * key-internal.h — a prepared key: a key checked and hashed with a seed,
 * the one form in which the core's table (table-internal.h) and the loop
 * layer (core-internal.h) pass keys around (internal).
 */
#ifndef SLUICE_KEY_INTERNAL_H
#define SLUICE_KEY_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* A key checked and hashed with a given seed. A byte key borrows the
 * caller's bytes: it is valid only while they are. */
typedef struct sluice__keyref {
    const unsigned char *bytes; /* byte keys: the caller's bytes (borrowed) */
    size_t len;                 /* byte keys: their length (0 for integer keys) */
    uint64_t u64;               /* integer keys: the integer */
    bool is_u64;
    uint64_t hash; /* the fast hash under the seed; the index's tags use sluice__table_hash() */
} sluice__pkey_t;

#endif /* SLUICE_KEY_INTERNAL_H */
