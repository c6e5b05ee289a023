/* SPDX-License-Identifier: Apache-2.0 */
/* What the shm backend's files share (private to transport/shm): the segment's layout, the
 * backend's state, the doorbell, and the functions of shm_fifo.c (messages) and shm_life.c
 * (liveness) that shm.c (the segment and the ops table) uses. */
#ifndef PAPCCL_TRANSPORT_SHM_STATE_H_
#define PAPCCL_TRANSPORT_SHM_STATE_H_

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "futex.h"
#include "shm/shm.h"
#include "transport.h"

#define SHM_MAGIC 0x70617073686d3031ull /* "papshm01" */
#define SHM_VERSION 3
#define SHM_REQS_PER_CONN 1024

/* Segment layout (each rank owns one; peers map it):
 *   struct shmHeader | struct shmBoard | nranks x struct shmFifo (inbound, from rank p) |
 *   nranks x nslots x struct shmMeta | PAP arrival board (used in rank 0's segment) |
 *   flat area (this rank's lines of the flat collectives) | nranks x nslots x slotSize data |
 *   staging */
/* shmHeader.departed: the owner still runs its comm; left it in good order (papShmDepart,
 * the destroy of a healthy comm); or ended it without that (an abort, a failure). */
enum {
  PAP_SHM_LEFT_NOT = 0,
  PAP_SHM_LEFT_GOOD = 1,
  PAP_SHM_LEFT_FAILED = 2
};

struct shmHeader {
  uint64_t magic;
  uint32_t version;
  uint32_t nranks;
  uint32_t slotSize;
  uint32_t nslots;
  uint64_t stagingSize;
  uint64_t totalBytes;
  int32_t ownerRank;
  _Atomic uint32_t mapped; /* peers that mapped this segment; the last one unlinks it */
  _Atomic uint32_t departed; /* PAP_SHM_LEFT_*: how the owner left its comm, if it did */
  _Atomic uint32_t lifeLock; /* the owner holds its life lock (see papShmPeerAlive) */
  char pad[64 - 52];
};

/* One cache line per rank: the doorbell its sleepers wait on. */
struct shmBoard {
  _Atomic uint32_t bell; /* futex word; bumped by anyone who may unblock this rank */
  _Atomic uint32_t sleepers; /* threads of this rank inside wait() */
  char pad[64 - 8];
};

struct shmFifo {
  _Atomic uint64_t head; /* written by the sender (release); read by the receiver (acquire) */
  char padHead[56];
  _Atomic uint64_t tail; /* written by the receiver (release); read by the sender (acquire) */
  char padTail[56];
};

struct shmMeta {
  uint64_t tag;
  uint32_t bytes;
  uint32_t pad;
};
_Static_assert(sizeof(struct shmHeader) == PAP_SHM_HEADER_BYTES, "shm header layout");
_Static_assert(sizeof(struct shmMeta) == PAP_SHM_META_BYTES, "shm record layout");

struct shmSeg {
  void* base;
  size_t bytes;
  struct shmHeader* hdr;
  struct shmBoard* board;
  struct shmFifo* fifos; /* [nranks] */
  struct shmMeta* metas; /* [nranks][nslots] */
  _Atomic uint64_t* pap; /* the arrival board: boardWords words */
  char* flat; /* flatBytes */
  char* data; /* [nranks][nslots][slotSize] */
  char* staging;
};

enum {
  REQ_SEND = 1,
  REQ_RECV = 2
};

struct papReq {
  struct papConn* conn;
  struct papReq* next;
  int kind;
  int done;
  const char* sbuf;
  char* rbuf;
  size_t bytes;
  size_t off;
  uint64_t tag;
  struct papRecvSink sink;
  int hasSink;
  int started; /* a 0-byte message still takes one slot */
};

struct papConn {
  struct shmState* st;
  int peer;
  struct shmSeg peerSeg; /* the peer's segment, mapped */
  /* send side: my FIFO inside the peer's segment */
  struct shmFifo* outFifo;
  struct shmMeta* outMeta;
  char* outData;
  /* recv side: the peer's FIFO inside my segment */
  struct shmFifo* inFifo;
  struct shmMeta* inMeta;
  char* inData;
  struct papReq* sendHead;
  struct papReq* sendTail;
  struct papReq* recvHead;
  struct papReq* recvTail;
  struct papReq* freeList;
  struct papReq reqs[SHM_REQS_PER_CONN];
  char name[96];
};

struct shmState {
  struct papTransportBase base; /* first: the context (the board's and flat area's sizes...) */
  int nlocal;
  uint32_t slotSize;
  uint32_t nslots;
  size_t stagingSize;
  struct shmSeg self;
  char name[96];
  int unlinked;
  /* Liveness (papShmPeerAlive): selfFd holds the life lock on this rank's segment; peerFds[p]
   * is an open description of peer p's segment, to ask whether its lock is still held. */
  int selfFd;
  int* peerFds;
  struct shmState* lifeNext; /* in lifeList: the locks a forked child must let go of */
  struct shmState* lifePrev;
  struct papConn** conns; /* [nranks] */
};

/* ThreadSanitizer does not model fences (GCC warns, -Wtsan). There the waker reads sleepers
 * with a seq_cst read-modify-write instead of fence + load: then both sides modify sleepers,
 * so one RMW comes first in its modification order and either the waker reads the sleeper's
 * increment, or the sleeper's RMW reads the waker's and synchronizes with it (the waker's
 * published state is visible to the sleeper): the same guarantee as the fences give. */
#if defined(__SANITIZE_THREAD__)
#define SHM_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define SHM_TSAN 1
#endif
#endif

/* Ring rank's doorbell if one of its threads sleeps. The seq_cst fence pairs with the one in
 * shmWaitToken: either we see the sleeper, or the sleeper sees our published state. */
static inline void ringBoard(struct shmBoard* b) {
#ifdef SHM_TSAN
  if (atomic_fetch_add_explicit(&b->sleepers, 0, memory_order_seq_cst) != 0) {
#else
  atomic_thread_fence(memory_order_seq_cst);
  if (atomic_load_explicit(&b->sleepers, memory_order_relaxed) != 0) {
#endif
    atomic_fetch_add_explicit(&b->bell, 1, memory_order_seq_cst);
    papFutexWakeAll((uint32_t*)&b->bell);
  }
}

/* ---- shm_fifo.c: messages through the peers' FIFOs -------------------------------------- */
papcclResult_t papShmIsend(struct papConn* c, const void* buf, size_t bytes, int memType,
                           uint64_t tag, struct papReq** reqOut);
papcclResult_t papShmIrecv(struct papConn* c, void* buf, size_t bytes, int memType, uint64_t tag,
                           const struct papRecvSink* sink, struct papReq** reqOut);
int papShmProbe(struct papConn* c, uint64_t tag);
papcclResult_t papShmTest(struct papReq* r, int* doneOut, size_t* sizeOut);

/* ---- shm_life.c: liveness (the life lock) ----------------------------------------------- */
/* Takes the life lock on fd (this rank's new segment) and keeps fd in st; 0 when held. */
int papShmLifeHold(struct shmState* st, int fd);
/* Lets go of the life lock (the comm ends: its header says so first). */
void papShmLifeRelease(struct shmState* st);
/* Closes the descriptors of the peers' segments (st->peerFds). */
void papShmClosePeerFds(struct shmState* st);
int papShmPeerAlive(void* state, int peer);
int papShmDeadPeer(void* state);
void papShmDepart(void* state);

#endif /* PAPCCL_TRANSPORT_SHM_STATE_H_ */
