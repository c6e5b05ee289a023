// SPDX-License-Identifier: Apache-2.0
// Mismatched calls (docs/PAP-ENGINE.md section 11): ranks that make different calls in the
// same place of the collective sequence (count, datatype, op, root, kind; flat-sized, on the
// board, one of each; alone or inside a group) fail it with papcclInvalidUsage on every rank,
// quickly (well before PAPCCL_TIMEOUT_S), with a WARN that names both calls and both ranks;
// the comm then ends cleanly and a new one on the same ranks works. PAPCCL_CHECK_MISMATCH=0
// keeps the old behaviour. The same over UCX between hosts (one per rank), where the arrival
// board is a message board and the home (rank 0) compares the calls (UcxMismatch*).
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "internal/free_port.h"
#include "internal/shim_comm.h"
#include "multirank/harness.h"

namespace papt {
namespace {

class Mismatch : public Test {};

constexpr double kQuickS = 5.0;  // a correctness bound (the timeout is 30 s), not a speed goal

struct Call {
  Coll coll = Coll::kAllReduce;
  size_t count = 100000;  // above PAPCCL_FLAT_MAX_BYTES: the board
  papcclDataType_t type = papcclFloat32;
  papcclRedOp_t op = papcclSum;
  int root = 0;
};

// Buffers large enough for any call of the tests on n ranks.
struct Bufs {
  std::vector<double> send, recv;
  // Doubles, viewed as the call's type: 1.0f in every float of the input.
  Bufs(const Call& c, int n) : send(c.count * n + 8), recv(c.count * n + 8, 0.0) {
    float* f = (float*)send.data();
    for (size_t i = 0; i < send.size() * 2; i++)
      f[i] = 1.0f;
  }
};

papcclResult_t Issue(const Call& c, Bufs& b, papcclComm_t comm) {
  void* s = b.send.data();
  void* r = b.recv.data();
  switch (c.coll) {
  case Coll::kAllReduce:
    return papcclAllReduce(s, r, c.count, c.type, c.op, comm, nullptr);
  case Coll::kBroadcast:
    return papcclBroadcast(s, r, c.count, c.type, c.root, comm, nullptr);
  case Coll::kReduce:
    return papcclReduce(s, r, c.count, c.type, c.op, c.root, comm, nullptr);
  case Coll::kAllGather:
    return papcclAllGather(s, r, c.count, c.type, comm, nullptr);
  default:
    ADD_FAILURE() << "not used here";
    return papcclInternalError;
  }
}

// One matched allreduce: the comm works (and the ranks are in step before the mismatch).
void Matched(papcclComm_t comm, int n) {
  float v = 1;
  ASSERT_EQ(papcclSuccess, papcclAllReduce(&v, &v, 1, papcclFloat32, papcclSum, comm, nullptr));
  ASSERT_EQ((float)n, v);
}

struct Scenario {
  std::function<std::vector<Call>(int rank, int n)> calls;  // this rank's calls (>1: a group)
  std::vector<std::string> warnHas;  // in the WARN of every rank
  // This rank's part may finish before the mismatching rank arrives (a Broadcast's root
  // needs no one): the error may then come from its next call instead.
  std::function<bool(int rank, int n)> mayFinishAlone = [](int, int) { return false; };
  // Matched calls every rank makes first, after the first matched allreduce.
  int warmup = 0;
  Call warmupCall;
};

// How the ranks reach each other: shared memory (one host), or UCX with each rank a host of
// its own (a process each; TCP over loopback, PAPCCL_TRANSPORT=ucx).
enum class Net {
  kShm,
  kUcx
};

// In a child process: this rank's host and transport for every comm it makes from now on.
void BecomeUcxHost(const Rank& rk) {
  setenv("UCX_TLS", "tcp", 1);
  setenv("PAPCCL_TRANSPORT", "ucx", 1);
  setenv("PAPCCL_HOSTID", ("mismatch-host-" + std::to_string(rk.rank)).c_str(), 1);
  papTestCommParamReset();
}

// Every rank makes its calls; each must fail within kQuickS (or, where its part finishes
// alone, its next call must), naming both calls and a mismatching pair of ranks. Then the
// comm is aborted and, as processes, the same ranks make a new comm that works.
void ExpectEveryRankFails(Mode mode, int n, const Scenario& sc, Net net = Net::kShm) {
  ScopedEnv timeout("PAPCCL_TIMEOUT_S", "30");
  const int port = mode == Mode::kProcesses ? papTestFreeFixedPort() : -1;
  Options opt;
  opt.destroy = false;
  opt.deadlineS = 120;
  opt.makeComm = net == Net::kShm;
  if (net == Net::kUcx) {
    ASSERT_EQ(Mode::kProcesses, mode);
  }
  RunRanks(
      mode, n,
      [&](Rank& rk) {
        if (net == Net::kUcx) {
          BecomeUcxHost(rk);
          ASSERT_EQ(papcclSuccess, papcclCommInitRank(&rk.comm, n, rk.id, rk.rank))
              << papcclGetLastError(nullptr);
        }
        Matched(rk.comm, n);
        for (int i = 0; i < sc.warmup; i++) {
          Bufs b(sc.warmupCall, n);
          ASSERT_EQ(papcclSuccess, Issue(sc.warmupCall, b, rk.comm)) << "warm-up call " << i;
        }
        std::vector<Call> calls = sc.calls(rk.rank, n);
        std::vector<Bufs> bufs;
        for (const Call& c : calls)
          bufs.emplace_back(c, n);
        papcclResult_t res = papcclSuccess;
        double t0 = NowS(), dt = 0;
        bool next = false;
        {
          ExpectWarn w({"mismatch"});
          if (calls.size() > 1) {
            EXPECT_EQ(papcclSuccess, papcclGroupStart());
            for (size_t i = 0; i < calls.size(); i++) {
              papcclResult_t r = Issue(calls[i], bufs[i], rk.comm);
              EXPECT_EQ(papcclSuccess, r) << "grouped call " << i;
            }
            res = papcclGroupEnd();
          } else {
            res = Issue(calls[0], bufs[0], rk.comm);
          }
          if (res == papcclSuccess && sc.mayFinishAlone(rk.rank, n)) {
            next = true;
            float v = 1;
            res = papcclAllReduce(&v, &v, 1, papcclFloat32, papcclSum, rk.comm, nullptr);
          }
          dt = NowS() - t0;
          fprintf(stderr, "rank %d: %s returned %d after %.3f s: %s\n", rk.rank,
                  next ? "the next call" : "the mismatched call", (int)res, dt,
                  papcclGetLastError(rk.comm));
          EXPECT_EQ(papcclInvalidUsage, res) << "rank " << rk.rank;
          EXPECT_LT(dt, kQuickS) << "rank " << rk.rank;
          EXPECT_EQ(1, w.Count()) << "rank " << rk.rank << ": one WARN";
          for (const std::string& s : sc.warnHas)
            EXPECT_TRUE(w.Saw(s)) << "rank " << rk.rank << " lacks '" << s
                                  << "': " << papcclGetLastError(rk.comm);
          int named = 0;
          for (int r = 0; r < n; r++)
            named += w.Saw("rank " + std::to_string(r) + " called");
          EXPECT_EQ(2, named) << "rank " << rk.rank << ": " << papcclGetLastError(rk.comm);
        }
        papcclResult_t async = papcclSuccess;
        EXPECT_EQ(papcclSuccess, papcclCommGetAsyncError(rk.comm, &async));
        EXPECT_EQ(papcclInvalidUsage, async) << "rank " << rk.rank;
        EXPECT_EQ(papcclSuccess, papcclCommAbort(rk.comm));
        if (mode != Mode::kProcesses) return;
        // A new comm on the same ranks (the same processes) works.
        ScopedEnv commId("PAPCCL_COMM_ID", "127.0.0.1:" + std::to_string(port));
        papcclUniqueId id;
        ASSERT_EQ(papcclSuccess, papcclGetUniqueId(&id));
        papcclComm_t comm = nullptr;
        ASSERT_EQ(papcclSuccess, papcclCommInitRank(&comm, n, id, rk.rank));
        Matched(comm, n);
        Call big;
        Bufs b(big, n);
        ASSERT_EQ(papcclSuccess, Issue(big, b, comm));
        EXPECT_EQ((float)n, ((const float*)b.recv.data())[big.count - 1]);
        EXPECT_EQ(papcclSuccess, papcclCommDestroy(comm));
      },
      opt);
}

// The last rank's call differs from the others' by `change`.
Scenario LastDiffers(Call base, std::function<void(Call&)> change, std::vector<std::string> has) {
  Scenario sc;
  sc.calls = [base, change](int rank, int n) {
    Call c = base;
    if (rank == n - 1) change(c);
    return std::vector<Call>{c};
  };
  sc.warnHas = std::move(has);
  return sc;
}

// Scenarios that run alike on one host and between hosts.

// Rooted collectives: a rank whose part needs no one (a Broadcast's root sends, a non-root
// of a Reduce may only send, a Broadcast's non-root may have its data) can be done before
// the mismatching rank arrives; its next call fails then.
Scenario ReduceRootDiffers() {
  Call c;
  c.coll = Coll::kReduce;
  Scenario sc = LastDiffers(
      c, [](Call& x) { x.root = 1; },
      {"Reduce(count 100000, float, sum, root 0)", "Reduce(count 100000, float, sum, root 1)"});
  sc.mayFinishAlone = [](int rank, int) { return rank != 0; };  // not the root of most
  return sc;
}

Scenario BroadcastRootDiffers() {
  Call c;
  c.coll = Coll::kBroadcast;
  Scenario sc = LastDiffers(
      c, [](Call& x) { x.root = 1; },
      {"Broadcast(count 100000, float, root 0)", "Broadcast(count 100000, float, root 1)"});
  sc.mayFinishAlone = [](int, int) { return true; };
  return sc;
}

// The last rank broadcasts from rank 0, which runs an allreduce: it waits for data.
Scenario LastBroadcastsAgainstAllReduce() {
  Call c;
  return LastDiffers(
      c, [](Call& x) { x.coll = Coll::kBroadcast; },
      {"AllReduce(count 100000, float, sum)", "Broadcast(count 100000, float, root 0)"});
}

// Rank 0 (the home of a message board) is the broadcast's root: its part may finish alone.
Scenario RootBroadcastsAgainstAllReduce() {
  Scenario sc;
  sc.calls = [](int rank, int) {
    Call x;
    x.count = 1000;  // flat-sized on the allreduce ranks
    if (rank == 0) x.coll = Coll::kBroadcast;
    return std::vector<Call>{x};
  };
  sc.warnHas = {"AllReduce(count 1000, float, sum)", "Broadcast(count 1000, float, root 0)"};
  sc.mayFinishAlone = [](int rank, int) { return rank == 0; };
  return sc;
}

Scenario AllGatherAgainstAllReduce() {
  Call c;
  c.count = 5000;
  return LastDiffers(c, [](Call& x) { x.coll = Coll::kAllGather; },
                     {"AllReduce(count 5000, float, sum)", "AllGather(count 5000, float)"});
}

// Inside a group: the second of three collectives differs on the last rank.
Scenario SecondOfAGroupDiffers() {
  Scenario sc;
  sc.calls = [](int rank, int n) {
    std::vector<Call> v(3);
    v[0].count = 1000;
    v[1].count = 70000;
    v[2].coll = Coll::kBroadcast;
    v[2].count = 100;
    if (rank == n - 1) v[1].count = 80000;
    return v;
  };
  sc.warnHas = {"AllReduce(count 70000, float, sum)", "AllReduce(count 80000, float, sum)"};
  return sc;
}

class MismatchRanks : public Mismatch, public ::testing::WithParamInterface<int> {};

TEST_P(MismatchRanks, CountOnTheBoard) {
  Call c;
  c.count = 100000;
  ExpectEveryRankFails(
      Mode::kProcesses, GetParam(),
      LastDiffers(c, [](Call& x) { x.count = 200000; },
                  {"AllReduce(count 100000, float, sum)", "AllReduce(count 200000, float, sum)"}));
}

TEST_P(MismatchRanks, CountFlat) {
  Call c;
  c.count = 10;
  ExpectEveryRankFails(
      Mode::kProcesses, GetParam(),
      LastDiffers(c, [](Call& x) { x.count = 20; },
                  {"AllReduce(count 10, float, sum)", "AllReduce(count 20, float, sum)"}));
}

// 1000 floats run flat, 2000 on the board: each side sees the other in its health check.
TEST_P(MismatchRanks, CountFlatAgainstBoard) {
  Call c;
  c.count = 1000;
  ExpectEveryRankFails(
      Mode::kProcesses, GetParam(),
      LastDiffers(c, [](Call& x) { x.count = 2000; },
                  {"AllReduce(count 1000, float, sum)", "AllReduce(count 2000, float, sum)"}));
}

TEST_P(MismatchRanks, Datatype) {
  Call c;
  ExpectEveryRankFails(Mode::kProcesses, GetParam(),
                       LastDiffers(c, [](Call& x) { x.type = papcclInt32; },
                                   {"(count 100000, float, sum)", "(count 100000, int32, sum)"}));
  c.count = 100;  // flat, the same bytes
  ExpectEveryRankFails(Mode::kProcesses, GetParam(),
                       LastDiffers(c, [](Call& x) { x.type = papcclInt32; },
                                   {"(count 100, float, sum)", "(count 100, int32, sum)"}));
}

TEST_P(MismatchRanks, Op) {
  Call c;
  ExpectEveryRankFails(Mode::kProcesses, GetParam(),
                       LastDiffers(c, [](Call& x) { x.op = papcclMax; },
                                   {"(count 100000, float, sum)", "(count 100000, float, max)"}));
  c.count = 3;  // flat
  ExpectEveryRankFails(
      Mode::kThreads, GetParam(),
      LastDiffers(c, [](Call& x) { x.op = papcclProd; }, {"float, sum)", "float, prod)"}));
}

// Rooted collectives (the scenarios above say which ranks may finish alone).
TEST_P(MismatchRanks, ReduceRoot) {
  ExpectEveryRankFails(Mode::kProcesses, GetParam(), ReduceRootDiffers());
}

TEST_P(MismatchRanks, BroadcastRoot) {
  ExpectEveryRankFails(Mode::kProcesses, GetParam(), BroadcastRootDiffers());
}

TEST_P(MismatchRanks, AllReduceAgainstBroadcast) {
  ExpectEveryRankFails(Mode::kProcesses, GetParam(), LastBroadcastsAgainstAllReduce());
  ExpectEveryRankFails(Mode::kProcesses, GetParam(), RootBroadcastsAgainstAllReduce());
}

TEST_P(MismatchRanks, AllReduceAgainstAllGather) {
  ExpectEveryRankFails(Mode::kThreads, GetParam(), AllGatherAgainstAllReduce());
}

TEST_P(MismatchRanks, InsideAGroup) {
  for (Mode mode : {Mode::kProcesses, Mode::kThreads})
    ExpectEveryRankFails(mode, GetParam(), SecondOfAGroupDiffers());
}

INSTANTIATE_TEST_SUITE_P(Ranks, MismatchRanks, ::testing::Values(2, 4),
                         [](const ::testing::TestParamInfo<int>& i) {
                           return std::to_string(i.param) + "ranks";
                         });

// Matched calls of every kind, alone and grouped, flat and on the board, pass with the check
// on (and say nothing).
TEST_F(Mismatch, MatchedCallsPass) {
  RunRanks(Mode::kProcesses, 3, [&](Rank& rk) {
    for (int round = 0; round < 6; round++) {
      for (size_t count : {(size_t)3, (size_t)1000, (size_t)70000}) {
        for (Coll coll : {Coll::kAllReduce, Coll::kBroadcast, Coll::kReduce, Coll::kAllGather}) {
          Call c;
          c.coll = coll;
          c.count = count;
          c.root = round % rk.nranks;
          Bufs b(c, rk.nranks);
          ASSERT_EQ(papcclSuccess, Issue(c, b, rk.comm)) << CollName(coll) << " " << count;
        }
      }
      Call a, g;
      a.count = 1000 + round;
      g.coll = Coll::kAllGather;
      g.count = 5;
      Bufs ba(a, rk.nranks), bg(g, rk.nranks);
      ASSERT_EQ(papcclSuccess, papcclGroupStart());
      ASSERT_EQ(papcclSuccess, Issue(a, ba, rk.comm));
      ASSERT_EQ(papcclSuccess, Issue(g, bg, rk.comm));
      ASSERT_EQ(papcclSuccess, papcclGroupEnd());
      ASSERT_EQ(3.0, (double)((float*)ba.recv.data())[a.count - 1]);
    }
  });
}

// PAPCCL_CHECK_MISMATCH=0: the old behaviour, no check. Two ranks, 1000 against 2000 floats
// on the board: the rank with the smaller call returns success with a result built from the
// mismatched buffers (no error, no WARN), while the other waits for data that never comes.
TEST_F(Mismatch, CheckOffKeepsTheOldBehaviour) {
  ScopedEnv off("PAPCCL_CHECK_MISMATCH", "0");
  ScopedEnv flat("PAPCCL_FLAT_MAX_BYTES", "0");
  ScopedEnv timeout("PAPCCL_TIMEOUT_S", "2");
  Options opt;
  opt.destroy = false;
  opt.deadlineS = 60;
  RunRanks(
      Mode::kProcesses, 2,
      [&](Rank& rk) {
        Call c;
        c.count = rk.rank == 0 ? 1000 : 2000;
        Bufs b(c, 2);
        papcclResult_t res;
        {
          ExpectWarn w;  // rank 1's timeout, if any
          res = Issue(c, b, rk.comm);
          EXPECT_FALSE(w.Saw("mismatch")) << papcclGetLastError(rk.comm);
        }
        fprintf(stderr, "rank %d (check off): %d %s\n", rk.rank, (int)res,
                papcclGetLastError(rk.comm));
        if (rk.rank == 0) {
          EXPECT_EQ(papcclSuccess, res);
        } else {
          EXPECT_NE(papcclSuccess, res);
        }
        EXPECT_EQ(papcclSuccess, papcclCommAbort(rk.comm));
      },
      opt);
}

// ---- Over UCX: the message board (docs/PAP-ENGINE.md sections 10 and 11) -------------------

#ifdef PAPCCL_HAVE_UCX
class UcxMismatch : public Mismatch {};

// Ranks, and PAPCCL_PAP: on (the default), the first calls of a size wait for a commit and
// their call rides with the arrival to rank 0; off, no call waits for one and every call
// goes to rank 0 as a one-way message of its own.
using UcxMismatchParam = std::tuple<int, bool>;
class UcxMismatchRanks : public Mismatch, public ::testing::WithParamInterface<UcxMismatchParam> {
 protected:
  void SetUp() override {
    Mismatch::SetUp();
    pap_.reset(new ScopedEnv("PAPCCL_PAP", std::get<1>(GetParam()) ? nullptr : "0"));
  }
  void TearDown() override {
    pap_.reset();
    Mismatch::TearDown();
  }
  int Ranks() const {
    return std::get<0>(GetParam());
  }
  void Expect(const Scenario& sc) {
    ExpectEveryRankFails(Mode::kProcesses, Ranks(), sc, Net::kUcx);
  }
  std::unique_ptr<ScopedEnv> pap_;
};

TEST_P(UcxMismatchRanks, Count) {
  Call c;
  Expect(
      LastDiffers(c, [](Call& x) { x.count = 200000; },
                  {"AllReduce(count 100000, float, sum)", "AllReduce(count 200000, float, sum)"}));
  c.count = 2;  // 8 bytes
  Expect(LastDiffers(c, [](Call& x) { x.count = 3; },
                     {"AllReduce(count 2, float, sum)", "AllReduce(count 3, float, sum)"}));
}

// After enough matched calls of the size that it no longer asks the board for every call
// (section 10's probes): the call travels on its own.
TEST_P(UcxMismatchRanks, CountAfterMatchedCalls) {
  Scenario sc;
  sc.calls = [](int rank, int n) {
    std::vector<Call> v(1);
    v[0].count = rank == n - 1 ? 1001 : 1000;
    return v;
  };
  sc.warnHas = {"AllReduce(count 1000, float, sum)", "AllReduce(count 1001, float, sum)"};
  sc.warmup = 41;
  sc.warmupCall.count = 1000;
  Expect(sc);
}

TEST_P(UcxMismatchRanks, Datatype) {
  Call c;
  Expect(LastDiffers(c, [](Call& x) { x.type = papcclInt32; },
                     {"(count 100000, float, sum)", "(count 100000, int32, sum)"}));
}

TEST_P(UcxMismatchRanks, Op) {
  Call c;
  c.count = 1000;
  Expect(LastDiffers(c, [](Call& x) { x.op = papcclMax; },
                     {"(count 1000, float, sum)", "(count 1000, float, max)"}));
}

TEST_P(UcxMismatchRanks, ReduceRoot) {
  Expect(ReduceRootDiffers());
}

TEST_P(UcxMismatchRanks, BroadcastRoot) {
  Expect(BroadcastRootDiffers());
}

TEST_P(UcxMismatchRanks, AllReduceAgainstBroadcast) {
  Expect(LastBroadcastsAgainstAllReduce());
  Expect(RootBroadcastsAgainstAllReduce());
}

TEST_P(UcxMismatchRanks, AllReduceAgainstAllGather) {
  Expect(AllGatherAgainstAllReduce());
}

// Inside a group (no call of a group waits for a commit: each goes one way).
TEST_P(UcxMismatchRanks, InsideAGroup) {
  Expect(SecondOfAGroupDiffers());
}

INSTANTIATE_TEST_SUITE_P(Ranks, UcxMismatchRanks,
                         ::testing::Combine(::testing::Values(2, 4), ::testing::Bool()),
                         [](const ::testing::TestParamInfo<UcxMismatchParam>& i) {
                           return std::to_string(std::get<0>(i.param)) + "ranks" +
                                  (std::get<1>(i.param) ? "" : "_pap0");
                         });

// Matched calls of every kind, alone and grouped, pass over UCX with the check on and say
// nothing; many small allreduces run past the probes' warm-up, so most go one way.
TEST_F(UcxMismatch, MatchedCallsPass) {
  Options opt;
  opt.makeComm = false;
  opt.destroy = false;
  opt.deadlineS = 120;
  ScopedEnv timeout("PAPCCL_TIMEOUT_S", "30");
  RunRanks(
      Mode::kProcesses, 3,
      [&](Rank& rk) {
        BecomeUcxHost(rk);
        ASSERT_EQ(papcclSuccess, papcclCommInitRank(&rk.comm, rk.nranks, rk.id, rk.rank))
            << papcclGetLastError(nullptr);
        for (int round = 0; round < 3; round++) {
          for (size_t count : {(size_t)3, (size_t)1000, (size_t)70000}) {
            for (Coll coll :
                 {Coll::kAllReduce, Coll::kBroadcast, Coll::kReduce, Coll::kAllGather}) {
              Call c;
              c.coll = coll;
              c.count = count;
              c.root = round % rk.nranks;
              Bufs b(c, rk.nranks);
              ASSERT_EQ(papcclSuccess, Issue(c, b, rk.comm))
                  << CollName(coll) << " " << count << ": " << papcclGetLastError(rk.comm);
            }
          }
          Call a, g;
          a.count = 1000 + round;
          g.coll = Coll::kAllGather;
          g.count = 5;
          Bufs ba(a, rk.nranks), bg(g, rk.nranks);
          ASSERT_EQ(papcclSuccess, papcclGroupStart());
          ASSERT_EQ(papcclSuccess, Issue(a, ba, rk.comm));
          ASSERT_EQ(papcclSuccess, Issue(g, bg, rk.comm));
          ASSERT_EQ(papcclSuccess, papcclGroupEnd()) << papcclGetLastError(rk.comm);
          ASSERT_EQ(3.0, (double)((float*)ba.recv.data())[a.count - 1]);
        }
        for (int i = 0; i < 300; i++) {
          float v = 1;
          ASSERT_EQ(papcclSuccess,
                    papcclAllReduce(&v, &v, 1, papcclFloat32, papcclSum, rk.comm, nullptr))
              << i << ": " << papcclGetLastError(rk.comm);
          ASSERT_EQ(3.0f, v);
        }
        EXPECT_EQ(papcclSuccess, papcclCommFinalize(rk.comm)) << papcclGetLastError(rk.comm);
        EXPECT_EQ(papcclSuccess, papcclCommDestroy(rk.comm));
      },
      opt);
}

// PAPCCL_CHECK_MISMATCH=0 over UCX: no check, the old behaviour. Two ranks (two hosts),
// 1000 against 2000 floats: no WARN names a mismatch; rank 1, which waits for data that
// never comes, fails (by the timeout, or as rank 0 leaves).
TEST_F(UcxMismatch, CheckOffKeepsTheOldBehaviour) {
  ScopedEnv off("PAPCCL_CHECK_MISMATCH", "0");
  ScopedEnv timeout("PAPCCL_TIMEOUT_S", "2");
  Options opt;
  opt.makeComm = false;
  opt.destroy = false;
  opt.deadlineS = 60;
  RunRanks(
      Mode::kProcesses, 2,
      [&](Rank& rk) {
        BecomeUcxHost(rk);
        ASSERT_EQ(papcclSuccess, papcclCommInitRank(&rk.comm, rk.nranks, rk.id, rk.rank))
            << papcclGetLastError(nullptr);
        Call c;
        c.count = rk.rank == 0 ? 1000 : 2000;
        Bufs b(c, 2);
        papcclResult_t res;
        double t0 = NowS();
        {
          ExpectWarn w;  // the timeout, if any
          res = Issue(c, b, rk.comm);
          EXPECT_FALSE(w.Saw("mismatch")) << papcclGetLastError(rk.comm);
        }
        fprintf(stderr, "rank %d (check off, ucx): %d after %.3f s: %s\n", rk.rank, (int)res,
                NowS() - t0, papcclGetLastError(rk.comm));
        EXPECT_NE(papcclInvalidUsage, res);
        if (rk.rank == 1) {
          EXPECT_NE(papcclSuccess, res);
        }
        EXPECT_EQ(papcclSuccess, papcclCommAbort(rk.comm));
      },
      opt);
}
#endif  // PAPCCL_HAVE_UCX

}  // namespace
}  // namespace papt
