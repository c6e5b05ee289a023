// SPDX-License-Identifier: Apache-2.0
// Bad input on live communicators: NULL buffers, overflowing counts, invalid datatypes, ops,
// roots and peers, destroyed/aborted/finalized comms, bad init and split arguments. Each call
// returns its documented code, logs a WARN naming the argument, and valid calls still work.
#include <gtest/gtest.h>

#include <climits>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "multirank/harness.h"

namespace papt {
namespace {

class BadInput : public Test {
 protected:
  void SetUp() override {
    Test::SetUp();
    // A call that slips through validation must fail fast instead of waiting for a peer.
    env_.reset(new ScopedEnv("PAPCCL_TIMEOUT_S", "10"));
  }
  void TearDown() override {
    env_.reset();
    Test::TearDown();
  }
  Options Opt() const {
    Options o;
    o.init = Init::kInitAll;
    o.deadlineS = 120;
    return o;
  }
  std::unique_ptr<ScopedEnv> env_;
};

// The valid call that must still work after the bad ones (every rank calls it).
void ValidAfterwards(Rank& rk, uint32_t seed) {
  Case c;
  c.coll = Coll::kAllReduce;
  c.type = papcclFloat32;
  c.count = 1001;
  c.seed = seed;
  RunCase(rk, c);
  Case g;
  g.coll = Coll::kSendRecv;
  g.type = papcclInt8;
  g.count = 17;
  g.seed = seed + 1;
  RunCase(rk, g);
}

TEST_F(BadInput, NullBuffersWithCount) {
  RunRanks(
      Mode::kThreads, 2,
      [&](Rank& rk) {
        const papcclComm_t comm = rk.comm;
        const int me = rk.rank, peer = 1 - rk.rank;
        std::vector<float> sb(64, 1.0f), rb(128, 0.0f);
        const papcclResult_t A = papcclInvalidArgument;
        EXPECT_BAD(A, "sendbuff", comm,
                   papcclAllReduce(nullptr, rb.data(), 8, papcclFloat32, papcclSum, comm, nullptr));
        EXPECT_BAD(A, "recvbuff", comm,
                   papcclAllReduce(sb.data(), nullptr, 8, papcclFloat32, papcclSum, comm, nullptr));
        // Root-only buffers: a NULL sendbuff is bad at the root (this rank is the root here).
        EXPECT_BAD(A, "sendbuff", comm,
                   papcclBroadcast(nullptr, rb.data(), 8, papcclFloat32, me, comm, nullptr));
        EXPECT_BAD(A, "recvbuff", comm,
                   papcclBroadcast(sb.data(), nullptr, 8, papcclFloat32, 0, comm, nullptr));
        EXPECT_BAD(A, "buff", comm, papcclBcast(nullptr, 8, papcclFloat32, 0, comm, nullptr));
        EXPECT_BAD(A, "sendbuff", comm,
                   papcclReduce(nullptr, rb.data(), 8, papcclFloat32, papcclSum, 0, comm, nullptr));
        EXPECT_BAD(
            A, "recvbuff", comm,
            papcclReduce(sb.data(), nullptr, 8, papcclFloat32, papcclSum, me, comm, nullptr));
        EXPECT_BAD(A, "sendbuff", comm,
                   papcclAllGather(nullptr, rb.data(), 8, papcclFloat32, comm, nullptr));
        EXPECT_BAD(A, "recvbuff", comm,
                   papcclAllGather(sb.data(), nullptr, 8, papcclFloat32, comm, nullptr));
        EXPECT_BAD(
            A, "sendbuff", comm,
            papcclReduceScatter(nullptr, rb.data(), 8, papcclFloat32, papcclSum, comm, nullptr));
        EXPECT_BAD(
            A, "recvbuff", comm,
            papcclReduceScatter(sb.data(), nullptr, 8, papcclFloat32, papcclSum, comm, nullptr));
        EXPECT_BAD(A, "sendbuff", comm,
                   papcclAlltoAll(nullptr, rb.data(), 8, papcclFloat32, comm, nullptr));
        EXPECT_BAD(A, "recvbuff", comm,
                   papcclAlltoAll(sb.data(), nullptr, 8, papcclFloat32, comm, nullptr));
        EXPECT_BAD(A, "sendbuff", comm,
                   papcclGather(nullptr, rb.data(), 8, papcclFloat32, 0, comm, nullptr));
        EXPECT_BAD(A, "recvbuff", comm,
                   papcclGather(sb.data(), nullptr, 8, papcclFloat32, me, comm, nullptr));
        EXPECT_BAD(A, "sendbuff", comm,
                   papcclScatter(nullptr, rb.data(), 8, papcclFloat32, me, comm, nullptr));
        EXPECT_BAD(A, "recvbuff", comm,
                   papcclScatter(sb.data(), nullptr, 8, papcclFloat32, 0, comm, nullptr));
        EXPECT_BAD(A, "sendbuff", comm, papcclSend(nullptr, 8, papcclFloat32, peer, comm, nullptr));
        EXPECT_BAD(A, "recvbuff", comm, papcclRecv(nullptr, 8, papcclFloat32, peer, comm, nullptr));
        ValidAfterwards(rk, 1);
      },
      Opt());
}

// NULL buffers are fine with count 0 (every rank makes the same calls: they are collective).
TEST_F(BadInput, NullBuffersAllowedWithCountZero) {
  RunRanks(
      Mode::kThreads, 2,
      [&](Rank& rk) {
        const papcclComm_t comm = rk.comm;
        const int peer = 1 - rk.rank;
        auto ok = [&](papcclResult_t res, const char* call) {
          EXPECT_EQ(papcclSuccess, res) << call << ": " << papcclGetLastError(comm);
        };
        ok(papcclAllReduce(nullptr, nullptr, 0, papcclFloat32, papcclSum, comm, nullptr),
           "AllReduce");
        ok(papcclBroadcast(nullptr, nullptr, 0, papcclInt8, 1, comm, nullptr), "Broadcast");
        ok(papcclBcast(nullptr, 0, papcclInt8, 0, comm, nullptr), "Bcast");
        ok(papcclReduce(nullptr, nullptr, 0, papcclFloat64, papcclMax, 1, comm, nullptr), "Reduce");
        ok(papcclAllGather(nullptr, nullptr, 0, papcclFloat16, comm, nullptr), "AllGather");
        ok(papcclReduceScatter(nullptr, nullptr, 0, papcclInt64, papcclProd, comm, nullptr),
           "ReduceScatter");
        ok(papcclAlltoAll(nullptr, nullptr, 0, papcclUint8, comm, nullptr), "AlltoAll");
        ok(papcclGather(nullptr, nullptr, 0, papcclUint32, 0, comm, nullptr), "Gather");
        ok(papcclScatter(nullptr, nullptr, 0, papcclBfloat16, 1, comm, nullptr), "Scatter");
        ok(papcclGroupStart(), "GroupStart");
        ok(papcclSend(nullptr, 0, papcclFloat32, peer, comm, nullptr), "Send");
        ok(papcclRecv(nullptr, 0, papcclFloat32, peer, comm, nullptr), "Recv");
        ok(papcclGroupEnd(), "GroupEnd");
        // Root-only buffers may be NULL off the root (non-zero count, real collective).
        std::vector<int32_t> buf(100, rk.rank == 0 ? 42 : -1);
        ok(papcclBroadcast(rk.rank == 0 ? buf.data() : nullptr, buf.data(), buf.size(), papcclInt32,
                           0, comm, nullptr),
           "Broadcast (NULL sendbuff off the root)");
        for (int32_t v : buf)
          ASSERT_EQ(42, v) << "rank " << rk.rank;
        ValidAfterwards(rk, 2);
      },
      Opt());
}

TEST_F(BadInput, CountOverflow) {
  RunRanks(
      Mode::kThreads, 2,
      [&](Rank& rk) {
        const papcclComm_t comm = rk.comm;
        const int peer = 1 - rk.rank;
        std::vector<double> sb(16), rb(16);
        const papcclResult_t A = papcclInvalidArgument;
        EXPECT_BAD(A, "count", comm,
                   papcclAllReduce(sb.data(), rb.data(), SIZE_MAX, papcclFloat32, papcclSum, comm,
                                   nullptr));
        // Fits for one rank's block, overflows for nranks blocks.
        EXPECT_BAD(A, "count", comm,
                   papcclAllGather(sb.data(), rb.data(), SIZE_MAX / 3, papcclInt8, comm, nullptr));
        EXPECT_BAD(A, "count", comm,
                   papcclReduceScatter(sb.data(), rb.data(), SIZE_MAX / 3, papcclInt8, papcclSum,
                                       comm, nullptr));
        EXPECT_BAD(
            A, "count", comm,
            papcclAlltoAll(sb.data(), rb.data(), SIZE_MAX / 8, papcclFloat64, comm, nullptr));
        EXPECT_BAD(
            A, "count", comm,
            papcclBroadcast(sb.data(), rb.data(), SIZE_MAX / 2, papcclFloat64, 0, comm, nullptr));
        EXPECT_BAD(A, "count", comm,
                   papcclSend(sb.data(), SIZE_MAX, papcclInt8, peer, comm, nullptr));
        EXPECT_BAD(A, "count", comm,
                   papcclRecv(rb.data(), SIZE_MAX, papcclInt8, peer, comm, nullptr));
        ValidAfterwards(rk, 3);
      },
      Opt());
}

// Gather and Scatter whose nranks * count overflows: every rank must reject the call, not
// only the root (whose buffer is the large one); a rank that accepts it would run a
// collective nobody else joins, reading or writing far past its buffer. Processes, so that
// a crash is reported as this test's failure.
TEST_F(BadInput, CountOverflowRootOnlyBuffers) {
  Options o;
  o.deadlineS = 120;
  RunRanks(
      Mode::kProcesses, 2,
      [&](Rank& rk) {
        const papcclComm_t comm = rk.comm;
        std::vector<double> sb(16), rb(16);
        const papcclResult_t A = papcclInvalidArgument;
        EXPECT_BAD(A, "count", comm,
                   papcclGather(sb.data(), rb.data(), SIZE_MAX / 3, papcclInt8, 0, comm, nullptr));
        EXPECT_BAD(A, "count", comm,
                   papcclScatter(sb.data(), rb.data(), SIZE_MAX / 3, papcclInt8, 0, comm, nullptr));
        ValidAfterwards(rk, 13);
      },
      o);
}

TEST_F(BadInput, InvalidDatatype) {
  RunRanks(
      Mode::kThreads, 2,
      [&](Rank& rk) {
        const papcclComm_t comm = rk.comm;
        const int peer = 1 - rk.rank;
        std::vector<double> sb(64), rb(64);
        void* s = sb.data();
        void* r = rb.data();
        const papcclResult_t A = papcclInvalidArgument;
        for (int bad : {-1, (int)papcclNumTypes, 1000, INT_MIN}) {
          SCOPED_TRACE("datatype " + std::to_string(bad));
          const papcclDataType_t t = (papcclDataType_t)bad;
          EXPECT_BAD(A, "datatype", comm, papcclAllReduce(s, r, 4, t, papcclSum, comm, nullptr));
          EXPECT_BAD(A, "datatype", comm, papcclBroadcast(s, r, 4, t, 0, comm, nullptr));
          EXPECT_BAD(A, "datatype", comm, papcclBcast(r, 4, t, 0, comm, nullptr));
          EXPECT_BAD(A, "datatype", comm, papcclReduce(s, r, 4, t, papcclSum, 0, comm, nullptr));
          EXPECT_BAD(A, "datatype", comm, papcclAllGather(s, r, 4, t, comm, nullptr));
          EXPECT_BAD(A, "datatype", comm,
                     papcclReduceScatter(s, r, 4, t, papcclSum, comm, nullptr));
          EXPECT_BAD(A, "datatype", comm, papcclAlltoAll(s, r, 4, t, comm, nullptr));
          EXPECT_BAD(A, "datatype", comm, papcclGather(s, r, 4, t, 0, comm, nullptr));
          EXPECT_BAD(A, "datatype", comm, papcclScatter(s, r, 4, t, 0, comm, nullptr));
          EXPECT_BAD(A, "datatype", comm, papcclSend(s, 4, t, peer, comm, nullptr));
          EXPECT_BAD(A, "datatype", comm, papcclRecv(r, 4, t, peer, comm, nullptr));
          papcclRedOp_t op;
          double scalar = 2.0;
          EXPECT_BAD(A, "datatype", comm,
                     papcclRedOpCreatePreMulSum(&op, &scalar, t, papcclScalarHostImmediate, comm));
        }
        ValidAfterwards(rk, 4);
      },
      Opt());
}

TEST_F(BadInput, InvalidOp) {
  RunRanks(
      Mode::kThreads, 2,
      [&](Rank& rk) {
        const papcclComm_t comm = rk.comm;
        std::vector<float> sb(64), rb(64);
        void* s = sb.data();
        void* r = rb.data();
        const papcclResult_t A = papcclInvalidArgument;
        for (int bad : {-1, (int)papcclNumOps, (int)papcclNumOps + 1, 1000, (int)papcclMaxRedOp}) {
          SCOPED_TRACE("op " + std::to_string(bad));
          const papcclRedOp_t op = (papcclRedOp_t)bad;
          EXPECT_BAD(A, "reduction op", comm,
                     papcclAllReduce(s, r, 4, papcclFloat32, op, comm, nullptr));
          EXPECT_BAD(A, "reduction op", comm,
                     papcclReduce(s, r, 4, papcclFloat32, op, 0, comm, nullptr));
          EXPECT_BAD(A, "reduction op", comm,
                     papcclReduceScatter(s, r, 2, papcclFloat32, op, comm, nullptr));
          EXPECT_BAD(A, "op", comm, papcclRedOpDestroy(op, comm));
        }
        // Built-in ops cannot be destroyed.
        EXPECT_BAD(A, "op", comm, papcclRedOpDestroy(papcclSum, comm));
        // A destroyed custom op, and one used with another datatype.
        float two = 2.0f;
        papcclRedOp_t op = papcclSum;
        ASSERT_EQ(papcclSuccess, papcclRedOpCreatePreMulSum(&op, &two, papcclFloat32,
                                                            papcclScalarHostImmediate, comm));
        EXPECT_GE((int)op, (int)papcclNumOps);
        EXPECT_BAD(A, "reduction op", comm,
                   papcclAllReduce(s, r, 4, papcclFloat64, op, comm, nullptr));
        ASSERT_EQ(papcclSuccess, papcclRedOpDestroy(op, comm));
        EXPECT_BAD(A, "reduction op", comm,
                   papcclAllReduce(s, r, 4, papcclFloat32, op, comm, nullptr));
        EXPECT_BAD(A, "op", comm, papcclRedOpDestroy(op, comm));
        // Bad arguments of papcclRedOpCreatePreMulSum.
        EXPECT_BAD(A, "op", comm,
                   papcclRedOpCreatePreMulSum(nullptr, &two, papcclFloat32,
                                              papcclScalarHostImmediate, comm));
        EXPECT_BAD(A, "scalar", comm,
                   papcclRedOpCreatePreMulSum(&op, nullptr, papcclFloat32,
                                              papcclScalarHostImmediate, comm));
        EXPECT_BAD(
            A, "residence", comm,
            papcclRedOpCreatePreMulSum(&op, &two, papcclFloat32, (papcclScalarResidence_t)7, comm));
        {
          // A device-resident scalar cannot work with host buffers: an error, never success.
          ExpectWarn w({"residence"});
          papcclResult_t res =
              papcclRedOpCreatePreMulSum(&op, &two, papcclFloat32, papcclScalarDevice, comm);
          EXPECT_TRUE(res == papcclInvalidUsage || res == papcclInvalidArgument) << res;
          EXPECT_TRUE(w.Saw("residence"));
        }
        // The op table is finite: running out is an error, and destroying frees the slots.
        std::vector<papcclRedOp_t> ops;
        for (int i = 0; i < 10000; i++) {
          papcclRedOp_t o;
          ExpectWarn w({"in use"});
          papcclResult_t res =
              papcclRedOpCreatePreMulSum(&o, &two, papcclFloat32, papcclScalarHostImmediate, comm);
          if (res != papcclSuccess) {
            EXPECT_EQ(papcclInvalidUsage, res);
            EXPECT_TRUE(w.Saw("in use"));
            break;
          }
          ops.push_back(o);
        }
        EXPECT_GT(ops.size(), 0u);
        EXPECT_LT(ops.size(), 10000u);
        for (papcclRedOp_t o : ops)
          EXPECT_EQ(papcclSuccess, papcclRedOpDestroy(o, comm));
        ValidAfterwards(rk, 5);
        Case pm;
        pm.coll = Coll::kAllReduce;
        pm.type = papcclFloat32;
        pm.op = Op::kPreMulSum;
        pm.count = 100;
        pm.seed = 55;
        RunCase(rk, pm);
      },
      Opt());
}

TEST_F(BadInput, InvalidRootAndPeer) {
  RunRanks(
      Mode::kThreads, 2,
      [&](Rank& rk) {
        const papcclComm_t comm = rk.comm;
        std::vector<float> sb(64), rb(64);
        void* s = sb.data();
        void* r = rb.data();
        const papcclResult_t A = papcclInvalidArgument;
        for (int bad : {-1, rk.nranks, rk.nranks + 1, INT_MAX, INT_MIN}) {
          SCOPED_TRACE("root/peer " + std::to_string(bad));
          EXPECT_BAD(A, "root", comm, papcclBroadcast(s, r, 4, papcclFloat32, bad, comm, nullptr));
          EXPECT_BAD(A, "root", comm, papcclBcast(r, 4, papcclFloat32, bad, comm, nullptr));
          EXPECT_BAD(A, "root", comm,
                     papcclReduce(s, r, 4, papcclFloat32, papcclSum, bad, comm, nullptr));
          EXPECT_BAD(A, "root", comm, papcclGather(s, r, 2, papcclFloat32, bad, comm, nullptr));
          EXPECT_BAD(A, "root", comm, papcclScatter(s, r, 2, papcclFloat32, bad, comm, nullptr));
          EXPECT_BAD(A, "peer", comm, papcclSend(s, 4, papcclFloat32, bad, comm, nullptr));
          EXPECT_BAD(A, "peer", comm, papcclRecv(r, 4, papcclFloat32, bad, comm, nullptr));
        }
        ValidAfterwards(rk, 6);
      },
      Opt());
}

// Query calls with NULL outputs.
TEST_F(BadInput, NullOutputPointers) {
  RunRanks(
      Mode::kThreads, 1,
      [&](Rank& rk) {
        const papcclComm_t comm = rk.comm;
        const papcclResult_t A = papcclInvalidArgument;
        EXPECT_BAD(A, "NULL", comm, papcclCommCount(comm, nullptr));
        EXPECT_BAD(A, "NULL", comm, papcclCommUserRank(comm, nullptr));
        EXPECT_BAD(A, "NULL", comm, papcclCommCuDevice(comm, nullptr));
        EXPECT_BAD(A, "asyncError", comm, papcclCommGetAsyncError(comm, nullptr));
        papcclResult_t async = papcclInternalError;
        EXPECT_EQ(papcclSuccess, papcclCommGetAsyncError(comm, &async));
        EXPECT_EQ(papcclSuccess, async);
        ValidAfterwards(rk, 7);
      },
      Opt());
}

// ---- Communicator lifecycle misuse ----------------------------------------------------------

papcclComm_t MakeOneRankComm() {
  papcclUniqueId id;
  EXPECT_EQ(papcclSuccess, papcclGetUniqueId(&id));
  papcclComm_t comm = nullptr;
  EXPECT_EQ(papcclSuccess, papcclCommInitRank(&comm, 1, id, 0));
  return comm;
}

// Every call on a dead communicator: papcclInvalidUsage, a WARN, no crash.
void ExpectDead(papcclComm_t comm, const char* why) {
  const papcclResult_t U = papcclInvalidUsage;
  std::vector<float> b(8);
  int x = 0;
  papcclResult_t async;
  papcclRedOp_t op;
  float two = 2;
  papcclComm_t child = nullptr;
  EXPECT_BAD(U, why, nullptr,
             papcclAllReduce(b.data(), b.data(), 8, papcclFloat32, papcclSum, comm, nullptr));
  EXPECT_BAD(U, why, nullptr, papcclBcast(b.data(), 8, papcclFloat32, 0, comm, nullptr));
  EXPECT_BAD(U, why, nullptr, papcclSend(b.data(), 8, papcclFloat32, 0, comm, nullptr));
  EXPECT_BAD(U, why, nullptr, papcclCommCount(comm, &x));
  EXPECT_BAD(U, why, nullptr, papcclCommUserRank(comm, &x));
  EXPECT_BAD(U, why, nullptr, papcclCommCuDevice(comm, &x));
  EXPECT_BAD(U, why, nullptr, papcclCommGetAsyncError(comm, &async));
  EXPECT_BAD(U, why, nullptr,
             papcclRedOpCreatePreMulSum(&op, &two, papcclFloat32, papcclScalarHostImmediate, comm));
  EXPECT_BAD(U, why, nullptr, papcclCommSplit(comm, 0, 0, &child, nullptr));
  EXPECT_BAD(U, why, nullptr, papcclCommFinalize(comm));
  EXPECT_BAD(U, why, nullptr, papcclCommDestroy(comm));
  EXPECT_BAD(U, why, nullptr, papcclCommAbort(comm));
  // The last error of the dead handle can still be read.
  EXPECT_NE(nullptr, papcclGetLastError(comm));
}

TEST_F(BadInput, DestroyedCommunicator) {
  papcclComm_t comm = MakeOneRankComm();
  ASSERT_NE(nullptr, comm);
  ASSERT_EQ(papcclSuccess, papcclCommDestroy(comm));
  ExpectDead(comm, "destroyed");
  // The library still works.
  papcclComm_t again = MakeOneRankComm();
  ASSERT_NE(nullptr, again);
  Rank rk{0, 1, again, {}, Mode::kThreads};
  ValidAfterwards(rk, 8);
  EXPECT_EQ(papcclSuccess, papcclCommDestroy(again));
}

TEST_F(BadInput, AbortedCommunicator) {
  papcclComm_t comm = MakeOneRankComm();
  ASSERT_NE(nullptr, comm);
  ASSERT_EQ(papcclSuccess, papcclCommAbort(comm));
  ExpectDead(comm, "aborted");
  // Aborting every rank of a live multi-rank communicator, without destroy, does not hang.
  std::vector<papcclComm_t> comms(3);
  ASSERT_EQ(papcclSuccess, papcclCommInitAll(comms.data(), 3, nullptr));
  for (papcclComm_t c : comms)
    EXPECT_EQ(papcclSuccess, papcclCommAbort(c));
}

TEST_F(BadInput, FinalizedCommunicator) {
  RunRanks(
      Mode::kThreads, 2,
      [&](Rank& rk) {
        ASSERT_EQ(papcclSuccess, papcclCommFinalize(rk.comm)) << papcclGetLastError(rk.comm);
        std::vector<float> b(8);
        EXPECT_BAD(
            papcclInvalidUsage, "finalized", rk.comm,
            papcclAllReduce(b.data(), b.data(), 8, papcclFloat32, papcclSum, rk.comm, nullptr));
        // Finalize twice is harmless; destroy (by the harness) succeeds.
        EXPECT_EQ(papcclSuccess, papcclCommFinalize(rk.comm));
      },
      Opt());
}

TEST_F(BadInput, InitArguments) {
  papcclUniqueId id;
  ASSERT_EQ(papcclSuccess, papcclGetUniqueId(&id));
  papcclComm_t comm = nullptr;
  const papcclResult_t A = papcclInvalidArgument;
  EXPECT_BAD(A, "comm", nullptr, papcclCommInitRank(nullptr, 1, id, 0));
  EXPECT_BAD(A, "nranks", nullptr, papcclCommInitRank(&comm, 0, id, 0));
  EXPECT_BAD(A, "nranks", nullptr, papcclCommInitRank(&comm, -3, id, 0));
  EXPECT_BAD(A, "rank", nullptr, papcclCommInitRank(&comm, 2, id, -1));
  EXPECT_BAD(A, "rank", nullptr, papcclCommInitRank(&comm, 2, id, 2));
  papcclConfig_t cfg = PAPCCL_CONFIG_INITIALIZER;
  cfg.magic = 0x12345678;
  EXPECT_BAD(A, "magic", nullptr, papcclCommInitRankConfig(&comm, 1, id, 0, &cfg));
  cfg = PAPCCL_CONFIG_INITIALIZER;
  cfg.blocking = 5;
  EXPECT_BAD(A, "blocking", nullptr, papcclCommInitRankConfig(&comm, 1, id, 0, &cfg));
  cfg = PAPCCL_CONFIG_INITIALIZER;
  cfg.size = 4;
  EXPECT_BAD(A, "size", nullptr, papcclCommInitRankConfig(&comm, 1, id, 0, &cfg));
  papcclUniqueId garbage;
  memset(&garbage, 0x5a, sizeof(garbage));
  EXPECT_BAD(A, "unique id", nullptr, papcclCommInitRank(&comm, 1, garbage, 0));
  // papcclCommInitAll checks its arguments before making an id.
  std::vector<papcclComm_t> comms(2);
  const int devs[2] = {0, -1};
  EXPECT_BAD(A, "comms", nullptr, papcclCommInitAll(nullptr, 2, nullptr));
  EXPECT_BAD(A, "ndev", nullptr, papcclCommInitAll(comms.data(), 0, nullptr));
  EXPECT_BAD(A, "devlist", nullptr, papcclCommInitAll(comms.data(), 2, devs));
  // A NULL config means the defaults; the id still works after the failed attempts.
  ASSERT_EQ(papcclSuccess, papcclCommInitRankConfig(&comm, 1, id, 0, nullptr))
      << papcclGetLastError(nullptr);
  Rank rk{0, 1, comm, id, Mode::kThreads};
  ValidAfterwards(rk, 9);
  EXPECT_EQ(papcclSuccess, papcclCommDestroy(comm));
}

TEST_F(BadInput, SplitArguments) {
  RunRanks(
      Mode::kThreads, 2,
      [&](Rank& rk) {
        const papcclComm_t comm = rk.comm;
        const papcclResult_t A = papcclInvalidArgument;
        papcclComm_t child = nullptr;
        EXPECT_BAD(A, "newcomm", comm, papcclCommSplit(comm, 0, 0, nullptr, nullptr));
        EXPECT_BAD(A, "color", comm, papcclCommSplit(comm, -5, 0, &child, nullptr));
        papcclConfig_t cfg = PAPCCL_CONFIG_INITIALIZER;
        cfg.magic = 0;
        EXPECT_BAD(A, "magic", comm, papcclCommSplit(comm, 0, 0, &child, &cfg));
        // A valid split afterwards.
        ASSERT_EQ(papcclSuccess, papcclCommSplit(comm, 0, rk.rank, &child, nullptr))
            << papcclGetLastError(comm);
        Rank crk{rk.rank, 2, child, {}, Mode::kThreads};
        ValidAfterwards(crk, 10);
        EXPECT_EQ(papcclSuccess, papcclCommDestroy(child));
        ValidAfterwards(rk, 12);
      },
      Opt());
}

}  // namespace
}  // namespace papt
