/* SPDX-License-Identifier: Apache-2.0 */
/* Communicator lifecycle: init (rank, config, all, grouped), split, finalize, destroy,
 * abort, queries, and the API-edge validity check. */
#include "api.h"

#include <errno.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "alloc.h"
#include "arrival.h"
#include "bootstrap.h"
#include "check.h"
#include "device.h"
#include "enqueue.h"
#include "fault.h"
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

/* ---- Setup shared by init and split ---------------------------------------------------- */

static uint64_t mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

static uint64_t hashString(const char* s, uint64_t h) {
  for (; *s; s++)
    h = mix64(h ^ (unsigned char)*s);
  return h;
}

/* Same value for every process of one machine (boot instance + hostname), whatever
 * PAPCCL_HOSTID says: ranks that share CPUs. */
static uint64_t machineId(void) {
  char host[256] = {0};
  gethostname(host, sizeof(host) - 1);
  uint64_t h = hashString(host, 7);
  FILE* f = fopen("/proc/sys/kernel/random/boot_id", "r");
  if (f) {
    char boot[64] = {0};
    if (fgets(boot, sizeof(boot), f)) h = hashString(boot, h);
    fclose(f);
  }
  return h;
}

/* The PID namespace this process lives in (its inode), or 0 where /proc does not say. */
static uint64_t pidNamespace(void) {
  struct stat st;
  return stat("/proc/self/ns/pid", &st) == 0 ? (uint64_t)st.st_ino : 0;
}

/* Same value for every process of one host: the machine, or PAPCCL_HOSTID. */
static uint64_t localHostId(void) {
  const char* force = papParamHostId();
  if (force) return hashString(force, 1);
  return machineId();
}

#define PAP_CPU_WORDS 16 /* CPUs 0..1023 */

struct peerInfo {
  uint64_t hostId;
  uint64_t machineId;
  uint64_t pidNs; /* the inode of the rank's PID namespace (0: unknown) */
  int32_t pid;
  int32_t rank;
  uint64_t cpus[PAP_CPU_WORDS]; /* the CPUs the rank may run on (its affinity) */
};

/* The CPUs this process may run on, as a bit mask (none when the affinity is unknown). */
static void affinityMask(uint64_t* words) {
  cpu_set_t set;
  memset(words, 0, sizeof(uint64_t) * PAP_CPU_WORDS);
  if (sched_getaffinity(0, sizeof(set), &set) != 0) return;
  for (int c = 0; c < CPU_SETSIZE && c < 64 * PAP_CPU_WORDS; c++)
    if (CPU_ISSET(c, &set)) words[c / 64] |= 1ull << (c % 64);
}

