/* SPDX-License-Identifier: Apache-2.0 */
/* Arrival-ordered pipelined chain allreduce (docs/PAP.md A1): position p adds what
 * position p-1 sends to its own input and forwards it to p+1; the last arriver holds the
 * result and sends it back down the chain. Chunks pipeline in both directions, so a late
 * last arriver has about one receive-reduce and one send of m left. */
#include "algo.h"
#include "check.h"
#include "log.h"

papcclResult_t papAlgoAllReduceChainBegin(struct papEngine* e, struct papCall* op,
                                          struct papChain** chainOut) {
  int n = e->nranks;
  int pos = op->commit.pos;
  size_t esz = papKernTypeSize(op->dtype);
  *chainOut = NULL;
  if (n == 1) return papStepCopyIfNeeded(e, op->recvbuff, op->sendbuff, op->count * esz);
  struct papChain* c = NULL;
  PAP_CHECK(papPlanScratch(e, sizeof(*c), (void**)&c));
  c->op = op;
  c->pos = pos;
  c->pred = pos > 0 ? op->commit.pred : -1;
  PAP_CHECK(papGeomInit(e, &c->g, op->sendbuff, op->recvbuff, op->count, esz, 1));
  papPlanScanAll(e);
  int nk = papGeomChunks(&c->g, 0);
  /* Position 0's partial is its input (the unit tracker reads sendbuff until written). */
  if (pos > 0) {
    for (int k = 0; k < nk; k++)
      PLAN_OK(papGeomRecvReduce(e, &c->g, c->pred, 0, k, op->dtype, op->red));
  }
  if (pos == n - 1) return papAlgoAllReduceChainFinish(e, c, -1);
  e->pending = 1;
  *chainOut = c;
  return papcclSuccess;
}

papcclResult_t papAlgoAllReduceChainFinish(struct papEngine* e, struct papChain* c, int succ) {
  int nk = papGeomChunks(&c->g, 0);
  for (int k = 0; k < nk; k++) {
    if (succ >= 0) {
      PLAN_OK(papGeomSend(e, &c->g, succ, 0, k)); /* my partial */
      int idx = papGeomRecv(e, &c->g, succ, 0, k); /* the result */
      PLAN_OK(idx);
      if (c->pred < 0) papStepMarkFinal(e, idx);
    }
    if (c->pred >= 0) PLAN_OK(papGeomSend(e, &c->g, c->pred, 0, k));
  }
  e->pending = 0;
  return papcclSuccess;
}
