// SPDX-License-Identifier: Apache-2.0
// Collective correctness: every collective x datatype x op x placement x count x ranks x mode
// (trimmed so that every axis value appears), checked bit-exactly against references.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <string>
#include <tuple>
#include <vector>

#include "internal/shim_comm.h"
#include "multirank/harness.h"
#include "sanitizer.h"

namespace papt {
namespace {

// The large count spans several pipeline chunks. Under a sanitizer, which checks every load
// and store (ThreadSanitizer: 1.5 minutes per 2-rank case at 1000003 elements; ASan+UBSan:
// 69 s for the threads shard), the volume adds checks of the same code, not new paths or
// interleavings: there it is 100003 elements (400 KB of float) in 32 KiB chunks, so that it
// still spans about as many chunks as 1000003 elements in the default 256 KiB chunks.
#if PAPT_TSAN || PAPT_ASAN
const size_t kBig = 100003;
const char* const kBigChunk = "32768";
#else
const size_t kBig = 1000003;
const char* const kBigChunk = nullptr;  // the default chunk, or the one the caller set
#endif
// The chunk for kBig: kBigChunk, else whatever PAPCCL_CHUNK_SIZE the caller's environment has.
const char* BigChunk() {
  return kBigChunk ? kBigChunk : getenv("PAPCCL_CHUNK_SIZE");
}
const std::vector<size_t> kCounts = {0, 1, 7, kBig};
const std::vector<int> kRanks = {1, 2, 3, 4, 8};

class Collectives : public Test {};

std::string TypeParamName(const ::testing::TestParamInfo<papcclDataType_t>& info) {
  return TypeName(info.param);
}

// ---- Full datatype x op x collective matrix (3 ranks, threads) --------------------------

// 3 ranks (not a power of two: folded rhd, uneven ring segments; the float average is
// compared within its rounding bound) and 4 ranks (the float average is exact, bit-exact).
using TypeRanks = std::tuple<papcclDataType_t, int>;

class TypeOpMatrix : public Test, public ::testing::WithParamInterface<TypeRanks> {};

TEST_P(TypeOpMatrix, EveryCollectiveAndOp) {
  const papcclDataType_t type = std::get<0>(GetParam());
  const int n = std::get<1>(GetParam());
  Options opt;
  opt.init = Init::kInitAll;
  RunRanks(
      Mode::kThreads, n,
      [&](Rank& rk) {
        uint32_t seed = 1;
        for (size_t count : {size_t(7), size_t(1000)}) {
          for (bool inPlace : {false, true}) {
            for (Coll coll : kAllColls) {
              if (CollReduces(coll)) {
                for (Op op : kAllOps) {
                  Case c;
                  c.coll = coll;
                  c.type = type;
                  c.op = op;
                  c.count = count;
                  c.inPlace = inPlace;
                  c.root = (int)(seed % (uint32_t)n);
                  c.seed = seed++;
                  RunCase(rk, c);
                }
              } else {
                if (coll == Coll::kSendRecv && inPlace) continue;
                Case c;
                c.coll = coll;
                c.type = type;
                c.count = count;
                c.inPlace = inPlace;
                c.root = (int)(seed % (uint32_t)n);
                c.seed = seed++;
                RunCase(rk, c);
              }
            }
          }
        }
      },
      opt);
}

INSTANTIATE_TEST_SUITE_P(Types, TypeOpMatrix,
                         ::testing::Combine(::testing::ValuesIn(kAllTypes),
                                            ::testing::Values(3, 4)),
                         [](const ::testing::TestParamInfo<TypeRanks>& info) {
                           return std::string(TypeName(std::get<0>(info.param))) + "_n" +
                                  std::to_string(std::get<1>(info.param));
                         });

// The same matrix for a few types as processes (the op table lives in each process).
class TypeOpProcesses : public Test, public ::testing::WithParamInterface<papcclDataType_t> {};

TEST_P(TypeOpProcesses, ReductionsEveryOp) {
  const papcclDataType_t type = GetParam();
  RunRanks(Mode::kProcesses, 3, [&](Rank& rk) {
    uint32_t seed = 100;
    for (bool inPlace : {false, true}) {
      for (Coll coll : {Coll::kAllReduce, Coll::kReduce, Coll::kReduceScatter}) {
        for (Op op : kAllOps) {
          Case c;
          c.coll = coll;
          c.type = type;
          c.op = op;
          c.count = 1000;
          c.inPlace = inPlace;
          c.root = (int)(seed % 3);
          c.seed = seed++;
          RunCase(rk, c);
        }
      }
    }
  });
}

INSTANTIATE_TEST_SUITE_P(Types, TypeOpProcesses,
                         ::testing::Values(papcclInt8, papcclUint64, papcclFloat16, papcclBfloat16,
                                           papcclFloat8e4m3, papcclFloat8e5m2),
                         TypeParamName);

// ---- Large counts for a few types ------------------------------------------------------

TEST_F(Collectives, LargeCountFewTypes) {
  struct Big {
    Coll coll;
    papcclDataType_t type;
    Op op;
    bool inPlace;
  };
  const Big cases[] = {
      {Coll::kAllReduce, papcclInt8, Op::kSum, false},
      {Coll::kAllReduce, papcclFloat16, Op::kAvg, true},
      {Coll::kAllReduce, papcclBfloat16, Op::kMax, false},
      {Coll::kAllReduce, papcclFloat8e5m2, Op::kSum, true},
      {Coll::kReduceScatter, papcclFloat64, Op::kPreMulSum, false},
      {Coll::kReduce, papcclUint8, Op::kProd, true},
  };
  ScopedEnv chunk("PAPCCL_CHUNK_SIZE", BigChunk());
  RunRanks(Mode::kThreads, 3, [&](Rank& rk) {
    uint32_t seed = 500;
    for (const Big& b : cases) {
      Case c;
      c.coll = b.coll;
      c.type = b.type;
      c.op = b.op;
      c.count = b.coll == Coll::kReduceScatter ? kBig / 3 : kBig;
      c.inPlace = b.inPlace;
      c.root = 2;
      c.seed = seed++;
      RunCase(rk, c);
    }
  });
}

// ---- Every collective at every count on every rank count --------------------------------

using CountsParam = std::tuple<Mode, int, size_t>;

class CountsRanks : public Test, public ::testing::WithParamInterface<CountsParam> {};

std::string CountsName(const ::testing::TestParamInfo<CountsParam>& info) {
  return std::string(ModeName(std::get<0>(info.param))) + "_n" +
         std::to_string(std::get<1>(info.param)) + "_count" +
         std::to_string(std::get<2>(info.param));
}

TEST_P(CountsRanks, EveryCollective) {
  const Mode mode = std::get<0>(GetParam());
  const int n = std::get<1>(GetParam());
  const size_t count = std::get<2>(GetParam());
  // Pairwise (landing tier): each (ranks, count) in one mode, alternating, so that every rank
  // count and every count still runs in both modes. The parity puts 1, 3 and 8 ranks at the
  // large count in threads mode, which runs every collective there (processes mode runs a
  // subset at that count).
  const int ni = (int)(std::find(kRanks.begin(), kRanks.end(), n) - kRanks.begin());
  const int ci = (int)(std::find(kCounts.begin(), kCounts.end(), count) - kCounts.begin());
  if (!PairwiseCell3(ni, ci, mode == Mode::kThreads ? 1 : 0))
    GTEST_SKIP() << "pairwise matrix (PAPCCL_TEST_MATRIX=pairwise): this cell's pairs run in the "
                    "other mode; the full matrix runs it";
  ScopedEnv chunk("PAPCCL_CHUNK_SIZE", count == kBig ? BigChunk() : getenv("PAPCCL_CHUNK_SIZE"));
  RunRanks(mode, n, [&](Rank& rk) {
    uint32_t seed = 1000 + (uint32_t)count;
    for (Coll coll : kAllColls) {
      // In processes mode the largest count runs a representative subset (time on 2 cores);
      // threads mode runs every collective at every count.
      if (mode == Mode::kProcesses && count == kBig) {
        bool subset = coll == Coll::kAllReduce || coll == Coll::kAllGather;
        if (n <= 4)
          subset = subset || coll == Coll::kReduceScatter || coll == Coll::kBroadcast ||
                   coll == Coll::kSendRecv;
        if (!subset) continue;
      }
      for (bool inPlace : {false, true}) {
        if (coll == Coll::kSendRecv && inPlace) continue;
        std::vector<papcclDataType_t> types = {papcclFloat32};
        // int32 at every count for the reductions, out of place only at the largest count.
        if (CollReduces(coll) && (count != kBig || !inPlace)) types.push_back(papcclInt32);
        for (papcclDataType_t type : types) {
          Case c;
          c.coll = coll;
          c.type = type;
          c.op = Op::kSum;
          c.count = count;
          c.inPlace = inPlace;
          c.root = (int)(seed % (uint32_t)n);
          c.seed = seed++;
          RunCase(rk, c);
        }
      }
    }
  });
}

INSTANTIATE_TEST_SUITE_P(Threads, CountsRanks,
                         ::testing::Combine(::testing::Values(Mode::kThreads),
                                            ::testing::ValuesIn(kRanks),
                                            ::testing::ValuesIn(kCounts)),
                         CountsName);
INSTANTIATE_TEST_SUITE_P(Processes, CountsRanks,
                         ::testing::Combine(::testing::Values(Mode::kProcesses),
                                            ::testing::ValuesIn(kRanks),
                                            ::testing::ValuesIn(kCounts)),
                         CountsName);

// ---- Every way of creating the ranks ------------------------------------------------------

class InitVariants : public Test, public ::testing::WithParamInterface<Init> {};

TEST_P(InitVariants, CollectivesWork) {
  Options opt;
  opt.init = GetParam();
  for (int n : {1, 4}) {
    RunRanks(
        Mode::kThreads, n,
        [&](Rank& rk) {
          int count = -1, rank = -1;
          EXPECT_EQ(papcclSuccess, papcclCommCount(rk.comm, &count));
          EXPECT_EQ(papcclSuccess, papcclCommUserRank(rk.comm, &rank));
          EXPECT_EQ(n, count);
          EXPECT_EQ(rk.rank, rank);
          uint32_t seed = 7;
          for (Coll coll :
               {Coll::kAllReduce, Coll::kBroadcast, Coll::kAllGather, Coll::kSendRecv}) {
            Case c;
            c.coll = coll;
            c.type = papcclFloat32;
            c.count = 1000;
            c.root = n - 1;
            c.seed = seed++;
            RunCase(rk, c);
          }
        },
        opt);
  }
}

INSTANTIATE_TEST_SUITE_P(Init, InitVariants,
                         ::testing::Values(Init::kInitRank, Init::kInitAll, Init::kGroupInit),
                         [](const ::testing::TestParamInfo<Init>& info) {
                           return std::string(InitName(info.param));
                         });

// ---- Allreduce algorithms forced, around the size switches, many chunks ------------------

using AlgoParam = std::tuple<std::string, int>;

class AllReduceAlgo : public Test, public ::testing::WithParamInterface<AlgoParam> {};

// Element counts (float32) around PAPCCL_RD_MAX_BYTES (4096 by default: 1024 floats) and
// PAPCCL_RHD_MAX_BYTES (262144: 65536 floats), plus odd counts and counts below the number
// of ranks. None but the switch points are multiples of the chunk.
std::vector<size_t> AlgoCounts() {
  size_t rd = (size_t)papTestCommParamRdMaxBytes() / 4;
  size_t rhd = (size_t)papTestCommParamRhdMaxBytes() / 4;
  return {1, 3, 5, 7, rd - 1, rd, rd + 1, rhd - 1, rhd, rhd + 1, 200003};
}

// A float32 sum allreduce of count elements, out of place then in place.
void RunSumBothPlaces(Rank& rk, size_t count, uint32_t& seed) {
  for (bool inPlace : {false, true}) {
    Case c;
    c.coll = Coll::kAllReduce;
    c.type = papcclFloat32;
    c.op = Op::kSum;
    c.count = count;
    c.inPlace = inPlace;
    c.seed = seed++;
    RunCase(rk, c);
  }
}

void RunAlgoCounts(Rank& rk, uint32_t seedBase) {
  uint32_t seed = seedBase;
  for (size_t count : AlgoCounts()) {
    RunSumBothPlaces(rk, count, seed);
    if (count > 100000) continue;  // the largest count: float32 only (time)
    // Narrow element sizes split the vector at other byte offsets.
    Case b;
    b.coll = Coll::kAllReduce;
    b.type = papcclBfloat16;
    b.op = Op::kAvg;
    b.count = count * 2 + 1;
    b.seed = seed++;
    RunCase(rk, b);
    Case i8;
    i8.coll = Coll::kAllReduce;
    i8.type = papcclInt8;
    i8.op = Op::kMin;
    i8.count = count * 4 + 3;
    i8.inPlace = true;
    i8.seed = seed++;
    RunCase(rk, i8);
  }
}

TEST_P(AllReduceAlgo, AroundSwitchPoints) {
  const std::string algo = std::get<0>(GetParam());
  const int n = std::get<1>(GetParam());
  ScopedEnv env("PAPCCL_ALGO", algo == "auto" ? nullptr : algo.c_str());
  RunRanks(Mode::kThreads, n, [&](Rank& rk) { RunAlgoCounts(rk, 3000); });
}

INSTANTIATE_TEST_SUITE_P(Algos, AllReduceAlgo,
                         ::testing::Combine(::testing::Values("ring", "rhd"),
                                            ::testing::Values(2, 3, 4, 5, 8)),
                         [](const ::testing::TestParamInfo<AlgoParam>& info) {
                           return std::get<0>(info.param) + "_n" +
                                  std::to_string(std::get<1>(info.param));
                         });
// The automatic choice around the same switch points.
INSTANTIATE_TEST_SUITE_P(AlgosAuto, AllReduceAlgo,
                         ::testing::Combine(::testing::Values("auto"), ::testing::Values(3, 8)),
                         [](const ::testing::TestParamInfo<AlgoParam>& info) {
                           return std::get<0>(info.param) + "_n" +
                                  std::to_string(std::get<1>(info.param));
                         });

// A small chunk makes every vector many chunks (and the last one short).
class AllReduceSmallChunk : public Test, public ::testing::WithParamInterface<std::string> {};

TEST_P(AllReduceSmallChunk, ManyChunks) {
  const std::string algo = GetParam();
  ScopedEnv chunk("PAPCCL_CHUNK_SIZE", "4096");
  ScopedEnv force("PAPCCL_ALGO", algo.c_str());
  // Let rhd run its halving path on large vectors too.
  ScopedEnv rhdMax("PAPCCL_RHD_MAX_BYTES", "1048576");
  for (int n : {3, 4, 5}) {
    RunRanks(Mode::kThreads, n, [&](Rank& rk) {
      uint32_t seed = 4000;
      for (size_t count : {size_t(1023), size_t(4097), size_t(100003), size_t(262147)}) {
        for (Op op : {Op::kSum, Op::kMax, Op::kPreMulSum}) {
          Case c;
          c.coll = Coll::kAllReduce;
          c.type = papcclFloat32;
          c.op = op;
          c.count = count;
          c.inPlace = (seed % 2) == 1;
          c.seed = seed++;
          RunCase(rk, c);
        }
      }
      // The other chunked plans with the small chunk too.
      for (Coll coll : {Coll::kReduceScatter, Coll::kAllGather, Coll::kBroadcast, Coll::kReduce}) {
        Case c;
        c.coll = coll;
        c.type = papcclFloat16;
        c.op = Op::kSum;
        c.count = 30011;
        c.root = 1;
        c.seed = seed++;
        RunCase(rk, c);
      }
    });
  }
}

INSTANTIATE_TEST_SUITE_P(Algos, AllReduceSmallChunk, ::testing::Values("ring", "rhd"),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           return info.param;
                         });

// Final pieces streamed past the caches (non-temporal stores): by default only for results
// of PAPCCL_STREAM_MIN_BYTES (64 MiB) and up; here for every result, so that the streamed
// copies of the ring, AC2S (fetched from the owner's staging), the chain and the ring
// allgather and chain broadcast are checked at sizes whose pieces stream (64 KiB and up).
TEST_F(Collectives, StreamedFinalPieces) {
  ScopedEnv stream("PAPCCL_STREAM_MIN_BYTES", "0");
  for (const char* algo : {"ring", "ac2s", "chain"}) {
    ScopedEnv force("PAPCCL_ALGO", algo);
    papTestCommParamReset();  // this process may have read the parameters before
    RunRanks(Mode::kProcesses, 3, [&](Rank& rk) {
      uint32_t seed = 6000;
      for (size_t count : {size_t(262147), size_t(1048576)})
        RunSumBothPlaces(rk, count, seed);
      for (Coll coll : {Coll::kAllGather, Coll::kBroadcast}) {
        Case c;
        c.coll = coll;
        c.type = papcclFloat32;
        c.count = 300007;
        c.root = 2;
        c.seed = seed++;
        RunCase(rk, c);
      }
    });
  }
  papTestCommParamReset();
}

TEST_F(Collectives, AllReduceAlgoProcesses) {
  ScopedEnv chunk("PAPCCL_CHUNK_SIZE", "4096");
  for (const char* algo : {"ring", "rhd"}) {
    ScopedEnv force("PAPCCL_ALGO", algo);
    RunRanks(Mode::kProcesses, 5, [&](Rank& rk) {
      uint32_t seed = 5000;
      for (size_t count : {size_t(1), size_t(1025), size_t(65537), size_t(100003)}) {
        Case c;
        c.coll = Coll::kAllReduce;
        c.type = papcclFloat32;
        c.op = Op::kSum;
        c.count = count;
        c.seed = seed++;
        RunCase(rk, c);
      }
    });
  }
}

// ---- The harness's own encoders agree with the format definitions -----------------------

TEST_F(Collectives, ReferenceEncodersRoundTrip) {
  for (papcclDataType_t t : {papcclFloat16, papcclBfloat16, papcclFloat8e4m3, papcclFloat8e5m2}) {
    size_t patterns = size_t(1) << (8 * TypeSize(t));
    size_t finite = 0;
    for (size_t b = 0; b < patterns; b++) {
      double v = DecodeValue(t, b);
      if (std::isnan(v) || std::isinf(v)) continue;
      finite++;
      uint64_t back = 0;
      ASSERT_TRUE(EncodeExact(t, v, &back)) << TypeName(t) << " pattern " << b;
      ASSERT_EQ(b, back) << TypeName(t) << " value " << v;
    }
    EXPECT_GT(finite, patterns / 2) << TypeName(t);
  }
  // Known values (the formats' definitions).
  uint64_t bits = 0;
  ASSERT_TRUE(EncodeExact(papcclFloat16, 1.0, &bits));
  EXPECT_EQ(0x3c00u, bits);
  ASSERT_TRUE(EncodeExact(papcclBfloat16, -2.0, &bits));
  EXPECT_EQ(0xc000u, bits);
  ASSERT_TRUE(EncodeExact(papcclFloat8e4m3, 448.0, &bits));
  EXPECT_EQ(0x7eu, bits);
  ASSERT_TRUE(EncodeExact(papcclFloat8e5m2, 57344.0, &bits));
  EXPECT_EQ(0x7bu, bits);
  EXPECT_FALSE(EncodeExact(papcclFloat8e5m2, 9.0, &bits));  // e5m2 is exact up to 8 only
  EXPECT_TRUE(EncodeExact(papcclFloat8e4m3, 15.0, &bits));
  EXPECT_FALSE(EncodeExact(papcclFloat8e4m3, 17.0, &bits));
}

}  // namespace
}  // namespace papt
