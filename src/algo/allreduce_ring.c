/* SPDX-License-Identifier: Apache-2.0 */
/* AllReduce, ring: bandwidth-optimal, 2(N-1) steps. */
#include <string.h>

#include "algo.h"
#include "check.h"
#include "log.h"
#include "param.h"

/* Ring: N-1 reduce-scatter steps then N-1 allgather steps over N segments, each segment cut
 * in chunks. Messages are queued in wavefront order: wave w holds (step t, chunk w - t) for
 * every t, so chunk k's next step leaves right after it was reduced, while it is still in
 * cache, and every step of the ring works at once on a different chunk. Both ends of a
 * queue enumerate (w, t) alike, so queue orders match. */
papcclResult_t papAlgoAllReduceRing(struct papEngine* e, struct papCall* op) {
  int n = e->nranks;
  int r = e->rank;
  size_t esz = papKernTypeSize(op->dtype);
  if (n == 1) return papStepCopyIfNeeded(e, op->recvbuff, op->sendbuff, op->count * esz);
  struct papGeom g;
  PAP_CHECK(papGeomInit(e, &g, op->sendbuff, op->recvbuff, op->count, esz, n));
  int next = (r + 1) % n;
  int prev = (r - 1 + n) % n;
  int nsteps = 2 * (n - 1);
  int maxChunks = 0;
  for (int b = 0; b < n; b++)
    if (papGeomChunks(&g, b) > maxChunks) maxChunks = papGeomChunks(&g, b);
  for (int w = 0; w < maxChunks + nsteps - 1; w++) {
    for (int t = 0; t < nsteps; t++) {
      int k = w - t;
      if (k < 0) break;
      int rs = t < n - 1;
      int s = rs ? t : t - (n - 1);
      int sendSeg = rs ? (r - s + n) % n : (r + 1 - s + n) % n;
      int recvSeg = rs ? (r - s - 1 + n) % n : (r - s + n) % n;
      if (k < papGeomChunks(&g, sendSeg)) PLAN_OK(papGeomSend(e, &g, next, sendSeg, k));
      if (k < papGeomChunks(&g, recvSeg)) {
        if (rs) {
          PLAN_OK(papGeomRecvReduce(e, &g, prev, recvSeg, k, op->dtype, op->red));
        } else {
          int idx = papGeomRecv(e, &g, prev, recvSeg, k);
          PLAN_OK(idx);
          if (t == nsteps - 1) papStepMarkFinal(e, idx); /* the last step is never forwarded */
        }
      }
    }
  }
  return papcclSuccess;
}
