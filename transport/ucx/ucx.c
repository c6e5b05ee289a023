/* SPDX-License-Identifier: Apache-2.0 */
/* UCX transport: one UCP context and worker per communicator rank, tag messages between
 * ranks, the PAP arrival board as a message board (requests to rank 0, replies and pushes
 * back, all active messages; docs/PAP-ENGINE.md section 10), wake-ups as active messages,
 * sleeping on the worker's event fd.
 *
 * Per communicator, not per process: a communicator's worker is driven only by the thread
 * that holds its progress lock plus its own progress thread, so workers never contend
 * across communicators and teardown is local. The worker runs in UCS_THREAD_MODE_MULTI
 * because those two threads (and wake() from an aborting thread) may enter it at once.
 *
 * UCX reads its own UCX_* variables (UCX_TLS, UCX_NET_DEVICES, ...) through
 * ucp_config_read. Rank 0 serves the board's requests in its worker's progress, so it must
 * progress even when idle: the ops table asks for idle progress and the comm's progress
 * thread provides it. */
#include <dirent.h>
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
#define UCX_AM_HOME_REQ 8 /* a board request to rank 0 (id 0: no reply wanted) */
#define UCX_AM_HOME_REPLY 9 /* rank 0's reply to the request with that id */
#define UCX_AM_HOME_PUSH 10 /* a message from rank 0's board to this rank */
#define UCX_AM_DEPART 11 /* "I leave in good order": my endpoint's end is no failure */

/* Header of the board's active messages. */
struct ucxHomeHdr {
  uint64_t id; /* the caller's request id (0: none) */
  int32_t from; /* sender's rank */
  int32_t status; /* replies: 0 served, 1 the home has no board yet (try again) */
};

/* A board message queued by a handler: handlers run inside the worker's progress, and the
 * message goes out right after it (progressOnce), under the same lock. */
struct ucxOut {
  struct ucxOut* next;
  struct ucxState* st;
  int peer;
  unsigned amId;
  struct ucxHomeHdr hdr;
  size_t len;
  char data[];
};

/* Handle swapped through the bootstrap: header, then the worker address. The board address
 * and key length stay in the layout (0: the board is served with messages). */
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
  void* bounce; /* sink receives land here first (from the state's pool) */
  size_t bounceCap;
  struct papRecvSink sink;
  int hasSink;
  size_t received;
};

struct papConn {
  struct ucxState* st;
  int peer;
  ucp_ep_h ep;
  _Atomic int dead; /* the error handler saw the peer fail */
  _Atomic int departed; /* the peer said it leaves in good order (UCX_AM_DEPART) */
};

