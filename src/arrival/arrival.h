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
 * and reached through the transport (boardAtomic, boardRead, notify). Slot layout (arrival.c):
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

/* Board word: [gen:24 | watch:1 | algo:5 | commit:1 | decided:1 | nE:16 | count:16]; watch:
 * the decider's selector wants every call of this size measured (message boards). */
#define PAP_W_COUNT(w) ((uint32_t)((w)&0xffffu))
#define PAP_W_NE(w) ((uint32_t)(((w) >> 16) & 0xffffu))
#define PAP_W_DECIDED(w) ((int)(((w) >> 32) & 1u))
#define PAP_W_COMMIT(w) ((int)(((w) >> 33) & 1u))
#define PAP_W_ALGO(w) ((int)(((w) >> 34) & 0x1fu))
#define PAP_W_WATCH(w) ((int)(((w) >> 39) & 1u))
#define PAP_W_WATCH_BIT 0x20 /* in makeWord's algo argument */
_Static_assert(PAP_ALGO_COUNT <= 32, "the board word holds 5 bits of algorithm");
#define PAP_W_GEN(w) ((uint32_t)((w) >> 40))
#define PAP_GEN_MASK 0xffffffu

/* Size buckets of the selector: floor(log2 bytes), per collective with a PAP-aware plan
 * (enum papColl values below PAP_SEL_COLLS: allreduce, broadcast, reduce, allgather,
 * reducescatter). */
#define PAP_SEL_BUCKETS 48
#define PAP_SEL_TAIL_WIN 8 /* tails kept per mode (select.c) */
#define PAP_SEL_COLLS 5

#define PAP_PREDICT_CONTEXTS 64

struct papSelBucket {
  double skewEma; /* ns */
  double skew2Ema; /* ns^2 */
  double gapEma; /* in-burst inter-arrival gap, ns */
  uint64_t samples;
  int arrivalPlans; /* current mode: 1 = arrival-aware plans, 0 = classic */
  int up; /* consecutive checks for switching to PAP */
  int down; /* ... and back */
  /* Measured cost: time from the last arrival to completion, per mode (0 classic, 1 PAP).
   * A PAP mode that measures no better than the classic one goes back and is not tried
   * again for probeWait samples (doubling after each failed try). */
  float tailWin[2]
               [PAP_SEL_TAIL_WIN]; /* ns: the last tails (a ring; the mode's first op left out) */
  uint32_t tailN[2]; /* ops of the mode (PAP: since the last switch to it) */
  uint64_t probeAfter; /* no switch to PAP before this many samples */
  uint32_t probeWait; /* samples to wait after the next failed try */
  /* On a message board: calls of this size so far and the plan kind the last commit chose
   * (1: PAP-aware), the same on every rank; classic calls between probes skip the board. */
  uint64_t calls;
  int agreedPap;
};

/* What a rank of a message board (docs/PAP-ENGINE.md section 10) knows of one slot: written
 * by its own arrival's reply and by the home's pushes (any thread, under mailLock). */
struct papMail {
  uint32_t gen; /* the generation these entries belong to (0: none) */
  uint64_t word; /* the latest slot word known */
  int committed; /* word carries the commit; owners[0..nE) are set */
  int hasFull; /* full holds the whole slot after the last arrival */
  int succPos; /* the arrival after ours: position and rank (-1: not known) */
  int succRank;
  int32_t* owners; /* [nranks] arrival order of the early ranks */
  int32_t* before; /* [nranks] ranks at positions before ours */
  uint64_t* full; /* [2 + 2 nranks] */
};

