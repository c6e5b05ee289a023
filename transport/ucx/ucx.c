/* SPDX-License-Identifier: Apache-2.0 */
/* UCX transport: one UCP context and worker per communicator rank, tag messages between
 * ranks, the PAP arrival board in rank 0's memory reached with UCX atomics, wake-ups as
 * active messages, sleeping on the worker's event fd.
 *
 * Per communicator, not per process: a communicator's worker is driven only by the thread
 * that holds its progress lock plus its own progress thread, so workers never contend
 * across communicators and teardown is local. The worker runs in UCS_THREAD_MODE_MULTI
 * because those two threads (and wake() from an aborting thread) may enter it at once.
 *
 * UCX reads its own UCX_* variables (UCX_TLS, UCX_NET_DEVICES, ...) through
 * ucp_config_read. Over transports without hardware atomics (TCP, shared memory) UCX
 * serves the board's atomics in software on rank 0's worker, so rank 0 must progress
 * even when idle: the ops table asks for idle progress and the comm's progress thread
 * provides it. */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <ucp/api/ucp.h>
#include <unistd.h>

#include "alloc.h"
#include "check.h"
#include "futex.h"
#include "log.h"
#include "param.h"
#include "socket.h"
#include "transport.h"
#include "ucx/ucx.h"

#define UCX_HANDLE_MAGIC 0x7061707563783031ull /* "papucx01" */
#define UCX_AM_WAKE 7 /* active message id: "something changed for you" */

/* Handle swapped through the bootstrap: header, worker address, then (rank 0) the board's
 * packed remote key. */
struct ucxHandleHdr {
  uint64_t magic;
  uint64_t boardAddr;
  uint32_t addrLen;
  uint32_t rkeyLen;
};
_Static_assert(sizeof(struct ucxHandleHdr) == PAP_UCX_HANDLE_HDR_BYTES, "ucx handle layout");

struct papReq {
  struct papReq* prev; /* outstanding requests: finalize cancels what the engine left */
  struct papReq* next;
  struct ucxState* st;
  ucs_status_ptr_t ucpReq;
  ucp_worker_h worker;
  int isRecv;
  size_t bytes;
  void* bounce; /* sink receives land here first */
  struct papRecvSink sink;
  int hasSink;
  size_t received;
};

struct papConn {
  struct ucxState* st;
  int peer;
  ucp_ep_h ep;
  _Atomic int dead; /* the error handler saw the peer fail */
};

struct ucxState {
  int rank;
  int nranks;
  size_t boardWords; /* the arrival board's size (rank 0 holds it) */
  const volatile int* abortFlag;
  int64_t spinNs;
  ucp_context_h ctx;
  ucp_worker_h worker;
  int efd; /* the worker's event fd */
  int wakeFd; /* eventfd for wake() */
  _Atomic uint32_t bell;
  _Atomic int sleepers; /* threads inside poll() in ucxWait */
  _Atomic int poller; /* 1 while a thread has armed the worker and sleeps on its event fd */
  pthread_mutex_t reqLock;
  /* Serializes every call into the worker. UCX's own multi-thread lock spins: with more
   * threads than CPUs its holder gets preempted and the waiter burns its time slice
   * (stalls of several ms per call); this one sleeps. Never held across poll(). */
  pthread_mutex_t wlock;
  struct papReq* reqs; /* outstanding */
  struct papConn** conns; /* [nranks]; conns[rank] is the loopback to ourselves */
  /* The arrival board: rank 0 maps it; every rank reaches it through conns[0]. */
  ucp_mem_h boardMem;
  uint64_t* board;
  uint64_t boardAddr;
  ucp_rkey_h boardRkey;
  /* Operand and reply buffers of board atomics that failed while UCX may still hold them
   * (a timed-out request cannot be cancelled): freed after the worker is gone. */
  struct ucxAmo* orphans;
};

/* Something changed for the threads of this rank: bump the bell, and if one sleeps in
 * poll (another thread may have taken the worker's event), wake it through the eventfd. */
static void ring(struct ucxState* st) {
  atomic_fetch_add_explicit(&st->bell, 1, memory_order_seq_cst);
  if (atomic_load_explicit(&st->sleepers, memory_order_seq_cst) > 0) {
    uint64_t one = 1;
    ssize_t n = write(st->wakeFd, &one, sizeof(one));
    (void)n;
  }
}

/* The thread that holds the poller role of a worker (ucxWait), if this thread does. */
static __thread struct ucxState* pollerOf;

/* One pass of the worker by any thread. The poller sleeps on the worker's event fd, which
 * signals only new events (edge-triggered): when another thread's pass consumed some, what
 * that pass left behind would go unnoticed until the poller's timeout. So a pass that did
 * work while someone else polls wakes the poller, which drains and re-arms. */
