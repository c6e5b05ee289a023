/* SPDX-License-Identifier: Apache-2.0 */
/* Arrival tracking on the board, the decider's commit, the waiters, and per-op statistics
 * (docs/PAP-ENGINE.md sections 1-3). */
#include <math.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "algo.h"
#include "alloc.h"
#include "arrival.h"
#include "check.h"
#include "comm.h"
#include "fault.h"
#include "futex.h"
#include "log.h"
#include "param.h"
#include "wait.h"

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

static papcclResult_t bLoad(struct papComm* comm, size_t idx, uint64_t* v) {
  return comm->tops->boardAtomic(comm->tstate, idx, PAP_BOARD_LOAD, 0, 0, v);
}
static papcclResult_t bStore(struct papComm* comm, size_t idx, uint64_t v) {
  return comm->tops->boardAtomic(comm->tstate, idx, PAP_BOARD_STORE, v, 0, NULL);
}
/* A word published by this rank's next bStore (its readers read that one first). */
static papcclResult_t bStoreRelease(struct papComm* comm, size_t idx, uint64_t v) {
  return comm->tops->boardAtomic(comm->tstate, idx, PAP_BOARD_STORE_RELEASE, v, 0, NULL);
}
/* count consecutive words from idx: one round trip where the backend can (remote boards). */
static papcclResult_t bRead(struct papComm* comm, size_t idx, size_t count, uint64_t* out) {
  if (comm->tops->boardRead) return comm->tops->boardRead(comm->tstate, idx, count, out);
  for (size_t i = 0; i < count; i++)
    PAP_CHECK(bLoad(comm, idx + i, &out[i]));
  return papcclSuccess;
}
static papcclResult_t bCas(struct papComm* comm, size_t idx, uint64_t expect, uint64_t desired,
                           int* okOut) {
  uint64_t old = 0;
  PAP_CHECK(comm->tops->boardAtomic(comm->tstate, idx, PAP_BOARD_CAS, desired, expect, &old));
  *okOut = old == expect;
  return papcclSuccess;
}

static const volatile int* abortFlagOf(const struct papComm* comm) {
  return (const volatile int*)&comm->abortFlag;
}

static void describeArrivalWait(const struct papWait* w, char* buf, size_t len) {
  const struct papComm* comm = (const struct papComm*)w->ctx;
  const struct papOpDesc* op = (const struct papOpDesc*)w->ctx2;
  snprintf(buf, len, "collective #%llu on rank %d, waiting %s", (unsigned long long)op->call.cseq,
           comm->rank, w->phase);
}

/* The wait of a collective's arrival phase (core/wait.h); `phase` says for what (named in
 * buf when a WARN or the diagnosis needs it). */
