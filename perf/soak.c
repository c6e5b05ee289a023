/* SPDX-License-Identifier: Apache-2.0 */
/* papccl_soak: random collectives, sizes, types, ops, arrival patterns and communicator splits
 * on N forked ranks for a given time; every result is checked exactly against a local
 * reference. One seed fixes the whole operation sequence, so any failure can be replayed. */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "arrival.h"
#include "papccl.h"

#if defined(__SANITIZE_ADDRESS__)
#define SOAK_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define SOAK_ASAN 1
#endif
#endif
#ifdef SOAK_ASAN
#include <sanitizer/lsan_interface.h>
#endif

#define SOAK_MAX_RANKS 8
#define SOAK_GUARD 64
#define SOAK_MAX_GROUP 6
#define SOAK_DESC_LEN 200
#define SOAK_PRINT_MAX 5 /* mismatching elements printed per operation */

enum {
  C_ALLREDUCE,
  C_BROADCAST,
  C_BCAST,
  C_REDUCE,
  C_ALLGATHER,
  C_REDUCESCATTER,
  C_ALLTOALL,
  C_GATHER,
  C_SCATTER,
  C_SENDRECV,
  C_NUM
};
static const char* const collNames[C_NUM] = {"allreduce", "broadcast",     "bcast",    "reduce",
                                             "allgather", "reducescatter", "alltoall", "gather",
                                             "scatter",   "sendrecv"};
static const char* const opNames[] = {"sum", "prod", "max", "min", "avg", "premulsum"};
enum {
  O_SUM,
  O_PROD,
  O_MAX,
  O_MIN,
  O_AVG,
  O_PREMUL,
  O_NUM
};

enum {
  K_INT,
  K_UINT,
  K_FLOAT,
  K_NARROW
};
/* Reduction inputs are small integers in [-sumR, sumR] (sum, avg, pre-multiplied sum) or in
 * [-maxR, maxR] (max, min), so that every partial sum in every order is exact in the type. */
static const struct typeInfo {
  const char* name;
  int size, kind, ebits, mbits, bias;
  int64_t sumR, maxR;
} types[papcclNumTypes] = {
    {"int8", 1, K_INT, 0, 0, 0, 0, 0},
    {"uint8", 1, K_UINT, 0, 0, 0, 0, 0},
    {"int32", 4, K_INT, 0, 0, 0, 0, 0},
    {"uint32", 4, K_UINT, 0, 0, 0, 0, 0},
    {"int64", 8, K_INT, 0, 0, 0, 0, 0},
    {"uint64", 8, K_UINT, 0, 0, 0, 0, 0},
    {"float16", 2, K_NARROW, 5, 10, 15, 100, 1000},
    {"float32", 4, K_FLOAT, 0, 0, 0, 1000, 1 << 24},
    {"float64", 8, K_FLOAT, 0, 0, 0, 1000, (int64_t)1 << 40},
    {"bfloat16", 2, K_NARROW, 8, 7, 127, 15, 200},
    {"float8e4m3", 1, K_NARROW, 4, 3, 7, 1, 16},
    {"float8e5m2", 1, K_NARROW, 5, 2, 15, 1, 8},
};

/* ---- Shared state: written by the ranks, read by the parent ------------------------------ */

struct rankStats {
  _Atomic uint64_t lastProgressNs; /* CLOCK_MONOTONIC of the last completed operation */
  _Atomic uint64_t ops, bytes, wrongOps, wrongElems, errors, splits, groups, childOps;
  _Atomic uint64_t coll[C_NUM];
  _Atomic int done;
  char current[SOAK_DESC_LEN]; /* the operation in progress (read only on a hang) */
};
struct soakShared {
  _Atomic int stop; /* set by the parent at the end of the run; read by rank control steps */
  struct rankStats r[SOAK_MAX_RANKS];
};

