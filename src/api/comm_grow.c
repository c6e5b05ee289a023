/* SPDX-License-Identifier: Apache-2.0 */
/* Grow (NCCL 2.29's ncclCommGetUniqueId and ncclCommGrow): a larger comm of comm's ranks, in
 * their order, and new ranks after them, each new one knowing only the id. The existing
 * ranks agree on the call over comm's bootstrap (every one of them fails alike on bad
 * input); then every rank, old and new, meets at the id's root as an init does, and the old
 * ranks carry their PAP state over. docs/FAULTS.md section 5 has the semantics. */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "alloc.h"
#include "arrival.h"
#include "bootstrap.h"
#include "check.h"
#include "enqueue.h"
#include "lifecycle.h"
#include "log.h"

PAPCCL_API papcclResult_t papcclCommGetUniqueId(papcclComm_t comm, papcclUniqueId* uniqueId) {
  const char* fn = "papcclCommGetUniqueId";
  PAP_CHECK(papCommEnter(comm, fn));
  papcclResult_t res = papcclSuccess;
  if (uniqueId == NULL) {
    PAP_WARN("%s: uniqueId is NULL", fn);
    res = papcclInvalidArgument;
  } else if (atomic_load_explicit(&comm->revoked, memory_order_acquire)) {
    PAP_WARN("%s: communicator was revoked: shrink it, then grow the shrunk one", fn);
    res = papcclInvalidUsage;
  }
  if (res != papcclSuccess) goto out;
  pthread_mutex_lock(&comm->progressLock);
  if (comm->growIdPending) {
    PAP_WARN(
        "%s: this communicator's last id has not served its grow yet: grow with it first "
        "(each id serves one papcclCommGrow)",
        fn);
    res = papcclInvalidUsage;
  } else {
    res = papBootstrapGetGrowId(&comm->growId);
    if (res == papcclSuccess) {
      comm->growIdPending = 1;
      *uniqueId = comm->growId;
    }
  }
  pthread_mutex_unlock(&comm->progressLock);
out:
  papCommLeave(comm);
  return res;
}

/* What each existing rank says of the grow; the same verdict follows on every one. */
struct growInfo {
  int32_t nRanks;
  int32_t err; /* this rank's own checks: 0 or the result they gave */
  int32_t flags; /* GROW_* */
  int32_t pad;
  papcclUniqueId id; /* with GROW_HAS_ID */
};
#define GROW_HAS_ID 0x1 /* the rank passed an id */
#define GROW_OWN_ID 0x2 /* ... and it is the one this rank's papcclCommGetUniqueId made */
#define GROW_REVOKED 0x4

/* Checks of an existing rank's own arguments; the WARN names the first bad one. */
static papcclResult_t checkOldRank(struct papComm* comm, const char* fn, int rank,
                                   const papcclUniqueId* id, papcclComm_t* newcomm,
                                   const papcclConfig_t* config) {
  if (newcomm == NULL) {
    PAP_WARN("%s: newcomm is NULL", fn);
    return papcclInvalidArgument;
  }
  *newcomm = NULL;
  if (rank != -1) {
    PAP_WARN("%s: rank %d: an existing rank passes -1 (it keeps its rank, %d)", fn, rank,
             comm->rank);
    return papcclInvalidArgument;
  }
  if (config && config->magic != PAPCCL_CONFIG_MAGIC) {
    PAP_WARN("%s: config->magic %#x is wrong: use PAPCCL_CONFIG_INITIALIZER", fn, config->magic);
    return papcclInvalidArgument;
  }
  if (papGroupDepth() > 0) {
    PAP_WARN("%s: called inside a group: grow outside papcclGroupStart/End", fn);
    return papcclInvalidUsage;
  }
  if (id != NULL) {
    PAP_CHECK(papBootstrapCheckId(id));
    if (!papBootstrapIdIsGrow(id)) {
      PAP_WARN(
          "%s: the id was made by papcclGetUniqueId: a grow takes the id of "
          "papcclCommGetUniqueId",
          fn);
      return papcclInvalidArgument;
    }
  }
  return papcclSuccess;
}

