/* SPDX-License-Identifier: Apache-2.0 */
/* Reduction functors and bit-exact narrow-float converters, shared by host C and CUDA. */
#ifndef PAPCCL_KERNELS_REDUCE_OPS_H_
#define PAPCCL_KERNELS_REDUCE_OPS_H_

#include "kernels.h"

#include <stdint.h>
#include <string.h>

/* Every functor is PAP_HD, so the CPU loops, the CUDA kernels and the tests run the very same
 * arithmetic and host and GPU results match bit for bit (fp32/fp64 NaN payloads excepted:
 * x86 keeps the payload of the first NaN operand, NVIDIA GPUs return the canonical NaN).
 *
 * Semantics, per family:
 *  - integers: sum and prod wrap modulo 2^bits (done in the unsigned type: no signed-overflow
 *    UB); max/min compare the signed or unsigned value; divide truncates toward zero.
 *  - fp32/fp64: IEEE +, *, / in the type itself.
 *  - fp16, bf16, fp8 e4m3, fp8 e5m2 are stored as raw bits (uint16_t/uint8_t). Each op decodes
 *    to float, computes once in float and rounds once to nearest even. float carries at least
 *    2p+2 bits for all four formats, so the float result rounded again is the correctly rounded
 *    result for +, *, /. fp16 and bf16 overflow to inf as the hardware does; fp8 saturates to the
 *    largest finite value (inf included: NVIDIA's __NV_SATFINITE, which NCCL uses). A NaN result
 *    is stored as the canonical positive NaN (fp16/bf16 0x7fff, fp8 0x7f), as NVIDIA's
 *    converters produce.
 *  - max/min on floating types follow fmaxf/fminf (and NCCL's __hmax/__hmin): a NaN operand is
 *    ignored, the result is NaN only if both are NaN. With equal operands (+0 and -0) either one
 *    may be returned. The narrow types run max/min through the store converter too, so an e5m2
 *    inf operand comes back saturated, exactly as NCCL's fp8 max does.
 *
 * The converters use integer operations plus, for results below the smallest normal, one float
 * add whose result is a normal float, so they stay exact under flush-to-zero of subnormal
 * inputs and outputs (nvcc -ftz, x86 FTZ/DAZ). The arithmetic itself does not: bf16 subnormals
 * are float subnormals, and fp32/fp64 are IEEE only without FTZ. So build the kernels without
 * fast-math (nvcc's defaults -ftz=false -prec-div=true are what the tests check). */

/* In C, plain `static inline` is only a hint: in a unit as large as the host loops GCC's
 * inline-unit-growth limit leaves narrow-type functors as calls, which stops vectorization.
 * always_inline is C's counterpart of __forceinline__. */
#if defined(__CUDACC__)
#define PAP_HD static __host__ __device__ __forceinline__
#elif defined(__GNUC__)
#define PAP_HD static inline __attribute__((always_inline))
#else
#define PAP_HD static inline
#endif

/* ---- X-macro lists -------------------------------------------------------------------------- */

/* Every datatype once: X(datatype, name, storage type). */
#define PAP_RED_TYPE_LIST(X) \
  X(papcclInt8, i8, int8_t) \
  X(papcclUint8, u8, uint8_t) \
  X(papcclInt32, i32, int32_t) \
  X(papcclUint32, u32, uint32_t) \
  X(papcclInt64, i64, int64_t) \
  X(papcclUint64, u64, uint64_t) \
  X(papcclFloat16, f16, uint16_t) \
  X(papcclFloat32, f32, float) \
  X(papcclFloat64, f64, double) \
  X(papcclBfloat16, bf16, uint16_t) \
  X(papcclFloat8e4m3, e4m3, uint8_t) \
  X(papcclFloat8e5m2, e5m2, uint8_t)

