/* SPDX-License-Identifier: Apache-2.0 */
/* The memory the CUDA layer holds for a comm, by what papcclCommSuspend does with it, and the
 * release of a suspended comm's pinned staging (src/api/comm_suspend.c). */
#include <stdlib.h>

#include "device.h"
#include "log.h"

#ifndef PAPCCL_HAVE_CUDA

void papDeviceHeldBytes(struct papComm* comm, size_t* suspendOut, size_t* persistOut) {
  (void)comm;
  *suspendOut = 0;
  *persistOut = 0;
}
papcclResult_t papDeviceRelease(struct papComm* comm) {
  (void)comm;
  return papcclSuccess;
}

#else /* PAPCCL_HAVE_CUDA */

#include "device_int.h"

void papDeviceHeldBytes(struct papComm* comm, size_t* suspendOut, size_t* persistOut) {
  size_t sus = 0, per = 0;
  pthread_mutex_lock(&comm->devLock);
  const struct papDevState* st = comm->dev;
  if (st != NULL) {
    sus = st->pinnedBytes;
    per = DEV_WORDS * sizeof(uint64_t);
  }
  pthread_mutex_unlock(&comm->devLock);
  *suspendOut = sus;
  *persistOut = per + papIpcHeldBytes(comm);
}

papcclResult_t papDeviceRelease(struct papComm* comm) {
  papcclResult_t res = papcclSuccess;
  pthread_mutex_lock(&comm->devLock);
  struct papDevState* st = comm->dev;
  if (st == NULL || st->stages == NULL) {
    pthread_mutex_unlock(&comm->devLock);
    return papcclSuccess;
  }
  struct papDevSaved sv = papDeviceEnter(comm);
  int kept = 0;
  struct papDevStage** pp = &st->stages;
  while (*pp != NULL) {
    struct papDevStage* s = *pp;
    /* A poisoned block cannot tell when its stream is done with it; a busy one is a job's. */
    if (s->poisoned || atomic_load_explicit(&s->busy, memory_order_acquire)) {
      kept++;
      pp = &s->next;
      continue;
    }
    cudaError_t err = cudaEventSynchronize(s->done); /* its copies back are done */
    if (err == cudaSuccess) err = cudaFreeHost(s->ptr);
    if (err != cudaSuccess) {
      res = papDeviceCudaFail("giving a staging block back (papcclCommSuspend)", err);
      break;
    }
    cudaEventDestroy(s->done);
    st->pinnedBytes -= s->bytes;
    *pp = s->next;
    free(s);
  }
  papDeviceLeave(sv);
  pthread_mutex_unlock(&comm->devLock);
  if (kept > 0)
    PAP_INFO(PAP_LOG_ALLOC, "rank %d: %d staging block(s) in use stay while suspended", comm->rank,
             kept);
  return res;
}

#endif /* PAPCCL_HAVE_CUDA */
