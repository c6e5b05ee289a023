// SPDX-License-Identifier: Apache-2.0
// The mismatch check (src/arrival/mismatch.c, docs/PAP-ENGINE.md section 11) alone: made-up
// ranks on a made-up shared board make calls, and the module's own functions compare them at
// arrival (the later arriver finds the difference, marks it and names both calls), at
// completion (the first arriver reads the mark) and at a message board's home (one notice to
// every rank per collective). Matching calls pass; PAPCCL_CHECK_MISMATCH=0 passes all.
#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "common/warn_capture.h"
#include "internal/shim_mismatch.h"

namespace {

using papt::ExpectWarn;

using Board = std::unique_ptr<papTestMism, void (*)(papTestMism*)>;

Board MakeBoard(int nranks, int check) {
  return Board(papTestMismNew(nranks, check), papTestMismFree);
}

papTestMismCall Call(size_t count = 8, papcclDataType_t t = papcclFloat32,
                     papcclRedOp_t op = papcclSum, const char* coll = "allreduce", int root = 0) {
  return papTestMismCall{coll, count, t, op, root};
}

class MismatchModule : public papt::WarnTest {};

TEST_F(MismatchModule, MatchingCallsPass) {
  Board b = MakeBoard(3, 1);
  ASSERT_NE(nullptr, b.get());
  // Ten collectives: the four slots are reused by later generations.
  for (uint64_t c = 0; c < 10; c++) {
    papTestMismCall k =
        Call(8 + c, c % 2 ? papcclInt32 : papcclFloat32, c % 3 ? papcclSum : papcclMax,
             c % 4 == 3 ? "reduce" : "allreduce", (int)(c % 3));
    for (int r : {1, 0, 2})  // rank 1 first
      EXPECT_EQ(papcclSuccess, papTestMismArrive(b.get(), c, r, &k)) << "collective " << c;
    for (int r = 0; r < 3; r++)
      EXPECT_EQ(papcclSuccess, papTestMismComplete(b.get(), c, r)) << "collective " << c;
  }
}

struct Diff {
  const char* what;
  papTestMismCall a, b;
  const char* warn;  // what the WARN says of the two calls
};

// Rank 0 arrives first with a, rank 1 then with b: rank 1's arrival fails naming both calls,
// and rank 0's completion finds the mark and fails the same way.
TEST_F(MismatchModule, EachDifferenceIsFlaggedOnBothRanks) {
  const Diff diffs[] = {
      {"count", Call(8), Call(9),
       "rank 0 called AllReduce(count 8, float, sum) but rank 1 called AllReduce(count 9, float, "
       "sum)"},
      {"op", Call(8), Call(8, papcclFloat32, papcclMax),
       "rank 0 called AllReduce(count 8, float, sum) but rank 1 called AllReduce(count 8, float, "
       "max)"},
      {"datatype", Call(8), Call(8, papcclInt32),
       "rank 0 called AllReduce(count 8, float, sum) but rank 1 called AllReduce(count 8, int32, "
       "sum)"},
      {"root", Call(8, papcclFloat32, papcclSum, "reduce", 0),
       Call(8, papcclFloat32, papcclSum, "reduce", 1),
       "rank 0 called Reduce(count 8, float, sum, root 0) but rank 1 called Reduce(count 8, "
       "float, sum, root 1)"},
      {"collective", Call(8), Call(8, papcclFloat32, papcclSum, "allgather"),
       "rank 0 called AllReduce(count 8, float, sum) but rank 1 called AllGather(count 8, "
       "float)"},
  };
  uint64_t c = 5;
  for (const Diff& d : diffs) {
    Board b = MakeBoard(2, 1);
    ASSERT_NE(nullptr, b.get());
    ExpectWarn w({"mismatch"});
    EXPECT_EQ(papcclSuccess, papTestMismArrive(b.get(), c, 0, &d.a)) << d.what;
    EXPECT_EQ(papcclInvalidUsage, papTestMismArrive(b.get(), c, 1, &d.b)) << d.what;
    EXPECT_EQ(1, w.Count(d.warn)) << d.what;
    EXPECT_EQ(papcclInvalidUsage, papTestMismComplete(b.get(), c, 0)) << d.what;
    EXPECT_EQ(2, w.Count(d.warn)) << d.what;
    EXPECT_EQ(2, w.Count("collective #" + std::to_string(c) + " mismatch")) << d.what;
    c += 7;
  }
}

TEST_F(MismatchModule, OffPassesEveryCall) {
  Board b = MakeBoard(2, 0);
  ASSERT_NE(nullptr, b.get());
  papTestMismCall a = Call(8), k = Call(9, papcclInt32, papcclMax);
  EXPECT_EQ(papcclSuccess, papTestMismArrive(b.get(), 0, 0, &a));
  EXPECT_EQ(papcclSuccess, papTestMismArrive(b.get(), 0, 1, &k));
  EXPECT_EQ(papcclSuccess, papTestMismComplete(b.get(), 0, 0));
  EXPECT_EQ(papcclSuccess, papTestMismComplete(b.get(), 0, 1));
  EXPECT_EQ(0, papTestMismAtHome(b.get(), 0, 0, &a));
  EXPECT_EQ(0, papTestMismAtHome(b.get(), 0, 1, &k));
}

// A message board: the home keeps each collective's first call and pushes one notice to
// every rank when a later call differs, once per collective.
TEST_F(MismatchModule, HomeNotifiesEveryRankOncePerCollective) {
  const int n = 3;
  Board b = MakeBoard(n, 1);
  ASSERT_NE(nullptr, b.get());
  papTestMismCall a = Call(8), root1 = Call(8, papcclFloat32, papcclSum, "allreduce", 1);
  EXPECT_EQ(0, papTestMismAtHome(b.get(), 3, 2, &a));
  EXPECT_EQ(0, papTestMismAtHome(b.get(), 3, 0, &a));
  EXPECT_EQ(n, papTestMismAtHome(b.get(), 3, 1, &root1));
  EXPECT_EQ(0, papTestMismAtHome(b.get(), 3, 1, &root1));  // told already
  for (const papTestMismCall& k :
       {Call(16), Call(8, papcclFloat64), Call(8, papcclFloat32, papcclMin)}) {
    uint64_t c = 4 + (uint64_t)k.count + (uint64_t)k.dtype + (uint64_t)k.op;
    EXPECT_EQ(0, papTestMismAtHome(b.get(), c, 0, &a));
    EXPECT_EQ(n, papTestMismAtHome(b.get(), c, 2, &k));
  }
}

}  // namespace
