/* SPDX-License-Identifier: Apache-2.0 */
/* Native InfiniBand/RoCE transport over libibverbs: one RC queue pair per peer, eager
 * messages through credited bounce buffers, large ones RDMA-written into the receiver's
 * buffer (ib_proto.c), the PAP arrival board in rank 0's memory reached with HCA atomics,
 * and sleeping on the completion channel. This file: queue pairs, the ops table; the device
 * and its parameters are in ib_device.c.
 *
 * Connection setup. The ops table gives one allgathered handle per rank and a non-blocking
 * connect per peer, so every QP exists before the exchange: init creates one QP per peer
 * (plus, on rank 0, a loopback QP for the board) and moves each to INIT with its receives
 * posted. The handle (PAP_IB_HANDLE_BYTES, codec in ib_handle.c) carries the port's LID,
 * GID and MTU, the eager buffer settings, rank 0's board address and rkey, and the 24-bit
 * QP number this rank keeps for each peer; connect(peer) reads entry [rank] of the peer's
 * handle and moves the QP to RTR then RTS. That bounds a comm to PAP_IB_MAX_RANKS ranks
 * (init fails beyond, clearly). Nothing is sent before ready() (after a bootstrap barrier),
 * so every QP is at RTS first. Memory: (2 nbufs + IB_NCTRL) bounce buffers per peer.
 *
 * The board: every update is an HCA atomic (LOAD = fetch-add 0, STORE = compare-and-swap
 * loop), rank 0 included through its loopback QP, so CPU and HCA never mix on the words.
 * Replies are read in host order, as UCX's rc_verbs does with upstream verbs. The HCA
 * serves remote atomics alone: no idle progress is needed.
 *
 * Registrations of user buffers (RDMA writes) are cached (PAPCCL_IB_MR_CACHE) on the
 * assumption, as with NCCL's registered buffers, that a buffer stays mapped while cached;
 * PAPCCL_IB_MR_CACHE=0 registers per message for programs that free and remap buffers.
 *
 * Threads: a mutex guards the verbs objects and queues (the comm's progress lock holder and
 * a thread in wait() may both poll); wake() only touches the bell and an eventfd. Peer
 * liveness: a fatal QP event or an error completion marks the peer dead; while someone
 * waits, peerAlive (the awaited peer) and deadPeer (every peer) send a notify at most once a
 * second per peer, so a dead peer shows up as a retry-exceeded completion; depart tells each
 * peer that this rank leaves in good order, so its end is not taken for a death. Finalize
 * waits (bounded) for data still in flight. */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "alloc.h"
#include "check.h"
#include "futex.h"
#include "ib/ib.h"
#include "log.h"
#include "param.h"
#include "socket.h"

static papcclResult_t mrReg(void* arg, void* addr, size_t bytes, int access, void** mrOut) {
  struct ibState* st = (struct ibState*)arg;
  struct ibv_mr* mr = ibv_reg_mr(st->pd, addr, bytes, access);
  if (mr == NULL) {
    PAP_WARN("ib: ibv_reg_mr of %zu bytes at %p (access 0x%x) failed: %s", bytes, addr, access,
             strerror(errno));
    return papcclSystemError;
  }
  *mrOut = mr;
  return papcclSuccess;
}

static void mrDereg(void* arg, void* mr) {
  (void)arg;
  int ret = ibv_dereg_mr((struct ibv_mr*)mr);
  if (ret != 0) PAP_INFO(PAP_LOG_IB, "ib: ibv_dereg_mr failed: %s", strerror(ret));
}

