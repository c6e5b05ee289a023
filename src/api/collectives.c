/* SPDX-License-Identifier: Apache-2.0 */
/* The public collective and point-to-point entry points: validate, describe, enqueue. */
#include <string.h>

#include "api.h"
#include "check.h"
#include "device.h"
#include "enqueue.h"
#include "kernels.h"
#include "log.h"

#define NR ((size_t)-1) /* "nranks times count" */

/* Common checks and submission. sendMult/recvMult: buffer sizes in units of count (0: the
 * buffer is not used, NR: nranks * count). */
static papcclResult_t collCommon(struct papOpDesc* d, const char* fn, int reduces, papcclRedOp_t op,
                                 size_t sendMult, size_t recvMult, int sendOnRootOnly,
                                 int recvOnRootOnly) {
  struct papComm* comm = d->comm;
  PAP_CHECK(papCommEnter(comm, fn));
  papcclResult_t res = papcclSuccess;
  if (!comm->tstate && comm->nranks > 0 && atomic_load(&comm->pendingJobs) > 0) {
    PAP_WARN(
        "%s: communicator is still initializing (non-blocking init): poll "
        "papcclCommGetAsyncError until it returns papcclSuccess",
        fn);
    res = papcclInvalidUsage;
    goto out;
  }
  if (comm->finalized) {
    PAP_WARN("%s: communicator was finalized", fn);
    res = papcclInvalidUsage;
    goto out;
  }
  if (atomic_load_explicit(&comm->revoked, memory_order_acquire)) {
    PAP_WARN("%s: communicator was revoked: shrink, split, destroy or abort it", fn);
    res = papcclInvalidUsage;
    goto out;
  }
  PAP_CHECK_GOTO(papArgCheckType(fn, d->call.dtype), res, out);
  if (reduces) PAP_CHECK_GOTO(papArgCheckOp(comm, fn, op, d->call.dtype, d), res, out);
  int needsRoot = d->call.coll == PAP_COLL_BROADCAST || d->call.coll == PAP_COLL_REDUCE ||
                  d->call.coll == PAP_COLL_GATHER || d->call.coll == PAP_COLL_SCATTER;
  int isP2p = d->call.coll == PAP_COLL_SEND || d->call.coll == PAP_COLL_RECV;
  if (needsRoot) PAP_CHECK_GOTO(papArgCheckRank(comm, fn, "root", d->call.root), res, out);
  if (isP2p) PAP_CHECK_GOTO(papArgCheckRank(comm, fn, "peer", d->call.root), res, out);
  int isRoot = comm->rank == d->call.root;
  if (sendMult == NR) sendMult = (size_t)comm->nranks;
  if (recvMult == NR) recvMult = (size_t)comm->nranks;
  /* The size check applies on every rank (a non-root's share of an impossible op is as
   * bad); the NULL check only where the buffer is used. */
  size_t maxMult = sendMult > recvMult ? sendMult : recvMult;
  if (maxMult)
    PAP_CHECK_GOTO(papArgCheckCount(fn, d->call.count, d->call.dtype, maxMult), res, out);
  if (sendMult && (!sendOnRootOnly || isRoot))
    PAP_CHECK_GOTO(
        papArgCheckBuf(fn, "sendbuff", d->call.sendbuff, d->call.count, d->call.dtype, sendMult),
        res, out);
  if (recvMult && (!recvOnRootOnly || isRoot))
    PAP_CHECK_GOTO(
        papArgCheckBuf(fn, "recvbuff", d->call.recvbuff, d->call.count, d->call.dtype, recvMult),
        res, out);
  if (papDeviceAvailable()) {
    size_t esz = papKernTypeSize(d->call.dtype);
    d->sendBytes = sendMult && (!sendOnRootOnly || isRoot) ? d->call.count * esz * sendMult : 0;
    d->recvBytes = recvMult && (!recvOnRootOnly || isRoot) ? d->call.count * esz * recvMult : 0;
    d->onDevice = papDeviceOpNeedsStream(d);
    if (d->onDevice) PAP_CHECK_GOTO(papDeviceCheckStream(comm, d->stream), res, out);
  }
  if (reduces && papHierApplies(d, op))
    res = papHierAllReduce(d, op);
  else
    res = papEnqueue(d);
out:
  papCommLeave(comm);
  return res;
}

