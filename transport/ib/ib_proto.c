/* SPDX-License-Identifier: Apache-2.0 */
/* The ib backend's message protocol: credited eager chunks, RTS/CTS and RDMA writes,
 * matching in posting order, completion handling, sleeping, and the board's atomics.
 *
 * Messages on one conn go in posting order. The receiver posts nbufs credited buffers per
 * peer plus IB_NCTRL spare ones. Every message is a send with immediate (kind + returned
 * credits, ib_rules.h). Up to PAPCCL_IB_RDMA_MIN bytes go eagerly: chunks of the bounce
 * buffer size, the first with a (tag, bytes) header; an eager send is complete once its
 * bytes sit in send slots. Larger messages send an RTS; the receiver answers CTS with its
 * registered buffer (MR cache) and the sender RDMA-writes there, the last write with
 * immediate; when the receive has a sink, the CTS asks for eager chunks instead, which
 * reach the sink in order. Data kinds (chunks, RTS, the write with immediate) take a
 * credit; control kinds (CTS, credit return, notify) never wait for a match, so they are
 * consumed when polled and at most one of each is in flight per conn, which the spare
 * buffers cover (rnr_retry is infinite as a safety net). Credits come back piggybacked on
 * any message, or alone in batches of half the window, at once when the sender must be out.
 *
 * Destroy is local: a peer that finished may be gone when this rank's last credit return or
 * notify reaches it. A failed conn therefore still hands what already arrived to its
 * receives, and a control message failing alone is no error. */
#include <arpa/inet.h>
#include <errno.h>
#include <poll.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "futex.h"
#include "ib/ib.h"
#include "log.h"
#include "param.h"
#include "socket.h"

static void reqDropMr(struct papReq* r) {
  if (r->mr && r->pendingWr == 0) papIbMrCachePut(&r->st->mrCache, r->mr);
  if (r->pendingWr == 0) r->mr = NULL;
}

static void reqFinish(struct papReq* r, papcclResult_t err) {
  if (r->done) return;
  r->done = 1;
  r->err = err;
  reqDropMr(r);
}

void papIbReqRecycle(struct papReq* r) {
  struct ibState* st = r->st;
  reqDropMr(r);
  r->next = st->freeReqs;
  st->freeReqs = r;
}

static void matchRecv(struct papConn* c);

static int failRecvs(struct papConn* c) {
  int n = 0;
  while (c->recvHeadQ) {
    struct papReq* r = c->recvHeadQ;
    Q_POP(c->recvHeadQ, c->recvTailQ, next);
    reqFinish(r, c->err);
    n++;
  }
  return n;
}

/* The conn goes down: its QP stops and its sends fail (writes in flight end through their
 * flushed completions), but receives that what already arrived satisfies still complete: a
 * peer that finished and left may have sent all it had to. Returns how many requests failed;
 * the cause is logged by the caller. */
int papIbConnFail(struct papConn* c, papcclResult_t err) {
  if (atomic_exchange_explicit(&c->dead, 1, memory_order_acq_rel)) return 0;
  c->err = err;
  struct ibv_qp_attr a = {.qp_state = IBV_QPS_ERR};
  if (c->qp && ibv_modify_qp(c->qp, &a, IBV_QP_STATE) == 0)
    c->state = papIbNextState(c->state, PAP_IB_EV_FAIL);
  int n = 0;
  while (c->sendHeadQ) {
    struct papReq* r = c->sendHeadQ;
    Q_POP(c->sendHeadQ, c->sendTailQ, next);
    reqFinish(r, err);
    n++;
  }
  for (struct papReq* r = c->writeHeadQ; r; r = r->wnext) {
    n += !r->done;
    reqFinish(r, err);
  }
  matchRecv(c);
  n += failRecvs(c);
  papDoorbellRing(&c->st->bell);
  return n;
}

