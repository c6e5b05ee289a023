/* SPDX-License-Identifier: Apache-2.0 */
/* The per-communicator progress thread: runs queued jobs (non-blocking init and
 * operations); sleeps on a futex when idle, so an idle comm costs no CPU. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "comm.h"
#include "enqueue.h"
#include "futex.h"
#include "log.h"
#include "wait.h"

static void runJob(struct papComm* comm, struct papJob* job) {
  /* An init job records its result itself (the comm is not usable before it ends). */
  papcclResult_t res = job->run ? job->run(comm, job) : papRunOps(job->ops, job->nops);
  if (res != papcclSuccess && job->kind != PAP_JOB_INIT) papCommSetError(comm, res);
  papLogSetContext(comm->rank, comm->lastError, sizeof(comm->lastError));
  free(job->ops);
  free(job);
}

/* Over a backend that is served only while driven (papCommIdleDriven: UCX, where rank 0
 * keeps the message board and sends may wait for the socket), this thread drives it whenever
 * no operation does. Its sleeps while idle:
 *   BACKEND  in the backend's wait, as its poller; an operation that starts wakes it;
 *   BELL     on the bell while operations drive; the last one to end rings it.
 * An operation wakes or rings the thread only in the sleep that needs it: doing both on every
 * call (an eventfd write and a futex wake) doubles a small allreduce's time (docs/PAP-ENGINE.md
 * section 13). The thread publishes its sleep, then looks at `driving`; an operation
 * changes `driving`, then looks at the sleep (both sequentially consistent): one of the two
 * sees the other. */
static void idleDrive(struct papComm* comm, uint32_t tok) {
  if (atomic_load_explicit(&comm->driving, memory_order_seq_cst) != 0) {
    atomic_store_explicit(&comm->threadPark, PAP_PARK_BELL, memory_order_seq_cst);
    if (atomic_load_explicit(&comm->driving, memory_order_seq_cst) != 0)
      papFutexWait((uint32_t*)&comm->threadBell, tok, 1000000000ll);
  } else {
    atomic_store_explicit(&comm->threadPark, PAP_PARK_BACKEND, memory_order_seq_cst);
    if (atomic_load_explicit(&comm->driving, memory_order_seq_cst) == 0) {
      uint32_t ttok = comm->tops->wake->waitToken(comm->tstate);
      if (atomic_load_explicit(&comm->threadBell, memory_order_acquire) == tok)
        comm->tops->wake->wait(comm->tstate, ttok, 100000000ll);
    }
  }
  atomic_store_explicit(&comm->threadPark, PAP_PARK_NONE, memory_order_seq_cst);
}

static void* progressMain(void* arg) {
  struct papComm* comm = (struct papComm*)arg;
  char name[16];
  snprintf(name, sizeof(name), "papccl-prog-%d", comm->rank);
  pthread_setname_np(pthread_self(), name);
  papLogSetContext(comm->rank, comm->lastError, sizeof(comm->lastError));
  for (;;) {
    uint32_t tok = atomic_load_explicit(&comm->threadBell, memory_order_acquire);
    pthread_mutex_lock(&comm->jobLock);
    struct papJob* job = comm->jobHead;
    if (job) {
      comm->jobHead = job->next;
      if (comm->jobHead == NULL) comm->jobTail = NULL;
    }
    int stop = comm->threadStop;
    pthread_mutex_unlock(&comm->jobLock);
    if (job) {
      int device = job->kind == PAP_JOB_DEVICE;
      runJob(comm, job);
      /* Release partner: the acquire loads of pendingJobs in GetAsyncError/Destroy. */
      atomic_fetch_sub_explicit(&comm->pendingJobs, 1, memory_order_release);
      if (!device) atomic_fetch_sub_explicit(&comm->pendingHostJobs, 1, memory_order_release);
      continue;
    }
    if (stop) break;
    if (atomic_load_explicit(&comm->transportLive, memory_order_acquire) &&
        papCommIdleDriven(comm)) {
      idleDrive(comm, tok); /* job submissions wake every sleep (papProgressSubmit) */
      continue;
    }
    papFutexWait((uint32_t*)&comm->threadBell, tok, 1000000000ll);
  }
  return NULL;
}

