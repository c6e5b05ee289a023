/* SPDX-License-Identifier: Apache-2.0 */
#include "internal/shim_path.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "arrival_int.h"
#include "comm.h"
#include "op.h"
#include "param.h"

static int collOf(const char* name) {
  static const char* const names[] = {"allreduce",     "broadcast", "reduce", "allgather",
                                      "reducescatter", "alltoall",  "gather", "scatter",
                                      "send",          "recv"};
  for (int c = 0; c < PAP_COLL_COUNT; c++)
    if (strcmp(name, names[c]) == 0) return c;
  return -1;
}

static int internalAlgo(papcclPapAlgo_t a) {
  switch (a) {
  case papcclPapAlgoRing:
    return PAP_ALGO_RING;
  case papcclPapAlgoRhd:
    return PAP_ALGO_RHD;
  case papcclPapAlgoAc2s:
    return PAP_ALGO_AC2S;
  case papcclPapAlgoChain:
    return PAP_ALGO_CHAIN;
  case papcclPapAlgoSmall:
    return PAP_ALGO_SMALL;
  case papcclPapAlgoPap:
    return PAP_ALGO_ARRIVAL;
  default:
    return PAP_ALGO_AUTO;
  }
}

static papcclResult_t noPost(void* ctx, struct papStep* s) {
  (void)ctx;
  (void)s;
  return papcclInternalError;
}

int papTestPathDecide(const struct papTestPathComm* c, const struct papTestPathCall* call,
                      int* commitOut, char* why, size_t cap) {
  static const struct papDevStepOps devOps = {noPost, NULL, NULL, NULL};
  static char* arenas[64];
  papParamReset();
  struct papComm* comm = (struct papComm*)calloc(1, sizeof(*comm));
  struct papArrivalState* ps = (struct papArrivalState*)calloc(1, sizeof(*ps));
  /* Two comms: the batch's other ops (batchOps > 1) on the same one. */
  struct papOpDesc* ops = (struct papOpDesc*)calloc((size_t)call->batchOps + 1, sizeof(*ops));
  int path = -1;
  if (comm == NULL || ps == NULL || ops == NULL || collOf(call->coll) < 0) goto out;
  comm->nranks = ps->nranks = c->nranks;
  comm->rank = 1;
  comm->blocking = c->blocking;
  comm->hierLocal = c->hier ? comm : NULL; /* only looked at, never used */
  comm->arrival = ps;
  ps->flatCap = c->flatCap;
  ps->msg = c->msgBoard;
  comm->engine.nranks = c->nranks;
  if (c->arenaBytes) {
    comm->engine.dev.ops = &devOps;
    comm->engine.dev.arena = arenas;
    comm->engine.dev.bytes = c->arenaBytes;
    comm->engine.dev.minBytes = c->arenaMinBytes;
  }
  for (int i = 0; i < call->batchOps; i++) {
    struct papOpDesc* op = &ops[i];
    op->comm = comm;
    /* The call under test first; then the batch's other collectives, then sends. */
    op->call.coll = i == 0                 ? collOf(call->coll)
                    : i < call->batchColls ? PAP_COLL_ALLREDUCE
                                           : PAP_COLL_SEND;
    op->call.count = call->count;
    op->call.dtype = call->dtype;
    op->op = call->op;
    op->call.avg = call->op == papcclAvg && call->dtype <= papcclUint64;
    op->call.preMul = call->op == papcclAvg && !op->call.avg;
    op->forcedAlgo = internalAlgo(call->configAlgo);
  }
  papPathDecideBatch(ops, call->batchOps, call->grouped);
  path = ops[0].path.path;
  if (commitOut) *commitOut = ops[0].path.commit;
  papcclPapStats st;
  papPathStats(ps, &st);
  /* The batch's last op is the stats' last: the one under test is named by its own choice. */
  snprintf(why, cap, "%s: %s", papPathName(path), papPathWhyString(ops[0].path.why));
  if (ops[0].call.arena != (path == PAP_PATH_ARENA)) path = -2; /* the planners would disagree */
  if (call->batchOps == 1 && (st.pathOps[path < 0 ? 0 : path] != 1 || strcmp(st.lastPathWhy, why)))
    path = -3; /* not counted as decided */
out:
  free(ops);
  free(ps);
  free(comm);
  return path;
}
