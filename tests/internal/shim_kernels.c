/* SPDX-License-Identifier: Apache-2.0 */
/* Test shim for the host reduction kernels: forwards to kernels/kernels.h with plain types. */
#include "tests/internal/shim_kernels.h"

#include "kernels.h"
#include "reduce_ops.h"

#define PAP_TEST_KERN_SAME(a, b) _Static_assert((int)(a) == (int)(b), #a " != " #b)
PAP_TEST_KERN_SAME(PAP_TEST_KERN_INT8, papcclInt8);
PAP_TEST_KERN_SAME(PAP_TEST_KERN_UINT8, papcclUint8);
PAP_TEST_KERN_SAME(PAP_TEST_KERN_INT32, papcclInt32);
PAP_TEST_KERN_SAME(PAP_TEST_KERN_UINT32, papcclUint32);
PAP_TEST_KERN_SAME(PAP_TEST_KERN_INT64, papcclInt64);
PAP_TEST_KERN_SAME(PAP_TEST_KERN_UINT64, papcclUint64);
PAP_TEST_KERN_SAME(PAP_TEST_KERN_FLOAT16, papcclFloat16);
PAP_TEST_KERN_SAME(PAP_TEST_KERN_FLOAT32, papcclFloat32);
PAP_TEST_KERN_SAME(PAP_TEST_KERN_FLOAT64, papcclFloat64);
PAP_TEST_KERN_SAME(PAP_TEST_KERN_BFLOAT16, papcclBfloat16);
PAP_TEST_KERN_SAME(PAP_TEST_KERN_E4M3, papcclFloat8e4m3);
PAP_TEST_KERN_SAME(PAP_TEST_KERN_E5M2, papcclFloat8e5m2);
PAP_TEST_KERN_SAME(PAP_TEST_KERN_NUM_TYPES, papcclNumTypes);
PAP_TEST_KERN_SAME(PAP_TEST_KERN_SUM, PAP_RED_SUM);
PAP_TEST_KERN_SAME(PAP_TEST_KERN_PROD, PAP_RED_PROD);
PAP_TEST_KERN_SAME(PAP_TEST_KERN_MAX, PAP_RED_MAX);
PAP_TEST_KERN_SAME(PAP_TEST_KERN_MIN, PAP_RED_MIN);
#undef PAP_TEST_KERN_SAME

size_t papTestKernTypeSize(int datatype) {
  return papKernTypeSize((papcclDataType_t)datatype);
}

void papTestKernReduce(void* dst, const void* a, const void* b, size_t count, int datatype,
                       int op) {
  papKernHostReduce(dst, a, b, count, (papcclDataType_t)datatype, (enum papRedKind)op);
}

void papTestKernScale(void* dst, const void* src, size_t count, int datatype, const void* scalar) {
  papKernHostScale(dst, src, count, (papcclDataType_t)datatype, scalar);
}

void papTestKernDivide(void* dst, const void* src, size_t count, int datatype, int n) {
  papKernHostDivide(dst, src, count, (papcclDataType_t)datatype, n);
}

float papTestKernHalfToFloat(uint16_t h) {
  return papKernHalfToFloat(h);
}

uint16_t papTestKernFloatToHalf(float f) {
  return papKernFloatToHalf(f);
}

float papTestKernBf16ToFloat(uint16_t h) {
  return papKernBf16ToFloat(h);
}

uint16_t papTestKernFloatToBf16(float f) {
  return papKernFloatToBf16(f);
}

float papTestKernE4m3ToFloat(uint8_t v) {
  return papKernE4m3ToFloat(v);
}

uint8_t papTestKernFloatToE4m3(float f) {
  return papKernFloatToE4m3(f);
}

float papTestKernE5m2ToFloat(uint8_t v) {
  return papKernE5m2ToFloat(v);
}

uint8_t papTestKernFloatToE5m2(float f) {
  return papKernFloatToE5m2(f);
}

int papTestKernListedTypes(int* typesOut, int max) {
  int n = 0;
#define PAP_TEST_KERN_TYPE(dtype, name, T) \
  if (n < max) typesOut[n] = (int)(dtype); \
  n++;
  PAP_RED_TYPE_LIST(PAP_TEST_KERN_TYPE)
#undef PAP_TEST_KERN_TYPE
  return n;
}

int papTestKernListedOps(int* opsOut, int max) {
  int n = 0;
#define PAP_TEST_KERN_OP(kind, Name) \
  if (n < max) opsOut[n] = (int)(kind); \
  n++;
  PAP_RED_OP_LIST(PAP_TEST_KERN_OP)
#undef PAP_TEST_KERN_OP
  return n;
}
