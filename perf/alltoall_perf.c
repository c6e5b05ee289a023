/* SPDX-License-Identifier: Apache-2.0 */
/* alltoall_perf: papcclAlltoAll bandwidth and latency, nccl-tests compatible. */
#include <string.h>

#include "common.h"

static void counts(size_t count, size_t eltSize, int nranks, struct papPerfCounts* out) {
  size_t b = papPerfBaseCount(count, eltSize, nranks);
  out->sendCount = b * (size_t)nranks;
  out->recvCount = b * (size_t)nranks;
  out->paramCount = b;
  out->sendInplaceOffset = 0;
  out->recvInplaceOffset = 0;
}

/* Block j of rank i's input goes to block i of rank j; each (i, j) block has its own
 * global index range. */
static void init(const struct papPerfData* d) {
  size_t b = d->counts->paramCount, es = papPerfTypeSize(d->type);
  int n = d->nranks;
  for (int j = 0; j < n; j++)
    papPerfFillInput((char*)d->send + (size_t)j * b * es, b, ((size_t)d->rank * n + j) * b, d->type,
                     PAP_PERF_OP_NONE, d->rank, n, d->seed);
  if (d->expected == NULL) return;
  for (int i = 0; i < n; i++)
    papPerfFillInput((char*)d->expected + (size_t)i * b * es, b, ((size_t)i * n + d->rank) * b,
                     d->type, PAP_PERF_OP_NONE, i, n, d->seed);
}

static papcclResult_t run(const void* s, void* r, size_t count, papcclDataType_t type,
                          papcclRedOp_t op, int root, papcclComm_t comm) {
  (void)op;
  (void)root;
  return papcclAlltoAll(s, r, count, type, comm, NULL);
}

static const struct papPerfColl coll = {.name = "AlltoAll",
                                        .reduces = 0,
                                        .rooted = 0,
                                        .getCounts = counts,
                                        .initData = init,
                                        .getBw = papPerfBwBlocks,
                                        .run = run};

int main(int argc, char** argv) {
  return papPerfMain(argc, argv, &coll);
}