static unsigned progressOnce(struct ucxState* st) {
  pthread_mutex_lock(&st->wlock);
  unsigned n = ucp_worker_progress(st->worker);
  pthread_mutex_unlock(&st->wlock);
  if (n != 0 && pollerOf != st && atomic_load_explicit(&st->poller, memory_order_seq_cst)) {
    uint64_t one = 1;
    ssize_t w = write(st->wakeFd, &one, sizeof(one));
    (void)w;
  }
  return n;
}

/* Completion callbacks ring the bell: a sleeper in ucxWait looks again. */
static void sentCb(void* req, ucs_status_t status, void* user) {
  (void)req, (void)status;
  ring((struct ucxState*)user);
}
static void recvCb(void* req, ucs_status_t status, const ucp_tag_recv_info_t* info, void* user) {
  (void)req, (void)status, (void)info;
  ring((struct ucxState*)user);
}

static void reqTrack(struct ucxState* st, struct papReq* r) {
  r->st = st;
  pthread_mutex_lock(&st->reqLock);
  r->next = st->reqs;
  if (st->reqs) st->reqs->prev = r;
  st->reqs = r;
  pthread_mutex_unlock(&st->reqLock);
}

static void reqRelease(struct papReq* r) {
  struct ucxState* st = r->st;
  pthread_mutex_lock(&st->reqLock);
  if (r->prev)
    r->prev->next = r->next;
  else
    st->reqs = r->next;
  if (r->next) r->next->prev = r->prev;
  pthread_mutex_unlock(&st->reqLock);
  free(r->bounce);
  free(r);
}

static papcclResult_t ucxFail(const char* what, ucs_status_t s) {
  PAP_WARN("ucx: %s failed: %s", what, ucs_status_string(s));
  return s == UCS_ERR_NO_MEMORY ? papcclSystemError : papcclRemoteError;
}

static int ucxCanConnect(const struct papTransportCtx* ctx, int peer) {
  (void)ctx, (void)peer;
  return 1; /* UCX reaches any peer (same host through its own shared memory) */
}

static ucs_status_t amWake(void* arg, const void* header, size_t headerLen, void* data, size_t len,
                           const ucp_am_recv_param_t* param) {
  (void)header, (void)headerLen, (void)data, (void)len, (void)param;
  ring((struct ucxState*)arg);
  return UCS_OK;
}

static papcclResult_t ucxInit(const struct papTransportCtx* ctx, void** stateOut) {
  struct ucxState* st = NULL;
  PAP_CHECK(papCalloc(&st, 1));
  st->rank = ctx->rank;
  st->nranks = ctx->nranks;
  st->boardWords = ctx->boardWords;
  st->abortFlag = ctx->abortFlag;
  st->spinNs = ctx->spinNs;
  st->efd = st->wakeFd = -1;
  pthread_mutex_init(&st->reqLock, NULL);
  pthread_mutex_init(&st->wlock, NULL);
  papcclResult_t res = papcclSuccess;
  ucp_config_t* config = NULL;
  ucs_status_t s = ucp_config_read(NULL, NULL, &config);
  if (s != UCS_OK) {
    res = ucxFail("ucp_config_read", s);
    goto fail;
  }
  ucp_params_t params;
  memset(&params, 0, sizeof(params));
  params.field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_MT_WORKERS_SHARED;
  params.features =
      UCP_FEATURE_TAG | UCP_FEATURE_RMA | UCP_FEATURE_AMO64 | UCP_FEATURE_AM | UCP_FEATURE_WAKEUP;
  params.mt_workers_shared = 0;
  s = ucp_init(&params, config, &st->ctx);
  ucp_config_release(config);
  if (s != UCS_OK) {
    res = ucxFail("ucp_init", s);
    goto fail;
  }
  ucp_worker_params_t wp;
  memset(&wp, 0, sizeof(wp));
  wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
  wp.thread_mode = UCS_THREAD_MODE_MULTI;
  s = ucp_worker_create(st->ctx, &wp, &st->worker);
  if (s != UCS_OK) {
    res = ucxFail("ucp_worker_create", s);
    goto fail;
  }
  ucp_worker_attr_t wa;
  memset(&wa, 0, sizeof(wa));
  wa.field_mask = UCP_WORKER_ATTR_FIELD_THREAD_MODE;
  if (ucp_worker_query(st->worker, &wa) == UCS_OK && wa.thread_mode != UCS_THREAD_MODE_MULTI) {
    PAP_WARN("ucx: this UCX build gives no thread-safe worker (thread mode %d)",
             (int)wa.thread_mode);
    res = papcclSystemError;
    goto fail;
  }
  s = ucp_worker_get_efd(st->worker, &st->efd);
  if (s != UCS_OK) {
    res = ucxFail("ucp_worker_get_efd", s);
    goto fail;
  }
  st->wakeFd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (st->wakeFd < 0) {
    PAP_WARN("ucx: eventfd failed: %s", strerror(errno));
    res = papcclSystemError;
    goto fail;
  }
  ucp_am_handler_param_t ap;
  memset(&ap, 0, sizeof(ap));
  ap.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_CB |
                  UCP_AM_HANDLER_PARAM_FIELD_ARG;
  ap.id = UCX_AM_WAKE;
  ap.cb = amWake;
  ap.arg = st;
  s = ucp_worker_set_am_recv_handler(st->worker, &ap);
  if (s != UCS_OK) {
    res = ucxFail("ucp_worker_set_am_recv_handler", s);
    goto fail;
  }
  if (papCalloc(&st->conns, (size_t)st->nranks) != papcclSuccess) {
    res = papcclSystemError;
    goto fail;
  }
  if (st->rank == 0) {
    size_t bytes = st->boardWords * sizeof(uint64_t);
    ucp_mem_map_params_t mp;
    memset(&mp, 0, sizeof(mp));
    mp.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH |
                    UCP_MEM_MAP_PARAM_FIELD_FLAGS;
    mp.address = NULL;
    mp.length = bytes;
    mp.flags = UCP_MEM_MAP_ALLOCATE;
    s = ucp_mem_map(st->ctx, &mp, &st->boardMem);
    if (s != UCS_OK) {
      res = ucxFail("ucp_mem_map of the arrival board", s);
      goto fail;
    }
    ucp_mem_attr_t ma;
    memset(&ma, 0, sizeof(ma));
    ma.field_mask = UCP_MEM_ATTR_FIELD_ADDRESS;
    s = ucp_mem_query(st->boardMem, &ma);
    if (s != UCS_OK) {
      res = ucxFail("ucp_mem_query", s);
      goto fail;
    }
    st->board = (uint64_t*)ma.address;
    memset(st->board, 0, bytes);
    st->boardAddr = (uint64_t)(uintptr_t)st->board;
  }
  *stateOut = st;
  return papcclSuccess;

fail:
  /* finalize copes with a partly built state */
  papTransportUcx.finalize(st);
  return res;
}

