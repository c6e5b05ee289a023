// SPDX-License-Identifier: Apache-2.0
// Per-collective configuration (papccl<Coll>Config, NCCL 2.32's nccl<Coll>Config): the plan a
// config asks for is the plan that runs (papcclCommGetPapStats names it), results stay right,
// and a bad config fails on the calling rank before anything is sent.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "multirank/harness.h"

namespace papt {
namespace {

class CollConfig : public Test {};

papcclCollConfig_t Config(int algo) {
  papcclCollConfig_t c = PAPCCL_COLLCONFIG_INITIALIZER;
  c.algo = algo;
  return c;
}

int LastAlgo(papcclComm_t comm) {
  papcclPapStats st;
  EXPECT_EQ(papcclSuccess, papcclCommGetPapStats(comm, &st));
  return st.lastAlgo;
}

// rank r's element i: distinct for every rank and index, exact in float sums.
float In(int r, size_t i) {
  return (float)((r + 1) * 1000 + (int)(i % 997));
}

// An allreduce whose size papccl would run as rhd or flat by itself runs the asked plan, and
// each plan's sum is exact, at 3 and 4 ranks (the PAP plans need 3 or more).
TEST_F(CollConfig, AllReduceRunsTheAskedPlan) {
  const int algos[] = {papcclPapAlgoRing, papcclPapAlgoRhd, papcclPapAlgoAc2s, papcclPapAlgoChain,
                       papcclPapAlgoSmall};
  for (int n : {3, 4}) {
    RunRanks(Mode::kThreads, n, [&](Rank& rk) {
      for (size_t count : {(size_t)6, (size_t)5000}) {
        for (int algo : algos) {
          std::vector<float> in(count), out(count, -1);
          for (size_t i = 0; i < count; i++)
            in[i] = In(rk.rank, i);
          papcclCollConfig_t c = Config(algo);
          ASSERT_EQ(papcclSuccess,
                    papcclAllReduceConfig(in.data(), out.data(), count, papcclFloat32, papcclSum,
                                          rk.comm, nullptr, &c))
              << papcclGetLastError(rk.comm);
          EXPECT_EQ(algo, LastAlgo(rk.comm)) << "n=" << n << " count=" << count;
          for (size_t i = 0; i < count; i++) {
            float want = 0;
            for (int r = 0; r < n; r++)
              want += In(r, i);
            ASSERT_EQ(want, out[i]) << "algo " << algo << " count " << count << " element " << i;
          }
        }
        // Without a config (NULL) papccl chooses again: a 6-element sum runs flat.
        std::vector<float> v(count, 1.0f);
        ASSERT_EQ(papcclSuccess, papcclAllReduceConfig(v.data(), v.data(), count, papcclFloat32,
                                                       papcclSum, rk.comm, nullptr, nullptr));
        EXPECT_EQ((float)n, v[0]);
        if (count == 6) {
          EXPECT_EQ(papcclPapAlgoFlat, LastAlgo(rk.comm));
        }
      }
    });
  }
}

// Broadcast, Reduce, AllGather and ReduceScatter take Ring (the classic plan) or Pap (the PAP
// plan); AlltoAll, Gather and Scatter only the default; every result checked.
TEST_F(CollConfig, OtherCollectives) {
  RunRanks(Mode::kThreads, 3, [&](Rank& rk) {
    const int n = rk.nranks;
    const size_t count = 1000;
    for (int algo : {papcclPapAlgoRing, papcclPapAlgoPap, papcclPapAlgoNone}) {
      papcclCollConfig_t c = Config(algo);
      int pap = algo == papcclPapAlgoPap;
      std::vector<float> in(count * n), out(count * n, -1);
      for (size_t i = 0; i < in.size(); i++)
        in[i] = In(rk.rank, i);
      ASSERT_EQ(papcclSuccess, papcclBroadcastConfig(in.data(), out.data(), count, papcclFloat32, 1,
                                                     rk.comm, nullptr, &c));
      if (algo != papcclPapAlgoNone) {
        EXPECT_EQ(pap, LastAlgo(rk.comm) == papcclPapAlgoPap);
      }
      for (size_t i = 0; i < count; i++)
        ASSERT_EQ(In(1, i), out[i]) << "broadcast algo " << algo;
      ASSERT_EQ(papcclSuccess, papcclAllGatherConfig(in.data(), out.data(), count, papcclFloat32,
                                                     rk.comm, nullptr, &c));
      if (algo != papcclPapAlgoNone) {
        EXPECT_EQ(pap, LastAlgo(rk.comm) == papcclPapAlgoPap);
      }
      for (int r = 0; r < n; r++)
        for (size_t i = 0; i < count; i++)
          ASSERT_EQ(In(r, i), out[r * count + i]) << "allgather algo " << algo;
      ASSERT_EQ(papcclSuccess,
                papcclReduceScatterConfig(in.data(), out.data(), count, papcclFloat32, papcclSum,
                                          rk.comm, nullptr, &c));
      for (size_t i = 0; i < count; i++) {
        float want = 0;
        for (int r = 0; r < n; r++)
          want += In(r, rk.rank * count + i);
        ASSERT_EQ(want, out[i]) << "reducescatter algo " << algo;
      }
      ASSERT_EQ(papcclSuccess, papcclReduceConfig(in.data(), out.data(), count, papcclFloat32,
                                                  papcclMax, 0, rk.comm, nullptr, &c));
      if (rk.rank == 0) {
        for (size_t i = 0; i < count; i++)
          ASSERT_EQ(In(n - 1, i), out[i]) << "reduce max algo " << algo;
      }
    }
    papcclCollConfig_t none = Config(papcclPapAlgoNone);
    std::vector<float> in(4 * n), out(4 * n, -1);
    for (size_t i = 0; i < in.size(); i++)
      in[i] = In(rk.rank, i);
    ASSERT_EQ(papcclSuccess, papcclAlltoAllConfig(in.data(), out.data(), 4, papcclFloat32, rk.comm,
                                                  nullptr, &none));
    for (int r = 0; r < n; r++)
      ASSERT_EQ(In(r, rk.rank * 4), out[r * 4]);
    ASSERT_EQ(papcclSuccess, papcclGatherConfig(in.data(), out.data(), 4, papcclFloat32, 2, rk.comm,
                                                nullptr, &none));
    if (rk.rank == 2) {
      for (int r = 0; r < n; r++)
        ASSERT_EQ(In(r, 0), out[r * 4]);
    }
    ASSERT_EQ(papcclSuccess, papcclScatterConfig(in.data(), out.data(), 4, papcclFloat32, 0,
                                                 rk.comm, nullptr, &none));
    ASSERT_EQ(In(0, rk.rank * 4), out[0]);
  });
}

// Each bad config fails with papcclInvalidArgument on every rank, naming what is wrong, and
// sends nothing: the comm goes on with the next collective.
TEST_F(CollConfig, BadConfigFailsBeforeSending) {
  ExpectWarn warns({"config"});
  RunRanks(Mode::kThreads, 2, [&](Rank& rk) {
    float v = 1;
    papcclCollConfig_t bad = Config(papcclPapAlgoRing);
    bad.magic = 0x1234;
    EXPECT_EQ(papcclInvalidArgument,
              papcclAllReduceConfig(&v, &v, 1, papcclFloat32, papcclSum, rk.comm, nullptr, &bad));
    EXPECT_NE(std::string(papcclGetLastError(rk.comm)).find("PAPCCL_COLLCONFIG_INITIALIZER"),
              std::string::npos)
        << papcclGetLastError(rk.comm);
    bad = Config(papcclPapAlgoRing);
    bad.size = 8;
    EXPECT_EQ(papcclInvalidArgument,
              papcclAllReduceConfig(&v, &v, 1, papcclFloat32, papcclSum, rk.comm, nullptr, &bad));
    for (int algo :
         {(int)papcclPapAlgoAc2sDet, (int)papcclPapAlgoFlat, (int)papcclPapAlgoOther, 99, -1}) {
      papcclCollConfig_t c = Config(algo);
      EXPECT_EQ(papcclInvalidArgument,
                papcclAllReduceConfig(&v, &v, 1, papcclFloat32, papcclSum, rk.comm, nullptr, &c))
          << "algo " << algo;
      EXPECT_NE(std::string(papcclGetLastError(rk.comm)).find("config->algo"), std::string::npos)
          << papcclGetLastError(rk.comm);
    }
    papcclCollConfig_t ring = Config(papcclPapAlgoRing);
    EXPECT_EQ(papcclInvalidArgument,
              papcclGatherConfig(&v, &v, 1, papcclFloat32, 0, rk.comm, nullptr, &ring));
    papcclCollConfig_t rhd = Config(papcclPapAlgoRhd);
    EXPECT_EQ(papcclInvalidArgument,
              papcclBroadcastConfig(&v, &v, 1, papcclFloat32, 0, rk.comm, nullptr, &rhd));
    float w[2] = {0, 0};
    EXPECT_EQ(papcclInvalidArgument,
              papcclAlltoAllConfig(w, w, 1, papcclFloat32, rk.comm, nullptr, &ring));
    ASSERT_EQ(papcclSuccess,
              papcclAllReduce(&v, &v, 1, papcclFloat32, papcclSum, rk.comm, nullptr));
    EXPECT_EQ(2.0f, v);
  });
  EXPECT_GE(warns.Count(), 18);
}

}  // namespace
}  // namespace papt
