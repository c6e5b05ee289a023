/* SPDX-License-Identifier: Apache-2.0 */
/* Submission and execution: plans for every comm of a batch, driven together, then the
 * per-op epilogue (average division, scratch release). */
#include "enqueue.h"

#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "algo.h"
#include "alloc.h"
#include "arrival.h"
#include "check.h"
#include "futex.h"
#include "kernels.h"
#include "log.h"
#include "param.h"
#include "wait.h"

static size_t inputBytes(const struct papOpDesc* op, int nranks) {
  size_t esz = papKernTypeSize(op->call.dtype);
  switch (op->call.coll) {
  case PAP_COLL_REDUCESCATTER:
    return op->call.count * esz * (size_t)nranks;
  default:
    return op->call.count * esz;
  }
}

/* Pre-multiplied sum: scale the input once into a private buffer, then run a plain sum. */
static papcclResult_t prepareOp(struct papOpDesc* op) {
  if (!op->call.preMul) return papcclSuccess;
  size_t bytes = inputBytes(op, op->comm->nranks);
  if (bytes == 0) return papcclSuccess;
  PAP_CHECK(papAlignedAlloc(&op->tmp, bytes, "pre-multiplied input"));
  papKernHostScale(op->tmp, op->call.sendbuff, bytes / papKernTypeSize(op->call.dtype),
                   op->call.dtype, op->call.scalar);
  op->call.sendbuff = op->tmp;
  return papcclSuccess;
}

static void finishOp(struct papOpDesc* op, papcclResult_t res) {
  if (res == papcclSuccess && op->call.avg && op->call.count) {
    struct papComm* comm = op->comm;
    int apply = op->call.coll != PAP_COLL_REDUCE || comm->rank == op->call.root;
    if (apply)
      papKernHostDivide(op->call.recvbuff, op->call.recvbuff, op->call.count, op->call.dtype,
                        comm->nranks);
  }
  free(op->tmp);
  op->tmp = NULL;
}

/* Sends and receives to self inside one batch pair up in order as local copies. */
static papcclResult_t planSelfP2p(struct papEngine* e, struct papOpDesc* ops, int nops,
                                  struct papComm* comm) {
  int si = 0, ri = 0;
  for (;;) {
    while (si < nops && !(ops[si].comm == comm && ops[si].call.coll == PAP_COLL_SEND &&
                          ops[si].call.root == comm->rank))
      si++;
    while (ri < nops && !(ops[ri].comm == comm && ops[ri].call.coll == PAP_COLL_RECV &&
                          ops[ri].call.root == comm->rank))
      ri++;
    if (si == nops && ri == nops) return papcclSuccess;
    if (si == nops || ri == nops) {
      PAP_WARN("%s to self without a matching %s from self in the same group",
               si < nops ? "papcclSend" : "papcclRecv", si < nops ? "papcclRecv" : "papcclSend");
      return papcclInvalidUsage;
    }
    size_t sb = ops[si].call.count * papKernTypeSize(ops[si].call.dtype);
    size_t rb = ops[ri].call.count * papKernTypeSize(ops[ri].call.dtype);
    if (sb != rb) {
      PAP_WARN("papcclSend to self of %zu bytes matched with papcclRecv of %zu bytes", sb, rb);
      return papcclInvalidUsage;
    }
    if (sb && papStepCopy(e, ops[ri].call.recvbuff, ops[si].call.sendbuff, sb, -1, -1) < 0)
      return papcclSystemError;
    si++;
    ri++;
  }
}

