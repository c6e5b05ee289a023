// SPDX-License-Identifier: Apache-2.0
// Multi-rank test harness: ranks as threads or forked processes, typed inputs and bit-exact
// references for every collective.
#include "multirank/harness.h"

#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <new>
#include <sstream>
#include <thread>

#include "common/narrow_float.h"
#include "internal/shim_comm.h"
#include "sanitizer.h"

#if PAPT_ASAN
#include <sanitizer/lsan_interface.h>
#endif

namespace papt {

// A failing test should fail within a minute, not hang for the library's default timeout:
// every multi-rank test runs with PAPCCL_TIMEOUT_S=60 unless the environment sets it (tests
// that exercise timeouts set a smaller value with ScopedEnv). Set before any parameter read.
[[maybe_unused]] static const int kDefaultTimeout = [] {
  setenv("PAPCCL_TIMEOUT_S", "60", 0);
  return 0;
}();

double NowS() {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

bool FullMatrix() {
  const char* m = getenv("PAPCCL_TEST_MATRIX");
  return m == nullptr || strcmp(m, "pairwise") != 0;
}

bool PairwiseCell3(int i, int j, int c) {
  return FullMatrix() || (i + j) % 2 == c;
}

// ---- Running ranks -------------------------------------------------------------------------

const char* ModeName(Mode m) {
  return m == Mode::kThreads ? "threads" : "processes";
}

const char* InitName(Init i) {
  switch (i) {
  case Init::kInitRank:
    return "InitRank";
  case Init::kInitAll:
    return "InitAll";
  case Init::kGroupInit:
    return "GroupInit";
  }
  return "?";
}

namespace {

// Ends a forked rank with status. _exit() skips the exit handlers, and with them
// LeakSanitizer's check at exit: under ASan (with detect_leaks=1, as the ASan stage runs)
// the rank checks for leaks here first, and leaks fail it (status 1 where it was 0).
[[noreturn]] void ChildExit(int r, int n, int status) {
  fflush(stdout);
  fflush(stderr);
#if PAPT_ASAN
  // LeakSanitizer stops the process with a tracer child, which cannot run in a process whose
  // children go to another PID namespace (unshare(CLONE_NEWPID)): such a rank says so.
  char ns[64] = "", nsChildren[64] = "";
  ssize_t a = readlink("/proc/self/ns/pid", ns, sizeof(ns) - 1);
  ssize_t b = readlink("/proc/self/ns/pid_for_children", nsChildren, sizeof(nsChildren) - 1);
  if (a > 0 && b > 0 && strcmp(ns, nsChildren) != 0) {
    fprintf(stderr,
            "rank %d/%d (pid %d): not leak-checked: its children are in another PID "
            "namespace, where LeakSanitizer cannot run\n",
            r, n, (int)getpid());
  } else if (__lsan_do_recoverable_leak_check() != 0) {
    fprintf(stderr, "rank %d/%d (pid %d): LeakSanitizer found leaks (reported above)\n", r, n,
            (int)getpid());
    fflush(stderr);
    if (status == 0) status = 1;
  }
#else
  (void)r;
  (void)n;
#endif
  _exit(status);
}

[[noreturn]] void ChildMain(int r, int n, const papcclUniqueId& id, const Body& body,
                            const Options& opt) {
  int status = 0;
  Rank rk{r, n, nullptr, id, Mode::kProcesses};
  try {
    if (opt.makeComm) {
      papcclResult_t res = papcclCommInitRank(&rk.comm, n, id, r);
      if (res != papcclSuccess) {
        fprintf(stderr, "rank %d/%d (pid %d): papcclCommInitRank failed: %d (%s): %s\n", r, n,
                (int)getpid(), (int)res, papcclGetErrorString(res), papcclGetLastError(nullptr));
        ChildExit(r, n, 2);
      }
    }
    body(rk);
    if (opt.makeComm && opt.destroy && rk.comm) {
      papcclResult_t res = papcclCommDestroy(rk.comm);
      if (res != papcclSuccess) {
        fprintf(stderr, "rank %d/%d (pid %d): papcclCommDestroy failed: %d (%s)\n", r, n,
                (int)getpid(), (int)res, papcclGetErrorString(res));
        status = 1;
      }
    }
  } catch (const std::exception& e) {
    fprintf(stderr, "rank %d/%d (pid %d): exception: %s\n", r, n, (int)getpid(), e.what());
    status = 1;
  } catch (...) {
    fprintf(stderr, "rank %d/%d (pid %d): unknown exception\n", r, n, (int)getpid());
    status = 1;
  }
  if (::testing::Test::HasFailure()) status = 1;
  for (const auto& m : TakeUnexpectedWarns()) {
    fprintf(stderr, "rank %d/%d (pid %d): unexpected WARN: %s\n", r, n, (int)getpid(), m.c_str());
    status = 1;
  }
  ChildExit(r, n, status);
}

}  // namespace

// Reads exactly len bytes from fd within timeoutS; false on EOF, error or timeout.
static bool ReadFull(int fd, void* buf, size_t len, double timeoutS) {
  char* p = static_cast<char*>(buf);
  const double end = NowS() + timeoutS;
  while (len > 0) {
    struct pollfd pfd = {fd, POLLIN, 0};
    int left = (int)((end - NowS()) * 1000);
    if (left <= 0) return false;
    int pr = poll(&pfd, 1, left);
    if (pr < 0 && errno == EINTR) continue;
    if (pr <= 0) return false;
    ssize_t got = read(fd, p, len);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) return false;
    p += got;
    len -= (size_t)got;
  }
  return true;
}

std::vector<Outcome> RunProcesses(int n, const Body& body, const Options& opt) {
  std::vector<Outcome> out(n);
  // fork() copies only the calling thread: a lock held by another thread at that moment
  // (the sanitizers' allocator lock, say) stays locked forever in the child. So the children
  // are forked while this process runs no library thread: first let the root threads of
  // earlier runs finish, fork, and only then make the id (its root thread starts here) and
  // hand it to the children through socket pairs.
  for (double end = NowS() + 10; papTestCommActiveRoots() > 0 && NowS() < end;)
    usleep(1000);
  fflush(stdout);
  fflush(stderr);
  std::vector<pid_t> pids(n, -1);
  std::vector<int> idPipes(n, -1);
  const double t0 = NowS();
  for (int r = 0; r < n; r++) {
    int fds[2];  // a socket pair, not a pipe: sending to a child that died is no SIGPIPE
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, fds) != 0) {
      ADD_FAILURE() << "socketpair failed for rank " << r << ": " << strerror(errno);
      break;
    }
    pid_t pid = fork();
    if (pid == 0) {
      close(fds[1]);
      for (int q = 0; q < r; q++)
        if (idPipes[q] >= 0) close(idPipes[q]);
      papcclUniqueId id;
      if (!ReadFull(fds[0], &id, sizeof(id), 60)) {
        fprintf(stderr, "rank %d/%d (pid %d): no unique id from the parent\n", r, n, (int)getpid());
        ChildExit(r, n, 3);
      }
      close(fds[0]);
      ChildMain(r, n, id, body, opt);
    }
    close(fds[0]);
    if (pid < 0) {
      close(fds[1]);
      ADD_FAILURE() << "fork failed for rank " << r << ": " << strerror(errno);
      break;
    }
    pids[r] = pid;
    idPipes[r] = fds[1];
  }
  papcclUniqueId id;
  memset(&id, 0, sizeof(id));
  papcclResult_t res = papcclGetUniqueId(&id);
  if (res != papcclSuccess) ADD_FAILURE() << "papcclGetUniqueId failed: " << res;
  for (int r = 0; r < n; r++) {
    if (idPipes[r] < 0) continue;
    // On failure the children get EOF and exit; the outcome loop reports them.
    if (res == papcclSuccess) {
      ssize_t w = send(idPipes[r], &id, sizeof(id), MSG_NOSIGNAL);
      if (w != (ssize_t)sizeof(id)) ADD_FAILURE() << "cannot send the id to rank " << r;
    }
    close(idPipes[r]);
  }
  if (opt.whileRunning) opt.whileRunning(pids);
  double deadline = t0 + opt.deadlineS;
  int remaining = 0;
  for (int r = 0; r < n; r++) {
    out[r].rank = r;
    if (pids[r] > 0) remaining++;
  }
  std::vector<int> reaped(n, 0);
  while (remaining > 0) {
    for (int r = 0; r < n; r++) {
      if (pids[r] <= 0 || reaped[r]) continue;
      if (r == opt.reapLast && remaining > 1) continue;
      int st = 0;
      pid_t p = waitpid(pids[r], &st, WNOHANG);
      if (p != pids[r]) continue;
      reaped[r] = 1;
      remaining--;
      out[r].seconds = NowS() - t0;
      if (WIFEXITED(st)) {
        out[r].exited = true;
        out[r].exitCode = WEXITSTATUS(st);
      } else if (WIFSIGNALED(st)) {
        out[r].signal = WTERMSIG(st);
      }
    }
    if (remaining > 0 && NowS() > deadline) {
      for (int r = 0; r < n; r++) {
        if (pids[r] <= 0 || reaped[r]) continue;
        fprintf(stderr, "rank %d (pid %d) still running after %.0f s: killing it\n", r,
                (int)pids[r], opt.deadlineS);
        kill(pids[r], SIGKILL);
        int st = 0;
        waitpid(pids[r], &st, 0);
        reaped[r] = 1;
        remaining--;
        out[r].killedAtDeadline = true;
        out[r].signal = SIGKILL;
        out[r].seconds = NowS() - t0;
      }
    }
    if (remaining > 0) usleep(2000);
  }
  return out;
}

