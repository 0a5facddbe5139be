/*
 * redis-url.c — parses a Redis address given as a URL (redis-url.h).
 *
 * libc only, so that the fuzzer can build it alone. The URL is read in one
 * pass, left to right: scheme, credentials, hosts, path, query; then the
 * checks that need the whole (passwords from the environment, a user
 * without a password, cert without key, the database).
 *
 * Secrets. The password never reaches `why`. The only URL text an error
 * quotes is a scheme, a host, a port, a database, a query parameter's name or
 * the value of `insecure`. When the credentials cannot be told apart from the
 * host with certainty (an "@" only after the "?": a password with an
 * unescaped "?"), no URL text is quoted at all.
 */
#include "redis-url.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DB_MAX 2147483647L /* SELECT takes a signed 32-bit index */
#define SHOW_MAX 64        /* bytes of URL text quoted in an error */
#define HOST_MAX 253       /* longest DNS name */
#define UNIX_PATH_MAX 107  /* sockaddr_un.sun_path (108) less the NUL */

/* ------------------------------------------------------------------ */
/* Allocation (a test hook, malloc/free by default)                   */
/* ------------------------------------------------------------------ */

static sluice_allocator_t g_alloc; /* zero: malloc/free */

void sluice__redis_url_set_allocator(const sluice_allocator_t *a) {
    if (a) {
        g_alloc = *a;
    } else {
        memset(&g_alloc, 0, sizeof g_alloc);
    }
}

static void *url_alloc(size_t n) { return g_alloc.alloc ? g_alloc.alloc(g_alloc.ctx, n) : malloc(n); }

static void url_release(void *p, size_t n) {
    if (!p) return;
    if (g_alloc.release) {
        g_alloc.release(g_alloc.ctx, p, n);
    } else {
        free(p);
    }
}

/* Zeroes `n` bytes through a volatile pointer: the compiler cannot drop it. */
void sluice__fleet_wipe(void *p, size_t n) {
    volatile unsigned char *v = p;
    while (n--) *v++ = 0;
}

/* Frees a string of this file (its block is strlen + 1 bytes: strings never
 * hold a NUL), wiping it first when it is a secret. */
static void free_str(char **s, bool secret) {
    if (!*s) return;
    size_t n = strlen(*s) + 1;
    if (secret) sluice__fleet_wipe(*s, n);
    url_release(*s, n);
    *s = NULL;
}

void sluice__redis_url_free(sluice__redis_url_t *u) {
    if (!u) return;
    for (size_t i = 0; i < u->n_nodes; i++) free_str(&u->nodes[i].host, false);
    url_release(u->nodes, u->n_nodes * sizeof *u->nodes);
    free_str(&u->path, false);
    free_str(&u->master, false);
    free_str(&u->user, false);
    free_str(&u->password, true);
    free_str(&u->tls.cacert, false);
    free_str(&u->tls.cert, false);
    free_str(&u->tls.key, false);
    free_str(&u->tls.sni, false);
    free_str(&u->password_env, false);
    free_str(&u->sentinel_user, false);
    free_str(&u->sentinel_password, true);
    free_str(&u->sentinel_password_env, false);
    memset(u, 0, sizeof *u);
}

/* A copy of `s` (NULL stays NULL) in this file's allocator. */
static bool copy_str(char **d, const char *s) {
    *d = NULL;
    if (!s) return true;
    size_t n = strlen(s) + 1;
    *d = url_alloc(n);
    if (*d) memcpy(*d, s, n);
    return *d != NULL;
}

