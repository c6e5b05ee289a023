/* SPDX-License-Identifier: Apache-2.0 */
/* Plan building and execution: chunk steps with dependencies over the transport. */
#include "engine.h"

#include <stdlib.h>
#include <string.h>
#if defined(__x86_64__)
#include <emmintrin.h>
#endif

#include "alloc.h"
#include "check.h"
#include "fault.h"
#include "log.h"
#include "param.h"

#define PLAN_FAILED_CAP (-1)
#define PLAN_BASE_CAP 256 /* steps of a new plan array (it doubles as plans grow) */

papcclResult_t papEngineInit(struct papEngine* e, int rank, int nranks,
                             const struct papTransportOps* tops, void* tstate,
                             struct papConn** conns, const volatile int* abortFlag) {
  memset(e, 0, sizeof(*e));
  e->rank = rank;
  e->nranks = nranks;
  e->tops = tops;
  e->tstate = tstate;
  e->conns = conns;
  e->abortFlag = abortFlag;
  int64_t w = papParamPipelineDepth();
  e->window = (int)(w < 8 ? 8 : w > 65536 ? 65536 : w);
  PAP_CHECK(papCalloc(&e->lastSend, (size_t)nranks));
  PAP_CHECK(papCalloc(&e->lastRecv, (size_t)nranks));
  PAP_CHECK(papCalloc(&e->sendN, (size_t)nranks));
  PAP_CHECK(papCalloc(&e->recvN, (size_t)nranks));
  e->cap = PLAN_BASE_CAP;
  PAP_CHECK(papCalloc(&e->steps, (size_t)e->cap));
  /* Published-chunk slots: as many chunk-sized slots as the staging area holds. */
  size_t stageBytes = 0;
  if (tops->local && tops->local->staging(tstate, rank, &stageBytes) != NULL) {
    int64_t chunk = papParamChunkSize();
    size_t slotBytes = ((size_t)(chunk < 64 ? 64 : chunk) + 63) & ~(size_t)63;
    size_t nslots = stageBytes / (slotBytes + sizeof(struct papStageSlot));
    int all = 1; /* every peer's staging area must be mapped (all ranks on this host) */
    for (int p = 0; p < nranks; p++)
      all &= tops->local->staging(tstate, p, NULL) != NULL;
    if (nslots >= 2 && all) {
      e->stageSlots = (int)(nslots > 4096 ? 4096 : nslots);
      e->stageSlotBytes = slotBytes;
    }
  }
  papPlanReset(e);
  return papcclSuccess;
}

void papEngineFree(struct papEngine* e) {
  for (int i = 0; i < e->nscratch; i++)
    free(e->scratch[i].ptr);
  free(e->scratch);
  free(e->steps);
  free(e->lastSend);
  free(e->lastRecv);
  free(e->sendN);
  free(e->recvN);
  memset(e, 0, sizeof(*e));
}

size_t papEngineHeldBytes(const struct papEngine* e) {
  size_t b = e->steps != NULL && e->cap > 0 ? (size_t)e->cap * sizeof(struct papStep) : 0;
  for (int i = 0; i < e->nscratch; i++)
    b += e->scratch[i].bytes;
  return b;
}

void papEngineRelease(struct papEngine* e) {
  for (int i = 0; i < e->nscratch; i++)
    free(e->scratch[i].ptr);
  free(e->scratch);
  e->scratch = NULL;
  e->nscratch = 0;
  e->scratchUsed = 0;
  if (e->cap != PLAN_FAILED_CAP) {
    free(e->steps);
    e->steps = NULL;
    e->cap = 0;
    e->nsteps = 0;
    e->first = 0;
  }
}

papcclResult_t papEngineRestore(struct papEngine* e) {
  if (e->steps != NULL || e->cap == PLAN_FAILED_CAP) return papcclSuccess;
  PAP_CHECK(papCalloc(&e->steps, PLAN_BASE_CAP));
  e->cap = PLAN_BASE_CAP;
  papPlanReset(e);
  return papcclSuccess;
}

