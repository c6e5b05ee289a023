/* SPDX-License-Identifier: Apache-2.0 */
/* The PAP engine: arrival tracking on the board, the commit, the selector and the statistics
 * (docs/PAP-ENGINE.md). */
#ifndef PAPCCL_PAP_PAP_H_
#define PAPCCL_PAP_PAP_H_

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "algo.h"
#include "comm.h"
#include "papccl.h"

/* The arrival board: PAP_BOARD_SLOTS slots of 64-bit words held by the home rank (rank 0)
 * and reached through the transport (boardAtomic, boardRead, notify). Slot layout (arrival_int.h):
 * word, released, the first arriver's call (signature, root), rank_at[N], t_arr[N], each slot
 * starting on a 64-byte line; after the slots, per slot, the mismatch check's words
 * (docs/PAP-ENGINE.md section 11): mark, then per rank its call's signature and root. */
#define PAP_BOARD_SLOTS 4
static inline size_t papBoardSlotStride(int nranks) {
  return (4 + 2 * (size_t)nranks + 7) & ~(size_t)7;
}
static inline size_t papBoardWords(int nranks) {
  return (size_t)PAP_BOARD_SLOTS * papBoardSlotStride(nranks) +
         (size_t)PAP_BOARD_SLOTS * (1 + 2 * (size_t)nranks);
}

papcclResult_t papArrivalInit(struct papComm* comm);
void papArrivalFree(struct papComm* comm);

/* Arrival of op on the board (stamp, position). decided: whether the plan waits for the
 * decider's commit; every rank computes it alike from the op and the commits before it
 * (papArrivalNeedsCommit, called once per collective in call order). */
int papArrivalNeedsCommit(struct papComm* comm, const struct papOpDesc* op, int grouped);
papcclResult_t papArrive(struct papComm* comm, struct papOpDesc* op, int decided);
/* For a decided op: the decider chooses and commits; others wait for it. Fills op->algo,
 * op->nE and comm->arrival->owners. Bounded by PAPCCL_TIMEOUT_S and abort. */
papcclResult_t papArrivalAwaitCommit(struct papComm* comm, struct papOpDesc* op);
/* While the engine has a pending extension (the chain waits for its successor to arrive):
 * appends the rest of the plan once it can; *progressed = 1 then. */
papcclResult_t papArrivalExtend(struct papComm* comm, int* progressed);
/* Flat small collectives (flat.c): the bytes of each rank's flat area the transport maps
 * (the same on every rank: PAPCCL_FLAT_MAX_BYTES); attaching the mapped areas (from
 * papArrivalInit); whether op runs flat (every rank decides alike); running it. */
size_t papFlatAreaBytes(int nranks);
papcclResult_t papFlatAttach(struct papComm* comm);
int papFlatEligible(const struct papComm* comm, const struct papOpDesc* op);
papcclResult_t papFlatRun(struct papComm* comm, struct papOpDesc* op);
/* A collective's signature [count:40 | datatype:8 | op:8 | collective:8]; with the root it
 * is what every rank must call alike. */
uint64_t papArrivalSignature(const struct papCall* c);
/* "AllReduce(count 1000, float, sum)", "Broadcast(count 8, int32, root 1)" into buf. */
const char* papArrivalCallString(uint64_t sig, int root, char* buf, size_t len);
/* Mismatched calls (docs/PAP-ENGINE.md section 11). A batch of ops starts (each collective
 * of it, flat or not) and ends on comm; */
void papArrivalFlightAdd(struct papComm* comm, const struct papOpDesc* op, int flat);
void papArrivalFlightEnd(struct papComm* comm);
/* the waits' health check (every 100 ms) and the start of a call with checks pending: a
 * mismatch marked on the board for a collective in flight or pending, or one of them run
 * flat by a peer where this rank runs it on the board, or the other way round: WARN and
 * papcclInvalidUsage. Never on the fast path. */
papcclResult_t papArrivalCheckMismatch(struct papComm* comm);
/* A message board, where a failure (a dead peer, an unreachable home) is about to be
 * reported: when the home's mismatch notice came, and names a collective this rank made, the
 * mismatch WARN and papcclInvalidUsage (a peer failed on the notice and left); else success.
 * Read after the failure was seen, since the notice arrives before its sender's end. */
papcclResult_t papArrivalNoticeExplains(struct papComm* comm);
/* A message board with the check on: the next collective's call (op's) folded into the hash
 * of every call so far on the comm; returns its tag bits (bits 16-31 of the collective's
 * message tags), so that once two ranks' calls differ none of their messages match. */
