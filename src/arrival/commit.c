/* SPDX-License-Identifier: Apache-2.0 */
/* The commit: the decider chooses and commits, the others wait for it, and a chain's plan
 * is extended as its successor arrives (docs/PAP-ENGINE.md section 3). */
#include "arrival_int.h"
#include "fault.h"
#include "futex.h"
#include "log.h"
#include "param.h"

/* The wait's checks, and the peers' health every 100 ms. */
static papcclResult_t waitChecks(struct papComm* comm, struct papWait* w, uint64_t now) {
  PAP_CHECK(papWaitCheck(w, now));
  /* A message board's mismatch notice (its push rang the doorbell): at once. */
  PAP_CHECK(papArrivalPoll(comm, PAP_POLL_NOTICE, w, NULL));
  if (!papWaitHealthDue(w, now)) return papcclSuccess;
  /* The diagnosis, then a mismatch first: a peer that failed on it may be gone by now (as
   * checkPeers). */
  PAP_CHECK(papArrivalPoll(comm, PAP_POLL_DIAG | PAP_POLL_MISMATCH, w, NULL));
  /* A dead peer: the notice, read after its death was (the transport delivers what the peer
   * sent before its end first), may still explain it. */
  if (papCommDeadPeer(comm) >= 0) {
    PAP_CHECK(papArrivalPoll(comm, PAP_POLL_EXPLAIN, w, NULL));
    PAP_CHECK(papCommCheckDeadPeer(comm));
  }
  for (int r = 0; r < comm->nranks; r++) {
    if (r == comm->rank || comm->tops->live->peerAlive(comm->tstate, r)) continue;
    PAP_CHECK(papArrivalPoll(comm, PAP_POLL_EXPLAIN, w, NULL));
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
  struct papMail* m = papHomeMail(ps, a->slot, a->gen);
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
  PAP_CHECK(papHomeCall(comm, &q, &len));
  uint32_t nE = PAP_W_COMMIT(r->word) ? PAP_W_NE(r->word) : 0;
  if (len < sizeof(*r) || len < sizeof(*r) + nE * sizeof(uint64_t) || nE > (uint32_t)n) {
    PAP_WARN("collective #%llu: rank 0 refused the commit (see its log)",
             (unsigned long long)a->gen);
    return papcclInternalError;
  }
  *okOut = r->status == 1;
  pthread_mutex_lock(&ps->mailLock);
  struct papMail* m = papHomeMail(ps, a->slot, a->gen);
  if (m != NULL && PAP_W_GEN(r->word) == a->gen) {
    m->word = r->word;
    if (nE) {
      m->committed = 1;
      papHomeSetOwners(m, r->ranks, nE, n);
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
    uint32_t tok = comm->tops->wake->waitToken(comm->tstate);
    uint64_t w = 0;
    papcclResult_t res = slotWord(comm, a, wi, &w);
    if (res != papcclSuccess) {
      comm->tops->wake->wait(comm->tstate, tok, 0);
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
      comm->tops->wake->wait(comm->tstate, tok, 0);
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
      comm->tops->wake->wait(comm->tstate, tok, 0);
      return res;
    }
    int64_t slice = 100000000;
    if (cnt >= (uint32_t)nMin) slice = (int64_t)(lastChange + tau - now);
    if (slice < 1000) slice = 1000;
    comm->tops->wake->wait(comm->tstate, tok, papWaitSlice(wt, now, slice));
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
      if (comm->arrival->msg) comm->tops->msg->progress(comm->tstate); /* the push comes in there */
      continue;
    }
    uint32_t tok = comm->tops->wake->waitToken(comm->tstate);
    papcclResult_t res = slotWord(comm, a, wi, &w);
    if (res == papcclSuccess && PAP_W_GEN(w) == a->gen && PAP_W_COMMIT(w)) {
      comm->tops->wake->wait(comm->tstate, tok, 0);
      *wordOut = w;
      return papcclSuccess;
    }
    if (res == papcclSuccess) res = waitChecks(comm, wt, now);
    if (res != papcclSuccess) {
      comm->tops->wake->wait(comm->tstate, tok, 0);
      return res;
    }
    comm->tops->wake->wait(comm->tstate, tok, papWaitSlice(wt, now, 100000000));
  }
}

papcclResult_t papArrivalAwaitCommit(struct papComm* comm, struct papOpDesc* op) {
  struct papArrival* a = &op->arr;
  if (!a->used || !a->decided) return papcclSuccess;
  int n = comm->nranks;
  struct papWait wt;
  char what[160];
  papBoardWait(comm, op, a->pos == 0 ? "for arrivals (decider)" : "for the arrival commit", what,
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
            comm->tops->wake->notify(comm->tstate, (int)(uint32_t)buf[p] - 1);
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
    struct papMail* m = papHomeMail(ps, a->slot, a->gen);
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
        PAP_CHECK(papBoardRankAt(comm, a, p, &comm->arrival->owners[p], &wt));
    }
  }
  op->call.commit.pos = a->pos;
  if (!ps->msg) op->call.commit.pred = -1;
  if (algo == PAP_ALGO_CHAIN && a->pos > 0 && !ps->msg)
    PAP_CHECK(papBoardRankAt(comm, a, a->pos - 1, &op->call.commit.pred, &wt));
  /* The slot is released at completion, after the statistics are read from it
   * (papArrivalComplete): until then rank 0 keeps the board (papArrivalDrainBoard). */
  a->tPlan = papNowNs();
  PAP_TRACE(PAP_LOG_PAP, "collective #%llu: rank %d arrived at position %d; %s with %d early",
            (unsigned long long)op->call.seq, comm->rank, a->pos, papAlgoName((enum papAlgo)algo),
            nE);
  return papcclSuccess;
}

papcclResult_t papArrivalExtend(struct papComm* comm, struct papOpDesc* op, int* progressed) {
  struct papEngine* e = &comm->engine;
  struct papChain* c = op != NULL ? op->arr.chain : NULL;
  *progressed = 0;
  if (c == NULL) {
    PAP_WARN("internal error: a plan waits for an extension nobody will make");
    return papcclInternalError;
  }
  const struct papArrival* a = &op->arr;
  uint64_t v = 0;
  int succ = -1;
  if (comm->arrival->msg) {
    struct papArrivalState* ps = comm->arrival;
    pthread_mutex_lock(&ps->mailLock);
    struct papMail* m = papHomeMail(ps, a->slot, a->gen);
    if (m != NULL && m->succPos == c->pos + 1) succ = m->succRank;
    pthread_mutex_unlock(&ps->mailLock);
    if (succ < 0) {
      comm->tops->msg->progress(comm->tstate);
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
  op->arr.chain = NULL;
  PAP_CHECK(papAlgoAllReduceChainFinish(e, c, succ));
  *progressed = 1;
  return papcclSuccess;
}
