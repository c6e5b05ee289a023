/* SPDX-License-Identifier: Apache-2.0 */
/* The API edge, for the entry points of this library and of the drop-in: a call on a comm
 * starts with papCommEnter and ends with papCommLeave. */
#ifndef PAPCCL_API_EDGE_H_
#define PAPCCL_API_EDGE_H_

#include <stdint.h>

#include "papccl.h"

/* Validates comm (not NULL, alive, not aborted), counts the call and routes WARN text into
 * the comm's last error. */
papcclResult_t papCommEnter(struct papComm* comm, const char* fn);
void papCommLeave(struct papComm* comm);
/* papcclSuccess, or papcclInvalidUsage with a WARN naming fn when comm is suspended
 * (papcclCommSuspend): an operation on it must wait for papcclCommResume. */
papcclResult_t papCommCheckSuspended(struct papComm* comm, const char* fn);
/* A 64-bit hash of comm's key: the same on every rank of comm (NCCL's commHash). Call it
 * between papCommEnter and papCommLeave. */
uint64_t papCommHash(const struct papComm* comm);

#endif /* PAPCCL_API_EDGE_H_ */
