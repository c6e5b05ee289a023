// SPDX-License-Identifier: Apache-2.0
// The IPC allreduce plan (src/algo/arena_colls.c) on the CPU: ranks as threads of one process, whose
// comms get host-memory arenas and a CPU executor for the plan's device steps (shim_ipc.h).
// What runs is the library's plan, engine and shm messages; on a GPU the same plan runs with
// CUDA copies and kernels over CUDA IPC mappings (tests/gpu covers that). Checked: results
// for every owner layout (classic, AC2S and small commits, deterministic order), rounds
// (ops larger than half an arena), in place, groups of two ops, and late ranks.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "internal/shim_ipc.h"
#include "multirank/harness.h"
#include "perf/arrival.h"
#include "sanitizer.h"

namespace papt {
namespace {

// The ranks order their arena accesses through the shm transport's messages, whose shared
// memory each rank maps at its own address: ThreadSanitizer does not see that
// synchronization (it would report every arena access as a race), so these tests run in the
// plain and AddressSanitizer builds only.
class IpcHost : public Test {
 protected:
  void SetUp() override {
    Test::SetUp();
    if (PAPT_TSAN)
      GTEST_SKIP() << "ThreadSanitizer cannot see synchronization through shared memory mapped "
                      "at two addresses of one process (the shm messages between the ranks)";
    // Every size through the arenas, down to one element.
    minBytes_.reset(new ScopedEnv("PAPCCL_CUDA_IPC_MIN_BYTES", "0"));
  }
  void TearDown() override {
    minBytes_.reset();
    Test::TearDown();
  }

