// SPDX-License-Identifier: Apache-2.0
// Multi-rank test harness: runs a body as N ranks (threads or forked processes) and
// builds/verifies typed buffers against references; WARN capture and ScopedEnv come from
// tests/common/.
#ifndef PAPCCL_TESTS_MP_HARNESS_H_
#define PAPCCL_TESTS_MP_HARNESS_H_

#include <gtest/gtest.h>
#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <ostream>
#include <string>
#include <thread>
#include <vector>

#include "common/scoped_env.h"
#include "common/warn_capture.h"
#include "papccl.h"

namespace papt {

// Fixture for every multi-rank test: WARN capture, and a check for unexpected WARNs
// (tests/common/warn_capture.h). A class of its own, not an alias: in a derived fixture,
// Test::SetUp() must name this one, not ::testing::Test's.
class Test : public WarnTest {};

// ---- Running ranks -------------------------------------------------------------------------

enum class Mode {
  kThreads,
  kProcesses
};
const char* ModeName(Mode m);
inline void PrintTo(Mode m, std::ostream* os) {
  *os << ModeName(m);
}

// How threads-mode ranks create their communicators.
enum class Init {
  kInitRank,  // one unique id; every rank thread calls papcclCommInitRank
  kInitAll,  // papcclCommInitAll from the calling thread
  kGroupInit  // one thread: papcclGroupStart, papcclCommInitRankConfig per rank, papcclGroupEnd
};
const char* InitName(Init i);
inline void PrintTo(Init i, std::ostream* os) {
  *os << InitName(i);
}

struct Rank {
  int rank;
  int nranks;
  papcclComm_t comm;  // nullptr when Options::makeComm is false
  papcclUniqueId id;  // the id the ranks share
  Mode mode;
};

using Body = std::function<void(Rank&)>;

struct Options {
  Init init = Init::kInitRank;  // threads mode only
  bool makeComm = true;  // false: the body creates (and ends) its own communicator
  bool makeId = true;  // with !makeComm in threads mode: false = no unique id either
  bool destroy = true;  // the harness calls papcclCommDestroy after the body, checked
  double deadlineS = 300;  // hang detector: processes are killed, threads abort the run
  // Processes mode: runs in the parent while the children run (e.g. to kill one of them).
  std::function<void(const std::vector<pid_t>&)> whileRunning;
  // Processes mode: this rank is reaped only after every other one has been (until then a
  // dead one stays a zombie, as under a launcher that has not called wait yet); -1: none.
  int reapLast = -1;
};

struct Outcome {
  int rank = -1;
  bool exited = false;  // exited normally (then exitCode is valid)
  int exitCode = -1;
  int signal = 0;  // the signal that ended it, or 0
  bool killedAtDeadline = false;
  double seconds = 0;  // wall time from fork to reaping
};

// Forks n children, then makes the unique id here and sends it to them (so that no library
// thread runs in this process while it forks); each child creates its communicator (unless
// !makeComm), runs body, destroys the communicator (if destroy), and _exit()s with 0 (no
// failure, no unexpected WARN, and under ASan no leak that LeakSanitizer finds) or 1.
// Children never return into the test framework.
// Children still running at the deadline are killed.
std::vector<Outcome> RunProcesses(int n, const Body& body, const Options& opt = {});

// Expects every child to have exited with status 0 (adds a failure per rank otherwise).
void ExpectAllSucceeded(const std::vector<Outcome>& out, const std::string& what);

// Expects rank victim to have died of SIGKILL and every other rank to have exited with 0
// before the deadline (prints each rank's end).
void ExpectKilledAndSurvivors(const std::vector<Outcome>& out, int victim);

// ---- A dead rank --------------------------------------------------------------------------

// README ("Surviving a failed rank"): a rank that dies fails the operation every survivor is
// in within about 0.1 s (each wait checks its peers every 100 ms), with papcclRemoteError and
// a WARN naming the dead rank. The tests hold every survivor to kDeadRankBoundS from the
// death (or from the call's start, if later): twenty health-check periods. Measured on a
// 2-core machine with 4 ranks as processes while a second build used both cores: 0.10 to
// 0.14 s. A survivor that misses the death fails at PAPCCL_TIMEOUT_S (5 s or more in these
// tests), which the bound tells apart.
constexpr double kDeadRankBoundS = 2.0;

// A moment shared by the forked ranks of a test (a MAP_SHARED page made before the fork):
// the victim, or the parent that kills it, records the time of death; 0 while unset.
class SharedTime {
 public:
  SharedTime();
  ~SharedTime();
  SharedTime(const SharedTime&) = delete;
  SharedTime& operator=(const SharedTime&) = delete;
  void Set(double s);
  double Get() const;

