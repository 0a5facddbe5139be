/* test_fleet_url.c — the Redis address URLs (Sources/CSluiceFleet/redis-url.c,
 * redis-url-write.c, fleet-url.c): every form parsed field by field and
 * written back redacted; malformed URLs refused with a sentence naming the
 * offending part and never the password; passwords read from the
 * environment; percent-escapes and IPv6; the password wiped before it is
 * freed; every allocation failure answered by SLUICE_ENOMEM with nothing
 * leaked; the contracts of sluice_fleet_check_url() and
 * sluice_fleet_redact_url(). Needs no Redis. */
#define TEST_NAME "test_fleet_url"
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "redis-url.h"
#include "support/check.h"
#include "support/fault_alloc.h"

#define S SLUICE__REDIS_SINGLE
#define U SLUICE__REDIS_UNIX
#define SEN SLUICE__REDIS_SENTINEL
#define CL SLUICE__REDIS_CLUSTER

/* The passwords the tables use: none may ever appear in `why` or in a redacted form. */
static const char *const k_secrets[] = { "s3cret", "p@ss/w?rd", "env-pw-42", "sent-pw", "hunter2" };

typedef struct valid_case {
    const char *url;
    sluice__redis_topology_t topology;
    bool tls;
    size_t n_nodes;
    const char *hosts[3];
    int ports[3];
    const char *path, *master, *user, *password;
    int db;
    const char *cacert, *cert, *key, *sni;
    bool insecure;
    const char *password_env, *sentinel_user, *sentinel_password;
    const char *redacted; /* what sluice_fleet_redact_url() writes */
} valid_case_t;

