/* SPDX-License-Identifier: Apache-2.0 */
/* Split and shrink: a child comm on some ranks of its parent, its ring built through the
 * parent's bootstrap (split: a new ring from swapped addresses; shrink: the parent's
 * listeners), then the setup of comm_setup.c. */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "alloc.h"
#include "bootstrap.h"
#include "check.h"
#include "enqueue.h"
#include "lifecycle.h"
#include "log.h"
#include "param.h"

/* ---- Split and shrink ------------------------------------------------------------------- */

/* A child's key: the parent's, mixed with salt (the same on every member of the child). */
static void childKey(const struct papComm* parent, uint64_t salt, unsigned char key[16]) {
  uint64_t k0, k1;
  memcpy(&k0, parent->key, 8);
  memcpy(&k1, parent->key + 8, 8);
  k0 = mix64(k0 ^ salt);
  k1 = mix64(k1 ^ mix64(salt));
  memcpy(key, &k0, 8);
  memcpy(key + 8, &k1, 8);
}

/* The output pointer and config of split and shrink; *newcomm = NULL on the way. */
static papcclResult_t checkChildArgs(const char* fn, papcclComm_t* newcomm,
                                     const papcclConfig_t* config) {
  if (newcomm == NULL) {
    PAP_WARN("%s: newcomm is NULL", fn);
    return papcclInvalidArgument;
  }
  *newcomm = NULL;
  if (config && config->magic != PAPCCL_CONFIG_MAGIC) {
    PAP_WARN("%s: config->magic %#x is wrong: use PAPCCL_CONFIG_INITIALIZER", fn, config->magic);
    return papcclInvalidArgument;
  }
  return papcclSuccess;
}

struct splitInfo {
  int32_t color;
  int32_t key;
  int32_t rank;
  int32_t pad;
};

PAPCCL_API papcclResult_t papcclCommSplit(papcclComm_t comm, int color, int key,
                                          papcclComm_t* newcomm, papcclConfig_t* config) {
  const char* fn = "papcclCommSplit";
  PAP_CHECK(papCommEnter(comm, fn));
  papcclResult_t res = papcclSuccess;
  struct splitInfo* infos = NULL;
  struct papBootstrapAddr* addrs = NULL;
  struct papBootstrapAddr* members = NULL;
  struct papComm* child = NULL;
  int n = comm->nranks;
  PAP_CHECK_GOTO(checkChildArgs(fn, newcomm, config), res, out);
  if (color < 0 && color != PAPCCL_SPLIT_NOCOLOR) {
    PAP_WARN("%s: color %d must be >= 0 or PAPCCL_SPLIT_NOCOLOR", fn, color);
    res = papcclInvalidArgument;
    goto out;
  }
  PAP_CHECK_GOTO(papCalloc(&infos, (size_t)n), res, out);
  PAP_CHECK_GOTO(papCalloc(&addrs, (size_t)n), res, out);
  infos[comm->rank] = (struct splitInfo){color, key, comm->rank, 0};
  pthread_mutex_lock(&comm->progressLock);
  res = papBootstrapAllGather(comm->bs, infos, sizeof(*infos));
  pthread_mutex_unlock(&comm->progressLock);
  if (res != papcclSuccess) goto out;
  uint64_t splitNo = comm->splitCount++;
  int newRank = 0, newN = 0;
  if (color != PAPCCL_SPLIT_NOCOLOR) {
    for (int r = 0; r < n; r++) {
      if (infos[r].color != color) continue;
      newN++;
      if (infos[r].key < key || (infos[r].key == key && r < comm->rank)) newRank++;
    }
    PAP_CHECK_GOTO(papCommAllocShell(newRank, newN, config, &child), res, out);
    child->cudaDev = comm->cudaDev; /* before setup: the CUDA IPC arena goes on it */
    unsigned char ckey[16];
    childKey(comm, mix64(splitNo * 2 + 1) ^ mix64((uint64_t)(uint32_t)color + 0x1234567), ckey);
    PAP_CHECK_GOTO(papBootstrapCreate(newRank, newN, ckey, (const volatile int*)&child->bsAbortFlag,
                                      papParamTimeoutS(), &child->bs),
                   res, out_child);
    papBootstrapGetAddr(child->bs, &addrs[comm->rank]);
  }
  /* Every parent rank joins the address exchange, NOCOLOR ones with an empty slot. */
  pthread_mutex_lock(&comm->progressLock);
  res = papBootstrapAllGather(comm->bs, addrs, sizeof(*addrs));
  pthread_mutex_unlock(&comm->progressLock);
  if (res != papcclSuccess) goto out_child;
  if (child) {
    PAP_CHECK_GOTO(papCalloc(&members, (size_t)newN), res, out_child);
    for (int r = 0; r < n; r++) {
      if (infos[r].color != color) continue;
      int pr = 0;
      for (int q = 0; q < n; q++)
        if (infos[q].color == color &&
            (infos[q].key < infos[r].key || (infos[q].key == infos[r].key && q < r)))
          pr++;
      members[pr] = addrs[r];
    }
    res = papBootstrapConnect(child->bs, members);
    if (res == papcclSuccess) res = papCommChildSetup(comm, child);
    if (res != papcclSuccess) goto out_child;
    *newcomm = child;
  }
  goto out;
out_child:
  if (child) {
    papCommTeardown(child);
    papCommFreeShell(child);
  }
out:
  free(members);
  free(addrs);
  free(infos);
  papCommLeave(comm);
  return res;
}

