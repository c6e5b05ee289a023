/* SPDX-License-Identifier: Apache-2.0 */
/* Futex wait/wake on 32-bit words that may live in memory shared between processes. */
#ifndef PAPCCL_CORE_FUTEX_H_
#define PAPCCL_CORE_FUTEX_H_

#include <stdint.h>
#include <time.h>

/* Sleeps while *addr == expected, at most timeoutNs. Returns 0 when woken or the value
 * differed, 1 on timeout. Shared (not private) futexes: the word may be in shm. */
int papFutexWait(uint32_t* addr, uint32_t expected, int64_t timeoutNs);
void papFutexWakeAll(uint32_t* addr);

static inline uint64_t papNowNs(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

#endif /* PAPCCL_CORE_FUTEX_H_ */