void papPlanReset(struct papEngine* e) {
  /* A failed plan may leave device work posted: it must be finished before the op's buffers
   * go back to the caller (or its stream); then its handles go back to the device. */
  if (e->devPosted > 0 && e->dev.ops->quiesce) e->dev.ops->quiesce(e->dev.ctx);
  for (int i = e->first; e->devPosted > 0 && e->steps && i < e->nsteps; i++) {
    struct papStep* s = &e->steps[i];
    if ((s->kind == PAP_STEP_DCOPY || s->kind == PAP_STEP_DREDUCE) && s->devReq) {
      e->dev.ops->drop(e->dev.ctx, s);
      s->devReq = NULL;
      e->devPosted--;
    }
  }
  e->devPosted = 0;
  e->ipcEnd = -1;
  e->nsteps = 0;
  e->first = 0;
  e->scanAll = 0;
  e->pending = 0;
  e->lastPublish = -1;
  e->scratchUsed = 0;
  for (int p = 0; p < e->nranks; p++) {
    e->lastSend[p] = -1;
    e->lastRecv[p] = -1;
  }
}

void papPlanBeginOp(struct papEngine* e, uint64_t seq, size_t resultBytes) {
  e->curSeq = seq;
  e->streamFinal = resultBytes >= (uint64_t)papParamStreamMinBytes();
  memset(e->sendN, 0, sizeof(uint32_t) * (size_t)e->nranks);
  memset(e->recvN, 0, sizeof(uint32_t) * (size_t)e->nranks);
}

int papPlanFailed(const struct papEngine* e) {
  return e->cap == PLAN_FAILED_CAP;
}

/* Marks the plan being built as failed (papPlanFailed); its steps are dropped. */
static void planFail(struct papEngine* e) {
  free(e->steps);
  e->steps = NULL;
  e->cap = PLAN_FAILED_CAP;
}

static struct papStep* newStep(struct papEngine* e, int kind, int dep0, int dep1, int* idxOut) {
  if (e->cap == PLAN_FAILED_CAP) return NULL;
  if (e->nsteps == e->cap) {
    size_t ncap = e->cap > 0 ? (size_t)e->cap * 2 : PLAN_BASE_CAP; /* 0: released */
    struct papStep* s = (struct papStep*)realloc(e->steps, ncap * sizeof(*s));
    if (s == NULL) {
      PAP_WARN("out of memory growing a plan to %zu steps", ncap);
      planFail(e);
      return NULL;
    }
    e->steps = s;
    e->cap = (int)ncap;
  }
  int idx = e->nsteps++;
  struct papStep* s = &e->steps[idx];
  memset(s, 0, sizeof(*s));
  s->kind = (uint8_t)kind;
  s->dep[0] = dep0;
  s->dep[1] = dep1;
  s->prevQ = -1;
  s->peer = -1;
  *idxOut = idx;
  return s;
}

int papStepSend(struct papEngine* e, int peer, const void* src, size_t bytes, int dep0, int dep1) {
  int idx;
  struct papStep* s = newStep(e, PAP_STEP_SEND, dep0, dep1, &idx);
  if (s == NULL) return -1;
  s->peer = peer;
  s->src = (const char*)src;
  s->bytes = bytes;
  uint32_t k = e->sendN[peer]++;
  s->tag = (e->curSeq << 32) | (e->tagSalt ? e->tagSalt | (k & 0xffffu) : k);
  s->prevQ = e->lastSend[peer];
  e->lastSend[peer] = idx;
  return idx;
}

static int planRecvCommon(struct papEngine* e, int kind, int peer, void* dst, const void* src,
                          size_t bytes, papcclDataType_t dtype, enum papRedKind red, int dep0,
                          int dep1) {
  int idx;
  struct papStep* s = newStep(e, kind, dep0, dep1, &idx);
  if (s == NULL) return -1;
  s->peer = peer;
  s->dst = (char*)dst;
  s->src = (const char*)src;
  s->bytes = bytes;
  uint32_t k = e->recvN[peer]++;
  s->tag = (e->curSeq << 32) | (e->tagSalt ? e->tagSalt | (k & 0xffffu) : k);
  s->dtype = (uint8_t)dtype;
  s->red = (uint8_t)red;
  s->prevQ = e->lastRecv[peer];
  e->lastRecv[peer] = idx;
  return idx;
}

