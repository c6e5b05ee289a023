/* SPDX-License-Identifier: Apache-2.0 */
/* Submission of validated calls: run now on the calling thread (blocking comm), queue for
 * the progress thread (non-blocking comm), enqueue on a CUDA stream (device buffers), or
 * keep for the end of the group (thread-local nesting; calls inside are collected and run
 * at the outermost end). */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "alloc.h"
#include "api.h"
#include "arrival.h"
#include "check.h"
#include "device.h"
#include "enqueue.h"
#include "futex.h"
#include "log.h"

struct groupInit {
  struct papComm* comm;
  papcclUniqueId id;
  papcclResult_t res;
};

static __thread int groupDepth;
static __thread struct papOpDesc* groupOps;
static __thread int groupNops;
static __thread int groupOpsCap;
static __thread struct groupInit* groupInits;
static __thread int groupNinits;
static __thread int groupInitsCap;

int papGroupDepth(void) {
  return groupDepth;
}

papcclResult_t papGroupAddOp(const struct papOpDesc* op) {
  if (groupNops == groupOpsCap) {
    int ncap = groupOpsCap ? groupOpsCap * 2 : 16;
    struct papOpDesc* n = (struct papOpDesc*)realloc(groupOps, sizeof(*n) * (size_t)ncap);
    if (n == NULL) {
      PAP_WARN("out of memory recording operation %d of a group", groupNops + 1);
      return papcclSystemError;
    }
    groupOps = n;
    groupOpsCap = ncap;
  }
  groupOps[groupNops++] = *op;
  return papcclSuccess;
}

papcclResult_t papGroupAddInit(struct papComm* comm, const papcclUniqueId* id) {
  if (groupNinits == groupInitsCap) {
    int ncap = groupInitsCap ? groupInitsCap * 2 : 8;
    struct groupInit* n = (struct groupInit*)realloc(groupInits, sizeof(*n) * (size_t)ncap);
    if (n == NULL) {
      PAP_WARN("out of memory recording a grouped init");
      return papcclSystemError;
    }
    groupInits = n;
    groupInitsCap = ncap;
  }
  groupInits[groupNinits].comm = comm;
  groupInits[groupNinits].id = *id;
  groupInits[groupNinits].res = papcclSuccess;
  groupNinits++;
  return papcclSuccess;
}

PAPCCL_API papcclResult_t papcclGroupStart(void) {
  groupDepth++;
  return papcclSuccess;
}

static void* groupInitThread(void* arg) {
  struct groupInit* gi = (struct groupInit*)arg;
  gi->res = papCommInitRankInternal(gi->comm, &gi->id);
  papLogSetContext(-1, NULL, 0);
  return NULL;
}

/* Grouped inits of several ranks from one thread must rendezvous together: one thread each. */
static papcclResult_t runInits(struct groupInit* inits, int n) {
  papcclResult_t res = papcclSuccess;
  if (n == 1) {
    groupInitThread(&inits[0]);
    return inits[0].res;
  }
  pthread_t* th = (pthread_t*)calloc((size_t)n, sizeof(*th));
  if (th == NULL) {
    PAP_WARN("out of memory starting %d grouped inits", n);
    return papcclSystemError;
  }
  int started = 0;
  for (int i = 0; i < n; i++) {
    if (pthread_create(&th[i], NULL, groupInitThread, &inits[i]) != 0) {
      PAP_WARN("pthread_create failed for grouped init %d", i);
      inits[i].res = papcclSystemError;
      break;
    }
    started++;
  }
  for (int i = 0; i < started; i++)
    pthread_join(th[i], NULL);
  free(th);
  for (int i = 0; i < n; i++)
    if (inits[i].res != papcclSuccess && res == papcclSuccess) res = inits[i].res;
  return res;
}

/* A comm with a device op in the group runs all its ops of the group as one job in stream
 * order, on the first device op's stream (other streams of the group are joined to it);
 * its host buffers are used as they are. The comm's ops leave `ops`. */
static papcclResult_t submitDeviceOps(struct papOpDesc* ops, int* nopsInOut) {
  papcclResult_t res = papcclSuccess;
  int nops = *nopsInOut;
  for (int i = 0; i < nops; i++) {
    if (!ops[i].onDevice) continue;
    struct papComm* comm = ops[i].comm;
    struct papOpDesc* mine = NULL;
    papcclResult_t r = papCalloc(&mine, (size_t)nops);
    int n = 0, keep = 0;
    for (int j = 0; j < nops; j++) {
      if (ops[j].comm != comm)
        ops[keep++] = ops[j];
      else if (mine != NULL)
        mine[n++] = ops[j];
    }
    if (mine != NULL) {
      papPathDecideBatch(mine, n, 1); /* one batch: the comm's ops of the group */
      r = papDeviceSubmit(comm, mine, n);
    }
    if (mine == NULL) papCommSetError(comm, r); /* its ops took their numbers: comm failed */
    free(mine);
    if (r != papcclSuccess && res == papcclSuccess) res = r;
    nops = keep;
    i = -1; /* the array was compacted: look again from the start */
  }
  *nopsInOut = nops;
  return res;
}

