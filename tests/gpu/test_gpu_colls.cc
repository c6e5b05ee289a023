// SPDX-License-Identifier: Apache-2.0
// Collectives on device buffers in CUDA stream order, ranks sharing one GPU.
//
// The oracle, independent of papccl: a reducing collective's inputs and expected results are
// the multirank harness's (tests/multirank/harness_values.cc: inputs designed per op so that
// the result is exact in every reduction order, computed in double or 128-bit integers and
// encoded with tests/common/narrow_float.h); a collective that only moves data is checked
// against every rank's input laid out as NCCL defines it, made here. Also:
// stream ordering (a kernel writes the input just before the collective and one reads the
// output just after), the arrival on the stream (one rank's stream delayed by a spin kernel
// is seen as late by the PAP engine), memory types (pinned, managed, mixed), graph capture
// (a clear error), ranks as threads and as processes.
#include <cuda_runtime.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "kernels.h"
#include "papccl.h"
#include "tests/gpu/gpu_common.h"
#include "tests/internal/shim_ipc.h"
#include "tests/multirank/harness.h"
#include "tests/sanitizer.h"

extern char** environ;

namespace {

using papgpu::haveGpu;
using papgpu::randomBytes;

#define CU(call) ASSERT_EQ(cudaSuccess, (call)) << #call
#define PC(call) ASSERT_EQ(papcclSuccess, (call)) << #call << ": " << papcclGetLastError(nullptr)

enum Coll {
  kAllReduce,
  kReduce,
  kReduceScatter,
  kBroadcast,
  kAllGather,
  kAlltoAll,
  kGather,
  kScatter,
  kSendRecv,
  kNumColls
};
const char* collName(int c) {
  static const char* n[] = {"allreduce", "reduce", "reducescatter", "broadcast", "allgather",
                            "alltoall",  "gather", "scatter",       "sendrecv"};
  return n[c];
}
bool reduces(int c) {
  return c == kAllReduce || c == kReduce || c == kReduceScatter;
}

// Elements of send and recv per rank for count, n ranks.
void sizes(int c, size_t count, int n, size_t* sendElts, size_t* recvElts) {
  *sendElts = count;
  *recvElts = count;
  if (c == kReduceScatter || c == kAlltoAll || c == kScatter) *sendElts = count * n;
  if (c == kAllGather || c == kAlltoAll || c == kGather) *recvElts = count * n;
}

papcclResult_t runColl(int c, const void* s, void* r, size_t count, papcclDataType_t t,
                       papcclRedOp_t op, papcclComm_t comm, cudaStream_t st, int rank, int n) {
  const int root = n - 1;
  switch (c) {
  case kAllReduce:
    return papcclAllReduce(s, r, count, t, op, comm, st);
  case kReduce:
    return papcclReduce(s, r, count, t, op, root, comm, st);
  case kReduceScatter:
    return papcclReduceScatter(s, r, count, t, op, comm, st);
  case kBroadcast:
    return papcclBroadcast(s, r, count, t, root, comm, st);
  case kAllGather:
    return papcclAllGather(s, r, count, t, comm, st);
  case kAlltoAll:
    return papcclAlltoAll(s, r, count, t, comm, st);
  case kGather:
    return papcclGather(s, r, count, t, root, comm, st);
  case kScatter:
    return papcclScatter(s, r, count, t, root, comm, st);
  default: {
    papcclResult_t a = papcclGroupStart();
    if (a != papcclSuccess) return a;
    papcclSend(s, count, t, (rank + 1) % n, comm, st);
    papcclRecv(r, count, t, (rank + n - 1) % n, comm, st);
    return papcclGroupEnd();
  }
  }
}

// Runs fn(rank, comm, stream) on n threads, each with its comm (all on device 0) and stream.
// A barrier for the rank threads of onRanks. Rank threads allocate and free device memory
// only between barriers, never while a peer's stream may be held on a collective:
// cudaFree waits for the whole device.
class Barrier {
 public:
  explicit Barrier(int n) : n_(n) {}
  void wait() {
    std::unique_lock<std::mutex> lk(m_);
    int gen = gen_;
    if (++count_ == n_) {
      count_ = 0;
      gen_++;
      cv_.notify_all();
    } else if (!cv_.wait_for(lk, std::chrono::seconds(150), [&] { return gen != gen_; })) {
      count_--;
      ADD_FAILURE() << "a rank thread did not reach the barrier (it failed earlier)";
    }
  }

 private:
  std::mutex m_;
  std::condition_variable cv_;
  int n_, count_ = 0, gen_ = 0;
};
thread_local Barrier* tBarrier;
thread_local void* tScratch[2];  // per rank, kScratchBytes each, allocated before the threads
constexpr size_t kScratchBytes = 16u << 20;
void rankSync() {
  tBarrier->wait();
}

// Runs fn(rank, comm, stream) on n threads, each with its comm (all on device 0), stream and
// scratch buffers; rankSync() is a barrier among them.
void onRanks(int n, const std::function<void(int, papcclComm_t, cudaStream_t)>& fn) {
  std::vector<papcclComm_t> comms(n);
  std::vector<int> devs(n, 0);
  // The process uses the GPU before the comms are made (papccl never makes the first context,
  // and CUDA IPC is set up at init only in a process that has one).
  ASSERT_EQ(cudaSuccess, cudaSetDevice(0));
  ASSERT_EQ(cudaSuccess, cudaFree(nullptr));
  ASSERT_EQ(papcclSuccess, papcclCommInitAll(comms.data(), n, devs.data()));
  std::vector<void*> scratch(2 * n, nullptr);
  for (auto& p : scratch)
    ASSERT_EQ(cudaSuccess, cudaMalloc(&p, kScratchBytes));
  Barrier barrier(n);
  std::vector<std::thread> th;
  for (int r = 0; r < n; r++) {
    th.emplace_back([&, r] {
      cudaSetDevice(0);
      tBarrier = &barrier;
      tScratch[0] = scratch[2 * r];
      tScratch[1] = scratch[2 * r + 1];
      cudaStream_t st;
      cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking);
      fn(r, comms[r], st);
      cudaStreamSynchronize(st);
      barrier.wait();
      cudaStreamDestroy(st);
    });
  }
  for (auto& t : th)
    t.join();
  for (auto p : scratch)
    cudaFree(p);
  for (int r = 0; r < n; r++)
    EXPECT_EQ(papcclSuccess, papcclCommDestroy(comms[r]));
}

// The harness's case for a reducing collective c.
papt::Case harnessCase(int c, papcclDataType_t t, papt::Op op, size_t count) {
  papt::Case hc;
  hc.coll = c == kAllReduce ? papt::Coll::kAllReduce
            : c == kReduce  ? papt::Coll::kReduce
                            : papt::Coll::kReduceScatter;
  hc.type = t;
  hc.op = op;
  hc.count = count;
  hc.seed = 7u * c + t + 1;
  return hc;
}

// Rank q's input for collective c, type t (every rank can make any rank's): for a reducing
// one, the harness's inputs designed for op; random bytes otherwise.
std::vector<uint8_t> inputOf(int c, papcclDataType_t t, papt::Op op, size_t count, int q, int n) {
  size_t se, re;
  sizes(c, count, n, &se, &re);
  if (!reduces(c)) return randomBytes(se * papKernTypeSize(t), 1000u * q + 7u * c + t);
  std::vector<uint8_t> in(se * papKernTypeSize(t));
  papt::Case hc = harnessCase(c, t, op, count);
  for (size_t i = 0; i < se; i++)
    papt::SetElem(in.data(), t, i, papt::InputBits(hc, n, q, i));
  return in;
}