/* Registers a zeroed, page-aligned buffer. */
static papcclResult_t allocReg(struct ibState* st, size_t bytes, int access, void** bufOut,
                               struct ibv_mr** mrOut) {
  void* p = NULL;
  size_t page = (size_t)sysconf(_SC_PAGESIZE);
  bytes = (bytes + page - 1) / page * page;
  if (posix_memalign(&p, page, bytes) != 0) {
    PAP_WARN("ib: out of memory allocating %zu registered bytes", bytes);
    return papcclSystemError;
  }
  memset(p, 0, bytes);
  void* mr = NULL;
  if (mrReg(st, p, bytes, access, &mr) != papcclSuccess) {
    free(p);
    return papcclSystemError;
  }
  *bufOut = p;
  *mrOut = (struct ibv_mr*)mr;
  return papcclSuccess;
}

static int qpModify(struct papConn* c, int event, struct ibv_qp_attr* a, int mask) {
  int next = papIbNextState(c->state, event);
  if (next < 0) {
    PAP_WARN("ib: queue pair of peer %d cannot leave state %s by event %d", c->peer,
             papIbStateName(c->state), event);
    return papcclInternalError;
  }
  int ret = ibv_modify_qp(c->qp, a, mask);
  if (ret != 0) {
    PAP_WARN("ib: moving queue pair 0x%x of peer %d to %s failed: %s", c->qp->qp_num, c->peer,
             papIbStateName(next), strerror(ret));
    return papcclSystemError;
  }
  c->state = next;
  return papcclSuccess;
}

static uint32_t psnOf(uint32_t qpn) {
  return (qpn * 2654435761u) & 0xffffff;
}

static void connDestroy(struct papConn* c) {
  if (c->qp) ibv_destroy_qp(c->qp);
  if (c->mr) ibv_dereg_mr(c->mr);
  free(c->buf);
  free(c->arr);
  free(c);
}

/* A QP for peer in INIT with every receive posted, so the peer may send once both are up. */
static papcclResult_t connCreate(struct ibState* st, int peer, struct papConn** connOut) {
  struct papConn* c = NULL;
  papcclResult_t res = papcclSuccess;
  PAP_CHECK(papCalloc(&c, 1));
  c->st = st;
  c->peer = peer;
  c->credits = st->nbufs;
  size_t bytes = ((size_t)st->nrecv + (size_t)st->nbufs) * st->bufSize + IB_CTS_SLOT_BYTES;
  PAP_CHECK_GOTO(allocReg(st, bytes, IBV_ACCESS_LOCAL_WRITE, (void**)&c->buf, &c->mr), res, fail);
  PAP_CHECK_GOTO(papCalloc(&c->arr, (size_t)st->nrecv), res, fail);
  struct ibv_qp_init_attr qa = {
      .qp_context = c,
      .send_cq = st->cq,
      .recv_cq = st->cq,
      .cap = {.max_send_wr = (uint32_t)(st->nbufs + IB_SQ_EXTRA),
              .max_recv_wr = (uint32_t)st->nrecv,
              .max_send_sge = 1,
              .max_recv_sge = 1},
      .qp_type = IBV_QPT_RC,
  };
  c->qp = ibv_create_qp(st->pd, &qa);
  if (c->qp == NULL) {
    PAP_WARN("ib: ibv_create_qp for peer %d failed: %s", peer, strerror(errno));
    res = papcclSystemError;
    goto fail;
  }
  struct ibv_qp_attr a = {.qp_state = IBV_QPS_INIT, .pkey_index = 0, .port_num = st->port};
  a.qp_access_flags = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
                      IBV_ACCESS_REMOTE_ATOMIC;
  PAP_CHECK_GOTO(qpModify(c, PAP_IB_EV_TO_INIT, &a,
                          IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS),
                 res, fail);
  for (int s = 0; s < st->nrecv && !c->dead; s++)
    papIbPostRecv(c, (uint32_t)s);
  if (c->dead) {
    res = papcclSystemError;
    goto fail;
  }
  *connOut = c;
  return papcclSuccess;
fail:
  connDestroy(c);
  return res;
}

