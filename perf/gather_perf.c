/* SPDX-License-Identifier: Apache-2.0 */
/* gather_perf: papcclGather bandwidth and latency, nccl-tests compatible. */
#include <string.h>

#include "common.h"

/* Per-rank chunk of nccl-tests: count / nranks rounded down to 16 bytes (may be 0). */
static size_t baseCount(size_t count, size_t eltSize, int nranks) {
  size_t align = 16 / eltSize ? 16 / eltSize : 1;
  return (count / (size_t)nranks) & ~(align - 1);
}

static void counts(size_t count, size_t eltSize, int nranks, struct papPerfCounts* out) {
  size_t b = baseCount(count, eltSize, nranks);
  out->sendCount = b;
  out->recvCount = b * (size_t)nranks;
  out->paramCount = b;
  out->sendInplaceOffset = b;
  out->recvInplaceOffset = 0;
}

/* The root's block r is rank r's input; other ranks' recvbuff must stay as it was. */
static void init(const struct papPerfData* d) {
  size_t b = d->counts->sendCount, es = papPerfTypeSize(d->type);
  papPerfFillInput(d->send, b, b * (size_t)d->rank, d->type, PAP_PERF_OP_NONE, d->rank, d->nranks,
                   d->seed);
  if (d->expected == NULL) return;
  if (d->rank != d->root) {
    memcpy(d->expected, d->recv, b * (size_t)d->nranks * es);
    return;
  }
  for (int r = 0; r < d->nranks; r++)
    papPerfFillInput((char*)d->expected + (size_t)r * b * es, b, b * (size_t)r, d->type,
                     PAP_PERF_OP_NONE, r, d->nranks, d->seed);
}

static void bw(size_t count, size_t eltSize, double sec, int nranks, double* algBw, double* busBw) {
  *algBw = (double)(count * eltSize * (size_t)nranks) / 1.0e9 / sec;
  *busBw = *algBw * (double)(nranks - 1) / nranks;
}

static papcclResult_t run(const void* s, void* r, size_t count, papcclDataType_t type,
                          papcclRedOp_t op, int root, papcclComm_t comm) {
  (void)op;
  return papcclGather(s, r, count, type, root, comm, NULL);
}

static const struct papPerfColl coll = {.name = "Gather",
                                        .reduces = 0,
                                        .rooted = 1,
                                        .getCounts = counts,
                                        .initData = init,
                                        .getBw = bw,
                                        .run = run};

int main(int argc, char** argv) {
  return papPerfMain(argc, argv, &coll);
}
