/* SPDX-License-Identifier: Apache-2.0 */
/* sendrecv_perf: papcclSend and papcclRecv in a ring bandwidth and latency, nccl-tests compatible. */
#include <string.h>

#include "common.h"

/* Each rank sends to rank + 1 and receives rank - 1's input. */
static void init(const struct papPerfData* d) {
  size_t n = d->counts->sendCount;
  papPerfFillInput(d->send, n, 0, d->type, PAP_PERF_OP_NONE, d->rank, d->nranks, d->seed);
  if (d->expected == NULL) return;
  int prev = (d->rank - 1 + d->nranks) % d->nranks;
  papPerfFillInput(d->expected, n, 0, d->type, PAP_PERF_OP_NONE, prev, d->nranks, d->seed);
}

static papcclResult_t run(const void* s, void* r, size_t count, papcclDataType_t type,
                          papcclRedOp_t op, int root, papcclComm_t comm) {
  (void)op;
  (void)root;
  int rank = 0, n = 1;
  papcclResult_t res = papcclCommUserRank(comm, &rank);
  if (res == papcclSuccess) res = papcclCommCount(comm, &n);
  if (res != papcclSuccess) return res;
  res = papcclGroupStart();
  if (res != papcclSuccess) return res;
  papcclResult_t a = papcclSend(s, count, type, (rank + 1) % n, comm, NULL);
  papcclResult_t b = papcclRecv(r, count, type, (rank - 1 + n) % n, comm, NULL);
  res = papcclGroupEnd();
  return a != papcclSuccess ? a : b != papcclSuccess ? b : res;
}

static const struct papPerfColl coll = {.name = "SendRecv",
                                        .reduces = 0,
                                        .rooted = 0,
                                        .inPlaceUnchecked = 1,
                                        .getCounts = papPerfCountsSame,
                                        .initData = init,
                                        .getBw = papPerfBwOneLink,
                                        .run = run};

int main(int argc, char** argv) {
  return papPerfMain(argc, argv, &coll);
}
