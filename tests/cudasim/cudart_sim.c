/* SPDX-License-Identifier: Apache-2.0 */
/* A test-only stand-in for the CUDA runtime (libcudart.so.13) and the driver entry points
 * papccl fetches through it, so that papccl's device path runs on a machine without a GPU.
 * It implements what papccl and its GPU tests call, with CUDA's documented semantics, and is
 * strict where CUDA is strict (docs/TESTING.md, "The CUDA stand-in"):
 *   - device memory is host memory, but the address a caller gets is an inaccessible
 *     reservation: host code that dereferences a device pointer faults, as on a real GPU.
 *     Streams work on a second mapping of the same memory (a memfd, so that an IPC handle
 *     opens it in another process). cudaFree waits for the device, then poisons the
 *     memory (PROT_NONE, address kept reserved): a late access from a stream faults, a late
 *     access from a kernel is a sticky cudaErrorIllegalAddress;
 *   - streams are in-order queues, each run by its own host thread; the legacy default stream
 *     orders against every blocking stream; events, stream waits on events, stream memory
 *     operations (write, wait >=), graph capture (recorded, never run);
 *   - IPC handles open only in another process, once per process until closed;
 *   - kernels are the ones papccl's reduce.cu registers, run on the host with the same
 *     functors (kernels/reduce_ops.h); any other kernel is cudaErrorInvalidDeviceFunction.
 * Never installed, never linked: tests find it first on LD_LIBRARY_PATH (suite gpu-sim). */
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "reduce_ops.h"

#define SIM_EXPORT __attribute__((visibility("default")))
#define SIM_MAX_DEVICES 8
#define SIM_QUARANTINE_BYTES (1ull << 30) /* freed memory kept poisoned, at most */

/* ---- errors ------------------------------------------------------------------------------ */

static __thread cudaError_t lastErr = cudaSuccess;
static _Atomic int stickyErr = cudaSuccess; /* a kernel's illegal address: every call fails */

static cudaError_t ret(cudaError_t e) {
  if (e == cudaSuccess) {
    int s = atomic_load(&stickyErr);
    if (s != cudaSuccess) e = (cudaError_t)s;
  }
  if (e != cudaSuccess && e != cudaErrorNotReady) lastErr = e;
  return e;
}

static void simLog(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
static void simLog(const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "cudasim: ");
  vfprintf(stderr, fmt, ap);
  fprintf(stderr, "\n");
  va_end(ap);
}

