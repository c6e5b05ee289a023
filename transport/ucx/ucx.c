/* SPDX-License-Identifier: Apache-2.0 */
/* UCX transport: one UCP context and worker per communicator rank, tag messages between
 * ranks, the PAP arrival board as a message board (requests to rank 0, replies and pushes
 * back, all active messages; docs/PAP-ENGINE.md section 10), wake-ups as active messages,
 * sleeping on the worker's event fd. This file: setup, connections, teardown and the ops
 * table; the concerns in ucx_msg.c, ucx_wake.c and ucx_home.c (ucx_int.h).
 *
 * Per communicator, not per process: a communicator's worker is driven only by the thread
 * that holds its progress lock plus its own progress thread, so workers never contend
 * across communicators and teardown is local. The worker runs in UCS_THREAD_MODE_MULTI
 * because those two threads (and wake() from an aborting thread) may enter it at once.
 *
 * UCX reads its own UCX_* variables (UCX_TLS, UCX_NET_DEVICES, ...) through
 * ucp_config_read. Rank 0 serves the board's requests in its worker's progress, so it must
 * progress even when idle: the ops table asks for idle progress (caps.idleProgress) and the
 * comm's progress thread provides it. */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "alloc.h"
#include "check.h"
#include "log.h"
#include "param.h"
#include "ucx/ucx_int.h"

papcclResult_t papUcxFail(const char* what, ucs_status_t s) {
  PAP_WARN("ucx: %s failed: %s", what, ucs_status_string(s));
  return s == UCS_ERR_NO_MEMORY ? papcclSystemError : papcclRemoteError;
}

static int ucxCanConnect(const struct papTransportCtx* ctx, int peer) {
  (void)ctx, (void)peer;
  return 1; /* UCX reaches any peer (same host through its own shared memory) */
}

papcclResult_t papUcxSetAm(struct ucxState* st, unsigned id, ucp_am_recv_callback_t cb) {
  ucp_am_handler_param_t ap;
  memset(&ap, 0, sizeof(ap));
  ap.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_CB |
                  UCP_AM_HANDLER_PARAM_FIELD_ARG;
  ap.id = id;
  ap.cb = cb;
  ap.arg = st;
  ucs_status_t s = ucp_worker_set_am_recv_handler(st->worker, &ap);
  return s == UCS_OK ? papcclSuccess : papUcxFail("ucp_worker_set_am_recv_handler", s);
}

/* Whether UCX can only reach peers over TCP (and shared memory within a host): UCX_TLS names
 * nothing else, or, without UCX_TLS, this host has no RDMA device. */
static int tcpOnly(void) {
  const char* tls = getenv("UCX_TLS");
  if (tls != NULL && tls[0] != '\0' && tls[0] != '^') {
    static const char* const ok[] = {"tcp",  "self", "sm",   "shm",  "posix",
                                     "sysv", "cma",  "knem", "xpmem"};
    char buf[256];
    snprintf(buf, sizeof(buf), "%s", tls);
    char* save = NULL;
    for (char* t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
      int known = 0;
      for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]) && !known; i++)
        known = strcmp(t, ok[i]) == 0;
      if (!known) return 0;
    }
    return 1;
  }
  DIR* d = opendir("/sys/class/infiniband");
  if (d == NULL) return 1;
  int any = 0;
  for (struct dirent* e; (e = readdir(d)) != NULL && !any;)
    any = e->d_name[0] != '.';
  closedir(d);
  return !any;
}

/* Over TCP UCX sends a tag message above 8 KiB with a rendezvous: a round trip that needs
 * the receiver to progress (a sleeping rank wakes for it). The plans send messages of at
 * most a chunk (PAPCCL_CHUNK_SIZE): send those eagerly, each in one TCP segment of UCX's (a
 * message in several segments that a cut link interrupts leaves UCX a receive it can
 * neither finish nor cancel; figures in docs/PAP-ENGINE.md section 13). Any of these UCX_*
 * variables in the environment wins. */
static void eagerLimits(ucp_config_t* config) {
  if (getenv("UCX_RNDV_THRESH") != NULL || getenv("UCX_TCP_TX_SEG_SIZE") != NULL ||
      getenv("UCX_TCP_RX_SEG_SIZE") != NULL || !tcpOnly())
    return;
  int64_t chunk = papParamChunkSize();
  if (chunk > (1 << 20)) chunk = 1 << 20; /* larger messages keep the rendezvous */
  char thresh[32], seg[32];
  snprintf(thresh, sizeof(thresh), "%lld", (long long)chunk + 1);
  snprintf(seg, sizeof(seg), "%lld", (long long)chunk + 4096); /* + UCX's headers */
  /* The segment sizes are the TCP transport's settings, which UCX 1.13 reads from the
   * environment only (ucp_config_modify of them is reported unused): set there, for this
   * process, where nobody set them. */
  if (ucp_config_modify(config, "RNDV_THRESH", thresh) == UCS_OK &&
      setenv("UCX_TCP_TX_SEG_SIZE", seg, 0) == 0 && setenv("UCX_TCP_RX_SEG_SIZE", seg, 0) == 0)
    PAP_INFO(PAP_LOG_NET, "ucx: TCP only: messages up to %lld bytes go eagerly in one segment",
             (long long)chunk);
  else
    PAP_INFO(PAP_LOG_NET, "ucx: could not set UCX's eager limits; its defaults apply");
}

