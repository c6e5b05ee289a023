// SPDX-License-Identifier: Apache-2.0
// Suspending a communicator (papcclCommSuspend, papcclCommResume) and its memory statistics
// (papcclCommMemStats), 4 ranks as threads and as processes: checked allreduces, then the
// statistics against the comm's own allocations (read from its raw fields and from the
// process's mappings, tests/internal/shim_comm.c), suspension releasing exactly what it
// reported as releasable, operations refused while suspended, resumption and checked
// allreduces again; the bad calls, each with its WARN.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "internal/shim_comm.h"
#include "multirank/harness.h"

namespace papt {
namespace {

class Suspend : public Test, public ::testing::WithParamInterface<Mode> {};

struct Stats {
  uint64_t suspend = 0, suspended = 0, persist = 0, total = 0;
};

Stats Read(papcclComm_t comm) {
  Stats s;
  EXPECT_EQ(papcclSuccess, papcclCommMemStats(comm, papcclStatMemSuspend, &s.suspend));
  EXPECT_EQ(papcclSuccess, papcclCommMemStats(comm, papcclStatMemSuspended, &s.suspended));
  EXPECT_EQ(papcclSuccess, papcclCommMemStats(comm, papcclStatMemPersist, &s.persist));
  EXPECT_EQ(papcclSuccess, papcclCommMemStats(comm, papcclStatMemTotal, &s.total));
  EXPECT_EQ(s.total, s.suspend + s.persist);
  return s;
}

// What MemStats must say, from the comm's allocations: the engine's step array and scratch
// are released by a suspension; this rank's shared segment is kept (peers map it). On one
// host with device buffers unused, these are all it holds.
void ExpectHonest(papcclComm_t comm, const Stats& s, const std::string& what) {
  EXPECT_EQ(papTestCommEngineBytes(comm), s.suspend) << what;
  int64_t seg = papTestCommShmSegBytes(comm);
  ASSERT_GT(seg, 0) << what << ": no shared segment of this rank is mapped";
  EXPECT_EQ((uint64_t)seg, s.persist) << what;
}

TEST_P(Suspend, ReleasesAndResumes) {
  RunRanks(GetParam(), 4, [](Rank& rk) {
    papcclComm_t comm = rk.comm;
    CheckedAllReduces(comm, rk.rank, rk.nranks, 6, "before");
    Stats before = Read(comm);
    EXPECT_EQ(0u, before.suspended);
    EXPECT_GT(before.suspend, 0u);
    ExpectHonest(comm, before, "before suspending");

    ASSERT_EQ(papcclSuccess, papcclCommSuspend(comm, PAPCCL_SUSPEND_MEM))
        << papcclGetLastError(comm);
    Stats during = Read(comm);
    EXPECT_EQ(1u, during.suspended);
    EXPECT_EQ(0u, during.suspend);
    EXPECT_EQ(before.persist, during.persist);
    EXPECT_EQ(before.total - before.suspend, during.total) << "released exactly the releasable";
    ExpectHonest(comm, during, "suspended");
    if (rk.rank == 0)
      printf(
          "rank 0 of %d (%s): before suspending %llu bytes releasable, %llu kept; suspended "
          "%llu and %llu\n",
          rk.nranks, ModeName(rk.mode), (unsigned long long)before.suspend,
          (unsigned long long)before.persist, (unsigned long long)during.suspend,
          (unsigned long long)during.persist);

    // Operations are refused while suspended; queries still answer.
    std::vector<float> b(16, 1.f);
    EXPECT_BAD(papcclInvalidUsage, "suspended", comm,
               papcclAllReduce(b.data(), b.data(), 16, papcclFloat32, papcclSum, comm, nullptr));
    EXPECT_BAD(papcclInvalidUsage, "suspended", comm,
               papcclBroadcast(b.data(), b.data(), 16, papcclFloat32, 0, comm, nullptr));
    EXPECT_BAD(papcclInvalidUsage, "suspended", comm,
               papcclSend(b.data(), 16, papcclFloat32, (rk.rank + 1) % rk.nranks, comm, nullptr));
    EXPECT_BAD(papcclInvalidUsage, "suspended already", comm,
               papcclCommSuspend(comm, PAPCCL_SUSPEND_MEM));
    int count = 0;
    EXPECT_EQ(papcclSuccess, papcclCommCount(comm, &count));
    EXPECT_EQ(rk.nranks, count);

    ASSERT_EQ(papcclSuccess, papcclCommResume(comm)) << papcclGetLastError(comm);
    Stats resumed = Read(comm);
    EXPECT_EQ(0u, resumed.suspended);
    EXPECT_GT(resumed.suspend, 0u) << "the plan steps come back at resume";
    ExpectHonest(comm, resumed, "resumed");
    EXPECT_BAD(papcclInvalidUsage, "not suspended", comm, papcclCommResume(comm));
    CheckedAllReduces(comm, rk.rank, rk.nranks, 6, "after resuming");
    Stats after = Read(comm);
    ExpectHonest(comm, after, "after the allreduces");

    // A second round: suspension is repeatable.
    ASSERT_EQ(papcclSuccess, papcclCommSuspend(comm, PAPCCL_SUSPEND_MEM));
    EXPECT_EQ(0u, Read(comm).suspend);
    ASSERT_EQ(papcclSuccess, papcclCommResume(comm));
    CheckedAllReduces(comm, rk.rank, rk.nranks, 3, "after the second resumption");
  });
}

TEST_P(Suspend, BadCalls) {
  RunRanks(GetParam(), 4, [](Rank& rk) {
    papcclComm_t comm = rk.comm;
    uint64_t v = 7;
    EXPECT_BAD(papcclInvalidArgument, "value is NULL", comm,
               papcclCommMemStats(comm, papcclStatMemTotal, nullptr));
    EXPECT_BAD(papcclInvalidArgument, "unknown stat", comm,
               papcclCommMemStats(comm, (papcclCommMemStat_t)4, &v));
    EXPECT_BAD(papcclInvalidArgument, "unknown stat", comm,
               papcclCommMemStats(comm, (papcclCommMemStat_t)-1, &v));
    EXPECT_EQ(7u, v);
    EXPECT_BAD(papcclInvalidArgument, "unknown flags", comm, papcclCommSuspend(comm, 0x2));
    EXPECT_BAD(papcclInvalidUsage, "not suspended", comm, papcclCommResume(comm));
    // flags 0 suspends nothing, as NCCL.
    EXPECT_EQ(papcclSuccess, papcclCommSuspend(comm, 0));
    EXPECT_EQ(papcclSuccess, papcclCommMemStats(comm, papcclStatMemSuspended, &v));
    EXPECT_EQ(0u, v);
    {
      ExpectWarn w({"comm is NULL"});
      EXPECT_EQ(papcclInvalidArgument, papcclCommSuspend(nullptr, PAPCCL_SUSPEND_MEM));
      EXPECT_EQ(papcclInvalidArgument, papcclCommResume(nullptr));
      EXPECT_EQ(papcclInvalidArgument, papcclCommMemStats(nullptr, papcclStatMemTotal, &v));
      EXPECT_EQ(3, w.Count("comm is NULL"));
    }
    // Inside a group: refused.
    ASSERT_EQ(papcclSuccess, papcclGroupStart());
    EXPECT_BAD(papcclInvalidUsage, "not inside a group", comm,
               papcclCommSuspend(comm, PAPCCL_SUSPEND_MEM));
    ASSERT_EQ(papcclSuccess, papcclGroupEnd());
    CheckedAllReduces(comm, rk.rank, rk.nranks, 3, "after the bad calls");
  });
}

// A non-blocking comm: suspension waits for the queued allreduce, whose result is there
// when it returns, without polling.
TEST(SuspendNonBlocking, WaitsForQueuedOperations) {
  Options opt;
  opt.makeComm = false;
  RunThreads(
      4,
      [](Rank& rk) {
        papcclConfig_t cfg = PAPCCL_CONFIG_INITIALIZER;
        cfg.blocking = 0;
        papcclComm_t comm = nullptr;
        papcclResult_t res = papcclCommInitRankConfig(&comm, rk.nranks, rk.id, rk.rank, &cfg);
        ASSERT_TRUE(res == papcclInProgress || res == papcclSuccess) << res;
        papcclResult_t st = papcclInProgress;
        while (st == papcclInProgress)
          ASSERT_EQ(papcclSuccess, papcclCommGetAsyncError(comm, &st));
        ASSERT_EQ(papcclSuccess, st);
        const size_t count = size_t(1) << 18;
        std::vector<float> buf(count, (float)(rk.rank + 1));
        res =
            papcclAllReduce(buf.data(), buf.data(), count, papcclFloat32, papcclSum, comm, nullptr);
        ASSERT_TRUE(res == papcclInProgress || res == papcclSuccess) << res;
        ASSERT_EQ(papcclSuccess, papcclCommSuspend(comm, PAPCCL_SUSPEND_MEM));
        ASSERT_EQ(papcclSuccess, papcclCommGetAsyncError(comm, &st));
        EXPECT_EQ(papcclSuccess, st) << "the queued allreduce ended before the suspension";
        const float want = (float)(rk.nranks * (rk.nranks + 1) / 2);
        size_t bad = 0;
        for (size_t i = 0; i < count; i++)
          bad += buf[i] != want;
        EXPECT_EQ(0u, bad) << "rank " << rk.rank;
        uint64_t v = 1;
        EXPECT_EQ(papcclSuccess, papcclCommMemStats(comm, papcclStatMemSuspend, &v));
        EXPECT_EQ(0u, v);
        EXPECT_EQ(papcclSuccess, papcclCommResume(comm));
        EXPECT_EQ(papcclSuccess, papcclCommDestroy(comm));
      },
      opt);
}

INSTANTIATE_TEST_SUITE_P(Modes, Suspend, ::testing::Values(Mode::kThreads, Mode::kProcesses),
                         [](const ::testing::TestParamInfo<Mode>& i) {
                           return std::string(ModeName(i.param));
                         });

}  // namespace
}  // namespace papt
