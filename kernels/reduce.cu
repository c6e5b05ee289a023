/* SPDX-License-Identifier: Apache-2.0 */
/* CUDA element-wise reduction kernels and their C-callable launcher, papKernReduceLaunch. */

/* kernels.h declares the launcher only for CUDA builds; this file is one. */
#ifndef PAPCCL_HAVE_CUDA
#define PAPCCL_HAVE_CUDA 1
#endif

#include "kernels.h"

#include "reduce_ops.h"

extern "C" {
#include "log.h"
}

#include <cuda_runtime.h>

#include <stddef.h>
#include <stdint.h>
#include <atomic>

namespace {

/* One functor struct per (type, op), wrapping the shared PAP_HD functor, so the kernel template
 * instantiates 48 times from the X-macro lists and nothing else. */
#define PAP_DEFINE_FN(dtype, name, T) \
  struct FnSum_##name { \
    typedef T Elt; \
    __device__ __forceinline__ static T apply(T a, T b) { \
      return papRedSum_##name(a, b); \
    } \
  }; \
  struct FnProd_##name { \
    typedef T Elt; \
    __device__ __forceinline__ static T apply(T a, T b) { \
      return papRedProd_##name(a, b); \
    } \
  }; \
  struct FnMax_##name { \
    typedef T Elt; \
    __device__ __forceinline__ static T apply(T a, T b) { \
      return papRedMax_##name(a, b); \
    } \
  }; \
  struct FnMin_##name { \
    typedef T Elt; \
    __device__ __forceinline__ static T apply(T a, T b) { \
      return papRedMin_##name(a, b); \
    } \
  };
PAP_RED_TYPE_LIST(PAP_DEFINE_FN)
#undef PAP_DEFINE_FN

/* 256 threads = 8 warps per block: enough independent 16-byte loads in flight per SM with
 * several blocks resident, and a block size every architecture since sm_35 runs at full
 * occupancy. */
constexpr int kThreads = 256;
/* The grid covers the work once up to one full wave of the current device (its SM count
 * times the blocks of 256 threads an SM holds at once, 8 on every architecture since sm_70)
 * and then grid-strides: more blocks would only queue behind the first wave, and for huge
 * counts a few loop trips per thread cost nothing next to the memory traffic. The SM count
 * is asked once per device; 1024 when it cannot be. */
constexpr unsigned kBlocksPerSm = 8;
constexpr int kMaxDevices = 64;
unsigned gridCap() {
  static unsigned cap[kMaxDevices]; /* 0: not asked yet (a benign race: same answer) */
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess || dev < 0 || dev >= kMaxDevices) {
    (void)cudaGetLastError();
    return 1024;
  }
  if (cap[dev] == 0) {
    int sms = 0;
    if (cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess ||
        sms <= 0) {
      (void)cudaGetLastError();
      sms = 128;
    }
    cap[dev] = (unsigned)sms * kBlocksPerSm;
  }
  return cap[dev];
}

/* 16 bytes of elements, loaded and stored as one uint4 (ld/st.global.v4). */
template <typename T>
union Pack16 {
  uint4 v;
  T e[16 / sizeof(T)];
};

/* dst[i] = Fn(a[i], b[i]) for i < count. When all three pointers are 16-byte aligned the bulk
 * runs as 16-byte packs and the remainder element by element; otherwise everything runs element
 * by element (still coalesced, with narrower transactions). dst may alias a or b exactly: each
 * element is read and written by the same thread, and no read-only (.nc) loads are used. */
template <typename Fn>
__global__ void __launch_bounds__(kThreads)
    reduceKernel(typename Fn::Elt* dst, const typename Fn::Elt* a, const typename Fn::Elt* b,
                 size_t count) {
  typedef typename Fn::Elt T;
  constexpr size_t kPerPack = 16 / sizeof(T);
  const size_t stride = (size_t)gridDim.x * blockDim.x;
  const size_t tid = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  size_t done = 0;
  if ((((uintptr_t)dst | (uintptr_t)a | (uintptr_t)b) & 15) == 0) {
    const size_t npacks = count / kPerPack;
    const uint4* a4 = reinterpret_cast<const uint4*>(a);
    const uint4* b4 = reinterpret_cast<const uint4*>(b);
    uint4* d4 = reinterpret_cast<uint4*>(dst);
    for (size_t p = tid; p < npacks; p += stride) {
      Pack16<T> x;
      Pack16<T> y;
      x.v = a4[p];
      y.v = b4[p];
#pragma unroll
      for (size_t k = 0; k < kPerPack; k++)
        x.e[k] = Fn::apply(x.e[k], y.e[k]);
      d4[p] = x.v;
    }
    done = npacks * kPerPack;
  }
  for (size_t i = done + tid; i < count; i += stride)
    dst[i] = Fn::apply(a[i], b[i]);
}