static void arrivalWait(const struct papComm* comm, const struct papOpDesc* op, const char* phase,
                        char* buf, size_t len, struct papWait* w) {
  papWaitInit(w, NULL, abortFlagOf(comm), 1, comm->spinNs, 1000000);
  w->ctx = comm;
  w->ctx2 = op;
  w->phase = phase;
  papWaitDescribe(w, describeArrivalWait, buf, len);
  w->yield = comm->oversubscribed;
  w->hint = ": a rank never arrived or is dead";
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
static enum arrStep arrivalStep(uint64_t w, uint32_t gen, int decided, int n) {
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
static int takeOverStep(uint64_t rel, uint32_t g, uint32_t gen, int n) {
  uint32_t rg = (uint32_t)(rel >> 32), rc = (uint32_t)rel;
  if (rg == gen) return 2;
  return (g == 0 && rel == 0) || (rg == g && rc == (uint32_t)n);
}
static papcclResult_t arrivalError(const struct papComm* comm, const struct papOpDesc* op,
                                   enum arrStep e, uint32_t g) {
  int decided = op->arr.decided;
  switch (e) {
  case ARR_ERR_DECIDED:
    PAP_WARN(
        "collective #%llu: rank %d %s the arrival commit but another rank does not (the "
        "same collective was called inside a group on some ranks and alone on others; "
        "group alike on every rank or set PAPCCL_PAP=0)",
        (unsigned long long)op->call.seq, comm->rank, decided ? "waits for" : "skips");
    return papcclInvalidUsage;
  case ARR_ERR_COUNT:
    PAP_WARN("collective #%llu: more arrivals than ranks on the board (mismatched calls?)",
             (unsigned long long)op->call.seq);
    return papcclInvalidUsage;
  default:
    PAP_WARN(
        "collective #%llu: the arrival slot holds generation %u, expected %u or an older one "
        "(ranks called different collectives?)",
        (unsigned long long)op->call.seq, g, op->arr.gen);
    return papcclInternalError;
  }
}

/* Done reading the slot (plan, positions): once all N ranks of a generation released it,
 * the next generation may take the slot over. */
static papcclResult_t releaseSlot(struct papComm* comm, struct papArrival* a) {
  if (!a->used || a->released) return papcclSuccess;
  a->released = 1;
  if (comm->arrival->msg) {
    struct hmReq q = {HM_RELEASE, (uint32_t)a->slot, a->gen, comm->rank, 0, 0};
    return comm->tops->homeSend(comm->tstate, &q, sizeof(q));
  }
  return comm->tops->boardAtomic(comm->tstate, IDX_REL(comm->nranks, a->slot), PAP_BOARD_FADD, 1, 0,
                                 NULL);
}

/* The slot still holds an older generation g (0: never used): may we take it over? 1 = yes
 * (released is reset for gen), 0 = not yet (a rank of generation g has not finished reading
 * it). Every rank skips the same collectives, so a rank that has not finished g is the only
 * one that can still need the slot. */
static papcclResult_t mayTakeOver(struct papComm* comm, const struct papArrival* a, uint32_t g,
                                  int* okOut) {
  size_t ri = IDX_REL(comm->nranks, a->slot);
  uint64_t rel = 0;
  *okOut = 0;
  PAP_CHECK(bLoad(comm, ri, &rel));
  int t = takeOverStep(rel, g, a->gen, comm->nranks);
  if (t == 2) { /* another rank of our generation reset it already */
    *okOut = 1;
    return papcclSuccess;
  }
  if (t == 0) return papcclSuccess;
  int won = 0;
  PAP_CHECK(bCas(comm, ri, rel, (uint64_t)a->gen << 32, &won));
  *okOut = 1; /* won, or lost to a rank of our generation doing the same */
  return papcclSuccess;
}

static inline uint64_t makeWord(uint32_t gen, int algo, int commit, int decided, uint32_t nE,
                                uint32_t count) {
  return ((uint64_t)gen << 40) | ((uint64_t)(algo & 0x3f) << 34) | ((uint64_t)(commit & 1) << 33) |
         ((uint64_t)(decided & 1) << 32) | ((uint64_t)(nE & 0xffff) << 16) | (count & 0xffff);
}

/* The rank an entry of rank_at names, or -1. */
static int entryRank(uint64_t v, uint32_t gen, int n) {
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

/* The board's words are this rank's to use (not a message board's). */
static int sharedBoard(const struct papComm* comm) {
  return comm->tops->boardAtomic != NULL && !comm->arrival->msg && comm->nranks <= 0xffff;
}

void papArrivalMismatchWarn(uint64_t cseq, int a, uint64_t sigA, int rootA, int b, uint64_t sigB,
                            int rootB) {
  char x[128], y[128];
  PAP_WARN(
      "collective #%llu mismatch: rank %d called %s but rank %d called %s (every rank must "
      "make the same calls in the same order)",
      (unsigned long long)cseq, a, papArrivalCallString(sigA, rootA, x, sizeof(x)), b,
      papArrivalCallString(sigB, rootB, y, sizeof(y)));
}

static void wakeAll(struct papComm* comm) {
  for (int p = 0; p < comm->nranks; p++)
    if (p != comm->rank) comm->tops->notify(comm->tstate, p);
}

/* Rank r's call in slot s: signature and root. */
static papcclResult_t callOf(struct papComm* comm, int s, int r, uint64_t* sig, int* root) {
  uint64_t v = 0;
  PAP_CHECK(bLoad(comm, IDX_SIG(comm->nranks, s, r), sig));
  PAP_CHECK(bLoad(comm, IDX_ROOT(comm->nranks, s, r), &v));
  *root = (int)(uint32_t)v;
  return papcclSuccess;
}

/* Rank r's call in slot s, for the marks' readers. */
static papcclResult_t putCall(struct papComm* comm, int s, int r, uint64_t sig, int root) {
  int n = comm->nranks;
  PAP_CHECK(bStore(comm, IDX_SIG(n, s, r), sig));
  return bStore(comm, IDX_ROOT(n, s, r), (uint32_t)root);
}

/* The first arriver's call, in its slot's line (a later arriver has just CASed that line's
 * word, so its read costs no further transfer of a line between cores). */
static papcclResult_t putFirstCall(struct papComm* comm, const struct papOpDesc* op, uint64_t sig) {
  int n = comm->nranks, s = op->arr.slot;
  PAP_CHECK(bStoreRelease(comm, IDX_CALL(n, s), sig)); /* published by the rank_at entry */
  return bStoreRelease(comm, IDX_CALL(n, s) + 1, (uint32_t)op->call.root);
}
static papcclResult_t firstCall(struct papComm* comm, int s, uint64_t* sig, int* root) {
  uint64_t v[2] = {0, 0};
  PAP_CHECK(bRead(comm, IDX_CALL(comm->nranks, s), 2, v));
  *sig = v[0];
  *root = (int)(uint32_t)v[1];
  return papcclSuccess;
}

/* A mark found for collective cseq: WARN as the rank that set it did, then fail. */
static papcclResult_t markFailure(struct papComm* comm, uint64_t cseq, uint64_t mark) {
  int n = comm->nranks, s = (int)(cseq % PAP_BOARD_SLOTS);
  int a = MARK_A(mark), b = MARK_B(mark);
  uint64_t sa = 0, sb = 0;
  int ra = 0, rb = 0;
  if (a >= n || b >= n || callOf(comm, s, a, &sa, &ra) != papcclSuccess ||
      callOf(comm, s, b, &sb, &rb) != papcclSuccess) {
    PAP_WARN("collective #%llu mismatch: ranks %d and %d made different calls",
             (unsigned long long)cseq, a, b);
  } else if (MARK_WHY(mark) == WHY_GROUPED) {
    char x[128];
    PAP_WARN(
        "collective #%llu mismatch: ranks %d and %d called %s, one of them inside a group "
        "and the other alone (group alike on every rank or set PAPCCL_PAP=0)",
        (unsigned long long)cseq, a, b, papArrivalCallString(sa, ra, x, sizeof(x)));
  } else {
    papArrivalMismatchWarn(cseq, a, sa, ra, b, sb, rb);
  }
  return papcclInvalidUsage;
}

/* Marks generation gen of slot s mismatched (the first mark of a generation stays). */
static papcclResult_t setMark(struct papComm* comm, int s, uint32_t gen, uint64_t mark) {
  size_t mi = IDX_MARK(comm->nranks, s);
  for (;;) {
    uint64_t m = 0;
    int ok = 0;
    PAP_CHECK(bLoad(comm, mi, &m));
    if (MARK_GEN(m) == gen) return papcclSuccess;
    PAP_CHECK(bCas(comm, mi, m, mark, &ok));
    if (ok) return papcclSuccess;
  }
}

static papcclResult_t rankAt(struct papComm* comm, const struct papArrival* a, int p, int* rOut,
                             struct papWait* w);

/* A rank that arrived after the first (or was refused as grouped differently, why =
 * WHY_GROUPED): compares its call with the first arriver's; a difference is marked for every
 * rank to see, logged, and fails the op (papcclInvalidUsage). *loggedOut: a WARN was made. */
static papcclResult_t checkArrival(struct papComm* comm, const struct papOpDesc* op, uint64_t sig,
                                   int why, int* loggedOut) {
  const struct papArrival* a = &op->arr;
  int n = comm->nranks, first = -1;
  uint64_t v = 0;
  *loggedOut = 0;
  PAP_CHECK(bLoad(comm, IDX_RANKAT(n, a->slot, 0), &v));
  first = entryRank(v, a->gen, n);
  if (first < 0) { /* the first arriver is between its CAS and its entry */
    struct papWait w;
    char what[160];
    arrivalWait(comm, op, "for the first arrival's entry", what, sizeof(what), &w);
    PAP_CHECK(rankAt(comm, a, 0, &first, &w));
  }
  uint64_t s0 = 0;
  int r0 = 0;
  PAP_CHECK(firstCall(comm, a->slot, &s0, &r0));
  int differ = s0 != sig || r0 != op->call.root;
  if (!differ && why == WHY_CALL) return papcclSuccess;
  if (differ) why = WHY_CALL;
  /* Both calls named in the mark go where its readers look, before the mark. */
  PAP_CHECK(putCall(comm, a->slot, first, s0, r0));
  PAP_CHECK(putCall(comm, a->slot, comm->rank, sig, op->call.root));
  PAP_CHECK(setMark(comm, a->slot, a->gen, makeMark(a->gen, why, first, comm->rank)));
  wakeAll(comm);
  if (why == WHY_CALL) {
    papArrivalMismatchWarn(op->call.cseq, first, s0, r0, comm->rank, sig, op->call.root);
    *loggedOut = 1;
  }
  return papcclInvalidUsage;
}

/* Whether every arrival of generation gen in slot s was checked: every rank_at entry holds
 * gen, or a newer generation took the slot over (every rank had released it). */
static papcclResult_t arrivalsChecked(struct papComm* comm, int s, uint32_t gen, int* doneOut) {
  int n = comm->nranks;
  uint64_t* buf = comm->arrival->slotBuf;
  *doneOut = 0;
  PAP_CHECK(bRead(comm, IDX_WORD(n, s), SLOT_HDR + (size_t)n, buf));
  if (PAP_W_GEN(buf[0]) != gen) {
    *doneOut = 1;
    return papcclSuccess;
  }
  if (PAP_W_COUNT(buf[0]) != (uint32_t)n) return papcclSuccess;
  for (int p = 0; p < n; p++)
    if (entryRank(buf[SLOT_HDR + p], gen, n) < 0) return papcclSuccess;
  *doneOut = 1;
  return papcclSuccess;
}

/* Completion of a board op (papArrivalComplete): the slot was read (readable) into slotBuf
 * and every entry was there (complete), or not. Fails the op when the board marks it
 * mismatched; when not every rank has arrived yet, its check is left pending. */
static papcclResult_t verifyArrivals(struct papComm* comm, const struct papOpDesc* op, int readable,
                                     int complete) {
  const struct papArrival* a = &op->arr;
  struct papArrivalState* ps = comm->arrival;
  if (!ps->checkMismatch || !sharedBoard(comm)) return papcclSuccess;
  int done = complete || (readable && PAP_W_GEN(ps->slotBuf[0]) != a->gen);
  if (!readable) PAP_CHECK(arrivalsChecked(comm, a->slot, a->gen, &done));
  uint64_t m = 0;
  PAP_CHECK(bLoad(comm, IDX_MARK(comm->nranks, a->slot), &m)); /* after the entries */
  if (MARK_GEN(m) == a->gen) return markFailure(comm, op->call.cseq, m);
  if (!done) { /* a peer has not arrived yet: check later */
    ps->pend[a->slot] = op->call.cseq + 1;
    ps->pendAny = 1;
  }
  return papcclSuccess;
}

void papArrivalFlightAdd(struct papComm* comm, const struct papOpDesc* op, int flat) {
  struct papArrivalState* ps = comm->arrival;
  uint64_t c = op->call.cseq;
  if (c + 1 > ps->madeHi) ps->madeHi = c + 1;
  if (ps->flightHi <= ps->flightLo) {
    ps->flightLo = c;
    ps->flightHi = c + 1;
  } else {
    if (c < ps->flightLo) ps->flightLo = c;
    if (c + 1 > ps->flightHi) ps->flightHi = c + 1;
  }
  ps->flightFlat = flat;
  if (flat) {
    ps->flightSig = papArrivalSignature(&op->call);
    ps->flightRoot = op->call.root;
  }
}

void papArrivalFlightEnd(struct papComm* comm) {
  struct papArrivalState* ps = comm->arrival;
  if (ps != NULL) ps->flightLo = ps->flightHi = 0;
}

/* Collective c ran on the board here: a mark for it, or a peer that ran it flat. */
static papcclResult_t boardOpCheck(struct papComm* comm, uint64_t c, int board) {
  int s = (int)(c % PAP_BOARD_SLOTS);
  uint64_t m = 0;
  if (board) {
    PAP_CHECK(bLoad(comm, IDX_MARK(comm->nranks, s), &m));
    if (MARK_GEN(m) == genOf(c)) return markFailure(comm, c, m);
  }
  int peer = -1;
  uint64_t psig = 0;
  if (!papFlatPeerAt(comm, c, &peer, &psig)) return papcclSuccess;
  papArrivalMismatchWarn(c, peer, psig, 0, comm->rank, comm->arrival->mySig[s],
                         comm->arrival->myRoot[s]);
  return papcclInvalidUsage;
}

/* How long papArrivalNoticeExplains waits for the home's answer: a round trip takes well
 * under a millisecond between live hosts; the bound only matters when the home stopped
 * serving. */
#define PAP_NOTICE_SYNC_NS 50000000ull
/* How long a rank that found the home dead drains what it sent before its end: the
 * failure of its endpoint may be seen on one connection while the notice still waits on
 * another (UCX over TCP). */
#define PAP_NOTICE_DRAIN_NS 20000000ull
/* How long the home, failing on its own notice, waits for the other ranks to acknowledge
 * it: a rank inside a call reads it within a wake-up; one outside any call reads it at its
 * next call, which may be later than this. */
#define PAP_NOTICE_ACK_NS 500000000ull

/* One turn of a bounded wait in the transport: progress, then sleep on the doorbell (at most
 * 1 ms). 0 when progress failed (the transport can deliver nothing more). */
static int pumpTransport(struct papComm* comm) {
  uint32_t tok = comm->tops->waitToken(comm->tstate);
  if (comm->tops->progress(comm->tstate) != papcclSuccess) return 0;
  comm->tops->wait(comm->tstate, tok, 1000000);
  return 1;
}

/* The home fails on its notice: once every live rank has read it (or the bound passed), so
 * that closing its endpoints next cannot overtake the notice on its way (seen over UCX/TCP:
 * a rank found the home unreachable and never received the notice, also after draining its
 * transport). */
static void homeAwaitAcks(struct papComm* comm) {
  struct papArrivalState* ps = comm->arrival;
  if (ps->acked == NULL) return;
  if (comm->tops->homeFlush) comm->tops->homeFlush(comm->tstate);
  uint64_t t0 = papNowNs();
  for (;;) {
    int missing = 0;
    for (int r = 1; r < comm->nranks && !missing; r++)
      missing = !atomic_load_explicit(&ps->acked[r], memory_order_acquire) &&
                comm->tops->peerAlive(comm->tstate, r);
    if (!missing || papNowNs() - t0 >= PAP_NOTICE_ACK_NS || !pumpTransport(comm)) return;
  }
}

/* A message board: the home's notice, when it names a collective this rank has made (in
 * flight or done; a later one fails when this rank makes it). WARN once. */
static papcclResult_t noticeRead(struct papComm* comm) {
  struct papArrivalState* ps = comm->arrival;
  if (!atomic_load_explicit(&ps->noticeAny, memory_order_acquire)) return papcclSuccess;
  pthread_mutex_lock(&ps->mailLock);
  uint64_t c = ps->notice.cseq, sa = ps->notice.sigA, sb = ps->notice.sigB;
  int a = ps->notice.a, b = ps->notice.b, ra = ps->notice.rootA, rb = ps->notice.rootB;
  pthread_mutex_unlock(&ps->mailLock);
  if (!ps->noticeAcked && comm->rank != 0) { /* the home may wait for it to leave */
    struct hmReq q = {HM_ACK, 0, 0, comm->rank, c, 0, 0, 0, 0};
    (void)comm->tops->homeSend(comm->tstate, &q, sizeof(q));
    ps->noticeAcked = 1;
  }
  if (c >= ps->madeHi) return papcclSuccess;
  if (!ps->noticeTold) {
    papArrivalMismatchWarn(c, a, sa, ra, b, sb, rb);
    /* The home: its notice must reach the others before this rank may be gone. */
    if (comm->rank == 0) homeAwaitAcks(comm);
  }
  ps->noticeTold = 1;
  return papcclInvalidUsage;
}

static papcclResult_t noticeCheck(struct papComm* comm) {
  /* A rank that waits tells the home its calls (a mismatched peer may wait for us). */
  PAP_CHECK(papArrivalFlushCalls(comm));
  return noticeRead(comm);
}

papcclResult_t papArrivalNoticeExplains(struct papComm* comm) {
  struct papArrivalState* ps = comm->arrival;
  if (ps == NULL || !ps->checkMismatch || !ps->msg) return papcclSuccess;
  /* A peer that failed on the notice may be gone before our copy of it came (the home pushes
   * to every rank; nothing orders its push to us before the peer's end). While the home
   * lives: our calls, then a round trip to it (HM_SYNC), whose answer comes behind every
   * push it sent us before (one endpoint, in order). Bounded: a home that no longer serves
   * (it failed too, and is tearing its comm down) must not delay the report. The home
   * itself files its notice at once. */
  if (!atomic_load_explicit(&ps->noticeAny, memory_order_acquire) && comm->rank != 0 &&
      comm->tops->peerAlive(comm->tstate, 0)) {
    (void)papArrivalFlushCalls(comm);
    uint64_t seq = ++ps->syncSent;
    struct hmReq q = {HM_SYNC, 0, 0, comm->rank, seq, 0, 0, 0, 0};
    uint64_t t0 = papNowNs();
    if (comm->tops->homeSend(comm->tstate, &q, sizeof(q)) == papcclSuccess) {
      while (atomic_load_explicit(&ps->syncSeen, memory_order_acquire) < seq &&
             !atomic_load_explicit(&ps->noticeAny, memory_order_acquire) &&
             comm->tops->peerAlive(comm->tstate, 0) && papNowNs() - t0 < PAP_NOTICE_SYNC_NS &&
             pumpTransport(comm)) {
      }
    }
  }
  if (comm->rank != 0 && !comm->tops->peerAlive(comm->tstate, 0)) {
    uint64_t t0 = papNowNs();
    while (!atomic_load_explicit(&ps->noticeAny, memory_order_acquire) &&
           papNowNs() - t0 < PAP_NOTICE_DRAIN_NS && pumpTransport(comm)) {
    }
  }
  return noticeRead(comm);
}

papcclResult_t papArrivalCheckMismatch(struct papComm* comm) {
  struct papArrivalState* ps = comm->arrival;
  if (ps == NULL || !ps->checkMismatch) return papcclSuccess;
  if (ps->msg) return noticeCheck(comm); /* no shared words, no flat lines */
  int n = comm->nranks, board = sharedBoard(comm);
  /* Collectives that completed here before every rank had arrived. */
  if (ps->pendAny) {
    int left = 0;
    for (int s = 0; s < PAP_BOARD_SLOTS; s++) {
      if (ps->pend[s] == 0) continue;
      uint64_t c = ps->pend[s] - 1;
      int done = 0;
      if (board) PAP_CHECK(arrivalsChecked(comm, s, genOf(c), &done));
      papcclResult_t res = boardOpCheck(comm, c, board);
      if (res != papcclSuccess || done)
        ps->pend[s] = 0;
      else
        left = 1;
      if (res != papcclSuccess) {
        for (int t = s + 1; t < PAP_BOARD_SLOTS; t++)
          left |= ps->pend[t] != 0;
        ps->pendAny = left;
        return res;
      }
    }
    ps->pendAny = left;
  }
  /* The batch in flight. */
  for (uint64_t c = ps->flightLo; c < ps->flightHi; c++) {
    if (!ps->flightFlat) {
      PAP_CHECK(boardOpCheck(comm, c, board));
      continue;
    }
    /* We run c flat: a rank that arrived on the board for it made another call. */
    if (!board) continue;
    int s = (int)(c % PAP_BOARD_SLOTS);
    uint32_t gen = genOf(c);
    uint64_t w = 0, v = 0;
    PAP_CHECK(bLoad(comm, IDX_WORD(n, s), &w));
    if (PAP_W_GEN(w) != gen || PAP_W_COUNT(w) == 0) continue;
    PAP_CHECK(bLoad(comm, IDX_RANKAT(n, s, 0), &v));
    int first = entryRank(v, gen, n);
    if (first < 0) continue; /* its entry comes next time */
    uint64_t sig = 0;
    int root = 0;
    PAP_CHECK(firstCall(comm, s, &sig, &root));
    PAP_CHECK(bLoad(comm, IDX_WORD(n, s), &w)); /* the call read is still gen's */
    if (PAP_W_GEN(w) != gen) continue;
    papArrivalMismatchWarn(c, first, sig, root, comm->rank, ps->flightSig, ps->flightRoot);
    return papcclInvalidUsage;
  }
  return papcclSuccess;
}

/* ---- The message board ---------------------------------------------------------------
 * The home rank (rank 0) keeps the board's words in its own memory and runs every request
 * on them in one piece (the transport serializes serve); the ranks that wait learn what they
 * wait for from the replies and from the home's pushes, never by polling a remote word. */

static void homePushTo(struct papComm* comm, int peer, uint32_t kind, int slot, uint32_t gen,
                       int pos, int rank, uint64_t word, const uint64_t* data, size_t words) {
  uint64_t buf[1024]; /* 8 KiB on the stack: every push but the statistics of large comms */
  struct hmPush* p = (struct hmPush*)buf;
  struct hmPush* big = NULL;
  size_t bytes = sizeof(*p) + words * sizeof(uint64_t);
  if (bytes > sizeof(buf)) {
    big = (struct hmPush*)malloc(bytes);
    if (big == NULL) {
      PAP_WARN("arrival board: out of memory for a message to rank %d", peer);
      return;
    }
    p = big;
  }
  p->kind = kind;
  p->slot = (uint32_t)slot;
  p->gen = gen;
  p->pos = pos;
  p->rank = rank;
  p->word = word;
  if (words) memcpy(p->data, data, words * sizeof(uint64_t));
  comm->tops->homePush(comm->tstate, peer, p, bytes);
  free(big);
}

/* A commit just made at the home (word, early ranks ranks[0..nE)) by rank `by`: the ranks
 * that arrived before it wait for it, and the ranks that have not arrived yet find it in
 * their mail when they come and need no round trip to the home (but a chain, whose ranks
 * need their arrival position). */
static void homeCommitPush(struct papComm* comm, int slot, uint32_t gen, uint64_t word,
                           const uint64_t* ranks, uint32_t nE, int by) {
  int n = comm->nranks;
  if (PAP_W_ALGO(word) == PAP_ALGO_CHAIN) {
    for (uint32_t p = 1; p < nE; p++) {
      int rk = entryRank(ranks[p], gen, n);
      if (rk >= 0) homePushTo(comm, rk, HP_COMMIT, slot, gen, 0, 0, word, ranks, nE);
    }
    return;
  }
  for (int rk = 0; rk < n; rk++)
    if (rk != by) homePushTo(comm, rk, HP_COMMIT, slot, gen, 0, 0, word, ranks, nE);
}

/* The mismatch check at the home (section 11): rank `from` made call q of collective q->c - 1.
 * The first call of a collective is kept; a later one that differs is pushed to every rank
 * (rank 0 included) with the first, once per collective. A call of a collective older than
 * the one its record holds now (a rank PAP_CALL_RING collectives behind another) is not
 * compared. */
static void homeCheckCall(struct papComm* comm, int from, uint64_t c, uint64_t sig, int32_t root) {
  struct papArrivalState* ps = comm->arrival;
  if (c == 0 || ps->calls == NULL) return;
  struct papCallRec* e = &ps->calls[(c - 1) % PAP_CALL_RING];
  if (e->c < c) {
    *e = (struct papCallRec){c, sig, root, from, 0};
    return;
  }
  if (e->c != c || e->marked || (e->sig == sig && e->root == root)) return;
  e->marked = 1;
  uint64_t data[4] = {e->sig, (uint64_t)(uint32_t)e->root, sig, (uint64_t)(uint32_t)root};
  for (int p = 0; p < comm->nranks; p++)
    homePushTo(comm, p, HP_MISMATCH, 0, 0, e->rank, from, c - 1, data, 4);
}

static size_t homeArrive(struct papComm* comm, int from, const struct hmReq* q, struct hmReply* r) {
  int n = comm->nranks, slot = (int)q->slot;
  uint64_t* B = comm->arrival->home;
  uint64_t w = B[IDX_WORD(n, slot)], nw = 0;
  int decided = (q->b & HM_DECIDED) != 0;
  enum arrStep e = arrivalStep(w, q->gen, decided, n);
  if (e == ARR_TAKE) {
    uint64_t* rel = &B[IDX_REL(n, slot)];
    int t = takeOverStep(*rel, PAP_W_GEN(w), q->gen, n);
    if (t == 0) e = ARR_WAIT;
    if (t == 1) *rel = (uint64_t)q->gen << 32;
    nw = makeWord(q->gen, 0, 0, decided, 0, 1);
    if (decided && (q->b & HM_PROPOSE)) nw = makeWord(q->gen, HM_ALGO(q->b), 1, 1, 1, 1);
  } else if (e == ARR_JOIN) {
    nw = w + 1;
  }
  r->status = (int32_t)e;
  r->word = w;
  r->pos = 0;
  if (e != ARR_JOIN && e != ARR_TAKE) return sizeof(*r);
  int pos = e == ARR_JOIN ? (int)PAP_W_COUNT(w) : 0;
  B[IDX_WORD(n, slot)] = nw;
  B[IDX_TARR(n, slot, from)] = q->a;
  B[IDX_RANKAT(n, slot, pos)] = ((uint64_t)q->gen << 32) | (uint32_t)(from + 1);
  r->pos = pos;
  if (e == ARR_TAKE) r->word = PAP_W_COMMIT(nw) ? nw : 0; /* first: committed at once? */
  for (int p = 0; p < pos; p++)
    r->ranks[p] = B[IDX_RANKAT(n, slot, p)];
  if (decided && pos > 0) {
    /* The arrival before ours learns its successor (a chain extends to it); the decider,
     * while it has not committed, the new count. */
    int pred = entryRank(B[IDX_RANKAT(n, slot, pos - 1)], q->gen, n);
    int dec = entryRank(B[IDX_RANKAT(n, slot, 0)], q->gen, n);
    if (pred >= 0 && (!PAP_W_COMMIT(w) || PAP_W_ALGO(w) == PAP_ALGO_CHAIN))
      homePushTo(comm, pred, HP_NEXT, slot, q->gen, pos, from, nw, NULL, 0);
    if (!PAP_W_COMMIT(w) && dec >= 0 && dec != pred)
      homePushTo(comm, dec, HP_WORD, slot, q->gen, 0, 0, nw, NULL, 0);
  }
  if (e == ARR_TAKE && PAP_W_COMMIT(nw)) /* the first arrival committed its proposal */
    homeCommitPush(comm, slot, q->gen, nw, &B[IDX_RANKAT(n, slot, 0)], 1, from);
  if (decided && PAP_W_COUNT(nw) == (uint32_t)n) /* every stamp is in: the statistics */
    for (int p = 0; p < n; p++)
      homePushTo(comm, p, HP_FULL, slot, q->gen, 0, 0, nw, &B[slotBase(n, slot)], SLOT_WORDS(n));
  return sizeof(*r) + (size_t)pos * sizeof(uint64_t);
}

static size_t homeServe(void* arg, int from, const void* req, size_t len, void* reply, size_t cap) {
  struct papComm* comm = (struct papComm*)arg;
  int n = comm->nranks;
  struct hmReq q;
  if (len < sizeof(q) || cap < sizeof(struct hmReply) + SLOT_WORDS(n) * sizeof(uint64_t)) return 0;
  memcpy(&q, req, sizeof(q));
  if (q.slot >= PAP_BOARD_SLOTS || q.rank != from) return 0;
  uint64_t* B = comm->arrival->home;
  int slot = (int)q.slot;
  struct hmReply* r = (struct hmReply*)reply;
  switch (q.kind) {
  case HM_ARRIVE:
    homeCheckCall(comm, from, q.c, q.sig, (int32_t)q.root);
    return homeArrive(comm, from, &q, r);
  case HM_CALL: { /* q.a calls of (c, sig, root) after the header */
    const uint64_t* v = (const uint64_t*)((const char*)req + sizeof(q));
    if (q.a > (len - sizeof(q)) / (3 * sizeof(uint64_t))) return 0;
    for (uint64_t i = 0; i < q.a; i++)
      homeCheckCall(comm, from, v[3 * i], v[3 * i + 1], (int32_t)v[3 * i + 2]);
    return 0;
  }
  case HM_COMMIT: {
    uint64_t* wp = &B[IDX_WORD(n, slot)];
    r->status = *wp == q.a;
    if (r->status) *wp = q.b;
    r->word = *wp;
    r->pos = 0;
    uint32_t nE = PAP_W_COMMIT(*wp) && PAP_W_GEN(*wp) == q.gen ? PAP_W_NE(*wp) : 0;
    if (nE > (uint32_t)n) nE = 0;
    for (uint32_t p = 0; p < nE; p++)
      r->ranks[p] = B[IDX_RANKAT(n, slot, p)];
    if (r->status) homeCommitPush(comm, slot, q.gen, *wp, r->ranks, nE, from);
    return sizeof(*r) + nE * sizeof(uint64_t);
  }
  case HM_READ:
    memcpy(reply, &B[slotBase(n, slot)], SLOT_WORDS(n) * sizeof(uint64_t));
    return SLOT_WORDS(n) * sizeof(uint64_t);
  case HM_RELEASE:
    B[IDX_REL(n, slot)] += 1;
    return 0;
  case HM_SYNC:
    homePushTo(comm, from, HP_SYNC, 0, 0, 0, 0, q.a, NULL, 0);
    return 0;
  case HM_ACK:
    if (comm->arrival->acked != NULL)
      atomic_store_explicit(&comm->arrival->acked[from], 1, memory_order_release);
    return 0;
  default:
    return 0;
  }
}

/* The mail of slot for generation gen, reset when gen is newer; NULL when gen is older than
 * what the mail holds (a late push). mailLock held. */
static struct papMail* mailFor(struct papArrivalState* ps, int slot, uint32_t gen) {
  struct papMail* m = &ps->mail[slot];
  if (m->gen == gen) return m;
  if (m->gen != 0 && !genOlder(m->gen, gen)) return NULL;
  m->gen = gen;
  m->word = 0;
  m->committed = m->hasFull = 0;
  m->succPos = m->succRank = -1;
  return m;
}

static void setOwners(struct papMail* m, const uint64_t* ranks, uint32_t nE, int n) {
  for (uint32_t p = 0; p < nE && p < (uint32_t)n; p++)
    m->owners[p] = entryRank(ranks[p], m->gen, n);
}

static void homePushed(void* arg, const void* msg, size_t len) {
  struct papComm* comm = (struct papComm*)arg;
  struct papArrivalState* ps = comm->arrival;
  int n = comm->nranks;
  const struct hmPush* p = (const struct hmPush*)msg;
  if (ps == NULL || len < sizeof(*p) || p->slot >= PAP_BOARD_SLOTS) return;
  size_t words = (len - sizeof(*p)) / sizeof(uint64_t);
  if (p->kind == HP_SYNC) {
    uint64_t seen = atomic_load_explicit(&ps->syncSeen, memory_order_relaxed);
    if (p->word > seen) atomic_store_explicit(&ps->syncSeen, p->word, memory_order_release);
    return;
  }
  if (p->kind == HP_MISMATCH) { /* kept for the calling thread's checks: the first one */
    if (words < 4) return;
    pthread_mutex_lock(&ps->mailLock);
    if (!atomic_load_explicit(&ps->noticeAny, memory_order_relaxed) || p->word < ps->notice.cseq) {
      ps->notice.cseq = p->word;
      ps->notice.a = p->pos;
      ps->notice.b = p->rank;
      ps->notice.sigA = p->data[0];
      ps->notice.rootA = (int)(uint32_t)p->data[1];
      ps->notice.sigB = p->data[2];
      ps->notice.rootB = (int)(uint32_t)p->data[3];
      atomic_store_explicit(&ps->noticeAny, 1, memory_order_release);
    }
    pthread_mutex_unlock(&ps->mailLock);
    return;
  }
  pthread_mutex_lock(&ps->mailLock);
  struct papMail* m = mailFor(ps, (int)p->slot, p->gen);
  if (m != NULL) {
    if ((p->kind == HP_WORD || p->kind == HP_NEXT) && !m->committed &&
        PAP_W_GEN(p->word) == p->gen && PAP_W_COUNT(p->word) > PAP_W_COUNT(m->word))
      m->word = p->word;
    if (p->kind == HP_NEXT) {
      m->succPos = p->pos;
      m->succRank = p->rank;
    } else if (p->kind == HP_COMMIT && words >= PAP_W_NE(p->word)) {
      m->word = p->word;
      m->committed = 1;
      setOwners(m, p->data, PAP_W_NE(p->word), n);
    } else if (p->kind == HP_FULL && words == SLOT_WORDS(n)) {
      memcpy(m->full, p->data, words * sizeof(uint64_t));
      m->hasFull = 1;
    }
  }
  pthread_mutex_unlock(&ps->mailLock);
}

papcclResult_t papArrivalInit(struct papComm* comm) {
  struct papArrivalState* ps = NULL;
  int n = comm->nranks;
  PAP_CHECK(papCalloc(&ps, 1));
  ps->nranks = n;
  if (papCalloc(&ps->owners, (size_t)n) != papcclSuccess ||
      papCalloc(&ps->ident, (size_t)n) != papcclSuccess ||
      papCalloc(&ps->order, (size_t)n) != papcclSuccess ||
      papCalloc(&ps->stamps, (size_t)n) != papcclSuccess ||
      papCalloc(&ps->slotBuf, SLOT_WORDS(n)) != papcclSuccess ||
      papCalloc(&ps->sorted, (size_t)n) != papcclSuccess ||
      papCalloc(&ps->flatArea, (size_t)n) != papcclSuccess ||
      papCalloc(&ps->flatSeen, (size_t)n) != papcclSuccess ||
      papCalloc(&ps->sumLate, (size_t)n) != papcclSuccess ||
      papCalloc(&ps->late, (size_t)n) != papcclSuccess) {
    comm->arrival = ps;
    papArrivalFree(comm);
    return papcclSystemError;
  }
  for (int r = 0; r < n; r++)
    ps->ident[r] = r;
  pthread_mutex_init(&ps->mailLock, NULL);
  ps->checkMismatch = papParamCheckMismatch() != 0;
  ps->msg = comm->tops->homeCall != NULL && n <= 0xffff &&
            sizeof(struct hmReply) + SLOT_WORDS(n) * sizeof(uint64_t) <= PAP_HOME_MAX_BYTES;
  if (ps->msg) {
    int bad = papCalloc(&ps->reply, PAP_HOME_MAX_BYTES / sizeof(uint64_t)) != papcclSuccess;
    if (comm->rank == 0 && !bad) bad = papCalloc(&ps->home, papBoardWords(n)) != papcclSuccess;
    if (comm->rank == 0 && ps->checkMismatch && !bad)
      bad = papCalloc(&ps->calls, PAP_CALL_RING) != papcclSuccess ||
            papCalloc(&ps->acked, (size_t)n) != papcclSuccess;
    if (ps->checkMismatch && !bad)
      bad = papCalloc(&ps->callBuf, 3 * PAP_CALL_BATCH) != papcclSuccess;
    for (int s = 0; s < PAP_BOARD_SLOTS && !bad; s++)
      bad = papCalloc(&ps->mail[s].owners, (size_t)n) != papcclSuccess ||
            papCalloc(&ps->mail[s].before, (size_t)n) != papcclSuccess ||
            papCalloc(&ps->mail[s].full, SLOT_WORDS(n)) != papcclSuccess;
    if (bad) {
      comm->arrival = ps;
      papArrivalFree(comm);
      return papcclSystemError;
    }
  }
  ps->st.nranks = n;
  ps->st.lastLateRank = -1;
  ps->st.habitualLateRank = -1;
  for (int i = 0; i < PAPCCL_PAP_STATS_MAX_RANKS; i++)
    ps->st.lastOrder[i] = -1;
  snprintf(ps->st.lastAlgoName, sizeof(ps->st.lastAlgoName), "none");
  comm->arrival = ps;
  if (ps->msg) PAP_CHECK(comm->tops->homeAttach(comm->tstate, homeServe, homePushed, comm));
  return papFlatAttach(comm);
}

void papArrivalFree(struct papComm* comm) {
  struct papArrivalState* ps = comm->arrival;
  if (ps == NULL) return;
  if (ps->msg && comm->tstate) comm->tops->homeAttach(comm->tstate, NULL, NULL, NULL);
  for (int s = 0; s < PAP_BOARD_SLOTS; s++) {
    free(ps->mail[s].owners);
    free(ps->mail[s].before);
    free(ps->mail[s].full);
  }
  free(ps->home);
  free(ps->calls);
  free((void*)ps->acked);
  free(ps->callBuf);
  free(ps->reply);
  pthread_mutex_destroy(&ps->mailLock);
  free(ps->owners);
  free(ps->ident);
  free(ps->order);
  free(ps->stamps);
  free(ps->slotBuf);
  free(ps->sorted);
  free(ps->flatArea);
  free(ps->flatSeen);
  free(ps->sumLate);
  free(ps->late);
  free(ps);
  comm->arrival = NULL;
}

uint32_t papArrivalCallTag(struct papComm* comm, const struct papCall* call) {
  uint64_t h = comm->arrival->callHash;
  h ^= papArrivalSignature(call) + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
  h = (h ^ (uint64_t)(uint32_t)call->root) * 0xbf58476d1ce4e5b9ull;
  h ^= h >> 31;
  comm->arrival->callHash = h;
  return (uint32_t)(h >> 48) << 16;
}

papcclResult_t papArrivalFlushCalls(struct papComm* comm) {
  struct papArrivalState* ps = comm->arrival;
  if (ps == NULL || !ps->msg || ps->callN == 0) return papcclSuccess;
  uint64_t buf[sizeof(struct hmReq) / sizeof(uint64_t) + 3 * PAP_CALL_BATCH];
  struct hmReq q = {HM_CALL, 0, 0, comm->rank, (uint64_t)ps->callN, 0, 0, 0, 0};
  memcpy(buf, &q, sizeof(q));
  memcpy((char*)buf + sizeof(q), ps->callBuf, 3 * sizeof(uint64_t) * (size_t)ps->callN);
  size_t len = sizeof(q) + 3 * sizeof(uint64_t) * (size_t)ps->callN;
  ps->callN = 0;
  return comm->tops->homeSend(comm->tstate, buf, len);
}

/* A request to the home and its reply. An unreachable home is logged here, unless a mismatch
 * the home found explains it (a peer that failed on it and left, rank 0 itself). */
static papcclResult_t homeCall(struct papComm* comm, const struct hmReq* q, size_t* len) {
  papcclResult_t res = comm->tops->homeCall(comm->tstate, q, sizeof(*q), comm->arrival->reply,
                                            PAP_HOME_MAX_BYTES, len);
  if (res != papcclRemoteError) return res;
  if (papArrivalNoticeExplains(comm) == papcclInvalidUsage) return papcclInvalidUsage;
  PAP_WARN("rank 0, which holds the arrival board, is unreachable from rank %d", comm->rank);
  return res;
}

/* papArrive on a message board: one request; the home does what papArrive's loop does on a
 * shared board and answers with our position and the ranks before us. */
static papcclResult_t arriveByMessage(struct papComm* comm, struct papOpDesc* op, int decided) {
  struct papArrival* a = &op->arr;
  struct papArrivalState* ps = comm->arrival;
  int n = comm->nranks;
  struct hmReq q = {HM_ARRIVE,  (uint32_t)a->slot, a->gen,
                    comm->rank, a->tArr,           decided ? HM_DECIDED : 0};
  if (ps->checkMismatch) { /* the call rides with the arrival (section 11) */
    q.c = op->call.cseq + 1;
    q.sig = papArrivalSignature(&op->call);
    q.root = op->call.root;
  }
  if (decided && papSelectForcedAlgo(op) != PAP_ALGO_CHAIN) {
    struct papSelChoice ch = papSelect(comm, op);
    if (!ch.wait && ch.algo > PAP_ALGO_AUTO && ch.algo < PAP_ALGO_COUNT)
      q.b |= HM_PROPOSE | ((uint64_t)(ch.algo | (ch.watch ? PAP_W_WATCH_BIT : 0)) << 8);
  }
  struct hmReply* r = (struct hmReply*)ps->reply;
  /* Committed before we came, and the home told us already: our arrival goes one way (for
   * the statistics), and the plan starts now. A late rank's whole wait is gone this way. */
  if (decided) {
    pthread_mutex_lock(&ps->mailLock);
    struct papMail* m = mailFor(ps, a->slot, a->gen);
    int ahead = m != NULL && m->committed && PAP_W_ALGO(m->word) != PAP_ALGO_CHAIN;
    uint64_t w = ahead ? m->word : 0;
    pthread_mutex_unlock(&ps->mailLock);
    if (ahead) {
      PAP_CHECK(comm->tops->homeSend(comm->tstate, &q, sizeof(q)));
      a->used = 1;
      ps->slotCseq[a->slot] = op->call.cseq + 1;
      a->pos = (int)PAP_W_NE(w); /* at least; only a chain needs it exactly */
      a->oldWord = w;
      return papcclSuccess;
    }
  }
  struct papWait slotWait;
  char slotWhat[160];
  int slotWaiting = 0;
  for (;;) {
    size_t len = 0;
    PAP_CHECK(homeCall(comm, &q, &len));
    if (len < sizeof(*r) || r->pos < 0 || r->pos >= n ||
        len < sizeof(*r) + (size_t)r->pos * sizeof(uint64_t)) {
      PAP_WARN("collective #%llu: rank 0 refused the arrival of rank %d (see its log)",
               (unsigned long long)op->call.seq, comm->rank);
      return papcclInternalError;
    }
    if (r->status == ARR_JOIN || r->status == ARR_TAKE) break;
    if (r->status != ARR_WAIT)
      return arrivalError(comm, op, (enum arrStep)r->status, PAP_W_GEN(r->word));
    /* As papArrive: a peer has not finished reading the slot's previous collective. Its
     * release is a message to rank 0: wait in the transport, which serves it there (a plain
     * sleep on rank 0 would leave it unread, and the slot taken for good). */
    if (!slotWaiting) {
      arrivalWait(comm, op, "for a peer to finish the collective before in its board slot",
                  slotWhat, sizeof(slotWhat), &slotWait);
      slotWait.spinNs = 0;
      slotWaiting = 1;
    }
    uint32_t tok = comm->tops->waitToken(comm->tstate);
    uint64_t now = papNowNs();
    PAP_CHECK(papWaitCheck(&slotWait, now));
    /* The peer may be stuck in a mismatched collective, or have failed it. */
    if (papWaitHealthDue(&slotWait, now)) PAP_CHECK(papArrivalCheckMismatch(comm));
    comm->tops->wait(comm->tstate, tok, papWaitSlice(&slotWait, now, 1000000));
  }
  a->used = 1;
  ps->slotCseq[a->slot] = op->call.cseq + 1;
  a->pos = r->pos;
  a->oldWord = r->word;
  uint64_t mine = r->status == ARR_TAKE
                      ? (r->word ? r->word : makeWord(a->gen, 0, 0, decided, 0, 1))
                      : r->word + 1;
  pthread_mutex_lock(&ps->mailLock);
  struct papMail* m = mailFor(ps, a->slot, a->gen);
  if (m != NULL) {
    for (int p = 0; p < a->pos; p++)
      m->before[p] = entryRank(r->ranks[p], a->gen, n);
    if (PAP_W_COMMIT(r->word)) { /* committed before we came: the early ranks are before us */
      m->word = r->word;
      m->committed = 1;
      if (a->pos == 0)
        m->owners[0] = comm->rank; /* our proposal, committed with our arrival */
      else
        setOwners(m, r->ranks, PAP_W_NE(r->word), n);
    } else if (!m->committed && PAP_W_COUNT(mine) > PAP_W_COUNT(m->word)) {
      m->word = mine;
    }
  }
  pthread_mutex_unlock(&ps->mailLock);
  if (!decided) PAP_CHECK(releaseSlot(comm, a));
  return papcclSuccess;
}

papcclResult_t papArrive(struct papComm* comm, struct papOpDesc* op, int decided) {
  struct papArrival* a = &op->arr;
  int n = comm->nranks;
  a->used = 0;
  a->decided = decided;
  if (a->tArr == 0) a->tArr = papNowNs();
  papArrivalPredict(comm, op, papArrivalSignature(&op->call));
  papSelectLocal(comm, op);
  struct papArrivalState* ps = comm->arrival;
  if ((comm->tops->boardAtomic == NULL && !ps->msg) || n > 0xffff) return papcclSuccess;
  a->slot = (int)(op->call.cseq % PAP_BOARD_SLOTS);
  a->gen = genOf(op->call.cseq);
  a->released = 0;
  a->tPlan = 0;
  if (ps->msg) {
    /* A mismatch the home found already, in this collective or one before. */
    PAP_CHECK(papArrivalNoticeCheck(comm));
    if (decided) return arriveByMessage(comm, op, decided);
    /* A plan every rank chooses alone needs nothing from the board: over a network its
     * statistics are not read back either (papArrivalComplete). Only the call goes to the
     * home, one way, for the mismatch check (section 11); rank 0 compares its own in place. */
    if (!ps->checkMismatch) return papcclSuccess;
    uint64_t* v = &ps->callBuf[3 * ps->callN++];
    v[0] = op->call.cseq + 1;
    v[1] = papArrivalSignature(&op->call);
    v[2] = (uint64_t)(uint32_t)op->call.root;
    if (comm->rank == 0 || ps->callN == PAP_CALL_BATCH) return papArrivalFlushCalls(comm);
    return papcclSuccess;
  }
  size_t wi = IDX_WORD(n, a->slot);
  uint64_t w = 0, nw = 0;
  struct papWait slotWait;
  char slotWhat[160];
  int slotWaiting = 0;
  int check = ps->checkMismatch;
  uint64_t sig = check ? papArrivalSignature(&op->call) : 0;
  for (;;) {
    PAP_CHECK(bLoad(comm, wi, &w));
    uint32_t g = PAP_W_GEN(w);
    enum arrStep e = arrivalStep(w, a->gen, decided, n);
    if (e == ARR_JOIN) {
      nw = w + 1;
    } else if (e == ARR_TAKE) {
      int ok = 0;
      PAP_CHECK(mayTakeOver(comm, a, g, &ok));
      if (!ok) {
        /* This rank is PAP_BOARD_SLOTS collectives ahead of a peer that has not finished
         * reading the slot (possible after collectives a rank completes without every
         * peer, such as broadcast). Rare: back off with sleeps, bounded by the timeout. */
        if (!slotWaiting) {
          arrivalWait(comm, op, "for a peer to finish the collective before in its board slot",
                      slotWhat, sizeof(slotWhat), &slotWait);
          slotWait.spinNs = 0; /* sleeps only */
          slotWaiting = 1;
        }
        uint64_t now = papNowNs();
        PAP_CHECK(papWaitCheck(&slotWait, now));
        /* The peer may be stuck in a mismatched collective of this batch, or have failed it
         * (and never release the slot). */
        if (papWaitHealthDue(&slotWait, now)) PAP_CHECK(papArrivalCheckMismatch(comm));
        papWaitSleep(&slotWait);
        continue;
      }
      nw = makeWord(a->gen, 0, 0, decided, 0, 1);
    } else {
      if (check && e == ARR_ERR_DECIDED) { /* the first arrival may have made another call */
        int logged = 0;
        papcclResult_t res = checkArrival(comm, op, sig, WHY_GROUPED, &logged);
        if (res != papcclInvalidUsage) return res;
        if (logged) return res;
      }
      return arrivalError(comm, op, e, g);
    }
    int ok = 0;
    PAP_CHECK(bCas(comm, wi, w, nw, &ok));
    if (ok) break;
  }
  a->used = 1;
  comm->arrival->slotCseq[a->slot] = op->call.cseq + 1;
  a->pos = PAP_W_GEN(w) == a->gen ? (int)PAP_W_COUNT(w) : 0;
  a->oldWord = PAP_W_GEN(w) == a->gen ? w : 0;
  /* Stamp before the position entry: a reader that sees the entry sees the stamp. */
  PAP_CHECK(bStoreRelease(comm, IDX_TARR(n, a->slot, comm->rank), a->tArr));
  /* A later arrival checks its call against the first one's before its entry: a reader that
   * sees every entry sees any mark (papArrivalVerify). The entry is written either way, as
   * waiters for it (rankAt) have no other way out. */
  papcclResult_t mism = papcclSuccess;
  if (check) {
    ps->mySig[a->slot] = sig;
    ps->myRoot[a->slot] = op->call.root;
    if (a->pos == 0) { /* the first arrival's call, for the others to compare with */
      mism = putFirstCall(comm, op, sig);
    } else {
      int logged = 0;
      mism = checkArrival(comm, op, sig, WHY_CALL, &logged);
    }
  }
  PAP_CHECK(bStore(comm, IDX_RANKAT(n, a->slot, a->pos),
                   ((uint64_t)a->gen << 32) | (uint32_t)(comm->rank + 1)));
  if (mism != papcclSuccess) return mism;
  if (decided && a->pos > 0) {
    /* Wake the decider (before the commit) and my predecessor (a chain waits for its
     * successor). If an entry is not written yet, its owner reads the board after writing
     * it (seq_cst on both sides), so it sees this arrival anyway. */
    uint64_t v = 0;
    if (!PAP_W_COMMIT(w)) {
      PAP_CHECK(bLoad(comm, IDX_RANKAT(n, a->slot, 0), &v));
      if ((uint32_t)(v >> 32) == a->gen) comm->tops->notify(comm->tstate, (int)(uint32_t)v - 1);
    }
    if (a->pos > 1 || PAP_W_COMMIT(w)) {
      PAP_CHECK(bLoad(comm, IDX_RANKAT(n, a->slot, a->pos - 1), &v));
      if ((uint32_t)(v >> 32) == a->gen) comm->tops->notify(comm->tstate, (int)(uint32_t)v - 1);
    }
  }
  /* A plan every rank chooses alone reads nothing more from the slot (the statistics of
   * papArrivalComplete read it only while its generation is still there). */
  if (!decided) PAP_CHECK(releaseSlot(comm, a));
  return papcclSuccess;
}

/* Rank at arrival position p (waits for the entry: it is written right after the CAS). */
static papcclResult_t rankAt(struct papComm* comm, const struct papArrival* a, int p, int* rOut,
                             struct papWait* w) {
  int n = comm->nranks;
  for (unsigned i = 0;; i++) {
    uint64_t v = 0;
    PAP_CHECK(bLoad(comm, IDX_RANKAT(n, a->slot, p), &v));
    if ((uint32_t)(v >> 32) == a->gen) {
      int r = (int)(uint32_t)v - 1;
      if (r < 0 || r >= n) {
        PAP_WARN("arrival board: position %d holds rank %d of %d", p, r, n);
        return papcclInternalError;
      }
      *rOut = r;
      return papcclSuccess;
    }
    /* The entry's writer is between its CAS and its store: yield, whatever the budget. */
    if ((i & 255) == 255) PAP_CHECK(papWaitCheck(w, papNowNs()));
    sched_yield();
  }
}

/* The wait's checks, and the peers' health every 100 ms. */
static papcclResult_t waitChecks(struct papComm* comm, struct papWait* w, uint64_t now) {
  PAP_CHECK(papWaitCheck(w, now));
  /* A message board's mismatch notice (its push rang the doorbell): at once. */
  PAP_CHECK(papArrivalNoticeCheck(comm));
  if (!papWaitHealthDue(w, now)) return papcclSuccess;
  papDiagUpdate(comm, w, NULL);
  /* A mismatch first: a peer that failed on it may be gone by now (as checkPeers). */
  PAP_CHECK(papArrivalCheckMismatch(comm));
  /* A dead peer: the notice, read after its death was (the transport delivers what the peer
   * sent before its end first), may still explain it. */
  if (papCommDeadPeer(comm) >= 0) {
    PAP_CHECK(papArrivalNoticeExplains(comm));
    PAP_CHECK(papCommCheckDeadPeer(comm));
  }
  for (int r = 0; r < comm->nranks; r++) {
    if (r == comm->rank || comm->tops->peerAlive(comm->tstate, r)) continue;
    PAP_CHECK(papArrivalNoticeExplains(comm));
    PAP_WARN("rank %d (%s) exited while %s", r, papCommPidText(comm, r).s, papWaitWhat(w));
    return papcclRemoteError;
  }
  return papcclSuccess;
}

/* The slot's word: loaded from a shared board, or what the mail of a message board holds. */
static papcclResult_t slotWord(struct papComm* comm, const struct papArrival* a, size_t wi,
                               uint64_t* w) {
  struct papArrivalState* ps = comm->arrival;
  if (!ps->msg) return bLoad(comm, wi, w);
  pthread_mutex_lock(&ps->mailLock);
  struct papMail* m = mailFor(ps, a->slot, a->gen);
  *w = m ? m->word : 0;
  pthread_mutex_unlock(&ps->mailLock);
  return papcclSuccess;
}

/* The decider's commit: a CAS on the word; on a message board the home does it, sends the
 * commit to the early ranks and answers with them (into the mail). */
static papcclResult_t commitCas(struct papComm* comm, const struct papArrival* a, size_t wi,
                                uint64_t expect, uint64_t desired, int* okOut) {
  struct papArrivalState* ps = comm->arrival;
  if (!ps->msg) return bCas(comm, wi, expect, desired, okOut);
  int n = comm->nranks;
  struct hmReq q = {HM_COMMIT, (uint32_t)a->slot, a->gen, comm->rank, expect, desired};
  struct hmReply* r = (struct hmReply*)ps->reply;
  size_t len = 0;
  PAP_CHECK(homeCall(comm, &q, &len));
  uint32_t nE = PAP_W_COMMIT(r->word) ? PAP_W_NE(r->word) : 0;
  if (len < sizeof(*r) || len < sizeof(*r) + nE * sizeof(uint64_t) || nE > (uint32_t)n) {
    PAP_WARN("collective #%llu: rank 0 refused the commit (see its log)",
             (unsigned long long)a->gen);
    return papcclInternalError;
  }
  *okOut = r->status == 1;
  pthread_mutex_lock(&ps->mailLock);
  struct papMail* m = mailFor(ps, a->slot, a->gen);
  if (m != NULL && PAP_W_GEN(r->word) == a->gen) {
    m->word = r->word;
    if (nE) {
      m->committed = 1;
      setOwners(m, r->ranks, nE, n);
    }
  }
  pthread_mutex_unlock(&ps->mailLock);
  return papcclSuccess;
}

/* The decider: choose, wait for arrivals if PAP-aware, commit with one CAS. */
static papcclResult_t decide(struct papComm* comm, struct papOpDesc* op, struct papWait* wt,
                             uint64_t* wordOut) {
  struct papArrival* a = &op->arr;
  int n = comm->nranks;
  size_t wi = IDX_WORD(n, a->slot);
  struct papSelChoice ch = papSelect(comm, op);
  int nMin = n;
  if (ch.wait && papParamPap()) {
    nMin = (n + 1) / 2; /* rho = 0.5 */
    if (nMin < 2) nMin = 2;
  }
  uint64_t tau = papSelectGapNs(comm, op);
  uint32_t lastCnt = 0;
  uint64_t lastChange = papNowNs();
  for (;;) {
    uint32_t tok = comm->tops->waitToken(comm->tstate);
    uint64_t w = 0;
    papcclResult_t res = slotWord(comm, a, wi, &w);
    if (res != papcclSuccess) {
      comm->tops->wait(comm->tstate, tok, 0);
      return res;
    }
    uint32_t cnt = PAP_W_COUNT(w);
    uint64_t now = papNowNs();
    if (cnt != lastCnt) {
      lastCnt = cnt;
      lastChange = now;
    }
    int commit =
        !ch.wait || cnt == (uint32_t)n || (cnt >= (uint32_t)nMin && now - lastChange >= tau);
    if (commit) {
      comm->tops->wait(comm->tstate, tok, 0);
      PAP_FAULT(PAP_FAULT_COMMIT, comm->rank, (const volatile int*)&comm->abortFlag);
      uint64_t cw = makeWord(a->gen, ch.algo | (ch.watch ? PAP_W_WATCH_BIT : 0), 1, 1, cnt, cnt);
      int ok = 0;
      PAP_CHECK(commitCas(comm, a, wi, w, cw, &ok));
      if (!ok) continue; /* someone arrived in between: decide again */
      *wordOut = cw;
      return papcclSuccess;
    }
    res = waitChecks(comm, wt, now);
    if (res != papcclSuccess) {
      comm->tops->wait(comm->tstate, tok, 0);
      return res;
    }
    int64_t slice = 100000000;
    if (cnt >= (uint32_t)nMin) slice = (int64_t)(lastChange + tau - now);
    if (slice < 1000) slice = 1000;
    comm->tops->wait(comm->tstate, tok, papWaitSlice(wt, now, slice));
  }
}

/* Ranks that arrived before the commit: wait for it (bounded spin, then the doorbell). */
static papcclResult_t awaitCommit(struct papComm* comm, struct papOpDesc* op, struct papWait* wt,
                                  uint64_t* wordOut) {
  struct papArrival* a = &op->arr;
  size_t wi = IDX_WORD(comm->nranks, a->slot);
  for (;;) {
    uint64_t w = 0;
    PAP_CHECK(slotWord(comm, a, wi, &w));
    if (PAP_W_GEN(w) == a->gen && PAP_W_COMMIT(w)) {
      *wordOut = w;
      return papcclSuccess;
    }
    uint64_t now = papNowNs();
    if (papWaitSpin(wt, now)) {
      if (comm->arrival->msg) comm->tops->progress(comm->tstate); /* the push comes in there */
      continue;
    }
    uint32_t tok = comm->tops->waitToken(comm->tstate);
    papcclResult_t res = slotWord(comm, a, wi, &w);
    if (res == papcclSuccess && PAP_W_GEN(w) == a->gen && PAP_W_COMMIT(w)) {
      comm->tops->wait(comm->tstate, tok, 0);
      *wordOut = w;
      return papcclSuccess;
    }
    if (res == papcclSuccess) res = waitChecks(comm, wt, now);
    if (res != papcclSuccess) {
      comm->tops->wait(comm->tstate, tok, 0);
      return res;
    }
    comm->tops->wait(comm->tstate, tok, papWaitSlice(wt, now, 100000000));
  }
}

papcclResult_t papArrivalAwaitCommit(struct papComm* comm, struct papOpDesc* op) {
  struct papArrival* a = &op->arr;
  if (!a->used || !a->decided) return papcclSuccess;
  int n = comm->nranks;
  struct papWait wt;
  char what[160];
  arrivalWait(comm, op, a->pos == 0 ? "for arrivals (decider)" : "for the arrival commit", what,
              sizeof(what), &wt);
  uint64_t w = a->oldWord;
  if (!PAP_W_COMMIT(w)) {
    if (a->pos == 0) {
      PAP_CHECK(decide(comm, op, &wt, &w));
      /* Wake everyone who arrived before the commit (an entry not written yet belongs to a
       * rank that reads the word after writing it, so it sees the commit anyway). The home
       * of a message board sent them the commit already. */
      uint32_t nE = PAP_W_NE(w);
      if (nE > 1 && nE <= (uint32_t)n && !comm->arrival->msg) {
        uint64_t* buf = comm->arrival->slotBuf;
        PAP_CHECK(bRead(comm, IDX_RANKAT(n, a->slot, 1), nE - 1, buf));
        for (uint32_t p = 0; p + 1 < nE; p++)
          if ((uint32_t)(buf[p] >> 32) == a->gen)
            comm->tops->notify(comm->tstate, (int)(uint32_t)buf[p] - 1);
      }
    } else {
      PAP_CHECK(awaitCommit(comm, op, &wt, &w));
    }
  }
  int nE = (int)PAP_W_NE(w);
  int algo = PAP_W_ALGO(w);
  if (nE < 1 || nE > n || algo <= PAP_ALGO_AUTO || algo >= PAP_ALGO_COUNT) {
    PAP_WARN("arrival board: invalid commit (algo %d, %d early of %d)", algo, nE, n);
    return papcclInternalError;
  }
  op->call.commit.algo = algo;
  op->call.commit.nE = nE;
  if (comm->arrival->msg) papSelectAgree(comm, op, algo, PAP_W_WATCH(w));
  op->call.commit.owners = comm->arrival->owners;
  struct papArrivalState* ps = comm->arrival;
  if (ps->msg) {
    pthread_mutex_lock(&ps->mailLock);
    struct papMail* m = mailFor(ps, a->slot, a->gen);
    int bad = m == NULL || !m->committed;
    for (int p = 0; p < nE && !bad; p++)
      bad = (ps->owners[p] = m->owners[p]) < 0;
    op->call.commit.pred = -1;
    if (!bad && algo == PAP_ALGO_CHAIN && a->pos > 0) {
      op->call.commit.pred = m->before[a->pos - 1];
      bad = op->call.commit.pred < 0;
    }
    pthread_mutex_unlock(&ps->mailLock);
    if (bad) {
      PAP_WARN("collective #%llu: the arrival commit reached rank %d incomplete",
               (unsigned long long)op->call.seq, comm->rank);
      return papcclInternalError;
    }
  } else if (algo == PAP_ALGO_AC2S || algo == PAP_ALGO_AC2S_DET || algo == PAP_ALGO_SMALL ||
             algo == PAP_ALGO_ARRIVAL) {
    /* All positions in one read; an entry still being written is waited for alone. */
    uint64_t* buf = comm->arrival->slotBuf;
    PAP_CHECK(bRead(comm, IDX_RANKAT(n, a->slot, 0), (size_t)nE, buf));
    for (int p = 0; p < nE; p++) {
      int r = (int)(uint32_t)buf[p] - 1;
      if ((uint32_t)(buf[p] >> 32) == a->gen && r >= 0 && r < n)
        comm->arrival->owners[p] = r;
      else
        PAP_CHECK(rankAt(comm, a, p, &comm->arrival->owners[p], &wt));
    }
  }
  op->call.commit.pos = a->pos;
  if (!ps->msg) op->call.commit.pred = -1;
  if (algo == PAP_ALGO_CHAIN && a->pos > 0 && !ps->msg)
    PAP_CHECK(rankAt(comm, a, a->pos - 1, &op->call.commit.pred, &wt));
  /* The slot is released at completion, after the statistics are read from it
   * (papArrivalComplete): until then rank 0 keeps the board (papArrivalDrainBoard). */
  a->tPlan = papNowNs();
  PAP_TRACE(PAP_LOG_PAP, "collective #%llu: rank %d arrived at position %d; %s with %d early",
            (unsigned long long)op->call.seq, comm->rank, a->pos, papAlgoName((enum papAlgo)algo),
            nE);
  return papcclSuccess;
}

papcclResult_t papArrivalExtend(struct papComm* comm, int* progressed) {
  struct papEngine* e = &comm->engine;
  struct papChain* c = comm->arrival->chain;
  *progressed = 0;
  if (c == NULL) {
    PAP_WARN("internal error: a plan waits for an extension nobody will make");
    return papcclInternalError;
  }
  const struct papArrival* a = &comm->arrival->chainOp->arr;
  uint64_t v = 0;
  int succ = -1;
  if (comm->arrival->msg) {
    struct papArrivalState* ps = comm->arrival;
    pthread_mutex_lock(&ps->mailLock);
    struct papMail* m = mailFor(ps, a->slot, a->gen);
    if (m != NULL && m->succPos == c->pos + 1) succ = m->succRank;
    pthread_mutex_unlock(&ps->mailLock);
    if (succ < 0) {
      comm->tops->progress(comm->tstate);
      return papcclSuccess; /* successor not here yet */
    }
  } else {
    PAP_CHECK(bLoad(comm, IDX_RANKAT(comm->nranks, a->slot, c->pos + 1), &v));
    if ((uint32_t)(v >> 32) != a->gen) return papcclSuccess; /* successor not here yet */
    succ = (int)(uint32_t)v - 1;
  }
  if (succ < 0 || succ >= comm->nranks || succ == comm->rank) {
    PAP_WARN("arrival board: position %d holds rank %d of %d", c->pos + 1, succ, comm->nranks);
    return papcclInternalError;
  }
  comm->arrival->chain = NULL;
  comm->arrival->chainOp = NULL;
  PAP_CHECK(papAlgoAllReduceChainFinish(e, c, succ));
  *progressed = 1;
  return papcclSuccess;
}

static int papAlgoStatsId(int coll, int algo) {
  if (coll != PAP_COLL_ALLREDUCE)
    return algo == PAP_ALGO_ARRIVAL ? papcclPapAlgoPap : papcclPapAlgoOther;
  switch (algo) {
  case PAP_ALGO_RING:
    return papcclPapAlgoRing;
  case PAP_ALGO_RHD:
    return papcclPapAlgoRhd;
  case PAP_ALGO_AC2S:
    return papcclPapAlgoAc2s;
  case PAP_ALGO_AC2S_DET:
    return papcclPapAlgoAc2sDet;
  case PAP_ALGO_CHAIN:
    return papcclPapAlgoChain;
  case PAP_ALGO_SMALL:
    return papcclPapAlgoSmall;
  case PAP_ALGO_FLAT:
    return papcclPapAlgoFlat;
  default:
    return papcclPapAlgoNone;
  }
}

/* The prediction context of an op with signature sig after the recent collectives. */
static int contextOf(const struct papArrivalState* ps, uint64_t sig) {
  uint64_t h = sig * 0x9e3779b97f4a7c15ull;
  h ^= (ps->recentSig[0] + 0x632be59bd9b4e019ull) * 0xbf58476d1ce4e5b9ull;
  h ^= (ps->recentSig[1] + 0x8cb92ba72f3d8dd7ull) * 0x94d049bb133111ebull;
  h ^= h >> 31;
  return (int)(h % PAP_PREDICT_CONTEXTS);
}

void papArrivalPredict(struct papComm* comm, struct papOpDesc* op, uint64_t sig) {
  struct papArrivalState* ps = comm->arrival;
  struct papArrival* a = &op->arr;
  a->ctx = contextOf(ps, sig);
  double w = ps->waitEma[a->ctx];
  a->due = w >= 1000.0 ? a->tArr + (uint64_t)w : 0; /* 1 us: a wait worth predicting */
  a->spread = (uint64_t)ps->waitDev[a->ctx];
  ps->recentSig[1] = ps->recentSig[0];
  ps->recentSig[0] = sig;
}

/* Reads every arrival of the op (order, stamps); 0 when the slot is incomplete or reused.
 * The slot is read whole (one round trip on a remote board), again while an entry is still
 * being written, then the word once more: a rank reusing the slot changes the word before
 * it writes a stamp. */
static int readArrivals(struct papComm* comm, const struct papArrival* a) {
  struct papArrivalState* ps = comm->arrival;
  int n = comm->nranks;
  uint64_t* buf = ps->slotBuf;
  int filled = 0;
  if (ps->msg) { /* the home sent the slot after the last arrival; else ask for it */
    pthread_mutex_lock(&ps->mailLock);
    struct papMail* m = mailFor(ps, a->slot, a->gen);
    int have = m != NULL && m->hasFull;
    if (have) memcpy(buf, m->full, SLOT_WORDS(n) * sizeof(uint64_t));
    pthread_mutex_unlock(&ps->mailLock);
    if (!have) {
      struct hmReq q = {HM_READ, (uint32_t)a->slot, a->gen, comm->rank, 0, 0};
      size_t len = 0;
      if (homeCall(comm, &q, &len) != papcclSuccess || len != SLOT_WORDS(n) * sizeof(uint64_t))
        return 0;
      memcpy(buf, ps->reply, len);
    }
    if (PAP_W_GEN(buf[0]) != a->gen || PAP_W_COUNT(buf[0]) != (uint32_t)n) return 0;
    for (int p = 0; p < n; p++) {
      int r = entryRank(buf[SLOT_HDR + p], a->gen, n);
      if (r < 0) return 0;
      ps->order[p] = r;
    }
    for (int r = 0; r < n; r++)
      ps->stamps[r] = buf[SLOT_HDR + n + r];
    return 1;
  }
  for (int tries = 0; tries < 1000 && !filled; tries++) {
    if (tries) sched_yield();
    if (bRead(comm, IDX_WORD(n, a->slot), SLOT_WORDS(n), buf) != papcclSuccess) return 0;
    if (PAP_W_GEN(buf[0]) != a->gen || PAP_W_COUNT(buf[0]) != (uint32_t)n) return 0;
    filled = 1;
    for (int p = 0; p < n && filled; p++)
      filled = (uint32_t)(buf[SLOT_HDR + p] >> 32) == a->gen;
  }
  if (!filled) return 0;
  for (int p = 0; p < n; p++) {
    int r = (int)(uint32_t)buf[SLOT_HDR + p] - 1;
    if (r < 0 || r >= n) return 0;
    ps->order[p] = r;
  }
  for (int r = 0; r < n; r++)
    ps->stamps[r] = buf[SLOT_HDR + n + r];
  uint64_t w = 0;
  if (bLoad(comm, IDX_WORD(n, a->slot), &w) != papcclSuccess || PAP_W_GEN(w) != a->gen) return 0;
  return 1;
}

static int cmpU64(const void* x, const void* y) {
  uint64_t a = *(const uint64_t*)x, b = *(const uint64_t*)y;
  return a < b ? -1 : a > b;
}

static void report(struct papComm* comm) {
  struct papArrivalState* ps = comm->arrival;
  int64_t every = papParamPapReport();
  if (every <= 0 || ++ps->reportOps < (uint64_t)every) return;
  int worst = -1;
  uint64_t worstN = 0;
  for (int r = 0; r < ps->nranks && r < PAPCCL_PAP_STATS_MAX_RANKS; r++) {
    if (ps->reportLate[r] > worstN) {
      worstN = ps->reportLate[r];
      worst = r;
    }
  }
  double nc = ps->reportComplete ? (double)ps->reportComplete : 1.0;
  char habit[96] = "no habitual late rank";
  if (worst >= 0 && ps->reportComplete >= 8 && worstN * 2 > ps->reportComplete)
    snprintf(habit, sizeof(habit), "rank %d was last in %llu of %llu", worst,
             (unsigned long long)worstN, (unsigned long long)ps->reportComplete);
  if (comm->rank == 0)
    PAP_INFO(PAP_LOG_PAP,
             "PAP: last %llu collectives (%llu with a PAP-aware plan): mean skew %.1f us, mean "
             "tail %.1f us, %s; last ran %s",
             (unsigned long long)ps->reportOps, (unsigned long long)ps->reportPap,
             ps->reportSkew / nc / 1e3, ps->reportTail / nc / 1e3, habit, ps->st.lastAlgoName);
  ps->reportOps = 0;
  ps->reportPap = 0;
  ps->reportComplete = 0;
  ps->reportSkew = ps->reportTail = 0;
  memset(ps->reportLate, 0, sizeof(ps->reportLate));
}

papcclResult_t papArrivalComplete(struct papComm* comm, struct papOpDesc* op) {
  struct papArrival* a = &op->arr;
  struct papArrivalState* ps = comm->arrival;
  if (ps == NULL) return papcclSuccess;
  /* A message board's home found this collective, or one before it, mismatched. */
  PAP_CHECK(papArrivalNoticeCheck(comm));
  if (!a->used && !a->flat) return papcclSuccess;
  int n = comm->nranks;
  uint64_t tDone = papNowNs();
  papcclPapStats* st = &ps->st;
  st->ops++;
  st->lastSeq = op->call.seq;
  st->lastExpectedWaitUs = a->due > a->tArr ? (double)(a->due - a->tArr) / 1e3 : 0;
  st->lastAlgo = papAlgoStatsId(op->call.coll, op->call.commit.algo);
  const char* name = op->call.coll == PAP_COLL_ALLREDUCE || op->call.commit.algo == PAP_ALGO_ARRIVAL
                         ? papAlgoName((enum papAlgo)op->call.commit.algo)
                         : "classic";
  if (name != ps->lastName) { /* the names are constants: copy only a change */
    strncpy(st->lastAlgoName, name, sizeof(st->lastAlgoName) - 1);
    st->lastAlgoName[sizeof(st->lastAlgoName) - 1] = '\0';
    ps->lastName = name;
  }
  st->lastEarly = op->call.coll == PAP_COLL_ALLREDUCE || op->call.commit.algo == PAP_ALGO_ARRIVAL
                      ? op->call.commit.nE
                      : n;
  if (op->call.commit.algo >= PAP_ALGO_AC2S && a->decided) {
    st->papOps++;
    ps->reportPap++;
  }
  /* An op whose plan every rank chose alone released its slot at arrival (a group may
   * hold more collectives than there are slots); over a network its slot may be reused or
   * gone (rank 0 destroyed) by now, so only ops with a commit read it back there. */
  if (a->flat) {
    /* Every stamp came with its line (flat.c); the order is by stamp, ties by rank. */
    for (int r = 0; r < n; r++) { /* insertion in rank order keeps ties by rank */
      int j = r;
      for (; j > 0 && ps->stamps[ps->order[j - 1]] > ps->stamps[r]; j--)
        ps->order[j] = ps->order[j - 1];
      ps->order[j] = r;
    }
    st->lastComplete = 1;
  } else {
    int readable = a->decided || !comm->tops->remoteBoard;
    st->lastComplete = readable && readArrivals(comm, a);
    papcclResult_t res = verifyArrivals(comm, op, readable, st->lastComplete);
    (void)releaseSlot(comm, a);
    if (res != papcclSuccess) return res;
  }
  int nst = n < PAPCCL_PAP_STATS_MAX_RANKS ? n : PAPCCL_PAP_STATS_MAX_RANKS;
  if (!st->lastComplete) { /* entries past N stay as papArrivalInit set them */
    for (int i = 0; i < nst; i++) {
      st->lastOrder[i] = -1;
      st->lastLatenessUs[i] = 0;
    }
    st->lastLateRank = -1;
    st->lastSkewUs = st->lastTailUs = 0;
    st->lastTimeInCollUs = (double)(tDone - a->tArr) / 1e3;
    st->lastPlanWaitUs = a->tPlan > a->tArr ? (double)(a->tPlan - a->tArr) / 1e3 : 0;
    report(comm);
    return papcclSuccess;
  }
  uint64_t aMin = UINT64_MAX, aMax = 0;
  for (int r = 0; r < n; r++) {
    if (ps->stamps[r] < aMin) aMin = ps->stamps[r];
    if (ps->stamps[r] > aMax) aMax = ps->stamps[r];
  }
  double skew = (double)(aMax - aMin);
  /* What this rank waited for the last arrival, for the next prediction in this context. */
  double waited = aMax > a->tArr ? (double)(aMax - a->tArr) : 0.0;
  /* The prediction and its mean deviation, as TCP estimates a round trip and its variation:
   * the first sample of a context is the best guess, half of it the deviation (the first
   * call after init often waits longer than the steady state); then EMAs of 1/4. */
  if (ps->waitSamples[a->ctx]++ == 0) {
    ps->waitEma[a->ctx] = waited;
    ps->waitDev[a->ctx] = waited / 2;
  } else {
    double err = waited - ps->waitEma[a->ctx];
    ps->waitDev[a->ctx] += (fabs(err) - ps->waitDev[a->ctx]) / 4;
    ps->waitEma[a->ctx] += err / 4;
  }
  double tail = tDone > aMax ? (double)(tDone - aMax) : 0.0;
  double inColl = (double)(tDone - a->tArr);
  int lateRank = ps->order[n - 1];
  for (int p = 0; p < n && p < PAPCCL_PAP_STATS_MAX_RANKS; p++)
    st->lastOrder[p] = ps->order[p];
  for (int r = 0; r < n; r++) {
    double l = (double)(ps->stamps[r] - aMin);
    if (r < PAPCCL_PAP_STATS_MAX_RANKS) st->lastLatenessUs[r] = l / 1e3;
    ps->sumLate[r] += l;
  }
  ps->late[lateRank]++;
  if (lateRank < PAPCCL_PAP_STATS_MAX_RANKS) ps->reportLate[lateRank]++;
  st->lastLateRank = lateRank;
  st->lastSkewUs = skew / 1e3;
  st->lastTailUs = tail / 1e3;
  st->lastTimeInCollUs = inColl / 1e3;
  st->lastPlanWaitUs = a->tPlan > a->tArr ? (double)(a->tPlan - a->tArr) / 1e3 : 0;
  st->completeOps++;
  ps->sumSkew += skew;
  ps->sumTail += tail;
  ps->sumInColl += inColl;
  if (st->lastSkewUs > st->maxSkewUs) st->maxSkewUs = st->lastSkewUs;
  ps->reportComplete++;
  ps->reportSkew += skew;
  ps->reportTail += tail;

  /* In-burst gap: mean of the gaps between consecutive arrivals, the largest left out. */
  double gap = 0;
  if (n >= 3) {
    uint64_t* s = ps->sorted;
    memcpy(s, ps->stamps, sizeof(uint64_t) * (size_t)n);
    qsort(s, (size_t)n, sizeof(uint64_t), cmpU64);
    double sum = 0, mx = 0;
    for (int i = 0; i + 1 < n; i++) {
      double g = (double)(s[i + 1] - s[i]);
      sum += g;
      if (g > mx) mx = g;
    }
    gap = (sum - mx) / (double)(n - 2);
  }
  if (!a->flat) { /* flat ops do not consult it */
    int alg = op->call.commit.algo;
    int pap =
        a->decided && alg >= PAP_ALGO_AC2S && alg != PAP_ALGO_AC2S_DET && alg != PAP_ALGO_FLAT;
    papSelectObserve(comm, op, skew, gap, tail, pap);
  }
  report(comm);
  return papcclSuccess;
}

papcclResult_t papArrivalStats(struct papComm* comm, papcclPapStats* stats) {
  pthread_mutex_lock(&comm->progressLock);
  struct papArrivalState* ps = comm->arrival;
  if (ps == NULL) {
    pthread_mutex_unlock(&comm->progressLock);
    PAP_WARN("papcclCommGetPapStats: communicator (rank %d) is not initialized yet", comm->rank);
    return papcclInvalidUsage;
  }
  *stats = ps->st;
  double nc = ps->st.completeOps ? (double)ps->st.completeOps : 1.0;
  stats->avgSkewUs = ps->sumSkew / nc / 1e3;
  stats->avgTailUs = ps->sumTail / nc / 1e3;
  stats->avgTimeInCollUs = ps->sumInColl / nc / 1e3;
  stats->habitualLateRank = -1;
  for (int r = 0; r < ps->nranks; r++) {
    if (r < PAPCCL_PAP_STATS_MAX_RANKS) {
      stats->lateCount[r] = ps->late[r];
      stats->avgLatenessUs[r] = ps->sumLate[r] / nc / 1e3;
    }
    if (ps->st.completeOps >= 8 && ps->late[r] * 2 > ps->st.completeOps)
      stats->habitualLateRank = r;
  }
  pthread_mutex_unlock(&comm->progressLock);
  return papcclSuccess;
}

/* Rank 0 serves the board; over a network backend it is gone with rank 0's communicator.
 * A rank may finish a collective before its peers have even arrived (the root of a
 * broadcast needs no one), so before rank 0 lets go of the board it waits, bounded by the
 * timeout, until every rank has released the slots of the last collectives. Skipped after
 * an error or an abort: then the peers fail anyway. */
int papArrivalArrived(struct papComm* comm, const struct papOpDesc* op, unsigned char* arrived) {
  const struct papArrival* a = &op->arr;
  int n = comm->nranks;
  if (!a->used || a->flat || comm->arrival == NULL || comm->arrival->msg) return -1;
  uint64_t* buf = comm->arrival->slotBuf; /* word, released, call, rank_at[n] */
  if (bRead(comm, IDX_WORD(n, a->slot), SLOT_HDR + (size_t)n, buf) != papcclSuccess ||
      PAP_W_GEN(buf[0]) != a->gen)
    return -1;
  memset(arrived, 0, (size_t)n);
  for (int p = 0; p < n; p++) {
    int r = entryRank(buf[SLOT_HDR + p], a->gen, n);
    if (r >= 0) arrived[r] = 1;
  }
  return 0;
}

void papArrivalDrainBoard(struct papComm* comm) {
  int n = comm->nranks;
  if (comm->rank != 0 || n < 2 || n > 0xffff || comm->tstate == NULL ||
      (comm->tops->boardAtomic == NULL && !comm->arrival->msg) || !comm->tops->remoteBoard)
    return;
  if (atomic_load_explicit(&comm->asyncError, memory_order_acquire) != papcclSuccess ||
      papAborted(abortFlagOf(comm)))
    return;
  struct papWait wt;
  papWaitInit(&wt, "destroy on rank 0, waiting for the ranks to leave the arrival board",
              abortFlagOf(comm), 1, 0, 0);
  for (int s = 0; s < PAP_BOARD_SLOTS; s++) {
    if (comm->arrival->slotCseq[s] == 0) continue; /* never used */
    uint64_t k = comm->arrival->slotCseq[s] - 1; /* the last collective in the slot */
    size_t ri = IDX_REL(n, s);
    uint64_t want = ((uint64_t)genOf(k) << 32) | (uint32_t)n;
    for (;;) {
      uint32_t tok = comm->tops->waitToken(comm->tstate);
      uint64_t rel = 0;
      if (comm->arrival->msg) { /* our own board: read it as the home serves it */
        struct hmReq q = {HM_READ, (uint32_t)s, 0, 0, 0, 0};
        size_t len = 0;
        if (comm->tops->homeCall(comm->tstate, &q, sizeof(q), comm->arrival->reply,
                                 PAP_HOME_MAX_BYTES, &len) != papcclSuccess ||
            len < 2 * sizeof(uint64_t))
          break;
        rel = comm->arrival->reply[1];
        if (rel == want) break;
      } else if (bLoad(comm, ri, &rel) != papcclSuccess || rel == want) {
        break;
      }
      uint64_t now = papNowNs();
      if (papWaitCheck(&wt, now) != papcclSuccess) {
        PAP_WARN(
            "destroy: a rank never finished collective #%llu; it will fail on the arrival "
            "board, which goes with rank 0",
            (unsigned long long)k);
        return;
      }
      comm->tops->wait(comm->tstate, tok, papWaitSlice(&wt, now, 1000000));
    }
  }
}
