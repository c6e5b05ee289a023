/* SPDX-License-Identifier: Apache-2.0 */
/* The receive from any source: which peer's message a papcclRecvAny takes (docs/ARCHITECTURE.md, section 4). */
#include <stdio.h>

#include "check.h"
#include "comm.h"
#include "enqueue.h"
#include "futex.h"
#include "log.h"
#include "wait.h"

/* The tag of the first message of peer p's next send to this rank: a send's sequence number
 * is the count of sends before it to the same peer, with bit 31 set (papEnqueue), and the
 * engine tags the n-th message of an op (seq << 32) | n; a send is one message. */
static uint64_t nextSendTag(const struct papComm* comm, int p) {
  uint64_t seq = comm->p2pRecvCount[p] | (1ull << 31);
  return seq << 32;
}

/* The first peer, from comm->p2pAnyNext on, whose next send to us has begun to arrive. */
static int scanPeers(struct papComm* comm) {
  int n = comm->nranks;
  for (int i = 0; i < n; i++) {
    int p = (comm->p2pAnyNext + i) % n;
    if (p == comm->rank || comm->conns[p] == NULL) continue;
    if (comm->tops->msg->probe(comm->conns[p], nextSendTag(comm, p))) return p;
  }
  return -1;
}

static void describeAny(const struct papWait* w, char* buf, size_t len) {
  const struct papComm* comm = (const struct papComm*)w->ctx;
  snprintf(buf, len, "receive from any source on rank %d", comm->rank);
}

/* Waits, by the rules of the one wait, until some peer's message is there. */
static papcclResult_t awaitPeer(struct papComm* comm, int* peerOut) {
  char what[64];
  struct papWait w;
  papWaitInit(&w, NULL, (const volatile int*)&comm->abortFlag, 1, comm->spinNs, 0);
  w.ctx = comm;
  papWaitDescribe(&w, describeAny, what, sizeof(what));
  w.yield = comm->oversubscribed;
  w.hint = ": no peer sent to this rank";
  papWaitProgressed(&w, papNowNs());
  for (;;) {
    PAP_CHECK(comm->tops->msg->progress(comm->tstate));
    if ((*peerOut = scanPeers(comm)) >= 0) return papcclSuccess;
    uint64_t now = papNowNs();
    if (papWaitHealthDue(&w, now)) PAP_CHECK(papCommCheckDeadPeer(comm));
    PAP_CHECK(papWaitCheck(&w, now));
    if (papWaitSpin(&w, now)) continue;
    /* Sleep on the doorbell a sender rings; the token comes before the last look. */
    uint32_t tok = comm->tops->wake->waitToken(comm->tstate);
    PAP_CHECK(comm->tops->msg->progress(comm->tstate));
    if ((*peerOut = scanPeers(comm)) >= 0) return papcclSuccess;
    comm->tops->wake->wait(comm->tstate, tok, papWaitSlice(&w, now, 100000000));
    w.spinUntil = papNowNs() + w.spinNs / 4;
  }
}

papcclResult_t papRecvAnyMatch(struct papComm* comm, const char* fn, int* peerOut) {
  *peerOut = -1;
  if (comm->tops == NULL || !comm->tops->caps.anySource) {
    PAP_WARN("%s: the %s transport cannot receive from any source; name the peer (papcclRecv)", fn,
             comm->tops != NULL ? comm->tops->name : "(none)");
    return papcclInvalidUsage;
  }
  if (comm->nranks < 2) {
    PAP_WARN("%s: a communicator of one rank has no peer to receive from", fn);
    return papcclInvalidUsage;
  }
  /* Receives queued earlier on a non-blocking comm take their messages first. */
  if (!comm->blocking) papCommWaitPendingJobs(comm);
  pthread_mutex_lock(&comm->progressLock);
  papProgressUserEnter(comm);
  papcclResult_t res = awaitPeer(comm, peerOut);
  if (res == papcclSuccess) comm->p2pAnyNext = (*peerOut + 1) % comm->nranks;
  papProgressUserLeave(comm);
  pthread_mutex_unlock(&comm->progressLock);
  return res;
}