static papcclResult_t ucxListen(void* state, void* handleOut) {
  struct ucxState* st = (struct ucxState*)state;
  ucp_address_t* addr = NULL;
  size_t addrLen = 0;
  ucs_status_t s = ucp_worker_get_address(st->worker, &addr, &addrLen);
  if (s != UCS_OK) return ucxFail("ucp_worker_get_address", s);
  void* rkey = NULL;
  size_t rkeyLen = 0;
  if (st->rank == 0) {
    s = ucp_rkey_pack(st->ctx, st->boardMem, &rkey, &rkeyLen);
    if (s != UCS_OK) {
      ucp_worker_release_address(st->worker, addr);
      return ucxFail("ucp_rkey_pack of the arrival board", s);
    }
  }
  papcclResult_t res = papcclSuccess;
  struct ucxHandleHdr h = {UCX_HANDLE_MAGIC, st->boardAddr, (uint32_t)addrLen, (uint32_t)rkeyLen};
  if (sizeof(h) + addrLen + rkeyLen > PAP_TRANSPORT_UCX_HANDLE_BYTES) {
    PAP_WARN(
        "ucx: worker address (%zu bytes) and key (%zu) exceed the %d-byte handle; limit "
        "UCX_TLS",
        addrLen, rkeyLen, PAP_TRANSPORT_UCX_HANDLE_BYTES);
    res = papcclSystemError;
  } else {
    memset(handleOut, 0, PAP_TRANSPORT_UCX_HANDLE_BYTES);
    memcpy(handleOut, &h, sizeof(h));
    memcpy((char*)handleOut + sizeof(h), addr, addrLen);
    if (rkeyLen) memcpy((char*)handleOut + sizeof(h) + addrLen, rkey, rkeyLen);
  }
  if (rkey) ucp_rkey_buffer_release(rkey);
  ucp_worker_release_address(st->worker, addr);
  return res;
}

static void epError(void* arg, ucp_ep_h ep, ucs_status_t status) {
  (void)ep;
  struct papConn* c = (struct papConn*)arg;
  atomic_store_explicit(&c->dead, 1, memory_order_release);
  atomic_fetch_add_explicit(&c->st->bell, 1, memory_order_seq_cst);
  PAP_INFO(PAP_LOG_NET, "ucx: connection to rank %d failed: %s", c->peer,
           ucs_status_string(status));
}

