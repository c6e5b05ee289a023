/* SPDX-License-Identifier: Apache-2.0 */
/* Test shim for the transport interface (shim_transport.h). */
#include "internal/shim_transport.h"

#include <string.h>

#include "transport.h"

static const struct papTransportOps* const backends[] = {
    &papTransportShm,
#ifdef PAPCCL_HAVE_UCX
    &papTransportUcx,
#endif
#ifdef PAPCCL_HAVE_IB
    &papTransportIb,
#endif
};

int papTestTransportCount(void) {
  return (int)(sizeof(backends) / sizeof(backends[0]));
}

/* Counts the members of one table that are set: each member named, so that a member added
 * to a table and not here fails the test's count against the header (total). */
#define SET(x) ((x) != NULL)
static int lifeSet(const struct papTransportOps* o) {
  return SET(o->name) + SET(o->canConnect) + SET(o->init) + SET(o->listen) + SET(o->connect) +
         SET(o->ready) + SET(o->close) + SET(o->finalize);
}
static int msgSet(const struct papMsgOps* t) {
  return t ? SET(t->isend) + SET(t->irecv) + SET(t->probe) + SET(t->test) + SET(t->progress) +
                 SET(t->abandon)
           : 0;
}
static int wakeSet(const struct papWakeOps* t) {
  return t ? SET(t->waitToken) + SET(t->wait) + SET(t->wake) + SET(t->notify) : 0;
}
static int liveSet(const struct papLiveOps* t) {
  return t ? SET(t->peerAlive) + SET(t->deadPeer) + SET(t->depart) : 0;
}
static int boardSet(const struct papBoardOps* t) {
  return t ? SET(t->atomic) : 0;
}
static int homeSet(const struct papHomeOps* t) {
  return t ? SET(t->attach) + SET(t->call) + SET(t->send) + SET(t->push) + SET(t->flush) : 0;
}
static int localSet(const struct papLocalOps* t) {
  return t ? SET(t->staging) + SET(t->flat) + SET(t->notifyAll) : 0;
}

void papTestTransportShapeOf(int i, struct papTestTransportShape* out) {
  const struct papTransportOps* o = backends[i];
  memset(out, 0, sizeof(*out));
  out->name = o->name;
  const void* tables[PAP_TEST_TBL_COUNT] = {o,        o->msg,  o->wake, o->live,
                                            o->board, o->home, o->local};
  int set[PAP_TEST_TBL_COUNT] = {lifeSet(o),        msgSet(o->msg),     wakeSet(o->wake),
                                 liveSet(o->live),  boardSet(o->board), homeSet(o->home),
                                 localSet(o->local)};
  /* Members per table, from the structs' sizes: every member is one pointer (the ops
   * table: its name, its pointers and its caps). */
  int total[PAP_TEST_TBL_COUNT] = {
      (int)((sizeof(struct papTransportOps) - sizeof(struct papTransportCaps)) / sizeof(void*)) - 6,
      (int)(sizeof(struct papMsgOps) / sizeof(void*)),
      (int)(sizeof(struct papWakeOps) / sizeof(void*)),
      (int)(sizeof(struct papLiveOps) / sizeof(void*)),
      (int)(sizeof(struct papBoardOps) / sizeof(void*)),
      (int)(sizeof(struct papHomeOps) / sizeof(void*)),
      (int)(sizeof(struct papLocalOps) / sizeof(void*))};
  for (int t = 0; t < PAP_TEST_TBL_COUNT; t++) {
    out->present[t] = tables[t] != NULL;
    out->set[t] = set[t];
    out->total[t] = total[t];
  }
  out->msgProbe = o->msg && o->msg->probe;
  out->msgAbandon = o->msg && o->msg->abandon;
  out->idleProgress = o->caps.idleProgress;
  out->remoteBoard = o->caps.remoteBoard;
  out->anySource = o->caps.anySource;
  out->handleBytes = o->caps.handleBytes;
}

