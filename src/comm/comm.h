/* SPDX-License-Identifier: Apache-2.0 */
/* struct papComm: the communicator's state, shared by the layers above the algorithms (its
 * lifecycle is in the API layer). */
#ifndef PAPCCL_COMM_COMM_H_
#define PAPCCL_COMM_COMM_H_

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>

#include "engine.h"
#include "log.h"
#include "op.h"
#include "papccl.h"
#include "transport.h"
#include "wait.h"

#define PAP_COMM_MAGIC 0x706170636f6d6d31ull /* "papcomm1" */
#define PAP_COMM_DEAD 0x64656164d4d4f43ull

struct papBootstrap;
struct papArrivalState;
struct papJob;
struct papDevState;
struct papDevStage;
struct papIpcState;

/* Ops created by papcclRedOpCreatePreMulSum live in a small per-comm table. */
#define PAP_MAX_USER_OPS 64
struct papUserOp {
  int inUse;
  papcclDataType_t dtype;
  unsigned char scalar[8];
};

/* The comm object outlives destroy as a tombstone (the 256 most recent ones are kept), so a
 * call on a destroyed comm reads magic == PAP_COMM_DEAD instead of freed memory. The heavy
 * parts hang off it and are freed at destroy. */
struct papComm {
  uint64_t magic;
  int rank;
  int nranks;
  int cudaDev;
  int blocking;
  int finalized;
  int oversubscribed; /* more ranks on this host than CPUs we may run on */
  uint64_t spinNs; /* polling budget of this comm's waits (PAPCCL_SPIN_US); their polls yield
                    * the core when oversubscribed */
  _Atomic int abortFlag; /* written by abort and revoke (any thread); read by every wait */
  _Atomic int bsAbortFlag; /* written by abort only: the bootstrap's waits (a revoked comm's
                            * bootstrap still serves split and shrink) */
  _Atomic int revoked; /* papcclCommRevoke: no new operations; management calls only */
  _Atomic int suspended; /* papcclCommSuspend: its large buffers are released; no operations
                          * until papcclCommResume (src/api/comm_suspend.c) */
  _Atomic int activeCalls; /* API calls inside the comm; destroy waits for 0 */
  _Atomic int asyncError; /* first error of the progress thread or a failed op */
  _Atomic int pendingJobs; /* queued non-blocking jobs; GetAsyncError says InProgress */
  _Atomic int transportLive; /* set once tops/tstate are up: the progress thread may drive them */
  _Atomic int pendingHostJobs; /* of those, all but device ops in stream order: InProgress */
  char lastError[512];
  /* Hang diagnosis (the arrival layer's diag.c): the ops the progress-lock holder runs, what
   * it waits for in words (its own, for its timeout WARN), and that text published for other
   * threads (papcclCommDumpState, the dump signal) under diagLock. */
  const struct papOpDesc* curOps;
  int curNops;
  char diagHint[640];
  pthread_mutex_t diagLock;
  int diagActive; /* 0: nothing waits; 1: diagText waits now; 2: it was the last failure */
  papcclResult_t diagResult; /* that failure's result */
  char diagText[768];

  uint64_t collSeq; /* next collective sequence number (same on every rank) */
  uint64_t* p2pSendCount; /* [nranks] messages sent to each peer (p2p tag matching) */
  uint64_t* p2pRecvCount;
  int p2pAnyNext; /* the peer a receive from any source looks at first (round robin) */
  unsigned char key[16];
  uint64_t splitCount;
  /* papcclCommGetUniqueId's id until the grow it serves (papcclCommGrow) has used it (under
   * progressLock) */
  papcclUniqueId growId;
  int growIdPending;

  struct papBootstrap* bs;
  const struct papTransportOps* tops;
  void* tstate;
  struct papConn** conns; /* [nranks] */
  int* pids;
  uint64_t* hostIds;

  struct papEngine engine; /* the plan being executed; owned by the progress-lock holder */
  struct papArrivalState* arrival; /* arrival records, statistics, selector; same owner */
  struct papDevState* dev; /* device-buffer state (the CUDA layer), created on first use */
  pthread_mutex_t devLock; /* guards dev's creation and its staging pool */
  struct papIpcState* ipc; /* CUDA IPC arenas (the CUDA layer), or NULL; engine.dev uses them */
  pthread_mutex_t progressLock;
  struct papOneSided* onesided; /* windows and the one-sided channel (the enqueue layer's
                                 * onesided.c), made by the first window registration */

  struct papUserOp userOps[PAP_MAX_USER_OPS];
  pthread_mutex_t userOpLock;

  /* progress thread and its job queue (non-blocking comms) */
  pthread_t thread;
  int threadStarted;
  pthread_mutex_t jobLock;
  struct papJob* jobHead;
  struct papJob* jobTail;
  _Atomic uint32_t threadBell; /* futex word for the idle progress thread */
  _Atomic int driving; /* threads running operations: they drive the transport meanwhile */
  _Atomic int threadPark; /* how the progress thread sleeps now: PAP_PARK_* (progress.c) */
  int threadStop;