int sluice__redis_url_copy(sluice__redis_url_t *d, const sluice__redis_url_t *s, bool data_credentials) {
    memset(d, 0, sizeof *d);
    d->topology = s->topology;
    d->db = s->db;
    d->tls.tls = s->tls.tls;
    d->tls.insecure = s->tls.insecure;
    bool ok = copy_str(&d->path, s->path) && copy_str(&d->master, s->master) &&
              copy_str(&d->tls.cacert, s->tls.cacert) && copy_str(&d->tls.cert, s->tls.cert) &&
              copy_str(&d->tls.key, s->tls.key) && copy_str(&d->tls.sni, s->tls.sni) &&
              copy_str(&d->password_env, s->password_env) && copy_str(&d->sentinel_user, s->sentinel_user) &&
              copy_str(&d->sentinel_password, s->sentinel_password) &&
              copy_str(&d->sentinel_password_env, s->sentinel_password_env);
    if (ok && data_credentials) ok = copy_str(&d->user, s->user) && copy_str(&d->password, s->password);
    if (ok && s->n_nodes) {
        d->nodes = url_alloc(s->n_nodes * sizeof *d->nodes);
        ok = d->nodes != NULL;
        if (ok) memset(d->nodes, 0, s->n_nodes * sizeof *d->nodes);
        for (size_t i = 0; ok && i < s->n_nodes; i++) {
            d->n_nodes = i + 1;
            d->nodes[i].port = s->nodes[i].port;
            ok = copy_str(&d->nodes[i].host, s->nodes[i].host);
        }
    }
    if (!ok) {
        sluice__redis_url_free(d);
        return SLUICE_ENOMEM;
    }
    return 0;
}

/* ------------------------------------------------------------------ */
/* The parser's state and its errors                                  */
/* ------------------------------------------------------------------ */

typedef struct span {
    const char *s;
    size_t n;
} span_t;

/* The query parameters, in the order of the "known:" lists. */
enum qp {
    QP_DB,
    QP_PASSWORD_ENV,
    QP_CACERT,
    QP_CERT,
    QP_KEY,
    QP_SNI,
    QP_INSECURE,
    QP_USER,
    QP_PASSWORD,
    QP_SENTINEL_USER,
    QP_SENTINEL_PASSWORD,
    QP_SENTINEL_PASSWORD_ENV,
    QP_COUNT
};

static const char *const k_qp_names[QP_COUNT] = {
    "db",
    "password_env",
    "cacert",
    "cert",
    "key",
    "sni",
    "insecure",
    "user",
    "password",
    "sentinel_user",
    "sentinel_password",
    "sentinel_password_env",
};

struct parser {
    sluice__redis_url_t *u;
    char *why;
    size_t why_len;
    const char *scheme; /* canonical name, for messages */
    bool quiet;         /* quote no URL text in errors (see the top) */
    bool seen[QP_COUNT];
    bool path_db_set, query_db_set;
    long path_db, query_db;
    char shown[2][SHOW_MAX + 8]; /* quoted URL text, two per message */
    int next_shown;
};

/* Writes "redis URL: " and the sentence into `why`. @return SLUICE_ESYNTAX. */
__attribute__((format(printf, 2, 3))) static int fail(struct parser *p, const char *fmt, ...) {
    if (p->why && p->why_len > 0) {
        int k = snprintf(p->why, p->why_len, "redis URL: ");
        if (k > 0 && (size_t)k < p->why_len) {
            va_list ap;
            va_start(ap, fmt);
            vsnprintf(p->why + k, p->why_len - (size_t)k, fmt, ap);
            va_end(ap);
        }
    }
    return SLUICE_ESYNTAX;
}

static int no_memory(struct parser *p) {
    if (p->why && p->why_len > 0) snprintf(p->why, p->why_len, "redis URL: out of memory");
    return SLUICE_ENOMEM;
}

/* URL text for a message: at most SHOW_MAX bytes, "..." when cut, or
 * "(not shown)" in quiet mode. Valid until the next-but-one call. */
static const char *show(struct parser *p, span_t sp) {
    if (p->quiet) return "(not shown)";
    char *b = p->shown[p->next_shown];
    p->next_shown ^= 1;
    size_t n = sp.n > SHOW_MAX ? SHOW_MAX : sp.n;
    memcpy(b, sp.s, n);
    strcpy(b + n, sp.n > SHOW_MAX ? "..." : "");
    return b;
}

/* ------------------------------------------------------------------ */
/* Small readers                                                       */
/* ------------------------------------------------------------------ */

static span_t span(const char *s, size_t n) {
    span_t sp = { s, n };
    return sp;
}

/* The first `c` in `sp`, or NULL. */
static const char *find(span_t sp, char c) { return sp.n ? memchr(sp.s, c, sp.n) : NULL; }

