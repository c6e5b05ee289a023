/* SPDX-License-Identifier: Apache-2.0 */
/* The API layer: the public entry points (papccl.h) and what only they share: the comm's
 * lifecycle, submission (run now, queue, or keep for the group's end) and the hierarchy. */
#ifndef PAPCCL_API_API_H_
#define PAPCCL_API_API_H_

#include "comm.h"
#include "edge.h"
#include "papccl.h"

/* Initializes a blocking or non-blocking comm shell; used by init and split. */
papcclResult_t papCommInitRankInternal(struct papComm* comm, const papcclUniqueId* id);
papcclResult_t papCommAllocShell(int rank, int nranks, const papcclConfig_t* config,
                                 struct papComm** commOut);
void papCommFreeShell(struct papComm* comm);
/* ---- Hierarchy (hier.c) ---------------------------------------------------------------- */
/* Collective over comm, right after its transport is up: creates hierLocal/hierCross when
 * the ranks span hosts and some host has more than one rank (and PAPCCL_HIER is not 0). */
papcclResult_t papHierSetup(struct papComm* comm);
/* Sets the abort flag of the inner communicators (before an abort waits for calls). */
void papHierAbortFlags(struct papComm* comm);
/* papcclCommDumpState's text for comm (any thread). */
void papCommStateText(struct papComm* comm, char* buf, size_t len);
/* Destroys (abort: aborts) the inner communicators. */
void papHierFree(struct papComm* comm, int abort);
/* Collective flush of the inner communicators (papcclCommFinalize). */
papcclResult_t papHierFinalize(struct papComm* comm);
/* The first asynchronous error of an inner communicator, or papcclSuccess. */
papcclResult_t papHierAsyncError(struct papComm* comm);

/* Submission (submit.c): runs op now (blocking comm), hands it to the progress thread
 * (non-blocking comm), or keeps it for papcclGroupEnd (inside a group). */
papcclResult_t papEnqueue(struct papOpDesc* op);
int papGroupDepth(void);
papcclResult_t papGroupAddOp(const struct papOpDesc* op);
papcclResult_t papGroupAddInit(struct papComm* comm, const papcclUniqueId* id);

/* The comm takes operations: initialized, not finalized, not revoked; a WARN naming fn says
 * why not (collectives.c). */
papcclResult_t papCommTakesCalls(struct papComm* comm, const char* fn);

/* The hierarchical allreduce (hier.c) of a call whose path is PAP_PATH_HIER. */
papcclResult_t papHierAllReduce(const struct papOpDesc* d, papcclRedOp_t op);

#endif /* PAPCCL_API_API_H_ */
