/* SPDX-License-Identifier: Apache-2.0 */
/* Host reduction loops: the CPU path of every (datatype, op) pair, scale and avg division. */

/* Vectorization, checked with GCC 12.2 on x86-64 by disassembling this file's object at -O3
 * (meson's release build) and at -O2: the fp32 sum block compiles to 8 x vaddps on ymm (64
 * floats) in the avx2 clone and 16 x addps on xmm in the default clone (-O2: one vaddps ymm in a
 * rolled loop). fp32 max is vcmpltps + vcmpneqps + vpor + vblendvps on ymm, int32 sum vpaddd
 * ymm, fp64 sum vaddpd ymm / addpd xmm, int64 prod an emulated vpmuludq sequence on ymm. The
 * fp16, bf16 and fp8 loops vectorize too (vpmovzxwd, vcvtdq2ps, vpblendvb on ymm). Integer
 * division stays scalar: x86 has no vector integer divide. */

#include "kernels.h"

#include "log.h"
#include "reduce_ops.h"

#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* Each hot loop is compiled twice, for AVX2 and for the baseline ISA, and picked once at load
 * time by an ifunc resolver (256-bit vectors double the work per instruction where the data is
 * in cache; memory-bound sizes gain less). Only where the toolchain has ifunc support. */
/* Not under ThreadSanitizer: the instrumented resolver runs while the dynamic loader
 * relocates the program, before the TSan runtime is up, and crashes there. */
#if defined(__x86_64__) && defined(__gnu_linux__) && defined(__has_attribute) && \
    !defined(__SANITIZE_THREAD__)
#if __has_attribute(target_clones)
#define PAP_SIMD_CLONES __attribute__((target_clones("avx2", "default")))
#endif
#endif
#ifndef PAP_SIMD_CLONES
#define PAP_SIMD_CLONES
#endif

/* Every loop runs a fixed-length block body: a constant trip count that is a multiple of every
 * vector width vectorizes under -O2's "very cheap" cost model too (it refuses loops that need
 * a scalar epilogue), and there is one vector body per loop instead of body, epilogue and
 * peel. The last partial block runs the same body on zeroed stack copies. */
#define PAP_BLOCK 64
/* Below this many elements a plain loop on stack copies: the block loops' zeroed staging of
 * one partial block cost some 150 ns for a 2-float sum (a flat allreduce's whole reduction). */
#define PAP_SMALL 16

#if defined(__GNUC__)
#define PAP_ALWAYS_INLINE static inline __attribute__((always_inline))
#else
#define PAP_ALWAYS_INLINE static inline
#endif

/* Pointers that are not aligned to the element size (a byte-granular staging offset) would
 * break the vector loops' alignment assumptions; they take the staged loop, as does
 * dst == a == b, which no restrict-qualified loop can express. */
#define PAP_MISALIGNED(T, p) (((uintptr_t)(p) & (sizeof(T) - 1)) != 0)

/* Copies the m < PAP_BLOCK remaining elements of src into the zeroed block tmp. */
#define PAP_TAIL_COPY(tmp, src, m) \
  do { \
    memset((tmp), 0, sizeof(tmp)); \
    memcpy((tmp), (src), (m) * sizeof(*(tmp))); \
  } while (0)

/* Loop shapes. `restrict` holds in each: the caller picks the shape from the pointers. */

/* d = blk(a, b), d distinct from a and b. */
#define DEFINE_LOOP_BIN(fn, T, blk) \
  PAP_SIMD_CLONES static void fn(T* restrict d, const T* restrict a, const T* restrict b, \
                                 size_t n) { \
    T ta[PAP_BLOCK]; \
    T tb[PAP_BLOCK]; \
    T td[PAP_BLOCK]; \
    for (size_t i = 0; i < n; i += PAP_BLOCK) { \
      size_t m = n - i; \
      const T* pa = a + i; \
      const T* pb = b + i; \
      T* pd = d + i; \
      if (m < PAP_BLOCK) { \
        PAP_TAIL_COPY(ta, pa, m); \
        PAP_TAIL_COPY(tb, pb, m); \
        pa = ta; \
        pb = tb; \
        pd = td; \
      } \
      blk(pd, pa, pb); \
      if (m < PAP_BLOCK) memcpy(d + i, td, m * sizeof(T)); \
    } \
  }

