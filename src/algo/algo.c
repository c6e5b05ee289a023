/* SPDX-License-Identifier: Apache-2.0 */
/* Algorithm dispatch, selection and the unit tracker shared by the planners. */
#include "algo.h"

#include <string.h>
#include <strings.h>

#include "check.h"
#include "log.h"
#include "param.h"

const char* papAlgoName(enum papAlgo a) {
  switch (a) {
  case PAP_ALGO_RING:
    return "ring";
  case PAP_ALGO_RHD:
    return "rhd";
  case PAP_ALGO_AC2S:
    return "ac2s";
  case PAP_ALGO_AC2S_DET:
    return "ac2s-det";
  case PAP_ALGO_CHAIN:
    return "chain";
  case PAP_ALGO_SMALL:
    return "small";
  case PAP_ALGO_ARRIVAL:
    return "pap";
  case PAP_ALGO_FLAT:
    return "flat";
  default:
    return "auto";
  }
}

enum papAlgo papAlgoFromName(const char* name) {
  if (strcasecmp(name, "ring") == 0) return PAP_ALGO_RING;
  if (strcasecmp(name, "rhd") == 0) return PAP_ALGO_RHD;
  if (strcasecmp(name, "ac2s") == 0) return PAP_ALGO_AC2S;
  if (strcasecmp(name, "chain") == 0) return PAP_ALGO_CHAIN;
  if (strcasecmp(name, "small") == 0) return PAP_ALGO_SMALL;
  if (strcasecmp(name, "pap") == 0) return PAP_ALGO_ARRIVAL;
  static int warned;
  if (!__atomic_exchange_n(&warned, 1, __ATOMIC_RELAXED))
    PAP_WARN(
        "PAPCCL_ALGO=%s is not an allreduce algorithm of this build (ring, rhd, ac2s, chain, "
        "small); "
        "choosing automatically",
        name);
  return PAP_ALGO_AUTO;
}

enum papAlgo papAlgoClassicAllReduce(size_t bytes) {
  return bytes <= (size_t)papParamRhdMaxBytes() ? PAP_ALGO_RHD : PAP_ALGO_RING;
}

papcclResult_t papStepCopyIfNeeded(struct papEngine* e, void* dst, const void* src, size_t bytes) {
  if (dst != src && bytes) PLAN_OK(papStepCopy(e, dst, src, bytes, -1, -1));
  return papcclSuccess;
}

papcclResult_t papAlgoPlan(struct papEngine* e, struct papCall* op, struct papChain** chainOut) {
  *chainOut = NULL;
  size_t result = op->count * papKernTypeSize(op->dtype);
  papPlanBeginOp(e, op->seq, op->coll == PAP_COLL_ALLGATHER ? result * (size_t)e->nranks : result);
  /* Through the ranks' device memory: the op's path (the same on every rank). */
  if (op->arena) return papAlgoArena(e, op);
  switch (op->coll) {
  case PAP_COLL_ALLREDUCE:
    /* op->commit.algo was fixed at arrival: the same on every rank (the arrival layer). */
    switch (op->commit.algo) {
    case PAP_ALGO_RHD:
      return papAlgoAllReduceRhd(e, op);
    case PAP_ALGO_AC2S:
    case PAP_ALGO_AC2S_DET:
      return papAlgoAllReduceAc2s(e, op);
    case PAP_ALGO_SMALL:
      return papAlgoAllReduceSmall(e, op);
    case PAP_ALGO_CHAIN: {
      return papAlgoAllReduceChainBegin(e, op, chainOut);
    }
    default:
      return papAlgoAllReduceRing(e, op);
    }
  case PAP_COLL_BROADCAST:
    return op->commit.algo == PAP_ALGO_ARRIVAL ? papAlgoBroadcastArrival(e, op)
                                               : papAlgoBroadcastChain(e, op);
  case PAP_COLL_REDUCE:
    return op->commit.algo == PAP_ALGO_ARRIVAL ? papAlgoReduceArrival(e, op)
                                               : papAlgoReduceChain(e, op);
  case PAP_COLL_ALLGATHER:
    return op->commit.algo == PAP_ALGO_ARRIVAL ? papAlgoAllGatherArrival(e, op)
                                               : papAlgoAllGatherRing(e, op);
  case PAP_COLL_REDUCESCATTER:
    return op->commit.algo == PAP_ALGO_ARRIVAL ? papAlgoReduceScatterArrival(e, op)
                                               : papAlgoReduceScatterRing(e, op);
  case PAP_COLL_ALLTOALL:
    return papAlgoAlltoAllPairwise(e, op);
  case PAP_COLL_GATHER:
    return papAlgoGatherDirect(e, op);
  case PAP_COLL_SCATTER:
    return papAlgoScatterDirect(e, op);
  case PAP_COLL_SEND:
  case PAP_COLL_RECV:
    return papAlgoSendRecv(e, op);
  default:
    PAP_WARN("internal error: unknown collective %d", op->coll);
    return papcclInternalError;
  }
}

