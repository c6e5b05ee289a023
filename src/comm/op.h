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
