/* SPDX-License-Identifier: Apache-2.0 */
/* Shared-memory transport: per-rank POSIX segment with inbound FIFOs, board line, staging. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "alloc.h"
#include "check.h"
#include "futex.h"
#include "log.h"
#include "param.h"
#include "shm/shm.h"
#include "socket.h"
#include "transport.h"

#define SHM_MAGIC 0x70617073686d3031ull /* "papshm01" */
#define SHM_VERSION 3
#define SHM_REQS_PER_CONN 1024

/* Segment layout (each rank owns one; peers map it):
 *   struct shmHeader | struct shmBoard | nranks x struct shmFifo (inbound, from rank p) |
 *   nranks x nslots x struct shmMeta | PAP arrival board (used in rank 0's segment) |
 *   flat area (this rank's lines of the flat collectives) | nranks x nslots x slotSize data |
 *   staging */
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
  _Atomic uint32_t departed; /* the owner left in good order (shmDepart) or ended its comm */
  _Atomic uint32_t lifeLock; /* the owner holds its life lock (see shmPeerAlive) */
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
  int rank;
  int nranks;
  size_t boardWords; /* the arrival board's size (rank 0's segment holds it) */
  size_t flatBytes;
  int nlocal;
  unsigned char key[16];
  uint32_t slotSize;
  uint32_t nslots;
  size_t stagingSize;
  struct shmSeg self;
  char name[96];
  int unlinked;
  /* Liveness (shmPeerAlive): selfFd holds the life lock on this rank's segment; peerFds[p]
   * is an open description of peer p's segment, to ask whether its lock is still held. */
  int selfFd;
  int* peerFds;
  struct shmState* lifeNext; /* in lifeList: the locks a forked child must let go of */
  struct shmState* lifePrev;
  struct papConn** conns; /* [nranks] */
  const volatile int* abortFlag;
};

/* Liveness that cannot be fooled. Each rank holds an open-file-description (OFD) write lock
 * on the first byte of its own segment for as long as its comm lives. The kernel lets go of
 * the lock when the last descriptor of that description closes, which happens when the
 * process dies, whatever the signal, before it becomes a zombie. No pid is involved, so a peer
 * in another PID namespace (a container of the same host) is judged as well as one in ours,
 * and a recycled pid cannot pass for the dead rank. A peer asks with F_OFD_GETLK on its own
 * descriptor of the segment: no conflicting lock means the owner is gone.
 *
 * A child forked by a rank (a data-loader worker) would inherit the descriptor and keep the
 * lock alive after the rank died: every lock is in lifeList, and a fork handler closes them
 * in the child (exec closes them through close-on-exec, which shm_open sets). The lock is
 * taken on a description that nothing maps, since a mapping, which the child inherits too,
 * keeps its description open. */
static pthread_mutex_t lifeMutex = PTHREAD_MUTEX_INITIALIZER;
static struct shmState* lifeList;
static pthread_once_t lifeOnce = PTHREAD_ONCE_INIT;

static void lifeForkPrepare(void) {
  pthread_mutex_lock(&lifeMutex);
}

static void lifeForkParent(void) {
  pthread_mutex_unlock(&lifeMutex);
}

static void lifeForkChild(void) {
  for (struct shmState* st = lifeList; st != NULL; st = st->lifeNext) {
    if (st->selfFd >= 0) close(st->selfFd);
    st->selfFd = -1;
  }
  /* The child holds no lock: its list starts empty (a comm it ends later, selfFd -1, is not
   * in it, so it never leaves a freed state behind in the list). */
  lifeList = NULL;
  pthread_mutex_unlock(&lifeMutex);
}

static void lifeInstall(void) {
  pthread_atfork(lifeForkPrepare, lifeForkParent, lifeForkChild);
}

static int lifeLockOp(int fd, int cmd, struct flock* fl, short type) {
  memset(fl, 0, sizeof(*fl));
  fl->l_type = type;
  fl->l_whence = SEEK_SET;
  fl->l_start = 0;
  fl->l_len = 1;
  return fcntl(fd, cmd, fl);
}