int papAlgoArrivalOrdered(int algo) {
  return algo == PAP_ALGO_AC2S || algo == PAP_ALGO_AC2S_DET || algo == PAP_ALGO_SMALL ||
         algo == PAP_ALGO_ARRIVAL;
}

papcclResult_t papCommitViewInit(struct papEngine* e, const struct papCall* op,
                                 struct papCommitView* v) {
  int n = e->nranks;
  v->n = n;
  v->r = e->rank;
  int* mem = NULL;
  PAP_CHECK(papPlanScratch(e, sizeof(int) * 5 * (size_t)n, (void**)&mem));
  v->early = mem;
  v->late = mem + n;
  v->lateIdx = mem + 2 * n;
  v->order = mem + 3 * n;
  int32_t* ident = (int32_t*)(mem + 4 * n);
  if (papAlgoArrivalOrdered(op->commit.algo) && op->commit.owners != NULL && op->commit.nE >= 1 &&
      op->commit.nE <= n) {
    v->nE = op->commit.nE;
    v->own = op->commit.owners;
  } else {
    for (int p = 0; p < n; p++)
      ident[p] = p;
    v->nE = n;
    v->own = ident;
  }
  memset(v->early, 0, sizeof(int) * (size_t)n);
  v->myBlock = -1;
  for (int j = 0; j < v->nE; j++) {
    v->early[v->own[j]] = 1;
    v->order[j] = v->own[j];
    if (v->own[j] == v->r) v->myBlock = j;
  }
  v->nLate = 0;
  for (int p = 0; p < n; p++) {
    v->lateIdx[p] = -1;
    if (!v->early[p]) {
      v->lateIdx[p] = v->nLate;
      v->order[v->nE + v->nLate] = p;
      v->late[v->nLate++] = p;
    }
  }
  return papcclSuccess;
}

papcclResult_t papGeomInit(struct papEngine* e, struct papGeom* g, const void* sendbuff,
                           void* recvbuff, size_t count, size_t esz, int nblocks) {
  memset(g, 0, sizeof(*g));
  g->sendbuff = (const char*)sendbuff;
  g->recvbuff = (char*)recvbuff;
  g->esz = esz;
  g->nblocks = nblocks;
  size_t chunkBytes = (size_t)papParamChunkSize();
  if (chunkBytes < 64) chunkBytes = 64;
  g->chunkElems = chunkBytes / esz;
  size_t base = count / (size_t)nblocks;
  size_t rem = count % (size_t)nblocks;
  /* units: sum over blocks of ceil(n / chunkElems) */
  size_t nunits = 0;
  for (int b = 0; b < nblocks; b++) {
    size_t n = base + ((size_t)b < rem);
    nunits += (n + g->chunkElems - 1) / g->chunkElems;
  }
  size_t bytes = sizeof(size_t) * (size_t)(nblocks + 1) + sizeof(int) * (size_t)(nblocks + 1) +
                 nunits * (2 * sizeof(int32_t) + 1) + 64;
  void* mem = NULL;
  PAP_CHECK(papPlanScratch(e, bytes, &mem));
  char* p = (char*)mem;
  g->blkOff = (size_t*)p;
  p += sizeof(size_t) * (size_t)(nblocks + 1);
  g->lastW = (int32_t*)p;
  p += sizeof(int32_t) * nunits;
  g->lastR = (int32_t*)p;
  p += sizeof(int32_t) * nunits;
  g->unitOff = (int*)p;
  p += sizeof(int) * (size_t)(nblocks + 1);
  g->written = (uint8_t*)p;
  size_t off = 0;
  int u = 0;
  for (int b = 0; b < nblocks; b++) {
    size_t n = base + ((size_t)b < rem);
    g->blkOff[b] = off;
    g->unitOff[b] = u;
    off += n;
    u += (int)((n + g->chunkElems - 1) / g->chunkElems);
  }
  g->blkOff[nblocks] = off;
  g->unitOff[nblocks] = u;
  g->nunits = u;
  for (int i = 0; i < u; i++) {
    g->lastW[i] = -1;
    g->lastR[i] = -1;
    g->written[i] = 0;
  }
  return papcclSuccess;
}