static void describe(struct papOpDesc* d, papcclComm_t comm, int coll, const void* sendbuff,
                     void* recvbuff, size_t count, papcclDataType_t dtype, int root,
                     papcclStream_t stream) {
  memset(d, 0, sizeof(*d));
  d->stream = stream;
  d->comm = comm;
  d->call.coll = coll;
  d->call.sendbuff = sendbuff;
  d->call.recvbuff = recvbuff;
  d->call.count = count;
  d->call.dtype = dtype;
  d->call.root = root;
}

PAPCCL_API papcclResult_t papcclAllReduce(const void* sendbuff, void* recvbuff, size_t count,
                                          papcclDataType_t datatype, papcclRedOp_t op,
                                          papcclComm_t comm, papcclStream_t stream) {
  struct papOpDesc d;
  describe(&d, comm, PAP_COLL_ALLREDUCE, sendbuff, recvbuff, count, datatype, 0, stream);
  return collCommon(&d, "papcclAllReduce", 1, op, 1, 1, 0, 0);
}

PAPCCL_API papcclResult_t papcclBroadcast(const void* sendbuff, void* recvbuff, size_t count,
                                          papcclDataType_t datatype, int root, papcclComm_t comm,
                                          papcclStream_t stream) {
  struct papOpDesc d;
  describe(&d, comm, PAP_COLL_BROADCAST, sendbuff, recvbuff, count, datatype, root, stream);
  return collCommon(&d, "papcclBroadcast", 0, papcclSum, 1, 1, 1, 0);
}

PAPCCL_API papcclResult_t papcclBcast(void* buff, size_t count, papcclDataType_t datatype, int root,
                                      papcclComm_t comm, papcclStream_t stream) {
  struct papOpDesc d;
  describe(&d, comm, PAP_COLL_BROADCAST, buff, buff, count, datatype, root, stream);
  return collCommon(&d, "papcclBcast", 0, papcclSum, 1, 1, 1, 0);
}

PAPCCL_API papcclResult_t papcclReduce(const void* sendbuff, void* recvbuff, size_t count,
                                       papcclDataType_t datatype, papcclRedOp_t op, int root,
                                       papcclComm_t comm, papcclStream_t stream) {
  struct papOpDesc d;
  describe(&d, comm, PAP_COLL_REDUCE, sendbuff, recvbuff, count, datatype, root, stream);
  return collCommon(&d, "papcclReduce", 1, op, 1, 1, 0, 1);
}

PAPCCL_API papcclResult_t papcclAllGather(const void* sendbuff, void* recvbuff, size_t sendcount,
                                          papcclDataType_t datatype, papcclComm_t comm,
                                          papcclStream_t stream) {
  struct papOpDesc d;
  describe(&d, comm, PAP_COLL_ALLGATHER, sendbuff, recvbuff, sendcount, datatype, 0, stream);
  return collCommon(&d, "papcclAllGather", 0, papcclSum, 1, NR, 0, 0);
}

PAPCCL_API papcclResult_t papcclReduceScatter(const void* sendbuff, void* recvbuff,
                                              size_t recvcount, papcclDataType_t datatype,
                                              papcclRedOp_t op, papcclComm_t comm,
                                              papcclStream_t stream) {
  struct papOpDesc d;
  describe(&d, comm, PAP_COLL_REDUCESCATTER, sendbuff, recvbuff, recvcount, datatype, 0, stream);
  return collCommon(&d, "papcclReduceScatter", 1, op, NR, 1, 0, 0);
}

PAPCCL_API papcclResult_t papcclAlltoAll(const void* sendbuff, void* recvbuff, size_t count,
                                         papcclDataType_t datatype, papcclComm_t comm,
                                         papcclStream_t stream) {
  struct papOpDesc d;
  describe(&d, comm, PAP_COLL_ALLTOALL, sendbuff, recvbuff, count, datatype, 0, stream);
  return collCommon(&d, "papcclAlltoAll", 0, papcclSum, NR, NR, 0, 0);
}

