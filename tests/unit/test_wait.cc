// SPDX-License-Identifier: Apache-2.0
// The one wait's expected events (papWaitExpect): the margin around a predicted arrival, polls
// inside it, sleeps that end where it starts.
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "internal/shim_wait.h"

namespace {

constexpr uint64_t kUs = 1000;
constexpr uint64_t kMs = 1000 * kUs;
constexpr uint64_t kT0 = 1000 * kMs;  // the wait's start, any time after boot

struct Answer {
  uint64_t from = 0, until = 0;
  std::vector<int> spin;
  std::vector<int64_t> slice;
};

Answer Expect(uint64_t spinNs, uint64_t inNs, const std::vector<uint64_t>& atOffsets,
              uint64_t spreadNs = 0) {
  Answer a;
  std::vector<uint64_t> times;
  for (uint64_t o : atOffsets)
    times.push_back(kT0 + o);
  a.spin.resize(times.size());
  a.slice.resize(times.size());
  papTestWaitExpect(spinNs, kT0, kT0 + inNs, spreadNs, &a.from, &a.until, times.data(),
                    (int)times.size(), a.spin.data(), a.slice.data());
  return a;
}

TEST(WaitExpect, NothingExpected) {
  Answer a = Expect(50 * kUs, 0, {10 * kUs, 60 * kUs});
  EXPECT_EQ(0u, a.from);
  EXPECT_EQ(0u, a.until);
  EXPECT_EQ(1, a.spin[0]);  // the budget
  EXPECT_EQ(0, a.spin[1]);  // past it: sleep
  EXPECT_EQ((int64_t)(100 * kMs), a.slice[1]);
}

TEST(WaitExpect, SoonExtendsTheSpinBudget) {
  // 40 us expected: the 200 us margin reaches past the 50 us budget.
  Answer a = Expect(50 * kUs, 40 * kUs, {10 * kUs, 60 * kUs, 230 * kUs, 250 * kUs});
  EXPECT_EQ(kT0 + 40 * kUs - 200 * kUs, a.from);  // the margin starts before the wait
  EXPECT_EQ(kT0 + 240 * kUs, a.until);
  EXPECT_EQ(1, a.spin[0]);
  EXPECT_EQ(1, a.spin[1]);
  EXPECT_EQ(1, a.spin[2]);
  EXPECT_EQ(0, a.spin[3]);
}

TEST(WaitExpect, MarginIsAnEighthWithinBounds) {
  struct {
    uint64_t in, lead;
  } cases[] = {{2 * kMs, 250 * kUs}, {500 * kUs, 200 * kUs}, {40 * kMs, 2 * kMs}};
  for (auto& c : cases) {
    Answer a = Expect(50 * kUs, c.in, {});
    EXPECT_EQ(kT0 + c.in - c.lead, a.from) << c.in;
    EXPECT_EQ(kT0 + c.in + c.lead, a.until) << c.in;
  }
}

TEST(WaitExpect, SpreadWidensTheMargin) {
  // 2 ms expected, the prediction's deviation 400 us: the margin is twice that (not 1/8 of
  // 2 ms), and still at most 2 ms; a small spread leaves the eighth.
  struct {
    uint64_t spread, lead;
  } cases[] = {{400 * kUs, 800 * kUs}, {5 * kMs, 2 * kMs}, {10 * kUs, 250 * kUs}};
  for (auto& c : cases) {
    Answer a = Expect(50 * kUs, 2 * kMs, {}, c.spread);
    EXPECT_EQ(kT0 + 2 * kMs - c.lead, a.from) << c.spread;
    EXPECT_EQ(kT0 + 2 * kMs + c.lead, a.until) << c.spread;
  }
}

TEST(WaitExpect, PollsInTheMarginAndSleepsUpToIt) {
  // 12 ms expected: margin 1.5 ms each side (10.5 to 13.5 ms).
  Answer a = Expect(50 * kUs, 12 * kMs, {1 * kMs, 10 * kMs, 11 * kMs, 13 * kMs, 14 * kMs});
  EXPECT_EQ(0, a.spin[0]);
  EXPECT_EQ((int64_t)(9500 * kUs), a.slice[0]);  // wakes where the margin starts
  EXPECT_EQ(0, a.spin[1]);
  EXPECT_EQ((int64_t)(500 * kUs), a.slice[1]);
  EXPECT_EQ(1, a.spin[2]);
  EXPECT_EQ(1, a.spin[3]);
  EXPECT_EQ(0, a.spin[4]);  // past the margin: sleep until rung
  EXPECT_EQ((int64_t)(100 * kMs), a.slice[4]);
}

}  // namespace
