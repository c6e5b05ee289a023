/* SPDX-License-Identifier: Apache-2.0 */
/* Arrival of a collective on the board: one CAS on a shared board, one request on a message
 * board (docs/PAP-ENGINE.md section 2). */
#include "arrival_int.h"
#include "futex.h"
#include "log.h"

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
    struct papMail* m = papHomeMail(ps, a->slot, a->gen);
    int ahead = m != NULL && m->committed && PAP_W_ALGO(m->word) != PAP_ALGO_CHAIN;
    uint64_t w = ahead ? m->word : 0;
    pthread_mutex_unlock(&ps->mailLock);
    if (ahead) {
      PAP_CHECK(comm->tops->home->send(comm->tstate, &q, sizeof(q)));
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
    PAP_CHECK(papHomeCall(comm, &q, &len));
    if (len < sizeof(*r) || r->pos < 0 || r->pos >= n ||
        len < sizeof(*r) + (size_t)r->pos * sizeof(uint64_t)) {
      PAP_WARN("collective #%llu: rank 0 refused the arrival of rank %d (see its log)",
               (unsigned long long)op->call.seq, comm->rank);
      return papcclInternalError;
    }
    if (r->status == ARR_JOIN || r->status == ARR_TAKE) break;
    if (r->status != ARR_WAIT)
      return papBoardArrivalError(comm, op, (enum arrStep)r->status, PAP_W_GEN(r->word));
    /* As papArrive: a peer has not finished reading the slot's previous collective. Its
     * release is a message to rank 0: wait in the transport, which serves it there (a plain
     * sleep on rank 0 would leave it unread, and the slot taken for good). */
    if (!slotWaiting) {
      papBoardWait(comm, op, "for a peer to finish the collective before in its board slot",
                   slotWhat, sizeof(slotWhat), &slotWait);
      slotWait.spinNs = 0;
      slotWaiting = 1;
    }
    uint32_t tok = comm->tops->wake->waitToken(comm->tstate);
    uint64_t now = papNowNs();
    PAP_CHECK(papWaitCheck(&slotWait, now));
    /* The peer may be stuck in a mismatched collective, or have failed it. */
    if (papWaitHealthDue(&slotWait, now))
      PAP_CHECK(papArrivalPoll(comm, PAP_POLL_MISMATCH, &slotWait, NULL));
    comm->tops->wake->wait(comm->tstate, tok, papWaitSlice(&slotWait, now, 1000000));
  }
  a->used = 1;
  ps->slotCseq[a->slot] = op->call.cseq + 1;
  a->pos = r->pos;
  a->oldWord = r->word;
  uint64_t mine = r->status == ARR_TAKE
                      ? (r->word ? r->word : makeWord(a->gen, 0, 0, decided, 0, 1))
                      : r->word + 1;
  pthread_mutex_lock(&ps->mailLock);
  struct papMail* m = papHomeMail(ps, a->slot, a->gen);
  if (m != NULL) {
    for (int p = 0; p < a->pos; p++)
      m->before[p] = entryRank(r->ranks[p], a->gen, n);
    if (PAP_W_COMMIT(r->word)) { /* committed before we came: the early ranks are before us */
      m->word = r->word;
      m->committed = 1;
      if (a->pos == 0)
        m->owners[0] = comm->rank; /* our proposal, committed with our arrival */
      else
        papHomeSetOwners(m, r->ranks, PAP_W_NE(r->word), n);
    } else if (!m->committed && PAP_W_COUNT(mine) > PAP_W_COUNT(m->word)) {
      m->word = mine;
    }
  }
  pthread_mutex_unlock(&ps->mailLock);
  if (!decided) PAP_CHECK(papBoardRelease(comm, a));
  return papcclSuccess;
}

/* A shared board: the CAS that claims this rank's position in op's slot (joining its
 * generation, or taking the slot over from an older one); *wOut: the word before it. */
static papcclResult_t claimSlot(struct papComm* comm, struct papOpDesc* op, int decided,
                                uint64_t sig, uint64_t* wOut) {
  struct papArrival* a = &op->arr;
  int n = comm->nranks;
  size_t wi = IDX_WORD(n, a->slot);
  uint64_t w = 0, nw = 0;
  struct papWait slotWait;
  char slotWhat[160];
  int slotWaiting = 0;
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
          papBoardWait(comm, op, "for a peer to finish the collective before in its board slot",
                       slotWhat, sizeof(slotWhat), &slotWait);
          slotWait.spinNs = 0; /* sleeps only */
          slotWaiting = 1;
        }
        uint64_t now = papNowNs();
        PAP_CHECK(papWaitCheck(&slotWait, now));
        /* The peer may be stuck in a mismatched collective of this batch, or have failed it
         * (and never release the slot). */
        if (papWaitHealthDue(&slotWait, now))
          PAP_CHECK(papArrivalPoll(comm, PAP_POLL_MISMATCH, &slotWait, NULL));
        papWaitSleep(&slotWait);
        continue;
      }
      nw = makeWord(a->gen, 0, 0, decided, 0, 1);
    } else {
      if (comm->arrival->checkMismatch && e == ARR_ERR_DECIDED) {
        /* the first arrival may have made another call */
        int logged = 0;
        papcclResult_t res = papMismatchCheckArrival(comm, op, sig, WHY_GROUPED, &logged);
        if (res != papcclInvalidUsage) return res;
        if (logged) return res;
      }
      return papBoardArrivalError(comm, op, e, g);
    }
    int ok = 0;
    PAP_CHECK(bCas(comm, wi, w, nw, &ok));
    if (ok) break;
  }
  *wOut = w;
  return papcclSuccess;
}

