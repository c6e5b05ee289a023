/* SPDX-License-Identifier: Apache-2.0 */
/* An op's path (docs/ARCHITECTURE.md, "An op's path"): the one function that decides which
 * executor runs an op (the host hierarchy, the flat lines, the device arenas, or plan steps
 * whose plan the board's decider commits or every rank chooses alone), once per op, where
 * its batch is known: at the call for an op outside a group, at papcclGroupEnd for the ops
 * of a group. The op carries the choice (op->path, op->call.arena); no other place asks the
 * predicates below to choose a path. Every rank decides alike: the inputs are the call, the
 * comm's configuration, the parameters and the batch. */
#include <stdio.h>

#include "arrival_int.h"
#include "param.h"

static const char* const kPathNames[PAP_PATH_COUNT] = {"local", "board", "flat",
                                                       "arena", "hier",  "p2p"};

static const char* const kWhy[PAP_WHY_COUNT] = {
    [PAP_WHY_NONE] = "not decided",
    [PAP_WHY_P2P] = "send or receive, no arrival",
    [PAP_WHY_HIER] =
        "several hosts, blocking ungrouped sum/prod/min/max allreduce >= "
        "PAPCCL_HIER_MIN_BYTES",
    [PAP_WHY_ARENA] = "device arenas: the op is in the arenas' collectives and sizes",
    [PAP_WHY_FLAT] = "allreduce <= PAPCCL_FLAT_MAX_BYTES alone on one host",
    [PAP_WHY_EMPTY] = "count 0",
    [PAP_WHY_ONE_RANK] = "one rank",
    [PAP_WHY_NO_PAP_PLAN] = "no arrival-aware plan for this collective",
    [PAP_WHY_BATCH] = "batch with other collectives or comms",
    [PAP_WHY_DET_COMMIT] = "deterministic allreduce: committed early set",
    [PAP_WHY_DET_FIXED] = "deterministic: fixed rank order",
    [PAP_WHY_PAP_OFF] = "PAPCCL_PAP=0",
    [PAP_WHY_ENV_CLASSIC] = "forced by PAPCCL_ALGO (classic)",
    [PAP_WHY_CONFIG_CLASSIC] = "collConfig algo (classic)",
    [PAP_WHY_ENV_FORCED] = "forced by PAPCCL_ALGO",
    [PAP_WHY_CONFIG_FORCED] = "collConfig algo",
    [PAP_WHY_SELECTOR] = "the selector chooses from the arrivals",
    [PAP_WHY_SELECTOR_PROBE] = "the selector, every PAPCCL_PAP_PROBE-th call (message board)",
};

const char* papPathName(int path) {
  return path >= 0 && path < PAP_PATH_COUNT ? kPathNames[path] : "?";
}

const char* papPathWhyString(int why) {
  return why >= 0 && why < PAP_WHY_COUNT && kWhy[why] != NULL ? kWhy[why] : "?";
}

/* The hierarchical allreduce (src/api/hier.c) serves the call: the comm has the inner comms
 * (hosts with several ranks); the call is not small (PAPCCL_HIER_MIN_BYTES: three
 * collectives in a row cost more than one flat plan there); non-blocking comms and groups
 * need the whole call queued as one; averages and pre-multiplied sums would be scaled per
 * level; deterministic mode fixes one order. */
static int hierApplies(const struct papComm* comm, const struct papOpDesc* op, unsigned ctx) {
  if (comm->hierLocal == NULL || op->call.coll != PAP_COLL_ALLREDUCE || op->call.count == 0)
    return 0;
  if (op->call.count * papKernTypeSize(op->call.dtype) < (uint64_t)papParamHierMinBytes()) return 0;
  if (!comm->blocking || (ctx & PAP_PATHCTX_GROUPED) || papParamDeterministic()) return 0;
  return op->op == papcclSum || op->op == papcclProd || op->op == papcclMax || op->op == papcclMin;
}

static int because(int* whyOut, int why, int commit) {
  *whyOut = why;
  return commit;
}

/* Whether the first arriver commits the plan (1), every rank plans alone (0), or the
 * selector's probe says (2, a message board), and why. */
