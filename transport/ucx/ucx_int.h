/* SPDX-License-Identifier: Apache-2.0 */
/* What the ucx backend's files share (private to transport/ucx): the wire formats, the state,
 * and the functions each file gives the others. ucx.c: setup, connections and teardown (the
 * ops table); ucx_msg.c: tag messages (msg); ucx_wake.c: the worker's progress, sleeping
 * and waking (wake), liveness (live); ucx_home.c: the message board (home). */
#ifndef PAPCCL_TRANSPORT_UCX_UCX_INT_H_
#define PAPCCL_TRANSPORT_UCX_UCX_INT_H_

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <ucp/api/ucp.h>

#include "doorbell.h"
#include "futex.h"
#include "transport.h"
#include "ucx/ucx.h"
#include "wait.h"

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
 * message goes out right after it (papUcxProgressOnce), under the same lock. */
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
  struct papConn* conn; /* a send's conn: a send failed on a dead endpoint marks it dead */
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
  struct papTransportBase base; /* first: the context (rank, nranks, abort, spin) */
  ucp_context_h ctx;
  ucp_worker_h worker;
  int efd; /* the worker's event fd */
  struct papDoorbell bell; /* its eventfd wakes wake.wait's sleepers beside the event fd */
  _Atomic int poller; /* 1 while a thread has armed the worker and sleeps on its event fd */
  pthread_mutex_t reqLock;
  /* Serializes every call into the worker. UCX's own multi-thread lock spins: with more
   * threads than CPUs its holder gets preempted and the waiter burns its time slice
   * (stalls of several ms per call); this one sleeps. Never held across poll(). */
  pthread_mutex_t wlock;
  struct papReq* reqs; /* outstanding */
  struct papConn** conns; /* [nranks]; conns[rank] is the loopback to ourselves */
  /* Message board (home->attach). Handlers and the call in flight change under wlock. */
  papHomeServeFn serve;
  papHomePushFn push;
  void* homeArg;
  char* serveBuf; /* serve's reply (PAP_HOME_MAX_BYTES) */
  uint64_t* inBuf; /* an incoming request or push, copied aligned (UCX's data is not) */
  pthread_mutex_t callLock; /* one home->call at a time */
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

#define UCX_POOL_MAX 256
#define UCX_POOL_MAX_BYTES (64u << 20)
struct ucxBuf {
  struct ucxBuf* next;
  size_t cap;
};

/* Copies the header of one of our active messages (board, departure) into *h; -1 when it
 * is malformed or came by rendezvous (handlers want eager messages, whole). */
static inline int papUcxAmHeader(const void* header, size_t headerLen,
                                 const ucp_am_recv_param_t* param, struct ucxHomeHdr* h) {
  if (headerLen != sizeof(*h) || (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV)) return -1;
  memcpy(h, header, sizeof(*h));
  return 0;
}

/* ---- ucx.c: setup ----------------------------------------------------------------------- */
/* WARNs that the UCX call `what` failed; papcclSystemError when out of memory, else
 * papcclRemoteError. */
papcclResult_t papUcxFail(const char* what, ucs_status_t s);
/* Installs cb as the worker's handler of active message id (its argument: st). */
papcclResult_t papUcxSetAm(struct ucxState* st, unsigned id, ucp_am_recv_callback_t cb);

/* ---- ucx_msg.c: tag messages ------------------------------------------------------------ */
extern const struct papMsgOps papUcxMsgOps;
/* Untracks r, returns its bounce buffer to the pool and frees it. */
void papUcxReqRelease(struct papReq* r);
/* Frees the pool of bounce buffers (finalize). */
void papUcxPoolFree(struct ucxState* st);

/* ---- ucx_wake.c: progress, sleeping and waking, liveness -------------------------------- */
extern const struct papWakeOps papUcxWakeOps;
extern const struct papLiveOps papUcxLiveOps;
/* One pass of the worker (and the board messages queued meanwhile) by any thread; returns
 * the events it handled. */
unsigned papUcxProgressOnce(struct ucxState* st);
/* wake.wait: sleeps until the worker has events, a ring, or the timeout. */
void papUcxWait(void* state, uint32_t token, int64_t timeoutNs);
/* Installs the handlers of the wake-up and departure active messages. */
papcclResult_t papUcxWakeHandlers(struct ucxState* st);

/* ---- ucx_home.c: the message board ------------------------------------------------------ */
extern const struct papHomeOps papUcxHomeOps;
/* Sends what handlers queued (wlock held). */
void papUcxFlushOut(struct ucxState* st);
/* Installs the handlers of the board's requests, replies and pushes. */
papcclResult_t papUcxHomeHandlers(struct ucxState* st);

#endif /* PAPCCL_TRANSPORT_UCX_UCX_INT_H_ */