int papUcxHandleCheck(const void* handle, size_t handleBytes, struct papUcxHandleInfo* infoOut) {
  struct ucxHandleHdr h;
  if (handleBytes < sizeof(h)) return -1;
  memcpy(&h, handle, sizeof(h));
  if (h.magic != UCX_HANDLE_MAGIC || sizeof(h) + (size_t)h.addrLen + h.rkeyLen > handleBytes)
    return -1;
  infoOut->boardAddr = h.boardAddr;
  infoOut->addr = (const char*)handle + sizeof(h);
  infoOut->addrLen = h.addrLen;
  infoOut->rkey = (const char*)handle + sizeof(h) + h.addrLen;
  infoOut->rkeyLen = h.rkeyLen;
  return 0;
}

static papcclResult_t ucxConnect(void* state, int peer, const void* handle,
                                 struct papConn** connOut) {
  struct ucxState* st = (struct ucxState*)state;
  struct papUcxHandleInfo h;
  if (papUcxHandleCheck(handle, PAP_TRANSPORT_UCX_HANDLE_BYTES, &h) != 0) {
    PAP_WARN("ucx: the handle of rank %d is malformed", peer);
    return papcclInternalError;
  }
  struct papConn* c = NULL;
  PAP_CHECK(papCalloc(&c, 1));
  c->st = st;
  c->peer = peer;
  ucp_ep_params_t ep;
  memset(&ep, 0, sizeof(ep));
  ep.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                  UCP_EP_PARAM_FIELD_ERR_HANDLER;
  ep.address = (const ucp_address_t*)h.addr;
  ep.err_mode = UCP_ERR_HANDLING_MODE_PEER;
  ep.err_handler.cb = epError;
  ep.err_handler.arg = c;
  ucs_status_t s = ucp_ep_create(st->worker, &ep, &c->ep);
  if (s != UCS_OK) {
    free(c);
    return ucxFail("ucp_ep_create", s);
  }
  if (peer == 0 && st->boardRkey == NULL) {
    s = ucp_ep_rkey_unpack(c->ep, h.rkey, &st->boardRkey);
    if (s != UCS_OK) {
      ucp_ep_destroy(c->ep);
      free(c);
      return ucxFail("ucp_ep_rkey_unpack of the arrival board", s);
    }
    st->boardAddr = h.boardAddr;
  }
  st->conns[peer] = c;
  *connOut = c;
  return papcclSuccess;
}

/* The engine never connects a rank to itself; the board needs that loopback on rank 0. */
static papcclResult_t ucxReady(void* state) {
  struct ucxState* st = (struct ucxState*)state;
  if (st->rank != 0 || st->conns[0] != NULL) return papcclSuccess;
  char handle[PAP_TRANSPORT_UCX_HANDLE_BYTES];
  PAP_CHECK(ucxListen(state, handle));
  struct papConn* self = NULL;
  return ucxConnect(state, 0, handle, &self);
}

/* UCX tag: the sender's rank in the top 16 bits, then the engine's tag folded: the
 * point-to-point flag (bit 63), 15 bits of the sequence number (two messages 32768
 * operations apart are never in flight together) and the 32-bit message counter.
 * Receives match the full tag, so the sender is part of the match. */
static uint64_t ucxTag(int sender, uint64_t tag) {
  uint64_t seq = ((tag >> 32) & 0x7fff) | ((tag >> 63) << 15);
  return ((uint64_t)(uint16_t)sender << 48) | (seq << 32) | (tag & 0xffffffffull);
}

static papcclResult_t ucxIsend(struct papConn* c, const void* buf, size_t bytes, int memType,
                               uint64_t tag, struct papReq** reqOut) {
  (void)memType;
  struct papReq* r = NULL;
  PAP_CHECK(papCalloc(&r, 1));
  ucp_request_param_t p;
  memset(&p, 0, sizeof(p));
  p.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
  p.cb.send = sentCb;
  p.user_data = c->st;
  r->worker = c->st->worker;
  pthread_mutex_lock(&c->st->wlock);
  r->ucpReq = ucp_tag_send_nbx(c->ep, buf, bytes, ucxTag(c->st->rank, tag), &p);
  pthread_mutex_unlock(&c->st->wlock);
  if (UCS_PTR_IS_ERR(r->ucpReq)) {
    ucs_status_t s = UCS_PTR_STATUS(r->ucpReq);
    free(r);
    return ucxFail("ucp_tag_send_nbx", s);
  }
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
    if (bytes && papCalloc((char**)&r->bounce, bytes) != papcclSuccess) {
      free(r);
      return papcclSystemError;
    }
    dst = r->bounce;
  }
  ucp_request_param_t p;
  memset(&p, 0, sizeof(p));
  p.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
  p.cb.recv = recvCb;
  p.user_data = c->st;
  r->worker = c->st->worker;
  pthread_mutex_lock(&c->st->wlock);
  r->ucpReq = ucp_tag_recv_nbx(c->st->worker, dst, bytes, ucxTag(c->peer, tag), UINT64_MAX, &p);
  pthread_mutex_unlock(&c->st->wlock);
  if (UCS_PTR_IS_ERR(r->ucpReq)) {
    ucs_status_t s = UCS_PTR_STATUS(r->ucpReq);
    free(r->bounce);
    free(r);
    return ucxFail("ucp_tag_recv_nbx", s);
  }
  reqTrack(c->st, r);
  *reqOut = r;
  return papcclSuccess;
}

