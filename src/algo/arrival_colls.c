/* SPDX-License-Identifier: Apache-2.0 */
/* PAP-aware ReduceScatter, AllGather, Broadcast and Reduce (docs/PAP.md section 4), over
 * the same commit as AC2S: op->commit.owners[0..nE-1] arrived early (arrival order), every other
 * rank is late. The early ranks do the work that does not need the late ones; a late rank
 * is left with about one send of its data and one receive of its result. */
#include <string.h>

#include "algo.h"
#include "check.h"
#include "log.h"
#include "param.h"

/* ---- ReduceScatter ------------------------------------------------------------------------ */

/* Block j is reduced at j when j is early, else at a proxy early rank, which hands the
 * partial (every contribution but j's own) to j when it arrives. */
static int rsDest(const struct papCommitView* v, int j) {
  return v->early[j] ? j : v->own[v->lateIdx[j] % v->nE];
}

papcclResult_t papAlgoReduceScatterArrival(struct papEngine* e, struct papCall* op) {
  struct papCommitView v;
  PAP_CHECK(papCommitViewInit(e, op, &v));
  int n = v.n, r = v.r;
  size_t esz = papKernTypeSize(op->dtype);
  size_t blk = op->count * esz;
  const char* send = (const char*)op->sendbuff;
  papPlanScanAll(e);
  /* Geometry of one block (chunks); the same cut for every block. */
  struct papGeom gb;
  PAP_CHECK(papGeomInit(e, &gb, send, op->recvbuff, op->count, esz, 1));
  int nk = papGeomChunks(&gb, 0);
  /* Raw contributions to each block's reducer. */
  for (int j = 0; j < n; j++) {
    int d = rsDest(&v, j);
    if (j == r || d == r) continue;
    for (int k = 0; k < nk; k++) {
      size_t off, cnt;
      papGeomUnit(&gb, 0, k, &off, &cnt);
      PLAN_OK(papStepSend(e, d, send + (size_t)j * blk + off * esz, cnt * esz, -1, -1));
    }
  }
  /* Blocks reduced here: my own (early) and the late blocks I proxy. Sources: everyone but
   * me (my contribution is the base) and the block's owner; early ones first. */
  const int* order = v.order;
  int nOrder = n;
  struct papGeom* acc = NULL;
  PAP_CHECK(papPlanScratch(e, sizeof(struct papGeom) * (size_t)n, (void**)&acc));
  for (int j = 0; j < n; j++) {
    if (rsDest(&v, j) != r) continue; /* my own block (I am early), or a late one I proxy */
    void* target = op->recvbuff;
    if (j != r) PAP_CHECK(papPlanScratch(e, blk + 64, &target));
    PAP_CHECK(papGeomInit(e, &acc[j], send + (size_t)j * blk, target, op->count, esz, 1));
    for (int k = 0; k < nk; k++)
      for (int s = 0; s < nOrder; s++)
        if (order[s] != r && order[s] != j)
          PLAN_OK(papGeomRecvReduce(e, &acc[j], order[s], 0, k, op->dtype, op->red));
  }
  /* Partials to the late ranks I proxy. */
  for (int i = 0; i < v.nLate; i++) {
    int j = v.late[i];
    if (rsDest(&v, j) != r) continue;
    for (int k = 0; k < nk; k++)
      PLAN_OK(papGeomSend(e, &acc[j], j, 0, k));
  }
  /* A late rank: the partial from its proxy, plus its own block. */
  if (!v.early[r]) {
    char* part = NULL;
    PAP_CHECK(papPlanScratch(e, blk + 64, (void**)&part));
    for (int k = 0; k < nk; k++) {
      size_t off, cnt;
      papGeomUnit(&gb, 0, k, &off, &cnt);
      int ri = papStepRecv(e, rsDest(&v, r), part + off * esz, cnt * esz, -1, -1);
      PLAN_OK(ri);
      PLAN_OK(papStepReduce(e, (char*)op->recvbuff + off * esz, part + off * esz,
                            send + (size_t)r * blk + off * esz, cnt * esz, op->dtype, op->red, ri,
                            -1));
    }
  }
  return papcclSuccess;
}

/* ---- AllGather ------------------------------------------------------------------------------ */

/* Piece i (of nE) of a late rank's block: element range. */
static void agPiece(size_t count, int nE, int i, size_t* off, size_t* cnt) {
  size_t base = count / (size_t)nE, rem = count % (size_t)nE;
  *off = base * (size_t)i + ((size_t)i < rem ? (size_t)i : rem);
  *cnt = base + ((size_t)i < rem);
}

/* Elements per pipeline chunk. */
static size_t chunkElems(size_t esz) {
  int64_t b = papParamChunkSize();
  size_t c = (size_t)(b < 64 ? 64 : b) / esz;
  return c ? c : 1;
}

