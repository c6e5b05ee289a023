/* SPDX-License-Identifier: Apache-2.0 */
/* Suspension of a communicator (papcclCommSuspend, papcclCommResume) and its memory
 * statistics (papcclCommMemStats): which of a comm's large buffers a rank gives back alone
 * and makes again, and the bytes it holds now, read from the allocations themselves
 * (docs/ARCHITECTURE.md, "Suspending a communicator"). */
#include <stdint.h>

#include "api.h"
#include "check.h"
#include "device.h"
#include "enqueue.h"
#include "log.h"

papcclResult_t papCommCheckSuspended(struct papComm* comm, const char* fn) {
  if (!atomic_load_explicit(&comm->suspended, memory_order_acquire)) return papcclSuccess;
  PAP_WARN("%s: communicator is suspended (papcclCommSuspend): papcclCommResume it first", fn);
  return papcclInvalidUsage;
}

struct memHeld {
  uint64_t suspend; /* released by a suspension */
  uint64_t persist; /* kept by it */
};

/* The bytes comm and its inner comms (the host hierarchy) hold now. */
static void heldBytes(struct papComm* comm, struct memHeld* h) {
  pthread_mutex_lock(&comm->progressLock); /* the engine's owner may be growing it */
  h->suspend += papEngineHeldBytes(&comm->engine);
  pthread_mutex_unlock(&comm->progressLock);
  if (atomic_load_explicit(&comm->transportLive, memory_order_acquire))
    h->persist += ((const struct papTransportBase*)comm->tstate)->heldBytes;
  size_t ds = 0, dp = 0;
  papDeviceHeldBytes(comm, &ds, &dp);
  h->suspend += ds;
  h->persist += dp;
  if (comm->hierLocal) heldBytes(comm->hierLocal, h);
  if (comm->hierCross) heldBytes(comm->hierCross, h);
}

/* Gives back what comm and its inner comms can make again alone (after their queued work). */
static papcclResult_t releaseComm(struct papComm* comm) {
  papCommWaitPendingJobs(comm);
  pthread_mutex_lock(&comm->progressLock);
  papEngineRelease(&comm->engine);
  pthread_mutex_unlock(&comm->progressLock);
  PAP_CHECK(papDeviceRelease(comm));
  if (comm->hierLocal) PAP_CHECK(releaseComm(comm->hierLocal));
  if (comm->hierCross) PAP_CHECK(releaseComm(comm->hierCross));
  return papcclSuccess;
}

/* The eager part of a resumption: the plan step arrays (scratch and staging come back when
 * an operation asks for them, as they grow on demand anyway). */
static papcclResult_t restoreComm(struct papComm* comm) {
  pthread_mutex_lock(&comm->progressLock);
  papcclResult_t res = papEngineRestore(&comm->engine);
  pthread_mutex_unlock(&comm->progressLock);
  PAP_CHECK(res);
  if (comm->hierLocal) PAP_CHECK(restoreComm(comm->hierLocal));
  if (comm->hierCross) PAP_CHECK(restoreComm(comm->hierCross));
  return papcclSuccess;
}

/* Whether comm may be suspended or resumed now; says why not. */
static papcclResult_t suspendCheck(struct papComm* comm, const char* fn) {
  if (papGroupDepth() > 0) {
    PAP_WARN("%s: not inside a group (call it between groups)", fn);
    return papcclInvalidUsage;
  }
  if (comm->tstate == NULL) {
    PAP_WARN(
        "%s: communicator is still initializing (non-blocking init): poll "
        "papcclCommGetAsyncError until it returns papcclSuccess",
        fn);
    return papcclInvalidUsage;
  }
  if (comm->finalized || atomic_load_explicit(&comm->revoked, memory_order_acquire)) {
    PAP_WARN("%s: communicator was %s: destroy it", fn, comm->finalized ? "finalized" : "revoked");
    return papcclInvalidUsage;
  }
  return papcclSuccess;
}

PAPCCL_API papcclResult_t papcclCommSuspend(papcclComm_t comm, int flags) {
  const char* fn = "papcclCommSuspend";
  PAP_CHECK(papCommEnter(comm, fn));
  papcclResult_t res = papcclSuccess;
  if ((flags & ~PAPCCL_SUSPEND_MEM) != 0) {
    PAP_WARN("%s: unknown flags 0x%x (PAPCCL_SUSPEND_MEM, 0x%x, is the only one)", fn,
             (unsigned)flags, PAPCCL_SUSPEND_MEM);
    res = papcclInvalidArgument;
  } else if (flags == 0) {
    /* Nothing asked to be suspended: the comm stays as it is (NCCL does the same). */
  } else if ((res = suspendCheck(comm, fn)) == papcclSuccess) {
    int expected = 0;
    if (!atomic_compare_exchange_strong(&comm->suspended, &expected, 1)) {
      PAP_WARN("%s: communicator is suspended already (papcclCommResume ends it)", fn);
      res = papcclInvalidUsage;
    } else {
      res = releaseComm(comm); /* on a failure it stays suspended; resume makes all again */
      PAP_INFO(PAP_LOG_INIT, "comm %p rank %d suspended", (void*)comm, comm->rank);
    }
  }
  papCommLeave(comm);
  return res;
}

PAPCCL_API papcclResult_t papcclCommResume(papcclComm_t comm) {
  const char* fn = "papcclCommResume";
  PAP_CHECK(papCommEnter(comm, fn));
  papcclResult_t res = suspendCheck(comm, fn);
  if (res == papcclSuccess && !atomic_load_explicit(&comm->suspended, memory_order_acquire)) {
    PAP_WARN("%s: communicator is not suspended", fn);
    res = papcclInvalidUsage;
  }
  if (res == papcclSuccess) res = restoreComm(comm); /* on a failure it stays suspended */
  if (res == papcclSuccess) {
    atomic_store_explicit(&comm->suspended, 0, memory_order_release);
    PAP_INFO(PAP_LOG_INIT, "comm %p rank %d resumed", (void*)comm, comm->rank);
  }
  papCommLeave(comm);
  return res;
}

PAPCCL_API papcclResult_t papcclCommMemStats(papcclComm_t comm, papcclCommMemStat_t stat,
                                             uint64_t* value) {
  const char* fn = "papcclCommMemStats";
  PAP_CHECK(papCommEnter(comm, fn));
  papcclResult_t res = papcclSuccess;
  struct memHeld h = {0, 0};
  if (value == NULL) {
    PAP_WARN("%s: value is NULL", fn);
    res = papcclInvalidArgument;
  } else if ((unsigned)stat > (unsigned)papcclStatMemTotal) {
    PAP_WARN("%s: unknown stat %d (papcclStatMemSuspend, Suspended, Persist or Total: 0 to 3)", fn,
             (int)stat);
    res = papcclInvalidArgument;
  } else if (stat == papcclStatMemSuspended) {
    *value = atomic_load_explicit(&comm->suspended, memory_order_acquire) ? 1 : 0;
  } else {
    heldBytes(comm, &h);
    *value = stat == papcclStatMemSuspend   ? h.suspend
             : stat == papcclStatMemPersist ? h.persist
                                            : h.suspend + h.persist;
  }
  papCommLeave(comm);
  return res;
}
