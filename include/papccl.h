/* SPDX-License-Identifier: Apache-2.0 */
/* papccl public API: NCCL's API and semantics with the papccl prefix, plus PAP extensions. */
#ifndef PAPCCL_INCLUDE_PAPCCL_H_
#define PAPCCL_INCLUDE_PAPCCL_H_

#include <limits.h>
#include <stddef.h>
#include <stdint.h>

#define PAPCCL_MAJOR 0
#define PAPCCL_MINOR 1
#define PAPCCL_PATCH 0
#define PAPCCL_SUFFIX ""
/* Same encoding as NCCL_VERSION for versions after 2.8. */
#define PAPCCL_VERSION(X, Y, Z) ((X)*10000 + (Y)*100 + (Z))
#define PAPCCL_VERSION_CODE PAPCCL_VERSION(PAPCCL_MAJOR, PAPCCL_MINOR, PAPCCL_PATCH)

#if defined(_WIN32)
#define PAPCCL_API
#else
#define PAPCCL_API __attribute__((visibility("default")))
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* The CUDA stream type, forward declared so that no CUDA header is needed. It is the very
 * type behind cudaStream_t, so CUDA code passes its streams unchanged. Host-buffer
 * operations ignore the stream (NULL is fine). */
struct CUstream_st;
typedef struct CUstream_st* papcclStream_t;

/* Opaque communicator handle. */
typedef struct papComm* papcclComm_t;
#define PAPCCL_COMM_NULL NULL

#define PAPCCL_UNIQUE_ID_BYTES 128
typedef struct {
  char internal[PAPCCL_UNIQUE_ID_BYTES];
} papcclUniqueId;

/* Result codes: the values of NCCL 2.28. */
typedef enum {
  papcclSuccess = 0,
  papcclUnhandledCudaError = 1,
  papcclSystemError = 2,
  papcclInternalError = 3,
  papcclInvalidArgument = 4,
  papcclInvalidUsage = 5,
  papcclRemoteError = 6,
  papcclInProgress = 7,
  papcclNumResults = 8
} papcclResult_t;

#define PAPCCL_CONFIG_UNDEF_INT INT_MIN
#define PAPCCL_CONFIG_UNDEF_PTR NULL
#define PAPCCL_SPLIT_NOCOLOR -1
/* Flags of papcclCommShrink and papcclCommRevoke (NCCL's values). */
#define PAPCCL_SHRINK_DEFAULT 0x00 /* a healthy comm: its queued operations finish first */
#define PAPCCL_SHRINK_ABORT 0x01 /* after a failure: the comm's operations stop first */
#define PAPCCL_REVOKE_DEFAULT 0x00

/* Communicator configuration; same layout, magic and rules as ncclConfig_t (2.28).
 * Only `blocking` and `commName` change papccl's behaviour today; the other fields are
 * accepted and ignored (they are GPU scheduling hints). Fields beyond config->size are
 * never read. */
typedef struct papcclConfig_v1 {
  size_t size;
  unsigned int magic;
  unsigned int version;
  int blocking; /* 1 (default): calls block; 0: calls may return papcclInProgress */
  int cgaClusterSize;
  int minCTAs;
  int maxCTAs;
  const char* netName;
  int splitShare;
  int trafficClass;
  const char* commName;
  int collnetEnable;
  int CTAPolicy;
  int shrinkShare;
  int nvlsCTAs;
  int nChannelsPerNetPeer;
  int nvlinkCentricSched;
} papcclConfig_t;

#define PAPCCL_CONFIG_MAGIC 0xcafebeef
#define PAPCCL_CONFIG_INITIALIZER \
  { \
    sizeof(papcclConfig_t), PAPCCL_CONFIG_MAGIC, PAPCCL_VERSION_CODE, PAPCCL_CONFIG_UNDEF_INT, \
        PAPCCL_CONFIG_UNDEF_INT, PAPCCL_CONFIG_UNDEF_INT, PAPCCL_CONFIG_UNDEF_INT, \
        PAPCCL_CONFIG_UNDEF_PTR, PAPCCL_CONFIG_UNDEF_INT, PAPCCL_CONFIG_UNDEF_INT, \
        PAPCCL_CONFIG_UNDEF_PTR, PAPCCL_CONFIG_UNDEF_INT, PAPCCL_CONFIG_UNDEF_INT, \
        PAPCCL_CONFIG_UNDEF_INT, PAPCCL_CONFIG_UNDEF_INT, PAPCCL_CONFIG_UNDEF_INT, \
        PAPCCL_CONFIG_UNDEF_INT \
  }

