/* SPDX-License-Identifier: Apache-2.0 */
/* A program written against nccl.h the way NCCL users write one: it knows nothing of
 * papccl. The tests compile it against NVIDIA's nccl.h, link it against NVIDIA's
 * libnccl.so.2, and run it on papccl's libnccl.so.2 (LD_LIBRARY_PATH or LD_PRELOAD); it is
 * also built against papccl's own nccl.h. Buffers are host memory (papccl's extension), so
 * it runs without a GPU.
 *
 * usage: nccl_program [NRANKS]   (default 4)
 * Part 1: NRANKS processes (rank 0 makes the id and sends it to the others, as an MPI
 *         program broadcasts it): every collective, groups, send/recv, PreMulSum, split, abort, the
 *         functions papccl refuses, error reporting.
 * Part 2: NRANKS ranks driven from one thread, as nccl-tests and single-process trainers do:
 *         grouped ncclCommInitRank, ncclCommInitAll, grouped collectives over all comms.
 * Part 3: recovery, as a fault-tolerant trainer does it: NRANKS processes meet through
 *         ncclCommInitRankScalable with two ids; the last rank is killed (SIGKILL) after one
 *         allreduce; each survivor's next allreduce fails, they shrink the comm without it
 *         (NCCL_SHRINK_ABORT), run 100 allreduces on the new comm, shrink it once more
 *         (NCCL_SHRINK_DEFAULT, the highest survivor leaving of its own accord) where ranks
 *         are left for it, revoke it and destroy everything.
 * Part 4: NCCL 2.32's host API: the nccl<Coll>Config collectives (algSelection honoured or
 *         refused), ncclCommSuspend, ncclCommResume and ncclCommMemStats, the parameter API, ncclSetEncryption and, where NVIDIA's
 *         nccl_device.h is there, ncclCommQueryProperties.
 * Part 5: growing (NCCL 2.29): ranks 0..NRANKS-2 make a comm, rank 0 makes the grow's id
 *         with ncclCommGetUniqueId and hands it to the last rank (a pipe), which joins with
 *         ncclCommGrow(NULL, NRANKS, &id, NRANKS-1, ...); allreduces on the grown comm.
 * Prints "library: VERSION PATH" first (which libnccl answered) and "PASS" at the end; any
 * failed check prints "FAIL ..." and the exit status is 1. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dlfcn.h>
#include <link.h>
#include <nccl.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static int failures;
static int myRank = -1;

#define CHECK(cond, ...) \
  do { \
    if (!(cond)) { \
      failures++; \
      fprintf(stderr, "FAIL rank %d line %d: %s: ", myRank, __LINE__, #cond); \
      fprintf(stderr, __VA_ARGS__); \
      fprintf(stderr, "\n"); \
    } \
  } while (0)

#define NCCL_OK(call) \
  do { \
    ncclResult_t r_ = (call); \
    CHECK(r_ == ncclSuccess, "%s returned %d (%s): %s", #call, (int)r_, ncclGetErrorString(r_), \
          ncclGetLastError(NULL)); \
  } while (0)

static float* fbuf(size_t n) {
  float* p = (float*)calloc(n ? n : 1, sizeof(float));
  if (p == NULL) {
    fprintf(stderr, "out of memory\n");
    exit(2);
  }
  return p;
}

/* Value of element i contributed by rank r: small integers, exact in float. */
static float val(int r, size_t i) {
  return (float)((r + 1) * 10 + (int)(i % 7));
}