/* Takes the life lock on fd (this rank's new segment) and keeps fd in st; 0 when held. */
static int lifeHold(struct shmState* st, int fd) {
  struct flock fl;
  pthread_once(&lifeOnce, lifeInstall);
  if (lifeLockOp(fd, F_OFD_SETLK, &fl, F_WRLCK) != 0) {
    PAP_WARN(
        "shm: cannot lock segment %s (F_OFD_SETLK: %s): peers will see this rank's death "
        "only at PAPCCL_TIMEOUT_S",
        st->name, strerror(errno));
    return -1;
  }
  pthread_mutex_lock(&lifeMutex);
  st->selfFd = fd;
  st->lifePrev = NULL;
  st->lifeNext = lifeList;
  if (lifeList != NULL) lifeList->lifePrev = st;
  lifeList = st;
  pthread_mutex_unlock(&lifeMutex);
  return 0;
}

/* Lets go of the life lock (the comm ends: its header says so first). */
static void lifeRelease(struct shmState* st) {
  pthread_mutex_lock(&lifeMutex);
  if (st->selfFd >= 0) {
    if (st->lifePrev != NULL)
      st->lifePrev->lifeNext = st->lifeNext;
    else
      lifeList = st->lifeNext;
    if (st->lifeNext != NULL) st->lifeNext->lifePrev = st->lifePrev;
    close(st->selfFd);
    st->selfFd = -1;
  }
  pthread_mutex_unlock(&lifeMutex);
}

static void closePeerFds(struct shmState* st) {
  if (st->peerFds == NULL) return;
  for (int r = 0; r < st->nranks; r++)
    if (st->peerFds[r] >= 0) close(st->peerFds[r]);
  free(st->peerFds);
  st->peerFds = NULL;
}

static size_t alignUp(size_t v, size_t a) {
  return (v + a - 1) & ~(a - 1);
}

static size_t segBytes(const struct shmState* st) {
  size_t b = sizeof(struct shmHeader) + sizeof(struct shmBoard);
  b += (size_t)st->nranks * sizeof(struct shmFifo);
  b = alignUp(b + (size_t)st->nranks * st->nslots * sizeof(struct shmMeta), 64);
  b = alignUp(b + st->boardWords * sizeof(uint64_t), 64);
  b = alignUp(b + st->flatBytes, 4096);
  b += (size_t)st->nranks * st->nslots * st->slotSize;
  b = alignUp(b, 4096) + alignUp(st->stagingSize, 4096);
  return b;
}

/* Every segment of the comm has the same layout (the same settings on every rank). */
static void segLayout(struct shmSeg* s, const struct shmState* st) {
  int nranks = st->nranks;
  uint32_t nslots = st->nslots;
  char* p = (char*)s->base;
  s->hdr = (struct shmHeader*)p;
  s->board = (struct shmBoard*)(p + sizeof(struct shmHeader));
  s->fifos = (struct shmFifo*)(p + sizeof(struct shmHeader) + sizeof(struct shmBoard));
  s->metas = (struct shmMeta*)(s->fifos + nranks);
  size_t off = alignUp((size_t)((char*)(s->metas + (size_t)nranks * nslots) - p), 64);
  s->pap = (_Atomic uint64_t*)(p + off);
  off = alignUp(off + st->boardWords * sizeof(uint64_t), 64);
  s->flat = p + off;
  off = alignUp(off + st->flatBytes, 4096);
  s->data = p + off;
  off = alignUp(off + (size_t)nranks * nslots * st->slotSize, 4096);
  s->staging = p + off;
}

static void segName(char* out, size_t n, const unsigned char* key, int rank) {
  int o = snprintf(out, n, "/papccl-");
  for (int i = 0; i < 16 && o + 2 < (int)n; i++)
    o += snprintf(out + o, n - (size_t)o, "%02x", key[i]);
  snprintf(out + o, n - (size_t)o, "-%d-%d", (int)getpid(), rank);
}

static int shmCanConnect(const struct papTransportCtx* ctx, int peer) {
  return ctx->hostIds[peer] == ctx->hostIds[ctx->rank];
}

