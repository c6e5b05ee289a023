/* SPDX-License-Identifier: Apache-2.0 */
/* The progress engine: operations become plans of chunk steps with dependencies, which the
 * engine executes over the transport, posting whatever is ready, several chunks in flight. */
#ifndef PAPCCL_ENGINE_ENGINE_H_
#define PAPCCL_ENGINE_ENGINE_H_

#include <stddef.h>
#include <stdint.h>

#include "kernels.h"
#include "papccl.h"
#include "transport.h"

enum papStepKind {
  PAP_STEP_SEND = 1,
  PAP_STEP_RECV, /* copy the message into dst */
  PAP_STEP_RECV_REDUCE, /* dst = src OP message, straight out of the transport buffers */
  PAP_STEP_COPY, /* dst = src */
  PAP_STEP_REDUCE, /* dst = src OP src2 */
  PAP_STEP_PUBLISH, /* copy src into slot `peer` of my staging area for `readers` local peers */
  PAP_STEP_FETCH, /* copy slot `slot` of rank `peer`'s staging area into dst */
  PAP_STEP_DCOPY, /* dst = src by the device (e->dev): either may be a peer's memory */
  PAP_STEP_DREDUCE /* dst = src OP src2 by the device */
};

enum {
  PAP_STEP_IDLE = 0,
  PAP_STEP_POSTED = 1,
  PAP_STEP_DONE = 2
};

/* The step writes data this plan never reads again: stream it past the caches
 * (non-temporal stores), saving the read-for-ownership of the destination lines. Only for
 * results of at least PAPCCL_STREAM_MIN_BYTES: a smaller result stays in cache for the
 * caller, who reads it next (streaming cost 1.2-1.7x at 1-16 MiB on a 2-core VM). */
#define PAP_STEP_F_FINAL 1

struct papStep {
  uint8_t kind;
  uint8_t state;
  uint8_t dtype;
  uint8_t red;
  uint8_t flags; /* PAP_STEP_F_* */
  int32_t peer;
  int32_t dep[2]; /* steps that must be done first (-1: none) */
  int32_t prevQ; /* previous step on the same (peer, direction) queue: keeps FIFO order */
  int32_t slot; /* PUBLISH/FETCH: staging slot; PUBLISH: readers in `peer` is unused */
  int32_t readers; /* PUBLISH: how many peers fetch it */
  char* dst;
  const char* src;
  const char* src2;
  size_t bytes;
  uint64_t tag;
  struct papReq* req;
  void* devReq; /* DCOPY/DREDUCE: the device's handle while posted (an event) */
};

/* Executes DCOPY/DREDUCE steps (the CUDA layer: CUDA copies and kernels on an internal
 * stream). post enqueues the work and sets s->devReq; test sets *doneOut once it is finished
 * (and releases devReq); drop releases devReq of a step abandoned by a failed plan, after
 * quiesce (optional) has waited until no posted work touches any buffer any more. Steps of
 * 0 bytes never reach them. */
struct papDevStepOps {
  papcclResult_t (*post)(void* ctx, struct papStep* s);
  papcclResult_t (*test)(void* ctx, struct papStep* s, int* doneOut);
  void (*drop)(void* ctx, struct papStep* s);
  void (*quiesce)(void* ctx);
};

/* Direct device memory among the ranks (all on one host), for the IPC allreduce
 * (the IPC planners). Each rank has an arena of `bytes` (the same on every rank): the first
 * half takes its input, the second half the blocks it reduces; arena[p] is rank p's arena as
 * this process addresses it (mapped through CUDA IPC). */
struct papDevView {
  const struct papDevStepOps* ops;
  void* ctx;
  char** arena; /* [nranks] */
  size_t bytes;
  size_t minBytes; /* smaller ops (bytes per rank) take the ordinary plans; agreed at init */
};

struct papScratch {
  void* ptr;
  size_t bytes;
};

/* Shared staging, published chunks: a control line per slot, then the slot data. */
struct papStageSlot {
  uint64_t tag; /* (seq + 1) << 32 | chunk index: which chunk the slot holds */
  uint32_t refs; /* readers still to fetch it */
  char pad[64 - 12];
};

struct papEngine {
  int rank;
  int nranks;
  const struct papTransportOps* tops;
  void* tstate;
  struct papConn** conns;
  const volatile int* abortFlag;
  struct papStep* steps;
  int nsteps;
  int cap;
  int first; /* every step before it is done */
  int window; /* steps scanned past `first` */
  int scanAll; /* this plan is scanned whole (PAP plans: early work never waits behind late) */
  int pending; /* the plan waits for steps still to be appended (arrival-ordered chain) */
  int32_t* lastSend; /* [nranks] during plan building */
  int32_t* lastRecv;
  uint32_t* sendN; /* [nranks] messages to each peer in the current op (tags) */
  uint32_t* recvN;
  uint64_t curSeq; /* sequence number of the op being planned */
  int streamFinal; /* the op being planned streams its final pieces (papPlanBeginOp) */
  /* Set by the layer above (the arrival layer sets them for a message board's mismatch
   * check, docs/PAP-ENGINE.md section 11). holdDeadSends: a send to a peer known to be gone
   * waits (its step stays unposted) instead of failing, so that the caller's health check
   * says why. tagSalt: nonzero, bits 16-31 of the op's message tags (the count per peer in
   * bits 0-15), so that ops planned with different salts never match. */
  int holdDeadSends;
  uint32_t tagSalt;
  int32_t lastPublish; /* during plan building: the previous PUBLISH step (slot order) */
  int stageSlots; /* published-chunk slots in each local rank's staging area (0: none) */
  size_t stageSlotBytes;
  struct papScratch* scratch; /* reused between plans, grown on demand */
  int nscratch;
  int scratchUsed;
  struct papDevView dev; /* dev.ops == NULL: no device steps on this comm */
  int devPosted; /* DCOPY/DREDUCE steps posted and not yet seen done */
  int32_t ipcEnd; /* during plan building: the last IPC round's end (ops of a group in order) */
};

