// SPDX-License-Identifier: Apache-2.0
// The CUDA stand-in's own rules (suite gpu-sim): where CUDA is strict, the stand-in must be
// too, or the gpu-sim runs of papccl's device path prove less than they claim. Run with the
// stand-in first on LD_LIBRARY_PATH (meson does); against a real runtime the tests that
// need the stand-in's fault model skip.
#include <cuda.h>
#include <cuda_runtime.h>
#include <gtest/gtest.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "kernels.h"

extern char** environ;

namespace {

typedef CUresult (*StreamValueFn)(CUstream, CUdeviceptr, cuuint64_t, unsigned int);

StreamValueFn driverFn(const char* name) {
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult q = cudaDriverEntryPointSymbolNotFound;
  if (cudaGetDriverEntryPointByVersion(name, &fn, 12000, cudaEnableDefault, &q) != cudaSuccess ||
      q != cudaDriverEntryPointSuccess)
    return nullptr;
  return reinterpret_cast<StreamValueFn>(fn);
}

bool onStandIn() {
  const char* p = getenv("LD_LIBRARY_PATH");
  return p != nullptr && strstr(p, "cudasim") != nullptr;
}

}  // namespace

TEST(CudaSim, HostCannotDereferenceDeviceMemory) {
  if (!onStandIn()) GTEST_SKIP() << "needs the CUDA stand-in (its fault model)";
  int* p = nullptr;
  ASSERT_EQ(cudaSuccess, cudaMalloc(&p, 4096));
  EXPECT_DEATH({ printf("%d\n", *(volatile int*)p); }, "");
  cudaFree(p);
}

TEST(CudaSim, FreshDeviceMemoryIsNotZero) {
  if (!onStandIn()) GTEST_SKIP() << "needs the CUDA stand-in (its fill pattern)";
  uint32_t* p = nullptr;
  ASSERT_EQ(cudaSuccess, cudaMalloc(&p, 64));
  uint32_t h[16];
  ASSERT_EQ(cudaSuccess, cudaMemcpy(h, p, sizeof(h), cudaMemcpyDeviceToHost));
  EXPECT_NE(0u, h[0]);
  cudaFree(p);
}

TEST(CudaSim, CopyDirectionMustMatchTheMemory) {
  float* d = nullptr;
  float h[4] = {1, 2, 3, 4};
  ASSERT_EQ(cudaSuccess, cudaMalloc(&d, sizeof(h)));
  EXPECT_EQ(cudaErrorInvalidValue, cudaMemcpy(d, h, sizeof(h), cudaMemcpyDeviceToHost));
  (void)cudaGetLastError();
  EXPECT_EQ(cudaSuccess, cudaMemcpy(d, h, sizeof(h), cudaMemcpyHostToDevice));
  EXPECT_EQ(cudaSuccess, cudaMemcpy(h, d, sizeof(h), cudaMemcpyDefault));
  EXPECT_EQ(cudaErrorInvalidDevicePointer, cudaFree(h));
  (void)cudaGetLastError();
  cudaFree(d);
}

// A kernel given freed memory is an illegal address: sticky, so in a child process.
TEST(CudaSim, KernelOnFreedMemoryIsAStickyError) {
  if (!onStandIn()) GTEST_SKIP() << "needs the CUDA stand-in (a real GPU may not fault)";
  EXPECT_EXIT(
      {
        float* d = nullptr;
        if (cudaMalloc(&d, 1 << 20) != cudaSuccess) exit(2);
        cudaFree(d);
        papKernReduceLaunch(d, d, d, 1000, papcclFloat32, PAP_RED_SUM, nullptr);
        cudaError_t e = cudaDeviceSynchronize();
        float* again = nullptr;
        cudaError_t later = cudaMalloc(&again, 64);
        exit(e == cudaErrorIllegalAddress && later == cudaErrorIllegalAddress ? 0 : 1);
      },
      ::testing::ExitedWithCode(0), "illegal address");
}

