/* SPDX-License-Identifier: Apache-2.0 */
/* Shared-memory transport: per-rank POSIX segment with inbound FIFOs, board line, staging.
 * This file: the segment (made, mapped by the peers, ended), what peers use in place (the
 * doorbell, the arrival board, staging, flat areas) and the ops table; messages are in
 * shm_fifo.c, liveness in shm_life.c. */
#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "alloc.h"
#include "check.h"
#include "log.h"
#include "param.h"
#include "shm/shm_state.h"
#include "wait.h"

static size_t alignUp(size_t v, size_t a) {
  return (v + a - 1) & ~(a - 1);
}

static size_t segBytes(const struct shmState* st) {
  size_t b = sizeof(struct shmHeader) + sizeof(struct shmBoard);
  b += (size_t)st->base.ctx.nranks * sizeof(struct shmFifo);
  b = alignUp(b + (size_t)st->base.ctx.nranks * st->nslots * sizeof(struct shmMeta), 64);
  b = alignUp(b + st->base.ctx.boardWords * sizeof(uint64_t), 64);
  b = alignUp(b + st->base.ctx.flatBytes, 4096);
  b += (size_t)st->base.ctx.nranks * st->nslots * st->slotSize;
  b = alignUp(b, 4096) + alignUp(st->stagingSize, 4096);
  return b;
}

/* Every segment of the comm has the same layout (the same settings on every rank). */
static void segLayout(struct shmSeg* s, const struct shmState* st) {
  int nranks = st->base.ctx.nranks;
  uint32_t nslots = st->nslots;
  char* p = (char*)s->base;
  s->hdr = (struct shmHeader*)p;
  s->board = (struct shmBoard*)(p + sizeof(struct shmHeader));
  s->fifos = (struct shmFifo*)(p + sizeof(struct shmHeader) + sizeof(struct shmBoard));
  s->metas = (struct shmMeta*)(s->fifos + nranks);
  size_t off = alignUp((size_t)((char*)(s->metas + (size_t)nranks * nslots) - p), 64);
  s->pap = (_Atomic uint64_t*)(p + off);
  off = alignUp(off + st->base.ctx.boardWords * sizeof(uint64_t), 64);
  s->flat = p + off;
  off = alignUp(off + st->base.ctx.flatBytes, 4096);
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
  papTransportBaseInit(&st->base, ctx);
  st->selfFd = -1;
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

  segName(st->name, sizeof(st->name), st->base.key, st->base.ctx.rank);
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
  int locked =
      lockFd >= 0 && papShmLifeHold(st, lockFd) == 0; /* keeps lockFd for the comm's life */
  if (lockFd >= 0 && !locked) close(lockFd);
  st->self.base = base;
  st->self.bytes = bytes;
  st->base.heldBytes = bytes; /* peers map it too: theirs to count as imported, not held */
  segLayout(&st->self, st);
  struct shmHeader* h = st->self.hdr;
  h->version = SHM_VERSION;
  h->nranks = (uint32_t)st->base.ctx.nranks;
  h->slotSize = st->slotSize;
  h->nslots = st->nslots;
  h->stagingSize = st->stagingSize;
  h->totalBytes = bytes;
  h->ownerRank = st->base.ctx.rank;
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
           st->base.ctx.rank, st->name, bytes, st->nslots, st->slotSize);
  *stateOut = st;
  return papcclSuccess;

out_unlink:
  if (fd >= 0) close(fd);
  shm_unlink(st->name);