static papcclResult_t commSetup(struct papComm* comm) {
  papcclResult_t res = papcclSuccess;
  int n = comm->nranks;
  struct peerInfo* info = NULL;
  unsigned char* handles = NULL;
  memcpy(comm->key, papBootstrapKey(comm->bs), sizeof(comm->key));
  PAP_CHECK(papCalloc(&info, (size_t)n));
  info[comm->rank].hostId = localHostId();
  info[comm->rank].machineId = machineId();
  info[comm->rank].pidNs = pidNamespace();
  info[comm->rank].pid = (int32_t)getpid();
  info[comm->rank].rank = comm->rank;
  affinityMask(info[comm->rank].cpus);
  PAP_CHECK_GOTO(papBootstrapAllGather(comm->bs, info, sizeof(*info)), res, out);
  PAP_CHECK_GOTO(papCalloc(&comm->hostIds, (size_t)n), res, out);
  PAP_CHECK_GOTO(papCalloc(&comm->pids, (size_t)n), res, out);
  PAP_CHECK_GOTO(papCalloc(&comm->conns, (size_t)n), res, out);
  PAP_CHECK_GOTO(papCalloc(&comm->p2pSendCount, (size_t)n), res, out);
  PAP_CHECK_GOTO(papCalloc(&comm->p2pRecvCount, (size_t)n), res, out);
  for (int r = 0; r < n; r++) {
    comm->hostIds[r] = info[r].hostId;
    /* A pid means something here only inside our own PID namespace (a rank in another
     * container of this host has its own numbers, which could name an unrelated process
     * here): 0 then, and the transports check that peer no way that needs a pid. */
    int samePidNs =
        info[r].pidNs == info[comm->rank].pidNs || info[r].machineId != info[comm->rank].machineId;
    comm->pids[r] = samePidNs ? info[r].pid : 0;
  }
  {
    /* Ranks on this machine (not host id: "hosts" made with PAPCCL_HOSTID or network
     * namespaces may share the CPUs) against the CPUs they may run on together: the union
     * of their affinities (a launcher that binds each rank to its own CPU leaves each one
     * CPU, and they still do not share). */
    int nlocal = 0, ncpu = 0;
    uint64_t all[PAP_CPU_WORDS] = {0};
    for (int r = 0; r < n; r++) {
      if (info[r].machineId != info[comm->rank].machineId) continue;
      nlocal++;
      for (int w = 0; w < PAP_CPU_WORDS; w++)
        all[w] |= info[r].cpus[w];
    }
    for (int w = 0; w < PAP_CPU_WORDS; w++)
      ncpu += __builtin_popcountll(all[w]);
    if (ncpu <= 0) ncpu = (int)sysconf(_SC_NPROCESSORS_ONLN);
    comm->oversubscribed = ncpu > 0 && nlocal > ncpu;
    comm->spinNs = (uint64_t)papParamSpinUs() * 1000ull;
    if (comm->oversubscribed)
      PAP_INFO(PAP_LOG_INIT,
               "%d ranks on this machine's %d CPUs: waits yield the core while they poll; "
               "transports do not poll",
               nlocal, ncpu);
  }
  struct papTransportCtx ctx = {
      .rank = comm->rank,
      .nranks = n,
      .key = comm->key,
      .hostIds = comm->hostIds,
      .pids = comm->pids,
      .abortFlag = (const volatile int*)&comm->abortFlag,
      /* A transport's polls drive its device without yielding: none when the CPUs are
       * shared. */
      .spinNs = comm->oversubscribed ? 0 : papParamSpinUs() * 1000,
      .boardWords = papBoardWords(comm->nranks),
      .flatBytes = papFlatAreaBytes(comm->nranks),
  };
  /* One backend serves every peer: shm within a host, UCX when the ranks span hosts. */
  comm->tops = papTransportSelect(&ctx);
  if (comm->tops == NULL) {
    res = papcclInvalidUsage;
    goto out;
  }
  res = comm->tops->init(&ctx, &comm->tstate);
  if (res != papcclSuccess) {
    /* A backend that cannot start here (ib without an RDMA device) hands over to the
     * next one that reaches every peer. Every rank must end up on the same backend: the
     * handle exchange below fails cleanly if they do not. */
    const struct papTransportOps* next = papTransportFallback(&ctx, comm->tops);
    if (next == NULL) goto out;
    PAP_WARN("transport %s could not start; falling back to %s", comm->tops->name, next->name);
    comm->tops = next;
    PAP_CHECK_GOTO(comm->tops->init(&ctx, &comm->tstate), res, out);
  }
  {
    /* Agree on the backend before swapping its handles. */
    char(*names)[16] = NULL;
    PAP_CHECK_GOTO(papCalloc(&names, (size_t)n), res, out);
    snprintf(names[comm->rank], sizeof(names[0]), "%s", comm->tops->name);
    res = papBootstrapAllGather(comm->bs, names, sizeof(names[0]));
    for (int r = 0; r < n && res == papcclSuccess; r++) {
      if (strncmp(names[r], comm->tops->name, sizeof(names[0])) == 0) continue;
      PAP_WARN(
          "rank %d uses transport %.15s, this rank %s: every rank needs the same one "
          "(set PAPCCL_TRANSPORT alike everywhere)",
          r, names[r], comm->tops->name);
      res = papcclInvalidUsage;
    }
    free(names);
    if (res != papcclSuccess) goto out;
  }
  const size_t hb = comm->tops->handleBytes ? comm->tops->handleBytes : PAP_TRANSPORT_HANDLE_BYTES;
  PAP_CHECK_GOTO(papCalloc(&handles, (size_t)n * hb), res, out);
  PAP_CHECK_GOTO(comm->tops->listen(comm->tstate, handles + (size_t)comm->rank * hb), res, out);
  PAP_CHECK_GOTO(papBootstrapAllGather(comm->bs, handles, hb), res, out);
  for (int p = 0; p < n; p++) {
    if (p == comm->rank) continue;
    char what[64];
    snprintf(what, sizeof(what), "rank %d connecting to peer %d", comm->rank, p);
    struct papWait w;
    papWaitInit(&w, what, (const volatile int*)&comm->abortFlag, 1, ctx.spinNs, 100000);
    while (comm->conns[p] == NULL) {
      PAP_CHECK_GOTO(
          comm->tops->connect(comm->tstate, p, handles + (size_t)p * hb, &comm->conns[p]), res,
          out);
      if (comm->conns[p] == NULL) {
        uint64_t now = papNowNs();
        PAP_CHECK_GOTO(papWaitCheck(&w, now), res, out);
        if (!papWaitSpin(&w, now)) papWaitSleep(&w);
      }
    }
  }
  PAP_CHECK_GOTO(papBootstrapBarrier(comm->bs), res, out);
  PAP_CHECK_GOTO(comm->tops->ready(comm->tstate), res, out);
  /* Every rank's transport is ready (ucx: its endpoints wired up) before any rank goes on. */
  PAP_CHECK_GOTO(papBootstrapBarrier(comm->bs), res, out);
  PAP_CHECK_GOTO(papEngineInit(&comm->engine, comm->rank, n, comm->tops, comm->tstate, comm->conns,
                               (const volatile int*)&comm->abortFlag),
                 res, out);
  PAP_CHECK_GOTO(papArrivalInit(comm), res, out);
  PAP_CHECK_GOTO(papIpcCommInit(comm), res, out);
  PAP_INFO(PAP_LOG_INIT, "comm %p rank %d nranks %d ready (transport %s)", (void*)comm, comm->rank,
           n, comm->tops->name);
out:
  free(handles);
  free(info);
  return res;
}

