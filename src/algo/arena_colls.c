/* SPDX-License-Identifier: Apache-2.0 */
/* Collectives through device memory shared among the ranks of one host (docs/GPU-IPC.md).
 *
 * AllReduce: every rank copies its input into its arena; each block of the result is reduced by one
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
 * An op larger than half an arena runs in rounds of that size. AllGather, Broadcast,
 * ReduceScatter and Reduce take one stage of the same pattern (ipcOneStage). */
#include <string.h>

#include "algo.h"
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

/* Elements of one round: half an arena, shared by the n blocks of a ReduceScatter input;
 * a multiple of IPC_ALIGN bytes, so that every slice starts 16-byte aligned. */
static size_t roundElems(const struct papEngine* e, const struct papCall* op) {
  size_t esz = papKernTypeSize(op->dtype);
  size_t per = op->coll == PAP_COLL_REDUCESCATTER ? (size_t)e->nranks : 1;
  if (esz == 0) return 0;
  size_t a = IPC_ALIGN / esz;
  return e->dev.bytes / 2 / esz / per / a * a;
}

int papAlgoArenaEligible(const struct papCall* op, const struct papEngine* e) {
  if (e->dev.ops == NULL || e->dev.arena == NULL || op->count == 0 || op->avg || op->preMul)
    return 0;
  /* Small ops: a few device round trips cost more than staging (the same on every rank). */
  if (op->count * papKernTypeSize(op->dtype) < e->dev.minBytes) return 0;
  switch (op->coll) {
  case PAP_COLL_ALLREDUCE:
  case PAP_COLL_ALLGATHER:
  case PAP_COLL_BROADCAST:
  case PAP_COLL_REDUCESCATTER:
  case PAP_COLL_REDUCE:
    return roundElems(e, op) >= IPC_ALIGN / 4;
  default:
    return 0;
  }
}

/* The order in which contributions are taken: the commit's early ranks in arrival order,
 * then the others, or rank order (classic plans, deterministic mode). */
static papcclResult_t contribOrder(struct papEngine* e, const struct papCall* op, int** out) {
  struct papCommitView v;
  if (op->commit.algo == PAP_ALGO_AC2S_DET) {
    /* Deterministic: every element is combined in rank order. */
    struct papCall classic = *op;
    classic.commit.algo = PAP_ALGO_RING;
    PAP_CHECK(papCommitViewInit(e, &classic, &v));
  } else {
    PAP_CHECK(papCommitViewInit(e, op, &v));
  }
  *out = v.order;
  return papcclSuccess;
}

/* Whether rank c reads rank p's arena in a one-stage collective. */
static int consumes(const struct papCall* op, int c, int p) {
  if (c == p) return 0;
  switch (op->coll) {
  case PAP_COLL_ALLGATHER:
  case PAP_COLL_REDUCESCATTER:
    return 1;
  case PAP_COLL_BROADCAST:
    return p == op->root;
  case PAP_COLL_REDUCE:
    return c == op->root;
  default:
    return 0;
  }
}

/* AllGather, Broadcast, ReduceScatter and Reduce: one stage per round. Each producer copies
 * its part of the send buffer into its arena and tells its consumers ("in"); each consumer
 * copies (or reduces, in contribution order) straight out of the producers' arenas into its
 * receive buffer and tells each producer it has read ("read"); a producer's arena is free for
 * the next round once all its consumers have read it. */