/* Reduction operations: NCCL's values. Values >= papcclNumOps are custom operations made
 * by papcclRedOpCreatePreMulSum. */
typedef enum {
  papcclSum = 0,
  papcclProd = 1,
  papcclMax = 2,
  papcclMin = 3,
  papcclAvg = 4,
  papcclNumOps = 5,
  papcclMaxRedOp = 0x7fffffff
} papcclRedOp_t;

/* Data types: NCCL 2.28's values. */
typedef enum {
  papcclInt8 = 0,
  papcclChar = 0,
  papcclUint8 = 1,
  papcclInt32 = 2,
  papcclInt = 2,
  papcclUint32 = 3,
  papcclInt64 = 4,
  papcclUint64 = 5,
  papcclFloat16 = 6,
  papcclHalf = 6,
  papcclFloat32 = 7,
  papcclFloat = 7,
  papcclFloat64 = 8,
  papcclDouble = 8,
  papcclBfloat16 = 9,
  papcclFloat8e4m3 = 10,
  papcclFloat8e5m2 = 11,
  papcclNumTypes = 12
} papcclDataType_t;

typedef enum {
  papcclScalarDevice = 0, /* scalar is in device memory, read when the op runs */
  papcclScalarHostImmediate = 1 /* scalar is in host memory, read at creation */
} papcclScalarResidence_t;

/* ---- Version, ids, errors ------------------------------------------------------------- */

/* Writes PAPCCL_VERSION_CODE of the library to *version. Needs no GPU, no comm. */
PAPCCL_API papcclResult_t papcclGetVersion(int* version);

/* Creates a unique id for a new communicator: on the calling process it opens the bootstrap
 * root listener (a background thread that serves one rendezvous, then exits). With
 * PAPCCL_COMM_ID=host:port set, encodes that address instead and rank 0's init serves it.
 * The id is plain bytes: send it to every rank by any means. */
PAPCCL_API papcclResult_t papcclGetUniqueId(papcclUniqueId* uniqueId);

/* Static text for a result code. */
PAPCCL_API const char* papcclGetErrorString(papcclResult_t result);

/* The last WARN message logged for comm (or, with comm NULL, for the calling thread's last
 * failed call that had no valid comm). Never NULL; "" when nothing went wrong. */
PAPCCL_API const char* papcclGetLastError(papcclComm_t comm);

/* ---- Communicator lifecycle ----------------------------------------------------------- */

/* Creates rank `rank` of an nranks-rank communicator. Blocks until every rank has joined
 * (or PAPCCL_TIMEOUT_S passes). Inside papcclGroupStart/End the work is deferred to
 * papcclGroupEnd, so one thread may create several ranks. Thread-safe. */
PAPCCL_API papcclResult_t papcclCommInitRank(papcclComm_t* comm, int nranks, papcclUniqueId commId,
                                             int rank);
/* As papcclCommInitRank with a config (NULL = defaults). With config->blocking == 0 the call
 * may return papcclInProgress; poll papcclCommGetAsyncError until it returns papcclSuccess. */
PAPCCL_API papcclResult_t papcclCommInitRankConfig(papcclComm_t* comm, int nranks,
                                                   papcclUniqueId commId, int rank,
                                                   papcclConfig_t* config);
/* Creates ndev ranks of one communicator in this process (ranks as threads). devlist may be
 * NULL (device i for rank i; ignored for host buffers). */
PAPCCL_API papcclResult_t papcclCommInitAll(papcclComm_t* comms, int ndev, const int* devlist);
/* Collective over comm: ranks with the same color form a new communicator, ordered by key
 * then by parent rank. color PAPCCL_SPLIT_NOCOLOR yields *newcomm = NULL. */
