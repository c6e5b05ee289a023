/* SPDX-License-Identifier: Apache-2.0 */
/* The ucx backend's message board (home; docs/PAP-ENGINE.md section 10): requests to rank 0,
 * its replies and pushes, all eager active messages, served inside rank 0's worker progress;
 * rank 0's own requests run in place. */
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "log.h"
#include "ucx/ucx_int.h"

static void outDone(void* req, ucs_status_t status, void* user) {
  (void)status;
  struct ucxOut* o = (struct ucxOut*)user;
  o->st->outInFlight--; /* inside the worker's progress: wlock held */
  free(o);
  ucp_request_free(req);
}

/* Sends what handlers queued (wlock held). A message to a peer without a connection, or
 * one UCX refuses, is dropped: its waiter fails on the peer's death or its timeout. */
void papUcxFlushOut(struct ucxState* st) {
  while (st->outHead) {
    struct ucxOut* o = st->outHead;
    st->outHead = o->next;
    if (st->outHead == NULL) st->outTail = &st->outHead;
    struct papConn* c =
        st->conns && o->peer >= 0 && o->peer < st->base.ctx.nranks ? st->conns[o->peer] : NULL;
    if (c == NULL || atomic_load_explicit(&c->dead, memory_order_acquire)) {
      free(o);
      continue;
    }
    ucp_request_param_t p;
    memset(&p, 0, sizeof(p));
    p.op_attr_mask =
        UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FIELD_FLAGS;
    p.cb.send = outDone;
    p.user_data = o;
    p.flags = UCP_AM_SEND_FLAG_EAGER; /* handlers see the whole message at once */
    ucs_status_ptr_t req =
        ucp_am_send_nbx(c->ep, o->amId, &o->hdr, sizeof(o->hdr), o->data, o->len, &p);
    if (!UCS_PTR_IS_PTR(req))
      free(o); /* done at once, or failed */
    else
      st->outInFlight++;
  }
}

/* Queues one board message (wlock held). */
static void queueOut(struct ucxState* st, int peer, unsigned amId, uint64_t id, int status,
                     const void* data, size_t len) {
  struct ucxOut* o = (struct ucxOut*)malloc(sizeof(*o) + len);
  if (o == NULL) {
    PAP_WARN("ucx: out of memory for a board message to rank %d", peer);
    return;
  }
  o->next = NULL;
  o->st = st;
  o->peer = peer;
  o->amId = amId;
  o->hdr.id = id;
  o->hdr.from = st->base.ctx.rank;
  o->hdr.status = status;
  o->len = len;
  if (len) memcpy(o->data, data, len);
  *st->outTail = o;
  st->outTail = &o->next;
}

/* At rank 0: one board request (inside the worker's progress, wlock held). */
static ucs_status_t amHomeReq(void* arg, const void* header, size_t headerLen, void* data,
                              size_t len, const ucp_am_recv_param_t* param) {
  struct ucxState* st = (struct ucxState*)arg;
  struct ucxHomeHdr h;
  if (papUcxAmHeader(header, headerLen, param, &h) != 0 || h.from <= 0 ||
      h.from >= st->base.ctx.nranks || len > PAP_HOME_MAX_BYTES) {
    PAP_WARN("ucx: a malformed board request (%zu bytes) was dropped", len);
    return UCS_OK;
  }
  size_t rl = 0;
  int status = 1;
  if (st->serve) {
    if (len) memcpy(st->inBuf, data, len);
    rl = st->serve(st->homeArg, h.from, st->inBuf, len, st->serveBuf, PAP_HOME_MAX_BYTES);
    status = 0;
  }
  if (h.id != 0) queueOut(st, h.from, UCX_AM_HOME_REPLY, h.id, status, st->serveBuf, rl);
  papDoorbellRing(&st->bell); /* the board changed: rank 0's own waits on it look again */
  return UCS_OK;
}

/* At a caller: the home's reply to its request in flight (or to one that gave up). */
static ucs_status_t amHomeReply(void* arg, const void* header, size_t headerLen, void* data,
                                size_t len, const ucp_am_recv_param_t* param) {
  struct ucxState* st = (struct ucxState*)arg;
  struct ucxHomeHdr h;
  if (papUcxAmHeader(header, headerLen, param, &h) != 0 || h.id == 0 || h.id != st->callId)
    return UCS_OK;
  if (h.status == 0) {
    memcpy(st->callBuf, data, len < st->callCap ? len : st->callCap);
    st->callLen = len;
  }
  st->callState = h.status == 0 ? 1 : 2;
  papDoorbellRing(&st->bell);
  return UCS_OK;
}