static papcclResult_t postSend(struct papConn* c, struct ibv_send_wr* wr) {
  struct ibv_send_wr* bad = NULL;
  int ret = ibv_post_send(c->qp, wr, &bad);
  if (ret != 0) {
    PAP_WARN("ib: ibv_post_send to peer %d (qp 0x%x) failed: %s", c->peer, c->qp->qp_num,
             strerror(ret));
    papIbConnFail(c, papcclSystemError);
    return papcclSystemError;
  }
  return papcclSuccess;
}

void papIbPostRecv(struct papConn* c, uint32_t slot) {
  struct ibState* st = c->st;
  struct ibv_sge sge = {(uintptr_t)(c->buf + slot * st->bufSize), (uint32_t)st->bufSize,
                        c->mr->lkey};
  struct ibv_recv_wr wr = {.wr_id = wrId(WR_RECV, c->peer, slot), .sg_list = &sge, .num_sge = 1};
  struct ibv_recv_wr* bad = NULL;
  int ret = ibv_post_recv(c->qp, &wr, &bad);
  if (ret != 0) {
    PAP_WARN("ib: ibv_post_recv for peer %d failed: %s", c->peer, strerror(ret));
    papIbConnFail(c, papcclSystemError);
  }
}

/* Credits to piggyback on an outgoing message. */
static unsigned takeCredits(struct papConn* c) {
  unsigned n = c->pendingCredits > PAP_IB_MAX_CREDITS ? PAP_IB_MAX_CREDITS : c->pendingCredits;
  c->pendingCredits -= n;
  c->creditsReturned += n;
  return n;
}

/* A send with immediate. Data kinds take a credit and a send slot (callers check both);
 * the only control kind with a payload is the CTS, in its own slot. */
static papcclResult_t sendMsg(struct papConn* c, int kind, const void* hdr, uint32_t hdrBytes,
                              const void* data, uint32_t bytes) {
  struct ibState* st = c->st;
  int isData = papIbMsgIsData(kind);
  uint32_t slotIdx = (uint32_t)(c->sendHead % (uint64_t)st->nbufs);
  char* slot = c->buf + ((size_t)st->nrecv + (isData ? slotIdx : (size_t)st->nbufs)) * st->bufSize;
  if (hdrBytes) memcpy(slot, hdr, hdrBytes);
  if (bytes) memcpy(slot + hdrBytes, data, bytes);
  struct ibv_sge sge = {(uintptr_t)slot, hdrBytes + bytes, c->mr->lkey};
  struct ibv_send_wr wr = {.sg_list = &sge,
                           .num_sge = hdrBytes + bytes ? 1 : 0,
                           .opcode = IBV_WR_SEND_WITH_IMM,
                           .send_flags = IBV_SEND_SIGNALED};
  wr.wr_id = isData ? wrId(WR_DATA, c->peer, slotIdx) : wrId(WR_CTRL, c->peer, (uint32_t)kind);
  wr.imm_data = htonl(papIbImmPack(kind, takeCredits(c)));
  PAP_CHECK(postSend(c, &wr));
  if (isData) {
    c->credits--;
    c->sendHead++;
  }
  return papcclSuccess;
}

static int canSendData(const struct papConn* c) {
  return c->credits > 0 && c->sendHead - c->sendTail < (uint64_t)c->st->nbufs;
}

void papIbSendNotify(struct papConn* c) {
  if (c->notifyBusy) {
    c->notifyPending = 1; /* sent when the one in flight completes */
    return;
  }
  if (sendMsg(c, PAP_IB_MSG_NOTIFY, NULL, 0, NULL, 0) == papcclSuccess) {
    c->notifyBusy = 1;
    c->notifyPending = 0;
  }
}

void papIbSendDepart(struct papConn* c) {
  if (c->departSent || c->dead) return;
  if (sendMsg(c, PAP_IB_MSG_DEPART, NULL, 0, NULL, 0) == papcclSuccess) c->departSent = 1;
}

/* The head of the send queue posts what it can now: eager chunks while credits and slots
 * last, the RTS, or RDMA write pieces once the CTS is in. */
