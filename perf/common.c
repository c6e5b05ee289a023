/* SPDX-License-Identifier: Apache-2.0 */
/* papccl perf driver: nccl-tests compatible options, timing loop, checks and output. */
#include "common.h"

#include "rankenv.h"

#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define PERF_TESTS_VERSION "2.19.6" /* the nccl-tests release whose output we reproduce */
#define PERF_HOST_LEN 64
#define PERF_MAX_THREADS 1024

extern char** environ;

/* ---- Time and arrival patterns --------------------------------------------------------- */

/* ---- Ranks from a launcher ------------------------------------------------------------- */

static int envInt(const char* name, int dflt) {
  const char* v = getenv(name);
  return (v && *v) ? atoi(v) : dflt;
}

int papPerfProcSetup(int* proc, int* nprocs, int* localRank) {
  const char* source = NULL;
  if (papRankEnvGetFrom(proc, nprocs, localRank, &source) != 0) {
    if (source) {
      fprintf(stderr, "papccl perf: bad launcher variable %s='%s'\n", source,
              getenv(source) ? getenv(source) : "");
      return -1;
    }
    *proc = 0;
    *nprocs = 1;
    *localRank = 0;
  }
  if (*nprocs < 1) {
    fprintf(stderr, "papccl perf: rank %d of an unknown number of processes: set PAPCCL_NRANKS\n",
            *proc);
    return -1;
  }
  if (*nprocs <= 1 || getenv("PAPCCL_COMM_ID")) return 0;
  /* Started by mpirun/srun: no launcher handed us a rendezvous address. On one host, every
   * rank derives the same loopback port from the job id; across hosts it must be given. */
  int oneHost = envInt("OMPI_COMM_WORLD_LOCAL_SIZE", 0) == *nprocs ||
                envInt("MPI_LOCALNRANKS", 0) == *nprocs || envInt("SLURM_STEP_NUM_NODES", 0) == 1 ||
                envInt("SLURM_NNODES", 0) == 1;
  if (!oneHost) {
    fprintf(
        stderr,
        "papccl perf: %d processes on several hosts: set PAPCCL_COMM_ID=<host of rank 0>:<port> "
        "for every rank (papcclrun does this)\n",
        *nprocs);
    return -1;
  }
  const char* keys[] = {"OMPI_MCA_ess_base_jobid", "PMIX_NAMESPACE", "SLURM_JOB_ID",
                        "SLURM_STEP_ID", "PMI_KVSNAME"};
  uint64_t h = 1469598103934665603ull ^ (uint64_t)getuid();
  int found = 0;
  for (size_t k = 0; k < sizeof(keys) / sizeof(keys[0]); k++) {
    const char* v = getenv(keys[k]);
    for (; v && *v; v++)
      h = (h ^ (unsigned char)*v) * 1099511628211ull, found = 1;
  }
  if (!found) h = (h ^ (uint64_t)getppid()) * 1099511628211ull; /* siblings share a parent */
  char id[64];
  snprintf(id, sizeof(id), "127.0.0.1:%d", 10000 + (int)((h ^ (h >> 29)) % 20000));
  setenv("PAPCCL_COMM_ID", id, 0);
  return 0;
}

/* ---- Driver state ------------------------------------------------------------------------ */

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
static int arrivalMode(const struct perfOpts* o) {
  return o->arrivalSet || o->arrival.skewUs > 0;
}

static int isPrinter(const struct perfRank* r) {
  return r->p->proc == 0 && r->thread == 0;
}
#define PRINT(r, ...) \
  do { \
    if (isPrinter(r)) printf(__VA_ARGS__); \
  } while (0)

static const char* baseName(const char* path) {
  const char* s = strrchr(path, '/');
  return s ? s + 1 : path;
}

static struct perfProc* gProc; /* for the failure and timeout paths */

static void failPapccl(papcclComm_t comm, const char* file, int line, papcclResult_t res) {
  if (gProc && atomic_load(&gProc->timedOut)) {
    for (;;)
      pause(); /* the watchdog is exiting with the timeout code */
  }
  printf("%s: Test NCCL failure %s:%d '%s / %s'\n", gProc ? gProc->host : "?", baseName(file), line,
         papcclGetErrorString(res), papcclGetLastError(comm));
  fflush(stdout);
  fflush(stderr);
  _exit(PAP_PERF_PAPCCL); /* peers of this rank cannot go on; do not unwind under them */
}
#define PCHECK(comm, call) \
  do { \
    papcclResult_t res_ = (call); \
    if (res_ != papcclSuccess) failPapccl((comm), __FILE__, __LINE__, res_); \
  } while (0)

static void markBegin(struct perfRank* r) {
  if (r->p->o.timeout > 0) atomic_store(&r->opStartNs, (long long)(papPerfNow() * 1e9) + 1);
}
static void markEnd(struct perfRank* r) {
  if (r->p->o.timeout > 0) atomic_store(&r->opStartNs, 0);
}

/* Barrier and small reductions over the test communicator itself. */
static void barrier(struct perfRank* r) {
  r->scratchI = 1;
  markBegin(r);
  PCHECK(r->comm,
         papcclAllReduce(&r->scratchI, &r->scratchI, 1, papcclInt64, papcclSum, r->comm, NULL));
  markEnd(r);
}
static int64_t sumInt(struct perfRank* r, int64_t v) {
  r->scratchI = v;
  markBegin(r);
  PCHECK(r->comm,
         papcclAllReduce(&r->scratchI, &r->scratchI, 1, papcclInt64, papcclSum, r->comm, NULL));
  markEnd(r);
  return r->scratchI;
}
/* average: 0 rank 0's value, 1 mean, 2 min, 3 max (nccl-tests -a). */
static double reduceDouble(struct perfRank* r, double v, int average) {
  papcclRedOp_t op = average == 2 ? papcclMin : average == 3 ? papcclMax : papcclSum;
  r->scratchD = (average == 0 && r->rank != 0) ? 0.0 : v;
  markBegin(r);
  PCHECK(r->comm, papcclAllReduce(&r->scratchD, &r->scratchD, 1, papcclFloat64, op, r->comm, NULL));
  markEnd(r);
  return average == 1 ? r->scratchD / r->p->nranks : r->scratchD;
}

/* ---- JSON output (nccl-tests layout) ------------------------------------------------------ */