// The legacy default stream waits for blocking streams and they for it; a non-blocking
// stream for nobody.
TEST(CudaSim, LegacyStreamOrdersBlockingStreamsOnly) {
  StreamValueFn wait64 = driverFn("cuStreamWaitValue64");
  ASSERT_NE(nullptr, wait64);
  uint64_t* word = nullptr;
  ASSERT_EQ(cudaSuccess, cudaHostAlloc(reinterpret_cast<void**>(&word), 64, cudaHostAllocMapped));
  *word = 0;
  char* d = nullptr;
  ASSERT_EQ(cudaSuccess, cudaMalloc(&d, 4096));
  cudaStream_t blocking, nb;
  ASSERT_EQ(cudaSuccess, cudaStreamCreate(&blocking));
  ASSERT_EQ(cudaSuccess, cudaStreamCreateWithFlags(&nb, cudaStreamNonBlocking));
  // The legacy stream holds until *word >= 1.
  ASSERT_EQ(CUDA_SUCCESS,
            wait64(nullptr, reinterpret_cast<CUdeviceptr>(word), 1, CU_STREAM_WAIT_VALUE_GEQ));
  ASSERT_EQ(cudaSuccess, cudaMemsetAsync(d, 1, 1024, blocking));
  ASSERT_EQ(cudaSuccess, cudaMemsetAsync(d + 1024, 2, 1024, nb));
  ASSERT_EQ(cudaSuccess, cudaStreamSynchronize(nb));  // does not wait for legacy
  usleep(20000);
  EXPECT_EQ(cudaErrorNotReady, cudaStreamQuery(blocking)) << "ran before the legacy stream";
  __atomic_store_n(word, 1, __ATOMIC_RELEASE);
  EXPECT_EQ(cudaSuccess, cudaStreamSynchronize(blocking));
  EXPECT_EQ(cudaSuccess, cudaDeviceSynchronize());
  cudaStreamDestroy(blocking);
  cudaStreamDestroy(nb);
  cudaFree(d);
  cudaFreeHost(word);
}