/* d = blk(d, s, c): d and s distinct. The block either updates d in place with s as the other
 * operand (dst == a or dst == b), or writes d from the source s (scale, divide); c is a
 * loop-invariant argument. */
#define DEFINE_LOOP_PAIR(fn, T, blk, C) \
  PAP_SIMD_CLONES static void fn(T* restrict d, const T* restrict s, C c, size_t n) { \
    T ts[PAP_BLOCK]; \
    T td[PAP_BLOCK]; \
    for (size_t i = 0; i < n; i += PAP_BLOCK) { \
      size_t m = n - i; \
      const T* ps = s + i; \
      T* pd = d + i; \
      if (m < PAP_BLOCK) { \
        PAP_TAIL_COPY(td, pd, m); \
        PAP_TAIL_COPY(ts, ps, m); \
        ps = ts; \
        pd = td; \
      } \
      blk(pd, ps, c); \
      if (m < PAP_BLOCK) memcpy(d + i, td, m * sizeof(T)); \
    } \
  }

/* Any pointers, byte-aligned or aliased in any exact way (dst == a == b included): every block
 * is staged through aligned stack copies, then runs the same body. */
#define DEFINE_LOOP_STAGED(fn, T, blk, C) \
  static void fn(void* d, const void* a, const void* b, C c, size_t n) { \
    T ta[PAP_BLOCK]; \
    T tb[PAP_BLOCK]; \
    T td[PAP_BLOCK]; \
    memset(ta, 0, sizeof(ta)); \
    memset(tb, 0, sizeof(tb)); \
    for (size_t i = 0; i < n; i += PAP_BLOCK) { \
      size_t m = n - i < PAP_BLOCK ? n - i : PAP_BLOCK; \
      memcpy(ta, (const char*)a + i * sizeof(T), m * sizeof(T)); \
      if (b != NULL) memcpy(tb, (const char*)b + i * sizeof(T), m * sizeof(T)); \
      blk(td, ta, tb, c); \
      memcpy((char*)d + i * sizeof(T), td, m * sizeof(T)); \
    } \
  }

/* ---- Block bodies and loops per (type, op) -------------------------------------------------- */

