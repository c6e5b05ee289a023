/* SPDX-License-Identifier: Apache-2.0 */
/* all_gather_perf: papcclAllGather bandwidth and latency, nccl-tests compatible. */
#include <string.h>

#include "common.h"

static void counts(size_t count, size_t eltSize, int nranks, struct papPerfCounts* out) {
  size_t b = papPerfBaseCount(count, eltSize, nranks);
  out->sendCount = b;
  out->recvCount = b * (size_t)nranks;
  out->paramCount = b;
  out->sendInplaceOffset = b;
  out->recvInplaceOffset = 0;
}

/* Block r of the result is rank r's input; inputs are indexed globally so blocks differ. */
static void init(const struct papPerfData* d) {
  size_t b = d->counts->sendCount, es = papPerfTypeSize(d->type);
  papPerfFillInput(d->send, b, b * (size_t)d->rank, d->type, PAP_PERF_OP_NONE, d->rank, d->nranks,
                   d->seed);
  if (d->expected == NULL) return;
  for (int r = 0; r < d->nranks; r++)
    papPerfFillInput((char*)d->expected + (size_t)r * b * es, b, b * (size_t)r, d->type,
                     PAP_PERF_OP_NONE, r, d->nranks, d->seed);
}

static papcclResult_t run(const void* s, void* r, size_t count, papcclDataType_t type,
                          papcclRedOp_t op, int root, papcclComm_t comm) {
  (void)op;
  (void)root;
  return papcclAllGather(s, r, count, type, comm, NULL);
}

static const struct papPerfColl coll = {.name = "AllGather",
                                        .reduces = 0,
                                        .rooted = 0,
                                        .getCounts = counts,
                                        .initData = init,
                                        .getBw = papPerfBwBlocks,
                                        .run = run};

int main(int argc, char** argv) {
  return papPerfMain(argc, argv, &coll);
}