 private:
  std::unique_ptr<ScopedEnv> minBytes_;
};

// n ranks of one comm, made in this process, with host arenas attached.
struct HostComms {
  std::vector<papcclComm_t> comms;
  int n;
  explicit HostComms(int nranks, size_t arenaBytes) : comms(nranks, nullptr), n(nranks) {
    EXPECT_EQ(papcclSuccess, papcclCommInitAll(comms.data(), n, nullptr));
    std::vector<void*> v(comms.begin(), comms.end());
    EXPECT_EQ(0, papTestIpcAttachHost(v.data(), n, arenaBytes));
  }
  ~HostComms() {
    std::vector<void*> v(comms.begin(), comms.end());
    papTestIpcDetachHost(v.data(), n);
    for (auto c : comms)
      EXPECT_EQ(papcclSuccess, papcclCommDestroy(c));
  }
};

// Input of rank r, element i: small non-negative integers, exact in every type used here
// (products of four stay below 2^16).
double In(int r, size_t i) {
  return (double)((i * 7 + (size_t)r * 13) % 11 + (size_t)r);
}

double Expect(int n, size_t i, papcclRedOp_t op) {
  double acc = In(0, i);
  for (int r = 1; r < n; r++) {
    double v = In(r, i);
    if (op == papcclSum) acc += v;
    if (op == papcclProd) acc *= v;
    if (op == papcclMax) acc = v > acc ? v : acc;
    if (op == papcclMin) acc = v < acc ? v : acc;
  }
  return acc;
}

// Joins the rank threads, checks that none counted a wrong value, and returns the device
// steps the executors ran in all.
uint64_t JoinAndCount(HostComms& hc, std::vector<std::thread>& th, const std::vector<int>& bad) {
  for (auto& t : th)
    t.join();
  for (size_t r = 0; r < bad.size(); r++)
    EXPECT_EQ(0, bad[r]) << "rank " << r;
  uint64_t steps = 0;
  for (auto c : hc.comms)
    steps += papTestIpcSteps(c);
  return steps;
}

// Runs `iters` allreduces of count elements on every rank (rank `late` delayed by lateUs
// before each) and checks every result. Returns the device steps the executors ran.
template <typename T>
uint64_t RunAllReduce(HostComms& hc, size_t count, papcclDataType_t dt, papcclRedOp_t op,
                      bool inPlace, int iters, int late, double lateUs, bool group = false) {
  const int n = hc.n;
  std::vector<std::thread> th;
  std::vector<int> bad(n, 0);
  for (int r = 0; r < n; r++) {
    th.emplace_back([&, r]() {
      std::vector<T> in(count), out(count), in2(count), out2(count);
      for (int it = 0; it < iters; it++) {
        for (size_t i = 0; i < count; i++) {
          in[i] = (T)In(r, i);
          in2[i] = (T)In(r, i + 1);
          out[i] = out2[i] = (T)-99;
        }
        if (r == late) papPerfDelayUs(lateUs);
        T* s = in.data();
        T* d = inPlace ? in.data() : out.data();
        papcclResult_t res;
        if (group) {
          papcclGroupStart();
          papcclAllReduce(s, d, count, dt, op, hc.comms[r], nullptr);
          papcclAllReduce(in2.data(), out2.data(), count, dt, op, hc.comms[r], nullptr);
          res = papcclGroupEnd();
        } else {
          res = papcclAllReduce(s, d, count, dt, op, hc.comms[r], nullptr);
        }
        if (res != papcclSuccess) {
          bad[r]++;
          return;
        }
        for (size_t i = 0; i < count; i++) {
          if ((double)d[i] != Expect(n, i, op)) {
            if (bad[r]++ < 3)
              ADD_FAILURE() << "rank " << r << " iter " << it << " element " << i << ": "
                            << (double)d[i] << " != " << Expect(n, i, op);
          }
          if (group && (double)out2[i] != Expect(n, i + 1, op)) {
            if (bad[r]++ < 3)
              ADD_FAILURE() << "rank " << r << " second op, element " << i << ": "
                            << (double)out2[i] << " != " << Expect(n, i + 1, op);
          }
        }
      }
    });
  }
  return JoinAndCount(hc, th, bad);
}

// ranks x algorithm (PAPCCL_ALGO, or "det" for PAPCCL_DETERMINISTIC=1).
using IpcParam = std::tuple<int, std::string>;
class IpcHostAlgos : public IpcHost, public ::testing::WithParamInterface<IpcParam> {};

TEST_P(IpcHostAlgos, ResultsUnderLateRank) {
  const int n = std::get<0>(GetParam());
  const std::string algo = std::get<1>(GetParam());
  ScopedEnv det("PAPCCL_DETERMINISTIC", algo == "det" ? "1" : nullptr);
  ScopedEnv forced("PAPCCL_ALGO", algo == "det" || algo == "auto" ? nullptr : algo.c_str());
  // 64 KiB arenas: 32 KiB rounds, so the larger counts take several rounds.
  HostComms hc(n, 64 << 10);
  ASSERT_EQ(1, papTestIpcEligible(hc.comms[0], 1000, papcclFloat32, papcclSum));
  uint64_t steps = 0;
  for (size_t count : {(size_t)1, (size_t)77, (size_t)1000, (size_t)20000}) {
    steps += RunAllReduce<float>(hc, count, papcclFloat32, papcclSum, false, 3, n - 1, 3000);
    steps += RunAllReduce<int32_t>(hc, count, papcclInt32, papcclMax, true, 2, 0, 2000);
  }
  EXPECT_GT(steps, 0u) << "the allreduces did not take the IPC plan";
}

INSTANTIATE_TEST_SUITE_P(Ranks, IpcHostAlgos,
                         ::testing::Combine(::testing::Values(2, 3, 4, 8),
                                            ::testing::Values("auto", "ring", "ac2s", "small",
                                                              "det")),
                         [](const ::testing::TestParamInfo<IpcParam>& i) {
                           return std::to_string(std::get<0>(i.param)) + "ranks_" +
                                  std::get<1>(i.param);
                         });

// AllGather, Broadcast, ReduceScatter and Reduce (float sum; root n-1), in place and not,
// counts that take several rounds, one rank late. Returns the executors' device steps.
enum OneStage {
  kAllGather,
  kBroadcast,
  kReduceScatter,
  kReduce
};
uint64_t RunOneStage(HostComms& hc, OneStage coll, size_t count, bool inPlace, int late,
                     double lateUs) {
  const int n = hc.n, root = n - 1;
  const size_t sendN = coll == kReduceScatter ? count * n : count;
  const size_t recvN = coll == kAllGather ? count * n : count;
  std::vector<std::thread> th;
  std::vector<int> bad(n, 0);
  for (int r = 0; r < n; r++) {
    th.emplace_back([&, r]() {
      std::vector<float> a(std::max(sendN, recvN)), b(recvN, -99.0f);
      float* send = a.data();
      float* recv = inPlace ? a.data() : b.data();
      if (inPlace && coll == kAllGather) send = a.data() + (size_t)r * count;
      if (inPlace && coll == kReduceScatter) recv = a.data() + (size_t)r * count;
      for (size_t i = 0; i < a.size(); i++)
        a[i] = -7.0f;
      for (size_t i = 0; i < sendN; i++)
        send[i] = (float)In(r, i);
      if (r == late) papPerfDelayUs(lateUs);
      papcclResult_t res = papcclSuccess;
      papcclComm_t c = hc.comms[r];
      if (coll == kAllGather) res = papcclAllGather(send, recv, count, papcclFloat32, c, nullptr);
      if (coll == kBroadcast)
        res = papcclBroadcast(send, recv, count, papcclFloat32, root, c, nullptr);
      if (coll == kReduceScatter)
        res = papcclReduceScatter(send, recv, count, papcclFloat32, papcclSum, c, nullptr);
      if (coll == kReduce)
        res = papcclReduce(send, recv, count, papcclFloat32, papcclSum, root, c, nullptr);
      if (res != papcclSuccess) {
        bad[r]++;
        return;
      }
      if (coll == kReduce && r != root) return;
      for (size_t i = 0; i < (coll == kAllGather ? recvN : count); i++) {
        double want = 0;
        if (coll == kAllGather) want = In((int)(i / count), i % count);
        if (coll == kBroadcast) want = In(root, i);
        if (coll == kReduceScatter || coll == kReduce) {
          size_t at = coll == kReduceScatter ? (size_t)r * count + i : i;
          for (int q = 0; q < n; q++)
            want += In(q, at);
        }
        if ((double)recv[i] != want && bad[r]++ < 3)
          ADD_FAILURE() << "collective " << coll << " rank " << r << " count " << count
                        << (inPlace ? " in place" : "") << " element " << i << ": " << recv[i]
                        << " != " << want;
      }
    });
  }
  return JoinAndCount(hc, th, bad);
}

class IpcHostOneStage : public IpcHost, public ::testing::WithParamInterface<IpcParam> {};

TEST_P(IpcHostOneStage, AllGatherBroadcastReduceScatterReduce) {
  const int n = std::get<0>(GetParam());
  const std::string algo = std::get<1>(GetParam());
  ScopedEnv det("PAPCCL_DETERMINISTIC", algo == "det" ? "1" : nullptr);
  ScopedEnv pap("PAPCCL_PAP", algo == "nopap" ? "0" : nullptr);
  HostComms hc(n, 64 << 10);
  uint64_t last = 0;
  for (OneStage coll : {kAllGather, kBroadcast, kReduceScatter, kReduce}) {
    for (size_t count : {(size_t)1, (size_t)333, (size_t)9000}) {
      for (bool inPlace : {false, true}) {
        uint64_t steps = RunOneStage(hc, coll, count, inPlace, (int)(count % n), 2000);
        EXPECT_GT(steps, last) << "collective " << coll << " did not take the IPC plan";
        last = steps;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Ranks, IpcHostOneStage,
                         ::testing::Combine(::testing::Values(2, 3, 4),
                                            ::testing::Values("auto", "nopap", "det")),
                         [](const ::testing::TestParamInfo<IpcParam>& i) {
                           return std::to_string(std::get<0>(i.param)) + "ranks_" +
                                  std::get<1>(i.param);
                         });

TEST_F(IpcHost, OpsAndTypes) {
  HostComms hc(3, 64 << 10);
  RunAllReduce<double>(hc, 5003, papcclFloat64, papcclProd, false, 1, 2, 1000);
  RunAllReduce<int64_t>(hc, 5003, papcclInt64, papcclMin, true, 1, 1, 1000);
  RunAllReduce<uint8_t>(hc, 40000, papcclUint8, papcclMax, false, 1, -1, 0);
  RunAllReduce<float>(hc, 12345, papcclFloat32, papcclSum, true, 1, -1, 0);
}

// Two allreduces in one group share the arenas: the second waits for the first.
TEST_F(IpcHost, GroupOfTwo) {
  HostComms hc(4, 64 << 10);
  uint64_t steps = RunAllReduce<float>(hc, 30000, papcclFloat32, papcclSum, false, 3, 3, 2000,
                                       /*group=*/true);
  EXPECT_GT(steps, 0u);
}

// Avg and pre-multiplied sums are not taken by the IPC plan (they need a scaling step); they
// still give the right answer through the ordinary plans on the same comm.
TEST_F(IpcHost, AvgTakesTheOrdinaryPlan) {
  HostComms hc(2, 64 << 10);
  EXPECT_EQ(0, papTestIpcEligible(hc.comms[0], 1000, papcclFloat32, papcclAvg));
  EXPECT_EQ(1, papTestIpcEligible(hc.comms[0], 1000, papcclFloat32, papcclSum));
  {
    ScopedEnv small("PAPCCL_CUDA_IPC_MIN_BYTES", "4001");  // below it: the ordinary path
    HostComms hc2(2, 64 << 10);
    EXPECT_EQ(0, papTestIpcEligible(hc2.comms[0], 1000, papcclFloat32, papcclSum));
    EXPECT_EQ(1, papTestIpcEligible(hc2.comms[0], 1001, papcclFloat32, papcclSum));
  }
  std::vector<std::thread> th;
  std::vector<int> bad(2, 0);
  for (int r = 0; r < 2; r++) {
    th.emplace_back([&, r]() {
      std::vector<float> in(1000, (float)(r + 1) * 2), out(1000, 0);
      if (papcclAllReduce(in.data(), out.data(), 1000, papcclFloat32, papcclAvg, hc.comms[r],
                          nullptr) != papcclSuccess)
        bad[r]++;
      for (float v : out)
        bad[r] += v != 3.0f;
    });
  }
  for (auto& t : th)
    t.join();
  EXPECT_EQ(0, bad[0]);
  EXPECT_EQ(0, bad[1]);
  EXPECT_EQ(0u, papTestIpcSteps(hc.comms[0]) + papTestIpcSteps(hc.comms[1]));
}

}  // namespace
}  // namespace papt
