// SPDX-License-Identifier: Apache-2.0
// papcclRecvAny, the receive from any source: which message it takes (the first there, in
// per-sender order), its mix with named receives and collectives, and its failures (bad
// input, no sender until the timeout, abort from another thread, a dead peer).
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

class AnySource : public Test, public ::testing::WithParamInterface<Mode> {};
class AnySourceApi : public Test {};

std::string ModeParamName(const ::testing::TestParamInfo<Mode>& info) {
  return ModeName(info.param);
}

int32_t Value(int from, int k, size_t i) {
  return (int32_t)(from * 1000003 + k * 1009 + (int32_t)(i % 100003));
}

void Fill(std::vector<int32_t>& v, int from, int k) {
  for (size_t i = 0; i < v.size(); i++)
    v[i] = Value(from, k, i);
}

// The message's first element names its sender and number; every element must agree.
void CheckMessage(const std::vector<int32_t>& v, int from, int k, const std::string& what) {
  for (size_t i = 0; i < v.size(); i++)
    if (v[i] != Value(from, k, i)) {
      ADD_FAILURE() << what << ": element " << i << " is " << v[i] << ", expected "
                    << Value(from, k, i) << " (message " << k << " of rank " << from << ")";
      return;
    }
}

// Every other rank sends kMsgs messages to rank 0, first of several slots each, then small
// ones; rank 0 takes them all from any source: each carries what its reported sender sent,
// each sender's messages come in its send order, and none is lost or taken twice.
TEST_P(AnySource, ManySendersOneReceiver) {
  const Mode mode = GetParam();
  const int kMsgs = 6;
  for (int n : {2, 3, 4}) {
    RunRanks(mode, n, [&](Rank& rk) {
      for (size_t count : {(size_t)70000, (size_t)17}) {
        // Any source means any: a sender done with the large messages must not send its
        // small ones while rank 0 still takes large ones (a barrier between the sizes).
        float b = 0;
        ASSERT_EQ(papcclSuccess,
                  papcclAllReduce(&b, &b, 1, papcclFloat32, papcclSum, rk.comm, nullptr));
        std::vector<int32_t> buf(count, -1);
        if (rk.rank != 0) {
          for (int k = 0; k < kMsgs; k++) {
            Fill(buf, rk.rank, k);
            ASSERT_EQ(papcclSuccess,
                      papcclSend(buf.data(), count, papcclInt32, 0, rk.comm, nullptr));
          }
          continue;
        }
        std::vector<int> next(n, 0);  // the next message number expected of each sender
        for (int m = 0; m < (n - 1) * kMsgs; m++) {
          int peer = -1;
          ASSERT_EQ(papcclSuccess,
                    papcclRecvAny(buf.data(), count, papcclInt32, &peer, rk.comm, nullptr))
              << papcclGetLastError(rk.comm);
          ASSERT_GE(peer, 1);
          ASSERT_LT(peer, n);
          ASSERT_LT(next[peer], kMsgs) << "a message too many from rank " << peer;
          CheckMessage(buf, peer, next[peer],
                       "n=" + std::to_string(n) + " count=" + std::to_string(count) + " receive " +
                           std::to_string(m));
          next[peer]++;
        }
        for (int p = 1; p < n; p++)
          EXPECT_EQ(kMsgs, next[p]) << "messages taken from rank " << p;
      }
    });
  }
}

