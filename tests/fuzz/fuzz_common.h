/* SPDX-License-Identifier: Apache-2.0 */
/* Shared by the fuzz targets: the libFuzzer entry points and a quiet log. */
#ifndef PAPCCL_TESTS_FUZZ_FUZZ_COMMON_H_
#define PAPCCL_TESTS_FUZZ_FUZZ_COMMON_H_

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);
int LLVMFuzzerInitialize(int* argc, char*** argv);

/* Rejected inputs log a WARN each: print none (the text is still formatted). */
static inline void fuzzQuietLog(void) {
  setenv("PAPCCL_DEBUG", "NONE", 1);
}

/* A violated contract: crash so that the fuzzer keeps the input. */
#define FUZZ_ASSERT(cond) \
  do { \
    if (!(cond)) __builtin_trap(); \
  } while (0)

#endif /* PAPCCL_TESTS_FUZZ_FUZZ_COMMON_H_ */
