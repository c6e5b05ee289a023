/* SPDX-License-Identifier: Apache-2.0 */
/* The public collective and point-to-point entry points: validate, describe, enqueue. */
#include <stddef.h>
#include <string.h>

#include "api.h"
#include "arrival.h"
#include "check.h"
#include "device.h"
#include "enqueue.h"
#include "kernels.h"
#include "log.h"

#define NR ((size_t)-1) /* "nranks times count" */

/* What the entry points of one kind of call share, as data: the collective, whether it
 * reduces, the buffer sizes in units of count (0: the buffer is not used, NR: nranks *
 * count), which buffer only the root uses, and the plans a per-call config may ask for. */
struct collKind {
  const char* fn;
  int coll; /* enum papColl */
  int reduces;
  size_t sendMult, recvMult;
  int sendOnRootOnly, recvOnRootOnly;
  unsigned algos; /* bit papcclPapAlgo_t: the config's algo values this collective takes */
};

#define ALGO_BIT(a) (1u << (a))
#define ALGOS_ALLREDUCE \
  (ALGO_BIT(papcclPapAlgoRing) | ALGO_BIT(papcclPapAlgoRhd) | ALGO_BIT(papcclPapAlgoAc2s) | \
   ALGO_BIT(papcclPapAlgoChain) | ALGO_BIT(papcclPapAlgoSmall) | ALGO_BIT(papcclPapAlgoPap))
#define ALGOS_PAP_PLAN (ALGO_BIT(papcclPapAlgoRing) | ALGO_BIT(papcclPapAlgoPap))

static const struct collKind kAllReduce = {"papcclAllReduce", PAP_COLL_ALLREDUCE, 1, 1, 1, 0, 0,
                                           ALGOS_ALLREDUCE};
static const struct collKind kBroadcast = {"papcclBroadcast", PAP_COLL_BROADCAST, 0, 1, 1, 1, 0,
                                           ALGOS_PAP_PLAN};
static const struct collKind kBcast = {"papcclBcast", PAP_COLL_BROADCAST, 0, 1, 1, 1, 0, 0};
static const struct collKind kReduce = {"papcclReduce", PAP_COLL_REDUCE, 1, 1, 1, 0, 1,
                                        ALGOS_PAP_PLAN};
static const struct collKind kAllGather = {"papcclAllGather", PAP_COLL_ALLGATHER, 0, 1, NR, 0, 0,
                                           ALGOS_PAP_PLAN};
static const struct collKind kReduceScatter = {
    "papcclReduceScatter", PAP_COLL_REDUCESCATTER, 1, NR, 1, 0, 0, ALGOS_PAP_PLAN};
static const struct collKind kAlltoAll = {"papcclAlltoAll", PAP_COLL_ALLTOALL, 0, NR, NR, 0, 0, 0};
static const struct collKind kGather = {"papcclGather", PAP_COLL_GATHER, 0, 1, NR, 0, 1, 0};
static const struct collKind kScatter = {"papcclScatter", PAP_COLL_SCATTER, 0, NR, 1, 1, 0, 0};
static const struct collKind kSend = {"papcclSend", PAP_COLL_SEND, 0, 1, 0, 0, 0, 0};
static const struct collKind kRecv = {"papcclRecv", PAP_COLL_RECV, 0, 0, 1, 0, 0, 0};
static const struct collKind kRecvAny = {"papcclRecvAny", PAP_COLL_RECV, 0, 0, 1, 0, 0, 0};

papcclResult_t papCommTakesCalls(struct papComm* comm, const char* fn) {
  if (!comm->tstate && comm->nranks > 0 && atomic_load(&comm->pendingJobs) > 0) {
    PAP_WARN(
        "%s: communicator is still initializing (non-blocking init): poll "
        "papcclCommGetAsyncError until it returns papcclSuccess",
        fn);
    return papcclInvalidUsage;
  }
  if (comm->finalized) {
    PAP_WARN("%s: communicator was finalized", fn);
    return papcclInvalidUsage;
  }
  if (atomic_load_explicit(&comm->revoked, memory_order_acquire)) {
    PAP_WARN("%s: communicator was revoked: shrink, split, destroy or abort it", fn);
    return papcclInvalidUsage;
  }
  return papCommCheckSuspended(comm, fn);
}

