/* check.h — the failure helpers shared by the C test programs.
 *
 * Define TEST_NAME ("test_flood", …) before including. CHECK(cond, fmt, …)
 * prints the failed condition with its line, then the message, and exits 1.
 * Also brings SANITIZED and UNDER_ASAN (sanitized.h). */
#ifndef SLUICE_TEST_CHECK_H
#define SLUICE_TEST_CHECK_H

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include "sanitized.h"

#ifndef TEST_NAME
#error "define TEST_NAME before including support/check.h"
#endif

__attribute__((format(printf, 1, 2), noreturn)) static void die(const char *fmt, ...) {
    va_list ap;
    fprintf(stderr, TEST_NAME ": FAILED: ");
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    exit(1);
}

#define CHECK(cond, ...)                                                                                               \
    do {                                                                                                               \
        if (!(cond)) {                                                                                                 \
            fprintf(stderr, "%s:%d: %s\n", __FILE__, __LINE__, #cond);                                                 \
            die(__VA_ARGS__);                                                                                          \
        }                                                                                                              \
    } while (0)

#endif
