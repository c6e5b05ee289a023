/* SPDX-License-Identifier: Apache-2.0 */
#include "internal/shim_engine.h"

#include <string.h>

#include "engine.h"

/* The made-up backend's request: the engine only passes it back to test. */
struct papReq {
  int unused;
};

struct fakeState {
  int alive; /* rank 1's liveness as live->peerAlive reports it */
  int posts;
  struct papReq req;
};

static papcclResult_t fakeIsend(struct papConn* c, const void* b, size_t n, int mem, uint64_t tag,
                                struct papReq** reqOut) {
  (void)b, (void)n, (void)mem, (void)tag;
  struct fakeState* st = (struct fakeState*)c;
  st->posts++;
  if (!st->alive) return papcclRemoteError; /* as ucx: a dead endpoint, no WARN */
  *reqOut = &st->req;
  return papcclSuccess;
}

static papcclResult_t fakeTest(struct papReq* r, int* doneOut, size_t* sizeOut) {
  (void)sizeOut;
  struct fakeState* st = (struct fakeState*)((char*)r - offsetof(struct fakeState, req));
  st->alive = 0; /* the endpoint failed under the send: the peer is gone */
  *doneOut = 1;
  return papcclRemoteError;
}

static papcclResult_t fakeProgress(void* s) {
  (void)s;
  return papcclSuccess;
}

static int fakeAlive(void* s, int peer) {
  return peer != 1 || ((struct fakeState*)s)->alive;
}

int papTestEngineSendFailsInFlight(int hold, int* heldOut, int* postsOut) {
  static const struct papMsgOps msg = {
      .test = fakeTest, .progress = fakeProgress, .isend = fakeIsend};
  static const struct papLiveOps live = {.peerAlive = fakeAlive};
  struct papTransportOps tops;
  memset(&tops, 0, sizeof(tops));
  tops.msg = &msg;
  tops.live = &live;
  struct fakeState st = {1, 0, {0}};
  struct papConn* conns[2] = {(struct papConn*)&st, (struct papConn*)&st};
  struct papEngine e;
  papcclResult_t res = papEngineInit(&e, 0, 2, &tops, &st, conns, NULL);
  if (res != papcclSuccess) return res;
  e.holdDeadSends = hold;
  char data[64] = {0};
  papPlanReset(&e);
  papPlanBeginOp(&e, 1, sizeof(data));
  int idx = papStepSend(&e, 1, data, sizeof(data), -1, -1);
  for (int pass = 0; pass < 4 && res == papcclSuccess && idx >= 0; pass++) {
    int progressed = 0;
    res = papEngineProgress(&e, &progressed);
  }
  *heldOut = idx >= 0 && e.steps[idx].state == PAP_STEP_IDLE && e.steps[idx].req == NULL;
  *postsOut = st.posts;
  papEngineFree(&e);
  return idx < 0 ? papcclInternalError : res;
}