static void collectives(ncclComm_t comm, int n, int r) {
  const size_t count = 1000;
  float* s = fbuf(count * (size_t)n);
  float* d = fbuf(count * (size_t)n);

  /* AllReduce sum, out of place and in place. */
  for (size_t i = 0; i < count; i++)
    s[i] = val(r, i);
  NCCL_OK(ncclAllReduce(s, d, count, ncclFloat, ncclSum, comm, NULL));
  int bad = 0;
  for (size_t i = 0; i < count; i++) {
    float want = 0;
    for (int q = 0; q < n; q++)
      want += val(q, i);
    bad += d[i] != want;
  }
  CHECK(bad == 0, "allreduce sum: %d wrong", bad);
  NCCL_OK(ncclAllReduce(s, s, count, ncclFloat, ncclMax, comm, NULL));
  CHECK(s[3] == val(n - 1, 3), "allreduce max in place: %g", s[3]);

  /* Other types and ops. */
  int32_t iv[4] = {r, -r, r * r, 7};
  NCCL_OK(ncclAllReduce(iv, iv, 4, ncclInt32, ncclMin, comm, NULL));
  CHECK(iv[0] == 0 && iv[1] == -(n - 1) && iv[3] == 7, "int32 min: %d %d", iv[0], iv[1]);
  double dv[2] = {(double)r, 1.0};
  NCCL_OK(ncclAllReduce(dv, dv, 2, ncclDouble, ncclAvg, comm, NULL));
  CHECK(dv[0] == (double)(n - 1) / 2.0 && dv[1] == 1.0, "double avg: %g", dv[0]);
  uint8_t uv[3] = {2, 1, (uint8_t)(r == 0 ? 3 : 1)};
  NCCL_OK(ncclAllReduce(uv, uv, 3, ncclUint8, ncclProd, comm, NULL));
  CHECK(uv[1] == 1 && uv[2] == 3, "uint8 prod: %d %d", uv[1], uv[2]);

  /* Broadcast, Bcast, Reduce. */
  const int root = n - 1;
  for (size_t i = 0; i < count; i++)
    s[i] = val(r, i);
  NCCL_OK(ncclBroadcast(s, d, count, ncclFloat, root, comm, NULL));
  CHECK(d[5] == val(root, 5) && d[count - 1] == val(root, count - 1), "broadcast: %g", d[5]);
  NCCL_OK(ncclBcast(s, count, ncclFloat, 0, comm, NULL));
  CHECK(s[9] == val(0, 9), "bcast: %g", s[9]);
  for (size_t i = 0; i < count; i++)
    s[i] = val(r, i);
  memset(d, 0, count * sizeof(float));
  NCCL_OK(ncclReduce(s, d, count, ncclFloat, ncclSum, root, comm, NULL));
  if (r == root) {
    float want = 0;
    for (int q = 0; q < n; q++)
      want += val(q, 11);
    CHECK(d[11] == want, "reduce at root: %g, want %g", d[11], want);
  }

  /* AllGather, ReduceScatter, AlltoAll, Gather, Scatter. */
  const size_t blk = 100;
  for (size_t i = 0; i < blk; i++)
    s[i] = val(r, i);
  NCCL_OK(ncclAllGather(s, d, blk, ncclFloat, comm, NULL));
  bad = 0;
  for (int q = 0; q < n; q++)
    for (size_t i = 0; i < blk; i++)
      bad += d[(size_t)q * blk + i] != val(q, i);
  CHECK(bad == 0, "allgather: %d wrong", bad);
  for (size_t i = 0; i < blk * (size_t)n; i++)
    s[i] = val(r, i);
  NCCL_OK(ncclReduceScatter(s, d, blk, ncclFloat, ncclSum, comm, NULL));
  bad = 0;
  for (size_t i = 0; i < blk; i++) {
    float want = 0;
    for (int q = 0; q < n; q++)
      want += val(q, (size_t)r * blk + i);
    bad += d[i] != want;
  }
  CHECK(bad == 0, "reducescatter: %d wrong", bad);
  for (int q = 0; q < n; q++)
    for (size_t i = 0; i < blk; i++)
      s[(size_t)q * blk + i] = (float)(r * 1000 + q * 10) + (float)(i % 3);
  NCCL_OK(ncclAlltoAll(s, d, blk, ncclFloat, comm, NULL));
  bad = 0;
  for (int q = 0; q < n; q++)
    for (size_t i = 0; i < blk; i++)
      bad += d[(size_t)q * blk + i] != (float)(q * 1000 + r * 10) + (float)(i % 3);
  CHECK(bad == 0, "alltoall: %d wrong", bad);
  for (size_t i = 0; i < blk; i++)
    s[i] = val(r, i);
  NCCL_OK(ncclGather(s, d, blk, ncclFloat, 0, comm, NULL));
  if (r == 0) CHECK(d[(size_t)(n - 1) * blk + 2] == val(n - 1, 2), "gather");
  for (int q = 0; q < n; q++)
    for (size_t i = 0; i < blk; i++)
      s[(size_t)q * blk + i] = val(q, i) + (float)r * 1000;
  NCCL_OK(ncclScatter(s, d, blk, ncclFloat, root, comm, NULL));
  CHECK(d[4] == val(r, 4) + (float)root * 1000, "scatter: %g", d[4]);

  /* A group of collectives and a ring of send/recv in one group. */
  float a[8], b[8];
  for (int i = 0; i < 8; i++)
    a[i] = (float)(r + i), b[i] = 1.0f;
  NCCL_OK(ncclGroupStart());
  NCCL_OK(ncclAllReduce(a, a, 8, ncclFloat, ncclSum, comm, NULL));
  NCCL_OK(ncclAllReduce(b, b, 8, ncclFloat, ncclSum, comm, NULL));
  NCCL_OK(ncclGroupEnd());
  CHECK(a[0] == (float)(n * (n - 1) / 2) && b[7] == (float)n, "grouped allreduce: %g %g", a[0],
        b[7]);
  int next = (r + 1) % n, prev = (r + n - 1) % n;
  for (size_t i = 0; i < count; i++)
    s[i] = val(r, i);
  NCCL_OK(ncclGroupStart());
  NCCL_OK(ncclSend(s, count, ncclFloat, next, comm, NULL));
  NCCL_OK(ncclRecv(d, count, ncclFloat, prev, comm, NULL));
  NCCL_OK(ncclGroupEnd());
  CHECK(d[0] == val(prev, 0) && d[count - 1] == val(prev, count - 1), "send/recv ring: %g", d[0]);

  /* PreMulSum: sum of 2 * x. */
  float two = 2.0f;
  ncclRedOp_t premul;
  NCCL_OK(ncclRedOpCreatePreMulSum(&premul, &two, ncclFloat, ncclScalarHostImmediate, comm));
  float x = (float)(r + 1);
  NCCL_OK(ncclAllReduce(&x, &x, 1, ncclFloat, premul, comm, NULL));
  CHECK(x == (float)(n * (n + 1)), "premulsum: %g", x);
  NCCL_OK(ncclRedOpDestroy(premul, comm));

  /* Registration (a hint), and count = 0. */
  void* handle = NULL;
  NCCL_OK(ncclCommRegister(comm, s, count * sizeof(float), &handle));
  NCCL_OK(ncclAllReduce(s, d, 0, ncclFloat, ncclSum, comm, NULL));
  NCCL_OK(ncclCommDeregister(comm, handle));
  free(s);
  free(d);
}