// Checks a reducing collective's result on rank (count elements: the whole reduction, or for
// reducescatter the rank's block of it) against the harness's reference. Exact (bit for bit)
// wherever the harness's designs make every reduction order exact: sums of small integers and
// products of {1, -1, 2} (or {1, -1, 2, 3}) fit every type, max/min pick one input, integer
// avg truncates the exact sum, float avg divides an exact sum by a power of two. Float avg over
// 3 ranks rounds 1/3 and the order of the additions: within CheckAvgApprox's bound (the type's
// unit roundoff times nranks + 2, relative to the average of the magnitudes).
bool reducedAsReference(int c, papcclDataType_t t, papt::Op op, size_t count, int rank, int n,
                        const uint8_t* got, const std::string& what) {
  papt::Case hc = harnessCase(c, t, op, count);
  const size_t first = c == kReduceScatter ? (size_t)rank * count : 0;
  if (papt::AvgIsApproximate(hc, n)) return papt::CheckAvgApprox(got, hc, n, first, count, what);
  size_t bad = 0, firstBad = 0;
  for (size_t i = 0; i < count; i++) {
    if (papt::GetElem(got, t, i) == papt::ReducedBits(hc, n, first + i)) continue;
    if (bad++ == 0) firstBad = i;
  }
  if (bad == 0) return true;
  ADD_FAILURE() << what << ": " << bad << " elements differ from the harness's reference, first "
                << firstBad << ": got 0x" << std::hex << papt::GetElem(got, t, firstBad)
                << ", want 0x" << papt::ReducedBits(hc, n, first + firstBad);
  return false;
}

// The result of a collective that only moves data, made here from every rank's input and
// NCCL's layouts alone (independent of papccl); false for the reducing ones. Root n - 1.
bool movedData(int c, papcclDataType_t t, size_t count, int rank, int n,
               std::vector<uint8_t>* out) {
  const size_t blk = count * papKernTypeSize(t);
  const int root = n - 1;
  out->clear();
  switch (c) {
  case kBroadcast:
    *out = inputOf(c, t, papt::Op::kSum, count, root, n);
    return true;
  case kAllGather:
  case kGather:  // checked on the root only
    for (int q = 0; q < n; q++) {
      auto in = inputOf(c, t, papt::Op::kSum, count, q, n);
      out->insert(out->end(), in.begin(), in.end());
    }
    return true;
  case kAlltoAll:
    for (int q = 0; q < n; q++) {
      auto in = inputOf(c, t, papt::Op::kSum, count, q, n);
      out->insert(out->end(), in.begin() + rank * blk, in.begin() + (rank + 1) * blk);
    }
    return true;
  case kScatter: {
    auto in = inputOf(c, t, papt::Op::kSum, count, root, n);
    out->assign(in.begin() + rank * blk, in.begin() + (rank + 1) * blk);
    return true;
  }
  case kSendRecv:
    *out = inputOf(c, t, papt::Op::kSum, count, (rank + n - 1) % n, n);
    return true;
  default:
    return false;
  }
}

// One case on every rank: a reducing collective's device result against the harness's
// reference (reducedAsReference), one that only moves data against the result made here from
// every rank's input (movedData). Counts mismatches in *bad.
void checkCase(int c, papcclDataType_t t, papt::Op op, size_t count, int rank, int n,
               papcclComm_t comm, cudaStream_t st, bool inPlace, int* bad) {
  size_t se, re;
  sizes(c, count, n, &se, &re);
  const size_t esz = papKernTypeSize(t);
  auto in = inputOf(c, t, op, count, rank, n);
  std::vector<uint8_t> devOut(re * esz, 0);
  // Device. In place: one buffer laid out as NCCL defines it for each collective.
  void *ds = tScratch[0], *dr = tScratch[1];
  ASSERT_LE((se > re ? se : re) * esz, kScratchBytes);
  if (inPlace) {
    void* one = tScratch[0];
    CU(cudaMemsetAsync(one, 0, (se > re ? se : re) * esz, st));
    ds = dr = one;
    if (c == kAllGather) ds = (char*)one + (size_t)rank * count * esz;
    if (c == kReduceScatter) dr = (char*)one + (size_t)rank * count * esz;
  } else {
    CU(cudaMemsetAsync(dr, 0, re * esz, st));
  }
  CU(cudaStreamSynchronize(st));
  CU(cudaMemcpyAsync(ds, in.data(), se * esz, cudaMemcpyHostToDevice, st));
  CU(cudaStreamSynchronize(st));
  // Premulsum: the harness's scalar (2, or 3 for the integers), made for this case.
  papcclRedOp_t redOp = (papcclRedOp_t)op;
  if (op == papt::Op::kPreMulSum) {
    uint64_t scalar = papt::PreMulScalarBits(t);
    PC(papcclRedOpCreatePreMulSum(&redOp, &scalar, t, papcclScalarHostImmediate, comm));
  }
  papcclResult_t res = runColl(c, ds, dr, count, t, redOp, comm, st, rank, n);
  EXPECT_EQ(papcclSuccess, res) << papcclGetLastError(comm);
  CU(cudaStreamSynchronize(st));
  if (op == papt::Op::kPreMulSum) {
    EXPECT_EQ(papcclSuccess, papcclRedOpDestroy(redOp, comm));
  }
  if (res != papcclSuccess) return;
  CU(cudaMemcpy(devOut.data(), dr, re * esz, cudaMemcpyDeviceToHost));
  bool recvUsed = !((c == kReduce || c == kGather) && rank != n - 1);
  if (recvUsed && reduces(c)) {
    std::string what = std::string(collName(c)) + " " + papt::TypeName(t) + " op " +
                       papt::OpName(op) + " count " + std::to_string(count) + " rank " +
                       std::to_string(rank) + "/" + std::to_string(n) +
                       (inPlace ? " in place" : "");
    if (!reducedAsReference(c, t, op, count, rank, n, devOut.data(), what)) (*bad)++;
  }
  std::vector<uint8_t> moved;
  if (recvUsed && movedData(c, t, count, rank, n, &moved)) {
    EXPECT_EQ(re * esz, moved.size()) << collName(c) << ": test design error";
    if (moved.size() == re * esz && memcmp(devOut.data(), moved.data(), re * esz) != 0) {
      (*bad)++;
      ADD_FAILURE() << collName(c) << " type " << t << " count " << count << " rank " << rank << "/"
                    << n << (inPlace ? " in place" : "")
                    << ": device result differs from every rank's input laid out as NCCL's";
    }
  }
}

// k blocks of count floats on the device, block i filled with rank + i on st; allocated
// before a rankSync (no allocation while a peer's stream may be held). nullptr on failure.
float* filledBlocks(int rank, int k, size_t count, cudaStream_t st) {
  float* b = nullptr;
  bool ok = cudaMalloc(&b, count * 4 * k) == cudaSuccess;
  rankSync();
  for (int i = 0; ok && i < k; i++)
    ok = papKernFillF32(b + count * i, count, (float)(rank + i), 0.0f, st) == papcclSuccess;
  EXPECT_TRUE(ok) << "rank " << rank << ": allocating or filling the blocks failed";
  return ok ? b : nullptr;
}