static papcclResult_t shmInit(const struct papTransportCtx* ctx, void** stateOut) {
  papcclResult_t res = papcclSuccess;
  struct shmState* st = NULL;
  int fd = -1;
  PAP_CHECK(papCalloc(&st, 1));
  st->rank = ctx->rank;
  st->nranks = ctx->nranks;
  st->boardWords = ctx->boardWords;
  st->flatBytes = ctx->flatBytes;
  st->abortFlag = ctx->abortFlag;
  st->selfFd = -1;
  memcpy(st->key, ctx->key, 16);
  for (int r = 0; r < ctx->nranks; r++)
    if (ctx->hostIds[r] == ctx->hostIds[ctx->rank]) st->nlocal++;
  int64_t slot = papParamShmSlotSize();
  int64_t nslots = papParamShmSlots();
  int64_t staging = papParamShmStagingSize();
  if (slot < 4096 || slot > (1 << 26) || (slot & 63) != 0) {
    PAP_WARN("PAPCCL_SHM_SLOT_SIZE %lld must be a multiple of 64 in [4096, 64 MiB]",
             (long long)slot);
    res = papcclInvalidArgument;
    goto out_free;
  }
  if (nslots < 2 || nslots > 1024) {
    PAP_WARN("PAPCCL_SHM_NSLOTS %lld must be in [2, 1024]", (long long)nslots);
    res = papcclInvalidArgument;
    goto out_free;
  }
  if (staging < 0) staging = 0;
  st->slotSize = (uint32_t)slot;
  st->nslots = (uint32_t)nslots;
  st->stagingSize = (size_t)staging;
  PAP_CHECK_GOTO(papCalloc(&st->conns, (size_t)ctx->nranks), res, out_free);
  PAP_CHECK_GOTO(papCalloc(&st->peerFds, (size_t)ctx->nranks), res, out_free);
  for (int r = 0; r < ctx->nranks; r++)
    st->peerFds[r] = -1;

  segName(st->name, sizeof(st->name), st->key, st->rank);
  size_t bytes = segBytes(st);
  fd = shm_open(st->name, O_RDWR | O_CREAT | O_EXCL, 0600);
  if (fd < 0) {
    PAP_WARN("shm_open %s failed: %s", st->name, strerror(errno));
    res = papcclSystemError;
    goto out_free;
  }
  if (ftruncate(fd, (off_t)bytes) != 0) {
    PAP_WARN("ftruncate of %s to %zu bytes failed: %s (is /dev/shm large enough?)", st->name, bytes,
             strerror(errno));
    res = papcclSystemError;
    goto out_unlink;
  }
  void* base = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (base == MAP_FAILED) {
    PAP_WARN("mmap of %s (%zu bytes) failed: %s", st->name, bytes, strerror(errno));
    res = papcclSystemError;
    goto out_unlink;
  }
  close(fd);
  fd = -1;
  /* The life lock goes on a description of its own: the mapping holds a reference to the
   * description it was made from, which a forked child inherits with it. */
  int lockFd = shm_open(st->name, O_RDWR, 0600);
  int locked = lockFd >= 0 && lifeHold(st, lockFd) == 0; /* keeps lockFd for the comm's life */
  if (lockFd >= 0 && !locked) close(lockFd);
  st->self.base = base;
  st->self.bytes = bytes;
  segLayout(&st->self, st);
  struct shmHeader* h = st->self.hdr;
  h->version = SHM_VERSION;
  h->nranks = (uint32_t)st->nranks;
  h->slotSize = st->slotSize;
  h->nslots = st->nslots;
  h->stagingSize = st->stagingSize;
  h->totalBytes = bytes;
  h->ownerRank = st->rank;
  atomic_store_explicit(&h->mapped, 0, memory_order_relaxed);
  atomic_store_explicit(&h->departed, 0, memory_order_relaxed);
  atomic_store_explicit(&h->lifeLock, (uint32_t)locked, memory_order_relaxed);
  /* Release partner: the acquire load of magic in shmConnect. */
  __atomic_store_n(&h->magic, SHM_MAGIC, __ATOMIC_RELEASE);
  if (st->nlocal == 1) {
    shm_unlink(st->name);
    st->unlinked = 1;
  }
  PAP_INFO(PAP_LOG_SHM, "rank %d shm segment %s: %zu bytes, %u slots of %u bytes per peer",
           st->rank, st->name, bytes, st->nslots, st->slotSize);
  *stateOut = st;
  return papcclSuccess;

out_unlink:
  if (fd >= 0) close(fd);
  shm_unlink(st->name);
out_free:
  lifeRelease(st);
  closePeerFds(st);
  free(st->conns);
  free(st);
  return res;
}

