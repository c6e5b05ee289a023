/* SPDX-License-Identifier: Apache-2.0 */
/* Device buffers in CUDA stream order.
 *
 * A collective on device (or managed) memory is enqueued, not run: on the user's stream go
 *   1. copies of the inputs into pinned host staging,
 *   2. a write of the op's arrival number into a host-mapped word (cuStreamWriteValue64,
 *      or a one-thread kernel where stream memory operations are unavailable),
 *   3. a wait until the done word reaches that number (cuStreamWaitValue64, or a spin
 *      kernel),
 *   4. copies of the results back into the user's buffers,
 * and the call returns. The progress thread sees the arrival word (the moment the stream
 * reached the op: that is the rank's arrival for the PAP engine), runs the op's plan on the
 * staging buffers with the host engine, and writes the done word. The stream holds
 * everything after the op until then, as NCCL's semantics require.
 *
 * This staging path goes through pinned host memory: every transport and every PAP plan work
 * unchanged on it. On a communicator with CUDA IPC, five collectives instead read peers'
 * device arenas and reduce in GPU kernels (src/cuda/ipc.c, src/algo/arena_colls.c,
 * docs/GPU-IPC.md). */
#include "device.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "algo.h"
#include "alloc.h"
#include "check.h"
#include "enqueue.h"
#include "futex.h"
#include "kernels.h"
#include "log.h"
#include "param.h"
#include "wait.h"

#ifndef PAPCCL_HAVE_CUDA

int papDeviceAvailable(void) {
  return 0;
}
int papDeviceCurrent(void) {
  return -1;
}
int papDeviceContextExists(void) {
  return 0;
}
void papDeviceUse(int dev) {
  (void)dev;
}
int papDeviceOpNeedsStream(struct papOpDesc* d) {
  (void)d;
  return 0;
}
papcclResult_t papDeviceCheckStream(struct papComm* comm, struct CUstream_st* stream) {
  (void)comm, (void)stream;
  return papcclSuccess;
}
papcclResult_t papDeviceSubmit(struct papComm* comm, struct papOpDesc* ops, int nops) {
  (void)comm, (void)ops, (void)nops;
  PAP_WARN("device buffers need a CUDA build of papccl");
  return papcclInvalidUsage;
}
papcclResult_t papDeviceRunJob(struct papComm* comm, struct papJob* job) {
  (void)comm, (void)job;
  return papcclInternalError;
}
void papDeviceDropJob(struct papComm* comm, struct papJob* job) {
  (void)comm, (void)job;
}
void papDeviceCommFree(struct papComm* comm) {
  (void)comm;
}

#else /* PAPCCL_HAVE_CUDA */

#include <cuda_runtime_api.h>

#include "device_int.h"

/* Driver entry points (CUresult is an int-sized enum; CUdevice an int). */
typedef int (*cuStreamValue64Fn)(struct CUstream_st* stream, unsigned long long addr,
                                 unsigned long long value, unsigned int flags);
typedef int (*cuDeviceGetAttributeFn)(int* value, int attrib, int dev);
typedef int (*cuDevicePrimaryCtxGetStateFn)(int dev, unsigned int* flags, int* active);
typedef int (*cuCtxGetCurrentFn)(void** ctx);
typedef int (*cuCtxSetCurrentFn)(void* ctx);
#define CU_WAIT_GEQ 0x0
#define CU_WRITE_DEFAULT 0x0
#define CU_ATTR_CAN_USE_64_BIT_STREAM_MEM_OPS 122

/* Pinned memory is never given back to CUDA while the process runs: cudaFreeHost waits for
 * the whole device, which can include streams held on other ranks' collectives. Blocks and
 * word pages of destroyed comms wait here for the next comm (a block is reused once its
 * event has completed). */
static pthread_mutex_t spareLock = PTHREAD_MUTEX_INITIALIZER;
static struct papDevStage* spareStages;
struct spareWords {
  struct spareWords* next;
  uint64_t* words;
  unsigned long long wordsDev;
  void* ctx;
};
static struct spareWords* spareWordPages;

