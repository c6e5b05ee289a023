// SPDX-License-Identifier: Apache-2.0
// Helpers shared by the GPU test binaries.
#ifndef PAPCCL_TESTS_GPU_GPU_COMMON_H_
#define PAPCCL_TESTS_GPU_GPU_COMMON_H_

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

namespace papgpu {

// Whether a GPU is usable; *why says why not.
inline bool haveGpu(std::string* why) {
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    *why = std::string("no usable GPU: cudaGetDeviceCount failed: ") + cudaGetErrorString(e);
    return false;
  }
  if (n == 0) {
    *why = "no GPU on this machine";
    return false;
  }
  return true;
}

// Random bytes are valid inputs for every type (NaN included).
inline std::vector<uint8_t> randomBytes(size_t n, uint32_t seed) {
  std::mt19937 g(seed);
  std::vector<uint8_t> v(n);
  for (auto& b : v)
    b = static_cast<uint8_t>(g());
  return v;
}

// Whether the run needs the CUDA stand-in (suite gpu-sim sets PAPCCL_TEST_CUDASIM=require):
// there "no device" means the build's own stand-in did not load, a failure, not a skip.
inline bool standInRequired() {
  const char* v = getenv("PAPCCL_TEST_CUDASIM");
  return v != nullptr && strcmp(v, "require") == 0;
}

// main() of a GPU test binary: without a GPU it reports "skipped" to the test runner (exit
// code 77, which meson shows as SKIP) and says why, instead of passing silently; where the
// stand-in is required (suite gpu-sim), it fails.
inline int runGpuTests(int argc, char** argv) {
  std::string why;
  if (!haveGpu(&why)) {
    if (standInRequired()) {
      printf(
          "FAIL: PAPCCL_TEST_CUDASIM=require, but the CUDA stand-in (tests/cudasim) did not "
          "load or has no device: %s\n",
          why.c_str());
      return 1;
    }
    printf("SKIP: %s\n", why.c_str());
    return 77;
  }
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}

}  // namespace papgpu

#endif  // PAPCCL_TESTS_GPU_GPU_COMMON_H_
