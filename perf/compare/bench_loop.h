/* SPDX-License-Identifier: Apache-2.0 */
/* One timing loop for papccl and its peers (Open MPI, Gloo), so a comparison measures the
 * libraries and nothing else: the same sizes, the same arrival injection, the same stamps and
 * the same statistics. Each driver supplies its library's allreduce and barrier. */
#ifndef PAPCCL_PERF_COMPARE_BENCH_LOOP_H_
#define PAPCCL_PERF_COMPARE_BENCH_LOOP_H_

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

struct cmpLib {
  const char* name; /* printed in each cell line */
  int rank, nranks;
  void* ctx;
  /* In-place float32 sum of count elements over every rank. Returns 0 on success. */
  int (*allreduceF32)(void* ctx, float* buf, size_t count);
  /* In-place float64 max (op 0), min (1) or sum (2): for the loop's statistics. */
  int (*allreduceF64)(void* ctx, double* buf, size_t count, int op);
  int (*barrier)(void* ctx);
  /* Optional: called before each size (Gloo builds its algorithm objects per buffer). */
  int (*prepare)(void* ctx, float* buf, size_t count);
};

/* Rank `rank`'s input (mine) and the sum every rank must get (expect), count elements: each
 * element's value depends on its index and the rank, so misplaced data fails the check. */
void cmpFill(float* mine, float* expect, size_t count, int rank, int nranks);
/* Timed calls of one size: `iters`, times 1 MiB / bytes for smaller sizes, at most
 * smallMult times `iters`. A function of the size only: every library runs the same calls
 * (short calls need many to get past every library's start-up transient). */
int cmpCallsFor(size_t bytes, int iters, int smallMult);

/* Parses the common options (-b -e -f or --sizes, -n -w --arrival --skew --small-mult), runs
 * every size
 * and prints, on rank 0, one line per size:
 *   cell <lib> <ranks> <pattern:skew> <bytes> <incoll_us> <tail_us> <skew_us> <wrong>
 * incoll = median over calls of the mean time in the call over ranks; tail = median of (last
 * completion - last arrival); skew = median of (last arrival - first arrival). Every call,
 * warm-up included, follows the arrival pattern after a barrier; buffers are reduced in
 * place (Gloo's algorithms only work in place); every timed call's result is checked against
 * cmpFill's sums outside the timed region. Returns the exit code (0, or 1 on a wrong result
 * or a failed call). */
int cmpRun(struct cmpLib* lib, int argc, char** argv);

#ifdef __cplusplus
}
#endif

#endif /* PAPCCL_PERF_COMPARE_BENCH_LOOP_H_ */
