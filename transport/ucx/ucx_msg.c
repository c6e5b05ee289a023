/* SPDX-License-Identifier: Apache-2.0 */
/* The ucx backend's messages (msg): tag sends and receives, sink receives through pooled
 * bounce buffers, probe, and the cancel of receives an abandoned plan left posted. */
#include <stdlib.h>
#include <string.h>

#include "alloc.h"
#include "check.h"
#include "log.h"
#include "ucx/ucx_int.h"

/* Completion callbacks ring the bell: a sleeper in papUcxWait looks again. */
static void sentCb(void* req, ucs_status_t status, void* user) {
  (void)req, (void)status;
  papDoorbellRing(&((struct ucxState*)user)->bell);
}
static void recvCb(void* req, ucs_status_t status, const ucp_tag_recv_info_t* info, void* user) {
  (void)req, (void)status, (void)info;
  papDoorbellRing(&((struct ucxState*)user)->bell);
}

/* A bounce buffer of at least bytes (reqLock not held). */
static void* bounceGet(struct ucxState* st, size_t bytes, size_t* capOut) {
  pthread_mutex_lock(&st->reqLock);
  struct ucxBuf** pp = &st->pool;
  while (*pp && (*pp)->cap < bytes)
    pp = &(*pp)->next;
  struct ucxBuf* b = *pp;
  if (b) {
    *pp = b->next;
    st->poolCount--;
    st->poolBytes -= b->cap;
  }
  pthread_mutex_unlock(&st->reqLock);
  if (b) {
    *capOut = b->cap;
    return b;
  }
  size_t cap = bytes < 4096 ? 4096 : bytes;
  void* p = malloc(cap);
  *capOut = p ? cap : 0;
  return p;
}

/* Back to the pool (reqLock held), or freed when the pool is full. */
static void bouncePut(struct ucxState* st, void* p, size_t cap) {
  if (p == NULL) return;
  if (st->poolCount >= UCX_POOL_MAX || cap < sizeof(struct ucxBuf) ||
      st->poolBytes + cap > UCX_POOL_MAX_BYTES) {
    free(p);
    return;
  }
  struct ucxBuf* b = (struct ucxBuf*)p;
  b->cap = cap;
  b->next = st->pool;
  st->pool = b;
  st->poolCount++;
  st->poolBytes += cap;
}

static void reqTrack(struct ucxState* st, struct papReq* r) {
  r->st = st;
  pthread_mutex_lock(&st->reqLock);
  r->next = st->reqs;
  if (st->reqs) st->reqs->prev = r;
  st->reqs = r;
  pthread_mutex_unlock(&st->reqLock);
}

void papUcxReqRelease(struct papReq* r) {
  struct ucxState* st = r->st;
  pthread_mutex_lock(&st->reqLock);
  if (r->prev)
    r->prev->next = r->next;
  else
    st->reqs = r->next;
  if (r->next) r->next->prev = r->prev;
  bouncePut(st, r->bounce, r->bounceCap);
  pthread_mutex_unlock(&st->reqLock);
  free(r);
}

/* UCX tag: the sender's rank in the top 16 bits, then the engine's tag folded: the
 * point-to-point flag (bit 63), 15 bits of the sequence number (two messages 32768
 * operations apart are never in flight together) and the 32-bit message counter.
 * Receives match the full tag, so the sender is part of the match. */
static uint64_t ucxTag(int sender, uint64_t tag) {
  uint64_t seq = ((tag >> 32) & 0x7fff) | ((tag >> 63) << 15);
  return ((uint64_t)(uint16_t)sender << 48) | (seq << 32) | (tag & 0xffffffffull);
}

/* The parameters of a tag send or receive on c for r: its callback (set by the caller) rings
 * the bell of c's state. */
static void postParams(ucp_request_param_t* p, struct papConn* c, struct papReq* r) {
  memset(p, 0, sizeof(*p));
  p->op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
  p->user_data = c->st;
  r->worker = c->st->worker;
}

/* A send that failed because the endpoint did (the peer is gone, before or after its error
 * handler ran): the peer is dead, and the caller, which can tell why, says so without a WARN
 * here (papMsgOps.isend and test). Any other status is the transport's own failure. */
static papcclResult_t sendFailed(struct papConn* c, const char* what, ucs_status_t s) {
  if (s == UCS_ERR_ENDPOINT_TIMEOUT || s == UCS_ERR_CONNECTION_RESET || s == UCS_ERR_UNREACHABLE) {
    atomic_store_explicit(&c->dead, 1, memory_order_release);
    return papcclRemoteError;
  }
  return papUcxFail(what, s);
}

static papcclResult_t ucxIsend(struct papConn* c, const void* buf, size_t bytes, int memType,
                               uint64_t tag, struct papReq** reqOut) {
  (void)memType;
  struct papReq* r = NULL;
  PAP_CHECK(papCalloc(&r, 1));
  ucp_request_param_t p;
  postParams(&p, c, r);
  p.cb.send = sentCb;
  pthread_mutex_lock(&c->st->wlock);
  r->ucpReq = ucp_tag_send_nbx(c->ep, buf, bytes, ucxTag(c->st->base.ctx.rank, tag), &p);
  pthread_mutex_unlock(&c->st->wlock);
  if (UCS_PTR_IS_ERR(r->ucpReq)) {
    ucs_status_t s = UCS_PTR_STATUS(r->ucpReq);
    free(r);
    return sendFailed(c, "ucp_tag_send_nbx", s);
  }
  r->conn = c;
  r->bytes = bytes;
  reqTrack(c->st, r);
  *reqOut = r;
  return papcclSuccess;
}

