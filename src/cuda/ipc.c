/* SPDX-License-Identifier: Apache-2.0 */
/* CUDA IPC among the ranks of one host (docs/GPU-IPC.md): a device arena per rank that every
 * other rank maps, and the device steps (copies and reduction kernels on an internal stream,
 * completion by events) that the IPC allreduce (src/algo/arena_colls.c) runs over them. */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include "alloc.h"
#include "bootstrap.h"
#include "check.h"
#include "device.h"
#include "futex.h"
#include "log.h"
#include "param.h"

#ifndef PAPCCL_HAVE_CUDA

papcclResult_t papIpcCommInit(struct papComm* comm) {
  (void)comm;
  return papcclSuccess;
}
void papIpcCommFree(struct papComm* comm) {
  (void)comm;
}
size_t papIpcHeldBytes(const struct papComm* comm) {
  (void)comm;
  return 0;
}

#else /* PAPCCL_HAVE_CUDA */

#include <cuda_runtime_api.h>

#include "kernels.h"

/* What each rank tells the others at init. */
struct ipcInfo {
  int32_t ok; /* this rank has an arena to share */
  int32_t dev;
  uint64_t proc; /* random per process: equal means the same process (pids may repeat in
                    * other PID namespaces sharing this host's shared memory) */
  uint64_t bytes;
  uint64_t minBytes; /* PAPCCL_CUDA_IPC_MIN_BYTES here: every rank takes the largest */
  uint64_t ptr; /* the arena in its own process */
  cudaIpcMemHandle_t handle;
};

struct papIpcState {
  struct papComm* comm;
  char** arena; /* [nranks]: mapped peers', this rank's own */
  uint8_t* opened; /* [nranks]: arena[p] was opened with cudaIpcOpenMemHandle */
  void* mine;
  size_t mineBytes;
  void* mineCtx; /* the context it belongs to */
  cudaStream_t stream;
  cudaEvent_t* events; /* free events */
  int nevents, capEvents;
};

/* An arena is never given back to CUDA while the process runs (cudaFree waits for the whole
 * device, which can include streams held by other ranks' collectives): a destroyed comm's
 * arena waits here for the next comm on the same device. */
struct spareArena {
  struct spareArena* next;
  void* ptr;
  size_t bytes;
  void* ctx;
};
static pthread_mutex_t spareLock = PTHREAD_MUTEX_INITIALIZER;
static struct spareArena* spares;

static void* arenaTake(size_t bytes, void* ctx) {
  if (ctx == NULL) return NULL;
  pthread_mutex_lock(&spareLock);
  void* p = NULL;
  for (struct spareArena** a = &spares; *a; a = &(*a)->next) {
    if ((*a)->ctx == ctx && (*a)->bytes == bytes) {
      struct spareArena* s = *a;
      *a = s->next;
      p = s->ptr;
      free(s);
      break;
    }
  }
  pthread_mutex_unlock(&spareLock);
  return p;
}

static void arenaGive(void* ptr, size_t bytes, void* ctx) {
  struct spareArena* s = (struct spareArena*)calloc(1, sizeof(*s));
  if (s == NULL || ctx == NULL) { /* stays allocated, unreachable: a leak of one arena */
    free(s);
    return;
  }
  s->ptr = ptr;
  s->bytes = bytes;
  s->ctx = ctx;
  pthread_mutex_lock(&spareLock);
  s->next = spares;
  spares = s;
  pthread_mutex_unlock(&spareLock);
}

#define cudaFail(what, err) papDeviceCudaFail(what, (int)(err))

/* ---- Device steps ------------------------------------------------------------------------ */

