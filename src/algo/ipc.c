/* SPDX-License-Identifier: Apache-2.0 */
/* Allreduce through device memory shared among the ranks of one host (docs/GPU-IPC.md).
 *
 * Every rank copies its input into its arena; each block of the result is reduced by one
 * owner straight out of the other ranks' arenas (peer memory mapped through CUDA IPC) into
 * the owner's arena, and every rank copies the blocks out of the owners' arenas into its
 * output. The owners are the early ranks of the PAP commit (AC2S, small) or every rank
 * (classic), so a late rank is left with one copy of its input in, the owners' last
 * reduction of its contribution, and one copy of the result out. The owners take the
 * contributions in arrival order (the deterministic mode: in rank order), one two-input
 * kernel each, so the work on the early inputs is done before the late rank comes.
 *
 * Ranks tell each other through 8-byte messages on the ordinary transport (shm): "my input
 * is in" (to each owner), "block ready" (from each owner), "I have copied your block"
 * (to each owner), so every wait has the engine's timeout, abort and dead-peer handling.
 * An op larger than half an arena runs in rounds of that size. */
#include <string.h>

#include "algo/algo.h"
#include "check.h"
#include "log.h"

/* Elements of each block are a multiple of this many bytes (16-byte vector loads). */
#define IPC_ALIGN 256

/* Element range [lo, hi) of block j of nE over cnt elements. */
static void ipcBlock(size_t cnt, size_t esz, int nE, int j, size_t* lo, size_t* hi) {
  size_t a = IPC_ALIGN / esz ? IPC_ALIGN / esz : 1;
  size_t per = (cnt + (size_t)nE - 1) / (size_t)nE;
  per = (per + a - 1) / a * a;
  size_t l = per * (size_t)j, h = l + per;
  *lo = l < cnt ? l : cnt;
  *hi = h < cnt ? h : cnt;
}

int papAlgoIpcEligible(const struct papOpDesc* op, const struct papEngine* e) {
  return e->dev.ops != NULL && e->dev.arena != NULL && op->coll == PAP_COLL_ALLREDUCE && !op->avg &&
         !op->preMul && op->count > 0 &&
         e->dev.bytes / 2 >= papKernTypeSize(op->dtype) * (IPC_ALIGN / 4);
}

