/*
 * timed-internal.h — internals of the fleet's throttle, audit and debounce
 * (timed.c, timed_script.c) shared with their tests.
 */
#ifndef SLUICE_TIMED_INTERNAL_H
#define SLUICE_TIMED_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "fleet-internal.h"
#include "sluice_fleet_timed.h"

/** Bytes of the script (without the NUL). */
SLUICE_FLEET_HIDDEN size_t sluice__timed_script_len(void);

/** The member that names a key in Redis: 'b' and the key's bytes, or 'u' and
 *  an integer key in decimal. Writes it into `out` (room for
 *  SLUICE_KEY_MAX + 1 bytes). @return its length. */
SLUICE_FLEET_HIDDEN size_t sluice__timed_member(sluice_key_t key, char *out);

/** The key a member names (bytes point into `m`). @return 0, or -1 when `m`
 *  is no member sluice__timed_member() writes. */
SLUICE_FLEET_HIDDEN int sluice__timed_member_key(const char *m, size_t len, sluice_key_t *out);

#endif