static int isSelfP2p(const struct papOpDesc* op) {
  return (op->call.coll == PAP_COLL_SEND || op->call.coll == PAP_COLL_RECV) &&
         op->call.root == op->comm->rank;
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
      int p2p = op->call.coll == PAP_COLL_SEND || op->call.coll == PAP_COLL_RECV;
      if (p2p != pass || isSelfP2p(op) || op->call.count == 0) continue;
      /* The tag salt: the call (op->arr.callTag, set by papArrivalBegin on a message board). */
      e->tagSalt = p2p ? 0 : op->arr.callTag;
      struct papChain* chain = NULL;
      PAP_CHECK(papAlgoPlan(e, &op->call, &chain));
      /* The rest is planned as arrivals come (papArrivalPoll with PAP_POLL_EXTEND). */
      if (chain) op->arr.chain = chain;
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
    /* A peer that made another call (it may be waiting for us in another plan, or gone). */
    PAP_CHECK(papArrivalPoll(comm, PAP_POLL_MISMATCH, NULL, NULL));
    PAP_CHECK(comm->tops->msg->progress(comm->tstate));
    int end = papEngineScanEnd(e);
    for (int i = e->first; i < end; i++) {
      struct papStep* s = &e->steps[i];
      if (s->state == PAP_STEP_DONE || s->peer < 0) continue;
      if (comm->tops->live->peerAlive(comm->tstate, s->peer)) continue;
      int progressed = 0;
      PAP_CHECK(papEngineProgress(e, &progressed));
      if (progressed) return papcclSuccess;
      /* a peer that failed on a mismatch */
      PAP_CHECK(papArrivalPoll(comm, PAP_POLL_EXPLAIN, NULL, NULL));
      /* The peer may only have ended its comm after failing on a rank that died: name the
       * dead one (deadPeer names a dead process before a failed peer). */
      int gone = papCommDeadPeer(comm);
      if (gone < 0) gone = s->peer;
      PAP_WARN("peer %d (%s) exited while rank %d waits for it", gone, papCommPidText(comm, gone).s,
               comm->rank);
      return papcclRemoteError;
    }
    if (papCommDeadPeer(comm) >= 0) {
      /* What it sent before it died may finish this op: one more pass decides. */
      int progressed = 0;
      PAP_CHECK(papEngineProgress(e, &progressed));
      if (progressed) return papcclSuccess;
      PAP_CHECK(papArrivalPoll(comm, PAP_POLL_EXPLAIN, NULL, NULL));
      PAP_CHECK(papCommCheckDeadPeer(comm));
    }
  }
  return papcclSuccess;
}

static void describeDrive(const struct papWait* w, char* buf, size_t len) {
  const struct papComm* comm = (const struct papComm*)w->ctx;
  snprintf(buf, len, "operation on rank %d", comm != NULL ? comm->rank : -1);
}

/* Drives the engines of comms[] until all plans are done, an error, abort or the deadline
 * (the one wait, core/wait.h). Polls PAPCCL_SPIN_US after the last progress (yielding the
 * core when oversubscribed) and around the predicted last arrival of a lone op, else sleeps
 * on the transport's doorbell; with several comms it sleeps in short slices instead. */