/* Every element-wise op: X(enum papRedKind value, Name); functors are papRed<Name>_<name>. */
#define PAP_RED_OP_LIST(X) \
  X(PAP_RED_SUM, Sum) \
  X(PAP_RED_PROD, Prod) \
  X(PAP_RED_MAX, Max) \
  X(PAP_RED_MIN, Min)

/* The families the functors are generated from. Integers: X(name, T, unsigned T, division
 * type). The division type is wide enough that C's truncating division is exact. */
#define PAP_RED_INT_LIST(X) \
  X(i8, int8_t, uint8_t, int32_t) \
  X(u8, uint8_t, uint8_t, uint32_t) \
  X(i32, int32_t, uint32_t, int32_t) \
  X(u32, uint32_t, uint32_t, uint32_t) \
  X(i64, int64_t, uint64_t, int64_t) \
  X(u64, uint64_t, uint64_t, uint64_t)

/* Native floating types: X(name, T). */
#define PAP_RED_FLOAT_LIST(X) \
  X(f32, float) \
  X(f64, double)

/* Narrow floating types: X(name, storage T, decode to float, encode from float). */
#define PAP_RED_NARROW_LIST(X) \
  X(f16, uint16_t, papRedHalfToFloat, papRedFloatToHalf) \
  X(bf16, uint16_t, papRedBf16ToFloat, papRedFloatToBf16) \
  X(e4m3, uint8_t, papRedE4m3ToFloat, papRedFloatToE4m3) \
  X(e5m2, uint8_t, papRedE5m2ToFloat, papRedFloatToE5m2)

/* ---- Bit casts ------------------------------------------------------------------------------ */

PAP_HD uint32_t papRedFloatBits(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  uint32_t u;
  memcpy(&u, &f, sizeof(u));
  return u;
#endif
}

PAP_HD float papRedBitsFloat(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float f;
  memcpy(&f, &u, sizeof(f));
  return f;
#endif
}

/* cond ? a : b as a mask blend. GCC will not if-convert a ternary whose arms hold float
 * arithmetic (it may trap), which would leave a branch in the loop and stop vectorization. */
PAP_HD uint32_t papRedSelect(int cond, uint32_t a, uint32_t b) {
  uint32_t m = 0u - (uint32_t)(cond != 0);
  return (a & m) | (b & ~m);
}

/* ---- Narrow-float converters ---------------------------------------------------------------- */
/* Written as a few candidate results and selects (no data-dependent branches), so the host
 * compiler can vectorize the loops that use them. */

/* fp16 (1.5.10, bias 15) -> float: exact. */
PAP_HD float papRedHalfToFloat(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
  uint32_t mag = h & 0x7fffu;
  /* Normal: move the fields into place and rebias the exponent from 15 to 127. */
  uint32_t normal = (mag << 13) + ((127u - 15u) << 23);
  /* Inf/NaN: all-ones exponent, mantissa (NaN payload) kept. */
  uint32_t special = (mag << 13) | 0x7f800000u;
  /* Zero and subnormal: mantissa * 2^-24, exact, and a normal float when non-zero. */
  uint32_t sub = papRedFloatBits((float)(int32_t)mag * 5.9604644775390625e-8f);
  uint32_t bits = papRedSelect(mag >= 0x7c00u, special, papRedSelect(mag >= 0x0400u, normal, sub));
  return papRedBitsFloat(bits | sign);
}

