/* SPDX-License-Identifier: Apache-2.0 */
/* The perf driver's own declarations (private to perf/): its state, the output macros and
 * what its files share. common.c: ranks, setup, main; cli.c: the command line; json.c: the
 * JSON output; timing.c: the timing loop and the table. */
#ifndef PAPCCL_PERF_DRIVER_H_
#define PAPCCL_PERF_DRIVER_H_

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "common.h"

#define PERF_TESTS_VERSION "2.19.6" /* the nccl-tests release whose output we reproduce */
#define PERF_HOST_LEN 64
#define PERF_MAX_THREADS 1024

struct perfOpts {
  int nThreads, nGpus;
  size_t minBytes, maxBytes, stepBytes, stepFactor;
  int iters, aggIters, warmupIters, runCycles, parallelInit, check;
  int op, type, root; /* op/type -1 = all */
  int blocking, streamNull, timeout, graph, reportCpu, reportTs, average;
  int localRegister, ctaPolicy, devImpl, devCtas, memReport, unalign, perIter, perIterSkip;
  const char* jsonPath;
  struct papPerfArrival arrival;
  int arrivalSet;
};

struct perfRank;

struct perfProc {
  const struct papPerfColl* coll;
  struct perfOpts o;
  const char* progName;
  char host[PERF_HOST_LEN];
  int proc, nprocs, localRank, nranks, version;
  papcclUniqueId id;
  struct perfRank* ranks;
  FILE* json;
  int jsonDepth, jsonFirst[32], jsonAfterKey;
  /* After the memory cap; written by thread 0, read by every rank thread after a barrier.
   * Atomic: that barrier is a papccl allreduce, whose ordering between thread ranks runs
   * through each rank's own mapping of the shared segment and a futex, where ThreadSanitizer
   * cannot follow it. */
  _Atomic size_t maxBytes;
  int errors; /* summed over every rank at the end */
  int corrupt; /* PAPCCL_PERF_CORRUPT: test hook, see benchTime */
  atomic_int timedOut;
};

struct perfRank {
  struct perfProc* p;
  int thread, rank;
  papcclComm_t comm;
  pthread_t tid;
  char *sendBuf, *recvBuf, *expected; /* sendBuf, recvBuf: moved by -u */
  void *sendAlloc, *recvAlloc;
  struct papPerfCounts counts;
  size_t sendBytes, recvBytes;
  papcclRedOp_t premulOp;
  uint64_t rep;
  int errors, bwCount;
  double bwSum;
  atomic_llong opStartNs; /* for -T; 0 when not inside a call */
  double scratchD;
  int64_t scratchI;
  double* pap; /* [4 * iters] arrival-mode stamps and their reductions */
  long calls; /* timed calls so far: the arrival pattern's call index */
};

/* --arrival given: delays are injected and the PAP columns are printed. */
static inline int arrivalMode(const struct perfOpts* o) {
  return o->arrivalSet || o->arrival.skewUs > 0;
}

static inline int isPrinter(const struct perfRank* r) {
  return r->p->proc == 0 && r->thread == 0;
}
#define PRINT(r, ...) \
  do { \
    if (isPrinter(r)) printf(__VA_ARGS__); \
  } while (0)

static inline const char* baseName(const char* path) {
  const char* s = strrchr(path, '/');
  return s ? s + 1 : path;
}

/* Prints the failure of a papccl call like nccl-tests and ends the process (common.c). */
void papPerfFailPapccl(papcclComm_t comm, const char* file, int line, papcclResult_t res);
#define PCHECK(comm, call) \
  do { \
    papcclResult_t res_ = (call); \
    if (res_ != papcclSuccess) papPerfFailPapccl((comm), __FILE__, __LINE__, res_); \
  } while (0)

/* ---- cli.c ----------------------------------------------------------------------------- */
/* Fills o from argv: -1 when the test runs, else the exit code (help, or a bad option). */
int papPerfParseArgs(int argc, char** argv, struct perfOpts* o);

/* ---- json.c: the JSON file (-J), nccl-tests' layout ------------------------------------- */
void papPerfJsonStr(struct perfProc* p, const char* s);
void papPerfJsonKey(struct perfProc* p, const char* k);
void papPerfJsonOpen(struct perfProc* p, char c);
void papPerfJsonClose(struct perfProc* p, char c);
void papPerfJsonLong(struct perfProc* p, long long v);
void papPerfJsonDouble(struct perfProc* p, double v);
void papPerfJsonNull(struct perfProc* p);
void papPerfJsonNow(struct perfProc* p);
void papPerfJsonBegin(struct perfProc* p, int argc, char** argv);

/* ---- timing.c -------------------------------------------------------------------------- */
/* -T: marks a call of r as begun or ended, for the watchdog. */
void papPerfMarkBegin(struct perfRank* r);
void papPerfMarkEnd(struct perfRank* r);
/* Barrier and sum over the test communicator itself. */
void papPerfBarrier(struct perfRank* r);
int64_t papPerfSumInt(struct perfRank* r, int64_t v);
void papPerfPrintTableHeader(struct perfRank* r);
/* r's counts and byte sizes for a test of size bytes of type. */
void papPerfSetupSize(struct perfRank* r, size_t size, papcclDataType_t type);
/* Every size of the sweep for one type, op and root. */
void papPerfTimeTest(struct perfRank* r, papcclDataType_t type, int op, int root);

#endif /* PAPCCL_PERF_DRIVER_H_ */
