/* SPDX-License-Identifier: Apache-2.0 */
/* papccl perf driver: the timing loop (warm-up, timed iterations, checks, the PAP columns),
 * the table it prints, and the barrier and reductions it runs over the test communicator. */
#include <math.h>
#include <stdlib.h>
#include <unistd.h>

#include "driver.h"

void papPerfMarkBegin(struct perfRank* r) {
  if (r->p->o.timeout > 0) atomic_store(&r->opStartNs, (long long)(papPerfNow() * 1e9) + 1);
}
void papPerfMarkEnd(struct perfRank* r) {
  if (r->p->o.timeout > 0) atomic_store(&r->opStartNs, 0);
}

/* Barrier and small reductions over the test communicator itself. */
void papPerfBarrier(struct perfRank* r) {
  r->scratchI = 1;
  papPerfMarkBegin(r);
  PCHECK(r->comm,
         papcclAllReduce(&r->scratchI, &r->scratchI, 1, papcclInt64, papcclSum, r->comm, NULL));
  papPerfMarkEnd(r);
}
int64_t papPerfSumInt(struct perfRank* r, int64_t v) {
  r->scratchI = v;
  papPerfMarkBegin(r);
  PCHECK(r->comm,
         papcclAllReduce(&r->scratchI, &r->scratchI, 1, papcclInt64, papcclSum, r->comm, NULL));
  papPerfMarkEnd(r);
  return r->scratchI;
}
/* average: 0 rank 0's value, 1 mean, 2 min, 3 max (nccl-tests -a). */
static double reduceDouble(struct perfRank* r, double v, int average) {
  papcclRedOp_t op = average == 2 ? papcclMin : average == 3 ? papcclMax : papcclSum;
  r->scratchD = (average == 0 && r->rank != 0) ? 0.0 : v;
  papPerfMarkBegin(r);
  PCHECK(r->comm, papcclAllReduce(&r->scratchD, &r->scratchD, 1, papcclFloat64, op, r->comm, NULL));
  papPerfMarkEnd(r);
  return average == 1 ? r->scratchD / r->p->nranks : r->scratchD;
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

void papPerfPrintTableHeader(struct perfRank* r) {
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
    papPerfJsonKey(r->p, "results");
    papPerfJsonOpen(r->p, '[');
  }
}

/* ---- The timing loop ------------------------------------------------------------------------ */

void papPerfSetupSize(struct perfRank* r, size_t size, papcclDataType_t type) {
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
  papPerfMarkBegin(r);
  PCHECK(r->comm, r->p->coll->run(s, d, r->counts.paramCount, type, redOpOf(r, op), root, r->comm));
  papPerfMarkEnd(r);
}