static void errors(ncclComm_t comm) {
  /* Bad arguments come back as codes with a message, never a crash. */
  float f = 0;
  ncclResult_t res = ncclAllReduce(&f, &f, 1, ncclFloat, ncclSum, NULL, NULL);
  CHECK(res == ncclInvalidArgument, "allreduce on a NULL comm returned %d", (int)res);
  const char* last = ncclGetLastError(NULL);
  CHECK(last != NULL && last[0] != '\0', "no last error after a bad call");
  res = ncclAllReduce(&f, &f, 1, (ncclDataType_t)99, ncclSum, comm, NULL);
  CHECK(res == ncclInvalidArgument, "bad datatype returned %d", (int)res);
  CHECK(strstr(ncclGetLastError(comm), "datatype") != NULL, "last error: %s",
        ncclGetLastError(comm));
  /* A rank that excludes itself, or bad flags: refused before anything happens. */
  ncclComm_t shrunk = comm;
  int self = -1;
  NCCL_OK(ncclCommUserRank(comm, &self));
  res = ncclCommShrink(comm, &self, 1, &shrunk, NULL, NCCL_SHRINK_DEFAULT);
  CHECK(res == ncclInvalidArgument && shrunk == NULL, "shrink excluding itself returned %d",
        (int)res);
  CHECK(strstr(ncclGetLastError(comm), "excludeRanksList") != NULL, "shrink reason: %s",
        ncclGetLastError(comm));
  res = ncclCommShrink(comm, NULL, 0, &shrunk, NULL, 7);
  CHECK(res == ncclInvalidArgument, "shrink with flags 7 returned %d", (int)res);
  res = ncclCommRevoke(comm, 3);
  CHECK(res == ncclInvalidArgument, "revoke with flags 3 returned %d", (int)res);
  /* What papccl does not implement is refused with ncclInvalidUsage and a reason. */
  ncclWindow_t win;
  res = ncclCommWindowRegister(comm, &f, sizeof(f), &win, NCCL_WIN_COLL_SYMMETRIC);
  CHECK(res == ncclInvalidUsage, "symmetric window register returned %d", (int)res);
  ncclResult_t async = ncclInternalError;
  NCCL_OK(ncclCommGetAsyncError(comm, &async));
  CHECK(async == ncclSuccess, "async error %d", (int)async);
  /* Memory from ncclMemAlloc goes back through ncclMemFree; other pointers are refused. */
  void* mem = NULL;
  NCCL_OK(ncclMemAlloc(&mem, 1 << 16));
  CHECK(mem != NULL, "ncclMemAlloc gave NULL");
  NCCL_OK(ncclMemFree(mem));
  res = ncclMemFree(&f);
  CHECK(res == ncclInvalidArgument, "ncclMemFree of a stack pointer returned %d", (int)res);
}

/* One-sided: every rank puts a block into its successor's window (byte offset r * blk) and
 * signals; then one signal alone to every peer; the waits take them, the data is checked. */
static void oneSided(ncclComm_t comm, int n, int r) {
  const size_t blk = 4099;
  float* w = fbuf(blk * (size_t)n);
  float* s = fbuf(blk);
  ncclWindow_t win = NULL;
  NCCL_OK(ncclCommWindowRegister(comm, w, blk * (size_t)n * sizeof(float), &win, NCCL_WIN_DEFAULT));
  if (win == NULL) return;
  void* user = NULL;
  NCCL_OK(ncclWinGetUserPtr(comm, win, &user));
  CHECK(user == (void*)w, "window user pointer %p, want %p", user, (void*)w);
  for (size_t i = 0; i < blk; i++)
    s[i] = val(r, i);
  int next = (r + 1) % n, prev = (r + n - 1) % n;
  NCCL_OK(ncclPutSignal(s, blk, ncclFloat32, next, win, (size_t)r * blk * sizeof(float), 0, 0, 0,
                        comm, 0));
  ncclWaitSignalDesc_t d = {1, prev, 0, 0};
  NCCL_OK(ncclWaitSignal(1, &d, comm, 0));
  int bad = 0;
  for (size_t i = 0; i < blk; i++)
    bad += w[(size_t)prev * blk + i] != val(prev, i);
  CHECK(bad == 0, "put/signal from rank %d: %d wrong (%g, want %g)", prev, bad,
        w[(size_t)prev * blk], val(prev, 0));
  for (int p = 0; p < n; p++)
    NCCL_OK(ncclSignal(p, 3, 0, 0, comm, 0));
  for (int p = 0; p < n; p++) {
    ncclWaitSignalDesc_t e = {1, p, 3, 0};
    NCCL_OK(ncclWaitSignal(1, &e, comm, 0));
  }
  NCCL_OK(ncclCommWindowDeregister(comm, win));
  free(w);
  free(s);
}