void papGeomUnit(const struct papGeom* g, int b, int k, size_t* offElems, size_t* nElems) {
  size_t start = g->blkOff[b] + (size_t)k * g->chunkElems;
  size_t end = start + g->chunkElems;
  if (end > g->blkOff[b + 1]) end = g->blkOff[b + 1];
  *offElems = start;
  *nElems = end - start;
}

int papGeomSend(struct papEngine* e, struct papGeom* g, int peer, int b, int k) {
  int u = g->unitOff[b] + k;
  size_t off, n;
  papGeomUnit(g, b, k, &off, &n);
  const char* src = (g->written[u] ? g->recvbuff : g->sendbuff) + off * g->esz;
  int idx = papStepSend(e, peer, src, n * g->esz, g->lastW[u], -1);
  if (idx >= 0) g->lastR[u] = idx;
  return idx;
}

int papGeomRecv(struct papEngine* e, struct papGeom* g, int peer, int b, int k) {
  int u = g->unitOff[b] + k;
  size_t off, n;
  papGeomUnit(g, b, k, &off, &n);
  int idx = papStepRecv(e, peer, g->recvbuff + off * g->esz, n * g->esz, g->lastW[u], g->lastR[u]);
  if (idx >= 0) {
    g->lastW[u] = idx;
    g->lastR[u] = -1;
    g->written[u] = 1;
  }
  return idx;
}

int papGeomPublish(struct papEngine* e, struct papGeom* g, int b, int k, int slot, uint64_t tag,
                   int readers) {
  int u = g->unitOff[b] + k;
  size_t off, n;
  papGeomUnit(g, b, k, &off, &n);
  int idx = papStepPublish(e, papGeomSrc(g, b, k), n * g->esz, slot, tag, readers, g->lastW[u]);
  if (idx >= 0) g->lastR[u] = idx;
  return idx;
}

int papGeomFetch(struct papEngine* e, struct papGeom* g, int owner, int b, int k, int slot,
                 uint64_t tag) {
  int u = g->unitOff[b] + k;
  size_t off, n;
  papGeomUnit(g, b, k, &off, &n);
  int idx = papStepFetch(e, owner, g->recvbuff + off * g->esz, n * g->esz, slot, tag, g->lastW[u],
                         g->lastR[u]);
  if (idx >= 0) papGeomWrote(g, b, k, idx);
  return idx;
}

int papGeomRecvReduce(struct papEngine* e, struct papGeom* g, int peer, int b, int k,
                      papcclDataType_t dtype, enum papRedKind red) {
  int u = g->unitOff[b] + k;
  size_t off, n;
  papGeomUnit(g, b, k, &off, &n);
  const char* src = (g->written[u] ? g->recvbuff : g->sendbuff) + off * g->esz;
  int idx = papStepRecvReduce(e, peer, g->recvbuff + off * g->esz, src, n * g->esz, dtype, red,
                              g->lastW[u], g->lastR[u]);
  if (idx >= 0) {
    g->lastW[u] = idx;
    g->lastR[u] = -1;
    g->written[u] = 1;
  }
  return idx;
}