papcclResult_t papAlgoAllGatherArrival(struct papEngine* e, struct papCall* op) {
  struct papCommitView v;
  PAP_CHECK(papCommitViewInit(e, op, &v));
  int n = v.n, r = v.r, nE = v.nE;
  size_t esz = papKernTypeSize(op->dtype);
  size_t blk = op->count * esz;
  char* recv = (char*)op->recvbuff;
  const char* mine = (const char*)op->sendbuff;
  size_t ce = chunkElems(esz);
  papPlanScanAll(e);
  PAP_CHECK(papStepCopyIfNeeded(e, recv + (size_t)r * blk, mine, blk));
  int myIdx = -1; /* my index among the owners */
  for (int i = 0; i < nE; i++)
    if (v.own[i] == r) myIdx = i;
  /* (2r) Pieces of late blocks sent to me for relaying: receive first, keep the steps. */
  int** relayDep = NULL;
  PAP_CHECK(papPlanScratch(e, sizeof(int*) * (size_t)n, (void**)&relayDep));
  memset(relayDep, 0, sizeof(int*) * (size_t)n);
  if (myIdx >= 0) {
    size_t poff, pcnt;
    agPiece(op->count, nE, myIdx, &poff, &pcnt);
    size_t nch = (pcnt + ce - 1) / ce;
    for (int i = 0; i < v.nLate; i++) {
      int L = v.late[i];
      PAP_CHECK(papPlanScratch(e, sizeof(int) * (nch + 1), (void**)&relayDep[L]));
      for (size_t k = 0; k < nch; k++) {
        size_t o = poff + k * ce, c = pcnt - k * ce < ce ? pcnt - k * ce : ce;
        relayDep[L][k] = papStepRecv(e, L, recv + (size_t)L * blk + o * esz, c * esz, -1, -1);
        PLAN_OK(relayDep[L][k]);
      }
    }
  }
  /* Sends, per destination in this order: (1) my block if I am early, (2) my pieces if I am
   * late, (3) relays of late pieces I hold. */
  if (v.early[r]) {
    for (int b = 0; b < n; b++) {
      if (b == r) continue;
      for (size_t o = 0; o < op->count; o += ce) {
        size_t c = op->count - o < ce ? op->count - o : ce;
        PLAN_OK(papStepSend(e, b, mine + o * esz, c * esz, -1, -1));
      }
    }
  } else {
    for (int i = 0; i < nE; i++) {
      size_t poff, pcnt;
      agPiece(op->count, nE, i, &poff, &pcnt);
      for (size_t o = 0; o < pcnt; o += ce) {
        size_t c = pcnt - o < ce ? pcnt - o : ce;
        PLAN_OK(papStepSend(e, v.own[i], mine + (poff + o) * esz, c * esz, -1, -1));
      }
    }
  }
  if (myIdx >= 0) {
    size_t poff, pcnt;
    agPiece(op->count, nE, myIdx, &poff, &pcnt);
    for (int i = 0; i < v.nLate; i++) {
      int L = v.late[i];
      for (int b = 0; b < n; b++) {
        if (b == r || b == L) continue;
        size_t k = 0;
        for (size_t o = 0; o < pcnt; o += ce, k++) {
          size_t c = pcnt - o < ce ? pcnt - o : ce;
          PLAN_OK(papStepSend(e, b, recv + (size_t)L * blk + (poff + o) * esz, c * esz,
                              relayDep[L][k], -1));
        }
      }
    }
  }
  /* Receives, per source in the same order: (1) an early source's block, (3) the late
   * pieces it relays ((2) was posted above). */
  for (int a = 0; a < n; a++) {
    if (a == r || !v.early[a]) continue;
    for (size_t o = 0; o < op->count; o += ce) {
      size_t c = op->count - o < ce ? op->count - o : ce;
      int idx = papStepRecv(e, a, recv + (size_t)a * blk + o * esz, c * esz, -1, -1);
      PLAN_OK(idx);
      papStepMarkFinal(e, idx);
    }
    int ai = -1;
    for (int i = 0; i < nE; i++)
      if (v.own[i] == a) ai = i;
    size_t poff, pcnt;
    agPiece(op->count, nE, ai, &poff, &pcnt);
    for (int i = 0; i < v.nLate; i++) {
      int L = v.late[i];
      if (L == r) continue;
      for (size_t o = 0; o < pcnt; o += ce) {
        size_t c = pcnt - o < ce ? pcnt - o : ce;
        int idx = papStepRecv(e, a, recv + (size_t)L * blk + (poff + o) * esz, c * esz, -1, -1);
        PLAN_OK(idx);
        papStepMarkFinal(e, idx);
      }
    }
  }
  return papcclSuccess;
}

/* ---- Broadcast ------------------------------------------------------------------------------ */

/* A chain through the root and then the early ranks in arrival order; each late rank is a
 * leaf fed by one holder of that chain (round robin over the non-root holders), so it only
 * receives once it arrives, and no early rank waits for it. */
