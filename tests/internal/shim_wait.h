/* SPDX-License-Identifier: Apache-2.0 */
/* Test shim for the one wait (src/core/wait.h): a wait with a given spin budget and an
 * expected event, and what its parts answer at given times. */
#ifndef PAPCCL_TESTS_SHIM_WAIT_H_
#define PAPCCL_TESTS_SHIM_WAIT_H_

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* A wait begun at `from` (its spin budget spinNs ending at from + spinNs) expecting an event
 * at `at`, give or take spreadNs (papWaitExpect); *pollFrom and *pollUntil get the margin (0, 0: none); spinAt[i]
 * gets papWaitSpin's answer at times[i] and sliceAt[i] papWaitSlice's for a 100 ms sleep. */
void papTestWaitExpect(uint64_t spinNs, uint64_t from, uint64_t at, uint64_t spreadNs,
                       uint64_t* pollFrom, uint64_t* pollUntil, const uint64_t* times, int ntimes,
                       int* spinAt, int64_t* sliceAt);

#ifdef __cplusplus
}
#endif

#endif /* PAPCCL_TESTS_SHIM_WAIT_H_ */
