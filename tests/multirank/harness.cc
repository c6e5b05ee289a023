// SPDX-License-Identifier: Apache-2.0
// Multi-rank test harness, running ranks: as threads or as forked processes, each against a
// deadline. Typed inputs and references: harness_values.cc; buffers and one checked
// collective: harness_case.cc.
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

void CheckedAllReduces(papcclComm_t comm, int r, int n, int count, const std::string& what) {
  const size_t sizes[3] = {3, 4096, size_t(1) << 18};
  std::vector<float> buf(sizes[2]);
  for (int it = 0; it < count; it++) {
    const size_t c = sizes[it % 3];
    for (size_t i = 0; i < c; i++)
      buf[i] = (float)(r + 1 + it);
    ASSERT_EQ(papcclSuccess,
              papcclAllReduce(buf.data(), buf.data(), c, papcclFloat32, papcclSum, comm, nullptr))
        << what << ", allreduce " << it << ": " << papcclGetLastError(comm);
    const float want = (float)(n * (n + 1) / 2 + n * it);
    size_t bad = 0;
    for (size_t i = 0; i < c; i++)
      bad += buf[i] != want;
    ASSERT_EQ(0u, bad) << what << ", allreduce " << it << " of " << c << ": got " << buf[0]
                       << ", want " << want;
  }
}

}  // namespace papt