static papcclResult_t ucxTest(struct papReq* r, int* doneOut, size_t* sizeOut) {
  *doneOut = 0;
  ucs_status_t s = UCS_OK;
  size_t len = r->bytes;
  for (int round = 0; r->ucpReq != NULL && round < 2; round++) {
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
    if (s != UCS_INPROGRESS) break;
    if (round == 0) progressOnce(r->st); /* requests complete only in progress */
  }
  if (r->ucpReq != NULL) return papcclSuccess; /* still in progress */
  papcclResult_t res = papcclSuccess;
  if (s != UCS_OK) {
    res = ucxFail(r->isRecv ? "a receive" : "a send", s);
  } else if (r->isRecv && len != r->bytes) {
    PAP_WARN("ucx: message of %zu bytes where %zu were expected", len, r->bytes);
    res = papcclInternalError;
  } else if (r->hasSink && len) {
    r->sink.fn(r->sink.arg, 0, r->bounce, len);
  }
  if (sizeOut) *sizeOut = len;
  reqRelease(r);
  *doneOut = 1;
  return res;
}

/* Drives the worker until it has nothing more to do; returns how many events it handled. */
static unsigned ucxDrain(struct ucxState* st) {
  unsigned total = 0, n;
  while ((n = progressOnce(st)) != 0)
    total += n;
  return total;
}

static papcclResult_t ucxProgress(void* state) {
  ucxDrain((struct ucxState*)state);
  return papcclSuccess;
}

static int ucxPeerAlive(void* state, int peer) {
  struct ucxState* st = (struct ucxState*)state;
  if (peer < 0 || peer >= st->nranks || st->conns[peer] == NULL) return 1;
  return !atomic_load_explicit(&st->conns[peer]->dead, memory_order_acquire);
}

static uint32_t ucxWaitToken(void* state) {
  struct ucxState* st = (struct ucxState*)state;
  return atomic_load_explicit(&st->bell, memory_order_acquire);
}

/* Sleeps until the worker has events, wake() or notify() ring, or the timeout. Anything the
 * worker does before sleeping (a message in, a request done) counts as a change: the
 * caller looks again first. */
static void ucxWait(void* state, uint32_t token, int64_t timeoutNs) {
  struct ucxState* st = (struct ucxState*)state;
  ucxDrain(st); /* completions ring the bell */
  if (timeoutNs <= 0 || papAborted(st->abortFlag)) return;
  if (atomic_load_explicit(&st->bell, memory_order_acquire) != token) return;
  /* One thread at a time arms the worker and sleeps on its event fd (the poller); the
   * others sleep on the eventfd only. Two threads arming and progressing one worker lose
   * its edge-triggered events: a reply that one of them consumed while the other armed
   * left the second asleep until its timeout. Whatever the poller's progress completes
   * rings the bell, which wakes the others. */
  int expected = 0;
  int isPoller = atomic_compare_exchange_strong(&st->poller, &expected, 1);
  if (isPoller) {
    pollerOf = st;
    ucxDrain(st); /* nobody else progressed it while we were not the poller */
    ucs_status_t s = UCS_ERR_BUSY;
    if (atomic_load_explicit(&st->bell, memory_order_acquire) == token) {
      pthread_mutex_lock(&st->wlock);
      s = ucp_worker_arm(st->worker);
      pthread_mutex_unlock(&st->wlock);
    }
    if (s != UCS_OK) {
      pollerOf = NULL;
      atomic_store_explicit(&st->poller, 0, memory_order_seq_cst);
      ucxDrain(st); /* UCS_ERR_BUSY: events are pending; go and look */
      return;
    }
  }
  struct pollfd fds[2] = {{st->wakeFd, POLLIN, 0}, {st->efd, POLLIN, 0}};
  int ms = (int)((timeoutNs + 999999) / 1000000);
  atomic_fetch_add_explicit(&st->sleepers, 1, memory_order_seq_cst);
  /* A thread that sleeps on the eventfd alone needs a poller behind it: if the poller left
   * meanwhile (it rings the sleepers it counts as it leaves; seq_cst on both sides, so one
   * of us sees the other), do not sleep: come back and take the role. */
  int covered = isPoller || atomic_load_explicit(&st->poller, memory_order_seq_cst);
  if (covered && atomic_load_explicit(&st->bell, memory_order_seq_cst) == token)
    poll(fds, isPoller ? 2 : 1, ms);
  if (isPoller) {
    pollerOf = NULL;
    atomic_store_explicit(&st->poller, 0, memory_order_seq_cst);
    ucxDrain(st);
    /* Events that arrive from now on have no poller: hand the role to a sleeper. */
    if (atomic_load_explicit(&st->sleepers, memory_order_seq_cst) > 1) ring(st);
  }
  /* The eventfd stays readable (level-triggered) until the last sleeper leaves, so every
   * sleeper sees a ring; the last one resets it. */
  if (atomic_fetch_sub_explicit(&st->sleepers, 1, memory_order_seq_cst) == 1) {
    uint64_t v;
    ssize_t n = read(st->wakeFd, &v, sizeof(v));
    (void)n;
  }
  if (!isPoller) ucxProgress(state);
}

