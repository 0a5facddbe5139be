/*
 * redis-script.h — a Lua script run on the fleet's Redis connections
 * (internal): as a function library where the server allows it (Redis 7:
 * FUNCTION LOAD once, then FCALL), else from the script cache (SCRIPT LOAD,
 * EVALSHA), and with EVAL when the server has lost it.
 *
 * Every EVALSHA executes the whole script again, making each function it
 * defines anew; a library is executed once, when it is loaded, and FCALL
 * only calls the function it registered. So a script made for both forms
 * defines its functions and a function `run(keys, args)` that does one run,
 * and its EVAL form is a head, that body and a tail: the head keeps the
 * run's KEYS and ARGV, the tail calls run with them (fleet_script.c). The
 * library is the body under the name sluice__script_t.fname ("sluice_" and
 * 16 hex digits of the EVAL form's SHA-1, so a changed script is a new
 * library), with run registered as the function of that name, flagged
 * allow-cross-slot-keys (a Redis Cluster node may touch keys of every slot
 * it serves in one run, as EVAL runs a script without flags).
 *
 * What the owner does (loop thread only):
 *  - on a connection's UP: sluice__script_on_up(), before its own commands;
 *  - for each run: sluice__script_head() fills the command's first two
 *    arguments, FCALL where the library's load is confirmed on that
 *    connection (its mark, conn.h), else EVALSHA, or EVAL when asked;
 *  - for each run's reply: sluice__script_reply() says whether to send the
 *    run again, and how.
 */
#ifndef SLUICE_REDIS_SCRIPT_H
#define SLUICE_REDIS_SCRIPT_H

#include <stdbool.h>
#include <stddef.h>

#include "conn.h"
#include "fleet-internal.h"

/** A script's EVAL form is SLUICE__SCRIPT_EVAL_HEAD, its body (the
 *  definitions and run), then SLUICE__SCRIPT_EVAL_TAIL: the head keeps the
 *  run's KEYS and ARGV before the body's locals of those names hide them,
 *  the tail calls run once with them. */
#define SLUICE__SCRIPT_EVAL_HEAD "local KEYS_, ARGV_ = KEYS, ARGV\n"
#define SLUICE__SCRIPT_EVAL_TAIL "return run(KEYS_, ARGV_)\n"

/** Length of a library's name, which is its function's: "sluice_" and 16 hex digits. */
#define SLUICE__SCRIPT_FNAME_LEN 23

/** A script in its two forms. */
typedef struct sluice__script {
    const char *text; /**< the EVAL form (static) */
    size_t len;
    char sha[41];                             /**< its SHA-1, for EVALSHA */
    char *lib;                                /**< the library form (malloc'd; not NUL-terminated), or NULL */
    size_t lib_len;                           /**< its length */
    char fname[SLUICE__SCRIPT_FNAME_LEN + 1]; /**< the library's name and its function's */
} sluice__script_t;

/** Makes both forms of the EVAL form `text` (`len` bytes, static: the EVAL
 *  head, the body, the EVAL tail). Out of memory, the library is left out
 *  (lib NULL: EVALSHA only). */
SLUICE_FLEET_HIDDEN void sluice__script_init(sluice__script_t *s, const char *text, size_t len);

/** Frees the library form. */
SLUICE_FLEET_HIDDEN void sluice__script_free(sluice__script_t *s);

/** On a connection's UP: sends FUNCTION LOAD of the library, then SCRIPT LOAD
 *  (for EVALSHA until the library is confirmed, and wherever it is
 *  refused), whose reply goes to `loaded(arg, ...)`, or nowhere when
 *  `loaded` is NULL. @return 0 or an error of sluice__conn_send() (the owner
 *  drops the connection). */
SLUICE_FLEET_HIDDEN int sluice__script_on_up(sluice__script_t *s, sluice__conn_t *c, sluice__conn_reply_fn loaded,
                                             void *arg);

/** Fills argv[0..1] and lens[0..1] for a run on `c`: EVAL and the script when
 *  `eval`, else FCALL and the function where the library is loaded on `c`,
 *  else EVALSHA and the SHA-1. @return whether it is FCALL. */
SLUICE_FLEET_HIDDEN bool sluice__script_head(const sluice__script_t *s, const sluice__conn_t *c, bool eval,
                                             const char **argv, size_t *lens);

/** What to do with a run's reply. */
typedef enum sluice__script_next {
    SLUICE__SCRIPT_DONE = 0,       /**< a result or an error of the run itself: answer it */
    SLUICE__SCRIPT_AGAIN_EVAL = 1, /**< the server lost the script (NOSCRIPT, or the
                                        function after FUNCTION FLUSH): send the run
                                        again with EVAL (once) */
    SLUICE__SCRIPT_AGAIN = 2       /**< FCALL refused where EVALSHA may not be (OOM:
                                        Redis refuses a function that may write before
                                        it runs, where a script without flags is refused
                                        only when it writes; NOPERM for FCALL alone): send
                                        it again, sluice__script_head() now picks EVALSHA */
} sluice__script_next_t;

/** Reads a run's reply `rep` (not NULL) on `c`, sent with FCALL (`fcalled`)
 *  or EVAL (`evalled`) or else EVALSHA, and keeps `c`'s mark: a lost
 *  library is loaded again, FCALL stops after OOM (until a load is tried
 *  again, after 64 replies to EVALSHA) or NOPERM (for this connection).
 *  @return what to do; SLUICE_ENOMEM when a load could not be sent (the
 *  owner drops the connection, then answers as DONE). */
SLUICE_FLEET_HIDDEN int sluice__script_reply(sluice__script_t *s, sluice__conn_t *c, bool fcalled, bool evalled,
                                             const redisReply *rep);

#endif