/* The plan a per-call config asks for, as the planners name it (d->forcedAlgo). */
static papcclResult_t configAlgo(struct papOpDesc* d, const struct collKind* k,
                                 const papcclCollConfig_t* config) {
  static const int internal[] = {
      [papcclPapAlgoRing] = PAP_ALGO_RING,   [papcclPapAlgoRhd] = PAP_ALGO_RHD,
      [papcclPapAlgoAc2s] = PAP_ALGO_AC2S,   [papcclPapAlgoChain] = PAP_ALGO_CHAIN,
      [papcclPapAlgoSmall] = PAP_ALGO_SMALL, [papcclPapAlgoPap] = PAP_ALGO_ARRIVAL};
  if (config == NULL) return papcclSuccess;
  if (config->magic != PAPCCL_CONFIG_MAGIC ||
      config->size < offsetof(papcclCollConfig_t, algo) + sizeof(int)) {
    PAP_WARN("%s: config (size %zu, magic %#x) was not made with PAPCCL_COLLCONFIG_INITIALIZER",
             k->fn, config->size, config->magic);
    return papcclInvalidArgument;
  }
  int a = config->algo;
  if (a == papcclPapAlgoNone) return papcclSuccess;
  if (a < 0 || a >= 32 || !(k->algos & ALGO_BIT(a))) {
    PAP_WARN("%s: config->algo %d is not a plan of this collective (papccl.h lists them)", k->fn,
             a);
    return papcclInvalidArgument;
  }
  d->forcedAlgo = internal[a];
  return papcclSuccess;
}

/* Common checks and submission. */
static papcclResult_t collCommon(struct papOpDesc* d, const struct collKind* k, papcclRedOp_t op,
                                 const papcclCollConfig_t* config) {
  struct papComm* comm = d->comm;
  const char* fn = k->fn;
  PAP_CHECK(papCommEnter(comm, fn));
  papcclResult_t res = papCommTakesCalls(comm, fn);
  if (res != papcclSuccess) goto out;
  PAP_CHECK_GOTO(configAlgo(d, k, config), res, out);
  PAP_CHECK_GOTO(papArgCheckType(fn, d->call.dtype), res, out);
  if (k->reduces) PAP_CHECK_GOTO(papArgCheckOp(comm, fn, op, d->call.dtype, d), res, out);
  int needsRoot = d->call.coll == PAP_COLL_BROADCAST || d->call.coll == PAP_COLL_REDUCE ||
                  d->call.coll == PAP_COLL_GATHER || d->call.coll == PAP_COLL_SCATTER;
  int isP2p = d->call.coll == PAP_COLL_SEND || d->call.coll == PAP_COLL_RECV;
  if (needsRoot) PAP_CHECK_GOTO(papArgCheckRank(comm, fn, "root", d->call.root), res, out);
  if (isP2p) PAP_CHECK_GOTO(papArgCheckRank(comm, fn, "peer", d->call.root), res, out);
  int isRoot = comm->rank == d->call.root;
  size_t sendMult = k->sendMult == NR ? (size_t)comm->nranks : k->sendMult;
  size_t recvMult = k->recvMult == NR ? (size_t)comm->nranks : k->recvMult;
  int usesSend = sendMult && (!k->sendOnRootOnly || isRoot);
  int usesRecv = recvMult && (!k->recvOnRootOnly || isRoot);
  /* The size check applies on every rank (a non-root's share of an impossible op is as
   * bad); the NULL check only where the buffer is used. */
  size_t maxMult = sendMult > recvMult ? sendMult : recvMult;
  if (maxMult)
    PAP_CHECK_GOTO(papArgCheckCount(fn, d->call.count, d->call.dtype, maxMult), res, out);
  if (usesSend)
    PAP_CHECK_GOTO(
        papArgCheckBuf(fn, "sendbuff", d->call.sendbuff, d->call.count, d->call.dtype, sendMult),
        res, out);
  if (usesRecv)
    PAP_CHECK_GOTO(
        papArgCheckBuf(fn, "recvbuff", d->call.recvbuff, d->call.count, d->call.dtype, recvMult),
        res, out);
  if (papDeviceAvailable()) {
    size_t esz = papKernTypeSize(d->call.dtype);
    d->sendBytes = usesSend ? d->call.count * esz * sendMult : 0;
    d->recvBytes = usesRecv ? d->call.count * esz * recvMult : 0;
    d->onDevice = papDeviceOpNeedsStream(d);
    if (d->onDevice) PAP_CHECK_GOTO(papDeviceCheckStream(comm, d->stream), res, out);
  }
  /* The op's path, once: here outside a group, at papcclGroupEnd (its batch known) inside. */
  if (papGroupDepth() == 0) papPathDecideBatch(d, 1, 0);
  if (d->path.path == PAP_PATH_HIER)
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
  d->forcedAlgo = PAP_ALGO_AUTO;
}