void ExpectKilledAndSurvivors(const std::vector<Outcome>& out, int victim) {
  for (const Outcome& o : out) {
    fprintf(stderr, "rank %d: %s %d after %.2f s\n", o.rank, o.exited ? "exit" : "signal",
            o.exited ? o.exitCode : o.signal, o.seconds);
    if (o.rank == victim) {
      EXPECT_FALSE(o.exited) << "the victim rank was meant to die";
      EXPECT_EQ(SIGKILL, o.signal);
    } else {
      EXPECT_FALSE(o.killedAtDeadline) << "rank " << o.rank << " hung";
      EXPECT_TRUE(o.exited && o.exitCode == 0) << "rank " << o.rank << ": exited=" << o.exited
                                               << " code=" << o.exitCode << " signal=" << o.signal;
    }
  }
}

void ExpectAllSucceeded(const std::vector<Outcome>& out, const std::string& what) {
  for (const auto& o : out) {
    if (o.killedAtDeadline)
      ADD_FAILURE() << what << ": rank " << o.rank << " hung (killed at the deadline)";
    else if (!o.exited)
      ADD_FAILURE() << what << ": rank " << o.rank << " died of signal " << o.signal << " ("
                    << strsignal(o.signal) << ")";
    else if (o.exitCode != 0)
      ADD_FAILURE() << what << ": rank " << o.rank << " exited with status " << o.exitCode
                    << " (its failures are printed above)";
  }
}

