/* SPDX-License-Identifier: Apache-2.0 */
/* Test shim for the host reduction kernels: plain-C wrappers with int datatypes and ops, so
 * tests can also pass out-of-range values. */
#ifndef PAPCCL_TESTS_SHIM_SHIM_KERNELS_H_
#define PAPCCL_TESTS_SHIM_SHIM_KERNELS_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Values of papcclDataType_t and enum papRedKind (checked against the library in the shim). */
enum {
  PAP_TEST_KERN_INT8 = 0,
  PAP_TEST_KERN_UINT8 = 1,
  PAP_TEST_KERN_INT32 = 2,
  PAP_TEST_KERN_UINT32 = 3,
  PAP_TEST_KERN_INT64 = 4,
  PAP_TEST_KERN_UINT64 = 5,
  PAP_TEST_KERN_FLOAT16 = 6,
  PAP_TEST_KERN_FLOAT32 = 7,
  PAP_TEST_KERN_FLOAT64 = 8,
  PAP_TEST_KERN_BFLOAT16 = 9,
  PAP_TEST_KERN_E4M3 = 10,
  PAP_TEST_KERN_E5M2 = 11,
  PAP_TEST_KERN_NUM_TYPES = 12
};
enum {
  PAP_TEST_KERN_SUM = 0,
  PAP_TEST_KERN_PROD = 1,
  PAP_TEST_KERN_MAX = 2,
  PAP_TEST_KERN_MIN = 3
};

size_t papTestKernTypeSize(int datatype);
void papTestKernReduce(void* dst, const void* a, const void* b, size_t count, int datatype, int op);
void papTestKernScale(void* dst, const void* src, size_t count, int datatype, const void* scalar);
void papTestKernDivide(void* dst, const void* src, size_t count, int datatype, int n);

float papTestKernHalfToFloat(uint16_t h);
uint16_t papTestKernFloatToHalf(float f);
float papTestKernBf16ToFloat(uint16_t h);
uint16_t papTestKernFloatToBf16(float f);
float papTestKernE4m3ToFloat(uint8_t v);
uint8_t papTestKernFloatToE4m3(float f);
float papTestKernE5m2ToFloat(uint8_t v);
uint8_t papTestKernFloatToE5m2(float f);

/* The datatypes (ops) that the functor X-macro lists expand, in list order; writes at most max
 * and returns how many the list holds. */
int papTestKernListedTypes(int* typesOut, int max);
int papTestKernListedOps(int* opsOut, int max);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* PAPCCL_TESTS_SHIM_SHIM_KERNELS_H_ */
