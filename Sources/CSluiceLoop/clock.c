/* clock.c — the loop layer's clock and libevent's thread support
 * (sluice_loop.h: sluice_clock_now(), sluice_threads_init()). */
#include "loop-internal.h"

#include <event2/thread.h>
#include <time.h>

/* Never 0: an options' `now` of 0 means "read the clock" (sluice_loop.h). */
uint64_t sluice_clock_now(void) {
    uint64_t t = sluice__clock_now();
    return t ? t : 1;
}

static pthread_once_t threads_once = PTHREAD_ONCE_INIT;
static int threads_rc;

static void threads_init_once(void) { threads_rc = evthread_use_pthreads() == 0 ? 0 : SLUICE_ENOMEM; }

int sluice_threads_init(void) {
    pthread_once(&threads_once, threads_init_once);
    return threads_rc;
}
