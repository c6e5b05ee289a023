/* SPDX-License-Identifier: Apache-2.0 */
/* The drop-in NCCL library (libnccl.so.2): NCCL's C API as thin wrappers over papccl.
 *
 * Every function is defined as pncclX and exported a second time as the weak alias ncclX,
 * as NVIDIA's library does, so that a profiling layer can define ncclX and forward to
 * pncclX. Types cross by value: the enums, the unique id and the config struct have the
 * same values and layouts on both sides (checked below at compile time). */
#include "nccl.h"

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "dropin.h"
#include "edge.h"
#include "log.h"
#include "papccl.h"

#ifdef PAPCCL_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

/* ---- The two APIs agree ------------------------------------------------------------------ */

_Static_assert(sizeof(ncclUniqueId) == sizeof(papcclUniqueId), "unique id size");
/* NCCL's config is papccl's with fields appended (papccl reads up to config->size). */
_Static_assert(sizeof(ncclConfig_t) >= sizeof(papcclConfig_t), "config size");
_Static_assert(offsetof(ncclConfig_t, blocking) == offsetof(papcclConfig_t, blocking), "config");
_Static_assert(offsetof(ncclConfig_t, commName) == offsetof(papcclConfig_t, commName), "config");
_Static_assert(offsetof(ncclConfig_t, nvlinkCentricSched) ==
                   offsetof(papcclConfig_t, nvlinkCentricSched),
               "config");
_Static_assert(sizeof(ncclResult_t) == sizeof(papcclResult_t), "result size");
_Static_assert(sizeof(ncclDataType_t) == sizeof(papcclDataType_t), "datatype size");
_Static_assert(sizeof(ncclRedOp_t) == sizeof(papcclRedOp_t), "op size");
_Static_assert((int)ncclInProgress == (int)papcclInProgress, "result values");
_Static_assert((int)ncclRemoteError == (int)papcclRemoteError, "result values");
/* ncclTimeout (8, NCCL 2.32) has no papccl counterpart: papccl never returns it. */
_Static_assert((int)ncclTimeout == (int)papcclNumResults, "result values");
_Static_assert((int)ncclFloat8e5m2 == (int)papcclFloat8e5m2, "datatype values");
_Static_assert((int)ncclBfloat16 == (int)papcclBfloat16, "datatype values");
_Static_assert((int)ncclNumTypes == (int)papcclNumTypes, "datatype values");
_Static_assert((int)ncclAvg == (int)papcclAvg && (int)ncclNumOps == (int)papcclNumOps, "ops");
_Static_assert((int)ncclScalarHostImmediate == (int)papcclScalarHostImmediate, "residence");
_Static_assert(NCCL_CONFIG_UNDEF_INT == PAPCCL_CONFIG_UNDEF_INT, "undef int");

/* ---- NCCL_* environment -------------------------------------------------------------------- */

/* Programs swapped onto papccl keep their NCCL_* settings for the variables whose meaning is
 * the same: each one is copied to its PAPCCL_* name unless that is set. Runs when the library
 * is loaded, before any thread of ours exists. NCCL_DEBUG_SUBSYS is not copied (NCCL's
 * subsystem names are not papccl's). */
const char* const papNcclEnvNames[PAP_NCCL_ENV_NAMES][2] = {
    {"NCCL_DEBUG", "PAPCCL_DEBUG"},
    {"NCCL_DEBUG_FILE", "PAPCCL_DEBUG_FILE"},
    {"NCCL_COMM_ID", "PAPCCL_COMM_ID"},
    {"NCCL_SOCKET_IFNAME", "PAPCCL_SOCKET_IFNAME"},
};

__attribute__((constructor)) static void ncclEnvImport(void) {
  for (int i = 0; i < PAP_NCCL_ENV_NAMES; i++) {
    const char* v = getenv(papNcclEnvNames[i][0]);
    if (v != NULL && getenv(papNcclEnvNames[i][1]) == NULL) setenv(papNcclEnvNames[i][1], v, 0);
  }
}

/* ---- A registry of the handles we give out --------------------------------------------- */

/* ncclMemAlloc host blocks and ncclCommRegister handles, so that a pointer we did not hand
 * out is refused with a message instead of being freed. */
