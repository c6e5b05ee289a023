// SPDX-License-Identifier: Apache-2.0
// The UCX transport between "hosts": ranks as processes with different PAPCCL_HOSTID, so
// that no two hosts share memory and every byte and every arrival-board atomic goes through
// real UCX (UCX_TLS=tcp: over the loopback network stack). Every collective, datatype and
// op; arrival patterns with the PAP-aware allreduce; a peer process killed mid-run.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "mp/harness.h"
#include "perf/arrival.h"

namespace papt {
namespace {

class Ucx : public Test {};

#ifndef PAPCCL_HAVE_UCX
TEST_F(Ucx, NotBuilt) {
  GTEST_SKIP() << "this build has no UCX transport (libucx-dev was not found at configure time)";
}
#else

// ranks per host x hosts x forced allreduce algorithm ("" = the selector's choice)
using UcxParam = std::tuple<int, int, std::string>;
class UcxHosts : public Ucx, public ::testing::WithParamInterface<UcxParam> {};

// A child's communicator over UCX: its own host id, TCP only.
papcclComm_t UcxComm(Rank& rk, int perHost) {
  std::string host = "ucx-test-host-" + std::to_string(rk.rank / perHost);
  setenv("UCX_TLS", "tcp", 1);
  ScopedEnv hostId("PAPCCL_HOSTID", host);
  papcclComm_t comm = nullptr;
  EXPECT_EQ(papcclSuccess, papcclCommInitRank(&comm, rk.nranks, rk.id, rk.rank))
      << papcclGetLastError(nullptr);
  return comm;
}

TEST_P(UcxHosts, EveryCollectiveTypeOpAndPattern) {
  const int perHost = std::get<0>(GetParam());
  const int hosts = std::get<1>(GetParam());
  const int n = perHost * hosts;
  const std::string algo = std::get<2>(GetParam());
  ScopedEnv forced("PAPCCL_ALGO", algo.empty() ? nullptr : algo.c_str());
  Options opt;
  opt.makeComm = false;
  opt.destroy = false;
  ScopedEnv gap("PAPCCL_PAP_GAP_US", "100");
  auto out = RunProcesses(
      n,
      [&](Rank& rk) {
        rk.comm = UcxComm(rk, perHost);
        ASSERT_NE(nullptr, rk.comm);
        uint32_t seed = 1;
        // Every collective x datatype x op (uneven counts, in and out of place, roots).
        for (Coll coll : kAllColls) {
          for (papcclDataType_t t : kAllTypes) {
            for (Op op : kAllOps) {
              if (!CollReduces(coll) && op != Op::kSum) continue;
              Case c;
              c.coll = coll;
              c.type = t;
              c.op = op;
              c.count = (seed % 3 == 0) ? 70001 : 1001;
              c.inPlace = (seed & 1) != 0;
              c.root = (int)seed;
              c.seed = seed++;
              EXPECT_TRUE(RunCase(rk, c)) << c.Describe();
            }
          }
        }
        // Arrival patterns with the PAP-aware allreduce: a late host's ranks arrive 3 ms
        // after the others; the plan must be right and must be the PAP one.
        for (const char* pat : {"balanced", "late", "late-k:2", "staircase"}) {
          papPerfArrival a;
          memset(&a, 0, sizeof(a));
          a.skewUs = 3000;
          char err[256];
          ASSERT_EQ(0, papPerfArrivalParse(pat, &a, err, sizeof(err))) << err;
          for (size_t count : {size_t(7), size_t(300001)}) {
            Case c;
            c.count = count;
            c.seed = seed++;
            CaseRunner cr(rk, c);
            papPerfDelayUs(papPerfArrivalDelayUs(&a, rk.rank, n, (long)c.seed));
            bool ok = cr.Issue();
            EXPECT_TRUE(cr.Verify() && ok) << pat << " " << c.Describe();
          }
          papPerfArrivalFree(&a);
        }
        papcclPapStats st;
        memset(&st, 0, sizeof(st));
        EXPECT_EQ(papcclSuccess, papcclCommGetPapStats(rk.comm, &st));
        if (algo == "ac2s") {
          EXPECT_GT(st.papOps, 0u) << "no collective ran the PAP-aware plan over UCX";
        }
        // Finalize first: rank 0 holds the arrival board the others still release.
        EXPECT_EQ(papcclSuccess, papcclCommFinalize(rk.comm)) << papcclGetLastError(rk.comm);
        EXPECT_EQ(papcclSuccess, papcclCommDestroy(rk.comm));
      },
      opt);
  ExpectAllSucceeded(out, "UCX between hosts");
}

INSTANTIATE_TEST_SUITE_P(Hosts, UcxHosts,
                         ::testing::Values(UcxParam{2, 2, "ac2s"}, UcxParam{1, 3, ""}),
                         [](const ::testing::TestParamInfo<UcxParam>& i) {
                           return std::to_string(std::get<1>(i.param)) + "hostsX" +
                                  std::to_string(std::get<0>(i.param)) + "ranks" +
                                  (std::get<2>(i.param).empty() ? "" : "_" + std::get<2>(i.param));
                         });

// A host whose process dies mid-run: the survivors fail with an error within the timeout
// instead of hanging, and can destroy their communicators.
TEST_F(Ucx, DeadPeerFailsCleanly) {
  const int n = 3;
  Options opt;
  opt.makeComm = false;
  opt.destroy = false;
  opt.deadlineS = 120;
  ScopedEnv timeout("PAPCCL_TIMEOUT_S", "20");
  auto out = RunProcesses(
      n,
      [&](Rank& rk) {
        rk.comm = UcxComm(rk, 1);
        ASSERT_NE(nullptr, rk.comm);
        Case c;
        c.count = 100000;
        EXPECT_TRUE(RunCase(rk, c));
        ExpectWarn warned;  // the survivors log why they fail (the peer, then the board)
        if (rk.rank == 1) _exit(0);  // the "host" goes away without a word
        std::vector<float> b(100000, 1.0f);
        double t0 = NowS();
        papcclResult_t r = papcclAllReduce(b.data(), b.data(), b.size(), papcclFloat32, papcclSum,
                                           rk.comm, nullptr);
        EXPECT_NE(papcclSuccess, r);
        EXPECT_LT(NowS() - t0, 60.0) << "the failure took longer than the timeout allows";
        // Rank 0 holds the arrival board: it stays a moment so that the other survivor
        // fails on the dead peer, not on a vanished board.
        if (rk.rank == 0) usleep(500000);
        papcclCommAbort(rk.comm);
      },
      opt);
  for (const auto& o : out) {
    if (o.rank == 1) continue;
    EXPECT_TRUE(o.exited && o.exitCode == 0) << "rank " << o.rank << " exit " << o.exitCode;
  }
}

#endif  // PAPCCL_HAVE_UCX

}  // namespace
}  // namespace papt
