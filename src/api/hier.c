/* SPDX-License-Identifier: Apache-2.0 */
/* Hierarchy across hosts: the schemes of docs/PAP.md 3.3.1.
 *
 * When a communicator's ranks span hosts and some host holds several of them, two inner
 * communicators are split off at init: hierLocal (the ranks of one host, over shared memory)
 * and hierCross (local rank i of every host, over the network; for i = 0, the host
 * leaders). An allreduce then runs as three collectives, in one of two schemes:
 *   - leaders: a reduce to the host leader on hierLocal, an allreduce among the leaders on
 *     their hierCross, and a broadcast from the leader on hierLocal;
 *   - rails (every host holds L ranks, L divides the count, PAPCCL_HIER_RAILS): a
 *     reduce-scatter on hierLocal, an allreduce of each local rank's slice of count/L on its
 *     hierCross, and an allgather on hierLocal: every rank's links carry a share between
 *     hosts, where the leaders' scheme leaves the others idle.
 * Each is an ordinary collective with its own PAP engine, so a host "arrives" on the cross
 * board when its local step is done, and the PAP-aware plans move the network work to the
 * hosts already there. One message per host and rail crosses the network per chunk.
 *
 * Which calls take it is the path decision's (papPathDecide, src/arrival/path.c): the same
 * on every rank, from what every rank sees alike: the op, the datatype, the count, the
 * comm's configuration and whether the call is inside a group. Buffers may be host or
 * device memory (the inner calls take the stream).
 */
#include <stdio.h>
#include <string.h>

#include "api.h"
#include "check.h"
#include "enqueue.h"
#include "log.h"
#include "param.h"

/* The lowest rank on r's host. */
static int firstOfHost(const struct papComm* comm, int r) {
  for (int q = 0; q < r; q++)
    if (comm->hostIds[q] == comm->hostIds[r]) return q;
  return r;
}

papcclResult_t papHierSetup(struct papComm* comm) {
  int n = comm->nranks;
  if (papParamHier() == 0 || n < 3 || comm->hostIds == NULL) return papcclSuccess;
  /* Hosts in order of their lowest rank: my host's index, my index on it. */
  int nhosts = 0, maxLocal = 0, myHost = 0, myLocal = 0;
  int myFirst = firstOfHost(comm, comm->rank);
  for (int r = 0; r < n; r++) {
    int first = firstOfHost(comm, r);
    if (first == r) {
      nhosts++;
      if (r < myFirst) myHost++;
      int local = 0;
      for (int q = r; q < n; q++)
        local += comm->hostIds[q] == comm->hostIds[r];
      if (local > maxLocal) maxLocal = local;
    }
    if (r < comm->rank && first == myFirst) myLocal++;
  }
  if (nhosts < 2 || maxLocal < 2) return papcclSuccess;
  papcclConfig_t cfg = PAPCCL_CONFIG_INITIALIZER;
  cfg.blocking = 1; /* the three steps of a hierarchical call run one after the other */
  comm->hierRails = nhosts * maxLocal == n && papParamHierRails() != 0;
  papcclResult_t res = papcclCommSplit(comm, myHost, comm->rank, &comm->hierLocal, &cfg);
  /* Without rails only the leaders cross the network: the others make no cross comm. */
  int cross = comm->hierRails || myLocal == 0 ? myLocal : PAPCCL_SPLIT_NOCOLOR;
  if (res == papcclSuccess) res = papcclCommSplit(comm, cross, comm->rank, &comm->hierCross, &cfg);
  papLogSetContext(comm->rank, comm->lastError, sizeof(comm->lastError));
  if (res != papcclSuccess) {
    PAP_WARN("cannot set up the host hierarchy (%d hosts): %s", nhosts, papResultString(res));
    papHierFree(comm, 1);
    return res;
  }
  PAP_INFO(PAP_LOG_INIT,
           "hierarchy: %d hosts, up to %d ranks each; rank %d is local rank %d of host %d%s%s",
           nhosts, maxLocal, comm->rank, myLocal, myHost, myLocal == 0 ? " (its leader)" : "",
           comm->hierRails ? "; every local rank crosses the network" : "");
  return papcclSuccess;
}

void papHierAbortFlags(struct papComm* comm) {
  struct papComm* inner[2] = {comm->hierLocal, comm->hierCross};
  for (int i = 0; i < 2; i++) {
    if (inner[i] == NULL) continue;
    atomic_store_explicit(&inner[i]->abortFlag, 1, memory_order_seq_cst);
    if (atomic_load_explicit(&inner[i]->transportLive, memory_order_acquire))
      inner[i]->tops->wake->wake(inner[i]->tstate);
  }
}