static uint64_t nowNs(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* ---- devices and contexts ------------------------------------------------------------------ */

static int numDevices(void) {
  static int n = -1;
  if (n < 0) {
    const char* e = getenv("PAPCCL_CUDASIM_DEVICES");
    int v = e ? atoi(e) : 1;
    n = v < 0 ? 0 : v > SIM_MAX_DEVICES ? SIM_MAX_DEVICES : v;
  }
  return n;
}

struct simCtx {
  int dev;
};
static struct simCtx ctxs[SIM_MAX_DEVICES] = {{0}, {1}, {2}, {3}, {4}, {5}, {6}, {7}};
static _Atomic int ctxActive[SIM_MAX_DEVICES];
static __thread struct simCtx* curCtx;
static __thread int curDev; /* the runtime's current device of this thread */

/* The runtime's implicit initialization: the current device's primary context becomes
 * current on this thread. */
static cudaError_t touch(void) {
  if (numDevices() == 0) return cudaErrorNoDevice;
  if (curCtx == NULL) {
    curCtx = &ctxs[curDev];
    atomic_store(&ctxActive[curDev], 1);
  }
  return cudaSuccess;
}

/* ---- memory ---------------------------------------------------------------------------------- */

enum {
  M_DEVICE = 1,
  M_HOST,
  M_MANAGED,
  M_IPC
};

struct simAlloc {
  struct simAlloc* next;
  char* addr; /* what the caller holds */
  char* shadow; /* where streams touch it (== addr for host and managed memory) */
  size_t size; /* as asked */
  size_t mapped; /* rounded to pages */
  int kind;
  int dev;
  int fd; /* memfd of device memory (-1 otherwise) */
  uint64_t id;
  int freed; /* poisoned, in quarantine */
  pid_t exportedPid;
  uint64_t exportedId;
};

static pthread_mutex_t memLock = PTHREAD_MUTEX_INITIALIZER;
static struct simAlloc* allocs;
static uint64_t nextId = 1;
static size_t quarantined;

static size_t pageRound(size_t n) {
  size_t pg = (size_t)sysconf(_SC_PAGESIZE);
  return (n + pg - 1) / pg * pg;
}

/* The live allocation holding [p, p+n), by the caller's address (memLock held). */
static struct simAlloc* findLocked(const void* p, size_t n) {
  for (struct simAlloc* a = allocs; a; a = a->next) {
    if (a->freed) continue;
    const char* c = (const char*)p;
    if (c >= a->addr && c < a->addr + (a->size ? a->size : 1)) {
      if (n > (size_t)(a->addr + a->size - c)) return NULL;
      return a;
    }
  }
  return NULL;
}

static int isFreedLocked(const void* p) {
  for (struct simAlloc* a = allocs; a; a = a->next)
    if (a->freed && (const char*)p >= a->addr && (const char*)p < a->addr + a->mapped) return 1;
  return 0;
}

/* Where a stream reads or writes n bytes at p: the shadow of device memory, p itself for other
 * host memory; NULL for freed memory, a range that overruns its allocation, or (kernels and
 * stream memory operations: registered = 1) pageable host memory a GPU cannot reach. */
static void* streamView(const void* p, size_t n, int registered) {
  pthread_mutex_lock(&memLock);
  struct simAlloc* a = findLocked(p, n);
  void* v = NULL;
  if (a) {
    v = a->shadow + ((const char*)p - a->addr);
  } else if (!registered && !isFreedLocked(p)) {
    v = (void*)p;
    for (struct simAlloc* b = allocs; b; b = b->next) /* an overrun is no host pointer either */
      if (!b->freed && (const char*)p >= b->addr && (const char*)p < b->addr + b->mapped) v = NULL;
  }
  pthread_mutex_unlock(&memLock);
  return v;
}

static void fillGarbage(char* p, size_t n) {
  /* Fresh device memory is not zero on a GPU: code that relies on it fails here too. */
  for (size_t i = 0; i < n; i += 4096)
    memset(p + i, 0xa5, n - i < 4096 ? n - i : 4096);
}

/* Files a new allocation (calloc'd record) and gives it an id. */
static struct simAlloc* addAlloc(char* addr, char* shadow, size_t size, size_t mapped, int kind,
                                 int fd) {
  struct simAlloc* a = calloc(1, sizeof(*a));
  if (a == NULL) return NULL;
  a->addr = addr;
  a->shadow = shadow;
  a->size = size;
  a->mapped = mapped;
  a->kind = kind;
  a->dev = curDev;
  a->fd = fd;
  pthread_mutex_lock(&memLock);
  a->id = nextId++;
  a->next = allocs;
  allocs = a;
  pthread_mutex_unlock(&memLock);
  return a;
}

static cudaError_t newDevice(void** out, size_t size, int kind) {
  size_t mapped = pageRound(size ? size : 1);
  int fd = memfd_create("papccl-cudasim", MFD_CLOEXEC);
  if (fd < 0) return cudaErrorMemoryAllocation;
  if (ftruncate(fd, (off_t)mapped) != 0) {
    close(fd);
    return cudaErrorMemoryAllocation;
  }
  char* shadow = mmap(NULL, mapped, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (shadow == MAP_FAILED) {
    close(fd);
    return cudaErrorMemoryAllocation;
  }
  char* addr = shadow;
  if (kind == M_DEVICE) {
    addr = mmap(NULL, mapped, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (addr == MAP_FAILED) {
      munmap(shadow, mapped);
      close(fd);
      return cudaErrorMemoryAllocation;
    }
  }
  fillGarbage(shadow, mapped);
  if (addAlloc(addr, shadow, size, mapped, kind, fd) == NULL) {
    if (addr != shadow) munmap(addr, mapped);
    munmap(shadow, mapped);
    close(fd);
    return cudaErrorMemoryAllocation;
  }
  *out = addr;
  return cudaSuccess;
}

static cudaError_t newHost(void** out, size_t size) {
  size_t mapped = pageRound(size ? size : 1);
  char* p = mmap(NULL, mapped, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return cudaErrorMemoryAllocation;
  if (addAlloc(p, p, size, mapped, M_HOST, -1) == NULL) {
    munmap(p, mapped);
    return cudaErrorMemoryAllocation;
  }
  *out = p;
  return cudaSuccess;
}

/* Poisons a freed allocation and keeps its addresses reserved, so that neither a late access
 * nor a new allocation at the same address hides the bug; the oldest go past the quarantine
 * bound (memLock held). */
static void poisonLocked(struct simAlloc* a) {
  mprotect(a->shadow, a->mapped, PROT_NONE);
  if (a->addr != a->shadow) munmap(a->shadow, a->mapped); /* the reservation stays */
  if (a->fd >= 0) close(a->fd);
  a->fd = -1;
  a->freed = 1;
  quarantined += a->mapped;
  while (quarantined > SIM_QUARANTINE_BYTES) {
    struct simAlloc **pp = &allocs, **oldest = NULL;
    for (; *pp; pp = &(*pp)->next)
      if ((*pp)->freed) oldest = pp;
    if (oldest == NULL) break;
    struct simAlloc* o = *oldest;
    *oldest = o->next;
    munmap(o->addr, o->mapped);
    quarantined -= o->mapped;
    free(o);
  }
}

/* ---- streams --------------------------------------------------------------------------------- */

enum {
  OP_COPY = 1,
  OP_SET,
  OP_KERNEL,
  OP_RECORD,
  OP_WAITEVENT,
  OP_WRITE64,
  OP_WAIT64
};
enum {
  K_REDUCE = 1,
  K_WRITE,
  K_WAIT,
  K_SPIN,
  K_FILL
};

struct simEvent {
  struct simEvent* nextLive; /* the live handles (qLock) */
  unsigned flags;
  int refs; /* the handle (until cudaEventDestroy) and each queued op naming it; qLock */
  uint64_t recorded; /* records enqueued */
  _Atomic uint64_t reached; /* records the stream has reached */
  uint64_t timeNs;
};
static void eventUnrefLocked(struct simEvent* ev);
static struct simEvent* liveEvents; /* handles not destroyed (qLock) */

struct simStream;
struct simOp {
  struct simOp* next;
  int type;
  /* dependencies (legacy stream semantics): each stream's count of done ops to wait for */
  int ndeps;
  struct simStream** depStream;
  uint64_t* depTarget;
  const void* src;
  void* dst;
  size_t bytes;
  int value;
  /* kernels */
  int kernel, dtype, redOp;
  uint64_t u64;
  float f1, f2;
  const void* a;
  const void* b;
  const char* what; /* the call or kernel, for the log */
  /* events */
  struct simEvent* ev;
  uint64_t evTarget;
};

struct simStream {
  unsigned flags;
  int legacy;
  pthread_t thread;
  int started;
  struct simOp *head, *tail;
  uint64_t enq; /* ops enqueued (under qLock) */
  _Atomic uint64_t done; /* ops completed */
  int destroyed;
  int capturing;
  struct simStream* nextLive;
};

static pthread_mutex_t qLock = PTHREAD_MUTEX_INITIALIZER; /* every queue, one lock */
static pthread_cond_t qCond = PTHREAD_COND_INITIALIZER;
static struct simStream legacyStream = {.legacy = 1};
static struct simStream* liveStreams = &legacyStream; /* the legacy stream is always live */

static void* streamMain(void* arg);

static struct simStream* resolve(cudaStream_t s) {
  if (s == NULL || s == cudaStreamLegacy || s == cudaStreamPerThread) return &legacyStream;
  struct simStream* st = (struct simStream*)s;
  pthread_mutex_lock(&qLock);
  struct simStream* l = liveStreams;
  while (l && l != st)
    l = l->nextLive;
  int ok = l != NULL && !st->destroyed;
  pthread_mutex_unlock(&qLock);
  return ok ? st : NULL;
}

static int startLocked(struct simStream* st) {
  if (st->started) return 0;
  if (pthread_create(&st->thread, NULL, streamMain, st) != 0) return -1;
  pthread_detach(st->thread);
  st->started = 1;
  return 0;
}

/* Queues op on st (takes it); the legacy stream's rules give its dependencies. */
static cudaError_t enqueue(struct simStream* st, struct simOp* op) {
  pthread_mutex_lock(&qLock);
  if (st->capturing) { /* recorded into the graph, never run */
    if (op->ev) eventUnrefLocked(op->ev);
    pthread_mutex_unlock(&qLock);
    free(op);
    return cudaSuccess;
  }
  int cap = 0;
  for (struct simStream* l = liveStreams; l; l = l->nextLive)
    cap++;
  op->depStream = calloc((size_t)cap + 1, sizeof(*op->depStream));
  op->depTarget = calloc((size_t)cap + 1, sizeof(*op->depTarget));
  if (!op->depStream || !op->depTarget) {
    if (op->ev) eventUnrefLocked(op->ev);
    pthread_mutex_unlock(&qLock);
    free(op->depStream);
    free(op->depTarget);
    free(op);
    return cudaErrorMemoryAllocation;
  }
  for (struct simStream* l = liveStreams; l; l = l->nextLive) {
    if (l == st || (l->flags & cudaStreamNonBlocking) || (st->flags & cudaStreamNonBlocking))
      continue;
    if (!st->legacy && !l->legacy) continue; /* blocking streams order only with legacy */
    if (atomic_load(&l->done) < l->enq) {
      op->depStream[op->ndeps] = l;
      op->depTarget[op->ndeps] = l->enq;
      op->ndeps++;
    }
  }
  if (startLocked(st) != 0) {
    if (op->ev) eventUnrefLocked(op->ev);
    pthread_mutex_unlock(&qLock);
    free(op->depStream);
    free(op->depTarget);
    free(op);
    return cudaErrorLaunchOutOfResources;
  }
  op->next = NULL;
  if (st->tail)
    st->tail->next = op;
  else
    st->head = op;
  st->tail = op;
  st->enq++;
  pthread_cond_broadcast(&qCond);
  pthread_mutex_unlock(&qLock);
  return cudaSuccess;
}

static void illegal(const char* what) {
  simLog("%s touched memory that is not (or no longer) the device's: illegal address", what);
  int expect = cudaSuccess;
  atomic_compare_exchange_strong(&stickyErr, &expect, cudaErrorIllegalAddress);
}

static int waitWord(const uint64_t* w, uint64_t v) {
  uint64_t spins = 0;
  while ((int64_t)(__atomic_load_n(w, __ATOMIC_ACQUIRE) - v) < 0) {
    if (atomic_load(&stickyErr) != cudaSuccess) return -1;
    struct timespec ts = {0, spins++ < 100 ? 2000 : 50000};
    nanosleep(&ts, NULL);
  }
  return 0;
}

#define SIM_REDUCE_CASE(dtype, name, T) \
  case dtype: { \
    T* d = (T*)dst; \
    const T* x = (const T*)a; \
    const T* y = (const T*)b; \
    for (size_t i = 0; i < n; i++) { \
      T r; \
      switch (op) { \
      case PAP_RED_SUM: \
        r = papRedSum_##name(x[i], y[i]); \
        break; \
      case PAP_RED_PROD: \
        r = papRedProd_##name(x[i], y[i]); \
        break; \
      case PAP_RED_MAX: \
        r = papRedMax_##name(x[i], y[i]); \
        break; \
      default: \
        r = papRedMin_##name(x[i], y[i]); \
        break; \
      } \
      d[i] = r; \
    } \
    return; \
  }

static void reduceOnHost(void* dst, const void* a, const void* b, size_t n, int dtype, int op) {
  switch (dtype) { PAP_RED_TYPE_LIST(SIM_REDUCE_CASE) default : return; }
}

static size_t eltSize(int dtype) {
#define SIM_SIZE_CASE(dtype, name, T) \
  case dtype: \
    return sizeof(T);
  switch (dtype) {
    PAP_RED_TYPE_LIST(SIM_SIZE_CASE)
  default:
    return 0;
  }
#undef SIM_SIZE_CASE
}

static void runKernel(struct simOp* op) {
  switch (op->kernel) {
  case K_REDUCE: {
    size_t bytes = op->bytes * eltSize(op->dtype);
    void* d = streamView(op->dst, bytes, 1);
    const void* a = streamView(op->a, bytes, 1);
    const void* b = streamView(op->b, bytes, 1);
    if (!d || !a || !b) {
      illegal("reduceKernel");
      return;
    }
    reduceOnHost(d, a, b, op->bytes, op->dtype, op->redOp);
    return;
  }
  case K_SPIN: {
    struct timespec ts = {(time_t)(op->u64 / 1000000000ull), (long)(op->u64 % 1000000000ull)};
    nanosleep(&ts, NULL);
    return;
  }
  case K_FILL: {
    float* p = streamView(op->dst, op->bytes * sizeof(float), 1);
    if (!p) {
      illegal("fillF32Kernel");
      return;
    }
    for (size_t i = 0; i < op->bytes; i++)
      p[i] = op->f1 + op->f2 * (float)(i % 1024);
    return;
  }
  }
}

static void runOp(struct simOp* op) {
  switch (op->type) {
  case OP_COPY: {
    void* d = streamView(op->dst, op->bytes, 0);
    const void* s = streamView(op->src, op->bytes, 0);
    if (!d || !s) {
      illegal("cudaMemcpy");
      return;
    }
    memmove(d, s, op->bytes);
    return;
  }
  case OP_SET: {
    void* d = streamView(op->dst, op->bytes, 1);
    if (!d) {
      illegal("cudaMemset");
      return;
    }
    memset(d, op->value, op->bytes);
    return;
  }
  case OP_KERNEL:
    runKernel(op);
    return;
  case OP_RECORD:
    pthread_mutex_lock(&qLock);
    op->ev->timeNs = nowNs();
    atomic_store(&op->ev->reached, op->evTarget);
    pthread_mutex_unlock(&qLock);
    return;
  case OP_WAITEVENT: {
    pthread_mutex_lock(&qLock);
    while (atomic_load(&op->ev->reached) < op->evTarget && atomic_load(&stickyErr) == cudaSuccess)
      pthread_cond_wait(&qCond, &qLock);
    pthread_mutex_unlock(&qLock);
    return;
  }
  case OP_WRITE64: { /* cuStreamWriteValue64, or the kernel papccl falls back to */
    uint64_t* w = streamView(op->dst, 8, 1);
    if (!w) {
      illegal(op->what);
      return;
    }
    __atomic_store_n(w, op->u64, __ATOMIC_RELEASE);
    return;
  }
  case OP_WAIT64: {
    const uint64_t* w = streamView(op->src, 8, 1);
    if (!w) {
      illegal(op->what);
      return;
    }
    (void)waitWord(w, op->u64);
    return;
  }
  }
}

static void* streamMain(void* arg) {
  struct simStream* st = (struct simStream*)arg;
  pthread_mutex_lock(&qLock);
  for (;;) {
    while (st->head == NULL && !st->destroyed)
      pthread_cond_wait(&qCond, &qLock);
    if (st->head == NULL) break; /* destroyed and drained */
    struct simOp* op = st->head;
    for (int i = 0; i < op->ndeps; i++)
      while (atomic_load(&op->depStream[i]->done) < op->depTarget[i])
        pthread_cond_wait(&qCond, &qLock);
    pthread_mutex_unlock(&qLock);
    if (atomic_load(&stickyErr) == cudaSuccess) runOp(op);
    pthread_mutex_lock(&qLock);
    st->head = op->next;
    if (st->head == NULL) st->tail = NULL;
    atomic_fetch_add(&st->done, 1);
    pthread_cond_broadcast(&qCond);
    if (op->ev) eventUnrefLocked(op->ev);
    free(op->depStream);
    free(op->depTarget);
    free(op);
  }
  /* Unlinked and freed here: the handle was invalid since cudaStreamDestroy. */
  struct simStream** pp = &liveStreams;
  while (*pp && *pp != st)
    pp = &(*pp)->nextLive;
  if (*pp) *pp = st->nextLive;
  pthread_cond_broadcast(&qCond);
  pthread_mutex_unlock(&qLock);
  free(st);
  return NULL;
}

/* Waits until st has done everything queued so far (NULL: every stream). */
static void drain(struct simStream* st) {
  pthread_mutex_lock(&qLock);
  for (;;) {
    int busy = 0;
    for (struct simStream* l = liveStreams; l; l = l->nextLive)
      if ((st == NULL || l == st) && atomic_load(&l->done) < l->enq) busy = 1;
    if (!busy || atomic_load(&stickyErr) != cudaSuccess) break;
    pthread_cond_wait(&qCond, &qLock);
  }
  pthread_mutex_unlock(&qLock);
}

static struct simOp* newOp(int type) {
  struct simOp* op = calloc(1, sizeof(*op));
  if (op) op->type = type;
  return op;
}

/* ---- the runtime API -------------------------------------------------------------------------- */

SIM_EXPORT cudaError_t cudaGetDeviceCount(int* count) {
  if (count == NULL) return ret(cudaErrorInvalidValue);
  *count = numDevices();
  return ret(*count ? cudaSuccess : cudaErrorNoDevice);
}

SIM_EXPORT cudaError_t cudaSetDevice(int device) {
  if (device < 0 || device >= numDevices()) return ret(cudaErrorInvalidDevice);
  curDev = device;
  curCtx = &ctxs[device];
  atomic_store(&ctxActive[device], 1);
  return ret(cudaSuccess);
}

SIM_EXPORT cudaError_t cudaGetDevice(int* device) {
  if (device == NULL) return ret(cudaErrorInvalidValue);
  if (numDevices() == 0) return ret(cudaErrorNoDevice);
  *device = curDev;
  return ret(cudaSuccess);
}

SIM_EXPORT cudaError_t cudaDeviceGetAttribute(int* value, enum cudaDeviceAttr attr, int device) {
  if (value == NULL) return ret(cudaErrorInvalidValue);
  if (device < 0 || device >= numDevices()) return ret(cudaErrorInvalidDevice);
  switch (attr) {
  case cudaDevAttrMultiProcessorCount:
    *value = 4;
    break;
  case cudaDevAttrMaxThreadsPerBlock:
    *value = 1024;
    break;
  case cudaDevAttrComputeCapabilityMajor:
    *value = 9;
    break;
  case cudaDevAttrComputeCapabilityMinor:
    *value = 0;
    break;
  case cudaDevAttrUnifiedAddressing:
  case cudaDevAttrCanMapHostMemory:
  case cudaDevAttrManagedMemory:
  case cudaDevAttrConcurrentManagedAccess:
    *value = 1;
    break;
  default:
    *value = 0;
    break;
  }
  return ret(cudaSuccess);
}

SIM_EXPORT cudaError_t cudaDeviceCanAccessPeer(int* can, int device, int peer) {
  if (can == NULL) return ret(cudaErrorInvalidValue);
  if (device < 0 || device >= numDevices() || peer < 0 || peer >= numDevices())
    return ret(cudaErrorInvalidDevice);
  *can = device != peer;
  return ret(cudaSuccess);
}

static _Atomic uint32_t peerEnabled[SIM_MAX_DEVICES];
SIM_EXPORT cudaError_t cudaDeviceEnablePeerAccess(int peer, unsigned int flags) {
  if (touch() != cudaSuccess) return ret(cudaErrorNoDevice);
  if (flags != 0) return ret(cudaErrorInvalidValue);
  if (peer < 0 || peer >= numDevices() || peer == curDev) return ret(cudaErrorInvalidDevice);
  uint32_t bit = 1u << peer;
  if (atomic_fetch_or(&peerEnabled[curDev], bit) & bit)
    return ret(cudaErrorPeerAccessAlreadyEnabled);
  return ret(cudaSuccess);
}

SIM_EXPORT cudaError_t cudaGetLastError(void) {
  cudaError_t e = lastErr;
  lastErr = cudaSuccess;
  int s = atomic_load(&stickyErr);
  return s != cudaSuccess ? (cudaError_t)s : e;
}

SIM_EXPORT cudaError_t cudaPeekAtLastError(void) {
  int s = atomic_load(&stickyErr);
  return s != cudaSuccess ? (cudaError_t)s : lastErr;
}

SIM_EXPORT const char* cudaGetErrorName(cudaError_t e) {
  switch (e) {
#define N(x) \
  case x: \
    return #x;
    N(cudaSuccess)
    N(cudaErrorInvalidValue)
    N(cudaErrorMemoryAllocation)
    N(cudaErrorInitializationError)
    N(cudaErrorInvalidConfiguration)
    N(cudaErrorInvalidDevicePointer)
    N(cudaErrorInvalidMemcpyDirection)
    N(cudaErrorInvalidDevice)
    N(cudaErrorNoDevice)
    N(cudaErrorInvalidResourceHandle)
    N(cudaErrorNotReady)
    N(cudaErrorIllegalAddress)
    N(cudaErrorInvalidDeviceFunction)
    N(cudaErrorLaunchOutOfResources)
    N(cudaErrorPeerAccessAlreadyEnabled)
    N(cudaErrorAlreadyMapped)
    N(cudaErrorDeviceUninitialized)
    N(cudaErrorStreamCaptureUnsupported)
    N(cudaErrorStreamCaptureInvalidated)
    N(cudaErrorIllegalState)
    N(cudaErrorSymbolNotFound)
    N(cudaErrorNotSupported)
#undef N
  default:
    return "cudaErrorUnknown";
  }
}

SIM_EXPORT const char* cudaGetErrorString(cudaError_t e) {
  switch (e) {
  case cudaSuccess:
    return "no error";
  case cudaErrorNoDevice:
    return "no CUDA-capable device is detected (CUDA stand-in: PAPCCL_CUDASIM_DEVICES=0)";
  case cudaErrorIllegalAddress:
    return "an illegal memory access was encountered";
  case cudaErrorInvalidValue:
    return "invalid argument";
  case cudaErrorNotReady:
    return "device not ready";
  default:
    return cudaGetErrorName(e);
  }
}

SIM_EXPORT cudaError_t cudaMalloc(void** p, size_t size) {
  if (p == NULL) return ret(cudaErrorInvalidValue);
  if (touch() != cudaSuccess) return ret(cudaErrorNoDevice);
  if (size == 0) {
    *p = NULL;
    return ret(cudaSuccess);
  }
  return ret(newDevice(p, size, M_DEVICE));
}

SIM_EXPORT cudaError_t cudaMallocManaged(void** p, size_t size, unsigned int flags) {
  if (p == NULL || size == 0 || (flags != cudaMemAttachGlobal && flags != cudaMemAttachHost))
    return ret(cudaErrorInvalidValue);
  if (touch() != cudaSuccess) return ret(cudaErrorNoDevice);
  return ret(newDevice(p, size, M_MANAGED));
}

SIM_EXPORT cudaError_t cudaMallocHost(void** p, size_t size) {
  if (p == NULL) return ret(cudaErrorInvalidValue);
  if (touch() != cudaSuccess) return ret(cudaErrorNoDevice);
  return ret(newHost(p, size));
}

SIM_EXPORT cudaError_t cudaHostAlloc(void** p, size_t size, unsigned int flags) {
  if (p == NULL || (flags & ~(unsigned)(cudaHostAllocPortable | cudaHostAllocMapped |
                                        cudaHostAllocWriteCombined)))
    return ret(cudaErrorInvalidValue);
  if (touch() != cudaSuccess) return ret(cudaErrorNoDevice);
  return ret(newHost(p, size));
}

static cudaError_t freeKind(void* p, int host) {
  if (p == NULL) return cudaSuccess;
  drain(NULL); /* freeing synchronizes with the device */
  pthread_mutex_lock(&memLock);
  struct simAlloc* a = findLocked(p, 0);
  cudaError_t e = cudaSuccess;
  if (a == NULL || a->addr != p || a->kind == M_IPC || (host != (a->kind == M_HOST)))
    e = host ? cudaErrorInvalidValue : cudaErrorInvalidDevicePointer;
  else
    poisonLocked(a);
  pthread_mutex_unlock(&memLock);
  if (e != cudaSuccess)
    simLog("%s(%p): not a live allocation of that kind", host ? "cudaFreeHost" : "cudaFree", p);
  return e;
}

SIM_EXPORT cudaError_t cudaFree(void* p) {
  return ret(freeKind(p, 0));
}

SIM_EXPORT cudaError_t cudaFreeHost(void* p) {
  return ret(freeKind(p, 1));
}

SIM_EXPORT cudaError_t cudaHostGetDevicePointer(void** pDevice, void* pHost, unsigned int flags) {
  if (pDevice == NULL || flags != 0) return ret(cudaErrorInvalidValue);
  pthread_mutex_lock(&memLock);
  struct simAlloc* a = findLocked(pHost, 0);
  int ok = a != NULL && a->kind == M_HOST;
  pthread_mutex_unlock(&memLock);
  if (!ok) return ret(cudaErrorInvalidValue);
  *pDevice = pHost;
  return ret(cudaSuccess);
}

SIM_EXPORT cudaError_t cudaPointerGetAttributes(struct cudaPointerAttributes* attr, const void* p) {
  if (attr == NULL) return ret(cudaErrorInvalidValue);
  memset(attr, 0, sizeof(*attr));
  attr->type = cudaMemoryTypeUnregistered;
  attr->device = -2;
  pthread_mutex_lock(&memLock);
  struct simAlloc* a = findLocked(p, 0);
  if (a) {
    attr->device = a->dev;
    attr->devicePointer = (void*)p;
    switch (a->kind) {
    case M_HOST:
      attr->type = cudaMemoryTypeHost;
      attr->hostPointer = (void*)p;
      break;
    case M_MANAGED:
      attr->type = cudaMemoryTypeManaged;
      attr->hostPointer = (void*)p;
      break;
    default:
      attr->type = cudaMemoryTypeDevice;
      break;
    }
  }
  pthread_mutex_unlock(&memLock);
  return ret(cudaSuccess);
}

/* Queues a copy or a set of n bytes on stream. */
static cudaError_t submitBytes(cudaStream_t stream, int type, void* dst, const void* src, int value,
                               size_t n) {
  struct simStream* st = resolve(stream);
  if (st == NULL) return cudaErrorInvalidResourceHandle;
  struct simOp* op = newOp(type);
  if (op == NULL) return cudaErrorMemoryAllocation;
  op->dst = dst;
  op->src = src;
  op->value = value;
  op->bytes = n;
  return enqueue(st, op);
}

/* The direction given must match the memory (cudaMemcpyDefault infers it). */
static cudaError_t checkCopy(void* dst, const void* src, size_t n, enum cudaMemcpyKind kind) {
  if (n == 0) return cudaSuccess;
  if (dst == NULL || src == NULL) return cudaErrorInvalidValue;
  pthread_mutex_lock(&memLock);
  struct simAlloc* d = findLocked(dst, n);
  struct simAlloc* s = findLocked(src, n);
  int dDev = d && (d->kind == M_DEVICE || d->kind == M_IPC);
  int sDev = s && (s->kind == M_DEVICE || s->kind == M_IPC);
  int dAny = d && d->kind == M_MANAGED, sAny = s && s->kind == M_MANAGED; /* either side */
  int dFreed = !d && isFreedLocked(dst), sFreed = !s && isFreedLocked(src);
  pthread_mutex_unlock(&memLock);
  if (dFreed || sFreed) return cudaErrorInvalidValue;
  switch (kind) {
  case cudaMemcpyHostToDevice:
    return (dDev || dAny) && !sDev ? cudaSuccess : cudaErrorInvalidValue;
  case cudaMemcpyDeviceToHost:
    return (sDev || sAny) && !dDev ? cudaSuccess : cudaErrorInvalidValue;
  case cudaMemcpyDeviceToDevice:
    return (sDev || sAny) && (dDev || dAny) ? cudaSuccess : cudaErrorInvalidValue;
  case cudaMemcpyHostToHost:
    return !sDev && !dDev ? cudaSuccess : cudaErrorInvalidValue;
  case cudaMemcpyDefault:
    return cudaSuccess;
  default:
    return cudaErrorInvalidMemcpyDirection;
  }
}

static cudaError_t copyAsync(void* dst, const void* src, size_t n, enum cudaMemcpyKind kind,
                             cudaStream_t stream) {
  if (touch() != cudaSuccess) return cudaErrorNoDevice;
  cudaError_t e = checkCopy(dst, src, n, kind);
  if (e != cudaSuccess) {
    simLog("cudaMemcpy(%p, %p, %zu, kind %d): the pointers do not match the direction", dst, src, n,
           (int)kind);
    return e;
  }
  if (n == 0) return cudaSuccess;
  return submitBytes(stream, OP_COPY, dst, src, 0, n);
}

SIM_EXPORT cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t n,
                                       enum cudaMemcpyKind kind, cudaStream_t stream) {
  return ret(copyAsync(dst, src, n, kind, stream));
}

SIM_EXPORT cudaError_t cudaMemcpy(void* dst, const void* src, size_t n, enum cudaMemcpyKind kind) {
  cudaError_t e = copyAsync(dst, src, n, kind, NULL);
  if (e == cudaSuccess) drain(&legacyStream);
  return ret(e);
}

static cudaError_t setAsync(void* dst, int value, size_t n, cudaStream_t stream) {
  if (touch() != cudaSuccess) return cudaErrorNoDevice;
  if (n == 0) return cudaSuccess;
  pthread_mutex_lock(&memLock);
  int ok = findLocked(dst, n) != NULL;
  pthread_mutex_unlock(&memLock);
  if (!ok) return cudaErrorInvalidValue;
  return submitBytes(stream, OP_SET, dst, NULL, value, n);
}

SIM_EXPORT cudaError_t cudaMemsetAsync(void* dst, int value, size_t n, cudaStream_t stream) {
  return ret(setAsync(dst, value, n, stream));
}

SIM_EXPORT cudaError_t cudaMemset(void* dst, int value, size_t n) {
  cudaError_t e = setAsync(dst, value, n, NULL);
  if (e == cudaSuccess) drain(&legacyStream);
  return ret(e);
}

SIM_EXPORT cudaError_t cudaStreamCreateWithFlags(cudaStream_t* out, unsigned int flags) {
  if (out == NULL || (flags & ~(unsigned)cudaStreamNonBlocking)) return ret(cudaErrorInvalidValue);
  if (touch() != cudaSuccess) return ret(cudaErrorNoDevice);
  struct simStream* st = calloc(1, sizeof(*st));
  if (st == NULL) return ret(cudaErrorMemoryAllocation);
  st->flags = flags;
  pthread_mutex_lock(&qLock);
  st->nextLive = liveStreams;
  liveStreams = st;
  pthread_mutex_unlock(&qLock);
  *out = (cudaStream_t)st;
  return ret(cudaSuccess);
}

SIM_EXPORT cudaError_t cudaStreamCreate(cudaStream_t* out) {
  return cudaStreamCreateWithFlags(out, cudaStreamDefault);
}

SIM_EXPORT cudaError_t cudaStreamDestroy(cudaStream_t s) {
  if (s == NULL || s == cudaStreamLegacy || s == cudaStreamPerThread)
    return ret(cudaErrorInvalidResourceHandle);
  struct simStream* st = resolve(s);
  if (st == NULL) return ret(cudaErrorInvalidResourceHandle);
  pthread_mutex_lock(&qLock);
  st->destroyed = 1; /* its work still runs; the handle is gone */
  if (!st->started) {
    struct simStream** pp = &liveStreams;
    while (*pp && *pp != st)
      pp = &(*pp)->nextLive;
    if (*pp) *pp = st->nextLive;
    pthread_mutex_unlock(&qLock);
    free(st);
    return ret(cudaSuccess);
  }
  pthread_cond_broadcast(&qCond);
  pthread_mutex_unlock(&qLock);
  return ret(cudaSuccess);
}

SIM_EXPORT cudaError_t cudaStreamSynchronize(cudaStream_t s) {
  struct simStream* st = resolve(s);
  if (st == NULL) return ret(cudaErrorInvalidResourceHandle);
  pthread_mutex_lock(&qLock);
  int capturing = st->capturing;
  pthread_mutex_unlock(&qLock);
  if (capturing) return ret(cudaErrorStreamCaptureUnsupported);
  drain(st);
  return ret(cudaSuccess);
}

SIM_EXPORT cudaError_t cudaStreamQuery(cudaStream_t s) {
  struct simStream* st = resolve(s);
  if (st == NULL) return ret(cudaErrorInvalidResourceHandle);
  pthread_mutex_lock(&qLock);
  int busy = atomic_load(&st->done) < st->enq;
  pthread_mutex_unlock(&qLock);
  return ret(busy ? cudaErrorNotReady : cudaSuccess);
}

SIM_EXPORT cudaError_t cudaDeviceSynchronize(void) {
  drain(NULL);
  return ret(cudaSuccess);
}

SIM_EXPORT cudaError_t cudaStreamIsCapturing(cudaStream_t s, enum cudaStreamCaptureStatus* status) {
  if (status == NULL) return ret(cudaErrorInvalidValue);
  struct simStream* st = resolve(s);
  if (st == NULL) return ret(cudaErrorInvalidResourceHandle);
  pthread_mutex_lock(&qLock);
  *status = st->capturing ? cudaStreamCaptureStatusActive : cudaStreamCaptureStatusNone;
  pthread_mutex_unlock(&qLock);
  return ret(cudaSuccess);
}

SIM_EXPORT cudaError_t cudaStreamBeginCapture(cudaStream_t s, enum cudaStreamCaptureMode mode) {
  (void)mode;
  struct simStream* st = resolve(s);
  if (st == NULL || st->legacy) return ret(cudaErrorStreamCaptureUnsupported);
  pthread_mutex_lock(&qLock);
  int was = st->capturing;
  st->capturing = 1;
  pthread_mutex_unlock(&qLock);
  return ret(was ? cudaErrorIllegalState : cudaSuccess);
}

struct simGraph {
  uint64_t magic;
};
SIM_EXPORT cudaError_t cudaStreamEndCapture(cudaStream_t s, cudaGraph_t* graph) {
  if (graph == NULL) return ret(cudaErrorInvalidValue);
  struct simStream* st = resolve(s);
  if (st == NULL) return ret(cudaErrorInvalidResourceHandle);
  pthread_mutex_lock(&qLock);
  int was = st->capturing;
  st->capturing = 0;
  pthread_mutex_unlock(&qLock);
  if (!was) return ret(cudaErrorIllegalState);
  struct simGraph* g = calloc(1, sizeof(*g));
  if (g == NULL) return ret(cudaErrorMemoryAllocation);
  g->magic = 0x67726170ull;
  *graph = (cudaGraph_t)g;
  return ret(cudaSuccess);
}

SIM_EXPORT cudaError_t cudaGraphDestroy(cudaGraph_t graph) {
  struct simGraph* g = (struct simGraph*)graph;
  if (g == NULL || g->magic != 0x67726170ull) return ret(cudaErrorInvalidValue);
  g->magic = 0;
  free(g);
  return ret(cudaSuccess);
}

SIM_EXPORT cudaError_t cudaEventCreateWithFlags(cudaEvent_t* out, unsigned int flags) {
  if (out == NULL ||
      (flags & ~(unsigned)(cudaEventBlockingSync | cudaEventDisableTiming | cudaEventInterprocess)))
    return ret(cudaErrorInvalidValue);
  if (touch() != cudaSuccess) return ret(cudaErrorNoDevice);
  struct simEvent* ev = calloc(1, sizeof(*ev));
  if (ev == NULL) return ret(cudaErrorMemoryAllocation);
  ev->flags = flags;
  ev->refs = 1;
  pthread_mutex_lock(&qLock);
  ev->nextLive = liveEvents;
  liveEvents = ev;
  pthread_mutex_unlock(&qLock);
  *out = (cudaEvent_t)ev;
  return ret(cudaSuccess);
}

SIM_EXPORT cudaError_t cudaEventCreate(cudaEvent_t* out) {
  return cudaEventCreateWithFlags(out, cudaEventDefault);
}

/* The event of a live handle; NULL for anything else, without touching it (qLock held). */
static struct simEvent* eventOfLocked(cudaEvent_t e) {
  for (struct simEvent* l = liveEvents; l; l = l->nextLive)
    if (l == (struct simEvent*)e) return l;
  return NULL;
}

static struct simEvent* eventOf(cudaEvent_t e) {
  pthread_mutex_lock(&qLock);
  struct simEvent* ev = eventOfLocked(e);
  pthread_mutex_unlock(&qLock);
  return ev;
}

/* Drops one reference (qLock held); the last one frees the event. */
static void eventUnrefLocked(struct simEvent* ev) {
  if (--ev->refs > 0) return;
  free(ev);
}

SIM_EXPORT cudaError_t cudaEventDestroy(cudaEvent_t e) {
  pthread_mutex_lock(&qLock);
  struct simEvent* ev = eventOfLocked(e);
  if (ev == NULL) {
    pthread_mutex_unlock(&qLock);
    return ret(cudaErrorInvalidResourceHandle);
  }
  /* CUDA returns at once; a record still queued completes and then releases the event. The
   * handle is invalid from now on. */
  struct simEvent** pp = &liveEvents;
  while (*pp != ev)
    pp = &(*pp)->nextLive;
  *pp = ev->nextLive;
  eventUnrefLocked(ev);
  pthread_mutex_unlock(&qLock);
  return ret(cudaSuccess);
}

SIM_EXPORT cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s) {
  struct simEvent* ev = eventOf(e);
  if (ev == NULL) return ret(cudaErrorInvalidResourceHandle);
  struct simStream* st = resolve(s);
  if (st == NULL) return ret(cudaErrorInvalidResourceHandle);
  struct simOp* op = newOp(OP_RECORD);
  if (op == NULL) return ret(cudaErrorMemoryAllocation);
  pthread_mutex_lock(&qLock);
  int capturing = st->capturing; /* a captured record is never reached: not counted */
  op->ev = ev;
  if (!capturing) {
    op->evTarget = ++ev->recorded;
    ev->refs++;
  }
  pthread_mutex_unlock(&qLock);
  if (capturing) {
    free(op);
    return ret(cudaSuccess);
  }
  return ret(enqueue(st, op));
}

SIM_EXPORT cudaError_t cudaEventQuery(cudaEvent_t e) {
  struct simEvent* ev = eventOf(e);
  if (ev == NULL) return ret(cudaErrorInvalidResourceHandle);
  pthread_mutex_lock(&qLock);
  int done = atomic_load(&ev->reached) >= ev->recorded;
  pthread_mutex_unlock(&qLock);
  return ret(done ? cudaSuccess : cudaErrorNotReady);
}

SIM_EXPORT cudaError_t cudaEventSynchronize(cudaEvent_t e) {
  struct simEvent* ev = eventOf(e);
  if (ev == NULL) return ret(cudaErrorInvalidResourceHandle);
  pthread_mutex_lock(&qLock);
  while (atomic_load(&ev->reached) < ev->recorded && atomic_load(&stickyErr) == cudaSuccess)
    pthread_cond_wait(&qCond, &qLock);
  pthread_mutex_unlock(&qLock);
  return ret(cudaSuccess);
}

SIM_EXPORT cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end) {
  struct simEvent* a = eventOf(start);
  struct simEvent* b = eventOf(end);
  if (ms == NULL) return ret(cudaErrorInvalidValue);
  if (a == NULL || b == NULL) return ret(cudaErrorInvalidResourceHandle);
  if ((a->flags | b->flags) & cudaEventDisableTiming) return ret(cudaErrorInvalidResourceHandle);
  pthread_mutex_lock(&qLock);
  int both = a->recorded && b->recorded;
  int done =
      both && atomic_load(&a->reached) >= a->recorded && atomic_load(&b->reached) >= b->recorded;
  uint64_t t0 = a->timeNs, t1 = b->timeNs;
  pthread_mutex_unlock(&qLock);
  if (!done) return ret(both ? cudaErrorNotReady : cudaErrorInvalidResourceHandle);
  *ms = (float)((double)((int64_t)(t1 - t0)) / 1e6);
  return ret(cudaSuccess);
}

SIM_EXPORT cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned int flags) {
  struct simEvent* ev = eventOf(e);
  if (ev == NULL) return ret(cudaErrorInvalidResourceHandle);
  if (flags != 0) return ret(cudaErrorInvalidValue);
  struct simStream* st = resolve(s);
  if (st == NULL) return ret(cudaErrorInvalidResourceHandle);
  struct simOp* op = newOp(OP_WAITEVENT);
  if (op == NULL) return ret(cudaErrorMemoryAllocation);
  pthread_mutex_lock(&qLock);
  uint64_t target = ev->recorded; /* the most recent record at the time of the call */
  if (target) ev->refs++;
  pthread_mutex_unlock(&qLock);
  if (target == 0) { /* never recorded: nothing to wait for */
    free(op);
    return ret(cudaSuccess);
  }
  op->ev = ev;
  op->evTarget = target;
  return ret(enqueue(st, op));
}

