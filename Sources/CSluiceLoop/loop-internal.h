/*
 * loop-internal.h — the loop layer's structures and its files' shared
 * functions (internal).
 *
 * The loop layer is the core on a libevent loop (sluice_loop.h). Its files:
 *
 *   clock.c     sluice_clock_now(), sluice_threads_init()
 *   binding.c   loop bindings: attach to a caller's event_base, or an owned
 *               base run on a thread of its own
 *   outbox.c    the per-shard queue of events waiting to be delivered
 *   lock.c      the shard lock's slow paths (contention: spin, then futex)
 *   shard.c     a shard's upkeep: the core's event callback, the next
 *               deadline, the live-key count, firing due deadlines
 *   delivery.c  the limiter's timer and the delivery of events to the
 *               user's callback
 *   lifetime.c  the limiter's creation, its libevent event's callback,
 *               teardown and free (sluice_mt_new*, sluice_mt_free)
 *   mt.c        the calls on a limiter (sluice_mt_*): key calls, the
 *               live-key budget, close, stats
 *
 * Each file calls only files listed above it: no two files call each
 * other.
 *
 * It uses the core only through its public API (sluice.h) and the accessors
 * of ../CSluice/core-internal.h: no field of a core structure is read here.
 *
 * A loop limiter (struct sluice_mt) is `nshards` shards, each a mutex, a core
 * limiter and an outbox. All shard limiters share one hash seed (shard 0's,
 * copied into the limiter), so a key is hashed once (sluice__key_prepare())
 * and the low bits of the hash pick the shard; the key index uses the top
 * bits. The core's event callback runs under the shard lock and only appends
 * the event, key copied, to the shard's outbox; room for the events a call
 * can produce is reserved before the call, so an append never fails and no
 * token is ever lost to an allocation failure.
 */
#ifndef SLUICE_LOOP_INTERNAL_H
#define SLUICE_LOOP_INTERNAL_H

#include "include/sluice_loop.h"
#include "../CSluice/core-internal.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#if defined(__GNUC__) || defined(__clang__)
#pragma GCC visibility push(hidden)
#endif

struct event;

#define SLM_CACHE_LINE 64
/* Timer transitions handled between two outbox reservations. */
#define SLM_ADVANCE_CHUNK 256
/* A delivered batch larger than this gives its buffers back. */
#define SLM_SPARE_KEEP 4096
/* After an allocation failure in the timer pass, retry this much later. */
#define SLM_RETRY_NS UINT64_C(1000000)

/* ------------------------------------------------------------------ clock (clock.c) */

/* sluice_clock_now(), inline for the loop layer's own calls (one read of
 * CLOCK_MONOTONIC per call on a key, without a call into clock.c). */
static inline uint64_t sluice__clock_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * UINT64_C(1000000000) + (uint64_t)ts.tv_nsec;
}

/* The same clock at the kernel tick's resolution (SLUICE_MT_COARSE_CLOCK):
 * never ahead of sluice__clock_now(), read without the hardware counter. */
static inline uint64_t sluice__clock_coarse(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
    return (uint64_t)ts.tv_sec * UINT64_C(1000000000) + (uint64_t)ts.tv_nsec;
}

/* ------------------------------------------------------------------ shard lock (lock.c) */

/* A pause in a spin-wait loop (lock.c, bias.c). */
static inline void sluice__cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield" ::: "memory");
#endif
}

/* The lock of a shard. A shard's critical section is short (a core call,
 * ~100-300 instructions), taken by every call on a key: on Linux it is a
 * 32-bit futex word (0 free, 1 held, 2 held with waiters, Drepper's
 * "Futexes Are Tricky" mutex), whose uncontended lock and unlock are one
 * atomic read-modify-write each, inlined (glibc's pthread mutex costs ~65
 * instructions per lock/unlock pair, through two calls). On contention it
 * spins briefly, then sleeps in the kernel. Acquire on lock, release on
 * unlock: ThreadSanitizer sees the ordering through the atomics. Elsewhere
 * it is a pthread mutex. */
