/* SPDX-License-Identifier: Apache-2.0 */
/* Test shim for the ib transport: its pure parts (handle codec, QP state machine, wire
 * format, registration cache) and the backend's init and selection, in plain C types.
 * Results are papcclResult_t values as int. */
#ifndef PAPCCL_TESTS_SHIM_IB_H_
#define PAPCCL_TESTS_SHIM_IB_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- Handle codec ---- */
struct papTestIbHandle {
  int rank;
  int nranks;
  uint8_t linkLayer;
  uint8_t mtu;
  uint16_t lid;
  uint8_t port;
  uint8_t gid[16];
  uint64_t boardAddr;
  uint32_t boardRkey;
  uint32_t bufSize;
  uint32_t nbufs;
};
size_t papTestIbHandleBytes(void); /* the fixed handle size of the ops table */
size_t papTestIbHandleHdrBytes(void);
int papTestIbMaxRanks(void);
size_t papTestIbHandleSize(int nranks);
int papTestIbHandleEncode(const struct papTestIbHandle* h, const uint32_t* qpns, void* buf,
                          size_t bufBytes, const char** whyOut);
int papTestIbHandleDecode(const void* buf, size_t bufBytes, int expectRank, int expectNranks,
                          struct papTestIbHandle* hOut, const char** whyOut);
uint32_t papTestIbHandleQpn(const void* buf, int idx);

/* ---- QP state machine (values checked against the library's in the shim) ---- */
enum {
  PAP_TEST_IB_QP_RESET = 0,
  PAP_TEST_IB_QP_INIT = 1,
  PAP_TEST_IB_QP_RTR = 2,
  PAP_TEST_IB_QP_RTS = 3,
  PAP_TEST_IB_QP_ERROR = 4,
  PAP_TEST_IB_QP_NSTATES = 5
};
enum {
  PAP_TEST_IB_EV_TO_INIT = 0,
  PAP_TEST_IB_EV_TO_RTR = 1,
  PAP_TEST_IB_EV_TO_RTS = 2,
  PAP_TEST_IB_EV_FAIL = 3,
  PAP_TEST_IB_EV_TO_RESET = 4,
  PAP_TEST_IB_EV_NEVENTS = 5
};
int papTestIbNextState(int state, int event);
const char* papTestIbStateName(int state);

/* ---- Wire format ---- */
enum {
  PAP_TEST_IB_MSG_EAGER_FIRST = 1,
  PAP_TEST_IB_MSG_EAGER_MORE = 2,
  PAP_TEST_IB_MSG_RTS = 3,
  PAP_TEST_IB_MSG_WRITE_DONE = 4,
  PAP_TEST_IB_MSG_CTS = 5,
  PAP_TEST_IB_MSG_CREDIT = 6,
  PAP_TEST_IB_MSG_NOTIFY = 7
};
uint32_t papTestIbImmPack(int kind, unsigned credits);
int papTestIbImmKind(uint32_t imm);
unsigned papTestIbImmCredits(uint32_t imm);
int papTestIbMsgIsData(int kind);
int papTestIbShouldReturnCredits(unsigned pending, unsigned unreturned, unsigned nbufs);

/* ---- Registration cache driven by the test's callbacks ---- */
typedef int (*papTestIbRegFn)(void* arg, void* addr, size_t bytes, int access, void** mrOut);
typedef void (*papTestIbDeregFn)(void* arg, void* mr);
/* A cache (NULL and *resOut set on failure); free it with papTestIbMrCacheDestroy. */
void* papTestIbMrCacheNew(int cap, size_t pageSize, papTestIbRegFn reg, papTestIbDeregFn dereg,
                          void* arg, int* resOut);
int papTestIbMrCacheGet(void* cache, const void* addr, size_t bytes, int access, void** entryOut);
void papTestIbMrCachePut(void* cache, void* entry);
int papTestIbMrCacheInvalidate(void* cache, const void* addr, size_t bytes);
int papTestIbMrCacheCount(void* cache);
void papTestIbMrCacheStats(void* cache, uint64_t* hits, uint64_t* misses, uint64_t* evictions);
/* The registered range, users and backend handle of an entry. */
void papTestIbMrEntryInfo(void* entry, uintptr_t* addr, size_t* bytes, int* refs, void** mr);
/* Deregisters everything, frees the cache; returns the entries still in use. */
int papTestIbMrCacheDestroy(void* cache);

/* ---- The backend ---- */
int papTestUcxBuilt(void);
/* RDMA devices libibverbs sees (0 when none, whatever the reason). */
int papTestIbDeviceCount(void);
/* Calls the ib backend's init as rank 0 of nranks on one host; *stateOut stays NULL on
 * failure. papTestIbFinalize undoes a successful init. */
int papTestIbInit(int nranks, void** stateOut);
void papTestIbFinalize(void* state);
/* The transport papTransportSelect picks for rank 0 of nranks with these host ids (NULL if
 * none). */
const char* papTestTransportSelect(int nranks, const uint64_t* hostIds);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* PAPCCL_TESTS_SHIM_IB_H_ */