/* The verdict on every existing rank's growInfo (the same on every rank); *idOut: the id. */
static papcclResult_t growVerdict(const struct papComm* comm, const char* fn,
                                  const struct growInfo* in, papcclUniqueId* idOut) {
  int n = comm->nranks, holder = -1, own = 0;
  for (int r = 0; r < n; r++) {
    if (in[r].err == 0) continue;
    if (r != comm->rank) /* rank r said why; here the others learn that it did */
      PAP_WARN("%s: rank %d refused its arguments (%s; its log says why)", fn, r,
               papResultString((papcclResult_t)in[r].err));
    return (papcclResult_t)in[r].err;
  }
  for (int r = 0; r < n; r++) {
    if (!(in[r].flags & GROW_REVOKED)) continue;
    PAP_WARN("%s: rank %d's communicator was revoked: shrink it, then grow the shrunk one", fn, r);
    return papcclInvalidUsage;
  }
  for (int r = 1; r < n; r++) {
    if (in[r].nRanks == in[0].nRanks) continue;
    PAP_WARN("%s: the ranks disagree on nRanks: rank 0 passes %d, rank %d passes %d", fn,
             in[0].nRanks, r, in[r].nRanks);
    return papcclInvalidArgument;
  }
  if (in[0].nRanks <= n || in[0].nRanks > PAP_BOOTSTRAP_MAX_RANKS) {
    PAP_WARN("%s: nRanks %d must be larger than the communicator's %d ranks (at most %d)", fn,
             in[0].nRanks, n, PAP_BOOTSTRAP_MAX_RANKS);
    return papcclInvalidArgument;
  }
  for (int r = 0; r < n; r++) {
    if (!(in[r].flags & GROW_HAS_ID)) continue;
    if (holder < 0) holder = r;
    own |= in[r].flags & GROW_OWN_ID;
    if (memcmp(&in[r].id, &in[holder].id, sizeof(in[r].id)) == 0) continue;
    PAP_WARN("%s: ranks %d and %d pass different ids (only the grow's root passes one)", fn, holder,
             r);
    return papcclInvalidArgument;
  }
  if (holder < 0) {
    PAP_WARN(
        "%s: no rank passes the grow's id (the rank that called papcclCommGetUniqueId "
        "passes it, the others NULL)",
        fn);
    return papcclInvalidArgument;
  }
  if (!own) {
    PAP_WARN(
        "%s: the id that rank %d passes is not this communicator's: papcclCommGetUniqueId "
        "did not make it on this communicator (an id from another one, or used already)",
        fn, holder);
    return papcclInvalidArgument;
  }
  *idOut = in[holder].id;
  return papcclSuccess;
}

