// SPDX-License-Identifier: Apache-2.0
// The selector (docs/PAP-ENGINE.md section 3) fed with made-up observations of one size
// bucket: start-up samples feed no estimate, the modelled gain switches to PAP plans, a PAP
// mode that measures no better than classic goes back and is retried later, less often each
// time it fails.
#include <gtest/gtest.h>

#include <cstddef>
#include <memory>
#include <vector>

#include "internal/shim_select.h"

namespace {

constexpr size_t k64K = 64 << 10;  // AC2S's size range; its modelled gain needs q > ~11 us

struct Sel {
  std::unique_ptr<papTestSel, void (*)(papTestSel*)> s{papTestSelNew(4), papTestSelFree};
  int calls = 0;
  int mode = 0;
  // n calls observed with this skew and tail; each runs the mode the selector is in. Returns
  // the call (1-based) at which the mode changed, or 0.
  int Run(int n, double skewUs, double tailClassicUs, double tailPapUs) {
    int changed = 0;
    for (int i = 0; i < n; i++) {
      int was = mode;
      calls++;
      mode = papTestSelObserve(s.get(), k64K, skewUs, was ? tailPapUs : tailClassicUs, was);
      if (mode != was && changed == 0) changed = calls;
    }
    return changed;
  }
};

// Each test starts with a fresh selector of 4 ranks.
class Selector : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_NE(nullptr, sel.s.get());
  }
  Sel sel;
};

TEST_F(Selector, StartUpSamplesDoNotSwitch) {
  // The first calls after init: 2 ms of skew (page faults, first use of the transport).
  EXPECT_EQ(0, sel.Run(4, 2000, 1500, 1500));
  // Then balanced: the skew estimate starts here, so no switch.
  EXPECT_EQ(0, sel.Run(60, 2, 50, 50));
  EXPECT_EQ(0, sel.mode);
}

TEST_F(Selector, SwitchesOnModelledGainAndBackOnMeasuredTail) {
  sel.Run(4, 100, 50, 50);  // start-up
  // 100 us of steady skew: the model gains; checks every 4 calls, the second positive one
  // switches.
  EXPECT_EQ(12, sel.Run(8, 100, 50, 400));
  int wait = 0;
  EXPECT_GE(papTestSelChoice(sel.s.get(), k64K, &wait), 3);  // AC2S or later: a PAP plan
  EXPECT_EQ(1, wait);
  // The PAP plan measures 400 us after the last arrival against 50 us classic: back at the
  // first check with 8 PAP samples.
  EXPECT_EQ(20, sel.Run(8, 100, 50, 400));
  EXPECT_EQ(0, sel.mode);
  EXPECT_LT(papTestSelChoice(sel.s.get(), k64K, &wait), 3);
  EXPECT_EQ(0, wait);
  // The model still says gain, but the next try waits 32 calls.
  EXPECT_EQ(0, sel.Run(31, 100, 50, 400));
  EXPECT_EQ(52, sel.Run(1, 100, 50, 400));
  // It fails again: the wait doubles.
  EXPECT_EQ(60, sel.Run(8, 100, 50, 400));
  EXPECT_EQ(0, sel.Run(63, 100, 50, 400));
  EXPECT_EQ(124, sel.Run(1, 100, 50, 400));
  // This time the PAP plan pays (20 us against 50): it stays.
  EXPECT_EQ(0, sel.Run(200, 100, 50, 20));
  EXPECT_EQ(1, sel.mode);
}

TEST_F(Selector, PapModeThatPaysStaysAndLaterRetreatsRetrySoon) {
  sel.Run(4, 100, 50, 50);
  EXPECT_EQ(12, sel.Run(8, 100, 50, 20));
  EXPECT_EQ(0, sel.Run(40, 100, 50, 20));  // pays: stays
  // The host changes and the plan stops paying: back, and the next try comes after the
  // first wait (32 calls) again, since the last try had paid.
  int back = 0;
  for (int i = 0; i < 40 && back == 0; i++)
    back = sel.Run(1, 100, 50, 400);
  ASSERT_GT(back, 0);
  EXPECT_EQ(0, sel.mode);
  EXPECT_EQ(back + 32, sel.Run(40, 100, 50, 400));
}

TEST_F(Selector, BalancedArrivalsNeverSwitch) {
  EXPECT_EQ(0, sel.Run(200, 3, 50, 50));
}

TEST_F(Selector, TwoRanksNeverSwitch) {  // its own selector, of 2 ranks
  std::unique_ptr<papTestSel, void (*)(papTestSel*)> s{papTestSelNew(2), papTestSelFree};
  ASSERT_NE(nullptr, s.get());
  for (int i = 0; i < 100; i++)
    EXPECT_EQ(0, papTestSelObserve(s.get(), k64K, 5000, 50, 0));
}

// On a message board (docs/PAP-ENGINE.md section 10) balanced calls of a classic size ask the
// decider ever less often: after each classic verdict the gap to the next probe doubles, from
// PAPCCL_PAP_PROBE (4) to 16 times it; a PAP-aware verdict starts it over at 4.
TEST(SelectorProbe, BalancedProbesBackOffAndAPapVerdictResets) {
  std::unique_ptr<papTestSel, void (*)(papTestSel*)> s{papTestSelNew(4), papTestSelFree};
  ASSERT_NE(nullptr, s.get());
  std::vector<int> probes;
  for (int k = 0; k < 400; k++)
    if (papTestSelBoardCall(s.get(), 8, 0)) probes.push_back(k);
  const std::vector<int> want = {0, 4, 12, 28, 60, 124, 188, 252, 316, 380};
  EXPECT_EQ(want, probes);
  // A probe that commits a PAP-aware plan keeps every call on the board until one commits
  // classic again; then the gaps start over at 4.
  int k = 400;
  while (!papTestSelBoardCall(s.get(), 8, 1))
    k++;
  EXPECT_EQ(444, k);  // the next probe after 380
  EXPECT_EQ(1, papTestSelBoardCall(s.get(), 8, 0));  // PAP mode: this call asks too
  probes.clear();
  for (int j = 0; j < 20; j++)
    if (papTestSelBoardCall(s.get(), 8, 0)) probes.push_back(j);
  EXPECT_EQ((std::vector<int>{3, 11}), probes);  // 4 after the last board call, then 8
}

}  // namespace