static const valid_case_t k_valid[] = {
    { .url = "redis://localhost",
      .topology = S,
      .n_nodes = 1,
      .hosts = { "localhost" },
      .ports = { 6379 },
      .redacted = "redis://localhost:6379" },
    { .url = "redis://10.0.0.5:6380/3",
      .topology = S,
      .n_nodes = 1,
      .hosts = { "10.0.0.5" },
      .ports = { 6380 },
      .db = 3,
      .redacted = "redis://10.0.0.5:6380/3" },
    { .url = "REDIS://h:1/", .topology = S, .n_nodes = 1, .hosts = { "h" }, .ports = { 1 }, .redacted = "redis://h:1" },
    { .url = "redis://:s3cret@h:65535",
      .topology = S,
      .n_nodes = 1,
      .hosts = { "h" },
      .ports = { 65535 },
      .password = "s3cret",
      .redacted = "redis://:***@h:65535" },
    { .url = "redis://alice:s3cret@cache.example.com/0",
      .topology = S,
      .n_nodes = 1,
      .hosts = { "cache.example.com" },
      .ports = { 6379 },
      .user = "alice",
      .password = "s3cret",
      .redacted = "redis://alice:***@cache.example.com:6379" },
    /* Escapes, and a password with "@", "/" and "?" (escaped or not before the last "@"). */
    { .url = "redis://al%69ce:p%40ss%2Fw%3Frd@h",
      .topology = S,
      .n_nodes = 1,
      .hosts = { "h" },
      .ports = { 6379 },
      .user = "alice",
      .password = "p@ss/w?rd",
      .redacted = "redis://alice:***@h:6379" },
    { .url = "redis://[::1]:6380",
      .topology = S,
      .n_nodes = 1,
      .hosts = { "::1" },
      .ports = { 6380 },
      .redacted = "redis://[::1]:6380" },
    { .url = "redis://[fe80::1:2]",
      .topology = S,
      .n_nodes = 1,
      .hosts = { "fe80::1:2" },
      .ports = { 6379 },
      .redacted = "redis://[fe80::1:2]:6379" },
    { .url = "redis://h?db=5",
      .topology = S,
      .n_nodes = 1,
      .hosts = { "h" },
      .ports = { 6379 },
      .db = 5,
      .redacted = "redis://h:6379/5" },
    { .url = "redis://h/7?db=7",
      .topology = S,
      .n_nodes = 1,
      .hosts = { "h" },
      .ports = { 6379 },
      .db = 7,
      .redacted = "redis://h:6379/7" },
    { .url = "redis://h/2147483647",
      .topology = S,
      .n_nodes = 1,
      .hosts = { "h" },
      .ports = { 6379 },
      .db = 2147483647,
      .redacted = "redis://h:6379/2147483647" },
    { .url = "localhost:7001",
      .topology = S,
      .n_nodes = 1,
      .hosts = { "localhost" },
      .ports = { 7001 },
      .redacted = "redis://localhost:7001" },
    { .url = "[::1]:7002",
      .topology = S,
      .n_nodes = 1,
      .hosts = { "::1" },
      .ports = { 7002 },
      .redacted = "redis://[::1]:7002" },
    { .url = "rediss://u:s3cret@h:6390/1?cacert=/etc/ca%20dir/ca.pem&cert=c.pem&key=k.pem&sni=redis.example&insecure=0",
      .topology = S,
      .tls = true,
      .n_nodes = 1,
      .hosts = { "h" },
      .ports = { 6390 },
      .user = "u",
      .password = "s3cret",
      .db = 1,
      .cacert = "/etc/ca dir/ca.pem",
      .cert = "c.pem",
      .key = "k.pem",
      .sni = "redis.example",
      .redacted = "rediss://u:***@h:6390/1?cacert=/etc/ca%20dir/ca.pem&cert=c.pem&key=k.pem&sni=redis.example" },
    { .url = "rediss://h?insecure=1",
      .topology = S,
      .tls = true,
      .n_nodes = 1,
      .hosts = { "h" },
      .ports = { 6379 },
      .insecure = true,
      .redacted = "rediss://h:6379?insecure=1" },
    { .url = "unix:///run/redis/redis.sock",
      .topology = U,
      .path = "/run/redis/redis.sock",
      .redacted = "unix:///run/redis/redis.sock" },
    { .url = "unix:///tmp/my%20redis.sock?db=4&user=app&password=hunter2",
      .topology = U,
      .path = "/tmp/my redis.sock",
      .db = 4,
      .user = "app",
      .password = "hunter2",
      .redacted = "unix:///tmp/my%20redis.sock?db=4&user=app&password=***" },
    { .url = "redis+sentinel://s1,s2:26380,[::2]/mymaster",
      .topology = SEN,
      .n_nodes = 3,
      .hosts = { "s1", "s2", "::2" },
      .ports = { 26379, 26380, 26379 },
      .master = "mymaster",
      .redacted = "redis+sentinel://s1:26379,s2:26380,[::2]:26379/mymaster" },
    { .url = "redis+sentinel://u:s3cret@s1:5000/my%2Fmaster/6?sentinel_user=sen&sentinel_password=sent-pw",
      .topology = SEN,
      .n_nodes = 1,
      .hosts = { "s1" },
      .ports = { 5000 },
      .master = "my/master",
      .user = "u",
      .password = "s3cret",
      .db = 6,
      .sentinel_user = "sen",
      .sentinel_password = "sent-pw",
      .redacted = "redis+sentinel://u:***@s1:5000/my%2Fmaster/6?sentinel_user=sen&sentinel_password=***" },
    { .url = "rediss+sentinel://s1/m?sni=data.example&cacert=ca.pem",
      .topology = SEN,
      .tls = true,
      .n_nodes = 1,
      .hosts = { "s1" },
      .ports = { 26379 },
      .master = "m",
      .cacert = "ca.pem",
      .sni = "data.example",
      .redacted = "rediss+sentinel://s1:26379/m?cacert=ca.pem&sni=data.example" },
    { .url = "redis+cluster://:s3cret@n1:7000,n2:7001,n3",
      .topology = CL,
      .n_nodes = 3,
      .hosts = { "n1", "n2", "n3" },
      .ports = { 7000, 7001, 6379 },
      .password = "s3cret",
      .redacted = "redis+cluster://:***@n1:7000,n2:7001,n3:6379" },
    { .url = "rediss+cluster://n1:7000/?insecure=1",
      .topology = CL,
      .tls = true,
      .n_nodes = 1,
      .hosts = { "n1" },
      .ports = { 7000 },
      .insecure = true,
      .redacted = "rediss+cluster://n1:7000?insecure=1" },
};

static bool same(const char *a, const char *b) { return (a == NULL && b == NULL) || (a && b && strcmp(a, b) == 0); }

#define FIELD(name, got, want)                                                                                         \
    CHECK(same(got, want), "%s: %s is \"%s\", want \"%s\"", c->url, name, (got) ? (got) : "(null)",                    \
          (want) ? (want) : "(null)")

