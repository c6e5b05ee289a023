// SPDX-License-Identifier: Apache-2.0
// GPU reduction kernels, for every type and op, against the independent references
// (tests/common/reduce_ref.h) and against the host loops, bit for bit.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "kernels.h"
#include "tests/common/reduce_ref.h"
#include "tests/gpu/gpu_common.h"

namespace {

using papgpu::haveGpu;
using papgpu::randomBytes;

const char* typeName(int t) {
  static const char* names[] = {"int8", "uint8", "int32", "uint32", "int64",   "uint64",
                                "fp16", "fp32",  "fp64",  "bf16",   "fp8e4m3", "fp8e5m2"};
  return names[t];
}

// Elements of got (dst = a op b on count elements) that differ from the independent reference
// (tests/common/reduce_ref.h: 128-bit integers, double rounded once to the type, the narrow
// formats through tests/common/narrow_float.h); *first is the first one.
size_t refMismatches(const uint8_t* a, const uint8_t* b, const uint8_t* got, size_t count, int t,
                     int op, size_t* first) {
  const size_t esz = papkref::Info(t).size;
  size_t bad = 0;
  for (size_t i = 0; i < count; i++) {
    papkref::Expect e =
        papkref::RefReduce(t, op, papkref::GetBits(a, i, esz), papkref::GetBits(b, i, esz));
    if (papkref::Matches(t, e, papkref::GetBits(got, i, esz))) continue;
    if (bad++ == 0) *first = i;
  }
  return bad;
}

}  // namespace

// Two checks of each launch, random bit patterns as inputs (NaN, inf, subnormals included):
// - against the independent references (refMismatches): the arithmetic of what ran, on both
//   machines. On a GPU: the CUDA kernels' code generation, vector and alignment paths, NaN and
//   rounding handling. On the CUDA stand-in, which runs each registered kernel with the host's
//   functors (kernels/reduce_ops.h), those functors through the launch path: a functor fault
//   fails here on the stand-in, where the host comparison below cannot see it.
// - against the host loops, bit for bit: on a GPU, device and host agree (what the README
//   claims of the functors shared by both); on the stand-in both sides run the same functors,
//   so it covers only the launch path (the type and op to kernel dispatch, the launch
//   configuration, the arguments, unaligned pointers, the copies), not the arithmetic.
TEST(GpuKernels, MatchHostBitForBit) {
  std::string why;
  if (!haveGpu(&why)) GTEST_SKIP() << why;
  cudaStream_t stream;
  ASSERT_EQ(cudaSuccess, cudaStreamCreate(&stream));
  for (size_t count : {size_t(1), size_t(7), size_t(1000), size_t(1000003)}) {
    for (int t = 0; t < papcclNumTypes; t++) {
      size_t esz = papKernTypeSize(static_cast<papcclDataType_t>(t));
      size_t bytes = count * esz;
      auto a = randomBytes(bytes + 16, 1234 + t);
      auto b = randomBytes(bytes + 16, 999 + t);
      void *da, *db, *dd;
      ASSERT_EQ(cudaSuccess, cudaMalloc(&da, bytes + 16));
      ASSERT_EQ(cudaSuccess, cudaMalloc(&db, bytes + 16));
      ASSERT_EQ(cudaSuccess, cudaMalloc(&dd, bytes + 16));
      ASSERT_EQ(cudaSuccess, cudaMemcpy(da, a.data(), bytes + 16, cudaMemcpyHostToDevice));
      ASSERT_EQ(cudaSuccess, cudaMemcpy(db, b.data(), bytes + 16, cudaMemcpyHostToDevice));
      for (int op = PAP_RED_SUM; op <= PAP_RED_MIN; op++) {
        // Offset by one element on odd counts: unaligned pointers must work too.
        size_t off = (count % 2) ? esz : 0;
        std::vector<uint8_t> want(bytes), got(bytes);
        papKernHostReduce(want.data(), a.data() + off, b.data() + off, count,
                          static_cast<papcclDataType_t>(t), static_cast<papRedKind>(op));
        ASSERT_EQ(papcclSuccess,
                  papKernReduceLaunch(static_cast<char*>(dd), static_cast<char*>(da) + off,
                                      static_cast<char*>(db) + off, count,
                                      static_cast<papcclDataType_t>(t), static_cast<papRedKind>(op),
                                      stream));
        ASSERT_EQ(cudaSuccess, cudaStreamSynchronize(stream));
        ASSERT_EQ(cudaSuccess, cudaMemcpy(got.data(), dd, bytes, cudaMemcpyDeviceToHost));
        // Bit for bit, except that a NaN result of fp32/fp64 may carry any payload: x86 keeps
        // an operand's payload, the GPU returns the canonical NaN (the narrow types are
        // canonicalized by the functors on both sides).
        size_t bad = 0, first = SIZE_MAX;
        for (size_t i = 0; i < count; i++) {
          const uint8_t* w = want.data() + i * esz;
          const uint8_t* g = got.data() + i * esz;
          if (memcmp(w, g, esz) == 0) continue;
          if (t == papcclFloat32) {
            float x, y;
            memcpy(&x, w, 4);
            memcpy(&y, g, 4);
            if (x != x && y != y) continue;
          } else if (t == papcclFloat64) {
            double x, y;
            memcpy(&x, w, 8);
            memcpy(&y, g, 8);
            if (x != x && y != y) continue;
          }
          if (first == SIZE_MAX) first = i;
          bad++;
        }
        EXPECT_EQ(0u, bad) << typeName(t) << " op " << op << " count " << count
                           << ": first mismatch with the host loops at element " << first;
        size_t refFirst = 0;
        size_t refBad =
            refMismatches(a.data() + off, b.data() + off, got.data(), count, t, op, &refFirst);
        EXPECT_EQ(0u, refBad) << typeName(t) << " op " << op << " count " << count
                              << ": first mismatch with the independent reference at element "
                              << refFirst;
      }
      cudaFree(da);
      cudaFree(db);
      cudaFree(dd);
    }
  }
  cudaStreamDestroy(stream);
}

