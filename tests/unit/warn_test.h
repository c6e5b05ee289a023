// SPDX-License-Identifier: Apache-2.0
// Base fixture of the one-process unit tests: records every WARN the library logs while a
// test runs; a WARN the test did not take (Take) fails it at TearDown.
#ifndef PAPCCL_TESTS_UNIT_WARN_TEST_H_
#define PAPCCL_TESTS_UNIT_WARN_TEST_H_

#include <gtest/gtest.h>

#include <mutex>
#include <string>
#include <vector>

#include "internal/shim_comm.h"

class WarnRecordingTest : public ::testing::Test {
 protected:
  void SetUp() override {
    papTestCommSetWarnHook(&WarnRecordingTest::Hook, this);
  }
  void TearDown() override {
    papTestCommSetWarnHook(nullptr, nullptr);
    for (const auto& m : warns_)
      ADD_FAILURE() << "unexpected WARN: " << m;
  }
  // Takes the WARNs logged so far (they are then expected).
  std::vector<std::string> Take() {
    std::lock_guard<std::mutex> lock(mu_);
    std::vector<std::string> out;
    out.swap(warns_);
    return out;
  }

 private:
  static void Hook(const char* msg, void* arg) {
    WarnRecordingTest* self = static_cast<WarnRecordingTest*>(arg);
    std::lock_guard<std::mutex> lock(self->mu_);
    self->warns_.push_back(msg ? msg : "");
  }
  std::mutex mu_;
  std::vector<std::string> warns_;
};

#endif  // PAPCCL_TESTS_UNIT_WARN_TEST_H_
