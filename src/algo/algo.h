/* SPDX-License-Identifier: Apache-2.0 */
/* Collective algorithms: each turns one op into plan steps (see algo/README.md). */
#ifndef PAPCCL_ALGO_ALGO_H_
#define PAPCCL_ALGO_ALGO_H_

#include <stddef.h>
#include <stdint.h>

#include "proxy/engine.h"

/* Stored in the arrival board's commit word (6 bits). */
enum papAlgo {
  PAP_ALGO_AUTO = 0,
  PAP_ALGO_RING,
  PAP_ALGO_RHD,
  PAP_ALGO_AC2S, /* arrival-committed two-shot (src/algo/ac2s.c) */
  PAP_ALGO_AC2S_DET, /* the same, each element reduced along one canonical tree */
  PAP_ALGO_CHAIN, /* arrival-ordered pipelined chain (src/algo/chain.c) */
  PAP_ALGO_SMALL, /* small messages: early set reduces, late ranks add their inputs */
  PAP_ALGO_PAP, /* the PAP-aware plan of ReduceScatter, AllGather, Broadcast, Reduce */
  PAP_ALGO_COUNT
};

/* Planners return this when a plan-building call failed (out of memory, already logged). */
#define PLAN_OK(idx) \
  do { \
    if ((idx) < 0) { \
      PAP_WARN("out of memory while building a plan"); \
      return papcclSystemError; \
    } \
  } while (0)

/* A local copy step when dst and src differ (and bytes > 0). */
papcclResult_t papPlanCopyIfNeeded(struct papEngine* e, void* dst, const void* src, size_t bytes);

/* Appends the steps of op to the engine's plan. */
papcclResult_t papAlgoPlan(struct papEngine* e, struct papOpDesc* op);

/* The classic allreduce algorithm for bytes on nranks: PAPCCL_ALGO=ring|rhd, else by size. */
enum papAlgo papAlgoSelectAllReduce(size_t bytes, int nranks);
const char* papAlgoName(enum papAlgo a);
/* PAPCCL_ALGO value to algorithm (PAP_ALGO_AUTO when unknown, after one warning). */
enum papAlgo papAlgoFromName(const char* name);

/* A buffer cut into blocks, each cut into chunks ("units"). Tracks per unit the last step
 * that wrote it and the last that read it, and whether the result buffer holds it yet, so
 * algorithms get their dependencies (RAW and WAR) right in place and out of place. */
struct papGeom {
  const char* sendbuff; /* where unwritten units are read from */
  char* recvbuff; /* where units are written */
  size_t esz;
  int nblocks;
  size_t chunkElems;
  size_t* blkOff; /* [nblocks+1] element offsets */
  int* unitOff; /* [nblocks+1] first unit of each block */
  int32_t* lastW; /* [nunits] */
  int32_t* lastR;
  uint8_t* written;
  int nunits;
};

papcclResult_t papGeomInit(struct papEngine* e, struct papGeom* g, const void* sendbuff,
                           void* recvbuff, size_t count, size_t esz, int nblocks);
static inline int papGeomChunks(const struct papGeom* g, int b) {
  return g->unitOff[b + 1] - g->unitOff[b];
}
/* Element range of unit (b, k). */
void papGeomUnit(const struct papGeom* g, int b, int k, size_t* offElems, size_t* nElems);

/* Unit operations; return the step index or -1 (plan failed). */
int papGeomSend(struct papEngine* e, struct papGeom* g, int peer, int b, int k);
int papGeomRecv(struct papEngine* e, struct papGeom* g, int peer, int b, int k);
int papGeomRecvReduce(struct papEngine* e, struct papGeom* g, int peer, int b, int k,
                      papcclDataType_t dtype, enum papRedKind red);

/* Per-collective planners. */
papcclResult_t papAllReduceRing(struct papEngine* e, struct papOpDesc* op);
papcclResult_t papAllReduceRhd(struct papEngine* e, struct papOpDesc* op);
/* AC2S over op->owners[0..op->nE-1] (PAP_ALGO_AC2S or _DET in op->algo). */
papcclResult_t papAllReduceAc2s(struct papEngine* e, struct papOpDesc* op);
/* AllReduce, AllGather, Broadcast, ReduceScatter and Reduce through the ranks' device arenas
 * (src/algo/ipc.c), when e->dev has them and the op qualifies (papAlgoIpcEligible: the same
 * answer on every rank). Contributions are taken early ranks first (the PAP commit). */
int papAlgoIpcEligible(const struct papOpDesc* op, const struct papEngine* e);
papcclResult_t papPlanIpc(struct papEngine* e, struct papOpDesc* op);
/* Small-message variant over the same commit (early set op->owners[0..nE-1]). */
papcclResult_t papAllReduceSmall(struct papEngine* e, struct papOpDesc* op);

/* Arrival-ordered chain: the rank at arrival position p reduces what p-1 sends into its own
 * input and forwards it to p+1; the last position holds the result, which flows back. The
 * first part is planned at arrival; the rest once the successor (position p+1) arrived. */
struct papChain {
  struct papOpDesc* op;
  struct papGeom g;
  int pos; /* arrival position */
  int pred; /* rank at pos - 1, or -1 */
};
papcclResult_t papAllReduceChainBegin(struct papEngine* e, struct papOpDesc* op,
                                      struct papChain** chainOut);
papcclResult_t papAllReduceChainFinish(struct papEngine* e, struct papChain* c, int succ);
papcclResult_t papPlanAllGather(struct papEngine* e, struct papOpDesc* op);
papcclResult_t papPlanReduceScatter(struct papEngine* e, struct papOpDesc* op);
papcclResult_t papPlanBroadcast(struct papEngine* e, struct papOpDesc* op);
papcclResult_t papPlanReduceColl(struct papEngine* e, struct papOpDesc* op);
papcclResult_t papPlanAlltoAll(struct papEngine* e, struct papOpDesc* op);
papcclResult_t papPlanGather(struct papEngine* e, struct papOpDesc* op);
papcclResult_t papPlanScatter(struct papEngine* e, struct papOpDesc* op);
papcclResult_t papPlanP2p(struct papEngine* e, struct papOpDesc* op);
/* PAP-aware plans over the commit in op->owners[0..nE-1] (src/algo/pap_colls.c). */
papcclResult_t papPlanReduceScatterPap(struct papEngine* e, struct papOpDesc* op);
papcclResult_t papPlanAllGatherPap(struct papEngine* e, struct papOpDesc* op);
papcclResult_t papPlanBroadcastPap(struct papEngine* e, struct papOpDesc* op);
papcclResult_t papPlanReduceCollPap(struct papEngine* e, struct papOpDesc* op);

#endif /* PAPCCL_ALGO_ALGO_H_ */
