/* SPDX-License-Identifier: Apache-2.0 */
/* AllGather, ring. */
#include <string.h>

#include "algo.h"
#include "check.h"
#include "log.h"
#include "param.h"

/* Ring AllGather: block r starts in sendbuff; step s forwards block r-s to the next rank.
 * recvbuff is the unit tracker's buffer; the own block is sent straight from sendbuff. */
papcclResult_t papAlgoAllGatherRing(struct papEngine* e, struct papCall* op) {
  int n = e->nranks, r = e->rank;
  size_t esz = papKernTypeSize(op->dtype);
  size_t blk = op->count * esz;
  char* recv = (char*)op->recvbuff;
  PAP_CHECK(papStepCopyIfNeeded(e, recv + (size_t)r * blk, op->sendbuff, blk));
  if (n == 1) return papcclSuccess;
  struct papGeom g;
  /* One geometry over the whole output: block b of nranks*count elements is rank b's. */
  PAP_CHECK(papGeomInit(e, &g, recv, recv, op->count * (size_t)n, esz, n));
  /* The own block is already in place (or being copied by a step without tracking: the
   * copy reads sendbuff and writes recvbuff[r], and sends read sendbuff directly). */
  g.sendbuff = recv;
  int next = (r + 1) % n, prev = (r - 1 + n) % n;
  for (int s = 0; s < n - 1; s++) {
    int sendBlk = (r - s + n) % n;
    int recvBlk = (r - s - 1 + n) % n;
    int nc = papGeomChunks(&g, sendBlk);
    for (int k = 0; k < nc; k++) {
      if (s == 0) {
        size_t off, cnt;
        papGeomUnit(&g, sendBlk, k, &off, &cnt);
        PLAN_OK(papStepSend(e, next, (const char*)op->sendbuff + (off - g.blkOff[sendBlk]) * esz,
                            cnt * esz, -1, -1));
      } else {
        PLAN_OK(papGeomSend(e, &g, next, sendBlk, k));
      }
      int idx = papGeomRecv(e, &g, prev, recvBlk, k);
      PLAN_OK(idx);
      if (s == n - 2) papStepMarkFinal(e, idx); /* the last step is never forwarded */
    }
  }
  return papcclSuccess;
}