static void pumpSend(struct papConn* c) {
  struct ibState* st = c->st;
  struct papReq* r;
  while (!c->dead && (r = c->sendHeadQ) != NULL) {
    if (r->state == S_WAIT_CTS) return;
    if (r->state == S_RTS) {
      if (!canSendData(c)) return;
      struct papIbEagerHdr h = {r->tag, r->bytes};
      if (sendMsg(c, PAP_IB_MSG_RTS, &h, IB_HDR, NULL, 0) != papcclSuccess) return;
      r->state = S_WAIT_CTS;
      return;
    }
    if (r->state == S_EAGER) {
      while (!r->firstSent || r->offset < r->bytes) {
        if (!canSendData(c)) return;
        uint32_t room = (uint32_t)st->bufSize - (r->firstSent ? 0 : IB_HDR);
        size_t left = r->bytes - r->offset;
        uint32_t n = left < room ? (uint32_t)left : room;
        struct papIbEagerHdr h = {r->tag, r->bytes};
        int kind = r->firstSent ? PAP_IB_MSG_EAGER_MORE : PAP_IB_MSG_EAGER_FIRST;
        if (sendMsg(c, kind, &h, r->firstSent ? 0 : IB_HDR, r->src + r->offset, n) != papcclSuccess)
          return;
        r->firstSent = 1;
        r->offset += n;
      }
      Q_POP(c->sendHeadQ, c->sendTailQ, next);
      reqFinish(r, papcclSuccess); /* every byte sits in a send slot: the buffer is free */
      continue;
    }
    /* S_WRITE */
    if (r->mr == NULL) {
      papcclResult_t res = papIbMrCacheGet(&st->mrCache, r->src, r->bytes, 0, &r->mr);
      if (res != papcclSuccess) {
        papIbConnFail(c, res); /* the receiver waits for these bytes: the stream is lost */
        return;
      }
    }
    while (r->offset < r->bytes) {
      size_t left = r->bytes - r->offset;
      size_t n = left < st->maxMsg ? left : st->maxMsg;
      int last = n == left;
      if (c->writes >= IB_MAX_WRITES || (last && c->credits <= 0)) return;
      struct ibv_sge sge = {(uintptr_t)(r->src + r->offset), (uint32_t)n,
                            ((struct ibv_mr*)r->mr->mr)->lkey};
      struct ibv_send_wr wr = {.wr_id = wrId(WR_WRITE, c->peer, 0),
                               .sg_list = &sge,
                               .num_sge = 1,
                               .send_flags = IBV_SEND_SIGNALED};
      wr.opcode = last ? IBV_WR_RDMA_WRITE_WITH_IMM : IBV_WR_RDMA_WRITE;
      wr.wr.rdma.remote_addr = r->raddr + r->offset;
      wr.wr.rdma.rkey = r->rkey;
      if (last) wr.imm_data = htonl(papIbImmPack(PAP_IB_MSG_WRITE_DONE, takeCredits(c)));
      if (postSend(c, &wr) != papcclSuccess) return;
      c->writes++;
      if (last) c->credits--;
      if (r->pendingWr++ == 0) Q_APPEND(c->writeHeadQ, c->writeTailQ, r, wnext);
      r->offset += n;
    }
    r->state = S_WAIT_WRITES; /* done when the last write completes */
    Q_POP(c->sendHeadQ, c->sendTailQ, next);
  }
}

static int deliver(struct papReq* r, const char* src, size_t n) {
  if (n > r->bytes - r->offset) return -1;
  if (n == 0) return 0;
  if (r->hasSink)
    r->sink.fn(r->sink.arg, r->offset, src, n);
  else
    memcpy(r->dst + r->offset, src, n);
  r->offset += n;
  return 0;
}

