/*
 * CLibevent.h — the parts of libevent the Sluice packages use (the loop
 * layer, Sources/CSluiceLoop, and Swift code driving a base directly):
 * the event loop (libevent_core) and thread support (libevent_pthreads,
 * for evthread_use_pthreads(), which must run before a base is created
 * when other threads call event_active() or event_base_loopexit()).
 */
#ifndef SLUICE_CLIBEVENT_H
#define SLUICE_CLIBEVENT_H

#include <event2/event.h>
#include <event2/thread.h>

#endif /* SLUICE_CLIBEVENT_H */
