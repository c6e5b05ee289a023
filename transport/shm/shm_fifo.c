/* SPDX-License-Identifier: Apache-2.0 */
/* Shared-memory transport: messages. A send copies slot-sized pieces into this rank's FIFO
 * in the receiver's segment and rings the receiver; a receive takes them out of the peer's
 * FIFO in this rank's segment, checking each record's tag. */
#include <string.h>

#include "check.h"
#include "log.h"
#include "shm/shm_state.h"

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

papcclResult_t papShmIsend(struct papConn* c, const void* buf, size_t bytes, int memType,
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

papcclResult_t papShmIrecv(struct papConn* c, void* buf, size_t bytes, int memType, uint64_t tag,
                           const struct papRecvSink* sink, struct papReq** reqOut) {
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

int papShmProbe(struct papConn* c, uint64_t tag) {
  if (c->recvHead != NULL) return 0; /* the next piece belongs to a posted receive */
  uint64_t tail = atomic_load_explicit(&c->inFifo->tail, memory_order_relaxed);
  uint64_t head = atomic_load_explicit(&c->inFifo->head, memory_order_acquire);
  if (tail == head) return 0;
  const volatile struct shmMeta* m = &c->inMeta[tail % c->st->nslots];
  return m->tag == tag;
}

papcclResult_t papShmTest(struct papReq* r, int* doneOut, size_t* sizeOut) {
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
