/* SPDX-License-Identifier: Apache-2.0 */
/* From validated API calls to executed plans: groups, submission, waiting. */
#ifndef PAPCCL_ENQUEUE_ENQUEUE_H_
#define PAPCCL_ENQUEUE_ENQUEUE_H_

#include "comm/comm.h"
#include "proxy/engine.h"

/* Argument checks (argcheck.c); each logs "<Op>: <argument> ..." on failure. */
papcclResult_t papArgCheckType(const char* fn, papcclDataType_t dtype);
papcclResult_t papArgCheckOp(struct papComm* comm, const char* fn, papcclRedOp_t op,
                             papcclDataType_t dtype, struct papOpDesc* desc);
/* count elements of dtype, times mult, must fit a 48-bit address space. */
papcclResult_t papArgCheckCount(const char* fn, size_t count, papcclDataType_t dtype, size_t mult);
/* buf must not be NULL when count > 0 (call papArgCheckCount first). */
papcclResult_t papArgCheckBuf(const char* fn, const char* what, const void* buf, size_t count,
                              papcclDataType_t dtype, size_t mult);
papcclResult_t papArgCheckRank(struct papComm* comm, const char* fn, const char* what, int r);

/* Runs op now (blocking comm), hands it to the progress thread (non-blocking comm), or keeps
 * it for papcclGroupEnd (inside a group). */
papcclResult_t papEnqueue(struct papOpDesc* op);

/* Executes ops (any comms) to completion on the calling thread: builds each comm's plan and
 * drives all of them together, sleeping when nothing moves. */
papcclResult_t papRunOps(struct papOpDesc* ops, int nops);

/* Group state (group.c). */
int papGroupDepth(void);

/* The hierarchical allreduce (src/comm/hier.c): does it serve this call, and run it. */
int papHierApplies(const struct papOpDesc* d, papcclRedOp_t op);
papcclResult_t papHierAllReduce(const struct papOpDesc* d, papcclRedOp_t op);
papcclResult_t papGroupAddOp(const struct papOpDesc* op);
papcclResult_t papGroupAddInit(struct papComm* comm, const papcclUniqueId* id);

#endif /* PAPCCL_ENQUEUE_ENQUEUE_H_ */