enum {
  REG_HOST_BLOCK = 1,
  REG_BUFFER = 2
};
struct regEntry {
  void* key;
  int kind;
  ncclComm_t comm; /* REG_BUFFER */
};
static pthread_mutex_t regLock = PTHREAD_MUTEX_INITIALIZER;
static struct regEntry* regTab;
static size_t regN, regCap;

static int regAdd(void* key, int kind, ncclComm_t comm) {
  int ok = 1;
  pthread_mutex_lock(&regLock);
  if (regN == regCap) {
    size_t cap = regCap ? 2 * regCap : 64;
    struct regEntry* t = realloc(regTab, cap * sizeof(*t));
    if (t == NULL) {
      ok = 0;
    } else {
      regTab = t;
      regCap = cap;
    }
  }
  if (ok) regTab[regN++] = (struct regEntry){key, kind, comm};
  pthread_mutex_unlock(&regLock);
  return ok;
}

/* Removes (key, kind) and returns 1, or returns 0 when it is not there. With comm non-NULL
 * the entry must belong to that comm. */
static int regRemove(void* key, int kind, ncclComm_t comm) {
  int found = 0;
  pthread_mutex_lock(&regLock);
  for (size_t i = 0; i < regN; i++) {
    if (regTab[i].key == key && regTab[i].kind == kind &&
        (comm == NULL || regTab[i].comm == comm)) {
      regTab[i] = regTab[--regN];
      found = 1;
      break;
    }
  }
  pthread_mutex_unlock(&regLock);
  return found;
}

/* Logs why fn is refused (routed to comm's last error when comm is usable) and returns
 * ncclInvalidUsage. */
ncclResult_t papNcclNotImplemented(ncclComm_t comm, const char* fn, const char* what) {
  if (comm != NULL && papCommEnter(COMM(comm), fn) == papcclSuccess) {
    PAP_WARN("%s: %s is not implemented by papccl", fn, what);
    papCommLeave(COMM(comm));
  } else {
    papLogSetContext(-1, NULL, 0);
    PAP_WARN("%s: %s is not implemented by papccl", fn, what);
  }
  return ncclInvalidUsage;
}

ncclResult_t papNcclBadArg(const char* fn, const char* what) {
  papLogSetContext(-1, NULL, 0);
  PAP_WARN("%s: %s", fn, what);
  return ncclInvalidArgument;
}

/* ---- Memory ---------------------------------------------------------------------------------- */

NCCL_EXPORT ncclResult_t pncclMemAlloc(void** ptr, size_t size) {
  if (ptr == NULL) return papNcclBadArg("ncclMemAlloc", "ptr is NULL");
  *ptr = NULL;
  if (size == 0) return ncclSuccess;
#ifdef PAPCCL_HAVE_CUDA
  int ndev = 0;
  if (cudaGetDeviceCount(&ndev) == cudaSuccess && ndev > 0) {
    cudaError_t err = cudaMalloc(ptr, size);
    if (err == cudaSuccess) return ncclSuccess;
    papLogSetContext(-1, NULL, 0);
    PAP_WARN("ncclMemAlloc: cudaMalloc of %zu bytes failed: %s", size, cudaGetErrorString(err));
    *ptr = NULL;
    return ncclUnhandledCudaError;
  }
  (void)cudaGetLastError(); /* no usable GPU: clear the sticky error, use host memory */
#endif
  void* p = NULL;
  if (posix_memalign(&p, NCCL_WIN_REQUIRED_ALIGNMENT, size) != 0) {
    papLogSetContext(-1, NULL, 0);
    PAP_WARN("ncclMemAlloc: cannot allocate %zu bytes of host memory", size);
    return ncclSystemError;
  }
  if (!regAdd(p, REG_HOST_BLOCK, NULL)) {
    free(p);
    papLogSetContext(-1, NULL, 0);
    PAP_WARN("ncclMemAlloc: out of memory recording the block");
    return ncclSystemError;
  }
  *ptr = p;
  return ncclSuccess;
}
NCCL_ALIAS(ncclMemAlloc);