/* INIT -> RTR -> RTS toward the peer's QP rqpn, described by h. */
static papcclResult_t connUp(struct ibState* st, struct papConn* c, const struct papIbHandle* h,
                             uint32_t rqpn) {
  struct ibv_qp_attr a;
  memset(&a, 0, sizeof(a));
  a.qp_state = IBV_QPS_RTR;
  a.path_mtu = (enum ibv_mtu)(h->mtu < st->mtu ? h->mtu : st->mtu);
  a.dest_qp_num = rqpn;
  a.rq_psn = psnOf(rqpn);
  a.max_dest_rd_atomic = 1;
  a.min_rnr_timer = 12; /* 0.64 ms */
  a.ah_attr.port_num = st->port;
  a.ah_attr.dlid = h->lid;
  if (st->linkLayer == IBV_LINK_LAYER_ETHERNET) {
    a.ah_attr.is_global = 1;
    memcpy(a.ah_attr.grh.dgid.raw, h->gid, 16);
    a.ah_attr.grh.sgid_index = (uint8_t)st->gidIndex;
    a.ah_attr.grh.hop_limit = 255;
  }
  PAP_CHECK(qpModify(c, PAP_IB_EV_TO_RTR, &a,
                     IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                         IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER));
  memset(&a, 0, sizeof(a));
  a.qp_state = IBV_QPS_RTS;
  a.timeout = (uint8_t)st->timeout;
  a.retry_cnt = 7;
  a.rnr_retry = 7; /* infinite: a receiver short of buffers only delays the sender */
  a.sq_psn = psnOf(c->qp->qp_num);
  a.max_rd_atomic = 1;
  PAP_CHECK(qpModify(c, PAP_IB_EV_TO_RTS, &a,
                     IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                         IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC));
  PAP_INFO(PAP_LOG_IB, "ib: rank %d connected to rank %d (qp 0x%x -> 0x%x)", st->base.ctx.rank,
           c->peer, c->qp->qp_num, rqpn);
  return papcclSuccess;
}

static int setNonBlocking(int fd) {
  int fl = fcntl(fd, F_GETFL);
  return fl < 0 ? -1 : fcntl(fd, F_SETFL, fl | O_NONBLOCK);
}

static void ibFinalize(void* state);

