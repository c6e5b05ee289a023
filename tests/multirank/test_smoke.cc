// SPDX-License-Identifier: Apache-2.0
// Smoke test: threads-as-ranks allreduce through the public API.
#include <gtest/gtest.h>

#include <thread>
#include <vector>

#include "papccl.h"

TEST(Smoke, AllReduceThreads) {
  for (int n : {1, 2, 3, 4}) {
    for (size_t count : {size_t(0), size_t(1), size_t(7), size_t(1000003)}) {
      std::vector<papcclComm_t> comms(n);
      ASSERT_EQ(papcclSuccess, papcclCommInitAll(comms.data(), n, nullptr));
      std::vector<std::thread> th;
      std::vector<int> ok(n, 0);
      for (int r = 0; r < n; r++) {
        th.emplace_back([&, r] {
          std::vector<float> in(count), out(count, -1.f);
          for (size_t i = 0; i < count; i++)
            in[i] = float((i % 100) + r);
          papcclResult_t res = papcclAllReduce(in.data(), out.data(), count, papcclFloat32,
                                               papcclSum, comms[r], nullptr);
          bool good = res == papcclSuccess;
          for (size_t i = 0; i < count && good; i++) {
            float want = float(n * (i % 100) + n * (n - 1) / 2);
            if (out[i] != want) good = false;
          }
          ok[r] = good;
        });
      }
      for (auto& t : th)
        t.join();
      for (int r = 0; r < n; r++)
        EXPECT_TRUE(ok[r]) << "n=" << n << " count=" << count << " r=" << r;
      for (int r = 0; r < n; r++)
        EXPECT_EQ(papcclSuccess, papcclCommDestroy(comms[r]));
    }
  }
}