NCCL_EXPORT ncclResult_t pncclMemFree(void* ptr) {
  if (ptr == NULL) return ncclSuccess;
  if (regRemove(ptr, REG_HOST_BLOCK, NULL)) {
    free(ptr);
    return ncclSuccess;
  }
#ifdef PAPCCL_HAVE_CUDA
  struct cudaPointerAttributes attr;
  if (cudaPointerGetAttributes(&attr, ptr) == cudaSuccess && attr.type == cudaMemoryTypeDevice) {
    cudaError_t err = cudaFree(ptr);
    if (err == cudaSuccess) return ncclSuccess;
    papLogSetContext(-1, NULL, 0);
    PAP_WARN("ncclMemFree: cudaFree(%p) failed: %s", ptr, cudaGetErrorString(err));
    return ncclUnhandledCudaError;
  }
  (void)cudaGetLastError();
#endif
  return papNcclBadArg("ncclMemFree", "the pointer was not returned by ncclMemAlloc");
}
NCCL_ALIAS(ncclMemFree);

/* ---- Version, ids, errors ------------------------------------------------------------------ */

NCCL_EXPORT ncclResult_t pncclGetVersion(int* version) {
  if (version == NULL) return papNcclBadArg("ncclGetVersion", "version is NULL");
  *version = NCCL_VERSION_CODE;
  return ncclSuccess;
}
NCCL_ALIAS(ncclGetVersion);

NCCL_EXPORT ncclResult_t pncclGetUniqueId(ncclUniqueId* uniqueId) {
  return RES(papcclGetUniqueId((papcclUniqueId*)uniqueId));
}
NCCL_ALIAS(ncclGetUniqueId);

NCCL_EXPORT const char* pncclGetErrorString(ncclResult_t result) {
  switch (result) {
  case ncclSuccess:
    return "no error";
  case ncclUnhandledCudaError:
    return "unhandled cuda error (run with NCCL_DEBUG=INFO for details)";
  case ncclSystemError:
    return "unhandled system error (run with NCCL_DEBUG=INFO for details)";
  case ncclInternalError:
    return "internal error - please report this issue to the papccl developers";
  case ncclInvalidArgument:
    return "invalid argument (run with NCCL_DEBUG=WARN for details)";
  case ncclInvalidUsage:
    return "invalid usage (run with NCCL_DEBUG=WARN for details)";
  case ncclRemoteError:
    return "remote process exited or there was a network error";
  case ncclInProgress:
    return "NCCL operation in progress";
  default:
    return "unknown result code";
  }
}
NCCL_ALIAS(ncclGetErrorString);

NCCL_EXPORT const char* pncclGetLastError(ncclComm_t comm) {
  return papcclGetLastError(COMM(comm));
}
NCCL_ALIAS(ncclGetLastError);

/* NCCL re-reads NCCL_DEBUG on the next log line; papccl reads its log settings once. */
NCCL_EXPORT void pncclResetDebugInit(void) {}
NCCL_ALIAS(ncclResetDebugInit);
NCCL_EXPORT void ncclResetDebugInitInternal(void);
NCCL_EXPORT void ncclResetDebugInitInternal(void) {}

/* ---- Communicators --------------------------------------------------------------------------- */

NCCL_EXPORT ncclResult_t pncclCommInitRankConfig(ncclComm_t* comm, int nranks, ncclUniqueId commId,
                                                 int rank, ncclConfig_t* config) {
  papcclUniqueId id;
  memcpy(&id, &commId, sizeof(id));
  return RES(
      papcclCommInitRankConfig((papcclComm_t*)comm, nranks, id, rank, (papcclConfig_t*)config));
}
NCCL_ALIAS(ncclCommInitRankConfig);

NCCL_EXPORT ncclResult_t pncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId commId,
                                           int rank) {
  papcclUniqueId id;
  memcpy(&id, &commId, sizeof(id));
  return RES(papcclCommInitRank((papcclComm_t*)comm, nranks, id, rank));
}
NCCL_ALIAS(ncclCommInitRank);

/* NCCL spreads the bootstrap over nId roots; papccl's bootstrap has one root: every rank
 * meets at commIds[0]. Each other id's root (a thread of the process that made it) is
 * released by one rank, (i * nranks / nId) for id i, with a one-rank rendezvous on it, so
 * that no root waits out its timeout. */