static void jsonSep(struct perfProc* p) {
  if (p->jsonAfterKey) {
    p->jsonAfterKey = 0;
  } else if (p->jsonDepth > 0) {
    if (!p->jsonFirst[p->jsonDepth]) fputc(',', p->json);
    p->jsonFirst[p->jsonDepth] = 0;
  }
}
static void jsonRaw(struct perfProc* p, const char* s) {
  for (; *s; s++) {
    unsigned char c = (unsigned char)*s;
    if (c == '"' || c == '\\' || c == '/')
      fprintf(p->json, "\\%c", c);
    else if (c == '\n')
      fputs("\\n", p->json);
    else if (c == '\t')
      fputs("\\t", p->json);
    else if (c < 0x20)
      fprintf(p->json, "\\u%04x", c);
    else
      fputc(c, p->json);
  }
}
static void jsonStr(struct perfProc* p, const char* s) {
  if (!p->json) return;
  jsonSep(p);
  fputc('"', p->json);
  jsonRaw(p, s);
  fputc('"', p->json);
}
static void jsonKey(struct perfProc* p, const char* k) {
  if (!p->json) return;
  jsonStr(p, k);
  fputc(':', p->json);
  p->jsonAfterKey = 1;
}
static void jsonOpen(struct perfProc* p, char c) {
  if (!p->json) return;
  jsonSep(p);
  fputc(c, p->json);
  p->jsonFirst[++p->jsonDepth] = 1;
}
static void jsonClose(struct perfProc* p, char c) {
  if (!p->json) return;
  fputc(c, p->json);
  p->jsonDepth--;
}
static void jsonLong(struct perfProc* p, long long v) {
  if (!p->json) return;
  jsonSep(p);
  fprintf(p->json, "%lld", v);
}
static void jsonDouble(struct perfProc* p, double v) {
  if (!p->json) return;
  if (v != v) {
    jsonStr(p, "nan");
    return;
  }
  jsonSep(p);
  fprintf(p->json, "%lf", v);
}
static void jsonNull(struct perfProc* p) {
  if (!p->json) return;
  jsonSep(p);
  fputs("null", p->json);
}
static void jsonNow(struct perfProc* p) {
  char buf[64];
  time_t now = time(NULL);
  strftime(buf, sizeof(buf), "%Y-%m-%d %H:%M:%S", localtime(&now));
  jsonStr(p, buf);
}

static void jsonBegin(struct perfProc* p, int argc, char** argv) {
  char* path = strdup(p->o.jsonPath);
  int tries = 0;
  while (path && !(p->json = fopen(path, "wx"))) {
    if (errno != EEXIST) {
      printf("# skipping json output; %s not accessible\n", path);
      free(path);
      return;
    }
    free(path);
    size_t len = strlen(p->o.jsonPath) + 16;
    path = malloc(len);
    if (path) snprintf(path, len, "%s.%d", p->o.jsonPath, tries++);
  }
  if (!path) return;
  printf("# Writing JSON output to %s\n", path);
  free(path);
  jsonOpen(p, '{');
  jsonKey(p, "version");
  jsonLong(p, 3);
  jsonKey(p, "start_time");
  jsonNow(p);
  jsonKey(p, "args");
  jsonOpen(p, '[');
  for (int i = 0; i < argc; i++)
    jsonStr(p, argv[i]);
  jsonClose(p, ']');
  jsonKey(p, "env");
  jsonOpen(p, '[');
  for (char** e = environ; e && *e; e++)
    jsonStr(p, *e);
  jsonClose(p, ']');
  jsonKey(p, "nccl_version");
  jsonLong(p, p->version);
}

/* ---- Output helpers ----------------------------------------------------------------------- */

/* nccl-tests' number format: as many decimals as the width allows, by digit count. */
static void floatStr(double v, int width, char* out, size_t len) {
  int digits = 0;
  if (isfinite(v)) {
    for (double p = 1; v >= p && digits < 400; p *= 10)
      digits++;
  }
  if (digits < width - 2)
    snprintf(out, len, "%*.2f", width, v);
  else if (digits < width - 1)
    snprintf(out, len, "%*.1f", width, v);
  else if (digits < width + 1)
    snprintf(out, len, "%*.0f", width, v);
  else if (width >= 7)
    snprintf(out, len, "%*.1e", width, v);
  else
    snprintf(out, len, "%*.0e", width, v);
}

static void printTableHeader(struct perfRank* r) {
  const struct perfOpts* o = &r->p->o;
  const char* t = o->reportCpu ? "cputime" : "time";
  int pad = o->reportTs ? 19 : 0;
  PRINT(r, "#\n");
  PRINT(r,
        "# %10s  %12s  %8s  %6s  %6s           out-of-place                       in-place         "
        " \n",
        "", "", "", "", "");
  if (arrivalMode(o)) {
    /* papccl extension: per half, the medians over the timed calls of the tail after the
     * last arrival, the mean time in the call, and the worst-case skew. */
    PRINT(
        r,
        "# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %7s  %7s  %7s  %6s  %6s  %6s  %7s  "
        "%7s  %7s\n",
        "size", "count", "type", "redop", "root", t, "algbw", "busbw", "#wrong", "tail", "inColl",
        "skew", t, "algbw", "busbw", "#wrong", "tail", "inColl", "skew");
    PRINT(
        r,
        "# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %7s  %7s  %7s  %6s  %6s  %6s  %7s  "
        "%7s  %7s\n",
        "(B)", "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(us)", "(us)",
        "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(us)", "(us)");
  } else {
    PRINT(r, "# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %6s  %6s  %6s %*s\n", "size",
          "count", "type", "redop", "root", t, "algbw", "busbw", "#wrong", t, "algbw", "busbw",
          "#wrong", pad, o->reportTs ? "timestamp" : "");
    PRINT(r, "# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %6s  %6s  %6s %*s\n", "(B)",
          "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)", "",
          pad, o->reportTs ? "%Y-%m-%d %H:%M:%S" : "");
  }
  if (isPrinter(r)) {
    jsonKey(r->p, "results");
    jsonOpen(r->p, '[');
  }
}

/* ---- The timing loop ------------------------------------------------------------------------ */

static void setupSize(struct perfRank* r, size_t size, papcclDataType_t type) {
  size_t es = papPerfTypeSize(type);
  r->p->coll->getCounts(size / es, es, r->p->nranks, &r->counts);
  r->sendBytes = r->counts.sendCount * es;
  r->recvBytes = r->counts.recvCount * es;
}

static papcclRedOp_t redOpOf(struct perfRank* r, int op) {
  if (op == PAP_PERF_OP_MULSUM) return r->premulOp;
  return op < 0 ? papcclSum : (papcclRedOp_t)op;
}

/* Buffers of call `iter`: pointers move through the allocation as nccl-tests does. */
static void callBuffers(struct perfRank* r, papcclDataType_t type, int inPlace, int iter,
                        void** send, void** recv) {
  size_t es = papPerfTypeSize(type);
  size_t total = r->sendBytes > r->recvBytes ? r->sendBytes : r->recvBytes;
  size_t steps = total ? r->p->maxBytes / total : 1;
  size_t shift = total * ((size_t)iter % (steps ? steps : 1));
  char* rb = r->recvBuf + shift;
  *send = inPlace ? rb + r->counts.sendInplaceOffset * (size_t)r->rank * es : r->sendBuf + shift;
  *recv = inPlace ? rb + r->counts.recvInplaceOffset * (size_t)r->rank * es : rb;
}

