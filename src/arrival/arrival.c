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

/* Board word indices of slot s: word, released, rank_at[N], t_arr[N].
 * released = [gen:32 | ranks done reading the slot:32]. */
#define SLOT_WORDS(n) (2 + 2 * (size_t)(n))
static inline size_t slotBase(int n, int slot) {
  return (size_t)slot * SLOT_WORDS(n);
}
#define IDX_WORD(n, s) (slotBase(n, s))
#define IDX_REL(n, s) (slotBase(n, s) + 1)
#define IDX_RANKAT(n, s, p) (slotBase(n, s) + 2 + (size_t)(p))
#define IDX_TARR(n, s, r) (slotBase(n, s) + 2 + (size_t)(n) + (size_t)(r))

static papcclResult_t bLoad(struct papComm* comm, size_t idx, uint64_t* v) {
  return comm->tops->boardAtomic(comm->tstate, idx, PAP_BOARD_LOAD, 0, 0, v);
}
static papcclResult_t bStore(struct papComm* comm, size_t idx, uint64_t v) {
  return comm->tops->boardAtomic(comm->tstate, idx, PAP_BOARD_STORE, v, 0, NULL);
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

/* The wait of a collective's arrival phase (core/wait.h); `phase` says for what. */
static void arrivalWait(const struct papComm* comm, const struct papArrival* a, const char* phase,
                        char* buf, size_t len, struct papWait* w) {
  snprintf(buf, len, "collective #%llu on rank %d, waiting %s", (unsigned long long)a->gen,
           comm->rank, phase);
  papWaitInit(w, buf, abortFlagOf(comm), 1, comm->spinNs, 1000000);
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

/* Done reading the slot (plan, positions): once all N ranks of a generation released it,
 * the next generation may take the slot over. */
static papcclResult_t releaseSlot(struct papComm* comm, struct papArrival* a) {
  if (!a->used || a->released) return papcclSuccess;
  a->released = 1;
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
  uint32_t rg = (uint32_t)(rel >> 32), rc = (uint32_t)rel;
  if (rg == a->gen) { /* another rank of our generation reset it already */
    *okOut = 1;
    return papcclSuccess;
  }
  int prevDone = (g == 0 && rel == 0) || (rg == g && rc == (uint32_t)comm->nranks);
  if (!prevDone) return papcclSuccess;
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
  ps->st.nranks = n;
  ps->st.lastLateRank = -1;
  ps->st.habitualLateRank = -1;
  for (int i = 0; i < PAPCCL_PAP_STATS_MAX_RANKS; i++)
    ps->st.lastOrder[i] = -1;
  snprintf(ps->st.lastAlgoName, sizeof(ps->st.lastAlgoName), "none");
  comm->arrival = ps;
  return papFlatAttach(comm);
}

void papArrivalFree(struct papComm* comm) {
  struct papArrivalState* ps = comm->arrival;
  if (ps == NULL) return;
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

papcclResult_t papArrive(struct papComm* comm, struct papOpDesc* op, int decided) {
  struct papArrival* a = &op->arr;
  int n = comm->nranks;
  a->used = 0;
  a->decided = decided;
  if (a->tArr == 0) a->tArr = papNowNs();
  papArrivalPredict(comm, op, papArrivalSignature(&op->call));
  papSelectLocal(comm, op);
  if (comm->tops->boardAtomic == NULL || n > 0xffff) return papcclSuccess;
  a->slot = (int)(op->call.cseq % PAP_BOARD_SLOTS);
  a->gen = genOf(op->call.cseq);
  a->released = 0;
  a->tPlan = 0;
  size_t wi = IDX_WORD(n, a->slot);
  uint64_t w = 0, nw = 0;
  struct papWait slotWait;
  char slotWhat[160];
  int slotWaiting = 0;
  for (;;) {
    PAP_CHECK(bLoad(comm, wi, &w));
    uint32_t g = PAP_W_GEN(w);
    if (g == a->gen) {
      if (PAP_W_DECIDED(w) != decided) {
        PAP_WARN(
            "collective #%llu: rank %d %s the arrival commit but another rank does not (the "
            "same collective was called inside a group on some ranks and alone on others; "
            "group alike on every rank or set PAPCCL_PAP=0)",
            (unsigned long long)op->call.seq, comm->rank, decided ? "waits for" : "skips");
        return papcclInvalidUsage;
      }
      if (PAP_W_COUNT(w) >= (uint32_t)n) {
        PAP_WARN("collective #%llu: more arrivals than ranks on the board (mismatched calls?)",
                 (unsigned long long)op->call.seq);
        return papcclInvalidUsage;
      }
      nw = w + 1;
    } else if (g == 0 || genOlder(g, a->gen)) {
      int ok = 0;
      PAP_CHECK(mayTakeOver(comm, a, g, &ok));
      if (!ok) {
        /* This rank is PAP_BOARD_SLOTS collectives ahead of a peer that has not finished
         * reading the slot (possible after collectives a rank completes without every
         * peer, such as broadcast). Rare: back off with sleeps, bounded by the timeout. */
        if (!slotWaiting) {
          arrivalWait(comm, a, "for a peer to finish the collective before in its board slot",
                      slotWhat, sizeof(slotWhat), &slotWait);
          slotWait.spinNs = 0; /* sleeps only */
          slotWaiting = 1;
        }
        PAP_CHECK(papWaitCheck(&slotWait, papNowNs()));
        papWaitSleep(&slotWait);
        continue;
      }
      nw = makeWord(a->gen, 0, 0, decided, 0, 1);
    } else {
      PAP_WARN(
          "collective #%llu: the arrival slot holds generation %u, expected %u or an older one "
          "(ranks called different collectives?)",
          (unsigned long long)op->call.seq, g, a->gen);
      return papcclInternalError;
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
  PAP_CHECK(bStore(comm, IDX_TARR(n, a->slot, comm->rank), a->tArr));
  PAP_CHECK(bStore(comm, IDX_RANKAT(n, a->slot, a->pos),
                   ((uint64_t)a->gen << 32) | (uint32_t)(comm->rank + 1)));
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
  if (!papWaitHealthDue(w, now)) return papcclSuccess;
  for (int r = 0; r < comm->nranks; r++) {
    if (r == comm->rank || comm->tops->peerAlive(comm->tstate, r)) continue;
    PAP_WARN("rank %d (pid %d) exited while %s", r, comm->pids[r], w->what);
    return papcclRemoteError;
  }
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
    papcclResult_t res = bLoad(comm, wi, &w);
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
      uint64_t cw = makeWord(a->gen, ch.algo, 1, 1, cnt, cnt);
      int ok = 0;
      PAP_CHECK(bCas(comm, wi, w, cw, &ok));
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
    PAP_CHECK(bLoad(comm, wi, &w));
    if (PAP_W_GEN(w) == a->gen && PAP_W_COMMIT(w)) {
      *wordOut = w;
      return papcclSuccess;
    }
    uint64_t now = papNowNs();
    if (papWaitSpin(wt, now)) continue;
    uint32_t tok = comm->tops->waitToken(comm->tstate);
    papcclResult_t res = bLoad(comm, wi, &w);
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
  arrivalWait(comm, a, a->pos == 0 ? "for arrivals (decider)" : "for the arrival commit", what,
              sizeof(what), &wt);
  uint64_t w = a->oldWord;
  if (!PAP_W_COMMIT(w)) {
    if (a->pos == 0) {
      PAP_CHECK(decide(comm, op, &wt, &w));
      /* Wake everyone who arrived before the commit (an entry not written yet belongs to a
       * rank that reads the word after writing it, so it sees the commit anyway). */
      uint32_t nE = PAP_W_NE(w);
      if (nE > 1 && nE <= (uint32_t)n) {
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
  op->call.commit.owners = comm->arrival->owners;
  if (algo == PAP_ALGO_AC2S || algo == PAP_ALGO_AC2S_DET || algo == PAP_ALGO_SMALL ||
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
  op->call.commit.pred = -1;
  if (algo == PAP_ALGO_CHAIN && a->pos > 0)
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
  PAP_CHECK(bLoad(comm, IDX_RANKAT(comm->nranks, a->slot, c->pos + 1), &v));
  if ((uint32_t)(v >> 32) != a->gen) return papcclSuccess; /* successor not here yet */
  int succ = (int)(uint32_t)v - 1;
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
  for (int tries = 0; tries < 1000 && !filled; tries++) {
    if (tries) sched_yield();
    if (bRead(comm, IDX_WORD(n, a->slot), SLOT_WORDS(n), buf) != papcclSuccess) return 0;
    if (PAP_W_GEN(buf[0]) != a->gen || PAP_W_COUNT(buf[0]) != (uint32_t)n) return 0;
    filled = 1;
    for (int p = 0; p < n && filled; p++)
      filled = (uint32_t)(buf[2 + p] >> 32) == a->gen;
  }
  if (!filled) return 0;
  for (int p = 0; p < n; p++) {
    int r = (int)(uint32_t)buf[2 + p] - 1;
    if (r < 0 || r >= n) return 0;
    ps->order[p] = r;
  }
  for (int r = 0; r < n; r++)
    ps->stamps[r] = buf[2 + n + r];
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

void papArrivalComplete(struct papComm* comm, struct papOpDesc* op) {
  struct papArrival* a = &op->arr;
  struct papArrivalState* ps = comm->arrival;
  if ((!a->used && !a->flat) || ps == NULL) return;
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
    (void)releaseSlot(comm, a);
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
    return;
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
void papArrivalDrainBoard(struct papComm* comm) {
  int n = comm->nranks;
  if (comm->rank != 0 || n < 2 || n > 0xffff || comm->tstate == NULL ||
      comm->tops->boardAtomic == NULL || !comm->tops->remoteBoard)
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
      if (bLoad(comm, ri, &rel) != papcclSuccess || rel == want) break;
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