PAPCCL_API papcclResult_t papcclGather(const void* sendbuff, void* recvbuff, size_t sendcount,
                                       papcclDataType_t datatype, int root, papcclComm_t comm,
                                       papcclStream_t stream) {
  struct papOpDesc d;
  describe(&d, comm, PAP_COLL_GATHER, sendbuff, recvbuff, sendcount, datatype, root, stream);
  return collCommon(&d, "papcclGather", 0, papcclSum, 1, NR, 0, 1);
}

PAPCCL_API papcclResult_t papcclScatter(const void* sendbuff, void* recvbuff, size_t recvcount,
                                        papcclDataType_t datatype, int root, papcclComm_t comm,
                                        papcclStream_t stream) {
  struct papOpDesc d;
  describe(&d, comm, PAP_COLL_SCATTER, sendbuff, recvbuff, recvcount, datatype, root, stream);
  return collCommon(&d, "papcclScatter", 0, papcclSum, NR, 1, 1, 0);
}

PAPCCL_API papcclResult_t papcclSend(const void* sendbuff, size_t count, papcclDataType_t datatype,
                                     int peer, papcclComm_t comm, papcclStream_t stream) {
  struct papOpDesc d;
  describe(&d, comm, PAP_COLL_SEND, sendbuff, NULL, count, datatype, peer, stream);
  return collCommon(&d, "papcclSend", 0, papcclSum, 1, 0, 0, 0);
}

PAPCCL_API papcclResult_t papcclRecv(void* recvbuff, size_t count, papcclDataType_t datatype,
                                     int peer, papcclComm_t comm, papcclStream_t stream) {
  struct papOpDesc d;
  describe(&d, comm, PAP_COLL_RECV, NULL, recvbuff, count, datatype, peer, stream);
  return collCommon(&d, "papcclRecv", 0, papcclSum, 0, 1, 0, 0);
}

/* What a receive from any source needs beyond papcclRecv's checks, before it waits. */
static papcclResult_t anyCheck(struct papOpDesc* d, const char* fn, const int* peer) {
  struct papComm* comm = d->comm;
  if (peer == NULL) {
    PAP_WARN("%s: peer is NULL (it receives the rank the message came from)", fn);
    return papcclInvalidArgument;
  }
  if (papGroupDepth() > 0) {
    PAP_WARN("%s: not inside a group (its peer must be known before the group's plan)", fn);
    return papcclInvalidUsage;
  }
  if (comm->finalized || comm->tstate == NULL ||
      atomic_load_explicit(&comm->revoked, memory_order_acquire)) {
    PAP_WARN("%s: communicator is %s", fn,
             comm->finalized        ? "finalized"
             : comm->tstate == NULL ? "still initializing"
                                    : "revoked");
    return papcclInvalidUsage;
  }
  PAP_CHECK(papArgCheckType(fn, d->call.dtype));
  if (d->call.count == 0) {
    PAP_WARN("%s: count is 0 (a send of nothing sends no message to match)", fn);
    return papcclInvalidArgument;
  }
  PAP_CHECK(papArgCheckCount(fn, d->call.count, d->call.dtype, 1));
  PAP_CHECK(papArgCheckBuf(fn, "recvbuff", d->call.recvbuff, d->call.count, d->call.dtype, 1));
  if (papDeviceAvailable()) {
    d->recvBytes = d->call.count * papKernTypeSize(d->call.dtype);
    if (papDeviceOpNeedsStream(d)) {
      PAP_WARN("%s: recvbuff is device memory; a receive from any source takes host buffers", fn);
      return papcclInvalidUsage;
    }
  }
  return papcclSuccess;
}

PAPCCL_API papcclResult_t papcclRecvAny(void* recvbuff, size_t count, papcclDataType_t datatype,
                                        int* peer, papcclComm_t comm, papcclStream_t stream) {
  static const char fn[] = "papcclRecvAny";
  struct papOpDesc d;
  describe(&d, comm, PAP_COLL_RECV, NULL, recvbuff, count, datatype, 0, stream);
  PAP_CHECK(papCommEnter(comm, fn));
  papcclResult_t res = anyCheck(&d, fn, peer);
  if (res == papcclSuccess) res = papRecvAnyMatch(comm, fn, peer);
  papCommLeave(comm);
  if (res != papcclSuccess) return res;
  d.call.root = *peer;
  d.recvBytes = 0;
  return collCommon(&d, fn, 0, papcclSum, 0, 1, 0, 0);
}
