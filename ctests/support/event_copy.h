/* event_copy.h — an event a limiter reported, kept by value (the key's
 * bytes copied), for the tests that compare two limiters' events.
 *
 * Include after the header that defines CHECK (support/check.h or
 * support/scenario.h) and sluice.h. */
#ifndef SLUICE_TEST_EVENT_COPY_H
#define SLUICE_TEST_EVENT_COPY_H

#include <stdbool.h>
#include <stdint.h>
#include <string.h>

struct ev {
    int kind;
    bool is_u64;
    uint64_t u64;
    char bytes[24]; /* a byte key (the tests' keys are short) */
    size_t len;
    uint64_t token, at;
    bool has_successor;
    uint64_t successor;
};

/* Copies `e` into `r` (every field; the key's bytes, which live only during
 * the callback). */
static inline void ev_copy(struct ev *r, const sluice_event_t *e) {
    memset(r, 0, sizeof *r);
    r->kind = (int)e->kind;
    r->is_u64 = e->key.kind == SLUICE_KEY_U64;
    r->u64 = e->key.u64;
    if (!r->is_u64) {
        CHECK(e->key.len <= sizeof r->bytes, "unexpected key length %zu", e->key.len);
        r->len = e->key.len;
        if (e->key.len) memcpy(r->bytes, e->key.bytes, e->key.len);
    }
    r->token = e->token;
    r->at = e->at;
    r->has_successor = e->has_successor;
    r->successor = e->successor;
}

#endif