static void ucxWake(void* state) {
  struct ucxState* st = (struct ucxState*)state;
  atomic_fetch_add_explicit(&st->bell, 1, memory_order_seq_cst);
  uint64_t one = 1;
  ssize_t n = write(st->wakeFd, &one, sizeof(one));
  (void)n;
}

static void* ucxStaging(void* state, int r, size_t* sizeOut) {
  (void)state, (void)r;
  if (sizeOut) *sizeOut = 0;
  return NULL; /* no direct access to peers' memory */
}

/* Completes a UCX request by progressing the worker (bounded by abort and the timeout). */
static papcclResult_t ucxWaitRequest(struct ucxState* st, ucs_status_ptr_t req, const char* what) {
  if (req == NULL) return papcclSuccess;
  if (UCS_PTR_IS_ERR(req)) return ucxFail(what, UCS_PTR_STATUS(req));
  /* A reply usually comes within a network round trip: poll that long before sleeping (a
   * wake-up from poll() costs more than the round trip itself). */
  struct papWait w;
  papWaitInit(&w, what, st->abortFlag, 1, st->spinNs > 0 ? (uint64_t)st->spinNs : 0, 0);
  w.abortRes = papcclRemoteError;
  int spinning = st->spinNs > 0;
  ucs_status_t s;
  for (unsigned i = 0;; i++) {
    uint32_t tok = atomic_load_explicit(&st->bell, memory_order_acquire);
    pthread_mutex_lock(&st->wlock);
    s = ucp_request_check_status(req);
    pthread_mutex_unlock(&st->wlock);
    if (s != UCS_INPROGRESS) break;
    if (spinning && ((i & 15) != 15 || papWaitInBudget(&w, papNowNs()))) {
      progressOnce(st);
      continue;
    }
    spinning = 0;
    uint64_t now = papNowNs();
    papcclResult_t res = papWaitCheck(&w, now);
    if (res != papcclSuccess) {
      pthread_mutex_lock(&st->wlock);
      ucp_request_cancel(st->worker, req);
      ucp_request_free(req);
      pthread_mutex_unlock(&st->wlock);
      return res;
    }
    ucxWait(st, tok, papWaitSlice(&w, now, 10000000)); /* the reply's callback rings the bell */
  }
  pthread_mutex_lock(&st->wlock);
  ucp_request_free(req);
  pthread_mutex_unlock(&st->wlock);
  return s == UCS_OK ? papcclSuccess : ucxFail(what, s);
}

/* Posts one 64-bit atomic on the board word at remote; reply gets the old value. */
static ucs_status_ptr_t postBoardAtomic(struct ucxState* st, ucp_atomic_op_t op,
                                        const uint64_t* operand, uint64_t remote, uint64_t* reply) {
  ucp_request_param_t p;
  memset(&p, 0, sizeof(p));
  p.op_attr_mask = UCP_OP_ATTR_FIELD_DATATYPE | UCP_OP_ATTR_FIELD_REPLY_BUFFER |
                   UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
  p.datatype = ucp_dt_make_contig(sizeof(uint64_t));
  p.cb.send = sentCb;
  p.user_data = st;
  p.reply_buffer = reply;
  pthread_mutex_lock(&st->wlock);
  ucs_status_ptr_t req =
      ucp_atomic_op_nbx(st->conns[0]->ep, op, operand, 1, remote, st->boardRkey, &p);
  pthread_mutex_unlock(&st->wlock);
  return req;
}

/* One board atomic's buffers: on the heap, since a request that timed out may still be read
 * or written by UCX after the call returned. */
struct ucxAmo {
  struct ucxAmo* next;
  uint64_t operand, reply;
};

