/* SPDX-License-Identifier: Apache-2.0 */
/* C-callable reduction API: host loops (always) and CUDA launchers (with -Dcuda). */
#ifndef PAPCCL_KERNELS_KERNELS_H_
#define PAPCCL_KERNELS_KERNELS_H_

#include <stddef.h>
#include <stdint.h>

#include "papccl.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Element-wise operations the loops implement. papcclAvg runs as SUM then papKernHostDivide;
 * pre-multiplied sum runs as papKernHostScale then SUM. */
enum papRedKind {
  PAP_RED_SUM = 0,
  PAP_RED_PROD = 1,
  PAP_RED_MAX = 2,
  PAP_RED_MIN = 3
};

/* Bytes per element of datatype; 0 for an invalid type. */
size_t papKernTypeSize(papcclDataType_t datatype);

/* dst[i] = a[i] OP b[i] for i < count. dst may alias a or b (exactly, not partially). */
void papKernHostReduce(void* dst, const void* a, const void* b, size_t count,
                       papcclDataType_t datatype, enum papRedKind op);
/* dst[i] = src[i] * scalar, where scalar points to one value of datatype. dst may alias src. */
void papKernHostScale(void* dst, const void* src, size_t count, papcclDataType_t datatype,
                      const void* scalar);
/* dst[i] = src[i] / n (integers truncate toward zero, as NCCL's avg). dst may alias src. */
void papKernHostDivide(void* dst, const void* src, size_t count, papcclDataType_t datatype, int n);

/* Scalar conversions used by tests and the CPU path (round to nearest even; fp8 saturates to
 * the largest finite value as NCCL does; NaN stays NaN). */
float papKernHalfToFloat(uint16_t h);
uint16_t papKernFloatToHalf(float f);
float papKernBf16ToFloat(uint16_t h);
uint16_t papKernFloatToBf16(float f);
float papKernE4m3ToFloat(uint8_t v);
uint8_t papKernFloatToE4m3(float f);
float papKernE5m2ToFloat(uint8_t v);
uint8_t papKernFloatToE5m2(float f);

#ifdef PAPCCL_HAVE_CUDA
/* Same operation on device memory, enqueued on stream (a cudaStream_t). Returns
 * papcclUnhandledCudaError with a WARN naming the CUDA error on failure. */
papcclResult_t papKernReduceLaunch(void* dst, const void* a, const void* b, size_t count,
                                   papcclDataType_t datatype, enum papRedKind op,
                                   struct CUstream_st* stream);
/* Loads every kernel of the library into the current device's context (once per device), so
 * that no later launch has to load one while a stream is held on a collective. */
papcclResult_t papKernPreload(void);
/* One-thread kernels standing in for cuStreamWriteValue64 / cuStreamWaitValue64 on a
 * host-mapped word (device address): write value; hold the stream until *word >= value. */
papcclResult_t papKernStreamWrite64(uint64_t* word, uint64_t value, struct CUstream_st* stream);
papcclResult_t papKernStreamWait64(const uint64_t* word, uint64_t value,
                                   struct CUstream_st* stream);
/* Holds the stream for ns nanoseconds (tests and benchmarks: a late stream). */
papcclResult_t papKernSpinNs(uint64_t ns, struct CUstream_st* stream);
/* p[i] = value + step * (i % 1024) (tests and benchmarks). */
papcclResult_t papKernFillF32(float* p, size_t n, float value, float step,
                              struct CUstream_st* stream);
#endif

#ifdef __cplusplus
}
#endif

#endif /* PAPCCL_KERNELS_KERNELS_H_ */
