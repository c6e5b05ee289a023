/* SPDX-License-Identifier: Apache-2.0 */
/* The end of a comm and of its operations: finalize (the collective flush), destroy, abort,
 * and revoke (operations stop, the comm stays for split and shrink). */
#include <stdint.h>

#include "arrival.h"
#include "bootstrap.h"
#include "check.h"
#include "enqueue.h"
#include "lifecycle.h"
#include "log.h"

/* No operation of comm runs or waits to run, but the caller's own call. */
int papCommQuiescent(struct papComm* comm) {
  return atomic_load_explicit(&comm->activeCalls, memory_order_seq_cst) <= 1 &&
         atomic_load_explicit(&comm->pendingJobs, memory_order_acquire) == 0;
}

/* Sets the abort flag of comm's operations (and of its inner comms) and wakes the waits. */
static void commStopOps(struct papComm* comm) {
  atomic_store_explicit(&comm->abortFlag, 1, memory_order_seq_cst);
  papHierAbortFlags(comm); /* a hierarchical call in flight waits in an inner comm */
  if (atomic_load_explicit(&comm->transportLive, memory_order_acquire))
    comm->tops->wake->wake(comm->tstate);
}

/* Revokes comm (papcclCommRevoke, and shrink's ABORT): new operations are refused, the ones
 * in flight stop. */
void papCommRevokeOps(struct papComm* comm) {
  atomic_store_explicit(&comm->revoked, 1, memory_order_seq_cst);
  commStopOps(comm);
}

/* Drains other threads' calls (the caller's own call is counted too). No deadline: each of
 * those calls ends within its own (the abort flag is set, or the comm is dead). */
void papCommWaitCallsDrained(struct papComm* comm) {
  struct papWait w;
  papWaitInit(&w, "destroy waiting for the comm's calls in flight", NULL, 0, 0, 200000);
  while (atomic_load_explicit(&comm->activeCalls, memory_order_seq_cst) > 1) {
    if (comm->tstate) comm->tops->wake->wake(comm->tstate);
    papWaitSleep(&w);
  }
}

/* The end of destroy and abort, called inside the caller's own counted call: mark the comm
 * dead so new calls fail, wait for calls in flight, free everything, keep the tombstone. */
static void commRelease(struct papComm* comm) {
  atomic_store_explicit((_Atomic uint64_t*)&comm->magic, PAP_COMM_DEAD, memory_order_seq_cst);
  papCommWaitCallsDrained(comm);
  papLogSetContext(-1, NULL, 0);
  papCommTeardown(comm);
  atomic_fetch_sub_explicit(&comm->activeCalls, 1, memory_order_seq_cst);
  papCommFreeShell(comm);
}

PAPCCL_API papcclResult_t papcclCommFinalize(papcclComm_t comm) {
  PAP_CHECK(papCommEnter(comm, "papcclCommFinalize"));
  papcclResult_t res = papcclSuccess;
  if (comm->finalized) goto out;
  if (atomic_load_explicit(&comm->revoked, memory_order_acquire)) {
    PAP_WARN("papcclCommFinalize: communicator was revoked; destroy it (or shrink or split it)");
    res = papcclInvalidUsage;
    goto out;
  }
  /* Wait for queued non-blocking work, then a barrier: every rank is done with the comm. */
  papCommWaitPendingJobs(comm);
  res = (papcclResult_t)atomic_load_explicit(&comm->asyncError, memory_order_acquire);
  if (res != papcclSuccess) {
    PAP_WARN("papcclCommFinalize: communicator has error %d (%s); destroy or abort it", res,
             papResultString(res));
    goto out;
  }
  res = papHierFinalize(comm);
  if (res == papcclSuccess) {
    pthread_mutex_lock(&comm->progressLock);
    res = papBootstrapBarrier(comm->bs);
    pthread_mutex_unlock(&comm->progressLock);
  }
  if (res != papcclSuccess) papCommSetError(comm, res);
  comm->finalized = 1;
out:
  papCommLeave(comm);
  return res;
}

PAPCCL_API papcclResult_t papcclCommDestroy(papcclComm_t comm) {
  if (comm == NULL) return papcclSuccess; /* as NCCL */
  PAP_CHECK(papCommEnter(comm, "papcclCommDestroy"));
  papcclResult_t res = papcclSuccess;
  papCommWaitPendingJobs(comm);
  /* Destroy is local, as NCCL's: programs that own several ranks destroy them one after the
   * other from one thread, so a barrier here would deadlock them. papcclCommFinalize is the
   * collective flush for those who want one. Nothing a peer does later can touch our memory:
   * every message to us belonged to an operation we completed. The one exception is rank
   * 0's arrival board on a network backend: peers still finishing a collective need it. */
  if (comm->arrival) papArrivalDrainBoard(comm);
  /* A healthy comm is left in good order: peers still finishing the last operation must not
   * take this process's exit for a failure (tops->live->deadPeer). */
  if (comm->tstate && !papCommAborted(comm) &&
      atomic_load_explicit(&comm->asyncError, memory_order_acquire) == papcclSuccess)
    comm->tops->live->depart(comm->tstate);
  commRelease(comm);
  return res;
}

PAPCCL_API papcclResult_t papcclCommAbort(papcclComm_t comm) {
  if (comm == NULL) return papcclSuccess; /* as NCCL */
  PAP_CHECK(papCommEnter(comm, "papcclCommAbort"));
  atomic_store_explicit(&comm->bsAbortFlag, 1, memory_order_seq_cst);
  commStopOps(comm);
  papCommSetError(comm, papcclInvalidUsage);
  commRelease(comm);
  return papcclSuccess;
}

PAPCCL_API papcclResult_t papcclCommRevoke(papcclComm_t comm, int revokeFlags) {
  const char* fn = "papcclCommRevoke";
  PAP_CHECK(papCommEnter(comm, fn));
  papcclResult_t res = papcclSuccess;
  if (revokeFlags != PAPCCL_REVOKE_DEFAULT) {
    PAP_WARN("%s: revokeFlags %d must be PAPCCL_REVOKE_DEFAULT (0)", fn, revokeFlags);
    res = papcclInvalidArgument;
    goto out;
  }
  papCommRevokeOps(comm);
  if (comm->blocking) {
    /* Every call in flight and every queued job ends at the abort flag. */
    papCommWaitCallsDrained(comm);
    papCommWaitPendingJobs(comm);
  } else if (!papCommQuiescent(comm)) {
    res = papcclInProgress;
  }
  PAP_INFO(PAP_LOG_INIT, "comm %p rank %d revoked", (void*)comm, comm->rank);
out:
  papCommLeave(comm);
  return res;
}