int papStepRecv(struct papEngine* e, int peer, void* dst, size_t bytes, int dep0, int dep1) {
  return planRecvCommon(e, PAP_STEP_RECV, peer, dst, NULL, bytes, papcclInt8, PAP_RED_SUM, dep0,
                        dep1);
}

int papStepRecvReduce(struct papEngine* e, int peer, void* dst, const void* src, size_t bytes,
                      papcclDataType_t dtype, enum papRedKind red, int dep0, int dep1) {
  return planRecvCommon(e, PAP_STEP_RECV_REDUCE, peer, dst, src, bytes, dtype, red, dep0, dep1);
}

/* A local step: dst = a (OP b). */
static int planLocal(struct papEngine* e, int kind, void* dst, const void* a, const void* b,
                     size_t bytes, papcclDataType_t dtype, enum papRedKind red, int dep0,
                     int dep1) {
  int idx;
  struct papStep* s = newStep(e, kind, dep0, dep1, &idx);
  if (s == NULL) return -1;
  s->dst = (char*)dst;
  s->src = (const char*)a;
  s->src2 = (const char*)b;
  s->bytes = bytes;
  s->dtype = (uint8_t)dtype;
  s->red = (uint8_t)red;
  return idx;
}

int papStepCopy(struct papEngine* e, void* dst, const void* src, size_t bytes, int dep0, int dep1) {
  return planLocal(e, PAP_STEP_COPY, dst, src, NULL, bytes, papcclInt8, PAP_RED_SUM, dep0, dep1);
}

int papStepReduce(struct papEngine* e, void* dst, const void* a, const void* b, size_t bytes,
                  papcclDataType_t dtype, enum papRedKind red, int dep0, int dep1) {
  return planLocal(e, PAP_STEP_REDUCE, dst, a, b, bytes, dtype, red, dep0, dep1);
}

static int planDev(struct papEngine* e, int kind, void* dst, const void* a, const void* b,
                   size_t bytes, papcclDataType_t dtype, enum papRedKind red, int dep0, int dep1) {
  if (e->dev.ops == NULL) {
    PAP_WARN("internal error: a device step on a communicator without device support");
    if (e->cap != PLAN_FAILED_CAP) planFail(e);
    return -1;
  }
  return planLocal(e, kind, dst, a, b, bytes, dtype, red, dep0, dep1);
}

int papStepDevCopy(struct papEngine* e, void* dst, const void* src, size_t bytes, int dep0,
                   int dep1) {
  return planDev(e, PAP_STEP_DCOPY, dst, src, NULL, bytes, papcclInt8, PAP_RED_SUM, dep0, dep1);
}

int papStepDevReduce(struct papEngine* e, void* dst, const void* a, const void* b, size_t bytes,
                     papcclDataType_t dtype, enum papRedKind red, int dep0, int dep1) {
  return planDev(e, PAP_STEP_DREDUCE, dst, a, b, bytes, dtype, red, dep0, dep1);
}

int papStepJoin(struct papEngine* e, int dep0, int dep1) {
  if (dep0 < 0) return dep1;
  if (dep1 < 0) return dep0;
  return papStepCopy(e, NULL, NULL, 0, dep0, dep1);
}

int papStepPublish(struct papEngine* e, const void* src, size_t bytes, int slot, uint64_t tag,
                   int readers, int dep0) {
  int idx;
  struct papStep* s = newStep(e, PAP_STEP_PUBLISH, dep0, -1, &idx);
  if (s == NULL) return -1;
  s->src = (const char*)src;
  s->bytes = bytes;
  s->slot = slot;
  s->tag = tag;
  s->readers = readers;
  /* Publishes of one rank go in order: a slot is reused only after its previous chunk. */
  s->prevQ = e->lastPublish;
  e->lastPublish = idx;
  return idx;
}

int papStepFetch(struct papEngine* e, int owner, void* dst, size_t bytes, int slot, uint64_t tag,
                 int dep0, int dep1) {
  int idx;
  struct papStep* s = newStep(e, PAP_STEP_FETCH, dep0, dep1, &idx);
  if (s == NULL) return -1;
  s->peer = owner;
  s->dst = (char*)dst;
  s->bytes = bytes;
  s->slot = slot;
  s->tag = tag;
  return idx;
}