static pthread_once_t devOnce = PTHREAD_ONCE_INIT;
static int devAvailable, devCount;
static cuStreamValue64Fn cuWrite64, cuWait64;
static cuDevicePrimaryCtxGetStateFn cuCtxState;
static cuCtxGetCurrentFn cuCtxCurrent;
static cuCtxSetCurrentFn cuCtxSet;
static _Atomic int devCtxSeen; /* some device's primary context was active once */

/* CUDA cannot be used in a child forked after the parent initialized it: its ops take the
 * host path (device buffers there are an error the CUDA runtime reports). */
static void devForkChild(void) {
  devAvailable = 0;
  cuWrite64 = cuWait64 = NULL;
}

static void* entryPoint(const char* name) {
  enum cudaDriverEntryPointQueryResult q = cudaDriverEntryPointSymbolNotFound;
  void* fn = NULL;
#if CUDART_VERSION >= 12050
  cudaError_t err = cudaGetDriverEntryPointByVersion(name, &fn, 12000, cudaEnableDefault, &q);
#else
  cudaError_t err = cudaGetDriverEntryPoint(name, &fn, cudaEnableDefault, &q);
#endif
  if (err != cudaSuccess || q != cudaDriverEntryPointSuccess) {
    (void)cudaGetLastError();
    return NULL;
  }
  return fn;
}

static void devInitOnce(void) {
  if (!papParamCuda()) {
    PAP_INFO(PAP_LOG_INIT, "GPU support is off: PAPCCL_CUDA=0; host buffers only");
    return;
  }
  int n = 0;
  cudaError_t err = cudaGetDeviceCount(&n);
  if (err != cudaSuccess || n == 0) {
    (void)cudaGetLastError();
    PAP_INFO(PAP_LOG_INIT, "GPU support is off: %s; host buffers only",
             err != cudaSuccess ? cudaGetErrorString(err) : "no GPU found");
    return;
  }
  devAvailable = 1;
  devCount = n;
  pthread_atfork(NULL, NULL, devForkChild);
  cuCtxState = (cuDevicePrimaryCtxGetStateFn)entryPoint("cuDevicePrimaryCtxGetState");
  cuCtxCurrent = (cuCtxGetCurrentFn)entryPoint("cuCtxGetCurrent");
  cuCtxSet = (cuCtxSetCurrentFn)entryPoint("cuCtxSetCurrent");
  const char* why = "PAPCCL_CUDA_MEMOPS=0";
  if (papParamCudaMemops()) {
    cuStreamValue64Fn w = (cuStreamValue64Fn)entryPoint("cuStreamWriteValue64");
    cuStreamValue64Fn v = (cuStreamValue64Fn)entryPoint("cuStreamWaitValue64");
    cuDeviceGetAttributeFn attr = (cuDeviceGetAttributeFn)entryPoint("cuDeviceGetAttribute");
    int ok = w && v && attr;
    why = "the driver offers no stream memory operations";
    for (int d = 0; ok && d < n; d++) {
      int yes = 0;
      if (attr(&yes, CU_ATTR_CAN_USE_64_BIT_STREAM_MEM_OPS, d) != 0 || !yes) {
        ok = 0;
        why = "a device does not support 64-bit stream memory operations";
      }
    }
    if (ok) {
      cuWrite64 = w;
      cuWait64 = v;
    }
  }
  PAP_INFO(PAP_LOG_INIT, "GPU support is on: %d device(s); stream arrival and wait by %s", n,
           cuWrite64 ? "stream memory operations" : "one-thread kernels");
  if (!cuWrite64) PAP_INFO(PAP_LOG_INIT, "stream memory operations not used: %s", why);
}

int papDeviceAvailable(void) {
  pthread_once(&devOnce, devInitOnce);
  return devAvailable;
}

int papDeviceCurrent(void) {
  int dev = -1;
  if (!papDeviceAvailable()) return -1;
  if (cudaGetDevice(&dev) != cudaSuccess) {
    (void)cudaGetLastError();
    return -1;
  }
  return dev;
}

/* Whether device memory can exist yet: only once some context exists (a device's primary
 * context, which the runtime creates on first use, or one current on this thread). Until
 * then no pointer is asked about, so a process that never touches the GPU never gets a
 * context from papccl. */
