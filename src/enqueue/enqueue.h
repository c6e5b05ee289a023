/* SPDX-License-Identifier: Apache-2.0 */
/* From validated calls to executed plans: argument checks, running ops on the calling
 * thread, and the per-communicator progress thread that runs queued jobs. */
#ifndef PAPCCL_ENQUEUE_ENQUEUE_H_
#define PAPCCL_ENQUEUE_ENQUEUE_H_

#include "comm.h"
#include "engine.h"

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

/* Executes ops (any comms) to completion on the calling thread: builds each comm's plan and
 * drives all of them together, sleeping when nothing moves. */
papcclResult_t papRunOps(struct papOpDesc* ops, int nops);

/* The receive from any source (anysource.c): waits until some peer's next send to this rank
 * has begun to arrive and names that peer in *peerOut (peers in round-robin order from the
 * one after the last match); the receive itself is then an ordinary papcclRecv from it. */
papcclResult_t papRecvAnyMatch(struct papComm* comm, const char* fn, int* peerOut);

/* Progress thread (progress.c). */
papcclResult_t papProgressStart(struct papComm* comm);
/* Queues job (its ops, or job->run) for the thread; returns papcclInProgress, or an error
 * when the comm is being torn down (the job is dropped and freed then). */
papcclResult_t papProgressSubmit(struct papComm* comm, struct papJob* job);
void papProgressStop(struct papComm* comm);
/* Around an operation's run. While one runs, its thread drives the transport and the
 * progress thread stays out of the backend: two threads in one UCX worker take each
 * other's events and wake each other up without end. After the last one, the progress
 * thread serves the backend again (remote atomics on rank 0's board). */
void papProgressUserEnter(struct papComm* comm);
void papProgressUserLeave(struct papComm* comm);
/* Sleeps until the progress thread has run every queued job. */
void papCommWaitPendingJobs(struct papComm* comm);

#endif /* PAPCCL_ENQUEUE_ENQUEUE_H_ */
