// SPDX-License-Identifier: Apache-2.0
// Growing a communicator (papcclCommGetUniqueId, papcclCommGrow): 2 -> 4 ranks with checked
// allreduces, the PAP state carried over, then split; the loop users want (4 ranks, one
// killed, the survivors shrink, a replacement joins with the id, grow back to 4; twice); bad
// input on every side (each fails every rank, the old comm stays usable); a new rank that
// dies during the grow.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "internal/shim_comm.h"
#include "multirank/harness.h"
#include "multirank/recovery.h"

namespace papt {
namespace {

class Grow : public Test {};

constexpr double kIdWaitS = 120;  // a new rank waits this long for its id

// Ranks [0, oldN) make an oldN-rank comm from rk.id (in *old) and run a few allreduces;
// the others have none.
void MakeOld(Rank& rk, int oldN, papcclComm_t* old) {
  *old = nullptr;
  if (rk.rank >= oldN) return;
  ASSERT_EQ(papcclSuccess, papcclCommInitRank(old, oldN, rk.id, rk.rank));
  CheckedAllReduces(*old, rk.rank, oldN, 9, "before the grow");
}

// The grow of an oldN-rank comm to newN: rank 0 makes the id (slot) and passes it, the other
// old ranks pass NULL, new ranks wait for the id and pass their rank.
papcclResult_t GrowAsNccl(Rank& rk, papcclComm_t old, int newN, SharedIds& ids, int slot,
                          papcclComm_t* grown) {
  papcclUniqueId id;
  if (old == nullptr) {
    if (!ids.Get(slot, &id, kIdWaitS)) {
      ADD_FAILURE() << "rank " << rk.rank << ": no grow id";
      return papcclInternalError;
    }
    return papcclCommGrow(nullptr, newN, &id, rk.rank, grown, nullptr);
  }
  if (rk.rank == 0) {
    papcclResult_t res = papcclCommGetUniqueId(old, &id);
    if (res != papcclSuccess) return res;
    ids.Put(slot, id);
  }
  return papcclCommGrow(old, newN, rk.rank == 0 ? &id : nullptr, -1, grown, nullptr);
}

void GrowTwoToFour(Mode mode) {
  SharedIds ids;
  Options opt;
  opt.makeComm = false;
  RunRanks(
      mode, 4,
      [&](Rank& rk) {
        papcclComm_t old = nullptr, grown = nullptr;
        MakeOld(rk, 2, &old);
        uint64_t sel0 = 0, pred0 = 0;
        if (old) papTestCommPapState(old, &sel0, &pred0);
        ASSERT_EQ(papcclSuccess, GrowAsNccl(rk, old, 4, ids, 0, &grown)) << papcclGetLastError(old);
        ExpectShape(grown, rk.rank, 4, "grown comm");
        // The old ranks' PAP state came along; the new ranks start without.
        uint64_t sel = 0, pred = 0;
        papTestCommPapState(grown, &sel, &pred);
        EXPECT_EQ(sel0, sel) << "rank " << rk.rank << ": selector samples";
        EXPECT_EQ(pred0, pred) << "rank " << rk.rank << ": prediction samples";
        if (old) {
          EXPECT_GT(sel0 + pred0, 0u) << "the parent learnt nothing to carry over";
        }
        CheckedAllReduces(grown, rk.rank, 4, 30, "grown comm");
        if (old) CheckedAllReduces(old, rk.rank, 2, 3, "the parent after the grow");
        papcclComm_t half = nullptr;
        ASSERT_EQ(papcclSuccess, papcclCommSplit(grown, rk.rank % 2, rk.rank, &half, nullptr));
        ExpectShape(half, rk.rank / 2, 2, "split of the grown comm");
        CheckedAllReduces(half, rk.rank / 2, 2, 6, "split of the grown comm");
        EXPECT_EQ(papcclSuccess, papcclCommDestroy(half));
        EXPECT_EQ(papcclSuccess, papcclCommDestroy(grown));
        if (old) {
          EXPECT_EQ(papcclSuccess, papcclCommDestroy(old));
        }
      },
      opt);
}

TEST_F(Grow, TwoToFourProcessesThenSplit) {
  GrowTwoToFour(Mode::kProcesses);
}

TEST_F(Grow, TwoToFourThreadsThenSplit) {
  GrowTwoToFour(Mode::kThreads);
}

// ---- Bad input: every rank fails, the old comm stays usable -------------------------------

// One bad grow of a 2-rank comm to 4 with new ranks 2 and 3: oldCall makes rank r's call on
// its old comm (rank 0 holds id, made on old), newCall a new rank's. Every rank must fail
// with want (new ranks: wantNew), and the old comm must work afterwards.
using OldCall = std::function<papcclResult_t(int r, papcclComm_t old, const papcclUniqueId& id,
                                             papcclComm_t* grown)>;
using NewCall = std::function<papcclResult_t(int r, const papcclUniqueId& id, papcclComm_t*)>;

// A rank that did nothing wrong but met a rendezvous that another rank's error ended: it is
// told so by the root (papcclInvalidUsage, papcclInvalidArgument), or finds the root gone
// (papcclRemoteError), whichever comes first.
// (An int: -1 is no papcclResult_t.)
constexpr int kAnyFailure = -1;

void BadGrow(const std::string& what, const OldCall& oldCall, int want, const NewCall& newCall,
             int wantNew, const std::string& warn) {
  SharedIds ids;
  Options opt;
  opt.makeComm = false;
  RunThreads(
      4,
      [&](Rank& rk) {
        papcclComm_t old = nullptr, grown = nullptr;
        MakeOld(rk, 2, &old);
        papcclUniqueId id;
        if (rk.rank == 0) {
          ASSERT_EQ(papcclSuccess, papcclCommGetUniqueId(old, &id));
          ids.Put(0, id);
        } else {
          ASSERT_TRUE(ids.Get(0, &id, kIdWaitS));
        }
        papcclResult_t res;
        {
          ExpectWarn any;
          res = old ? oldCall(rk.rank, old, id, &grown) : newCall(rk.rank, id, &grown);
          if (old && !warn.empty()) {
            EXPECT_NE(std::string::npos, std::string(papcclGetLastError(old)).find(warn))
                << what << ": rank " << rk.rank << ": " << papcclGetLastError(old);
          }
        }
        fprintf(stderr, "%s: rank %d: %d: %s\n", what.c_str(), rk.rank, (int)res,
                papcclGetLastError(old));
        const int expected = old ? want : wantNew;
        if (expected == kAnyFailure)
          EXPECT_NE(papcclSuccess, res) << what << ": rank " << rk.rank;
        else
          EXPECT_EQ(expected, (int)res) << what << ": rank " << rk.rank;
        EXPECT_EQ(nullptr, grown) << what;
        if (old) {
          CheckedAllReduces(old, rk.rank, 2, 3, what + ": the old comm after it");
          EXPECT_EQ(papcclSuccess, papcclCommDestroy(old));
        }
      },
      opt);
}

// New ranks that join properly.
NewCall JoinFour() {
  return [](int r, const papcclUniqueId& id, papcclComm_t* g) {
    return papcclCommGrow(nullptr, 4, &id, r, g, nullptr);
  };
}

// A well-formed call of an old rank, but for nRanks.
OldCall OldFor(int nRanks0, int nRanks1) {
  return [=](int r, papcclComm_t old, const papcclUniqueId& id, papcclComm_t* g) {
    return papcclCommGrow(old, r == 0 ? nRanks0 : nRanks1, r == 0 ? &id : nullptr, -1, g, nullptr);
  };
}

TEST_F(Grow, MismatchedRankCountsFailEveryRank) {
  BadGrow("old ranks disagree on nRanks", OldFor(4, 5), papcclInvalidArgument, JoinFour(),
          kAnyFailure, "rank 0 passes 4, rank 1 passes 5");
}

TEST_F(Grow, NewRankWithAnotherRankCountFailsEveryRank) {
  BadGrow(
      "a new rank passes nRanks 5", OldFor(4, 4), kAnyFailure,
      [](int r, const papcclUniqueId& id, papcclComm_t* g) {
        return papcclCommGrow(nullptr, r == 3 ? 5 : 4, &id, r, g, nullptr);
      },
      kAnyFailure, "");
}

TEST_F(Grow, NewRankTakingAnOldRankFailsEveryRank) {
  BadGrow(
      "a new rank asks for rank 1", OldFor(4, 4), kAnyFailure,
      [](int r, const papcclUniqueId& id, papcclComm_t* g) {
        return papcclCommGrow(nullptr, 4, &id, r == 3 ? 1 : r, g, nullptr);
      },
      kAnyFailure, "");
}

TEST_F(Grow, TooFewRanksFailEveryRank) {
  BadGrow("nRanks 2 on a 2-rank comm", OldFor(2, 2), papcclInvalidArgument, JoinFour(), kAnyFailure,
          "nRanks 2 must be larger than the communicator's 2 ranks");
}

TEST_F(Grow, NoIdFailsEveryRank) {
  BadGrow(
      "no rank passes the id",
      [](int, papcclComm_t old, const papcclUniqueId&, papcclComm_t* g) {
        return papcclCommGrow(old, 4, nullptr, -1, g, nullptr);
      },
      papcclInvalidArgument, JoinFour(), kAnyFailure, "no rank passes the grow's id");
}

TEST_F(Grow, IdOfAnotherCommFailsEveryRank) {
  // Rank 0 passes an id that a 1-rank comm of its own made: not this comm's.
  BadGrow(
      "an id of another comm",
      [](int r, papcclComm_t old, const papcclUniqueId&, papcclComm_t* g) {
        papcclComm_t other = nullptr;
        papcclUniqueId foreign;
        if (r == 0) {
          EXPECT_EQ(papcclSuccess, papcclCommInitAll(&other, 1, nullptr));
          EXPECT_EQ(papcclSuccess, papcclCommGetUniqueId(other, &foreign));
        }
        papcclResult_t res = papcclCommGrow(old, 4, r == 0 ? &foreign : nullptr, -1, g, nullptr);
        if (other) {
          // The foreign id is still pending on its comm: a second one is refused.
          papcclUniqueId again;
          EXPECT_EQ(papcclInvalidUsage, papcclCommGetUniqueId(other, &again));
          EXPECT_EQ(papcclSuccess, papcclCommDestroy(other));
        }
        return res;
      },
      papcclInvalidArgument, JoinFour(), kAnyFailure, "is not this communicator's");
}

TEST_F(Grow, RevokedCommFailsEveryRank) {
  BadGrow(
      "a revoked comm",
      [](int r, papcclComm_t old, const papcclUniqueId& id, papcclComm_t* g) {
        // Rank 1 has revoked its comm; rank 0 has not.
        papcclComm_t dup = nullptr;
        EXPECT_EQ(papcclSuccess,
                  papcclCommShrink(old, nullptr, 0, &dup, nullptr, PAPCCL_SHRINK_DEFAULT));
        papcclUniqueId dupId;
        if (r == 1) {
          EXPECT_EQ(papcclSuccess, papcclCommRevoke(dup, PAPCCL_REVOKE_DEFAULT));
          EXPECT_EQ(papcclInvalidUsage, papcclCommGetUniqueId(dup, &dupId));
        }
        papcclResult_t res = papcclCommGrow(dup, 4, r == 0 ? &id : nullptr, -1, g, nullptr);
        EXPECT_EQ(papcclSuccess, papcclCommDestroy(dup));
        return res;
      },
      papcclInvalidUsage, JoinFour(), kAnyFailure, "");
}

TEST_F(Grow, BadArgumentsOfOneOldRankFailEveryRank) {
  BadGrow(
      "rank 1 passes rank 1 instead of -1",
      [](int r, papcclComm_t old, const papcclUniqueId& id, papcclComm_t* g) {
        return papcclCommGrow(old, 4, r == 0 ? &id : nullptr, r == 1 ? 1 : -1, g, nullptr);
      },
      papcclInvalidArgument, JoinFour(), kAnyFailure, "");
}

// Calls that fail alone: NULL arguments, ids of the wrong kind, a second id.
TEST_F(Grow, ArgumentChecks) {
  papcclComm_t comms[2] = {nullptr, nullptr};
  ASSERT_EQ(papcclSuccess, papcclCommInitAll(comms, 2, nullptr));
  papcclUniqueId id, plain;
  papcclComm_t g = reinterpret_cast<papcclComm_t>(0x1);
  {
    // An init's id, without a root thread that would wait for ranks until its timeout.
    ScopedEnv fixed("PAPCCL_COMM_ID", "127.0.0.1:9");
    ASSERT_EQ(papcclSuccess, papcclGetUniqueId(&plain));
  }
  {
    ExpectWarn warn;
    EXPECT_EQ(papcclInvalidArgument, papcclCommGetUniqueId(comms[0], nullptr));
    EXPECT_NE(std::string::npos,
              std::string(papcclGetLastError(comms[0])).find("uniqueId is NULL"));
    EXPECT_EQ(papcclInvalidArgument, papcclCommGetUniqueId(nullptr, &id));
    EXPECT_EQ(papcclSuccess, papcclCommGetUniqueId(comms[0], &id));
    EXPECT_EQ(papcclInvalidUsage, papcclCommGetUniqueId(comms[0], &id));
    EXPECT_NE(std::string::npos, std::string(papcclGetLastError(comms[0])).find("last id"));
    // New ranks: NULL id, NULL newcomm, a plain id, rank 0, a rank out of range, 1 rank.
    EXPECT_EQ(papcclInvalidArgument, papcclCommGrow(nullptr, 4, nullptr, 2, &g, nullptr));
    EXPECT_EQ(nullptr, g);
    EXPECT_EQ(papcclInvalidArgument, papcclCommGrow(nullptr, 4, &id, 2, nullptr, nullptr));
    EXPECT_EQ(papcclInvalidArgument, papcclCommGrow(nullptr, 4, &plain, 2, &g, nullptr));
    EXPECT_NE(std::string::npos,
              std::string(papcclGetLastError(nullptr)).find("made by papcclGetUniqueId"));
    EXPECT_EQ(papcclInvalidArgument, papcclCommGrow(nullptr, 4, &id, 0, &g, nullptr));
    EXPECT_EQ(papcclInvalidArgument, papcclCommGrow(nullptr, 4, &id, 4, &g, nullptr));
    EXPECT_EQ(papcclInvalidArgument, papcclCommGrow(nullptr, 0, &id, 0, &g, nullptr));
    papcclConfig_t bad = PAPCCL_CONFIG_INITIALIZER;
    bad.magic = 0;
    EXPECT_EQ(papcclInvalidArgument, papcclCommGrow(nullptr, 4, &id, 2, &g, &bad));
  }
  // The bad-argument calls of old ranks are in BadGrow's tests (they fail every rank).
  // The id of comms[0] is still pending: it is called off by a grow that fails on both.
  std::thread t1([&] {
    ExpectWarn any;
    papcclComm_t g1 = nullptr;
    EXPECT_EQ(papcclInvalidArgument, papcclCommGrow(comms[1], 2, nullptr, -1, &g1, nullptr));
  });
  {
    ExpectWarn any;
    papcclComm_t g0 = nullptr;
    EXPECT_EQ(papcclInvalidArgument, papcclCommGrow(comms[0], 2, &id, -1, &g0, nullptr));
  }
  t1.join();
  // Used up: a new id may be made now.
  EXPECT_EQ(papcclSuccess, papcclCommGetUniqueId(comms[0], &id));
  EXPECT_EQ(papcclSuccess, papcclCommDestroy(comms[0]));
  EXPECT_EQ(papcclSuccess, papcclCommDestroy(comms[1]));
}

// ---- A new rank that dies during the grow --------------------------------------------------

// New rank 3 dies (PAPCCL_FAULT, kill at point) in the grow of a 2-rank comm to 4: every
// other rank's grow fails (its root or ring sees the death), the old comm works, and a second
// grow, to 3 with the other new rank, succeeds.
void NewRankDiesDuringGrow(const char* point) {
  ScopedEnv timeout("PAPCCL_TIMEOUT_S", "20");  // the bound if the death went unseen
  ScopedEnv fault("PAPCCL_FAULT", std::string("kill@") + point + ":rank=3");
  SharedIds ids;
  Options opt;
  opt.makeComm = false;
  auto out = RunProcesses(
      4,
      [&](Rank& rk) {
        papcclComm_t old = nullptr, grown = nullptr;
        MakeOld(rk, 2, &old);
        papcclResult_t res;
        double took;
        {
          ExpectWarn any;  // the death, seen by the root or the ring
          const double t0 = NowS();
          res = GrowAsNccl(rk, old, 4, ids, 0, &grown);  // rank 3 does not return
          took = NowS() - t0;
        }
        fprintf(stderr, "new rank dead at %s: rank %d: the grow failed (%d) after %.3f s: %s\n",
                point, rk.rank, (int)res, took, papcclGetLastError(old));
        EXPECT_NE(papcclSuccess, res) << "rank " << rk.rank;
        EXPECT_EQ(nullptr, grown);
        if (old) CheckedAllReduces(old, rk.rank, 2, 6, "the old comm after the failed grow");
        ASSERT_EQ(papcclSuccess, GrowAsNccl(rk, old, 3, ids, 1, &grown))
            << "the second grow: " << papcclGetLastError(old);
        CheckedAllReduces(grown, rk.rank, 3, 6, "the second grow");
        EXPECT_EQ(papcclSuccess, papcclCommDestroy(grown));
        if (old) {
          EXPECT_EQ(papcclSuccess, papcclCommDestroy(old));
        }
      },
      opt);
  ExpectKilledAndSurvivors(out, 3);
}

TEST_F(Grow, NewRankDeadWithItsHelloAtTheRootFailsEveryRank) {
  NewRankDiesDuringGrow("hello");
}

TEST_F(Grow, NewRankDeadAfterTheRootFailsEveryRank) {
  NewRankDiesDuringGrow("bootstrap");
}

}  // namespace

// ---- The loop users want ------------------------------------------------------------------

void RunGrowLoop(const std::string& what, const std::function<void(Rank&)>& prepare) {
  constexpr int n = 4, rounds = 2, timeoutS = 60;
  // The rank of the running comm killed in each round: process 1, then process 3 (rank 2
  // once process 1 is gone and the first replacement, process 4, is rank 3).
  const int victims[rounds] = {1, 2};
  ScopedEnv timeout("PAPCCL_TIMEOUT_S", std::to_string(timeoutS));
  SharedIds ids;
  SharedTime death[rounds];
  Options opt;
  opt.makeComm = false;
  opt.destroy = false;
  opt.deadlineS = 240;
  auto out = RunProcesses(
      n + rounds,
      [&](Rank& rk) {
        prepare(rk);
        if (::testing::Test::HasFailure()) return;
        papcclComm_t cur = nullptr;
        int me = rk.rank, first = 0;
        if (rk.rank < n) {
          ASSERT_EQ(papcclSuccess, papcclCommInitRank(&cur, n, rk.id, rk.rank))
              << papcclGetLastError(nullptr);
        } else {
          // A replacement: it knows nothing but the id, which a survivor hands it.
          first = rk.rank - n + 1;
          me = n - 1;
          papcclUniqueId id;
          ASSERT_TRUE(ids.Get(first - 1, &id, 180)) << "replacement " << rk.rank << ": no id";
          ASSERT_EQ(papcclSuccess, papcclCommGrow(nullptr, n, &id, me, &cur, nullptr))
              << papcclGetLastError(nullptr);
        }
        for (int round = first;; round++) {
          const std::string at = what + " round " + std::to_string(round);
          ExpectShape(cur, me, n, at);
          CheckedAllReduces(cur, me, n, 12, at);
          if (round == rounds || ::testing::Test::HasFailure()) break;
          const int victim = victims[round];
          if (me == victim) {
            death[round].Set(NowS());
            raise(SIGKILL);
          }
          ExpectWarn any;  // the death, the aborted parent
          papcclResult_t res = papcclSuccess;
          double startS = 0;
          const double callS = CallUntilFailure(cur, 4096, 2 * timeoutS, &res, &startS);
          const double seenS = startS + callS - std::max(startS, death[round].Get());
          ExpectDeadRankSeen(res, seenS, papcclGetLastError(cur), victim, at);
          papcclComm_t shrunk = nullptr, grown = nullptr;
          int dead = victim;
          double t0 = NowS();
          ASSERT_EQ(papcclSuccess,
                    papcclCommShrink(cur, &dead, 1, &shrunk, nullptr, PAPCCL_SHRINK_ABORT))
              << at << ": " << papcclGetLastError(cur);
          const double shrinkS = NowS() - t0;
          const int mine = me < victim ? me : me - 1;
          papcclUniqueId id;
          t0 = NowS();
          if (mine == 0) {
            ASSERT_EQ(papcclSuccess, papcclCommGetUniqueId(shrunk, &id));
            ids.Put(round, id);
          }
          ASSERT_EQ(papcclSuccess,
                    papcclCommGrow(shrunk, n, mine == 0 ? &id : nullptr, -1, &grown, nullptr))
              << at << ": " << papcclGetLastError(shrunk);
          const double growS = NowS() - t0;
          fprintf(stderr,
                  "%s: rank %d: death seen in %.1f ms, shrink %.1f ms, grow back to %d %.1f "
                  "ms\n",
                  at.c_str(), me, seenS * 1e3, shrinkS * 1e3, n, growS * 1e3);
          EXPECT_EQ(papcclSuccess, papcclCommDestroy(shrunk));
          EXPECT_EQ(papcclSuccess, papcclCommDestroy(cur));
          cur = grown;
          me = mine;
        }
        if (cur) {
          EXPECT_EQ(papcclSuccess, papcclCommDestroy(cur));
        }
      },
      opt);
  for (const auto& o : out) {
    if (o.rank == 1 || o.rank == 3) {
      EXPECT_EQ(SIGKILL, o.signal) << what << ": process " << o.rank << " was to be killed";
    } else {
      EXPECT_TRUE(o.exited && o.exitCode == 0)
          << what << ": process " << o.rank << " exit " << o.exitCode << " signal " << o.signal;
    }
  }
}

namespace {

class GrowLoop : public Test {};

// 4 ranks on this host (shm): one is killed, the survivors shrink and go on, a replacement
// joins with the id and the survivors grow back to 4; twice.
TEST_F(GrowLoop, KillShrinkGrowTwiceShm) {
  RunGrowLoop("shm", [](Rank&) {});
}

}  // namespace
}  // namespace papt