// k blocks of count floats, block i filled with rank + i on each of 2 ranks and summed:
// every element of block i must be 2i + 1. Copies b back on st first.
size_t wrongSums(const float* b, int k, size_t count, cudaStream_t st) {
  std::vector<float> out(count * k);
  if (cudaMemcpyAsync(out.data(), b, count * 4 * k, cudaMemcpyDeviceToHost, st) != cudaSuccess ||
      cudaStreamSynchronize(st) != cudaSuccess)
    return count * k;
  size_t wrong = 0;
  for (int i = 0; i < k; i++)
    for (size_t j = 0; j < count; j++)
      wrong += out[count * i + j] != (float)(2 * i + 1);
  return wrong;
}

// Sets a PAPCCL_* variable for the comms made in this scope (the library reads parameters
// once: they are forgotten on both ends).
class ScopedParam {
 public:
  ScopedParam(const char* name, const char* value) : name_(name) {
    const char* old = getenv(name);
    had_ = old != nullptr;
    if (had_) old_ = old;
    setenv(name, value, 1);
    papTestIpcParamReset();
  }
  ~ScopedParam() {
    if (had_)
      setenv(name_.c_str(), old_.c_str(), 1);
    else
      unsetenv(name_.c_str());
    papTestIpcParamReset();
  }

 private:
  std::string name_, old_;
  bool had_;
};

}  // namespace

// Every collective x datatype x op on device buffers, 1 to 4 ranks (threads) on one GPU.
TEST(GpuColls, EveryCollectiveTypeOp) {
  for (int n = 1; n <= 4; n++) {
    onRanks(n, [&](int rank, papcclComm_t comm, cudaStream_t st) {
      // Every rank runs every case, whatever it found: a rank that stopped early would
      // leave the others waiting in a collective.
      int bad = 0;
      for (int c = 0; c < kNumColls; c++) {
        for (int t = 0; t < papcclNumTypes; t++) {
          for (papt::Op op : papt::kAllOps) {
            if (!reduces(c) && op != papt::Op::kSum) continue;
            size_t count = (c == kAllReduce && t == papcclFloat32) ? 1000003 : 1000 + 13;
            checkCase(c, (papcclDataType_t)t, op, count, rank, n, comm, st, false, &bad);
            bool inPlaceToo =
                c == kAllReduce || c == kAllGather || c == kReduceScatter || c == kBroadcast;
            if (inPlaceToo && op == papt::Op::kSum)
              checkCase(c, (papcclDataType_t)t, op, 777, rank, n, comm, st, true, &bad);
          }
        }
      }
    });
  }
}

// A kernel writes the input just before the collective (after a 20 ms spin, so that a
// collective that did not wait for the stream would read stale zeros) and a kernel reads
// the output just after it (so that a copy back not ordered before it would be missed).
TEST(GpuColls, StreamOrdering) {
  const int n = 3;
  const size_t count = 1 << 20;
  onRanks(n, [&](int rank, papcclComm_t comm, cudaStream_t st) {
    float *s, *r, *twice;
    CU(cudaMalloc(&s, count * 4));
    CU(cudaMalloc(&r, count * 4));
    CU(cudaMalloc(&twice, count * 4));
    rankSync();
    CU(cudaMemset(s, 0, count * 4));
    PC(papKernSpinNs(20000000ull, st));
    PC(papKernFillF32(s, count, (float)(rank + 1), 0.0f, st));
    PC(papcclAllReduce(s, r, count, papcclFloat32, papcclSum, comm, st));
    PC(papKernReduceLaunch(twice, r, r, count, papcclFloat32, PAP_RED_SUM, st));
    CU(cudaStreamSynchronize(st));
    std::vector<float> out(count);
    CU(cudaMemcpy(out.data(), twice, count * 4, cudaMemcpyDeviceToHost));
    const float want = 2.0f * n * (n + 1) / 2;
    size_t wrong = 0;
    for (float v : out)
      wrong += v != want;
    EXPECT_EQ(0u, wrong) << "rank " << rank << ": first value " << out[0] << ", want " << want;
    rankSync();
    cudaFree(s);
    cudaFree(r);
    cudaFree(twice);
  });
}

// One rank's stream reaches the collective 30 ms late (a spin kernel): the PAP engine must
// stamp arrivals when the streams reach the op, so it names that rank as the late one. Every
// call starts with the streams idle and the ranks together (a barrier after each call): a
// PAP plan can end the late rank's part of a call long before the others' (under TSan on the
// stand-in, a 16 MiB call's tail was 670 ms), and its next spin then overlapped their work:
// the skew seen was 74 ms of the 150. Stamps taken at enqueue would still see no skew.
TEST(GpuColls, ArrivalOnTheStream) {
  const int n = 4, late = 2;
  const size_t count = 1 << 22;
  // Under a sanitizer on the CUDA stand-in, the streams are instrumented host threads that
  // share 2 CPUs with 4 ranks: a punctual rank's stream once reached the op more than 30 ms
  // late, so there the late one is 150 ms late (as in the PAP tests under sanitizers).
  const uint64_t lateNs = (PAPT_ASAN || PAPT_TSAN) ? 150000000ull : 30000000ull;
  std::vector<papcclPapStats> stats(n);
  onRanks(n, [&](int rank, papcclComm_t comm, cudaStream_t st) {
    float* b;
    CU(cudaMalloc(&b, count * 4));
    rankSync();
    PC(papKernFillF32(b, count, 1.0f, 0.0f, st));
    for (int it = 0; it < 3; it++) {
      if (rank == late) {
        PC(papKernSpinNs(lateNs, st));
      }
      PC(papcclAllReduce(b, b, count, papcclFloat32, papcclSum, comm, st));
      CU(cudaStreamSynchronize(st));
      rankSync();
    }
    float v = 0;
    CU(cudaMemcpy(&v, b, 4, cudaMemcpyDeviceToHost));
    EXPECT_EQ(64.0f, v) << "rank " << rank;  // 1 * 4^3
    PC(papcclCommGetPapStats(comm, &stats[rank]));
    rankSync();
    cudaFree(b);
  });
  for (int r = 0; r < n; r++) {
    EXPECT_EQ(late, stats[r].lastLateRank) << "rank " << r;
    EXPECT_GE(stats[r].lastSkewUs, lateNs / 2e3) << "rank " << r << ": the delay was not seen";
  }
  printf("[ figure ] late stream %.0f ms, 4 ranks, 16 MiB: skew %.0f us, tail %.0f us, algo %s\n",
         lateNs / 1e6, stats[0].lastSkewUs, stats[0].lastTailUs, stats[0].lastAlgoName);
}

