/*
 * fleet_key.c — the Redis name of a limiter key (a stored format: see
 * docs/fleet.md, "Keys").
 *
 *     {<N>:<E(prefix)>:<tag><E(key)>}<suffix>
 *
 * E(s) is s with each '%' written "%25" and each '}' written "%7D"; N is the
 * length of E(prefix) in decimal (no leading zeros); the tag is 'u' (an
 * integer key, in decimal) or 'b' (a byte key). The suffix is empty today
 * (room for more quotas of one key: they would share its hash slot).
 *
 * Injective. From a name one recovers, in order: N (the digits before the
 * first ':'), E(prefix) (the next N bytes, whatever they hold), the ':', the
 * tag byte, then E(key): the bytes up to the first '}', since E never writes
 * '}'; what follows that '}' is the suffix. E is undone left to right (a '%'
 * always opens a three-byte escape, any other byte stands for itself), so the
 * name gives back (prefix, tag, key, suffix): two different limiter keys, or
 * one key under two prefixes, never share a name. (The old layout
 * `{prefix:<tag><key>}` did not have this: prefixes `login` and `login:by-ip`
 * shared names.)
 *
 * One slot. Redis Cluster hashes the bytes between the first '{' and the
 * first '}' after it: here exactly the identity N:E(prefix):<tag>E(key),
 * never empty, so every name of one limiter key (any suffix) is in one slot.
 */
#include <string.h>

#include "fleet-internal.h"

size_t sluice__fleet_escaped_len(const char *s, size_t n) {
    size_t len = n;
    for (size_t i = 0; i < n; i++)
        if (s[i] == '%' || s[i] == '}') len += 2;
    return len;
}

/* Writes E(s) at `out`; returns the end. */
static char *escape(char *out, const char *s, size_t n) {
    for (size_t i = 0; i < n; i++) {
        if (s[i] == '%' || s[i] == '}') {
            *out++ = '%';
            *out++ = s[i] == '%' ? '2' : '7';
            *out++ = s[i] == '%' ? '5' : 'D';
        } else {
            *out++ = s[i];
        }
    }
    return out;
}

size_t sluice__fleet_prefix_encode(const char *prefix, size_t n, char *out) {
    char digits[24];
    size_t d = sluice__fleet_u128_str(sluice__fleet_escaped_len(prefix, n), digits);
    memcpy(out, digits, d);
    out[d] = ':';
    char *end = escape(out + d + 1, prefix, n);
    *end++ = ':';
    return (size_t)(end - out);
}

size_t sluice__fleet_key_write(char *out, const char *enc_prefix, size_t enc_prefix_len, char tag, const char *key,
                               size_t key_len) {
    char *p = out;
    *p++ = '{';
    memcpy(p, enc_prefix, enc_prefix_len);
    p += enc_prefix_len;
    *p++ = tag;
    p = escape(p, key, key_len);
    *p++ = '}';
    return (size_t)(p - out);
}