/* float -> fp16, round to nearest even; overflow to inf; NaN -> 0x7fff. */
PAP_HD uint16_t papRedFloatToHalf(float f) {
  uint32_t x = papRedFloatBits(f);
  uint32_t sign = (x >> 16) & 0x8000u;
  uint32_t ax = x & 0x7fffffffu;
  /* Normal range: rebias, add just under half an fp16 ulp plus the kept lsb (ties to even);
   * a carry out of the mantissa correctly bumps the exponent. */
  uint32_t r = ax - ((127u - 15u) << 23);
  uint32_t normal = (r + 0xfffu + ((r >> 13) & 1u)) >> 13;
  /* Below 2^-14: in 0.5 + |f| the float unit in the last place is 2^-24, the fp16 subnormal
   * step, so the FPU's own round-to-nearest-even leaves the fp16 mantissa in the low bits
   * (1024 = the smallest normal, which encodes as 0x0400: also right). */
  uint32_t sub = papRedFloatBits(papRedBitsFloat(ax) + 0.5f) - 0x3f000000u;
  /* 65520 (0x477ff000) is halfway between 65504 and 2^16: ties go to the even inf. */
  uint32_t h =
      papRedSelect(ax >= 0x477ff000u, 0x7c00u, papRedSelect(ax >= 0x38800000u, normal, sub));
  h = papRedSelect(ax > 0x7f800000u, 0x7fffu, h | sign);
  return (uint16_t)h;
}

/* bf16 (1.8.7) -> float: exact (the upper half of a float). */
PAP_HD float papRedBf16ToFloat(uint16_t h) {
  return papRedBitsFloat((uint32_t)h << 16);
}

/* float -> bf16, round to nearest even; overflow to inf; NaN -> 0x7fff. The rounding add
 * cannot carry into the sign: |x| + 0x8000 < 2^31 for every non-NaN float. */
PAP_HD uint16_t papRedFloatToBf16(float f) {
  uint32_t x = papRedFloatBits(f);
  uint32_t r = (x + 0x7fffu + ((x >> 16) & 1u)) >> 16;
  return (uint16_t)papRedSelect((x & 0x7fffffffu) > 0x7f800000u, 0x7fffu, r);
}

/* fp8 e4m3 (1.4.3, bias 7, no inf, NaN = S.1111.111) -> float: exact. */
PAP_HD float papRedE4m3ToFloat(uint8_t v) {
  uint32_t sign = (uint32_t)(v & 0x80u) << 24;
  uint32_t mag = v & 0x7fu;
  uint32_t normal = (mag << 20) + ((127u - 7u) << 23);
  uint32_t sub = papRedFloatBits((float)(int32_t)mag * 0.001953125f); /* 2^-9 */
  uint32_t bits = papRedSelect(mag == 0x7fu, 0x7fc00000u, papRedSelect(mag >= 0x08u, normal, sub));
  return papRedBitsFloat(bits | sign);
}

/* float -> e4m3, round to nearest even, saturate to +-448 (0x7e), inf included; NaN -> 0x7f. */
PAP_HD uint8_t papRedFloatToE4m3(float f) {
  uint32_t x = papRedFloatBits(f);
  uint32_t sign = (x >> 24) & 0x80u;
  uint32_t ax = x & 0x7fffffffu;
  uint32_t r = ax - ((127u - 7u) << 23);
  uint32_t normal = (r + 0x7ffffu + ((r >> 20) & 1u)) >> 20;
  normal = papRedSelect(normal > 0x7eu, 0x7eu, normal);
  /* Below 2^-6: in 16384 + |f| the float ulp is 2^-9, the e4m3 subnormal step. */
  uint32_t sub = papRedFloatBits(papRedBitsFloat(ax) + 16384.0f) - 0x46800000u;
  uint32_t v = papRedSelect(ax >= 0x3c800000u, normal, sub);
  return (uint8_t)papRedSelect(ax > 0x7f800000u, 0x7fu, v | sign);
}

/* fp8 e5m2 (1.5.2, bias 15, IEEE-like): the upper byte of an fp16, so decoding is exact. */
PAP_HD float papRedE5m2ToFloat(uint8_t v) {
  return papRedHalfToFloat((uint16_t)((uint32_t)v << 8));
}

