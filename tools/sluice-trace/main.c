/*
 * main.c — `sluice-trace`, the C conformance trace runner.
 *
 * Reads a trace (docs/trace-format.md), runs it against the core with a
 * manual clock (or on the real loop) through the trace library
 * (Sources/CSluiceTrace, sluice_trace.h) and prints what the limiter did.
 * See usage() for the exit codes.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sluice.h"
#include "sluice_trace.h"
#ifdef SLUICE_TRACE_WITH_REDIS
#include "redis_run.h" /* --redis URL (the fleet limiters) */
#endif

#define EXIT_USAGE 64

static void usage(FILE *f) {
    fputs("usage: sluice-trace [--check] [--batch N] [--realtime] [FILE|-]\n"
          "\n"
          "Runs a conformance trace (trace format v2) against the Sluice core with a\n"
          "manual clock and prints what the limiter did, one line per thing:\n"
          "  TIME emit KEY VALUE | TIME drop KEY VALUE | TIME discard KEY VALUE |\n"
          "  TIME pending KEY yes|no | TIME quota KEY remaining=R full=F retry=S|never\n"
          "Reads FILE, or standard input when FILE is '-' or absent. The whole input is\n"
          "read and checked before anything runs, so a malformed or unreadable input\n"
          "prints nothing on standard output.\n"
          "\n"
          "options:\n"
          "  --realtime  replay the trace on a real libevent loop and the real monotonic\n"
          "              clock, each line at its time after start; prints the actual\n"
          "              times in ms since start (never early; --check is ignored)\n"
          "  --redis URL  run the trace through Redis (manual time) and print what the\n"
          "              local run prints: a rate trace (v3 plans too) through the fleet\n"
          "              limiter, a throttle, audit or debounce trace through the fleet's\n"
          "              timed limiter (builds with hiredis); URL: HOST:PORT, redis://,\n"
          "              rediss://, unix://, redis+sentinel://, redis+cluster://\n"
          "              (docs/fleet.md, Connections)\n"
          "  --batch N   submit consecutive calls at the same time in batches of up to N\n"
          "              (sluice_limiter_submit_many); prints exactly what the run\n"
          "              without --batch prints (N from 1 to 1000000; not with --realtime)\n"
          "  --check     check the core's invariants (sluice_limiter_check) after every\n"
          "              step and every timer advance: slow, for tests\n"
          "  --help      print this help\n"
          "  --version   print the library version\n"
          "\n"
          "exit status:\n"
          "  0   the trace ran\n"
          "  1   out of memory, or standard output could not be written\n"
          "  2   malformed trace ('error: line N: REASON' on standard error),\n"
          "      or the input could not be read ('error: cannot read FILE: ...')\n"
          "  3   internal error: the core broke a rule of its API (a bug in Sluice)\n"
          "  4   --redis: Redis could not be reached, was too slow or did not answer\n"
          "      like Redis (nothing is printed)\n"
          "  64  bad command line\n",
          f);
}

/* Writes one output line (on_output of the run). */
static void print_line(void *user, const sluice_trace_output_t *line) {
    FILE *f = user;
    fwrite(line->text, 1, line->text_len, f);
    fputc('\n', f);
}

/* Reads all of `f` into a malloc'd buffer. Returns 0 or an errno value. */
static int read_all(FILE *f, char **out, size_t *out_len) {
    size_t cap = 1 << 16, len = 0;
    char *buf = malloc(cap);
    if (buf == NULL) return ENOMEM;
    for (;;) {
        size_t n;
        if (len == cap) {
            char *nb;
            if (cap > SIZE_MAX / 2) {
                free(buf);
                return EFBIG;
            }
            nb = realloc(buf, cap * 2);
            if (nb == NULL) {
                free(buf);
                return ENOMEM;
            }
            buf = nb;
            cap *= 2;
        }
        n = fread(buf + len, 1, cap - len, f);
        len += n;
        if (n == 0) {
            if (ferror(f)) {
                int e = errno ? errno : EIO;
                free(buf);
                return e;
            }
            break;
        }
    }
    *out = buf;
    *out_len = len;
    return 0;
}