static int commitOf(const struct papComm* comm, const struct papOpDesc* op, unsigned ctx,
                    int* whyOut) {
  const struct papCall* c = &op->call;
  int det = papParamDeterministic() != 0;
  if (c->coll >= PAP_SEL_COLLS) return because(whyOut, PAP_WHY_NO_PAP_PLAN, 0);
  if (c->count == 0) return because(whyOut, PAP_WHY_EMPTY, 0);
  if (comm->nranks < 2) return because(whyOut, PAP_WHY_ONE_RANK, 0);
  if (ctx & PAP_PATHCTX_BOARD_SHARED) return because(whyOut, PAP_WHY_BATCH, 0);
  if (det && c->coll == PAP_COLL_ALLREDUCE) return because(whyOut, PAP_WHY_DET_COMMIT, 1);
  /* Deterministic mode: ReduceScatter and Reduce keep their fixed rank order (classic). */
  if (det && (c->coll == PAP_COLL_REDUCE || c->coll == PAP_COLL_REDUCESCATTER))
    return because(whyOut, PAP_WHY_DET_FIXED, 0);
  if (!papParamPap()) return because(whyOut, PAP_WHY_PAP_OFF, 0);
  int f = papSelectForcedAlgo(op), config = op->forcedAlgo != PAP_ALGO_AUTO;
  if (f == PAP_ALGO_RING || f == PAP_ALGO_RHD)
    return because(whyOut, config ? PAP_WHY_CONFIG_CLASSIC : PAP_WHY_ENV_CLASSIC, 0);
  if (f != PAP_ALGO_AUTO)
    return because(whyOut, config ? PAP_WHY_CONFIG_FORCED : PAP_WHY_ENV_FORCED, 1);
  if (comm->arrival == NULL || !comm->arrival->msg) return because(whyOut, PAP_WHY_SELECTOR, 1);
  return because(whyOut, PAP_WHY_SELECTOR_PROBE, 2);
}

struct papPathChoice papPathDecide(const struct papComm* comm, const struct papOpDesc* op,
                                   unsigned ctx) {
  struct papPathChoice p = {PAP_PATH_LOCAL, PAP_WHY_NONE, 0};
  if (op->call.coll == PAP_COLL_SEND || op->call.coll == PAP_COLL_RECV) {
    p.path = PAP_PATH_P2P;
    p.why = PAP_WHY_P2P;
    return p;
  }
  if (hierApplies(comm, op, ctx)) {
    p.path = PAP_PATH_HIER;
    p.why = PAP_WHY_HIER;
    return p;
  }
  p.commit = commitOf(comm, op, ctx, &p.why);
  if (papAlgoArenaEligible(&op->call, &comm->engine)) {
    p.path = PAP_PATH_ARENA; /* it still arrives, and its owners may come from a commit */
    p.why = PAP_WHY_ARENA;
  } else if (!(ctx & PAP_PATHCTX_SHARED) && papFlatEligible(comm, op)) {
    p.path = PAP_PATH_FLAT;
    p.why = PAP_WHY_FLAT;
    p.commit = 0;
  } else {
    p.path = p.commit ? PAP_PATH_BOARD : PAP_PATH_LOCAL;
  }
  return p;
}

static int isColl(const struct papOpDesc* op) {
  return op->call.coll != PAP_COLL_SEND && op->call.coll != PAP_COLL_RECV;
}

void papPathDecideBatch(struct papOpDesc* ops, int nops, int grouped) {
  for (int i = 0; i < nops; i++) {
    struct papOpDesc* op = &ops[i];
    unsigned ctx = grouped ? PAP_PATHCTX_GROUPED : 0;
    if (nops > 1) ctx |= PAP_PATHCTX_SHARED;
    /* Sends and receives on the collective's own comm do not count: they may differ between
     * its ranks (a peer without a partner), and every rank must decide alike. */
    for (int j = 0; j < nops; j++)
      if (j != i && (isColl(&ops[j]) || ops[j].comm != op->comm)) ctx |= PAP_PATHCTX_BOARD_SHARED;
    op->path = papPathDecide(op->comm, op, ctx);
    op->call.arena = op->path.path == PAP_PATH_ARENA;
    struct papArrivalState* ps = op->comm->arrival;
    if (ps == NULL) continue;
    atomic_fetch_add_explicit(&ps->pathOps[op->path.path], 1, memory_order_relaxed);
    atomic_store_explicit(&ps->lastPath, op->path.path << 8 | op->path.why, memory_order_relaxed);
  }
}

void papPathSummary(const struct papArrivalState* ps, char* buf, size_t cap) {
  size_t len = 0;
  buf[0] = '\0';
  for (int p = 0; p < PAP_PATH_COUNT && len < cap; p++) {
    uint64_t k = atomic_load_explicit(&ps->pathOps[p], memory_order_relaxed);
    if (k == 0) continue;
    int w = snprintf(buf + len, cap - len, "%s%s %llu", len ? ", " : "", kPathNames[p],
                     (unsigned long long)k);
    if (w < 0) break;
    len += (size_t)w;
  }
}

void papPathStats(const struct papArrivalState* ps, papcclPapStats* st) {
  for (int p = 0; p < PAP_PATH_COUNT; p++)
    st->pathOps[p] = atomic_load_explicit(&ps->pathOps[p], memory_order_relaxed);
  int last = atomic_load_explicit(&ps->lastPath, memory_order_relaxed);
  st->lastPath = last >> 8;
  snprintf(st->lastPathWhy, sizeof(st->lastPathWhy), "%s: %s", papPathName(last >> 8),
           papPathWhyString(last & 0xff));
}