static int runRank(ncclUniqueId id, int n, int r) {
  myRank = r;
  ncclComm_t comm = NULL;
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 1;
  config.commName = "nccl_program";
  /* A config from a newer header: larger, with fields this one does not know. */
  struct {
    ncclConfig_t base;
    int newer[6];
  } bigger = {NCCL_CONFIG_INITIALIZER, {2, 0, 0, 0, 0, 0}};
  bigger.base.size = sizeof(bigger);
  switch (r % 4) {
  case 0:
    NCCL_OK(ncclCommInitRank(&comm, n, id, r));
    break;
  case 1:
    NCCL_OK(ncclCommInitRankConfig(&comm, n, id, r, &config));
    break;
  case 2:
    NCCL_OK(ncclCommInitRankConfig(&comm, n, id, r, &bigger.base));
    break;
  default:
    /* A config from an older header (2.17: fields up to netName). */
    config.size = offsetof(ncclConfig_t, splitShare);
    NCCL_OK(ncclCommInitRankConfig(&comm, n, id, r, &config));
    break;
  }
  if (comm == NULL) return 1;
  int cn = -1, cr = -1;
  NCCL_OK(ncclCommCount(comm, &cn));
  NCCL_OK(ncclCommUserRank(comm, &cr));
  CHECK(cn == n && cr == r, "count %d rank %d", cn, cr);

  collectives(comm, n, r);
  oneSided(comm, n, r);
  errors(comm);

  /* Split: even and odd ranks; the last rank opts out with NCCL_SPLIT_NOCOLOR. */
  ncclComm_t sub = NULL;
  int color = r == n - 1 && n > 2 ? NCCL_SPLIT_NOCOLOR : r % 2;
  NCCL_OK(ncclCommSplit(comm, color, -r, &sub, NULL));
  if (color == NCCL_SPLIT_NOCOLOR) {
    CHECK(sub == NULL, "NOCOLOR gave a communicator");
  } else if (sub != NULL) {
    int sn = 0, sr = -1;
    NCCL_OK(ncclCommCount(sub, &sn));
    NCCL_OK(ncclCommUserRank(sub, &sr));
    int members = 0;
    for (int q = 0; q < n; q++)
      members += (q % 2 == color) && !(q == n - 1 && n > 2);
    CHECK(sn == members, "split size %d, want %d", sn, members);
    float v = (float)r;
    NCCL_OK(ncclAllReduce(&v, &v, 1, ncclFloat, ncclSum, sub, NULL));
    float want = 0;
    for (int q = 0; q < n; q++)
      if ((q % 2 == color) && !(q == n - 1 && n > 2)) want += (float)q;
    CHECK(v == want, "split allreduce %g, want %g", v, want);
    /* The sub-communicator is aborted, not destroyed. */
    NCCL_OK(ncclCommAbort(sub));
  } else {
    CHECK(0, "split gave no communicator");
  }
  NCCL_OK(ncclCommFinalize(comm));
  NCCL_OK(ncclCommDestroy(comm));
  return failures ? 1 : 0;
}

/* Part 3 in one rank (see the top). */
static int recoveryRank(ncclUniqueId* ids, int n, int r) {
  myRank = r;
  ncclComm_t comm = NULL;
  NCCL_OK(ncclCommInitRankScalable(&comm, n, r, 2, ids, NULL));
  if (comm == NULL) return 1;
  float v = 1;
  NCCL_OK(ncclAllReduce(&v, &v, 1, ncclFloat, ncclSum, comm, NULL));
  CHECK(v == (float)n, "allreduce %g, want %d", v, n);
  int dead = n - 1;
  if (r == dead) raise(SIGKILL);
  const size_t count = 1 << 16;
  float* buf = fbuf(count);
  ncclResult_t res = ncclAllReduce(buf, buf, count, ncclFloat, ncclSum, comm, NULL);
  CHECK(res != ncclSuccess, "an allreduce with a dead rank returned success");
  ncclComm_t shrunk = NULL;
  NCCL_OK(ncclCommShrink(comm, &dead, 1, &shrunk, NULL, NCCL_SHRINK_ABORT));
  if (shrunk == NULL) return 1;
  int sn = -1, sr = -1;
  NCCL_OK(ncclCommCount(shrunk, &sn));
  NCCL_OK(ncclCommUserRank(shrunk, &sr));
  CHECK(sn == n - 1 && sr == r, "shrunk comm: rank %d of %d, want %d of %d", sr, sn, r, n - 1);
  for (int it = 0; it < 100 && failures == 0; it++) {
    size_t c = it % 2 ? count : 3;
    for (size_t i = 0; i < c; i++)
      buf[i] = (float)(r + 1 + it);
    NCCL_OK(ncclAllReduce(buf, buf, c, ncclFloat, ncclSum, shrunk, NULL));
    float want = (float)((n - 1) * n / 2 + (n - 1) * it);
    int bad = 0;
    for (size_t i = 0; i < c; i++)
      bad += buf[i] != want;
    CHECK(bad == 0, "allreduce %d of %zu on the shrunk comm: %d wrong (%g, want %g)", it, c, bad,
          buf[0], want);
  }
  ncclComm_t again = NULL;
  if (n - 1 >= 2) {
    int leaver = n - 2;
    if (r != leaver) {
      NCCL_OK(ncclCommShrink(shrunk, &leaver, 1, &again, NULL, NCCL_SHRINK_DEFAULT));
      v = 1;
      if (again) NCCL_OK(ncclAllReduce(&v, &v, 1, ncclFloat, ncclSum, again, NULL));
      CHECK(again != NULL && v == (float)(n - 2), "second shrink: allreduce %g, want %d", v, n - 2);
      NCCL_OK(ncclCommDestroy(again));
    }
  }
  /* Revoke: later operations are refused, the comm reports success once quiet. */
  NCCL_OK(ncclCommRevoke(shrunk, NCCL_REVOKE_DEFAULT));
  ncclResult_t async = ncclInternalError;
  NCCL_OK(ncclCommGetAsyncError(shrunk, &async));
  CHECK(async == ncclSuccess, "revoked comm: async error %d", (int)async);
  res = ncclAllReduce(buf, buf, 1, ncclFloat, ncclSum, shrunk, NULL);
  CHECK(res == ncclInvalidUsage, "allreduce on a revoked comm returned %d", (int)res);
  NCCL_OK(ncclCommDestroy(shrunk));
  NCCL_OK(ncclCommDestroy(comm));
  free(buf);
  return failures ? 1 : 0;
}

