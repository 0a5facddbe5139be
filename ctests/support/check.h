/* check.h — the failure helpers shared by the C test programs.
 *
 * Define TEST_NAME ("test_flood", …) before including. CHECK(cond, fmt, …)
 * prints the failed condition with its line, then the message, and exits 1.
 * SANITIZED is 1 in ASan/TSan builds (tests run smaller workloads there: the
 * sanitizer builds are for memory and thread safety, the full sizes run in
 * the normal build); UNDER_ASAN is 1 under AddressSanitizer only. */
#ifndef SLUICE_TEST_CHECK_H
#define SLUICE_TEST_CHECK_H

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#ifndef TEST_NAME
#error "define TEST_NAME before including support/check.h"
#endif

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define SANITIZED 1
#endif
#endif
#ifndef SANITIZED
#define SANITIZED 0
#endif

#if defined(__SANITIZE_ADDRESS__)
#define UNDER_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define UNDER_ASAN 1
#endif
#endif
#ifndef UNDER_ASAN
#define UNDER_ASAN 0
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

#define CHECK(cond, ...)                                                                                     \
    do {                                                                                                     \
        if (!(cond)) {                                                                                       \
            fprintf(stderr, "%s:%d: %s\n", __FILE__, __LINE__, #cond);                                       \
            die(__VA_ARGS__);                                                                                \
        }                                                                                                    \
    } while (0)

#endif