static papcclResult_t shmListen(void* state, void* handleOut) {
  struct shmState* st = (struct shmState*)state;
  memset(handleOut, 0, PAP_TRANSPORT_HANDLE_BYTES);
  snprintf((char*)handleOut, PAP_TRANSPORT_HANDLE_BYTES, "%s", st->name);
  return papcclSuccess;
}

int papShmHandleName(const void* handle, size_t handleBytes, char* nameOut, size_t nameLen) {
  const char* h = (const char*)handle;
  size_t len = strnlen(h, handleBytes);
  size_t plen = sizeof(PAP_SHM_NAME_PREFIX) - 1;
  if (len == handleBytes || len >= nameLen || len <= plen ||
      strncmp(h, PAP_SHM_NAME_PREFIX, plen) != 0 || memchr(h + 1, '/', len - 1) != NULL)
    return -1;
  memcpy(nameOut, h, len + 1);
  return 0;
}

int papShmCheckHeader(const void* hdr, int nranks, int peer) {
  const struct shmHeader* h = (const struct shmHeader*)hdr;
  if (__atomic_load_n(&h->magic, __ATOMIC_ACQUIRE) != SHM_MAGIC || h->version != SHM_VERSION ||
      h->nranks != (uint32_t)nranks || h->ownerRank != peer)
    return -1;
  return 0;
}

static papcclResult_t shmConnect(void* state, int peer, const void* handle,
                                 struct papConn** connOut) {
  struct shmState* st = (struct shmState*)state;
  papcclResult_t res = papcclSuccess;
  struct papConn* c = NULL;
  *connOut = NULL;
  if (peer < 0 || peer >= st->nranks || peer == st->rank) {
    PAP_WARN("shm connect: invalid peer %d", peer);
    return papcclInternalError;
  }
  PAP_CHECK(papCallocBytes((void**)&c, 1, sizeof(*c), "shm connection"));
  c->st = st;
  c->peer = peer;
  if (papShmHandleName(handle, PAP_TRANSPORT_HANDLE_BYTES, c->name, sizeof(c->name)) != 0) {
    PAP_WARN("shm: the handle of peer %d holds no segment name", peer);
    res = papcclInternalError;
    goto out_free;
  }
  int fd = shm_open(c->name, O_RDWR, 0600);
  if (fd < 0) {
    PAP_WARN("shm_open of peer %d segment %s failed: %s", peer, c->name, strerror(errno));
    res = papcclSystemError;
    goto out_free;
  }
  size_t bytes = segBytes(st);
  struct stat sb;
  if (fstat(fd, &sb) != 0 || (size_t)sb.st_size != bytes) {
    PAP_WARN(
        "peer %d segment %s has %lld bytes, expected %zu (different PAPCCL_SHM_* or "
        "PAPCCL_FLAT_MAX_BYTES settings on the ranks?)",
        peer, c->name, (long long)sb.st_size, bytes);
    close(fd);
    res = papcclInvalidUsage;
    goto out_free;
  }
  void* base = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (base == MAP_FAILED) {
    PAP_WARN("mmap of peer %d segment failed: %s", peer, strerror(errno));
    close(fd);
    res = papcclSystemError;
    goto out_free;
  }
  c->peerSeg.base = base;
  c->peerSeg.bytes = bytes;
  segLayout(&c->peerSeg, st);
  struct shmHeader* h = c->peerSeg.hdr;
  if (papShmCheckHeader(h, st->nranks, peer) != 0) {
    PAP_WARN("peer %d segment %s is not a papccl segment of this communicator", peer, c->name);
    close(fd);
    res = papcclInternalError;
    goto out_unmap;
  }
  if (st->peerFds[peer] >= 0) close(st->peerFds[peer]);
  st->peerFds[peer] = fd; /* asks after the peer's life lock (shmPeerAlive) */
  /* The last local peer to map a segment unlinks it: nothing is left in /dev/shm even if a
   * rank crashes later. */
  uint32_t n = atomic_fetch_add_explicit(&h->mapped, 1, memory_order_acq_rel) + 1;
  if ((int)n == st->nlocal - 1) shm_unlink(c->name);

  c->outFifo = &c->peerSeg.fifos[st->rank];
  c->outMeta = c->peerSeg.metas + (size_t)st->rank * st->nslots;
  c->outData = c->peerSeg.data + (size_t)st->rank * st->nslots * st->slotSize;
  c->inFifo = &st->self.fifos[peer];
  c->inMeta = st->self.metas + (size_t)peer * st->nslots;
  c->inData = st->self.data + (size_t)peer * st->nslots * st->slotSize;
  for (int i = 0; i < SHM_REQS_PER_CONN; i++) {
    c->reqs[i].conn = c;
    c->reqs[i].next = c->freeList;
    c->freeList = &c->reqs[i];
  }
  st->conns[peer] = c;
  *connOut = c;
  return papcclSuccess;

out_unmap:
  munmap(base, bytes);
out_free:
  free(c);
  return res;
}