/* Starts ranks 1..n-1 as children, makes nid ids here, sends them to the children, runs
 * rank 0 here (a fork after the library has started threads is not safe, so the ids are
 * made after the forks and travel through pipes, as an MPI program broadcasts them). Returns
 * 0 when every rank returned 0, or died of SIGKILL where killed says so. */
static int forkRanks(int n, int nid, int killed, int (*body)(ncclUniqueId*, int, int)) {
  pid_t* kids = (pid_t*)calloc((size_t)n, sizeof(pid_t));
  int(*pipes)[2] = calloc((size_t)n, sizeof(*pipes));
  ncclUniqueId ids[2];
  size_t idBytes = (size_t)nid * sizeof(ncclUniqueId);
  for (int r = 1; r < n; r++) {
    if (pipe(pipes[r]) != 0) {
      perror("pipe");
      return 2;
    }
    kids[r] = fork();
    if (kids[r] < 0) {
      perror("fork");
      return 2;
    }
    if (kids[r] == 0) {
      close(pipes[r][1]);
      size_t got = 0;
      while (got < idBytes) {
        ssize_t k = read(pipes[r][0], (char*)ids + got, idBytes - got);
        if (k <= 0) _exit(3); /* rank 0 failed before sending them */
        got += (size_t)k;
      }
      _exit(body(ids, n, r));
    }
    close(pipes[r][0]);
  }
  for (int i = 0; i < nid; i++)
    NCCL_OK(ncclGetUniqueId(&ids[i]));
  for (int r = 1; r < n; r++) {
    if (failures == 0 && write(pipes[r][1], ids, idBytes) != (ssize_t)idBytes) failures++;
    close(pipes[r][1]);
  }
  free(pipes);
  int bad = failures ? 1 : body(ids, n, 0);
  for (int r = 1; r < n; r++) {
    int status = 0;
    waitpid(kids[r], &status, 0);
    if (r == killed ? !(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL)
                    : !(WIFEXITED(status) && WEXITSTATUS(status) == 0)) {
      fprintf(stderr, "FAIL rank %d ended with status %#x\n", r, status);
      bad = 1;
    }
  }
  free(kids);
  return bad;
}

static int partOneRank(ncclUniqueId* ids, int n, int r) {
  return runRank(ids[0], n, r);
}

/* Part 2: all ranks in this process, driven from one thread. */
static int singleThread(int n) {
  myRank = -1;
  ncclComm_t* comms = (ncclComm_t*)calloc((size_t)n, sizeof(*comms));
  float* v = fbuf((size_t)n * 64);
  ncclUniqueId id;
  NCCL_OK(ncclGetUniqueId(&id));
  NCCL_OK(ncclGroupStart());
  for (int i = 0; i < n; i++)
    NCCL_OK(ncclCommInitRank(&comms[i], n, id, i));
  NCCL_OK(ncclGroupEnd());
  for (int round = 0; round < 2 && failures == 0; round++) {
    for (int i = 0; i < n * 64; i++)
      v[i] = (float)(i / 64 + 1);
    NCCL_OK(ncclGroupStart());
    for (int i = 0; i < n; i++)
      NCCL_OK(ncclAllReduce(v + i * 64, v + i * 64, 64, ncclFloat, ncclSum, comms[i], NULL));
    NCCL_OK(ncclGroupEnd());
    int bad = 0;
    for (int i = 0; i < n * 64; i++)
      bad += v[i] != (float)(n * (n + 1) / 2);
    CHECK(bad == 0, "grouped allreduce over %d comms in one thread: %d wrong", n, bad);
    for (int i = 0; i < n; i++)
      NCCL_OK(ncclCommDestroy(comms[i]));
    if (round == 0) NCCL_OK(ncclCommInitAll(comms, n, NULL)); /* and again with InitAll */
  }
  free(v);
  free(comms);
  return failures ? 1 : 0;
}

/* ---- Part 4: NCCL 2.32's host API ---------------------------------------------------------- */

/* NVIDIA's 2.32 header (papccl's claims 2.27.7 and has no nccl_device.h of its own). */
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 32, 0) && __has_include(<nccl_device.h>)
#include <nccl_device.h>
#define HAVE_NCCL_DEVICE_H 1
#endif

/* An allreduce through ncclAllReduceConfig with selection sel (NULL: no config at all):
 * its result checked, or the error it must give. */
