/* SPDX-License-Identifier: Apache-2.0 */
/* The ib backend's internal state, shared by its setup and ops table (ib.c) and its message
 * protocol (ib_proto.c). The functions below are called with the state's lock held. */
#ifndef PAPCCL_TRANSPORT_IB_IB_H_
#define PAPCCL_TRANSPORT_IB_IB_H_

#include <infiniband/verbs.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "doorbell.h"
#include "ib/ib_handle.h"
#include "ib/ib_mrcache.h"
#include "ib/ib_rules.h"
#include "papccl.h"
#include "transport.h"

#define IB_NCTRL 4 /* spare receive buffers per QP: CTS, credit, notify, depart */
#define IB_MAX_WRITES 4 /* RDMA write pieces in flight per QP */
#define IB_SQ_EXTRA (IB_NCTRL + 1 + IB_MAX_WRITES) /* control sends, the atomic, writes */
#define IB_HDR ((uint32_t)sizeof(struct papIbEagerHdr))

#define IB_CTS_SLOT_BYTES 64

enum wrKind {
  WR_RECV = 1,
  WR_DATA,
  WR_CTRL,
  WR_WRITE,
  WR_ATOMIC
};
static inline uint64_t wrId(int kind, int peer, uint32_t aux) {
  return ((uint64_t)kind << 56) | ((uint64_t)(uint32_t)peer << 32) | aux;
}

enum reqState {
  S_EAGER = 1,
  S_RTS,
  S_WAIT_CTS,
  S_WRITE,
  S_WAIT_WRITES,
  R_START,
  R_EAGER,
  R_WRITE
};

struct papReq {
  struct papReq* next; /* send or receive queue of its conn, then the free list */
  struct papReq* wnext; /* write queue of its conn */
  struct papReq* allNext; /* every request allocated: finalize frees them */
  struct ibState* st;
  struct papConn* conn;
  int state;
  int done;
  int released; /* test() reported it: back to the pool once no write is in flight */
  papcclResult_t err;
  const char* src;
  char* dst;
  size_t bytes;
  size_t offset; /* bytes posted (send) or delivered (receive) */
  uint64_t tag;
  struct papRecvSink sink;
  int hasSink;
  int firstSent; /* eager: the header chunk went out (or a CTS asked for chunks) */
  struct papIbMrEntry* mr; /* RDMA source or destination, from the cache */
  uint64_t raddr; /* from the CTS: where to write */
  uint32_t rkey;
  int pendingWr; /* RDMA writes posted, not completed */
};

struct ibArrival {
  uint32_t slot;
  uint32_t imm;
  uint32_t len;
};

struct papConn {
  struct ibState* st;
  int peer;
  struct ibv_qp* qp;
  int state; /* enum papIbQpState */
  _Atomic int dead;
  _Atomic int departed; /* the peer said it leaves in good order (PAP_IB_MSG_DEPART) */
  int departSent;
  papcclResult_t err; /* why it died */
  char* buf; /* owned: [nrecv] receive slots, [nbufs] send slots, the CTS slot */
  struct ibv_mr* mr;
  int credits; /* the peer's free credited buffers */
  int writes; /* RDMA writes in flight */
  uint64_t sendHead, sendTail; /* send slots in use: [tail, head), completed in order */
  int ctsBusy, creditBusy, notifyBusy, notifyPending;
  uint64_t lastProbeNs;
  struct papReq *sendHeadQ, *sendTailQ; /* not fully posted, in posting order */
  struct papReq *writeHeadQ, *writeTailQ; /* RDMA writes in flight, in posting order */
  struct papReq *recvHeadQ, *recvTailQ; /* posted receives, in posting order */
  struct ibArrival* arr; /* owned: data messages not matched yet, a ring of nrecv */
  uint32_t arrHead, arrCount;
  unsigned pendingCredits; /* freed buffers not returned yet */
  uint64_t dataArrived, creditsReturned;
};

struct ibState {
  struct papTransportBase base; /* first: the context (rank, nranks, board size, abort, spin) */
  pthread_mutex_t lock;
  int nbufs, nrecv;
  size_t bufSize, rdmaMin, maxMsg;
  struct ibv_context* ctx;
  struct ibv_pd* pd;
  struct ibv_comp_channel* chan;
  struct ibv_cq* cq;
  unsigned unackedEvents;
  uint8_t port, linkLayer, mtu;
  uint16_t lid;
  int gidIndex;
  union ibv_gid gid;
  int timeout;
  struct papDoorbell bell; /* wake.wait sleeps on its eventfd next to the channel's fd */
  struct papConn** conns; /* owned [nranks]; on rank 0, conns[0] is the board's loopback */
  struct papIbMrCache mrCache;
  int mrCacheReady;
  uint64_t* scratch; /* registered: atomic replies land here */
  struct ibv_mr* scratchMr;
  uint32_t atomicSeq;
  int atomicDone; /* 1 done, -1 failed (for atomicSeq) */
  uint64_t* board; /* rank 0 */
  struct ibv_mr* boardMr;
  uint64_t boardAddr;
  uint32_t boardRkey;
  struct papReq* freeReqs;
  struct papReq* allReqs;
};

#define Q_APPEND(head, tail, r, link) \
  do { \
    (r)->link = NULL; \
    if (tail) \
      (tail)->link = (r); \
    else \
      (head) = (r); \
    (tail) = (r); \
  } while (0)
#define Q_POP(head, tail, link) \
  do { \
    struct papReq* q_ = (head); \
    (head) = q_->link; \
    if ((head) == NULL) (tail) = NULL; \
    q_->link = NULL; \
  } while (0)

/* ---- The device (ib_device.c) ---------------------------------------------------------- */

/* Reads and checks the PAPCCL_IB_* parameters into st (buffers, RDMA threshold, timeout). */
papcclResult_t papIbReadParams(struct ibState* st);
/* Opens PAPCCL_IB_HCA (name[:port]) or the first device with an active port: st's context,
 * port, link layer, MTU, LID and GID (fails on a device without RDMA atomics). */
papcclResult_t papIbOpenDevice(struct ibState* st);

/* ---- The protocol (ib_proto.c) ---------------------------------------------------------- */

/* Handles every completion there is (and rings the bell); returns how many. */
int papIbPollCq(struct ibState* st);
/* Sleeps with the lock released until a completion, wake() or notify, an async event or the
 * timeout (no sleep when the bell moved past token); returns with the lock held. */
void papIbSleepLocked(struct ibState* st, uint32_t token, int64_t timeoutNs);
/* Fatal QP events mark their peer dead; a fatal device event, every peer. */
void papIbDrainAsync(struct ibState* st);
/* Posts what the conn's queues allow now (matches, sends, credit return, pending notify). */
void papIbConnPump(struct papConn* c);
/* Takes the conn down (see ib_proto.c); returns how many requests failed with it. */
int papIbConnFail(struct papConn* c, papcclResult_t err);
void papIbPostRecv(struct papConn* c, uint32_t slot);
void papIbSendNotify(struct papConn* c);
/* Tells the peer this rank leaves the comm in good order (its end is no death). */
void papIbSendDepart(struct papConn* c);
/* Back to the free list (its registration released). */
void papIbReqRecycle(struct papReq* r);
/* One sequentially consistent operation on word idx of rank 0's board, through conns[0]. */
papcclResult_t papIbBoardAtomicLocked(struct ibState* st, size_t idx, int op, uint64_t val,
                                      uint64_t cmp, uint64_t* oldOut);

#endif /* PAPCCL_TRANSPORT_IB_IB_H_ */
