/* SPDX-License-Identifier: Apache-2.0 */
/* The host functions of NCCL's device API (nccl_device.h, NCCL 2.28 to 2.32) in the drop-in
 * library, and ncclCommQueryProperties, which tells a program that papccl has none of it. */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "dropin.h"
#include "edge.h"
#include "log.h"

/* papccl has no device-side API. These exist so that programs linked against NVIDIA's
 * library, which reference them, load and run; each one refuses with a log line. Their
 * handle and requirement arguments are pointers to structs that are never touched. */
struct papNcclTeam {
  int nRanks, rank, stride;
};

static void devApiRefused(const char* fn) {
  papLogSetContext(-1, NULL, 0);
  PAP_WARN("%s: NCCL's device API is not implemented by papccl", fn);
}

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-parameter"
#define DEV_API_RESULT(name, params, comm) \
  NCCL_EXPORT ncclResult_t p##name params; \
  NCCL_EXPORT ncclResult_t p##name params { \
    return papNcclNotImplemented(comm, #name, "NCCL's device API"); \
  } \
  NCCL_ALIAS(name)

DEV_API_RESULT(ncclDevCommCreate, (ncclComm_t comm, const void* reqs, void* outDevComm), comm);
DEV_API_RESULT(ncclDevCommDestroy, (ncclComm_t comm, const void* devComm), comm);
DEV_API_RESULT(ncclLsaBarrierCreateRequirement,
               (struct papNcclTeam team, int nBarriers, void* outHandle, void* outReq), NULL);
DEV_API_RESULT(ncclGinBarrierCreateRequirement,
               (ncclComm_t comm, struct papNcclTeam team, int nBarriers, void* outHandle,
                void* outReq),
               comm);
DEV_API_RESULT(ncclLLA2ACreateRequirement, (int nBlocks, int nSlots, void* outHandle, void* outReq),
               NULL);
#pragma GCC diagnostic pop

#define DEV_API_TEAM(name) \
  NCCL_EXPORT struct papNcclTeam p##name(ncclComm_t comm); \
  NCCL_EXPORT struct papNcclTeam p##name(ncclComm_t comm) { \
    (void)comm; \
    devApiRefused(#name); \
    return (struct papNcclTeam){0, 0, 0}; \
  } \
  NCCL_ALIAS(name)

DEV_API_TEAM(ncclTeamWorld);
DEV_API_TEAM(ncclTeamLsa);
DEV_API_TEAM(ncclTeamRail);

#define DEV_API_RANK(name) \
  NCCL_EXPORT int p##name(ncclComm_t comm, struct papNcclTeam team, int rank); \
  NCCL_EXPORT int p##name(ncclComm_t comm, struct papNcclTeam team, int rank) { \
    (void)comm, (void)team, (void)rank; \
    devApiRefused(#name); \
    return -1; \
  } \
  NCCL_ALIAS(name)

DEV_API_RANK(ncclTeamRankToWorld);
DEV_API_RANK(ncclTeamRankToLsa);

NCCL_EXPORT int pncclLLA2ACalcSlots(int maxElts, int maxEltSize);
NCCL_EXPORT int pncclLLA2ACalcSlots(int maxElts, int maxEltSize) {
  (void)maxElts, (void)maxEltSize;
  devApiRefused("ncclLLA2ACalcSlots");
  return 0;
}
NCCL_ALIAS(ncclLLA2ACalcSlots);

/* Window pointers (nccl_device.h): papccl's windows are host buffers reached by its one-sided
 * calls (docs/ONE-SIDED.md); the device API is refused. */
NCCL_EXPORT ncclResult_t pncclGetLsaMultimemDevicePointer(ncclWindow_t window, size_t offset,
                                                          void** outPtr);
NCCL_EXPORT ncclResult_t pncclGetLsaMultimemDevicePointer(ncclWindow_t window, size_t offset,
                                                          void** outPtr) {
  (void)window, (void)offset;
  if (outPtr != NULL) *outPtr = NULL;
  return papNcclNotImplemented(NULL, "ncclGetLsaMultimemDevicePointer", "NCCL's device API");
}
NCCL_ALIAS(ncclGetLsaMultimemDevicePointer);

NCCL_EXPORT ncclResult_t pncclGetPeerDevicePointer(ncclWindow_t window, size_t offset, int peer,
                                                   void** outPtr);
NCCL_EXPORT ncclResult_t pncclGetPeerDevicePointer(ncclWindow_t window, size_t offset, int peer,
                                                   void** outPtr) {
  (void)window, (void)offset, (void)peer;
  if (outPtr != NULL) *outPtr = NULL;
  return papNcclNotImplemented(NULL, "ncclGetPeerDevicePointer", "NCCL's device API");
}
NCCL_ALIAS(ncclGetPeerDevicePointer);

