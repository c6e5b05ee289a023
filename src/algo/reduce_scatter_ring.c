/* SPDX-License-Identifier: Apache-2.0 */
/* ReduceScatter, ring. */
#include <string.h>

#include "algo.h"
#include "check.h"
#include "log.h"
#include "param.h"

/* Ring ReduceScatter: partial sums travel around the ring through a scratch buffer; the
 * last step reduces straight into recvbuff. Step s sends block r-s-1, receives r-s-2. */
papcclResult_t papAlgoReduceScatterRing(struct papEngine* e, struct papCall* op) {
  int n = e->nranks, r = e->rank;
  size_t esz = papKernTypeSize(op->dtype);
  size_t blk = op->count * esz;
  if (n == 1) return papStepCopyIfNeeded(e, op->recvbuff, op->sendbuff, blk);
  char* work = NULL;
  PAP_CHECK(papPlanScratch(e, blk * (size_t)n, (void**)&work));
  struct papGeom g;
  PAP_CHECK(papGeomInit(e, &g, op->sendbuff, work, op->count * (size_t)n, esz, n));
  int next = (r + 1) % n, prev = (r - 1 + n) % n;
  for (int s = 0; s < n - 1; s++) {
    int sendBlk = (r - s - 1 + 2 * n) % n;
    int recvBlk = (r - s - 2 + 2 * n) % n;
    int nc = papGeomChunks(&g, sendBlk);
    for (int k = 0; k < nc; k++) {
      PLAN_OK(papGeomSend(e, &g, next, sendBlk, k));
      if (s < n - 2) {
        PLAN_OK(papGeomRecvReduce(e, &g, prev, recvBlk, k, op->dtype, op->red));
      } else {
        /* recvBlk == r: the final sum goes to recvbuff (which may alias sendbuff's block r,
         * read here as the local contribution: element-wise, so in place is safe). */
        size_t off, cnt;
        papGeomUnit(&g, recvBlk, k, &off, &cnt);
        size_t local = off - g.blkOff[recvBlk];
        PLAN_OK(papStepRecvReduce(e, prev, (char*)op->recvbuff + local * esz,
                                  (const char*)op->sendbuff + off * esz, cnt * esz, op->dtype,
                                  op->red, -1, -1));
      }
    }
  }
  return papcclSuccess;
}
