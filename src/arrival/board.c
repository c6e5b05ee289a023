/* SPDX-License-Identifier: Apache-2.0 */
/* Board slots over their life: the arrival waits, errors, release, positions, which ranks
 * arrived (diagnosis) and rank 0's drain at destroy (docs/PAP-ENGINE.md sections 1-2). */
#include <sched.h>
#include <stdio.h>
#include <string.h>

#include "arrival_int.h"
#include "futex.h"
#include "log.h"

static void describeArrivalWait(const struct papWait* w, char* buf, size_t len) {
  const struct papComm* comm = (const struct papComm*)w->ctx;
  const struct papOpDesc* op = (const struct papOpDesc*)w->ctx2;
  snprintf(buf, len, "collective #%llu on rank %d, waiting %s", (unsigned long long)op->call.cseq,
           comm->rank, w->phase);
}

/* The wait of a collective's arrival phase (core/wait.h); `phase` says for what (named in
 * buf when a WARN or the diagnosis needs it). */
void papBoardWait(const struct papComm* comm, const struct papOpDesc* op, const char* phase,
                  char* buf, size_t len, struct papWait* w) {
  papWaitInit(w, NULL, abortFlagOf(comm), 1, comm->spinNs, 1000000);
  w->ctx = comm;
  w->ctx2 = op;
  w->phase = phase;
  papWaitDescribe(w, describeArrivalWait, buf, len);
  w->yield = comm->oversubscribed;
  w->hint = ": a rank never arrived or is dead";
}

papcclResult_t papBoardArrivalError(const struct papComm* comm, const struct papOpDesc* op,
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
papcclResult_t papBoardRelease(struct papComm* comm, struct papArrival* a) {
  if (!a->used || a->released) return papcclSuccess;
  a->released = 1;
  if (comm->arrival->msg) {
    struct hmReq q = {HM_RELEASE, (uint32_t)a->slot, a->gen, comm->rank, 0, 0};
    return comm->tops->home->send(comm->tstate, &q, sizeof(q));
  }
  return comm->tops->board->atomic(comm->tstate, IDX_REL(comm->nranks, a->slot), PAP_BOARD_FADD, 1,
                                   0, NULL);
}

/* Rank at arrival position p (waits for the entry: it is written right after the CAS). */
papcclResult_t papBoardRankAt(struct papComm* comm, const struct papArrival* a, int p, int* rOut,
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
      (comm->tops->board == NULL && !comm->arrival->msg) || !comm->tops->caps.remoteBoard)
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
      uint32_t tok = comm->tops->wake->waitToken(comm->tstate);
      uint64_t rel = 0;
      if (comm->arrival->msg) { /* our own board: read it as the home serves it */
        struct hmReq q = {HM_READ, (uint32_t)s, 0, 0, 0, 0};
        size_t len = 0;
        if (comm->tops->home->call(comm->tstate, &q, sizeof(q), comm->arrival->reply,
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
      comm->tops->wake->wait(comm->tstate, tok, papWaitSlice(&wt, now, 1000000));
    }
  }
}
