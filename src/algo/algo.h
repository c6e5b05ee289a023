/* SPDX-License-Identifier: Apache-2.0 */
/* Collective algorithms: each turns one op into plan steps (see algo/README.md). */
#ifndef PAPCCL_ALGO_ALGO_H_
#define PAPCCL_ALGO_ALGO_H_

#include <stddef.h>
#include <stdint.h>

#include "engine.h"
#include "kernels.h"
#include "papccl.h"

/* The collectives a call can ask for. */
enum papColl {
  PAP_COLL_ALLREDUCE = 0,
  PAP_COLL_BROADCAST,
  PAP_COLL_REDUCE,
  PAP_COLL_ALLGATHER,
  PAP_COLL_REDUCESCATTER,
  PAP_COLL_ALLTOALL,
  PAP_COLL_GATHER,
  PAP_COLL_SCATTER,
  PAP_COLL_SEND,
  PAP_COLL_RECV,
  PAP_COLL_COUNT
};

/* The plan choice every rank agrees on before planning (the arrival layer fills it; for a
 * classic plan only algo is set). */
struct papCommit {
  int algo; /* enum papAlgo */
  int nE; /* AC2S, small, PAP plans: early ranks (block owners) */
  int pred; /* chain: rank at the previous arrival position, or -1 */
  int pos; /* chain: this rank's arrival position */
  const int32_t* owners; /* owner of block j, in arrival order: early ranks first */
};

/* One validated call, as the planners see it. */
struct papCall {
  int coll; /* enum papColl */
  const void* sendbuff;
  void* recvbuff;
  size_t count;
  papcclDataType_t dtype;
  enum papRedKind red; /* element-wise kernel op */
  int avg; /* divide by nranks at the end */
  int preMul; /* scale the input by scalar first */
  unsigned char scalar[8];
  int root; /* or peer for send/recv */
  uint64_t seq; /* collective sequence number, or p2p message number */
  uint64_t cseq; /* collectives: the 64-bit count of collectives before this one */
  int arena; /* the op's path is the device arenas (papAlgoArena; papPathDecide chose it) */
  struct papCommit commit;
};

