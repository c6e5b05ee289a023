/* SPDX-License-Identifier: Apache-2.0 */
/* The communicator's shell: allocation, the API-edge validity check (papCommEnter), the
 * tombstones of destroyed comms, and the list of live comms with its state dump. Init is in
 * comm_init.c, the setup shared with split in comm_setup.c, split and shrink in comm_split.c,
 * finalize, destroy, abort and revoke in comm_destroy.c, queries in comm_query.c. */
#include "api.h"

#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "alloc.h"
#include "check.h"
#include "device.h"
#include "enqueue.h"
#include "futex.h"
#include "log.h"
#include "param.h"

/* ---- Tombstones: destroyed comm shells stay readable (magic DEAD) for a while ----------- */

/* The PAP_TOMB_MAX most recent tombstones are kept; an older one is freed when its ring slot
 * is reused (one still entered by a call moves to the list below, freed at exit). Keeping
 * every one until exit grew a process that creates and destroys communicators by 2 KiB per
 * comm without bound. */
#define PAP_TOMB_MAX 256
static pthread_mutex_t tombLock = PTHREAD_MUTEX_INITIALIZER;
static struct papComm* tombRing[PAP_TOMB_MAX];
static unsigned tombSlot;
static struct papComm* tombHead;

/* ---- Live comms and the state dump (PAPCCL_DUMP_SIGNAL) ------------------------------ */

static pthread_mutex_t liveLock = PTHREAD_MUTEX_INITIALIZER;
static struct papComm* liveHead;
static _Atomic uint32_t dumpBell; /* bumped by the signal handler; the dump thread sleeps on it */
static int dumpStarted; /* under liveLock */

void papCommStateText(struct papComm* comm, char* buf, size_t len) {
  pthread_mutex_lock(&comm->diagLock);
  if (comm->diagActive == 1)
    snprintf(buf, len, "rank %d of %d (comm %p): %s", comm->rank, comm->nranks, (void*)comm,
             comm->diagText);
  else if (comm->diagActive == 2)
    snprintf(
        buf, len, "rank %d of %d (comm %p): no operation waits; the last one failed (%s) in %s",
        comm->rank, comm->nranks, (void*)comm, papResultString(comm->diagResult), comm->diagText);
  else
    snprintf(buf, len,
             "rank %d of %d (comm %p): no operation waits (one shows here once it has waited "
             "100 ms)",
             comm->rank, comm->nranks, (void*)comm);
  pthread_mutex_unlock(&comm->diagLock);
}

static void dumpHandler(int sig) {
  (void)sig;
  int saved = errno;
  atomic_fetch_add_explicit(&dumpBell, 1, memory_order_seq_cst);
  papFutexWakeAll((uint32_t*)&dumpBell); /* a raw futex syscall: async-signal-safe */
  errno = saved;
}

static void* dumpMain(void* arg) {
  int sig = (int)(intptr_t)arg;
  uint32_t seen = atomic_load_explicit(&dumpBell, memory_order_acquire);
  char text[1024];
  for (;;) {
    papFutexWait((uint32_t*)&dumpBell, seen, 0);
    uint32_t now = atomic_load_explicit(&dumpBell, memory_order_acquire);
    if (now == seen) continue;
    seen = now;
    pthread_mutex_lock(&liveLock);
    int count = 0;
    for (struct papComm* c = liveHead; c; c = c->liveNext)
      count++;
    PAP_WARN("state dump on signal %d: %d communicator(s) in this process", sig, count);
    for (struct papComm* c = liveHead; c; c = c->liveNext) {
      papCommStateText(c, text, sizeof(text));
      PAP_WARN("state dump: %s", text);
    }
    pthread_mutex_unlock(&liveLock);
  }
  return NULL;
}

/* Once per process, when PAPCCL_DUMP_SIGNAL names a signal: its handler and the thread that
 * logs the dump (a handler may only wake it). Under liveLock. */
static void dumpStart(void) {
  int sig = (int)papParamDumpSignal();
  if (dumpStarted || sig <= 0) return;
  dumpStarted = 1;
  pthread_t th;
  int err = pthread_create(&th, NULL, dumpMain, (void*)(intptr_t)sig);
  if (err != 0) {
    PAP_WARN("PAPCCL_DUMP_SIGNAL=%d: cannot start the dump thread: %s", sig, strerror(err));
    return;
  }
  pthread_detach(th);
  struct sigaction sa;
  memset(&sa, 0, sizeof(sa));
  sa.sa_handler = dumpHandler;
  sa.sa_flags = SA_RESTART;
  sigemptyset(&sa.sa_mask);
  if (sigaction(sig, &sa, NULL) != 0)
    PAP_WARN("PAPCCL_DUMP_SIGNAL=%d: cannot install the handler: %s", sig, strerror(errno));
  else
    PAP_INFO(PAP_LOG_INIT, "signal %d dumps what every communicator waits for", sig);
}