/* Non-blocking comms get one job each (their ops in call order) on their progress thread;
 * the blocking ones run here, together, in call order. */
static papcclResult_t submitOps(struct papOpDesc* ops, int nops) {
  papcclResult_t res = papcclSuccess;
  int nblocking = 0;
  int inProgress = 0;
  /* A failed device submission still lets the other comms run their ops: they took their
   * sequence numbers, and their peers expect them. */
  papcclResult_t devRes = submitDeviceOps(ops, &nops);
  if (nops == 0) return devRes;
  for (int i = 0; i < nops; i++) {
    struct papComm* comm = ops[i].comm;
    if (comm->blocking) continue;
    int seen = 0;
    for (int j = 0; j < i; j++)
      seen |= ops[j].comm == comm;
    if (seen) continue;
    struct papJob* job = NULL;
    int cnt = 0;
    for (int j = i; j < nops; j++)
      cnt += ops[j].comm == comm;
    if (papCalloc(&job, 1) != papcclSuccess || papCalloc(&job->ops, (size_t)cnt) != papcclSuccess) {
      /* This comm's ops took their numbers and cannot run: the comm has failed. The other
       * comms go on. */
      free(job);
      papCommSetError(comm, papcclSystemError);
      res = papcclSystemError;
      continue;
    }
    for (int j = i; j < nops; j++)
      if (ops[j].comm == comm) job->ops[job->nops++] = ops[j];
    papPathDecideBatch(job->ops, job->nops, 1); /* one batch: the comm's ops of the group */
    job->kind = PAP_JOB_OPS;
    papProgressSubmit(comm, job);
    inProgress = 1;
  }
  for (int i = 0; i < nops; i++) /* stable compaction of the blocking ones */
    if (ops[i].comm->blocking) ops[nblocking++] = ops[i];
  for (int i = 0; i < nblocking; i++) /* device ops queued earlier on these comms go first */
    if (ops[i].comm->dev) papCommWaitPendingJobs(ops[i].comm);
  papcclResult_t hostRes = papcclSuccess;
  papPathDecideBatch(ops, nblocking, 1); /* one batch: every blocking comm's ops */
  if (nblocking) hostRes = papRunOps(ops, nblocking);
  if (res == papcclSuccess) res = hostRes;
  if (res == papcclSuccess && inProgress) res = papcclInProgress;
  return devRes != papcclSuccess ? devRes : res;
}

PAPCCL_API papcclResult_t papcclGroupEnd(void) {
  if (groupDepth == 0) {
    papLogSetContext(-1, NULL, 0);
    PAP_WARN("papcclGroupEnd: no matching papcclGroupStart");
    return papcclInvalidUsage;
  }
  if (--groupDepth > 0) return papcclSuccess;
  papcclResult_t res = papcclSuccess;
  struct groupInit* inits = groupInits;
  int ninits = groupNinits;
  struct papOpDesc* ops = groupOps;
  int nops = groupNops;
  groupInits = NULL;
  groupNinits = groupInitsCap = 0;
  groupOps = NULL;
  groupNops = groupOpsCap = 0;
  if (ninits) res = runInits(inits, ninits);
  free(inits);
  if (nops && res == papcclSuccess) res = submitOps(ops, nops);
  free(ops);
  return res;
}

papcclResult_t papEnqueue(struct papOpDesc* op) {
  struct papComm* comm = op->comm;
  if (op->call.coll == PAP_COLL_SEND)
    op->call.seq = comm->p2pSendCount[op->call.root]++ | (1ull << 31);
  else if (op->call.coll == PAP_COLL_RECV)
    op->call.seq = comm->p2pRecvCount[op->call.root]++ | (1ull << 31);
  else {
    op->call.cseq = comm->collSeq++;
    op->call.seq = op->call.cseq & 0x7fffffffull;
  }
  op->arr.tArr = papNowNs(); /* the rank arrives when it calls (host buffers) */
  if (papGroupDepth() > 0) return papGroupAddOp(op);
  if (op->onDevice) return papDeviceSubmit(comm, op, 1);
  /* Host buffers run now; device ops queued before them on this comm go first, so that
   * every rank runs the comm's collectives in call order. */
  if (comm->blocking && comm->dev) papCommWaitPendingJobs(comm);
  if (!comm->blocking) {
    struct papJob* job = NULL;
    if (papCalloc(&job, 1) != papcclSuccess || papCalloc(&job->ops, 1) != papcclSuccess) {
      free(job);
      papCommSetError(comm, papcclSystemError); /* the op took its number */
      return papcclSystemError;
    }
    job->kind = PAP_JOB_OPS;
    job->nops = 1;
    job->ops[0] = *op;
    return papProgressSubmit(comm, job);
  }
  return papRunOps(op, 1);
}
