/* SPDX-License-Identifier: Apache-2.0 */
#include "internal/shim_mismatch.h"

#include <stdlib.h>
#include <string.h>

#include "arrival_int.h"
#include "comm.h"
#include "op.h"
#include "transport.h"

#define MAX_RANKS 8

struct papTestMism {
  int n;
  uint64_t* board; /* papBoardWords(n) words: the board every made-up rank shares */
  int pushes; /* HP_MISMATCH notices the home pushed */
  struct papTransportOps tops; /* board, wake and home sub-tables: the calls the check makes */
  struct papBoardOps boardOps;
  struct papWakeOps wakeOps;
  struct papHomeOps homeOps;
  struct papComm comm[MAX_RANKS];
  struct papOpDesc op[MAX_RANKS]; /* each rank's last call */
};

static papcclResult_t boardAtomic(void* state, size_t idx, int op, uint64_t val, uint64_t cmp,
                                  uint64_t* oldOut) {
  struct papTestMism* m = (struct papTestMism*)state;
  uint64_t* w = &m->board[idx];
  uint64_t old = *w;
  switch (op) {
  case PAP_BOARD_LOAD:
    break;
  case PAP_BOARD_STORE:
  case PAP_BOARD_STORE_RELEASE:
    *w = val;
    break;
  case PAP_BOARD_FADD:
    *w += val;
    break;
  case PAP_BOARD_CAS:
    if (old == cmp) *w = val;
    break;
  default:
    return papcclInternalError;
  }
  if (oldOut) *oldOut = old;
  return papcclSuccess;
}

static void notify(void* state, int peer) {
  (void)state;
  (void)peer;
}

static void homePush(void* state, int peer, const void* msg, size_t len) {
  struct papTestMism* m = (struct papTestMism*)state;
  (void)peer;
  if (len >= sizeof(struct hmPush) && ((const struct hmPush*)msg)->kind == HP_MISMATCH) m->pushes++;
}

void papTestMismFree(struct papTestMism* m) {
  if (m == NULL) return;
  for (int r = 0; r < m->n; r++) {
    struct papArrivalState* ps = m->comm[r].arrival;
    if (ps == NULL) continue;
    free(ps->slotBuf);
    free(ps->calls);
    free(ps);
  }
  free(m->board);
  free(m);
}

struct papTestMism* papTestMismNew(int nranks, int check) {
  if (nranks < 2 || nranks > MAX_RANKS) return NULL;
  struct papTestMism* m = (struct papTestMism*)calloc(1, sizeof(*m));
  if (m == NULL) return NULL;
  m->n = nranks;
  m->board = (uint64_t*)calloc(papBoardWords(nranks), sizeof(uint64_t));
  m->tops.name = "made-up board";
  m->boardOps.atomic = boardAtomic;
  m->wakeOps.notify = notify;
  m->homeOps.push = homePush;
  m->tops.board = &m->boardOps;
  m->tops.wake = &m->wakeOps;
  m->tops.home = &m->homeOps;
  int bad = m->board == NULL;
  for (int r = 0; r < nranks && !bad; r++) {
    struct papComm* c = &m->comm[r];
    struct papArrivalState* ps = (struct papArrivalState*)calloc(1, sizeof(*ps));
    c->arrival = ps;
    c->rank = r;
    c->nranks = nranks;
    c->tops = &m->tops;
    c->tstate = m;
    bad = ps == NULL;
    if (bad) break;
    ps->nranks = nranks;
    ps->checkMismatch = check;
    ps->slotBuf = (uint64_t*)calloc(SLOT_WORDS(nranks), sizeof(uint64_t));
    if (r == 0) ps->calls = (struct papCallRec*)calloc(PAP_CALL_RING, sizeof(struct papCallRec));
    bad = ps->slotBuf == NULL || (r == 0 && ps->calls == NULL);
  }
  if (bad) {
    papTestMismFree(m);
    return NULL;
  }
  return m;
}

static void describe(struct papOpDesc* op, uint64_t cseq, const struct papTestMismCall* call) {
  static const enum papRedKind reds[] = {[papcclSum] = PAP_RED_SUM,
                                         [papcclProd] = PAP_RED_PROD,
                                         [papcclMax] = PAP_RED_MAX,
                                         [papcclMin] = PAP_RED_MIN};
  memset(op, 0, sizeof(*op));
  op->call.coll = strcmp(call->coll, "allgather") == 0 ? PAP_COLL_ALLGATHER
                  : strcmp(call->coll, "reduce") == 0  ? PAP_COLL_REDUCE
                                                       : PAP_COLL_ALLREDUCE;
  op->call.count = call->count;
  op->call.dtype = call->dtype;
  op->call.red = call->op <= papcclMin ? reds[call->op] : PAP_RED_SUM;
  op->call.root = call->root;
  op->call.cseq = cseq;
  op->arr.slot = (int)(cseq % PAP_BOARD_SLOTS);
  op->arr.gen = genOf(cseq);
}

papcclResult_t papTestMismArrive(struct papTestMism* m, uint64_t cseq, int rank,
                                 const struct papTestMismCall* call) {
  struct papComm* comm = &m->comm[rank];
  struct papOpDesc* op = &m->op[rank];
  describe(op, cseq, call);
  op->comm = comm;
  int n = m->n, s = op->arr.slot;
  uint32_t gen = op->arr.gen;
  /* The arrival's CAS on the slot's word, as papArrive makes it: a new generation, or one
   * more arrival of this one. */
  uint64_t* word = &m->board[IDX_WORD(n, s)];
  int pos = PAP_W_GEN(*word) == gen ? (int)PAP_W_COUNT(*word) : 0;
  *word = makeWord(gen, 0, 0, 0, 0, (uint32_t)pos + 1);
  op->arr.pos = pos;
  uint64_t sig = papArrivalSignature(&op->call);
  int logged = 0;
  papcclResult_t res = pos == 0 ? papMismatchPutFirst(comm, op, sig)
                                : papMismatchCheckArrival(comm, op, sig, WHY_CALL, &logged);
  m->board[IDX_RANKAT(n, s, pos)] = (uint64_t)gen << 32 | (uint32_t)(rank + 1);
  return res;
}

papcclResult_t papTestMismComplete(struct papTestMism* m, uint64_t cseq, int rank) {
  struct papOpDesc* op = &m->op[rank];
  if (op->call.cseq != cseq) return papcclInternalError;
  return papMismatchVerify(&m->comm[rank], op, 0, 0);
}

int papTestMismAtHome(struct papTestMism* m, uint64_t cseq, int from,
                      const struct papTestMismCall* call) {
  struct papOpDesc op;
  describe(&op, cseq, call);
  int before = m->pushes;
  papMismatchAtHome(&m->comm[0], from, cseq + 1, papArrivalSignature(&op.call), call->root);
  return m->pushes - before;
}