NCCL_EXPORT ncclResult_t pncclCommInitRankScalable(ncclComm_t* newcomm, int nranks, int myrank,
                                                   int nId, ncclUniqueId* commIds,
                                                   ncclConfig_t* config) {
  const char* fn = "ncclCommInitRankScalable";
  if (commIds == NULL) return papNcclBadArg(fn, "commIds is NULL");
  if (nId < 1) {
    papLogSetContext(-1, NULL, 0);
    PAP_WARN("%s: nId %d must be at least 1", fn, nId);
    return ncclInvalidArgument;
  }
  if (nId > nranks && nranks > 0) {
    papLogSetContext(-1, NULL, 0);
    PAP_WARN("%s: nId %d exceeds nranks %d (at most one id per rank)", fn, nId, nranks);
    return ncclInvalidArgument;
  }
  ncclResult_t res = pncclCommInitRankConfig(newcomm, nranks, commIds[0], myrank, config);
  for (int i = 1; i < nId && res == ncclSuccess; i++) {
    if ((int)((int64_t)i * nranks / nId) != myrank) continue;
    papcclUniqueId id;
    papcclComm_t one = NULL;
    memcpy(&id, &commIds[i], sizeof(id));
    if (papcclCommInitRank(&one, 1, id, 0) == papcclSuccess) papcclCommDestroy(one);
  }
  return res;
}
NCCL_ALIAS(ncclCommInitRankScalable);

NCCL_EXPORT ncclResult_t pncclCommInitAll(ncclComm_t* comm, int ndev, const int* devlist) {
  return RES(papcclCommInitAll((papcclComm_t*)comm, ndev, devlist));
}
NCCL_ALIAS(ncclCommInitAll);

NCCL_EXPORT ncclResult_t pncclCommFinalize(ncclComm_t comm) {
  return RES(papcclCommFinalize(COMM(comm)));
}
NCCL_ALIAS(ncclCommFinalize);

NCCL_EXPORT ncclResult_t pncclCommDestroy(ncclComm_t comm) {
  return RES(papcclCommDestroy(COMM(comm)));
}
NCCL_ALIAS(ncclCommDestroy);

NCCL_EXPORT ncclResult_t pncclCommAbort(ncclComm_t comm) {
  return RES(papcclCommAbort(COMM(comm)));
}
NCCL_ALIAS(ncclCommAbort);

NCCL_EXPORT ncclResult_t pncclCommRevoke(ncclComm_t comm, int revokeFlags) {
  return RES(papcclCommRevoke(COMM(comm), revokeFlags));
}
NCCL_ALIAS(ncclCommRevoke);

NCCL_EXPORT ncclResult_t pncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t* newcomm,
                                        ncclConfig_t* config) {
  return RES(
      papcclCommSplit(COMM(comm), color, key, (papcclComm_t*)newcomm, (papcclConfig_t*)config));
}
NCCL_ALIAS(ncclCommSplit);

NCCL_EXPORT ncclResult_t pncclCommShrink(ncclComm_t comm, int* excludeRanksList,
                                         int excludeRanksCount, ncclComm_t* newcomm,
                                         ncclConfig_t* config, int shrinkFlags) {
  return RES(papcclCommShrink(COMM(comm), excludeRanksList, excludeRanksCount,
                              (papcclComm_t*)newcomm, (papcclConfig_t*)config, shrinkFlags));
}
NCCL_ALIAS(ncclCommShrink);

NCCL_EXPORT ncclResult_t pncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* asyncError) {
  return RES(papcclCommGetAsyncError(COMM(comm), (papcclResult_t*)asyncError));
}
NCCL_ALIAS(ncclCommGetAsyncError);

NCCL_EXPORT ncclResult_t pncclCommCount(const ncclComm_t comm, int* count) {
  return RES(papcclCommCount(COMM(comm), count));
}
NCCL_ALIAS(ncclCommCount);

NCCL_EXPORT ncclResult_t pncclCommCuDevice(const ncclComm_t comm, int* device) {
  return RES(papcclCommCuDevice(COMM(comm), device));
}
NCCL_ALIAS(ncclCommCuDevice);

NCCL_EXPORT ncclResult_t pncclCommUserRank(const ncclComm_t comm, int* rank) {
  return RES(papcclCommUserRank(COMM(comm), rank));
}
NCCL_ALIAS(ncclCommUserRank);

NCCL_EXPORT ncclResult_t pncclCommRegister(const ncclComm_t comm, void* buff, size_t size,
                                           void** handle) {
  const char* fn = "ncclCommRegister";
  ncclResult_t res = RES(papCommEnter(COMM(comm), fn));
  if (res != ncclSuccess) return res;
  if (handle == NULL || buff == NULL || size == 0) {
    PAP_WARN("%s: %s", fn,
             handle == NULL ? "handle is NULL"
             : buff == NULL ? "buff is NULL"
                            : "size is 0");
    res = ncclInvalidArgument;
  } else {
    /* The handle is a small block of ours, so that deregistration can check it. */
    void* h = malloc(1);
    if (h == NULL || !regAdd(h, REG_BUFFER, comm)) {
      free(h);
      PAP_WARN("%s: out of memory", fn);
      res = ncclSystemError;
    } else {
      *handle = h;
    }
  }
  papCommLeave(COMM(comm));
  return res;
}
NCCL_ALIAS(ncclCommRegister);