int main(int argc, char **argv) {
    const char *path = NULL;
    bool realtime = false, check = false, no_more_options = false;
    const char *redis = NULL;
    unsigned long batch = 0;
    FILE *in;
    char *buf = NULL;
    size_t len = 0;
    int e, rc, status = 0;
    sluice_trace_t *trace = NULL;
    sluice_trace_error_t err;
    sluice_trace_run_options_t opt;
    sluice_trace_run_result_t res;

    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!no_more_options && strcmp(a, "--") == 0) {
            no_more_options = true;
        } else if (!no_more_options && (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0)) {
            usage(stdout);
            return 0;
        } else if (!no_more_options && strcmp(a, "--version") == 0) {
            printf("sluice-trace %s\n", sluice_version());
            return 0;
        } else if (!no_more_options && strcmp(a, "--check") == 0) {
            check = true;
        } else if (!no_more_options && strcmp(a, "--realtime") == 0) {
            realtime = true;
        } else if (!no_more_options && strcmp(a, "--batch") == 0) {
            char *end = NULL;
            if (i + 1 >= argc) {
                fprintf(stderr, "error: --batch needs a number (see sluice-trace --help)\n");
                return EXIT_USAGE;
            }
            errno = 0;
            batch = strtoul(argv[++i], &end, 10);
            if (errno != 0 || end == argv[i] || *end != '\0' || argv[i][0] == '-' || batch < 1 || batch > 1000000) {
                fprintf(stderr, "error: --batch takes a number from 1 to 1000000, not '%s'\n", argv[i]);
                return EXIT_USAGE;
            }
#ifdef SLUICE_TRACE_WITH_REDIS
        } else if (!no_more_options && strcmp(a, "--redis") == 0 && i + 1 < argc) {
            redis = argv[++i];
#endif
        } else if (!no_more_options && a[0] == '-' && a[1] != '\0') {
            fprintf(stderr, "error: unknown option '%s' (see sluice-trace --help)\n", a);
            return EXIT_USAGE;
        } else if (path == NULL) {
            path = a;
        } else {
            fprintf(stderr, "error: more than one input file (see sluice-trace --help)\n");
            return EXIT_USAGE;
        }
    }
    if (batch > 1 && (realtime || redis)) {
        fprintf(stderr, "error: --batch runs with the manual clock only (not with --realtime or --redis)\n");
        return EXIT_USAGE;
    }
    if (path == NULL || strcmp(path, "-") == 0) {
        e = read_all(stdin, &buf, &len);
        if (e != 0) {
            fprintf(stderr, "error: cannot read standard input: %s\n", strerror(e));
            return e == ENOMEM ? 1 : 2;
        }
    } else {
        in = fopen(path, "rb");
        if (in == NULL) {
            fprintf(stderr, "error: cannot read %s: %s\n", path, strerror(errno));
            return 2;
        }
        e = read_all(in, &buf, &len);
        fclose(in);
        if (e != 0) {
            fprintf(stderr, "error: cannot read %s: %s\n", path, strerror(e));
            return e == ENOMEM ? 1 : 2;
        }
    }

    rc = sluice_trace_parse(buf, len, &trace, &err);
    free(buf);
    if (rc == SLUICE_ENOMEM) {
        fprintf(stderr, "%s\n", err.message);
        return 1;
    }
    if (rc != SLUICE_OK) {
        fprintf(stderr, "%s\n", err.message);
        return 2;
    }

    setvbuf(stdout, NULL, _IOFBF, 1 << 16);
    if (redis) {
#ifdef SLUICE_TRACE_WITH_REDIS
        status = sluice_trace_redis_main(trace, redis, print_line, stdout);
#endif
        sluice_trace_free(trace);
        if (fflush(stdout) != 0 || ferror(stdout)) {
            fprintf(stderr, "error: cannot write the output: %s\n", strerror(errno));
            return 1;
        }
        return status;
    }
    memset(&opt, 0, sizeof opt);
    opt.on_output = print_line;
    opt.user = stdout;
    opt.check_invariants = check;
    opt.batch_size = (uint32_t)batch;
    rc = realtime ? sluice_trace_run_realtime(trace, &opt, &res) : sluice_trace_run(trace, &opt, &res);
    sluice_trace_free(trace);

    if (fflush(stdout) != 0 || ferror(stdout)) {
        fprintf(stderr, "error: cannot write the output: %s\n", strerror(errno));
        return 1;
    }
    switch (rc) {
    case SLUICE_OK: break;
    case SLUICE_ENOMEM:
        fprintf(stderr, "error: out of memory\n");
        status = 1;
        break;
    case SLUICE_EINVAL:
        fprintf(stderr, "error: %s\n", res.message);
        status = 2;
        break;
    default:
        fprintf(stderr, "internal error: %s\n", res.message);
        status = 3;
        break;
    }
    return status;
}
