/* SPDX-License-Identifier: Apache-2.0 */
/* Queries of a comm: its asynchronous error, size, device and rank. */
#include <string.h>

#include "check.h"
#include "enqueue.h"
#include "lifecycle.h"
#include "log.h"

PAPCCL_API papcclResult_t papcclCommGetAsyncError(papcclComm_t comm, papcclResult_t* asyncError) {
  PAP_CHECK(papCommEnter(comm, "papcclCommGetAsyncError"));
  papcclResult_t res = papcclSuccess;
  if (asyncError == NULL) {
    PAP_WARN("papcclCommGetAsyncError: asyncError is NULL");
    res = papcclInvalidArgument;
  } else {
    int e = atomic_load_explicit(&comm->asyncError, memory_order_acquire);
    if (e == papcclSuccess) e = papHierAsyncError(comm);
    /* A revoked comm: in progress until its operations have stopped, then fine for the
     * management calls (as NCCL's). */
    if (atomic_load_explicit(&comm->revoked, memory_order_acquire))
      e = papCommQuiescent(comm) ? papcclSuccess : papcclInProgress;
    /* Device ops queued in stream order are enqueued, not "in progress" (as NCCL's). */
    if (e == papcclSuccess && !comm->blocking &&
        atomic_load_explicit(&comm->pendingHostJobs, memory_order_acquire) > 0)
      e = papcclInProgress;
    *asyncError = (papcclResult_t)e;
  }
  papCommLeave(comm);
  return res;
}

static papcclResult_t queryInt(papcclComm_t comm, int* out, const char* fn, int which) {
  PAP_CHECK(papCommEnter(comm, fn));
  papcclResult_t res = papcclSuccess;
  if (out == NULL) {
    PAP_WARN("%s: output pointer is NULL", fn);
    res = papcclInvalidArgument;
  } else {
    *out = which == 0 ? comm->nranks : which == 1 ? comm->cudaDev : comm->rank;
  }
  papCommLeave(comm);
  return res;
}

PAPCCL_API papcclResult_t papcclCommCount(const papcclComm_t comm, int* count) {
  return queryInt(comm, count, "papcclCommCount", 0);
}
PAPCCL_API papcclResult_t papcclCommCuDevice(const papcclComm_t comm, int* device) {
  return queryInt(comm, device, "papcclCommCuDevice", 1);
}
PAPCCL_API papcclResult_t papcclCommUserRank(const papcclComm_t comm, int* rank) {
  return queryInt(comm, rank, "papcclCommUserRank", 2);
}

uint64_t papCommHash(const struct papComm* comm) {
  /* The comm's key (the same on every rank, fresh for every comm) through mix64. */
  uint64_t k0, k1;
  memcpy(&k0, comm->key, 8);
  memcpy(&k1, comm->key + 8, 8);
  return mix64(k0 ^ mix64(k1));
}