/* The UCP context and its thread-safe worker, with the worker's event fd. */
static papcclResult_t openWorker(struct ucxState* st) {
  ucp_config_t* config = NULL;
  ucs_status_t s = ucp_config_read(NULL, NULL, &config);
  if (s != UCS_OK) return papUcxFail("ucp_config_read", s);
  eagerLimits(config);
  ucp_params_t params;
  memset(&params, 0, sizeof(params));
  params.field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_MT_WORKERS_SHARED;
  params.features = UCP_FEATURE_TAG | UCP_FEATURE_AM | UCP_FEATURE_WAKEUP;
  params.mt_workers_shared = 0;
  s = ucp_init(&params, config, &st->ctx);
  ucp_config_release(config);
  if (s != UCS_OK) return papUcxFail("ucp_init", s);
  ucp_worker_params_t wp;
  memset(&wp, 0, sizeof(wp));
  wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
  wp.thread_mode = UCS_THREAD_MODE_MULTI;
  s = ucp_worker_create(st->ctx, &wp, &st->worker);
  if (s != UCS_OK) return papUcxFail("ucp_worker_create", s);
  ucp_worker_attr_t wa;
  memset(&wa, 0, sizeof(wa));
  wa.field_mask = UCP_WORKER_ATTR_FIELD_THREAD_MODE;
  if (ucp_worker_query(st->worker, &wa) == UCS_OK && wa.thread_mode != UCS_THREAD_MODE_MULTI) {
    PAP_WARN("ucx: this UCX build gives no thread-safe worker (thread mode %d)",
             (int)wa.thread_mode);
    return papcclSystemError;
  }
  s = ucp_worker_get_efd(st->worker, &st->efd);
  if (s != UCS_OK) return papUcxFail("ucp_worker_get_efd", s);
  return papcclSuccess;
}

static papcclResult_t ucxInit(const struct papTransportCtx* ctx, void** stateOut) {
  struct ucxState* st = NULL;
  PAP_CHECK(papCalloc(&st, 1));
  papTransportBaseInit(&st->base, ctx);
  st->efd = st->bell.fd = -1;
  pthread_mutex_init(&st->reqLock, NULL);
  pthread_mutex_init(&st->wlock, NULL);
  pthread_mutex_init(&st->callLock, NULL);
  st->outTail = &st->outHead;
  papcclResult_t res = openWorker(st);
  if (res != papcclSuccess) goto fail;
  if (papDoorbellInit(&st->bell) != 0) {
    PAP_WARN("ucx: eventfd failed: %s", strerror(errno));
    res = papcclSystemError;
    goto fail;
  }
  if ((res = papUcxWakeHandlers(st)) != papcclSuccess ||
      (res = papUcxHomeHandlers(st)) != papcclSuccess)
    goto fail;
  if (papCalloc(&st->conns, (size_t)st->base.ctx.nranks) != papcclSuccess ||
      papCalloc(&st->serveBuf, PAP_HOME_MAX_BYTES) != papcclSuccess ||
      papCalloc(&st->inBuf, PAP_HOME_MAX_BYTES / sizeof(uint64_t)) != papcclSuccess) {
    res = papcclSystemError;
    goto fail;
  }
  st->base.heldBytes = 2 * (size_t)PAP_HOME_MAX_BYTES; /* serveBuf and inBuf */
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
  if (s != UCS_OK) return papUcxFail("ucp_worker_get_address", s);
  size_t rkeyLen = 0; /* no remote memory: the board is served with messages */
  papcclResult_t res = papcclSuccess;
  struct ucxHandleHdr h = {UCX_HANDLE_MAGIC, 0, (uint32_t)addrLen, (uint32_t)rkeyLen};
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
  }
  ucp_worker_release_address(st->worker, addr);
  return res;
}

static void epError(void* arg, ucp_ep_h ep, ucs_status_t status) {
  (void)ep;
  struct papConn* c = (struct papConn*)arg;
  atomic_store_explicit(&c->dead, 1, memory_order_release);
  papDoorbellBump(&c->st->bell); /* a sleeper sees it at its next look */
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
    return papUcxFail("ucp_ep_create", s);
  }
  st->conns[peer] = c;
  *connOut = c;
  return papcclSuccess;
}

