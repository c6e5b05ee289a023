/* SPDX-License-Identifier: Apache-2.0 */
#include "internal/shim_select.h"

#include <stdlib.h>

#include "arrival_int.h"
#include "comm.h"
#include "op.h"

struct papTestSel {
  struct papComm comm;
  struct papOpDesc op;
};

struct papTestSel* papTestSelNew(int nranks) {
  struct papTestSel* s = (struct papTestSel*)calloc(1, sizeof(*s));
  if (s == NULL) return NULL;
  s->comm.nranks = nranks;
  s->comm.rank = 1; /* not rank 0: no INFO lines from the test */
  s->comm.arrival = (struct papArrivalState*)calloc(1, sizeof(struct papArrivalState));
  if (s->comm.arrival == NULL) {
    free(s);
    return NULL;
  }
  s->comm.arrival->nranks = nranks;
  s->op.comm = &s->comm;
  s->op.call.coll = PAP_COLL_ALLREDUCE;
  s->op.call.dtype = papcclFloat32;
  return s;
}

static const struct papOpDesc* opOf(struct papTestSel* s, size_t bytes) {
  s->op.call.count = bytes / 4;
  return &s->op;
}

int papTestSelObserve(struct papTestSel* s, size_t bytes, double skewUs, double tailUs, int pap) {
  const struct papOpDesc* op = opOf(s, bytes);
  papSelectObserve(&s->comm, op, skewUs * 1e3, 0, tailUs * 1e3, pap);
  return papTestSelChoice(s, bytes, NULL) >= PAP_ALGO_AC2S;
}

int papTestSelChoice(struct papTestSel* s, size_t bytes, int* wait) {
  struct papSelChoice c = papSelect(&s->comm, opOf(s, bytes));
  if (wait) *wait = c.wait;
  return c.algo;
}

int papTestSelBoardCall(struct papTestSel* s, size_t bytes, int pap) {
  struct papOpDesc* op = (struct papOpDesc*)opOf(s, bytes);
  s->comm.arrival->msg = 1;
  op->path.commit = 2; /* an automatic choice on a message board: the probe decides */
  if (!papArrivalNeedsCommit(&s->comm, op)) return 0;
  papSelectAgree(&s->comm, op, pap ? PAP_ALGO_AC2S : PAP_ALGO_RING, 0);
  return 1;
}

void papTestSelFree(struct papTestSel* s) {
  if (s == NULL) return;
  free(s->comm.arrival);
  free(s);
}
