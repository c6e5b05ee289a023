/* SPDX-License-Identifier: Apache-2.0 */
/* Version, unique id, error strings, last error, custom reduction operations. */
#include <stdatomic.h>
#include <string.h>

#include "api.h"
#include "arrival.h"
#include "bootstrap.h"
#include "check.h"
#include "kernels.h"
#include "log.h"

PAPCCL_API const char* papcclGetErrorString(papcclResult_t result) {
  return papResultString(result);
}

PAPCCL_API papcclResult_t papcclCommGetPapStats(papcclComm_t comm, papcclPapStats* stats) {
  PAP_CHECK(papCommEnter(comm, "papcclCommGetPapStats"));
  papcclResult_t res = papcclInvalidArgument;
  if (stats == NULL)
    PAP_WARN("papcclCommGetPapStats: stats is NULL");
  else
    res = papArrivalStats(comm, stats);
  papCommLeave(comm);
  return res;
}

PAPCCL_API papcclResult_t papcclCommDumpState(papcclComm_t comm, char* buf, size_t len) {
  PAP_CHECK(papCommEnter(comm, "papcclCommDumpState"));
  papcclResult_t res = papcclSuccess;
  if (buf == NULL || len == 0) {
    PAP_WARN("papcclCommDumpState: buf %p, len %zu: a buffer of at least 1 byte is needed",
             (void*)buf, len);
    res = papcclInvalidArgument;
  } else {
    papCommStateText(comm, buf, len);
  }
  papCommLeave(comm);
  return res;
}

PAPCCL_API papcclResult_t papcclGetVersion(int* version) {
  if (version == NULL) {
    papLogSetContext(-1, NULL, 0);
    PAP_WARN("papcclGetVersion: version is NULL");
    return papcclInvalidArgument;
  }
  *version = PAPCCL_VERSION_CODE;
  return papcclSuccess;
}

PAPCCL_API papcclResult_t papcclGetUniqueId(papcclUniqueId* uniqueId) {
  papLogSetContext(-1, NULL, 0);
  if (uniqueId == NULL) {
    PAP_WARN("papcclGetUniqueId: uniqueId is NULL");
    return papcclInvalidArgument;
  }
  return papBootstrapGetUniqueId(uniqueId);
}

PAPCCL_API const char* papcclGetLastError(papcclComm_t comm) {
  if (comm == NULL) return papLogThreadLastError();
  /* The shell outlives destroy, so reading it is safe even for a dead comm. Destroy or abort
   * on another thread may be marking it dead now (commRelease's seq_cst store): an atomic
   * load, as papCommEnter does. */
  uint64_t m = atomic_load_explicit((_Atomic uint64_t*)&comm->magic, memory_order_acquire);
  if (m != PAP_COMM_MAGIC && m != PAP_COMM_DEAD) return "invalid comm";
  return comm->lastError;
}

PAPCCL_API papcclResult_t papcclRedOpCreatePreMulSum(papcclRedOp_t* op, void* scalar,
                                                     papcclDataType_t datatype,
                                                     papcclScalarResidence_t residence,
                                                     papcclComm_t comm) {
  const char* fn = "papcclRedOpCreatePreMulSum";
  PAP_CHECK(papCommEnter(comm, fn));
  papcclResult_t res = papcclSuccess;
  if (op == NULL || scalar == NULL) {
    PAP_WARN("%s: %s is NULL", fn, op == NULL ? "op" : "scalar");
    res = papcclInvalidArgument;
    goto out;
  }
  if ((int)datatype < 0 || (int)datatype >= papcclNumTypes) {
    PAP_WARN("%s: invalid datatype %d", fn, (int)datatype);
    res = papcclInvalidArgument;
    goto out;
  }
  if (residence != papcclScalarHostImmediate) {
    PAP_WARN(
        "%s: residence %d is not supported for host buffers: use "
        "papcclScalarHostImmediate",
        fn, (int)residence);
    res = (residence == papcclScalarDevice) ? papcclInvalidUsage : papcclInvalidArgument;
    goto out;
  }
  pthread_mutex_lock(&comm->userOpLock);
  int slot = -1;
  for (int i = 0; i < PAP_MAX_USER_OPS && slot < 0; i++)
    if (!comm->userOps[i].inUse) slot = i;
  if (slot >= 0) {
    comm->userOps[slot].inUse = 1;
    comm->userOps[slot].dtype = datatype;
    memset(comm->userOps[slot].scalar, 0, sizeof(comm->userOps[slot].scalar));
    memcpy(comm->userOps[slot].scalar, scalar, papKernTypeSize(datatype));
  }
  pthread_mutex_unlock(&comm->userOpLock);
  if (slot < 0) {
    PAP_WARN("%s: all %d custom reduction ops of this communicator are in use", fn,
             PAP_MAX_USER_OPS);
    res = papcclInvalidUsage;
    goto out;
  }
  *op = (papcclRedOp_t)(papcclNumOps + slot);
out:
  papCommLeave(comm);
  return res;
}

PAPCCL_API papcclResult_t papcclRedOpDestroy(papcclRedOp_t op, papcclComm_t comm) {
  const char* fn = "papcclRedOpDestroy";
  PAP_CHECK(papCommEnter(comm, fn));
  papcclResult_t res = papcclSuccess;
  int idx = (int)op - papcclNumOps;
  pthread_mutex_lock(&comm->userOpLock);
  if (idx < 0 || idx >= PAP_MAX_USER_OPS || !comm->userOps[idx].inUse) {
    PAP_WARN("%s: op %d is not a custom reduction op of this communicator", fn, (int)op);
    res = papcclInvalidArgument;
  } else {
    comm->userOps[idx].inUse = 0;
  }
  pthread_mutex_unlock(&comm->userOpLock);
  papCommLeave(comm);
  return res;
}
