/* SPDX-License-Identifier: Apache-2.0 */
/* Plans for AllGather, ReduceScatter, Broadcast, Reduce, AlltoAll, Gather, Scatter, p2p. */
#include <string.h>

#include "algo.h"
#include "check.h"
#include "log.h"
#include "param.h"

/* Ring AllGather: block r starts in sendbuff; step s forwards block r-s to the next rank.
 * recvbuff is the unit tracker's buffer; the own block is sent straight from sendbuff. */
papcclResult_t papPlanAllGather(struct papEngine* e, struct papCall* op) {
  int n = e->nranks, r = e->rank;
  size_t esz = papKernTypeSize(op->dtype);
  size_t blk = op->count * esz;
  char* recv = (char*)op->recvbuff;
  PAP_CHECK(papPlanCopyIfNeeded(e, recv + (size_t)r * blk, op->sendbuff, blk));
  if (n == 1) return papcclSuccess;
  struct papGeom g;
  /* One geometry over the whole output: block b of nranks*count elements is rank b's. */
  PAP_CHECK(papGeomInit(e, &g, recv, recv, op->count * (size_t)n, esz, n));
  /* The own block is already in place (or being copied by a step without tracking: the
   * copy reads sendbuff and writes recvbuff[r], and sends read sendbuff directly). */
  g.sendbuff = recv;
  int next = (r + 1) % n, prev = (r - 1 + n) % n;
  for (int s = 0; s < n - 1; s++) {
    int sendBlk = (r - s + n) % n;
    int recvBlk = (r - s - 1 + n) % n;
    int nc = papGeomChunks(&g, sendBlk);
    for (int k = 0; k < nc; k++) {
      if (s == 0) {
        size_t off, cnt;
        papGeomUnit(&g, sendBlk, k, &off, &cnt);
        PLAN_OK(papPlanSend(e, next, (const char*)op->sendbuff + (off - g.blkOff[sendBlk]) * esz,
                            cnt * esz, -1, -1));
      } else {
        PLAN_OK(papGeomSend(e, &g, next, sendBlk, k));
      }
      int idx = papGeomRecv(e, &g, prev, recvBlk, k);
      PLAN_OK(idx);
      if (s == n - 2) papPlanMarkFinal(e, idx); /* the last step is never forwarded */
    }
  }
  return papcclSuccess;
}

/* Ring ReduceScatter: partial sums travel around the ring through a scratch buffer; the
 * last step reduces straight into recvbuff. Step s sends block r-s-1, receives r-s-2. */
papcclResult_t papPlanReduceScatter(struct papEngine* e, struct papCall* op) {
  int n = e->nranks, r = e->rank;
  size_t esz = papKernTypeSize(op->dtype);
  size_t blk = op->count * esz;
  if (n == 1) return papPlanCopyIfNeeded(e, op->recvbuff, op->sendbuff, blk);
  char* work = NULL;
  PAP_CHECK(papPlanScratch(e, blk * (size_t)n, (void**)&work));
  struct papGeom g;
  PAP_CHECK(papGeomInit(e, &g, op->sendbuff, work, op->count * (size_t)n, esz, n));
  int next = (r + 1) % n, prev = (r - 1 + n) % n;
  for (int s = 0; s < n - 1; s++) {
    int sendBlk = (r - s - 1 + 2 * n) % n;
    int recvBlk = (r - s - 2 + 2 * n) % n;
    int nc = papGeomChunks(&g, sendBlk);
    for (int k = 0; k < nc; k++) {
      PLAN_OK(papGeomSend(e, &g, next, sendBlk, k));
      if (s < n - 2) {
        PLAN_OK(papGeomRecvReduce(e, &g, prev, recvBlk, k, op->dtype, op->red));
      } else {
        /* recvBlk == r: the final sum goes to recvbuff (which may alias sendbuff's block r,
         * read here as the local contribution: element-wise, so in place is safe). */
        size_t off, cnt;
        papGeomUnit(&g, recvBlk, k, &off, &cnt);
        size_t local = off - g.blkOff[recvBlk];
        PLAN_OK(papPlanRecvReduce(e, prev, (char*)op->recvbuff + local * esz,
                                  (const char*)op->sendbuff + off * esz, cnt * esz, op->dtype,
                                  op->red, -1, -1));
      }
    }
  }
  return papcclSuccess;
}

/* Pipelined chain from the root: each rank forwards chunk k as soon as it has it. */
papcclResult_t papPlanBroadcast(struct papEngine* e, struct papCall* op) {
  int n = e->nranks, r = e->rank, root = op->root;
  size_t esz = papKernTypeSize(op->dtype);
  size_t bytes = op->count * esz;
  if (r == root) PAP_CHECK(papPlanCopyIfNeeded(e, op->recvbuff, op->sendbuff, bytes));
  if (n == 1) return papcclSuccess;
  int pos = (r - root + n) % n;
  int next = (r + 1) % n, prev = (r - 1 + n) % n;
  struct papGeom g;
  PAP_CHECK(papGeomInit(e, &g, op->recvbuff, op->recvbuff, op->count, esz, 1));
  for (int k = 0; k < papGeomChunks(&g, 0); k++) {
    size_t off, cnt;
    papGeomUnit(&g, 0, k, &off, &cnt);
    if (pos == 0) {
      PLAN_OK(papPlanSend(e, next, (const char*)op->sendbuff + off * esz, cnt * esz, -1, -1));
      continue;
    }
    int idx = papGeomRecv(e, &g, prev, 0, k);
    PLAN_OK(idx);
    if (pos < n - 1)
      PLAN_OK(papGeomSend(e, &g, next, 0, k));
    else
      papPlanMarkFinal(e, idx);
  }
  return papcclSuccess;
}