static void runIter(struct perfRank* r, papcclDataType_t type, int op, int root, int inPlace,
                    int iter) {
  int agg = r->p->o.aggIters;
  if (agg > 1) PCHECK(r->comm, papcclGroupStart());
  for (int a = 0; a < agg; a++)
    startColl(r, type, op, root, inPlace, iter * agg + a);
  if (agg > 1) PCHECK(r->comm, papcclGroupEnd());
  if (r->p->o.blocking == 1) papPerfBarrier(r);
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
  papPerfBarrier(r);

  double sec;
  double papCols[3] = {0, 0, 0};
  if (arrivalMode(o)) {
    /* Arrival pattern: a barrier, this rank's delay, then the call; time only the calls.
     * The warm-up calls (it < 0) come first, with the pattern, so that an adaptive library
     * (papccl's selector plans a size with PAP from its 13th call at the earliest) is in its
     * steady state when the timed calls start. */
    double inCall = 0;
    double* st = r->pap;
    for (int it = -o->warmupIters; it < o->iters; it++) {
      papPerfBarrier(r);
      papPerfComputeUs(papPerfArrivalDelayUs(&o->arrival, r->rank, p->nranks, r->calls++));
      double t0 = papPerfNow();
      runIter(r, type, op, root, inPlace, it < 0 ? it + o->warmupIters : it);
      double t1 = papPerfNow();
      if (it < 0) continue;
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
        papPerfBarrier(r);
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
    wrong = papPerfSumInt(r, mine);
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
    papPerfJsonKey(p, inPlace ? "in_place" : "out_of_place");
    papPerfJsonOpen(p, '{');
    papPerfJsonKey(p, o->reportCpu ? "cpu_time" : "time");
    papPerfJsonDouble(p, sec * 1e6);
    papPerfJsonKey(p, "alg_bw");
    papPerfJsonDouble(p, algBw);
    papPerfJsonKey(p, "bus_bw");
    papPerfJsonDouble(p, busBw);
    papPerfJsonKey(p, "nwrong");
    if (check)
      papPerfJsonDouble(p, (double)wrong);
    else
      papPerfJsonNull(p);
    if (arrivalMode(o)) {
      papPerfJsonKey(p, "tail_us");
      papPerfJsonDouble(p, papCols[0]);
      papPerfJsonKey(p, "time_in_coll_us");
      papPerfJsonDouble(p, papCols[1]);
      papPerfJsonKey(p, "skew_us");
      papPerfJsonDouble(p, papCols[2]);
    }
    papPerfJsonClose(p, '}');
  }
  r->bwSum += busBw;
  r->bwCount++;
}

static size_t nextSize(const struct perfOpts* o, size_t size) {
  size_t next = o->stepFactor > 1 ? size * o->stepFactor : size + o->stepBytes;
  if (size == 0 && o->stepFactor > 1) next = 1;
  return next > size ? next : (size_t)-1; /* no progress or overflow: stop */
}

void papPerfTimeTest(struct perfRank* r, papcclDataType_t type, int op, int root) {
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
  papPerfBarrier(r);
  /* With an arrival pattern every size warms up with it, just before its timed calls
   * (benchTime); calls without the pattern first would only delay an adaptive library. */
  for (size_t size = o->minBytes; size <= p->maxBytes && !arrivalMode(o);
       size = size ? size * 2 : 1) {
    papPerfSetupSize(r, size, type);
    for (int it = 0; it < o->warmupIters; it++)
      startColl(r, type, op, root, 0, it);
    if (size > p->maxBytes / 2) break;
  }
  int cycle = 0;
  do {
    for (size_t size = o->minBytes; size <= p->maxBytes; size = nextSize(o, size)) {
      papPerfSetupSize(r, size, type);
      size_t shown = r->sendBytes > r->recvBytes ? r->sendBytes : r->recvBytes;
      char rootStr[16];
      snprintf(rootStr, sizeof(rootStr), "%6i", root);
      PRINT(r, "%12li  %12li  %8s  %6s  %6s", (long)shown, (long)r->counts.paramCount,
            papPerfTypeName(type), papPerfOpName(op), rootStr);
      if (isPrinter(r)) {
        papPerfJsonOpen(p, '{');
        papPerfJsonKey(p, "size");
        papPerfJsonLong(p, (long long)shown);
        papPerfJsonKey(p, "count");
        papPerfJsonLong(p, (long long)r->counts.paramCount);
        papPerfJsonKey(p, "type");
        papPerfJsonStr(p, papPerfTypeName(type));
        papPerfJsonKey(p, "redop");
        papPerfJsonStr(p, papPerfOpName(op));
        papPerfJsonKey(p, "root");
        papPerfJsonStr(p, rootStr);
      }
      benchTime(r, type, op, root, 0);
      benchTime(r, type, op, root, 1);
      PRINT(r, "\n");
      if (isPrinter(r)) {
        papPerfJsonKey(p, "actual_iterations");
        papPerfJsonLong(p, o->iters);
        papPerfJsonKey(p, "experiment_name");
        papPerfJsonStr(p, "");
        papPerfJsonClose(p, '}');
      }
    }
  } while (o->runCycles == 0 || ++cycle < o->runCycles);
  if (op == PAP_PERF_OP_MULSUM) PCHECK(r->comm, papcclRedOpDestroy(r->premulOp, r->comm));
}
