/* SPDX-License-Identifier: Apache-2.0 */
/* AllReduce, recursive halving-doubling (and recursive doubling for small vectors): fewest
 * steps. */
#include <string.h>

#include "algo.h"
#include "check.h"
#include "log.h"
#include "param.h"

/* Rank of virtual rank v after folding the first 2*rem ranks into pairs. */
static int realRank(int v, int rem) {
  return v < rem ? 2 * v + 1 : v + rem;
}

/* Whole-vector exchange of every unit with peer, reducing what arrives. Used by the
 * recursive-doubling variant and the fold; units go through scratch (copy = recv, then a
 * reduce step), so a send never races the write of the same unit. */
static papcclResult_t exchangeReduceAll(struct papEngine* e, struct papGeom* g, int peer,
                                        struct papCall* op, char* tmp) {
  for (int b = 0; b < g->nblocks; b++) {
    for (int k = 0; k < papGeomChunks(g, b); k++) {
      size_t off, cnt;
      papGeomUnit(g, b, k, &off, &cnt);
      int si = papGeomSend(e, g, peer, b, k);
      PLAN_OK(si);
      /* tmp is private to this unit, so no false dependency between units. */
      int ri =
          papStepRecv(e, peer, tmp + off * g->esz, cnt * g->esz, papGeomLastWrite(g, b, k), -1);
      PLAN_OK(ri);
      int di = papStepReduce(e, g->recvbuff + off * g->esz, papGeomSrc(g, b, k), tmp + off * g->esz,
                             cnt * g->esz, op->dtype, op->red, ri, si);
      PLAN_OK(di);
      papGeomWrote(g, b, k, di);
    }
  }
  return papcclSuccess;
}

/* Recursive halving (reduce-scatter) then recursive doubling (allgather), with the extra
 * ranks of a non-power-of-two count folded into their neighbours first. Small vectors skip
 * the halving and exchange whole vectors (recursive doubling): fewest steps. */
papcclResult_t papAlgoAllReduceRhd(struct papEngine* e, struct papCall* op) {
  int n = e->nranks;
  int r = e->rank;
  size_t esz = papKernTypeSize(op->dtype);
  size_t bytes = op->count * esz;
  if (n == 1) return papStepCopyIfNeeded(e, op->recvbuff, op->sendbuff, bytes);
  int p2 = 1;
  while (p2 * 2 <= n)
    p2 *= 2;
  int rem = n - p2;
  int whole = bytes <= (size_t)papParamRdMaxBytes() || op->count < (size_t)p2;
  struct papGeom g;
  PAP_CHECK(papGeomInit(e, &g, op->sendbuff, op->recvbuff, op->count, esz, whole ? 1 : p2));
  char* tmp = NULL;
  PAP_CHECK(papPlanScratch(e, bytes, (void**)&tmp));

  int v; /* virtual rank among the p2 survivors, or -1 for a folded-out rank */
  if (r < 2 * rem) {
    if (r % 2 == 0) {
      /* Give my vector to r+1, get the result back at the end. */
      for (int b = 0; b < g.nblocks; b++)
        for (int k = 0; k < papGeomChunks(&g, b); k++)
          PLAN_OK(papGeomSend(e, &g, r + 1, b, k));
      for (int b = 0; b < g.nblocks; b++)
        for (int k = 0; k < papGeomChunks(&g, b); k++)
          PLAN_OK(papGeomRecv(e, &g, r + 1, b, k));
      return papcclSuccess;
    }
    for (int b = 0; b < g.nblocks; b++)
      for (int k = 0; k < papGeomChunks(&g, b); k++)
        PLAN_OK(papGeomRecvReduce(e, &g, r - 1, b, k, op->dtype, op->red));
    v = r / 2;
  } else {
    v = r - rem;
  }

  if (whole) {
    for (int mask = 1; mask < p2; mask <<= 1)
      PAP_CHECK(exchangeReduceAll(e, &g, realRank(v ^ mask, rem), op, tmp));
  } else {
    int lo = 0, hi = p2; /* block range I hold partial sums for */
    for (int mask = p2 >> 1; mask >= 1; mask >>= 1) {
      int peer = realRank(v ^ mask, rem);
      int mid = (lo + hi) / 2;
      int keepLo = (v & mask) ? mid : lo;
      int keepHi = (v & mask) ? hi : mid;
      int sendLo = (v & mask) ? lo : mid;
      int sendHi = (v & mask) ? mid : hi;
      for (int b = sendLo; b < sendHi; b++)
        for (int k = 0; k < papGeomChunks(&g, b); k++)
          PLAN_OK(papGeomSend(e, &g, peer, b, k));
      for (int b = keepLo; b < keepHi; b++)
        for (int k = 0; k < papGeomChunks(&g, b); k++)
          PLAN_OK(papGeomRecvReduce(e, &g, peer, b, k, op->dtype, op->red));
      lo = keepLo;
      hi = keepHi;
    }
    for (int mask = 1; mask < p2; mask <<= 1) {
      int peer = realRank(v ^ mask, rem);
      int mine = v & ~(mask - 1);
      int theirs = (v ^ mask) & ~(mask - 1);
      for (int b = mine; b < mine + mask; b++)
        for (int k = 0; k < papGeomChunks(&g, b); k++)
          PLAN_OK(papGeomSend(e, &g, peer, b, k));
      for (int b = theirs; b < theirs + mask; b++)
        for (int k = 0; k < papGeomChunks(&g, b); k++)
          PLAN_OK(papGeomRecv(e, &g, peer, b, k));
    }
  }

  if (r < 2 * rem) {
    /* Return the result to the folded-out neighbour. */
    for (int b = 0; b < g.nblocks; b++)
      for (int k = 0; k < papGeomChunks(&g, b); k++)
        PLAN_OK(papGeomSend(e, &g, r - 1, b, k));
  }
  return papcclSuccess;
}