PAPCCL_API papcclResult_t papcclCommSplit(papcclComm_t comm, int color, int key,
                                          papcclComm_t* newcomm, papcclConfig_t* config);
/* Completes every outstanding operation and disconnects (collective). Then destroy. */
PAPCCL_API papcclResult_t papcclCommFinalize(papcclComm_t comm);
/* Frees every resource of comm. Calls papcclCommFinalize first if it was not called. */
PAPCCL_API papcclResult_t papcclCommDestroy(papcclComm_t comm);
/* Cancels in-flight operations (they return an error in the threads running them), then
 * frees comm without talking to the peers. Safe to call from another thread. */
PAPCCL_API papcclResult_t papcclCommAbort(papcclComm_t comm);
/* Stops comm's operations in flight (they return an error in the threads running them) and
 * refuses new ones; the comm stays, for papcclCommShrink, papcclCommSplit, papcclCommDestroy
 * or papcclCommAbort (not papcclCommFinalize). Safe to call from another thread. A blocking
 * comm returns once nothing runs; a non-blocking one may return papcclInProgress, and
 * papcclCommGetAsyncError says papcclInProgress until then, papcclSuccess after. Local: no
 * word to the peers. revokeFlags: PAPCCL_REVOKE_DEFAULT. */
PAPCCL_API papcclResult_t papcclCommRevoke(papcclComm_t comm, int revokeFlags);
/* A new communicator of comm's ranks but those in excludeRanksList, in their order (parent
 * rank r becomes r minus the excluded ranks below it). Every remaining rank calls it with the
 * same list; the excluded ranks do not call it (they may be dead). The excluded ranks are
 * never contacted. shrinkFlags: PAPCCL_SHRINK_DEFAULT on a healthy comm, PAPCCL_SHRINK_ABORT
 * after a failure (stops comm's operations first; comm is then like a revoked one). config
 * NULL: the parent's blocking mode. comm stays valid and is destroyed or aborted as usual;
 * the new comm is a complete one (split, shrink again, ...). */
PAPCCL_API papcclResult_t papcclCommShrink(papcclComm_t comm, int* excludeRanksList,
                                           int excludeRanksCount, papcclComm_t* newcomm,
                                           papcclConfig_t* config, int shrinkFlags);
/* The id of a grow of comm (NCCL 2.29's ncclCommGetUniqueId). One existing rank, the grow's
 * root, calls it and sends the id to the new ranks by any means; it starts a fresh bootstrap
 * root in this process for that one grow (PAPCCL_COMM_ID, the parent's address, is not used).
 * Each id serves one papcclCommGrow: a second id before the first one's grow is
 * papcclInvalidUsage, and a grow that fails uses it up too; destroying comm before its
 * grow calls that grow off. Not on a revoked comm. */
PAPCCL_API papcclResult_t papcclCommGetUniqueId(papcclComm_t comm, papcclUniqueId* uniqueId);
/* Grows comm to nRanks ranks (NCCL 2.29's ncclCommGrow): comm's ranks keep their ranks and
 * order, the new ones take ranks comm's size to nRanks - 1. Every rank calls it:
 *   existing ranks other than the root: comm, uniqueId NULL, rank -1;
 *   the root (the rank whose papcclCommGetUniqueId made the id): comm, &id, rank -1;
 *   new ranks: comm NULL, &id, rank = its rank in the new comm (>= comm's size).
 * The existing ranks agree over comm first: a mismatched nRanks, no id or another comm's id,
 * a revoked comm or bad arguments on any of them fail it on all of them, and the new ranks
 * with them (their root tells them why); a new rank that asks for a rank already taken or
 * another nRanks fails every rank as well, as does a new rank that dies once it has reached
 * the root (at once) or in the rendezvous after it (in about 0.5 s). One that never reaches
 * the root is awaited until PAPCCL_TIMEOUT_S. On failure comm is as it was, and usable.
 * The new comm takes each existing rank's PAP state (selector and arrival predictions); new
 * ranks start without. config NULL: the parent's blocking mode (new ranks: blocking). Not
 * inside a group. The new comm is complete (shrink, split, grow again) and comm stays valid
 * until it is destroyed as usual. */
