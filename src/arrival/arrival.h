/* SPDX-License-Identifier: Apache-2.0 */
/* The arrival layer as the layers above see it (docs/PAP-ENGINE.md): the board's size, the
 * layer's life with its communicator, the statistics, and the three calls of a batch. Its
 * state (struct papArrivalState) and everything else are private (arrival_int.h). */
#ifndef PAPCCL_PAP_PAP_H_
#define PAPCCL_PAP_PAP_H_

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "algo.h"
#include "comm.h"
#include "papccl.h"

/* The arrival board: PAP_BOARD_SLOTS slots of 64-bit words held by the home rank (rank 0)
 * and reached through the transport (its board or home table, wake->notify). Slot layout
 * (arrival_int.h): word, released, the first arriver's call (signature, root), rank_at[N],
 * t_arr[N], each slot starting on a 64-byte line; after the slots, per slot, the mismatch check's words
 * (docs/PAP-ENGINE.md section 11): mark, then per rank its call's signature and root. */
#define PAP_BOARD_SLOTS 4
static inline size_t papBoardSlotStride(int nranks) {
  return (4 + 2 * (size_t)nranks + 7) & ~(size_t)7;
}
static inline size_t papBoardWords(int nranks) {
  return (size_t)PAP_BOARD_SLOTS * papBoardSlotStride(nranks) +
         (size_t)PAP_BOARD_SLOTS * (1 + 2 * (size_t)nranks);
}

/* The layer's life with its communicator (src/api/comm.c): init after the engine and the
 * transport, free at teardown (also after a partial init). */
papcclResult_t papArrivalInit(struct papComm* comm);
void papArrivalFree(struct papComm* comm);
/* Destroy on rank 0 of a network board: waits (bounded) until every rank released the
 * slots of the last collectives. */
void papArrivalDrainBoard(struct papComm* comm);
/* The bytes of each rank's flat area the transport maps (the same on every rank:
 * PAPCCL_FLAT_MAX_BYTES; flat.c). */
size_t papFlatAreaBytes(int nranks);
/* What a rank learnt of its arrivals carries over to its rank of a grown comm
 * (papcclCommGrow): the selector's buckets (measured skews, gaps, tails and modes; not a
 * message board's call counts, which every rank of the new comm must count alike from zero)
 * and the predicted waits. The caller holds parent's progress lock; child is not in use. */
void papArrivalInherit(struct papComm* child, const struct papComm* parent);
/* papcclCommGetPapStats's figures (papcclInvalidUsage before the comm is up). */
papcclResult_t papArrivalStats(struct papComm* comm, papcclPapStats* stats);

/* An op's path (path.c; docs/ARCHITECTURE.md, "An op's path"): which executor runs op and
 * why, the same on every rank. ctx: PAP_PATHCTX_* of the op's batch. papPathDecideBatch
 * decides every op of a batch once (where the batch is known: the call outside a group,
 * papcclGroupEnd inside one), records the choice on the op (op->path, op->call.arena) and
 * counts it in the comm's statistics; grouped: the ops were called inside a group. */
enum {
  PAP_PATHCTX_GROUPED = 1u, /* called inside a group */
  PAP_PATHCTX_SHARED = 2u, /* the batch holds other ops */
  PAP_PATHCTX_BOARD_SHARED = 4u /* ... other collectives, or ops of other comms */
};
struct papPathChoice papPathDecide(const struct papComm* comm, const struct papOpDesc* op,
                                   unsigned ctx);
void papPathDecideBatch(struct papOpDesc* ops, int nops, int grouped);
/* "flat", "board", ...; the reason in words. */
const char* papPathName(int path);
const char* papPathWhyString(int why);

/* A batch of ops through the layer (papRunOps, src/enqueue/enqueue.c), with the progress lock
 * of each of its comms held, in three calls (src/arrival/batch.c):
 *
 * papArrivalBegin: the mismatch checks left pending (a failure is the comm's error), then a
 * lone flat allreduce runs to completion (flat.c), or every collective joins the batch in
 * flight (the mismatch check's), arrives on its comm's board in call order and, where the
 * plan depends on arrivals, waits for the commit (op->call.commit); each collective gets its
 * tag bits (op->arr.callTag). *stageOut: PAP_BATCH_OVER when nothing is left to plan (the
 * flat run or a failed check), PAP_BATCH_ARRIVED when the caller plans and drives the batch
 * (if the result is success).
 *
 * papArrivalPoll: inside the caller's drive loop (and the layer's own waits: the one way
 * into the mismatch check's polls, mismatch.c), any of PAP_POLL_* (w may be NULL without DIAG): EXTEND appends the rest
 * of a chain once its successor arrived (*progressedOut = 1 then); NOTICE reads a message
 * board's mismatch notice (one relaxed load when none came); DIAG refreshes the hang
 * diagnosis with w; MISMATCH is the 100 ms health check for mismatched calls; EXPLAIN asks,
 * before a dead peer is reported, whether a mismatch notice explains it.
 *
 * papArrivalEnd: after a batch that arrived, on success, the calls of a plan that heard
 * nothing go to the home and every op completes (statistics, selector, the board's mismatch
 * verdict: a failing op is its comm's error); on failure, a mismatch notice turns the result
 * into papcclInvalidUsage and *brokenOut = 1 (the caller resets its plans). Then, for every
 * batch (stage PAP_BATCH_NONE where Begin was not called), the batch leaves the flight and the
 * diagnosis ends with the result. Returns the batch's result. */
enum {
  PAP_BATCH_NONE = 0,
  PAP_BATCH_OVER,
  PAP_BATCH_ARRIVED
};
enum {
  PAP_POLL_EXTEND = 1u,
  PAP_POLL_NOTICE = 2u,
  PAP_POLL_DIAG = 4u,
  PAP_POLL_MISMATCH = 8u,
  PAP_POLL_EXPLAIN = 16u
};
papcclResult_t papArrivalBegin(struct papComm** comms, int ncomms, struct papOpDesc* ops, int nops,
                               int* stageOut);
papcclResult_t papArrivalPoll(struct papComm* comm, unsigned what, struct papWait* w,
                              int* progressedOut);
papcclResult_t papArrivalEnd(struct papComm** comms, int ncomms, struct papOpDesc* ops, int nops,
                             papcclResult_t res, int stage, int* brokenOut);

#endif /* PAPCCL_PAP_PAP_H_ */
