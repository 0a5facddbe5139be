/*
 * siphash-internal.h — SipHash-1-3, a keyed 64-bit hash (internal).
 *
 * Sluice places keys in its index with a hash keyed by 128 random bits per
 * limiter, so a client cannot choose keys that collide. SipHash-1-3 (one
 * compression round, three finalization rounds) is the variant used by
 * hash tables that face hostile input (Rust's default hasher, for one).
 */
#ifndef SLUICE_SIPHASH_INTERNAL_H
#define SLUICE_SIPHASH_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

/* Hash `len` bytes with the 128-bit key k[0], k[1]. */
uint64_t sl_siphash13(const uint64_t k[2], const void *data, size_t len);

/* Hash one 64-bit integer (as 8 little-endian bytes); same result as
 * sl_siphash13 on those bytes, faster. */
uint64_t sl_siphash13_u64(const uint64_t k[2], uint64_t x);

#endif