/* NCCL 2.30-2.32 additions to the device API's host side. */
struct papNcclMultimemHandle {
  void* base;
};

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-parameter"
DEV_API_RESULT(ncclGetLsaDevicePointer,
               (ncclWindow_t window, size_t offset, int lsaRank, void** outPtr), NULL);
DEV_API_RESULT(ncclGetMultimemDevicePointer,
               (ncclWindow_t window, size_t offset, struct papNcclMultimemHandle multimem,
                void** outPtr),
               NULL);
DEV_API_RESULT(ncclGetMultimemDeviceLeInfo,
               (ncclWindow_t window, size_t offset, void* leId, size_t* leOffset), NULL);
DEV_API_RESULT(ncclGetCftDeviceLeInfo,
               (ncclWindow_t window, size_t offset, int peerCft, struct papNcclTeam cftTeam,
                void* leId, size_t* leOffset),
               NULL);
DEV_API_RESULT(ncclGetPeerDeviceLeInfo,
               (ncclWindow_t window, size_t offset, int peerWorld, void* leId, size_t* leOffset),
               NULL);
DEV_API_RESULT(ncclGinOutboxCreateRequirement,
               (int nBlocks, int sizeLog2, void* outHandle, void* outReq), NULL);
DEV_API_RESULT(ncclGinInboxA2ACreateRequirement,
               (struct papNcclTeam peers, int nBlocks, int sizeLog2, void* outHandle, void* outReq),
               NULL);
#pragma GCC diagnostic pop

NCCL_EXPORT struct papNcclTeam pncclTeamCft(ncclComm_t comm, int mode);
NCCL_EXPORT struct papNcclTeam pncclTeamCft(ncclComm_t comm, int mode) {
  (void)comm, (void)mode;
  devApiRefused("ncclTeamCft");
  return (struct papNcclTeam){0, 0, 0};
}
NCCL_ALIAS(ncclTeamCft);
DEV_API_TEAM(ncclTeamCftMultimem);

/* ncclCommProperties_t of NVIDIA's nccl_device/host.h (2.32), field for field. papccl fills
 * every field that lies within props->size. */
struct papNcclProps {
  size_t size;
  unsigned int magic;
  unsigned int version;
  int rank;
  int nRanks;
  int cudaDev;
  int nvmlDev;
  bool deviceApiSupport;
  bool multimemSupport;
  int ginType;
  int nLsaTeams;
  bool hostRmaSupport;
  int railedGinType;
  uint64_t commHash;
  int ginMinStride;
  int ginConnectionType;
  bool ginSupport[64];
  size_t devCommRuntimeVersionSize;
  bool cftSupport;
  bool cftMulticastSupport;
  bool cftCountedSupport;
};

/* What a program asks before it uses the device API: papccl has none of it (no device API,
 * multimem, GIN, CFT or host RMA); rank, size, device and hash are the comm's. */
NCCL_EXPORT ncclResult_t pncclCommQueryProperties(ncclComm_t comm, void* props);
NCCL_EXPORT ncclResult_t pncclCommQueryProperties(ncclComm_t comm, void* props) {
  const char* fn = "ncclCommQueryProperties";
  ncclResult_t res = RES(papCommEnter(COMM(comm), fn));
  if (res != ncclSuccess) return res;
  struct papNcclProps want;
  size_t size = 0;
  if (props == NULL) {
    PAP_WARN("%s: props is NULL", fn);
    res = ncclInvalidArgument;
  } else {
    memcpy(&size, props, sizeof(size));
    unsigned int magic;
    memcpy(&magic, (char*)props + offsetof(struct papNcclProps, magic), sizeof(magic));
    if (size < offsetof(struct papNcclProps, rank) || magic != NCCL_API_MAGIC) {
      PAP_WARN("%s: props->size %zu or magic %#x is wrong: use NCCL_COMM_PROPERTIES_INITIALIZER",
               fn, size, magic);
      res = ncclInvalidArgument;
    }
  }
  if (res == ncclSuccess) {
    memset(&want, 0, sizeof(want));
    want.rank = -1;
    want.cudaDev = -1;
    papcclCommUserRank(COMM(comm), &want.rank);
    papcclCommCount(COMM(comm), &want.nRanks);
    papcclCommCuDevice(COMM(comm), &want.cudaDev);
    want.nvmlDev = want.cudaDev;
    want.commHash = papCommHash(COMM(comm));
    want.ginMinStride = 1;
    size_t from = offsetof(struct papNcclProps, rank);
    size_t upto = size < sizeof(want) ? size : sizeof(want);
    memcpy((char*)props + from, (char*)&want + from, upto - from);
  }
  papCommLeave(COMM(comm));
  return res;
}
NCCL_ALIAS(ncclCommQueryProperties);
