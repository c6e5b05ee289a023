/* SPDX-License-Identifier: Apache-2.0 */
/* wait_cost: what waiting ranks cost a late rank that is still computing.
 *
 * Run with papcclrun -n N. Each round the last rank runs a fixed compute loop (calibrated
 * to about -m milliseconds alone) before it joins an allreduce; the others either wait for
 * it inside the allreduce ("waiting": they call it at once) or sleep outside papccl for
 * longer than the loop and call it afterwards ("alone"). The two kinds of round alternate;
 * the late rank's loop time is reported as medians and their ratio waiting/alone. Ranks
 * outnumbering the CPUs is the case that matters (the waiters share the late rank's CPUs).
 * Usage: wait_cost [-m MS] [-r ROUNDS] [-b BYTES] */
#include <getopt.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "papccl.h"

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static volatile uint64_t sink;

/* A fixed amount of integer work (no memory traffic, no system call). */
static void compute(uint64_t iters) {
  uint64_t x = 88172645463325252ull;
  for (uint64_t i = 0; i < iters; i++) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
  }
  sink = x;
}

static int cmpd(const void* a, const void* b) {
  double x = *(const double*)a, y = *(const double*)b;
  return x < y ? -1 : x > y;
}

static double median(double* v, int n) {
  qsort(v, (size_t)n, sizeof(double), cmpd);
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

#define CHECK(call) \
  do { \
    papcclResult_t r_ = (call); \
    if (r_ != papcclSuccess) { \
      fprintf(stderr, "wait_cost: %s: %s\n", #call, papcclGetErrorString(r_)); \
      return 1; \
    } \
  } while (0)

int main(int argc, char** argv) {
  double ms = 20;
  int rounds = 20;
  size_t bytes = 4;
  int c;
  while ((c = getopt(argc, argv, "m:r:b:")) != -1) {
    if (c == 'm')
      ms = atof(optarg);
    else if (c == 'r')
      rounds = atoi(optarg);
    else if (c == 'b')
      bytes = (size_t)atoll(optarg);
    else {
      fprintf(stderr, "usage: wait_cost [-m MS] [-r ROUNDS] [-b BYTES]\n");
      return 2;
    }
  }
  const char* r = getenv("PAPCCL_RANK");
  const char* n = getenv("PAPCCL_NRANKS");
  if (r == NULL || n == NULL || ms <= 0 || rounds < 2 || bytes < 4) {
    fprintf(stderr, "wait_cost: start with papcclrun -n N; -m > 0, -r >= 2, -b >= 4\n");
    return 2;
  }
  int rank = atoi(r), nranks = atoi(n), late = nranks - 1;
  papcclUniqueId id;
  CHECK(papcclGetUniqueId(&id));
  papcclComm_t comm;
  CHECK(papcclCommInitRank(&comm, nranks, id, rank));
  size_t count = bytes / 4;
  float* buf = (float*)calloc(count, sizeof(float));
  double* alone = (double*)calloc((size_t)rounds, sizeof(double));
  double* waiting = (double*)calloc((size_t)rounds, sizeof(double));
  if (buf == NULL || alone == NULL || waiting == NULL) return 1;

  /* Calibrate on the late rank while the others sleep outside papccl. */
  uint64_t iters = 1000000;
  if (rank == late) {
    for (;;) {
      double t0 = now();
      compute(iters);
      double dt = now() - t0;
      if (dt > 0.005) {
        iters = (uint64_t)((double)iters * (ms / 1e3) / dt);
        break;
      }
      iters *= 4;
    }
  }
  double phase[2] = {0, 0};
  CHECK(papcclAllReduce(buf, buf, count, papcclFloat32, papcclSum, comm, NULL));
  int na = 0, nw = 0;
  for (int it = 0; it < 2 * rounds; it++) {
    int wait = it % 2; /* alone, waiting, alone, ... */
    CHECK(papcclAllReduce(buf, buf, count, papcclFloat32, papcclSum, comm, NULL)); /* line up */
    if (rank == late) {
      double t0 = now();
      compute(iters);
      double dt = now() - t0;
      if (wait)
        waiting[nw++] = dt;
      else
        alone[na++] = dt;
      phase[wait] += dt;
    } else if (!wait) {
      /* Out of papccl for longer than the loop (3x its time alone). */
      struct timespec ts = {0, (long)(ms * 3e6)};
      while (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
      }
      nanosleep(&ts, NULL);
    }
    CHECK(papcclAllReduce(buf, buf, count, papcclFloat32, papcclSum, comm, NULL));
  }
  if (rank == late) {
    double a = median(alone, na), w = median(waiting, nw);
    printf("# wait_cost: %d ranks, late rank %d computes ~%.0f ms, %d rounds of each kind\n",
           nranks, late, ms, rounds);
    printf("late_compute_ms alone %.3f waiting %.3f ratio %.4f\n", a * 1e3, w * 1e3, w / a);
    fflush(stdout);
  }
  CHECK(papcclCommDestroy(comm));
  free(buf);
  free(alone);
  free(waiting);
  return 0;
}
