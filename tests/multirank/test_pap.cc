// SPDX-License-Identifier: Apache-2.0
// The PAP engine: AC2S correctness under arrival patterns (late ranks shifted around the
// commit point), determinism, ranks that never arrive, the selector and the statistics.
#include <dirent.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "multirank/harness.h"
#include "perf/arrival.h"
#include "sanitizer.h"

namespace papt {
namespace {

class Pap : public Test {};

papcclPapStats Stats(papcclComm_t comm) {
  papcclPapStats st;
  memset(&st, 0, sizeof(st));
  EXPECT_EQ(papcclSuccess, papcclCommGetPapStats(comm, &st));
  return st;
}

// Runs c with this rank's injected delay between the input fill and the call.
bool RunDelayed(const Rank& rk, const Case& c, double delayUs) {
  CaseRunner cr(rk, c);
  papPerfDelayUs(delayUs);
  bool ok = cr.Issue();
  return cr.Verify() && ok;
}

// A recorded-trace file for the trace:FILE pattern: 5 calls of per-rank offsets (us).
std::string TraceFile(int n) {
  static std::atomic<int> serial{0};  // rank threads make their files at the same time
  std::string path = "/tmp/papccl-test-trace-" + std::to_string(getpid()) + "-" +
                     std::to_string(serial.fetch_add(1)) + ".txt";
  FILE* f = fopen(path.c_str(), "w");
  if (f == nullptr) return "";
  fprintf(f, "# offsets in us, one line per call\n");
  for (int row = 0; row < 5; row++) {
    for (int r = 0; r < n; r++)
      fprintf(f, "%s%d", r ? " " : "", ((r * 7 + row * 3) % n) * 500);
    fprintf(f, "\n");
  }
  fclose(f);
  return path;
}

// ---- Correctness under patterns ------------------------------------------------------------

// ranks x mode x algorithm (forced "ac2s", "chain", "small", or "det" for
// PAPCCL_DETERMINISTIC=1).
using PapParam = std::tuple<int, Mode, std::string>;
class PapPatterns : public Pap, public ::testing::WithParamInterface<PapParam> {};

// The large count and the chunk that cuts each rank's block of it into several chunks. Under a
// sanitizer, which checks every load and store, the 4 MB vectors take minutes per case
// (ASan+UBSan: 136 s for the ac2s shard) and add volume, not paths or interleavings: there a
// tenth of it, in proportionally smaller chunks.
#if PAPT_TSAN || PAPT_ASAN
constexpr size_t kBig = 100003;
constexpr const char* kBigChunk = "8192";
#else
constexpr size_t kBig = 1000003;
constexpr const char* kBigChunk = "65536";
#endif

// Delays (us) of the late rank around the decider's commit point (PAPCCL_PAP_GAP_US = 100):
// simultaneous, inside the quiet window, right at its end, just after it, well after it.
const std::vector<double> kCommitShifts = {0, 50, 100, 150, 400, 3000};

TEST_P(PapPatterns, EveryPatternCountPlacementTypeAndOp) {
  const int n = std::get<0>(GetParam());
  const Mode mode = std::get<1>(GetParam());
  const std::string algo = std::get<2>(GetParam());
  // "ac2s-fifo": AC2S with the final chunks sent through the FIFOs (no staging area).
  ScopedEnv forced("PAPCCL_ALGO", algo == "det"         ? nullptr
                                  : algo == "ac2s-fifo" ? "ac2s"
                                                        : algo.c_str());
  ScopedEnv staging("PAPCCL_SHM_STAGING_SIZE", algo == "ac2s-fifo" ? "0" : nullptr);
  ScopedEnv det("PAPCCL_DETERMINISTIC", algo == "det" ? "1" : nullptr);
  ScopedEnv gap("PAPCCL_PAP_GAP_US", "100");
  ScopedEnv chunk("PAPCCL_CHUNK_SIZE", kBigChunk);  // several chunks per block at kBig
  RunRanks(mode, n, [&](Rank& rk) {
    const int expectAlgo = algo == "det"     ? papcclPapAlgoAc2sDet
                           : algo == "chain" ? papcclPapAlgoChain
                           : algo == "small" ? papcclPapAlgoSmall
                                             : papcclPapAlgoAc2s;
    uint32_t seed = 1;
    int sawEarlyCommit = 0;
    // 1. Every pattern x count x placement (float sum), delays of a few ms.
    const std::string tracePath = TraceFile(n);
    ASSERT_FALSE(tracePath.empty());
    const std::string trace = "trace:" + tracePath;
    const char* patterns[] = {"balanced",  "late:0",  "late",   "late-k:2",
                              "staircase", "uniform", "normal", trace.c_str()};
    // Pairwise (landing tier): each pattern x count once, placements alternating.
    int pi = 0;
    for (const char* pat : patterns) {
      papPerfArrival a;
      memset(&a, 0, sizeof(a));
      a.skewUs = 3000;
      char err[256];
      ASSERT_EQ(0, papPerfArrivalParse(pat, &a, err, sizeof(err))) << err;
      int ci = 0;
      for (size_t count : {size_t(0), size_t(1), size_t(7), kBig}) {
        for (bool inPlace : {false, true}) {
          if (!PairwiseCell3(pi, ci, inPlace ? 1 : 0)) continue;
          Case c;
          c.type = papcclFloat32;
          c.count = count;
          c.inPlace = inPlace;
          c.seed = seed++;
          double d = papPerfArrivalDelayUs(&a, rk.rank, n, (long)c.seed);
          EXPECT_TRUE(RunDelayed(rk, c, d)) << pat << " " << c.Describe();
          if (count == 0) continue;
          papcclPapStats st = Stats(rk.comm);
          EXPECT_EQ(expectAlgo, st.lastAlgo) << pat << " " << c.Describe();
          if (st.lastEarly < n) sawEarlyCommit++;
        }
        ci++;
      }
      papPerfArrivalFree(&a);
      pi++;
    }
    unlink(tracePath.c_str());
    // 2. The last rank shifted around the commit point.
    for (double shift : kCommitShifts) {
      for (int rep = 0; rep < 2; rep++) {
        Case c;
        c.type = papcclFloat32;
        c.count = kBig;
        c.inPlace = rep == 1;
        c.seed = seed++;
        EXPECT_TRUE(RunDelayed(rk, c, rk.rank == n - 1 ? shift : 0))
            << "shift " << shift << " " << c.Describe();
      }
    }
    // 3. Every datatype and op, one late rank (in and out of place, uneven count).
    for (papcclDataType_t t : kAllTypes) {
      for (Op op : kAllOps) {
        Case c;
        c.type = t;
        c.op = op;
        c.count = 1001;
        c.inPlace = (seed & 1) != 0;
        c.seed = seed++;
        EXPECT_TRUE(RunDelayed(rk, c, rk.rank == (int)(c.seed % (uint32_t)n) ? 1500 : 0))
            << c.Describe();
      }
    }
    // A 3 ms late rank must have let the others commit without it at least once (n >= 3).
    if (n >= 3) {
      EXPECT_GT(sawEarlyCommit, 0) << "no early commit seen: the PAP path never ran";
    }
  });
}

INSTANTIATE_TEST_SUITE_P(
    Ranks, PapPatterns,
    ::testing::Values(PapParam{2, Mode::kThreads, "ac2s"}, PapParam{3, Mode::kThreads, "ac2s"},
                      PapParam{4, Mode::kProcesses, "ac2s"}, PapParam{8, Mode::kThreads, "ac2s"},
                      PapParam{3, Mode::kProcesses, "det"}, PapParam{4, Mode::kThreads, "det"},
                      PapParam{8, Mode::kProcesses, "ac2s"},
                      PapParam{5, Mode::kProcesses, "ac2s-fifo"},
                      PapParam{3, Mode::kThreads, "chain"}, PapParam{4, Mode::kProcesses, "chain"},
                      PapParam{8, Mode::kThreads, "chain"}, PapParam{2, Mode::kProcesses, "small"},
                      PapParam{3, Mode::kThreads, "small"}, PapParam{8, Mode::kProcesses, "small"}),
    [](const ::testing::TestParamInfo<PapParam>& info) {
      std::string a = std::get<2>(info.param);
      for (char& ch : a)
        if (ch == '-') ch = '_';
      return a + "_n" + std::to_string(std::get<0>(info.param)) + "_" +
             ModeName(std::get<1>(info.param));
    });

// ---- PAP-aware ReduceScatter, AllGather, Broadcast, Reduce -----------------------------------

using CollParam = std::tuple<int, Mode>;
class PapColls : public Pap, public ::testing::WithParamInterface<CollParam> {};

TEST_P(PapColls, EveryPatternCountPlacementRootTypeAndOp) {
  const int n = std::get<0>(GetParam());
  const Mode mode = std::get<1>(GetParam());
  ScopedEnv forced("PAPCCL_ALGO", "pap");
  ScopedEnv gap("PAPCCL_PAP_GAP_US", "100");
  ScopedEnv chunk("PAPCCL_CHUNK_SIZE", kBigChunk);
  const Coll colls[] = {Coll::kReduceScatter, Coll::kAllGather, Coll::kBroadcast, Coll::kReduce};
  RunRanks(mode, n, [&](Rank& rk) {
    uint32_t seed = 1;
    int sawEarlyCommit = 0;
    const std::string tracePath = TraceFile(n);
    ASSERT_FALSE(tracePath.empty());
    const std::string trace = "trace:" + tracePath;
    const char* patterns[] = {"balanced",  "late:0",  "late",   "late-k:2",
                              "staircase", "uniform", "normal", trace.c_str()};
    // Pairwise (landing tier): collective x pattern x count x placement, 32 of the 256 cells.
    // Collective ki and pattern pi run count (pi + ki) % 4 with placement (pi / 4 + ki) % 2,
    // so any two axes meet in every pair of their values.
    int ki = 0;
    for (Coll coll : colls) {
      int pi = 0;
      for (const char* pat : patterns) {
        papPerfArrival a;
        memset(&a, 0, sizeof(a));
        a.skewUs = 2000;
        char err[256];
        ASSERT_EQ(0, papPerfArrivalParse(pat, &a, err, sizeof(err))) << err;
        int ci = 0;
        for (size_t count : {size_t(0), size_t(1), size_t(7), kBig}) {
          for (bool inPlace : {false, true}) {
            if (!FullMatrix() && (ci != (pi + ki) % 4 || (inPlace ? 1 : 0) != (pi / 4 + ki) % 2))
              continue;
            Case c;
            c.coll = coll;
            c.type = papcclFloat32;
            c.count = count;
            c.inPlace = inPlace;
            c.root = (int)(seed % (uint32_t)n);
            c.seed = seed++;
            double d = papPerfArrivalDelayUs(&a, rk.rank, n, (long)c.seed);
            EXPECT_TRUE(RunDelayed(rk, c, d)) << pat << " " << c.Describe();
            if (count == 0) continue;
            papcclPapStats st = Stats(rk.comm);
            EXPECT_EQ(papcclPapAlgoPap, st.lastAlgo) << pat << " " << c.Describe();
            if (st.lastEarly < n) sawEarlyCommit++;
          }
          ci++;
        }
        papPerfArrivalFree(&a);
        pi++;
      }
      ki++;
      // Every datatype and op (reductions) with one late rank.
      for (papcclDataType_t t : kAllTypes) {
        for (Op op : kAllOps) {
          if (!CollReduces(coll) && op != Op::kSum) continue;
          Case c;
          c.coll = coll;
          c.type = t;
          c.op = op;
          c.count = 1001;
          c.inPlace = (seed & 1) != 0;
          c.root = (int)((seed / 2) % (uint32_t)n);
          c.seed = seed++;
          EXPECT_TRUE(RunDelayed(rk, c, rk.rank == (int)(c.seed % (uint32_t)n) ? 1500 : 0))
              << c.Describe();
        }
      }
    }
    unlink(tracePath.c_str());
    if (n >= 3) {
      EXPECT_GT(sawEarlyCommit, 0) << "no early commit seen: the PAP path never ran";
    }
  });
}

INSTANTIATE_TEST_SUITE_P(Ranks, PapColls,
                         ::testing::Values(CollParam{2, Mode::kThreads},
                                           CollParam{3, Mode::kProcesses},
                                           CollParam{4, Mode::kThreads},
                                           CollParam{8, Mode::kProcesses}),
                         [](const ::testing::TestParamInfo<CollParam>& info) {
                           return "n" + std::to_string(std::get<0>(info.param)) + "_" +
                                  ModeName(std::get<1>(info.param));
                         });

// A rank that runs more collectives ahead than the board has slots (broadcasts complete
// without every peer) waits for the slow peer instead of overwriting its slot; and a group
// of many allreduces (more than the slots) with a late rank completes.
TEST_F(Pap, SlotsReusedWhenARankRunsAhead) {
  const int n = 3;
  RunRanks(Mode::kProcesses, n, [&](Rank& rk) {
    if (rk.rank == 2) papPerfDelayUs(50000);
    for (int i = 0; i < 12; i++) {
      std::vector<int32_t> v(64, rk.rank == 0 ? i : -1);
      ASSERT_EQ(papcclSuccess,
                papcclBroadcast(v.data(), v.data(), v.size(), papcclInt32, 0, rk.comm, nullptr));
      ASSERT_EQ(i, v[63]);
    }
    if (rk.rank == 1) papPerfDelayUs(20000);
    std::vector<std::vector<float>> bufs(10, std::vector<float>(1000, (float)(rk.rank + 1)));
    ASSERT_EQ(papcclSuccess, papcclGroupStart());
    for (auto& b : bufs)
      ASSERT_EQ(papcclSuccess, papcclAllReduce(b.data(), b.data(), b.size(), papcclFloat32,
                                               papcclSum, rk.comm, nullptr));
    ASSERT_EQ(papcclSuccess, papcclGroupEnd());
    for (auto& b : bufs)
      ASSERT_EQ(6.0f, b[999]);
    float x = 1;
    ASSERT_EQ(papcclSuccess,
              papcclAllReduce(&x, &x, 1, papcclFloat32, papcclSum, rk.comm, nullptr));
    ASSERT_EQ(3.0f, x);
  });
}

// ---- Determinism ---------------------------------------------------------------------------

// Values whose sum depends on the order of the additions.
std::vector<float> RoughInput(int rank, size_t count) {
  std::mt19937 g(1234u + (unsigned)rank);
  std::uniform_real_distribution<float> mant(1.0f, 2.0f);
  std::uniform_int_distribution<int> expo(-20, 20);
  std::vector<float> v(count);
  for (size_t i = 0; i < count; i++)
    v[i] = std::ldexp(mant(g), expo(g)) * ((g() & 1) ? 1.0f : -1.0f);
  return v;
}

uint64_t Hash(const void* p, size_t bytes) {
  uint64_t h = 1469598103934665603ull;
  const unsigned char* c = (const unsigned char*)p;
  for (size_t i = 0; i < bytes; i++)
    h = (h ^ c[i]) * 1099511628211ull;
  return h;
}

// 20 random arrival orders under two chunk sizes: every result is bitwise the same, on every
// rank; without the mode the same inputs do depend on the order (shown once, not required).
TEST_F(Pap, DeterministicModeIsBitwiseStable) {
  const int n = 5;
  const size_t count = 300007;
  std::mutex mu;
  std::vector<uint64_t> hashes;
  std::vector<int> earlies;
  double maxRelErr = 0;
  for (const char* chunkSize : {"65536", "1048576"}) {
    ScopedEnv det("PAPCCL_DETERMINISTIC", "1");
    ScopedEnv chunk("PAPCCL_CHUNK_SIZE", chunkSize);
    ScopedEnv gap("PAPCCL_PAP_GAP_US", "100");
    RunRanks(Mode::kThreads, n, [&](Rank& rk) {
      std::vector<float> in = RoughInput(rk.rank, count), out(count);
      std::vector<std::vector<float>> all;
      for (int r = 0; r < n; r++)
        all.push_back(RoughInput(r, count));
      std::mt19937 g(99u + (unsigned)rk.rank);
      for (int rep = 0; rep < 20; rep++) {
        // A random order each time: each rank waits U[0, 4 ms].
        papPerfDelayUs((double)(g() % 4000));
        bool inPlace = rep % 2 == 1;
        std::vector<float> buf = in;
        ASSERT_EQ(papcclSuccess, papcclAllReduce(inPlace ? buf.data() : in.data(),
                                                 inPlace ? buf.data() : out.data(), count,
                                                 papcclFloat32, papcclSum, rk.comm, nullptr));
        const float* res = inPlace ? buf.data() : out.data();
        papcclPapStats st = Stats(rk.comm);
        EXPECT_EQ(papcclPapAlgoAc2sDet, st.lastAlgo);
        double err = 0;
        for (size_t i = 0; i < count; i += 997) {
          double exact = 0, mag = 0;
          for (int r = 0; r < n; r++) {
            exact += all[r][i];
            mag += std::fabs(all[r][i]);
          }
          err = std::max(err, std::fabs(res[i] - exact) / (mag + 1e-30));
        }
        std::lock_guard<std::mutex> lk(mu);
        hashes.push_back(Hash(res, count * sizeof(float)));
        earlies.push_back(st.lastEarly);
        maxRelErr = std::max(maxRelErr, err);
      }
    });
  }
  ASSERT_EQ(hashes.size(), (size_t)(2 * 20 * n));
  for (size_t i = 1; i < hashes.size(); i++)
    EXPECT_EQ(hashes[0], hashes[i]) << "result " << i << " differs";
  // The reduction is a real sum (a few roundings of the magnitude at most).
  EXPECT_LT(maxRelErr, 1e-5);
  int partial = 0;
  for (int e : earlies)
    partial += e < n;
  fprintf(stderr, "deterministic: %zu identical results, %d with an early commit (n_E < %d)\n",
          hashes.size(), partial, n);
}

// ---- A rank that never arrives -------------------------------------------------------------

int CountShmEntries() {
  int c = 0;
  DIR* d = opendir("/dev/shm");
  if (d == nullptr) return -1;
  while (dirent* e = readdir(d)) {
    if (strncmp(e->d_name, "papccl-", 7) == 0) c++;
  }
  closedir(d);
  return c;
}

// 5 ranks; ranks 2-4 never call: the decider (2 arrived, fewer than the 3 it needs) and the
// rank waiting for its commit both fail within PAPCCL_TIMEOUT_S, and nothing is left in
// /dev/shm after the abort.
TEST_F(Pap, RankThatNeverArrivesTimesOut) {
  ScopedEnv forced("PAPCCL_ALGO", "ac2s");
  ScopedEnv timeout("PAPCCL_TIMEOUT_S", "2");
  const int shmBefore = CountShmEntries();
  Options opt;
  opt.destroy = false;
  RunRanks(
      Mode::kProcesses, 5,
      [&](Rank& rk) {
        std::vector<float> in(1 << 16, 1.0f), out(1 << 16);
        if (rk.rank < 2) {
          ExpectWarn any({"timed out", "never arrived"});
          double t0 = NowS();
          papcclResult_t res = papcclAllReduce(in.data(), out.data(), in.size(), papcclFloat32,
                                               papcclSum, rk.comm, nullptr);
          double s = NowS() - t0;
          EXPECT_EQ(papcclRemoteError, res);
          EXPECT_GE(s, 1.5);
          EXPECT_LT(s, 2 + 8.0) << "the wait was not bounded by PAPCCL_TIMEOUT_S";
          EXPECT_TRUE(any.Saw("for arrivals") || any.Saw("arrival commit")) << any.Count();
          // The wait names the collective by its number, as the diagnosis does.
          EXPECT_TRUE(any.Saw("collective #0 on rank " + std::to_string(rk.rank) + ", waiting"));
        } else {
          // Alive but absent (an exited rank is detected sooner, as a dead peer).
          std::this_thread::sleep_for(std::chrono::seconds(4));
        }
        EXPECT_EQ(papcclSuccess, papcclCommAbort(rk.comm));
      },
      opt);
  EXPECT_EQ(shmBefore, CountShmEntries());
}

// Abort from another thread unblocks ranks waiting in the arrival commit; the next
// communicator of the same threads works and runs AC2S.
TEST_F(Pap, AbortUnblocksCommitWait) {
  ScopedEnv forced("PAPCCL_ALGO", "ac2s");
  const int n = 5;
  std::vector<papcclComm_t> comms(n, nullptr);
  ASSERT_EQ(papcclSuccess, papcclCommInitAll(comms.data(), n, nullptr));
  ExpectWarn any;
  std::vector<std::thread> waiters;
  std::vector<papcclResult_t> res(2, papcclSuccess);
  std::vector<double> back(2, 0);
  for (int r = 0; r < 2; r++) {
    waiters.emplace_back([&, r] {
      std::vector<float> in(4096, 1.0f), out(4096);
      res[r] = papcclAllReduce(in.data(), out.data(), in.size(), papcclFloat32, papcclSum, comms[r],
                               nullptr);
      back[r] = NowS();
    });
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  const double abortAt = NowS();
  for (int r = 0; r < 2; r++)
    EXPECT_EQ(papcclSuccess, papcclCommAbort(comms[r]));
  for (auto& t : waiters)
    t.join();
  for (int r = 0; r < 2; r++) {
    EXPECT_NE(papcclSuccess, res[r]);
    EXPECT_LT(back[r] - abortAt, 2.0) << "rank " << r << " was not unblocked by the abort";
  }
  for (int r = 2; r < n; r++)
    EXPECT_EQ(papcclSuccess, papcclCommAbort(comms[r]));
  // Fresh communicator: the board starts clean.
  ASSERT_EQ(papcclSuccess, papcclCommInitAll(comms.data(), n, nullptr));
  std::vector<std::thread> ts;
  std::vector<float> outs((size_t)n * 1000);
  for (int r = 0; r < n; r++) {
    ts.emplace_back([&, r] {
      std::vector<float> in(1000, (float)(r + 1));
      EXPECT_EQ(papcclSuccess, papcclAllReduce(in.data(), &outs[(size_t)r * 1000], 1000,
                                               papcclFloat32, papcclSum, comms[r], nullptr));
    });
  }
  for (auto& t : ts)
    t.join();
  for (size_t i = 0; i < outs.size(); i++)
    ASSERT_EQ(15.0f, outs[i]) << i;
  papcclPapStats st = Stats(comms[0]);
  EXPECT_EQ(papcclPapAlgoAc2s, st.lastAlgo);
  EXPECT_EQ(1u, st.ops);
  for (int r = 0; r < n; r++)
    EXPECT_EQ(papcclSuccess, papcclCommDestroy(comms[r]));
}

// ---- Selector and statistics ----------------------------------------------------------------

struct SelResult {
  int lastAlgo = -1;
  uint64_t papOps = 0;
  int habitual = -2;
  int lastLate = -2;
  double lastSkewUs = 0;
};

// 4 threads, 16 MiB allreduces, rank `late` delayed by delayUs before each call (-1: none).
SelResult RunSelector(int late, double delayUs, int calls) {
  const int n = 4;
  const size_t count = 4 << 20;
  SelResult out;
  std::mutex mu;
  RunRanks(Mode::kThreads, n, [&](Rank& rk) {
    std::vector<float> in(count, 1.0f), res(count);
    for (int i = 0; i < calls; i++) {
      if (rk.rank == late) papPerfDelayUs(delayUs);
      ASSERT_EQ(papcclSuccess, papcclAllReduce(in.data(), res.data(), count, papcclFloat32,
                                               papcclSum, rk.comm, nullptr));
      ASSERT_EQ(4.0f, res[count - 1]);
    }
    papcclPapStats st = Stats(rk.comm);
    EXPECT_EQ((uint64_t)calls, st.ops);
    if (rk.rank == 0) {
      std::lock_guard<std::mutex> lk(mu);
      out.lastAlgo = st.lastAlgo;
      out.papOps = st.papOps;
      out.habitual = st.habitualLateRank;
      out.lastLate = st.lastLateRank;
      out.lastSkewUs = st.lastSkewUs;
      fprintf(stderr, "selector run: late %d, %d calls: last %s, %llu PAP ops, mean skew %.0f us\n",
              late, calls, st.lastAlgoName, (unsigned long long)st.papOps, st.avgSkewUs);
    }
  });
  return out;
}

TEST_F(Pap, SelectorStaysClassicWhenBalanced) {
#if PAPT_TSAN
  // Balanced means arrivals within the selector's skew bound; ThreadSanitizer slows each
  // rank by a varying 5-15x, which itself is skew the selector rightly reacts to.
  GTEST_SKIP() << "arrival skew from ThreadSanitizer's slowdown: not run under it";
#endif
  SelResult r = RunSelector(-1, 0, 16);
  EXPECT_EQ(papcclPapAlgoRing, r.lastAlgo);
  EXPECT_EQ(0u, r.papOps);
}

TEST_F(Pap, SelectorSwitchesToAc2sUnderSustainedSkew) {
  // The first 4 ops are start-up and feed no estimate; then checks every 4 ops, switching on
  // the second positive one: from op 13 on (8 PAP ops, the first check that compares their
  // measured tail with the classic ones is at op 20). The selector
  // judges the skew less its spread; under a sanitizer the 16 MiB calls themselves are slow
  // and vary from call to call (ThreadSanitizer once measured a mean skew of 55 ms for a
  // 30 ms delay, spread so wide that the selector rightly stayed classic), so there the late
  // rank comes 150 ms late, as in StatsDescribeTheLastOp.
  const double lateUs = (PAPT_TSAN || PAPT_ASAN) ? 150000 : 30000;
  SelResult r = RunSelector(2, lateUs, 20);
  EXPECT_EQ(papcclPapAlgoAc2s, r.lastAlgo) << "papOps " << r.papOps;
  EXPECT_GE(r.papOps, 6u);
  EXPECT_EQ(2, r.habitual);
  EXPECT_EQ(2, r.lastLate);
  EXPECT_GT(r.lastSkewUs, 20000);
}

TEST_F(Pap, PapOffAndForcedRingStayClassicUnderSkew) {
  {
    ScopedEnv off("PAPCCL_PAP", "0");
    SelResult r = RunSelector(2, 30000, 8);
    EXPECT_EQ(papcclPapAlgoRing, r.lastAlgo);
    EXPECT_EQ(0u, r.papOps);
    EXPECT_EQ(2, r.lastLate);  // arrivals are still recorded
  }
  {
    ScopedEnv ring("PAPCCL_ALGO", "rhd");
    SelResult r = RunSelector(2, 30000, 4);
    EXPECT_EQ(papcclPapAlgoRhd, r.lastAlgo);
    EXPECT_EQ(0u, r.papOps);
  }
}

// The statistics of one op with a known pattern: order, lateness, skew, tail. The tail (last
// arrival to completion) is the work left when rank 1 arrives; it must be shorter than the skew.
// A sanitizer slows that work by 5-20x (the 1 MB op's tail was 20 ms under ThreadSanitizer), so
// there rank 1 comes later, in proportion.
TEST_F(Pap, StatsDescribeTheLastOp) {
  ScopedEnv forced("PAPCCL_ALGO", "ac2s");
  const int n = 3;
  const double delayUs = (PAPT_TSAN || PAPT_ASAN) ? 150000 : 20000;
  const double lateUs = delayUs * 3 / 4;
  RunRanks(Mode::kProcesses, n, [&](Rank& rk) {
    std::vector<float> in(1 << 18, 1.0f), out(1 << 18);
    for (int i = 0; i < 9; i++) {
      papPerfDelayUs(rk.rank == 1 ? delayUs : 0);
      ASSERT_EQ(papcclSuccess, papcclAllReduce(in.data(), out.data(), in.size(), papcclFloat32,
                                               papcclSum, rk.comm, nullptr));
    }
    papcclPapStats st = Stats(rk.comm);
    EXPECT_EQ(n, st.nranks);
    EXPECT_EQ(9u, st.ops);
    EXPECT_EQ(9u, st.completeOps);
    EXPECT_EQ(1, st.lastComplete);
    EXPECT_EQ(1, st.lastLateRank);
    EXPECT_EQ(1, st.lastOrder[n - 1]);
    EXPECT_EQ(-1, st.lastOrder[n]);
    EXPECT_STREQ("ac2s", st.lastAlgoName);
    EXPECT_GT(st.lastSkewUs, lateUs);
    EXPECT_GT(st.lastLatenessUs[1], lateUs);
    EXPECT_LT(st.lastLatenessUs[0], lateUs);
    EXPECT_GE(st.lastTailUs, 0);
    EXPECT_LT(st.lastTailUs, st.lastSkewUs);
    EXPECT_EQ(9u, st.lateCount[1]);
    EXPECT_EQ(1, st.habitualLateRank);
    EXPECT_GT(st.avgSkewUs, lateUs);
    EXPECT_GE(st.maxSkewUs, st.avgSkewUs);
    if (rk.rank != 1) {
      EXPECT_GT(st.lastTimeInCollUs, lateUs);  // it waited for rank 1
    }
  });
}

TEST_F(Pap, StatsBadArguments) {
  papcclPapStats st;
  {
    ExpectWarn w({"stats is NULL"});
    std::vector<papcclComm_t> comms(1, nullptr);
    ASSERT_EQ(papcclSuccess, papcclCommInitAll(comms.data(), 1, nullptr));
    EXPECT_EQ(papcclInvalidArgument, papcclCommGetPapStats(comms[0], nullptr));
    EXPECT_EQ(1, w.Count());
    EXPECT_EQ(papcclSuccess, papcclCommGetPapStats(comms[0], &st));
    EXPECT_EQ(0u, st.ops);
    EXPECT_EQ(-1, st.lastLateRank);
    EXPECT_EQ(papcclSuccess, papcclCommDestroy(comms[0]));
  }
  {
    ExpectWarn w;
    EXPECT_EQ(papcclInvalidArgument, papcclCommGetPapStats(nullptr, &st));
    EXPECT_EQ(1, w.Count());
  }
}

}  // namespace
}  // namespace papt