template <typename Fn>
const void* kernelOf() {
  return reinterpret_cast<const void*>(&reduceKernel<Fn>);
}

/* The kernel for (datatype, op) and its element size, or NULL for an invalid pair. */
const void* pickKernel(papcclDataType_t datatype, enum papRedKind op, size_t* eltSizeOut) {
  switch (datatype) {
#define PAP_KERNEL_CASE(dtype, name, T) \
  case dtype: \
    *eltSizeOut = sizeof(T); \
    switch (op) { \
    case PAP_RED_SUM: \
      return kernelOf<FnSum_##name>(); \
    case PAP_RED_PROD: \
      return kernelOf<FnProd_##name>(); \
    case PAP_RED_MAX: \
      return kernelOf<FnMax_##name>(); \
    case PAP_RED_MIN: \
      return kernelOf<FnMin_##name>(); \
    default: \
      return NULL; \
    }
    PAP_RED_TYPE_LIST(PAP_KERNEL_CASE)
#undef PAP_KERNEL_CASE
  default:
    return NULL;
  }
}

}  // namespace

extern "C" papcclResult_t papKernReduceLaunch(void* dst, const void* a, const void* b, size_t count,
                                              papcclDataType_t datatype, enum papRedKind op,
                                              struct CUstream_st* stream) {
  size_t eltSize = 0;
  const void* kernel = pickKernel(datatype, op, &eltSize);
  if (kernel == NULL) {
    PAP_WARN("reduce launch: invalid datatype %d or reduction kind %d", (int)datatype, (int)op);
    return papcclInvalidArgument;
  }
  if (count == 0) return papcclSuccess; /* an empty grid is a launch error */

  /* One thread per 16-byte pack (the element path needs no more threads than that either). */
  size_t perPack = 16 / eltSize;
  size_t packs = (count + perPack - 1) / perPack;
  size_t blocks = (packs + kThreads - 1) / kThreads;
  const size_t maxBlocks = gridCap();
  dim3 grid((unsigned)(blocks < maxBlocks ? blocks : maxBlocks));
  dim3 block(kThreads);
  void* args[] = {&dst, (void*)&a, (void*)&b, &count};
  cudaError_t err = cudaLaunchKernel(kernel, grid, block, args, 0, (cudaStream_t)stream);
  if (err != cudaSuccess) {
    PAP_WARN("reduce launch: cudaLaunchKernel failed: %s (%s), count %zu, datatype %d, kind %d",
             cudaGetErrorName(err), cudaGetErrorString(err), count, (int)datatype, (int)op);
    return papcclUnhandledCudaError;
  }
  return papcclSuccess;
}

/* ---- Stream words and small helpers ---------------------------------------------------- */

namespace {

/* Writes v to a host-mapped word once the stream reaches it: the fallback for
 * cuStreamWriteValue64. The fence orders the stream's earlier copies before the write. */
__global__ void writeWordKernel(volatile unsigned long long* word, unsigned long long v) {
  __threadfence_system();
  *word = v;
  __threadfence_system();
}

/* Holds the stream until the host-mapped word reaches v (wrap-safe compare): the fallback for
 * cuStreamWaitValue64. One thread, polling with a pause so it does not hammer the bus. */
__global__ void waitWordKernel(const volatile unsigned long long* word, unsigned long long v) {
  while ((long long)(*word - v) < 0)
    __nanosleep(2000);
  __threadfence_system();
}

__device__ __forceinline__ unsigned long long globalTimerNs() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

__global__ void spinKernel(unsigned long long ns) {
  unsigned long long t0 = globalTimerNs();
  while (globalTimerNs() - t0 < ns)
    __nanosleep(1000);
}

__global__ void fillF32Kernel(float* p, size_t n, float v, float step) {
  const size_t stride = (size_t)gridDim.x * blockDim.x;
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
    p[i] = v + step * (float)(i % 1024);
}

papcclResult_t launched(const char* what) {
  cudaError_t err = cudaGetLastError();
  if (err == cudaSuccess) return papcclSuccess;
  PAP_WARN("%s: launch failed: %s (%s)", what, cudaGetErrorName(err), cudaGetErrorString(err));
  return papcclUnhandledCudaError;
}

}  // namespace