papcclResult_t papEngineInit(struct papEngine* e, int rank, int nranks,
                             const struct papTransportOps* tops, void* tstate,
                             struct papConn** conns, const volatile int* abortFlag);
void papEngineFree(struct papEngine* e);

/* Plan building (algorithms call these). Each returns the step index, or -1 on failure
 * (out of memory, logged); *errOut is set then. deps: -1 = none. */
void papPlanReset(struct papEngine* e);
/* Starts the steps of one op; message tags become (seq, n-th message on the queue), which
 * both ends compute alike, so a plan mismatch between ranks is caught, not silently wrong. */
/* resultBytes: the size of the op's result on this rank; from PAPCCL_STREAM_MIN_BYTES up its
 * final pieces are streamed past the caches (PAP_STEP_F_FINAL). */
void papPlanBeginOp(struct papEngine* e, uint64_t seq, size_t resultBytes);
int papStepSend(struct papEngine* e, int peer, const void* src, size_t bytes, int dep0, int dep1);
int papStepRecv(struct papEngine* e, int peer, void* dst, size_t bytes, int dep0, int dep1);
int papStepRecvReduce(struct papEngine* e, int peer, void* dst, const void* src, size_t bytes,
                      papcclDataType_t dtype, enum papRedKind red, int dep0, int dep1);
int papStepCopy(struct papEngine* e, void* dst, const void* src, size_t bytes, int dep0, int dep1);
int papStepReduce(struct papEngine* e, void* dst, const void* a, const void* b, size_t bytes,
                  papcclDataType_t dtype, enum papRedKind red, int dep0, int dep1);
/* Single-copy broadcast of a chunk to the local peers through this rank's staging area:
 * PUBLISH copies it into slot `slot` once (after the slot's previous readers are done),
 * every reader FETCHes it from there. The slot is (chunk index) % e->stageSlots; tag
 * identifies (op, chunk) on both sides. Use only when e->stageSlots > 0 and the chunk fits
 * e->stageSlotBytes. */
int papStepPublish(struct papEngine* e, const void* src, size_t bytes, int slot, uint64_t tag,
                   int readers, int dep0);
int papStepFetch(struct papEngine* e, int owner, void* dst, size_t bytes, int slot, uint64_t tag,
                 int dep0, int dep1);
/* Device steps (only when e->dev.ops is set): dst = src, dst = a OP b, run by the device. */
int papStepDevCopy(struct papEngine* e, void* dst, const void* src, size_t bytes, int dep0,
                   int dep1);
int papStepDevReduce(struct papEngine* e, void* dst, const void* a, const void* b, size_t bytes,
                     papcclDataType_t dtype, enum papRedKind red, int dep0, int dep1);
/* A step that is done once dep0 and dep1 are (either may be -1): joins dependencies. Returns
 * the other one when one is -1, and -1 when both are. */
int papStepJoin(struct papEngine* e, int dep0, int dep1);
/* Marks a RECV step whose destination the plan never reads again (see PAP_STEP_F_FINAL). */
void papStepMarkFinal(struct papEngine* e, int idx);
/* Scan the whole plan each pass instead of a window (until papPlanReset). */
static inline void papPlanScanAll(struct papEngine* e) {
  e->scanAll = 1;
}
static inline int papEngineScanEnd(const struct papEngine* e) {
  int end = e->scanAll ? e->nsteps : e->first + e->window;
  return end > e->nsteps ? e->nsteps : end;
}
/* Scratch memory valid until the next papPlanReset. */
papcclResult_t papPlanScratch(struct papEngine* e, size_t bytes, void** ptrOut);
/* Memory of a suspended comm (papcclCommSuspend). HeldBytes: the bytes the engine holds now
 * that suspension gives back: its step array and its scratch buffers. Release frees them
 * (call with no plan in flight); Restore makes the step array again (scratch comes back
 * when a plan asks for it). */
size_t papEngineHeldBytes(const struct papEngine* e);
void papEngineRelease(struct papEngine* e);
papcclResult_t papEngineRestore(struct papEngine* e);
/* 1 if a plan-building call failed since papPlanReset. */
int papPlanFailed(const struct papEngine* e);

/* One pass over the window: posts ready steps, tests posted ones. */
papcclResult_t papEngineProgress(struct papEngine* e, int* progressedOut);
static inline int papEngineDone(const struct papEngine* e) {
  return e->first >= e->nsteps && !e->pending;
}

#endif /* PAPCCL_ENGINE_ENGINE_H_ */