/* One collective: describe it, check and submit it. */
static papcclResult_t coll(const struct collKind* k, const void* sendbuff, void* recvbuff,
                           size_t count, papcclDataType_t dtype, papcclRedOp_t op, int root,
                           papcclComm_t comm, papcclStream_t stream,
                           const papcclCollConfig_t* config) {
  struct papOpDesc d;
  describe(&d, comm, k->coll, sendbuff, recvbuff, count, dtype, root, stream);
  return collCommon(&d, k, op, config);
}

PAPCCL_API papcclResult_t papcclAllReduce(const void* sendbuff, void* recvbuff, size_t count,
                                          papcclDataType_t datatype, papcclRedOp_t op,
                                          papcclComm_t comm, papcclStream_t stream) {
  return coll(&kAllReduce, sendbuff, recvbuff, count, datatype, op, 0, comm, stream, NULL);
}

PAPCCL_API papcclResult_t papcclBroadcast(const void* sendbuff, void* recvbuff, size_t count,
                                          papcclDataType_t datatype, int root, papcclComm_t comm,
                                          papcclStream_t stream) {
  return coll(&kBroadcast, sendbuff, recvbuff, count, datatype, papcclSum, root, comm, stream,
              NULL);
}

PAPCCL_API papcclResult_t papcclBcast(void* buff, size_t count, papcclDataType_t datatype, int root,
                                      papcclComm_t comm, papcclStream_t stream) {
  return coll(&kBcast, buff, buff, count, datatype, papcclSum, root, comm, stream, NULL);
}

PAPCCL_API papcclResult_t papcclReduce(const void* sendbuff, void* recvbuff, size_t count,
                                       papcclDataType_t datatype, papcclRedOp_t op, int root,
                                       papcclComm_t comm, papcclStream_t stream) {
  return coll(&kReduce, sendbuff, recvbuff, count, datatype, op, root, comm, stream, NULL);
}

PAPCCL_API papcclResult_t papcclAllGather(const void* sendbuff, void* recvbuff, size_t sendcount,
                                          papcclDataType_t datatype, papcclComm_t comm,
                                          papcclStream_t stream) {
  return coll(&kAllGather, sendbuff, recvbuff, sendcount, datatype, papcclSum, 0, comm, stream,
              NULL);
}

PAPCCL_API papcclResult_t papcclReduceScatter(const void* sendbuff, void* recvbuff,
                                              size_t recvcount, papcclDataType_t datatype,
                                              papcclRedOp_t op, papcclComm_t comm,
                                              papcclStream_t stream) {
  return coll(&kReduceScatter, sendbuff, recvbuff, recvcount, datatype, op, 0, comm, stream, NULL);
}

PAPCCL_API papcclResult_t papcclAlltoAll(const void* sendbuff, void* recvbuff, size_t count,
                                         papcclDataType_t datatype, papcclComm_t comm,
                                         papcclStream_t stream) {
  return coll(&kAlltoAll, sendbuff, recvbuff, count, datatype, papcclSum, 0, comm, stream, NULL);
}

PAPCCL_API papcclResult_t papcclGather(const void* sendbuff, void* recvbuff, size_t sendcount,
                                       papcclDataType_t datatype, int root, papcclComm_t comm,
                                       papcclStream_t stream) {
  return coll(&kGather, sendbuff, recvbuff, sendcount, datatype, papcclSum, root, comm, stream,
              NULL);
}

PAPCCL_API papcclResult_t papcclScatter(const void* sendbuff, void* recvbuff, size_t recvcount,
                                        papcclDataType_t datatype, int root, papcclComm_t comm,
                                        papcclStream_t stream) {
  return coll(&kScatter, sendbuff, recvbuff, recvcount, datatype, papcclSum, root, comm, stream,
              NULL);
}

PAPCCL_API papcclResult_t papcclSend(const void* sendbuff, size_t count, papcclDataType_t datatype,
                                     int peer, papcclComm_t comm, papcclStream_t stream) {
  return coll(&kSend, sendbuff, NULL, count, datatype, papcclSum, peer, comm, stream, NULL);
}

