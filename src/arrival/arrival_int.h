/* SPDX-License-Identifier: Apache-2.0 */
/* The arrival layer's own header: the board's word layout, the message board's protocol,
 * struct papArrivalState and the helpers the layer's modules share (docs/PAP-ENGINE.md).
 * Only src/arrival/ and the tests of internals include it; other layers see arrival.h.
 *
 * Modules: board.c (slot life: release, positions, waits, diagnosis, drain), arrive.c
 * (papArrive), commit.c (decide, awaitCommit, extension), home.c (the message board's home
 * and mail), mismatch.c (the mismatch check, section 11), stats.c (prediction, completion,
 * statistics), arrival.c (init, free). */
#ifndef PAPCCL_ARRIVAL_INT_H_
#define PAPCCL_ARRIVAL_INT_H_

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "arrival.h"
#include "check.h"
#include "comm.h"
#include "wait.h"

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
   * (1: PAP-aware), the same on every rank; classic calls between probes skip the board.
   * The next probe's call, and the gap after it (PAPCCL_PAP_PROBE, doubled after each
   * probe that chose a classic plan, at most PAP_SEL_PROBE_GAP_MAX times that). */
  uint64_t calls;
  int agreedPap;
  uint64_t nextProbe;
  uint32_t probeGap;
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
  /* The batch between papArrivalBegin and papArrivalEnd: its ops (where the extension finds
   * the chain's op, op->arr.chain). */
  struct papOpDesc* batchOps;
  int batchNops;
  int32_t* ident; /* [nranks] 0..N-1: owners of plans that need no commit */
  int32_t* order; /* [nranks] scratch for statistics */
  uint64_t* stamps; /* [nranks] */
  uint64_t* slotBuf; /* [2 + 2 nranks]: one slot of the board, read in one go */
  uint64_t* sorted; /* [nranks] */
  uint64_t slotCseq[PAP_BOARD_SLOTS]; /* 1 + the last collective in each slot (0: none) */
  /* message board (the transport has a home table): the home's words (rank  0), this rank's
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
  /* Ops by path, and the last one's (path << 8 | why): written where ops are decided (any
   * calling thread), read by papArrivalStats (papPathStats). */
  _Atomic uint64_t pathOps[PAP_PATH_COUNT];
  _Atomic int lastPath;
  double sumSkew, sumTail, sumInColl; /* ns, over complete ops */
  double* sumLate; /* [nranks] ns */
  uint64_t* late; /* [nranks] times last */
  uint64_t reportOps; /* ops since the last PAP INFO line */
  uint64_t reportPap; /* of those, with a PAP-aware plan */
  uint64_t reportLate[PAPCCL_PAP_STATS_MAX_RANKS];
  uint64_t reportComplete;
  double reportSkew, reportTail;
};

#define PAP_CALL_BATCH 32

/* Board word indices of slot s: word, released, call (signature, root), rank_at[N], t_arr[N].
 * released = [gen:32 | ranks done reading the slot:32]; call: the first arriver's call, for
 * the mismatch check (section 11), next to the word every arriver has just CASed. Slots start
 * on a 64-byte line (papBoardSlotStride). */
#define SLOT_HDR 4
#define SLOT_WORDS(n) (SLOT_HDR + 2 * (size_t)(n))
static inline size_t slotBase(int n, int slot) {
  return (size_t)slot * papBoardSlotStride(n);
}
#define IDX_WORD(n, s) (slotBase(n, s))
#define IDX_REL(n, s) (slotBase(n, s) + 1)
#define IDX_CALL(n, s) (slotBase(n, s) + 2)
#define IDX_RANKAT(n, s, p) (slotBase(n, s) + SLOT_HDR + (size_t)(p))
#define IDX_TARR(n, s, r) (slotBase(n, s) + SLOT_HDR + (size_t)(n) + (size_t)(r))