papcclResult_t papAlgoBroadcastArrival(struct papEngine* e, struct papCall* op) {
  struct papCommitView v;
  PAP_CHECK(papCommitViewInit(e, op, &v));
  int n = v.n, r = v.r, root = op->root;
  size_t esz = papKernTypeSize(op->dtype);
  size_t bytes = op->count * esz;
  if (r == root) PAP_CHECK(papStepCopyIfNeeded(e, op->recvbuff, op->sendbuff, bytes));
  papPlanScanAll(e);
  int* chain = NULL;
  PAP_CHECK(papPlanScratch(e, sizeof(int) * (size_t)n, (void**)&chain));
  int h = 0;
  chain[h++] = root;
  for (int i = 0; i < v.nE; i++)
    if (v.own[i] != root) chain[h++] = v.own[i];
  int myPos = -1;
  for (int p = 0; p < h; p++)
    if (chain[p] == r) myPos = p;
  struct papGeom g;
  /* The root reads sendbuff; everyone else forwards what landed in recvbuff. */
  PAP_CHECK(
      papGeomInit(e, &g, r == root ? op->sendbuff : op->recvbuff, op->recvbuff, op->count, esz, 1));
  int nk = papGeomChunks(&g, 0);
  int leafIdx = 0;
  for (int k = 0; k < nk; k++) {
    if (myPos > 0) PLAN_OK(papGeomRecv(e, &g, chain[myPos - 1], 0, k));
    if (myPos >= 0 && myPos + 1 < h) PLAN_OK(papGeomSend(e, &g, chain[myPos + 1], 0, k));
    if (myPos >= 0) {
      for (int i = 0; i < v.nLate; i++) {
        int L = v.late[i];
        if (L == root) continue;
        int holder = h > 1 ? chain[1 + leafIdx++ % (h - 1)] : root;
        if (holder == r) PLAN_OK(papGeomSend(e, &g, L, 0, k));
      }
      leafIdx = 0;
    }
  }
  if (myPos < 0) { /* a late leaf: find my holder */
    int holder = root;
    int idx = 0;
    for (int i = 0; i < v.nLate; i++) {
      if (v.late[i] == root) continue;
      if (v.late[i] == r) holder = h > 1 ? chain[1 + idx % (h - 1)] : root;
      idx++;
    }
    for (int k = 0; k < nk; k++) {
      int ri = papGeomRecv(e, &g, holder, 0, k);
      PLAN_OK(ri);
      papStepMarkFinal(e, ri);
    }
  }
  return papcclSuccess;
}

/* ---- Reduce ---------------------------------------------------------------------------------- */

/* The early non-root ranks reduce along a chain in arrival order while the late ones are
 * away and ship the partial to the root; late non-root ranks send their input to the root,
 * which adds everything (partial first, late inputs in rank order). */
papcclResult_t papAlgoReduceArrival(struct papEngine* e, struct papCall* op) {
  struct papCommitView v;
  PAP_CHECK(papCommitViewInit(e, op, &v));
  int n = v.n, r = v.r, root = op->root;
  size_t esz = papKernTypeSize(op->dtype);
  papPlanScanAll(e);
  int* chain = NULL;
  PAP_CHECK(papPlanScratch(e, sizeof(int) * (size_t)n, (void**)&chain));
  int h = 0;
  for (int i = 0; i < v.nE; i++)
    if (v.own[i] != root) chain[h++] = v.own[i];
  int myPos = -1;
  for (int p = 0; p < h; p++)
    if (chain[p] == r) myPos = p;
  if (n == 1) return papStepCopyIfNeeded(e, op->recvbuff, op->sendbuff, op->count * esz);
  if (r == root) {
    struct papGeom g;
    PAP_CHECK(papGeomInit(e, &g, op->sendbuff, op->recvbuff, op->count, esz, 1));
    for (int k = 0; k < papGeomChunks(&g, 0); k++) {
      if (h > 0) PLAN_OK(papGeomRecvReduce(e, &g, chain[h - 1], 0, k, op->dtype, op->red));
      for (int i = 0; i < v.nLate; i++)
        if (v.late[i] != root)
          PLAN_OK(papGeomRecvReduce(e, &g, v.late[i], 0, k, op->dtype, op->red));
    }
    return papcclSuccess;
  }
  if (myPos < 0) { /* late, not the root: my input straight to the root */
    struct papGeom g;
    PAP_CHECK(papGeomInit(e, &g, op->sendbuff, (void*)op->sendbuff, op->count, esz, 1));
    for (int k = 0; k < papGeomChunks(&g, 0); k++)
      PLAN_OK(papGeomSend(e, &g, root, 0, k));
    return papcclSuccess;
  }
  /* An early chain member: partial = my input (+ what my predecessor sends), to the next. */
  void* acc = (void*)op->sendbuff;
  if (myPos > 0) PAP_CHECK(papPlanScratch(e, op->count * esz + 64, &acc));
  struct papGeom g;
  PAP_CHECK(papGeomInit(e, &g, op->sendbuff, acc, op->count, esz, 1));
  int next = myPos + 1 < h ? chain[myPos + 1] : root;
  for (int k = 0; k < papGeomChunks(&g, 0); k++) {
    if (myPos > 0) PLAN_OK(papGeomRecvReduce(e, &g, chain[myPos - 1], 0, k, op->dtype, op->red));
    PLAN_OK(papGeomSend(e, &g, next, 0, k));
  }
  return papcclSuccess;
}