PAPCCL_API papcclResult_t papcclRecv(void* recvbuff, size_t count, papcclDataType_t datatype,
                                     int peer, papcclComm_t comm, papcclStream_t stream) {
  return coll(&kRecv, NULL, recvbuff, count, datatype, papcclSum, peer, comm, stream, NULL);
}

/* ---- Per-collective configuration ----------------------------------------------------- */

PAPCCL_API papcclResult_t papcclAllReduceConfig(const void* sendbuff, void* recvbuff, size_t count,
                                                papcclDataType_t datatype, papcclRedOp_t op,
                                                papcclComm_t comm, papcclStream_t stream,
                                                const papcclCollConfig_t* config) {
  return coll(&kAllReduce, sendbuff, recvbuff, count, datatype, op, 0, comm, stream, config);
}

PAPCCL_API papcclResult_t papcclBroadcastConfig(const void* sendbuff, void* recvbuff, size_t count,
                                                papcclDataType_t datatype, int root,
                                                papcclComm_t comm, papcclStream_t stream,
                                                const papcclCollConfig_t* config) {
  return coll(&kBroadcast, sendbuff, recvbuff, count, datatype, papcclSum, root, comm, stream,
              config);
}

PAPCCL_API papcclResult_t papcclReduceConfig(const void* sendbuff, void* recvbuff, size_t count,
                                             papcclDataType_t datatype, papcclRedOp_t op, int root,
                                             papcclComm_t comm, papcclStream_t stream,
                                             const papcclCollConfig_t* config) {
  return coll(&kReduce, sendbuff, recvbuff, count, datatype, op, root, comm, stream, config);
}

PAPCCL_API papcclResult_t papcclAllGatherConfig(const void* sendbuff, void* recvbuff,
                                                size_t sendcount, papcclDataType_t datatype,
                                                papcclComm_t comm, papcclStream_t stream,
                                                const papcclCollConfig_t* config) {
  return coll(&kAllGather, sendbuff, recvbuff, sendcount, datatype, papcclSum, 0, comm, stream,
              config);
}

PAPCCL_API papcclResult_t papcclReduceScatterConfig(const void* sendbuff, void* recvbuff,
                                                    size_t recvcount, papcclDataType_t datatype,
                                                    papcclRedOp_t op, papcclComm_t comm,
                                                    papcclStream_t stream,
                                                    const papcclCollConfig_t* config) {
  return coll(&kReduceScatter, sendbuff, recvbuff, recvcount, datatype, op, 0, comm, stream,
              config);
}

PAPCCL_API papcclResult_t papcclAlltoAllConfig(const void* sendbuff, void* recvbuff, size_t count,
                                               papcclDataType_t datatype, papcclComm_t comm,
                                               papcclStream_t stream,
                                               const papcclCollConfig_t* config) {
  return coll(&kAlltoAll, sendbuff, recvbuff, count, datatype, papcclSum, 0, comm, stream, config);
}

PAPCCL_API papcclResult_t papcclGatherConfig(const void* sendbuff, void* recvbuff, size_t sendcount,
                                             papcclDataType_t datatype, int root, papcclComm_t comm,
                                             papcclStream_t stream,
                                             const papcclCollConfig_t* config) {
  return coll(&kGather, sendbuff, recvbuff, sendcount, datatype, papcclSum, root, comm, stream,
              config);
}

PAPCCL_API papcclResult_t papcclScatterConfig(const void* sendbuff, void* recvbuff,
                                              size_t recvcount, papcclDataType_t datatype, int root,
                                              papcclComm_t comm, papcclStream_t stream,
                                              const papcclCollConfig_t* config) {
  return coll(&kScatter, sendbuff, recvbuff, recvcount, datatype, papcclSum, root, comm, stream,
              config);
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
  PAP_CHECK(papCommCheckSuspended(comm, fn));
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
  const char* fn = kRecvAny.fn;
  struct papOpDesc d;
  describe(&d, comm, PAP_COLL_RECV, NULL, recvbuff, count, datatype, 0, stream);
  PAP_CHECK(papCommEnter(comm, fn));
  papcclResult_t res = anyCheck(&d, fn, peer);
  if (res == papcclSuccess) res = papRecvAnyMatch(comm, fn, peer);
  papCommLeave(comm);
  if (res != papcclSuccess) return res;
  d.call.root = *peer;
  d.recvBytes = 0;
  return collCommon(&d, &kRecvAny, papcclSum, NULL);
}