static papcclResult_t ucxBoardAtomic(void* state, size_t idx, int op, uint64_t val, uint64_t cmp,
                                     uint64_t* oldOut) {
  struct ucxState* st = (struct ucxState*)state;
  if (st->conns[0] == NULL || st->boardRkey == NULL || idx >= st->boardWords) {
    PAP_WARN("ucx: arrival board word %zu is out of reach", idx);
    return papcclInternalError;
  }
  uint64_t remote = st->boardAddr + idx * sizeof(uint64_t);
  uint64_t operand = val, reply = 0;
  ucp_atomic_op_t uop;
  switch (op) {
  case PAP_BOARD_LOAD:
    uop = UCP_ATOMIC_OP_ADD;
    operand = 0;
    break;
  case PAP_BOARD_STORE:
    uop = UCP_ATOMIC_OP_SWAP;
    break;
  case PAP_BOARD_FADD:
    uop = UCP_ATOMIC_OP_ADD;
    break;
  case PAP_BOARD_CAS:
    uop = UCP_ATOMIC_OP_CSWAP;
    operand = cmp; /* compared with the word; reply_buffer carries the new value in */
    reply = val;
    break;
  default:
    PAP_WARN("ucx: unknown arrival board operation %d", op);
    return papcclInternalError;
  }
  struct ucxAmo* a = (struct ucxAmo*)malloc(sizeof(*a));
  if (a == NULL) {
    PAP_WARN("ucx: out of memory for an arrival board atomic");
    return papcclSystemError;
  }
  a->operand = operand;
  a->reply = reply;
  ucs_status_ptr_t req = postBoardAtomic(st, uop, &a->operand, remote, &a->reply);
  papcclResult_t res = ucxWaitRequest(st, req, "ucx: an arrival board atomic");
  if (res != papcclSuccess) {
    pthread_mutex_lock(&st->wlock);
    a->next = st->orphans;
    st->orphans = a;
    pthread_mutex_unlock(&st->wlock);
    return res;
  }
  if (oldOut) *oldOut = a->reply;
  free(a);
  return papcclSuccess;
}

/* Consecutive board words: fetch-and-add-0 atomics posted together and waited for
 * together, so a read costs about one round trip. (An RMA get would be one message, but
 * UCX serves gets over TCP far slower than atomics: milliseconds here.) */
static papcclResult_t ucxBoardRead(void* state, size_t idx, size_t count, uint64_t* out) {
  struct ucxState* st = (struct ucxState*)state;
  if (st->conns[0] == NULL || st->boardRkey == NULL || idx + count > st->boardWords) {
    PAP_WARN("ucx: arrival board words %zu..%zu are out of reach", idx, idx + count);
    return papcclInternalError;
  }
  enum {
    BATCH = 32
  };
  ucs_status_ptr_t reqs[BATCH];
  static const uint64_t zero = 0;
  papcclResult_t res = papcclSuccess;
  for (size_t base = 0; base < count; base += BATCH) {
    size_t k = count - base < BATCH ? count - base : BATCH;
    for (size_t i = 0; i < k; i++)
      reqs[i] =
          postBoardAtomic(st, UCP_ATOMIC_OP_ADD, &zero,
                          st->boardAddr + (idx + base + i) * sizeof(uint64_t), &out[base + i]);
    /* Every posted request is waited for (and freed), even after a failure. */
    for (size_t i = 0; i < k; i++) {
      papcclResult_t r = ucxWaitRequest(st, reqs[i], "ucx: an arrival board read");
      if (res == papcclSuccess) res = r;
    }
    if (res != papcclSuccess) return res;
  }
  return papcclSuccess;
}

static void ucxNotify(void* state, int peer) {
  struct ucxState* st = (struct ucxState*)state;
  if (peer == st->rank) {
    ucxWake(state);
    return;
  }
  if (peer < 0 || peer >= st->nranks || st->conns[peer] == NULL) return;
  ucp_request_param_t p;
  memset(&p, 0, sizeof(p));
  pthread_mutex_lock(&st->wlock);
  ucs_status_ptr_t req = ucp_am_send_nbx(st->conns[peer]->ep, UCX_AM_WAKE, NULL, 0, NULL, 0, &p);
  if (UCS_PTR_IS_PTR(req)) ucp_request_free(req); /* released when it completes */
  pthread_mutex_unlock(&st->wlock);
}

static void ucxClose(struct papConn* c) {
  if (c == NULL) return;
  struct ucxState* st = c->st;
  if (c->ep) {
    ucp_request_param_t p;
    memset(&p, 0, sizeof(p));
    p.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    p.flags = UCP_EP_CLOSE_FLAG_FORCE;
    ucs_status_ptr_t req = ucp_ep_close_nbx(c->ep, &p);
    if (UCS_PTR_IS_PTR(req)) {
      uint64_t deadline = papNowNs() + 2000000000ull;
      while (ucp_request_check_status(req) == UCS_INPROGRESS && papNowNs() < deadline)
        ucp_worker_progress(st->worker);
      ucp_request_free(req);
    }
  }
  if (st->conns[c->peer] == c) st->conns[c->peer] = NULL;
  free(c);
}