static void startColl(struct perfRank* r, papcclDataType_t type, int op, int root, int inPlace,
                      int iter) {
  void *s, *d;
  callBuffers(r, type, inPlace, iter, &s, &d);
  markBegin(r);
  PCHECK(r->comm, r->p->coll->run(s, d, r->counts.paramCount, type, redOpOf(r, op), root, r->comm));
  markEnd(r);
}

static void runIter(struct perfRank* r, papcclDataType_t type, int op, int root, int inPlace,
                    int iter) {
  int agg = r->p->o.aggIters;
  if (agg > 1) PCHECK(r->comm, papcclGroupStart());
  for (int a = 0; a < agg; a++)
    startColl(r, type, op, root, inPlace, iter * agg + a);
  if (agg > 1) PCHECK(r->comm, papcclGroupEnd());
  if (r->p->o.blocking == 1) barrier(r);
}

static void initData(struct perfRank* r, papcclDataType_t type, int op, int root, int inPlace,
                     uint64_t seed, int withExpected) {
  void *s, *d;
  callBuffers(r, type, inPlace, 0, &s, &d);
  memset(d, 0xa5, r->recvBytes); /* poison: a skipped write shows up as wrong data */
  struct papPerfData data = {.type = type,
                             .op = op,
                             .root = root,
                             .rank = r->rank,
                             .nranks = r->p->nranks,
                             .inPlace = inPlace,
                             .seed = seed,
                             .counts = &r->counts,
                             .send = s,
                             .recv = d,
                             .expected = withExpected ? r->expected : NULL};
  r->p->coll->initData(&data);
}

static void benchTime(struct perfRank* r, papcclDataType_t type, int op, int root, int inPlace) {
  struct perfProc* p = r->p;
  const struct perfOpts* o = &p->o;
  if (o->check) initData(r, type, op, root, inPlace, 99, 0); /* valid inputs for timing */
  startColl(r, type, op, root, inPlace, 0);
  barrier(r);

  double sec;
  double papCols[3] = {0, 0, 0};
  if (arrivalMode(o)) {
    /* Arrival pattern: a barrier, this rank's delay, then the call; time only the calls. */
    double inCall = 0;
    double* st = r->pap;
    for (int it = 0; it < o->iters; it++) {
      barrier(r);
      papPerfDelayUs(papPerfArrivalDelayUs(&o->arrival, r->rank, p->nranks, r->calls++));
      double t0 = papPerfNow();
      runIter(r, type, op, root, inPlace, it);
      double t1 = papPerfNow();
      inCall += t1 - t0;
      st[it] = t0; /* -> last arrival */
      st[o->iters + it] = t0; /* -> first arrival */
      st[2 * o->iters + it] = t1; /* -> last completion */
      st[3 * o->iters + it] = t1 - t0; /* -> sum of the times in the call */
    }
    sec = inCall;
    size_t n = (size_t)o->iters;
    PCHECK(r->comm, papcclAllReduce(st, st, n, papcclFloat64, papcclMax, r->comm, NULL));
    PCHECK(r->comm, papcclAllReduce(st + n, st + n, n, papcclFloat64, papcclMin, r->comm, NULL));
    PCHECK(r->comm,
           papcclAllReduce(st + 2 * n, st + 2 * n, n, papcclFloat64, papcclMax, r->comm, NULL));
    PCHECK(r->comm,
           papcclAllReduce(st + 3 * n, st + 3 * n, n, papcclFloat64, papcclSum, r->comm, NULL));
    double* tmp = (double*)malloc(sizeof(double) * n);
    if (tmp == NULL) {
      fprintf(stderr, "%s: out of memory\n", p->host);
      _exit(PAP_PERF_PAPCCL);
    }
    for (int col = 0; col < 3; col++) {
      for (size_t i = 0; i < n; i++) {
        double tail = st[2 * n + i] - st[i], inColl = st[3 * n + i] / p->nranks;
        double skew = st[i] - st[n + i];
        tmp[i] = (col == 0 ? tail : col == 1 ? inColl : skew) * 1e6;
      }
      papCols[col] = papPerfMedian(tmp, n);
    }
    free(tmp);
  } else {
    double excluded = 0, t0 = papPerfNow();
    for (int it = 0; it < o->iters; it++) {
      runIter(r, type, op, root, inPlace, it);
      if (o->blocking == 3) {
        double tb = papPerfNow();
        barrier(r);
        excluded += papPerfNow() - tb;
      }
    }
    sec = papPerfNow() - t0 - excluded;
  }
  sec /= (double)o->iters * o->aggIters;
  sec = reduceDouble(r, sec, o->average);

  double algBw = 0, busBw = 0;
  p->coll->getBw(r->counts.paramCount, papPerfTypeSize(type), sec, p->nranks, &algBw, &busBw);

  int64_t wrong = 0;
  /* As nccl-tests: an in-place send/recv (one buffer both sent from and received into) is a
   * race by NCCL's rules, so it is timed but not checked. */
  int check = inPlace && p->coll->inPlaceUnchecked ? 0 : o->check;
  for (int c = 0; c < check; c++) {
    initData(r, type, op, root, inPlace, ++r->rep, 1);
    startColl(r, type, op, root, inPlace, 0);
    void *s, *d;
    callBuffers(r, type, inPlace, 0, &s, &d);
    /* Test hook: PAPCCL_PERF_CORRUPT=1 flips a bit of rank 0's first result element, to show
     * that -c catches a wrong result (and the exit code is 7). */
    if (p->corrupt && r->rank == 0 && r->counts.recvCount > 0) ((unsigned char*)d)[0] ^= 0x10;
    int64_t mine = papPerfCountWrong(d, r->expected, r->counts.recvCount, type, op);
    if (mine) r->errors++;
    wrong = sumInt(r, mine);
    if (wrong) break;
  }

  char ts[16], as[16], bs[16];
  floatStr(sec * 1e6, 7, ts, sizeof(ts));
  floatStr(algBw, 6, as, sizeof(as));
  floatStr(busBw, 6, bs, sizeof(bs));
  if (check)
    PRINT(r, "  %7s  %6s  %6s  %6g", ts, as, bs, (double)wrong);
  else
    PRINT(r, "  %7s  %6s  %6s    N/A", ts, as, bs);
  if (arrivalMode(o)) {
    char c0[16], c1[16], c2[16];
    floatStr(papCols[0], 7, c0, sizeof(c0));
    floatStr(papCols[1], 7, c1, sizeof(c1));
    floatStr(papCols[2], 7, c2, sizeof(c2));
    PRINT(r, "  %7s  %7s  %7s", c0, c1, c2);
  }
  if (inPlace && o->reportTs && isPrinter(r)) {
    char now[64];
    time_t t = time(NULL);
    strftime(now, sizeof(now), "%Y-%m-%d %H:%M:%S", localtime(&t));
    printf("%21s", now);
  }
  if (isPrinter(r)) {
    jsonKey(p, inPlace ? "in_place" : "out_of_place");
    jsonOpen(p, '{');
    jsonKey(p, o->reportCpu ? "cpu_time" : "time");
    jsonDouble(p, sec * 1e6);
    jsonKey(p, "alg_bw");
    jsonDouble(p, algBw);
    jsonKey(p, "bus_bw");
    jsonDouble(p, busBw);
    jsonKey(p, "nwrong");
    if (check)
      jsonDouble(p, (double)wrong);
    else
      jsonNull(p);
    if (arrivalMode(o)) {
      jsonKey(p, "tail_us");
      jsonDouble(p, papCols[0]);
      jsonKey(p, "time_in_coll_us");
      jsonDouble(p, papCols[1]);
      jsonKey(p, "skew_us");
      jsonDouble(p, papCols[2]);
    }
    jsonClose(p, '}');
  }
  r->bwSum += busBw;
  r->bwCount++;
}