static inline papcclResult_t bLoad(struct papComm* comm, size_t idx, uint64_t* v) {
  return comm->tops->board->atomic(comm->tstate, idx, PAP_BOARD_LOAD, 0, 0, v);
}
static inline papcclResult_t bStore(struct papComm* comm, size_t idx, uint64_t v) {
  return comm->tops->board->atomic(comm->tstate, idx, PAP_BOARD_STORE, v, 0, NULL);
}
/* A word published by this rank's next bStore (its readers read that one first). */
static inline papcclResult_t bStoreRelease(struct papComm* comm, size_t idx, uint64_t v) {
  return comm->tops->board->atomic(comm->tstate, idx, PAP_BOARD_STORE_RELEASE, v, 0, NULL);
}
/* count consecutive words from idx, each loaded atomically (together no snapshot). */
static inline papcclResult_t bRead(struct papComm* comm, size_t idx, size_t count, uint64_t* out) {
  for (size_t i = 0; i < count; i++)
    PAP_CHECK(bLoad(comm, idx + i, &out[i]));
  return papcclSuccess;
}
static inline papcclResult_t bCas(struct papComm* comm, size_t idx, uint64_t expect,
                                  uint64_t desired, int* okOut) {
  uint64_t old = 0;
  PAP_CHECK(comm->tops->board->atomic(comm->tstate, idx, PAP_BOARD_CAS, desired, expect, &old));
  *okOut = old == expect;
  return papcclSuccess;
}

static inline const volatile int* abortFlagOf(const struct papComm* comm) {
  return (const volatile int*)&comm->abortFlag;
}

/* Generations run 1..PAP_GEN_MASK (0 = slot never used) over the 64-bit collective count. */
static inline uint32_t genOf(uint64_t cseq) {
  return (uint32_t)((cseq / PAP_BOARD_SLOTS) % PAP_GEN_MASK + 1);
}
/* Whether generation g came before gen (within half the cycle). Collectives that skip the
 * board (flat ones) leave gaps: a slot's previous generation is any older one. */
static inline int genOlder(uint32_t g, uint32_t gen) {
  uint32_t d = (gen + PAP_GEN_MASK - g) % PAP_GEN_MASK;
  return g != 0 && d != 0 && d < PAP_GEN_MASK / 2;
}

static inline uint64_t makeWord(uint32_t gen, int algo, int commit, int decided, uint32_t nE,
                                uint32_t count) {
  return ((uint64_t)gen << 40) | ((uint64_t)(algo & 0x3f) << 34) | ((uint64_t)(commit & 1) << 33) |
         ((uint64_t)(decided & 1) << 32) | ((uint64_t)(nE & 0xffff) << 16) | (count & 0xffff);
}

/* The rank an entry of rank_at names, or -1. */
static inline int entryRank(uint64_t v, uint32_t gen, int n) {
  int r = (int)(uint32_t)v - 1;
  return (uint32_t)(v >> 32) == gen && r >= 0 && r < n ? r : -1;
}

/* ---- Mismatched calls (docs/PAP-ENGINE.md section 11) -----------------------------------
 * The first arriver writes its call (signature, root) in the slot (IDX_CALL) after its CAS
 * and before its rank_at entry. A later arriver reads it once that entry is there and compares
 * its own call; on a difference it writes both calls to the words after the slots, sets the
 * mark, and only then writes its own rank_at entry. After the slots, per slot: the mark
 * [gen:24 | why:8 | a:16 | b:16], the first mismatch seen in generation gen (rank a's call
 * against rank b's), then per rank the call the mark names. So a reader that sees every entry
 * of a generation, or the slot taken over by a newer one (every rank released it), sees the
 * mark if there is one. Shared boards only (not a message board). */
#define CHK_BASE(n) ((size_t)PAP_BOARD_SLOTS * papBoardSlotStride(n))
#define CHK_WORDS(n) (1 + 2 * (size_t)(n))
#define IDX_MARK(n, s) (CHK_BASE(n) + (size_t)(s)*CHK_WORDS(n))
#define IDX_SIG(n, s, r) (IDX_MARK(n, s) + 1 + 2 * (size_t)(r))
#define IDX_ROOT(n, s, r) (IDX_SIG(n, s, r) + 1)
#define MARK_GEN(m) ((uint32_t)((m) >> 40))
#define MARK_WHY(m) ((int)(((m) >> 32) & 0xffu))
#define MARK_A(m) ((int)(((m) >> 16) & 0xffffu))
#define MARK_B(m) ((int)((m)&0xffffu))
enum {
  WHY_CALL = 0, /* the calls differ */
  WHY_GROUPED /* the same call, grouped on one rank and alone on the other */
};
static inline uint64_t makeMark(uint32_t gen, int why, int a, int b) {
  return (uint64_t)gen << 40 | (uint64_t)(why & 0xff) << 32 | (uint64_t)(a & 0xffff) << 16 |
         (uint64_t)(b & 0xffff);
}

/* The message board's requests (to the home) and pushes (from it), docs/PAP-ENGINE.md
 * section 10. */