/* Hands arrived data messages to the posted receives, in order. */
static void matchRecv(struct papConn* c) {
  struct ibState* st = c->st;
  while (c->arrCount > 0 && c->recvHeadQ != NULL) { /* a dead conn drains what arrived */
    struct papReq* r = c->recvHeadQ;
    struct ibArrival a = c->arr[c->arrHead];
    const char* data = c->buf + (size_t)a.slot * st->bufSize;
    int kind = papIbImmKind(a.imm);
    const char* why = NULL;
    struct papIbEagerHdr h = {0, 0};
    if (kind == PAP_IB_MSG_EAGER_FIRST || kind == PAP_IB_MSG_RTS) {
      if (r->state != R_START || a.len < IB_HDR) {
        why = "a message starts inside another";
      } else {
        memcpy(&h, data, IB_HDR);
        if (h.tag != r->tag || h.bytes != r->bytes) {
          if (!c->dead)
            PAP_WARN(
                "ib: message from peer %d has tag 0x%llx and %llu bytes where tag 0x%llx and %zu "
                "bytes were expected",
                c->peer, (unsigned long long)h.tag, (unsigned long long)h.bytes,
                (unsigned long long)r->tag, r->bytes);
          papIbConnFail(c, papcclInternalError);
          return;
        }
      }
    }
    if (why == NULL && kind == PAP_IB_MSG_EAGER_FIRST) {
      r->state = R_EAGER;
      if (deliver(r, data + IB_HDR, a.len - IB_HDR)) why = "more bytes than announced";
    } else if (why == NULL && kind == PAP_IB_MSG_EAGER_MORE) {
      if (r->state != R_EAGER || deliver(r, data, a.len)) why = "an unexpected chunk";
    } else if (why == NULL && kind == PAP_IB_MSG_WRITE_DONE) {
      if (r->state != R_WRITE) why = "an unexpected RDMA write";
      r->offset = r->bytes;
    } else if (why == NULL && kind == PAP_IB_MSG_RTS) {
      if (c->dead || c->ctsBusy) return; /* a CTS in flight: its completion retries */
      struct papIbCts cts = {0, 0, 0};
      int access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE;
      if (!r->hasSink &&
          papIbMrCacheGet(&st->mrCache, r->dst, r->bytes, access, &r->mr) == papcclSuccess) {
        cts.addr = (uintptr_t)r->dst;
        cts.rkey = ((struct ibv_mr*)r->mr->mr)->rkey;
      }
      if (sendMsg(c, PAP_IB_MSG_CTS, &cts, sizeof(cts), NULL, 0) != papcclSuccess) return;
      c->ctsBusy = 1;
      r->state = cts.addr ? R_WRITE : R_EAGER;
    } else if (why == NULL) {
      why = "an unknown message kind";
    }
    if (why) {
      if (!c->dead)
        PAP_WARN("ib: protocol error from peer %d: %s (kind %d, %u bytes)", c->peer, why, kind,
                 a.len);
      papIbConnFail(c, papcclInternalError);
      return;
    }
    c->arrHead = (c->arrHead + 1) % (uint32_t)st->nrecv;
    c->arrCount--;
    if (kind != PAP_IB_MSG_RTS && r->offset == r->bytes) {
      Q_POP(c->recvHeadQ, c->recvTailQ, next);
      reqFinish(r, papcclSuccess);
    }
    if (!c->dead) {
      c->pendingCredits++;
      papIbPostRecv(c, a.slot); /* may fail the conn, which drains the rest */
    }
  }
}

void papIbConnPump(struct papConn* c) {
  if (c->dead) { /* receives posted after it died: what arrived, or nothing */
    matchRecv(c);
    if (failRecvs(c))
      PAP_WARN("ib: peer %d is gone before sending what a receive expects", c->peer);
    return;
  }
  matchRecv(c);
  pumpSend(c);
  if (!c->dead && !c->creditBusy &&
      papIbShouldReturnCredits(c->pendingCredits, (unsigned)(c->dataArrived - c->creditsReturned),
                               (unsigned)c->st->nbufs) &&
      sendMsg(c, PAP_IB_MSG_CREDIT, NULL, 0, NULL, 0) == papcclSuccess)
    c->creditBusy = 1;
  if (!c->dead && c->notifyPending && !c->notifyBusy) papIbSendNotify(c);
}

static void protocolError(struct papConn* c, const char* why) {
  PAP_WARN("ib: protocol error from peer %d: %s", c->peer, why);
  papIbConnFail(c, papcclInternalError);
}