static size_t nextSize(const struct perfOpts* o, size_t size) {
  size_t next = o->stepFactor > 1 ? size * o->stepFactor : size + o->stepBytes;
  if (size == 0 && o->stepFactor > 1) next = 1;
  return next > size ? next : (size_t)-1; /* no progress or overflow: stop */
}

static void timeTest(struct perfRank* r, papcclDataType_t type, int op, int root) {
  struct perfProc* p = r->p;
  const struct perfOpts* o = &p->o;
  /* -u N: buffers start N elements past their alignment. */
  r->sendBuf = (char*)r->sendAlloc + (size_t)o->unalign * papPerfTypeSize(type);
  r->recvBuf = (char*)r->recvAlloc + (size_t)o->unalign * papPerfTypeSize(type);
  if (op == PAP_PERF_OP_MULSUM) {
    uint64_t scalar;
    papPerfPremulScalar(type, r->rank, &scalar);
    PCHECK(r->comm, papcclRedOpCreatePreMulSum(&r->premulOp, &scalar, type,
                                               papcclScalarHostImmediate, r->comm));
  }
  barrier(r);
  for (size_t size = o->minBytes; size <= p->maxBytes; size = size ? size * 2 : 1) {
    setupSize(r, size, type);
    for (int it = 0; it < o->warmupIters; it++)
      startColl(r, type, op, root, 0, it);
    if (size > p->maxBytes / 2) break;
  }
  int cycle = 0;
  do {
    for (size_t size = o->minBytes; size <= p->maxBytes; size = nextSize(o, size)) {
      setupSize(r, size, type);
      size_t shown = r->sendBytes > r->recvBytes ? r->sendBytes : r->recvBytes;
      char rootStr[16];
      snprintf(rootStr, sizeof(rootStr), "%6i", root);
      PRINT(r, "%12li  %12li  %8s  %6s  %6s", (long)shown, (long)r->counts.paramCount,
            papPerfTypeName(type), papPerfOpName(op), rootStr);
      if (isPrinter(r)) {
        jsonOpen(p, '{');
        jsonKey(p, "size");
        jsonLong(p, (long long)shown);
        jsonKey(p, "count");
        jsonLong(p, (long long)r->counts.paramCount);
        jsonKey(p, "type");
        jsonStr(p, papPerfTypeName(type));
        jsonKey(p, "redop");
        jsonStr(p, papPerfOpName(op));
        jsonKey(p, "root");
        jsonStr(p, rootStr);
      }
      benchTime(r, type, op, root, 0);
      benchTime(r, type, op, root, 1);
      PRINT(r, "\n");
      if (isPrinter(r)) {
        jsonKey(p, "actual_iterations");
        jsonLong(p, o->iters);
        jsonKey(p, "experiment_name");
        jsonStr(p, "");
        jsonClose(p, '}');
      }
    }
  } while (o->runCycles == 0 || ++cycle < o->runCycles);
  if (op == PAP_PERF_OP_MULSUM) PCHECK(r->comm, papcclRedOpDestroy(r->premulOp, r->comm));
}

/* ---- Hooks shared by several collectives --------------------------------------------------- */

size_t papPerfBaseCount(size_t count, size_t eltSize, int nranks) {
  size_t align = 16 / eltSize ? 16 / eltSize : 1;
  return (count / (size_t)nranks) & ~(align - 1);
}

void papPerfCountsSame(size_t count, size_t eltSize, int nranks, struct papPerfCounts* out) {
  (void)eltSize;
  (void)nranks;
  out->sendCount = count;
  out->recvCount = count;
  out->paramCount = count;
  out->sendInplaceOffset = 0;
  out->recvInplaceOffset = 0;
}

void papPerfBwOneLink(size_t count, size_t eltSize, double sec, int nranks, double* algBw,
                      double* busBw) {
  (void)nranks;
  *algBw = (double)(count * eltSize) / 1.0e9 / sec;
  *busBw = *algBw;
}

void papPerfBwBlocks(size_t count, size_t eltSize, double sec, int nranks, double* algBw,
                     double* busBw) {
  *algBw = (double)(count * eltSize * (size_t)nranks) / 1.0e9 / sec;
  *busBw = *algBw * (double)(nranks - 1) / nranks;
}

/* ---- Per-rank setup ---------------------------------------------------------------------- */

struct rankInfo {
  int32_t rank, pid;
  char host[PERF_HOST_LEN];
};

static void reportDevices(struct perfRank* r) {
  struct perfProc* p = r->p;
  struct rankInfo mine, *all = calloc((size_t)p->nranks, sizeof(*all));
  if (!all) abort();
  memset(&mine, 0, sizeof(mine));
  mine.rank = r->rank;
  mine.pid = (int32_t)getpid();
  snprintf(mine.host, sizeof(mine.host), "%s", p->host);
  markBegin(r);
  PCHECK(r->comm, papcclAllGather(&mine, all, sizeof(mine), papcclUint8, r->comm, NULL));
  markEnd(r);
  if (isPrinter(r)) {
    jsonKey(p, "devices");
    jsonOpen(p, '[');
    for (int i = 0; i < p->nranks; i++) {
      printf("#  Rank %2d Group %2d Pid %6d on %10s device %2d [host] host memory (no GPU)\n",
             all[i].rank, 0, all[i].pid, all[i].host, -1);
      jsonOpen(p, '{');
      jsonKey(p, "rank");
      jsonLong(p, all[i].rank);
      jsonKey(p, "group");
      jsonLong(p, 0);
      jsonKey(p, "pid");
      jsonLong(p, all[i].pid);
      jsonKey(p, "hostname");
      jsonStr(p, all[i].host);
      jsonKey(p, "device");
      jsonLong(p, -1);
      jsonKey(p, "device_hex");
      jsonStr(p, "host");
      jsonKey(p, "device_info");
      jsonStr(p, "host memory (no GPU)");
      jsonClose(p, '}');
    }
    jsonClose(p, ']');
    jsonClose(p, '}'); /* config */
  }
  free(all);
}

/* Host memory per rank as nccl-tests budgets GPU memory: total minus a reserve, over the
 * number of buffers (send, recv and, with checks, expected). */