PAPCCL_API papcclResult_t papcclCommGrow(papcclComm_t comm, int nRanks,
                                         const papcclUniqueId* uniqueId, int rank,
                                         papcclComm_t* newcomm, papcclConfig_t* config);
/* Flag of papcclCommSuspend (NCCL's value): release the comm's large buffers. */
#define PAPCCL_SUSPEND_MEM 0x01
/* Releases comm's large buffers that this rank can make again alone (the engine's plan
 * steps and scratch, the pinned staging of device buffers) and keeps the comm: no operation
 * runs on it (each is refused with papcclInvalidUsage) until papcclCommResume; management
 * calls and queries still work. Waits for the comm's queued operations first. flags:
 * PAPCCL_SUSPEND_MEM (0: nothing is suspended, as NCCL). A suspended comm refuses a second
 * suspension (papcclInvalidUsage). Local: no word to the peers (call it on every rank, as
 * NCCL requires). docs/ARCHITECTURE.md, "Suspending a communicator", lists what is released
 * and what is kept. */
PAPCCL_API papcclResult_t papcclCommSuspend(papcclComm_t comm, int flags);
/* Ends a suspension: the plan steps come back now, scratch and staging at the first
 * operation that needs them. papcclInvalidUsage when comm is not suspended. */
PAPCCL_API papcclResult_t papcclCommResume(papcclComm_t comm);
/* What papcclCommMemStats reports (NCCL's ncclCommMemStat_t values). Bytes are those the comm
 * holds now, host or device memory alike (papccl's buffers are mostly host memory). */
typedef enum {
  papcclStatMemSuspend = 0, /* bytes held now that papcclCommSuspend releases (0 suspended) */
  papcclStatMemSuspended = 1, /* 1 while suspended, else 0 */
  papcclStatMemPersist = 2, /* bytes held now that suspension keeps */
  papcclStatMemTotal = 3 /* papcclStatMemSuspend + papcclStatMemPersist */
} papcclCommMemStat_t;
PAPCCL_API papcclResult_t papcclCommMemStats(papcclComm_t comm, papcclCommMemStat_t stat,
                                             uint64_t* value);
/* The first asynchronous error of comm, or papcclInProgress while a non-blocking operation
 * is still running. Thread-safe; cheap enough to poll. */
PAPCCL_API papcclResult_t papcclCommGetAsyncError(papcclComm_t comm, papcclResult_t* asyncError);
/* Hang diagnosis: what comm's rank waits for now, in one line: each operation of the call
 * that waits (its collective number, kind, count and type, how long), the ranks that have
 * not arrived at it and the peers its plan waits on; or that nothing waits. An operation
 * shows once it has waited 100 ms (its health checks publish it). The same text ends the
 * WARN of a timeout, and PAPCCL_DUMP_SIGNAL logs it for every comm of the process. Any
 * thread, also while another one waits in comm. Writes at most len bytes, NUL included. */
PAPCCL_API papcclResult_t papcclCommDumpState(papcclComm_t comm, char* buf, size_t len);
PAPCCL_API papcclResult_t papcclCommCount(const papcclComm_t comm, int* count);
PAPCCL_API papcclResult_t papcclCommCuDevice(const papcclComm_t comm, int* device);
PAPCCL_API papcclResult_t papcclCommUserRank(const papcclComm_t comm, int* rank);

/* ---- Custom reduction operations ------------------------------------------------------ */

/* Creates op = sum(scalar * x_r). scalar points to one value of `datatype`. Only
 * papcclScalarHostImmediate is supported for host buffers (the scalar is read now). */
PAPCCL_API papcclResult_t papcclRedOpCreatePreMulSum(papcclRedOp_t* op, void* scalar,
                                                     papcclDataType_t datatype,
                                                     papcclScalarResidence_t residence,
                                                     papcclComm_t comm);
PAPCCL_API papcclResult_t papcclRedOpDestroy(papcclRedOp_t op, papcclComm_t comm);

