// SPDX-License-Identifier: Apache-2.0
// Surviving a failed rank: a rank killed (SIGKILL, reaped or left a zombie) between
// collectives or in the middle of an allreduce under each algorithm, a rank stopped (SIGSTOP)
// and named at the timeout, a rank that dies instead of joining a shrink; every survivor
// errors, shrinks the communicator without it and runs 100 allreduces correctly. Also
// voluntary exclusion, shrinking twice, split and shrink of a shrunk comm, revoke during a
// long operation, the state dump, and bad arguments of shrink, revoke and the dump.
#include <gtest/gtest.h>
#include <sched.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "internal/shim_comm.h"
#include "multirank/harness.h"

namespace papt {
namespace {

class Shrink : public Test {};
class Revoke : public Test {};
class DumpState : public Test {};

// Rank and size of comm.
void ExpectShape(papcclComm_t comm, int rank, int n, const std::string& what) {
  ASSERT_NE(nullptr, comm) << what;
  int cn = -1, cr = -1;
  EXPECT_EQ(papcclSuccess, papcclCommCount(comm, &cn));
  EXPECT_EQ(papcclSuccess, papcclCommUserRank(comm, &cr));
  EXPECT_EQ(n, cn) << what;
  EXPECT_EQ(rank, cr) << what;
}

// Processes whose survivors end their comms themselves (a victim never returns).
Options SurvivorOptions(double deadlineS = 120) {
  Options opt;
  opt.destroy = false;
  opt.deadlineS = deadlineS;
  return opt;
}

// ---- Voluntary exclusion, shrink twice, split of a shrunk comm ---------------------------------

TEST_F(Shrink, VoluntaryExclusionSplitAndShrinkAgain) {
  const int n = 4, leaver = 2;
  Options opt;
  opt.destroy = false;
  RunThreads(
      n,
      [&](Rank& rk) {
        if (rk.rank == leaver) {  // leaves of its own accord: never calls shrink
          EXPECT_EQ(papcclSuccess, papcclCommDestroy(rk.comm));
          return;
        }
        int exclude = leaver;
        papcclComm_t child = nullptr;
        ASSERT_EQ(papcclSuccess,
                  papcclCommShrink(rk.comm, &exclude, 1, &child, nullptr, PAPCCL_SHRINK_DEFAULT))
            << papcclGetLastError(rk.comm);
        const int cr = rk.rank < leaver ? rk.rank : rk.rank - 1;  // survivors keep their order
        ExpectShape(child, cr, n - 1, "shrunk comm");
        CheckedAllReduces(child, cr, n - 1, 30, "shrunk comm");
        // The leaver has destroyed its rank of the parent: the parent only goes now.
        EXPECT_EQ(papcclSuccess, papcclCommDestroy(rk.comm));
        // Split of the shrunk comm: each child rank alone (color = rank).
        papcclComm_t solo = nullptr;
        ASSERT_EQ(papcclSuccess, papcclCommSplit(child, cr, 0, &solo, nullptr));
        ExpectShape(solo, 0, 1, "split of the shrunk comm");
        CheckedAllReduces(solo, 0, 1, 3, "split of the shrunk comm");
        EXPECT_EQ(papcclSuccess, papcclCommDestroy(solo));
        // Shrink again: child rank 0 leaves.
        if (cr == 0) {
          EXPECT_EQ(papcclSuccess, papcclCommDestroy(child));
          return;
        }
        int first = 0;
        papcclComm_t again = nullptr;
        ASSERT_EQ(papcclSuccess,
                  papcclCommShrink(child, &first, 1, &again, nullptr, PAPCCL_SHRINK_DEFAULT));
        ExpectShape(again, cr - 1, n - 2, "second shrink");
        CheckedAllReduces(again, cr - 1, n - 2, 30, "second shrink");
        EXPECT_EQ(papcclSuccess, papcclCommDestroy(again));
        EXPECT_EQ(papcclSuccess, papcclCommDestroy(child));
      },
      opt);
}

// Shrinking nobody away gives a copy of the comm (as NCCL's with an empty list).
TEST_F(Shrink, EmptyListCopiesTheComm) {
  const int n = 3;
  RunThreads(n, [&](Rank& rk) {
    papcclComm_t copy = nullptr;
    ASSERT_EQ(papcclSuccess,
              papcclCommShrink(rk.comm, nullptr, 0, &copy, nullptr, PAPCCL_SHRINK_DEFAULT));
    ExpectShape(copy, rk.rank, n, "copy");
    CheckedAllReduces(copy, rk.rank, n, 6, "copy");
    CheckedAllReduces(rk.comm, rk.rank, n, 3, "parent after a DEFAULT shrink");
    EXPECT_EQ(papcclSuccess, papcclCommDestroy(copy));
  });
}

// ---- A rank killed at each phase -----------------------------------------------------------

struct KillCase {
  const char* name;
  const char* algo;  // PAPCCL_ALGO, or nullptr
  bool mid;  // killed in the middle of an allreduce loop (else between two allreduces)
  size_t count;  // floats per allreduce
  int victim;
  bool reaped;  // the parent reaps the victim at once (else it stays a zombie meanwhile)
};

void PrintTo(const KillCase& k, std::ostream* os) {
  *os << k.name << (k.reaped ? "_reaped" : "_zombie");
}

class ShrinkKill : public Test, public ::testing::WithParamInterface<KillCase> {};

constexpr int kKillTimeoutS = 60;
// The bootstrap (a dead member of a shrink) sees a death by its listener's refusal, 0.5 s at
// most (docs/FAULTS.md); far below PAPCCL_TIMEOUT_S: the death was seen, not the timeout
// (which the noisy machines of the test runs must never reach by chance).
constexpr double kDetectBoundS = 10;

// Allreduces of count floats on comm until one fails (a peer died), for at most twice the
// kill tests' timeout; returns how long the failing call took, its result in *res and its
// start in *startOut.
double CallUntilFailure(papcclComm_t comm, size_t count, papcclResult_t* res, double* startOut);

TEST_P(ShrinkKill, SurvivorsErrorShrinkAndGoOn) {
  const KillCase k = GetParam();
  ScopedEnv timeout("PAPCCL_TIMEOUT_S", std::to_string(kKillTimeoutS));
  ScopedEnv algo("PAPCCL_ALGO", k.algo);
  const int n = 4;
  Options opt = SurvivorOptions(150);
  if (!k.reaped) opt.reapLast = k.victim;
  SharedTime death;
  auto out = RunProcesses(
      n,
      [&](Rank& rk) {
        std::vector<float> buf(k.count, 1.0f);
        ASSERT_EQ(papcclSuccess, papcclAllReduce(buf.data(), buf.data(), k.count, papcclFloat32,
                                                 papcclSum, rk.comm, nullptr));
        if (rk.rank == k.victim) {
          if (!k.mid) {
            death.Set(NowS());
            raise(SIGKILL);
          }
          std::thread([&death] {
            std::this_thread::sleep_for(std::chrono::milliseconds(300));
            death.Set(NowS());
            raise(SIGKILL);
          }).detach();
          for (;;)
            papcclAllReduce(buf.data(), buf.data(), k.count, papcclFloat32, papcclSum, rk.comm,
                            nullptr);
        }
        ExpectWarn any;  // the dead-peer reports, the shrink's cancelled parent
        papcclResult_t res = papcclSuccess;
        double startS = 0;
        const double callS = CallUntilFailure(rk.comm, k.count, &res, &startS);
        const double latencyS = startS + callS - std::max(startS, death.Get());
        const std::string why = papcclGetLastError(rk.comm);
        fprintf(stderr,
                "%s: rank %d: detection: the failing call took %.3f s, %.3f s after the death: "
                "%s\n",
                k.name, rk.rank, callS, latencyS, why.c_str());
        ExpectDeadRankSeen(res, latencyS, why, k.victim,
                           std::string(k.name) + ": rank " + std::to_string(rk.rank));
        int dead = k.victim;
        papcclComm_t child = nullptr;
        const double s0 = NowS();
        ASSERT_EQ(papcclSuccess,
                  papcclCommShrink(rk.comm, &dead, 1, &child, nullptr, PAPCCL_SHRINK_ABORT))
            << papcclGetLastError(rk.comm);
        fprintf(stderr, "%s: rank %d: shrink took %.3f s\n", k.name, rk.rank, NowS() - s0);
        const int cr = rk.rank < k.victim ? rk.rank : rk.rank - 1;
        ExpectShape(child, cr, n - 1, "shrunk comm");
        CheckedAllReduces(child, cr, n - 1, 100, "shrunk comm");
        EXPECT_EQ(papcclSuccess, papcclCommDestroy(child));
        EXPECT_EQ(papcclSuccess, papcclCommDestroy(rk.comm));
      },
      opt);
  ExpectKilledAndSurvivors(out, k.victim);
}

const size_t kLarge = size_t(1) << 20;  // 4 MiB: the engine's plans

double CallUntilFailure(papcclComm_t comm, size_t count, papcclResult_t* res, double* startOut) {
  std::vector<float> buf(count, 1.0f);
  double callS = 0;
  *res = papcclSuccess;
  const double start = NowS();
  while (*res == papcclSuccess && NowS() - start < 2 * kKillTimeoutS) {
    const double t0 = NowS();
    *res = papcclAllReduce(buf.data(), buf.data(), count, papcclFloat32, papcclSum, comm, nullptr);
    callS = NowS() - t0;
    *startOut = t0;
  }
  return callS;
}
INSTANTIATE_TEST_SUITE_P(
    Phases, ShrinkKill,
    ::testing::Values(KillCase{"between_flat", nullptr, false, 16, 1, true},
                      KillCase{"between_flat", nullptr, false, 16, 1, false},
                      KillCase{"between_large", nullptr, false, kLarge, 2, true},
                      KillCase{"between_large", nullptr, false, kLarge, 2, false},
                      KillCase{"between_rank0", nullptr, false, kLarge, 0, false},
                      KillCase{"commit_pap", "pap", false, kLarge, 3, false},
                      KillCase{"mid_ring", "ring", true, kLarge, 1, false},
                      KillCase{"mid_rhd", "rhd", true, kLarge, 1, true},
                      KillCase{"mid_ac2s", "ac2s", true, kLarge, 2, false},
                      KillCase{"mid_chain", "chain", true, kLarge, 2, true},
                      KillCase{"mid_small", "small", true, 4096, 3, false}),
    [](const ::testing::TestParamInfo<KillCase>& info) {
      return std::string(info.param.name) + (info.param.reaped ? "_reaped" : "_zombie");
    });

// ---- A stopped rank, named at the timeout and in the state dump ------------------------------

TEST_F(Shrink, StoppedRankIsNamedAtTheTimeoutAndInTheDump) {
  const int timeoutS = 3;
  ScopedEnv timeout("PAPCCL_TIMEOUT_S", std::to_string(timeoutS));
  const int n = 4, victim = 2;
  Options opt = SurvivorOptions();
  opt.whileRunning = [&](const std::vector<pid_t>& pids) {
    // The survivors time out after 3 s, then shrink and go on; the stopped rank is killed
    // well after (a launcher would do it).
    std::this_thread::sleep_for(std::chrono::seconds(timeoutS + 8));
    kill(pids[victim], SIGKILL);
  };
  auto out = RunProcesses(
      n,
      [&](Rank& rk) {
        const size_t count = kLarge;
        std::vector<float> buf(count, 1.0f);
        ASSERT_EQ(papcclSuccess, papcclAllReduce(buf.data(), buf.data(), count, papcclFloat32,
                                                 papcclSum, rk.comm, nullptr));
        if (rk.rank == victim) {
          raise(SIGSTOP);
          for (;;)
            pause();
        }
        ExpectWarn any;  // the timeout
        std::string dump;
        std::thread dumper([&] {
          std::this_thread::sleep_for(std::chrono::milliseconds(1500));
          char text[1024];
          EXPECT_EQ(papcclSuccess, papcclCommDumpState(rk.comm, text, sizeof(text)));
          dump = text;
        });
        const double t0 = NowS();
        papcclResult_t res = papcclAllReduce(buf.data(), buf.data(), count, papcclFloat32,
                                             papcclSum, rk.comm, nullptr);
        const double took = NowS() - t0;
        dumper.join();
        const std::string why = papcclGetLastError(rk.comm);
        fprintf(stderr, "rank %d: returned %d after %.2f s: %s\nrank %d: dump: %s\n", rk.rank,
                (int)res, took, why.c_str(), rk.rank, dump.c_str());
        EXPECT_EQ(papcclRemoteError, res);
        // The wait is named (lazily, when its WARN needs the name).
        const std::string wait = "operation on rank " + std::to_string(rk.rank);
        EXPECT_NE(std::string::npos, why.find(wait + ": timed out")) << why;
        EXPECT_NE(std::string::npos, why.find("not arrived: ranks 2")) << why;
        EXPECT_NE(std::string::npos, dump.find("): " + wait + "; ")) << dump;
        EXPECT_NE(std::string::npos,
                  dump.find("collective #1 AllReduce(count 1048576, float, sum)"))
            << dump;
        // The op's path and why (papPathDecide): 4 ranks, automatic, one host.
        EXPECT_NE(std::string::npos,
                  dump.find("path board (the selector chooses from the arrivals)"))
            << dump;
        EXPECT_NE(std::string::npos, dump.find("not arrived: ranks 2")) << dump;
        int silent = victim;
        papcclComm_t child = nullptr;
        ASSERT_EQ(papcclSuccess,
                  papcclCommShrink(rk.comm, &silent, 1, &child, nullptr, PAPCCL_SHRINK_ABORT));
        const int cr = rk.rank < victim ? rk.rank : rk.rank - 1;
        CheckedAllReduces(child, cr, n - 1, 100, "shrunk comm");
        char idle[256];
        EXPECT_EQ(papcclSuccess, papcclCommDumpState(child, idle, sizeof(idle)));
        EXPECT_NE(std::string::npos, std::string(idle).find("no operation waits")) << idle;
        EXPECT_EQ(papcclSuccess, papcclCommDestroy(child));
        EXPECT_EQ(papcclSuccess, papcclCommAbort(rk.comm));
      },
      opt);
  ExpectKilledAndSurvivors(out, victim);
}

// ---- A rank in another PID namespace (a container of the same host) -----------------------

// Its pid means nothing here (and ours nothing there): liveness must not go by pid. Before
// the pids were dropped for such peers, the rank inside the new namespace looked for rank
// 0's pid there, found no such process, and failed its first wait that lasted 100 ms with
// "peer 0 exited".
TEST_F(Shrink, PeerInAnotherPidNamespaceIsNotJudgedByPid) {
  Options opt;
  opt.makeComm = false;
  opt.destroy = false;
  opt.deadlineS = 120;
  auto out = RunProcesses(
      2,
      [&](Rank& rk) {
        auto body = [&] {
          papcclComm_t comm = nullptr;
          ASSERT_EQ(papcclSuccess, papcclCommInitRank(&comm, rk.nranks, rk.id, rk.rank));
          for (int i = 0; i < 4; i++) {  // rank 0 comes late: rank 1's waits run health checks
            if (rk.rank == 0) std::this_thread::sleep_for(std::chrono::milliseconds(300));
            CheckedAllReduces(comm, rk.rank, 2, 3, "across PID namespaces");
          }
          EXPECT_EQ(papcclSuccess, papcclCommDestroy(comm));
        };
        if (rk.rank == 0) {
          body();
          return;
        }
        if (unshare(CLONE_NEWPID) != 0) {
          // Without the privilege to make one, run in ours (the test then shows nothing new).
          fprintf(stderr, "unshare(CLONE_NEWPID): %s: rank 1 stays in this namespace\n",
                  strerror(errno));
          body();
          return;
        }
        pid_t child = fork();  // the first child of a new PID namespace is its pid 1
        ASSERT_GE(child, 0);
        if (child == 0) {
          EXPECT_EQ(1, getpid()) << "not in a new PID namespace";
          body();
          _exit(::testing::Test::HasFailure() ? 1 : 0);
        }
        int status = 0;
        ASSERT_EQ(child, waitpid(child, &status, 0));
        EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
            << "rank 1 in its PID namespace failed (status " << status << ")";
      },
      opt);
  ExpectAllSucceeded(out, "across PID namespaces");
}

// Killed there, it is seen as fast as a peer of our namespace (before the life lock, such a
// peer had no liveness signal at all: the survivor waited out PAPCCL_TIMEOUT_S). Rank 1 is a
// child of pid 1 of a new namespace (pid 1 cannot be killed from inside; it reaps rank 1 and
// reports how it ended). Its pid is not always 2: a sanitizer's thread in pid 1 takes one.
TEST_F(Shrink, PeerKilledInAnotherPidNamespaceIsSeen) {
  ScopedEnv timeout("PAPCCL_TIMEOUT_S", std::to_string(kKillTimeoutS));
  Options opt;
  opt.makeComm = false;
  opt.destroy = false;
  opt.deadlineS = 150;
  auto out = RunProcesses(
      2,
      [&](Rank& rk) {
        auto victim = [&] {
          papcclComm_t comm = nullptr;
          ASSERT_EQ(papcclSuccess, papcclCommInitRank(&comm, rk.nranks, rk.id, rk.rank));
          CheckedAllReduces(comm, rk.rank, 2, 6, "before the kill");
          raise(SIGKILL);
        };
        if (rk.rank == 0) {
          papcclComm_t comm = nullptr;
          ASSERT_EQ(papcclSuccess, papcclCommInitRank(&comm, rk.nranks, rk.id, rk.rank));
          CheckedAllReduces(comm, rk.rank, 2, 6, "before the kill");
          ExpectWarn any;
          papcclResult_t res = papcclSuccess;
          double startS = 0;
          const double callS = CallUntilFailure(comm, 4096, &res, &startS);
          const std::string why = papcclGetLastError(comm);
          fprintf(stderr, "pidns: rank 0: detection: the failing call took %.3f s: %s\n", callS,
                  why.c_str());
          // The victim dies right after its last allreduce: the call's time bounds the
          // detection's.
          ExpectDeadRankSeen(res, callS, why, 1, "pidns: rank 0");
          EXPECT_EQ(papcclSuccess, papcclCommAbort(comm));
          return;
        }
        if (unshare(CLONE_NEWPID) != 0) {
          fprintf(stderr, "unshare(CLONE_NEWPID): %s: rank 1 dies in this namespace\n",
                  strerror(errno));
          victim();
          return;
        }
        pid_t init = fork();  // pid 1 of the new namespace
        ASSERT_GE(init, 0);
        if (init == 0) {
          pid_t rank1 = fork();  // the rank, which can be killed
          if (rank1 == 0) {
            victim();
            _exit(3);
          }
          int status = 0;
          if (rank1 < 0 || waitpid(rank1, &status, 0) != rank1) _exit(4);
          _exit(getpid() == 1 && rank1 > 1 && WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL
                    ? 0
                    : 5);
        }
        int status = 0;
        ASSERT_EQ(init, waitpid(init, &status, 0));
        EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
            << "rank 1 was not a child of pid 1 of a new namespace killed by SIGKILL (status "
            << status << ")";
      },
      opt);
  ExpectAllSucceeded(out, "a peer killed in another PID namespace");
}

// A child that a rank forked (a data-loader worker) inherits the rank's descriptors; it must
// not keep the dead rank's life lock: the fork handler closes it in the child. The child
// outlives the rank by far more than the detection bound.
TEST_F(Shrink, ForkedChildOfADeadRankDoesNotHideItsDeath) {
  ScopedEnv timeout("PAPCCL_TIMEOUT_S", std::to_string(kKillTimeoutS));
  const int n = 3, victim = 1;
  Options opt = SurvivorOptions();
  auto out = RunProcesses(
      n,
      [&](Rank& rk) {
        CheckedAllReduces(rk.comm, rk.rank, n, 3, "before the fork");
        if (rk.rank == victim) {
          pid_t worker = fork();
          if (worker == 0) {
            // Lives on after its parent's death, past the bound, then goes quietly.
            std::this_thread::sleep_for(std::chrono::duration<double>(kDeadRankBoundS + 3));
            _exit(0);
          }
          CheckedAllReduces(rk.comm, rk.rank, n, 3, "after the fork");
          raise(SIGKILL);
        }
        CheckedAllReduces(rk.comm, rk.rank, n, 3, "after the fork");
        ExpectWarn any;
        papcclResult_t res = papcclSuccess;
        double startS = 0;
        const double callS = CallUntilFailure(rk.comm, kLarge, &res, &startS);
        const std::string why = papcclGetLastError(rk.comm);
        fprintf(stderr, "forked: rank %d: detection: the failing call took %.3f s: %s\n", rk.rank,
                callS, why.c_str());
        // The victim dies right after its last allreduce: the call's time bounds the
        // detection's.
        ExpectDeadRankSeen(res, callS, why, victim, "forked: rank " + std::to_string(rk.rank));
        int dead = victim;
        papcclComm_t child = nullptr;
        ASSERT_EQ(papcclSuccess,
                  papcclCommShrink(rk.comm, &dead, 1, &child, nullptr, PAPCCL_SHRINK_ABORT));
        CheckedAllReduces(child, rk.rank < victim ? rk.rank : rk.rank - 1, n - 1, 20, "shrunk");
        EXPECT_EQ(papcclSuccess, papcclCommDestroy(child));
        EXPECT_EQ(papcclSuccess, papcclCommDestroy(rk.comm));
      },
      opt);
  ExpectKilledAndSurvivors(out, victim);
}

// ---- A member dies instead of joining a shrink ---------------------------------------------

TEST_F(Shrink, MemberDeadDuringShrinkFailsItThenShrinkWithoutIt) {
  const int timeoutS = kKillTimeoutS;
  ScopedEnv timeout("PAPCCL_TIMEOUT_S", std::to_string(timeoutS));
  const int n = 4, victim = 3;
  Options opt = SurvivorOptions();
  auto out = RunProcesses(
      n,
      [&](Rank& rk) {
        if (rk.rank == victim) raise(SIGKILL);
        ExpectWarn any;  // the failed shrink's bootstrap
        papcclComm_t child = nullptr;
        const double t0 = NowS();
        papcclResult_t res =
            papcclCommShrink(rk.comm, nullptr, 0, &child, nullptr, PAPCCL_SHRINK_DEFAULT);
        const double took = NowS() - t0;
        fprintf(stderr, "rank %d: the shrink with a dead member returned %d after %.2f s\n",
                rk.rank, (int)res, took);
        EXPECT_NE(papcclSuccess, res);
        // Its listener refuses: the rank before it fails to connect, the one after it probes
        // it, the others see their ring sockets close.
        EXPECT_LT(took, kDetectBoundS) << "the dead member was not seen before the timeout";
        EXPECT_EQ(nullptr, child);
        int dead = victim;
        ASSERT_EQ(papcclSuccess,
                  papcclCommShrink(rk.comm, &dead, 1, &child, nullptr, PAPCCL_SHRINK_ABORT));
        CheckedAllReduces(child, rk.rank, n - 1, 100, "shrunk comm");
        EXPECT_EQ(papcclSuccess, papcclCommDestroy(child));
        EXPECT_EQ(papcclSuccess, papcclCommDestroy(rk.comm));
      },
      opt);
  ExpectKilledAndSurvivors(out, victim);
}

// ---- Revoke ----------------------------------------------------------------------------

// Rank 1 never joins the allreduce; rank 0 waits in it until another thread revokes comm 0.
// The revoked comms refuse operations and finalize, report success once quiet, and still
// split (their bootstrap is intact); the split comms work.
TEST_F(Revoke, DuringALongOperationThenSplit) {
  std::vector<papcclComm_t> comms(2, nullptr);
  ASSERT_EQ(papcclSuccess, papcclCommInitAll(comms.data(), 2, nullptr));
  const int64_t timeoutS = papTestCommParamTimeoutS();
  papcclResult_t res = papcclSuccess;
  double returnedAt = 0, revokedAt = 0;
  {
    ExpectWarn any;  // the cancelled operation
    std::thread waiter([&] {
      std::vector<float> buf(kLarge, 1.0f);
      res = papcclAllReduce(buf.data(), buf.data(), buf.size(), papcclFloat32, papcclSum, comms[0],
                            nullptr);
      returnedAt = NowS();
    });
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    revokedAt = NowS();
    EXPECT_EQ(papcclSuccess, papcclCommRevoke(comms[0], PAPCCL_REVOKE_DEFAULT));
    const double revokeS = NowS() - revokedAt;
    waiter.join();
    fprintf(stderr, "revoke returned after %.3f s; the allreduce returned %d %.3f s after it\n",
            revokeS, (int)res, returnedAt - revokedAt);
    EXPECT_NE(papcclSuccess, res);
    EXPECT_GE(returnedAt, revokedAt) << "the allreduce never waited for rank 1";
    EXPECT_LT(returnedAt - revokedAt, (double)timeoutS / 4) << "revoke did not stop it";
  }
  EXPECT_EQ(papcclSuccess, papcclCommRevoke(comms[1], PAPCCL_REVOKE_DEFAULT));
  for (int r = 0; r < 2; r++) {
    papcclResult_t async = papcclInternalError;
    EXPECT_EQ(papcclSuccess, papcclCommGetAsyncError(comms[r], &async));
    EXPECT_EQ(papcclSuccess, async) << "a quiet revoked comm reports success";
    float f = 1;
    ExpectWarn refused({"revoked"});
    EXPECT_EQ(papcclInvalidUsage,
              papcclAllReduce(&f, &f, 1, papcclFloat32, papcclSum, comms[r], nullptr));
    EXPECT_EQ(papcclInvalidUsage, papcclSend(&f, 1, papcclFloat32, 1 - r, comms[r], nullptr));
    EXPECT_EQ(papcclInvalidUsage, papcclCommFinalize(comms[r]));
    EXPECT_EQ(3, refused.Count());
  }
  std::vector<papcclComm_t> subs(2, nullptr);
  std::vector<std::thread> th;
  for (int r = 0; r < 2; r++)
    th.emplace_back([&, r] {
      ASSERT_EQ(papcclSuccess, papcclCommSplit(comms[r], 0, r, &subs[r], nullptr))
          << papcclGetLastError(comms[r]);
      CheckedAllReduces(subs[r], r, 2, 6, "split of a revoked comm");
    });
  for (auto& t : th)
    t.join();
  for (int r = 0; r < 2; r++) {
    EXPECT_EQ(papcclSuccess, papcclCommDestroy(subs[r]));
    EXPECT_EQ(papcclSuccess, papcclCommDestroy(comms[r]));
  }
}

// ---- Bad arguments -------------------------------------------------------------------------

TEST_F(Shrink, BadArgumentsAreRefusedWithAReason) {
  std::vector<papcclComm_t> comms(3, nullptr);
  ASSERT_EQ(papcclSuccess, papcclCommInitAll(comms.data(), 3, nullptr));
  papcclComm_t c = comms[1];  // rank 1 of 3
  papcclComm_t out = c;
  struct Bad {
    std::vector<int> list;
    int count;
    bool nullList;
    int flags;
    const char* why;
  };
  const Bad bad[] = {
      {{}, -1, true, PAPCCL_SHRINK_DEFAULT, "excludeRanksCount -1"},
      {{0, 2, 1}, 3, false, PAPCCL_SHRINK_DEFAULT, "excludeRanksCount 3"},
      {{}, 1, true, PAPCCL_SHRINK_DEFAULT, "excludeRanksList is NULL"},
      {{3}, 1, false, PAPCCL_SHRINK_DEFAULT, "excludeRanksList[0] = 3"},
      {{-1}, 1, false, PAPCCL_SHRINK_DEFAULT, "excludeRanksList[0] = -1"},
      {{0, 0}, 2, false, PAPCCL_SHRINK_DEFAULT, "rank 0 appears twice"},
      {{1}, 1, false, PAPCCL_SHRINK_DEFAULT, "this rank (1)"},
      {{0}, 1, false, 2, "shrinkFlags 2"},
  };
  for (const Bad& b : bad) {
    ExpectWarn w({b.why});
    std::vector<int> list = b.list;
    out = c;
    EXPECT_EQ(papcclInvalidArgument, papcclCommShrink(c, b.nullList ? nullptr : list.data(),
                                                      b.count, &out, nullptr, b.flags))
        << b.why;
    EXPECT_EQ(1, w.Count()) << b.why;
    EXPECT_EQ(nullptr, out) << b.why;
  }
  {
    ExpectWarn w({"newcomm is NULL"});
    int zero = 0;
    EXPECT_EQ(papcclInvalidArgument,
              papcclCommShrink(c, &zero, 1, nullptr, nullptr, PAPCCL_SHRINK_DEFAULT));
  }
  {
    ExpectWarn w({"config->magic"});
    papcclConfig_t cfg = PAPCCL_CONFIG_INITIALIZER;
    cfg.magic = 0;
    int zero = 0;
    EXPECT_EQ(papcclInvalidArgument,
              papcclCommShrink(c, &zero, 1, &out, &cfg, PAPCCL_SHRINK_DEFAULT));
  }
  {
    ExpectWarn w({"revokeFlags 1"});
    EXPECT_EQ(papcclInvalidArgument, papcclCommRevoke(c, 1));
  }
  {
    ExpectWarn w({"papcclCommDumpState"});
    char text[8];
    EXPECT_EQ(papcclInvalidArgument, papcclCommDumpState(c, nullptr, 8));
    EXPECT_EQ(papcclInvalidArgument, papcclCommDumpState(c, text, 0));
    EXPECT_EQ(2, w.Count());
  }
  {
    ExpectWarn w({"comm is NULL"});
    EXPECT_EQ(papcclInvalidArgument, papcclCommRevoke(nullptr, 0));
    EXPECT_EQ(papcclInvalidArgument,
              papcclCommShrink(nullptr, nullptr, 0, &out, nullptr, PAPCCL_SHRINK_DEFAULT));
    EXPECT_EQ(papcclInvalidArgument, papcclCommDumpState(nullptr, nullptr, 0));
  }
  // Nothing was revoked or aborted by the refused calls: the comms still work.
  std::vector<std::thread> th;
  for (int r = 0; r < 3; r++)
    th.emplace_back([&, r] { CheckedAllReduces(comms[r], r, 3, 3, "after bad arguments"); });
  for (auto& t : th)
    t.join();
  for (int r = 0; r < 3; r++)
    EXPECT_EQ(papcclSuccess, papcclCommDestroy(comms[r]));
}

// ---- The dump signal -------------------------------------------------------------------------

// With PAPCCL_DUMP_SIGNAL=SIGUSR1, the signal makes every comm of the process log its state:
// a rank waiting for a peer that never calls is named in the dump's WARN.
TEST_F(DumpState, SignalLogsEveryComm) {
  Options opt;
  opt.makeComm = false;
  opt.deadlineS = 60;
  auto out = RunProcesses(
      1,
      [&](Rank&) {
        ScopedEnv sig("PAPCCL_DUMP_SIGNAL", std::to_string(SIGUSR1));
        ScopedEnv timeout("PAPCCL_TIMEOUT_S", "30");
        std::vector<papcclComm_t> comms(2, nullptr);
        ASSERT_EQ(papcclSuccess, papcclCommInitAll(comms.data(), 2, nullptr));
        ExpectWarn dump({"state dump"});
        ExpectWarn cancelled({"aborted", "cancelled"});
        std::thread waiter([&] {
          std::vector<float> buf(kLarge, 1.0f);
          papcclAllReduce(buf.data(), buf.data(), buf.size(), papcclFloat32, papcclSum, comms[0],
                          nullptr);
        });
        std::this_thread::sleep_for(std::chrono::milliseconds(600));
        raise(SIGUSR1);
        const double t0 = NowS();
        while (dump.Count() < 3 && NowS() - t0 < 20)
          std::this_thread::sleep_for(std::chrono::milliseconds(20));
        EXPECT_EQ(papcclSuccess, papcclCommAbort(comms[0]));
        waiter.join();
        EXPECT_GE(dump.Count(), 3) << "a header line and one per comm";
        bool named = false;
        for (const std::string& m : dump.Messages())
          named |= m.find("rank 0 of 2") != std::string::npos &&
                   m.find("not arrived: ranks 1") != std::string::npos;
        EXPECT_TRUE(named) << "the waiting rank's line names rank 1 as not arrived";
        EXPECT_EQ(papcclSuccess, papcclCommDestroy(comms[1]));
      },
      opt);
  ExpectAllSucceeded(out, "dump");
}

}  // namespace
}  // namespace papt