static void check_fields(const valid_case_t *c, const sluice__redis_url_t *u) {
    CHECK(u->topology == c->topology, "%s: topology %d", c->url, (int)u->topology);
    CHECK(u->tls.tls == c->tls, "%s: tls", c->url);
    CHECK(u->n_nodes == c->n_nodes, "%s: %zu nodes", c->url, u->n_nodes);
    for (size_t i = 0; i < c->n_nodes; i++) {
        FIELD("host", u->nodes[i].host, c->hosts[i]);
        CHECK(u->nodes[i].port == c->ports[i], "%s: node %zu port %d", c->url, i, u->nodes[i].port);
    }
    FIELD("path", u->path, c->path);
    FIELD("master", u->master, c->master);
    FIELD("user", u->user, c->user);
    CHECK(same(u->password, c->password), "%s: wrong password", c->url);
    CHECK(u->db == c->db, "%s: db %d", c->url, u->db);
    FIELD("cacert", u->tls.cacert, c->cacert);
    FIELD("cert", u->tls.cert, c->cert);
    FIELD("key", u->tls.key, c->key);
    FIELD("sni", u->tls.sni, c->sni);
    CHECK(u->tls.insecure == c->insecure, "%s: insecure", c->url);
    FIELD("password_env", u->password_env, c->password_env);
    FIELD("sentinel_user", u->sentinel_user, c->sentinel_user);
    CHECK(same(u->sentinel_password, c->sentinel_password), "%s: wrong sentinel password", c->url);
}

static void check_no_secret(const char *url, const char *text, const char *what) {
    for (size_t i = 0; i < sizeof k_secrets / sizeof k_secrets[0]; i++)
        CHECK(!strstr(text, k_secrets[i]), "%s: the password \"%s\" is in the %s: %s", url, k_secrets[i], what, text);
}

/* Redacts `url` and parses the result: the same fields, the password "***". */
static void check_redacted(const valid_case_t *c) {
    char out[512], why[256];
    int n = sluice_fleet_redact_url(c->url, out, sizeof out);
    CHECK(n == (int)strlen(out), "%s: redact returned %d for \"%s\"", c->url, n, out);
    CHECK(strcmp(out, c->redacted) == 0, "%s: redacted \"%s\", want \"%s\"", c->url, out, c->redacted);
    check_no_secret(c->url, out, "redacted form");
    sluice__redis_url_t u;
    CHECK(sluice__redis_url_parse(out, &u, why, sizeof why) == 0, "%s: redacted does not parse: %s", out, why);
    valid_case_t again = *c;
    again.password = c->password ? "***" : NULL;
    again.sentinel_password = c->sentinel_password ? "***" : NULL;
    check_fields(&again, &u);
    sluice__redis_url_free(&u);
}

static void test_valid(void) {
    for (size_t i = 0; i < sizeof k_valid / sizeof k_valid[0]; i++) {
        const valid_case_t *c = &k_valid[i];
        if (!c->redacted) continue;
        sluice__redis_url_t u;
        char why[256];
        int rc = sluice__redis_url_parse(c->url, &u, why, sizeof why);
        CHECK(rc == 0, "%s: refused (%d): %s", c->url, rc, why);
        CHECK(why[0] == '\0', "%s: why not empty on success", c->url);
        check_fields(c, &u);
        sluice__redis_url_free(&u);
        CHECK(u.nodes == NULL && u.password == NULL && u.n_nodes == 0, "free zeroes the struct");
        check_redacted(c);
        CHECK(sluice_fleet_check_url(c->url, why, sizeof why) == 0, "%s: check_url: %s", c->url, why);
    }
    /* Unescaped "@", "/" and "?" in the password: the last "@" before the
     * query ends the credentials. */
    sluice__redis_url_t u;
    CHECK(sluice__redis_url_parse("redis://bob:p@ss/w@h:7000/2", &u, NULL, 0) == 0, "raw @ and / in password");
    CHECK(same(u.user, "bob") && same(u.password, "p@ss/w") && same(u.nodes[0].host, "h") && u.nodes[0].port == 7000 &&
              u.db == 2,
          "raw @ and / in password: fields");
    sluice__redis_url_free(&u);
    sluice__redis_url_free(&u); /* twice: harmless */
    sluice__redis_url_free(NULL);
}

typedef struct invalid_case {
    const char *url;
    const char *why; /* a substring of the sentence */
} invalid_case_t;