/* ---- Collectives (NCCL semantics; host buffers complete before the call returns) ------ */

PAPCCL_API papcclResult_t papcclAllReduce(const void* sendbuff, void* recvbuff, size_t count,
                                          papcclDataType_t datatype, papcclRedOp_t op,
                                          papcclComm_t comm, papcclStream_t stream);
PAPCCL_API papcclResult_t papcclBroadcast(const void* sendbuff, void* recvbuff, size_t count,
                                          papcclDataType_t datatype, int root, papcclComm_t comm,
                                          papcclStream_t stream);
/* In-place broadcast (deprecated in NCCL; kept for compatibility). */
PAPCCL_API papcclResult_t papcclBcast(void* buff, size_t count, papcclDataType_t datatype, int root,
                                      papcclComm_t comm, papcclStream_t stream);
PAPCCL_API papcclResult_t papcclReduce(const void* sendbuff, void* recvbuff, size_t count,
                                       papcclDataType_t datatype, papcclRedOp_t op, int root,
                                       papcclComm_t comm, papcclStream_t stream);
/* sendcount elements per rank; recvbuff holds nranks * sendcount. */
PAPCCL_API papcclResult_t papcclAllGather(const void* sendbuff, void* recvbuff, size_t sendcount,
                                          papcclDataType_t datatype, papcclComm_t comm,
                                          papcclStream_t stream);
/* sendbuff holds nranks * recvcount; rank r receives block r reduced. */
PAPCCL_API papcclResult_t papcclReduceScatter(const void* sendbuff, void* recvbuff,
                                              size_t recvcount, papcclDataType_t datatype,
                                              papcclRedOp_t op, papcclComm_t comm,
                                              papcclStream_t stream);
/* count elements to and from every rank; both buffers hold nranks * count. */
PAPCCL_API papcclResult_t papcclAlltoAll(const void* sendbuff, void* recvbuff, size_t count,
                                         papcclDataType_t datatype, papcclComm_t comm,
                                         papcclStream_t stream);
/* sendcount elements from every rank to root's recvbuff (nranks * sendcount). */
PAPCCL_API papcclResult_t papcclGather(const void* sendbuff, void* recvbuff, size_t sendcount,
                                       papcclDataType_t datatype, int root, papcclComm_t comm,
                                       papcclStream_t stream);
/* Block r of root's sendbuff (nranks * recvcount) goes to rank r's recvbuff. */
PAPCCL_API papcclResult_t papcclScatter(const void* sendbuff, void* recvbuff, size_t recvcount,
                                        papcclDataType_t datatype, int root, papcclComm_t comm,
                                        papcclStream_t stream);

/* ---- Per-collective configuration (NCCL 2.32's nccl<Coll>Config) ----------------------- */

/* What one call may ask of papccl's choice of plan. Start from PAPCCL_COLLCONFIG_INITIALIZER;
 * papccl reads the fields covered by `size`. `algo` is a papcclPapAlgo_t the call must run,
 * or papcclPapAlgoNone for papccl's own choice (PAPCCL_ALGO, then the selector):
 *   AllReduce: Ring, Rhd (classic), Ac2s, Chain, Small (PAP-aware), Pap (the selector's
 *              choice, as PAPCCL_ALGO=pap gives it);
 *   Broadcast, Reduce, AllGather, ReduceScatter: Ring (the classic plan), Pap (the PAP plan);
 *   AlltoAll, Gather, Scatter: papcclPapAlgoNone only (one plan each).
 * Any other value is papcclInvalidArgument. PAPCCL_DETERMINISTIC=1 keeps its canonical plan
 * whatever `algo` says. Every rank must pass the same `algo` for a collective. */
typedef struct papcclCollConfig {
  size_t size;
  unsigned int magic; /* PAPCCL_CONFIG_MAGIC */
  unsigned int version;
  int algo;
} papcclCollConfig_t;

#define PAPCCL_COLLCONFIG_INITIALIZER \
  { sizeof(papcclCollConfig_t), PAPCCL_CONFIG_MAGIC, PAPCCL_VERSION_CODE, 0 }

