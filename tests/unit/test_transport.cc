// SPDX-License-Identifier: Apache-2.0
// The transport interface (docs/ARCHITECTURE.md section 5): every backend built has a
// consistent ops table (the required tables complete, each optional one NULL or complete,
// caps agreeing with the tables), by the test's own count of each table's members and by
// papTransportOpsCheck; and papTransportOpsCheck refuses each planted inconsistency.
#include <gtest/gtest.h>

#include <string>

#include "internal/shim_transport.h"

namespace {

const char* const kTable[PAP_TEST_TBL_COUNT] = {"lifecycle", "msg",  "wake", "live",
                                                "board",     "home", "local"};

TEST(TransportOps, EveryBackendHasAConsistentTable) {
  ASSERT_GE(papTestTransportCount(), 1);
  for (int i = 0; i < papTestTransportCount(); i++) {
    papTestTransportShape s;
    papTestTransportShapeOf(i, &s);
    SCOPED_TRACE(std::string("backend ") + (s.name ? s.name : "(no name)"));
    ASSERT_NE(nullptr, s.name);
    // Required: present and complete (msg: all but its two optional members).
    for (int t : {PAP_TEST_TBL_LIFE, PAP_TEST_TBL_WAKE, PAP_TEST_TBL_LIVE}) {
      EXPECT_TRUE(s.present[t]) << kTable[t];
      EXPECT_EQ(s.total[t], s.set[t]) << kTable[t] << " lacks a member";
    }
    ASSERT_TRUE(s.present[PAP_TEST_TBL_MSG]);
    EXPECT_EQ(s.total[PAP_TEST_TBL_MSG], s.set[PAP_TEST_TBL_MSG] + !s.msgProbe + !s.msgAbandon)
        << "msg lacks a required member";
    // Optional: NULL, or every member set.
    for (int t : {PAP_TEST_TBL_BOARD, PAP_TEST_TBL_HOME, PAP_TEST_TBL_LOCAL}) {
      EXPECT_EQ(s.present[t] ? s.total[t] : 0, s.set[t]) << kTable[t] << " is partly filled";
    }
    // Caps agree with the tables.
    EXPECT_EQ(s.anySource != 0, s.msgProbe != 0) << "caps.anySource against msg->probe";
    EXPECT_FALSE(s.present[PAP_TEST_TBL_BOARD] && s.present[PAP_TEST_TBL_HOME])
        << "both a board and a home table";
    if (s.present[PAP_TEST_TBL_HOME]) {
      EXPECT_TRUE(s.remoteBoard) << "a message board lives in rank 0's process";
      EXPECT_TRUE(s.idleProgress) << "rank 0 serves its message board in progress";
    }
    // The library's own check agrees.
    char why[200] = "";
    EXPECT_EQ(0, papTestTransportCheck(i, why, sizeof(why))) << why;
  }
}

TEST(TransportOps, TheCheckRefusesEachPlantedInconsistency) {
  const char* const names[PAP_TEST_PLANT_COUNT] = {"caps.anySource flipped",
                                                   "no msg table",
                                                   "wake->notify missing",
                                                   "live->depart missing",
                                                   "no finalize",
                                                   "an optional table with a hole",
                                                   "both board and home",
                                                   "a home without caps.remoteBoard"};
  int planted = 0;
  for (int i = 0; i < papTestTransportCount(); i++) {
    papTestTransportShape s;
    papTestTransportShapeOf(i, &s);
    for (int p = 0; p < PAP_TEST_PLANT_COUNT; p++) {
      SCOPED_TRACE(std::string(s.name) + ": " + names[p]);
      char why[200] = "";
      int r = papTestTransportCheckPlanted(i, p, why, sizeof(why));
      if (r == 1) continue;  // this plant does not apply to this backend (no such table)
      planted++;
      EXPECT_EQ(-1, r);
      EXPECT_NE(std::string::npos, std::string(why).find(s.name)) << "why: '" << why << "'";
    }
  }
  // shm alone has 7 that apply (no home table to strip of caps.remoteBoard).
  EXPECT_GE(planted, 7);
}

}  // namespace