static void configAllReduce(ncclComm_t comm, int n, int r, const char* sel, int force,
                            ncclResult_t want) {
  const size_t count = 300;
  float* s = fbuf(count);
  float* d = fbuf(count);
  for (size_t i = 0; i < count; i++)
    s[i] = val(r, i);
  ncclCollConfig_t c = NCCL_COLLCONFIG_INITIALIZER;
  c.algSelection = sel;
  c.forceAlgSelection = force;
  ncclResult_t res = ncclAllReduceConfig(s, d, count, ncclFloat, ncclSum, comm, NULL, &c);
  CHECK(res == want, "ncclAllReduceConfig(algSelection \"%s\", force %d) returned %d, want %d: %s",
        sel ? sel : "(null)", force, (int)res, (int)want, ncclGetLastError(comm));
  int bad = 0;
  for (size_t i = 0; res == ncclSuccess && i < count; i++) {
    float w = 0;
    for (int q = 0; q < n; q++)
      w += val(q, i);
    bad += d[i] != w;
  }
  CHECK(bad == 0, "ncclAllReduceConfig(\"%s\"): %d wrong", sel ? sel : "(null)", bad);
  free(s);
  free(d);
}

static void configCollectives(ncclComm_t comm, int n, int r) {
  configAllReduce(comm, n, r, "ring", 1, ncclSuccess);
  configAllReduce(comm, n, r, "tree", 1, ncclSuccess);
  configAllReduce(comm, n, r, "nvls,ring", 1, ncclSuccess);
  configAllReduce(comm, n, r, "^nvls,collnet", 1, ncclSuccess);
  configAllReduce(comm, n, r, "", 1, ncclSuccess);
  configAllReduce(comm, n, r, "nvls", 0, ncclSuccess); /* not forced: papccl chooses */
  configAllReduce(comm, n, r, "nvls", 1, ncclInvalidArgument);
  configAllReduce(comm, n, r, "^ring", 1, ncclInvalidArgument);
  configAllReduce(comm, n, r, "warp9", 1, ncclInvalidArgument);
  float v[2] = {1, 1};
  NCCL_OK(ncclAllReduceConfig(v, v, 2, ncclFloat, ncclSum, comm, NULL, NULL));
  CHECK(v[0] == (float)n, "ncclAllReduceConfig with a NULL config: %g", v[0]);
  ncclCollConfig_t bad = NCCL_COLLCONFIG_INITIALIZER;
  bad.magic = 0;
  CHECK(ncclAllReduceConfig(v, v, 2, ncclFloat, ncclSum, comm, NULL, &bad) == ncclInvalidArgument,
        "a config without its magic is refused");
  /* The other seven, each checked. */
  ncclCollConfig_t c = NCCL_COLLCONFIG_INITIALIZER;
  c.algSelection = "ring";
  const size_t count = 64;
  float* s = fbuf(count * (size_t)n);
  float* d = fbuf(count * (size_t)n);
  for (size_t i = 0; i < count * (size_t)n; i++)
    s[i] = val(r, i);
  NCCL_OK(ncclBroadcastConfig(s, d, count, ncclFloat, 1, comm, NULL, &c));
  CHECK(d[5] == val(1, 5), "ncclBroadcastConfig: %g", d[5]);
  NCCL_OK(ncclReduceConfig(s, d, count, ncclFloat, ncclMax, 0, comm, NULL, &c));
  CHECK(r != 0 || d[6] == val(n - 1, 6), "ncclReduceConfig max: %g", d[6]);
  NCCL_OK(ncclAllGatherConfig(s, d, count, ncclFloat, comm, NULL, &c));
  CHECK(d[(n - 1) * count + 3] == val(n - 1, 3), "ncclAllGatherConfig: %g", d[(n - 1) * count + 3]);
  NCCL_OK(ncclReduceScatterConfig(s, d, count, ncclFloat, ncclMin, comm, NULL, &c));
  CHECK(d[2] == val(0, (size_t)r * count + 2), "ncclReduceScatterConfig min: %g", d[2]);
  ncclCollConfig_t plain = NCCL_COLLCONFIG_INITIALIZER;
  NCCL_OK(ncclAlltoAllConfig(s, d, count, ncclFloat, comm, NULL, &plain));
  CHECK(d[(n - 1) * count] == val(n - 1, (size_t)r * count), "ncclAlltoAllConfig: %g",
        d[(n - 1) * count]);
  NCCL_OK(ncclGatherConfig(s, d, count, ncclFloat, 0, comm, NULL, &plain));
  CHECK(r != 0 || d[(n - 1) * count + 1] == val(n - 1, 1), "ncclGatherConfig");
  NCCL_OK(ncclScatterConfig(s, d, count, ncclFloat, n - 1, comm, NULL, &plain));
  CHECK(d[4] == val(n - 1, (size_t)r * count + 4), "ncclScatterConfig: %g", d[4]);
  CHECK(ncclGatherConfig(s, d, count, ncclFloat, 0, comm, NULL, &c) == ncclInvalidArgument,
        "ncclGatherConfig with algSelection \"ring\" (gather has no ring plan) is refused");
  free(s);
  free(d);
}