static int devContextExists(void) {
  if (atomic_load_explicit(&devCtxSeen, memory_order_relaxed)) return 1;
  if (cuCtxState == NULL || cuCtxCurrent == NULL) return 1; /* cannot tell: ask */
  void* cur = NULL;
  if (cuCtxCurrent(&cur) == 0 && cur != NULL) {
    atomic_store_explicit(&devCtxSeen, 1, memory_order_relaxed);
    return 1;
  }
  for (int d = 0; d < devCount; d++) {
    unsigned int flags = 0;
    int active = 0;
    if (cuCtxState(d, &flags, &active) == 0 && active) {
      atomic_store_explicit(&devCtxSeen, 1, memory_order_relaxed);
      return 1;
    }
  }
  return 0;
}

/* Device or managed memory: must be read and written in stream order. */
static int onGpu(const void* p) {
  if (p == NULL) return 0;
  struct cudaPointerAttributes a;
  if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return a.type == cudaMemoryTypeDevice || a.type == cudaMemoryTypeManaged;
}

struct papDevSaved papDeviceEnter(const struct papComm* comm) {
  struct papDevSaved sv = {0, -1, NULL};
  if (comm->cudaDev < 0 || cuCtxCurrent == NULL || cuCtxSet == NULL) return sv;
  if (cuCtxCurrent(&sv.ctx) != 0 || cudaGetDevice(&sv.dev) != cudaSuccess) {
    (void)cudaGetLastError();
    return sv;
  }
  /* No context on this thread: cudaGetDevice says 0 all the same, and setting device 0 back
   * on leaving would create its primary context. Leaving puts back "no context" instead. */
  if (sv.ctx == NULL) sv.dev = -1;
  if (sv.ctx != NULL && sv.dev == comm->cudaDev) return sv;
  if (cudaSetDevice(comm->cudaDev) == cudaSuccess) sv.switched = 1;
  (void)cudaGetLastError();
  return sv;
}

void papDeviceLeave(struct papDevSaved sv) {
  if (!sv.switched) return;
  if (sv.dev >= 0) cudaSetDevice(sv.dev);
  cuCtxSet(sv.ctx);
  (void)cudaGetLastError();
}

/* The context current on this thread (blocks and pages are tagged with it). */
static void* currentCtx(void) {
  void* ctx = NULL;
  if (cuCtxCurrent == NULL || cuCtxCurrent(&ctx) != 0) return NULL;
  return ctx;
}

int papDeviceContextExists(void) {
  return papDeviceAvailable() && devContextExists();
}

void* papDeviceCurrentCtx(void) {
  return currentCtx();
}

void papDeviceUse(int dev) {
  /* devCount after papDeviceContextExists: its pthread_once orders the read after the init,
   * which another rank thread of papcclCommInitAll may be running. */
  if (dev < 0 || !papDeviceContextExists() || dev >= devCount) return;
  if (cudaSetDevice(dev) != cudaSuccess) (void)cudaGetLastError();
}

int papDeviceOpNeedsStream(struct papOpDesc* d) {
  if (!devContextExists()) return 0;
  /* Unified addressing: any current device can answer for any pointer. */
  d->sendOnGpu = d->sendBytes && onGpu(d->call.sendbuff);
  d->recvOnGpu = d->recvBytes && onGpu(d->call.recvbuff);
  return d->sendOnGpu || d->recvOnGpu;
}

