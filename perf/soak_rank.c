/* SPDX-License-Identifier: Apache-2.0 */
/* papccl_soak: one rank. Draws each operation from the seed, prepares guarded buffers,
 * issues it (alone, in a group, on a split communicator), checks every element against the
 * reference and reports to the parent through the shared page. */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "arrival.h"
#include "soak.h"

struct soakComm {
  papcclComm_t comm;
  int rank, n, isChild;
  const char* name; /* "world" or "child" */
};

struct rankCtx {
  const struct soakCfg* cfg;
  struct soakShared* sh;
  struct rankStats* st;
  int worldRank;
  long step;
  char desc[SOAK_DESC_LEN];
};

static void fatal(struct rankCtx* x, papcclComm_t comm, const char* what, papcclResult_t res) {
  atomic_fetch_add(&x->st->errors, 1);
  fprintf(stderr,
          "papccl_soak: rank %d step %ld: %s failed: %s (%s); op: %s; replay with --seed %" PRIu64
          " --ranks %d\n",
          x->worldRank, x->step, what, papcclGetErrorString(res), papcclGetLastError(comm), x->desc,
          x->cfg->seed, x->cfg->nranks);
  fflush(stderr);
  _exit(1); /* the other ranks cannot go on without this one: the parent stops them */
}
#define SCHECK(x, comm, call) \
  do { \
    papcclResult_t res_ = (call); \
    if (res_ != papcclSuccess) fatal(x, comm, #call, res_); \
  } while (0)

static void progress(struct rankCtx* x) {
  atomic_store_explicit(&x->st->lastProgressNs, nowNs(), memory_order_relaxed);
}

static void setCurrent(struct rankCtx* x) {
  size_t n = strlen(x->desc);
  if (n >= SOAK_DESC_LEN) n = SOAK_DESC_LEN - 1;
  memcpy(x->st->current, x->desc, n);
  x->st->current[n] = '\0';
}

/* Draws an operation (shared generator: every member draws the same). */
static void drawOp(struct rng* g, const struct soakCfg* cfg, int n, int coll, struct soakOp* o) {
  memset(o, 0, sizeof(*o));
  o->coll = coll;
  o->type = (int)rbelow(g, papcclNumTypes);
  const struct typeInfo* t = &types[o->type];
  o->op = (int)rbelow(g, O_NUM);
  /* A float average is exact only when 1/n is: otherwise the library may pre-multiply by a
   * rounded 1/n, as NCCL does, and the order of the additions shows in the last bits. */
  if (o->op == O_AVG && (t->kind == K_NARROW || t->kind == K_FLOAT) && !papSoakIsPow2(n))
    o->op = O_SUM;
  static const double fscalars[] = {2, 0.5, -1};
  o->fscalar = fscalars[rbelow(g, 3)];
  o->iscalar = t->kind == K_UINT ? (int64_t)rbelow(g, 6) : (int64_t)rbelow(g, 9) - 3;
  o->root = (int)rbelow(g, (uint64_t)n);
  o->inPlace = rbelow(g, 3) == 0;
  /* sendrecv: a ring shift (0: to self) in a group, or (-1) blocking pairs r <-> r^1 */
  o->shift = rbelow(g, 3) == 0 ? -1 : (int)rbelow(g, (uint64_t)n);
  o->seed = rnext(g);
  o->sendOff = rbelow(g, 4) == 0 ? rbelow(g, 8) : 0;
  o->recvOff = rbelow(g, 4) == 0 ? rbelow(g, 8) : 0;
  int blocks = coll == C_ALLGATHER || coll == C_REDUCESCATTER || coll == C_ALLTOALL ||
                       coll == C_GATHER || coll == C_SCATTER
                   ? n
                   : 1;
  size_t maxCount = cfg->maxBytes / (size_t)t->size / (size_t)blocks;
  uint64_t u = rbelow(g, 100);
  size_t count;
  if (u < 5) {
    count = 0;
  } else if (u < 25) {
    count = 1 + rbelow(g, 16);
  } else {
    double bytes = exp(runit(g) * log((double)cfg->maxBytes));
    count = (size_t)(bytes / t->size / blocks) + rbelow(g, 4);
    if (rbelow(g, 2)) count |= 1; /* odd counts, off every chunk boundary */
  }
  o->count = count > maxCount ? maxCount : count;
}

static void describe(const struct soakOp* o, int n, const char* comm, char* buf, size_t len) {
  snprintf(
      buf, len, "%s %s %s count %zu root %d%s shift %d on %s of %d ranks (seed %016" PRIx64 ")",
      collNames[o->coll], types[o->type].name, papSoakCollReduces(o->coll) ? opNames[o->op] : "-",
      o->count, o->root, o->inPlace ? " in-place" : "", o->shift, comm, n, o->seed);
}

/* Allocates data bytes at element offset off with guard bytes on both sides. */
static unsigned char* allocGuarded(size_t bytes, size_t off, unsigned char** dataOut) {
  size_t total = off + bytes + SOAK_GUARD;
  unsigned char* m = (unsigned char*)malloc(total);
  if (m == NULL) {
    fprintf(stderr, "papccl_soak: out of memory (%zu bytes)\n", total);
    _exit(1);
  }
  memset(m, 0xA5, total);
  *dataOut = m + off;
  return m;
}

static int guardsOk(const unsigned char* m, size_t bytes, size_t off) {
  if (m == NULL) return 1;
  for (size_t i = 0; i < off; i++)
    if (m[i] != 0xA5) return 0;
  for (size_t i = 0; i < SOAK_GUARD; i++)
    if (m[off + bytes + i] != 0xA5) return 0;
  return 1;
}

/* Builds the buffers of o for rank rank of n and creates its reduction operation. */
static void prepareOp(struct rankCtx* x, const struct soakComm* c, struct soakOp* o) {
  const int r = c->rank, n = c->n, esz = types[o->type].size;
  const size_t cnt = o->count, all = cnt * (size_t)n;
  size_t sendElems = 0, recvElems = 0;
  unsigned char *sd = NULL, *rd = NULL;
  switch (o->coll) {
  case C_ALLREDUCE:
  case C_BROADCAST:
  case C_BCAST:
  case C_SENDRECV:
    sendElems = recvElems = cnt;
    break;
  case C_REDUCE:
    sendElems = cnt;
    recvElems = r == o->root ? cnt : 0;
    break;
  case C_ALLGATHER:
    sendElems = cnt, recvElems = all;
    break;
  case C_REDUCESCATTER:
    sendElems = all, recvElems = cnt;
    break;
  case C_ALLTOALL:
    sendElems = recvElems = all;
    break;
  case C_GATHER:
    sendElems = cnt;
    recvElems = r == o->root ? all : 0;
    break;
  case C_SCATTER:
    sendElems = r == o->root ? all : 0;
    recvElems = cnt;
    break;
  }
  o->sendBytes = sendElems * (size_t)esz;
  o->recvBytes = recvElems * (size_t)esz;
  o->send = allocGuarded(o->sendBytes, o->sendOff * (size_t)esz, &sd);
  o->recv = allocGuarded(o->recvBytes, o->recvOff * (size_t)esz, &rd);
  /* inputs: rank r's input element idx sits at send[idx] (at recv[] for in-place forms) */
  int fillSend =
      !(o->coll == C_BROADCAST || o->coll == C_BCAST || o->coll == C_SCATTER) || r == o->root;
  o->filled = fillSend;
  if (fillSend)
    for (size_t i = 0; i < sendElems; i++)
      papSoakSetElem(sd, esz, i, papSoakInputBits(o, n, r, i));
  for (size_t i = 0; i < recvElems; i++) /* a recognisable stale value */
    papSoakSetElem(rd, esz, i, 0x5a5a5a5a5a5a5a5aull);
  o->sb = sd;
  o->rb = rd;
  switch (o->coll) {
  case C_ALLREDUCE:
  case C_BROADCAST:
  case C_ALLTOALL:
    if (o->inPlace) o->rb = sd;
    break;
  case C_BCAST:
    o->rb = sd;
    break;
  case C_REDUCE:
    if (o->inPlace) o->rb = sd;
    if (!o->inPlace && r != o->root) o->rb = NULL;
    break;
  case C_ALLGATHER:
    if (o->inPlace) {
      for (size_t i = 0; i < cnt; i++)
        papSoakSetElem(rd, esz, (size_t)r * cnt + i, papSoakInputBits(o, n, r, i));
      o->sb = rd + (size_t)r * cnt * (size_t)esz;
    }
    break;
  case C_REDUCESCATTER:
    if (o->inPlace) o->rb = sd + (size_t)r * cnt * (size_t)esz;
    break;
  case C_GATHER:
    if (o->inPlace && r == o->root) {
      for (size_t i = 0; i < cnt; i++)
        papSoakSetElem(rd, esz, (size_t)r * cnt + i, papSoakInputBits(o, n, r, i));
      o->sb = rd + (size_t)r * cnt * (size_t)esz;
    }
    if (r != o->root) o->rb = NULL;
    break;
  case C_SCATTER:
    if (r != o->root) o->sb = NULL;
    if (o->inPlace && r == o->root) o->rb = sd + (size_t)r * cnt * (size_t)esz;
    break;
  default:
    break;
  }
  o->redop = (papcclRedOp_t)(o->op == O_AVG ? papcclAvg : o->op);
  if (papSoakCollReduces(o->coll) && o->op == O_PREMUL) {
    uint64_t sbits = 0;
    const struct typeInfo* t = &types[o->type];
    if (t->kind == K_INT || t->kind == K_UINT)
      sbits = (uint64_t)o->iscalar & papSoakWidthMask(t->size);
    else
      papSoakEncodeFloat(o->type, o->fscalar, &sbits);
    unsigned char scalar[8];
    memcpy(scalar, &sbits, 8);
    SCHECK(x, c->comm,
           papcclRedOpCreatePreMulSum(&o->redop, scalar, (papcclDataType_t)o->type,
                                      papcclScalarHostImmediate, c->comm));
    o->created = 1;
  }
}

static void issueOp(struct rankCtx* x, const struct soakComm* c, struct soakOp* o) {
  papcclComm_t comm = c->comm;
  papcclDataType_t t = (papcclDataType_t)o->type;
  size_t cnt = o->count;
  switch (o->coll) {
  case C_ALLREDUCE:
    SCHECK(x, comm, papcclAllReduce(o->sb, o->rb, cnt, t, o->redop, comm, NULL));
    break;
  case C_BROADCAST:
    SCHECK(x, comm, papcclBroadcast(o->sb, o->rb, cnt, t, o->root, comm, NULL));
    break;
  case C_BCAST:
    SCHECK(x, comm, papcclBcast(o->rb, cnt, t, o->root, comm, NULL));
    break;
  case C_REDUCE:
    SCHECK(x, comm, papcclReduce(o->sb, o->rb, cnt, t, o->redop, o->root, comm, NULL));
    break;
  case C_ALLGATHER:
    SCHECK(x, comm, papcclAllGather(o->sb, o->rb, cnt, t, comm, NULL));
    break;
  case C_REDUCESCATTER:
    SCHECK(x, comm, papcclReduceScatter(o->sb, o->rb, cnt, t, o->redop, comm, NULL));
    break;
  case C_ALLTOALL:
    SCHECK(x, comm, papcclAlltoAll(o->sb, o->rb, cnt, t, comm, NULL));
    break;
  case C_GATHER:
    SCHECK(x, comm, papcclGather(o->sb, o->rb, cnt, t, o->root, comm, NULL));
    break;
  case C_SCATTER:
    SCHECK(x, comm, papcclScatter(o->sb, o->rb, cnt, t, o->root, comm, NULL));
    break;
  case C_SENDRECV: {
    if (o->shift < 0) { /* blocking pairs: the even rank sends first */
      int peer = c->rank ^ 1;
      if (peer >= c->n) break;
      if ((c->rank & 1) == 0) SCHECK(x, comm, papcclSend(o->sb, cnt, t, peer, comm, NULL));
      SCHECK(x, comm, papcclRecv(o->rb, cnt, t, peer, comm, NULL));
      if ((c->rank & 1) == 1) SCHECK(x, comm, papcclSend(o->sb, cnt, t, peer, comm, NULL));
      break;
    }
    /* a ring shift by `shift` (0: to self); both halves in one group */
    int to = (c->rank + o->shift) % c->n, from = (c->rank - o->shift + c->n) % c->n;
    int recvFirst = (int)(o->seed >> 7) & 1;
    SCHECK(x, comm, papcclGroupStart());
    if (recvFirst) SCHECK(x, comm, papcclRecv(o->rb, cnt, t, from, comm, NULL));
    SCHECK(x, comm, papcclSend(o->sb, cnt, t, to, comm, NULL));
    if (!recvFirst) SCHECK(x, comm, papcclRecv(o->rb, cnt, t, from, comm, NULL));
    SCHECK(x, comm, papcclGroupEnd());
    break;
  }
  }
}

/* Checks o's result on this rank; returns the number of wrong elements (guards count 1). */
static uint64_t verifyOp(struct rankCtx* x, const struct soakComm* c, struct soakOp* o) {
  const int r = c->rank, n = c->n, esz = types[o->type].size;
  const size_t cnt = o->count;
  uint64_t wrong = 0;
  int printed = 0;
  const unsigned char* out = o->rb;
  size_t outElems = 0;
  switch (o->coll) {
  case C_ALLGATHER:
  case C_ALLTOALL:
    outElems = cnt * (size_t)n;
    break;
  case C_GATHER:
    outElems = r == o->root ? cnt * (size_t)n : 0;
    break;
  case C_REDUCE:
    outElems = r == o->root ? cnt : 0;
    break;
  case C_SENDRECV:
    outElems = o->shift >= 0 || (r ^ 1) < n ? cnt : 0;
    break;
  default:
    outElems = cnt;
  }
  for (size_t i = 0; i < outElems; i++) {
    uint64_t want = 0;
    int ok = 0;
    switch (o->coll) {
    case C_ALLREDUCE:
    case C_REDUCE:
      ok = papSoakReducedBits(o, n, i, &want) == 0;
      break;
    case C_REDUCESCATTER:
      ok = papSoakReducedBits(o, n, (size_t)r * cnt + i, &want) == 0;
      break;
    case C_BROADCAST:
    case C_BCAST:
      want = papSoakInputBits(o, n, o->root, i), ok = 1;
      break;
    case C_ALLGATHER:
    case C_GATHER:
      want = papSoakInputBits(o, n, (int)(i / cnt), i % cnt), ok = 1;
      break;
    case C_ALLTOALL:
      want = papSoakInputBits(o, n, (int)(i / cnt), (size_t)r * cnt + i % cnt), ok = 1;
      break;
    case C_SCATTER:
      want = papSoakInputBits(o, n, o->root, (size_t)r * cnt + i), ok = 1;
      break;
    case C_SENDRECV:
      want = papSoakInputBits(o, n, o->shift < 0 ? r ^ 1 : (r - o->shift + n) % n, i), ok = 1;
      break;
    }
    if (!ok) {
      fprintf(stderr, "papccl_soak: rank %d: reference of element %zu not representable: %s\n",
              x->worldRank, i, x->desc);
      wrong++;
      continue;
    }
    uint64_t got = papSoakGetElem(out, esz, i);
    if (got != want) {
      if (printed++ < SOAK_PRINT_MAX)
        fprintf(stderr,
                "papccl_soak: WRONG rank %d step %ld element %zu: got 0x%" PRIx64
                ", expected 0x%" PRIx64 "; %s\n",
                x->worldRank, x->step, i, got, want, x->desc);
      wrong++;
    }
  }
  /* out-of-place inputs must be left alone */
  if (!o->inPlace && o->filled && o->sb != NULL && o->coll != C_BCAST) {
    size_t inElems = o->sendBytes / (size_t)esz;
    for (size_t i = 0; i < inElems; i++) {
      if (papSoakGetElem(o->sb, esz, i) != papSoakInputBits(o, n, r, i)) {
        fprintf(stderr, "papccl_soak: WRONG rank %d step %ld: input element %zu modified; %s\n",
                x->worldRank, x->step, i, x->desc);
        wrong++;
        break;
      }
    }
  }
  if (!guardsOk(o->send, o->sendBytes, o->sendOff * (size_t)esz) ||
      !guardsOk(o->recv, o->recvBytes, o->recvOff * (size_t)esz)) {
    fprintf(stderr, "papccl_soak: WRONG rank %d step %ld: write outside the buffers; %s\n",
            x->worldRank, x->step, x->desc);
    wrong++;
  }
  return wrong;
}

static void releaseOp(struct rankCtx* x, const struct soakComm* c, struct soakOp* o) {
  if (o->created) SCHECK(x, c->comm, papcclRedOpDestroy(o->redop, c->comm));
  free(o->send);
  free(o->recv);
  o->send = o->recv = NULL;
  o->created = 0;
}

static size_t opBytes(const struct soakOp* o, int n) {
  size_t b = o->count * (size_t)types[o->type].size;
  switch (o->coll) {
  case C_ALLGATHER:
  case C_REDUCESCATTER:
  case C_ALLTOALL:
  case C_GATHER:
  case C_SCATTER:
    return b * (size_t)n;
  default:
    return b;
  }
}

/* Delays this rank as the drawn arrival pattern says (every member draws the same pattern). */
static void arrive(struct rankCtx* x, struct rng* g, const struct soakComm* c) {
  struct papPerfArrival a;
  memset(&a, 0, sizeof(a));
  uint64_t kind = rbelow(g, 10);
  static const int kinds[] = {PAP_PERF_ARRIVAL_LATE, PAP_PERF_ARRIVAL_LATE_K,
                              PAP_PERF_ARRIVAL_STAIRCASE, PAP_PERF_ARRIVAL_UNIFORM,
                              PAP_PERF_ARRIVAL_NORMAL};
  a.kind = kind < 5 ? PAP_PERF_ARRIVAL_BALANCED : kinds[kind - 5];
  a.lateRank = (int)rbelow(g, (uint64_t)c->n);
  a.k = 1 + (int)rbelow(g, (uint64_t)c->n);
  a.seed = rnext(g);
  a.skewUs = exp(log(10.0) + runit(g) * (log(30000.0) - log(10.0))); /* 10 us .. 30 ms */
  double us = papPerfArrivalDelayUs(&a, c->rank, c->n, x->step);
  papPerfDelayUs(us);
}

/* One step on comm c: a collective, or a group of several (possibly nested groups). */
static void runStep(struct rankCtx* x, struct rng* g, const struct soakComm* c) {
  struct soakOp ops[SOAK_MAX_GROUP];
  int group = rbelow(g, 8) == 0;
  int nops = group ? 2 + (int)rbelow(g, SOAK_MAX_GROUP - 1) : 1;
  int nested = group && rbelow(g, 4) == 0;
  struct soakCfg small = *x->cfg;
  if (group) small.maxBytes = x->cfg->maxBytes / 4; /* several buffers live at once */
  for (int i = 0; i < nops; i++) {
    drawOp(g, &small, c->n, (int)rbelow(g, C_NUM), &ops[i]);
  }
  if (group)
    snprintf(x->desc, sizeof(x->desc), "group of %d on %s of %d ranks, first: ", nops, c->name,
             c->n);
  else
    x->desc[0] = '\0';
  size_t len = strlen(x->desc);
  describe(&ops[0], c->n, c->name, x->desc + len, sizeof(x->desc) - len);
  setCurrent(x);
  if (x->cfg->verbose && c->rank == 0) {
    printf("step %ld rank %d: %s\n", x->step, x->worldRank, x->desc);
    for (int i = 1; i < nops; i++) {
      char one[SOAK_DESC_LEN];
      describe(&ops[i], c->n, c->name, one, sizeof(one));
      printf("step %ld rank %d:   member %d: %s\n", x->step, x->worldRank, i, one);
    }
    fflush(stdout); /* ranks end with _exit */
  }
  for (int i = 0; i < nops; i++)
    prepareOp(x, c, &ops[i]);
  arrive(x, g, c);
  if (group) {
    SCHECK(x, c->comm, papcclGroupStart());
    if (nested) SCHECK(x, c->comm, papcclGroupStart());
  }
  for (int i = 0; i < nops; i++)
    issueOp(x, c, &ops[i]);
  if (group) {
    if (nested) SCHECK(x, c->comm, papcclGroupEnd());
    SCHECK(x, c->comm, papcclGroupEnd());
  }
  uint64_t wrong = 0;
  for (int i = 0; i < nops; i++) {
    char one[SOAK_DESC_LEN - 40]; /* room for the prefix below */
    if (group) {
      describe(&ops[i], c->n, c->name, one, sizeof(one));
      snprintf(x->desc, sizeof(x->desc), "group member %d: %s", i, one);
    }
    wrong += verifyOp(x, c, &ops[i]);
    releaseOp(x, c, &ops[i]);
  }
  if (wrong) {
    atomic_fetch_add(&x->st->wrongOps, 1);
    atomic_fetch_add(&x->st->wrongElems, wrong);
  }
  if (c->rank == 0) { /* each operation counted once, by its communicator's rank 0 */
    for (int i = 0; i < nops; i++) {
      atomic_fetch_add(&x->st->coll[ops[i].coll], 1);
      atomic_fetch_add(&x->st->bytes, opBytes(&ops[i], c->n));
    }
    atomic_fetch_add(&x->st->ops, (uint64_t)nops);
    if (c->isChild) atomic_fetch_add(&x->st->childOps, (uint64_t)nops);
    if (group) atomic_fetch_add(&x->st->groups, 1);
  }
  progress(x);
}

/* Splits the world by random colors, runs a few steps on each child, destroys the children. */
static void splitPhase(struct rankCtx* x, struct rng* g, const struct soakComm* w) {
  int n = w->n, color[SOAK_MAX_RANKS], key[SOAK_MAX_RANKS];
  int ncolors = 1 + (int)rbelow(g, (uint64_t)(n < 3 ? n : 3));
  for (int r = 0; r < n; r++) {
    color[r] = rbelow(g, 10) == 0 ? PAPCCL_SPLIT_NOCOLOR : (int)rbelow(g, (uint64_t)ncolors);
    key[r] = (int)rbelow(g, 4);
  }
  uint64_t childBase = rnext(g);
  int me = w->rank, myColor = color[me];
  snprintf(x->desc, sizeof(x->desc), "split: %d colors, mine %d, on world of %d ranks", ncolors,
           myColor, n);
  setCurrent(x);
  papcclComm_t child = NULL;
  SCHECK(x, w->comm, papcclCommSplit(w->comm, myColor, key[me], &child, NULL));
  if (me == 0) atomic_fetch_add(&x->st->splits, 1);
  if (myColor == PAPCCL_SPLIT_NOCOLOR) {
    if (child != NULL) {
      fprintf(stderr, "papccl_soak: WRONG rank %d step %ld: NOCOLOR gave a communicator\n", me,
              x->step);
      atomic_fetch_add(&x->st->wrongOps, 1);
    }
    progress(x);
    return;
  }
  /* expected: members of my color ordered by key, then parent rank */
  int size = 0, myRank = 0;
  for (int r = 0; r < n; r++) {
    if (color[r] != myColor) continue;
    size++;
    if (key[r] < key[me] || (key[r] == key[me] && r < me)) myRank++;
  }
  int gotN = -1, gotR = -1;
  if (child != NULL) {
    SCHECK(x, child, papcclCommCount(child, &gotN));
    SCHECK(x, child, papcclCommUserRank(child, &gotR));
  }
  if (child == NULL || gotN != size || gotR != myRank) {
    fprintf(stderr,
            "papccl_soak: WRONG rank %d step %ld: split child is rank %d of %d, expected %d of "
            "%d\n",
            me, x->step, gotR, gotN, myRank, size);
    atomic_fetch_add(&x->st->wrongOps, 1);
    _exit(1); /* the members disagree on the child: nothing sensible can run on it */
  }
  struct soakComm c = {child, myRank, size, 1, "child"};
  struct rng cg = {mix64(childBase ^ (uint64_t)myColor)};
  int steps = 1 + (int)rbelow(&cg, 12);
  for (int s = 0; s < steps; s++)
    runStep(x, &cg, &c);
  snprintf(x->desc, sizeof(x->desc), "destroy of a child of %d ranks (color %d)", size, myColor);
  setCurrent(x);
  SCHECK(x, child, papcclCommDestroy(child));
  progress(x);
}

int papSoakRankMain(const struct soakCfg* cfg, struct soakShared* sh, int rank, papcclUniqueId id) {
  struct rankCtx x;
  memset(&x, 0, sizeof(x));
  x.cfg = cfg;
  x.sh = sh;
  x.st = &sh->r[rank];
  x.worldRank = rank;
  snprintf(x.desc, sizeof(x.desc), "init of the world communicator");
  setCurrent(&x);
  papcclComm_t world = NULL;
  SCHECK(&x, NULL, papcclCommInitRank(&world, cfg->nranks, id, rank));
  progress(&x);
  struct soakComm w = {world, rank, cfg->nranks, 0, "world"};
  struct rng g = {cfg->seed};
  for (x.step = 0;; x.step++) {
    if (x.step % 8 == 0) { /* every rank stops at the same step: agree on the parent's flag */
      int32_t stop = atomic_load_explicit(&sh->stop, memory_order_relaxed);
      int32_t any = 0;
      snprintf(x.desc, sizeof(x.desc), "control allreduce (stop flag %d)", stop);
      setCurrent(&x);
      SCHECK(&x, world, papcclAllReduce(&stop, &any, 1, papcclInt32, papcclMax, world, NULL));
      progress(&x);
      if (any) break;
    }
    if (rbelow(&g, 40) == 0)
      splitPhase(&x, &g, &w);
    else
      runStep(&x, &g, &w);
  }
  snprintf(x.desc, sizeof(x.desc), "destroy of the world communicator");
  setCurrent(&x);
  SCHECK(&x, world, papcclCommDestroy(world));
  progress(&x);
  atomic_store(&x.st->done, 1);
  return 0;
}
