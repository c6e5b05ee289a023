/* SPDX-License-Identifier: Apache-2.0 */
/* struct papOpDesc: one validated API call as the runtime carries it from the entry point
 * to completion: the call (what the planners see), the arrival record, and the staging of
 * device buffers. */
#ifndef PAPCCL_COMM_OP_H_
#define PAPCCL_COMM_OP_H_

#include <stddef.h>
#include <stdint.h>

#include "algo.h"
#include "papccl.h"

struct papComm;
struct CUstream_st;

/* An op's path (papPathDecide, src/arrival/path.c): which executor runs it, decided once per
 * op where its batch is known; the values are papcclPath_t's. */
enum papPath {
  PAP_PATH_LOCAL = papcclPathLocal,
  PAP_PATH_BOARD = papcclPathBoard,
  PAP_PATH_FLAT = papcclPathFlat,
  PAP_PATH_ARENA = papcclPathArena,
  PAP_PATH_HIER = papcclPathHier,
  PAP_PATH_P2P = papcclPathP2p,
  PAP_PATH_COUNT = papcclNumPaths
};

/* Why an op took its path (papPathWhyString gives the words). */
enum papPathWhy {
  PAP_WHY_NONE = 0, /* not decided */
  PAP_WHY_P2P, /* a send or receive */
  PAP_WHY_HIER, /* several hosts, a host with several ranks, blocking ungrouped allreduce */
  PAP_WHY_ARENA, /* the comm has device arenas and the op qualifies */
  PAP_WHY_FLAT, /* a lone small allreduce on one host */
  PAP_WHY_EMPTY, /* count 0 */
  PAP_WHY_ONE_RANK, /* a comm of one rank */
  PAP_WHY_NO_PAP_PLAN, /* AlltoAll, Gather, Scatter: classic plans only */
  PAP_WHY_BATCH, /* a batch with other collectives or other comms' ops */
  PAP_WHY_DET_COMMIT, /* deterministic allreduce: AC2S over the committed early set */
  PAP_WHY_DET_FIXED, /* deterministic Reduce/ReduceScatter: fixed rank order */
  PAP_WHY_PAP_OFF, /* PAPCCL_PAP=0 */
  PAP_WHY_ENV_CLASSIC, /* PAPCCL_ALGO=ring or rhd */
  PAP_WHY_CONFIG_CLASSIC, /* the call's config: ring or rhd */
  PAP_WHY_ENV_FORCED, /* PAPCCL_ALGO names an arrival-aware plan */
  PAP_WHY_CONFIG_FORCED, /* the call's config names an arrival-aware plan */
  PAP_WHY_SELECTOR, /* the decider's selector chooses from the arrivals */
  PAP_WHY_SELECTOR_PROBE, /* the same on a message board, asked every PAPCCL_PAP_PROBE-th call */
  PAP_WHY_COUNT
};

/* The path decision as the op carries it. */
struct papPathChoice {
  int path; /* enum papPath */
  int why; /* enum papPathWhy */
  /* Whether the first arriver commits the plan on the board: 0 no, 1 yes, 2 as the
   * selector's probe says (a message board, papArrivalNeedsCommit). Board ops, and device
   * arena ops (their plan's owners come from the commit). */
  int commit;
};

/* Per-op arrival record on this rank (inside struct papOpDesc). */
struct papArrival {
  int used; /* went through the board */
  int flat; /* ran flat (src/arrival/flat.c): the stamps are in the arrival state */
  int decided; /* the decider chooses the plan; others wait for the commit */
  int pos; /* arrival position */
  int slot;
  uint32_t gen;
  uint64_t tArr; /* CLOCK_MONOTONIC ns: when the call entered the library */
  uint64_t oldWord; /* the board word before our arrival (0: we were first) */
  int released; /* this rank is done reading the slot */
  uint64_t tPlan; /* CLOCK_MONOTONIC ns: the plan was known (this rank's work could start) */
  int ctx; /* prediction context (papArrivalPredict) */
  uint64_t due; /* CLOCK_MONOTONIC ns: the last arrival as predicted, or 0 */
  uint64_t spread; /* ns: the prediction's mean deviation */
  /* Bits 16-31 of the collective's message tags: the hash of every call so far on a message
   * board with the mismatch check (set by papArrivalBegin), else 0. */
  uint32_t callTag;
  /* The chain plan waiting for this rank's successor to arrive (set by the planning, taken
   * by papArrivalPoll's extension), or NULL. */
  struct papChain* chain;
};

struct papOpDesc {
  struct papCall call; /* what the call asks for, and the commit the planners build on */
  struct papComm* comm;
  papcclRedOp_t op; /* as the caller passed it (call.red is the kernel's operation) */
  int forcedAlgo; /* enum papAlgo this call asked for (papcclCollConfig_t); PAP_ALGO_AUTO: none */
  struct papPathChoice path; /* set once, by papPathDecideBatch, before the op is queued */
  void* tmp; /* owned: scaled input for pre-multiplied sum */
  struct papArrival arr;
  /* Device buffers (the CUDA layer): the op runs in the order of `stream` on pinned staging
   * copies of the user's buffers. */
  struct CUstream_st* stream;
  int onDevice;
  const void* userSend; /* the user's buffers while call.sendbuff/recvbuff point at staging */
  void* userRecv;
  size_t sendBytes; /* bytes of sendbuff/recvbuff this rank reads/writes (0: not used) */
  size_t recvBytes;
  int sendOnGpu; /* that buffer is device or managed memory (staged); else used directly */
  int recvOnGpu;
  int direct; /* device op on the CUDA IPC allreduce: the user's buffers, no staging */
};

#endif /* PAPCCL_COMM_OP_H_ */
