// SPDX-License-Identifier: Apache-2.0
// The plan engine on a made-up backend: a send that the backend fails after it was posted,
// because the peer is gone (what UCX does when an endpoint times out under a send in flight);
// the order of a plan's first calls.
#include <gtest/gtest.h>

#include <string>

#include "internal/shim_engine.h"
#include "papccl.h"

namespace {

// Held sends (the arrival layer's setting): the failed send waits unposted like one to a
// peer known to be gone, no error comes out of the engine, and the caller's health check
// names the peer. Before, the backend's error came straight out ("ucx: a send failed").
TEST(Engine, SendFailedInFlightIsHeldWhenDeadSendsAreHeld) {
  int held = 0, posts = 0;
  EXPECT_EQ(papcclSuccess, papTestEngineSendFailsInFlight(1, &held, &posts));
  EXPECT_TRUE(held) << "the failed send must wait unposted";
  EXPECT_EQ(1, posts) << "nothing is posted again to a peer known to be gone";
}

// Without holding, the engine fails the op with papcclRemoteError (its WARN names the peer).
TEST(Engine, SendFailedInFlightFailsWhenNotHeld) {
  int held = 0, posts = 0;
  EXPECT_EQ(papcclRemoteError, papTestEngineSendFailsInFlight(0, &held, &posts));
  EXPECT_EQ(1, posts);
}

// A plan's first pass posts what can start before the backend's worker pass: a rank that
// comes late sends its data first, and reads what waited for it after. Before, the pass
// began with the worker pass ("pstrt"): over TCP the late rank read the peer's message
// before sending its own, and the peers waited 25-30 us longer for it (perf/README.md).
TEST(Engine, FirstPassPostsBeforeTheWorkerPass) {
  char log[64] = {0};
  ASSERT_EQ(papcclSuccess, papTestEngineCallOrder(log, sizeof(log)));
  std::string order(log);
  ASSERT_NE(std::string::npos, order.find('p')) << order;
  EXPECT_LT(order.find('s'), order.find('p')) << "calls: " << order;
  EXPECT_LT(order.find('r'), order.find('p')) << "calls: " << order;
}

}  // namespace