/* Frees everything but the shell. Safe on a partly set up comm. */
static void commTeardown(struct papComm* comm) {
  papHierFree(comm, papCommAborted(comm));
  papProgressStop(comm);
  papDeviceCommFree(comm);
  papIpcCommFree(comm);
  if (comm->engine.steps || comm->engine.lastSend) papEngineFree(&comm->engine);
  papArrivalFree(comm);
  if (comm->tstate) comm->tops->finalize(comm->tstate);
  comm->tstate = NULL;
  papBootstrapDestroy(comm->bs);
  comm->bs = NULL;
  free(comm->conns);
  free(comm->pids);
  free(comm->hostIds);
  free(comm->p2pSendCount);
  free(comm->p2pRecvCount);
  comm->conns = NULL;
  comm->pids = NULL;
  comm->hostIds = NULL;
  comm->p2pSendCount = comm->p2pRecvCount = NULL;
}

papcclResult_t papCommInitRankInternal(struct papComm* comm, const papcclUniqueId* id) {
  papLogSetContext(comm->rank, comm->lastError, sizeof(comm->lastError));
  papcclResult_t res =
      papBootstrapInit(id, comm->rank, comm->nranks, (const volatile int*)&comm->bsAbortFlag,
                       papParamTimeoutS(), &comm->bs);
  if (res == papcclSuccess) res = commSetup(comm);
  if (res == papcclSuccess) {
    atomic_store_explicit(&comm->transportLive, 1, memory_order_release);
    if (papCommIdleDriven(comm)) comm->tops->wake(comm->tstate); /* start serving it */
    res = papHierSetup(comm);
  }
  if (res == papcclSuccess) {
    atomic_store_explicit(&comm->asyncError, papcclSuccess, memory_order_release);
  } else {
    atomic_store_explicit(&comm->asyncError, res, memory_order_release);
  }
  return res;
}

/* ---- Public lifecycle ------------------------------------------------------------------ */