// cudaEventDestroy returns at once; the queued record still completes, and a stream that
// waits on it is released.
TEST(CudaSim, EventDestroyedBeforeItsRecordCompletes) {
  StreamValueFn wait64 = driverFn("cuStreamWaitValue64");
  ASSERT_NE(nullptr, wait64);
  uint64_t* word = nullptr;
  ASSERT_EQ(cudaSuccess, cudaHostAlloc(reinterpret_cast<void**>(&word), 64, cudaHostAllocMapped));
  *word = 0;
  cudaStream_t a, b;
  ASSERT_EQ(cudaSuccess, cudaStreamCreateWithFlags(&a, cudaStreamNonBlocking));
  ASSERT_EQ(cudaSuccess, cudaStreamCreateWithFlags(&b, cudaStreamNonBlocking));
  cudaEvent_t ev;
  ASSERT_EQ(cudaSuccess, cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
  ASSERT_EQ(CUDA_SUCCESS, wait64(reinterpret_cast<CUstream>(a), reinterpret_cast<CUdeviceptr>(word),
                                 1, CU_STREAM_WAIT_VALUE_GEQ));
  ASSERT_EQ(cudaSuccess, cudaEventRecord(ev, a));
  ASSERT_EQ(cudaSuccess, cudaStreamWaitEvent(b, ev, 0));
  EXPECT_EQ(cudaSuccess, cudaEventDestroy(ev));  // must not wait for stream a
  EXPECT_EQ(cudaErrorNotReady, cudaStreamQuery(b));
  __atomic_store_n(word, 1, __ATOMIC_RELEASE);
  EXPECT_EQ(cudaSuccess, cudaStreamSynchronize(b));
  EXPECT_EQ(cudaErrorInvalidResourceHandle, cudaEventQuery(ev)) << "a destroyed handle";
  (void)cudaGetLastError();
  cudaStreamDestroy(a);
  cudaStreamDestroy(b);
  cudaFreeHost(word);
}

// IPC: not in the exporting process; in another one, once until closed.
TEST(CudaSim, IpcOpensOnlyInAnotherProcessAndOnce) {
  uint32_t* d = nullptr;
  ASSERT_EQ(cudaSuccess, cudaMalloc(&d, 4096));
  uint32_t v = 0x5eed1234u;
  ASSERT_EQ(cudaSuccess, cudaMemcpy(d, &v, 4, cudaMemcpyHostToDevice));
  cudaIpcMemHandle_t h;
  ASSERT_EQ(cudaSuccess, cudaIpcGetMemHandle(&h, d));
  void* mine = nullptr;
  EXPECT_NE(cudaSuccess, cudaIpcOpenMemHandle(&mine, h, cudaIpcMemLazyEnablePeerAccess));
  (void)cudaGetLastError();
  std::string hex;
  for (size_t i = 0; i < sizeof(h); i++) {
    char b[3];
    snprintf(b, sizeof(b), "%02x", (unsigned char)h.reserved[i]);
    hex += b;
  }
  std::string self = "/proc/self/exe";
  char exe[4096];
  ssize_t n = readlink(self.c_str(), exe, sizeof(exe) - 1);
  ASSERT_GT(n, 0);
  exe[n] = '\0';
  std::string arg = "--ipc-child=" + hex;
  char* argv[] = {exe, const_cast<char*>(arg.c_str()), nullptr};
  pid_t pid;
  ASSERT_EQ(0, posix_spawn(&pid, exe, nullptr, nullptr, argv, environ));
  int status = 0;
  ASSERT_EQ(pid, waitpid(pid, &status, 0));
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "child status " << status;
  cudaFree(d);
}

// The child: opens the parent's handle, reads the value, refuses a second open, closes.
static int ipcChild(const char* hex) {
  cudaIpcMemHandle_t h;
  memset(&h, 0, sizeof(h));
  for (size_t i = 0; i < sizeof(h) && hex[2 * i] && hex[2 * i + 1]; i++) {
    char b[3] = {hex[2 * i], hex[2 * i + 1], 0};
    h.reserved[i] = (char)strtoul(b, nullptr, 16);
  }
  void* p = nullptr;
  if (cudaIpcOpenMemHandle(&p, h, cudaIpcMemLazyEnablePeerAccess) != cudaSuccess) return 10;
  uint32_t v = 0;
  if (cudaMemcpy(&v, p, 4, cudaMemcpyDeviceToHost) != cudaSuccess || v != 0x5eed1234u) return 11;
  void* q = nullptr;
  if (cudaIpcOpenMemHandle(&q, h, cudaIpcMemLazyEnablePeerAccess) == cudaSuccess) return 12;
  (void)cudaGetLastError();
  if (cudaIpcCloseMemHandle(p) != cudaSuccess) return 13;
  return 0;
}

int main(int argc, char** argv) {
  if (argc == 2 && strncmp(argv[1], "--ipc-child=", 12) == 0) return ipcChild(argv[1] + 12);
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
    // Suite gpu-sim (PAPCCL_TEST_CUDASIM=require) runs on the build's own stand-in: no
    // device there means it did not load, a failure.
    const char* req = getenv("PAPCCL_TEST_CUDASIM");
    if (req != nullptr && strcmp(req, "require") == 0) {
      printf("FAIL: PAPCCL_TEST_CUDASIM=require, but no CUDA device: the stand-in did not load\n");
      return 1;
    }
    printf("SKIP: no CUDA device (the stand-in is not first on LD_LIBRARY_PATH)\n");
    return 77;
  }
  ::testing::InitGoogleTest(&argc, argv);
  ::testing::GTEST_FLAG(death_test_style) = "threadsafe";
  return RUN_ALL_TESTS();
}