NCCL_EXPORT ncclResult_t pncclCommDeregister(const ncclComm_t comm, void* handle) {
  const char* fn = "ncclCommDeregister";
  ncclResult_t res = RES(papCommEnter(COMM(comm), fn));
  if (res != ncclSuccess) return res;
  if (handle == NULL || !regRemove(handle, REG_BUFFER, comm)) {
    PAP_WARN("%s: handle %p was not returned by ncclCommRegister on this communicator", fn, handle);
    res = ncclInvalidArgument;
  } else {
    free(handle);
  }
  papCommLeave(COMM(comm));
  return res;
}
NCCL_ALIAS(ncclCommDeregister);

NCCL_EXPORT ncclResult_t pncclCommWindowRegister(ncclComm_t comm, void* buff, size_t size,
                                                 ncclWindow_t* win, int winFlags) {
  return RES(papcclCommWindowRegister(COMM(comm), buff, size, (papcclWindow_t*)win, winFlags));
}
NCCL_ALIAS(ncclCommWindowRegister);

NCCL_EXPORT ncclResult_t pncclCommWindowDeregister(ncclComm_t comm, ncclWindow_t win) {
  return RES(papcclCommWindowDeregister(COMM(comm), (papcclWindow_t)win));
}
NCCL_ALIAS(ncclCommWindowDeregister);

/* ---- Custom reductions ----------------------------------------------------------------------- */

NCCL_EXPORT ncclResult_t pncclRedOpCreatePreMulSum(ncclRedOp_t* op, void* scalar,
                                                   ncclDataType_t datatype,
                                                   ncclScalarResidence_t residence,
                                                   ncclComm_t comm) {
  return RES(papcclRedOpCreatePreMulSum((papcclRedOp_t*)op, scalar, DT(datatype),
                                        (papcclScalarResidence_t)residence, COMM(comm)));
}
NCCL_ALIAS(ncclRedOpCreatePreMulSum);

NCCL_EXPORT ncclResult_t pncclRedOpDestroy(ncclRedOp_t op, ncclComm_t comm) {
  return RES(papcclRedOpDestroy(OP(op), COMM(comm)));
}
NCCL_ALIAS(ncclRedOpDestroy);

/* ---- Collectives ------------------------------------------------------------------------------ */

NCCL_EXPORT ncclResult_t pncclReduce(const void* sendbuff, void* recvbuff, size_t count,
                                     ncclDataType_t datatype, ncclRedOp_t op, int root,
                                     ncclComm_t comm, cudaStream_t stream) {
  return RES(papcclReduce(sendbuff, recvbuff, count, DT(datatype), OP(op), root, COMM(comm),
                          STREAM(stream)));
}
NCCL_ALIAS(ncclReduce);

NCCL_EXPORT ncclResult_t pncclBcast(void* buff, size_t count, ncclDataType_t datatype, int root,
                                    ncclComm_t comm, cudaStream_t stream) {
  return RES(papcclBcast(buff, count, DT(datatype), root, COMM(comm), STREAM(stream)));
}
NCCL_ALIAS(ncclBcast);

NCCL_EXPORT ncclResult_t pncclBroadcast(const void* sendbuff, void* recvbuff, size_t count,
                                        ncclDataType_t datatype, int root, ncclComm_t comm,
                                        cudaStream_t stream) {
  return RES(
      papcclBroadcast(sendbuff, recvbuff, count, DT(datatype), root, COMM(comm), STREAM(stream)));
}
NCCL_ALIAS(ncclBroadcast);

NCCL_EXPORT ncclResult_t pncclAllReduce(const void* sendbuff, void* recvbuff, size_t count,
                                        ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                                        cudaStream_t stream) {
  return RES(
      papcclAllReduce(sendbuff, recvbuff, count, DT(datatype), OP(op), COMM(comm), STREAM(stream)));
}
NCCL_ALIAS(ncclAllReduce);

