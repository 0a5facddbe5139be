/* test_fleet_error_code.c — sluice__redis_error_code(): each class of Redis
 * error reply gets its code; the class is the whole first word (a class word
 * as the prefix of a longer word does not match); an empty or NULL message,
 * or an unknown class, is SLUICE_EREDIS; `len` bounds the message (no NUL
 * needed). No Redis needed. */
#define TEST_NAME "test_fleet_error_code"
#include <string.h>

#include "fleet-internal.h"
#include "support/check.h"

int main(void) {
    static const struct {
        const char *msg;
        int code;
    } table[] = {
        { "WRONGPASS invalid username-password pair or user is disabled.", SLUICE_EAUTH },
        { "NOAUTH Authentication required.", SLUICE_EAUTH },
        { "ERR Protocol error: unauthenticated multibulk length", SLUICE_EAUTH },
        { "ERR Protocol error: unauthenticated bulk length", SLUICE_EAUTH },
        { "NOPERM this user has no permissions to run the 'evalsha' command", SLUICE_ENOPERM },
        { "OOM command not allowed when used memory > 'maxmemory'. script: 0123, on @user_script:220.", SLUICE_EOOM },
        { "READONLY You can't write against a read only replica.", SLUICE_EREADONLY },
        { "MASTERDOWN Link with MASTER is down and replica-serve-stale-data is set to 'no'.", SLUICE_EREADONLY },
        { "WRONGTYPE Operation against a key holding the wrong kind of value", SLUICE_EBADVALUE },
        { "CLUSTERDOWN The cluster is down", SLUICE_ECLUSTERDOWN },
        { "CLUSTERDOWN Hash slot not served", SLUICE_ECLUSTERDOWN },
        { "TRYAGAIN Multiple keys request during rehashing of slot", SLUICE_ECLUSTERDOWN },
        /* the class word alone (a reply without a message) */
        { "OOM", SLUICE_EOOM },
        { "NOAUTH", SLUICE_EAUTH },
        /* a class word as the prefix of a longer word is another class */
        { "OOMKILLED something", SLUICE_EREDIS },
        { "NOAUTHX Authentication required.", SLUICE_EREDIS },
        { "READONLYISH x", SLUICE_EREDIS },
        { "NOPERMS x", SLUICE_EREDIS },
        { "WRONGTYPES x", SLUICE_EREDIS },
        /* the class is the first word only, and case matters (Redis writes it upper case) */
        { "ERR OOM later in the message", SLUICE_EREDIS },
        /* Redis 7.0's words for a command a script calls that the ACL forbids */
        { "ERR The user executing the script can't run this command or subcommand script: 104ae65d, on "
          "@user_script:1.",
          SLUICE_ENOPERM },
        { "ERR The user executing the script", SLUICE_EREDIS },
        { "ERR AUTH <password> called without any password configured for the default user. Are you sure your "
          "configuration is correct?",
          SLUICE_EAUTH },
        { "oom command not allowed", SLUICE_EREDIS },
        { " OOM leading space", SLUICE_EREDIS },
        { "ERR Protocol error: invalid multibulk length", SLUICE_EREDIS },
        { "ERR sluice: bad arguments", SLUICE_EREDIS },
        { "NOSCRIPT No matching script.", SLUICE_EREDIS },
        { "BUSY Redis is busy running a script.", SLUICE_EREDIS },
        { "", SLUICE_EREDIS },
    };
    for (size_t i = 0; i < sizeof table / sizeof table[0]; i++) {
        int got = sluice__redis_error_code(table[i].msg, strlen(table[i].msg));
        CHECK(got == table[i].code, "\"%s\": %d, want %d", table[i].msg, got, table[i].code);
    }
    CHECK(sluice__redis_error_code(NULL, 0) == SLUICE_EREDIS, "NULL message");
    /* len bounds the message: "OOM" of "OOMX" is the whole word OOM */
    CHECK(sluice__redis_error_code("OOMX", 3) == SLUICE_EOOM, "len 3 of OOMX");
    CHECK(sluice__redis_error_code("OOM command", 2) == SLUICE_EREDIS, "len 2 of OOM");
    CHECK(sluice__redis_error_code("NOAUTH x", 0) == SLUICE_EREDIS, "len 0");
    printf(TEST_NAME ": ok\n");
    return 0;
}
