/* SPDX-License-Identifier: Apache-2.0 */
/* Setup shared by init, split and shrink: what the ranks tell each other (host, pid, CPUs),
 * the transport they agree on and its connections, the engine and the arrival board; and
 * the teardown of all of it. */
#include <sched.h>
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
#include "futex.h"
#include "lifecycle.h"
#include "log.h"
#include "onesided.h"
#include "param.h"

static uint64_t hashString(const char* s, uint64_t h) {
  for (; *s; s++)
    h = mix64(h ^ (unsigned char)*s);
  return h;
}

/* Same value for every process of one running kernel (its boot id), whatever the host name
 * or PAPCCL_HOSTID say: ranks that share CPUs and whose PID namespaces can be compared.
 * Containers and UTS namespaces on one machine have their own host names but one kernel
 * (with the host name in it, such ranks spun as if each had a core). The host name only
 * where the boot id cannot be read. */
static uint64_t machineId(void) {
  FILE* f = fopen("/proc/sys/kernel/random/boot_id", "r");
  if (f) {
    char boot[64] = {0};
    int got = fgets(boot, sizeof(boot), f) != NULL;
    fclose(f);
    if (got) return hashString(boot, 7);
  }
  char host[256] = {0};
  gethostname(host, sizeof(host) - 1);
  return hashString(host, 7);
}

/* The PID namespace this process lives in (its inode), or 0 where /proc does not say. */
static uint64_t pidNamespace(void) {
  struct stat st;
  return stat("/proc/self/ns/pid", &st) == 0 ? (uint64_t)st.st_ino : 0;
}

/* Same value for every process of one host (ranks that reach each other through shared
 * memory): PAPCCL_HOSTID, else the kernel and the host name (containers on one machine
 * with their own names may not share /dev/shm). */