int papTestTransportCheck(int i, char* why, size_t cap) {
  return papTransportOpsCheck(backends[i], why, cap);
}

static papcclResult_t stubAtomic(void* s, size_t i, int op, uint64_t v, uint64_t c, uint64_t* o) {
  (void)s, (void)i, (void)op, (void)v, (void)c, (void)o;
  return papcclInternalError;
}
static const struct papBoardOps anyBoard = {.atomic = stubAtomic};
static papcclResult_t stubAttach(void* s, papHomeServeFn serve, papHomePushFn push, void* arg) {
  (void)s, (void)serve, (void)push, (void)arg;
  return papcclInternalError;
}
static papcclResult_t stubCall(void* s, const void* q, size_t l, void* r, size_t c, size_t* rl) {
  (void)s, (void)q, (void)l, (void)r, (void)c, (void)rl;
  return papcclInternalError;
}
static papcclResult_t stubSend(void* s, const void* q, size_t l) {
  (void)s, (void)q, (void)l;
  return papcclInternalError;
}
static void stubPush(void* s, int peer, const void* m, size_t l) {
  (void)s, (void)peer, (void)m, (void)l;
}
static void stubFlush(void* s) {
  (void)s;
}
static const struct papHomeOps anyHome = {
    .attach = stubAttach, .call = stubCall, .send = stubSend, .push = stubPush, .flush = stubFlush};

/* Copies of the sub-tables a plant changes (one plant per call, from the test's thread). */
static struct papWakeOps wakeCopy;
static struct papLiveOps liveCopy;
static struct papBoardOps boardCopy;
static struct papHomeOps homeCopy;
static struct papLocalOps localCopy;

/* The backend's first optional table, with its first member cleared (0: it has none). */
static int optionalHole(struct papTransportOps* o) {
  if (o->board) {
    boardCopy = *o->board;
    boardCopy.atomic = NULL;
    o->board = &boardCopy;
  } else if (o->home) {
    homeCopy = *o->home;
    homeCopy.flush = NULL;
    o->home = &homeCopy;
  } else if (o->local) {
    localCopy = *o->local;
    localCopy.notifyAll = NULL;
    o->local = &localCopy;
  } else {
    return 0;
  }
  return 1;
}

int papTestTransportCheckPlanted(int i, int plant, char* why, size_t cap) {
  struct papTransportOps o = *backends[i];
  switch (plant) {
  case PAP_TEST_PLANT_FLIP_ANY_SOURCE:
    o.caps.anySource = !o.caps.anySource;
    break;
  case PAP_TEST_PLANT_NO_MSG:
    o.msg = NULL;
    break;
  case PAP_TEST_PLANT_WAKE_HOLE:
    wakeCopy = *o.wake;
    wakeCopy.notify = NULL;
    o.wake = &wakeCopy;
    break;
  case PAP_TEST_PLANT_LIVE_HOLE:
    liveCopy = *o.live;
    liveCopy.depart = NULL;
    o.live = &liveCopy;
    break;
  case PAP_TEST_PLANT_NO_FINALIZE:
    o.finalize = NULL;
    break;
  case PAP_TEST_PLANT_OPTIONAL_HOLE:
    if (!optionalHole(&o)) return 1; /* not applicable */
    break;
  case PAP_TEST_PLANT_BOARD_AND_HOME:
    if (o.board == NULL) {
      o.board = &anyBoard;
    } else {
      o.home = &anyHome;
      o.caps.idleProgress = o.caps.remoteBoard = 1; /* what a home needs: only both is wrong */
    }
    break;
  case PAP_TEST_PLANT_HOME_LOCAL_BOARD:
    if (o.home == NULL) return 1;
    o.caps.remoteBoard = 0;
    break;
  default:
    return 1;
  }
  return papTransportOpsCheck(&o, why, cap);
}
