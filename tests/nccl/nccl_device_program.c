/* SPDX-License-Identifier: Apache-2.0 */
/* An NCCL program on device buffers, written the way NCCL users write one: CUDA streams,
 * cudaMalloc'd buffers, in-place and out-of-place collectives, a group, one rank late. It
 * knows nothing of papccl. Built against NVIDIA's nccl.h and libnccl.so.2 when the toolkit
 * ships them (else papccl's), it runs on papccl's libnccl.so.2 found first on
 * LD_LIBRARY_PATH; without a GPU, with the CUDA stand-in first there too (suite gpu-sim).
 *
 * usage: nccl_device_program [NRANKS [ITERS]]   (default 3 ranks, 4 iterations)
 * The parent forks the ranks before anything starts a thread or touches CUDA; rank 0 makes
 * the unique id and sends it to the others through pipes, as an MPI program broadcasts it;
 * NCCL_PROGRAM_EXPECT_LIB=TEXT makes it check that the libnccl answering has TEXT in its
 * path. Prints "PASS" at the end; a failed check prints "FAIL ..." and exits 1. Built on
 * papccl's own header (NCCL_PROGRAM_OWN_HEADER), a pass exits 77 (the test runner's
 * "skipped"): what the test is for, NVIDIA's header and library under papccl's, was not
 * shown. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <cuda_runtime.h>
#include <dlfcn.h>
#include <nccl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static int failures;

#define CHECK(cond, ...) \
  do { \
    if (!(cond)) { \
      failures++; \
      fprintf(stderr, "FAIL line %d: %s: ", __LINE__, #cond); \
      fprintf(stderr, __VA_ARGS__); \
      fprintf(stderr, "\n"); \
    } \
  } while (0)
#define NC(call) CHECK((call) == ncclSuccess, "%s", #call)
#define CU(call) CHECK((call) == cudaSuccess, "%s", #call)

static int rankMain(int rank, int n, int iters, ncclUniqueId id) {
  const size_t count = (size_t)1 << 18;
  CU(cudaSetDevice(0));
  cudaStream_t s;
  CU(cudaStreamCreate(&s));
  ncclComm_t comm;
  NC(ncclCommInitRank(&comm, n, id, rank));
  if (failures) return 1;
  float *d = NULL, *out = NULL;
  int32_t* di = NULL;
  CU(cudaMalloc((void**)&d, count * sizeof(float)));
  CU(cudaMalloc((void**)&out, count * sizeof(float)));
  CU(cudaMalloc((void**)&di, 1024 * sizeof(int32_t)));
  float* h = (float*)malloc(count * sizeof(float));
  int32_t hi[1024];
  if (h == NULL || failures) return 1;
  for (int it = 0; it < iters && !failures; it++) {
    for (size_t i = 0; i < count; i++)
      h[i] = (float)(rank + 1 + (int)(i % 7));
    for (int i = 0; i < 1024; i++)
      hi[i] = rank * 1000 + i;
    CU(cudaMemcpyAsync(d, h, count * sizeof(float), cudaMemcpyHostToDevice, s));
    CU(cudaMemcpyAsync(di, hi, sizeof(hi), cudaMemcpyHostToDevice, s));
    if (rank == n - 1) usleep(20000); /* the last rank comes late: PAP plans on device memory */
    NC(ncclAllReduce(d, d, count, ncclFloat, ncclSum, comm, s));
    NC(ncclGroupStart());
    NC(ncclBroadcast(d, out, count, ncclFloat, it % n, comm, s));
    NC(ncclAllReduce(di, di, 1024, ncclInt32, ncclMax, comm, s));
    NC(ncclGroupEnd());
    CU(cudaStreamSynchronize(s));
    CU(cudaMemcpy(h, out, count * sizeof(float), cudaMemcpyDeviceToHost));
    CU(cudaMemcpy(hi, di, sizeof(hi), cudaMemcpyDeviceToHost));
    size_t bad = 0;
    for (size_t i = 0; i < count; i++)
      bad += h[i] != (float)(n * (n + 1) / 2 + n * (int)(i % 7));
    CHECK(bad == 0, "rank %d iteration %d: %zu wrong elements after allreduce + broadcast", rank,
          it, bad);
    bad = 0;
    for (int i = 0; i < 1024; i++)
      bad += hi[i] != (n - 1) * 1000 + i;
    CHECK(bad == 0, "rank %d iteration %d: %zu wrong int32 max elements", rank, it, bad);
  }
  NC(ncclCommDestroy(comm));
  CU(cudaFree(d));
  CU(cudaFree(out));
  CU(cudaFree(di));
  CU(cudaStreamDestroy(s));
  free(h);
  return failures ? 1 : 0;
}

int main(int argc, char** argv) {
  int n = argc > 1 ? atoi(argv[1]) : 3;
  int iters = argc > 2 ? atoi(argv[2]) : 4;
  if (n < 1 || n > 16 || iters < 1) {
    fprintf(stderr, "usage: %s [NRANKS (1-16) [ITERS]]\n", argv[0]);
    return 2;
  }
  Dl_info info;
  const char* lib = dladdr((void*)ncclAllReduce, &info) && info.dli_fname ? info.dli_fname : "?";
  printf("library: %s\n", lib);
  Dl_info rt;
  printf("cuda runtime: %s\n", dladdr((void*)cudaMalloc, &rt) && rt.dli_fname ? rt.dli_fname : "?");
  const char* want = getenv("NCCL_PROGRAM_EXPECT_LIB");
  if (want && strstr(lib, want) == NULL) {
    printf("FAIL the library answering is %s, not one with '%s' in its path\n", lib, want);
    return 1;
  }
  int pipes[16][2];
  for (int r = 1; r < n; r++)
    if (pipe(pipes[r]) != 0) {
      printf("FAIL pipe\n");
      return 1;
    }
  fflush(stdout);
  pid_t pids[16];
  for (int r = 0; r < n; r++) {
    pids[r] = fork();
    if (pids[r] != 0) continue;
    ncclUniqueId id;
    if (r == 0) {
      if (ncclGetUniqueId(&id) != ncclSuccess) _exit(3);
      for (int p = 1; p < n; p++)
        if (write(pipes[p][1], &id, sizeof(id)) != (ssize_t)sizeof(id)) _exit(4);
    } else if (read(pipes[r][0], &id, sizeof(id)) != (ssize_t)sizeof(id)) {
      _exit(5);
    }
    _exit(rankMain(r, n, iters, id));
  }
  int bad = 0;
  for (int r = 0; r < n; r++) {
    int st = 0;
    if (pids[r] < 0 || waitpid(pids[r], &st, 0) != pids[r] || !WIFEXITED(st) || WEXITSTATUS(st)) {
      printf("FAIL rank %d: status %d\n", r, st);
      bad = 1;
    }
  }
  printf("%s\n", bad ? "FAIL" : "PASS");
#ifdef NCCL_PROGRAM_OWN_HEADER
  if (!bad) {
    printf(
        "SKIP: built on papccl's own nccl.h (NVIDIA's NCCL was not found at configure "
        "time): the program passed, but not as a program built for NVIDIA's NCCL\n");
    return 77;
  }
#endif
  return bad;
}
