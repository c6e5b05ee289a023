/* SPDX-License-Identifier: Apache-2.0 */
/* The arrival layer's state: init and free (docs/PAP-ENGINE.md). The layer's modules are
 * listed in arrival_int.h. */
#include <stdio.h>
#include <stdlib.h>

#include "alloc.h"
#include "arrival_int.h"
#include "log.h"
#include "param.h"

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
  ps->msg = comm->tops->home != NULL && n <= 0xffff &&
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
  /* Over a message board the calls are compared at rank 0, after the data may have left:
   * the call in the tags (the engine's tag salt, set per collective from op->arr.callTag)
   * keeps mismatched messages apart until the verdict comes, and sends to a peer gone (it
   * may have failed on the verdict) wait for the health check to say why. */
  comm->engine.holdDeadSends = ps->msg && ps->checkMismatch;
  if (ps->msg) PAP_CHECK(papHomeAttach(comm));
  return papFlatAttach(comm);
}

void papArrivalFree(struct papComm* comm) {
  struct papArrivalState* ps = comm->arrival;
  if (ps == NULL) return;
  if (ps->msg && comm->tstate) comm->tops->home->attach(comm->tstate, NULL, NULL, NULL);
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
