/*
 * loop-wait.h — a thread that waits until the loop thread has done
 * something for it (internal): a fleet limiter freed from another thread
 * than its loop's is freed on the loop thread, the freeing thread waiting
 * here on its own stack.
 */
#ifndef SLUICE_LOOP_WAIT_H
#define SLUICE_LOOP_WAIT_H

#include <pthread.h>
#include <stdbool.h>

struct sluice__loop_wait {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool done;
};

#define SLUICE__LOOP_WAIT_INIT                                                                                         \
    { PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, false }

/** Waits until sluice__loop_wait_done(), then releases what `w` holds. */
static inline void sluice__loop_wait(struct sluice__loop_wait *w) {
    pthread_mutex_lock(&w->mu);
    while (!w->done) pthread_cond_wait(&w->cv, &w->mu);
    pthread_mutex_unlock(&w->mu);
    pthread_cond_destroy(&w->cv);
    pthread_mutex_destroy(&w->mu);
}

/** Tells the waiting thread that it may go on (loop thread). */
static inline void sluice__loop_wait_done(struct sluice__loop_wait *w) {
    pthread_mutex_lock(&w->mu);
    w->done = true;
    pthread_cond_signal(&w->cv);
    pthread_mutex_unlock(&w->mu);
}

#endif
