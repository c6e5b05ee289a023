/* SPDX-License-Identifier: Apache-2.0 */
/* The ib backend's pure parts, testable without a device: the listen-handle codec, the
 * queue-pair state machine, the immediate-data format and credit rule, and the memory
 * registration cache (driven through register/deregister callbacks). */
#ifndef PAPCCL_TRANSPORT_IB_IB_PARTS_H_
#define PAPCCL_TRANSPORT_IB_IB_PARTS_H_

#include <stddef.h>
#include <stdint.h>

#include "papccl.h"
#include "transport.h"

/* The backend's ops table (transport/ib/ib.c). */
extern const struct papTransportOps papTransportIb;

/* ---- Listen handle --------------------------------------------------------------------- */

/* Layout (little-endian): magic u64, version u16, link layer u8, active MTU u8, rank u32,
 * nranks u32, LID u16, port u8, reserved u8, GID[16], board address u64, board rkey u32,
 * encoded length u32, checksum u32 (FNV-1a of the handle with this field zero), bounce
 * buffer bytes u32, buffers per peer u32, reserved u32; then nranks queue-pair numbers of
 * 24 bits each (entry p: the QP this rank keeps for peer p). */
#define PAP_IB_HANDLE_BYTES 4096
#define PAP_IB_HANDLE_HDR_BYTES 72
#define PAP_IB_HANDLE_MAGIC 0x3130626970617070ull /* "ppapib01" */
#define PAP_IB_HANDLE_VERSION 1
#define PAP_IB_MAX_RANKS ((PAP_IB_HANDLE_BYTES - PAP_IB_HANDLE_HDR_BYTES) / 3)

struct papIbHandle {
  int rank;
  int nranks;
  uint8_t linkLayer; /* IBV_LINK_LAYER_* */
  uint8_t mtu; /* enum ibv_mtu */
  uint16_t lid;
  uint8_t port;
  uint8_t gid[16];
  uint64_t boardAddr; /* rank 0 only: the arrival board */
  uint32_t boardRkey;
  uint32_t bufSize; /* eager protocol: every rank must use the same */
  uint32_t nbufs;
};

/* Encoded bytes for nranks, or 0 when nranks is out of [1, PAP_IB_MAX_RANKS]. */
size_t papIbHandleSize(int nranks);
/* Writes h and qpns[h->nranks] into buf (bufBytes, at least papIbHandleSize); the rest of buf
 * is zeroed. On error *whyOut names the cause (no logging: the caller logs). */
papcclResult_t papIbHandleEncode(const struct papIbHandle* h, const uint32_t* qpns, void* buf,
                                 size_t bufBytes, const char** whyOut);
/* Validates buf (bufBytes readable) as the handle of rank expectRank in a comm of
 * expectNranks and fills hOut; papcclInternalError with *whyOut on a corrupt handle. */
papcclResult_t papIbHandleDecode(const void* buf, size_t bufBytes, int expectRank, int expectNranks,
                                 struct papIbHandle* hOut, const char** whyOut);
/* Entry idx of a handle that papIbHandleDecode accepted. */
uint32_t papIbHandleQpn(const void* buf, int idx);

/* ---- Queue-pair state machine ---------------------------------------------------------- */

enum papIbQpState {
  PAP_IB_QP_RESET = 0,
  PAP_IB_QP_INIT,
  PAP_IB_QP_RTR,
  PAP_IB_QP_RTS,
  PAP_IB_QP_ERROR,
  PAP_IB_QP_NSTATES
};
enum papIbQpEvent {
  PAP_IB_EV_TO_INIT = 0, /* ibv_modify_qp to INIT */
  PAP_IB_EV_TO_RTR, /* to RTR: the peer's QP number and address are known */
  PAP_IB_EV_TO_RTS, /* to RTS */
  PAP_IB_EV_FAIL, /* error completion or a fatal async event */
  PAP_IB_EV_TO_RESET, /* back to RESET (teardown or recovery) */
  PAP_IB_EV_NEVENTS
};
/* The state after event, or -1 when the transition is not allowed (a connection only moves
 * forward RESET -> INIT -> RTR -> RTS; any state may fail or go back to RESET). */
int papIbNextState(int state, int event);
const char* papIbStateName(int state);

/* ---- Wire messages ---------------------------------------------------------------------- */

/* Kinds carried in the immediate data. Data kinds take one of the receiver's credited
 * buffers and may wait there for a matching receive; control kinds are consumed as soon as
 * they are polled (their buffers are the receiver's spare ones, never credited). */