static const invalid_case_t k_invalid[] = {
    { "", "empty" },
    { "http://h", "unknown scheme \"http\"" },
    { "redis:/h", "no scheme" },
    { "h:6379/0", "no scheme" },
    { "redis://", "the host is empty" },
    { "redis://:s3cret@", "the host is empty" },
    { "redis://h:65536", "port \"65536\" is out of range (1 to 65535)" },
    { "redis://h:0", "port \"0\" is out of range" },
    { "redis://h:", "the port after host \"h\" is empty" },
    { "redis://h:63a", "the port after host \"h\" is not a decimal number" },
    { "redis://h:-1", "not a decimal number" },
    { "redis://h:99999999999999999999", "out of range" },
    { "redis://h/x", "database \"x\" in the path is not a decimal number" },
    { "redis://h/2147483648", "database \"2147483648\" in the path is out of range" },
    { "redis://h/-1", "not a decimal number" },
    { "redis://h/1/2", "too many parts" },
    { "redis://h?db=+1", "database \"+1\" in db= is not a decimal number" },
    { "redis://h/1?db=2", "the database is given twice" },
    { "redis://h?db=1&db=1", "query parameter \"db\" is given twice" },
    { "redis://h?db=", "query parameter \"db\" has an empty value" },
    { "redis://h?db", "query parameter \"db\" has no value" },
    { "redis://h?db=1&", "empty parameter" },
    { "redis://h?", "empty parameter" },
    { "redis://a,b", "redis:// takes one host (got 2)" },
    { "redis://[::1", "not closed with \"]\"" },
    { "redis://::1", "more than one \":\"" },
    { "redis://h]:1", "not a letter, digit" },
    { "redis://[]:1", "is empty" },
    { "redis://[abcx::1]", "is not an IPv6 address" },
    { "redis://[::1]x", "unexpected text after the IPv6 address" },
    { "redis://h%41", "not a letter, digit" },
    { "redis://h?cacrt=ca.pem", "unknown query parameter \"cacrt\" for redis:// (known: db, password_env)" },
    { "rediss://h?cacrt=ca.pem", "(known: db, password_env, cacert, cert, key, sni, insecure)" },
    { "redis://h?cacert=ca.pem", "query parameter \"cacert\" needs TLS" },
    { "redis://h?password=s3cret", "query parameter \"password\" is for unix:// only" },
    { "redis://h?sentinel_user=x", "is for redis+sentinel:// and rediss+sentinel:// only" },
    { "rediss://h?cert=c.pem", "cert= needs key=" },
    { "rediss://h?key=k.pem", "key= needs cert=" },
    { "rediss://h?insecure=yes", "insecure takes 1 or 0 (got \"yes\")" },
    { "rediss://h?sni=a/b", "sni \"a/b\" is not a host name" },
    { "redis://alice@h", "a user name is given without a password" },
    { "redis://alice:@h", "a user name is given without a password" },
    { "redis://:s3cret@h?password_env=HOME", "a password is given twice" },
    { "redis://h?password_env=s3cret!", "password_env takes the name of an environment variable" },
    { "redis://h?password_env=SLUICE_TEST_URL_UNSET_VAR", "\"SLUICE_TEST_URL_UNSET_VAR\", which is not set" },
    { "redis://:s3cre%4@h", "the password has a malformed escape" },
    { "redis://:s3cret%0A@h", "the password holds an escaped control character (%0A)" },
    { "redis://:s3cret%@h", "the password has a malformed escape" },
    { "redis://u%zz:s3cret@h", "the user name has a malformed escape" },
    { "redis://h:1\n", "a control character at byte 12" },
    { "redis://h: 1", "a space at byte 11" },
    { "unix://h/tmp/r.sock", "unix:// takes no host nor credentials" },
    { "unix://u:s3cret@/tmp/r.sock", "unix:// takes no host nor credentials" },
    { "unix:///tmp/r.sock?user=u", "a user name is given without a password" },
    { "unix:///tmp/r.sock?password=s3cret&password_env=HOME", "a password is given twice" },
    { "unix:///tmp/r.sock?sni=x", "needs TLS" },
    { "unix:///tmp/%00.sock", "the socket path holds an escaped control character (%00)" },
    { "redis+sentinel://s1,s2", "needs the master's name" },
    { "redis+sentinel://s1,,s2/m", "host 2 of the list is empty" },
    { "redis+sentinel://s1,s2,/m", "host 3 of the list is empty" },
    { "redis+sentinel://s1:26379:1/m", "more than one \":\"" },
    { "redis+sentinel://s1/m/1/2", "too many parts" },
    { "redis+sentinel://s1/m?sentinel_user=x", "sentinel_user is given without sentinel_password" },
    { "redis+sentinel://s1/m?sentinel_password=s3cret&sentinel_password_env=HOME", "a password is given twice" },
    { "redis+cluster://n1:7000/3", "Redis Cluster has only database 0: remove \"/3\"" },
    { "rediss+cluster://n1:7000?db=0", "Redis Cluster has only database 0: remove db=0" },
    { "redis+cluster://n1:7000,:7001", "a host is empty before its port" },
    /* An "@" only after the "?": the credentials cannot be found, so no URL text is quoted. */
    { "redis://u:s3cret?x@h", "the port after host \"(not shown)\"" },
    { "redis://u:12?hunter2@h", "unknown query parameter \"(not shown)\"" },
};

