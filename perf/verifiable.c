/* SPDX-License-Identifier: Apache-2.0 */
/* Verifiable data for the perf drivers: inputs whose reductions are exact in any order. */
#include "common.h"

#include <string.h>

/* The narrow float formats through the one set of converters the tests use (no library
 * code: docs/CONVENTIONS.md section 1). */
#include "narrow_float.h"

/* ---- Types and data generation ------------------------------------------------------ */

enum {
  KIND_SINT,
  KIND_UINT,
  KIND_FLOAT
};

struct typeInfo {
  const char* name;
  size_t size;
  int kind;
  const struct papTestNarrowFmt* narrow; /* fp16, bf16, fp8: the format; else NULL */
  int64_t lim; /* every integer in [-lim, lim] is exact in the type */
};

static const struct typeInfo kTypes[papcclNumTypes] = {
    [papcclInt8] = {"int8", 1, KIND_SINT, NULL, 127},
    [papcclUint8] = {"uint8", 1, KIND_UINT, NULL, 255},
    [papcclInt32] = {"int32", 4, KIND_SINT, NULL, INT32_MAX},
    [papcclUint32] = {"uint32", 4, KIND_UINT, NULL, UINT32_MAX},
    [papcclInt64] = {"int64", 8, KIND_SINT, NULL, (int64_t)1 << 40},
    [papcclUint64] = {"uint64", 8, KIND_UINT, NULL, (int64_t)1 << 40},
    [papcclFloat16] = {"half", 2, KIND_FLOAT, &papTestNarrowF16, 1 << 11},
    [papcclFloat32] = {"float", 4, KIND_FLOAT, NULL, 1 << 24},
    [papcclFloat64] = {"double", 8, KIND_FLOAT, NULL, (int64_t)1 << 40},
    [papcclBfloat16] = {"bfloat16", 2, KIND_FLOAT, &papTestNarrowBf16, 1 << 8},
    [papcclFloat8e4m3] = {"f8e4m3", 1, KIND_FLOAT, &papTestNarrowE4m3, 1 << 4},
    [papcclFloat8e5m2] = {"f8e5m2", 1, KIND_FLOAT, &papTestNarrowE5m2, 1 << 3},
};
static const char* const kOpNames[PAP_PERF_NUM_OPS] = {"sum", "prod", "max",
                                                       "min", "avg",  "mulsum"};

size_t papPerfTypeSize(papcclDataType_t type) {
  return kTypes[type].size;
}
const char* papPerfTypeName(papcclDataType_t type) {
  return kTypes[type].name;
}
const char* papPerfOpName(int op) {
  return (op >= 0 && op < PAP_PERF_NUM_OPS) ? kOpNames[op] : "none";
}

static inline uint64_t mix64(uint64_t x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ull;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}
static inline uint64_t eltHash(uint64_t seed, int rank, size_t idx) {
  return mix64(seed * 0xd1b54a32d192ed03ull + idx * 0x9e3779b97f4a7c15ull +
               (uint64_t)(rank + 2) * 0x632be59bd9b4e019ull);
}
__extension__ typedef unsigned __int128 perfU128;

/* A value in [lo, lo + span) from a 64-bit hash, by multiply-high (no division). */
static inline int64_t pick(uint64_t h, int64_t lo, uint64_t span) {
  return lo + (int64_t)(((perfU128)h * span) >> 64);
}

/* Value ranges per (type, op) so that every partial result is exact: integers whose
 * partial sums stay within lim; products of one random value and +-1; two non-negative
 * contributors for float avg; multiples of nranks for integer avg. */
struct gen {
  int op, kind, nranks;
  uint64_t seed;
  int64_t lo;
  uint64_t span;
};

static void genSetup(struct gen* g, papcclDataType_t type, int op, int nranks, uint64_t seed) {
  const struct typeInfo* t = &kTypes[type];
  int n = nranks > 0 ? nranks : 1;
  int64_t m = t->lim;
  if (op == papcclSum) m = t->lim / n;
  if (op == PAP_PERF_OP_MULSUM) m = t->lim / (2 * n);
  if (op == papcclAvg) m = t->kind == KIND_FLOAT ? t->lim / 2 : t->lim / (2 * n);
  g->op = op;
  g->kind = t->kind;
  g->nranks = n;
  g->seed = seed;
  g->lo = (t->kind == KIND_UINT || (op == papcclAvg && t->kind == KIND_FLOAT)) ? 0 : -m;
  g->span = (uint64_t)(m - g->lo) + 1;
}

