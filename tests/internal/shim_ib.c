/* SPDX-License-Identifier: Apache-2.0 */
/* Test shim for the ib transport: forwards to transport/ib with plain types. */
#include "tests/internal/shim_ib.h"

#include <infiniband/verbs.h>
#include <stdlib.h>
#include <string.h>

#include "arrival.h"
#include "ib/ib_handle.h"
#include "ib/ib_mrcache.h"
#include "ib/ib_rules.h"
#include "log.h"
#include "param.h"
#include "transport.h"

_Static_assert((int)PAP_TEST_IB_QP_RESET == (int)PAP_IB_QP_RESET &&
                   (int)PAP_TEST_IB_QP_INIT == (int)PAP_IB_QP_INIT &&
                   (int)PAP_TEST_IB_QP_RTR == (int)PAP_IB_QP_RTR &&
                   (int)PAP_TEST_IB_QP_RTS == (int)PAP_IB_QP_RTS &&
                   (int)PAP_TEST_IB_QP_ERROR == (int)PAP_IB_QP_ERROR &&
                   (int)PAP_TEST_IB_QP_NSTATES == (int)PAP_IB_QP_NSTATES,
               "qp states");
_Static_assert((int)PAP_TEST_IB_EV_TO_INIT == (int)PAP_IB_EV_TO_INIT &&
                   (int)PAP_TEST_IB_EV_TO_RTR == (int)PAP_IB_EV_TO_RTR &&
                   (int)PAP_TEST_IB_EV_TO_RTS == (int)PAP_IB_EV_TO_RTS &&
                   (int)PAP_TEST_IB_EV_FAIL == (int)PAP_IB_EV_FAIL &&
                   (int)PAP_TEST_IB_EV_TO_RESET == (int)PAP_IB_EV_TO_RESET &&
                   (int)PAP_TEST_IB_EV_NEVENTS == (int)PAP_IB_EV_NEVENTS,
               "qp events");
_Static_assert((int)PAP_TEST_IB_MSG_EAGER_FIRST == (int)PAP_IB_MSG_EAGER_FIRST &&
                   (int)PAP_TEST_IB_MSG_EAGER_MORE == (int)PAP_IB_MSG_EAGER_MORE &&
                   (int)PAP_TEST_IB_MSG_RTS == (int)PAP_IB_MSG_RTS &&
                   (int)PAP_TEST_IB_MSG_WRITE_DONE == (int)PAP_IB_MSG_WRITE_DONE &&
                   (int)PAP_TEST_IB_MSG_CTS == (int)PAP_IB_MSG_CTS &&
                   (int)PAP_TEST_IB_MSG_CREDIT == (int)PAP_IB_MSG_CREDIT &&
                   (int)PAP_TEST_IB_MSG_NOTIFY == (int)PAP_IB_MSG_NOTIFY,
               "message kinds");

static void toLib(const struct papTestIbHandle* t, struct papIbHandle* h) {
  memset(h, 0, sizeof(*h));
  h->rank = t->rank;
  h->nranks = t->nranks;
  h->linkLayer = t->linkLayer;
  h->mtu = t->mtu;
  h->lid = t->lid;
  h->port = t->port;
  memcpy(h->gid, t->gid, 16);
  h->boardAddr = t->boardAddr;
  h->boardRkey = t->boardRkey;
  h->bufSize = t->bufSize;
  h->nbufs = t->nbufs;
}

static void fromLib(const struct papIbHandle* h, struct papTestIbHandle* t) {
  memset(t, 0, sizeof(*t));
  t->rank = h->rank;
  t->nranks = h->nranks;
  t->linkLayer = h->linkLayer;
  t->mtu = h->mtu;
  t->lid = h->lid;
  t->port = h->port;
  memcpy(t->gid, h->gid, 16);
  t->boardAddr = h->boardAddr;
  t->boardRkey = h->boardRkey;
  t->bufSize = h->bufSize;
  t->nbufs = h->nbufs;
}

size_t papTestIbHandleBytes(void) {
  return papTransportIb.caps.handleBytes;
}

size_t papTestIbHandleHdrBytes(void) {
  return PAP_IB_HANDLE_HDR_BYTES;
}

int papTestIbMaxRanks(void) {
  return PAP_IB_MAX_RANKS;
}

size_t papTestIbHandleSize(int nranks) {
  return papIbHandleSize(nranks);
}

int papTestIbHandleEncode(const struct papTestIbHandle* t, const uint32_t* qpns, void* buf,
                          size_t bufBytes, const char** whyOut) {
  struct papIbHandle h;
  toLib(t, &h);
  return (int)papIbHandleEncode(&h, qpns, buf, bufBytes, whyOut);
}

int papTestIbHandleDecode(const void* buf, size_t bufBytes, int expectRank, int expectNranks,
                          struct papTestIbHandle* hOut, const char** whyOut) {
  struct papIbHandle h;
  papcclResult_t res = papIbHandleDecode(buf, bufBytes, expectRank, expectNranks, &h, whyOut);
  if (res == papcclSuccess) fromLib(&h, hOut);
  return (int)res;
}

uint32_t papTestIbHandleQpn(const void* buf, int idx) {
  return papIbHandleQpn(buf, idx);
}

int papTestIbNextState(int state, int event) {
  return papIbNextState(state, event);
}

const char* papTestIbStateName(int state) {
  return papIbStateName(state);
}

uint32_t papTestIbImmPack(int kind, unsigned credits) {
  return papIbImmPack(kind, credits);
}

int papTestIbImmKind(uint32_t imm) {
  return papIbImmKind(imm);
}

unsigned papTestIbImmCredits(uint32_t imm) {
  return papIbImmCredits(imm);
}