static ucs_status_t amHomePush(void* arg, const void* header, size_t headerLen, void* data,
                               size_t len, const ucp_am_recv_param_t* param) {
  struct ucxState* st = (struct ucxState*)arg;
  struct ucxHomeHdr h;
  if (papUcxAmHeader(header, headerLen, param, &h) != 0 || len > PAP_HOME_MAX_BYTES) return UCS_OK;
  if (st->push) {
    if (len) memcpy(st->inBuf, data, len);
    st->push(st->homeArg, st->inBuf, len);
  }
  papDoorbellRing(&st->bell);
  return UCS_OK;
}

/* Rank 0 serves its own requests in place, under the worker's lock as a handler would. */
static size_t serveHere(struct ucxState* st, const void* req, size_t len, void* reply, size_t cap,
                        int* servedOut) {
  pthread_mutex_lock(&st->wlock);
  size_t rl = 0;
  *servedOut = st->serve != NULL;
  if (st->serve) {
    rl = st->serve(st->homeArg, 0, req, len, st->serveBuf, PAP_HOME_MAX_BYTES);
    if (reply) memcpy(reply, st->serveBuf, rl < cap ? rl : cap);
  }
  if (st->outHead) papUcxFlushOut(st);
  pthread_mutex_unlock(&st->wlock);
  return rl;
}

static papcclResult_t ucxHomeAttach(void* state, papHomeServeFn serve, papHomePushFn push,
                                    void* arg) {
  struct ucxState* st = (struct ucxState*)state;
  pthread_mutex_lock(&st->wlock);
  st->serve = st->base.ctx.rank == 0 ? serve : NULL;
  st->push = push;
  st->homeArg = arg;
  pthread_mutex_unlock(&st->wlock);
  return papcclSuccess;
}

static papcclResult_t ucxHomeSend(void* state, const void* req, size_t len) {
  struct ucxState* st = (struct ucxState*)state;
  if (len > PAP_HOME_MAX_BYTES) {
    PAP_WARN("ucx: a board request of %zu bytes exceeds %d", len, PAP_HOME_MAX_BYTES);
    return papcclInternalError;
  }
  if (st->base.ctx.rank == 0) {
    int served = 0;
    serveHere(st, req, len, NULL, 0, &served);
    return papcclSuccess;
  }
  pthread_mutex_lock(&st->wlock);
  queueOut(st, 0, UCX_AM_HOME_REQ, 0, 0, req, len);
  papUcxFlushOut(st);
  pthread_mutex_unlock(&st->wlock);
  return papcclSuccess;
}

/* Sends the request and waits for the reply: polls within the spin budget (a reply usually
 * comes within a network round trip, sooner than a wake-up from poll()), then sleeps on
 * the doorbell, which the reply rings. A home without a board yet (rank 0 still in init)
 * answers "try again". */
