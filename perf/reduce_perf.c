/* SPDX-License-Identifier: Apache-2.0 */
/* reduce_perf: papcclReduce bandwidth and latency, nccl-tests compatible. */
#include <string.h>

#include "common.h"

/* The root ends with the reduction; every other rank's recvbuff must stay untouched. */
static void init(const struct papPerfData* d) {
  size_t n = d->counts->sendCount;
  papPerfFillInput(d->send, n, 0, d->type, d->op, d->rank, d->nranks, d->seed);
  if (d->expected == NULL) return;
  if (d->rank == d->root)
    papPerfFillExpected(d->expected, n, 0, d->type, d->op, d->nranks, d->seed);
  else
    memcpy(d->expected, d->recv, n * papPerfTypeSize(d->type));
}

static papcclResult_t run(const void* s, void* r, size_t count, papcclDataType_t type,
                          papcclRedOp_t op, int root, papcclComm_t comm) {
  return papcclReduce(s, r, count, type, op, root, comm, NULL);
}

static const struct papPerfColl coll = {.name = "Reduce",
                                        .reduces = 1,
                                        .rooted = 1,
                                        .getCounts = papPerfCountsSame,
                                        .initData = init,
                                        .getBw = papPerfBwOneLink,
                                        .run = run};

int main(int argc, char** argv) {
  return papPerfMain(argc, argv, &coll);
}