int papTestIbMsgIsData(int kind) {
  return papIbMsgIsData(kind);
}

int papTestIbShouldReturnCredits(unsigned pending, unsigned unreturned, unsigned nbufs) {
  return papIbShouldReturnCredits(pending, unreturned, nbufs);
}

/* ---- Registration cache ---- */

struct shimCache {
  struct papIbMrCache cache;
  papTestIbRegFn reg;
  papTestIbDeregFn dereg;
  void* arg;
};

static papcclResult_t shimReg(void* arg, void* addr, size_t bytes, int access, void** mrOut) {
  struct shimCache* s = (struct shimCache*)arg;
  return (papcclResult_t)s->reg(s->arg, addr, bytes, access, mrOut);
}

static void shimDereg(void* arg, void* mr) {
  struct shimCache* s = (struct shimCache*)arg;
  s->dereg(s->arg, mr);
}

void* papTestIbMrCacheNew(int cap, size_t pageSize, papTestIbRegFn reg, papTestIbDeregFn dereg,
                          void* arg, int* resOut) {
  struct shimCache* s = (struct shimCache*)calloc(1, sizeof(*s));
  if (s == NULL) {
    *resOut = (int)papcclSystemError;
    return NULL;
  }
  s->reg = reg;
  s->dereg = dereg;
  s->arg = arg;
  struct papIbMrOps ops = {shimReg, shimDereg, s};
  *resOut = (int)papIbMrCacheInit(&s->cache, &ops, cap, pageSize);
  if (*resOut != (int)papcclSuccess) {
    free(s);
    return NULL;
  }
  return s;
}

int papTestIbMrCacheGet(void* cache, const void* addr, size_t bytes, int access, void** entryOut) {
  struct papIbMrEntry* e = NULL;
  papcclResult_t res = papIbMrCacheGet(&((struct shimCache*)cache)->cache, addr, bytes, access, &e);
  if (res == papcclSuccess) *entryOut = e;
  return (int)res;
}

void papTestIbMrCachePut(void* cache, void* entry) {
  papIbMrCachePut(&((struct shimCache*)cache)->cache, (struct papIbMrEntry*)entry);
}

int papTestIbMrCacheInvalidate(void* cache, const void* addr, size_t bytes) {
  return papIbMrCacheInvalidate(&((struct shimCache*)cache)->cache, addr, bytes);
}

int papTestIbMrCacheCount(void* cache) {
  return ((struct shimCache*)cache)->cache.count;
}

void papTestIbMrCacheStats(void* cache, uint64_t* hits, uint64_t* misses, uint64_t* evictions) {
  struct papIbMrCache* c = &((struct shimCache*)cache)->cache;
  *hits = c->hits;
  *misses = c->misses;
  *evictions = c->evictions;
}

void papTestIbMrEntryInfo(void* entry, uintptr_t* addr, size_t* bytes, int* refs, void** mr) {
  struct papIbMrEntry* e = (struct papIbMrEntry*)entry;
  *addr = e->addr;
  *bytes = e->bytes;
  *refs = e->refs;
  *mr = e->mr;
}

int papTestIbMrCacheDestroy(void* cache) {
  struct shimCache* s = (struct shimCache*)cache;
  int inUse = papIbMrCacheDestroy(&s->cache);
  free(s);
  return inUse;
}

/* ---- The backend ---- */

int papTestUcxBuilt(void) {
#ifdef PAPCCL_HAVE_UCX
  return 1;
#else
  return 0;
#endif
}

int papTestIbDeviceCount(void) {
  int n = 0;
  struct ibv_device** list = ibv_get_device_list(&n);
  if (list == NULL) return 0;
  ibv_free_device_list(list);
  return n;
}

static const unsigned char testKey[16] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16};
static volatile int testAbort;

static papcclResult_t makeCtx(int nranks, const uint64_t* hostIds, struct papTransportCtx* ctx,
                              uint64_t** idsOut, int** pidsOut) {
  uint64_t* ids = (uint64_t*)calloc((size_t)nranks, sizeof(*ids));
  int* pids = (int*)calloc((size_t)nranks, sizeof(*pids));
  if (ids == NULL || pids == NULL) {
    free(ids);
    free(pids);
    return papcclSystemError;
  }
  memset(ctx, 0, sizeof(*ctx));
  for (int r = 0; r < nranks; r++) {
    ids[r] = hostIds ? hostIds[r] : 42;
    pids[r] = 1000 + r;
  }
  ctx->rank = 0;
  ctx->nranks = nranks;
  ctx->key = testKey;
  ctx->hostIds = ids;
  ctx->pids = pids;
  ctx->abortFlag = &testAbort;
  ctx->boardWords = papBoardWords(nranks); /* as the arrival layer sizes it */
  *idsOut = ids;
  *pidsOut = pids;
  return papcclSuccess;
}

int papTestIbInit(int nranks, void** stateOut) {
  struct papTransportCtx ctx;
  uint64_t* ids = NULL;
  int* pids = NULL;
  papcclResult_t res = makeCtx(nranks, NULL, &ctx, &ids, &pids);
  if (res == papcclSuccess) res = papTransportIb.init(&ctx, stateOut);
  free(ids);
  free(pids);
  return (int)res;
}

void papTestIbFinalize(void* state) {
  papTransportIb.finalize(state);
}

const char* papTestTransportSelect(int nranks, const uint64_t* hostIds) {
  struct papTransportCtx ctx;
  uint64_t* ids = NULL;
  int* pids = NULL;
  if (makeCtx(nranks, hostIds, &ctx, &ids, &pids) != papcclSuccess) return NULL;
  const struct papTransportOps* ops = papTransportSelect(&ctx);
  free(ids);
  free(pids);
  return ops ? ops->name : NULL;
}