out_free:
  papShmLifeRelease(st);
  papShmClosePeerFds(st);
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
  if (peer < 0 || peer >= st->base.ctx.nranks || peer == st->base.ctx.rank) {
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
  if (papShmCheckHeader(h, st->base.ctx.nranks, peer) != 0) {
    PAP_WARN("peer %d segment %s is not a papccl segment of this communicator", peer, c->name);
    close(fd);
    res = papcclInternalError;
    goto out_unmap;
  }
  if (st->peerFds[peer] >= 0) close(st->peerFds[peer]);
  st->peerFds[peer] = fd; /* asks after the peer's life lock (papShmPeerAlive) */
  /* The last local peer to map a segment unlinks it: nothing is left in /dev/shm even if a
   * rank crashes later. */
  uint32_t n = atomic_fetch_add_explicit(&h->mapped, 1, memory_order_acq_rel) + 1;
  if ((int)n == st->nlocal - 1) shm_unlink(c->name);

  c->outFifo = &c->peerSeg.fifos[st->base.ctx.rank];
  c->outMeta = c->peerSeg.metas + (size_t)st->base.ctx.rank * st->nslots;
  c->outData = c->peerSeg.data + (size_t)st->base.ctx.rank * st->nslots * st->slotSize;
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

static papcclResult_t shmProgress(void* state) {
  (void)state; /* every shm transfer advances in test(); nothing runs in the background */
  return papcclSuccess;
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
  if (timeoutNs > 0 && !papAborted(st->base.ctx.abortFlag))
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
  if (r == st->base.ctx.rank) return st->self.staging;
  if (r < 0 || r >= st->base.ctx.nranks || st->conns[r] == NULL) return NULL;
  return st->conns[r]->peerSeg.staging;
}

/* The board lives in rank 0's segment: our own, or rank 0's as mapped at connect. */
static papcclResult_t shmBoardAtomic(void* state, size_t idx, int op, uint64_t val, uint64_t cmp,
                                     uint64_t* oldOut) {
  struct shmState* st = (struct shmState*)state;
  struct shmSeg* seg = st->base.ctx.rank == 0 ? &st->self
                       : st->conns[0]         ? &st->conns[0]->peerSeg
                                              : NULL;
  if (seg == NULL || idx >= st->base.ctx.boardWords) {
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
  if (st->base.ctx.flatBytes == 0 || r < 0 || r >= st->base.ctx.nranks) return NULL;
  if (r == st->base.ctx.rank) return st->self.flat;
  return st->conns[r] ? st->conns[r]->peerSeg.flat : NULL;
}

static void shmNotify(void* state, int peer) {
  struct shmState* st = (struct shmState*)state;
  if (peer == st->base.ctx.rank) {
    shmWake(state);
    return;
  }
  if (peer < 0 || peer >= st->base.ctx.nranks || st->conns[peer] == NULL) return;
  ringBoard(st->conns[peer]->peerSeg.board);
}

static void shmNotifyAll(void* state) {
  struct shmState* st = (struct shmState*)state;
#ifndef SHM_TSAN
  atomic_thread_fence(memory_order_seq_cst); /* as ringBoard's, once for all the peers */
#endif
  for (int p = 0; p < st->base.ctx.nranks; p++) {
    if (p == st->base.ctx.rank || st->conns[p] == NULL) continue;
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
  for (int p = 0; p < st->base.ctx.nranks; p++)
    shmClose(st->conns[p]);
  if (!st->unlinked) shm_unlink(st->name);
  /* A comm that did not leave in good order (live->depart, at the destroy of a healthy comm)
   * ends as failed: peers still waiting on this rank fail at once instead of at their
   * timeout, and do not take it for a death of its own (papShmDeadPeer). */
  uint32_t notYet = PAP_SHM_LEFT_NOT;
  atomic_compare_exchange_strong_explicit(&st->self.hdr->departed, &notYet, PAP_SHM_LEFT_FAILED,
                                          memory_order_acq_rel, memory_order_acquire);
  papShmLifeRelease(st);
  munmap(st->self.base, st->self.bytes);
  papShmClosePeerFds(st);
  free(st->conns);
  free(st);
}

static const struct papMsgOps shmMsg = {
    .isend = papShmIsend,
    .irecv = papShmIrecv,
    .probe = papShmProbe,
    .test = papShmTest,
    .progress = shmProgress,
};
static const struct papWakeOps shmWakeOps = {
    .waitToken = shmWaitToken,
    .wait = shmWait,
    .wake = shmWake,
    .notify = shmNotify,
};
static const struct papLiveOps shmLive = {
    .peerAlive = papShmPeerAlive,
    .deadPeer = papShmDeadPeer,
    .depart = papShmDepart,
};
static const struct papBoardOps shmBoard = {
    .atomic = shmBoardAtomic,
};
static const struct papLocalOps shmLocal = {
    .staging = shmStaging,
    .flat = shmFlat,
    .notifyAll = shmNotifyAll,
};

const struct papTransportOps papTransportShm = {
    .name = "shm",
    .caps = {.anySource = 1},
    .msg = &shmMsg,
    .wake = &shmWakeOps,
    .live = &shmLive,
    .board = &shmBoard,
    .local = &shmLocal,
    .canConnect = shmCanConnect,
    .init = shmInit,
    .listen = shmListen,
    .connect = shmConnect,
    .ready = shmReady,
    .close = shmClose,
    .finalize = shmFinalize,
};