static uint64_t localHostId(uint64_t machine) {
  const char* force = papParamHostId();
  if (force) return hashString(force, 1);
  char host[256] = {0};
  gethostname(host, sizeof(host) - 1);
  return hashString(host, machine);
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

/* Steps 1 and 2 of commSetup: every rank's host, machine, PID namespace, pid and CPUs, swapped
 * over the bootstrap; the per-peer arrays of comm, with each peer's host id and pid. */
static papcclResult_t exchangePeerInfo(struct papComm* comm, struct peerInfo* info) {
  int n = comm->nranks;
  info[comm->rank].machineId = machineId(); /* read once: the boot id is a file */
  info[comm->rank].hostId = localHostId(info[comm->rank].machineId);
  info[comm->rank].pidNs = pidNamespace();
  info[comm->rank].pid = (int32_t)getpid();
  info[comm->rank].rank = comm->rank;
  affinityMask(info[comm->rank].cpus);
  PAP_CHECK(papBootstrapAllGather(comm->bs, info, sizeof(*info)));
  PAP_CHECK(papCalloc(&comm->hostIds, (size_t)n));
  PAP_CHECK(papCalloc(&comm->pids, (size_t)n));
  PAP_CHECK(papCalloc(&comm->conns, (size_t)n));
  PAP_CHECK(papCalloc(&comm->p2pSendCount, (size_t)n));
  PAP_CHECK(papCalloc(&comm->p2pRecvCount, (size_t)n));
  for (int r = 0; r < n; r++) {
    comm->hostIds[r] = info[r].hostId;
    /* A pid means something here only inside our own PID namespace (a rank in another
     * container of this host has its own numbers, which could name an unrelated process
     * here): 0 then, and the transports check that peer no way that needs a pid. */
    int samePidNs =
        info[r].pidNs == info[comm->rank].pidNs || info[r].machineId != info[comm->rank].machineId;
    comm->pids[r] = samePidNs ? info[r].pid : 0;
  }
  return papcclSuccess;
}

/* Ranks on this machine (not host id: "hosts" made with PAPCCL_HOSTID or network namespaces
 * may share the CPUs) against the CPUs they may run on together: the union of their
 * affinities (a launcher that binds each rank to its own CPU leaves each one CPU, and they
 * still do not share). Sets comm->oversubscribed and comm->spinNs. */
static void countSharedCpus(struct papComm* comm, const struct peerInfo* info) {
  int nlocal = 0, ncpu = 0;
  uint64_t all[PAP_CPU_WORDS] = {0};
  for (int r = 0; r < comm->nranks; r++) {
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

/* One backend serves every peer: shm within a host, UCX when the ranks span hosts. */
static papcclResult_t startTransport(struct papComm* comm, const struct papTransportCtx* ctx) {
  papcclResult_t res;
  comm->tops = papTransportSelect(ctx);
  if (comm->tops == NULL) return papcclInvalidUsage;
  res = comm->tops->init(ctx, &comm->tstate);
  if (res != papcclSuccess) {
    /* A backend that cannot start here (ib without an RDMA device) hands over to the
     * next one that reaches every peer. Every rank must end up on the same backend: the
     * handle exchange of connectPeers fails cleanly if they do not. */
    const struct papTransportOps* next = papTransportFallback(ctx, comm->tops);
    if (next == NULL) return res;
    PAP_WARN("transport %s could not start; falling back to %s", comm->tops->name, next->name);
    comm->tops = next;
    PAP_CHECK(comm->tops->init(ctx, &comm->tstate));
  }
  return papcclSuccess;
}

/* Every rank names its backend: they must agree before they swap its handles. */
static papcclResult_t agreeOnTransport(struct papComm* comm) {
  char(*names)[16] = NULL;
  PAP_CHECK(papCalloc(&names, (size_t)comm->nranks));
  snprintf(names[comm->rank], sizeof(names[0]), "%s", comm->tops->name);
  papcclResult_t res = papBootstrapAllGather(comm->bs, names, sizeof(names[0]));
  for (int r = 0; r < comm->nranks && res == papcclSuccess; r++) {
    if (strncmp(names[r], comm->tops->name, sizeof(names[0])) == 0) continue;
    PAP_WARN(
        "rank %d uses transport %.15s, this rank %s: every rank needs the same one "
        "(set PAPCCL_TRANSPORT alike everywhere)",
        r, names[r], comm->tops->name);
    res = papcclInvalidUsage;
  }
  free(names);
  return res;
}

/* Swaps the backend's listen handles and connects to every peer (connect never blocks: it
 * is called again, within the one wait, until the connection is there). */
static papcclResult_t connectPeers(struct papComm* comm, int64_t spinNs) {
  papcclResult_t res = papcclSuccess;
  int n = comm->nranks;
  unsigned char* handles = NULL;
  const size_t hb =
      comm->tops->caps.handleBytes ? comm->tops->caps.handleBytes : PAP_TRANSPORT_HANDLE_BYTES;
  PAP_CHECK(papCalloc(&handles, (size_t)n * hb));
  PAP_CHECK_GOTO(comm->tops->listen(comm->tstate, handles + (size_t)comm->rank * hb), res, out);
  PAP_CHECK_GOTO(papBootstrapAllGather(comm->bs, handles, hb), res, out);
  for (int p = 0; p < n; p++) {
    if (p == comm->rank) continue;
    char what[64];
    snprintf(what, sizeof(what), "rank %d connecting to peer %d", comm->rank, p);
    struct papWait w;
    papWaitInit(&w, what, (const volatile int*)&comm->abortFlag, 1, spinNs, 100000);
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
out:
  free(handles);
  return res;
}

/* Sets up a comm whose bootstrap is connected, in named steps: peers, CPUs, transport,
 * connections; then the engine, the arrival board and the CUDA IPC arenas. */
static papcclResult_t commSetup(struct papComm* comm) {
  papcclResult_t res = papcclSuccess;
  int n = comm->nranks;
  struct peerInfo* info = NULL;
  memcpy(comm->key, papBootstrapKey(comm->bs), sizeof(comm->key));
  PAP_CHECK(papCalloc(&info, (size_t)n));
  res = exchangePeerInfo(comm, info);
  if (res != papcclSuccess) goto out;
  countSharedCpus(comm, info);
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
  res = startTransport(comm, &ctx);
  if (res == papcclSuccess) res = agreeOnTransport(comm);
  if (res == papcclSuccess) res = connectPeers(comm, ctx.spinNs);
  if (res != papcclSuccess) goto out;
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
  free(info);
  return res;
}

void papCommTeardown(struct papComm* comm) {
  if (comm->growIdPending) papBootstrapCancelGrow(&comm->growId); /* its root: ends now */
  comm->growIdPending = 0;
  papOneSidedFree(comm);
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
    if (papCommIdleDriven(comm)) comm->tops->wake->wake(comm->tstate); /* start serving it */
    res = papHierSetup(comm);
  }
  if (res == papcclSuccess) {
    atomic_store_explicit(&comm->asyncError, papcclSuccess, memory_order_release);
  } else {
    atomic_store_explicit(&comm->asyncError, res, memory_order_release);
  }
  return res;
}

papcclResult_t papCommChildSetup(struct papComm* parent, struct papComm* child) {
  papLogSetContext(child->rank, child->lastError, sizeof(child->lastError));
  papcclResult_t res = commSetup(child);
  if (res == papcclSuccess) {
    atomic_store_explicit(&child->transportLive, 1, memory_order_release);
    if (papCommIdleDriven(child)) child->tops->wake->wake(child->tstate);
    res = papHierSetup(child);
  }
  papLogSetContext(parent->rank, parent->lastError, sizeof(parent->lastError));
  return res;
}