static papcclResult_t ibInit(const struct papTransportCtx* ctx, void** stateOut) {
  if (ctx == NULL || stateOut == NULL || ctx->nranks < 1 || ctx->rank < 0 ||
      ctx->rank >= ctx->nranks) {
    PAP_WARN("ib: init with an invalid context");
    return papcclInvalidArgument;
  }
  if (ctx->nranks > PAP_IB_MAX_RANKS) {
    PAP_WARN("ib: %d ranks exceed the %d the listen handle can describe", ctx->nranks,
             PAP_IB_MAX_RANKS);
    return papcclInvalidUsage;
  }
  struct ibState* st = NULL;
  PAP_CHECK(papCalloc(&st, 1));
  papTransportBaseInit(&st->base, ctx);
  st->bell.fd = -1;
  pthread_mutex_init(&st->lock, NULL);
  papcclResult_t res = papcclSuccess;
  PAP_CHECK_GOTO(papIbReadParams(st), res, fail);
  PAP_CHECK_GOTO(papIbOpenDevice(st), res, fail);
  const char* dev = ibv_get_device_name(st->ctx->device);
  if ((st->pd = ibv_alloc_pd(st->ctx)) == NULL ||
      (st->chan = ibv_create_comp_channel(st->ctx)) == NULL) {
    PAP_WARN("ib: %s on %s failed: %s", st->pd ? "ibv_create_comp_channel" : "ibv_alloc_pd", dev,
             strerror(errno));
    res = papcclSystemError;
    goto fail;
  }
  int cqe = st->base.ctx.nranks * (st->nbufs + IB_SQ_EXTRA + st->nrecv) + 16;
  if ((st->cq = ibv_create_cq(st->ctx, cqe, NULL, st->chan, 0)) == NULL) {
    PAP_WARN("ib: ibv_create_cq of %d entries on %s failed: %s", cqe, dev, strerror(errno));
    res = papcclSystemError;
    goto fail;
  }
  if (setNonBlocking(st->chan->fd) != 0 || setNonBlocking(st->ctx->async_fd) != 0 ||
      papDoorbellInit(&st->bell) != 0) {
    PAP_WARN("ib: setting up the event descriptors failed: %s", strerror(errno));
    res = papcclSystemError;
    goto fail;
  }
  PAP_CHECK_GOTO(allocReg(st, 64, IBV_ACCESS_LOCAL_WRITE, (void**)&st->scratch, &st->scratchMr),
                 res, fail);
  if (st->base.ctx.rank == 0) {
    int access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
                 IBV_ACCESS_REMOTE_ATOMIC;
    PAP_CHECK_GOTO(allocReg(st, st->base.ctx.boardWords * sizeof(uint64_t), access,
                            (void**)&st->board, &st->boardMr),
                   res, fail);
    st->boardAddr = (uintptr_t)st->board;
    st->boardRkey = st->boardMr->rkey;
  }
  struct papIbMrOps mops = {mrReg, mrDereg, st};
  PAP_CHECK_GOTO(papIbMrCacheInit(&st->mrCache, &mops, (int)papParamIbMrCache(),
                                  (size_t)sysconf(_SC_PAGESIZE)),
                 res, fail);
  st->mrCacheReady = 1;
  PAP_CHECK_GOTO(papCalloc(&st->conns, (size_t)st->base.ctx.nranks), res, fail);
  for (int p = 0; p < st->base.ctx.nranks; p++)
    if (p != st->base.ctx.rank || p == 0)
      PAP_CHECK_GOTO(connCreate(st, p, &st->conns[p]), res, fail);
  *stateOut = st;
  return papcclSuccess;

fail:
  ibFinalize(st); /* copes with a partly built state */
  return res;
}

static void selfHandle(const struct ibState* st, struct papIbHandle* h) {
  memset(h, 0, sizeof(*h));
  h->rank = st->base.ctx.rank;
  h->nranks = st->base.ctx.nranks;
  h->linkLayer = st->linkLayer;
  h->mtu = st->mtu;
  h->lid = st->lid;
  h->port = st->port;
  memcpy(h->gid, st->gid.raw, 16);
  h->boardAddr = st->base.ctx.rank == 0 ? st->boardAddr : 0;
  h->boardRkey = st->base.ctx.rank == 0 ? st->boardRkey : 0;
  h->bufSize = (uint32_t)st->bufSize;
  h->nbufs = (uint32_t)st->nbufs;
}

static papcclResult_t ibListen(void* state, void* handleOut) {
  struct ibState* st = (struct ibState*)state;
  if (st == NULL || handleOut == NULL) {
    PAP_WARN("ib: listen with a NULL argument");
    return papcclInvalidArgument;
  }
  uint32_t* qpns = NULL;
  PAP_CHECK(papCalloc(&qpns, (size_t)st->base.ctx.nranks));
  for (int p = 0; p < st->base.ctx.nranks; p++)
    qpns[p] = st->conns[p] ? st->conns[p]->qp->qp_num : 0;
  struct papIbHandle h;
  selfHandle(st, &h);
  const char* why = NULL;
  papcclResult_t res = papIbHandleEncode(&h, qpns, handleOut, PAP_IB_HANDLE_BYTES, &why);
  if (res != papcclSuccess) PAP_WARN("ib: cannot build the listen handle: %s", why);
  free(qpns);
  return res;
}

