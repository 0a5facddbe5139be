/*
 * trace_consumer.c — a program built against an *installed* Sluice trace
 * library (see cmake/test_install.cmake): it includes <sluice_trace.h>,
 * links libsluice-trace (and, through it, libsluice), parses a trace and
 * runs it on the manual clock.
 *
 * Prints "sluice VERSION trace" and exits 0 when everything behaves.
 */
#include <sluice_trace.h>

#include <stdio.h>
#include <string.h>

static void on_output(void *user, const sluice_trace_output_t *line) {
    char *out = user;
    if (strlen(out) + line->text_len + 2 < 128) {
        strcat(out, line->text);
        strcat(out, "\n");
    }
}

int main(void) {
    printf("sluice %s trace\n", sluice_version());
    static const char text[] = "policy throttle interval=100\n0 call A a\n10 call A b\n";
    sluice_trace_t *trace = NULL;
    sluice_trace_error_t err;
    if (sluice_trace_parse(text, sizeof text - 1, &trace, &err) != SLUICE_OK) {
        fprintf(stderr, "trace_consumer: %s\n", err.message);
        return 1;
    }
    char out[128] = "";
    sluice_trace_run_options_t opt;
    memset(&opt, 0, sizeof opt);
    opt.on_output = on_output;
    opt.user = out;
    int rc = sluice_trace_run(trace, &opt, NULL);
    sluice_trace_free(trace);
    if (rc != SLUICE_OK || strcmp(out, "0 emit A a\n100 emit A b\n") != 0) {
        fprintf(stderr, "trace_consumer: run: %s, printed '%s'\n", sluice_strerror(rc), out);
        return 1;
    }
    return 0;
}