/* The parameter API over papccl's registry (test_dropin.sh sets PAPCCL_TIMEOUT_S=60). */
static void params(void) {
  ncclParamHandle_t h = NULL;
  NCCL_OK(ncclParamBind(&h, "PAPCCL_TIMEOUT_S"));
  int32_t i32 = 0;
  int8_t i8 = 0;
  uint64_t u64 = 0;
  NCCL_OK(ncclParamGetI32(h, &i32));
  NCCL_OK(ncclParamGetI8(h, &i8));
  NCCL_OK(ncclParamGetU64(h, &u64));
  CHECK(i32 == 60 && i8 == 60 && u64 == 60, "PAPCCL_TIMEOUT_S read as %d %d %llu", i32, i8,
        (unsigned long long)u64);
  const char* str = NULL;
  NCCL_OK(ncclParamGetStr(h, &str));
  CHECK(str != NULL && strcmp(str, "60") == 0, "PAPCCL_TIMEOUT_S as a string: %s", str);
  int64_t raw = 0;
  int len = 0;
  NCCL_OK(ncclParamGet(h, &raw, (int)sizeof(raw), &len));
  CHECK(raw == 60 && len == 8, "ncclParamGet: %lld, %d bytes", (long long)raw, len);
  CHECK(ncclParamGet(h, &raw, 4, &len) == ncclInvalidArgument, "4 bytes are too few");
  NCCL_OK(ncclParamBind(&h, "PAPCCL_CHUNK_SIZE"));
  CHECK(ncclParamGetI8(h, &i8) == ncclInvalidArgument, "262144 does not fit an int8_t");
  NCCL_OK(ncclParamBind(&h, "PAPCCL_TRANSPORT"));
  CHECK(ncclParamGetI32(h, &i32) == ncclInvalidArgument, "a string parameter is no integer");
  CHECK(ncclParamBind(&h, "NCCL_NO_SUCH_PARAMETER") == ncclInvalidArgument, "unknown key");
  int vlen = -1;
  NCCL_OK(ncclParamGetParameter("NCCL_DEBUG", &str, &vlen));
  const char* dbg = getenv("PAPCCL_DEBUG");
  CHECK(str != NULL && strcmp(str, dbg && *dbg ? dbg : "WARN") == 0 && vlen == (int)strlen(str),
        "NCCL_DEBUG reads papccl's log level: %s", str);
  const char** keys = NULL;
  int nkeys = 0;
  NCCL_OK(ncclParamGetAllParameterKeys(&keys, &nkeys));
  int found = 0;
  for (int i = 0; i < nkeys; i++)
    found += strcmp(keys[i], "PAPCCL_TIMEOUT_S") == 0;
  CHECK(nkeys > 20 && found == 1, "%d keys, PAPCCL_TIMEOUT_S %d times", nkeys, found);
  ncclParamDumpAll();
  ncclEncryptionConfig_t enc = NCCL_ENCRYPTION_CONFIG_INITIALIZER;
  NCCL_OK(ncclSetEncryption(&enc));
  enc.mode = NCCL_ENCRYPTION_MODE_PSK;
  enc.psk = "secret";
  CHECK(ncclSetEncryption(&enc) == ncclInvalidUsage, "a pre-shared key is refused (no TLS)");
}

static uint64_t memStat(ncclComm_t comm, ncclCommMemStat_t stat) {
  uint64_t v = ~0ull;
  NCCL_OK(ncclCommMemStats(comm, stat, &v));
  return v;
}

/* Suspension (2.29): stats before, suspend, stats, resume, checked allreduces. What NCCL
 * leaves open is not checked: whether the byte counts of released buffers drop (papccl's
 * do, to 0; NVIDIA's keep counting the reserved address ranges) and what an operation on a
 * suspended comm does (papccl refuses it). */
static void suspendResume(ncclComm_t comm, int n, int r) {
  uint64_t sus = memStat(comm, ncclStatGpuMemSuspend), per = memStat(comm, ncclStatGpuMemPersist);
  CHECK(memStat(comm, ncclStatGpuMemSuspended) == 0, "a new comm is not suspended");
  CHECK(memStat(comm, ncclStatGpuMemTotal) == sus + per, "total %llu is suspendable %llu + %llu",
        (unsigned long long)memStat(comm, ncclStatGpuMemTotal), (unsigned long long)sus,
        (unsigned long long)per);
  CHECK(ncclCommMemStats(comm, ncclStatGpuMemTotal, NULL) == ncclInvalidArgument, "NULL value");
  NCCL_OK(ncclCommSuspend(comm, NCCL_SUSPEND_MEM));
  CHECK(memStat(comm, ncclStatGpuMemSuspended) == 1, "suspended");
  CHECK(memStat(comm, ncclStatGpuMemSuspend) <= sus && memStat(comm, ncclStatGpuMemPersist) == per,
        "suspension held on to memory: %llu releasable, %llu kept (%llu and %llu before)",
        (unsigned long long)memStat(comm, ncclStatGpuMemSuspend),
        (unsigned long long)memStat(comm, ncclStatGpuMemPersist), (unsigned long long)sus,
        (unsigned long long)per);
  CHECK(ncclCommSuspend(comm, NCCL_SUSPEND_MEM) == ncclInvalidUsage, "suspended twice");
  NCCL_OK(ncclCommResume(comm));
  CHECK(memStat(comm, ncclStatGpuMemSuspended) == 0, "resumed");
  CHECK(ncclCommResume(comm) == ncclInvalidUsage, "resumed when not suspended");
  const size_t count = 4096;
  float* b = fbuf(count);
  for (int it = 0; it < 3; it++) {
    for (size_t i = 0; i < count; i++)
      b[i] = val(r, i) + (float)it;
    NCCL_OK(ncclAllReduce(b, b, count, ncclFloat32, ncclSum, comm, NULL));
    size_t bad = 0;
    for (size_t i = 0; i < count; i++) {
      float want = (float)it * (float)n;
      for (int q = 0; q < n; q++)
        want += val(q, i);
      bad += b[i] != want;
    }
    CHECK(bad == 0, "allreduce %d after resuming: %zu wrong elements", it, bad);
  }
  free(b);
}