/* The collectives above with a configuration (NULL: as without one). */
PAPCCL_API papcclResult_t papcclAllReduceConfig(const void* sendbuff, void* recvbuff, size_t count,
                                                papcclDataType_t datatype, papcclRedOp_t op,
                                                papcclComm_t comm, papcclStream_t stream,
                                                const papcclCollConfig_t* config);
PAPCCL_API papcclResult_t papcclBroadcastConfig(const void* sendbuff, void* recvbuff, size_t count,
                                                papcclDataType_t datatype, int root,
                                                papcclComm_t comm, papcclStream_t stream,
                                                const papcclCollConfig_t* config);
PAPCCL_API papcclResult_t papcclReduceConfig(const void* sendbuff, void* recvbuff, size_t count,
                                             papcclDataType_t datatype, papcclRedOp_t op, int root,
                                             papcclComm_t comm, papcclStream_t stream,
                                             const papcclCollConfig_t* config);
PAPCCL_API papcclResult_t papcclAllGatherConfig(const void* sendbuff, void* recvbuff,
                                                size_t sendcount, papcclDataType_t datatype,
                                                papcclComm_t comm, papcclStream_t stream,
                                                const papcclCollConfig_t* config);
PAPCCL_API papcclResult_t papcclReduceScatterConfig(const void* sendbuff, void* recvbuff,
                                                    size_t recvcount, papcclDataType_t datatype,
                                                    papcclRedOp_t op, papcclComm_t comm,
                                                    papcclStream_t stream,
                                                    const papcclCollConfig_t* config);
PAPCCL_API papcclResult_t papcclAlltoAllConfig(const void* sendbuff, void* recvbuff, size_t count,
                                               papcclDataType_t datatype, papcclComm_t comm,
                                               papcclStream_t stream,
                                               const papcclCollConfig_t* config);
PAPCCL_API papcclResult_t papcclGatherConfig(const void* sendbuff, void* recvbuff, size_t sendcount,
                                             papcclDataType_t datatype, int root, papcclComm_t comm,
                                             papcclStream_t stream,
                                             const papcclCollConfig_t* config);
PAPCCL_API papcclResult_t papcclScatterConfig(const void* sendbuff, void* recvbuff,
                                              size_t recvcount, papcclDataType_t datatype, int root,
                                              papcclComm_t comm, papcclStream_t stream,
                                              const papcclCollConfig_t* config);

/* ---- Process-arrival-pattern (PAP) telemetry -------------------------------------------- */

/* Per-rank arrays cover the first PAPCCL_PAP_STATS_MAX_RANKS ranks. */
#define PAPCCL_PAP_STATS_MAX_RANKS 64

/* Algorithm ids of papcclPapStats (lastAlgo). */
typedef enum {
  papcclPapAlgoNone = 0, /* no collective yet, or a collective without an arrival record */
  papcclPapAlgoRing = 1,
  papcclPapAlgoRhd = 2,
  papcclPapAlgoAc2s = 3, /* arrival-committed two-shot (PAP-aware) */
  papcclPapAlgoAc2sDet = 4, /* the same in its deterministic form (PAPCCL_DETERMINISTIC=1) */
  papcclPapAlgoOther = 5, /* a collective without a PAP-aware plan in this build */
  papcclPapAlgoChain = 6, /* arrival-ordered pipelined chain (PAP-aware) */
  papcclPapAlgoSmall = 7, /* small-message variant: early set reduces, late inputs added */
  papcclPapAlgoPap = 8, /* the PAP-aware plan of ReduceScatter, AllGather, Broadcast, Reduce */
  papcclPapAlgoFlat = 9 /* small allreduce on one host: every rank reads every input (flat) */
} papcclPapAlgo_t;

/* The path an operation takes (papcclPapStats.pathOps), chosen once per operation when it is
 * submitted (docs/ARCHITECTURE.md, "An op's path"). */
