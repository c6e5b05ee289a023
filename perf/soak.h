/* SPDX-License-Identifier: Apache-2.0 */
/* What papccl_soak's files share (private to the soak): the settings, the state the ranks
 * share with the parent, the operation descriptor, the random numbers, and the values and
 * references of soak_values.c. soak.c: the parent; soak_rank.c: one rank. */
#ifndef PAPCCL_PERF_SOAK_H_
#define PAPCCL_PERF_SOAK_H_

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "papccl.h"

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
extern const char* const collNames[C_NUM];
extern const char* const opNames[];
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
struct papTestNarrowFmt;
struct typeInfo {
  const char* name;
  int size, kind;
  const struct papTestNarrowFmt* narrow; /* K_NARROW: tests/common/narrow_float.h */
  int64_t sumR, maxR;
};
extern const struct typeInfo types[papcclNumTypes];

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

static inline uint64_t nowNs(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static inline uint64_t mix64(uint64_t z) {
  z += 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}
struct rng {
  uint64_t s;
};
static inline uint64_t rnext(struct rng* g) {
  g->s += 0x9e3779b97f4a7c15ull;
  return mix64(g->s);
}
static inline uint64_t rbelow(struct rng* g, uint64_t n) {
  return n ? rnext(g) % n : 0;
}
static inline double runit(struct rng* g) {
  return (double)(rnext(g) >> 11) * (1.0 / 9007199254740992.0);
}

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

/* ---- soak_values.c: inputs and exact references ---------------------------------------- */
int papSoakCollReduces(int c);
int papSoakIsPow2(int n);
uint64_t papSoakWidthMask(int size);
/* The bits of v in a float type (narrow types: its exact encoding); 0 when not exact. */
int papSoakEncodeFloat(int type, double v, uint64_t* out);
/* Element idx of rank r's input to o on n ranks. */
uint64_t papSoakInputBits(const struct soakOp* o, int n, int r, size_t idx);
/* The exact reduction of element idx over n ranks; 0 when it is not exact in the type. */
int papSoakReducedBits(const struct soakOp* o, int n, size_t idx, uint64_t* out);
uint64_t papSoakGetElem(const void* buf, int size, size_t i);
void papSoakSetElem(void* buf, int size, size_t i, uint64_t v);

/* ---- soak_rank.c ----------------------------------------------------------------------- */
/* One rank's run (a forked process): its exit code. */
int papSoakRankMain(const struct soakCfg* cfg, struct soakShared* sh, int rank, papcclUniqueId id);

#endif /* PAPCCL_PERF_SOAK_H_ */