#if defined(__linux__)
#define SLM_FUTEX_LOCK 1
typedef struct {
    _Atomic uint32_t v;
} sluice__lock_t;

int sluice__lock_init(sluice__lock_t *l);
void sluice__lock_destroy(sluice__lock_t *l);
void sluice__lock_slow(sluice__lock_t *l);
void sluice__unlock_slow(sluice__lock_t *l);

static inline void sluice__lock(sluice__lock_t *l) {
    uint32_t c = 0;
    if (__builtin_expect(
            atomic_compare_exchange_strong_explicit(&l->v, &c, 1, memory_order_acquire, memory_order_relaxed), 1))
        return;
    sluice__lock_slow(l);
}

static inline void sluice__unlock(sluice__lock_t *l) {
    if (__builtin_expect(atomic_fetch_sub_explicit(&l->v, 1, memory_order_release) != 1, 0)) sluice__unlock_slow(l);
}
#else
typedef struct {
    pthread_mutex_t mu;
} sluice__lock_t;

int sluice__lock_init(sluice__lock_t *l);
void sluice__lock_destroy(sluice__lock_t *l);
static inline void sluice__lock(sluice__lock_t *l) { pthread_mutex_lock(&l->mu); }
static inline void sluice__unlock(sluice__lock_t *l) { pthread_mutex_unlock(&l->mu); }
#endif

/* ------------------------------------------------------------------ bindings (binding.c) */

struct sluice_loop {
    struct event_base *base;
    bool owned;
    bool thread_started;
    pthread_t thread;        /* owned: the loop thread; attached: the thread that attached */
    struct event *stop_ev;   /* owned: breaks the loop, on the loop thread */
    atomic_bool stopped;     /* owned: the thread has been joined */
    atomic_ulong nmt;        /* limiters on this binding */
    size_t budget;           /* max timer transitions per pass */
    pthread_mutex_t stop_mu; /* makes stop idempotent */
};

/* ------------------------------------------------------------------ outbox (outbox.c) */

/* One event waiting in an outbox. Key bytes live in the outbox's byte buffer. */
struct ob_rec {
    uint64_t token;
    uint64_t at;
    uint64_t u64;
    uint64_t successor;
    uint32_t key_off;
    uint16_t key_len;
    uint8_t kind; /* sluice_event_kind_t */
    uint8_t is_u64 : 1;
    uint8_t has_successor : 1;
};

struct outbox {
    size_t n, cap;   /* records (first: a call reads these four to check its room) */
    size_t nb, capb; /* key bytes */
    struct ob_rec *rec;
    unsigned char *bytes;
};

struct sluice_mt;

/* Room for `events` more records and `bytes` more key bytes. */
bool sluice__outbox_reserve(const struct sluice_mt *m, struct outbox *o, size_t events, size_t bytes);

/* Reserves room for up to `want` events of keys of at most `keylen` bytes;
 * returns how many fit (0 when not even one). */
size_t sluice__outbox_room(const struct sluice_mt *m, struct outbox *o, size_t want, size_t keylen);

/* Appends an event, key copied (room reserved; running out aborts loudly:
 * a token must never be lost silently). */
void sluice__outbox_push(const struct sluice_mt *m, struct outbox *o, const sluice_event_t *ev);

/* Hands every event of `o`, in order, to the limiter's callback (no lock
 * held; `on_events` in runs of up to SLUICE_MT_EVENTS_MAX when set) and
 * empties `o`, keeping its buffers. Returns the number delivered. */
size_t sluice__outbox_deliver(struct sluice_mt *m, struct outbox *o);

/* Frees an outbox's buffers. */
void sluice__outbox_release(const struct sluice_mt *m, struct outbox *o);

