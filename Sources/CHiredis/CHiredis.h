/* CHiredis.h — the hiredis headers the fleet limiter uses (async API). */
#ifndef SLUICE_CHIREDIS_H
#define SLUICE_CHIREDIS_H

/* SwiftPM prints a system library's install hint only for a target with
 * pkgConfig, which CHiredis has not (see Package.swift): without hiredis's
 * headers, this line says which package brings them before the compiler
 * stops at the missing header. (The same check opens CSluiceFleet/fleet.c,
 * which a build compiles first.) */
#if defined(__has_include)
#if !__has_include(<hiredis/hiredis.h>)
#error                                                                                                                 \
    "hiredis not found: the fleet limiter (SluiceFleet) needs hiredis's headers; install libhiredis-dev (apt-get install libhiredis-dev, or make deps)"
#endif
#endif

#include <hiredis/hiredis.h>
#include <hiredis/async.h>

#endif