static papcclResult_t ipcOneStage(struct papEngine* e, struct papCall* op) {
  const int n = e->nranks, r = e->rank, coll = op->coll, root = op->root;
  const size_t esz = papKernTypeSize(op->dtype);
  const char* send = (const char*)op->sendbuff;
  char* recv = (char*)op->recvbuff;
  const int rs = coll == PAP_COLL_REDUCESCATTER;
  const int produces = coll != PAP_COLL_BROADCAST || r == root;
  int* order = NULL;
  PAP_CHECK(contribOrder(e, op, &order));
  int* ready = NULL;
  PAP_CHECK(papPlanScratch(e, sizeof(int) * (size_t)n, (void**)&ready));
  uint64_t* token = NULL;
  PAP_CHECK(papPlanScratch(e, sizeof(uint64_t) * 2, (void**)&token));
  token[0] = op->seq;
  papPlanScanAll(e);
  char* const* arena = e->dev.arena;
  const size_t re = roundElems(e, op);
  int prevEnd = e->ipcEnd;
  for (size_t b0 = 0; b0 < op->count; b0 += re) {
    const size_t ck = op->count - b0 < re ? op->count - b0 : re;
    const size_t cb = ck * esz;
    /* 1. My data into my arena (ReduceScatter: slice b0 of each of the n blocks). */
    int gin = -1;
    if (produces) {
      for (int j = 0; j < (rs ? n : 1); j++) {
        const char* src = send + ((size_t)j * op->count + b0) * esz;
        gin = papStepDevCopy(e, arena[r] + (size_t)j * re * esz, src, cb, prevEnd, gin);
        PLAN_OK(gin);
      }
      for (int c = 0; c < n; c++)
        if (consumes(op, c, r)) PLAN_OK(papStepSend(e, c, token, sizeof(*token), gin, -1));
    }
    /* 2. What I read, and a "read" back to each producer once its data is used. */
    for (int p = 0; p < n; p++) {
      ready[p] = p == r ? gin : -1;
      if (consumes(op, r, p)) {
        ready[p] = papStepRecv(e, p, token + 1, sizeof(*token), -1, -1);
        PLAN_OK(ready[p]);
      }
    }
    int end = papStepJoin(e, prevEnd, gin);
    if (rs || (coll == PAP_COLL_REDUCE && r == root)) {
      const size_t off = rs ? (size_t)r * re * esz : 0; /* my block in each producer's arena */
      /* The kernels reduce into the second half of my arena (the receive buffer may be host
       * memory no kernel can write), after my copy in, which waited for the previous round's
       * copy out of it; then one copy to the receive buffer (in place that overwrites my own
       * input, read by then). */
      char* acc = arena[r] + e->dev.bytes / 2;
      int s = papStepDevReduce(e, acc, arena[order[0]] + off, arena[order[1]] + off, cb, op->dtype,
                               op->red, papStepJoin(e, ready[order[0]], gin), ready[order[1]]);
      PLAN_OK(s);
      for (int i = 2; i < n; i++) {
        s = papStepDevReduce(e, acc, acc, arena[order[i]] + off, cb, op->dtype, op->red, s,
                             ready[order[i]]);
        PLAN_OK(s);
      }
      for (int p = 0; p < n; p++)
        if (consumes(op, r, p)) PLAN_OK(papStepSend(e, p, token, sizeof(*token), s, -1));
      int c = papStepDevCopy(e, recv + b0 * esz, acc, cb, s, -1);
      PLAN_OK(c);
      end = papStepJoin(e, end, c);
    } else if (coll == PAP_COLL_ALLGATHER || coll == PAP_COLL_BROADCAST) {
      const int ag = coll == PAP_COLL_ALLGATHER;
      for (int i = 0; i < n; i++) {
        int p = order[i];
        if (!consumes(op, r, p)) continue;
        char* dst = recv + ((ag ? (size_t)p * op->count : 0) + b0) * esz;
        int c = papStepDevCopy(e, dst, arena[p], cb, ready[p], -1);
        PLAN_OK(c);
        PLAN_OK(papStepSend(e, p, token, sizeof(*token), c, -1));
        end = papStepJoin(e, end, c);
      }
      if (ag || r == root) { /* my own data: straight to its place (nothing in place) */
        char* dst = recv + ((ag ? (size_t)r * op->count : 0) + b0) * esz;
        int c = papStepDevCopy(e, dst, send + b0 * esz, cb, prevEnd, -1);
        PLAN_OK(c);
        end = papStepJoin(e, end, c);
      }
    }
    PLAN_OK(end);
    /* 3. My arena is free again once every consumer of my data has read it. */
    for (int c = 0; produces && c < n; c++) {
      if (!consumes(op, c, r)) continue;
      int t = papStepRecv(e, c, token + 1, sizeof(*token), -1, -1);
      PLAN_OK(t);
      end = papStepJoin(e, end, t);
    }
    prevEnd = end;
  }
  e->ipcEnd = prevEnd;
  return papcclSuccess;
}

/* AllReduce: blocks owned by the commit's early ranks (every rank, in rank order, without a
 * commit), reduced out of every rank's arena into the owner's, then copied out by all. */