struct soakCfg {
  double seconds, watchdogS, progressS;
  int nranks;
  uint64_t seed;
  size_t maxBytes;
  int verbose;
};

static uint64_t nowNs(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static uint64_t mix64(uint64_t z) {
  z += 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}
struct rng {
  uint64_t s;
};
static uint64_t rnext(struct rng* g) {
  g->s += 0x9e3779b97f4a7c15ull;
  return mix64(g->s);
}
static uint64_t rbelow(struct rng* g, uint64_t n) {
  return n ? rnext(g) % n : 0;
}
static double runit(struct rng* g) {
  return (double)(rnext(g) >> 11) * (1.0 / 9007199254740992.0);
}

/* ---- Values and references ------------------------------------------------------------- */

struct soakOp {
  int coll, type, op, root, inPlace, shift;
  size_t count; /* elements per rank block (NCCL's count/sendcount/recvcount) */
  uint64_t seed; /* varies the data */
  double fscalar; /* pre-multiplied sum: the scalar of float types */
  int64_t iscalar; /* ... of integer types */
  size_t sendOff, recvOff; /* misalignment of the buffers, whole elements */
  papcclRedOp_t redop;
  int created, filled; /* filled: send holds this rank's inputs */
  unsigned char *send, *recv; /* allocations (guards around the data) */
  size_t sendBytes, recvBytes;
  unsigned char *sb, *rb; /* what the call was given */
};

static int collReduces(int c) {
  return c == C_ALLREDUCE || c == C_REDUCE || c == C_REDUCESCATTER;
}
static int isPow2(int n) {
  return n > 0 && (n & (n - 1)) == 0;
}
static uint64_t widthMask(int size) {
  return size == 8 ? ~0ull : (1ull << (8 * size)) - 1;
}
static int64_t sext(uint64_t x, int size) {
  int sh = 64 - 8 * size;
  return (int64_t)(x << sh) >> sh;
}

/* Exact encoding of v in a binary format with ebits/mbits/bias; -1 if not representable. */
static int encMini(double v, int ebits, int mbits, int bias, uint64_t* out) {
  uint64_t sign = signbit(v) ? 1 : 0;
  double a = fabs(v);
  uint64_t bits;
  if (a == 0) {
    bits = 0;
  } else {
    int e;
    double m = frexp(a, &e); /* a = m * 2^e, m in [0.5, 1) */
    int E = e - 1 + bias;
    if (E >= 1) {
      double frac = ldexp(2 * m - 1, mbits);
      int fn = ebits == 4; /* e4m3 has no infinity: its top exponent holds numbers */
      if (frac != floor(frac) || E > (1 << ebits) - 2 + fn) return -1;
      bits = ((uint64_t)E << mbits) | (uint64_t)frac;
    } else {
      double q = ldexp(a, bias - 1 + mbits);
      if (q != floor(q) || q >= ldexp(1, mbits)) return -1;
      bits = (uint64_t)q;
    }
  }
  *out = bits | (sign << (ebits + mbits));
  return 0;
}

static int encodeFloat(int type, double v, uint64_t* out) {
  const struct typeInfo* t = &types[type];
  if (t->kind == K_NARROW) return encMini(v, t->ebits, t->mbits, t->bias, out);
  if (t->size == 4) {
    float f = (float)v;
    uint32_t b;
    if ((double)f != v) return -1;
    memcpy(&b, &f, 4);
    *out = b;
  } else {
    memcpy(out, &v, 8);
  }
  return 0;
}

static uint64_t elemHash(const struct soakOp* o, int r, size_t idx) {
  return mix64(o->seed ^ mix64(((uint64_t)r << 48) ^ (uint64_t)idx));
}

/* The float value rank r contributes at idx to a reduction. */
static double floatInput(const struct soakOp* o, int n, int r, size_t idx) {
  const struct typeInfo* t = &types[o->type];
  uint64_t h = elemHash(o, r, idx);
  switch (o->op) {
  case O_PROD: {
    /* +-1, and +-2 on at most one rank per element for the narrow types */
    int designated = t->kind != K_NARROW || (int)(mix64(o->seed ^ idx) % (uint64_t)n) == r;
    double mag = designated && ((h >> 8) & 1) ? 2 : 1;
    return (h & 1) ? -mag : mag;
  }
  case O_MAX:
  case O_MIN:
    return (double)((int64_t)(h % (uint64_t)(2 * t->maxR + 1)) - t->maxR);
  default:
    return (double)((int64_t)(h % (uint64_t)(2 * t->sumR + 1)) - t->sumR);
  }
}

static uint64_t inputBits(const struct soakOp* o, int n, int r, size_t idx) {
  const struct typeInfo* t = &types[o->type];
  uint64_t h = elemHash(o, r, idx);
  if (!collReduces(o->coll) || t->kind == K_INT || t->kind == K_UINT) return h & widthMask(t->size);
  uint64_t b = 0;
  encodeFloat(o->type, floatInput(o, n, r, idx), &b); /* representable by design */
  return b;
}

/* The reduction over all ranks of the inputs at idx; -1 if the design failed (a bug here). */
static int reducedBits(const struct soakOp* o, int n, size_t idx, uint64_t* out) {
  const struct typeInfo* t = &types[o->type];
  if (t->kind == K_INT || t->kind == K_UINT) {
    uint64_t mask = widthMask(t->size);
    uint64_t acc = o->op == O_PROD ? 1 : 0;
    for (int r = 0; r < n; r++) {
      uint64_t x = elemHash(o, r, idx) & mask;
      int first = r == 0;
      switch (o->op) {
      case O_PROD:
        acc *= x;
        break;
      case O_MAX:
      case O_MIN: {
        int gt = t->kind == K_INT ? sext(x, t->size) > sext(acc, t->size) : x > acc;
        int lt = t->kind == K_INT ? sext(x, t->size) < sext(acc, t->size) : x < acc;
        if (first || (o->op == O_MAX ? gt : lt)) acc = x;
        break;
      }
      case O_PREMUL:
        acc += x * (uint64_t)o->iscalar;
        break;
      default:
        acc += x;
      }
    }
    acc &= mask;
    if (o->op == O_AVG) {
      if (t->kind == K_INT)
        acc = (uint64_t)(sext(acc, t->size) / n);
      else
        acc = acc / (uint64_t)n;
    }
    *out = acc & mask;
    return 0;
  }
  /* Accumulate from the first input, as the library does: -1 * 0 is -0, and a sum of zeros
   * is -0 exactly when every term is. */
  double acc = 0;
  for (int r = 0; r < n; r++) {
    double v = floatInput(o, n, r, idx);
    if (o->op == O_PREMUL) v *= o->fscalar;
    if (r == 0) {
      acc = v;
      continue;
    }
    switch (o->op) {
    case O_PROD:
      acc *= v;
      break;
    case O_MAX:
      acc = v > acc ? v : acc;
      break;
    case O_MIN:
      acc = v < acc ? v : acc;
      break;
    default:
      acc += v;
    }
  }
  if (o->op == O_AVG) {
    /* the library divides the (exact) sum once, in the type */
    if (t->kind == K_FLOAT && t->size == 4)
      acc = (double)((float)acc / (float)n);
    else
      acc = acc / n;
  }
  return encodeFloat(o->type, acc, out);
}

static uint64_t getElem(const void* buf, int size, size_t i) {
  uint64_t v = 0;
  memcpy(&v, (const unsigned char*)buf + i * (size_t)size, (size_t)size);
  return v;
}
static void setElem(void* buf, int size, size_t i, uint64_t v) {
  memcpy((unsigned char*)buf + i * (size_t)size, &v, (size_t)size);
}

/* ---- One rank -------------------------------------------------------------------------- */

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
  if (o->op == O_AVG && (t->kind == K_NARROW || t->kind == K_FLOAT) && !isPow2(n)) o->op = O_SUM;
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
  snprintf(buf, len,
           "%s %s %s count %zu root %d%s shift %d on %s of %d ranks (seed %016" PRIx64 ")",
           collNames[o->coll], types[o->type].name, collReduces(o->coll) ? opNames[o->op] : "-",
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
      setElem(sd, esz, i, inputBits(o, n, r, i));
  for (size_t i = 0; i < recvElems; i++) /* a recognisable stale value */
    setElem(rd, esz, i, 0x5a5a5a5a5a5a5a5aull);
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
        setElem(rd, esz, (size_t)r * cnt + i, inputBits(o, n, r, i));
      o->sb = rd + (size_t)r * cnt * (size_t)esz;
    }
    break;
  case C_REDUCESCATTER:
    if (o->inPlace) o->rb = sd + (size_t)r * cnt * (size_t)esz;
    break;
  case C_GATHER:
    if (o->inPlace && r == o->root) {
      for (size_t i = 0; i < cnt; i++)
        setElem(rd, esz, (size_t)r * cnt + i, inputBits(o, n, r, i));
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
  if (collReduces(o->coll) && o->op == O_PREMUL) {
    uint64_t sbits = 0;
    const struct typeInfo* t = &types[o->type];
    if (t->kind == K_INT || t->kind == K_UINT)
      sbits = (uint64_t)o->iscalar & widthMask(t->size);
    else
      encodeFloat(o->type, o->fscalar, &sbits);
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
      ok = reducedBits(o, n, i, &want) == 0;
      break;
    case C_REDUCESCATTER:
      ok = reducedBits(o, n, (size_t)r * cnt + i, &want) == 0;
      break;
    case C_BROADCAST:
    case C_BCAST:
      want = inputBits(o, n, o->root, i), ok = 1;
      break;
    case C_ALLGATHER:
    case C_GATHER:
      want = inputBits(o, n, (int)(i / cnt), i % cnt), ok = 1;
      break;
    case C_ALLTOALL:
      want = inputBits(o, n, (int)(i / cnt), (size_t)r * cnt + i % cnt), ok = 1;
      break;
    case C_SCATTER:
      want = inputBits(o, n, o->root, (size_t)r * cnt + i), ok = 1;
      break;
    case C_SENDRECV:
      want = inputBits(o, n, o->shift < 0 ? r ^ 1 : (r - o->shift + n) % n, i), ok = 1;
      break;
    }
    if (!ok) {
      fprintf(stderr, "papccl_soak: rank %d: reference of element %zu not representable: %s\n",
              x->worldRank, i, x->desc);
      wrong++;
      continue;
    }
    uint64_t got = getElem(out, esz, i);
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
      if (getElem(o->sb, esz, i) != inputBits(o, n, r, i)) {
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

/* A rank's exit status once it is done: _exit() skips LeakSanitizer's check at exit, so
 * under ASan (detect_leaks=1) the rank checks for leaks first; a leak fails it. */
static int rankLeakChecked(int rank, int status) {
#ifdef SOAK_ASAN
  fflush(stdout);
  fflush(stderr);
  if (__lsan_do_recoverable_leak_check() != 0) {
    fprintf(stderr, "papccl_soak: rank %d: LeakSanitizer found leaks (reported above)\n", rank);
    if (status == 0) status = 1;
  }
#else
  (void)rank;
#endif
  return status;
}

static int rankMain(const struct soakCfg* cfg, struct soakShared* sh, int rank, papcclUniqueId id) {
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

/* ---- Parent: forks the ranks, watches them, reports ------------------------------------- */

static pid_t g_pids[SOAK_MAX_RANKS];
static int g_npids;

static void killChildren(void) {
  for (int r = 0; r < g_npids; r++)
    if (g_pids[r] > 0) kill(g_pids[r], SIGKILL);
}

static void onSignal(int sig) {
  killChildren(); /* async-signal-safe: kill and _exit only */
  _exit(128 + sig);
}

static int readFull(int fd, void* buf, size_t len) {
  size_t got = 0;
  while (got < len) {
    ssize_t k = read(fd, (char*)buf + got, len - got);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) return -1;
    got += (size_t)k;
  }
  return 0;
}

static void sumStats(const struct soakShared* sh, int n, struct rankStats* t) {
  memset(t, 0, sizeof(*t));
  for (int r = 0; r < n; r++) {
    const struct rankStats* s = &sh->r[r];
    atomic_fetch_add(&t->ops, atomic_load(&s->ops));
    atomic_fetch_add(&t->bytes, atomic_load(&s->bytes));
    atomic_fetch_add(&t->wrongOps, atomic_load(&s->wrongOps));
    atomic_fetch_add(&t->wrongElems, atomic_load(&s->wrongElems));
    atomic_fetch_add(&t->errors, atomic_load(&s->errors));
    atomic_fetch_add(&t->splits, atomic_load(&s->splits));
    atomic_fetch_add(&t->groups, atomic_load(&s->groups));
    atomic_fetch_add(&t->childOps, atomic_load(&s->childOps));
    for (int c = 0; c < C_NUM; c++)
      atomic_fetch_add(&t->coll[c], atomic_load(&s->coll[c]));
  }
}

/* Seconds since rank's last completed operation; 0 when it completed one after `now` was read
 * (unsigned, the difference would wrap to a huge idle time: a false hang). */
static double idleS(struct rankStats* s, uint64_t now) {
  uint64_t last = atomic_load_explicit(&s->lastProgressNs, memory_order_relaxed);
  return last >= now ? 0 : (double)(now - last) * 1e-9;
}

static void usage(const char* prog) {
  fprintf(stderr,
          "usage: %s [--seconds S] [--ranks N] [--seed SEED] [--max-bytes B] [--watchdog S]\n"
          "          [--progress S] [--verbose]\n"
          "  random collectives on N forked ranks (2..%d, default 4) for S seconds (default 60);\n"
          "  every result is checked exactly. Exit 0 only with no wrong result, error or hang.\n",
          prog, SOAK_MAX_RANKS);
}

int main(int argc, char** argv) {
  struct soakCfg cfg = {60, 60, 10, 4, 0, 4 << 20, 0};
  int seedSet = 0;
  static const struct option longOpts[] = {{"seconds", required_argument, NULL, 's'},
                                           {"ranks", required_argument, NULL, 'n'},
                                           {"seed", required_argument, NULL, 'S'},
                                           {"max-bytes", required_argument, NULL, 'b'},
                                           {"watchdog", required_argument, NULL, 'w'},
                                           {"progress", required_argument, NULL, 'p'},
                                           {"verbose", no_argument, NULL, 'v'},
                                           {"help", no_argument, NULL, 'h'},
                                           {NULL, 0, NULL, 0}};
  int ch;
  while ((ch = getopt_long(argc, argv, "s:n:S:b:w:p:vh", longOpts, NULL)) != -1) {
    switch (ch) {
    case 's':
      cfg.seconds = atof(optarg);
      break;
    case 'n':
      cfg.nranks = atoi(optarg);
      break;
    case 'S':
      cfg.seed = strtoull(optarg, NULL, 0);
      seedSet = 1;
      break;
    case 'b':
      cfg.maxBytes = (size_t)strtoull(optarg, NULL, 0);
      break;
    case 'w':
      cfg.watchdogS = atof(optarg);
      break;
    case 'p':
      cfg.progressS = atof(optarg);
      break;
    case 'v':
      cfg.verbose = 1;
      break;
    default:
      usage(argv[0]);
      return ch == 'h' ? 0 : 2;
    }
  }
  if (cfg.nranks < 2 || cfg.nranks > SOAK_MAX_RANKS || cfg.seconds < 0 || cfg.maxBytes < 64 ||
      cfg.watchdogS <= 0 || cfg.progressS <= 0) {
    usage(argv[0]);
    return 2;
  }
  if (!seedSet) cfg.seed = mix64(nowNs() ^ ((uint64_t)getpid() << 32));
  printf("# papccl_soak: %d ranks (processes), %.0f s, max %zu bytes per buffer, watchdog %.0f s\n",
         cfg.nranks, cfg.seconds, cfg.maxBytes, cfg.watchdogS);
  printf("# seed %" PRIu64 " (replay: --seed %" PRIu64 " --ranks %d)\n", cfg.seed, cfg.seed,
         cfg.nranks);
  fflush(stdout);
  fflush(stderr);

  struct soakShared* sh = (struct soakShared*)mmap(NULL, sizeof(*sh), PROT_READ | PROT_WRITE,
                                                   MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (sh == MAP_FAILED) {
    perror("papccl_soak: mmap");
    return 1;
  }
  memset(sh, 0, sizeof(*sh));
  const uint64_t t0 = nowNs();
  for (int r = 0; r < cfg.nranks; r++)
    atomic_store(&sh->r[r].lastProgressNs, t0);

  struct sigaction sa;
  memset(&sa, 0, sizeof(sa));
  sa.sa_handler = onSignal;
  sigaction(SIGINT, &sa, NULL);
  sigaction(SIGTERM, &sa, NULL);
  sigaction(SIGHUP, &sa, NULL);

  /* Fork before the library starts any thread here (papcclGetUniqueId starts the root
   * listener), then hand the id to the children through socket pairs. */
  int idFds[SOAK_MAX_RANKS];
  const pid_t parent = getpid();
  for (int r = 0; r < cfg.nranks; r++) {
    int fds[2];
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, fds) != 0) {
      perror("papccl_soak: socketpair");
      killChildren();
      return 1;
    }
    pid_t pid = fork();
    if (pid < 0) {
      perror("papccl_soak: fork");
      killChildren();
      return 1;
    }
    if (pid == 0) {
      prctl(PR_SET_PDEATHSIG, SIGKILL); /* never outlive the parent */
      if (getppid() != parent) _exit(1);
      signal(SIGINT, SIG_DFL);
      signal(SIGTERM, SIG_DFL);
      signal(SIGHUP, SIG_DFL);
      close(fds[1]);
      for (int q = 0; q < r; q++)
        close(idFds[q]);
      papcclUniqueId id;
      if (readFull(fds[0], &id, sizeof(id)) != 0) _exit(3);
      close(fds[0]);
      _exit(rankLeakChecked(r, rankMain(&cfg, sh, r, id)));
    }
    close(fds[0]);
    idFds[r] = fds[1];
    g_pids[r] = pid;
    g_npids = r + 1;
  }
  papcclUniqueId id;
  papcclResult_t res = papcclGetUniqueId(&id);
  if (res != papcclSuccess) {
    fprintf(stderr, "papccl_soak: papcclGetUniqueId failed: %s\n", papcclGetErrorString(res));
    killChildren();
    return 1;
  }
  for (int r = 0; r < cfg.nranks; r++) {
    if (send(idFds[r], &id, sizeof(id), MSG_NOSIGNAL) != (ssize_t)sizeof(id))
      fprintf(stderr, "papccl_soak: cannot send the id to rank %d\n", r);
    close(idFds[r]);
  }

  int remaining = cfg.nranks, failed = 0, hung = 0;
  double nextProgress = cfg.progressS;
  while (remaining > 0) {
    struct timespec ts = {0, 100 * 1000 * 1000};
    nanosleep(&ts, NULL);
    for (int r = 0; r < cfg.nranks; r++) {
      int status = 0;
      if (g_pids[r] <= 0 || waitpid(g_pids[r], &status, WNOHANG) != g_pids[r]) continue;
      g_pids[r] = -1;
      remaining--;
      if ((WIFEXITED(status) && WEXITSTATUS(status) == 0) || hung) continue;
      if (WIFEXITED(status))
        fprintf(stderr, "papccl_soak: rank %d exited with status %d during: %s\n", r,
                WEXITSTATUS(status), sh->r[r].current);
      else
        fprintf(stderr, "papccl_soak: rank %d killed by signal %d during: %s\n", r,
                WTERMSIG(status), sh->r[r].current);
      failed = 1;
    }
    uint64_t now = nowNs();
    double el = (double)(now - t0) * 1e-9;
    if (failed && remaining > 0) {
      fprintf(stderr, "papccl_soak: stopping the other ranks\n");
      killChildren();
      continue;
    }
    if (el >= cfg.seconds) atomic_store(&sh->stop, 1);
    for (int r = 0; r < cfg.nranks && !hung; r++) {
      double idle = idleS(&sh->r[r], now);
      if (g_pids[r] > 0 && idle > cfg.watchdogS) {
        hung = 1;
        fprintf(stderr, "papccl_soak: HANG: no operation completed on rank %d for %.0f s\n", r,
                idle);
        for (int q = 0; q < cfg.nranks; q++)
          fprintf(stderr, "papccl_soak:   rank %d%s, last progress %.1f s ago: %s\n", q,
                  g_pids[q] > 0 ? "" : " (exited)", idleS(&sh->r[q], now), sh->r[q].current);
        killChildren();
      }
    }
    if (el >= nextProgress) {
      struct rankStats t;
      sumStats(sh, cfg.nranks, &t);
      printf("[%7.1f s] ops %" PRIu64 " (%.1f/s)  bytes %.3f GiB  splits %" PRIu64
             "  groups %" PRIu64 "  wrong %" PRIu64 "  errors %" PRIu64 "\n",
             el, atomic_load(&t.ops), (double)atomic_load(&t.ops) / el,
             (double)atomic_load(&t.bytes) / (1 << 30), atomic_load(&t.splits),
             atomic_load(&t.groups), atomic_load(&t.wrongOps), atomic_load(&t.errors));
      fflush(stdout);
      nextProgress += cfg.progressS;
    }
  }
  double el = (double)(nowNs() - t0) * 1e-9;
  struct rankStats t;
  sumStats(sh, cfg.nranks, &t);
  uint64_t wrong = atomic_load(&t.wrongOps), errors = atomic_load(&t.errors);
  if (failed && errors == 0) errors = 1; /* a rank died without saying why */
  int pass = !failed && !hung && wrong == 0 && errors == 0;
  printf("# papccl_soak summary: seed %" PRIu64 ", %d ranks, %.1f s\n", cfg.seed, cfg.nranks, el);
  printf("#   ops %" PRIu64 " (%" PRIu64
         " on split children; %.1f/s), bytes %.3f GiB, splits %" PRIu64 ", groups %" PRIu64 "\n",
         atomic_load(&t.ops), atomic_load(&t.childOps), (double)atomic_load(&t.ops) / el,
         (double)atomic_load(&t.bytes) / (1 << 30), atomic_load(&t.splits), atomic_load(&t.groups));
  printf("#  ");
  for (int c = 0; c < C_NUM; c++)
    printf(" %s %" PRIu64, collNames[c], atomic_load(&t.coll[c]));
  printf("\n");
  printf("#   wrong results %" PRIu64 " (%" PRIu64 " elements), errors %" PRIu64 ", hang %s\n",
         wrong, atomic_load(&t.wrongElems), errors, hung ? "yes" : "no");
  printf("# result: %s\n", pass ? "PASS" : "FAIL");
  return pass ? 0 : 1;
}
