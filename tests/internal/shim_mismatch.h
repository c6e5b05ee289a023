/* SPDX-License-Identifier: Apache-2.0 */
/* Test shim for the mismatch check (src/arrival/mismatch.c) alone: a made-up shared board in
 * this process and a few made-up ranks' communicators on it, whose calls the module's own
 * functions compare (papMismatchPutFirst, papMismatchCheckArrival at arrival,
 * papMismatchVerify at completion, papMismatchAtHome at a message board's home). No
 * transport, no threads, no peers. */
#ifndef PAPCCL_TESTS_SHIM_MISMATCH_H_
#define PAPCCL_TESTS_SHIM_MISMATCH_H_

#include <stddef.h>
#include <stdint.h>

#include "papccl.h"

#ifdef __cplusplus
extern "C" {
#endif

/* One call as a rank makes it. */
struct papTestMismCall {
  const char* coll; /* "allreduce", "allgather" or "reduce" (whose root counts) */
  size_t count;
  papcclDataType_t dtype;
  papcclRedOp_t op; /* papcclSum, papcclProd, papcclMax, papcclMin */
  int root;
};

struct papTestMism;
/* nranks made-up ranks on one board; check: PAPCCL_CHECK_MISMATCH's value. NULL when out of
 * memory. */
struct papTestMism* papTestMismNew(int nranks, int check);
void papTestMismFree(struct papTestMism* m);
/* Rank `rank` arrives at collective cseq with call, after the ranks that arrived there
 * before it: the first arriver publishes its call, a later one compares its call with the
 * first's. Returns the arrival's result (papcclInvalidUsage: a mismatch, marked and logged). */
papcclResult_t papTestMismArrive(struct papTestMism* m, uint64_t cseq, int rank,
                                 const struct papTestMismCall* call);
/* Rank `rank` completes collective cseq (its board verdict): papcclInvalidUsage when the board
 * marks it mismatched. */
papcclResult_t papTestMismComplete(struct papTestMism* m, uint64_t cseq, int rank);
/* A message board's home (rank 0) receives rank from's call of collective cseq; returns how
 * many mismatch notices it pushed to the ranks for it. */
int papTestMismAtHome(struct papTestMism* m, uint64_t cseq, int from,
                      const struct papTestMismCall* call);

#ifdef __cplusplus
}
#endif

#endif /* PAPCCL_TESTS_SHIM_MISMATCH_H_ */
