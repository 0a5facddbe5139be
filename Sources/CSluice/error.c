/* error.c — version, error strings and policy validation. */
#include "sluice.h"

const char *sluice_version(void) { return SLUICE_VERSION_STRING; }

const char *sluice_strerror(int err) {
    switch (err) {
    case SLUICE_OK: return "success";
    case SLUICE_ENOMEM: return "out of memory: nothing was changed";
    case SLUICE_EBUSY: return "not allowed while a callback of this limiter runs";
    case SLUICE_EINVAL: return "invalid argument or configuration";
    case SLUICE_EFULL: return "limiter full: the live-key cap is reached, the new key was refused";
    case SLUICE_ERANGE: return "number out of range";
    case SLUICE_EKEYLEN: return "key too long (more than SLUICE_KEY_MAX bytes)";
    case SLUICE_ECLOSED: return "limiter closed";
    case SLUICE_ECORRUPT: return "internal invariant broken (see stderr)";
    default: return "unknown error";
    }
}

int sluice_policy_validate(const sluice_policy_t *p) {
    if (!p) return SLUICE_EINVAL;
    switch (p->kind) {
    case SLUICE_THROTTLE:
    case SLUICE_AUDIT:
    case SLUICE_DEBOUNCE:
        if (p->interval_ns < 0) return SLUICE_EINVAL;
        if (p->interval_ns > SLUICE_DURATION_MAX) return SLUICE_ERANGE;
        if (p->kind == SLUICE_AUDIT) return 0; /* leading/trailing/pick are ignored */
        if (!p->leading && !p->trailing) return SLUICE_EINVAL;
        if (p->kind == SLUICE_THROTTLE) {
            if (p->pick != SLUICE_PICK_LATEST && p->pick != SLUICE_PICK_FIRST) return SLUICE_EINVAL;
            return 0;
        }
        if (p->has_max_wait) {
            if (p->max_wait_ns < 0 || p->max_wait_ns < p->interval_ns) return SLUICE_EINVAL;
            if (p->max_wait_ns > SLUICE_DURATION_MAX) return SLUICE_ERANGE;
        }
        return 0;
    case SLUICE_RATE:
        if (p->limit < 1 || p->per_ns < 1) return SLUICE_EINVAL;
        if (p->limit > SLUICE_RATE_MAX || p->burst > SLUICE_RATE_MAX) return SLUICE_ERANGE;
        if (p->per_ns > SLUICE_DURATION_MAX) return SLUICE_ERANGE;
        return 0;
    default:
        return SLUICE_EINVAL;
    }
}
