// SPDX-License-Identifier: Apache-2.0
// Arrival-pattern injection (perf/arrival.c): parsing, the delays of each pattern, traces.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <ctime>
#include <string>

#include "perf/arrival.h"

namespace {

struct Arr {
  papPerfArrival a;
  char err[256];
  Arr() {
    memset(&a, 0, sizeof(a));
    err[0] = 0;
  }
  ~Arr() {
    papPerfArrivalFree(&a);
  }
  int Parse(const char* text, double skew = 1000) {
    a.skewUs = skew;
    return papPerfArrivalParse(text, &a, err, sizeof(err));
  }
  double D(int rank, int n, long iter = 0) {
    return papPerfArrivalDelayUs(&a, rank, n, iter);
  }
};

std::string WriteFile(const std::string& text) {
  char path[] = "/tmp/papccl-arrival-XXXXXX";
  int fd = mkstemp(path);
  EXPECT_GE(fd, 0);
  EXPECT_EQ((ssize_t)text.size(), write(fd, text.data(), text.size()));
  close(fd);
  return path;
}

TEST(Arrival, FixedPatterns) {
  Arr x;
  ASSERT_EQ(0, x.Parse("balanced"));
  for (int r = 0; r < 4; r++)
    EXPECT_EQ(0, x.D(r, 4));
  ASSERT_EQ(0, x.Parse("late"));
  EXPECT_EQ(0, x.D(0, 4));
  EXPECT_EQ(1000, x.D(3, 4));
  ASSERT_EQ(0, x.Parse("late:1"));
  EXPECT_EQ(1000, x.D(1, 4));
  EXPECT_EQ(0, x.D(3, 4));
  ASSERT_EQ(0, x.Parse("late-k:2"));
  EXPECT_EQ(0, x.D(1, 4));
  EXPECT_EQ(1000, x.D(2, 4));
  EXPECT_EQ(1000, x.D(3, 4));
  ASSERT_EQ(0, x.Parse("staircase", 3000));
  for (int r = 0; r < 4; r++)
    EXPECT_DOUBLE_EQ(1000.0 * r, x.D(r, 4));
  ASSERT_EQ(0, x.Parse("together", 2000));
  for (int r = 0; r < 4; r++)
    EXPECT_EQ(2000, x.D(r, 4)) << "every rank does the same work before the call";
}

double ThreadCpuSeconds() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

// A late rank in a benchmark computes: it holds its core for the whole delay, so waiting ranks
// cannot borrow it. Its CPU time is most of the wall time (a share of at least 20% allows for
// a loaded machine); a sleeping wait, right for tests, uses almost none.
TEST(Arrival, ComputeHoldsTheCoreDelaySleeps) {
  double w0 = papPerfNow(), c0 = ThreadCpuSeconds();
  papPerfComputeUs(20000);
  double wall = papPerfNow() - w0, cpu = ThreadCpuSeconds() - c0;
  EXPECT_GE(wall, 0.020);
  EXPECT_GE(cpu, 0.2 * wall) << "computing for 20 ms used " << cpu * 1e3 << " ms of CPU";
  w0 = papPerfNow(), c0 = ThreadCpuSeconds();
  papPerfDelayUs(20000);
  wall = papPerfNow() - w0, cpu = ThreadCpuSeconds() - c0;
  EXPECT_GE(wall, 0.020);
  EXPECT_LT(cpu, 0.2 * wall) << "a sleeping delay of 20 ms used " << cpu * 1e3 << " ms of CPU";
}

TEST(Arrival, RandomPatternsAreBoundedAndReproducible) {
  for (const char* pat : {"uniform", "normal"}) {
    Arr x, y;
    ASSERT_EQ(0, x.Parse(pat, 2000));
    ASSERT_EQ(0, y.Parse(pat, 2000));
    double sum = 0, mn = 1e9, mx = -1;
    int n = 0;
    for (long it = 0; it < 200; it++) {
      for (int r = 0; r < 8; r++) {
        double d = x.D(r, 8, it);
        EXPECT_EQ(d, y.D(r, 8, it)) << pat << ": same seed, same delay";
        EXPECT_GE(d, 0);
        EXPECT_LE(d, 2000);
        sum += d;
        mn = d < mn ? d : mn;
        mx = d > mx ? d : mx;
        n++;
      }
    }
    EXPECT_NEAR(1000, sum / n, 150) << pat << ": the mean is about skew/2";
    EXPECT_GT(mx - mn, 1000) << pat << ": the delays spread";
    EXPECT_NE(x.D(0, 8, 0), x.D(1, 8, 0)) << pat << ": ranks draw different delays";
  }
}

TEST(Arrival, TraceFile) {
  std::string p = WriteFile("# recorded\n0 100 200\n\n300, 0, 5.5  # comment\n");
  Arr x;
  ASSERT_EQ(0, x.Parse(("trace:" + p).c_str())) << x.err;
  EXPECT_EQ(2, x.a.traceRows);
  EXPECT_EQ(3, x.a.traceCols);
  EXPECT_EQ(100, x.D(1, 3, 0));
  EXPECT_EQ(300, x.D(0, 3, 1));
  EXPECT_EQ(5.5, x.D(2, 3, 1));
  EXPECT_EQ(200, x.D(2, 3, 2)) << "calls cycle through the rows";
  EXPECT_EQ(0, x.D(5, 6, 0)) << "ranks past the trace's columns are not delayed";
  unlink(p.c_str());
}

TEST(Arrival, BadInputIsRejectedWithAReason) {
  Arr x;
  const char* bad[] = {"",       "sideways", "late:",   "late:-1",
                       "late:x", "late-k:0", "late-k:", "trace:/nonexistent/papccl-trace"};
  for (const char* b : bad) {
    EXPECT_EQ(-1, x.Parse(b)) << "'" << b << "' was accepted";
    EXPECT_NE('\0', x.err[0]) << "'" << b << "': no reason given";
  }
  for (const char* body : {"1 2\n3\n", "1 -5\n", "1 abc\n", "# nothing\n", "1 1e99\n"}) {
    std::string p = WriteFile(body);
    EXPECT_EQ(-1, x.Parse(("trace:" + p).c_str())) << "trace '" << body << "' was accepted";
    EXPECT_NE(nullptr, strstr(x.err, p.c_str())) << x.err;
    unlink(p.c_str());
  }
}

}  // namespace