/* float -> e5m2, round to nearest even, saturate to +-57344 (0x7b), inf included; NaN -> 0x7f. */
PAP_HD uint8_t papRedFloatToE5m2(float f) {
  uint32_t x = papRedFloatBits(f);
  uint32_t sign = (x >> 24) & 0x80u;
  uint32_t ax = x & 0x7fffffffu;
  uint32_t r = ax - ((127u - 15u) << 23);
  uint32_t normal = (r + 0xfffffu + ((r >> 21) & 1u)) >> 21;
  normal = papRedSelect(normal > 0x7bu, 0x7bu, normal);
  /* Below 2^-14: in 128 + |f| the float ulp is 2^-16, the e5m2 subnormal step. */
  uint32_t sub = papRedFloatBits(papRedBitsFloat(ax) + 128.0f) - 0x43000000u;
  uint32_t v = papRedSelect(ax >= 0x38800000u, normal, sub);
  return (uint8_t)papRedSelect(ax > 0x7f800000u, 0x7fu, v | sign);
}

/* ---- Functors ------------------------------------------------------------------------------- */
/* papRed<Op>_<name>(a, b) for Op in Sum, Prod, Max, Min, and papRedDiv_<name>(a, n) for the
 * avg finalisation (n >= 1). papcclAvg and pre-multiplied sum are built from these by the
 * callers (kernels.h). */

#define PAP_RED_DEFINE_INT(name, T, U, D) \
  PAP_HD T papRedSum_##name(T a, T b) { \
    return (T)(U)((U)a + (U)b); \
  } \
  PAP_HD T papRedProd_##name(T a, T b) { \
    return (T)(U)((U)a * (U)b); \
  } \
  PAP_HD T papRedMax_##name(T a, T b) { \
    return a > b ? a : b; \
  } \
  PAP_HD T papRedMin_##name(T a, T b) { \
    return a < b ? a : b; \
  } \
  PAP_HD T papRedDiv_##name(T a, int n) { \
    return (T)((D)a / (D)n); \
  }
PAP_RED_INT_LIST(PAP_RED_DEFINE_INT)
#undef PAP_RED_DEFINE_INT

/* max/min as "(a > b || b is NaN) ? a : b": fmax semantics, and a compare, an or and a blend
 * once vectorized (fmaxf itself does not vectorize on x86 without -ffinite-math-only). */
#define PAP_RED_DEFINE_FLOAT(name, T) \
  PAP_HD T papRedSum_##name(T a, T b) { \
    return a + b; \
  } \
  PAP_HD T papRedProd_##name(T a, T b) { \
    return a * b; \
  } \
  PAP_HD T papRedMax_##name(T a, T b) { \
    return (a > b || b != b) ? a : b; \
  } \
  PAP_HD T papRedMin_##name(T a, T b) { \
    return (a < b || b != b) ? a : b; \
  } \
  PAP_HD T papRedDiv_##name(T a, int n) { \
    return a / (T)n; \
  }
PAP_RED_FLOAT_LIST(PAP_RED_DEFINE_FLOAT)
#undef PAP_RED_DEFINE_FLOAT

#define PAP_RED_DEFINE_NARROW(name, T, toFloat, fromFloat) \
  PAP_HD T papRedSum_##name(T a, T b) { \
    return fromFloat(toFloat(a) + toFloat(b)); \
  } \
  PAP_HD T papRedProd_##name(T a, T b) { \
    return fromFloat(toFloat(a) * toFloat(b)); \
  } \
  PAP_HD T papRedMax_##name(T a, T b) { \
    return fromFloat(papRedMax_f32(toFloat(a), toFloat(b))); \
  } \
  PAP_HD T papRedMin_##name(T a, T b) { \
    return fromFloat(papRedMin_f32(toFloat(a), toFloat(b))); \
  } \
  PAP_HD T papRedDiv_##name(T a, int n) { \
    return fromFloat(toFloat(a) / (float)n); \
  }
PAP_RED_NARROW_LIST(PAP_RED_DEFINE_NARROW)
#undef PAP_RED_DEFINE_NARROW

#endif /* PAPCCL_KERNELS_REDUCE_OPS_H_ */