static papcclResult_t ibConnect(void* state, int peer, const void* handle,
                                struct papConn** connOut) {
  struct ibState* st = (struct ibState*)state;
  if (st == NULL || handle == NULL || connOut == NULL || peer < 0 || peer >= st->base.ctx.nranks ||
      peer == st->base.ctx.rank || st->conns[peer] == NULL) {
    PAP_WARN("ib: connect to peer %d: invalid argument", peer);
    return papcclInvalidArgument;
  }
  struct papConn* c = st->conns[peer];
  if (c->state == PAP_IB_QP_RTS) {
    *connOut = c;
    return papcclSuccess;
  }
  struct papIbHandle h;
  const char* why = NULL;
  if (papIbHandleDecode(handle, PAP_IB_HANDLE_BYTES, peer, st->base.ctx.nranks, &h, &why) !=
      papcclSuccess) {
    PAP_WARN("ib: the handle of rank %d is corrupt: %s", peer, why);
    return papcclInternalError;
  }
  uint32_t rqpn = papIbHandleQpn(handle, st->base.ctx.rank);
  if (rqpn == 0 || h.linkLayer != st->linkLayer) {
    PAP_WARN("ib: rank %d cannot be reached (qp 0x%x, link layer %d here %d)", peer, rqpn,
             h.linkLayer, st->linkLayer);
    return papcclInternalError;
  }
  if (h.bufSize != st->bufSize || h.nbufs != (uint32_t)st->nbufs) {
    PAP_WARN(
        "ib: rank %d uses %u buffers of %u bytes, this rank %d of %zu: set PAPCCL_IB_NBUFS and "
        "PAPCCL_IB_BUF_SIZE alike on every rank",
        peer, h.nbufs, h.bufSize, st->nbufs, st->bufSize);
    return papcclInvalidUsage;
  }
  pthread_mutex_lock(&st->lock);
  papcclResult_t res = connUp(st, c, &h, rqpn);
  if (res == papcclSuccess && peer == 0) {
    st->boardAddr = h.boardAddr;
    st->boardRkey = h.boardRkey;
  }
  pthread_mutex_unlock(&st->lock);
  if (res == papcclSuccess) *connOut = c;
  return res;
}

/* Rank 0 reaches its own board through a loopback QP (the engine never connects to self). */
static papcclResult_t ibReady(void* state) {
  struct ibState* st = (struct ibState*)state;
  if (st == NULL) return papcclInvalidArgument;
  if (st->base.ctx.rank != 0 || st->conns[0]->state == PAP_IB_QP_RTS) return papcclSuccess;
  struct papIbHandle h;
  selfHandle(st, &h);
  pthread_mutex_lock(&st->lock);
  papcclResult_t res = connUp(st, st->conns[0], &h, st->conns[0]->qp->qp_num);
  pthread_mutex_unlock(&st->lock);
  return res;
}

static struct papReq* reqGet(struct ibState* st, struct papConn* c) {
  struct papReq* r = st->freeReqs;
  if (r) {
    st->freeReqs = r->next;
    struct papReq* all = r->allNext;
    memset(r, 0, sizeof(*r));
    r->allNext = all;
  } else {
    if (papCalloc(&r, 1) != papcclSuccess) return NULL;
    r->allNext = st->allReqs;
    st->allReqs = r;
  }
  r->st = st;
  r->conn = c;
  return r;
}

static papcclResult_t checkPost(struct papConn* c, const void* buf, size_t bytes, int memType,
                                struct papReq** reqOut, const char* op, int drain) {
  if (c == NULL || reqOut == NULL || (buf == NULL && bytes)) {
    PAP_WARN("ib: %s with a NULL argument", op);
    return papcclInvalidArgument;
  }
  if (memType != PAP_MEM_HOST && memType != PAP_MEM_HOST_PINNED) {
    PAP_WARN("ib: %s of device memory (type %d) is not supported", op, memType);
    return papcclInvalidUsage;
  }
  if ((c->dead && !drain) || (!c->dead && c->state != PAP_IB_QP_RTS)) {
    PAP_WARN("ib: %s: the connection to peer %d is %s", op, c->peer, c->dead ? "broken" : "not up");
    return c->dead ? papcclRemoteError : papcclInvalidUsage;
  }
  return papcclSuccess;
}

