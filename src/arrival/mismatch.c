/* SPDX-License-Identifier: Apache-2.0 */
/* The mismatch check (PAPCCL_CHECK_MISMATCH, docs/PAP-ENGINE.md section 11): marks on a
 * shared board, the batch in flight and the checks left pending, a message board's notices,
 * acknowledgements and call batches, and the home's comparison of calls.
 *
 * One module, reached two ways: the batch interface (batch.c: the flight, the pending checks
 * at papArrivalBegin, the notice and mismatch polls of papArrivalPoll, which the layer's own
 * waits in arrive.c, commit.c and flat.c also go through) and the protocol's hooks where a
 * call meets the board (papMismatchPutFirst, papMismatchCheckArrival, papMismatchQueueCall
 * in papArrive; papMismatchAtHome in the home's serve; papMismatchVerify at completion).
 * With PAPCCL_CHECK_MISMATCH=0 (ps->checkMismatch) every entry point passes every call; the
 * tests drive them alone on a made-up board (tests/internal/shim_mismatch.c). */
#include <string.h>

#include "arrival_int.h"
#include "futex.h"
#include "log.h"

/* The board's words are this rank's to use (not a message board's). */
static int sharedBoard(const struct papComm* comm) {
  return comm->tops->board != NULL && !comm->arrival->msg && comm->nranks <= 0xffff;
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
    if (p != comm->rank) comm->tops->wake->notify(comm->tstate, p);
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
papcclResult_t papMismatchPutFirst(struct papComm* comm, const struct papOpDesc* op, uint64_t sig) {
  int n = comm->nranks, s = op->arr.slot;
  if (!comm->arrival->checkMismatch) return papcclSuccess;
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

/* A rank that arrived after the first (or was refused as grouped differently, why =
 * WHY_GROUPED): compares its call with the first arriver's; a difference is marked for every
 * rank to see, logged, and fails the op (papcclInvalidUsage). *loggedOut: a WARN was made. */
papcclResult_t papMismatchCheckArrival(struct papComm* comm, const struct papOpDesc* op,
                                       uint64_t sig, int why, int* loggedOut) {
  const struct papArrival* a = &op->arr;
  int n = comm->nranks, first = -1;
  uint64_t v = 0;
  *loggedOut = 0;
  if (!comm->arrival->checkMismatch) return why == WHY_CALL ? papcclSuccess : papcclInvalidUsage;
  PAP_CHECK(bLoad(comm, IDX_RANKAT(n, a->slot, 0), &v));
  first = entryRank(v, a->gen, n);
  if (first < 0) { /* the first arriver is between its CAS and its entry */
    struct papWait w;
    char what[160];
    papBoardWait(comm, op, "for the first arrival's entry", what, sizeof(what), &w);
    PAP_CHECK(papBoardRankAt(comm, a, 0, &first, &w));
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
papcclResult_t papMismatchVerify(struct papComm* comm, const struct papOpDesc* op, int readable,
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
  uint32_t tok = comm->tops->wake->waitToken(comm->tstate);
  if (comm->tops->msg->progress(comm->tstate) != papcclSuccess) return 0;
  comm->tops->wake->wait(comm->tstate, tok, 1000000);
  return 1;
}

/* The home fails on its notice: once every live rank has read it (or the bound passed), so
 * that closing its endpoints next cannot overtake the notice on its way (seen over UCX/TCP:
 * a rank found the home unreachable and never received the notice, also after draining its
 * transport). */
static void homeAwaitAcks(struct papComm* comm) {
  struct papArrivalState* ps = comm->arrival;
  if (ps->acked == NULL) return;
  if (comm->tops->home) comm->tops->home->flush(comm->tstate);
  uint64_t t0 = papNowNs();
  for (;;) {
    int missing = 0;
    for (int r = 1; r < comm->nranks && !missing; r++)
      missing = !atomic_load_explicit(&ps->acked[r], memory_order_acquire) &&
                comm->tops->live->peerAlive(comm->tstate, r);
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
    (void)comm->tops->home->send(comm->tstate, &q, sizeof(q));
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
      comm->tops->live->peerAlive(comm->tstate, 0)) {
    (void)papArrivalFlushCalls(comm);
    uint64_t seq = ++ps->syncSent;
    struct hmReq q = {HM_SYNC, 0, 0, comm->rank, seq, 0, 0, 0, 0};
    uint64_t t0 = papNowNs();
    if (comm->tops->home->send(comm->tstate, &q, sizeof(q)) == papcclSuccess) {
      while (atomic_load_explicit(&ps->syncSeen, memory_order_acquire) < seq &&
             !atomic_load_explicit(&ps->noticeAny, memory_order_acquire) &&
             comm->tops->live->peerAlive(comm->tstate, 0) && papNowNs() - t0 < PAP_NOTICE_SYNC_NS &&
             pumpTransport(comm)) {
      }
    }
  }
  if (comm->rank != 0 && !comm->tops->live->peerAlive(comm->tstate, 0)) {
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

/* The mismatch check at the home (section 11): rank `from` made call q of collective q->c - 1.
 * The first call of a collective is kept; a later one that differs is pushed to every rank
 * (rank 0 included) with the first, once per collective. A call of a collective older than
 * the one its record holds now (a rank PAP_CALL_RING collectives behind another) is not
 * compared. */
void papMismatchAtHome(struct papComm* comm, int from, uint64_t c, uint64_t sig, int32_t root) {
  struct papArrivalState* ps = comm->arrival;
  if (c == 0 || ps->calls == NULL || !ps->checkMismatch) return;
  struct papCallRec* e = &ps->calls[(c - 1) % PAP_CALL_RING];
  if (e->c < c) {
    *e = (struct papCallRec){c, sig, root, from, 0};
    return;
  }
  if (e->c != c || e->marked || (e->sig == sig && e->root == root)) return;
  e->marked = 1;
  uint64_t data[4] = {e->sig, (uint64_t)(uint32_t)e->root, sig, (uint64_t)(uint32_t)root};
  for (int p = 0; p < comm->nranks; p++)
    papHomePush(comm, p, HP_MISMATCH, 0, 0, e->rank, from, c - 1, data, 4);
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
  return comm->tops->home->send(comm->tstate, buf, len);
}

papcclResult_t papMismatchQueueCall(struct papComm* comm, const struct papOpDesc* op) {
  struct papArrivalState* ps = comm->arrival;
  if (!ps->checkMismatch) return papcclSuccess;
  uint64_t* v = &ps->callBuf[3 * ps->callN++];
  v[0] = op->call.cseq + 1;
  v[1] = papArrivalSignature(&op->call);
  v[2] = (uint64_t)(uint32_t)op->call.root;
  /* Rank 0 compares its own in place. */
  if (comm->rank == 0 || ps->callN == PAP_CALL_BATCH) return papArrivalFlushCalls(comm);
  return papcclSuccess;
}
