/* CHiredis.h — the hiredis headers the fleet limiter uses (async API). */
#ifndef SLUICE_CHIREDIS_H
#define SLUICE_CHIREDIS_H

#include <hiredis/hiredis.h>
#include <hiredis/async.h>

#endif