static papcclResult_t ipcAllReduce(struct papEngine* e, struct papCall* op) {
  const int n = e->nranks, r = e->rank;
  const size_t esz = papKernTypeSize(op->dtype);
  const char* send = (const char*)op->sendbuff;
  char* recv = (char*)op->recvbuff;
  /* Block owners, and the order in which each owner takes the contributions. */
  struct papCommitView v;
  PAP_CHECK(papCommitViewInit(e, op, &v));
  const int nE = v.nE;
  const int32_t* own = v.own;
  const int myBlock = v.myBlock;
  int* order = NULL;
  PAP_CHECK(contribOrder(e, op, &order));
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
  const size_t roundEl = roundElems(e, op);
  int prevEnd = e->ipcEnd; /* the arenas are free once this step is done */
  for (size_t b0 = 0; b0 < op->count; b0 += roundEl) {
    size_t ck = op->count - b0 < roundEl ? op->count - b0 : roundEl;
    /* 1. My input into my arena, once the previous round (or op) is done with it. */
    int gin = papStepDevCopy(e, arena[r], send + b0 * esz, ck * esz, prevEnd, -1);
    PLAN_OK(gin);
    for (int j = 0; j < nE; j++)
      if (own[j] != r) PLAN_OK(papStepSend(e, own[j], token, sizeof(*token), gin, -1));
    /* 2. An owner reduces its block out of every rank's arena, in `order`. */
    int redDone = -1;
    if (myBlock >= 0) {
      size_t lo, hi;
      ipcBlock(ck, esz, nE, myBlock, &lo, &hi);
      for (int p = 0; p < n; p++) {
        ready[p] = gin;
        if (p != r) {
          ready[p] = papStepRecv(e, p, token + 1, sizeof(*token), -1, -1);
          PLAN_OK(ready[p]);
        }
      }
      char* acc = arena[r] + half + lo * esz;
      size_t bytes = (hi - lo) * esz;
      int dep = papStepJoin(e, ready[order[0]], prevEnd);
      int s = papStepDevReduce(e, acc, arena[order[0]] + lo * esz, arena[order[1]] + lo * esz,
                               bytes, op->dtype, op->red, dep, ready[order[1]]);
      PLAN_OK(s);
      for (int i = 2; i < n; i++) {
        s = papStepDevReduce(e, acc, acc, arena[order[i]] + lo * esz, bytes, op->dtype, op->red, s,
                             ready[order[i]]);
        PLAN_OK(s);
      }
      redDone = s;
      for (int p = 0; p < n; p++)
        if (p != r) PLAN_OK(papStepSend(e, p, token, sizeof(*token), redDone, -1));
    }
    /* 3. Every block out of its owner's arena; the owner hears when its block was read. */
    int end = -1;
    for (int j = 0; j < nE; j++) {
      int o = own[j];
      outReady[j] = o == r ? redDone : papStepRecv(e, o, token + 1, sizeof(*token), -1, -1);
      PLAN_OK(outReady[j]);
    }
    for (int j = 0; j < nE; j++) {
      int o = own[j];
      size_t lo, hi;
      ipcBlock(ck, esz, nE, j, &lo, &hi);
      int c = papStepDevCopy(e, recv + (b0 + lo) * esz, arena[o] + half + lo * esz, (hi - lo) * esz,
                             outReady[j], -1);
      PLAN_OK(c);
      if (o != r) PLAN_OK(papStepSend(e, o, token, sizeof(*token), c, -1));
      end = papStepJoin(e, end, c);
      PLAN_OK(end);
    }
    /* 4. An owner's arena is free again once every rank has read its block. */
    if (myBlock >= 0) {
      for (int p = 0; p < n; p++) {
        if (p == r) continue;
        int c = papStepRecv(e, p, token + 1, sizeof(*token), -1, -1);
        PLAN_OK(c);
        end = papStepJoin(e, end, c);
        PLAN_OK(end);
      }
    }
    prevEnd = end;
  }
  e->ipcEnd = prevEnd;
  return papcclSuccess;
}

papcclResult_t papAlgoArena(struct papEngine* e, struct papCall* op) {
  /* On one rank each of the five is a copy. */
  if (e->nranks == 1) {
    size_t bytes = op->count * papKernTypeSize(op->dtype);
    PLAN_OK(papStepDevCopy(e, op->recvbuff, op->sendbuff, bytes, -1, -1));
    return papcclSuccess;
  }
  PAP_CHECK(op->coll == PAP_COLL_ALLREDUCE ? ipcAllReduce(e, op) : ipcOneStage(e, op));
  if (papPlanFailed(e)) {
    PAP_WARN("out of memory while building a plan");
    return papcclSystemError;
  }
  return papcclSuccess;
}