static papcclResult_t ibIsend(struct papConn* c, const void* buf, size_t bytes, int memType,
                              uint64_t tag, struct papReq** reqOut) {
  PAP_CHECK(checkPost(c, buf, bytes, memType, reqOut, "isend", 0));
  struct ibState* st = c->st;
  pthread_mutex_lock(&st->lock);
  struct papReq* r = reqGet(st, c);
  if (r == NULL) {
    pthread_mutex_unlock(&st->lock);
    return papcclSystemError;
  }
  r->src = (const char*)buf;
  r->bytes = bytes;
  r->tag = tag;
  r->state = bytes > st->rdmaMin ? S_RTS : S_EAGER;
  Q_APPEND(c->sendHeadQ, c->sendTailQ, r, next);
  papIbConnPump(c);
  pthread_mutex_unlock(&st->lock);
  *reqOut = r;
  return papcclSuccess;
}

static papcclResult_t ibIrecv(struct papConn* c, void* buf, size_t bytes, int memType, uint64_t tag,
                              const struct papRecvSink* sink, struct papReq** reqOut) {
  PAP_CHECK(checkPost(c, buf, bytes, memType, reqOut, "irecv", c && c->arrCount > 0));
  struct ibState* st = c->st;
  pthread_mutex_lock(&st->lock);
  struct papReq* r = reqGet(st, c);
  if (r == NULL) {
    pthread_mutex_unlock(&st->lock);
    return papcclSystemError;
  }
  r->dst = (char*)buf;
  r->bytes = bytes;
  r->tag = tag;
  r->state = R_START;
  if (sink && sink->fn) {
    r->sink = *sink;
    r->hasSink = 1;
  }
  Q_APPEND(c->recvHeadQ, c->recvTailQ, r, next);
  papIbConnPump(c);
  pthread_mutex_unlock(&st->lock);
  *reqOut = r;
  return papcclSuccess;
}

static papcclResult_t ibTest(struct papReq* r, int* doneOut, size_t* sizeOut) {
  if (r == NULL || doneOut == NULL) {
    PAP_WARN("ib: test with a NULL argument");
    return papcclInvalidArgument;
  }
  struct ibState* st = r->st;
  pthread_mutex_lock(&st->lock);
  if (!r->done) papIbPollCq(st);
  *doneOut = r->done;
  papcclResult_t res = papcclSuccess;
  if (r->done) {
    res = r->err;
    if (sizeOut) *sizeOut = r->bytes;
    if (r->pendingWr == 0)
      papIbReqRecycle(r);
    else
      r->released = 1; /* its flushed writes recycle it */
  }
  pthread_mutex_unlock(&st->lock);
  return res;
}

static papcclResult_t ibProgress(void* state) {
  struct ibState* st = (struct ibState*)state;
  if (st == NULL) return papcclInvalidArgument;
  pthread_mutex_lock(&st->lock);
  papIbPollCq(st);
  pthread_mutex_unlock(&st->lock);
  return papcclSuccess;
}

static int ibPeerAlive(void* state, int peer) {
  struct ibState* st = (struct ibState*)state;
  if (st == NULL || peer < 0 || peer >= st->base.ctx.nranks || st->conns[peer] == NULL) return 1;
  pthread_mutex_lock(&st->lock);
  papIbDrainAsync(st);
  papIbPollCq(st);
  struct papConn* c = st->conns[peer];
  int alive = !c->dead;
  uint64_t now = papNowNs();
  /* A probe: to a peer whose process is gone it ends in a retry-exceeded completion. */
  if (alive && c->state == PAP_IB_QP_RTS && now - c->lastProbeNs >= 1000000000ull) {
    c->lastProbeNs = now;
    papIbSendNotify(c);
  }
  pthread_mutex_unlock(&st->lock);
  return alive;
}