papcclResult_t papAllReduceIpc(struct papEngine* e, struct papOpDesc* op) {
  const int n = e->nranks, r = e->rank;
  const size_t esz = papKernTypeSize(op->dtype);
  const char* send = (const char*)op->sendbuff;
  char* recv = (char*)op->recvbuff;
  if (n == 1)
    return papPlanDevCopy(e, recv, send, op->count * esz, -1, -1) < 0 ? papcclSystemError
                                                                      : papcclSuccess;
  /* Block owners and the order in which each owner takes the contributions. */
  int* mem = NULL;
  PAP_CHECK(papPlanScratch(e, sizeof(int) * (size_t)n * 3, (void**)&mem));
  int* own = mem;
  int* order = mem + n;
  int* isOwner = mem + 2 * n;
  int nE = n;
  int pap =
      op->algo == PAP_ALGO_AC2S || op->algo == PAP_ALGO_AC2S_DET || op->algo == PAP_ALGO_SMALL;
  memset(isOwner, 0, sizeof(int) * (size_t)n);
  if (pap) {
    nE = op->nE;
    for (int j = 0; j < nE; j++)
      own[j] = op->owners[j];
  } else {
    for (int j = 0; j < n; j++)
      own[j] = j;
  }
  for (int j = 0; j < nE; j++)
    isOwner[own[j]] = 1;
  int myBlock = -1;
  for (int j = 0; j < nE; j++)
    if (own[j] == r) myBlock = j;
  int nOrder = 0;
  if (op->algo == PAP_ALGO_AC2S_DET) {
    for (int p = 0; p < n; p++)
      order[nOrder++] = p;
  } else {
    for (int j = 0; j < nE; j++)
      order[nOrder++] = own[j];
    for (int p = 0; p < n; p++)
      if (!isOwner[p]) order[nOrder++] = p;
  }
  /* Step indices kept per round. */
  int* st = NULL;
  PAP_CHECK(papPlanScratch(e, sizeof(int) * (size_t)n * 2, (void**)&st));
  int* ready = st; /* [n] input of rank p is in its arena */
  int* outReady = st + n; /* [nE] block j is reduced */
  uint64_t* token = NULL;
  PAP_CHECK(papPlanScratch(e, sizeof(uint64_t) * 2, (void**)&token));
  token[0] = op->seq;
  /* Early work never waits behind steps that wait for a late rank. */
  papPlanScanAll(e);
  char* const* arena = e->dev.arena;
  const size_t half = e->dev.bytes / 2;
  const size_t roundElems = half / esz;
  int prevEnd = e->ipcEnd; /* the arenas are free once this step is done */
  for (size_t b0 = 0; b0 < op->count; b0 += roundElems) {
    size_t ck = op->count - b0 < roundElems ? op->count - b0 : roundElems;
    /* 1. My input into my arena, once the previous round (or op) is done with it. */
    int gin = papPlanDevCopy(e, arena[r], send + b0 * esz, ck * esz, prevEnd, -1);
    PLAN_OK(gin);
    for (int j = 0; j < nE; j++)
      if (own[j] != r) PLAN_OK(papPlanSend(e, own[j], token, sizeof(*token), gin, -1));
    /* 2. An owner reduces its block out of every rank's arena, in `order`. */
    int redDone = -1;
    if (myBlock >= 0) {
      size_t lo, hi;
      ipcBlock(ck, esz, nE, myBlock, &lo, &hi);
      for (int p = 0; p < n; p++) {
        ready[p] = gin;
        if (p != r) {
          ready[p] = papPlanRecv(e, p, token + 1, sizeof(*token), -1, -1);
          PLAN_OK(ready[p]);
        }
      }
      char* acc = arena[r] + half + lo * esz;
      size_t bytes = (hi - lo) * esz;
      int dep = papPlanJoin(e, ready[order[0]], prevEnd);
      int s = papPlanDevReduce(e, acc, arena[order[0]] + lo * esz, arena[order[1]] + lo * esz,
                               bytes, op->dtype, op->red, dep, ready[order[1]]);
      PLAN_OK(s);
      for (int i = 2; i < nOrder; i++) {
        s = papPlanDevReduce(e, acc, acc, arena[order[i]] + lo * esz, bytes, op->dtype, op->red, s,
                             ready[order[i]]);
        PLAN_OK(s);
      }
      redDone = s;
      for (int p = 0; p < n; p++)
        if (p != r) PLAN_OK(papPlanSend(e, p, token, sizeof(*token), redDone, -1));
    }
    /* 3. Every block out of its owner's arena; the owner hears when its block was read. */
    int end = -1;
    for (int j = 0; j < nE; j++) {
      int o = own[j];
      outReady[j] = o == r ? redDone : papPlanRecv(e, o, token + 1, sizeof(*token), -1, -1);
      PLAN_OK(outReady[j]);
    }
    for (int j = 0; j < nE; j++) {
      int o = own[j];
      size_t lo, hi;
      ipcBlock(ck, esz, nE, j, &lo, &hi);
      int c = papPlanDevCopy(e, recv + (b0 + lo) * esz, arena[o] + half + lo * esz, (hi - lo) * esz,
                             outReady[j], -1);
      PLAN_OK(c);
      if (o != r) PLAN_OK(papPlanSend(e, o, token, sizeof(*token), c, -1));
      end = papPlanJoin(e, end, c);
      PLAN_OK(end);
    }
    /* 4. An owner's arena is free again once every rank has read its block. */
    if (myBlock >= 0) {
      for (int p = 0; p < n; p++) {
        if (p == r) continue;
        int c = papPlanRecv(e, p, token + 1, sizeof(*token), -1, -1);
        PLAN_OK(c);
        end = papPlanJoin(e, end, c);
        PLAN_OK(end);
      }
    }
    prevEnd = end;
  }
  e->ipcEnd = prevEnd;
  if (papPlanFailed(e)) {
    PAP_WARN("out of memory while building a plan");
    return papcclSystemError;
  }
  return papcclSuccess;
}