NCCL_EXPORT ncclResult_t pncclReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount,
                                            ncclDataType_t datatype, ncclRedOp_t op,
                                            ncclComm_t comm, cudaStream_t stream) {
  return RES(papcclReduceScatter(sendbuff, recvbuff, recvcount, DT(datatype), OP(op), COMM(comm),
                                 STREAM(stream)));
}
NCCL_ALIAS(ncclReduceScatter);

NCCL_EXPORT ncclResult_t pncclAllGather(const void* sendbuff, void* recvbuff, size_t sendcount,
                                        ncclDataType_t datatype, ncclComm_t comm,
                                        cudaStream_t stream) {
  return RES(
      papcclAllGather(sendbuff, recvbuff, sendcount, DT(datatype), COMM(comm), STREAM(stream)));
}
NCCL_ALIAS(ncclAllGather);

NCCL_EXPORT ncclResult_t pncclAlltoAll(const void* sendbuff, void* recvbuff, size_t count,
                                       ncclDataType_t datatype, ncclComm_t comm,
                                       cudaStream_t stream) {
  return RES(papcclAlltoAll(sendbuff, recvbuff, count, DT(datatype), COMM(comm), STREAM(stream)));
}
NCCL_ALIAS(ncclAlltoAll);

NCCL_EXPORT ncclResult_t pncclGather(const void* sendbuff, void* recvbuff, size_t count,
                                     ncclDataType_t datatype, int root, ncclComm_t comm,
                                     cudaStream_t stream) {
  return RES(
      papcclGather(sendbuff, recvbuff, count, DT(datatype), root, COMM(comm), STREAM(stream)));
}
NCCL_ALIAS(ncclGather);

NCCL_EXPORT ncclResult_t pncclScatter(const void* sendbuff, void* recvbuff, size_t count,
                                      ncclDataType_t datatype, int root, ncclComm_t comm,
                                      cudaStream_t stream) {
  return RES(
      papcclScatter(sendbuff, recvbuff, count, DT(datatype), root, COMM(comm), STREAM(stream)));
}
NCCL_ALIAS(ncclScatter);

/* ---- Point to point and groups ------------------------------------------------------------- */

NCCL_EXPORT ncclResult_t pncclSend(const void* sendbuff, size_t count, ncclDataType_t datatype,
                                   int peer, ncclComm_t comm, cudaStream_t stream) {
  return RES(papcclSend(sendbuff, count, DT(datatype), peer, COMM(comm), STREAM(stream)));
}
NCCL_ALIAS(ncclSend);

NCCL_EXPORT ncclResult_t pncclRecv(void* recvbuff, size_t count, ncclDataType_t datatype, int peer,
                                   ncclComm_t comm, cudaStream_t stream) {
  return RES(papcclRecv(recvbuff, count, DT(datatype), peer, COMM(comm), STREAM(stream)));
}
NCCL_ALIAS(ncclRecv);

NCCL_EXPORT ncclResult_t pncclGroupStart(void) {
  return RES(papcclGroupStart());
}
NCCL_ALIAS(ncclGroupStart);

NCCL_EXPORT ncclResult_t pncclGroupEnd(void) {
  return RES(papcclGroupEnd());
}
NCCL_ALIAS(ncclGroupEnd);

NCCL_EXPORT ncclResult_t pncclGroupSimulateEnd(ncclSimInfo_t* simInfo) {
  (void)simInfo;
  return papNcclNotImplemented(
      NULL, "ncclGroupSimulateEnd",
      "simulating a group (the group stays open: end it with ncclGroupEnd)");
}
NCCL_ALIAS(ncclGroupSimulateEnd);

/* ---- NCCL 2.29 and 2.30 additions (PyPI torch imports them) --------------------------------- */

/* Growing a communicator (papcclCommGetUniqueId, papcclCommGrow: NCCL's semantics and
 * arguments, include/papccl.h). */
NCCL_EXPORT ncclResult_t pncclCommGetUniqueId(ncclComm_t comm, ncclUniqueId* uniqueId) {
  return RES(papcclCommGetUniqueId(COMM(comm), (papcclUniqueId*)uniqueId));
}
NCCL_ALIAS(ncclCommGetUniqueId);