static papcclResult_t shmReady(void* state) {
  struct shmState* st = (struct shmState*)state;
  if (!st->unlinked) {
    shm_unlink(st->name); /* ENOENT when the last peer already did it */
    st->unlinked = 1;
  }
  return papcclSuccess;
}

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

static void progressSends(struct papConn* c);
static papcclResult_t progressRecvs(struct papConn* c);

static struct papReq* reqGet(struct papConn* c) {
  struct papReq* r = c->freeList;
  if (r == NULL) return NULL;
  c->freeList = r->next;
  memset(r, 0, sizeof(*r));
  r->conn = c;
  return r;
}

static papcclResult_t shmIsend(struct papConn* c, const void* buf, size_t bytes, int memType,
                               uint64_t tag, struct papReq** reqOut) {
  if (memType != PAP_MEM_HOST && memType != PAP_MEM_HOST_PINNED) {
    PAP_WARN("shm transport: device memory is not supported by this build");
    return papcclInvalidUsage;
  }
  struct papReq* r = reqGet(c);
  *reqOut = r;
  if (r == NULL) return papcclSuccess;
  r->kind = REQ_SEND;
  r->sbuf = (const char*)buf;
  r->bytes = bytes;
  r->tag = tag;
  if (c->sendTail)
    c->sendTail->next = r;
  else
    c->sendHead = r;
  c->sendTail = r;
  progressSends(c); /* push what fits now: the common small message completes here */
  return papcclSuccess;
}

static papcclResult_t shmIrecv(struct papConn* c, void* buf, size_t bytes, int memType,
                               uint64_t tag, const struct papRecvSink* sink,
                               struct papReq** reqOut) {
  if (memType != PAP_MEM_HOST && memType != PAP_MEM_HOST_PINNED) {
    PAP_WARN("shm transport: device memory is not supported by this build");
    return papcclInvalidUsage;
  }
  struct papReq* r = reqGet(c);
  *reqOut = r;
  if (r == NULL) return papcclSuccess;
  r->kind = REQ_RECV;
  r->rbuf = (char*)buf;
  r->bytes = bytes;
  r->tag = tag;
  if (sink) {
    r->sink = *sink;
    r->hasSink = 1;
  }
  if (c->recvTail)
    c->recvTail->next = r;
  else
    c->recvHead = r;
  c->recvTail = r;
  return progressRecvs(c);
}

/* Pushes queued sends into the peer's FIFO while credits last. */
static void progressSends(struct papConn* c) {
  struct shmState* st = c->st;
  uint64_t head = atomic_load_explicit(&c->outFifo->head, memory_order_relaxed);
  uint64_t tail = atomic_load_explicit(&c->outFifo->tail, memory_order_acquire);
  int pushed = 0;
  while (c->sendHead) {
    struct papReq* r = c->sendHead;
    while (r->off < r->bytes || !r->started) {
      if (head - tail >= st->nslots) {
        tail = atomic_load_explicit(&c->outFifo->tail, memory_order_acquire);
        if (head - tail >= st->nslots) goto out;
      }
      uint32_t slot = (uint32_t)(head % st->nslots);
      size_t n = r->bytes - r->off;
      if (n > st->slotSize) n = st->slotSize;
      memcpy(c->outData + (size_t)slot * st->slotSize, r->sbuf + r->off, n);
      c->outMeta[slot].tag = r->tag;
      c->outMeta[slot].bytes = (uint32_t)n;
      head++;
      /* Release partner: the acquire load of head in progressRecvs (peer side). */
      atomic_store_explicit(&c->outFifo->head, head, memory_order_release);
      r->off += n;
      r->started = 1;
      pushed = 1;
    }
    r->done = 1;
    c->sendHead = r->next;
    if (c->sendHead == NULL) c->sendTail = NULL;
  }
out:
  if (pushed) ringBoard(c->peerSeg.board);
}