// Bandwidth of the fp32 sum kernel next to a device-to-device copy of the same bytes, printed
// for the record (a figure, not an assertion).
TEST(GpuKernels, ReportBandwidth) {
  std::string why;
  if (!haveGpu(&why)) GTEST_SKIP() << why;
  const size_t count = size_t(64) << 20;  // 256 MiB of fp32 per operand
  void *a, *b, *d;
  ASSERT_EQ(cudaSuccess, cudaMalloc(&a, count * 4));
  ASSERT_EQ(cudaSuccess, cudaMalloc(&b, count * 4));
  ASSERT_EQ(cudaSuccess, cudaMalloc(&d, count * 4));
  cudaMemset(a, 0, count * 4);
  cudaMemset(b, 0, count * 4);
  cudaEvent_t e0, e1;
  cudaEventCreate(&e0);
  cudaEventCreate(&e1);
  float best = 1e30f, bestCopy = 1e30f;
  for (int i = 0; i < 10; i++) {
    cudaEventRecord(e0);
    ASSERT_EQ(papcclSuccess, papKernReduceLaunch(d, a, b, count, papcclFloat32, PAP_RED_SUM, 0));
    cudaEventRecord(e1);
    cudaEventSynchronize(e1);
    float ms;
    cudaEventElapsedTime(&ms, e0, e1);
    if (ms < best) best = ms;
    cudaEventRecord(e0);
    cudaMemcpyAsync(d, a, count * 4, cudaMemcpyDeviceToDevice);
    cudaEventRecord(e1);
    cudaEventSynchronize(e1);
    cudaEventElapsedTime(&ms, e0, e1);
    if (ms < bestCopy) bestCopy = ms;
  }
  double reduceGBs = 3.0 * count * 4 / (best * 1e-3) / 1e9;
  double copyGBs = 2.0 * count * 4 / (bestCopy * 1e-3) / 1e9;
  printf(
      "[ figure ] fp32 sum kernel, 256 MiB operands: %.3f ms, %.0f GB/s of traffic; "
      "cudaMemcpy D2D: %.3f ms, %.0f GB/s\n",
      best, reduceGBs, bestCopy, copyGBs);
  cudaFree(a);
  cudaFree(b);
  cudaFree(d);
}

int main(int argc, char** argv) {
  return papgpu::runGpuTests(argc, argv);
}
