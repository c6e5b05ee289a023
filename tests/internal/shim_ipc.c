/* SPDX-License-Identifier: Apache-2.0 */
/* CPU executor for the IPC allreduce plan's device steps (see shim_ipc.h). */
#include "shim_ipc.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "algo.h"
#include "comm.h"
#include "kernels.h"
#include "param.h"

struct hostExec {
  uint64_t steps;
  unsigned seed;
  char** arena; /* shared by the n comms; freed by the last detach */
  int n;
  size_t bytes;
};

/* A GPU kernel can only touch device memory (the arenas here); the user's buffers may be
 * pageable host memory, which only the copies may read or write. */
static int inArena(const struct hostExec* h, const char* p, size_t len) {
  for (int i = 0; i < h->n; i++)
    if (p >= h->arena[i] && p + len <= h->arena[i] + h->bytes) return 1;
  return 0;
}

/* The work is done when the step is seen done, after 1 to 3 polls. */
struct hostReq {
  int polls;
};

static papcclResult_t hostPost(void* ctx, struct papStep* s) {
  struct hostExec* h = (struct hostExec*)ctx;
  struct hostReq* q = (struct hostReq*)malloc(sizeof(*q));
  if (q == NULL) return papcclSystemError;
  h->seed = h->seed * 1103515245u + 12345u;
  q->polls = 1 + (int)((h->seed >> 16) % 3);
  s->devReq = q;
  return papcclSuccess;
}

static papcclResult_t hostTest(void* ctx, struct papStep* s, int* doneOut) {
  struct hostExec* h = (struct hostExec*)ctx;
  struct hostReq* q = (struct hostReq*)s->devReq;
  *doneOut = 0;
  if (--q->polls > 0) return papcclSuccess;
  if (s->kind == PAP_STEP_DCOPY) {
    memmove(s->dst, s->src, s->bytes);
  } else {
    if (!inArena(h, s->dst, s->bytes) || !inArena(h, s->src, s->bytes) ||
        !inArena(h, s->src2, s->bytes)) {
      fprintf(stderr, "shim_ipc: a reduction step touches memory outside the arenas\n");
      free(q);
      s->devReq = NULL; /* not dropped again when the failed plan is reset */
      return papcclInternalError;
    }
    size_t esz = papKernTypeSize((papcclDataType_t)s->dtype);
    papKernHostReduce(s->dst, s->src, s->src2, s->bytes / esz, (papcclDataType_t)s->dtype,
                      (enum papRedKind)s->red);
  }
  free(q);
  h->steps++;
  *doneOut = 1;
  return papcclSuccess;
}

static void hostDrop(void* ctx, struct papStep* s) {
  (void)ctx;
  free(s->devReq);
}

static const struct papDevStepOps hostOps = {hostPost, hostTest, hostDrop};

int papTestIpcAttachHost(void** comms, int n, size_t arenaBytes) {
  for (int i = 0; i < n; i++)
    if (((struct papComm*)comms[i])->engine.dev.ops != NULL) return -1; /* real CUDA IPC */
  if (n < 1) return -1;
  char** arena = (char**)calloc((size_t)n, sizeof(char*));
  if (arena == NULL) return -1;
  for (int i = 0; i < n; i++) {
    arena[i] = (char*)aligned_alloc(256, (arenaBytes + 255) / 256 * 256);
    if (arena[i] == NULL) return -1;
    memset(arena[i], 0x5a, arenaBytes); /* stale data, never a plausible result */
  }
  for (int i = 0; i < n; i++) {
    struct papComm* c = (struct papComm*)comms[i];
    struct hostExec* h = (struct hostExec*)calloc(1, sizeof(*h));
    if (h == NULL) return -1;
    h->seed = 7u + (unsigned)i;
    h->arena = arena;
    h->n = n;
    h->bytes = arenaBytes;
    c->engine.dev.ops = &hostOps;
    c->engine.dev.ctx = h;
    c->engine.dev.arena = arena;
    c->engine.dev.bytes = arenaBytes;
    c->engine.dev.minBytes = (size_t)papParamCudaIpcMinBytes();
  }
  return 0;
}

void papTestIpcDetachHost(void** comms, int n) {
  char** arena = NULL;
  for (int i = 0; i < n; i++) {
    struct papComm* c = (struct papComm*)comms[i];
    struct hostExec* h = (struct hostExec*)c->engine.dev.ctx;
    if (h) arena = h->arena;
    free(h);
    memset(&c->engine.dev, 0, sizeof(c->engine.dev));
  }
  if (arena) {
    for (int i = 0; i < n; i++)
      free(arena[i]);
    free(arena);
  }
}

uint64_t papTestIpcSteps(void* comm) {
  struct papComm* c = (struct papComm*)comm;
  const struct hostExec* h = (const struct hostExec*)c->engine.dev.ctx;
  return h ? h->steps : 0;
}

int papTestIpcEligible(void* comm, size_t count, int datatype, int redop) {
  struct papComm* c = (struct papComm*)comm;
  struct papCall call;
  memset(&call, 0, sizeof(call));
  call.coll = PAP_COLL_ALLREDUCE;
  call.count = count;
  call.dtype = (papcclDataType_t)datatype;
  call.avg = redop == papcclAvg;
  call.preMul = redop > papcclAvg;
  return papAlgoArenaEligible(&call, &c->engine);
}

int papTestIpcOn(void* comm) {
  return ((struct papComm*)comm)->ipc != NULL;
}

void papTestIpcParamReset(void) {
  papParamReset();
}