/* A decided op that arrived after the first (w: the word before its CAS): wake the decider
 * (before the commit) and the predecessor (a chain waits for its successor). If an entry
 * is not written yet, its owner reads the board after writing it (seq_cst on both sides),
 * so it sees this arrival anyway. */
static papcclResult_t wakeNeighbours(struct papComm* comm, const struct papArrival* a, uint64_t w) {
  int n = comm->nranks;
  uint64_t v = 0;
  if (!PAP_W_COMMIT(w)) {
    PAP_CHECK(bLoad(comm, IDX_RANKAT(n, a->slot, 0), &v));
    if ((uint32_t)(v >> 32) == a->gen) comm->tops->wake->notify(comm->tstate, (int)(uint32_t)v - 1);
  }
  if (a->pos > 1 || PAP_W_COMMIT(w)) {
    PAP_CHECK(bLoad(comm, IDX_RANKAT(n, a->slot, a->pos - 1), &v));
    if ((uint32_t)(v >> 32) == a->gen) comm->tops->wake->notify(comm->tstate, (int)(uint32_t)v - 1);
  }
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
  if ((comm->tops->board == NULL && !ps->msg) || n > 0xffff) return papcclSuccess;
  a->slot = (int)(op->call.cseq % PAP_BOARD_SLOTS);
  a->gen = genOf(op->call.cseq);
  a->released = 0;
  a->tPlan = 0;
  if (ps->msg) {
    /* A mismatch the home found already, in this collective or one before. */
    PAP_CHECK(papArrivalPoll(comm, PAP_POLL_NOTICE, NULL, NULL));
    if (decided) return arriveByMessage(comm, op, decided);
    /* A plan every rank chooses alone needs nothing from the board: over a network its
     * statistics are not read back either (papArrivalComplete). Only the call goes to the
     * home, one way, for the mismatch check (section 11). */
    return papMismatchQueueCall(comm, op);
  }
  int check = ps->checkMismatch;
  uint64_t sig = check ? papArrivalSignature(&op->call) : 0;
  uint64_t w = 0;
  PAP_CHECK(claimSlot(comm, op, decided, sig, &w));
  a->used = 1;
  comm->arrival->slotCseq[a->slot] = op->call.cseq + 1;
  a->pos = PAP_W_GEN(w) == a->gen ? (int)PAP_W_COUNT(w) : 0;
  a->oldWord = PAP_W_GEN(w) == a->gen ? w : 0;
  /* Stamp before the position entry: a reader that sees the entry sees the stamp. */
  PAP_CHECK(bStoreRelease(comm, IDX_TARR(n, a->slot, comm->rank), a->tArr));
  /* A later arrival checks its call against the first one's before its entry: a reader that
   * sees every entry sees any mark (papMismatchVerify). The entry is written either way, as
   * waiters for it (papBoardRankAt) have no other way out. */
  papcclResult_t mism = papcclSuccess;
  if (check) {
    ps->mySig[a->slot] = sig;
    ps->myRoot[a->slot] = op->call.root;
    if (a->pos == 0) { /* the first arrival's call, for the others to compare with */
      mism = papMismatchPutFirst(comm, op, sig);
    } else {
      int logged = 0;
      mism = papMismatchCheckArrival(comm, op, sig, WHY_CALL, &logged);
    }
  }
  PAP_CHECK(bStore(comm, IDX_RANKAT(n, a->slot, a->pos),
                   ((uint64_t)a->gen << 32) | (uint32_t)(comm->rank + 1)));
  if (mism != papcclSuccess) return mism;
  if (decided && a->pos > 0) PAP_CHECK(wakeNeighbours(comm, a, w));
  /* A plan every rank chooses alone reads nothing more from the slot (the statistics of
   * papArrivalComplete read it only while its generation is still there). */
  if (!decided) PAP_CHECK(papBoardRelease(comm, a));
  return papcclSuccess;
}
