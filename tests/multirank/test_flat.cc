// SPDX-License-Identifier: Apache-2.0
// Flat small allreduces (src/arrival/flat.c): results for every type and op around the size
// limit, the statistics they record, mismatched calls, a dead or absent peer, abort, the
// arrival board's generations when flat and board collectives interleave, and the switch.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "multirank/harness.h"
#include "perf/arrival.h"

namespace papt {
namespace {

class Flat : public Test {};

constexpr size_t kFlatMax = 4096;  // PAPCCL_FLAT_MAX_BYTES's default

papcclPapStats Stats(papcclComm_t comm) {
  papcclPapStats st;
  memset(&st, 0, sizeof(st));
  EXPECT_EQ(papcclSuccess, papcclCommGetPapStats(comm, &st));
  return st;
}

// Every type and op, in and out of place, at sizes that share the header's cache line, span
// several lines, fill the line exactly and pass it by one element (which takes the plans);
// the last op's algorithm says which path ran.
TEST_F(Flat, EveryTypeAndOpAroundTheLimit) {
  for (Mode mode : {Mode::kThreads, Mode::kProcesses}) {
    for (int n : {2, 5}) {
      RunRanks(mode, n, [&](Rank& rk) {
        int cell = 0;
        for (papcclDataType_t t : kAllTypes) {
          const size_t limit = kFlatMax / TypeSize(t);
          for (size_t count : {(size_t)1, (size_t)5, (size_t)67, limit, limit + 1}) {
            for (Op op : kAllOps) {
              Case c;
              c.type = t;
              c.op = op;
              c.count = count;
              c.inPlace = (cell++ % 2) == 1;
              c.seed = (uint32_t)cell;
              ASSERT_TRUE(RunCase(rk, c)) << c.Describe() << " " << ModeName(mode);
              papcclPapStats st = Stats(rk.comm);
              if (count <= limit)
                ASSERT_EQ(papcclPapAlgoFlat, st.lastAlgo) << c.Describe();
              else
                ASSERT_NE(papcclPapAlgoFlat, st.lastAlgo) << c.Describe();
            }
          }
        }
      });
    }
  }
}

// Rank 1 comes 20 ms late to each of 6 flat allreduces: the statistics name it, the skew and
// the early ranks' time in the call show the wait, and the tail is far shorter than the skew.
TEST_F(Flat, StatsNameTheLateRank) {
  const int n = 3;
  RunRanks(Mode::kProcesses, n, [&](Rank& rk) {
    for (int i = 0; i < 6; i++) {
      papPerfDelayUs(rk.rank == 1 ? 20000 : 0);
      double v = rk.rank + 1;
      ASSERT_EQ(papcclSuccess,
                papcclAllReduce(&v, &v, 1, papcclFloat64, papcclSum, rk.comm, nullptr));
      ASSERT_EQ(6.0, v);
    }
    papcclPapStats st = Stats(rk.comm);
    EXPECT_EQ(papcclPapAlgoFlat, st.lastAlgo);
    EXPECT_STREQ("flat", st.lastAlgoName);
    EXPECT_EQ(6u, st.ops);
    EXPECT_EQ(6u, st.completeOps);
    EXPECT_EQ(0u, st.papOps);
    EXPECT_EQ(1, st.lastLateRank);
    EXPECT_EQ(1, st.lastOrder[n - 1]);
    EXPECT_EQ(-1, st.lastOrder[n]);
    EXPECT_EQ(6u, st.lateCount[1]);
    EXPECT_GT(st.lastSkewUs, 15000);
    EXPECT_GT(st.lastLatenessUs[1], 15000);
    EXPECT_LT(st.lastTailUs, st.lastSkewUs);
    if (rk.rank != 1) {
      EXPECT_GT(st.lastTimeInCollUs, 15000);
      // Learnt from ops 3-5 (ops 1 and 2 have other contexts: fewer calls before them):
      // 20 ms, weighted 1/4 per op, so about 1 - 0.75^3 of it.
      EXPECT_GT(st.lastExpectedWaitUs, 8000);
      EXPECT_LT(st.lastExpectedWaitUs, 40000);
    } else {
      EXPECT_EQ(0, st.lastExpectedWaitUs);  // the late rank waits for no one
    }
  });
}

// The prediction is per place in the call sequence: in a repeating step of a large
// allreduce that waits for a late rank and a small one that does not, each learns its own.
TEST_F(Flat, PredictionsFollowThePlaceInTheSequence) {
  const int n = 3;
  RunRanks(Mode::kProcesses, n, [&](Rank& rk) {
    std::vector<float> big(1 << 16, 1.0f);
    double bigExpect = 0, smallExpect = 0;
    for (int step = 0; step < 8; step++) {
      papPerfDelayUs(rk.rank == 2 ? 10000 : 0);
      ASSERT_EQ(papcclSuccess, papcclAllReduce(big.data(), big.data(), big.size(), papcclFloat32,
                                               papcclSum, rk.comm, nullptr));
      bigExpect = Stats(rk.comm).lastExpectedWaitUs;
      float loss = 1;
      ASSERT_EQ(papcclSuccess,
                papcclAllReduce(&loss, &loss, 1, papcclFloat32, papcclSum, rk.comm, nullptr));
      ASSERT_EQ(3.0f, loss);
      smallExpect = Stats(rk.comm).lastExpectedWaitUs;
    }
    if (rk.rank != 2) {
      EXPECT_GT(bigExpect, 6000) << "rank " << rk.rank;
    } else {
      EXPECT_EQ(0, bigExpect);
    }
    EXPECT_LT(smallExpect, 5000) << "rank " << rk.rank;
  });
}

// Two ranks make different calls within the flat size: both fail, naming both calls.
TEST_F(Flat, MismatchedCallsFailOnEveryRank) {
  Options opt;
  opt.destroy = false;
  RunRanks(
      Mode::kProcesses, 2,
      [&](Rank& rk) {
        ExpectWarn w({"every rank must make the same call"});
        std::vector<float> buf(rk.rank == 0 ? 10 : 20, 1.0f);
        EXPECT_EQ(papcclInvalidUsage, papcclAllReduce(buf.data(), buf.data(), buf.size(),
                                                      papcclFloat32, papcclSum, rk.comm, nullptr));
        EXPECT_EQ(1, w.Count());
        EXPECT_TRUE(w.Saw("count 10")) << papcclGetLastError(rk.comm);
        EXPECT_TRUE(w.Saw("count 20")) << papcclGetLastError(rk.comm);
        papcclResult_t async = papcclSuccess;
        EXPECT_EQ(papcclSuccess, papcclCommGetAsyncError(rk.comm, &async));
        EXPECT_EQ(papcclInvalidUsage, async);
        EXPECT_EQ(papcclSuccess, papcclCommAbort(rk.comm));
      },
      opt);
}

// A rank that exits before it arrives is seen by the health check (every 100 ms), long
// before PAPCCL_TIMEOUT_S; an alive rank that never calls makes the others time out.
TEST_F(Flat, DeadAndAbsentPeers) {
  ScopedEnv timeout("PAPCCL_TIMEOUT_S", "3");
  Options opt;
  opt.destroy = false;
  opt.deadlineS = 60;
  auto out = RunProcesses(
      3,
      [&](Rank& rk) {
        if (rk.rank == 2) _exit(0);  // gone without a word
        ExpectWarn w({"exited before it arrived"});
        float v = 1;
        double t0 = NowS();
        EXPECT_EQ(papcclRemoteError,
                  papcclAllReduce(&v, &v, 1, papcclFloat32, papcclSum, rk.comm, nullptr));
        EXPECT_LT(NowS() - t0, 2.5) << "a dead peer must be seen before the timeout";
        EXPECT_TRUE(w.Saw("rank 2")) << papcclGetLastError(rk.comm);
        EXPECT_EQ(papcclSuccess, papcclCommAbort(rk.comm));
      },
      opt);
  ASSERT_EQ(3u, out.size());
  for (int r = 0; r < 3; r++)
    EXPECT_TRUE(out[r].exited && out[r].exitCode == 0) << "rank " << r;
  RunRanks(
      Mode::kProcesses, 3,
      [&](Rank& rk) {
        if (rk.rank == 2) {
          std::this_thread::sleep_for(std::chrono::seconds(5));
        } else {
          ExpectWarn w({"timed out"});
          float v = 1;
          double t0 = NowS();
          EXPECT_EQ(papcclRemoteError,
                    papcclAllReduce(&v, &v, 1, papcclFloat32, papcclSum, rk.comm, nullptr));
          EXPECT_GE(NowS() - t0, 2.5);
          EXPECT_TRUE(w.Saw("flat")) << papcclGetLastError(rk.comm);
        }
        EXPECT_EQ(papcclSuccess, papcclCommAbort(rk.comm));
      },
      opt);
}

// Abort from another thread unblocks ranks asleep in a flat allreduce.
TEST_F(Flat, AbortUnblocksTheWait) {
  const int n = 3;
  std::vector<papcclComm_t> comms(n, nullptr);
  ASSERT_EQ(papcclSuccess, papcclCommInitAll(comms.data(), n, nullptr));
  ExpectWarn any;
  std::vector<papcclResult_t> res(2, papcclSuccess);
  std::vector<double> back(2, 0);
  std::vector<std::thread> waiters;
  for (int r = 0; r < 2; r++) {
    waiters.emplace_back([&, r] {
      float v = 1;
      res[r] = papcclAllReduce(&v, &v, 1, papcclFloat32, papcclSum, comms[r], nullptr);
      back[r] = NowS();
    });
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  const double abortAt = NowS();
  for (int r = 0; r < n; r++)
    EXPECT_EQ(papcclSuccess, papcclCommAbort(comms[r]));
  for (auto& t : waiters)
    t.join();
  for (int r = 0; r < 2; r++) {
    EXPECT_NE(papcclSuccess, res[r]);
    EXPECT_LT(back[r] - abortAt, 2.0) << "rank " << r << " was not unblocked by the abort";
  }
}

// Flat collectives take sequence numbers but leave the board alone, so a board slot's
// previous generation may be several behind. Runs of 1 to 9 flat ops between board ops
// (allreduce above the limit, broadcast), with a rotating late rank, all stay correct.
TEST_F(Flat, BoardCollectivesBetweenRunsOfFlatOnes) {
  const int n = 3;
  RunRanks(Mode::kProcesses, n, [&](Rank& rk) {
    std::vector<float> big(4096, 1.0f);
    for (int round = 0; round < 12; round++) {
      const int flats = 1 + (round * 5) % 9;
      for (int i = 0; i < flats; i++) {
        if (rk.rank == (round + i) % n) papPerfDelayUs(300);
        int32_t v = rk.rank + i;
        ASSERT_EQ(papcclSuccess,
                  papcclAllReduce(&v, &v, 1, papcclInt32, papcclSum, rk.comm, nullptr));
        ASSERT_EQ(3 + 3 * i, v) << "round " << round;
      }
      ASSERT_EQ(papcclSuccess, papcclAllReduce(big.data(), big.data(), big.size(), papcclFloat32,
                                               papcclSum, rk.comm, nullptr));
      ASSERT_EQ(std::pow(3.0f, (float)(round + 1)), big[4095]) << "round " << round;
      papcclPapStats st = Stats(rk.comm);
      ASSERT_NE(papcclPapAlgoFlat, st.lastAlgo);
      int32_t b = rk.rank == 1 ? round : -1;
      ASSERT_EQ(papcclSuccess, papcclBroadcast(&b, &b, 1, papcclInt32, 1, rk.comm, nullptr));
      ASSERT_EQ(round, b);
    }
  });
}

// PAPCCL_FLAT_MAX_BYTES=0 turns the path off; PAPCCL_ALGO keeps its plan.
TEST_F(Flat, OffSwitchAndForcedAlgorithm) {
  for (const char* var : {"PAPCCL_FLAT_MAX_BYTES", "PAPCCL_ALGO"}) {
    ScopedEnv env(var, strcmp(var, "PAPCCL_ALGO") == 0 ? "rhd" : "0");
    RunRanks(Mode::kThreads, 3, [&](Rank& rk) {
      float v = 2;
      ASSERT_EQ(papcclSuccess,
                papcclAllReduce(&v, &v, 1, papcclFloat32, papcclSum, rk.comm, nullptr));
      EXPECT_EQ(6.0f, v);
      EXPECT_EQ(papcclPapAlgoRhd, Stats(rk.comm).lastAlgo) << var;
    });
  }
}

// Every op's path is counted where it was decided (papPathDecide): flat, board, local (a
// collective without an arrival-aware plan, a group of two collectives), p2p; the last op's
// path and reason are the statistics' last.
TEST_F(Flat, StatsCountEachPath) {
  const int n = 4;
  RunRanks(Mode::kThreads, n, [&](Rank& rk) {
    std::vector<float> big(16384, 1.0f), all(4 * n, 1.0f), out(4 * n);
    float v = 1;
    for (int i = 0; i < 3; i++)
      ASSERT_EQ(papcclSuccess,
                papcclAllReduce(&v, &v, 1, papcclFloat32, papcclSum, rk.comm, nullptr));
    for (int i = 0; i < 2; i++)
      ASSERT_EQ(papcclSuccess, papcclAllReduce(big.data(), big.data(), big.size(), papcclFloat32,
                                               papcclSum, rk.comm, nullptr));
    ASSERT_EQ(papcclSuccess,
              papcclAlltoAll(all.data(), out.data(), 4, papcclFloat32, rk.comm, nullptr));
    ASSERT_EQ(papcclSuccess, papcclGroupStart());
    ASSERT_EQ(papcclSuccess,
              papcclAllReduce(&v, &v, 1, papcclFloat32, papcclSum, rk.comm, nullptr));
    ASSERT_EQ(papcclSuccess, papcclAllReduce(big.data(), big.data(), big.size(), papcclFloat32,
                                             papcclSum, rk.comm, nullptr));
    ASSERT_EQ(papcclSuccess, papcclGroupEnd());
    ASSERT_EQ(papcclSuccess, papcclGroupStart());
    ASSERT_EQ(papcclSuccess, papcclSend(&v, 1, papcclFloat32, (rk.rank + 1) % n, rk.comm, nullptr));
    ASSERT_EQ(papcclSuccess,
              papcclRecv(&out[0], 1, papcclFloat32, (rk.rank + n - 1) % n, rk.comm, nullptr));
    ASSERT_EQ(papcclSuccess, papcclGroupEnd());
    papcclPapStats st = Stats(rk.comm);
    EXPECT_EQ(papcclPathP2p, st.lastPath);
    EXPECT_STREQ("p2p: send or receive, no arrival", st.lastPathWhy);
    ASSERT_EQ(papcclSuccess,
              papcclAllReduce(&v, &v, 1, papcclFloat32, papcclSum, rk.comm, nullptr));
    EXPECT_EQ(std::pow(4.0f, 5.0f), v);
    st = Stats(rk.comm);
    EXPECT_EQ(4u, st.pathOps[papcclPathFlat]);
    EXPECT_EQ(2u, st.pathOps[papcclPathBoard]);
    EXPECT_EQ(3u, st.pathOps[papcclPathLocal]);
    EXPECT_EQ(2u, st.pathOps[papcclPathP2p]);
    EXPECT_EQ(0u, st.pathOps[papcclPathHier] + st.pathOps[papcclPathArena]);
    EXPECT_EQ(papcclPathFlat, st.lastPath);
    EXPECT_STREQ("flat: allreduce <= PAPCCL_FLAT_MAX_BYTES alone on one host", st.lastPathWhy);
    EXPECT_EQ(papcclPapAlgoFlat, st.lastAlgo);
  });
}

}  // namespace
}  // namespace papt