static papcclResult_t ucxHomeCall(void* state, const void* req, size_t len, void* reply, size_t cap,
                                  size_t* replyLen) {
  struct ucxState* st = (struct ucxState*)state;
  if (len > PAP_HOME_MAX_BYTES) {
    PAP_WARN("ucx: a board request of %zu bytes exceeds %d", len, PAP_HOME_MAX_BYTES);
    return papcclInternalError;
  }
  struct papWait w;
  papWaitInit(&w, "ucx: a request to the arrival board on rank 0", st->base.ctx.abortFlag, 1,
              st->base.ctx.spinNs > 0 ? (uint64_t)st->base.ctx.spinNs : 0, 0);
  w.abortRes = papcclRemoteError;
  if (st->base.ctx.rank == 0) {
    for (;;) {
      int served = 0;
      size_t rl = serveHere(st, req, len, reply, cap, &served);
      if (served) {
        if (replyLen) *replyLen = rl;
        return papcclSuccess;
      }
      PAP_CHECK(papWaitCheck(&w, papNowNs()));
      papWaitSleep(&w);
    }
  }
  pthread_mutex_lock(&st->callLock);
  papcclResult_t res = papcclSuccess;
  for (;;) {
    pthread_mutex_lock(&st->wlock);
    uint64_t id = ++st->callSeq;
    st->callId = id;
    st->callBuf = reply;
    st->callCap = cap;
    st->callLen = 0;
    st->callState = 0;
    queueOut(st, 0, UCX_AM_HOME_REQ, id, 0, req, len);
    papUcxFlushOut(st);
    pthread_mutex_unlock(&st->wlock);
    int spinning = st->base.ctx.spinNs > 0, got = 0;
    for (unsigned i = 0;; i++) {
      uint32_t tok = papDoorbellToken(&st->bell);
      pthread_mutex_lock(&st->wlock);
      got = st->callState;
      pthread_mutex_unlock(&st->wlock);
      if (got != 0) break;
      if (st->conns[0] == NULL || atomic_load_explicit(&st->conns[0]->dead, memory_order_acquire)) {
        res = papcclRemoteError; /* the caller says why (home->call) */
        break;
      }
      if (spinning && ((i & 15) != 15 || papWaitInBudget(&w, papNowNs()))) {
        papUcxProgressOnce(st);
        continue;
      }
      spinning = 0;
      uint64_t now = papNowNs();
      if ((res = papWaitCheck(&w, now)) != papcclSuccess) break;
      papUcxWait(st, tok, papWaitSlice(&w, now, 10000000)); /* the reply rings the bell */
    }
    if (res != papcclSuccess || got == 1) break;
    /* state 2: rank 0 has no board yet */
    if ((res = papWaitCheck(&w, papNowNs())) != papcclSuccess) break;
    papWaitSleep(&w);
  }
  pthread_mutex_lock(&st->wlock);
  st->callId = 0; /* a late reply finds nobody */
  size_t rl = st->callLen;
  pthread_mutex_unlock(&st->wlock);
  pthread_mutex_unlock(&st->callLock);
  if (res == papcclSuccess && replyLen) *replyLen = rl;
  return res;
}

/* Drives the worker until every board message sent so far has left (bounded): the home
 * about to fail on a mismatch it pushed makes sure the pushes go before it may close. */
static void ucxHomeFlush(void* state) {
  struct ucxState* st = (struct ucxState*)state;
  uint64_t deadline = papNowNs() + 200000000ull;
  for (;;) {
    pthread_mutex_lock(&st->wlock);
    if (st->outHead) papUcxFlushOut(st);
    int left = st->outInFlight;
    pthread_mutex_unlock(&st->wlock);
    if (left <= 0 || papNowNs() > deadline) break;
    papUcxProgressOnce(st);
  }
  /* Done for UCX is handed to the transport: over TCP a message may still wait behind data
   * on its socket, lost if this rank closes its endpoints next. Flush the worker. */
  ucp_request_param_t p;
  memset(&p, 0, sizeof(p));
  pthread_mutex_lock(&st->wlock);
  ucs_status_ptr_t req = ucp_worker_flush_nbx(st->worker, &p);
  pthread_mutex_unlock(&st->wlock);
  if (!UCS_PTR_IS_PTR(req)) return;
  for (;;) {
    pthread_mutex_lock(&st->wlock);
    ucs_status_t s = ucp_request_check_status(req);
    if (s != UCS_INPROGRESS || papNowNs() > deadline) {
      if (s == UCS_INPROGRESS) ucp_request_cancel(st->worker, req);
      ucp_request_free(req);
      pthread_mutex_unlock(&st->wlock);
      return;
    }
    pthread_mutex_unlock(&st->wlock);
    papUcxProgressOnce(st);
  }
}

/* From inside serve only (wlock held): queued, sent after the handler. */
static void ucxHomePush(void* state, int peer, const void* msg, size_t len) {
  struct ucxState* st = (struct ucxState*)state;
  if (peer == st->base.ctx.rank) {
    if (st->push) st->push(st->homeArg, msg, len);
    papDoorbellRing(&st->bell);
    return;
  }
  queueOut(st, peer, UCX_AM_HOME_PUSH, 0, 0, msg, len);
}

papcclResult_t papUcxHomeHandlers(struct ucxState* st) {
  PAP_CHECK(papUcxSetAm(st, UCX_AM_HOME_REQ, amHomeReq));
  PAP_CHECK(papUcxSetAm(st, UCX_AM_HOME_REPLY, amHomeReply));
  return papUcxSetAm(st, UCX_AM_HOME_PUSH, amHomePush);
}

const struct papHomeOps papUcxHomeOps = {
    .attach = ucxHomeAttach,
    .call = ucxHomeCall,
    .send = ucxHomeSend,
    .push = ucxHomePush,
    .flush = ucxHomeFlush,
};