/* Per-communicator PAP state; owned by the progress-lock holder. */
struct papArrivalState {
  int nranks;
  struct papSelBucket buckets[PAP_SEL_COLLS][PAP_SEL_BUCKETS];
  int32_t* owners; /* [nranks] plan of the op being built: arrival order */
  struct papChain* chain; /* the chain op waiting for its successor, or NULL */
  struct papOpDesc* chainOp; /* that op */
  int32_t* ident; /* [nranks] 0..N-1: owners of plans that need no commit */
  int32_t* order; /* [nranks] scratch for statistics */
  uint64_t* stamps; /* [nranks] */
  uint64_t* slotBuf; /* [2 + 2 nranks]: one slot of the board, read in one go */
  uint64_t* sorted; /* [nranks] */
  uint64_t slotCseq[PAP_BOARD_SLOTS]; /* 1 + the last collective in each slot (0: none) */
  /* message board (the transport has homeCall): the home's words (rank  0), this rank's
   * mail per slot, a reply buffer */
  int msg;
  uint64_t* home;
  pthread_mutex_t mailLock;
  struct papMail mail[PAP_BOARD_SLOTS];
  uint64_t* reply; /* PAP_HOME_MAX_BYTES */
  /* flat collectives (flat.c) */
  char** flatArea; /* [nranks] each rank's flat area, mapped here */
  size_t flatLine; /* bytes of one line (header + input) */
  size_t flatCap; /* largest input of a flat op (0: no flat ops on this comm) */
  uint64_t flatSeq; /* flat ops so far */
  int* flatSeen; /* [nranks] scratch */
  /* Mismatched calls (PAPCCL_CHECK_MISMATCH, docs/PAP-ENGINE.md section 11): the batch
   * running now (collectives [flightLo, flightHi), flat or on the board), and per slot
   * 1 + the collective that completed here before every rank had arrived (its check comes
   * later: at the next call and in the waits' health checks). */
  int checkMismatch;
  int flightFlat; /* the batch is one flat op: its call */
  uint64_t flightSig;
  int flightRoot;
  uint64_t flightLo, flightHi;
  uint64_t pend[PAP_BOARD_SLOTS];
  int pendAny;
  uint64_t mySig[PAP_BOARD_SLOTS]; /* this rank's last call in each slot, and its root */
  int myRoot[PAP_BOARD_SLOTS];
  uint64_t madeHi; /* 1 + the last collective this rank has made (started) */
  /* On a message board: at the home (rank 0), the first call of each of the last
   * PAP_CALL_RING collectives and who made it; at every rank, the first mismatch the home
   * found and pushed (under mailLock; noticeAny is set once it is there, from any thread),
   * and whether this rank has failed on it already (its WARN is made once). */
  struct papCallRec* calls;
  uint64_t callHash; /* every call so far on this comm, hashed (its message tags) */
  uint64_t* callBuf; /* calls not sent to the home yet: PAP_CALL_BATCH of (c, sig, root) */
  int callN;
  _Atomic int noticeAny;
  int noticeTold;
  /* papArrivalNoticeExplains' round trips to the home: the last one sent, the last answered
   * (HP_SYNC, from the home's pushes). */
  uint64_t syncSent;
  _Atomic uint64_t syncSeen;
  /* The notice's acknowledgements (HM_ACK): at the home, which ranks have read it (it waits
   * for them before it fails itself, so that its end cannot overtake its notice); at every
   * other rank, whether it sent its own. */
  _Atomic uint32_t* acked;
  int noticeAcked;
  struct {
    uint64_t cseq, sigA, sigB;
    int a, b, rootA, rootB;
  } notice;
  /* Predicted waits: ns from this rank's arrival to the last one, an EMA per context (the
   * op's signature and the two collectives before it, hashed), as training repeats the
   * same sequence every step (papArrivalPredict). */
  double waitEma[PAP_PREDICT_CONTEXTS];
  double waitDev[PAP_PREDICT_CONTEXTS]; /* EMA of |waited - prediction|, ns */
  uint32_t waitSamples[PAP_PREDICT_CONTEXTS];
  uint64_t recentSig[2]; /* signatures of the last two collectives */
  const char* lastName; /* the name in st.lastAlgoName (a constant string) */
  /* statistics (papcclPapStats) */
  papcclPapStats st;
  double sumSkew, sumTail, sumInColl; /* ns, over complete ops */
  double* sumLate; /* [nranks] ns */
  uint64_t* late; /* [nranks] times last */
  uint64_t reportOps; /* ops since the last PAP INFO line */
  uint64_t reportPap; /* of those, with a PAP-aware plan */
  uint64_t reportLate[PAPCCL_PAP_STATS_MAX_RANKS];
  uint64_t reportComplete;
  double reportSkew, reportTail;
};

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
/* Whether the start of a call must run papArrivalCheckMismatch: a check left pending, or a
 * mismatch notice from a message board's home. One flag and one relaxed load. */
static inline int papArrivalChecksDue(struct papArrivalState* ps) {
  return ps->pendAny || atomic_load_explicit(&ps->noticeAny, memory_order_relaxed);
}
/* A message board's mismatch notice, if one came (one relaxed load when none did): the
 * error it means for this rank, else success. */
static inline papcclResult_t papArrivalNoticeCheck(struct papComm* comm) {
  if (!atomic_load_explicit(&comm->arrival->noticeAny, memory_order_relaxed)) return papcclSuccess;
  return papArrivalCheckMismatch(comm);
}
/* A message board with the check on: the next collective's call (op's) folded into the hash
 * of every call so far on the comm; returns its tag bits (bits 16-31 of the collective's
 * message tags), so that once two ranks' calls differ none of their messages match. */
uint32_t papArrivalCallTag(struct papComm* comm, const struct papCall* call);
/* A message board: sends the calls this rank has not sent to the home yet (every
 * PAP_CALL_BATCH calls, from the waits' health checks, and after a batch that received
 * nothing). */
#define PAP_CALL_BATCH 32
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
/* The algorithm op must run: its own (papcclCollConfig_t), else PAPCCL_ALGO's
 * (PAP_ALGO_AUTO: none). */
int papSelectForcedAlgo(const struct papOpDesc* op);
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
