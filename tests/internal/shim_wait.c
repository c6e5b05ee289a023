/* SPDX-License-Identifier: Apache-2.0 */
#include "internal/shim_wait.h"

#include "wait.h"

void papTestWaitExpect(uint64_t spinNs, uint64_t from, uint64_t at, uint64_t spreadNs,
                       uint64_t* pollFrom, uint64_t* pollUntil, const uint64_t* times, int ntimes,
                       int* spinAt, int64_t* sliceAt) {
  struct papWait w;
  papWaitInit(&w, "a test wait", NULL, 0, spinNs, 0);
  w.yield = 0; /* a pause, not a system call, per poll */
  w.spinUntil = from + spinNs;
  papWaitExpect(&w, from, at, spreadNs);
  *pollFrom = w.pollFrom;
  *pollUntil = w.pollUntil;
  for (int i = 0; i < ntimes; i++) {
    spinAt[i] = papWaitSpin(&w, times[i]);
    sliceAt[i] = papWaitSlice(&w, times[i], 100000000);
  }
}