static void liveAdd(struct papComm* c) {
  pthread_mutex_lock(&liveLock);
  dumpStart();
  c->livePrev = NULL;
  c->liveNext = liveHead;
  if (liveHead) liveHead->livePrev = c;
  liveHead = c;
  pthread_mutex_unlock(&liveLock);
}

static void liveRemove(struct papComm* c) {
  pthread_mutex_lock(&liveLock);
  if (c->livePrev)
    c->livePrev->liveNext = c->liveNext;
  else if (liveHead == c)
    liveHead = c->liveNext;
  if (c->liveNext) c->liveNext->livePrev = c->livePrev;
  c->liveNext = c->livePrev = NULL;
  pthread_mutex_unlock(&liveLock);
}

static void freeShell(struct papComm* c) {
  pthread_mutex_destroy(&c->diagLock);
  pthread_mutex_destroy(&c->progressLock);
  pthread_mutex_destroy(&c->userOpLock);
  pthread_mutex_destroy(&c->jobLock);
  free(c);
}

__attribute__((destructor)) static void freeTombstones(void) {
  pthread_mutex_lock(&tombLock);
  while (tombHead) {
    struct papComm* c = tombHead;
    tombHead = c->tombNext;
    freeShell(c);
  }
  for (int i = 0; i < PAP_TOMB_MAX; i++) {
    if (tombRing[i]) freeShell(tombRing[i]);
    tombRing[i] = NULL;
  }
  pthread_mutex_unlock(&tombLock);
}

void papCommFreeShell(struct papComm* comm) {
  liveRemove(comm);
  atomic_store_explicit((_Atomic uint64_t*)&comm->magic, PAP_COMM_DEAD, memory_order_seq_cst);
  pthread_mutex_lock(&tombLock);
  struct papComm* old = tombRing[tombSlot];
  tombRing[tombSlot] = comm;
  tombSlot = (tombSlot + 1) % PAP_TOMB_MAX;
  if (old && atomic_load_explicit(&old->activeCalls, memory_order_seq_cst) != 0) {
    old->tombNext = tombHead;
    tombHead = old;
    old = NULL;
  }
  pthread_mutex_unlock(&tombLock);
  if (old) freeShell(old);
}

papcclResult_t papCommAllocShell(int rank, int nranks, const papcclConfig_t* config,
                                 struct papComm** commOut) {
  struct papComm* comm = NULL;
  PAP_CHECK(papCalloc(&comm, 1));
  comm->rank = rank;
  comm->nranks = nranks;
  comm->cudaDev = papDeviceCurrent(); /* -1 without GPU support */
  comm->blocking = 1;
  if (config && config->size >= offsetof(papcclConfig_t, blocking) + sizeof(int) &&
      config->blocking != PAPCCL_CONFIG_UNDEF_INT)
    comm->blocking = config->blocking != 0;
  pthread_mutex_init(&comm->progressLock, NULL);
  pthread_mutex_init(&comm->userOpLock, NULL);
  pthread_mutex_init(&comm->jobLock, NULL);
  pthread_mutex_init(&comm->devLock, NULL);
  pthread_mutex_init(&comm->diagLock, NULL);
  comm->magic = PAP_COMM_MAGIC;
  comm->magicTail = PAP_COMM_MAGIC;
  liveAdd(comm);
  papcclResult_t res = papProgressStart(comm);
  if (res != papcclSuccess) {
    papCommFreeShell(comm);
    return res;
  }
  *commOut = comm;
  return papcclSuccess;
}

papcclResult_t papCommEnter(struct papComm* comm, const char* fn) {
  if (comm == NULL) {
    papLogSetContext(-1, NULL, 0);
    PAP_WARN("%s: comm is NULL", fn);
    return papcclInvalidArgument;
  }
  /* Count the call before checking magic; destroy marks the comm dead, then waits for the
   * count to drain (seq_cst on both sides), so a live comm cannot be torn down under us. */
  atomic_fetch_add_explicit(&comm->activeCalls, 1, memory_order_seq_cst);
  uint64_t m = atomic_load_explicit((_Atomic uint64_t*)&comm->magic, memory_order_seq_cst);
  if (m != PAP_COMM_MAGIC || comm->magicTail != PAP_COMM_MAGIC) {
    atomic_fetch_sub_explicit(&comm->activeCalls, 1, memory_order_seq_cst);
    papLogSetContext(-1, NULL, 0);
    if (m == PAP_COMM_DEAD)
      PAP_WARN("%s: communicator was destroyed or aborted", fn);
    else
      PAP_WARN("%s: comm %p is not a papccl communicator", fn, (void*)comm);
    return papcclInvalidUsage;
  }
  papLogSetContext(comm->rank, comm->lastError, sizeof(comm->lastError));
  return papcclSuccess;
}

void papCommLeave(struct papComm* comm) {
  papLogSetContext(-1, NULL, 0);
  atomic_fetch_sub_explicit(&comm->activeCalls, 1, memory_order_seq_cst);
}
