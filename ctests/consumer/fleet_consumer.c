/*
 * fleet_consumer.c — a program built against an *installed* Sluice fleet
 * limiter (see cmake/test_install.cmake): it includes <sluice_fleet.h>,
 * links libsluice-fleet (and, through it, libsluice, hiredis and libevent)
 * and checks what it can without a Redis server: the error texts and the
 * refusal of a bad configuration.
 *
 * Prints "sluice VERSION fleet" and exits 0 when everything behaves.
 */
#include <sluice_fleet.h>

#include <stdio.h>
#include <string.h>

int main(void) {
    printf("sluice %s fleet\n", sluice_version());
    const char *text = sluice_strerror(SLUICE_ENOTCONN);
    if (text == NULL || text[0] == '\0') {
        fprintf(stderr, "fleet_consumer: no text for SLUICE_ENOTCONN\n");
        return 1;
    }
    sluice_fleet_config_t config;
    memset(&config, 0, sizeof config);
    config.policy = sluice_rate(10, 1000000000, 0);
    sluice_fleet_t *fleet = NULL;
    int rc = sluice_fleet_new(&fleet, NULL, &config); /* no event_base: refused */
    if (rc != SLUICE_EINVAL || fleet != NULL) {
        fprintf(stderr, "fleet_consumer: sluice_fleet_new without a base gave %d\n", rc);
        return 1;
    }
    return 0;
}
