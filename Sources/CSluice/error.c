/* error.c — the library version and the error codes (sluice_errors.h). */
#include "sluice.h"

const char *sluice_version(void) { return SLUICE_VERSION_STRING; }

const char *sluice_strerror(int err) {
    switch (err) {
#define SLUICE_X(name, value, message)                                                                                 \
    case SLUICE_##name: return message;
        SLUICE_ERROR_LIST(SLUICE_X)
#undef SLUICE_X
    default: return "unknown error";
    }
}

static const int codes[] = {
#define SLUICE_X(name, value, message) SLUICE_##name,
    SLUICE_ERROR_LIST(SLUICE_X)
#undef SLUICE_X
};

size_t sluice_error_count(void) { return sizeof codes / sizeof codes[0]; }

int sluice_error_code(size_t i) { return i < sizeof codes / sizeof codes[0] ? codes[i] : 1; }
