/* SPDX-License-Identifier: Apache-2.0 */
/* papccl perf driver: nccl-tests compatible options, timing loop, checks and output. */
#ifndef PAPCCL_PERF_COMMON_H_
#define PAPCCL_PERF_COMMON_H_

#include <stddef.h>
#include <stdint.h>

#include "papccl.h"

/* Exit codes: the values of nccl-tests' testResult_t. */
enum {
  PAP_PERF_OK = 0,
  PAP_PERF_INTERNAL = 1,
  PAP_PERF_CUDA = 2,
  PAP_PERF_PAPCCL = 3,
  PAP_PERF_TIMEOUT = 4,
  PAP_PERF_NOT_IMPLEMENTED = 5,
  PAP_PERF_INVALID_USAGE = 6,
  PAP_PERF_WRONG = 7,
  PAP_PERF_BAD_SIZE = 255
};

/* Operation slots: papcclRedOp_t values, then mulsum (a premulsum op made per rank, as
 * nccl-tests uses ncclNumOps), then none for collectives that do not reduce. */
#define PAP_PERF_OP_MULSUM ((int)papcclNumOps)
#define PAP_PERF_OP_NONE (-1)
#define PAP_PERF_NUM_OPS 6

/* Element counts of one test size. In-place: send = recv + sendInplaceOffset * rank and
 * recv = recv + recvInplaceOffset * rank (elements), as in nccl-tests. */
struct papPerfCounts {
  size_t sendCount; /* elements in the send buffer */
  size_t recvCount; /* elements in the receive buffer (and in expected) */
  size_t paramCount; /* the count argument of the call */
  size_t sendInplaceOffset;
  size_t recvInplaceOffset;
};

/* What initData gets: one rank's buffers for one check. The driver has poisoned recv. */
struct papPerfData {
  papcclDataType_t type;
  int op; /* papcclRedOp_t value, PAP_PERF_OP_MULSUM or PAP_PERF_OP_NONE */
  int root;
  int rank;
  int nranks;
  int inPlace;
  uint64_t seed;
  const struct papPerfCounts* counts;
  void* send; /* sendCount elements (inside recv when in place) */
  void* recv; /* recvCount elements */
  void* expected; /* recvCount elements: what recv must hold after the call; NULL when only
                   * the inputs are needed (the timed calls) */
};

/* One collective's hooks, like nccl-tests' struct testColl. */
struct papPerfColl {
  const char* name; /* "AllReduce" */
  int reduces; /* 1: uses -o (redop column); 0: redop prints "none" */
  int rooted; /* 1: uses -r (-1 loops over every root); 0: root prints -1 */
  int inPlaceUnchecked; /* 1: the in-place run is timed but not checked (send/recv) */
  void (*getCounts)(size_t count, size_t eltSize, int nranks, struct papPerfCounts* out);
  void (*initData)(const struct papPerfData* data);
  void (*getBw)(size_t count, size_t eltSize, double sec, int nranks, double* algBw, double* busBw);
  papcclResult_t (*run)(const void* sendbuff, void* recvbuff, size_t count, papcclDataType_t type,
                        papcclRedOp_t op, int root, papcclComm_t comm);
};

/* Shared hooks (NCCL-COMPAT 1.5). The per-rank block of the block collectives: count / nranks
 * rounded down to 16 bytes (may be 0). */
size_t papPerfBaseCount(size_t count, size_t eltSize, int nranks);
/* send = recv = count elements, send == recv in place (AllReduce, Broadcast, Reduce,
 * SendRecv). */
void papPerfCountsSame(size_t count, size_t eltSize, int nranks, struct papPerfCounts* out);
/* algbw = count * eltSize / t; busbw = algbw (bound by one link: Broadcast, Reduce, SendRecv). */
void papPerfBwOneLink(size_t count, size_t eltSize, double sec, int nranks, double* algBw,
                      double* busBw);
/* algbw = count * eltSize * nranks / t; busbw = algbw (n-1)/n (AllGather, ReduceScatter,
 * AlltoAll, Gather, Scatter; count = the per-rank block). */
void papPerfBwBlocks(size_t count, size_t eltSize, double sec, int nranks, double* algBw,
                     double* busBw);

/* Runs the whole benchmark for coll; returns the process exit code. */
int papPerfMain(int argc, char** argv, const struct papPerfColl* coll);

/* ---- Data helpers for initData hooks (verifiable.c) ------------------------------------ */

size_t papPerfTypeSize(papcclDataType_t type);
const char* papPerfTypeName(papcclDataType_t type);
const char* papPerfOpName(int op);

/* Writes rank's input for elements [first, first + count) of a reduction with op over
 * nranks ranks (op PAP_PERF_OP_NONE: plain data for copy collectives). The values make
 * the reduction exact in any order. */
void papPerfFillInput(void* buf, size_t count, size_t first, papcclDataType_t type, int op,
                      int rank, int nranks, uint64_t seed);
/* Writes the reduction of every rank's papPerfFillInput values. */
void papPerfFillExpected(void* buf, size_t count, size_t first, papcclDataType_t type, int op,
                         int nranks, uint64_t seed);
/* Elements of got that differ from expected: bit-exact, or within 2 ulp for floating-point
 * avg. */
int64_t papPerfCountWrong(const void* got, const void* expected, size_t count,
                          papcclDataType_t type, int op);
/* The premulsum scalar of rank (1 on even ranks, 2 on odd), stored as one `type` value. */
void papPerfPremulScalar(papcclDataType_t type, int rank, void* out8);

/* ---- Time and arrival patterns (shared with pap_demo) ------------------------------- */

#include "arrival.h"

/* ---- Ranks from a launcher ----------------------------------------------------------- */

/* Process rank and count from papcclrun, mpirun or srun (1 process when none is found).
 * When several processes were started without PAPCCL_COMM_ID on one host, sets
 * PAPCCL_COMM_ID from the launcher's job id so that every rank derives the same id.
 * Returns 0, or -1 (message printed) when the ranks cannot meet. Call before any papccl
 * call. */
int papPerfProcSetup(int* proc, int* nprocs, int* localRank);

#endif /* PAPCCL_PERF_COMMON_H_ */