/* Stored in the arrival board's commit word (6 bits). */
enum papAlgo {
  PAP_ALGO_AUTO = 0,
  PAP_ALGO_RING,
  PAP_ALGO_RHD,
  PAP_ALGO_AC2S, /* arrival-committed two-shot (src/algo/allreduce_ac2s.c) */
  PAP_ALGO_AC2S_DET, /* the same, each element reduced along one canonical tree */
  PAP_ALGO_CHAIN, /* arrival-ordered pipelined chain (src/algo/allreduce_chain.c) */
  PAP_ALGO_SMALL, /* small messages: early set reduces, late ranks add their inputs */
  PAP_ALGO_ARRIVAL, /* the PAP-aware plan of ReduceScatter, AllGather, Broadcast, Reduce */
  PAP_ALGO_FLAT, /* small ops on one host: shared lines, no plan (src/arrival/flat.c) */
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
papcclResult_t papStepCopyIfNeeded(struct papEngine* e, void* dst, const void* src, size_t bytes);

struct papChain;
/* Appends the steps of op to the engine's plan. An arrival-ordered chain is planned only up
 * to this rank's successor: *chainOut then gets the part still to plan (else NULL). */
papcclResult_t papAlgoPlan(struct papEngine* e, struct papCall* op, struct papChain** chainOut);

/* The classic allreduce algorithm by size (ring or recursive halving-doubling); the choice
 * of an op's algorithm, PAPCCL_ALGO included, is the selector's (pap/select.c). */
enum papAlgo papAlgoClassicAllReduce(size_t bytes);
const char* papAlgoName(enum papAlgo a);
/* PAPCCL_ALGO value to algorithm (PAP_ALGO_AUTO when unknown, after one warning). */
enum papAlgo papAlgoFromName(const char* name);

/* The one early/late view of a commit, for every planner that builds on it. For a plan in
 * arrival order (AC2S, its deterministic form, small, the PAP plans) the early ranks are the
 * commit's owners; for a classic plan every rank is early, in rank order. */
struct papCommitView {
  int n, r;
  int nE; /* early ranks: own[0..nE-1], in arrival order */
  const int32_t* own;
  int* early; /* [n] 1 if early */
  int* late; /* [nLate] the late ranks, ascending */
  int nLate;
  int* lateIdx; /* [n] index in late[], or -1 */
  int* order; /* [n] the early ranks in arrival order, then the late ones */
  int myBlock; /* this rank's index in own[], or -1 (late) */
};
/* Whether algo is planned over the arrival order (the commit's owners). */
int papAlgoArrivalOrdered(int algo);
/* Builds the view in the plan's scratch (valid until papPlanReset). */
papcclResult_t papCommitViewInit(struct papEngine* e, const struct papCall* op,
                                 struct papCommitView* v);

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

/* Where unit (b, k) is read from now: the result buffer once written, else the input. */
static inline const char* papGeomSrc(const struct papGeom* g, int b, int k) {
  int u = g->unitOff[b] + k;
  size_t off = g->blkOff[b] + (size_t)k * g->chunkElems;
  return (g->written[u] ? g->recvbuff : g->sendbuff) + off * g->esz;
}
/* The step that last wrote unit (b, k), or -1. */
static inline int papGeomLastWrite(const struct papGeom* g, int b, int k) {
  return g->lastW[g->unitOff[b] + k];
}
/* Step idx wrote unit (b, k) into the result buffer (a step the planner made itself). */
static inline void papGeomWrote(struct papGeom* g, int b, int k, int idx) {
  int u = g->unitOff[b] + k;
  g->lastW[u] = idx;
  g->lastR[u] = -1;
  g->written[u] = 1;
}

/* Unit operations; return the step index or -1 (plan failed). PUBLISH/FETCH as
 * papStepPublish/papStepFetch, for unit (b, k) of the result buffer. */
int papGeomPublish(struct papEngine* e, struct papGeom* g, int b, int k, int slot, uint64_t tag,
                   int readers);
int papGeomFetch(struct papEngine* e, struct papGeom* g, int owner, int b, int k, int slot,
                 uint64_t tag);
int papGeomSend(struct papEngine* e, struct papGeom* g, int peer, int b, int k);
int papGeomRecv(struct papEngine* e, struct papGeom* g, int peer, int b, int k);
int papGeomRecvReduce(struct papEngine* e, struct papGeom* g, int peer, int b, int k,
                      papcclDataType_t dtype, enum papRedKind red);

/* Per-collective planners. */
papcclResult_t papAlgoAllReduceRing(struct papEngine* e, struct papCall* op);
papcclResult_t papAlgoAllReduceRhd(struct papEngine* e, struct papCall* op);
/* AC2S over op->commit.owners[0..op->commit.nE-1] (PAP_ALGO_AC2S or _DET in op->commit.algo). */
papcclResult_t papAlgoAllReduceAc2s(struct papEngine* e, struct papCall* op);
/* AllReduce, AllGather, Broadcast, ReduceScatter and Reduce through the ranks' device arenas
 * (src/algo/arena_colls.c), when e->dev has them and the op qualifies (papAlgoArenaEligible: the same
 * answer on every rank; only the path decision, papPathDecide, asks it, and papAlgoPlan follows
 * op->arena). Contributions are taken early ranks first (the PAP commit). */
int papAlgoArenaEligible(const struct papCall* op, const struct papEngine* e);
papcclResult_t papAlgoArena(struct papEngine* e, struct papCall* op);
/* Small-message variant over the same commit (early set op->commit.owners[0..nE-1]). */
papcclResult_t papAlgoAllReduceSmall(struct papEngine* e, struct papCall* op);

/* Arrival-ordered chain: the rank at arrival position p reduces what p-1 sends into its own
 * input and forwards it to p+1; the last position holds the result, which flows back. The
 * first part is planned at arrival; the rest once the successor (position p+1) arrived. */
struct papChain {
  struct papCall* op;
  struct papGeom g;
  int pos; /* arrival position */
  int pred; /* rank at pos - 1, or -1 */
};
papcclResult_t papAlgoAllReduceChainBegin(struct papEngine* e, struct papCall* op,
                                          struct papChain** chainOut);
papcclResult_t papAlgoAllReduceChainFinish(struct papEngine* e, struct papChain* c, int succ);
papcclResult_t papAlgoAllGatherRing(struct papEngine* e, struct papCall* op);
papcclResult_t papAlgoReduceScatterRing(struct papEngine* e, struct papCall* op);
papcclResult_t papAlgoBroadcastChain(struct papEngine* e, struct papCall* op);
papcclResult_t papAlgoReduceChain(struct papEngine* e, struct papCall* op);
papcclResult_t papAlgoAlltoAllPairwise(struct papEngine* e, struct papCall* op);
papcclResult_t papAlgoGatherDirect(struct papEngine* e, struct papCall* op);
papcclResult_t papAlgoScatterDirect(struct papEngine* e, struct papCall* op);
papcclResult_t papAlgoSendRecv(struct papEngine* e, struct papCall* op);
/* PAP-aware plans over the commit in op->commit.owners[0..nE-1] (src/algo/arrival_colls.c). */
papcclResult_t papAlgoReduceScatterArrival(struct papEngine* e, struct papCall* op);
papcclResult_t papAlgoAllGatherArrival(struct papEngine* e, struct papCall* op);
papcclResult_t papAlgoBroadcastArrival(struct papEngine* e, struct papCall* op);
papcclResult_t papAlgoReduceArrival(struct papEngine* e, struct papCall* op);

#endif /* PAPCCL_ALGO_ALGO_H_ */