/* Slot control line and data of rank r's staging area. */
static inline struct papStageSlot* stageCtl(struct papEngine* e, int r, int slot, char** data) {
  char* base = (char*)e->tops->local->staging(e->tstate, r, NULL);
  if (base == NULL) return NULL;
  struct papStageSlot* ctl = (struct papStageSlot*)base;
  *data =
      base + sizeof(struct papStageSlot) * (size_t)e->stageSlots + (size_t)slot * e->stageSlotBytes;
  return &ctl[slot];
}

void papStepMarkFinal(struct papEngine* e, int idx) {
  if (e->streamFinal && idx >= 0 && idx < e->nsteps &&
      (e->steps[idx].kind == PAP_STEP_RECV || e->steps[idx].kind == PAP_STEP_FETCH))
    e->steps[idx].flags |= PAP_STEP_F_FINAL;
}

papcclResult_t papPlanScratch(struct papEngine* e, size_t bytes, void** ptrOut) {
  if (e->scratchUsed == e->nscratch) {
    struct papScratch* ns =
        (struct papScratch*)realloc(e->scratch, sizeof(*ns) * (size_t)(e->nscratch + 1));
    if (ns == NULL) {
      PAP_WARN("out of memory for the scratch table");
      return papcclSystemError;
    }
    e->scratch = ns;
    e->scratch[e->nscratch].ptr = NULL;
    e->scratch[e->nscratch].bytes = 0;
    e->nscratch++;
  }
  struct papScratch* sc = &e->scratch[e->scratchUsed];
  if (sc->bytes < bytes) {
    free(sc->ptr);
    sc->ptr = NULL;
    sc->bytes = 0;
    PAP_CHECK(papAlignedAlloc(&sc->ptr, bytes, "collective scratch"));
    sc->bytes = bytes;
  }
  e->scratchUsed++;
  *ptrOut = sc->ptr;
  return papcclSuccess;
}

/* The sink of a RECV_REDUCE step: reduce each piece as it leaves the transport. */
static void reduceSink(void* arg, size_t off, const void* piece, size_t bytes) {
  struct papStep* s = (struct papStep*)arg;
  size_t esz = papKernTypeSize((papcclDataType_t)s->dtype);
  papKernHostReduce(s->dst + off, s->src + off, piece, bytes / esz, (papcclDataType_t)s->dtype,
                    (enum papRedKind)s->red);
}

/* The sink of a final RECV: copy with non-temporal stores where the destination allows. */
static void streamCopySink(void* arg, size_t off, const void* piece, size_t bytes) {
  struct papStep* s = (struct papStep*)arg;
  char* dst = s->dst + off;
  const char* src = (const char*)piece;
#if defined(__x86_64__)
  size_t head = (16 - ((uintptr_t)dst & 15)) & 15;
  if (head > bytes) head = bytes;
  memcpy(dst, src, head);
  dst += head;
  src += head;
  bytes -= head;
  size_t n16 = bytes / 64 * 64;
  for (size_t i = 0; i < n16; i += 64) {
    __m128i a = _mm_loadu_si128((const __m128i*)(src + i));
    __m128i b = _mm_loadu_si128((const __m128i*)(src + i + 16));
    __m128i c = _mm_loadu_si128((const __m128i*)(src + i + 32));
    __m128i d = _mm_loadu_si128((const __m128i*)(src + i + 48));
    _mm_stream_si128((__m128i*)(dst + i), a);
    _mm_stream_si128((__m128i*)(dst + i + 16), b);
    _mm_stream_si128((__m128i*)(dst + i + 32), c);
    _mm_stream_si128((__m128i*)(dst + i + 48), d);
  }
  memcpy(dst + n16, src + n16, bytes - n16);
  /* Orders the streamed stores before the step is seen done (by this or another thread). */
  _mm_sfence();
#else
  memcpy(dst, src, bytes);
#endif
}

static inline int depsDone(const struct papEngine* e, const struct papStep* s) {
  for (int d = 0; d < 2; d++)
    if (s->dep[d] >= 0 && e->steps[s->dep[d]].state != PAP_STEP_DONE) return 0;
  if (s->prevQ >= 0 && e->steps[s->prevQ].state == PAP_STEP_IDLE) return 0;
  return 1;
}