static papcclResult_t ipcPost(void* ctx, struct papStep* s) {
  struct papIpcState* st = (struct papIpcState*)ctx;
  struct papDevSaved sv = papDeviceEnter(st->comm);
  papcclResult_t res = papcclSuccess;
  cudaError_t err = cudaSuccess;
  if (s->kind == PAP_STEP_DCOPY) {
    err = cudaMemcpyAsync(s->dst, s->src, s->bytes, cudaMemcpyDefault, st->stream);
    if (err != cudaSuccess) res = cudaFail("cudaMemcpyAsync (CUDA IPC allreduce)", err);
  } else {
    size_t esz = papKernTypeSize((papcclDataType_t)s->dtype);
    res = papKernReduceLaunch(s->dst, s->src, s->src2, s->bytes / esz, (papcclDataType_t)s->dtype,
                              (enum papRedKind)s->red, (struct CUstream_st*)st->stream);
  }
  cudaEvent_t ev = NULL;
  if (res == papcclSuccess) {
    if (st->nevents > 0) {
      ev = st->events[--st->nevents];
    } else {
      err = cudaEventCreateWithFlags(&ev, cudaEventDisableTiming);
      if (err != cudaSuccess) res = cudaFail("cudaEventCreateWithFlags", err);
    }
  }
  if (res == papcclSuccess) {
    err = cudaEventRecord(ev, st->stream);
    if (err != cudaSuccess) {
      res = cudaFail("cudaEventRecord (CUDA IPC allreduce)", err);
      cudaEventDestroy(ev);
      ev = NULL;
    }
  }
  /* Work of this step may be queued that no event tracks: it must finish before the op's
   * buffers go back to the caller. */
  if (res != papcclSuccess) (void)cudaStreamSynchronize(st->stream);
  (void)cudaGetLastError();
  papDeviceLeave(sv);
  s->devReq = ev;
  return res;
}

static void eventPut(struct papIpcState* st, cudaEvent_t ev) {
  if (st->nevents == st->capEvents) {
    int ncap = st->capEvents ? st->capEvents * 2 : 64;
    cudaEvent_t* ne = (cudaEvent_t*)realloc(st->events, sizeof(*ne) * (size_t)ncap);
    if (ne == NULL) {
      cudaEventDestroy(ev);
      return;
    }
    st->events = ne;
    st->capEvents = ncap;
  }
  st->events[st->nevents++] = ev;
}

static papcclResult_t ipcTest(void* ctx, struct papStep* s, int* doneOut) {
  struct papIpcState* st = (struct papIpcState*)ctx;
  cudaEvent_t ev = (cudaEvent_t)s->devReq;
  *doneOut = 0;
  struct papDevSaved sv = papDeviceEnter(st->comm);
  cudaError_t err = cudaEventQuery(ev);
  papDeviceLeave(sv);
  if (err == cudaErrorNotReady) {
    (void)cudaGetLastError();
    return papcclSuccess;
  }
  if (err != cudaSuccess) return cudaFail("a copy or reduction of the CUDA IPC allreduce", err);
  eventPut(st, ev);
  *doneOut = 1;
  return papcclSuccess;
}

static void ipcDrop(void* ctx, struct papStep* s) {
  struct papIpcState* st = (struct papIpcState*)ctx;
  if (s->devReq) eventPut(st, (cudaEvent_t)s->devReq); /* re-recorded before any reuse */
}

/* Waits for everything posted on the internal stream: it waits on nothing outside itself. */
static void ipcQuiesce(void* ctx) {
  struct papIpcState* st = (struct papIpcState*)ctx;
  struct papDevSaved sv = papDeviceEnter(st->comm);
  (void)cudaStreamSynchronize(st->stream);
  (void)cudaGetLastError();
  papDeviceLeave(sv);
}

static const struct papDevStepOps ipcOps = {ipcPost, ipcTest, ipcDrop, ipcQuiesce};

/* ---- Setup ------------------------------------------------------------------------------- */

static pthread_once_t tokenOnce = PTHREAD_ONCE_INIT;
static uint64_t token;
static void tokenInit(void) {
  if (getrandom(&token, sizeof(token), 0) != (ssize_t)sizeof(token))
    token = ((uint64_t)getpid() << 32) ^ (uint64_t)papNowNs();
  token ^= (uint64_t)(uintptr_t)&token; /* differs between processes with ASLR */
}
/* Random per process. (A child forked from a process that used CUDA has GPU support off, so it
 * never needs one of its own.) */
