/*
 * redis-url-write.c — writes a parsed address back as a URL, passwords
 * replaced by "***" (redis-url.h). For logs and descriptions.
 *
 * The form is canonical, so that parsing it again gives the same fields
 * (the fuzzer checks that): lower-case scheme, every port, IPv6 hosts in
 * brackets, escapes wherever a byte is not unreserved. libc only.
 */
#include "redis-url.h"

#include <string.h>

/* An output that counts what it could not hold, like snprintf. */
struct out {
    char *buf;
    size_t cap; /* bytes of buf, NUL included */
    size_t len; /* bytes of the whole form so far */
};

static void put_char(struct out *o, char c) {
    if (o->len + 1 < o->cap) o->buf[o->len] = c;
    o->len++;
}

static void put(struct out *o, const char *s) {
    while (*s) put_char(o, *s++);
}

static void put_int(struct out *o, long v) {
    char digits[24];
    int n = 0;
    do {
        digits[n++] = (char)('0' + v % 10);
        v /= 10;
    } while (v > 0);
    while (n > 0) put_char(o, digits[--n]);
}

/* Unreserved bytes (RFC 3986) pass as they are, "/" too when `keep_slash`. */
static void put_escaped(struct out *o, const char *s, bool keep_slash) {
    static const char hex[] = "0123456789ABCDEF";
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        bool plain = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
                     c == '.' || c == '_' || c == '~' || (keep_slash && c == '/');
        if (plain) {
            put_char(o, (char)c);
        } else {
            put_char(o, '%');
            put_char(o, hex[c >> 4]);
            put_char(o, hex[c & 15]);
        }
    }
}

static const char *scheme(const sluice__redis_url_t *u) {
    switch (u->topology) {
    case SLUICE__REDIS_UNIX: return "unix";
    case SLUICE__REDIS_SENTINEL: return u->tls.tls ? "rediss+sentinel" : "redis+sentinel";
    case SLUICE__REDIS_CLUSTER: return u->tls.tls ? "rediss+cluster" : "redis+cluster";
    default: return u->tls.tls ? "rediss" : "redis";
    }
}

/* "USER:***@", ":***@", "USER@" (password from the environment) or nothing. */
static void put_userinfo(struct out *o, const sluice__redis_url_t *u) {
    bool inline_password = u->password && !u->password_env;
    if (!u->user && !inline_password) return;
    if (u->user) put_escaped(o, u->user, false);
    if (inline_password) put(o, ":***");
    put_char(o, '@');
}

static void put_nodes(struct out *o, const sluice__redis_url_t *u) {
    for (size_t i = 0; i < u->n_nodes; i++) {
        bool ipv6 = strchr(u->nodes[i].host, ':') != NULL;
        if (i > 0) put_char(o, ',');
        if (ipv6) put_char(o, '[');
        put(o, u->nodes[i].host);
        if (ipv6) put_char(o, ']');
        put_char(o, ':');
        put_int(o, u->nodes[i].port);
    }
}

/* One query parameter: "?NAME=" or "&NAME=" then the escaped value. */
static void put_param(struct out *o, bool *first, const char *name, const char *value) {
    if (!value) return;
    put_char(o, *first ? '?' : '&');
    *first = false;
    put(o, name);
    put_char(o, '=');
    put_escaped(o, value, true);
}

/* A password parameter: "***", or the variable it was read from. */
static void put_secret(struct out *o, bool *first, const char *name, const char *secret, const char *env_name,
                       const char *env) {
    if (env) {
        put_param(o, first, env_name, env);
    } else if (secret) {
        put_char(o, *first ? '?' : '&');
        *first = false;
        put(o, name);
        put(o, "=***");
    }
}

static void put_query(struct out *o, const sluice__redis_url_t *u) {
    bool first = true;
    if (u->topology == SLUICE__REDIS_UNIX) {
        if (u->db > 0) {
            put(o, "?db=");
            put_int(o, u->db);
            first = false;
        }
        put_param(o, &first, "user", u->user);
        put_secret(o, &first, "password", u->password, "password_env", u->password_env);
    } else {
        put_param(o, &first, "password_env", u->password_env);
    }
    put_param(o, &first, "cacert", u->tls.cacert);
    put_param(o, &first, "cert", u->tls.cert);
    put_param(o, &first, "key", u->tls.key);
    put_param(o, &first, "sni", u->tls.sni);
    if (u->tls.insecure) put_param(o, &first, "insecure", "1");
    put_param(o, &first, "sentinel_user", u->sentinel_user);
    put_secret(o, &first, "sentinel_password", u->sentinel_password, "sentinel_password_env", u->sentinel_password_env);
}

size_t sluice__redis_url_write_redacted(const sluice__redis_url_t *u, char *out, size_t out_len) {
    struct out o = { out, out_len, 0 };
    put(&o, scheme(u));
    put(&o, "://");
    if (u->topology == SLUICE__REDIS_UNIX) {
        put_escaped(&o, u->path, true);
    } else {
        put_userinfo(&o, u);
        put_nodes(&o, u);
        if (u->master) {
            put_char(&o, '/');
            put_escaped(&o, u->master, false);
        }
        if (u->db > 0) {
            put_char(&o, '/');
            put_int(&o, u->db);
        }
    }
    put_query(&o, u);
    if (out_len > 0) out[o.len < out_len ? o.len : out_len - 1] = '\0';
    return o.len;
}
