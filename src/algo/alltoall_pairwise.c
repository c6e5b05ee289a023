/* SPDX-License-Identifier: Apache-2.0 */
/* AlltoAll, pairwise exchange. */
#include <string.h>

#include "algo.h"
#include "check.h"
#include "log.h"
#include "param.h"

/* Pairwise exchange: at step s send to r+s and receive from r-s; all steps are posted at
 * once (different peers use different queues). In place, the input is copied aside first. */
papcclResult_t papAlgoAlltoAllPairwise(struct papEngine* e, struct papCall* op) {
  int n = e->nranks, r = e->rank;
  size_t blk = op->count * papKernTypeSize(op->dtype);
  const char* send = (const char*)op->sendbuff;
  char* recv = (char*)op->recvbuff;
  int dep = -1;
  if (send == recv && n > 1) {
    char* copy = NULL;
    PAP_CHECK(papPlanScratch(e, blk * (size_t)n, (void**)&copy));
    dep = papStepCopy(e, copy, send, blk * (size_t)n, -1, -1);
    PLAN_OK(dep);
    send = copy;
  }
  if (send != recv) {
    int c = papStepCopy(e, recv + (size_t)r * blk, send + (size_t)r * blk, blk, dep, -1);
    PLAN_OK(c);
  }
  for (int s = 1; s < n; s++) {
    int to = (r + s) % n, from = (r - s + n) % n;
    PLAN_OK(papStepSend(e, to, send + (size_t)to * blk, blk, dep, -1));
    PLAN_OK(papStepRecv(e, from, recv + (size_t)from * blk, blk, dep, -1));
  }
  return papcclSuccess;
}