typedef enum {
  papcclPathLocal = 0, /* plan steps every rank chooses alone (classic, forced, grouped) */
  papcclPathBoard = 1, /* plan steps the first arriver commits on the arrival board */
  papcclPathFlat = 2, /* small allreduce on one host through shared lines, no plan */
  papcclPathArena = 3, /* through the ranks' device memory (CUDA IPC arenas) */
  papcclPathHier = 4, /* reduce to the host leader, leaders' allreduce, broadcast */
  papcclPathP2p = 5, /* a send or a receive */
  papcclNumPaths = 6
} papcclPath_t;

/* What papccl saw of the ranks' arrivals, from this rank's point of view. Times are
 * microseconds of CLOCK_MONOTONIC. A rank "arrives" when it enters the collective call (host
 * buffers). "Complete" ops are those whose every arrival this rank saw before it finished
 * (always so for AllReduce, AllGather, ReduceScatter and AlltoAll). */
typedef struct papcclPapStats {
  int nranks;
  /* The last collective. */
  uint64_t lastSeq; /* its sequence number on this communicator */
  int lastAlgo; /* papcclPapAlgo_t */
  char lastAlgoName[16];
  int lastComplete; /* 1 when every arrival was seen; the fields below need it */
  int lastEarly; /* ranks committed as early (AC2S owners); nranks for classic plans */
  int lastLateRank; /* the last rank to arrive, or -1 */
  double lastSkewUs; /* worst-case skew: last arrival minus first arrival */
  double lastTailUs; /* this rank's completion minus the last arrival */
  double lastTimeInCollUs; /* this rank's completion minus its own arrival */
  double lastPlanWaitUs; /* this rank's arrival to the start of its own work (the commit) */
  int lastOrder[PAPCCL_PAP_STATS_MAX_RANKS]; /* rank at each arrival position (-1 past N) */
  double lastLatenessUs[PAPCCL_PAP_STATS_MAX_RANKS]; /* per rank: arrival minus first arrival */
  /* Since the communicator was created. */
  uint64_t ops; /* collectives with an arrival record */
  uint64_t completeOps; /* of those, complete ones (the averages below use these) */
  uint64_t papOps; /* collectives that ran a PAP-aware plan */
  double avgSkewUs;
  double maxSkewUs;
  double avgTailUs;
  double avgTimeInCollUs;
  uint64_t lateCount[PAPCCL_PAP_STATS_MAX_RANKS]; /* times each rank arrived last */
  double avgLatenessUs[PAPCCL_PAP_STATS_MAX_RANKS];
  int habitualLateRank; /* a rank last in more than half of the complete ops (>= 8), or -1 */
  /* The last collective again: how long after its own arrival this rank expected the last
   * one, learnt from past collectives in the same place of the call sequence (it polls
   * around then instead of sleeping); 0 when it expected no wait worth predicting. */
  double lastExpectedWaitUs;
  /* Operations by the path they took (papcclPath_t), counted as they were submitted, the
   * last one's path and why it took it ("flat: allreduce <= PAPCCL_FLAT_MAX_BYTES, one
   * host"). */
  uint64_t pathOps[papcclNumPaths];
  int lastPath;
  char lastPathWhy[96];
} papcclPapStats;

/* Fills *stats with comm's arrival statistics (see papcclPapStats). Thread-safe; call it
 * between collectives. */
PAPCCL_API papcclResult_t papcclCommGetPapStats(papcclComm_t comm, papcclPapStats* stats);

/* ---- Point to point ------------------------------------------------------------------- */

/* Blocking outside a group; inside a group all sends and receives complete together at
 * papcclGroupEnd, whatever their order (no deadlock for exchanges). */
PAPCCL_API papcclResult_t papcclSend(const void* sendbuff, size_t count, papcclDataType_t datatype,
                                     int peer, papcclComm_t comm, papcclStream_t stream);
PAPCCL_API papcclResult_t papcclRecv(void* recvbuff, size_t count, papcclDataType_t datatype,
                                     int peer, papcclComm_t comm, papcclStream_t stream);

