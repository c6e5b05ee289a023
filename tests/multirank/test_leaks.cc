// SPDX-License-Identifier: Apache-2.0
// Resource leaks: 1,000 init/destroy cycles and 1,000 split/destroy cycles (ranks as threads),
// then file descriptors, threads, this process's shared-memory segments and RSS must be where
// they were after a warm-up.
#include <dirent.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "internal/shim_comm.h"
#include "multirank/harness.h"
#include "sanitizer.h"

namespace papt {
namespace {

constexpr int kCycles = 1000;
constexpr int kWarmup = 20;
// RSS moves a little with the allocator's free lists and arenas (a few hundred KiB here);
// a leak of 2 KiB or more per cycle passes this bound by the end.
constexpr long kRssToleranceKiB = 2048;

struct Usage {
  int fds = 0;
  int threads = 0;
  int shm = 0;  // /dev/shm entries of papccl made by this process
  long rssKiB = 0;
};

// Entries in a directory, "." and ".." excluded; -1 if it cannot be read.
int CountDir(const char* path, const std::string& mustContain = "",
             const std::string& prefix = "") {
  DIR* d = opendir(path);
  if (d == nullptr) return -1;
  int n = 0;
  while (struct dirent* e = readdir(d)) {
    std::string name = e->d_name;
    if (name == "." || name == "..") continue;
    if (!prefix.empty() && name.compare(0, prefix.size(), prefix) != 0) continue;
    if (!mustContain.empty() && name.find(mustContain) == std::string::npos) continue;
    n++;
  }
  closedir(d);
  return n;
}

Usage Measure() {
  Usage u;
  u.fds = CountDir("/proc/self/fd") - 1;  // the directory stream's own descriptor
  u.threads = CountDir("/proc/self/task");
  // Segment names are /papccl-<key>-<creator pid>-<rank>: count this process's only (other
  // test programs may run beside this one).
  u.shm = CountDir("/dev/shm", "-" + std::to_string((int)getpid()) + "-", "papccl-");
  long pages = 0, resident = 0;
  if (FILE* f = fopen("/proc/self/statm", "r")) {
    if (fscanf(f, "%ld %ld", &pages, &resident) != 2) resident = 0;
    fclose(f);
  }
  u.rssKiB = resident * (sysconf(_SC_PAGESIZE) / 1024);
  return u;
}

// Lets the bootstrap root threads of finished rendezvous exit (they end on their own once
// every rank has checked in) and the thread count settle, within a bound.
Usage Settle(int wantThreads) {
  for (double end = NowS() + 10; papTestCommActiveRoots() > 0 && NowS() < end;)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  Usage u = Measure();
  for (double end = NowS() + 2; wantThreads > 0 && u.threads != wantThreads && NowS() < end;) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
    u = Measure();
  }
  return u;
}

void Report(const char* what, const Usage& a, const Usage& b, double seconds, int cycles) {
  printf(
      "[ leaks    ] %s: %d cycles after %d warm-up: fds %d -> %d, threads %d -> %d, "
      "/dev/shm segments %d -> %d, RSS %ld -> %ld KiB (%+ld KiB), %.2f ms per cycle\n",
      what, cycles, kWarmup, a.fds, b.fds, a.threads, b.threads, a.shm, b.shm, a.rssKiB, b.rssKiB,
      b.rssKiB - a.rssKiB, seconds * 1e3 / cycles);
  fflush(stdout);
}

void ExpectFlat(const Usage& a, const Usage& b) {
  EXPECT_EQ(a.fds, b.fds) << "file descriptors leaked";
  EXPECT_EQ(a.threads, b.threads) << "threads leaked";
  EXPECT_EQ(a.shm, b.shm) << "/dev/shm segments leaked";
  EXPECT_EQ(0, b.shm) << "/dev/shm segments left while no communicator exists";
  if (PAPT_ASAN) {
    printf("[ leaks    ] RSS not checked: AddressSanitizer's quarantine holds freed memory\n");
  } else if (PAPT_TSAN) {
    printf(
        "[ leaks    ] RSS not checked: ThreadSanitizer keeps its state for every thread and "
        "lock that ever existed\n");
  } else {
    EXPECT_LE(b.rssKiB - a.rssKiB, kRssToleranceKiB)
        << "RSS grew by " << (b.rssKiB - a.rssKiB) << " KiB over the cycles";
  }
}

class Leaks : public Test {};

// One cycle: n ranks (2..4) as threads create a communicator (by turns with each thread's
// papcclCommInitRank, papcclCommInitAll and a grouped init), run one small allreduce, destroy.
void InitDestroyCycle(int cycle) {
  const int n = 2 + cycle % 3;
  Options opt;
  static const Init inits[] = {Init::kInitRank, Init::kInitAll, Init::kGroupInit};
  opt.init = inits[(cycle / 3) % 3];
  opt.deadlineS = 60;
  RunThreads(
      n,
      [&](Rank& rk) {
        int32_t v = rk.rank + 1, sum = 0;
        ASSERT_EQ(papcclSuccess, papcclAllReduce(&v, &sum, 1, papcclInt32, papcclSum, rk.comm, 0))
            << papcclGetLastError(rk.comm);
        EXPECT_EQ(n * (n + 1) / 2, sum);
      },
      opt);
}

TEST_F(Leaks, InitDestroy) {
  for (int c = 0; c < kWarmup && !HasFailure(); c++)
    InitDestroyCycle(c);
  Usage start = Settle(0);
  double t0 = NowS();
  for (int c = 0; c < kCycles && !HasFailure(); c++)
    InitDestroyCycle(kWarmup + c);
  double seconds = NowS() - t0;
  Usage end = Settle(start.threads);
  Report("init/destroy", start, end, seconds, kCycles);
  ASSERT_FALSE(HasFailure());
  ExpectFlat(start, end);
}

// A barrier for the rank threads; rank 0 measures while the others wait in it.
class Barrier {
 public:
  explicit Barrier(int n) : n_(n) {}
  void Wait() {
    std::unique_lock<std::mutex> lock(mu_);
    long gen = gen_;
    if (++waiting_ == n_) {
      waiting_ = 0;
      gen_++;
      cv_.notify_all();
      return;
    }
    cv_.wait(lock, [&] { return gen != gen_; });
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  int n_, waiting_ = 0;
  long gen_ = 0;
};

TEST_F(Leaks, SplitDestroy) {
  const int n = 4;
  Barrier barrier(n);
  Usage start, end;
  double t0 = 0, seconds = 0;
  Options opt;
  opt.deadlineS = 240;
  RunThreads(
      n,
      [&](Rank& rk) {
        const int r = rk.rank;
        bool ok = true;
        for (int c = 0; c < kWarmup + kCycles; c++) {
          if (c == kWarmup) {  // every child of the warm-up is destroyed here
            barrier.Wait();
            if (r == 0) {
              start = Settle(0);
              t0 = NowS();
            }
            barrier.Wait();
          }
          if (!ok) continue;  // keep meeting the barrier, do nothing else
          // Halves, odd/even or everybody, by turns; rank 3 sits out every fourth cycle.
          int color = c % 3 == 0 ? r / 2 : c % 3 == 1 ? r % 2 : 0;
          if (c % 4 == 3 && r == 3) color = PAPCCL_SPLIT_NOCOLOR;
          papcclComm_t child = nullptr;
          papcclResult_t res = papcclCommSplit(rk.comm, color, n - r, &child, nullptr);
          if (res != papcclSuccess) {
            ADD_FAILURE() << "cycle " << c << " rank " << r << ": papcclCommSplit: " << res << " "
                          << papcclGetLastError(rk.comm);
            ok = false;
            continue;
          }
          if (child == nullptr) {
            if (color != PAPCCL_SPLIT_NOCOLOR) ADD_FAILURE() << "cycle " << c << ": no child";
            continue;
          }
          int32_t v = 1, sum = 0;
          res = papcclAllReduce(&v, &sum, 1, papcclInt32, papcclSum, child, 0);
          int cn = 0;
          EXPECT_EQ(papcclSuccess, papcclCommCount(child, &cn));
          if (res != papcclSuccess || sum != cn) {
            ADD_FAILURE() << "cycle " << c << " rank " << r << ": allreduce on the child: " << res
                          << " sum " << sum << " of " << cn << " " << papcclGetLastError(child);
            ok = false;
          }
          res = papcclCommDestroy(child);
          if (res != papcclSuccess) {
            ADD_FAILURE() << "cycle " << c << " rank " << r << ": papcclCommDestroy: " << res;
            ok = false;
          }
        }
        barrier.Wait();
        if (r == 0) {
          seconds = NowS() - t0;
          end = Settle(start.threads);
        }
        barrier.Wait();
      },
      opt);
  Report("split/destroy", start, end, seconds, kCycles);
  ASSERT_FALSE(HasFailure());
  ExpectFlat(start, end);
}

}  // namespace
}  // namespace papt
