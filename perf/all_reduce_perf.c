/* SPDX-License-Identifier: Apache-2.0 */
/* all_reduce_perf: papcclAllReduce bandwidth and latency, nccl-tests compatible. */
#include "common.h"

static void allReduceInit(const struct papPerfData* d) {
  papPerfFillInput(d->send, d->counts->sendCount, 0, d->type, d->op, d->rank, d->nranks, d->seed);
  if (d->expected == NULL) return;
  papPerfFillExpected(d->expected, d->counts->recvCount, 0, d->type, d->op, d->nranks, d->seed);
}

/* Each element crosses 2(n-1)/n links in a bandwidth-optimal allreduce. */
static void allReduceBw(size_t count, size_t eltSize, double sec, int nranks, double* algBw,
                        double* busBw) {
  *algBw = (double)(count * eltSize) / 1.0e9 / sec;
  *busBw = *algBw * (2.0 * (nranks - 1)) / nranks;
}

static papcclResult_t allReduceRun(const void* sendbuff, void* recvbuff, size_t count,
                                   papcclDataType_t type, papcclRedOp_t op, int root,
                                   papcclComm_t comm) {
  (void)root;
  return papcclAllReduce(sendbuff, recvbuff, count, type, op, comm, NULL);
}

static const struct papPerfColl allReduceColl = {
    .name = "AllReduce",
    .reduces = 1,
    .rooted = 0,
    .getCounts = papPerfCountsSame,
    .initData = allReduceInit,
    .getBw = allReduceBw,
    .run = allReduceRun,
};

int main(int argc, char** argv) {
  return papPerfMain(argc, argv, &allReduceColl);
}
