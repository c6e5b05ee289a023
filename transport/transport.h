/* SPDX-License-Identifier: Apache-2.0 */
/* The transport interface: one ops table per backend (shm, ucx, ib), its concerns in
 * sub-tables, its capabilities as data (docs/ARCHITECTURE.md section 5). */
#ifndef PAPCCL_TRANSPORT_TRANSPORT_H_
#define PAPCCL_TRANSPORT_TRANSPORT_H_

#include <stddef.h>
#include <stdint.h>

#include "papccl.h"

#define PAP_TRANSPORT_HANDLE_BYTES 128 /* listen handle swapped through the bootstrap */
#define PAP_TRANSPORT_UCX_HANDLE_BYTES 4096 /* UCX worker addresses are bigger */

enum papMemType {
  PAP_MEM_HOST = 0,
  PAP_MEM_DEVICE = 1,
  PAP_MEM_HOST_PINNED = 2
};

/* The narrow context a backend gets at init: never the communicator. */
struct papTransportCtx {
  int rank;
  int nranks;
  const unsigned char* key; /* 16 bytes, the same on every rank */
  const uint64_t* hostIds; /* [nranks]; peers with the same id share a host */
  const int* pids; /* [nranks]; process ids (same host only) */
  const volatile int* abortFlag; /* nonzero: give up waits */
  int64_t spinNs; /* how long a wait may poll before it sleeps (0: the CPUs are shared) */
  size_t boardWords; /* 64-bit words of the arrival board (the same on every rank) */
  size_t flatBytes; /* bytes of each rank's flat area (0: none; the same on every rank) */
};

/* A backend reads its copy of ctx->abortFlag with papAborted (wait.h): papcclCommAbort stores
 * the flag from any thread while a waiter reads it, so the read must be atomic. */

/* The arrival board: ctx->boardWords 64-bit words held by the home rank (rank 0) and reached
 * only through the board or home table (and wake->notify), so a network backend can serve it with remote
 * atomics. Its layout is the arrival layer's business. */
enum papBoardOp {
  PAP_BOARD_LOAD = 0,
  PAP_BOARD_STORE,
  PAP_BOARD_FADD,
  PAP_BOARD_CAS, /* *oldOut gets the previous value; swapped when it equaled cmp */
  /* A store that readers need to see only once they see a later STORE, FADD or CAS of this
   * rank (a release store: on shared memory a plain write that does not wait for its line;
   * a backend without such a write stores as PAP_BOARD_STORE). */
  PAP_BOARD_STORE_RELEASE
};

/* The home rank's handlers of a message board (home->attach): serve answers one request from
 * rank `from`, writing its reply (at most cap bytes) and returning the reply's length; push
 * takes one message the home sent to this rank (home->push). */
typedef size_t (*papHomeServeFn)(void* arg, int from, const void* req, size_t len, void* reply,
                                 size_t cap);
typedef void (*papHomePushFn)(void* arg, const void* msg, size_t len);
/* Largest request, reply or push of a message board. */
#define PAP_HOME_MAX_BYTES 65536

struct papConn; /* one per (backend, peer); owned by the backend */
struct papReq; /* one per posted isend/irecv; owned by the backend */

/* Optional consumer for irecv: instead of copying into buf, the backend hands each piece of
 * the message to fn in order (offset within the message, bytes). Lets the engine reduce
 * straight out of the transport's buffers (no extra copy). */
struct papRecvSink {
  void (*fn)(void* arg, size_t offset, const void* src, size_t bytes);
  void* arg;
};

/* What a backend can do, as data (the engine and the arrival layer read these, never probe
 * the tables for them). papTransportOpsCheck says whether caps and tables agree. */
struct papTransportCaps {
  /* Someone must drive the backend even while no operation runs (rank 0 serves the message
   * board's requests; UCX sends what it buffered only in progress): the comm's progress
   * thread does, sleeping in wait(). Set with a home table. */
  int idleProgress;
  /* 1 when peers reach the arrival board only through the home rank's process (network
   * backends): it is gone once rank 0 destroys its comm, so rank 0 waits at destroy until
   * every rank has released it. 0 when peers map it (shm): their mappings outlive rank 0's.
   * Set with a home table. */
  int remoteBoard;
  /* Bytes of the listen handle (0: PAP_TRANSPORT_HANDLE_BYTES). */
  size_t handleBytes;
  /* 1 when msg->probe is there: a receive from any source can match. 0: it is NULL, and a
   * receive from any source is refused. */
  int anySource;
};