struct ucxState {
  int rank;
  int nranks;
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
  /* Message board (homeAttach). Handlers and the call in flight change under wlock. */
  papHomeServeFn serve;
  papHomePushFn push;
  void* homeArg;
  char* serveBuf; /* serve's reply (PAP_HOME_MAX_BYTES) */
  uint64_t* inBuf; /* an incoming request or push, copied aligned (UCX's data is not) */
  pthread_mutex_t callLock; /* one homeCall at a time */
  uint64_t callSeq;
  uint64_t callId; /* the call awaiting its reply (0: none) */
  void* callBuf;
  size_t callCap, callLen;
  int callState; /* 0 waiting, 1 replied, 2 the home has no board yet */
  /* Bounce buffers of sink receives, kept for reuse (a fresh one of a few hundred KiB is an
   * mmap, page faults and a munmap per message): at most UCX_POOL_MAX, under reqLock. A
   * plan posts many at once (AC2S, 16 MiB in 256 KiB chunks: 64), and a pool smaller than
   * that frees and faults in the rest on every call (docs/PAP-ENGINE.md section 13). The
   * byte cap bounds the memory. */
  struct ucxBuf* pool;
  int poolCount;
  size_t poolBytes;
  struct ucxOut* outHead; /* queued by handlers */
  int outInFlight; /* sent, not completed yet (under wlock) */
  struct ucxOut** outTail;
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
static void flushOut(struct ucxState* st);
static unsigned progressOnce(struct ucxState* st) {
  pthread_mutex_lock(&st->wlock);
  unsigned n = ucp_worker_progress(st->worker);
  if (st->outHead) flushOut(st);
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

#define UCX_POOL_MAX 256
#define UCX_POOL_MAX_BYTES (64u << 20)
struct ucxBuf {
  struct ucxBuf* next;
  size_t cap;
};

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

static void reqRelease(struct papReq* r) {
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

static void outDone(void* req, ucs_status_t status, void* user) {
  (void)status;
  struct ucxOut* o = (struct ucxOut*)user;
  o->st->outInFlight--; /* inside the worker's progress: wlock held */
  free(o);
  ucp_request_free(req);
}

/* Sends what handlers queued (wlock held). A message to a peer without a connection, or
 * one UCX refuses, is dropped: its waiter fails on the peer's death or its timeout. */
static void flushOut(struct ucxState* st) {
  while (st->outHead) {
    struct ucxOut* o = st->outHead;
    st->outHead = o->next;
    if (st->outHead == NULL) st->outTail = &st->outHead;
    struct papConn* c =
        st->conns && o->peer >= 0 && o->peer < st->nranks ? st->conns[o->peer] : NULL;
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
  o->hdr.from = st->rank;
  o->hdr.status = status;
  o->len = len;
  if (len) memcpy(o->data, data, len);
  *st->outTail = o;
  st->outTail = &o->next;
}

static int homeHdr(const void* header, size_t headerLen, const ucp_am_recv_param_t* param,
                   struct ucxHomeHdr* h) {
  if (headerLen != sizeof(*h) || (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV)) return -1;
  memcpy(h, header, sizeof(*h));
  return 0;
}

static ucs_status_t amDepart(void* arg, const void* header, size_t headerLen, void* data,
                             size_t len, const ucp_am_recv_param_t* param) {
  (void)data, (void)len;
  struct ucxState* st = (struct ucxState*)arg;
  struct ucxHomeHdr h;
  if (homeHdr(header, headerLen, param, &h) != 0 || h.from < 0 || h.from >= st->nranks ||
      st->conns == NULL || st->conns[h.from] == NULL)
    return UCS_OK;
  atomic_store_explicit(&st->conns[h.from]->departed, 1, memory_order_release);
  return UCS_OK;
}

/* At rank 0: one board request (inside the worker's progress, wlock held). */
static ucs_status_t amHomeReq(void* arg, const void* header, size_t headerLen, void* data,
                              size_t len, const ucp_am_recv_param_t* param) {
  struct ucxState* st = (struct ucxState*)arg;
  struct ucxHomeHdr h;
  if (homeHdr(header, headerLen, param, &h) != 0 || h.from <= 0 || h.from >= st->nranks ||
      len > PAP_HOME_MAX_BYTES) {
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
  ring(st); /* the board changed: rank 0's own waits on it look again */
  return UCS_OK;
}

/* At a caller: the home's reply to its request in flight (or to one that gave up). */
static ucs_status_t amHomeReply(void* arg, const void* header, size_t headerLen, void* data,
                                size_t len, const ucp_am_recv_param_t* param) {
  struct ucxState* st = (struct ucxState*)arg;
  struct ucxHomeHdr h;
  if (homeHdr(header, headerLen, param, &h) != 0 || h.id == 0 || h.id != st->callId) return UCS_OK;
  if (h.status == 0) {
    memcpy(st->callBuf, data, len < st->callCap ? len : st->callCap);
    st->callLen = len;
  }
  st->callState = h.status == 0 ? 1 : 2;
  ring(st);
  return UCS_OK;
}

static ucs_status_t amHomePush(void* arg, const void* header, size_t headerLen, void* data,
                               size_t len, const ucp_am_recv_param_t* param) {
  struct ucxState* st = (struct ucxState*)arg;
  struct ucxHomeHdr h;
  if (homeHdr(header, headerLen, param, &h) != 0 || len > PAP_HOME_MAX_BYTES) return UCS_OK;
  if (st->push) {
    if (len) memcpy(st->inBuf, data, len);
    st->push(st->homeArg, st->inBuf, len);
  }
  ring(st);
  return UCS_OK;
}

static papcclResult_t setAm(struct ucxState* st, unsigned id, ucp_am_recv_callback_t cb) {
  ucp_am_handler_param_t ap;
  memset(&ap, 0, sizeof(ap));
  ap.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_CB |
                  UCP_AM_HANDLER_PARAM_FIELD_ARG;
  ap.id = id;
  ap.cb = cb;
  ap.arg = st;
  ucs_status_t s = ucp_worker_set_am_recv_handler(st->worker, &ap);
  return s == UCS_OK ? papcclSuccess : ucxFail("ucp_worker_set_am_recv_handler", s);
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

static papcclResult_t ucxInit(const struct papTransportCtx* ctx, void** stateOut) {
  struct ucxState* st = NULL;
  PAP_CHECK(papCalloc(&st, 1));
  st->rank = ctx->rank;
  st->nranks = ctx->nranks;
  st->abortFlag = ctx->abortFlag;
  st->spinNs = ctx->spinNs;
  st->efd = st->wakeFd = -1;
  pthread_mutex_init(&st->reqLock, NULL);
  pthread_mutex_init(&st->wlock, NULL);
  pthread_mutex_init(&st->callLock, NULL);
  st->outTail = &st->outHead;
  papcclResult_t res = papcclSuccess;
  ucp_config_t* config = NULL;
  ucs_status_t s = ucp_config_read(NULL, NULL, &config);
  if (s != UCS_OK) {
    res = ucxFail("ucp_config_read", s);
    goto fail;
  }
  /* Over TCP UCX sends a tag message above 8 KiB with a rendezvous: a round trip that needs
   * the receiver to progress (a sleeping rank wakes for it). The plans send messages of at
   * most a chunk (PAPCCL_CHUNK_SIZE): send those eagerly, each in one TCP segment of UCX's
   * (a message in several segments that a cut link interrupts leaves UCX a receive it can
   * neither finish nor cancel; figures in docs/PAP-ENGINE.md section 13). Any of these UCX_*
   * variables in the environment wins. */
  if (getenv("UCX_RNDV_THRESH") == NULL && getenv("UCX_TCP_TX_SEG_SIZE") == NULL &&
      getenv("UCX_TCP_RX_SEG_SIZE") == NULL && tcpOnly()) {
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
  ucp_params_t params;
  memset(&params, 0, sizeof(params));
  params.field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_MT_WORKERS_SHARED;
  params.features = UCP_FEATURE_TAG | UCP_FEATURE_AM | UCP_FEATURE_WAKEUP;
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
  if ((res = setAm(st, UCX_AM_WAKE, amWake)) != papcclSuccess ||
      (res = setAm(st, UCX_AM_HOME_REQ, amHomeReq)) != papcclSuccess ||
      (res = setAm(st, UCX_AM_HOME_REPLY, amHomeReply)) != papcclSuccess ||
      (res = setAm(st, UCX_AM_HOME_PUSH, amHomePush)) != papcclSuccess ||
      (res = setAm(st, UCX_AM_DEPART, amDepart)) != papcclSuccess)
    goto fail;
  if (papCalloc(&st->conns, (size_t)st->nranks) != papcclSuccess ||
      papCalloc(&st->serveBuf, PAP_HOME_MAX_BYTES) != papcclSuccess ||
      papCalloc(&st->inBuf, PAP_HOME_MAX_BYTES / sizeof(uint64_t)) != papcclSuccess) {
    res = papcclSystemError;
    goto fail;
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
  ucs_status_ptr_t* reqs = (ucs_status_ptr_t*)calloc((size_t)st->nranks, sizeof(*reqs));
  if (reqs == NULL) return papcclSystemError;
  pthread_mutex_lock(&st->wlock);
  for (int p = 0; p < st->nranks; p++) {
    struct papConn* c = st->conns[p];
    if (p == st->rank || c == NULL || c->ep == NULL) continue;
    ucp_request_param_t prm;
    memset(&prm, 0, sizeof(prm));
    reqs[p] = ucp_ep_flush_nbx(c->ep, &prm);
  }
  pthread_mutex_unlock(&st->wlock);
  struct papWait w;
  papWaitInit(&w, "ucx: wiring up the endpoints", st->abortFlag, 1,
              st->spinNs > 0 ? (uint64_t)st->spinNs : 0, 0);
  papcclResult_t res = papcclSuccess;
  for (;;) {
    int left = 0;
    pthread_mutex_lock(&st->wlock);
    for (int p = 0; p < st->nranks; p++) {
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
    if (progressOnce(st) == 0) papWaitSleep(&w);
  }
  pthread_mutex_lock(&st->wlock);
  for (int p = 0; p < st->nranks; p++) /* left at a timeout or an abort */
    if (UCS_PTR_IS_PTR(reqs[p])) {
      ucp_request_cancel(st->worker, reqs[p]);
      ucp_request_free(reqs[p]);
    }
  pthread_mutex_unlock(&st->wlock);
  free(reqs);
  return res;
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
    /* The endpoint failed (the peer is gone) before its error handler ran: the peer is dead,
     * and the caller, which can tell why, says so (papTransportOps.isend). */
    if (s == UCS_ERR_ENDPOINT_TIMEOUT || s == UCS_ERR_CONNECTION_RESET ||
        s == UCS_ERR_UNREACHABLE) {
      atomic_store_explicit(&c->dead, 1, memory_order_release);
      return papcclRemoteError;
    }
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
    if (bytes && (r->bounce = bounceGet(c->st, bytes, &r->bounceCap)) == NULL) {
      PAP_WARN("ucx: out of memory for a %zu-byte receive buffer", bytes);
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
    pthread_mutex_lock(&c->st->reqLock);
    bouncePut(c->st, r->bounce, r->bounceCap);
    pthread_mutex_unlock(&c->st->reqLock);
    free(r);
    return ucxFail("ucp_tag_recv_nbx", s);
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
  progressOnce((struct ucxState*)state);
  return papcclSuccess;
}

static int ucxPeerAlive(void* state, int peer) {
  struct ucxState* st = (struct ucxState*)state;
  if (peer < 0 || peer >= st->nranks || st->conns[peer] == NULL) return 1;
  return !atomic_load_explicit(&st->conns[peer]->dead, memory_order_acquire);
}

/* A peer whose endpoint failed although it did not depart: the comm is broken for every
 * rank, also one that waits on another peer. */
static int ucxDeadPeer(void* state) {
  struct ucxState* st = (struct ucxState*)state;
  for (int p = 0; p < st->nranks; p++) {
    struct papConn* c = st->conns[p];
    if (p == st->rank || c == NULL || !atomic_load_explicit(&c->dead, memory_order_acquire))
      continue;
    if (!atomic_load_explicit(&c->departed, memory_order_acquire)) return p;
  }
  return -1;
}

/* Tells every peer that this rank leaves in good order, before its endpoints close (one
 * eager message each, on the same endpoint, so it arrives before the close; bounded wait). */
static void ucxDepart(void* state) {
  struct ucxState* st = (struct ucxState*)state;
  /* The header must outlive a send still in flight at the deadline: then it is left. */
  struct ucxHomeHdr* h = (struct ucxHomeHdr*)malloc(sizeof(*h));
  ucs_status_ptr_t* reqs = (ucs_status_ptr_t*)calloc((size_t)st->nranks, sizeof(*reqs));
  if (reqs == NULL || h == NULL) {
    free(reqs);
    free(h);
    return;
  }
  *h = (struct ucxHomeHdr){0, st->rank, 0};
  int left = 0;
  pthread_mutex_lock(&st->wlock);
  for (int p = 0; p < st->nranks; p++) {
    struct papConn* c = st->conns[p];
    if (p == st->rank || c == NULL || atomic_load_explicit(&c->dead, memory_order_acquire))
      continue;
    ucp_request_param_t prm;
    memset(&prm, 0, sizeof(prm));
    prm.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    prm.flags = UCP_AM_SEND_FLAG_EAGER;
    reqs[p] = ucp_am_send_nbx(c->ep, UCX_AM_DEPART, h, sizeof(*h), NULL, 0, &prm);
  }
  uint64_t deadline = papNowNs() + 200000000ull;
  for (int p = 0; p < st->nranks; p++) {
    if (!UCS_PTR_IS_PTR(reqs[p])) continue;
    while (ucp_request_check_status(reqs[p]) == UCS_INPROGRESS && papNowNs() < deadline)
      ucp_worker_progress(st->worker);
    left += ucp_request_check_status(reqs[p]) == UCS_INPROGRESS;
    ucp_request_free(reqs[p]);
  }
  pthread_mutex_unlock(&st->wlock);
  free(reqs);
  if (!left) free(h);
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
  /* To the ns: a sleep cut where a predicted event's margin starts (papWaitSlice) must end
   * there, not at the next whole ms. */
  struct timespec ts = {(time_t)(timeoutNs / 1000000000ll), (long)(timeoutNs % 1000000000ll)};
  atomic_fetch_add_explicit(&st->sleepers, 1, memory_order_seq_cst);
  /* A thread that sleeps on the eventfd alone needs a poller behind it: if the poller left
   * meanwhile (it rings the sleepers it counts as it leaves; seq_cst on both sides, so one
   * of us sees the other), do not sleep: come back and take the role. */
  int covered = isPoller || atomic_load_explicit(&st->poller, memory_order_seq_cst);
  if (covered && atomic_load_explicit(&st->bell, memory_order_seq_cst) == token)
    ppoll(fds, isPoller ? 2 : 1, &ts, NULL);
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
  if (!isPoller) ucxDrain(st);
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
  if (st->outHead) flushOut(st);
  pthread_mutex_unlock(&st->wlock);
  return rl;
}

static papcclResult_t ucxHomeAttach(void* state, papHomeServeFn serve, papHomePushFn push,
                                    void* arg) {
  struct ucxState* st = (struct ucxState*)state;
  pthread_mutex_lock(&st->wlock);
  st->serve = st->rank == 0 ? serve : NULL;
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
  if (st->rank == 0) {
    int served = 0;
    serveHere(st, req, len, NULL, 0, &served);
    return papcclSuccess;
  }
  pthread_mutex_lock(&st->wlock);
  queueOut(st, 0, UCX_AM_HOME_REQ, 0, 0, req, len);
  flushOut(st);
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
  papWaitInit(&w, "ucx: a request to the arrival board on rank 0", st->abortFlag, 1,
              st->spinNs > 0 ? (uint64_t)st->spinNs : 0, 0);
  w.abortRes = papcclRemoteError;
  if (st->rank == 0) {
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
    flushOut(st);
    pthread_mutex_unlock(&st->wlock);
    int spinning = st->spinNs > 0, got = 0;
    for (unsigned i = 0;; i++) {
      uint32_t tok = atomic_load_explicit(&st->bell, memory_order_acquire);
      pthread_mutex_lock(&st->wlock);
      got = st->callState;
      pthread_mutex_unlock(&st->wlock);
      if (got != 0) break;
      if (st->conns[0] == NULL || atomic_load_explicit(&st->conns[0]->dead, memory_order_acquire)) {
        res = papcclRemoteError; /* the caller says why (homeCall) */
        break;
      }
      if (spinning && ((i & 15) != 15 || papWaitInBudget(&w, papNowNs()))) {
        progressOnce(st);
        continue;
      }
      spinning = 0;
      uint64_t now = papNowNs();
      if ((res = papWaitCheck(&w, now)) != papcclSuccess) break;
      ucxWait(st, tok, papWaitSlice(&w, now, 10000000)); /* the reply rings the bell */
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
    if (st->outHead) flushOut(st);
    int left = st->outInFlight;
    pthread_mutex_unlock(&st->wlock);
    if (left <= 0 || papNowNs() > deadline) break;
    progressOnce(st);
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
    progressOnce(st);
  }
}

/* From inside serve only (wlock held): queued, sent after the handler. */
static void ucxHomePush(void* state, int peer, const void* msg, size_t len) {
  struct ucxState* st = (struct ucxState*)state;
  if (peer == st->rank) {
    if (st->push) st->push(st->homeArg, msg, len);
    ring(st);
    return;
  }
  queueOut(st, peer, UCX_AM_HOME_PUSH, 0, 0, msg, len);
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
    progressOnce(st);
  }
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
    st->conns = NULL; /* handlers that run in the progress below find no connection */
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
  if (st->worker) dropUnexpected(st); /* and what arrived while the endpoints closed */
  if (st->wakeFd >= 0) close(st->wakeFd);
  if (st->worker) ucp_worker_destroy(st->worker);
  while (st->outHead) { /* never sent */
    struct ucxOut* o = st->outHead;
    st->outHead = o->next;
    free(o);
  }
  free(st->serveBuf);
  free(st->inBuf);
  while (st->pool) {
    struct ucxBuf* b = st->pool;
    st->pool = b->next;
    free(b);
  }
  if (st->ctx) ucp_cleanup(st->ctx);
  pthread_mutex_destroy(&st->reqLock);
  pthread_mutex_destroy(&st->wlock);
  pthread_mutex_destroy(&st->callLock);
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
    .probe = ucxProbe,
    .test = ucxTest,
    .progress = ucxProgress,
    .peerAlive = ucxPeerAlive,
    .deadPeer = ucxDeadPeer,
    .depart = ucxDepart,
    .waitToken = ucxWaitToken,
    .wait = ucxWait,
    .wake = ucxWake,
    .staging = ucxStaging,
    .homeAttach = ucxHomeAttach,
    .homeCall = ucxHomeCall,
    .homeSend = ucxHomeSend,
    .homePush = ucxHomePush,
    .homeFlush = ucxHomeFlush,
    .notify = ucxNotify,
    .abandon = ucxAbandon,
    .close = ucxClose,
    .finalize = ucxFinalize,
};
