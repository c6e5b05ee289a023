// SPDX-License-Identifier: Apache-2.0
// Groups: several collectives in one group, point-to-point rings and exchanges, self
// send/receive, nesting, one thread driving every rank, and unbalanced group calls.
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "multirank/harness.h"

namespace papt {
namespace {

class Groups : public Test, public ::testing::WithParamInterface<Mode> {};
class GroupsApi : public Test {};

std::string ModeParamName(const ::testing::TestParamInfo<Mode>& info) {
  return ModeName(info.param);
}

// Deterministic payload of a message from rank `from` to rank `to` (tag `k`), as int32.
int32_t P2pValue(int from, int to, int k, size_t i) {
  return (int32_t)(from * 1000003 + to * 10007 + k * 101 + (int32_t)(i % 100000));
}

void FillP2p(std::vector<int32_t>& v, int from, int to, int k) {
  for (size_t i = 0; i < v.size(); i++)
    v[i] = P2pValue(from, to, k, i);
}

bool CheckP2p(const std::vector<int32_t>& v, int from, int to, int k, const std::string& what) {
  for (size_t i = 0; i < v.size(); i++) {
    if (v[i] != P2pValue(from, to, k, i)) {
      ADD_FAILURE() << what << ": element " << i << " is " << v[i] << ", expected "
                    << P2pValue(from, to, k, i) << " (message " << from << "->" << to << " #" << k
                    << ")";
      return false;
    }
  }
  return true;
}

// ---- Several collectives of different kinds in one group --------------------------------

TEST_P(Groups, SeveralCollectivesInOneGroup) {
  const Mode mode = GetParam();
  for (int n : {1, 3, 4}) {
    RunRanks(mode, n, [&](Rank& rk) {
      std::vector<Case> cases;
      uint32_t seed = 11;
      auto add = [&](Coll coll, papcclDataType_t t, Op op, size_t count, bool inPlace) {
        Case c;
        c.coll = coll;
        c.type = t;
        c.op = op;
        c.count = count;
        c.inPlace = inPlace;
        c.root = (int)seed;
        c.seed = seed++;
        cases.push_back(c);
      };
      add(Coll::kAllReduce, papcclFloat32, Op::kSum, 1000, false);
      add(Coll::kBroadcast, papcclInt32, Op::kSum, 777, true);
      add(Coll::kAllGather, papcclFloat16, Op::kSum, 301, false);
      add(Coll::kReduceScatter, papcclInt64, Op::kMax, 129, true);
      add(Coll::kAlltoAll, papcclUint8, Op::kSum, 55, false);
      add(Coll::kReduce, papcclBfloat16, Op::kPreMulSum, 1000, false);
      add(Coll::kGather, papcclFloat64, Op::kSum, 17, true);
      add(Coll::kScatter, papcclInt8, Op::kSum, 33, false);
      add(Coll::kAllReduce, papcclFloat8e4m3, Op::kAvg, 70001, true);
      add(Coll::kSendRecv, papcclFloat32, Op::kSum, 4099, false);
      std::vector<std::unique_ptr<CaseRunner>> runs;
      for (const Case& c : cases)
        runs.emplace_back(new CaseRunner(rk, c));
      ASSERT_EQ(papcclSuccess, papcclGroupStart());
      for (auto& run : runs)
        run->Issue();
      EXPECT_EQ(papcclSuccess, papcclGroupEnd()) << papcclGetLastError(rk.comm);
      for (auto& run : runs)
        run->Verify();
    });
  }
}

// ---- Point to point -------------------------------------------------------------------------

// Each rank sends to r+1 and receives from r-1, and the reverse, in one group (for two ranks
// both messages of each direction go to the same peer, matched in order).
TEST_P(Groups, SendRecvRingBothDirections) {
  const Mode mode = GetParam();
  for (int n : {2, 3, 4, 8}) {
    RunRanks(mode, n, [&](Rank& rk) {
      const int r = rk.rank;
      const int next = (r + 1) % n, prev = (r - 1 + n) % n;
      const size_t count = 100003;
      std::vector<int32_t> toNext(count), toPrev(count), fromPrev(count, -1), fromNext(count, -1);
      FillP2p(toNext, r, next, 0);
      FillP2p(toPrev, r, prev, 1);
      ASSERT_EQ(papcclSuccess, papcclGroupStart());
      // Issue order differs by rank on purpose: inside a group it must not matter.
      if (r % 2 == 0) {
        EXPECT_EQ(papcclSuccess, papcclSend(toNext.data(), count, papcclInt32, next, rk.comm, 0));
        EXPECT_EQ(papcclSuccess, papcclRecv(fromPrev.data(), count, papcclInt32, prev, rk.comm, 0));
        EXPECT_EQ(papcclSuccess, papcclSend(toPrev.data(), count, papcclInt32, prev, rk.comm, 0));
        EXPECT_EQ(papcclSuccess, papcclRecv(fromNext.data(), count, papcclInt32, next, rk.comm, 0));
      } else {
        EXPECT_EQ(papcclSuccess, papcclRecv(fromNext.data(), count, papcclInt32, next, rk.comm, 0));
        EXPECT_EQ(papcclSuccess, papcclRecv(fromPrev.data(), count, papcclInt32, prev, rk.comm, 0));
        EXPECT_EQ(papcclSuccess, papcclSend(toPrev.data(), count, papcclInt32, prev, rk.comm, 0));
        EXPECT_EQ(papcclSuccess, papcclSend(toNext.data(), count, papcclInt32, next, rk.comm, 0));
      }
      EXPECT_EQ(papcclSuccess, papcclGroupEnd()) << papcclGetLastError(rk.comm);
      std::string what =
          std::string(ModeName(mode)) + " n=" + std::to_string(n) + " rank " + std::to_string(r);
      if (n == 2) {
        // next == prev: the peer's two messages arrive in its send order (k=0 first: its
        // toNext), matched with this rank's receives in this rank's receive order.
        const bool firstRecvIsFromPrev = r % 2 == 0;
        const std::vector<int32_t>& first = firstRecvIsFromPrev ? fromPrev : fromNext;
        const std::vector<int32_t>& second = firstRecvIsFromPrev ? fromNext : fromPrev;
        const int peer = next;
        const bool peerSendsNextFirst = peer % 2 == 0;
        CheckP2p(first, peer, r, peerSendsNextFirst ? 0 : 1, what + " first message");
        CheckP2p(second, peer, r, peerSendsNextFirst ? 1 : 0, what + " second message");
      } else {
        CheckP2p(fromPrev, prev, r, 0, what + " from prev");
        CheckP2p(fromNext, next, r, 1, what + " from next");
      }
    });
  }
}

// Every rank sends to and receives from the same peer (pairs r^1); half of them post the
// receive first. Also the 8 MiB exchange.
TEST_P(Groups, PairwiseExchangeSamePeer) {
  const Mode mode = GetParam();
  for (int n : {2, 4, 8}) {
    for (size_t count : {size_t(1), size_t(4097), size_t(8 << 20) / sizeof(int32_t)}) {
      if (n == 8 && count > 4097 && mode == Mode::kThreads) continue;  // time; n=2,4 cover it
      RunRanks(mode, n, [&](Rank& rk) {
        const int r = rk.rank, peer = r ^ 1;
        std::vector<int32_t> out(count), in(count, -1);
        FillP2p(out, r, peer, 7);
        ASSERT_EQ(papcclSuccess, papcclGroupStart());
        if (r < peer) {
          EXPECT_EQ(papcclSuccess, papcclSend(out.data(), count, papcclInt32, peer, rk.comm, 0));
          EXPECT_EQ(papcclSuccess, papcclRecv(in.data(), count, papcclInt32, peer, rk.comm, 0));
        } else {
          EXPECT_EQ(papcclSuccess, papcclRecv(in.data(), count, papcclInt32, peer, rk.comm, 0));
          EXPECT_EQ(papcclSuccess, papcclSend(out.data(), count, papcclInt32, peer, rk.comm, 0));
        }
        EXPECT_EQ(papcclSuccess, papcclGroupEnd()) << papcclGetLastError(rk.comm);
        CheckP2p(in, peer, r, 7,
                 std::string(ModeName(mode)) + " n=" + std::to_string(n) +
                     " count=" + std::to_string(count) + " rank " + std::to_string(r));
      });
    }
  }
}

// All-pairs exchange through p2p: every rank sends a distinct message to every rank
// (itself included) and receives one from each, in one group, in a rank-dependent order.
TEST_P(Groups, AllPairsIncludingSelf) {
  const Mode mode = GetParam();
  for (int n : {1, 3, 5}) {
    RunRanks(mode, n, [&](Rank& rk) {
      const int r = rk.rank;
      const size_t count = 5000;
      std::vector<std::vector<int32_t>> out(n, std::vector<int32_t>(count)),
          in(n, std::vector<int32_t>(count, -1));
      for (int p = 0; p < n; p++)
        FillP2p(out[p], r, p, 3);
      ASSERT_EQ(papcclSuccess, papcclGroupStart());
      for (int k = 0; k < n; k++) {
        int to = (r + k) % n, from = (r - k + n) % n;
        EXPECT_EQ(papcclSuccess, papcclRecv(in[from].data(), count, papcclInt32, from, rk.comm, 0));
        EXPECT_EQ(papcclSuccess, papcclSend(out[to].data(), count, papcclInt32, to, rk.comm, 0));
      }
      EXPECT_EQ(papcclSuccess, papcclGroupEnd()) << papcclGetLastError(rk.comm);
      for (int p = 0; p < n; p++)
        CheckP2p(in[p], p, r, 3, "n=" + std::to_string(n) + " rank " + std::to_string(r));
    });
  }
}

// Sends and receives to self inside a group pair up in order; mixed with a collective.
TEST_P(Groups, SendRecvToSelf) {
  const Mode mode = GetParam();
  for (int n : {1, 2}) {
    RunRanks(mode, n, [&](Rank& rk) {
      const int r = rk.rank;
      std::vector<int32_t> a(1000), b(33), ra(1000, -1), rb(33, -1);
      FillP2p(a, r, r, 0);
      FillP2p(b, r, r, 1);
      Case c;
      c.coll = Coll::kAllReduce;
      c.type = papcclFloat32;
      c.count = 999;
      c.seed = 77;
      CaseRunner coll(rk, c);
      ASSERT_EQ(papcclSuccess, papcclGroupStart());
      EXPECT_EQ(papcclSuccess, papcclSend(a.data(), a.size(), papcclInt32, r, rk.comm, 0));
      coll.Issue();
      EXPECT_EQ(papcclSuccess, papcclSend(b.data(), b.size(), papcclInt32, r, rk.comm, 0));
      EXPECT_EQ(papcclSuccess, papcclRecv(ra.data(), ra.size(), papcclInt32, r, rk.comm, 0));
      EXPECT_EQ(papcclSuccess, papcclRecv(rb.data(), rb.size(), papcclInt32, r, rk.comm, 0));
      EXPECT_EQ(papcclSuccess, papcclGroupEnd()) << papcclGetLastError(rk.comm);
      CheckP2p(ra, r, r, 0, "self message 0");
      CheckP2p(rb, r, r, 1, "self message 1");
      coll.Verify();
    });
  }
}

// Collectives and p2p interleaved differently on different ranks inside one group.
TEST_P(Groups, CollectivesAndP2pInterleaved) {
  const Mode mode = GetParam();
  const int n = 4;
  RunRanks(mode, n, [&](Rank& rk) {
    const int r = rk.rank, peer = r ^ 1;
    std::vector<int32_t> out(20000), in(20000, -1);
    FillP2p(out, r, peer, 5);
    Case c1;
    c1.coll = Coll::kAllReduce;
    c1.type = papcclInt32;
    c1.count = 3001;
    c1.seed = 1;
    Case c2;
    c2.coll = Coll::kAllGather;
    c2.type = papcclFloat32;
    c2.count = 1001;
    c2.seed = 2;
    CaseRunner run1(rk, c1), run2(rk, c2);
    ASSERT_EQ(papcclSuccess, papcclGroupStart());
    if (r % 2 == 0) {
      EXPECT_EQ(papcclSuccess, papcclSend(out.data(), out.size(), papcclInt32, peer, rk.comm, 0));
      run1.Issue();
      EXPECT_EQ(papcclSuccess, papcclRecv(in.data(), in.size(), papcclInt32, peer, rk.comm, 0));
      run2.Issue();
    } else {
      run1.Issue();
      run2.Issue();
      EXPECT_EQ(papcclSuccess, papcclRecv(in.data(), in.size(), papcclInt32, peer, rk.comm, 0));
      EXPECT_EQ(papcclSuccess, papcclSend(out.data(), out.size(), papcclInt32, peer, rk.comm, 0));
    }
    EXPECT_EQ(papcclSuccess, papcclGroupEnd()) << papcclGetLastError(rk.comm);
    run1.Verify();
    run2.Verify();
    CheckP2p(in, peer, r, 5, "rank " + std::to_string(r));
  });
}

// The point-to-point part of a group may differ between ranks (here rank 2 has no partner), as
// in NCCL; the collective in it must still take one plan on every rank. It used to count as
// grouped on ranks 0 and 1 only, and papcclGroupEnd failed with "called inside a group on some
// ranks and alone on others" (found by the soak).
TEST_P(Groups, CollectiveWithP2pOnSomeRanks) {
  const Mode mode = GetParam();
  const int n = 3;
  RunRanks(mode, n, [&](Rank& rk) {
    const int r = rk.rank, peer = r ^ 1;
    const bool paired = peer < n;
    for (int round = 0; round < 4; round++) {
      std::vector<int32_t> out(1000), in(1000, -1);
      FillP2p(out, r, peer, round);
      Case c;
      c.coll = round % 2 ? Coll::kReduceScatter : Coll::kAllReduce;
      c.type = papcclFloat32;
      c.count = 4099;
      c.seed = 40 + round;
      CaseRunner run(rk, c);
      ASSERT_EQ(papcclSuccess, papcclGroupStart());
      run.Issue();
      if (paired) {
        EXPECT_EQ(papcclSuccess, papcclSend(out.data(), out.size(), papcclInt32, peer, rk.comm, 0));
        EXPECT_EQ(papcclSuccess, papcclRecv(in.data(), in.size(), papcclInt32, peer, rk.comm, 0));
      }
      ASSERT_EQ(papcclSuccess, papcclGroupEnd()) << papcclGetLastError(rk.comm);
      run.Verify();
      if (paired) CheckP2p(in, peer, r, round, "rank " + std::to_string(r));
    }
  });
}

// ---- Nesting ---------------------------------------------------------------------------------

TEST_P(Groups, NestedGroupsRunAtOutermostEnd) {
  const Mode mode = GetParam();
  RunRanks(mode, 3, [&](Rank& rk) {
    const size_t count = 2048;
    std::vector<float> in(count), out(count, -1.0f);
    for (size_t i = 0; i < count; i++)
      in[i] = (float)(rk.rank + (int)(i % 7));
    Case c;
    c.coll = Coll::kAllGather;
    c.type = papcclInt8;
    c.count = 100;
    c.seed = 9;
    CaseRunner inner(rk, c);
    ASSERT_EQ(papcclSuccess, papcclGroupStart());
    ASSERT_EQ(papcclSuccess, papcclGroupStart());
    EXPECT_EQ(papcclSuccess,
              papcclAllReduce(in.data(), out.data(), count, papcclFloat32, papcclSum, rk.comm, 0));
    ASSERT_EQ(papcclSuccess, papcclGroupStart());
    inner.Issue();
    EXPECT_EQ(papcclSuccess, papcclGroupEnd());
    EXPECT_EQ(papcclSuccess, papcclGroupEnd());
    // Still inside the outer group: nothing may have run yet.
    for (size_t i = 0; i < count; i++) {
      if (out[i] != -1.0f) {
        ADD_FAILURE() << "rank " << rk.rank << ": the allreduce ran at an inner papcclGroupEnd";
        break;
      }
    }
    EXPECT_EQ(papcclSuccess, papcclGroupEnd()) << papcclGetLastError(rk.comm);
    for (size_t i = 0; i < count; i++) {
      float want = (float)(3 * (int)(i % 7) + 0 + 1 + 2);
      if (out[i] != want) {
        ADD_FAILURE() << "rank " << rk.rank << " element " << i << ": " << out[i] << " != " << want;
        break;
      }
    }
    inner.Verify();
  });
}

INSTANTIATE_TEST_SUITE_P(Modes, Groups, ::testing::Values(Mode::kThreads, Mode::kProcesses),
                         ModeParamName);

// ---- One thread drives every rank of a communicator (ranks in one process) -------------

TEST_F(GroupsApi, OneThreadDrivesAllRanks) {
  const int n = 4;
  std::vector<papcclComm_t> comms(n, nullptr);
  ASSERT_EQ(papcclSuccess, papcclCommInitAll(comms.data(), n, nullptr));
  const size_t count = 300007;
  std::vector<std::vector<int32_t>> in(n, std::vector<int32_t>(count)),
      out(n, std::vector<int32_t>(count, -1)), p2pIn(n, std::vector<int32_t>(999, -1)),
      p2pOut(n, std::vector<int32_t>(999));
  for (int r = 0; r < n; r++) {
    for (size_t i = 0; i < count; i++)
      in[r][i] = (int32_t)(r * 3 + (int)(i % 1000));
    FillP2p(p2pOut[r], r, (r + 1) % n, 0);
  }
  ASSERT_EQ(papcclSuccess, papcclGroupStart());
  for (int r = 0; r < n; r++) {
    EXPECT_EQ(papcclSuccess, papcclAllReduce(in[r].data(), out[r].data(), count, papcclInt32,
                                             papcclSum, comms[r], nullptr));
    EXPECT_EQ(papcclSuccess,
              papcclSend(p2pOut[r].data(), 999, papcclInt32, (r + 1) % n, comms[r], nullptr));
    EXPECT_EQ(papcclSuccess,
              papcclRecv(p2pIn[r].data(), 999, papcclInt32, (r - 1 + n) % n, comms[r], nullptr));
  }
  EXPECT_EQ(papcclSuccess, papcclGroupEnd()) << papcclGetLastError(nullptr);
  for (int r = 0; r < n; r++) {
    for (size_t i = 0; i < count; i++) {
      int32_t want = (int32_t)(3 * (0 + 1 + 2 + 3) + n * (int)(i % 1000));
      if (out[r][i] != want) {
        ADD_FAILURE() << "rank " << r << " element " << i << ": " << out[r][i] << " != " << want;
        break;
      }
    }
    CheckP2p(p2pIn[r], (r - 1 + n) % n, r, 0, "rank " + std::to_string(r));
  }
  // Destroy is collective: every rank at once.
  std::vector<std::thread> th;
  for (int r = 0; r < n; r++)
    th.emplace_back([&, r] { EXPECT_EQ(papcclSuccess, papcclCommDestroy(comms[r])); });
  for (auto& t : th)
    t.join();
}

// ---- Unbalanced group calls -----------------------------------------------------------------

TEST_F(GroupsApi, GroupEndWithoutStart) {
  {
    ExpectWarn w({"papcclGroupEnd"});
    EXPECT_EQ(papcclInvalidUsage, papcclGroupEnd());
    EXPECT_EQ(1, w.Count());
  }
  ASSERT_EQ(papcclSuccess, papcclGroupStart());
  EXPECT_EQ(papcclSuccess, papcclGroupEnd());
  {
    ExpectWarn w({"papcclGroupEnd"});
    EXPECT_EQ(papcclInvalidUsage, papcclGroupEnd());
    EXPECT_EQ(1, w.Count());
  }
  // Group depth is per thread: a group open on one thread does not let another end it.
  ASSERT_EQ(papcclSuccess, papcclGroupStart());
  std::thread other([] {
    ExpectWarn w({"papcclGroupEnd"});
    EXPECT_EQ(papcclInvalidUsage, papcclGroupEnd());
  });
  other.join();
  EXPECT_EQ(papcclSuccess, papcclGroupEnd());
  // An empty group, and empty nested groups, are fine.
  ASSERT_EQ(papcclSuccess, papcclGroupStart());
  ASSERT_EQ(papcclSuccess, papcclGroupStart());
  EXPECT_EQ(papcclSuccess, papcclGroupEnd());
  EXPECT_EQ(papcclSuccess, papcclGroupEnd());
  // And groups still work after the misuse.
  RunRanks(Mode::kThreads, 2, [&](Rank& rk) {
    Case c;
    c.coll = Coll::kSendRecv;
    c.type = papcclUint64;
    c.count = 10;
    RunCase(rk, c);
  });
}

}  // namespace
}  // namespace papt
