/* SPDX-License-Identifier: Apache-2.0 */
/* papccl_soak: the names and value ranges of the collectives, ops and types, each rank's
 * inputs (a hash of seed, rank and index) and the exact reference of every result. */
#include <math.h>
#include <string.h>

#include "narrow_float.h"
#include "soak.h"

const char* const collNames[C_NUM] = {"allreduce", "broadcast",     "bcast",    "reduce",
                                      "allgather", "reducescatter", "alltoall", "gather",
                                      "scatter",   "sendrecv"};
const char* const opNames[] = {"sum", "prod", "max", "min", "avg", "premulsum"};

/* Reduction inputs are small integers in [-sumR, sumR] (sum, avg, pre-multiplied sum) or in
 * [-maxR, maxR] (max, min), so that every partial sum in every order is exact in the type. */
const struct typeInfo types[papcclNumTypes] = {
    {"int8", 1, K_INT, NULL, 0, 0},
    {"uint8", 1, K_UINT, NULL, 0, 0},
    {"int32", 4, K_INT, NULL, 0, 0},
    {"uint32", 4, K_UINT, NULL, 0, 0},
    {"int64", 8, K_INT, NULL, 0, 0},
    {"uint64", 8, K_UINT, NULL, 0, 0},
    {"float16", 2, K_NARROW, &papTestNarrowF16, 100, 1000},
    {"float32", 4, K_FLOAT, NULL, 1000, 1 << 24},
    {"float64", 8, K_FLOAT, NULL, 1000, (int64_t)1 << 40},
    {"bfloat16", 2, K_NARROW, &papTestNarrowBf16, 15, 200},
    {"float8e4m3", 1, K_NARROW, &papTestNarrowE4m3, 1, 16},
    {"float8e5m2", 1, K_NARROW, &papTestNarrowE5m2, 1, 8},
};

int papSoakCollReduces(int c) {
  return c == C_ALLREDUCE || c == C_REDUCE || c == C_REDUCESCATTER;
}
int papSoakIsPow2(int n) {
  return n > 0 && (n & (n - 1)) == 0;
}
uint64_t papSoakWidthMask(int size) {
  return size == 8 ? ~0ull : (1ull << (8 * size)) - 1;
}
static int64_t sext(uint64_t x, int size) {
  int sh = 64 - 8 * size;
  return (int64_t)(x << sh) >> sh;
}

int papSoakEncodeFloat(int type, double v, uint64_t* out) {
  const struct typeInfo* t = &types[type];
  if (t->kind == K_NARROW) {
    uint32_t code;
    if (!papTestNarrowEncodeExact(t->narrow, v, &code)) return -1;
    *out = code;
    return 0;
  }
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

uint64_t papSoakInputBits(const struct soakOp* o, int n, int r, size_t idx) {
  const struct typeInfo* t = &types[o->type];
  uint64_t h = elemHash(o, r, idx);
  if (!papSoakCollReduces(o->coll) || t->kind == K_INT || t->kind == K_UINT)
    return h & papSoakWidthMask(t->size);
  uint64_t b = 0;
  papSoakEncodeFloat(o->type, floatInput(o, n, r, idx), &b); /* representable by design */
  return b;
}

/* The reduction over all ranks of the inputs at idx; -1 if the design failed (a bug here). */
int papSoakReducedBits(const struct soakOp* o, int n, size_t idx, uint64_t* out) {
  const struct typeInfo* t = &types[o->type];
  if (t->kind == K_INT || t->kind == K_UINT) {
    uint64_t mask = papSoakWidthMask(t->size);
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
  return papSoakEncodeFloat(o->type, acc, out);
}

uint64_t papSoakGetElem(const void* buf, int size, size_t i) {
  uint64_t v = 0;
  memcpy(&v, (const unsigned char*)buf + i * (size_t)size, (size_t)size);
  return v;
}
void papSoakSetElem(void* buf, int size, size_t i, uint64_t v) {
  memcpy((unsigned char*)buf + i * (size_t)size, &v, (size_t)size);
}