/* Pipelined chain ending at the root: the rank after the root starts, each rank adds its
 * input to the running partial sum (in scratch) and forwards it. */
papcclResult_t papPlanReduceColl(struct papEngine* e, struct papCall* op) {
  int n = e->nranks, r = e->rank, root = op->root;
  size_t esz = papKernTypeSize(op->dtype);
  size_t bytes = op->count * esz;
  if (n == 1) return papPlanCopyIfNeeded(e, op->recvbuff, op->sendbuff, bytes);
  int pos = (r - root - 1 + 2 * n) % n; /* root is at n-1 */
  int next = (r + 1) % n, prev = (r - 1 + n) % n;
  char* work = (char*)op->recvbuff;
  if (pos != n - 1 && pos != 0) PAP_CHECK(papPlanScratch(e, bytes, (void**)&work));
  struct papGeom g;
  PAP_CHECK(papGeomInit(e, &g, op->sendbuff, work, op->count, esz, 1));
  for (int k = 0; k < papGeomChunks(&g, 0); k++) {
    if (pos == 0) {
      PLAN_OK(papGeomSend(e, &g, next, 0, k));
      continue;
    }
    PLAN_OK(papGeomRecvReduce(e, &g, prev, 0, k, op->dtype, op->red));
    if (pos < n - 1) PLAN_OK(papGeomSend(e, &g, next, 0, k));
  }
  return papcclSuccess;
}

/* Pairwise exchange: at step s send to r+s and receive from r-s; all steps are posted at
 * once (different peers use different queues). In place, the input is copied aside first. */
papcclResult_t papPlanAlltoAll(struct papEngine* e, struct papCall* op) {
  int n = e->nranks, r = e->rank;
  size_t blk = op->count * papKernTypeSize(op->dtype);
  const char* send = (const char*)op->sendbuff;
  char* recv = (char*)op->recvbuff;
  int dep = -1;
  if (send == recv && n > 1) {
    char* copy = NULL;
    PAP_CHECK(papPlanScratch(e, blk * (size_t)n, (void**)&copy));
    dep = papPlanCopy(e, copy, send, blk * (size_t)n, -1, -1);
    PLAN_OK(dep);
    send = copy;
  }
  if (send != recv) {
    int c = papPlanCopy(e, recv + (size_t)r * blk, send + (size_t)r * blk, blk, dep, -1);
    PLAN_OK(c);
  }
  for (int s = 1; s < n; s++) {
    int to = (r + s) % n, from = (r - s + n) % n;
    PLAN_OK(papPlanSend(e, to, send + (size_t)to * blk, blk, dep, -1));
    PLAN_OK(papPlanRecv(e, from, recv + (size_t)from * blk, blk, dep, -1));
  }
  return papcclSuccess;
}

/* Direct gather: every rank sends its block to the root. */
papcclResult_t papPlanGather(struct papEngine* e, struct papCall* op) {
  int n = e->nranks, r = e->rank, root = op->root;
  size_t blk = op->count * papKernTypeSize(op->dtype);
  if (r != root) {
    PLAN_OK(papPlanSend(e, root, op->sendbuff, blk, -1, -1));
    return papcclSuccess;
  }
  char* recv = (char*)op->recvbuff;
  PAP_CHECK(papPlanCopyIfNeeded(e, recv + (size_t)r * blk, op->sendbuff, blk));
  for (int p = 0; p < n; p++)
    if (p != r) PLAN_OK(papPlanRecv(e, p, recv + (size_t)p * blk, blk, -1, -1));
  return papcclSuccess;
}

/* Direct scatter: the root sends block p to rank p. */
papcclResult_t papPlanScatter(struct papEngine* e, struct papCall* op) {
  int n = e->nranks, r = e->rank, root = op->root;
  size_t blk = op->count * papKernTypeSize(op->dtype);
  if (r != root) {
    PLAN_OK(papPlanRecv(e, root, op->recvbuff, blk, -1, -1));
    return papcclSuccess;
  }
  const char* send = (const char*)op->sendbuff;
  for (int p = 0; p < n; p++)
    if (p != r) PLAN_OK(papPlanSend(e, p, send + (size_t)p * blk, blk, -1, -1));
  return papPlanCopyIfNeeded(e, op->recvbuff, send + (size_t)r * blk, blk);
}

/* Point to point: one message; the transport streams it through its slots. A send to self
 * is matched with the receive from self as a local copy by the enqueue layer. */
papcclResult_t papPlanP2p(struct papEngine* e, struct papCall* op) {
  size_t bytes = op->count * papKernTypeSize(op->dtype);
  if (op->coll == PAP_COLL_SEND)
    PLAN_OK(papPlanSend(e, op->root, op->sendbuff, bytes, -1, -1));
  else
    PLAN_OK(papPlanRecv(e, op->root, op->recvbuff, bytes, -1, -1));
  return papcclSuccess;
}
