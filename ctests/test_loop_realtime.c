/* test_loop_realtime.c — `sluice-trace --realtime` against the spec.
 *
 * Every conformance vector (Tests/Vectors) short enough to replay in real
 * time — v2 ones with weighted calls and quota lines included — and a few
 * rate, quota and many-key traces written here run twice: through
 * sluice_trace_run() (manual clock, exact: the oracle) and through
 * sluice_trace_run_realtime() (real loop, real clock). Per key, the lines
 * must be the same in the same order — every field after the time: a quota
 * line's remaining, full and retry included — and each real time must be at
 * or after the spec time (never early) and at most REALTIME_SLACK_MS later. A run that is late or differs (the machine is
 * shared and noisy: a stall at the wrong instant changes what real time
 * does) is tried again a few times before failing; an early line fails at
 * once. When no try was on time but one had the right lines, never early,
 * with no line more than LATE_LIMIT_MS late, the machine was busy the
 * whole time: that passes with a note (LATE_LIMIT_MS bounds hanging, not
 * speed; lateness itself is measured by the benchmarks). The sluice-trace binary itself is run once
 * with --realtime. */
#include "loop_test_util.h"

#include <dirent.h>
#include <errno.h>
#include <unistd.h>

#include "sluice_trace.h"

/* Sanitized builds run several times slower and share the machine with the
 * other tests: they get a wider bound (never early stays exact). */
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define SLUICE_TEST_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define SLUICE_TEST_SANITIZED 1
#endif
#endif
#ifdef SLUICE_TEST_SANITIZED
#define REALTIME_SLACK_MS 60
#else
#define REALTIME_SLACK_MS 15
#endif
#define TRIES 5
/* Lateness that fails even on a busy machine: a timer this late is lost,
 * not delayed. */
#define LATE_LIMIT_MS 2000

struct line {
    uint64_t time;
    char key[128];
    char rest[256]; /* the verb and every field after the key ("emit VALUE", "quota remaining=R full=F retry=S") */
};

struct lines {
    struct line *v;
    size_t n;
};

static void parse_lines(const char *text, struct lines *out) {
    out->v = NULL;
    out->n = 0;
    size_t cap = 0;
    const char *p = text;
    while (*p) {
        const char *e = strchr(p, '\n');
        size_t len = e ? (size_t)(e - p) : strlen(p);
        if (len > 0) {
            if (out->n == cap) {
                cap = cap ? cap * 2 : 64;
                out->v = realloc(out->v, cap * sizeof *out->v);
            }
            struct line *l = &out->v[out->n++];
            memset(l, 0, sizeof *l);
            char buf[512];
            snprintf(buf, sizeof buf, "%.*s", (int)len, p);
            char verb[32] = "", key[128] = "";
            unsigned long long t = 0;
            int tail = 0;
            sscanf(buf, "%llu %31s %127s %n", &t, verb, key, &tail);
            l->time = t;
            snprintf(l->key, sizeof l->key, "%s", key);
            snprintf(l->rest, sizeof l->rest, "%s %s", verb, tail > 0 ? buf + tail : "");
        }
        p += len + (e ? 1 : 0);
    }
}

enum verdict { SAME = 0, LATE = 1, WRONG = 2, EARLY = 3 };

/* Compares per key in order; *worst_late receives the largest lateness (ms)
 * of a matching line. */
static enum verdict compare(const struct lines *want, const struct lines *got, char *why, size_t whylen,
                            uint64_t *worst_late) {
    *worst_late = 0;
    if (want->n != got->n) {
        snprintf(why, whylen, "%zu lines, want %zu", got->n, want->n);
        return WRONG;
    }
    enum verdict v = SAME;
    bool *used = calloc(got->n + 1, 1);
    for (size_t i = 0; i < want->n; i++) {
        /* the next unused line of the same key in `got` */
        size_t j = 0;
        for (; j < got->n; j++)
            if (!used[j] && strcmp(got->v[j].key, want->v[i].key) == 0) break;
        if (j == got->n) {
            snprintf(why, whylen, "missing line '%llu %s %s'", (unsigned long long)want->v[i].time, want->v[i].key,
                     want->v[i].rest);
            v = WRONG;
            break;
        }
        used[j] = true;
        if (strcmp(got->v[j].rest, want->v[i].rest) != 0) {
            snprintf(why, whylen, "key %s: got '%s', want '%s'", want->v[i].key, got->v[j].rest, want->v[i].rest);
            v = WRONG;
            break;
        }
        if (got->v[j].time < want->v[i].time) {
            snprintf(why, whylen, "key %s: '%s' at %llu ms, EARLY (spec %llu)", want->v[i].key, want->v[i].rest,
                     (unsigned long long)got->v[j].time, (unsigned long long)want->v[i].time);
            v = EARLY;
            break;
        }
        if (got->v[j].time - want->v[i].time > *worst_late) *worst_late = got->v[j].time - want->v[i].time;
        if (got->v[j].time > want->v[i].time + REALTIME_SLACK_MS && v == SAME) {
            snprintf(why, whylen, "key %s: '%s' at %llu ms, spec %llu: more than %d ms late", want->v[i].key,
                     want->v[i].rest, (unsigned long long)got->v[j].time, (unsigned long long)want->v[i].time,
                     REALTIME_SLACK_MS);
            v = LATE;
        }
    }
    /* real times never go backwards in the output */
    for (size_t j = 1; j < got->n && v < WRONG; j++)
        if (got->v[j].time < got->v[j - 1].time) {
            snprintf(why, whylen, "output times go backwards at line %zu", j + 1);
            v = WRONG;
        }
    free(used);
    return v;
}