#define DEFINE_REDUCE(Op, name, T) \
  PAP_ALWAYS_INLINE void blk##Op##_##name(T* restrict o, const T* restrict x, \
                                          const T* restrict y) { \
    for (size_t k = 0; k < PAP_BLOCK; k++) \
      o[k] = papRed##Op##_##name(x[k], y[k]); \
  } \
  /* o = o OP y (dst == a) */ \
  PAP_ALWAYS_INLINE void blk##Op##_##name##_inA(T* restrict o, const T* restrict y, int unused) { \
    (void)unused; \
    for (size_t k = 0; k < PAP_BLOCK; k++) \
      o[k] = papRed##Op##_##name(o[k], y[k]); \
  } \
  /* o = x OP o (dst == b) */ \
  PAP_ALWAYS_INLINE void blk##Op##_##name##_inB(T* restrict o, const T* restrict x, int unused) { \
    (void)unused; \
    for (size_t k = 0; k < PAP_BLOCK; k++) \
      o[k] = papRed##Op##_##name(x[k], o[k]); \
  } \
  DEFINE_LOOP_BIN(reduce##Op##_##name, T, blk##Op##_##name) \
  DEFINE_LOOP_PAIR(reduce##Op##_##name##_inA, T, blk##Op##_##name##_inA, int) \
  DEFINE_LOOP_PAIR(reduce##Op##_##name##_inB, T, blk##Op##_##name##_inB, int) \
  PAP_ALWAYS_INLINE void blk##Op##_##name##_st(T* restrict o, const T* restrict x, \
                                               const T* restrict y, int unused) { \
    (void)unused; \
    blk##Op##_##name(o, x, y); \
  } \
  DEFINE_LOOP_STAGED(reduce##Op##_##name##_staged, T, blk##Op##_##name##_st, int) \
  static void reduce##Op##_##name##_any(void* d, const void* a, const void* b, size_t n) { \
    if (n == 0) { /* nothing to read: the pointers may be NULL */ \
    } else if (n < PAP_SMALL) { /* both inputs read before any write: any aliasing is fine */ \
      T ta[PAP_SMALL], tb[PAP_SMALL]; \
      memcpy(ta, a, n * sizeof(T)); \
      memcpy(tb, b, n * sizeof(T)); \
      for (size_t k = 0; k < n; k++) \
        ta[k] = papRed##Op##_##name(ta[k], tb[k]); \
      memcpy(d, ta, n * sizeof(T)); \
    } else if (PAP_MISALIGNED(T, d) || PAP_MISALIGNED(T, a) || PAP_MISALIGNED(T, b) || \
               (d == a && d == b)) { \
      reduce##Op##_##name##_staged(d, a, b, 0, n); \
    } else if (d == a) { \
      reduce##Op##_##name##_inA((T*)d, (const T*)b, 0, n); \
    } else if (d == b) { \
      reduce##Op##_##name##_inB((T*)d, (const T*)a, 0, n); \
    } else { \
      reduce##Op##_##name((T*)d, (const T*)a, (const T*)b, n); \
    } \
  }

/* dst = src * scalar (the Prod functor with a loop-invariant operand: one rounding for narrow
 * types, wrap-around for integers) and dst = src / k, out of place, in place or staged. */
#define DEFINE_UNARY(Kind, name, T, C, EXPR) \
  PAP_ALWAYS_INLINE void blk##Kind##_##name(T* restrict o, const T* restrict x, C c) { \
    for (size_t k = 0; k < PAP_BLOCK; k++) \
      o[k] = EXPR(x[k], c); \
  } \
  PAP_ALWAYS_INLINE void blk##Kind##_##name##_in(T* restrict o, C c) { \
    for (size_t k = 0; k < PAP_BLOCK; k++) \
      o[k] = EXPR(o[k], c); \
  } \
  PAP_ALWAYS_INLINE void blk##Kind##_##name##_st(T* restrict o, const T* restrict x, \
                                                 const T* restrict unused, C c) { \
    (void)unused; \
    blk##Kind##_##name(o, x, c); \
  } \
  DEFINE_LOOP_PAIR(Kind##_##name, T, blk##Kind##_##name, C) \
  DEFINE_LOOP_STAGED(Kind##_##name##_staged, T, blk##Kind##_##name##_st, C) \
  PAP_SIMD_CLONES static void Kind##_##name##_in(T* d, C c, size_t n) { \
    T td[PAP_BLOCK]; \
    for (size_t i = 0; i < n; i += PAP_BLOCK) { \
      size_t m = n - i; \
      T* pd = d + i; \
      if (m < PAP_BLOCK) { \
        PAP_TAIL_COPY(td, pd, m); \
        pd = td; \
      } \
      blk##Kind##_##name##_in(pd, c); \
      if (m < PAP_BLOCK) memcpy(d + i, td, m * sizeof(T)); \
    } \
  } \
  static void Kind##_##name##_any(void* d, const void* s, C c, size_t n) { \
    if (PAP_MISALIGNED(T, d) || PAP_MISALIGNED(T, s)) { \
      Kind##_##name##_staged(d, s, NULL, c, n); \
    } else if (d == s) { \
      Kind##_##name##_in((T*)d, c, n); \
    } else { \
      Kind##_##name((T*)d, (const T*)s, c, n); \
    } \
  }