papcclResult_t papDeviceCudaFail(const char* what, int err) {
  cudaError_t e = (cudaError_t)err;
  PAP_WARN("%s failed: %s (%s)", what, cudaGetErrorString(e), cudaGetErrorName(e));
  (void)cudaGetLastError();
  return papcclUnhandledCudaError;
}
#define cudaFail(what, err) papDeviceCudaFail(what, (int)(err))
#define CUDA_CHECK(call) \
  do { \
    cudaError_t e_ = (call); \
    if (e_ != cudaSuccess) return cudaFail(#call, e_); \
  } while (0)

static papcclResult_t devStateGet(struct papComm* comm, struct papDevState** out) {
  if (comm->dev == NULL) {
    /* Before this comm's first op holds a stream (loading a kernel later could wait on it). */
    PAP_CHECK(papKernPreload());
    struct papDevState* st = NULL;
    PAP_CHECK(papCalloc(&st, 1));
    void* ctx = currentCtx();
    pthread_mutex_lock(&spareLock);
    struct spareWords* sw = NULL;
    for (struct spareWords** pp = &spareWordPages; *pp; pp = &(*pp)->next) {
      if ((*pp)->ctx == ctx) {
        sw = *pp;
        *pp = sw->next;
        break;
      }
    }
    pthread_mutex_unlock(&spareLock);
    if (sw) { /* every stream has passed its old words (see papDeviceCommFree) */
      st->words = sw->words;
      st->wordsDev = sw->wordsDev;
      free(sw);
    } else {
      void* words = NULL;
      cudaError_t err = cudaHostAlloc(&words, DEV_WORDS * sizeof(uint64_t),
                                      cudaHostAllocMapped | cudaHostAllocPortable);
      if (err != cudaSuccess) {
        free(st);
        return cudaFail("cudaHostAlloc of the stream words", err);
      }
      void* dptr = NULL;
      err = cudaHostGetDevicePointer(&dptr, words, 0);
      if (err != cudaSuccess) {
        free(st); /* the page is not given back (cudaFreeHost waits for the device) */
        return cudaFail("cudaHostGetDevicePointer of the stream words", err);
      }
      st->words = (uint64_t*)words;
      st->wordsDev = (unsigned long long)(uintptr_t)dptr;
    }
    st->ctx = ctx;
    memset(st->words, 0, DEV_WORDS * sizeof(uint64_t));
    comm->dev = st;
  }
  *out = comm->dev;
  return papcclSuccess;
}

/* A free staging block of at least `bytes` for a job (its last use finished on its
 * stream). Blocks are freed only by a suspension (device_mem.c): cudaFreeHost waits for
 * the whole device, including streams held on other ranks' collectives. Within the byte
 * budget a new block is allocated; beyond it, the call waits for a block held by a queued
 * job to come free (backpressure, as NCCL's bounded work queues), and allocates anyway when
 * no block could ever fit. */
/* The waits of the device path (core/wait.h): they sleep (a stream may be late by any
 * amount), and give up with papcclRemoteError at the abort and papcclSystemError at the
 * deadline (the streams never reached the collectives). */
static void devWait(struct papComm* comm, const char* what, long maxSleepNs, struct papWait* w) {
  papWaitInit(w, what, (const volatile int*)&comm->abortFlag, 1, 0, maxSleepNs);
  w->abortRes = papcclRemoteError;
  w->timeoutRes = papcclSystemError;
}

static papcclResult_t stageAcquire(struct papComm* comm, struct papDevState* st, size_t bytes,
                                   struct papDevStage** out) {
  struct papWait w;
  devWait(comm,
          "waiting for a free staging block (the streams do not reach the collectives "
          "already queued)",
          1000000, &w);
  for (;;) {
    int anyBigEnough = 0;
    for (struct papDevStage* s = st->stages; s; s = s->next) {
      if (s->bytes < bytes || s->poisoned) continue;
      anyBigEnough = 1;
      if (atomic_load_explicit(&s->busy, memory_order_acquire)) continue;
      cudaError_t q = cudaEventQuery(s->done);
      if (q == cudaErrorNotReady) continue;
      if (q != cudaSuccess) return cudaFail("cudaEventQuery on a staging block", q);
      atomic_store_explicit(&s->busy, 1, memory_order_relaxed);
      *out = s;
      return papcclSuccess;
    }
    if (st->pinnedBytes + bytes <= DEV_STAGE_BUDGET || !anyBigEnough) break;
    PAP_CHECK(papWaitCheck(&w, papNowNs()));
    papWaitSleep(&w);
  }
  /* A spare block of a destroyed comm, or a new one. */
  /* The smallest fitting spare of this context (its event belongs to it too). */
  struct papDevStage* s = NULL;
  void* ctx = currentCtx();
  pthread_mutex_lock(&spareLock);
  struct papDevStage** best = NULL;
  for (struct papDevStage** pp = &spareStages; *pp; pp = &(*pp)->next) {
    struct papDevStage* c = *pp;
    if (c->ctx != ctx || c->bytes < bytes || (best && c->bytes >= (*best)->bytes)) continue;
    if (cudaEventQuery(c->done) == cudaSuccess) best = pp;
  }
  if (best) {
    s = *best;
    *best = s->next;
  }
  (void)cudaGetLastError();
  pthread_mutex_unlock(&spareLock);
  if (s == NULL) {
    PAP_CHECK(papCalloc(&s, 1));
    s->bytes = bytes < DEV_STAGE_MIN ? DEV_STAGE_MIN : (bytes + 4095) & ~(size_t)4095;
    cudaError_t err = cudaEventCreateWithFlags(&s->done, cudaEventDisableTiming);
    if (err == cudaSuccess) {
      err = cudaHostAlloc(&s->ptr, s->bytes, cudaHostAllocPortable);
      if (err != cudaSuccess) cudaEventDestroy(s->done);
    }
    if (err != cudaSuccess) {
      free(s);
      return cudaFail("allocating pinned staging", err);
    }
    s->ctx = ctx;
  }
  size_t sz = s->bytes;
  st->pinnedBytes += sz;
  PAP_INFO(PAP_LOG_ALLOC, "rank %d: pinned staging block of %zu bytes (%zu in all)", comm->rank, sz,
           st->pinnedBytes);
  atomic_store_explicit(&s->busy, 1, memory_order_relaxed);
  s->next = st->stages;
  st->stages = s;
  *out = s;
  return papcclSuccess;
}

static papcclResult_t streamValue(struct papDevState* st, struct CUstream_st* stream, int word,
                                  uint64_t value, int wait) {
  unsigned long long addr = st->wordsDev + (unsigned long long)word * sizeof(uint64_t);
  cuStreamValue64Fn fn = wait ? cuWait64 : cuWrite64;
  if (fn == NULL) {
    return wait ? papKernStreamWait64((const uint64_t*)(uintptr_t)addr, value, stream)
                : papKernStreamWrite64((uint64_t*)(uintptr_t)addr, value, stream);
  }
  int r = fn(stream, addr, value, wait ? CU_WAIT_GEQ : CU_WRITE_DEFAULT);
  if (r != 0) {
    PAP_WARN("%s failed: CUresult %d", wait ? "cuStreamWaitValue64" : "cuStreamWriteValue64", r);
    return papcclUnhandledCudaError;
  }
  return papcclSuccess;
}

/* Staging bytes the op needs: its device/managed buffers only (host buffers are used as
 * they are). Overlapping buffers (in place, and the offset layouts of AllGather and
 * ReduceScatter) share one range so that they keep their overlap. Ranges are 256-byte
 * aligned within the job's block. */
static size_t stageSpan(const struct papOpDesc* op, size_t* sendOff, size_t* recvOff) {
  uintptr_t s = (uintptr_t)op->userSend, r = (uintptr_t)op->userRecv;
  size_t sb = op->sendOnGpu && !op->direct ? op->sendBytes : 0;
  size_t rb = op->recvOnGpu && !op->direct ? op->recvBytes : 0;
  size_t span;
  if (sb && rb && s < r + rb && r < s + sb) {
    uintptr_t lo = s < r ? s : r;
    uintptr_t hi = s + sb > r + rb ? s + sb : r + rb;
    *sendOff = s - lo;
    *recvOff = r - lo;
    span = hi - lo;
  } else {
    *sendOff = 0;
    *recvOff = (sb + 255) & ~(size_t)255;
    span = *recvOff + rb;
  }
  return (span + 255) & ~(size_t)255;
}

papcclResult_t papDeviceCheckStream(struct papComm* comm, struct CUstream_st* stream) {
  (void)comm;
  enum cudaStreamCaptureStatus cap = cudaStreamCaptureStatusNone;
  cudaError_t err = cudaStreamIsCapturing((cudaStream_t)stream, &cap);
  if (err != cudaSuccess) return cudaFail("cudaStreamIsCapturing", err);
  if (cap != cudaStreamCaptureStatusNone) {
    PAP_WARN(
        "the stream is being captured into a CUDA graph: papccl cannot yet record "
        "collectives into graphs; run them outside the capture");
    return papcclInvalidUsage;
  }
  return papcclSuccess;
}

/* Makes `main` wait for what is already on each other stream of the ops (before the copies
 * in), or each other stream wait for `main` (after the copies back). */
static papcclResult_t joinStreams(const struct papOpDesc* ops, int nops, cudaStream_t main,
                                  int intoMain) {
  for (int i = 0; i < nops; i++) {
    cudaStream_t s = (cudaStream_t)ops[i].stream;
    if (!ops[i].onDevice || s == main) continue;
    int seen = 0;
    for (int j = 0; j < i; j++)
      seen |= ops[j].onDevice && (cudaStream_t)ops[j].stream == s;
    if (seen) continue;
    cudaEvent_t ev;
    CUDA_CHECK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
    cudaError_t e = cudaEventRecord(ev, intoMain ? s : main);
    if (e == cudaSuccess) e = cudaStreamWaitEvent(intoMain ? main : s, ev, 0);
    cudaEventDestroy(ev); /* released once the wait is done */
    if (e != cudaSuccess) return cudaFail("joining the streams of a group", e);
  }
  return papcclSuccess;
}

/* Enqueues the job's work on the stream. Called with comm->devLock held. *queuedOut = 1 once
 * the arrival write is on the stream: from then on the job must reach the progress thread. */
static papcclResult_t submitLocked(struct papComm* comm, struct papDevState* st, struct papJob* job,
                                   cudaStream_t stream, int* queuedOut) {
  const int nops = job->nops;
  PAP_CHECK(joinStreams(job->ops, nops, stream, 1));
  /* One block for the whole job: a job never waits on blocks it holds itself. */
  size_t total = 0;
  for (int i = 0; i < nops; i++) {
    struct papOpDesc* op = &job->ops[i];
    op->userSend = op->call.sendbuff;
    op->userRecv = op->call.recvbuff;
    /* The CUDA IPC allreduce reads and writes the user's buffers itself, in stream order:
     * no staging (the op's path, decided before it was queued). */
    op->direct = op->path.path == PAP_PATH_ARENA;
    size_t so, ro;
    total += stageSpan(op, &so, &ro);
  }
  struct papDevStage* stage = NULL;
  if (total) {
    PAP_CHECK(stageAcquire(comm, st, total, &stage));
    job->stage = stage;
  }
  size_t at = 0;
  papcclResult_t res = papcclSuccess;
  for (int i = 0; i < nops && res == papcclSuccess; i++) {
    struct papOpDesc* op = &job->ops[i];
    size_t so = 0, ro = 0;
    size_t span = stageSpan(op, &so, &ro);
    if (span == 0) continue; /* nothing on the GPU: the job uses the host buffers */
    if (op->sendOnGpu) op->call.sendbuff = (char*)stage->ptr + at + so;
    if (op->recvOnGpu) op->call.recvbuff = (char*)stage->ptr + at + ro;
    at += span;
    if (op->sendOnGpu) {
      cudaError_t e = cudaMemcpyAsync((void*)op->call.sendbuff, op->userSend, op->sendBytes,
                                      cudaMemcpyDefault, stream);
      if (e != cudaSuccess) res = cudaFail("cudaMemcpyAsync of the input into staging", e);
    }
  }
  /* At most DEV_ARRIVE_SLOTS jobs in flight, so that no arrival slot is written again
   * before the progress thread has read it. */
  struct papWait w;
  devWait(comm,
          "waiting for a free arrival slot (collectives queued on the streams, none "
          "finished)",
          1000000, &w);
  while (res == papcclSuccess &&
         st->nextSeq + 1 -
                 atomic_load_explicit((_Atomic uint64_t*)&st->words[DEV_DONE_WORD],
                                      memory_order_acquire) >=
             DEV_ARRIVE_SLOTS) {
    res = papWaitCheck(&w, papNowNs());
    if (res == papcclSuccess) papWaitSleep(&w);
  }
  if (res == papcclSuccess) {
    job->devSeq = st->nextSeq + 1;
    res = streamValue(st, stream, (int)(job->devSeq % DEV_ARRIVE_SLOTS), job->devSeq, 0);
  }
  if (res != papcclSuccess) {
    /* Copies into the block may be queued: it is free only after them. */
    if (stage && cudaEventRecord(stage->done, stream) != cudaSuccess) stage->poisoned = 1;
    (void)cudaGetLastError();
    return res;
  }
  st->nextSeq = job->devSeq;
  *queuedOut = 1;
  res = streamValue(st, stream, DEV_DONE_WORD, job->devSeq, 1);
  for (int i = 0; i < nops && res == papcclSuccess; i++) {
    struct papOpDesc* op = &job->ops[i];
    if (op->recvOnGpu && !op->direct) {
      cudaError_t e = cudaMemcpyAsync(op->userRecv, op->call.recvbuff, op->recvBytes,
                                      cudaMemcpyDefault, stream);
      if (e != cudaSuccess) res = cudaFail("enqueueing the copy of the result", e);
    }
  }
  if (stage) {
    cudaError_t e = cudaEventRecord(stage->done, stream);
    if (e != cudaSuccess) {
      stage->poisoned = 1; /* never reused: nothing says when the stream is done with it */
      if (res == papcclSuccess) res = cudaFail("cudaEventRecord after the copies back", e);
    }
  }
  if (res == papcclSuccess) res = joinStreams(job->ops, nops, stream, 0);
  return res;
}

/* Counts a call on comm, so that destroy/abort wait for it (GroupEnd enters no comm). */
static int devCommEnter(struct papComm* comm) {
  atomic_fetch_add_explicit(&comm->activeCalls, 1, memory_order_seq_cst);
  uint64_t m = atomic_load_explicit((_Atomic uint64_t*)&comm->magic, memory_order_seq_cst);
  if (m != PAP_COMM_MAGIC) {
    atomic_fetch_sub_explicit(&comm->activeCalls, 1, memory_order_seq_cst);
    PAP_WARN("communicator was destroyed or aborted");
    return 0;
  }
  return 1;
}

papcclResult_t papDeviceSubmit(struct papComm* comm, struct papOpDesc* ops, int nops) {
  if (!devCommEnter(comm)) return papcclInvalidUsage;
  /* The first device op's stream carries the job; ops on other streams are joined to it. */
  cudaStream_t stream = NULL;
  for (int i = 0; i < nops; i++) {
    if (ops[i].onDevice) {
      stream = (cudaStream_t)ops[i].stream;
      break;
    }
  }
  papcclResult_t res = papcclSuccess;
  int err = atomic_load_explicit(&comm->asyncError, memory_order_acquire);
  if (err != papcclSuccess && err != papcclInProgress) {
    PAP_WARN("communicator (rank %d) has a pending error %d (%s); abort or destroy it", comm->rank,
             err, papResultString((papcclResult_t)err));
    res = (papcclResult_t)err;
  }
  if (res == papcclSuccess) res = papDeviceCheckStream(comm, (struct CUstream_st*)stream);
  struct papDevSaved prevDev = papDeviceEnter(comm);
  struct papJob* job = NULL;
  int queued = 0;
  pthread_mutex_lock(&comm->devLock);
  struct papDevState* st = NULL;
  if (res == papcclSuccess) res = devStateGet(comm, &st);
  if (res == papcclSuccess) res = papCalloc(&job, 1);
  if (res == papcclSuccess) res = papCalloc(&job->ops, (size_t)nops);
  if (res == papcclSuccess) {
    job->kind = PAP_JOB_DEVICE;
    job->run = papDeviceRunJob;
    job->drop = papDeviceDropJob;
    job->nops = nops;
    memcpy(job->ops, ops, sizeof(*ops) * (size_t)nops);
    res = submitLocked(comm, st, job, stream, &queued);
  }
  /* Every op took its sequence number at the call: a failure here leaves this rank unable
   * to run it while the others will, so the comm is marked failed (abort or destroy it). */
  if (res != papcclSuccess) papCommSetError(comm, res);
  if (queued) {
    /* Queued under the lock, so jobs reach the progress thread in arrival-number order. */
    papProgressSubmit(comm, job);
  } else if (job != NULL) {
    if (job->stage) atomic_store_explicit(&job->stage->busy, 0, memory_order_release);
    free(job->ops);
    free(job);
  }
  pthread_mutex_unlock(&comm->devLock);
  papDeviceLeave(prevDev);
  atomic_fetch_sub_explicit(&comm->activeCalls, 1, memory_order_seq_cst);
  return res;
}

static void jobRelease(struct papComm* comm, struct papJob* job) {
  struct papDevState* st = comm->dev;
  /* Jobs leave in order, so the done word only grows; the stream's wait sees it. */
  atomic_store_explicit((_Atomic uint64_t*)&st->words[DEV_DONE_WORD], job->devSeq,
                        memory_order_release);
  if (job->stage) atomic_store_explicit(&job->stage->busy, 0, memory_order_release);
  job->stage = NULL;
}

papcclResult_t papDeviceRunJob(struct papComm* comm, struct papJob* job) {
  struct papDevState* st = comm->dev;
  _Atomic uint64_t* word = (_Atomic uint64_t*)&st->words[job->devSeq % DEV_ARRIVE_SLOTS];
  /* The stream may be late by any amount (that is the arrival pattern): poll briefly, then
   * sleep in growing steps up to 200 us, never burning a core. A stream that has not come
   * within PAPCCL_TIMEOUT_S is given up on, as any other wait. */
  int spins = 0;
  papcclResult_t res = papcclSuccess;
  char what[96];
  snprintf(what, sizeof(what), "rank %d waiting for its stream to reach collective %llu",
           comm->rank, (unsigned long long)job->devSeq);
  struct papWait w;
  devWait(comm, what, 200000, &w);
  while (atomic_load_explicit(word, memory_order_acquire) != job->devSeq) {
    if (++spins < 200 && !papCommAborted(comm)) continue;
    res = papWaitCheck(&w, papNowNs());
    if (res != papcclSuccess) break;
    papWaitSleep(&w);
  }
  if (res == papcclSuccess) {
    uint64_t now = papNowNs();
    for (int i = 0; i < job->nops; i++)
      job->ops[i].arr.tArr = now; /* the rank arrives when its stream does */
    res = papRunOps(job->ops, job->nops);
  }
  jobRelease(comm, job);
  return res;
}

void papDeviceDropJob(struct papComm* comm, struct papJob* job) {
  if (comm->dev) jobRelease(comm, job);
}

void papDeviceCommFree(struct papComm* comm) {
  pthread_mutex_lock(&comm->devLock);
  struct papDevState* st = comm->dev;
  comm->dev = NULL;
  pthread_mutex_unlock(&comm->devLock);
  if (st == NULL) return;
  /* Release any stream still waiting, then hand the pinned memory to the spares (never to
   * cudaFreeHost: it waits for the whole device, and destroy or abort must not hang on
   * streams held by something else). The word page is reused only when every block's
   * event has completed, that is, when every stream has passed its waits; otherwise it
   * stays as it is, holding the final done value for late streams. */
  atomic_store_explicit((_Atomic uint64_t*)&st->words[DEV_DONE_WORD], st->nextSeq,
                        memory_order_release);
  int pending = 0;
  pthread_mutex_lock(&spareLock);
  while (st->stages) {
    struct papDevStage* s = st->stages;
    st->stages = s->next;
    if (s->poisoned) { /* nothing says when its stream is done with it: leave it */
      pending++;
      free(s);
      continue;
    }
    if (cudaEventQuery(s->done) != cudaSuccess) pending++;
    atomic_store_explicit(&s->busy, 0, memory_order_relaxed);
    s->next = spareStages;
    spareStages = s;
  }
  (void)cudaGetLastError();
  struct spareWords* sw = NULL;
  if (pending == 0 && papCalloc(&sw, 1) == papcclSuccess) {
    sw->words = st->words;
    sw->wordsDev = st->wordsDev;
    sw->ctx = st->ctx;
    sw->next = spareWordPages;
    spareWordPages = sw;
  }
  pthread_mutex_unlock(&spareLock);
  if (pending)
    PAP_INFO(PAP_LOG_ALLOC, "rank %d: %d staging block(s) still in use by a stream at destroy",
             comm->rank, pending);
  free(st);
}

#endif /* PAPCCL_HAVE_CUDA */