static uint64_t processToken(void) {
  pthread_once(&tokenOnce, tokenInit);
  return token;
}

static void stateFree(struct papIpcState* st) {
  if (st == NULL) return;
  int any = st->mine != NULL || st->stream != NULL || st->nevents > 0;
  for (int p = 0; st->opened && p < st->comm->nranks; p++)
    any |= st->opened[p];
  if (!any) { /* nothing was made: no CUDA call at all */
    free(st->arena);
    free(st->opened);
    free(st);
    return;
  }
  struct papDevSaved sv = papDeviceEnter(st->comm);
  /* Nothing may still read a peer's arena when it is unmapped. */
  if (st->stream) (void)cudaStreamSynchronize(st->stream);
  for (int p = 0; st->arena && p < st->comm->nranks; p++)
    if (st->opened[p]) cudaIpcCloseMemHandle(st->arena[p]);
  for (int i = 0; i < st->nevents; i++)
    cudaEventDestroy(st->events[i]);
  if (st->stream) cudaStreamDestroy(st->stream);
  (void)cudaGetLastError();
  papDeviceLeave(sv);
  if (st->mine) arenaGive(st->mine, st->mineBytes, st->mineCtx);
  free(st->events);
  free(st->arena);
  free(st->opened);
  free(st);
}

/* This rank's part: arena, handle and stream. Returns why not, or NULL. */
static const char* localSetup(struct papComm* comm, struct papIpcState* st, struct ipcInfo* me) {
  if (!papParamCudaIpc()) return "PAPCCL_CUDA_IPC=0";
  if (!papDeviceContextExists()) return "this process does not use the GPU";
  if (comm->cudaDev < 0) return "the communicator has no device";
  if (comm->nranks < 2) return "a single rank";
  if (strcmp(comm->tops->name, "shm") != 0) return "the ranks are not all on this host";
  size_t bytes = (size_t)papParamCudaIpcMb() << 20;
  struct papDevSaved sv = papDeviceEnter(comm);
  const char* why = NULL;
  /* Before any collective of this comm can hold a stream (see papKernPreload). */
  if (papKernPreload() != papcclSuccess) why = "the reduction kernels could not be loaded";
  st->mineCtx = papDeviceCurrentCtx();
  if (why == NULL) st->mine = arenaTake(bytes, st->mineCtx);
  if (why == NULL && st->mine == NULL && cudaMalloc(&st->mine, bytes) != cudaSuccess) {
    st->mine = NULL;
    why = "cudaMalloc of the arena failed";
  }
  if (st->mine) st->mineBytes = bytes;
  if (why == NULL && cudaIpcGetMemHandle(&me->handle, st->mine) != cudaSuccess)
    why = "cudaIpcGetMemHandle failed";
  if (why == NULL && cudaStreamCreateWithFlags(&st->stream, cudaStreamNonBlocking) != cudaSuccess) {
    st->stream = NULL;
    why = "cudaStreamCreateWithFlags failed";
  }
  (void)cudaGetLastError();
  papDeviceLeave(sv);
  if (why) return why;
  me->ok = 1;
  me->bytes = bytes;
  me->ptr = (uint64_t)(uintptr_t)st->mine;
  me->dev = comm->cudaDev;
  return NULL;
}

/* Maps peer p's arena (or takes its address: the same process). */
static const char* mapPeer(struct papComm* comm, struct papIpcState* st, const struct ipcInfo* in,
                           int p) {
  if (in[p].proc == in[comm->rank].proc) {
    if (in[p].dev != comm->cudaDev) {
      int can = 0;
      if (cudaDeviceCanAccessPeer(&can, comm->cudaDev, in[p].dev) != cudaSuccess || !can)
        return "two ranks of this process are on devices without peer access";
      cudaError_t e = cudaDeviceEnablePeerAccess(in[p].dev, 0);
      if (e != cudaSuccess && e != cudaErrorPeerAccessAlreadyEnabled)
        return "cudaDeviceEnablePeerAccess failed";
      (void)cudaGetLastError();
    }
    st->arena[p] = (char*)(uintptr_t)in[p].ptr;
    return NULL;
  }
  void* ptr = NULL;
  if (cudaIpcOpenMemHandle(&ptr, in[p].handle, cudaIpcMemLazyEnablePeerAccess) != cudaSuccess)
    return "cudaIpcOpenMemHandle of a peer's arena failed";
  st->arena[p] = (char*)ptr;
  st->opened[p] = 1;
  return NULL;
}