/* Every endpoint is wired up before the comm is used: a flush of each completes once its
 * lanes are connected (the peer answered its wire-up request). A wire-up left for later
 * may still be pending when a rank that never talked to that peer destroys its worker, and
 * UCX 1.13 aborts the process then (an assertion in ucp_worker_destroy when it purges a
 * pending wire-up reply: seen under ThreadSanitizer in Ucx.RankZeroRunsAheadOfTheBoard,
 * where ranks 1 and 2 exchange nothing but their departure; fixed in later UCX). A peer that
 * fails ends its flush with an error, which its endpoint's handler records. */
static papcclResult_t ucxReady(void* state) {
  struct ucxState* st = (struct ucxState*)state;
  ucs_status_ptr_t* reqs = (ucs_status_ptr_t*)calloc((size_t)st->base.ctx.nranks, sizeof(*reqs));
  if (reqs == NULL) return papcclSystemError;
  pthread_mutex_lock(&st->wlock);
  for (int p = 0; p < st->base.ctx.nranks; p++) {
    struct papConn* c = st->conns[p];
    if (p == st->base.ctx.rank || c == NULL || c->ep == NULL) continue;
    ucp_request_param_t prm;
    memset(&prm, 0, sizeof(prm));
    reqs[p] = ucp_ep_flush_nbx(c->ep, &prm);
  }
  pthread_mutex_unlock(&st->wlock);
  struct papWait w;
  papWaitInit(&w, "ucx: wiring up the endpoints", st->base.ctx.abortFlag, 1,
              st->base.ctx.spinNs > 0 ? (uint64_t)st->base.ctx.spinNs : 0, 0);
  papcclResult_t res = papcclSuccess;
  for (;;) {
    int left = 0;
    pthread_mutex_lock(&st->wlock);
    for (int p = 0; p < st->base.ctx.nranks; p++) {
      if (!UCS_PTR_IS_PTR(reqs[p])) continue;
      if (ucp_request_check_status(reqs[p]) == UCS_INPROGRESS) {
        left = 1;
        continue;
      }
      ucp_request_free(reqs[p]);
      reqs[p] = NULL;
    }
    pthread_mutex_unlock(&st->wlock);
    if (!left) break;
    if ((res = papWaitCheck(&w, papNowNs())) != papcclSuccess) break;
    if (papUcxProgressOnce(st) == 0) papWaitSleep(&w);
  }
  pthread_mutex_lock(&st->wlock);
  for (int p = 0; p < st->base.ctx.nranks; p++) /* left at a timeout or an abort */
    if (UCS_PTR_IS_PTR(reqs[p])) {
      ucp_request_cancel(st->worker, reqs[p]);
      ucp_request_free(reqs[p]);
    }
  pthread_mutex_unlock(&st->wlock);
  free(reqs);
  return res;
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
    for (int p = 0; p < st->base.ctx.nranks; p++)
      if (st->conns[p]) ucxClose(st->conns[p]);
    free(st->conns);
    st->conns = NULL; /* handlers that run in the progress below find no connection */
  }
  uint64_t deadline = papNowNs() + 2000000000ull;
  while (st->worker && reqsInProgress(st) && papNowNs() < deadline)
    ucp_worker_progress(st->worker);
  while (st->reqs) {
    struct papReq* r = st->reqs;
    if (r->ucpReq) ucp_request_free(r->ucpReq);
    r->ucpReq = NULL;
    papUcxReqRelease(r);
  }
  if (st->worker) dropUnexpected(st); /* and what arrived while the endpoints closed */
  papDoorbellFree(&st->bell);
  if (st->worker) ucp_worker_destroy(st->worker);
  while (st->outHead) { /* never sent */
    struct ucxOut* o = st->outHead;
    st->outHead = o->next;
    free(o);
  }
  free(st->serveBuf);
  free(st->inBuf);
  papUcxPoolFree(st);
  if (st->ctx) ucp_cleanup(st->ctx);
  pthread_mutex_destroy(&st->reqLock);
  pthread_mutex_destroy(&st->wlock);
  pthread_mutex_destroy(&st->callLock);
  free(st);
}

const struct papTransportOps papTransportUcx = {
    .name = "ucx",
    .caps =
        {
            .idleProgress = 1,
            .remoteBoard = 1,
            .handleBytes = PAP_TRANSPORT_UCX_HANDLE_BYTES,
            .anySource = 1,
        },
    .msg = &papUcxMsgOps,
    .wake = &papUcxWakeOps,
    .live = &papUcxLiveOps,
    .home = &papUcxHomeOps,
    .canConnect = ucxCanConnect,
    .init = ucxInit,
    .listen = ucxListen,
    .connect = ucxConnect,
    .ready = ucxReady,
    .close = ucxClose,
    .finalize = ucxFinalize,
};