/* The progress thread's run of a non-blocking init (its result is the comm's state). */
static papcclResult_t initJobRun(struct papComm* comm, struct papJob* job) {
  return papCommInitRankInternal(comm, &job->id);
}

static papcclResult_t checkInitArgs(const char* fn, papcclComm_t* comm, int nranks, int rank,
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
  PAP_CHECK(checkInitArgs(fn, newcomm, nranks, rank, &commId, config));
  papFaultCheckBuild();
  struct papComm* comm = NULL;
  PAP_CHECK(papCommAllocShell(rank, nranks, config, &comm));
  if (papGroupDepth() > 0) {
    papcclResult_t res = papGroupAddInit(comm, &commId);
    if (res != papcclSuccess) {
      commTeardown(comm);
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
      commTeardown(comm);
      papCommFreeShell(comm);
      return res;
    }
    job->kind = PAP_JOB_INIT;
    job->run = initJobRun;
    job->id = commId;
    *newcomm = comm;
    return papProgressSubmit(comm, job);
  }
  papcclResult_t res = papCommInitRankInternal(comm, &commId);
  if (res != papcclSuccess) {
    papLogSetContext(-1, NULL, 0);
    commTeardown(comm);
    papCommFreeShell(comm);
    return res;
  }
  papLogSetContext(-1, NULL, 0);
  *newcomm = comm;
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

/* No operation of comm runs or waits to run, but the caller's own call. */
static int commQuiescent(struct papComm* comm) {
  return atomic_load_explicit(&comm->activeCalls, memory_order_seq_cst) <= 1 &&
         atomic_load_explicit(&comm->pendingJobs, memory_order_acquire) == 0;
}

/* Sets the abort flag of comm's operations (and of its inner comms) and wakes the waits. */
static void commStopOps(struct papComm* comm) {
  atomic_store_explicit(&comm->abortFlag, 1, memory_order_seq_cst);
  papHierAbortFlags(comm); /* a hierarchical call in flight waits in an inner comm */
  if (atomic_load_explicit(&comm->transportLive, memory_order_acquire))
    comm->tops->wake(comm->tstate);
}

/* Revokes comm (papcclCommRevoke, and shrink's ABORT): new operations are refused, the ones
 * in flight stop. */
static void commRevoke(struct papComm* comm) {
  atomic_store_explicit(&comm->revoked, 1, memory_order_seq_cst);
  commStopOps(comm);
}

/* Drains other threads' calls (the caller's own call is counted too). No deadline: each of
 * those calls ends within its own (the abort flag is set, or the comm is dead). */
static void waitCallsDrained(struct papComm* comm) {
  struct papWait w;
  papWaitInit(&w, "destroy waiting for the comm's calls in flight", NULL, 0, 0, 200000);
  while (atomic_load_explicit(&comm->activeCalls, memory_order_seq_cst) > 1) {
    if (comm->tstate) comm->tops->wake(comm->tstate);
    papWaitSleep(&w);
  }
}

/* The end of destroy and abort, called inside the caller's own counted call: mark the comm
 * dead so new calls fail, wait for calls in flight, free everything, keep the tombstone. */
static void commRelease(struct papComm* comm) {
  atomic_store_explicit((_Atomic uint64_t*)&comm->magic, PAP_COMM_DEAD, memory_order_seq_cst);
  waitCallsDrained(comm);
  papLogSetContext(-1, NULL, 0);
  commTeardown(comm);
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
   * take this process's exit for a failure (tops->deadPeer). */
  if (comm->tstate && comm->tops->depart && !papCommAborted(comm) &&
      atomic_load_explicit(&comm->asyncError, memory_order_acquire) == papcclSuccess)
    comm->tops->depart(comm->tstate);
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

PAPCCL_API papcclResult_t papcclCommGetAsyncError(papcclComm_t comm, papcclResult_t* asyncError) {
  PAP_CHECK(papCommEnter(comm, "papcclCommGetAsyncError"));
  papcclResult_t res = papcclSuccess;
  if (asyncError == NULL) {
    PAP_WARN("papcclCommGetAsyncError: asyncError is NULL");
    res = papcclInvalidArgument;
  } else {
    int e = atomic_load_explicit(&comm->asyncError, memory_order_acquire);
    if (e == papcclSuccess) e = papHierAsyncError(comm);
    /* A revoked comm: in progress until its operations have stopped, then fine for the
     * management calls (as NCCL's). */
    if (atomic_load_explicit(&comm->revoked, memory_order_acquire))
      e = commQuiescent(comm) ? papcclSuccess : papcclInProgress;
    /* Device ops queued in stream order are enqueued, not "in progress" (as NCCL's). */
    if (e == papcclSuccess && !comm->blocking &&
        atomic_load_explicit(&comm->pendingHostJobs, memory_order_acquire) > 0)
      e = papcclInProgress;
    *asyncError = (papcclResult_t)e;
  }
  papCommLeave(comm);
  return res;
}

static papcclResult_t queryInt(papcclComm_t comm, int* out, const char* fn, int which) {
  PAP_CHECK(papCommEnter(comm, fn));
  papcclResult_t res = papcclSuccess;
  if (out == NULL) {
    PAP_WARN("%s: output pointer is NULL", fn);
    res = papcclInvalidArgument;
  } else {
    *out = which == 0 ? comm->nranks : which == 1 ? comm->cudaDev : comm->rank;
  }
  papCommLeave(comm);
  return res;
}

PAPCCL_API papcclResult_t papcclCommCount(const papcclComm_t comm, int* count) {
  return queryInt(comm, count, "papcclCommCount", 0);
}
PAPCCL_API papcclResult_t papcclCommCuDevice(const papcclComm_t comm, int* device) {
  return queryInt(comm, device, "papcclCommCuDevice", 1);
}
PAPCCL_API papcclResult_t papcclCommUserRank(const papcclComm_t comm, int* rank) {
  return queryInt(comm, rank, "papcclCommUserRank", 2);
}

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

/* A child comm whose bootstrap is connected: the rest of its setup (split and shrink). */
static papcclResult_t childSetup(struct papComm* parent, struct papComm* child) {
  papLogSetContext(child->rank, child->lastError, sizeof(child->lastError));
  papcclResult_t res = commSetup(child);
  if (res == papcclSuccess) {
    atomic_store_explicit(&child->transportLive, 1, memory_order_release);
    if (papCommIdleDriven(child)) child->tops->wake(child->tstate);
    res = papHierSetup(child);
  }
  papLogSetContext(parent->rank, parent->lastError, sizeof(parent->lastError));
  return res;
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
    if (res == papcclSuccess) res = childSetup(comm, child);
    if (res != papcclSuccess) goto out_child;
    *newcomm = child;
  }
  goto out;
out_child:
  if (child) {
    commTeardown(child);
    papCommFreeShell(child);
  }
out:
  free(members);
  free(addrs);
  free(infos);
  papCommLeave(comm);
  return res;
}

/* ---- Revoke and shrink ---------------------------------------------------------------- */

PAPCCL_API papcclResult_t papcclCommRevoke(papcclComm_t comm, int revokeFlags) {
  const char* fn = "papcclCommRevoke";
  PAP_CHECK(papCommEnter(comm, fn));
  papcclResult_t res = papcclSuccess;
  if (revokeFlags != PAPCCL_REVOKE_DEFAULT) {
    PAP_WARN("%s: revokeFlags %d must be PAPCCL_REVOKE_DEFAULT (0)", fn, revokeFlags);
    res = papcclInvalidArgument;
    goto out;
  }
  commRevoke(comm);
  if (comm->blocking) {
    /* Every call in flight and every queued job ends at the abort flag. */
    waitCallsDrained(comm);
    papCommWaitPendingJobs(comm);
  } else if (!commQuiescent(comm)) {
    res = papcclInProgress;
  }
  PAP_INFO(PAP_LOG_INIT, "comm %p rank %d revoked", (void*)comm, comm->rank);
out:
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
    commRevoke(comm);
    waitCallsDrained(comm);
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
  if (res == papcclSuccess) res = childSetup(comm, child);
  if (res != papcclSuccess) {
    commTeardown(child);
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