papcclResult_t papIpcCommInit(struct papComm* comm) {
  const int n = comm->nranks, r = comm->rank;
  papcclResult_t res = papcclSuccess;
  struct ipcInfo* info = NULL;
  struct papIpcState* st = NULL;
  int32_t* mapped = NULL;
  const char* why = NULL;
  PAP_CHECK(papCalloc(&info, (size_t)n));
  PAP_CHECK_GOTO(papCalloc(&mapped, (size_t)n), res, out);
  PAP_CHECK_GOTO(papCalloc(&st, 1), res, out);
  st->comm = comm;
  PAP_CHECK_GOTO(papCalloc(&st->arena, (size_t)n), res, out);
  PAP_CHECK_GOTO(papCalloc(&st->opened, (size_t)n), res, out);
  info[r].proc = processToken();
  info[r].minBytes = (uint64_t)papParamCudaIpcMinBytes();
  /* Every rank takes part in both exchanges, whatever its own answer. */
  if (papDeviceAvailable())
    why = localSetup(comm, st, &info[r]);
  else
    why = "no GPU support in this process";
  PAP_CHECK_GOTO(papBootstrapAllGather(comm->bs, info, sizeof(*info)), res, out);
  size_t bytes = info[r].bytes, minBytes = 0;
  for (int p = 0; p < n; p++) {
    if (!info[p].ok && why == NULL) why = "a rank has no GPU arena (its log says why)";
    if (info[p].bytes < bytes) bytes = info[p].bytes;
    if (info[p].minBytes > minBytes) minBytes = info[p].minBytes;
  }
  if (why == NULL) {
    struct papDevSaved sv = papDeviceEnter(comm);
    st->arena[r] = (char*)st->mine;
    for (int p = 0; p < n && why == NULL; p++)
      if (p != r) why = mapPeer(comm, st, info, p);
    (void)cudaGetLastError();
    papDeviceLeave(sv);
  }
  mapped[r] = why == NULL;
  PAP_CHECK_GOTO(papBootstrapAllGather(comm->bs, mapped, sizeof(*mapped)), res, out);
  for (int p = 0; p < n && why == NULL; p++)
    if (!mapped[p]) why = "a rank could not map every peer's arena (its log says why)";
  if (why != NULL) {
    PAP_INFO(PAP_LOG_INIT, "CUDA IPC off for this communicator: %s", why);
    goto out;
  }
  comm->engine.dev.ops = &ipcOps;
  comm->engine.dev.ctx = st;
  comm->engine.dev.arena = st->arena;
  comm->engine.dev.bytes = bytes;
  comm->engine.dev.minBytes = minBytes;
  comm->ipc = st;
  st = NULL;
  PAP_INFO(PAP_LOG_INIT, "CUDA IPC on: %d ranks on device memory, %zu MiB arena each", n,
           bytes >> 20);
out:
  stateFree(st);
  free(mapped);
  free(info);
  return res;
}

size_t papIpcHeldBytes(const struct papComm* comm) {
  return comm->ipc != NULL ? comm->ipc->mineBytes : 0;
}

void papIpcCommFree(struct papComm* comm) {
  struct papIpcState* st = comm->ipc;
  if (st == NULL) return;
  memset(&comm->engine.dev, 0, sizeof(comm->engine.dev));
  comm->ipc = NULL;
  stateFree(st);
}

#endif /* PAPCCL_HAVE_CUDA */
