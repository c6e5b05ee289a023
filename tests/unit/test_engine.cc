// SPDX-License-Identifier: Apache-2.0
// The plan engine on a made-up backend: a send that the backend fails after it was posted,
// because the peer is gone (what UCX does when an endpoint times out under a send in flight).
#include <gtest/gtest.h>

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

}  // namespace
