/* SPDX-License-Identifier: Apache-2.0 */
/* AC2S, arrival-committed two-shot allreduce (docs/PAP-ENGINE.md section 4): the ranks that
 * arrived before the commit own one block each and reduce-scatter among themselves while
 * the late ranks are away; a late rank then sends its buffer once and receives the result. */
#include <string.h>

#include "algo.h"
#include "check.h"
#include "log.h"
#include "param.h"

struct detCtx {
  struct papEngine* e;
  struct papCall* op;
  const char** leaf; /* [n] contribution of rank i for this chunk */
  int* leafStep; /* [n] step that produced it (-1: already there) */
  char** stage; /* [n] scratch for rank i's contribution / subtree result */
  size_t bytes;
};

/* Canonical binary tree over ranks [lo, hi): the same shape for every owner, chunk and
 * arrival order, so each element is combined in one order. Writes the subtree's result to
 * stage[lo] (the root to dst); returns its step (or -1 for a leaf already present). */
static int combine(struct detCtx* c, int lo, int hi, char* dst, const char** resOut) {
  if (hi - lo == 1) {
    *resOut = c->leaf[lo];
    return c->leafStep[lo];
  }
  int mid = lo + (hi - lo + 1) / 2;
  const char* a = NULL;
  const char* b = NULL;
  int sa = combine(c, lo, mid, NULL, &a);
  if (sa < -1) return sa;
  int sb = combine(c, mid, hi, NULL, &b);
  if (sb < -1) return sb;
  char* out = dst ? dst : c->stage[lo];
  int idx = papStepReduce(c->e, out, a, b, c->bytes, c->op->dtype, c->op->red, sa, sb);
  if (idx < 0) return -2;
  *resOut = out;
  return idx;
}

/* Phase A of the deterministic variant, chunk k of my block: every other rank's raw chunk
 * lands in its own stage (mine is read in place), and the canonical tree combines them
 * into recvbuff. */
static papcclResult_t detReduceChunk(struct detCtx* dc, struct papGeom* g, char* stageBase,
                                     size_t blockBytes, int myBlock, int k) {
  struct papEngine* e = dc->e;
  struct papCall* op = dc->op;
  int n = e->nranks;
  int r = e->rank;
  size_t esz = g->esz;
  size_t off, cnt;
  papGeomUnit(g, myBlock, k, &off, &cnt);
  size_t inBlock = (off - g->blkOff[myBlock]) * esz;
  dc->bytes = cnt * esz;
  for (int p = 0; p < n; p++) {
    dc->stage[p] = stageBase + (size_t)p * blockBytes + inBlock;
    if (p == r) {
      dc->leaf[p] = (const char*)op->sendbuff + off * esz;
      dc->leafStep[p] = -1;
    } else {
      dc->leaf[p] = dc->stage[p];
      dc->leafStep[p] = papStepRecv(e, p, dc->stage[p], dc->bytes, -1, -1);
      PLAN_OK(dc->leafStep[p]);
    }
  }
  const char* res = NULL;
  int root = combine(dc, 0, n, (char*)op->recvbuff + off * esz, &res);
  PLAN_OK(root < -1 ? -1 : 0);
  papGeomWrote(g, myBlock, k, root);
  return papcclSuccess;
}

/* Phase B: owners hand each final chunk to everyone; everyone takes the other blocks'.
 * Within a host a final chunk is published once in the owner's staging area and every
 * rank copies it out (one copy in, N-1 out); otherwise it is sent to each rank. */