/* Messages between ranks (required). */
struct papMsgOps {
  /* Post a message; *reqOut == NULL means no resources now: retry later. Messages on one
   * conn match in posting order; tag is checked (a mismatch is an internal error).
   * papcclRemoteError without a WARN (isend, and test of a send): the peer is gone
   * (live->peerAlive says 0 from then on). */
  papcclResult_t (*isend)(struct papConn* conn, const void* buf, size_t bytes, int memType,
                          uint64_t tag, struct papReq** reqOut);
  papcclResult_t (*irecv)(struct papConn* conn, void* buf, size_t bytes, int memType, uint64_t tag,
                          const struct papRecvSink* sink, struct papReq** reqOut);
  /* Optional (caps.anySource): 1 when no receive is posted on conn and the next message to
   * arrive on it has begun to (at least its first piece is here, or announced) and carries
   * tag; else 0. Drives nothing (call progress). The receive from any source matches with
   * it. */
  int (*probe)(struct papConn* conn, uint64_t tag);
  /* Advances req; *doneOut = 1 when complete (then req is released). */
  papcclResult_t (*test)(struct papReq* req, int* doneOut, size_t* sizeOut);
  /* Drives background work; returns papcclSuccess or an error. */
  papcclResult_t (*progress)(void* state);
  /* Optional: the engine gave up a plan (an error) with receives still posted; from the
   * engine's thread. They must not write into the caller's buffers once the call returns:
   * cancel them (a receive already under way finishes first, bounded). NULL: nothing is
   * cancelled (shm writes a receive only inside test and progress; on ib a receive whose
   * CTS went out may still take the peer's RDMA write). */
  void (*abandon)(void* state);
};

/* Sleeping and waking a rank's threads (required). */
struct papWakeOps {
  /* Sleeps at most timeoutNs unless something may have changed since `token` was read with
   * waitToken (so no wakeup is lost). */
  uint32_t (*waitToken)(void* state);
  void (*wait)(void* state, uint32_t token, int64_t timeoutNs);
  /* Wakes every thread sleeping in wait() on this rank (abort, new work). */
  void (*wake)(void* state);
  /* Rings peer's doorbell (its sleepers in wait() return). */
  void (*notify)(void* state, int peer);
};

/* Whether peers are still there (required). */
struct papLiveOps {
  /* 0 when peer is known to be gone (its process exited); 1 otherwise. Cheap enough to call
   * every ~100 ms while a rank waits on that peer. */
  int (*peerAlive)(void* state, int peer);
  /* A peer whose process is gone although it did not leave in good order (depart), or -1.
   * Such a peer fails every operation of the comm, whichever peer a rank waits on. Cheap
   * enough for every ~100 ms of waiting. */
  int (*deadPeer)(void* state);
  /* This rank leaves in good order (destroy of a healthy comm), so that its exit is no
   * failure to peers still finishing their part of the last operation. */
  void (*depart)(void* state);
};

/* The arrival board as shared or remotely atomic words (optional; at most one of board and
 * home). */
struct papBoardOps {
  /* One sequentially consistent operation on word idx of the arrival board. */
  papcclResult_t (*atomic)(void* state, size_t idx, int op, uint64_t val, uint64_t cmp,
                           uint64_t* oldOut);
};

/* The arrival board as a message board (optional; at most one of board and home; needs
 * caps.idleProgress and caps.remoteBoard): the arrival layer's own code runs at the home
 * rank on its local board and sends the results to the ranks that wait for them. */
struct papHomeOps {
  /* attach (every rank, before its first collective; NULL fns detach) installs the arrival
   * layer's handlers: serve runs at the home rank (rank 0) for each request, one at a time,
   * and writes at most cap bytes of reply (returns their count); push runs at a rank for
   * each message the home sent it with push. call sends a request to the home and waits
   * for its reply (bounded by the timeout and abort; on rank 0 it calls serve directly;
   * papcclRemoteError without a WARN when the home is unreachable: the caller logs why);
   * send sends one that needs no reply; push may only be called from inside serve. Every
   * push and reply rings the receiver's doorbell. Requests and pushes reach the handlers
   * 8-byte aligned. */
  papcclResult_t (*attach)(void* state, papHomeServeFn serve, papHomePushFn push, void* arg);
  papcclResult_t (*call)(void* state, const void* req, size_t len, void* reply, size_t cap,
                         size_t* replyLen);
  papcclResult_t (*send)(void* state, const void* req, size_t len);
  void (*push)(void* state, int peer, const void* msg, size_t len);
  /* Waits (bounded) until every message the home sent so far has left this process (the
   * home calls it before it fails on an error it told every rank of). */
  void (*flush)(void* state);
};

