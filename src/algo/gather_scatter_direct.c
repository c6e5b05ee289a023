/* SPDX-License-Identifier: Apache-2.0 */
/* Gather and Scatter, direct to and from the root. */
#include <string.h>

#include "algo.h"
#include "check.h"
#include "log.h"
#include "param.h"

/* Direct gather: every rank sends its block to the root. */
papcclResult_t papAlgoGatherDirect(struct papEngine* e, struct papCall* op) {
  int n = e->nranks, r = e->rank, root = op->root;
  size_t blk = op->count * papKernTypeSize(op->dtype);
  if (r != root) {
    PLAN_OK(papStepSend(e, root, op->sendbuff, blk, -1, -1));
    return papcclSuccess;
  }
  char* recv = (char*)op->recvbuff;
  PAP_CHECK(papStepCopyIfNeeded(e, recv + (size_t)r * blk, op->sendbuff, blk));
  for (int p = 0; p < n; p++)
    if (p != r) PLAN_OK(papStepRecv(e, p, recv + (size_t)p * blk, blk, -1, -1));
  return papcclSuccess;
}

/* Direct scatter: the root sends block p to rank p. */
papcclResult_t papAlgoScatterDirect(struct papEngine* e, struct papCall* op) {
  int n = e->nranks, r = e->rank, root = op->root;
  size_t blk = op->count * papKernTypeSize(op->dtype);
  if (r != root) {
    PLAN_OK(papStepRecv(e, root, op->recvbuff, blk, -1, -1));
    return papcclSuccess;
  }
  const char* send = (const char*)op->sendbuff;
  for (int p = 0; p < n; p++)
    if (p != r) PLAN_OK(papStepSend(e, p, send + (size_t)p * blk, blk, -1, -1));
  return papStepCopyIfNeeded(e, op->recvbuff, send + (size_t)r * blk, blk);
}