static bool is_digit(int c) { return c >= '0' && c <= '9'; }

static bool is_alpha(int c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }

static bool all_digits(span_t sp) {
    if (sp.n == 0) return false;
    for (size_t i = 0; i < sp.n; i++)
        if (!is_digit((unsigned char)sp.s[i])) return false;
    return true;
}

/* Decimal digits only, at most `max`. @return false when not such a number. */
static bool read_number(span_t sp, long max, long *out) {
    if (!all_digits(sp)) return false;
    long v = 0;
    for (size_t i = 0; i < sp.n; i++) {
        v = v * 10 + (sp.s[i] - '0');
        if (v > max) return false;
    }
    *out = v;
    return true;
}

static int hex_value(int c) {
    if (is_digit(c)) return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* Copies `sp` into a new string, decoding %XX escapes. An error names the
 * part (`what`) and quotes none of its text: it may be a password. */
static int decode(struct parser *p, span_t sp, const char *what, char **out) {
    size_t n = 0;
    for (size_t i = 0; i < sp.n; i++, n++) {
        if (sp.s[i] != '%') continue;
        int hi = i + 2 < sp.n ? hex_value((unsigned char)sp.s[i + 1]) : -1;
        int lo = hi >= 0 ? hex_value((unsigned char)sp.s[i + 2]) : -1;
        if (lo < 0) return fail(p, "the %s has a malformed escape (a %% must be followed by two hex digits)", what);
        int c = hi * 16 + lo;
        if (c < 0x20 || c == 0x7f) return fail(p, "the %s holds an escaped control character (%%%02X)", what, c);
        i += 2;
    }
    char *s = url_alloc(n + 1);
    if (!s) return no_memory(p);
    for (size_t i = 0, k = 0; i < sp.n; i++, k++) {
        if (sp.s[i] == '%') {
            s[k] = (char)(hex_value((unsigned char)sp.s[i + 1]) * 16 + hex_value((unsigned char)sp.s[i + 2]));
            i += 2;
        } else {
            s[k] = sp.s[i];
        }
    }
    s[n] = '\0';
    *out = s;
    return 0;
}

/* Copies `sp` as is (hosts: already checked to be plain ASCII). */
static int copy(struct parser *p, span_t sp, char **out) {
    char *s = url_alloc(sp.n + 1);
    if (!s) return no_memory(p);
    memcpy(s, sp.s, sp.n);
    s[sp.n] = '\0';
    *out = s;
    return 0;
}

/* ------------------------------------------------------------------ */
/* Scheme                                                              */
/* ------------------------------------------------------------------ */

static const struct {
    const char *name;
    sluice__redis_topology_t topology;
    bool tls;
} k_schemes[] = {
    { "redis", SLUICE__REDIS_SINGLE, false },
    { "rediss", SLUICE__REDIS_SINGLE, true },
    { "unix", SLUICE__REDIS_UNIX, false },
    { "redis+sentinel", SLUICE__REDIS_SENTINEL, false },
    { "rediss+sentinel", SLUICE__REDIS_SENTINEL, true },
    { "redis+cluster", SLUICE__REDIS_CLUSTER, false },
    { "rediss+cluster", SLUICE__REDIS_CLUSTER, true },
};

static bool same_ignoring_case(span_t sp, const char *name) {
    if (strlen(name) != sp.n) return false;
    for (size_t i = 0; i < sp.n; i++) {
        int c = (unsigned char)sp.s[i];
        if (c >= 'A' && c <= 'Z') c += 'a' - 'A';
        if (c != name[i]) return false;
    }
    return true;
}

/* Sets the topology and TLS from the scheme's name. */
static int read_scheme(struct parser *p, span_t sp) {
    for (size_t i = 0; i < sizeof k_schemes / sizeof k_schemes[0]; i++) {
        if (!same_ignoring_case(sp, k_schemes[i].name)) continue;
        p->scheme = k_schemes[i].name;
        p->u->topology = k_schemes[i].topology;
        p->u->tls.tls = k_schemes[i].tls;
        return 0;
    }
    return fail(p,
                "unknown scheme \"%s\" (known: redis, rediss, unix, redis+sentinel, rediss+sentinel, "
                "redis+cluster, rediss+cluster)",
                show(p, sp));
}

/* ------------------------------------------------------------------ */
/* Credentials, hosts, path                                            */
/* ------------------------------------------------------------------ */

/* USER[:PASSWORD] or :PASSWORD; an empty part is absent. */
static int read_userinfo(struct parser *p, span_t sp) {
    const char *colon = find(sp, ':');
    span_t user = span(sp.s, colon ? (size_t)(colon - sp.s) : sp.n);
    if (user.n > 0) {
        int rc = decode(p, user, "user name", &p->u->user);
        if (rc) return rc;
    }
    if (!colon) return 0;
    span_t pw = span(colon + 1, sp.n - user.n - 1);
    return pw.n > 0 ? decode(p, pw, "password", &p->u->password) : 0;
}

static bool host_char(int c) { return is_alpha(c) || is_digit(c) || c == '-' || c == '.' || c == '_'; }

static bool ipv6_char(int c) { return hex_value(c) >= 0 || c == ':' || c == '.'; }

/* The port after a host: 1..65535, decimal digits. */
static int read_port(struct parser *p, span_t host, span_t sp, int *out) {
    long v;
    if (sp.n == 0) return fail(p, "the port after host \"%s\" is empty", show(p, host));
    if (!all_digits(sp)) return fail(p, "the port after host \"%s\" is not a decimal number", show(p, host));
    if (!read_number(sp, 65535, &v) || v == 0) return fail(p, "port \"%s\" is out of range (1 to 65535)", show(p, sp));
    *out = (int)v;
    return 0;
}

/* "[IPV6]" or "[IPV6]:PORT": the host without brackets and the port text. */
static int split_bracketed(struct parser *p, span_t sp, span_t *host, span_t *port, bool *has_port) {
    const char *close = find(sp, ']');
    if (!close) return fail(p, "an IPv6 address opened with \"[\" is not closed with \"]\"");
    *host = span(sp.s + 1, (size_t)(close - sp.s) - 1);
    span_t rest = span(close + 1, sp.n - (size_t)(close - sp.s) - 1);
    if (host->n == 0) return fail(p, "the IPv6 address between \"[\" and \"]\" is empty");
    bool ok = host->n <= 45; /* INET6_ADDRSTRLEN less the NUL */
    for (size_t i = 0; i < host->n; i++) ok = ok && ipv6_char((unsigned char)host->s[i]);
    if (!ok) return fail(p, "\"%s\" is not an IPv6 address (hex digits, \":\" and \".\")", show(p, *host));
    if (!find(*host, ':')) return fail(p, "\"%s\" in brackets is not an IPv6 address", show(p, *host));
    if (rest.n > 0 && rest.s[0] != ':')
        return fail(p, "unexpected text after the IPv6 address \"[%s]\"", show(p, *host));
    *has_port = rest.n > 0;
    *port = rest.n > 0 ? span(rest.s + 1, rest.n - 1) : rest;
    return 0;
}

/* "NAME", "NAME:PORT", "1.2.3.4:PORT". */
static int split_plain(struct parser *p, span_t sp, span_t *host, span_t *port, bool *has_port) {
    const char *colon = find(sp, ':');
    *host = span(sp.s, colon ? (size_t)(colon - sp.s) : sp.n);
    *has_port = colon != NULL;
    *port = colon ? span(colon + 1, sp.n - host->n - 1) : span(sp.s + sp.n, 0);
    if (find(*port, ':'))
        return fail(p, "\"%s\" has more than one \":\" (an IPv6 address goes in brackets: [::1]:6379)", show(p, sp));
    if (host->n == 0) return fail(p, "a host is empty before its port");
    if (host->n > HOST_MAX) return fail(p, "host \"%s\" is longer than %d bytes", show(p, *host), HOST_MAX);
    for (size_t i = 0; i < host->n; i++)
        if (!host_char((unsigned char)host->s[i]))
            return fail(p, "host \"%s\" holds a character that is not a letter, digit, \"-\", \".\" or \"_\"",
                        show(p, *host));
    return 0;
}

/* One node of a host list (`index` from 1, for messages). */
static int read_node(struct parser *p, span_t sp, size_t index, int default_port, sluice__redis_node_t *node) {
    if (sp.n == 0) return index == 0 ? fail(p, "the host is empty") : fail(p, "host %zu of the list is empty", index);
    span_t host = { NULL, 0 }, port = { NULL, 0 };
    bool has_port = false;
    int rc =
        sp.s[0] == '[' ? split_bracketed(p, sp, &host, &port, &has_port) : split_plain(p, sp, &host, &port, &has_port);
    if (rc) return rc;
    node->port = default_port;
    if (has_port && (rc = read_port(p, host, port, &node->port)) != 0) return rc;
    return copy(p, host, &node->host);
}

/* HOST[:PORT][,HOST[:PORT]...]. */
static int read_nodes(struct parser *p, span_t sp) {
    size_t n = 1;
    for (size_t i = 0; i < sp.n; i++) n += sp.s[i] == ',';
    if (n > 1 && p->u->topology == SLUICE__REDIS_SINGLE)
        return fail(p, "%s:// takes one host (got %zu): several hosts are for redis+sentinel:// or redis+cluster://",
                    p->scheme, n);
    sluice__redis_url_t *u = p->u;
    u->nodes = url_alloc(n * sizeof *u->nodes);
    if (!u->nodes) return no_memory(p);
    memset(u->nodes, 0, n * sizeof *u->nodes);
    u->n_nodes = n;
    int default_port = u->topology == SLUICE__REDIS_SENTINEL ? 26379 : 6379;
    const char *s = sp.s, *end = sp.s + sp.n;
    for (size_t i = 0; i < n; i++) {
        const char *comma = memchr(s, ',', (size_t)(end - s));
        const char *stop = comma ? comma : end;
        int rc = read_node(p, span(s, (size_t)(stop - s)), n > 1 ? i + 1 : 0, default_port, &u->nodes[i]);
        if (rc) return rc;
        s = stop + 1;
    }
    return 0;
}

/* A database number: "/N" in the path or db=N. `where` names it for errors. */
static int read_db(struct parser *p, span_t sp, const char *where, long *out) {
    if (!all_digits(sp))
        return fail(p, "database \"%s\" %s is not a decimal number (0 to 2147483647)", show(p, sp), where);
    if (!read_number(sp, DB_MAX, out))
        return fail(p, "database \"%s\" %s is out of range (0 to 2147483647)", show(p, sp), where);
    return 0;
}

/* The path of a TCP form: "", "/", "/DB"; sentinel: "/MASTER[/DB]". */
static int read_path(struct parser *p, span_t sp) {
    if (sp.n > 0) sp = span(sp.s + 1, sp.n - 1); /* the "/" */
    if (p->u->topology == SLUICE__REDIS_SENTINEL) {
        const char *slash = find(sp, '/');
        span_t master = span(sp.s, slash ? (size_t)(slash - sp.s) : sp.n);
        if (master.n == 0)
            return fail(p, "%s:// needs the master's name after the hosts: %s://HOST:26379/MASTERNAME", p->scheme,
                        p->scheme);
        int rc = decode(p, master, "master name", &p->u->master);
        if (rc) return rc;
        sp = slash ? span(slash + 1, sp.n - master.n - 1) : span(sp.s + sp.n, 0);
    }
    if (sp.n == 0) return 0;
    if (find(sp, '/')) return fail(p, "the path \"/%s\" has too many parts", show(p, sp));
    if (p->u->topology == SLUICE__REDIS_CLUSTER)
        return fail(p, "Redis Cluster has only database 0: remove \"/%s\" from the %s:// URL", show(p, sp), p->scheme);
    p->path_db_set = true;
    return read_db(p, sp, "in the path", &p->path_db);
}

/* ------------------------------------------------------------------ */
/* Query                                                               */
/* ------------------------------------------------------------------ */

/* Whether parameter `q` is known for this scheme. */
static bool qp_applies(const struct parser *p, enum qp q) {
    switch (q) {
    case QP_CACERT:
    case QP_CERT:
    case QP_KEY:
    case QP_SNI:
    case QP_INSECURE: return p->u->tls.tls;
    case QP_USER:
    case QP_PASSWORD: return p->u->topology == SLUICE__REDIS_UNIX;
    case QP_SENTINEL_USER:
    case QP_SENTINEL_PASSWORD:
    case QP_SENTINEL_PASSWORD_ENV: return p->u->topology == SLUICE__REDIS_SENTINEL;
    default: return true;
    }
}

/* Why a known parameter does not apply to this scheme. */
static int qp_misplaced(struct parser *p, enum qp q) {
    const char *name = k_qp_names[q];
    switch (q) {
    case QP_USER:
    case QP_PASSWORD:
        return fail(p, "query parameter \"%s\" is for unix:// only: write %s://USER:PASSWORD@HOST", name, p->scheme);
    case QP_SENTINEL_USER:
    case QP_SENTINEL_PASSWORD:
    case QP_SENTINEL_PASSWORD_ENV:
        return fail(p, "query parameter \"%s\" is for redis+sentinel:// and rediss+sentinel:// only", name);
    default:
        return fail(p,
                    "query parameter \"%s\" needs TLS: use a rediss scheme (rediss://, rediss+sentinel://, "
                    "rediss+cluster://)",
                    name);
    }
}

static int qp_unknown(struct parser *p, span_t name) {
    char known[256] = "";
    for (int q = 0; q < QP_COUNT; q++) {
        if (!qp_applies(p, (enum qp)q)) continue;
        if (known[0]) strcat(known, ", ");
        strcat(known, k_qp_names[q]);
    }
    return fail(p, "unknown query parameter \"%s\" for %s:// (known: %s)", show(p, name), p->scheme, known);
}

/* An environment variable's name: letters, digits and "_", not a digit first. */
static bool env_name(const char *s) {
    if (!*s || is_digit((unsigned char)*s)) return false;
    for (; *s; s++)
        if (!is_alpha((unsigned char)*s) && !is_digit((unsigned char)*s) && *s != '_') return false;
    return true;
}

/* The field a string parameter fills. */
static char **qp_field(sluice__redis_url_t *u, enum qp q) {
    switch (q) {
    case QP_PASSWORD_ENV: return &u->password_env;
    case QP_CACERT: return &u->tls.cacert;
    case QP_CERT: return &u->tls.cert;
    case QP_KEY: return &u->tls.key;
    case QP_SNI: return &u->tls.sni;
    case QP_USER: return &u->user;
    case QP_PASSWORD: return &u->password;
    case QP_SENTINEL_USER: return &u->sentinel_user;
    case QP_SENTINEL_PASSWORD: return &u->sentinel_password;
    case QP_SENTINEL_PASSWORD_ENV: return &u->sentinel_password_env;
    default: return NULL;
    }
}

/* Checks a decoded string value of parameter `q`. */
static int qp_check_value(struct parser *p, enum qp q, const char *v) {
    if ((q == QP_PASSWORD_ENV || q == QP_SENTINEL_PASSWORD_ENV) && !env_name(v))
        return fail(p, "%s takes the name of an environment variable (letters, digits and \"_\"), not a password",
                    k_qp_names[q]);
    if (q == QP_SNI) {
        span_t sp = span(v, strlen(v));
        bool ok = sp.n <= HOST_MAX;
        for (size_t i = 0; i < sp.n; i++) ok = ok && host_char((unsigned char)v[i]);
        if (!ok) return fail(p, "sni \"%s\" is not a host name", show(p, sp));
    }
    return 0;
}

/* One NAME=VALUE of the query. */
static int read_param(struct parser *p, span_t sp) {
    const char *eq = find(sp, '=');
    span_t name = span(sp.s, eq ? (size_t)(eq - sp.s) : sp.n);
    if (sp.n == 0) return fail(p, "the query has an empty parameter (\"&&\", or \"&\" at an end)");
    int q = 0;
    while (q < QP_COUNT && !(strlen(k_qp_names[q]) == name.n && memcmp(name.s, k_qp_names[q], name.n) == 0)) q++;
    if (q == QP_COUNT || !eq) {
        if (q == QP_COUNT) return qp_unknown(p, name);
        return fail(p, "query parameter \"%s\" has no value (write %s=VALUE)", k_qp_names[q], k_qp_names[q]);
    }
    if (!qp_applies(p, (enum qp)q)) return qp_misplaced(p, (enum qp)q);
    if (p->seen[q]) return fail(p, "query parameter \"%s\" is given twice", k_qp_names[q]);
    p->seen[q] = true;
    span_t value = span(eq + 1, sp.n - name.n - 1);
    if (value.n == 0) return fail(p, "query parameter \"%s\" has an empty value", k_qp_names[q]);
    if (q == QP_DB) {
        p->query_db_set = true;
        return read_db(p, value, "in db=", &p->query_db);
    }
    if (q == QP_INSECURE) {
        if (value.n != 1 || (value.s[0] != '0' && value.s[0] != '1'))
            return fail(p, "insecure takes 1 or 0 (got \"%s\")", show(p, value));
        p->u->tls.insecure = value.s[0] == '1';
        return 0;
    }
    char **field = qp_field(p->u, (enum qp)q);
    if (q == QP_PASSWORD && p->u->password)
        return fail(p, "the password is given twice (in the query and before the host)");
    int rc = decode(p, value, k_qp_names[q], field);
    return rc ? rc : qp_check_value(p, (enum qp)q, *field);
}

static int read_query(struct parser *p, span_t sp) {
    const char *s = sp.s, *end = sp.s + sp.n;
    for (;;) {
        const char *amp = memchr(s, '&', (size_t)(end - s));
        const char *stop = amp ? amp : end;
        int rc = read_param(p, span(s, (size_t)(stop - s)));
        if (rc || !amp) return rc;
        s = amp + 1;
    }
}

/* ------------------------------------------------------------------ */
/* Checks over the whole                                               */
/* ------------------------------------------------------------------ */

/* Reads a password named by password_env (or sentinel_password_env). */
static int password_from_env(struct parser *p, const char *env, char **password, const char *param) {
    if (!env) return 0;
    if (*password) return fail(p, "a password is given twice (in the URL and by %s)", param);
    const char *v = getenv(env);
    if (!v) return fail(p, "%s names the environment variable \"%s\", which is not set", param, env);
    if (!*v) return fail(p, "%s names the environment variable \"%s\", which is empty", param, env);
    return copy(p, span(v, strlen(v)), password);
}

static int check_credentials(struct parser *p) {
    sluice__redis_url_t *u = p->u;
    int rc = password_from_env(p, u->password_env, &u->password, "password_env");
    if (!rc) rc = password_from_env(p, u->sentinel_password_env, &u->sentinel_password, "sentinel_password_env");
    if (rc) return rc;
    if (u->user && !u->password)
        return fail(p, "a user name is given without a password (add one, or password_env=NAME)");
    if (u->sentinel_user && !u->sentinel_password)
        return fail(p, "sentinel_user is given without sentinel_password (or sentinel_password_env)");
    if (u->tls.cert && !u->tls.key) return fail(p, "cert= needs key= (the client certificate's private key)");
    if (u->tls.key && !u->tls.cert) return fail(p, "key= needs cert= (the client certificate)");
    return 0;
}

static int check_db(struct parser *p) {
    if (p->u->topology == SLUICE__REDIS_CLUSTER && p->query_db_set)
        return fail(p, "Redis Cluster has only database 0: remove db=%ld from the %s:// URL", p->query_db, p->scheme);
    if (p->path_db_set && p->query_db_set && p->path_db != p->query_db)
        return fail(p, "the database is given twice, differently (\"/%ld\" in the path and db=%ld)", p->path_db,
                    p->query_db);
    p->u->db = (int)(p->query_db_set ? p->query_db : p->path_db);
    return 0;
}

/* ------------------------------------------------------------------ */
/* The forms                                                           */
/* ------------------------------------------------------------------ */

/* unix:///PATH[?query]: `rest` is what follows "unix://". */
static int read_unix(struct parser *p, span_t rest) {
    if (rest.n == 0 || rest.s[0] != '/')
        return fail(p, "unix:// takes no host nor credentials: write unix:///path/to/redis.sock "
                       "(user and password go in the query: ?user=U&password=P)");
    const char *q = find(rest, '?');
    span_t path = span(rest.s, q ? (size_t)(q - rest.s) : rest.n);
    int rc = decode(p, path, "socket path", &p->u->path);
    if (rc) return rc;
    size_t len = strlen(p->u->path);
    if (len > UNIX_PATH_MAX)
        return fail(p, "the socket path is %zu bytes long; a Unix socket path has at most %d", len, UNIX_PATH_MAX);
    return q ? read_query(p, span(q + 1, rest.n - path.n - 1)) : 0;
}

/* Everything after "SCHEME://" of a TCP form (or a bare HOST:PORT). */
static int read_network(struct parser *p, span_t rest) {
    const char *q = find(rest, '?');
    span_t before_q = span(rest.s, q ? (size_t)(q - rest.s) : rest.n);
    /* The last "@" before the "?" ends the credentials: a password may hold
     * "@" or "/" unescaped. */
    const char *at = NULL;
    for (const char *c = before_q.s; c < before_q.s + before_q.n; c++)
        if (*c == '@') at = c;
    p->quiet = !at && q && find(span(q, rest.n - before_q.n), '@');
    span_t hosts = before_q;
    if (at) {
        int rc = read_userinfo(p, span(rest.s, (size_t)(at - rest.s)));
        if (rc) return rc;
        hosts = span(at + 1, before_q.n - (size_t)(at - rest.s) - 1);
    }
    const char *slash = find(hosts, '/');
    span_t path = slash ? span(slash, hosts.n - (size_t)(slash - hosts.s)) : span(hosts.s + hosts.n, 0);
    hosts.n -= path.n;
    int rc = read_nodes(p, hosts);
    if (!rc) rc = read_path(p, path);
    if (!rc && q) rc = read_query(p, span(q + 1, rest.n - before_q.n - 1));
    return rc;
}

/* Length, control characters, spaces. */
static int check_text(struct parser *p, const char *url, size_t *len) {
    if (!url) return fail(p, "no URL given (NULL)");
    size_t n = strnlen(url, SLUICE__REDIS_URL_MAX + 1);
    if (n > SLUICE__REDIS_URL_MAX) return fail(p, "the URL is longer than %d bytes", SLUICE__REDIS_URL_MAX);
    if (n == 0) return fail(p, "the URL is empty");
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)url[i];
        if (c < 0x20 || c == 0x7f) return fail(p, "the URL has a control character at byte %zu", i + 1);
        if (c == ' ') return fail(p, "the URL has a space at byte %zu (escape it as %%20 where one is meant)", i + 1);
    }
    *len = n;
    return 0;
}

