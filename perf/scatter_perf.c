/* SPDX-License-Identifier: Apache-2.0 */
/* scatter_perf: papcclScatter bandwidth and latency, nccl-tests compatible. */
#include <string.h>

#include "common.h"

static void counts(size_t count, size_t eltSize, int nranks, struct papPerfCounts* out) {
  size_t b = papPerfBaseCount(count, eltSize, nranks);
  out->sendCount = b * (size_t)nranks;
  out->recvCount = b;
  out->paramCount = b;
  out->sendInplaceOffset = 0;
  out->recvInplaceOffset = b;
}

/* Rank r ends with block r of the root's input. */
static void init(const struct papPerfData* d) {
  size_t b = d->counts->recvCount;
  if (d->rank == d->root)
    papPerfFillInput(d->send, b * (size_t)d->nranks, 0, d->type, PAP_PERF_OP_NONE, d->root,
                     d->nranks, d->seed);
  if (d->expected == NULL) return;
  papPerfFillInput(d->expected, b, b * (size_t)d->rank, d->type, PAP_PERF_OP_NONE, d->root,
                   d->nranks, d->seed);
}

static papcclResult_t run(const void* s, void* r, size_t count, papcclDataType_t type,
                          papcclRedOp_t op, int root, papcclComm_t comm) {
  (void)op;
  return papcclScatter(s, r, count, type, root, comm, NULL);
}

static const struct papPerfColl coll = {.name = "Scatter",
                                        .reduces = 0,
                                        .rooted = 1,
                                        .getCounts = counts,
                                        .initData = init,
                                        .getBw = papPerfBwBlocks,
                                        .run = run};

int main(int argc, char** argv) {
  return papPerfMain(argc, argv, &coll);
}