int64_t papShmTakeRecord(const void* meta, const char* slot, uint32_t slotSize, uint64_t wantTag,
                         size_t off, size_t total, char* rbuf, const struct papRecvSink* sink,
                         uint64_t* tagOut, uint32_t* bytesOut) {
  /* Read once: a broken peer may change the record while we look at it. */
  const volatile struct shmMeta* m = (const volatile struct shmMeta*)meta;
  uint64_t tag = m->tag;
  uint32_t bytes = m->bytes;
  *tagOut = tag;
  *bytesOut = bytes;
  if (tag != wantTag || bytes > slotSize || off + bytes > total) return -1;
  if (bytes) {
    if (sink)
      sink->fn(sink->arg, off, slot, bytes);
    else
      memcpy(rbuf + off, slot, bytes);
  }
  return (int64_t)bytes;
}

static papcclResult_t progressRecvs(struct papConn* c) {
  struct shmState* st = c->st;
  uint64_t tail = atomic_load_explicit(&c->inFifo->tail, memory_order_relaxed);
  uint64_t head = atomic_load_explicit(&c->inFifo->head, memory_order_acquire);
  papcclResult_t res = papcclSuccess;
  int consumed = 0;
  while (c->recvHead) {
    struct papReq* r = c->recvHead;
    while (r->off < r->bytes || !r->started) {
      if (tail == head) {
        head = atomic_load_explicit(&c->inFifo->head, memory_order_acquire);
        if (tail == head) goto out;
      }
      uint32_t slot = (uint32_t)(tail % st->nslots);
      uint64_t mtag;
      uint32_t mbytes;
      int64_t n = papShmTakeRecord(&c->inMeta[slot], c->inData + (size_t)slot * st->slotSize,
                                   st->slotSize, r->tag, r->off, r->bytes, r->rbuf,
                                   r->hasSink ? &r->sink : NULL, &mtag, &mbytes);
      if (n < 0) {
        PAP_WARN(
            "shm: message from peer %d does not match the posted receive (tag %#llx vs "
            "%#llx, %u bytes at offset %zu of %zu, slots of %u)",
            c->peer, (unsigned long long)mtag, (unsigned long long)r->tag, mbytes, r->off, r->bytes,
            st->slotSize);
        res = papcclInternalError;
        goto out;
      }
      r->off += (size_t)n;
      r->started = 1;
      tail++;
      /* Release partner: the acquire load of tail in progressSends (peer side). */
      atomic_store_explicit(&c->inFifo->tail, tail, memory_order_release);
      consumed = 1;
    }
    r->done = 1;
    c->recvHead = r->next;
    if (c->recvHead == NULL) c->recvTail = NULL;
  }
out:
  if (consumed) ringBoard(c->peerSeg.board);
  return res;
}

static int shmProbe(struct papConn* c, uint64_t tag) {
  if (c->recvHead != NULL) return 0; /* the next piece belongs to a posted receive */
  uint64_t tail = atomic_load_explicit(&c->inFifo->tail, memory_order_relaxed);
  uint64_t head = atomic_load_explicit(&c->inFifo->head, memory_order_acquire);
  if (tail == head) return 0;
  const volatile struct shmMeta* m = &c->inMeta[tail % c->st->nslots];
  return m->tag == tag;
}

static papcclResult_t shmTest(struct papReq* r, int* doneOut, size_t* sizeOut) {
  struct papConn* c = r->conn;
  if (!r->done) {
    if (r->kind == REQ_SEND)
      progressSends(c);
    else
      PAP_CHECK(progressRecvs(c));
  }
  *doneOut = r->done;
  if (r->done) {
    if (sizeOut) *sizeOut = r->off;
    r->next = c->freeList;
    c->freeList = r;
  }
  return papcclSuccess;
}

