/* SPDX-License-Identifier: Apache-2.0 */
/* Submission and execution: plans for every comm of a batch, driven together, then the
 * per-op epilogue (average division, scratch release). */
#include "enqueue/enqueue.h"

#include <sched.h>
#include <stdlib.h>
#include <string.h>

#include "algo/algo.h"
#include "alloc.h"
#include "check.h"
#include "cuda/device.h"
#include "futex.h"
#include "kernels/kernels.h"
#include "log.h"
#include "param.h"

static size_t inputBytes(const struct papOpDesc* op, int nranks) {
  size_t esz = papKernTypeSize(op->dtype);
  switch (op->coll) {
  case PAP_COLL_REDUCESCATTER:
    return op->count * esz * (size_t)nranks;
  default:
    return op->count * esz;
  }
}

/* Pre-multiplied sum: scale the input once into a private buffer, then run a plain sum. */
static papcclResult_t prepareOp(struct papOpDesc* op) {
  if (!op->preMul) return papcclSuccess;
  size_t bytes = inputBytes(op, op->comm->nranks);
  if (bytes == 0) return papcclSuccess;
  PAP_CHECK(papAlignedAlloc(&op->tmp, bytes, "pre-multiplied input"));
  papKernHostScale(op->tmp, op->sendbuff, bytes / papKernTypeSize(op->dtype), op->dtype,
                   op->scalar);
  op->sendbuff = op->tmp;
  return papcclSuccess;
}

static void finishOp(struct papOpDesc* op, papcclResult_t res) {
  if (res == papcclSuccess && op->avg && op->count) {
    struct papComm* comm = op->comm;
    int apply = op->coll != PAP_COLL_REDUCE || comm->rank == op->root;
    if (apply) papKernHostDivide(op->recvbuff, op->recvbuff, op->count, op->dtype, comm->nranks);
  }
  free(op->tmp);
  op->tmp = NULL;
}

/* Sends and receives to self inside one batch pair up in order as local copies. */
static papcclResult_t planSelfP2p(struct papEngine* e, struct papOpDesc* ops, int nops,
                                  struct papComm* comm) {
  int si = 0, ri = 0;
  for (;;) {
    while (si < nops &&
           !(ops[si].comm == comm && ops[si].coll == PAP_COLL_SEND && ops[si].root == comm->rank))
      si++;
    while (ri < nops &&
           !(ops[ri].comm == comm && ops[ri].coll == PAP_COLL_RECV && ops[ri].root == comm->rank))
      ri++;
    if (si == nops && ri == nops) return papcclSuccess;
    if (si == nops || ri == nops) {
      PAP_WARN("%s to self without a matching %s from self in the same group",
               si < nops ? "papcclSend" : "papcclRecv", si < nops ? "papcclRecv" : "papcclSend");
      return papcclInvalidUsage;
    }
    size_t sb = ops[si].count * papKernTypeSize(ops[si].dtype);
    size_t rb = ops[ri].count * papKernTypeSize(ops[ri].dtype);
    if (sb != rb) {
      PAP_WARN("papcclSend to self of %zu bytes matched with papcclRecv of %zu bytes", sb, rb);
      return papcclInvalidUsage;
    }
    if (sb && papPlanCopy(e, ops[ri].recvbuff, ops[si].sendbuff, sb, -1, -1) < 0)
      return papcclSystemError;
    si++;
    ri++;
  }
}

static int isSelfP2p(const struct papOpDesc* op) {
  return (op->coll == PAP_COLL_SEND || op->coll == PAP_COLL_RECV) && op->root == op->comm->rank;
}

/* Builds comm's plan from its ops in the batch: collectives in call order, then p2p in call
 * order, so every rank puts messages on each queue in the same order whatever the
 * interleaving of collectives and p2p calls inside a group. */
static papcclResult_t buildPlan(struct papComm* comm, struct papOpDesc* ops, int nops) {
  struct papEngine* e = &comm->engine;
  papPlanReset(e);
  for (int pass = 0; pass < 2; pass++) {
    for (int i = 0; i < nops; i++) {
      struct papOpDesc* op = &ops[i];
      if (op->comm != comm) continue;
      int p2p = op->coll == PAP_COLL_SEND || op->coll == PAP_COLL_RECV;
      if (p2p != pass || isSelfP2p(op) || op->count == 0) continue;
      PAP_CHECK(papAlgoPlan(e, op));
    }
  }
  PAP_CHECK(planSelfP2p(e, ops, nops, comm));
  if (papPlanFailed(e)) return papcclSystemError;
  return papcclSuccess;
}

/* A peer this rank still waits on (an unfinished step names it) whose process is gone will
 * never deliver: fail now instead of at the timeout. A peer that finished its part and left
 * is fine, and so is one whose last messages already sit in our FIFO: one more progress pass
 * decides. */
