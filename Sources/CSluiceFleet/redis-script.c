/* redis-script.c — a Lua script on the fleet's connections, as a function
 * library or from the script cache (redis-script.h). */
#include "redis-script.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A connection's mark (sluice__conn_mark(), 0 at each connection): what is
 * known of the library on that server. MARK_FCALL: loaded there, runs go as
 * FCALL; else as EVALSHA, which works on every Redis. MARK_LOADING: a
 * FUNCTION LOAD awaits its reply. MARK_NEVER: the server refused it for good
 * (a Redis before 7, an ACL user without FUNCTION or FCALL): not asked again
 * on this connection. From MARK_TRIES up: the replies to EVALSHA since a load
 * failed for a passing reason (OOM, BUSY, LOADING...); at RELOAD_AFTER of
 * them the load is tried again. */
#define MARK_FCALL 1u
#define MARK_LOADING 2u
#define MARK_NEVER 4u
#define MARK_TRIES 256u
#define RELOAD_AFTER 64u

void sluice__script_init(sluice__script_t *s, const char *text, size_t len) {
    size_t head_len = sizeof SLUICE__SCRIPT_EVAL_HEAD - 1, tail_len = sizeof SLUICE__SCRIPT_EVAL_TAIL - 1;
    memset(s, 0, sizeof *s);
    s->text = text;
    s->len = len;
    sluice__fleet_sha1_hex(text, len, s->sha);
    memcpy(s->fname, "sluice_", 7);
    memcpy(s->fname + 7, s->sha, 16);
    s->fname[SLUICE__SCRIPT_FNAME_LEN] = '\0';
    static const char head_fmt[] = "#!lua name=%s\n";
    static const char tail_fmt[] =
        "redis.register_function{function_name = '%s', callback = run, flags = {'allow-cross-slot-keys'}}\n";
    size_t body = len - head_len - tail_len;
    size_t cap = body + sizeof head_fmt + sizeof tail_fmt + 2 * SLUICE__SCRIPT_FNAME_LEN;
    char *lib = malloc(cap);
    if (!lib) return; /* EVALSHA only */
    int h = snprintf(lib, cap, head_fmt, s->fname);
    memcpy(lib + h, text + head_len, body);
    int t = snprintf(lib + h + body, cap - (size_t)h - body, tail_fmt, s->fname);
    s->lib = lib;
    s->lib_len = (size_t)h + body + (size_t)t;
}

void sluice__script_free(sluice__script_t *s) {
    free(s->lib);
    s->lib = NULL;
}

/* Whether an error reply to FUNCTION LOAD may pass (a server busy, loading,
 * out of memory, or not a primary for now), rather than a refusal for good. */
static bool passing_refusal(const redisReply *r) {
    static const char *const passing[] = { "OOM", "BUSY", "LOADING", "READONLY", "MASTERDOWN", "TRYAGAIN" };
    for (size_t i = 0; i < sizeof passing / sizeof passing[0]; i++) {
        size_t n = strlen(passing[i]);
        if (r->len >= n && memcmp(r->str, passing[i], n) == 0) return true;
    }
    return false;
}

/* The reply to FUNCTION LOAD on connection `arg`: loaded, or there already
 * (loaded by another limiter or an earlier connection, or replicated), and
 * runs go there as FCALL from now on; otherwise they stay on EVALSHA. */
static void library_loaded(void *arg, redisReply *r, int err) {
    (void)err;
    if (!r) return; /* dropped: the next connection loads it again */
    sluice__conn_t *c = arg;
    uint32_t mark = sluice__conn_mark(c) & (MARK_FCALL | MARK_NEVER); /* not loading, no tries */
    if (r->type == REDIS_REPLY_STRING || (r->type == REDIS_REPLY_ERROR && r->len >= 4 &&
                                          memcmp(r->str, "ERR ", 4) == 0 && strstr(r->str, " already exists") != NULL))
        mark |= MARK_FCALL;
    else if (r->type != REDIS_REPLY_ERROR || !passing_refusal(r))
        mark |= MARK_NEVER;
    sluice__conn_set_mark(c, mark);
}