enum {
  HM_ARRIVE = 1,
  HM_COMMIT,
  HM_READ,
  HM_RELEASE,
  HM_CALL, /* a collective's call, for the mismatch check (no reply) */
  HM_SYNC, /* a = a number the home sends back (HP_SYNC) behind its earlier pushes */
  HM_ACK /* the sender has the home's mismatch notice (no reply) */
};
struct hmReq {
  uint32_t kind, slot, gen;
  int32_t rank;
  uint64_t a, b; /* ARRIVE: stamp, hmArriveFlags; COMMIT: expected word, new word */
  /* ARRIVE, with PAPCCL_CHECK_MISMATCH: 1 + the collective (0: no call), its signature and
   * root (section 11). CALL: a = how many calls (c, sig, root) follow the request. */
  uint64_t c, sig;
  int64_t root;
};
/* ARRIVE's and COMMIT's reply, then ranks at positions 0.. (ARRIVE: before ours; COMMIT: the
 * early ranks). READ's reply is the slot's words. */
struct hmReply {
  int32_t status; /* enum arrStep (ARRIVE), 1 = committed (COMMIT) */
  int32_t pos;
  uint64_t word; /* ARRIVE: the word before ours; COMMIT: the word now */
  uint64_t ranks[];
};
/* ARRIVE's b: decided, and the plan the arriving rank's selector commits at once, if it turns
 * out to be the first (a plan that waits for no arrival: the decider would commit it right
 * away; one round trip instead of two). */
#define HM_DECIDED 1u
#define HM_PROPOSE 2u
#define HM_ALGO(b) ((int)(((b) >> 8) & 0x3f))
enum {
  HP_WORD = 1,
  HP_NEXT,
  HP_COMMIT,
  HP_FULL,
  HP_MISMATCH,
  HP_SYNC /* word: the number of the HM_SYNC it answers */
};
struct hmPush {
  uint32_t kind, slot, gen;
  int32_t pos, rank; /* HP_NEXT: the arrival after the receiver's; HP_MISMATCH: ranks a, b */
  uint64_t word; /* HP_MISMATCH: the collective */
  uint64_t data[]; /* HP_COMMIT: early ranks; HP_FULL: the slot; HP_MISMATCH: a's signature
                    * and root, b's signature and root */
};

/* The home's record of one collective's first call (section 11): c = 1 + the collective
 * (0: none), who made it, and whether a different call was found (and pushed) already. */
#define PAP_CALL_RING 256
struct papCallRec {
  uint64_t c, sig;
  int32_t root, rank, marked;
};

/* What an arrival does with a slot word w, for both boards. */
enum arrStep {
  ARR_JOIN = 0,
  ARR_TAKE,
  ARR_WAIT,
  ARR_ERR_DECIDED,
  ARR_ERR_COUNT,
  ARR_ERR_GEN
};
static inline enum arrStep arrivalStep(uint64_t w, uint32_t gen, int decided, int n) {
  uint32_t g = PAP_W_GEN(w);
  if (g == gen) {
    if (PAP_W_DECIDED(w) != decided) return ARR_ERR_DECIDED;
    if (PAP_W_COUNT(w) >= (uint32_t)n) return ARR_ERR_COUNT;
    return ARR_JOIN;
  }
  return g == 0 || genOlder(g, gen) ? ARR_TAKE : ARR_ERR_GEN;
}
/* A slot held by the older generation g, released word rel: may generation gen take it? 2 =
 * a rank of gen did already, 1 = yes (reset released to gen), 0 = not yet. */
static inline int takeOverStep(uint64_t rel, uint32_t g, uint32_t gen, int n) {
  uint32_t rg = (uint32_t)(rel >> 32), rc = (uint32_t)rel;
  if (rg == gen) return 2;
  return (g == 0 && rel == 0) || (rg == g && rc == (uint32_t)n);
}

/* The layer's calls among its modules (and the tests of internals). */

/* Arrival of op on the board (stamp, position). decided: whether the plan waits for the
 * decider's commit; every rank computes it alike from the op's path (op->path.commit) and,
 * on a message board, the commits before it (papArrivalNeedsCommit, called once per
 * collective in call order). */
int papArrivalNeedsCommit(struct papComm* comm, const struct papOpDesc* op);
papcclResult_t papArrive(struct papComm* comm, struct papOpDesc* op, int decided);
/* The path counts and the last op's path into st; the counts in words ("flat 12, board 3")
 * into buf (path.c). */