static size_t memoryCap(const struct perfProc* p) {
  FILE* f = fopen("/proc/meminfo", "r");
  unsigned long long kb = 0;
  char line[256];
  while (f && fgets(line, sizeof(line), f)) {
    if (sscanf(line, "MemAvailable: %llu kB", &kb) == 1) break;
  }
  if (f) fclose(f);
  if (kb == 0) return (size_t)INT64_MAX; /* unknown: no cap */
  const double g = 1024.0 * 1024 * 1024;
  double mem = (double)kb * 1024 / ((double)p->nprocs * p->o.nThreads); /* assume one host */
  double reserve = fmin(ceil(mem / (16 * g)) * g, 4 * g) + g;
  double cap = (mem - reserve) / (p->o.check ? 3 : 2);
  return cap < 1024 ? 1024 : (size_t)cap;
}

static void allocBuffers(struct perfRank* r) {
  struct perfProc* p = r->p;
  size_t maxSend = 0, maxRecv = 0;
  for (int t = 0; t < papcclNumTypes; t++) { /* every type's rounding of the largest size */
    setupSize(r, p->maxBytes, (papcclDataType_t)t);
    maxSend = r->sendBytes > maxSend ? r->sendBytes : maxSend;
    maxRecv = r->recvBytes > maxRecv ? r->recvBytes : maxRecv;
  }
  size_t pad = (size_t)p->o.unalign * 8 + 64;
  size_t sendLen = (maxSend > p->maxBytes ? maxSend : p->maxBytes) + pad;
  size_t recvLen = (maxRecv > p->maxBytes ? maxRecv : p->maxBytes) + pad;
  r->sendAlloc = r->recvAlloc = NULL;
  if (posix_memalign(&r->sendAlloc, 4096, sendLen) ||
      posix_memalign(&r->recvAlloc, 4096, recvLen) ||
      (p->o.check && !(r->expected = malloc(maxRecv + 64))) ||
      !(r->pap = (double*)malloc(sizeof(double) * 4 * (size_t)p->o.iters))) {
    fprintf(stderr, "%s: cannot allocate %zu bytes of host buffers\n", p->host, sendLen + recvLen);
    _exit(PAP_PERF_INTERNAL);
  }
  memset(r->sendAlloc, 0, sendLen); /* touch every page before timing */
  memset(r->recvAlloc, 0, recvLen);
  r->sendBuf = r->sendAlloc;
  r->recvBuf = r->recvAlloc;
}

static void* rankMain(void* arg) {
  struct perfRank* r = arg;
  struct perfProc* p = r->p;
  const struct perfOpts* o = &p->o;
  if (o->parallelInit) {
    papcclConfig_t cfg = PAPCCL_CONFIG_INITIALIZER;
    if (o->ctaPolicy >= 0) cfg.CTAPolicy = o->ctaPolicy;
    PCHECK(NULL, papcclCommInitRankConfig(&r->comm, p->nranks, p->id, r->rank, &cfg));
  }
  reportDevices(r);
  r->scratchI = (int64_t)memoryCap(p);
  PCHECK(r->comm,
         papcclAllReduce(&r->scratchI, &r->scratchI, 1, papcclInt64, papcclMin, r->comm, NULL));
  size_t cap = (size_t)r->scratchI;
  if (r->thread == 0) {
    p->maxBytes = o->maxBytes > cap ? cap : o->maxBytes;
    if (o->maxBytes > cap)
      PRINT(r, "#\n# Reducing maxBytes to %zu due to memory limitation\n", cap);
  }
  barrier(r); /* everyone sees p->maxBytes */
  allocBuffers(r);
  if (r->thread == 0) printTableHeader(r);
  barrier(r);

  int ntypes = o->type < 0 ? papcclNumTypes : 1;
  int nops = !p->coll->reduces ? 1 : (o->op < 0 ? PAP_PERF_NUM_OPS : 1);
  int nroots = !p->coll->rooted ? 1 : (o->root < 0 ? p->nranks : 1);
  for (int ti = 0; ti < ntypes; ti++) {
    papcclDataType_t type = o->type < 0 ? (papcclDataType_t)ti : (papcclDataType_t)o->type;
    for (int oi = 0; oi < nops; oi++) {
      int op = !p->coll->reduces ? PAP_PERF_OP_NONE : (o->op < 0 ? oi : o->op);
      for (int ri = 0; ri < nroots; ri++) {
        int root = !p->coll->rooted ? -1 : (o->root < 0 ? ri : o->root);
        timeTest(r, type, op, root);
      }
    }
  }
  r->errors = (int)sumInt(r, r->errors);
  free(r->sendAlloc);
  free(r->recvAlloc);
  free(r->expected);
  free(r->pap);
  if (o->parallelInit) PCHECK(r->comm, papcclCommDestroy(r->comm));
  return NULL;
}

static void* watchdog(void* arg) {
  struct perfProc* p = arg;
  for (;;) {
    usleep(50000);
    double now = papPerfNow();
    for (int t = 0; t < p->o.nThreads; t++) {
      long long s = atomic_load(&p->ranks[t].opStartNs);
      if (s && now - (double)s * 1e-9 > p->o.timeout) {
        atomic_store(&p->timedOut, 1);
        printf("%s: Test timeout (%ds) %s:%d\n", p->host, p->o.timeout, baseName(__FILE__),
               __LINE__);
        fflush(stdout);
        for (int k = 0; k < p->o.nThreads; k++) {
          if (p->ranks[k].comm) papcclCommAbort(p->ranks[k].comm);
        }
        _exit(PAP_PERF_TIMEOUT);
      }
    }
  }
  return NULL;
}

/* ---- Command line ---------------------------------------------------------------------- */

static double parseSize(const char* text) {
  char* end;
  double v = strtod(text, &end);
  if (end == text) return -1.0;
  while (*end == ' ' || *end == '\t')
    end++;
  switch (*end) {
  case '\0':
    return v;
  case 'G':
  case 'g':
    return v * 1024 * 1024 * 1024;
  case 'M':
  case 'm':
    return v * 1024 * 1024;
  case 'K':
  case 'k':
    return v * 1024;
  default:
    return -1.0;
  }
}