static papcclResult_t checkPeers(struct papComm** comms, int ncomms) {
  for (int c = 0; c < ncomms; c++) {
    struct papComm* comm = comms[c];
    struct papEngine* e = &comm->engine;
    PAP_CHECK(comm->tops->progress(comm->tstate));
    int end = papEngineScanEnd(e);
    for (int i = e->first; i < end; i++) {
      struct papStep* s = &e->steps[i];
      if (s->state == PAP_STEP_DONE || s->peer < 0) continue;
      if (comm->tops->peerAlive(comm->tstate, s->peer)) continue;
      int progressed = 0;
      PAP_CHECK(papEngineProgress(e, &progressed));
      if (progressed) return papcclSuccess;
      PAP_WARN("peer %d (pid %d) exited while rank %d waits for it", s->peer, comm->pids[s->peer],
               comm->rank);
      return papcclRemoteError;
    }
  }
  return papcclSuccess;
}

/* Drives the engines of comms[] until all plans are done, an error, abort or the deadline.
 * Spins PAPCCL_SPIN_US after the last progress (yielding the core), then sleeps on the
 * transport's doorbell; with several comms it sleeps in short slices instead. */
static papcclResult_t driveAll(struct papComm** comms, int ncomms) {
  uint64_t now = papNowNs();
  uint64_t timeoutNs = (uint64_t)papParamTimeoutS() * 1000000000ull;
  uint64_t deadline = now + timeoutNs;
  /* Spinning only pays when the peer runs at the same time; on an oversubscribed host it
   * steals the CPU from the very rank we wait for, so sleep right after the cheap polls. */
  int oversubscribed = 0;
  for (int c = 0; c < ncomms; c++)
    oversubscribed |= comms[c]->oversubscribed;
  uint64_t spinNs = oversubscribed ? 0 : (uint64_t)papParamSpinUs() * 1000ull;
  uint64_t spinUntil = now + spinNs;
  uint64_t nextHealth = now + 100000000ull;
  unsigned polls = 0;
  for (;;) {
    int progressed = 0, alldone = 1;
    for (int c = 0; c < ncomms; c++) {
      struct papEngine* e = &comms[c]->engine;
      if (papEngineDone(e)) continue;
      int p = 0;
      if (e->pending) PAP_CHECK(papPapExtend(comms[c], &p));
      progressed |= p;
      PAP_CHECK(papEngineProgress(e, &p));
      progressed |= p;
      if (!papEngineDone(e)) alldone = 0;
    }
    if (alldone) return papcclSuccess;
    for (int c = 0; c < ncomms; c++) {
      if (atomic_load_explicit(&comms[c]->abortFlag, memory_order_acquire)) {
        PAP_WARN("operation cancelled: communicator (rank %d) was aborted", comms[c]->rank);
        return papcclInvalidUsage;
      }
    }
    if (progressed) {
      polls = 0;
      spinUntil = 0; /* recomputed lazily below: avoid a clock read per pass */
      continue;
    }
    if (spinUntil == 0) spinUntil = papNowNs() + spinNs;
    if ((++polls & 63) != 0) continue; /* cheap polls first: a peer is usually about to act */
    now = papNowNs();
    if (now >= nextHealth) {
      nextHealth = now + 100000000ull;
      PAP_CHECK(checkPeers(comms, ncomms));
    }
    if (now >= deadline) {
      PAP_WARN(
          "operation timed out after %lld s (PAPCCL_TIMEOUT_S): a peer is dead or did not "
          "call the same operation",
          (long long)papParamTimeoutS());
      return papcclRemoteError;
    }
    if (now < spinUntil) {
      sched_yield();
      continue;
    }
    /* Sleep. The token is taken before the last check, so a wakeup cannot be lost. */
    struct papComm* c0 = comms[0];
    uint32_t tok = c0->tops->waitToken(c0->tstate);
    int p = 0;
    for (int c = 0; c < ncomms && !p; c++) {
      if (papEngineDone(&comms[c]->engine)) continue;
      papcclResult_t res = papcclSuccess;
      if (comms[c]->engine.pending) res = papPapExtend(comms[c], &p);
      if (res == papcclSuccess && !p) res = papEngineProgress(&comms[c]->engine, &p);
      if (res != papcclSuccess) {
        c0->tops->wait(c0->tstate, tok, 0);
        return res;
      }
    }
    int64_t slice = ncomms == 1 ? 100000000 : 200000;
    /* Device work rings no doorbell when it finishes: look again soon. */
    for (int c = 0; c < ncomms; c++)
      if (comms[c]->engine.devPosted > 0 && slice > 20000) slice = 20000;
    if (p) slice = 0;
    if ((int64_t)(deadline - now) < slice) slice = (int64_t)(deadline - now);
    c0->tops->wait(c0->tstate, tok, slice);
    spinUntil = papNowNs() + spinNs / 4; /* a short spin after each wakeup */
  }
}