/* Rank `rank`'s values for elements [first, first + m). */
static void genChunk(const struct gen* g, int rank, size_t first, size_t m, int64_t* out) {
  uint64_t n = (uint64_t)g->nranks;
  switch (g->op) {
  case papcclProd: /* one random contributor per element, +-1 from the others */
    for (size_t k = 0; k < m; k++) {
      uint64_t h = eltHash(g->seed, rank, first + k);
      int d = (int)pick(eltHash(g->seed, -1, first + k), 0, n);
      out[k] = rank == d ? pick(h, g->lo, g->span) : (g->kind != KIND_UINT && (h & 1)) ? -1 : 1;
    }
    break;
  case papcclAvg: /* two contributors per element, the others 0 */
    for (size_t k = 0; k < m; k++) {
      int d1 = (int)pick(eltHash(g->seed, -1, first + k), 0, n);
      int d2 = (d1 + 1) % g->nranks;
      int64_t v = pick(eltHash(g->seed, rank, first + k), g->lo, g->span);
      out[k] = (rank != d1 && rank != d2) ? 0 : g->kind == KIND_FLOAT ? v : v * g->nranks;
    }
    break;
  default:
    for (size_t k = 0; k < m; k++)
      out[k] = pick(eltHash(g->seed, rank, first + k), g->lo, g->span);
    break;
  }
}

/* A value to a narrow format's code: the inputs and results here are exact in the type, so
 * the exact encoding (a few arithmetic operations) serves; the rounding one (ties to even, as
 * a float would round) covers anything else. v goes through float first, as it always did. */
static uint32_t narrowCode(const struct papTestNarrowFmt* f, float v) {
  uint32_t c;
  return papTestNarrowEncodeExact(f, (double)v, &c) ? c : papTestNarrowEncode(f, (double)v);
}

/* Stores m values at buf[at..]: dv when given (floating-point types), else iv. */
static void storeChunk(void* buf, size_t at, size_t m, papcclDataType_t type, const int64_t* iv,
                       const double* dv) {
  const struct typeInfo* t = &kTypes[type];
  switch (type) {
  case papcclInt8:
  case papcclUint8:
    for (size_t k = 0; k < m; k++)
      ((uint8_t*)buf)[at + k] = (uint8_t)iv[k];
    break;
  case papcclInt32:
  case papcclUint32:
    for (size_t k = 0; k < m; k++)
      ((uint32_t*)buf)[at + k] = (uint32_t)iv[k];
    break;
  case papcclInt64:
  case papcclUint64:
    for (size_t k = 0; k < m; k++)
      ((uint64_t*)buf)[at + k] = (uint64_t)iv[k];
    break;
  case papcclFloat32:
    for (size_t k = 0; k < m; k++)
      ((float*)buf)[at + k] = dv ? (float)dv[k] : (float)iv[k];
    break;
  case papcclFloat64:
    for (size_t k = 0; k < m; k++)
      ((double*)buf)[at + k] = dv ? dv[k] : (double)iv[k];
    break;
  case papcclFloat16:
  case papcclBfloat16:
    for (size_t k = 0; k < m; k++) {
      float v = dv ? (float)dv[k] : (float)iv[k];
      ((uint16_t*)buf)[at + k] = (uint16_t)narrowCode(t->narrow, v);
    }
    break;
  default: /* fp8 */
    for (size_t k = 0; k < m; k++) {
      float v = dv ? (float)dv[k] : (float)iv[k];
      ((uint8_t*)buf)[at + k] = (uint8_t)narrowCode(t->narrow, v);
    }
    break;
  }
}

#define GEN_CHUNK 1024

void papPerfFillInput(void* buf, size_t count, size_t first, papcclDataType_t type, int op,
                      int rank, int nranks, uint64_t seed) {
  struct gen g;
  int64_t v[GEN_CHUNK];
  genSetup(&g, type, op, nranks, seed);
  for (size_t at = 0; at < count; at += GEN_CHUNK) {
    size_t m = count - at < GEN_CHUNK ? count - at : GEN_CHUNK;
    genChunk(&g, rank, first + at, m, v);
    storeChunk(buf, at, m, type, v, NULL);
  }
}