// Pinned host, managed and device memory, and a device send with a pinned host receive.
TEST(GpuColls, MemoryTypes) {
  const int n = 2;
  const size_t count = 4096;
  onRanks(n, [&](int rank, papcclComm_t comm, cudaStream_t st) {
    float *pinned, *managed, *dev, *pinnedOut;
    CU(cudaMallocHost(&pinned, count * 4));
    CU(cudaMallocManaged(&managed, count * 4));
    CU(cudaMalloc(&dev, count * 4));
    CU(cudaMallocHost(&pinnedOut, count * 4));
    rankSync();
    for (size_t i = 0; i < count; i++)
      pinned[i] = managed[i] = (float)(rank + 1);
    PC(papKernFillF32(dev, count, (float)(rank + 1), 0.0f, st));
    PC(papcclAllReduce(pinned, pinned, count, papcclFloat32, papcclSum, comm, st));
    PC(papcclAllReduce(managed, managed, count, papcclFloat32, papcclSum, comm, st));
    PC(papcclAllReduce(dev, pinnedOut, count, papcclFloat32, papcclSum, comm, st));
    CU(cudaStreamSynchronize(st));
    EXPECT_EQ(3.0f, pinned[count - 1]);
    EXPECT_EQ(3.0f, managed[count - 1]);
    EXPECT_EQ(3.0f, pinnedOut[count - 1]);
    rankSync();
    cudaFreeHost(pinned);
    cudaFree(managed);
    cudaFree(dev);
    cudaFreeHost(pinnedOut);
  });
}