static void test_invalid(void) {
    for (size_t i = 0; i < sizeof k_invalid / sizeof k_invalid[0]; i++) {
        const invalid_case_t *c = &k_invalid[i];
        sluice__redis_url_t u;
        char why[256];
        memset(&u, 0x5a, sizeof u);
        int rc = sluice__redis_url_parse(c->url, &u, why, sizeof why);
        CHECK(rc == SLUICE_ESYNTAX, "%s: accepted (%d)", c->url, rc);
        CHECK(strncmp(why, "redis URL: ", 11) == 0, "%s: why \"%s\"", c->url, why);
        CHECK(strstr(why, c->why), "%s: why \"%s\" does not say \"%s\"", c->url, why, c->why);
        check_no_secret(c->url, why, "error");
        CHECK(u.nodes == NULL && u.password == NULL && u.user == NULL && u.n_nodes == 0, "%s: out not zeroed on error",
              c->url);
        char why2[256];
        CHECK(sluice_fleet_check_url(c->url, why2, sizeof why2) == SLUICE_ESYNTAX && strcmp(why, why2) == 0,
              "%s: check_url differs: %s", c->url, why2);
        char out[64] = "x";
        CHECK(sluice_fleet_redact_url(c->url, out, sizeof out) == SLUICE_ESYNTAX && out[0] == '\0',
              "%s: redact of a malformed URL", c->url);
    }
    char big[SLUICE__REDIS_URL_MAX + 2];
    memset(big, 'a', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    char why[128];
    CHECK(sluice_fleet_check_url(big, why, sizeof why) == SLUICE_ESYNTAX && strstr(why, "longer than 4096 bytes"),
          "long URL: %s", why);
    big[SLUICE__REDIS_URL_MAX] = '\0'; /* 4096 bytes: the limit itself is fine */
    memcpy(big, "redis://", 8);
    CHECK(sluice_fleet_check_url(big, why, sizeof why) == SLUICE_ESYNTAX && strstr(why, "longer than 253"),
          "4096-byte URL reaches the host check: %s", why);
    CHECK(sluice_fleet_check_url(NULL, why, sizeof why) == SLUICE_ESYNTAX && strstr(why, "NULL"), "NULL URL");
    /* why: NULL, 0 bytes, or too short (cut, terminated). */
    CHECK(sluice_fleet_check_url("redis://h:0", NULL, 0) == SLUICE_ESYNTAX, "why NULL");
    why[0] = 'x';
    CHECK(sluice_fleet_check_url("redis://h:0", why, 0) == SLUICE_ESYNTAX && why[0] == 'x', "why_len 0");
    CHECK(sluice_fleet_check_url("redis://h:0", why, 8) == SLUICE_ESYNTAX && strcmp(why, "redis U") == 0,
          "why cut: \"%s\"", why);
    CHECK(sluice_fleet_check_url("redis://h:0", why, 16) == SLUICE_ESYNTAX && strcmp(why, "redis URL: port") == 0,
          "why cut: \"%s\"", why);
}

/* password_env and sentinel_password_env read the environment at parse time. */
static void test_env(void) {
    CHECK(setenv("SLUICE_TEST_URL_PW", "env-pw-42", 1) == 0, "setenv");
    CHECK(setenv("SLUICE_TEST_URL_EMPTY", "", 1) == 0, "setenv");
    sluice__redis_url_t u;
    char why[256], out[256];
    const char *url = "redis://alice@h?password_env=SLUICE_TEST_URL_PW";
    CHECK(sluice__redis_url_parse(url, &u, why, sizeof why) == 0, "password_env: %s", why);
    CHECK(same(u.user, "alice") && same(u.password, "env-pw-42") && same(u.password_env, "SLUICE_TEST_URL_PW"),
          "password_env fields");
    sluice__redis_url_free(&u);
    CHECK(sluice_fleet_redact_url(url, out, sizeof out) > 0 &&
              strcmp(out, "redis://alice@h:6379?password_env=SLUICE_TEST_URL_PW") == 0,
          "password_env redacted: %s", out);

    url = "unix:///s?password_env=SLUICE_TEST_URL_PW";
    CHECK(sluice__redis_url_parse(url, &u, why, sizeof why) == 0 && same(u.password, "env-pw-42"), "unix env");
    sluice__redis_url_free(&u);
    CHECK(sluice_fleet_redact_url(url, out, sizeof out) > 0 &&
              strcmp(out, "unix:///s?password_env=SLUICE_TEST_URL_PW") == 0,
          "unix env redacted: %s", out);

    url = "rediss+sentinel://s/m?sentinel_user=su&sentinel_password_env=SLUICE_TEST_URL_PW&password_env=HOME";
    CHECK(sluice__redis_url_parse(url, &u, why, sizeof why) == 0, "sentinel env: %s", why);
    CHECK(same(u.sentinel_user, "su") && same(u.sentinel_password, "env-pw-42") && same(u.password, getenv("HOME")),
          "sentinel env fields");
    sluice__redis_url_free(&u);

    /* An error after the variable was read never shows its value. */
    CHECK(sluice__redis_url_parse("redis://h/1?password_env=SLUICE_TEST_URL_PW&db=2", &u, why, sizeof why) ==
              SLUICE_ESYNTAX,
          "db conflict after env");
    check_no_secret("db conflict", why, "error");
    CHECK(sluice__redis_url_parse("redis://h?password_env=SLUICE_TEST_URL_EMPTY", &u, why, sizeof why) ==
                  SLUICE_ESYNTAX &&
              strstr(why, "\"SLUICE_TEST_URL_EMPTY\", which is empty"),
          "empty variable: %s", why);
}

/* ---- the password is wiped before it is freed ---- */

typedef struct wipe_check {
    int found; /* released blocks that still held a secret */
} wipe_check_t;

static void *wc_alloc(void *ctx, size_t size) {
    (void)ctx;
    return malloc(size);
}

static void wc_release(void *ctx, void *p, size_t size) {
    wipe_check_t *w = ctx;
    for (size_t i = 0; i < sizeof k_secrets / sizeof k_secrets[0]; i++) {
        size_t n = strlen(k_secrets[i]);
        for (size_t k = 0; p && k + n <= size; k++)
            if (memcmp((char *)p + k, k_secrets[i], n) == 0) w->found++;
    }
    free(p);
}

static void test_wipe(void) {
    wipe_check_t w = { 0 };
    sluice_allocator_t a = { wc_alloc, wc_release, &w };
    sluice__redis_url_set_allocator(&a);
    sluice__redis_url_t u;
    CHECK(sluice__redis_url_parse("redis+sentinel://u:s3cret@s/m?sentinel_password=sent-pw", &u, NULL, 0) == 0,
          "wipe parse");
    sluice__redis_url_free(&u);
    CHECK(setenv("SLUICE_TEST_URL_PW", "env-pw-42", 1) == 0, "setenv");
    CHECK(sluice__redis_url_parse("unix:///s?password_env=SLUICE_TEST_URL_PW", &u, NULL, 0) == 0, "wipe env");
    sluice__redis_url_free(&u);
    /* And on an error after the password was taken. */
    CHECK(sluice__redis_url_parse("redis://:s3cret@h/1?db=2", &u, NULL, 0) == SLUICE_ESYNTAX, "wipe error");
    sluice__redis_url_set_allocator(NULL);
    CHECK(w.found == 0, "%d freed blocks still held a password", w.found);
}

/* ---- allocation failures ---- */

static void test_enomem(void) {
    static const char *const urls[] = {
        "redis://alice:s3cret@h:1/2",
        "rediss+sentinel://u:s3cret@a,b:2,[::1]/m%2F/3?cacert=c&cert=d&key=e&sni=f&sentinel_user=x&"
        "sentinel_password=sent-pw",
        "unix:///tmp/s.sock?user=u&password=hunter2",
        "redis+cluster://a,b,c,d,e?password_env=SLUICE_TEST_URL_PW",
    };
    CHECK(setenv("SLUICE_TEST_URL_PW", "env-pw-42", 1) == 0, "setenv");
    for (size_t i = 0; i < sizeof urls / sizeof urls[0]; i++) {
        fault_alloc_t fa;
        fault_alloc_init(&fa);
        sluice__redis_url_set_allocator(fault_alloc_hook(&fa));
        int failures = 0;
        for (uint64_t nth = 1;; nth++) {
            fault_alloc_fail_nth(&fa, nth);
            sluice__redis_url_t u;
            char why[128];
            int rc = sluice__redis_url_parse(urls[i], &u, why, sizeof why);
            if (rc == 0) {
                sluice__redis_url_free(&u);
                CHECK(fault_alloc_leaks(&fa) == 0, "%s: leak after free", urls[i]);
                break;
            }
            CHECK(rc == SLUICE_ENOMEM, "%s: allocation %llu failed: %d %s", urls[i], (unsigned long long)nth, rc, why);
            CHECK(strcmp(why, "redis URL: out of memory") == 0, "%s: why \"%s\"", urls[i], why);
            CHECK(fault_alloc_leaks(&fa) == 0, "%s: allocation %llu failed: leak", urls[i], (unsigned long long)nth);
            failures++;
            /* The public functions pass it on. */
            fault_alloc_fail_nth(&fa, nth);
            CHECK(sluice_fleet_check_url(urls[i], NULL, 0) == SLUICE_ENOMEM, "check_url ENOMEM");
            fault_alloc_fail_nth(&fa, nth);
            CHECK(sluice_fleet_redact_url(urls[i], why, sizeof why) == SLUICE_ENOMEM && why[0] == '\0',
                  "redact ENOMEM");
            fault_alloc_disarm(&fa);
        }
        CHECK(failures >= 3, "%s: only %d allocations", urls[i], failures);
        sluice__redis_url_set_allocator(NULL);
        CHECK(fault_alloc_clean(&fa), "%s: allocator misuse or leak", urls[i]);
        fault_alloc_destroy(&fa);
    }
}

/* ---- sluice_fleet_redact_url()'s contract ---- */

static void test_redact_contract(void) {
    const char *url = "redis://alice:s3cret@h:1/2";
    const char *full = "redis://alice:***@h:1/2";
    int n = (int)strlen(full);
    CHECK(sluice_fleet_redact_url(url, NULL, 0) == n, "length query");
    char out[128];
    for (size_t cap = 1; cap <= (size_t)n + 1; cap++) {
        memset(out, 'Z', sizeof out);
        CHECK(sluice_fleet_redact_url(url, out, cap) == n, "cap %zu: length", cap);
        CHECK(strlen(out) == cap - 1 && strncmp(out, full, cap - 1) == 0, "cap %zu: \"%s\"", cap, out);
        CHECK(out[cap] == 'Z', "cap %zu: wrote past out_len", cap);
    }
    CHECK(sluice_fleet_redact_url(url, NULL, 4) == SLUICE_EINVAL, "NULL out with a length");
    CHECK(sluice_fleet_redact_url(NULL, out, sizeof out) == SLUICE_ESYNTAX && out[0] == '\0', "NULL URL");
    /* Escapes in user, master and paths are written so they parse back. */
    CHECK(sluice_fleet_redact_url("redis+sentinel://a%3Ab%40c:x@s/m%20n?sentinel_user=%26&sentinel_password=%3D", out,
                                  sizeof out) > 0 &&
              strcmp(out, "redis+sentinel://a%3Ab%40c:***@s:26379/m%20n?sentinel_user=%26&sentinel_password=***") == 0,
          "escapes: %s", out);
}

int main(void) {
    unsetenv("SLUICE_TEST_URL_UNSET_VAR");
    if (!getenv("HOME")) setenv("HOME", "/root", 1);
    test_valid();
    test_invalid();
    test_env();
    test_wipe();
    test_enomem();
    test_redact_contract();
    printf(TEST_NAME ": ok\n");
    return 0;
}
