// SPDX-License-Identifier: Apache-2.0
// One-sided calls (docs/ONE-SIDED.md) on shared memory: windows, puts with signals, signals
// alone and the signal waits, with checked data; puts that cross collectives; bad input; a
// dead target. The UCX case is in test_ucx.cc (Ucx.OneSidedPutSignal).
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "multirank/harness.h"

namespace papt {
namespace {

class OneSided : public Test, public ::testing::WithParamInterface<Mode> {};
class OneSidedApi : public Test {};

int32_t Val(int from, int k, size_t i) {
  return (int32_t)(from * 1000003 + k * 7919 + (int32_t)(i % 100003));
}

// count elements of v from index at must be Val(from, k, 0..count-1).
void CheckPart(const std::vector<int32_t>& v, size_t at, size_t count, int from, int k,
               const std::string& what) {
  for (size_t i = 0; i < count; i++)
    if (v[at + i] != Val(from, k, i)) {
      ADD_FAILURE() << what << ": element " << at + i << " is " << v[at + i] << ", expected "
                    << Val(from, k, i) << " (put " << k << " of rank " << from << ")";
      return;
    }
}

papcclWindow_t Register(Rank& rk, std::vector<int32_t>& buf) {
  papcclWindow_t win = nullptr;
  EXPECT_EQ(papcclSuccess,
            papcclCommWindowRegister(rk.comm, buf.data(), buf.size() * sizeof(int32_t), &win, 0))
      << papcclGetLastError(rk.comm);
  return win;
}

// Each rank puts into its successor's window and waits for its predecessor's put, in
// rounds of sizes from 1 element to many FIFO slots, at a different offset each round (no
// two rounds overlap: a successor may put the next round before this one is checked); an
// allreduce between the put and the wait shares the comm with the puts.
TEST_P(OneSided, RingOfPuts) {
  RunRanks(GetParam(), 4, [&](Rank& rk) {
    const size_t sizes[] = {1, 17, 70000, 300000};
    const size_t offsets[] = {0, 13, 40, 70100};
    std::vector<int32_t> win(370100 + 64, -1), src;
    papcclWindow_t w = Register(rk, win);
    ASSERT_NE(nullptr, w);
    int next = (rk.rank + 1) % rk.nranks, prev = (rk.rank + rk.nranks - 1) % rk.nranks;
    for (int k = 0; k < 4; k++) {
      size_t count = sizes[k], at = offsets[k];
      src.assign(count, 0);
      for (size_t i = 0; i < count; i++)
        src[i] = Val(rk.rank, k, i);
      ASSERT_EQ(papcclSuccess, papcclPutSignal(src.data(), count, papcclInt32, next, w,
                                               at * sizeof(int32_t), 0, 0, 0, rk.comm, nullptr))
          << papcclGetLastError(rk.comm);
      float f = 1;
      ASSERT_EQ(papcclSuccess,
                papcclAllReduce(&f, &f, 1, papcclFloat32, papcclSum, rk.comm, nullptr));
      EXPECT_EQ((float)rk.nranks, f);
      papcclWaitSignalDesc_t d = {1, prev, 0, 0};
      ASSERT_EQ(papcclSuccess, papcclWaitSignal(1, &d, rk.comm, nullptr))
          << papcclGetLastError(rk.comm);
      CheckPart(win, at, count, prev, k, "round " + std::to_string(k));
    }
    EXPECT_EQ(papcclSuccess, papcclCommWindowDeregister(rk.comm, w));
  });
}

// Many puts of one rank to its successor, then one wait for all of them (opCnt), checked;
// the counts are taken: a second wait for the next batch waits for new puts. The batches
// land in separate halves of the window (what orders a batch after the check of the one
// before is the allreduce between them, an order ThreadSanitizer does not see through the
// flat allreduce's shared lines).
TEST_P(OneSided, ManyPutsOneWait) {
  RunRanks(GetParam(), 4, [&](Rank& rk) {
    const int kPuts = 20;
    const size_t count = 5000;
    std::vector<int32_t> win(2 * kPuts * count, -1), src(count);
    papcclWindow_t w = Register(rk, win);
    ASSERT_NE(nullptr, w);
    int next = (rk.rank + 1) % rk.nranks, prev = (rk.rank + rk.nranks - 1) % rk.nranks;
    for (int batch = 0; batch < 2; batch++) {
      for (int k = 0; k < kPuts; k++) {
        for (size_t i = 0; i < count; i++)
          src[i] = Val(rk.rank, batch * kPuts + k, i);
        ASSERT_EQ(papcclSuccess,
                  papcclPutSignal(src.data(), count, papcclInt32, next, w,
                                  (size_t)(batch * kPuts + k) * count * sizeof(int32_t), 3, 0, 0,
                                  rk.comm, nullptr))
            << papcclGetLastError(rk.comm);
      }
      papcclWaitSignalDesc_t d = {kPuts, prev, 3, 0};
      ASSERT_EQ(papcclSuccess, papcclWaitSignal(1, &d, rk.comm, nullptr))
          << papcclGetLastError(rk.comm);
      for (int k = 0; k < kPuts; k++)
        CheckPart(win, (size_t)(batch * kPuts + k) * count, count, prev, batch * kPuts + k,
                  "batch " + std::to_string(batch) + " put " + std::to_string(k));
      float f = 0;
      ASSERT_EQ(papcclSuccess,
                papcclAllReduce(&f, &f, 1, papcclFloat32, papcclSum, rk.comm, nullptr));
    }
    EXPECT_EQ(papcclSuccess, papcclCommWindowDeregister(rk.comm, w));
  });
}

// Every rank puts into every peer's window (its own slot there) and waits with one
// descriptor per peer; then signals alone (papcclSignal and puts of zero elements).
TEST_P(OneSided, AllPeersAndSignalsAlone) {
  RunRanks(GetParam(), 4, [&](Rank& rk) {
    const size_t count = 3000;
    std::vector<int32_t> win((size_t)rk.nranks * count, -1), src(count);
    papcclWindow_t w = Register(rk, win);
    ASSERT_NE(nullptr, w);
    for (int p = 0; p < rk.nranks; p++) {
      for (size_t i = 0; i < count; i++)
        src[i] = Val(rk.rank, p, i);
      ASSERT_EQ(papcclSuccess, papcclPutSignal(src.data(), count, papcclInt32, p, w,
                                               (size_t)rk.rank * count * sizeof(int32_t), 1, 0, 0,
                                               rk.comm, nullptr))
          << papcclGetLastError(rk.comm);
    }
    std::vector<papcclWaitSignalDesc_t> d;
    for (int p = 0; p < rk.nranks; p++)
      d.push_back({1, p, 1, 0});
    ASSERT_EQ(papcclSuccess, papcclWaitSignal((int)d.size(), d.data(), rk.comm, nullptr))
        << papcclGetLastError(rk.comm);
    for (int p = 0; p < rk.nranks; p++)
      CheckPart(win, (size_t)p * count, count, p, rk.rank, "slot of rank " + std::to_string(p));
    // Signals alone: three to every peer on signal 5 (two papcclSignal, one empty put).
    for (int p = 0; p < rk.nranks; p++) {
      ASSERT_EQ(papcclSuccess, papcclSignal(p, 5, 0, 0, rk.comm, nullptr));
      ASSERT_EQ(papcclSuccess,
                papcclPutSignal(src.data(), 0, papcclInt32, p, w, 0, 5, 0, 0, rk.comm, nullptr));
      ASSERT_EQ(papcclSuccess, papcclSignal(p, 5, 0, 0, rk.comm, nullptr));
    }
    for (auto& e : d) {
      e.sigIdx = 5;
      e.opCnt = 3;
    }
    ASSERT_EQ(papcclSuccess, papcclWaitSignal((int)d.size(), d.data(), rk.comm, nullptr))
        << papcclGetLastError(rk.comm);
    EXPECT_EQ(papcclSuccess, papcclCommWindowDeregister(rk.comm, w));
  });
}

// Data before signal: rank 1 already waits when rank 0's 16 MiB put (32 times the FIFO)
// starts; the moment the wait returns, the put's last element is there (checked first: it
// arrives last).
TEST_P(OneSided, DataBeforeSignal) {
  RunRanks(GetParam(), 2, [&](Rank& rk) {
    const size_t count = 4 << 20;
    std::vector<int32_t> win(2 * count, -1);  // one half per round
    papcclWindow_t w = Register(rk, win);
    ASSERT_NE(nullptr, w);
    for (int k = 0; k < 2; k++) {
      float f = 0;
      ASSERT_EQ(papcclSuccess,
                papcclAllReduce(&f, &f, 1, papcclFloat32, papcclSum, rk.comm, nullptr));
      if (rk.rank == 0) {
        std::vector<int32_t> src(count);
        for (size_t i = 0; i < count; i++)
          src[i] = Val(0, k, i);
        ASSERT_EQ(papcclSuccess,
                  papcclPutSignal(src.data(), count, papcclInt32, 1, w,
                                  (size_t)k * count * sizeof(int32_t), 0, 0, 0, rk.comm, nullptr));
        continue;
      }
      papcclWaitSignalDesc_t d = {1, 0, 0, 0};
      ASSERT_EQ(papcclSuccess, papcclWaitSignal(1, &d, rk.comm, nullptr));
      size_t at = (size_t)k * count;
      ASSERT_EQ(Val(0, k, count - 1), win[at + count - 1]) << "the signal came before the data";
      CheckPart(win, at, count, 0, k, "put " + std::to_string(k));
    }
    EXPECT_EQ(papcclSuccess, papcclCommWindowDeregister(rk.comm, w));
  });
}

INSTANTIATE_TEST_SUITE_P(Modes, OneSided, ::testing::Values(Mode::kThreads, Mode::kProcesses),
                         [](const ::testing::TestParamInfo<Mode>& info) {
                           return std::string(ModeName(info.param));
                         });

// Bad input: each refused with one WARN naming the call and the argument.
TEST_F(OneSidedApi, BadInput) {
  RunThreads(2, [&](Rank& rk) {
    std::vector<int32_t> buf(64, 0);
    papcclWindow_t w = nullptr;
    {
      ExpectWarn warn({"papcclSignal: no window was registered"});
      EXPECT_EQ(papcclInvalidUsage, papcclSignal(0, 0, 0, 0, rk.comm, nullptr));
    }
    {
      ExpectWarn warn({"winFlags"});
      EXPECT_EQ(papcclInvalidUsage, papcclCommWindowRegister(rk.comm, buf.data(), 256, &w, 0x01));
      EXPECT_EQ(nullptr, w);
    }
    {
      ExpectWarn warn({"win is NULL"});
      EXPECT_EQ(papcclInvalidArgument,
                papcclCommWindowRegister(rk.comm, buf.data(), 256, nullptr, 0));
    }
    w = Register(rk, buf);
    ASSERT_NE(nullptr, w);
    papcclComm_t other = nullptr;
    ASSERT_EQ(papcclSuccess, papcclCommSplit(rk.comm, 0, rk.rank, &other, nullptr));
    Rank ork = rk;
    ork.comm = other;
    papcclWindow_t ow = Register(ork, buf);
    ASSERT_NE(nullptr, ow);
    int32_t x = 1;
    struct Bad {
      const char* warn;
      papcclResult_t res;
      std::function<papcclResult_t()> call;
    };
    std::vector<Bad> bad = {
        {"peerWin is NULL", papcclInvalidArgument,
         [&] { return papcclPutSignal(&x, 1, papcclInt32, 0, nullptr, 0, 0, 0, 0, rk.comm, 0); }},
        {"not a window of this communicator", papcclInvalidArgument,
         [&] { return papcclPutSignal(&x, 1, papcclInt32, 0, ow, 0, 0, 0, 0, rk.comm, 0); }},
        {"do not fit peer 1's part", papcclInvalidArgument,
         [&] { return papcclPutSignal(&x, 1, papcclInt32, 1, w, 256, 0, 0, 0, rk.comm, 0); }},
        {"do not fit peer 0's part", papcclInvalidArgument,
         [&] { return papcclPutSignal(&x, 2, papcclInt32, 0, w, 252, 0, 0, 0, rk.comm, 0); }},
        {"peer 2 is not a rank", papcclInvalidArgument,
         [&] { return papcclPutSignal(&x, 1, papcclInt32, 2, w, 0, 0, 0, 0, rk.comm, 0); }},
        {"sigIdx 64 is out of range", papcclInvalidArgument,
         [&] { return papcclPutSignal(&x, 1, papcclInt32, 0, w, 0, 64, 0, 0, rk.comm, 0); }},
        {"sigIdx -1 is out of range", papcclInvalidArgument,
         [&] { return papcclSignal(0, -1, 0, 0, rk.comm, 0); }},
        {"ctx 1 is not supported", papcclInvalidUsage,
         [&] { return papcclPutSignal(&x, 1, papcclInt32, 0, w, 0, 0, 1, 0, rk.comm, 0); }},
        {"flags 0x2 are not supported", papcclInvalidUsage,
         [&] { return papcclSignal(0, 0, 0, 2, rk.comm, 0); }},
        {"localbuff is NULL", papcclInvalidArgument,
         [&] { return papcclPutSignal(nullptr, 1, papcclInt32, 0, w, 0, 0, 0, 0, rk.comm, 0); }},
        {"opCnt is -1", papcclInvalidArgument,
         [&] {
           papcclWaitSignalDesc_t d = {-1, 0, 0, 0};
           return papcclWaitSignal(1, &d, rk.comm, 0);
         }},
        {"peer 5 is not a rank", papcclInvalidArgument,
         [&] {
           papcclWaitSignalDesc_t d = {1, 5, 0, 0};
           return papcclWaitSignal(1, &d, rk.comm, 0);
         }},
        {"nDesc 2 with signalDescs", papcclInvalidArgument,
         [&] { return papcclWaitSignal(2, nullptr, rk.comm, 0); }},
    };
    for (auto& b : bad) {
      ExpectWarn warn({b.warn});
      EXPECT_EQ(b.res, b.call()) << b.warn;
      EXPECT_TRUE(warn.Saw(b.warn)) << papcclGetLastError(rk.comm);
    }
    // The comm still works after all that: one put each way.
    x = 40 + rk.rank;
    ASSERT_EQ(papcclSuccess,
              papcclPutSignal(&x, 1, papcclInt32, 1 - rk.rank, w, 8, 2, 0, 0, rk.comm, nullptr));
    papcclWaitSignalDesc_t d = {1, 1 - rk.rank, 2, 0};
    ASSERT_EQ(papcclSuccess, papcclWaitSignal(1, &d, rk.comm, nullptr));
    EXPECT_EQ(40 + (1 - rk.rank), buf[2]);
    void* p = nullptr;
    EXPECT_EQ(papcclSuccess, papcclWinGetUserPtr(rk.comm, w, &p));
    EXPECT_EQ((void*)buf.data(), p);
    EXPECT_EQ(papcclSuccess, papcclCommWindowDeregister(rk.comm, w));
    {
      ExpectWarn warn({"not a window of this communicator"});
      EXPECT_EQ(papcclInvalidArgument, papcclCommWindowDeregister(rk.comm, w));
    }
    EXPECT_EQ(papcclSuccess, papcclCommWindowDeregister(other, ow));
    EXPECT_EQ(papcclSuccess, papcclCommDestroy(other));
  });
}

// A wait for a signal that never comes ends at PAPCCL_TIMEOUT_S with a WARN that names it;
// the channel goes on: a second window, a put and a wait work after it.
TEST_F(OneSidedApi, TimeoutThenGoOn) {
  ScopedEnv timeout("PAPCCL_TIMEOUT_S", "2");
  std::atomic<int> timedOut{0};
  RunThreads(2, [&](Rank& rk) {
    std::vector<int32_t> a(16, -1), b(16, -1);
    papcclWindow_t wa = Register(rk, a);
    ASSERT_NE(nullptr, wa);
    if (rk.rank == 0) {
      ExpectWarn warn({"one-sided: rank 0 waits"});
      papcclWaitSignalDesc_t d = {1, 1, 9, 0};
      EXPECT_EQ(papcclRemoteError, papcclWaitSignal(1, &d, rk.comm, nullptr));
      EXPECT_NE(std::string::npos, std::string(papcclGetLastError(rk.comm)).find("timed out"))
          << papcclGetLastError(rk.comm);
      timedOut.store(1);
    } else {
      while (timedOut.load() == 0)
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    papcclWindow_t wb = Register(rk, b);
    ASSERT_NE(nullptr, wb);
    int32_t x = 100 + rk.rank;
    ASSERT_EQ(papcclSuccess,
              papcclPutSignal(&x, 1, papcclInt32, 1 - rk.rank, wb, 12, 9, 0, 0, rk.comm, nullptr))
        << papcclGetLastError(rk.comm);
    papcclWaitSignalDesc_t d = {1, 1 - rk.rank, 9, 0};
    ASSERT_EQ(papcclSuccess, papcclWaitSignal(1, &d, rk.comm, nullptr))
        << papcclGetLastError(rk.comm);
    EXPECT_EQ(100 + (1 - rk.rank), b[3]);
    EXPECT_EQ(-1, a[3]) << "a put to window b landed in window a";
    EXPECT_EQ(papcclSuccess, papcclCommWindowDeregister(rk.comm, wb));
    EXPECT_EQ(papcclSuccess, papcclCommWindowDeregister(rk.comm, wa));
  });
}

// An abort from another thread ends a signal wait (and the channel's thread with the comm).
TEST_F(OneSidedApi, AbortEndsAWait) {
  Options opt;
  opt.destroy = false;
  std::atomic<int> waitEnded{0};
  RunThreads(
      2,
      [&](Rank& rk) {
        std::vector<int32_t> a(16, -1);
        papcclWindow_t w = Register(rk, a);
        ASSERT_NE(nullptr, w);
        if (rk.rank == 1) {
          // An aborted peer is a failed one: rank 1 ends only after rank 0's wait did.
          while (waitEnded.load() == 0)
            std::this_thread::sleep_for(std::chrono::milliseconds(5));
          EXPECT_EQ(papcclSuccess, papcclCommAbort(rk.comm));
          return;
        }
        ExpectWarn any;
        std::thread aborter([&] {
          std::this_thread::sleep_for(std::chrono::milliseconds(200));
          EXPECT_EQ(papcclSuccess, papcclCommAbort(rk.comm));
        });
        papcclWaitSignalDesc_t d = {1, 1, 0, 0};
        EXPECT_NE(papcclSuccess, papcclWaitSignal(1, &d, rk.comm, nullptr));
        aborter.join();
        waitEnded.store(1);
      },
      opt);
}

// A wait does not hold up a put from another thread of the same rank: rank 0 waits for
// rank 1's answer on one thread and puts the question on another; rank 1 answers after
// the question arrived.
TEST_F(OneSidedApi, WaitAndPutFromTwoThreads) {
  RunThreads(2, [&](Rank& rk) {
    std::vector<int32_t> a(16, -1);
    papcclWindow_t w = Register(rk, a);
    ASSERT_NE(nullptr, w);
    int32_t q = 11, ans = 22;
    if (rk.rank == 0) {
      papcclResult_t waitRes = papcclInternalError;
      std::thread waiter([&] {
        papcclWaitSignalDesc_t d = {1, 1, 4, 0};
        waitRes = papcclWaitSignal(1, &d, rk.comm, nullptr);
      });
      std::this_thread::sleep_for(std::chrono::milliseconds(50));  // the waiter goes first
      EXPECT_EQ(papcclSuccess,
                papcclPutSignal(&q, 1, papcclInt32, 1, w, 0, 4, 0, 0, rk.comm, nullptr));
      waiter.join();
      EXPECT_EQ(papcclSuccess, waitRes) << papcclGetLastError(rk.comm);
      EXPECT_EQ(ans, a[1]);
    } else {
      papcclWaitSignalDesc_t d = {1, 0, 4, 0};
      ASSERT_EQ(papcclSuccess, papcclWaitSignal(1, &d, rk.comm, nullptr));
      EXPECT_EQ(q, a[0]);
      ASSERT_EQ(papcclSuccess,
                papcclPutSignal(&ans, 1, papcclInt32, 0, w, 4, 4, 0, 0, rk.comm, nullptr));
    }
    EXPECT_EQ(papcclSuccess, papcclCommWindowDeregister(rk.comm, w));
  });
}

// A target that dies: the rank waiting for its signal and the rank whose put to it cannot
// leave (larger than the FIFO) both fail with papcclRemoteError and a WARN naming it (a
// timeout, PAPCCL_TIMEOUT_S, would be papcclRemoteError too, but its WARN names no dead rank).
TEST_F(OneSidedApi, DeadTarget) {
  ScopedEnv timeout("PAPCCL_TIMEOUT_S", "60");
  Options opt;
  opt.destroy = false;
  opt.deadlineS = 120;
  const int victim = 1;
  SharedTime died;
  auto out = RunProcesses(
      3,
      [&](Rank& rk) {
        std::vector<int32_t> win(4 << 20, 0);
        papcclWindow_t w = Register(rk, win);
        ASSERT_NE(nullptr, w);
        if (rk.rank == victim) {
          std::this_thread::sleep_for(std::chrono::milliseconds(300));
          died.Set(NowS());
          raise(SIGKILL);
        }
        ExpectWarn any;
        papcclResult_t res;
        if (rk.rank == 0) {
          papcclWaitSignalDesc_t d = {1, victim, 0, 0};
          res = papcclWaitSignal(1, &d, rk.comm, nullptr);
        } else {
          // Puts once the victim is going: 16 MiB, far more than the FIFO holds.
          while (died.Get() == 0)
            std::this_thread::sleep_for(std::chrono::milliseconds(10));
          std::vector<int32_t> src(4 << 20, 7);
          res = papcclPutSignal(src.data(), src.size(), papcclInt32, victim, w, 0, 0, 0, 0, rk.comm,
                                nullptr);
        }
        EXPECT_EQ(papcclRemoteError, res) << papcclGetLastError(rk.comm);
        EXPECT_TRUE(NamesDeadRank(papcclGetLastError(rk.comm), victim))
            << papcclGetLastError(rk.comm);
        EXPECT_EQ(papcclSuccess, papcclCommAbort(rk.comm));
      },
      opt);
  ExpectKilledAndSurvivors(out, victim);
}

}  // namespace
}  // namespace papt
