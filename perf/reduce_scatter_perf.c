/* SPDX-License-Identifier: Apache-2.0 */
/* reduce_scatter_perf: papcclReduceScatter bandwidth and latency, nccl-tests compatible. */
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

/* Rank r's result is the reduction of block r of every rank's input. */
static void init(const struct papPerfData* d) {
  size_t b = d->counts->recvCount;
  papPerfFillInput(d->send, b * (size_t)d->nranks, 0, d->type, d->op, d->rank, d->nranks, d->seed);
  if (d->expected == NULL) return;
  papPerfFillExpected(d->expected, b, b * (size_t)d->rank, d->type, d->op, d->nranks, d->seed);
}

static papcclResult_t run(const void* s, void* r, size_t count, papcclDataType_t type,
                          papcclRedOp_t op, int root, papcclComm_t comm) {
  (void)root;
  return papcclReduceScatter(s, r, count, type, op, comm, NULL);
}

static const struct papPerfColl coll = {.name = "ReduceScatter",
                                        .reduces = 1,
                                        .rooted = 0,
                                        .getCounts = counts,
                                        .initData = init,
                                        .getBw = papPerfBwBlocks,
                                        .run = run};

int main(int argc, char** argv) {
  return papPerfMain(argc, argv, &coll);
}
