/* test_fleet_decimal.c — the fleet's 128-bit decimal numbers (fleet_math.c:
 * sluice__fleet_parse_u128, sluice__fleet_u128_str), against a plain
 * digit-at-a-time reference: every string of 1 to 60 characters, digits or
 * not, with leading zeros or not, parses to the same number or is refused
 * alike, the 39-digit edge around 2^128 - 1 included; every number prints
 * as the reference prints it and parses back to itself. */
#define TEST_NAME "test_fleet_decimal"
#include "test_fleet_util.h"

#include "fleet-internal.h"

static const fl_u128 MAX = ~(fl_u128)0;

/* The reference: one digit at a time, each step checked. */
static int ref_parse(const char *s, size_t len, fl_u128 *out) {
    if (len == 0 || len > 60) return -1;
    while (len > 1 && *s == '0') s++, len--;
    if (len > 39) return -1;
    fl_u128 v = 0;
    for (size_t i = 0; i < len; i++) {
        unsigned d = (unsigned char)s[i] - '0';
        if (d > 9 || v > (MAX - d) / 10) return -1;
        v = v * 10 + d;
    }
    *out = v;
    return 0;
}

static size_t ref_str(fl_u128 v, char *buf) {
    char tmp[48];
    size_t n = 0;
    do {
        tmp[n++] = (char)('0' + (int)(v % 10));
        v /= 10;
    } while (v);
    for (size_t i = 0; i < n; i++) buf[i] = tmp[n - 1 - i];
    buf[n] = 0;
    return n;
}

static void same_parse(const char *s, size_t len) {
    fl_u128 a = 0, b = 0;
    int ra = sluice__fleet_parse_u128(s, len, &a), rb = ref_parse(s, len, &b);
    CHECK(ra == rb && (ra != 0 || a == b), "'%.*s': parse %d, reference %d%s", (int)len, s, ra, rb,
          ra == 0 && rb == 0 ? " (different numbers)" : "");
}

static void same_str(fl_u128 v) {
    char a[48], b[48];
    size_t na = sluice__fleet_u128_str(v, a), nb = ref_str(v, b);
    CHECK(na == nb && strcmp(a, b) == 0, "print: '%s', reference '%s'", a, b);
    fl_u128 back = 0;
    CHECK(sluice__fleet_parse_u128(a, na, &back) == 0 && back == v, "'%s' does not parse back", a);
}

int main(void) {
    /* the edges: 2^128 - 1 and one above it, 38 to 40 digits, zeros */
    static const char *const edges[] = { "340282366920938463463374607431768211455",
                                         "340282366920938463463374607431768211456",
                                         "340282366920938463463374607431768211460",
                                         "340282366920938463463374607431768211449",
                                         "999999999999999999999999999999999999999",
                                         "99999999999999999999999999999999999999",
                                         "100000000000000000000000000000000000000",
                                         "1000000000000000000000000000000000000000",
                                         "0000000000000000000000340282366920938463463374607431768211455",
                                         "000000000000000000000340282366920938463463374607431768211455",
                                         "0",
                                         "00",
                                         "000000000000000000000000000000000000000000000000000000000000",
                                         "0000000000000000000000000000000000000000000000000000000000000",
                                         "18446744073709551615",
                                         "18446744073709551616",
                                         "10000000000000000000",
                                         "9999999999999999999",
                                         "1x",
                                         "x",
                                         " 1",
                                         "1 ",
                                         "-1",
                                         "12345678901234567890123456789012345678/" };
    for (size_t i = 0; i < sizeof edges / sizeof edges[0]; i++) same_parse(edges[i], strlen(edges[i]));
    same_parse("", 0);
    fl_u128 v = 0;
    CHECK(sluice__fleet_parse_u128(edges[0], strlen(edges[0]), &v) == 0 && v == MAX, "2^128 - 1");

    /* random strings: lengths 1..60, mostly digits, some leading zeros, a
     * few other characters anywhere */
    char s[64];
    for (int n = 0; n < 200000; n++) {
        size_t len = (size_t)tf_range(1, 60), zeros = tf_next() % 3 == 0 ? (size_t)tf_range(0, len) : 0;
        for (size_t i = 0; i < len; i++) s[i] = i < zeros ? '0' : (char)('0' + (int)(tf_next() % 10));
        if (tf_next() % 8 == 0) s[tf_next() % len] = (char)tf_range(1, 255);
        /* near the edge: 39 digits starting with the top ones */
        if (tf_next() % 8 == 0 && len >= 39) memcpy(s + len - 39, edges[0], (size_t)tf_range(1, 39));
        same_parse(s, len);
    }

    /* numbers of every size, and around each power of ten */
    for (int n = 0; n < 200000; n++) {
        fl_u128 x = ((fl_u128)tf_next() << 64) | tf_next();
        x >>= tf_next() % 128;
        same_str(x);
    }
    fl_u128 p = 1;
    for (int k = 0; k <= 38; k++, p *= 10) {
        same_str(p);
        same_str(p - 1);
        same_str(p + 1);
    }
    same_str(MAX);
    same_str(0);
    printf(TEST_NAME ": ok\n");
    return 0;
}