/* An existing rank's grow: the agreement over comm's bootstrap, then the init of the child. */
static papcclResult_t growOldRank(struct papComm* comm, const char* fn, int nRanks,
                                  const papcclUniqueId* uniqueId, int rank, papcclComm_t* newcomm,
                                  papcclConfig_t* config) {
  papcclResult_t res = papcclSuccess;
  struct growInfo* in = NULL;
  struct papComm* child = NULL;
  papcclUniqueId id;
  /* A rank whose own arguments are bad still takes part, so that every rank fails at once. */
  papcclResult_t mine = checkOldRank(comm, fn, rank, uniqueId, newcomm, config);
  PAP_CHECK(papCalloc(&in, (size_t)comm->nranks));
  struct growInfo* me = &in[comm->rank];
  me->nRanks = nRanks;
  me->err = (int32_t)mine;
  if (atomic_load_explicit(&comm->revoked, memory_order_acquire)) me->flags |= GROW_REVOKED;
  papCommWaitPendingJobs(comm);
  pthread_mutex_lock(&comm->progressLock);
  if (uniqueId && mine == papcclSuccess) {
    me->flags |= GROW_HAS_ID;
    me->id = *uniqueId;
    if (comm->growIdPending && memcmp(uniqueId, &comm->growId, sizeof(id)) == 0)
      me->flags |= GROW_OWN_ID;
  }
  res = papBootstrapAllGather(comm->bs, in, sizeof(*in));
  pthread_mutex_unlock(&comm->progressLock);
  if (res == papcclSuccess) res = growVerdict(comm, fn, in, &id);
  pthread_mutex_lock(&comm->progressLock);
  if (comm->growIdPending && (res != papcclSuccess || (me->flags & GROW_OWN_ID))) {
    /* The id is used: by this grow, or the grow it was made for failed and is called off
     * (the new ranks waiting at its root fail at once). */
    if (res != papcclSuccess) papBootstrapCancelGrow(&comm->growId);
    comm->growIdPending = 0;
  }
  pthread_mutex_unlock(&comm->progressLock);
  if (res != papcclSuccess || newcomm == NULL) goto out;
  PAP_CHECK_GOTO(papCommAllocShell(comm->rank, nRanks, config, &child), res, out);
  if (config == NULL) child->blocking = comm->blocking; /* inherits the parent's, as NCCL */
  child->cudaDev = comm->cudaDev; /* before setup: the CUDA IPC arena goes on it */
  res = papCommInitRankInternal(child, &id);
  papLogSetContext(comm->rank, comm->lastError, sizeof(comm->lastError));
  if (res != papcclSuccess) {
    /* Why the rendezvous failed is the answer to this call on comm. */
    memcpy(comm->lastError, child->lastError, sizeof(comm->lastError));
    papCommTeardown(child);
    papCommFreeShell(child);
    goto out;
  }
  pthread_mutex_lock(&comm->progressLock);
  papArrivalInherit(child, comm);
  pthread_mutex_unlock(&comm->progressLock);
  *newcomm = child;
  PAP_INFO(PAP_LOG_INIT, "comm %p rank %d grew from %d to %d ranks: comm %p", (void*)comm,
           comm->rank, comm->nranks, nRanks, (void*)*newcomm);
out:
  free(in);
  return res;
}

/* A new rank's grow: an init through the grow's id (its root checks the rank). */
static papcclResult_t growNewRank(const char* fn, int nRanks, const papcclUniqueId* uniqueId,
                                  int rank, papcclComm_t* newcomm, papcclConfig_t* config) {
  if (newcomm != NULL) *newcomm = NULL;
  PAP_CHECK(papCommCheckInitArgs(fn, newcomm, nRanks, rank, uniqueId, config));
  if (!papBootstrapIdIsGrow(uniqueId)) {
    PAP_WARN(
        "%s: the id was made by papcclGetUniqueId: a new rank joins a grow with the id "
        "of papcclCommGetUniqueId",
        fn);
    return papcclInvalidArgument;
  }
  if (rank == 0) {
    PAP_WARN("%s: rank 0 of %d: a new rank comes after the existing ones (rank 0 is one)", fn,
             nRanks);
    return papcclInvalidArgument;
  }
  if (papGroupDepth() > 0) {
    PAP_WARN("%s: called inside a group: grow outside papcclGroupStart/End", fn);
    return papcclInvalidUsage;
  }
  struct papComm* comm = NULL;
  PAP_CHECK(papCommAllocShell(rank, nRanks, config, &comm));
  return papCommInitShell(comm, uniqueId, newcomm);
}

PAPCCL_API papcclResult_t papcclCommGrow(papcclComm_t comm, int nRanks,
                                         const papcclUniqueId* uniqueId, int rank,
                                         papcclComm_t* newcomm, papcclConfig_t* config) {
  const char* fn = "papcclCommGrow";
  if (comm == NULL) {
    papLogSetContext(-1, NULL, 0);
    return growNewRank(fn, nRanks, uniqueId, rank, newcomm, config);
  }
  PAP_CHECK(papCommEnter(comm, fn));
  papcclResult_t res = growOldRank(comm, fn, nRanks, uniqueId, rank, newcomm, config);
  papCommLeave(comm);
  return res;
}