// The match is whoever's message is there: rank 1 sends only after rank 0's first receive
// from any source returned (it waits for rank 0's named message), so that receive can only
// take rank 2's message, however the ranks are scheduled. Named receives and a collective
// between them use the same peers without confusion.
TEST_P(AnySource, TakesTheMessageThatIsThere) {
  RunRanks(GetParam(), 3, [&](Rank& rk) {
    const size_t count = 1000;
    std::vector<int32_t> buf(count, -1), one(1, 0);
    if (rk.rank == 2) {
      Fill(buf, 2, 0);
      ASSERT_EQ(papcclSuccess, papcclSend(buf.data(), count, papcclInt32, 0, rk.comm, nullptr));
    } else if (rk.rank == 1) {
      ASSERT_EQ(papcclSuccess, papcclRecv(one.data(), 1, papcclInt32, 0, rk.comm, nullptr));
      EXPECT_EQ(42, one[0]);
      Fill(buf, 1, 0);
      ASSERT_EQ(papcclSuccess, papcclSend(buf.data(), count, papcclInt32, 0, rk.comm, nullptr));
    } else {
      int peer = -1;
      ASSERT_EQ(papcclSuccess,
                papcclRecvAny(buf.data(), count, papcclInt32, &peer, rk.comm, nullptr));
      EXPECT_EQ(2, peer);
      CheckMessage(buf, 2, 0, "first receive from any source");
      one[0] = 42;
      ASSERT_EQ(papcclSuccess, papcclSend(one.data(), 1, papcclInt32, 1, rk.comm, nullptr));
      ASSERT_EQ(papcclSuccess,
                papcclRecvAny(buf.data(), count, papcclInt32, &peer, rk.comm, nullptr));
      EXPECT_EQ(1, peer);
      CheckMessage(buf, 1, 0, "second receive from any source");
    }
    // A collective after it, then the same pattern with a named receive in between.
    std::vector<float> x(64, (float)(rk.rank + 1)), y(64, 0);
    ASSERT_EQ(papcclSuccess,
              papcclAllReduce(x.data(), y.data(), 64, papcclFloat32, papcclSum, rk.comm, nullptr));
    EXPECT_EQ(6.0f, y[0]);
    if (rk.rank != 0) {
      Fill(buf, rk.rank, 1);
      ASSERT_EQ(papcclSuccess, papcclSend(buf.data(), count, papcclInt32, 0, rk.comm, nullptr));
    } else {
      ASSERT_EQ(papcclSuccess, papcclRecv(buf.data(), count, papcclInt32, 1, rk.comm, nullptr));
      CheckMessage(buf, 1, 1, "named receive from 1");
      int peer = -1;
      ASSERT_EQ(papcclSuccess,
                papcclRecvAny(buf.data(), count, papcclInt32, &peer, rk.comm, nullptr));
      EXPECT_EQ(2, peer) << "rank 1 has sent nothing more";
      CheckMessage(buf, 2, 1, "receive from any source after a named one");
    }
  });
}

INSTANTIATE_TEST_SUITE_P(Modes, AnySource, ::testing::Values(Mode::kThreads, Mode::kProcesses),
                         ModeParamName);

TEST_F(AnySourceApi, BadInput) {
  RunRanks(Mode::kThreads, 2, [&](Rank& rk) {
    std::vector<int32_t> buf(8);
    int peer = 5;
    {
      ExpectWarn w({"papcclRecvAny: peer is NULL"});
      EXPECT_EQ(papcclInvalidArgument,
                papcclRecvAny(buf.data(), 8, papcclInt32, nullptr, rk.comm, nullptr));
    }
    {
      ExpectWarn w({"papcclRecvAny: count is 0"});
      EXPECT_EQ(papcclInvalidArgument,
                papcclRecvAny(buf.data(), 0, papcclInt32, &peer, rk.comm, nullptr));
    }
    {
      ExpectWarn w({"papcclRecvAny: recvbuff"});
      EXPECT_EQ(papcclInvalidArgument,
                papcclRecvAny(nullptr, 8, papcclInt32, &peer, rk.comm, nullptr));
    }
    {
      ExpectWarn w({"papcclRecvAny"});
      EXPECT_NE(papcclSuccess,
                papcclRecvAny(buf.data(), 8, (papcclDataType_t)99, &peer, rk.comm, nullptr));
    }
    {
      ExpectWarn w({"papcclRecvAny: not inside a group"});
      ASSERT_EQ(papcclSuccess, papcclGroupStart());
      EXPECT_EQ(papcclInvalidUsage,
                papcclRecvAny(buf.data(), 8, papcclInt32, &peer, rk.comm, nullptr));
      ASSERT_EQ(papcclSuccess, papcclGroupEnd());
    }
    {
      ExpectWarn w({"papcclRecvAny: comm is NULL"});
      EXPECT_EQ(papcclInvalidArgument,
                papcclRecvAny(buf.data(), 8, papcclInt32, &peer, nullptr, nullptr));
    }
    EXPECT_EQ(5, peer) << "a refused call leaves peer alone";
    // The comm still works after the refusals: an exchange through any source.
    std::vector<int32_t> out(8);
    Fill(out, rk.rank, 3);
    if (rk.rank == 1) {
      ASSERT_EQ(papcclSuccess, papcclSend(out.data(), 8, papcclInt32, 0, rk.comm, nullptr));
    } else {
      ASSERT_EQ(papcclSuccess, papcclRecvAny(buf.data(), 8, papcclInt32, &peer, rk.comm, nullptr));
      EXPECT_EQ(1, peer);
      CheckMessage(buf, 1, 3, "after bad input");
    }
  });
}

