/* sanitized.h — SANITIZED is 1 in ASan/TSan builds, where the tests run
 * smaller workloads (the sanitizer builds are for memory and thread safety;
 * the full sizes run in the normal build); UNDER_ASAN is 1 under
 * AddressSanitizer only. */
#ifndef SLUICE_TEST_SANITIZED_H
#define SLUICE_TEST_SANITIZED_H

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

#endif