/* Sends FUNCTION LOAD on `c`, unless the library is loaded there, on its
 * way, refused for good, or was not made. @return 0 or an error of
 * sluice__conn_send(). */
static int load_library(const sluice__script_t *s, sluice__conn_t *c) {
    uint32_t mark = sluice__conn_mark(c);
    if (!s->lib || (mark & (MARK_FCALL | MARK_LOADING | MARK_NEVER))) return 0;
    const char *argv[3] = { "FUNCTION", "LOAD", s->lib };
    size_t lens[3] = { 8, 4, s->lib_len };
    int rc = sluice__conn_send(c, 3, argv, lens, library_loaded, c);
    if (rc == 0) sluice__conn_set_mark(c, (mark & (MARK_TRIES - 1)) | MARK_LOADING);
    return rc;
}

/* The reply to a SCRIPT LOAD that nobody reads (a run that meets NOSCRIPT,
 * or an error, is answered so). */
static void ignore_reply(void *arg, redisReply *r, int err) {
    (void)arg;
    (void)r;
    (void)err;
}

int sluice__script_on_up(sluice__script_t *s, sluice__conn_t *c, sluice__conn_reply_fn loaded, void *arg) {
    int rc = load_library(s, c);
    if (rc) return rc;
    const char *argv[3] = { "SCRIPT", "LOAD", s->text };
    size_t lens[3] = { 6, 4, s->len };
    return sluice__conn_send(c, 3, argv, lens, loaded ? loaded : ignore_reply, arg);
}

bool sluice__script_head(const sluice__script_t *s, const sluice__conn_t *c, bool eval, const char **argv,
                         size_t *lens) {
    if (eval) {
        argv[0] = "EVAL", lens[0] = 4;
        argv[1] = s->text, lens[1] = s->len;
        return false;
    }
    if (c && (sluice__conn_mark(c) & MARK_FCALL)) {
        argv[0] = "FCALL", lens[0] = 5;
        argv[1] = s->fname, lens[1] = SLUICE__SCRIPT_FNAME_LEN;
        return true;
    }
    argv[0] = "EVALSHA", lens[0] = 7;
    argv[1] = s->sha, lens[1] = 40;
    return false;
}

static bool starts(const redisReply *r, const char *prefix) {
    size_t n = strlen(prefix);
    return r->type == REDIS_REPLY_ERROR && r->len >= n && memcmp(r->str, prefix, n) == 0;
}

int sluice__script_reply(sluice__script_t *s, sluice__conn_t *c, bool fcalled, bool evalled, const redisReply *rep) {
    uint32_t mark = sluice__conn_mark(c);
    if (!fcalled) {
        if (!evalled && s->lib && !(mark & (MARK_FCALL | MARK_LOADING | MARK_NEVER))) {
            /* EVALSHA after a passing refusal: the load is tried again later */
            mark += MARK_TRIES;
            sluice__conn_set_mark(c, mark);
            if (mark / MARK_TRIES >= RELOAD_AFTER && load_library(s, c) == SLUICE_ENOMEM) return SLUICE_ENOMEM;
        }
        return starts(rep, "NOSCRIPT") && !evalled ? SLUICE__SCRIPT_AGAIN_EVAL : SLUICE__SCRIPT_DONE;
    }
    if (starts(rep, "ERR Function not found")) {
        /* the library was deleted (FUNCTION FLUSH or DELETE): EVALSHA until
         * it is loaded again, and this run with EVAL, as after NOSCRIPT */
        sluice__conn_set_mark(c, mark & ~MARK_FCALL);
        if (load_library(s, c) == SLUICE_ENOMEM) return SLUICE_ENOMEM;
        return SLUICE__SCRIPT_AGAIN_EVAL;
    }
    bool oom = starts(rep, "OOM"), noperm = starts(rep, "NOPERM");
    if (oom || noperm) {
        /* EVALSHA from now on (after NOPERM for this connection), and this
         * run again so */
        sluice__conn_set_mark(c, (mark & ~MARK_FCALL) | (noperm ? MARK_NEVER : 0));
        return SLUICE__SCRIPT_AGAIN;
    }
    return SLUICE__SCRIPT_DONE;
}
