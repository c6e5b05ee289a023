/* SPDX-License-Identifier: Apache-2.0 */
/* papccl perf driver: nccl-tests compatible binaries on one driver. This file: ranks from a
 * launcher, failures, per-rank setup, the watchdog and main; the command line is in cli.c,
 * the timing loop and the table in timing.c, the JSON output in json.c. */
#include "rankenv.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "driver.h"

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

static struct perfProc* gProc; /* for the failure and timeout paths */

void papPerfFailPapccl(papcclComm_t comm, const char* file, int line, papcclResult_t res) {
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
  papPerfMarkBegin(r);
  PCHECK(r->comm, papcclAllGather(&mine, all, sizeof(mine), papcclUint8, r->comm, NULL));
  papPerfMarkEnd(r);
  if (isPrinter(r)) {
    papPerfJsonKey(p, "devices");
    papPerfJsonOpen(p, '[');
    for (int i = 0; i < p->nranks; i++) {
      printf("#  Rank %2d Group %2d Pid %6d on %10s device %2d [host] host memory (no GPU)\n",
             all[i].rank, 0, all[i].pid, all[i].host, -1);
      papPerfJsonOpen(p, '{');
      papPerfJsonKey(p, "rank");
      papPerfJsonLong(p, all[i].rank);
      papPerfJsonKey(p, "group");
      papPerfJsonLong(p, 0);
      papPerfJsonKey(p, "pid");
      papPerfJsonLong(p, all[i].pid);
      papPerfJsonKey(p, "hostname");
      papPerfJsonStr(p, all[i].host);
      papPerfJsonKey(p, "device");
      papPerfJsonLong(p, -1);
      papPerfJsonKey(p, "device_hex");
      papPerfJsonStr(p, "host");
      papPerfJsonKey(p, "device_info");
      papPerfJsonStr(p, "host memory (no GPU)");
      papPerfJsonClose(p, '}');
    }
    papPerfJsonClose(p, ']');
    papPerfJsonClose(p, '}'); /* config */
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
    papPerfSetupSize(r, p->maxBytes, (papcclDataType_t)t);
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
  papPerfBarrier(r); /* everyone sees p->maxBytes */
  allocBuffers(r);
  if (r->thread == 0) papPerfPrintTableHeader(r);
  papPerfBarrier(r);

  int ntypes = o->type < 0 ? papcclNumTypes : 1;
  int nops = !p->coll->reduces ? 1 : (o->op < 0 ? PAP_PERF_NUM_OPS : 1);
  int nroots = !p->coll->rooted ? 1 : (o->root < 0 ? p->nranks : 1);
  for (int ti = 0; ti < ntypes; ti++) {
    papcclDataType_t type = o->type < 0 ? (papcclDataType_t)ti : (papcclDataType_t)o->type;
    for (int oi = 0; oi < nops; oi++) {
      int op = !p->coll->reduces ? PAP_PERF_OP_NONE : (o->op < 0 ? oi : o->op);
      for (int ri = 0; ri < nroots; ri++) {
        int root = !p->coll->rooted ? -1 : (o->root < 0 ? ri : o->root);
        papPerfTimeTest(r, type, op, root);
      }
    }
  }
  r->errors = (int)papPerfSumInt(r, r->errors);
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
  int rc = papPerfParseArgs(argc, argv, o);
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
  if (o->jsonPath && p->proc == 0) papPerfJsonBegin(p, argc, argv);
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
    papPerfJsonKey(p, "config");
    papPerfJsonOpen(p, '{');
    const char* keys[] = {"nthreads", "ngpus", "minimum_bytes", "maximum_bytes"};
    long long vals[] = {o->nThreads, o->nGpus, (long long)o->minBytes, (long long)o->maxBytes};
    for (int i = 0; i < 4; i++)
      papPerfJsonKey(p, keys[i]), papPerfJsonLong(p, vals[i]);
    papPerfJsonKey(p, o->stepFactor > 1 ? "step_factor" : "step_bytes");
    papPerfJsonLong(p, (long long)(o->stepFactor > 1 ? o->stepFactor : o->stepBytes));
    const char* k2[] = {"warmup_iters", "iterations", "aggregated_iterations", "validation",
                        "graph"};
    long long v2[] = {o->warmupIters, o->iters, o->aggIters, o->check, 0};
    for (int i = 0; i < 5; i++)
      papPerfJsonKey(p, k2[i]), papPerfJsonLong(p, v2[i]);
    papPerfJsonKey(p, "blocking_collectives");
    papPerfJsonStr(p, o->blocking ? "true" : "false");
    papPerfJsonKey(p, "per_iter_timing");
    papPerfJsonStr(p, "false");
    papPerfJsonKey(p, "per_iter_skip");
    papPerfJsonLong(p, o->perIterSkip);
    papPerfJsonKey(p, "parallel_init");
    papPerfJsonStr(p, o->parallelInit ? "true" : "false");
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
  if (isPrinter(pr)) papPerfJsonClose(p, ']'); /* results */
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
    papPerfJsonKey(p, "out_of_bounds");
    papPerfJsonOpen(p, '{');
    papPerfJsonKey(p, "count");
    papPerfJsonLong(p, p->errors);
    papPerfJsonKey(p, "okay");
    papPerfJsonStr(p, p->errors ? "false" : "true");
    papPerfJsonClose(p, '}');
    papPerfJsonKey(p, "average_bus_bandwidth");
    papPerfJsonOpen(p, '{');
    papPerfJsonKey(p, "bandwidth");
    papPerfJsonDouble(p, avgBw);
    papPerfJsonKey(p, "okay");
    papPerfJsonStr(p, minBw == -1 ? "unchecked" : (bwFail ? "false" : "true"));
    papPerfJsonClose(p, '}');
    papPerfJsonKey(p, "errors");
    papPerfJsonOpen(p, '[');
    if (lastErr && *lastErr) papPerfJsonStr(p, lastErr);
    papPerfJsonClose(p, ']');
    papPerfJsonKey(p, "end_time");
    papPerfJsonNow(p);
    papPerfJsonClose(p, '}');
    fputc('\n', p->json);
    fclose(p->json);
  }
  free(p->ranks);
  return (p->errors || bwFail) ? PAP_PERF_WRONG : PAP_PERF_OK;
}