static void handleRecv(struct papConn* c, const struct ibv_wc* wc, uint32_t slot) {
  struct ibState* st = c->st;
  if (!(wc->wc_flags & IBV_WC_WITH_IMM)) {
    protocolError(c, "a message without immediate");
    return;
  }
  uint32_t imm = ntohl(wc->imm_data);
  int kind = papIbImmKind(imm);
  c->credits += (int)papIbImmCredits(imm);
  if (c->credits > st->nbufs) {
    protocolError(c, "more credits returned than lent");
    return;
  }
  if (papIbMsgIsData(kind)) {
    if (c->arrCount >= (uint32_t)st->nbufs) {
      protocolError(c, "credits overrun");
      return;
    }
    struct ibArrival a = {slot, imm, wc->byte_len};
    c->arr[(c->arrHead + c->arrCount) % (uint32_t)st->nrecv] = a;
    c->arrCount++;
    c->dataArrived++;
    return; /* the buffer is held until a receive takes it */
  }
  if (kind == PAP_IB_MSG_CTS) {
    struct papReq* r = c->sendHeadQ;
    struct papIbCts cts;
    if (r == NULL || r->state != S_WAIT_CTS || wc->byte_len < sizeof(cts)) {
      protocolError(c, "an unexpected CTS");
      return;
    }
    memcpy(&cts, c->buf + (size_t)slot * st->bufSize, sizeof(cts));
    if (cts.addr) {
      r->raddr = cts.addr;
      r->rkey = cts.rkey;
      r->state = S_WRITE;
    } else {
      r->state = S_EAGER; /* chunks only: the RTS was the header */
      r->firstSent = 1;
    }
  } else if (kind == PAP_IB_MSG_DEPART) {
    atomic_store_explicit(&c->departed, 1, memory_order_release);
  } else if (kind != PAP_IB_MSG_CREDIT && kind != PAP_IB_MSG_NOTIFY) {
    protocolError(c, "an unknown message kind");
    return;
  }
  papIbPostRecv(c, slot); /* control messages are consumed at once */
}

static void handleWc(struct ibState* st, const struct ibv_wc* wc) {
  int kind = (int)(wc->wr_id >> 56);
  int peer = (int)((wc->wr_id >> 32) & 0xffffff);
  uint32_t aux = (uint32_t)wc->wr_id;
  struct papConn* c = peer < st->base.ctx.nranks ? st->conns[peer] : NULL;
  if (c == NULL) return;
  if (kind == WR_DATA) {
    c->sendTail++;
  } else if (kind == WR_CTRL) {
    if (aux == PAP_IB_MSG_CTS) c->ctsBusy = 0;
    if (aux == PAP_IB_MSG_CREDIT) c->creditBusy = 0;
    if (aux == PAP_IB_MSG_NOTIFY) c->notifyBusy = 0;
  } else if (kind == WR_WRITE) {
    c->writes--;
    struct papReq* r = c->writeHeadQ;
    if (r && --r->pendingWr == 0) {
      Q_POP(c->writeHeadQ, c->writeTailQ, wnext); /* still S_WRITE: its next piece re-queues it */
      if (r->state == S_WAIT_WRITES || r->done) {
        reqFinish(r, papcclSuccess);
        reqDropMr(r);
        if (r->released) papIbReqRecycle(r);
      }
    }
  } else if (kind == WR_ATOMIC) {
    if (aux == st->atomicSeq) st->atomicDone = wc->status == IBV_WC_SUCCESS ? 1 : -1;
  }
  if (wc->status != IBV_WC_SUCCESS) {
    /* Destroy is local: a peer that finished may be gone before our last credit return or
     * notify reaches it. That is no error unless data or posted work is lost with it. */
    int wasDead = c->dead;
    int remote = wc->status == IBV_WC_RETRY_EXC_ERR || wc->status == IBV_WC_RNR_RETRY_EXC_ERR;
    int failed = papIbConnFail(c, remote ? papcclRemoteError : papcclSystemError);
    if (!wasDead && (kind != WR_CTRL || failed))
      PAP_WARN("ib: %s with peer %d failed: %s (vendor error 0x%x, qp 0x%x)",
               kind == WR_RECV ? "a receive" : "a send", peer, ibv_wc_status_str(wc->status),
               wc->vendor_err, wc->qp_num);
    else if (!wasDead)
      PAP_INFO(PAP_LOG_IB, "ib: peer %d is gone (a control message failed: %s)", peer,
               ibv_wc_status_str(wc->status));
    return;
  }
  if (kind == WR_RECV) handleRecv(c, wc, aux);
  papIbConnPump(c);
}

