/*
 * fleet-url.c — the public face of the URL parser: sluice_fleet_check_url()
 * and sluice_fleet_redact_url() (sluice_fleet.h), thin over redis-url.c.
 */
#include "redis-url.h"

int sluice_fleet_check_url(const char *url, char *why, size_t why_len) {
    sluice__redis_url_t u;
    int rc = sluice__redis_url_parse(url, &u, why, why_len);
    if (rc == 0) sluice__redis_url_free(&u);
    return rc;
}

int sluice_fleet_redact_url(const char *url, char *out, size_t out_len) {
    if (!out && out_len > 0) return SLUICE_EINVAL;
    if (out_len > 0) out[0] = '\0';
    sluice__redis_url_t u;
    int rc = sluice__redis_url_parse(url, &u, NULL, 0);
    if (rc) return rc;
    /* At most 3 bytes per byte of a URL of SLUICE__REDIS_URL_MAX bytes, plus
     * the ports and the scheme of a bare HOST:PORT: far below INT_MAX. */
    size_t n = sluice__redis_url_write_redacted(&u, out, out_len);
    sluice__redis_url_free(&u);
    return (int)n;
}