/* The limiter's allocator (the user's, or malloc/free). */
void *sluice__mt_alloc(const struct sluice_mt *m, size_t size);
void sluice__mt_release(const struct sluice_mt *m, void *p, size_t size);

/* ------------------------------------------------------------------ limiter and shards (shard.c) */

/* A shard. Every call on a key takes its lock and reads or writes the
 * fields of the first two lines, from whichever thread calls, so they are
 * kept to two lines: the lock with what every call reads (the core, its
 * published deadline, the longest key) on the first (the lock is 4 bytes on
 * Linux, a pthread mutex of 40 elsewhere), the outbox's counts on the
 * second; what only the live-key cap, teardown or stats use comes after. */
struct shard {
    /* The shard's lock: `lk`. With the futex lock it lives in the core's
     * host word (sluice__limiter_host_word), in the line every call writes
     * anyway, so a call moves one line between CPUs, not two; `mu` is only
     * the lock until the core exists, and the pthread mutex elsewhere. */
    sluice__lock_t *lk;
    sluice__lock_t mu;
    sluice_limiter_t *core;
    _Atomic uint64_t next; /* the core's next deadline, written under lk */
    size_t max_keylen;     /* longest byte key submitted to this shard: bounds an event's bytes */
    struct outbox out;
    struct sluice_mt *m;
    uint64_t charged;       /* live keys of this shard counted in m->live_keys (max_keys only) */
    uint64_t full_refusals; /* new keys refused because of max_keys */
    bool direct;            /* teardown: events go straight to the user */
    bool tidy;              /* loop thread only: the core's table work was deferred by a timer pass */
    const void *hot;        /* the core's written line (sluice__limiter_hot): prefetched for writing by a call */
    /* The core's index (sluice__limiter_index_hint), stored under lk when it
     * changes and read before it: a call asks for its key's index slot while
     * it reads the clock and takes the lock. */
    _Atomic uintptr_t index_base;
    _Atomic unsigned index_bits;
};

/* A shard padded to whole pairs of cache lines (and the shard array aligned
 * to a pair), so two shards never share a line, nor a pair of lines that an
 * adjacent-line prefetcher fetches together. */
#define SLM_SHARD_ALIGN (2 * SLM_CACHE_LINE)
union shard_slot {
    struct shard s;
    unsigned char pad[(sizeof(struct shard) + SLM_SHARD_ALIGN - 1) / SLM_SHARD_ALIGN * SLM_SHARD_ALIGN];
};

enum mt_state { MT_OPEN = 0, MT_CLOSED = 1, MT_FREEING = 2 };

struct sluice_mt {
    /* read-mostly, shared by every caller */
    sluice_loop_t *loop;
    sluice_event_fn on_event;
    sluice_mt_events_fn on_events; /* when set, replaces on_event (batches) */
    void *user;
    sluice_allocator_t alloc;
    bool has_alloc;
    unsigned nshards, mask;
    union shard_slot *shards;
    void *shards_raw;
    size_t shards_raw_size;
    uint64_t seed[2];              /* the hash key every shard uses (a copy, off the shards' written lines) */
    uint64_t max_keys;             /* the cap on live keys over all shards; 0 = none */
    sluice_allocator_t line_alloc; /* the shard limiters' allocator: whole cache lines */
    struct event *ev;
    size_t budget;
    unsigned report; /* SLUICE_MT_REPORT_* flags */
    bool coarse;     /* SLUICE_MT_COARSE_CLOCK */
    _Atomic int state;

    /* the live-key budget (padding keeps it off the read-mostly line): keys
     * counted by the shards (their `charged`), plus keys being created */
    unsigned char pad_keys[SLM_CACHE_LINE];
    _Atomic uint64_t live_keys;

    /* the timer (no _Alignas: the allocator only promises malloc's alignment) */
    unsigned char pad_timer[SLM_CACHE_LINE];
    _Atomic uint64_t armed;
    pthread_mutex_t arm_mu;
    atomic_bool wake;