void papHierFree(struct papComm* comm, int abort) {
  struct papComm** inner[2] = {&comm->hierCross, &comm->hierLocal};
  for (int i = 0; i < 2; i++) {
    if (*inner[i] == NULL) continue;
    if (abort)
      papcclCommAbort(*inner[i]);
    else
      papcclCommDestroy(*inner[i]);
    *inner[i] = NULL;
  }
}

papcclResult_t papHierFinalize(struct papComm* comm) {
  papcclResult_t res = papcclSuccess;
  if (comm->hierLocal) res = papcclCommFinalize(comm->hierLocal);
  if (res == papcclSuccess && comm->hierCross) res = papcclCommFinalize(comm->hierCross);
  return res;
}

papcclResult_t papHierAsyncError(struct papComm* comm) {
  struct papComm* inner[2] = {comm->hierLocal, comm->hierCross};
  for (int i = 0; i < 2; i++) {
    if (inner[i] == NULL) continue;
    int e = atomic_load_explicit(&inner[i]->asyncError, memory_order_acquire);
    if (e != papcclSuccess) return (papcclResult_t)e;
  }
  return papcclSuccess;
}

/* Keeps the inner communicator's error text where the user will look for it. */
static papcclResult_t innerResult(struct papComm* comm, struct papComm* inner, papcclResult_t res) {
  if (res == papcclSuccess || res == papcclInProgress) return papcclSuccess;
  papLogSetContext(comm->rank, comm->lastError, sizeof(comm->lastError));
  if (inner->lastError[0])
    snprintf(comm->lastError, sizeof(comm->lastError), "%s", inner->lastError);
  papCommSetError(comm, res);
  return res;
}

/* The rails scheme: each local rank reduces one slice of count/L on the host, allreduces it
 * with the same slice of the other hosts, and the host gathers the slices. In place when the
 * caller's call is (NCCL's in-place forms of ReduceScatter and AllGather). */
static papcclResult_t railAllReduce(const struct papOpDesc* d, papcclRedOp_t op) {
  struct papComm* comm = d->comm;
  struct papComm* local = comm->hierLocal;
  size_t slice = d->call.count / (size_t)local->nranks;
  char* mine =
      (char*)d->call.recvbuff + (size_t)local->rank * slice * papKernTypeSize(d->call.dtype);
  papcclResult_t res =
      papcclReduceScatter(d->call.sendbuff, mine, slice, d->call.dtype, op, local, d->stream);
  PAP_CHECK(innerResult(comm, local, res));
  res = papcclAllReduce(mine, mine, slice, d->call.dtype, op, comm->hierCross, d->stream);
  PAP_CHECK(innerResult(comm, comm->hierCross, res));
  res = papcclAllGather(mine, d->call.recvbuff, slice, d->call.dtype, local, d->stream);
  PAP_CHECK(innerResult(comm, local, res));
  atomic_fetch_add_explicit(&comm->hierRailOps, 1, memory_order_relaxed);
  return papcclSuccess;
}

/* The leaders' scheme: the host reduces to its leader, the leaders allreduce between hosts,
 * and each leader broadcasts the result on its host. */
static papcclResult_t leaderAllReduce(const struct papOpDesc* d, papcclRedOp_t op) {
  struct papComm* comm = d->comm;
  struct papComm* local = comm->hierLocal;
  papcclResult_t res = papcclReduce(d->call.sendbuff, d->call.recvbuff, d->call.count,
                                    d->call.dtype, op, 0, local, d->stream);
  PAP_CHECK(innerResult(comm, local, res));
  if (local->rank == 0) {
    res = papcclAllReduce(d->call.recvbuff, d->call.recvbuff, d->call.count, d->call.dtype, op,
                          comm->hierCross, d->stream);
    PAP_CHECK(innerResult(comm, comm->hierCross, res));
  }
  res = papcclBroadcast(d->call.recvbuff, d->call.recvbuff, d->call.count, d->call.dtype, 0, local,
                        d->stream);
  PAP_CHECK(innerResult(comm, local, res));
  return papcclSuccess;
}

papcclResult_t papHierAllReduce(const struct papOpDesc* d, papcclRedOp_t op) {
  struct papComm* comm = d->comm;
  if (comm->hierRails && d->call.count % (size_t)comm->hierLocal->nranks == 0)
    PAP_CHECK(railAllReduce(d, op));
  else
    PAP_CHECK(leaderAllReduce(d, op));
  atomic_fetch_add_explicit(&comm->hierOps, 1, memory_order_relaxed);
  papLogSetContext(comm->rank, comm->lastError, sizeof(comm->lastError));
  return papcclSuccess;
}