void papPerfFillExpected(void* buf, size_t count, size_t first, papcclDataType_t type, int op,
                         int nranks, uint64_t seed) {
  struct gen g;
  int64_t acc[GEN_CHUNK], v[GEN_CHUNK];
  double facc[GEN_CHUNK];
  genSetup(&g, type, op, nranks, seed);
  int isFloat = kTypes[type].kind == KIND_FLOAT;
  int floatProd = op == papcclProd && isFloat; /* in double: keeps the sign of a zero */
  for (size_t at = 0; at < count; at += GEN_CHUNK) {
    size_t m = count - at < GEN_CHUNK ? count - at : GEN_CHUNK;
    genChunk(&g, 0, first + at, m, acc);
    if (op == PAP_PERF_OP_NONE) {
      storeChunk(buf, at, m, type, acc, NULL);
      continue;
    }
    for (size_t k = 0; k < m; k++)
      facc[k] = (double)acc[k];
    for (int r = 1; r < g.nranks; r++) {
      genChunk(&g, r, first + at, m, v);
      switch (op) {
      case papcclProd:
        if (floatProd) {
          for (size_t k = 0; k < m; k++)
            facc[k] *= (double)v[k];
        } else {
          for (size_t k = 0; k < m; k++)
            acc[k] *= v[k];
        }
        break;
      case papcclMax:
        for (size_t k = 0; k < m; k++)
          acc[k] = v[k] > acc[k] ? v[k] : acc[k];
        break;
      case papcclMin:
        for (size_t k = 0; k < m; k++)
          acc[k] = v[k] < acc[k] ? v[k] : acc[k];
        break;
      case PAP_PERF_OP_MULSUM:
        for (size_t k = 0; k < m; k++)
          acc[k] += (r & 1) ? 2 * v[k] : v[k];
        break;
      default: /* sum, avg */
        for (size_t k = 0; k < m; k++)
          acc[k] += v[k];
        break;
      }
    }
    if (op == papcclAvg && isFloat) {
      for (size_t k = 0; k < m; k++)
        facc[k] = (double)acc[k] / g.nranks;
      storeChunk(buf, at, m, type, NULL, facc);
    } else if (op == papcclAvg) {
      for (size_t k = 0; k < m; k++)
        acc[k] /= g.nranks;
      storeChunk(buf, at, m, type, acc, NULL);
    } else {
      storeChunk(buf, at, m, type, acc, floatProd ? facc : NULL);
    }
  }
}

static inline uint64_t loadBits(const void* buf, size_t i, size_t size) {
  switch (size) {
  case 1:
    return ((const uint8_t*)buf)[i];
  case 2:
    return ((const uint16_t*)buf)[i];
  case 4:
    return ((const uint32_t*)buf)[i];
  default:
    return ((const uint64_t*)buf)[i];
  }
}

/* Distance in ulps between two sign-magnitude floating-point bit patterns. */
static uint64_t ulpDistance(uint64_t a, uint64_t b, size_t size) {
  int shift = (int)(size * 8 - 1);
  uint64_t magMask = (shift == 63) ? ~(1ull << 63) : ((1ull << shift) - 1);
  uint64_t ma = a & magMask, mb = b & magMask;
  if ((a >> shift) == (b >> shift)) return ma > mb ? ma - mb : mb - ma;
  return ma + mb;
}

int64_t papPerfCountWrong(const void* got, const void* expected, size_t count,
                          papcclDataType_t type, int op) {
  size_t size = kTypes[type].size;
  if (count == 0 || memcmp(got, expected, count * size) == 0) return 0;
  uint64_t tol = (op == papcclAvg && kTypes[type].kind == KIND_FLOAT) ? 2 : 0;
  int64_t wrong = 0;
  for (size_t i = 0; i < count; i++) {
    uint64_t a = loadBits(got, i, size), b = loadBits(expected, i, size);
    if (a != b && (tol == 0 || ulpDistance(a, b, size) > tol)) wrong++;
  }
  return wrong;
}

void papPerfPremulScalar(papcclDataType_t type, int rank, void* out8) {
  int64_t v = (rank & 1) ? 2 : 1;
  memset(out8, 0, 8);
  storeChunk(out8, 0, 1, type, &v, NULL);
}