/* Memory that the ranks of one host map from each other (optional). */
struct papLocalOps {
  /* Direct-access staging area of rank r on this host, or NULL (sizeOut gets its bytes). */
  void* (*staging)(void* state, int r, size_t* sizeOut);
  /* Rank r's flat area (ctx->flatBytes, 64-byte aligned), written only by r and read in
   * place by every rank of the host, or NULL. Its layout is the arrival layer's business
   * (flat collectives). */
  void* (*flat)(void* state, int r);
  /* Rings every other rank's doorbell, as wake->notify on each, with one fence. */
  void (*notifyAll)(void* state);
};

/* One backend: its capabilities, its lifecycle, and one sub-table per concern. msg, wake
 * and live are required; board, home and local are optional as a whole (NULL: the backend
 * lacks the concern; else every member is there). Inside a table, every member is there
 * unless its comment says Optional. */
struct papTransportOps {
  /* The backend's name: what PAPCCL_TRANSPORT names and the logs print. */
  const char* name;
  /* What the backend can do (struct papTransportCaps). */
  struct papTransportCaps caps;
  /* The concerns (struct papMsgOps and the others above). */
  const struct papMsgOps* msg;
  const struct papWakeOps* wake;
  const struct papLiveOps* live;
  const struct papBoardOps* board;
  const struct papHomeOps* home;
  const struct papLocalOps* local;
  /* Can this backend reach peer from rank (hostIds decide for shm)? */
  int (*canConnect)(const struct papTransportCtx* ctx, int peer);
  /* Creates the backend's state for this rank (its first member a struct
   * papTransportBase). */
  papcclResult_t (*init)(const struct papTransportCtx* ctx, void** stateOut);
  /* Fills handle (caps.handleBytes) that peers pass to connect. */
  papcclResult_t (*listen)(void* state, void* handleOut);
  /* Never blocks: *connOut stays NULL until ready; call again. */
  papcclResult_t (*connect)(void* state, int peer, const void* peerHandle,
                            struct papConn** connOut);
  /* Called once every local rank has connected (after a bootstrap barrier). */
  papcclResult_t (*ready)(void* state);
  /* Ends one connection. No caller yet: finalize ends every connection. */
  void (*close)(struct papConn* conn);
  /* Frees what init made, its connections included (the comm's teardown). */
  void (*finalize)(void* state);
};

/* The first member of every backend's state: what each backend keeps of its context. ctx is
 * a copy whose key points at key; ctx.hostIds and ctx.pids are NULL (they are the comm's,
 * valid during init only). */
struct papTransportBase {
  struct papTransportCtx ctx;
  unsigned char key[16];
  /* Bytes of the large memory the backend allocated for this rank and holds until finalize
   * (shm: its own segment; ucx: the message board's buffers), set where it allocates them;
   * the comm's memory statistics read it (papcclCommMemStats). */
  size_t heldBytes;
};
void papTransportBaseInit(struct papTransportBase* base, const struct papTransportCtx* ctx);

/* 0 when ops is consistent: lifecycle and required tables complete, each optional table
 * NULL or complete, caps agreeing with the tables; else -1 with why (cap bytes) saying
 * what is wrong. papTransportSelect skips (with a WARN) a backend that is not. */
int papTransportOpsCheck(const struct papTransportOps* ops, char* why, size_t cap);

extern const struct papTransportOps papTransportShm;
#ifdef PAPCCL_HAVE_UCX
extern const struct papTransportOps papTransportUcx;
#endif
#ifdef PAPCCL_HAVE_IB
extern const struct papTransportOps papTransportIb;
#endif

/* Picks the one backend that serves every peer of the comm: PAPCCL_TRANSPORT if set, else
 * the first (shm, then ucx) that can reach all of them. NULL, with a WARN, if none can. */
const struct papTransportOps* papTransportSelect(const struct papTransportCtx* ctx);
/* When failed's init failed (no device, say): the first other backend, in registry order
 * and whatever PAPCCL_TRANSPORT says, that reaches every peer; NULL if none. */
const struct papTransportOps* papTransportFallback(const struct papTransportCtx* ctx,
                                                   const struct papTransportOps* failed);

#endif /* PAPCCL_TRANSPORT_TRANSPORT_H_ */