#define DEFINE_TYPE(dtype, name, T) \
  DEFINE_REDUCE(Sum, name, T) \
  DEFINE_REDUCE(Prod, name, T) \
  DEFINE_REDUCE(Max, name, T) \
  DEFINE_REDUCE(Min, name, T) \
  DEFINE_UNARY(scale, name, T, T, papRedProd_##name) \
  DEFINE_UNARY(div, name, T, int, papRedDiv_##name) \
  static void scale_##name##_entry(void* d, const void* s, const void* scalar, size_t n) { \
    T c; \
    memcpy(&c, scalar, sizeof(c)); \
    scale_##name##_any(d, s, c, n); \
  }

PAP_RED_TYPE_LIST(DEFINE_TYPE)
#undef DEFINE_TYPE
#undef DEFINE_UNARY
#undef DEFINE_REDUCE

/* ---- Dispatch tables ---------------------------------------------------------------------- */

typedef void (*reduceFn)(void* d, const void* a, const void* b, size_t n);
typedef void (*scaleFn)(void* d, const void* s, const void* scalar, size_t n);
typedef void (*divFn)(void* d, const void* s, int k, size_t n);

#define REDUCE_ROW(dtype, name, T) \
  [dtype] = { \
      [PAP_RED_SUM] = reduceSum_##name##_any, \
      [PAP_RED_PROD] = reduceProd_##name##_any, \
      [PAP_RED_MAX] = reduceMax_##name##_any, \
      [PAP_RED_MIN] = reduceMin_##name##_any, \
  },
static const reduceFn reduceTable[papcclNumTypes][4] = {PAP_RED_TYPE_LIST(REDUCE_ROW)};
#undef REDUCE_ROW

#define SCALE_ENTRY(dtype, name, T) [dtype] = scale_##name##_entry,
static const scaleFn scaleTable[papcclNumTypes] = {PAP_RED_TYPE_LIST(SCALE_ENTRY)};
#undef SCALE_ENTRY

#define DIV_ENTRY(dtype, name, T) [dtype] = div_##name##_any,
static const divFn divTable[papcclNumTypes] = {PAP_RED_TYPE_LIST(DIV_ENTRY)};
#undef DIV_ENTRY

#define SIZE_ENTRY(dtype, name, T) [dtype] = sizeof(T),
static const size_t typeSizes[papcclNumTypes] = {PAP_RED_TYPE_LIST(SIZE_ENTRY)};
#undef SIZE_ENTRY

static int validType(papcclDataType_t datatype) {
  return (int)datatype >= 0 && (int)datatype < (int)papcclNumTypes;
}

/* ---- kernels.h entry points ------------------------------------------------------------------ */
/* Bad arguments here are internal bugs (the API edge validated them): they log and leave dst
 * untouched rather than write out of bounds. */

size_t papKernTypeSize(papcclDataType_t datatype) {
  return validType(datatype) ? typeSizes[datatype] : 0;
}

void papKernHostReduce(void* dst, const void* a, const void* b, size_t count,
                       papcclDataType_t datatype, enum papRedKind op) {
  if (!validType(datatype)) {
    PAP_WARN("host reduce: invalid datatype %d", (int)datatype);
    return;
  }
  if ((int)op < (int)PAP_RED_SUM || (int)op > (int)PAP_RED_MIN) {
    PAP_WARN("host reduce: invalid reduction kind %d", (int)op);
    return;
  }
  reduceTable[datatype][op](dst, a, b, count);
}

void papKernHostScale(void* dst, const void* src, size_t count, papcclDataType_t datatype,
                      const void* scalar) {
  if (!validType(datatype)) {
    PAP_WARN("host scale: invalid datatype %d", (int)datatype);
    return;
  }
  if (scalar == NULL) {
    PAP_WARN("host scale: scalar is NULL");
    return;
  }
  scaleTable[datatype](dst, src, scalar, count);
}

/* n is the rank count: n < 1 is a caller bug (integer division by 0 would trap). */
void papKernHostDivide(void* dst, const void* src, size_t count, papcclDataType_t datatype, int n) {
  if (!validType(datatype)) {
    PAP_WARN("host divide: invalid datatype %d", (int)datatype);
    return;
  }
  if (n < 1) {
    PAP_WARN("host divide: divisor %d is not a rank count (must be >= 1)", n);
    return;
  }
  divTable[datatype](dst, src, n, count);
}

float papKernHalfToFloat(uint16_t h) {
  return papRedHalfToFloat(h);
}

uint16_t papKernFloatToHalf(float f) {
  return papRedFloatToHalf(f);
}

float papKernBf16ToFloat(uint16_t h) {
  return papRedBf16ToFloat(h);
}

uint16_t papKernFloatToBf16(float f) {
  return papRedFloatToBf16(f);
}

float papKernE4m3ToFloat(uint8_t v) {
  return papRedE4m3ToFloat(v);
}

uint8_t papKernFloatToE4m3(float f) {
  return papRedFloatToE4m3(f);
}

float papKernE5m2ToFloat(uint8_t v) {
  return papRedE5m2ToFloat(v);
}

uint8_t papKernFloatToE5m2(float f) {
  return papRedFloatToE5m2(f);
}