/* The ranks of comm that stay: members[0..*newN) ascending; fails naming a bad entry. */
static papcclResult_t shrinkMembers(struct papComm* comm, const char* fn, const int* exclude,
                                    int nExclude, int* members, int* newN, int* newRank) {
  int n = comm->nranks;
  char* out = NULL;
  papcclResult_t res = papcclSuccess;
  if (nExclude < 0 || nExclude >= n) {
    PAP_WARN("%s: excludeRanksCount %d must be in [0, %d) (the communicator has %d ranks)", fn,
             nExclude, n, n);
    return papcclInvalidArgument;
  }
  if (nExclude > 0 && exclude == NULL) {
    PAP_WARN("%s: excludeRanksList is NULL with excludeRanksCount %d", fn, nExclude);
    return papcclInvalidArgument;
  }
  PAP_CHECK(papCalloc(&out, (size_t)n));
  for (int i = 0; i < nExclude && res == papcclSuccess; i++) {
    int r = exclude[i];
    if (r < 0 || r >= n) {
      PAP_WARN("%s: excludeRanksList[%d] = %d is not a rank of [0, %d)", fn, i, r, n);
      res = papcclInvalidArgument;
    } else if (out[r]) {
      PAP_WARN("%s: rank %d appears twice in excludeRanksList", fn, r);
      res = papcclInvalidArgument;
    } else if (r == comm->rank) {
      PAP_WARN("%s: this rank (%d) is in excludeRanksList: excluded ranks do not call it", fn, r);
      res = papcclInvalidArgument;
    } else {
      out[r] = 1;
    }
  }
  *newN = 0;
  for (int r = 0; r < n && res == papcclSuccess; r++) {
    if (out[r]) continue;
    if (r == comm->rank) *newRank = *newN;
    members[(*newN)++] = r;
  }
  free(out);
  return res;
}

PAPCCL_API papcclResult_t papcclCommShrink(papcclComm_t comm, int* excludeRanksList,
                                           int excludeRanksCount, papcclComm_t* newcomm,
                                           papcclConfig_t* config, int shrinkFlags) {
  const char* fn = "papcclCommShrink";
  PAP_CHECK(papCommEnter(comm, fn));
  papcclResult_t res = papcclSuccess;
  int* members = NULL;
  struct papComm* child = NULL;
  int newN = 0, newRank = -1;
  PAP_CHECK_GOTO(checkChildArgs(fn, newcomm, config), res, out);
  if (shrinkFlags != PAPCCL_SHRINK_DEFAULT && shrinkFlags != PAPCCL_SHRINK_ABORT) {
    PAP_WARN("%s: shrinkFlags %d must be PAPCCL_SHRINK_DEFAULT (0) or PAPCCL_SHRINK_ABORT (1)", fn,
             shrinkFlags);
    res = papcclInvalidArgument;
    goto out;
  }
  PAP_CHECK_GOTO(papCalloc(&members, (size_t)comm->nranks), res, out);
  PAP_CHECK_GOTO(
      shrinkMembers(comm, fn, excludeRanksList, excludeRanksCount, members, &newN, &newRank), res,
      out);
  if (shrinkFlags == PAPCCL_SHRINK_ABORT) {
    /* After a failure: the parent's operations stop first (they may wait for the dead). */
    papCommRevokeOps(comm);
    papCommWaitCallsDrained(comm);
  }
  papCommWaitPendingJobs(comm);
  uint64_t shrinkNo = comm->splitCount++;
  uint64_t salt = mix64(shrinkNo * 2 + 2);
  for (int i = 0; i < newN; i++)
    salt = mix64(salt ^ (uint64_t)(uint32_t)members[i]);
  PAP_CHECK_GOTO(papCommAllocShell(newRank, newN, config, &child), res, out);
  if (config == NULL) child->blocking = comm->blocking; /* inherits the parent's, as NCCL */
  child->cudaDev = comm->cudaDev;
  unsigned char ckey[16];
  childKey(comm, salt, ckey);
  pthread_mutex_lock(&comm->progressLock);
  res =
      papBootstrapShrink(comm->bs, members, newN, newRank, ckey,
                         (const volatile int*)&child->bsAbortFlag, papParamTimeoutS(), &child->bs);
  pthread_mutex_unlock(&comm->progressLock);
  if (res == papcclSuccess) res = papCommChildSetup(comm, child);
  if (res != papcclSuccess) {
    papCommTeardown(child);
    papCommFreeShell(child);
    goto out;
  }
  PAP_INFO(PAP_LOG_INIT, "comm %p rank %d shrank to comm %p rank %d of %d (%s)", (void*)comm,
           comm->rank, (void*)child, newRank, newN,
           shrinkFlags == PAPCCL_SHRINK_ABORT ? "abort" : "default");
  *newcomm = child;
out:
  free(members);
  papCommLeave(comm);
  return res;
}