static void usage(const char* prog) {
  printf(
      "USAGE: %s \n"
      "\t[-t,--nthreads <num threads>] \n"
      "\t[-g,--ngpus <gpus per thread>] (must be 1: buffers are host memory)\n"
      "\t[-b,--minbytes <min size in bytes>] \n"
      "\t[-e,--maxbytes <max size in bytes>] \n"
      "\t[-i,--stepbytes <increment size>] \n"
      "\t[-f,--stepfactor <increment factor>] \n"
      "\t[-n,--iters <iteration count>] \n"
      "\t[-m,--agg_iters <aggregated iteration count>] \n"
      "\t[-w,--warmup_iters <warmup iteration count>] \n"
      "\t[-N,--run_cycles <cycle count> run & print each cycle (default: 1; 0=infinite)] \n"
      "\t[-p,--parallel_init <0/1>] \n"
      "\t[-c,--check <check iteration count>] \n"
      "\t[-o,--op <sum/prod/min/max/avg/mulsum/all>] \n"
      "\t[-d,--datatype <int8/uint8/int32/uint32/int64/uint64/half/float/double/bfloat16/"
      "f8e4m3/f8e5m2/all>] \n"
      "\t[-r,--root <root>] \n"
      "\t[-z,--blocking <0/1/2/3>] \n"
      "\t[-y,--stream_null <0/1>] (ignored: host buffers need no stream)\n"
      "\t[-T,--timeout <time in seconds>] \n"
      "\t[-G,--cudagraph <num graph launches>] (ignored: no CUDA graphs on host buffers)\n"
      "\t[-C,--report_cputime <0/1>] \n"
      "\t[-S,--report_timestamps <0/1> report timestamps (default 0)] \n"
      "\t[-a,--average <0/1/2/3> report average iteration time <0=RANK0/1=AVG/2=MIN/3=MAX>] \n"
      "\t[-R,--local_register <0/1/2>] (ignored)\n"
      "\t[-x,--cta_policy <0/1/2>] (passed in the config, no effect on host buffers)\n"
      "\t[-J,--output_file,--json <file>] write every cell and its parameters as JSON\n"
      "\t[-u,--unalign <num elements>] \n"
      "\t[-h,--help]\n"
      "papccl extensions (process arrival patterns):\n"
      "\t[--arrival <balanced|late|late:R|late-k:K|staircase|uniform|normal|trace:FILE>]\n"
      "\t    which ranks arrive late at each timed call (after a barrier):\n"
      "\t    late:R: rank R (late: the last rank) waits --skew us before each call;\n"
      "\t    late-k:K: the last K ranks wait --skew us; staircase: rank r waits\n"
      "\t    r*skew/(nranks-1) us; uniform: U[0,skew] per rank and call; normal:\n"
      "\t    N(skew/2, skew/6) clipped to [0,skew]; trace:FILE: one line per call of\n"
      "\t    per-rank offsets in us (calls cycle through the lines). Adds the columns\n"
      "\t    tail (last completion - last arrival), inColl (mean time in the call) and\n"
      "\t    skew (last - first arrival), medians over the timed calls. The time column is\n"
      "\t    then each rank's time inside the call (injected delay excluded), reduced per -a.\n"
      "\t[--skew <usec>] the delay for --arrival (default 0: no delay; alone: late)\n",
      prog);
}

static int parseType(const char* s) {
  if (strcmp(s, "all") == 0) return -1;
  for (int t = 0; t < papcclNumTypes; t++) {
    if (strcmp(s, papPerfTypeName((papcclDataType_t)t)) == 0) return t;
  }
  printf("invalid type %s, defaulting to %s .. \n", s, papPerfTypeName(papcclFloat32));
  return papcclFloat32;
}

static int parseOp(const char* s) {
  if (strcmp(s, "all") == 0) return -1;
  for (int op = 0; op < PAP_PERF_NUM_OPS; op++) {
    if (strcmp(s, papPerfOpName(op)) == 0) return op;
  }
  printf("invalid op %s, defaulting to %s .. \n", s, papPerfOpName(papcclSum));
  return papcclSum;
}

/* Returns -1 to go on, otherwise the exit code. */
static int parseArgs(int argc, char** argv, struct perfOpts* o) {
  enum {
    OPT_ARRIVAL = 256,
    OPT_SKEW
  };
  static const struct option longopts[] = {{"nthreads", required_argument, 0, 't'},
                                           {"ngpus", required_argument, 0, 'g'},
                                           {"minbytes", required_argument, 0, 'b'},
                                           {"maxbytes", required_argument, 0, 'e'},
                                           {"stepbytes", required_argument, 0, 'i'},
                                           {"stepfactor", required_argument, 0, 'f'},
                                           {"iters", required_argument, 0, 'n'},
                                           {"agg_iters", required_argument, 0, 'm'},
                                           {"warmup_iters", required_argument, 0, 'w'},
                                           {"run_cycles", required_argument, 0, 'N'},
                                           {"parallel_init", required_argument, 0, 'p'},
                                           {"check", required_argument, 0, 'c'},
                                           {"op", required_argument, 0, 'o'},
                                           {"datatype", required_argument, 0, 'd'},
                                           {"root", required_argument, 0, 'r'},
                                           {"blocking", required_argument, 0, 'z'},
                                           {"stream_null", required_argument, 0, 'y'},
                                           {"timeout", required_argument, 0, 'T'},
                                           {"cudagraph", required_argument, 0, 'G'},
                                           {"report_cputime", required_argument, 0, 'C'},
                                           {"report_timestamps", required_argument, 0, 'S'},
                                           {"output_file", required_argument, 0, 'J'},
                                           {"json", required_argument, 0, 'J'},
                                           {"average", required_argument, 0, 'a'},
                                           {"local_register", required_argument, 0, 'R'},
                                           {"cta_policy", required_argument, 0, 'x'},
                                           {"device_implementation", required_argument, 0, 'D'},
                                           {"device_cta_count", required_argument, 0, 'V'},
                                           {"memory", required_argument, 0, 'M'},
                                           {"unalign", required_argument, 0, 'u'},
                                           {"per_iter_timing", required_argument, 0, 'I'},
                                           {"per_iter_skip", required_argument, 0, 'K'},
                                           {"help", no_argument, 0, 'h'},
                                           {"arrival", required_argument, 0, OPT_ARRIVAL},
                                           {"skew", required_argument, 0, OPT_SKEW},
                                           {0, 0, 0, 0}};
  const char* prog = baseName(argv[0]);
  double parsed;
  char errText[256];
  for (;;) {
    int idx, c = getopt_long(
                 argc, argv,
                 "t:g:b:e:i:f:n:m:w:N:p:I:K:c:o:d:r:z:y:T:hG:C:a:R:x:D:V:J:S:M:u:", longopts, &idx);
    if (c == -1) break;
    switch (c) {
    case 't':
      o->nThreads = (int)strtol(optarg, NULL, 0);
      break;
    case 'g':
      o->nGpus = (int)strtol(optarg, NULL, 0);
      break;
    case 'b':
    case 'e':
      parsed = parseSize(optarg);
      if (parsed < 0) {
        fprintf(stderr, "invalid size specified for '%s'\n", c == 'b' ? "minbytes" : "maxbytes");
        return PAP_PERF_BAD_SIZE;
      }
      *(c == 'b' ? &o->minBytes : &o->maxBytes) = (size_t)parsed;
      break;
    case 'i':
      o->stepBytes = (size_t)strtol(optarg, NULL, 0);
      break;
    case 'f':
      o->stepFactor = (size_t)strtol(optarg, NULL, 0);
      break;
    case 'n':
      o->iters = (int)strtol(optarg, NULL, 0);
      break;
    case 'm':
      o->aggIters = (int)strtol(optarg, NULL, 0);
      break;
    case 'w':
      o->warmupIters = (int)strtol(optarg, NULL, 0);
      break;
    case 'N':
      o->runCycles = (int)strtol(optarg, NULL, 0);
      break;
    case 'p':
      o->parallelInit = (int)strtol(optarg, NULL, 0);
      break;
    case 'c':
      o->check = (int)strtol(optarg, NULL, 0);
      break;
    case 'o':
      o->op = parseOp(optarg);
      break;
    case 'd':
      o->type = parseType(optarg);
      break;
    case 'r':
      o->root = (int)strtol(optarg, NULL, 0);
      break;
    case 'z':
      o->blocking = (int)strtol(optarg, NULL, 0);
      break;
    case 'y':
      o->streamNull = (int)strtol(optarg, NULL, 0);
      break;
    case 'T':
      o->timeout = (int)strtol(optarg, NULL, 0);
      break;
    case 'G':
      o->graph = (int)strtol(optarg, NULL, 0);
      break;
    case 'C':
      o->reportCpu = (int)strtol(optarg, NULL, 0);
      break;
    case 'S':
      o->reportTs = (int)strtol(optarg, NULL, 0);
      break;
    case 'J':
      o->jsonPath = optarg;
      break;
    case 'a':
      o->average = (int)strtol(optarg, NULL, 0);
      break;
    case 'R':
      o->localRegister = (int)strtol(optarg, NULL, 0);
      break;
    case 'x':
      o->ctaPolicy = (int)strtol(optarg, NULL, 0);
      break;
    case 'D':
      o->devImpl = (int)strtol(optarg, NULL, 0);
      break;
    case 'V':
      o->devCtas = (int)strtol(optarg, NULL, 0);
      break;
    case 'M':
      o->memReport = (int)strtol(optarg, NULL, 0);
      break;
    case 'u':
      o->unalign = (int)strtol(optarg, NULL, 0);
      break;
    case 'I':
      o->perIter = (int)strtol(optarg, NULL, 0);
      break;
    case 'K':
      o->perIterSkip = (int)strtol(optarg, NULL, 0);
      break;
    case OPT_ARRIVAL:
      if (papPerfArrivalParse(optarg, &o->arrival, errText, sizeof(errText)) != 0) {
        fprintf(stderr, "invalid --arrival: %s\n", errText);
        return PAP_PERF_INVALID_USAGE;
      }
      o->arrivalSet = 1;
      break;
    case OPT_SKEW:
      o->arrival.skewUs = strtod(optarg, NULL);
      break;
    case 'h':
    default:
      if (c != 'h') printf("invalid option '%c'\n", c);
      usage(prog);
      return PAP_PERF_OK;
    }
  }
  if (o->minBytes > o->maxBytes) {
    fprintf(stderr, "invalid sizes for 'minbytes' and 'maxbytes': %llu > %llu\n",
            (unsigned long long)o->minBytes, (unsigned long long)o->maxBytes);
    return PAP_PERF_BAD_SIZE;
  }
  if (o->arrival.skewUs > 0 && !o->arrivalSet) o->arrival.kind = PAP_PERF_ARRIVAL_LATE;
  if (o->devImpl > 0) {
    fprintf(stderr, "-D needs the NCCL device API, which papccl does not provide\n");
    return PAP_PERF_BAD_SIZE;
  }
  if (o->nThreads < 1 || o->nThreads > PERF_MAX_THREADS || o->iters < 1 || o->aggIters < 1 ||
      o->warmupIters < 0 || o->check < 0 || o->unalign < 0 || o->runCycles < 0) {
    fprintf(stderr, "invalid -t/-n/-m/-w/-c/-u/-N value\n");
    return PAP_PERF_INVALID_USAGE;
  }
  return -1;
}

