// SPDX-License-Identifier: Apache-2.0
// PAPCCL_FAULT: a rank killed, stalled or delayed at bootstrap, in the middle of a plan's
// chunks and at the PAP commit. Every survivor must return an error within the timeout and
// be able to end its communicator; after that, a new communicator on the same ranks works.
// A delay alone must change nothing but the time.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "internal/free_port.h"
#include "internal/shim_comm.h"
#include "multirank/harness.h"

namespace papt {
namespace {

class FaultHook : public Test {
 protected:
  void SetUp() override {
    Test::SetUp();
    if (!papTestFaultHookBuilt()) GTEST_SKIP() << "this build has no PAPCCL_FAULT hook";
  }
};

constexpr int kTimeoutS = 4;
// Detection may take the whole timeout plus the time to notice it on 2 busy cores.
constexpr double kMarginS = 10;

void RunAllReduce(Rank& rk, uint32_t seed, size_t count = 1 << 18) {
  Case c;
  c.coll = Coll::kAllReduce;
  c.type = papcclFloat32;
  c.count = count;
  c.seed = seed;
  RunCase(rk, c);
}

// Loops over allreduces until one fails; checks the failure came within the bound, and that
// the communicator keeps the error (unless another thread aborts it: abortedElsewhere). A
// rank that was stalled itself may take stalledS longer.
void LoopUntilError(Rank& rk, size_t count, int lateMs = 0, bool abortedElsewhere = false,
                    double stalledS = 0) {
  std::vector<float> in(count, 1.0f), out(count);
  papcclResult_t res = papcclSuccess;
  double callS = 0;
  const double start = NowS();
  int calls = 0;
  while (NowS() - start < 60) {
    if (lateMs > 0) std::this_thread::sleep_for(std::chrono::milliseconds(lateMs));
    double t0 = NowS();
    res = papcclAllReduce(in.data(), out.data(), count, papcclFloat32, papcclSum, rk.comm, nullptr);
    callS = NowS() - t0;
    calls++;
    if (res != papcclSuccess) break;
    EXPECT_EQ((float)rk.nranks, out[count - 1]) << "rank " << rk.rank << " call " << calls;
  }
  fprintf(stderr, "rank %d: call %d returned %d (%s) after %.2f s: %s\n", rk.rank, calls, (int)res,
          papcclGetErrorString(res), callS, papcclGetLastError(rk.comm));
  EXPECT_NE(papcclSuccess, res) << "rank " << rk.rank << ": no error within 60 s";
  EXPECT_LE(callS, stalledS + kTimeoutS + kMarginS)
      << "rank " << rk.rank << ": the failing call took " << callS << " s";
  if (abortedElsewhere) return;
  papcclResult_t async = papcclSuccess;
  EXPECT_EQ(papcclSuccess, papcclCommGetAsyncError(rk.comm, &async));
  EXPECT_NE(papcclSuccess, async) << "rank " << rk.rank << ": the comm must keep the error";
}

// The survivors (every rank but victim; all ranks when victim < 0) make a new communicator
// among themselves through PAPCCL_COMM_ID on port, and check an allreduce on it.
void SurvivorsRegroup(Rank& rk, int victim, int port) {
  ScopedEnv commId("PAPCCL_COMM_ID", "127.0.0.1:" + std::to_string(port));
  // The survivors learn of the fault up to a whole timeout apart: give them time to meet.
  ScopedEnv timeout("PAPCCL_TIMEOUT_S", "60");
  // Ranks are renumbered: a survivor may now hold the victim's rank, and in its process the
  // spec has not fired yet.
  ScopedEnv noFault("PAPCCL_FAULT", nullptr);
  papcclUniqueId id;
  ASSERT_EQ(papcclSuccess, papcclGetUniqueId(&id));
  const int newRank = victim < 0 || rk.rank < victim ? rk.rank : rk.rank - 1;
  const int newN = victim < 0 ? rk.nranks : rk.nranks - 1;
  papcclComm_t comm = nullptr;
  ASSERT_EQ(papcclSuccess, papcclCommInitRank(&comm, newN, id, newRank))
      << "rank " << rk.rank << ": " << papcclGetLastError(nullptr);
  Rank sub = rk;
  sub.rank = newRank;
  sub.nranks = newN;
  sub.comm = comm;
  RunAllReduce(sub, 7);
  EXPECT_EQ(papcclSuccess, papcclCommDestroy(comm));
}

TEST_F(FaultHook, SpecsAreParsedStrictly) {
  EXPECT_EQ(1, papTestFaultParse("kill@bootstrap"));
  EXPECT_EQ(1, papTestFaultParse("kill@bootstrap:rank=1"));
  EXPECT_EQ(2, papTestFaultParse("stall@chunk:rank=2:nth=3:ms=10,delay@commit"));
  EXPECT_EQ(3, papTestFaultParse("delay@commit:ms=0,delay@chunk,stall@bootstrap:nth=1"));
  const char* bad[] = {"kill",
                       "kill@",
                       "explode@chunk",
                       "kill@nowhere",
                       "kill@chunk:rank=x",
                       "kill@chunk:rank=-1",
                       "kill@chunk:nth=0",
                       "kill@chunk:ms=",
                       "kill@chunk:foo=1",
                       "kill@chunk:rank",
                       "kill@chunk,",
                       "delay@chunk:ms=99999999999999999999999"};
  for (const char* b : bad) {
    ExpectWarn w({"PAPCCL_FAULT"});
    EXPECT_EQ(-1, papTestFaultParse(b)) << b;
    EXPECT_EQ(1, w.Count()) << b << ": one WARN naming what is wrong";
  }
  std::string longSpec(600, 'x');
  ExpectWarn w({"PAPCCL_FAULT"});
  EXPECT_EQ(-1, papTestFaultParse(longSpec.c_str()));
}

// A rank dies during init, after it met the root: the others fail init long before the
// timeout (the rank after it finds its listener gone, the others see their ring sockets
// close) and can then make a new one without it.
TEST_F(FaultHook, KillAtBootstrap) {
  const int timeoutS = 30;
  ScopedEnv timeout("PAPCCL_TIMEOUT_S", std::to_string(timeoutS));
  ScopedEnv fault("PAPCCL_FAULT", "kill@bootstrap:rank=2");
  const int n = 4, victim = 2;
  const int port = papTestFreeFixedPort();
  ASSERT_GT(port, 0);
  Options opt;
  opt.makeComm = false;
  opt.deadlineS = 120;
  auto out = RunProcesses(
      n,
      [&](Rank& rk) {
        papcclComm_t comm = nullptr;
        papcclResult_t res = papcclSuccess;
        double t0 = NowS();
        {
          ExpectWarn any;  // the victim's fault, the survivors' timeouts
          res = papcclCommInitRank(&comm, n, rk.id, rk.rank);
        }
        double initS = NowS() - t0;
        fprintf(stderr, "rank %d: init returned %d after %.2f s: %s\n", rk.rank, (int)res, initS,
                papcclGetLastError(nullptr));
        EXPECT_NE(papcclSuccess, res) << "rank " << rk.rank << ": init without rank 2 succeeded";
        EXPECT_LT(initS, timeoutS / 3.0) << "the dead rank was not seen before the timeout";
        if (res == papcclSuccess) papcclCommAbort(comm);
        SurvivorsRegroup(rk, victim, port);
      },
      opt);
  ExpectKilledAndSurvivors(out, victim);
}

// Processes loop over allreduces of count floats under fault until each fails (ranks but 0
// come lateMs late to every call; stalled may take stalledS longer), abort, and regroup
// (without victim, if it is one that dies). Checks the victim died if one was to die.
void LoopFailRegroup(const std::string& fault, int n, int victim, bool victimDies, size_t count,
                     int lateMs, double stalledS = 0) {
  ScopedEnv timeout("PAPCCL_TIMEOUT_S", std::to_string(kTimeoutS));
  ScopedEnv faultEnv("PAPCCL_FAULT", fault);
  const int port = papTestFreeFixedPort();
  ASSERT_GT(port, 0);
  Options opt;
  opt.destroy = false;
  opt.deadlineS = 120;
  auto out = RunProcesses(
      n,
      [&](Rank& rk) {
        {
          ExpectWarn any;
          LoopUntilError(rk, count, rk.rank == 0 ? 0 : lateMs, false,
                         rk.rank == victim ? stalledS : 0);
        }
        EXPECT_EQ(papcclSuccess, papcclCommAbort(rk.comm));
        SurvivorsRegroup(rk, victimDies ? victim : -1, port);
      },
      opt);
  if (victimDies)
    ExpectKilledAndSurvivors(out, victim);
  else
    ExpectAllSucceeded(out, fault);
}

// A rank dies with chunks of a large allreduce in flight.
TEST_F(FaultHook, KillMidChunk) {
  LoopFailRegroup("kill@chunk:rank=1:nth=40", 3, 1, true, 4 << 20, 0);
}

// The PAP decider dies just before it publishes the commit: the ranks waiting for the commit
// fail. Ranks 1..3 come 50 ms late to every call, so rank 0 arrives first and decides.
TEST_F(FaultHook, KillAtCommit) {
  LoopFailRegroup("kill@commit:rank=0:nth=3", 4, 0, true, 1 << 20, 50);
}

// The decider stalls 2 timeouts long before it commits: the others fail and abort; the
// decider then fails too (its peers are gone). All of them, the stalled rank included, then
// make a new communicator on the same ranks as processes.
TEST_F(FaultHook, StallAtCommitThenNewCommunicator) {
  const int stallMs = 2000 * kTimeoutS;
  LoopFailRegroup("stall@commit:rank=0:nth=2:ms=" + std::to_string(stallMs), 3, 0, false, 1 << 20,
                  50, stallMs / 1000.0);
}

// Ranks as threads: rank 1 stalls mid-chunk (until its comm is aborted). The others fail
// within the timeout and abort; then the stalled rank is aborted from another thread and
// returns too. A new communicator on the same three ranks then works.
TEST_F(FaultHook, StallMidChunkThenNewCommunicator) {
  ScopedEnv timeout("PAPCCL_TIMEOUT_S", std::to_string(kTimeoutS));
  ScopedEnv fault("PAPCCL_FAULT", "stall@chunk:rank=1:nth=25");
  const int n = 3, staller = 1;
  // The new communicator's id is made once every rank is out of the failed one (its root
  // waits PAPCCL_TIMEOUT_S for the ranks to come).
  papcclUniqueId id2;
  std::mutex mu;
  std::condition_variable cv;
  int out = 0;
  bool id2Ready = false;
  std::vector<papcclComm_t> comms(n, nullptr);
  std::atomic<int> failed{0};
  Options opt;
  opt.destroy = false;
  opt.deadlineS = 120;
  RunThreads(
      n,
      [&](Rank& rk) {
        comms[rk.rank] = rk.comm;
        {
          ExpectWarn any;
          if (rk.rank == staller) {
            // The survivors abort this rank's comm once they have all failed.
            LoopUntilError(rk, 4 << 20, 0, true);
          } else {
            LoopUntilError(rk, 4 << 20);
            if (failed.fetch_add(1) + 1 == n - 1) {
              std::this_thread::sleep_for(std::chrono::milliseconds(100));
              EXPECT_EQ(papcclSuccess, papcclCommAbort(comms[staller]));
            }
          }
        }
        if (rk.rank != staller) {
          EXPECT_EQ(papcclSuccess, papcclCommAbort(rk.comm));
        }
        {
          std::unique_lock<std::mutex> lk(mu);
          if (++out == n) {
            EXPECT_EQ(papcclSuccess, papcclGetUniqueId(&id2));
            id2Ready = true;
            cv.notify_all();
          }
          cv.wait(lk, [&] { return id2Ready; });
        }
        papcclComm_t comm = nullptr;
        ASSERT_EQ(papcclSuccess, papcclCommInitRank(&comm, n, id2, rk.rank))
            << "rank " << rk.rank << ": " << papcclGetLastError(nullptr);
        Rank again = rk;
        again.comm = comm;
        RunAllReduce(again, 11);
        EXPECT_EQ(papcclSuccess, papcclCommDestroy(comm));
      },
      opt);
}

// Delays change only the time: init with one rank late at bootstrap, the decider late at
// the commit, one rank late in the middle of the chunks. Every result is checked.
TEST_F(FaultHook, DelaysKeepResultsExact) {
  ScopedEnv fault(
      "PAPCCL_FAULT",
      "delay@bootstrap:rank=1:ms=300,delay@commit:ms=200,delay@chunk:rank=2:nth=7:ms=150");
  const int n = 4;
  ExpectWarn injected({"PAPCCL_FAULT"});
  RunRanks(Mode::kThreads, n, [&](Rank& rk) {
    for (uint32_t i = 0; i < 6; i++)
      RunAllReduce(rk, 20 + i, (size_t)1 << (12 + 2 * (i % 3)));
  });
  EXPECT_GE(injected.Count(), 3) << "each of the three delays should have been injected";
}

}  // namespace
}  // namespace papt