/* res of posting or testing send step s. A send that failed because its peer is gone
 * (papcclRemoteError, peerAlive 0; the transport said nothing) goes back to waiting when
 * sends to dead peers are held (the caller's health check says why), else it fails with one
 * WARN naming the peer. */
static papcclResult_t sendGone(struct papEngine* e, struct papStep* s, papcclResult_t res) {
  if (res != papcclRemoteError || e->tops->live->peerAlive(e->tstate, s->peer)) return res;
  s->req = NULL;
  s->state = PAP_STEP_IDLE;
  if (e->holdDeadSends) return papcclSuccess;
  PAP_WARN("a send to peer %d failed: it is gone", s->peer);
  return res;
}

static papcclResult_t startStep(struct papEngine* e, struct papStep* s, int* progressed) {
  size_t esz;
  switch (s->kind) {
  case PAP_STEP_SEND:
    /* Held sends (holdDeadSends): nothing is sent to a peer known to be gone: the step
     * waits, and the caller's health check says why (for the arrival layer: a mismatch the
     * peer failed on, else its exit) instead of the transport's refusal. */
    if (e->holdDeadSends && !e->tops->live->peerAlive(e->tstate, s->peer)) break;
    papcclResult_t res =
        e->tops->msg->isend(e->conns[s->peer], s->src, s->bytes, PAP_MEM_HOST, s->tag, &s->req);
    PAP_CHECK(sendGone(e, s, res));
    if (s->req) s->state = PAP_STEP_POSTED;
    break;
  case PAP_STEP_RECV: {
    /* Small final pieces gain nothing from streaming and would leave the data out of cache
     * for the caller: stream only large destinations. */
    struct papRecvSink sink = {streamCopySink, s};
    int stream = (s->flags & PAP_STEP_F_FINAL) && s->bytes >= 65536;
    PAP_CHECK(e->tops->msg->irecv(e->conns[s->peer], s->dst, s->bytes, PAP_MEM_HOST, s->tag,
                                  stream ? &sink : NULL, &s->req));
    if (s->req) s->state = PAP_STEP_POSTED;
    break;
  }
  case PAP_STEP_RECV_REDUCE: {
    struct papRecvSink sink = {reduceSink, s};
    PAP_CHECK(e->tops->msg->irecv(e->conns[s->peer], s->dst, s->bytes, PAP_MEM_HOST, s->tag, &sink,
                                  &s->req));
    if (s->req) s->state = PAP_STEP_POSTED;
    break;
  }
  case PAP_STEP_COPY:
    if (s->dst != s->src && s->bytes) memcpy(s->dst, s->src, s->bytes);
    s->state = PAP_STEP_DONE;
    break;
  case PAP_STEP_REDUCE:
    esz = papKernTypeSize((papcclDataType_t)s->dtype);
    papKernHostReduce(s->dst, s->src, s->src2, s->bytes / esz, (papcclDataType_t)s->dtype,
                      (enum papRedKind)s->red);
    s->state = PAP_STEP_DONE;
    break;
  case PAP_STEP_PUBLISH: {
    char* data = NULL;
    struct papStageSlot* c = stageCtl(e, e->rank, s->slot, &data);
    if (c == NULL) {
      PAP_WARN("internal error: no staging area to publish into");
      return papcclInternalError;
    }
    /* The previous chunk in this slot must have been fetched by all its readers. */
    if (__atomic_load_n(&c->refs, __ATOMIC_ACQUIRE) != 0) break;
    memcpy(data, s->src, s->bytes);
    __atomic_store_n(&c->refs, (uint32_t)s->readers, __ATOMIC_RELAXED);
    /* Release partner: the acquire load of tag in FETCH. */
    __atomic_store_n(&c->tag, s->tag, __ATOMIC_RELEASE);
    for (int p = 0; p < e->nranks; p++)
      if (p != e->rank) e->tops->wake->notify(e->tstate, p);
    s->state = PAP_STEP_DONE;
    break;
  }
  case PAP_STEP_FETCH: {
    char* data = NULL;
    struct papStageSlot* c = stageCtl(e, s->peer, s->slot, &data);
    if (c == NULL) {
      PAP_WARN("internal error: rank %d's staging area is not mapped", s->peer);
      return papcclInternalError;
    }
    if (__atomic_load_n(&c->tag, __ATOMIC_ACQUIRE) != s->tag) break;
    if ((s->flags & PAP_STEP_F_FINAL) && s->bytes >= 65536)
      streamCopySink(s, 0, data, s->bytes);
    else
      memcpy(s->dst, data, s->bytes);
    /* Release: our reads of the slot happen before the owner may overwrite it. */
    if (__atomic_sub_fetch(&c->refs, 1, __ATOMIC_ACQ_REL) == 0)
      e->tops->wake->notify(e->tstate, s->peer);
    s->state = PAP_STEP_DONE;
    break;
  }
  case PAP_STEP_DCOPY:
  case PAP_STEP_DREDUCE:
    if (s->bytes == 0 || (s->kind == PAP_STEP_DCOPY && s->dst == s->src)) {
      s->state = PAP_STEP_DONE;
      break;
    }
    PAP_CHECK(e->dev.ops->post(e->dev.ctx, s));
    s->state = PAP_STEP_POSTED;
    e->devPosted++;
    break;
  default:
    PAP_WARN("internal error: unknown plan step kind %d", s->kind);
    return papcclInternalError;
  }
  if (s->state != PAP_STEP_IDLE) *progressed = 1;
  return papcclSuccess;
}

