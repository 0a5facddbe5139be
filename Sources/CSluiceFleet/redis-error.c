/*
 * redis-error.c — the error code of a Redis error reply, by its class (the
 * first word of the message).
 */
#include <string.h>

#include "fleet-internal.h"

static int starts_with(const char *msg, size_t len, const char *word) {
    size_t n = strlen(word);
    /* The class is the whole first word: "OOM" matches "OOM command ..." only. */
    return len >= n && memcmp(msg, word, n) == 0 && (len == n || msg[n] == ' ');
}

int sluice__redis_error_code(const char *msg, size_t len) {
    static const struct {
        const char *word;
        int code;
    } classes[] = {
        { "WRONGPASS", SLUICE_EAUTH },       { "NOAUTH", SLUICE_EAUTH },
        { "NOPERM", SLUICE_ENOPERM },        { "OOM", SLUICE_EOOM },
        { "READONLY", SLUICE_EREADONLY },    { "MASTERDOWN", SLUICE_EREADONLY },
        { "WRONGTYPE", SLUICE_EBADVALUE },   { "CLUSTERDOWN", SLUICE_ECLUSTERDOWN },
        { "TRYAGAIN", SLUICE_ECLUSTERDOWN },
    };
    if (msg == NULL) return SLUICE_EREDIS;
    /* Redis 7 refuses a command of more than 10 arguments (or a bulk string
     * over 16 KB) from a client that has not authenticated, with this ERR
     * (and closes the connection): an authentication failure, not a bug. */
    static const char unauth[] = "ERR Protocol error: unauthenticated ";
    if (len >= sizeof unauth - 1 && memcmp(msg, unauth, sizeof unauth - 1) == 0) return SLUICE_EAUTH;
    /* A password given to a server that has none (Redis 7: "ERR AUTH
     * <password> called without any password configured ..."): the
     * credentials are wrong for this server. */
    static const char auth_unneeded[] = "ERR AUTH <password> called without any password configured";
    if (len >= sizeof auth_unneeded - 1 && memcmp(msg, auth_unneeded, sizeof auth_unneeded - 1) == 0)
        return SLUICE_EAUTH;
    /* A command a script calls that the user's ACL forbids (TIME, for a user
     * without +time) is refused to the script with this ERR, not NOPERM. */
    static const char script_noperm[] = "ERR The user executing the script can't run this command";
    if (len >= sizeof script_noperm - 1 && memcmp(msg, script_noperm, sizeof script_noperm - 1) == 0)
        return SLUICE_ENOPERM;
    for (size_t i = 0; i < sizeof classes / sizeof classes[0]; i++) {
        if (starts_with(msg, len, classes[i].word)) return classes[i].code;
    }
    return SLUICE_EREDIS;
}