TEST_F(AnySourceApi, OneRankHasNoPeer) {
  RunRanks(Mode::kThreads, 1, [&](Rank& rk) {
    std::vector<int32_t> buf(8);
    int peer = -1;
    ExpectWarn w({"no peer to receive from"});
    EXPECT_EQ(papcclInvalidUsage,
              papcclRecvAny(buf.data(), 8, papcclInt32, &peer, rk.comm, nullptr));
  });
}

// Nobody sends: the receive gives up at PAPCCL_TIMEOUT_S with a WARN that names it; abort
// from another thread ends it at once. Rank 1 aborts only after rank 0 timed out, and rank 0
// ends its comm only after rank 1 is done: a comm that ends after a failure counts as gone
// to its peers, so either end would cut the other's wait short.
TEST_F(AnySourceApi, TimeoutAndAbort) {
  ScopedEnv timeout("PAPCCL_TIMEOUT_S", "1");
  Options opt;
  opt.destroy = false;
  std::atomic<bool> rank0TimedOut{false}, rank1Done{false};
  RunThreads(
      2,
      [&](Rank& rk) {
        std::vector<int32_t> buf(8);
        int peer = -1;
        if (rk.rank == 0) {
          ExpectWarn w({"receive from any source on rank 0"});
          double t0 = NowS();
          EXPECT_EQ(papcclRemoteError,
                    papcclRecvAny(buf.data(), 8, papcclInt32, &peer, rk.comm, nullptr));
          EXPECT_GE(NowS() - t0, 0.9);
          rank0TimedOut = true;
          while (!rank1Done)
            std::this_thread::sleep_for(std::chrono::milliseconds(10));
        } else {
          ExpectWarn w;  // the abort's WARN
          std::thread killer([&] {
            while (!rank0TimedOut)
              std::this_thread::sleep_for(std::chrono::milliseconds(10));
            std::this_thread::sleep_for(std::chrono::milliseconds(100));
            papcclCommAbort(rk.comm);
          });
          EXPECT_NE(papcclSuccess,
                    papcclRecvAny(buf.data(), 8, papcclInt32, &peer, rk.comm, nullptr));
          killer.join();
          rank1Done = true;
          return;
        }
        EXPECT_EQ(papcclSuccess, papcclCommAbort(rk.comm));
      },
      opt);
}

// A peer that dies while rank 0 waits for any source fails the receive within seconds.
TEST_F(AnySourceApi, DeadPeer) {
  ScopedEnv timeout("PAPCCL_TIMEOUT_S", "30");
  Options opt;
  opt.destroy = false;
  opt.deadlineS = 60;
  const int victim = 1;
  auto out = RunProcesses(
      3,
      [&](Rank& rk) {
        if (rk.rank == victim) {
          std::this_thread::sleep_for(std::chrono::milliseconds(300));
          raise(SIGKILL);
        }
        if (rk.rank != 0) {
          // Rank 2 waits for rank 0's word that it saw the failure; it sends nothing before.
          std::vector<int32_t> one(1);
          ExpectWarn any;
          (void)papcclRecv(one.data(), 1, papcclInt32, 0, rk.comm, nullptr);
          EXPECT_EQ(papcclSuccess, papcclCommAbort(rk.comm));
          return;
        }
        ExpectWarn any;
        std::vector<int32_t> buf(8);
        int peer = -1;
        double t0 = NowS();
        EXPECT_EQ(papcclRemoteError,
                  papcclRecvAny(buf.data(), 8, papcclInt32, &peer, rk.comm, nullptr));
        EXPECT_LT(NowS() - t0, 10.0) << "the death must be seen long before the timeout";
        EXPECT_EQ(papcclSuccess, papcclCommAbort(rk.comm));
      },
      opt);
  ExpectKilledAndSurvivors(out, victim);
}

}  // namespace
}  // namespace papt
