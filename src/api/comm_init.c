/* SPDX-License-Identifier: Apache-2.0 */
/* Public init: one rank (blocking, non-blocking or grouped) and every rank of a process
 * (papcclCommInitAll). */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "alloc.h"
#include "bootstrap.h"
#include "check.h"
#include "device.h"
#include "enqueue.h"
#include "fault.h"
#include "lifecycle.h"
#include "log.h"

/* The progress thread's run of a non-blocking init (its result is the comm's state). */
static papcclResult_t initJobRun(struct papComm* comm, struct papJob* job) {
  return papCommInitRankInternal(comm, &job->id);
}

papcclResult_t papCommCheckInitArgs(const char* fn, papcclComm_t* comm, int nranks, int rank,
                                    const papcclUniqueId* id, const papcclConfig_t* config) {
  papLogSetContext(-1, NULL, 0);
  if (comm == NULL) {
    PAP_WARN("%s: comm (output pointer) is NULL", fn);
    return papcclInvalidArgument;
  }
  if (nranks < 1) {
    PAP_WARN("%s: nranks %d must be at least 1", fn, nranks);
    return papcclInvalidArgument;
  }
  if (rank < 0 || rank >= nranks) {
    PAP_WARN("%s: rank %d is out of range [0, %d)", fn, rank, nranks);
    return papcclInvalidArgument;
  }
  if (config) {
    if (config->magic != PAPCCL_CONFIG_MAGIC) {
      PAP_WARN(
          "%s: config->magic %#x is wrong: initialize the config with "
          "PAPCCL_CONFIG_INITIALIZER",
          fn, config->magic);
      return papcclInvalidArgument;
    }
    if (config->size < offsetof(papcclConfig_t, blocking) + sizeof(int)) {
      PAP_WARN("%s: config->size %zu is too small", fn, config->size);
      return papcclInvalidArgument;
    }
    if (config->blocking != PAPCCL_CONFIG_UNDEF_INT && config->blocking != 0 &&
        config->blocking != 1) {
      PAP_WARN("%s: config->blocking %d must be 0 or 1", fn, config->blocking);
      return papcclInvalidArgument;
    }
  }
  PAP_CHECK(papBootstrapCheckId(id));
  return papcclSuccess;
}

PAPCCL_API papcclResult_t papcclCommInitRankConfig(papcclComm_t* newcomm, int nranks,
                                                   papcclUniqueId commId, int rank,
                                                   papcclConfig_t* config) {
  const char* fn = "papcclCommInitRank";
  PAP_CHECK(papCommCheckInitArgs(fn, newcomm, nranks, rank, &commId, config));
  papFaultCheckBuild();
  struct papComm* comm = NULL;
  PAP_CHECK(papCommAllocShell(rank, nranks, config, &comm));
  if (papGroupDepth() > 0) {
    papcclResult_t res = papGroupAddInit(comm, &commId);
    if (res != papcclSuccess) {
      papCommTeardown(comm);
      papCommFreeShell(comm);
      return res;
    }
    *newcomm = comm;
    return papcclSuccess;
  }
  if (!comm->blocking) {
    struct papJob* job = NULL;
    papcclResult_t res = papCalloc(&job, 1);
    if (res != papcclSuccess) {
      papCommTeardown(comm);
      papCommFreeShell(comm);
      return res;
    }
    job->kind = PAP_JOB_INIT;
    job->run = initJobRun;
    job->id = commId;
    *newcomm = comm;
    return papProgressSubmit(comm, job);
  }
  return papCommInitShell(comm, &commId, newcomm);
}

papcclResult_t papCommInitShell(struct papComm* comm, const papcclUniqueId* id,
                                struct papComm** commOut) {
  papcclResult_t res = papCommInitRankInternal(comm, id);
  papLogSetContext(-1, NULL, 0);
  if (res != papcclSuccess) {
    papCommTeardown(comm);
    papCommFreeShell(comm);
    return res;
  }
  *commOut = comm;
  return papcclSuccess;
}

PAPCCL_API papcclResult_t papcclCommInitRank(papcclComm_t* comm, int nranks, papcclUniqueId commId,
                                             int rank) {
  return papcclCommInitRankConfig(comm, nranks, commId, rank, NULL);
}

struct initAllArg {
  papcclComm_t* comm;
  int nranks;
  int rank;
  papcclUniqueId id;
  papcclResult_t res;
  int dev;
};

static void* initAllThread(void* p) {
  struct initAllArg* a = (struct initAllArg*)p;
  papDeviceUse(a->dev); /* rank i's comm is made on its device, as NCCL's */
  a->res = papcclCommInitRank(a->comm, a->nranks, a->id, a->rank);
  return NULL;
}

PAPCCL_API papcclResult_t papcclCommInitAll(papcclComm_t* comms, int ndev, const int* devlist) {
  papLogSetContext(-1, NULL, 0);
  if (comms == NULL) {
    PAP_WARN("papcclCommInitAll: comms is NULL");
    return papcclInvalidArgument;
  }
  if (ndev < 1) {
    PAP_WARN("papcclCommInitAll: ndev %d must be at least 1", ndev);
    return papcclInvalidArgument;
  }
  if (devlist) {
    for (int i = 0; i < ndev; i++) {
      if (devlist[i] < 0) {
        PAP_WARN("papcclCommInitAll: devlist[%d] = %d is not a device", i, devlist[i]);
        return papcclInvalidArgument;
      }
    }
  }
  papcclUniqueId id;
  PAP_CHECK(papcclGetUniqueId(&id));
  struct initAllArg* args = NULL;
  pthread_t* th = NULL;
  papcclResult_t res = papcclSuccess;
  PAP_CHECK(papCalloc(&args, (size_t)ndev));
  PAP_CHECK_GOTO(papCalloc(&th, (size_t)ndev), res, out_args);
  int started = 0;
  for (int i = 0; i < ndev; i++) {
    comms[i] = NULL;
    args[i] = (struct initAllArg){&comms[i], ndev, i, id, papcclSuccess, devlist ? devlist[i] : i};
    int err = pthread_create(&th[i], NULL, initAllThread, &args[i]);
    if (err != 0) {
      PAP_WARN("papcclCommInitAll: pthread_create failed: %s", strerror(err));
      res = papcclSystemError;
      break;
    }
    started++;
  }
  for (int i = 0; i < started; i++)
    pthread_join(th[i], NULL);
  for (int i = 0; i < started && res == papcclSuccess; i++)
    if (args[i].res != papcclSuccess) res = args[i].res;
  if (res != papcclSuccess) {
    for (int i = 0; i < ndev; i++) {
      if (comms[i]) papcclCommAbort(comms[i]);
      comms[i] = NULL;
    }
  } else {
    for (int i = 0; i < ndev; i++)
      comms[i]->cudaDev = devlist ? devlist[i] : i;
  }
  free(th);
out_args:
  free(args);
  return res;
}
