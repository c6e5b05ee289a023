// SPDX-License-Identifier: Apache-2.0
// Non-blocking communicators (config.blocking = 0): init and operations return
// papcclInProgress and complete on the progress thread; papcclCommGetAsyncError reports
// papcclInProgress until then. Also papcclCommFinalize as a collective flush.
#include <gtest/gtest.h>

#include <chrono>
#include <thread>
#include <vector>

#include "papccl.h"

namespace {

// Polls until the comm leaves papcclInProgress; returns the final state.
papcclResult_t waitComm(papcclComm_t comm) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  papcclResult_t st = papcclInProgress;
  while (std::chrono::steady_clock::now() < deadline) {
    if (papcclCommGetAsyncError(comm, &st) != papcclSuccess) return papcclInternalError;
    if (st != papcclInProgress) return st;
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  return papcclInProgress;
}

// Runs body(rank, comm) on n threads, each with a non-blocking comm whose init completed;
// checks every body returned true, then destroys the comms.
template <typename Body>
void runNonBlocking(int n, Body body) {
  papcclUniqueId id;
  ASSERT_EQ(papcclSuccess, papcclGetUniqueId(&id));
  std::vector<papcclComm_t> comms(n, nullptr);
  std::vector<int> ok(n, 0);
  std::vector<std::thread> th;
  for (int r = 0; r < n; r++) {
    th.emplace_back([&, r] {
      papcclConfig_t cfg = PAPCCL_CONFIG_INITIALIZER;
      cfg.blocking = 0;
      // A non-blocking init hands its work to the progress thread: it is in progress.
      papcclResult_t res = papcclCommInitRankConfig(&comms[r], n, id, r, &cfg);
      EXPECT_EQ(papcclInProgress, res) << "rank " << r << ": non-blocking init";
      if (res != papcclInProgress && res != papcclSuccess) return;
      const papcclResult_t st = waitComm(comms[r]);
      EXPECT_EQ(papcclSuccess, st) << "rank " << r << ": init did not complete";
      if (st != papcclSuccess) return;
      ok[r] = body(r, comms[r]);
    });
  }
  for (auto& t : th)
    t.join();
  for (int r = 0; r < n; r++)
    EXPECT_TRUE(ok[r]) << "rank " << r;
  for (int r = 0; r < n; r++) {
    if (comms[r]) {
      EXPECT_EQ(papcclSuccess, papcclCommDestroy(comms[r]));
    }
  }
}

}  // namespace

TEST(NonBlocking, InitAndAllReduceCompleteAsynchronously) {
  const int n = 3;
  runNonBlocking(n, [n](int r, papcclComm_t comm) {
    const size_t count = 100003;
    std::vector<int32_t> in(count), out(count, -1);
    for (size_t i = 0; i < count; i++)
      in[i] = int32_t(i % 1000) * (r + 1);
    papcclResult_t res =
        papcclAllReduce(in.data(), out.data(), count, papcclInt32, papcclSum, comm, nullptr);
    EXPECT_EQ(papcclInProgress, res) << "rank " << r << ": allreduce on a non-blocking comm";
    const papcclResult_t st = waitComm(comm);
    EXPECT_EQ(papcclSuccess, st) << "rank " << r << ": the allreduce did not complete";
    if ((res != papcclInProgress && res != papcclSuccess) || st != papcclSuccess) return false;
    for (size_t i = 0; i < count; i++)
      if (out[i] != int32_t(i % 1000) * (n * (n + 1) / 2)) return false;
    return true;
  });
}

TEST(NonBlocking, GroupedOpsReturnInProgressThenComplete) {
  const int n = 2;
  runNonBlocking(n, [n](int r, papcclComm_t comm) {
    std::vector<float> a(1000, float(r + 1)), b(1000, 0.f), c(1000 * n, 0.f);
    // Inside a group the calls are only recorded (success); the group's end queues them on
    // the progress thread (in progress).
    EXPECT_EQ(papcclSuccess, papcclGroupStart()) << "rank " << r;
    EXPECT_EQ(papcclSuccess,
              papcclAllReduce(a.data(), b.data(), 1000, papcclFloat32, papcclMax, comm, nullptr))
        << "rank " << r << ": grouped allreduce";
    EXPECT_EQ(papcclSuccess,
              papcclAllGather(a.data(), c.data(), 1000, papcclFloat32, comm, nullptr))
        << "rank " << r << ": grouped allgather";
    papcclResult_t res = papcclGroupEnd();
    EXPECT_EQ(papcclInProgress, res) << "rank " << r << ": the group's end on a non-blocking comm";
    const papcclResult_t st = waitComm(comm);
    EXPECT_EQ(papcclSuccess, st) << "rank " << r << ": the group did not complete";
    if ((res != papcclInProgress && res != papcclSuccess) || st != papcclSuccess) return false;
    for (int i = 0; i < 1000; i++)
      if (b[i] != float(n)) return false;
    for (int p = 0; p < n; p++)
      for (int i = 0; i < 1000; i++)
        if (c[p * 1000 + i] != float(p + 1)) return false;
    return true;
  });
}

TEST(Finalize, CollectiveFlushThenDestroy) {
  const int n = 4;
  std::vector<papcclComm_t> comms(n);
  ASSERT_EQ(papcclSuccess, papcclCommInitAll(comms.data(), n, nullptr));
  std::vector<papcclResult_t> fin(n, papcclInternalError), after(n, papcclSuccess);
  std::vector<std::thread> th;
  for (int r = 0; r < n; r++) {
    th.emplace_back([&, r] {
      int x = r, y = 0;
      if (papcclAllReduce(&x, &y, 1, papcclInt32, papcclSum, comms[r], nullptr) != papcclSuccess)
        return;
      fin[r] = papcclCommFinalize(comms[r]);
      // After finalize the comm takes no new work.
      after[r] = papcclAllReduce(&x, &y, 1, papcclInt32, papcclSum, comms[r], nullptr);
    });
  }
  for (auto& t : th)
    t.join();
  for (int r = 0; r < n; r++) {
    EXPECT_EQ(papcclSuccess, fin[r]) << "rank " << r;
    EXPECT_EQ(papcclInvalidUsage, after[r]) << "rank " << r;
    EXPECT_EQ(papcclSuccess, papcclCommDestroy(comms[r]));
  }
}
