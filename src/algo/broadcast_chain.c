/* SPDX-License-Identifier: Apache-2.0 */
/* Broadcast, pipelined chain from the root. */
#include <string.h>

#include "algo.h"
#include "check.h"
#include "log.h"
#include "param.h"

/* Pipelined chain from the root: each rank forwards chunk k as soon as it has it. */
papcclResult_t papAlgoBroadcastChain(struct papEngine* e, struct papCall* op) {
  int n = e->nranks, r = e->rank, root = op->root;
  size_t esz = papKernTypeSize(op->dtype);
  size_t bytes = op->count * esz;
  if (r == root) PAP_CHECK(papStepCopyIfNeeded(e, op->recvbuff, op->sendbuff, bytes));
  if (n == 1) return papcclSuccess;
  int pos = (r - root + n) % n;
  int next = (r + 1) % n, prev = (r - 1 + n) % n;
  struct papGeom g;
  PAP_CHECK(papGeomInit(e, &g, op->recvbuff, op->recvbuff, op->count, esz, 1));
  for (int k = 0; k < papGeomChunks(&g, 0); k++) {
    size_t off, cnt;
    papGeomUnit(&g, 0, k, &off, &cnt);
    if (pos == 0) {
      PLAN_OK(papStepSend(e, next, (const char*)op->sendbuff + off * esz, cnt * esz, -1, -1));
      continue;
    }
    int idx = papGeomRecv(e, &g, prev, 0, k);
    PLAN_OK(idx);
    if (pos < n - 1)
      PLAN_OK(papGeomSend(e, &g, next, 0, k));
    else
      papStepMarkFinal(e, idx);
  }
  return papcclSuccess;
}