/* `driving` only matters where the progress thread drives an idle backend (papCommIdleDriven). */
void papProgressUserEnter(struct papComm* comm) {
  if (comm->tops != NULL && !papCommIdleDriven(comm)) return;
  atomic_fetch_add_explicit(&comm->driving, 1, memory_order_seq_cst);
  /* The progress thread may sleep in the backend as its poller: send it out. */
  if (atomic_load_explicit(&comm->transportLive, memory_order_acquire) && papCommIdleDriven(comm) &&
      atomic_load_explicit(&comm->threadPark, memory_order_seq_cst) == PAP_PARK_BACKEND)
    comm->tops->wake->wake(comm->tstate);
}

void papProgressUserLeave(struct papComm* comm) {
  if (comm->tops != NULL && !papCommIdleDriven(comm)) return;
  if (atomic_fetch_sub_explicit(&comm->driving, 1, memory_order_seq_cst) != 1) return;
  if (!atomic_load_explicit(&comm->transportLive, memory_order_acquire) || !papCommIdleDriven(comm))
    return;
  if (atomic_load_explicit(&comm->threadPark, memory_order_seq_cst) != PAP_PARK_BELL) return;
  atomic_fetch_add_explicit(&comm->threadBell, 1, memory_order_release);
  papFutexWakeAll((uint32_t*)&comm->threadBell);
}

papcclResult_t papProgressStart(struct papComm* comm) {
  int err = pthread_create(&comm->thread, NULL, progressMain, comm);
  if (err != 0) {
    PAP_WARN("cannot start the progress thread: %s", strerror(err));
    return papcclSystemError;
  }
  comm->threadStarted = 1;
  return papcclSuccess;
}

papcclResult_t papProgressSubmit(struct papComm* comm, struct papJob* job) {
  int device = job->kind == PAP_JOB_DEVICE;
  pthread_mutex_lock(&comm->jobLock);
  if (comm->threadStop) {
    /* The comm is being torn down: the job will never run. A device job still releases
     * its stream. */
    pthread_mutex_unlock(&comm->jobLock);
    if (job->drop) job->drop(comm, job);
    free(job->ops);
    free(job);
    PAP_WARN("operation submitted while the communicator is being destroyed or aborted");
    return papcclInvalidUsage;
  }
  if (!device) atomic_fetch_add_explicit(&comm->pendingHostJobs, 1, memory_order_acq_rel);
  atomic_fetch_add_explicit(&comm->pendingJobs, 1, memory_order_acq_rel);
  job->next = NULL;
  if (comm->jobTail)
    comm->jobTail->next = job;
  else
    comm->jobHead = job;
  comm->jobTail = job;
  pthread_mutex_unlock(&comm->jobLock);
  atomic_fetch_add_explicit(&comm->threadBell, 1, memory_order_release);
  papFutexWakeAll((uint32_t*)&comm->threadBell);
  if (atomic_load_explicit(&comm->transportLive, memory_order_acquire) && papCommIdleDriven(comm))
    comm->tops->wake->wake(comm->tstate);
  return papcclInProgress;
}

void papProgressStop(struct papComm* comm) {
  if (!comm->threadStarted) return;
  pthread_mutex_lock(&comm->jobLock);
  comm->threadStop = 1;
  pthread_mutex_unlock(&comm->jobLock);
  atomic_fetch_add_explicit(&comm->threadBell, 1, memory_order_release);
  papFutexWakeAll((uint32_t*)&comm->threadBell);
  if (atomic_load_explicit(&comm->transportLive, memory_order_acquire) && papCommIdleDriven(comm))
    comm->tops->wake->wake(comm->tstate);
  pthread_join(comm->thread, NULL);
  comm->threadStarted = 0;
  /* Jobs never run (abort): drop them. */
  while (comm->jobHead) {
    struct papJob* j = comm->jobHead;
    comm->jobHead = j->next;
    int device = j->kind == PAP_JOB_DEVICE;
    if (j->drop) j->drop(comm, j); /* a device job releases its stream */
    free(j->ops);
    free(j);
    atomic_fetch_sub_explicit(&comm->pendingJobs, 1, memory_order_release);
    if (!device) atomic_fetch_sub_explicit(&comm->pendingHostJobs, 1, memory_order_release);
  }
  comm->jobTail = NULL;
}

void papCommWaitPendingJobs(struct papComm* comm) {
  /* No deadline: every job ends within its own, or at the abort. */
  struct papWait w;
  papWaitInit(&w, "waiting for the progress thread's jobs", NULL, 0, 0, 100000);
  while (atomic_load_explicit(&comm->pendingJobs, memory_order_acquire) > 0)
    papWaitSleep(&w);
}