/* ---- Main ------------------------------------------------------------------------------- */

int papPerfMain(int argc, char** argv, const struct papPerfColl* coll) {
  static struct perfProc proc;
  struct perfProc* p = &proc;
  struct perfOpts* o = &p->o;
  setlinebuf(stdout);
  p->corrupt = envInt("PAPCCL_PERF_CORRUPT", 0) != 0;
  *o = (struct perfOpts){.nThreads = 1,
                         .nGpus = 1,
                         .minBytes = 32 << 20,
                         .maxBytes = 32 << 20,
                         .stepBytes = 1 << 20,
                         .stepFactor = 1,
                         .iters = 20,
                         .aggIters = 1,
                         .warmupIters = 1,
                         .runCycles = 1,
                         .check = 1,
                         .op = papcclSum,
                         .type = papcclFloat32,
                         .root = 0,
                         .average = 1,
                         .ctaPolicy = -1,
                         .devCtas = 16,
                         .arrival = {PAP_PERF_ARRIVAL_BALANCED, -1, 0.0}};
  int rc = parseArgs(argc, argv, o);
  if (rc >= 0) return rc;
  p->coll = coll;
  p->progName = baseName(argv[0]);
  gProc = p;
  if (gethostname(p->host, sizeof(p->host)) != 0) snprintf(p->host, sizeof(p->host), "unknown");
  p->host[sizeof(p->host) - 1] = '\0';
  char* dot = strchr(p->host, '.');
  if (dot) *dot = '\0';
  if (papPerfProcSetup(&p->proc, &p->nprocs, &p->localRank) != 0) return PAP_PERF_INVALID_USAGE;
  p->nranks = p->nprocs * o->nThreads;
  if (o->arrival.kind == PAP_PERF_ARRIVAL_LATE && o->arrival.lateRank >= p->nranks) {
    fprintf(stderr, "--arrival late:%d: there are only %d ranks\n", o->arrival.lateRank, p->nranks);
    return PAP_PERF_INVALID_USAGE;
  }
  PCHECK(NULL, papcclGetVersion(&p->version));

  struct perfRank pr0 = {.p = p, .thread = 0};
  struct perfRank* r0 = &pr0; /* prints for this process until the real ranks exist */
  if (o->jsonPath && p->proc == 0) jsonBegin(p, argc, argv);
  PRINT(r0, "# nccl-tests version %s nccl-headers=%d nccl-library=%d\n", PERF_TESTS_VERSION,
        PAPCCL_VERSION_CODE, p->version);
  PRINT(r0, "# papccl perf driver: buffers in host memory, times from the host clock\n");
  PRINT(r0, "# Collective test starting: %s\n", p->progName);
  PRINT(r0,
        "# nThread %d nGpus %d minBytes %zu maxBytes %zu step: %zu(%s) warmup iters: %d iters: %d "
        "agg iters: %d validation: %d graph: %d unalign: %d\n",
        o->nThreads, o->nGpus, o->minBytes, o->maxBytes,
        o->stepFactor > 1 ? o->stepFactor : o->stepBytes, o->stepFactor > 1 ? "factor" : "bytes",
        o->warmupIters, o->iters, o->aggIters, o->check, 0, o->unalign);
  if (o->blocking == 1)
    PRINT(r0, "# Blocking Enabled: wait for completion and barrier after each collective \n");
  if (o->blocking > 1)
    PRINT(r0, "# Blocking Enabled: wait for completion after each collective (no barrier) \n");
  if (o->parallelInit)
    PRINT(r0, "# Parallel Init Enabled: threads call into NcclInitRank concurrently \n");
  if (o->graph > 0) PRINT(r0, "# -G %d ignored: no CUDA graphs with host buffers\n", o->graph);
  if (o->perIter) PRINT(r0, "# -I ignored: per-iteration timing is not implemented\n");
  if (arrivalMode(o)) {
    char desc[160];
    papPerfArrivalDescribe(&o->arrival, p->nranks, desc, sizeof(desc));
    PRINT(r0, "# Arrival pattern: %s before each timed call; time = time inside the call\n", desc);
    PRINT(r0,
          "# tail = last completion - last arrival, inColl = mean time in the call over ranks, "
          "skew = last arrival - first arrival: medians over the timed calls\n");
  }
  PRINT(r0, "#\n");
  if (p->json && p->proc == 0) {
    jsonKey(p, "config");
    jsonOpen(p, '{');
    const char* keys[] = {"nthreads", "ngpus", "minimum_bytes", "maximum_bytes"};
    long long vals[] = {o->nThreads, o->nGpus, (long long)o->minBytes, (long long)o->maxBytes};
    for (int i = 0; i < 4; i++)
      jsonKey(p, keys[i]), jsonLong(p, vals[i]);
    jsonKey(p, o->stepFactor > 1 ? "step_factor" : "step_bytes");
    jsonLong(p, (long long)(o->stepFactor > 1 ? o->stepFactor : o->stepBytes));
    const char* k2[] = {"warmup_iters", "iterations", "aggregated_iterations", "validation",
                        "graph"};
    long long v2[] = {o->warmupIters, o->iters, o->aggIters, o->check, 0};
    for (int i = 0; i < 5; i++)
      jsonKey(p, k2[i]), jsonLong(p, v2[i]);
    jsonKey(p, "blocking_collectives");
    jsonStr(p, o->blocking ? "true" : "false");
    jsonKey(p, "per_iter_timing");
    jsonStr(p, "false");
    jsonKey(p, "per_iter_skip");
    jsonLong(p, o->perIterSkip);
    jsonKey(p, "parallel_init");
    jsonStr(p, o->parallelInit ? "true" : "false");
  }
  PRINT(r0, "# Using devices\n");
  if (o->nGpus != 1) {
    fprintf(stderr, "Invalid number of GPUs: %d requested but only %d were found.\n",
            o->nThreads * o->nGpus, o->nThreads);
    fprintf(stderr, "Please check the number of processes and GPUs per process.\n");
    fprintf(stderr, "(papccl perf drivers use host memory: one rank per thread, -g must be 1)\n");
    return PAP_PERF_NOT_IMPLEMENTED;
  }

  PCHECK(NULL, papcclGetUniqueId(&p->id));
  p->ranks = calloc((size_t)o->nThreads, sizeof(*p->ranks));
  if (!p->ranks) return PAP_PERF_INTERNAL;
  for (int t = 0; t < o->nThreads; t++) {
    p->ranks[t].p = p;
    p->ranks[t].thread = t;
    p->ranks[t].rank = p->proc * o->nThreads + t;
  }
  pthread_t wd;
  if (o->timeout > 0 && pthread_create(&wd, NULL, watchdog, p) == 0) pthread_detach(wd);
  if (!o->parallelInit) {
    papcclConfig_t cfg = PAPCCL_CONFIG_INITIALIZER;
    if (o->ctaPolicy >= 0) cfg.CTAPolicy = o->ctaPolicy;
    PCHECK(NULL, papcclGroupStart());
    for (int t = 0; t < o->nThreads; t++) {
      PCHECK(NULL,
             papcclCommInitRankConfig(&p->ranks[t].comm, p->nranks, p->id, p->ranks[t].rank, &cfg));
    }
    PCHECK(NULL, papcclGroupEnd());
  }
  for (int t = 1; t < o->nThreads; t++) {
    if (pthread_create(&p->ranks[t].tid, NULL, rankMain, &p->ranks[t]) != 0) {
      fprintf(stderr, "%s: cannot create thread %d\n", p->host, t);
      _exit(PAP_PERF_INTERNAL);
    }
  }
  rankMain(&p->ranks[0]);
  double bwSum = p->ranks[0].bwSum;
  int bwCount = p->ranks[0].bwCount;
  for (int t = 1; t < o->nThreads; t++) {
    pthread_join(p->ranks[t].tid, NULL);
    bwSum += p->ranks[t].bwSum;
    bwCount += p->ranks[t].bwCount;
  }
  p->errors = p->ranks[0].errors; /* already summed over every rank */
  if (!o->parallelInit) {
    for (int t = 0; t < o->nThreads; t++)
      PCHECK(p->ranks[t].comm, papcclCommDestroy(p->ranks[t].comm));
  }

  const char* minBwEnv = getenv("NCCL_TESTS_MIN_BW");
  double minBw = minBwEnv ? atof(minBwEnv) : -1;
  double avgBw = bwCount ? bwSum / bwCount : 0;
  int bwFail = minBw != -1 && avgBw < minBw * 0.9;
  const char* lastErr = papcclGetLastError(NULL);
  struct perfRank* pr = &p->ranks[0];
  if (isPrinter(pr)) jsonClose(p, ']'); /* results */
  PRINT(pr, "# %-20s : %d %s\n", "Out of bounds values", p->errors, p->errors ? "FAILED" : "OK");
  PRINT(pr, "# %-20s : %g %s\n", "Avg bus bandwidth", avgBw,
        minBw == -1 ? "" : (bwFail ? "FAILED" : "OK"));
  PRINT(pr, "#\n");
  PRINT(pr, "# Collective test concluded: %s\n", p->progName);
  PRINT(pr, "#\n");
  if (lastErr && *lastErr)
    PRINT(pr, "# error: %s\n", lastErr);
  else
    PRINT(pr, "\n");
  if (p->json && isPrinter(pr)) {
    jsonKey(p, "out_of_bounds");
    jsonOpen(p, '{');
    jsonKey(p, "count");
    jsonLong(p, p->errors);
    jsonKey(p, "okay");
    jsonStr(p, p->errors ? "false" : "true");
    jsonClose(p, '}');
    jsonKey(p, "average_bus_bandwidth");
    jsonOpen(p, '{');
    jsonKey(p, "bandwidth");
    jsonDouble(p, avgBw);
    jsonKey(p, "okay");
    jsonStr(p, minBw == -1 ? "unchecked" : (bwFail ? "false" : "true"));
    jsonClose(p, '}');
    jsonKey(p, "errors");
    jsonOpen(p, '[');
    if (lastErr && *lastErr) jsonStr(p, lastErr);
    jsonClose(p, ']');
    jsonKey(p, "end_time");
    jsonNow(p);
    jsonClose(p, '}');
    fputc('\n', p->json);
    fclose(p->json);
  }
  free(p->ranks);
  return (p->errors || bwFail) ? PAP_PERF_WRONG : PAP_PERF_OK;
}
