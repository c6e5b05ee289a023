/* SPDX-License-Identifier: Apache-2.0 */
/* Small-message PAP allreduce (docs/PAP.md A3): the early set exchanges raw inputs and
 * reduces them (S'), owner 0 sends S' to each late rank, late ranks send their raw inputs to
 * everyone, and every rank adds the late inputs to S' in rank order. Every rank performs the
 * same reductions in the same order, so all ranks get the same bits. */
#include <string.h>

#include "algo.h"
#include "check.h"
#include "log.h"

papcclResult_t papAlgoAllReduceSmall(struct papEngine* e, struct papCall* op) {
  int n = e->nranks;
  int r = e->rank;
  size_t bytes = op->count * papKernTypeSize(op->dtype);
  if (n == 1) return papStepCopyIfNeeded(e, op->recvbuff, op->sendbuff, bytes);
  struct papCommitView v;
  PAP_CHECK(papCommitViewInit(e, op, &v));
  const int* early = v.early;
  const int nE = v.nE;
  const int32_t* own = v.own;
  char* x = NULL; /* x + p * bytes: rank p's input */
  PAP_CHECK(papPlanScratch(e, bytes * (size_t)n + 64, (void**)&x));
  char* mine = x + (size_t)r * bytes;
  char* out = (char*)op->recvbuff;
  /* My input into scratch first: the sends read it there, so writing recvbuff (in place
   * too) never races them. */
  int cp = papStepCopy(e, mine, op->sendbuff, bytes, -1, -1);
  PLAN_OK(cp);
  int* got = NULL; /* step that produced x[p] */
  PAP_CHECK(papPlanScratch(e, sizeof(int) * (size_t)n, (void**)&got));
  for (int p = 0; p < n; p++)
    got[p] = p == r ? cp : -1;
  int acc = -1; /* the step that last wrote recvbuff */
  if (early[r]) {
    for (int p = 0; p < n; p++) /* raw input to the other early ranks */
      if (p != r && early[p]) PLAN_OK(papStepSend(e, p, mine, bytes, cp, -1));
    for (int p = 0; p < n; p++)
      if (p != r && early[p]) {
        got[p] = papStepRecv(e, p, x + (size_t)p * bytes, bytes, -1, -1);
        PLAN_OK(got[p]);
      }
    /* S' = fold over the early ranks in rank order, into recvbuff. */
    for (int p = 0; p < n; p++) {
      if (!early[p]) continue;
      const char* src = x + (size_t)p * bytes;
      if (acc < 0) {
        acc = papStepCopy(e, out, src, bytes, got[p], cp); /* after cp read sendbuff */
      } else {
        acc = papStepReduce(e, out, out, src, bytes, op->dtype, op->red, acc, got[p]);
      }
      PLAN_OK(acc);
    }
    if (r == own[0] && nE < n) {
      /* Send S' from a copy: recvbuff keeps changing (late inputs) while the sends run. */
      char* sp = NULL;
      PAP_CHECK(papPlanScratch(e, bytes + 64, (void**)&sp));
      int spi = papStepCopy(e, sp, out, bytes, acc, -1);
      PLAN_OK(spi);
      for (int p = 0; p < n; p++)
        if (!early[p]) PLAN_OK(papStepSend(e, p, sp, bytes, spi, -1));
      acc = spi; /* the next write of recvbuff waits for the copy to have read it */
    }
  } else {
    for (int p = 0; p < n; p++) /* raw input to everyone */
      if (p != r) PLAN_OK(papStepSend(e, p, mine, bytes, cp, -1));
    acc = papStepRecv(e, own[0], out, bytes, cp, -1); /* S' (after my copy: in place) */
    PLAN_OK(acc);
  }
  /* Late inputs, in rank order. */
  for (int p = 0; p < n; p++) {
    if (early[p]) continue;
    if (p != r) {
      got[p] = papStepRecv(e, p, x + (size_t)p * bytes, bytes, -1, -1);
      PLAN_OK(got[p]);
    }
    acc = papStepReduce(e, out, out, x + (size_t)p * bytes, bytes, op->dtype, op->red, acc, got[p]);
    PLAN_OK(acc);
  }
  return papcclSuccess;
}
