/* SPDX-License-Identifier: Apache-2.0 */
/* broadcast_perf: papcclBroadcast bandwidth and latency, nccl-tests compatible. */
#include <string.h>

#include "common.h"

/* Everyone ends with the root's input. */
static void init(const struct papPerfData* d) {
  size_t n = d->counts->sendCount;
  if (d->rank == d->root)
    papPerfFillInput(d->send, n, 0, d->type, PAP_PERF_OP_NONE, d->root, d->nranks, d->seed);
  if (d->expected == NULL) return;
  papPerfFillInput(d->expected, n, 0, d->type, PAP_PERF_OP_NONE, d->root, d->nranks, d->seed);
}

static papcclResult_t run(const void* s, void* r, size_t count, papcclDataType_t type,
                          papcclRedOp_t op, int root, papcclComm_t comm) {
  (void)op;
  return papcclBroadcast(s, r, count, type, root, comm, NULL);
}

static const struct papPerfColl coll = {.name = "Broadcast",
                                        .reduces = 0,
                                        .rooted = 1,
                                        .getCounts = papPerfCountsSame,
                                        .initData = init,
                                        .getBw = papPerfBwOneLink,
                                        .run = run};

int main(int argc, char** argv) {
  return papPerfMain(argc, argv, &coll);
}