  /* Hierarchy (the API layer's hier.c): when the ranks span hosts and some host has several, the
   * ranks of each host share hierLocal (shared memory), and local rank i of every host shares
   * hierCross (the network): the host leaders' comm for i = 0; NULL otherwise, and on
   * non-leaders where rails do not apply (hierRails 0). */
  struct papComm* hierLocal;
  struct papComm* hierCross;
  int hierRails; /* every host holds as many ranks and PAPCCL_HIER_RAILS: all cross the network */
  _Atomic uint64_t hierOps; /* allreduces that took the hierarchical path */
  _Atomic uint64_t hierRailOps; /* of which every local rank carried a slice between hosts */

  struct papComm* liveNext; /* the process's live comms (the dump signal walks them) */
  struct papComm* livePrev;
  struct papComm* tombNext;
  uint64_t magicTail;
};

/* A job for the progress thread (the enqueue layer): the ops of one non-blocking call, or
 * work of a layer above it, which then sets run (and drop, for a job that never runs). */
struct papJob {
  struct papJob* next;
  int kind; /* PAP_JOB_* */
  papcclResult_t (*run)(struct papComm* comm, struct papJob* job); /* NULL: run ops */
  void (*drop)(struct papComm* comm, struct papJob* job); /* or NULL */
  papcclUniqueId id; /* PAP_JOB_INIT */
  int nops;
  struct papOpDesc* ops;
  /* PAP_JOB_DEVICE: the stream's arrival number and the staging block the ops run on. */
  uint64_t devSeq;
  struct papDevStage* stage;
};
/* The progress thread's sleeps where it drives an idle backend (progress.c). */
enum {
  PAP_PARK_NONE = 0,
  PAP_PARK_BACKEND,
  PAP_PARK_BELL
};

enum {
  PAP_JOB_INIT = 1, /* non-blocking init */
  PAP_JOB_OPS = 2, /* host-buffer ops */
  PAP_JOB_DEVICE = 3 /* ops in stream order (the CUDA layer) */
};

/* Whether the comm was aborted (the one way to read the flag: papAborted). */
static inline int papCommAborted(const struct papComm* comm) {
  return papAborted((const volatile int*)&comm->abortFlag);
}

/* A peer that died without leaving the comm in good order (tops->live->deadPeer), or -1: no
 * operation can finish then. For the waits' health checks. */
static inline int papCommDeadPeer(struct papComm* comm) {
  if (comm->tops == NULL || comm->tstate == NULL) return -1;
  return comm->tops->live->deadPeer(comm->tstate);
}

/* "pid N" for a peer's process in the errors that name it, or, where its pid means nothing
 * here (a peer in another PID namespace keeps pid 0), that it lives in another one. */
struct papPidText {
  char s[40];
};
static inline struct papPidText papCommPidText(const struct papComm* comm, int r) {
  struct papPidText t;
  int pid = comm->pids != NULL && r >= 0 && r < comm->nranks ? comm->pids[r] : 0;
  if (pid > 0)
    snprintf(t.s, sizeof(t.s), "pid %d", pid);
  else
    snprintf(t.s, sizeof(t.s), "in another PID namespace");
  return t;
}

/* papcclSuccess when d < 0, or papcclRemoteError with a WARN naming the dead peer d. */
static inline papcclResult_t papCommDeadPeerError(struct papComm* comm, int d) {
  if (d < 0) return papcclSuccess;
  PAP_WARN(
      "rank %d (%s) died without leaving the communicator: rank %d's operation cannot "
      "complete",
      d, papCommPidText(comm, d).s, comm->rank);
  return papcclRemoteError;
}

/* papcclSuccess, or papcclRemoteError with a WARN naming the dead peer. */
static inline papcclResult_t papCommCheckDeadPeer(struct papComm* comm) {
  return papCommDeadPeerError(comm, papCommDeadPeer(comm));
}

/* Records the first asynchronous error. */
static inline void papCommSetError(struct papComm* comm, papcclResult_t res) {
  int expected = papcclSuccess;
  atomic_compare_exchange_strong(&comm->asyncError, &expected, (int)res);
}

/* Whether the comm's progress thread drives the transport while no operation runs: the
 * backend asks for it (ucx: rank 0 serves the message board's requests in its worker's
 * progress, and every rank's worker sends the bytes it buffered only in progress: without
 * that, a rank that goes idle right after its last eager send leaves a peer waiting for
 * them, docs/PAP-ENGINE.md section 13). */
static inline int papCommIdleDriven(const struct papComm* c) {
  return c->tops != NULL && c->tops->caps.idleProgress;
}

#endif /* PAPCCL_COMM_COMM_H_ */