static papcclResult_t shmProgress(void* state) {
  (void)state; /* every shm transfer advances in test(); nothing runs in the background */
  return papcclSuccess;
}

/* A peer whose segment is mapped is alive while its life lock is held or while it has left in
 * good order; its lock let go without that means its process is gone (see lifeHold). */
static int shmPeerAlive(void* state, int peer) {
  struct shmState* st = (struct shmState*)state;
  if (peer < 0 || peer >= st->nranks || peer == st->rank) return 1;
  struct papConn* c = st->conns[peer];
  if (c == NULL || c->peerSeg.hdr == NULL || st->peerFds[peer] < 0) return 1;
  struct shmHeader* h = c->peerSeg.hdr;
  if (!atomic_load_explicit(&h->lifeLock, memory_order_relaxed)) return 1; /* nothing to ask */
  if (atomic_load_explicit(&h->departed, memory_order_acquire)) return 1;
  struct flock fl;
  if (lifeLockOp(st->peerFds[peer], F_OFD_GETLK, &fl, F_RDLCK) != 0) return 1;
  if (fl.l_type != F_UNLCK) return 1;
  /* The lock goes at the end of a comm too, after departed is set: read it again. */
  return atomic_load_explicit(&h->departed, memory_order_acquire) != 0;
}

/* A local peer in another process that exited without leaving the comm: every survivor sees
 * it at its next health check, also one that waits on another peer (that peer may wait on
 * the dead one, or fail and leave). */
static int shmDeadPeer(void* state) {
  struct shmState* st = (struct shmState*)state;
  for (int p = 0; p < st->nranks; p++)
    if (p != st->rank && !shmPeerAlive(state, p)) return p;
  return -1;
}

static void shmDepart(void* state) {
  struct shmState* st = (struct shmState*)state;
  atomic_store_explicit(&st->self.hdr->departed, 1, memory_order_release);
}

static uint32_t shmWaitToken(void* state) {
  struct shmBoard* b = ((struct shmState*)state)->self.board;
  uint32_t tok = atomic_load_explicit(&b->bell, memory_order_acquire);
  atomic_fetch_add_explicit(&b->sleepers, 1, memory_order_seq_cst);
#ifndef SHM_TSAN /* see SHM_TSAN: the RMW above is enough there */
  atomic_thread_fence(memory_order_seq_cst);
#endif
  return tok;
}

static void shmWait(void* state, uint32_t token, int64_t timeoutNs) {
  struct shmState* st = (struct shmState*)state;
  struct shmBoard* b = st->self.board;
  if (timeoutNs > 0 && !papAborted(st->abortFlag))
    papFutexWait((uint32_t*)&b->bell, token, timeoutNs);
  atomic_fetch_sub_explicit(&b->sleepers, 1, memory_order_relaxed);
}

static void shmWake(void* state) {
  struct shmBoard* b = ((struct shmState*)state)->self.board;
  atomic_fetch_add_explicit(&b->bell, 1, memory_order_seq_cst);
  papFutexWakeAll((uint32_t*)&b->bell);
}

static void* shmStaging(void* state, int r, size_t* sizeOut) {
  struct shmState* st = (struct shmState*)state;
  if (sizeOut) *sizeOut = st->stagingSize;
  if (r == st->rank) return st->self.staging;
  if (r < 0 || r >= st->nranks || st->conns[r] == NULL) return NULL;
  return st->conns[r]->peerSeg.staging;
}