static void put_line(void *user, const sluice_trace_output_t *line) {
    fwrite(line->text, 1, line->text_len, user);
    fputc('\n', user);
}

static char *run_to_string(const sluice_trace_t *t, bool realtime, int *rc) {
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    sluice_trace_run_options_t opt;
    memset(&opt, 0, sizeof opt);
    opt.on_output = put_line;
    opt.user = f;
    sluice_trace_run_result_t res;
    *rc = realtime ? sluice_trace_run_realtime(t, &opt, &res) : sluice_trace_run(t, &opt, &res);
    if (*rc != 0) fprintf(stderr, "  run failed: %s\n", res.message);
    fclose(f);
    return buf;
}

static void check_trace(const char *name, const char *text) {
    sluice_trace_t *t;
    sluice_trace_error_t err;
    if (sluice_trace_parse(text, strlen(text), &t, &err) != SLUICE_OK) {
        LT_CHECK(false, "%s: does not parse: %s", name, err.message);
        return;
    }
    int rc;
    char *spec = run_to_string(t, false, &rc);
    LT_CHECK(rc == 0, "%s: manual run", name);
    struct lines want;
    parse_lines(spec, &want);
    char why[1024] = "";
    enum verdict v = WRONG;
    uint64_t least_late = UINT64_MAX; /* the least late try with the right lines, never early (ms) */
    for (int attempt = 1; attempt <= TRIES; attempt++) {
        char *real = run_to_string(t, true, &rc);
        LT_CHECK(rc == 0, "%s: realtime run", name);
        struct lines got;
        parse_lines(real, &got);
        uint64_t worst = 0;
        v = compare(&want, &got, why, sizeof why, &worst);
        if (v == LATE && worst < least_late) least_late = worst;
        if (v != SAME) {
            fprintf(stderr, "  %s attempt %d: %s\n--- spec\n%s--- real\n%s", name, attempt, why, spec, real);
        }
        free(got.v);
        free(real);
        /* Never early is a hard rule: no retry. A late line, or a different
         * decision, can come from the machine stalling this process at the
         * wrong instant (a step then runs after the limiter's clock passed
         * it): try again; a real bug fails every attempt. */
        if (v == SAME || v == EARLY) break;
    }
    if (v != SAME && v != EARLY && least_late <= LATE_LIMIT_MS) {
        fprintf(
            stderr,
            "  note: %s: no try on time; one had the right lines, never early, at most %llu ms late (a busy machine)\n",
            name, (unsigned long long)least_late);
        v = SAME;
    }
    LT_CHECK(v == SAME, "%s: %s", name, why);
    printf("%-40s %s\n", name, v == SAME ? "ok" : "FAILED");
    free(want.v);
    free(spec);
    sluice_trace_free(t);
}

static char *slurp(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = malloc((size_t)n + 1);
    size_t got = fread(b, 1, (size_t)n, f);
    b[got] = 0;
    fclose(f);
    return b;
}

/* Runs the vectors of `dir` short enough for real time; returns how many
 * ran, and in *v2 how many of them are of format v2 (cost=, quota). */
static int vectors_in(const char *dir, int *v2) {
    DIR *d = opendir(dir);
    if (!d) return 0;
    int count = 0;
    struct dirent *e;
    char *names[512];
    int n = 0;
    while ((e = readdir(d)) != NULL && n < 512) {
        size_t len = strlen(e->d_name);
        if (len > 6 && strcmp(e->d_name + len - 6, ".trace") == 0 && strncmp(e->d_name, "error-", 6) != 0)
            names[n++] = strdup(e->d_name);
    }
    closedir(d);
    for (int i = 0; i < n; i++) {
        char path[8192];
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        char *text = slurp(path);
        if (text) {
            /* long traces would take minutes of real time: keep the short
             * ones (rate ones up to 10 s: every rate vector but those of
             * huge times, which would take years) */
            sluice_trace_t *t;
            sluice_trace_error_t err;
            bool short_enough = false;
            if (sluice_trace_parse(text, strlen(text), &t, &err) == SLUICE_OK) {
                size_t n = sluice_trace_step_count(t);
                sluice_trace_step_t last;
                sluice_policy_t pol = sluice_trace_policy(t);
                const int64_t ms = 1000000;
                uint64_t longest = pol.kind == SLUICE_RATE ? 10000 : 5000;
                short_enough = n == 0 || (sluice_trace_step(t, n - 1, &last) == 0 && last.time_ms <= longest);
                if (pol.kind != SLUICE_RATE)
                    short_enough = short_enough && pol.interval_ns <= 2000 * ms && pol.max_wait_ns <= 5000 * ms;
                else
                    short_enough = short_enough && pol.per_ns <= 5000 * ms;
                if (short_enough && sluice_trace_is_v2(t)) (*v2)++;
                sluice_trace_free(t);
            }
            if (short_enough) {
                check_trace(names[i], text);
                count++;
            }
            free(text);
        }
        free(names[i]);
    }
    return count;
}