enum papIbMsg {
  PAP_IB_MSG_EAGER_FIRST = 1, /* papIbEagerHdr + the first bytes of a message */
  PAP_IB_MSG_EAGER_MORE = 2, /* the next bytes of the message being received */
  PAP_IB_MSG_RTS = 3, /* papIbEagerHdr: a large message waits for a clear-to-send */
  PAP_IB_MSG_WRITE_DONE = 4, /* RDMA write with immediate: the large message has landed */
  PAP_IB_MSG_CTS = 5, /* papIbCts: where to write (or eager chunks) */
  PAP_IB_MSG_CREDIT = 6, /* returns credits only */
  PAP_IB_MSG_NOTIFY = 7 /* rings the receiver's doorbell */
};
struct papIbEagerHdr {
  uint64_t tag;
  uint64_t bytes; /* of the whole message */
};
struct papIbCts {
  uint64_t addr; /* 0: send eager chunks (the receiver hands pieces to a sink) */
  uint32_t rkey;
  uint32_t pad;
};
#define PAP_IB_MAX_CREDITS 0xffff

/* Immediate data (host order; the wire carries it big-endian): kind in the top 4 bits, the
 * credits returned to the peer in the low 16. */
static inline uint32_t papIbImmPack(int kind, unsigned credits) {
  return ((uint32_t)kind << 28) | (credits & PAP_IB_MAX_CREDITS);
}
static inline int papIbImmKind(uint32_t imm) {
  return (int)(imm >> 28);
}
static inline unsigned papIbImmCredits(uint32_t imm) {
  return imm & PAP_IB_MAX_CREDITS;
}
static inline int papIbMsgIsData(int kind) {
  return kind >= PAP_IB_MSG_EAGER_FIRST && kind <= PAP_IB_MSG_WRITE_DONE;
}
/* Whether the receiver should send a credit message now: freed buffers not yet returned
 * (pending), and data messages that arrived but were not returned yet (unreturned, freed or
 * held). Returns in batches of half the window, but at once when the sender must be out of
 * credits (everything it may send has arrived), so a sender never waits on a batch. */
int papIbShouldReturnCredits(unsigned pending, unsigned unreturned, unsigned nbufs);

/* ---- Registration cache ----------------------------------------------------------------- */

struct papIbMrOps {
  /* Registers [addr, addr + bytes) with access flags; *mrOut is the backend's handle. */
  papcclResult_t (*reg)(void* arg, void* addr, size_t bytes, int access, void** mrOut);
  void (*dereg)(void* arg, void* mr);
  void* arg;
};

struct papIbMrEntry {
  struct papIbMrEntry* prev; /* LRU list, most recent first */
  struct papIbMrEntry* next;
  uintptr_t addr; /* page-aligned registered range */
  size_t bytes;
  int access;
  int refs; /* users between Get and Put */
  int stale; /* invalidated while in use: deregistered at the last Put, never hit again */
  void* mr; /* owned; released through ops.dereg */
};

struct papIbMrCache {
  struct papIbMrOps ops;
  size_t pageSize;
  int cap; /* idle entries kept beyond this are evicted, least recently used first */
  int count;
  struct papIbMrEntry* head; /* most recently used */
  struct papIbMrEntry* tail;
  uint64_t hits, misses, evictions;
};

/* cap 0 keeps nothing: every Get registers and the last Put deregisters. */
papcclResult_t papIbMrCacheInit(struct papIbMrCache* c, const struct papIbMrOps* ops, int cap,
                                size_t pageSize);
/* A registration covering [addr, addr + bytes) with at least `access`: a cached one that
 * contains the range (a hit), else a new registration of the page-aligned range. Each
 * successful Get must be paired with one Put. A failing ops.reg is returned as is. */
papcclResult_t papIbMrCacheGet(struct papIbMrCache* c, const void* addr, size_t bytes, int access,
                               struct papIbMrEntry** entryOut);
void papIbMrCachePut(struct papIbMrCache* c, struct papIbMrEntry* e);
/* Forgets registrations overlapping [addr, addr + bytes) (the memory is being freed): idle
 * ones are deregistered now, in-use ones at their last Put. Returns how many were deferred. */
int papIbMrCacheInvalidate(struct papIbMrCache* c, const void* addr, size_t bytes);
/* Deregisters everything; returns how many entries were still in use. */
int papIbMrCacheDestroy(struct papIbMrCache* c);

#endif /* PAPCCL_TRANSPORT_IB_IB_PARTS_H_ */
