/* SPDX-License-Identifier: Apache-2.0 */
#include "internal/shim_engine.h"

#include <stdio.h>
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

/* A two-rank engine (rank 0) over msg and live, with one op of `bytes` begun; both ranks'
 * connections are conns[] (the backend's state). tops and conns must outlive the engine. */
static papcclResult_t fakeEngine(struct papEngine* e, struct papTransportOps* tops,
                                 const struct papMsgOps* msg, const struct papLiveOps* live,
                                 struct papConn** conns, size_t bytes) {
  memset(tops, 0, sizeof(*tops));
  tops->msg = msg;
  tops->live = live;
  papcclResult_t res = papEngineInit(e, 0, 2, tops, conns[0], conns, NULL);
  if (res != papcclSuccess) return res;
  papPlanReset(e);
  papPlanBeginOp(e, 1, bytes);
  return papcclSuccess;
}

int papTestEngineSendFailsInFlight(int hold, int* heldOut, int* postsOut) {
  static const struct papMsgOps msg = {
      .test = fakeTest, .progress = fakeProgress, .isend = fakeIsend};
  static const struct papLiveOps live = {.peerAlive = fakeAlive};
  struct papTransportOps tops;
  struct fakeState st = {1, 0, {0}};
  struct papConn* conns[2] = {(struct papConn*)&st, (struct papConn*)&st};
  struct papEngine e;
  char data[64] = {0};
  papcclResult_t res = fakeEngine(&e, &tops, &msg, &live, conns, sizeof(data));
  if (res != papcclSuccess) return res;
  e.holdDeadSends = hold;
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

/* The order in which a made-up backend saw the engine's calls: 's' isend, 'r' irecv, 'p'
 * progress (a worker pass), 't' test. */
struct orderState {
  char log[64];
  int n;
  struct papReq req;
};

static struct orderState* orderOf(struct papConn* c) {
  return (struct orderState*)c;
}

static void orderNote(struct orderState* st, char c) {
  if (st->n < (int)sizeof(st->log) - 1) st->log[st->n++] = c;
}

static papcclResult_t orderIsend(struct papConn* c, const void* b, size_t n, int mem, uint64_t tag,
                                 struct papReq** reqOut) {
  (void)b, (void)n, (void)mem, (void)tag;
  orderNote(orderOf(c), 's');
  *reqOut = &orderOf(c)->req;
  return papcclSuccess;
}

static papcclResult_t orderIrecv(struct papConn* c, void* b, size_t n, int mem, uint64_t tag,
                                 const struct papRecvSink* sink, struct papReq** reqOut) {
  (void)b, (void)n, (void)mem, (void)tag, (void)sink;
  orderNote(orderOf(c), 'r');
  *reqOut = &orderOf(c)->req;
  return papcclSuccess;
}

static papcclResult_t orderTest(struct papReq* r, int* doneOut, size_t* sizeOut) {
  (void)sizeOut;
  orderNote((struct orderState*)((char*)r - offsetof(struct orderState, req)), 't');
  *doneOut = 1;
  return papcclSuccess;
}

static papcclResult_t orderProgress(void* s) {
  orderNote((struct orderState*)s, 'p');
  return papcclSuccess;
}

static int orderAlive(void* s, int peer) {
  (void)s, (void)peer;
  return 1;
}

int papTestEngineCallOrder(char* logOut, size_t len) {
  static const struct papMsgOps msg = {
      .test = orderTest, .progress = orderProgress, .isend = orderIsend, .irecv = orderIrecv};
  static const struct papLiveOps live = {.peerAlive = orderAlive};
  struct papTransportOps tops;
  struct orderState st;
  memset(&st, 0, sizeof(st));
  struct papConn* conns[2] = {(struct papConn*)&st, (struct papConn*)&st};
  struct papEngine e;
  char mine[64] = {0}, theirs[64];
  papcclResult_t res = fakeEngine(&e, &tops, &msg, &live, conns, sizeof(mine));
  if (res != papcclSuccess) return res;
  int s = papStepSend(&e, 1, mine, sizeof(mine), -1, -1);
  int r = papStepRecv(&e, 1, theirs, sizeof(theirs), -1, -1);
  int progressed = 0;
  if (s >= 0 && r >= 0) res = papEngineProgress(&e, &progressed); /* the plan's first pass */
  snprintf(logOut, len, "%s", st.log);
  papEngineFree(&e);
  return s < 0 || r < 0 ? papcclInternalError : res;
}
