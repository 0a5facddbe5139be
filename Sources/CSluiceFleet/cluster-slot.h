/*
 * cluster-slot.h — Redis Cluster's hash slot of a key (internal).
 *
 * A key's slot is CRC16(tag) mod 16384, where CRC16 is the CCITT/XMODEM
 * variant (polynomial 0x1021, initial value 0, no reflection, no final XOR:
 * CRC16("123456789") = 0x31C3) and the tag is, by Redis's rule, the bytes
 * between the first '{' and the first '}' after it when there is at least one
 * byte between them, else the whole key. The fleet's names,
 * "{<N>:<E(prefix)>:<tag><E(key)>}", escape '}' inside (fleet_key.c), so their
 * tag is always the whole braced identity and one key's names share a slot.
 */
#ifndef SLUICE_CLUSTER_SLOT_H
#define SLUICE_CLUSTER_SLOT_H

#include <stddef.h>
#include <stdint.h>

#include "fleet-internal.h"

/** Number of hash slots of a Redis Cluster. */
#define SLUICE__CLUSTER_SLOTS 16384

/** CRC16 (XMODEM) of `len` bytes at `p` (`p` may be NULL when `len` is 0). */
SLUICE_FLEET_HIDDEN uint16_t sluice__cluster_crc16(const void *p, size_t len);

/** The hash slot (0..16383) of the key `key` of `len` bytes, by the hash-tag
 *  rule above. */
SLUICE_FLEET_HIDDEN unsigned sluice__cluster_keyslot(const char *key, size_t len);

#endif
