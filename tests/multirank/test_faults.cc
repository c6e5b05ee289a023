// SPDX-License-Identifier: Apache-2.0
// Faults: a rank killed in the middle of a large collective, papcclCommAbort from another
// thread while a rank waits, and garbage clients on the bootstrap port during init.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "internal/free_port.h"
#include "internal/shim_comm.h"
#include "multirank/harness.h"

namespace papt {
namespace {

class Faults : public Test {};

constexpr int kTimeoutS = 5;

// Every surviving rank loops over large allreduces until one fails; the failing call must
// return papcclRemoteError naming the victim within kDeadRankBoundS of its death (the
// README's "about 0.1 s"), well before PAPCCL_TIMEOUT_S.
void SurvivorLoop(Rank& rk, int victim, const SharedTime& death) {
  ExpectWarn any;  // timeouts and dead-peer reports are expected here
  const size_t count = 4 << 20;  // 16 MiB of float
  std::vector<float> in(count, 1.0f), out(count);
  papcclResult_t res = papcclSuccess;
  double callS = 0, t0 = 0;
  int calls = 0;
  const double start = NowS();
  while (NowS() - start < 60) {
    t0 = NowS();
    res = papcclAllReduce(in.data(), out.data(), count, papcclFloat32, papcclSum, rk.comm, nullptr);
    callS = NowS() - t0;
    calls++;
    if (res != papcclSuccess) break;
  }
  const double latencyS = t0 + callS - std::max(t0, death.Get());
  const std::string why = papcclGetLastError(rk.comm);
  fprintf(stderr, "rank %d: call %d returned %d (%s) after %.2f s, %.3f s after the death: %s\n",
          rk.rank, calls, (int)res, papcclGetErrorString(res), callS, latencyS, why.c_str());
  EXPECT_NE(papcclSuccess, res) << "rank " << rk.rank << ": no error within 60 s of a peer's death";
  ExpectDeadRankSeen(res, latencyS, why, victim, "rank " + std::to_string(rk.rank));
  papcclResult_t async = papcclSuccess;
  EXPECT_EQ(papcclSuccess, papcclCommGetAsyncError(rk.comm, &async));
  EXPECT_NE(papcclSuccess, async) << "rank " << rk.rank << ": the comm must keep the error";
  EXPECT_EQ(papcclSuccess, papcclCommAbort(rk.comm));
}

TEST_F(Faults, RankKillsItselfMidCollective) {
  ScopedEnv timeout("PAPCCL_TIMEOUT_S", std::to_string(kTimeoutS));
  const int n = 4, victim = 2;
  Options opt;
  opt.destroy = false;  // survivors abort their comm; the victim never returns
  opt.deadlineS = 120;
  const double t0 = NowS();
  SharedTime death;
  auto out = RunProcesses(
      n,
      [&](Rank& rk) {
        if (rk.rank == victim) {
          std::thread([&death] {
            std::this_thread::sleep_for(std::chrono::milliseconds(300));
            death.Set(NowS());
            raise(SIGKILL);
          }).detach();
          const size_t count = 4 << 20;
          std::vector<float> in(count, 1.0f), out(count);
          for (;;)
            papcclAllReduce(in.data(), out.data(), count, papcclFloat32, papcclSum, rk.comm,
                            nullptr);
        }
        SurvivorLoop(rk, victim, death);
      },
      opt);
  fprintf(stderr, "all ranks done after %.2f s\n", NowS() - t0);
  ExpectKilledAndSurvivors(out, victim);
}

TEST_F(Faults, ParentKillsRankMidCollective) {
  ScopedEnv timeout("PAPCCL_TIMEOUT_S", std::to_string(kTimeoutS));
  const int n = 3, victim = 1;
  Options opt;
  opt.destroy = false;
  opt.deadlineS = 120;
  SharedTime death;
  opt.whileRunning = [&](const std::vector<pid_t>& pids) {
    std::this_thread::sleep_for(std::chrono::milliseconds(800));
    death.Set(NowS());
    kill(pids[victim], SIGKILL);
  };
  auto out = RunProcesses(
      n,
      [&](Rank& rk) {
        if (rk.rank == victim) {
          const size_t count = 4 << 20;
          std::vector<float> in(count, 1.0f), out(count);
          for (;;)
            papcclAllReduce(in.data(), out.data(), count, papcclFloat32, papcclSum, rk.comm,
                            nullptr);
        }
        SurvivorLoop(rk, victim, death);
      },
      opt);
  ExpectKilledAndSurvivors(out, victim);
}

// A rank dies between two collectives and stays a zombie (its parent has not reaped it):
// the survivors' next allreduce, small (the flat plan) and large (the engine's plans), fails
// naming a dead peer long before PAPCCL_TIMEOUT_S, not at it.
TEST_F(Faults, UnreapedDeadRankIsSeenBeforeTheTimeout) {
  const int timeoutS = 60;
  ScopedEnv timeout("PAPCCL_TIMEOUT_S", std::to_string(timeoutS));
  const int n = 3, victim = 2;
  for (size_t count : {size_t(16), size_t(1) << 20}) {
    Options opt;
    opt.destroy = false;
    opt.deadlineS = 120;
    opt.reapLast = victim;
    auto out = RunProcesses(
        n,
        [&](Rank& rk) {
          std::vector<float> buf(count, 1.0f);
          ASSERT_EQ(papcclSuccess, papcclAllReduce(buf.data(), buf.data(), count, papcclFloat32,
                                                   papcclSum, rk.comm, nullptr));
          if (rk.rank == victim) raise(SIGKILL);
          ExpectWarn any;  // the dead-peer report
          const double t0 = NowS();
          papcclResult_t res = papcclAllReduce(buf.data(), buf.data(), count, papcclFloat32,
                                               papcclSum, rk.comm, nullptr);
          const double took = NowS() - t0;
          std::string why = papcclGetLastError(rk.comm);
          fprintf(stderr, "rank %d, count %zu: returned %d after %.2f s: %s\n", rk.rank, count,
                  (int)res, took, why.c_str());
          EXPECT_EQ(std::string::npos, why.find("timed out")) << why;
          // The victim dies right after the first allreduce: the call's time bounds the
          // detection's.
          ExpectDeadRankSeen(
              res, took, why, victim,
              "rank " + std::to_string(rk.rank) + ", count " + std::to_string(count));
          EXPECT_EQ(papcclSuccess, papcclCommAbort(rk.comm));
        },
        opt);
    ExpectKilledAndSurvivors(out, victim);
  }
}

// Rank 1 never joins the allreduce; rank 0 blocks in it until another thread aborts comm0.
TEST_F(Faults, AbortFromAnotherThreadUnblocksWaiter) {
  std::vector<papcclComm_t> comms(2, nullptr);
  ASSERT_EQ(papcclSuccess, papcclCommInitAll(comms.data(), 2, nullptr));
  const int64_t timeoutS = papTestCommParamTimeoutS();
  ExpectWarn any;  // the cancelled operation reports it
  std::atomic<double> abortedAt{0};
  papcclResult_t res = papcclSuccess;
  double returnedAt = 0;
  const double t0 = NowS();
  std::thread waiter([&] {
    std::vector<float> in(1 << 16, 1.0f), out(1 << 16);
    res = papcclAllReduce(in.data(), out.data(), in.size(), papcclFloat32, papcclSum, comms[0],
                          nullptr);
    returnedAt = NowS();
  });
  std::thread aborter([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    abortedAt = NowS();
    EXPECT_EQ(papcclSuccess, papcclCommAbort(comms[0]));
  });
  aborter.join();
  waiter.join();
  const double waitS = returnedAt - abortedAt.load();
  fprintf(stderr, "allreduce returned %d (%s) %.3f s after the abort (%.3f s after its start)\n",
          (int)res, papcclGetErrorString(res), waitS, returnedAt - t0);
  EXPECT_NE(papcclSuccess, res);
  EXPECT_GE(waitS, 0) << "the allreduce returned before the abort: it never waited for rank 1";
  // "Promptly": far below PAPCCL_TIMEOUT_S, which is what a missed abort would cost.
  EXPECT_LT(waitS, (double)timeoutS / 4) << "the abort did not unblock the waiting rank";
  std::vector<float> b(4);
  {
    ExpectWarn dead({"aborted"});
    EXPECT_EQ(papcclInvalidUsage,
              papcclAllReduce(b.data(), b.data(), 4, papcclFloat32, papcclSum, comms[0], nullptr));
  }
  EXPECT_EQ(papcclSuccess, papcclCommAbort(comms[1]));
}

// ---- Garbage clients on the bootstrap port --------------------------------------------------

// Connects to 127.0.0.1:port, retrying until deadlineS; returns the socket or -1.
int ConnectRetry(int port, double deadlineS) {
  const double end = NowS() + deadlineS;
  while (NowS() < end) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons((uint16_t)port);
    if (connect(fd, (sockaddr*)&a, sizeof(a)) == 0) return fd;
    close(fd);
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return -1;
}

TEST_F(Faults, GarbageClientOnBootstrapPort) {
  const int port = papTestFreeFixedPort();
  ASSERT_GT(port, 0);
  ScopedEnv commId("PAPCCL_COMM_ID", "127.0.0.1:" + std::to_string(port));
  ScopedEnv timeout("PAPCCL_TIMEOUT_S", "20");
  const int n = 3;
  ExpectWarn warned({"bootstrap"});
  std::atomic<bool> junkSent{false};
  int idle = -1;  // a client that says a few bytes and then nothing, open during init
  Options opt;
  opt.makeComm = false;
  opt.deadlineS = 120;
  auto done = RunThreads(
      n,
      [&](Rank& rk) {
        if (rk.rank == 1) {
          // Rank 0's init serves the port: wait for it, then send junk before joining.
          int fd = ConnectRetry(port, 30);
          EXPECT_GE(fd, 0) << "nothing listens on the PAPCCL_COMM_ID port";
          if (fd >= 0) {
            unsigned char junk[256];
            for (size_t i = 0; i < sizeof(junk); i++)
              junk[i] = (unsigned char)(i * 37 + 11);
            EXPECT_EQ((ssize_t)sizeof(junk), send(fd, junk, sizeof(junk), MSG_NOSIGNAL));
            idle = ConnectRetry(port, 5);
            if (idle >= 0) {
              const char partial[] = "GET / HT";
              send(idle, partial, sizeof(partial) - 1, MSG_NOSIGNAL);
            }
            std::this_thread::sleep_for(std::chrono::milliseconds(200));
            close(fd);
          }
          junkSent = true;
        }
        if (rk.rank == 2) {
          while (!junkSent)
            std::this_thread::sleep_for(std::chrono::milliseconds(5));
        }
        const double t0 = NowS();
        papcclComm_t comm = nullptr;
        papcclResult_t res = papcclCommInitRank(&comm, n, rk.id, rk.rank);
        fprintf(stderr, "rank %d: init returned %d after %.2f s\n", rk.rank, (int)res, NowS() - t0);
        ASSERT_EQ(papcclSuccess, res) << "rank " << rk.rank << ": " << papcclGetLastError(nullptr);
        rk.comm = comm;
        Case c;
        c.coll = Coll::kAllReduce;
        c.type = papcclInt32;
        c.count = 1000;
        RunCase(rk, c);
        EXPECT_EQ(papcclSuccess, papcclCommDestroy(comm));
      },
      opt);
  if (idle >= 0) close(idle);
  for (int r = 0; r < n; r++)
    EXPECT_TRUE(done[r]) << "rank " << r;
  EXPECT_GE(warned.Count(), 1) << "the root should report the garbage it dropped";
  for (const auto& m : warned.Messages())
    fprintf(stderr, "expected WARN: %s\n", m.c_str());
}

}  // namespace
}  // namespace papt