    /* delivery */
    unsigned char pad_deliver[SLM_CACHE_LINE];
    pthread_mutex_t dmu;
    pthread_cond_t dcond;
    bool delivering, again, free_deferred; /* under dmu */
    struct outbox spare;                   /* the deliverer's */
    unsigned rr;                           /* loop thread: first shard of the next pass */

    /* counters (written by the loop thread or the deliverer; the events
     * waiting are the shards' outbox counts, summed when read) */
    atomic_ullong wakeups, arms, budget_passes, delivered;
};

static inline struct shard *sluice__shard_at(const struct sluice_mt *m, unsigned i) { return &m->shards[i].s; }

/* The core limiter's event callback of a shard (`user` is the shard): runs
 * under the shard lock and queues the event in the shard's outbox; in
 * teardown (`direct`), with the shard to itself, hands it to the user. */
void sluice__shard_on_event(void *user, const sluice_event_t *ev);

/* Publishes the shard core's next deadline in `next` (shard locked) and
 * returns it. */
uint64_t sluice__shard_publish_next(struct shard *s);

/* Brings the live-key budget in line with the shard core after a call that
 * may have let keys go idle (shard locked). Touches the shared counter only
 * when the shard's count went down. */
void sluice__shard_settle_keys(struct shard *s);

/* Fires due deadlines of one shard (locked) within `budget`, reserving
 * outbox room as it goes. Sets *stalled when no room could be found.
 * Returns the transitions handled. */
size_t sluice__shard_advance(struct sluice_mt *m, struct shard *s, uint64_t now, size_t budget, bool *stalled);

/* ------------------------------------------------------------------ delivery (delivery.c) */

/* A limiter this thread is delivering for, on the thread's stack of them. */
struct sluice__dframe {
    const struct sluice_mt *m;
    struct sluice__dframe *up;
};

/* Pushes `f` (for `m`) on the thread's stack of deliverers, and pops it. */
void sluice__deliverer_push(struct sluice__dframe *f, const struct sluice_mt *m);
void sluice__deliverer_pop(struct sluice__dframe *f);

/* True when this thread is inside a delivery of `m` (its callback). */
bool sluice__mt_in_callback(const struct sluice_mt *m);

/* Arms the timer at `at` if that is earlier than where it is armed. */
void sluice__mt_arm_at(struct sluice_mt *m, uint64_t at);

/* The earliest `next` over the shards. */
uint64_t sluice__mt_min_next(const struct sluice_mt *m);

/* One pass over the shards, delivering what each has queued (the caller is
 * the deliverer). Returns true when something was delivered. */
bool sluice__mt_deliver_pass(struct sluice_mt *m);

/* Delivers every queued event, as the deliverer (or asks the thread that is
 * delivering for one more pass). Returns true when a free was asked from a
 * callback meanwhile: the caller, still the deliverer, must then carry it
 * out (lifetime.c) and not touch the limiter otherwise. */
bool sluice__mt_deliver(struct sluice_mt *m);

/* Asks the loop thread to deliver (activates the limiter's event). */
void sluice__mt_wake(struct sluice_mt *m);

/* The work of the limiter's libevent event, its timer fired or woken: fires
 * due deadlines within the loop's budget, delivers, tidies one shard and
 * re-arms. Returns what sluice__mt_deliver() returns. */
bool sluice__mt_timer_pass(struct sluice_mt *m);

/* ------------------------------------------------------------------ lifetime (lifetime.c) */

/* After a call that queued events: delivers them here (on the loop thread,
 * or when no loop thread runs) or wakes the loop. Returns true when the
 * limiter was freed meanwhile (a free from a callback): do not touch it. */
bool sluice__mt_deliver_or_wake(struct sluice_mt *m);

#if defined(__GNUC__) || defined(__clang__)
#pragma GCC visibility pop
#endif

#endif /* SLUICE_LOOP_INTERNAL_H */
