/* SPDX-License-Identifier: Apache-2.0 */
/* The comparison loop's result check must catch a library that reduces the right numbers
 * into the wrong places. One rank (the sum is the input itself) and three fake libraries:
 * one that returns its input (must pass), one that rotates the buffer by 64 elements and one
 * that swaps its two halves (both must fail; a constant fill would pass them). Exit 0 when
 * the check judged all three right. */
#include <stdio.h>
#include <string.h>

#include "bench_loop.h"

static int mode; /* 0: identity, 1: rotate by 64 elements, 2: swap halves */
static float scratch[1 << 16];

static int ar32(void* ctx, float* buf, size_t count) {
  (void)ctx;
  if (mode == 0 || count < 128 || count > sizeof(scratch) / sizeof(float)) return 0;
  size_t shift = mode == 1 ? 64 : count / 2;
  memcpy(scratch, buf, count * sizeof(float));
  for (size_t i = 0; i < count; i++)
    buf[(i + shift) % count] = scratch[i];
  return 0;
}

static int ar64(void* ctx, double* buf, size_t count, int op) {
  (void)ctx, (void)buf, (void)count, (void)op;
  return 0;
}

static int barrier(void* ctx) {
  (void)ctx;
  return 0;
}

int main(void) {
  static const char* const names[] = {"identity", "rotate-64", "swap-halves"};
  int bad = 0;
  for (mode = 0; mode < 3; mode++) {
    char* argv[] = {"check_loop", "--sizes", "4K,64K", "-n", "2", "-w", "1", NULL};
    struct cmpLib lib = {names[mode], 0, 1, NULL, ar32, ar64, barrier, NULL};
    int rc = cmpRun(&lib, 7, argv);
    int want = mode == 0 ? 0 : 1;
    printf("%s: rc %d, want %d: %s\n", names[mode], rc, want, rc == want ? "ok" : "WRONG");
    bad += rc != want;
  }
  return bad != 0;
}