void papPathStats(const struct papArrivalState* ps, papcclPapStats* st);
void papPathSummary(const struct papArrivalState* ps, char* buf, size_t cap);
/* For a decided op: the decider chooses and commits; others wait for it. Fills op->algo,
 * op->nE and ps->owners. Bounded by PAPCCL_TIMEOUT_S and abort. */
papcclResult_t papArrivalAwaitCommit(struct papComm* comm, struct papOpDesc* op);
/* While the engine has a pending extension (op's chain waits for its successor to arrive):
 * appends the rest of the plan once it can; *progressed = 1 then. */
papcclResult_t papArrivalExtend(struct papComm* comm, struct papOpDesc* op, int* progressed);
/* Flat small collectives (flat.c): attaching the mapped areas (from papArrivalInit); whether
 * op may run flat (every rank decides alike; asked by papPathDecide only, after the arenas);
 * running it. */
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
/* The algorithm op must run: its own (papcclCollConfig_t), else PAPCCL_ALGO's
 * (PAP_ALGO_AUTO: none). */
int papSelectForcedAlgo(const struct papOpDesc* op);
/* Completion: stamps, statistics, selector; papcclInvalidUsage when the board marks a
 * board op mismatched (a peer made another call: WARN), and when not every rank has arrived
 * yet, its check is left pending (papArrivalCheckMismatch). */
papcclResult_t papArrivalComplete(struct papComm* comm, struct papOpDesc* op);
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

/* board.c */
/* The wait of a collective's arrival phase (core/wait.h); `phase` says for what (named in
 * buf when a WARN or the diagnosis needs it). */
void papBoardWait(const struct papComm* comm, const struct papOpDesc* op, const char* phase,
                  char* buf, size_t len, struct papWait* w);
papcclResult_t papBoardArrivalError(const struct papComm* comm, const struct papOpDesc* op,
                                    enum arrStep e, uint32_t g);
/* Done reading the slot (plan, positions): once all N ranks of a generation released it,
 * the next generation may take the slot over. */
papcclResult_t papBoardRelease(struct papComm* comm, struct papArrival* a);
/* Rank at arrival position p (waits for the entry: it is written right after the CAS). */
papcclResult_t papBoardRankAt(struct papComm* comm, const struct papArrival* a, int p, int* rOut,
                              struct papWait* w);

/* home.c */
/* Installs homeServe and homePushed on a message board (papArrivalInit). */
papcclResult_t papHomeAttach(struct papComm* comm);
void papHomePush(struct papComm* comm, int peer, uint32_t kind, int slot, uint32_t gen, int pos,
                 int rank, uint64_t word, const uint64_t* data, size_t words);
/* The mail of slot for generation gen, reset when gen is newer; NULL when gen is older than
 * what the mail holds (a late push). mailLock held. */
struct papMail* papHomeMail(struct papArrivalState* ps, int slot, uint32_t gen);
void papHomeSetOwners(struct papMail* m, const uint64_t* ranks, uint32_t nE, int n);
/* A request to the home and its reply (in ps->reply). */
papcclResult_t papHomeCall(struct papComm* comm, const struct hmReq* q, size_t* len);

/* mismatch.c */
/* The first arriver's call, in its slot's line. */
papcclResult_t papMismatchPutFirst(struct papComm* comm, const struct papOpDesc* op, uint64_t sig);
/* A rank that arrived after the first (or was refused as grouped differently, why =
 * WHY_GROUPED): compares its call with the first arriver's. */
papcclResult_t papMismatchCheckArrival(struct papComm* comm, const struct papOpDesc* op,
                                       uint64_t sig, int why, int* loggedOut);
/* Completion of a board op: fails it on a mark; leaves its check pending while a peer has
 * not arrived. */
papcclResult_t papMismatchVerify(struct papComm* comm, const struct papOpDesc* op, int readable,
                                 int complete);
/* A message board, an op whose plan every rank chooses alone: its call joins the batch
 * for the home (sent every PAP_CALL_BATCH calls; at once on rank 0). */
papcclResult_t papMismatchQueueCall(struct papComm* comm, const struct papOpDesc* op);
/* At the home: rank `from` made call (sig, root) of collective c - 1. */
void papMismatchAtHome(struct papComm* comm, int from, uint64_t c, uint64_t sig, int32_t root);

#endif /* PAPCCL_ARRIVAL_INT_H_ */
