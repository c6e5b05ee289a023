// SPDX-License-Identifier: Apache-2.0
// Which sanitizer the tests are built with (gcc and clang): PAPT_ASAN and PAPT_TSAN are 1 or
// 0. Tests use them to skip or shrink only what a sanitizer cannot judge or makes too slow,
// and say why where they do.
#ifndef PAPCCL_TESTS_SANITIZER_H_
#define PAPCCL_TESTS_SANITIZER_H_

#if defined(__SANITIZE_ADDRESS__)
#define PAPT_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define PAPT_ASAN 1
#endif
#endif
#ifndef PAPT_ASAN
#define PAPT_ASAN 0
#endif

#if defined(__SANITIZE_THREAD__)
#define PAPT_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define PAPT_TSAN 1
#endif
#endif
#ifndef PAPT_TSAN
#define PAPT_TSAN 0
#endif

#endif  // PAPCCL_TESTS_SANITIZER_H_