static papcclResult_t ucxIrecv(struct papConn* c, void* buf, size_t bytes, int memType,
                               uint64_t tag, const struct papRecvSink* sink,
                               struct papReq** reqOut) {
  (void)memType;
  struct papReq* r = NULL;
  PAP_CHECK(papCalloc(&r, 1));
  r->isRecv = 1;
  r->bytes = bytes;
  void* dst = buf;
  if (sink) { /* the engine reduces out of our buffer: receive into a bounce buffer */
    r->sink = *sink;
    r->hasSink = 1;
    if (bytes && (r->bounce = bounceGet(c->st, bytes, &r->bounceCap)) == NULL) {
      PAP_WARN("ucx: out of memory for a %zu-byte receive buffer", bytes);
      free(r);
      return papcclSystemError;
    }
    dst = r->bounce;
  }
  ucp_request_param_t p;
  postParams(&p, c, r);
  p.cb.recv = recvCb;
  pthread_mutex_lock(&c->st->wlock);
  r->ucpReq = ucp_tag_recv_nbx(c->st->worker, dst, bytes, ucxTag(c->peer, tag), UINT64_MAX, &p);
  pthread_mutex_unlock(&c->st->wlock);
  if (UCS_PTR_IS_ERR(r->ucpReq)) {
    ucs_status_t s = UCS_PTR_STATUS(r->ucpReq);
    pthread_mutex_lock(&c->st->reqLock);
    bouncePut(c->st, r->bounce, r->bounceCap);
    pthread_mutex_unlock(&c->st->reqLock);
    free(r);
    return papUcxFail("ucp_tag_recv_nbx", s);
  }
  reqTrack(c->st, r);
  *reqOut = r;
  return papcclSuccess;
}

/* The message stays in the worker's unexpected queue (not removed): the receive that
 * follows matches it by the same tag. */
static int ucxProbe(struct papConn* c, uint64_t tag) {
  ucp_tag_recv_info_t info;
  pthread_mutex_lock(&c->st->wlock);
  ucp_tag_message_h msg =
      ucp_tag_probe_nb(c->st->worker, ucxTag(c->peer, tag), UINT64_MAX, 0, &info);
  pthread_mutex_unlock(&c->st->wlock);
  return msg != NULL;
}

static papcclResult_t ucxTest(struct papReq* r, int* doneOut, size_t* sizeOut) {
  *doneOut = 0;
  ucs_status_t s = UCS_OK;
  size_t len = r->bytes;
  /* No worker pass here: the engine makes one per pass over its requests (progress). */
  if (r->ucpReq != NULL) {
    pthread_mutex_lock(&r->st->wlock);
    if (r->isRecv) {
      ucp_tag_recv_info_t info;
      s = ucp_tag_recv_request_test(r->ucpReq, &info);
      if (s == UCS_OK) len = info.length;
    } else {
      s = ucp_request_check_status(r->ucpReq);
    }
    if (s != UCS_INPROGRESS) {
      ucp_request_free(r->ucpReq);
      r->ucpReq = NULL;
    }
    pthread_mutex_unlock(&r->st->wlock);
  }
  if (r->ucpReq != NULL) return papcclSuccess; /* still in progress */
  papcclResult_t res = papcclSuccess;
  if (s != UCS_OK) {
    res = r->isRecv ? papUcxFail("a receive", s) : sendFailed(r->conn, "a send", s);
  } else if (r->isRecv && len != r->bytes) {
    PAP_WARN("ucx: message of %zu bytes where %zu were expected", len, r->bytes);
    res = papcclInternalError;
  } else if (r->hasSink && len) {
    r->sink.fn(r->sink.arg, 0, r->bounce, len);
  }
  if (sizeOut) *sizeOut = len;
  papUcxReqRelease(r);
  *doneOut = 1;
  return res;
}

static papcclResult_t ucxProgress(void* state) {
  papUcxProgressOnce((struct ucxState*)state);
  return papcclSuccess;
}

/* Cancels every receive still posted (the engine's thread, the only one that posts, tests
 * and frees requests), then drives the worker until none is in progress: one UCX matched
 * already completes as its data arrives (bounded). Finalize frees them. */
static void ucxAbandon(void* state) {
  struct ucxState* st = (struct ucxState*)state;
  pthread_mutex_lock(&st->wlock);
  for (struct papReq* r = st->reqs; r; r = r->next)
    if (r->isRecv && r->ucpReq && ucp_request_check_status(r->ucpReq) == UCS_INPROGRESS)
      ucp_request_cancel(st->worker, r->ucpReq);
  pthread_mutex_unlock(&st->wlock);
  uint64_t deadline = papNowNs() + 200000000ull;
  for (;;) {
    int busy = 0;
    pthread_mutex_lock(&st->wlock);
    for (struct papReq* r = st->reqs; r && !busy; r = r->next)
      busy = r->isRecv && r->ucpReq && ucp_request_check_status(r->ucpReq) == UCS_INPROGRESS;
    pthread_mutex_unlock(&st->wlock);
    if (!busy || papNowNs() > deadline) return;
    papUcxProgressOnce(st);
  }
}

void papUcxPoolFree(struct ucxState* st) {
  while (st->pool) {
    struct ucxBuf* b = st->pool;
    st->pool = b->next;
    free(b);
  }
}

const struct papMsgOps papUcxMsgOps = {
    .isend = ucxIsend,
    .irecv = ucxIrecv,
    .probe = ucxProbe,
    .test = ucxTest,
    .progress = ucxProgress,
    .abandon = ucxAbandon,
};