/* Is any request an aborted plan left behind still running? */
static int reqsInProgress(struct ucxState* st) {
  for (struct papReq* r = st->reqs; r; r = r->next)
    if (r->ucpReq && ucp_request_check_status(r->ucpReq) == UCS_INPROGRESS) return 1;
  return 0;
}

/* Messages peers sent for an operation this rank never received (it was aborted) wait in
 * the worker's unexpected queue: receive and drop them before the worker goes. */
static void dropUnexpected(struct ucxState* st) {
  uint64_t deadline = papNowNs() + 1000000000ull;
  for (int i = 0; i < 100000 && papNowNs() < deadline; i++) {
    ucp_tag_recv_info_t info;
    ucp_worker_progress(st->worker); /* what is still in the sockets */
    ucp_tag_message_h msg = ucp_tag_probe_nb(st->worker, 0, 0, 1, &info);
    if (msg == NULL) break;
    void* scratch = malloc(info.length ? info.length : 1);
    if (scratch == NULL) break;
    ucp_request_param_t p;
    memset(&p, 0, sizeof(p));
    ucs_status_ptr_t req = ucp_tag_msg_recv_nbx(st->worker, scratch, info.length, msg, &p);
    if (UCS_PTR_IS_PTR(req)) {
      while (ucp_request_check_status(req) == UCS_INPROGRESS && papNowNs() < deadline)
        ucp_worker_progress(st->worker);
      if (ucp_request_check_status(req) == UCS_INPROGRESS) ucp_request_cancel(st->worker, req);
      ucp_request_free(req);
    }
    free(scratch);
  }
}

static void ucxFinalize(void* state) {
  struct ucxState* st = (struct ucxState*)state;
  if (st == NULL) return;
  if (st->worker) dropUnexpected(st);
  /* Requests an aborted plan left behind must complete before the worker goes (UCX keeps
   * them in its pools otherwise): receives are cancelled, sends end with an error when the
   * force-close of their endpoint below purges them. Then they are freed. */
  for (struct papReq* r = st->reqs; r; r = r->next)
    if (r->ucpReq && r->isRecv) ucp_request_cancel(st->worker, r->ucpReq);
  if (st->conns) {
    for (int p = 0; p < st->nranks; p++)
      if (st->conns[p]) ucxClose(st->conns[p]);
    free(st->conns);
  }
  uint64_t deadline = papNowNs() + 2000000000ull;
  while (st->worker && reqsInProgress(st) && papNowNs() < deadline)
    ucp_worker_progress(st->worker);
  while (st->reqs) {
    struct papReq* r = st->reqs;
    if (r->ucpReq) ucp_request_free(r->ucpReq);
    r->ucpReq = NULL;
    reqRelease(r);
  }
  /* Only now: a board atomic that timed out still uses the key until its endpoint's close
   * purges it (a crash under a cut link, seen with freed memory perturbed). */
  if (st->boardRkey) ucp_rkey_destroy(st->boardRkey);
  if (st->boardMem) ucp_mem_unmap(st->ctx, st->boardMem);
  if (st->worker) dropUnexpected(st); /* and what arrived while the endpoints closed */
  if (st->wakeFd >= 0) close(st->wakeFd);
  if (st->worker) ucp_worker_destroy(st->worker);
  while (st->orphans) {
    struct ucxAmo* a = st->orphans;
    st->orphans = a->next;
    free(a);
  }
  if (st->ctx) ucp_cleanup(st->ctx);
  pthread_mutex_destroy(&st->reqLock);
  pthread_mutex_destroy(&st->wlock);
  free(st);
}

const struct papTransportOps papTransportUcx = {
    .name = "ucx",
    .remoteBoard = 1,
    .idleProgress = 1,
    .handleBytes = PAP_TRANSPORT_UCX_HANDLE_BYTES,
    .canConnect = ucxCanConnect,
    .init = ucxInit,
    .listen = ucxListen,
    .connect = ucxConnect,
    .ready = ucxReady,
    .isend = ucxIsend,
    .irecv = ucxIrecv,
    .test = ucxTest,
    .progress = ucxProgress,
    .peerAlive = ucxPeerAlive,
    .waitToken = ucxWaitToken,
    .wait = ucxWait,
    .wake = ucxWake,
    .staging = ucxStaging,
    .boardAtomic = ucxBoardAtomic,
    .boardRead = ucxBoardRead,
    .notify = ucxNotify,
    .close = ucxClose,
    .finalize = ucxFinalize,
};