/* The board lives in rank 0's segment: our own, or rank 0's as mapped at connect. */
static papcclResult_t shmBoardAtomic(void* state, size_t idx, int op, uint64_t val, uint64_t cmp,
                                     uint64_t* oldOut) {
  struct shmState* st = (struct shmState*)state;
  struct shmSeg* seg = st->rank == 0 ? &st->self : st->conns[0] ? &st->conns[0]->peerSeg : NULL;
  if (seg == NULL || idx >= st->boardWords) {
    PAP_WARN("shm: arrival board word %zu is out of reach (rank 0 %s)", idx,
             seg ? "mapped" : "not mapped");
    return papcclInternalError;
  }
  _Atomic uint64_t* w = &seg->pap[idx];
  uint64_t old = 0;
  switch (op) {
  case PAP_BOARD_LOAD:
    old = atomic_load(w);
    break;
  case PAP_BOARD_STORE:
    atomic_store(w, val);
    break;
  case PAP_BOARD_STORE_RELEASE:
    atomic_store_explicit(w, val, memory_order_release);
    break;
  case PAP_BOARD_FADD:
    old = atomic_fetch_add(w, val);
    break;
  case PAP_BOARD_CAS:
    old = cmp;
    atomic_compare_exchange_strong(w, &old, val);
    break;
  default:
    PAP_WARN("shm: unknown arrival board operation %d", op);
    return papcclInternalError;
  }
  if (oldOut) *oldOut = old;
  return papcclSuccess;
}

static void* shmFlat(void* state, int r) {
  struct shmState* st = (struct shmState*)state;
  if (st->flatBytes == 0 || r < 0 || r >= st->nranks) return NULL;
  if (r == st->rank) return st->self.flat;
  return st->conns[r] ? st->conns[r]->peerSeg.flat : NULL;
}

static void shmNotify(void* state, int peer) {
  struct shmState* st = (struct shmState*)state;
  if (peer == st->rank) {
    shmWake(state);
    return;
  }
  if (peer < 0 || peer >= st->nranks || st->conns[peer] == NULL) return;
  ringBoard(st->conns[peer]->peerSeg.board);
}

static void shmNotifyAll(void* state) {
  struct shmState* st = (struct shmState*)state;
#ifndef SHM_TSAN
  atomic_thread_fence(memory_order_seq_cst); /* as ringBoard's, once for all the peers */
#endif
  for (int p = 0; p < st->nranks; p++) {
    if (p == st->rank || st->conns[p] == NULL) continue;
    struct shmBoard* b = st->conns[p]->peerSeg.board;
#ifdef SHM_TSAN
    if (atomic_fetch_add_explicit(&b->sleepers, 0, memory_order_seq_cst) == 0) continue;
#else
    if (atomic_load_explicit(&b->sleepers, memory_order_relaxed) == 0) continue;
#endif
    atomic_fetch_add_explicit(&b->bell, 1, memory_order_seq_cst);
    papFutexWakeAll((uint32_t*)&b->bell);
  }
}

static void shmClose(struct papConn* c) {
  if (c == NULL) return;
  /* The peer's segment name is not ours to unlink: its owner or its last mapper does. */
  c->st->conns[c->peer] = NULL;
  if (c->st->peerFds != NULL && c->st->peerFds[c->peer] >= 0) close(c->st->peerFds[c->peer]);
  if (c->st->peerFds != NULL) c->st->peerFds[c->peer] = -1;
  munmap(c->peerSeg.base, c->peerSeg.bytes);
  free(c);
}

static void shmFinalize(void* state) {
  struct shmState* st = (struct shmState*)state;
  if (st == NULL) return;
  for (int p = 0; p < st->nranks; p++)
    shmClose(st->conns[p]);
  if (!st->unlinked) shm_unlink(st->name);
  /* The comm ends (destroy or abort): peers must not take the released lock for a death. */
  atomic_store_explicit(&st->self.hdr->departed, 1, memory_order_release);
  lifeRelease(st);
  munmap(st->self.base, st->self.bytes);
  closePeerFds(st);
  free(st->conns);
  free(st);
}

const struct papTransportOps papTransportShm = {
    .name = "shm",
    .canConnect = shmCanConnect,
    .init = shmInit,
    .listen = shmListen,
    .connect = shmConnect,
    .ready = shmReady,
    .isend = shmIsend,
    .irecv = shmIrecv,
    .probe = shmProbe,
    .test = shmTest,
    .progress = shmProgress,
    .peerAlive = shmPeerAlive,
    .deadPeer = shmDeadPeer,
    .depart = shmDepart,
    .waitToken = shmWaitToken,
    .wait = shmWait,
    .wake = shmWake,
    .staging = shmStaging,
    .boardAtomic = shmBoardAtomic,
    .flat = shmFlat,
    .notify = shmNotify,
    .notifyAll = shmNotifyAll,
    .close = shmClose,
    .finalize = shmFinalize,
};
