/* SPDX-License-Identifier: Apache-2.0 */
/* Test shim for the path decision (src/arrival/path.c): a made-up communicator (ranks,
 * blocking, host hierarchy, flat lines, message board, device arenas) and one call in its
 * batch, decided as papPathDecideBatch decides it. */
#ifndef PAPCCL_TESTS_SHIM_PATH_H_
#define PAPCCL_TESTS_SHIM_PATH_H_

#include <stddef.h>

#include "papccl.h"

#ifdef __cplusplus
extern "C" {
#endif

struct papTestPathComm {
  int nranks;
  int blocking;
  int hier; /* has the inner comms of a host hierarchy */
  size_t flatCap; /* bytes of a flat line (0: no flat lines) */
  int msgBoard; /* the board is a message board (ucx) */
  size_t arenaBytes; /* bytes of each rank's device arena (0: none) */
  size_t arenaMinBytes; /* PAPCCL_CUDA_IPC_MIN_BYTES as agreed at init */
};

struct papTestPathCall {
  const char* coll; /* "allreduce", "broadcast", "reduce", "allgather", "reducescatter",
                     * "alltoall", "gather", "scatter", "send", "recv" */
  size_t count;
  papcclDataType_t dtype;
  papcclRedOp_t op;
  papcclPapAlgo_t configAlgo; /* the call's papcclCollConfig_t algo (papcclPapAlgoNone) */
  int grouped; /* called inside a group */
  int batchOps; /* ops in its batch (1: alone), all on its comm */
  int batchColls; /* of those, collectives (itself included); the others are sends */
};

/* The path (papcclPath_t), *commitOut (0, 1 or 2: the probe decides) and "path: why" in
 * why; -1 for a bad case, -2 when op->call.arena disagrees with the path, -3 when the
 * statistics did not count the decision. Reads the parameters afresh (papParamReset). */
int papTestPathDecide(const struct papTestPathComm* c, const struct papTestPathCall* call,
                      int* commitOut, char* why, size_t cap);

#ifdef __cplusplus
}
#endif

#endif /* PAPCCL_TESTS_SHIM_PATH_H_ */
