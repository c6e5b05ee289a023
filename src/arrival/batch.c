/* SPDX-License-Identifier: Apache-2.0 */
/* The batch interface: the three calls through which the enqueue layer runs a batch of ops
 * (papRunOps) through the arrival layer (docs/ARCHITECTURE.md section 3). */
#include "arrival_int.h"
#include "engine.h"

static int isColl(const struct papOpDesc* op) {
  return op->call.coll != PAP_COLL_SEND && op->call.coll != PAP_COLL_RECV;
}

/* Every collective arrives on its comm's board (in call order); then the ops whose plan
 * depends on the arrivals (their path says so: a batch of several collectives, a group,
 * takes plans every rank can choose alone) wait for the decider's commit. */
static papcclResult_t arriveAll(struct papOpDesc* ops, int nops) {
  for (int i = 0; i < nops; i++) {
    if (!isColl(&ops[i])) continue;
    struct papComm* comm = ops[i].comm;
    PAP_CHECK(papArrive(comm, &ops[i], papArrivalNeedsCommit(comm, &ops[i])));
  }
  for (int i = 0; i < nops; i++)
    if (isColl(&ops[i])) PAP_CHECK(papArrivalAwaitCommit(ops[i].comm, &ops[i]));
  return papcclSuccess;
}

/* Over a message board the calls are compared at rank 0, after the data may have left: the
 * call in the tags keeps mismatched messages apart until the verdict comes. Each planned
 * collective's tag bits, per comm in call order (as buildPlan plans them). */
static void tagCalls(struct papOpDesc* ops, int nops) {
  for (int i = 0; i < nops; i++) {
    struct papOpDesc* op = &ops[i];
    struct papArrivalState* ps = op->comm->arrival;
    if (!isColl(op) || op->call.count == 0 || !(ps->msg && ps->checkMismatch)) continue;
    op->arr.callTag = papArrivalCallTag(op->comm, &op->call);
  }
}

papcclResult_t papArrivalBegin(struct papComm** comms, int ncomms, struct papOpDesc* ops, int nops,
                               int* stageOut) {
  papcclResult_t res = papcclSuccess;
  *stageOut = PAP_BATCH_OVER;
  for (int c = 0; c < ncomms; c++) {
    comms[c]->arrival->batchOps = ops;
    comms[c]->arrival->batchNops = nops;
  }
  for (int i = 0; i < nops; i++) {
    ops[i].arr.callTag = 0;
    ops[i].arr.chain = NULL;
  }
  for (int c = 0; c < ncomms; c++) {
    /* A collective that completed here before its peers arrived, still to be checked, or
     * one a message board's home found mismatched. */
    if (!papArrivalChecksDue(comms[c]->arrival)) continue;
    res = papArrivalCheckMismatch(comms[c]);
    if (res != papcclSuccess) {
      papCommSetError(comms[c], res);
      return res;
    }
  }
  if (nops == 1 && ops[0].path.path == PAP_PATH_FLAT) {
    /* Small and on one host: no plan, no board (src/arrival/flat.c); the op's path says. */
    papArrivalFlightAdd(ops[0].comm, &ops[0], 1);
    res = papFlatRun(ops[0].comm, &ops[0]);
    if (res == papcclSuccess)
      (void)papArrivalComplete(ops[0].comm, &ops[0]); /* flat: checked as the lines were read */
    else
      papCommSetError(ops[0].comm, res); /* peers may have read a partial exchange */
    return res;
  }
  *stageOut = PAP_BATCH_ARRIVED;
  for (int i = 0; i < nops; i++)
    if (isColl(&ops[i])) papArrivalFlightAdd(ops[i].comm, &ops[i], 0);
  res = arriveAll(ops, nops);
  if (res == papcclSuccess) tagCalls(ops, nops);
  return res;
}

/* The op of comm's batch whose chain waits for its successor (buildPlan set it), or NULL. */
static struct papOpDesc* chainOpOf(struct papComm* comm) {
  struct papArrivalState* ps = comm->arrival;
  for (int i = 0; i < ps->batchNops; i++)
    if (ps->batchOps[i].comm == comm && ps->batchOps[i].arr.chain != NULL) return &ps->batchOps[i];
  return NULL;
}

papcclResult_t papArrivalPoll(struct papComm* comm, unsigned what, struct papWait* w,
                              int* progressedOut) {
  papcclResult_t res = papcclSuccess;
  if (progressedOut != NULL) *progressedOut = 0;
  if ((what & PAP_POLL_EXTEND) && comm->engine.pending) {
    int p = 0;
    res = papArrivalExtend(comm, chainOpOf(comm), &p);
    if (progressedOut != NULL) *progressedOut = p;
  }
  if (res == papcclSuccess && (what & PAP_POLL_NOTICE)) res = papArrivalNoticeCheck(comm);
  if (res == papcclSuccess && (what & PAP_POLL_DIAG)) papDiagUpdate(comm, w, NULL);
  if (res == papcclSuccess && (what & PAP_POLL_MISMATCH)) res = papArrivalCheckMismatch(comm);
  if (res == papcclSuccess && (what & PAP_POLL_EXPLAIN)) res = papArrivalNoticeExplains(comm);
  return res;
}

/* Whether the plan just run received anything from a peer. */
static int planHeard(const struct papEngine* e) {
  for (int p = 0; p < e->nranks; p++)
    if (e->lastRecv[p] >= 0) return 1;
  return 0;
}

/* A batch that arrived and ran (res): its calls, completion or the failure's cause. */
static papcclResult_t endArrived(struct papComm** comms, int ncomms, struct papOpDesc* ops,
                                 int nops, papcclResult_t res, int* brokenOut) {
  if (res == papcclSuccess) {
    /* A plan that received nothing finished without its peers: its calls go to the home now
     * (a peer that waits for a mismatched call may have none of its own to tell). */
    for (int c = 0; c < ncomms; c++)
      if (comms[c]->arrival->callN && !planHeard(&comms[c]->engine))
        res = papArrivalFlushCalls(comms[c]);
  }
  if (res == papcclSuccess) {
    /* Done with every step, unless a peer made another call (the board says so). */
    for (int i = 0; i < nops; i++) {
      papcclResult_t r = papArrivalComplete(ops[i].comm, &ops[i]);
      if (r == papcclSuccess) continue;
      papCommSetError(ops[i].comm, r);
      if (res == papcclSuccess) res = r;
    }
    return res;
  }
  /* A failure a mismatch caused (a peer that failed on it and left): say so. */
  for (int c = 0; c < ncomms && res != papcclInvalidUsage; c++)
    if (papArrivalNoticeCheck(comms[c]) == papcclInvalidUsage) res = papcclInvalidUsage;
  *brokenOut = 1;
  return res;
}

papcclResult_t papArrivalEnd(struct papComm** comms, int ncomms, struct papOpDesc* ops, int nops,
                             papcclResult_t res, int stage, int* brokenOut) {
  *brokenOut = 0;
  if (stage == PAP_BATCH_ARRIVED) res = endArrived(comms, ncomms, ops, nops, res, brokenOut);
  for (int c = 0; c < ncomms; c++) {
    papArrivalFlightEnd(comms[c]);
    if (comms[c]->arrival != NULL) {
      comms[c]->arrival->batchOps = NULL;
      comms[c]->arrival->batchNops = 0;
    }
  }
  for (int c = 0; c < ncomms; c++)
    if (comms[c]->diagActive) papDiagFinish(comms[c], res); /* only this thread sets it */
  return res;
}