static int isColl(const struct papOpDesc* op) {
  return op->coll != PAP_COLL_SEND && op->coll != PAP_COLL_RECV;
}

/* Every collective arrives on its comm's board (in call order); then the ops whose plan
 * depends on the arrivals wait for the decider's commit. A batch of several ops (a group)
 * takes plans every rank can choose alone. Sends and receives on the collective's own comm
 * do not count: they may differ between its ranks (a peer without a partner), and every
 * rank must make the same choice. */
static papcclResult_t arriveAll(struct papOpDesc* ops, int nops) {
  for (int i = 0; i < nops; i++) {
    if (!isColl(&ops[i])) continue;
    struct papComm* comm = ops[i].comm;
    int grouped = 0;
    for (int j = 0; j < nops && !grouped; j++)
      grouped = j != i && (isColl(&ops[j]) || ops[j].comm != comm);
    PAP_CHECK(papPapArrive(comm, &ops[i], papPapNeedsDecision(comm, &ops[i], grouped)));
  }
  for (int i = 0; i < nops; i++)
    if (isColl(&ops[i])) PAP_CHECK(papPapAwaitPlan(ops[i].comm, &ops[i]));
  return papcclSuccess;
}

papcclResult_t papRunOps(struct papOpDesc* ops, int nops) {
  papcclResult_t res = papcclSuccess;
  struct papComm* stackComms[8];
  struct papComm** comms = stackComms;
  int ncomms = 0, cap = 8;
  for (int i = 0; i < nops; i++) {
    int found = 0;
    for (int c = 0; c < ncomms; c++)
      found |= comms[c] == ops[i].comm;
    if (found) continue;
    if (ncomms == cap) {
      struct papComm** nc = (struct papComm**)malloc(sizeof(*nc) * (size_t)cap * 2);
      if (nc == NULL) {
        PAP_WARN("out of memory for a group of %d communicators", ncomms + 1);
        if (comms != stackComms) free(comms);
        return papcclSystemError;
      }
      memcpy(nc, comms, sizeof(*nc) * (size_t)ncomms);
      if (comms != stackComms) free(comms);
      comms = nc;
      cap *= 2;
    }
    comms[ncomms++] = ops[i].comm;
  }
  int locked = 0;
  for (int c = 0; c < ncomms; c++, locked++) {
    pthread_mutex_lock(&comms[c]->progressLock);
    papProgressUserEnter(comms[c]);
  }
  for (int i = 0; i < nops; i++)
    PAP_CHECK_GOTO(prepareOp(&ops[i]), res, out);
  for (int c = 0; c < ncomms; c++) {
    int err = atomic_load_explicit(&comms[c]->asyncError, memory_order_acquire);
    if (err != papcclSuccess && err != papcclInProgress) {
      PAP_WARN("communicator (rank %d) has a pending error %d (%s); abort or destroy it",
               comms[c]->rank, err, papcclGetErrorString((papcclResult_t)err));
      res = (papcclResult_t)err;
      goto out;
    }
  }
  res = arriveAll(ops, nops);
  for (int c = 0; c < ncomms && res == papcclSuccess; c++)
    res = buildPlan(comms[c], ops, nops);
  int driven = res == papcclSuccess;
  if (driven) res = driveAll(comms, ncomms);
  if (res == papcclSuccess) {
    for (int i = 0; i < nops; i++)
      papPapComplete(ops[i].comm, &ops[i]);
  } else {
    /* The queues (or the arrival board) now hold a partial exchange: the comm cannot be
     * used again. */
    for (int c = 0; c < ncomms; c++) {
      if (!driven || !papEngineDone(&comms[c]->engine)) papCommSetError(comms[c], res);
      papPlanReset(&comms[c]->engine);
    }
  }
out:
  for (int i = 0; i < nops; i++)
    finishOp(&ops[i], res);
  for (int c = 0; c < locked; c++) {
    papProgressUserLeave(comms[c]);
    pthread_mutex_unlock(&comms[c]->progressLock);
  }
  if (comms != stackComms) free(comms);
  return res;
}

papcclResult_t papEnqueue(struct papOpDesc* op) {
  struct papComm* comm = op->comm;
  if (op->coll == PAP_COLL_SEND)
    op->seq = comm->p2pSendCount[op->root]++ | (1ull << 31);
  else if (op->coll == PAP_COLL_RECV)
    op->seq = comm->p2pRecvCount[op->root]++ | (1ull << 31);
  else {
    op->cseq = comm->collSeq++;
    op->seq = op->cseq & 0x7fffffffull;
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