/* A receive from any source (MPI_ANY_SOURCE's job; NCCL has none): takes the next send to
 * this rank of whichever peer's message is there first, and writes that peer's rank to
 * *peer. Sends from one peer are received in the order they were sent; among peers whose
 * messages wait, the one after the last peer matched goes first (round robin). The send
 * must be of count elements of datatype, as for papcclRecv. Host buffers only (device
 * memory: papcclInvalidUsage), not inside a group, count > 0; blocking: it waits (bounded
 * by PAPCCL_TIMEOUT_S and abort, sleeping) until a message comes. On a non-blocking comm
 * the match is made at the call (after the comm's queued operations) and the data moves
 * as for papcclRecv. */
PAPCCL_API papcclResult_t papcclRecvAny(void* recvbuff, size_t count, papcclDataType_t datatype,
                                        int* peer, papcclComm_t comm, papcclStream_t stream);

/* ---- One-sided: windows, puts and signals (docs/ONE-SIDED.md) ---------------------------- */

/* A window: one registered buffer per rank of a comm, made by a collective registration. */
typedef struct papcclWindow* papcclWindow_t;

/* Signal indices per peer (sigIdx takes 0 .. PAPCCL_MAX_SIGNALS - 1). */
#define PAPCCL_MAX_SIGNALS 64
/* Registration flags (NCCL's NCCL_WIN_*): only the default is taken. */
#define PAPCCL_WIN_DEFAULT 0x00

/* Collective over comm (every rank, in the same order of registrations): registers this
 * rank's host buffer [buff, buff + size) as its part of a new window and returns the window
 * (the same one names every rank's part). size may differ between ranks and be 0 (buff may
 * then be NULL). Device memory: papcclInvalidUsage. */
PAPCCL_API papcclResult_t papcclCommWindowRegister(papcclComm_t comm, void* buff, size_t size,
                                                   papcclWindow_t* win, int winFlags);
/* Collective: waits until every put that any rank issued before its deregistration has
 * landed here, then frees the window. */
PAPCCL_API papcclResult_t papcclCommWindowDeregister(papcclComm_t comm, papcclWindow_t win);
/* This rank's buffer of win. */
PAPCCL_API papcclResult_t papcclWinGetUserPtr(papcclComm_t comm, papcclWindow_t win, void** ptr);

/* Writes count elements of datatype from localbuff into peer's part of peerWin at byte offset
 * peerWinOffset, then adds one to this rank's signal sigIdx at peer: peer sees the signal
 * only after the data. Returns once localbuff may be reused; the target takes no part (its
 * one-sided thread lands the data). Puts from one rank to one peer land in order. ctx and
 * flags must be 0; host buffers only; runs in the order of the calling thread's calls (on
 * a stream too: as for host-buffer collectives). */
PAPCCL_API papcclResult_t papcclPutSignal(const void* localbuff, size_t count,
                                          papcclDataType_t datatype, int peer,
                                          papcclWindow_t peerWin, size_t peerWinOffset, int sigIdx,
                                          int ctx, unsigned int flags, papcclComm_t comm,
                                          papcclStream_t stream);
/* A signal without data: papcclPutSignal of zero bytes. */
PAPCCL_API papcclResult_t papcclSignal(int peer, int sigIdx, int ctx, unsigned int flags,
                                       papcclComm_t comm, papcclStream_t stream);

/* How many signals (opCnt) to wait for from peer on sigIdx (ctx 0). */
typedef struct {
  int opCnt;
  int peer;
  int sigIdx;
  int ctx;
} papcclWaitSignalDesc_t;

/* Waits (bounded by PAPCCL_TIMEOUT_S and abort, sleeping; a dead peer: papcclRemoteError)
 * until, for each descriptor, peer's signal sigIdx arrived opCnt more times than waits took
 * so far, then takes those counts: every put that signalled them has landed. */
PAPCCL_API papcclResult_t papcclWaitSignal(int nDesc, const papcclWaitSignalDesc_t* signalDescs,
                                           papcclComm_t comm, papcclStream_t stream);

/* ---- Groups --------------------------------------------------------------------------- */

/* Groups nest (thread-local depth). Operations issued inside are submitted together at the
 * outermost papcclGroupEnd, which returns when they have completed. */
PAPCCL_API papcclResult_t papcclGroupStart(void);
PAPCCL_API papcclResult_t papcclGroupEnd(void);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* PAPCCL_INCLUDE_PAPCCL_H_ */