papcclResult_t papEngineProgress(struct papEngine* e, int* progressedOut) {
  int progressed = 0;
  int end = papEngineScanEnd(e);
  /* One pass of the transport's background work for the whole window, not one per request
   * tested: a UCX worker pass polls its sockets with a system call. It runs before the first
   * test of a step posted in an earlier pass, else at the end of the pass: the steps that
   * can start are posted before it (a step posted now is tested without it), so a rank that
   * comes late sends its data before it reads what waited for it (over TCP, reading first
   * cost the peers 25-30 us of the late rank's tail; perf/README.md). */
  int pumped = e->first >= end;
  for (int i = e->first; i < end; i++) {
    struct papStep* s = &e->steps[i];
    int wasDone = s->state == PAP_STEP_DONE, fresh = 0;
    if (s->state == PAP_STEP_IDLE) {
      if (!depsDone(e, s)) continue;
      PAP_CHECK(startStep(e, s, &progressed));
      fresh = 1;
    }
    if (s->state == PAP_STEP_POSTED) {
      int done = 0;
      if (!pumped && !fresh) {
        PAP_CHECK(e->tops->msg->progress(e->tstate));
        pumped = 1;
      }
      int dev = s->kind == PAP_STEP_DCOPY || s->kind == PAP_STEP_DREDUCE;
      if (dev)
        PAP_CHECK(e->dev.ops->test(e->dev.ctx, s, &done));
      else if (s->kind == PAP_STEP_SEND)
        PAP_CHECK(sendGone(e, s, e->tops->msg->test(s->req, &done, NULL)));
      else
        PAP_CHECK(e->tops->msg->test(s->req, &done, NULL));
      if (done && s->state == PAP_STEP_POSTED) {
        if (dev) {
          s->devReq = NULL;
          e->devPosted--;
        }
        s->req = NULL;
        s->state = PAP_STEP_DONE;
        progressed = 1;
      }
    }
    /* Test hook: a rank dying or stalling with chunks of this plan in flight. */
    if (!wasDone && s->state == PAP_STEP_DONE && s->kind != PAP_STEP_COPY &&
        s->kind != PAP_STEP_REDUCE && s->kind != PAP_STEP_DCOPY && s->kind != PAP_STEP_DREDUCE)
      PAP_FAULT(PAP_FAULT_CHUNK, e->rank, e->abortFlag);
    if (i == e->first && s->state == PAP_STEP_DONE) {
      e->first++;
      if (end < e->nsteps) end++;
    }
  }
  if (!pumped) PAP_CHECK(e->tops->msg->progress(e->tstate));
  *progressedOut = progressed;
  return papcclSuccess;
}