static papcclResult_t allgatherBlocks(struct papEngine* e, struct papGeom* g, const int32_t* own,
                                      int nE, int myBlock, int maxK) {
  int n = e->nranks;
  int r = e->rank;
  int stage = e->stageSlots > 0 && (size_t)papParamChunkSize() <= e->stageSlotBytes;
  uint64_t tagBase = (e->curSeq + 1) << 32;
  if (myBlock >= 0) {
    for (int k = 0; k < papGeomChunks(g, myBlock); k++) {
      if (stage) {
        PLAN_OK(papGeomPublish(e, g, myBlock, k, k % e->stageSlots, tagBase | (uint32_t)k, n - 1));
        continue;
      }
      for (int d = 0; d < n; d++)
        if (d != r) PLAN_OK(papGeomSend(e, g, d, myBlock, k));
    }
  }
  for (int k = 0; k < maxK; k++) {
    for (int j = 0; j < nE; j++) {
      if (j == myBlock || k >= papGeomChunks(g, j)) continue;
      int idx;
      if (stage) {
        idx = papGeomFetch(e, g, own[j], j, k, k % e->stageSlots, tagBase | (uint32_t)k);
        PLAN_OK(idx);
      } else {
        idx = papGeomRecv(e, g, own[j], j, k);
        PLAN_OK(idx);
      }
      papStepMarkFinal(e, idx);
    }
  }
  return papcclSuccess;
}

papcclResult_t papAlgoAllReduceAc2s(struct papEngine* e, struct papCall* op) {
  int n = e->nranks;
  int r = e->rank;
  size_t esz = papKernTypeSize(op->dtype);
  if (n == 1) return papStepCopyIfNeeded(e, op->recvbuff, op->sendbuff, op->count * esz);
  int det = op->commit.algo == PAP_ALGO_AC2S_DET;
  struct papCommitView v;
  PAP_CHECK(papCommitViewInit(e, op, &v));
  int nE = v.nE;
  const int32_t* own = v.own;
  int myBlock = v.myBlock;

  /* Sources of my block: the other owners in arrival order, then the late ranks. */
  int* srcs = NULL;
  PAP_CHECK(papPlanScratch(e, sizeof(int) * (size_t)n, (void**)&srcs));
  int nsrc = 0;
  for (int s = 0; s < n; s++)
    if (v.order[s] != r) srcs[nsrc++] = v.order[s];

  struct papGeom g;
  PAP_CHECK(papGeomInit(e, &g, op->sendbuff, op->recvbuff, op->count, esz, nE));
  int maxK = 0;
  for (int j = 0; j < nE; j++)
    if (papGeomChunks(&g, j) > maxK) maxK = papGeomChunks(&g, j);
  papPlanScanAll(e);

  struct detCtx dc;
  memset(&dc, 0, sizeof(dc));
  char* stageBase = NULL;
  size_t blockBytes = 0;
  if (det && myBlock >= 0) {
    blockBytes = (g.blkOff[myBlock + 1] - g.blkOff[myBlock]) * esz;
    void* mem = NULL;
    PAP_CHECK(papPlanScratch(e, blockBytes * (size_t)n + 64, (void**)&stageBase));
    PAP_CHECK(papPlanScratch(e, (sizeof(char*) * 2 + sizeof(int)) * (size_t)n, &mem));
    dc.leaf = (const char**)mem;
    dc.stage = (char**)mem + n;
    dc.leafStep = (int*)((char**)mem + 2 * n);
    dc.e = e;
    dc.op = op;
  }

  /* Phase A: raw chunks to their owners; owners reduce what arrives (early sources first). */
  for (int k = 0; k < maxK; k++) {
    for (int j = 0; j < nE; j++)
      if (j != myBlock && k < papGeomChunks(&g, j)) PLAN_OK(papGeomSend(e, &g, own[j], j, k));
    if (myBlock < 0 || k >= papGeomChunks(&g, myBlock)) continue;
    if (!det) {
      for (int s = 0; s < nsrc; s++)
        PLAN_OK(papGeomRecvReduce(e, &g, srcs[s], myBlock, k, op->dtype, op->red));
      continue;
    }
    papcclResult_t res = detReduceChunk(&dc, &g, stageBase, blockBytes, myBlock, k);
    if (res != papcclSuccess) return res;
  }
  return allgatherBlocks(e, &g, own, nE, myBlock, maxK);
}