 private:
  void* page_;
};

// Whether text (a WARN) names rank victim as the dead one ("peer 2 (pid ...", "rank 2 (pid ...").
bool NamesDeadRank(const std::string& text, int victim);

// Expects a survivor's failing call to have returned papcclRemoteError, with why (its comm's
// last WARN) naming victim, within kDeadRankBoundS of the death: latencyS is the time from
// the death (or the call's start, if later) to the call's return.
void ExpectDeadRankSeen(papcclResult_t res, double latencyS, const std::string& why, int victim,
                        const std::string& what);

// Runs body on n threads, one per rank; returns each rank's "body completed" flag (a shared
// vector). Failures inside the body are recorded by the framework directly.
std::vector<int> RunThreads(int n, const Body& body, const Options& opt = {});

// Runs in either mode and expects success of every rank.
void RunRanks(Mode mode, int n, const Body& body, const Options& opt = {});

// Monotonic seconds.
double NowS();

// ---- Test matrices ---------------------------------------------------------------------------

// Whether a matrix test runs its full product of axis values (PAPCCL_TEST_MATRIX unset or
// "full": the full tier and plain `meson test`) or a pairwise covering of it ("pairwise": the
// landing tier), in which every pair of values of any two axes still meets in some cell, so
// that every axis value and every assertion still runs, with fewer three-way combinations.
bool FullMatrix();

// Pairwise cells of a product of small axes, by index. Two axes with a and b values and a
// third with two values (c in {0, 1}): keep every (i, j) and give it c = (i + j) % 2; each
// value of each axis then meets every value of the others. True when the cell runs.
bool PairwiseCell3(int i, int j, int c);

// ---- Typed buffers and references --------------------------------------------------------

enum class Coll {
  kAllReduce,
  kBroadcast,
  kBcast,
  kReduce,
  kAllGather,
  kReduceScatter,
  kAlltoAll,
  kGather,
  kScatter,
  kSendRecv
};
enum class Op {
  kSum,
  kProd,
  kMax,
  kMin,
  kAvg,
  kPreMulSum
};

const char* CollName(Coll c);
const char* OpName(Op o);
const char* TypeName(papcclDataType_t t);
size_t TypeSize(papcclDataType_t t);
bool CollReduces(Coll c);
bool CollHasRoot(Coll c);

extern const std::vector<papcclDataType_t> kAllTypes;
extern const std::vector<Op> kAllOps;
extern const std::vector<Coll> kAllColls;

struct Case {
  Coll coll = Coll::kAllReduce;
  papcclDataType_t type = papcclFloat32;
  Op op = Op::kSum;
  size_t count = 0;
  bool inPlace = false;
  int root = 0;  // taken modulo nranks
  uint32_t seed = 1;  // varies the input values
  std::string Describe() const;
};

// Inputs are chosen so that the exact result is representable in every reduction order:
// sums of small integers (within fp8 e5m2's exact range for that type), products of
// {1,-1,2}, arbitrary finite values for max/min, float averages that are exact whenever
// 1/nranks is (nranks a power of two); integer averages truncate as C division does.
// The encoded input element i of rank r:
uint64_t InputBits(const Case& c, int nranks, int r, size_t i);
// The reduction of element i over every rank's input at index idx (the op's reference).
uint64_t ReducedBits(const Case& c, int nranks, size_t idx);
// The floating-point average is exact (and checked bit-exactly) when nranks is a power of
// two; otherwise 1/nranks is rounded (NCCL pre-multiplies each input by it) and the order of
// the additions matters, so the result is checked against the exact average within a bound
// derived from the type's unit roundoff (CheckAvgApprox).
bool AvgIsApproximate(const Case& c, int nranks);
bool CheckAvgApprox(const void* buf, const Case& c, int nranks, size_t firstIdx, size_t count,
                    const std::string& what);
// The scalar used for kPreMulSum on type t, encoded.
uint64_t PreMulScalarBits(papcclDataType_t t);

// Exact encode/decode (test-side, independent of the library's converters).
double DecodeValue(papcclDataType_t t, uint64_t bits);
// Returns false if v is not exactly representable in t.
bool EncodeExact(papcclDataType_t t, double v, uint64_t* bits);

// A byte buffer with a guard zone after the payload (checked after each operation).
class Buf {
 public:
  Buf() = default;
  explicit Buf(size_t bytes, unsigned char fill = 0xCD);
  unsigned char* data() {
    return v_.data();
  }
  const unsigned char* data() const {
    return v_.data();
  }
  size_t bytes() const {
    return bytes_;
  }
  bool GuardOk() const;
  static constexpr size_t kGuard = 64;