/* ---- IPC --------------------------------------------------------------------------------------- */

struct simIpc {
  uint64_t magic;
  int32_t pid;
  int32_t fd;
  uint64_t id;
  uint64_t size;
  uint64_t mapped;
};
#define IPC_MAGIC 0x6970632d73696dull
_Static_assert(sizeof(struct simIpc) <= sizeof(cudaIpcMemHandle_t), "IPC handle size");

SIM_EXPORT cudaError_t cudaIpcGetMemHandle(cudaIpcMemHandle_t* handle, void* p) {
  if (handle == NULL) return ret(cudaErrorInvalidValue);
  pthread_mutex_lock(&memLock);
  struct simAlloc* a = findLocked(p, 0);
  struct simIpc h = {IPC_MAGIC,     (int32_t)getpid(), a ? a->fd : -1,
                     a ? a->id : 0, a ? a->size : 0,   a ? a->mapped : 0};
  int ok = a != NULL && a->kind == M_DEVICE;
  pthread_mutex_unlock(&memLock);
  if (!ok) return ret(cudaErrorInvalidValue);
  memset(handle, 0, sizeof(*handle));
  memcpy(handle, &h, sizeof(h));
  return ret(cudaSuccess);
}

SIM_EXPORT cudaError_t cudaIpcOpenMemHandle(void** p, cudaIpcMemHandle_t handle,
                                            unsigned int flags) {
  if (p == NULL || flags != cudaIpcMemLazyEnablePeerAccess) return ret(cudaErrorInvalidValue);
  if (touch() != cudaSuccess) return ret(cudaErrorNoDevice);
  struct simIpc h;
  memcpy(&h, &handle, sizeof(h));
  if (h.magic != IPC_MAGIC || h.fd < 0 || h.mapped == 0) return ret(cudaErrorInvalidResourceHandle);
  if (h.pid == (int32_t)getpid()) {
    /* CUDA: a handle opens only in another process ("invalid device context"). */
    simLog("cudaIpcOpenMemHandle: the handle was exported by this process");
    return ret(cudaErrorDeviceUninitialized);
  }
  pthread_mutex_lock(&memLock);
  int twice = 0;
  for (struct simAlloc* a = allocs; a; a = a->next)
    if (!a->freed && a->kind == M_IPC && a->exportedPid == h.pid && a->exportedId == h.id)
      twice = 1;
  pthread_mutex_unlock(&memLock);
  if (twice) {
    simLog("cudaIpcOpenMemHandle: the handle is already open in this process");
    return ret(cudaErrorAlreadyMapped);
  }
  char path[64];
  snprintf(path, sizeof(path), "/proc/%d/fd/%d", (int)h.pid, (int)h.fd);
  int fd = open(path, O_RDWR | O_CLOEXEC);
  if (fd < 0) return ret(cudaErrorInvalidResourceHandle); /* exporter gone, or freed */
  char* shadow = mmap(NULL, h.mapped, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  char* addr = mmap(NULL, h.mapped, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  struct simAlloc* a = NULL;
  if (shadow != MAP_FAILED && addr != MAP_FAILED)
    a = addAlloc(addr, shadow, h.size, h.mapped, M_IPC, fd);
  if (a == NULL) {
    if (shadow != MAP_FAILED) munmap(shadow, h.mapped);
    if (addr != MAP_FAILED) munmap(addr, h.mapped);
    close(fd);
    return ret(cudaErrorMapBufferObjectFailed);
  }
  pthread_mutex_lock(&memLock);
  a->exportedPid = h.pid;
  a->exportedId = h.id;
  pthread_mutex_unlock(&memLock);
  *p = addr;
  return ret(cudaSuccess);
}

SIM_EXPORT cudaError_t cudaIpcCloseMemHandle(void* p) {
  drain(NULL);
  pthread_mutex_lock(&memLock);
  struct simAlloc* a = findLocked(p, 0);
  cudaError_t e = cudaSuccess;
  if (a == NULL || a->addr != p || a->kind != M_IPC)
    e = cudaErrorInvalidValue;
  else
    poisonLocked(a);
  pthread_mutex_unlock(&memLock);
  return ret(e);
}

/* ---- kernels -------------------------------------------------------------------------------------- */

struct simKernel {
  const void* hostFun;
  int kind, dtype, redOp;
  char name[160];
};
static struct simKernel kernels[256];
static int nkernels;
static pthread_mutex_t kLock = PTHREAD_MUTEX_INITIALIZER;

/* The identifier at s in a mangled name: its length prefix, then that many characters. */
static int mangledIdent(const char* name, const char* s, char* out, size_t cap) {
  const char* d = s;
  while (d > name && d[-1] >= '0' && d[-1] <= '9')
    d--;
  if (d == s) return 0;
  size_t len = (size_t)strtoul(d, NULL, 10);
  if (len == 0 || len >= cap || strlen(s) < len) return 0;
  memcpy(out, s, len);
  out[len] = '\0';
  return 1;
}

static void classify(struct simKernel* k) {
  const char* n = k->name;
  if (strstr(n, "reduceKernel")) {
    static const struct {
      const char* op;
      int kind;
    } ops[] = {{"FnSum_", PAP_RED_SUM},
               {"FnProd_", PAP_RED_PROD},
               {"FnMax_", PAP_RED_MAX},
               {"FnMin_", PAP_RED_MIN}};
    for (size_t i = 0; i < sizeof(ops) / sizeof(ops[0]); i++) {
      const char* s = strstr(n, ops[i].op);
      char id[64];
      if (s == NULL || !mangledIdent(n, s, id, sizeof(id))) continue;
      const char* tname = id + strlen(ops[i].op);
#define SIM_TYPE_MATCH(dt, name, T) \
  if (strcmp(tname, #name) == 0) { \
    k->kind = K_REDUCE; \
    k->dtype = dt; \
    k->redOp = ops[i].kind; \
    return; \
  }
      PAP_RED_TYPE_LIST(SIM_TYPE_MATCH)
#undef SIM_TYPE_MATCH
    }
    return;
  }
  if (strstr(n, "writeWordKernel"))
    k->kind = K_WRITE;
  else if (strstr(n, "waitWordKernel"))
    k->kind = K_WAIT;
  else if (strstr(n, "spinKernel"))
    k->kind = K_SPIN;
  else if (strstr(n, "fillF32Kernel"))
    k->kind = K_FILL;
}

SIM_EXPORT void** __cudaRegisterFatBinary(void* fatCubin) {
  static int handle;
  (void)fatCubin;
  return (void**)&handle;
}

SIM_EXPORT void __cudaRegisterFatBinaryEnd(void** handle) {
  (void)handle;
}

SIM_EXPORT void __cudaUnregisterFatBinary(void** handle) {
  (void)handle;
}

SIM_EXPORT void __cudaRegisterFunction(void** handle, const char* hostFun, char* deviceFun,
                                       const char* deviceName, int threadLimit, uint3* tid,
                                       uint3* bid, dim3* bDim, dim3* gDim, int* wSize) {
  (void)handle, (void)deviceFun, (void)threadLimit, (void)tid, (void)bid, (void)bDim, (void)gDim,
      (void)wSize;
  pthread_mutex_lock(&kLock);
  if (nkernels < (int)(sizeof(kernels) / sizeof(kernels[0]))) {
    struct simKernel* k = &kernels[nkernels++];
    k->hostFun = hostFun;
    snprintf(k->name, sizeof(k->name), "%s", deviceName ? deviceName : "");
    classify(k);
  }
  pthread_mutex_unlock(&kLock);
}

SIM_EXPORT void __cudaRegisterVar(void** handle, char* hostVar, char* deviceAddress,
                                  const char* deviceName, int ext, size_t size, int constant,
                                  int global) {
  (void)handle, (void)hostVar, (void)deviceAddress, (void)deviceName, (void)ext, (void)size,
      (void)constant, (void)global;
}

struct launchCfg {
  dim3 grid, block;
  size_t shmem;
  cudaStream_t stream;
};
static __thread struct launchCfg cfgStack[8];
static __thread int cfgDepth;

SIM_EXPORT unsigned __cudaPushCallConfiguration(dim3 grid, dim3 block, size_t shmem,
                                                struct CUstream_st* stream) {
  if (cfgDepth >= 8) return 1;
  cfgStack[cfgDepth++] = (struct launchCfg){grid, block, shmem, (cudaStream_t)stream};
  return 0;
}

SIM_EXPORT cudaError_t __cudaPopCallConfiguration(dim3* grid, dim3* block, size_t* shmem,
                                                  void* stream) {
  if (cfgDepth <= 0) return cudaErrorInvalidConfiguration;
  struct launchCfg c = cfgStack[--cfgDepth];
  *grid = c.grid;
  *block = c.block;
  *shmem = c.shmem;
  *(cudaStream_t*)stream = c.stream;
  return cudaSuccess;
}

static struct simKernel* kernelOf(const void* hostFun) {
  struct simKernel* k = NULL;
  pthread_mutex_lock(&kLock);
  for (int i = 0; i < nkernels; i++)
    if (kernels[i].hostFun == hostFun || (const void*)&kernels[i] == hostFun) k = &kernels[i];
  pthread_mutex_unlock(&kLock);
  return k;
}

SIM_EXPORT cudaError_t __cudaGetKernel(cudaKernel_t* out, const void* hostFun) {
  struct simKernel* k = kernelOf(hostFun);
  if (out == NULL || k == NULL) return ret(cudaErrorInvalidDeviceFunction);
  *out = (cudaKernel_t)k;
  return ret(cudaSuccess);
}

static cudaError_t launch(struct simKernel* k, dim3 grid, dim3 block, void** args, size_t shmem,
                          cudaStream_t stream) {
  if (touch() != cudaSuccess) return cudaErrorNoDevice;
  if (k == NULL || k->kind == 0) {
    simLog("launch of an unknown kernel '%s'", k ? k->name : "?");
    return cudaErrorInvalidDeviceFunction;
  }
  if (grid.x == 0 || grid.y == 0 || grid.z == 0 || block.x == 0 || block.y == 0 || block.z == 0 ||
      (uint64_t)block.x * block.y * block.z > 1024 || shmem > 48 * 1024)
    return cudaErrorInvalidConfiguration;
  struct simStream* st = resolve(stream);
  if (st == NULL) return cudaErrorInvalidResourceHandle;
  struct simOp* op = newOp(OP_KERNEL);
  if (op == NULL) return cudaErrorMemoryAllocation;
  op->kernel = k->kind;
  switch (k->kind) { /* the arguments are read now: they live on the caller's stack */
  case K_REDUCE:
    op->dst = *(void**)args[0];
    op->a = *(const void**)args[1];
    op->b = *(const void**)args[2];
    op->bytes = *(size_t*)args[3]; /* the element count */
    op->dtype = k->dtype;
    op->redOp = k->redOp;
    break;
  case K_WRITE: /* a one-thread kernel doing what a stream memory operation does */
  case K_WAIT:
    op->type = k->kind == K_WRITE ? OP_WRITE64 : OP_WAIT64;
    op->what = k->kind == K_WRITE ? "writeWordKernel" : "waitWordKernel";
    op->dst = *(void**)args[0];
    op->src = op->dst;
    op->u64 = *(unsigned long long*)args[1];
    break;
  case K_SPIN:
    op->u64 = *(unsigned long long*)args[0];
    break;
  case K_FILL:
    op->dst = *(void**)args[0];
    op->bytes = *(size_t*)args[1];
    op->f1 = *(float*)args[2];
    op->f2 = *(float*)args[3];
    break;
  }
  return enqueue(st, op);
}

SIM_EXPORT cudaError_t __cudaLaunchKernel(cudaKernel_t kernel, dim3 grid, dim3 block, void** args,
                                          size_t shmem, cudaStream_t stream) {
  return ret(launch((struct simKernel*)kernel, grid, block, args, shmem, stream));
}

SIM_EXPORT cudaError_t cudaLaunchKernel(const void* func, dim3 grid, dim3 block, void** args,
                                        size_t shmem, cudaStream_t stream) {
  return ret(launch(kernelOf(func), grid, block, args, shmem, stream));
}

SIM_EXPORT cudaError_t cudaFuncGetAttributes(struct cudaFuncAttributes* attr, const void* func) {
  if (attr == NULL) return ret(cudaErrorInvalidValue);
  struct simKernel* k = kernelOf(func);
  if (k == NULL) return ret(cudaErrorInvalidDeviceFunction);
  memset(attr, 0, sizeof(*attr));
  attr->maxThreadsPerBlock = 1024;
  attr->numRegs = 32;
  attr->ptxVersion = 90;
  attr->binaryVersion = 90;
  return ret(cudaSuccess);
}

/* ---- driver entry points ---------------------------------------------------------------------- */

static CUresult drvPrimaryCtxGetState(CUdevice dev, unsigned int* flags, int* active) {
  if (dev < 0 || dev >= numDevices()) return CUDA_ERROR_INVALID_DEVICE;
  if (flags == NULL || active == NULL) return CUDA_ERROR_INVALID_VALUE;
  *flags = 0;
  *active = atomic_load(&ctxActive[dev]);
  return CUDA_SUCCESS;
}

static CUresult drvCtxGetCurrent(CUcontext* ctx) {
  if (ctx == NULL) return CUDA_ERROR_INVALID_VALUE;
  *ctx = (CUcontext)curCtx;
  return CUDA_SUCCESS;
}

static CUresult drvCtxSetCurrent(CUcontext ctx) {
  if (ctx == NULL) {
    curCtx = NULL;
    return CUDA_SUCCESS;
  }
  struct simCtx* c = (struct simCtx*)ctx;
  if (c < ctxs || c >= ctxs + numDevices()) return CUDA_ERROR_INVALID_CONTEXT;
  curCtx = c;
  curDev = c->dev;
  return CUDA_SUCCESS;
}

static CUresult drvStreamValue(CUstream stream, CUdeviceptr addr, cuuint64_t value,
                               unsigned int flags, int wait) {
  if ((wait && flags != CU_STREAM_WAIT_VALUE_GEQ) ||
      (!wait && flags != CU_STREAM_WRITE_VALUE_DEFAULT))
    return CUDA_ERROR_INVALID_VALUE; /* papccl uses these; the others are not simulated */
  if (addr & 7) return CUDA_ERROR_INVALID_VALUE;
  struct simStream* st = resolve((cudaStream_t)stream);
  if (st == NULL) return CUDA_ERROR_INVALID_HANDLE;
  struct simOp* op = newOp(wait ? OP_WAIT64 : OP_WRITE64);
  if (op == NULL) return CUDA_ERROR_OUT_OF_MEMORY;
  op->what = wait ? "cuStreamWaitValue64" : "cuStreamWriteValue64";
  op->dst = (void*)(uintptr_t)addr;
  op->src = (const void*)(uintptr_t)addr;
  op->u64 = value;
  return enqueue(st, op) == cudaSuccess ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}

static CUresult drvWrite64(CUstream s, CUdeviceptr a, cuuint64_t v, unsigned int f) {
  return drvStreamValue(s, a, v, f, 0);
}

static CUresult drvWait64(CUstream s, CUdeviceptr a, cuuint64_t v, unsigned int f) {
  return drvStreamValue(s, a, v, f, 1);
}

static CUresult drvDeviceGetAttribute(int* v, CUdevice_attribute attr, CUdevice dev) {
  if (v == NULL) return CUDA_ERROR_INVALID_VALUE;
  if (dev < 0 || dev >= numDevices()) return CUDA_ERROR_INVALID_DEVICE;
  const char* e = getenv("PAPCCL_CUDASIM_MEMOPS");
  *v = attr == CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS ? (e ? atoi(e) != 0 : 1) : 0;
  return CUDA_SUCCESS;
}

static void* driverFn(const char* name) {
  static const struct {
    const char* name;
    void* fn;
  } fns[] = {
      {"cuDevicePrimaryCtxGetState", (void*)drvPrimaryCtxGetState},
      {"cuCtxGetCurrent", (void*)drvCtxGetCurrent},
      {"cuCtxSetCurrent", (void*)drvCtxSetCurrent},
      {"cuStreamWriteValue64", (void*)drvWrite64},
      {"cuStreamWaitValue64", (void*)drvWait64},
      {"cuDeviceGetAttribute", (void*)drvDeviceGetAttribute},
  };
  for (size_t i = 0; i < sizeof(fns) / sizeof(fns[0]); i++)
    if (strcmp(fns[i].name, name) == 0) return fns[i].fn;
  return NULL;
}

SIM_EXPORT cudaError_t cudaGetDriverEntryPointByVersion(const char* symbol, void** fn,
                                                        unsigned int version,
                                                        unsigned long long flags,
                                                        enum cudaDriverEntryPointQueryResult* q) {
  (void)version, (void)flags;
  if (symbol == NULL || fn == NULL) return ret(cudaErrorInvalidValue);
  *fn = driverFn(symbol);
  if (q) *q = *fn ? cudaDriverEntryPointSuccess : cudaDriverEntryPointSymbolNotFound;
  return ret(cudaSuccess);
}

SIM_EXPORT cudaError_t cudaGetDriverEntryPoint(const char* symbol, void** fn,
                                               unsigned long long flags,
                                               enum cudaDriverEntryPointQueryResult* q) {
  return cudaGetDriverEntryPointByVersion(symbol, fn, 12000, flags, q);
}

SIM_EXPORT cudaError_t cudaRuntimeGetVersion(int* v) {
  if (v == NULL) return ret(cudaErrorInvalidValue);
  *v = CUDART_VERSION;
  return ret(cudaSuccess);
}

SIM_EXPORT cudaError_t cudaDriverGetVersion(int* v) {
  if (v == NULL) return ret(cudaErrorInvalidValue);
  *v = CUDART_VERSION;
  return ret(cudaSuccess);
}
