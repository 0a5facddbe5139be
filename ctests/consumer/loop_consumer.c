/*
 * loop_consumer.c — a program built against an *installed* Sluice with its
 * loop layer (see cmake/test_install.cmake): it includes <sluice_loop.h> and
 * libevent's own headers, creates and runs its own event_base (libevent
 * functions called directly, so the link line must carry libevent_core, as
 * `pkg-config --libs sluice` does), attaches Sluice to it and lets a
 * debounced value come back through the loop.
 *
 * Prints "sluice VERSION loop" and exits 0 when everything behaves.
 */
#include <sluice_loop.h>

#include <event2/event.h>
#include <stdio.h>
#include <string.h>

#define MS UINT64_C(1000000)

struct state {
    struct event_base *base;
    int emits;
    uint64_t token, at, submitted;
};

static void on_event(void *user, const sluice_event_t *ev) {
    struct state *s = user;
    if (ev->kind == SLUICE_EVENT_EMIT) {
        s->emits++;
        s->token = ev->token;
        s->at = ev->at;
    }
    event_base_loopbreak(s->base);
}

static void on_give_up(evutil_socket_t fd, short what, void *arg) {
    (void)fd;
    (void)what;
    event_base_loopbreak(arg);
}

int main(void) {
    printf("sluice %s loop\n", sluice_version());
    if (sluice_threads_init() != 0) return 1;
    struct state s;
    memset(&s, 0, sizeof s);
    s.base = event_base_new();
    if (!s.base) return 1;
    sluice_loop_t *loop = NULL;
    if (sluice_loop_attach(&loop, s.base, NULL) != 0) return 1;

    sluice_config_t cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.policy = sluice_debounce((int64_t)(20 * MS), false, true, -1);
    cfg.on_event = on_event;
    cfg.user = &s;
    sluice_mt_t *m = NULL;
    int rc = sluice_mt_new(&m, loop, &cfg, 0);
    if (rc != 0) {
        fprintf(stderr, "loop_consumer: sluice_mt_new: %s\n", sluice_strerror(rc));
        return 1;
    }
    sluice_decision_t d;
    s.submitted = sluice_clock_now();
    rc = sluice_mt_submit(m, sluice_key_bytes("doc:7", 5), 7, &d);
    if (rc != 0 || d.kind != SLUICE_SCHEDULED) {
        fprintf(stderr, "loop_consumer: submit: rc %d kind %d\n", rc, (int)d.kind);
        return 1;
    }
    /* generous: the emission ends the loop 20 ms in; a loaded machine can
     * make that much later, and giving up is only for a lost emission */
    struct timeval patience = { 30, 0 };
    struct event *give_up = evtimer_new(s.base, on_give_up, s.base);
    evtimer_add(give_up, &patience);
    event_base_dispatch(s.base);
    event_free(give_up);

    int ok = s.emits == 1 && s.token == 7 && s.at >= s.submitted + 20 * MS && sluice_clock_now() >= s.at;
    if (!ok)
        fprintf(stderr, "loop_consumer: emits %d token %llu at %llu (submitted %llu)\n", s.emits,
                (unsigned long long)s.token, (unsigned long long)s.at, (unsigned long long)s.submitted);
    sluice_mt_free(m);
    if (sluice_loop_free(loop) != 0) ok = 0;
    event_base_free(s.base);
    return ok ? 0 : 1;
}
