/* SPDX-License-Identifier: Apache-2.0 */
/* The ABI facts of nccl.h that papccl's header must share with NVIDIA's: sizes, offsets,
 * enum values, macros and initializer contents. abi_facts.c evaluates the list once against
 * each header (two objects, two include paths); the test compares them name by name. */
#ifndef PAPCCL_TESTS_NCCL_ABI_FACTS_H_
#define PAPCCL_TESTS_NCCL_ABI_FACTS_H_

#ifdef __cplusplus
extern "C" {
#endif

struct ncclAbiFact {
  const char* name;
  long long value;
};

/* Fills facts (at most max) and returns how many there are. The version this header claims
 * (NCCL_VERSION_CODE) is not among them: papccl claims another one on purpose. */
int ncclAbiFactsNvidia(struct ncclAbiFact* facts, int max);
int ncclAbiFactsPapccl(struct ncclAbiFact* facts, int max);
/* NCCL_VERSION_CODE and ncclConfig_t's initializer version of each header. */
int ncclAbiVersionNvidia(void);
int ncclAbiVersionPapccl(void);

#ifdef __cplusplus
}
#endif

#ifdef NCCL_ABI_FACTS_BODY
#include <stddef.h>

#define NCCL_ABI_FACT_LIST(X) \
  X(sizeof(ncclUniqueId)) \
  X(NCCL_UNIQUE_ID_BYTES) \
  X(sizeof(ncclComm_t)) \
  X(sizeof(ncclWindow_t)) \
  X(sizeof(ncclResult_t)) \
  X(sizeof(ncclDataType_t)) \
  X(sizeof(ncclRedOp_t)) \
  X(sizeof(ncclScalarResidence_t)) \
  X(sizeof(ncclConfig_t)) \
  X(sizeof(struct ncclConfig_v23100)) \
  X(offsetof(ncclConfig_t, size)) \
  X(offsetof(ncclConfig_t, magic)) \
  X(offsetof(ncclConfig_t, version)) \
  X(offsetof(ncclConfig_t, blocking)) \
  X(offsetof(ncclConfig_t, cgaClusterSize)) \
  X(offsetof(ncclConfig_t, minCTAs)) \
  X(offsetof(ncclConfig_t, maxCTAs)) \
  X(offsetof(ncclConfig_t, netName)) \
  X(offsetof(ncclConfig_t, splitShare)) \
  X(offsetof(ncclConfig_t, trafficClass)) \
  X(offsetof(ncclConfig_t, commName)) \
  X(offsetof(ncclConfig_t, collnetEnable)) \
  X(offsetof(ncclConfig_t, CTAPolicy)) \
  X(offsetof(ncclConfig_t, shrinkShare)) \
  X(offsetof(ncclConfig_t, nvlsCTAs)) \
  X(offsetof(ncclConfig_t, nChannelsPerNetPeer)) \
  X(offsetof(ncclConfig_t, nvlinkCentricSched)) \
  X(offsetof(ncclConfig_t, graphUsageMode)) \
  X(offsetof(ncclConfig_t, numRmaCtx)) \
  X(offsetof(ncclConfig_t, maxP2pPeers)) \
  X(offsetof(ncclConfig_t, graphStreamOrdering)) \
  X(offsetof(ncclConfig_t, launchOrderImplicit)) \
  X(offsetof(ncclConfig_t, numRmaSig)) \
  X(offsetof(ncclConfig_t, rmaEagerInit)) \
  X(offsetof(ncclConfig_t, hostCftMode)) \
  X(offsetof(ncclConfig_t, nvlsHostMode)) \
  X(sizeof(ncclCollConfig_t)) \
  X(sizeof(struct ncclCollConfig_v23200)) \
  X(offsetof(ncclCollConfig_t, magic)) \
  X(offsetof(ncclCollConfig_t, version)) \
  X(offsetof(ncclCollConfig_t, ext)) \
  X(offsetof(ncclCollConfig_t, minCTAs)) \
  X(offsetof(ncclCollConfig_t, maxCTAs)) \
  X(offsetof(ncclCollConfig_t, nvlsCTAs)) \
  X(offsetof(ncclCollConfig_t, cgaClusterSize)) \
  X(offsetof(ncclCollConfig_t, algSelection)) \
  X(offsetof(ncclCollConfig_t, forceAlgSelection)) \
  X(offsetof(ncclCollConfig_t, CTAPolicy)) \
  X(offsetof(ncclCollConfig_t, userProfilerTag)) \
  X(offsetof(ncclCollConfig_t, launchCompletionEvent)) \
  X(sizeof(ncclConfigExt_t)) \
  X(offsetof(ncclConfigExt_t, key.vendorId)) \
  X(offsetof(ncclConfigExt_t, key.optionId)) \
  X(offsetof(ncclConfigExt_t, val.i)) \
  X(sizeof(ncclEncryptionConfig_t)) \
  X(sizeof(struct ncclEncryptionConfig_v23200)) \
  X(offsetof(ncclEncryptionConfig_t, mode)) \
  X(offsetof(ncclEncryptionConfig_t, psk)) \
  X(NCCL_ENCRYPTION_MODE_NONE) \
  X(NCCL_ENCRYPTION_MODE_PSK) \
  X(sizeof(ncclParamHandle_t)) \
  X(ncclHostCftDefault) \
  X(ncclHostCftEnable) \
  X(ncclHostCftDisable) \
  X(ncclHostCftFallback) \
  X(ncclNvlsHostModeDefault) \
  X(ncclNvlsHostModeEnable) \
  X(ncclNvlsHostModeDisableTransport) \
  X(ncclNvlsHostModeDisableSymmetricMultimem) \
  X(ncclNvlsHostModeDisable) \
  X(sizeof(ncclSimInfo_t)) \
  X(sizeof(struct ncclSimInfo_v22200)) \
  X(offsetof(ncclSimInfo_t, magic)) \
  X(offsetof(ncclSimInfo_t, version)) \
  X(offsetof(ncclSimInfo_t, estimatedTime)) \
  X(ncclSuccess) \
  X(ncclUnhandledCudaError) \
  X(ncclSystemError) \
  X(ncclInternalError) \
  X(ncclInvalidArgument) \
  X(ncclInvalidUsage) \
  X(ncclRemoteError) \
  X(ncclInProgress) \
  X(ncclTimeout) \
  X(ncclNumResults) \
  X(ncclInt8) \
  X(ncclChar) \
  X(ncclUint8) \
  X(ncclInt32) \
  X(ncclInt) \
  X(ncclUint32) \
  X(ncclInt64) \
  X(ncclUint64) \
  X(ncclFloat16) \
  X(ncclHalf) \
  X(ncclFloat32) \
  X(ncclFloat) \
  X(ncclFloat64) \
  X(ncclDouble) \
  X(ncclBfloat16) \
  X(ncclFloat8e4m3) \
  X(ncclFloat8e5m2) \
  X(ncclNumTypes) \
  X(ncclSum) \
  X(ncclProd) \
  X(ncclMax) \
  X(ncclMin) \
  X(ncclAvg) \
  X(ncclNumOps) \
  X(ncclMaxRedOp) \
  X(ncclScalarDevice) \
  X(ncclScalarHostImmediate) \
  X(NCCL_CONFIG_UNDEF_INT) \
  X(NCCL_CONFIG_UNDEF_PTR == NULL) \
  X(NCCL_SPLIT_NOCOLOR) \
  X(NCCL_UNDEF_FLOAT * 1000) \
  X(NCCL_WIN_DEFAULT) \
  X(NCCL_WIN_COLL_SYMMETRIC) \
  X(NCCL_WIN_STRICT_ORDERING) \
  X(NCCL_WIN_GIN_ONLY) \
  X(NCCL_WIN_CFT_COUNTED) \
  X(NCCL_API_MAGIC) \
  X(NCCL_WIN_REQUIRED_ALIGNMENT) \
  X(NCCL_CTA_POLICY_DEFAULT) \
  X(NCCL_CTA_POLICY_EFFICIENCY) \
  X(NCCL_CTA_POLICY_ZERO) \
  X(NCCL_SHRINK_DEFAULT) \
  X(NCCL_SHRINK_ABORT) \
  X(NCCL_REVOKE_DEFAULT) \
  X(NCCL_MAJOR) \
  X(NCCL_VERSION(2, 8, 4)) \
  X(NCCL_VERSION(2, 9, 0)) \
  X(NCCL_VERSION(2, 28, 9)) \
  X(NCCL_VERSION(2, 32, 6)) \
  X(NCCL_COMM_NULL == NULL) \
  X(config.size) \
  X(config.magic) \
  X(config.blocking) \
  X(config.cgaClusterSize) \
  X(config.minCTAs) \
  X(config.maxCTAs) \
  X(config.netName == NULL) \
  X(config.splitShare) \
  X(config.trafficClass) \
  X(config.commName == NULL) \
  X(config.collnetEnable) \
  X(config.CTAPolicy) \
  X(config.shrinkShare) \
  X(config.nvlsCTAs) \
  X(config.nChannelsPerNetPeer) \
  X(config.nvlinkCentricSched) \
  X(config.graphUsageMode) \
  X(config.numRmaCtx) \
  X(config.maxP2pPeers) \
  X(config.graphStreamOrdering) \
  X(config.launchOrderImplicit) \
  X(config.numRmaSig) \
  X(config.rmaEagerInit) \
  X(config.hostCftMode) \
  X(config.nvlsHostMode) \
  X(coll.size) \
  X(coll.magic) \
  X(coll.ext == NULL) \
  X(coll.minCTAs) \
  X(coll.maxCTAs) \
  X(coll.nvlsCTAs) \
  X(coll.cgaClusterSize) \
  X(coll.algSelection == NULL) \
  X(coll.forceAlgSelection) \
  X(coll.CTAPolicy) \
  X(coll.userProfilerTag) \
  X(coll.launchCompletionEvent == NULL) \
  X(enc.size) \
  X(enc.magic) \
  X(enc.mode) \
  X(enc.psk == NULL) \
  X(sim.size) \
  X(sim.magic) \
  X(sim.estimatedTime * 1000)

#define NCCL_ABI_FACT_ENTRY(e) \
  if (n < max) facts[n] = (struct ncclAbiFact){#e, (long long)(e)}; \
  n++;

#define NCCL_ABI_FACTS_DEFINE(fn, versionFn) \
  int fn(struct ncclAbiFact* facts, int max) { \
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER; \
    ncclSimInfo_t sim = NCCL_SIM_INFO_INITIALIZER; \
    ncclCollConfig_t coll = NCCL_COLLCONFIG_INITIALIZER; \
    ncclEncryptionConfig_t enc = NCCL_ENCRYPTION_CONFIG_INITIALIZER; \
    int n = 0; \
    NCCL_ABI_FACT_LIST(NCCL_ABI_FACT_ENTRY) \
    return n; \
  } \
  int versionFn(void) { \
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER; \
    return (int)config.version == NCCL_VERSION_CODE ? NCCL_VERSION_CODE : -1; \
  }
#endif

#endif /* PAPCCL_TESTS_NCCL_ABI_FACTS_H_ */