/* Any peer gone without having departed: every wait's health check asks, so a survivor
 * that waits on another survivor learns it too. Each live peer gets a probe at most once a
 * second (a notify: to a peer whose process is gone it ends in a retry-exceeded completion). */
static int ibDeadPeer(void* state) {
  struct ibState* st = (struct ibState*)state;
  if (st == NULL) return -1;
  int dead = -1;
  pthread_mutex_lock(&st->lock);
  papIbDrainAsync(st);
  papIbPollCq(st);
  uint64_t now = papNowNs();
  for (int p = 0; p < st->base.ctx.nranks && dead < 0; p++) {
    struct papConn* c = st->conns[p];
    if (c == NULL || atomic_load_explicit(&c->departed, memory_order_acquire)) continue;
    if (c->dead) {
      dead = p;
    } else if (c->state == PAP_IB_QP_RTS && now - c->lastProbeNs >= 1000000000ull) {
      c->lastProbeNs = now;
      papIbSendNotify(c);
    }
  }
  pthread_mutex_unlock(&st->lock);
  return dead;
}

/* papcclCommDestroy of a healthy comm: every connected peer learns that this rank leaves. */
static void ibDepart(void* state) {
  struct ibState* st = (struct ibState*)state;
  if (st == NULL) return;
  pthread_mutex_lock(&st->lock);
  for (int p = 0; p < st->base.ctx.nranks; p++) {
    struct papConn* c = st->conns[p];
    if (c != NULL && !c->dead && c->state == PAP_IB_QP_RTS) papIbSendDepart(c);
  }
  papIbPollCq(st);
  pthread_mutex_unlock(&st->lock);
}

static uint32_t ibWaitToken(void* state) {
  struct ibState* st = (struct ibState*)state;
  return papDoorbellToken(&st->bell);
}

static void ibWait(void* state, uint32_t token, int64_t timeoutNs) {
  struct ibState* st = (struct ibState*)state;
  pthread_mutex_lock(&st->lock);
  papIbPollCq(st);
  if (timeoutNs > 0 && !papAborted(st->base.ctx.abortFlag) && papDoorbellToken(&st->bell) == token)
    papIbSleepLocked(st, token, timeoutNs);
  pthread_mutex_unlock(&st->lock);
}

static void ibWake(void* state) {
  struct ibState* st = (struct ibState*)state;
  papDoorbellWake(&st->bell);
}

static papcclResult_t ibBoardAtomic(void* state, size_t idx, int op, uint64_t val, uint64_t cmp,
                                    uint64_t* oldOut) {
  struct ibState* st = (struct ibState*)state;
  if (st == NULL) return papcclInvalidArgument;
  pthread_mutex_lock(&st->lock);
  papcclResult_t res = papIbBoardAtomicLocked(st, idx, op, val, cmp, oldOut);
  pthread_mutex_unlock(&st->lock);
  return res;
}

static void ibNotify(void* state, int peer) {
  struct ibState* st = (struct ibState*)state;
  if (st == NULL || peer < 0 || peer >= st->base.ctx.nranks) return;
  if (peer == st->base.ctx.rank) {
    ibWake(state);
    return;
  }
  pthread_mutex_lock(&st->lock);
  struct papConn* c = st->conns[peer];
  if (c && !c->dead && c->state == PAP_IB_QP_RTS) papIbSendNotify(c);
  pthread_mutex_unlock(&st->lock);
}

static void ibClose(struct papConn* c) {
  if (c == NULL) return;
  struct ibState* st = c->st;
  pthread_mutex_lock(&st->lock);
  papIbConnFail(c, papcclInvalidUsage); /* requests still posted on it end with an error */
  if (st->conns[c->peer] == c) st->conns[c->peer] = NULL;
  connDestroy(c);
  pthread_mutex_unlock(&st->lock);
}