static int parse(struct parser *p, const char *url) {
    size_t n = 0;
    int rc = check_text(p, url, &n);
    if (rc) return rc;
    span_t all = span(url, n);
    const char *colon = find(all, ':');
    if (!colon || n - (size_t)(colon - url) < 3 || colon[1] != '/' || colon[2] != '/') {
        /* No scheme: a bare HOST[:PORT]. */
        if (find(all, '/') || find(all, '?') || find(all, '@'))
            return fail(p, "no scheme (such as redis://), and not a bare HOST:PORT either");
        p->scheme = "redis";
        p->u->topology = SLUICE__REDIS_SINGLE;
        rc = read_network(p, all);
    } else if ((rc = read_scheme(p, span(url, (size_t)(colon - url)))) == 0) {
        span_t rest = span(colon + 3, n - (size_t)(colon - url) - 3);
        rc = p->u->topology == SLUICE__REDIS_UNIX ? read_unix(p, rest) : read_network(p, rest);
    }
    if (!rc) rc = check_credentials(p);
    if (!rc) rc = check_db(p);
    return rc;
}

int sluice__redis_url_parse(const char *url, sluice__redis_url_t *out, char *why, size_t why_len) {
    struct parser p;
    memset(&p, 0, sizeof p);
    memset(out, 0, sizeof *out);
    p.u = out;
    p.why = why;
    p.why_len = why_len;
    if (why && why_len > 0) why[0] = '\0';
    int rc = parse(&p, url);
    if (rc) sluice__redis_url_free(out);
    return rc;
}