static papcclResult_t driveAll(struct papComm** comms, int ncomms, const struct papOpDesc* lone) {
  /* The polling budget: the smallest of the comms'. Polls yield the core, so on a host
   * with more ranks than CPUs the rank we wait for (or a late one still computing) runs;
   * a wake-up from a sleep costs far more than the budget there (tens of us). */
  uint64_t spinNs = ncomms > 0 ? comms[0]->spinNs : 0;
  for (int c = 1; c < ncomms; c++)
    if (comms[c]->spinNs < spinNs) spinNs = comms[c]->spinNs;
  char what[64];
  struct papWait w;
  papWaitInit(&w, NULL, NULL, 1, spinNs, 0);
  w.ctx = ncomms > 0 ? comms[0] : NULL;
  papWaitDescribe(&w, describeDrive, what, sizeof(what));
  w.yield = 0;
  for (int c = 0; c < ncomms; c++)
    w.yield |= comms[c]->oversubscribed;
  /* A lone op may expect its last peer at a predicted time: be polling then. */
  if (lone != NULL && lone->arr.due)
    papWaitExpect(&w, lone->arr.tArr, lone->arr.due, lone->arr.spread);
  w.hint = ": a peer is dead or did not call the same operation";
  unsigned polls = 0;
  int spinFresh = 1; /* the spin budget was restarted by progress and not yet dated */
  for (;;) {
    int progressed = 0, alldone = 1;
    for (int c = 0; c < ncomms; c++) {
      struct papEngine* e = &comms[c]->engine;
      if (papEngineDone(e)) continue;
      int p = 0;
      if (e->pending) PAP_CHECK(papArrivalPoll(comms[c], PAP_POLL_EXTEND, NULL, &p));
      progressed |= p;
      PAP_CHECK(papEngineProgress(e, &p));
      progressed |= p;
      if (!papEngineDone(e)) alldone = 0;
    }
    if (alldone) return papcclSuccess;
    /* A mismatch notice from a message board's home (its push rings the doorbell): every
     * pass, before the plan posts more to a peer that may have failed on it and left. */
    for (int c = 0; c < ncomms; c++)
      PAP_CHECK(papArrivalPoll(comms[c], PAP_POLL_NOTICE, NULL, NULL));
    for (int c = 0; c < ncomms; c++) {
      if (!papCommAborted(comms[c])) continue;
      w.abortFlag = (const volatile int*)&comms[c]->abortFlag;
      return papWaitCheck(&w, 0); /* logs and returns the abort's result */
    }
    if (progressed) {
      polls = 0;
      spinFresh = 1; /* dated lazily below: no clock read per pass */
      continue;
    }
    /* Cheap polls first (a peer is usually about to act), but where ranks outnumber CPUs
     * every empty poll yields: the peer we wait for may be waiting for our CPU
     * (docs/PAP-ENGINE.md section 13). */
    if ((++polls & (w.yield ? 0u : 63u)) != 0) continue;
    uint64_t now = papNowNs();
    if (spinFresh) {
      papWaitProgressed(&w, now);
      spinFresh = 0;
    }
    if (papWaitHealthDue(&w, now)) {
      for (int c = 0; c < ncomms; c++)
        (void)papArrivalPoll(comms[c], PAP_POLL_DIAG, &w, NULL);
      w.hint = comms[0]->diagHint;
      PAP_CHECK(checkPeers(comms, ncomms));
    }
    PAP_CHECK(papWaitCheck(&w, now));
    if (papWaitSpin(&w, now)) continue;
    /* Sleep. The token is taken before the last check, so a wakeup cannot be lost. */
    struct papComm* c0 = comms[0];
    uint32_t tok = c0->tops->wake->waitToken(c0->tstate);
    int p = 0;
    for (int c = 0; c < ncomms && !p; c++) {
      if (papEngineDone(&comms[c]->engine)) continue;
      papcclResult_t res = papcclSuccess;
      if (comms[c]->engine.pending) res = papArrivalPoll(comms[c], PAP_POLL_EXTEND, NULL, &p);
      if (res == papcclSuccess && !p) res = papEngineProgress(&comms[c]->engine, &p);
      if (res != papcclSuccess) {
        c0->tops->wake->wait(c0->tstate, tok, 0);
        return res;
      }
    }
    int64_t slice = ncomms == 1 ? 100000000 : 200000;
    /* Device work rings no doorbell when it finishes: look again soon. */
    for (int c = 0; c < ncomms; c++)
      if (comms[c]->engine.devPosted > 0 && slice > 20000) slice = 20000;
    if (p) slice = 0;
    c0->tops->wake->wait(c0->tstate, tok, papWaitSlice(&w, now, slice));
    /* A short spin after each wakeup. */
    w.spinUntil = papNowNs() + w.spinNs / 4;
  }
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
  int locked = 0, stage = PAP_BATCH_NONE, driven = 0, broken = 0;
  for (int c = 0; c < ncomms; c++, locked++) {
    pthread_mutex_lock(&comms[c]->progressLock);
    papProgressUserEnter(comms[c]);
  }
  for (int c = 0; c < ncomms; c++) {
    comms[c]->curOps = ops;
    comms[c]->curNops = nops;
  }
  for (int i = 0; i < nops; i++)
    PAP_CHECK_GOTO(prepareOp(&ops[i]), res, end);
  for (int c = 0; c < ncomms; c++) {
    int err = atomic_load_explicit(&comms[c]->asyncError, memory_order_acquire);
    if (err != papcclSuccess && err != papcclInProgress) {
      PAP_WARN("communicator (rank %d) has a pending error %d (%s); abort or destroy it",
               comms[c]->rank, err, papResultString((papcclResult_t)err));
      res = (papcclResult_t)err;
      goto end;
    }
  }
  /* Pending checks, a flat run, arrival and the commit (src/arrival/batch.c). */
  res = papArrivalBegin(comms, ncomms, ops, nops, &stage);
  if (stage == PAP_BATCH_ARRIVED) {
    for (int c = 0; c < ncomms && res == papcclSuccess; c++)
      res = buildPlan(comms[c], ops, nops);
    driven = res == papcclSuccess;
    if (driven) res = driveAll(comms, ncomms, nops == 1 ? &ops[0] : NULL);
  }
end:
  /* Completion and its calls, or the failure's cause; the flight and the diagnosis end. */
  res = papArrivalEnd(comms, ncomms, ops, nops, res, stage, &broken);
  if (broken) {
    /* The queues (or the arrival board) now hold a partial exchange: the comm cannot be
     * used again. */
    for (int c = 0; c < ncomms; c++) {
      if (!driven || !papEngineDone(&comms[c]->engine)) papCommSetError(comms[c], res);
      /* Receives still posted must not land in the caller's buffers after we return. */
      if (driven && !papEngineDone(&comms[c]->engine) && comms[c]->tops->msg->abandon)
        comms[c]->tops->msg->abandon(comms[c]->tstate);
      papPlanReset(&comms[c]->engine);
    }
  }
  for (int i = 0; i < nops; i++)
    finishOp(&ops[i], res);
  for (int c = 0; c < locked; c++) {
    comms[c]->curOps = NULL;
    comms[c]->curNops = 0;
    papProgressUserLeave(comms[c]);
    pthread_mutex_unlock(&comms[c]->progressLock);
  }
  if (comms != stackComms) free(comms);
  return res;
}