uint32_t papArrivalCallTag(struct papComm* comm, const struct papCall* call);
/* A message board: sends the calls this rank has not sent to the home yet (every
 * PAP_CALL_BATCH calls, from the waits' health checks, and after a batch that received
 * nothing). */
papcclResult_t papArrivalFlushCalls(struct papComm* comm);
/* The WARN of a mismatch between rank a's call and rank b's in collective cseq. */
void papArrivalMismatchWarn(uint64_t cseq, int a, uint64_t sigA, int rootA, int b, uint64_t sigB,
                            int rootB);
/* Flat lines (flat.c): a peer whose line holds collective cseq (it ran it flat): 1 and its
 * rank and signature, else 0. */
int papFlatPeerAt(struct papComm* comm, uint64_t cseq, int* rankOut, uint64_t* sigOut);
/* Every collective, flat or not, in call order: its prediction context and when this rank
 * expects the last arrival (op->arr.ctx, op->arr.due; 0: no wait worth predicting), then
 * sig joins the recent history. papArrivalComplete learns from the op's stamps. */
void papArrivalPredict(struct papComm* comm, struct papOpDesc* op, uint64_t sig);
/* The algorithm PAPCCL_ALGO forces (PAP_ALGO_AUTO: none). */
int papSelectForcedAlgo(void);
/* Completion: stamps, statistics, selector; papcclInvalidUsage when the board marks a
 * board op mismatched (a peer made another call: WARN), and when not every rank has arrived
 * yet, its check is left pending (papArrivalCheckMismatch). */
papcclResult_t papArrivalComplete(struct papComm* comm, struct papOpDesc* op);
/* papcclCommGetPapStats's figures (papcclInvalidUsage before the comm is up). */
papcclResult_t papArrivalStats(struct papComm* comm, papcclPapStats* stats);
/* Which ranks arrived at op (arrived[r] = 1), read from a shared board: 0; -1 where the
 * board cannot tell (a message board, a flat op, the slot moved on). For diagnostics. */
int papArrivalArrived(struct papComm* comm, const struct papOpDesc* op, unsigned char* arrived);
/* Hang diagnosis (diag.c), by the waiting thread at its health checks: composes what it
 * waits for (comm->curOps, arrivals, the engine's awaited peers) into comm->diagHint, points
 * w->hint at it (the timeout's WARN) and publishes it in comm->diagText. seen: the ranks a
 * flat op has seen, or NULL (the board tells). papDiagFinish: the wait is over, with res
 * (a failure keeps its text, as what the failed operation waited for). */
void papDiagUpdate(struct papComm* comm, struct papWait* w, const int* seen);
void papDiagFinish(struct papComm* comm, papcclResult_t res);
/* Destroy on rank 0 of a network board: waits (bounded) until every rank released the
 * slots of the last collectives. */
void papArrivalDrainBoard(struct papComm* comm);

/* Selector (select.c): the one place an op's algorithm is chosen, PAPCCL_ALGO parsed once.
 * papSelectLocal: the choice every rank makes alone at arrival (classic plans, or a PAP plan
 * over all ranks in rank order); papArrivalNeedsCommit: whether the decider chooses instead;
 * papSelect: the decider's choice. */
void papSelectLocal(const struct papComm* comm, struct papOpDesc* op);
struct papSelChoice {
  int algo; /* enum papAlgo */
  int wait; /* PAP-aware: wait for arrivals before committing */
  int watch; /* keep measuring every call of this size (a message board's probes) */
};
struct papSelChoice papSelect(struct papComm* comm, const struct papOpDesc* op);
/* The bytes the selector's buckets and model use for op (the whole vector of AllGather and
 * ReduceScatter; the buffer of the others). */
size_t papSelectBytes(const struct papComm* comm, const struct papOpDesc* op);
/* Feeds one complete op's skew, in-burst gap and tail (last arrival to completion) into its
 * bucket; pap: the op ran a PAP plan the selector chose. */
void papSelectObserve(struct papComm* comm, const struct papOpDesc* op, double skewNs, double gapNs,
                      double tailNs, int pap);
/* A commit of op chose algo and whether to keep watching: on a message board, whether the
 * next calls of its size go through the board (papArrivalNeedsCommit). */
void papSelectAgree(struct papComm* comm, const struct papOpDesc* op, int algo, int watch);
/* tau_gap for the decider: how long without a new arrival before committing. */
uint64_t papSelectGapNs(const struct papComm* comm, const struct papOpDesc* op);

#endif /* PAPCCL_PAP_PAP_H_ */
