// SPDX-License-Identifier: Apache-2.0
// Oversubscription: 8 ranks on a 2-core machine finish many small allreduces (hang detector,
// time printed), and an idle communicator's progress thread costs no CPU.
#include <dirent.h>
#include <gtest/gtest.h>
#include <sched.h>
#include <sys/resource.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "internal/shim_comm.h"
#include "multirank/harness.h"

namespace papt {
namespace {

class Oversub : public Test, public ::testing::WithParamInterface<Mode> {};

// Not a performance assertion: a bound that only a hang or a livelock can exceed.
constexpr double kHangBoundS = 120;
constexpr int kIters = 1000;

TEST_P(Oversub, EightRanksThousandSmallAllReduces) {
  const Mode mode = GetParam();
  const int n = 8;
  Options opt;
  opt.deadlineS = 2 * kHangBoundS;
  const double t0 = NowS();
  RunRanks(
      mode, n,
      [&](Rank& rk) {
        float in[2], out[2];
        const double s0 = NowS();
        int bad = 0;
        for (int it = 0; it < kIters; it++) {
          in[0] = (float)(rk.rank + it % 5);
          in[1] = (float)(it % 3);
          papcclResult_t res =
              papcclAllReduce(in, out, 2, papcclFloat32, papcclSum, rk.comm, nullptr);
          if (res != papcclSuccess) {
            ADD_FAILURE() << "rank " << rk.rank << " iteration " << it << ": " << res << " "
                          << papcclGetLastError(rk.comm);
            return;
          }
          const float want0 = (float)(n * (n - 1) / 2 + n * (it % 5));
          const float want1 = (float)(n * (it % 3));
          if ((out[0] != want0 || out[1] != want1) && bad++ == 0)
            ADD_FAILURE() << "rank " << rk.rank << " iteration " << it << ": got " << out[0] << ","
                          << out[1] << " want " << want0 << "," << want1;
        }
        fprintf(stderr, "%s rank %d: %d allreduces of 8 bytes in %.3f s\n", ModeName(mode), rk.rank,
                kIters, NowS() - s0);
      },
      opt);
  const double total = NowS() - t0;
  fprintf(stderr, "%s: %d ranks, %d allreduces of 8 bytes: %.3f s in all (incl. init)\n",
          ModeName(mode), n, kIters, total);
  EXPECT_LT(total, kHangBoundS) << "hang detector (not a performance bound)";
}

INSTANTIATE_TEST_SUITE_P(Modes, Oversub, ::testing::Values(Mode::kThreads, Mode::kProcesses),
                         [](const ::testing::TestParamInfo<Mode>& info) {
                           return std::string(ModeName(info.param));
                         });

// ---- Idle CPU -----------------------------------------------------------------------------

struct ThreadCpu {
  std::string name;
  long tid;
  double cpuS;
};

// utime + stime of every thread of this process, from /proc/self/task/*/stat.
std::vector<ThreadCpu> ReadThreadCpu() {
  std::vector<ThreadCpu> out;
  const double tick = 1.0 / (double)sysconf(_SC_CLK_TCK);
  DIR* d = opendir("/proc/self/task");
  if (!d) return out;
  while (dirent* e = readdir(d)) {
    if (e->d_name[0] == '.') continue;
    std::string base = std::string("/proc/self/task/") + e->d_name;
    std::ifstream stat(base + "/stat");
    std::string line;
    if (!std::getline(stat, line)) continue;
    size_t open = line.find('('), close = line.rfind(')');
    if (open == std::string::npos || close == std::string::npos) continue;
    ThreadCpu t;
    t.tid = atol(e->d_name);
    t.name = line.substr(open + 1, close - open - 1);
    std::istringstream rest(line.substr(close + 2));
    std::string field;
    std::vector<std::string> f;
    while (rest >> field)
      f.push_back(field);
    // After the name: state(3) ppid ... utime is field 14, stime 15 (1-based): f[11], f[12].
    if (f.size() < 13) continue;
    t.cpuS = (double)(atoll(f[11].c_str()) + atoll(f[12].c_str())) * tick;
    out.push_back(t);
  }
  closedir(d);
  return out;
}

double ProcessCpuS() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec * 1e-6 +
         (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec * 1e-6;
}

class OversubIdle : public Test {};

TEST_F(OversubIdle, IdleCommunicatorCostsNoCpu) {
  const int n = 2;
  std::vector<papcclComm_t> comms(n, nullptr);
  ASSERT_EQ(papcclSuccess, papcclCommInitAll(comms.data(), n, nullptr));
  // One operation first, so that whatever an operation starts has started.
  RunThreads(
      n,
      [&](Rank& rk) {
        float v = 1, s = 0;
        EXPECT_EQ(papcclSuccess,
                  papcclAllReduce(&v, &s, 1, papcclFloat32, papcclSum, comms[rk.rank], nullptr));
        EXPECT_EQ((float)n, s);
      },
      [] {
        Options o;
        o.makeComm = false;
        o.makeId = false;
        return o;
      }());
  std::this_thread::sleep_for(std::chrono::milliseconds(200));  // settle

  auto before = ReadThreadCpu();
  const double p0 = ProcessCpuS();
  std::this_thread::sleep_for(std::chrono::seconds(1));
  const double p1 = ProcessCpuS();
  auto after = ReadThreadCpu();

  int progThreads = 0;
  double progCpu = 0;
  for (const auto& a : after) {
    if (a.name.rfind("papccl-prog-", 0) != 0) continue;
    progThreads++;
    for (const auto& b : before)
      if (b.tid == a.tid) progCpu += a.cpuS - b.cpuS;
  }
  fprintf(stderr, "idle second: %d progress threads used %.3f s CPU; the process %.3f s\n",
          progThreads, progCpu, p1 - p0);
  EXPECT_GE(progThreads, n) << "expected a progress thread named papccl-prog-<rank> per rank";
  EXPECT_LT(progCpu, 0.050) << "idle progress threads must sleep, not poll";
  EXPECT_LT(p1 - p0, 0.050) << "an idle communicator must cost (almost) no CPU";

  std::vector<std::thread> th;
  for (int r = 0; r < n; r++)
    th.emplace_back([&, r] { EXPECT_EQ(papcclSuccess, papcclCommDestroy(comms[r])); });
  for (auto& t : th)
    t.join();
}

// Ranks in UTS namespaces of their own (containers, network-namespace "hosts") have their own
// host names on one kernel: they still share its CPUs. Two ranks bound to CPU 0, each under
// another host name (PAPCCL_HOSTID keeps them on shared memory), must see that they are
// oversubscribed, so their waits yield instead of spinning against each other (with the host
// name in the machine's id they did not).
TEST(OversubUts, RanksWithTheirOwnHostNamesShareTheCpus) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root for UTS namespaces (unshare CLONE_NEWUTS)";
  Options opt;
  opt.makeComm = false;
  opt.destroy = false;
  auto out = RunProcesses(
      2,
      [&](Rank& rk) {
        ASSERT_EQ(0, unshare(CLONE_NEWUTS)) << strerror(errno);
        std::string name = "papt-uts-host-" + std::to_string(rk.rank);
        ASSERT_EQ(0, sethostname(name.c_str(), name.size())) << strerror(errno);
        cpu_set_t one;
        CPU_ZERO(&one);
        CPU_SET(0, &one);
        ASSERT_EQ(0, sched_setaffinity(0, sizeof(one), &one)) << strerror(errno);
        ScopedEnv hostId("PAPCCL_HOSTID", "papt-uts-one-machine");
        papTestCommParamReset();
        papcclComm_t comm = nullptr;
        ASSERT_EQ(papcclSuccess, papcclCommInitRank(&comm, rk.nranks, rk.id, rk.rank))
            << papcclGetLastError(nullptr);
        EXPECT_EQ(1, papTestCommOversubscribed(comm))
            << "rank " << rk.rank << ": 2 ranks bound to one CPU under two host names";
        float v = 1, s = 0;
        EXPECT_EQ(papcclSuccess,
                  papcclAllReduce(&v, &s, 1, papcclFloat32, papcclSum, comm, nullptr));
        EXPECT_EQ(2.0f, s);
        EXPECT_EQ(papcclSuccess, papcclCommDestroy(comm));
      },
      opt);
  ExpectAllSucceeded(out, "ranks under their own host names");
}

}  // namespace
}  // namespace papt