/* Sends still in flight complete (the peer's HCA acknowledged them) before their QPs go:
 * destroy is local, and a peer may still be receiving what this rank sent last. */
static void drainSends(struct ibState* st) {
  uint64_t limit = (uint64_t)papParamTimeoutS() < 10 ? (uint64_t)papParamTimeoutS() : 10;
  uint64_t deadline = papNowNs() + limit * 1000000000ull;
  pthread_mutex_lock(&st->lock);
  for (;;) {
    uint32_t tok = papDoorbellToken(&st->bell);
    papIbPollCq(st);
    int busy = 0;
    for (int p = 0; p < st->base.ctx.nranks && !busy; p++) {
      struct papConn* c = st->conns[p];
      busy = c && !c->dead && (c->sendHead != c->sendTail || c->writes > 0);
    }
    if (!busy || papAborted(st->base.ctx.abortFlag) || papNowNs() > deadline) break;
    papIbSleepLocked(st, tok, 1000000);
  }
  pthread_mutex_unlock(&st->lock);
}

static void ibFinalize(void* state) {
  struct ibState* st = (struct ibState*)state;
  if (st == NULL) return;
  if (st->conns && st->cq) drainSends(st);
  if (st->conns) { /* QPs go first: nothing completes into freed memory */
    for (int p = 0; p < st->base.ctx.nranks; p++)
      if (st->conns[p]) connDestroy(st->conns[p]);
    free(st->conns);
  }
  if (st->mrCacheReady) {
    int inUse = papIbMrCacheDestroy(&st->mrCache);
    if (inUse) PAP_INFO(PAP_LOG_IB, "ib: %d registrations were still in use at finalize", inUse);
  }
  if (st->boardMr) ibv_dereg_mr(st->boardMr);
  free(st->board);
  if (st->scratchMr) ibv_dereg_mr(st->scratchMr);
  free(st->scratch);
  if (st->cq) {
    if (st->unackedEvents) ibv_ack_cq_events(st->cq, st->unackedEvents);
    ibv_destroy_cq(st->cq);
  }
  if (st->chan) ibv_destroy_comp_channel(st->chan);
  if (st->pd) ibv_dealloc_pd(st->pd);
  if (st->ctx) ibv_close_device(st->ctx);
  papDoorbellFree(&st->bell);
  while (st->allReqs) {
    struct papReq* r = st->allReqs;
    st->allReqs = r->allNext;
    free(r);
  }
  pthread_mutex_destroy(&st->lock);
  free(st);
}

static int ibCanConnect(const struct papTransportCtx* ctx, int peer) {
  (void)ctx, (void)peer;
  return 1; /* the fabric reaches any peer; init finds out whether a device exists */
}

static const struct papMsgOps ibMsg = {
    .isend = ibIsend,
    .irecv = ibIrecv,
    .test = ibTest,
    .progress = ibProgress,
};
static const struct papWakeOps ibWakeOps = {
    .waitToken = ibWaitToken,
    .wait = ibWait,
    .wake = ibWake,
    .notify = ibNotify,
};
static const struct papLiveOps ibLive = {
    .peerAlive = ibPeerAlive,
    .deadPeer = ibDeadPeer,
    .depart = ibDepart,
};
static const struct papBoardOps ibBoard = {
    .atomic = ibBoardAtomic,
};

const struct papTransportOps papTransportIb = {
    .name = "ib",
    .caps =
        {
            .idleProgress = 0, /* the HCA serves the board's atomics by itself */
            .remoteBoard = 1,
            .handleBytes = PAP_IB_HANDLE_BYTES,
        },
    .msg = &ibMsg,
    .wake = &ibWakeOps,
    .live = &ibLive,
    .board = &ibBoard,
    .canConnect = ibCanConnect,
    .init = ibInit,
    .listen = ibListen,
    .connect = ibConnect,
    .ready = ibReady,
    .close = ibClose,
    .finalize = ibFinalize,
};