/* Handles every completion there is; returns how many. */
int papIbPollCq(struct ibState* st) {
  struct ibv_wc wc[32];
  int total = 0, n;
  while ((n = ibv_poll_cq(st->cq, 32, wc)) > 0) {
    for (int i = 0; i < n; i++)
      handleWc(st, &wc[i]);
    total += n;
  }
  if (n < 0) PAP_WARN("ib: ibv_poll_cq failed");
  if (total) papDoorbellRing(&st->bell);
  return total;
}

static void drainCqEvents(struct ibState* st) {
  struct ibv_cq* cq;
  void* cqCtx;
  while (ibv_get_cq_event(st->chan, &cq, &cqCtx) == 0)
    st->unackedEvents++;
  if (st->unackedEvents >= 64) {
    ibv_ack_cq_events(st->cq, st->unackedEvents);
    st->unackedEvents = 0;
  }
}

/* Fatal QP events mark their peer dead; a fatal device event, every peer. */
void papIbDrainAsync(struct ibState* st) {
  struct ibv_async_event ev;
  while (ibv_get_async_event(st->ctx, &ev) == 0) {
    enum ibv_event_type t = ev.event_type;
    if (t == IBV_EVENT_QP_FATAL || t == IBV_EVENT_QP_REQ_ERR || t == IBV_EVENT_QP_ACCESS_ERR) {
      struct papConn* c = (struct papConn*)ev.element.qp->qp_context;
      if (c && !c->dead) {
        PAP_WARN("ib: queue pair 0x%x of peer %d: %s", ev.element.qp->qp_num, c->peer,
                 ibv_event_type_str(t));
        papIbConnFail(c, papcclRemoteError);
      }
    } else if (t == IBV_EVENT_DEVICE_FATAL) {
      PAP_WARN("ib: device %s: %s", ibv_get_device_name(st->ctx->device), ibv_event_type_str(t));
      for (int p = 0; p < st->base.ctx.nranks; p++)
        if (st->conns[p]) papIbConnFail(st->conns[p], papcclSystemError);
    } else {
      PAP_INFO(PAP_LOG_IB, "ib: async event: %s", ibv_event_type_str(t));
    }
    ibv_ack_async_event(&ev);
  }
}

/* Sleeps (lock released) until a completion, wake() or notify, an async event or the
 * timeout; returns with the lock held and what arrived handled. */
void papIbSleepLocked(struct ibState* st, uint32_t token, int64_t timeoutNs) {
  if (ibv_req_notify_cq(st->cq, 0) != 0 || papIbPollCq(st) > 0) return; /* raced the arm: look */
  pthread_mutex_unlock(&st->lock);
  struct pollfd fds[3] = {
      {st->chan->fd, POLLIN, 0}, {st->bell.fd, POLLIN, 0}, {st->ctx->async_fd, POLLIN, 0}};
  int64_t ms = (timeoutNs + 999999) / 1000000;
  papDoorbellSleepEnter(&st->bell);
  if (papDoorbellUnchanged(&st->bell, token)) poll(fds, 3, ms > 1000000 ? 1000000 : (int)ms);
  papDoorbellSleepLeave(&st->bell);
  pthread_mutex_lock(&st->lock);
  drainCqEvents(st);
  papIbDrainAsync(st);
  papIbPollCq(st);
}