static int api232Rank(ncclUniqueId* ids, int n, int r) {
  myRank = r;
  ncclComm_t comm = NULL;
  NCCL_OK(ncclCommInitRank(&comm, n, ids[0], r));
  if (failures) return 1;
  configCollectives(comm, n, r);
  suspendResume(comm, n, r);
  params();
#ifdef HAVE_NCCL_DEVICE_H
  ncclCommProperties_t p = NCCL_COMM_PROPERTIES_INITIALIZER;
  NCCL_OK(ncclCommQueryProperties(comm, &p));
  CHECK(p.rank == r && p.nRanks == n && !p.deviceApiSupport && !p.multimemSupport &&
            !p.hostRmaSupport && p.commHash != 0,
        "properties: rank %d nRanks %d device API %d hash %llx", p.rank, p.nRanks,
        (int)p.deviceApiSupport, (unsigned long long)p.commHash);
  uint64_t* hashes = (uint64_t*)calloc((size_t)n, sizeof(uint64_t));
  hashes[r] = p.commHash;
  NCCL_OK(ncclAllGather(hashes + r, hashes, 1, ncclUint64, comm, NULL));
  for (int q = 0; q < n; q++)
    CHECK(hashes[q] == p.commHash, "rank %d has commHash %llx", q, (unsigned long long)hashes[q]);
  free(hashes);
#endif
  NCCL_OK(ncclCommDestroy(comm));
  return failures ? 1 : 0;
}

/* Prints every loaded object whose name holds "libnccl": one line, so the tests can see
 * that only one NCCL library is in the process. */
/* ---- Part 5: growing ----------------------------------------------------------------------- */

static int growPipe[2] = {-1, -1}; /* rank 0 -> the new rank: the grow's id */

static int growRank(ncclUniqueId* ids, int n, int r) {
  myRank = r;
  ncclComm_t comm = NULL, grown = NULL;
  ncclUniqueId gid;
  if (r < n - 1) {
    close(growPipe[0]);
    NCCL_OK(ncclCommInitRank(&comm, n - 1, ids[0], r));
    if (comm == NULL) return 1;
    if (r == 0) {
      NCCL_OK(ncclCommGetUniqueId(comm, &gid));
      CHECK(write(growPipe[1], &gid, sizeof(gid)) == (ssize_t)sizeof(gid), "id to the new rank");
    }
    close(growPipe[1]);
    NCCL_OK(ncclCommGrow(comm, n, r == 0 ? &gid : NULL, -1, &grown, NULL));
  } else {
    close(growPipe[1]);
    size_t got = 0;
    while (got < sizeof(gid)) {
      ssize_t k = read(growPipe[0], (char*)&gid + got, sizeof(gid) - got);
      if (k <= 0) return 3;
      got += (size_t)k;
    }
    close(growPipe[0]);
    NCCL_OK(ncclCommGrow(NULL, n, &gid, r, &grown, NULL));
  }
  if (grown == NULL) return 1;
  int gn = -1, gr = -1;
  NCCL_OK(ncclCommCount(grown, &gn));
  NCCL_OK(ncclCommUserRank(grown, &gr));
  CHECK(gn == n && gr == r, "grown comm: rank %d of %d, want %d of %d", gr, gn, r, n);
  for (int it = 0; it < 10 && failures == 0; it++) {
    float v = (float)(r + it);
    NCCL_OK(ncclAllReduce(&v, &v, 1, ncclFloat, ncclSum, grown, NULL));
    CHECK(v == (float)(n * (n - 1) / 2 + n * it), "grown comm: allreduce %g", v);
  }
  NCCL_OK(ncclCommDestroy(grown));
  if (comm) NCCL_OK(ncclCommDestroy(comm));
  return failures ? 1 : 0;
}

static int listNccl(struct dl_phdr_info* info, size_t size, void* arg) {
  (void)size, (void)arg;
  if (info->dlpi_name != NULL && strstr(info->dlpi_name, "libnccl") != NULL)
    printf(" %s", info->dlpi_name);
  return 0;
}

int main(int argc, char** argv) {
  int n = argc > 1 ? atoi(argv[1]) : 4;
  if (n < 2 || n > 64) {
    fprintf(stderr, "usage: %s [NRANKS 2..64]\n", argv[0]);
    return 2;
  }
  int version = 0;
  NCCL_OK(ncclGetVersion(&version));
  Dl_info info;
  memset(&info, 0, sizeof(info));
  dladdr((void*)&ncclAllReduce, &info);
  printf("library: %d %s\n", version, info.dli_fname ? info.dli_fname : "?");
  printf("header: %d\n", NCCL_VERSION_CODE);
  printf("loaded:");
  dl_iterate_phdr(listNccl, NULL);
  printf("\n");
  fflush(stdout);

  if (forkRanks(n, 1, -1, partOneRank) != 0) return 1;
  printf("processes: %d ranks ok\n", n);
  if (singleThread(n) != 0) return 1;
  printf("one thread: %d ranks ok\n", n);
  if (forkRanks(n, 2, n - 1, recoveryRank) != 0) return 1;
  printf("recovery: %d ranks, one killed, ok\n", n);
  if (forkRanks(n, 1, -1, api232Rank) != 0) return 1;
  printf("NCCL 2.32 host API: %d ranks ok\n", n);
  if (pipe(growPipe) != 0 || forkRanks(n, 1, -1, growRank) != 0) return 1;
  printf("grow: %d ranks to %d ok\n", n - 1, n);
  printf("PASS\n");
  return 0;
}