// Capture into a CUDA graph is refused with a clear error; the comm stays usable.
TEST(GpuColls, GraphCaptureIsAClearError) {
  onRanks(1, [&](int, papcclComm_t comm, cudaStream_t st) {
    float* b;
    CU(cudaMalloc(&b, 1024 * 4));
    CU(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
    EXPECT_EQ(papcclInvalidUsage, papcclAllReduce(b, b, 1024, papcclFloat32, papcclSum, comm, st));
    EXPECT_NE(nullptr, strstr(papcclGetLastError(comm), "graph")) << papcclGetLastError(comm);
    cudaGraph_t g = nullptr;
    CU(cudaStreamEndCapture(st, &g));
    if (g) cudaGraphDestroy(g);
    PC(papcclAllReduce(b, b, 1024, papcclFloat32, papcclSum, comm, st));
    CU(cudaStreamSynchronize(st));
    cudaFree(b);
  });
}

// One-sided calls take host buffers only (docs/ONE-SIDED.md): a device window and a put
// from device memory are refused with papcclInvalidUsage and a WARN; host windows work on
// the same comm, also while device buffers exist.
TEST(GpuColls, OneSidedRefusesDeviceBuffers) {
  onRanks(2, [&](int rank, papcclComm_t comm, cudaStream_t st) {
    const size_t count = 1024;
    float* dev;
    CU(cudaMalloc(&dev, count * 4));
    papcclWindow_t w = nullptr;
    EXPECT_EQ(papcclInvalidUsage, papcclCommWindowRegister(comm, dev, count * 4, &w, 0));
    EXPECT_NE(nullptr, strstr(papcclGetLastError(comm), "device memory"))
        << papcclGetLastError(comm);
    EXPECT_EQ(nullptr, w);
    std::vector<float> host(count, -1.0f);
    PC(papcclCommWindowRegister(comm, host.data(), count * 4, &w, 0));
    EXPECT_EQ(papcclInvalidUsage,
              papcclPutSignal(dev, count, papcclFloat32, 1 - rank, w, 0, 0, 0, 0, comm, st));
    EXPECT_NE(nullptr, strstr(papcclGetLastError(comm), "device memory"))
        << papcclGetLastError(comm);
    std::vector<float> src(count, (float)(rank + 1));
    PC(papcclPutSignal(src.data(), count, papcclFloat32, 1 - rank, w, 0, 0, 0, 0, comm, st));
    papcclWaitSignalDesc_t d = {1, 1 - rank, 0, 0};
    PC(papcclWaitSignal(1, &d, comm, st));
    EXPECT_EQ((float)(2 - rank), host[count - 1]);
    PC(papcclCommWindowDeregister(comm, w));
    cudaFree(dev);
  });
}

// One group per rank: a device allreduce on the rank's stream, a host-buffer allreduce, and
// a device allreduce on a second stream whose input is written late. After the group, a
// kernel on the second stream reads the first stream's result: the streams were joined.
TEST(GpuColls, GroupMixesHostDeviceAndStreams) {
  const int n = 2;
  const size_t count = 100000;
  onRanks(n, [&](int rank, papcclComm_t comm, cudaStream_t st) {
    cudaStream_t st2;
    CU(cudaStreamCreateWithFlags(&st2, cudaStreamNonBlocking));
    float *a, *b, *a2;
    CU(cudaMalloc(&a, count * 4));
    CU(cudaMalloc(&b, count * 4));
    CU(cudaMalloc(&a2, count * 4));
    rankSync();
    std::vector<float> h(count, (float)(rank + 1));
    PC(papKernFillF32(a, count, (float)(rank + 1), 0.0f, st));
    PC(papKernSpinNs(10000000ull, st2));  // b is written late on the second stream
    PC(papKernFillF32(b, count, (float)(10 * rank + 10), 0.0f, st2));
    PC(papcclGroupStart());
    PC(papcclAllReduce(a, a, count, papcclFloat32, papcclSum, comm, st));
    PC(papcclAllReduce(h.data(), h.data(), count, papcclFloat32, papcclSum, comm, st));
    PC(papcclAllReduce(b, b, count, papcclFloat32, papcclSum, comm, st2));
    PC(papcclGroupEnd());
    PC(papKernReduceLaunch(a2, a, a, count, papcclFloat32, PAP_RED_SUM, st2));
    CU(cudaStreamSynchronize(st2));  // only the second stream
    float va = 0, vb = 0;
    CU(cudaMemcpy(&va, a2 + count - 1, 4, cudaMemcpyDeviceToHost));
    CU(cudaMemcpy(&vb, b + count - 1, 4, cudaMemcpyDeviceToHost));
    EXPECT_EQ(6.0f, va) << "rank " << rank << ": the second stream did not wait for the group";
    EXPECT_EQ(3.0f, h[count - 1]) << "rank " << rank;
    EXPECT_EQ(30.0f, vb) << "rank " << rank;
    CU(cudaStreamSynchronize(st));
    rankSync();
    cudaFree(a);
    cudaFree(b);
    cudaFree(a2);
    cudaStreamDestroy(st2);
  });
}

// 40 device collectives in one group on one comm: one job, one staging block.
TEST(GpuColls, ManyOpsInOneGroup) {
  const int n = 2, k = 40;
  const size_t count = 60000;  // 9.6 MB in one job: more than PAPCCL_CUDA_STAGING_MB (8)
  for (const char* ipc : {"0", "1"}) {  // staged; through CUDA IPC arenas, one op after another
    ScopedParam on("PAPCCL_CUDA_IPC", ipc);
    onRanks(n, [&](int rank, papcclComm_t comm, cudaStream_t st) {
      float* b = filledBlocks(rank, k, count, st);
      ASSERT_NE(nullptr, b);
      PC(papcclGroupStart());
      for (int i = 0; i < k; i++)
        PC(papcclAllReduce(b + count * i, b + count * i, count, papcclFloat32, papcclSum, comm,
                           st));
      PC(papcclGroupEnd());
      EXPECT_EQ(0u, wrongSums(b, k, count, st)) << "rank " << rank << ", PAPCCL_CUDA_IPC=" << ipc;
      rankSync();
      cudaFree(b);
    });
  }
}

// A caller running ahead of a late stream: 12 allreduces of 2 MiB queued while rank 1's
// stream is held for 300 ms, with 8 MiB of staging per comm: past the budget the caller
// waits for a block to come free instead of pinning more; every result is right.
TEST(GpuColls, StagingBackpressure) {
  const int n = 2, k = 12;
  const size_t count = 512 * 1024;
  ScopedParam staged("PAPCCL_CUDA_IPC", "0");  // CUDA IPC allreduces take no staging
  onRanks(n, [&](int rank, papcclComm_t comm, cudaStream_t st) {
    float* b = filledBlocks(rank, k, count, st);
    ASSERT_NE(nullptr, b);
    if (rank == 1) {
      PC(papKernSpinNs(300000000ull, st));
    }
    for (int i = 0; i < k; i++)
      PC(papcclAllReduce(b + count * i, b + count * i, count, papcclFloat32, papcclSum, comm, st));
    EXPECT_EQ(0u, wrongSums(b, k, count, st)) << "rank " << rank;
    rankSync();
    cudaFree(b);
  });
}

uint64_t memStat(papcclComm_t comm, papcclCommMemStat_t stat) {
  uint64_t v = ~0ull;
  EXPECT_EQ(papcclSuccess, papcclCommMemStats(comm, stat, &v)) << papcclGetLastError(comm);
  return v;
}

// Suspension gives the pinned staging of device buffers back (papcclCommSuspend), the stats
// say so, and device allreduces are right again after resumption; 4 ranks on one device.
TEST(GpuColls, SuspendGivesStagingBack) {
  const int n = 4, k = 2;
  const size_t count = 256 * 1024;  // 1 MiB per block: at least one staging block
  ScopedParam staged("PAPCCL_CUDA_IPC", "0");  // staging, not arenas
  onRanks(n, [&](int rank, papcclComm_t comm, cudaStream_t st) {
    float* b = filledBlocks(rank, k, count, st);
    ASSERT_NE(nullptr, b);
    auto sums = [&](const char* what) {
      for (int i = 0; i < k; i++)
        PC(papcclAllReduce(b + count * i, b + count * i, count, papcclFloat32, papcclSum, comm,
                           st));
      std::vector<float> out(count * k);
      CU(cudaMemcpyAsync(out.data(), b, count * 4 * k, cudaMemcpyDeviceToHost, st));
      CU(cudaStreamSynchronize(st));
      size_t wrong = 0;
      for (int i = 0; i < k; i++)
        for (size_t j = 0; j < count; j++)
          wrong += out[count * i + j] != (float)(n * i + n * (n - 1) / 2);
      EXPECT_EQ(0u, wrong) << "rank " << rank << ", " << what;
    };
    sums("before suspending");
    const uint64_t sus = memStat(comm, papcclStatMemSuspend);
    const uint64_t per = memStat(comm, papcclStatMemPersist);
    const uint64_t tot = memStat(comm, papcclStatMemTotal);
    EXPECT_GE(sus, count * 4) << "rank " << rank << ": the staging blocks are releasable";
    EXPECT_EQ(tot, sus + per);
    PC(papcclCommSuspend(comm, PAPCCL_SUSPEND_MEM));
    EXPECT_EQ(1u, memStat(comm, papcclStatMemSuspended));
    EXPECT_EQ(0u, memStat(comm, papcclStatMemSuspend)) << "rank " << rank;
    EXPECT_EQ(per, memStat(comm, papcclStatMemPersist)) << "rank " << rank;
    EXPECT_EQ(tot - sus, memStat(comm, papcclStatMemTotal)) << "rank " << rank;
    if (rank == 0)
      printf(
          "device buffers, rank 0 of %d: %llu bytes releasable, %llu kept; suspended: 0 and "
          "%llu\n",
          n, (unsigned long long)sus, (unsigned long long)per,
          (unsigned long long)memStat(comm, papcclStatMemPersist));
    EXPECT_EQ(papcclInvalidUsage, papcclAllReduce(b, b, count, papcclFloat32, papcclSum, comm, st));
    PC(papcclCommResume(comm));
    rankSync();
    for (int i = 0; i < k; i++)
      PC(papKernFillF32(b + count * i, count, (float)(rank + i), 0.0f, st));
    sums("after resuming");
    EXPECT_GE(memStat(comm, papcclStatMemSuspend), count * 4) << "staging came back";
    rankSync();
    cudaFree(b);
  });
}

// Whether the stream's work all completes within ms milliseconds (polled every 10 ms).
static bool releasedWithin(cudaStream_t st, int ms) {
  for (int waited = 0;; waited += 10) {
    if (cudaStreamQuery(st) == cudaSuccess) return true;
    if (waited >= ms) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

// A device collective whose peer never comes: aborting the comm releases the stream.
TEST(GpuColls, AbortReleasesTheStream) {
  papcclComm_t comms[2];
  int devs[2] = {0, 0};
  PC(papcclCommInitAll(comms, 2, devs));
  cudaStream_t st;
  CU(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  float* b;
  CU(cudaMalloc(&b, 1 << 20));
  PC(papcclAllReduce(b, b, 1 << 18, papcclFloat32, papcclSum, comms[0], st));
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  EXPECT_EQ(cudaErrorNotReady, cudaStreamQuery(st)) << "the stream did not wait for the peer";
  EXPECT_EQ(papcclSuccess, papcclCommAbort(comms[0]));
  // Bounded: the stream must be released by the abort, not by some timeout.
  EXPECT_TRUE(releasedWithin(st, 5000)) << "the stream was still held 5 s after the abort";
  EXPECT_EQ(papcclSuccess, papcclCommAbort(comms[1]));
  cudaFree(b);
  cudaStreamDestroy(st);
}

// A device collective whose peer never comes, and nobody aborts: at PAPCCL_TIMEOUT_S the
// operation fails, the error reaches the comm, and the stream is released (a stream held
// forever would hang the application's next synchronize).
TEST(GpuColls, TimeoutReleasesTheStream) {
  ScopedParam timeout("PAPCCL_TIMEOUT_S", "2");
  papcclComm_t comms[2];
  int devs[2] = {0, 0};
  PC(papcclCommInitAll(comms, 2, devs));
  cudaStream_t st;
  CU(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  float* b;
  CU(cudaMalloc(&b, 1 << 20));
  auto t0 = std::chrono::steady_clock::now();
  PC(papcclAllReduce(b, b, 1 << 18, papcclFloat32, papcclSum, comms[0], st));
  bool released = releasedWithin(st, 15000);  // the timeout is 2 s
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_TRUE(released) << "the stream was still held " << s << " s after the call";
  EXPECT_GE(s, 1.5) << "released before the timeout: the peer was not awaited";
  papcclResult_t async = papcclSuccess;
  PC(papcclCommGetAsyncError(comms[0], &async));
  EXPECT_NE(papcclSuccess, async) << "the timed-out operation left no error on the comm";
  EXPECT_NE(papcclInProgress, async);
  EXPECT_EQ(papcclSuccess, papcclCommAbort(comms[0]));
  EXPECT_EQ(papcclSuccess, papcclCommAbort(comms[1]));
  cudaFree(b);
  cudaStreamDestroy(st);
}

// CUDA IPC collectives (ranks of one process read each other's arenas): exact results for
// integer-valued floats and int32 max, in place and not, over several rounds (a 1 MiB
// arena: 512 KiB rounds), with one stream late; then AllGather, ReduceScatter, Broadcast and
// Reduce. The comm must have CUDA IPC on. With PAPCCL_CUDA_IPC=0 the same calls take pinned
// staging and give the same answers.
TEST(GpuColls, IpcCollectivesExact) {
  const size_t count = 1000003;  // 4 MB of fp32: 8 rounds, not a multiple of any block
  ScopedParam mb("PAPCCL_CUDA_IPC_MB", "1");
  for (const char* ipc : {"1", "0"}) {
    ScopedParam on("PAPCCL_CUDA_IPC", ipc);
    for (int n = 2; n <= 4; n++) {
      onRanks(n, [&](int rank, papcclComm_t comm, cudaStream_t st) {
        EXPECT_EQ(ipc[0] == '1', papTestIpcOn(comm) == 1)
            << "rank " << rank << ": CUDA IPC is not as PAPCCL_CUDA_IPC=" << ipc
            << " asks (the INFO log says why)";
        // The one-stage collectives below: c2 elements per rank.
        const size_t c2 = 300001;
        float *s, *r, *ag, *rs;
        int32_t* iv;
        CU(cudaMalloc(&s, count * 4));
        CU(cudaMalloc(&r, count * 4));
        CU(cudaMalloc(&iv, count * 4));
        CU(cudaMalloc(&ag, c2 * 4 * n));
        CU(cudaMalloc(&rs, c2 * 4 * n));
        std::vector<int32_t> ih(count);
        for (size_t i = 0; i < count; i++)
          ih[i] = (int32_t)((i * 31 + (size_t)rank * 17) % 1000) - 500;
        CU(cudaMemcpy(iv, ih.data(), count * 4, cudaMemcpyHostToDevice));
        rankSync();
        for (int it = 0; it < 3; it++) {
          // p[i] = rank + 1 + (i % 1024): sums of n are exact in fp32.
          PC(papKernFillF32(s, count, (float)(rank + 1), 1.0f, st));
          if (rank == n - 1) {
            PC(papKernSpinNs(5000000ull, st));
          }
          PC(papcclAllReduce(s, r, count, papcclFloat32, papcclSum, comm, st));
          PC(papcclAllReduce(s, s, count, papcclFloat32, papcclSum, comm, st));  // in place
        }
        PC(papcclAllReduce(iv, iv, count, papcclInt32, papcclMax, comm, st));
        CU(cudaStreamSynchronize(st));
        std::vector<float> out(count), inplace(count);
        std::vector<int32_t> imax(count);
        CU(cudaMemcpy(out.data(), r, count * 4, cudaMemcpyDeviceToHost));
        CU(cudaMemcpy(inplace.data(), s, count * 4, cudaMemcpyDeviceToHost));
        CU(cudaMemcpy(imax.data(), iv, count * 4, cudaMemcpyDeviceToHost));
        size_t wrong = 0;
        for (size_t i = 0; i < count; i++) {
          float want = (float)(n * (n + 1) / 2) + (float)n * (float)(i % 1024);
          wrong += out[i] != want;
          wrong += inplace[i] != want;
          int32_t m = INT32_MIN;
          for (int q = 0; q < n; q++)
            m = std::max(m, (int32_t)((i * 31 + (size_t)q * 17) % 1000) - 500);
          wrong += imax[i] != m;
        }
        EXPECT_EQ(0u, wrong) << "rank " << rank << " of " << n << ", PAPCCL_CUDA_IPC=" << ipc;
        // The one-stage collectives over the same rounds: rank q's input is all q + 1.
        PC(papKernFillF32(s, c2, (float)(rank + 1), 0.0f, st));
        PC(papKernFillF32(rs, c2 * n, (float)(rank + 1), 0.0f, st));
        PC(papcclAllGather(s, ag, c2, papcclFloat32, comm, st));
        PC(papcclReduceScatter(rs, r, c2, papcclFloat32, papcclSum, comm, st));
        PC(papcclBroadcast(s, s, c2, papcclFloat32, n - 1, comm, st));  // in place
        PC(papcclReduce(rs, rs, c2, papcclFloat32, papcclSum, 0, comm, st));  // in place
        CU(cudaStreamSynchronize(st));
        std::vector<float> hag(c2 * n), hrs(c2), hbc(c2), hred(c2);
        CU(cudaMemcpy(hag.data(), ag, c2 * 4 * n, cudaMemcpyDeviceToHost));
        CU(cudaMemcpy(hrs.data(), r, c2 * 4, cudaMemcpyDeviceToHost));
        CU(cudaMemcpy(hbc.data(), s, c2 * 4, cudaMemcpyDeviceToHost));
        CU(cudaMemcpy(hred.data(), rs, c2 * 4, cudaMemcpyDeviceToHost));
        const float sum = (float)(n * (n + 1) / 2);
        size_t wrongAg = 0, wrongRs = 0, wrongBc = 0, wrongRed = 0;
        for (size_t i = 0; i < c2; i++) {
          for (int q = 0; q < n; q++)
            wrongAg += hag[(size_t)q * c2 + i] != (float)(q + 1);
          wrongRs += hrs[i] != sum;
          wrongBc += hbc[i] != (float)n;
          wrongRed += rank == 0 && hred[i] != sum;
        }
        EXPECT_EQ(0u, wrongAg) << "allgather, rank " << rank << " of " << n;
        EXPECT_EQ(0u, wrongRs) << "reducescatter, rank " << rank << " of " << n;
        EXPECT_EQ(0u, wrongBc) << "broadcast, rank " << rank << " of " << n;
        EXPECT_EQ(0u, wrongRed) << "reduce, rank " << rank << " of " << n;
        rankSync();
        cudaFree(s);
        cudaFree(r);
        cudaFree(iv);
        cudaFree(ag);
        cudaFree(rs);
      });
    }
  }
}

// Rank 0's median time in call (ms) of `iters` allreduces (sum) of count fp32 on n ranks
// sharing the GPU, each after one to line the ranks up; rank n-1's stream lateUs late.
double medianAllreduceMs(int n, size_t count, int lateUs, int iters) {
  std::vector<double> ms;
  onRanks(n, [&](int rank, papcclComm_t comm, cudaStream_t st) {
    float* b;
    CU(cudaMalloc(&b, count * 4));
    rankSync();
    PC(papKernFillF32(b, count, 1.0f, 0.0f, st));
    cudaEvent_t e0, e1;
    cudaEventCreate(&e0);
    cudaEventCreate(&e1);
    std::vector<double> mine;
    for (int it = 0; it < iters + 2; it++) {
      PC(papcclAllReduce(b, b, count, papcclFloat32, papcclSum, comm, st));  // line up
      CU(cudaStreamSynchronize(st));
      if (lateUs && rank == n - 1) {
        PC(papKernSpinNs(1000ull * lateUs, st));
      }
      cudaEventRecord(e0, st);
      PC(papcclAllReduce(b, b, count, papcclFloat32, papcclSum, comm, st));
      cudaEventRecord(e1, st);
      CU(cudaStreamSynchronize(st));
      float t = 0;
      cudaEventElapsedTime(&t, e0, e1);
      if (it >= 2) mine.push_back(t);
    }
    if (rank == 0) ms = mine;
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    rankSync();
    cudaFree(b);
  });
  std::sort(ms.begin(), ms.end());
  return ms.empty() ? 0 : ms[ms.size() / 2];
}

// Figures for the record (not assertions): allreduce (sum) of 64 MiB fp32 device buffers with
// 2 and 4 ranks sharing the GPU, balanced and with one stream 20 ms late, through CUDA IPC
// and through pinned staging (PAPCCL_CUDA_IPC=0); median of 7.
TEST(GpuColls, ReportAllreduce) {
  const size_t count = 16u << 20;
  for (const char* ipc : {"1", "0"}) {
    ScopedParam on("PAPCCL_CUDA_IPC", ipc);
    for (int n : {2, 4}) {
      for (int lateUs : {0, 20000}) {
        double med = medianAllreduceMs(n, count, lateUs, 7);
        double busbw = med > 0 ? 2.0 * (n - 1) / n * count * 4 / (med * 1e-3) / 1e9 : 0;
        printf(
            "[ figure ] allreduce 64 MiB fp32 device, %d ranks on one GPU, %s, %s: rank 0 time "
            "in call %.2f ms (median of 7), busbw %.1f GB/s\n",
            n, ipc[0] == '1' ? "CUDA IPC" : "pinned staging",
            lateUs ? "last stream 20 ms late" : "balanced", med, busbw);
      }
    }
  }
}

// Figures for the record: where CUDA IPC starts to beat pinned staging (it costs a few device
// round trips per op; PAPCCL_CUDA_IPC_MIN_BYTES sets the crossover). 2 ranks sharing the
// GPU, fp32 sum, balanced; median time in call of 15.
TEST(GpuColls, ReportIpcCrossover) {
  for (size_t bytes : {(size_t)8, (size_t)4096, (size_t)65536, (size_t)1 << 20, (size_t)16 << 20}) {
    double med[2] = {0, 0};
    for (int ipc = 0; ipc < 2; ipc++) {
      ScopedParam on("PAPCCL_CUDA_IPC", ipc ? "1" : "0");
      ScopedParam all("PAPCCL_CUDA_IPC_MIN_BYTES", "0");
      med[ipc] = medianAllreduceMs(2, bytes / 4, 0, 15);
    }
    printf(
        "[ figure ] allreduce %zu B fp32 device, 2 ranks on one GPU: pinned staging %.3f ms, "
        "CUDA IPC %.3f ms (median of 15), staging/IPC %.2f\n",
        bytes, med[0], med[1], med[1] > 0 ? med[0] / med[1] : 0.0);
  }
}

// Starts this binary once per rank (PAPCCL_GPU_CHILD=rank,n,id plus extraEnv); returns
// each rank's wait status.
static std::vector<int> spawnRanks(int n, const std::vector<std::string>& extraEnv) {
  papcclUniqueId id;
  std::vector<int> statuses;
  if (papcclGetUniqueId(&id) != papcclSuccess) return statuses;
  std::string hex;
  for (size_t i = 0; i < sizeof(id); i++) {
    char b[3];
    snprintf(b, sizeof(b), "%02x", (unsigned char)id.internal[i]);
    hex += b;
  }
  std::vector<pid_t> pids;
  for (int r = 0; r < n; r++) {
    std::string env1 =
        "PAPCCL_GPU_CHILD=" + std::to_string(r) + "," + std::to_string(n) + "," + hex;
    std::vector<char*> envp;
    for (char** e = environ; *e; e++)
      envp.push_back(*e);
    envp.push_back(const_cast<char*>(env1.c_str()));
    for (const std::string& e : extraEnv)
      envp.push_back(const_cast<char*>(e.c_str()));
    envp.push_back(nullptr);
    char self[] = "/proc/self/exe";
    char* argv[] = {self, nullptr};
    pid_t pid;
    if (posix_spawn(&pid, "/proc/self/exe", nullptr, nullptr, argv, envp.data()) != 0) break;
    pids.push_back(pid);
  }
  for (pid_t p : pids) {
    int status = 0;
    waitpid(p, &status, 0);
    statuses.push_back(status);
  }
  return statuses;
}

// Ranks as processes sharing the GPU: this binary runs itself once per rank. Each maps the
// others' arenas with cudaIpcOpenMemHandle (CUDA IPC must be on between them).
TEST(GpuColls, ProcessesShareTheGpu) {
  for (int n : {2, 4}) {
    std::vector<int> statuses = spawnRanks(n, {});
    ASSERT_EQ((size_t)n, statuses.size());
    for (int status : statuses)
      EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
          << n << " processes: a rank exited with status " << status;
  }
}

// A rank dies while the others' allreduce waits in stream order: their streams are released
// long before PAPCCL_TIMEOUT_S (60 s here), the comm holds the error, and the survivors
// shrink it without the dead rank and run device allreduces on the new comm (childKill).
TEST(GpuColls, DeadRankReleasesTheStreamAndShrinkGoesOn) {
  for (const char* ipc : {"PAPCCL_CUDA_IPC=0", "PAPCCL_CUDA_IPC=1"}) {
    const int n = 3;
    std::vector<int> statuses =
        spawnRanks(n, {"PAPCCL_GPU_CHILD_KILL=1", "PAPCCL_TIMEOUT_S=60", ipc});
    ASSERT_EQ((size_t)n, statuses.size());
    for (int r = 0; r < n; r++) {
      if (r == n - 1)
        EXPECT_TRUE(WIFSIGNALED(statuses[r]) && WTERMSIG(statuses[r]) == SIGKILL)
            << ipc << ": the victim ended with status " << statuses[r];
      else
        EXPECT_TRUE(WIFEXITED(statuses[r]) && WEXITSTATUS(statuses[r]) == 0)
            << ipc << ": survivor " << r << " exited with status " << statuses[r];
    }
  }
}

// A 2-rank comm grows to 4 (two new ranks, threads with only the id; docs/FAULTS.md
// section 5): device allreduces on the grown comm are exact (through the CUDA IPC arenas
// where they are on), and the old comm still runs its own.
TEST(GpuColls, GrowOnDeviceBuffers) {
  ASSERT_EQ(cudaSuccess, cudaSetDevice(0));
  ASSERT_EQ(cudaSuccess, cudaFree(nullptr));
  papcclComm_t old[2] = {nullptr, nullptr};
  int devs[2] = {0, 0};
  ASSERT_EQ(papcclSuccess, papcclCommInitAll(old, 2, devs));
  papcclUniqueId gid;
  ASSERT_EQ(papcclSuccess, papcclCommGetUniqueId(old[0], &gid));
  const int n = 4;
  const size_t count = 1 << 20;
  std::vector<std::thread> th;
  for (int r = 0; r < n; r++) {
    th.emplace_back([&, r] {
      cudaSetDevice(0);
      papcclComm_t g = nullptr;
      papcclResult_t res = r < 2
                               ? papcclCommGrow(old[r], n, r == 0 ? &gid : nullptr, -1, &g, nullptr)
                               : papcclCommGrow(nullptr, n, &gid, r, &g, nullptr);
      ASSERT_EQ(papcclSuccess, res)
          << "rank " << r << ": " << papcclGetLastError(r < 2 ? old[r] : nullptr);
      // The grown comm maps the CUDA IPC arenas as the old one did (all on this GPU).
      EXPECT_EQ(papTestIpcOn(old[0]), papTestIpcOn(g)) << "rank " << r;
      cudaStream_t st;
      cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking);
      float* b = nullptr;
      cudaMalloc(&b, count * 4);
      std::vector<float> out(count);
      for (int it = 0; it < 6; it++) {
        // Even calls on the grown comm, odd ones on the old comm (old ranks only).
        papcclComm_t c = it % 2 == 0 ? g : (r < 2 ? old[r] : nullptr);
        if (c == nullptr) continue;
        const int cn = c == g ? n : 2;
        PC(papKernFillF32(b, count, (float)(r + 1 + it), 0.0f, st));
        PC(papcclAllReduce(b, b, count, papcclFloat32, papcclSum, c, st));
        CU(cudaStreamSynchronize(st));
        CU(cudaMemcpy(out.data(), b, count * 4, cudaMemcpyDeviceToHost));
        const float want = (float)(cn * (cn + 1) / 2 + cn * it);
        EXPECT_TRUE(out[0] == want && out[count - 1] == want)
            << "rank " << r << ", allreduce " << it << " on " << cn << " ranks: " << out[0]
            << ", want " << want;
      }
      cudaFree(b);
      cudaStreamDestroy(st);
      EXPECT_EQ(papcclSuccess, papcclCommDestroy(g));
    });
  }
  for (auto& t : th)
    t.join();
  EXPECT_EQ(papcclSuccess, papcclCommDestroy(old[0]));
  EXPECT_EQ(papcclSuccess, papcclCommDestroy(old[1]));
}

// A child rank of DeadRankReleasesTheStreamAndShrinkGoesOn: one checked device allreduce;
// then the last rank dies, the others' next one must fail and release their stream, and they
// go on in a shrunk comm.
static int childKill(papcclComm_t comm, int rank, int n) {
  cudaStream_t st;
  cudaStreamCreate(&st);
  const size_t count = 1 << 18;
  float* b;
  cudaMalloc(&b, count * 4);
  std::vector<float> out(count);
  int bad = 0;
  papKernFillF32(b, count, (float)(rank + 1), 0.0f, st);
  if (papcclAllReduce(b, b, count, papcclFloat32, papcclSum, comm, st) != papcclSuccess) bad++;
  cudaStreamSynchronize(st);
  cudaMemcpy(out.data(), b, count * 4, cudaMemcpyDeviceToHost);
  if (out[0] != (float)(n * (n + 1) / 2)) bad++;
  if (rank == n - 1) raise(SIGKILL);
  auto t0 = std::chrono::steady_clock::now();
  papcclAllReduce(b, b, count, papcclFloat32, papcclSum, comm, st);  // enqueued
  bool released = false;
  for (int waited = 0; waited < 20000 && !released; waited += 5) {
    released = cudaStreamQuery(st) == cudaSuccess;
    if (!released) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  papcclResult_t async = papcclSuccess;
  papcclCommGetAsyncError(comm, &async);
  fprintf(stderr, "child rank %d: stream released %d after %.3f s, async error %d: %s\n", rank,
          (int)released, s, (int)async, papcclGetLastError(comm));
  if (!released || s > 10 || async == papcclSuccess || async == papcclInProgress) bad++;
  int dead = n - 1;
  papcclComm_t child = nullptr;
  if (papcclCommShrink(comm, &dead, 1, &child, nullptr, PAPCCL_SHRINK_ABORT) != papcclSuccess) {
    fprintf(stderr, "child rank %d: shrink failed: %s\n", rank, papcclGetLastError(comm));
    return 1;
  }
  for (int it = 0; it < 20; it++) {
    papKernFillF32(b, count, (float)(rank + 1 + it), 0.0f, st);
    if (papcclAllReduce(b, b, count, papcclFloat32, papcclSum, child, st) != papcclSuccess) bad++;
    cudaStreamSynchronize(st);
    cudaMemcpy(out.data(), b, count * 4, cudaMemcpyDeviceToHost);
    float want = (float)((n - 1) * n / 2 + (n - 1) * it);
    if (out[0] != want || out[count - 1] != want) bad++;
  }
  papcclCommDestroy(child);
  papcclCommAbort(comm);
  cudaFree(b);
  cudaStreamDestroy(st);
  if (bad) fprintf(stderr, "child rank %d of %d: %d wrong\n", rank, n, bad);
  return bad ? 1 : 0;
}

// A child rank: allreduce and allgather on device buffers, checked.
static int childRank(const char* spec) {
  int rank = 0, n = 0;
  char hex[300] = {0};
  if (sscanf(spec, "%d,%d,%299s", &rank, &n, hex) != 3) return 2;
  papcclUniqueId id;
  for (size_t i = 0; i < sizeof(id); i++) {
    unsigned v = 0;
    sscanf(hex + 2 * i, "%2x", &v);
    id.internal[i] = (char)v;
  }
  cudaSetDevice(0);
  papcclComm_t comm;
  if (papcclCommInitRank(&comm, n, id, rank) != papcclSuccess) return 3;
  if (getenv("PAPCCL_GPU_CHILD_KILL")) return childKill(comm, rank, n);
  cudaStream_t st;
  cudaStreamCreate(&st);
  const size_t count = 1 << 20;
  float *s, *r;
  cudaMalloc(&s, count * 4);
  cudaMalloc(&r, count * 4 * n);
  papKernFillF32(s, count, (float)(rank + 1), 0.0f, st);
  int bad = 0;
  const char* ipcEnv = getenv("PAPCCL_CUDA_IPC");
  if ((ipcEnv == nullptr || ipcEnv[0] != '0') && !papTestIpcOn(comm)) {
    fprintf(stderr, "child rank %d of %d: CUDA IPC is off between the processes\n", rank, n);
    bad++;
  }
  if (papcclAllReduce(s, r, count, papcclFloat32, papcclSum, comm, st) != papcclSuccess) bad++;
  const size_t agCount = 20000;  // 80 KB per rank: above PAPCCL_CUDA_IPC_MIN_BYTES
  if (papcclAllGather(s, r + count, agCount, papcclFloat32, comm, st) != papcclSuccess) bad++;
  cudaStreamSynchronize(st);
  std::vector<float> out(count + agCount * n);
  cudaMemcpy(out.data(), r, out.size() * 4, cudaMemcpyDeviceToHost);
  if (out[0] != (float)(n * (n + 1) / 2) || out[count - 1] != out[0]) bad++;
  for (int q = 0; q < n; q++)
    if (out[count + agCount * q + 5] != (float)(q + 1)) bad++;
  papcclCommDestroy(comm);
  if (bad) fprintf(stderr, "child rank %d of %d: %d wrong\n", rank, n, bad);
  return bad ? 1 : 0;
}

int main(int argc, char** argv) {
  // The oracle compares device results with host results of separate calls: with the
  // deterministic allreduce the reduction order does not depend on who arrived first. A
  // rank thread that fails early must not leave the others waiting for 10 minutes.
  setenv("PAPCCL_DETERMINISTIC", "1", 0);
  setenv("PAPCCL_TIMEOUT_S", "120", 0);
  setenv("PAPCCL_CUDA_STAGING_MB", "8", 0);  // small, so that the backpressure path runs
  if (const char* spec = getenv("PAPCCL_GPU_CHILD")) return childRank(spec);
  return papgpu::runGpuTests(argc, argv);
}