SharedTime::SharedTime() {
  page_ = mmap(nullptr, sizeof(std::atomic<double>), PROT_READ | PROT_WRITE,
               MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (page_ == MAP_FAILED) {
    ADD_FAILURE() << "SharedTime: mmap failed: " << strerror(errno);
    page_ = nullptr;
    return;
  }
  new (page_) std::atomic<double>(0);
}

SharedTime::~SharedTime() {
  if (page_) munmap(page_, sizeof(std::atomic<double>));
}

void SharedTime::Set(double s) {
  if (page_) static_cast<std::atomic<double>*>(page_)->store(s);
}

double SharedTime::Get() const {
  return page_ ? static_cast<std::atomic<double>*>(page_)->load() : 0;
}

bool NamesDeadRank(const std::string& text, int victim) {
  const std::string v = std::to_string(victim) + " (";
  return text.find("peer " + v) != std::string::npos || text.find("rank " + v) != std::string::npos;
}

void ExpectDeadRankSeen(papcclResult_t res, double latencyS, const std::string& why, int victim,
                        const std::string& what) {
  EXPECT_EQ(papcclRemoteError, res) << what << ": " << papcclGetErrorString(res) << ": " << why;
  EXPECT_TRUE(NamesDeadRank(why, victim))
      << what << ": the error does not name the dead rank " << victim << ": " << why;
  EXPECT_LT(latencyS, kDeadRankBoundS)
      << what << ": the dead rank " << victim << " was seen only after " << latencyS << " s";
}

std::vector<int> RunThreads(int n, const Body& body, const Options& opt) {
  std::vector<int> done(n, 0);
  std::vector<papcclComm_t> comms(n, nullptr);
  papcclUniqueId id;
  memset(&id, 0, sizeof(id));
  // An id that nobody uses would keep a root thread waiting (and warning) for PAPCCL_TIMEOUT_S.
  bool needId = opt.makeComm ? opt.init != Init::kInitAll : opt.makeId;
  if (needId) {
    papcclResult_t res = papcclGetUniqueId(&id);
    if (res != papcclSuccess) {
      ADD_FAILURE() << "papcclGetUniqueId failed: " << res;
      return done;
    }
  }
  if (opt.makeComm && opt.init == Init::kInitAll) {
    papcclResult_t res = papcclCommInitAll(comms.data(), n, nullptr);
    if (res != papcclSuccess) {
      ADD_FAILURE() << "papcclCommInitAll(" << n << ") failed: " << res << " "
                    << papcclGetLastError(nullptr);
      return done;
    }
  } else if (opt.makeComm && opt.init == Init::kGroupInit) {
    EXPECT_EQ(papcclSuccess, papcclGroupStart());
    bool ok = true;
    for (int r = 0; r < n; r++) {
      papcclConfig_t cfg = PAPCCL_CONFIG_INITIALIZER;
      papcclResult_t res = papcclCommInitRankConfig(&comms[r], n, id, r, &cfg);
      if (res != papcclSuccess) {
        ADD_FAILURE() << "grouped papcclCommInitRankConfig rank " << r << " failed: " << res;
        ok = false;
      }
    }
    papcclResult_t res = papcclGroupEnd();
    if (res != papcclSuccess || !ok) {
      ADD_FAILURE() << "grouped init of " << n << " ranks failed: " << res << " "
                    << papcclGetLastError(nullptr);
      return done;
    }
  }

  std::mutex mu;
  std::condition_variable cv;
  int finished = 0;
  std::vector<std::thread> threads;
  threads.reserve(n);
  for (int r = 0; r < n; r++) {
    threads.emplace_back([&, r] {
      Rank rk{r, n, comms[r], id, Mode::kThreads};
      bool run = true;
      if (opt.makeComm && opt.init == Init::kInitRank) {
        papcclResult_t res = papcclCommInitRank(&rk.comm, n, id, r);
        if (res != papcclSuccess) {
          ADD_FAILURE() << "rank " << r << "/" << n << ": papcclCommInitRank failed: " << res << " "
                        << papcclGetLastError(nullptr);
          run = false;
        }
      }
      if (run) {
        body(rk);
        if (opt.makeComm && opt.destroy && rk.comm) {
          EXPECT_EQ(papcclSuccess, papcclCommDestroy(rk.comm)) << "rank " << r << "/" << n;
        }
        done[r] = 1;
      }
      std::lock_guard<std::mutex> lock(mu);
      finished++;
      cv.notify_all();
    });
  }
  {
    std::unique_lock<std::mutex> lock(mu);
    bool ok = cv.wait_for(lock, std::chrono::duration<double>(opt.deadlineS),
                          [&] { return finished == n; });
    if (!ok) {
      // A hang cannot be recovered from in one process: stop the run loudly.
      fprintf(stderr,
              "FATAL: %d of %d rank threads still running after %.0f s (test %s.%s): a hang\n",
              n - finished, n, opt.deadlineS,
              ::testing::UnitTest::GetInstance()->current_test_info()->test_suite_name(),
              ::testing::UnitTest::GetInstance()->current_test_info()->name());
      fflush(stdout);
      fflush(stderr);
      std::abort();
    }
  }
  for (auto& t : threads)
    t.join();
  return done;
}

void RunRanks(Mode mode, int n, const Body& body, const Options& opt) {
  std::ostringstream what;
  what << ModeName(mode) << " n=" << n;
  if (mode == Mode::kThreads) {
    auto done = RunThreads(n, body, opt);
    for (int r = 0; r < n; r++)
      EXPECT_TRUE(done[r]) << what.str() << ": rank " << r << " did not complete";
  } else {
    ExpectAllSucceeded(RunProcesses(n, body, opt), what.str());
  }
}

// ---- Types -----------------------------------------------------------------------------------

namespace {

struct TypeInfo {
  const char* name;
  size_t size;
  bool isFloat;
  bool isSigned;
  // sum design: per-rank values in [0, sumMax] (unsigned) or [-sumMax/2, sumMax - sumMax/2]
  int sumMax;
  // avg design for narrow floats: base in [-avgBase, avgBase]
  int avgBase;
};

const TypeInfo kTypes[papcclNumTypes] = {
    /* int8     */ {"int8", 1, false, true, 15, 0},
    /* uint8    */ {"uint8", 1, false, false, 31, 0},
    /* int32    */ {"int32", 4, false, true, 1000, 0},
    /* uint32   */ {"uint32", 4, false, false, 1000, 0},
    /* int64    */ {"int64", 8, false, true, 1000, 0},
    /* uint64   */ {"uint64", 8, false, false, 1000, 0},
    /* float16  */ {"float16", 2, true, true, 255, 200},
    /* float32  */ {"float32", 4, true, true, 1000, 0},
    /* float64  */ {"float64", 8, true, true, 1000, 0},
    /* bfloat16 */ {"bfloat16", 2, true, true, 31, 20},
    /* e4m3     */ {"float8e4m3", 1, true, true, 2, 2},
    /* e5m2     */ {"float8e5m2", 1, true, true, 1, 1},
};

const TypeInfo& Info(papcclDataType_t t) {
  return kTypes[(int)t];
}

// The reference converters of the narrow float types (tests/common/narrow_float.h).
const papTestNarrowFmt* NarrowFmt(papcclDataType_t t) {
  switch (t) {
  case papcclFloat16:
    return &papTestNarrowF16;
  case papcclBfloat16:
    return &papTestNarrowBf16;
  case papcclFloat8e4m3:
    return &papTestNarrowE4m3;
  case papcclFloat8e5m2:
    return &papTestNarrowE5m2;
  default:
    return nullptr;
  }
}

bool IsNarrow(papcclDataType_t t) {
  return NarrowFmt(t) != nullptr;
}

inline uint64_t Mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// Distinct (r, i) give distinct hashes for i < 2^32 (Mix is a bijection).
inline uint64_t Hash(uint32_t seed, int r, size_t i) {
  return Mix(((uint64_t)seed * 0x9e3779b97f4a7c15ull) ^ ((uint64_t)(uint32_t)r << 32) ^
             (uint64_t)i);
}

// h mapped onto [0, range) without a division (multiply-high).
inline uint64_t Below(uint64_t h, uint64_t range) {
  return (uint64_t)(((unsigned __int128)h * range) >> 64);
}

uint64_t WidthMask(size_t size) {
  return size >= 8 ? ~0ull : ((1ull << (8 * size)) - 1ull);
}

int64_t SignExtend(uint64_t bits, size_t size) {
  if (size >= 8) return (int64_t)bits;
  unsigned shift = (unsigned)(64 - 8 * size);
  return (int64_t)(bits << shift) >> shift;
}

// Input designs.
enum class Design {
  kRandom,
  kSum,
  kProd,
  kAvgNarrow
};

Design DesignOf(const Case& c) {
  if (!CollReduces(c.coll)) return Design::kRandom;
  switch (c.op) {
  case Op::kSum:
  case Op::kPreMulSum:
    return Design::kSum;
  case Op::kProd:
    return Design::kProd;
  case Op::kMax:
  case Op::kMin:
    return Design::kRandom;
  case Op::kAvg:
    return IsNarrow(c.type) ? Design::kAvgNarrow : Design::kSum;
  }
  return Design::kRandom;
}

// Encodings of the integers in [-kSmall, kSmall] for every floating type (the designs and
// most references stay in that range): a table lookup instead of an exact encode per element.
constexpr int64_t kSmall = 8192;
struct SmallTables {
  std::vector<uint64_t> bits[papcclNumTypes];
  std::vector<char> exact[papcclNumTypes];
};

const SmallTables& Small() {
  static const SmallTables* tables = [] {
    auto* st = new SmallTables;
    for (papcclDataType_t t : {papcclFloat16, papcclFloat32, papcclFloat64, papcclBfloat16,
                               papcclFloat8e4m3, papcclFloat8e5m2}) {
      st->bits[(int)t].resize(2 * kSmall + 1);
      st->exact[(int)t].resize(2 * kSmall + 1);
      for (int64_t v = -kSmall; v <= kSmall; v++) {
        uint64_t b = 0;
        st->exact[(int)t][v + kSmall] = EncodeExact(t, (double)v, &b);
        st->bits[(int)t][v + kSmall] = b;
      }
    }
    return st;
  }();
  return *tables;
}

// Encodes an exactly representable value; records a test-design error otherwise.
uint64_t EncodeOrFail(papcclDataType_t t, double v) {
  if (v == std::floor(v) && std::fabs(v) <= (double)kSmall && !(v == 0 && std::signbit(v))) {
    int64_t k = (int64_t)v + kSmall;
    if (Small().exact[(int)t][k]) return Small().bits[(int)t][k];
  } else {
    uint64_t bits = 0;
    if (EncodeExact(t, v, &bits)) return bits;
  }
  ADD_FAILURE() << "test design error: " << v << " is not exact in " << Info(t).name;
  return 0;
}

// Encodes a small exactly representable value (integers go through two's complement).
uint64_t EncodeSmall(papcclDataType_t t, int64_t v) {
  const TypeInfo& ti = Info(t);
  if (!ti.isFloat) return (uint64_t)v & WidthMask(ti.size);
  if (v >= -kSmall && v <= kSmall) {
    const SmallTables& st = Small();
    if (st.exact[(int)t][v + kSmall]) return st.bits[(int)t][v + kSmall];
  }
  return EncodeOrFail(t, (double)v);
}

// Random bits that decode to a finite, non-negative-zero-free value (max/min need a total
// order without NaN and without the +0/-0 tie).
uint64_t RandomOrdered(papcclDataType_t t, uint64_t h) {
  const TypeInfo& ti = Info(t);
  uint64_t mask = WidthMask(ti.size);
  if (!ti.isFloat) return h & mask;
  for (int k = 0;; k++) {
    uint64_t b = Mix(h + (uint64_t)k) & mask;
    double v = DecodeValue(t, b);
    if (std::isnan(v) || std::isinf(v)) continue;
    if (v == 0 && std::signbit(v)) continue;
    return b;
  }
}

}  // namespace

const std::vector<papcclDataType_t> kAllTypes = {
    papcclInt8,    papcclUint8,    papcclInt32,      papcclUint32,
    papcclInt64,   papcclUint64,   papcclFloat16,    papcclFloat32,
    papcclFloat64, papcclBfloat16, papcclFloat8e4m3, papcclFloat8e5m2};
const std::vector<Op> kAllOps = {Op::kSum, Op::kProd, Op::kMax, Op::kMin, Op::kAvg, Op::kPreMulSum};
const std::vector<Coll> kAllColls = {
    Coll::kAllReduce,     Coll::kBroadcast, Coll::kBcast,  Coll::kReduce,  Coll::kAllGather,
    Coll::kReduceScatter, Coll::kAlltoAll,  Coll::kGather, Coll::kScatter, Coll::kSendRecv};

const char* CollName(Coll c) {
  switch (c) {
  case Coll::kAllReduce:
    return "AllReduce";
  case Coll::kBroadcast:
    return "Broadcast";
  case Coll::kBcast:
    return "Bcast";
  case Coll::kReduce:
    return "Reduce";
  case Coll::kAllGather:
    return "AllGather";
  case Coll::kReduceScatter:
    return "ReduceScatter";
  case Coll::kAlltoAll:
    return "AlltoAll";
  case Coll::kGather:
    return "Gather";
  case Coll::kScatter:
    return "Scatter";
  case Coll::kSendRecv:
    return "SendRecv";
  }
  return "?";
}

const char* OpName(Op o) {
  switch (o) {
  case Op::kSum:
    return "sum";
  case Op::kProd:
    return "prod";
  case Op::kMax:
    return "max";
  case Op::kMin:
    return "min";
  case Op::kAvg:
    return "avg";
  case Op::kPreMulSum:
    return "premulsum";
  }
  return "?";
}

const char* TypeName(papcclDataType_t t) {
  if ((int)t < 0 || (int)t >= papcclNumTypes) return "invalid";
  return Info(t).name;
}

size_t TypeSize(papcclDataType_t t) {
  return Info(t).size;
}

bool CollReduces(Coll c) {
  return c == Coll::kAllReduce || c == Coll::kReduce || c == Coll::kReduceScatter;
}

bool CollHasRoot(Coll c) {
  return c == Coll::kBroadcast || c == Coll::kBcast || c == Coll::kReduce || c == Coll::kGather ||
         c == Coll::kScatter;
}

std::string Case::Describe() const {
  std::ostringstream s;
  s << CollName(coll) << " " << TypeName(type);
  if (CollReduces(coll)) s << " " << OpName(op);
  s << " count=" << count << (inPlace ? " in-place" : " out-of-place");
  if (CollHasRoot(coll)) s << " root=" << root;
  s << " seed=" << seed;
  return s.str();
}

double DecodeValue(papcclDataType_t t, uint64_t bits) {
  const TypeInfo& ti = Info(t);
  if (!ti.isFloat) return ti.isSigned ? (double)SignExtend(bits, ti.size) : (double)bits;
  if (t == papcclFloat32) {
    uint32_t u = (uint32_t)bits;
    float f;
    memcpy(&f, &u, 4);
    return f;
  }
  if (t == papcclFloat64) {
    double d;
    memcpy(&d, &bits, 8);
    return d;
  }
  // Narrow formats: a table per type, built once.
  using Tables = std::vector<std::vector<double>>;
  static const Tables* tables = [] {
    auto* tb = new Tables(papcclNumTypes);
    for (papcclDataType_t nt :
         {papcclFloat16, papcclBfloat16, papcclFloat8e4m3, papcclFloat8e5m2}) {
      std::vector<double>& v = (*tb)[(int)nt];
      v.resize(size_t(1) << (8 * Info(nt).size));
      for (size_t b = 0; b < v.size(); b++)
        v[b] = papTestNarrowDecode(NarrowFmt(nt), (uint32_t)b);
    }
    return tb;
  }();
  return (*tables)[(int)t][bits & WidthMask(ti.size)];
}

bool EncodeExact(papcclDataType_t t, double v, uint64_t* bits) {
  const TypeInfo& ti = Info(t);
  if (!ti.isFloat) return false;
  if (t == papcclFloat32) {
    float f = (float)v;
    if ((double)f != v && !(std::isnan(v) && std::isnan(f))) return false;
    uint32_t u;
    memcpy(&u, &f, 4);
    *bits = u;
    return true;
  }
  if (t == papcclFloat64) {
    memcpy(bits, &v, 8);
    return true;
  }
  uint32_t code = 0;
  if (!papTestNarrowEncodeExact(NarrowFmt(t), v, &code)) return false;
  *bits = code;
  return true;
}

uint64_t PreMulScalarBits(papcclDataType_t t) {
  return Info(t).isFloat ? EncodeSmall(t, 2) : EncodeSmall(t, 3);
}

uint64_t InputBits(const Case& c, int nranks, int r, size_t i) {
  const TypeInfo& ti = Info(c.type);
  uint64_t h = Hash(c.seed, r, i);
  switch (DesignOf(c)) {
  case Design::kRandom:
    if (!CollReduces(c.coll)) return h & WidthMask(ti.size);  // any bits: a pure copy
    return RandomOrdered(c.type, h);
  case Design::kSum: {
    int64_t m = ti.sumMax;
    int64_t v = (int64_t)Below(h, (uint64_t)(m + 1));
    if (ti.isSigned) v -= m / 2;
    return EncodeSmall(c.type, v);
  }
  case Design::kProd: {
    static const int64_t kSignedSet[] = {1, -1, 2, 3};
    static const int64_t kFloatSet[] = {1, -1, 2};
    static const int64_t kUnsignedSet[] = {1, 2, 3};
    int64_t v;
    if (ti.isFloat)
      v = kFloatSet[Below(h, 3)];
    else if (ti.isSigned)
      v = kSignedSet[Below(h, 4)];
    else
      v = kUnsignedSet[Below(h, 3)];
    return EncodeSmall(c.type, v);
  }
  case Design::kAvgNarrow: {
    // base(i) + d(r), with the d(r) summing to zero over the ranks: the average is base(i)
    // exactly and every partial sum is a small integer.
    int64_t b = ti.avgBase;
    int64_t base = (int64_t)Below(Hash(c.seed, -1, i), (uint64_t)(2 * b + 1)) - b;
    int64_t d = r < 2 * (nranks / 2) ? (r % 2 ? 1 : -1) : 0;
    return EncodeSmall(c.type, base + d);
  }
  }
  return 0;
}

uint64_t ReducedBits(const Case& c, int nranks, size_t idx) {
  const TypeInfo& ti = Info(c.type);
  if (ti.isFloat) {
    double scalar = c.op == Op::kPreMulSum ? DecodeValue(c.type, PreMulScalarBits(c.type)) : 1.0;
    double acc = 0;
    for (int q = 0; q < nranks; q++) {
      double x = DecodeValue(c.type, InputBits(c, nranks, q, idx));
      if (c.op == Op::kPreMulSum) x *= scalar;
      if (q == 0) {
        acc = x;
        continue;
      }
      switch (c.op) {
      case Op::kSum:
      case Op::kAvg:
      case Op::kPreMulSum:
        acc += x;
        break;
      case Op::kProd:
        acc *= x;
        break;
      case Op::kMax:
        acc = std::max(acc, x);
        break;
      case Op::kMin:
        acc = std::min(acc, x);
        break;
      }
    }
    if (c.op == Op::kAvg) {
      // The sum is exact; the library divides it once in the type.
      if (c.type == papcclFloat32)
        acc = (double)((float)acc / (float)nranks);
      else
        acc = acc / nranks;
    }
    if (c.type == papcclFloat32 || c.type == papcclFloat64) {
      uint64_t bits = 0;
      EncodeExact(c.type, acc, &bits);  // acc is a float or double value by construction
      return bits;
    }
    return EncodeOrFail(c.type, acc);
  }
  uint64_t mask = WidthMask(ti.size);
  if (c.op == Op::kAvg) {
    int64_t s = 0;
    uint64_t us = 0;
    for (int q = 0; q < nranks; q++) {
      uint64_t b = InputBits(c, nranks, q, idx);
      s += SignExtend(b, ti.size);
      us += b;
    }
    if (ti.isSigned) return (uint64_t)(s / nranks) & mask;
    return (us / (uint64_t)nranks) & mask;
  }
  uint64_t scalar = PreMulScalarBits(c.type);
  uint64_t acc = 0;
  for (int q = 0; q < nranks; q++) {
    uint64_t x = InputBits(c, nranks, q, idx);
    if (c.op == Op::kPreMulSum) x = (x * scalar) & mask;
    if (q == 0) {
      acc = x;
      continue;
    }
    switch (c.op) {
    case Op::kSum:
    case Op::kPreMulSum:
    case Op::kAvg:
      acc = (acc + x) & mask;
      break;
    case Op::kProd:
      acc = (acc * x) & mask;
      break;
    case Op::kMax:
      if (ti.isSigned)
        acc = SignExtend(x, ti.size) > SignExtend(acc, ti.size) ? x : acc;
      else
        acc = x > acc ? x : acc;
      break;
    case Op::kMin:
      if (ti.isSigned)
        acc = SignExtend(x, ti.size) < SignExtend(acc, ti.size) ? x : acc;
      else
        acc = x < acc ? x : acc;
      break;
    }
  }
  return acc & mask;
}

bool AvgIsApproximate(const Case& c, int nranks) {
  return CollReduces(c.coll) && c.op == Op::kAvg && Info(c.type).isFloat &&
         (nranks & (nranks - 1)) != 0;
}

bool CheckAvgApprox(const void* buf, const Case& c, int nranks, size_t firstIdx, size_t count,
                    const std::string& what) {
  const TypeInfo& ti = Info(c.type);
  // Unit roundoff 2^-p and the smallest subnormal of each floating type.
  double u, tiny;
  switch (c.type) {
  case papcclFloat16:
    u = std::ldexp(1.0, -11);
    tiny = std::ldexp(1.0, -24);
    break;
  case papcclBfloat16:
    u = std::ldexp(1.0, -8);
    tiny = std::ldexp(1.0, -133);
    break;
  case papcclFloat8e4m3:
    u = std::ldexp(1.0, -4);
    tiny = std::ldexp(1.0, -9);
    break;
  case papcclFloat8e5m2:
    u = std::ldexp(1.0, -3);
    tiny = std::ldexp(1.0, -16);
    break;
  case papcclFloat32:
    u = std::ldexp(1.0, -24);
    tiny = std::ldexp(1.0, -149);
    break;
  default:
    u = std::ldexp(1.0, -53);
    tiny = 0;
    break;
  }
  size_t bad = 0;
  for (size_t i = 0; i < count; i++) {
    double sum = 0, sumAbs = 0;
    for (int q = 0; q < nranks; q++) {
      double x = DecodeValue(c.type, InputBits(c, nranks, q, firstIdx + i));
      sum += x;
      sumAbs += std::fabs(x);
    }
    const double exact = sum / nranks;
    // sum(x_q * fl(1/n)) or fl(sum(x_q)) / n, summed in any order: the rounding of 1/n, of
    // each product and of each of the n-1 additions, each at most u relative to sum|x|/n.
    const double bound = (nranks + 2) * u * (sumAbs / nranks) + nranks * tiny;
    const double got = DecodeValue(c.type, GetElem(buf, c.type, i));
    if (std::fabs(got - exact) <= bound) continue;
    if (bad < 3) {
      char msg[200];
      snprintf(msg, sizeof(msg), "element %zu: average %.9g, got %.9g (0x%llx), allowed error %.3g",
               i, exact, got, (unsigned long long)GetElem(buf, c.type, i), bound);
      ADD_FAILURE() << what << ": " << msg << " [" << ti.name << " avg over " << nranks
                    << " ranks is rounded: compared within the bound]";
    }
    bad++;
  }
  if (bad > 3) ADD_FAILURE() << what << ": " << bad << " of " << count << " elements wrong";
  return bad == 0;
}

// ---- Buffers ---------------------------------------------------------------------------------

Buf::Buf(size_t bytes, unsigned char fill) : v_(bytes + kGuard, fill), bytes_(bytes) {
  for (size_t i = 0; i < kGuard; i++)
    v_[bytes + i] = (unsigned char)(0xA5 ^ i);
}

bool Buf::GuardOk() const {
  for (size_t i = 0; i < kGuard; i++)
    if (v_[bytes_ + i] != (unsigned char)(0xA5 ^ i)) return false;
  return true;
}

void SetElem(void* buf, papcclDataType_t t, size_t i, uint64_t bits) {
  size_t s = Info(t).size;
  memcpy((char*)buf + i * s, &bits, s);  // little endian
}

uint64_t GetElem(const void* buf, papcclDataType_t t, size_t i) {
  size_t s = Info(t).size;
  uint64_t bits = 0;
  memcpy(&bits, (const char*)buf + i * s, s);
  return bits;
}

bool CheckElems(const void* buf, papcclDataType_t t, size_t count,
                const std::function<uint64_t(size_t)>& expected, const std::string& what) {
  size_t bad = 0;
  const size_t esz = Info(t).size;
  const int hex = (int)(2 * esz);
  const unsigned char* p = (const unsigned char*)buf;
  for (size_t i = 0; i < count; i++) {
    uint64_t want = expected(i);
    uint64_t got;
    switch (esz) {
    case 1:
      got = p[i];
      break;
    case 2: {
      uint16_t v;
      memcpy(&v, p + 2 * i, 2);
      got = v;
      break;
    }
    case 4: {
      uint32_t v;
      memcpy(&v, p + 4 * i, 4);
      got = v;
      break;
    }
    default:
      memcpy(&got, p + 8 * i, 8);
      break;
    }
    if (want == got) continue;
    if (bad < 3) {
      char msg[160];
      snprintf(msg, sizeof(msg), "element %zu: expected 0x%0*llx (%g), got 0x%0*llx (%g)", i, hex,
               (unsigned long long)want, DecodeValue(t, want), hex, (unsigned long long)got,
               DecodeValue(t, got));
      ADD_FAILURE() << what << ": " << msg;
    }
    bad++;
  }
  if (bad > 3) ADD_FAILURE() << what << ": " << bad << " of " << count << " elements wrong";
  return bad == 0;
}

// ---- One collective, checked ----------------------------------------------------------------

namespace {

papcclRedOp_t BuiltinOp(Op o) {
  switch (o) {
  case Op::kSum:
    return papcclSum;
  case Op::kProd:
    return papcclProd;
  case Op::kMax:
    return papcclMax;
  case Op::kMin:
    return papcclMin;
  case Op::kAvg:
    return papcclAvg;
  case Op::kPreMulSum:
    break;
  }
  return papcclSum;
}

void FillInput(Buf& b, size_t offElems, const Case& c, int nranks, int r, size_t startIdx,
               size_t count) {
  for (size_t i = 0; i < count; i++)
    SetElem(b.data() + offElems * TypeSize(c.type), c.type, i,
            InputBits(c, nranks, r, startIdx + i));
}

}  // namespace

struct CaseRunner::Impl {
  Rank rk;
  Case c;
  int n, r, root;
  papcclDataType_t t;
  size_t esz, count;
  std::string what;
  bool ok = true;
  papcclRedOp_t op = papcclSum;
  bool created = false;
  bool issued = false;
  Buf send, recv;
  void* sb = nullptr;  // what is passed as sendbuff
  void* rb = nullptr;  // what is passed as recvbuff
  int peerNext = 0, peerPrev = 0;

  void Fail(const std::string& msg) {
    ADD_FAILURE() << what << ": " << msg;
    ok = false;
  }
  void ExpectOk(papcclResult_t res, const char* call) {
    if (res != papcclSuccess) {
      std::ostringstream s;
      s << call << " returned " << res << " (" << papcclGetErrorString(res)
        << "): " << papcclGetLastError(rk.comm);
      Fail(s.str());
    }
  }
  void Check(const void* buf, size_t cnt, const std::function<uint64_t(size_t)>& f,
             const char* name) {
    if (!CheckElems(buf, t, cnt, f, what + " " + name)) ok = false;
  }
  // count reduced elements starting at reference index first: bit-exact, except the
  // floating-point average over a rank count that is not a power of two (1/n is rounded).
  void CheckReduced(const void* buf, size_t first, size_t cnt) {
    const Case& cc = c;
    int nn = n;
    if (AvgIsApproximate(cc, nn)) {
      if (!CheckAvgApprox(buf, cc, nn, first, cnt, what + " (recvbuff)")) ok = false;
      return;
    }
    Check(
        buf, cnt, [&](size_t i) { return ReducedBits(cc, nn, first + i); }, "(recvbuff)");
  }
  // An out-of-place input must come back unchanged.
  void InputIntact(const Buf& b, size_t cnt) {
    int rr = r;
    const Case& cc = c;
    int nn = n;
    Check(
        b.data(), cnt, [&](size_t i) { return InputBits(cc, nn, rr, i); }, "(sendbuff)");
  }
  void Guards() {
    if (!send.GuardOk()) Fail("write past the end of sendbuff");
    if (!recv.GuardOk()) Fail("write past the end of recvbuff");
  }
};

CaseRunner::CaseRunner(const Rank& rk, const Case& c) : d_(new Impl) {
  Impl& d = *d_;
  d.rk = rk;
  d.c = c;
  d.n = rk.nranks;
  d.r = rk.rank;
  d.root = c.root % d.n;
  d.t = c.type;
  d.esz = TypeSize(c.type);
  d.count = c.count;
  std::ostringstream ws;
  ws << c.Describe() << " [" << ModeName(rk.mode) << " rank " << d.r << "/" << d.n << "]";
  d.what = ws.str();
  const int n = d.n, r = d.r, root = d.root;
  const size_t esz = d.esz, count = d.count;
  const size_t all = (size_t)n * count;

  if (CollReduces(c.coll)) {
    if (c.op == Op::kPreMulSum) {
      uint64_t scalar = PreMulScalarBits(d.t);
      papcclResult_t res =
          papcclRedOpCreatePreMulSum(&d.op, &scalar, d.t, papcclScalarHostImmediate, rk.comm);
      d.ExpectOk(res, "papcclRedOpCreatePreMulSum");
      d.created = res == papcclSuccess;
    } else {
      d.op = BuiltinOp(c.op);
    }
  }

  switch (c.coll) {
  case Coll::kAllReduce:
    d.send = Buf(count * esz);
    d.recv = Buf(count * esz);
    FillInput(d.send, 0, c, n, r, 0, count);
    d.sb = d.send.data();
    d.rb = c.inPlace ? d.send.data() : d.recv.data();
    break;
  case Coll::kBroadcast:
  case Coll::kBcast:
    d.send = Buf(count * esz);
    d.recv = Buf(count * esz);
    if (r == root) FillInput(d.send, 0, c, n, r, 0, count);
    d.sb = d.send.data();
    d.rb = c.inPlace || c.coll == Coll::kBcast ? d.send.data() : d.recv.data();
    break;
  case Coll::kReduce:
    d.send = Buf(count * esz);
    d.recv = Buf(r == root ? count * esz : 0);
    FillInput(d.send, 0, c, n, r, 0, count);
    d.sb = d.send.data();
    // recvbuff is only significant at the root: other ranks pass NULL out of place.
    d.rb = c.inPlace ? d.send.data() : (r == root ? d.recv.data() : nullptr);
    break;
  case Coll::kAllGather:
    d.send = Buf(count * esz);
    d.recv = Buf(all * esz);
    if (c.inPlace) {
      FillInput(d.recv, (size_t)r * count, c, n, r, 0, count);
      d.sb = d.recv.data() + (size_t)r * count * esz;
    } else {
      FillInput(d.send, 0, c, n, r, 0, count);
      d.sb = d.send.data();
    }
    d.rb = d.recv.data();
    break;
  case Coll::kReduceScatter:
    d.send = Buf(all * esz);
    d.recv = Buf(count * esz);
    FillInput(d.send, 0, c, n, r, 0, all);
    d.sb = d.send.data();
    d.rb = c.inPlace ? d.send.data() + (size_t)r * count * esz : d.recv.data();
    break;
  case Coll::kAlltoAll:
    d.send = Buf(all * esz);
    d.recv = Buf(all * esz);
    FillInput(d.send, 0, c, n, r, 0, all);
    d.sb = d.send.data();
    d.rb = c.inPlace ? d.send.data() : d.recv.data();
    break;
  case Coll::kGather:
    d.send = Buf(count * esz);
    d.recv = Buf(r == root ? all * esz : 0);
    if (c.inPlace && r == root) {
      FillInput(d.recv, (size_t)root * count, c, n, r, 0, count);
      d.sb = d.recv.data() + (size_t)root * count * esz;
    } else {
      FillInput(d.send, 0, c, n, r, 0, count);
      d.sb = d.send.data();
    }
    d.rb = r == root ? d.recv.data() : nullptr;  // only significant at the root
    break;
  case Coll::kScatter:
    d.send = Buf(r == root ? all * esz : 0);
    d.recv = Buf(count * esz);
    if (r == root) FillInput(d.send, 0, c, n, r, 0, all);
    d.sb = r == root ? d.send.data() : nullptr;  // only significant at the root
    d.rb = c.inPlace && r == root ? d.send.data() + (size_t)root * count * esz : d.recv.data();
    break;
  case Coll::kSendRecv:
    d.send = Buf(count * esz);
    d.recv = Buf(count * esz);
    FillInput(d.send, 0, c, n, r, 0, count);
    d.sb = d.send.data();
    d.rb = d.recv.data();
    d.peerNext = (r + 1) % n;
    d.peerPrev = (r - 1 + n) % n;
    break;
  }
}

CaseRunner::~CaseRunner() {
  if (d_->created) d_->ExpectOk(papcclRedOpDestroy(d_->op, d_->rk.comm), "papcclRedOpDestroy");
}

const std::string& CaseRunner::What() const {
  return d_->what;
}

bool CaseRunner::Issue() {
  Impl& d = *d_;
  if (CollReduces(d.c.coll) && d.c.op == Op::kPreMulSum && !d.created) return false;
  d.issued = true;
  const papcclComm_t comm = d.rk.comm;
  const papcclDataType_t t = d.t;
  const size_t count = d.count;
  switch (d.c.coll) {
  case Coll::kAllReduce:
    d.ExpectOk(papcclAllReduce(d.sb, d.rb, count, t, d.op, comm, nullptr), "papcclAllReduce");
    break;
  case Coll::kBroadcast:
    d.ExpectOk(papcclBroadcast(d.sb, d.rb, count, t, d.root, comm, nullptr), "papcclBroadcast");
    break;
  case Coll::kBcast:
    d.ExpectOk(papcclBcast(d.rb, count, t, d.root, comm, nullptr), "papcclBcast");
    break;
  case Coll::kReduce:
    d.ExpectOk(papcclReduce(d.sb, d.rb, count, t, d.op, d.root, comm, nullptr), "papcclReduce");
    break;
  case Coll::kAllGather:
    d.ExpectOk(papcclAllGather(d.sb, d.rb, count, t, comm, nullptr), "papcclAllGather");
    break;
  case Coll::kReduceScatter:
    d.ExpectOk(papcclReduceScatter(d.sb, d.rb, count, t, d.op, comm, nullptr),
               "papcclReduceScatter");
    break;
  case Coll::kAlltoAll:
    d.ExpectOk(papcclAlltoAll(d.sb, d.rb, count, t, comm, nullptr), "papcclAlltoAll");
    break;
  case Coll::kGather:
    d.ExpectOk(papcclGather(d.sb, d.rb, count, t, d.root, comm, nullptr), "papcclGather");
    break;
  case Coll::kScatter:
    d.ExpectOk(papcclScatter(d.sb, d.rb, count, t, d.root, comm, nullptr), "papcclScatter");
    break;
  case Coll::kSendRecv:
    d.ExpectOk(papcclGroupStart(), "papcclGroupStart");
    d.ExpectOk(papcclSend(d.sb, count, t, d.peerNext, comm, nullptr), "papcclSend");
    d.ExpectOk(papcclRecv(d.rb, count, t, d.peerPrev, comm, nullptr), "papcclRecv");
    d.ExpectOk(papcclGroupEnd(), "papcclGroupEnd");
    break;
  }
  return d.ok;
}

bool CaseRunner::Verify() {
  Impl& d = *d_;
  if (!d.issued) return false;
  const Case& c = d.c;
  const int n = d.n, r = d.r, root = d.root;
  const size_t count = d.count;
  const size_t all = (size_t)n * count;
  switch (c.coll) {
  case Coll::kAllReduce:
    d.CheckReduced(d.rb, 0, count);
    if (!c.inPlace) d.InputIntact(d.send, count);
    break;
  case Coll::kBroadcast:
  case Coll::kBcast:
    d.Check(
        d.rb, count, [&](size_t i) { return InputBits(c, n, root, i); }, "(recvbuff)");
    if (r == root && d.rb != d.send.data()) d.InputIntact(d.send, count);
    break;
  case Coll::kReduce:
    if (r == root) d.CheckReduced(d.rb, 0, count);
    if (!c.inPlace) d.InputIntact(d.send, count);
    break;
  case Coll::kAllGather:
    d.Check(
        d.rb, all, [&](size_t j) { return InputBits(c, n, (int)(j / count), j % count); },
        "(recvbuff)");
    if (!c.inPlace) d.InputIntact(d.send, count);
    break;
  case Coll::kReduceScatter:
    d.CheckReduced(d.rb, (size_t)r * count, count);
    if (!c.inPlace) d.InputIntact(d.send, all);
    break;
  case Coll::kAlltoAll:
    d.Check(
        d.rb, all,
        [&](size_t j) { return InputBits(c, n, (int)(j / count), (size_t)r * count + j % count); },
        "(recvbuff)");
    if (!c.inPlace) d.InputIntact(d.send, all);
    break;
  case Coll::kGather:
    if (r == root)
      d.Check(
          d.rb, all, [&](size_t j) { return InputBits(c, n, (int)(j / count), j % count); },
          "(recvbuff)");
    if (d.sb == d.send.data()) d.InputIntact(d.send, count);
    break;
  case Coll::kScatter:
    d.Check(
        d.rb, count, [&](size_t i) { return InputBits(c, n, root, (size_t)r * count + i); },
        "(recvbuff)");
    if (r == root && !c.inPlace) d.InputIntact(d.send, all);
    break;
  case Coll::kSendRecv: {
    int prev = d.peerPrev;
    d.Check(
        d.rb, count, [&](size_t i) { return InputBits(c, n, prev, i); }, "(recvbuff)");
    d.InputIntact(d.send, count);
    break;
  }
  }
  d.Guards();
  return d.ok;
}

bool RunCase(const Rank& rk, const Case& c) {
  CaseRunner run(rk, c);
  if (!run.Issue()) return false;
  return run.Verify();
}

}  // namespace papt
