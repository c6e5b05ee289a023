// SPDX-License-Identifier: Apache-2.0
// Communicator split: 2x4 by rank/4, odd/even with reversed keys, NOCOLOR, splits of splits;
// collectives on children and parent interleaved and verified; children destroyed first.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "multirank/harness.h"

namespace papt {
namespace {

class Split : public Test, public ::testing::WithParamInterface<Mode> {};

std::string ModeParamName(const ::testing::TestParamInfo<Mode>& info) {
  return ModeName(info.param);
}

// The child's members' parent ranks, in child rank order (allgather over the child).
std::vector<int32_t> MembersOf(papcclComm_t child, int childN, int parentRank) {
  std::vector<int32_t> all(childN, -1);
  int32_t mine = parentRank;
  EXPECT_EQ(papcclSuccess, papcclAllGather(&mine, all.data(), 1, papcclInt32, child, nullptr))
      << papcclGetLastError(child);
  return all;
}

// Checks rank, size and membership of a child against the expected parent ranks in order.
void CheckChild(papcclComm_t child, int parentRank, const std::vector<int>& expectMembers,
                const std::string& what) {
  ASSERT_NE(nullptr, child) << what;
  int n = -1, r = -1;
  EXPECT_EQ(papcclSuccess, papcclCommCount(child, &n));
  EXPECT_EQ(papcclSuccess, papcclCommUserRank(child, &r));
  ASSERT_EQ((int)expectMembers.size(), n) << what;
  int wantRank = -1;
  for (int i = 0; i < n; i++)
    if (expectMembers[i] == parentRank) wantRank = i;
  EXPECT_EQ(wantRank, r) << what;
  std::vector<int32_t> got = MembersOf(child, n, parentRank);
  for (int i = 0; i < n; i++)
    EXPECT_EQ(expectMembers[i], got[i]) << what << " member " << i;
}

// A case on a child communicator (its own rank and size).
bool RunOn(papcclComm_t comm, Mode mode, const Case& c) {
  Rank rk{};
  rk.comm = comm;
  rk.mode = mode;
  EXPECT_EQ(papcclSuccess, papcclCommCount(comm, &rk.nranks));
  EXPECT_EQ(papcclSuccess, papcclCommUserRank(comm, &rk.rank));
  return RunCase(rk, c);
}

Case MakeCase(Coll coll, papcclDataType_t t, Op op, size_t count, uint32_t seed) {
  Case c;
  c.coll = coll;
  c.type = t;
  c.op = op;
  c.count = count;
  c.root = (int)seed;
  c.seed = seed;
  return c;
}

TEST_P(Split, Halves2x4OddEvenNoColor) {
  const Mode mode = GetParam();
  const int n = 8;
  RunRanks(mode, n, [&](Rank& rk) {
    const int r = rk.rank;
    const std::string who = std::string(ModeName(mode)) + " parent rank " + std::to_string(r);

    // 2 x 4: color rank/4, key rank.
    papcclComm_t halves = nullptr;
    ASSERT_EQ(papcclSuccess, papcclCommSplit(rk.comm, r / 4, r, &halves, nullptr))
        << papcclGetLastError(rk.comm);
    std::vector<int> halfMembers;
    for (int p = 0; p < n; p++)
      if (p / 4 == r / 4) halfMembers.push_back(p);
    CheckChild(halves, r, halfMembers, who + " (halves)");

    // Odd/even with the key reversing the order (highest parent rank first).
    papcclConfig_t cfg = PAPCCL_CONFIG_INITIALIZER;
    papcclComm_t parity = nullptr;
    ASSERT_EQ(papcclSuccess, papcclCommSplit(rk.comm, r % 2, n - r, &parity, &cfg))
        << papcclGetLastError(rk.comm);
    std::vector<int> parityMembers;
    for (int p = n - 1; p >= 0; p--)
      if (p % 2 == r % 2) parityMembers.push_back(p);
    CheckChild(parity, r, parityMembers, who + " (odd/even)");

    // Ranks 0 and 5 opt out; the rest form one child; equal keys order by parent rank.
    const bool out = r == 0 || r == 5;
    papcclComm_t rest = reinterpret_cast<papcclComm_t>(&cfg);  // must be overwritten
    ASSERT_EQ(papcclSuccess,
              papcclCommSplit(rk.comm, out ? PAPCCL_SPLIT_NOCOLOR : 7, 0, &rest, nullptr))
        << papcclGetLastError(rk.comm);
    if (out) {
      EXPECT_EQ(nullptr, rest) << who << ": NOCOLOR must yield a NULL communicator";
      rest = nullptr;
    } else {
      CheckChild(rest, r, {1, 2, 3, 4, 6, 7}, who + " (nocolor rest)");
    }

    // Interleave collectives on the parent and the children; every one verified.
    uint32_t seed = 100;
    RunCase(rk, MakeCase(Coll::kAllReduce, papcclFloat32, Op::kSum, 10007, seed++));
    RunOn(halves, mode, MakeCase(Coll::kAllReduce, papcclInt32, Op::kMax, 4099, seed++));
    RunOn(parity, mode, MakeCase(Coll::kAllGather, papcclFloat16, Op::kSum, 333, seed++));
    RunCase(rk, MakeCase(Coll::kReduceScatter, papcclInt64, Op::kSum, 257, seed++));
    if (rest) RunOn(rest, mode, MakeCase(Coll::kBroadcast, papcclUint8, Op::kSum, 5000, seed));
    seed++;
    RunOn(halves, mode, MakeCase(Coll::kSendRecv, papcclFloat64, Op::kSum, 1001, seed++));
    RunCase(rk, MakeCase(Coll::kAlltoAll, papcclBfloat16, Op::kSum, 77, seed++));
    RunOn(parity, mode, MakeCase(Coll::kReduce, papcclFloat32, Op::kAvg, 3003, seed++));
    if (rest) RunOn(rest, mode, MakeCase(Coll::kAllReduce, papcclInt8, Op::kPreMulSum, 99, seed));
    seed++;
    RunCase(rk, MakeCase(Coll::kAllReduce, papcclFloat32, Op::kSum, 1, seed++));

    // Children first, then the parent (the harness).
    if (rest) {
      EXPECT_EQ(papcclSuccess, papcclCommDestroy(rest));
    }
    EXPECT_EQ(papcclSuccess, papcclCommDestroy(parity));
    EXPECT_EQ(papcclSuccess, papcclCommDestroy(halves));
    RunCase(rk, MakeCase(Coll::kAllGather, papcclInt32, Op::kSum, 5, seed++));
  });
}

// A split of a split, and a child that outlives further parent collectives.
TEST_P(Split, SplitOfSplit) {
  const Mode mode = GetParam();
  const int n = 8;
  RunRanks(mode, n, [&](Rank& rk) {
    const int r = rk.rank;
    papcclComm_t half = nullptr, pair = nullptr;
    ASSERT_EQ(papcclSuccess, papcclCommSplit(rk.comm, r % 2, r, &half, nullptr));
    int hr = -1;
    ASSERT_EQ(papcclSuccess, papcclCommUserRank(half, &hr));
    ASSERT_EQ(papcclSuccess, papcclCommSplit(half, hr / 2, -hr, &pair, nullptr));
    // pair = parent ranks {r%2 + 4*(hr/2), r%2 + 4*(hr/2) + 2}, reversed by the key.
    int base = r % 2 + 4 * (hr / 2);
    CheckChild(pair, r, {base + 2, base}, "pair of parent rank " + std::to_string(r));
    uint32_t seed = 300;
    RunOn(pair, mode, MakeCase(Coll::kAllReduce, papcclFloat32, Op::kSum, 1000, seed++));
    RunCase(rk, MakeCase(Coll::kAllReduce, papcclUint32, Op::kProd, 1000, seed++));
    RunOn(half, mode, MakeCase(Coll::kGather, papcclInt8, Op::kSum, 100, seed++));
    RunOn(pair, mode, MakeCase(Coll::kScatter, papcclFloat8e4m3, Op::kSum, 100, seed++));
    EXPECT_EQ(papcclSuccess, papcclCommDestroy(pair));
    EXPECT_EQ(papcclSuccess, papcclCommDestroy(half));
  });
}

// The smallest case of two sibling children living in one process (ranks as threads): four
// ranks split into two pairs, each pair then runs an allreduce.
TEST_P(Split, SiblingChildrenInOneProcess) {
  const Mode mode = GetParam();
  RunRanks(mode, 4, [&](Rank& rk) {
    papcclComm_t pair = nullptr;
    papcclResult_t res = papcclCommSplit(rk.comm, rk.rank / 2, rk.rank, &pair, nullptr);
    ASSERT_EQ(papcclSuccess, res) << "rank " << rk.rank << ": " << papcclGetLastError(rk.comm);
    CheckChild(pair, rk.rank, {rk.rank / 2 * 2, rk.rank / 2 * 2 + 1},
               "pair of parent rank " + std::to_string(rk.rank));
    RunOn(pair, mode, MakeCase(Coll::kAllReduce, papcclFloat32, Op::kSum, 100, 1));
    EXPECT_EQ(papcclSuccess, papcclCommDestroy(pair));
  });
}

INSTANTIATE_TEST_SUITE_P(Modes, Split, ::testing::Values(Mode::kThreads, Mode::kProcesses),
                         ModeParamName);

}  // namespace
}  // namespace papt