NCCL_EXPORT ncclResult_t pncclCommGrow(ncclComm_t comm, int nRanks, const ncclUniqueId* uniqueId,
                                       int rank, ncclComm_t* newcomm, ncclConfig_t* config) {
  return RES(papcclCommGrow(COMM(comm), nRanks, (const papcclUniqueId*)uniqueId, rank,
                            (papcclComm_t*)newcomm, (papcclConfig_t*)config));
}
NCCL_ALIAS(ncclCommGrow);

/* Suspension and memory statistics: papccl's (src/api/comm_suspend.c), the same flag and
 * stat values. The byte counts are of the comm's large buffers, host or device memory. */
_Static_assert(NCCL_SUSPEND_MEM == PAPCCL_SUSPEND_MEM, "suspend flag");
_Static_assert((int)ncclStatGpuMemSuspend == (int)papcclStatMemSuspend &&
                   (int)ncclStatGpuMemSuspended == (int)papcclStatMemSuspended &&
                   (int)ncclStatGpuMemPersist == (int)papcclStatMemPersist &&
                   (int)ncclStatGpuMemTotal == (int)papcclStatMemTotal,
               "mem stat values");
NCCL_EXPORT ncclResult_t pncclCommSuspend(ncclComm_t comm, int flags) {
  return RES(papcclCommSuspend(COMM(comm), flags));
}
NCCL_ALIAS(ncclCommSuspend);

NCCL_EXPORT ncclResult_t pncclCommResume(ncclComm_t comm) {
  return RES(papcclCommResume(COMM(comm)));
}
NCCL_ALIAS(ncclCommResume);

NCCL_EXPORT ncclResult_t pncclCommMemStats(ncclComm_t comm, ncclCommMemStat_t stat,
                                           uint64_t* value) {
  return RES(papcclCommMemStats(COMM(comm), (papcclCommMemStat_t)stat, value));
}
NCCL_ALIAS(ncclCommMemStats);

/* Windows and one-sided calls (docs/ONE-SIDED.md): host buffers over papccl's one-sided
 * channel. */
NCCL_EXPORT ncclResult_t pncclWinGetUserPtr(ncclComm_t comm, ncclWindow_t win, void** outUserPtr) {
  return RES(papcclWinGetUserPtr(COMM(comm), (papcclWindow_t)win, outUserPtr));
}
NCCL_ALIAS(ncclWinGetUserPtr);

NCCL_EXPORT ncclResult_t pncclPutSignal(const void* localbuff, size_t count,
                                        ncclDataType_t datatype, int peer, ncclWindow_t peerWin,
                                        size_t peerWinOffset, int sigIdx, int ctx,
                                        unsigned int flags, ncclComm_t comm, cudaStream_t stream) {
  return RES(papcclPutSignal(localbuff, count, DT(datatype), peer, (papcclWindow_t)peerWin,
                             peerWinOffset, sigIdx, ctx, flags, COMM(comm), STREAM(stream)));
}
NCCL_ALIAS(ncclPutSignal);

NCCL_EXPORT ncclResult_t pncclSignal(int peer, int sigIdx, int ctx, unsigned int flags,
                                     ncclComm_t comm, cudaStream_t stream) {
  return RES(papcclSignal(peer, sigIdx, ctx, flags, COMM(comm), STREAM(stream)));
}
NCCL_ALIAS(ncclSignal);

/* ncclWaitSignalDesc_t and papcclWaitSignalDesc_t: the same four ints in the same order. */
_Static_assert(sizeof(ncclWaitSignalDesc_t) == sizeof(papcclWaitSignalDesc_t) &&
                   offsetof(ncclWaitSignalDesc_t, opCnt) ==
                       offsetof(papcclWaitSignalDesc_t, opCnt) &&
                   offsetof(ncclWaitSignalDesc_t, peer) == offsetof(papcclWaitSignalDesc_t, peer) &&
                   offsetof(ncclWaitSignalDesc_t, sigIdx) ==
                       offsetof(papcclWaitSignalDesc_t, sigIdx) &&
                   offsetof(ncclWaitSignalDesc_t, ctx) == offsetof(papcclWaitSignalDesc_t, ctx),
               "wait signal descriptors differ");
NCCL_EXPORT ncclResult_t pncclWaitSignal(int nDesc, ncclWaitSignalDesc_t* signalDescs,
                                         ncclComm_t comm, cudaStream_t stream) {
  return RES(papcclWaitSignal(nDesc, (const papcclWaitSignalDesc_t*)signalDescs, COMM(comm),
                              STREAM(stream)));
}
NCCL_ALIAS(ncclWaitSignal);
