/* SPDX-License-Identifier: Apache-2.0 */
/* Futex syscall wrappers. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "futex.h"

#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

int papFutexWait(uint32_t* addr, uint32_t expected, int64_t timeoutNs) {
  struct timespec ts;
  if (timeoutNs < 0) timeoutNs = 0;
  ts.tv_sec = (time_t)(timeoutNs / 1000000000);
  ts.tv_nsec = (long)(timeoutNs % 1000000000);
  long r = syscall(SYS_futex, addr, FUTEX_WAIT, expected, &ts, NULL, 0);
  if (r == -1 && errno == ETIMEDOUT) return 1;
  return 0;
}

void papFutexWakeAll(uint32_t* addr) {
  syscall(SYS_futex, addr, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
}