 private:
  std::vector<unsigned char> v_;
  size_t bytes_ = 0;
};

void SetElem(void* buf, papcclDataType_t t, size_t i, uint64_t bits);
uint64_t GetElem(const void* buf, papcclDataType_t t, size_t i);

// One collective of a case in three phases, so that several can share a group: the
// constructor creates the op (pre-multiplied sum) and fills the inputs; Issue() makes the
// API call (inside a group it is only recorded); Verify(), after completion, checks the result
// bit-exactly against the reference, the guard zones, and that an out-of-place input was not
// modified. Failures are recorded with the case description.
class CaseRunner {
 public:
  CaseRunner(const Rank& rk, const Case& c);
  ~CaseRunner();
  CaseRunner(const CaseRunner&) = delete;
  CaseRunner& operator=(const CaseRunner&) = delete;
  bool Issue();
  bool Verify();
  const std::string& What() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> d_;
};

// Runs case c as rank rk (every rank must call it with the same case) and verifies it.
// Returns true if all is well.
bool RunCase(const Rank& rk, const Case& c);

// Checks count elements of buf against expected(i); reports the first mismatches.
bool CheckElems(const void* buf, papcclDataType_t t, size_t count,
                const std::function<uint64_t(size_t)>& expected, const std::string& what);

// count allreduces of rank+1+i on comm (rank r of n), each checked; sizes alternate between
// a flat-sized, a medium and a large vector.
void CheckedAllReduces(papcclComm_t comm, int r, int n, int count, const std::string& what);

// A bad call: expects `code`, a WARN containing `substr` (any other WARN fails the test),
// and papcclGetLastError(comm) containing it too.
#define EXPECT_BAD(code, substr, comm, call) \
  do { \
    ExpectWarn w_({substr}); \
    papcclResult_t res_ = (call); \
    EXPECT_EQ(code, res_) << #call; \
    EXPECT_TRUE(w_.Saw(substr)) << #call << ": no WARN naming '" << (substr) << "'"; \
    const char* le_ = papcclGetLastError(comm); \
    ASSERT_NE(nullptr, le_) << #call; \
    EXPECT_NE(nullptr, strstr(le_, substr)) << #call << ": papcclGetLastError is '" << le_ \
                                            << "', expected it to name '" << (substr) << "'"; \
  } while (0)

}  // namespace papt

#endif  // PAPCCL_TESTS_MP_HARNESS_H_
