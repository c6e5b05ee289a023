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
 * Staging goes through pinned host memory for now: every transport and every PAP plan work
 * unchanged on it. Peer device memory through CUDA IPC and reductions in the GPU kernels
 * are the next step (docs/ARCHITECTURE.md, "Kernels" and "Transports"). */
#include "cuda/device.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "alloc.h"
#include "check.h"
#include "enqueue/enqueue.h"
#include "futex.h"
#include "kernels/kernels.h"
#include "log.h"
#include "param.h"

#ifndef PAPCCL_HAVE_CUDA

int papDeviceAvailable(void) {
  return 0;
}
int papDeviceCurrent(void) {
  return -1;
}
int papDeviceOpNeedsStream(const struct papOpDesc* d) {
  (void)d;
  return 0;
}
papcclResult_t papDeviceCheckStream(struct CUstream_st* stream) {
  (void)stream;
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

/* Arrival words: a ring indexed by the arrival number, so that ops of one comm on several
 * streams never see each other's writes. The done word is single: jobs finish in order. */
#define DEV_ARRIVE_SLOTS 1024
#define DEV_WORDS (DEV_ARRIVE_SLOTS + 8)
#define DEV_DONE_WORD DEV_ARRIVE_SLOTS
/* Staging blocks are at least this big, so that small ops reuse them. */
#define DEV_STAGE_MIN (1u << 20)

/* cuStreamWriteValue64 / cuStreamWaitValue64 (CUresult is an int-sized enum). */
typedef int (*cuStreamValue64Fn)(struct CUstream_st* stream, unsigned long long addr,
                                 unsigned long long value, unsigned int flags);
#define CU_WAIT_GEQ 0x0
#define CU_WRITE_DEFAULT 0x0

struct papDevStage {
  struct papDevStage* next;
  void* ptr; /* pinned host memory */
  size_t bytes;
  cudaEvent_t done; /* recorded on the user's stream after the copies back */
  _Atomic int busy; /* set by the API thread, cleared by the progress thread */
};

struct papDevState {
  uint64_t* words; /* pinned, mapped: DEV_WORDS words */
  unsigned long long wordsDev; /* their device address */
  uint64_t nextSeq; /* last arrival number handed out */
  struct papDevStage* stages; /* the pool */
};

static pthread_once_t devOnce = PTHREAD_ONCE_INIT;
static int devAvailable;
static cuStreamValue64Fn cuWrite64, cuWait64;

/* CUDA cannot be used in a child forked after the parent initialized it: its ops take the
 * host path (device buffers there are an error the CUDA runtime reports). */
static void devForkChild(void) {
  devAvailable = 0;
  cuWrite64 = cuWait64 = NULL;
}

static void devInitOnce(void) {
  int n = 0;
  cudaError_t err = cudaGetDeviceCount(&n);
  if (err != cudaSuccess || n == 0) {
    (void)cudaGetLastError();
    PAP_INFO(PAP_LOG_INIT, "GPU support is off: %s; host buffers only",
             err != cudaSuccess ? cudaGetErrorString(err) : "no GPU found");
    return;
  }
  devAvailable = 1;
  pthread_atfork(NULL, NULL, devForkChild);
  const char* why = "PAPCCL_CUDA_MEMOPS=0";
  if (papParamCudaMemops()) {
    enum cudaDriverEntryPointQueryResult q1 = cudaDriverEntryPointSymbolNotFound, q2 = q1;
    void *w = NULL, *v = NULL;
    if (cudaGetDriverEntryPointByVersion("cuStreamWriteValue64", &w, 12000, cudaEnableDefault,
                                         &q1) == cudaSuccess &&
        cudaGetDriverEntryPointByVersion("cuStreamWaitValue64", &v, 12000, cudaEnableDefault,
                                         &q2) == cudaSuccess &&
        q1 == cudaDriverEntryPointSuccess && q2 == cudaDriverEntryPointSuccess) {
      cuWrite64 = (cuStreamValue64Fn)w;
      cuWait64 = (cuStreamValue64Fn)v;
    } else {
      (void)cudaGetLastError();
      why = "the driver offers no stream memory operations";
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

int papDeviceOpNeedsStream(const struct papOpDesc* d) {
  return (d->sendBytes && onGpu(d->sendbuff)) || (d->recvBytes && onGpu(d->recvbuff));
}

static papcclResult_t cudaFail(const char* what, cudaError_t err) {
  PAP_WARN("%s failed: %s (%s)", what, cudaGetErrorString(err), cudaGetErrorName(err));
  (void)cudaGetLastError();
  return papcclUnhandledCudaError;
}
#define CUDA_CHECK(call) \
  do { \
    cudaError_t e_ = (call); \
    if (e_ != cudaSuccess) return cudaFail(#call, e_); \
  } while (0)

static papcclResult_t devStateGet(struct papComm* comm, struct papDevState** out) {
  if (comm->dev == NULL) {
    struct papDevState* st = NULL;
    PAP_CHECK(papCalloc(&st, 1));
    void* words = NULL;
    cudaError_t err = cudaHostAlloc(&words, DEV_WORDS * sizeof(uint64_t),
                                    cudaHostAllocMapped | cudaHostAllocPortable);
    if (err != cudaSuccess) {
      free(st);
      return cudaFail("cudaHostAlloc of the stream words", err);
    }
    memset(words, 0, DEV_WORDS * sizeof(uint64_t));
    void* dptr = NULL;
    err = cudaHostGetDevicePointer(&dptr, words, 0);
    if (err != cudaSuccess) {
      cudaFreeHost(words);
      free(st);
      return cudaFail("cudaHostGetDevicePointer of the stream words", err);
    }
    st->words = (uint64_t*)words;
    st->wordsDev = (unsigned long long)(uintptr_t)dptr;
    comm->dev = st;
  }
  *out = comm->dev;
  return papcclSuccess;
}

/* A free staging block of at least `bytes` (its last use finished on its stream). */
static papcclResult_t stageAcquire(struct papDevState* st, size_t bytes, struct papDevStage** out) {
  for (struct papDevStage* s = st->stages; s; s = s->next) {
    if (s->bytes < bytes || atomic_load_explicit(&s->busy, memory_order_acquire)) continue;
    cudaError_t q = cudaEventQuery(s->done);
    if (q == cudaErrorNotReady) continue;
    if (q != cudaSuccess) return cudaFail("cudaEventQuery on a staging block", q);
    atomic_store_explicit(&s->busy, 1, memory_order_relaxed);
    *out = s;
    return papcclSuccess;
  }
  struct papDevStage* s = NULL;
  PAP_CHECK(papCalloc(&s, 1));
  size_t sz = bytes < DEV_STAGE_MIN ? DEV_STAGE_MIN : (bytes + 4095) & ~(size_t)4095;
  cudaError_t err = cudaHostAlloc(&s->ptr, sz, cudaHostAllocPortable);
  if (err == cudaSuccess) err = cudaEventCreateWithFlags(&s->done, cudaEventDisableTiming);
  if (err != cudaSuccess) {
    if (s->ptr) cudaFreeHost(s->ptr);
    free(s);
    return cudaFail("allocating pinned staging", err);
  }
  PAP_INFO(PAP_LOG_ALLOC, "pinned staging block of %zu bytes", sz);
  s->bytes = sz;
  atomic_store_explicit(&s->busy, 1, memory_order_relaxed);
  s->next = st->stages;
  st->stages = s;
  *out = s;
  return papcclSuccess;
}

static papcclResult_t streamWrite(struct papDevState* st, struct CUstream_st* stream, int word,
                                  uint64_t value) {
  unsigned long long addr = st->wordsDev + (unsigned long long)word * sizeof(uint64_t);
  if (cuWrite64) {
    int r = cuWrite64(stream, addr, value, CU_WRITE_DEFAULT);
    if (r != 0) {
      PAP_WARN("cuStreamWriteValue64 failed: CUresult %d", r);
      return papcclUnhandledCudaError;
    }
    return papcclSuccess;
  }
  return papKernStreamWrite64((uint64_t*)(uintptr_t)addr, value, stream);
}

static papcclResult_t streamWait(struct papDevState* st, struct CUstream_st* stream, int word,
                                 uint64_t value) {
  unsigned long long addr = st->wordsDev + (unsigned long long)word * sizeof(uint64_t);
  if (cuWait64) {
    int r = cuWait64(stream, addr, value, CU_WAIT_GEQ);
    if (r != 0) {
      PAP_WARN("cuStreamWaitValue64 failed: CUresult %d", r);
      return papcclUnhandledCudaError;
    }
    return papcclSuccess;
  }
  return papKernStreamWait64((const uint64_t*)(uintptr_t)addr, value, stream);
}

/* Lays the op's buffers onto one staging block: overlapping user ranges (in place,
 * including the offset layouts of AllGather and ReduceScatter) keep their overlap. */
static void stageLayout(struct papOpDesc* op, void* base, size_t* spanOut) {
  uintptr_t s = (uintptr_t)op->userSend, r = (uintptr_t)op->userRecv;
  size_t sb = op->sendBytes, rb = op->recvBytes;
  int overlap = sb && rb && s < r + rb && r < s + sb;
  if (overlap) {
    uintptr_t lo = s < r ? s : r;
    uintptr_t hi = s + sb > r + rb ? s + sb : r + rb;
    op->sendbuff = (char*)base + (s - lo);
    op->recvbuff = (char*)base + (r - lo);
    *spanOut = hi - lo;
  } else {
    op->sendbuff = sb ? base : NULL;
    op->recvbuff = rb ? (char*)base + ((sb + 255) & ~(size_t)255) : NULL;
    *spanOut = ((sb + 255) & ~(size_t)255) + rb;
  }
}

static size_t stageSpan(const struct papOpDesc* op) {
  struct papOpDesc tmp = *op;
  size_t span = 0;
  stageLayout(&tmp, NULL, &span);
  return span;
}

papcclResult_t papDeviceCheckStream(struct CUstream_st* stream) {
  enum cudaStreamCaptureStatus cap = cudaStreamCaptureStatusNone;
  CUDA_CHECK(cudaStreamIsCapturing((cudaStream_t)stream, &cap));
  if (cap != cudaStreamCaptureStatusNone) {
    PAP_WARN(
        "the stream is being captured into a CUDA graph: papccl cannot yet record "
        "collectives into graphs; run them outside the capture");
    return papcclInvalidUsage;
  }
  return papcclSuccess;
}

papcclResult_t papDeviceSubmit(struct papComm* comm, struct papOpDesc* ops, int nops) {
  struct CUstream_st* stream = ops[0].stream;
  for (int i = 1; i < nops; i++) {
    if (ops[i].stream != stream) {
      PAP_WARN(
          "a group gives rank %d's device operations two streams (%p, %p): papccl needs "
          "one stream per communicator within a group",
          comm->rank, (void*)stream, (void*)ops[i].stream);
      return papcclInvalidUsage;
    }
  }
  PAP_CHECK(papDeviceCheckStream(stream));
  int prevDev = -1;
  if (comm->cudaDev >= 0 && cudaGetDevice(&prevDev) == cudaSuccess && prevDev != comm->cudaDev)
    CUDA_CHECK(cudaSetDevice(comm->cudaDev));
  else
    prevDev = -1;

  papcclResult_t res = papcclSuccess;
  struct papJob* job = NULL;
  pthread_mutex_lock(&comm->devLock);
  struct papDevState* st = NULL;
  PAP_CHECK_GOTO(devStateGet(comm, &st), res, out);
  PAP_CHECK_GOTO(papCalloc(&job, 1), res, out);
  PAP_CHECK_GOTO(papCalloc(&job->ops, (size_t)nops), res, out);
  PAP_CHECK_GOTO(papCalloc(&job->stages, (size_t)nops), res, out);
  job->kind = PAP_JOB_DEVICE;
  for (int i = 0; i < nops; i++) {
    struct papOpDesc* op = &job->ops[i];
    *op = ops[i];
    op->userSend = op->sendbuff;
    op->userRecv = op->recvbuff;
    size_t span = stageSpan(op);
    struct papDevStage* stage = NULL;
    PAP_CHECK_GOTO(stageAcquire(st, span ? span : 1, &stage), res, out);
    job->stages[job->nstages++] = stage;
    stageLayout(op, stage->ptr, &span);
    if (op->sendBytes) {
      cudaError_t e = cudaMemcpyAsync((void*)op->sendbuff, op->userSend, op->sendBytes,
                                      cudaMemcpyDefault, (cudaStream_t)stream);
      if (e != cudaSuccess) {
        res = cudaFail("cudaMemcpyAsync of the input into staging", e);
        goto out;
      }
    }
  }
  job->devSeq = ++st->nextSeq;
  job->nops = nops;
  PAP_CHECK_GOTO(streamWrite(st, stream, (int)(job->devSeq % DEV_ARRIVE_SLOTS), job->devSeq), res,
                 out);
  res = streamWait(st, stream, DEV_DONE_WORD, job->devSeq);
  if (res != papcclSuccess) {
    /* The arrival is on the stream but nothing holds it: run the op anyway, so that the
     * other ranks are not left waiting; the result is not copied back. */
    papCommSetError(comm, res);
  } else {
    for (int i = 0; i < nops; i++) {
      struct papOpDesc* op = &job->ops[i];
      cudaError_t e = cudaSuccess;
      if (op->recvBytes)
        e = cudaMemcpyAsync(op->userRecv, op->recvbuff, op->recvBytes, cudaMemcpyDefault,
                            (cudaStream_t)stream);
      if (e == cudaSuccess) e = cudaEventRecord(job->stages[i]->done, (cudaStream_t)stream);
      if (e != cudaSuccess && res == papcclSuccess) {
        res = cudaFail("enqueueing the copy of the result", e);
        papCommSetError(comm, res);
      }
    }
  }
  pthread_mutex_unlock(&comm->devLock);
  papProgressSubmit(comm, job); /* from here the progress thread owns the job */
  if (prevDev >= 0) cudaSetDevice(prevDev);
  return res;

out:
  /* The op took its sequence number: the other ranks will run it, this one cannot. */
  papCommSetError(comm, res);
  if (job) {
    for (int i = 0; i < job->nstages; i++)
      atomic_store_explicit(&job->stages[i]->busy, 0, memory_order_release);
    free(job->stages);
    free(job->ops);
    free(job);
  }
  pthread_mutex_unlock(&comm->devLock);
  if (prevDev >= 0) cudaSetDevice(prevDev);
  return res;
}

static void jobRelease(struct papComm* comm, struct papJob* job) {
  struct papDevState* st = comm->dev;
  /* Jobs leave in order, so the done word only grows; the stream's wait sees it. */
  atomic_store_explicit((_Atomic uint64_t*)&st->words[DEV_DONE_WORD], job->devSeq,
                        memory_order_release);
  for (int i = 0; i < job->nstages; i++)
    atomic_store_explicit(&job->stages[i]->busy, 0, memory_order_release);
}

papcclResult_t papDeviceRunJob(struct papComm* comm, struct papJob* job) {
  struct papDevState* st = comm->dev;
  _Atomic uint64_t* word = (_Atomic uint64_t*)&st->words[job->devSeq % DEV_ARRIVE_SLOTS];
  /* The stream may be late by any amount (that is the arrival pattern): poll briefly, then
   * sleep in growing steps up to 200 us, never burning a core. */
  long sleepNs = 2000;
  int spins = 0;
  papcclResult_t res = papcclSuccess;
  while (atomic_load_explicit(word, memory_order_acquire) != job->devSeq) {
    if (atomic_load_explicit(&comm->abortFlag, memory_order_acquire)) {
      res = papcclRemoteError;
      break;
    }
    if (++spins < 200) continue;
    struct timespec ts = {0, sleepNs};
    nanosleep(&ts, NULL);
    if (sleepNs < 200000) sleepNs *= 2;
  }
  if (res == papcclSuccess) {
    uint64_t now = papNowNs();
    for (int i = 0; i < job->nops; i++)
      job->ops[i].arr.tArr = now; /* the rank arrives when its stream does */
    res = papRunOps(job->ops, job->nops);
  }
  jobRelease(comm, job);
  free(job->stages);
  job->stages = NULL;
  return res;
}

void papDeviceDropJob(struct papComm* comm, struct papJob* job) {
  if (comm->dev) jobRelease(comm, job);
  free(job->stages);
  job->stages = NULL;
}

void papDeviceCommFree(struct papComm* comm) {
  struct papDevState* st = comm->dev;
  if (st == NULL) return;
  /* Release any stream still waiting (an aborted comm), then let the streams pass the
   * staging before it is freed: cudaFreeHost waits for the device. */
  atomic_store_explicit((_Atomic uint64_t*)&st->words[DEV_DONE_WORD], st->nextSeq,
                        memory_order_release);
  while (st->stages) {
    struct papDevStage* s = st->stages;
    st->stages = s->next;
    cudaEventSynchronize(s->done);
    cudaEventDestroy(s->done);
    cudaFreeHost(s->ptr);
    free(s);
  }
  cudaFreeHost(st->words);
  (void)cudaGetLastError();
  free(st);
  comm->dev = NULL;
}

#endif /* PAPCCL_HAVE_CUDA */