static void check_binary(const char *trace_exe, const char *vector) {
    char cmd[8192];
    snprintf(cmd, sizeof cmd, "'%s' --realtime '%s'", trace_exe, vector);
    FILE *p = popen(cmd, "r");
    LT_CHECK(p != NULL, "popen");
    if (!p) return;
    char out[4096];
    size_t n = fread(out, 1, sizeof out - 1, p);
    out[n] = 0;
    int st = pclose(p);
    LT_CHECK(st == 0, "sluice-trace --realtime exit status %d", st);
    LT_CHECK(strstr(out, " emit A b") != NULL && strstr(out, " emit A c") != NULL, "binary output:\n%s", out);
    printf("%-40s %s\n", "sluice-trace --realtime (binary)", st == 0 ? "ok" : "FAILED");
}

int main(void) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    const char *src = getenv("SLUICE_SOURCE_DIR");
#ifdef SLUICE_SOURCE_DIR
    if (!src) src = SLUICE_SOURCE_DIR;
#endif
    int count = 0, v2 = 0;
    if (src) {
        char dir[4096];
        snprintf(dir, sizeof dir, "%s/Tests/Vectors", src);
        count += vectors_in(dir, &v2);
        LT_CHECK(count > 0, "no vectors in %s", dir);
        LT_CHECK(v2 > 0, "no vector of format v2 (cost=, quota) in %s", dir);
        const char *exe = getenv("SLUICE_TRACE");
        snprintf(dir, sizeof dir, "%s/Tests/Vectors/audit-spec-example.trace", src);
        LT_CHECK(access(dir, R_OK) == 0, "%s: not readable", dir);
        if (exe && access(dir, R_OK) == 0) check_binary(exe, dir);
    }
    printf("%d vectors (%d of format v2)\n", count, v2);

    /* rate on real time (every boundary at least 10 ms from a call) */
    check_trace("rate: burst then refill",
                "policy rate limit=2 per=100\n"
                "0 call A a\n10 call A b\n20 call A c\n70 call A d\n80 call A e\n130 call A f\n"
                "140 call B x\n150 cancel A\n160 call A g\n165 call A h\n170 call A i\n");
    check_trace("rate: burst option", "policy rate limit=1 per=50 burst=3\n"
                                      "0 call K 1\n0 call K 2\n0 call K 3\n0 call K 4\n60 call K 5\n70 call K 6\n"
                                      "120 call K 7\n200 pending K\n210 flush K\n");
    /* quota lines read at their step's instant: at a refill, at the
     * instant the burst is back, with a cost above what is left and above
     * the burst, on a fractional spacing (333.33 ms) */
    check_trace("rate: weighted calls and quota lines",
                "policy rate limit=3 per=1000 burst=3\n"
                "0 quota A\n0 call A a cost=2\n0 quota A cost=2\n0 quota A cost=4\n10 call B b cost=3\n"
                "10 quota B\n333 quota A cost=2\n334 quota A cost=2\n334 call A c cost=2\n"
                "666 quota A\n667 quota A\n1000 quota B\n1010 quota B cost=3\n1010 call B d cost=3\n");
    check_trace("throttle trailing only, pick first",
                "policy throttle interval=60 leading=false pick=first\n"
                "0 call A a\n10 call A b\n30 call B x\n70 call A c\n80 call A d\n200 close drain\n");
    check_trace("debounce leading, maxwait",
                "policy debounce interval=40 leading=true maxwait=90\n"
                "0 call A 0\n20 call A 1\n50 call A 2\n80 call A 3\n110 call A 4\n140 call A 5\n");
    {
        /* many keys at once */
        char text[16384];
        size_t off = (size_t)snprintf(text, sizeof text, "policy audit interval=50\n");
        for (int i = 0; i < 200; i++)
            off += (size_t)snprintf(text + off, sizeof text - off, "%d call k%d v%d\n", (i / 20) * 7, i % 60, i);
        check_trace("audit, 60 keys, 200 calls", text);
    }
    LT_MAIN_END();
}