/* One HCA atomic on the board word at remote; waits for its reply (spin, then sleep). */
static papcclResult_t atomicOp(struct ibState* st, struct papConn* c, enum ibv_wr_opcode op,
                               uint64_t remote, uint64_t compareAdd, uint64_t swap,
                               uint64_t* oldOut) {
  struct ibv_sge sge = {(uintptr_t)st->scratch, sizeof(uint64_t), st->scratchMr->lkey};
  struct ibv_send_wr wr = {.wr_id = wrId(WR_ATOMIC, c->peer, ++st->atomicSeq),
                           .sg_list = &sge,
                           .num_sge = 1,
                           .opcode = op,
                           .send_flags = IBV_SEND_SIGNALED};
  wr.wr.atomic.remote_addr = remote;
  wr.wr.atomic.compare_add = compareAdd;
  wr.wr.atomic.swap = swap;
  wr.wr.atomic.rkey = st->boardRkey;
  st->atomicDone = 0;
  PAP_CHECK(postSend(c, &wr));
  struct papWait w;
  papWaitInit(&w, "ib: an arrival board atomic", st->base.ctx.abortFlag, 1,
              st->base.ctx.spinNs > 0 ? (uint64_t)st->base.ctx.spinNs : 0, 0);
  w.abortRes = papcclRemoteError;
  while (st->atomicDone == 0) {
    uint32_t tok = papDoorbellToken(&st->bell);
    if (papIbPollCq(st) > 0) continue;
    uint64_t now = papNowNs();
    PAP_CHECK(papWaitCheck(&w, now));
    if (papWaitInBudget(&w, now)) {
      pthread_mutex_unlock(&st->lock); /* yield without the lock */
      sched_yield();
      pthread_mutex_lock(&st->lock);
    } else {
      papIbSleepLocked(st, tok, papWaitSlice(&w, now, 10000000));
    }
  }
  if (st->atomicDone < 0) return papcclRemoteError; /* the completion was logged */
  *oldOut = *(volatile uint64_t*)st->scratch;
  return papcclSuccess;
}

papcclResult_t papIbBoardAtomicLocked(struct ibState* st, size_t idx, int op, uint64_t val,
                                      uint64_t cmp, uint64_t* oldOut) {
  struct papConn* c = st->conns[0];
  if (c && c->dead) {
    PAP_WARN("ib: rank 0, which holds the arrival board, is unreachable");
    return papcclRemoteError;
  }
  if (c == NULL || c->state != PAP_IB_QP_RTS || st->boardAddr == 0 ||
      idx >= st->base.ctx.boardWords) {
    PAP_WARN("ib: arrival board word %zu is out of reach", idx);
    return papcclInternalError;
  }
  uint64_t remote = st->boardAddr + idx * sizeof(uint64_t), old = 0, cur = 0;
  switch (op) {
  case PAP_BOARD_LOAD:
    PAP_CHECK(atomicOp(st, c, IBV_WR_ATOMIC_FETCH_AND_ADD, remote, 0, 0, &old));
    break;
  case PAP_BOARD_FADD:
    PAP_CHECK(atomicOp(st, c, IBV_WR_ATOMIC_FETCH_AND_ADD, remote, val, 0, &old));
    break;
  case PAP_BOARD_CAS:
    PAP_CHECK(atomicOp(st, c, IBV_WR_ATOMIC_CMP_AND_SWP, remote, cmp, val, &old));
    break;
  case PAP_BOARD_STORE: /* verbs have no swap: compare-and-swap until it takes */
  case PAP_BOARD_STORE_RELEASE:
    PAP_CHECK(atomicOp(st, c, IBV_WR_ATOMIC_FETCH_AND_ADD, remote, 0, 0, &cur));
    for (;;) {
      PAP_CHECK(atomicOp(st, c, IBV_WR_ATOMIC_CMP_AND_SWP, remote, cur, val, &old));
      if (old == cur) break;
      cur = old;
    }
    break;
  default:
    PAP_WARN("ib: unknown arrival board operation %d", op);
    return papcclInternalError;
  }
  if (oldOut) *oldOut = old;
  return papcclSuccess;
}
