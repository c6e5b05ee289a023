/* SPDX-License-Identifier: Apache-2.0 */
/* Reduce, pipelined chain ending at the root. */
#include <string.h>

#include "algo.h"
#include "check.h"
#include "log.h"
#include "param.h"

/* Pipelined chain ending at the root: the rank after the root starts, each rank adds its
 * input to the running partial sum (in scratch) and forwards it. */
papcclResult_t papAlgoReduceChain(struct papEngine* e, struct papCall* op) {
  int n = e->nranks, r = e->rank, root = op->root;
  size_t esz = papKernTypeSize(op->dtype);
  size_t bytes = op->count * esz;
  if (n == 1) return papStepCopyIfNeeded(e, op->recvbuff, op->sendbuff, bytes);
  int pos = (r - root - 1 + 2 * n) % n; /* root is at n-1 */
  int next = (r + 1) % n, prev = (r - 1 + n) % n;
  char* work = (char*)op->recvbuff;
  if (pos != n - 1 && pos != 0) PAP_CHECK(papPlanScratch(e, bytes, (void**)&work));
  struct papGeom g;
  PAP_CHECK(papGeomInit(e, &g, op->sendbuff, work, op->count, esz, 1));
  for (int k = 0; k < papGeomChunks(&g, 0); k++) {
    if (pos == 0) {
      PLAN_OK(papGeomSend(e, &g, next, 0, k));
      continue;
    }
    PLAN_OK(papGeomRecvReduce(e, &g, prev, 0, k, op->dtype, op->red));
    if (pos < n - 1) PLAN_OK(papGeomSend(e, &g, next, 0, k));
  }
  return papcclSuccess;
}