extern "C" papcclResult_t papKernStreamWrite64(uint64_t* word, uint64_t value,
                                               struct CUstream_st* stream) {
  writeWordKernel<<<1, 1, 0, (cudaStream_t)stream>>>((volatile unsigned long long*)word,
                                                     (unsigned long long)value);
  return launched("stream arrival write");
}

extern "C" papcclResult_t papKernStreamWait64(const uint64_t* word, uint64_t value,
                                              struct CUstream_st* stream) {
  waitWordKernel<<<1, 1, 0, (cudaStream_t)stream>>>((const volatile unsigned long long*)word,
                                                    (unsigned long long)value);
  return launched("stream wait");
}

extern "C" papcclResult_t papKernSpinNs(uint64_t ns, struct CUstream_st* stream) {
  spinKernel<<<1, 1, 0, (cudaStream_t)stream>>>((unsigned long long)ns);
  return launched("spin kernel");
}

extern "C" papcclResult_t papKernFillF32(float* p, size_t n, float value, float step,
                                         struct CUstream_st* stream) {
  if (n == 0) return papcclSuccess;
  size_t blocks = (n + kThreads - 1) / kThreads;
  const size_t maxBlocks = gridCap();
  fillF32Kernel<<<(unsigned)(blocks < maxBlocks ? blocks : maxBlocks), kThreads, 0,
                  (cudaStream_t)stream>>>(p, n, value, step);
  return launched("fill kernel");
}

/* Lazy loading (the default since CUDA 12.2) loads a kernel at its first launch, and loading
 * may synchronize the context: if a stream is held then (on a collective's done word), the
 * launch waits for it and it for the launch. Loading every kernel of this file while nothing
 * is held avoids that. Once per device. */
extern "C" papcclResult_t papKernPreload(void) {
  static std::atomic<unsigned long long> loaded{0};
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess) {
    (void)cudaGetLastError();
    return papcclUnhandledCudaError;
  }
  unsigned long long bit = dev >= 0 && dev < kMaxDevices ? 1ull << dev : 0;
  if (bit && (loaded.load(std::memory_order_acquire) & bit)) return papcclSuccess;
  cudaFuncAttributes attr;
  cudaError_t err = cudaSuccess;
  for (int t = 0; t < (int)papcclNumTypes && err == cudaSuccess; t++) {
    for (int op = PAP_RED_SUM; op <= PAP_RED_MIN && err == cudaSuccess; op++) {
      size_t esz = 0;
      const void* k = pickKernel((papcclDataType_t)t, (enum papRedKind)op, &esz);
      if (k) err = cudaFuncGetAttributes(&attr, k);
    }
  }
  const void* others[] = {reinterpret_cast<const void*>(&writeWordKernel),
                          reinterpret_cast<const void*>(&waitWordKernel),
                          reinterpret_cast<const void*>(&spinKernel),
                          reinterpret_cast<const void*>(&fillF32Kernel)};
  for (const void* k : others)
    if (err == cudaSuccess) err = cudaFuncGetAttributes(&attr, k);
  if (err != cudaSuccess) {
    PAP_WARN("loading the reduction kernels failed: %s (%s)", cudaGetErrorName(err),
             cudaGetErrorString(err));
    (void)cudaGetLastError();
    return papcclUnhandledCudaError;
  }
  (void)gridCap(); /* the SM count, asked now too */
  if (bit) loaded.fetch_or(bit, std::memory_order_acq_rel);
  return papcclSuccess;
}
